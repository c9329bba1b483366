/* Single-query attention against a KV cache: the decoding step's attention.
 *
 * The training kernel (attention.c) works on whole [T, T] bands of one
 * contiguous sequence; a decoding step has one query row and keys that sit in
 * a ring buffer, so it gets this small kernel. Per query head, keys stream in
 * blocks of GT__DBK with an online softmax (running max and sum, the output
 * row doubling as the accumulator), so the scratch is one block of scores on
 * the stack whatever the context length. Heads are independent items of a
 * static partition, each summing in key order: the result does not depend on
 * the thread count. */
#include <math.h>
#include <string.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "simd_exp.h"

enum { GT__DBK = 64 };

static void gt__decode_head(float *o, const float *qh, const float *kc, const float *vc, int64_t row,
                            int hd, const gt_attn_cache_dims *d) {
  float s[GT__DBK];
  float m = -INFINITY, l = 0.0f;
  memset(o, 0, (size_t)hd * sizeof(float));
  for (int64_t i0 = 0; i0 < d->n; i0 += GT__DBK) {
    const int nb = (int)(d->n - i0 < GT__DBK ? d->n - i0 : GT__DBK);
    float bm = -INFINITY;
    for (int b = 0; b < nb; b++) {
      const float *k = kc + ((d->start + i0 + b) % d->cap) * row;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < hd; c++) dot += qh[c] * k[c];
      s[b] = d->scale * dot;
      bm = s[b] > bm ? s[b] : bm;
    }
    const float mn = bm > m ? bm : m;
    const float corr = gt__expf(m - mn); /* 0 on the first block (m = -inf) */
    l *= corr;
#pragma omp simd
    for (int c = 0; c < hd; c++) o[c] *= corr;
#pragma omp simd reduction(+ : l)
    for (int b = 0; b < nb; b++) {
      s[b] = gt__expf(s[b] - mn);
      l += s[b];
    }
    for (int b = 0; b < nb; b++) {
      const float *v = vc + ((d->start + i0 + b) % d->cap) * row;
      const float p = s[b];
#pragma omp simd
      for (int c = 0; c < hd; c++) o[c] += p * v[c];
    }
    m = mn;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma omp simd
  for (int c = 0; c < hd; c++) o[c] *= inv;
}

typedef struct gt__decode_args {
  float *out;
  const float *q, *kc, *vc;
  const gt_attn_cache_dims *d;
  int64_t row;
  int hd, group;
} gt__decode_args;

static void gt__decode_part(void *arg, int64_t h0, int64_t h1) {
  const gt__decode_args *a = arg;
  const int hd = a->hd;
  for (int h = (int)h0; h < (int)h1; h++) {
    const int64_t koff = (int64_t)(h / a->group) * hd;
    gt__decode_head(a->out + (int64_t)h * hd, a->q + (int64_t)h * hd, a->kc + koff, a->vc + koff, a->row, hd, a->d);
  }
}

void gt_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                         const gt_attn_cache_dims *d) {
  const int H = d->H, hd = d->hd, group = H / d->K;
  const int64_t row = (int64_t)d->K * hd;
  gt__decode_args a = {out, q, kc, vc, d, row, hd, group};
  gt_team_for((int64_t)H * hd * d->n >= 65536, H, gt__decode_part, &a);
}
