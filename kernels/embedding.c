/* Scaled embedding lookup. The backward scatter-add is split over columns:
 * each thread owns a column range of the whole table and walks the tokens in
 * order, so repeated tokens never race and every element is summed in token
 * order whatever the thread count. */
#include <omp.h>

#include "kernels/kernels.h"

#define GT__PAR_MIN 32768
#define GT__COL_BLOCK 16

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

void gt_embedding_forward(float *out, const int32_t *tok, const float *table,
                          int64_t n, int dim, float scale) {
  if (n <= 0 || dim <= 0) return;
#pragma omp parallel for schedule(static) if (gt__par(n * dim))
  for (int64_t i = 0; i < n; i++) {
    const float *src = table + (int64_t)tok[i] * dim;
    float *o = out + i * dim;
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = src[j] * scale;
  }
}

void gt_embedding_backward(float *dtable, const float *dout, const int32_t *tok,
                           int64_t n, int dim, float scale) {
  if (n <= 0 || dim <= 0) return;
#pragma omp parallel if (gt__par(n * dim))
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t nblk = (dim + GT__COL_BLOCK - 1) / GT__COL_BLOCK;
    const int64_t c0 = nblk * t / nt * GT__COL_BLOCK;
    int64_t c1 = nblk * (t + 1) / nt * GT__COL_BLOCK;
    if (c1 > dim) c1 = dim;
    for (int64_t i = 0; i < n && c0 < c1; i++) {
      float *dst = dtable + (int64_t)tok[i] * dim;
      const float *g = dout + i * dim;
#pragma omp simd
      for (int64_t j = c0; j < c1; j++) dst[j] += scale * g[j];
    }
  }
}
