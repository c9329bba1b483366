#include "train/optim.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#define M_PI_VALUE 3.14159265358979323846

/* MaxText's make_cos_schedule: from init to final over len steps, pct =
 * k / (len - 1) (1 when len = 1) */
static double gt__cos_piece(double init, double final, int64_t len, int64_t k) {
  double pct = len > 1 ? (double)k / (double)(len - 1) : 1.0;
  double a = 0.5 * (cos(M_PI_VALUE * pct) + 1.0);
  return init * a + final * (1.0 - a);
}

/* optax.linear_schedule(init, end, n): clipped to [0, n]; n <= 0 is the
 * constant init */
static double gt__linear_piece(double init, double end, int64_t n, int64_t k) {
  if (n <= 0) return init;
  if (k < 0) k = 0;
  if (k > n) k = n;
  return (init - end) * (1.0 - (double)k / (double)n) + end;
}

/* lr_schedule_type=wsd as MaxText builds it: optax.join_schedules over the
 * pieces that are not empty (warmup, stable, decay, then 0 after S), each
 * evaluated at the step minus the boundary before it. */
static double gt__lr_wsd(const gt_config *c, int64_t step, int64_t S, int64_t warm) {
  double lr = c->learning_rate, final = lr * c->learning_rate_final_fraction;
  int64_t decay = (int64_t)((double)S * c->wsd_decay_steps_fraction), stable = S - warm - decay;
  int cosine = !strcmp(c->wsd_decay_style, "cosine");
  enum { WARM, STABLE, DECAY, ZERO } kind[4];
  int64_t bound[4];
  int n = 0;
  if (warm > 0) kind[n] = WARM, bound[n++] = warm;
  if (stable > 0) kind[n] = STABLE, bound[n++] = warm + stable;
  if (decay > 0) kind[n] = DECAY, bound[n++] = warm + stable + decay;
  if (c->steps - S > 0) kind[n] = ZERO, bound[n++] = S;
  if (n == 0) return lr; /* S >= 1 leaves at least one piece (the fractions sum to <= 1) */
  int i = 0; /* the piece of this step: the last whose start it has reached */
  while (i + 1 < n && step >= bound[i]) i++;
  int64_t k = step - (i > 0 ? bound[i - 1] : 0);
  switch (kind[i]) {
    case WARM: return gt__linear_piece(0.0, lr, warm - 1, k);
    case STABLE: return lr;
    case DECAY: return cosine ? gt__cos_piece(lr, final, decay, k) : gt__linear_piece(lr, final, decay - 1, k);
    default: return 0.0;
  }
}

double gt_lr_at(const gt_config *c, int64_t step) {
  int64_t S = c->learning_rate_schedule_steps > 0 ? c->learning_rate_schedule_steps : c->steps;
  int64_t warm = (int64_t)((double)S * c->warmup_steps_fraction);
  if (!strcmp(c->lr_schedule_type, "wsd")) return gt__lr_wsd(c, step, S, warm);
  double lr = c->learning_rate;
  /* (optax.linear_schedule over warm - 1 steps: lr at the last warmup
   * step; a warmup of one step is step 0 at 0) */
  if (step < warm) return gt__linear_piece(0.0, lr, warm - 1, step);
  if (step >= S) return 0.0;
  int64_t n = S - warm, k = step - warm;
  /* (one cosine step runs at the final rate, as make_cos_schedule and the
   * WSD pieces' gt__cos_piece) */
  double pct = n > 1 ? (double)k / (double)(n - 1) : 1.0;
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
