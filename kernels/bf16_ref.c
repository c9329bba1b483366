/* Scalar references of kernels/bf16.c: one element at a time through the
 * inline conversions of bf16.h. */
#include "kernels/bf16.h"

void gt_bf16_round_ref(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = gt_bf16_round1(x[i]);
}

void gt_bf16_pack_ref(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = gt_f32_to_bf16(src[i]);
}

void gt_bf16_unpack_ref(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = gt_bf16_to_f32(src[i]);
}
