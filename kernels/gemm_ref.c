/* Naive GEMM reference: double sums in index order (tests only). */
#include "kernels/kernels.h"

void gt_sgemm_ref(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) {
        float a = transA ? A[k * lda + i] : A[i * lda + k];
        float b = transB ? B[j * ldb + k] : B[k * ldb + j];
        s += (double)a * b;
      }
      float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = (float)(alpha * s) + prev;
    }
}
