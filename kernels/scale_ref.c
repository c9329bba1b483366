/* Scalar reference of the scale kernel: one loop, the gradient summed in
 * double in index order. */
#include "kernels/kernels.h"

void gt_scale_forward_ref(float *out, const float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = s * x[i];
}

void gt_scale_backward_ref(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (dx) dx[i] += s * dout[i];
    acc += (double)dout[i] * (double)x[i];
  }
  if (ds) *ds += (float)acc;
}
