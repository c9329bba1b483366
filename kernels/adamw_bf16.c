/* Fused AdamW step with the first moment stored in bf16 (mu_dtype=bfloat16;
 * see kernels.h). The float32 operations are gt_adamw_update's, in its
 * order; m is expanded from bf16 on load (exact) and rounded to nearest even
 * on store, with the integer rounding of kernels/bf16.h (NaNs keep a quiet
 * bit), so the vector path and the scalar tail give the reference's bits. */
#if defined(GT__KERNELS_AVX2)
#include <immintrin.h>

#include "kernels/lanes8.h"
#endif

#include "base/team.h"
#include "kernels/adamw_step.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 32768

/* gt_adamw_update's steps (kernels/adamw_step.h) with m widened from bf16
 * as it is loaded and rounded as it is stored */
static void gt__range(float *p, const float *g, uint16_t *m, float *v, int64_t i0, int64_t i1, const gt__adamw_k *k) {
  int64_t i = i0;
#if defined(GT__KERNELS_AVX512)
  const gt__adamw_v c = gt__adamw_vconsts(k);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (; i + 16 <= i1; i += 16) {
    const __m512 m0 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(m + i))), 16));
    const __m512 mi = gt__adamw_vstep(&c, p, g, v, m0, i);
    /* round mi to bf16: + 0x7fff + the lowest kept bit, keep the top half;
     * a NaN keeps its top half with the quiet bit set */
    const __m512i u = _mm512_castps_si512(mi);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), one), half));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    r = _mm512_mask_or_epi32(r, nan, u, quiet);
    _mm256_storeu_si256((__m256i *)(m + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
#elif defined(GT__KERNELS_AVX2)
  const gt__adamw_v c = gt__adamw_vconsts(k);
  for (; i + 8 <= i1; i += 8) /* m rounded to bf16: the same integer rounding */
    gt__store_bf16x8(m + i, gt__rnd8(gt__adamw_vstep(&c, p, g, v, gt__widen8(m + i), i)));
#endif
  for (; i < i1; i++) m[i] = gt_f32_to_bf16(gt__adamw_1(k, p, g, v, gt_bf16_to_f32(m[i]), i));
}

typedef struct gt__adamw_args {
  float *p;
  const float *g;
  uint16_t *m;
  float *v;
  int64_t n;
  const gt__adamw_k *k;
} gt__adamw_args;

/* Member t's part: a static split by hand, in 16-element blocks (one cache
 * line of floats). */
static void gt__adamw_member(void *arg, int t, int nt) {
  const gt__adamw_args *a = arg;
  int64_t i0, i1;
  gt_team_split_blocks(a->n, 16, t, nt, &i0, &i1);
  if (i0 < i1) gt__range(a->p, a->g, a->m, a->v, i0, i1, a->k);
}

void gt_adamw_update_mu_bf16(float *p, const float *g, uint16_t *m, float *v, int64_t n, const gt_adamw_hparams *h) {
  if (n <= 0) return;
  const gt__adamw_k k = gt__adamw_consts(h);
  /* the static split of gt_adamw_update: 16-element blocks */
  gt__adamw_args a = {p, g, m, v, n, &k};
  gt_team_par(n >= GT__PAR_MIN, gt__adamw_member, &a);
}
