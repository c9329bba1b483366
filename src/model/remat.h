/* Remat policies: which activation slots of a layer outlive its forward.
 *
 * MaxText names the tensors a policy may keep (query_proj, key_proj,
 * value_proj, context, out_proj, mlpwi_0, mlpwi_1, mlpwo); the layer input
 * (decoder_layer_input, the carry) is always kept. A kept tensor keeps the
 * small statistic its op produces with it (q's norm rstd, context's
 * log-sum-exp), so keeping a tensor never forces its op to run again.
 * remat_policy=none keeps every slot: nothing is recomputed. */
#ifndef GEMTRAIN_REMAT_H
#define GEMTRAIN_REMAT_H

#include "base/common.h"
#include "config/config.h"
#include "model/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gt_remat itself is defined in model.h: the model carries its policy. */
gt_rc gt_remat_from_config(gt_remat *r, const gt_config *cfg, gt_err *err);
/* Does layer l start a remat block? (always, with layer scope) */
int gt_remat_block_start(const gt_remat *r, long long layer);
/* Whether layer `layer`'s input (the carry) is kept for its backward: at a
 * block's start, and under remat_policy=none at every layer. */
int gt_remat_carry_kept(const gt_remat *r, long long layer);
/* What a training step does with slot k of layer L after the layer's
 * forward: the policy's choice, except that the carry is kept at every
 * boundary and a KV donor always keeps key_proj and value_proj (and their
 * statistics) on the device until its own backward. */
gt_save_mode gt_remat_slot_mode(const gt_remat *r, const gt_layer_desc *L, int k);

#ifdef __cplusplus
}
#endif
#endif
