/* Logit soft-cap y = cap * tanh(x / cap), in place. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "softcap_tanh.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

/* On "parallel for simd" a bare if() also governs the simd part, and there it
 * is evaluated inside the team, where omp_in_parallel() is true: the loop
 * silently ran scalar (8x slower). Hence "if (parallel : ...)" below. */


void gt_softcap_forward(float *x, int64_t n, float cap) {
  if (n <= 0) return;
#pragma omp parallel for simd schedule(static) if (parallel : gt__par(n))
  for (int64_t i = 0; i < n; i++) x[i] = cap * gt__tanhf(x[i] / cap);
}

void gt_softcap_backward(float *dx, const float *y, int64_t n, float cap) {
  if (n <= 0) return;
#pragma omp parallel for simd schedule(static) if (parallel : gt__par(n))
  for (int64_t i = 0; i < n; i++) {
    const float t = y[i] / cap;
    dx[i] = dx[i] * (1.0f - t * t);
  }
}
