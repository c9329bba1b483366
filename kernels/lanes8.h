/* Eight-lane AVX2 helpers shared by the AVX2 GEMM (kernels/gemm_avx2.c), the
 * AVX2 quantizer (kernels/quant_avx2.c), AdamW's AVX2 copy with a bf16
 * first moment (kernels/adamw_bf16.c) and the AVX2 attention tiles
 * (kernels/attention_tiles8.h): a lane mask, bf16 rounding and widening.
 * Include it inside a GT__TARGET_BEGIN("avx2,fma") region (or a file
 * compiled with AVX2). Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_LANES8_H
#define GEMTRAIN_KERNELS_LANES8_H

#include <immintrin.h>
#include <stdint.h>

/* lanes i < n set (n clamped to 0..8) */
static inline __attribute__((always_inline)) __m256i gt__mask8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 floats rounded to bf16 and widened back (round to nearest even, NaNs
 * quieted): kernels/bf16_lanes.h's integer rounding on 8 lanes */
static inline __attribute__((always_inline)) __m256 gt__rnd8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  /* |x| above infinity's pattern: both sides below 2^31, so a signed compare */
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
  return _mm256_castsi256_ps(_mm256_and_si256(q, _mm256_set1_epi32((int)0xffff0000u)));
}

/* 8 floats already rounded to bf16 (gt__rnd8) stored as their bf16
 * patterns: the top halves, below 2^16, so the unsigned saturating pack is
 * exact */
static inline __attribute__((always_inline)) void gt__store_bf16x8(uint16_t *d, __m256 rounded) {
  const __m256i r = _mm256_srli_epi32(_mm256_castps_si256(rounded), 16);
  _mm_storeu_si128((__m128i *)(void *)d, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}

/* 8 bf16 patterns widened to float32 (a shift: exact) */
static inline __attribute__((always_inline)) __m256 gt__widen8(const uint16_t *src) {
  const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)src);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#endif
