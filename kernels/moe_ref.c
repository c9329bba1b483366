/* Scalar reference of the routed MoE: one token at a time, every expert
 * evaluated directly on the token's own vector with dot products summed in
 * double, no grouping and no GEMM. It writes the same saved layout as the
 * fast path (rows sorted by expert, then token, then slot) so the tests can
 * compare the two state for state. Test-only: per-call scratch is malloc'd.
 *
 * bf16 (d->bf16): the experts' inputs enter their products rounded to bf16
 * (gt__in), the products are summed in double, and what the experts write
 * (the normalised row, gate, up, act, each expert's output, the combined
 * sum) is rounded to bf16; gradients stay float32, the router float32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/moe.h"

typedef struct gt__ref_tmp {
  float *nh, *gin, *rin, *logit, *act, *hf, *dg, *du, *ds, *dnh, *drin, *dP, *dP_all;
} gt__ref_tmp;

static void gt__ref_tmp_alloc(gt__ref_tmp *t, const gt_moe_dims *d, int need_lb) {
  const size_t D = (size_t)d->d, E = (size_t)d->E, F = (size_t)d->F;
  float *p = calloc(6 * D + 2 * E + 4 * F + 1, sizeof(float));
  t->nh = p, p += D;
  t->gin = p, p += D;
  t->rin = p, p += D;
  t->ds = p, p += D;
  t->dnh = p, p += D;
  t->drin = p, p += D;
  t->logit = p, p += E;
  t->dP = p, p += E;
  t->act = p, p += F;
  t->hf = p, p += F;
  t->dg = p, p += F;
  t->du = p;
  t->dP_all = need_lb ? calloc((size_t)(d->B * d->T) * E, sizeof(float)) : NULL;
}

static void gt__ref_tmp_free(gt__ref_tmp *t) {
  free(t->nh);
  free(t->dP_all);
}

/* gate_in of token n (and its scale-free norm in t->nh); rstd out. */
static void gt__ref_gate_in(gt__ref_tmp *t, float *rstd, const float *hn, const gt_moe_weights *w,
                            const gt_moe_dims *d) {
  gt_rmsnorm_forward_ref(t->nh, rstd, hn, NULL, 1, d->d, d->eps, 0.0f);
  const float root = 1.0f / sqrtf((float)d->d);
  for (int c = 0; c < d->d; c++) t->gin[c] = (t->nh[c] * w->router_scale[c]) * root;
}

/* k passes of "largest not yet taken", strict > so a tie goes to the lower index */
static void gt__ref_topk(int32_t *idx, const float *l, int E, int K) {
  for (int j = 0; j < K; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= idx[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    idx[j] = best;
  }
}

static float gt__ref_dot(const float *a, const float *b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
  return (float)s;
}

/* an expert product's input: rounded to bf16 in bf16 runs */
static float gt__in(const gt_moe_dims *d, float x) { return d->bf16 ? gt_bf16_round1(x) : x; }

/* an expert's output as it is written: rounded to bf16 in bf16 runs */
static void gt__out(const gt_moe_dims *d, float *x, int64_t n) {
  if (d->bf16)
    for (int64_t i = 0; i < n; i++) x[i] = gt_bf16_round1(x[i]);
}

/* the expert dot product: inputs as gt__in, summed in double */
static float gt__ref_edot(const gt_moe_dims *d, const float *a, const float *b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) s += (double)gt__in(d, a[i]) * gt__in(d, b[i]);
  return (float)s;
}

void gt_moe_forward_partial_ref(gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                                const gt_moe_dims *d, void *work) {
  (void)work;
  const int64_t N = d->B * d->T;
  const int D = d->d, E = d->E, K = d->k, F = d->F;
  int e0, e1;
  gt_moe_expert_range(E, d->ep_size, d->ep_rank, &e0, &e1);
  gt__ref_tmp t;
  gt__ref_tmp_alloc(&t, d, 0);

  /* routing */
  for (int64_t n = 0; n < N; n++) {
    gt__ref_gate_in(&t, s->rstd_router + n, h + n * D, w, d);
    for (int e = 0; e < E; e++) t.logit[e] = gt__ref_dot(t.gin, w->router_proj + (int64_t)e * D, D);
    int32_t *idx = s->topk + n * K;
    gt__ref_topk(idx, t.logit, E, K);
    double mx = t.logit[0], z = 0.0, zk = 0.0;
    for (int e = 1; e < E; e++) mx = fmax(mx, t.logit[e]);
    for (int e = 0; e < E; e++) z += exp(t.logit[e] - mx);
    for (int e = 0; e < E; e++) s->probs[n * E + e] = (float)(exp(t.logit[e] - mx) / z);
    for (int j = 0; j < K; j++) zk += s->probs[n * E + idx[j]];
    for (int j = 0; j < K; j++)
      s->topk_w[n * K + j] = (float)(s->probs[n * E + idx[j]] / zk * w->per_expert_scale[idx[j]]);
  }
  s->lb_loss = d->lb_weight > 0.0f ? gt_moe_lb_loss_ref(s->probs, s->topk, d) : 0.0f;

  /* the sorted layout, expert by expert */
  int32_t r = 0;
  for (int64_t i = 0; i < N * K; i++) s->row_of[i] = -1;
  for (int e = e0; e < e1; e++) {
    s->offsets[e - e0] = r;
    for (int64_t i = 0; i < N * K; i++)
      if (s->topk[i] == e) s->slot_of[r] = (int32_t)i, s->row_of[i] = r++;
    s->counts[e - e0] = r - s->offsets[e - e0];
  }
  s->offsets[e1 - e0] = r;
  s->n_rows = r;

  /* experts, token by token */
  for (int64_t n = 0; n < N; n++) {
    gt_rmsnorm_forward_ref(t.rin, s->rstd_pre + n, h + n * D, w->pre_norm, 1, D, d->eps, 0.0f);
    gt__out(d, t.rin, D);
    double *acc = calloc((size_t)D, sizeof(double));
    for (int j = 0; j < K; j++) {
      const int32_t row = s->row_of[n * K + j];
      if (row < 0) continue;
      const int64_t le = s->topk[n * K + j] - e0;
      const float *wg = w->gate_up + le * 2 * F * D, *wu = wg + (int64_t)F * D, *wd = w->down + le * D * F;
      float *g = s->gu + (int64_t)row * 2 * F, *u = g + F;
      for (int f = 0; f < F; f++) {
        g[f] = gt__ref_edot(d, t.rin, wg + (int64_t)f * D, D);
        u[f] = gt__ref_edot(d, t.rin, wu + (int64_t)f * D, D);
      }
      gt__out(d, g, F);
      gt__out(d, u, F);
      gt_geglu_forward_ref(t.act, g, u, F);
      gt__out(d, t.act, F);
      for (int c = 0; c < D; c++) {
        float y = gt__ref_edot(d, t.act, wd + (int64_t)c * F, F);
        gt__out(d, &y, 1);
        acc[c] += (double)s->topk_w[n * K + j] * y;
      }
    }
    for (int c = 0; c < D; c++) s->sum[n * D + c] = (float)acc[c];
    free(acc);
  }
  gt__ref_tmp_free(&t);
}

void gt_moe_forward_finish_ref(float *out, gt_moe_saved *s, const gt_moe_weights *w,
                               const gt_moe_dims *d) {
  gt__out(d, s->sum, d->B * d->T * d->d);
  gt_rmsnorm_forward_ref(out, s->rstd_post, s->sum, w->post_norm, d->B * d->T, d->d, d->eps, 0.0f);
}

void gt_moe_forward_ref(float *out, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                        const gt_moe_dims *d, void *work) {
  gt_moe_forward_partial_ref(s, h, w, d, work);
  gt_moe_forward_finish_ref(out, s, w, d);
}

/* One owned slot of token n: adds its expert gradients and dL/drin, returns dL/dw. */
static float gt__ref_slot_backward(gt__ref_tmp *t, const gt_moe_grads *g, const gt_moe_saved *s,
                                   const gt_moe_weights *w, const gt_moe_dims *d, int64_t slot,
                                   int e0) {
  const int D = d->d, F = d->F;
  const int64_t le = s->topk[slot] - e0, row = s->row_of[slot];
  const float wt = s->topk_w[slot];
  const float *wg = w->gate_up + le * 2 * F * D, *wu = wg + (int64_t)F * D, *wd = w->down + le * D * F;
  const float *gr = s->gu + row * 2 * F, *ur = gr + F;
  gt_geglu_forward_ref(t->act, gr, ur, F);
  gt__out(d, t->act, F);
  double dw = 0.0;
  for (int f = 0; f < F; f++) {
    double hsum = 0.0;
    for (int c = 0; c < D; c++) hsum += (double)gt__in(d, t->ds[c]) * gt__in(d, wd[(int64_t)c * F + f]);
    dw += hsum * t->act[f];
    t->hf[f] = (float)(wt * hsum);
    t->dg[f] = t->du[f] = 0.0f;
  }
  /* the weight is applied to dL/dsum before it enters the down projection's
   * weight gradient, so bf16 rounds the product wt * ds */
  if (g->down)
    for (int c = 0; c < D; c++)
      for (int f = 0; f < F; f++) g->down[le * D * F + (int64_t)c * F + f] += gt__in(d, wt * t->ds[c]) * t->act[f];
  gt_geglu_backward_ref(t->dg, t->du, t->hf, gr, ur, F);
  for (int f = 0; f < F; f++)
    for (int c = 0; c < D; c++) {
      const float dg = gt__in(d, t->dg[f]), du = gt__in(d, t->du[f]);
      if (g->gate_up) {
        g->gate_up[le * 2 * F * D + (int64_t)f * D + c] += dg * t->rin[c];
        g->gate_up[le * 2 * F * D + (int64_t)(F + f) * D + c] += du * t->rin[c];
      }
      t->drin[c] += dg * gt__in(d, wg[(int64_t)f * D + c]) + du * gt__in(d, wu[(int64_t)f * D + c]);
    }
  return (float)dw;
}

void gt_moe_backward_ref(float *dh, const gt_moe_grads *g, const float *dout, float dlb,
                         const gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                         const gt_moe_dims *d, void *work) {
  (void)work;
  const int64_t N = d->B * d->T;
  const int D = d->d, E = d->E, K = d->k;
  const int lead = d->ep_rank == 0, with_lb = lead && d->lb_weight > 0.0f && dlb != 0.0f;
  int e0, e1;
  gt_moe_expert_range(E, d->ep_size, d->ep_rank, &e0, &e1);
  gt__ref_tmp t;
  gt__ref_tmp_alloc(&t, d, with_lb);
  if (with_lb) gt_moe_lb_backward_ref(t.dP_all, s->topk, dlb, d);
  float *dwk = calloc((size_t)K, sizeof(float));
  const float root = 1.0f / sqrtf((float)D);

  for (int64_t n = 0; n < N; n++) {
    const float *hn = h + n * D;
    float *dhn = dh ? dh + n * D : NULL;
    /* post norm */
    memset(t.ds, 0, sizeof(float) * (size_t)D);
    gt_rmsnorm_backward_ref(t.ds, lead ? g->post_norm : NULL, dout + n * D, s->sum + n * D,
                            s->rstd_post + n, w->post_norm, 1, D, 0.0f);
    /* experts, then the pre norm */
    gt_rmsnorm_forward_ref(t.rin, NULL, hn, w->pre_norm, 1, D, d->eps, 0.0f);
    gt__out(d, t.rin, D);
    memset(t.drin, 0, sizeof(float) * (size_t)D);
    for (int j = 0; j < K; j++)
      dwk[j] = s->row_of[n * K + j] < 0 ? 0.0f : gt__ref_slot_backward(&t, g, s, w, d, n * K + j, e0);
    gt_rmsnorm_backward_ref(dhn, g->pre_norm, t.drin, hn, s->rstd_pre + n, w->pre_norm, 1, D, 0.0f);

    /* routing weights w_j = P_j / sum_i P_i * pes_j */
    const float *P = s->probs + n * E;
    const int32_t *idx = s->topk + n * K;
    for (int e = 0; e < E; e++) t.dP[e] = with_lb ? t.dP_all[n * E + e] : 0.0f;
    double z = 0.0;
    for (int j = 0; j < K; j++) z += P[idx[j]];
    for (int j = 0; j < K; j++) {
      const double q = P[idx[j]] / z;
      if (g->per_expert_scale) g->per_expert_scale[idx[j]] += (float)(dwk[j] * q);
      /* dq_j/dP_i = (delta_ij - q_j) / z over the chosen i */
      const double dq = (double)dwk[j] * w->per_expert_scale[idx[j]];
      for (int i = 0; i < K; i++) t.dP[idx[i]] += (float)(dq * ((i == j) - q) / z);
    }
    /* softmax */
    double tp = 0.0;
    for (int e = 0; e < E; e++) tp += (double)P[e] * t.dP[e];
    for (int e = 0; e < E; e++) t.dP[e] = (float)(P[e] * (t.dP[e] - tp));
    /* logits = gate_in . Wr^T */
    gt__ref_gate_in(&t, NULL, hn, w, d);
    for (int c = 0; c < D; c++) {
      double dgin = 0.0;
      for (int e = 0; e < E; e++) {
        dgin += (double)t.dP[e] * w->router_proj[(int64_t)e * D + c];
        if (g->router_proj) g->router_proj[(int64_t)e * D + c] += t.dP[e] * t.gin[c];
      }
      if (g->router_scale) g->router_scale[c] += (float)(dgin * t.nh[c] * root);
      t.dnh[c] = (float)(dgin * w->router_scale[c] * root);
    }
    gt_rmsnorm_backward_ref(dhn, NULL, t.dnh, hn, s->rstd_router + n, NULL, 1, D, 0.0f);
  }
  free(dwk);
  gt__ref_tmp_free(&t);
}

float gt_moe_lb_loss_ref(const float *probs, const int32_t *topk, const gt_moe_dims *d) {
  const int64_t B = d->B, T = d->T;
  const int E = d->E, K = d->k;
  double total = 0.0;
  for (int64_t b = 0; b < B; b++)
    for (int e = 0; e < E; e++) {
      double f = 0.0, pbar = 0.0;
      for (int64_t s = 0; s < T; s++) {
        for (int j = 0; j < K; j++) f += topk[(b * T + s) * K + j] == e;
        pbar += probs[(b * T + s) * E + e];
      }
      total += (f / (double)T) * (pbar / (double)T);
    }
  return (float)((double)d->lb_weight * E * E * (total / (double)(B * E)));
}

void gt_moe_lb_backward_ref(float *dprobs, const int32_t *topk, float dlb, const gt_moe_dims *d) {
  const int64_t B = d->B, T = d->T;
  const int E = d->E, K = d->k;
  for (int64_t b = 0; b < B; b++)
    for (int e = 0; e < E; e++) {
      double f = 0.0;
      for (int64_t s = 0; s < T; s++)
        for (int j = 0; j < K; j++) f += topk[(b * T + s) * K + j] == e;
      f /= (double)T;
      /* d/dP[b,s,e] of lb_weight E^2 /(B E) sum f Pbar, Pbar = mean_s P */
      const double gr = (double)dlb * d->lb_weight * E * E / (double)(B * E) * f / (double)T;
      for (int64_t s = 0; s < T; s++) dprobs[(b * T + s) * E + e] += (float)gr;
    }
}
