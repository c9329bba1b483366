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

#include "gemtrain/alloc.h"
#include "gemtrain/common.h"
#include "gemtrain/config.h"
#include "gemtrain/prof.h"

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
  GT_P_NSLOTS
} gt_lparam;

typedef struct gt_layer_desc {
  int index;
  gt_layer_kind kind;
  int window;           /* keys visible per query; 0 = global (causal only) */
  int n_heads, n_kv_heads, head_dim, mlp_dim;
  float q_scale;        /* query_pre_attn_scalar^-0.5 */
  int rope;             /* index of this layer's RoPE table in the model */
  int64_t param_offset; /* first element of this layer's range */
  int64_t param_count;
  int64_t slot_offset[GT_P_NSLOTS]; /* absolute offsets into the flat buffer, -1 if absent */
} gt_layer_desc;

typedef struct gt_rope_desc {
  double base, scale, fraction;
} gt_rope_desc;

typedef struct gt_tensor_info {
  char name[96];     /* Hugging Face name without the "model." prefix */
  int ndim;
  int64_t shape[4];
  int64_t offset;    /* element offset into the flat buffer */
  int64_t numel;
  int layer;         /* -1 for embedding and final norm */
} gt_tensor_info;

#define GT_MAX_ROPE 4

/* Remat policy in executable form (src/remat.c builds it; see remat.h).
 * slot[s] says what becomes of activation slot s (gt_act in layer.h) after
 * a layer's forward: recomputed in backward, kept, or kept in the host pool. */
#define GT_MAX_ACT_SLOTS 32
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
  /* The unit's parameters are no longer needed (its gradients may be). */
  void (*drop_params)(void *ctx, int64_t unit);
  /* Done with the unit: forward frees the gathered copy; backward also
   * reduce-scatters and frees the gradient block. */
  void (*release)(void *ctx, int64_t unit, int phase);
} gt_param_view;

typedef struct gt_model {
  /* dimensions */
  int64_t vocab, d, n_layers;
  float eps;
  float norm_offset;  /* 1: Gemma 3 (1 + w); 0: Gemma 4 (stored scale) */
  float emb_scale;    /* sqrt(d) in the compute dtype */
  float softcap;      /* 0 = off */
  int64_t max_pos;    /* RoPE tables cover positions [0, max_pos) */
  /* graph */
  gt_layer_desc *layers;
  int n_rope;
  gt_rope_desc rope[GT_MAX_ROPE];
  /* layout */
  int n_tensors;
  gt_tensor_info *tensors;
  int64_t n_params;
  int64_t embed_offset, final_norm_offset;
  /* storage (NULL until gt_model_alloc) */
  gt_mem *mem;
  float *params;
  float *grads;
  float *rope_cos[GT_MAX_ROPE], *rope_sin[GT_MAX_ROPE];
  gt_prof *prof; /* optional time accounting (NULL: off) */
  /* execution: the remat policy (gt_model_build sets it from the config)
   * and what offloading cost */
  gt_remat remat;
  gt_param_view *view; /* NULL: own buffers */
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
/* Deterministic initialisation from a seed (see weight_init_scale). */
void gt_model_init_params(gt_model *m, uint64_t seed, double init_scale);
/* Norm weights w (used as 1 + w) drawn from normal(0, std), seeded: a
 * random model whose norms are not the identity, for tests and fixtures. */
void gt_model_init_norms(gt_model *m, uint64_t seed, double std);
void gt_model_zero_grads(gt_model *m);
void gt_model_free(gt_model *m);

/* Units: the ranges the executor gathers and shards. Unit 0 is the head
 * (embedding, then the final norm: [V*d + d]); unit 1 + l is layer l. */
static inline int64_t gt_model_n_units(const gt_model *m) { return m->n_layers + 1; }
void gt_model_unit(const gt_model *m, int64_t u, int64_t *offset, int64_t *count);

/* Parameter count of a config without building anything large. */
int64_t gt_model_count_params(const gt_config *cfg);
const gt_tensor_info *gt_model_find_tensor(const gt_model *m, const char *name);

/* Pointer to a layer's slot given the start of that layer's own block of
 * params or grads (wherever it lives: the flat buffer or a gathered copy);
 * NULL if the kind has no such tensor. */
static inline float *gt_layer_slot(const gt_layer_desc *L, float *layer_base, gt_lparam s) {
  return L->slot_offset[s] < 0 ? (float *)0 : layer_base + (L->slot_offset[s] - L->param_offset);
}

#ifdef __cplusplus
}
#endif
#endif
