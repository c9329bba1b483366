/* Fused AdamW step with the first moment stored in bf16 (mu_dtype=bfloat16;
 * see kernels.h). The float32 operations are gt_adamw_update's, in its
 * order; m is expanded from bf16 on load (exact) and rounded to nearest even
 * on store, with the integer rounding of kernels/bf16.h (NaNs keep a quiet
 * bit), so the vector path and the scalar tail give the reference's bits. */
#include <math.h>
#if defined(GT__KERNELS_AVX512)
#include <immintrin.h>
#elif defined(GT__KERNELS_AVX2)
#include <immintrin.h>

#include "kernels/lanes8.h"
#endif

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 32768

typedef struct gt__adamw_k {
  float b1, b2, ob1, ob2, bc1, bc2, lr, eps, eps_root, wd, gs;
} gt__adamw_k;

static inline void gt__scalar(float *p, const float *g, uint16_t *m, float *v, int64_t i0, int64_t i1,
                              const gt__adamw_k *k) {
  for (int64_t i = i0; i < i1; i++) {
    const float gi = g[i] * k->gs;
    const float mi = k->b1 * gt_bf16_to_f32(m[i]) + k->ob1 * gi;
    const float vi = k->b2 * v[i] + k->ob2 * (gi * gi);
    m[i] = gt_f32_to_bf16(mi);
    v[i] = vi;
    const float mh = mi / k->bc1, vh = vi / k->bc2;
    const float u = mh / (sqrtf(vh + k->eps_root) + k->eps) + k->wd * p[i];
    p[i] = p[i] - k->lr * u;
  }
}

static void gt__range(float *p, const float *g, uint16_t *m, float *v, int64_t i0, int64_t i1, const gt__adamw_k *k) {
  int64_t i = i0;
#if defined(GT__KERNELS_AVX512)
  const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
  const __m512 ob1 = _mm512_set1_ps(k->ob1), ob2 = _mm512_set1_ps(k->ob2);
  const __m512 bc1 = _mm512_set1_ps(k->bc1), bc2 = _mm512_set1_ps(k->bc2);
  const __m512 lr = _mm512_set1_ps(k->lr), eps = _mm512_set1_ps(k->eps);
  const __m512 er = _mm512_set1_ps(k->eps_root), wd = _mm512_set1_ps(k->wd);
  const __m512 gs = _mm512_set1_ps(k->gs);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (; i + 16 <= i1; i += 16) {
    const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
    const __m512 m0 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(m + i))), 16));
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, m0), _mm512_mul_ps(ob1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(ob2, _mm512_mul_ps(gi, gi)));
    /* round mi to bf16: + 0x7fff + the lowest kept bit, keep the top half;
     * a NaN keeps its top half with the quiet bit set */
    const __m512i u = _mm512_castps_si512(mi);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), one), half));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    r = _mm512_mask_or_epi32(r, nan, u, quiet);
    _mm256_storeu_si256((__m256i *)(m + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    _mm512_storeu_ps(v + i, vi);
    const __m512 mh = _mm512_div_ps(mi, bc1), vh = _mm512_div_ps(vi, bc2);
    const __m512 pi = _mm512_loadu_ps(p + i);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_add_ps(vh, er)), eps);
    const __m512 up = _mm512_add_ps(_mm512_div_ps(mh, den), _mm512_mul_ps(wd, pi));
    _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(lr, up)));
  }
#elif defined(GT__KERNELS_AVX2)
  const __m256 b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2);
  const __m256 ob1 = _mm256_set1_ps(k->ob1), ob2 = _mm256_set1_ps(k->ob2);
  const __m256 bc1 = _mm256_set1_ps(k->bc1), bc2 = _mm256_set1_ps(k->bc2);
  const __m256 lr = _mm256_set1_ps(k->lr), eps = _mm256_set1_ps(k->eps);
  const __m256 er = _mm256_set1_ps(k->eps_root), wd = _mm256_set1_ps(k->wd);
  const __m256 gs = _mm256_set1_ps(k->gs);
  for (; i + 8 <= i1; i += 8) {
    const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
    const __m256 m0 = gt__widen8(m + i);
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, m0), _mm256_mul_ps(ob1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(ob2, _mm256_mul_ps(gi, gi)));
    gt__store_bf16x8(m + i, gt__rnd8(mi)); /* m rounded to bf16: the same integer rounding */
    _mm256_storeu_ps(v + i, vi);
    const __m256 mh = _mm256_div_ps(mi, bc1), vh = _mm256_div_ps(vi, bc2);
    const __m256 pi = _mm256_loadu_ps(p + i);
    const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_add_ps(vh, er)), eps);
    const __m256 up = _mm256_add_ps(_mm256_div_ps(mh, den), _mm256_mul_ps(wd, pi));
    _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, up)));
  }
#endif
  gt__scalar(p, g, m, v, i, i1, k);
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
  const gt__adamw_k k = {.b1 = h->b1,
                         .b2 = h->b2,
                         .ob1 = 1.0f - h->b1,
                         .ob2 = 1.0f - h->b2,
                         .bc1 = (float)(1.0 - pow((double)h->b1, (double)h->t)),
                         .bc2 = (float)(1.0 - pow((double)h->b2, (double)h->t)),
                         .lr = h->lr,
                         .eps = h->eps,
                         .eps_root = h->eps_root,
                         .wd = h->weight_decay,
                         .gs = h->grad_scale};
  /* the static split of gt_adamw_update: 16-element blocks */
gt__adamw_args a = {p, g, m, v, n, &k};
  gt_team_par(n >= GT__PAR_MIN, gt__adamw_member, &a);
}
