/* MoE bookkeeping the model owns: the dimension check and the saved
 * state's layout (sizes, binding, allocation). The routed experts' maths,
 * types and compute are the kernel contract in kernels/moe.h. */
#ifndef GEMTRAIN_MOE_H
#define GEMTRAIN_MOE_H

#include <stddef.h>

#include "base/alloc.h"
#include "base/common.h"
#include "kernels/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One line naming the bad dimension: positive sizes, 1 <= k <= E, P >= 1
 * divides E, 0 <= rank < P, eps > 0, lb_weight >= 0, N*k below 2^31. */
gt_rc gt_moe_dims_check(const gt_moe_dims *d, gt_err *err);
/* Exact bytes of the saved block (a 64-byte aligned carving, so a block of
 * this size from gt_mem_alloc always fits). */
size_t gt_moe_saved_bytes(const gt_moe_dims *d);
/* Point s's arrays into block (64-byte aligned, gt_moe_saved_bytes long). */
void gt_moe_saved_bind(gt_moe_saved *s, void *block, const gt_moe_dims *d);
/* The same on a GT_MEM_SAVED allocation of the tracker; free with _free. */
gt_rc gt_moe_saved_alloc(gt_moe_saved *s, gt_mem *mem, const gt_moe_dims *d, gt_err *err);
void gt_moe_saved_free(gt_moe_saved *s, gt_mem *mem);

#ifdef __cplusplus
}
#endif
#endif
