/* Rounding to bf16 (to nearest even, a NaN quieted) as inline code for
 * kernels that round each value in the loop that computes it (the fused
 * sweeps of kernels/norm_rope.c and kernels/geglu.c) instead of a separate
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

#endif
