/* What the two AdamW kernels share: gt_adamw_update (kernels/adamw.c, m in
 * float32) and gt_adamw_update_mu_bf16 (kernels/adamw_bf16.c, m stored in
 * bf16) differ only in how m is loaded and stored. Here: the step's
 * constants, and one element's (or one vector's) step once m's old value is
 * in hand, in optax's order. Both files are compiled once per ISA copy
 * (kernels/isa.h); the vector step is the copy's width (16 lanes on
 * AVX-512, 8 on AVX2, none on the portable copy). Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_ADAMW_STEP_H
#define GEMTRAIN_KERNELS_ADAMW_STEP_H

#include <math.h>
#include <stdint.h>
#if defined(GT__KERNELS_AVX512) || defined(GT__KERNELS_AVX2)
#include <immintrin.h>
#endif

#include "kernels/kernels.h"

typedef struct gt__adamw_k {
  float b1, b2, ob1, ob2, bc1, bc2, lr, eps, eps_root, wd, gs;
} gt__adamw_k;

/* the step's float32 constants; the two bias corrections formed in double */
static inline gt__adamw_k gt__adamw_consts(const gt_adamw_hparams *h) {
  return (gt__adamw_k){.b1 = h->b1,
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
}

/* Element i: v[i] and p[i] updated from g[i] and m's old value m0; returns
 * m's new value, which the caller stores (as a float or rounded to bf16). */
static inline float gt__adamw_1(const gt__adamw_k *k, float *p, const float *g, float *v, float m0, int64_t i) {
  const float gi = g[i] * k->gs;
  const float mi = k->b1 * m0 + k->ob1 * gi;
  const float vi = k->b2 * v[i] + k->ob2 * (gi * gi);
  v[i] = vi;
  const float mh = mi / k->bc1, vh = vi / k->bc2;
  const float u = mh / (sqrtf(vh + k->eps_root) + k->eps) + k->wd * p[i];
  p[i] = p[i] - k->lr * u;
  return mi;
}

/* The same on a vector of elements from i: GCC will not vectorize sqrtf
 * unless errno is off for the whole translation unit (a pragma or
 * attribute did not reach an outlined region's body), and the scalar loop
 * is compute-bound at about half of memory speed. So the same operations,
 * in the same order and each correctly rounded, are spelled out in
 * intrinsics: bit-identical to gt__adamw_1. */
#if defined(GT__KERNELS_AVX512)
#define GT__ADAMW_W 16
typedef __m512 gt__adamw_vf;
#define GT__V(op) _mm512_##op
#elif defined(GT__KERNELS_AVX2)
#define GT__ADAMW_W 8
typedef __m256 gt__adamw_vf;
#define GT__V(op) _mm256_##op
#endif

#ifdef GT__ADAMW_W
typedef struct gt__adamw_v {
  gt__adamw_vf b1, b2, ob1, ob2, bc1, bc2, lr, eps, er, wd, gs;
} gt__adamw_v;

static inline gt__adamw_v gt__adamw_vconsts(const gt__adamw_k *k) {
  return (gt__adamw_v){GT__V(set1_ps)(k->b1),  GT__V(set1_ps)(k->b2),       GT__V(set1_ps)(k->ob1),
                       GT__V(set1_ps)(k->ob2), GT__V(set1_ps)(k->bc1),      GT__V(set1_ps)(k->bc2),
                       GT__V(set1_ps)(k->lr),  GT__V(set1_ps)(k->eps),      GT__V(set1_ps)(k->eps_root),
                       GT__V(set1_ps)(k->wd),  GT__V(set1_ps)(k->gs)};
}

static inline __attribute__((always_inline)) gt__adamw_vf gt__adamw_vstep(const gt__adamw_v *c, float *p,
                                                                          const float *g, float *v,
                                                                          gt__adamw_vf m0, int64_t i) {
  const gt__adamw_vf gi = GT__V(mul_ps)(GT__V(loadu_ps)(g + i), c->gs);
  const gt__adamw_vf mi = GT__V(add_ps)(GT__V(mul_ps)(c->b1, m0), GT__V(mul_ps)(c->ob1, gi));
  const gt__adamw_vf vi = GT__V(add_ps)(GT__V(mul_ps)(c->b2, GT__V(loadu_ps)(v + i)),
                                        GT__V(mul_ps)(c->ob2, GT__V(mul_ps)(gi, gi)));
  GT__V(storeu_ps)(v + i, vi);
  const gt__adamw_vf mh = GT__V(div_ps)(mi, c->bc1), vh = GT__V(div_ps)(vi, c->bc2);
  const gt__adamw_vf pi = GT__V(loadu_ps)(p + i);
  const gt__adamw_vf den = GT__V(add_ps)(GT__V(sqrt_ps)(GT__V(add_ps)(vh, c->er)), c->eps);
  const gt__adamw_vf u = GT__V(add_ps)(GT__V(div_ps)(mh, den), GT__V(mul_ps)(c->wd, pi));
  GT__V(storeu_ps)(p + i, GT__V(sub_ps)(pi, GT__V(mul_ps)(c->lr, u)));
  return mi;
}
#endif

#endif
