/* Scalar references of the fused residual RMSNorm kernels, composed from the
 * unfused references in the unfused order. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

void gt_rmsnorm_residual_forward_ref(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                     const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                     float eps, float w_offset) {
  gt_rmsnorm_forward_ref(res_out, rstd, y, w, rows, dim, eps, w_offset);
  for (int64_t i = 0; i < rows * (dim > 0 ? dim : 0); i++) res_out[i] += res[i];
  if (out2) gt_rmsnorm_forward_ref(out2, rstd2, res_out, w2, rows, dim, eps, w_offset);
}

void gt_rmsnorm_residual_backward_ref(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                                      const float *rstd, const float *w, int64_t rows, int dim, float w_offset,
                                      int accumulate) {
  int64_t n = rows * (dim > 0 ? dim : 0);
  if (dx && !accumulate) memset(dx, 0, (size_t)(n > 0 ? n : 0) * sizeof(float));
  if (dx && dres)
    for (int64_t i = 0; i < n; i++) dx[i] += dres[i];
  gt_rmsnorm_backward_ref(dx, dw, dout, x, rstd, w, rows, dim, w_offset);
}
