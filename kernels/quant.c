/* Stored (quantized) weights: kernels/quant.h.
 *
 * Quantization follows bitsandbytes, so a matrix quantized here holds the
 * codes bitsandbytes would give it: nf4 scales a block by the reciprocal of
 * its absmax (x = v * (1 / absmax)) and picks the code by comparisons
 * against the 15 midpoints of adjacent code values (bitsandbytes'
 * dQuantizeNF4 decision tree: the code index is the number of midpoints x is
 * strictly greater than, so a tie goes to the lower code, and a NaN, which
 * an all-zero block gives as 0 * inf, to code 0); int8 rounds v * (127 /
 * absmax) to nearest even (LLM.int8's row-wise rule), a NaN to 0. A NaN
 * element is passed over by the absmax, as fmaxf does. The AVX-512 paths
 * below and the AVX2 ones (kernels/quant_avx2.c) compute exactly these
 * operations lane by lane, so they give the scalar paths' bytes
 * (tests/test_quant.c checks each against gt_quantize_ref).
 *
 * Products: the packed GEMMs dequantize W where they pack it
 * (kernels/quant_gemm.h); without AVX-512 (the portable copies) each call
 * dequantizes bounded panels of W into the calling thread's packing buffer
 * (the GEMMs' own, which the portable float32 path leaves unused) and
 * multiplies them with gt_sgemm / gt_bgemm: each output column is one
 * product over the whole K, so its bits are those of the same GEMM on the
 * dequantized matrix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/gemm_avx2.h"
#include "kernels/gemm_blocking.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_avx2.h"
#include "kernels/quant_elem.h"
#include "kernels/quant_gemm.h"
#include "kernels/target.h"

/* floats of W per portable panel (4 MiB) */
#define GT__Q_PANEL ((int64_t)1 << 20)

const float gt_nf4_code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/* bitsandbytes' thresholds (its dQuantizeNF4), ascending */
const float gt_nf4_mid[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
    0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f,
};

int64_t gt_q_data_bytes(gt_qtype t, int64_t numel) {
  switch (t) {
  case GT_Q_F32: return numel * 4;
  case GT_Q_BF16: return numel * 2;
  case GT_Q_INT8: return numel;
  case GT_Q_NF4: return (numel + 1) / 2;
  }
  return 0;
}

int64_t gt_q_scale_count(gt_qtype t, int64_t numel, int64_t rows) {
  if (t == GT_Q_INT8) return rows;
  if (t == GT_Q_NF4) return (numel + GT_Q_NF4_BLOCK - 1) / GT_Q_NF4_BLOCK;
  return 0;
}

int64_t gt_q_words(gt_qtype t, int64_t rows, int64_t cols) {
  return (gt_q_data_bytes(t, rows * cols) + 3) / 4 + gt_q_scale_count(t, rows * cols, rows);
}

gt_qweight gt_qweight_at(gt_qtype t, const void *base, int64_t rows, int64_t cols) {
  gt_qweight w = {t, base, NULL, rows, cols};
  if (gt_q_scale_count(t, rows * cols, rows))
    w.scales = (const float *)base + (gt_q_data_bytes(t, rows * cols) + 3) / 4;
  return w;
}

/* ------------------------------------------------------------ scalar */

static inline int gt__nf4_index(float x) {
  int q = 0;
  for (int i = 0; i < 15; i++) q += x > gt_nf4_mid[i];
  return q;
}

static inline int8_t gt__int8_code(float v, float inv) {
  float q = nearbyintf(v * inv);
  return (int8_t)(q != q ? 0.0f : q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
}

/* rows [r0, r1) of an int8 matrix */
static void gt__quant_int8_rows(const float *src, int64_t cols, int64_t r0, int64_t r1, int8_t *d, float *scales) {
  for (int64_t r = r0; r < r1; r++) {
    const float *s = src + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(s[c]));
    scales[r] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t c = 0; c < cols; c++) d[r * cols + c] = amax > 0.0f ? gt__int8_code(s[c], inv) : 0;
  }
}

/* nf4 blocks [b0, b1) of n elements (each block's bytes are its own: a
 * block holds an even number of elements, except the matrix's last) */
static void gt__quant_nf4_blocks(const float *src, int64_t n, int64_t b0, int64_t b1, uint8_t *d, float *scales) {
  for (int64_t b = b0; b < b1; b++) {
    const int64_t i0 = b * GT_Q_NF4_BLOCK, i1 = i0 + GT_Q_NF4_BLOCK < n ? i0 + GT_Q_NF4_BLOCK : n;
    float amax = 0.0f;
    for (int64_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(src[i]));
    scales[b] = amax;
    const float inv = 1.0f / amax;
    for (int64_t i = i0; i < i1; i += 2) {
      int hi = gt__nf4_index(src[i] * inv), lo = i + 1 < i1 ? gt__nf4_index(src[i + 1] * inv) : 0;
      d[i / 2] = (uint8_t)(hi << 4 | lo);
    }
  }
}

static void gt__dequant_rows_scalar(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  const int64_t cols = w->cols, i0 = r0 * cols, m = n * cols;
  switch (w->type) {
  case GT_Q_F32: memcpy(out, (const float *)w->data + i0, (size_t)m * 4); return;
  case GT_Q_BF16:
    for (int64_t i = 0; i < m; i++) out[i] = gt_bf16_to_f32(((const uint16_t *)w->data)[i0 + i]);
    return;
  case GT_Q_INT8:
    for (int64_t r = 0; r < n; r++) {
      const float s = w->scales[r0 + r];
      const int8_t *q = (const int8_t *)w->data + (r0 + r) * cols;
      for (int64_t c = 0; c < cols; c++) out[r * cols + c] = (float)q[c] * s;
    }
    return;
  case GT_Q_NF4:
    for (int64_t i = 0; i < m; i++) out[i] = gt__q_elem(w, i0 + i);
    return;
  }
}

/* ----------------------------------------------------------- AVX-512 */

#if defined(__x86_64__)
#include <immintrin.h>

GT__TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,fma")

#include "kernels/bf16_lanes.h"
#include "kernels/quant_lanes.h"

static inline __m512 gt__abs16(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); }

static void gt__quant_int8_rows_v(const float *src, int64_t cols, int64_t r0, int64_t r1, int8_t *d, float *scales) {
  for (int64_t r = r0; r < r1; r++) {
    const float *s = src + r * cols;
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += 16) {
      const int64_t k = cols - c < 16 ? cols - c : 16;
      /* (|x| first: maxps returns its second operand when either is NaN,
       * so a NaN is passed over, as fmaxf does) */
      vmax = _mm512_max_ps(gt__abs16(_mm512_maskz_loadu_ps((__mmask16)(k >= 16 ? 0xFFFF : (1u << k) - 1), s + c)), vmax);
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    scales[r] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512 lim = _mm512_set1_ps(127.0f);
    for (int64_t c = 0; c < cols; c += 16) {
      const int64_t k = cols - c < 16 ? cols - c : 16;
      const __mmask16 m = (__mmask16)(k >= 16 ? 0xFFFF : (1u << k) - 1);
      __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), inv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q); /* a NaN: code 0 (min would give 127) */
      q = _mm512_max_ps(_mm512_min_ps(q, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim));
      _mm_mask_storeu_epi8(d + r * cols + c, m, _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(q)));
    }
  }
}

/* the code indices of 16 lanes: how many midpoints each is greater than */
static inline __m512i gt__nf4_index16(__m512 x) {
  __m512i q = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
#pragma GCC unroll 15
  for (int t = 0; t < 15; t++)
    q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(x, _mm512_set1_ps(gt_nf4_mid[t]), _CMP_GT_OQ), q, one);
  return q;
}

/* whole blocks [b0, b1) (64 elements each) */
static void gt__quant_nf4_blocks_v(const float *src, int64_t b0, int64_t b1, uint8_t *d, float *scales) {
  for (int64_t b = b0; b < b1; b++) {
    const float *s = src + b * GT_Q_NF4_BLOCK;
    __m512 v[4];
    for (int j = 0; j < 4; j++) v[j] = _mm512_loadu_ps(s + 16 * j);
    /* |x| folded in first: maxps returns its second operand when either is
     * NaN, so a NaN is passed over, as fmaxf does */
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < 4; j++) m = _mm512_max_ps(gt__abs16(v[j]), m);
    const float amax = _mm512_reduce_max_ps(m);
    scales[b] = amax;
    const __m512 inv = _mm512_set1_ps(1.0f / amax);
    for (int j = 0; j < 4; j++) {
      const __m512i q = gt__nf4_index16(_mm512_mul_ps(v[j], inv));
      /* even lane: its index << 4 | the next lane's; vpmovqb keeps that byte */
      const __m512i by = _mm512_or_si512(_mm512_slli_epi32(q, 4), _mm512_srli_epi64(q, 32));
      _mm_storel_epi64((__m128i *)(void *)(d + b * 32 + 8 * j), _mm512_cvtepi64_epi8(by));
    }
  }
}

static void gt__dequant_rows_v(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  const int64_t cols = w->cols;
  const __m512 lut = gt__qlut();
  for (int64_t r = 0; r < n; r++) {
    const float rs = gt__qrow_scale(w, r0 + r);
    const int64_t base = (r0 + r) * cols;
    for (int64_t c = 0; c < cols; c += 16) {
      const int64_t k = cols - c < 16 ? cols - c : 16;
      _mm512_mask_storeu_ps(out + r * cols + c, (__mmask16)(k >= 16 ? 0xFFFF : (1u << k) - 1),
                            gt__qdeq16(w, base + c, k, rs, lut));
    }
  }
}

GT__TARGET_END
#endif

/* ---------------------------------------------------------- quantize */

typedef struct gt__quant_job {
  gt_qtype t;
  const float *src;
  int64_t rows, cols, n;
  void *dst;
  float *scales;
  int v; /* 2: the AVX-512 loops, 1: the AVX2 ones (kernels/quant_avx2.c), 0: scalar */
} gt__quant_job;

/* items: rows (float32, bf16, int8) or nf4 blocks */
static void gt__quant_range(void *ctx, int64_t lo, int64_t hi) {
  const gt__quant_job *j = ctx;
  const int64_t cols = j->cols;
  switch (j->t) {
  case GT_Q_F32: memcpy((float *)j->dst + lo * cols, j->src + lo * cols, (size_t)((hi - lo) * cols) * 4); break;
  case GT_Q_BF16: /* the rows as one run of bf16 patterns, on this member (each copy's lanes) */
    gt_bf16_pack_rows((uint16_t *)j->dst + lo * cols, 0, j->src + lo * cols, 0, 1, (hi - lo) * cols);
    break;
  case GT_Q_INT8:
#if defined(__x86_64__)
    if (j->v) {
      (j->v == 2 ? gt__quant_int8_rows_v : gt__quant_int8_rows_avx2)(j->src, cols, lo, hi, j->dst, j->scales);
      break;
    }
#endif
    gt__quant_int8_rows(j->src, cols, lo, hi, j->dst, j->scales);
    break;
  case GT_Q_NF4: {
    int64_t whole = hi;
    if (whole * GT_Q_NF4_BLOCK > j->n) whole--; /* the matrix's last, partial block */
#if defined(__x86_64__)
    if (j->v) {
      (j->v == 2 ? gt__quant_nf4_blocks_v : gt__quant_nf4_blocks_avx2)(j->src, lo, whole, j->dst, j->scales);
      gt__quant_nf4_blocks(j->src, j->n, whole, hi, j->dst, j->scales);
      break;
    }
#endif
    gt__quant_nf4_blocks(j->src, j->n, lo, hi, j->dst, j->scales);
    break;
  }
  }
}

void gt_quantize(gt_qtype t, const float *src, int64_t rows, int64_t cols, void *dst) {
  const int64_t n = rows * cols;
  gt_qweight w = gt_qweight_at(t, dst, rows, cols);
  gt__quant_job j = {t, src, rows, cols, n, dst, (float *)w.scales,
                     gt__kernels_avx512() ? 2 : gt__kernels_path() == GT__PATH_AVX2};
  const int64_t items = t == GT_Q_NF4 ? gt__gcdiv(n, GT_Q_NF4_BLOCK) : rows;
  /* the bytes past the elements up to the scales' word */
  const int64_t db = gt_q_data_bytes(t, n), pad = (db + 3) / 4 * 4 - db;
  if (pad) memset((uint8_t *)dst + db, 0, (size_t)pad);
  gt_team_for(n >= ((int64_t)1 << 16), items, gt__quant_range, &j);
}

void gt_dequantize_rows(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
#if defined(__x86_64__)
  if (gt__kernels_avx512()) {
    gt__dequant_rows_v(w, r0, n, out);
    return;
  }
  if (gt__kernels_path() == GT__PATH_AVX2) {
    gt__dequant_rows_avx2(w, r0, n, out);
    return;
  }
#endif
  gt__dequant_rows_scalar(w, r0, n, out);
}

/* ---------------------------------------------------------- products */

typedef void (*gt__gemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                            int64_t, float, float *, int64_t);

/* W's op columns j0..j0+n as a float panel: transW 1, rows j0.. of W [N, K]
 * ([n, K]); transW 0, columns j0.. of W [K, N] ([K, n]) */
static void gt__panel(const gt_qweight *W, int transW, int64_t K, int64_t j0, int64_t n, float *panel) {
  if (transW) {
    gt_dequantize_rows(W, j0, n, panel);
    return;
  }
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < n; j++) panel[k * n + j] = gt__q_elem(W, k * W->cols + j0 + j);
}

/* gt__qgemm_panels' product when A holds bf16 patterns (gt_qbgemm_t16) */
static void gt__bgemm_a16(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const gt_bgemm_form f = {(const uint16_t *)(const void *)A, 0, NULL, 0};
  gt_bgemm_x(transA, transB, M, N, K, alpha, NULL, lda, B, ldb, beta, C, ldc, &f);
}

/* Bounded panels of W multiplied by gemm: the products no packer reads W
 * for (the portable copy; a packed product whose buffers could not grow).
 * The panel lives in the calling
 * thread's GEMM buffers: its B packing buffer on the portable path (which
 * gt_sgemm and the bf16 copies path leave unused), its panel buffer where
 * the GEMM packs, or one of its own when those cannot grow. */
static void gt__qgemm_panels(gt__gemm_fn gemm, int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc) {
  int64_t nb = GT__Q_PANEL / K;
  if (nb < 16) nb = 16;
  if (nb > N) nb = N;
  const size_t bytes = (size_t)(nb * K) * sizeof(float);
  float *panel = NULL, *own = NULL;
  gt__gemm_cache *cache = gt__gemm_cache_get();
  const int packs = gt__kernels_path() != GT__PATH_PORTABLE;
  if (cache && gt__gemm_grow(packs ? &cache->w : &cache->b, packs ? &cache->wcap : &cache->bcap, bytes) == 0)
    panel = packs ? cache->w : cache->b;
  else
    panel = own = malloc(bytes);
  if (!panel) { /* no room for a panel: plain sums, slower, never wrong (gt_bgemm's operands rounded to bf16) */
    const int a16 = gemm == gt__bgemm_a16, rnd = gemm == gt_bgemm || a16;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) {
          const int64_t ai = transA ? k * lda + i : i * lda + k;
          float a = a16 ? gt_bf16_to_f32(((const uint16_t *)(const void *)A)[ai]) : A[ai];
          float w = gt__q_elem(W, transW ? j * W->cols + k : k * W->cols + j);
          s += rnd ? gt_bf16_round1(a) * gt_bf16_round1(w) : a * w;
        }
        C[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
      }
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += nb) {
    const int64_t n = N - j0 < nb ? N - j0 : nb;
    gt__panel(W, transW, K, j0, n, panel);
    gemm(transA, transW, M, n, K, alpha, A, lda, panel, transW ? K : n, beta, C + j0, ldc);
  }
  free(own);
}

/* what gt_sgemm / gt_bgemm do with K 0 or alpha 0 */
static int gt__qgemm_trivial(int64_t M, int64_t N, int64_t K, float alpha, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return 1;
  if (K > 0 && alpha != 0.0f) return 0;
  gt__gemm_beta_only(M, N, beta, C, ldc);
  return 1;
}

void gt_qgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const gt_qweight *W, float beta, float *C, int64_t ldc) {
  if (W->type == GT_Q_F32) {
    gt_sgemm(0, transW, M, N, K, alpha, A, lda, (const float *)W->data, W->cols, beta, C, ldc);
    return;
  }
  if (gt__qgemm_trivial(M, N, K, alpha, beta, C, ldc)) return;
  if (gt__kernels_avx512() && gt__qgemm_packed(transW, M, N, K, alpha, A, lda, W, beta, C, ldc) == 0) return;
  if (gt__kernels_path() == GT__PATH_AVX2 &&
      gt__qgemm_avx2(0, transW, M, N, K, alpha, A, lda, W, beta, C, ldc, 0, NULL) == 0)
    return;
  gt__qgemm_panels(gt_sgemm, 0, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}

/* gt_qbgemm_t, gt_qbgemm_t16 and gt_qbgemm_rnd: A as floats, or as bf16
 * patterns (a16; the pointer handed through as the packers take it); C
 * rounded to bf16 (round: by the packed loops' tiles where they run, else a
 * pass over the block after, with the same bits) */
static void gt__qbgemm_t_any(int a16, int round, int transA, int transW, int64_t M, int64_t N, int64_t K,
                             float alpha, const float *A, int64_t lda, const gt_qweight *W, float beta, float *C,
                             int64_t ldc) {
  if (W->type == GT_Q_F32) {
    const gt_bgemm_form f = {a16 ? (const uint16_t *)(const void *)A : NULL, round, NULL, 0};
    gt_bgemm_x(transA, transW, M, N, K, alpha, a16 ? NULL : A, lda, (const float *)W->data, W->cols, beta, C, ldc,
               &f);
    return;
  }
  if (!gt__qgemm_trivial(M, N, K, alpha, beta, C, ldc)) {
    /* (gt__qbgemm_packed is compiled for AVX-512 as a whole: even its
     * prologue may use it, as the sanitizers' does, so it is not entered
     * on another copy) */
    if (gt__kernels_avx512() && gt__qbgemm_packed(transA, transW, M, N, K, alpha, A, lda, W, beta, C, ldc, a16, round) == 0)
      return;
    /* the AVX2 copy's widened path packs W itself (A rounded or widened,
     * each tile of C rounded as it is finished) */
    const gt__gemm_epi epi = {a16, round ? gt_bf16_round_rows : NULL, NULL, NULL, 0};
    if (gt__kernels_path() == GT__PATH_AVX2 && gt_qbgemm_packs_stored() &&
        gt__qgemm_avx2(transA, transW, M, N, K, alpha, A, lda, W, beta, C, ldc, 1, a16 || round ? &epi : NULL) == 0)
      return;
    gt__qgemm_panels(a16 ? gt__bgemm_a16 : gt_bgemm, transA, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
  }
  if (round)
    for (int64_t i = 0; i < M; i++) gt_bf16_round(C + i * ldc, N);
}

void gt_qbgemm_t16(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A16,
                   int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt__qbgemm_t_any(1, 0, transA, transW, M, N, K, alpha, (const float *)(const void *)A16, lda, W, beta, C, ldc);
}

void gt_qbgemm_t(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt__qbgemm_t_any(0, 0, transA, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}

void gt_qbgemm_rnd(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt__qbgemm_t_any(0, 1, 0, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}

int gt_qbgemm_packs_stored(void) { return gt__bgemm_path() != GT_BGEMM_COPY; }

void gt_qbgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt_qbgemm_t(0, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}
