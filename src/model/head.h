/* The output head: final RMSNorm, tied logits h . E^T, optional soft-cap,
 * softmax cross-entropy plus the optional z-loss (m->z_loss times the
 * squared log-sum-exp, into st->xent_sum and st->z_sum); processed in row
 * tiles so only one tile of logits [rows/n_tiles, V] exists at a time
 * (MaxText's num_vocab_tiling). */
#ifndef GT_HEAD_H
#define GT_HEAD_H

#include "base/common.h"
#include "model/batch.h"
#include "model/model.h"

/* Preference mode (m->pref != NULL; train/pref.h): rows come in pairs, row
 * 2i the chosen and row 2i+1 the rejected sequences, pair by pair under the
 * same segment id in both rows (segments NULL: one pair per row pair). A
 * sequence's log-probability is minus the sum of its tokens' losses (targets
 * >= 0), so the loss of a pair is a function of four sums (two with a
 * reference) and each token's d(loss)/d(token loss) is its sequence's
 * coefficient: the head runs every tile forward, sums per sequence, asks
 * `pairs` for the coefficients, then runs the backward with those as the
 * tokens' weights (times row_weight: 1 / the global batch's pairs). With
 * more than one tile the backward recomputes each tile's logits (one more
 * [N,d]x[d,V] product); with one the forward's tile is reused. A pair
 * lacking tokens on either side is no pair: no loss, no gradient. */
typedef struct gt_pref_seq {
  double logp; /* summed log-probability of the response tokens */
  double ref;  /* the same under the reference (0 without one) */
  double n;    /* response tokens */
} gt_pref_seq;
/* seq[2p] chosen, seq[2p+1] rejected, for n pairs: adds the pairs' losses
 * to st->xent_sum, their count to st->total_weights and their metrics to
 * st->pref; with dlogp != NULL writes d(pair loss)/d(seq[k].logp) into
 * dlogp[k]. */
typedef void (*gt_pref_pairs_fn)(const void *ctx, int64_t n, const gt_pref_seq *seq, double *dlogp,
                                 gt_loss_stats *st);
typedef struct gt_pref_head {
  gt_pref_pairs_fn pairs;
  const void *ctx;
  int T;                   /* tokens per row */
  const int32_t *segments; /* [N] of the rows the head runs, or NULL */
  const float *ref_loss;   /* [N] the reference's per-token losses, or NULL (no reference) */
} gt_pref_head;

/* The pairs of a batch in preference mode: those with response tokens
 * (targets >= 0) on both sides. */
int64_t gt_pref_count_pairs(const gt_batch *b);

/* x: [N,d] final residual stream. With dx != NULL this also runs backward:
 * writes d(loss)/dx into dx (never read: it needs no zeroing) and adds the
 * head's parameter gradients (final norm, embedding) into m->grads, with
 * per-token weight row_weight.
 * logits_out != NULL (forward only, n_tiles must be 1) copies the logits.
 * On a measuring tracker it only allocates and frees its buffers and counts
 * st->total_weights from the targets. */
/* hp / hg: the head unit's parameters and gradients ([V*d] embedding then
 * [d] final norm); hg may be NULL when dx is. hm: where the logits'
 * products read the embedding when hp leaves it out
 * (gt_param_view.projections), else NULL. */
gt_rc gt__head_run(gt_model *m, const float *hp, const float *hm, float *hg, const float *x, const int32_t *targets, int64_t N,
                   int n_tiles, float row_weight, float *dx, float *logits_out, gt_loss_stats *st, gt_err *err);

#endif
