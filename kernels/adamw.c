/* Fused AdamW step with optax.adamw semantics (see kernels.h). Per-element
 * math is float32 in the order optax applies it; only the two bias
 * corrections are scalars, formed once in double. */
#include <math.h>
#if defined(GT__KERNELS_AVX512) || defined(GT__KERNELS_AVX2)
#include <immintrin.h>
#endif

#include "base/team.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__adamw_k {
  float b1, b2, ob1, ob2, bc1, bc2, lr, eps, eps_root, wd, gs;
} gt__adamw_k;

static inline void gt__adamw_scalar(float *p, const float *g, float *m, float *v,
                                    int64_t i0, int64_t i1, const gt__adamw_k *k) {
  for (int64_t i = i0; i < i1; i++) {
    const float gi = g[i] * k->gs;
    const float mi = k->b1 * m[i] + k->ob1 * gi;
    const float vi = k->b2 * v[i] + k->ob2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float mh = mi / k->bc1, vh = vi / k->bc2;
    const float u = mh / (sqrtf(vh + k->eps_root) + k->eps) + k->wd * p[i];
    p[i] = p[i] - k->lr * u;
  }
}

/* GCC will not vectorize sqrtf unless errno is off for the whole translation
 * unit (a pragma or attribute did not reach an outlined region's body), and the
 * scalar loop is compute-bound at about half of memory speed. So the same
 * operations, in the same order and each correctly rounded, are spelled out
 * in AVX-512 and in AVX2: results are bit-identical to the scalar loop. */
static void gt__adamw_range(float *p, const float *g, float *m, float *v,
                            int64_t i0, int64_t i1, const gt__adamw_k *k) {
  int64_t i = i0;
#if defined(GT__KERNELS_AVX512)
  const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
  const __m512 ob1 = _mm512_set1_ps(k->ob1), ob2 = _mm512_set1_ps(k->ob2);
  const __m512 bc1 = _mm512_set1_ps(k->bc1), bc2 = _mm512_set1_ps(k->bc2);
  const __m512 lr = _mm512_set1_ps(k->lr), eps = _mm512_set1_ps(k->eps);
  const __m512 er = _mm512_set1_ps(k->eps_root), wd = _mm512_set1_ps(k->wd);
  const __m512 gs = _mm512_set1_ps(k->gs);
  for (; i + 16 <= i1; i += 16) {
    const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)),
                                    _mm512_mul_ps(ob1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(ob2, _mm512_mul_ps(gi, gi)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 mh = _mm512_div_ps(mi, bc1), vh = _mm512_div_ps(vi, bc2);
    const __m512 pi = _mm512_loadu_ps(p + i);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_add_ps(vh, er)), eps);
    const __m512 u = _mm512_add_ps(_mm512_div_ps(mh, den), _mm512_mul_ps(wd, pi));
    _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(lr, u)));
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
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(ob1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(ob2, _mm256_mul_ps(gi, gi)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 mh = _mm256_div_ps(mi, bc1), vh = _mm256_div_ps(vi, bc2);
    const __m256 pi = _mm256_loadu_ps(p + i);
    const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_add_ps(vh, er)), eps);
    const __m256 u = _mm256_add_ps(_mm256_div_ps(mh, den), _mm256_mul_ps(wd, pi));
    _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, u)));
  }
#endif
  gt__adamw_scalar(p, g, m, v, i, i1, k);
}

typedef struct gt__adamw_args {
  float *p;
  const float *g;
  float *m;
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
  if (i0 < i1) gt__adamw_range(a->p, a->g, a->m, a->v, i0, i1, a->k);
}

void gt_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     const gt_adamw_hparams *h) {
  if (n <= 0) return;
  const gt__adamw_k k = {
      .b1 = h->b1, .b2 = h->b2, .ob1 = 1.0f - h->b1, .ob2 = 1.0f - h->b2,
      .bc1 = (float)(1.0 - pow((double)h->b1, (double)h->t)),
      .bc2 = (float)(1.0 - pow((double)h->b2, (double)h->t)),
      .lr = h->lr, .eps = h->eps, .eps_root = h->eps_root,
      .wd = h->weight_decay, .gs = h->grad_scale};
  /* Static split by hand, in 16-element blocks (one cache line of floats). */
gt__adamw_args a = {p, g, m, v, n, &k};
  gt_team_par(gt__par(n), gt__adamw_member, &a);
}
