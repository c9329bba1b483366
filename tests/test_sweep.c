/* Sweep files: grid expansion order (the file's key order, last key
 * fastest), the union of grids without duplicates, explicit points after
 * them, the precedence of a point's layers, every refusal naming what is
 * wrong, result records round-tripping through results.jsonl, the medians
 * read from a run's metrics.jsonl (the rates those of the median step
 * time), the table's order and heading; and the command's
 * runner: a process's exit status -> the point's status, and a whole sweep
 * with a stand-in for `gemtrain train`: every point checked before any
 * starts, a point's identity (its resolved configuration) deciding which
 * record and run directory are its own, each point's files kept at its
 * number when points are renumbered. Running real points is e2e_sweep.sh's
 * job. */
#define _GNU_SOURCE
/* The runner is the command's (tools/), which no test binary links: its
 * three files (tools/sweep_*.c) are included into this test below. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_testutil.h"
#include "sweep/sweep.h"
#include "tools/cli.h"
#include "tools/sweep_runner.h"

static void parse_ok(gt_sweep *s, const char *text) {
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_sweep_parse(s, text, "/some/dir/my_sweep.json", &e) == GT_OK, "%s", e.msg);
}

/* point k's keys joined with spaces */
static const char *point_text(const gt_sweep *s, int k) {
  static char buf[1024];
  buf[0] = '\0';
  for (int i = 0; i < s->points[k].n; i++) {
    if (i) strcat(buf, " ");
    strcat(buf, s->points[k].kv[i]);
  }
  return buf;
}

static void refused(const char *text, const char *want) {
  gt_sweep s;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_sweep_parse(&s, text, "bad.json", &e) != GT_OK, "accepted: %s", text);
  ck_assert_msg(strstr(e.msg, want) != NULL, "for %s\nexpected '%s' in: %s", text, want, e.msg);
  ck_assert_msg(strstr(e.msg, "bad.json") != NULL, "the message does not name the file: %s", e.msg);
  ck_assert_msg(!strchr(e.msg, '\n'), "more than one line: %s", e.msg);
}

START_TEST(test_grid_order) {
  gt_sweep s;
  parse_ok(&s,
           "{\"grid\": {\"remat_policy\": [\"full\", \"none\"], \"max_target_length\": [64, 128, 256]},"
           " \"steps\": 3}");
  ck_assert_int_eq(s.n_points, 6);
  const char *want[] = {"remat_policy=full max_target_length=64",  "remat_policy=full max_target_length=128",
                        "remat_policy=full max_target_length=256", "remat_policy=none max_target_length=64",
                        "remat_policy=none max_target_length=128", "remat_policy=none max_target_length=256"};
  for (int k = 0; k < 6; k++) ck_assert_str_eq(point_text(&s, k), want[k]);
  ck_assert_int_eq(s.n_keys, 2);
  ck_assert_str_eq(s.keys[0], "remat_policy");
  ck_assert_str_eq(s.keys[1], "max_target_length");
  ck_assert_int_eq(s.steps, 3);
  ck_assert_str_eq(s.name, "my_sweep");
  /* defaults: one process at a time, 600 s, the plot's x the first key */
  ck_assert_int_eq(s.max_parallel, 1);
  ck_assert(s.point_timeout_s == 600);
  ck_assert_str_eq(s.plot_x, "remat_policy");
  ck_assert_str_eq(s.plot_y, s.metrics[0]);
  gt_sweep_free(&s);

  /* the order is the file's, not alphabetical */
  parse_ok(&s, "{\"grid\": {\"b\": [1, 2], \"a\": [3, 4]}}");
  ck_assert_str_eq(point_text(&s, 0), "b=1 a=3");
  ck_assert_str_eq(point_text(&s, 1), "b=1 a=4");
  ck_assert_str_eq(point_text(&s, 2), "b=2 a=3");
  gt_sweep_free(&s);
}
END_TEST

START_TEST(test_values_as_text) {
  gt_sweep s;
  parse_ok(&s,
           "{\"points\": [{\"learning_rate\": 0.1, \"adam_eps\": 1e-8, \"per_device_batch_size\": 4.0,"
           " \"dump_config\": false, \"remat_policy\": \"minimal\", \"memory_limit_bytes\": 68719476736}]}");
  ck_assert_int_eq(s.n_points, 1);
  ck_assert_str_eq(point_text(&s, 0),
                   "learning_rate=0.1 adam_eps=1e-08 per_device_batch_size=4 dump_config=false "
                   "remat_policy=minimal memory_limit_bytes=68719476736");
  gt_sweep_free(&s);
}
END_TEST

START_TEST(test_grids_union_and_points) {
  gt_sweep s;
  /* the two grids share a=2 b=x: it is one point, kept where it first came */
  parse_ok(&s,
           "{\"grids\": [{\"a\": [1, 2], \"b\": [\"x\"]}, {\"a\": [2, 3], \"b\": [\"x\", \"y\"]}],"
           " \"points\": [{\"c\": true}, {\"a\": 1, \"b\": \"x\"}, {}]}");
  const char *want[] = {"a=1 b=x", "a=2 b=x", "a=2 b=y", "a=3 b=x", "a=3 b=y", "c=true", ""};
  ck_assert_int_eq(s.n_points, 7);
  for (int k = 0; k < 7; k++) ck_assert_str_eq(point_text(&s, k), want[k]);
  ck_assert_int_eq(s.n_keys, 3);
  ck_assert_str_eq(s.keys[2], "c");
  gt_sweep_free(&s);

  /* grid, then grids, then explicit points, whatever order the file writes
   * them in (a point's number names its run directory) */
  parse_ok(&s, "{\"points\": [{\"a\": 9}], \"grids\": [{\"a\": [5]}], \"grid\": {\"a\": [1, 2]}}");
  ck_assert_int_eq(s.n_points, 4);
  const char *order[] = {"a=1", "a=2", "a=5", "a=9"};
  for (int k = 0; k < 4; k++) ck_assert_str_eq(point_text(&s, k), order[k]);
  gt_sweep_free(&s);
}
END_TEST

START_TEST(test_all_keys) {
  gt_sweep s;
  parse_ok(&s,
           "{\"base\": {\"config\": \"cfg/user.json\", \"overrides\": {\"model_name\": \"gemma3-tiny\","
           " \"steps\": 50}},"
           " \"grid\": {\"remat_policy\": [\"full\"], \"num_vocab_tiling\": [1, 2]},"
           " \"steps\": 3, \"metrics\": [\"tokens_per_s_per_device\", \"measured_peak_bytes\"],"
           " \"sort_by\": \"tokens_per_s_per_device\", \"sort_desc\": true,"
           " \"plot\": {\"x\": \"num_vocab_tiling\", \"y\": \"measured_peak_bytes\"},"
           " \"max_parallel\": 2, \"point_timeout_s\": 30, \"output_directory\": \"sweeps/x\","
           " \"description\": \"what this sweep asks\"}");
  /* base.config is relative to the sweep file */
  ck_assert_str_eq(s.base_config, "/some/dir/cfg/user.json");
  ck_assert_int_eq(s.n_base, 2);
  ck_assert_str_eq(s.base[0], "model_name=gemma3-tiny");
  ck_assert_int_eq(s.n_metrics, 2);
  ck_assert_str_eq(s.metrics[1], "measured_peak_bytes");
  ck_assert_str_eq(s.sort_by, "tokens_per_s_per_device");
  ck_assert_int_eq(s.sort_desc, 1);
  ck_assert_str_eq(s.plot_x, "num_vocab_tiling");
  ck_assert_str_eq(s.plot_y, "measured_peak_bytes");
  ck_assert_int_eq(s.max_parallel, 2);
  ck_assert(s.point_timeout_s == 30);
  ck_assert_str_eq(s.output_directory, "sweeps/x");

  /* precedence: base overrides < steps < the point's keys < command line */
  const char *cli[] = {"learning_rate=0.01", "num_vocab_tiling=4"};
  gt_sweep_kvs ov;
  gt_err e;
  ck_assert(gt_sweep_point_overrides(&s, 1, 2, cli, &ov, &e) == GT_OK);
  ck_assert_str_eq(gt_sweep_kvs_get(&ov, "model_name"), "gemma3-tiny");
  ck_assert_str_eq(gt_sweep_kvs_get(&ov, "steps"), "3");
  ck_assert_str_eq(gt_sweep_kvs_get(&ov, "remat_policy"), "full");
  ck_assert_str_eq(gt_sweep_kvs_get(&ov, "num_vocab_tiling"), "4");
  ck_assert_str_eq(gt_sweep_kvs_get(&ov, "learning_rate"), "0.01");
  ck_assert_ptr_null(gt_sweep_kvs_get(&ov, "steps_x"));
  ck_assert_int_eq(ov.n, 5); /* one entry per key */
  gt_sweep_kvs_free(&ov);
  gt_sweep_free(&s);

  /* an absolute config path stays as written */
  parse_ok(&s, "{\"base\": {\"config\": \"/etc/x.json\"}, \"points\": [{}]}");
  ck_assert_str_eq(s.base_config, "/etc/x.json");
  gt_sweep_free(&s);
}
END_TEST

START_TEST(test_refusals) {
  /* more points than GT_SWEEP_MAX_POINTS (a fuzzer's 35,000-point grid
   * took 14 s to parse): 2^13 = 8192 */
  refused("{\"grid\": {\"a\": [1, 2], \"b\": [1, 2], \"c\": [1, 2], \"d\": [1, 2], \"e\": [1, 2], "
          "\"f\": [1, 2], \"g\": [1, 2], \"h\": [1, 2], \"i\": [1, 2], \"j\": [1, 2], \"k\": [1, 2], "
          "\"l\": [1, 2], \"m\": [1, 2]}}",
          "grid has more than 4096 points");
  /* a key given twice (fuzz_sweep: a second "metrics" list wrote past the
   * first one's array) */
  refused("{\"grid\": {\"steps\": [1]}, \"metrics\": [\"final_loss\"], \"metrics\": [\"final_loss\", "
          "\"final_loss\"]}",
          "key 'metrics' appears twice");
  /* and inside a grid, a point or the base (the first list was dropped) */
  refused("{\"grid\": {\"a\": [1, 2], \"a\": [3, 4]}}", "grid: key 'a' appears twice");
  refused("{\"grids\": [{\"a\": [1]}, {\"b\": [1], \"b\": [2]}]}", "grids[1]: key 'b' appears twice");
  refused("{\"points\": [{\"steps\": 1}, {\"steps\": 1, \"steps\": 2}]}", "points[1]: key 'steps' appears twice");
  refused("{\"base\": {\"overrides\": {\"steps\": 1, \"steps\": 2}}, \"points\": [{}]}",
          "base.overrides: key 'steps' appears twice");
  refused("{\"base\": {\"overrides\": {}, \"overrides\": {}}, \"points\": [{}]}", "base: key 'overrides' appears twice");
  refused("{\"grid\": {\"a\": [1, 2]},\n \"steps\": 3,,}", "is not valid JSON (near line 2)");
  refused("not json at all", "is not valid JSON");
  refused("[1, 2]", "must hold a JSON object");
  refused("{\"grid\": {\"remat_policy\": \"full\"}}",
          "grid key 'remat_policy' must be a list of values, found a string");
  refused("{\"grid\": {\"a\": []}}", "grid key 'a' has an empty list");
  refused("{\"grid\": {\"a\": [1, [2]]}}", "grid key 'a' value 1 must be a number, string or boolean, found a list");
  refused("{\"grid\": {}}", "grid is empty");
  refused("{\"grid\": [1, 2]}", "grid must be an object of key: [values], found a list");
  refused("{\"grids\": {\"a\": [1]}}", "grids must be a list of grids");
  refused("{\"grids\": [{\"a\": [1]}, {\"b\": 2}]}", "grids[1] key 'b' must be a list of values, found a number");
  refused("{\"gird\": {\"a\": [1]}}", "unknown key 'gird'; did you mean 'grid'?");
  refused("{\"grid\": {\"a\": [1]}, \"colour\": 1}", "unknown key 'colour'; expected base, grid");
  refused("{}", "defines no points");
  refused("{\"steps\": 3, \"metrics\": [\"final_loss\"]}", "defines no points");
  refused("{\"points\": []}", "defines no points");
  refused("{\"points\": [1]}", "points[0] must be an object");
  refused("{\"points\": [{\"a\": [1, 2]}]}", "points[0] key 'a' is a list; a point takes one value");
  refused("{\"points\": [{\"a\": null}]}", "key 'a' must be a number, string or boolean, found null");
  refused("{\"points\": [{}], \"steps\": 0}", "steps must be a whole number >= 1");
  refused("{\"points\": [{}], \"steps\": \"3\"}", "steps must be a whole number >= 1, found a string");
  refused("{\"points\": [{}], \"metrics\": [\"tokens_per_s\"]}",
          "metrics[0] = 'tokens_per_s' is not a metric; did you mean");
  refused("{\"points\": [{}], \"metrics\": []}", "metrics must be a non-empty list");
  refused("{\"points\": [{}], \"sort_by\": \"speed\"}", "sort_by = 'speed' is not a metric");
  refused("{\"points\": [{}], \"sort_desc\": 1}", "sort_desc must be true or false");
  refused("{\"grid\": {\"a\": [1]}, \"plot\": {\"x\": \"b\"}}", "plot.x = 'b' is not a swept key; swept keys: a");
  refused("{\"grid\": {\"a\": [1]}, \"plot\": {\"x\": \"a\", \"y\": \"loss\"}}", "plot.y = 'loss' is not a metric");
  refused("{\"grid\": {\"a\": [1]}, \"plot\": {\"z\": \"a\"}}", "unknown key 'plot.z'");
  refused("{\"points\": [{}], \"max_parallel\": 0}", "max_parallel must be a whole number in 1 .. 256");
  refused("{\"points\": [{}], \"point_timeout_s\": -1}", "point_timeout_s must be a number of seconds > 0");
  refused("{\"points\": [{}], \"base\": {\"config\": \"x.yaml\"}}", "base.config must be the path of a .json");
  refused("{\"points\": [{}], \"base\": {\"overides\": {}}}", "unknown key 'base.overides'; did you mean 'overrides'?");
  refused("{\"points\": [{}], \"base\": {\"overrides\": {\"steps\": [1]}}}",
          "base.overrides: key 'steps' must be a number, string or boolean, found a list");
  /* the sweep names each run itself */
  refused("{\"points\": [{\"run_name\": \"x\"}]}", "sets 'run_name', which the sweep sets for each point");
  refused("{\"grid\": {\"base_output_directory\": [\"a\"]}}", "sets 'base_output_directory'");
}
END_TEST

START_TEST(test_load_missing_file) {
  gt_sweep s;
  gt_err e;
  ck_assert(gt_sweep_load(&s, "/nonexistent/sweep.json", &e) == GT_ERR_IO);
  ck_assert(strstr(e.msg, "/nonexistent/sweep.json"));
}
END_TEST

START_TEST(test_result_round_trip) {
  gt_sweep_result r, back;
  gt_err e;
  gt_sweep_result_init(&r);
  ck_assert(isnan(r.final_loss) && isnan(r.median_step_seconds));
  r.point = 3;
  r.status = GT_SWEEP_OK;
  gt_sweep_kvs_set(&r.overrides, "steps=3", &e);
  gt_sweep_kvs_set(&r.overrides, "remat_policy=full", &e);
  gt_sweep_kvs_set(&r.values, "remat_policy=full", &e);
  r.median_step_seconds = 0.0123;
  r.planned_peak_bytes = 5923840;
  r.final_loss = 4.25;
  r.steps_done = 3;
  snprintf(r.log, sizeof r.log, "runs/point-3.log");
  char *line = gt_sweep_result_to_json(&r);
  ck_assert(!strchr(line, '\n'));
  ck_assert(strstr(line, "\"tokens_per_s_per_device\":null")); /* not measured */
  ck_assert(gt_sweep_result_from_json(&back, line, &e) == GT_OK);
  ck_assert_int_eq(back.point, 3);
  ck_assert_int_eq(back.status, GT_SWEEP_OK);
  ck_assert(strstr(line, "\"status\":\"ok\""));
  ck_assert(gt_sweep_kvs_equal(&back.overrides, &r.overrides));
  ck_assert(back.median_step_seconds == 0.0123 && back.final_loss == 4.25 && back.planned_peak_bytes == 5923840);
  ck_assert(isnan(back.tokens_per_s_per_device));
  ck_assert_int_eq(back.steps_done, 3);
  ck_assert_str_eq(back.log, "runs/point-3.log");
  /* equality ignores order, not values */
  gt_sweep_kvs other = {0, 0, NULL};
  gt_sweep_kvs_set(&other, "remat_policy=full", &e);
  gt_sweep_kvs_set(&other, "steps=3", &e);
  ck_assert(gt_sweep_kvs_equal(&other, &r.overrides));
  gt_sweep_kvs_set(&other, "steps=4", &e);
  ck_assert(!gt_sweep_kvs_equal(&other, &r.overrides));
  gt_sweep_kvs_free(&other);
  free(line);
  gt_sweep_result_free(&back);
  gt_sweep_result_free(&r);
  ck_assert(gt_sweep_result_from_json(&back, "{\"point\": 1, \"status\": \"ok\"", &e) != GT_OK);
  ck_assert(gt_sweep_result_from_json(&back, "{\"point\": 1}", &e) != GT_OK);

  /* every status reads back as itself, under the name existing files hold;
   * a crash keeps its signal */
  const char *names[GT_SWEEP_NUM_STATUSES] = {"",         "ok",      "does_not_fit", "config_error", "failed",
                                              "diverged", "timeout", "crashed",      "would_run"};
  for (int st = 0; st < GT_SWEEP_NUM_STATUSES; st++) {
    ck_assert_str_eq(gt_sweep_status_name((gt_sweep_status)st), names[st]);
    gt_sweep_result_init(&r);
    r.point = 1;
    r.status = (gt_sweep_status)st;
    r.signal = st == GT_SWEEP_CRASHED ? 11 : 0;
    line = gt_sweep_result_to_json(&r);
    char want[64];
    snprintf(want, sizeof want, "\"status\":\"%s\"", st == GT_SWEEP_CRASHED ? "crashed (signal 11)" : names[st]);
    ck_assert_msg(strstr(line, want), "%s lacks %s", line, want);
    ck_assert(gt_sweep_result_from_json(&back, line, &e) == GT_OK);
    ck_assert_int_eq(back.status, st);
    ck_assert_int_eq(back.signal, r.signal);
    gt_sweep_result_free(&back);
    free(line);
  }
  ck_assert(gt_sweep_result_from_json(&back, "{\"point\": 1, \"status\": \"exploded\", \"overrides\": {}}", &e) ==
            GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "status 'exploded'"), "%s", e.msg);
}
END_TEST

START_TEST(test_run_metrics) {
  char *dir = gt_test_mkdtemp("sweep");
  char path[512];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  /* step 0 is slow (first touch) and is left out of the medians */
  fprintf(f,
          "{\"step\": 0, \"loss\": 6.0, \"seconds\": 9.0, \"tokens_per_s_per_device\": 10, "
          "\"tflops_per_s_per_device\": 0.001, \"peak_memory_bytes\": 100}\n");
  fprintf(f,
          "{\"step\": 1, \"loss\": 5.0, \"seconds\": 0.3, \"tokens_per_s_per_device\": 300, "
          "\"tflops_per_s_per_device\": 0.3, \"peak_memory_bytes\": 300}\n");
  fprintf(f,
          "{\"step\": 2, \"loss\": 4.0, \"seconds\": 0.1, \"tokens_per_s_per_device\": 900, "
          "\"tflops_per_s_per_device\": 0.9, \"peak_memory_bytes\": 200, \"eval_loss\": 4.5}\n");
  fprintf(f,
          "{\"step\": 3, \"loss\": 3.5, \"seconds\": 0.2, \"tokens_per_s_per_device\": 450, "
          "\"tflops_per_s_per_device\": 0.45, \"peak_memory_bytes\": 200}\n");
  fclose(f);
  gt_sweep_result r;
  gt_err e;
  gt_sweep_result_init(&r);
  ck_assert_msg(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK, "%s", e.msg);
  ck_assert(fabs(r.median_step_seconds - 0.2) < 1e-12);
  ck_assert(fabs(r.tokens_per_s_per_device - 450) < 1e-9);
  ck_assert(fabs(r.tflops_per_s_per_device - 0.45) < 1e-12);
  ck_assert(r.final_loss == 3.5);
  ck_assert(r.final_eval_loss == 4.5);
  ck_assert(r.measured_peak_bytes == 300);
  ck_assert_int_eq(r.steps_done, 4);

  /* an even count of steps: the median time is the mean of the middle two
   * (0.25 s), and the rates are a step's 120 tokens and 0.06 TFLOP over
   * it, 480 tokens/s and 0.24 TFLOP/s; the medians of the rates (500 and
   * 0.25) would not be 120 tokens over 0.25 s */
  f = fopen(path, "w");
  static const double secs[5] = {9.0, 0.1, 0.2, 0.3, 0.4};
  for (int i = 0; i < 5; i++)
    fprintf(f,
            "{\"step\": %d, \"loss\": 5.0, \"seconds\": %.6f, \"tokens_per_s_per_device\": %.3f, "
            "\"tflops_per_s_per_device\": %.6f}\n",
            i, secs[i], 120 / secs[i], 0.06 / secs[i]);
  fclose(f);
  ck_assert(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK);
  ck_assert(fabs(r.median_step_seconds - 0.25) < 1e-12);
  ck_assert_msg(fabs(r.tokens_per_s_per_device - 480) < 1e-6, "%.9g", r.tokens_per_s_per_device);
  ck_assert_msg(fabs(r.tflops_per_s_per_device - 0.24) < 1e-9, "%.9g", r.tflops_per_s_per_device);
  ck_assert_int_eq(r.steps_done, 5);
  /* a step's work as metrics.jsonl writes it (tokens_per_device,
   * tflops_per_device) wins over rate x seconds, whose rates are rounded */
  f = fopen(path, "w");
  static const char *const worked[3] = {"\"seconds\": 9.0, \"tokens_per_s_per_device\": 11, "
                                        "\"tflops_per_s_per_device\": 0.000011",
                                        "\"seconds\": 0.3, \"tokens_per_s_per_device\": 333, "
                                        "\"tflops_per_s_per_device\": 0.000333",
                                        "\"seconds\": 0.1, \"tokens_per_s_per_device\": 1000, "
                                        "\"tflops_per_s_per_device\": 0.001"};
  for (int i = 0; i < 3; i++)
    fprintf(f, "{\"step\": %d, \"loss\": 5.0, %s, \"tflops_per_device\": 0.0001, \"tokens_per_device\": 100}\n", i,
            worked[i]);
  fclose(f);
  ck_assert(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK);
  ck_assert(fabs(r.median_step_seconds - 0.2) < 1e-12);
  ck_assert_msg(fabs(r.tokens_per_s_per_device - 500) < 1e-9, "%.12g", r.tokens_per_s_per_device);
  ck_assert_msg(fabs(r.tflops_per_s_per_device - 0.0005) < 1e-15, "%.12g", r.tflops_per_s_per_device);

  /* with two steps, both count: 100 tokens over 0.75 s */
  f = fopen(path, "w");
  fprintf(f,
          "{\"step\": 0, \"loss\": 6.0, \"seconds\": 1.0, \"tokens_per_s_per_device\": 100, "
          "\"peak_memory_bytes\": 100}\n");
  fprintf(f,
          "{\"step\": 1, \"loss\": 5.0, \"seconds\": 0.5, \"tokens_per_s_per_device\": 200, "
          "\"peak_memory_bytes\": 100}\n");
  fclose(f);
  ck_assert(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK);
  ck_assert(fabs(r.median_step_seconds - 0.75) < 1e-12);
  ck_assert_msg(fabs(r.tokens_per_s_per_device - 100 / 0.75) < 1e-9, "%.9g", r.tokens_per_s_per_device);
  ck_assert(isnan(r.tflops_per_s_per_device)); /* not recorded */
  f = fopen(path, "w");
  fclose(f);
  ck_assert(gt_sweep_read_run_metrics(&r, path, &e) == GT_ERR_FORMAT);
  ck_assert(strstr(e.msg, "holds no steps"));
  snprintf(path, sizeof path, "%s/none.jsonl", dir);
  ck_assert(gt_sweep_read_run_metrics(&r, path, &e) == GT_ERR_IO);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* `gemtrain train`'s exit status names the outcome (tools/cli.h); the
 * runner maps it, and nothing else, to the point's status. */
START_TEST(test_exit_status_mapping) {
  const struct {
    gt_sweep_exit x;
    gt_sweep_status want;
  } cases[] = {
      {{0, 0, GT_EXIT_OK, 0}, GT_SWEEP_OK},
      {{0, 0, GT_EXIT_ERROR, 0}, GT_SWEEP_FAILED},
      {{0, 0, GT_EXIT_CONFIG, 0}, GT_SWEEP_CONFIG_ERROR},
      {{0, 0, GT_EXIT_PLAN, 0}, GT_SWEEP_DOES_NOT_FIT},
      {{0, 0, GT_EXIT_NUMERIC, 0}, GT_SWEEP_DIVERGED},
      {{0, 0, 127, 0}, GT_SWEEP_FAILED}, /* exec failed */
      {{0, 0, GT_EXIT_STOPPED, 0}, GT_SWEEP_PENDING}, /* stopped after a checkpoint: resumed on the next run */
      {{0, 0, 6, 0}, GT_SWEEP_FAILED},
      {{0, 11, -1, 0}, GT_SWEEP_CRASHED},
      {{0, 9, -1, 0}, GT_SWEEP_CRASHED}, /* the OOM killer */
      {{1, 9, -1, 0}, GT_SWEEP_TIMEOUT}, /* our own kill at point_timeout_s */
      {{1, 0, 0, 0}, GT_SWEEP_TIMEOUT},  /* it ended as the timeout struck */
      {{0, 15, -1, 1}, GT_SWEEP_PENDING}, /* the stopping sweep's SIGTERM before its handler: resumed */
      {{0, 15, -1, 0}, GT_SWEEP_CRASHED}, /* a SIGTERM the sweep did not send */
      {{0, 9, -1, 1}, GT_SWEEP_CRASHED},  /* SIGKILL while stopping: not the sweep's */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(gt_sweep_status_of_exit(cases[i].x) == cases[i].want, "case %zu: %s, expected %s", i,
                  gt_sweep_status_name(gt_sweep_status_of_exit(cases[i].x)), gt_sweep_status_name(cases[i].want));

  /* the whole classification: an exit 0 needs its metrics.jsonl; the log
   * gives the reason's text and decides nothing */
  char *dir = gt_test_mkdtemp("sweep");
  char metrics[512], log[512];
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
  snprintf(log, sizeof log, "%s/point.log", dir);
  FILE *f = fopen(log, "w");
  fputs("completed step: 0, loss: nan\ngemtrain: train: the plan needs 9.0 MiB but the limit is 1.0 MiB\n", f);
  fclose(f);
  gt_sweep_result r;
  gt_sweep_result_init(&r);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_ERROR, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_FAILED); /* not does_not_fit, not diverged: the log says so, the exit does not */
  ck_assert_str_eq(r.reason, "train: the plan needs 9.0 MiB but the limit is 1.0 MiB");
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_PLAN, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_DOES_NOT_FIT);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_OK, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_FAILED);
  ck_assert_msg(strstr(r.reason, "exited 0 but cannot read"), "%s", r.reason);
  f = fopen(metrics, "w");
  fputs("{\"step\": 0, \"loss\": 5.5, \"seconds\": 0.5, \"peak_memory_bytes\": 7}\n", f);
  fclose(f);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_OK, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_OK);
  ck_assert_str_eq(r.reason, "");
  ck_assert(r.final_loss == 5.5 && r.median_step_seconds == 0.5 && r.measured_peak_bytes == 7);
  /* a result without a final loss is no success */
  f = fopen(metrics, "w");
  fputs("{\"step\": 0, \"seconds\": 0.5}\n", f);
  fclose(f);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_OK, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_DIVERGED);
  ck_assert(isnan(r.median_step_seconds));
  gt_sweep_classify(&r, (gt_sweep_exit){0, 11, -1, 0}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_CRASHED);
  ck_assert_int_eq(r.signal, 11);
  ck_assert_msg(strstr(r.reason, "killed by signal 11") && strstr(r.reason, "after 1 steps"), "%s", r.reason);
  r.wall_seconds = 2.5;
  gt_sweep_classify(&r, (gt_sweep_exit){1, 9, -1, 0}, dir, log, 2);
  ck_assert_int_eq(r.status, GT_SWEEP_TIMEOUT);
  ck_assert_int_eq(r.signal, 0);
  ck_assert_str_eq(r.reason, "killed after 2.5 s (point_timeout_s = 2) at step 1");

  /* stopped by a signal (exit 5): pending, and whether it resumes is the
   * run directory's to say (enable_checkpointing=false writes none); no
   * timings and no final loss, as for a run that has not ended */
  f = fopen(metrics, "w");
  fputs("{\"step\": 0, \"loss\": 5.5, \"seconds\": 0.5, \"tokens_per_s_per_device\": 9, \"peak_memory_bytes\": 7}\n"
        "{\"step\": 1, \"loss\": 5.25, \"seconds\": 0.5, \"tokens_per_s_per_device\": 9, \"peak_memory_bytes\": 7}\n",
        f);
  fclose(f);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_STOPPED, 1}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_PENDING);
  ck_assert_str_eq(r.reason, "stopped after 2 steps without a checkpoint; it starts over on the next run");
  ck_assert(isnan(r.median_step_seconds) && isnan(r.tokens_per_s_per_device) && isnan(r.measured_peak_bytes));
  ck_assert(isnan(r.final_loss));
  ck_assert_int_eq(r.steps_done, 2);
  gt_test_system("mkdir -p '%s/checkpoints/step_00000002' && printf step_00000002 > '%s/checkpoints/latest'", dir, dir);
  gt_sweep_classify(&r, (gt_sweep_exit){0, 0, GT_EXIT_STOPPED, 1}, dir, log, 600);
  ck_assert_int_eq(r.status, GT_SWEEP_PENDING);
  ck_assert_str_eq(r.reason, "stopped and checkpointed after 2 steps; it resumes on the next run");
  ck_assert(isnan(r.final_loss) && isnan(r.median_step_seconds));
  gt_sweep_result_free(&r);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* The reason's text: the log's last error line, for display. */
START_TEST(test_last_error_line) {
  char buf[256];
  gt_sweep_last_error_line("gemtrain 0.1.0: gemma3-tiny\ncompleted step: 0\ngemtrain: data: cannot open 'x'\n\n", buf,
                           sizeof buf);
  ck_assert_str_eq(buf, "data: cannot open 'x'");
  gt_sweep_last_error_line("line one\nline two\n", buf, sizeof buf);
  ck_assert_str_eq(buf, "line two");
  gt_sweep_last_error_line("[====>   ] step 3/9\r\033[Klast words\n", buf, sizeof buf);
  ck_assert_str_eq(buf, "last words");
  gt_sweep_last_error_line("", buf, sizeof buf);
  ck_assert_str_eq(buf, "");
  gt_sweep_last_error_line(NULL, buf, sizeof buf);
  ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(test_table_order) {
  gt_sweep s;
  parse_ok(&s,
           "{\"grid\": {\"per_device_batch_size\": [1, 2, 4, 8]}, \"metrics\": [\"tokens_per_s_per_device\"],"
           " \"sort_by\": \"tokens_per_s_per_device\", \"sort_desc\": true}");
  gt_sweep_result res[4];
  const double tps[4] = {100, NAN, 400, 200};
  const gt_sweep_status status[4] = {GT_SWEEP_OK, GT_SWEEP_DOES_NOT_FIT, GT_SWEEP_OK, GT_SWEEP_OK};
  gt_err e;
  for (int i = 0; i < 4; i++) {
    gt_sweep_result_init(&res[i]);
    res[i].point = i + 1;
    res[i].tokens_per_s_per_device = tps[i];
    res[i].status = status[i];
    char kv[64];
    snprintf(kv, sizeof kv, "per_device_batch_size=%d", 1 << i);
    gt_sweep_kvs_set(&res[i].values, kv, &e);
  }
  snprintf(res[1].reason, sizeof res[1].reason, "the plan needs 9 MiB | more");
  char *dir = gt_test_mkdtemp("sweep");
  char path[512];
  snprintf(path, sizeof path, "%s/results.md", dir);
  ck_assert(gt_sweep_write_table(&s, res, path, &e) == GT_OK);
  char *md = gt_test_read_file(path, NULL);
  ck_assert(md);
  ck_assert(strstr(md, "| point | per_device_batch_size | status | tokens_per_s_per_device | note |"));
  ck_assert_msg(strstr(md, "\nStatus: 3 ok, 1 does_not_fit (median_step_seconds is the median over the steps after "
                           "step 0; tokens/s and TFLOP/s are a step's tokens and TFLOP over it; bytes in MiB).\n"),
                "%s", md);
  /* descending, the point without the metric last; '|' in a cell escaped */
  const char *r3 = strstr(md, "| 3 | 4 | ok | 400 |"), *r4 = strstr(md, "| 4 | 8 | ok | 200 |"),
             *r1 = strstr(md, "| 1 | 1 | ok | 100 |"),
             *r2 = strstr(md, "| 2 | 2 | does_not_fit | - | the plan needs 9 MiB \\| more |");
  ck_assert_msg(r3 && r4 && r1 && r2, "%s", md);
  ck_assert(r3 < r4 && r4 < r1 && r1 < r2);
  free(md);
  snprintf(path, sizeof path, "%s/plot.svg", dir);
  ck_assert(gt_sweep_write_plot(&s, res, path, &e) == GT_OK);
  char *svg = gt_test_read_file(path, NULL);
  ck_assert(svg && strstr(svg, "<svg") && strstr(svg, "polyline"));
  free(svg);
  for (int i = 0; i < 4; i++) gt_sweep_result_free(&res[i]);
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* results.md's heading names the steps the timings are the median over:
 * after step 0, or all of them for a run of at most 2 steps */
START_TEST(test_table_timing_steps) {
  gt_sweep s;
  parse_ok(&s, "{\"grid\": {\"per_device_batch_size\": [1, 2, 4]}, \"metrics\": [\"median_step_seconds\"]}");
  gt_sweep_result res[3];
  gt_err e;
  for (int i = 0; i < 3; i++) {
    gt_sweep_result_init(&res[i]);
    res[i].point = i + 1;
    res[i].status = GT_SWEEP_OK;
    res[i].median_step_seconds = 0.5;
    res[i].steps_done = 2;
  }
  res[1].status = GT_SWEEP_FAILED; /* no timings: it says nothing of the steps */
  res[1].median_step_seconds = NAN;
  res[1].steps_done = 9;
  char *dir = gt_test_mkdtemp("sweep");
  char path[512];
  snprintf(path, sizeof path, "%s/results.md", dir);
  static const char *const want[3] = {
      " (median_step_seconds is the median over all the steps, step 0 included (no run had more than 2); ",
      " (median_step_seconds is the median over the steps after step 0, or all of them for point 3 (at most 2 "
      "steps); ",
      " (median_step_seconds is the median over the steps after step 0; "};
  for (int c = 0; c < 3; c++) {
    if (c >= 1) res[0].steps_done = 5; /* case 1: point 1 after step 0, point 3 all */
    if (c == 2) res[2].steps_done = 3;
    ck_assert(gt_sweep_write_table(&s, res, path, &e) == GT_OK);
    char *md = gt_test_read_file(path, NULL);
    ck_assert_msg(md && strstr(md, want[c]), "case %d: %s", c, md);
    free(md);
  }
  for (int i = 0; i < 3; i++) gt_sweep_result_free(&res[i]);
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* plot.svg's x axis: a key named for a rate, a decay or an epsilon is on a
 * log axis that says so and is ticked inside a decade; "eps" inside a word
 * (warmup_steps) is no epsilon. */
static char *plot_of(const char *key, const double *xs, int n, const char *dir) {
  char text[512], path[600];
  snprintf(text, sizeof text, "{\"plot\": {\"x\": \"%s\", \"y\": \"final_loss\"}, \"grid\": {\"%s\": [", key,
           key);
  for (int i = 0; i < n; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "%s%g", i ? ", " : "", xs[i]);
  strcat(text, "]}}");
  gt_sweep s;
  parse_ok(&s, text);
  ck_assert_int_eq(s.n_points, n);
  gt_sweep_result res[8];
  gt_err e;
  for (int i = 0; i < 8; i++) gt_sweep_result_init(&res[i]);
  for (int i = 0; i < n; i++) {
    char kv[128];
    res[i].status = GT_SWEEP_OK;
    res[i].final_loss = 5.0 - i;
    snprintf(kv, sizeof kv, "%s=%g", key, xs[i]);
    gt_sweep_kvs_set(&res[i].values, kv, &e);
  }
  snprintf(path, sizeof path, "%s/plot.svg", dir);
  ck_assert_msg(gt_sweep_write_plot(&s, res, path, &e) == GT_OK, "%s", e.msg);
  for (int i = 0; i < 8; i++) gt_sweep_result_free(&res[i]);
  gt_sweep_free(&s);
  return gt_test_read_file(path, NULL);
}

START_TEST(test_plot_axes) {
  char *dir = gt_test_mkdtemp("sweep");
  /* a step count: linear, ticked every 5 */
  const double steps[3] = {10, 20, 40};
  char *svg = plot_of("warmup_steps", steps, 3, dir);
  ck_assert_msg(strstr(svg, ">15</text>") && strstr(svg, ">25</text>"), "%s", svg);
  ck_assert_msg(strstr(svg, ">warmup_steps</text>"), "%s", svg);
  ck_assert_msg(!strstr(svg, "(log)"), "%s", svg);
  free(svg);
  /* a learning rate within one decade: log, labelled so, ticked at its values */
  const double lr[3] = {0.002, 0.004, 0.008};
  svg = plot_of("learning_rate", lr, 3, dir);
  ck_assert_msg(strstr(svg, ">learning_rate (log)</text>"), "%s", svg);
  ck_assert_msg(strstr(svg, ">0.002</text>") && strstr(svg, ">0.004</text>") && strstr(svg, ">0.008</text>"), "%s",
                svg);
  free(svg);
  /* over two decades: 1, 2 and 5 of each */
  const double eps[3] = {1e-8, 1e-7, 1e-6};
  svg = plot_of("adam_eps", eps, 3, dir);
  ck_assert_msg(strstr(svg, ">adam_eps (log)</text>") && strstr(svg, ">2e-08</text>") && strstr(svg, ">5e-07</text>"),
                "%s", svg);
  free(svg);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* The runner, with a stand-in for `gemtrain train`: a script that crashes,
 * diverges (exit 4), exits 0 without metrics, succeeds, refuses its config
 * (exit 2), hangs, does not fit (exit 3) or fails with a log that reads
 * like a refused plan and a NaN (exit 1: failed, whatever the log says),
 * as init_weights_seed tells it. */
START_TEST(test_runner_statuses) {
  char *dir = gt_test_mkdtemp("sweep");
  char exe[512], text[2048];
  snprintf(exe, sizeof exe, "%s/fake_gemtrain", dir);
  FILE *f = fopen(exe, "w");
  fputs(
      "#!/bin/sh\n"
      "for a in \"$@\"; do case \"$a\" in init_weights_seed=*) mode=${a#*=};; "
      "base_output_directory=*) out=${a#*=};; run_name=*) run=${a#*=};; esac; done\n"
      "[ \"$1\" = train ] || exit 9\n"
      "case $mode in\n"
      "1) echo 'completed step: 0'; kill -SEGV $$ ;;\n"
      "2) echo 'completed step: 0, loss: 5.0'; echo 'gemtrain: train: step 1 has loss nan and gradient norm nan; "
      "stopping' >&2; exit 4 ;;\n"
      "3) exit 0 ;;\n"
      "4) mkdir -p \"$out/$run\"; for s in 0 1 2; do echo \"{\\\"step\\\": $s, \\\"loss\\\": 5.$s, "
      "\\\"seconds\\\": 0.$((s+1)), \\\"peak_memory_bytes\\\": 7}\"; done > \"$out/$run/metrics.jsonl\"; exit 0 ;;\n"
      "5) echo 'gemtrain: config: key x refused' >&2; exit 2 ;;\n"
      "6) exec sleep 30 ;;\n"
      "7) echo 'gemtrain: train: the plan needs 99 MiB but the limit is 1 MiB' >&2; exit 3 ;;\n"
      "8) echo 'completed step: 0, loss: nan'; echo 'gemtrain: data: boom; the plan needs more' >&2; exit 1 ;;\n"
      "esac\n",
      f);
  fclose(f);
  ck_assert_int_eq(gt_test_system("chmod +x '%s'", exe), 0);
  snprintf(text, sizeof text,
           "{\"base\": {\"overrides\": {\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\"}},"
           " \"grid\": {\"init_weights_seed\": [1, 2, 3, 4, 5, 6, 7, 8]}, \"steps\": 3, \"max_parallel\": 3,"
           " \"point_timeout_s\": 1, \"output_directory\": \"%s/out\"}",
           dir);
  gt_sweep s;
  parse_ok(&s, text);
  gt_sweep_run_opts o = {exe, 0, NULL, 0, 0, NULL, NULL, NULL};
  gt_sweep_summary sum;
  gt_err e;
  ck_assert_msg(gt_sweep_run(&s, &o, &sum, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(sum.n_points, 8);
  ck_assert_int_eq(sum.n_ran, 8);
  ck_assert_int_eq(sum.n_ok, 1);
  char path[600];
  snprintf(path, sizeof path, "%s/out/results.jsonl", dir);
  FILE *jf = fopen(path, "r");
  ck_assert(jf);
  const gt_sweep_status want[9] = {GT_SWEEP_PENDING, GT_SWEEP_CRASHED,      GT_SWEEP_DIVERGED,
                                   GT_SWEEP_FAILED,  GT_SWEEP_OK,           GT_SWEEP_CONFIG_ERROR,
                                   GT_SWEEP_TIMEOUT, GT_SWEEP_DOES_NOT_FIT, GT_SWEEP_FAILED};
  const char *reason[9] = {NULL,
                           "signal 11",
                           "has loss nan",
                           "exited 0 but cannot read",
                           "",
                           "key x refused",
                           "point_timeout_s",
                           "train: the plan needs 99 MiB",
                           "data: boom; the plan needs more"};
  char line[4096];
  int seen = 0;
  while (fgets(line, sizeof line, jf)) {
    gt_sweep_result r;
    ck_assert(gt_sweep_result_from_json(&r, line, &e) == GT_OK);
    int mode = atoi(gt_sweep_kvs_get(&r.overrides, "init_weights_seed"));
    ck_assert_int_eq(r.point, mode);
    ck_assert_msg(r.status == want[mode], "mode %d: %s (%s)", mode, gt_sweep_status_name(r.status), r.reason);
    if (mode == 1) ck_assert_int_eq(r.signal, 11);
    if (mode == 1) ck_assert(strstr(line, "\"status\":\"crashed (signal 11)\""));
    ck_assert_msg(strstr(r.reason, reason[mode]) != NULL, "mode %d reason: %s", mode, r.reason);
    if (mode == 4) {
      ck_assert(fabs(r.median_step_seconds - 0.25) < 1e-12); /* steps 1 and 2 */
      ck_assert(r.final_loss == 5.2 && r.measured_peak_bytes == 7 && r.steps_done == 3);
    } else {
      ck_assert(isnan(r.median_step_seconds));
    }
    ck_assert(r.planned_peak_bytes > 0);
    seen |= 1 << mode;
    gt_sweep_result_free(&r);
  }
  fclose(jf);
  ck_assert_int_eq(seen, 0x1fe);

  /* a rerun runs nothing; --retry-failed reruns all but the ok point */
  ck_assert(gt_sweep_run(&s, &o, &sum, &e) == GT_OK);
  ck_assert_int_eq(sum.n_ran, 0);
  ck_assert_int_eq(sum.n_skipped, 8);
  o.retry_failed = 1;
  ck_assert(gt_sweep_run(&s, &o, &sum, &e) == GT_OK);
  ck_assert_int_eq(sum.n_ran, 7);
  ck_assert_int_eq(sum.n_skipped, 1);
  /* a dry run checks and writes nothing */
  o.retry_failed = 0;
  o.dry_run = 1;
  ck_assert(gt_sweep_run(&s, &o, &sum, &e) == GT_OK);
  ck_assert_int_eq(sum.n_ran, 0);
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* A stand-in for `gemtrain train` that says in its log which learning rate
 * it ran and what results.jsonl held when it started, writes one step, and
 * exits 5 (stopped) for init_weights_seed=5. */
static void write_fake(const char *exe) {
  FILE *f = fopen(exe, "w");
  ck_assert(f);
  fputs("#!/bin/sh\n"
        "for a in \"$@\"; do case \"$a\" in base_output_directory=*) out=${a#*=};; run_name=*) run=${a#*=};; "
        "learning_rate=*) lr=${a#*=};; init_weights_seed=5) exit 5;; esac; done\n"
        "echo \"lr=$lr\"\n"
        "[ -f \"$out/../results.jsonl\" ] && sed 's/^/seen: /' \"$out/../results.jsonl\"\n"
        "mkdir -p \"$out/$run\"; echo '{\"step\": 0, \"loss\": 5, \"seconds\": 0.1}' >> \"$out/$run/metrics.jsonl\"\n",
        f);
  fclose(f);
  ck_assert_int_eq(gt_test_system("chmod +x '%s'", exe), 0);
}

/* The last record of point k in results.jsonl (init'ed, status -1, when none). */
static void last_record(const char *jsonl, int k, gt_sweep_result *out) {
  gt_sweep_result_init(out);
  out->status = (gt_sweep_status)-1;
  FILE *f = fopen(jsonl, "r");
  ck_assert(f);
  char line[8192];
  gt_err e;
  while (fgets(line, sizeof line, f)) {
    gt_sweep_result r;
    ck_assert(gt_sweep_result_from_json(&r, line, &e) == GT_OK);
    if (r.point == k) {
      gt_sweep_result_free(out);
      *out = r;
    } else {
      gt_sweep_result_free(&r);
    }
  }
  fclose(f);
}

static int file_has(const char *dir, const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  char *t = gt_test_read_file(path, NULL);
  int has = t && strstr(t, text) != NULL;
  free(t);
  return has;
}

static void run_sweep_text(const char *exe, const char *text, int want_ran, int want_skipped) {
  gt_sweep s;
  parse_ok(&s, text);
  gt_sweep_run_opts o = {exe, 0, NULL, 0, 0, NULL, NULL, NULL};
  gt_sweep_summary sum;
  gt_err e;
  ck_assert_msg(gt_sweep_run(&s, &o, &sum, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(sum.n_ran == want_ran && sum.n_skipped == want_skipped, "ran %d skipped %d, expected %d and %d for %s",
                sum.n_ran, sum.n_skipped, want_ran, want_skipped, text);
  gt_sweep_free(&s);
}

/* A point is its whole configuration: the same keys over a changed
 * base.config are another run, never the old record or the old directory. */
START_TEST(test_runner_identity) {
  char *dir = gt_test_mkdtemp("sweep");
  char exe[512], cfg[512], text[2048], out[600], jsonl[700];
  snprintf(exe, sizeof exe, "%s/fake_gemtrain", dir);
  write_fake(exe);
  snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(jsonl, sizeof jsonl, "%s/results.jsonl", out);
  ck_assert_int_eq(gt_test_system("printf '{\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\", "
                                  "\"max_target_length\": 32}' > '%s'", cfg), 0);
  snprintf(text, sizeof text,
           "{\"base\": {\"config\": \"%s\"}, \"grid\": {\"learning_rate\": [0.001, 0.01]}, \"steps\": 3,"
           " \"output_directory\": \"%s\"}",
           cfg, out);
  run_sweep_text(exe, text, 2, 0);
  gt_sweep_result first;
  last_record(jsonl, 1, &first);
  ck_assert_msg(!strncmp(first.identity, "cfg-", 4) && strlen(first.identity) == 20, "%s", first.identity);
  ck_assert(file_has(out, "runs/point-1/" GT_SWEEP_POINT_FILE, first.identity));
  run_sweep_text(exe, text, 0, 2); /* the same configuration: nothing runs */

  /* the same keys over another config file's contents */
  ck_assert_int_eq(gt_test_system("sed -i 's/32/64/' '%s'", cfg), 0);
  run_sweep_text(exe, text, 2, 0);
  gt_sweep_result second;
  last_record(jsonl, 1, &second);
  ck_assert_int_eq(second.status, GT_SWEEP_OK);
  ck_assert_str_ne(second.identity, first.identity);
  ck_assert(file_has(out, "runs/point-1/" GT_SWEEP_POINT_FILE, second.identity));
  /* the earlier run is kept aside whole, its log with it, and not resumed */
  ck_assert(file_has(out, "runs/point-1.previous-1/" GT_SWEEP_POINT_FILE, first.identity));
  ck_assert(file_has(out, "runs/point-1.previous-1.log", "lr=0.001"));
  char m[800];
  snprintf(m, sizeof m, "%s/runs/point-1/metrics.jsonl", out);
  char *metrics = gt_test_read_file(m, NULL);
  ck_assert_msg(metrics && !strchr(strchr(metrics, '\n') + 1, '\n'), "%s", metrics); /* one step: a fresh run */
  free(metrics);
  /* and back: the first configuration's record and files are its own again */
  ck_assert_int_eq(gt_test_system("sed -i 's/64/32/' '%s'", cfg), 0);
  run_sweep_text(exe, text, 0, 2);
  ck_assert(file_has(out, "runs/point-1/" GT_SWEEP_POINT_FILE, first.identity));
  gt_sweep_result_free(&first);
  gt_sweep_result_free(&second);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* A value inserted into a grid renumbers the points after it: each keeps
 * its record, its run directory and its log, under its new number; two
 * points that swap numbers swap their files. */
START_TEST(test_runner_renumber) {
  char *dir = gt_test_mkdtemp("sweep");
  char exe[512], text[2048], out[600], jsonl[700];
  snprintf(exe, sizeof exe, "%s/fake_gemtrain", dir);
  write_fake(exe);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(jsonl, sizeof jsonl, "%s/results.jsonl", out);
  const char *fmt = "{\"base\": {\"overrides\": {\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\"}},"
                    " \"grid\": {\"learning_rate\": [%s]}, \"output_directory\": \"%s\"}";
  snprintf(text, sizeof text, fmt, "0.001, 0.01", out);
  run_sweep_text(exe, text, 2, 0);
  snprintf(text, sizeof text, fmt, "0.001, 0.005, 0.01", out);
  run_sweep_text(exe, text, 1, 2);
  ck_assert(file_has(out, "runs/point-2.log", "lr=0.005"));
  ck_assert(!file_has(out, "runs/point-2.log", "lr=0.01"));
  ck_assert(file_has(out, "runs/point-3.log", "lr=0.01"));
  ck_assert(file_has(out, "runs/point-3/" GT_SWEEP_POINT_FILE, "learning_rate=0.01\n"));
  ck_assert(file_has(out, "runs/point-2/" GT_SWEEP_POINT_FILE, "learning_rate=0.005\n"));
  gt_sweep_result r;
  last_record(jsonl, 3, &r);
  ck_assert_int_eq(r.status, GT_SWEEP_OK);
  ck_assert_str_eq(gt_sweep_kvs_get(&r.overrides, "learning_rate"), "0.01");
  ck_assert_str_eq(r.log, "runs/point-3.log");
  gt_sweep_result_free(&r);
  last_record(jsonl, 2, &r);
  ck_assert_str_eq(gt_sweep_kvs_get(&r.overrides, "learning_rate"), "0.005");
  gt_sweep_result_free(&r);

  /* reversed: points 1 and 3 swap, nothing runs */
  snprintf(text, sizeof text, fmt, "0.01, 0.005, 0.001", out);
  run_sweep_text(exe, text, 0, 3);
  ck_assert(file_has(out, "runs/point-1.log", "lr=0.01"));
  ck_assert(file_has(out, "runs/point-3.log", "lr=0.001"));
  ck_assert(file_has(out, "runs/point-1/" GT_SWEEP_POINT_FILE, "learning_rate=0.01\n"));
  ck_assert(file_has(out, "runs/point-3/" GT_SWEEP_POINT_FILE, "learning_rate=0.001\n"));
  last_record(jsonl, 1, &r);
  ck_assert_str_eq(gt_sweep_kvs_get(&r.overrides, "learning_rate"), "0.01");
  ck_assert_str_eq(r.log, "runs/point-1.log");
  gt_sweep_result_free(&r);
  ck_assert_int_ne(gt_test_system("ls -d '%s'/runs/*.moving-* '%s'/runs/*.previous-* 2>/dev/null", out, out), 0);

  /* an arrangement cut short leaves a run under a staging name: the next
   * run finds it by its settings */
  ck_assert_int_eq(gt_test_system("cd '%s/runs' && mv point-2 point-7.moving-1 && mv point-2.log point-7.moving-1.log",
                                  out),
                   0);
  run_sweep_text(exe, text, 0, 3);
  ck_assert(file_has(out, "runs/point-2.log", "lr=0.005"));
  ck_assert(file_has(out, "runs/point-2/" GT_SWEEP_POINT_FILE, "learning_rate=0.005\n"));
  ck_assert_int_ne(gt_test_system("ls -d '%s'/runs/*.moving-* 2>/dev/null", out), 0);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* Every point is checked in-process before any starts: a refused point is
 * recorded before the first process runs. A point stopped without a
 * checkpoint says it starts over. */
START_TEST(test_runner_checks_first) {
  char *dir = gt_test_mkdtemp("sweep");
  char exe[512], text[2048], out[600], console_path[600];
  snprintf(exe, sizeof exe, "%s/fake_gemtrain", dir);
  write_fake(exe);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(text, sizeof text,
           "{\"base\": {\"overrides\": {\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\"}},"
           " \"points\": [{\"steps\": 2}, {\"steps\": 0}, {\"init_weights_seed\": 5}], \"output_directory\": \"%s\"}",
           out);
  gt_sweep s;
  parse_ok(&s, text);
  snprintf(console_path, sizeof console_path, "%s/console.txt", dir);
  FILE *console = fopen(console_path, "w+");
  gt_sweep_run_opts o = {exe, 0, NULL, 0, 0, console, NULL, NULL};
  gt_sweep_summary sum;
  gt_err e;
  ck_assert_msg(gt_sweep_run(&s, &o, &sum, &e) == GT_OK, "%s", e.msg);
  fclose(console);
  ck_assert_int_eq(sum.n_ran, 2);
  ck_assert_int_eq(sum.n_pending, 1);
  /* point 1's process saw point 2's refusal already recorded */
  ck_assert_msg(file_has(out, "runs/point-1.log", "seen: {\"point\":2,") &&
                    file_has(out, "runs/point-1.log", "\"status\":\"config_error\""),
                "point 2 was not recorded before point 1 started");
  ck_assert(!file_has(dir, "out/runs/point-2.log", "")); /* no process, no log */
  char *c = gt_test_read_file(console_path, NULL);
  ck_assert_msg(strstr(c, "point 3/3: init_weights_seed=5 -> stopped after 0 steps without a checkpoint (") &&
                    strstr(c, "s); it starts over on the next run\n"),
                "%s", c);
  free(c);
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* The command line wins over every layer of the file, so a key the grid or
 * the points sweep is refused there: every point would run with its one
 * value while the console and the table showed the points' own. */
START_TEST(test_cli_swept_key) {
  char *dir = gt_test_mkdtemp("sweep");
  char text[1024];
  snprintf(text, sizeof text,
           "{\"base\": {\"overrides\": {\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\"}},"
           " \"grid\": {\"learning_rate\": [0.001, 0.01]}, \"points\": [{\"warmup_steps\": 1}],"
           " \"output_directory\": \"%s/out\"}",
           dir);
  gt_sweep s;
  parse_ok(&s, text);
  gt_sweep_summary sum;
  gt_err e;
  const char *swept[] = {"steps=2", "learning_rate=0.5"};
  gt_sweep_run_opts o = {"/nonexistent/gemtrain", 2, swept, 0, 0, NULL, NULL, NULL};
  ck_assert_int_eq(gt_sweep_run(&s, &o, &sum, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'learning_rate=0.5' sets 'learning_rate', which '") && strstr(e.msg, "sweeps"), "%s",
                e.msg);
  /* a key only the explicit points set is swept too */
  const char *warm[] = {"warmup_steps=3"};
  o.cli = warm, o.n_cli = 1;
  ck_assert_int_eq(gt_sweep_run(&s, &o, &sum, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "sets 'warmup_steps'"), "%s", e.msg);
  char path[600];
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_int_ne(gt_test_system("test -e '%s'", path), 0); /* refused before anything is written */
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* Whether a plan fits is the process's to say (exit 3) when it runs; only a
 * dry run, with no process to ask, decides it in-process. */
START_TEST(test_runner_plan_fit) {
  char *dir = gt_test_mkdtemp("sweep");
  char exe[512], text[2048];
  snprintf(exe, sizeof exe, "%s/fake_gemtrain", dir);
  FILE *f = fopen(exe, "w");
  fputs(
      "#!/bin/sh\n"
      "for a in \"$@\"; do case \"$a\" in memory_limit_bytes=1000000) echo 'gemtrain: train: over' >&2; exit 3;; "
      "base_output_directory=*) out=${a#*=};; run_name=*) run=${a#*=};; esac; done\n"
      "mkdir -p \"$out/$run\"; echo '{\"step\": 0, \"loss\": 5, \"seconds\": 0.1}' > \"$out/$run/metrics.jsonl\"\n",
      f);
  fclose(f);
  ck_assert_int_eq(gt_test_system("chmod +x '%s'", exe), 0);
  snprintf(text, sizeof text,
           "{\"base\": {\"overrides\": {\"model_name\": \"gemma3-tiny\", \"dataset_type\": \"synthetic\"}},"
           " \"points\": [{\"memory_limit_bytes\": 1000000}, {\"memory_limit_bytes\": 0}],"
           " \"output_directory\": \"%s/out\"}",
           dir);
  gt_sweep s;
  parse_ok(&s, text);
  char out_path[600];
  snprintf(out_path, sizeof out_path, "%s/console.txt", dir);
  FILE *out = fopen(out_path, "w+");
  gt_sweep_run_opts o = {exe, 0, NULL, 0, 1, out, NULL, NULL};
  gt_sweep_summary sum;
  gt_err e;
  ck_assert_msg(gt_sweep_run(&s, &o, &sum, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(sum.n_ran, 0);
  fclose(out);
  char *console = gt_test_read_file(out_path, NULL);
  ck_assert_msg(strstr(console, "1 of 2 points would run"), "%s", console);
  ck_assert_msg(strstr(console, "| 1 | 1000000 | does_not_fit |"), "%s", console);
  ck_assert_msg(strstr(console, "the plan needs"), "%s", console);
  ck_assert_msg(strstr(console, "| 2 | 0 | would_run |"), "%s", console);
  free(console);
  char path[600];
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_int_ne(gt_test_system("test -e '%s'", path), 0); /* a dry run writes nothing */

  o.dry_run = 0;
  o.out = NULL;
  ck_assert_msg(gt_sweep_run(&s, &o, &sum, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(sum.n_ran, 2);
  ck_assert_int_eq(sum.n_ok, 1);
  snprintf(path, sizeof path, "%s/out/results.jsonl", dir);
  FILE *jf = fopen(path, "r");
  ck_assert(jf);
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, jf)) {
    gt_sweep_result r;
    ck_assert(gt_sweep_result_from_json(&r, line, &e) == GT_OK);
    ck_assert(r.planned_peak_bytes > 1000000); /* planned in-process either way */
    if (r.point == 1) {
      ck_assert_int_eq(r.status, GT_SWEEP_DOES_NOT_FIT);
      ck_assert_str_eq(r.reason, "train: over");
    } else {
      ck_assert_int_eq(r.status, GT_SWEEP_OK);
    }
    n++;
    gt_sweep_result_free(&r);
  }
  fclose(jf);
  ck_assert_int_eq(n, 2);
  gt_sweep_free(&s);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sweep");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_grid_order);
  tcase_add_test(tc, test_values_as_text);
  tcase_add_test(tc, test_grids_union_and_points);
  tcase_add_test(tc, test_all_keys);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_load_missing_file);
  tcase_add_test(tc, test_result_round_trip);
  tcase_add_test(tc, test_run_metrics);
  tcase_add_test(tc, test_exit_status_mapping);
  tcase_add_test(tc, test_last_error_line);
  tcase_add_test(tc, test_table_order);
  tcase_add_test(tc, test_table_timing_steps);
  tcase_add_test(tc, test_plot_axes);
  tcase_add_test(tc, test_runner_statuses);
  tcase_add_test(tc, test_runner_plan_fit);
  tcase_add_test(tc, test_cli_swept_key);
  tcase_add_test(tc, test_runner_identity);
  tcase_add_test(tc, test_runner_renumber);
  tcase_add_test(tc, test_runner_checks_first);
  return gt_test_run_suite(s, 0);
}
