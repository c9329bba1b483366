#include "model/ple.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/linear.h"

void gt__ple_temps(const gt_model *m, int64_t N, int64_t *fwd, int64_t *bwd_cols, int64_t *bwd_rows) {
  int64_t LP = m->n_layers * m->ple_dim;
  *fwd = N * LP;
  *bwd_cols = N * LP;
  *bwd_rows = N * m->n_layers;
}

/* Scales are float32 constants, as HF multiplies float32 tensors by them;
 * the table's sqrt(P) is cast to the weights' dtype, as HF's scaled
 * embedding does for both tables (bf16 under dtype=bfloat16, as
 * m->emb_scale). */
static float gt__proj_scale(const gt_model *m) { return (float)(1.0 / sqrt((double)m->d)); }
static float gt__ident_scale(const gt_model *m) {
  float s = sqrtf((float)m->ple_dim);
  return m->bf16_act ? gt_bf16_round1(s) : s;
}
static const float gt__mix = 0.70710678118654752f; /* 2^-0.5 */

typedef struct gt__ple_args {
  float *x;
  const float *E;
  const int32_t *tok;
  int64_t LP;
  float s;
  const gt_qweight *q; /* the table when stored quantized (else NULL: E) */
  int bf16;
} gt__ple_args;

static void gt__scale_part(void *arg, int64_t i0, int64_t i1) {
  const gt__ple_args *a = arg;
  float *x = a->x;
  const float s = a->s;
  for (int64_t i = i0; i < i1; i++) x[i] *= s;
}

static void gt__scale(float *x, int64_t n, float s) {
  gt__ple_args a = {.x = x, .s = s};
  gt_team_for(n > 65536, n, gt__scale_part, &a);
}

/* ple[n] = (E[tok[n]] * s + ple[n]) * 2^-0.5 over tokens n; a stored-
 * quantized table's row is dequantized into a row of scratch (and rounded
 * to bf16 under dtype=bfloat16, as the float32 model's rounded copy is) */
static void gt__mix_part(void *arg, int64_t n0, int64_t n1) {
  const gt__ple_args *a = arg;
  const int64_t LP = a->LP;
  const float s = a->s;
  float *row = a->q ? malloc((size_t)LP * sizeof(float)) : NULL;
  if (a->q && !row) return; /* a row of L*P floats */
  for (int64_t n = n0; n < n1; n++) {
    const float *e = a->E + (int64_t)a->tok[n] * LP;
    if (a->q) {
      gt_dequantize_rows(a->q, a->tok[n], 1, row);
      if (a->bf16) gt_bf16_round(row, LP);
      e = row;
    }
    float *p = a->x + n * LP;
    for (int64_t c = 0; c < LP; c++) p[c] = (e[c] * s + p[c]) * gt__mix;
  }
  free(row);
}

/* ctx = x0 . Wproj^T * d^-0.5, [N, L*P] */
static void gt__project(const gt_model *m, const float *hp, const float *x0, int64_t N, float *ctx) {
  int64_t LP = m->n_layers * m->ple_dim;
  const float *Wp = hp + m->ple_proj_offset;
  GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, ctx, x0, (gt__weight){Wp, m->ple_proj_qtype}, N, m->d, LP, 0));
  gt__scale(ctx, N * LP, gt__proj_scale(m));
  gt__act_round(m, ctx, N * LP);
}

gt_rc gt__ple_forward(const gt_model *m, const float *hp, const float *x0, const int32_t *tok, int64_t N, float *ple,
                      gt_err *err) {
  int64_t LP = m->n_layers * m->ple_dim;
  const float *E = hp + m->ple_embed_offset, *wn = hp + m->ple_norm_offset;
  float *ctx = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, (size_t)(N * LP) * sizeof(float), "per-layer projection");
  if (!ctx) return gt_err_set(err, GT_ERR_NOMEM, "ple: no memory for the per-layer projection [%lld, %lld]",
                              (long long)N, (long long)LP);
  if (gt_mem_measuring(m->mem)) { /* allocation only */
    gt_mem_free(m->mem, ctx);
    return GT_OK;
  }
  gt__project(m, hp, x0, N, ctx);
  /* one RMSNorm per (token, layer) vector of P */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(ple, NULL, ctx, wn, N * m->n_layers, (int)m->ple_dim, m->eps,
                                                         m->norm_offset));
  float s = gt__ident_scale(m);
  gt_qweight q = gt_qweight_at((gt_qtype)m->ple_embed_qtype, E, m->ple_vocab, LP);
  gt__ple_args a = {.x = ple, .E = E, .tok = tok, .LP = LP, .s = s,
                    .q = m->ple_embed_qtype != GT_STORE_F32 ? &q : NULL, .bf16 = m->bf16_act};
  gt_team_for(N * LP > 65536, N, gt__mix_part, &a);
  gt__act_round(m, ple, N * LP);
  gt_mem_free(m->mem, ctx);
  return GT_OK;
}

gt_rc gt__ple_backward(const gt_model *m, const float *hp, float *hg, const float *x0, const int32_t *tok, int64_t N,
                       float *dple, float *dx0, gt_err *err) {
  int64_t LP = m->n_layers * m->ple_dim, rows = N * m->n_layers;
  /* offsets in the head unit, which starts at 0 */
  int64_t eo = m->ple_embed_offset, po = m->ple_proj_offset, no = m->ple_norm_offset;
  float *gE = gt_model_head_grad(m, hg, eo), *gP = gt_model_head_grad(m, hg, po), *gN = gt_model_head_grad(m, hg, no);
  int meas = gt_mem_measuring(m->mem); /* allocation only: the buffers, no arithmetic */
  /* both halves of the sum get dple * 2^-0.5 */
  if (!meas) {
    gt__scale(dple, N * LP, gt__mix);
    if (gE) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_embedding_backward(gE, dple, tok, N, (int)LP, gt__ident_scale(m)));
  }
  gt_rc rc = GT_OK;
  float *ctx = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, (size_t)(N * LP) * sizeof(float),
                                         "per-layer projection (recomputed)");
  float *dctx = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, (size_t)(N * LP) * sizeof(float),
                                          "per-layer projection gradient");
  float *rstd = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, (size_t)rows * sizeof(float), "per-layer norm rstd");
  if (!ctx || !dctx || !rstd) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "ple: no memory to backpropagate the per-layer projection");
    goto done;
  }
  if (meas) goto done;
  /* the same kernels on the same x0 as the forward: the same bits */
  gt__project(m, hp, x0, N, ctx);
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(dctx, rstd, ctx, hp + no, rows, (int)m->ple_dim, m->eps, m->norm_offset));
  /* written, not added: the recomputed norm output in dctx is not read */
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_backward(dctx, gN, NULL, dple, ctx, rstd, hp + no, rows,
                                                                   (int)m->ple_dim, m->norm_offset, 0));
  gt__scale(dctx, N * LP, gt__proj_scale(m));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward(m, dx0, gP, dctx, x0, (gt__weight){hp + po, m->ple_proj_qtype}, N, m->d, LP));
done:
  gt_mem_free(m->mem, ctx);
  gt_mem_free(m->mem, dctx);
  gt_mem_free(m->mem, rstd);
  return rc;
}
