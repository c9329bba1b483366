/* gemtrain safetensors: a validating reader (mmap, zero-copy), an atomic
 * writer whose bytes match the Rust `safetensors` crate, and HF-style sharded
 * checkpoints (model.safetensors.index.json).
 *
 * Format (the Gemma spec, kept outside the repository, section 8): 8-byte
 * little-endian header length N, N bytes of UTF-8 JSON, then the data buffer. Every tensor's
 * data_offsets are relative to the data buffer; tensors tile the buffer
 * exactly, with no gaps or overlaps. */
#ifndef GEMTRAIN_SAFETENSORS_H
#define GEMTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "kernels/bf16.h" /* gt_f32_to_bf16, gt_bf16_to_f32 */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_dtype {
  GT_DT_F32,
  GT_DT_BF16,
  GT_DT_F16,
  GT_DT_F64,
  GT_DT_I32,
  GT_DT_I64,
  GT_DT_U8,
  GT_DT_I8,
  GT_DT_U16,
  GT_DT_I16,
  GT_DT_U32,
  GT_DT_U64,
  GT_DT_BOOL
} gt_dtype;

#define GT_ST_MAX_NDIM 8
#define GT_ST_MAX_NAME 255 /* bytes, without the terminating NUL */
#define GT_ST_MAX_HEADER 100000000ULL

/* Bytes per element (0 for a value outside the enum). */
int gt_dtype_size(gt_dtype dt);
/* The safetensors spelling: "F32", "BF16", ... ("?" outside the enum). */
const char *gt_dtype_name(gt_dtype dt);

typedef struct gt_st_tensor {
  char name[256];
  gt_dtype dtype;
  int ndim; /* 0 for a scalar */
  int64_t shape[8];
  int64_t numel; /* 1 for a scalar, 0 for an empty tensor */
  uint64_t begin, end; /* data_offsets, relative to the data buffer */
  const void *data;    /* points into the mapping; not aligned in general */
} gt_st_tensor;

typedef struct gt_st_file {
  char path[1024];
  void *map;
  size_t map_size;
  int n_tensors;
  gt_st_tensor *tensors; /* sorted by name (byte order) */
  char *metadata_json;   /* "__metadata__" object re-printed as JSON, or NULL */
} gt_st_file;

/* Map the file read-only and validate the header and every tensor entry. On
 * failure *f is left zeroed (gt_st_close on it is harmless). */
gt_rc gt_st_open(gt_st_file *f, const char *path, gt_err *err);
void gt_st_close(gt_st_file *f);
/* NULL when absent. Binary search: O(log n). */
const gt_st_tensor *gt_st_find(const gt_st_file *f, const char *name);

/* Convert F32, BF16 or F16 data to float32. n must equal t->numel. NaN stays
 * NaN, F16 subnormals and infinities convert exactly. */
gt_rc gt_st_read_f32(const gt_st_tensor *t, float *out, int64_t n, gt_err *err);
/* The same for the elements [first, first + n) in row-major order (e.g. the
 * first rows of an embedding table), without converting the rest. */
gt_rc gt_st_read_f32_range(const gt_st_tensor *t, int64_t first, int64_t n, float *out, gt_err *err);

/* Scalar conversions used by the reader and writer. */
float gt_f16_to_f32(uint16_t h);

typedef struct gt_st_wtensor {
  const char *name;
  gt_dtype dtype; /* F32, BF16 (converted from float) or I32 */
  int ndim;
  int64_t shape[8];
  const void *data; /* float* for F32/BF16, int32_t* for I32; may be NULL if empty */
} gt_st_wtensor;

/* Write one safetensors file. metadata_json: NULL or a flat JSON object of
 * string -> string, stored as "__metadata__" (first in the header, keys in the
 * given order). The bytes are what the Rust crate writes for the same input:
 * compact JSON, header padded with spaces to make 8+N a multiple of 8, tensors
 * ordered by the crate's dtype rank descending (F32 before I32 before BF16),
 * then by name. Atomic: writes path.tmp, fsyncs, renames over path, fsyncs the
 * directory; on failure path.tmp is removed and path is untouched. */
gt_rc gt_st_write(const char *path, int n, const gt_st_wtensor *tensors,
                  const char *metadata_json, gt_err *err);

/* A checkpoint directory: model.safetensors.index.json
 * {"metadata":{...},"weight_map":{name: file}} plus its shards, or a single
 * model.safetensors; a directory holding both is refused, naming both files
 * (transformers would load model.safetensors). Every shard is opened and
 * validated; every weight_map entry must exist in the shard it names, and no
 * tensor may be in two shards. */
typedef struct gt_st_set {
  int n_files;
  gt_st_file *files; /* sorted by file name: files[k] is shard k+1 */
} gt_st_set;

gt_rc gt_st_set_open(gt_st_set *s, const char *dir, gt_err *err);
const gt_st_tensor *gt_st_set_find(const gt_st_set *s, const char *name);
void gt_st_set_close(gt_st_set *s);

/* Write a checkpoint directory (which must exist). First removes from dir
 * what an earlier write may have left: model.safetensors,
 * model-*-of-*.safetensors shards and model.safetensors.index.json (regular
 * files of those names only), so a reader (transformers prefers
 * model.safetensors, gt_st_set_open refuses both) finds this write alone.
 * max_shard_bytes == 0: one file, model.safetensors. Otherwise tensors, in the
 * given order, fill model-00001-of-0000N.safetensors files of at most
 * max_shard_bytes of tensor data each (a tensor larger than the limit gets a
 * shard of its own), and model.safetensors.index.json is written last with
 * metadata.total_size = total tensor bytes. Each file carries
 * {"format":"pt"} metadata, which transformers expects. */
gt_rc gt_st_write_sharded(const char *dir, int n, const gt_st_wtensor *tensors,
                          uint64_t max_shard_bytes, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
