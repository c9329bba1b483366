/* What a training run reports, behind one reporter: the console lines, the
 * progress bar on a terminal, metrics.jsonl (continued on resume), the
 * TensorBoard event file in <run_dir>/tensorboard/ (enable_tensorboard; a
 * new file per process, flushed every step) and the loss/throughput plot
 * written at the end. The loop hands it each step's metrics; nothing else in
 * the loop formats output. */
#ifndef GT_TRAIN_REPORT_H
#define GT_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "train/goodput.h"
#include "train/metrics_io.h"
#include "train/tfevents.h"

typedef struct gt_report {
  FILE *out;      /* console lines (NULL: silent) */
  FILE *progress; /* a terminal for the progress bar (NULL: none) */
  FILE *metrics;  /* <run_dir>/metrics.jsonl */
  char run_dir[2048];
  char run_name[GT_STR_PATH];
  int64_t n_steps, first_step;
  int64_t log_period;         /* the console's step line every this many steps */
  double t_start;
  double *xs, *ls, *es, *tps; /* [n_steps] history for the plot (NaN: no value) */
  double clip_threshold;      /* gradient_clipping_threshold, for learning/grad_norm */
  int tensorboard;            /* the event file is open */
  gt_tfevents tb;
  long metrics_good;          /* bytes of metrics.jsonl that end with a whole line */
  int spike_guard;            /* skip_step_on_spikes: skipped_steps on every record, optim/ tags */
  const gt_goodput *goodput;  /* the run's time so far, for each record (the loop's; NULL: none) */
} gt_report;

/* Opens metrics.jsonl for the run: on resume (start > 0) the lines of steps
 * before start are kept and fill the history; a torn line (a write cut
 * short by a full disk or a kill) is dropped and the console says so. With cfg->enable_tensorboard
 * it also opens a new event file in <run_dir>/tensorboard/ (on resume
 * starting with a restart event at `start`, which makes TensorBoard drop the
 * earlier files' steps >= start, as metrics.jsonl drops its lines). */
gt_rc gt_report_open(gt_report *r, const gt_config *cfg, const char *run_dir, FILE *out, FILE *progress,
                     int64_t start, gt_err *err);
/* printf to the console (after clearing the progress bar). */
void gt_report_note(gt_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One step: the console line (every log_period steps, and the first, the
 * last, any eval, any skipped step; without a progress bar it ends with
 * "(N of total steps, elapsed, ETA)" so a log shows how far the run is), the
 * eval line when sm->has_eval, the progress bar, a metrics.jsonl line, the step's TensorBoard scalars
 * (MaxText's tags; non-finite values are left out) and the history.
 * GT_ERR_IO, naming the file, when metrics.jsonl or the event file cannot be
 * written; a metrics line cut short is cut off again, so the file always
 * ends with a whole line. The run must stop: its record would have a gap. */
gt_rc gt_report_step(gt_report *r, const gt_step_metrics *sm, gt_err *err);
/* The step's TensorBoard scalars with MaxText's tags (learning/loss,
 * learning/lm_loss, learning/perplexity, learning/moe_lb_loss when has_moe,
 * learning/z_loss when has_z_loss, learning/grad_norm, learning/raw_grad_norm,
 * learning/param_norm when measured (> 0), learning/current_learning_rate,
 * learning/total_weights, perf/step_time_seconds, perf/per_device_tflops (the
 * step's), perf/per_device_tflops_per_sec, perf/per_device_tokens (the
 * step's), perf/per_device_tokens_per_sec, and eval/avg_loss,
 * eval/avg_perplexity, eval/total_weights when has_eval), gemtrain's own
 * (perf/tokens_seen_per_device; optim/step_skipped and optim/skipped_steps
 * with spike_guard; perf/checkpoint_write_seconds and
 * perf/checkpoint_blocked_seconds when has_checkpoint; diloco/synced and
 * diloco/bytes when diloco_synced; with use_dpo rewards/{chosen,rejected,
 * accuracies,margins}, logps/{chosen,rejected}, ORPO's nll_loss and
 * log_odds_ratio, eval/rewards/...; eval/<task>/acc, acc_stderr, acc_norm,
 * acc_norm_stderr for each task), non-finite values left out. As in
 * MaxText, learning/raw_grad_norm is the norm before clipping
 * (sm->grad_norm) and learning/grad_norm after it: clip_threshold
 * (gradient_clipping_threshold; <= 0: none) when the norm reached it.
 * Returns how many of b->v were filled (tags that name a task point into
 * b->names). */
#define GT_REPORT_TB_MAX 80 /* every tag at once: 26 + 8 tasks x 4 + 12 of preference tuning, and room */
typedef struct gt_report_tb {
  gt_tf_scalar v[GT_REPORT_TB_MAX];
  char names[32][96];
} gt_report_tb;
int gt_report_tb_scalars(const gt_step_metrics *sm, double clip_threshold, int spike_guard, gt_report_tb *b);
/* Clears the progress bar (before other output such as a checkpoint line). */
void gt_report_pause(gt_report *r);
/* Writes <run_dir>/loss.svg from the history. */
gt_rc gt_report_plot(gt_report *r, gt_err *err);
void gt_report_close(gt_report *r);

#endif
