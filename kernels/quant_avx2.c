/* Quantization and row dequantization on AVX2 and FMA (kernels/quant_avx2.h).
 *
 * Why: a QLoRA run quantizes its whole frozen base when it starts, and on
 * a CPU without AVX-512 that ran on the scalar code, one element and 15
 * comparisons at a time (gemma3-270m's 268M frozen weights: about 4 s of
 * CPU on a Zen 3; a 4B model's base, a minute). These are
 * kernels/quant.c's AVX-512 loops on 8 lanes: the same operations, lane by
 * lane, in the same order, so they write the scalar path's bytes
 * (tests/test_quant.c checks them against gt_quantize_ref on any AVX2 CPU,
 * and GT_TEST_KERNELS=avx2 runs them on an AVX-512 one). */
#include "kernels/quant_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/target.h"

GT__TARGET_BEGIN("avx2,fma")

#include "kernels/lanes8.h"
#include "kernels/quant_lanes8.h"

static inline __m256 gt__abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* the largest of 8 lanes (max is exact: any order gives it) */
static inline float gt__hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/* |x| folded into a running max as fmaxf does it: a NaN lane is passed
 * over (maxps returns its second operand when either is NaN) */
static inline __m256 gt__fold_abs(__m256 acc, __m256 x) { return _mm256_max_ps(gt__abs8(x), acc); }

void gt__quant_int8_rows_avx2(const float *src, int64_t cols, int64_t r0, int64_t r1, int8_t *d, float *scales) {
  const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
  for (int64_t r = r0; r < r1; r++) {
    const float *s = src + r * cols;
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c += 8) /* masked lanes load 0, which leaves the max */
      vmax = gt__fold_abs(vmax, cols - c >= 8 ? _mm256_loadu_ps(s + c) : _mm256_maskload_ps(s + c, gt__mask8(cols - c)));
    const float amax = gt__hmax8(vmax);
    scales[r] = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int64_t c = 0; c < cols; c += 8) {
      const int64_t k = cols - c < 8 ? cols - c : 8;
      const __m256 x = k == 8 ? _mm256_loadu_ps(s + c) : _mm256_maskload_ps(s + c, gt__mask8(k));
      /* v * inv rounded to nearest even (nearbyintf), then clamped */
      __m256 q = _mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q)); /* a NaN: code 0 (min would give 127) */
      q = _mm256_max_ps(_mm256_min_ps(q, lim), nlim);
      const __m256i w = _mm256_cvttps_epi32(q);
      const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
      const long long b = _mm_cvtsi128_si64(_mm_packs_epi16(h, h));
      memcpy(d + r * cols + c, &b, (size_t)k);
    }
  }
}

/* the code indices of 8 lanes: how many midpoints each is greater than
 * (a NaN, 0 * inf from an all-zero block, is greater than none) */
static inline __m256i gt__nf4_index8(__m256 x) {
  __m256i q = _mm256_setzero_si256();
#pragma GCC unroll 15
  for (int t = 0; t < 15; t++) /* a true compare is -1: subtracting it counts */
    q = _mm256_sub_epi32(q, _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_set1_ps(gt_nf4_mid[t]), _CMP_GT_OQ)));
  return q;
}

void gt__quant_nf4_blocks_avx2(const float *src, int64_t b0, int64_t b1, uint8_t *d, float *scales) {
  /* byte 0 and byte 8 of each 128-bit half: the first bytes of its two
   * 64-bit lanes, to bytes 0, 1 (low half) and 2, 3 (high half) */
  const __m256i pick = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, /* low */
                                        -1, -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t b = b0; b < b1; b++) {
    const float *s = src + b * GT_Q_NF4_BLOCK;
    __m256 v[8], m = _mm256_setzero_ps();
    for (int j = 0; j < 8; j++) m = gt__fold_abs(m, v[j] = _mm256_loadu_ps(s + 8 * j));
    const float amax = gt__hmax8(m);
    scales[b] = amax;
    const __m256 inv = _mm256_set1_ps(1.0f / amax);
    for (int j = 0; j < 8; j++) {
      const __m256i q = gt__nf4_index8(_mm256_mul_ps(v[j], inv));
      /* each 64-bit lane: its even element's index << 4 | its odd one's in
       * the low byte */
      const __m256i by = _mm256_shuffle_epi8(_mm256_or_si256(_mm256_slli_epi32(q, 4), _mm256_srli_epi64(q, 32)), pick);
      const uint32_t w = (uint32_t)_mm256_extract_epi32(by, 0) | (uint32_t)_mm256_extract_epi32(by, 4);
      memcpy(d + b * (GT_Q_NF4_BLOCK / 2) + 4 * j, &w, 4);
    }
  }
}

/* rows [r0, r0 + n) of a w of one type (a constant where this is inlined) */
static inline __attribute__((always_inline)) void gt__dequant_rows_as(const gt_qweight *q, const gt_qtype type,
                                                                      int64_t r0, int64_t n, float *out) {
  const gt__qview w = gt__qview_of(q);
  const int64_t cols = w.cols;
  const __m256 lut0 = _mm256_loadu_ps(gt_nf4_code), lut1 = _mm256_loadu_ps(gt_nf4_code + 8);
  for (int64_t r = 0; r < n; r++) {
    const float rs = type == GT_Q_INT8 ? w.scales[r0 + r] : 0.0f;
    const int64_t base = (r0 + r) * cols;
    float *o = out + r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(o + c, gt__qdeq8(&w, type, base + c, 8, rs, lut0, lut1));
    if (c < cols)
      _mm256_maskstore_ps(o + c, gt__mask8(cols - c), gt__qdeq8(&w, type, base + c, cols - c, rs, lut0, lut1));
  }
}

void gt__dequant_rows_avx2(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  switch (w->type) {
  case GT_Q_F32: memcpy(out, (const float *)w->data + r0 * w->cols, (size_t)(n * w->cols) * sizeof(float)); return;
  case GT_Q_BF16: gt__dequant_rows_as(w, GT_Q_BF16, r0, n, out); return;
  case GT_Q_INT8: gt__dequant_rows_as(w, GT_Q_INT8, r0, n, out); return;
  case GT_Q_NF4: gt__dequant_rows_as(w, GT_Q_NF4, r0, n, out); return;
  }
}

GT__TARGET_END
#endif
