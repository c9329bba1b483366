/* Scalar reference for causal GQA attention with an optional sliding window.
 * Deliberately naive: one full score row per query, no tiling, so the fast
 * kernel in attention.c has something obviously correct to be compared to. */
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>

static int gt__ref_visible(const int32_t *seg_b, int window, int i, int j) {
  if (j > i) return 0;
  if (window > 0 && i - j >= window) return 0;
  if (seg_b && seg_b[i] != seg_b[j]) return 0;
  return 1;
}

void gt_attention_forward_ref(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd;
  const int group = H / K;
  float *s = malloc((size_t)(T > 0 ? T : 1) * sizeof(float));
  for (int b = 0; b < B; b++) {
    const int32_t *seg_b = seg ? seg + (size_t)b * T : NULL;
    for (int h = 0; h < H; h++) {
      const int kh = h / group;
      for (int i = 0; i < T; i++) {
        const float *qi = q + (((size_t)b * T + i) * H + h) * hd;
        float mx = -INFINITY;
        for (int j = 0; j < T; j++) {
          if (!gt__ref_visible(seg_b, d->window, i, j)) {
            s[j] = -INFINITY;
            continue;
          }
          const float *kj = k + (((size_t)b * T + j) * K + kh) * hd;
          float dot = 0.0f;
          for (int c = 0; c < hd; c++) dot += qi[c] * kj[c];
          s[j] = d->scale * dot;
          if (s[j] > mx) mx = s[j];
        }
        float sum = 0.0f;
        for (int j = 0; j < T; j++) {
          s[j] = (s[j] == -INFINITY) ? 0.0f : expf(s[j] - mx);
          sum += s[j];
        }
        float *oi = out + (((size_t)b * T + i) * H + h) * hd;
        for (int c = 0; c < hd; c++) oi[c] = 0.0f;
        for (int j = 0; j < T; j++) {
          if (s[j] == 0.0f) continue;
          const float *vj = v + (((size_t)b * T + j) * K + kh) * hd;
          const float p = s[j] / sum;
          for (int c = 0; c < hd; c++) oi[c] += p * vj[c];
        }
        lse[((size_t)b * H + h) * T + i] = mx + logf(sum);
      }
    }
  }
  free(s);
}

void gt_attention_backward_ref(float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q,
                               const float *k, const float *v, const int32_t *seg,
                               const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd;
  const int group = H / K;
  float *p = malloc((size_t)(T > 0 ? T : 1) * sizeof(float));
  for (int b = 0; b < B; b++) {
    const int32_t *seg_b = seg ? seg + (size_t)b * T : NULL;
    for (int h = 0; h < H; h++) {
      const int kh = h / group;
      for (int i = 0; i < T; i++) {
        const size_t qoff = (((size_t)b * T + i) * H + h) * hd;
        const float *qi = q + qoff, *doi = dout + qoff, *oi = out + qoff;
        const float lse_i = lse[((size_t)b * H + h) * T + i];
        /* D_i = sum_j p_ij dP_ij equals dO_i . O_i because O_i = sum_j p_ij v_j. */
        float D = 0.0f;
        for (int c = 0; c < hd; c++) D += doi[c] * oi[c];
        for (int j = 0; j < T; j++) {
          p[j] = 0.0f;
          if (!gt__ref_visible(seg_b, d->window, i, j)) continue;
          const float *kj = k + (((size_t)b * T + j) * K + kh) * hd;
          float dot = 0.0f;
          for (int c = 0; c < hd; c++) dot += qi[c] * kj[c];
          p[j] = expf(d->scale * dot - lse_i);
        }
        for (int j = 0; j < T; j++) {
          if (!gt__ref_visible(seg_b, d->window, i, j)) continue;
          const size_t koff = (((size_t)b * T + j) * K + kh) * hd;
          const float *kj = k + koff, *vj = v + koff;
          float dp = 0.0f;
          for (int c = 0; c < hd; c++) dp += doi[c] * vj[c];
          const float ds = p[j] * (dp - D) * d->scale;
          if (dq) {
            float *dqi = dq + qoff;
            for (int c = 0; c < hd; c++) dqi[c] += ds * kj[c];
          }
          if (dk) {
            float *dkj = dk + koff;
            for (int c = 0; c < hd; c++) dkj[c] += ds * qi[c];
          }
          if (dv) {
            float *dvj = dv + koff;
            for (int c = 0; c < hd; c++) dvj[c] += p[j] * doi[c];
          }
        }
      }
    }
  }
  free(p);
}
