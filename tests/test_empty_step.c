/* A step with no token in its loss (every target masked: total_weights 0
 * over the global batch) updates nothing: the parameters keep their bits
 * (no weight decay), the optimizer step and so the learning-rate schedule
 * stay where they were, and the step is reported skipped with no_tokens set
 * instead of failing. The next step with tokens trains as the first would
 * have: its update is the schedule's step 0. On 1 device and on 2 devices
 * of one process (the count the decision uses is the global one, summed
 * over devices and ranks alike). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "gt_testutil.h"

typedef struct batch_buf {
  int32_t *in, *tg, *pos;
  gt_batch b;
} batch_buf;

static void batch_make(batch_buf *x, const gt_config *c, int masked) {
  int B = (int)gt_config_global_batch(c), T = (int)c->max_target_length;
  size_t n = (size_t)B * (size_t)T;
  x->in = calloc(n, sizeof(int32_t));
  x->tg = calloc(n, sizeof(int32_t));
  x->pos = calloc(n, sizeof(int32_t));
  uint64_t st = 42;
  gt_test_fill_ids(x->in, (int64_t)n, &st, 1, 200);
  gt_test_fill_ids(x->tg, (int64_t)n, &st, 1, 200);
  for (size_t i = 0; i < n; i++) {
    x->pos[i] = (int32_t)(i % (size_t)T);
    if (masked) x->tg[i] = -1;
  }
  x->b = (gt_batch){B, T, x->in, x->tg, x->pos, NULL};
}

static void batch_free(batch_buf *x) {
  free(x->in);
  free(x->tg);
  free(x->pos);
}

static float *full_params(gt_trainer *tr) {
  int64_t n = gt_trainer_num_params(tr);
  float *p = malloc((size_t)n * sizeof(float));
  gt_err err;
  ck_assert_msg(gt_fsdp_full_params(gt_trainer_fsdp(tr), p, &err) == GT_OK, "%s", err.msg);
  return p;
}

static void empty_step_case(const char *devices) {
  /* weight decay on, so an applied update moves every weight even with a
   * zero gradient */
  const char *ov[] = {"model_name=gemma3-tiny", devices, "dataset_type=synthetic", "adam_weight_decay=0.1",
                      "learning_rate=0.01", "warmup_steps_fraction=0"};
  gt_config c;
  gt_test_config(&c, 6, ov);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &err) == GT_OK, "%s", err.msg);
  batch_buf empty, full;
  batch_make(&empty, &c, 1);
  batch_make(&full, &c, 0);
  int64_t n = gt_trainer_num_params(tr);
  float *p0 = full_params(tr);
  gt_step_metrics sm;
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(gt_trainer_step(tr, &empty.b, 1, &sm, &err) == GT_OK, "%s", err.msg);
    ck_assert_int_eq(sm.total_weights, 0);
    ck_assert_int_eq(sm.no_tokens, 1);
    ck_assert_int_eq(sm.skipped, 1);
    ck_assert_int_eq(sm.step, i);
  }
  float *p1 = full_params(tr);
  ck_assert_msg(gt_test_same_bits(p0, p1, n), "an empty step moved the parameters");
  ck_assert_int_eq(gt_fsdp_opt_step(gt_trainer_fsdp(tr)), 0);
  ck_assert_int_eq(gt_trainer_step_index(tr), 2);
  /* a step with tokens: applied, at the schedule's first step */
  ck_assert_msg(gt_trainer_step(tr, &full.b, 1, &sm, &err) == GT_OK, "%s", err.msg);
  ck_assert_int_eq(sm.no_tokens, 0);
  ck_assert_int_eq(sm.skipped, 0);
  ck_assert_int_eq(sm.total_weights, (int64_t)full.b.B * full.b.T);
  ck_assert(isfinite(sm.loss) && sm.loss > 0);
  ck_assert_int_eq(gt_fsdp_opt_step(gt_trainer_fsdp(tr)), 1);
  float *p2 = full_params(tr);
  ck_assert(!gt_test_same_bits(p0, p2, n));
  free(p0);
  free(p1);
  free(p2);
  batch_free(&empty);
  batch_free(&full);
  gt_trainer_destroy(tr);
}

START_TEST(test_empty_step_one_device) { empty_step_case("num_devices=1"); }
END_TEST

START_TEST(test_empty_step_two_devices) { empty_step_case("num_devices=2"); }
END_TEST

/* the eval of batches with no token in the loss: no loss (0 tokens), not NaN */
START_TEST(test_empty_eval) {
  const char *ov[] = {"model_name=gemma3-tiny", "num_devices=2", "dataset_type=synthetic"};
  gt_config c;
  gt_test_config(&c, 3, ov);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &err) == GT_OK, "%s", err.msg);
  batch_buf empty;
  batch_make(&empty, &c, 1);
  gt_loss_stats st = {0};
  ck_assert_msg(gt_trainer_eval(tr, &empty.b, 1, &st, &err) == GT_OK, "%s", err.msg);
  ck_assert_int_eq(st.total_weights, 0);
  ck_assert(st.xent_sum == 0.0);
  batch_free(&empty);
  gt_trainer_destroy(tr);
}
END_TEST

static Suite *empty_suite(void) {
  Suite *s = suite_create("empty_step");
  TCase *tc = gt_test_tcase(s, "empty");
  tcase_add_test(tc, test_empty_step_one_device);
  tcase_add_test(tc, test_empty_step_two_devices);
  tcase_add_test(tc, test_empty_eval);
  return s;
}

int main(void) { return gt_test_run_suite(empty_suite(), 0); }
