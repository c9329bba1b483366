/* Optimizer: MaxText's AdamW (optax.adamw) after global-norm clipping, with
 * linear warmup then cosine decay, or warmup-stable-decay (lr_schedule_type=wsd), as
 * MaxText's maxtext_utils.create_learning_rate_schedule. */
#ifndef GEMTRAIN_OPTIM_H
#define GEMTRAIN_OPTIM_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Learning rate used by the update at 0-based optimizer step `step`, as
 * MaxText's create_learning_rate_schedule: S = learning_rate_schedule_steps
 * (-1: steps), warmup = int(S * warmup_steps_fraction), lr * step /
 * (warmup - 1) during warmup (optax.linear_schedule over warmup - 1 steps:
 * the full rate at its last step; one warmup step is 0), and 0 from step S
 * on when steps > S. Between them:
 *  - cosine: over n = S - warmup steps, pct = k / (n - 1),
 *    a = (1 + cos(pi pct)) / 2, lr (a + final_fraction (1 - a));
 *  - wsd: decay = int(S * wsd_decay_steps_fraction) steps at the end,
 *    stable = S - warmup - decay steps at lr before them; the decay goes
 *    from lr to lr * final_fraction: linear (optax.linear_schedule over
 *    decay - 1 steps: it reaches the final rate at its last step; one
 *    decay step stays at lr) or cosine (as above over the decay steps;
 *    one decay step is the final rate). */
double gt_lr_at(const gt_config *cfg, int64_t step);

typedef struct gt_update_info {
  double grad_norm;  /* global norm before clipping */
  double lr;
  double clip_scale; /* factor applied to the gradients (1 = not clipped) */
  int skipped;       /* 1: the loss or the norm was not finite; nothing was updated */
} gt_update_info;

/* Clipping and the AdamW hyperparameters of 0-based optimizer step t from
 * the global gradient norm: 1 when the update applies, 0 when it is skipped
 * (finite = 0 or a non-finite norm); *ui says which, and the clip scale. */
int gt_optim_prepare(const gt_config *cfg, int64_t t, double norm, int finite, gt_adamw_hparams *h, gt_update_info *ui);
/* AdamW with prepared hyperparameters on n elements; mu16 (mu_dtype=
 * bfloat16) instead of mu when mu is NULL. */
void gt_optim_apply(const gt_adamw_hparams *h, float *params, const float *grads, float *mu, uint16_t *mu16, float *nu,
                    int64_t n);

/* Global norm of a gradient buffer (deterministic: fixed partition). */
double gt_grad_norm(const float *g, int64_t n);
/* The update of one step, on n elements (a device's shard, or a whole
 * buffer): global-norm clipping to gradient_clipping_threshold, then AdamW at
 * 0-based optimizer step t (bias correction t + 1). `norm` is the global
 * gradient norm of the whole step (every shard's). A non-finite norm or
 * loss (finite = 0) updates nothing (skipped = 1): a NaN must never reach the
 * parameters or the moments. The trainer calls this on every device. */
gt_update_info gt_optim_update(const gt_config *cfg, int64_t t, double norm, int finite, float *params,
                               const float *grads, float *mu, float *nu, int64_t n);
/* The same with the first moment stored in bf16 (mu_dtype=bfloat16): each
 * element's m is expanded to float32, updated and used in float32 exactly
 * as gt_optim_update does, and stored back rounded to nearest even
 * (gt_adamw_update_mu_bf16; optax.adamw with mu_dtype casts the same way:
 * the step uses the float32 moment, the state keeps the cast one). */
gt_update_info gt_optim_update_mu_bf16(const gt_config *cfg, int64_t t, double norm, int finite, float *params,
                                       const float *grads, uint16_t *mu, float *nu, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
