/* Fused elementwise sweeps around the products: RMSNorm with RoPE (q and k
 * norms), and RMSNorm (plain or with the residual stream) with the bf16
 * rounding of dtype=bfloat16, each in one pass over the rows instead of two
 * or three.
 *
 * Each element gets the unfused kernels' expressions (rmsnorm_row.h,
 * rope_row.h, bf16_row.h) in the unfused order, and C11 (-std=c11) does not
 * contract them into FMAs, so the results are bit-identical to the unfused
 * sequence: a remat recompute, the recorded losses and the tests
 * (tests/test_fused.c) rely on it. The forwards rotate and round in the
 * loop that computes each value: a second loop over the row just written
 * (still in L1) measured slower than the separate passes it replaced (8192
 * rows of 64: norm 0.19 ms, norm + rounding loop 0.36 ms, rounding in the
 * norm's loop 0.20 ms, one thread; we did not find out why), so only the
 * norm's reduction reads back what was just written, as unfused. Rows split
 * over threads statically; dw is left to gt_rmsnorm_backward (columns per
 * thread), so nothing depends on the thread count. */
#include <omp.h>

#include "kernels/bf16_row.h"
#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"
#include "kernels/rope_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN && !omp_in_parallel(); }

/* round_bf16 is a constant at every call of these (always inlined), so each
 * variant is a branch-free vector loop */
static inline __attribute__((always_inline)) float gt__rnd(float v, const int round_bf16) {
  return round_bf16 ? gt__bf16_round1_nb(v) : v;
}

/* o_j = (x_j rs) (w_offset + w_j), or x_j rs without a weight (as
 * gt__rms_row_fwd), rounded */
static inline __attribute__((always_inline)) void gt__rms_apply(float *o, const float *xr, const float *w, float rs,
                                                                int dim, float w_offset, const int round_bf16) {
  if (w) {
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = gt__rnd((xr[j] * rs) * (w_offset + w[j]), round_bf16);
  } else {
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = gt__rnd(xr[j] * rs, round_bf16);
  }
}

void gt_rmsnorm_forward_rnd(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps,
                            float w_offset, int round_bf16) {
  if (!round_bf16 || rows <= 0 || dim <= 0) {
    gt_rmsnorm_forward(out, rstd, x, w, rows, dim, eps, w_offset);
    return;
  }
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
  for (int64_t r = 0; r < rows; r++) {
    const float rs = gt__rms_row_rs(x + r * dim, dim, eps);
    if (rstd) rstd[r] = rs;
    gt__rms_apply(out + r * dim, x + r * dim, w, rs, dim, w_offset, 1);
  }
}

/* One row-head: the norm's products go straight into the rotation, each pair
 * (i, i + half) at once, and are rounded there (the forward's sin multiplier
 * is 1 in rope.c, exact). An odd head_dim's last element is not rotated. */
static inline __attribute__((always_inline)) float gt__norm_rope_row(float *o, const float *xr, const float *w,
                                                                     const float *c, const float *s, int dim,
                                                                     int half, float eps, float w_offset,
                                                                     const int round_bf16) {
  const float rs = gt__rms_row_rs(xr, dim, eps);
  const float *xb = xr + half;
  float *ob = o + half;
  if (w) {
    const float *wb = w + half;
#pragma omp simd
    for (int i = 0; i < half; i++) {
      const float x1 = (xr[i] * rs) * (w_offset + w[i]), x2 = (xb[i] * rs) * (w_offset + wb[i]);
      o[i] = gt__rnd(x1 * c[i] - x2 * s[i], round_bf16);
      ob[i] = gt__rnd(x2 * c[i] + x1 * s[i], round_bf16);
    }
  } else {
#pragma omp simd
    for (int i = 0; i < half; i++) {
      const float x1 = xr[i] * rs, x2 = xb[i] * rs;
      o[i] = gt__rnd(x1 * c[i] - x2 * s[i], round_bf16);
      ob[i] = gt__rnd(x2 * c[i] + x1 * s[i], round_bf16);
    }
  }
  if (dim > 2 * half) gt__rms_apply(o + 2 * half, xr + 2 * half, w ? w + 2 * half : NULL, rs, dim - 2 * half, w_offset, round_bf16);
  return rs;
}

void gt_rmsnorm_rope_forward(float *out, float *rstd, const float *x, const float *w, const int32_t *pos,
                             const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim,
                             float eps, float w_offset, int round_bf16) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0) return;
  if (half <= 0) { /* nothing to rotate: the norm (which keeps rstd defined for dim 0) */
    gt_rmsnorm_forward_rnd(out, rstd, x, w, ntok * nheads, head_dim, eps, w_offset, round_bf16);
    return;
  }
#pragma omp parallel for schedule(static) if (gt__par(ntok * nheads * head_dim))
  for (int64_t t = 0; t < ntok; t++) {
    const float *c = cos_tab + (int64_t)pos[t] * half, *s = sin_tab + (int64_t)pos[t] * half;
    for (int h = 0; h < nheads; h++) {
      const int64_t r = t * nheads + h;
      const float *xr = x + r * head_dim;
      float *o = out + r * head_dim;
      const float rs = round_bf16 ? gt__norm_rope_row(o, xr, w, c, s, head_dim, half, eps, w_offset, 1)
                                  : gt__norm_rope_row(o, xr, w, c, s, head_dim, half, eps, w_offset, 0);
      if (rstd) rstd[r] = rs;
    }
  }
}

void gt_rope_rmsnorm_backward(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w,
                              const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                              int nheads, int head_dim, float w_offset) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0 || head_dim <= 0) return;
  if (dx || half > 0) {
#pragma omp parallel for schedule(static) if (gt__par(ntok * nheads * head_dim))
    for (int64_t t = 0; t < ntok; t++) {
      const float *c = half > 0 ? cos_tab + (int64_t)pos[t] * half : NULL;
      const float *s = half > 0 ? sin_tab + (int64_t)pos[t] * half : NULL;
      for (int h = 0; h < nheads; h++) {
        const int64_t r = t * nheads + h;
        float *dr = dout + r * head_dim;
        if (half > 0) gt__rope_row(dr, c, s, half, -1.0f);
        if (dx) gt__rms_row_bwd(dx + r * head_dim, NULL, dr, x + r * head_dim, w, rstd[r], head_dim, w_offset, GT__RMS_SET);
      }
    }
  }
  /* the weight gradient reads the rotated-back dout, column-split as unfused */
  if (dw && w) gt_rmsnorm_backward(NULL, dw, dout, x, rstd, w, ntok * nheads, head_dim, w_offset);
}

void gt_rmsnorm_residual_forward_rnd(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                     const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                     float eps, float w_offset, int round_bf16) {
  if (!round_bf16 || rows <= 0 || dim <= 0) {
    gt_rmsnorm_residual_forward(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset);
    return;
  }
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
  for (int64_t r = 0; r < rows; r++) {
    float *o = res_out + r * dim;
    const float *rr = res + r * dim, *yr = y + r * dim;
    /* as gt_rmsnorm_residual_forward: norm(y) + res (in that order), the next
     * norm of the unrounded sum; then both outputs rounded, as the unfused
     * sequence rounds them after that kernel */
    const float rs = gt__rms_row_rs(yr, dim, eps);
    if (rstd) rstd[r] = rs;
    if (!out2) {
      if (w) {
#pragma omp simd
        for (int j = 0; j < dim; j++) o[j] = gt__bf16_round1_nb((yr[j] * rs) * (w_offset + w[j]) + rr[j]);
      } else {
#pragma omp simd
        for (int j = 0; j < dim; j++) o[j] = gt__bf16_round1_nb(yr[j] * rs + rr[j]);
      }
      continue;
    }
    gt__rms_apply(o, yr, w, rs, dim, w_offset, 0);
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] += rr[j];
    const float rs2 = gt__rms_row_rs(o, dim, eps);
    if (rstd2) rstd2[r] = rs2;
    float *o2 = out2 + r * dim;
    if (w2) {
#pragma omp simd
      for (int j = 0; j < dim; j++) {
        o2[j] = gt__bf16_round1_nb((o[j] * rs2) * (w_offset + w2[j]));
        o[j] = gt__bf16_round1_nb(o[j]);
      }
    } else {
#pragma omp simd
      for (int j = 0; j < dim; j++) {
        o2[j] = gt__bf16_round1_nb(o[j] * rs2);
        o[j] = gt__bf16_round1_nb(o[j]);
      }
    }
  }
}
