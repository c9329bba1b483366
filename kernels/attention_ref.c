/* Scalar reference for causal GQA attention with an optional sliding window.
 * Deliberately naive: one full score row per query, no tiling, so the fast
 * kernel in attention.c has something obviously correct to be compared to. */
#include "kernels/kernels.h"
#include "kernels/bf16.h"

#include <math.h>
#include <stdlib.h>

static int gt__ref_visible(const int32_t *seg_b, int window, int i, int j) {
  if (j > i) return 0;
  if (window > 0 && i - j >= window) return 0;
  if (seg_b && seg_b[i] != seg_b[j]) return 0;
  return 1;
}

/* ---- bf16 mode (gt_attn_dims.bf16): the operands of each product rounded
 * to bf16 at the points the kernel rounds them (q, k, v, which the contract
 * makes bf16 values already, so a no-op there; the unnormalized
 * softmax weights exp(s - max) of forward; P = exp(s - lse), dS = P (dP - D)
 * before scale, and dO in backward), every sum in double. */
static double gt__r16(double x) { return gt_bf16_round1((float)x); }

static void gt__fwd_ref_bf16(float *out, float *lse, const float *q, const float *k,
                             const float *v, const int32_t *seg, const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd;
  const int group = H / K;
  double *s = malloc((size_t)(T > 0 ? T : 1) * sizeof(double));
  double *o = malloc((size_t)(hd > 0 ? hd : 1) * sizeof(double));
  for (int b = 0; b < B; b++) {
    const int32_t *seg_b = seg ? seg + (size_t)b * T : NULL;
    for (int h = 0; h < H; h++) {
      const int kh = h / group;
      for (int i = 0; i < T; i++) {
        const float *qi = q + (((size_t)b * T + i) * H + h) * hd;
        double mx = -INFINITY;
        for (int j = 0; j < T; j++) {
          s[j] = -INFINITY;
          if (!gt__ref_visible(seg_b, d->window, i, j)) continue;
          const float *kj = k + (((size_t)b * T + j) * K + kh) * hd;
          double dot = 0.0;
          for (int c = 0; c < hd; c++) dot += gt__r16(qi[c]) * gt__r16(kj[c]);
          s[j] = (double)d->scale * dot;
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0.0;
        for (int c = 0; c < hd; c++) o[c] = 0.0;
        for (int j = 0; j < T; j++) {
          if (s[j] == -INFINITY) continue;
          const double p = exp(s[j] - mx);
          sum += p;
          const double pr = gt__r16(p);
          const float *vj = v + (((size_t)b * T + j) * K + kh) * hd;
          for (int c = 0; c < hd; c++) o[c] += pr * gt__r16(vj[c]);
        }
        float *oi = out + (((size_t)b * T + i) * H + h) * hd;
        for (int c = 0; c < hd; c++) oi[c] = (float)(o[c] / sum);
        lse[((size_t)b * H + h) * T + i] = (float)(mx + log(sum));
      }
    }
  }
  free(s);
  free(o);
}

static void gt__bwd_ref_bf16(float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q,
                             const float *k, const float *v, const int32_t *seg,
                             const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd;
  const int group = H / K;
  const size_t nkv = (size_t)B * T * K * hd;
  const double scale = d->scale;
  double *p = malloc((size_t)(T > 0 ? T : 1) * sizeof(double));
  double *gq = malloc((size_t)(hd > 0 ? hd : 1) * sizeof(double));
  double *gk = malloc((nkv ? nkv : 1) * sizeof(double)), *gv = malloc((nkv ? nkv : 1) * sizeof(double));
  for (size_t x = 0; x < nkv; x++) {
    gk[x] = dk ? dk[x] : 0.0;
    gv[x] = dv ? dv[x] : 0.0;
  }
  for (int b = 0; b < B; b++) {
    const int32_t *seg_b = seg ? seg + (size_t)b * T : NULL;
    for (int h = 0; h < H; h++) {
      const int kh = h / group;
      for (int i = 0; i < T; i++) {
        const size_t qoff = (((size_t)b * T + i) * H + h) * hd;
        const float *qi = q + qoff, *doi = dout + qoff, *oi = out + qoff;
        const double lse_i = lse[((size_t)b * H + h) * T + i];
        double D = 0.0;
        for (int c = 0; c < hd; c++) D += (double)doi[c] * oi[c];
        for (int c = 0; c < hd; c++) gq[c] = dq ? dq[qoff + c] : 0.0;
        for (int j = 0; j < T; j++) {
          if (!gt__ref_visible(seg_b, d->window, i, j)) continue;
          const size_t koff = (((size_t)b * T + j) * K + kh) * hd;
          const float *kj = k + koff, *vj = v + koff;
          double dot = 0.0, dp = 0.0;
          for (int c = 0; c < hd; c++) dot += gt__r16(qi[c]) * gt__r16(kj[c]);
          p[j] = exp(scale * dot - lse_i);
          for (int c = 0; c < hd; c++) dp += gt__r16(doi[c]) * gt__r16(vj[c]);
          const double ds = gt__r16(p[j] * (dp - D)), pr = gt__r16(p[j]);
          for (int c = 0; c < hd; c++) {
            gq[c] += scale * ds * gt__r16(kj[c]);
            gk[koff + c] += scale * ds * gt__r16(qi[c]);
            gv[koff + c] += pr * gt__r16(doi[c]);
          }
        }
        if (dq)
          for (int c = 0; c < hd; c++) dq[qoff + c] = (float)gq[c];
      }
    }
  }
  for (size_t x = 0; x < nkv; x++) {
    if (dk) dk[x] = (float)gk[x];
    if (dv) dv[x] = (float)gv[x];
  }
  free(p);
  free(gq);
  free(gk);
  free(gv);
}

static void gt__fwd_ref(float *out, float *lse, const float *q, const float *k, const float *v,
                        const int32_t *seg, const gt_attn_dims *d) {
  if (d->bf16) {
    gt__fwd_ref_bf16(out, lse, q, k, v, seg, d);
    return;
  }
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

static void gt__bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                        const gt_attn_dims *d) {
  if (d->bf16) {
    gt__bwd_ref_bf16(dq, dk, dv, dout, out, lse, q, k, v, seg, d);
    return;
  }
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

/* round_out and out16 (dtype=bfloat16's output): a rounding pass and a pack
 * after the forward; the backward widens out16 when out is NULL */
void gt_attention_forward_ref(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, const gt_attn_dims *d) {
  gt__fwd_ref(out, lse, q, k, v, seg, d);
  const int64_t n = d->B > 0 && d->T > 0 && d->H > 0 && d->hd > 0 ? (int64_t)d->B * d->T * d->H * d->hd : 0;
  if (d->round_out)
    for (int64_t i = 0; i < n; i++) out[i] = gt_bf16_round1(out[i]);
  if (d->out16) gt_bf16_pack_ref(d->out16, out, n);
}

void gt_attention_backward_ref(float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q,
                               const float *k, const float *v, const int32_t *seg,
                               const gt_attn_dims *d) {
  float *wide = NULL;
  if (!out && d->out16) {
    const int64_t n = d->B > 0 && d->T > 0 && d->H > 0 && d->hd > 0 ? (int64_t)d->B * d->T * d->H * d->hd : 0;
    if (!(wide = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)))) return; /* test-only scratch */
    gt_bf16_unpack_ref(wide, d->out16, n);
    out = wide;
  }
  gt__bwd_ref(dq, dk, dv, dout, out, lse, q, k, v, seg, d);
  free(wide);
}
