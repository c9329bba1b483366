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
#include "base/team.h"
#include "kernels/bf16_row.h"
#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"
#include "kernels/rope_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

/* The arguments of every region below, by the entry points' names. */
typedef struct gt__nr_args {
  float *out, *rstd, *dx, *dout, *res_out, *out2, *rstd2;
  const float *x, *w, *w2, *res, *y, *cos_tab, *sin_tab;
  const int32_t *pos;
  /* the _pack forms' bf16 copies (each NULL: not wanted): of out, res_out,
   * out2 and the inputs y and x; the _b16 backward's x as kept in bf16 */
  uint16_t *out16, *res16, *out2_16, *y16, *x16;
  const uint16_t *xh;
  int nheads, head_dim, half, dim, round_bf16;
  float eps, w_offset;
} gt__nr_args;

/* round_bf16 is a constant at every call of these (always inlined), so each
 * variant is a branch-free vector loop */
static inline __attribute__((always_inline)) float gt__rnd(float v, const int round_bf16) {
  return round_bf16 ? gt__bf16_round1_nb(v) : v;
}

/* gt__rms_apply's rounded values written only as their bf16 patterns (the
 * float32 output not wanted: the forms of gt_rmsnorm_forward_pack with out
 * NULL) */
static inline __attribute__((always_inline)) void gt__rms_apply16(uint16_t *o16, const float *xr, const float *w,
                                                                  float rs, int dim, float w_offset) {
  if (w) {
#pragma omp simd
    for (int j = 0; j < dim; j++) o16[j] = gt__bf16_pattern_nb((xr[j] * rs) * (w_offset + w[j]));
  } else {
#pragma omp simd
    for (int j = 0; j < dim; j++) o16[j] = gt__bf16_pattern_nb(xr[j] * rs);
  }
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

static void gt__norm_rnd_part(void *p, int64_t r0, int64_t r1) {
  const gt__nr_args *a = p;
  const float *x = a->x, *w = a->w;
  const int dim = a->dim;
  for (int64_t r = r0; r < r1; r++) {
    const float rs = gt__rms_row_rs(x + r * dim, dim, a->eps);
    if (a->rstd) a->rstd[r] = rs;
    if (!a->out) { /* the copy alone */
      gt__rms_apply16(a->out16 + r * dim, x + r * dim, w, rs, dim, a->w_offset);
    } else {
      gt__rms_apply(a->out + r * dim, x + r * dim, w, rs, dim, a->w_offset, 1);
      if (a->out16) gt__bf16_pack_row(a->out16 + r * dim, a->out + r * dim, dim);
    }
    if (a->x16) gt__bf16_pack_row(a->x16 + r * dim, x + r * dim, dim);
  }
}

void gt_rmsnorm_forward_rnd(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps,
                            float w_offset, int round_bf16) {
  if (!round_bf16 || rows <= 0 || dim <= 0) {
    gt_rmsnorm_forward(out, rstd, x, w, rows, dim, eps, w_offset);
    return;
  }
  gt__nr_args a = {.out = out, .rstd = rstd, .x = x, .w = w, .dim = dim, .eps = eps, .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__norm_rnd_part, &a);
}

void gt_rmsnorm_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                             const float *w, int64_t rows, int dim, float eps, float w_offset) {
  if (rows <= 0 || dim <= 0) {
    gt_rmsnorm_forward(out, rstd, x, w, rows, dim, eps, w_offset);
    return;
  }
  gt__nr_args a = {.out = out, .out16 = out16, .rstd = rstd, .x = x, .x16 = x16, .w = w, .dim = dim, .eps = eps,
                   .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__norm_rnd_part, &a);
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

static void gt__norm_rope_part(void *p, int64_t t0, int64_t t1) {
  const gt__nr_args *a = p;
  const float *x = a->x, *w = a->w;
  const int32_t *pos = a->pos;
  const int nheads = a->nheads, head_dim = a->head_dim, half = a->half;
  const float eps = a->eps, w_offset = a->w_offset;
  for (int64_t t = t0; t < t1; t++) {
    const float *c = a->cos_tab + (int64_t)pos[t] * half, *s = a->sin_tab + (int64_t)pos[t] * half;
    for (int h = 0; h < nheads; h++) {
      const int64_t r = t * nheads + h;
      const float *xr = x + r * head_dim;
      float *o = a->out + r * head_dim;
      const float rs = a->round_bf16 ? gt__norm_rope_row(o, xr, w, c, s, head_dim, half, eps, w_offset, 1)
                                     : gt__norm_rope_row(o, xr, w, c, s, head_dim, half, eps, w_offset, 0);
      if (a->rstd) a->rstd[r] = rs;
      if (a->out16) gt__bf16_pack_row(a->out16 + r * head_dim, o, head_dim);
      if (a->x16) gt__bf16_pack_row(a->x16 + r * head_dim, xr, head_dim);
    }
  }
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
  gt__nr_args a = {.out = out, .rstd = rstd, .x = x, .w = w, .pos = pos, .cos_tab = cos_tab, .sin_tab = sin_tab,
                   .nheads = nheads, .head_dim = head_dim, .half = half, .round_bf16 = round_bf16, .eps = eps,
                   .w_offset = w_offset};
  gt_team_for(gt__par(ntok * nheads * head_dim), ntok, gt__norm_rope_part, &a);
}

void gt_rmsnorm_rope_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float eps, float w_offset) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0) return;
  if (half <= 0) { /* nothing to rotate: the norm, then the copies */
    gt_rmsnorm_forward_rnd(out, rstd, x, w, ntok * nheads, head_dim, eps, w_offset, 1);
    if (head_dim > 0 && out16) gt_bf16_pack(out16, out, ntok * nheads * head_dim);
    if (head_dim > 0 && x16) gt_bf16_pack(x16, x, ntok * nheads * head_dim);
    return;
  }
  gt__nr_args a = {.out = out, .out16 = out16, .rstd = rstd, .x = x, .x16 = x16, .w = w, .pos = pos,
                   .cos_tab = cos_tab, .sin_tab = sin_tab, .nheads = nheads, .head_dim = head_dim, .half = half,
                   .round_bf16 = 1, .eps = eps, .w_offset = w_offset};
  gt_team_for(gt__par(ntok * nheads * head_dim), ntok, gt__norm_rope_part, &a);
}

/* One row-head's input gradient from x as floats: one compiled copy, which
 * the float32 path and the bf16 path (after widening the row) both call, so
 * that the dot product adds in one order for both. */
static __attribute__((noinline)) void gt__rope_norm_dx_row(float *dxr, const float *dr, const float *xr,
                                                           const float *w, float rs, int dim, float w_offset) {
  gt__rms_row_bwd(dxr, NULL, dr, xr, w, rs, dim, w_offset, GT__RMS_SET);
}

static void gt__rope_norm_bwd_part(void *p, int64_t t0, int64_t t1) {
  const gt__nr_args *a = p;
  const float *x = a->x, *w = a->w, *rstd = a->rstd;
  float *dx = a->dx, *dout = a->dout;
  const int32_t *pos = a->pos;
  const int nheads = a->nheads, head_dim = a->head_dim, half = a->half;
  const float w_offset = a->w_offset;
  for (int64_t t = t0; t < t1; t++) {
    const float *c = half > 0 ? a->cos_tab + (int64_t)pos[t] * half : NULL;
    const float *s = half > 0 ? a->sin_tab + (int64_t)pos[t] * half : NULL;
    for (int h = 0; h < nheads; h++) {
      const int64_t r = t * nheads + h;
      float *dr = dout + r * head_dim;
      if (half > 0) gt__rope_row(dr, c, s, half, -1.0f);
      if (!dx) continue;
      if (!a->xh) {
        gt__rope_norm_dx_row(dx + r * head_dim, dr, x + r * head_dim, w, rstd[r], head_dim, w_offset);
      } else if (head_dim <= GT_RMS_B16_ROW_MAX) {
        float row[GT_RMS_B16_ROW_MAX];
        gt__bf16_widen_row(row, a->xh + r * head_dim, head_dim);
        gt__rope_norm_dx_row(dx + r * head_dim, dr, row, w, rstd[r], head_dim, w_offset);
      } else { /* wider than the stack row: the bits read in the loops */
        gt__rms_row_bwd_x(dx + r * head_dim, NULL, dr, NULL, a->xh + r * head_dim, 1, w, rstd[r], head_dim,
                          w_offset, GT__RMS_SET);
      }
    }
  }
}

/* x or, kept in bf16, xh: one of them */
static void gt__rope_norm_bwd(float *dx, float *dw, float *dout, const float *x, const uint16_t *xh,
                              const float *rstd, const float *w, const int32_t *pos, const float *cos_tab,
                              const float *sin_tab, int64_t ntok, int nheads, int head_dim, float w_offset) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0 || head_dim <= 0) return;
  if (dx || half > 0) {
    gt__nr_args a = {.rstd = (float *)rstd, .dx = dx, .dout = dout, .x = x, .xh = xh, .w = w, .pos = pos,
                     .cos_tab = cos_tab, .sin_tab = sin_tab, .nheads = nheads, .head_dim = head_dim, .half = half,
                     .w_offset = w_offset};
    gt_team_for(gt__par(ntok * nheads * head_dim), ntok, gt__rope_norm_bwd_part, &a);
  }
  /* the weight gradient reads the rotated-back dout, column-split as unfused */
  if (dw && w) {
    if (xh)
      gt_rmsnorm_backward_b16(NULL, dw, dout, xh, rstd, w, ntok * nheads, head_dim, w_offset);
    else
      gt_rmsnorm_backward(NULL, dw, dout, x, rstd, w, ntok * nheads, head_dim, w_offset);
  }
}

void gt_rope_rmsnorm_backward(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w,
                              const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                              int nheads, int head_dim, float w_offset) {
  gt__rope_norm_bwd(dx, dw, dout, x, NULL, rstd, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, w_offset);
}

void gt_rope_rmsnorm_backward_b16(float *dx, float *dw, float *dout, const uint16_t *x16, const float *rstd,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float w_offset) {
  gt__rope_norm_bwd(dx, dw, dout, NULL, x16, rstd, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, w_offset);
}

/* the _pack form's copies of row r, in cache: the input y, res_out, out2 */
static inline void gt__res_pack_row(const gt__nr_args *a, int64_t r) {
  const int64_t o = r * a->dim;
  if (a->y16) gt__bf16_pack_row(a->y16 + o, a->y + o, a->dim);
  if (a->res16) gt__bf16_pack_row(a->res16 + o, a->res_out + o, a->dim);
  if (a->out2_16 && a->out2) gt__bf16_pack_row(a->out2_16 + o, a->out2 + o, a->dim);
}

static void gt__res_rnd_part(void *p, int64_t r0, int64_t r1) {
  const gt__nr_args *a = p;
  float *res_out = a->res_out, *rstd = a->rstd, *out2 = a->out2, *rstd2 = a->rstd2;
  const float *res = a->res, *y = a->y, *w = a->w, *w2 = a->w2;
  const int dim = a->dim;
  const float eps = a->eps, w_offset = a->w_offset;
  for (int64_t r = r0; r < r1; r++) {
    float *o = res_out + r * dim;
    const float *rr = res + r * dim, *yr = y + r * dim;
    /* as gt_rmsnorm_residual_forward: norm(y) + res (in that order), the next
     * norm of the unrounded sum; then both outputs rounded, as the unfused
     * sequence rounds them after that kernel */
    const float rs = gt__rms_row_rs(yr, dim, eps);
    if (rstd) rstd[r] = rs;
    if (!out2 && !a->out2_16) {
      if (w) {
#pragma omp simd
        for (int j = 0; j < dim; j++) o[j] = gt__bf16_round1_nb((yr[j] * rs) * (w_offset + w[j]) + rr[j]);
      } else {
#pragma omp simd
        for (int j = 0; j < dim; j++) o[j] = gt__bf16_round1_nb(yr[j] * rs + rr[j]);
      }
      gt__res_pack_row(a, r);
      continue;
    }
    gt__rms_apply(o, yr, w, rs, dim, w_offset, 0);
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] += rr[j];
    const float rs2 = gt__rms_row_rs(o, dim, eps);
    if (rstd2) rstd2[r] = rs2;
    if (!out2) { /* the second output's copy alone */
      uint16_t *h2 = a->out2_16 + r * dim;
      if (w2) {
#pragma omp simd
        for (int j = 0; j < dim; j++) {
          h2[j] = gt__bf16_pattern_nb((o[j] * rs2) * (w_offset + w2[j]));
          o[j] = gt__bf16_round1_nb(o[j]);
        }
      } else {
#pragma omp simd
        for (int j = 0; j < dim; j++) {
          h2[j] = gt__bf16_pattern_nb(o[j] * rs2);
          o[j] = gt__bf16_round1_nb(o[j]);
        }
      }
      gt__res_pack_row(a, r);
      continue;
    }
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
    gt__res_pack_row(a, r);
  }
}

void gt_rmsnorm_residual_forward_rnd(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                     const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                     float eps, float w_offset, int round_bf16) {
  if (!round_bf16 || rows <= 0 || dim <= 0) {
    gt_rmsnorm_residual_forward(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset);
    return;
  }
  gt__nr_args a = {.res_out = res_out, .rstd = rstd, .out2 = out2, .rstd2 = rstd2, .res = res, .y = y, .w = w,
                   .w2 = w2, .dim = dim, .eps = eps, .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__res_rnd_part, &a);
}

void gt_rmsnorm_residual_forward_pack(float *res_out, uint16_t *res16, float *rstd, float *out2, uint16_t *out2_16,
                                      float *rstd2, const float *res, const float *y, uint16_t *y16, const float *w,
                                      const float *w2, int64_t rows, int dim, float eps, float w_offset) {
  if (rows <= 0 || dim <= 0) {
    gt_rmsnorm_residual_forward(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset);
    return;
  }
  gt__nr_args a = {.res_out = res_out, .res16 = res16, .rstd = rstd, .out2 = out2, .out2_16 = out2_16,
                   .rstd2 = rstd2, .res = res, .y = y, .y16 = y16, .w = w, .w2 = w2, .dim = dim, .eps = eps,
                   .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__res_rnd_part, &a);
}
