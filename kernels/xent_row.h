/* One row of softmax cross-entropy, forward and backward, as inline code
 * shared by kernels/xent.c and the fused soft-cap kernels
 * (kernels/xent_softcap.c), so the fused forms give the unfused bits. */
#ifndef GEMTRAIN_XENT_ROW_H
#define GEMTRAIN_XENT_ROW_H

#include <math.h>
#include <stdint.h>

#include "simd_exp.h"

/* log-sum-exp of the row (max-subtracted, float32 vector reductions) */
static inline __attribute__((always_inline)) float gt__xent_row_lse(const float *l, int64_t V) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; j++) sum += gt__expf(l[j] - mx);
  return mx + logf(sum);
}

#endif
