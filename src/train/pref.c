#include "train/pref.h"

#include <math.h>
#include <string.h>

double gt_pref_log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }

static double gt__sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

int gt_pref_needs_reference(const gt_config *c) { return gt_config_dpo_reference(c); }

gt_rc gt_pref_cfg_from(const gt_config *c, gt_pref_cfg *out, gt_err *err) {
  memset(out, 0, sizeof *out);
  if (!strcmp(c->preference_algo, "dpo"))
    out->algo = GT_PREF_DPO;
  else if (!strcmp(c->preference_algo, "orpo"))
    out->algo = GT_PREF_ORPO;
  else
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'preference_algo' = '%s'; expected dpo or orpo",
                      c->preference_algo);
  if (!(c->dpo_beta >= 0.0) || !isfinite(c->dpo_beta))
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'dpo_beta' = %g; expected a finite value >= 0", c->dpo_beta);
  if (!(c->dpo_label_smoothing >= 0.0 && c->dpo_label_smoothing <= 0.5))
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'dpo_label_smoothing' = %g; expected a value in [0, 0.5]",
                      c->dpo_label_smoothing);
  if (!(c->orpo_lambda >= 0.0) || !isfinite(c->orpo_lambda))
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'orpo_lambda' = %g; expected a finite value >= 0",
                      c->orpo_lambda);
  out->beta = c->dpo_beta;
  out->eps = c->dpo_label_smoothing;
  out->lambda = c->orpo_lambda;
  return GT_OK;
}

void gt_pref_pair(const gt_pref_cfg *p, const gt_pref_seq *c, const gt_pref_seq *r, gt_pref_pair_out *o) {
  memset(o, 0, sizeof *o);
  if (p->algo == GT_PREF_DPO) {
    const double rc = c->logp - c->ref, rr = r->logp - r->ref, h = rc - rr, b = p->beta, e = p->eps;
    o->loss = -(1.0 - e) * gt_pref_log_sigmoid(b * h) - e * gt_pref_log_sigmoid(-b * h);
    /* d/dh: -(1 - e) b sigmoid(-b h) + e b sigmoid(b h) */
    const double dh = -(1.0 - e) * b * gt__sigmoid(-b * h) + e * b * gt__sigmoid(b * h);
    o->dlogp_c = dh;
    o->dlogp_r = -dh;
    o->reward_c = b * rc;
    o->reward_r = b * rr;
    o->logp_c = c->logp;
    o->logp_r = r->logp;
    return;
  }
  /* ORPO on the mean log-probabilities a, b < 0; 1 - e^a = -expm1(a) keeps
   * its digits near a = 0 (a token's loss rounded to 0 or below would give
   * a = 0: held just below) */
  const double lim = -1e-12;
  double a = c->logp / c->n, bb = r->logp / r->n;
  const double ac = a < lim ? a : lim, bc = bb < lim ? bb : lim;
  const double oa = -expm1(ac), ob = -expm1(bc);
  const double lo = (a - bb) - (log(oa) - log(ob));
  const double ratio = gt_pref_log_sigmoid(lo);
  o->loss = -a - p->lambda * ratio;
  /* d(-lambda log sigmoid(lo))/d(lo) = -lambda sigmoid(-lo); d lo/da =
   * 1 + e^a / (1 - e^a) = 1 / (1 - e^a), d lo/db = -1 / (1 - e^b) (the
   * clamp's derivative is taken as 1: it only acts where a rounds to 0) */
  const double dlo = -p->lambda * gt__sigmoid(-lo);
  const double da = -1.0 + dlo / oa, db = -dlo / ob;
  o->dlogp_c = da / c->n;
  o->dlogp_r = db / r->n;
  o->reward_c = p->lambda * a;
  o->reward_r = p->lambda * bb;
  o->logp_c = a;
  o->logp_r = bb;
  o->nll = -a;
  o->log_odds_ratio = ratio;
}

void gt_pref_pairs_loss(const void *ctx, int64_t n, const gt_pref_seq *seq, double *dlogp, gt_loss_stats *st) {
  const gt_pref_cfg *p = ctx;
  for (int64_t i = 0; i < n; i++) {
    gt_pref_pair_out o;
    gt_pref_pair(p, &seq[2 * i], &seq[2 * i + 1], &o);
    if (dlogp) {
      dlogp[2 * i] = o.dlogp_c;
      dlogp[2 * i + 1] = o.dlogp_r;
    }
    st->xent_sum += o.loss;
    st->total_weights++;
    st->pref[GT_PREF_REWARD_C] += o.reward_c;
    st->pref[GT_PREF_REWARD_R] += o.reward_r;
    st->pref[GT_PREF_ACC] += o.reward_c > o.reward_r;
    st->pref[GT_PREF_LOGP_C] += o.logp_c;
    st->pref[GT_PREF_LOGP_R] += o.logp_r;
    st->pref[GT_PREF_NLL] += o.nll;
    st->pref[GT_PREF_LOR] += o.log_odds_ratio;
  }
}

void gt_pref_metrics(gt_step_metrics *sm, const gt_pref_cfg *p, const double *sums, int64_t n) {
  sm->has_pref = 1;
  sm->pref_pairs = n;
  sm->pref_orpo = p->algo == GT_PREF_ORPO;
  const double k = n > 0 ? 1.0 / (double)n : 0.0;
  sm->rewards_chosen = sums[GT_PREF_REWARD_C] * k;
  sm->rewards_rejected = sums[GT_PREF_REWARD_R] * k;
  sm->rewards_accuracies = sums[GT_PREF_ACC] * k;
  sm->rewards_margins = sm->rewards_chosen - sm->rewards_rejected;
  sm->logps_chosen = sums[GT_PREF_LOGP_C] * k;
  sm->logps_rejected = sums[GT_PREF_LOGP_R] * k;
  sm->pref_nll_loss = sums[GT_PREF_NLL] * k;
  sm->log_odds_ratio = sums[GT_PREF_LOR] * k;
}
