/* Inside the checkpoint module: one shard file (ckpt_file.c) and the
 * directory protocol around it (ckpt.c). */
#ifndef GT_CKPT_INTERNAL_H
#define GT_CKPT_INTERNAL_H

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"

#define GT__CKPT_MAGIC "GTCKPT\0\0"
#define GT__CKPT_PREAMBLE 64
#define GT__CKPT_MAX_HEADER (256u << 20)
/* Shard names hold 5 digits: shard_00000-of-00002.gtck */
#define GT__CKPT_MAX_SHARDS 99999
/* The largest integer a JSON number (a double) holds exactly: the bound of
 * a header field that has no tighter one. */
#define GT__CKPT_INT_MAX ((int64_t)1 << 53)

/* Field `key` of the header object `o` as an integer in [lo, hi] (a JSON
 * number, whole and in range), else GT_ERR_FORMAT naming the file, `what`
 * ("state", "tensor 'params/head'"), the field, its value and the range;
 * `why` (may be NULL) says where the range comes from. A crc32 proves the
 * bytes are the ones written, not that they are valid. */
gt_rc gt__ckpt_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, const char *path, const char *what,
                   const char *why, int64_t *out, gt_err *err);

/* The spike guard's record (ckpt.h's gt_ckpt_spike) as the object
 * "spike_guard" of `o` (nothing while it is all zero), and read back from
 * that object (NULL: an empty record) with every field checked: `what`
 * names the object in messages ("state spike_guard"), `step` bounds
 * skipped_steps. The checkpoint's header and a parameter file's metadata
 * (paramfile.h) hold the same object. */
void gt__ckpt_add_spike(cJSON *o, const gt_ckpt_spike *sp);
gt_rc gt__ckpt_read_spike(const cJSON *g, const char *file, const char *what, int64_t step, gt_ckpt_spike *out,
                          gt_err *err);

/* Writes shard r of S as `path` (not renamed: the caller's directory is the
 * temporary one) and fsyncs it. `meta` holds the state, config and model
 * table; the shard adds its own "shard" and "tensors" entries to a copy.
 * excl: the file must not exist yet (several ranks write into one
 * directory, and two writers of one shard would interleave their bytes).
 * half_step >= 0: the test seam's point "half" (ckpt_seam.h) is passed,
 * with that step, once half of the file's raw tensor bytes are written. */
gt_rc gt__ckpt_write_shard(const char *path, const gt_model *m, int r, int S, const float *params, const float *mu,
                           const float *nu, const cJSON *meta, int level, int excl, int64_t half_step, gt_err *err);

/* Reads shard r of S of checkpoint step `step` into full flat buffers (mu,
 * nu may be NULL). S < 0: take S from the file. On success *header is the
 * parsed header (the caller frees it) and *S_out the shard count. */
gt_rc gt__ckpt_read_shard(const char *path, const gt_model *m, int r, int S, int64_t step, float *params, float *mu,
                          float *nu, cJSON **header, int *S_out, gt_err *err);

/* Only the header of a shard file (preamble and header crc checked). */
gt_rc gt__ckpt_read_header(const char *path, cJSON **header, gt_err *err);

/* The model's tensor table as JSON [[name, [shape...]], ...], and a
 * comparison that names the first differences. */
cJSON *gt__ckpt_model_table(const gt_model *m);
gt_rc gt__ckpt_check_model(const cJSON *table, const gt_model *m, const char *where, gt_err *err);

/* The reference a checkpoint keeps to the frozen tensors it does not store
 * (NULL when nothing is frozen): {source, checksum (gt_model_frozen_sum, 16
 * hex digits), elements, tensors: [names]}; and the check that a model
 * freezes exactly the checkpoint's tensors (ref NULL: none). */
cJSON *gt__ckpt_frozen_ref(const gt_model *m, uint64_t sum, const char *source);
gt_rc gt__ckpt_check_frozen(const cJSON *ref, const gt_model *m, const char *where, gt_err *err);

/* Test hooks (ckpt_seam.h): called once per checkpoint save in which this
 * process writes a shard file (every save of one process; in a save by
 * several ranks, those of the ranks that hold a shard). */
void gt__ckpt_fault_next_save(void);
/* The seam's named points (ckpt_seam.h): calls the hook, when one is set. */
void gt__ckpt_point(const char *point, int64_t step);

#endif
