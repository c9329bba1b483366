/* Scalar RoPE reference; the table comes from gt_rope_table_fill. */
#include "kernels/kernels.h"

void gt_rope_forward_ref(float *x, const int32_t *pos, const float *cos_tab,
                         const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < ntok; t++)
    for (int h = 0; h < nheads; h++) {
      float *v = x + (t * nheads + h) * head_dim;
      for (int i = 0; i < half; i++) {
        const float c = cos_tab[(int64_t)pos[t] * half + i];
        const float s = sin_tab[(int64_t)pos[t] * half + i];
        const float x1 = v[i], x2 = v[i + half];
        /* out = x*cos + rotate_half(x)*sin, rotate_half(x) = (-x2, x1) */
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
}

void gt_rope_backward_ref(float *dx, const int32_t *pos, const float *cos_tab,
                          const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < ntok; t++)
    for (int h = 0; h < nheads; h++) {
      float *v = dx + (t * nheads + h) * head_dim;
      for (int i = 0; i < half; i++) {
        const float c = cos_tab[(int64_t)pos[t] * half + i];
        const float s = sin_tab[(int64_t)pos[t] * half + i];
        const float g1 = v[i], g2 = v[i + half];
        /* transpose of the rotation: rotate by -angle */
        v[i] = g1 * c + g2 * s;
        v[i + half] = g2 * c - g1 * s;
      }
    }
}
