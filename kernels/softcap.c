/* Logit soft-cap y = cap * tanh(x / cap), in place. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "simd_exp.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

/* On "parallel for simd" a bare if() also governs the simd part, and there it
 * is evaluated inside the team, where omp_in_parallel() is true: the loop
 * silently ran scalar (8x slower). Hence "if (parallel : ...)" below. */


/* Vectorizable tanhf. 1 - 2/(e^(2|z|) + 1) cancels for small |z| (logits
 * near 0 are the common case), so below 0.55 the Taylor series is used; its
 * truncation error there is under 1e-9. Both sides stay within a few ulp. */
static inline __attribute__((always_inline)) float gt__tanhf(float z) {
  const float z2 = z * z;
  float p = (float)(-443861162.0 / 1856156927625.0);
  p = p * z2 + (float)(6404582.0 / 10854718875.0);
  p = p * z2 + (float)(-929569.0 / 638512875.0);
  p = p * z2 + (float)(21844.0 / 6081075.0);
  p = p * z2 + (float)(-1382.0 / 155925.0);
  p = p * z2 + (float)(62.0 / 2835.0);
  p = p * z2 + (float)(-17.0 / 315.0);
  p = p * z2 + (float)(2.0 / 15.0);
  p = p * z2 + (float)(-1.0 / 3.0);
  const float small = z + z * (z2 * p);
  const float a = fabsf(z);
  const float big = 1.0f - 2.0f / (gt__expf(2.0f * a) + 1.0f);
  const float sbig = z < 0.0f ? -big : big;
  return a < 0.55f ? small : sbig;
}

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
