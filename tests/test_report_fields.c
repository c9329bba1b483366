/* The reporter prints every field of gt_step_metrics: a step with all of
 * them filled by hand (z-loss, a spike skip, the parameter norm, tokens
 * seen, a DiLoCo sync, a checkpoint's times, two eval tasks, the run's
 * goodput) goes to the step and eval lines, to metrics.jsonl (read back
 * with cJSON: names, values, the nested tasks object, shares that sum to 1)
 * and to TensorBoard (the tags and values gt_report_tb_scalars gives, and
 * the event file read back by tools/read_tfevents.py when its Python
 * modules are there); a plain step leaves the optional keys out. The
 * goodput lap timer's buckets sum to its wall time. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_testutil.h"
#include "train/goodput.h"
#include "train/report.h"

static gt_step_metrics full_metrics(void) {
  gt_step_metrics sm;
  memset(&sm, 0, sizeof sm);
  sm.step = 7, sm.seconds = 0.5, sm.tflops_per_s_per_device = 0.25, sm.tokens_per_s_per_device = 512;
  sm.total_weights = 200, sm.loss = 3.5, sm.lm_loss = 3.25, sm.perplexity = exp(3.25);
  sm.learning_rate = 2e-3, sm.grad_norm = 40.0, sm.peak_memory_bytes = 1 << 20;
  sm.skipped = 1, sm.spike_skipped = 1, sm.skipped_steps = 2;
  sm.has_z_loss = 1, sm.z_loss = 0.012345;
  sm.param_norm = 17.5;
  sm.tokens_seen_per_device = 2048;
  sm.diloco_synced = 1, sm.diloco_bytes = 123456;
  sm.has_checkpoint = 1, sm.checkpoint_write_seconds = 1.25, sm.checkpoint_blocked_seconds = 0.125;
  sm.has_eval = 1, sm.eval_loss = 2.5, sm.eval_total_weights = 4096;
  sm.n_tasks = 2;
  snprintf(sm.tasks[0].name, sizeof sm.tasks[0].name, "hellaswag");
  sm.tasks[0].n = 40, sm.tasks[0].acc = 0.5, sm.tasks[0].acc_stderr = 0.08, sm.tasks[0].acc_norm = 0.625;
  sm.tasks[0].acc_norm_stderr = 0.0775;
  snprintf(sm.tasks[1].name, sizeof sm.tasks[1].name, "my \"mmlu\"");
  sm.tasks[1].n = 10, sm.tasks[1].acc = 0.3, sm.tasks[1].acc_stderr = 0.15, sm.tasks[1].acc_norm = 0.4;
  sm.tasks[1].acc_norm_stderr = 0.16;
  return sm;
}

static gt_goodput some_goodput(void) {
  gt_goodput g;
  gt_goodput_start(&g, 100.0);
  gt_goodput_mark(&g, GT_GP_PREP, 101.0);
  gt_goodput_mark(&g, GT_GP_DATA, 101.5);
  gt_goodput_mark(&g, GT_GP_STEP, 104.5);
  gt_goodput_mark(&g, GT_GP_EVAL, 105.5);
  gt_goodput_mark(&g, GT_GP_CKPT, 106.0);
  gt_goodput_mark(&g, GT_GP_SKIPPED, 106.5);
  gt_goodput_mark(&g, GT_GP_OTHER, 110.0);
  return g;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsNumber(it), "no number '%s'", key);
  return it->valuedouble;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

START_TEST(test_every_field_reported) {
  char *run = gt_test_dir_path("run");
  ck_assert_int_eq(gt_test_system("mkdir -p '%s'", run), 0);
  static const char *const ov[] = {"model_name=gemma3-tiny", "steps=10", "enable_tensorboard=true",
                                   "skip_step_on_spikes=true"};
  gt_config c;
  gt_test_config(&c, 4, ov);
  char *said = NULL;
  size_t said_n = 0;
  FILE *out = open_memstream(&said, &said_n);
  gt_report r;
  gt_err err;
  gt_err_clear(&err);
  ck_assert_msg(gt_report_open(&r, &c, run, out, NULL, 0, &err) == GT_OK, "%s", err.msg);
  gt_goodput g = some_goodput();
  r.goodput = &g;
  gt_step_metrics sm = full_metrics();
  ck_assert_msg(gt_report_step(&r, &sm, &err) == GT_OK, "%s", err.msg);
  /* a plain step: nothing optional */
  gt_step_metrics plain;
  memset(&plain, 0, sizeof plain);
  plain.step = 8, plain.seconds = 0.5, plain.loss = plain.lm_loss = 3, plain.perplexity = exp(3.0);
  plain.grad_norm = 1, plain.total_weights = 200, plain.skipped_steps = 2;
  ck_assert_msg(gt_report_step(&r, &plain, &err) == GT_OK, "%s", err.msg);
  gt_report_close(&r);
  fclose(out);

  /* the console: the step line's z-loss and spike, the skip note, the eval
   * line with its perplexity and both tasks */
  ck_assert_msg(strstr(said, "completed step: 7,") && strstr(said, ", z_loss: 0.012345, skipped: spike"), "%s", said);
  ck_assert_msg(strstr(said, "skipped step: 7, loss: 3.5, grad_norm: 40 (a spike") && strstr(said, "2 skipped so far"),
                "%s", said);
  ck_assert_msg(strstr(said, "eval metrics after step: 7, loss=2.500, perplexity=12.182, total_weights=4096, "
                             "hellaswag: acc=0.5000 (stderr 0.0800), acc_norm=0.6250 (stderr 0.0775), n=40, "
                             "my \"mmlu\": acc=0.3000"),
                "%s", said);
  ck_assert_ptr_null(strstr(strstr(said, "completed step: 8"), "z_loss"));

  /* metrics.jsonl */
  char *path = gt_test_path(run, "metrics.jsonl");
  long len;
  char *text = gt_test_read_file(path, &len);
  char *nl = strchr(text, '\n');
  ck_assert_ptr_nonnull(nl);
  *nl = '\0';
  cJSON *a = cJSON_Parse(text), *b = cJSON_Parse(nl + 1);
  ck_assert_msg(a && b, "%s", text);
  ck_assert(near(num(a, "z_loss"), 0.012345) && near(num(a, "param_norm"), 17.5));
  ck_assert(near(num(a, "tflops_per_device"), 0.125) && near(num(a, "tokens_per_device"), 256));
  ck_assert(num(a, "tokens_seen_per_device") == 2048 && num(a, "skipped_steps") == 2);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "spike_skipped")));
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "diloco_synced")) && num(a, "diloco_bytes") == 123456);
  ck_assert(near(num(a, "checkpoint_write_seconds"), 1.25) && near(num(a, "checkpoint_blocked_seconds"), 0.125));
  ck_assert(near(num(a, "eval_loss"), 2.5) && fabs(num(a, "eval_perplexity") - exp(2.5)) < 1e-6);
  const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(a, "tasks");
  const cJSON *t0 = cJSON_GetObjectItemCaseSensitive(tasks, "hellaswag"),
              *t1 = cJSON_GetObjectItemCaseSensitive(tasks, "my \"mmlu\"");
  ck_assert_msg(cJSON_IsObject(t0) && cJSON_IsObject(t1), "%s", text);
  ck_assert(num(t0, "n") == 40 && near(num(t0, "acc"), 0.5) && near(num(t0, "acc_stderr"), 0.08));
  ck_assert(near(num(t0, "acc_norm"), 0.625) && near(num(t0, "acc_norm_stderr"), 0.0775));
  ck_assert(num(t1, "n") == 10 && near(num(t1, "acc_norm"), 0.4));
  /* goodput: 3 of 10 s in steps; the shares sum to 1 (each printed to 1e-6) */
  ck_assert(near(num(a, "wall_seconds"), 10.0) && near(num(a, "goodput"), 0.3));
  const cJSON *bad = cJSON_GetObjectItemCaseSensitive(a, "badput");
  ck_assert(near(num(bad, "training_prep"), 0.1) && near(num(bad, "data_loading_sync"), 0.05));
  ck_assert(near(num(bad, "eval"), 0.1) && near(num(bad, "unproductive_checkpoint_save_time"), 0.05));
  ck_assert(near(num(bad, "unapplied_steps"), 0.05) && near(num(bad, "other"), 0.35));
  ck_assert(num(bad, "unproductive_checkpoint_restore_time") == 0);
  double sum = num(a, "goodput");
  int nb = 0;
  for (const cJSON *it = bad->child; it; it = it->next) sum += it->valuedouble, nb++;
  ck_assert_int_eq(nb, GT_GP_N - 1);
  ck_assert(fabs(sum - 1.0) < 1e-5);
  static const char *const absent[] = {"z_loss", "param_norm", "spike_skipped", "diloco_synced", "diloco_bytes",
                                       "checkpoint_write_seconds", "eval_loss", "eval_perplexity", "tasks"};
  for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
    ck_assert_msg(!cJSON_GetObjectItemCaseSensitive(b, absent[i]), "plain step has '%s'", absent[i]);
  ck_assert(num(b, "skipped_steps") == 2); /* the guard is on: every record has the count */
  cJSON_Delete(a), cJSON_Delete(b);

  /* the event file, read back independently when its reader can run */
  const char *py = "/usr/bin/python3";
  if (gt_test_system("%s -c 'import google.protobuf, crcmod.predefined' 2>/dev/null && command -v protoc >/dev/null",
                     py) == 0) {
    char *pb = gt_test_dir_path("pb");
    ck_assert_int_eq(gt_test_system("mkdir -p '%s' && protoc --python_out='%s' -I '%s/tools/proto' "
                                    "'%s/tools/proto/tf_event.proto'",
                                    pb, pb, GT_SOURCE_DIR, GT_SOURCE_DIR),
                     0);
    char *tags = gt_test_output("%s '%s/tools/read_tfevents.py' '%s' '%s'/tensorboard/events.out.tfevents.* | %s -c '"
                                "import json,sys\n"
                                "f=json.loads(sys.stdin.readline())\n"
                                "v=[e[\"values\"] for e in f[\"events\"] if e.get(\"step\")==7 and \"values\" in e][0]\n"
                                "print(\" \".join(\"%%s=%%.6g\" %% (k, v[k]) for k in sorted(v)))'",
                                py, GT_SOURCE_DIR, pb, run, py);
    static const char *const want[] = {"learning/z_loss=0.012345", "learning/param_norm=17.5",
                                       "perf/per_device_tflops=0.125", "perf/per_device_tokens=256",
                                       "perf/tokens_seen_per_device=2048", "optim/step_skipped=1",
                                       "optim/skipped_steps=2", "perf/checkpoint_write_seconds=1.25",
                                       "perf/checkpoint_blocked_seconds=0.125", "diloco/synced=1",
                                       "diloco/bytes=123456", "eval/avg_perplexity=12.1825",
                                       "eval/hellaswag/acc=0.5", "eval/hellaswag/acc_norm_stderr=0.0775",
                                       "eval/my \"mmlu\"/acc_norm=0.4"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
      ck_assert_msg(strstr(tags, want[i]), "no %s in %s", want[i], tags);
    free(tags), free(pb);
  } else {
    printf("test_report_fields: python3-protobuf, python3-crcmod or protoc missing: the event file is not read back\n");
  }
  free(text), free(path), free(said), free(run);
}
END_TEST

START_TEST(test_tb_scalars_of_every_field) {
  gt_step_metrics sm = full_metrics();
  gt_report_tb b;
  int n = gt_report_tb_scalars(&sm, 1.0, 1, &b);
  struct {
    const char *tag;
    double v;
  } want[] = {{"learning/z_loss", 0.012345},
              {"learning/grad_norm", 1.0}, /* clipped */
              {"learning/raw_grad_norm", 40.0},
              {"learning/param_norm", 17.5},
              {"perf/per_device_tflops", 0.125},
              {"perf/per_device_tokens", 256},
              {"perf/tokens_seen_per_device", 2048},
              {"optim/step_skipped", 1},
              {"optim/skipped_steps", 2},
              {"perf/checkpoint_write_seconds", 1.25},
              {"perf/checkpoint_blocked_seconds", 0.125},
              {"diloco/synced", 1},
              {"diloco/bytes", 123456},
              {"eval/avg_loss", 2.5},
              {"eval/avg_perplexity", exp(2.5)},
              {"eval/hellaswag/acc", 0.5},
              {"eval/hellaswag/acc_stderr", 0.08},
              {"eval/hellaswag/acc_norm", 0.625},
              {"eval/hellaswag/acc_norm_stderr", 0.0775},
              {"eval/my \"mmlu\"/acc", 0.3},
              {"eval/my \"mmlu\"/acc_norm_stderr", 0.16}};
  for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
    int found = 0;
    for (int i = 0; i < n; i++)
      if (!strcmp(b.v[i].tag, want[w].tag)) {
        ck_assert_msg(b.v[i].value == (float)want[w].v, "%s: %g, want %g", want[w].tag, b.v[i].value, want[w].v);
        found++;
      }
    ck_assert_msg(found == 1, "%s found %d times", want[w].tag, found);
  }
  /* 13 base tags (with the parameter norm 14), z-loss 1, guard 2,
   * checkpoint 2, DiLoCo 2, eval 3, tasks 8 */
  ck_assert_int_eq(n, 14 + 1 + 2 + 2 + 2 + 3 + 8);
  /* without the guard no optim/ tags; a plain step has none of the rest */
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 1.0, 0, &b), n - 2);
  gt_step_metrics plain;
  memset(&plain, 0, sizeof plain);
  ck_assert_int_eq(gt_report_tb_scalars(&plain, 1.0, 0, &b), 13);
}
END_TEST

START_TEST(test_goodput_buckets_sum_to_wall) {
  gt_goodput g = some_goodput();
  ck_assert(gt_goodput_wall(&g) == 10.0);
  double sum = 0;
  for (int b = 0; b < GT_GP_N; b++) sum += g.seconds[b];
  ck_assert(sum == 10.0);
  /* a clock read earlier than the last mark adds nothing and loses nothing */
  gt_goodput_mark(&g, GT_GP_EVAL, 109.0);
  ck_assert(gt_goodput_wall(&g) == 10.0 && g.seconds[GT_GP_EVAL] == 1.0);
  char line[512];
  gt_goodput_format(&g, line, sizeof line);
  ck_assert_msg(!strcmp(line, "goodput: 30.0% of 10.0 s wall time in applied training steps; badput: training_prep "
                              "10.0%, unproductive_checkpoint_restore_time 0.0%, data_loading_sync 5.0%, eval 10.0%, "
                              "unproductive_checkpoint_save_time 5.0%, unapplied_steps 5.0%, other 35.0%"),
                "%s", line);
}
END_TEST

int main(void) {
  Suite *s = suite_create("report_fields");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_every_field_reported);
  tcase_add_test(tc, test_tb_scalars_of_every_field);
  tcase_add_test(tc, test_goodput_buckets_sum_to_wall);
  return gt_test_run_suite(s, 0);
}
