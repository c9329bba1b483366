/* The packed float32 GEMM on AVX2 and FMA (kernels/gemm_avx2.h).
 *
 * Why: without AVX-512, gt_sgemm used to be OpenBLAS cut into fixed blocks
 * (kernels/gemm_fixed.c), each block re-packing the other operand whole;
 * on a Zen 3 (AVX2) that ran the 12-layer model's products at 40-60% of
 * the 2-thread FMA peak where OpenBLAS's own call reached 85-90%, and the
 * bf16 products had to go through rounded float32 copies. This kernel runs
 * through the same loops as the AVX-512 one (gt__gemm_run: shape-fixed K
 * blocks, dynamic tasks, every C tile one task's), so its bits do not
 * depend on the thread count, and its packers can round to bf16 as they
 * pack, as the AVX-512 widened path does.
 *
 * The register tile is 6 x 16 (BLIS's Haswell sgemm tile): 12 accumulators
 * of 8 floats, two B vectors and one broadcast A value, 15 of the 16 YMM
 * registers; 12 independent FMA chains cover two FMA pipes of 4-cycle
 * latency (Zen 2-4, Haswell to Alder Lake). K is cut by the AVX-512
 * kernel's rule (the same kc for the same L2), and each output sums its K
 * block in k order with one FMA per k, folds alpha and beta in the same
 * way: on one machine the two kernels give the same bits
 * (test_kernel_paths), and so do their few-row dot products, whose 16
 * lanes are kept as two vectors of 8 and reduced in _mm512_reduce_add_ps's
 * order. */
#include "kernels/gemm_avx2.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/bf16.h"
#include "kernels/gemm_widen.h"
#include "kernels/quant_gemm.h"
#include "kernels/target.h"

GT__TARGET_BEGIN("avx2,fma")

#include "kernels/lanes8.h"
#include "kernels/quant_lanes8.h"

enum { MR = 6, NR = 16 };
/* gt_sgemm's row-times-B^T products take this many rows and fewer (as the
 * AVX-512 copy's GT__GEMV_ROWS) */
enum { GT__GEMV_ROWS = 4 };

/* ------------------------------------------------------------- blocking */

static gt__gemm_blocks gt__blocks;
static pthread_once_t gt__block_once = PTHREAD_ONCE_INIT;

/* kc: kernels/gemm.c's AVX-512 rule (an A block of 128 rows in half of L2,
 * 128 to 1024), so both kernels cut K alike. At 512 (a 512 KiB L2) the
 * 16-wide B micro-panel is 32 KiB and streams from L2 as A's panels do: a
 * k step needs 88 bytes for 12 FMAs (6 cycles), well within L2's rate.
 * mc: an A block in half of L2; nc: a B block in half of L3, at most 1024
 * columns (as there). */
static void gt__block_init(void) {
  const int64_t l2 = gt__gemm_l2_bytes(), l3 = gt__gemm_l3_bytes();
  const int64_t kc = gt__gmax(128, gt__gmin(1024, l2 / 2 / (128 * 4) / 16 * 16));
  gt__blocks = (gt__gemm_blocks){.mr = MR,
                                 .nr = NR,
                                 .kc_max = kc,
                                 .kalign = 8,
                                 .mc_max = gt__gmax(8 * MR, gt__gmin(4096, l2 / 2 / (kc * 4) / MR * MR)),
                                 .nc_max = gt__gmax(16 * NR, gt__gmin(1024, l3 / 2 / (kc * 4) / NR * NR))};
}

/* ---------------------------------------------------------------- lanes */

/* (the mask, bf16 rounding and widening: kernels/lanes8.h) */
#define GT__PK(rnd, v) ((rnd) ? gt__rnd8(v) : (v))

/* In-register transpose of 8 rows of 8 floats: on return r[c] holds column
 * c (element i from row i). */
static inline __attribute__((always_inline)) void gt__tr8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  /* s[4g + c], 128-bit lane L: rows 4g..4g+3 at column 4L + c */
  for (int g = 0; g < 2; g++) {
    s[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    s[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    s[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    s[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
}

/* rows[0..nrows) of a matrix whose rows run along k: 8 k values each from k
 * (masked to kn), the other rows 0, transposed: r[kk] = column k + kk. The
 * same line of the nnext rows from `next` (packed next) is requested now,
 * a panel ahead: rows of a KB or two are too short for the hardware
 * prefetcher. */
static inline __attribute__((always_inline)) void gt__load_tr(__m256 r[8], const float *src, int64_t ld,
                                                              int64_t nrows, int64_t k, int64_t kn,
                                                              const float *next, int64_t nnext, const int rnd) {
  const __m256i m = gt__mask8(kn);
  if ((k & 15) == 0)
    for (int64_t i = 0; i < nnext; i++) _mm_prefetch((const char *)(next + i * ld + k), _MM_HINT_T0);
  for (int i = 0; i < 8; i++)
    r[i] = i < nrows ? GT__PK(rnd, kn >= 8 ? _mm256_loadu_ps(src + i * ld + k) : _mm256_maskload_ps(src + i * ld + k, m))
                     : _mm256_setzero_ps();
  gt__tr8(r);
}

/* the low 6 floats of v at d (the panel's MR values of one k) */
static inline __attribute__((always_inline)) void gt__store6(float *d, __m256 v) {
  _mm_storeu_ps(d, _mm256_castps256_ps128(v));
  _mm_storel_pi((__m64 *)(void *)(d + 4), _mm256_extractf128_ps(v, 1));
}

/* -------------------------------------------------------------- packing */

/* A block [mc, kc] from (i0, k0) into MR-tall panels: panel p holds rows
 * p*MR.., k-major (MR floats per k), rows past mc zero. */
static inline __attribute__((always_inline)) void gt__pack_a(float *dst, int transA, const float *A, int64_t lda,
                                                             int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                                                             const int rnd) {
  if (transA) {
    /* op(A)(i, k) = A[k][i]: each k's MR values are contiguous. Row by row
     * of A across all the panels (one contiguous run of mc values per row),
     * the row 8 ahead requested meanwhile (as the AVX-512 packer: a stride
     * of lda defeats the hardware prefetcher). */
    for (int64_t k = 0; k < kc; k++) {
      const float *src = A + (k0 + k) * lda + i0;
      if (k + 8 < kc)
        for (int64_t i = 0; i < mc; i += 16) _mm_prefetch((const char *)(src + 8 * lda + i), _MM_HINT_T0);
      for (int64_t p = 0; p < mc; p += MR) {
        const int64_t mr = gt__gmin(MR, mc - p);
        gt__store6(dst + p * kc + k * MR, GT__PK(rnd, _mm256_maskload_ps(src + p, gt__mask8(mr))));
      }
    }
    return;
  }
  /* rows run along k: transpose 8 k at a time (6 rows + 2 zero rows) */
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t mr = gt__gmin(MR, mc - p);
    float *d = dst + p * kc;
    const float *src = A + (i0 + p) * lda;
    const int64_t nnext = gt__gmax(0, gt__gmin(MR, mc - p - MR));
    const float *next = nnext ? src + MR * lda : src;
    for (int64_t k = 0; k < kc; k += 8) {
      __m256 r[8];
      const int64_t kn = gt__gmin(8, kc - k);
      gt__load_tr(r, src, lda, mr, k0 + k, kn, next, nnext, rnd);
      for (int64_t kk = 0; kk < kn; kk++) gt__store6(d + (k + kk) * MR, r[kk]);
    }
  }
}

/* gt__pack_a's panels from A held as bf16 patterns (a16: row stride lda in
 * elements, the pointer handed through as a float one), each widened (a
 * shift: exact), so the panels hold what gt__pack_a rounding the float32 A
 * they came from writes, read at 2 bytes an element. */
static void gt__pack_a16(float *dst, int transA, const uint16_t *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  if (transA) {
    /* each k's values are contiguous: 8 loaded and 6 kept while the 8 lie
     * inside the block, the last panels one by one (the short one's rows
     * zero); the row 8 ahead requested meanwhile */
    for (int64_t k = 0; k < kc; k++) {
      const uint16_t *src = A + (k0 + k) * lda + i0;
      if (k + 8 < kc)
        for (int64_t i = 0; i < mc; i += 32) _mm_prefetch((const char *)(src + 8 * lda + i), _MM_HINT_T0);
      int64_t p = 0;
      for (; p + 8 <= mc; p += MR) gt__store6(dst + p * kc + k * MR, gt__widen8(src + p));
      for (; p < mc; p += MR) {
        const int64_t mr = gt__gmin(MR, mc - p);
        float *d = dst + p * kc + k * MR;
        for (int64_t r = 0; r < MR; r++) d[r] = r < mr ? gt_bf16_to_f32(src[p + r]) : 0.0f;
      }
    }
    return;
  }
  /* rows run along k: 8 k of each row widened, then transposed (a short
   * last step through a zero-padded copy: no load past the row) */
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t mr = gt__gmin(MR, mc - p);
    float *d = dst + p * kc;
    const uint16_t *src = A + (i0 + p) * lda + k0;
    for (int64_t k = 0; k < kc; k += 8) {
      const int64_t kn = gt__gmin(8, kc - k);
      __m256 r[8];
      for (int i = 0; i < 8; i++) {
        if (i >= mr) {
          r[i] = _mm256_setzero_ps();
        } else if (kn == 8) {
          r[i] = gt__widen8(src + i * lda + k);
        } else {
          uint16_t t[8] = {0};
          for (int64_t kk = 0; kk < kn; kk++) t[kk] = src[i * lda + k + kk];
          r[i] = gt__widen8(t);
        }
      }
      gt__tr8(r);
      for (int64_t kk = 0; kk < kn; kk++) gt__store6(d + (k + kk) * MR, r[kk]);
    }
  }
}

/* One NR-wide panel of B: columns j0..j0+nr of op(B) over k0..k0+kc, k-major
 * (NR floats per k, 32-byte aligned), columns past nr zero. */
static inline __attribute__((always_inline)) void gt__pack_b_panel(float *d, int transB, const float *B,
                                                                   int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                                                                   int64_t nr, int64_t nnext, const int rnd) {
  if (!transB) {
    /* rows of B lie ldb apart: ask for the row 8 ahead while this one is
     * copied */
    const __m256i m0 = gt__mask8(nr), m1 = gt__mask8(nr - 8);
    for (int64_t k = 0; k < kc; k++) {
      const float *src = B + (k0 + k) * ldb + j0;
      if (k + 8 < kc) {
        _mm_prefetch((const char *)(src + 8 * ldb), _MM_HINT_T0);
        _mm_prefetch((const char *)(src + 8 * ldb + 15), _MM_HINT_T0);
      }
      if (nr == NR) {
        _mm256_store_ps(d + k * NR, GT__PK(rnd, _mm256_loadu_ps(src)));
        _mm256_store_ps(d + k * NR + 8, GT__PK(rnd, _mm256_loadu_ps(src + 8)));
      } else {
        _mm256_store_ps(d + k * NR, GT__PK(rnd, _mm256_maskload_ps(src, m0)));
        _mm256_store_ps(d + k * NR + 8, GT__PK(rnd, _mm256_maskload_ps(src + 8, m1)));
      }
    }
    return;
  }
  /* op(B)(k, j) = B[j][k]: rows of B run along k; two 8-row transposes */
  const float *src = B + j0 * ldb;
  for (int64_t k = 0; k < kc; k += 8) {
    __m256 r[8], s[8];
    const int64_t kn = gt__gmin(8, kc - k);
    gt__load_tr(r, src, ldb, gt__gmin(8, nr), k0 + k, kn, src + 16 * ldb, gt__gmin(8, nnext), rnd);
    gt__load_tr(s, nr > 8 ? src + 8 * ldb : src, ldb, gt__gmax(0, nr - 8), k0 + k, kn, src + 24 * ldb,
                gt__gmax(0, nnext - 8), rnd);
    for (int64_t kk = 0; kk < kn; kk++) {
      _mm256_store_ps(d + (k + kk) * NR, r[kk]);
      _mm256_store_ps(d + (k + kk) * NR + 8, s[kk]);
    }
  }
}

/* --------------------------------------------------------- micro-kernel */

#define GT__ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define GT__DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();

/* alpha and beta folded in only when they are not 1 (C read only when beta
 * is not 0), as the AVX-512 tile's epilogue (kernels/gemm_tile.h) */
#define GT__STORE(r)                                                                   \
  if (r < mr) {                                                                        \
    float *cr = C + r * ldc;                                                           \
    __m256 x0 = c##r##0, x1 = c##r##1;                                                 \
    if (scale) x0 = _mm256_mul_ps(va, x0), x1 = _mm256_mul_ps(va, x1);                 \
    if (full) {                                                                        \
      if (mode == 1) {                                                                 \
        x0 = _mm256_add_ps(x0, _mm256_loadu_ps(cr));                                   \
        x1 = _mm256_add_ps(x1, _mm256_loadu_ps(cr + 8));                               \
      } else if (mode == 2) {                                                          \
        x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), x0);                             \
        x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), x1);                         \
      }                                                                                \
      _mm256_storeu_ps(cr, x0);                                                        \
      _mm256_storeu_ps(cr + 8, x1);                                                    \
    } else {                                                                           \
      if (mode == 1) {                                                                 \
        x0 = _mm256_add_ps(x0, _mm256_maskload_ps(cr, m0));                            \
        x1 = _mm256_add_ps(x1, _mm256_maskload_ps(cr + 8, m1));                        \
      } else if (mode == 2) {                                                          \
        x0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr, m0), x0);                      \
        x1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8, m1), x1);                  \
      }                                                                                \
      _mm256_maskstore_ps(cr, m0, x0);                                                 \
      _mm256_maskstore_ps(cr + 8, m1, x1);                                             \
    }                                                                                  \
  }

/* C[mr, nr] = alpha * Ap . Bp + beta * C (beta == 0: C is not read).
 * Ap: [kc][MR], Bp: [kc][NR] (32-byte aligned). Cnext's lines (the tile the
 * next call writes) are requested now, a whole k loop ahead. The rows are
 * spelled out so the 12 accumulators stay in registers. */
static void gt__micro(int64_t kc, const float *Ap, const float *Bp, float *C, int64_t ldc, int64_t mr, int64_t nr,
                      float alpha, float beta, const float *Cnext) {
  for (int64_t r = 0; r < MR; r++) {
    _mm_prefetch((const char *)(Cnext + r * ldc), _MM_HINT_ET0);
    _mm_prefetch((const char *)(Cnext + r * ldc + 15), _MM_HINT_ET0);
  }
  GT__ROWS(GT__DECL)
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_load_ps(Bp + k * NR), b1 = _mm256_load_ps(Bp + k * NR + 8);
    const float *a = Ap + k * MR;
#define GT__ROW(r)                               \
  {                                              \
    const __m256 ar = _mm256_broadcast_ss(a + r); \
    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);  \
    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);  \
  }
    GT__ROWS(GT__ROW)
#undef GT__ROW
  }
  const int full = nr == NR, scale = alpha != 1.0f, mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
  const __m256i m0 = gt__mask8(nr), m1 = gt__mask8(nr - 8);
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  GT__ROWS(GT__STORE)
}

/* the shared driver's view of this kernel (gemm_blocking.h: packed
 * elements of 4 bytes, one float each) */
static void gt__pack_a_u(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a((float *)(void *)d, tA, A, lda, i0, mc, k0, kc, 0);
}
static void gt__pack_a_w(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a((float *)(void *)d, tA, A, lda, i0, mc, k0, kc, 1);
}
/* A as bf16 patterns (gt__gemm_epi.a16) */
static void gt__pack_a_h(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a16((float *)(void *)d, tA, (const uint16_t *)(const void *)A, lda, i0, mc, k0, kc);
}
static inline __attribute__((always_inline)) void gt__pack_b(uint32_t *d, int tB, const float *B, int64_t ldb,
                                                             int64_t k0, int64_t kc, int64_t j0, int64_t n,
                                                             const int rnd) {
  for (int64_t p = 0; p * NR < n; p++)
    gt__pack_b_panel((float *)(void *)d + p * NR * kc, tB, B, ldb, k0, kc, j0 + p * NR, gt__gmin(NR, n - p * NR),
                     gt__gmax(0, gt__gmin(NR, n - (p + 1) * NR)), rnd);
}
static void gt__pack_b_u(uint32_t *d, int tB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                         int64_t n) {
  gt__pack_b(d, tB, B, ldb, k0, kc, j0, n, 0);
}
static void gt__pack_b_w(uint32_t *d, int tB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                         int64_t n) {
  gt__pack_b(d, tB, B, ldb, k0, kc, j0, n, 1);
}
static void gt__micro_u(int64_t kc, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr,
                        int64_t nr, float alpha, float beta, const float *cn) {
  gt__micro(kc, (const float *)(const void *)Ap, (const float *)(const void *)Bp, C, ldc, mr, nr, alpha, beta, cn);
}

/* ------------------------------------------------- few rows times B^T */

/* Each output a dot product of two contiguous rows (packing would copy all
 * of B for one use): 16 lanes as two vectors of 8, k in steps of 16 with
 * the last step masked, then the lanes summed as _mm512_reduce_add_ps sums
 * them (the upper 8 onto the lower, then 4, 2, 1): the AVX-512 copy's bits. */
typedef struct gt__gemv_args {
  int64_t M, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int rnd, rnda; /* round B's, A's elements to bf16 as they are read */
} gt__gemv_args;

static inline __attribute__((always_inline)) float gt__sum16(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(hi, lo);
  const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
  const __m128 s2 = _mm_add_ps(s4, _mm_shuffle_ps(s4, s4, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_shuffle_ps(s2, s2, 1));
}

static void gt__gemv_bt_cols(const void *arg, int64_t j0, int64_t j1) {
  const gt__gemv_args *g = arg;
  const int64_t M = g->M, K = g->K, kt = K % 16;
  const int rnd = g->rnd, rnda = g->rnda;
  const __m256i t0 = gt__mask8(kt), t1 = gt__mask8(kt - 8);
  for (int64_t j = j0; j < j1; j++) {
    const float *b = g->B + j * g->ldb;
    for (int64_t i = 0; i < M; i++) {
      const float *a = g->A + i * g->lda;
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        lo = _mm256_fmadd_ps(GT__PK(rnda, _mm256_loadu_ps(a + k)), GT__PK(rnd, _mm256_loadu_ps(b + k)), lo);
        hi = _mm256_fmadd_ps(GT__PK(rnda, _mm256_loadu_ps(a + k + 8)), GT__PK(rnd, _mm256_loadu_ps(b + k + 8)), hi);
      }
      if (k < K) {
        lo = _mm256_fmadd_ps(GT__PK(rnda, _mm256_maskload_ps(a + k, t0)), GT__PK(rnd, _mm256_maskload_ps(b + k, t0)),
                             lo);
        hi = _mm256_fmadd_ps(GT__PK(rnda, _mm256_maskload_ps(a + k + 8, t1)),
                             GT__PK(rnd, _mm256_maskload_ps(b + k + 8, t1)), hi);
      }
      const float dot = g->alpha * gt__sum16(lo, hi);
      float *c = g->C + i * g->ldc + j;
      *c = g->beta == 0.0f ? dot : dot + g->beta * *c;
    }
  }
}

/* ------------------------------------------- stored weights (quant.h) */

/* (gt__qdeq8, the 8 lanes of a stored matrix: kernels/quant_lanes8.h) */

/* A stored W read through gt__qdeq8 as it is packed, into the panels
 * gt__pack_b_panel writes from the dequantized float matrix (every packed
 * float is that matrix's element, rounded to bf16 with rnd), so the
 * micro-kernel, the blocking and the bits are those of the product on the
 * dequantized matrix, as kernels/gemm.c's AVX-512 packer gives them. One
 * instance per storage type, so no lane switches on it. */
static inline __attribute__((always_inline)) void gt__qpack_b_as(float *df, int tW, const gt__qview *w,
                                                                 const gt_qtype type, int64_t k0, int64_t kc,
                                                                 int64_t j0, int64_t n, const int rnd) {
  const int64_t cols = w->cols, np = gt__gcdiv(n, NR);
  const __m256 lut0 = _mm256_loadu_ps(gt_nf4_code), lut1 = _mm256_loadu_ps(gt_nf4_code + 8);
  /* the byte offset of element e (nf4: two a byte) */
#define GT__QBYTE(e) (type == GT_Q_NF4 ? (e) >> 1 : type == GT_Q_INT8 ? (e) : (e) * (int64_t)(1 + (type != GT_Q_BF16)) * 2)
  const char *bytes = (const char *)w->data;
  if (!tW) {
    /* op(W) = W [K, N]: row k0 + k's run j0..j0+n, one row at a time across
     * the panels (one contiguous read of the stored row; the start of the
     * row 4 ahead requested meanwhile) */
    for (int64_t k = 0; k < kc; k++) {
      const int64_t row = k0 + k, base = row * cols + j0;
      if (k + 4 < kc) {
        _mm_prefetch(bytes + GT__QBYTE(base + 4 * cols), _MM_HINT_T0);
        _mm_prefetch(bytes + GT__QBYTE(base + 4 * cols) + 64, _MM_HINT_T0);
      }
      const float rs = type == GT_Q_INT8 ? w->scales[row] : 0.0f;
      for (int64_t p = 0; p < np; p++) {
        const int64_t nr = gt__gmin(NR, n - p * NR);
        float *dk = df + p * NR * kc + k * NR;
        _mm256_store_ps(dk, GT__PK(rnd, gt__qdeq8(w, type, base + p * NR, gt__gmin(8, nr), rs, lut0, lut1)));
        _mm256_store_ps(dk + 8, GT__PK(rnd, gt__qdeq8(w, type, base + p * NR + 8, nr - 8, rs, lut0, lut1)));
      }
    }
    return;
  }
  /* op(W) = W^T, W [N, K]: rows of W run along k; 8 k of 16 rows, two
   * 8 x 8 transposes (gt__pack_b_panel's, on dequantized lanes). Sixteen
   * rows read side by side are more streams than the hardware prefetcher
   * follows: each row's line two ahead is requested as its current one is
   * entered. */
  const int64_t per_line = type == GT_Q_NF4 ? 128 : type == GT_Q_INT8 ? 64 : type == GT_Q_BF16 ? 32 : 16; /* in 64 bytes */
  for (int64_t p = 0; p < np; p++) {
    const int64_t nr = gt__gmin(NR, n - p * NR), r0 = j0 + p * NR;
    float *dp = df + p * NR * kc;
    for (int64_t k = 0; k < kc; k += 8) {
      __m256 r[8], s[8];
      const int64_t kn = gt__gmin(8, kc - k);
      if (((k0 + k) & (per_line - 1)) == 0 && k + 2 * per_line < kc)
        for (int64_t i = 0; i < nr; i++)
          _mm_prefetch(bytes + GT__QBYTE((r0 + i) * cols + k0 + k + 2 * per_line), _MM_HINT_T0);
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        const float rs0 = type == GT_Q_INT8 && i < nr ? w->scales[r0 + i] : 0.0f;
        const float rs1 = type == GT_Q_INT8 && i + 8 < nr ? w->scales[r0 + 8 + i] : 0.0f;
        r[i] = i < nr ? GT__PK(rnd, gt__qdeq8(w, type, (r0 + i) * cols + k0 + k, kn, rs0, lut0, lut1))
                      : _mm256_setzero_ps();
        s[i] = i + 8 < nr ? GT__PK(rnd, gt__qdeq8(w, type, (r0 + 8 + i) * cols + k0 + k, kn, rs1, lut0, lut1))
                          : _mm256_setzero_ps();
      }
      gt__tr8(r);
      gt__tr8(s);
      for (int64_t kk = 0; kk < kn; kk++) {
        _mm256_store_ps(dp + (k + kk) * NR, r[kk]);
        _mm256_store_ps(dp + (k + kk) * NR + 8, s[kk]);
      }
    }
  }
#undef GT__QBYTE
}

/* The driver hands B through untouched: here it is the gt_qweight (ldb
 * unused). */
static inline __attribute__((always_inline)) void gt__qpack_b(uint32_t *d, int tW, const float *B, int64_t k0,
                                                              int64_t kc, int64_t j0, int64_t n, const int rnd) {
  const gt_qweight *q = (const gt_qweight *)(const void *)B;
  const gt__qview w = gt__qview_of(q);
  float *df = (float *)(void *)d;
  switch (q->type) {
  case GT_Q_F32: gt__qpack_b_as(df, tW, &w, GT_Q_F32, k0, kc, j0, n, rnd); break;
  case GT_Q_BF16: gt__qpack_b_as(df, tW, &w, GT_Q_BF16, k0, kc, j0, n, rnd); break;
  case GT_Q_INT8: gt__qpack_b_as(df, tW, &w, GT_Q_INT8, k0, kc, j0, n, rnd); break;
  case GT_Q_NF4: gt__qpack_b_as(df, tW, &w, GT_Q_NF4, k0, kc, j0, n, rnd); break;
  }
}

/* gt__gemv_bt_cols' sums with row j of W dequantized in registers (and
 * rounded to bf16 with rnd, as gt__qpack_b): each output gets the same FMAs
 * in the same order as that row kernel on the dequantized matrix, so the
 * same bits, at one read of the stored row per output instead of a
 * dequantized panel written and read again (decoding one token over a
 * QLoRA base reads every stored weight once). */
typedef struct gt__qgemv_args {
  int64_t M, K, lda, ldc;
  float alpha, beta;
  const float *A;
  const gt_qweight *W;
  float *C;
  int rnd, rnda; /* round W's, A's elements to bf16 as they are read */
} gt__qgemv_args;

static inline __attribute__((always_inline)) void gt__qgemv_as(const gt__qgemv_args *g, const gt__qview *w,
                                                               const gt_qtype type, const int64_t M, int64_t j0,
                                                               int64_t j1) {
  const int64_t K = g->K, kt = K % 16;
  const int rnd = g->rnd && type != GT_Q_BF16; /* (a bf16 store's values are bf16: rounding changes nothing) */
  const int rnda = g->rnda;
  const __m256i t0 = gt__mask8(kt), t1 = gt__mask8(kt - 8);
  const __m256 lut0 = _mm256_loadu_ps(gt_nf4_code), lut1 = _mm256_loadu_ps(gt_nf4_code + 8);
  /* nf4 rows that start on a block (every Gemma width is a multiple of
   * 64): each step of 16 lies in one block */
  const int nf4_blocks = type == GT_Q_NF4 && w->cols % GT_Q_NF4_BLOCK == 0;
  for (int64_t j = j0; j < j1; j++) {
    const int64_t row = j * w->cols;
    const float rs = type == GT_Q_INT8 ? w->scales[j] : 0.0f;
    __m256 lo[GT__GEMV_ROWS], hi[GT__GEMV_ROWS];
    for (int64_t i = 0; i < M; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    int64_t k = 0;
    __m256 blut0 = lut0, blut1 = lut1; /* nf4_blocks: the current block's table */
    for (; k + 16 <= K; k += 16) {
      __m256 b0, b1;
      if (nf4_blocks) { /* 16 elements of one block, from its own table */
        if (k % GT_Q_NF4_BLOCK == 0) {
          const __m256 sc = _mm256_set1_ps(w->scales[(row + k) / GT_Q_NF4_BLOCK]);
          blut0 = GT__PK(rnd, _mm256_mul_ps(lut0, sc)), blut1 = GT__PK(rnd, _mm256_mul_ps(lut1, sc));
        }
        gt__nf4_deq16((const uint8_t *)w->data + ((row + k) >> 1), blut0, blut1, &b0, &b1);
      } else {
        b0 = GT__PK(rnd, gt__qdeq8(w, type, row + k, 8, rs, lut0, lut1));
        b1 = GT__PK(rnd, gt__qdeq8(w, type, row + k + 8, 8, rs, lut0, lut1));
      }
      for (int64_t i = 0; i < M; i++) {
        const float *a = g->A + i * g->lda + k;
        lo[i] = _mm256_fmadd_ps(GT__PK(rnda, _mm256_loadu_ps(a)), b0, lo[i]);
        hi[i] = _mm256_fmadd_ps(GT__PK(rnda, _mm256_loadu_ps(a + 8)), b1, hi[i]);
      }
    }
    if (k < K) {
      const __m256 b0 = GT__PK(rnd, gt__qdeq8(w, type, row + k, gt__gmin(8, kt), rs, lut0, lut1));
      const __m256 b1 = GT__PK(rnd, gt__qdeq8(w, type, row + k + 8, kt - 8, rs, lut0, lut1));
      for (int64_t i = 0; i < M; i++) {
        const float *a = g->A + i * g->lda + k;
        lo[i] = _mm256_fmadd_ps(GT__PK(rnda, _mm256_maskload_ps(a, t0)), b0, lo[i]);
        hi[i] = _mm256_fmadd_ps(GT__PK(rnda, _mm256_maskload_ps(a + 8, t1)), b1, hi[i]);
      }
    }
    for (int64_t i = 0; i < M; i++) {
      const float dot = g->alpha * gt__sum16(lo[i], hi[i]);
      float *c = g->C + i * g->ldc + j;
      *c = g->beta == 0.0f ? dot : dot + g->beta * *c;
    }
  }
}

static void gt__qgemv_cols(const void *arg, int64_t j0, int64_t j1) {
  const gt__qgemv_args *g = arg;
  const gt_qweight *q = g->W;
  const gt__qview w = gt__qview_of(q);
  /* one row (decoding a token) as an instance of its own: its two
   * accumulators stay in registers, where a row count known only at run
   * time leaves them in memory, a store and a load on every FMA's chain */
  switch (q->type) {
  case GT_Q_F32: gt__qgemv_as(g, &w, GT_Q_F32, g->M, j0, j1); break;
  case GT_Q_BF16:
    if (g->M == 1) gt__qgemv_as(g, &w, GT_Q_BF16, 1, j0, j1);
    else gt__qgemv_as(g, &w, GT_Q_BF16, g->M, j0, j1);
    break;
  case GT_Q_INT8:
    if (g->M == 1) gt__qgemv_as(g, &w, GT_Q_INT8, 1, j0, j1);
    else gt__qgemv_as(g, &w, GT_Q_INT8, g->M, j0, j1);
    break;
  case GT_Q_NF4:
    if (g->M == 1) gt__qgemv_as(g, &w, GT_Q_NF4, 1, j0, j1);
    else gt__qgemv_as(g, &w, GT_Q_NF4, g->M, j0, j1);
    break;
  }
}

GT__QPACK_B_ENTRIES(gt__qpack_b)

/* ---------------------------------------------------------------- driver */

int gt__sgemm_avx2(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi) {
  if (M <= GT__GEMV_ROWS && !transA && transB && !epi) {
    /* (rounding: A's rows once here if the buffer allows, else as read) */
    const float *Ar = rnd ? gt__rows_rounded(A, lda, M, K) : NULL;
    const gt__gemv_args g = {M, K, Ar ? K : lda, ldb, ldc, alpha, beta, Ar ? Ar : A, B, C, rnd, rnd && !Ar};
    gt__gemm_cols(N, K, 64, gt__gemv_bt_cols, &g);
    return 0;
  }
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_u, gt__pack_b_u, gt__micro_u};
  static const gt__gemm_kernel kernw = {&gt__blocks, 1, gt__pack_a_w, gt__pack_b_w, gt__micro_u};
  static const gt__gemm_kernel kern16 = {&gt__blocks, 1, gt__pack_a_h, gt__pack_b_w, gt__micro_u};
  const gt__gemm_kernel *k = epi && epi->a16 ? &kern16 : rnd ? &kernw : &kern;
  return gt__gemm_run(k, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
}

int gt__qgemm_avx2(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const gt_qweight *W, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi) {
  /* a few rows times W^T: the row kernel, W dequantized in registers (the
   * sums of gt__sgemm_avx2's row kernel, and of the AVX-512 copy's for
   * stored weights); A as bf16 patterns widened first, as there */
  if (M <= GT__GEMV_ROWS && !transA && transW) {
    /* A's rows as the kernel reads them, made once: widened from bf16
     * patterns (bf16 values: no rounding left), or rounded (rnd) if the
     * buffer allows, else rounded as read */
    int rnda = rnd;
    if (epi && epi->a16) {
      if (!(A = gt__rows_widened((const uint16_t *)(const void *)A, lda, M, K))) return -1;
      lda = K, rnda = 0;
    } else if (rnd) {
      const float *Ar = gt__rows_rounded(A, lda, M, K);
      if (Ar) A = Ar, lda = K, rnda = 0;
    }
    const gt__qgemv_args g = {M, K, lda, ldc, alpha, beta, A, W, C, rnd, rnda};
    gt__gemm_cols(N, K, 64, gt__qgemv_cols, &g);
    if (epi && epi->round) epi->round(C, ldc, C, ldc, M, N);
    return 0;
  }
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_u, gt__qpack_b_u, gt__micro_u};
  static const gt__gemm_kernel kernw = {&gt__blocks, 1, gt__pack_a_w, gt__qpack_b_w, gt__micro_u};
  static const gt__gemm_kernel kern16 = {&gt__blocks, 1, gt__pack_a_h, gt__qpack_b_w, gt__micro_u};
  const gt__gemm_kernel *k = epi && epi->a16 ? &kern16 : rnd ? &kernw : &kern;
  return gt__gemm_run(k, transA, transW, M, N, K, alpha, A, lda, (const float *)(const void *)W, W->cols, beta, C,
                      ldc, epi);
}

/* The micro-kernel's own rate (kernels/gemm.c's gt__sgemm_kernel_gflops):
 * one A and one B panel of 256 k in L1, one C tile, beta 1, no thread. */
enum { GT__CEIL_KC = 256 };
static void gt__ceil_call(const float *Ap, const float *Bp, float *C) {
  gt__micro(GT__CEIL_KC, Ap, Bp, C, NR, MR, NR, 1.0f, 1.0f, C);
}
double gt__sgemm_avx2_kernel_gflops(double seconds) {
  return gt__gemm_rate(gt__ceil_call, MR, NR, GT__CEIL_KC, seconds);
}

GT__TARGET_END

#else /* not x86-64: never called (gt__kernels_path() is portable there) */

int gt__sgemm_avx2(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi) {
  (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
  (void)beta, (void)C, (void)ldc, (void)rnd, (void)epi;
  return -1;
}
int gt__qgemm_avx2(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const gt_qweight *W, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi) {
  (void)transA, (void)transW, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)W, (void)beta;
  (void)C, (void)ldc, (void)rnd, (void)epi;
  return -1;
}
double gt__sgemm_avx2_kernel_gflops(double seconds) {
  (void)seconds;
  return 0.0;
}
#endif
