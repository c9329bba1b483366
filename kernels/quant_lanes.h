/* Up to 16 consecutive elements of a stored matrix (kernels/quant.h) as
 * float32 lanes: what the packed GEMMs' quantized packers (kernels/gemm.c,
 * kernels/gemm_bf16.c), the quantized row products and gt_dequantize_rows
 * read. Each lane is exactly kernels/quant_elem.h's value of its element:
 * bf16 widened, int8 converted then one float32 multiply by its row's scale,
 * nf4's code (a 16-entry table in one register, vpermps) times its block's
 * absmax, one multiply; lanes past n are exactly zero (a scale of inf or NaN
 * must not reach a padded lane, which the GEMMs multiply by zero).
 * Include it where AVX-512 F/BW/VL code is compiled: an AVX-512 copy
 * (kernels/isa.h) or a GT__TARGET_BEGIN region. Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_QUANT_LANES_H
#define GEMTRAIN_KERNELS_QUANT_LANES_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/quant.h"

/* Elements [i, i + n) (n <= 16; none when n <= 0) of w's flattened matrix, all in one
 * row; rs: that row's int8 scale (unused by the other formats); lut: the
 * NF4 code table loaded in one register (gt__qlut). */
static inline __attribute__((always_inline)) __m512 gt__qdeq16(const gt_qweight *w, int64_t i, int64_t n, float rs,
                                                               __m512 lut) {
  if (n <= 0) return _mm512_setzero_ps();
  const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
  switch (w->type) {
  case GT_Q_F32: return _mm512_maskz_loadu_ps(m, (const float *)w->data + i);
  case GT_Q_BF16: {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w->data + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  case GT_Q_INT8: {
    __m128i q = _mm_maskz_loadu_epi8(m, (const int8_t *)w->data + i);
    return _mm512_maskz_mul_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(rs));
  }
  case GT_Q_NF4: {
    /* element i + l sits in byte (i + l) / 2, in the high nibble when i + l
     * is even: each lane takes its byte (pshufb), shifted by 4 or 0 */
    const int64_t b0 = i >> 1, odd = i & 1;
    const int64_t nb = ((i + n - 1) >> 1) - b0 + 1;
    __m128i bytes = _mm_maskz_loadu_epi8((__mmask16)((1u << nb) - 1), (const uint8_t *)w->data + b0);
    const __m128i idx0 = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i idx1 = _mm_setr_epi8(0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8);
    const __m512i sh0 = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i sh1 = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    __m512i v = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, odd ? idx1 : idx0));
    v = _mm512_and_si512(_mm512_srlv_epi32(v, odd ? sh1 : sh0), _mm512_set1_epi32(15));
    const __m512 code = _mm512_permutexvar_ps(v, lut);
    /* the absmax of each lane's block: one, or two when the run crosses a
     * block boundary */
    const int64_t blk = i / GT_Q_NF4_BLOCK, rem = GT_Q_NF4_BLOCK - (i - blk * GT_Q_NF4_BLOCK);
    __m512 s = _mm512_set1_ps(w->scales[blk]);
    if (n > rem) s = _mm512_mask_blend_ps((__mmask16)(0xFFFFu << rem), s, _mm512_set1_ps(w->scales[blk + 1]));
    return _mm512_maskz_mul_ps(m, code, s);
  }
  }
  return _mm512_setzero_ps();
}

static inline __attribute__((always_inline)) __m512 gt__qlut(void) { return _mm512_loadu_ps(gt_nf4_code); }

/* The int8 scale of row r (0 for the other formats). */
static inline float gt__qrow_scale(const gt_qweight *w, int64_t r) {
  return w->type == GT_Q_INT8 ? w->scales[r] : 0.0f;
}

#endif
