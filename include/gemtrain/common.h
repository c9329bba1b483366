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

/* What the shared library exports: the functions of this API, nothing else
 * (libgemtrain is built with hidden visibility). */
#if defined(__GNUC__)
#define GT_API __attribute__((visibility("default")))
#else
#define GT_API
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

/* The version of these headers; gt_version() is the library's, and a
 * program runs with the library of the version it was compiled against
 * (docs/library.md). GT_VERSION_NUMBER is major * 10000 + minor * 100 +
 * patch, for #if. CMakeLists.txt reads the three lines below. */
#define GT_VERSION_MAJOR 0
#define GT_VERSION_MINOR 2
#define GT_VERSION_PATCH 0
#define GT_VERSION_NUMBER (GT_VERSION_MAJOR * 10000 + GT_VERSION_MINOR * 100 + GT_VERSION_PATCH)

/* The library's version as "major.minor.patch" ("0.2.0"). */
GT_API const char *gt_version(void);
/* A result code's name for messages ("out of memory"; "unknown" for a value
 * outside the enum). A static string. */
GT_API const char *gt_rc_str(gt_rc rc);

#ifdef __cplusplus
}
#endif
#endif
