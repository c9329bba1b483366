/* RMSNorm over the last dim, rows in parallel. The weight gradient is split
 * over columns instead: each column is then summed over rows in row order by
 * exactly one thread, so dw is bit-identical for any thread count. */
#include <math.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "kernels/rmsnorm_row.h"

/* Waking the team costs microseconds; below this many elements one thread wins. */
#define GT__PAR_MIN 32768
/* Column ranges are whole cache lines so two threads never share one of dw. */
#define GT__COL_BLOCK 16

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__rms_args {
  float *out, *rstd;
  const float *dout, *x, *w, *rs;
  int64_t rows;
  int dim;
  float eps, w_offset;
} gt__rms_args;

static void gt__rms_fwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__rms_args *a = p;
  const int dim = a->dim;
  for (int64_t r = r0; r < r1; r++) {
    const float rs = gt__rms_row_fwd(a->out + r * dim, a->x + r * dim, a->w, dim, a->eps, a->w_offset);
    if (a->rstd) a->rstd[r] = rs;
  }
}

static void gt__rms_dx_part(void *p, int64_t r0, int64_t r1) {
  const gt__rms_args *a = p;
  const int dim = a->dim;
  for (int64_t r = r0; r < r1; r++)
    gt__rms_row_bwd(a->out + r * dim, NULL, a->dout + r * dim, a->x + r * dim, a->w, a->rs[r], dim, a->w_offset,
                    GT__RMS_ADD);
}

/* Member t's columns: whole blocks of GT__COL_BLOCK. */
static void gt__rms_dw_member(void *p, int t, int nt) {
  const gt__rms_args *a = p;
  float *dw = a->out;
  const float *dout = a->dout, *x = a->x, *rstd = a->rs;
  const int64_t rows = a->rows, dim = a->dim;
  int64_t c0, c1;
  gt_team_split_blocks(dim, GT__COL_BLOCK, t, nt, &c0, &c1);
  for (int64_t r = 0; r < rows && c0 < c1; r++) {
    const float rs = rstd[r];
    const float *dr = dout + r * dim, *xr = x + r * dim;
#pragma omp simd
    for (int64_t j = c0; j < c1; j++) dw[j] += dr[j] * (xr[j] * rs);
  }
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
  gt__rms_args a = {.out = out, .rstd = rstd, .x = x, .w = w, .rows = rows, .dim = dim, .eps = eps,
                    .w_offset = w_offset};
  gt_team_for(gt__par(rows * dim), rows, gt__rms_fwd_part, &a);
}

static void gt__rmsnorm_dw(float *dw, const float *dout, const float *x,
                           const float *rstd, int64_t rows, int dim) {
  gt__rms_args a = {.out = dw, .dout = dout, .x = x, .rs = rstd, .rows = rows, .dim = dim};
  gt_team_par(gt__par(rows * dim), gt__rms_dw_member, &a);
}

void gt_rmsnorm_backward(float *dx, float *dw, const float *dout,
                         const float *x, const float *rstd, const float *w,
                         int64_t rows, int dim, float w_offset) {
  if (rows <= 0 || dim <= 0) return;
  if (dx) {
    gt__rms_args a = {.out = dx, .dout = dout, .x = x, .w = w, .rs = rstd, .rows = rows, .dim = dim,
                      .w_offset = w_offset};
    gt_team_for(gt__par(rows * dim), rows, gt__rms_dx_part, &a);
  }
  /* Without a weight there is no parameter to train. */
  if (dw && w) gt__rmsnorm_dw(dw, dout, x, rstd, rows, dim);
}
