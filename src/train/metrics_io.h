/* Writing metrics: the MaxText console line, metrics.jsonl records and SVG
 * line charts (the run's loss.svg, a sweep's plot.svg). */
#ifndef GT_TRAIN_METRICS_IO_H
#define GT_TRAIN_METRICS_IO_H

#include <stdio.h>

#include "base/common.h"
#include "gemtrain/metrics.h"
#include "train/goodput.h"

/* "completed step: N, seconds: S, TFLOP/s/device: F, Tokens/s/device: T,
 *  total_weights: W, loss: L, lm_loss: L, perplexity: P" (metric_logger.py),
 * then ", moe_lb_loss: X" (%.6f) when has_moe, ", z_loss: X" (%.6f) when
 * has_z_loss, and ", skipped: no tokens in the loss" or ", skipped: spike" */
void gt_metrics_format_line(const gt_step_metrics *s, char *buf, size_t n);
typedef struct gt_metrics_opts {
  int spike_guard;           /* skip_step_on_spikes: every record has skipped_steps */
  const gt_goodput *goodput; /* the run's time so far: wall_seconds, goodput and badput (NULL: none) */
} gt_metrics_opts;
/* One JSON object per line, flushed; 0, or -1 when a write failed (errno).
 * docs/training.md lists the keys. o may be NULL. */
int gt_metrics_write_jsonl(FILE *f, const gt_step_metrics *s, const gt_metrics_opts *o);

/* A line chart as SVG. Each series is (x[i], y[i]); NaN y values are gaps.
 * Series differ in colour and dash, and their points are marked with
 * shrinking circles, so one that lies on another stays visible. */
typedef struct gt_series {
  const char *label;
  const double *x, *y;
  int n;
} gt_series;
typedef struct gt_chart {
  const char *title, *xlabel, *ylabel;
  int n_series;
  const gt_series *series;
  int log_y;
  int log_x;          /* x on a log axis (learning rates: values a decade apart); x <= 0 is left out */
  int fixed_x;        /* the x axis spans at least [x_lo, x_hi] (a run's whole length), its end labelled */
  double x_lo, x_hi;
  int n_marks;        /* vertical dashed lines at marks[] (a run's resumes), each labelled mark_label */
  const double *marks;
  const char *mark_label;
} gt_chart;
/* Charts stacked vertically in one SVG file. */
gt_rc gt_plot_svg(const char *path, int n_charts, const gt_chart *charts, gt_err *err);

#endif
