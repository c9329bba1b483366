/* Errors and small helpers shared inside libgemtrain. gt_rc and gt_err are
 * public (include/gemtrain/common.h). */
#ifndef GT_BASE_COMMON_H
#define GT_BASE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gemtrain/common.h"

/* Record an error (printf-style) and return rc. err may be NULL. */
gt_rc gt_err_set(gt_err *err, gt_rc rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gt_err_clear(gt_err *err);
const char *gt_rc_name(gt_rc rc);
/* mkdir -p: creates path and its parents. `who` prefixes the error line
 * ("train", "sweep"); a path that exists but is not a directory is refused. */
gt_rc gt_mkdirs(const char *path, const char *who, gt_err *err);
/* Reads a whole file into a malloc'd buffer (*n bytes, NUL-terminated; the
 * caller frees). The one way libgemtrain and the command read a whole file:
 * a directory is refused ("<who> '<path>' is a directory, expected a
 * file"), a pipe or FIFO is read to its end (it has no size to ask for).
 * Other errors read "<who> '<path>' cannot be opened: <reason>" or "cannot
 * be read". */
gt_rc gt_read_file(const char *path, const char *who, char **buf, size_t *n, gt_err *err);
/* The same for a stream already open (standard input); name stands for the
 * path in errors. The stream is not closed. */
gt_rc gt_read_stream(FILE *f, const char *name, const char *who, char **buf, size_t *n, gt_err *err);
/* v as JSON float text into buf (n >= 32): the shortest form that reads
 * back to v, with ".0" added to a whole value, so that readers that type
 * JSON numbers (Python's json, Hugging Face's strict configs) see a float
 * (cJSON prints 30.0 as 30, an int). Returns -1 for NaN or an infinity,
 * which JSON cannot hold. */
int gt_json_float_text(double v, char *buf, size_t n);
/* splitmix64: the next 64 random bits of a seeded stream (state advances).
 * The one generator behind initialisation, data order and sampling. */
uint64_t gt_splitmix64(uint64_t *state);
/* FNV-1a (64-bit) of n bytes, continuing from h (start with GT_FNV1A_INIT):
 * the one hash behind the tokenizer's tables, the frozen tensors' checksum
 * and the configuration checksum the ranks and checkpoint shards compare.
 * An identity, not a defence against a forger. */
#define GT_FNV1A_INIT 0xcbf29ce484222325ull
uint64_t gt_fnv1a(uint64_t h, const void *p, size_t n);

#endif
