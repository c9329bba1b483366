/* What one micro-batch brings to the model and what its loss comes back
 * as: data/ fills batches, the executor (exec/exec.h) runs them and the
 * output head (model/head.h) adds to the loss sums. */
#ifndef GEMTRAIN_BATCH_H
#define GEMTRAIN_BATCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_batch {
  int B, T;
  const int32_t *inputs;    /* [B*T] token ids */
  const int32_t *targets;   /* [B*T] next-token ids; < 0 = masked (padding) */
  const int32_t *positions; /* [B*T] RoPE positions */
  const int32_t *segments;  /* [B*T] segment ids of packed documents, or NULL */
} gt_batch;

/* Initialise as {0}: fields may be added. */
/* The preference sums of gt_loss_stats.pref, over pairs. */
enum {
  GT_PREF_REWARD_C,  /* chosen reward */
  GT_PREF_REWARD_R,  /* rejected reward */
  GT_PREF_ACC,       /* pairs whose chosen reward is above the rejected one */
  GT_PREF_LOGP_C,    /* chosen log-probability (DPO: summed over the response; ORPO: its mean) */
  GT_PREF_LOGP_R,    /* rejected log-probability */
  GT_PREF_NLL,       /* ORPO: the chosen answer's NLL (mean over its tokens) */
  GT_PREF_LOR,       /* ORPO: log sigmoid of the log odds ratio */
  GT_PREF_NSUMS
};

typedef struct gt_loss_stats {
  double xent_sum;       /* sum of per-token losses over unmasked tokens: the cross-entropy, plus the
                          * z-loss when z_loss_multiplier > 0 (MaxText's xent_sum holds it too) */
  int64_t total_weights; /* unmasked tokens */
  double moe_lb_sum;     /* MoE: sum over the MoE layers of each one's load-balance loss (weight included) */
  double z_sum;          /* of xent_sum, the z-loss terms z * log(Z)^2 (0 when z_loss_multiplier = 0) */
  /* preference mode (model/head.h's gt_pref_head): xent_sum holds the sum
   * of the pairs' losses, total_weights the pairs, and pref[] the sums the
   * step's metrics are means of (train/pref.h fills them) */
  double pref[GT_PREF_NSUMS];
} gt_loss_stats;

#ifdef __cplusplus
}
#endif
#endif
