/* RMSNorm fused with the residual stream: the post-norm residual add (and the
 * next pre-norm) in one sweep over the rows instead of two or three, and the
 * backward's input gradient combined with the residual gradient (or written
 * without the destination having been zeroed) in the same pass.
 *
 * Each row is done by the inline row code that gt_rmsnorm_forward and
 * gt_rmsnorm_backward use (kernels/rmsnorm_row.h), and the adds happen in the
 * unfused order, so the results are bit-identical to the unfused sequence:
 * a remat recompute that runs one of the ops alone gets the same bits. Rows
 * split over threads statically; dw is left to gt_rmsnorm_backward (columns
 * per thread), so nothing depends on the thread count. */
#include "base/team.h"
#include "kernels/bf16_row.h"
#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__rr_args {
  float *res_out, *rstd, *out2, *rstd2, *dx;
  const float *res, *y, *w, *w2, *dres, *dout, *x, *rs;
  const uint16_t *xh; /* the backward's input kept in bf16, else NULL */
  int dim, mode;
  float eps, w_offset;
} gt__rr_args;

static void gt__rr_fwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__rr_args *a = p;
  const int dim = a->dim;
  for (int64_t r = r0; r < r1; r++) {
    float *o = a->res_out + r * dim;
    const float *rr = a->res + r * dim;
    /* the normed y lands in res_out first (a row is in L1), then the residual
     * joins it: y_normed + res, the order of the unfused add */
    const float rs = gt__rms_row_fwd(o, a->y + r * dim, a->w, dim, a->eps, a->w_offset);
    if (a->rstd) a->rstd[r] = rs;
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] += rr[j];
    if (a->out2) {
      const float rs2 = gt__rms_row_fwd(a->out2 + r * dim, o, a->w2, dim, a->eps, a->w_offset);
      if (a->rstd2) a->rstd2[r] = rs2;
    }
  }
}

/* One row in its mode, x as floats: one compiled copy, which the float32
 * path and the bf16 path (after widening the row) both call, so that the
 * row's dot product adds in one order for both: their bits are the same by
 * construction, not by two copies of the loop vectorizing alike. */
static __attribute__((noinline)) void gt__rr_row(float *dxr, const float *rr, const float *dr, const float *xr,
                                                 const float *w, float rs, int dim, float w_offset, int mode) {
  if (mode == GT__RMS_ADD_RES)
    gt__rms_row_bwd(dxr, rr, dr, xr, w, rs, dim, w_offset, GT__RMS_ADD_RES);
  else if (mode == GT__RMS_ADD)
    gt__rms_row_bwd(dxr, rr, dr, xr, w, rs, dim, w_offset, GT__RMS_ADD);
  else
    gt__rms_row_bwd(dxr, rr, dr, xr, w, rs, dim, w_offset, GT__RMS_SET);
}

static void gt__rr_bwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__rr_args *a = p;
  const int dim = a->dim, mode = a->mode;
  const float *dres = a->dres, *dout = a->dout, *x = a->x, *w = a->w, *rstd = a->rs;
  const uint16_t *xh = a->xh;
  float *dx = a->dx;
  const float w_offset = a->w_offset;
  if (!xh) {
    for (int64_t r = r0; r < r1; r++)
      gt__rr_row(dx + r * dim, dres ? dres + r * dim : NULL, dout + r * dim, x + r * dim, w, rstd[r], dim, w_offset,
                 mode);
  } else if (dim <= GT_RMS_B16_ROW_MAX) {
    float row[GT_RMS_B16_ROW_MAX];
    for (int64_t r = r0; r < r1; r++) {
      gt__bf16_widen_row(row, xh + r * dim, dim);
      gt__rr_row(dx + r * dim, dres ? dres + r * dim : NULL, dout + r * dim, row, w, rstd[r], dim, w_offset, mode);
    }
  } else {
    /* wider than the stack row: the bits read in the loops (the same
     * values; the dot product may add in another order) */
    for (int64_t r = r0; r < r1; r++) {
      const float *rr = dres ? dres + r * dim : NULL;
      if (mode == GT__RMS_ADD_RES)
        gt__rms_row_bwd_x(dx + r * dim, rr, dout + r * dim, NULL, xh + r * dim, 1, w, rstd[r], dim, w_offset,
                          GT__RMS_ADD_RES);
      else if (mode == GT__RMS_ADD)
        gt__rms_row_bwd_x(dx + r * dim, rr, dout + r * dim, NULL, xh + r * dim, 1, w, rstd[r], dim, w_offset,
                          GT__RMS_ADD);
      else
        gt__rms_row_bwd_x(dx + r * dim, rr, dout + r * dim, NULL, xh + r * dim, 1, w, rstd[r], dim, w_offset,
                          GT__RMS_SET);
    }
  }
}

void gt_rmsnorm_residual_forward(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                 const float *y, const float *w, const float *w2, int64_t rows, int dim, float eps,
                                 float w_offset) {
  if (rows <= 0) return;
  if (dim <= 0) { /* as gt_rmsnorm_forward: the statistics stay defined */
    for (int64_t r = 0; r < rows; r++) {
      if (rstd) rstd[r] = 1.0f / sqrtf(eps);
      if (out2 && rstd2) rstd2[r] = 1.0f / sqrtf(eps);
    }
    return;
  }
  gt__rr_args a = {.res_out = res_out, .rstd = rstd, .out2 = out2, .rstd2 = rstd2, .res = res, .y = y, .w = w,
                   .w2 = w2, .dim = dim, .eps = eps, .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__rr_fwd_part, &a);
}

/* x or, kept in bf16, xh: one of them */
static void gt__rr_backward(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                            const uint16_t *xh, const float *rstd, const float *w, int64_t rows, int dim,
                            float w_offset, int accumulate) {
  if (rows <= 0 || dim <= 0) return;
  if (dx) {
    const int mode = accumulate ? (dres ? GT__RMS_ADD_RES : GT__RMS_ADD) : GT__RMS_SET;
    gt__rr_args a = {.dx = dx, .dres = dres, .dout = dout, .x = x, .xh = xh, .w = w, .rs = rstd, .dim = dim,
                     .mode = mode, .w_offset = w_offset};
    gt_team_for(gt__par(rows * dim), rows, gt__rr_bwd_part, &a);
  }
  if (dw && w) {
    if (xh)
      gt_rmsnorm_backward_b16(NULL, dw, dout, xh, rstd, w, rows, dim, w_offset);
    else
      gt_rmsnorm_backward(NULL, dw, dout, x, rstd, w, rows, dim, w_offset);
  }
}

void gt_rmsnorm_residual_backward(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                                  const float *rstd, const float *w, int64_t rows, int dim, float w_offset,
                                  int accumulate) {
  gt__rr_backward(dx, dw, dres, dout, x, NULL, rstd, w, rows, dim, w_offset, accumulate);
}

void gt_rmsnorm_residual_backward_b16(float *dx, float *dw, const float *dres, const float *dout,
                                      const uint16_t *x16, const float *rstd, const float *w, int64_t rows, int dim,
                                      float w_offset, int accumulate) {
  gt__rr_backward(dx, dw, dres, dout, NULL, x16, rstd, w, rows, dim, w_offset, accumulate);
}
