/* What a training run reports, behind one reporter: the console lines, the
 * progress bar on a terminal, metrics.jsonl (continued on resume) and the
 * loss/throughput plot written at the end. The loop hands it each step's
 * metrics; nothing else in the loop formats output. */
#ifndef GT_TRAIN_REPORT_H
#define GT_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "train/metrics_io.h"

typedef struct gt_report {
  FILE *out;      /* console lines (NULL: silent) */
  FILE *progress; /* a terminal for the progress bar (NULL: none) */
  FILE *metrics;  /* <run_dir>/metrics.jsonl */
  char run_dir[2048];
  char run_name[GT_STR_PATH];
  int64_t n_steps, first_step;
  double t_start;
  double *xs, *ls, *es, *tps; /* [n_steps] history for the plot (NaN: no value) */
} gt_report;

/* Opens metrics.jsonl for the run: on resume (start > 0) the lines of steps
 * before start are kept and fill the history. */
gt_rc gt_report_open(gt_report *r, const gt_config *cfg, const char *run_dir, FILE *out, FILE *progress,
                     int64_t start, gt_err *err);
/* printf to the console (after clearing the progress bar). */
void gt_report_note(gt_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One step: the console line (and the eval line when sm->has_eval), the
 * progress bar, a metrics.jsonl line and the history. */
void gt_report_step(gt_report *r, const gt_step_metrics *sm);
/* Clears the progress bar (before other output such as a checkpoint line). */
void gt_report_pause(gt_report *r);
/* Writes <run_dir>/loss.svg from the history. */
gt_rc gt_report_plot(gt_report *r, gt_err *err);
void gt_report_close(gt_report *r);

#endif
