/* The MoE load-balance loss (MaxText moe.py load_balance_loss), per sequence:
 * counts come from the top-k lists (N*k work) instead of one-hot masks
 * (N*E*k), and experts are taken in stack-sized chunks so the kernel needs no
 * allocation. Sums run in double, in sequence and token order. */
#include "kernels/moe.h"

enum { GT__LB_CHUNK = 256 };

/* cnt[e - e0] = #slots of sequence b routed to e, for e in [e0, e1). */
static void gt__lb_counts(int32_t *cnt, const int32_t *topk, int64_t b, const gt_moe_dims *d, int e0,
                          int e1) {
  for (int e = e0; e < e1; e++) cnt[e - e0] = 0;
  const int32_t *t = topk + b * d->T * d->k;
  for (int64_t i = 0; i < d->T * d->k; i++)
    if (t[i] >= e0 && t[i] < e1) cnt[t[i] - e0]++;
}

float gt_moe_lb_loss(const float *probs, const int32_t *topk, const gt_moe_dims *d) {
  const int E = d->E;
  const double T = (double)d->T;
  double acc = 0.0;
  for (int64_t b = 0; b < d->B; b++)
    for (int e0 = 0; e0 < E; e0 += GT__LB_CHUNK) {
      const int e1 = e0 + GT__LB_CHUNK < E ? e0 + GT__LB_CHUNK : E;
      int32_t cnt[GT__LB_CHUNK];
      double pbar[GT__LB_CHUNK] = {0};
      gt__lb_counts(cnt, topk, b, d, e0, e1);
      for (int64_t s = 0; s < d->T; s++) {
        const float *P = probs + (b * d->T + s) * E;
        for (int e = e0; e < e1; e++) pbar[e - e0] += P[e];
      }
      for (int e = e0; e < e1; e++) acc += (cnt[e - e0] / T) * (pbar[e - e0] / T);
    }
  return (float)((double)d->lb_weight * E * E * acc / ((double)d->B * E));
}

void gt_moe_lb_backward(float *dprobs, const int32_t *topk, float dlb, const gt_moe_dims *d) {
  const int E = d->E;
  /* d lb / d P[b,s,e] = lb_weight * E^2 / (B*E) * f[b,e] / T */
  const double base = (double)dlb * d->lb_weight * E / ((double)d->B * d->T * d->T);
  for (int64_t b = 0; b < d->B; b++)
    for (int e0 = 0; e0 < E; e0 += GT__LB_CHUNK) {
      const int e1 = e0 + GT__LB_CHUNK < E ? e0 + GT__LB_CHUNK : E;
      int32_t cnt[GT__LB_CHUNK];
      float gcol[GT__LB_CHUNK];
      gt__lb_counts(cnt, topk, b, d, e0, e1);
      for (int e = e0; e < e1; e++) gcol[e - e0] = (float)(base * cnt[e - e0]);
      for (int64_t s = 0; s < d->T; s++) {
        float *dP = dprobs + (b * d->T + s) * E;
        for (int e = e0; e < e1; e++) dP[e] += gcol[e - e0];
      }
    }
}
