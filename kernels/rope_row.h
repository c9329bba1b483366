/* One row-head of RoPE as inline code shared by kernels/rope.c and the fused
 * norm + RoPE kernels (kernels/norm_rope.c): the same code in both is what
 * makes the fused kernels give the unfused sequence's bits, which a remat
 * recompute and the recorded losses rely on. */
#ifndef GEMTRAIN_ROPE_ROW_H
#define GEMTRAIN_ROPE_ROW_H

/* Rotates every (i, i + half) pair of a by +angle (dir = 1: forward) or
 * -angle (dir = -1: backward, the transpose of a rotation is its inverse);
 * c and s are the position's row of the cos / sin table. */
static inline __attribute__((always_inline)) void gt__rope_row(float *a, const float *c, const float *s, int half,
                                                               float dir) {
  float *b = a + half;
#pragma omp simd
  for (int i = 0; i < half; i++) {
    const float x1 = a[i], x2 = b[i], sn = dir * s[i];
    a[i] = x1 * c[i] - x2 * sn;
    b[i] = x2 * c[i] + x1 * sn;
  }
}

#endif
