/* RMSNorm over the last dim, rows in parallel. The weight gradient is split
 * over columns instead: each column is then summed over rows in row order by
 * exactly one thread, so dw is bit-identical for any thread count. */
#include <math.h>
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"

/* Waking the pool costs microseconds; below this many elements one thread wins. */
#define GT__PAR_MIN 32768
/* Column ranges are whole cache lines so two threads never share one of dw. */
#define GT__COL_BLOCK 16

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

void gt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                        int64_t rows, int dim, float eps, float w_offset) {
  if (rows <= 0) return;
  if (dim <= 0) {
    /* mean over an empty row is 0: keep rstd defined for the caller. */
    if (rstd)
      for (int64_t r = 0; r < rows; r++) rstd[r] = 1.0f / sqrtf(eps);
    return;
  }
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
  for (int64_t r = 0; r < rows; r++) {
    const float rs = gt__rms_row_fwd(out + r * dim, x + r * dim, w, dim, eps, w_offset);
    if (rstd) rstd[r] = rs;
  }
}

static void gt__rmsnorm_dw(float *dw, const float *dout, const float *x,
                           const float *rstd, int64_t rows, int dim) {
#pragma omp parallel if (gt__par(rows * dim))
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t nblk = (dim + GT__COL_BLOCK - 1) / GT__COL_BLOCK;
    const int64_t c0 = nblk * t / nt * GT__COL_BLOCK;
    int64_t c1 = nblk * (t + 1) / nt * GT__COL_BLOCK;
    if (c1 > dim) c1 = dim;
    for (int64_t r = 0; r < rows && c0 < c1; r++) {
      const float rs = rstd[r];
      const float *dr = dout + r * dim, *xr = x + r * dim;
#pragma omp simd
      for (int64_t j = c0; j < c1; j++) dw[j] += dr[j] * (xr[j] * rs);
    }
  }
}

void gt_rmsnorm_backward(float *dx, float *dw, const float *dout,
                         const float *x, const float *rstd, const float *w,
                         int64_t rows, int dim, float w_offset) {
  if (rows <= 0 || dim <= 0) return;
  if (dx) {
#pragma omp parallel for schedule(static) if (gt__par(rows * dim))
    for (int64_t r = 0; r < rows; r++)
      gt__rms_row_bwd(dx + r * dim, NULL, dout + r * dim, x + r * dim, w, rstd[r], dim, w_offset, GT__RMS_ADD);
  }
  /* Without a weight there is no parameter to train. */
  if (dw && w) gt__rmsnorm_dw(dw, dout, x, rstd, rows, dim);
}
