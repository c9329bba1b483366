/* The training run behind `gemtrain train`: plan check, run directory,
 * resume, then the step loop (data -> trainer step -> report -> eval ->
 * checkpoint), a plot and a closing text sample. The step itself is the
 * trainer's (train/trainer.h), the same for every caller. */
#ifndef GEMTRAIN_TRAIN_H
#define GEMTRAIN_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "base/common.h"
#include "base/threads.h"
#include "config/config.h"
#include "gemtrain/metrics.h"
#include "train/goodput.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_train_opts {
  FILE *out;      /* console lines (NULL: silent) */
  FILE *progress; /* a terminal for the progress bar (NULL: none) */
  /* Non-NULL: when *stop becomes non-zero (a signal handler the caller
   * installed sets it to the signal number), the loop finishes its step,
   * writes a checkpoint and returns GT_OK with `interrupted` set. The
   * library installs no handler itself. */
  volatile sig_atomic_t *stop;
  /* Test seams (NULL in production): the step whose gradient gets a NaN, as
   * a diverging step would; a function called after every step with its
   * metrics (a test raises a signal there at a known step, or records the
   * exact losses). */
  const int64_t *test_nan_step;
  void (*test_after_step)(const gt_step_metrics *sm, void *ctx);
  void *test_ctx;
} gt_train_opts;

typedef struct gt_train_result {
  long long steps_done;
  double first_loss, last_loss;
  double last_eval_loss; /* NaN if no eval ran */
  long long peak_memory_bytes;
  long long start_step;    /* > 0 when the run continued from a checkpoint */
  long long skipped_steps; /* non-finite steps skipped (skip_nonfinite_steps) */
  uint64_t config_checksum; /* of the resolved configuration (train/config_agree.h) */
  long long empty_steps;   /* steps skipped: no token in the loss */
  long long empty_evals;   /* evaluations skipped: no token in the loss */
  int interrupted;         /* stopped by *stop after a checkpoint */
  long long spike_steps;   /* steps not applied as spikes (skip_step_on_spikes) */
  /* target_eval_loss: the run ended at the first eval at or below it, after
   * step target_step (with its checkpoint when enable_checkpointing) */
  int reached_target;
  long long target_step;
  /* where the wall time went (train/goodput.h), from gt_train's start to
   * the closing goodput line (before the closing sample); the buckets sum
   * to wall_seconds (0 when the run ended with an error before it) */
  double wall_seconds;
  double goodput_seconds[GT_GP_N];
  /* On error over MPI ranks: 1 when every rank returned this same error
   * (they agreed on it and can exit normally), 0 when it was this rank's
   * alone (a peer stopped answering): the job must then be ended
   * (gt_dist_abort), since peers may wait for this rank. */
  int agreed;
  char run_dir[2048];
  char run_name[1024]; /* the run's name (a new timestamp one when run_name was empty); "" when none was made */
} gt_train_result;

/* Apply the thread rule (see docs/performance.md "Threads") and return the
 * thread count: threads_per_device, or cores / num_devices when it is 0. */
static inline int gt_threads_configure(const gt_config *cfg) {
  return gt_threads_use(cfg->threads_per_device, cfg->num_devices);
}

gt_rc gt_train(const gt_config *cfg, const gt_train_opts *opts, gt_train_result *res, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
