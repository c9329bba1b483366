/* The reporter's record of a run: a metrics.jsonl
 * write that fails is an error naming the file and never leaves a torn
 * line behind; a resume drops a torn last line and says so, keeping every
 * whole record before it. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_testutil.h"
#include "train/report.h"

static gt_step_metrics metrics_of(int64_t step) {
  gt_step_metrics sm;
  memset(&sm, 0, sizeof sm);
  sm.step = step;
  sm.loss = sm.lm_loss = 5.0 - 0.1 * (double)step;
  sm.perplexity = 100;
  sm.seconds = 0.5;
  sm.total_weights = 64;
  sm.learning_rate = 1e-3;
  sm.grad_norm = 1.5;
  return sm;
}

static void open_report(gt_report *r, const char *run, int64_t start, FILE *out) {
  static const char *const ov[] = {"model_name=gemma3-tiny", "steps=10", "enable_tensorboard=false"};
  gt_config c;
  gt_test_config(&c, 3, ov);
  gt_err err;
  gt_err_clear(&err);
  ck_assert_msg(gt_report_open(r, &c, run, out, NULL, start, &err) == GT_OK, "%s", err.msg);
}

START_TEST(test_failed_metrics_write_is_an_error) {
  char *run = gt_test_dir_path("run");
  ck_assert_int_eq(gt_test_system("mkdir -p '%s'", run), 0);
  gt_report r;
  open_report(&r, run, 0, NULL);
  gt_err err;
  gt_step_metrics sm = metrics_of(0);
  ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_OK);
  /* the disk is full from here on */
  fclose(r.metrics);
  r.metrics = fopen("/dev/full", "w");
  ck_assert_ptr_nonnull(r.metrics);
  sm = metrics_of(1);
  ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_ERR_IO);
  ck_assert_msg(strstr(err.msg, "metrics.jsonl") && strstr(err.msg, "step 1") && strstr(err.msg, "No space left"),
                "%s", err.msg);
  gt_report_close(&r);
  free(run);
}
END_TEST

START_TEST(test_resume_drops_a_torn_line_and_says_so) {
  char *run = gt_test_dir_path("run");
  ck_assert_int_eq(gt_test_system("mkdir -p '%s'", run), 0);
  gt_report r;
  open_report(&r, run, 0, NULL);
  gt_err err;
  for (int s = 0; s < 3; s++) {
    gt_step_metrics sm = metrics_of(s);
    ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_OK);
  }
  gt_report_close(&r);
  /* a kill in the middle of step 3's line */
  char *path = gt_test_path(run, "metrics.jsonl");
  FILE *f = fopen(path, "a");
  fputs("{\"step\": 3, \"loss\": 4.7, \"lm_lo", f);
  fclose(f);
  char *said = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&said, &n);
  open_report(&r, run, 3, out);
  fflush(out);
  ck_assert_msg(said && strstr(said, "dropped line 4, cut short"), "%s", said ? said : "(nothing said)");
  ck_assert(r.ls[2] == metrics_of(2).loss && r.ls[1] == metrics_of(1).loss);
  gt_report_close(&r);
  fclose(out);
  long len;
  char *text = gt_test_read_file(path, &len);
  /* three whole records, nothing torn */
  int lines = 0;
  for (long i = 0; i < len; i++) lines += text[i] == '\n';
  ck_assert_int_eq(lines, 3);
  ck_assert(len > 0 && text[len - 1] == '\n');
  ck_assert_ptr_null(strstr(text, "lm_lo\""));
  free(text), free(said), free(path), free(run);
}
END_TEST

int main(void) {
  Suite *s = suite_create("report");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_failed_metrics_write_is_an_error);
  tcase_add_test(tc, test_resume_drops_a_torn_line_and_says_so);
  return gt_test_run_suite(s, 0);
}
