/* Rounding to bf16 (to nearest even, a NaN quieted) as inline code for
 * kernels that round each value in the loop that computes it (the fused
 * sweeps of kernels/norm_rope.c and kernels/geglu.c) instead of a separate
 * gt_bf16_round pass over memory.
 *
 * Per element it is gt_f32_to_bf16's arithmetic (bf16.h: add 0x7fff plus the
 * lowest kept bit, keep the top half; a NaN keeps its top half with the quiet
 * bit set), written without a branch so that it vectorizes inside the
 * computing loop; the bits are gt_bf16_round1's for every input (denormals
 * kept), which tests/test_fused.c holds against gt_bf16_round. */
#ifndef GEMTRAIN_BF16_ROW_H
#define GEMTRAIN_BF16_ROW_H

#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float gt__bf16_round1_nb(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t q = (u | 0x00400000u) & 0xffff0000u; /* a NaN, quieted */
  const uint32_t o = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
  float y;
  memcpy(&y, &o, 4);
  return y;
}

#endif
