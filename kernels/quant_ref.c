/* Scalar references of kernels/quant.h's products: every element read
 * through its format's one definition, sums in double. */
#include "kernels/quant.h"
#include "kernels/quant_elem.h"

void gt_dequantize_rows_ref(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  for (int64_t i = 0; i < n * w->cols; i++) out[i] = gt__q_elem(w, r0 * w->cols + i);
}

void gt_qgemm_ref(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const gt_qweight *W, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0.0;
      for (int64_t k = 0; k < K; k++)
        s += (double)A[i * lda + k] * (double)gt__q_elem(W, transW ? j * W->cols + k : k * W->cols + j);
      const double prev = beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j];
      C[i * ldc + j] = (float)((double)alpha * s + prev);
    }
}
