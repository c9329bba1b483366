/* One row of softmax cross-entropy, forward and backward, as inline code
 * shared by kernels/xent.c and the fused soft-cap kernels
 * (kernels/xent_softcap.c), so the fused forms give the unfused bits. */
#ifndef GEMTRAIN_XENT_ROW_H
#define GEMTRAIN_XENT_ROW_H

#include <math.h>
#include <stdint.h>

#include "kernels/bf16_row.h"
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

/* d(loss)/d(logits) of one row, written over d (which may alias l): w times
 * softmax - onehot(tg); a row without a target (tg < 0) gets zeros. With
 * z > 0 the row's loss also holds the z-loss z * ls^2 (ls = log Z, the
 * row's log-sum-exp), whose gradient 2 z ls softmax scales the softmax by
 * s = 1 + 2 z ls; z = 0 leaves s = 1 and w * s = w exactly, so the bits are
 * those without the term. With cap > 0, l holds soft-capped logits
 * y = cap tanh(x / cap) and the gradient goes on through the cap, times
 * 1 - (y / cap)^2. cap is a constant at each call site, so each form is its
 * own branch-free vector loop. */
static inline __attribute__((always_inline)) void gt__xent_row_backward(float *d, const float *l, float ls, int32_t tg,
                                                                        float w, float z, int64_t V, const float cap,
                                                                        uint16_t *d16, const int to16) {
/* (to16: the gradient written as bf16 patterns to d16 instead, which may
 * overlay the row's own logits: element j's 2 bytes lie below logit j's 4,
 * so no logit is overwritten before it is read) */
#define GT__XSTORE(j, v)                  \
  do {                                    \
    if (to16)                             \
      d16[j] = gt__bf16_pattern_nb(v);    \
    else                                  \
      d[j] = (v);                         \
  } while (0)
  if (tg < 0) {
#pragma omp simd
    for (int64_t j = 0; j < V; j++) GT__XSTORE(j, 0.0f);
    return;
  }
  const float lt = l[tg]; /* read first: d may alias l */
  const float s = z != 0.0f ? 1.0f + 2.0f * z * ls : 1.0f;
  const float ws = w * s;
  if (cap > 0.0f) {
#pragma omp simd
    for (int64_t j = 0; j < V; j++) {
      const float t = l[j] / cap;
      const float g = gt__expf(l[j] - ls) * ws;
      GT__XSTORE(j, g * (1.0f - t * t));
    }
    const float tt = lt / cap;
    const float gt = (gt__expf(lt - ls) * s - 1.0f) * w;
    GT__XSTORE(tg, gt * (1.0f - tt * tt));
  } else {
#pragma omp simd
    for (int64_t j = 0; j < V; j++) GT__XSTORE(j, gt__expf(l[j] - ls) * ws);
    GT__XSTORE(tg, (gt__expf(lt - ls) * s - 1.0f) * w);
  }
#undef GT__XSTORE
}

#endif
