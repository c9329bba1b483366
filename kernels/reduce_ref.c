/* Plain sequential double sum of squares. */
#include "kernels/kernels.h"

double gt_sumsq_ref(const float *x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
  return s;
}

double gt_dot_ref(const float *a, const float *b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
  return s;
}
