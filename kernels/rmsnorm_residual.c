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
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN && !omp_in_parallel(); }

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
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
  for (int64_t r = 0; r < rows; r++) {
    float *o = res_out + r * dim;
    const float *rr = res + r * dim;
    /* the normed y lands in res_out first (a row is in L1), then the residual
     * joins it: y_normed + res, the order of the unfused add */
    const float rs = gt__rms_row_fwd(o, y + r * dim, w, dim, eps, w_offset);
    if (rstd) rstd[r] = rs;
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] += rr[j];
    if (out2) {
      const float rs2 = gt__rms_row_fwd(out2 + r * dim, o, w2, dim, eps, w_offset);
      if (rstd2) rstd2[r] = rs2;
    }
  }
}

void gt_rmsnorm_residual_backward(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                                  const float *rstd, const float *w, int64_t rows, int dim, float w_offset,
                                  int accumulate) {
  if (rows <= 0 || dim <= 0) return;
  if (dx) {
    const int mode = accumulate ? (dres ? GT__RMS_ADD_RES : GT__RMS_ADD) : GT__RMS_SET;
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
    for (int64_t r = 0; r < rows; r++) {
      const float *rr = dres ? dres + r * dim : NULL;
      if (mode == GT__RMS_ADD_RES)
        gt__rms_row_bwd(dx + r * dim, rr, dout + r * dim, x + r * dim, w, rstd[r], dim, w_offset, GT__RMS_ADD_RES);
      else if (mode == GT__RMS_ADD)
        gt__rms_row_bwd(dx + r * dim, rr, dout + r * dim, x + r * dim, w, rstd[r], dim, w_offset, GT__RMS_ADD);
      else
        gt__rms_row_bwd(dx + r * dim, rr, dout + r * dim, x + r * dim, w, rstd[r], dim, w_offset, GT__RMS_SET);
    }
  }
  if (dw && w) gt_rmsnorm_backward(NULL, dw, dout, x, rstd, w, rows, dim, w_offset);
}
