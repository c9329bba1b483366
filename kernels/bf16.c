/* Array conversions to and from bfloat16 (kernels/bf16.h). The vector path
 * does the scalar rounding in integer lanes (add 0x7fff plus the lowest kept
 * bit, keep the top half; NaNs get their quiet bit), so it gives the scalar
 * function's bits for every input, NaNs and denormals included: the
 * AVX512_BF16 conversion instruction would flush denormals. */
#include <omp.h>

#include "kernels/bf16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define GT__PAR_MIN 65536

#if defined(__AVX512F__)
/* 16 floats -> their rounded bf16 patterns in the top half of each lane */
static inline __m512i gt__round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}
#endif

void gt_bf16_round(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= GT__PAR_MIN && !omp_in_parallel())
  for (int64_t c = 0; c < (n + 1023) / 1024; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(__AVX512F__)
    for (; i + 16 <= e; i += 16) _mm512_storeu_ps(x + i, _mm512_castsi512_ps(gt__round16(_mm512_loadu_ps(x + i))));
#endif
    for (; i < e; i++) x[i] = gt_bf16_round1(x[i]);
  }
}

void gt_bf16_pack(uint16_t *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= GT__PAR_MIN && !omp_in_parallel())
  for (int64_t c = 0; c < (n + 1023) / 1024; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(__AVX512F__)
    for (; i + 16 <= e; i += 16)
      _mm256_storeu_si256((__m256i *)(dst + i),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(gt__round16(_mm512_loadu_ps(src + i)), 16)));
#endif
    for (; i < e; i++) dst[i] = gt_f32_to_bf16(src[i]);
  }
}

void gt_bf16_unpack(float *dst, const uint16_t *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= GT__PAR_MIN && !omp_in_parallel())
  for (int64_t c = 0; c < (n + 1023) / 1024; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(__AVX512F__)
    for (; i + 16 <= e; i += 16)
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))), 16));
#endif
    for (; i < e; i++) dst[i] = gt_bf16_to_f32(src[i]);
  }
}
