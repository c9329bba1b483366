/* Linear layers with bf16 inputs (kernels/bf16.h): kernels/matmul.c's
 * products through gt_bgemm. */
#include <string.h>

#include "kernels/bf16.h"

static void gt__forward(int rnd, float *out, const float *inp, const float *w, int64_t n, int64_t in_dim,
                        int64_t out_dim) {
  if (n <= 0 || out_dim <= 0) return;
  if (in_dim <= 0) { /* zeros, already bf16 */
    memset(out, 0, (size_t)(n * out_dim) * sizeof(float));
    return;
  }
  (rnd ? gt_bgemm_rnd : gt_bgemm)(0, 1, n, out_dim, in_dim, 1.0f, inp, in_dim, w, in_dim, 0.0f, out, out_dim);
}

void gt_matmul_forward_bf16(float *out, const float *inp, const float *w, int64_t n, int64_t in_dim,
                            int64_t out_dim) {
  gt__forward(0, out, inp, w, n, in_dim, out_dim);
}

void gt_matmul_forward_bf16_rnd(float *out, const float *inp, const float *w, int64_t n, int64_t in_dim,
                                int64_t out_dim) {
  gt__forward(1, out, inp, w, n, in_dim, out_dim);
}

void gt_matmul_backward_bf16(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int64_t n,
                             int64_t in_dim, int64_t out_dim) {
  if (n <= 0 || in_dim <= 0 || out_dim <= 0) return;
  if (dinp) gt_bgemm(0, 0, n, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim, 1.0f, dinp, in_dim);
  if (dw) gt_bgemm(1, 0, out_dim, in_dim, n, 1.0f, dout, out_dim, inp, in_dim, 1.0f, dw, in_dim);
}
