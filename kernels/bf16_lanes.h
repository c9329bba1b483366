/* 16 floats -> their bf16 patterns (round to nearest even, NaNs quieted, as
 * gt_f32_to_bf16 in bf16.h) in the top half of each 32-bit lane, the low half
 * zero: the integer rounding every AVX-512 bf16 kernel shares (bf16.c's
 * conversions, gemm_bf16.c's packing, attention.c's bf16 tiles). It keeps
 * denormals, which AVX512_BF16's conversion instructions flush.
 * Include it where AVX-512F code is compiled: inside a GT__TARGET_BEGIN
 * region (kernels/target.h) or in an AVX-512 copy (kernels/isa.h). */
#ifndef GEMTRAIN_KERNELS_BF16_LANES_H
#define GEMTRAIN_KERNELS_BF16_LANES_H

#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline)) __m512i gt__bf16_round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}

/* The pair lanes of two rows of bf16 patterns, lane by lane: row e's
 * pattern in the low half, row o's in the high half (zero where o is
 * NULL), m masking the lanes loaded: a transposed A held in bf16, packed
 * as pairs of k without rounding (kernels/gemm_bf16.c, kernels/gemm_amx.c). */
static inline __attribute__((always_inline)) __m512i gt__pairs16(__mmask16 m, const uint16_t *e, const uint16_t *o) {
  const __m512i ve = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, e));
  if (!o) return ve;
  return _mm512_or_si512(ve, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, o)), 16));
}

#endif
