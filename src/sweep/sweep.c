/* gemtrain sweep: parsing a sweep file into points, running each point as
 * its own `gemtrain train` process, and the results (results.jsonl,
 * results.md, plot.svg). See include/gemtrain/sweep.h. */
#define _POSIX_C_SOURCE 200809L
#include "sweep/sweep.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gemtrain/metrics.h"
#include "exec/plan.h"
#include "base/prof.h"

/* ---------- small helpers ---------- */

/* The shortest text that reads back as the same double, so a grid value
 * written 0.1 shows as 0.1 (not 0.10000000000000001) in keys, logs and the
 * table, and compares equal on restart. */
static void gt__num_text(double v, char *buf, size_t n) {
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, n, "%lld", (long long)v);
    return;
  }
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return;
  }
}

/* snprintf for one-line messages, where cutting a long path short is
 * acceptable (and GCC's truncation warning is not useful). */
static void gt__msg(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void gt__msg(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

static const char *gt__json_kind(const cJSON *it) {
  if (!it) return "nothing";
  if (cJSON_IsString(it)) return "a string";
  if (cJSON_IsNumber(it)) return "a number";
  if (cJSON_IsBool(it)) return "a boolean";
  if (cJSON_IsNull(it)) return "null";
  if (cJSON_IsArray(it)) return "a list";
  if (cJSON_IsObject(it)) return "an object";
  return "an unknown value";
}

/* A config value from JSON as key=value text; `where` names it in messages. */
static gt_rc gt__scalar_kv(const char *key, const cJSON *it, const char *where, char *buf, size_t n, gt_err *err) {
  char v[GT_STR_PATH + 64];
  if (cJSON_IsString(it))
    snprintf(v, sizeof v, "%s", it->valuestring);
  else if (cJSON_IsBool(it))
    snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "true" : "false");
  else if (cJSON_IsNumber(it))
    gt__num_text(it->valuedouble, v, sizeof v);
  else
    return gt_err_set(err, GT_ERR_CONFIG, "%s: key '%s' must be a number, string or boolean, found %s", where, key,
                      gt__json_kind(it));
  if ((size_t)snprintf(buf, n, "%s=%s", key, v) >= n)
    return gt_err_set(err, GT_ERR_CONFIG, "%s: the value of key '%s' is too long", where, key);
  return GT_OK;
}

/* ", did you mean 'x'" for the closest of names (NULL-terminated), or "". */
static void gt__did_you_mean(const char *got, const char *const *names, char *buf, size_t n) {
  const char *best = NULL;
  int bd = 3;
  for (int i = 0; names[i]; i++) {
    int d = gt_edit_distance(got, names[i]);
    /* a shortened name ("tokens_per_s") is a likely slip too */
    if (d >= bd && strlen(got) >= 4 && strstr(names[i], got)) d = bd - 1;
    if (d < bd) bd = d, best = names[i];
  }
  if (best)
    snprintf(buf, n, "; did you mean '%s'?", best);
  else
    buf[0] = '\0';
}

/* Whole file (or its last `tail` bytes when tail > 0) as a string; NULL if
 * it cannot be read. */
static char *gt__read_file(const char *path, long tail) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  long from = tail > 0 && n > tail ? n - tail : 0;
  fseek(f, from, SEEK_SET);
  char *buf = malloc((size_t)(n - from) + 1);
  if (!buf) {
    fclose(f);
    return NULL;
  }
  size_t got = fread(buf, 1, (size_t)(n - from), f);
  fclose(f);
  buf[got] = '\0';
  return buf;
}

/* ---------- key=value lists ---------- */

static size_t gt__key_len(const char *kv) {
  const char *eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

static int gt__kvs_find(const gt_sweep_kvs *l, const char *key, size_t klen) {
  for (int i = 0; i < l->n; i++)
    if (gt__key_len(l->kv[i]) == klen && !strncmp(l->kv[i], key, klen)) return i;
  return -1;
}

gt_rc gt_sweep_kvs_set(gt_sweep_kvs *l, const char *kv, gt_err *err) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s' is not key=value", kv);
  char *copy = strdup(kv);
  if (!copy) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  int i = gt__kvs_find(l, kv, (size_t)(eq - kv));
  if (i >= 0) {
    free(l->kv[i]);
    l->kv[i] = copy;
    return GT_OK;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    char **p = realloc(l->kv, sizeof(char *) * (size_t)cap);
    if (!p) {
      free(copy);
      return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    }
    l->kv = p, l->cap = cap;
  }
  l->kv[l->n++] = copy;
  return GT_OK;
}

const char *gt_sweep_kvs_get(const gt_sweep_kvs *l, const char *key) {
  int i = gt__kvs_find(l, key, strlen(key));
  return i < 0 ? NULL : strchr(l->kv[i], '=') + 1;
}

int gt_sweep_kvs_equal(const gt_sweep_kvs *a, const gt_sweep_kvs *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    int j = gt__kvs_find(b, a->kv[i], gt__key_len(a->kv[i]));
    if (j < 0 || strcmp(a->kv[i], b->kv[j])) return 0;
  }
  return 1;
}

void gt_sweep_kvs_free(gt_sweep_kvs *l) {
  for (int i = 0; i < l->n; i++) free(l->kv[i]);
  free(l->kv);
  memset(l, 0, sizeof *l);
}

static void gt__kvs_remove(gt_sweep_kvs *l, const char *key) {
  int i = gt__kvs_find(l, key, strlen(key));
  if (i < 0) return;
  free(l->kv[i]);
  memmove(l->kv + i, l->kv + i + 1, sizeof(char *) * (size_t)(l->n - i - 1));
  l->n--;
}

static gt_rc gt__kvs_copy(gt_sweep_kvs *dst, const gt_sweep_kvs *src, gt_err *err) {
  memset(dst, 0, sizeof *dst);
  for (int i = 0; i < src->n; i++) {
    gt_rc rc = gt_sweep_kvs_set(dst, src->kv[i], err);
    if (rc) return rc;
  }
  return GT_OK;
}

/* ---------- parsing the sweep file ---------- */

static const char *const gt__top_keys[] = {
    "base", "grid",         "grids",           "points",           "steps",       "metrics", "sort_by", "sort_desc",
    "plot", "max_parallel", "point_timeout_s", "output_directory", "description", NULL};

/* The sweep names each point's run and puts it under its own directory; a
 * point setting these would make points overwrite each other. The base and
 * the command line may set base_output_directory: it places the sweep's
 * directory (<base_output_directory>/<sweep name>). */
static int gt__reserved_key(const char *key, size_t klen, int point) {
  return (klen == 8 && !strncmp(key, "run_name", 8)) ||
         (point && klen == 21 && !strncmp(key, "base_output_directory", 21));
}

static const struct {
  const char *name;
  size_t off;
} gt__metrics[] = {
    {"median_step_seconds", offsetof(gt_sweep_result, median_step_seconds)},
    {"tokens_per_s_per_device", offsetof(gt_sweep_result, tokens_per_s_per_device)},
    {"tflops_per_s_per_device", offsetof(gt_sweep_result, tflops_per_s_per_device)},
    {"final_loss", offsetof(gt_sweep_result, final_loss)},
    {"final_eval_loss", offsetof(gt_sweep_result, final_eval_loss)},
    {"planned_peak_bytes", offsetof(gt_sweep_result, planned_peak_bytes)},
    {"planned_host_bytes", offsetof(gt_sweep_result, planned_host_bytes)},
    {"measured_peak_bytes", offsetof(gt_sweep_result, measured_peak_bytes)},
    {"wall_seconds", offsetof(gt_sweep_result, wall_seconds)},
};
#define GT__NMETRICS ((int)(sizeof gt__metrics / sizeof gt__metrics[0]))

int gt_sweep_num_metrics(void) { return GT__NMETRICS; }
const char *gt_sweep_metric_name(int i) { return i >= 0 && i < GT__NMETRICS ? gt__metrics[i].name : NULL; }
int gt_sweep_is_metric(const char *name) {
  for (int i = 0; i < GT__NMETRICS; i++)
    if (!strcmp(name, gt__metrics[i].name)) return 1;
  return 0;
}
double gt_sweep_result_metric(const gt_sweep_result *r, const char *name) {
  for (int i = 0; i < GT__NMETRICS; i++)
    if (!strcmp(name, gt__metrics[i].name)) return *(const double *)((const char *)r + gt__metrics[i].off);
  return NAN;
}

static gt_rc gt__not_metric(const char *path, const char *what, const char *got, gt_err *err) {
  const char *names[GT__NMETRICS + 1];
  char list[512] = "", hint[128];
  size_t j = 0;
  for (int i = 0; i < GT__NMETRICS; i++) {
    names[i] = gt__metrics[i].name;
    int w = snprintf(list + j, sizeof list - j, "%s%s", i ? ", " : "", names[i]);
    if (w > 0 && (size_t)w < sizeof list - j) j += (size_t)w;
  }
  names[GT__NMETRICS] = NULL;
  gt__did_you_mean(got, names, hint, sizeof hint);
  return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s = '%s' is not a metric%s expected one of %s", path, what, got,
                    hint[0] ? hint : ";", list);
}

static gt_rc gt__add_point(gt_sweep *s, gt_sweep_kvs *kv, gt_err *err) {
  /* a union of grids may name the same point twice: keep the first */
  for (int i = 0; i < s->n_points; i++) {
    gt_sweep_kvs p = {s->points[i].n, s->points[i].n, s->points[i].kv};
    if (gt_sweep_kvs_equal(&p, kv)) {
      gt_sweep_kvs_free(kv);
      return GT_OK;
    }
  }
  if (s->n_points >= 100000) {
    gt_sweep_kvs_free(kv);
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s' defines more than 100000 points", s->path);
  }
  if (s->n_points % 64 == 0) {
    gt_sweep_point *p = realloc(s->points, sizeof *p * (size_t)(s->n_points + 64));
    if (!p) {
      gt_sweep_kvs_free(kv);
      return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    }
    s->points = p;
  }
  s->points[s->n_points].n = kv->n;
  s->points[s->n_points].kv = kv->kv;
  s->n_points++;
  memset(kv, 0, sizeof *kv);
  return GT_OK;
}

/* The cross product of a grid, the file's key order, last key fastest. */
static gt_rc gt__expand_grid(gt_sweep *s, const cJSON *g, const char *where, gt_err *err) {
  if (!cJSON_IsObject(g))
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s must be an object of key: [values], found %s", s->path,
                      where, gt__json_kind(g));
  int m = cJSON_GetArraySize(g);
  if (m == 0)
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s is empty; expected key: [values, ...]", s->path, where);
  const cJSON *lists[64];
  if (m > 64) return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s has more than 64 keys", s->path, where);
  long long total = 1;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, g) {
    if (gt__reserved_key(it->string, strlen(it->string), 1))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s sets '%s', which the sweep sets for each point", s->path,
                        where, it->string);
    if (!cJSON_IsArray(it))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s key '%s' must be a list of values, found %s", s->path,
                        where, it->string, gt__json_kind(it));
    int len = cJSON_GetArraySize(it);
    if (len == 0)
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s key '%s' has an empty list; expected at least one value",
                        s->path, where, it->string);
    const cJSON *v;
    int j = 0;
    cJSON_ArrayForEach(v, it) {
      if (!cJSON_IsString(v) && !cJSON_IsNumber(v) && !cJSON_IsBool(v))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: '%s': %s key '%s' value %d must be a number, string or boolean, found %s", s->path,
                          where, it->string, j, gt__json_kind(v));
      j++;
    }
    lists[i++] = it;
    total *= len;
    if (total > 100000)
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s has more than 100000 points", s->path, where);
  }
  for (long long idx = 0; idx < total; idx++) {
    int pick[64];
    long long r = idx;
    for (int a = m - 1; a >= 0; a--) {
      int len = cJSON_GetArraySize(lists[a]);
      pick[a] = (int)(r % len);
      r /= len;
    }
    gt_sweep_kvs kv = {0, 0, NULL};
    for (int a = 0; a < m; a++) {
      char buf[GT_STR_PATH + 160];
      gt_rc rc = gt__scalar_kv(lists[a]->string, cJSON_GetArrayItem(lists[a], pick[a]), s->path, buf, sizeof buf, err);
      if (!rc) rc = gt_sweep_kvs_set(&kv, buf, err);
      if (rc) {
        gt_sweep_kvs_free(&kv);
        return rc;
      }
    }
    gt_rc rc = gt__add_point(s, &kv, err);
    if (rc) return rc;
  }
  return GT_OK;
}

static gt_rc gt__parse_points(gt_sweep *s, const cJSON *pts, gt_err *err) {
  if (!cJSON_IsArray(pts))
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': points must be a list of objects {key: value}, found %s",
                      s->path, gt__json_kind(pts));
  int i = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, pts) {
    char where[GT_STR_PATH + 64];
    snprintf(where, sizeof where, "sweep: '%s': points[%d]", s->path, i);
    if (!cJSON_IsObject(p))
      return gt_err_set(err, GT_ERR_CONFIG, "%s must be an object {key: value}, found %s", where, gt__json_kind(p));
    gt_sweep_kvs kv = {0, 0, NULL};
    const cJSON *it;
    cJSON_ArrayForEach(it, p) {
      char buf[GT_STR_PATH + 160];
      gt_rc rc = GT_OK;
      if (gt__reserved_key(it->string, strlen(it->string), 1))
        rc = gt_err_set(err, GT_ERR_CONFIG, "%s sets '%s', which the sweep sets for each point", where, it->string);
      else if (cJSON_IsArray(it))
        rc = gt_err_set(err, GT_ERR_CONFIG, "%s key '%s' is a list; a point takes one value (lists belong in a grid)",
                        where, it->string);
      if (!rc) rc = gt__scalar_kv(it->string, it, where, buf, sizeof buf, err);
      if (!rc) rc = gt_sweep_kvs_set(&kv, buf, err);
      if (rc) {
        gt_sweep_kvs_free(&kv);
        return rc;
      }
    }
    gt_rc rc = gt__add_point(s, &kv, err);
    if (rc) return rc;
    i++;
  }
  return GT_OK;
}

static gt_rc gt__parse_base(gt_sweep *s, const cJSON *b, gt_err *err) {
  if (!cJSON_IsObject(b))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "sweep: '%s': base must be an object {\"config\": file, \"overrides\": {...}}, found %s", s->path,
                      gt__json_kind(b));
  const cJSON *it;
  cJSON_ArrayForEach(it, b) {
    if (!strcmp(it->string, "config")) {
      size_t n = cJSON_IsString(it) ? strlen(it->valuestring) : 0;
      if (n <= 5 || strcmp(it->valuestring + n - 5, ".json"))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: '%s': base.config must be the path of a .json config file, found %s", s->path,
                          cJSON_IsString(it) ? it->valuestring : gt__json_kind(it));
      /* relative to the sweep file, so a sweep and its config travel together */
      const char *slash = strrchr(s->path, '/');
      int w;
      if (it->valuestring[0] == '/' || !slash)
        w = snprintf(s->base_config, sizeof s->base_config, "%s", it->valuestring);
      else
        w = snprintf(s->base_config, sizeof s->base_config, "%.*s/%s", (int)(slash - s->path), s->path,
                     it->valuestring);
      if (w < 0 || (size_t)w >= sizeof s->base_config)
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': base.config path is too long", s->path);
    } else if (!strcmp(it->string, "overrides")) {
      if (!cJSON_IsObject(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': base.overrides must be an object {key: value}, found %s",
                          s->path, gt__json_kind(it));
      gt_sweep_kvs kv = {s->n_base, s->n_base, s->base};
      const cJSON *o;
      char where[GT_STR_PATH + 32];
      snprintf(where, sizeof where, "sweep: '%s': base.overrides", s->path);
      cJSON_ArrayForEach(o, it) {
        char buf[GT_STR_PATH + 160];
        gt_rc rc = GT_OK;
        if (gt__reserved_key(o->string, strlen(o->string), 0))
          rc = gt_err_set(err, GT_ERR_CONFIG, "%s sets '%s', which the sweep sets for each point", where, o->string);
        if (!rc) rc = gt__scalar_kv(o->string, o, where, buf, sizeof buf, err);
        if (!rc) rc = gt_sweep_kvs_set(&kv, buf, err);
        s->n_base = kv.n, s->base = kv.kv;
        if (rc) return rc;
      }
    } else {
      static const char *const names[] = {"config", "overrides", NULL};
      char hint[128];
      gt__did_you_mean(it->string, names, hint, sizeof hint);
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': unknown key 'base.%s'%s expected config, overrides", s->path,
                        it->string, hint[0] ? hint : ";");
    }
  }
  return GT_OK;
}

static gt_rc gt__parse_plot(gt_sweep *s, const cJSON *p, gt_err *err) {
  if (!cJSON_IsObject(p))
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': plot must be an object {\"x\": key, \"y\": metric}, found %s",
                      s->path, gt__json_kind(p));
  const cJSON *it;
  cJSON_ArrayForEach(it, p) {
    int isx = !strcmp(it->string, "x"), isy = !strcmp(it->string, "y");
    if (!isx && !isy)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "sweep: '%s': unknown key 'plot.%s'; expected x (a swept key), y (a metric)", s->path,
                        it->string);
    if (!cJSON_IsString(it) || !it->valuestring[0])
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': plot.%s must be a non-empty string, found %s", s->path,
                        it->string, gt__json_kind(it));
    if (isx)
      snprintf(s->plot_x, sizeof s->plot_x, "%s", it->valuestring);
    else
      snprintf(s->plot_y, sizeof s->plot_y, "%s", it->valuestring);
  }
  return GT_OK;
}

static gt_rc gt__parse_obj(gt_sweep *s, const cJSON *j, gt_err *err) {
  const cJSON *it;
  int have_points = 0;
  cJSON_ArrayForEach(it, j) {
    const char *k = it->string;
    gt_rc rc = GT_OK;
    if (!strcmp(k, "base")) {
      rc = gt__parse_base(s, it, err);
    } else if (!strcmp(k, "grid")) {
      have_points = 1;
      rc = gt__expand_grid(s, it, "grid", err);
    } else if (!strcmp(k, "grids")) {
      have_points = 1;
      if (!cJSON_IsArray(it))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: '%s': grids must be a list of grids [{key: [values]}, ...], found %s", s->path,
                          gt__json_kind(it));
      int g = 0;
      const cJSON *gr;
      cJSON_ArrayForEach(gr, it) {
        char where[32];
        snprintf(where, sizeof where, "grids[%d]", g++);
        if ((rc = gt__expand_grid(s, gr, where, err))) return rc;
      }
    } else if (!strcmp(k, "points")) {
      have_points = 1;
      rc = gt__parse_points(s, it, err);
    } else if (!strcmp(k, "steps")) {
      if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble != floor(it->valuedouble) ||
          it->valuedouble > 1e12)
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': steps must be a whole number >= 1, found %s", s->path,
                          cJSON_IsNumber(it) ? "a number out of range" : gt__json_kind(it));
      s->steps = (long long)it->valuedouble;
    } else if (!strcmp(k, "metrics")) {
      if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) == 0)
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': metrics must be a non-empty list of metric names, found %s",
                          s->path, cJSON_IsArray(it) ? "an empty list" : gt__json_kind(it));
      const cJSON *m;
      int i = 0;
      s->metrics = calloc((size_t)cJSON_GetArraySize(it), sizeof(char *));
      if (!s->metrics) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      cJSON_ArrayForEach(m, it) {
        char what[32];
        snprintf(what, sizeof what, "metrics[%d]", i++);
        if (!cJSON_IsString(m))
          return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s must be a metric name, found %s", s->path, what,
                            gt__json_kind(m));
        if (!gt_sweep_is_metric(m->valuestring)) return gt__not_metric(s->path, what, m->valuestring, err);
        if (!(s->metrics[s->n_metrics++] = strdup(m->valuestring)))
          return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      }
    } else if (!strcmp(k, "sort_by")) {
      if (!cJSON_IsString(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': sort_by must be a metric name, found %s", s->path,
                          gt__json_kind(it));
      if (!gt_sweep_is_metric(it->valuestring)) return gt__not_metric(s->path, "sort_by", it->valuestring, err);
      snprintf(s->sort_by, sizeof s->sort_by, "%s", it->valuestring);
    } else if (!strcmp(k, "sort_desc")) {
      if (!cJSON_IsBool(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': sort_desc must be true or false, found %s", s->path,
                          gt__json_kind(it));
      s->sort_desc = cJSON_IsTrue(it);
    } else if (!strcmp(k, "plot")) {
      rc = gt__parse_plot(s, it, err);
    } else if (!strcmp(k, "max_parallel")) {
      if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > 256 ||
          it->valuedouble != floor(it->valuedouble))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': max_parallel must be a whole number in 1 .. 256, found %s",
                          s->path, cJSON_IsNumber(it) ? "a number out of range" : gt__json_kind(it));
      s->max_parallel = (int)it->valuedouble;
    } else if (!strcmp(k, "point_timeout_s")) {
      if (!cJSON_IsNumber(it) || !(it->valuedouble > 0))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': point_timeout_s must be a number of seconds > 0, found %s",
                          s->path, cJSON_IsNumber(it) ? "a number <= 0" : gt__json_kind(it));
      s->point_timeout_s = it->valuedouble;
    } else if (!strcmp(k, "output_directory")) {
      if (!cJSON_IsString(it) || !it->valuestring[0])
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': output_directory must be a non-empty path, found %s",
                          s->path, gt__json_kind(it));
      snprintf(s->output_directory, sizeof s->output_directory, "%s", it->valuestring);
    } else if (!strcmp(k, "description")) {
      if (!cJSON_IsString(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': description must be a string, found %s", s->path,
                          gt__json_kind(it));
    } else {
      char hint[128];
      gt__did_you_mean(k, gt__top_keys, hint, sizeof hint);
      return gt_err_set(err, GT_ERR_CONFIG,
                        "sweep: '%s': unknown key '%s'%s expected base, grid, grids, points, steps, metrics, sort_by, "
                        "sort_desc, plot, max_parallel, point_timeout_s, output_directory, description",
                        s->path, k, hint[0] ? hint : ";");
    }
    if (rc) return rc;
  }
  if (!have_points || s->n_points == 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "sweep: '%s' defines no points; expected a non-empty \"grid\": {key: [values]}, \"grids\": "
                      "[...] or \"points\": [{key: value}, ...]",
                      s->path);

  /* swept keys: every key a point sets, first appearance first */
  s->keys = calloc(64, sizeof(char *));
  if (!s->keys) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  int cap = 64;
  for (int p = 0; p < s->n_points; p++)
    for (int i = 0; i < s->points[p].n; i++) {
      const char *kv = s->points[p].kv[i];
      size_t kl = gt__key_len(kv);
      int found = 0;
      for (int q = 0; q < s->n_keys && !found; q++) found = strlen(s->keys[q]) == kl && !strncmp(s->keys[q], kv, kl);
      if (found) continue;
      if (s->n_keys == cap) {
        char **nk = realloc(s->keys, sizeof(char *) * (size_t)(cap *= 2));
        if (!nk) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
        s->keys = nk;
      }
      if (!(s->keys[s->n_keys] = strndup(kv, kl))) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      s->n_keys++;
    }

  if (!s->n_metrics) {
    static const char *const defaults[] = {"median_step_seconds", "tokens_per_s_per_device", "tflops_per_s_per_device",
                                           "final_loss",          "planned_peak_bytes",      "measured_peak_bytes"};
    s->metrics = calloc(6, sizeof(char *));
    if (!s->metrics) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    for (int i = 0; i < 6; i++)
      if (!(s->metrics[s->n_metrics++] = strdup(defaults[i]))) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  }
  if (s->plot_y[0] && !gt_sweep_is_metric(s->plot_y)) return gt__not_metric(s->path, "plot.y", s->plot_y, err);
  if (s->plot_x[0]) {
    int ok = 0;
    for (int q = 0; q < s->n_keys; q++) ok |= !strcmp(s->keys[q], s->plot_x);
    if (!ok) {
      char list[1024] = "";
      size_t j = 0;
      for (int q = 0; q < s->n_keys; q++) {
        int w = snprintf(list + j, sizeof list - j, "%s%s", q ? ", " : "", s->keys[q]);
        if (w > 0 && (size_t)w < sizeof list - j) j += (size_t)w;
      }
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': plot.x = '%s' is not a swept key; swept keys: %s", s->path,
                        s->plot_x, s->n_keys ? list : "(none)");
    }
  } else if (s->n_keys) {
    snprintf(s->plot_x, sizeof s->plot_x, "%s", s->keys[0]);
  }
  if (!s->plot_y[0]) snprintf(s->plot_y, sizeof s->plot_y, "%s", s->metrics[0]);
  return GT_OK;
}

gt_rc gt_sweep_parse(gt_sweep *s, const char *text, const char *path, gt_err *err) {
  memset(s, 0, sizeof *s);
  s->max_parallel = 1;
  s->point_timeout_s = 600;
  snprintf(s->path, sizeof s->path, "%s", path ? path : "(sweep)");
  const char *base = strrchr(s->path, '/');
  base = base ? base + 1 : s->path;
  snprintf(s->name, sizeof s->name, "%s", base);
  size_t nl = strlen(s->name);
  if (nl > 5 && !strcmp(s->name + nl - 5, ".json")) s->name[nl - 5] = '\0';

  const char *where = NULL;
  cJSON *j = cJSON_ParseWithOpts(text, &where, 1);
  if (!j) {
    int line = 1;
    for (const char *c = text; where && c < where && *c; c++) line += *c == '\n';
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s' is not valid JSON (near line %d)", s->path, line);
  }
  gt_rc rc;
  if (!cJSON_IsObject(j))
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "sweep: '%s' must hold a JSON object {\"base\", \"grid\", \"steps\", ...}, found %s", s->path,
                    gt__json_kind(j));
  else
    rc = gt__parse_obj(s, j, err);
  cJSON_Delete(j);
  if (rc) gt_sweep_free(s);
  return rc;
}

gt_rc gt_sweep_load(gt_sweep *s, const char *path, gt_err *err) {
  memset(s, 0, sizeof *s);
  char *text = gt__read_file(path, 0);
  if (!text) return gt_err_set(err, GT_ERR_IO, "sweep: cannot read '%s': %s", path, strerror(errno));
  gt_rc rc = gt_sweep_parse(s, text, path, err);
  free(text);
  return rc;
}

void gt_sweep_free(gt_sweep *s) {
  for (int i = 0; i < s->n_base; i++) free(s->base[i]);
  free(s->base);
  for (int p = 0; p < s->n_points; p++) {
    for (int i = 0; i < s->points[p].n; i++) free(s->points[p].kv[i]);
    free(s->points[p].kv);
  }
  free(s->points);
  for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
  free(s->keys);
  for (int i = 0; i < s->n_metrics; i++) free(s->metrics[i]);
  free(s->metrics);
  s->n_base = s->n_points = s->n_keys = s->n_metrics = 0;
  s->base = NULL, s->points = NULL, s->keys = NULL, s->metrics = NULL;
}

gt_rc gt_sweep_point_overrides(const gt_sweep *s, int k, int n_cli, const char *const *cli, gt_sweep_kvs *out,
                               gt_err *err) {
  memset(out, 0, sizeof *out);
  if (k < 0 || k >= s->n_points) return gt_err_set(err, GT_ERR_ARG, "sweep: no point %d", k);
  gt_rc rc = GT_OK;
  for (int i = 0; i < s->n_base && !rc; i++) rc = gt_sweep_kvs_set(out, s->base[i], err);
  if (!rc && s->steps > 0) {
    char buf[64];
    snprintf(buf, sizeof buf, "steps=%lld", s->steps);
    rc = gt_sweep_kvs_set(out, buf, err);
  }
  for (int i = 0; i < s->points[k].n && !rc; i++) rc = gt_sweep_kvs_set(out, s->points[k].kv[i], err);
  for (int i = 0; i < n_cli && !rc; i++) rc = gt_sweep_kvs_set(out, cli[i], err);
  if (rc) gt_sweep_kvs_free(out);
  return rc;
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

static gt_rc gt__result_copy(gt_sweep_result *dst, const gt_sweep_result *src, gt_err *err) {
  *dst = *src;
  gt_rc rc = gt__kvs_copy(&dst->overrides, &src->overrides, err);
  if (!rc) rc = gt__kvs_copy(&dst->values, &src->values, err);
  return rc;
}

static cJSON *gt__kvs_to_json(const gt_sweep_kvs *l) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < l->n; i++) {
    size_t kl = gt__key_len(l->kv[i]);
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
  cJSON_AddItemToObject(o, "overrides", gt__kvs_to_json(&r->overrides));
  cJSON_AddItemToObject(o, "values", gt__kvs_to_json(&r->values));
  cJSON_AddStringToObject(o, "status", r->status);
  cJSON_AddStringToObject(o, "reason", r->reason);
  /* NaN prints as null: "not measured" */
  for (int i = 0; i < GT__NMETRICS; i++)
    cJSON_AddNumberToObject(o, gt__metrics[i].name, *(const double *)((const char *)r + gt__metrics[i].off));
  cJSON_AddNumberToObject(o, "steps_done", (double)r->steps_done);
  cJSON_AddStringToObject(o, "log", r->log);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

static gt_rc gt__kvs_from_json(gt_sweep_kvs *l, const cJSON *o, gt_err *err) {
  const cJSON *it;
  cJSON_ArrayForEach(it, o) {
    char buf[GT_STR_PATH + 160];
    gt_rc rc = gt__scalar_kv(it->string, it, "sweep: results.jsonl", buf, sizeof buf, err);
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
  snprintf(r->status, sizeof r->status, "%s", st->valuestring);
  if ((rc = gt__kvs_from_json(&r->overrides, ov, err))) goto done;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "values");
  if (cJSON_IsObject(v) && (rc = gt__kvs_from_json(&r->values, v, err))) goto done;
  const cJSON *c;
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "config")))
    snprintf(r->config, sizeof r->config, "%s", c->valuestring);
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "reason")))
    snprintf(r->reason, sizeof r->reason, "%s", c->valuestring);
  if (cJSON_IsString(c = cJSON_GetObjectItemCaseSensitive(o, "log")))
    snprintf(r->log, sizeof r->log, "%s", c->valuestring);
  if (cJSON_IsNumber(c = cJSON_GetObjectItemCaseSensitive(o, "steps_done"))) r->steps_done = (long long)c->valuedouble;
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
  double *sec = NULL, *tok = NULL, *tfl = NULL;
  double peak = NAN, loss = NAN, eval = NAN;
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
    tok[n] =
        cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s_per_device")) ? it->valuedouble : NAN;
    tfl[n] =
        cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "tflops_per_s_per_device")) ? it->valuedouble : NAN;
    /* a NaN loss is written as nan by printf, which is not JSON: cJSON
     * refuses the line above, so a NaN shows as a missing loss */
    loss = cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "loss")) ? it->valuedouble : NAN;
    if (cJSON_IsNumber(it = cJSON_GetObjectItemCaseSensitive(o, "eval_loss"))) eval = it->valuedouble;
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
    r->median_step_seconds = gt__median(sec + skip, n - skip);
    r->tokens_per_s_per_device = gt__median(tok + skip, n - skip);
    r->tflops_per_s_per_device = gt__median(tfl + skip, n - skip);
    r->final_loss = loss;
    r->final_eval_loss = eval;
    r->measured_peak_bytes = peak;
    r->steps_done = n;
  }
  free(sec);
  free(tok);
  free(tfl);
  return rc;
}

int gt_sweep_log_diverged(const char *log) {
  if (!log) return 0;
  for (const char *p = log; *p; p++) {
    if (!strncmp(p, "non-finite", 10)) return 1;
    if (strncmp(p, "loss", 4)) continue;
    const char *q = p + 4;
    while (*q == ' ' || *q == ':' || *q == '=') q++;
    if (*q == '-' || *q == '+') q++;
    if ((tolower((unsigned char)q[0]) == 'n' && tolower((unsigned char)q[1]) == 'a' &&
         tolower((unsigned char)q[2]) == 'n') ||
        (tolower((unsigned char)q[0]) == 'i' && tolower((unsigned char)q[1]) == 'n' &&
         tolower((unsigned char)q[2]) == 'f'))
      return 1;
  }
  return 0;
}

void gt_sweep_log_last_error(const char *log, char *buf, size_t n) {
  buf[0] = '\0';
  if (!log || !n) return;
  const char *best_err = NULL, *best_any = NULL;
  size_t len_err = 0, len_any = 0;
  for (const char *p = log; *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    /* progress bars redraw with \r: keep what follows the last one */
    const char *cr = NULL;
    for (const char *c = p; c < p + len; c++)
      if (*c == '\r') cr = c;
    const char *s = cr ? cr + 1 : p;
    /* and drop the terminal's erase-line codes */
    while (s < p + len && s[0] == '\033' && s + 1 < p + len && s[1] == '[') {
      s += 2;
      while (s < p + len && !isalpha((unsigned char)*s)) s++;
      if (s < p + len) s++;
    }
    size_t sl = len - (size_t)(s - p);
    while (sl && isspace((unsigned char)s[sl - 1])) sl--;
    if (sl) {
      best_any = s, len_any = sl;
      if (!strncmp(s, "gemtrain", 8) || strstr(s, "error") || strstr(s, "Error")) best_err = s, len_err = sl;
    }
    p = e ? e + 1 : p + len;
  }
  const char *s = best_err ? best_err : best_any;
  size_t sl = best_err ? len_err : len_any;
  if (!s) return;
  if (!strncmp(s, "gemtrain: ", 10)) s += 10, sl -= 10;
  snprintf(buf, n, "%.*s", (int)sl, s);
}

/* ---------- results.md and plot.svg ---------- */

static const char *gt__cell_value(const gt_sweep_result *r, const char *key) {
  const char *v = gt_sweep_kvs_get(&r->values, key);
  if (!v) v = gt_sweep_kvs_get(&r->overrides, key);
  return v ? v : "-";
}

static void gt__md_cell(FILE *f, const char *s, size_t max) {
  fputs(" ", f);
  size_t i = 0;
  for (; s[i] && i < max; i++) {
    if (s[i] == '|')
      fputs("\\|", f);
    else if (s[i] == '\n' || s[i] == '\r')
      fputc(' ', f);
    else
      fputc(s[i], f);
  }
  if (s[i]) fputs("...", f);
  fputs(" |", f);
}

static void gt__metric_header(const char *name, char *buf, size_t n) {
  size_t l = strlen(name);
  if (l > 6 && !strcmp(name + l - 6, "_bytes"))
    snprintf(buf, n, "%.*s MiB", (int)(l - 6), name);
  else
    snprintf(buf, n, "%s", name);
}

static void gt__metric_text(const char *name, double v, char *buf, size_t n) {
  size_t l = strlen(name);
  if (!isfinite(v))
    snprintf(buf, n, "-");
  else if (l > 6 && !strcmp(name + l - 6, "_bytes"))
    snprintf(buf, n, "%.1f", v / 1048576.0);
  else if (!strcmp(name, "wall_seconds"))
    snprintf(buf, n, "%.1f", v);
  else if (!strcmp(name, "tokens_per_s_per_device"))
    snprintf(buf, n, "%.0f", v);
  else
    snprintf(buf, n, "%.4f", v);
}

/* insertion sort: qsort has no context argument in C11, and a sweep's
 * table has tens of rows */
static void gt__sorted_rows(const gt_sweep *s, const gt_sweep_result *res, int *order) {
  for (int i = 0; i < s->n_points; i++) order[i] = i;
  if (!s->sort_by[0]) return;
  for (int i = 1; i < s->n_points; i++) {
    int cur = order[i], j = i;
    double vc = gt_sweep_result_metric(&res[cur], s->sort_by);
    while (j > 0) {
      double vp = gt_sweep_result_metric(&res[order[j - 1]], s->sort_by);
      /* points without the metric sort last, in point order */
      int before;
      if (isnan(vc))
        before = 0;
      else if (isnan(vp))
        before = 1;
      else
        before = s->sort_desc ? vc > vp : vc < vp;
      if (!before) break;
      order[j] = order[j - 1];
      j--;
    }
    order[j] = cur;
  }
}

void gt_sweep_print_table(FILE *f, const gt_sweep *s, const gt_sweep_result *res) {
  fputs("| point |", f);
  for (int k = 0; k < s->n_keys; k++) fprintf(f, " %s |", s->keys[k]);
  fputs(" status |", f);
  for (int m = 0; m < s->n_metrics; m++) {
    char h[128];
    gt__metric_header(s->metrics[m], h, sizeof h);
    fprintf(f, " %s |", h);
  }
  fputs(" note |\n|---:|", f);
  for (int k = 0; k < s->n_keys; k++) fputs("---|", f);
  fputs("---|", f);
  for (int m = 0; m < s->n_metrics; m++) fputs("---:|", f);
  fputs("---|\n", f);
  int *order = malloc(sizeof(int) * (size_t)s->n_points);
  if (!order) return;
  gt__sorted_rows(s, res, order);
  for (int i = 0; i < s->n_points; i++) {
    const gt_sweep_result *r = &res[order[i]];
    fprintf(f, "| %d |", order[i] + 1);
    for (int k = 0; k < s->n_keys; k++) gt__md_cell(f, gt__cell_value(r, s->keys[k]), 200);
    gt__md_cell(f, r->status[0] ? r->status : "pending", 60);
    for (int m = 0; m < s->n_metrics; m++) {
      char t[64];
      gt__metric_text(s->metrics[m], gt_sweep_result_metric(r, s->metrics[m]), t, sizeof t);
      gt__md_cell(f, t, 60);
    }
    gt__md_cell(f, strcmp(r->status, "ok") ? r->reason : "", 160);
    fputc('\n', f);
  }
  free(order);
}

gt_rc gt_sweep_write_table(const gt_sweep *s, const gt_sweep_result *res, const char *path, gt_err *err) {
  /* write then rename: a reader never sees half a table */
  char tmp[GT_STR_PATH + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return gt_err_set(err, GT_ERR_IO, "sweep: cannot write '%s': %s", tmp, strerror(errno));
  int counts[8] = {0};
  static const char *const st[] = {"ok",       "does_not_fit", "config_error", "failed",
                                   "diverged", "timeout",      "crashed",      ""};
  const char *sep = "";
  for (int i = 0; i < s->n_points; i++)
    for (int j = 0; j < 8; j++)
      if (!strncmp(res[i].status, st[j], strlen(st[j]))) {
        counts[j]++;
        break;
      }
  fprintf(f, "# Sweep %s\n\n", s->name);
  fprintf(f, "From `%s`: %d points", s->path, s->n_points);
  if (s->steps) fprintf(f, ", steps=%lld each", s->steps);
  if (s->base_config[0]) fprintf(f, ", config `%s`", s->base_config);
  if (s->n_base) {
    fputs(", base overrides", f);
    for (int i = 0; i < s->n_base; i++) fprintf(f, " `%s`", s->base[i]);
  }
  fputs(".", f);
  if (s->sort_by[0]) fprintf(f, " Sorted by %s (%s).", s->sort_by, s->sort_desc ? "descending" : "ascending");
  fputs("\nStatus:", f);
  for (int j = 0; j < 8; j++)
    if (counts[j]) fprintf(f, "%s %d %s", sep, counts[j], st[j][0] ? st[j] : "pending"), sep = ",";
  fputs(" (a measured metric is the median over the steps after step 0; bytes in MiB).\n\n", f);
  gt_sweep_print_table(f, s, res);
  if (s->plot_x[0]) fprintf(f, "\n![%s against %s](plot.svg)\n", s->plot_y, s->plot_x);
  int ok = !ferror(f);
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path))
    return gt_err_set(err, GT_ERR_IO, "sweep: writing '%s' failed: %s", path, strerror(errno));
  return GT_OK;
}

static int gt__parse_number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return end != s && !*end && !errno && isfinite(*v);
}

gt_rc gt_sweep_write_plot(const gt_sweep *s, const gt_sweep_result *res, const char *path, gt_err *err) {
  if (!s->plot_x[0]) return GT_OK;
  int n = s->n_points;
  /* x: numbers when every point's value is one, else categories in order
   * of first appearance (the axis then counts them: 0, 1, 2, ...) */
  int numeric = 1;
  for (int i = 0; i < n && numeric; i++) {
    double v;
    if (!strcmp(res[i].status, "ok")) numeric = gt__parse_number(gt__cell_value(&res[i], s->plot_x), &v);
  }
  const char **cats = calloc((size_t)n, sizeof(char *));
  double *xs = calloc((size_t)n, sizeof(double));
  int *series_of = calloc((size_t)n, sizeof(int));
  char **labels = calloc((size_t)n, sizeof(char *));
  gt_series *series = calloc((size_t)n, sizeof(gt_series));
  double *sx = calloc((size_t)n, sizeof(double)), *sy = calloc((size_t)n, sizeof(double));
  gt_rc rc = GT_OK;
  if (!cats || !xs || !series_of || !labels || !series || !sx || !sy) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory for the plot");
    goto done;
  }
  int n_cats = 0;
  char xlabel[1024];
  snprintf(xlabel, sizeof xlabel, "%s", s->plot_x);
  for (int i = 0; i < n; i++) {
    const char *v = gt__cell_value(&res[i], s->plot_x);
    if (strcmp(res[i].status, "ok")) continue; /* only ok points are drawn */
    if (numeric) {
      gt__parse_number(v, &xs[i]);
      continue;
    }
    int c = 0;
    while (c < n_cats && strcmp(cats[c], v)) c++;
    if (c == n_cats) {
      cats[n_cats++] = v;
      size_t l = strlen(xlabel);
      snprintf(xlabel + l, sizeof xlabel - l, "%s%d=%s", c ? ", " : " (", c, v);
    }
    xs[i] = c;
  }
  if (!numeric && n_cats) {
    size_t l = strlen(xlabel);
    snprintf(xlabel + l, sizeof xlabel - l, ")");
  }
  /* one series per combination of the other swept keys, ok points only;
   * a key that is the same on every ok point would only lengthen labels */
  int *varies = calloc((size_t)s->n_keys + 1, sizeof(int));
  if (!varies) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory for the plot");
    goto done;
  }
  for (int k = 0; k < s->n_keys; k++) {
    const char *first = NULL;
    for (int i = 0; i < n && !varies[k]; i++) {
      if (strcmp(res[i].status, "ok")) continue;
      const char *v = gt__cell_value(&res[i], s->keys[k]);
      if (!first)
        first = v;
      else
        varies[k] = strcmp(first, v) != 0;
    }
  }
  int n_series = 0;
  for (int i = 0; i < n; i++) {
    char lab[1024] = "";
    size_t j = 0;
    for (int k = 0; k < s->n_keys; k++) {
      if (!strcmp(s->keys[k], s->plot_x) || !varies[k]) continue;
      int w =
          snprintf(lab + j, sizeof lab - j, "%s%s=%s", j ? " " : "", s->keys[k], gt__cell_value(&res[i], s->keys[k]));
      if (w > 0 && (size_t)w < sizeof lab - j) j += (size_t)w;
    }
    if (!lab[0]) snprintf(lab, sizeof lab, "%s", s->plot_y);
    int q = 0;
    while (q < n_series && strcmp(labels[q], lab)) q++;
    if (q == n_series && !(labels[n_series++] = strdup(lab))) {
      free(varies);
      rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory for the plot");
      goto done;
    }
    series_of[i] = q;
  }
  free(varies);
  /* bytes plot as MiB, as in the table */
  double yscale = strstr(s->plot_y, "_bytes") ? 1.0 / 1048576.0 : 1.0;
  int used = 0, n_drawn = 0;
  for (int q = 0; q < n_series; q++) {
    int m = 0;
    double *px = sx + used, *py = sy + used;
    for (int i = 0; i < n; i++) {
      if (series_of[i] != q || strcmp(res[i].status, "ok")) continue;
      double y = gt_sweep_result_metric(&res[i], s->plot_y) * yscale;
      if (!isfinite(y)) continue;
      /* keep each series sorted by x so the line reads left to right */
      int at = m;
      while (at > 0 && px[at - 1] > xs[i]) px[at] = px[at - 1], py[at] = py[at - 1], at--;
      px[at] = xs[i], py[at] = y, m++;
    }
    if (!m) continue; /* a series without an ok point would only clutter the legend */
    series[n_drawn].label = labels[q];
    series[n_drawn].x = px;
    series[n_drawn].y = py;
    series[n_drawn].n = m;
    n_drawn++;
    used += m;
  }
  char title[2 * GT_STR_PATH + 256], ylabel[128];
  snprintf(title, sizeof title, "%s: %s vs %s", s->name, s->plot_y, s->plot_x);
  gt__metric_header(s->plot_y, ylabel, sizeof ylabel);
  gt_chart chart = {title, xlabel, ylabel, n_drawn, series, 0};
  rc = gt_plot_svg(path, 1, &chart, err);
done:
  for (int q = 0; labels && q < n; q++) free(labels[q]);
  free(labels);
  free(cats);
  free(xs);
  free(series_of);
  free(series);
  free(sx);
  free(sy);
  return rc;
}

/* ---------- running ---------- */

typedef struct gt__slot {
  pid_t pid;
  int k;
  double t0;
  int killed;
} gt__slot;

typedef struct gt__runner {
  const gt_sweep *s;
  const gt_sweep_run_opts *o;
  char dir[GT_STR_PATH];
  gt_sweep_kvs *ov;     /* merged overrides per point */
  gt_sweep_result *res; /* per point */
  int *done;            /* per point: 1 recorded (this run or before) */
  FILE *jsonl;
  gt_sweep_kvs defaults; /* the sweep's own defaults, below everything else */
  int n_finished, n_ran_finished, n_to_run;
  double ran_seconds;
  double t_start;
} gt__runner;

static void gt__fmt_eta(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0) {
    snprintf(buf, n, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

static double gt__eta(const gt__runner *r) {
  int remaining = r->n_to_run - r->n_finished;
  if (remaining <= 0) return 0;
  if (!r->n_ran_finished) return NAN;
  int par = r->s->max_parallel < remaining ? r->s->max_parallel : remaining;
  return r->ran_seconds / r->n_ran_finished * remaining / par;
}

static void gt__report(gt__runner *r, int k) {
  const gt_sweep_run_opts *o = r->o;
  FILE *f = o->progress ? o->progress : o->out;
  if (!f) return;
  const gt_sweep_result *res = &r->res[k];
  char eta[32];
  gt__fmt_eta(gt__eta(r), eta, sizeof eta);
  if (o->progress) fputs("\r\033[K", f);
  fprintf(f, "point %d/%d:", k + 1, r->s->n_points);
  for (int i = 0; i < r->s->points[k].n; i++) fprintf(f, " %s", r->s->points[k].kv[i]);
  fprintf(f, " -> %s (%.1f s), ETA %s\n", res->status, isnan(res->wall_seconds) ? 0.0 : res->wall_seconds, eta);
  fflush(f);
}

static void gt__status_line(gt__runner *r, const gt__slot *slots, int n_run) {
  FILE *f = r->o->progress;
  if (!f || !n_run) return;
  char eta[32];
  gt__fmt_eta(gt__eta(r), eta, sizeof eta);
  fprintf(f, "\r\033[K[%d/%d done] running", r->n_finished, r->n_to_run);
  double now = gt_prof_now();
  for (int i = 0; i < n_run; i++) fprintf(f, " point %d (%.0f s)", slots[i].k + 1, now - slots[i].t0);
  fprintf(f, ", ETA %s", eta);
  fflush(f);
}

/* Record a finished point: results.jsonl (appended), the console, and the
 * table and plot (rewritten so an interrupted sweep still has them). */
static void gt__finish(gt__runner *r, int k, int ran) {
  gt_sweep_result *res = &r->res[k];
  if (r->o->dry_run) { /* the table says it all */
    r->done[k] = 1;
    r->n_finished++;
    return;
  }
  char *line = gt_sweep_result_to_json(res);
  if (line && r->jsonl) {
    fprintf(r->jsonl, "%s\n", line);
    fflush(r->jsonl);
  }
  free(line);
  r->done[k] = 1;
  r->n_finished++;
  if (ran) {
    r->n_ran_finished++;
    r->ran_seconds += res->wall_seconds;
  }
  gt__report(r, k);
  char path[GT_STR_PATH + 32];
  gt_err e;
  snprintf(path, sizeof path, "%s/results.md", r->dir);
  gt_sweep_write_table(r->s, r->res, path, &e);
  snprintf(path, sizeof path, "%s/plot.svg", r->dir);
  gt_sweep_write_plot(r->s, r->res, path, &e);
}

static int gt__file_sets_key(const char *path, const char *key) {
  if (!path || !path[0]) return 0;
  char *text = gt__read_file(path, 0);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  int has = j && cJSON_GetObjectItemCaseSensitive(j, key) != NULL;
  cJSON_Delete(j);
  free(text);
  return has;
}

/* The argument list a point runs with: the sweep's defaults, the merged
 * overrides, then the run's name and place. */
static gt_rc gt__point_args(gt__runner *r, int k, gt_sweep_kvs *args, gt_err *err) {
  memset(args, 0, sizeof *args);
  gt_rc rc = gt__kvs_copy(args, &r->defaults, err);
  for (int i = 0; i < r->ov[k].n && !rc; i++) rc = gt_sweep_kvs_set(args, r->ov[k].kv[i], err);
  char buf[GT_STR_PATH + 64];
  snprintf(buf, sizeof buf, "run_name=point-%d", k + 1);
  if (!rc) rc = gt_sweep_kvs_set(args, buf, err);
  snprintf(buf, sizeof buf, "base_output_directory=%s/runs", r->dir);
  if (!rc) rc = gt_sweep_kvs_set(args, buf, err);
  if (rc) gt_sweep_kvs_free(args);
  return rc;
}

/* Check the point in-process (config, then plan); start its process when it
 * fits. Returns the pid, or 0 when the point is already decided. */
static pid_t gt__start(gt__runner *r, int k) {
  gt_sweep_result *res = &r->res[k];
  const gt_sweep *s = r->s;
  gt_err e;
  gt_err_clear(&e);
  snprintf(res->log, sizeof res->log, "runs/point-%d.log", k + 1);
  gt_sweep_kvs args;
  if (gt__point_args(r, k, &args, &e)) {
    snprintf(res->status, sizeof res->status, "config_error");
    snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    return 0;
  }
  gt_config cfg;
  int loaded = gt_config_load(&cfg, NULL, s->base_config[0] ? s->base_config : NULL, args.n,
                              (const char *const *)args.kv, &e) == GT_OK;
  /* each swept key's value as run: the override as written, else the
   * resolved config's (so a point that leaves a key alone shows its value) */
  for (int q = 0; q < s->n_keys; q++) {
    char v[GT_STR_PATH + 64], kv[GT_STR_PATH + 160];
    const char *ov = gt_sweep_kvs_get(&r->ov[k], s->keys[q]);
    const gt_key_spec *spec = gt_config_key(s->keys[q]);
    if (ov)
      snprintf(v, sizeof v, "%s", ov);
    else if (loaded && spec && !gt_config_get_text(&cfg, s->keys[q], v, sizeof v, NULL)) {
      if (spec->type == GT_KEY_FLOAT) gt__num_text(strtod(v, NULL), v, sizeof v);
    } else
      snprintf(v, sizeof v, "-");
    snprintf(kv, sizeof kv, "%s=%s", s->keys[q], v);
    gt_sweep_kvs_set(&res->values, kv, NULL);
  }
  if (!loaded) {
    snprintf(res->status, sizeof res->status, "config_error");
    /* the loader calls every key=value "the command line"; here they are
     * the point's merged overrides */
    const char *cl = strstr(e.msg, "(in the command line)");
    if (cl)
      gt__msg(res->reason, sizeof res->reason, "%.*s(in the point's overrides)%s", (int)(cl - e.msg), e.msg,
              cl + strlen("(in the command line)"));
    else
      snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    gt_sweep_kvs_free(&args);
    return 0;
  }
  gt_plan plan;
  if (gt_plan_compute(&plan, &cfg, &e)) {
    snprintf(res->status, sizeof res->status, "config_error");
    snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    gt_sweep_kvs_free(&args);
    return 0;
  }
  res->planned_peak_bytes = (double)plan.peak_total;
  res->planned_host_bytes = (double)plan.host_peak;
  int64_t need = gt_plan_total_bytes(&plan), limit = gt_plan_memory_limit(&cfg);
  gt_plan_free(&plan);
  if (need > limit) {
    snprintf(res->status, sizeof res->status, "does_not_fit");
    snprintf(res->reason, sizeof res->reason,
             "the plan needs %.1f MiB (%lld x (device %.1f + host pool %.1f)) but the limit is %.1f MiB (%s)",
             (double)need / 1048576.0, cfg.num_devices, res->planned_peak_bytes / 1048576.0,
             res->planned_host_bytes / 1048576.0,
             (double)limit / 1048576.0, cfg.memory_limit_bytes ? "memory_limit_bytes" : "available RAM");
    gt_sweep_kvs_free(&args);
    return 0;
  }
  if (r->o->dry_run) {
    snprintf(res->status, sizeof res->status, "would_run");
    gt_sweep_kvs_free(&args);
    return 0;
  }

  char log[2 * GT_STR_PATH + 64];
  snprintf(log, sizeof log, "%s/%s", r->dir, res->log);
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  char **argv = calloc((size_t)args.n + 4, sizeof(char *));
  if (fd < 0 || !argv) {
    snprintf(res->status, sizeof res->status, "failed");
    gt__msg(res->reason, sizeof res->reason, "cannot write the log '%s': %s", log,
            fd < 0 ? strerror(errno) : "no memory");
    if (fd >= 0) close(fd);
    free(argv);
    gt_sweep_kvs_free(&args);
    return 0;
  }
  int a = 0;
  argv[a++] = (char *)r->o->exe;
  argv[a++] = (char *)"train";
  if (s->base_config[0]) argv[a++] = (char *)s->base_config;
  for (int i = 0; i < args.n; i++) argv[a++] = args.kv[i];
  argv[a] = NULL;
  /* an earlier attempt's metrics must not pass for this one's */
  char old_metrics[2 * GT_STR_PATH + 64];
  snprintf(old_metrics, sizeof old_metrics, "%s/runs/point-%d/metrics.jsonl", r->dir, k + 1);
  unlink(old_metrics);
  if (r->o->out) fflush(r->o->out);
  if (r->o->progress) fflush(r->o->progress);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* the child dies with the sweep (killed, or its terminal gone) rather
     * than train on unobserved (Linux) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    /* its log is its stdout and stderr, nothing on stdin */
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, STDIN_FILENO);
    execv(r->o->exe, argv);
    dprintf(STDERR_FILENO, "gemtrain: sweep: cannot run '%s': %s\n", r->o->exe, strerror(errno));
    _exit(127);
  }
  int fork_errno = errno;
  close(fd);
  free(argv);
  gt_sweep_kvs_free(&args);
  if (pid < 0) {
    snprintf(res->status, sizeof res->status, "failed");
    snprintf(res->reason, sizeof res->reason, "cannot start a process: %s", strerror(fork_errno));
    return 0;
  }
  return pid;
}

/* Classify a point whose process has ended. */
static void gt__reap(gt__runner *r, const gt__slot *sl, int wstatus) {
  gt_sweep_result *res = &r->res[sl->k];
  res->wall_seconds = gt_prof_now() - sl->t0;
  char path[2 * GT_STR_PATH + 64], lasterr[GT_ERR_MSG_MAX];
  snprintf(path, sizeof path, "%s/%s", r->dir, res->log);
  char *log = gt__read_file(path, 65536);
  gt_sweep_log_last_error(log, lasterr, sizeof lasterr);
  snprintf(path, sizeof path, "%s/runs/point-%d/metrics.jsonl", r->dir, sl->k + 1);
  gt_err e;
  int have_metrics = gt_sweep_read_run_metrics(res, path, &e) == GT_OK;
  int exited0 = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (sl->killed) {
    snprintf(res->status, sizeof res->status, "timeout");
    snprintf(res->reason, sizeof res->reason, "killed after %.1f s (point_timeout_s = %g) at step %lld",
             res->wall_seconds, r->s->point_timeout_s, res->steps_done);
  } else if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    snprintf(res->status, sizeof res->status, "crashed (signal %d)", sig);
    gt__msg(res->reason, sizeof res->reason, "killed by signal %d (%s%s) after %lld steps%s%s", sig, strsignal(sig),
            sig == SIGKILL ? ", as the kernel's out-of-memory killer sends" : "", res->steps_done,
            lasterr[0] ? "; last line: " : "", lasterr);
  } else if (exited0 && have_metrics && isfinite(res->final_loss)) {
    snprintf(res->status, sizeof res->status, "ok");
    res->reason[0] = '\0';
  } else if (gt_sweep_log_diverged(log) || (exited0 && have_metrics)) {
    snprintf(res->status, sizeof res->status, "diverged");
    snprintf(res->reason, sizeof res->reason, "%s", lasterr[0] ? lasterr : "non-finite loss");
  } else if (exited0) {
    snprintf(res->status, sizeof res->status, "failed");
    gt__msg(res->reason, sizeof res->reason, "exited 0 but %s", e.msg + (strncmp(e.msg, "sweep: ", 7) ? 0 : 7));
  } else {
    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    /* `gemtrain train` exits 2 exactly when it refuses its configuration */
    if (code == 2)
      snprintf(res->status, sizeof res->status, "config_error");
    else if (log && strstr(log, "the plan needs"))
      snprintf(res->status, sizeof res->status, "does_not_fit");
    else
      snprintf(res->status, sizeof res->status, "failed");
    if (lasterr[0])
      snprintf(res->reason, sizeof res->reason, "%s", lasterr);
    else
      snprintf(res->reason, sizeof res->reason, "exit status %d with an empty log", code);
  }
  if (strcmp(res->status, "ok")) {
    /* only a finished run's timings are comparable; keep how far it got */
    res->median_step_seconds = res->tokens_per_s_per_device = res->tflops_per_s_per_device = NAN;
    res->measured_peak_bytes = NAN;
  }
  free(log);
}

/* Any recorded status is final; --retry-failed keeps only "ok" (a refusal
 * can go away too: a config directory or the free memory changes). */
static int gt__final_status(const char *st, int retry_failed) {
  if (!st[0] || !strcmp(st, "would_run")) return 0;
  return !retry_failed || !strcmp(st, "ok");
}

/* Records of an earlier run of this sweep directory; the last record of a
 * point wins (a retried point appends a new one). */
static gt_rc gt__restore(gt__runner *r, const char *path, int *n_skipped, gt_err *err) {
  FILE *f = fopen(path, "r");
  *n_skipped = 0;
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
      if (r->o->out) fprintf(r->o->out, "sweep: ignoring line %d of %s (%s)\n", lineno, path, e.msg);
      continue;
    }
    for (int k = 0; k < r->s->n_points; k++) {
      if (!gt_sweep_kvs_equal(&rec.overrides, &r->ov[k]) || strcmp(rec.config, r->s->base_config)) continue;
      if (r->done[k]) gt_sweep_result_free(&r->res[k]);
      if (gt__final_status(rec.status, r->o->retry_failed)) {
        if ((rc = gt__result_copy(&r->res[k], &rec, err))) break;
        r->res[k].point = k + 1;
        r->done[k] = 1;
      } else {
        gt_sweep_result_init(&r->res[k]);
        r->done[k] = 0;
      }
    }
    gt_sweep_result_free(&rec);
    if (rc) break;
  }
  free(line);
  fclose(f);
  for (int k = 0; k < r->s->n_points; k++) *n_skipped += r->done[k];
  return rc;
}

gt_rc gt_sweep_run(const gt_sweep *s, const gt_sweep_run_opts *o, gt_sweep_summary *sum, gt_err *err) {
  memset(sum, 0, sizeof *sum);
  gt__runner r;
  memset(&r, 0, sizeof r);
  r.s = s;
  r.o = o;
  r.t_start = gt_prof_now();
  for (int i = 0; i < o->n_cli; i++)
    if (!strchr(o->cli[i], '=') || gt__reserved_key(o->cli[i], gt__key_len(o->cli[i]), 0))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: command-line argument '%s' %s", o->cli[i],
                        strchr(o->cli[i], '=') ? "is set by the sweep for each point" : "is not key=value");

  /* the base alone must be valid: a typo on the command line would
   * otherwise fail every point, one process at a time */
  gt_sweep_kvs base = {0, 0, NULL};
  gt_rc rc = GT_OK;
  for (int i = 0; i < s->n_base && !rc; i++) rc = gt_sweep_kvs_set(&base, s->base[i], err);
  if (!rc && s->steps) {
    char buf[64];
    snprintf(buf, sizeof buf, "steps=%lld", s->steps);
    rc = gt_sweep_kvs_set(&base, buf, err);
  }
  for (int i = 0; i < o->n_cli && !rc; i++) rc = gt_sweep_kvs_set(&base, o->cli[i], err);
  if (rc) {
    gt_sweep_kvs_free(&base);
    return rc;
  }
  gt_config cfg;
  gt_err e;
  if (gt_config_load(&cfg, NULL, s->base_config[0] ? s->base_config : NULL, base.n, (const char *const *)base.kv, &e)) {
    gt_sweep_kvs_free(&base);
    return gt_err_set(err, GT_ERR_CONFIG,
                      "sweep: '%s': the base configuration (before any point's keys) is refused: %s", s->path, e.msg);
  }
  gt_sweep_kvs_free(&base);
  int w = s->output_directory[0] ? snprintf(r.dir, sizeof r.dir, "%s", s->output_directory)
                                 : snprintf(r.dir, sizeof r.dir, "%s/%s", cfg.base_output_directory, s->name);
  if (w < 0 || (size_t)w >= sizeof r.dir)
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: the output directory path is too long");
  snprintf(sum->dir, sizeof sum->dir, "%s", r.dir);
  char path[GT_STR_PATH + 64];
  snprintf(path, sizeof path, "%s/runs", r.dir);
  if (!o->dry_run && (rc = gt_mkdirs(path, "sweep", err))) return rc;

  /* the sweep's own defaults, under every layer the user writes: a closing
   * text sample is not what a sweep measures, and parallel points share
   * the cores instead of each taking all of them */
  if (!gt__file_sets_key(s->base_config, "sample_tokens")) gt_sweep_kvs_set(&r.defaults, "sample_tokens=0", NULL);
  if (s->max_parallel > 1 && !gt__file_sets_key(s->base_config, "threads_per_device")) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char buf[64];
    snprintf(buf, sizeof buf, "threads_per_device=%ld", cores / s->max_parallel > 0 ? cores / s->max_parallel : 1);
    gt_sweep_kvs_set(&r.defaults, buf, NULL);
  }

  int n = s->n_points;
  r.ov = calloc((size_t)n, sizeof *r.ov);
  r.res = calloc((size_t)n, sizeof *r.res);
  r.done = calloc((size_t)n, sizeof *r.done);
  gt__slot *slots = calloc((size_t)s->max_parallel, sizeof *slots);
  int next = 0, n_run = 0, n_skipped = 0, fd = -1;
  double last_draw = 0;
  if (!r.ov || !r.res || !r.done || !slots) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    goto out;
  }
  for (int k = 0; k < n; k++) {
    gt_sweep_result_init(&r.res[k]);
    r.res[k].point = k + 1;
    if ((rc = gt_sweep_point_overrides(s, k, o->n_cli, o->cli, &r.ov[k], err))) goto out;
    /* where the sweep lives is not what a point is: the same sweep moved
     * or re-aimed at another directory still matches its records */
    gt__kvs_remove(&r.ov[k], "base_output_directory");
  }
  snprintf(path, sizeof path, "%s/results.jsonl", r.dir);
  if ((rc = gt__restore(&r, path, &n_skipped, err))) goto out;
  fd = o->dry_run ? -2 : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd == -1 || (fd >= 0 && !(r.jsonl = fdopen(fd, "a")))) {
    rc = gt_err_set(err, GT_ERR_IO, "sweep: cannot write '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    goto out;
  }
  r.n_to_run = n - n_skipped;
  sum->n_points = n;
  sum->n_skipped = n_skipped;
  if (o->out) {
    fprintf(o->out, "sweep %s: %d points, %d to run, %d skipped (already in %s), max_parallel %d; directory %s\n",
            s->name, n, r.n_to_run, n_skipped, path, s->max_parallel, r.dir);
    fflush(o->out);
  }

  for (;;) {
    while (n_run < s->max_parallel && next < n) {
      int k = next++;
      if (r.done[k]) continue;
      gt_sweep_result_free(&r.res[k]);
      gt_sweep_result_init(&r.res[k]);
      r.res[k].point = k + 1;
      snprintf(r.res[k].config, sizeof r.res[k].config, "%s", s->base_config);
      if ((rc = gt__kvs_copy(&r.res[k].overrides, &r.ov[k], err))) goto out;
      double t0 = gt_prof_now();
      pid_t pid = gt__start(&r, k);
      if (pid > 0) {
        slots[n_run++] = (gt__slot){pid, k, t0, 0};
        sum->n_ran++;
      } else {
        r.res[k].wall_seconds = gt_prof_now() - t0;
        gt__finish(&r, k, 0);
      }
    }
    if (!n_run && next >= n) break;
    double now = gt_prof_now();
    for (int i = 0; i < n_run; i++) {
      int ws = 0;
      pid_t got = waitpid(slots[i].pid, &ws, WNOHANG);
      if (got == slots[i].pid || (got < 0 && errno != EINTR)) {
        if (got < 0) ws = 0x7f00; /* lost the child: classify as an exit with 127 */
        gt__reap(&r, &slots[i], ws);
        gt__finish(&r, slots[i].k, 1);
        slots[i--] = slots[--n_run];
        continue;
      }
      if (!slots[i].killed && now - slots[i].t0 > s->point_timeout_s) {
        /* SIGKILL, not SIGTERM: a stuck step must not be able to ignore it */
        kill(slots[i].pid, SIGKILL);
        slots[i].killed = 1;
      }
    }
    if (o->progress && now - last_draw > 0.5) {
      gt__status_line(&r, slots, n_run);
      last_draw = now;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (o->progress) fputs("\r\033[K", o->progress), fflush(o->progress);

  for (int k = 0; k < n; k++) sum->n_ok += !strcmp(r.res[k].status, "ok");
  if (o->dry_run) {
    if (o->out) {
      int would = 0;
      for (int k = 0; k < n; k++) would += !strcmp(r.res[k].status, "would_run");
      fprintf(o->out, "sweep %s (dry run): %d of %d points would run, %d skipped; nothing written\n", s->name, would, n,
              n_skipped);
      gt_sweep_print_table(o->out, s, r.res);
    }
    goto out;
  }
  snprintf(path, sizeof path, "%s/results.md", r.dir);
  if ((rc = gt_sweep_write_table(s, r.res, path, err))) goto out;
  snprintf(path, sizeof path, "%s/plot.svg", r.dir);
  if ((rc = gt_sweep_write_plot(s, r.res, path, err))) goto out;
  if (o->out) {
    fprintf(o->out, "sweep %s: ran %d, skipped %d; %d of %d points ok; %.1f s\n", s->name, sum->n_ran, n_skipped,
            sum->n_ok, n, gt_prof_now() - r.t_start);
    fprintf(o->out, "wrote %s/results.jsonl, results.md%s\n", r.dir, s->plot_x[0] ? " and plot.svg" : "");
    gt_sweep_print_table(o->out, s, r.res);
    fflush(o->out);
  }
out:
  /* on an error while points run, stop them: no orphan keeps writing */
  for (int i = 0; i < n_run; i++) {
    kill(slots[i].pid, SIGKILL);
    waitpid(slots[i].pid, NULL, 0);
  }
  if (r.jsonl) fclose(r.jsonl);
  for (int k = 0; r.ov && k < n; k++) gt_sweep_kvs_free(&r.ov[k]);
  for (int k = 0; r.res && k < n; k++) gt_sweep_result_free(&r.res[k]);
  free(r.ov);
  free(r.res);
  free(r.done);
  free(slots);
  gt_sweep_kvs_free(&r.defaults);
  return rc;
}
