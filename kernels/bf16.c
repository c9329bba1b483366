/* Array conversions to and from bfloat16 (kernels/bf16.h). The vector path
 * does the scalar rounding in integer lanes (add 0x7fff plus the lowest kept
 * bit, keep the top half; NaNs get their quiet bit), so it gives the scalar
 * function's bits for every input, NaNs and denormals included: the
 * AVX512_BF16 conversion instruction would flush denormals. The AVX2 copy
 * does the same on 8 lanes (kernels/lanes8.h). */
#include "base/team.h"
#include "kernels/bf16.h"

#if defined(GT__KERNELS_AVX512)
#include <immintrin.h>

#include "kernels/bf16_lanes.h"
#elif defined(GT__KERNELS_AVX2)
#include <immintrin.h>

#include "kernels/lanes8.h"
#endif

#define GT__PAR_MIN 65536

/* Chunks of 1024 elements [c0, c1) of an n-element array. */
typedef struct gt__bf16_args {
  void *dst;
  const void *src;
  int64_t n;
} gt__bf16_args;

/* in place (src NULL) or from src */
static void gt__round_part(void *p, int64_t c0, int64_t c1) {
  const gt__bf16_args *a = p;
  float *x = a->dst;
  const float *y = a->src ? a->src : x;
  const int64_t n = a->n;
  for (int64_t c = c0; c < c1; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(GT__KERNELS_AVX512)
    for (; i + 16 <= e; i += 16) _mm512_storeu_ps(x + i, _mm512_castsi512_ps(gt__bf16_round16(_mm512_loadu_ps(y + i))));
#elif defined(GT__KERNELS_AVX2)
    for (; i + 8 <= e; i += 8) _mm256_storeu_ps(x + i, gt__rnd8(_mm256_loadu_ps(y + i)));
#endif
    for (; i < e; i++) x[i] = gt_bf16_round1(y[i]);
  }
}

void gt_bf16_round(float *x, int64_t n) {
  gt__bf16_args a = {x, NULL, n};
  gt_team_for(n >= GT__PAR_MIN, (n + 1023) / 1024, gt__round_part, &a);
}

void gt_bf16_round_copy(float *dst, const float *src, int64_t n) {
  gt__bf16_args a = {dst, src, n};
  gt_team_for(n >= GT__PAR_MIN, (n + 1023) / 1024, gt__round_part, &a);
}

/* Serial: a GEMM calls these on each C tile it has just stored (the tile
 * still in L1), attention on each tile operand, inside their own parallel
 * sections. pack: dst holds bf16 patterns, else rounded floats. */
static inline void gt__rows(void *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols,
                            const int pack) {
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src + r * lds;
    float *d = pack ? NULL : (float *)dst + r * ldd;
    uint16_t *h = pack ? (uint16_t *)dst + r * ldd : NULL;
    int64_t i = 0;
#if defined(GT__KERNELS_AVX512)
    for (; i < cols; i += 16) {
      const __mmask16 m = (__mmask16)(cols - i >= 16 ? 0xFFFF : (1u << (cols - i)) - 1);
      const __m512i v = gt__bf16_round16(_mm512_maskz_loadu_ps(m, s + i));
      if (pack)
        _mm256_mask_storeu_epi16(h + i, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
      else
        _mm512_mask_storeu_ps(d + i, m, _mm512_castsi512_ps(v));
    }
#elif defined(GT__KERNELS_AVX2)
    for (; i + 8 <= cols; i += 8) {
      const __m256 v = gt__rnd8(_mm256_loadu_ps(s + i));
      if (pack)
        gt__store_bf16x8(h + i, v);
      else
        _mm256_storeu_ps(d + i, v);
    }
#endif
    for (; i < cols; i++) {
      if (pack)
        h[i] = gt_f32_to_bf16(s[i]);
      else
        d[i] = gt_bf16_round1(s[i]);
    }
  }
}

void gt_bf16_round_rows(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
  gt__rows(dst, ldd, src, lds, rows, cols, 0);
}

void gt_bf16_pack_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
  gt__rows(dst, ldd, src, lds, rows, cols, 1);
}

static void gt__pack_part(void *p, int64_t c0, int64_t c1) {
  const gt__bf16_args *a = p;
  uint16_t *dst = a->dst;
  const float *src = a->src;
  const int64_t n = a->n;
  for (int64_t c = c0; c < c1; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(GT__KERNELS_AVX512)
    for (; i + 16 <= e; i += 16)
      _mm256_storeu_si256((__m256i *)(dst + i),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(gt__bf16_round16(_mm512_loadu_ps(src + i)), 16)));
#elif defined(GT__KERNELS_AVX2)
    for (; i + 8 <= e; i += 8) gt__store_bf16x8(dst + i, gt__rnd8(_mm256_loadu_ps(src + i)));
#endif
    for (; i < e; i++) dst[i] = gt_f32_to_bf16(src[i]);
  }
}

void gt_bf16_pack(uint16_t *dst, const float *src, int64_t n) {
  gt__bf16_args a = {dst, src, n};
  gt_team_for(n >= GT__PAR_MIN, (n + 1023) / 1024, gt__pack_part, &a);
}

static void gt__unpack_part(void *p, int64_t c0, int64_t c1) {
  const gt__bf16_args *a = p;
  float *dst = a->dst;
  const uint16_t *src = a->src;
  const int64_t n = a->n;
  for (int64_t c = c0; c < c1; c++) {
    int64_t i = c * 1024, e = i + 1024 < n ? i + 1024 : n;
#if defined(GT__KERNELS_AVX512)
    for (; i + 16 <= e; i += 16)
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))), 16));
#elif defined(GT__KERNELS_AVX2)
    for (; i + 8 <= e; i += 8) _mm256_storeu_ps(dst + i, gt__widen8(src + i));
#endif
    for (; i < e; i++) dst[i] = gt_bf16_to_f32(src[i]);
  }
}

void gt_bf16_unpack(float *dst, const uint16_t *src, int64_t n) {
  gt__bf16_args a = {dst, src, n};
  gt_team_for(n >= GT__PAR_MIN, (n + 1023) / 1024, gt__unpack_part, &a);
}
