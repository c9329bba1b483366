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
  for (int64_t r = 0; r < rows; r++)
    gt__xent_row_backward(dlogits + r * V, logits + r * V, target[r] < 0 ? 0.0f : lse[r], target[r],
                          row_weight ? row_weight[r] : 1.0f, V, 0.0f);
}
