/* Gemma 4 routed MoE, fast path (contract in kernels/moe.h).
 *
 * Tokens are processed row-parallel with static partitioning; per-expert
 * GEMMs go through gt_sgemm (gt_bgemm in bf16), whose every output element is summed by one
 * thread in a fixed order. Per-token combines walk the slots in order and
 * column reductions give each column to one thread, so no result depends on
 * the thread count. Experts run in parallel with each other when there are
 * enough of them (each GEMM then single-threaded), else one after another
 * with threaded GEMMs: the bits are the same either way.
 *
 * bf16 (d->bf16): the experts run as the dense MLP does in bf16 (docs/
 * precision.md): their products go through gt_bgemm (bf16 inputs, float32
 * sums), and what they write in the forward (the normalised input rows, gate,
 * up, the GeGLU activation, each expert's output and the combined sum) is
 * rounded to bf16, the backward's recomputations the same way. The router
 * stays float32: its logits choose experts, a discrete decision that bf16
 * rounding would flip on near ties (HF and MaxText keep routing weights in
 * float32 too). */
#include <math.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/moe.h"
#include "kernels/moe_carve.h"
#include "kernels/moe_stages.h"

#define GT__PAR_MIN 32768
#define GT__COL_BLOCK 16

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

/* The arguments of the row loops below: out[n * D + j] = (in[n * D + j] *
 * scale[j]) * root over rows, and the like. */
typedef struct gt__moe_rows {
  float *out;
  const float *in, *scale;
  float root;
  int D;
} gt__moe_rows;

static void gt__scale_rows_part(void *arg, int64_t n0, int64_t n1) {
  const gt__moe_rows *a = arg;
  const int D = a->D;
  for (int64_t n = n0; n < n1; n++)
    for (int j = 0; j < D; j++) a->out[n * D + j] = (a->in[n * D + j] * a->scale[j]) * a->root;
}

static void gt__scale_rows(float *out, const float *in, const float *scale, float root, int64_t N, int D) {
  gt__moe_rows a = {out, in, scale, root, D};
  gt_team_for(gt__par(N * D), N, gt__scale_rows_part, &a);
}

typedef void (*gt__gemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                            int64_t, float, float *, int64_t);

/* the experts' GEMM: bf16 inputs or float32 */
static gt__gemm_fn gt__expert_gemm(const gt_moe_dims *d) { return d->bf16 ? gt_bgemm : gt_sgemm; }

/* bf16 runs: x rounded to bf16 in place */
static void gt__round(const gt_moe_dims *d, float *x, int64_t n) {
  if (d->bf16) gt_bf16_round(x, n);
}

static void gt__work_layout(gt__moe_work *w, gt__carve *c, const gt_moe_dims *d) {
  const size_t N = (size_t)(d->B * d->T), D = (size_t)d->d, M = N * (size_t)d->k, F = (size_t)d->F;
  w->a = gt__carve_take(c, N * D, sizeof(float));
  w->b = gt__carve_take(c, N * D, sizeof(float));
  w->c = gt__carve_take(c, N * D, sizeof(float));
  w->logits = gt__carve_take(c, N * (size_t)d->E, sizeof(float));
  w->x = gt__carve_take(c, M * D, sizeof(float));
  w->y = gt__carve_take(c, M * D, sizeof(float));
  w->act = gt__carve_take(c, M * F, sizeof(float));
  w->hf = gt__carve_take(c, M * F, sizeof(float));
  w->dgu = gt__carve_take(c, M * 2 * F, sizeof(float));
  w->dw = gt__carve_take(c, M, sizeof(float));
}

size_t gt_moe_work_bytes(const gt_moe_dims *d) {
  gt__moe_work w;
  gt__carve c = {NULL, 0};
  gt__work_layout(&w, &c, d);
  return c.off;
}

/* ---------------- router ---------------- */

/* gate_in = (RMSNorm_noscale(h) * scale) * d^-0.5, in HF's order. */
static void gt__router_input(float *out, float *rstd, const float *h, const float *scale, int64_t N,
                             int D, float eps) {
  gt_rmsnorm_forward(out, rstd, h, NULL, N, D, eps, 0.0f);
  const float root = 1.0f / sqrtf((float)D);
  gt__scale_rows(out, out, scale, root, N, D);
}

/* Top-k of one row by logit into a descending list: a later expert displaces
 * an earlier one only when strictly larger, so ties keep the lower index. */
static void gt__topk_row(int32_t *idx, const float *l, int E, int K) {
  int cnt = 0;
  for (int e = 0; e < E; e++) {
    const float v = l[e];
    if (cnt == K && !(v > l[idx[K - 1]])) continue;
    int p = cnt < K ? cnt : K - 1;
    while (p > 0 && v > l[idx[p - 1]]) {
      idx[p] = idx[p - 1];
      p--;
    }
    idx[p] = e;
    if (cnt < K) cnt++;
  }
}

static void gt__route_row(float *P, int32_t *idx, float *wt, const float *l, const float *pes, int E,
                          int K) {
  gt__topk_row(idx, l, E, K);
  float mx = l[0];
  for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
  float s = 0.0f;
  for (int e = 0; e < E; e++) s += (P[e] = expf(l[e] - mx));
  for (int e = 0; e < E; e++) P[e] = P[e] / s;
  float z = 0.0f;
  for (int j = 0; j < K; j++) z += P[idx[j]];
  for (int j = 0; j < K; j++) wt[j] = (P[idx[j]] / z) * pes[idx[j]];
}

/* Stable counting sort of the owned slots by expert. */
static void gt__bucket(gt_moe_saved *s, const gt_moe_dims *d) {
  const int64_t NK = d->B * d->T * d->k;
  int e0, e1;
  gt_moe_expert_range(d->E, d->ep_size, d->ep_rank, &e0, &e1);
  const int EL = e1 - e0;
  memset(s->counts, 0, sizeof(int32_t) * (size_t)EL);
  for (int64_t i = 0; i < NK; i++) {
    const int e = s->topk[i];
    s->row_of[i] = -1;
    if (e >= e0 && e < e1) s->counts[e - e0]++;
  }
  s->offsets[0] = 0;
  for (int le = 0; le < EL; le++) s->offsets[le + 1] = s->offsets[le] + s->counts[le];
  /* counts double as cursors and end where they started */
  memset(s->counts, 0, sizeof(int32_t) * (size_t)EL);
  for (int64_t i = 0; i < NK; i++) {
    const int e = s->topk[i];
    if (e < e0 || e >= e1) continue;
    const int32_t r = s->offsets[e - e0] + s->counts[e - e0]++;
    s->slot_of[r] = (int32_t)i;
    s->row_of[i] = r;
  }
  s->n_rows = s->offsets[EL];
}

typedef struct gt__moe_mix {
  float *out;
  const float *in, *wt;
  const gt_moe_saved *s;
  int K, D;
} gt__moe_mix;

static void gt__gather_part(void *arg, int64_t r0, int64_t r1) {
  const gt__moe_mix *a = arg;
  const int D = a->D;
  for (int64_t r = r0; r < r1; r++)
    memcpy(a->out + r * D, a->in + (int64_t)(a->s->slot_of[r] / a->K) * D, sizeof(float) * (size_t)D);
}

/* Copies src[token of row] into dst[row] for every sorted row. */
static void gt__gather(float *dst, const float *src, const gt_moe_saved *s, int K, int D) {
  gt__moe_mix a = {dst, src, NULL, s, K, D};
  gt_team_for(gt__par(s->n_rows * D), s->n_rows, gt__gather_part, &a);
}

static void gt__combine_part(void *arg, int64_t n0, int64_t n1) {
  const gt__moe_mix *a = arg;
  const int D = a->D, K = a->K;
  const float *rows = a->in, *wt = a->wt;
  for (int64_t n = n0; n < n1; n++) {
    float *o = a->out + n * D;
    memset(o, 0, sizeof(float) * (size_t)D);
    for (int j = 0; j < K; j++) {
      const int32_t r = a->s->row_of[n * K + j];
      if (r < 0) continue;
      const float wj = wt ? wt[n * K + j] : 1.0f;
      const float *yr = rows + (int64_t)r * D;
      for (int c = 0; c < D; c++) o[c] += wj * yr[c];
    }
  }
}

/* out[n] = sum over token n's owned slots, in slot order, of wt * rows[row]
 * (wt NULL: weight 1); tokens with no owned slot get 0. */
static void gt__combine(float *out, const float *rows, const float *wt, const gt_moe_saved *s,
                        int64_t N, int K, int D) {
  gt__moe_mix a = {out, rows, wt, s, K, D};
  gt_team_for(gt__par(N * D), N, gt__combine_part, &a);
}

/* Expert loops: parallel over experts when each thread gets a couple. */
static int gt__experts_par(int EL, int64_t rows, int D, int F) {
  return EL >= 2 * gt_team_threads() && gt__par(rows * D * F / 64 + 1);
}

/* The GeGLU over rows of gu [m, 2F] (gate then up): row-parallel when
 * called outside the expert loop's members (few experts), alone inside. */
typedef struct gt__moe_glu {
  float *act, *dgu;
  const float *gu, *dact;
  int F, rnd;
} gt__moe_glu;

static void gt__glu_fwd_part(void *arg, int64_t r0, int64_t r1) {
  const gt__moe_glu *a = arg;
  const int64_t F = a->F;
  for (int64_t r = r0; r < r1; r++)
    gt_geglu_forward_rnd(a->act + r * F, a->gu + r * 2 * F, a->gu + r * 2 * F + F, F, a->rnd);
}

static void gt__glu_bwd_part(void *arg, int64_t r0, int64_t r1) {
  const gt__moe_glu *a = arg;
  const int64_t F = a->F;
  for (int64_t r = r0; r < r1; r++)
    gt_geglu_backward_write(a->dgu + r * 2 * F, a->dgu + r * 2 * F + F, a->dact + r * F, a->gu + r * 2 * F,
                            a->gu + r * 2 * F + F, F);
}

/* act[m, F] = gelu(gate) * up, rounded to bf16 in bf16 runs */
static void gt__geglu_rows(const gt_moe_dims *d, float *act, const float *gu, int64_t m, int F) {
  gt__moe_glu a = {act, NULL, gu, NULL, F, d->bf16};
  gt_team_for(gt__par(m * F), m, gt__glu_fwd_part, &a);
}

/* dgu[m, 2F] = (dL/dgate | dL/dup) from dL/dact, written */
static void gt__geglu_rows_backward(float *dgu, const float *dact, const float *gu, int64_t m, int F) {
  gt__moe_glu a = {NULL, dgu, gu, dact, F, 0};
  gt_team_for(gt__par(m * F), m, gt__glu_bwd_part, &a);
}

typedef struct gt__expert_ptrs {
  const float *wg, *wd; /* the expert's [2F, d] gate_up_proj block, [d, F] down_proj */
  int64_t r0, m;
} gt__expert_ptrs;

static gt__expert_ptrs gt__expert(const gt_moe_saved *s, const gt_moe_weights *w, int le, int D,
                                  int F) {
  gt__expert_ptrs p;
  p.wg = w->gate_up + (int64_t)le * 2 * F * D;
  p.wd = w->down + (int64_t)le * D * F;
  p.r0 = s->offsets[le];
  p.m = s->counts[le];
  return p;
}

typedef struct gt__moe_route {
  gt_moe_saved *s;
  const gt_moe_weights *w;
  const float *logits;
  const gt__moe_work *wk;
  int E, K;
} gt__moe_route;

static void gt__route_part(void *arg, int64_t n0, int64_t n1) {
  const gt__moe_route *a = arg;
  gt_moe_saved *s = a->s;
  const int E = a->E, K = a->K;
  for (int64_t n = n0; n < n1; n++)
    gt__route_row(s->probs + n * E, s->topk + n * K, s->topk_w + n * K, a->logits + n * E,
                  a->w->per_expert_scale, E, K);
}

/* The expert loops: one expert at a time to the member free first (each
 * expert's results are computed whole by one member, so which one does not
 * change them). products: the GEMMs alone (the benchmark's measure). */
typedef struct gt__moe_experts {
  const gt__moe_work *wk;
  const gt_moe_grads *g;
  const gt_moe_saved *s;
  const gt_moe_weights *w;
  const gt_moe_dims *d;
  gt__gemm_fn mm;
  int EL, products;
  gt_team_counter next;
} gt__moe_experts;

static void gt__experts_fwd_member(void *arg, int tid, int nth) {
  gt__moe_experts *a = arg;
  const gt__moe_work *wk = a->wk;
  const gt_moe_saved *s = a->s;
  const gt_moe_weights *w = a->w;
  const gt_moe_dims *d = a->d;
  const gt__gemm_fn mm = a->mm;
  const int D = d->d, F = d->F, elem = !a->products;
  for (int le; (le = (int)gt_team_take(&a->next, 0)) < a->EL;) {
    const gt__expert_ptrs p = gt__expert(s, w, le, D, F);
    if (p.m == 0) continue;
    const float *xe = wk->x + p.r0 * D;
    float *gue = s->gu + p.r0 * 2 * F, *ae = wk->act + p.r0 * F, *ye = wk->y + p.r0 * D;
    /* gate and up in one product: the rows of x packed once, the block of
     * gate_up_proj as it is stored ([2F, d]) */
    mm(0, 1, p.m, 2 * F, D, 1.0f, xe, D, p.wg, D, 0.0f, gue, 2 * F);
    if (elem) {
      gt__round(d, gue, p.m * 2 * F);
      gt__geglu_rows(d, ae, gue, p.m, F);
    }
    mm(0, 1, p.m, D, F, 1.0f, ae, F, p.wd, F, 0.0f, ye, D);
    if (elem) gt__round(d, ye, p.m * D);
  }
}

static void gt__experts_forward(gt__moe_pass *p, int products) {
  const gt_moe_dims *d = p->d;
  const int EL = d->E / d->ep_size;
  gt__moe_experts ea = {&p->wk, NULL, p->s, p->w, d, gt__expert_gemm(d), EL, products, {0}};
  gt_team_par(gt__experts_par(EL, p->s->n_rows, d->d, d->F), gt__experts_fwd_member, &ea);
}

/* ---------------- stages (kernels/moe_stages.h) ---------------- */

void gt__moe_pass_init(gt__moe_pass *p, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                       const gt_moe_dims *d, void *work) {
  memset(p, 0, sizeof *p);
  p->s = s, p->h = h, p->w = w, p->d = d;
  gt__carve cv = {work, 0};
  gt__work_layout(&p->wk, &cv, d);
}

static const char *const gt__fwd_names[GT__MOE_FWD_STAGES] = {"router (norm, logits, top-k, lb loss)",
                                                              "sort by expert", "pre-norm and gather",
                                                              "experts", "combine"};
static const char *const gt__bwd_names[GT__MOE_BWD_STAGES] = {
    "post-norm backward", "pre-norm, gather x and dsum", "experts", "combine dL/drin", "pre-norm backward",
    "router backward (lb, softmax, norm)"};

const char *gt__moe_stage_name(int backward, int i) { return backward ? gt__bwd_names[i] : gt__fwd_names[i]; }

void gt__moe_fwd_stage(gt__moe_pass *p, int i) {
  gt_moe_saved *s = p->s;
  const gt_moe_weights *w = p->w;
  const gt_moe_dims *d = p->d;
  gt__moe_work *wk = &p->wk;
  const int64_t N = d->B * d->T;
  const int D = d->d, E = d->E, K = d->k;
  switch (i) {
  case GT__MOE_F_ROUTER: {
    gt__router_input(wk->a, s->rstd_router, p->h, w->router_scale, N, D, d->eps);
    gt_matmul_forward(wk->logits, wk->a, w->router_proj, N, D, E);
    gt__moe_route ra = {s, w, wk->logits, NULL, E, K};
    gt_team_for(gt__par(N * E), N, gt__route_part, &ra);
    s->lb_loss = d->lb_weight > 0.0f ? gt_moe_lb_loss(s->probs, s->topk, d) : 0.0f;
    break;
  }
  case GT__MOE_F_SORT:
    gt__bucket(s, d);
    break;
  case GT__MOE_F_GATHER:
    gt_rmsnorm_forward(wk->a, s->rstd_pre, p->h, w->pre_norm, N, D, d->eps, 0.0f);
    gt__round(d, wk->a, N * D);
    gt__gather(wk->x, wk->a, s, K, D);
    break;
  case GT__MOE_F_EXPERTS:
    gt__experts_forward(p, 0);
    break;
  case GT__MOE_F_COMBINE:
    gt__combine(s->sum, wk->y, s->topk_w, s, N, K, D);
    break;
  }
}

void gt_moe_forward_partial(gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                            const gt_moe_dims *d, void *work) {
  gt__moe_pass p;
  gt__moe_pass_init(&p, s, h, w, d, work);
  for (int i = 0; i < GT__MOE_FWD_STAGES; i++) gt__moe_fwd_stage(&p, i);
}

void gt_moe_forward_finish(float *out, gt_moe_saved *s, const gt_moe_weights *w,
                           const gt_moe_dims *d) {
  /* the combined sum is rounded only here, after an expert group's all-reduce
   * has completed it, so every expert layout rounds the same value */
  gt__round(d, s->sum, d->B * d->T * d->d);
  gt_rmsnorm_forward(out, s->rstd_post, s->sum, w->post_norm, d->B * d->T, d->d, d->eps, 0.0f);
}

void gt_moe_forward(float *out, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                    const gt_moe_dims *d, void *work) {
  gt_moe_forward_partial(s, h, w, d, work);
  gt_moe_forward_finish(out, s, w, d);
}

/* ---------------- backward ---------------- */

static void gt__experts_bwd_member(void *arg, int tid, int nth) {
  gt__moe_experts *a = arg;
  const gt__moe_work *wk = a->wk;
  const gt_moe_grads *g = a->g;
  const gt_moe_saved *s = a->s;
  const gt_moe_weights *w = a->w;
  const gt_moe_dims *d = a->d;
  const gt__gemm_fn mm = a->mm;
  const int D = d->d, F = d->F, elem = !a->products;
  for (int le; (le = (int)gt_team_take(&a->next, 0)) < a->EL;) {
    const gt__expert_ptrs p = gt__expert(s, w, le, D, F);
    if (p.m == 0) continue;
    const float *xe = wk->x + p.r0 * D, *gue = s->gu + p.r0 * 2 * F;
    float *ye = wk->y + p.r0 * D, *ae = wk->act + p.r0 * F, *he = wk->hf + p.r0 * F;
    float *dgue = wk->dgu + p.r0 * 2 * F;
    if (elem) {
      gt__geglu_rows(d, ae, gue, p.m, F); /* as the forward wrote it */
    }
    /* H = dsum . Wd: dL/dw = H . act, dL/dact = w H */
    mm(0, 0, p.m, F, D, 1.0f, ye, D, p.wd, F, 0.0f, he, F);
    if (elem)
      for (int64_t m = 0; m < p.m; m++) {
        const float *hr = he + m * F, *ar = ae + m * F;
        float dot = 0.0f;
        for (int f = 0; f < F; f++) dot += hr[f] * ar[f];
        wk->dw[p.r0 + m] = dot;
        const float wt = s->topk_w[s->slot_of[p.r0 + m]];
        for (int f = 0; f < F; f++) he[m * F + f] *= wt;
        for (int c = 0; c < D; c++) ye[m * D + c] *= wt;
      }
    if (g->down)
      mm(1, 0, D, F, p.m, 1.0f, ye, D, ae, F, 1.0f, g->down + (int64_t)le * D * F, F);
    if (elem) gt__geglu_rows_backward(dgue, he, gue, p.m, F);
    /* gate and up as one product each way: dL/d gate_up_proj [2F, d] and
     * dL/drin = [dgate | dup] . [Wg ; Wu], one sum over 2F */
    if (g->gate_up)
      mm(1, 0, 2 * F, D, p.m, 1.0f, dgue, 2 * F, xe, D, 1.0f, g->gate_up + (int64_t)le * 2 * F * D, D);
    mm(0, 0, p.m, D, 2 * F, 1.0f, dgue, 2 * F, p.wg, D, 0.0f, ye, D);
  }
}

/* The owned experts: dL/dsum rows in wk->y on entry; fills wk->dw and leaves
 * dL/drin rows in wk->y. */
static void gt__experts_backward(gt__moe_pass *p, int products) {
  const gt_moe_dims *d = p->d;
  const int EL = d->E / d->ep_size;
  gt__moe_experts ea = {&p->wk, p->g, p->s, p->w, d, gt__expert_gemm(d), EL, products, {0}};
  gt_team_par(gt__experts_par(EL, p->s->n_rows, d->d, d->F), gt__experts_bwd_member, &ea);
}

void gt__moe_products(gt__moe_pass *p, int backward) {
  if (backward)
    gt__experts_backward(p, 1);
  else
    gt__experts_forward(p, 1);
}

/* dL/dP from the routing weights of one token (slots of other ranks carry
 * dw = 0 but still take part in the normalisation), then through softmax. */
static void gt__route_row_backward(float *dP, const float *P, const int32_t *idx,
                                   const int32_t *rows, const float *dw, const float *pes, int E,
                                   int K) {
  float z = 0.0f;
  for (int j = 0; j < K; j++) z += P[idx[j]];
  float s1 = 0.0f; /* sum_j dq_j q_j */
  for (int j = 0; j < K; j++)
    if (rows[j] >= 0) s1 += (dw[rows[j]] * pes[idx[j]]) * (P[idx[j]] / z);
  for (int j = 0; j < K; j++) {
    const float dq = rows[j] >= 0 ? dw[rows[j]] * pes[idx[j]] : 0.0f;
    dP[idx[j]] += (dq - s1) / z;
  }
  float t = 0.0f;
  for (int e = 0; e < E; e++) t += P[e] * dP[e];
  for (int e = 0; e < E; e++) dP[e] = P[e] * (dP[e] - t);
}

static void gt__route_bwd_part(void *arg, int64_t n0, int64_t n1) {
  const gt__moe_route *a = arg;
  const gt_moe_saved *s = a->s;
  const int E = a->E, K = a->K;
  float *dl = (float *)a->logits;
  for (int64_t n = n0; n < n1; n++)
    gt__route_row_backward(dl + n * E, s->probs + n * E, s->topk + n * K, s->row_of + n * K, a->wk->dw,
                           a->w->per_expert_scale, E, K);
}

typedef struct gt__moe_scale_grad {
  float *gscale;
  const float *dgin, *nh;
  float root;
  int64_t N;
  int D;
} gt__moe_scale_grad;

/* Column blocks [bk0, bk1) of GT__COL_BLOCK: each column summed over the
 * rows in row order by one member. */
static void gt__scale_grad_part(void *arg, int64_t bk0, int64_t bk1) {
  const gt__moe_scale_grad *a = arg;
  const int D = a->D;
  for (int64_t bk = bk0; bk < bk1; bk++) {
    const int j1 = (int)((bk + 1) * GT__COL_BLOCK < D ? (bk + 1) * GT__COL_BLOCK : D);
    for (int64_t n = 0; n < a->N; n++)
      for (int j = (int)(bk * GT__COL_BLOCK); j < j1; j++)
        a->gscale[j] += a->dgin[n * D + j] * a->nh[n * D + j] * a->root;
  }
}

static void gt__scale_grad_rows_part(void *arg, int64_t n0, int64_t n1) {
  const gt__moe_rows *a = arg;
  const int D = a->D;
  for (int64_t n = n0; n < n1; n++)
    for (int j = 0; j < D; j++) a->out[n * D + j] *= a->scale[j] * a->root;
}

static void gt__router_backward(float *dh, const gt_moe_grads *g, const gt__moe_work *wk,
                                const gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                                const gt_moe_dims *d) {
  const int64_t N = d->B * d->T;
  const int D = d->d, E = d->E, K = d->k;
  float *dl = wk->logits, *nh = wk->a, *gin = wk->c, *dgin = wk->x;
  gt__moe_route ra = {(gt_moe_saved *)s, w, dl, wk, E, K};
  gt_team_for(gt__par(N * E), N, gt__route_bwd_part, &ra);
  if (g->per_expert_scale)
    for (int64_t n = 0; n < N; n++) {
      const float *P = s->probs + n * E;
      const int32_t *idx = s->topk + n * K, *rows = s->row_of + n * K;
      float z = 0.0f;
      for (int j = 0; j < K; j++) z += P[idx[j]];
      for (int j = 0; j < K; j++)
        if (rows[j] >= 0) g->per_expert_scale[idx[j]] += wk->dw[rows[j]] * (P[idx[j]] / z);
    }
  const float root = 1.0f / sqrtf((float)D);
  gt_rmsnorm_forward(nh, NULL, h, NULL, N, D, d->eps, 0.0f);
  gt__scale_rows(gin, nh, w->router_scale, root, N, D);
  if (g->router_proj) gt_sgemm(1, 0, E, D, N, 1.0f, dl, E, gin, D, 1.0f, g->router_proj, D);
  gt_sgemm(0, 0, N, D, E, 1.0f, dl, E, w->router_proj, D, 0.0f, dgin, D);
  if (g->router_scale) {
    const int64_t nblk = (D + GT__COL_BLOCK - 1) / GT__COL_BLOCK;
    gt__moe_scale_grad sa = {g->router_scale, dgin, nh, root, N, D};
    gt_team_for(gt__par(N * D), nblk, gt__scale_grad_part, &sa);
  }
  gt__moe_rows da = {dgin, NULL, w->router_scale, root, D};
  gt_team_for(gt__par(N * D), N, gt__scale_grad_rows_part, &da);
  gt_rmsnorm_backward(dh, NULL, dgin, h, s->rstd_router, NULL, N, D, 0.0f);
}

void gt__moe_bwd_stage(gt__moe_pass *p, int i) {
  const gt_moe_saved *s = p->s;
  const gt_moe_weights *w = p->w;
  const gt_moe_dims *d = p->d;
  const gt_moe_grads *g = p->g;
  gt__moe_work *wk = &p->wk;
  const int64_t N = d->B * d->T;
  const int D = d->d, K = d->k;
  const int lead = d->ep_rank == 0;
  switch (i) {
  case GT__MOE_B_POST:
    /* every rank needs dL/dsum; the post norm's weight gradient is rank 0's */
    memset(wk->b, 0, sizeof(float) * (size_t)(N * D));
    gt_rmsnorm_backward(wk->b, lead ? g->post_norm : NULL, p->dout, s->sum, s->rstd_post, w->post_norm, N, D,
                        0.0f);
    break;
  case GT__MOE_B_GATHER:
    gt_rmsnorm_forward(wk->a, NULL, p->h, w->pre_norm, N, D, d->eps, 0.0f);
    gt__round(d, wk->a, N * D);
    gt__gather(wk->x, wk->a, s, K, D);
    gt__gather(wk->y, wk->b, s, K, D);
    break;
  case GT__MOE_B_EXPERTS:
    gt__experts_backward(p, 0);
    break;
  case GT__MOE_B_COMBINE:
    gt__combine(wk->c, wk->y, NULL, s, N, K, D);
    break;
  case GT__MOE_B_PRE:
    gt_rmsnorm_backward(p->dh, g->pre_norm, wk->c, p->h, s->rstd_pre, w->pre_norm, N, D, 0.0f);
    break;
  case GT__MOE_B_ROUTER:
    /* the load-balance term is rank 0's */
    memset(wk->logits, 0, sizeof(float) * (size_t)(N * d->E));
    if (lead && d->lb_weight > 0.0f && p->dlb != 0.0f) gt_moe_lb_backward(wk->logits, s->topk, p->dlb, d);
    gt__router_backward(p->dh, g, wk, s, p->h, w, d);
    break;
  }
}

void gt_moe_backward(float *dh, const gt_moe_grads *g, const float *dout, float dlb,
                     const gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                     const gt_moe_dims *d, void *work) {
  gt__moe_pass p;
  gt__moe_pass_init(&p, (gt_moe_saved *)s, h, w, d, work);
  p.dh = dh, p.g = g, p.dout = dout, p.dlb = dlb;
  for (int i = 0; i < GT__MOE_BWD_STAGES; i++) gt__moe_bwd_stage(&p, i);
}
