/* The spike guard (skip_step_on_spikes): MaxText's skip_step_on_spikes
 * optimizer wrapper (maxtext optimizers.py, after OLMo-core's
 * SkipStepOptimizer), as pure functions over a small struct.
 *
 * Two rolling windows, of the step's loss and of its gradient norm, hold
 * the last `interval` values (float32, as MaxText's buffers). A step is a
 * spike when
 *     loss - mean(losses) > factor * std(losses)   or
 *     norm - mean(norms)  > factor * std(norms)
 * with std the sample standard deviation (Bessel's correction, n - 1; a
 * window of one value has std 0), over the n = min(count, interval) values
 * held. Before the window has min_history = max(2, interval / 2) values
 * in it (count + 1 < min_history) no step is a spike. Every decided step's
 * values enter the windows, a spike's too (MaxText: "so spikes can become
 * the new baseline").
 *
 * Sums run over the window oldest value first, in double, so the decision
 * depends on the values and their order only: a window restored from a
 * checkpoint (gt_spike_save / gt_spike_load) decides exactly as the one
 * that was saved. */
#ifndef GT_TRAIN_SPIKE_H
#define GT_TRAIN_SPIKE_H

#include <stdint.h>

#include "ckpt/ckpt.h"

/* The longest window (config key skip_step_interval's maximum): a
 * checkpoint holds the whole window inline. */
#define GT_SPIKE_MAX_INTERVAL GT_CKPT_SPIKE_MAX

typedef struct gt_spike {
  int64_t interval;
  double factor;
  int64_t count;  /* values pushed so far (each decided step's) */
  /* circular: the value of push k is at k % interval */
  float loss[GT_SPIKE_MAX_INTERVAL], norm[GT_SPIKE_MAX_INTERVAL];
  int64_t skipped_steps; /* steps not applied so far (spikes and non-finite steps), kept for the trainer */
} gt_spike;

/* An empty window of `interval` values (clamped to 1..GT_SPIKE_MAX_INTERVAL). */
void gt_spike_init(gt_spike *g, int64_t interval, double factor);
/* Values held: min(count, interval). */
int64_t gt_spike_held(const gt_spike *g);
/* Mean and sample standard deviation of the loss (which 0) or norm (1)
 * window; both 0 for an empty window. */
void gt_spike_stats(const gt_spike *g, int which, double *mean, double *std);
/* 1 when a step of this loss and norm is a spike (its update is not
 * applied); 0 while the window is filling. */
int gt_spike_check(const gt_spike *g, double loss, double norm);
/* Appends one step's values (rounded to float32), dropping the oldest when
 * the window is full. */
void gt_spike_push(gt_spike *g, double loss, double norm);
/* check, then push: the guard's one call per step. */
int gt_spike_decide(gt_spike *g, double loss, double norm);

/* The checkpoint's record (ckpt.h): the window oldest first, the count and
 * the skipped steps. */
void gt_spike_save(const gt_spike *g, gt_ckpt_spike *out);
/* Restores a saved record into g (its interval and factor stay g's): with a
 * shorter interval than the writer's, the newest values are kept. An empty
 * record (a checkpoint without one) gives an empty window. */
void gt_spike_load(gt_spike *g, const gt_ckpt_spike *in);

#endif
