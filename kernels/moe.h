/* The MoE kernel contract: the routed half of the Gemma 4 26b feed-forward
 * block (the Gemma spec (kept outside the repository), section 3.6), forward
 * and backward, float32.
 * The saved state's layout, allocation and the dimension check are the
 * model's (src/model/moe.h).
 *
 * Boundary. With h the residual after the attention add, [N = B*T, d]:
 *
 *   gate_in = RMSNorm_noscale(h) * router_scale * d^-0.5        \
 *   logits  = gate_in . Wr^T ; P = softmax(logits) (fp32)         | router
 *   top-k by logits (ties: lower expert index first)              |
 *   w_j     = P[e_j] / sum_i P[e_i] * per_expert_scale[e_j]      /
 *   rin     = RMSNorm(h) * pre_norm            (pre_feedforward_layernorm_2)
 *   sum     = sum_j w_j * Expert_{e_j}(rin),
 *             Expert_e(z) = (gelu_tanh(z Wg_e^T) * z Wu_e^T) Wd_e^T
 *   out     = RMSNorm(sum) * post_norm         (post_feedforward_layernorm_2)
 *   lb      = w_lb * E^2 * mean_{b,e}( f[b,e] * Pbar[b,e] )   (load balance)
 *
 * Every norm here is Gemma 4's: the stored scale itself, no +1. What this
 * module does NOT do, and the integrating layer does with the existing
 * kernels: pre_feedforward_layernorm and the shared dense expert (mlp.*),
 * post_feedforward_layernorm_1 on it, the sum shared + out,
 * post_feedforward_layernorm, the residual add and layer_scalar. The caller
 * also owns h and gets dL/dh added into its buffer.
 *
 * Routed experts run as grouped matmuls: the (token, slot) pairs of the owned
 * experts are counting-sorted by expert (stable: token order, then slot order
 * inside an expert), each expert runs one gt_sgemm per product over its own
 * rows (gate and up as one, with the [2F, d] gate_up_proj block), and results
 * are combined per token in slot order. No compute touches
 * an expert that received no token. Every result is bit-identical for any
 * thread count.
 *
 * Expert parallelism (ici_expert_parallelism = P). Rank r owns the contiguous
 * experts [r*E/P, (r+1)*E/P) (gt_moe_expert_range); its gate_up/down (and
 * their gradients) point at those experts only. Tokens and the router are
 * replicated: every rank routes all N tokens. A rank computes its experts'
 * share of `sum`; the caller all-reduces saved->sum, then every rank finishes
 * the same post-norm. In backward every rank adds a partial dh and partial
 * gradients of the replicated tensors (router_proj, router_scale,
 * per_expert_scale, pre_norm, post_norm); summing them over ranks (an
 * all-reduce, or a reduce-scatter for sharded copies) gives exactly the
 * single-device result up to float summation order. The terms that are not
 * split by expert (post_norm's gradient, the load-balance gradient) are added
 * by rank 0 alone. Expert gradients are complete on their owner.
 *
 * Conventions as kernels.h: forward overwrites its outputs, backward ADDS
 * into dh and every gradient (the caller zeroes them); a NULL gradient
 * pointer skips that tensor. Weights are HF's tensors in HF layout. */
#ifndef GEMTRAIN_KERNELS_MOE_H
#define GEMTRAIN_KERNELS_MOE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_moe_dims {
  int64_t B, T;    /* N = B*T tokens, B sequences of T (the lb loss is per sequence) */
  int d;           /* hidden size */
  int E;           /* routed experts (num_experts) */
  int k;           /* experts per token (num_experts_per_tok) */
  int F;           /* expert intermediate size (moe_mlp_dim) */
  float eps;       /* normalization_layer_epsilon, for all three norms */
  float lb_weight; /* load_balance_loss_weight; 0: no loss and no gradient */
  int ep_size;     /* ici_expert_parallelism P (1 = every expert here) */
  int ep_rank;     /* this device's position on the expert axis, 0..P-1 */
  int bf16;        /* dtype=bfloat16: the experts' products take bf16 inputs (gt_bgemm) and
                    * the tensors the experts write are rounded to bf16; the router, the
                    * routing weights, the norms' statistics and all gradients stay float32 */
} gt_moe_dims;

/* The layer's tensors (HF names under model.layers.N.). Replicated ones are
 * full; gate_up and down hold the owned experts only (all E when P = 1). */
typedef struct gt_moe_weights {
  const float *router_proj;      /* [E, d]       router.proj.weight */
  const float *router_scale;     /* [d]          router.scale */
  const float *per_expert_scale; /* [E]          router.per_expert_scale */
  const float *pre_norm;         /* [d]          pre_feedforward_layernorm_2.weight */
  const float *post_norm;        /* [d]          post_feedforward_layernorm_2.weight */
  const float *gate_up;          /* [E/P, 2F, d] experts.gate_up_proj: rows 0..F-1 gate, F..2F-1 up */
  const float *down;             /* [E/P, d, F]  experts.down_proj */
} gt_moe_weights;

typedef struct gt_moe_grads {
  float *router_proj, *router_scale, *per_expert_scale, *pre_norm, *post_norm;
  float *gate_up, *down; /* owned experts, shapes as in gt_moe_weights */
} gt_moe_grads;

/* What the forward keeps for the backward: pointers into one block of
 * gt_moe_saved_bytes(). M = N*k bounds the slots a rank may own (routing is
 * data-dependent, so the plan counts the worst case). */
typedef struct gt_moe_saved {
  float *rstd_router;  /* [N]    rstd of the router's scale-free norm */
  float *probs;        /* [N, E] softmax of the router logits */
  int32_t *topk;       /* [N, k] chosen experts, by descending logit */
  float *topk_w;       /* [N, k] routing weights w (per_expert_scale included) */
  float *rstd_pre;     /* [N]    rstd of pre_feedforward_layernorm_2 */
  int32_t *counts;     /* [E/P]  slots routed to each owned expert */
  int32_t *offsets;    /* [E/P + 1] first sorted row of each owned expert */
  int32_t *slot_of;    /* [M]    sorted row -> slot n*k + j */
  int32_t *row_of;     /* [N*k]  slot n*k + j -> sorted row, -1 if not owned */
  float *gu;           /* [M, 2F] each sorted row's z Wg^T (F) then z Wu^T (F): one product
                        * with the expert's gate_up_proj, rows as the tensor's */
  float *sum;          /* [N, d] sum_j w_j Expert(rin): this rank's share until all-reduced */
  float *rstd_post;    /* [N]    rstd of post_feedforward_layernorm_2 */
  float lb_loss;       /* this layer's load-balance loss (already times lb_weight) */
  int64_t n_rows;      /* sorted rows owned by this rank (<= M) */
  void *block;         /* what gt_moe_saved_alloc allocated (NULL when bound by hand) */
} gt_moe_saved;

/* The experts rank owns: [*e0, *e1) = [rank*E/P, (rank+1)*E/P). */
static inline void gt_moe_expert_range(int E, int P, int rank, int *e0, int *e1) {
  const int per = E / P;
  *e0 = rank * per;
  *e1 = (rank + 1) * per;
}


/* Exact bytes of the scratch the fast forward and backward need (the larger
 * of the two; a 64-byte aligned carving, so a block of this size from
 * gt_mem_alloc always fits). */
size_t gt_moe_work_bytes(const gt_moe_dims *d);

/* Stage 1: router, top-k, load-balance loss, the owned experts' share of
 * s->sum. work: gt_moe_work_bytes, 64-byte aligned. */
void gt_moe_forward_partial(gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                            const gt_moe_dims *d, void *work);
/* Stage 2, after s->sum holds the full sum (all-reduced when P > 1):
 * out[N, d] = RMSNorm(s->sum) * post_norm. */
void gt_moe_forward_finish(float *out, gt_moe_saved *s, const gt_moe_weights *w,
                           const gt_moe_dims *d);
/* Both stages back to back: the whole forward when P == 1. */
void gt_moe_forward(float *out, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                    const gt_moe_dims *d, void *work);
/* dout: dL/d out [N, d]; dlb: dL/d lb_loss of this layer (train.py averages
 * the layers' losses, so 1/#MoE layers times the loss scale). Adds dL/dh into
 * dh (NULL: not wanted) and the gradients into g (partial sums when P > 1,
 * see above). */
void gt_moe_backward(float *dh, const gt_moe_grads *g, const float *dout, float dlb,
                     const gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                     const gt_moe_dims *d, void *work);

/* The load-balance loss alone (MaxText moe.py load_balance_loss): with
 * f[b,e] = (1/T) #{s : e in topk[b,s]} and Pbar[b,e] = (1/T) sum_s P[b,s,e],
 * lb = lb_weight * E^2 * mean over (b, e) of f * Pbar. Its gradient treats f
 * as constant (top-k is piecewise constant): dL/dP[b,s,e] = dlb * lb_weight *
 * E * f[b,e] / (B*T), added into dprobs [N, E]. */
float gt_moe_lb_loss(const float *probs, const int32_t *topk, const gt_moe_dims *d);
void gt_moe_lb_backward(float *dprobs, const int32_t *topk, float dlb, const gt_moe_dims *d);

/* Scalar references, same contracts (they ignore work; the reference forward
 * fills the same saved layout, so either backward reads either forward). */
void gt_moe_forward_partial_ref(gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                                const gt_moe_dims *d, void *work);
void gt_moe_forward_finish_ref(float *out, gt_moe_saved *s, const gt_moe_weights *w,
                               const gt_moe_dims *d);
void gt_moe_forward_ref(float *out, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                        const gt_moe_dims *d, void *work);
void gt_moe_backward_ref(float *dh, const gt_moe_grads *g, const float *dout, float dlb,
                         const gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                         const gt_moe_dims *d, void *work);
float gt_moe_lb_loss_ref(const float *probs, const int32_t *topk, const gt_moe_dims *d);
void gt_moe_lb_backward_ref(float *dprobs, const int32_t *topk, float dlb, const gt_moe_dims *d);

#ifdef __cplusplus
}
#endif
#endif
