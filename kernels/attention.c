/* Fast causal GQA attention (optional sliding window, optional packed
 * segments), flash-attention style, 64 x 64 tiles.
 *
 * Forward: one work item per (b, kv head, query tile); the query heads of the
 * GQA group share each key tile. Keys are visited in tiles that start at the
 * first key any row of the query tile can see, so tiles the mask removes
 * entirely are never touched and a window-W layer costs O(T*W). Softmax is
 * online (running max m and sum l per row); the rows of `out` double as the
 * accumulator.
 *
 * Backward recomputes P = exp(S - lse) tile by tile, in one pass
 * (FlashAttention-2 style): per (b, kv head), over key tiles, and for each
 * key tile over every query head of the GQA group and every query tile that
 * can see it, S, P, dP and dS are formed once and give dV and dK of the key
 * tile and dQ of the query tile. To stay deterministic without atomics,
 * the key tiles of a (b, kv head) are cut into a few contiguous parts,
 * their number and cuts fixed by the shape (enough work items for a small
 * B * K; cut so that 2 and 3 threads running the parts longest first
 * finish together, see gt__bwd_split), never by the thread count. A part
 * owns dK, dV of its key tiles and dQ of the query tiles with the same
 * indices, which it adds into in place; its dQ terms for later query
 * tiles go to its own partial buffer, added into dQ in part order once
 * every part is done. So every sum runs in an order fixed by the shape,
 * and the bits depend neither on the thread count nor on timing, nor on
 * which thread runs a part (the parts run on a dynamic schedule). (It
 * replaced two passes, one per key tile for dK, dV and one per query tile
 * for dQ, that formed S, P and dP twice.)
 *
 * Scratch is per thread and independent of T: two BQ x BK tiles, K^T and V^T
 * of one key tile (2 * hd * BK floats), and per-row state of one GQA group.
 * Each thread allocates its own (first touch near the thread); if any
 * thread's allocation fails, every thread skips the work and the kernel
 * returns -1 with nothing written (see gt__team_scratch). The backward also
 * allocates, once per call, D = rowsum(dO * O) ([B, H, T]) and the parts'
 * partial dQ (none with a single part; see gt__bwd_split). */
#include "base/team.h"
#include "kernels/gemm_fixed.h"
#include "kernels/kernels.h"
#include "simd_exp.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/bf16_row.h"
#include "kernels/target.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef GT_ATTN_BQ
#define GT_ATTN_BQ 64
#endif
#ifndef GT_ATTN_BK
#define GT_ATTN_BK 64
#endif

enum { GT__BQ = GT_ATTN_BQ, GT__BK = GT_ATTN_BK };

#if defined(GT__KERNELS_AVX512) && !defined(GT_ATTN_USE_BLAS)
#include <immintrin.h>
#define GT__HAND 1
#elif defined(GT__KERNELS_AVX2) && !defined(GT_ATTN_USE_BLAS)
#define GT__HAND8 1 /* the float32 tile products on 8 lanes (kernels/attention_tiles8.h) */
#endif


static inline int gt__imin(int a, int b) { return a < b ? a : b; }
static inline int gt__imax(int a, int b) { return a > b ? a : b; }
#ifdef GT__HAND8
#include "kernels/attention_tiles8.h"
#endif

/* Overwrite the masked entries of one score row with -INFINITY. Column c is
 * key j0 + c; row is query i. Returns the number of visible columns. */
static int gt__mask_row(float *s, int nk, int i, int j0, int window,
                        const int32_t *seg_b) {
  int chi = gt__imin(nk - 1, i - j0);
  int clo = window > 0 ? gt__imax(0, i - window + 1 - j0) : 0;
  for (int c = 0; c < clo && c < nk; c++) s[c] = -INFINITY;
  for (int c = gt__imax(chi + 1, 0); c < nk; c++) s[c] = -INFINITY;
  if (clo > chi) return 0;
  int nvis = chi - clo + 1;
  if (seg_b) {
    const int32_t si = seg_b[i];
    for (int c = clo; c <= chi; c++) {
      if (seg_b[j0 + c] != si) {
        s[c] = -INFINITY;
        nvis--;
      }
    }
  }
  return nvis;
}

/* True when no (query, key) pair of the tile shares a segment: the score
 * products can be skipped. Only consulted with packed segments, where whole
 * tiles of other documents fall inside the causal band. */
static int gt__seg_disjoint(const int32_t *seg_b, int i0, int nq, int j0, int nk) {
  /* Segments are normally runs; compare ranges of ids first, then fall back
   * to the exact check only when the id ranges overlap. */
  int32_t qlo = seg_b[i0], qhi = seg_b[i0], klo = seg_b[j0], khi = seg_b[j0];
  for (int r = 1; r < nq; r++) {
    int32_t s = seg_b[i0 + r];
    qlo = s < qlo ? s : qlo;
    qhi = s > qhi ? s : qhi;
  }
  for (int c = 1; c < nk; c++) {
    int32_t s = seg_b[j0 + c];
    klo = s < klo ? s : klo;
    khi = s > khi ? s : khi;
  }
  if (qhi < klo || khi < qlo) return 1;
  for (int r = 0; r < nq; r++)
    for (int c = 0; c < nk; c++)
      if (seg_b[i0 + r] == seg_b[j0 + c]) return 0;
  return 1;
}

/* ----------------------------------------------------------- tile products
 * Two shapes cover every product of forward and backward:
 *   gt__mm_nt:  C[m, BK] = alpha * A[m, k] . B[n, k]^T   (scores, dP)
 *   gt__mm_acc: C[m, n] += alpha * X[m, kk] . Y[kk, n]     (P.V, dS.K, and
 *               with X read transposed, P^T.dO and dS^T.Q)
 * where A, B, Y, C address [B,T,heads,hd] rows in place through their strides.
 * With AVX-512 these are register-blocked micro-kernels: at 64 x 64 tiles
 * they beat OpenBLAS's sgemm, whose per-call packing and dispatch cost is a
 * large share of such small products (and OpenBLAS 0.3.21 does not recognise
 * every AVX-512 CPU and may fall back to an SSE3 kernel). The AVX2 copy has
 * 8-lane ones that sum in the same order (kernels/attention_tiles8.h). In the
 * portable copy (kernels/cpu.h) the same products go to cblas_sgemm. */

/* B^T of one key tile, packed [k][GT__BK] for gt__mm_nt; columns n..BK-1 are
 * zero so the micro-kernel can always run full width. */
static void gt__pack_t(float *pk, const float *B, int ldb, int n, int k) {
#if defined(GT__HAND) || defined(GT__HAND8)
  for (int c = 0; c < n; c++) {
    const float *b = B + (size_t)c * ldb;
    for (int d = 0; d < k; d++) pk[(size_t)d * GT__BK + c] = b[d];
  }
  if (n < GT__BK)
    for (int d = 0; d < k; d++)
      memset(pk + (size_t)d * GT__BK + n, 0, (size_t)(GT__BK - n) * sizeof(float));
#else
  (void)pk, (void)B, (void)ldb, (void)n, (void)k;
#endif
}

#ifdef GT__HAND
enum { GT__NV = GT__BK / 16 };
_Static_assert(GT__BK % 16 == 0, "hand kernels need BK to be a multiple of 16");

/* Keeps v in a register from here on. Without it gcc folds each use of a
 * loaded B vector into its FMA as a memory operand, so every row reloads
 * all of them: 16 vector loads per 16 FMAs, where Zen 4 issues one 512-bit
 * load a cycle, and the loop ran at about half of the FMA peak (perf
 * annotate). The empty asm changes nothing else: the same FMAs in the same
 * order, the same bits. */
#define GT__PIN(v) __asm__("" : "+v"(v))

/* 4 rows x GT__NV vectors of accumulators: 16 zmm at BK = 64, leaving room
 * for the B vectors and the broadcast. */
#define GT__NT_ROWS 4

/* The d loop runs in chunks so the slice of packed B it streams through
 * (GT__NT_CHUNK x GT__BK floats, 32 KB) stays in L1 across row blocks; with
 * head_dim 256 or 512 the whole packed tile would not. */
#define GT__NT_CHUNK 128

/* Rows [r, r + R) of gt__mm_nt over d in [d0, d1), NV vectors from column
 * co (the columns the band leaves visible to these rows). */
#define GT__NT_BODY(R, NV)                                                    \
  do {                                                                        \
    __m512 acc[R][NV];                                                        \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                    \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                 \
        acc[i][v] = d0 == 0 ? _mm512_setzero_ps()                             \
                            : _mm512_loadu_ps(C + (size_t)(r + i) * GT__BK + co + 16 * v); \
    for (int d = d0; d < d1; d++) {                                           \
      const float *p = pk + (size_t)d * GT__BK + co;                          \
      __m512 y[NV];                                                           \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) {               \
        y[v] = _mm512_loadu_ps(p + 16 * v);                                   \
        GT__PIN(y[v]);                                                        \
      }                                                                       \
      _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++) {                \
        const __m512 x = _mm512_set1_ps(A[(size_t)(r + i) * lda + d]);        \
        _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)               \
          acc[i][v] = _mm512_fmadd_ps(x, y[v], acc[i][v]);                    \
      }                                                                       \
    }                                                                         \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                    \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                 \
        _mm512_storeu_ps(C + (size_t)(r + i) * GT__BK + co + 16 * v,          \
                         d1 == k ? _mm512_mul_ps(va, acc[i][v]) : acc[i][v]); \
  } while (0)

/* Rows [r, r + R) of gt__mm_nt: only the 16-wide vectors that hold a column
 * in [r + blo, r + R - 1 + bhi], the band of these rows. */
#define GT__NT_BAND(R)                                                        \
  do {                                                                        \
    const int lo = gt__imax(0, r + blo), hi = gt__imin(GT__BK - 1, r + (R)-1 + bhi); \
    if (lo > hi) break;                                                       \
    const int co = lo / 16 * 16, nv = hi / 16 - lo / 16 + 1;                  \
    if (nv == 4) GT__NT_BODY(R, 4);                                           \
    else if (nv == 3) GT__NT_BODY(R, 3);                                      \
    else if (nv == 2) GT__NT_BODY(R, 2);                                      \
    else GT__NT_BODY(R, 1);                                                   \
  } while (0)
#endif

/* A band of a tile product: output row r (the rows of A in gt__mm_nt, of X
 * in gt__mm_acc) can only meet the columns (reduction indices) in
 * [r + blo, r + bhi]; the others are masked, and their products are
 * skipped. Queries i0 + r against keys j0 + c under window W (0: global):
 * keys j0 + c <= i0 + r and > i0 + r - W; keys against queries: the other
 * way round. The narrow band of a local layer leaves a large part of its
 * tiles masked (half of the columns at W = 64, a third at W = 128). */
#define GT__NOBAND (1 << 28)
static void gt__band_qk(int i0, int j0, int W, int *blo, int *bhi) {
  *bhi = i0 - j0;
  *blo = W > 0 ? i0 - j0 - W + 1 : -GT__NOBAND;
}
static void gt__band_kq(int i0, int j0, int W, int *blo, int *bhi) {
  *blo = j0 - i0;
  *bhi = W > 0 ? j0 - i0 + W - 1 : GT__NOBAND;
}

/* C (leading dim GT__BK) = alpha * A . B^T; pk is B packed by gt__pack_t.
 * Entries outside the band [blo, bhi] (see gt__band_qk) may be left as they
 * were: the caller masks them. */
static void gt__mm_nt(float *C, float alpha, const float *A, int lda, int m,
                      const float *B, int ldb, const float *pk, int n, int k, int blo, int bhi) {
#ifdef GT__HAND
  (void)B, (void)ldb, (void)n;
  const __m512 va = _mm512_set1_ps(alpha);
  for (int d0 = 0; d0 < k; d0 += GT__NT_CHUNK) {
    const int d1 = gt__imin(k, d0 + GT__NT_CHUNK);
    int r = 0;
    for (; r + GT__NT_ROWS <= m; r += GT__NT_ROWS) GT__NT_BAND(GT__NT_ROWS);
    for (; r < m; r++) GT__NT_BAND(1);
  }
#elif defined(GT__HAND8)
  (void)B, (void)ldb, (void)n;
  gt__mm_nt8(C, alpha, A, lda, m, pk, k, blo, bhi);
#else
  (void)pk, (void)blo, (void)bhi;
  gt__blas_one_thread();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, A, lda, B, ldb,
              0.0f, C, GT__BK);
#endif
}

#ifdef GT__HAND
/* C[r + i, j + 16 v ...] += alpha * acc[i][v] for the R rows and NV vectors
 * of a tile (the last vector masked by `tail`): both accumulate routines'
 * epilogue (float32 and bf16 products) */
#define GT__ACC_STORE(R, NV)                                                   \
  do {                                                                         \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++) {                   \
      float *o = C + (size_t)(r + i) * ldc + j;                                \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) {                \
        const __mmask16 mk = v == (NV)-1 ? tail : (__mmask16)0xFFFF;           \
        const __m512 cur = _mm512_maskz_loadu_ps(mk, o + 16 * v);              \
        _mm512_mask_storeu_ps(o + 16 * v, mk, _mm512_fmadd_ps(va, acc[i][v], cur)); \
      }                                                                        \
    }                                                                          \
  } while (0)

/* Rows [r, r + R) of gt__mm_acc, NV 16-wide vectors from column j; the last
 * vector is masked by `tail`. The sum runs over c in [c0, c1), the band of
 * these rows (gt__ACC_BAND). */
#define GT__ACC_BODY(R, NV)                                                    \
  do {                                                                         \
    __m512 acc[R][NV];                                                         \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                     \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                  \
        acc[i][v] = _mm512_setzero_ps();                                       \
    for (int c = c0; c < c1; c++) {                                            \
      const float *y = Y + (size_t)c * ldy + j;                                \
      __m512 yv[NV];                                                           \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) {                \
        yv[v] = _mm512_maskz_loadu_ps(v == (NV)-1 ? tail : (__mmask16)0xFFFF,  \
                                      y + 16 * v);                             \
        GT__PIN(yv[v]);                                                        \
      }                                                                        \
      _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++) {                 \
        const __m512 x = _mm512_set1_ps(X[(size_t)(r + i) * xr + (size_t)c * xc]); \
        _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                \
          acc[i][v] = _mm512_fmadd_ps(x, yv[v], acc[i][v]);                    \
      }                                                                        \
    }                                                                          \
    GT__ACC_STORE(R, NV);                                                      \
  } while (0)
#endif

/* C[r, 0:n] += alpha * sum_c X[r*xr + c*xc] * Y[c*ldy + 0:n], r < m, c < kk.
 * Either xc == 1 (X row-major [m, kk]) or xr == 1 (X stored as [kk, m]).
 * X is zero outside the band [blo, bhi] (gt__band_qk, gt__band_kq): those
 * terms are skipped. */
#ifdef GT__HAND
#define GT__ACC_BAND(R, NV)                                                    \
  do {                                                                         \
    const int c0 = gt__imax(0, r + blo), c1 = gt__imin(kk, r + (R) + bhi);      \
    if (c0 < c1) GT__ACC_BODY(R, NV);                                          \
  } while (0)
#endif
static void gt__mm_acc(float *C, int ldc, float alpha, const float *X, int xr, int xc,
                       int m, int kk, const float *Y, int ldy, int n, int blo, int bhi) {
#ifdef GT__HAND
  const __m512 va = _mm512_set1_ps(alpha);
  for (int j = 0; j < n; j += 64) {
    const int w = gt__imin(64, n - j);
    const int nv = (w + 15) / 16;
    const __mmask16 tail = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1u : 0xFFFFu);
    int r = 0;
    if (nv == 4) {
      for (; r + 4 <= m; r += 4) GT__ACC_BAND(4, 4);
      for (; r < m; r++) GT__ACC_BAND(1, 4);
    } else if (nv == 3) {
      for (; r + 4 <= m; r += 4) GT__ACC_BAND(4, 3);
      for (; r < m; r++) GT__ACC_BAND(1, 3);
    } else if (nv == 2) {
      for (; r + 4 <= m; r += 4) GT__ACC_BAND(4, 2);
      for (; r < m; r++) GT__ACC_BAND(1, 2);
    } else {
      for (; r + 4 <= m; r += 4) GT__ACC_BAND(4, 1);
      for (; r < m; r++) GT__ACC_BAND(1, 1);
    }
  }
#elif defined(GT__HAND8)
  gt__mm_acc8(C, ldc, alpha, X, xr, xc, m, kk, Y, ldy, n, blo, bhi);
#else
  (void)blo, (void)bhi;
  gt__blas_one_thread();
  if (xc == 1)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kk, alpha, X, xr, Y, ldy,
                1.0f, C, ldc);
  else
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, kk, alpha, X, xc, Y, ldy,
                1.0f, C, ldc);
#endif
}

/* ------------------------------------------------- bf16 tile products
 * gt_attn_dims.bf16 = 1: every tile product takes bf16 inputs with float32
 * accumulation, in gt_bgemm's arithmetic (gt__attn_bmode). Where gt_bgemm
 * takes the pairs path, the pairs below: operands are rounded (round to
 * nearest even, NaNs quieted, as gt_f32_to_bf16) while they are packed into
 * 32-bit lanes that hold two consecutive elements of the reduction
 * dimension: the even one in the low half, the odd one in the high half, a
 * zero after an odd length. Each product then runs on vdpbf16ps, or (without
 * AVX512_BF16, or with gt__bgemm_force_fallback(1)) on its emulation: per
 * lane and pair, two float32 FMAs, the odd element first, under DAZ and FTZ
 * with round to nearest (the arithmetic kernels/gemm_bf16.c measured
 * vdpbf16ps to have), so both give the same bits. Where gt_bgemm takes its
 * widened or AMX path, the widened mode: the float32 products above on
 * operands rounded the same way: Q, K and V as the caller gives them (bf16
 * values, gt_attn_dims.bf16), dO, P and dS through float32 copies rounded
 * by gt_bf16_round_rows.
 *
 * Packed shapes (uint32 pairs):
 *   "A" rows  [m][kp]:      row r, pairs along the row (Q, dO, P, dS);
 *   "B^T"     [kp][GT__BK]: lane c = pair p of row c (K, V for S and dP);
 *   "Y"       [kkp][ld]:    lane j = (Y[2p][j], Y[2p+1][j]) (V, K, Q, dO as
 *                           the right operand of gt__mm_acc; P^T and dS^T).
 * Scale and accumulation into C are float32, as in the float32 products. */
#ifdef GT__HAND
GT__TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512bf16,fma")

#include "kernels/bf16_lanes.h"

static inline __mmask16 gt__m16(int n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u);
}

/* "A" rows: dst[r * ldd + p] = pair(src[r][2p], src[r][2p + 1]), r < m,
 * p < (k + 1) / 2. A row of pairs is the row's bf16 values in order. */
static void gt__bpack_rows(uint32_t *dst, int ldd, const float *src, int lds, int m, int k) {
  const int nw = 2 * ((k + 1) / 2);
  for (int r = 0; r < m; r++) {
    const float *s = src + (size_t)r * lds;
    uint16_t *o = (uint16_t *)(dst + (size_t)r * ldd);
    for (int c = 0; c < nw; c += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(gt__m16(k - c), s + c);
      const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(gt__bf16_round16(x), 16));
      _mm256_mask_storeu_epi16(o + c, gt__m16(nw - c), h);
    }
  }
}

/* "Y": dst[p * ldd + j] = pair(src[2p][j], src[2p + 1][j]) for j < n, zero
 * for n <= j < ldd (ldd a multiple of 16); an odd kk pairs its last row
 * with zeros. */
static void gt__bpack_y(uint32_t *dst, int ldd, const float *src, int lds, int kk, int n) {
  for (int p = 0; p < (kk + 1) / 2; p++) {
    const float *e = src + (size_t)(2 * p) * lds;
    const float *o = 2 * p + 1 < kk ? e + lds : NULL;
    for (int j = 0; j < ldd; j += 16) {
      const __mmask16 mk = gt__m16(n - j);
      const __m512i ve = _mm512_srli_epi32(gt__bf16_round16(_mm512_maskz_loadu_ps(mk, e + j)), 16);
      const __m512i vo = o ? gt__bf16_round16(_mm512_maskz_loadu_ps(mk, o + j)) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (size_t)p * ldd + j, _mm512_or_si512(ve, vo));
    }
  }
}

/* "B^T" of rows [n][k] (stride ldb): rows packed as "A" rows into tmp, then
 * transposed; lanes n..GT__BK-1 zero. */
static void gt__bpack_nt(uint32_t *dst, uint32_t *tmp, const float *B, int ldb, int n, int k) {
  const int kp = (k + 1) / 2;
  gt__bpack_rows(tmp, kp, B, ldb, n, k);
  for (int p = 0; p < kp; p++) {
    uint32_t *d = dst + (size_t)p * GT__BK;
    for (int c = 0; c < n; c++) d[c] = tmp[(size_t)c * kp + p];
    for (int c = n; c < GT__BK; c++) d[c] = 0;
  }
}

/* One pair step of the fallback: acc + x_odd y_odd, then + x_even y_even,
 * each a float32 FMA (the caller has set DAZ, FTZ and round to nearest). */
static inline __attribute__((always_inline)) __m512 gt__bdp_emu(__m512 acc, __m512i x, __m512i yo,
                                                                __m512i ye) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi)), _mm512_castsi512_ps(yo), acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), _mm512_castsi512_ps(ye), acc);
}

#define GT__MXCSR_BF 0x8040u /* FTZ | DAZ, round to nearest, exceptions as they were */
#define GT__MXCSR_ON(DP)                                                       \
  const unsigned csr0 = (DP) ? 0u : _mm_getcsr();                             \
  if (!(DP)) _mm_setcsr((csr0 & ~0x6000u) | GT__MXCSR_BF)
#define GT__MXCSR_OFF(DP)                                                      \
  if (!(DP)) _mm_setcsr(csr0)

/* acc[R][NV] (declared here) = the pair products of R rows and NV vectors
 * over NP pair steps, on vdpbf16ps (DP) or its emulation: YROW is step p's
 * row of packed lanes, XPAIR row i's pair at step p. */
#define GT__BDP_ACC(R, NV, DP, NP, YROW, XPAIR)                                \
  __m512 acc[R][NV];                                                           \
  _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                       \
    _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                    \
      acc[i][v] = _mm512_setzero_ps();                                         \
  GT__MXCSR_ON(DP);                                                            \
  for (int p = 0; p < (NP); p++) {                                             \
    const uint32_t *y = (YROW);                                                \
    __m512i yv[NV], yo[NV], ye[NV];                                            \
    _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++) {                  \
      yv[v] = _mm512_loadu_si512(y + 16 * v);                                  \
      if (!(DP)) {                                                             \
        yo[v] = _mm512_and_si512(yv[v], _mm512_set1_epi32((int)0xffff0000u));  \
        ye[v] = _mm512_slli_epi32(yv[v], 16);                                  \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++) {                   \
      const __m512i x = _mm512_set1_epi32((int)(XPAIR));                       \
      _Pragma("GCC unroll 16") for (int v = 0; v < (NV); v++)                  \
        acc[i][v] = (DP) ? _mm512_dpbf16_ps(acc[i][v], (__m512bh)x, (__m512bh)yv[v]) \
                         : gt__bdp_emu(acc[i][v], x, yo[v], ye[v]);            \
    }                                                                          \
  }                                                                            \
  GT__MXCSR_OFF(DP)

/* Rows [r, r + R) of the bf16 gt__mm_nt: C = alpha * A2 . pk over kp pairs. */
#define GT__BNT_BODY(R, DP)                                                    \
  do {                                                                         \
    GT__BDP_ACC(R, GT__NV, DP, kp, pk + (size_t)p * GT__BK, A2[(size_t)(r + i) * lda2 + p]); \
    _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                     \
      _Pragma("GCC unroll 16") for (int v = 0; v < GT__NV; v++)                \
        _mm512_storeu_ps(C + (size_t)(r + i) * GT__BK + 16 * v, _mm512_mul_ps(va, acc[i][v])); \
  } while (0)

/* C (leading dim GT__BK) = alpha * A . B^T with A packed as "A" rows (lda2)
 * and B as "B^T", kp pairs. */
static void gt__bmm_nt(float *C, float alpha, const uint32_t *A2, int lda2, int m,
                       const uint32_t *pk, int kp, int dp) {
  const __m512 va = _mm512_set1_ps(alpha);
  int r = 0;
  if (dp) {
    for (; r + GT__NT_ROWS <= m; r += GT__NT_ROWS) GT__BNT_BODY(GT__NT_ROWS, 1);
    for (; r < m; r++) GT__BNT_BODY(1, 1);
  } else {
    for (; r + GT__NT_ROWS <= m; r += GT__NT_ROWS) GT__BNT_BODY(GT__NT_ROWS, 0);
    for (; r < m; r++) GT__BNT_BODY(1, 0);
  }
}

/* Rows [r, r + R) of the bf16 gt__mm_acc, NV vectors from column j. */
#define GT__BACC_BODY(R, NV, DP)                                               \
  do {                                                                         \
    GT__BDP_ACC(R, NV, DP, kkp, Y2 + (size_t)p * ldy2 + j, X2[(size_t)(r + i) * xr2 + (size_t)p * xc2]); \
    GT__ACC_STORE(R, NV);                                                      \
  } while (0)

#define GT__BACC_ROWS(NV, DP)                                                  \
  do {                                                                         \
    for (; r + 4 <= m; r += 4) GT__BACC_BODY(4, NV, DP);                       \
    for (; r < m; r++) GT__BACC_BODY(1, NV, DP);                               \
  } while (0)

/* C[r, 0:n] += alpha * sum_p X2[r*xr2 + p*xc2] . Y2[p*ldy2 + 0:n] (pairs),
 * r < m, p < kkp; Y2 rows are padded with zeros to a multiple of 16. */
static void gt__bmm_acc(float *C, int ldc, float alpha, const uint32_t *X2, int xr2, int xc2,
                        int m, int kkp, const uint32_t *Y2, int ldy2, int n, int dp) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int j = 0; j < n; j += 64) {
    const int w = gt__imin(64, n - j);
    const int nv = (w + 15) / 16;
    const __mmask16 tail = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1u : 0xFFFFu);
    int r = 0;
    if (dp) {
      if (nv == 4) GT__BACC_ROWS(4, 1);
      else if (nv == 3) GT__BACC_ROWS(3, 1);
      else if (nv == 2) GT__BACC_ROWS(2, 1);
      else GT__BACC_ROWS(1, 1);
    } else {
      if (nv == 4) GT__BACC_ROWS(4, 0);
      else if (nv == 3) GT__BACC_ROWS(3, 0);
      else if (nv == 2) GT__BACC_ROWS(2, 0);
      else GT__BACC_ROWS(1, 0);
    }
  }
}

GT__TARGET_END
#endif /* GT__HAND */

/* Per-thread scratch: score and dP tiles, the packed K^T / V^T tiles, and
 * per-row softmax state for every query head of one GQA group. */
typedef struct gt__scratch {
  float S[GT__BQ * GT__BK], dP[GT__BQ * GT__BK];
  float *kt, *vt;   /* [hd][GT__BK] each */
  float *m, *l; /* [group][GT__BQ] each */
  /* bf16 mode (bmode 2: vdpbf16ps, 1: its FMA emulation, 0: float32), pairs
   * of kp = (hd + 1) / 2 and hd16 = hd rounded up to 16:
   * bk, bv: K and V as "B^T" [kp][GT__BK]; by: V (forward) or K (dQ) as "Y"
   * [GT__BK / 2][hd16]; qa, doa: Q and dO as "A" rows [group][GT__BQ][kp];
   * qy, doy: Q and dO as "Y" [GT__BQ / 2][hd16]; px: P or dS (or their
   * transposes) [GT__BQ * GT__BK / 2]; tmp: [GT__BK][kp]. */
  int bmode;
  uint32_t *bk, *bv, *by, *qa, *doa, *qy, *doy, *px, *tmp;
  /* widened mode (bmode 3): float32 copies of the operands that are not
   * bf16 values, rounded: dow: dO [GT__BQ][hd]; pw: P [GT__BQ][GT__BK] */
  float *dow, *pw;
} gt__scratch;

static gt__scratch *gt__scratch_new(int hd, int group, int bmode) {
  const size_t nfl = 2 * (size_t)hd * GT__BK + 2 * (size_t)group * GT__BQ;
  const size_t kp = (size_t)(hd + 1) / 2, hd16 = (size_t)(hd + 15) / 16 * 16;
  const size_t npx = gt__imax(GT__BQ * (GT__BK / 2), (GT__BQ + 1) / 2 * GT__BK);
  const size_t nbf = bmode == 1 || bmode == 2 ? 3 * kp * GT__BK + GT__BK / 2 * hd16 +
                                                   2 * (size_t)group * GT__BQ * kp +
                                                   2 * (size_t)(GT__BQ + 1) / 2 * hd16 + npx
                                             : 0;
  const size_t nwd = bmode == 3 ? (size_t)GT__BQ * hd + (size_t)GT__BQ * GT__BK : 0;
  gt__scratch *w = malloc(sizeof(*w) + nfl * sizeof(float) + nbf * sizeof(uint32_t) + nwd * sizeof(float) + 64);
  if (!w) return NULL;
  w->kt = (float *)(w + 1);
  w->vt = w->kt + (size_t)hd * GT__BK;
  w->m = w->vt + (size_t)hd * GT__BK;
  w->l = w->m + (size_t)group * GT__BQ;
  w->bmode = bmode;
  w->bk = w->bv = w->by = w->qa = w->doa = w->qy = w->doy = w->px = w->tmp = NULL;
  w->dow = w->pw = NULL;
  if (bmode == 3) {
    w->dow = w->l + (size_t)group * GT__BQ;
    w->pw = w->dow + (size_t)GT__BQ * hd;
  } else if (bmode) {
    /* (64-byte aligned: the packed rows are read with full-vector loads) */
    uintptr_t a = (uintptr_t)(w->l + (size_t)group * GT__BQ);
    w->bk = (uint32_t *)((a + 63) & ~(uintptr_t)63);
    w->bv = w->bk + kp * GT__BK;
    w->tmp = w->bv + kp * GT__BK;
    w->by = w->tmp + kp * GT__BK;
    w->qa = w->by + GT__BK / 2 * hd16;
    w->doa = w->qa + (size_t)group * GT__BQ * kp;
    w->qy = w->doa + (size_t)group * GT__BQ * kp;
    w->doy = w->qy + (size_t)(GT__BQ + 1) / 2 * hd16;
    w->px = w->doy + (size_t)(GT__BQ + 1) / 2 * hd16;
  }
  return w;
}

/* The product kernel of bf16 mode, the arithmetic gt_bgemm runs: where it
 * takes vdpbf16ps (or its emulation: gt__bgemm_force_fallback, or a CPU
 * without AVX512_BF16 forced onto the pairs path), the pairs, on
 * vdpbf16ps (2) or its emulation (1, the same bits); on every other path
 * (widened, AMX) the float32 tile products on operands rounded to bf16 (3,
 * widened mode), as gt_bgemm's widened path does, at float32's speed: on
 * the Intel Xeon with AMX the 12-layer model's bf16 attention ran about 30%
 * slower than float32 on the emulation (trace), 9% after. The AVX2 copy,
 * whose gt_bgemm has no pairs, always takes the widened mode; the
 * portable copy none (float32 products). */
static int gt__attn_bmode(const gt_attn_dims *d) {
  if (!d->bf16) return 0;
#ifdef GT__HAND
  const int path = gt__bgemm_path();
  if (path == GT_BGEMM_DP || path == GT_BGEMM_EMUL) return gt__bgemm_kernel() == 2 && path == GT_BGEMM_DP ? 2 : 1;
  return 3;
#elif defined(GT__HAND8)
  return 3; /* the AVX2 copy's gt_bgemm is widened (or its rounded copies: the same arithmetic) */
#else
  return 0; /* the portable copy: float32 products (kernels.h) */
#endif
}

/* Called by every member of the team at the start of the run: its scratch,
 * and (*team_ok, after a barrier) whether EVERY member got one. The work
 * loops share counters and barriers that all members must meet or all
 * skip, so the decision has to be the same on every member. */
static gt__scratch *gt__team_scratch(int hd, int group, int bmode, _Atomic int *nomem, int *team_ok) {
  gt__scratch *w = gt__scratch_new(hd, group, bmode);
  if (!w) atomic_store(nomem, 1);
  gt_team_barrier();
  *team_ok = !atomic_load(nomem);
  return w;
}

/* ---------------------------------------------------------------- forward */

/* Query rows [i0, i0 + BQ) of every head of kv group kh: the heads share
 * each packed key tile. */
static void gt__fwd_qtile(float *out, float *lse, const float *q, const float *k,
                          const float *v, const int32_t *seg, const gt_attn_dims *d,
                          int b, int kh, int i0, gt__scratch *w) {
  const int T = d->T, H = d->H, K = d->K, hd = d->hd, W = d->window;
  const int group = H / K;
  const int nq = gt__imin(GT__BQ, T - i0);
  const int ldq = H * hd, ldk = K * hd;
  const int32_t *seg_b = seg ? seg + (size_t)b * T : NULL;
  const size_t qoff = (((size_t)b * T + i0) * H + (size_t)kh * group) * hd;
  const float *kb = k + ((size_t)b * T * K + kh) * hd;
  const float *vb = v + ((size_t)b * T * K + kh) * hd;
  float *S = w->S;
  const int bm = w->bmode, kp = (hd + 1) / 2, hd16 = (hd + 15) / 16 * 16;
  (void)bm, (void)kp, (void)hd16;
#ifdef GT__HAND
  if (bm == 1 || bm == 2)
    for (int g = 0; g < group; g++)
      gt__bpack_rows(w->qa + (size_t)g * GT__BQ * kp, kp, q + qoff + (size_t)g * hd, ldq, nq, hd);
#endif

  for (int g = 0; g < group; g++)
    for (int r = 0; r < nq; r++) {
      memset(out + qoff + (size_t)r * ldq + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
      w->m[g * GT__BQ + r] = -INFINITY;
      w->l[g * GT__BQ + r] = 0.0f;
    }
  const int jlo = W > 0 ? gt__imax(0, i0 - W + 1) : 0;
  const int jend = i0 + nq;
  for (int j0 = jlo; j0 < jend; j0 += GT__BK) {
    const int nk = gt__imin(GT__BK, jend - j0);
    if (seg_b && gt__seg_disjoint(seg_b, i0, nq, j0, nk)) continue;
    const float *kj = kb + (size_t)j0 * ldk;
    int blo, bhi;
    gt__band_qk(i0, j0, W, &blo, &bhi);
    /* (widened mode: Q, K and V hold bf16 values, read as they are) */
    const float *vj = vb + (size_t)j0 * ldk;
#ifdef GT__HAND
    if (bm == 1 || bm == 2) {
      gt__bpack_nt(w->bk, w->tmp, kj, ldk, nk, hd);
      gt__bpack_y(w->by, hd16, vj, ldk, nk, hd);
    } else
#endif
      gt__pack_t(w->kt, kj, ldk, nk, hd);
    for (int g = 0; g < group; g++) {
      const float *qt = q + qoff + (size_t)g * hd;
      float *ot = out + qoff + (size_t)g * hd;
      float *m = w->m + g * GT__BQ, *l = w->l + g * GT__BQ;
#ifdef GT__HAND
      if (bm == 1 || bm == 2)
        gt__bmm_nt(S, d->scale, w->qa + (size_t)g * GT__BQ * kp, kp, nq, w->bk, kp, bm == 2);
      else
#endif
        gt__mm_nt(S, d->scale, qt, ldq, nq, kj, ldk, w->kt, nk, hd, blo, bhi);
      for (int r = 0; r < nq; r++) {
        float *s = S + (size_t)r * GT__BK;
        if (gt__mask_row(s, nk, i0 + r, j0, W, seg_b) == 0) {
          /* Zero, not exp(-inf): P.V below must add nothing for this row. */
          memset(s, 0, (size_t)nk * sizeof(float));
          continue;
        }
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < nk; c++) mx = s[c] > mx ? s[c] : mx;
        const float mnew = mx > m[r] ? mx : m[r];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < nk; c++) {
          s[c] = gt__expf(s[c] - mnew);
          sum += s[c];
        }
        if (mnew != m[r]) {
          /* m[r] == -inf on the row's first visible tile: alpha is 0 and the
           * accumulator is still zero, so the rescale can be skipped. */
          if (m[r] != -INFINITY) {
            const float alpha = gt__expf(m[r] - mnew);
            float *o = ot + (size_t)r * ldq;
#pragma omp simd
            for (int c = 0; c < hd; c++) o[c] *= alpha;
            l[r] *= alpha;
          }
          m[r] = mnew;
        }
        l[r] += sum;
      }
#ifdef GT__HAND
      if (bm == 1 || bm == 2) {
        gt__bpack_rows(w->px, GT__BK / 2, S, GT__BK, nq, nk);
        gt__bmm_acc(ot, ldq, 1.0f, w->px, GT__BK / 2, 1, nq, (nk + 1) / 2, w->by, hd16, hd, bm == 2);
      } else
#endif
      {
#if defined(GT__HAND) || defined(GT__HAND8)
        /* P in bf16 for its product with V, after the row sums took it
         * unrounded (as the pairs' packing does) */
        if (bm == 3) gt_bf16_round_rows(S, GT__BK, S, GT__BK, nq, nk);
#endif
        gt__mm_acc(ot, ldq, 1.0f, S, GT__BK, 1, nq, nk, vj, ldk, hd, blo, bhi);
      }
    }
  }
  for (int g = 0; g < group; g++) {
    float *lse_t = lse + ((size_t)b * H + (size_t)kh * group + g) * T + i0;
    for (int r = 0; r < nq; r++) {
      const float L = w->l[g * GT__BQ + r];
      const float inv = 1.0f / L;
      float *o = out + qoff + (size_t)r * ldq + (size_t)g * hd;
      if (d->round_out) {
#pragma omp simd
        for (int c = 0; c < hd; c++) o[c] = gt__bf16_round1_nb(o[c] * inv);
      } else {
#pragma omp simd
        for (int c = 0; c < hd; c++) o[c] *= inv;
      }
      if (d->out16) gt__bf16_pack_row(d->out16 + qoff + (size_t)r * ldq + (size_t)g * hd, o, hd);
      lse_t[r] = w->m[g * GT__BQ + r] + logf(L);
    }
  }
}

typedef struct gt__attn_fwd_job {
  float *out, *lse;
  const float *q, *k, *v;
  const int32_t *seg;
  const gt_attn_dims *d;
  int nqt, bm;
  int64_t nitems;
  _Atomic int nomem;
  gt_team_counter next;
} gt__attn_fwd_job;

static void gt__attn_fwd_member(void *arg, int tid, int nth) {
  gt__attn_fwd_job *j = arg;
  const gt_attn_dims *d = j->d;
  const int K = d->K, nqt = j->nqt;
  int ok;
  gt__scratch *w = gt__team_scratch(d->hd, d->H / K, j->bm, &j->nomem, &ok);
  /* Every member has the same ok. With it the items run exactly as they
   * did before the check existed, so the bits do not change. */
  if (ok) {
    /* One query tile an item, the last (the longest: under the causal
     * mask a query tile meets every key tile up to its own, under a
     * window the same number once past the first few) first, each to
     * the member free first. Items write disjoint rows, so the schedule
     * changes no bits. (Pairing tile t with tile n-1-t on a static
     * schedule balanced causal layers but not windowed ones: at T 1024,
     * W 512 one of 2 threads had 46 and the other 62 key tiles.) */
    for (int64_t it; (it = gt_team_take(&j->next, 0)) < j->nitems;) {
      const int t = nqt - 1 - (int)(it % nqt);
      const int kh = (int)((it / nqt) % K);
      const int b = (int)(it / ((int64_t)nqt * K));
      gt__fwd_qtile(j->out, j->lse, j->q, j->k, j->v, j->seg, d, b, kh, t * GT__BQ, w);
    }
  }
  free(w);
}

int gt_attention_forward(float *out, float *lse, const float *q, const float *k,
                         const float *v, const int32_t *seg, const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K;
  if (B <= 0 || T <= 0 || H <= 0) return 0;
  const int nqt = (T + GT__BQ - 1) / GT__BQ;
  gt__attn_fwd_job j = {out, lse, q, k, v, seg, d, nqt, gt__attn_bmode(d), (int64_t)B * K * nqt, 0, {0}};
  gt_team_par(1, gt__attn_fwd_member, &j);
  return atomic_load(&j.nomem) ? -1 : 0;
}

/* --------------------------------------------------------------- backward */

/* P = exp(S - lse) on visible entries, 0 elsewhere; S holds the scaled scores
 * on entry. Returns 0 when the whole tile is masked. */
static int gt__probs(float *S, int nq, int nk, int i0, int j0, const float *lse_t,
                     int window, const int32_t *seg_b) {
  int any = 0;
  for (int r = 0; r < nq; r++) {
    float *s = S + (size_t)r * GT__BK;
    if (gt__mask_row(s, nk, i0 + r, j0, window, seg_b) == 0) {
      memset(s, 0, (size_t)nk * sizeof(float));
      continue;
    }
    any = 1;
    const float L = lse_t[r];
#pragma omp simd
    for (int c = 0; c < nk; c++) s[c] = gt__expf(s[c] - L);
  }
  return any;
}

/* dS = P * (dP - D) in place in dP. Masked entries come out as exact zeros
 * whatever dP holds there. */
static void gt__dscores(float *dP, const float *P, int nq, int nk, const float *D) {
  for (int r = 0; r < nq; r++) {
    float *dp = dP + (size_t)r * GT__BK;
    const float *p = P + (size_t)r * GT__BK;
    const float Dr = D[r];
#pragma omp simd
    for (int c = 0; c < nk; c++) dp[c] = p[c] == 0.0f ? 0.0f : p[c] * (dp[c] - Dr);
  }
}

static void gt__rowdot(float *D, const float *a, const float *b, int n, int ld, int hd) {
  for (int r = 0; r < n; r++) {
    const float *x = a + (size_t)r * ld, *y = b + (size_t)r * ld;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < hd; c++) s += x[c] * y[c];
    D[r] = s;
  }
}

/* One row's sum of x[c] y[c]: one compiled copy, which D's rows from out
 * and from its widened bf16 copy both call, so that they add in one order
 * (gt__rowdot's, whose vectorized form gives the bits D always had). */
static __attribute__((noinline)) float gt__rowdot1(const float *x, const float *y, int hd) {
  float s;
  gt__rowdot(&s, x, y, 1, 0, hd);
  return s;
}

/* D's row: rowsum(dO * O) with O from out or, kept in bf16, out16 */
static float gt__drow(const float *dor, const float *o, const uint16_t *o16, int hd) {
  if (o) return gt__rowdot1(dor, o, hd);
  if (hd <= GT_ATTN_OUT16_HD_MAX) {
    float row[GT_ATTN_OUT16_HD_MAX];
    gt__bf16_widen_row(row, o16, hd);
    return gt__rowdot1(dor, row, hd);
  }
  float s = 0.0f; /* wider than the stack row: the bits read in the loop */
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < hd; c++) s += dor[c] * gt_bf16_to_f32(o16[c]);
  return s;
}

typedef struct gt__bwd_args {
  float *dq, *dk, *dv;
  const float *dout, *out, *lse, *q, *k, *v;
  const float *D; /* [B, H, T]: rowsum(dO * O) of every query row */
  const int32_t *seg;
  const gt_attn_dims *d;
  /* The key tiles of one (b, kv head) in np contiguous parts: part p owns key
   * tiles [ks[p], ks[p + 1]) and the query tiles with the same indices. */
  int np;
  const int *ks;
  /* dQ of rows part p does not own, [B * K][rows][group * hd]: part p's
   * rows are [ks[p + 1] * BQ, pend[p]), at poff[p] in each (b, kv head)'s
   * block of pstride floats */
  float *part;
  const int *pend;
  const size_t *poff;
  size_t pstride;
} gt__bwd_args;

/* Query rows key tile j0 (nk keys) is visible from, [j0, end): the causal
 * mask starts them at j0, the window ends them at the last key + W. */
static int gt__bwd_iend(int T, int W, int j0, int nk) {
  return W > 0 ? gt__imin(T, j0 + nk - 1 + W) : T;
}

/* One part of the backward of kv head kh of batch row b, in one pass
 * (FlashAttention-2 style): for each of its key tiles and each query tile
 * that can see it, P and dS are formed once, and dV, dK of the key tile and
 * dQ of the query tile are all accumulated from them. The part owns dK and
 * dV of its key tiles and dQ of its query tiles, which it adds into
 * directly; its dQ terms for later query tiles (owned by later parts) go to
 * its own partial buffer, which gt_attention_backward adds after every part
 * has finished. Every sum runs in an order fixed by the shape alone. */
static void gt__bwd_part(const gt__bwd_args *a, int b, int kh, int p, gt__scratch *w) {
  const gt_attn_dims *d = a->d;
  const int T = d->T, H = d->H, K = d->K, hd = d->hd, W = d->window;
  const int group = H / K;
  const int ldq = H * hd, ldk = K * hd, ldp = group * hd;
  const int32_t *seg_b = a->seg ? a->seg + (size_t)b * T : NULL;
  const int own_end = gt__imin(T, a->ks[p + 1] * GT__BK); /* first query row not owned */
  float *part = a->dq && p + 1 < a->np
                    ? a->part + (size_t)(b * K + kh) * a->pstride + a->poff[p]
                    : NULL;
  if (part) memset(part, 0, (size_t)(a->pend[p] - own_end) * ldp * sizeof(float));
  float *S = w->S, *dP = w->dP;
  const int bm = w->bmode, kp = (hd + 1) / 2, hd16 = (hd + 15) / 16 * 16;
  (void)bm, (void)kp, (void)hd16;
  for (int kt_i = a->ks[p]; kt_i < a->ks[p + 1]; kt_i++) {
    const int j0 = kt_i * GT__BK;
    const int nk = gt__imin(GT__BK, T - j0);
    const size_t koff = (((size_t)b * T + j0) * K + kh) * hd;
    const float *kt = a->k + koff, *vt = a->v + koff;
    const int need_dp = a->dk || a->dq;
    /* (widened mode: Q, K and V hold bf16 values, read as they are) */
#ifdef GT__HAND
    if (bm == 1 || bm == 2) {
      gt__bpack_nt(w->bk, w->tmp, kt, ldk, nk, hd);
      if (need_dp) gt__bpack_nt(w->bv, w->tmp, vt, ldk, nk, hd);
      if (a->dq) gt__bpack_y(w->by, hd16, kt, ldk, nk, hd);
    } else
#endif
    {
      gt__pack_t(w->kt, kt, ldk, nk, hd);
      if (need_dp) gt__pack_t(w->vt, vt, ldk, nk, hd);
    }
    const int iend = gt__bwd_iend(T, W, j0, nk);
    for (int h = kh * group; h < (kh + 1) * group; h++) {
      const float *lse_bh = a->lse + ((size_t)b * H + h) * T, *D_bh = a->D + ((size_t)b * H + h) * T;
      for (int i0 = j0; i0 < iend; i0 += GT__BQ) {
        const int nq = gt__imin(GT__BQ, iend - i0);
        if (seg_b && gt__seg_disjoint(seg_b, i0, nq, j0, nk)) continue;
        const size_t qoff = (((size_t)b * T + i0) * H + h) * hd;
        const float *qt = a->q + qoff, *dot = a->dout + qoff;
        /* dQ rows of this query tile: in place when the part owns them */
        float *dqt = NULL;
        int lddq = ldq;
        if (a->dq) {
          if (i0 < own_end) dqt = a->dq + qoff;
          else dqt = part + (size_t)(i0 - own_end) * ldp + (size_t)(h - kh * group) * hd, lddq = ldp;
        }
#ifdef GT__HAND
        if (bm == 1 || bm == 2) {
          const int dp = bm == 2, nqp = (nq + 1) / 2;
          gt__bpack_rows(w->qa, kp, qt, ldq, nq, hd);
          gt__bmm_nt(S, d->scale, w->qa, kp, nq, w->bk, kp, dp);
          if (!gt__probs(S, nq, nk, i0, j0, lse_bh + i0, W, seg_b)) continue;
          if (a->dv) {
            gt__bpack_y(w->doy, hd16, dot, ldq, nq, hd);
            gt__bpack_y(w->px, GT__BK, S, GT__BK, nq, nk);
            gt__bmm_acc(a->dv + koff, ldk, 1.0f, w->px, 1, GT__BK, nk, nqp, w->doy, hd16, hd, dp);
          }
          if (need_dp) {
            gt__bpack_rows(w->doa, kp, dot, ldq, nq, hd);
            gt__bmm_nt(dP, 1.0f, w->doa, kp, nq, w->bv, kp, dp);
            gt__dscores(dP, S, nq, nk, D_bh + i0);
          }
          if (a->dk) {
            gt__bpack_y(w->qy, hd16, qt, ldq, nq, hd);
            gt__bpack_y(w->px, GT__BK, dP, GT__BK, nq, nk);
            gt__bmm_acc(a->dk + koff, ldk, d->scale, w->px, 1, GT__BK, nk, nqp, w->qy, hd16, hd, dp);
          }
          if (dqt) {
            gt__bpack_rows(w->px, GT__BK / 2, dP, GT__BK, nq, nk);
            gt__bmm_acc(dqt, lddq, d->scale, w->px, GT__BK / 2, 1, nq, (nk + 1) / 2, w->by, hd16, hd, dp);
          }
          continue;
        }
#endif
        int qlo, qhi, klo, khi;
        gt__band_qk(i0, j0, W, &qlo, &qhi);
        gt__band_kq(i0, j0, W, &klo, &khi);
        /* the operands as the products read them: in widened mode dO and P
         * rounded to bf16 (dS below too), where the pairs round them as
         * they pack them (Q, K and V are bf16 values already) */
        const float *dor = dot, *pr = S;
        int lddor = ldq;
#if defined(GT__HAND) || defined(GT__HAND8)
        if (bm == 3 && (a->dv || need_dp)) gt_bf16_round_rows(w->dow, hd, dot, ldq, nq, hd), dor = w->dow, lddor = hd;
#endif
        gt__mm_nt(S, d->scale, qt, ldq, nq, kt, ldk, w->kt, nk, hd, qlo, qhi);
        if (!gt__probs(S, nq, nk, i0, j0, lse_bh + i0, W, seg_b)) continue;
#if defined(GT__HAND) || defined(GT__HAND8)
        /* dS takes P unrounded (S); dV's product the rounded copy */
        if (bm == 3 && a->dv) gt_bf16_round_rows(w->pw, GT__BK, S, GT__BK, nq, nk), pr = w->pw;
#endif
        if (a->dv) gt__mm_acc(a->dv + koff, ldk, 1.0f, pr, 1, GT__BK, nk, nq, dor, lddor, hd, klo, khi);
        if (need_dp) {
          gt__mm_nt(dP, 1.0f, dor, lddor, nq, vt, ldk, w->vt, nk, hd, qlo, qhi);
          gt__dscores(dP, S, nq, nk, D_bh + i0);
#if defined(GT__HAND) || defined(GT__HAND8)
          if (bm == 3) gt_bf16_round_rows(dP, GT__BK, dP, GT__BK, nq, nk);
#endif
        }
        if (a->dk) gt__mm_acc(a->dk + koff, ldk, d->scale, dP, 1, GT__BK, nk, nq, qt, ldq, hd, klo, khi);
        if (dqt) gt__mm_acc(dqt, lddq, d->scale, dP, GT__BK, 1, nq, nk, kt, ldk, hd, qlo, qhi);
      }
    }
  }
}

/* Adds into dQ of query tile qt_i of (b, kh) the partial sums of the parts
 * before its owner, in part order. */
static void gt__bwd_reduce(const gt__bwd_args *a, int b, int kh, int qt_i) {
  const gt_attn_dims *d = a->d;
  const int T = d->T, H = d->H, K = d->K, hd = d->hd;
  const int group = H / K, ldp = group * hd;
  const int r0 = qt_i * GT__BQ, r1 = gt__imin(T, r0 + GT__BQ);
  for (int p = 0; p + 1 < a->np && a->ks[p + 1] <= qt_i; p++) {
    const int base = a->ks[p + 1] * GT__BK;
    const float *part = a->part + (size_t)(b * K + kh) * a->pstride + a->poff[p];
    for (int r = r0; r < gt__imin(r1, a->pend[p]); r++) {
      float *o = a->dq + (((size_t)b * T + r) * H + (size_t)kh * group) * hd;
      const float *x = part + (size_t)(r - base) * ldp;
#pragma omp simd
      for (int c = 0; c < ldp; c++) o[c] += x[c];
    }
  }
}

/* The parts of one (b, kv head): how many, and where they split the key
 * tiles. Fixed by the shape alone (never by the thread count, which would
 * change the partial sums of dQ): B * K * np work items, at least
 * GT__BWD_ITEMS when there are enough key tiles. More parts cost partial
 * buffers of dQ (for a global layer about half of the (b, kv head)'s dQ
 * with two parts, about 2 with four) and their sum.
 *
 * The items run longest first on a dynamic schedule (gt_attention_backward),
 * so where the cuts go decides how evenly 2 or 3 threads finish: with one
 * (b, kv head) of 8 global key tiles, four parts of equal work would leave
 * 3 threads one part too many, and the tile-sized steps of the cumulative
 * work rarely fall on a quarter anyway (cutting at the first tile that
 * reached it gave gemma3-270m at B = 1 parts of 15, 6, 9 and 6 tile pairs,
 * 21 : 15 on 2 threads). So the cuts are searched: each candidate's parts
 * are scheduled as the dynamic schedule would run them (the B * K copies of
 * every part, longest first, each to the thread that is free first) on 2
 * and on 3 threads under a cost model of the tiles, and the split with the
 * least 2 * (2-thread time) + (3-thread time) wins (2 threads, this
 * machine's cores, counting double), with a small charge for the partial
 * buffers' size (gt__bwd_score), ties going to the earlier candidate. All
 * in integers: the same split on every machine. */
#define GT__BWD_ITEMS 4
#define GT__BWD_MAXP 4

/* Cost of key tile j in the cost model: per (query tile, key tile) pair it
 * meets, a fixed part (the score tile's exponentials and the packing and
 * loop overheads; bf16 products do not skip masked vectors, so for them the
 * fixed part is most of a tile) plus the (query, key) entries the causal
 * mask and the window leave visible. Fitted to the 1-thread times of each
 * key tile's part (gemma3-270m and the 12-layer model, global and local,
 * float32 and bf16): within 10% of every tile. */
static int64_t gt__bwd_tcost(int T, int W, int bf, int j) {
  const int j0 = j * GT__BK, nk = gt__imin(GT__BK, T - j0);
  const int64_t npairs = (gt__bwd_iend(T, W, j0, nk) - j0 + GT__BQ - 1) / GT__BQ;
  int64_t vis = 0; /* key j0 + c is seen by queries [j0 + c, min(T, j0 + c + W)) */
  for (int c = 0; c < nk; c++) vis += (W > 0 ? gt__imin(T, j0 + c + W) : T) - (j0 + c);
  return npairs * (bf ? 3 * GT__BQ * GT__BK / 2 : GT__BQ * GT__BK / 4) + vis;
}

/* order[r]: the part run r-th, longest first (ties: the lower part). */
static void gt__bwd_order(const int64_t *pc, int np, int *order) {
  for (int p = 0; p < np; p++) {
    int r = p;
    while (r > 0 && pc[order[r - 1]] < pc[p]) order[r] = order[r - 1], r--;
    order[r] = p;
  }
}
/* The time of the dynamic schedule on nt <= 3 threads: n copies of each of
 * the np parts' costs pc, longest first, each item to the thread with the
 * least work so far (ties: the lower thread). */
static int64_t gt__bwd_sched(const int64_t *pc, int np, int64_t n, int nt) {
  int order[GT__BWD_MAXP];
  gt__bwd_order(pc, np, order);
  int64_t th[3] = {0, 0, 0};
  for (int r = 0; r < np; r++)
    for (int64_t c = 0; c < n; c++) {
      int m = 0;
      for (int t = 1; t < nt; t++) m = th[t] < th[m] ? t : m;
      th[m] += pc[order[r]];
    }
  int64_t mx = 0;
  for (int t = 0; t < nt; t++) mx = th[t] > mx ? th[t] : mx;
  return mx;
}

/* Score of the cuts ks[1..np-1] (lower is better; cum[j] is the cost of key
 * tiles [0, j)): 2 * (2-thread time) + (3-thread time), each relative to
 * its ideal (total / threads) by scaling with the thread count, which is
 * 3 * total * n at best; plus 1% of that for every dQ-sized partial buffer
 * (nkt tiles after the cuts; writing, reading and adding them back takes
 * about that share of a 270m backward), which steers ties and near-ties to
 * later cuts. (In int64 up to T of about a million.) */
static int64_t gt__bwd_score(const int64_t *cum, const int *ks, int np, int64_t n, int nkt) {
  int64_t pc[GT__BWD_MAXP], m = 0;
  for (int p = 0; p < np; p++) pc[p] = cum[ks[p + 1]] - cum[ks[p]];
  for (int p = 1; p < np; p++) m += nkt - ks[p];
  const int64_t t = 4 * gt__bwd_sched(pc, np, n, 2) + 3 * gt__bwd_sched(pc, np, n, 3);
  return t * nkt + 3 * cum[nkt] * n / 100 * m;
}

/* Returns np (order[r]: the part run r-th, longest first by the model), or
 * -1 when out of memory. bf: the bf16 pairs (gt__attn_bmode 1 or 2). */
static int gt__bwd_split(int B, int K, int T, int W, int bf, int ks[GT__BWD_MAXP + 1],
                         int order[GT__BWD_MAXP]) {
  const int nkt = (T + GT__BK - 1) / GT__BK;
  int np = 1;
  /* (an odd count of items below 8 is split in two too: one whole item more
   * on one of two threads is a third or more of the time) */
  const int64_t n = (int64_t)B * K;
  while ((n * np < GT__BWD_ITEMS || (n * np % 2 && n * np < 8)) && np * 2 <= GT__BWD_MAXP &&
         np * 2 <= nkt)
    np *= 2;
  ks[0] = 0, ks[np] = nkt, order[0] = 0;
  if (np == 1) return 1;
  int64_t *cum = malloc(((size_t)nkt + 1) * sizeof(int64_t));
  if (!cum) return -1;
  cum[0] = 0;
  for (int j = 0; j < nkt; j++) cum[j + 1] = cum[j] + gt__bwd_tcost(T, W, bf, j);
  /* Every combination of cuts on a grid of step g: every tile up to 48 key
   * tiles, at most 48 grid points beyond (about 17000 candidates, well
   * under a millisecond; a backward of that many tiles takes seconds). */
  const int g = (nkt + 47) / 48;
  int c[GT__BWD_MAXP + 1], best[GT__BWD_MAXP + 1];
  int64_t bs = INT64_MAX;
  c[0] = 0, c[np] = nkt;
  for (int p = 1; p < np; p++) c[p] = p * g;
  for (;;) {
    const int64_t s = gt__bwd_score(cum, c, np, n, nkt);
    if (s < bs) {
      bs = s;
      memcpy(best, c, sizeof c);
    }
    /* next combination 0 < c[1] < ... < c[np - 1] < nkt on the grid */
    int p = np - 1;
    while (p >= 1 && c[p] + g * (np - p) >= nkt) p--;
    if (p < 1) break;
    c[p] += g;
    for (int q = p + 1; q < np; q++) c[q] = c[q - 1] + g;
  }
  /* then every combination of the cuts within two steps of h of the best,
   * h halving down to one tile, and at one tile again while that improves */
  for (int h = g, moved = g > 1; h > 1 || moved;) {
    h = (h + 1) / 2;
    moved = 0;
    int base[GT__BWD_MAXP + 1], k[GT__BWD_MAXP + 1];
    memcpy(base, best, sizeof base);
    for (int p = 1; p < np; p++) k[p] = -2;
    for (;;) {
      int t[GT__BWD_MAXP + 1], okc = 1;
      t[0] = 0, t[np] = nkt;
      for (int p = 1; p < np; p++) {
        t[p] = base[p] + k[p] * h;
        okc &= t[p] > t[p - 1] && t[p] < nkt;
      }
      if (okc) {
        const int64_t s = gt__bwd_score(cum, t, np, n, nkt);
        if (s < bs) {
          bs = s, moved = 1;
          memcpy(best, t, sizeof t);
        }
      }
      int p = np - 1;
      while (p >= 1 && k[p] == 2) k[p--] = -2;
      if (p < 1) break;
      k[p]++;
    }
    if (h > 1) moved = 1; /* (keep halving) */
  }
  for (int p = 1; p < np; p++) ks[p] = best[p];
  int64_t pc[GT__BWD_MAXP];
  for (int p = 0; p < np; p++) pc[p] = cum[ks[p + 1]] - cum[ks[p]];
  free(cum);
  gt__bwd_order(pc, np, order);
  return np;
}

typedef struct gt__attn_bwd_job {
  const gt__bwd_args *a;
  float *D; /* a->D, written by the first loop */
  const int *order;
  int nqt, bm;
  int64_t nitems, nred;
  _Atomic int nomem;
  gt_team_counter next;
} gt__attn_bwd_job;

static void gt__attn_bwd_member(void *arg, int tid, int nth) {
  gt__attn_bwd_job *j = arg;
  const gt__bwd_args *a = j->a;
  const gt_attn_dims *d = a->d;
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd, nqt = j->nqt;
  int ok;
  gt__scratch *w = gt__team_scratch(hd, H / K, j->bm, &j->nomem, &ok);
  if (ok) { /* the same on every member, as in the forward */
    int64_t lo, hi;
    gt_team_split((int64_t)B * T, tid, nth, &lo, &hi);
    for (int64_t bt = lo; bt < hi; bt++) {
      const int64_t b = bt / T, t = bt % T;
      for (int h = 0; h < H; h++) {
        const size_t o = ((size_t)bt * H + h) * hd;
        j->D[((size_t)b * H + h) * T + t] =
            gt__drow(a->dout + o, a->out ? a->out + o : NULL, a->out ? NULL : d->out16 + o, hd);
      }
    }
    gt_team_barrier();
    /* Longest parts first, each to the member free first: a part's
     * results do not depend on the member that runs it (its partial dQ
     * is added in part order below), so the schedule may follow the
     * timing. */
    for (int64_t it; (it = gt_team_take(&j->next, 0)) < j->nitems;) {
      const int p = j->order[it / ((int64_t)B * K)];
      const int kh = (int)(it % K);
      const int b = (int)((it / K) % B);
      gt__bwd_part(a, b, kh, p, w);
    }
    gt_team_barrier();
    gt_team_split(j->nred, tid, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
      const int t = (int)(it % nqt);
      const int kh = (int)((it / nqt) % K);
      const int b = (int)(it / ((int64_t)nqt * K));
      gt__bwd_reduce(a, b, kh, t);
    }
  }
  free(w);
}

int gt_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                          const float *out, const float *lse, const float *q,
                          const float *k, const float *v, const int32_t *seg,
                          const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd;
  if (B <= 0 || T <= 0 || H <= 0) return 0;
  if (!dq && !dk && !dv) return 0;
  if (!out && !d->out16) return -1; /* no O for D (kernels.h) */
  const int group = H / K;
  int ks[GT__BWD_MAXP + 1], order[GT__BWD_MAXP], pend[GT__BWD_MAXP];
  size_t poff[GT__BWD_MAXP];
  const int bm = gt__attn_bmode(d);
  /* the pairs do not skip masked vectors; the widened mode's float32
   * products do (gt__bwd_tcost) */
  const int np = gt__bwd_split(B, K, T, d->window, bm == 1 || bm == 2, ks, order);
  if (np < 0) return -1;
  /* partial dQ rows of part p: from its first unowned query row to the last
   * row its last key tile is visible from */
  size_t pstride = 0;
  for (int p = 0; p + 1 < np; p++) {
    const int j0 = (ks[p + 1] - 1) * GT__BK;
    pend[p] = gt__bwd_iend(T, d->window, j0, gt__imin(GT__BK, T - j0));
    poff[p] = pstride;
    pstride += (size_t)(pend[p] - ks[p + 1] * GT__BK) * group * hd;
  }
  if (!dq) pstride = 0;
  /* D = rowsum(dO * O) depends on the query row alone: computed once for
   * every row here, not again for every key tile the row meets (that took
   * 8% of a bf16 backward) */
  float *D = malloc(((size_t)B * H * T + (size_t)B * K * pstride) * sizeof(float));
  if (!D) return -1;
  gt__bwd_args a = {dq, dk, dv, dout, out, lse, q, k, v, D, seg, d,
                    np, ks, D + (size_t)B * H * T, pend, poff, pstride};
  const int nqt = (T + GT__BQ - 1) / GT__BQ;
  gt__attn_bwd_job j = {&a, D, order, nqt, bm, (int64_t)B * K * np,
                        dq && np > 1 ? (int64_t)B * K * nqt : 0, 0, {0}};
  gt_team_par(1, gt__attn_bwd_member, &j);
  free(D);
  return atomic_load(&j.nomem) ? -1 : 0;
}
