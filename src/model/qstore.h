/* A frozen base stored in lora_weight_qtype (bfloat16, int8 or nf4).
 *
 * The decision: a tensor is stored apart from float32 when it is frozen,
 * has two dimensions (a matrix: the projections, the tied embedding, the PLE
 * table and projection) and lora_weight_qtype is not float32. The
 * projections (the PLE projection among them) take lora_weight_qtype; the
 * lookup tables, the tied embedding (which is also the output head) and
 * Gemma 4's PLE table, take lora_embedding_qtype, whose auto is bfloat16
 * under int8 and nf4: Hugging Face's bitsandbytes integration replaces only
 * the Linear layers and keeps the embeddings and the tied head in the
 * compute dtype, so a QLoRA run there computes its logits with a bf16 head,
 * and the adapters trained here must see the same one. Everything else
 * stays float32: the norms and scalars (1-D), everything that trains (AdamW
 * updates it in place), and the MoE routed experts (3-D: kernels/moe.c
 * reads them as float32 rows).
 *
 * A stored tensor occupies gt_q_words words of the flat buffer (its
 * elements, then its float32 scales; kernels/quant.h) and is never read as
 * float32 in place: the products dequantize where they pack it, and the
 * lookups below dequantize one row at a time. Every reader takes the slot's
 * own storage (the layers' qtype, m->embed_qtype, ple_embed_qtype,
 * ple_proj_qtype), so a bf16 table beside nf4 projections needs nothing
 * more. Nothing rounds it to bf16 (it is already in its storage format; its
 * values are rounded where they are read). */
#ifndef GEMTRAIN_MODEL_QSTORE_H
#define GEMTRAIN_MODEL_QSTORE_H

#include <stdint.h>

#include "base/common.h"
#include "config/config.h"
#include "kernels/quant.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets each tensor's storage (dtype, words) and the slots' and the head's
 * qtype from the config (lora_weight_qtype, lora_embedding_qtype) and the
 * roles (called after the roles are set, before the layout is placed).
 * GT_ERR_CONFIG naming a bad qtype. */
gt_rc gt_qstore_decide(gt_model *m, const gt_config *c, gt_err *err);
/* The same with the storages given: every frozen projection matrix stored
 * as q, the frozen lookup tables (the tied embedding, the PLE table) as eq. */
void gt_qstore_apply(gt_model *m, gt_store_dtype q, gt_store_dtype eq);
/* lora_embedding_qtype=auto's storage of the tables beside projections
 * stored as q: bfloat16 under int8 and nf4, else q. */
gt_store_dtype gt_qstore_embed_default(gt_store_dtype q);
/* The frozen projections' storage, lora_weight_qtype (GT_STORE_F32 when
 * none is stored otherwise); the lookup tables do not count. */
gt_store_dtype gt_qstore_dtype(const gt_model *m);
/* The frozen lookup tables' storage (GT_STORE_F32 when they are float32 or
 * none is frozen). */
gt_store_dtype gt_qstore_embed_dtype(const gt_model *m);
/* Whether the tied embedding or the PLE table is frozen. */
int gt_qstore_has_frozen_table(const gt_model *m);
/* Scratch: quantizing part of a tensor, and converting between two
 * quantized storages, go through float32 a chunk of rows at a time in a
 * scratch of a few MiB from the tracked allocator (base/alloc.h, a tracker
 * of its own, category GT_MEM_TEMP), freed before returning; the functions
 * below that need one return GT_ERR_NOMEM naming the tensor when it cannot
 * be had, and the tensor's storage is then partly written. */

/* Tensor `from` stored at src into tensor `to` (the same name and shape,
 * perhaps another storage) at dst: copied, quantized or dequantized. */
gt_rc gt_qstore_convert(const gt_tensor_info *to, float *dst, const gt_tensor_info *from, const float *src, gt_err *err);

/* The view of tensor t stored at `base` (its first word). */
gt_qweight gt_qstore_view(const gt_tensor_info *t, const float *base);
/* Rows [r0, r0 + n) of tensor t (any storage) as float32 into out [n, cols]. */
void gt_qstore_rows(const gt_tensor_info *t, const float *base, int64_t r0, int64_t n, float *out);
/* Stores float32 rows [r0, r0 + n) of tensor t into its storage at base.
 * For a quantized tensor r0 * cols must be a multiple of GT_Q_NF4_BLOCK (and
 * n * cols too unless the rows end the tensor): gt_qstore_chunk_rows gives a
 * row count that keeps every chunk aligned. */
gt_rc gt_qstore_put_rows(const gt_tensor_info *t, float *base, int64_t r0, int64_t n, const float *src, gt_err *err);
int64_t gt_qstore_chunk_rows(const gt_tensor_info *t);
/* For tests: about n elements a chunk instead of 4 Mi (n <= 0: back to
 * 4 Mi), so a small tensor is worked a chunk at a time. Process-wide; set
 * it before any model exists. */
void gt_qstore_set_chunk_elems(int64_t n);
/* The tensor's columns: numel / shape[0]. */
static inline int64_t gt_qstore_cols(const gt_tensor_info *t) { return t->shape[0] > 0 ? t->numel / t->shape[0] : 0; }

/* The embedding lookup out[i] = E[tok[i]] * scale over a table stored as
 * qtype (gt_embedding_forward for float32). A quantized table's row is
 * dequantized, and with dtype=bfloat16 (m->bf16_act) rounded to bf16 before
 * the scale, as the float32 model's rounded copy of the same values is. */
void gt_qstore_lookup(const gt_model *m, int qtype, const float *table, int64_t rows, int64_t dim, const int32_t *tok,
                      int64_t n, float scale, float *out);

/* dtype=bfloat16: rounds words [from, from + n) of unit u's block (at
 * block, the unit's first word) to bf16, skipping quantized tensors. */
void gt_qstore_round_block(const gt_model *m, int64_t u, float *block, int64_t from, int64_t n);
/* Whether unit u holds quantized words. */
int gt_qstore_unit_quantized(const gt_model *m, int64_t u);
/* gt_store_dtype_name of gt_qstore_dtype: the projections' storage
 * ("float32" when nothing is stored otherwise); of gt_qstore_embed_dtype:
 * the lookup tables'. */
const char *gt_qstore_name(const gt_model *m);
const char *gt_qstore_embed_name(const gt_model *m);
/* The frozen base's storage for people: gt_qstore_name, followed by
 * ", embedding T" when the frozen lookup tables are stored otherwise
 * ("nf4, embedding bfloat16"). */
const char *gt_qstore_describe(const gt_model *m);

#ifdef __cplusplus
}
#endif
#endif
