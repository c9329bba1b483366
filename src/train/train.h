/* The training loop behind `gemtrain train`: data -> forward/backward ->
 * clip -> AdamW, with eval, metrics, a plot and a closing text sample. */
#ifndef GEMTRAIN_TRAIN_H
#define GEMTRAIN_TRAIN_H

#include <stdio.h>

#include "gemtrain/common.h"
#include "gemtrain/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_train_opts {
  FILE *out;      /* console lines (NULL: silent) */
  FILE *progress; /* a terminal for the progress bar (NULL: none) */
  /* 1: SIGINT/SIGTERM finish the current step, write a checkpoint and
   * return GT_OK with `interrupted` set (a second signal kills) */
  int handle_signals;
} gt_train_opts;

typedef struct gt_train_result {
  long long steps_done;
  double first_loss, last_loss;
  double last_eval_loss; /* NaN if no eval ran */
  long long peak_memory_bytes;
  long long start_step;    /* > 0 when the run continued from a checkpoint */
  long long skipped_steps; /* non-finite steps skipped (skip_nonfinite_steps) */
  int interrupted;         /* stopped by a signal after a checkpoint */
  char run_dir[2048];
} gt_train_result;

/* Apply the thread rule (see README "Threads") and return the thread count:
 * threads_per_device, or cores / num_devices when it is 0. */
int gt_threads_configure(const gt_config *cfg);

gt_rc gt_train(const gt_config *cfg, const gt_train_opts *opts, gt_train_result *res, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
