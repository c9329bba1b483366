/* RMSNorm over the last dim, rows in parallel. The weight gradient is split
 * over columns instead: each column is then summed over rows in row order by
 * exactly one thread, so dw is bit-identical for any thread count. */
#include <math.h>

#include "base/team.h"
#include "kernels/bf16_row.h"
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
  const uint16_t *xh; /* the backward's input kept in bf16 (gt_rmsnorm_backward_b16), else NULL */
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

/* One row's input gradient from x as floats: one compiled copy, which the
 * float32 path and the bf16 path (after widening the row) both call, so
 * that the row's dot product adds in one order for both. */
static __attribute__((noinline)) void gt__rms_dx_row(float *dxr, const float *dr, const float *xr, const float *w,
                                                     float rs, int dim, float w_offset) {
  gt__rms_row_bwd(dxr, NULL, dr, xr, w, rs, dim, w_offset, GT__RMS_ADD);
}

static void gt__rms_dx_part(void *p, int64_t r0, int64_t r1) {
  const gt__rms_args *a = p;
  const int dim = a->dim;
  if (!a->xh) {
    for (int64_t r = r0; r < r1; r++)
      gt__rms_dx_row(a->out + r * dim, a->dout + r * dim, a->x + r * dim, a->w, a->rs[r], dim, a->w_offset);
  } else if (dim <= GT_RMS_B16_ROW_MAX) {
    float row[GT_RMS_B16_ROW_MAX];
    for (int64_t r = r0; r < r1; r++) {
      gt__bf16_widen_row(row, a->xh + r * dim, dim);
      gt__rms_dx_row(a->out + r * dim, a->dout + r * dim, row, a->w, a->rs[r], dim, a->w_offset);
    }
  } else {
    /* wider than the stack row: the bits read in the loops (the same
     * values; the dot product may add in another order) */
    for (int64_t r = r0; r < r1; r++)
      gt__rms_row_bwd_x(a->out + r * dim, NULL, a->dout + r * dim, NULL, a->xh + r * dim, 1, a->w, a->rs[r], dim,
                        a->w_offset, GT__RMS_ADD);
  }
}

/* Member t's columns: whole blocks of GT__COL_BLOCK. */
static void gt__rms_dw_member(void *p, int t, int nt) {
  const gt__rms_args *a = p;
  float *dw = a->out;
  const float *dout = a->dout, *x = a->x, *rstd = a->rs;
  const uint16_t *xh = a->xh;
  const int64_t rows = a->rows, dim = a->dim;
  int64_t c0, c1;
  gt_team_split_blocks(dim, GT__COL_BLOCK, t, nt, &c0, &c1);
  for (int64_t r = 0; r < rows && c0 < c1; r++)
    if (xh)
      gt__rms_row_dw(dw, dout + r * dim, NULL, xh + r * dim, 1, rstd[r], c0, c1);
    else
      gt__rms_row_dw(dw, dout + r * dim, x + r * dim, NULL, 0, rstd[r], c0, c1);
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

/* x or, kept in bf16, xh: one of them */
static void gt__rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const uint16_t *xh,
                            const float *rstd, const float *w, int64_t rows, int dim, float w_offset) {
  if (rows <= 0 || dim <= 0) return;
  gt__rms_args a = {.dout = dout, .x = x, .xh = xh, .w = w, .rs = rstd, .rows = rows, .dim = dim,
                    .w_offset = w_offset};
  if (dx) {
    a.out = dx;
    gt_team_for(gt__par(rows * dim), rows, gt__rms_dx_part, &a);
  }
  /* Without a weight there is no parameter to train. */
  if (dw && w) {
    a.out = dw;
    gt_team_par(gt__par(rows * dim), gt__rms_dw_member, &a);
  }
}

void gt_rmsnorm_backward(float *dx, float *dw, const float *dout,
                         const float *x, const float *rstd, const float *w,
                         int64_t rows, int dim, float w_offset) {
  gt__rmsnorm_bwd(dx, dw, dout, x, NULL, rstd, w, rows, dim, w_offset);
}

void gt_rmsnorm_backward_b16(float *dx, float *dw, const float *dout, const uint16_t *x16, const float *rstd,
                             const float *w, int64_t rows, int dim, float w_offset) {
  gt__rmsnorm_bwd(dx, dw, dout, NULL, x16, rstd, w, rows, dim, w_offset);
}
