/* Private to kernels/: small inline helpers the vectorized kernels share. */
#ifndef GT_KERNELS_SIMD_EXP_H
#define GT_KERNELS_SIMD_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* expf that GCC can vectorize (libm's cannot be without -ffast-math, and
 * fast-math would reorder the sums we rely on). Cody-Waite reduction to
 * r in [-ln2/2, ln2/2], Cephes' degree-7 polynomial, then 2^n applied as two
 * factors so that n = 128 and n = -126 both stay normal. Within about 2 ulp
 * of expf; NaN propagates, overflow gives +inf, below FLT_MIN gives 0
 * (so the -INFINITY of a masked attention score gives exactly 0).
 * Always inlined: it has to vectorize inside the callers' simd loops. */
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

#endif
