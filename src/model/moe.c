/* MoE bookkeeping: dimension checks and the saved-state layout (sizes and
 * binding). The compute and the expert-parallel split are in kernels/moe.h. */
#include "model/moe.h"

#include <string.h>

#include "kernels/moe_carve.h"

gt_rc gt_moe_dims_check(const gt_moe_dims *d, gt_err *err) {
  if (!d) return gt_err_set(err, GT_ERR_ARG, "moe: dims is NULL");
  if (d->B < 1 || d->T < 1)
    return gt_err_set(err, GT_ERR_ARG, "moe: batch B=%lld x T=%lld tokens; both must be >= 1",
                      (long long)d->B, (long long)d->T);
  if (d->d < 1 || d->F < 1 || d->E < 1)
    return gt_err_set(err, GT_ERR_ARG, "moe: d=%d, E=%d, F=%d; all must be >= 1", d->d, d->E, d->F);
  if (d->k < 1 || d->k > d->E)
    return gt_err_set(err, GT_ERR_ARG, "moe: num_experts_per_tok k=%d must be in 1 .. E=%d", d->k, d->E);
  if (d->ep_size < 1 || d->E % d->ep_size != 0)
    return gt_err_set(err, GT_ERR_ARG,
                      "moe: ici_expert_parallelism = %d must be >= 1 and divide num_experts = %d",
                      d->ep_size, d->E);
  if (d->ep_rank < 0 || d->ep_rank >= d->ep_size)
    return gt_err_set(err, GT_ERR_ARG, "moe: expert rank %d is outside 0 .. %d", d->ep_rank,
                      d->ep_size - 1);
  if (!(d->eps > 0.0f))
    return gt_err_set(err, GT_ERR_ARG, "moe: normalization epsilon %g must be > 0", (double)d->eps);
  if (!(d->lb_weight >= 0.0f))
    return gt_err_set(err, GT_ERR_ARG, "moe: load_balance_loss_weight %g must be >= 0",
                      (double)d->lb_weight);
  /* slots and sorted rows are int32 */
  if (d->B * d->T > (int64_t)INT32_MAX / d->k)
    return gt_err_set(err, GT_ERR_ARG, "moe: %lld tokens x k=%d slots exceed 2^31-1",
                      (long long)(d->B * d->T), d->k);
  return GT_OK;
}

static void gt__saved_layout(gt_moe_saved *s, gt__carve *c, const gt_moe_dims *d) {
  const size_t N = (size_t)(d->B * d->T), k = (size_t)d->k, E = (size_t)d->E;
  const size_t EL = E / (size_t)d->ep_size, M = N * k;
  s->rstd_router = gt__carve_take(c, N, sizeof(float));
  s->probs = gt__carve_take(c, N * E, sizeof(float));
  s->topk = gt__carve_take(c, N * k, sizeof(int32_t));
  s->topk_w = gt__carve_take(c, N * k, sizeof(float));
  s->rstd_pre = gt__carve_take(c, N, sizeof(float));
  s->counts = gt__carve_take(c, EL, sizeof(int32_t));
  s->offsets = gt__carve_take(c, EL + 1, sizeof(int32_t));
  s->slot_of = gt__carve_take(c, M, sizeof(int32_t));
  s->row_of = gt__carve_take(c, N * k, sizeof(int32_t));
  s->gu = gt__carve_take(c, M * 2 * (size_t)d->F, sizeof(float));
  s->sum = gt__carve_take(c, N * (size_t)d->d, sizeof(float));
  s->rstd_post = gt__carve_take(c, N, sizeof(float));
}

size_t gt_moe_saved_bytes(const gt_moe_dims *d) {
  gt_moe_saved s;
  gt__carve c = {NULL, 0};
  gt__saved_layout(&s, &c, d);
  return c.off;
}

void gt_moe_saved_bind(gt_moe_saved *s, void *block, const gt_moe_dims *d) {
  memset(s, 0, sizeof *s);
  gt__carve c = {block, 0};
  gt__saved_layout(s, &c, d);
}

gt_rc gt_moe_saved_alloc(gt_moe_saved *s, gt_mem *mem, const gt_moe_dims *d, gt_err *err) {
  memset(s, 0, sizeof *s);
  gt_rc rc = gt_moe_dims_check(d, err);
  if (rc != GT_OK) return rc;
  const size_t bytes = gt_moe_saved_bytes(d);
  void *block = gt_mem_alloc_uninit_named(mem, GT_MEM_SAVED, bytes, "routed experts' saved state");
  if (!block)
    return gt_err_set(err, GT_ERR_NOMEM, "moe: cannot allocate %zu bytes of saved activations", bytes);
  gt_moe_saved_bind(s, block, d);
  s->block = block;
  return GT_OK;
}

void gt_moe_saved_free(gt_moe_saved *s, gt_mem *mem) {
  if (s->block) gt_mem_free(mem, s->block);
  memset(s, 0, sizeof *s);
}
