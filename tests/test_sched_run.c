/* The training loop's schedule of events, on real gemma3-tiny runs:
 * - eval after step s as MaxText's train loop: eval_interval > 0, s past the
 *   process's first step, (s + 1) % eval_interval == 0, and no extra eval
 *   after the last step (a resumed run skips its first step's eval too);
 *   eval_interval = 0 after the last step only;
 * - target_eval_loss ends the run at the first eval at or below it, with a
 *   checkpoint of that step, res saying which step; a target never reached
 *   runs every step; 0 is off;
 * - tokens_seen_per_device counts every step from 0, across a resume;
 * - goodput: the buckets of res sum to its wall time, which lies within the
 *   time measured around gt_train, and every metrics.jsonl record's shares
 *   sum to 1; on a stop, what runs between the step's report and the stop's
 *   checkpoint (here a 1 s sleep) is `other`, not checkpoint saving. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/prof.h"
#include "gt_testutil.h"
#include "train/train.h"

typedef struct seen {
  int n, evals[64];
  int64_t tokens[64];
  int ntok;
} seen;

static void after_step(const gt_step_metrics *sm, void *ctx) {
  seen *s = ctx;
  if (sm->has_eval && s->n < 64) s->evals[s->n++] = (int)sm->step;
  if (s->ntok < 64) s->tokens[s->ntok++] = sm->tokens_seen_per_device;
}

static char *corpus(void) {
  char *dir = gt_test_dir_path("w");
  ck_assert_int_eq(gt_test_system("mkdir -p '%s'", dir), 0);
  char *p = gt_test_path(dir, "corpus.txt");
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 400; i++)
    fprintf(f, "In the beginning God created the heaven and the earth, verse %d. And the earth was without form.\n", i);
  fclose(f);
  free(p);
  return dir;
}

static gt_rc train(const char *dir, const char *name, int n_extra, const char *const *extra, seen *s,
                   gt_train_result *res, double *outer) {
  char bo[600], rn[128], dp[700];
  snprintf(bo, sizeof bo, "base_output_directory=%s/runs", dir);
  snprintf(rn, sizeof rn, "run_name=%s", name);
  snprintf(dp, sizeof dp, "dataset_path=%s/corpus.txt", dir);
  const char *ov[24] = {"model_name=gemma3-tiny", "dataset_type=text", dp, bo, rn, "sample_tokens=0",
                        "eval_steps=1", "eval_split_fraction=0.1", "threads_per_device=1",
                        "enable_tensorboard=false", "checkpoint_period=1000"};
  int n = 11;
  for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
  gt_config c;
  gt_test_config(&c, n, ov);
  memset(s, 0, sizeof *s);
  gt_train_opts o = {.test_after_step = after_step, .test_ctx = s};
  gt_err e;
  gt_err_clear(&e);
  double t0 = gt_prof_now();
  gt_rc rc = gt_train(&c, &o, res, &e);
  if (outer) *outer = gt_prof_now() - t0;
  ck_assert_msg(rc == GT_OK, "%s: %s", name, e.msg);
  return rc;
}

static void check_evals(const seen *s, int n, const int *want, const char *what) {
  char got[256] = "";
  for (int i = 0; i < s->n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", s->evals[i]);
  ck_assert_msg(s->n == n, "%s: evals after steps%s", what, got);
  for (int i = 0; i < n; i++) ck_assert_msg(s->evals[i] == want[i], "%s: evals after steps%s", what, got);
}

START_TEST(test_eval_timing_as_maxtext) {
  char *dir = corpus();
  seen s;
  gt_train_result res;
  /* every 3 steps of 8: after steps 2 and 5, not after the last (7) */
  const char *a[] = {"steps=8", "eval_interval=3"};
  train(dir, "a", 2, a, &s, &res, NULL);
  check_evals(&s, 2, (const int[]){2, 5}, "eval_interval=3 steps=8");
  /* every step: not after the run's first step (MaxText's step > start_step) */
  const char *b[] = {"steps=3", "eval_interval=1"};
  train(dir, "b", 2, b, &s, &res, NULL);
  check_evals(&s, 2, (const int[]){1, 2}, "eval_interval=1 steps=3");
  /* resumed from its checkpoint at step 3: again not after its first step */
  const char *b2[] = {"steps=6", "eval_interval=1"};
  train(dir, "b", 2, b2, &s, &res, NULL);
  ck_assert_int_eq(res.start_step, 3);
  check_evals(&s, 2, (const int[]){4, 5}, "resumed, eval_interval=1");
  /* tokens seen: 4 rows x 64 tokens a step on one device, counted from step 0 across the resume */
  ck_assert_int_eq(s.ntok, 3);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(s.tokens[i], (int64_t)(3 + i + 1) * 4 * 64);
  /* 0: after the last step only; -1: never */
  const char *c[] = {"steps=4", "eval_interval=0"};
  train(dir, "c", 2, c, &s, &res, NULL);
  check_evals(&s, 1, (const int[]){3}, "eval_interval=0");
  const char *d[] = {"steps=4", "eval_interval=-1"};
  train(dir, "d", 2, d, &s, &res, NULL);
  check_evals(&s, 0, NULL, "eval_interval=-1");
  free(dir);
}
END_TEST

/* the shares of every metrics.jsonl record sum to 1 (each printed to 1e-6) */
static void check_record_shares(const char *dir, const char *name, int want_lines) {
  char path[900];
  snprintf(path, sizeof path, "%s/runs/%s/metrics.jsonl", dir, name);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char *line = NULL;
  size_t cap = 0;
  int lines = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *o = cJSON_Parse(line);
    ck_assert_ptr_nonnull(o);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "goodput"), *b = cJSON_GetObjectItemCaseSensitive(o, "badput");
    ck_assert(cJSON_IsNumber(g) && cJSON_IsObject(b));
    double sum = g->valuedouble;
    for (const cJSON *it = b->child; it; it = it->next) sum += it->valuedouble;
    ck_assert_msg(fabs(sum - 1.0) < 1e-5, "%s line %d: shares sum to %.9g", name, lines + 1, sum);
    ck_assert(g->valuedouble > 0);
    cJSON_Delete(o);
    lines++;
  }
  free(line);
  fclose(f);
  ck_assert_int_eq(lines, want_lines);
}

START_TEST(test_target_eval_loss_stops_at_first_eval_reaching_it) {
  char *dir = corpus();
  seen s;
  gt_train_result res;
  double outer;
  /* any eval reaches a target this high: the first one (after step 2) ends the run */
  const char *a[] = {"steps=12", "eval_interval=3", "target_eval_loss=1000", "enable_checkpointing=true"};
  train(dir, "hit", 4, a, &s, &res, &outer);
  ck_assert_int_eq(res.reached_target, 1);
  ck_assert_int_eq(res.target_step, 2);
  ck_assert_int_eq(res.steps_done, 3);
  ck_assert_int_eq(res.interrupted, 0);
  check_evals(&s, 1, (const int[]){2}, "target reached");
  char ck[900];
  snprintf(ck, sizeof ck, "%s/runs/hit/checkpoints/step_00000003", dir);
  ck_assert_msg(access(ck, F_OK) == 0, "no checkpoint %s", ck);
  check_record_shares(dir, "hit", 3);
  /* goodput: the buckets are the wall time, measured inside gt_train */
  double sum = 0;
  for (int b = 0; b < GT_GP_N; b++) sum += res.goodput_seconds[b];
  ck_assert(res.wall_seconds > 0 && res.wall_seconds <= outer);
  ck_assert_msg(fabs(sum - res.wall_seconds) <= 1e-9 * res.wall_seconds, "%.12g vs %.12g", sum, res.wall_seconds);
  ck_assert(res.goodput_seconds[GT_GP_STEP] > 0 && res.goodput_seconds[GT_GP_EVAL] > 0);
  ck_assert(res.goodput_seconds[GT_GP_CKPT] > 0 && res.goodput_seconds[GT_GP_PREP] > 0);

  /* a target never reached: every step runs, every eval is reported */
  const char *b[] = {"steps=7", "eval_interval=3", "target_eval_loss=0.0001"};
  train(dir, "miss", 3, b, &s, &res, NULL);
  ck_assert_int_eq(res.reached_target, 0);
  ck_assert_int_eq(res.steps_done, 7);
  check_evals(&s, 2, (const int[]){2, 5}, "target missed");
  check_record_shares(dir, "miss", 7);
  /* off (0): the same */
  const char *c[] = {"steps=4", "eval_interval=2", "target_eval_loss=0"};
  train(dir, "off", 3, c, &s, &res, NULL);
  ck_assert_int_eq(res.reached_target, 0);
  ck_assert_int_eq(res.steps_done, 4);
  free(dir);
}
END_TEST

/* after step 2: a 1 s sleep (standing for a slow report), then the stop
 * flag, as a signal would set it */
typedef struct stopper {
  volatile sig_atomic_t flag;
} stopper;

static void sleep_then_stop(const gt_step_metrics *sm, void *ctx) {
  stopper *st = ctx;
  if (sm->step != 2) return;
  struct timespec ts = {1, 0};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
  st->flag = SIGTERM;
}

START_TEST(test_stop_goodput_books_the_report_as_other) {
  char *dir = corpus();
  char bo[600], dp[700];
  snprintf(bo, sizeof bo, "base_output_directory=%s/runs", dir);
  snprintf(dp, sizeof dp, "dataset_path=%s/corpus.txt", dir);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=text", dp, bo, "run_name=stop", "sample_tokens=0",
                      "eval_interval=-1", "threads_per_device=1", "enable_tensorboard=false", "steps=6",
                      "checkpoint_period=1000", "enable_checkpointing=true", "async_checkpointing=false"};
  gt_config c;
  gt_test_config(&c, (int)(sizeof ov / sizeof ov[0]), ov);
  stopper st = {0};
  gt_train_opts o = {.stop = &st.flag, .test_after_step = sleep_then_stop, .test_ctx = &st};
  gt_train_result res;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_train(&c, &o, &res, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(res.interrupted, 1);
  ck_assert_int_eq(res.steps_done, 3);
  char ck[900];
  snprintf(ck, sizeof ck, "%s/runs/stop/checkpoints/step_00000003", dir);
  ck_assert_msg(access(ck, F_OK) == 0, "no stop checkpoint %s", ck);
  /* the sleep lies between the step's report and the stop's checkpoint */
  ck_assert_msg(res.goodput_seconds[GT_GP_OTHER] >= 1.0, "other %.3f s, checkpoint saving %.3f s",
                res.goodput_seconds[GT_GP_OTHER], res.goodput_seconds[GT_GP_CKPT]);
  free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sched_run");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_eval_timing_as_maxtext);
  tcase_add_test(tc, test_target_eval_loss_stops_at_first_eval_reaching_it);
  tcase_add_test(tc, test_stop_goodput_books_the_report_as_other);
  return gt_test_run_suite(s, 0);
}
