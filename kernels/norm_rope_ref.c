/* Scalar references of the fused sweeps (kernels/norm_rope.c, and
 * gt_geglu_forward_rnd): the unfused scalar references in sequence, then
 * the scalar bf16 rounding. */
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

static void gt__round_ref(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = gt_bf16_round1(x[i]);
}

void gt_rmsnorm_forward_rnd_ref(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim,
                                float eps, float w_offset, int round_bf16) {
  gt_rmsnorm_forward_ref(out, rstd, x, w, rows, dim, eps, w_offset);
  if (round_bf16 && rows > 0 && dim > 0) gt__round_ref(out, rows * dim);
}

void gt_rmsnorm_rope_forward_ref(float *out, float *rstd, const float *x, const float *w, const int32_t *pos,
                                 const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim,
                                 float eps, float w_offset, int round_bf16) {
  if (ntok <= 0 || nheads <= 0) return;
  gt_rmsnorm_forward_ref(out, rstd, x, w, ntok * nheads, head_dim, eps, w_offset);
  if (head_dim >= 2) gt_rope_forward_ref(out, pos, cos_tab, sin_tab, ntok, nheads, head_dim);
  if (round_bf16 && head_dim > 0) gt__round_ref(out, ntok * nheads * head_dim);
}

void gt_rope_rmsnorm_backward_ref(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w,
                                  const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                                  int nheads, int head_dim, float w_offset) {
  if (ntok <= 0 || nheads <= 0 || head_dim <= 0) return;
  if (head_dim >= 2) gt_rope_backward_ref(dout, pos, cos_tab, sin_tab, ntok, nheads, head_dim);
  gt_rmsnorm_residual_backward_ref(dx, dw, NULL, dout, x, rstd, w, ntok * nheads, head_dim, w_offset, 0);
}

void gt_rmsnorm_residual_forward_rnd_ref(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                         const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                         float eps, float w_offset, int round_bf16) {
  gt_rmsnorm_residual_forward_ref(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset);
  if (!round_bf16 || rows <= 0 || dim <= 0) return;
  gt__round_ref(res_out, rows * dim);
  if (out2) gt__round_ref(out2, rows * dim);
}

void gt_rmsnorm_forward_pack_ref(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                 const float *w, int64_t rows, int dim, float eps, float w_offset) {
  const int64_t n = rows > 0 && dim > 0 ? rows * dim : 0;
  float *o = out ? out : malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); /* test-only scratch */
  if (!o) return;
  gt_rmsnorm_forward_rnd_ref(o, rstd, x, w, rows, dim, eps, w_offset, 1);
  if (out16 && n) gt_bf16_pack_ref(out16, o, n);
  if (x16 && n) gt_bf16_pack_ref(x16, x, n);
  if (!out) free(o);
}

void gt_rmsnorm_residual_forward_pack_ref(float *res_out, uint16_t *res16, float *rstd, float *out2,
                                          uint16_t *out2_16, float *rstd2, const float *res, const float *y,
                                          uint16_t *y16, const float *w, const float *w2, int64_t rows, int dim,
                                          float eps, float w_offset) {
  const int64_t n = rows > 0 && dim > 0 ? rows * dim : 0;
  float *o2 = out2 || !out2_16 ? out2 : malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); /* test-only scratch */
  if (out2_16 && !o2) return;
  gt_rmsnorm_residual_forward_rnd_ref(res_out, rstd, o2, rstd2, res, y, w, w2, rows, dim, eps, w_offset, 1);
  if (n) {
    if (res16) gt_bf16_pack_ref(res16, res_out, n);
    if (out2_16) gt_bf16_pack_ref(out2_16, o2, n);
    if (y16) gt_bf16_pack_ref(y16, y, n);
  }
  if (o2 != out2) free(o2);
}

void gt_rmsnorm_rope_forward_pack_ref(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                      const float *w, const int32_t *pos, const float *cos_tab,
                                      const float *sin_tab, int64_t ntok, int nheads, int head_dim, float eps,
                                      float w_offset) {
  gt_rmsnorm_rope_forward_ref(out, rstd, x, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, eps, w_offset, 1);
  const int64_t n = ntok > 0 && nheads > 0 && head_dim > 0 ? ntok * nheads * head_dim : 0;
  if (out16 && n) gt_bf16_pack_ref(out16, out, n);
  if (x16 && n) gt_bf16_pack_ref(x16, x, n);
}

void gt_rope_rmsnorm_backward_b16_ref(float *dx, float *dw, float *dout, const uint16_t *x16, const float *rstd,
                                      const float *w, const int32_t *pos, const float *cos_tab,
                                      const float *sin_tab, int64_t ntok, int nheads, int head_dim, float w_offset) {
  const int64_t n = ntok > 0 && nheads > 0 && head_dim > 0 ? ntok * nheads * head_dim : 0;
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); /* test-only scratch */
  if (!x) return;
  gt_bf16_unpack_ref(x, x16, n);
  gt_rope_rmsnorm_backward_ref(dx, dw, dout, x, rstd, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, w_offset);
  free(x);
}

void gt_geglu_forward_rnd_ref(float *out, const float *gate, const float *up, int64_t n, int round_bf16) {
  gt_geglu_forward_ref(out, gate, up, n);
  if (round_bf16 && n > 0) gt__round_ref(out, n);
}
