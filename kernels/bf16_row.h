/* Rounding to bf16 (to nearest even, a NaN quieted) as inline code for
 * kernels that round each value in the loop that computes it (the fused
 * sweeps of kernels/norm_rope.c and kernels/geglu.c, the loss's backward)
 * instead of a separate
 * gt_bf16_round pass over memory: bf16.h's gt__bf16_round_bits (branch-free,
 * so it vectorizes there) kept in float32 storage, gt_bf16_round1's bits for
 * every input (denormals kept), which tests/test_fused.c holds against
 * gt_bf16_round. */
#ifndef GEMTRAIN_BF16_ROW_H
#define GEMTRAIN_BF16_ROW_H

#include <stdint.h>
#include <string.h>

#include "kernels/bf16.h"

static inline __attribute__((always_inline)) float gt__bf16_round1_nb(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = gt__bf16_round_bits(u);
  float y;
  memcpy(&y, &u, 4);
  return y;
}

/* gt_f32_to_bf16(x), for the loops that store only the pattern of what
 * they compute (a value rounded already gives its own top half) */
static inline __attribute__((always_inline)) uint16_t gt__bf16_pattern_nb(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(gt__bf16_round_bits(u) >> 16);
}

/* dst[j] = gt_f32_to_bf16(src[j]) over a row still in cache: the bits
 * gt_bf16_pack writes, for the fused sweeps that pack what they compute or
 * read (kernels/norm_rope.c) */
static inline __attribute__((always_inline)) void gt__bf16_pack_row(uint16_t *dst, const float *src, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) dst[j] = gt__bf16_pattern_nb(src[j]);
}

/* dst[j] = the float of bf16 pattern src[j] (exact), a row into cache */
static inline __attribute__((always_inline)) void gt__bf16_widen_row(float *dst, const uint16_t *src, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) dst[j] = gt_bf16_to_f32(src[j]);
}

#endif
