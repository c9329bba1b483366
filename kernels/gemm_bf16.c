/* gt_bgemm, first version: round op(A) and op(B) into float32 copies and
 * multiply them with gt_sgemm. A product of two bf16 values is exact in
 * float32, so this is a bf16 product with float32 accumulation; it runs at
 * the float32 rate. (To be replaced by a packed vdpbf16ps kernel.) */
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

static float *gt__rounded(int trans, int64_t rows, int64_t cols, const float *X, int64_t ld) {
  /* op(X) is rows x cols; the copy keeps X's layout (ld = its row length) */
  int64_t r = trans ? cols : rows, c = trans ? rows : cols;
  float *y = malloc((size_t)(r * c) * sizeof(float) + 1);
  if (!y) return NULL;
  for (int64_t i = 0; i < r; i++) memcpy(y + i * c, X + i * ld, (size_t)c * sizeof(float));
  gt_bf16_round(y, r * c);
  return y;
}

void gt_bgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  float *a = gt__rounded(transA, M, K, A, lda), *b = gt__rounded(transB, K, N, B, ldb);
  if (a && b)
    gt_sgemm(transA, transB, M, N, K, alpha, a, transA ? M : K, b, transB ? K : N, beta, C, ldc);
  free(a);
  free(b);
}
