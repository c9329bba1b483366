/* Low-rank adapters (LoRA) beside a layer's projections.
 *
 * A projection y = x W^T (W [out, in], frozen or not) with an adapter
 * computes y = x W^T + scale * (drop(x) A^T) B^T, A [r, in] and B [out, r]
 * trainable float32 tensors of the layout ("<base name minus .weight>.lora_A.weight",
 * appended at the end of the tensor table, placed in the base's unit), scale
 * lora_alpha / r (lora_use_rslora: lora_alpha / sqrt(r)), as PEFT computes
 * it. The adapters are added right after the base product, inside the same
 * forward op, so remat policies and activation slots are unchanged:
 * h = drop(x) A^T is recomputed in backward from the op's input.
 *
 * Adapted kinds: self_attn q/k/v/o_proj, mlp gate/up/down_proj (Gemma 3 and
 * Gemma 4, the MoE layers' shared expert included) and Gemma 4's per-layer
 * per_layer_input_gate and per_layer_projection. Not adapted (refused when
 * lora_module_path names them): embeddings, norms, the router, the routed
 * experts and the model-level PLE projection.
 *
 * Dropout (lora_dropout = p > 0, training steps only) zeroes element
 * (row, column) of x with probability p and scales the rest by 1/(1 - p);
 * the mask is a counter-based hash of (seed, step, micro-batch, layer,
 * slot, global token row, column), so backward, a recompute, any device
 * count and any rank split draw the same one.
 *
 * Products go through the model's precision (linear.h): bf16 inputs with
 * float32 sums under dtype=bfloat16, and h rounded to bf16 as an
 * activation. On a measuring tracker the temporaries are allocated and
 * freed alike, with no arithmetic. */
#ifndef GEMTRAIN_LORA_H
#define GEMTRAIN_LORA_H

#include <stdint.h>

#include "base/common.h"
#include "config/config.h"
#include "model/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a layer slot may carry an adapter (a 2-D projection). */
int gt_lora_slot_supported(gt_lparam s);

/* y [N, out] += scale * drop(x) A^T B^T for slot s of io->L (nothing when
 * the slot has no adapter or adapters are off), then rounded to bf16 under
 * dtype=bfloat16 (y is the projection's output). x16, when given, is x's
 * bf16 copy (gt__matmul_a16, model/linear.h), read instead of x (with
 * dropout, drop(x) is drawn from the copy as bf16 patterns). A temporary that cannot be allocated sets *io->fail (as
 * the routed experts' scratch does). */
void gt_lora_forward(const gt_layer_io *io, gt_lparam s, const float *x, const uint16_t *x16, float *y, int64_t N,
                     int64_t in, int64_t out);
/* The adapter's backward: dA and dB added into the layer's gradient block
 * (grads; nothing when NULL), dx [N, in] += the adapter's input gradient.
 * dy [N, out] is the projection's output gradient, or when dy is NULL
 * its bf16 patterns dy16 (bf16 products, which round it anyway); the
 * input is x, or when x is NULL its bf16 copy x16 (a saved input the
 * layer keeps in bf16: gt_layer_reads_b16). */
gt_rc gt_lora_backward(const gt_layer_io *io, gt_lparam s, float *grads, const float *x, const uint16_t *x16,
                       const float *dy, const uint16_t *dy16, float *dx, int64_t N, int64_t in, int64_t out,
                       gt_err *err);

/* The dropout mask's keep decision for one element (1 keep, 0 drop), as
 * forward and backward draw it: for tests and references. */
int gt_lora_keep(const gt_model *m, int layer, int slot, int64_t row, int64_t col);

/* The scale alpha / r (rslora: alpha / sqrt(r)) of a config. */
float gt_lora_scale(const gt_config *c);

/* Initialisation as PEFT's default: A ~ U(-1/sqrt(in), 1/sqrt(in))
 * (kaiming_uniform with a = sqrt(5)), B = 0; `stream` seeds A's values. */
void gt_lora_init_tensor(const gt_tensor_info *t, float *p, uint64_t stream);

#ifdef __cplusplus
}
#endif
#endif
