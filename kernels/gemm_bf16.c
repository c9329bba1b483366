/* gt_bgemm: C = alpha * bf16(op(A)) . bf16(op(B)) + beta * C (kernels/bf16.h).
 *
 * Paths (kernels/bf16_path.h chooses one per process from the CPU; the
 * tests can force one): this file's packed kernel on AVX512_BF16's
 * vdpbf16ps (below), or its emulation; the widened path, gt_sgemm's kernel
 * with packers that round to bf16 (kernels/gemm.c, kernels/gemm_widen.h),
 * where vdpbf16ps is not clearly faster than FMA or missing; AMX tiles
 * (kernels/gemm_amx.c); and rounded copies without AVX-512. The driver at
 * the end of this file sends each call to its path; decoding's few rows
 * (M <= 4 times B^T) take one row kernel on every AVX-512 path.
 *
 * The vdpbf16ps kernel:
 *
 * Layout: the float32 inputs are rounded to bf16 (round to nearest even, the
 * integer rounding of bf16.h, denormals and NaNs as gt_f32_to_bf16) while
 * they are packed, two consecutive k in one 32-bit lane: k = 2p in the low
 * half, 2p + 1 in the high half, an odd K block padded with a zero. A panel:
 * [kc/2][MR] pairs (on the vdpbf16ps path, A not transposed: groups of 16
 * pair steps row by row, see gt__bpack_a_grouped), B panel: [kc/2][NR]
 * pairs. The micro-kernel broadcasts one A pair per row and runs vdpbf16ps
 * on two B vectors: 2 x 32 products per row and pair step, float32
 * accumulators. The vdpbf16ps path converts with vcvtne2ps2bf16 instead of
 * the integer rounding, with the same bits (see "packing with
 * vcvtne2ps2bf16").
 *
 * Loops, blocking, tasks and buffers are kernels/gemm.c's (shared through
 * kernels/gemm_blocking.h): jc over N by NC, pc over K by KC (B block packed
 * by all threads), tasks of mc rows times a group of NR panels handed out
 * dynamically, one parallel region per call; a tile is computed whole by one
 * task in a fixed k order, so the bits do not depend on the thread count or
 * on timing. KC here counts k (bf16 elements): a pair panel of KC k takes the
 * bytes of a float32 panel of KC/2.
 *
 * Arithmetic (measured on this Zen 4 against candidate emulations, 32 M
 * lanes per exponent range, one matching every lane; Intel documents round
 * to nearest for each accumulation, DAZ, FTZ, MXCSR neither read nor
 * written): per lane, vdpbf16ps computes acc = acc + a[2p+1] b[2p+1], rounded, then
 * acc = acc + a[2p] b[2p], rounded (each product exact, each add one
 * float32 rounding, i.e. two sequential FMAs, the odd k first), with
 * denormal inputs read as zero (DAZ: bf16 denormals in A and B and a
 * denormal accumulator) and denormal results flushed to zero (FTZ).
 *
 * Emulation (the pairs path where vdpbf16ps is missing or turned off by
 * GEMTRAIN_NO_AVX512BF16=1, read once, or by gt__bgemm_force_fallback(1);
 * chosen only by the tests' switches), the same pairs
 * (integer rounding, [kc/2][MR] A panels) and loops with a micro-kernel that
 * splits each pair into two floats and runs two float32 FMAs, odd k first,
 * with MXCSR set to DAZ, FTZ and round to nearest for its k loop (and
 * restored before alpha, beta and C are applied). On this CPU it
 * gives the fast path's bits exactly: tests/test_bf16_kernels.c asserts
 * bit-identity on random data over the whole exponent range, denormals,
 * infinities and NaN included. (On a CPU whose vdpbf16ps flushes at a
 * different tininess point, the two could differ only in results within an
 * ulp of 2^-126.)
 *
 * Bound against exact bf16 products summed in double (gt_bgemm_ref), with
 * S = sum_k |a_k b_k|: each float32 add of an exact product (2 per pair,
 * then one per K block into C) errs by at most 2^-24 of a running sum
 * bounded by |alpha| S, and the epilogue (alpha, beta) and the reference's
 * own float rounding add at most 4 more of 2^-24 (|alpha| S + |beta C0|):
 *   |C - C_ref| <= 2^-24 ((K + 8) |alpha| S + 4 |beta C0|)
 * for inputs without bf16 denormals (read as zero) and sums above 2^-126
 * (FTZ); tests/test_bf16_kernels.c asserts it element by element.
 *
 * Stored weights (kernels/quant.h): gt__qbgemm_packed runs the same loops
 * and micro-kernels with gt__qbpack_b, which dequantizes W and rounds it to
 * bf16 into the same pairs (docs/quantization.md).
 *
 * On the AVX2 copy (kernels/cpu.h): the widened path on kernels/gemm_avx2.c
 * (gt__sgemm_avx2 with its rounding packers), and its row kernel for a few
 * rows. With neither AVX-512 (F, BW, VL, DQ and FMA) nor AVX2, or on the
 * portable path: rounded float32 copies and
 * gt_sgemm, the same rounded products summed in float32 in gt_sgemm's order
 * (no DAZ/FTZ), so those bits differ from the AVX-512 paths within the
 * bound. Nothing here runs an instruction the CPU lacks: the vector code is
 * compiled with target attributes and chosen from cpuid. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm_avx2.h"
#include "kernels/gemm_blocking.h"
#include "kernels/gemm_widen.h"
#include "kernels/kernels.h"
#include "kernels/quant_gemm.h"

#if defined(__x86_64__)
#define GT__BG_X86 1
#include <immintrin.h>

#include "kernels/gemm_tile.h"
#include "kernels/gemm_tr16.h"
#include "kernels/bf16_cvt.h"
#endif

/* ------------------------------------------------------ path selection */

enum { GT__BG_COPY = 0, GT__BG_FMA = 1, GT__BG_DP = 2 };

static int gt__bg_hw, gt__bg_env_off;
static atomic_int gt__bg_forced;
static pthread_once_t gt__bg_once = PTHREAD_ONCE_INIT;

static void gt__bg_init(void) {
  gt__bg_hw = GT__BG_COPY;
#if defined(GT__BG_X86)
  /* AVX-512 F, BW, VL, DQ and FMA, as the float32 kernels' choice (which
   * GT_TEST_KERNELS=portable turns off for the tests: then the copies) */
  if (gt__kernels_avx512()) gt__bg_hw = __builtin_cpu_supports("avx512bf16") ? GT__BG_DP : GT__BG_FMA;
#endif
  const char *e = getenv("GEMTRAIN_NO_AVX512BF16");
  gt__bg_env_off = e && *e && strcmp(e, "0") != 0;
}

void gt__bgemm_force_fallback(int on) { atomic_store(&gt__bg_forced, on != 0); }
int gt__bgemm_fallback_forced(void) { return atomic_load(&gt__bg_forced); }

int gt__bgemm_kernel(void) {
  pthread_once(&gt__bg_once, gt__bg_init);
  if (gt__bg_hw == GT__BG_DP && (gt__bg_env_off || atomic_load(&gt__bg_forced))) return GT__BG_FMA;
  return gt__bg_hw;
}

/* ----------------------------------------- no AVX-512: rounded copies */

static float *gt__rounded(int trans, int64_t rows, int64_t cols, const float *X, int64_t ld) {
  /* op(X) is rows x cols; the copy keeps X's layout (ld = its row length) */
  int64_t r = trans ? cols : rows, c = trans ? rows : cols;
  float *y = malloc((size_t)(r * c) * sizeof(float) + 1);
  if (!y) return NULL;
  for (int64_t i = 0; i < r; i++) memcpy(y + i * c, X + i * ld, (size_t)c * sizeof(float));
  gt_bf16_round(y, r * c);
  return y;
}

/* No memory for the copies: one output at a time, its operands rounded as
 * they are read and its products summed in float32 in k order. Slow, but it
 * allocates nothing, and its sums are within the bound (not gt_sgemm's
 * bits: another order). */
static void gt__bgemm_scalar(const uint16_t *A16, int transA, int transB, int64_t M, int64_t N, int64_t K,
                             float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                             float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; k++)
        s += (A16 ? gt_bf16_to_f32(A16[transA ? k * lda + i : i * lda + k])
                  : gt_bf16_round1(transA ? A[k * lda + i] : A[i * lda + k])) *
             gt_bf16_round1(transB ? B[j * ldb + k] : B[k * ldb + j]);
      float *c = C + i * ldc + j;
      *c = beta == 0.0f ? alpha * s : alpha * s + beta * *c;
    }
}

static void gt__bgemm_copy(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  float *a = gt__rounded(transA, M, K, A, lda), *b = gt__rounded(transB, K, N, B, ldb);
  if (a && b)
    gt_sgemm(transA, transB, M, N, K, alpha, a, transA ? M : K, b, transB ? K : N, beta, C, ldc);
  else
    gt__bgemm_scalar(NULL, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  free(a);
  free(b);
}

/* gt_bgemm_rnd's rounding where a path has no tile loop to do it in: the
 * M x N block of C, a pass of its own (threads split each row's range) */
static void gt__round_c(float *C, int64_t ldc, int64_t M, int64_t N) {
  if (ldc == N) {
    gt_bf16_round(C, M * N);
    return;
  }
  for (int64_t i = 0; i < M; i++) gt_bf16_round(C + i * ldc, N);
}

/* A's few rows as bf16 patterns (a16, M rows of K) widened to floats for
 * the row kernels, which read floats, into this thread's B packing buffer:
 * the row kernels pack nothing into it (gt__bgemv_bt_cvt rounds A into the
 * A buffer; the AVX2 one rounds A's rows here, gt__rows_rounded), and it
 * stays allocated between calls, so a decoding token does not allocate.
 * NULL when it cannot grow. */
float *gt__rows_widened(const uint16_t *a16, int64_t lda, int64_t M, int64_t K) {
  gt__gemm_cache *c = gt__gemm_cache_get();
  if (!c || gt__gemm_grow(&c->b, &c->bcap, (size_t)(M * K) * sizeof(float))) return NULL;
  float *a = c->b;
  for (int64_t i = 0; i < M; i++) gt_bf16_unpack(a + i * K, a16 + i * lda, K);
  return a;
}

/* A's few rows rounded to bf16 into the same buffer, once for the call: a
 * row kernel that rounded them as it read them did so again for every
 * output column. NULL when the buffer cannot grow. */
float *gt__rows_rounded(const float *A, int64_t lda, int64_t M, int64_t K) {
  gt__gemm_cache *c = gt__gemm_cache_get();
  /* rows already here are gt__rows_widened's, bf16 values: nothing to round
   * (and the buffer must not be grown under them) */
  if (c && A == c->b) return c->b;
  if (!c || gt__gemm_grow(&c->b, &c->bcap, (size_t)(M * K) * sizeof(float))) return NULL;
  gt_bf16_round_rows(c->b, K, A, lda, M, K);
  return c->b;
}

#if defined(GT__BG_X86)
/* ------------------------------------------------ AVX-512 (cpuid-chosen) */

GT__TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,fma")

enum { MR = 12, NR = 32 };

static gt__gemm_blocks gt__bblocks;
static pthread_once_t gt__bblock_once = PTHREAD_ONCE_INIT;

/* (inside the AVX-512 region: reached only after the cpuid check) */
static void gt__bblock_init(void) {
  int64_t l2 = gt__gemm_l2_bytes(), l3 = gt__gemm_l3_bytes();
  /* KC (in k) as large as lets an A block of 256 rows (2 bytes per k) take
   * half of L2, capped at 1024: the B micro-panel is then 64 KiB as in the
   * float32 kernel at KC 512 */
  int64_t kc = gt__gmax(256, gt__gmin(1024, l2 / 2 / (256 * 2) / 32 * 32));
  gt__bblocks = (gt__gemm_blocks){.mr = MR,
                                  .nr = NR,
                                  .kc_max = kc,
                                  .kalign = 32,
                                  .mc_max = gt__gmax(4 * MR, gt__gmin(4096, l2 / 2 / (kc * 2) / MR * MR)),
                                  .nc_max = gt__gmax(16 * NR, gt__gmin(8192, l3 / 2 / (kc * 2) / NR * NR))};
}

#include "kernels/bf16_lanes.h"
#include "kernels/quant_lanes.h"

/* pairs of two k: lo from the even k's rounded lanes, hi from the odd's */
static inline __attribute__((always_inline)) __m512i gt__pair(__m512i even, __m512i odd) {
  return _mm512_or_si512(_mm512_srli_epi32(even, 16), odd);
}

/* 32 consecutive k of one row (masked to kn) -> 16 pair lanes */
static inline __attribute__((always_inline)) __m512i gt__row_pairs(const float *src, int64_t kn) {
  __mmask16 m0 = (__mmask16)(kn >= 16 ? 0xFFFF : kn > 0 ? (1u << kn) - 1 : 0);
  __mmask16 m1 = (__mmask16)(kn >= 32 ? 0xFFFF : kn > 16 ? (1u << (kn - 16)) - 1 : 0);
  __m512i r0 = gt__bf16_round16(_mm512_maskz_loadu_ps(m0, src)), r1 = gt__bf16_round16(_mm512_maskz_loadu_ps(m1, src + 16));
  /* words 2w+1 (the top halves) of r0 then of r1 */
  const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(r0, idx, r1);
}

/* rows[0..nrows) of a matrix whose rows run along k: 32 k each from k
 * (masked to kn), as 16 pairs, the other rows 0, transposed: r[p] = the
 * pairs of k + 2p, one lane per row. */
static inline __attribute__((always_inline)) void gt__load_tr_pairs(__m512 r[16], const float *src, int64_t ld,
                                                                    int64_t nrows, int64_t k, int64_t kn,
                                                                    const float *next, int64_t nnext) {
  /* short rows do not ramp up the hardware prefetcher: ask for the rows
   * packed next now (see gemm.c) */
  for (int64_t i = 0; i < nnext; i++) {
    _mm_prefetch((const char *)(next + i * ld + k), _MM_HINT_T0);
    _mm_prefetch((const char *)(next + i * ld + k + 16), _MM_HINT_T0);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++)
    r[i] = i < nrows ? _mm512_castsi512_ps(gt__row_pairs(src + i * ld + k, kn)) : _mm512_setzero_ps();
  gt__tr16(r);
}

/* A block [mc, kc] from (i0, k0) into MR-tall panels of pairs: panel p holds
 * rows p*MR.., [kc/2 rounded up][MR] lanes, rows past mc zero. */
static void gt__bpack_a(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                        int64_t kc) {
  const int64_t kp = (kc + 1) / 2;
  if (transA) {
    /* op(A)(i, k) = A[k][i]: rows k and k + 1 of A, MR values each per
     * panel. Pair steps outside, panels inside: each row of A is then read
     * along its length (panels inside the pair steps, the other way round,
     * read 48 bytes per row and left the loads waiting on memory) */
    for (int64_t q = 0; q < kp; q++) {
      const float *e = A + (k0 + 2 * q) * lda + i0, *o = e + lda;
      const int odd = 2 * q + 1 < kc;
      if (q + 1 < kp)
        for (int64_t i = 0; i < mc; i += 16) {
          _mm_prefetch((const char *)(e + 2 * lda + i), _MM_HINT_T0);
          _mm_prefetch((const char *)(e + 3 * lda + i), _MM_HINT_T0);
        }
      for (int64_t p = 0; p < mc; p += MR) {
        int64_t mr = gt__gmin(MR, mc - p);
        __mmask16 m = (__mmask16)((1u << mr) - 1);
        __m512i ve = gt__bf16_round16(_mm512_maskz_loadu_ps(m, e + p));
        __m512i vo = odd ? gt__bf16_round16(_mm512_maskz_loadu_ps(m, o + p)) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(dst + p * kp + q * MR, 0x0FFF, gt__pair(ve, vo));
      }
    }
    return;
  }
  /* rows run along k: 32 k (16 pairs) at a time, 12 rows + 4 zero rows */
  for (int64_t p = 0; p < mc; p += MR) {
    int64_t mr = gt__gmin(MR, mc - p);
    uint32_t *d = dst + p * kp;
    const float *src = A + (i0 + p) * lda;
    int64_t nnext = gt__gmax(0, gt__gmin(MR, mc - p - MR));
    const float *next = nnext ? src + MR * lda : src;
    for (int64_t k = 0; k < kc; k += 32) {
      __m512 r[16];
      int64_t kn = gt__gmin(32, kc - k), qn = (kn + 1) / 2;
      gt__load_tr_pairs(r, src, lda, mr, k0 + k, kn, next, nnext);
      uint32_t *dk = d + k / 2 * MR;
      if (qn == 16) {
#pragma GCC unroll 16
        for (int q = 0; q < 16; q++) _mm512_mask_storeu_ps(dk + q * MR, 0x0FFF, r[q]);
      } else {
        for (int64_t q = 0; q < qn; q++) _mm512_mask_storeu_ps(dk + q * MR, 0x0FFF, r[q]);
      }
    }
  }
}

/* A held as bf16 patterns (gt__gemm_epi.a16): the patterns of k and k + 1
 * lie in memory as a pair does in a lane (the even k in the low half), so
 * 32 patterns of a row of op(A) load as its 16 pairs, with nothing to
 * round; op(A) = A^T pairs rows k and k + 1 of A lane by lane. grouped: the vdpbf16ps kernel's layout (gt__bpack_a_grouped's),
 * else gt__bpack_a's [kp][MR]; the same pairs as those packers make from the
 * float32 A the patterns came from. */
static inline __attribute__((always_inline)) __m512i gt__row_pairs16(const uint16_t *src, int64_t kn) {
  return _mm512_maskz_loadu_epi16((__mmask32)(kn >= 32 ? 0xFFFFFFFFu : (1u << kn) - 1), src);
}
static inline __attribute__((always_inline)) void gt__bpack_a16(uint32_t *dst, int transA, const float *A, int64_t lda,
                                                                int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                                                                const int grouped) {
  const uint16_t *A16 = (const uint16_t *)(const void *)A;
  const int64_t kp = (kc + 1) / 2;
  if (transA) {
    /* op(A)(i, k) = A[k][i]: rows k and k + 1 of A, MR patterns each per
     * panel, make MR pairs (pair steps outside, as gt__bpack_a) */
    for (int64_t q = 0; q < kp; q++) {
      const uint16_t *e = A16 + (k0 + 2 * q) * lda + i0, *o = e + lda;
      const int odd = 2 * q + 1 < kc;
      if (q + 1 < kp)
        for (int64_t i = 0; i < mc; i += 32) {
          _mm_prefetch((const char *)(e + 2 * lda + i), _MM_HINT_T0);
          _mm_prefetch((const char *)(e + 3 * lda + i), _MM_HINT_T0);
        }
      for (int64_t p = 0; p < mc; p += MR) {
        const __mmask16 m = (__mmask16)((1u << gt__gmin(MR, mc - p)) - 1);
        _mm512_mask_storeu_epi32(dst + p * kp + q * MR, 0x0FFF, gt__pairs16(m, e + p, odd ? o + p : NULL));
      }
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t mr = gt__gmin(MR, mc - p);
    uint32_t *d = dst + p * kp;
    const uint16_t *src = A16 + (i0 + p) * lda + k0;
    for (int64_t k = 0; k < kc; k += 32) {
      const int64_t kn = gt__gmin(32, kc - k), w = (kn + 1) / 2;
      uint32_t *dk = d + k / 2 * MR;
      if (p + MR < mc)
        for (int64_t r = 0; r < gt__gmin(MR, mc - p - MR); r++) _mm_prefetch((const char *)(src + (MR + r) * lda + k), _MM_HINT_T0);
      if (grouped) {
        const __mmask16 m = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        for (int64_t r = 0; r < MR; r++)
          _mm512_mask_storeu_epi32(dk + r * w, m, r < mr ? gt__row_pairs16(src + r * lda + k, kn) : _mm512_setzero_si512());
      } else {
        __m512 v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
          v[i] = i < mr ? _mm512_castsi512_ps(gt__row_pairs16(src + i * lda + k, kn)) : _mm512_setzero_ps();
        gt__tr16(v);
        for (int64_t q = 0; q < w; q++) _mm512_mask_storeu_ps(dk + q * MR, 0x0FFF, v[q]);
      }
    }
  }
}
static void gt__bpack_a_h(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                          int64_t kc) {
  gt__bpack_a16(dst, transA, A, lda, i0, mc, k0, kc, 0);
}
/* (the grouped layout: A not transposed) */
static void gt__bpack_a_hg(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                           int64_t kc) {
  (void)transA;
  gt__bpack_a16(dst, 0, A, lda, i0, mc, k0, kc, 1);
}


/* B panel: op(B) rows k0..k0+kc, columns j0..j0+nr into [kc/2 rounded
 * up][NR] pairs, columns past nr zero. */
static void gt__bpack_b_panel(uint32_t *d, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                              int64_t j0, int64_t nr) {
  const int64_t kp = (kc + 1) / 2;
  if (!transB) {
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    for (int64_t q = 0; q < kp; q++) {
      const float *e = B + (k0 + 2 * q) * ldb + j0, *o = e + ldb;
      __m512i e0 = gt__bf16_round16(_mm512_maskz_loadu_ps(m0, e)), e1 = gt__bf16_round16(_mm512_maskz_loadu_ps(m1, e + 16));
      __m512i o0 = _mm512_setzero_si512(), o1 = _mm512_setzero_si512();
      if (2 * q + 1 < kc) o0 = gt__bf16_round16(_mm512_maskz_loadu_ps(m0, o)), o1 = gt__bf16_round16(_mm512_maskz_loadu_ps(m1, o + 16));
      _mm512_store_si512(d + q * NR, gt__pair(e0, o0));
      _mm512_store_si512(d + q * NR + 16, gt__pair(e1, o1));
    }
    return;
  }
  /* op(B)(k, j) = B[j][k]: rows of B run along k; two 16-row transposes */
  const float *src = B + j0 * ldb;
  for (int64_t k = 0; k < kc; k += 32) {
    __m512 r[16], s[16];
    int64_t kn = gt__gmin(32, kc - k), qn = (kn + 1) / 2;
    gt__load_tr_pairs(r, src, ldb, gt__gmin(16, nr), k0 + k, kn, src, 0);
    gt__load_tr_pairs(s, nr > 16 ? src + 16 * ldb : src, ldb, gt__gmax(0, nr - 16), k0 + k, kn, src, 0);
    uint32_t *dk = d + k / 2 * NR;
    if (qn == 16) {
#pragma GCC unroll 16
      for (int q = 0; q < 16; q++) {
        _mm512_store_ps(dk + q * NR, r[q]);
        _mm512_store_ps(dk + q * NR + 16, s[q]);
      }
    } else {
      for (int64_t q = 0; q < qn; q++) {
        _mm512_store_ps(dk + q * NR, r[q]);
        _mm512_store_ps(dk + q * NR + 16, s[q]);
      }
    }
  }
}

/* columns j0..j0+n of the block as consecutive B panels (kernels/gemm_blocking.h) */
static void gt__bpack_b_panels(uint32_t *d, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                               int64_t j0, int64_t n) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t p = 0; p * NR < n; p++)
    gt__bpack_b_panel(d + p * NR * kp, transB, B, ldb, k0, kc, j0 + p * NR, gt__gmin(NR, n - p * NR));
}

/* ------------------------------------------- packing with vcvtne2ps2bf16 */

/* The vdpbf16ps path packs with AVX512_BF16's own conversion: one
 * vcvtne2ps2bf16 turns 32 floats into 32 bf16 in k order, which is already
 * the pair layout (k = 2p low, 2p + 1 high), where the integer rounding
 * above takes two roundings of 16 lanes (8 operations each) and a word
 * permute. It rounds to nearest even and quiets NaNs exactly as
 * gt_f32_to_bf16 does, except that it flushes float32 denormal inputs to
 * (signed) zero, where gt_f32_to_bf16 keeps them (measured on this Zen 4
 * over all 2^32 inputs: those are the only lanes that differ; Intel
 * documents the same). So each block also classifies its inputs
 * (vfpclassps, denormal), and a block with a float32 denormal in it is
 * packed again by the integer rounding: the packed bits are the integer
 * rounding's in every case, and both paths (vdpbf16ps and its fallback, which
 * packs with the integer rounding) see the same pairs. */
/* gt__load_tr_pairs with the conversion of kernels/bf16_cvt.h */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__load_tr_pairs_cvt(__m512 r[16], const float *src, int64_t ld, int64_t nrows, int64_t k, int64_t kn,
                      const float *next, int64_t nnext, __mmask16 *den) {
  for (int64_t i = 0; i < nnext; i++) {
    _mm_prefetch((const char *)(next + i * ld + k), _MM_HINT_T0);
    _mm_prefetch((const char *)(next + i * ld + k + 16), _MM_HINT_T0);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++)
    r[i] = i < nrows ? _mm512_castsi512_ps(gt__row_pairs_cvt(src + i * ld + k, kn, den)) : _mm512_setzero_ps();
  gt__tr16(r);
}

/* The vdpbf16ps kernel's A panels when the rows of op(A) run along k (A not
 * transposed: the forward's X and the input gradient's dY): groups of 16 pair
 * steps, row by row, [kp/16][MR][16] pairs, and a last group of the w < 16
 * remaining steps as [MR][w]; rows past mc zero. One row's 32 k convert to
 * its 16 pairs of a group in one vcvtne2ps2bf16 and one store: no transpose
 * (the [kp][MR] layout took a 16 x 16 transpose per 32 k of 12 rows, a
 * quarter of the time of products with few columns). gt__bmicro_dp_grp
 * reads it. exact: the integer rounding of gt__row_pairs (a block with a
 * float32 denormal in it: see above), else vcvtne2ps2bf16 with denormals
 * marked in *den. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__bpack_a_grouped(uint32_t *dst, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                    const int exact, __mmask16 *den) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t p = 0; p < mc; p += MR) {
    int64_t mr = gt__gmin(MR, mc - p);
    uint32_t *d = dst + p * kp;
    const float *src = A + (i0 + p) * lda + k0;
    for (int64_t k = 0; k < kc; k += 32) {
      int64_t kn = gt__gmin(32, kc - k), w = (kn + 1) / 2;
      uint32_t *dg = d + k / 2 * MR;
      /* the same 32 k of the rows 12 ahead (the next panel): rows of a few
       * KB do not ramp the hardware prefetcher up */
      if (p + MR < mc)
        for (int64_t r = 0; r < gt__gmin(MR, mc - p - MR); r++) {
          _mm_prefetch((const char *)(src + (MR + r) * lda + k), _MM_HINT_T0);
          _mm_prefetch((const char *)(src + (MR + r) * lda + k + 16), _MM_HINT_T0);
        }
      if (w == 16) {
        for (int64_t r = 0; r < mr; r++)
          _mm512_storeu_si512(dg + r * 16, exact ? gt__row_pairs(src + r * lda + k, kn)
                                                 : gt__row_pairs_cvt(src + r * lda + k, kn, den));
        for (int64_t r = mr; r < MR; r++) _mm512_storeu_si512(dg + r * 16, _mm512_setzero_si512());
      } else {
        __mmask16 m = (__mmask16)((1u << w) - 1);
        for (int64_t r = 0; r < MR; r++) {
          __m512i v = r >= mr ? _mm512_setzero_si512()
                      : exact ? gt__row_pairs(src + r * lda + k, kn)
                              : gt__row_pairs_cvt(src + r * lda + k, kn, den);
          _mm512_mask_storeu_epi32(dg + r * w, m, v);
        }
      }
    }
  }
}

/* gt__bpack_a with vcvtne2ps2bf16 (the same layout and bits) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void gt__bpack_a_cvt(uint32_t *dst, int transA, const float *A,
                                                                  int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                                                                  int64_t kc) {
  const int64_t kp = (kc + 1) / 2;
  __mmask16 den = 0;
  if (transA) {
    for (int64_t q = 0; q < kp; q++) {
      const float *e = A + (k0 + 2 * q) * lda + i0, *o = e + lda;
      const int odd = 2 * q + 1 < kc;
      if (q + 1 < kp)
        for (int64_t i = 0; i < mc; i += 16) {
          _mm_prefetch((const char *)(e + 2 * lda + i), _MM_HINT_T0);
          _mm_prefetch((const char *)(e + 3 * lda + i), _MM_HINT_T0);
        }
      for (int64_t p = 0; p < mc; p += MR) {
        int64_t mr = gt__gmin(MR, mc - p);
        __mmask16 m = (__mmask16)((1u << mr) - 1);
        __m512 ve = _mm512_maskz_loadu_ps(m, e + p), vo = _mm512_maskz_loadu_ps(odd ? m : 0, o + p);
        _mm512_mask_storeu_epi32(dst + p * kp + q * MR, 0x0FFF, gt__two_rows_cvt(ve, vo, &den));
      }
    }
  } else {
    gt__bpack_a_grouped(dst, A, lda, i0, mc, k0, kc, 0, &den);
    if (den) gt__bpack_a_grouped(dst, A, lda, i0, mc, k0, kc, 1, &den);
    return;
  }
  /* a float32 denormal somewhere in the block: the integer rounding keeps
   * it, vcvtne2ps2bf16 flushed it */
  if (den) gt__bpack_a(dst, transA, A, lda, i0, mc, k0, kc);
}

/* B panels with vcvtne2ps2bf16 (gt__bpack_b_panels' layout and bits) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static __attribute__((noinline)) void
gt__bpack_bt_cvt(uint32_t *d, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nr,
                 __mmask16 *dn) {
  __mmask16 den = 0;
  const float *src = B + j0 * ldb;
  for (int64_t k = 0; k < kc; k += 32) {
    __m512 r[16], s[16];
    int64_t kn = gt__gmin(32, kc - k), qn = (kn + 1) / 2;
    /* 32 rows read 128 bytes at a time: too short a run for the hardware
     * prefetcher; ask for the next 32 k of every row now */
    int64_t kf = gt__gmin(k + 32, gt__gmax(0, kc - 32));
    for (int64_t i = 0; i < nr; i++) {
      _mm_prefetch((const char *)(src + i * ldb + k0 + kf), _MM_HINT_T0);
      _mm_prefetch((const char *)(src + i * ldb + k0 + kf + 16), _MM_HINT_T0);
    }
    gt__load_tr_pairs_cvt(r, src, ldb, gt__gmin(16, nr), k0 + k, kn, src, 0, &den);
    gt__load_tr_pairs_cvt(s, nr > 16 ? src + 16 * ldb : src, ldb, gt__gmax(0, nr - 16), k0 + k, kn, src, 0, &den);
    uint32_t *dk = d + k / 2 * NR;
    if (qn == 16) {
#pragma GCC unroll 16
      for (int q = 0; q < 16; q++) {
        _mm512_store_ps(dk + q * NR, r[q]);
        _mm512_store_ps(dk + q * NR + 16, s[q]);
      }
    } else {
      for (int64_t q = 0; q < qn; q++) {
        _mm512_store_ps(dk + q * NR, r[q]);
        _mm512_store_ps(dk + q * NR + 16, s[q]);
      }
    }
  }
  *dn |= den;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void gt__bpack_b_cvt(uint32_t *d, int transB, const float *B,
                                                                  int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                                                                  int64_t n) {
  const int64_t kp = (kc + 1) / 2, np = gt__gcdiv(n, NR);
  __mmask16 den = 0;
  if (transB) {
    for (int64_t p = 0; p < np; p++)
      gt__bpack_bt_cvt(d + p * NR * kp, B, ldb, k0, kc, j0 + p * NR, gt__gmin(NR, n - p * NR), &den);
  } else {
    /* rows 2q and 2q + 1 across all the panels: each row's n columns are
     * read in one run (panel by panel, 128 bytes of each of kc rows a page
     * or more apart, the loads waited on L3) */
    for (int64_t q = 0; q < kp; q++) {
      const float *e = B + (k0 + 2 * q) * ldb + j0, *o = e + ldb;
      const int odd = 2 * q + 1 < kc;
      /* and the rows 8 pair steps ahead requested now */
      if (2 * q + 17 < kc)
        for (int64_t j = 0; j < n; j += 16) {
          _mm_prefetch((const char *)(e + 16 * ldb + j), _MM_HINT_T0);
          _mm_prefetch((const char *)(e + 17 * ldb + j), _MM_HINT_T0);
        }
      for (int64_t p = 0; p < np; p++) {
        int64_t nr = gt__gmin(NR, n - p * NR);
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
        __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
        const float *ep = e + p * NR, *op = o + p * NR;
        __m512 e0 = _mm512_maskz_loadu_ps(m0, ep), e1 = _mm512_maskz_loadu_ps(m1, ep + 16);
        __m512 o0 = _mm512_maskz_loadu_ps(odd ? m0 : 0, op), o1 = _mm512_maskz_loadu_ps(odd ? m1 : 0, op + 16);
        uint32_t *dq = d + p * NR * kp + q * NR;
        _mm512_store_si512(dq, gt__two_rows_cvt(e0, o0, &den));
        _mm512_store_si512(dq + 16, gt__two_rows_cvt(e1, o1, &den));
      }
    }
  }
  /* a float32 denormal somewhere: the integer rounding keeps it */
  if (den) gt__bpack_b_panels(d, transB, B, ldb, k0, kc, j0, n);
}

/* ------------------------------------------------------- micro-kernels */

/* C[mr, nr] = alpha * Ap . Bp + beta * C over kp pair steps (beta == 0: C
 * not read). Ap: [kp][MR] pairs, Bp: [kp][NR] pairs (64-byte aligned).
 * Cnext: the tile the next call writes, requested now (see gemm.c). */
typedef void (*gt__bmicro_fn)(int64_t kp, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr,
                              int64_t nr, float alpha, float beta, const float *Cnext);

/* vdpbf16ps: 24 accumulators, two B vectors, one broadcast pair per row.
 * G: the A layout, 1 for [kp][MR] (gt__bpack_a's), 16 for groups of 16
 * pair steps (gt__bpack_a_grouped's); R: the rows computed, 4, 8 or 12 (mr
 * <= R: a tile of a few rows, at the bottom edge of C, does not pay for
 * twelve; every element gets the same operations whatever R). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__bmicro_dp_body(int64_t kp, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr, int64_t nr,
                   float alpha, float beta, const float *Cnext, const int G, const int R) {
  GT__TILE_PREFETCH
  GT__TILE_ROWS(GT__TILE_DECL)
#define GT__ROW(r)                                       \
  if ((r) < R) {                                         \
    __m512bh ar = (__m512bh)_mm512_set1_epi32(a[(r) * st]); \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0);         \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1);         \
  }
  int64_t q = 0;
  if (G == 1) {
    const int64_t st = 1;
#pragma GCC unroll 2
    for (; q < kp; q++) {
      __m512bh b0 = (__m512bh)_mm512_load_si512(Bp + q * NR), b1 = (__m512bh)_mm512_load_si512(Bp + q * NR + 16);
      const int *a = (const int *)(Ap + q * MR);
      GT__TILE_ROWS(GT__ROW)
    }
  } else {
    for (; q + 16 <= kp; q += 16) {
      const int *ag = (const int *)(Ap + q * MR);
      const int64_t st = 16;
#pragma GCC unroll 16
      for (int t = 0; t < 16; t++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(Bp + (q + t) * NR);
        __m512bh b1 = (__m512bh)_mm512_load_si512(Bp + (q + t) * NR + 16);
        const int *a = ag + t;
        GT__TILE_ROWS(GT__ROW)
      }
    }
    /* the last group, w < 16 steps, rows w apart */
    const int *ag = (const int *)(Ap + q * MR);
    const int64_t st = kp - q;
    for (int64_t t = 0; q + t < kp; t++) {
      __m512bh b0 = (__m512bh)_mm512_load_si512(Bp + (q + t) * NR);
      __m512bh b1 = (__m512bh)_mm512_load_si512(Bp + (q + t) * NR + 16);
      const int *a = ag + t;
      GT__TILE_ROWS(GT__ROW)
    }
  }
#undef GT__ROW
  GT__TILE_EPILOGUE
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void gt__bmicro_dp(int64_t kp, const uint32_t *Ap, const uint32_t *Bp,
                                                                float *C, int64_t ldc, int64_t mr, int64_t nr,
                                                                float alpha, float beta, const float *Cnext) {
  if (mr > 8)
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 1, 12);
  else if (mr > 4)
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 1, 8);
  else
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 1, 4);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void gt__bmicro_dp_grp(int64_t kp, const uint32_t *Ap,
                                                                    const uint32_t *Bp, float *C, int64_t ldc,
                                                                    int64_t mr, int64_t nr, float alpha, float beta,
                                                                    const float *Cnext) {
  if (mr > 8)
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 16, 12);
  else if (mr > 4)
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 16, 8);
  else
    gt__bmicro_dp_body(kp, Ap, Bp, C, ldc, mr, nr, alpha, beta, Cnext, 16, 4);
}

/* The fallback: each pair split into two floats (the low half shifted up,
 * the high half masked), two FMAs per pair, odd k first, under DAZ and FTZ:
 * vdpbf16ps's arithmetic with float32 FMAs. */
static void gt__bmicro_fma(int64_t kp, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr,
                           int64_t nr, float alpha, float beta, const float *Cnext) {
  GT__TILE_PREFETCH
  GT__TILE_ROWS(GT__TILE_DECL)
  const unsigned csr = _mm_getcsr();
  /* FTZ (bit 15), DAZ (bit 6), round to nearest (bits 13-14 clear):
   * vdpbf16ps does not consult MXCSR; the flags the loop raises are dropped
   * with the restore, as vdpbf16ps does not update them */
  _mm_setcsr((csr & ~0x6000u) | 0x8040u);
  /* the loads below stay after the mode switch */
  __asm__ volatile("" ::: "memory");
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  for (int64_t q = 0; q < kp; q++) {
    __m512i b0 = _mm512_load_si512(Bp + q * NR), b1 = _mm512_load_si512(Bp + q * NR + 16);
    __m512 b0e = _mm512_castsi512_ps(_mm512_slli_epi32(b0, 16)), b0o = _mm512_castsi512_ps(_mm512_and_si512(b0, hi));
    __m512 b1e = _mm512_castsi512_ps(_mm512_slli_epi32(b1, 16)), b1o = _mm512_castsi512_ps(_mm512_and_si512(b1, hi));
    const uint32_t *a = Ap + q * MR;
#define GT__ROW(r)                                                      \
  {                                                                     \
    uint32_t pr = a[r], ue = pr << 16, uo = pr & 0xffff0000u;           \
    float fe, fo;                                                       \
    memcpy(&fe, &ue, 4);                                                \
    memcpy(&fo, &uo, 4);                                                \
    __m512 ae = _mm512_set1_ps(fe), ao = _mm512_set1_ps(fo);            \
    c##r##0 = _mm512_fmadd_ps(ae, b0e, _mm512_fmadd_ps(ao, b0o, c##r##0)); \
    c##r##1 = _mm512_fmadd_ps(ae, b1e, _mm512_fmadd_ps(ao, b1o, c##r##1)); \
  }
    GT__TILE_ROWS(GT__ROW)
#undef GT__ROW
  }
  /* every accumulator is final before the mode is restored (both asm
   * statements and the MXCSR writes are volatile, so they keep their order) */
  __asm__ volatile("" : "+v"(c00), "+v"(c01), "+v"(c10), "+v"(c11), "+v"(c20), "+v"(c21), "+v"(c30), "+v"(c31),
                   "+v"(c40), "+v"(c41), "+v"(c50), "+v"(c51));
  __asm__ volatile("" : "+v"(c60), "+v"(c61), "+v"(c70), "+v"(c71), "+v"(c80), "+v"(c81), "+v"(c90), "+v"(c91),
                   "+v"(c100), "+v"(c101), "+v"(c110), "+v"(c111));
  _mm_setcsr(csr);
  GT__TILE_EPILOGUE
}

/* ------------------------------------------------------- small products */

/* A few rows times B^T (decoding one token: x [1, K] times W [N, K]^T), as
 * gt_sgemm does it: packing would convert all of W for one use, so each
 * output is a dot product of two contiguous rows, both rounded to bf16 in
 * registers; the products are exact in float32 and summed in 16 lanes, then
 * across them: another order than the packed kernel's, within the same
 * bound. Every output is one thread's fixed-order sum, so the bits do not
 * depend on threads. The fallback uses it; the vdpbf16ps path the faster
 * gt__bgemv_bt_cvt below, with the same bits. */
#define GT__BGEMV_ROWS 4
#define GT__RND_PS(v) _mm512_castsi512_ps(gt__bf16_round16(v))
/* Its columns j0 <= j < j1. The vector code stays out of the parallel
 * regions of this section (here and in gt__bgemv_bt_cvt): clang outlines a
 * region into a function without the enclosing function's target
 * attribute, so with -march below AVX-512 an __m512 passed or returned
 * there is an ABI error, and always_inline AVX-512 code inlined there
 * crashes clang 14's instruction selection. The region calls this function
 * with scalars and pointers only (which clang then does not inline: the
 * region lacks its features; gcc's regions keep the target, and gcc may
 * inline it). */
static void gt__bgemv_bt_cols(int64_t j0, int64_t j1, int64_t M, int64_t K, float alpha, const float *A, int64_t lda,
                              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  GT__GEMV_BT_COLS(GT__RND_PS, j0, j1)
}

/* The arguments of both row-times-B^T paths' column chunks. */
typedef struct gt__bgemv_args {
  int64_t M, K, lda, ldb, ldc, K16;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int side;
} gt__bgemv_args;

static void gt__bgemv_chunk(const void *arg, int64_t j0, int64_t j1) {
  const gt__bgemv_args *g = arg;
  gt__bgemv_bt_cols(j0, j1, g->M, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->C, g->ldc);
}

/* chunks of 64 columns, handed out dynamically (gt__gemm_cols) */
static void gt__bgemv_bt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                         int64_t ldb, float beta, float *C, int64_t ldc) {
  const gt__bgemv_args g = {M, K, lda, ldb, ldc, 0, alpha, beta, A, B, C, 0};
  gt__gemm_cols(N, K, 64, gt__bgemv_chunk, &g);
}

/* The same sums, faster, on the vdpbf16ps path: rounding both operands in
 * registers (8 integer operations per 16 floats each) made the MLP's rows
 * a third as fast as float32's. The M <= 4 rows of A are rounded once per
 * call into the calling thread's packing buffer (zero-padded to whole
 * vectors), and the rows of B with vcvtne2ps2bf16, 32 floats at a time,
 * widened back by one masked word permute per 16; a pair of vectors holding
 * a float32 denormal (which it would flush, gt_f32_to_bf16 keeps) takes the
 * integer rounding. Each output gets the same FMAs in the same order as
 * gt__bgemv_bt's (lane l sums k = l mod 16 in k order, then
 * _mm512_reduce_add_ps), so the bits are the same; rows of B are converted
 * once for all M rows of A. 0, or -1 when the buffer cannot grow. */
/* x (32 floats in two vectors) rounded to bf16 values, as GT__RND_PS */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__round32_cvt(__m512 x0, __m512 x1, __m512 *r0, __m512 *r1) {
  if (__builtin_expect((_mm512_fpclass_ps_mask(x0, GT__FPCLASS_DENORMAL) |
                        _mm512_fpclass_ps_mask(x1, GT__FPCLASS_DENORMAL)) != 0,
                       0)) {
    *r0 = GT__RND_PS(x0), *r1 = GT__RND_PS(x1);
    return;
  }
  /* words 0-15: x0's bf16, 16-31: x1's; each to the top half of a lane */
  const __m512i lo = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3,
                                      0, 2, 0, 1, 0, 0, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  __m512i w = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
  *r0 = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, lo, w));
  *r1 = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, hi, w));
}

/* Outputs (i < MM, j in [j0, j0 + JB)): JB rows of B at once, each output
 * its own accumulator. The order within an output is fixed (one FMA chain
 * per lane), so the FMA latency bounds a single dot product: rows of B side
 * by side give the core independent chains. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__bgemv_rows_cvt(int64_t j0, int64_t K, float alpha, const float *a, int64_t K16, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc, const int MM, const int JB) {
  const __mmask16 tail = (__mmask16)((1u << (K % 16)) - 1);
  __m512 acc[4][4];
  #pragma GCC unroll 4
  for (int i = 0; i < MM; i++)
    #pragma GCC unroll 4
    for (int jb = 0; jb < JB; jb++) acc[i][jb] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512 r0[4], r1[4];
    #pragma GCC unroll 4
    for (int jb = 0; jb < JB; jb++) {
      const float *b = B + (j0 + jb) * ldb + k;
      gt__round32_cvt(_mm512_loadu_ps(b), _mm512_loadu_ps(b + 16), &r0[jb], &r1[jb]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < MM; i++) {
      __m512 a0 = _mm512_load_ps(a + i * K16 + k), a1 = _mm512_load_ps(a + i * K16 + k + 16);
      #pragma GCC unroll 4
      for (int jb = 0; jb < JB; jb++) acc[i][jb] = _mm512_fmadd_ps(a0, r0[jb], acc[i][jb]);
      #pragma GCC unroll 4
      for (int jb = 0; jb < JB; jb++) acc[i][jb] = _mm512_fmadd_ps(a1, r1[jb], acc[i][jb]);
    }
  }
  /* the rest: a whole vector, then the masked tail, as gt__bgemv_bt */
  for (; k < K; k += 16) {
    __mmask16 m = k + 16 <= K ? (__mmask16)0xFFFF : tail;
    #pragma GCC unroll 4
    for (int jb = 0; jb < JB; jb++) {
      __m512 r = GT__RND_PS(_mm512_maskz_loadu_ps(m, B + (j0 + jb) * ldb + k));
      #pragma GCC unroll 4
      for (int i = 0; i < MM; i++) acc[i][jb] = _mm512_fmadd_ps(_mm512_load_ps(a + i * K16 + k), r, acc[i][jb]);
    }
  }
  #pragma GCC unroll 4
  for (int i = 0; i < MM; i++)
    #pragma GCC unroll 4
    for (int jb = 0; jb < JB; jb++) {
      float dot = alpha * _mm512_reduce_add_ps(acc[i][jb]);
      float *c = C + i * ldc + j0 + jb;
      *c = beta == 0.0f ? dot : dot + beta * *c;
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) void
gt__bgemv_row_cvt(int64_t N0, int64_t N1, int64_t K, float alpha, const float *a, int64_t K16, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc, const int MM, int side) {
  int64_t j = N0;
  if (side)
    for (; j + 4 <= N1; j += 4) gt__bgemv_rows_cvt(j, K, alpha, a, K16, B, ldb, beta, C, ldc, MM, 4);
  for (; j < N1; j++) gt__bgemv_rows_cvt(j, K, alpha, a, K16, B, ldb, beta, C, ldc, MM, 1);
}

/* Columns j0 <= j < j1 for M rows of A: the vector code called from
 * gt__bgemv_bt_cvt's parallel region (see gt__bgemv_bt_cols) */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void
gt__bgemv_cols_cvt(int64_t j0, int64_t j1, int64_t M, int64_t K, float alpha, const float *a, int64_t K16,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int side) {
  if (M == 1)
    gt__bgemv_row_cvt(j0, j1, K, alpha, a, K16, B, ldb, beta, C, ldc, 1, side);
  else if (M == 2)
    gt__bgemv_row_cvt(j0, j1, K, alpha, a, K16, B, ldb, beta, C, ldc, 2, side);
  else if (M == 3)
    gt__bgemv_row_cvt(j0, j1, K, alpha, a, K16, B, ldb, beta, C, ldc, 3, side);
  else
    gt__bgemv_row_cvt(j0, j1, K, alpha, a, K16, B, ldb, beta, C, ldc, 4, side);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void
gt__bgemv_chunk_cvt(const void *arg, int64_t j0, int64_t j1) {
  const gt__bgemv_args *g = arg;
  gt__bgemv_cols_cvt(j0, j1, g->M, g->K, g->alpha, g->A, g->K16, g->B, g->ldb, g->beta, g->C, g->ldc, g->side);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static int gt__bgemv_bt_cvt(int64_t M, int64_t N, int64_t K, float alpha,
                                                                  const float *A, int64_t lda, const float *B,
                                                                  int64_t ldb, float beta, float *C, int64_t ldc) {
  const int64_t K16 = gt__gcdiv(K, 16) * 16;
  gt__gemm_cache *cache = gt__gemm_cache_get();
  if (!cache || gt__gemm_grow(&cache->a, &cache->acap, 4 * (size_t)(M * K16))) return -1;
  float *a = cache->a;
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K16; k += 16) {
      __mmask16 m = (__mmask16)(k + 16 <= K ? 0xFFFF : (1u << (K - k)) - 1);
      _mm512_store_ps(a + i * K16 + k, GT__RND_PS(_mm512_maskz_loadu_ps(m, A + i * lda + k)));
    }
  /* rows side by side (four FMA chains at once) when B comes from the
   * caches (the MLP's weights between calls: as fast as float32's one
   * chain per output); one row after another, a single sequential stream,
   * when B is larger than half of L3 and comes from memory (the vocabulary
   * head: side by side ran at half the rate) */
  const int side = (double)N * (double)ldb * 4 <= (double)gt__gemm_l3_bytes() / 2;
  const gt__bgemv_args g = {M, K, 0, ldb, ldc, K16, alpha, beta, a, B, C, side};
  gt__gemm_cols(N, K, 64, gt__bgemv_chunk_cvt, &g);
  return 0;
}

/* ------------------------------------------- quantized weights (quant.h) */

/* gt_qbgemm's B operand: a stored matrix W (the driver hands it through as
 * B; ldb unused) dequantized through kernels/quant_lanes.h and rounded by
 * the integer rounding as it is packed, into the pairs gt__bpack_b_panels
 * (and gt__bpack_b_cvt, the same bits) write from the dequantized float
 * matrix: the micro-kernels, the blocking and so the bits are gt_bgemm's.
 * A bf16-stored weight rounds to itself. */
static void gt__qbpack_b(uint32_t *d, int tW, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                         int64_t n) {
  (void)ldb;
  const gt_qweight *w = (const gt_qweight *)(const void *)B;
  const int64_t cols = w->cols, np = gt__gcdiv(n, NR), kp = (kc + 1) / 2;
  const __m512 lut = gt__qlut();
  if (!tW) {
    /* op(W) = W [K, N]: rows 2q and 2q + 1 across all the panels */
    for (int64_t q = 0; q < kp; q++) {
      const int64_t e = k0 + 2 * q, o = e + 1, be = e * cols + j0, bo = o * cols + j0;
      const int odd = 2 * q + 1 < kc;
      const float rse = gt__qrow_scale(w, e), rso = odd ? gt__qrow_scale(w, o) : 0.0f;
      for (int64_t p = 0; p < np; p++) {
        const int64_t nr = gt__gmin(NR, n - p * NR), j = p * NR;
        __m512i e0 = gt__bf16_round16(gt__qdeq16(w, be + j, gt__gmin(16, nr), rse, lut));
        __m512i e1 = gt__bf16_round16(gt__qdeq16(w, be + j + 16, nr - 16, rse, lut));
        __m512i o0 = _mm512_setzero_si512(), o1 = _mm512_setzero_si512();
        if (odd) {
          o0 = gt__bf16_round16(gt__qdeq16(w, bo + j, gt__gmin(16, nr), rso, lut));
          o1 = gt__bf16_round16(gt__qdeq16(w, bo + j + 16, nr - 16, rso, lut));
        }
        uint32_t *dq = d + p * NR * kp + q * NR;
        _mm512_store_si512(dq, gt__pair(e0, o0));
        _mm512_store_si512(dq + 16, gt__pair(e1, o1));
      }
    }
    return;
  }
  /* op(W) = W^T, W [N, K]: 32 k of a row -> 16 pairs (gt__row_pairs on
   * dequantized lanes), 16 rows at a time transposed */
  const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                       23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t p = 0; p < np; p++) {
    const int64_t nr = gt__gmin(NR, n - p * NR), r0 = j0 + p * NR;
    uint32_t *dp = d + p * NR * kp;
    for (int64_t k = 0; k < kc; k += 32) {
      __m512 r[16], s[16];
      const int64_t kn = gt__gmin(32, kc - k), qn = (kn + 1) / 2;
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) {
        r[i] = _mm512_setzero_ps(), s[i] = _mm512_setzero_ps();
        if (i < nr) {
          const int64_t b = (r0 + i) * cols + k0 + k;
          const float rs = gt__qrow_scale(w, r0 + i);
          __m512i a0 = gt__bf16_round16(gt__qdeq16(w, b, gt__gmin(16, kn), rs, lut));
          __m512i a1 = gt__bf16_round16(gt__qdeq16(w, b + 16, kn - 16, rs, lut));
          r[i] = _mm512_castsi512_ps(_mm512_permutex2var_epi16(a0, idx, a1));
        }
        if (i + 16 < nr) {
          const int64_t b = (r0 + 16 + i) * cols + k0 + k;
          const float rs = gt__qrow_scale(w, r0 + 16 + i);
          __m512i a0 = gt__bf16_round16(gt__qdeq16(w, b, gt__gmin(16, kn), rs, lut));
          __m512i a1 = gt__bf16_round16(gt__qdeq16(w, b + 16, kn - 16, rs, lut));
          s[i] = _mm512_castsi512_ps(_mm512_permutex2var_epi16(a0, idx, a1));
        }
      }
      gt__tr16(r);
      gt__tr16(s);
      uint32_t *dk = dp + k / 2 * NR;
      for (int64_t q = 0; q < qn; q++) {
        _mm512_store_ps(dk + q * NR, r[q]);
        _mm512_store_ps(dk + q * NR + 16, s[q]);
      }
    }
  }
}

/* gt__bgemv_bt's sums (both operands rounded in registers, lane l sums k
 * = l mod 16 in k order, the last partial vector masked, then
 * _mm512_reduce_add_ps) with row j of W dequantized in registers: the bits
 * of gt_bgemm's row products on the dequantized matrix. */
typedef struct gt__qbgemv_args {
  int64_t M, K, lda, ldc;
  float alpha, beta;
  const float *A;
  const gt_qweight *W;
  float *C;
} gt__qbgemv_args;

static void gt__qbgemv_chunk(const void *arg, int64_t j0, int64_t j1) {
  const gt__qbgemv_args *g = arg;
  const int64_t M = g->M, K = g->K;
  const __m512 lut = gt__qlut();
  for (int64_t j = j0; j < j1; j++) {
    __m512 acc[GT__BGEMV_ROWS];
    for (int64_t i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
    const float rs = gt__qrow_scale(g->W, j);
    for (int64_t k = 0; k < K; k += 16) {
      const int64_t kn = gt__gmin(16, K - k);
      const __mmask16 m = (__mmask16)(kn >= 16 ? 0xFFFF : (1u << kn) - 1);
      const __m512 b = GT__RND_PS(gt__qdeq16(g->W, j * K + k, kn, rs, lut));
      for (int64_t i = 0; i < M; i++)
        acc[i] = _mm512_fmadd_ps(GT__RND_PS(_mm512_maskz_loadu_ps(m, g->A + i * g->lda + k)), b, acc[i]);
    }
    for (int64_t i = 0; i < M; i++) {
      float dot = g->alpha * _mm512_reduce_add_ps(acc[i]);
      float *c = g->C + i * g->ldc + j;
      *c = g->beta == 0.0f ? dot : dot + g->beta * *c;
    }
  }
}

/* ---------------------------------------------------------------- driver */

/* The A packer of the pairs path: the vdpbf16ps kernel's (dp) or its
 * emulation's, A as floats or as bf16 patterns (a16); the grouped layout
 * where the dp kernel reads A not transposed (gt__bmicro_dp_grp) */
static gt__gemm_pack_a_fn gt__bpack_a_for(int dp, int transA, int a16) {
  if (a16) return dp && !transA ? gt__bpack_a_hg : gt__bpack_a_h;
  return dp ? gt__bpack_a_cvt : gt__bpack_a;
}

/* 0, or -1 when the buffers could not grow (the caller then takes the
 * copies path) */
static int gt__bgemm_packed(gt__bmicro_fn micro, int transA, int transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc, const gt__gemm_epi *epi) {
  pthread_once(&gt__bblock_once, gt__bblock_init);
  /* the float32 kernel's loops (kernels/gemm.c), on pairs of k */
  const int dp = micro == gt__bmicro_dp;
  const gt__gemm_kernel kern = {&gt__bblocks, 2, gt__bpack_a_for(dp, transA, epi && epi->a16),
                                dp ? gt__bpack_b_cvt : gt__bpack_b_panels,
                                dp && !transA ? gt__bmicro_dp_grp : micro};
  return gt__gemm_run(&kern, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
}

int gt__qbgemm_packed(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc, int a16, int round) {
  const int path = gt__bgemm_path();
  /* (callers check gt__kernels_avx512() first: the AVX2 copy's widened
   * path packs stored weights in kernels/gemm_avx2.c, gt__qgemm_avx2) */
  if (path == GT_BGEMM_COPY || !gt__kernels_avx512()) return -1;
  if (M <= GT__BGEMV_ROWS && transW && !transA) {
    if (a16) { /* (the row kernel reads floats; else the caller's panels) */
      if (!(A = gt__rows_widened((const uint16_t *)(const void *)A, lda, M, K))) return -1;
      lda = K;
    }
    const gt__qbgemv_args g = {M, K, lda, ldc, alpha, beta, A, W, C};
    gt__gemm_cols(N, K, 64, gt__qbgemv_chunk, &g);
    if (round) gt_bf16_round_rows(C, ldc, C, ldc, M, N); /* a few rows */
    return 0;
  }
  const gt__gemm_epi epi = {a16, round ? gt_bf16_round_rows : NULL, NULL, NULL, 0};
  /* the widened path dequantizes and rounds in gt_sgemm's packing; the
   * AMX tiles take this file's B panels (gemm_amx.h: the same layout) */
  if (path == GT_BGEMM_WIDE) return gt__wqgemm_packed(transA, transW, M, N, K, alpha, A, lda, W, beta, C, ldc, &epi);
  _Static_assert(NR == 32, "the AMX kernel reads gt__qbpack_b's panels as its own 32-column B panels");
  if (path == GT_BGEMM_AMX)
    return gt__amx_bgemm_packed_with(gt__qbpack_b, transA, transW, M, N, K, alpha, A, lda,
                                     (const float *)(const void *)W, W->cols, beta, C, ldc, &epi);
  pthread_once(&gt__bblock_once, gt__bblock_init);
  const int dp = path == GT_BGEMM_DP;
  const gt__gemm_kernel kern = {&gt__bblocks, 2, gt__bpack_a_for(dp, transA, a16), gt__qbpack_b,
                                dp && !transA ? gt__bmicro_dp_grp : dp ? gt__bmicro_dp : gt__bmicro_fma};
  return gt__gemm_run(&kern, transA, transW, M, N, K, alpha, A, lda, (const float *)(const void *)W, W->cols, beta,
                      C, ldc, &epi);
}

GT__TARGET_END
#else
int gt__qbgemm_packed(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc, int a16, int round) {
  (void)a16, (void)round, (void)transA, (void)transW, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)W, (void)beta, (void)C, (void)ldc;
  return -1;
}
#endif /* GT__BG_X86 */

/* gt_bgemm_c16's packing where a path has no tile loop to do it in: the
 * M x N block of C (already rounded or not: the patterns are the same) */
static void gt__pack_c(uint16_t *C16, int64_t ldc16, const float *C, int64_t ldc, int64_t M, int64_t N) {
  if (ldc == N && ldc16 == N) {
    gt_bf16_pack(C16, C, M * N);
    return;
  }
  for (int64_t i = 0; i < M; i++) gt_bf16_pack(C16 + i * ldc16, C + i * ldc, N);
}

/* What the paths without a tile loop do after computing C: round it
 * (gt_bgemm_rnd's form) and pack it to c16 (gt_bgemm_c16's), each in a
 * pass of its own */
static void gt__finish_c(const gt_bgemm_form *f, float *C, int64_t ldc, int64_t M, int64_t N) {
  if (f->round) gt__round_c(C, ldc, M, N);
  if (f->c16) gt__pack_c(f->c16, f->ldc16, C, ldc, M, N);
}

/* The packed paths' product (0), or -1 (no buffers) or 1 (epi->c16 not
 * served) with nothing written */
static int gt__bgemm_packed_path(int path, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                 int64_t ldc, const gt__gemm_epi *epi) {
  if (path == GT_BGEMM_WIDE && gt__kernels_path() == GT__PATH_AVX2)
    return gt__sgemm_avx2(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, epi);
#if defined(GT__BG_X86)
  if (path == GT_BGEMM_DP || path == GT_BGEMM_EMUL)
    return gt__bgemm_packed(path == GT_BGEMM_DP ? gt__bmicro_dp : gt__bmicro_fma, transA, transB, M, N, K, alpha, A,
                            lda, B, ldb, beta, C, ldc, epi);
  if (path == GT_BGEMM_WIDE) return gt__wgemm_packed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
  if (path == GT_BGEMM_AMX)
    return gt__amx_cvt() ? gt__amx_bgemm_packed_with(gt__bpack_b_cvt, transA, transB, M, N, K, alpha, A, lda, B, ldb,
                                                     beta, C, ldc, epi)
                         : gt__amx_bgemm_packed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
#else
  (void)path, (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
  (void)ldb, (void)beta, (void)C, (void)ldc, (void)epi;
#endif
  return -1;
}

/* gt_bgemm_x: the packed paths read a16 with their 2-byte packers and
 * round each C tile as their loops finish it, or write it to c16 (with one
 * K block: gt__gemm_epi); the others widen a16 into a float32 copy, compute
 * C, then round it or pack it to c16 in a pass of their own. */
static void gt__bgemm_any(const gt_bgemm_form *f, int transA, int transB, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
  const gt_bgemm_form none = {NULL, 0, NULL, 0};
  if (!f) f = &none;
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    gt__gemm_beta_only(M, N, beta, C, ldc);
    gt__finish_c(f, C, ldc, M, N);
    return;
  }
  const int path = gt__bgemm_path();
  const int rows = path != GT_BGEMM_COPY && M <= GT__BGEMV_ROWS && !transA && transB;
  if (f->a16 && (rows || path == GT_BGEMM_COPY)) {
    /* the paths without 2-byte packers: A widened first (exact), in its
     * own layout (sr rows of sc) */
    const int64_t sr = transA ? K : M, sc = transA ? M : K;
    float *own = NULL, *a = rows ? gt__rows_widened(f->a16, lda, M, K) : NULL;
    if (!a && (a = own = malloc((size_t)(sr * sc) * sizeof(float) + 1)))
      for (int64_t i = 0; i < sr; i++) gt_bf16_unpack(a + i * sc, f->a16 + i * lda, sc);
    if (a) {
      const gt_bgemm_form g = {NULL, f->round, f->c16, f->ldc16};
      gt__bgemm_any(&g, transA, transB, M, N, K, alpha, a, sc, B, ldb, beta, C, ldc);
      free(own);
    } else {
      gt__bgemm_scalar(f->a16, transA, transB, M, N, K, alpha, NULL, lda, B, ldb, beta, C, ldc);
      gt__finish_c(f, C, ldc, M, N);
    }
    return;
  }
  /* a few rows times B^T: one row kernel (FMAs on rounded operands, the
   * same sums) for the AVX2 copy and every AVX-512 path, converting with
   * vcvtne2ps2bf16 where the CPU has it */
  if (rows && gt__kernels_path() == GT__PATH_AVX2) {
    gt__sgemm_avx2(0, 1, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, NULL);
    gt__finish_c(f, C, ldc, M, N);
    return;
  }
#if defined(GT__BG_X86)
  if (rows) {
    if (gt__bgemm_kernel() != GT__BG_DP || gt__bgemv_bt_cvt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
      gt__bgemv_bt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gt__finish_c(f, C, ldc, M, N);
    return;
  }
#endif
  const float *Ap = f->a16 ? (const float *)(const void *)f->a16 : A;
  /* bf16 tiles where the loops can write them (else 1: rounded into C,
   * then packed) */
  const gt__gemm_epi pack_epi = {f->a16 != NULL, NULL, gt_bf16_pack_rows, f->c16, f->ldc16};
  const gt__gemm_epi plain_epi = {f->a16 != NULL, f->round ? gt_bf16_round_rows : NULL, NULL, NULL, 0};
  for (int pass = f->c16 ? 0 : 1; pass < 2; pass++) {
    const int rc = gt__bgemm_packed_path(path, transA, transB, M, N, K, alpha, Ap, lda, B, ldb, beta, C, ldc,
                                         pass == 0 ? &pack_epi : &plain_epi);
    if (rc == 0) {
      if (pass == 1 && f->c16) gt__pack_c(f->c16, f->ldc16, C, ldc, M, N);
      return;
    }
    if (rc < 0) break; /* no buffers: the copies */
  }
  if (f->a16) { /* no packing buffers: the scalar sums, reading the patterns */
    gt__bgemm_scalar(f->a16, transA, transB, M, N, K, alpha, NULL, lda, B, ldb, beta, C, ldc);
  } else {
    gt__bgemm_copy(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gt__finish_c(f, C, ldc, M, N);
}

void gt_bgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  gt__bgemm_any(NULL, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gt_bgemm_rnd(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const gt_bgemm_form f = {NULL, 1, NULL, 0};
  gt__bgemm_any(&f, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gt_bgemm_c16(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, uint16_t *C16, int64_t ldc16) {
  const gt_bgemm_form f = {NULL, 0, C16, ldc16};
  gt__bgemm_any(&f, transA, transB, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

void gt_bgemm_x(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const gt_bgemm_form *f) {
  if (f && f->c16) beta = 0.0f;
  gt__bgemm_any(f, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
