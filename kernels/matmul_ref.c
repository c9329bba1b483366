/* Naive matmul reference. Sums run in double in index order so the reference
 * is more accurate than any float kernel it checks. */
#include "kernels/kernels.h"

void gt_matmul_forward_ref(float *out, const float *inp, const float *w,
                           int64_t n, int64_t in_dim, int64_t out_dim) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t o = 0; o < out_dim; o++) {
      double s = 0.0;
      for (int64_t k = 0; k < in_dim; k++)
        s += (double)inp[i * in_dim + k] * (double)w[o * in_dim + k];
      out[i * out_dim + o] = (float)s;
    }
}

void gt_matmul_backward_ref(float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w,
                            int64_t n, int64_t in_dim, int64_t out_dim) {
  if (dinp)
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < in_dim; k++) {
        double s = dinp[i * in_dim + k];
        for (int64_t o = 0; o < out_dim; o++)
          s += (double)dout[i * out_dim + o] * (double)w[o * in_dim + k];
        dinp[i * in_dim + k] = (float)s;
      }
  if (dw)
    for (int64_t o = 0; o < out_dim; o++)
      for (int64_t k = 0; k < in_dim; k++) {
        double s = dw[o * in_dim + k];
        for (int64_t i = 0; i < n; i++)
          s += (double)dout[i * out_dim + o] * (double)inp[i * in_dim + k];
        dw[o * in_dim + k] = (float)s;
      }
}
