/* Sum of squares (and dot products) in double over a fixed partition: 64K-element chunks, each
 * summed with 16 fixed lanes, chunk sums added in chunk order. The partition
 * never depends on the thread count, so neither does the result (the global
 * gradient norm, and through clipping every parameter, stays reproducible). */
#include "base/team.h"
#include "kernels/kernels.h"

#define GT__CHUNK ((int64_t)1 << 16)
/* Chunk sums of one parallel batch live on the stack: no allocation. */
#define GT__BATCH 256
#define GT__LANES 16

static double gt__dot_chunk(const float *x, const float *y, int64_t n) {
  double acc[GT__LANES] = {0};
  int64_t i = 0;
  for (; i + GT__LANES <= n; i += GT__LANES) {
#pragma omp simd
    for (int k = 0; k < GT__LANES; k++) acc[k] += (double)x[i + k] * (double)y[i + k];
  }
  for (int k = 0; i + k < n; k++) acc[k] += (double)x[i + k] * (double)y[i + k];
  double s = 0.0;
  for (int k = 0; k < GT__LANES; k++) s += acc[k];
  return s;
}

/* The sum of squares is the dot product of x with itself: the same lanes,
 * chunks and order, so gt_sumsq's bits did not change when gt_dot came. */
double gt_sumsq(const float *x, int64_t n) { return gt_dot(x, x, n); }

typedef struct gt__dot_args {
  const float *x, *y;
  double *part;
  int64_t n, b0;
} gt__dot_args;

static void gt__dot_part(void *p, int64_t c0, int64_t c1) {
  const gt__dot_args *a = p;
  for (int64_t c = c0; c < c1; c++) {
    const int64_t i0 = (a->b0 + c) * GT__CHUNK;
    const int64_t len = a->n - i0 < GT__CHUNK ? a->n - i0 : GT__CHUNK;
    a->part[c] = gt__dot_chunk(a->x + i0, a->y + i0, len);
  }
}

double gt_dot(const float *x, const float *y, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t nchunks = (n + GT__CHUNK - 1) / GT__CHUNK;
  double total = 0.0;
  for (int64_t b0 = 0; b0 < nchunks; b0 += GT__BATCH) {
    const int64_t nb = nchunks - b0 < GT__BATCH ? nchunks - b0 : GT__BATCH;
    double part[GT__BATCH];
    gt__dot_args a = {x, y, part, n, b0};
    gt_team_for(nb > 1, nb, gt__dot_part, &a);
    for (int64_t c = 0; c < nb; c++) total += part[c];
  }
  return total;
}
