/* The metrics of one training step: the fields of the console line and of
 * a metrics.jsonl record (train/metrics_io.h writes them). */
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
} gt_step_metrics;

#ifdef __cplusplus
}
#endif
#endif
