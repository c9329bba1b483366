/* Scalar cross-entropy reference with libm expf/logf, sums in index order. */
#include <math.h>
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

void gt_xent_forward_ref(float *loss, float *lse, const float *logits,
                         const int32_t *target, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; r++) {
    const float *l = logits + r * V;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; j++)
      if (l[j] > mx) mx = l[j];
    float sum = 0.0f;
    for (int64_t j = 0; j < V; j++) sum += expf(l[j] - mx);
    const float ls = mx + logf(sum);
    if (lse) lse[r] = ls;
    loss[r] = (target[r] < 0 || V <= 0) ? 0.0f : ls - l[target[r]];
  }
}

void gt_xent_backward_ref(float *dlogits, const float *logits, const float *lse,
                          const int32_t *target, const float *row_weight,
                          int64_t rows, int64_t V, float z) {
  for (int64_t r = 0; r < rows; r++) {
    const int32_t tg = target[r];
    const float w = row_weight ? row_weight[r] : 1.0f;
    /* the z-loss z * lse^2 adds 2 z lse softmax */
    const float s = z != 0.0f && tg >= 0 ? 1.0f + 2.0f * z * lse[r] : 1.0f;
    for (int64_t j = 0; j < V; j++) {
      /* element j is read before it is written, so dlogits may alias logits */
      const float p = expf(logits[r * V + j] - lse[r]);
      dlogits[r * V + j] = tg < 0 ? 0.0f : (p * s - (j == tg ? 1.0f : 0.0f)) * w;
    }
  }
}

/* gt_xent_backward_b16's reference: the float reference's gradient, then
 * each row's bf16 patterns (computed whole first, so d16 may overlay the
 * logits) */
void gt_xent_backward_b16_ref(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                              const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float z) {
  if (rows <= 0 || V <= 0) return;
  float *d = malloc((size_t)(rows * V) * sizeof(float)); /* test-only scratch */
  if (!d) return;
  gt_xent_backward_ref(d, logits, lse, target, row_weight, rows, V, z);
  for (int64_t r = 0; r < rows; r++) gt_bf16_pack_ref(d16 + r * ld16, d + r * V, V);
  free(d);
}
