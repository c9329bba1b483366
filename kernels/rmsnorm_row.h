/* One row of RMSNorm, forward and backward, as inline code shared by
 * kernels/rmsnorm.c and the fused residual kernels (kernels/rmsnorm_residual.c).
 * Sharing the very code is what makes the fused kernels bit-identical to the
 * unfused sequence: the remat recompute may run either form for the same
 * activation, and the two must agree to the bit. */
#ifndef GEMTRAIN_RMSNORM_ROW_H
#define GEMTRAIN_RMSNORM_ROW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

/* rs = 1 / sqrt(mean(x^2) + eps) of one row (also the fused norm + RoPE
 * row of kernels/norm_rope.c, which applies it itself). */
static inline __attribute__((always_inline)) float gt__rms_row_rs(const float *xr, int dim, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int j = 0; j < dim; j++) ss += xr[j] * xr[j];
  return 1.0f / sqrtf(ss / (float)dim + eps);
}

/* o = x * rs * (w_offset + w) (w == NULL: multiplier 1); returns rs. */
static inline __attribute__((always_inline)) float gt__rms_row_fwd(float *o, const float *xr, const float *w,
                                                                   int dim, float eps, float w_offset) {
  const float rs = gt__rms_row_rs(xr, dim, eps);
  if (w) {
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = (xr[j] * rs) * (w_offset + w[j]);
  } else {
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = xr[j] * rs;
  }
  return rs;
}

/* The row's input gradient g_j = rs * (dout_j s_j - x_j c), s = w_offset + w,
 * c = rs^2 mean(dout s x), combined with what the row's destination holds:
 * mode GT__RMS_ADD: dx += g (the kernels' convention);
 * GT__RMS_SET: dx = g, or dres + g when dres is given (nothing to zero first);
 * GT__RMS_ADD_RES: dx = (dx + dres) + g, the order of adding dres first. */
enum { GT__RMS_ADD = 0, GT__RMS_SET = 1, GT__RMS_ADD_RES = 2 };

/* The backward reads the row's input x as floats (xr; b16 = 0) or as the
 * bf16 copy that dtype=bfloat16 keeps (xh; b16 = 1): the same values, since
 * what is kept was rounded to bf16 before it was packed, so both give the
 * same bits. b16 is a constant at every call, so the select folds away. */
#define GT__RMS_X(j) (b16 ? gt_bf16_to_f32(xh[j]) : xr[j])

static inline __attribute__((always_inline)) float gt__rms_row_c_x(const float *dr, const float *xr,
                                                                   const uint16_t *xh, const int b16, const float *w,
                                                                   float rs, int dim, float w_offset) {
  float dot = 0.0f;
  if (w) {
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < dim; j++) dot += dr[j] * (w_offset + w[j]) * GT__RMS_X(j);
  } else {
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < dim; j++) dot += dr[j] * GT__RMS_X(j);
  }
  return rs * rs * dot / (float)dim;
}

static inline __attribute__((always_inline)) void gt__rms_row_bwd_x(float *dxr, const float *resr, const float *dr,
                                                                    const float *xr, const uint16_t *xh, const int b16,
                                                                    const float *w, float rs, int dim, float w_offset,
                                                                    const int mode) {
  const float c = gt__rms_row_c_x(dr, xr, xh, b16, w, rs, dim, w_offset);
  if (w) {
    if (mode == GT__RMS_ADD) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] += rs * (dr[j] * (w_offset + w[j]) - GT__RMS_X(j) * c);
    } else if (mode == GT__RMS_ADD_RES) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = (dxr[j] + resr[j]) + rs * (dr[j] * (w_offset + w[j]) - GT__RMS_X(j) * c);
    } else if (resr) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = resr[j] + rs * (dr[j] * (w_offset + w[j]) - GT__RMS_X(j) * c);
    } else {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = rs * (dr[j] * (w_offset + w[j]) - GT__RMS_X(j) * c);
    }
  } else {
    if (mode == GT__RMS_ADD) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] += rs * (dr[j] - GT__RMS_X(j) * c);
    } else if (mode == GT__RMS_ADD_RES) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = (dxr[j] + resr[j]) + rs * (dr[j] - GT__RMS_X(j) * c);
    } else if (resr) {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = resr[j] + rs * (dr[j] - GT__RMS_X(j) * c);
    } else {
#pragma omp simd
      for (int j = 0; j < dim; j++) dxr[j] = rs * (dr[j] - GT__RMS_X(j) * c);
    }
  }
}

static inline __attribute__((always_inline)) void gt__rms_row_bwd(float *dxr, const float *resr, const float *dr,
                                                                  const float *xr, const float *w, float rs, int dim,
                                                                  float w_offset, const int mode) {
  gt__rms_row_bwd_x(dxr, resr, dr, xr, NULL, 0, w, rs, dim, w_offset, mode);
}

/* The weight gradient's columns c0..c1 of one row: dw_j += dout_j (x_j rs),
 * rows added in row order by the one thread that owns the columns. */
static inline __attribute__((always_inline)) void gt__rms_row_dw(float *dw, const float *dr, const float *xr,
                                                                 const uint16_t *xh, const int b16, float rs,
                                                                 int64_t c0, int64_t c1) {
#pragma omp simd
  for (int64_t j = c0; j < c1; j++) dw[j] += dr[j] * (GT__RMS_X(j) * rs);
}

#undef GT__RMS_X
#endif
