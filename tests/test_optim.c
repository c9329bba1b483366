/* Optimizer: the learning-rate schedule at hand-computed points, global-norm
 * clipping, and gt_optim_update (clip + AdamW) one step by hand and three steps
 * against a float64 transcription of optax.adamw written here. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "train/optim.h"
#include "gt_testutil.h"

static gt_config base_cfg(void) {
  gt_config c;
  memset(&c, 0, sizeof c);
  c.steps = 100;
  c.learning_rate = 0.1;
  c.warmup_steps_fraction = 0.1;
  c.learning_rate_schedule_steps = -1;
  c.learning_rate_final_fraction = 0.1;
  c.adam_b1 = 0.9;
  c.adam_b2 = 0.95;
  c.adam_eps = 1e-8;
  c.adam_eps_root = 0;
  c.adam_weight_decay = 0.1;
  c.gradient_clipping_threshold = 1.0;
  return c;
}

START_TEST(test_schedule_points) {
  gt_config c = base_cfg();
  /* warmup = int(100 * 0.1) = 10 steps, linear from 0 */
  ck_assert(gt_lr_at(&c, 0) == 0.0);
  ck_assert(fabs(gt_lr_at(&c, 5) - 0.05) < 1e-15);
  /* cosine over n = 90 steps, k = step - 10, pct = k / 89 */
  ck_assert(fabs(gt_lr_at(&c, 10) - 0.1) < 1e-15);
  double pct = 44.0 / 89.0, a = 0.5 * (1 + cos(M_PI * pct));
  ck_assert(fabs(gt_lr_at(&c, 54) - (0.1 * a + 0.01 * (1 - a))) < 1e-15);
  ck_assert(fabs(gt_lr_at(&c, 99) - 0.01) < 1e-15); /* ends at lr * final_fraction */
  /* a schedule shorter than the run: 0 after it */
  c.learning_rate_schedule_steps = 50; /* warmup 5, cosine 45 */
  ck_assert(fabs(gt_lr_at(&c, 49) - 0.01) < 1e-15);
  ck_assert(gt_lr_at(&c, 50) == 0.0);
  ck_assert(gt_lr_at(&c, 99) == 0.0);
  /* no warmup */
  c = base_cfg();
  c.warmup_steps_fraction = 0;
  ck_assert(fabs(gt_lr_at(&c, 0) - 0.1) < 1e-15);
}
END_TEST

START_TEST(test_grad_norm) {
  float g[5] = {3, 4, 0, 0, 12};
  ck_assert(fabs(gt_grad_norm(g, 5) - 13.0) < 1e-12);
  int64_t n = 300001;
  float *big = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; i++) big[i] = 0.5f;
  ck_assert(fabs(gt_grad_norm(big, n) - 0.5 * sqrt((double)n)) < 1e-9);
  free(big);
}
END_TEST

START_TEST(test_one_step_by_hand) {
  /* p = 1, g = (3, 4): norm 5 > 1, so g is scaled by 0.2 to (0.6, 0.8).
   * Step 0 uses lr(0); make warmup 0 so lr = 0.1. First Adam step:
   * mh = g', vh = g'^2 -> u = g' / (|g'| + 1e-8) ~ 1 - 1.67e-8 (0.6) and
   * 1 - 1.25e-8 (0.8); p = 1 - 0.1 (u + 0.1 * 1) = 0.89 (both, to float). */
  gt_config c = base_cfg();
  c.warmup_steps_fraction = 0;
  float p[2] = {1, 1}, g[2] = {3, 4}, mu[2] = {0, 0}, nu[2] = {0, 0};
  gt_update_info ui = gt_optim_update(&c, 0, gt_grad_norm(g, 2), 1, p, g, mu, nu, 2);
  ck_assert(fabs(ui.grad_norm - 5.0) < 1e-12);
  ck_assert(fabs(ui.clip_scale - 0.2) < 1e-12);
  ck_assert(fabs(ui.lr - 0.1) < 1e-15);
  ck_assert_msg(fabsf(p[0] - 0.89f) < 2e-7f && fabsf(p[1] - 0.89f) < 2e-7f, "%.9g %.9g", p[0], p[1]);
  /* moments: m = 0.1 g', v = 0.05 g'^2 */
  ck_assert(fabsf(mu[0] - 0.06f) < 1e-6f * 0.06f && fabsf(nu[1] - 0.032f) < 1e-6f * 0.032f);
  ck_assert_int_eq(ui.skipped, 0);
  /* a non-finite norm or loss changes nothing */
  float before[2] = {p[0], p[1]};
  ck_assert_int_eq(gt_optim_update(&c, 1, NAN, 1, p, g, mu, nu, 2).skipped, 1);
  ck_assert_int_eq(gt_optim_update(&c, 1, 5.0, 0, p, g, mu, nu, 2).skipped, 1);
  ck_assert(p[0] == before[0] && p[1] == before[1] && fabsf(mu[0] - 0.06f) < 1e-6f * 0.06f);
}
END_TEST

START_TEST(test_three_steps_vs_reference) {
  gt_config c = base_cfg();
  c.steps = 3;
  c.warmup_steps_fraction = 0.34; /* warmup = 1: lr 0, then cosine over 2 steps */
  enum { N = 37 };
  float p[N], mu[N] = {0}, nu[N] = {0};
  double rp[N], rm[N] = {0}, rv[N] = {0};
  for (int i = 0; i < N; i++) p[i] = (float)(0.3 * sin(i + 1.0)), rp[i] = p[i];
  for (int t = 0; t < 3; t++) {
    float g[N];
    /* the second step's gradient is small enough not to be clipped */
    double amp = t == 1 ? 0.01 : 0.9;
    for (int i = 0; i < N; i++) g[i] = (float)(amp * cos(1.7 * i + t));
    double norm = 0;
    for (int i = 0; i < N; i++) norm += (double)g[i] * g[i];
    norm = sqrt(norm);
    double scale = norm >= 1.0 ? 1.0 / norm : 1.0;
    /* optax.adamw after clip_by_global_norm, in float64 */
    int64_t S = 3, warm = 1;
    double lr = t < warm ? 0.1 * t / warm : 0;
    if (t >= warm) {
      double pct = (double)(t - warm) / (double)(S - warm - 1), a = 0.5 * (1 + cos(M_PI * pct));
      lr = 0.1 * a + 0.01 * (1 - a);
    }
    for (int i = 0; i < N; i++) {
      double gi = g[i] * scale;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      double mh = rm[i] / (1 - pow(0.9, t + 1)), vh = rv[i] / (1 - pow(0.95, t + 1));
      rp[i] -= lr * (mh / (sqrt(vh) + 1e-8) + 0.1 * rp[i]);
    }
    gt_update_info ui = gt_optim_update(&c, t, gt_grad_norm(g, N), 1, p, g, mu, nu, N);
    ck_assert(fabs(ui.lr - lr) < 1e-15);
    ck_assert_int_eq(ui.clip_scale < 1.0, t != 1);
  }
  for (int i = 0; i < N; i++)
    ck_assert_msg(fabs(p[i] - rp[i]) < 2e-6 * (fabs(rp[i]) + 0.1), "p[%d] %.9g vs %.9g", i, p[i], rp[i]);
}
END_TEST

Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_schedule_points);
  tcase_add_test(tc, test_grad_norm);
  tcase_add_test(tc, test_one_step_by_hand);
  tcase_add_test(tc, test_three_steps_vs_reference);
  return s;
}

int main(void) {
  return gt_test_run_suite(optim_suite(), 0);
}
