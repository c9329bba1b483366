/* One decoder layer, forward and backward, over named activation slots.
 *
 * The forward writes every intermediate into the slot buffers it is given;
 * which of them outlive the forward (saved) and which are dropped and
 * recomputed in backward is the remat policy's business, not the layer's.
 * The slot names follow MaxText's checkpoint names where MaxText has one
 * (query_proj, key_proj, value_proj, context, out_proj, mlpwi_0, mlpwi_1,
 * mlpwo); the rest are the small statistics backward needs.
 *
 * Gemma 4 layers (descriptor flag gemma4) differ only in their op list: a
 * scale-free v-norm after the value projection (or of the raw key projection
 * when K = V), the per-layer input (PLE) block after the MLP, and
 * layer_scalar on the whole output. A KV-shared layer runs no K/V ops: it
 * reads its donor's key_proj / value_proj (io->kv_k, io->kv_v) and adds the
 * gradient it sends them into io->dkv_k / io->dkv_v, which the donor's own
 * backward then adds to its K/V gradient. Slots a layer kind does not have
 * (gt_layer_has_slot) are never allocated.
 *
 * MoE layers (spec 3.6) replace the plain feed-forward tail: the dense
 * mlp.* is the shared expert, post_feedforward_layernorm_1 normalises its
 * mlpwo (shared), the routed block (kernels/moe.h) turns x1 into its
 * normalised output, and post_feedforward_layernorm takes shared + routed.
 * With expert parallelism (m->ep) the routed op all-gathers its group's x1
 * rows, computes its experts for all of them, all-reduces the partial sums
 * and keeps its own rows; backward all-gathers d(routed) and
 * reduce-scatters d(x1) back.
 *
 * On a measuring tracker (gt_mem_measuring(m->mem)) forward and backward
 * take and free exactly the scratch they would (the routed block's scratch
 * is sized for the worst case, every slot on this device, never by the
 * routing) but run no kernel, touch no buffer and exchange nothing with the
 * expert group: the plan measures the real schedule this way. */
#ifndef GEMTRAIN_LAYER_H
#define GEMTRAIN_LAYER_H

#include <stdint.h>

#include "base/common.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_act {
  GT_A_X_IN = 0, /* [N,d]  decoder_layer_input: the carry, always kept */
  GT_A_A_RSTD,   /* [N]    input norm statistics */
  GT_A_A,        /* [N,d]  normalized input */
  GT_A_Q_RAW,    /* [N,H*hd] q before q_norm */
  GT_A_K_RAW,    /* [N,K*hd] k before k_norm */
  GT_A_Q_RSTD,   /* [N*H] */
  GT_A_K_RSTD,   /* [N*K] */
  GT_A_Q,        /* [N,H*hd] query_proj (after norm and RoPE) */
  GT_A_K,        /* [N,K*hd] key_proj */
  GT_A_V,        /* [N,K*hd] value_proj */
  GT_A_CTX,      /* [N,H*hd] context */
  GT_A_LSE,      /* [B*H*T]  attention log-sum-exp */
  GT_A_O,        /* [N,d]  out_proj */
  GT_A_O_RSTD,   /* [N] */
  GT_A_X1,       /* [N,d]  residual after attention */
  GT_A_M_RSTD,   /* [N] */
  GT_A_M,        /* [N,d]  pre-FFW normalized */
  GT_A_GATE,     /* [N,F]  mlpwi_0 */
  GT_A_UP,       /* [N,F]  mlpwi_1 */
  GT_A_ACT,      /* [N,F]  gelu(gate) * up */
  GT_A_F,        /* [N,d]  mlpwo */
  GT_A_F_RSTD,   /* [N] */
  /* Gemma 4 */
  GT_A_V_RAW,    /* [N,K*hd] v before v_norm (own v_proj) */
  GT_A_V_RSTD,   /* [N*K]  v_norm statistics */
  GT_A_X2,       /* [N,d]  residual after the MLP */
  GT_A_PLE_GATE, /* [N,P]  per_layer_input_gate output */
  GT_A_PLE_ACT,  /* [N,P]  gelu(gate) * per-layer input */
  GT_A_PLE_PROJ, /* [N,d]  per_layer_projection output */
  GT_A_PLE_RSTD, /* [N] */
  GT_A_X3,       /* [N,d]  residual after the PLE block (PLE layers) */
  /* Gemma 4 mixture of experts */
  GT_A_SHARED,      /* [N,d]  post_feedforward_layernorm_1 of the shared expert's mlpwo */
  GT_A_SHARED_RSTD, /* [N] */
  GT_A_MOE_IN,      /* [P*N,d] the expert group's MoE inputs, gathered (expert parallelism only) */
  GT_A_MOE_SAVED,   /* the routed block's saved state (gt_moe_saved_bytes, as floats) */
  GT_A_MOE_OUT,     /* [N,d]  routed output, after post_feedforward_layernorm_2 */
  GT_A_MOE_SUM,     /* [N,d]  shared + routed: the input of post_feedforward_layernorm */
  GT_A_NSLOTS
} gt_act;

_Static_assert(GT_A_NSLOTS <= GT_MAX_ACT_SLOTS, "gt_remat.slot is too small");

const char *gt_act_name(gt_act a);
/* Does slot a hold an activation tensor (rounded to bf16 and saved in 2
 * bytes under dtype=bfloat16), rather than float32 statistics (norm rstd,
 * log-sum-exp) or the routed block's saved state? */
int gt_act_is_tensor(gt_act a);
/* Does this layer kind have slot a? (Absent slots are never allocated.) */
int gt_layer_has_slot(const gt_layer_desc *L, gt_act a);
/* Elements of one slot for a layer at batch B, length T. */
int64_t gt_act_numel(const gt_model *m, const gt_layer_desc *L, gt_act a, int64_t B, int64_t T);

typedef struct gt_layer_io {
  const gt_model *m;
  const gt_layer_desc *L;
  int B, T;
  const int32_t *pos; /* [B*T] positions (RoPE) */
  const int32_t *seg; /* [B*T] segment ids or NULL */
  const float *params; /* this layer's own parameter block (its unit) */
  /* where the products read the projections at the same offsets, when
   * params leaves them out (gt_param_view.projections); NULL: params */
  const float *mparams;
  /* KV sharing: a shared layer reads its donor's K and V ([N,K*hd], after
   * norm and RoPE) and adds their gradients into dkv_k / dkv_v; a donor adds
   * dkv_k / dkv_v (what its readers sent) into its own K/V gradient. */
  const float *kv_k, *kv_v;
  float *dkv_k, *dkv_v;
  /* PLE: this layer's per-layer input, rows of ple_dim at stride ple_stride
   * (the model-wide [N, L*ple_dim] buffer from column l*ple_dim); backward
   * adds its gradient into dple at the same place. */
  const float *ple;
  float *dple;
  int64_t ple_stride;
  /* MoE: the forward stores this layer's load-balance loss in *moe_lb (when
   * not NULL; recomputes pass NULL); backward takes dL/d(lb) from the
   * model (m->moe_dlb). The routed block allocates its scratch from m->mem:
   * if that fails, *fail is set to GT_ERR_NOMEM (fail NULL: not reported). */
  float *moe_lb;
  gt_rc *fail;
  /* dtype=bfloat16, slots kept in 2 bytes ([GT_A_NSLOTS], NULL: none).
   * Forward: b16[a] set for a slot gt_layer_writes_b16 names is written
   * with acts[a]'s bf16 copy by the op that computes it. Backward: a slot
   * gt_layer_reads_b16 names, with acts[a] NULL, is read from b16[a]. */
  uint16_t *const *b16;
} gt_layer_io;

/* dtype=bfloat16: does the forward write slot a's bf16 copy itself, given
 * io->b16[a] (the sweep that computes it, or reads it anyway, packs it
 * while it is in cache: the norms' inputs and outputs, the q and k norms'
 * with RoPE, the attention's output, the MLP's gate, up and activation)? */
int gt_layer_writes_b16(const gt_layer_desc *L, gt_act a);
/* Can the backward read slot a as bf16 (io->b16[a], acts[a] NULL) when the
 * ops in `ops` run first to recompute what was dropped (they read floats)
 * and kept[s] says which slots are kept in bf16 on the device? The MLP's
 * gate and up together (the GeGLU's backward); the norms' inputs (the
 * layer input but with per-layer embeddings, o, x1 but before a routed
 * block, f, the raw q and k); and the inputs only projections without
 * adapters and the attention's backward read (their weight gradients,
 * with bf16 products that pack a stored operand in place): the
 * attention's and the MLP's normalised inputs, the GeGLU activation and
 * the attention's context. */
int gt_layer_reads_b16(const gt_model *m, const gt_layer_desc *L, gt_act a, uint32_t ops,
                       const uint8_t kept[GT_A_NSLOTS]);

/* acts[s] must point at a buffer of gt_act_numel floats for every slot;
 * acts[GT_A_X_IN] is read, the rest written; x_out [N,d] is written. */
void gt_layer_forward(const gt_layer_io *io, float *const acts[GT_A_NSLOTS], float *x_out);
/* Run only the ops in `ops` (a bit set over the forward's ops, in forward
 * order; ops the layer kind does not have are skipped). The op that
 * produces the layer output also writes x_out. */
void gt_layer_forward_ops(const gt_layer_io *io, float *const acts[GT_A_NSLOTS], uint32_t ops, float *x_out);
/* Every op of this layer kind. */
uint32_t gt_layer_all_ops(const gt_layer_desc *L);
/* The op that writes x_out (Gemma 3: the post-FFW residual, which also
 * writes the last norm's statistic; Gemma 4: layer_scalar). */
uint32_t gt_layer_output_op(const gt_layer_desc *L);
/* The attention op (reads query_proj, key_proj, value_proj; writes context).
 * The ops below its bit produce q, k and v; the ops above it consume the
 * context. Decoding runs the two halves around its own cached attention. */
uint32_t gt_layer_attention_op(void);
/* The routed-experts op of a MoE layer (0 bits on other kinds' op lists):
 * it takes scratch from m->mem (gt_layer_moe_temps) each time it runs. */
uint32_t gt_layer_moe_op(void);
/* The ops to re-run when only the slots with have[s] = 1 were kept: every op
 * with a missing output (its inputs are then kept or re-run before it).
 * Slots the kind lacks count as kept. */
uint32_t gt_layer_recompute_ops(const gt_layer_desc *L, const uint8_t have[GT_A_NSLOTS]);
/* The slots those ops write. */
void gt_layer_ops_outputs(const gt_layer_desc *L, uint32_t ops, uint8_t out[GT_A_NSLOTS]);
/* The temporaries gt_layer_backward allocates, in order: the residual
 * gradient [N,d] (held throughout), then one after another (each freed
 * before the next) the PLE block's, the MLP's and the attention's (0 when a
 * kind has none). The memory plan replays exactly these. */
void gt_layer_backward_temps(const gt_model *m, const gt_layer_desc *L, int64_t N, int64_t *resid, int64_t *ple,
                             int64_t *ffw, int64_t *attn);
/* MoE layers: the scratch (floats) the routed block takes from m->mem in
 * its forward (once per run of its op) and inside the backward (while the
 * feed-forward's temporaries are held); 0 for other kinds. */
void gt_layer_moe_temps(const gt_model *m, const gt_layer_desc *L, int64_t B, int64_t T, int64_t *fwd, int64_t *bwd);
/* Writes d(loss)/d(x_in) into dx_in (never read: it needs no zeroing) and
 * adds the parameter gradients into grads (this layer's own gradient block).
 * Temporaries come from m->mem. */
gt_rc gt_layer_backward(const gt_layer_io *io, float *const acts[GT_A_NSLOTS], const float *dx_out,
                        float *dx_in, float *grads, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
