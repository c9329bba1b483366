/* results.md: a heading that counts the statuses, then one row per point
 * (its swept values, status, metrics and, when it did not finish ok, why),
 * sorted as the sweep asks. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sweep/sweep.h"

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

static void gt__metric_text(const char *name, double v, char *buf, size_t n) {
  size_t l = strlen(name);
  if (!isfinite(v))
    snprintf(buf, n, "-");
  else if (l > 6 && !strcmp(name + l - 6, "_bytes"))
    snprintf(buf, n, "%.1f", v / 1048576.0);
  else if (!strcmp(name, "wall_seconds"))
    snprintf(buf, n, "%.1f", v);
  else if (!strcmp(name, "tokens_per_s_per_device") || (l > 2 && !strcmp(name + l - 2, "/n")))
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
    gt_sweep_metric_header(s->metrics[m], h, sizeof h);
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
    for (int k = 0; k < s->n_keys; k++) gt__md_cell(f, gt_sweep_result_value(r, s->keys[k]), 200);
    char st[64];
    gt_sweep_result_status_text(r, st, sizeof st);
    gt__md_cell(f, st[0] ? st : "pending", 60);
    for (int m = 0; m < s->n_metrics; m++) {
      char t[64];
      gt__metric_text(s->metrics[m], gt_sweep_result_metric(r, s->metrics[m]), t, sizeof t);
      gt__md_cell(f, t, 60);
    }
    gt__md_cell(f, r->status != GT_SWEEP_OK ? r->reason : "", 160);
    fputc('\n', f);
  }
  free(order);
}

/* Which steps the timings are the median over (results.c: step 0 is left
 * out of a run of more than 2 steps), as the rows have it, then the units. */
static void gt__timing_note(FILE *f, const gt_sweep *s, const gt_sweep_result *res) {
  int after0 = 0, all = 0;
  for (int i = 0; i < s->n_points; i++)
    if (isfinite(res[i].median_step_seconds)) {
      if (res[i].steps_done > 2)
        after0++;
      else
        all++;
    }
  fputs(" (median_step_seconds is the median over ", f);
  if (!all) {
    fputs("the steps after step 0", f);
  } else if (!after0) {
    fputs("all the steps, step 0 included (no run had more than 2)", f);
  } else {
    fputs("the steps after step 0, or all of them for point", f);
    const char *sep = all > 1 ? "s " : " ";
    for (int i = 0; i < s->n_points; i++)
      if (isfinite(res[i].median_step_seconds) && res[i].steps_done <= 2) fprintf(f, "%s%d", sep, i + 1), sep = ", ";
    fputs(" (at most 2 steps)", f);
  }
  fputs("; tokens/s and TFLOP/s are a step's tokens and TFLOP over it; bytes in MiB).\n\n", f);
}

gt_rc gt_sweep_write_table(const gt_sweep *s, const gt_sweep_result *res, const char *path, gt_err *err) {
  /* write then rename: a reader never sees half a table */
  char tmp[GT_STR_PATH + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return gt_err_set(err, GT_ERR_IO, "sweep: cannot write '%s': %s", tmp, strerror(errno));
  /* the heading counts finished statuses in enum order, pending last */
  int counts[GT_SWEEP_NUM_STATUSES] = {0};
  const char *sep = "";
  for (int i = 0; i < s->n_points; i++)
    if (res[i].status >= 0 && res[i].status < GT_SWEEP_NUM_STATUSES) counts[res[i].status]++;
  fprintf(f, "# Sweep %s\n\n", s->name);
  fprintf(f, "From `%s`: %d point%s", s->path, s->n_points, s->n_points == 1 ? "" : "s");
  if (s->steps) fprintf(f, ", steps=%lld each", s->steps);
  if (s->base_config[0]) fprintf(f, ", config `%s`", s->base_config);
  if (s->n_base) {
    fputs(", base overrides", f);
    for (int i = 0; i < s->n_base; i++) fprintf(f, " `%s`", s->base[i]);
  }
  fputs(".", f);
  if (s->sort_by[0]) fprintf(f, " Sorted by %s (%s).", s->sort_by, s->sort_desc ? "descending" : "ascending");
  fputs("\nStatus:", f);
  for (int j = 1; j <= GT_SWEEP_NUM_STATUSES; j++) {
    int st = j % GT_SWEEP_NUM_STATUSES; /* GT_SWEEP_PENDING (0) last */
    if (counts[st])
      fprintf(f, "%s %d %s", sep, counts[st], st ? gt_sweep_status_name((gt_sweep_status)st) : "pending"), sep = ",";
  }
  gt__timing_note(f, s, res);
  gt_sweep_print_table(f, s, res);
  if (s->plot_x[0]) fprintf(f, "\n![%s against %s](plot.svg)\n", s->plot_y, s->plot_x);
  int ok = !ferror(f);
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path))
    return gt_err_set(err, GT_ERR_IO, "sweep: writing '%s' failed: %s", path, strerror(errno));
  return GT_OK;
}
