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

gt_rc gt_optim_init(gt_optim *o, int64_t n, gt_mem *mem, gt_err *err) {
  o->n = n;
  o->t = 0;
  o->mem = mem;
  o->mu = gt_mem_alloc(mem, GT_MEM_OPTIM, (size_t)n * sizeof(float));
  o->nu = gt_mem_alloc(mem, GT_MEM_OPTIM, (size_t)n * sizeof(float));
  if (!o->mu || !o->nu) {
    gt_optim_free(o);
    return gt_err_set(err, GT_ERR_NOMEM, "optimizer: cannot allocate AdamW moments for %lld parameters",
                      (long long)n);
  }
  return GT_OK;
}

void gt_optim_free(gt_optim *o) {
  if (o->mem) {
    gt_mem_free(o->mem, o->mu);
    gt_mem_free(o->mem, o->nu);
  }
  o->mu = o->nu = NULL;
}

double gt_grad_norm(const float *g, int64_t n) { return sqrt(gt_sumsq(g, n)); }

void gt_optim_step(gt_optim *o, float *params, const float *grads, const gt_config *c,
                   gt_update_info *info) {
  double norm = gt_grad_norm(grads, o->n);
  if (!isfinite(norm)) {
    if (info) *info = (gt_update_info){norm, gt_lr_at(c, o->t), 1.0, 1};
    return;
  }
  double scale = 1.0;
  /* optax.clip_by_global_norm: g / norm * max when norm >= max */
  if (c->gradient_clipping_threshold > 0 && norm >= c->gradient_clipping_threshold)
    scale = c->gradient_clipping_threshold / norm;
  double lr = gt_lr_at(c, o->t);
  o->t++;
  gt_adamw_hparams h = {(float)lr, (float)c->adam_b1, (float)c->adam_b2, (float)c->adam_eps,
                        (float)c->adam_eps_root, (float)c->adam_weight_decay, o->t, (float)scale};
  gt_adamw_update(params, grads, o->mu, o->nu, o->n, &h);
  if (info) {
    info->grad_norm = norm;
    info->lr = lr;
    info->clip_scale = scale;
    info->skipped = 0;
  }
}
