/* gt_bgemm on AMX-BF16 tiles (kernels/gemm_amx.h; the path choice is
 * kernels/bf16_path.c's).
 *
 * The loops, blocks, tasks and buffers are kernels/gemm.c's (gt__gemm_run),
 * on pairs of k as in kernels/gemm_bf16.c: a packed element is two bf16
 * (k = 2p in the low half, 2p + 1 in the high half, rounded by the integer
 * rounding of bf16.h, an odd K block padded with a zero). A panel: 16 rows
 * of op(A) as [16][ku] pairs, row after row (a tile's rows, ku * 4 bytes
 * apart); B panel: [ku][32] pairs (the layout tdpbf16ps calls VNNI: row q
 * of a B tile is pair step q, lane j column j). The micro-kernel keeps the
 * 16 x 32 tile of C in two tile registers and, per 16 pair steps, loads one
 * A tile (16 x 16 pairs) and two B tiles (16 x 16 pairs each) and runs two
 * tdpbf16ps; the last ku mod 16 steps use narrower tiles of the same
 * configuration. The float32 results go through a buffer into C with
 * alpha and beta as the other kernels' epilogue (a whole tile with alpha 1
 * and beta 0 straight into C: the same bits). Measured on the project's
 * Xeon with AMX (docs/performance.md): loading the tile configuration per
 * call took a quarter of the kernel, so a thread loads it once a product;
 * 32 x 32 blocks in four C tiles (one load per tdpbf16ps instead of 1.5)
 * ran no faster, so the kernel stays 16 x 32.
 *
 * Arithmetic (Intel's pseudo-code for tdpbf16ps): per element and pair
 * step, acc += a[2p] b[2p], then acc += a[2p + 1] b[2p + 1], float32
 * with round to nearest even, bf16 denormal inputs read as zero and
 * denormal results flushed (MXCSR not consulted): the even k first where
 * vdpbf16ps takes the odd first, so the bits can differ from the vdpbf16ps
 * path's in the last place; within the same bound (kernels/gemm_bf16.c).
 * Every tile is one task's in a fixed k order: the bits do not depend on
 * the thread count.
 *
 * The AMX instructions are written as inline assembly (the assembler knows
 * them whatever the compiler targets); nothing here runs unless
 * gt__cpu_amx_bf16() said the CPU, the OS and the process's permission
 * allow it. tests/test_bf16_paths.c checks it against the bf16 reference
 * where it runs (the project's Intel Xeon exposes AMX; its other machines
 * do not and skip that test, saying so). */
#include "kernels/gemm_amx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/gemm_blocking.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/target.h"

GT__TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "kernels/bf16_cvt.h"
#include "kernels/bf16_lanes.h"
#include "kernels/gemm_tr16.h"

enum { AMR = 16, ANR = 32 };

static gt__gemm_blocks gt__ablocks;
static pthread_once_t gt__ablock_once = PTHREAD_ONCE_INIT;

static void gt__ablock_init(void) {
  int64_t l2 = gt__gemm_l2_bytes(), l3 = gt__gemm_l3_bytes();
  /* as the vdpbf16ps kernel's (kernels/gemm_bf16.c): K blocks of up to 1024
   * k, so an A block of 256 rows takes half of L2 */
  int64_t kc = gt__gmax(256, gt__gmin(1024, l2 / 2 / (256 * 2) / 32 * 32));
  gt__ablocks = (gt__gemm_blocks){.mr = AMR,
                                  .nr = ANR,
                                  .kc_max = kc,
                                  .kalign = 32,
                                  .mc_max = gt__gmax(4 * AMR, gt__gmin(4096, l2 / 2 / (kc * 2) / AMR * AMR)),
                                  .nc_max = gt__gmax(16 * ANR, gt__gmin(8192, l3 / 2 / (kc * 2) / ANR * ANR))};
}

/* pairs of two k: lo from the even k's rounded lanes, hi from the odd's */
static inline __attribute__((always_inline)) __m512i gt__apair(__m512 even, __m512 odd) {
  return _mm512_or_si512(_mm512_srli_epi32(gt__bf16_round16(even), 16), gt__bf16_round16(odd));
}

static inline __attribute__((always_inline)) __mmask16 gt__am16(int64_t n) {
  return (__mmask16)(n >= 16 ? 0xFFFF : n > 0 ? (1u << n) - 1 : 0);
}

/* One row of op(A) or column of op(B) that runs along k in memory (stride
 * 1): kc k from src -> ceil(kc / 2) pairs at dst[0], dst[st], dst[2 st]... */
static void gt__apairs_run(uint32_t *dst, int64_t st, const float *src, int64_t kc) {
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  for (int64_t k = 0; k < kc; k += 32) {
    const int64_t kn = gt__gmin(32, kc - k), qn = (kn + 1) / 2;
    __m512 x0 = _mm512_maskz_loadu_ps(gt__am16(kn), src + k), x1 = _mm512_maskz_loadu_ps(gt__am16(kn - 16), src + k + 16);
    __m512i p = gt__apair(_mm512_permutex2var_ps(x0, ev, x1), _mm512_permutex2var_ps(x0, od, x1));
    if (st == 1) {
      _mm512_mask_storeu_epi32(dst + k / 2, gt__am16(qn), p);
    } else {
      uint32_t t[16];
      _mm512_storeu_si512(t, p);
      for (int64_t q = 0; q < qn; q++) dst[(k / 2 + q) * st] = t[q];
    }
  }
}

/* Rows 2q and 2q + 1 of a matrix whose other index runs along memory
 * (stride 1): n lanes from e and o -> n pairs at dst[0..n) */
static inline __attribute__((always_inline)) void gt__apairs_rows(uint32_t *dst, const float *e, const float *o,
                                                                  int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = gt__am16(n - j);
    __m512 ve = _mm512_maskz_loadu_ps(m, e + j), vo = o ? _mm512_maskz_loadu_ps(m, o + j) : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(dst + j, m, gt__apair(ve, vo));
  }
}

/* A block [mc, kc] from (i0, k0) into 16-row panels of [16][ku] pairs,
 * rows past mc zero: the body of both A packers below, with ROW(d, src, kc)
 * writing one row of op(A) that runs along k (A not transposed) and
 * PAIR(ve, vo) making the pair lanes of rows 2q and 2q + 1 of A (A
 * transposed). Transposed, 16 pair steps' lanes are transposed into 16
 * rows of the panel, and the 32 rows of A behind those steps are read
 * across all the panels before the next 32: each row is then one run of mc
 * floats, where panel by panel every 64 bytes came from another page (in
 * perf of a 12-layer bf16 step, A's packing then took 1.4 times the
 * samples it takes now, against the same tile time). */
#define GT__APACK_A_BODY(ROW, PAIR)                                                                              \
  const int64_t ku = (kc + 1) / 2;                                                                               \
  for (int64_t p = 0; p < mc; p += AMR) {                                                                        \
    const int64_t mr = gt__gmin(AMR, mc - p);                                                                    \
    memset(dst + (p + mr) * ku, 0, sizeof(uint32_t) * (size_t)((AMR - mr) * ku));                                \
    if (!transA)                                                                                                 \
      for (int64_t r = 0; r < mr; r++) ROW(dst + (p + r) * ku, A + (i0 + p + r) * lda + k0, kc);                 \
  }                                                                                                              \
  if (transA)                                                                                                    \
    for (int64_t q0 = 0; q0 < ku; q0 += 16) {                                                                    \
      const int64_t qn = gt__gmin(16, ku - q0);                                                                  \
      const __mmask16 mq = gt__am16(qn);                                                                         \
      for (int64_t p = 0; p < mc; p += AMR) {                                                                    \
        const int64_t mr = gt__gmin(AMR, mc - p);                                                                \
        const __mmask16 mm = gt__am16(mr);                                                                       \
        __m512 v[16];                                                                                            \
        _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++) {                                                  \
          v[t] = _mm512_setzero_ps();                                                                            \
          if (t < qn) {                                                                                          \
            const int64_t q = q0 + t;                                                                            \
            const float *e = A + (k0 + 2 * q) * lda + i0 + p;                                                    \
            __m512 ve = _mm512_maskz_loadu_ps(mm, e);                                                            \
            __m512 vo = 2 * q + 1 < kc ? _mm512_maskz_loadu_ps(mm, e + lda) : _mm512_setzero_ps();               \
            v[t] = _mm512_castsi512_ps(PAIR(ve, vo));                                                            \
          }                                                                                                      \
        }                                                                                                        \
        gt__tr16(v);                                                                                             \
        for (int64_t r = 0; r < mr; r++)                                                                         \
          _mm512_mask_storeu_epi32(dst + (p + r) * ku + q0, mq, _mm512_castps_si512(v[r]));                      \
      }                                                                                                          \
    }

/* with the integer rounding (bf16_lanes.h) */
#define GT__ROW_INT(d, src, kc) gt__apairs_run((d), 1, (src), (kc))
#define GT__PAIR_INT(ve, vo) gt__apair((ve), (vo))
static void gt__apack_a(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                        int64_t kc) {
  GT__APACK_A_BODY(GT__ROW_INT, GT__PAIR_INT)
}

/* with vcvtne2ps2bf16 (kernels/bf16_cvt.h): one conversion where the
 * integer rounding takes two roundings and a merge per 16 pairs. The same
 * bits: a block holding a float32 denormal (which the conversion flushes)
 * is packed again by gt__apack_a. (Both macros mark denormals in the
 * packer's own `den`.) */
#define GT__ROW_CVT(d, src, kc)                                                                                  \
  for (int64_t k = 0; k < (kc); k += 32) {                                                                       \
    const int64_t kn = gt__gmin(32, (kc) - k);                                                                   \
    _mm512_mask_storeu_epi32((d) + k / 2, gt__am16((kn + 1) / 2), gt__row_pairs_cvt((src) + k, kn, &den));       \
  }
#define GT__PAIR_CVT(ve, vo) gt__two_rows_cvt((ve), (vo), &den)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static void
gt__apack_a_cvt(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                int64_t kc) {
  __mmask16 den = 0;
  GT__APACK_A_BODY(GT__ROW_CVT, GT__PAIR_CVT)
  if (den) gt__apack_a(dst, transA, A, lda, i0, mc, k0, kc);
}
#undef GT__ROW_INT
#undef GT__PAIR_INT
#undef GT__ROW_CVT
#undef GT__PAIR_CVT
#undef GT__APACK_A_BODY

/* A held as bf16 patterns (gt__gemm_epi.a16): a row of a panel is its kc
 * patterns as they lie in memory (the even k in each pair's low half), an
 * odd kc's last high half zero: a copy, nothing to round; transposed, the
 * pairs of rows k and k + 1 of A lane by lane */
static void gt__apack_a_h(uint32_t *dst, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                          int64_t kc) {
  const uint16_t *A16 = (const uint16_t *)(const void *)A;
  const int64_t ku = (kc + 1) / 2;
  for (int64_t p = 0; p < mc; p += AMR) {
    const int64_t mr = gt__gmin(AMR, mc - p);
    memset(dst + (p + mr) * ku, 0, sizeof(uint32_t) * (size_t)((AMR - mr) * ku));
    if (transA) continue;
    for (int64_t r = 0; r < mr; r++) {
      uint16_t *d = (uint16_t *)(void *)(dst + (p + r) * ku);
      memcpy(d, A16 + (i0 + p + r) * lda + k0, (size_t)kc * sizeof(uint16_t));
      if (kc & 1) d[kc] = 0;
    }
  }
  if (!transA) return;
  /* op(A)(i, k) = A[k][i]: 16 pair steps' lanes (rows k and k + 1 of A,
   * lane by lane) transposed into 16 rows of the panel, as the float
   * packers' transposed loop */
  for (int64_t q0 = 0; q0 < ku; q0 += 16) {
    const int64_t qn = gt__gmin(16, ku - q0);
    const __mmask16 mq = gt__am16(qn);
    for (int64_t p = 0; p < mc; p += AMR) {
      const int64_t mr = gt__gmin(AMR, mc - p);
      const __mmask16 mm = gt__am16(mr);
      __m512 v[16];
#pragma GCC unroll 16
      for (int t = 0; t < 16; t++) {
        v[t] = _mm512_setzero_ps();
        if (t < qn) {
          const int64_t q = q0 + t;
          const uint16_t *e = A16 + (k0 + 2 * q) * lda + i0 + p;
          v[t] = _mm512_castsi512_ps(gt__pairs16(mm, e, 2 * q + 1 < kc ? e + lda : NULL));
        }
      }
      gt__tr16(v);
      for (int64_t r = 0; r < mr; r++) _mm512_mask_storeu_epi32(dst + (p + r) * ku + q0, mq, _mm512_castps_si512(v[r]));
    }
  }
}

/* op(B) rows k0..k0+kc, columns j0..j0+n as [ku][32]-pair panels, columns
 * past n zero */
static void gt__apack_b(uint32_t *dst, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                        int64_t n) {
  const int64_t ku = (kc + 1) / 2;
  for (int64_t p = 0; p * ANR < n; p++) {
    const int64_t nr = gt__gmin(ANR, n - p * ANR), j = j0 + p * ANR;
    uint32_t *d = dst + p * ANR * ku;
    if (nr < ANR) memset(d, 0, sizeof(uint32_t) * (size_t)(ANR * ku));
    if (!transB) {
      for (int64_t q = 0; q < ku; q++) {
        const float *e = B + (k0 + 2 * q) * ldb + j;
        gt__apairs_rows(d + q * ANR, e, 2 * q + 1 < kc ? e + ldb : NULL, nr);
      }
    } else {
      /* op(B)(k, j) = B[j][k]: column j runs along k */
      for (int64_t c = 0; c < nr; c++) gt__apairs_run(d + c, ANR, B + (j + c) * ldb + k0, kc);
    }
  }
}

/* The tile configuration (ldtilecfg's 64 bytes, palette 1): tiles 0, 1 the
 * C halves (16 x 16 floats), 2 the A tile, 3 and 4 the B tiles (16 pair
 * steps), 5 to 7 the same for the last w < 16 steps */
typedef struct __attribute__((packed, aligned(64))) gt__tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} gt__tilecfg;

/* The configuration this thread's tiles hold, as (call, tail width w + 1).
 * Loaded on every micro-kernel call, ldtilecfg took a quarter of the
 * kernel's time; the width changes only with the K block, so a thread
 * loads it at its first tile of each product (gt__acall counts them: other
 * code in the process, another library's AMX kernels say, may have changed
 * or released this thread's tiles between two of our products, never
 * during one) and again when the width changes, and keeps it (no
 * tilerelease: the tile state stays in use, which costs a larger XSAVE
 * area at a context switch, nothing else). */
static atomic_uint gt__acall;
static _Thread_local unsigned gt__acfg_call;
static _Thread_local int gt__acfg_loaded;

static void gt__amicro(int64_t ku, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr,
                       int64_t nr, float alpha, float beta, const float *Cnext) {
  (void)Cnext;
  const int64_t w = ku % 16;
  const unsigned call = atomic_load_explicit(&gt__acall, memory_order_relaxed);
  if (gt__acfg_loaded != (int)w + 1 || gt__acfg_call != call) {
    gt__tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    cfg.colsb[5] = (uint16_t)(w ? 4 * w : 64), cfg.rows[5] = 16;                          /* A: 16 rows of w pairs */
    cfg.colsb[6] = cfg.colsb[7] = 64, cfg.rows[6] = cfg.rows[7] = (uint8_t)(w ? w : 16); /* B: w pair steps */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    gt__acfg_loaded = (int)w + 1, gt__acfg_call = call;
  }
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1" ::);
  const int64_t sa = ku * 4, sb = ANR * 4;
  int64_t q = 0;
  for (; q + 16 <= ku; q += 16) {
    const uint32_t *a = Ap + q, *b = Bp + q * ANR;
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm2\n\t"
                     "tileloadd (%2,%3,1), %%tmm3\n\t"
                     "tileloadd (%4,%3,1), %%tmm4\n\t"
                     "tdpbf16ps %%tmm3, %%tmm2, %%tmm0\n\t"
                     "tdpbf16ps %%tmm4, %%tmm2, %%tmm1" ::"r"(a),
                     "r"(sa), "r"(b), "r"(sb), "r"(b + 16)
                     : "memory");
  }
  if (w) {
    const uint32_t *a = Ap + q, *b = Bp + q * ANR;
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm5\n\t"
                     "tileloadd (%2,%3,1), %%tmm6\n\t"
                     "tileloadd (%4,%3,1), %%tmm7\n\t"
                     "tdpbf16ps %%tmm6, %%tmm5, %%tmm0\n\t"
                     "tdpbf16ps %%tmm7, %%tmm5, %%tmm1" ::"r"(a),
                     "r"(sa), "r"(b), "r"(sb), "r"(b + 16)
                     : "memory");
  }
  if (alpha == 1.0f && beta == 0.0f && mr == AMR && nr == ANR) {
    /* C = the sums: the tiles go to C as they are (the epilogue's bits) */
    __asm__ volatile("tilestored %%tmm0, (%0,%2,1)\n\t"
                     "tilestored %%tmm1, (%1,%2,1)" ::"r"(C),
                     "r"(C + 16), "r"(ldc * 4)
                     : "memory");
    return;
  }
  float acc[AMR][ANR] __attribute__((aligned(64)));
  __asm__ volatile("tilestored %%tmm0, (%0,%2,1)\n\t"
                   "tilestored %%tmm1, (%1,%2,1)" ::"r"(&acc[0][0]),
                   "r"(&acc[0][16]), "r"((int64_t)(ANR * 4))
                   : "memory");
  const __mmask16 m0 = gt__am16(nr), m1 = gt__am16(nr - 16);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const int scale = alpha != 1.0f, mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
  for (int64_t r = 0; r < mr; r++) {
    float *cr = C + r * ldc;
    __m512 x0 = _mm512_load_ps(acc[r]), x1 = _mm512_load_ps(acc[r] + 16);
    if (scale) x0 = _mm512_mul_ps(va, x0), x1 = _mm512_mul_ps(va, x1);
    if (mode == 1) {
      x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, cr));
      x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, cr + 16));
    } else if (mode == 2) {
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), x0);
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), x1);
    }
    _mm512_mask_storeu_ps(cr, m0, x0);
    _mm512_mask_storeu_ps(cr + 16, m1, x1);
  }
}

int gt__amx_bgemm_packed_with(gt__amx_pack_b_fn pack_b, int transA, int transB, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                              float *C, int64_t ldc, const gt__gemm_epi *epi) {
  pthread_once(&gt__ablock_once, gt__ablock_init);
  /* (another product running at the same time, on another device, only
   * makes a thread load the same configuration once more) */
  atomic_fetch_add_explicit(&gt__acall, 1u, memory_order_relaxed);
  const gt__gemm_kernel kern = {&gt__ablocks, 2,
                                epi && epi->a16 ? gt__apack_a_h : gt__amx_cvt() ? gt__apack_a_cvt : gt__apack_a,
                                pack_b, gt__amicro};
  return gt__gemm_run(&kern, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
}

int gt__amx_bgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                         const gt__gemm_epi *epi) {
  return gt__amx_bgemm_packed_with(gt__apack_b, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                   epi);
}

GT__TARGET_END

static atomic_int gt__amx_int_forced;

void gt__amx_force_integer_packing(int on) { atomic_store(&gt__amx_int_forced, on); }

/* (gt__bgemm_kernel() 2: vdpbf16ps usable, kernels/bf16.h) */
int gt__amx_cvt(void) { return gt__bgemm_kernel() == 2 && !atomic_load(&gt__amx_int_forced); }
#else
void gt__amx_force_integer_packing(int on) { (void)on; }
int gt__amx_cvt(void) { return 0; }
int gt__amx_bgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                         const gt__gemm_epi *epi) {
  (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
  (void)beta, (void)C, (void)ldc, (void)epi;
  return -1;
}
int gt__amx_bgemm_packed_with(gt__amx_pack_b_fn pack_b, int transA, int transB, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                              float *C, int64_t ldc, const gt__gemm_epi *epi) {
  (void)pack_b;
  return gt__amx_bgemm_packed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi);
}
#endif
