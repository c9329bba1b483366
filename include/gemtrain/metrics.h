/* The metrics of one training step: the fields of the console line and of
 * a metrics.jsonl record (train/metrics_io.h writes them). New fields are
 * only ever added at the end, and a version that adds one changes the
 * shared library's soname (docs/library.md): gt_ctx_last_metrics fills the
 * struct as the library's headers declare it. */
#ifndef GEMTRAIN_METRICS_H
#define GEMTRAIN_METRICS_H

#include <stdint.h>

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
  /* the step's collectives, per device (the busiest one): wall time spent in
   * them (prefetching gathers run beside compute and count too), bytes sent,
   * and of those the bytes sent to other MPI ranks */
  double comm_seconds;
  int64_t comm_bytes, comm_bytes_dcn;
  int ranks; /* MPI processes of the run (1 without mpirun) */
  int no_tokens; /* skipped because no token of the batch is in the loss (total_weights 0) */
  /* the spike guard (skip_step_on_spikes): this step was not applied because
   * its loss or gradient norm was above the rolling bound; steps not applied
   * so far in the run (spikes, non-finite, this one included) */
  int spike_skipped;
  int64_t skipped_steps;
  /* z_loss_multiplier > 0: the z-loss term, already included in loss */
  int has_z_loss;
  double z_loss;
  double param_norm;              /* L2 norm of the trainable parameters after the step */
  int64_t tokens_seen_per_device; /* cumulative since step 0 (MaxText's perf/per_device_tokens) */
  /* DiLoCo: this step ended with a sync of the replicas, and the bytes this
   * rank sent to other replicas for it */
  int diloco_synced;
  int64_t diloco_bytes;
  /* a checkpoint was written after this step: the writer's time, and the
   * time the training loop waited for it (snapshot, or a previous write) */
  int has_checkpoint;
  double checkpoint_write_seconds, checkpoint_blocked_seconds;
  /* preference tuning (use_dpo): means over the step's pairs, as TRL and
   * MaxText report them. rewards: beta x (policy - reference) summed
   * log-probability of the response (DPO), or beta x the policy's mean
   * log-probability (ORPO); accuracies: share of pairs whose chosen reward
   * is above the rejected one; margins: chosen - rejected. logps: the
   * responses' log-probabilities under the policy (DPO: summed over the
   * response; ORPO: mean per token). ORPO (pref_orpo) also gives the chosen
   * answer's loss (nll_loss: mean over pairs of its mean token NLL) and
   * log_odds_ratio (TRL's: the mean of log sigmoid of the log odds).
   * loss is the mean preference loss over the pairs, total_weights and
   * pref_pairs the global batch's pairs. */
  int has_pref, pref_orpo;
  int64_t pref_pairs;
  double rewards_chosen, rewards_rejected, rewards_accuracies, rewards_margins;
  double logps_chosen, logps_rejected;
  double pref_nll_loss, log_odds_ratio;
  /* the same over the eval batches (has_eval with use_dpo) */
  int has_eval_pref;
  double eval_rewards_chosen, eval_rewards_rejected, eval_rewards_accuracies, eval_rewards_margins;
  /* multiple-choice tasks scored at this eval (eval_tasks) */
  int n_tasks;
  struct {
    char name[64];
    int64_t n;                 /* examples */
    double acc, acc_stderr;    /* lm-evaluation-harness: argmax of the summed log-likelihood */
    double acc_norm, acc_norm_stderr; /* the same, each divided by its continuation's length in characters (the harness's len) */
  } tasks[8];
  /* DiLoCo (diloco_replicas = dcn_diloco_parallelism > 1, else 0): the
   * replicas in which this step's update was not applied. skipped,
   * no_tokens and spike_skipped above are set when they hold in any
   * replica: each replica decides its own step. */
  int diloco_replicas, diloco_replicas_skipped;
} gt_step_metrics;

#ifdef __cplusplus
}
#endif
#endif
