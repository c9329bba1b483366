#include "train/metrics_io.h"

#include <errno.h>
#include <math.h>
#include <string.h>

void gt_metrics_format_line(const gt_step_metrics *s, char *buf, size_t n) {
  int w = snprintf(buf, n,
           "completed step: %lld, seconds: %.3f, TFLOP/s/device: %.3f, Tokens/s/device: %.3f, "
           "total_weights: %lld, loss: %.3f, lm_loss: %.3f, perplexity: %.3f",
           (long long)s->step, s->seconds, s->tflops_per_s_per_device, s->tokens_per_s_per_device,
           (long long)s->total_weights, s->loss, s->lm_loss, s->perplexity);
  /* metric_logger.py appends the MoE term when num_experts > 1 */
  if (s->has_moe && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", moe_lb_loss: %.6f", s->moe_lb_loss);
  if (s->has_z_loss && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", z_loss: %.6f", s->z_loss);
  /* TRL's names, short */
  if (s->has_pref && w >= 0 && (size_t)w < n)
    w += snprintf(buf + w, n - (size_t)w, ", rewards/chosen: %.3f, rewards/rejected: %.3f, rewards/accuracies: %.3f, "
                  "rewards/margins: %.3f", s->rewards_chosen, s->rewards_rejected, s->rewards_accuracies,
                  s->rewards_margins);
  if (s->has_pref && s->pref_orpo && w >= 0 && (size_t)w < n)
    w += snprintf(buf + w, n - (size_t)w, ", nll_loss: %.3f, log_odds_ratio: %.3f", s->pref_nll_loss,
                  s->log_odds_ratio);
  if (s->no_tokens && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", skipped: no tokens in the loss");
  else if (s->spike_skipped && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ", skipped: spike");
}

/* JSON has no NaN or infinity: a skipped step's values are null */
static void gt__jnum(FILE *f, const char *key, double v) {
  if (isfinite(v))
    fprintf(f, ", \"%s\": %.9g", key, v);
  else
    fprintf(f, ", \"%s\": null", key);
}

/* a JSON string (a task's name comes from a file name) */
static void gt__jstr(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

int gt_metrics_write_jsonl(FILE *f, const gt_step_metrics *s, const gt_metrics_opts *o) {
  static const gt_metrics_opts none;
  if (!o) o = &none;
  /* %.9g keeps float32 values exact so two runs compare bit for bit */
  fprintf(f, "{\"step\": %lld", (long long)s->step);
  gt__jnum(f, "loss", s->loss);
  gt__jnum(f, "lm_loss", s->lm_loss);
  gt__jnum(f, "perplexity", s->perplexity);
  if (s->has_moe) gt__jnum(f, "moe_lb_loss", s->moe_lb_loss);
  if (s->has_z_loss) gt__jnum(f, "z_loss", s->z_loss);
  if (s->has_pref) { /* TRL's names */
    gt__jnum(f, "rewards/chosen", s->rewards_chosen);
    gt__jnum(f, "rewards/rejected", s->rewards_rejected);
    gt__jnum(f, "rewards/accuracies", s->rewards_accuracies);
    gt__jnum(f, "rewards/margins", s->rewards_margins);
    gt__jnum(f, "logps/chosen", s->logps_chosen);
    gt__jnum(f, "logps/rejected", s->logps_rejected);
    if (s->pref_orpo) {
      gt__jnum(f, "nll_loss", s->pref_nll_loss);
      gt__jnum(f, "log_odds_ratio", s->log_odds_ratio);
    }
    fprintf(f, ", \"pairs\": %lld", (long long)s->pref_pairs);
  }
  fprintf(f,
          ", \"seconds\": %.6f, \"tokens_per_s_per_device\": %.3f, \"tflops_per_s_per_device\": %.6f, "
          "\"total_weights\": %lld, \"learning_rate\": %.9g",
          s->seconds, s->tokens_per_s_per_device, s->tflops_per_s_per_device, (long long)s->total_weights,
          s->learning_rate);
  /* the step's work per device (MaxText's perf/per_device_tflops and
   * perf/per_device_tokens) and the tokens of every step so far */
  fprintf(f, ", \"tflops_per_device\": %.9g, \"tokens_per_device\": %.9g, \"tokens_seen_per_device\": %lld",
          s->tflops_per_s_per_device * s->seconds, s->tokens_per_s_per_device * s->seconds,
          (long long)s->tokens_seen_per_device);
  gt__jnum(f, "grad_norm", s->grad_norm);
  if (s->param_norm > 0) gt__jnum(f, "param_norm", s->param_norm);
  fprintf(f, ", \"peak_memory_bytes\": %lld", (long long)s->peak_memory_bytes);
  fprintf(f, ", \"comm_seconds\": %.6f, \"comm_bytes\": %lld", s->comm_seconds, (long long)s->comm_bytes);
  if (s->ranks > 1) fprintf(f, ", \"comm_bytes_dcn\": %lld", (long long)s->comm_bytes_dcn);
  if (s->skipped) fprintf(f, ", \"skipped\": true");
  if (s->no_tokens) fprintf(f, ", \"no_tokens\": true");
  if (s->spike_skipped) fprintf(f, ", \"spike_skipped\": true");
  if (s->diloco_replicas_skipped) fprintf(f, ", \"diloco_replicas_skipped\": %d", s->diloco_replicas_skipped);
  if (o->spike_guard) fprintf(f, ", \"skipped_steps\": %lld", (long long)s->skipped_steps);
  if (s->diloco_synced) fprintf(f, ", \"diloco_synced\": true, \"diloco_bytes\": %lld", (long long)s->diloco_bytes);
  if (s->has_checkpoint)
    fprintf(f, ", \"checkpoint_write_seconds\": %.6f, \"checkpoint_blocked_seconds\": %.6f", s->checkpoint_write_seconds,
            s->checkpoint_blocked_seconds);
  if (s->has_eval) {
    fprintf(f, ", \"eval_loss\": %.9g, \"eval_total_weights\": %lld", s->eval_loss, (long long)s->eval_total_weights);
    gt__jnum(f, "eval_perplexity", exp(s->eval_loss));
  }
  if (s->has_eval_pref) {
    gt__jnum(f, "eval_rewards/chosen", s->eval_rewards_chosen);
    gt__jnum(f, "eval_rewards/rejected", s->eval_rewards_rejected);
    gt__jnum(f, "eval_rewards/accuracies", s->eval_rewards_accuracies);
    gt__jnum(f, "eval_rewards/margins", s->eval_rewards_margins);
  }
  if (s->n_tasks > 0) {
    fputs(", \"tasks\": {", f);
    for (int i = 0; i < s->n_tasks && i < (int)(sizeof s->tasks / sizeof s->tasks[0]); i++) {
      if (i) fputs(", ", f);
      gt__jstr(f, s->tasks[i].name);
      fprintf(f, ": {\"n\": %lld", (long long)s->tasks[i].n);
      gt__jnum(f, "acc", s->tasks[i].acc);
      gt__jnum(f, "acc_stderr", s->tasks[i].acc_stderr);
      gt__jnum(f, "acc_norm", s->tasks[i].acc_norm);
      gt__jnum(f, "acc_norm_stderr", s->tasks[i].acc_norm_stderr);
      fputc('}', f);
    }
    fputc('}', f);
  }
  if (o->goodput) {
    /* the run's wall time so far and its shares: goodput (applied steps)
     * and the badput buckets; they sum to 1 */
    const gt_goodput *g = o->goodput;
    double wall = gt_goodput_wall(g), inv = wall > 0 ? 1.0 / wall : 0.0;
    fprintf(f, ", \"wall_seconds\": %.6f, \"goodput\": %.6f, \"badput\": {", wall, g->seconds[GT_GP_STEP] * inv);
    for (int b = 1; b < GT_GP_N; b++)
      fprintf(f, "%s\"%s\": %.6f", b > 1 ? ", " : "", gt_goodput_name((gt_goodput_bucket)b), g->seconds[b] * inv);
    fputc('}', f);
  }
  fputs("}\n", f);
  /* stdio keeps the first error: one check after the flush sees them all */
  return fflush(f) != 0 || ferror(f) ? -1 : 0;
}

/* ---------- SVG ---------- */

static const char *gt__colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

static double gt__nice_step(double range) {
  double raw = range / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
  return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

/* The x axis's ticks in axis units (log10 of the value on a log axis), at
 * most max. A log axis over more than 3 decades ticks whole decades; over
 * 1 to 3, 1, 2 and 5 of each; within one decade, nice steps of the values
 * themselves: a grid of 0.002, 0.004, 0.008 spans no whole decade, and
 * whole-decade ticks alone would leave its axis without one. */
static int gt__x_ticks(int log_axis, double lo, double hi, double *t, int max) {
  int n = 0;
  double span = hi - lo;
  if (!log_axis || span > 3) {
    double st = log_axis ? fmax(1.0, round(gt__nice_step(span))) : gt__nice_step(span);
    for (double x = ceil(lo / st) * st; x <= hi + 1e-9 * st && n < max; x += st) t[n++] = x;
  } else if (span > 1) {
    static const double mant[3] = {1, 2, 5};
    for (double e = floor(lo); e <= ceil(hi); e++)
      for (int m = 0; m < 3 && n < max; m++) {
        double x = e + log10(mant[m]);
        if (x >= lo - 1e-9 && x <= hi + 1e-9) t[n++] = x;
      }
  } else {
    double vlo = pow(10, lo), vhi = pow(10, hi), st = gt__nice_step(vhi - vlo);
    /* counted, not summed: 0.1 + 0.1 + 0.1 is not 0.3 */
    for (double i = ceil(vlo / st - 1e-9); i * st <= vhi * (1 + 1e-9) && n < max; i++) t[n++] = log10(i * st);
  }
  return n;
}

static void gt__xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

static const char *gt__dashes[] = {"", "7 3", "2 3", "9 3 2 3", "4 4", "1 2"};

/* a point's x on the axis, NaN when the axis cannot show it */
static double gt__ax(const gt_chart *c, double x) {
  if (!isfinite(x) || (c->log_x && x <= 0)) return NAN;
  return c->log_x ? log10(x) : x;
}

static void gt__chart(FILE *f, const gt_chart *c, double oy) {
  const double W = 760, H = 300, L = 70, R = 20, T = 36, B = 44;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (int s = 0; s < c->n_series; s++)
    for (int i = 0; i < c->series[s].n; i++) {
      double x = gt__ax(c, c->series[s].x[i]), y = c->series[s].y[i];
      if (!isfinite(y) || !isfinite(x) || (c->log_y && y <= 0)) continue;
      if (c->log_y) y = log10(y);
      xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    }
  if (c->fixed_x && isfinite(xmin)) {
    double lo = gt__ax(c, c->x_lo), hi = gt__ax(c, c->x_hi);
    if (isfinite(lo)) xmin = fmin(xmin, lo);
    if (isfinite(hi)) xmax = fmax(xmax, hi);
  }
  fprintf(f, "<text x='%.0f' y='%.0f' font-size='15' font-weight='bold'>", L, oy + 22);
  gt__xml_text(f, c->title);
  fputs("</text>\n", f);
  if (!isfinite(xmin)) {
    fprintf(f, "<text x='%.0f' y='%.0f'>no data</text>\n", L, oy + H / 2);
    return;
  }
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax == ymin) ymax = ymin + 1, ymin -= 1;
  double pad = 0.05 * (ymax - ymin);
  ymin -= pad, ymax += pad;
  double pw = W - L - R, ph = H - T - B;
#define PX(x) (L + ((x) - xmin) / (xmax - xmin) * pw)
#define PY(y) (oy + T + ph - ((y) - ymin) / (ymax - ymin) * ph)
  fprintf(f, "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='white' stroke='#444'/>\n", L,
          oy + T, pw, ph);
  double ys = gt__nice_step(ymax - ymin);
  for (double y = ceil(ymin / ys) * ys; y <= ymax; y += ys) {
    fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#ddd'/>", L, L + pw, PY(y), PY(y));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='end'>%.4g</text>\n", L - 4,
            PY(y) + 4, c->log_y ? pow(10, y) : fabs(y) < 1e-9 * ys ? 0.0 : y); /* no "-0" */
  }
  double ticks[64], last_tick = NAN;
  int n_ticks = gt__x_ticks(c->log_x, xmin, xmax, ticks, 64);
  for (int i = 0; i < n_ticks; i++) {
    double x = ticks[i];
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%.6g</text>\n", PX(x),
            oy + T + ph + 15, c->log_x ? pow(10, x) : x);
    last_tick = x;
  }
  /* the axis's end (a run's last step) is labelled when no tick is near it */
  if (c->fixed_x && (!isfinite(last_tick) || PX(xmax) - PX(last_tick) > 30))
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle' font-weight='bold'>%.6g</text>\n",
            PX(xmax), oy + T + ph + 15, c->log_x ? pow(10, xmax) : xmax);
  for (int k = 0; k < c->n_marks; k++) {
    double x = gt__ax(c, c->marks[k]);
    if (!isfinite(x) || x < xmin || x > xmax) continue;
    fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#888' stroke-dasharray='4 3'/>", PX(x), PX(x),
            oy + T, oy + T + ph);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' fill='#555'>", PX(x) + 3, oy + T + ph - 4);
    gt__xml_text(f, c->mark_label ? c->mark_label : "");
    fputs("</text>\n", f);
  }
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>", L + pw / 2, oy + H - 8);
  gt__xml_text(f, c->xlabel);
  /* a log axis says so: its ticks alone do not show it */
  if (c->log_x) fputs(" (log)", f);
  fprintf(f, "</text>\n<text x='14' y='%.1f' font-size='12' text-anchor='middle' "
             "transform='rotate(-90 14 %.1f)'>", oy + T + ph / 2, oy + T + ph / 2);
  gt__xml_text(f, c->ylabel);
  if (c->log_y) fputs(" (log)", f);
  fputs("</text>\n", f);
  /* the legend's width from its longest label (about 6.6 px a character
   * at 12 px), so a long one stays inside the chart */
  size_t longest = 0;
  for (int s = 0; s < c->n_series; s++)
    if (c->series[s].label && strlen(c->series[s].label) > longest) longest = strlen(c->series[s].label);
  double lx = L + pw - 28 - 6.6 * (double)longest;
  if (lx < L + 8) lx = L + 8;
  for (int s = 0; s < c->n_series; s++) {
    const gt_series *se = &c->series[s];
    const char *col = gt__colors[s % 6], *dash = gt__dashes[s % 6];
    /* colour and dash differ per series, so one drawn over another shows */
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.6' stroke-opacity='0.85'%s%s%s points='", col,
            dash[0] ? " stroke-dasharray='" : "", dash, dash[0] ? "'" : "");
    int pts = 0;
    for (int i = 0; i < se->n; i++) {
      double x = gt__ax(c, se->x[i]), y = se->y[i];
      if (!isfinite(x) || !isfinite(y) || (c->log_y && y <= 0)) continue;
      if (c->log_y) y = log10(y);
      fprintf(f, "%.1f,%.1f ", PX(x), PY(y));
      pts++;
    }
    fputs("'/>\n", f);
    /* sparse series (eval, a sweep): mark the points, each series' circles
     * smaller than the one before, so equal points show as rings */
    double rad = fmax(1.5, 4.5 - 1.0 * s);
    if (pts <= 20)
      for (int i = 0; i < se->n; i++) {
        double x = gt__ax(c, se->x[i]), y = se->y[i];
        if (!isfinite(x) || !isfinite(y) || (c->log_y && y <= 0)) continue;
        if (c->log_y) y = log10(y);
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='%.1f' fill='%s' stroke='white' stroke-width='0.8'/>", PX(x), PY(y),
                rad, col);
      }
    fprintf(f, "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='3'%s%s%s/>", lx,
            lx + 14, oy + T + 13.5 + 16 * s, oy + T + 13.5 + 16 * s, col, dash[0] ? " stroke-dasharray='" : "",
            dash, dash[0] ? "'" : "");
    fprintf(f, "<text x='%.0f' y='%.0f' font-size='12'>", lx + 18, oy + T + 17 + 16 * s);
    gt__xml_text(f, se->label);
    fputs("</text>\n", f);
  }
#undef PX
#undef PY
}

gt_rc gt_plot_svg(const char *path, int n_charts, const gt_chart *charts, gt_err *err) {
  FILE *f = fopen(path, "w");
  if (!f) return gt_err_set(err, GT_ERR_IO, "plot: cannot write '%s': %s", path, strerror(errno));
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='760' height='%d' "
             "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='#fafafa'/>\n",
          300 * n_charts);
  for (int i = 0; i < n_charts; i++) gt__chart(f, &charts[i], 300.0 * i);
  fputs("</svg>\n", f);
  if (fclose(f)) return gt_err_set(err, GT_ERR_IO, "plot: writing '%s' failed", path);
  return GT_OK;
}
