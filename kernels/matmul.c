/* Linear layers through gt_sgemm (kernels/gemm.c). Weights are [out, in] (HF
 * layout), so the forward product takes w transposed and no copy is made. */
#include <limits.h>
#include <string.h>

#include "kernels/kernels.h"

/* sgemm dimensions are blasint (32-bit here); a token count above that is
 * split into row blocks rather than silently truncated. */
#define GT__ROW_BLOCK ((int64_t)INT_MAX)

static int64_t gt__min64(int64_t a, int64_t b) { return a < b ? a : b; }

void gt_matmul_forward(float *out, const float *inp, const float *w,
                       int64_t n, int64_t in_dim, int64_t out_dim) {
  if (n <= 0 || out_dim <= 0) return;
  if (in_dim <= 0) {
    /* An empty inner product is 0; BLAS would reject lda = 0. */
    memset(out, 0, (size_t)(n * out_dim) * sizeof(float));
    return;
  }
  for (int64_t r0 = 0; r0 < n; r0 += GT__ROW_BLOCK) {
    const int64_t m = gt__min64(GT__ROW_BLOCK, n - r0);
    gt_sgemm(0, 1, m, out_dim, in_dim, 1.0f, inp + r0 * in_dim, in_dim, w, in_dim, 0.0f,
             out + r0 * out_dim, out_dim);
  }
}

void gt_matmul_backward(float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w,
                        int64_t n, int64_t in_dim, int64_t out_dim) {
  /* Any empty dimension makes every gradient term an empty sum: nothing to add. */
  if (n <= 0 || in_dim <= 0 || out_dim <= 0) return;
  for (int64_t r0 = 0; r0 < n; r0 += GT__ROW_BLOCK) {
    const int64_t m = gt__min64(GT__ROW_BLOCK, n - r0);
    if (dinp)
      gt_sgemm(0, 0, m, in_dim, out_dim, 1.0f, dout + r0 * out_dim, out_dim, w, in_dim, 1.0f,
               dinp + r0 * in_dim, in_dim);
    if (dw)
      gt_sgemm(1, 0, out_dim, in_dim, m, 1.0f, dout + r0 * out_dim, out_dim, inp + r0 * in_dim,
               in_dim, 1.0f, dw, in_dim);
  }
}
