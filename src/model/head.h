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

/* x: [N,d] final residual stream. With dx != NULL this also runs backward:
 * writes d(loss)/dx into dx (never read: it needs no zeroing) and adds the
 * head's parameter gradients (final norm, embedding) into m->grads, with
 * per-token weight row_weight.
 * logits_out != NULL (forward only, n_tiles must be 1) copies the logits.
 * On a measuring tracker it only allocates and frees its buffers and counts
 * st->total_weights from the targets. */
/* hp / hg: the head unit's parameters and gradients ([V*d] embedding then
 * [d] final norm); hg may be NULL when dx is. */
gt_rc gt__head_run(gt_model *m, const float *hp, float *hg, const float *x, const int32_t *targets, int64_t N,
                   int n_tiles, float row_weight, float *dx, float *logits_out, gt_loss_stats *st, gt_err *err);

#endif
