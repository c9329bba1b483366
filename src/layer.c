#include "gemtrain/layer.h"

#include <omp.h>
#include <string.h>

#include "gemtrain/kernels.h"

const char *gt_act_name(gt_act a) {
  static const char *names[GT_A_NSLOTS] = {
      "decoder_layer_input", "input_norm_rstd", "input_norm", "query_raw", "key_raw",
      "query_norm_rstd", "key_norm_rstd", "query_proj", "key_proj", "value_proj", "context",
      "attention_lse", "out_proj", "out_norm_rstd", "attention_residual", "ffw_norm_rstd",
      "ffw_norm", "mlpwi_0", "mlpwi_1", "mlp_activation", "mlpwo", "mlpwo_norm_rstd"};
  return (int)a >= 0 && a < GT_A_NSLOTS ? names[a] : "?";
}

int64_t gt_act_numel(const gt_model *m, const gt_layer_desc *L, gt_act a, int64_t B, int64_t T) {
  int64_t N = B * T, d = m->d;
  int64_t qd = (int64_t)L->n_heads * L->head_dim, kd = (int64_t)L->n_kv_heads * L->head_dim;
  switch (a) {
    case GT_A_X_IN: case GT_A_A: case GT_A_O: case GT_A_X1: case GT_A_M: case GT_A_F:
      return N * d;
    case GT_A_A_RSTD: case GT_A_O_RSTD: case GT_A_M_RSTD: case GT_A_F_RSTD:
      return N;
    case GT_A_Q_RAW: case GT_A_Q: case GT_A_CTX:
      return N * qd;
    case GT_A_K_RAW: case GT_A_K: case GT_A_V:
      return N * kd;
    case GT_A_Q_RSTD: return N * L->n_heads;
    case GT_A_K_RSTD: return N * L->n_kv_heads;
    case GT_A_LSE: return B * L->n_heads * T;
    case GT_A_GATE: case GT_A_UP: case GT_A_ACT:
      return N * L->mlp_dim;
    case GT_A_NSLOTS: break;
  }
  return 0;
}

static gt_attn_dims gt__attn_dims(const gt_layer_io *io) {
  const gt_layer_desc *L = io->L;
  gt_attn_dims d = {io->B, io->T, L->n_heads, L->n_kv_heads, L->head_dim, L->window, L->q_scale};
  return d;
}

#define W(slot) (gt_layer_slot(L, (float *)io->params, (slot)))

/* y += x, split over threads by fixed ranges */
static void gt__add(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536 && !omp_in_parallel())
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* The forward as a list of ops, each writing its output slots. Recompute
 * after remat runs exactly the ops whose outputs were not kept, with the same
 * kernels on the same inputs, so recomputed values are bit-identical. */
enum {
  OP_IN_NORM, OP_MM_Q, OP_MM_K, OP_MM_V, OP_Q_NORM_ROPE, OP_K_NORM_ROPE, OP_ATTN, OP_MM_O,
  OP_ATTN_RESID, OP_FFW_NORM, OP_MM_GATE, OP_MM_UP, OP_GEGLU, OP_MM_DOWN, OP_FFW_RESID, OP_N
};

static const gt_act gt__op_out[OP_N][2] = {
    [OP_IN_NORM] = {GT_A_A, GT_A_A_RSTD},     [OP_MM_Q] = {GT_A_Q_RAW, GT_A_NSLOTS},
    [OP_MM_K] = {GT_A_K_RAW, GT_A_NSLOTS},    [OP_MM_V] = {GT_A_V, GT_A_NSLOTS},
    [OP_Q_NORM_ROPE] = {GT_A_Q, GT_A_Q_RSTD}, [OP_K_NORM_ROPE] = {GT_A_K, GT_A_K_RSTD},
    [OP_ATTN] = {GT_A_CTX, GT_A_LSE},         [OP_MM_O] = {GT_A_O, GT_A_NSLOTS},
    [OP_ATTN_RESID] = {GT_A_X1, GT_A_O_RSTD}, [OP_FFW_NORM] = {GT_A_M, GT_A_M_RSTD},
    [OP_MM_GATE] = {GT_A_GATE, GT_A_NSLOTS},  [OP_MM_UP] = {GT_A_UP, GT_A_NSLOTS},
    [OP_GEGLU] = {GT_A_ACT, GT_A_NSLOTS},     [OP_MM_DOWN] = {GT_A_F, GT_A_NSLOTS},
    [OP_FFW_RESID] = {GT_A_F_RSTD, GT_A_NSLOTS}, /* and x_out */
};

uint32_t gt_layer_recompute_ops(const uint8_t have[GT_A_NSLOTS]) {
  uint32_t ops = 0;
  for (int op = 0; op < OP_N; op++)
    for (int k = 0; k < 2; k++) {
      gt_act s = gt__op_out[op][k];
      if (s != GT_A_NSLOTS && !have[s]) ops |= 1u << op;
    }
  return ops;
}

uint32_t gt_layer_all_ops(void) { return (1u << OP_N) - 1; }
uint32_t gt_layer_output_op(void) { return 1u << OP_FFW_RESID; }
uint32_t gt_layer_attention_op(void) { return 1u << OP_ATTN; }

void gt_layer_ops_outputs(uint32_t ops, uint8_t out[GT_A_NSLOTS]) {
  memset(out, 0, GT_A_NSLOTS);
  for (int op = 0; op < OP_N; op++)
    if (ops & (1u << op))
      for (int k = 0; k < 2; k++)
        if (gt__op_out[op][k] != GT_A_NSLOTS) out[gt__op_out[op][k]] = 1;
}

void gt_layer_forward_ops(const gt_layer_io *io, float *const a[GT_A_NSLOTS], uint32_t ops, float *x_out) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  int64_t N = (int64_t)io->B * io->T, d = m->d, H = L->n_heads, K = L->n_kv_heads, hd = L->head_dim;
  int64_t qd = H * hd, kd = K * hd, F = L->mlp_dim;
  float eps = m->eps, off = m->norm_offset;
  const float *cs = m->rope_cos[L->rope], *sn = m->rope_sin[L->rope];
#define RUN(op) if (ops & (1u << (op)))

  RUN(OP_IN_NORM) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(a[GT_A_A], a[GT_A_A_RSTD], a[GT_A_X_IN], W(GT_P_INPUT_NORM), N, (int)d, eps, off));
  RUN(OP_MM_Q) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_Q_RAW], a[GT_A_A], W(GT_P_WQ), N, d, qd));
  RUN(OP_MM_K) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_K_RAW], a[GT_A_A], W(GT_P_WK), N, d, kd));
  RUN(OP_MM_V) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_V], a[GT_A_A], W(GT_P_WV), N, d, kd));
  RUN(OP_Q_NORM_ROPE) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(a[GT_A_Q], a[GT_A_Q_RSTD], a[GT_A_Q_RAW], W(GT_P_Q_NORM), N * H, (int)hd, eps, off));
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rope_forward(a[GT_A_Q], io->pos, cs, sn, N, (int)H, (int)hd));
  }
  RUN(OP_K_NORM_ROPE) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(a[GT_A_K], a[GT_A_K_RSTD], a[GT_A_K_RAW], W(GT_P_K_NORM), N * K, (int)hd, eps, off));
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rope_forward(a[GT_A_K], io->pos, cs, sn, N, (int)K, (int)hd));
  }
  RUN(OP_ATTN) {
    gt_attn_dims ad = gt__attn_dims(io);
    GT_PROF(m->prof, GT_PROF_ATTENTION, gt_attention_forward(a[GT_A_CTX], a[GT_A_LSE], a[GT_A_Q], a[GT_A_K], a[GT_A_V], io->seg, &ad));
  }
  RUN(OP_MM_O) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_O], a[GT_A_CTX], W(GT_P_WO), N, qd, d));
  /* x1 = x_in + norm(o): the normalized o is not kept, it is cheap to redo */
  RUN(OP_ATTN_RESID) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(a[GT_A_X1], a[GT_A_O_RSTD], a[GT_A_O], W(GT_P_POST_ATTN_NORM), N, (int)d, eps, off));
    gt__add(a[GT_A_X1], a[GT_A_X_IN], N * d);
  }
  RUN(OP_FFW_NORM) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(a[GT_A_M], a[GT_A_M_RSTD], a[GT_A_X1], W(GT_P_PRE_FFW_NORM), N, (int)d, eps, off));
  RUN(OP_MM_GATE) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_GATE], a[GT_A_M], W(GT_P_W_GATE), N, d, F));
  RUN(OP_MM_UP) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_UP], a[GT_A_M], W(GT_P_W_UP), N, d, F));
  RUN(OP_GEGLU) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_forward(a[GT_A_ACT], a[GT_A_GATE], a[GT_A_UP], N * F));
  RUN(OP_MM_DOWN) GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_forward(a[GT_A_F], a[GT_A_ACT], W(GT_P_W_DOWN), N, F, d));
  RUN(OP_FFW_RESID) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(x_out, a[GT_A_F_RSTD], a[GT_A_F], W(GT_P_POST_FFW_NORM), N, (int)d, eps, off));
    gt__add(x_out, a[GT_A_X1], N * d);
  }
#undef RUN
}

void gt_layer_forward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], float *x_out) {
  gt_layer_forward_ops(io, a, gt_layer_all_ops(), x_out);
}

#define G(slot) (gt_layer_slot(L, grads, (slot)))  /* grads: this layer's block */

gt_rc gt_layer_backward(const gt_layer_io *io, float *const a[GT_A_NSLOTS], const float *dx_out,
                        float *dx_in, float *grads, gt_err *err) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  int64_t N = (int64_t)io->B * io->T, d = m->d, H = L->n_heads, K = L->n_kv_heads, hd = L->head_dim;
  int64_t qd = H * hd, kd = K * hd, F = L->mlp_dim;
  float off = m->norm_offset;
  const float *cs = m->rope_cos[L->rope], *sn = m->rope_sin[L->rope];
  gt_mem *mem = m->mem;

  /* Temporaries, zeroed by the allocator (backward kernels accumulate). The
   * FFW and attention halves reuse one region each to keep the peak low. */
  int64_t n_dx1 = N * d, n_ffw = N * d + 3 * N * F, n_attn = N * d + 2 * N * qd + 3 * N * kd;
  float *dx1 = gt_mem_alloc(mem, GT_MEM_TEMP, (size_t)n_dx1 * sizeof(float));
  float *ffw = gt_mem_alloc(mem, GT_MEM_TEMP, (size_t)n_ffw * sizeof(float));
  if (!dx1 || !ffw) {
    gt_mem_free(mem, dx1);
    gt_mem_free(mem, ffw);
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for temporaries", L->index);
  }
  memcpy(dx1, dx_out, (size_t)n_dx1 * sizeof(float));
  float *dF = ffw, *dACT = dF + N * d, *dGATE = dACT + N * F, *dUP = dGATE + N * F;

  /* x_out = x1 + norm(f) */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dF, G(GT_P_POST_FFW_NORM), dx_out, a[GT_A_F], a[GT_A_F_RSTD],
                      W(GT_P_POST_FFW_NORM), N, (int)d, off));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dACT, G(GT_P_W_DOWN), dF, a[GT_A_ACT], W(GT_P_W_DOWN), N, F, d));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_geglu_backward(dGATE, dUP, dACT, a[GT_A_GATE], a[GT_A_UP], N * F));
  float *dM = dF; /* dF is consumed: reuse it for dM */
  memset(dM, 0, (size_t)(N * d) * sizeof(float));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dM, G(GT_P_W_GATE), dGATE, a[GT_A_M], W(GT_P_W_GATE), N, d, F));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dM, G(GT_P_W_UP), dUP, a[GT_A_M], W(GT_P_W_UP), N, d, F));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dx1, G(GT_P_PRE_FFW_NORM), dM, a[GT_A_X1], a[GT_A_M_RSTD],
                      W(GT_P_PRE_FFW_NORM), N, (int)d, off));
  gt_mem_free(mem, ffw);

  /* x1 = x_in + norm(o) */
  gt__add(dx_in, dx1, N * d);
  float *attn = gt_mem_alloc(mem, GT_MEM_TEMP, (size_t)n_attn * sizeof(float));
  if (!attn) {
    gt_mem_free(mem, dx1);
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for temporaries", L->index);
  }
  float *dO = attn, *dCTX = dO + N * d, *dQ = dCTX + N * qd, *dK = dQ + N * qd, *dV = dK + N * kd;
  float *dKR = dV + N * kd, *dQR = dCTX; /* dCTX is consumed before dQR is written */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dO, G(GT_P_POST_ATTN_NORM), dx1, a[GT_A_O], a[GT_A_O_RSTD],
                      W(GT_P_POST_ATTN_NORM), N, (int)d, off));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dCTX, G(GT_P_WO), dO, a[GT_A_CTX], W(GT_P_WO), N, qd, d));
  gt_attn_dims ad = gt__attn_dims(io);
  GT_PROF(m->prof, GT_PROF_ATTENTION, gt_attention_backward(dQ, dK, dV, dCTX, a[GT_A_CTX], a[GT_A_LSE], a[GT_A_Q], a[GT_A_K], a[GT_A_V],
                        io->seg, &ad));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rope_backward(dQ, io->pos, cs, sn, N, (int)H, (int)hd));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rope_backward(dK, io->pos, cs, sn, N, (int)K, (int)hd));
  memset(dQR, 0, (size_t)(N * qd) * sizeof(float));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dQR, G(GT_P_Q_NORM), dQ, a[GT_A_Q_RAW], a[GT_A_Q_RSTD], W(GT_P_Q_NORM), N * H,
                      (int)hd, off));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dKR, G(GT_P_K_NORM), dK, a[GT_A_K_RAW], a[GT_A_K_RSTD], W(GT_P_K_NORM), N * K,
                      (int)hd, off));
  float *dA = dO; /* dO is consumed */
  memset(dA, 0, (size_t)(N * d) * sizeof(float));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dA, G(GT_P_WQ), dQR, a[GT_A_A], W(GT_P_WQ), N, d, qd));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dA, G(GT_P_WK), dKR, a[GT_A_A], W(GT_P_WK), N, d, kd));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt_matmul_backward(dA, G(GT_P_WV), dV, a[GT_A_A], W(GT_P_WV), N, d, kd));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_backward(dx_in, G(GT_P_INPUT_NORM), dA, a[GT_A_X_IN], a[GT_A_A_RSTD], W(GT_P_INPUT_NORM),
                      N, (int)d, off));
  gt_mem_free(mem, attn);
  gt_mem_free(mem, dx1);
  return GT_OK;
}
