/* Multiply by one scalar: Gemma 4's layer_scalar on a layer's output. The
 * scalar's gradient is a dot product over the whole activation, summed by
 * gt_dot's fixed partition so it does not depend on the thread count. */
#include <omp.h>

#include "kernels/kernels.h"

#define GT__PAR_MIN 65536

void gt_scale_forward(float *out, const float *x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= GT__PAR_MIN && !omp_in_parallel())
  for (int64_t i = 0; i < n; i++) out[i] = s * x[i];
}

void gt_scale_backward(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n) {
  if (dx) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= GT__PAR_MIN && !omp_in_parallel())
    for (int64_t i = 0; i < n; i++) dx[i] += s * dout[i];
  }
  if (ds) *ds += (float)gt_dot(dout, x, n);
}
