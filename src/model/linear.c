#include "model/linear.h"

#include <limits.h>
#include <string.h>

#include "kernels/kernels.h"

/* row blocks as kernels/matmul.c takes them (sgemm dimensions may be 32-bit) */
#define GT__ROW_BLOCK ((int64_t)INT_MAX)

void gt__linear_backward_write(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int64_t n,
                               int64_t in_dim, int64_t out_dim) {
  if (n <= 0 || in_dim <= 0) return;
  if (out_dim <= 0) { /* an empty sum: the written gradient is 0, nothing to add to dw */
    if (dinp) memset(dinp, 0, (size_t)(n * in_dim) * sizeof(float));
    return;
  }
  if (dinp)
    for (int64_t r0 = 0; r0 < n; r0 += GT__ROW_BLOCK) {
      const int64_t m = n - r0 < GT__ROW_BLOCK ? n - r0 : GT__ROW_BLOCK;
      gt_sgemm(0, 0, m, in_dim, out_dim, 1.0f, dout + r0 * out_dim, out_dim, w, in_dim, 0.0f, dinp + r0 * in_dim,
               in_dim);
    }
  if (dw) gt_matmul_backward(NULL, dw, dout, inp, w, n, in_dim, out_dim);
}
