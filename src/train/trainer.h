/* The trainer: the one step path every caller uses (`gemtrain train`,
 * `gemtrain bench`, sweeps through `gemtrain train`, the gt_ctx library API
 * and `gemtrain plan`).
 *
 * It runs over the mesh (src/mesh/fsdp.h): one device is a 1-device mesh
 * that computes on its shards in place, not a second code path. A step is
 * forward/backward of every micro-batch on every device, the gradient
 * reduce-scatter, the global gradient norm, clipping and AdamW on each
 * device's shard; its loss is the LM loss plus the MoE load-balance loss;
 * a step whose loss or gradient norm is not finite updates nothing and is
 * refused (GT_ERR_NUMERIC) unless skip_nonfinite_steps; a step with no
 * token in its loss (total_weights 0 over the global batch) updates
 * nothing either (no weight decay, no schedule step) and is counted as
 * skipped with no_tokens set, never refused. With skip_step_on_spikes a
 * finite step whose loss or gradient norm is a spike (train/spike.h) updates
 * nothing either and is counted as spike_skipped. Metrics are filled
 * the same way for everyone.
 *
 * An allocation-only trainer (with probes) runs the same schedule without
 * arithmetic: its device trackers are what `gemtrain plan` reports. */
#ifndef GT_TRAIN_TRAINER_H
#define GT_TRAIN_TRAINER_H

#include <stdint.h>

#include "base/alloc.h"
#include "ckpt/ckpt.h"
#include "data/data.h"
#include "exec/exec.h"
#include "config/config.h"
#include "gemtrain/metrics.h"
#include "mesh/fsdp.h"
#include "train/optim.h"

typedef struct gt_trainer gt_trainer;

/* cfg must be validated. Parameters start from init_weights_seed. probes
 * (one per device) make it allocation-only, for the plan (mesh/fsdp.h). */
gt_rc gt_trainer_create(gt_trainer **out, const gt_config *cfg, const gt_mem_probe *probes, gt_err *err);
void gt_trainer_destroy(gt_trainer *t);

/* What one step over the mesh did. */
typedef struct gt_mesh_step_info {
  double loss;            /* LM loss: mean over the global batch (z-loss included) */
  double z_loss;          /* of loss, the z-loss (z_loss_multiplier > 0) */
  double moe_lb_loss;     /* MoE: mean over MoE layers (and token groups) of the load-balance loss */
  int64_t total_weights;
  gt_update_info update;  /* global gradient norm, lr, clip scale, skipped */
  int no_tokens;          /* total_weights was 0: the update was skipped (update.skipped = 1) */
  int spike_skipped;      /* the spike guard skipped the update (update.skipped stays 0) */
  double param_norm;      /* L2 norm of the trainable parameters after the step */
  int64_t comm_bytes;     /* per device, this step (the largest device's) */
  double comm_seconds;    /* per device (max), this step */
  int64_t comm_bytes_dcn; /* of comm_bytes, sent to other ranks */
  double pref[GT_PREF_NSUMS]; /* preference tuning: the pairs' metric sums (loss and total_weights are the pairs') */
} gt_mesh_step_info;

/* The step itself, on a mesh (gt_trainer_step runs it; tests call it on a
 * bare gt_fsdp): zero, forward/backward per micro-batch, reduce and norm,
 * clip and update. Over MPI ranks every rank calls it. */
gt_rc gt_trainer_mesh_step(gt_fsdp *fs, const gt_batch *micro, int n_micro, gt_mesh_step_info *info, gt_err *err);

/* One optimizer step over n_micro global micro-batches (each of the
 * configured global batch). sm receives the step's metrics (step, loss,
 * lm_loss, moe_lb_loss, grad_norm, param_norm, learning_rate, skipped,
 * spike_skipped, skipped_steps, timing, peak memory); eval fields are left
 * clear. */
gt_rc gt_trainer_step(gt_trainer *t, const gt_batch *micro, int n_micro, gt_step_metrics *sm, gt_err *err);
/* The same with the step's gradient_accumulation_steps micro-batches taken
 * from the data source. */
gt_rc gt_trainer_step_data(gt_trainer *t, gt_data *d, gt_step_metrics *sm, gt_err *err);
/* The same in two halves: the step's batches from the data source (nothing
 * is computed: a failure leaves the state as the last step left it), then
 * the step on them. */
gt_rc gt_trainer_load_data(gt_trainer *t, gt_data *d, gt_err *err);
gt_rc gt_trainer_step_loaded(gt_trainer *t, gt_step_metrics *sm, gt_err *err);
/* One step on the trainer's own zero-filled batches (the plan's step). */
gt_rc gt_trainer_step_zero(gt_trainer *t, gt_step_metrics *sm, gt_err *err);
/* Loss sums of global batches without training. */
gt_rc gt_trainer_eval(gt_trainer *t, const gt_batch *b, int n, gt_loss_stats *st, gt_err *err);
/* eval_steps batches of the data source's held-out part: mean loss and
 * tokens; no token in the loss gives total_weights 0 and loss 0 (skip it). */
gt_rc gt_trainer_eval_data(gt_trainer *t, gt_data *d, double *loss, int64_t *total_weights, gt_err *err);
/* use_dpo: the last eval's preference metrics (eval_rewards/...) into sm. */
void gt_trainer_eval_pref_metrics(const gt_trainer *t, gt_step_metrics *sm);
/* The same in two halves: the eval batches, then the loss on them. */
gt_rc gt_trainer_load_eval(gt_trainer *t, gt_data *d, gt_err *err);
gt_rc gt_trainer_eval_loaded(gt_trainer *t, double *loss, int64_t *total_weights, gt_err *err);

/* Steps done (skipped ones included): the next step's index. Set by a
 * resume together with the state. */
int64_t gt_trainer_step_index(const gt_trainer *t);
void gt_trainer_set_step_index(gt_trainer *t, int64_t step);
int64_t gt_trainer_num_params(const gt_trainer *t);
/* The sharded state (checkpoints, exports). */
gt_fsdp *gt_trainer_fsdp(gt_trainer *t);
/* DiLoCo's outer state (train/diloco.h), NULL when off. */
struct gt_diloco;
struct gt_diloco *gt_trainer_diloco(gt_trainer *t);
/* The largest device peak since the last step began (tracked bytes). */
int64_t gt_trainer_peak_bytes(gt_trainer *t);
/* Device d's model (descriptors) — for attaching a time profile. */
gt_model *gt_trainer_device_model(gt_trainer *t, int d);

/* The profiler timeline (base/trace.h; NULL detaches), between steps: each
 * step's span (its measured time exactly) and its data loading go on the
 * host lane, everything the devices do on their lanes (mesh/fsdp.h). tr has
 * a lane per device (num_devices). GT_ERR_ARG on an allocation-only trainer. */
struct gt_trace;
gt_rc gt_trainer_set_trace(gt_trainer *t, struct gt_trace *tr, gt_err *err);
/* The attached trace, or NULL. */
struct gt_trace *gt_trainer_trace(gt_trainer *t);

/* The spike guard's state and the count of steps not applied (spikes and
 * non-finite steps), for checkpoints: a resume that sets what a save got
 * decides every later step as the uninterrupted run. The windows take each
 * step's values with skip_step_on_spikes off too (nothing is decided then),
 * so they are current whenever a later segment turns the guard on. */
void gt_trainer_spike_state(const gt_trainer *t, gt_ckpt_spike *out);
void gt_trainer_set_spike_state(gt_trainer *t, const gt_ckpt_spike *in);

/* Test seam (never called by the library itself): the next step's gradient
 * gets a NaN, as a diverging step would. */
void gt__trainer_poison_next_step(gt_trainer *t);

#endif
