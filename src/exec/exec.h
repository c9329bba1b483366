/* gemtrain executor: a scan over the model's layer list, forward then
 * backward in reverse, plus the output head (final norm, tied logits,
 * cross-entropy) processed in num_vocab_tiling row tiles.
 *
 * Loss follows MaxText (train.py): per-token xent in float32, masked where
 * the target is < 0; total_weights = unmasked tokens; loss = sum / total. */
#ifndef GEMTRAIN_EXEC_H
#define GEMTRAIN_EXEC_H

#include <stdint.h>

#include "base/common.h"
#include "model/batch.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward and backward of one micro-batch; ADDS gradients into m->grads.
 * MoE layers add their load-balance losses to st->moe_lb_sum, and each
 * one's gradient with weight m->moe_dlb (so the step's loss is the LM loss
 * plus moe_dlb times that sum: the mean over MoE layers on one device).
 * Each token's loss is weighted by row_weight (1/total_weights of the whole
 * step, so accumulated micro-batches give the gradient of the step's mean). */
gt_rc gt_exec_forward_backward(gt_model *m, const gt_batch *b, int num_vocab_tiling, float row_weight,
                               gt_loss_stats *st, gt_err *err);
/* Forward only: the loss (eval). */
gt_rc gt_exec_forward_loss(gt_model *m, const gt_batch *b, int num_vocab_tiling, gt_loss_stats *st,
                           gt_err *err);
/* Forward only: all logits [B*T, V] into a caller buffer (tests, decoding). */
gt_rc gt_exec_forward_logits(gt_model *m, const gt_batch *b, float *logits, gt_err *err);

/* Count of targets >= 0 in a batch. */
int64_t gt_batch_total_weights(const gt_batch *b);

#ifdef __cplusplus
}
#endif
#endif
