#include "train/optim.h"

#include <math.h>

#include "kernels/kernels.h"

#define M_PI_VALUE 3.14159265358979323846

double gt_lr_at(const gt_config *c, int64_t step) {
  int64_t S = c->learning_rate_schedule_steps > 0 ? c->learning_rate_schedule_steps : c->steps;
  int64_t warm = (int64_t)((double)S * c->warmup_steps_fraction);
  double lr = c->learning_rate;
  if (step < warm) return lr * (double)step / (double)warm;
  if (step >= S) return 0.0;
  int64_t n = S - warm, k = step - warm;
  double pct = n > 1 ? (double)k / (double)(n - 1) : 0.0;
  double a = 0.5 * (1.0 + cos(M_PI_VALUE * pct));
  return lr * a + lr * c->learning_rate_final_fraction * (1.0 - a);
}

double gt_grad_norm(const float *g, int64_t n) { return sqrt(gt_sumsq(g, n)); }

/* Clipping and the AdamW hyperparameters of step t; 0 when the step is
 * skipped (*ui says so). */
int gt_optim_prepare(const gt_config *c, int64_t t, double norm, int finite, gt_adamw_hparams *h, gt_update_info *ui) {
  double lr = gt_lr_at(c, t);
  if (!finite || !isfinite(norm)) {
    *ui = (gt_update_info){norm, lr, 1.0, 1};
    return 0;
  }
  double scale = 1.0;
  /* optax.clip_by_global_norm: g / norm * max when norm >= max */
  if (c->gradient_clipping_threshold > 0 && norm >= c->gradient_clipping_threshold)
    scale = c->gradient_clipping_threshold / norm;
  *h = (gt_adamw_hparams){(float)lr, (float)c->adam_b1, (float)c->adam_b2, (float)c->adam_eps,
                          (float)c->adam_eps_root, (float)c->adam_weight_decay, t + 1, (float)scale};
  *ui = (gt_update_info){norm, lr, scale, 0};
  return 1;
}

gt_update_info gt_optim_update(const gt_config *c, int64_t t, double norm, int finite, float *params,
                               const float *grads, float *mu, float *nu, int64_t n) {
  gt_adamw_hparams h;
  gt_update_info ui;
  if (gt_optim_prepare(c, t, norm, finite, &h, &ui)) gt_adamw_update(params, grads, mu, nu, n, &h);
  return ui;
}

gt_update_info gt_optim_update_mu_bf16(const gt_config *c, int64_t t, double norm, int finite, float *params,
                                       const float *grads, uint16_t *mu, float *nu, int64_t n) {
  gt_adamw_hparams h;
  gt_update_info ui;
  if (gt_optim_prepare(c, t, norm, finite, &h, &ui)) gt_adamw_update_mu_bf16(params, grads, mu, nu, n, &h);
  return ui;
}

void gt_optim_apply(const gt_adamw_hparams *h, float *params, const float *grads, float *mu, uint16_t *mu16, float *nu,
                    int64_t n) {
  if (mu) gt_adamw_update(params, grads, mu, nu, n, h);
  else gt_adamw_update_mu_bf16(params, grads, mu16, nu, n, h);
}
