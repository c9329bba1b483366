/* Softmax cross-entropy over rows of logits, one row per iteration of a
 * static loop; each row's max and exp-sum are float32 vector reductions. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "xent_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
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
    const float ls = gt__xent_row_lse(l, V);
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
