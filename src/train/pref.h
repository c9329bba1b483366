/* Preference tuning: the per-pair losses of DPO (Rafailov et al. 2023, with
 * the label smoothing of MaxText's dpo_label_smoothing) and ORPO (Hong et
 * al. 2024, as TRL computes it), their derivatives with respect to each
 * sequence's log-probability, and the metrics TRL and MaxText report.
 * The output head (model/head.h, preference mode) turns the derivatives
 * into per-token weights; the step's loss is the mean over the global
 * batch's pairs.
 *
 * DPO, with logps summed over the response tokens and ref the same under
 * the frozen reference:
 *   h = (logp_c - ref_c) - (logp_r - ref_r)
 *   loss = -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)
 *   rewards = beta (logp - ref)
 * ORPO, with a and b the chosen and rejected mean log-probabilities per
 * token (no reference):
 *   log_odds = (a - b) - (log(1 - e^a) - log(1 - e^b))
 *   loss = -a + lambda (-log sigmoid(log_odds))
 *   rewards = lambda a, lambda b (TRL's ORPO rewards: beta times the mean logps) */
#ifndef GEMTRAIN_PREF_H
#define GEMTRAIN_PREF_H

#include "base/common.h"
#include "config/config.h"
#include "gemtrain/metrics.h"
#include "model/head.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GT_PREF_DPO = 0, GT_PREF_ORPO = 1 } gt_pref_algo;

typedef struct gt_pref_cfg {
  gt_pref_algo algo;
  double beta;   /* DPO */
  double eps;    /* DPO label smoothing */
  double lambda; /* ORPO */
} gt_pref_cfg;

/* One pair's loss and its derivatives. */
typedef struct gt_pref_pair_out {
  double loss;
  double dlogp_c, dlogp_r;  /* d(loss) / d(summed logp) of each side */
  double reward_c, reward_r;
  double logp_c, logp_r;    /* DPO: summed; ORPO: mean per token */
  double nll, log_odds_ratio; /* ORPO: -a and log sigmoid(log_odds) */
} gt_pref_pair_out;

/* The config's preference keys (use_dpo, preference_algo, dpo_beta,
 * dpo_label_smoothing, orpo_lambda); refuses values out of range naming
 * the key. */
gt_rc gt_pref_cfg_from(const gt_config *c, gt_pref_cfg *out, gt_err *err);
/* Whether the config trains on preference pairs with a reference (DPO). */
int gt_pref_needs_reference(const gt_config *c);
/* One pair: c and r the chosen and rejected sequences (model/head.h). */
void gt_pref_pair(const gt_pref_cfg *p, const gt_pref_seq *c, const gt_pref_seq *r, gt_pref_pair_out *o);
/* The head's callback (gt_pref_pairs_fn), ctx a gt_pref_cfg. */
void gt_pref_pairs_loss(const void *ctx, int64_t n, const gt_pref_seq *seq, double *dlogp, gt_loss_stats *st);
/* The step's preference metrics (means over n pairs) from the sums. */
void gt_pref_metrics(gt_step_metrics *sm, const gt_pref_cfg *p, const double *sums, int64_t n);
/* log sigmoid(x), stable for any x. */
double gt_pref_log_sigmoid(double x);

#ifdef __cplusplus
}
#endif
#endif
