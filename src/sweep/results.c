/* Sweep results: the status names, a point's record and its line in
 * results.jsonl (written as points finish, read back on a restart), the
 * metrics by name, and the measurements read from a run's metrics.jsonl. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sweep/json.h"
#include "sweep/sweep.h"

/* ---------- statuses ---------- */

/* the names existing results.jsonl and results.md files hold: never rename */
static const char *const gt__status_names[GT_SWEEP_NUM_STATUSES] = {[GT_SWEEP_PENDING] = "",
                                                                    [GT_SWEEP_OK] = "ok",
                                                                    [GT_SWEEP_DOES_NOT_FIT] = "does_not_fit",
                                                                    [GT_SWEEP_CONFIG_ERROR] = "config_error",
                                                                    [GT_SWEEP_FAILED] = "failed",
                                                                    [GT_SWEEP_DIVERGED] = "diverged",
                                                                    [GT_SWEEP_TIMEOUT] = "timeout",
                                                                    [GT_SWEEP_CRASHED] = "crashed",
                                                                    [GT_SWEEP_WOULD_RUN] = "would_run"};

const char *gt_sweep_status_name(gt_sweep_status st) {
  return st >= 0 && st < GT_SWEEP_NUM_STATUSES ? gt__status_names[st] : "";
}

void gt_sweep_result_status_text(const gt_sweep_result *r, char *buf, size_t n) {
  if (r->status == GT_SWEEP_CRASHED && r->signal > 0)
    snprintf(buf, n, "%s (signal %d)", gt_sweep_status_name(r->status), r->signal);
  else
    snprintf(buf, n, "%s", gt_sweep_status_name(r->status));
}

/* A recorded status: a name, and for a crash "crashed (signal N)". */
static int gt__status_parse(const char *text, gt_sweep_status *st, int *signal) {
  *signal = 0;
  for (int i = 0; i < GT_SWEEP_NUM_STATUSES; i++)
    if (!strcmp(text, gt__status_names[i])) return *st = (gt_sweep_status)i, 1;
  int sig, used = 0;
  if (sscanf(text, "crashed (signal %d)%n", &sig, &used) == 1 && used > 0 && !text[used]) {
    *st = GT_SWEEP_CRASHED;
    *signal = sig;
    return 1;
  }
  return 0;
}

/* ---------- metrics by name ---------- */

static const struct {
  const char *name;
  size_t off;
} gt__metrics[] = {
    {"median_step_seconds", offsetof(gt_sweep_result, median_step_seconds)},
    {"tokens_per_s_per_device", offsetof(gt_sweep_result, tokens_per_s_per_device)},
    {"tflops_per_s_per_device", offsetof(gt_sweep_result, tflops_per_s_per_device)},
    {"final_loss", offsetof(gt_sweep_result, final_loss)},
    {"final_eval_loss", offsetof(gt_sweep_result, final_eval_loss)},
    {"final_rewards_accuracies", offsetof(gt_sweep_result, final_rewards_accuracies)},
    {"final_rewards_margins", offsetof(gt_sweep_result, final_rewards_margins)},
    {"final_eval_rewards_accuracies", offsetof(gt_sweep_result, final_eval_rewards_accuracies)},
    {"final_eval_rewards_margins", offsetof(gt_sweep_result, final_eval_rewards_margins)},
    {"planned_peak_bytes", offsetof(gt_sweep_result, planned_peak_bytes)},
    {"planned_host_bytes", offsetof(gt_sweep_result, planned_host_bytes)},
    {"measured_peak_bytes", offsetof(gt_sweep_result, measured_peak_bytes)},
    {"wall_seconds", offsetof(gt_sweep_result, wall_seconds)},
};
#define GT__NMETRICS ((int)(sizeof gt__metrics / sizeof gt__metrics[0]))

int gt_sweep_num_metrics(void) { return GT__NMETRICS; }
const char *gt_sweep_metric_name(int i) { return i >= 0 && i < GT__NMETRICS ? gt__metrics[i].name : NULL; }

/* an eval task's fields, in the order of gt_sweep_result's tasks[].v */
static const char *const gt__task_fields[5] = {"acc", "acc_norm", "acc_stderr", "acc_norm_stderr", "n"};

/* "tasks/<task>/<field>": the field's index, the task name into task[64]; -1 if not of that form */
static int gt__task_metric(const char *name, char *task) {
  if (strncmp(name, "tasks/", 6)) return -1;
  const char *t = name + 6, *sl = strrchr(t, '/');
  if (!sl || sl == t || sl - t >= 64) return -1;
  for (int i = 0; i < 5; i++)
    if (!strcmp(sl + 1, gt__task_fields[i])) {
      snprintf(task, 64, "%.*s", (int)(sl - t), t);
      return i;
    }
  return -1;
}

int gt_sweep_is_metric(const char *name) {
  char task[64];
  for (int i = 0; i < GT__NMETRICS; i++)
    if (!strcmp(name, gt__metrics[i].name)) return 1;
  return gt__task_metric(name, task) >= 0;
}
double gt_sweep_result_metric(const gt_sweep_result *r, const char *name) {
  for (int i = 0; i < GT__NMETRICS; i++)
    if (!strcmp(name, gt__metrics[i].name)) return *(const double *)((const char *)r + gt__metrics[i].off);
  char task[64];
  int f = gt__task_metric(name, task);
  for (int i = 0; f >= 0 && i < r->n_tasks; i++)
    if (!strcmp(r->tasks[i].name, task)) return r->tasks[i].v[f];
  return NAN;
}

/* A "tasks" object of metrics.jsonl or results.jsonl into r (the first 8). */
static void gt__tasks_from_json(gt_sweep_result *r, const cJSON *ts) {
  r->n_tasks = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, ts) {
    if (r->n_tasks == 8 || !cJSON_IsObject(t) || !t->string) continue;
    int k = r->n_tasks++;
    snprintf(r->tasks[k].name, sizeof r->tasks[k].name, "%s", t->string);
    for (int i = 0; i < 5; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, gt__task_fields[i]);
      r->tasks[k].v[i] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
  }
}

void gt_sweep_metric_header(const char *name, char *buf, size_t n) {
  size_t l = strlen(name);
  if (l > 6 && !strcmp(name + l - 6, "_bytes"))
    snprintf(buf, n, "%.*s MiB", (int)(l - 6), name);
  else
    snprintf(buf, n, "%s", name);
}

const char *gt_sweep_result_value(const gt_sweep_result *r, const char *key) {
  const char *v = gt_sweep_kvs_get(&r->values, key);
  if (!v) v = gt_sweep_kvs_get(&r->overrides, key);
  return v ? v : "-";
}

/* ---------- result records ---------- */

void gt_sweep_result_init(gt_sweep_result *r) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < GT__NMETRICS; i++) *(double *)((char *)r + gt__metrics[i].off) = NAN;
}

void gt_sweep_result_free(gt_sweep_result *r) {
  gt_sweep_kvs_free(&r->overrides);
  gt_sweep_kvs_free(&r->values);
}

gt_rc gt_sweep_result_copy(gt_sweep_result *dst, const gt_sweep_result *src, gt_err *err) {
  *dst = *src;
  gt_rc rc = gt_sweep_kvs_copy(&dst->overrides, &src->overrides, err);
  if (!rc && (rc = gt_sweep_kvs_copy(&dst->values, &src->values, err))) gt_sweep_kvs_free(&dst->overrides);
  return rc;
}

static cJSON *gt__kvs_to_json(const gt_sweep_kvs *l) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < l->n; i++) {
    size_t kl = gt_sweep_key_len(l->kv[i]);
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(kl < 255 ? kl : 255), l->kv[i]);
    cJSON_AddStringToObject(o, key, l->kv[i] + kl + (l->kv[i][kl] == '='));
  }
  return o;
}

char *gt_sweep_result_to_json(const gt_sweep_result *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "point", r->point);
  cJSON_AddStringToObject(o, "config", r->config);
  cJSON_AddStringToObject(o, "identity", r->identity);
  cJSON_AddItemToObject(o, "overrides", gt__kvs_to_json(&r->overrides));
  cJSON_AddItemToObject(o, "values", gt__kvs_to_json(&r->values));
  char status[64];
  gt_sweep_result_status_text(r, status, sizeof status);
  cJSON_AddStringToObject(o, "status", status);
  cJSON_AddStringToObject(o, "reason", r->reason);
  /* NaN prints as null: "not measured" */
  for (int i = 0; i < GT__NMETRICS; i++)
    cJSON_AddNumberToObject(o, gt__metrics[i].name, *(const double *)((const char *)r + gt__metrics[i].off));
  cJSON_AddNumberToObject(o, "steps_done", (double)r->steps_done);
  cJSON_AddStringToObject(o, "log", r->log);
  if (r->n_tasks) {
    cJSON *ts = cJSON_AddObjectToObject(o, "tasks");
    for (int k = 0; ts && k < r->n_tasks; k++) {
      cJSON *t = cJSON_AddObjectToObject(ts, r->tasks[k].name);
      for (int i = 0; t && i < 5; i++) cJSON_AddNumberToObject(t, gt__task_fields[i], r->tasks[k].v[i]);
    }
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

static gt_rc gt__kvs_from_json(gt_sweep_kvs *l, const cJSON *o, gt_err *err) {
  const cJSON *it;
  cJSON_ArrayForEach(it, o) {
    char buf[GT_STR_PATH + 160];
    gt_rc rc = gt__sweep_scalar_kv(it->string, it, "sweep: results.jsonl", buf, sizeof buf, err);
    if (!rc) rc = gt_sweep_kvs_set(l, buf, err);
    if (rc) return rc;
  }
  return GT_OK;
}

gt_rc gt_sweep_result_from_json(gt_sweep_result *r, const char *line, gt_err *err) {
  gt_sweep_result_init(r);
  cJSON *o = cJSON_Parse(line);
  if (!o || !cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return gt_err_set(err, GT_ERR_FORMAT, "sweep: a results.jsonl line is not a JSON object");
  }
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "point");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
  const cJSON *ov = cJSON_GetObjectItemCaseSensitive(o, "overrides");
  gt_rc rc = GT_OK;
  if (!cJSON_IsNumber(pt) || !cJSON_IsString(st) || !cJSON_IsObject(ov)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "sweep: a results.jsonl line lacks \"point\", \"status\" or \"overrides\"");
    goto done;
  }
  r->point = (int)pt->valuedouble;
  if (!gt__status_parse(st->valuestring, &r->status, &r->signal)) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "sweep: a results.jsonl line has status '%.64s'; expected ok, does_not_fit, config_error, "
                    "failed, diverged, timeout, crashed (signal N) or would_run",
                    st->valuestring);
    goto done;
  }
  if ((rc = gt__kvs_from_json(&r->overrides, ov, err))) goto done;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "values");
  if (cJSON_IsObject(v) && (rc = gt__kvs_from_json(&r->values, v, err))) goto done;
  const cJSON *c;
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "config")))
    snprintf(r->config, sizeof r->config, "%s", c->valuestring);
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "identity")))
    snprintf(r->identity, sizeof r->identity, "%s", c->valuestring);
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "reason")))
    snprintf(r->reason, sizeof r->reason, "%s", c->valuestring);
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "log")))
    snprintf(r->log, sizeof r->log, "%s", c->valuestring);
  if (cJSON_IsNumber(c = cJSON_GetObjectItemCaseSensitive(o, "steps_done"))) r->steps_done = (long long)c->valuedouble;
  if (cJSON_IsObject(c = cJSON_GetObjectItemCaseSensitive(o, "tasks"))) gt__tasks_from_json(r, c);
  for (int i = 0; i < GT__NMETRICS; i++)
    if (cJSON_IsNumber(c = cJSON_GetObjectItemCaseSensitive(o, gt__metrics[i].name)))
      *(double *)((char *)r + gt__metrics[i].off) = c->valuedouble;
done:
  cJSON_Delete(o);
  if (rc) gt_sweep_result_free(r);
  return rc;
}

/* ---------- a run's measurements ---------- */

static int gt__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double gt__median(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, gt__cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

gt_rc gt_sweep_read_run_metrics(gt_sweep_result *r, const char *metrics_path, gt_err *err) {
  FILE *f = fopen(metrics_path, "r");
  if (!f) return gt_err_set(err, GT_ERR_IO, "sweep: cannot read '%s': %s", metrics_path, strerror(errno));
  int n = 0, cap = 0;
  double *sec = NULL, *tok = NULL, *tfl = NULL; /* each step's seconds, tokens and TFLOP per device */
  double peak = NAN, loss = NAN, eval = NAN, pref[4] = {NAN, NAN, NAN, NAN};
  char *line = NULL;
  size_t lcap = 0;
  gt_rc rc = GT_OK;
  int lineno = 0;
  while (getline(&line, &lcap, f) > 0) {
    lineno++;
    cJSON *o = cJSON_Parse(line);
    if (!o) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "sweep: '%s' line %d is not JSON", metrics_path, lineno);
      break;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      double *a = realloc(sec, sizeof(double) * (size_t)cap),
             *b = a ? realloc(tok, sizeof(double) * (size_t)cap) : NULL,
             *c = b ? realloc(tfl, sizeof(double) * (size_t)cap) : NULL;
      if (a) sec = a;
      if (b) tok = b;
      if (c) tfl = c;
      if (!c) {
        cJSON_Delete(o);
        rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
        break;
      }
    }
    const cJSON *it;
    sec[n] = cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "seconds")) ? it->valuedouble : NAN;
    /* the step's work: its tokens and TFLOP per device, which metrics.jsonl
     * writes with more digits than the rates (a file without them: rate x
     * seconds) */
    tok[n] = cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_device")) ? it->valuedouble
             : cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s_per_device"))
                 ? it->valuedouble * sec[n]
                 : NAN;
    tfl[n] = cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tflops_per_device")) ? it->valuedouble
             : cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tflops_per_s_per_device"))
                 ? it->valuedouble * sec[n]
                 : NAN;
    /* a NaN loss is written as nan by printf, which is not JSON: cJSON
     * refuses the line above, so a NaN shows as a missing loss */
    loss = cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "loss")) ? it->valuedouble : NAN;
    if (cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "eval_loss"))) eval = it->valuedouble;
    /* use_dpo: the last step's and the last eval's preference accuracy and margin */
    static const char *const pk[4] = {"rewards/accuracies", "rewards/margins", "eval_rewards/accuracies",
                                      "eval_rewards/margins"};
    for (int k = 0; k < 4; k++)
      if (cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, pk[k]))) pref[k] = it->valuedouble;
    /* the last eval's task scores */
    if (cJSON_IsObject(it = cJSON_GetObjectItemCaseSensitive(o, "tasks"))) gt__tasks_from_json(r, it);
    if (cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "peak_memory_bytes")) &&
        (isnan(peak) || it->valuedouble > peak))
      peak = it->valuedouble;
    n++;
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  if (!rc && n == 0) rc = gt_err_set(err, GT_ERR_FORMAT, "sweep: '%s' holds no steps", metrics_path);
  if (!rc) {
    /* step 0 pays for first-touch page faults and cold caches: it is not the
     * steady state a sweep compares, unless it is most of what there is */
    int skip = n > 2 ? 1 : 0;
    /* the rates are those of the median step time: a step's tokens and
     * TFLOP (the same each step) over it. Separate medians of the three
     * disagree whenever the middle steps differ (an even count averages two
     * of each, and the fastest step has the highest rate), so a row's
     * tokens/s would not be its tokens over its seconds. */
    double step_tokens = gt__median(tok + skip, n - skip), step_tflop = gt__median(tfl + skip, n - skip);
    r->median_step_seconds = gt__median(sec + skip, n - skip);
    r->tokens_per_s_per_device = step_tokens / r->median_step_seconds;
    r->tflops_per_s_per_device = step_tflop / r->median_step_seconds;
    r->final_loss = loss;
    r->final_eval_loss = eval;
    r->final_rewards_accuracies = pref[0];
    r->final_rewards_margins = pref[1];
    r->final_eval_rewards_accuracies = pref[2];
    r->final_eval_rewards_margins = pref[3];
    r->measured_peak_bytes = peak;
    r->steps_done = n;
  }
  free(sec);
  free(tok);
  free(tfl);
  return rc;
}

/* ---------- results.jsonl ---------- */

gt_rc gt_sweep_result_append(FILE *jsonl, const gt_sweep_result *r, gt_err *err) {
  char *line = gt_sweep_result_to_json(r);
  if (!line) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory for point %d's record", r->point);
  int ok = fprintf(jsonl, "%s\n", line) > 0;
  ok = fflush(jsonl) == 0 && ok;
  free(line);
  if (!ok)
    return gt_err_set(err, GT_ERR_IO, "sweep: appending point %d to results.jsonl failed: %s", r->point,
                      strerror(errno));
  return GT_OK;
}

/* Any recorded status is final; retrying keeps only ok (a refusal can go
 * away too: a config directory or the free memory changes). */
static int gt__final_status(gt_sweep_status st, int retry_failed) {
  if (st == GT_SWEEP_PENDING || st == GT_SWEEP_WOULD_RUN) return 0;
  return !retry_failed || st == GT_SWEEP_OK;
}

gt_rc gt_sweep_results_restore(const gt_sweep *s, const gt_sweep_kvs *ov, const char *const *identity,
                               int retry_failed, const char *path, gt_sweep_result *res, int *done,
                               gt_sweep_skip_fn on_skip, void *ctx, gt_err *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? GT_OK : gt_err_set(err, GT_ERR_IO, "sweep: cannot read '%s': %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  gt_rc rc = GT_OK;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    gt_sweep_result rec;
    gt_err e;
    if (gt_sweep_result_from_json(&rec, line, &e)) {
      /* an interrupted write leaves half a line: that point just runs again */
      if (on_skip) on_skip(ctx, lineno, e.msg);
      continue;
    }
    for (int k = 0; k < s->n_points; k++) {
      /* the same keys over another config file's contents, another
       * configs/base.json or preset, or other sweep defaults (threads per
       * point) are another run: only the identity tells */
      if (!gt_sweep_kvs_equal(&rec.overrides, &ov[k]) || strcmp(rec.config, s->base_config) || !rec.identity[0] ||
          strcmp(rec.identity, identity[k]))
        continue;
      if (done[k]) gt_sweep_result_free(&res[k]);
      if (gt__final_status(rec.status, retry_failed)) {
        if ((rc = gt_sweep_result_copy(&res[k], &rec, err))) {
          gt_sweep_result_init(&res[k]);
          done[k] = 0;
          break;
        }
        done[k] = 1;
      } else {
        gt_sweep_result_init(&res[k]);
        done[k] = 0;
      }
    }
    gt_sweep_result_free(&rec);
    if (rc) break;
  }
  free(line);
  fclose(f);
  return rc;
}
