/* Scalar references of the fused residual RMSNorm kernels, composed from the
 * unfused references in the unfused order. */
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
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

/* x as bf16 patterns: widened whole, then the float32 references (test-only
 * scratch from malloc; without it nothing is written, which a test sees) */
static float *gt__widen_ref(const uint16_t *x16, int64_t rows, int dim) {
  int64_t n = rows * (dim > 0 ? dim : 0);
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (x) gt_bf16_unpack_ref(x, x16, n);
  return x;
}

void gt_rmsnorm_backward_b16_ref(float *dx, float *dw, const float *dout, const uint16_t *x16, const float *rstd,
                                 const float *w, int64_t rows, int dim, float w_offset) {
  float *x = gt__widen_ref(x16, rows, dim);
  if (x) gt_rmsnorm_backward_ref(dx, dw, dout, x, rstd, w, rows, dim, w_offset);
  free(x);
}

void gt_rmsnorm_residual_backward_b16_ref(float *dx, float *dw, const float *dres, const float *dout,
                                          const uint16_t *x16, const float *rstd, const float *w, int64_t rows,
                                          int dim, float w_offset, int accumulate) {
  float *x = gt__widen_ref(x16, rows, dim);
  if (x) gt_rmsnorm_residual_backward_ref(dx, dw, dres, dout, x, rstd, w, rows, dim, w_offset, accumulate);
  free(x);
}
