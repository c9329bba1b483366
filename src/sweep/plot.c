/* plot.svg: plot.y against plot.x over the points that finished ok, one
 * series per combination of the other swept keys; x on a log axis for a
 * learning-rate-like key. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/metrics_io.h"
#include "sweep/sweep.h"

static int gt__parse_number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return end != s && !*end && !errno && isfinite(*v);
}

/* A key named for a rate, a decay or an epsilon: it ends in one of these
 * as whole '_'-separated words (adam_eps, diloco_outer_lr,
 * normalization_layer_epsilon), so warmup_steps (eps inside a word) and
 * learning_rate_schedule_steps (a step count) are not. */
static int gt__rate_like(const char *key) {
  static const char *const ends[] = {"learning_rate", "lr", "weight_decay", "eps", "epsilon", "eps_root"};
  size_t kl = strlen(key);
  for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
    size_t el = strlen(ends[i]);
    if (kl >= el && !strcmp(key + kl - el, ends[i]) && (kl == el || key[kl - el - 1] == '_')) return 1;
  }
  return 0;
}

/* A learning-rate-like key gets a log axis: a rate, a decay or an epsilon
 * by its name, or any positive values that span two decades or more (a grid
 * of 1e-4, 1e-3, 1e-2 on a linear axis puts two of three points at 0). */
static int gt__log_axis(const char *key, const gt_sweep_result *res, int n, const double *xs) {
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (res[i].status != GT_SWEEP_OK) continue;
    if (!(xs[i] > 0)) return 0;
    lo = fmin(lo, xs[i]), hi = fmax(hi, xs[i]);
  }
  if (!isfinite(lo) || hi <= lo) return 0;
  return gt__rate_like(key) || hi / lo >= 100;
}

gt_rc gt_sweep_write_plot(const gt_sweep *s, const gt_sweep_result *res, const char *path, gt_err *err) {
  if (!s->plot_x[0]) return GT_OK;
  int n = s->n_points;
  /* x: numbers when every point's value is one, else categories in order
   * of first appearance (the axis then counts them: 0, 1, 2, ...) */
  int numeric = 1;
  for (int i = 0; i < n && numeric; i++) {
    double v;
    if (res[i].status == GT_SWEEP_OK) numeric = gt__parse_number(gt_sweep_result_value(&res[i], s->plot_x), &v);
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
    const char *v = gt_sweep_result_value(&res[i], s->plot_x);
    if (res[i].status != GT_SWEEP_OK) continue; /* only ok points are drawn */
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
      if (res[i].status != GT_SWEEP_OK) continue;
      const char *v = gt_sweep_result_value(&res[i], s->keys[k]);
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
      int w = snprintf(lab + j, sizeof lab - j, "%s%s=%s", j ? " " : "", s->keys[k],
                       gt_sweep_result_value(&res[i], s->keys[k]));
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
      if (series_of[i] != q || res[i].status != GT_SWEEP_OK) continue;
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
  gt_sweep_metric_header(s->plot_y, ylabel, sizeof ylabel);
  gt_chart chart = {title, xlabel, ylabel, n_drawn, series, 0, numeric && gt__log_axis(s->plot_x, res, n, xs),
                    0, 0, 0, 0, NULL, NULL};
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
