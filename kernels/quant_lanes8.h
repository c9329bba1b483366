/* Up to 8 consecutive elements of a stored matrix (kernels/quant.h) as
 * float32 lanes on AVX2: what the AVX2 GEMM's quantized packer and row
 * kernel (kernels/gemm_avx2.c) and gt_dequantize_rows on AVX2
 * (kernels/quant_avx2.c) read. kernels/quant_lanes.h is the AVX-512 copy
 * on 16 lanes. Include it inside a GT__TARGET_BEGIN("avx2,fma") region.
 * Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_QUANT_LANES8_H
#define GEMTRAIN_KERNELS_QUANT_LANES8_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/lanes8.h"
#include "kernels/quant.h"

/* What the lanes read of a gt_qweight, copied into a local so that the
 * compiler keeps it in registers across a packer's stores */
typedef struct gt__qview {
  const void *data;
  const float *scales;
  int64_t cols, bytes; /* bytes: of the elements */
} gt__qview;

/* Elements [i, i + n) (n <= 8; none when n <= 0) of a stored matrix of the
 * given type (a constant where this is inlined), all in one row, as
 * float32 lanes: kernels/quant_lanes.h's gt__qdeq16 on 8 lanes. Each lane
 * is exactly kernels/quant_elem.h's value (bf16 widened; int8 converted,
 * then one multiply by its row's scale rs; nf4's code, looked up in the two
 * halves of the table (lut0, lut1), times its block's absmax), and lanes
 * past n are exactly zero, a scale of inf or NaN included. Never a byte
 * past the stored matrix is read: a short run goes through a zero-padded
 * copy. (A fixed-size copy is one load; one of variable size a call.) */
static inline __attribute__((always_inline)) __m256 gt__qdeq8(const gt__qview *w, const gt_qtype type, int64_t i,
                                                              int64_t n, float rs, __m256 lut0, __m256 lut1) {
  if (n <= 0) return _mm256_setzero_ps();
  const __m256i live = gt__mask8(n);
  switch (type) {
  case GT_Q_F32: return _mm256_maskload_ps((const float *)w->data + i, live);
  case GT_Q_BF16: {
    const uint16_t *src = (const uint16_t *)w->data + i;
    if (n >= 8) return gt__widen8(src);
    uint16_t t[8] = {0};
    memcpy(t, src, (size_t)n * sizeof(uint16_t));
    return gt__widen8(t);
  }
  case GT_Q_INT8: {
    long long q = 0;
    if (n >= 8)
      memcpy(&q, (const int8_t *)w->data + i, 8);
    else
      memcpy(&q, (const int8_t *)w->data + i, (size_t)n);
    const __m256 v =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q))), _mm256_set1_ps(rs));
    return _mm256_and_ps(v, _mm256_castsi256_ps(live));
  }
  case GT_Q_NF4: {
    /* element i + l sits in byte (i + l) / 2, in the high nibble when i + l
     * is even: each lane takes its byte (pshufb), shifted by 4 or 0 */
    const int64_t b0 = i >> 1, odd = i & 1;
    long long raw = 0;
    if (b0 + 8 <= w->bytes) /* the 8 bytes from b0 lie inside the matrix (5 at most are used) */
      memcpy(&raw, (const uint8_t *)w->data + b0, 8);
    else
      memcpy(&raw, (const uint8_t *)w->data + b0, (size_t)(((i + n - 1) >> 1) - b0 + 1));
    const __m128i idx0 = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i idx1 = _mm_setr_epi8(0, 1, 1, 2, 2, 3, 3, 4, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i sh0 = _mm256_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0), sh1 = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    __m256i v = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi64_si128(raw), odd ? idx1 : idx0));
    v = _mm256_and_si256(_mm256_srlv_epi32(v, odd ? sh1 : sh0), _mm256_set1_epi32(15));
    /* codes 0-7 from lut0, 8-15 from lut1 (bit 3 moved to the sign bit
     * chooses) */
    const __m256 code = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lut0, v), _mm256_permutevar8x32_ps(lut1, v),
                                         _mm256_castsi256_ps(_mm256_slli_epi32(v, 28)));
    /* the absmax of each lane's block: one, or two when the run crosses a
     * block boundary (lanes from rem on take the next block's) */
    const int64_t blk = i / GT_Q_NF4_BLOCK, rem = GT_Q_NF4_BLOCK - (i - blk * GT_Q_NF4_BLOCK);
    __m256 sc = _mm256_set1_ps(w->scales[blk]);
    if (n > rem)
      sc = _mm256_blendv_ps(_mm256_set1_ps(w->scales[blk + 1]), sc, _mm256_castsi256_ps(gt__mask8(rem)));
    return _mm256_and_ps(_mm256_mul_ps(code, sc), _mm256_castsi256_ps(live));
  }
  }
  return _mm256_setzero_ps();
}

/* 16 consecutive nf4 elements of one block, from the 8 bytes at p (the
 * first element in the high nibble of p[0]), looked up in the block's own
 * table: lut0, lut1 = the code table's halves times the block's absmax
 * (then rounded to bf16, where the product rounds its operands), so each
 * lane is exactly gt__qdeq8's value of its element (code times absmax, one
 * multiply), made once per block instead of once per element. Lanes 0-7 in
 * *e0, 8-15 in *e1. The nibbles of all 16 are split at once: a row kernel
 * decoding a long row does a third of gt__qdeq8's work an element. */
static inline __attribute__((always_inline)) void gt__nf4_deq16(const uint8_t *p, __m256 lut0, __m256 lut1, __m256 *e0,
                                                                __m256 *e1) {
  long long raw;
  memcpy(&raw, p, 8);
  const __m128i b = _mm_cvtsi64_si128(raw), lo4 = _mm_set1_epi8(15);
  /* the high nibbles (even elements) and the low ones (odd), interleaved
   * back into element order */
  const __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), lo4), _mm_and_si128(b, lo4));
  const __m256i v0 = _mm256_cvtepu8_epi32(idx), v1 = _mm256_cvtepu8_epi32(_mm_srli_si128(idx, 8));
  /* codes 0-7 from lut0, 8-15 from lut1 (bit 3 moved to the sign bit chooses) */
  *e0 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lut0, v0), _mm256_permutevar8x32_ps(lut1, v0),
                         _mm256_castsi256_ps(_mm256_slli_epi32(v0, 28)));
  *e1 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lut0, v1), _mm256_permutevar8x32_ps(lut1, v1),
                         _mm256_castsi256_ps(_mm256_slli_epi32(v1, 28)));
}

/* w's view (gt__qdeq8's) */
static inline gt__qview gt__qview_of(const gt_qweight *q) {
  return (gt__qview){q->data, q->scales, q->cols, gt_q_data_bytes(q->type, q->rows * q->cols)};
}

#endif
