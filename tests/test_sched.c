/* Learning-rate schedules: lr_schedule_type=wsd step by step against a
 * scalar transcription of MaxText's create_learning_rate_schedule written
 * here (the optax pieces it joins: linear_schedule, constant_schedule,
 * make_cos_schedule, and join_schedules' "each later piece from its
 * boundary on"), with hand-computed points, both decay styles and the edge
 * cases of the piece lengths; the cosine schedule against the same
 * transcription of MaxText's cosine branch; and the refusal of fractions
 * that leave no stable phase. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "gt_testutil.h"
#include "train/optim.h"

/* ---- the reference: MaxText's function, piece by piece ---- */

typedef struct ref_piece {
  int kind; /* 0 linear(a -> b over n), 1 constant a, 2 cos(a -> b over n) */
  double a, b;
  long long n;
} ref_piece;

static double ref_eval(const ref_piece *p, double step) {
  if (p->kind == 1) return p->a;
  if (p->kind == 0) { /* optax.polynomial_schedule with power 1 */
    if (p->n <= 0) return p->a;
    double count = fmin(fmax(step, 0.0), (double)p->n);
    return (p->a - p->b) * (1.0 - count / (double)p->n) + p->b;
  }
  double pct = p->n > 1 ? step / (double)(p->n - 1) : 1.0; /* make_cos_schedule */
  double a = 0.5 * (cos(M_PI * pct) + 1.0);
  return p->a * a + p->b * (1.0 - a);
}

static double ref_lr(double lr, double final_fraction, double warmup_fraction, double decay_fraction,
                     int cosine_decay, long long schedule_steps, long long steps, long long step) {
  long long S = schedule_steps == -1 ? steps : schedule_steps;
  double final_lr = lr * final_fraction;
  long long warmup = (long long)(S * warmup_fraction), zero = steps - S;
  ref_piece pieces[4];
  long long bounds[4];
  int n = 0;
  /* warmup_schedule = optax.linear_schedule(0.0, lr, transition_steps=warmup_steps - 1) */
  if (warmup > 0) pieces[n] = (ref_piece){0, 0.0, lr, warmup - 1}, bounds[n++] = warmup;
  long long decay = (long long)(S * decay_fraction), stable = S - warmup - decay;
  if (stable > 0) pieces[n] = (ref_piece){1, lr, 0, 0}, bounds[n++] = warmup + stable;
  if (decay > 0) {
    pieces[n] = cosine_decay ? (ref_piece){2, lr, final_lr, decay} : (ref_piece){0, lr, final_lr, decay - 1};
    bounds[n++] = warmup + stable + decay;
  }
  if (zero > 0) pieces[n] = (ref_piece){1, 0.0, 0, 0}, bounds[n++] = S;
  ck_assert_int_gt(n, 0);
  /* optax.join_schedules: output = schedules[0](step); then for each
   * (boundary, schedule) of zip(boundaries, schedules[1:]):
   * where(step < boundary, output, schedule(step - boundary)) */
  double out = ref_eval(&pieces[0], (double)step);
  for (int i = 1; i < n; i++)
    if (step >= bounds[i - 1]) out = ref_eval(&pieces[i], (double)(step - bounds[i - 1]));
  return out;
}

static gt_config wsd_cfg(long long steps, long long S, double warm, double decay, const char *style) {
  gt_config c;
  memset(&c, 0, sizeof c);
  c.steps = steps;
  c.learning_rate_schedule_steps = S;
  c.learning_rate = 3e-4;
  c.learning_rate_final_fraction = 0.1;
  c.warmup_steps_fraction = warm;
  c.wsd_decay_steps_fraction = decay;
  snprintf(c.lr_schedule_type, sizeof c.lr_schedule_type, "wsd");
  snprintf(c.wsd_decay_style, sizeof c.wsd_decay_style, "%s", style);
  return c;
}

/* every step of the run and a few past it, against the reference; the
 * arithmetic is the same up to the order of a few double operations */
static void check_all_steps(const gt_config *c) {
  int cosine = !strcmp(c->wsd_decay_style, "cosine");
  for (long long s = 0; s < c->steps + 3; s++) {
    double want = ref_lr(c->learning_rate, c->learning_rate_final_fraction, c->warmup_steps_fraction,
                         c->wsd_decay_steps_fraction, cosine, c->learning_rate_schedule_steps, c->steps, s);
    double got = gt_lr_at(c, s);
    ck_assert_msg(fabs(got - want) <= 1e-15 * c->learning_rate, "steps %lld S %lld warm %g decay %g %s: step %lld: "
                  "%.17g, MaxText %.17g", c->steps, c->learning_rate_schedule_steps, c->warmup_steps_fraction,
                  c->wsd_decay_steps_fraction, c->wsd_decay_style, s, got, want);
  }
}

START_TEST(test_wsd_points_linear) {
  /* 100 steps: warmup int(10) = 10, decay int(20) = 20, stable 70 */
  gt_config c = wsd_cfg(100, -1, 0.1, 0.2, "linear");
  double lr = 3e-4, fin = 3e-5;
  ck_assert(gt_lr_at(&c, 0) == 0.0);
  /* warmup over steps 0-9, 9 transition steps: lr at step 9 */
  ck_assert(fabs(gt_lr_at(&c, 3) - lr / 3) < 1e-18);
  ck_assert(fabs(gt_lr_at(&c, 9) - lr) < 1e-18);
  /* the stable rate from step 10 to step 79 */
  ck_assert(gt_lr_at(&c, 10) == lr && gt_lr_at(&c, 45) == lr && gt_lr_at(&c, 79) == lr);
  /* the decay's first step is still lr, its last (step 99) the final rate:
   * linear_schedule over decay - 1 = 19 transition steps */
  ck_assert(fabs(gt_lr_at(&c, 80) - lr) < 1e-18);
  ck_assert(fabs(gt_lr_at(&c, 89) - (lr - (lr - fin) * 9.0 / 19.0)) < 1e-18);
  ck_assert(fabs(gt_lr_at(&c, 99) - fin) < 1e-18);
  check_all_steps(&c);
}
END_TEST

START_TEST(test_wsd_points_cosine) {
  gt_config c = wsd_cfg(100, -1, 0.1, 0.2, "cosine");
  double lr = 3e-4, fin = 3e-5;
  ck_assert(gt_lr_at(&c, 79) == lr);
  ck_assert(fabs(gt_lr_at(&c, 80) - lr) < 1e-18);
  double a = 0.5 * (cos(M_PI * 9.0 / 19.0) + 1.0);
  ck_assert(fabs(gt_lr_at(&c, 89) - (lr * a + fin * (1 - a))) < 1e-18);
  ck_assert(fabs(gt_lr_at(&c, 99) - fin) < 1e-18);
  check_all_steps(&c);
}
END_TEST

START_TEST(test_wsd_edges) {
  static const char *const styles[] = {"linear", "cosine"};
  /* steps, S, warmup, decay: a schedule shorter than the run (0 after it),
   * longer than it, no warmup, no decay, no stable phase, a one-step decay,
   * a one-step run, fractions that round down */
  static const struct {
    long long steps, S;
    double warm, decay;
  } cases[] = {{100, 50, 0.1, 0.2}, {40, 100, 0.1, 0.3}, {30, -1, 0.0, 0.5}, {30, -1, 0.2, 0.0},
               {30, -1, 0.4, 0.6}, {10, -1, 0.0, 0.1},  {10, -1, 0.2, 0.1}, {1, -1, 0.1, 0.1},
               {7, -1, 0.33, 0.33}, {50, 20, 1.0, 0.0}, {13, -1, 0.0, 1.0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int s = 0; s < 2; s++) {
      gt_config c = wsd_cfg(cases[i].steps, cases[i].S, cases[i].warm, cases[i].decay, styles[s]);
      check_all_steps(&c);
    }
  /* a one-step decay: linear_schedule over 0 steps is constant lr, the
   * cosine piece of one step is the final rate (pct = 1) */
  gt_config c = wsd_cfg(10, -1, 0.0, 0.1, "linear");
  ck_assert(gt_lr_at(&c, 9) == 3e-4);
  c = wsd_cfg(10, -1, 0.0, 0.1, "cosine");
  ck_assert(fabs(gt_lr_at(&c, 9) - 3e-5) < 1e-18);
  /* after a shorter schedule: 0 */
  c = wsd_cfg(100, 50, 0.1, 0.2, "linear");
  ck_assert(fabs(gt_lr_at(&c, 49) - 3e-5) < 1e-18);
  ck_assert(gt_lr_at(&c, 50) == 0.0 && gt_lr_at(&c, 99) == 0.0);
}
END_TEST

/* MaxText's cosine branch written out: the warmup piece
 * (optax.linear_schedule(0, lr, warmup - 1)), make_cos_schedule over the
 * S - warmup steps after it (a cosine of one step, steps=1 or a warmup
 * leaving one step, runs at the final rate: pct 1), then 0 */
static double cosine_ref(const gt_config *c, int64_t step) {
  int64_t S = c->learning_rate_schedule_steps > 0 ? c->learning_rate_schedule_steps : c->steps;
  int64_t warm = (int64_t)((double)S * c->warmup_steps_fraction);
  double lr = c->learning_rate;
  if (step < warm) return ref_eval(&(ref_piece){0, 0.0, lr, warm - 1}, (double)step);
  if (step >= S) return 0.0;
  int64_t n = S - warm, k = step - warm;
  double pct = n > 1 ? (double)k / (double)(n - 1) : 1.0;
  double a = 0.5 * (1.0 + cos(3.14159265358979323846 * pct));
  return lr * a + lr * c->learning_rate_final_fraction * (1.0 - a);
}

START_TEST(test_cosine_points) {
  static const char *const types[] = {"cosine", ""}; /* "" : a config made by hand */
  static const struct {
    long long steps, S;
    double warm;
  } cases[] = {{100, -1, 0.1}, {100, 50, 0.1}, {40, 100, 0.25}, {1, -1, 0.1}, {10, -1, 0.9}, {20, -1, 0.0}};
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      gt_config c = wsd_cfg(cases[i].steps, cases[i].S, cases[i].warm, 0.3, "cosine");
      snprintf(c.lr_schedule_type, sizeof c.lr_schedule_type, "%s", types[t]);
      for (long long s = 0; s < c.steps + 2; s++) ck_assert(fabs(gt_lr_at(&c, s) - cosine_ref(&c, s)) <= 1e-15 * c.learning_rate);
    }
  /* a one-step cosine: the final rate, not the peak */
  gt_config one = wsd_cfg(1, -1, 0.1, 0.3, "cosine"), late = wsd_cfg(10, -1, 0.9, 0.3, "cosine");
  snprintf(one.lr_schedule_type, sizeof one.lr_schedule_type, "cosine");
  snprintf(late.lr_schedule_type, sizeof late.lr_schedule_type, "cosine");
  ck_assert(fabs(gt_lr_at(&one, 0) - one.learning_rate * one.learning_rate_final_fraction) <= 1e-15);
  ck_assert(fabs(gt_lr_at(&late, 9) - late.learning_rate * late.learning_rate_final_fraction) <= 1e-15);
  /* (the warmup's last step, 8 of 0-8, at the full rate) */
  ck_assert(fabs(gt_lr_at(&late, 8) - late.learning_rate) <= 1e-15);
  ck_assert(gt_lr_at(&late, 7) < late.learning_rate && gt_lr_at(&late, 7) > 0);
}
END_TEST

START_TEST(test_wsd_fractions_refused) {
  static const char *const bad[] = {"model_name=gemma3-tiny", "lr_schedule_type=wsd", "warmup_steps_fraction=0.5",
                                    "wsd_decay_steps_fraction=0.6"};
  gt_config c;
  gt_test_config(&c, 3, bad); /* 0.5 + the default 0.1: fine */
  gt_err err;
  gt_err_clear(&err);
  ck_assert_int_eq(gt_config_validate(&c, &err), GT_OK);
  c.wsd_decay_steps_fraction = 0.6;
  ck_assert_int_eq(gt_config_validate(&c, &err), GT_ERR_CONFIG);
  ck_assert_msg(strstr(err.msg, "'warmup_steps_fraction' = 0.5") && strstr(err.msg, "'wsd_decay_steps_fraction' = 0.6") &&
                    strstr(err.msg, "must not exceed 1"),
                "%s", err.msg);
  /* exactly 1 leaves no stable phase, which MaxText allows */
  c.wsd_decay_steps_fraction = 0.5;
  ck_assert_int_eq(gt_config_validate(&c, &err), GT_OK);
  /* the cosine schedule does not read the decay fraction */
  c.wsd_decay_steps_fraction = 0.9;
  snprintf(c.lr_schedule_type, sizeof c.lr_schedule_type, "cosine");
  ck_assert_int_eq(gt_config_validate(&c, &err), GT_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sched");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_wsd_points_linear);
  tcase_add_test(tc, test_wsd_points_cosine);
  tcase_add_test(tc, test_wsd_edges);
  tcase_add_test(tc, test_cosine_points);
  tcase_add_test(tc, test_wsd_fractions_refused);
  return gt_test_run_suite(s, 0);
}
