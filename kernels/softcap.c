/* Logit soft-cap y = cap * tanh(x / cap), in place. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "gemtrain/kernels.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

/* On "parallel for simd" a bare if() also governs the simd part, and there it
 * is evaluated inside the team, where omp_in_parallel() is true: the loop
 * silently ran scalar (8x slower). Hence "if (parallel : ...)" below. */

/* expf that GCC can vectorize (libm's cannot be without -ffast-math, and
 * fast-math would reorder the sums we rely on). Cody-Waite reduction to
 * r in [-ln2/2, ln2/2], Cephes' degree-7 polynomial, then 2^n applied as two
 * factors so that n = 128 and n = -126 both stay normal. Within about 2 ulp
 * of expf; NaN propagates, overflow gives +inf, below FLT_MIN gives 0.
 * (The same helper lives in geglu.c, softcap.c and xent.c: it has to be
 * inlined into their simd loops, and the kernels share no private header.) */
static inline __attribute__((always_inline)) float gt__expf(float x) {
  const float hi = 88.72283f, lo = -87.33654f;
  const int over = x > hi, under = x < lo;
  float xc = over ? hi : x;
  xc = under ? lo : xc;
  /* Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits. */
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float nf = t - 12582912.0f;
  float r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  const int32_t n = (int32_t)(tb - 0x4B400000u);
  const int32_t n1 = n / 2, n2 = n - n1;
  const uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  float y = p * s1 * s2;
  y = over ? INFINITY : y;
  y = under ? 0.0f : y;
  return y;
}

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
