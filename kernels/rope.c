/* Rotary position embedding, rotate-half pairing (i, i + head_dim/2). */
#include <math.h>
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/rope_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) {
  return work >= GT__PAR_MIN && !omp_in_parallel();
}

void gt_rope_table_fill(float *cos_tab, float *sin_tab, int max_pos, int head_dim,
                        double base, double scale, double fraction) {
  const int half = head_dim / 2;
  if (max_pos <= 0 || half <= 0) return;
  int rot = (int)(fraction * head_dim / 2);
  if (rot < 0) rot = 0;
  if (rot > half) rot = half;
  /* float32 throughout, in HF's order (pow, reciprocal, then the linear
   * scaling divide), so angles round the way the reference model's do. */
#pragma omp parallel for schedule(static) if (gt__par((int64_t)max_pos * half))
  for (int i = 0; i < half; i++) {
    float inv = 0.0f;
    if (i < rot)
      inv = 1.0f / powf((float)base, (float)(2 * i) / (float)head_dim) / (float)scale;
    for (int p = 0; p < max_pos; p++) {
      const float a = (float)p * inv;
      cos_tab[(int64_t)p * half + i] = cosf(a);
      sin_tab[(int64_t)p * half + i] = sinf(a);
    }
  }
}

/* Rotates every row-head of x (kernels/rope_row.h). */
static void gt__rotate(float *x, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                       int nheads, int head_dim, float dir) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0 || half <= 0) return;
#pragma omp parallel for schedule(static) if (gt__par(ntok * nheads * head_dim))
  for (int64_t t = 0; t < ntok; t++) {
    const float *c = cos_tab + (int64_t)pos[t] * half;
    const float *s = sin_tab + (int64_t)pos[t] * half;
    for (int h = 0; h < nheads; h++) gt__rope_row(x + (t * nheads + h) * head_dim, c, s, half, dir);
  }
}

void gt_rope_forward(float *x, const int32_t *pos, const float *cos_tab,
                     const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  gt__rotate(x, pos, cos_tab, sin_tab, ntok, nheads, head_dim, 1.0f);
}

void gt_rope_backward(float *dx, const int32_t *pos, const float *cos_tab,
                      const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  gt__rotate(dx, pos, cos_tab, sin_tab, ntok, nheads, head_dim, -1.0f);
}
