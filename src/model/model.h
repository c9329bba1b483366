/* gemtrain model graph: a list of layer descriptors built from the config,
 * and the parameter layout (every tensor named, in one flat buffer per state
 * class: params, grads, and later optimizer moments).
 *
 * A layer kind is data, not code paths in the executor: each descriptor
 * carries its own head counts, window, RoPE table and parameter range, so new
 * kinds (other head dims, shared K/V, MoE) add descriptors, not special cases.
 * Each layer's parameters are contiguous, so a layer can be gathered, saved or
 * sharded as one range. Matrices use Hugging Face's [out, in] layout. */
#ifndef GEMTRAIN_MODEL_H
#define GEMTRAIN_MODEL_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "base/prof.h"
#include "model/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_layer_kind { GT_LAYER_LOCAL = 0, GT_LAYER_GLOBAL = 1 } gt_layer_kind;

/* Per-layer parameter slots. A kind that lacks a tensor leaves it at -1. */
typedef enum gt_lparam {
  GT_P_INPUT_NORM = 0, /* [d]        input_layernorm */
  GT_P_WQ,             /* [H*hd, d]  self_attn.q_proj */
  GT_P_WK,             /* [K*hd, d]  self_attn.k_proj */
  GT_P_WV,             /* [K*hd, d]  self_attn.v_proj */
  GT_P_Q_NORM,         /* [hd]       self_attn.q_norm */
  GT_P_K_NORM,         /* [hd]       self_attn.k_norm */
  GT_P_WO,             /* [d, H*hd]  self_attn.o_proj */
  GT_P_POST_ATTN_NORM, /* [d]        post_attention_layernorm */
  GT_P_PRE_FFW_NORM,   /* [d]        pre_feedforward_layernorm */
  GT_P_W_GATE,         /* [F, d]     mlp.gate_proj */
  GT_P_W_UP,           /* [F, d]     mlp.up_proj */
  GT_P_W_DOWN,         /* [d, F]     mlp.down_proj */
  GT_P_POST_FFW_NORM,  /* [d]        post_feedforward_layernorm */
  /* Gemma 4 */
  GT_P_V_NORM,         /* [hd]       self_attn.v_norm (v_norm_with_scale only) */
  GT_P_PLE_GATE,       /* [P, d]     per_layer_input_gate */
  GT_P_PLE_PROJ,       /* [d, P]     per_layer_projection */
  GT_P_PLE_NORM,       /* [d]        post_per_layer_input_norm */
  GT_P_LAYER_SCALAR,   /* [1]        layer_scalar (layer_scalar_trainable only) */
  /* Gemma 4 mixture of experts (spec 3.6; mlp.* above is the shared expert) */
  GT_P_ROUTER_PROJ,    /* [E, d]     router.proj.weight */
  GT_P_ROUTER_SCALE,   /* [d]        router.scale */
  GT_P_EXPERT_SCALE,   /* [E]        router.per_expert_scale */
  GT_P_PRE_FFW_NORM_2, /* [d]        pre_feedforward_layernorm_2 (routed input) */
  GT_P_POST_FFW_NORM_1,/* [d]        post_feedforward_layernorm_1 (shared output) */
  GT_P_POST_FFW_NORM_2,/* [d]        post_feedforward_layernorm_2 (routed output) */
  GT_P_EXPERT_GATE_UP, /* [E, 2F, d] experts.gate_up_proj (last but one: see local_count) */
  GT_P_EXPERT_DOWN,    /* [E, d, F]  experts.down_proj (last) */
  GT_P_NSLOTS
} gt_lparam;

typedef struct gt_layer_desc {
  int index;
  gt_layer_kind kind;
  int window;           /* keys visible per query; 0 = global (causal only) */
  int n_heads, n_kv_heads, head_dim, mlp_dim;
  float q_scale;        /* query_pre_attn_scalar^-0.5 */
  /* Gemma 4 (all 0 / -1 on Gemma 3 layers) */
  int gemma4;           /* stored norm scales, scale-free v-norm, layer_scalar on the output */
  int k_eq_v;           /* v = v_norm(raw k): no v_proj */
  int kv_donor;         /* KV-shared layer: the layer whose K/V it reads; -1: its own */
  int kv_last_reader;   /* a donor: the last layer reading its K/V; -1: not a donor */
  int ple_dim;          /* per-layer input width (0: no PLE) */
  float layer_scalar;   /* the constant factor when layer_scalar is not trained */
  /* mixture of experts (n_experts 0: a dense feed-forward) */
  int n_experts, experts_per_tok, moe_mlp_dim;
  float lb_weight;      /* load_balance_loss_weight */
  int moe_ep;           /* expert-parallel group this device runs the layer in (1: every expert here) */
  int rope;             /* index of this layer's RoPE table in the model */
  int64_t param_offset; /* first element of this layer's range */
  int64_t param_count;
  int64_t slot_offset[GT_P_NSLOTS]; /* absolute offsets into the flat buffer, -1 if absent */
  /* This device's block of the layer: with expert parallelism a MoE layer
   * holds only its E/P experts (the expert tensors are the layer's last two,
   * so every other tensor keeps its place); local_count elements, slot s at
   * slot_rel[s] (-1 if absent). Without it, the whole layer. */
  int64_t local_count;
  int64_t slot_rel[GT_P_NSLOTS];
  /* the parameter store (store.h): frozen[s] when slot s does not train;
   * the trainable tensors lead the block, train_count elements in all */
  unsigned char frozen[GT_P_NSLOTS];
  int64_t train_count;
  /* each slot's storage (gt_store_dtype; kernels/quant.h's gt_qtype has the
   * same values): GT_STORE_F32 unless a frozen base is stored quantized */
  unsigned char qtype[GT_P_NSLOTS];
  /* low-rank adapters (model/lora.h): slot s's A [r, in] and B [out, r]
   * at these places of the layer's block, -1 when s has none */
  int64_t lora_a_rel[GT_P_NSLOTS], lora_b_rel[GT_P_NSLOTS];
} gt_layer_desc;

typedef struct gt_rope_desc {
  double base, scale, fraction;
  int head_dim;
} gt_rope_desc;

/* gt_tensor_info.lora */
enum { GT_LORA_NONE = 0, GT_LORA_A = 1, GT_LORA_B = 2 };

typedef struct gt_tensor_info {
  char name[96];     /* Hugging Face name without the "model." prefix */
  int ndim;
  int64_t shape[4];
  int64_t offset;    /* word offset into the flat buffer */
  int64_t numel;     /* elements (the logical size) */
  int64_t words;     /* 4-byte words it occupies in the flat buffer: numel for
                      * float32, kernels/quant.h's gt_q_words when stored
                      * quantized (offsets, units and n_params count words) */
  int layer;         /* -1 for embedding and final norm */
  int slot;          /* its layer slot (gt_lparam); an adapter: its base's; -1 in the head */
  int lora;          /* 0: a model tensor; GT_LORA_A or GT_LORA_B: an adapter of `slot` (model/lora.h) */
  /* the store (store.h) */
  gt_store_dtype dtype;
  gt_store_role role;
  gt_store_group group;
} gt_tensor_info;

#define GT_MAX_ROPE 4

/* Remat policy in executable form (src/model/remat.c builds it; see model/remat.h).
 * slot[s] says what becomes of activation slot s (gt_act in layer.h) after
 * a layer's forward: recomputed in backward, kept, or kept in the host pool. */
#define GT_MAX_ACT_SLOTS 40
typedef enum gt_save_mode { GT_SAVE_REMAT = 0, GT_SAVE_DEVICE = 1, GT_SAVE_OFFLOAD = 2 } gt_save_mode;
typedef struct gt_remat {
  gt_save_mode slot[GT_MAX_ACT_SLOTS];
  int block_scope; /* 1: one boundary per layer_pattern block */
  int period;      /* layers per block */
  int none;        /* remat_policy=none: keep everything, recompute nothing */
} gt_remat;

/* Where the executor finds each unit's parameters and puts its gradients
 * (see gt_model_unit). NULL in gt_model.view: the model's own flat buffers.
 * The sharded executor installs one that all-gathers a unit's shards on
 * acquire and reduce-scatters its gradients on release. */
typedef struct gt_param_view {
  void *ctx;
  /* phase 0: forward (params only); 1: backward (params, and a zeroed
   * gradient block the backward adds into). */
  gt_rc (*acquire)(void *ctx, int64_t unit, int phase, const float **params, float **grads, gt_err *err);
  /* Optional (NULL: none): where unit u's projections are read
   * (gt_model_tensor_is_projection), at the same offsets as acquire's
   * block, when that block leaves them out; NULL for a unit whose block has
   * them. Read it while the unit is acquired: the weights there are the
   * master's, which the optimizer changes between steps. */
  const float *(*projections)(void *ctx, int64_t unit);
  /* The unit's parameters are no longer needed (its gradients may be). */
  void (*drop_params)(void *ctx, int64_t unit);
  /* Done with the unit: forward frees the gathered copy; backward also
   * reduce-scatters and frees the gradient block. */
  void (*release)(void *ctx, int64_t unit, int phase);
} gt_param_view;

/* Expert parallelism as a layer sees it: collectives among the devices of
 * its expert group (size P, this device's rank), n elements in all (the
 * group's concatenation, in rank order: each member contributes n / P). */
typedef struct gt_expert_comm {
  void *ctx;
  int size, rank;
  void (*all_gather)(void *ctx, const float *own, float *all, int64_t n);
  void (*all_reduce)(void *ctx, float *buf, int64_t n);
  void (*reduce_scatter)(void *ctx, const float *all, float *own, int64_t n);
} gt_expert_comm;

typedef struct gt_model {
  /* dimensions */
  int64_t vocab, d, n_layers;
  float eps;
  float norm_offset;  /* 1: Gemma 3 (1 + w); 0: Gemma 4 (stored scale) */
  float emb_scale;    /* sqrt(d) in the compute dtype */
  /* precision (docs/precision.md): bf16_act = dtype=bfloat16, every
   * activation a forward op writes is rounded to bf16 (kept in float32
   * storage while a layer runs, in 2 bytes when saved) and the compute
   * reads a bf16-rounded copy of the weights; bf16_mm = matmul inputs
   * rounded to bf16 with float32 accumulation (dtype=bfloat16 and
   * matmul_precision=default). Statistics, the loss and all gradients stay
   * float32. */
  int bf16_act, bf16_mm;
  float softcap;      /* 0 = off */
  float z_loss;       /* z_loss_multiplier: weight of the z-loss on the head's log-sum-exp (0 = off) */
  int64_t max_pos;    /* RoPE tables cover positions [0, max_pos) */
  /* graph */
  gt_layer_desc *layers;
  int n_rope;
  gt_rope_desc rope[GT_MAX_ROPE];
  /* layout */
  int n_tensors;
  gt_tensor_info *tensors;
  int64_t n_params;   /* words of the flat buffer: the parameter count while every tensor is float32 */
  /* the store: elements that train (the rest is frozen), and of them the
   * head unit's (its leading ones) */
  int64_t n_trainable, head_train_count;
  int n_frozen_tensors;
  /* low-rank adapters (enable_lora; model/lora.h): how many tensors and
   * elements, their rank and output scale, and dropout. The dropout mask of
   * a token is a hash of (lora_seed, lora_step, lora_micro, layer, slot,
   * its global row, column): the trainer sets the step and micro-batch, the
   * mesh the global token row of this device's first token (lora_row0), and
   * lora_train says a training step runs (eval and decoding: no dropout). */
  int n_lora_tensors;
  int64_t n_lora_params;
  int lora_rank;
  float lora_scale, lora_dropout;
  uint64_t lora_seed;
  int lora_train;
  int lora_off; /* the adapters are skipped: the frozen base alone (preference tuning's reference) */
  int64_t lora_step, lora_row0;
  int lora_micro;
  int64_t embed_offset, final_norm_offset;
  /* per-layer embeddings (Gemma 4 small), in the head unit after the final
   * norm: table [ple_vocab, L*ple_dim], projection [L*ple_dim, d], norm
   * [ple_dim]; offsets -1 without PLE */
  int64_t ple_dim, ple_vocab;
  int64_t ple_embed_offset, ple_proj_offset, ple_norm_offset;
  /* the head unit's matrices' storage (gt_store_dtype; see the layers' qtype) */
  unsigned char embed_qtype, ple_embed_qtype, ple_proj_qtype;
  /* storage (NULL until gt_model_alloc) */
  gt_mem *mem;
  float *params;
  float *grads;
  float *rope_cos[GT_MAX_ROPE], *rope_sin[GT_MAX_ROPE];
  gt_prof *prof; /* optional time accounting (NULL: off) */
  /* per-token losses out of the head (NULL: not wanted): the head writes
   * each token's cross-entropy (without the z-loss term; 0 for a masked
   * target) at its index in the batch it runs, for scoring sequences one
   * by one (eval/) */
  float *token_loss;
  /* preference mode of the head (model/head.h; NULL: the LM loss) */
  struct gt_pref_head *pref;
  /* execution: the remat policy (gt_model_build sets it from the config)
   * and what offloading cost */
  gt_remat remat;
  gt_param_view *view; /* NULL: own buffers */
  /* mixture of experts: MoE layers, and the weight of each layer's
   * load-balance loss in the loss (1 / n_moe_layers on one device; the
   * sharded executor divides by its token groups too) */
  int n_moe_layers;
  float moe_dlb;
  int ep_size, ep_rank; /* expert axis (gt_model_set_expert_shard); 1, 0: all experts here */
  gt_expert_comm *ep;   /* its collectives (NULL when ep_size is 1) */
  long long offload_bytes;  /* bytes copied to and from the host pool */
  double offload_seconds;   /* time spent copying them */
} gt_model;

/* Build the graph and the layout from a validated config; allocates only the
 * small descriptor tables (plain malloc), no tensors. */
gt_rc gt_model_build(gt_model *m, const gt_config *cfg, gt_err *err);
/* Allocate params, grads and RoPE tables through the tracked allocator. */
gt_rc gt_model_alloc(gt_model *m, gt_mem *mem, gt_err *err);
/* Params and RoPE tables only, no gradient buffer (m->grads stays NULL):
 * for forward passes and conversion. */
gt_rc gt_model_alloc_inference(gt_model *m, gt_mem *mem, gt_err *err);
/* Only the RoPE tables (a sharded device keeps its parameters elsewhere). */
gt_rc gt_model_alloc_tables(gt_model *m, gt_mem *mem, gt_err *err);
/* dtype=bfloat16: rounds m->params to bf16 in place, turning them into the
 * compute copy the trainer gathers (for a model that only computes: a
 * logit check, a test). Nothing in float32 runs. */
void gt_model_round_params(gt_model *m);
/* dtype=bfloat16: is tensor i read from the master weights as they are
 * (gt_param_view.projections)? A layer's projection, which only the bf16
 * products read (they round their operands as they pack them), or the
 * embedding table of a model without PLE: the logits' product rounds it,
 * and the executor rounds the rows its lookup reads. */
int gt_model_tensor_is_projection(const gt_model *m, int i);
/* Does unit u hold any (every layer; the head without PLE)? */
int gt_model_unit_has_projections(const gt_model *m, int64_t u);
/* The rounded copy of unit u's n elements (all float32, the whole unit)
 * from src into dst, but for its projections (above), which dst leaves
 * unwritten. */
void gt_model_round_unit_but_projections(const gt_model *m, int64_t u, float *dst, const float *src, int64_t n);
/* Deterministic initialisation from a seed (see weight_init_scale). A
 * stored-quantized tensor is drawn a chunk of rows at a time into a scratch
 * from the tracked allocator (model/qstore.h): GT_ERR_NOMEM when it cannot
 * be had, the tensors from that one on then left partly written. No
 * message: gt_model_init_tensor names the tensor. */
gt_rc gt_model_init_params(gt_model *m, uint64_t seed, double init_scale);
/* The same for tensor i alone, into p (its t->words words, wherever they
 * live): a sharded owner initialises its shards in place. GT_ERR_NOMEM
 * naming the tensor as above. */
gt_rc gt_model_init_tensor(const gt_model *m, int i, uint64_t seed, double init_scale, float *p, gt_err *err);
/* Norm weights w (used as 1 + w) drawn from normal(0, std), seeded: a
 * random model whose norms are not the identity, for tests and fixtures. */
void gt_model_init_norms(gt_model *m, uint64_t seed, double std);
void gt_model_zero_grads(gt_model *m);
void gt_model_free(gt_model *m);

/* Units: the ranges the executor gathers and shards. Unit 0 is the head
 * (embedding, then the final norm: [V*d + d], then the PLE tensors when the
 * model has them); unit 1 + l is layer l. */
static inline int64_t gt_model_n_units(const gt_model *m) { return m->n_layers + 1; }
void gt_model_unit(const gt_model *m, int64_t u, int64_t *offset, int64_t *count);

/* Parameter count of a config without building anything large; the active
 * count is what one token uses (MoE: num_experts_per_tok routed experts). */
int64_t gt_model_count_params(const gt_config *cfg);
/* A built model's parameters: its tensors' elements (n_params counts the
 * flat buffer's words, fewer once the base is stored quantized). */
int64_t gt_model_numel(const gt_model *m);
int64_t gt_model_count_active_params(const gt_config *cfg);

/* Expert parallelism: this device holds experts [rank*E/P, (rank+1)*E/P) of
 * every MoE layer; sets each layer's local_count and slot_rel (and keeps the
 * full layout's offsets for init, export and checkpoints). */
void gt_model_set_expert_shard(gt_model *m, int P, int rank);
/* A unit's block on this device as pieces of the full layout: piece i is
 * full elements [full_off[i], +len[i]) at local_off[i] of the block
 * (relative to the unit's start). Returns the number of pieces (1 to 3). */
int gt_model_unit_pieces(const gt_model *m, int64_t u, int64_t full_off[3], int64_t local_off[3], int64_t len[3]);
/* Elements of the unit's block on this device, and how many leading ones are
 * the same on every rank of the expert axis (all but the owned experts). */
int64_t gt_model_unit_local(const gt_model *m, int64_t u);
int64_t gt_model_unit_replicated(const gt_model *m, int64_t u);
const gt_tensor_info *gt_model_find_tensor(const gt_model *m, const char *name);

/* Elements of unit u's block on this device that train: a prefix of the
 * block (gt_model_unit_local), the gradient block's size. */
int64_t gt_model_unit_trainable(const gt_model *m, int64_t u);
/* The gradient of the head-unit tensor at flat offset `offset` inside the
 * head's gradient block hg; NULL when hg is NULL or the tensor is frozen. */
float *gt_model_head_grad(const gt_model *m, float *hg, int64_t offset);
/* Checksum (gt_store_sum) of the frozen tensors' bytes in a flat buffer of
 * the layout, in table order; GT_STORE_SUM_INIT when nothing is frozen. */
uint64_t gt_model_frozen_sum(const gt_model *m, const float *params);
/* The same layout with every tensor trainable (the order without a mask):
 * a deep copy of the descriptors, no storage; free with gt_model_free. For
 * reading a source written without the mask. */
gt_rc gt_model_copy_unmasked(const gt_model *m, gt_model *out, gt_err *err);
/* The same with the n tensors named in `names` (one after another, each
 * ending in '\0') frozen and every other one trainable: the layout of a
 * checkpoint written under another mask. GT_ERR_CONFIG naming a name the
 * model lacks. */
gt_rc gt_model_copy_frozen(const gt_model *m, const char *names, int n, gt_model *out, gt_err *err);
/* The same with the frozen projections stored as q and the frozen lookup
 * tables as eq (a checkpoint written over a base stored otherwise;
 * model/qstore.h). */
gt_rc gt_model_copy_frozen_as(const gt_model *m, const char *names, int n, gt_store_dtype q, gt_store_dtype eq,
                              gt_model *out, gt_err *err);
/* Names (comma-separated, at most n bytes) of a few tensors, for messages. */
void gt_model_some_names(const gt_model *m, char *buf, size_t n);

/* Pointer to a layer's slot given the start of that layer's own block of
 * params or grads (wherever it lives: the flat buffer or a gathered copy);
 * NULL if the kind has no such tensor. */
static inline float *gt_layer_slot(const gt_layer_desc *L, float *layer_base, gt_lparam s) {
  return L->slot_rel[s] < 0 ? (float *)0 : layer_base + L->slot_rel[s];
}
/* Is s a projection: a matrix only the products read (gt__matmul_forward
 * and _backward), the slots LoRA adapts and a base may store quantized? */
static inline int gt_layer_slot_is_projection(gt_lparam s) {
  switch (s) {
    case GT_P_WQ: case GT_P_WK: case GT_P_WV: case GT_P_WO: case GT_P_W_GATE: case GT_P_W_UP: case GT_P_W_DOWN:
    case GT_P_PLE_GATE: case GT_P_PLE_PROJ:
      return 1;
    default:
      return 0;
  }
}
/* The same for a gradient block: NULL for a frozen tensor (no gradient, so
 * the op skips its weight-gradient product) and for no block at all. */
static inline float *gt_layer_grad(const gt_layer_desc *L, float *grads, gt_lparam s) {
  return !grads || L->slot_rel[s] < 0 || L->frozen[s] ? (float *)0 : grads + L->slot_rel[s];
}

#ifdef __cplusplus
}
#endif
#endif
