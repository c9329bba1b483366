/* gemtrain: result codes and the per-context error message.
 *
 * Every fallible function returns a gt_rc. When it fails it also writes one
 * line for the user into a gt_err the caller owns (never a global), naming the
 * key, file or tensor, what was expected and what was found. */
#ifndef GEMTRAIN_COMMON_H
#define GEMTRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_rc {
  GT_OK = 0,
  GT_ERR_ARG,     /* bad argument to an API call */
  GT_ERR_CONFIG,  /* configuration refused */
  GT_ERR_IO,      /* file system */
  GT_ERR_FORMAT,  /* a file's contents are malformed */
  GT_ERR_NOMEM,   /* allocation failed */
  GT_ERR_PLAN,    /* the memory plan does not fit */
  GT_ERR_NUMERIC, /* non-finite loss or gradient */
  GT_ERR_INTERNAL
} gt_rc;

#define GT_ERR_MSG_MAX 1024

typedef struct gt_err {
  gt_rc rc;
  char msg[GT_ERR_MSG_MAX];
} gt_err;

/* Record an error (printf-style) and return rc. err may be NULL. */
gt_rc gt_err_set(gt_err *err, gt_rc rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gt_err_clear(gt_err *err);
const char *gt_rc_name(gt_rc rc);
/* mkdir -p: creates path and its parents. `who` prefixes the error line
 * ("train", "sweep"); a path that exists but is not a directory is refused. */
gt_rc gt_mkdirs(const char *path, const char *who, gt_err *err);
/* Reads a whole file into a malloc'd buffer (*n bytes, NUL-terminated; the
 * caller frees). Errors read "<who> '<path>' cannot be opened: <reason>". */
gt_rc gt_read_file(const char *path, const char *who, char **buf, size_t *n, gt_err *err);
const char *gt_version(void);
/* splitmix64: the next 64 random bits of a seeded stream (state advances).
 * The one generator behind initialisation, data order and sampling. */
uint64_t gt_splitmix64(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif
