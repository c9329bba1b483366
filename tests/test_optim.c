/* Optimizer: the learning-rate schedule at hand-computed points, global-norm
 * clipping, and gt_optim_update (clip + AdamW) one step by hand and three steps
 * against a float64 transcription of optax.adamw written here. The bf16
 * first moment (mu_dtype=bfloat16): gt_adamw_update_mu_bf16 against its
 * scalar reference bit for bit (every size around the 16-lane blocks and the
 * thread split, moments near bf16 rounding ties, NaN gradients), against
 * gt_adamw_update on the expanded moment (p and v the same bits, m its
 * rounding), and gt_optim_update_mu_bf16's clipping and skipping. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
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
  /* warmup = int(100 * 0.1) = 10 steps, linear from 0 over 9 transition
   * steps (MaxText: optax.linear_schedule(0, lr, warmup_steps - 1)), so
   * step 9 is the first at the full rate */
  ck_assert(gt_lr_at(&c, 0) == 0.0);
  ck_assert(fabs(gt_lr_at(&c, 3) - 0.1 / 3) < 1e-15);
  ck_assert(fabs(gt_lr_at(&c, 9) - 0.1) < 1e-15);
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

/* 3 steps of the kernel and of the reference from the same state: bits equal */
static void mu_bf16_case(int64_t n, uint64_t seed, int with_nan) {
  uint64_t s = seed;
  float *p = gt_test_alloc_fill(n, &s, -1.f, 1.f), *v = gt_test_alloc_fill(n, &s, 0.f, 1e-3f);
  float *g = gt_test_alloc_fill(n, &s, -2.f, 2.f);
  uint16_t *m = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    /* moments whose update often lands on a rounding tie or a carry */
    float x = gt_test_rand_uniform(&s, -0.05f, 0.05f);
    m[i] = gt_f32_to_bf16(x);
    if (i % 7 == 3) g[i] = 0.0f;
  }
  if (with_nan && n > 5) g[n / 2] = NAN, g[n - 1] = INFINITY;
  float *pr = gt_test_copy(p, n), *vr = gt_test_copy(v, n);
  uint16_t *mr = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  memcpy(mr, m, sizeof(uint16_t) * (size_t)n);
  for (int t = 1; t <= 3; t++) {
    const gt_adamw_hparams h = {.lr = 3e-3f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f, .eps_root = 0.f,
                                .weight_decay = 0.1f, .t = t, .grad_scale = t == 2 ? 0.37f : 1.f};
    gt_adamw_update_mu_bf16(p, g, m, v, n, &h);
    gt_adamw_update_mu_bf16_ref(pr, g, mr, vr, n, &h);
  }
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&p[i], &pr[i], 4) || memcmp(&v[i], &vr[i], 4) || m[i] != mr[i])
      ck_abort_msg("n=%lld i=%lld: p %.9g/%.9g v %.9g/%.9g m 0x%04x/0x%04x", (long long)n, (long long)i,
                   (double)p[i], (double)pr[i], (double)v[i], (double)vr[i], m[i], mr[i]);
  free(p), free(v), free(g), free(m), free(pr), free(vr), free(mr);
}

START_TEST(test_adamw_mu_bf16_vs_ref) {
  /* tails of every length below a 16-lane block, a thread split's edges
   * (the kernel goes parallel from 32768) and a large odd size */
  for (int64_t n = 0; n <= 40; n++) mu_bf16_case(n, 11 + (uint64_t)n, 0);
  const int64_t big[] = {32767, 32768, 32769, 100003};
  for (int i = 0; i < 4; i++) mu_bf16_case(big[i], 101 + (uint64_t)i, 0);
  mu_bf16_case(1000, 7, 1);
  mu_bf16_case(65537, 8, 1);
}
END_TEST

START_TEST(test_adamw_mu_bf16_is_float32_step_rounded) {
  /* one step from a bf16 moment = gt_adamw_update from its float32
   * expansion, with m stored rounded: the same operations in the same order */
  enum { N = 1037 };
  uint64_t s = 5;
  float *p = gt_test_alloc_fill(N, &s, -1.f, 1.f), *v = gt_test_alloc_fill(N, &s, 0.f, 1e-2f);
  float *g = gt_test_alloc_fill(N, &s, -1.f, 1.f), *mf = gt_test_alloc_fill(N, &s, -0.1f, 0.1f);
  uint16_t m[N];
  gt_bf16_pack(m, mf, N);
  gt_bf16_unpack(mf, m, N);
  float *p2 = gt_test_copy(p, N), *v2 = gt_test_copy(v, N);
  const gt_adamw_hparams h = {.lr = 0.01f, .b1 = 0.9f, .b2 = 0.99f, .eps = 1e-8f, .eps_root = 1e-12f,
                              .weight_decay = 0.05f, .t = 4, .grad_scale = 0.5f};
  gt_adamw_update_mu_bf16(p, g, m, v, N, &h);
  gt_adamw_update(p2, g, mf, v2, N, &h);
  ck_assert(gt_test_same_bits(p, p2, N));
  ck_assert(gt_test_same_bits(v, v2, N));
  for (int i = 0; i < N; i++) ck_assert_uint_eq(m[i], gt_f32_to_bf16(mf[i]));
  free(p), free(v), free(g), free(mf), free(p2), free(v2);
}
END_TEST

START_TEST(test_optim_update_mu_bf16) {
  /* the by-hand step of test_one_step_by_hand: the same clipping, lr and
   * parameters; m = 0.1 g' rounded to bf16; a non-finite step changes nothing */
  gt_config c = base_cfg();
  c.warmup_steps_fraction = 0;
  float p[2] = {1, 1}, g[2] = {3, 4}, mu[2] = {0, 0}, nu[2] = {0, 0}, p2[2] = {1, 1}, nu2[2] = {0, 0};
  uint16_t m[2] = {0, 0};
  gt_update_info a = gt_optim_update(&c, 0, 5.0, 1, p, g, mu, nu, 2);
  gt_update_info b = gt_optim_update_mu_bf16(&c, 0, 5.0, 1, p2, g, m, nu2, 2);
  ck_assert(a.lr == b.lr && a.clip_scale == b.clip_scale && a.grad_norm == b.grad_norm && !b.skipped);
  ck_assert(gt_test_same_bits(p, p2, 2) && gt_test_same_bits(nu, nu2, 2));
  ck_assert(m[0] == gt_f32_to_bf16(mu[0]) && m[1] == gt_f32_to_bf16(mu[1]));
  ck_assert(gt_bf16_to_f32(m[0]) != mu[0] || gt_bf16_to_f32(m[1]) != mu[1]); /* 0.06 and 0.08 are no bf16 values */
  uint16_t keep[2] = {m[0], m[1]};
  ck_assert_int_eq(gt_optim_update_mu_bf16(&c, 1, NAN, 1, p2, g, m, nu2, 2).skipped, 1);
  ck_assert_int_eq(gt_optim_update_mu_bf16(&c, 1, 5.0, 0, p2, g, m, nu2, 2).skipped, 1);
  ck_assert(gt_test_same_bits(p, p2, 2) && m[0] == keep[0] && m[1] == keep[1]);
}
END_TEST

Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_schedule_points);
  tcase_add_test(tc, test_grad_norm);
  tcase_add_test(tc, test_one_step_by_hand);
  tcase_add_test(tc, test_three_steps_vs_reference);
  tcase_add_test(tc, test_adamw_mu_bf16_vs_ref);
  tcase_add_test(tc, test_adamw_mu_bf16_is_float32_step_rounded);
  tcase_add_test(tc, test_optim_update_mu_bf16);
  return s;
}

int main(void) {
  return gt_test_run_suite(optim_suite(), 0);
}
