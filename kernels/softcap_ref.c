/* Scalar soft-cap reference with libm tanhf. */
#include <math.h>

#include "kernels/kernels.h"

void gt_softcap_forward_ref(float *x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void gt_softcap_backward_ref(float *dx, const float *y, int64_t n, float cap) {
  /* d/dx cap tanh(x/cap) = 1 - tanh^2 = 1 - (y/cap)^2 */
  for (int64_t i = 0; i < n; i++) {
    const float t = y[i] / cap;
    dx[i] = dx[i] * (1.0f - t * t);
  }
}
