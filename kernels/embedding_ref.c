/* Scalar embedding reference; backward adds in token order. */
#include "kernels/kernels.h"

void gt_embedding_forward_ref(float *out, const int32_t *tok, const float *table,
                              int64_t n, int dim, float scale) {
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < dim; j++)
      out[i * dim + j] = table[(int64_t)tok[i] * dim + j] * scale;
}

void gt_embedding_backward_ref(float *dtable, const float *dout, const int32_t *tok,
                               int64_t n, int dim, float scale) {
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < dim; j++)
      dtable[(int64_t)tok[i] * dim + j] += scale * dout[i * dim + j];
}
