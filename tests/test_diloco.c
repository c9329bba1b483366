/* DiLoCo (train/diloco.h): the outer step against a float64 transcription
 * of the paper's outer optimizer as optax writes it (sgd with Nesterov
 * momentum on the averaged pseudo-gradient: delta = mean_p(outer - inner_p),
 * m = mu m + delta, outer -= lr (delta + mu m)), over several syncs of
 * several replicas; the same step by hand; outer lr 1 without momentum
 * giving exactly the replicas' average; the refused keys (sync period 0,
 * one replica, replicas without enable_diloco, an expert axis, one rank);
 * the plan's bytes per sync and the outer state in the memory plan's
 * optimizer category; a trainer whose ranks are not split refused. The runs over MPI ranks are
 * tests/e2e_diloco.sh. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "config/config.h"
#include "dist/dist.h"
#include "mesh/fsdp.h"
#include "train/diloco.h"
#include "train/plan.h"
#include "train/trainer.h"
#include "gt_testutil.h"

#define CFG_DIR GT_SOURCE_DIR "/configs"

static double uniform(uint64_t *s) { return (double)(gt_splitmix64(s) >> 11) / 9007199254740992.0; }

/* The outer step in float64, element by element, from the formula. */
static void ref_outer(double *outer, double *mom, double *const *inner, int P, int64_t n, double lr, double mu) {
  for (int64_t i = 0; i < n; i++) {
    double delta = 0;
    for (int p = 0; p < P; p++) delta += outer[i] - inner[p][i];
    delta /= P;
    mom[i] = mu * mom[i] + delta;
    outer[i] -= lr * (delta + mu * mom[i]);
  }
}

START_TEST(test_outer_step_vs_reference) {
  enum { N = 257, P = 3, SYNCS = 6 };
  const float lr = 0.7f, mu = 0.9f;
  float outer[N], mom[N], sum[N], inner[P][N];
  double ro[N], rm[N], ri[P][N];
  double *rip[P];
  uint64_t s = 12345;
  for (int i = 0; i < N; i++) {
    outer[i] = (float)(uniform(&s) * 2 - 1);
    mom[i] = 0;
    ro[i] = outer[i], rm[i] = 0;
  }
  for (int p = 0; p < P; p++) rip[p] = ri[p];
  double worst = 0;
  for (int k = 0; k < SYNCS; k++) {
    /* each replica moved a little from the outer parameters */
    for (int p = 0; p < P; p++)
      for (int i = 0; i < N; i++) {
        inner[p][i] = outer[i] - (float)(0.01 * (uniform(&s) * 2 - 1));
        ri[p][i] = inner[p][i];
      }
    /* the sum over replicas in replica order, as the cross all-reduce adds */
    for (int i = 0; i < N; i++) {
      sum[i] = 0;
      for (int p = 0; p < P; p++) sum[i] += outer[i] - inner[p][i];
    }
    gt_diloco_outer_update(outer, mom, sum, N, P, lr, mu);
    ref_outer(ro, rm, rip, P, N, lr, mu);
    for (int i = 0; i < N; i++) {
      double e = fabs(outer[i] - ro[i]);
      if (e > worst) worst = e;
      ck_assert_msg(e <= 1e-6, "sync %d element %d: %.9g, reference %.9g", k, i, outer[i], ro[i]);
      ck_assert_msg(fabs(mom[i] - rm[i]) <= 1e-6, "sync %d element %d: momentum %.9g, reference %.9g", k, i, mom[i],
                    rm[i]);
      ro[i] = outer[i], rm[i] = mom[i]; /* follow the float state: no drift from earlier syncs */
    }
  }
  ck_assert(worst < 1e-6);
}
END_TEST

START_TEST(test_outer_step_by_hand) {
  /* two syncs with the same pseudo-gradient 1 (2 replicas: sum 2),
   * lr 0.5, momentum 0.9: m = 1, outer -= 0.5 (1 + 0.9) = 0.95; then
   * m = 0.9 + 1 = 1.9, outer -= 0.5 (1 + 0.9 x 1.9) = 1.355 */
  float outer = 3.0f, mom = 0.0f, sum = 2.0f;
  gt_diloco_outer_update(&outer, &mom, &sum, 1, 2, 0.5f, 0.9f);
  ck_assert_float_eq_tol(mom, 1.0f, 1e-7);
  ck_assert_float_eq_tol(outer, 3.0f - 0.95f, 1e-6);
  gt_diloco_outer_update(&outer, &mom, &sum, 1, 2, 0.5f, 0.9f);
  ck_assert_float_eq_tol(mom, 1.9f, 1e-6);
  ck_assert_float_eq_tol(outer, 3.0f - 0.95f - 1.355f, 1e-6);
  /* without momentum the momentum is the pseudo-gradient itself */
  float o2 = 1.0f, m2 = 5.0f, s2 = 0.5f;
  gt_diloco_outer_update(&o2, &m2, &s2, 1, 1, 0.1f, 0.0f);
  ck_assert(m2 == 0.5f);
}
END_TEST

START_TEST(test_lr1_no_momentum_is_the_average) {
  /* outer lr 1, momentum 0: outer - mean(outer - inner_p) = mean(inner_p);
   * with values whose differences and halves are exact, bit for bit */
  float outer[4] = {1.0f, -2.0f, 0.5f, 8.0f}, mom[4] = {0};
  float a[4] = {0.5f, -1.5f, 0.25f, 7.0f}, b[4] = {0.25f, -2.5f, 0.75f, 9.0f}, sum[4];
  for (int i = 0; i < 4; i++) sum[i] = (outer[i] - a[i]) + (outer[i] - b[i]);
  gt_diloco_outer_update(outer, mom, sum, 4, 2, 1.0f, 0.0f);
  for (int i = 0; i < 4; i++) ck_assert_msg(outer[i] == (a[i] + b[i]) / 2, "%d: %g", i, outer[i]);
}
END_TEST

static gt_rc load(gt_config *c, int n, const char *const *ov, gt_err *e) {
  return gt_config_load(c, CFG_DIR, NULL, n, ov, e);
}

START_TEST(test_refused_keys) {
  gt_config c;
  gt_err e;
  const char *zero[] = {"enable_diloco=true", "dcn_diloco_parallelism=2", "diloco_sync_period=0"};
  ck_assert_int_eq(load(&c, 3, zero, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'diloco_sync_period' = 0"), "%s", e.msg);
  const char *one[] = {"enable_diloco=true", "dcn_diloco_parallelism=1"};
  ck_assert_int_eq(load(&c, 2, one, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'dcn_diloco_parallelism' = 1") && strstr(e.msg, "2 or more"), "%s", e.msg);
  const char *off[] = {"dcn_diloco_parallelism=2"};
  ck_assert_int_eq(load(&c, 1, off, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "enable_diloco = false"), "%s", e.msg);
  const char *moe[] = {"model_name=gemma4-tiny-moe", "num_devices=2", "ici_expert_parallelism=2",
                       "enable_diloco=true", "dcn_diloco_parallelism=2"};
  ck_assert_int_eq(load(&c, 5, moe, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "expert axis"), "%s", e.msg);
  /* a good DiLoCo config loads; started without mpirun it is one rank,
   * which the run refuses naming the key (a build without MPI refuses the
   * config itself) */
  const char *ok[] = {"model_name=gemma3-tiny", "enable_diloco=true", "dcn_diloco_parallelism=2",
                      "diloco_sync_period=4"};
  if (!gt_dist_compiled()) {
    ck_assert_int_eq(load(&c, 4, ok, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "'enable_diloco' = true") && strstr(e.msg, "without MPI"), "%s", e.msg);
    return;
  }
  ck_assert_int_eq(load(&c, 4, ok, &e), GT_OK);
  ck_assert(gt_diloco_on(&c));
  ck_assert_int_eq(gt_diloco_setup_ranks(&c, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'enable_diloco' = true") && strstr(e.msg, "1 rank"), "%s", e.msg);
  /* off, nothing happens */
  c.enable_diloco = 0;
  ck_assert(!gt_diloco_on(&c));
  ck_assert_int_eq(gt_diloco_setup_ranks(&c, &e), GT_OK);
}
END_TEST

START_TEST(test_plan_bytes_and_memory) {
  if (!gt_dist_compiled()) return; /* the config is refused: test_refused_keys */
  gt_config c, plain;
  const char *ov[] = {"model_name=gemma3-tiny", "enable_diloco=true", "dcn_diloco_parallelism=3",
                      "diloco_sync_period=8", "per_device_batch_size=1"};
  gt_test_config(&c, 5, ov);
  gt_test_config(&plain, 1, ov);
  plain.per_device_batch_size = 1;
  int64_t elems, per_sync, outer;
  gt_err e;
  ck_assert_int_eq(gt_diloco_plan(&c, &elems, &per_sync, &outer, &e), GT_OK);
  gt_model m;
  gt_test_model_build(&m, &c);
  ck_assert_int_eq(elems, m.n_trainable); /* one device holds everything */
  gt_model_free(&m);
  ck_assert_int_eq(per_sync, elems * 4 * 2); /* to each of the 2 other replicas */
  ck_assert_int_eq(outer, elems * 4 * 2);
  ck_assert_int_eq(gt_diloco_sync_bytes(1000, 1), 0);
  /* the outer state is the device's: the plan's optimizer category grows
   * by it (the allocation-only trainer allocates it as a real one does) */
  gt_plan pw, pn;
  ck_assert_int_eq(gt_plan_compute(&pw, &c, &e), GT_OK);
  ck_assert_int_eq(gt_plan_compute(&pn, &plain, &e), GT_OK);
  ck_assert_int_eq(pw.cat_peak[GT_MEM_OPTIM] - pn.cat_peak[GT_MEM_OPTIM], outer);
  gt_plan_free(&pw);
  gt_plan_free(&pn);
  /* a real trainer needs the ranks split into that many replicas (one
   * process is one replica): refused naming the key */
  gt_trainer *t = NULL;
  ck_assert_int_eq(gt_trainer_create(&t, &c, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'enable_diloco' = true") && strstr(e.msg, "split into 1 replica"), "%s", e.msg);
  ck_assert_ptr_null(t);
  ck_assert_int_eq(gt_trainer_create(&t, &plain, NULL, &e), GT_OK);
  ck_assert_ptr_null(gt_trainer_diloco(t));
  gt_trainer_destroy(t);
}
END_TEST

Suite *diloco_suite(void) {
  Suite *s = suite_create("diloco");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_outer_step_vs_reference);
  tcase_add_test(tc, test_outer_step_by_hand);
  tcase_add_test(tc, test_lr1_no_momentum_is_the_average);
  tcase_add_test(tc, test_refused_keys);
  tcase_add_test(tc, test_plan_bytes_and_memory);
  return s;
}

int main(void) { return gt_test_run_suite(diloco_suite(), 0); }
