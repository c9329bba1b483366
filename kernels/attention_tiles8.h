/* The attention tile products on 8 float lanes: the AVX2 copy of
 * kernels/attention.c includes this for its gt__mm_nt and gt__mm_acc (the
 * AVX-512 copy has 16-lane ones of its own; the portable copy calls
 * cblas_sgemm). A fragment of attention.c, included after GT__BK,
 * gt__imin and gt__imax and compiled with AVX2 and FMA (the AVX2 copy's
 * flags). Private to kernels/.
 *
 * Why: without them the AVX2 copy ran every 64 x 64 tile product through
 * cblas_sgemm, whose per-call packing and dispatch is a large share of so
 * small a product; on a 2-core Zen 3 the 12-layer model's attention ran at
 * 25-31% of the FMA peak and barely gained from the second thread.
 *
 * Register tile: 6 rows x 16 columns, 12 accumulators of 8 floats, two B
 * vectors and a broadcast A value, 15 of the 16 YMM registers (as the AVX2
 * GEMM, kernels/gemm_avx2.c). Each output sums its terms in the reduction's
 * order with one FMA per term and then applies alpha as the AVX-512 copy's
 * float32 kernels do (gt__mm_nt: alpha times the sum; gt__mm_acc: C + alpha
 * times the sum), so for finite operands both copies give the same tile
 * products (a row block of 6 here, 4 there, adds only zero terms X = 0; an
 * inf or NaN in Y past a row's own band can reach different rows). As
 * there, only blocks the band leaves at least partly visible are computed. */
#ifndef GEMTRAIN_KERNELS_ATTENTION_TILES8_H
#define GEMTRAIN_KERNELS_ATTENTION_TILES8_H

#include <immintrin.h>

#include "kernels/lanes8.h"

/* whole 16-column groups of a tile row */
_Static_assert(GT__BK % 16 == 0, "the 8-lane tile products need BK to be a multiple of 16");
/* gt__mm_acc8 copies up to GT__BK rows of Y (kk is a tile of keys or of queries) */
_Static_assert(GT__BQ <= GT__BK, "gt__mm_acc8 copies at most GT__BK rows");

/* Keeps v in a register: without it gcc folds a loaded B vector into each
 * row's FMA as a memory operand, one load per FMA (see attention.c's
 * GT__PIN). The same FMAs in the same order. */
#define GT__PIN8(v) __asm__("" : "+x"(v))

/* Rows [r, r + R) of gt__mm_nt8, the 16 columns from co over every d. */
#define GT__NT8_BODY(R)                                                        \
  do {                                                                         \
    __m256 acc[R][2];                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps(); \
    const float *a = A + (size_t)r * lda;                                      \
    const float *p = pk + co;                                                  \
    for (int d = 0; d < k; d++, p += GT__BK) {                                 \
      __m256 y0 = _mm256_loadu_ps(p), y1 = _mm256_loadu_ps(p + 8);             \
      GT__PIN8(y0);                                                            \
      GT__PIN8(y1);                                                            \
      _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) {                  \
        const __m256 x = _mm256_broadcast_ss(a + (size_t)i * lda + d);         \
        acc[i][0] = _mm256_fmadd_ps(x, y0, acc[i][0]);                         \
        acc[i][1] = _mm256_fmadd_ps(x, y1, acc[i][1]);                         \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) {                    \
      float *o = C + (size_t)(r + i) * GT__BK + co;                            \
      _mm256_storeu_ps(o, _mm256_mul_ps(va, acc[i][0]));                       \
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(va, acc[i][1]));                   \
    }                                                                          \
  } while (0)

/* Rows [r, r + R) of gt__mm_nt8 at the 16 columns from co, if any of them
 * is in the rows' band [r + blo, r + R - 1 + bhi]. */
#define GT__NT8_BAND(R)                                                        \
  do {                                                                         \
    const int lo = gt__imax(0, r + blo), hi = gt__imin(GT__BK - 1, r + (R)-1 + bhi); \
    if (co + 15 >= lo && co <= hi) GT__NT8_BODY(R);                            \
  } while (0)

/* C (leading dim GT__BK) = alpha * A . B^T over k, pk = B^T packed
 * [k][GT__BK] (gt__pack_t, zero past the tile's keys); entries outside the
 * band [blo, bhi] may be left as they were (the caller masks them). Column
 * groups outside, row blocks inside: a group's slice of pk (k x 16 floats,
 * 16 KiB at head_dim 256) stays in L1 while the row blocks stream A, where
 * the whole of pk (64 KiB at 256) would not. */
static void gt__mm_nt8(float *C, float alpha, const float *A, int lda, int m, const float *pk, int k, int blo,
                       int bhi) {
  const __m256 va = _mm256_set1_ps(alpha);
  for (int co = 0; co < GT__BK; co += 16) {
    int r = 0;
    for (; r + 6 <= m; r += 6) GT__NT8_BAND(6);
    switch (m - r) {
    case 5: GT__NT8_BAND(5); break;
    case 4: GT__NT8_BAND(4); break;
    case 3: GT__NT8_BAND(3); break;
    case 2: GT__NT8_BAND(2); break;
    case 1: GT__NT8_BAND(1); break;
    default: break;
    }
  }
}

/* Y's 8 floats at y: all of them, or the lanes of mask mk (a row's tail) */
#define GT__LD8(FULL, y, mk) ((FULL) ? _mm256_loadu_ps(y) : _mm256_maskload_ps((y), (mk)))

/* Rows [r, r + R) of gt__mm_acc8, NV (1 or 2) vectors from column j: the
 * sum over c in the rows' band [c0, c1), then C += alpha * sum. FULL: all
 * 8 NV columns exist (else m0, m1 mask them). */
#define GT__ACC8_BODY(R, NV, FULL)                                             \
  do {                                                                         \
    const int c0 = gt__imax(0, r + blo), c1 = gt__imin(kk, r + (R) + bhi);      \
    if (c0 >= c1) break;                                                       \
    __m256 acc[R][NV];                                                         \
    _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++)                      \
      _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++) acc[i][v] = _mm256_setzero_ps(); \
    for (int c = c0; c < c1; c++) {                                            \
      const float *y = Y + (size_t)c * ldy + j;                                \
      __m256 yv[NV];                                                           \
      _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++) {                 \
        yv[v] = GT__LD8(FULL, y + 8 * v, v ? m1 : m0);                         \
        GT__PIN8(yv[v]);                                                       \
      }                                                                        \
      _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) {                  \
        const __m256 x = _mm256_broadcast_ss(X + (size_t)(r + i) * xr + (size_t)c * xc); \
        _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++)                 \
          acc[i][v] = _mm256_fmadd_ps(x, yv[v], acc[i][v]);                    \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) {                    \
      float *o = C + (size_t)(r + i) * ldc + j;                                \
      _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++) {                 \
        const __m256 cur = GT__LD8(FULL, o + 8 * v, v ? m1 : m0);              \
        const __m256 nw = _mm256_fmadd_ps(va, acc[i][v], cur);                 \
        if (FULL) _mm256_storeu_ps(o + 8 * v, nw);                             \
        else _mm256_maskstore_ps(o + 8 * v, v ? m1 : m0, nw);                  \
      }                                                                        \
    }                                                                          \
  } while (0)

/* Every row block of one column block of gt__mm_acc8 */
#define GT__ACC8_ROWS(NV, FULL)                                                \
  do {                                                                         \
    int r = 0;                                                                 \
    for (; r + 6 <= m; r += 6) GT__ACC8_BODY(6, NV, FULL);                     \
    switch (m - r) {                                                           \
    case 5: GT__ACC8_BODY(5, NV, FULL); break;                                 \
    case 4: GT__ACC8_BODY(4, NV, FULL); break;                                 \
    case 3: GT__ACC8_BODY(3, NV, FULL); break;                                 \
    case 2: GT__ACC8_BODY(2, NV, FULL); break;                                 \
    case 1: GT__ACC8_BODY(1, NV, FULL); break;                                 \
    default: break;                                                            \
    }                                                                          \
  } while (0)

/* One column group of gt__mm_acc8: C[r, 0:w] += alpha * sum_c X[r, c] *
 * Y[c, 0:w], w <= 16 columns from Y at its row stride ldy. */
static void gt__acc8_group(float *C, int ldc, __m256 va, const float *X, int xr, int xc, int m, int kk,
                           const float *Y, int ldy, int w, int blo, int bhi) {
  const int j = 0;
  const __m256i m0 = gt__mask8(w), m1 = gt__mask8(w - 8);
  if (w == 16) GT__ACC8_ROWS(2, 1);
  else if (w > 8) GT__ACC8_ROWS(2, 0);
  else if (w == 8) GT__ACC8_ROWS(1, 1);
  else GT__ACC8_ROWS(1, 0);
}

/* C[r, 0:n] += alpha * sum_c X[r*xr + c*xc] * Y[c*ldy + 0:n], r < m, c < kk
 * (kk <= GT__BK), the terms outside the band [blo, bhi] skipped (X is zero
 * there): gt__mm_acc's contract (kernels/attention.c).
 *
 * Each whole 16-column group of Y is first copied to a contiguous [c][16]
 * block (the rows the band reaches). Why: the row blocks read a group's
 * rows again and again, and in place they lie one tensor row apart; at
 * gemma3-270m's shapes that stride is 4 KiB (Q and dO, H x hd floats) or
 * 1 KiB (K), so a group's 64 rows fall into 1 or 4 of L1's 64 sets and
 * evict each other (8 ways). Contiguous, they take 4 KiB of L1. The copy
 * moves no arithmetic: the same FMAs in the same order, the same bits. */
static void gt__mm_acc8(float *C, int ldc, float alpha, const float *X, int xr, int xc, int m, int kk,
                        const float *Y, int ldy, int n, int blo, int bhi) {
  _Alignas(32) float yp[GT__BK * 16];
  const __m256 va = _mm256_set1_ps(alpha);
  /* the rows of Y some row's band reaches */
  const int c0 = gt__imax(0, blo), c1 = gt__imin(kk, m - 1 + bhi + 1);
  if (c0 >= c1) return;
  for (int j = 0; j < n; j += 16) {
    const int w = gt__imin(16, n - j);
    if (w < 16) {
      gt__acc8_group(C + j, ldc, va, X, xr, xc, m, kk, Y + j, ldy, w, blo, bhi);
      continue;
    }
    for (int c = c0; c < c1; c++) {
      const float *y = Y + (size_t)c * ldy + j;
      _mm256_store_ps(yp + 16 * c, _mm256_loadu_ps(y));
      _mm256_store_ps(yp + 16 * c + 8, _mm256_loadu_ps(y + 8));
    }
    gt__acc8_group(C + j, ldc, va, X, xr, xc, m, kk, yp, 16, 16, blo, bhi);
  }
}

#endif
