/* Metrics: the MaxText console line, metrics.jsonl, and SVG plots. */
#ifndef GEMTRAIN_METRICS_H
#define GEMTRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "gemtrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_step_metrics {
  int64_t step;
  double seconds;
  double tflops_per_s_per_device;
  double tokens_per_s_per_device;
  int64_t total_weights;
  double loss, lm_loss, perplexity;
  double learning_rate, grad_norm;
  int64_t peak_memory_bytes;
  int has_eval;
  double eval_loss;
  int64_t eval_total_weights;
  int skipped; /* the update was skipped (non-finite loss or gradient) */
  int has_moe;        /* the model has MoE layers: moe_lb_loss is reported */
  double moe_lb_loss; /* mean over MoE layers of the load-balance loss; loss = lm_loss + this */
} gt_step_metrics;

/* "completed step: N, seconds: S, TFLOP/s/device: F, Tokens/s/device: T,
 *  total_weights: W, loss: L, lm_loss: L, perplexity: P" (metric_logger.py),
 * then ", moe_lb_loss: X" (%.6f) when has_moe */
void gt_metrics_format_line(const gt_step_metrics *s, char *buf, size_t n);
/* One JSON object per line. */
void gt_metrics_write_jsonl(FILE *f, const gt_step_metrics *s);

/* A line chart as SVG. Each series is (x[i], y[i]); NaN y values are gaps. */
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
} gt_chart;
/* Charts stacked vertically in one SVG file. */
gt_rc gt_plot_svg(const char *path, int n_charts, const gt_chart *charts, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
