/* Softmax cross-entropy over rows of logits, one row per iteration of a
 * static loop; each row's max and exp-sum are float32 vector reductions. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "gemtrain/kernels.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

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

void gt_xent_forward(float *loss, float *lse, const float *logits,
                     const int32_t *target, int64_t rows, int64_t V) {
  if (rows <= 0) return;
  if (V <= 0) {
    /* An empty softmax: log(0) = -inf, and no target can be scored. */
    for (int64_t r = 0; r < rows; r++) {
      loss[r] = 0.0f;
      if (lse) lse[r] = -INFINITY;
    }
    return;
  }
#pragma omp parallel for schedule(static) if (gt__par(rows * V))
  for (int64_t r = 0; r < rows; r++) {
    const float *l = logits + r * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; j++) sum += gt__expf(l[j] - mx);
    const float ls = mx + logf(sum);
    if (lse) lse[r] = ls;
    loss[r] = target[r] < 0 ? 0.0f : ls - l[target[r]];
  }
}

void gt_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *target, const float *row_weight,
                      int64_t rows, int64_t V) {
  if (rows <= 0 || V <= 0) return;
#pragma omp parallel for schedule(static) if (gt__par(rows * V))
  for (int64_t r = 0; r < rows; r++) {
    float *d = dlogits + r * V;
    const float *l = logits + r * V;
    const int32_t tg = target[r];
    if (tg < 0) {
#pragma omp simd
      for (int64_t j = 0; j < V; j++) d[j] = 0.0f;
      continue;
    }
    const float ls = lse[r];
    const float w = row_weight ? row_weight[r] : 1.0f;
    /* Read before the loop: d may alias l and overwrite it. */
    const float lt = l[tg];
#pragma omp simd
    for (int64_t j = 0; j < V; j++) d[j] = gt__expf(l[j] - ls) * w;
    d[tg] = (gt__expf(lt - ls) - 1.0f) * w;
  }
}
