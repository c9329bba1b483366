/* Scalar RMSNorm reference, float32 like HF, sums in index order. */
#include <math.h>

#include "kernels/kernels.h"

void gt_rmsnorm_forward_ref(float *out, float *rstd, const float *x, const float *w,
                            int64_t rows, int dim, float eps, float w_offset) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float ss = 0.0f;
    for (int j = 0; j < dim; j++) ss += xr[j] * xr[j];
    const float rs = 1.0f / sqrtf(ss / (float)(dim > 0 ? dim : 1) + eps);
    if (rstd) rstd[r] = rs;
    for (int j = 0; j < dim; j++) {
      const float scale = w ? w_offset + w[j] : 1.0f;
      out[r * dim + j] = (xr[j] * rs) * scale;
    }
  }
}

void gt_rmsnorm_backward_ref(float *dx, float *dw, const float *dout,
                             const float *x, const float *rstd, const float *w,
                             int64_t rows, int dim, float w_offset) {
  for (int64_t r = 0; r < rows; r++) {
    const float *dr = dout + r * dim, *xr = x + r * dim;
    const float rs = rstd[r];
    if (dx) {
      /* g = dout * scale; dx = rstd * (g - x * rstd^2 * mean(g * x)) */
      float dot = 0.0f;
      for (int j = 0; j < dim; j++) {
        const float scale = w ? w_offset + w[j] : 1.0f;
        dot += dr[j] * scale * xr[j];
      }
      const float c = rs * rs * dot / (float)dim;
      for (int j = 0; j < dim; j++) {
        const float scale = w ? w_offset + w[j] : 1.0f;
        dx[r * dim + j] += rs * (dr[j] * scale - xr[j] * c);
      }
    }
    if (dw && w)
      for (int j = 0; j < dim; j++) dw[j] += dr[j] * (xr[j] * rs);
  }
}
