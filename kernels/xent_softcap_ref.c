/* References of the fused soft-cap + cross-entropy kernels, composed from the
 * unfused references. */
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

void gt_softcap_xent_forward_ref(float *loss, float *lse, float *logits, const int32_t *target, int64_t rows,
                                 int64_t V, float cap) {
  if (rows > 0 && V > 0) gt_softcap_forward_ref(logits, rows * V, cap);
  gt_xent_forward_ref(loss, lse, logits, target, rows, V);
}

void gt_softcap_xent_backward_ref(float *dlogits, const float *logits, const float *lse, const int32_t *target,
                                  const float *row_weight, int64_t rows, int64_t V, float cap, float z) {
  if (rows <= 0 || V <= 0) return;
  size_t n = (size_t)(rows * V);
  float *y = malloc(n * sizeof(float)); /* the capped logits, before dlogits may overwrite them */
  if (!y) return;
  memcpy(y, logits, n * sizeof(float));
  gt_xent_backward_ref(dlogits, logits, lse, target, row_weight, rows, V, z);
  gt_softcap_backward_ref(dlogits, y, (int64_t)n, cap);
  free(y);
}

/* gt_softcap_xent_backward_b16's reference, as gt_xent_backward_b16_ref */
void gt_softcap_xent_backward_b16_ref(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                                      const int32_t *target, const float *row_weight, int64_t rows, int64_t V,
                                      float cap, float z) {
  if (rows <= 0 || V <= 0) return;
  float *d = malloc((size_t)(rows * V) * sizeof(float)); /* test-only scratch */
  if (!d) return;
  gt_softcap_xent_backward_ref(d, logits, lse, target, row_weight, rows, V, cap, z);
  for (int64_t r = 0; r < rows; r++) gt_bf16_pack_ref(d16 + r * ld16, d + r * V, V);
  free(d);
}
