#include "model/linear.h"

#include <limits.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

/* row blocks as kernels/matmul.c takes them (sgemm dimensions may be 32-bit) */
#define GT__ROW_BLOCK ((int64_t)INT_MAX)

void gt__matmul_forward(const gt_model *m, float *out, const float *inp, const float *w, int64_t n, int64_t in_dim,
                    int64_t out_dim) {
  if (m->bf16_mm)
    gt_matmul_forward_bf16(out, inp, w, n, in_dim, out_dim);
  else
    gt_matmul_forward(out, inp, w, n, in_dim, out_dim);
}

void gt__matmul_backward(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int64_t n, int64_t in_dim, int64_t out_dim) {
  if (m->bf16_mm)
    gt_matmul_backward_bf16(dinp, dw, dout, inp, w, n, in_dim, out_dim);
  else
    gt_matmul_backward(dinp, dw, dout, inp, w, n, in_dim, out_dim);
}

void gt__matmul_backward_write(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, int64_t n, int64_t in_dim, int64_t out_dim) {
  if (n <= 0 || in_dim <= 0) return;
  if (out_dim <= 0) { /* an empty sum: the written gradient is 0, nothing to add to dw */
    if (dinp) memset(dinp, 0, (size_t)(n * in_dim) * sizeof(float));
    return;
  }
  if (dinp)
    for (int64_t r0 = 0; r0 < n; r0 += GT__ROW_BLOCK) {
      const int64_t rows = n - r0 < GT__ROW_BLOCK ? n - r0 : GT__ROW_BLOCK;
      (m->bf16_mm ? gt_bgemm : gt_sgemm)(0, 0, rows, in_dim, out_dim, 1.0f, dout + r0 * out_dim, out_dim, w, in_dim,
                                         0.0f, dinp + r0 * in_dim, in_dim);
    }
  if (dw) gt__matmul_backward(m, NULL, dw, dout, inp, w, n, in_dim, out_dim);
}

void gt__act_round(const gt_model *m, float *x, int64_t n) {
  if (m->bf16_act && x) gt_bf16_round(x, n);
}
