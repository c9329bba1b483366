/* Scalar reference for single-query attention against a KV cache: the whole
 * score row, softmax and weighted sum in double, in the plainest order. */
#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"

void gt_attention_decode_ref(float *out, const float *q, const float *kc, const float *vc,
                             const gt_attn_cache_dims *d) {
  const int H = d->H, K = d->K, hd = d->hd, group = H / K;
  const int64_t n = d->n, row = (int64_t)K * hd;
  double *s = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (int h = 0; h < H; h++) {
    const float *qh = q + (int64_t)h * hd;
    const int kh = h / group;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const float *k = kc + ((d->start + i) % d->cap) * row + (int64_t)kh * hd;
      double dot = 0.0;
      for (int c = 0; c < hd; c++) dot += (double)qh[c] * k[c];
      s[i] = d->scale * dot;
      if (s[i] > mx) mx = s[i];
    }
    for (int64_t i = 0; i < n; i++) sum += (s[i] = exp(s[i] - mx));
    float *o = out + (int64_t)h * hd;
    for (int c = 0; c < hd; c++) {
      double acc = 0.0;
      for (int64_t i = 0; i < n; i++)
        acc += s[i] * vc[((d->start + i) % d->cap) * row + (int64_t)kh * hd + c];
      o[c] = n > 0 ? (float)(acc / sum) : 0.0f;
    }
  }
  free(s);
}
