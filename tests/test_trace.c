/* The profiler timeline (base/trace.h): spans nest on a lane as recorded,
 * timed statements and phases become spans, memory counters follow a
 * tracker exactly, lanes are bounded and written by their own threads, the
 * JSON parses (cJSON) with the trace-event fields, a failed write leaves no
 * file; the mesh puts collectives on device and comm lanes, and a traced
 * trainer step fills every lane and detaches without a trace of itself. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/prof.h"
#include "base/trace.h"
#include "mesh/mesh.h"
#include "train/profiler.h"
#include "train/trainer.h"
#include "gt_testutil.h"

/* Writes t and parses it back; asserts both worked. */
static cJSON *write_parse(gt_trace *t, const char *other) {
  char *path = gt_test_dir_path("trace.json");
  gt_err err;
  gt_rc rc = gt_trace_write(t, path, "test \"process\"", other, &err);
  ck_assert_msg(rc == GT_OK, "%s", err.msg);
  char *text = gt_test_read_file(path, NULL);
  ck_assert_ptr_nonnull(text);
  cJSON *doc = cJSON_Parse(text);
  ck_assert_msg(doc != NULL, "trace.json does not parse: %.200s", text);
  free(text);
  free(path);
  return doc;
}

static cJSON *events(cJSON *doc) {
  cJSON *ev = cJSON_GetObjectItem(doc, "traceEvents");
  ck_assert(cJSON_IsArray(ev));
  return ev;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  ck_assert_msg(cJSON_IsNumber(v), "no number '%s'", k);
  return v->valuedouble;
}

/* The tid of the lane named `name` (thread_name metadata), or -1. */
static int tid_of(cJSON *doc, const char *name) {
  cJSON *e;
  cJSON_ArrayForEach(e, events(doc)) {
    if (!strcmp(str(e, "ph"), "M") && !strcmp(str(e, "name"), "thread_name") &&
        !strcmp(str(cJSON_GetObjectItem(e, "args"), "name"), name))
      return (int)num(e, "tid");
  }
  return -1;
}

/* The first complete event named `name` on tid (NULL: none); *count gets how many. */
static cJSON *span(cJSON *doc, int tid, const char *name, int *count) {
  cJSON *e, *first = NULL;
  int n = 0;
  cJSON_ArrayForEach(e, events(doc)) {
    if (strcmp(str(e, "ph"), "X") || (int)num(e, "tid") != tid || strcmp(str(e, "name"), name)) continue;
    if (!first) first = e;
    n++;
  }
  if (count) *count = n;
  return first;
}

static int count_ph(cJSON *doc, int tid, const char *ph) {
  cJSON *e;
  int n = 0;
  cJSON_ArrayForEach(e, events(doc)) n += !strcmp(str(e, "ph"), ph) && (int)num(e, "tid") == tid;
  return n;
}

START_TEST(test_spans_nest_with_exact_times) {
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, 1, 0, &err), GT_OK);
  gt_trace_lane *l = gt_trace_device(t, 0);
  double b = gt_prof_now();
  /* recorded as they end: children before their parent */
  gt_trace_span(l, "child a", "k", b + 0.001, b + 0.002);
  gt_trace_span_arg(l, "child b", "collective", b + 0.002, b + 0.0035, "bytes", 4096, "fsdp");
  gt_trace_span_text(l, "par\"ent\\", "step", b, b + 0.004, "step", 7);
  cJSON *doc = write_parse(t, "\"extra\":1");
  int tid = tid_of(doc, "device 0");
  ck_assert_int_ge(tid, 0);
  ck_assert_int_ge(tid_of(doc, "host (loop)"), 0);
  ck_assert_int_ge(tid_of(doc, "device 0 comm"), 0);
  cJSON *p = span(doc, tid, "par\"ent\\", NULL), *a = span(doc, tid, "child a", NULL), *c = span(doc, tid, "child b", NULL);
  ck_assert(p && a && c);
  /* microseconds at nanosecond resolution: offsets survive to 1 ns */
  ck_assert(fabs(num(p, "dur") - 4000.0) <= 0.002);
  ck_assert(fabs(num(a, "ts") - num(p, "ts") - 1000.0) <= 0.002);
  ck_assert(fabs(num(a, "dur") - 1000.0) <= 0.002);
  ck_assert(fabs(num(c, "ts") - num(a, "ts") - num(a, "dur")) <= 0.002);
  ck_assert(num(c, "ts") + num(c, "dur") <= num(p, "ts") + num(p, "dur"));
  ck_assert_str_eq(str(c, "cat"), "collective");
  cJSON *args = cJSON_GetObjectItem(c, "args");
  ck_assert_int_eq((int)num(args, "bytes"), 4096);
  ck_assert_str_eq(str(args, "group"), "fsdp");
  ck_assert_int_eq((int)num(cJSON_GetObjectItem(p, "args"), "step"), 7);
  cJSON *other = cJSON_GetObjectItem(doc, "otherData");
  ck_assert_int_eq((int)num(other, "events"), 3);
  ck_assert_int_eq((int)num(other, "extra"), 1);
  ck_assert_str_eq(str(doc, "displayTimeUnit"), "ms");
  cJSON *e;
  cJSON_ArrayForEach(e, events(doc)) { /* every event: name, ph, pid, tid */
    ck_assert(str(e, "name") && str(e, "ph"));
    num(e, "pid");
    num(e, "tid");
  }
  cJSON_Delete(doc);
  gt_trace_destroy(t);
}
END_TEST

static int work(int n) {
  volatile int s = 0;
  for (int i = 0; i < n; i++) s += i;
  return s;
}

START_TEST(test_prof_statements_and_phases) {
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, 1, 0, &err), GT_OK);
  gt_trace_lane *l = gt_trace_device(t, 0);
  gt_prof prof, *pp = &prof; /* through a pointer, as gt_model.prof */
  memset(&prof, 0, sizeof prof);
  int x = 0;
  GT_PROF(pp, GT_PROF_MATMUL, x = work(100)); /* no lane: counted, no span */
  ck_assert_int_eq(gt_trace_events(t), 0);
  pp->trace = l;
  gt_trace_phase(l, "forward, layer 0", gt_prof_now());
  GT_PROF(pp, GT_PROF_MATMUL, x = work(1000));
  GT_PROF(pp, GT_PROF_ATTENTION, gt_trace_devices(t));
  gt_trace_phase(l, "forward, layer 1", gt_prof_now());
  GT_PROF(pp, GT_PROF_OPTIM, x += work(10));
  gt_trace_phase_end(l, gt_prof_now());
  gt_trace_phase_end(l, gt_prof_now()); /* nothing open: nothing recorded */
  ck_assert_int_eq(x, 499500 + 45);
  ck_assert_int_eq(prof.calls[GT_PROF_MATMUL], 2);
  ck_assert_int_eq(prof.calls[GT_PROF_ATTENTION], 1);
  ck_assert_int_eq(gt_trace_events(t), 5);
  cJSON *doc = write_parse(t, NULL);
  int tid = tid_of(doc, "device 0");
  cJSON *mm = span(doc, tid, "work", NULL), *l0 = span(doc, tid, "forward, layer 0", NULL),
        *l1 = span(doc, tid, "forward, layer 1", NULL), *td = span(doc, tid, "trace_devices", NULL);
  ck_assert(mm && l0 && l1 && td);
  ck_assert_str_eq(str(mm, "cat"), "matmul");
  ck_assert_str_eq(str(td, "cat"), "attention");
  ck_assert_str_eq(str(l0, "cat"), "layer");
  /* phases are contiguous and hold their statements */
  ck_assert(fabs(num(l0, "ts") + num(l0, "dur") - num(l1, "ts")) <= 0.002);
  ck_assert(num(mm, "ts") >= num(l0, "ts") && num(mm, "ts") + num(mm, "dur") <= num(l0, "ts") + num(l0, "dur"));
  int n_work;
  span(doc, tid, "work", &n_work);
  ck_assert_int_eq(n_work, 2);
  cJSON_Delete(doc);
  gt_trace_destroy(t);
}
END_TEST

/* Sums of the series of every memory counter sample on tid; the largest. */
static int64_t counter_max(cJSON *doc, int tid, int *n_samples) {
  cJSON *e;
  int64_t top = -1;
  int n = 0;
  cJSON_ArrayForEach(e, events(doc)) {
    if (strcmp(str(e, "ph"), "C") || (int)num(e, "tid") != tid) continue;
    int64_t sum = 0;
    cJSON *v;
    int k = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(e, "args")) {
      sum += (int64_t)v->valuedouble;
      k++;
    }
    ck_assert_int_eq(k, 8);
    if (sum > top) top = sum;
    n++;
  }
  *n_samples = n;
  return top;
}

START_TEST(test_memory_counters_follow_the_tracker) {
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, 1, 0, &err), GT_OK);
  gt_trace_lane *l = gt_trace_device(t, 0);
  gt_mem m;
  gt_mem_init(&m);
  void *p = gt_mem_alloc(&m, GT_MEM_PARAMS, 1000);
  gt_trace_watch_mem(l, &m); /* one sample now: params 1000 */
  gt_mem_phase(&m, "forward, layer %d", 2);
  void *a = gt_mem_alloc(&m, GT_MEM_TEMP, 500);
  void *h = gt_mem_alloc(&m, GT_MEM_HOST, 7000); /* the host pool: no sample, not in the sums */
  void *b = gt_mem_alloc(&m, GT_MEM_GATHERED, 300);
  gt_mem_free(&m, a);
  gt_mem_free(&m, h);
  gt_mem_phase(&m, "backward, layer %d", 2);
  gt_mem_free(&m, b);
  gt_trace_phase_end(l, gt_prof_now());
  gt_trace_watch_mem(NULL, &m); /* detached: no more samples */
  ck_assert_ptr_null(m.probe.on_alloc);
  void *c = gt_mem_alloc(&m, GT_MEM_TEMP, 99999);
  gt_mem_free(&m, c);
  cJSON *doc = write_parse(t, NULL);
  int tid = tid_of(doc, "device 0"), n;
  ck_assert_int_eq(counter_max(doc, tid, &n), 1800);
  ck_assert_int_eq(n, 5);
  int np;
  span(doc, tid, "forward, layer 2", &np);
  ck_assert_int_eq(np, 1);
  span(doc, tid, "backward, layer 2", &np);
  ck_assert_int_eq(np, 1);
  /* the samples' series are named by category */
  cJSON *e;
  cJSON_ArrayForEach(e, events(doc)) {
    if (strcmp(str(e, "ph"), "C")) continue;
    ck_assert_str_eq(str(e, "name"), "memory (device 0)");
    cJSON *args = cJSON_GetObjectItem(e, "args");
    ck_assert_int_eq((int)num(args, "params"), 1000);
    num(args, "temporaries");
    num(args, "gathered_weights");
  }
  cJSON_Delete(doc);
  gt_mem_free(&m, p);
  gt_trace_destroy(t);
}
END_TEST

START_TEST(test_lanes_are_bounded) {
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, 2, 10, &err), GT_OK);
  double b = gt_prof_now();
  for (int i = 0; i < 15; i++) gt_trace_span(gt_trace_comm(t, 1), "x", "k", b, b);
  ck_assert_int_eq(gt_trace_events(t), 10);
  ck_assert_int_eq(gt_trace_dropped(t), 5);
  /* every call takes a NULL lane or trace */
  gt_trace_span(NULL, "x", "k", b, b);
  gt_trace_phase(NULL, "p", b);
  gt_trace_counter(NULL, "c", b, 0, NULL, NULL);
  ck_assert_ptr_null(gt_trace_host(NULL));
  ck_assert_ptr_null(gt_trace_device(t, 2));
  cJSON *doc = write_parse(t, NULL);
  ck_assert_int_eq((int)num(cJSON_GetObjectItem(doc, "otherData"), "dropped_events"), 5);
  ck_assert_int_eq(count_ph(doc, tid_of(doc, "device 1 comm"), "X"), 10);
  cJSON_Delete(doc);
  gt_trace_destroy(t);
}
END_TEST

typedef struct {
  gt_trace_lane *l;
  int n;
} writer;

static void *write_lane(void *arg) {
  writer *w = arg;
  for (int i = 0; i < w->n; i++) {
    double t0 = gt_prof_now();
    gt_trace_span_arg(w->l, "op", "k", t0, gt_prof_now(), "i", i, NULL);
  }
  return NULL;
}

START_TEST(test_lanes_record_from_their_own_threads) {
  enum { D = 4, N = 5000 };
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, D, 0, &err), GT_OK);
  pthread_t th[2 * D];
  writer w[2 * D];
  for (int i = 0; i < 2 * D; i++) {
    w[i] = (writer){i % 2 ? gt_trace_comm(t, i / 2) : gt_trace_device(t, i / 2), N};
    ck_assert_int_eq(pthread_create(&th[i], NULL, write_lane, &w[i]), 0);
  }
  for (int i = 0; i < 2 * D; i++) pthread_join(th[i], NULL);
  ck_assert_int_eq(gt_trace_events(t), 2 * D * N);
  cJSON *doc = write_parse(t, NULL);
  for (int d = 0; d < D; d++) {
    char name[32];
    snprintf(name, sizeof name, "device %d comm", d);
    ck_assert_int_eq(count_ph(doc, tid_of(doc, name), "X"), N);
  }
  cJSON_Delete(doc);
  gt_trace_destroy(t);
}
END_TEST

START_TEST(test_failed_write_leaves_no_file) {
  gt_trace *t;
  gt_err err;
  ck_assert_int_eq(gt_trace_create(&t, 1, 0, &err), GT_OK);
  char *path = gt_test_dir_path("missing/trace.json");
  ck_assert_int_eq(gt_trace_write(t, path, "p", NULL, &err), GT_ERR_IO);
  ck_assert_msg(strstr(err.msg, "missing/trace.json.tmp") != NULL, "%s", err.msg);
  ck_assert_int_ne(access(path, F_OK), 0);
  free(path);
  gt_trace_destroy(t);
}
END_TEST

typedef struct {
  float *in[2], *out[2], *async_out[2];
  int64_t n;
} coll;

static gt_mesh *g_mesh;
static void run_collectives(int dev, void *arg) {
  coll *c = arg;
  gt_all_gather(g_mesh, dev, c->in[dev], c->out[dev], c->n);
  int tk = gt_all_gather_async(g_mesh, dev, GT_GROUP_FSDP, c->in[dev], c->async_out[dev], c->n);
  gt_reduce_scatter(g_mesh, dev, c->out[dev], c->in[dev], c->n);
  gt_mesh_wait(g_mesh, dev, tk);
}

START_TEST(test_mesh_collectives_on_their_lanes) {
  gt_err err;
  ck_assert_int_eq(gt_mesh_create(&g_mesh, 2, &err), GT_OK);
  gt_trace *t;
  ck_assert_int_eq(gt_trace_create(&t, 2, 0, &err), GT_OK);
  coll c = {.n = 1000};
  for (int d = 0; d < 2; d++) {
    c.in[d] = calloc(1000, sizeof(float));
    c.out[d] = calloc(1000, sizeof(float));
    c.async_out[d] = calloc(1000, sizeof(float));
  }
  gt_mesh_run(g_mesh, run_collectives, &c); /* untraced */
  ck_assert_int_eq(gt_trace_events(t), 0);
  gt_mesh_set_trace(g_mesh, t);
  gt_mesh_run(g_mesh, run_collectives, &c);
  gt_mesh_set_trace(g_mesh, NULL);
  gt_mesh_run(g_mesh, run_collectives, &c);
  ck_assert_int_eq(gt_mesh_take_error(g_mesh, &err), GT_OK);
  cJSON *doc = write_parse(t, NULL);
  for (int d = 0; d < 2; d++) {
    char name[32];
    snprintf(name, sizeof name, "device %d", d);
    int tid = tid_of(doc, name), n;
    cJSON *ag = span(doc, tid, "all_gather", &n);
    ck_assert_int_eq(n, 1);
    /* a ring sends the other device's 500 floats */
    ck_assert_int_eq((int)num(cJSON_GetObjectItem(ag, "args"), "bytes"), 2000);
    ck_assert_str_eq(str(cJSON_GetObjectItem(ag, "args"), "group"), "all");
    ck_assert_ptr_nonnull(span(doc, tid, "reduce_scatter", &n));
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(span(doc, tid, "wait for gather", &n));
    snprintf(name, sizeof name, "device %d comm", d);
    cJSON *as = span(doc, tid_of(doc, name), "all_gather (async)", &n);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq((int)num(cJSON_GetObjectItem(as, "args"), "bytes"), 2000);
    ck_assert_str_eq(str(cJSON_GetObjectItem(as, "args"), "group"), "fsdp");
  }
  cJSON_Delete(doc);
  for (int d = 0; d < 2; d++) {
    free(c.in[d]);
    free(c.out[d]);
    free(c.async_out[d]);
  }
  gt_trace_destroy(t);
  gt_mesh_destroy(g_mesh);
}
END_TEST

START_TEST(test_traced_trainer_step) {
  const char *ov[] = {"model_name=gemma3-tiny", "num_devices=2", "dataset_type=synthetic"};
  gt_config c;
  gt_test_config(&c, 3, ov);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &err) == GT_OK, "%s", err.msg);
  gt_trace *t;
  ck_assert_int_eq(gt_trace_create(&t, 2, 0, &err), GT_OK);
  gt_step_metrics sm;
  ck_assert_int_eq(gt_trainer_set_trace(tr, t, &err), GT_OK);
  ck_assert_ptr_eq(gt_trainer_trace(tr), t);
  ck_assert_msg(gt_trainer_step_zero(tr, &sm, &err) == GT_OK, "%s", err.msg);
  int64_t traced_peak = sm.peak_memory_bytes;
  ck_assert_int_eq(gt_trainer_set_trace(tr, NULL, &err), GT_OK);
  /* detached: no probe, no profile left behind (GT_PROF and the allocator
   * are back to their untraced paths) */
  for (int d = 0; d < 2; d++) {
    ck_assert_ptr_null(gt_fsdp_device_mem(gt_trainer_fsdp(tr), d)->probe.on_alloc);
    ck_assert_ptr_null(gt_trainer_device_model(tr, d)->prof);
  }
  int64_t n = gt_trace_events(t);
  ck_assert_msg(gt_trainer_step_zero(tr, &sm, &err) == GT_OK, "%s", err.msg);
  ck_assert_int_eq(gt_trace_events(t), n);
  cJSON *doc = write_parse(t, NULL);
  int cnt;
  ck_assert_ptr_nonnull(span(doc, tid_of(doc, "host (loop)"), "step 0", &cnt));
  int64_t top = 0;
  for (int d = 0; d < 2; d++) {
    char name[32];
    snprintf(name, sizeof name, "device %d", d);
    int tid = tid_of(doc, name), ns;
    ck_assert_ptr_nonnull(span(doc, tid, "train step", &cnt));
    ck_assert_int_eq(cnt, 1);
    ck_assert_ptr_nonnull(span(doc, tid, "forward, layer 5", NULL));
    ck_assert_ptr_nonnull(span(doc, tid, "backward, layer 0", NULL));
    ck_assert_ptr_nonnull(span(doc, tid, "matmul_forward", NULL));
    ck_assert_ptr_nonnull(span(doc, tid, "optim_update", NULL));
    int64_t mx = counter_max(doc, tid, &ns);
    if (mx > top) top = mx;
    snprintf(name, sizeof name, "device %d comm", d);
    ck_assert_ptr_nonnull(span(doc, tid_of(doc, name), "all_gather (async)", NULL));
  }
  ck_assert_int_eq(top, traced_peak);
  cJSON_Delete(doc);
  gt_trace_destroy(t);
  gt_trainer_destroy(tr);
}
END_TEST

START_TEST(test_plan_trainer_refuses_a_trace) {
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_config c;
  gt_test_config(&c, 1, ov);
  gt_mem_probe probe;
  memset(&probe, 0, sizeof probe);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, &probe, &err) == GT_OK, "%s", err.msg);
  gt_trace *t;
  ck_assert_int_eq(gt_trace_create(&t, 1, 0, &err), GT_OK);
  ck_assert_int_eq(gt_trainer_set_trace(tr, t, &err), GT_ERR_ARG);
  ck_assert_msg(strstr(err.msg, "allocation-only") != NULL, "%s", err.msg);
  ck_assert_ptr_null(gt_trainer_trace(tr));
  gt_trace_destroy(t);
  gt_trainer_destroy(tr);
}
END_TEST

/* The window and the overhead line, with the step times given: skip=1
 * leaves no baseline before the window (the first step is warm-up), so the
 * line waits for profiler_steps untraced steps after it. */
START_TEST(test_profiler_window_and_overhead_line) {
  const char *ov[] = {"model_name=gemma3-tiny", "profiler=trace", "steps=7", "profiler_steps=2",
                      "skip_first_n_steps_for_profiler=1"};
  gt_config c;
  gt_test_config(&c, 5, ov);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &err) == GT_OK, "%s", err.msg);
  gt_profiler p;
  gt_profiler_init(&p, &c, 0, gt_test_dir);
  char line[3000];
  const double secs[7] = {9.0, 2.0, 2.0, 1.0, 1.0, 5.0, 5.0};
  for (int64_t s = 0; s < 7; s++) {
    ck_assert_int_eq(gt_profiler_step_begin(&p, tr, s, &err), GT_OK);
    ck_assert_int_eq(gt_profiler_host(&p) != NULL, s == 1 || s == 2);
    ck_assert_int_eq(gt_trainer_trace(tr) != NULL, s == 1 || s == 2);
    ck_assert_int_eq(gt_profiler_step_end(&p, tr, s, secs[s], line, sizeof line, &err), GT_OK);
    if (s == 4)
      ck_assert_msg(strstr(line, "(steps 1-2, ") && strstr(line, "the traced steps took 2.0000 s on average, the 2 "
                                                                 "untraced steps right after them 1.0000 s (+100.0%)"),
                    "%s", line);
    else
      ck_assert_msg(line[0] == 0, "step %d: %s", (int)s, line);
  }
  ck_assert_int_eq(gt_profiler_finish(&p, tr, line, sizeof line, &err), GT_OK);
  ck_assert_str_eq(line, "");
  gt_profiler_close(&p, tr);
  char *path = gt_test_dir_path("trace.json");
  ck_assert_int_eq(access(path, F_OK), 0);
  free(path);
  /* skip=2: the step before the window is the baseline, printed at once */
  const char *ov2[] = {"model_name=gemma3-tiny", "profiler=trace", "steps=7", "profiler_steps=2",
                       "skip_first_n_steps_for_profiler=2"};
  gt_test_config(&c, 5, ov2);
  gt_profiler_init(&p, &c, 0, gt_test_dir);
  for (int64_t s = 0; s < 4; s++) {
    ck_assert_int_eq(gt_profiler_step_begin(&p, tr, s, &err), GT_OK);
    ck_assert_int_eq(gt_profiler_step_end(&p, tr, s, s == 1 ? 4.0 : 5.0, line, sizeof line, &err), GT_OK);
    ck_assert_int_eq(line[0] != 0, s == 3);
  }
  ck_assert_msg(strstr(line, "the 1 untraced step right before them 4.0000 s (+25.0%)"), "%s", line);
  gt_profiler_close(&p, tr);
  gt_trainer_destroy(tr);
}
END_TEST

Suite *trace_suite(void) {
  Suite *s = suite_create("trace");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_spans_nest_with_exact_times);
  tcase_add_test(tc, test_prof_statements_and_phases);
  tcase_add_test(tc, test_memory_counters_follow_the_tracker);
  tcase_add_test(tc, test_lanes_are_bounded);
  tcase_add_test(tc, test_lanes_record_from_their_own_threads);
  tcase_add_test(tc, test_failed_write_leaves_no_file);
  tcase_add_test(tc, test_mesh_collectives_on_their_lanes);
  tcase_add_test(tc, test_traced_trainer_step);
  tcase_add_test(tc, test_plan_trainer_refuses_a_trace);
  tcase_add_test(tc, test_profiler_window_and_overhead_line);
  return s;
}

int main(void) { return gt_test_run_suite(trace_suite(), 0); }
