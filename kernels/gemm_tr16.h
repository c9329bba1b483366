/* The 16 x 16 in-register transpose of 32-bit lanes that the packed GEMMs
 * (kernels/gemm.c, kernels/gemm_bf16.c) use to pack rows that run along k.
 * Compiled for AVX-512F whatever -march is (the bf16 kernel is chosen at run
 * time); only code that runs after a cpuid check may call it. Private to
 * kernels/. */
#ifndef GEMTRAIN_GEMM_TR16_H
#define GEMTRAIN_GEMM_TR16_H

#include <immintrin.h>

#include "kernels/target.h"

GT__TARGET_BEGIN("avx512f")

/* In-register transpose of 16 rows of 16 floats: on return r[c] holds
 * column c (element i from row i). */
static inline __attribute__((always_inline)) void gt__tr16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 16
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  /* u[4g + c], 128-bit lane L: rows 4g..4g+3 at column 4L + c */
#pragma GCC unroll 16
  for (int g = 0; g < 4; g++) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  /* a 4 x 4 transpose of 128-bit lanes across u[c], u[4+c], u[8+c], u[12+c] */
#pragma GCC unroll 16
  for (int c = 0; c < 4; c++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

GT__TARGET_END

#endif
