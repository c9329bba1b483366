/* Optimizer: MaxText's AdamW (optax.adamw) after global-norm clipping, with
 * linear warmup then cosine decay (maxtext_utils create_learning_rate_schedule). */
#ifndef GEMTRAIN_OPTIM_H
#define GEMTRAIN_OPTIM_H

#include <stdint.h>

#include "base/alloc.h"
#include "gemtrain/common.h"
#include "gemtrain/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Learning rate used by the update at 0-based optimizer step `step`:
 * warmup = int(S * warmup_steps_fraction) with S = learning_rate_schedule_steps
 * (-1: steps); lr * step / warmup during warmup; then over n = S - warmup steps
 * pct = k / (n - 1), a = (1 + cos(pi pct)) / 2, lr (a + final_fraction (1 - a));
 * 0 from step S on. */
double gt_lr_at(const gt_config *cfg, int64_t step);

typedef struct gt_optim {
  int64_t n;
  int64_t t;  /* updates applied so far */
  float *mu, *nu;
  gt_mem *mem;
} gt_optim;

gt_rc gt_optim_init(gt_optim *o, int64_t n_params, gt_mem *mem, gt_err *err);
void gt_optim_free(gt_optim *o);

typedef struct gt_update_info {
  double grad_norm;  /* global norm before clipping */
  double lr;
  double clip_scale; /* factor applied to the gradients (1 = not clipped) */
  int skipped;       /* 1: the loss or the norm was not finite; nothing was updated */
} gt_update_info;

/* Global norm of a gradient buffer (deterministic: fixed partition). */
double gt_grad_norm(const float *g, int64_t n);
/* One update of params with grads at 0-based step o->t; advances o->t.
 * A non-finite gradient norm updates nothing (info->skipped = 1): a NaN
 * must never reach the parameters or the moments. */
void gt_optim_step(gt_optim *o, float *params, const float *grads, const gt_config *cfg,
                   gt_update_info *info);

#ifdef __cplusplus
}
#endif
#endif
