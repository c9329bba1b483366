#include "model/layer.h"

#include <string.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/linear.h"
#include "model/lora.h"
#include "model/moe.h"

const char *gt_act_name(gt_act a) {
  static const char *names[GT_A_NSLOTS] = {
      "decoder_layer_input", "input_norm_rstd", "input_norm", "query_raw", "key_raw",
      "query_norm_rstd", "key_norm_rstd", "query_proj", "key_proj", "value_proj", "context",
      "attention_lse", "out_proj", "out_norm_rstd", "attention_residual", "ffw_norm_rstd",
      "ffw_norm", "mlpwi_0", "mlpwi_1", "mlp_activation", "mlpwo", "mlpwo_norm_rstd",
      "value_raw", "value_norm_rstd", "mlp_residual", "per_layer_gate", "per_layer_activation",
      "per_layer_proj", "per_layer_norm_rstd", "per_layer_residual", "moe_shared_out", "moe_shared_norm_rstd",
      "moe_group_input", "moe_routed_state", "moe_routed_out", "moe_sum"};
  return (int)a >= 0 && a < GT_A_NSLOTS ? names[a] : "?";
}

int gt_act_is_tensor(gt_act a) {
  switch (a) {
    case GT_A_A_RSTD: case GT_A_Q_RSTD: case GT_A_K_RSTD: case GT_A_LSE: case GT_A_O_RSTD: case GT_A_M_RSTD:
    case GT_A_F_RSTD: case GT_A_V_RSTD: case GT_A_PLE_RSTD: case GT_A_SHARED_RSTD: case GT_A_MOE_SAVED:
    case GT_A_NSLOTS:
      return 0;
    default:
      return 1;
  }
}

/* The routed block's dimensions: with expert parallelism it routes the
 * whole expert group's tokens (P times this device's B sequences). */
static gt_moe_dims gt__moe_dims(const gt_model *m, const gt_layer_desc *L, int64_t B, int64_t T) {
  gt_moe_dims d = {B * m->ep_size, T, (int)m->d, L->n_experts, L->experts_per_tok, L->moe_mlp_dim, m->eps,
                   L->lb_weight, m->ep_size, m->ep_rank, m->bf16_mm};
  return d;
}

int64_t gt_act_numel(const gt_model *m, const gt_layer_desc *L, gt_act a, int64_t B, int64_t T) {
  int64_t N = B * T, d = m->d;
  int64_t qd = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim;
  if (!gt_layer_has_slot(L, a)) return 0;
  switch (a) {
    case GT_A_X_IN: case GT_A_A: case GT_A_O: case GT_A_X1: case GT_A_M: case GT_A_F:
    case GT_A_X2: case GT_A_PLE_PROJ: case GT_A_X3: case GT_A_SHARED: case GT_A_MOE_OUT: case GT_A_MOE_SUM:
      return N * d;
    case GT_A_A_RSTD: case GT_A_O_RSTD: case GT_A_M_RSTD: case GT_A_F_RSTD: case GT_A_PLE_RSTD: case GT_A_SHARED_RSTD:
      return N;
    case GT_A_MOE_IN: return N * d * m->ep_size;
    case GT_A_MOE_SAVED: {
      gt_moe_dims md = gt__moe_dims(m, L, B, T);
      return (int64_t)((gt_moe_saved_bytes(&md) + sizeof(float) - 1) / sizeof(float));
    }
    case GT_A_Q_RAW: case GT_A_Q: case GT_A_CTX:
      return N * qd;
    case GT_A_K_RAW: case GT_A_K: case GT_A_V: case GT_A_V_RAW:
      return N * kd;
    case GT_A_Q_RSTD: return N * L->n_heads;
    case GT_A_K_RSTD: case GT_A_V_RSTD: return N * L->n_kv_heads;
    case GT_A_LSE: return B * L->n_heads * T;
    case GT_A_GATE: case GT_A_UP: case GT_A_ACT:
      return N * L->mlp_dim;
    case GT_A_PLE_GATE: case GT_A_PLE_ACT:
      return N * L->ple_dim;
    case GT_A_NSLOTS: break;
  }
  return 0;
}

/* dtype=bfloat16: forward and backward attention both on bf16 tile products
 * with float32 sums and softmax statistics (the forward's P rounded before
 * P.V; docs/precision.md). A recompute after remat runs the same kernel on
 * the same bf16 q, k, v, so it gives the same bits. */
static gt_attn_dims gt__attn_dims(const gt_layer_io *io) {
  const gt_layer_desc *L = io->L;
  gt_attn_dims d = {io->B, io->T, L->n_heads, L->n_kv_heads, L->head_dim, L->window, L->q_scale, io->m->bf16_mm,
                    io->m->bf16_act, NULL};
  return d;
}

#define W(slot) (gt_layer_slot(L, (float *)io->params, (slot)))
/* a projection's weight with its storage, for the products (linear.h) */
#define WM(slot) ((gt__weight){gt_layer_slot(L, (float *)(io->mparams ? io->mparams : io->params), (slot)), L->qtype[(slot)]})

/* The elementwise loops of this file (gt__add, gt__sum, the PLE gate). */
typedef struct gt__ew_args {
  float *y, *y2;
  const float *x, *z, *x2, *x3;
  int64_t stride;
  int P;
} gt__ew_args;

static void gt__add_part(void *arg, int64_t i0, int64_t i1) {
  const gt__ew_args *a = arg;
  float *y = a->y;
  const float *x = a->x;
  for (int64_t i = i0; i < i1; i++) y[i] += x[i];
}

/* y += x, split over threads by fixed ranges */
static void gt__add(float *y, const float *x, int64_t n) {
  gt__ew_args a = {.y = y, .x = x};
  gt_team_for(n > 65536, n, gt__add_part, &a);
}

/* The forward as a list of ops, each writing its output slots. Recompute
 * after remat runs exactly the ops whose outputs were not kept, with the same
 * kernels on the same inputs, so recomputed values are bit-identical. */
enum {
  OP_IN_NORM, OP_MM_Q, OP_MM_K, OP_MM_V, OP_Q_NORM_ROPE, OP_K_NORM_ROPE, OP_V_NORM, OP_ATTN, OP_MM_O,
  OP_ATTN_RESID, OP_FFW_NORM, OP_MM_GATE, OP_MM_UP, OP_GEGLU, OP_MM_DOWN, OP_SHARED_NORM, OP_MOE, OP_MOE_ADD, OP_FFW_RESID,
  OP_PLE_GATE, OP_PLE_ACT, OP_PLE_PROJ, OP_PLE_RESID, OP_SCALE, OP_N
};
_Static_assert(OP_N <= 32, "op sets are 32-bit masks");

/* Does this layer kind run op? */
static int gt__op_present(const gt_layer_desc *L, int op) {
  int own = L->kv_donor < 0;
  switch (op) {
    case OP_MM_K: case OP_K_NORM_ROPE: return own;
    case OP_MM_V: return own && !L->k_eq_v;
    case OP_V_NORM: return own && L->gemma4;
    case OP_PLE_GATE: case OP_PLE_ACT: case OP_PLE_PROJ: case OP_PLE_RESID: return L->ple_dim > 0;
    case OP_SCALE: return L->gemma4;
    case OP_SHARED_NORM: case OP_MOE: case OP_MOE_ADD: return L->n_experts > 0;
    default: return 1;
  }
}

/* The slots op writes for this kind (GT_A_NSLOTS: none). Gemma 3's value
 * projection is value_proj itself; Gemma 4's is normalised first, so its
 * matmul writes value_raw and the v-norm writes value_proj. */
#define GT__OUTS 3
static void gt__op_out(const gt_layer_desc *L, int op, gt_act o[GT__OUTS]) {
  static const gt_act common[OP_N][2] = {
      [OP_IN_NORM] = {GT_A_A, GT_A_A_RSTD},       [OP_MM_Q] = {GT_A_Q_RAW, GT_A_NSLOTS},
      [OP_MM_K] = {GT_A_K_RAW, GT_A_NSLOTS},      [OP_MM_V] = {GT_A_V, GT_A_NSLOTS},
      [OP_Q_NORM_ROPE] = {GT_A_Q, GT_A_Q_RSTD},   [OP_K_NORM_ROPE] = {GT_A_K, GT_A_K_RSTD},
      [OP_V_NORM] = {GT_A_V, GT_A_V_RSTD},        [OP_ATTN] = {GT_A_CTX, GT_A_LSE},
      [OP_MM_O] = {GT_A_O, GT_A_NSLOTS},          [OP_ATTN_RESID] = {GT_A_X1, GT_A_O_RSTD},
      [OP_FFW_NORM] = {GT_A_M, GT_A_M_RSTD},      [OP_MM_GATE] = {GT_A_GATE, GT_A_NSLOTS},
      [OP_MM_UP] = {GT_A_UP, GT_A_NSLOTS},        [OP_GEGLU] = {GT_A_ACT, GT_A_NSLOTS},
      [OP_MM_DOWN] = {GT_A_F, GT_A_NSLOTS},       [OP_FFW_RESID] = {GT_A_F_RSTD, GT_A_NSLOTS}, /* and x_out */
      [OP_PLE_GATE] = {GT_A_PLE_GATE, GT_A_NSLOTS}, [OP_PLE_ACT] = {GT_A_PLE_ACT, GT_A_NSLOTS},
      [OP_PLE_PROJ] = {GT_A_PLE_PROJ, GT_A_NSLOTS}, [OP_PLE_RESID] = {GT_A_X3, GT_A_PLE_RSTD},
      [OP_SCALE] = {GT_A_NSLOTS, GT_A_NSLOTS}, /* only x_out */
      [OP_SHARED_NORM] = {GT_A_SHARED, GT_A_SHARED_RSTD}, [OP_MOE] = {GT_A_MOE_OUT, GT_A_MOE_SAVED},
      [OP_MOE_ADD] = {GT_A_MOE_SUM, GT_A_NSLOTS},
  };
  o[0] = o[1] = o[2] = GT_A_NSLOTS;
  if (!gt__op_present(L, op)) return;
  o[0] = common[op][0];
  o[1] = common[op][1];
  /* the gathered group input exists only with expert parallelism; its
   * descriptor of a sharded device says so */
  if (op == OP_MOE && L->moe_ep > 1) o[2] = GT_A_MOE_IN;
  if (!L->gemma4) return;
  if (op == OP_MM_V) o[0] = GT_A_V_RAW;
  if (op == OP_FFW_RESID) o[1] = GT_A_X2; /* x_out comes later, from layer_scalar */
}

int gt_layer_has_slot(const gt_layer_desc *L, gt_act a) {
  if (a == GT_A_X_IN) return 1;
  for (int op = 0; op < OP_N; op++) {
    gt_act o[GT__OUTS];
    gt__op_out(L, op, o);
    for (int k = 0; k < GT__OUTS; k++)
      if (o[k] == a) return 1;
  }
  return 0;
}

uint32_t gt_layer_recompute_ops(const gt_layer_desc *L, const uint8_t have[GT_A_NSLOTS]) {
  uint32_t ops = 0;
  for (int op = 0; op < OP_N; op++) {
    gt_act o[GT__OUTS];
    gt__op_out(L, op, o);
    for (int k = 0; k < GT__OUTS; k++)
      if (o[k] != GT_A_NSLOTS && !have[o[k]]) ops |= 1u << op;
  }
  return ops;
}

int gt_layer_writes_b16(const gt_layer_desc *L, gt_act a) {
  switch (a) {
    case GT_A_GATE: case GT_A_UP: case GT_A_ACT: return gt__op_present(L, OP_GEGLU);
    /* the input norm's input and output; the post-attention norm's sweep
     * (the forward runs it with the pre-FFW norm) reads o and writes x1
     * and m; the post-FFW norm's reads f, which a routed block's sum
     * replaces */
    case GT_A_X_IN: case GT_A_A: case GT_A_O: case GT_A_X1: case GT_A_M: return 1;
    /* the q and k norms with RoPE: their inputs and outputs */
    case GT_A_Q_RAW: case GT_A_Q: return 1;
    case GT_A_CTX: return 1; /* the attention's output, as each row is finished */
    case GT_A_K_RAW: case GT_A_K: return gt__op_present(L, OP_K_NORM_ROPE);
    case GT_A_F: return !L->n_experts;
    default: return 0;
  }
}

int gt_layer_reads_b16(const gt_model *m, const gt_layer_desc *L, gt_act a, uint32_t ops,
                       const uint8_t kept[GT_A_NSLOTS]) {
  if (!kept[a]) return 0;
  /* gate and up: the GeGLU's backward, their only reader, reads both in
   * bf16 or both in float32; its recompute reads floats */
  if (a == GT_A_GATE || a == GT_A_UP)
    return gt__op_present(L, OP_GEGLU) && kept[GT_A_GATE] && kept[GT_A_UP] && !(ops & (1u << OP_GEGLU));
  /* the norms' inputs: their backward (gt_rmsnorm_residual_backward_b16)
   * is the only reader but for the forward ops that read them (a recompute
   * reads floats) and a routed block, which reads x1 */
  if (a == GT_A_X_IN || a == GT_A_O || a == GT_A_X1 || a == GT_A_F || a == GT_A_Q_RAW || a == GT_A_K_RAW) {
    static const uint32_t fwd_readers[] = {
        [GT_A_X_IN] = (1u << OP_IN_NORM) | (1u << OP_ATTN_RESID),
        [GT_A_O] = 1u << OP_ATTN_RESID,
        [GT_A_X1] = (1u << OP_FFW_NORM) | (1u << OP_FFW_RESID) | (1u << OP_MOE),
        [GT_A_F] = (1u << OP_FFW_RESID) | (1u << OP_SHARED_NORM),
        [GT_A_Q_RAW] = 1u << OP_Q_NORM_ROPE,
        [GT_A_K_RAW] = (1u << OP_K_NORM_ROPE) | (1u << OP_V_NORM), /* K = V: the v-norm's input too */
    };
    const int64_t row = a == GT_A_Q_RAW || a == GT_A_K_RAW ? L->head_dim : m->d;
    /* (the executor reads the first layer's input for the per-layer
     * embeddings' backward) */
    return row <= GT_RMS_B16_ROW_MAX && !(ops & fwd_readers[a]) && !(a == GT_A_X1 && L->n_experts) &&
           !(a == GT_A_X_IN && m->ple_dim);
  }
  /* the inputs only projections read: their weight gradients' products and
   * their adapters' backward (h and dA; drop(x) written from the copy) read
   * the copy as stored bf16 (bf16 products on a path that packs it in
   * place: gt__matmul_a16); a recompute of the projections reads floats */
  static const struct {
    gt_act x;
    int n;
    int ops[3];
  } readers[] = {{GT_A_A, 3, {OP_MM_Q, OP_MM_K, OP_MM_V}},
                 {GT_A_M, 2, {OP_MM_GATE, OP_MM_UP}},
                 {GT_A_ACT, 1, {OP_MM_DOWN}},
                 /* and the attention's backward, for D (from its bf16 copy) */
                 {GT_A_CTX, 1, {OP_MM_O}}};
  if (!gt__matmul_a16(m)) return 0;
  if (a == GT_A_CTX && L->head_dim > GT_ATTN_OUT16_HD_MAX) return 0;
  for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++) {
    if (readers[r].x != a) continue;
    for (int k = 0; k < readers[r].n; k++)
      if (ops & (1u << readers[r].ops[k])) return 0;
    return 1;
  }
  return 0;
}

/* A projection's backward (write: its dinp written, else added) whose
 * input slot x may be kept in bf16 (gt_layer_reads_b16, acts[x] NULL): the
 * input gradient as ever, the weight gradient from the copy. */
static void gt__proj_backward(const gt_layer_io *io, int write, float *dinp, float *dw, const float *dout,
                              float *const a[GT_A_NSLOTS], gt_act x, gt__weight w, int64_t n, int64_t in,
                              int64_t out) {
  const gt_model *m = io->m;
  void (*fn)(const gt_model *, float *, float *, const float *, const float *, gt__weight, int64_t, int64_t,
             int64_t) = write ? gt__matmul_backward_write : gt__matmul_backward;
  if (a[x] || !dw) {
    fn(m, dinp, dw, dout, a[x], w, n, in, out);
    return;
  }
  fn(m, dinp, NULL, dout, NULL, w, n, in, out);
  gt__matmul_dw_b16(m, dw, dout, io->b16[x], n, in, out);
}

/* gt_rmsnorm_residual_backward whose input slot x may be kept in bf16
 * (gt_layer_reads_b16, acts[x] NULL): then read from the copy. */
static void gt__norm_backward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], gt_act x, float *dx, float *dw,
                              const float *dres, const float *dout, const float *rstd, const float *w, int64_t rows,
                              int dim, int accumulate) {
  const float off = io->m->norm_offset;
  if (a[x])
    gt_rmsnorm_residual_backward(dx, dw, dres, dout, a[x], rstd, w, rows, dim, off, accumulate);
  else
    gt_rmsnorm_residual_backward_b16(dx, dw, dres, dout, io->b16[x], rstd, w, rows, dim, off, accumulate);
}

/* The q or k norm with RoPE over nheads row-heads (out from raw, rounded
 * with dtype=bfloat16), writing the copies of both that io->b16 asks for. */
static void gt__rope_norm_forward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], gt_act out, gt_act rstd,
                                  gt_act raw, const float *w, int64_t nheads) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  const float *cs = m->rope_cos[L->rope], *sn = m->rope_sin[L->rope];
  const int64_t N = (int64_t)io->B * io->T;
  uint16_t *const *h = m->bf16_act ? io->b16 : NULL;
  if (h && (h[out] || h[raw]))
    gt_rmsnorm_rope_forward_pack(a[out], h[out], a[rstd], a[raw], h[raw], w, io->pos, cs, sn, N, (int)nheads,
                                 L->head_dim, m->eps, m->norm_offset);
  else
    gt_rmsnorm_rope_forward(a[out], a[rstd], a[raw], w, io->pos, cs, sn, N, (int)nheads, L->head_dim, m->eps,
                            m->norm_offset, m->bf16_act);
}

/* gt_rope_rmsnorm_backward (the q or k norm with RoPE over nheads row-heads)
 * whose input slot x may be kept in bf16: then read from the copy. */
static void gt__rope_norm_backward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], gt_act x, float *dx,
                                   float *dw, float *dout, const float *rstd, const float *w, int64_t nheads) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  const float *cs = m->rope_cos[L->rope], *sn = m->rope_sin[L->rope];
  const int64_t N = (int64_t)io->B * io->T;
  if (a[x])
    gt_rope_rmsnorm_backward(dx, dw, dout, a[x], rstd, w, io->pos, cs, sn, N, (int)nheads, L->head_dim,
                             m->norm_offset);
  else
    gt_rope_rmsnorm_backward_b16(dx, dw, dout, io->b16[x], rstd, w, io->pos, cs, sn, N, (int)nheads, L->head_dim,
                                 m->norm_offset);
}

uint32_t gt_layer_all_ops(const gt_layer_desc *L) {
  uint32_t ops = 0;
  for (int op = 0; op < OP_N; op++)
    if (gt__op_present(L, op)) ops |= 1u << op;
  return ops;
}
uint32_t gt_layer_attention_op(void) { return 1u << OP_ATTN; }
uint32_t gt_layer_moe_op(void) { return 1u << OP_MOE; }

uint32_t gt_layer_output_op(const gt_layer_desc *L) { return 1u << (L->gemma4 ? OP_SCALE : OP_FFW_RESID); }

void gt_layer_ops_outputs(const gt_layer_desc *L, uint32_t ops, uint8_t out[GT_A_NSLOTS]) {
  memset(out, 0, GT_A_NSLOTS);
  for (int op = 0; op < OP_N; op++)
    if (ops & (1u << op)) {
      gt_act o[GT__OUTS];
      gt__op_out(L, op, o);
      for (int k = 0; k < GT__OUTS; k++)
        if (o[k] != GT_A_NSLOTS) out[o[k]] = 1;
    }
}

/* PLE's gate: act = gelu_tanh(gate) * ple over rows, the per-layer input
 * being a column block of the model-wide [N, L*P] buffer (row stride). */
static void gt__ple_fwd_part(void *arg, int64_t n0, int64_t n1) {
  const gt__ew_args *a = arg;
  const int P = a->P;
  for (int64_t n = n0; n < n1; n++) gt_geglu_forward(a->y + n * P, a->x + n * P, a->z + n * a->stride, P);
}

static void gt__ple_act_forward(float *act, const float *gate, const float *ple, int64_t stride, int64_t N, int P) {
  gt__ew_args a = {.y = act, .x = gate, .z = ple, .stride = stride, .P = P};
  gt_team_for(N * P > 65536, N, gt__ple_fwd_part, &a);
}

static void gt__ple_bwd_part(void *arg, int64_t n0, int64_t n1) {
  const gt__ew_args *a = arg;
  const int P = a->P;
  const int64_t stride = a->stride;
  for (int64_t n = n0; n < n1; n++)
    gt_geglu_backward(a->y + n * P, a->y2 + n * stride, a->x + n * P, a->x2 + n * P, a->x3 + n * stride, P);
}

static void gt__ple_act_backward(float *dgate, float *dple, const float *dact, const float *gate, const float *ple,
                                 int64_t stride, int64_t N, int P) {
  gt__ew_args a = {.y = dgate, .y2 = dple, .x = dact, .x2 = gate, .x3 = ple, .stride = stride, .P = P};
  gt_team_for(N * P > 65536, N, gt__ple_bwd_part, &a);
}

/* The layer result before layer_scalar multiplies it. */
static float *gt__scaled_input(const gt_layer_desc *L, float *const a[GT_A_NSLOTS]) {
  return L->ple_dim > 0 ? a[GT_A_X3] : a[GT_A_X2];
}

static float gt__lambda(const gt_layer_io *io) {
  const gt_layer_desc *L = io->L;
  const float *w = W(GT_P_LAYER_SCALAR);
  return w ? w[0] : L->layer_scalar;
}

static gt_moe_weights gt__moe_w(const gt_layer_io *io) {
  const gt_layer_desc *L = io->L;
  gt_moe_weights w = {W(GT_P_ROUTER_PROJ), W(GT_P_ROUTER_SCALE), W(GT_P_EXPERT_SCALE), W(GT_P_PRE_FFW_NORM_2),
                      W(GT_P_POST_FFW_NORM_2), W(GT_P_EXPERT_GATE_UP), W(GT_P_EXPERT_DOWN)};
  return w;
}

/* The saved block as the kernels' struct (its sizes live in the block). */
static gt_moe_saved gt__moe_bind(float *block, const gt_moe_dims *md) {
  gt_moe_saved s;
  gt_moe_saved_bind(&s, block, md);
  s.n_rows = s.offsets[md->E / md->ep_size];
  return s;
}

void gt_layer_moe_temps(const gt_model *m, const gt_layer_desc *L, int64_t B, int64_t T, int64_t *fwd, int64_t *bwd) {
  *fwd = *bwd = 0;
  if (!L->n_experts) return;
  gt_moe_dims md = gt__moe_dims(m, L, B, T);
  int64_t work = (int64_t)((gt_moe_work_bytes(&md) + sizeof(float) - 1) / sizeof(float)), Ng = md.B * T * m->d;
  /* expert parallelism: the group's routed outputs in forward; the group's
   * d(routed) and partial d(x1) in backward */
  *fwd = work + (L->moe_ep > 1 ? Ng : 0);
  *bwd = work + (L->moe_ep > 1 ? 2 * Ng : 0);
}

static float *gt__moe_scratch(const gt_layer_io *io, int64_t n) {
  float *p = gt_mem_alloc_uninit_named(io->m->mem, GT_MEM_TEMP, (size_t)n * sizeof(float), "routed experts' scratch");
  if (!p && io->fail) *io->fail = GT_ERR_NOMEM;
  return p;
}

/* routed = post_ffw_norm_2(sum of the top-k experts of pre_ffw_norm_2(x1)) */
static void gt__moe_forward(const gt_layer_io *io, float *const a[GT_A_NSLOTS]) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  gt_moe_dims md = gt__moe_dims(m, L, io->B, io->T);
  int64_t nf, nb, N = (int64_t)io->B * io->T, d = m->d;
  gt_layer_moe_temps(m, L, io->B, io->T, &nf, &nb);
  float *tmp = gt__moe_scratch(io, nf);
  if (!tmp) return;
  if (gt_mem_measuring(m->mem)) { /* allocation only: no routing, no exchange with the expert group */
    gt_mem_free(m->mem, tmp);
    return;
  }
  gt_moe_weights w = gt__moe_w(io);
  gt_moe_saved s = gt__moe_bind(a[GT_A_MOE_SAVED], &md);
  const float *h = a[GT_A_X1];
  if (L->moe_ep > 1) {
    m->ep->all_gather(m->ep->ctx, a[GT_A_X1], a[GT_A_MOE_IN], md.B * md.T * d);
    h = a[GT_A_MOE_IN];
  }
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_moe_forward_partial(&s, h, &w, &md, tmp));
  if (L->moe_ep > 1) {
    /* every rank finishes the same group sum and keeps its own rows */
    float *out = tmp + (nf - md.B * md.T * d);
    m->ep->all_reduce(m->ep->ctx, s.sum, md.B * md.T * d);
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_moe_forward_finish(out, &s, &w, &md));
    memcpy(a[GT_A_MOE_OUT], out + (int64_t)m->ep_rank * N * d, (size_t)(N * d) * sizeof(float));
  } else {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_moe_forward_finish(a[GT_A_MOE_OUT], &s, &w, &md));
  }
  if (io->moe_lb) *io->moe_lb = s.lb_loss;
  gt_mem_free(m->mem, tmp);
}

static void gt__sum_part(void *arg, int64_t i0, int64_t i1) {
  const gt__ew_args *a = arg;
  float *y = a->y;
  const float *x = a->x, *z = a->z;
  for (int64_t i = i0; i < i1; i++) y[i] = x[i] + z[i];
}

/* y = a + b, split over threads by fixed ranges */
static void gt__sum(float *y, const float *x, const float *z, int64_t n) {
  gt__ew_args a = {.y = y, .x = x, .z = z};
  gt_team_for(n > 65536, n, gt__sum_part, &a);
}

/* The ops whose kernels round every tensor they write to bf16 themselves
 * (the *_rnd forms and gt_rmsnorm_rope_forward, round_bf16 = m->bf16_act),
 * in the loop that computes each value: the same bits as the separate pass
 * below, without the second sweep over memory. */
#define GT__ROUNDS_INSIDE                                                                                         \
  ((1u << OP_IN_NORM) | (1u << OP_Q_NORM_ROPE) | (1u << OP_K_NORM_ROPE) | (1u << OP_V_NORM) | (1u << OP_ATTN) | \
   (1u << OP_ATTN_RESID) | (1u << OP_FFW_NORM) | (1u << OP_GEGLU) | (1u << OP_SHARED_NORM) |                    \
   (1u << OP_FFW_RESID) | (1u << OP_PLE_RESID))

/* The projection op runs, for its adapter (model/lora.h): the weight slot,
 * the input and output activation slots and their widths; slot -1 when op
 * is no projection (y then GT_A_NSLOTS) or has no adapter. */
typedef struct gt__proj {
  int slot;
  gt_act x, y;
  int64_t in, out;
} gt__proj;

static gt__proj gt__op_proj(const gt_model *m, const gt_layer_desc *L, int op) {
  int64_t d = m->d, qd = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim;
  int64_t F = L->mlp_dim, P = L->ple_dim;
  gt__proj p = {-1, GT_A_NSLOTS, GT_A_NSLOTS, 0, 0};
  switch (op) {
    case OP_MM_Q: p = (gt__proj){GT_P_WQ, GT_A_A, GT_A_Q_RAW, d, qd}; break;
    case OP_MM_K: p = (gt__proj){GT_P_WK, GT_A_A, GT_A_K_RAW, d, kd}; break;
    case OP_MM_V: p = (gt__proj){GT_P_WV, GT_A_A, L->gemma4 ? GT_A_V_RAW : GT_A_V, d, kd}; break;
    case OP_MM_O: p = (gt__proj){GT_P_WO, GT_A_CTX, GT_A_O, qd, d}; break;
    case OP_MM_GATE: p = (gt__proj){GT_P_W_GATE, GT_A_M, GT_A_GATE, d, F}; break;
    case OP_MM_UP: p = (gt__proj){GT_P_W_UP, GT_A_M, GT_A_UP, d, F}; break;
    case OP_MM_DOWN: p = (gt__proj){GT_P_W_DOWN, GT_A_ACT, GT_A_F, F, d}; break;
    case OP_PLE_GATE: p = (gt__proj){GT_P_PLE_GATE, GT_A_X2, GT_A_PLE_GATE, d, P}; break;
    case OP_PLE_PROJ: p = (gt__proj){GT_P_PLE_PROJ, GT_A_PLE_ACT, GT_A_PLE_PROJ, P, d}; break;
    default: break;
  }
  if (p.slot >= 0 && L->lora_a_rel[p.slot] < 0) p.slot = -1;
  return p;
}

/* dtype=bfloat16: do op's products round its output themselves (every
 * projection: the base product rounds each tile of it as it finishes it,
 * or, where an adapter adds into it, the adapter's last product rounds the
 * sum, gt_lora_forward)? */
static int gt__proj_rounds(const gt_layer_io *io, int op) {
  return io->m->bf16_act && gt__op_proj(io->m, io->L, op).y != GT_A_NSLOTS;
}

/* Does an adapter add into op's output in this pass (adapters on)? */
static int gt__proj_adapts(const gt_layer_io *io, int op) {
  return gt__op_proj(io->m, io->L, op).slot >= 0 && !io->m->lora_off;
}

/* dtype=bfloat16: the tensors op just wrote (and x_out, when it is the
 * layer's output op) rounded to bf16, so every activation a later op or a
 * backward reads is a bf16 value, whichever ops a recompute re-runs. */
static void gt__round_outputs(const gt_layer_io *io, float *const a[GT_A_NSLOTS], int op, float *x_out) {
  const gt_model *m = io->m;
  if (!m->bf16_act || ((1u << op) & GT__ROUNDS_INSIDE)) return;
  gt_act o[GT__OUTS];
  gt__op_out(io->L, op, o);
  if (!gt__proj_rounds(io, op)) /* (else the product rounded its output slot) */
    for (int k = 0; k < GT__OUTS; k++)
      if (o[k] != GT_A_NSLOTS && gt_act_is_tensor(o[k]))
        GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__act_round(m, a[o[k]], gt_act_numel(m, io->L, o[k], io->B, io->T)));
  if ((1u << op) == gt_layer_output_op(io->L))
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__act_round(m, x_out, (int64_t)io->B * io->T * m->d));
}

/* op's adapter, added into its output right after the base product; x16:
 * the input's bf16 copy where it reads it */
static void gt__lora_op(const gt_layer_io *io, float *const a[GT_A_NSLOTS], int op, const uint16_t *x16) {
  gt__proj p = gt__op_proj(io->m, io->L, op);
  if (p.slot < 0) return;
  GT_PROF(io->m->prof, GT_PROF_MATMUL, gt_lora_forward(io, (gt_lparam)p.slot, a[p.x], x16, a[p.y], (int64_t)io->B * io->T, p.in, p.out));
}

/* dtype=bfloat16: can op's product take its input and output in bf16
 * forms (gt__matmul_forward_b16)? Bf16 products of a float32-stored weight
 * with no adapter (with one, the output is the sum of the base's and the
 * adapter's products, which the adapter's last product rounds). */
static int gt__proj_b16(const gt_layer_io *io, int op, gt__weight w) {
  return gt__proj_rounds(io, op) && gt__op_proj(io->m, io->L, op).slot < 0 && gt__matmul_b16_forms(io->m, w);
}

/* dtype=bfloat16: can op's backward products, the base's and its
 * adapter's, read its output gradient as bf16 patterns (they round it as
 * they pack it anyway)? Where the forward's product took the bf16 forms,
 * and where an adapter adds into the output and the products read bf16
 * operands in place: then the base is the adapter's frozen one (any
 * storage: gt__matmul_backward16) or a float32 one. */
static int gt__grad16(const gt_layer_io *io, int op, gt__weight w) {
  if (gt__proj_b16(io, op, w)) return 1;
  return gt__proj_rounds(io, op) && gt__proj_adapts(io, op) && gt__matmul_a16(io->m);
}

/* Does op, where the layer has it, read its input's copy in this forward
 * (it runs, and its product takes bf16 forms: gt__proj_forward)? */
static int gt__reads_copy(const gt_layer_io *io, uint32_t ops, int op, gt__weight w) {
  return !gt__op_present(io->L, op) || (((ops >> op) & 1u) && gt__proj_b16(io, op, w));
}

/* op's projection in the forward, then its adapter. Where the forward wrote
 * the input's bf16 copy (h: the slot is kept in 2 bytes) and the product
 * can take it, the product reads the copy at 2 bytes an element; out16 (the
 * MLP's gate and up) has it write only the output's copy. */
static void gt__proj_forward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], uint16_t *const *h, int op,
                             gt__weight w, uint16_t *out16) {
  const gt_model *m = io->m;
  const gt__proj p = gt__op_proj(m, io->L, op);
  const int64_t n = (int64_t)io->B * io->T;
  const uint16_t *in16 = h ? h[p.x] : NULL;
  if (gt__proj_adapts(io, op)) {
    /* the product writes the output unrounded, the adapter adds into it
     * and rounds the sum; both read the input's copy where there is one
     * (whatever the base's storage: it packs it in place) */
    const uint16_t *x16 = gt__matmul_a16(m) ? in16 : NULL;
    if (x16)
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward_a16(m, a[p.y], x16, w, n, p.in, p.out));
    else
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, a[p.y], a[p.x], w, n, p.in, p.out, 0));
    gt__lora_op(io, a, op, x16);
  } else if ((in16 || out16) && gt__proj_b16(io, op, w)) {
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward_b16(m, a[p.y], out16, a[p.x], in16, w, n, p.in, p.out));
  } else {
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, a[p.y], a[p.x], w, n, p.in, p.out, gt__proj_rounds(io, op)));
  }
}

void gt_layer_forward_ops(const gt_layer_io *io, float *const a[GT_A_NSLOTS], uint32_t ops, float *x_out) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  int64_t N = (int64_t)io->B * io->T, d = m->d, H = L->n_heads, K = L->n_kv_heads, hd = L->head_dim;
  int64_t F = L->mlp_dim, P = L->ple_dim;
  float eps = m->eps, off = m->norm_offset;
  const int rnd = m->bf16_act; /* the kernels of GT__ROUNDS_INSIDE round their outputs */
  ops &= gt_layer_all_ops(L);
  if (gt_mem_measuring(m->mem)) {
    /* allocation only: the adapters' temporaries and the routed op's
     * scratch are the only buffers an op takes */
    for (int op = 0; op < OP_N; op++)
      if (ops & (1u << op)) {
        gt__lora_op(io, a, op, NULL);
        if (op == OP_MOE) gt__moe_forward(io, a);
      }
    return;
  }
  /* RUN(op) stmt: runs stmt when op is in ops, then rounds op's outputs */
#define RUN(op) for (int run_ = (int)((ops >> (op)) & 1u); run_; run_ = 0, gt__round_outputs(io, a, (op), x_out))

  /* dtype=bfloat16: the copies of the slots kept in 2 bytes that an op
   * writes or reads anyway (gt_layer_writes_b16), packed in its sweep */
  uint16_t *const *h = rnd ? io->b16 : NULL;
#define H16(slot) (h ? h[slot] : NULL)
  /* The normalised inputs wanted only as their copies: kept in 2 bytes, and
   * every projection that reads them in this forward reads the copy */
  const int a_copy_only = H16(GT_A_A) && gt__reads_copy(io, ops, OP_MM_Q, WM(GT_P_WQ)) &&
                          gt__reads_copy(io, ops, OP_MM_K, WM(GT_P_WK)) && gt__reads_copy(io, ops, OP_MM_V, WM(GT_P_WV));
  const int m_copy_only = H16(GT_A_M) && !L->n_experts && gt__reads_copy(io, ops, OP_MM_GATE, WM(GT_P_W_GATE)) &&
                          gt__reads_copy(io, ops, OP_MM_UP, WM(GT_P_W_UP));
  RUN(OP_IN_NORM) {
    if (H16(GT_A_A) || H16(GT_A_X_IN))
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_pack(a_copy_only ? NULL : a[GT_A_A], h[GT_A_A], a[GT_A_A_RSTD], a[GT_A_X_IN], h[GT_A_X_IN], W(GT_P_INPUT_NORM), N, (int)d, eps, off));
    else
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(a[GT_A_A], a[GT_A_A_RSTD], a[GT_A_X_IN], W(GT_P_INPUT_NORM), N, (int)d, eps, off, rnd));
  }
  RUN(OP_MM_Q) gt__proj_forward(io, a, h, OP_MM_Q, WM(GT_P_WQ), NULL);
  RUN(OP_MM_K) gt__proj_forward(io, a, h, OP_MM_K, WM(GT_P_WK), NULL);
  RUN(OP_MM_V) gt__proj_forward(io, a, h, OP_MM_V, WM(GT_P_WV), NULL);
  /* q/k norm, RoPE (and the bf16 rounding) in one sweep over each row-head */
  RUN(OP_Q_NORM_ROPE) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__rope_norm_forward(io, a, GT_A_Q, GT_A_Q_RSTD, GT_A_Q_RAW, W(GT_P_Q_NORM), H));
  RUN(OP_K_NORM_ROPE) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__rope_norm_forward(io, a, GT_A_K, GT_A_K_RSTD, GT_A_K_RAW, W(GT_P_K_NORM), K));
  /* K = V: the value is the raw key projection, before k_norm and RoPE */
  RUN(OP_V_NORM) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(a[GT_A_V], a[GT_A_V_RSTD], a[L->k_eq_v ? GT_A_K_RAW : GT_A_V_RAW], W(GT_P_V_NORM), N * K, (int)hd, eps, off, rnd));
  RUN(OP_ATTN) {
    gt_attn_dims ad = gt__attn_dims(io); /* (it rounds its output with dtype=bfloat16) */
    ad.out16 = H16(GT_A_CTX);
    const float *k = L->kv_donor < 0 ? a[GT_A_K] : io->kv_k, *v = L->kv_donor < 0 ? a[GT_A_V] : io->kv_v;
    int arc = 0;
    GT_PROF(m->prof, GT_PROF_ATTENTION, arc = gt_attention_forward(a[GT_A_CTX], a[GT_A_LSE], a[GT_A_Q], k, v, io->seg, &ad));
    if (arc && io->fail) *io->fail = GT_ERR_NOMEM; /* no scratch for the kernel; the caller discards the run */
  }
  RUN(OP_MM_O) gt__proj_forward(io, a, h, OP_MM_O, WM(GT_P_WO), NULL);
  /* x1 = x_in + norm(o): the normalized o is not kept, it is cheap to redo.
   * With the pre-FFW norm also to run, both in one sweep (the same bits as
   * running them apart, which a recompute may do). */
  uint32_t resid_norm = (1u << OP_ATTN_RESID) | (1u << OP_FFW_NORM);
  if ((ops & resid_norm) == resid_norm) {
    if (H16(GT_A_X1) || H16(GT_A_M) || H16(GT_A_O))
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_pack(a[GT_A_X1], h[GT_A_X1], a[GT_A_O_RSTD], m_copy_only ? NULL : a[GT_A_M], h[GT_A_M], a[GT_A_M_RSTD], a[GT_A_X_IN],
                                                                          a[GT_A_O], h[GT_A_O], W(GT_P_POST_ATTN_NORM), W(GT_P_PRE_FFW_NORM), N, (int)d, eps, off));
    else
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_rnd(a[GT_A_X1], a[GT_A_O_RSTD], a[GT_A_M], a[GT_A_M_RSTD], a[GT_A_X_IN], a[GT_A_O],
                                                                         W(GT_P_POST_ATTN_NORM), W(GT_P_PRE_FFW_NORM), N, (int)d, eps, off, rnd));
    ops &= ~resid_norm;
  }
  RUN(OP_ATTN_RESID) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_rnd(a[GT_A_X1], a[GT_A_O_RSTD], NULL, NULL, a[GT_A_X_IN], a[GT_A_O],
                                                                                       W(GT_P_POST_ATTN_NORM), NULL, N, (int)d, eps, off, rnd));
  RUN(OP_FFW_NORM) {
    if (H16(GT_A_M)) /* (its copy, as the fused sweep above writes it) */
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_pack(m_copy_only ? NULL : a[GT_A_M], h[GT_A_M], a[GT_A_M_RSTD], a[GT_A_X1], NULL, W(GT_P_PRE_FFW_NORM), N, (int)d, eps, off));
    else
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(a[GT_A_M], a[GT_A_M_RSTD], a[GT_A_X1], W(GT_P_PRE_FFW_NORM), N, (int)d, eps, off, rnd));
  }
  /* Gate and up kept in 2 bytes and their products able to write bf16:
   * after this forward only their copies are read (in bf16, or unpacked
   * for a recompute), so the products write nothing else (gt_bgemm_c16;
   * the float slots are their scratch where a path has no tile loop) and
   * the GeGLU reads them at 2 bytes an element. With the activation kept
   * in 2 bytes too and the down projection reading its copy, the GeGLU
   * writes only that copy. */
  const uint32_t mlp_ops = (1u << OP_MM_GATE) | (1u << OP_MM_UP) | (1u << OP_GEGLU);
  const int mlp16 = H16(GT_A_GATE) && H16(GT_A_UP) && (ops & mlp_ops) == mlp_ops &&
                    gt__proj_b16(io, OP_MM_GATE, WM(GT_P_W_GATE)) && gt__proj_b16(io, OP_MM_UP, WM(GT_P_W_UP));
  const int act16 = mlp16 && H16(GT_A_ACT) && gt__reads_copy(io, ops, OP_MM_DOWN, WM(GT_P_W_DOWN));
  RUN(OP_MM_GATE) gt__proj_forward(io, a, h, OP_MM_GATE, WM(GT_P_W_GATE), mlp16 ? h[GT_A_GATE] : NULL);
  RUN(OP_MM_UP) gt__proj_forward(io, a, h, OP_MM_UP, WM(GT_P_W_UP), mlp16 ? h[GT_A_UP] : NULL);
  RUN(OP_GEGLU) {
    if (mlp16)
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_forward_b16(act16 ? NULL : a[GT_A_ACT], h[GT_A_ACT], h[GT_A_GATE], h[GT_A_UP], N * F));
    else if (H16(GT_A_GATE) || H16(GT_A_UP) || H16(GT_A_ACT))
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_forward_pack(a[GT_A_ACT], h[GT_A_ACT], h[GT_A_GATE], h[GT_A_UP], a[GT_A_GATE], a[GT_A_UP], N * F));
    else
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_forward_rnd(a[GT_A_ACT], a[GT_A_GATE], a[GT_A_UP], N * F, rnd));
  }
  RUN(OP_MM_DOWN) gt__proj_forward(io, a, h, OP_MM_DOWN, WM(GT_P_W_DOWN), NULL);
  RUN(OP_SHARED_NORM) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(a[GT_A_SHARED], a[GT_A_SHARED_RSTD], a[GT_A_F], W(GT_P_POST_FFW_NORM_1), N, (int)d, eps, off, rnd));
  RUN(OP_MOE) gt__moe_forward(io, a);
  RUN(OP_MOE_ADD) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__sum(a[GT_A_MOE_SUM], a[GT_A_SHARED], a[GT_A_MOE_OUT], N * d));
  RUN(OP_FFW_RESID) {
    float *dst = L->gemma4 ? a[GT_A_X2] : x_out;
    const float *ffw = L->n_experts ? a[GT_A_MOE_SUM] : a[GT_A_F];
    if (!L->n_experts && H16(GT_A_F))
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_pack(dst, NULL, a[GT_A_F_RSTD], NULL, NULL, NULL, a[GT_A_X1], ffw, h[GT_A_F],
                                                                          W(GT_P_POST_FFW_NORM), NULL, N, (int)d, eps, off));
    else
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_rnd(dst, a[GT_A_F_RSTD], NULL, NULL, a[GT_A_X1], ffw, W(GT_P_POST_FFW_NORM), NULL,
                                                                         N, (int)d, eps, off, rnd));
  }
  RUN(OP_PLE_GATE) gt__proj_forward(io, a, h, OP_PLE_GATE, WM(GT_P_PLE_GATE), NULL);
  RUN(OP_PLE_ACT) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__ple_act_forward(a[GT_A_PLE_ACT], a[GT_A_PLE_GATE], io->ple, io->ple_stride, N, (int)P));
  RUN(OP_PLE_PROJ) gt__proj_forward(io, a, h, OP_PLE_PROJ, WM(GT_P_PLE_PROJ), NULL);
  RUN(OP_PLE_RESID) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_forward_rnd(a[GT_A_X3], a[GT_A_PLE_RSTD], NULL, NULL, a[GT_A_X2], a[GT_A_PLE_PROJ],
                                                                       W(GT_P_PLE_NORM), NULL, N, (int)d, eps, off, rnd));
  }
  RUN(OP_SCALE) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_scale_forward(x_out, gt__scaled_input(L, a), gt__lambda(io), N * d));
#undef RUN
#undef H16
}

void gt_layer_forward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], float *x_out) {
  gt_layer_forward_ops(io, a, gt_layer_all_ops(io->L), x_out);
}

void gt_layer_backward_temps(const gt_model *m, const gt_layer_desc *L, int64_t N, int64_t *resid, int64_t *ple,
                             int64_t *ffw, int64_t *attn) {
  int64_t d = m->d, qd = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim;
  int64_t F = L->mlp_dim, P = L->ple_dim;
  *resid = N * d;
  *ple = P > 0 ? N * d + 2 * N * P : 0;
  /* MoE layers: d(shared + routed) too */
  *ffw = N * d + 3 * N * F + (L->n_experts ? N * d : 0);
  /* dO, dCTX (later d(q raw)), dQ (later d(v raw)), and with own K/V: dK,
   * dV, d(k raw); a KV-shared layer sends dK/dV to its donor instead */
  *attn = N * d + 2 * N * qd + (L->kv_donor < 0 ? 3 * N * kd : 0);
}

#define G(slot) (gt_layer_grad(L, grads, (slot)))  /* grads: this layer's block; NULL for a frozen tensor */
/* slot's adapter backward (model/lora.h) after its base product's, while
 * no adapter failed: an allocation-only run takes its temporaries at the
 * same point; x is the input's activation slot (its float, or its bf16
 * copy where gt_layer_reads_b16 kept it so) */
#define LORA_BWD16(slot, x, dy, dy16, dx, in, out)                                                               \
  do {                                                                                                           \
    if (!rc && L->lora_a_rel[(slot)] >= 0)                                                                       \
      GT_PROF(m->prof, GT_PROF_MATMUL, rc = gt_lora_backward(io, (slot), grads, a[x], io->b16[x], (dy), (dy16), (dx), N, (in), (out), err)); \
  } while (0)
#define LORA_BWD(slot, x, dy, dx, in, out) LORA_BWD16(slot, x, dy, NULL, dx, in, out)

/* Gemma 4's output stage: x_out = lambda * y with y = x3 (PLE) or x2, and
 * the PLE block x3 = x2 + norm(proj(gelu(gate(x2)) * ple)). On return dx1
 * holds d(loss)/d(x2). */
static gt_rc gt__backward_output(const gt_layer_io *io, float *const a[GT_A_NSLOTS], const float *dx_out, float *dx1,
                                 float *grads, int64_t n_ple, gt_err *err) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  int64_t N = (int64_t)io->B * io->T, d = m->d, P = L->ple_dim;
  float off = m->norm_offset;
  int meas = gt_mem_measuring(m->mem);
  if (!meas)
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_scale_backward(dx1, G(GT_P_LAYER_SCALAR), dx_out, gt__scaled_input(L, a), gt__lambda(io), N * d));
  if (!P) return GT_OK;
  float *pl = gt_mem_alloc_named(m->mem, GT_MEM_TEMP, (size_t)n_ple * sizeof(float), "per-layer input gradients");
  if (!pl) return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for the per-layer input gradients", L->index);
  float *dPP = pl, *dACT = dPP + N * d, *dGATE = dACT + N * P;
  gt_rc rc = GT_OK;
  if (!meas) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dPP, G(GT_P_PLE_NORM), dx1, a[GT_A_PLE_PROJ], a[GT_A_PLE_RSTD], W(GT_P_PLE_NORM), N, (int)d, off));
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward(m, dACT, G(GT_P_PLE_PROJ), dPP, a[GT_A_PLE_ACT], WM(GT_P_PLE_PROJ), N, P, d));
  }
  LORA_BWD(GT_P_PLE_PROJ, GT_A_PLE_ACT, dPP, dACT, P, d);
  if (!meas) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__ple_act_backward(dGATE, io->dple, dACT, a[GT_A_PLE_GATE], io->ple, io->ple_stride, N, (int)P));
  if (!meas) GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward(m, dx1, G(GT_P_PLE_GATE), dGATE, a[GT_A_X2], WM(GT_P_PLE_GATE), N, d, P));
  LORA_BWD(GT_P_PLE_GATE, GT_A_X2, dGATE, dx1, d, P);
  gt_mem_free(m->mem, pl);
  return rc;
}

/* The routed block's backward: adds d(loss)/d(x1) into dx1 and its weight
 * gradients into the layer's block (with expert parallelism: this rank's
 * experts, and partial sums of the replicated tensors that the sharded
 * executor sums over the expert group). */
static gt_rc gt__moe_backward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], const float *dY, float *dx1,
                              float *grads, gt_err *err) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  gt_moe_dims md = gt__moe_dims(m, L, io->B, io->T);
  int64_t nf, nb, N = (int64_t)io->B * io->T, d = m->d, Ng = md.B * md.T * d;
  gt_layer_moe_temps(m, L, io->B, io->T, &nf, &nb);
  float *tmp = gt_mem_alloc_named(m->mem, GT_MEM_TEMP, (size_t)nb * sizeof(float), "routed experts' backward scratch");
  if (!tmp) return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for the routed experts' scratch", L->index);
  if (gt_mem_measuring(m->mem)) { /* allocation only: no exchange with the expert group either */
    gt_mem_free(m->mem, tmp);
    return GT_OK;
  }
  gt_moe_weights w = gt__moe_w(io);
  gt_moe_grads g = {G(GT_P_ROUTER_PROJ), G(GT_P_ROUTER_SCALE), G(GT_P_EXPERT_SCALE), G(GT_P_PRE_FFW_NORM_2),
                    G(GT_P_POST_FFW_NORM_2), G(GT_P_EXPERT_GATE_UP), G(GT_P_EXPERT_DOWN)};
  gt_moe_saved s = gt__moe_bind(a[GT_A_MOE_SAVED], &md);
  if (L->moe_ep > 1) {
    float *dout = tmp + (nb - 2 * Ng), *dh = dout + Ng; /* dh starts zeroed: the kernel adds */
    m->ep->all_gather(m->ep->ctx, dY, dout, Ng);
    GT_PROF(m->prof, GT_PROF_MATMUL, gt_moe_backward(dh, &g, dout, m->moe_dlb, &s, a[GT_A_MOE_IN], &w, &md, tmp));
    m->ep->reduce_scatter(m->ep->ctx, dh, dout, Ng); /* this rank's rows of the group's d(x1) */
    gt__add(dx1, dout, N * d);
  } else {
    GT_PROF(m->prof, GT_PROF_MATMUL, gt_moe_backward(dx1, &g, dY, m->moe_dlb, &s, a[GT_A_X1], &w, &md, tmp));
  }
  gt_mem_free(m->mem, tmp);
  return GT_OK;
}

gt_rc gt_layer_backward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], const float *dx_out,
                        float *dx_in, float *grads, gt_err *err) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  int64_t N = (int64_t)io->B * io->T, d = m->d, H = L->n_heads, K = L->n_kv_heads, hd = L->head_dim;
  int64_t qd = H * hd, kd = K * hd, F = L->mlp_dim;
  int own_kv = L->kv_donor < 0;
  float off = m->norm_offset;
  gt_mem *mem = m->mem;
  int meas = gt_mem_measuring(mem); /* allocation only: the same buffers, no arithmetic */
  gt_rc rc;

  /* Temporaries. The PLE, FFW and attention stages reuse one region each to
   * keep the peak low. Backward kernels add by convention, but the first
   * producer of each gradient here writes it instead (the gt_*_write and
   * accumulate = 0 forms), so most regions need no zeroing pass: only what an
   * adding kernel fills first is zeroed (and commented so). */
  int64_t n_dx1, n_ple, n_ffw, n_attn;
  gt_layer_backward_temps(m, L, N, &n_dx1, &n_ple, &n_ffw, &n_attn);
  /* dx1 accumulates d(x1). It starts as d(x2): on Gemma 3 without experts
   * the pre-FFW norm's backward writes dx1 = dx_out + its own part in one
   * pass (no copy); the routed block adds into a copy of dx_out; Gemma 4's
   * output stage adds into a zeroed dx1. */
  int direct = !L->gemma4 && !L->n_experts;
  float *dx1 = L->gemma4 ? gt_mem_alloc_named(mem, GT_MEM_TEMP, (size_t)n_dx1 * sizeof(float), "d(attention residual)")
                         : gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)n_dx1 * sizeof(float), "d(attention residual)");
  if (!dx1) return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for temporaries", L->index);
  const float *dx2 = dx_out;
  if (L->gemma4) {
    if ((rc = gt__backward_output(io, a, dx_out, dx1, grads, n_ple, err))) {
      gt_mem_free(mem, dx1);
      return rc;
    }
    dx2 = dx1; /* read by the post-FFW norm's backward before anything adds to dx1 */
  } else if (!meas && !direct) {
    memcpy(dx1, dx_out, (size_t)n_dx1 * sizeof(float));
  }
  float *ffw = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)n_ffw * sizeof(float), "MLP gradients");
  if (!ffw) {
    gt_mem_free(mem, dx1);
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for temporaries", L->index);
  }
  float *dF = ffw, *dACT = dF + N * d, *dGATE = dACT + N * F, *dUP = dGATE + N * F;

  if (L->n_experts) {
    /* x2 = x1 + norm(y), y = norm_1(f) + routed(x1) */
    float *dY = dUP + N * F;
    if (!meas)
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_backward(dY, G(GT_P_POST_FFW_NORM), NULL, dx2, a[GT_A_MOE_SUM], a[GT_A_F_RSTD],
                          W(GT_P_POST_FFW_NORM), N, (int)d, off, 0));
    if ((rc = gt__moe_backward(io, a, dY, dx1, grads, err))) {
      gt_mem_free(mem, ffw);
      gt_mem_free(mem, dx1);
      return rc;
    }
    if (!meas)
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, GT_A_F, dF, G(GT_P_POST_FFW_NORM_1), NULL, dY, a[GT_A_SHARED_RSTD],
                          W(GT_P_POST_FFW_NORM_1), N, (int)d, 0));
  } else if (!meas) {
    /* x2 = x1 + norm(f) */
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, GT_A_F, dF, G(GT_P_POST_FFW_NORM), NULL, dx2, a[GT_A_F_RSTD],
                        W(GT_P_POST_FFW_NORM), N, (int)d, 0));
  }
  rc = GT_OK;
  {
    if (!meas) GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 1, dACT, G(GT_P_W_DOWN), dF, a, GT_A_ACT, WM(GT_P_W_DOWN), N, F, d));
    LORA_BWD(GT_P_W_DOWN, GT_A_ACT, dF, dACT, F, d);
    float *dM = dF; /* dF is consumed: reuse it for dM */
    /* Gate, up and the MLP's normalised input all kept in bf16, and gate's
     * and up's products (an adapter's too) reading bf16 operands in place:
     * their gradients' only readers are those products, which round them
     * as they pack them, so the GeGLU's backward writes them as bf16
     * patterns (in their float buffers' first half) and the products read
     * them so. */
    const int dmlp16 = !a[GT_A_GATE] && !a[GT_A_M] && gt__grad16(io, OP_MM_GATE, WM(GT_P_W_GATE)) && gt__grad16(io, OP_MM_UP, WM(GT_P_W_UP));
    uint16_t *dG16 = dmlp16 ? (uint16_t *)(void *)dGATE : NULL, *dU16 = dmlp16 ? (uint16_t *)(void *)dUP : NULL;
    const uint16_t *m16 = io->b16[GT_A_M];
    if (!meas && dmlp16)
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_backward_b16_to_b16(dG16, dU16, dACT, io->b16[GT_A_GATE], io->b16[GT_A_UP], N * F));
    else if (!meas && a[GT_A_GATE])
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_backward_write(dGATE, dUP, dACT, a[GT_A_GATE], a[GT_A_UP], N * F));
    else if (!meas) /* kept in bf16 and read so (gt_layer_reads_b16) */
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_backward_write_b16(dGATE, dUP, dACT, io->b16[GT_A_GATE], io->b16[GT_A_UP], N * F));
    if (!meas && dmlp16)
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward16(m, 1, dM, G(GT_P_W_GATE), dG16, F, NULL, m16, WM(GT_P_W_GATE), N, d, F));
    else if (!meas)
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 1, dM, G(GT_P_W_GATE), dGATE, a, GT_A_M, WM(GT_P_W_GATE), N, d, F));
    LORA_BWD16(GT_P_W_GATE, GT_A_M, dmlp16 ? NULL : dGATE, dG16, dM, d, F);
    if (!meas && dmlp16)
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward16(m, 0, dM, G(GT_P_W_UP), dU16, F, NULL, m16, WM(GT_P_W_UP), N, d, F));
    else if (!meas)
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 0, dM, G(GT_P_W_UP), dUP, a, GT_A_M, WM(GT_P_W_UP), N, d, F));
    LORA_BWD16(GT_P_W_UP, GT_A_M, dmlp16 ? NULL : dUP, dU16, dM, d, F);
    /* direct: dx1 = dx_out + this norm's part, written */
    if (!meas)
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, GT_A_X1, dx1, G(GT_P_PRE_FFW_NORM), direct ? dx_out : NULL, dM,
                          a[GT_A_M_RSTD], W(GT_P_PRE_FFW_NORM), N, (int)d, !direct));
  }
  gt_mem_free(mem, ffw);
  if (rc) {
    gt_mem_free(mem, dx1);
    return rc;
  }

  /* x1 = x_in + norm(o): dx1 joins dx_in in the input norm's backward pass */
  float *attn = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)n_attn * sizeof(float), "attention gradients");
  if (!attn) {
    gt_mem_free(mem, dx1);
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for temporaries", L->index);
  }
  float *dO = attn, *dCTX = dO + N * d, *dQ = dCTX + N * qd;
  if (meas) { /* allocation only: skip the attention's arithmetic, take the adapters' temporaries */
    LORA_BWD(GT_P_WO, GT_A_CTX, dO, dCTX, qd, d);
    LORA_BWD(GT_P_WQ, GT_A_A, dQ, dO, d, qd);
    LORA_BWD(GT_P_WK, GT_A_A, dQ, dO, d, kd);
    LORA_BWD(GT_P_WV, GT_A_A, dQ, dO, d, kd);
    goto attn_done;
  }
  float *dK = own_kv ? dQ + N * qd : io->dkv_k, *dV = own_kv ? dK + N * kd : io->dkv_v;
  float *dKR = own_kv ? dV + N * kd : NULL, *dQR = dCTX; /* dCTX is consumed before dQR is written */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, GT_A_O, dO, G(GT_P_POST_ATTN_NORM), NULL, dx1, a[GT_A_O_RSTD],
                      W(GT_P_POST_ATTN_NORM), N, (int)d, 0));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 1, dCTX, G(GT_P_WO), dO, a, GT_A_CTX, WM(GT_P_WO), N, qd, d));
  LORA_BWD(GT_P_WO, GT_A_CTX, dO, dCTX, qd, d);
  /* the attention kernel adds into dQ (and its own dK, dV, which follow dQ) */
  memset(dQ, 0, (size_t)(N * qd + (own_kv ? 2 * N * kd : 0)) * sizeof(float));
  gt_attn_dims ad = gt__attn_dims(io); /* bf16 tile products with dtype=bfloat16 */
  ad.out16 = a[GT_A_CTX] ? NULL : io->b16[GT_A_CTX]; /* kept in bf16 (gt_layer_reads_b16) */
  const float *kk = own_kv ? a[GT_A_K] : io->kv_k, *vv = own_kv ? a[GT_A_V] : io->kv_v;
  int arc = 0;
  GT_PROF(m->prof, GT_PROF_ATTENTION, arc = gt_attention_backward(dQ, dK, dV, dCTX, a[GT_A_CTX], a[GT_A_LSE], a[GT_A_Q], kk, vv,
                        io->seg, &ad));
  if (arc) {
    gt_mem_free(mem, attn);
    gt_mem_free(mem, dx1);
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for the attention kernel's per-thread scratch",
                      L->index);
  }
  /* a donor: its readers' gradients of the shared K/V join its own */
  if (own_kv && io->dkv_k) {
    gt__add(dK, io->dkv_k, N * kd);
    gt__add(dV, io->dkv_v, N * kd);
  }
  /* RoPE's backward (in place on dQ, dK) and the q/k norm's backward, which
   * writes d(q raw) and d(k raw), in one sweep over each row-head */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__rope_norm_backward(io, a, GT_A_Q_RAW, dQR, G(GT_P_Q_NORM), dQ, a[GT_A_Q_RSTD], W(GT_P_Q_NORM), H));
  float *dVR = dV; /* d(value projection output): Gemma 3 has no v-norm */
  if (own_kv) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__rope_norm_backward(io, a, GT_A_K_RAW, dKR, G(GT_P_K_NORM), dK, a[GT_A_K_RSTD], W(GT_P_K_NORM), K));
    if (L->gemma4) {
      /* v = v_norm(raw): K = V sends it into d(k raw); else into dQ's
       * region, free since the q-norm consumed it (kd <= qd: K divides H) */
      dVR = L->k_eq_v ? dKR : dQ; /* adds into d(k raw), or writes */
      GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, L->k_eq_v ? GT_A_K_RAW : GT_A_V_RAW, dVR, G(GT_P_V_NORM), NULL, dV,
                          a[GT_A_V_RSTD], W(GT_P_V_NORM), N * K, (int)hd, L->k_eq_v));
    }
  }
  float *dA = dO; /* dO is consumed */
  GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 1, dA, G(GT_P_WQ), dQR, a, GT_A_A, WM(GT_P_WQ), N, d, qd));
  LORA_BWD(GT_P_WQ, GT_A_A, dQR, dA, d, qd);
  if (own_kv) GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 0, dA, G(GT_P_WK), dKR, a, GT_A_A, WM(GT_P_WK), N, d, kd));
  if (own_kv) LORA_BWD(GT_P_WK, GT_A_A, dKR, dA, d, kd);
  if (own_kv && !L->k_eq_v) GT_PROF(m->prof, GT_PROF_MATMUL, gt__proj_backward(io, 0, dA, G(GT_P_WV), dVR, a, GT_A_A, WM(GT_P_WV), N, d, kd));
  if (own_kv && !L->k_eq_v) LORA_BWD(GT_P_WV, GT_A_A, dVR, dA, d, kd);
  /* dx_in = dx1 + the input norm's part, written in one pass */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__norm_backward(io, a, GT_A_X_IN, dx_in, G(GT_P_INPUT_NORM), dx1, dA, a[GT_A_A_RSTD],
                      W(GT_P_INPUT_NORM), N, (int)d, 0));
attn_done:
  gt_mem_free(mem, attn);
  gt_mem_free(mem, dx1);
  return rc;
}
