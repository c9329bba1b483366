/* Scalar references of kernels/bf16.c: one element at a time through the
 * inline conversions of bf16.h. */
#include "kernels/bf16.h"

void gt_bf16_round_ref(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = gt_bf16_round1(x[i]);
}

void gt_bf16_pack_ref(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = gt_f32_to_bf16(src[i]);
}

void gt_bf16_unpack_ref(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = gt_bf16_to_f32(src[i]);
}

/* bf16 products in float32, summed in double (as gt_sgemm_ref) */
void gt_bgemm_ref(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) {
        float a = gt_bf16_round1(transA ? A[k * lda + i] : A[i * lda + k]);
        float b = gt_bf16_round1(transB ? B[j * ldb + k] : B[k * ldb + j]);
        s += (double)(a * b);
      }
      float c = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = alpha * (float)s + c;
    }
}
