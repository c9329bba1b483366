/* The parameter store: what each tensor of the model is, beyond its place.
 *
 * Every tensor of the layout (gt_tensor_info in model.h: its Hugging Face
 * name, shape and offset) carries a storage dtype, a role and a group:
 *   dtype  how its elements are stored: float32, bfloat16, int8 with one
 *          float32 scale per output channel (row), or nf4 (4-bit
 *          NormalFloat) with one float32 absmax scale per block of 64
 *          elements. Training stores every tensor in float32; a frozen base
 *          may later be stored in the others (the arithmetic is here now).
 *   role   trainable or frozen. A frozen tensor gets no gradient (the
 *          executor hands its ops a NULL weight gradient, so the dW product
 *          is never computed), no optimizer moments, no share of the
 *          gradient norm, clipping or weight decay; it is gathered like any
 *          other shard and referenced, not stored, by checkpoints.
 *   group  the state class the tensor is sharded with: tensors of one group
 *          need the same state (GT_GROUP_TRAINABLE: parameters, gradients,
 *          both moments; GT_GROUP_FROZEN: parameters only).
 *
 * trainable_parameters_mask (a list of POSIX extended regular expressions,
 * separated by white space) decides the roles: a tensor trains when some
 * expression matches somewhere in its name ("layers.3.self_attn.q_proj.weight";
 * anchor with ^ and $ for a whole-name match); empty: everything trains.
 *
 * The layout follows from the roles: inside each unit (gt_model_unit) the
 * trainable tensors come first, in table order, then the frozen ones, so a
 * unit's gradient block is a prefix of its parameter block. With everything
 * trainable the layout is exactly the one without a store. */
#ifndef GEMTRAIN_STORE_H
#define GEMTRAIN_STORE_H

#include <stdint.h>

#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_store_dtype {
  GT_STORE_F32 = 0,
  GT_STORE_BF16 = 1,
  GT_STORE_INT8 = 2, /* + one float32 scale per output channel (shape[0] rows) */
  GT_STORE_NF4 = 3,  /* two elements a byte, + one float32 absmax per block of GT_STORE_NF4_BLOCK */
  GT_STORE_NDTYPES
} gt_store_dtype;

#define GT_STORE_NF4_BLOCK 64

typedef enum gt_store_role { GT_ROLE_TRAINABLE = 0, GT_ROLE_FROZEN = 1 } gt_store_role;

typedef enum gt_store_group { GT_GROUP_TRAINABLE = 0, GT_GROUP_FROZEN = 1, GT_STORE_NGROUPS } gt_store_group;

const char *gt_store_dtype_name(gt_store_dtype t);
/* "float32", "bfloat16", "int8", "nf4"; GT_ERR_ARG naming the choices. */
gt_rc gt_store_dtype_parse(const char *name, gt_store_dtype *out, gt_err *err);
const char *gt_store_role_name(gt_store_role r);

/* Bytes of a tensor of numel elements with `rows` output channels (its
 * shape[0]) stored as t: the elements (nf4: ceil(numel / 2)) and the scales
 * (int8: 4 per row; nf4: 4 per block, ceil(numel / 64) blocks; none for
 * float32 and bfloat16). */
int64_t gt_store_data_bytes(gt_store_dtype t, int64_t numel);
int64_t gt_store_scale_bytes(gt_store_dtype t, int64_t numel, int64_t rows);
static inline int64_t gt_store_bytes(gt_store_dtype t, int64_t numel, int64_t rows) {
  return gt_store_data_bytes(t, numel) + gt_store_scale_bytes(t, numel, rows);
}

/* Whether a tensor of this role may be stored as t: a trainable tensor is
 * float32 (AdamW updates it in place); GT_ERR_ARG naming the tensor. */
gt_rc gt_store_check(const char *name, gt_store_role role, gt_store_dtype t, gt_err *err);

/* The compiled mask. An empty text compiles to "everything trains". */
typedef struct gt_store_mask gt_store_mask;
/* GT_ERR_CONFIG naming the expression regcomp refuses, with its reason. */
gt_rc gt_store_mask_compile(const char *text, gt_store_mask **out, gt_err *err);
/* 1 when the tensor named `name` trains under the mask (NULL: every tensor). */
int gt_store_mask_trains(const gt_store_mask *mk, const char *name);
int gt_store_mask_count(const gt_store_mask *mk); /* expressions */
void gt_store_mask_free(gt_store_mask *mk);

/* FNV-1a (64-bit) of n float32 values' bytes, continuing from h (start
 * with GT_STORE_SUM_INIT): the checksum a checkpoint keeps of the frozen
 * bytes it does not store. */
#define GT_STORE_SUM_INIT GT_FNV1A_INIT
uint64_t gt_store_sum(uint64_t h, const float *x, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
