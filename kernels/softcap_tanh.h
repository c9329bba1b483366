/* The soft-cap's vectorizable tanhf, shared by kernels/softcap.c and the
 * fused soft-cap + cross-entropy kernels (kernels/xent_softcap.c) so both
 * cap a logit to the same bits. */
#ifndef GEMTRAIN_SOFTCAP_TANH_H
#define GEMTRAIN_SOFTCAP_TANH_H

#include <math.h>

#include "simd_exp.h"

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

#endif
