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

gt_update_info gt_optim_update(const gt_config *c, int64_t t, double norm, int finite, float *params,
                               const float *grads, float *mu, float *nu, int64_t n) {
  double lr = gt_lr_at(c, t);
  if (!finite || !isfinite(norm)) return (gt_update_info){norm, lr, 1.0, 1};
  double scale = 1.0;
  /* optax.clip_by_global_norm: g / norm * max when norm >= max */
  if (c->gradient_clipping_threshold > 0 && norm >= c->gradient_clipping_threshold)
    scale = c->gradient_clipping_threshold / norm;
  gt_adamw_hparams h = {(float)lr, (float)c->adam_b1, (float)c->adam_b2, (float)c->adam_eps,
                        (float)c->adam_eps_root, (float)c->adam_weight_decay, t + 1, (float)scale};
  gt_adamw_update(params, grads, mu, nu, n, &h);
  return (gt_update_info){norm, lr, scale, 0};
}
