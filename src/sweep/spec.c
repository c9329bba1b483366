/* Parsing a sweep file into points: the grid (the file's key order, last key
 * fastest), then a union of grids without duplicates, then explicit points,
 * and each point's merged overrides. Every refusal is one line naming the
 * file and the key. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sweep/json.h"
#include "sweep/sweep.h"

/* ", did you mean 'x'" for the closest of names (NULL-terminated), or "". */
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

static const char *const gt__top_keys[] = {
    "base", "grid",         "grids",           "points",           "steps",       "metrics", "sort_by", "sort_desc",
    "plot", "max_parallel", "point_timeout_s", "output_directory", "description", NULL};

/* The sweep names each point's run and puts it under its own directory; a
 * point setting these would make points overwrite each other. The base and
 * the command line may set base_output_directory: it places the sweep's
 * directory (<base_output_directory>/<sweep name>). */
int gt_sweep_reserved_key(const char *key, size_t klen, int point) {
  return (klen == 8 && !strncmp(key, "run_name", 8)) ||
         (point && klen == 21 && !strncmp(key, "base_output_directory", 21));
}

static gt_rc gt__not_metric(const char *path, const char *what, const char *got, gt_err *err) {
  const char *names[64];
  char list[512] = "", hint[128];
  size_t j = 0;
  int n = gt_sweep_num_metrics() < 63 ? gt_sweep_num_metrics() : 63;
  for (int i = 0; i < n; i++) {
    names[i] = gt_sweep_metric_name(i);
    int w = snprintf(list + j, sizeof list - j, "%s%s", i ? ", " : "", names[i]);
    if (w > 0 && (size_t)w < sizeof list - j) j += (size_t)w;
  }
  names[n] = NULL;
  gt__did_you_mean(got, names, hint, sizeof hint);
  return gt_err_set(err, GT_ERR_CONFIG,
                    "sweep: '%s': %s = '%s' is not a metric%s expected one of %s, or tasks/<task>/<field> (field: "
                    GT_SWEEP_TASK_FIELDS ")",
                    path, what, got, hint[0] ? hint : ";", list);
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
  if (s->n_points >= GT_SWEEP_MAX_POINTS) {
    gt_sweep_kvs_free(kv);
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s' defines more than %d points", s->path, GT_SWEEP_MAX_POINTS);
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
/* A key given twice in one object is refused, as in a config file (cJSON
 * keeps both and the loops would take one silently). */
static gt_rc gt__once(const gt_sweep *s, const cJSON *obj, const char *where, gt_err *err) {
  for (const cJSON *it = obj->child; it; it = it->next)
    for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
      if (!strcmp(prev->string, it->string))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s: key '%s' appears twice; set each key once", s->path,
                          where, it->string);
  return GT_OK;
}

static gt_rc gt__expand_grid(gt_sweep *s, const cJSON *g, const char *where, gt_err *err) {
  if (!cJSON_IsObject(g))
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s must be an object of key: [values], found %s", s->path,
                      where, gt__sweep_json_kind(g));
  gt_rc orc = gt__once(s, g, where, err);
  if (orc) return orc;
  int m = cJSON_GetArraySize(g);
  if (m == 0)
    return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s is empty; expected key: [values, ...]", s->path, where);
  const cJSON *lists[64];
  if (m > 64) return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s has more than 64 keys", s->path, where);
  long long total = 1;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, g) {
    if (gt_sweep_reserved_key(it->string, strlen(it->string), 1))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s sets '%s', which the sweep sets for each point", s->path,
                        where, it->string);
    if (!cJSON_IsArray(it))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s key '%s' must be a list of values, found %s", s->path,
                        where, it->string, gt__sweep_json_kind(it));
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
                          where, it->string, j, gt__sweep_json_kind(v));
      j++;
    }
    lists[i++] = it;
    total *= len;
    if (total > GT_SWEEP_MAX_POINTS)
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s has more than %d points", s->path, where,
                        GT_SWEEP_MAX_POINTS);
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
      gt_rc rc =
          gt__sweep_scalar_kv(lists[a]->string, cJSON_GetArrayItem(lists[a], pick[a]), s->path, buf, sizeof buf, err);
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
                      s->path, gt__sweep_json_kind(pts));
  int i = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, pts) {
    char where[GT_STR_PATH + 64];
    snprintf(where, sizeof where, "sweep: '%s': points[%d]", s->path, i);
    if (!cJSON_IsObject(p))
      return gt_err_set(err, GT_ERR_CONFIG, "%s must be an object {key: value}, found %s", where,
                        gt__sweep_json_kind(p));
    char at[32];
    snprintf(at, sizeof at, "points[%d]", i);
    gt_rc orc = gt__once(s, p, at, err);
    if (orc) return orc;
    gt_sweep_kvs kv = {0, 0, NULL};
    const cJSON *it;
    cJSON_ArrayForEach(it, p) {
      char buf[GT_STR_PATH + 160];
      gt_rc rc = GT_OK;
      if (gt_sweep_reserved_key(it->string, strlen(it->string), 1))
        rc = gt_err_set(err, GT_ERR_CONFIG, "%s sets '%s', which the sweep sets for each point", where, it->string);
      else if (cJSON_IsArray(it))
        rc = gt_err_set(err, GT_ERR_CONFIG, "%s key '%s' is a list; a point takes one value (lists belong in a grid)",
                        where, it->string);
      if (!rc) rc = gt__sweep_scalar_kv(it->string, it, where, buf, sizeof buf, err);
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
                      gt__sweep_json_kind(b));
  gt_rc orc = gt__once(s, b, "base", err);
  if (orc) return orc;
  const cJSON *it;
  cJSON_ArrayForEach(it, b) {
    if (!strcmp(it->string, "config")) {
      size_t n = cJSON_IsString(it) ? strlen(it->valuestring) : 0;
      if (n <= 5 || strcmp(it->valuestring + n - 5, ".json"))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: '%s': base.config must be the path of a .json config file, found %s", s->path,
                          cJSON_IsString(it) ? it->valuestring : gt__sweep_json_kind(it));
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
                          s->path, gt__sweep_json_kind(it));
      if ((orc = gt__once(s, it, "base.overrides", err))) return orc;
      gt_sweep_kvs kv = {s->n_base, s->n_base, s->base};
      const cJSON *o;
      char where[GT_STR_PATH + 32];
      snprintf(where, sizeof where, "sweep: '%s': base.overrides", s->path);
      cJSON_ArrayForEach(o, it) {
        char buf[GT_STR_PATH + 160];
        gt_rc rc = GT_OK;
        if (gt_sweep_reserved_key(o->string, strlen(o->string), 0))
          rc = gt_err_set(err, GT_ERR_CONFIG, "%s sets '%s', which the sweep sets for each point", where, o->string);
        if (!rc) rc = gt__sweep_scalar_kv(o->string, o, where, buf, sizeof buf, err);
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
                      s->path, gt__sweep_json_kind(p));
  const cJSON *it;
  cJSON_ArrayForEach(it, p) {
    int isx = !strcmp(it->string, "x"), isy = !strcmp(it->string, "y");
    if (!isx && !isy)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "sweep: '%s': unknown key 'plot.%s'; expected x (a swept key), y (a metric)", s->path,
                        it->string);
    if (!cJSON_IsString(it) || !it->valuestring[0])
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': plot.%s must be a non-empty string, found %s", s->path,
                        it->string, gt__sweep_json_kind(it));
    if (isx)
      snprintf(s->plot_x, sizeof s->plot_x, "%s", it->valuestring);
    else
      snprintf(s->plot_y, sizeof s->plot_y, "%s", it->valuestring);
  }
  return GT_OK;
}

static gt_rc gt__parse_obj(gt_sweep *s, const cJSON *j, gt_err *err) {
  /* (a second "metrics" list once wrote past the first one's array) */
  gt_rc orc = gt__once(s, j, "the sweep file", err);
  if (orc) return orc;
  const cJSON *it;
  /* the points are numbered grid, grids, then points, whatever order the
   * file writes them in: a point's number (and its run directory) must not
   * change when the file is reformatted */
  const cJSON *grid = NULL, *grids = NULL, *points = NULL;
  cJSON_ArrayForEach(it, j) {
    const char *k = it->string;
    gt_rc rc = GT_OK;
    if (!strcmp(k, "base")) {
      rc = gt__parse_base(s, it, err);
    } else if (!strcmp(k, "grid")) {
      grid = it;
    } else if (!strcmp(k, "grids")) {
      if (!cJSON_IsArray(it))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: '%s': grids must be a list of grids [{key: [values]}, ...], found %s", s->path,
                          gt__sweep_json_kind(it));
      grids = it;
    } else if (!strcmp(k, "points")) {
      points = it;
    } else if (!strcmp(k, "steps")) {
      if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble != floor(it->valuedouble) ||
          it->valuedouble > 1e12)
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': steps must be a whole number >= 1, found %s", s->path,
                          cJSON_IsNumber(it) ? "a number out of range" : gt__sweep_json_kind(it));
      s->steps = (long long)it->valuedouble;
    } else if (!strcmp(k, "metrics")) {
      if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) == 0)
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': metrics must be a non-empty list of metric names, found %s",
                          s->path, cJSON_IsArray(it) ? "an empty list" : gt__sweep_json_kind(it));
      const cJSON *m;
      int i = 0;
      s->metrics = calloc((size_t)cJSON_GetArraySize(it), sizeof(char *));
      if (!s->metrics) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      cJSON_ArrayForEach(m, it) {
        char what[32];
        snprintf(what, sizeof what, "metrics[%d]", i++);
        if (!cJSON_IsString(m))
          return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': %s must be a metric name, found %s", s->path, what,
                            gt__sweep_json_kind(m));
        if (!gt_sweep_is_metric(m->valuestring)) return gt__not_metric(s->path, what, m->valuestring, err);
        if (!(s->metrics[s->n_metrics++] = strdup(m->valuestring)))
          return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      }
    } else if (!strcmp(k, "sort_by")) {
      if (!cJSON_IsString(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': sort_by must be a metric name, found %s", s->path,
                          gt__sweep_json_kind(it));
      if (!gt_sweep_is_metric(it->valuestring)) return gt__not_metric(s->path, "sort_by", it->valuestring, err);
      snprintf(s->sort_by, sizeof s->sort_by, "%s", it->valuestring);
    } else if (!strcmp(k, "sort_desc")) {
      if (!cJSON_IsBool(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': sort_desc must be true or false, found %s", s->path,
                          gt__sweep_json_kind(it));
      s->sort_desc = cJSON_IsTrue(it);
    } else if (!strcmp(k, "plot")) {
      rc = gt__parse_plot(s, it, err);
    } else if (!strcmp(k, "max_parallel")) {
      if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > 256 ||
          it->valuedouble != floor(it->valuedouble))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': max_parallel must be a whole number in 1 .. 256, found %s",
                          s->path, cJSON_IsNumber(it) ? "a number out of range" : gt__sweep_json_kind(it));
      s->max_parallel = (int)it->valuedouble;
    } else if (!strcmp(k, "point_timeout_s")) {
      if (!cJSON_IsNumber(it) || !(it->valuedouble > 0))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': point_timeout_s must be a number of seconds > 0, found %s",
                          s->path, cJSON_IsNumber(it) ? "a number <= 0" : gt__sweep_json_kind(it));
      s->point_timeout_s = it->valuedouble;
    } else if (!strcmp(k, "output_directory")) {
      if (!cJSON_IsString(it) || !it->valuestring[0])
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': output_directory must be a non-empty path, found %s",
                          s->path, gt__sweep_json_kind(it));
      snprintf(s->output_directory, sizeof s->output_directory, "%s", it->valuestring);
    } else if (!strcmp(k, "description")) {
      if (!cJSON_IsString(it))
        return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s': description must be a string, found %s", s->path,
                          gt__sweep_json_kind(it));
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
  gt_rc rc = grid ? gt__expand_grid(s, grid, "grid", err) : GT_OK;
  int g = 0;
  const cJSON *gr;
  if (grids) cJSON_ArrayForEach(gr, grids) {
      char where[32];
      snprintf(where, sizeof where, "grids[%d]", g++);
      if (!rc) rc = gt__expand_grid(s, gr, where, err);
    }
  if (!rc && points) rc = gt__parse_points(s, points, err);
  if (rc) return rc;
  if (s->n_points == 0)
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
      size_t kl = gt_sweep_key_len(kv);
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
                    gt__sweep_json_kind(j));
  else
    rc = gt__parse_obj(s, j, err);
  cJSON_Delete(j);
  if (rc) gt_sweep_free(s);
  return rc;
}

gt_rc gt_sweep_load(gt_sweep *s, const char *path, gt_err *err) {
  memset(s, 0, sizeof *s);
  char *text;
  size_t n;
  gt_rc rc = gt_read_file(path, "sweep: file", &text, &n, err);
  if (rc) return rc;
  rc = gt_sweep_parse(s, text, path, err);
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
