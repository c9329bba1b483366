/* Attention kernels: fast vs reference, reference vs finite differences in
 * double, masked keys never read, and run-to-run determinism. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "gt_testutil.h"

/* Fast vs reference: both are float32 with different summation orders, and
 * against a float64 evaluation each is off by about the same amount: up to
 * ~7e-5 elementwise (with a floor of 1% of the largest magnitude) at hd=256,
 * ~1e-6 in norm. So elementwise they may differ by twice that; in norm they
 * must agree to 1e-5. */
#define ELEM_TOL 3e-4
#define NORM_TOL 1e-5

typedef struct attn_case {
  int B, T, H, K, hd, window;
  int seg; /* 0 none, 1 packed runs, 2 ids that repeat non-contiguously */
} attn_case;

static const attn_case cases[] = {
    {1, 1, 1, 1, 8, 0, 0},     {1, 1, 2, 1, 20, 4, 1},    {2, 7, 2, 1, 8, 3, 1},
    {1, 7, 4, 4, 20, 0, 0},    {1, 63, 4, 2, 20, 0, 0},   {3, 65, 4, 1, 64, 16, 1},
    {2, 65, 4, 4, 8, 1, 0},    {1, 130, 2, 2, 20, 64, 0}, {1, 130, 1, 1, 64, 500, 1},
    {2, 200, 4, 2, 64, 0, 1},  {1, 200, 4, 1, 8, 200, 0}, {1, 200, 2, 1, 20, 65, 1},
    {2, 130, 4, 2, 8, 7, 2},   {1, 200, 2, 2, 64, 0, 0},  {3, 129, 2, 1, 20, 128, 0},
    {1, 200, 4, 1, 64, 63, 0},  {1, 70, 2, 1, 136, 0, 1},  {1, 100, 4, 2, 256, 33, 0},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* Packed-sequence ids: runs of random length. Mode 2 reuses ids so equal
 * segments are not contiguous, which the mask must still honour exactly. */
static int32_t *make_seg(int B, int T, int mode, uint64_t *st) {
  if (!mode) return NULL;
  int32_t *seg = malloc((size_t)B * T * sizeof(int32_t));
  for (int b = 0; b < B; b++) {
    int id = 0, left = 0;
    for (int t = 0; t < T; t++) {
      if (left == 0) {
        left = 1 + (int)(gt_test_rand_u64(st) % 40);
        id++;
      }
      seg[(size_t)b * T + t] = mode == 2 ? id % 3 : id;
      left--;
    }
  }
  return seg;
}

/* Relative error with a floor of 1e-2 of the largest reference magnitude:
 * gradients have entries near zero from cancellation. */
static double rel_err(const float *a, const float *ref, int64_t n) {
  double fl = 1e-2 * gt_test_max_abs(ref, n);
  if (fl < 1e-6) fl = 1e-6;
  return gt_test_max_rel_err(a, ref, n, fl);
}

static double worst_elem, worst_norm;

/* Worst of the elementwise and whole-vector errors of one output; fails the
 * test when either is out of bounds. */
static void check_close(const char *what, const attn_case *c, const float *a,
                        const float *ref, int64_t n) {
  double e = rel_err(a, ref, n), en = gt_test_norm_rel_err(a, ref, n);
  if (e > worst_elem) worst_elem = e;
  if (en > worst_norm) worst_norm = en;
  ck_assert_msg(e < ELEM_TOL && en < NORM_TOL,
                "B=%d T=%d H=%d K=%d hd=%d W=%d seg=%d: %s elementwise err %g, norm err %g",
                c->B, c->T, c->H, c->K, c->hd, c->window, c->seg, what, e, en);
}

static void run_case(const attn_case *c, uint64_t seed) {
  uint64_t st = seed;
  const int64_t nq = (int64_t)c->B * c->T * c->H * c->hd;
  const int64_t nk = (int64_t)c->B * c->T * c->K * c->hd;
  const int64_t nl = (int64_t)c->B * c->H * c->T;
  gt_attn_dims d = {c->B, c->T, c->H, c->K, c->hd, c->window, 1.0f / sqrtf((float)c->hd), 0, 0, NULL};
  float *q = gt_test_alloc_fill(nq, &st, -2, 2);
  float *k = gt_test_alloc_fill(nk, &st, -2, 2);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1);
  int32_t *seg = make_seg(c->B, c->T, c->seg, &st);
  float *out_r = malloc(nq * sizeof(float)), *out_f = malloc(nq * sizeof(float));
  float *lse_r = malloc(nl * sizeof(float)), *lse_f = malloc(nl * sizeof(float));
  /* Gradients start from the same nonzero values to check they are added to. */
  float *dq_r = gt_test_alloc_fill(nq, &st, -0.1f, 0.1f);
  float *dk_r = gt_test_alloc_fill(nk, &st, -0.1f, 0.1f);
  float *dv_r = gt_test_alloc_fill(nk, &st, -0.1f, 0.1f);
  float *dq_f = gt_test_copy(dq_r, nq), *dk_f = gt_test_copy(dk_r, nk), *dv_f = gt_test_copy(dv_r, nk);

  gt_attention_forward_ref(out_r, lse_r, q, k, v, seg, &d);
  memset(out_f, 0xff, nq * sizeof(float)); /* NaN: every element must be written */
  memset(lse_f, 0xff, nl * sizeof(float));
  gt_attention_forward(out_f, lse_f, q, k, v, seg, &d);
  check_close("out", c, out_f, out_r, nq);
  check_close("lse", c, lse_f, lse_r, nl);
  /* Both backward passes consume the reference forward so only the backward
   * kernels differ. */
  gt_attention_backward_ref(dq_r, dk_r, dv_r, dout, out_r, lse_r, q, k, v, seg, &d);
  gt_attention_backward(dq_f, dk_f, dv_f, dout, out_r, lse_r, q, k, v, seg, &d);
  check_close("dq", c, dq_f, dq_r, nq);
  check_close("dk", c, dk_f, dk_r, nk);
  check_close("dv", c, dv_f, dv_r, nk);

  /* NULL gradients are skipped and leave the others unchanged. */
  float *dk2 = gt_test_zeros(nk);
  float *dk3 = gt_test_zeros(nk);
  gt_attention_backward(NULL, dk2, NULL, dout, out_r, lse_r, q, k, v, seg, &d);
  gt_attention_backward(NULL, dk3, dv_f, dout, out_r, lse_r, q, k, v, seg, &d);
  ck_assert(memcmp(dk2, dk3, nk * sizeof(float)) == 0);

  free(q), free(k), free(v), free(dout), free(seg), free(out_r), free(out_f);
  free(lse_r), free(lse_f), free(dq_r), free(dk_r), free(dv_r), free(dq_f);
  free(dk_f), free(dv_f), free(dk2), free(dk3);
}

START_TEST(test_fast_vs_ref) {
  run_case(&cases[_i], 1000 + (uint64_t)_i);
  printf("case %2d: worst elementwise rel err %.3g, norm rel err %.3g\n", _i, worst_elem,
         worst_norm);
}
END_TEST

/* ---- reference vs central differences, in double ---- */

static void attn_double(double *out, const double *q, const double *k, const double *v,
                        const int32_t *seg, const gt_attn_dims *d) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd, W = d->window;
  double s[64];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        const int kh = h / (H / K);
        const double *qi = q + (((size_t)b * T + i) * H + h) * hd;
        double mx = -INFINITY;
        for (int j = 0; j < T; j++) {
          int vis = j <= i && (W == 0 || i - j < W) &&
                    (!seg || seg[b * T + i] == seg[b * T + j]);
          s[j] = -INFINITY;
          if (!vis) continue;
          const double *kj = k + (((size_t)b * T + j) * K + kh) * hd;
          double dot = 0;
          for (int c = 0; c < hd; c++) dot += qi[c] * kj[c];
          s[j] = d->scale * dot;
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (int j = 0; j < T; j++) sum += (s[j] = exp(s[j] - mx));
        double *oi = out + (((size_t)b * T + i) * H + h) * hd;
        for (int c = 0; c < hd; c++) oi[c] = 0;
        for (int j = 0; j < T; j++) {
          const double *vj = v + (((size_t)b * T + j) * K + kh) * hd;
          for (int c = 0; c < hd; c++) oi[c] += s[j] / sum * vj[c];
        }
      }
}

static double loss_double(const double *q, const double *k, const double *v,
                          const double *R, const int32_t *seg, const gt_attn_dims *d,
                          double *scratch) {
  attn_double(scratch, q, k, v, seg, d);
  const int64_t n = (int64_t)d->B * d->T * d->H * d->hd;
  double L = 0;
  for (int64_t i = 0; i < n; i++) L += scratch[i] * R[i];
  return L;
}

/* The loss as a function of whichever input the finite differences move. */
typedef struct fd_ctx {
  const double *q, *k, *v, *R;
  const int32_t *seg;
  const gt_attn_dims *d;
  double *scratch;
} fd_ctx;

static double fd_loss(void *p) {
  const fd_ctx *c = p;
  return loss_double(c->q, c->k, c->v, c->R, c->seg, c->d, c->scratch);
}

static double err_vs_double(const float *a, const double *ref, int64_t n) {
  double m = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
  for (int64_t i = 0; i < n; i++) {
    double den = fabs(ref[i]) > 1e-2 * m ? fabs(ref[i]) : 1e-2 * m;
    double e = fabs(a[i] - ref[i]) / den;
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

static void run_fd(int B, int T, int H, int K, int hd, int W, int segmode, uint64_t seed) {
  uint64_t st = seed;
  gt_attn_dims d = {B, T, H, K, hd, W, 0.7f, 0, 0, NULL};
  const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd;
  const int64_t nl = (int64_t)B * H * T;
  float *q = gt_test_alloc_fill(nq, &st, -1.5f, 1.5f);
  float *k = gt_test_alloc_fill(nk, &st, -1.5f, 1.5f);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *R = gt_test_alloc_fill(nq, &st, -1, 1);
  int32_t *seg = make_seg(B, T, segmode, &st);
  if (seg) /* short runs so this tiny T still has several segments */
    for (int i = 0; i < B * T; i++) seg[i] = (i % T) / 3 + (i % T == 7);
  double *qd = gt_test_to_double(q, nq), *kd = gt_test_to_double(k, nk);
  double *vd = gt_test_to_double(v, nk), *Rd = gt_test_to_double(R, nq);
  double *od = malloc(nq * sizeof(double)), *scratch = malloc(nq * sizeof(double));
  double *gq = malloc(nq * sizeof(double)), *gk = malloc(nk * sizeof(double));
  double *gv = malloc(nk * sizeof(double));
  fd_ctx fc = {qd, kd, vd, Rd, seg, &d, scratch};
  gt_test_central_diff(gq, qd, nq, 1e-5, fd_loss, &fc);
  gt_test_central_diff(gk, kd, nk, 1e-5, fd_loss, &fc);
  gt_test_central_diff(gv, vd, nk, 1e-5, fd_loss, &fc);
  attn_double(od, qd, kd, vd, seg, &d);

  float *out = malloc(nq * sizeof(float)), *lse = malloc(nl * sizeof(float));
  for (int fast = 0; fast < 2; fast++) {
    float *dq = gt_test_zeros(nq), *dk = gt_test_zeros(nk);
    float *dv = gt_test_zeros(nk);
    if (fast) {
      gt_attention_forward(out, lse, q, k, v, seg, &d);
      gt_attention_backward(dq, dk, dv, R, out, lse, q, k, v, seg, &d);
    } else {
      gt_attention_forward_ref(out, lse, q, k, v, seg, &d);
      gt_attention_backward_ref(dq, dk, dv, R, out, lse, q, k, v, seg, &d);
    }
    double eo = err_vs_double(out, od, nq);
    double eq = err_vs_double(dq, gq, nq), ek = err_vs_double(dk, gk, nk);
    double ev = err_vs_double(dv, gv, nk);
    printf("fd W=%d seg=%d %s: out %.3g dq %.3g dk %.3g dv %.3g\n", W, segmode,
           fast ? "fast" : "ref ", eo, eq, ek, ev);
    ck_assert_msg(eo < 1e-5, "out vs double: %g", eo);
    ck_assert_msg(eq < 1e-4 && ek < 1e-4 && ev < 1e-4, "%s grads vs FD: dq %g dk %g dv %g",
                  fast ? "fast" : "ref", eq, ek, ev);
    free(dq), free(dk), free(dv);
  }
  free(q), free(k), free(v), free(R), free(seg), free(qd), free(kd), free(vd), free(Rd);
  free(od), free(scratch), free(gq), free(gk), free(gv), free(out), free(lse);
}

START_TEST(test_fd_causal) { run_fd(2, 9, 4, 2, 5, 0, 0, 77); }
END_TEST

START_TEST(test_fd_window_seg) { run_fd(1, 11, 2, 1, 6, 4, 1, 78); }
END_TEST

START_TEST(test_fd_window_gqa) { run_fd(2, 10, 4, 1, 3, 3, 0, 79); }
END_TEST

/* ---- masked keys are never read ----
 * Keys [0, P) get NaN in k and v. A query i >= P + W - 1 cannot see them, but
 * it shares a query tile (and so the P.V product, where 0 * NaN = NaN) with
 * earlier rows that can; tiles are at most MAX_TILE rows and keys, so rows
 * and keys from P + W - 1 + MAX_TILE on sit in tiles whose key range starts
 * past the poison. Those must match the clean run bit for bit, which only
 * holds if tiles entirely outside the band are skipped, never mixed in. */
#define MAX_TILE 128

static void run_poison(int W, int segmode) {
  uint64_t st = 4242 + (uint64_t)W;
  const int B = 2, T = 420, H = 2, K = 1, hd = 16, P = 97;
  gt_attn_dims d = {B, T, H, K, hd, W, 0.25f, 0, 0, NULL};
  const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd;
  const int64_t nl = (int64_t)B * H * T;
  float *q = gt_test_alloc_fill(nq, &st, -1, 1);
  float *k = gt_test_alloc_fill(nk, &st, -1, 1);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1);
  int32_t *seg = make_seg(B, T, segmode, &st);
  float *kp = gt_test_copy(k, nk), *vp = gt_test_copy(v, nk);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < P; t++)
      for (int c = 0; c < K * hd; c++) {
        kp[((size_t)b * T + t) * K * hd + c] = NAN;
        vp[((size_t)b * T + t) * K * hd + c] = NAN;
      }
  float *o1 = malloc(nq * sizeof(float)), *o2 = malloc(nq * sizeof(float));
  float *l1 = malloc(nl * sizeof(float)), *l2 = malloc(nl * sizeof(float));
  float *g1[3], *g2[3];
  for (int i = 0; i < 3; i++) {
    g1[i] = gt_test_zeros(i ? nk : nq);
    g2[i] = gt_test_zeros(i ? nk : nq);
  }
  gt_attention_forward(o1, l1, q, k, v, seg, &d);
  gt_attention_forward(o2, l2, q, kp, vp, seg, &d);
  gt_attention_backward(g1[0], g1[1], g1[2], dout, o1, l1, q, k, v, seg, &d);
  gt_attention_backward(g2[0], g2[1], g2[2], dout, o2, l2, q, kp, vp, seg, &d);
  const int first = P + W - 1 + MAX_TILE;
  ck_assert_int_lt(first, T);
  for (int b = 0; b < B; b++) {
    const size_t qo = ((size_t)b * T + first) * H * hd, ko = ((size_t)b * T + first) * K * hd;
    const size_t qn = (size_t)(T - first) * H * hd, kn = (size_t)(T - first) * K * hd;
    for (size_t i = 0; i < qn; i++) ck_assert(isfinite(o2[qo + i]) && isfinite(g2[0][qo + i]));
    ck_assert(memcmp(o1 + qo, o2 + qo, qn * sizeof(float)) == 0);
    ck_assert(memcmp(g1[0] + qo, g2[0] + qo, qn * sizeof(float)) == 0);
    ck_assert(memcmp(g1[1] + ko, g2[1] + ko, kn * sizeof(float)) == 0);
    ck_assert(memcmp(g1[2] + ko, g2[2] + ko, kn * sizeof(float)) == 0);
    for (int h = 0; h < H; h++) {
      const size_t lo = ((size_t)b * H + h) * T + first;
      ck_assert(memcmp(l1 + lo, l2 + lo, (size_t)(T - first) * sizeof(float)) == 0);
    }
  }
  /* The poison did reach rows that can see it: the test is not vacuous. */
  ck_assert(isnan(o2[0]));
  free(q), free(k), free(v), free(dout), free(seg), free(kp), free(vp);
  free(o1), free(o2), free(l1), free(l2);
  for (int i = 0; i < 3; i++) free(g1[i]), free(g2[i]);
}

START_TEST(test_poison_window) { run_poison(32, 0); }
END_TEST

START_TEST(test_poison_window_seg) { run_poison(70, 1); }
END_TEST

/* A NaN key that is outside a query's own window must not reach that query
 * even when it sits in a tile the query reads: the score is replaced, not
 * added to. Only k is poisoned (v stays finite), so every row i >= P + W - 1
 * must be exact, whatever the tile size. */
START_TEST(test_poison_k_exact) {
  uint64_t st = 99;
  const int B = 1, T = 150, H = 2, K = 2, hd = 8, W = 10, P = 37;
  gt_attn_dims d = {B, T, H, K, hd, W, 0.3f, 0, 0, NULL};
  const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd;
  float *q = gt_test_alloc_fill(nq, &st, -1, 1);
  float *k = gt_test_alloc_fill(nk, &st, -1, 1);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *kp = malloc(nk * sizeof(float));
  memcpy(kp, k, nk * sizeof(float));
  for (int c = 0; c < P * K * hd; c++) kp[c] = NAN;
  float *o1 = malloc(nq * sizeof(float)), *o2 = malloc(nq * sizeof(float));
  float *l1 = malloc(B * H * T * sizeof(float)), *l2 = malloc(B * H * T * sizeof(float));
  gt_attention_forward(o1, l1, q, k, v, NULL, &d);
  gt_attention_forward(o2, l2, q, kp, v, NULL, &d);
  const size_t off = (size_t)(P + W - 1) * H * hd;
  ck_assert(memcmp(o1 + off, o2 + off, (nq - off) * sizeof(float)) == 0);
  ck_assert(isnan(o2[0]));
  free(q), free(k), free(v), free(kp), free(o1), free(o2), free(l1), free(l2);
}
END_TEST

/* ---- determinism ---- */

START_TEST(test_deterministic) {
  uint64_t st = 5;
  const int B = 2, T = 333, H = 4, K = 2, hd = 40;
  const int windows[2] = {0, 100};
  const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd;
  const int64_t nl = (int64_t)B * H * T;
  float *q = gt_test_alloc_fill(nq, &st, -2, 2);
  float *k = gt_test_alloc_fill(nk, &st, -2, 2);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1);
  int32_t *seg = make_seg(B, T, 1, &st);
  for (int wi = 0; wi < 2; wi++) {
    gt_attn_dims d = {B, T, H, K, hd, windows[wi], 0.15f, 0, 0, NULL};
    float *o[3], *l[3], *g[3][3];
    const int threads[3] = {2, 2, 1};
    for (int r = 0; r < 3; r++) {
      gt_team_set_process(threads[r]);
      o[r] = malloc(nq * sizeof(float));
      l[r] = malloc(nl * sizeof(float));
      for (int i = 0; i < 3; i++) g[r][i] = gt_test_zeros(i ? nk : nq);
      gt_attention_forward(o[r], l[r], q, k, v, wi ? seg : NULL, &d);
      gt_attention_backward(g[r][0], g[r][1], g[r][2], dout, o[r], l[r], q, k, v,
                            wi ? seg : NULL, &d);
    }
    /* Two runs with 2 threads, and the 1-thread run too: the partition into
     * work items fixes every sum, so the thread count must not matter. */
    for (int r = 1; r < 3; r++) {
      ck_assert(memcmp(o[0], o[r], nq * sizeof(float)) == 0);
      ck_assert(memcmp(l[0], l[r], nl * sizeof(float)) == 0);
      ck_assert(memcmp(g[0][0], g[r][0], nq * sizeof(float)) == 0);
      ck_assert(memcmp(g[0][1], g[r][1], nk * sizeof(float)) == 0);
      ck_assert(memcmp(g[0][2], g[r][2], nk * sizeof(float)) == 0);
    }
    for (int r = 0; r < 3; r++) {
      free(o[r]), free(l[r]);
      for (int i = 0; i < 3; i++) free(g[r][i]);
    }
  }
  free(q), free(k), free(v), free(dout), free(seg);
}
END_TEST

/* The backward splits the key tiles of a (batch row, kv head) into parts
 * when B * K is small, and adds the dQ terms of a part's later query rows
 * from a partial buffer after all parts are done. The split and the order
 * of that sum are fixed by the shape, so dQ (and everything else) must have
 * the same bits on 1, 2 and 3 threads: shapes with one or two (b, kv head)
 * pairs (so 2 to 4 parts), GQA groups of 1 to 4, global and windowed
 * layers, packed segments, T not a multiple of the tile, dQ starting from
 * nonzero values; float32 and bf16 products (both bf16 modes on the
 * AVX-512 copy, the widened one on the AVX2 copy). The parts run
 * on a dynamic schedule, longest first: which thread runs a part, and
 * when, must not matter either. */
static const attn_case cases_split[] = {
    {1, 517, 4, 1, 24, 0, 0},   {1, 517, 4, 2, 24, 100, 0}, {3, 301, 2, 1, 20, 64, 2},
    {1, 389, 6, 3, 16, 130, 1}, {2, 450, 4, 1, 32, 0, 0},   {1, 517, 4, 1, 24, 0, 1},
    {1, 200, 1, 1, 8, 1, 0},    {5, 200, 2, 1, 8, 0, 0},
    /* (searched cuts: parts run longest first, so not
     * in part order; a local layer split 2 : 1; 52 key tiles, where the
     * search starts on a grid of 2 tiles) */
    {1, 512, 4, 1, 32, 0, 0},   {2, 700, 2, 1, 16, 200, 1}, {1, 3300, 1, 1, 8, 0, 0},
};

START_TEST(test_split_threads) {
  const attn_case *c = &cases_split[_i];
  uint64_t st = 7000 + (uint64_t)_i;
  const int64_t nq = (int64_t)c->B * c->T * c->H * c->hd, nk = (int64_t)c->B * c->T * c->K * c->hd;
  const int64_t nl = (int64_t)c->B * c->H * c->T;
  float *q = gt_test_alloc_fill(nq, &st, -2, 2);
  float *k = gt_test_alloc_fill(nk, &st, -2, 2);
  float *v = gt_test_alloc_fill(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1);
  float *g0 = gt_test_alloc_fill(nq + 2 * nk, &st, -0.1f, 0.1f);
  int32_t *seg = make_seg(c->B, c->T, c->seg, &st);
  gt_bf16_round(q, nq), gt_bf16_round(k, nk), gt_bf16_round(v, nk); /* bf16 mode's contract (all modes alike) */
  /* float32; bf16 on the pairs (vdpbf16ps where the CPU has it); bf16 in
   * widened mode (attention.c's gt__attn_bmode follows gt_bgemm's path) */
  /* bf16 mode is float32 on the portable path; on the AVX2 copy always widened */
  const int nmodes = gt__kernels_avx512() ? 3 : gt__kernels_path() == GT__PATH_AVX2 ? 2 : 1;
  for (int bf = 0; bf < nmodes; bf++) {
    gt_attn_dims d = {c->B, c->T, c->H, c->K, c->hd, c->window, 1.0f / sqrtf((float)c->hd), bf > 0, 0, NULL};
    gt__bgemm_force_path(bf == 2 ? GT_BGEMM_WIDE : GT_BGEMM_DP);
    float *o[3], *l[3], *g[3];
    for (int r = 0; r < 3; r++) {
      gt_team_set_process(r + 1);
      o[r] = malloc(nq * sizeof(float));
      l[r] = malloc(nl * sizeof(float));
      g[r] = gt_test_copy(g0, nq + 2 * nk);
      ck_assert_int_eq(gt_attention_forward(o[r], l[r], q, k, v, seg, &d), 0);
      /* every run differentiates the 1-thread forward, so only the backward's
       * thread count varies */
      ck_assert_int_eq(gt_attention_backward(g[r], g[r] + nq, g[r] + nq + nk, dout, o[0], l[0], q, k, v, seg, &d), 0);
    }
    gt__bgemm_force_path(-1);
    for (int r = 1; r < 3; r++) {
      ck_assert_msg(memcmp(o[0], o[r], nq * sizeof(float)) == 0, "case %d bf16 %d: out differs on %d threads", _i, bf, r + 1);
      ck_assert(memcmp(l[0], l[r], nl * sizeof(float)) == 0);
      ck_assert_msg(memcmp(g[0], g[r], nq * sizeof(float)) == 0, "case %d bf16 %d: dq differs on %d threads", _i, bf, r + 1);
      ck_assert_msg(memcmp(g[0] + nq, g[r] + nq, 2 * nk * sizeof(float)) == 0, "case %d bf16 %d: dk/dv differ on %d threads", _i, bf, r + 1);
    }
    /* and the split gradients are right: against the reference */
    if (!bf) {
      float *gr = gt_test_copy(g0, nq + 2 * nk);
      gt_attention_backward_ref(gr, gr + nq, gr + nq + nk, dout, o[0], l[0], q, k, v, seg, &d);
      check_close("dq", c, g[0], gr, nq);
      check_close("dk", c, g[0] + nq, gr + nq, nk);
      check_close("dv", c, g[0] + nq + nk, gr + nq + nk, nk);
      free(gr);
    }
    for (int r = 0; r < 3; r++) free(o[r]), free(l[r]), free(g[r]);
  }
  free(q), free(k), free(v), free(dout), free(g0), free(seg);
}
END_TEST

/* ---- bf16 mode (gt_attn_dims.bf16 = 1) ----
 * The fast kernel against the bf16 reference (the same operands rounded at
 * the same points, sums in double), element by element within
 *   |fast - ref| <= (2^-8 (1 + 2^-6) + 2 eps_S + n * 2^-24) * M + 2^-23 |ref|
 * where M is the output's sum of |terms| (below) and n its number of float32
 * roundings:
 * - each product term has one operand that both sides round from values
 *   that may differ slightly (the weights P, or dS): each rounding is within
 *   2^-9 relative, so the two rounded terms differ by at most 2^-8 of the
 *   term plus the difference before rounding (times 1 + 2^-9; the 2^-6 is
 *   room for these second-order parts). In forward the kernel rounds
 *   exp(s - running max), the reference exp(s - final max): different
 *   scales, which this covers too;
 * - the weights before rounding differ by the float32 scores: S sums hd
 *   exact products in float32, so |dS| <= eps_S = (hd + 2) 2^-24 scale
 *   sum|q k| (worst row), which moves exp(S - m) and its normalisation by at
 *   most eps_S relative each (2 eps_S; the expf error is in n);
 * - dS = P (dP - D) also carries the float32 errors of dP and D (hd products
 *   each), bounded by hd 2^-24 (sum|dO v| + sum|dO O|): M for dQ and dK
 *   weights each term with A = P (sum|dO v| + sum|dO O|) >= |dS|;
 * - float32 accumulation of exact products (vdpbf16ps or its emulation):
 *   at most one 2^-24 rounding per term of a running sum bounded by M, with
 *   n = terms + hd + 64 for the tile sums, the rescales, exp and the
 *   initial gradient added in.
 * Sizes: M_out = sum_j p_j |v_j|; M_dv = sum_i p_ij |dO_i|;
 * M_dk = scale sum_i A_ij |q_i|; M_dq = scale sum_j A_ij |k_j|; for lse,
 * |d lse| <= 2 eps_S + (T + 16) 2^-24 + 2^-23 |lse|. bf16 denormals, which
 * vdpbf16ps reads as zero, add at most 2^-126 per term: far below the
 * 2^-23 |ref| term at these magnitudes. */

/* the bf16 mode exists on the AVX-512 and AVX2 copies, not the portable one (kernels.h) */
static double r16d(float x) { return gt_bf16_round1(x); }

typedef struct bf_mags {
  double *out, *dq, *dk, *dv;
  double eps_s;
} bf_mags;

static bf_mags bf16_mags(const gt_attn_dims *d, const float *q, const float *k, const float *v,
                         const float *dout, const float *out, const float *lse, const int32_t *seg) {
  const int B = d->B, T = d->T, H = d->H, K = d->K, hd = d->hd, W = d->window;
  const int group = H / K;
  const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * K * hd;
  bf_mags m = {calloc(nq, sizeof(double)), calloc(nq, sizeof(double)),
               calloc(nk, sizeof(double)), calloc(nk, sizeof(double)), 0.0};
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        const size_t qo = (((size_t)b * T + i) * H + h) * hd;
        double sdo = 0;
        for (int c = 0; c < hd; c++) sdo += fabs((double)dout[qo + c] * out[qo + c]);
        for (int j = 0; j <= i; j++) {
          if ((W > 0 && i - j >= W) || (seg && seg[b * T + i] != seg[b * T + j])) continue;
          const size_t ko = (((size_t)b * T + j) * K + h / group) * hd;
          double dot = 0, adot = 0, adv = 0;
          for (int c = 0; c < hd; c++) {
            dot += r16d(q[qo + c]) * r16d(k[ko + c]);
            adot += fabs(r16d(q[qo + c]) * r16d(k[ko + c]));
            adv += fabs(r16d(dout[qo + c]) * r16d(v[ko + c]));
          }
          const double s = d->scale * dot;
          const double es = (hd + 2) * 0x1p-24 * d->scale * adot + 0x1p-24 * fabs(s);
          if (es > m.eps_s) m.eps_s = es;
          const double p = exp(s - lse[((size_t)b * H + h) * T + i]);
          const double A = p * (adv + sdo);
          for (int c = 0; c < hd; c++) {
            m.out[qo + c] += p * fabs(r16d(v[ko + c]));
            m.dv[ko + c] += p * fabs(r16d(dout[qo + c]));
            m.dq[qo + c] += d->scale * A * fabs(r16d(k[ko + c]));
            m.dk[ko + c] += d->scale * A * fabs(r16d(q[qo + c]));
          }
        }
      }
  return m;
}

static double bf_worst; /* worst |fast - ref| / bound seen */

static void check_bf16(const char *what, const char *mode, const attn_case *c, const float *a, const float *ref,
                       const double *M, double eps_s, double n, int64_t len) {
  for (int64_t i = 0; i < len; i++) {
    const double tol = M ? (0x1p-8 * (1 + 0x1p-6) + 2 * eps_s + n * 0x1p-24) * M[i] +
                               0x1p-23 * fabs(ref[i])
                         : 2 * eps_s + n * 0x1p-24 + 0x1p-23 * fabs(ref[i]);
    const double e = fabs((double)a[i] - ref[i]);
    if (tol > 0 && e / tol > bf_worst) bf_worst = e / tol;
    ck_assert_msg(e <= tol, "bf16 B=%d T=%d H=%d K=%d hd=%d W=%d seg=%d: %s%s[%lld] = %.9g, ref %.9g, bound %.3g",
                  c->B, c->T, c->H, c->K, c->hd, c->window, c->seg, mode, what, (long long)i, a[i], ref[i], tol);
  }
}

/* One mode's forward (out, lse) and gradients g against the reference's,
 * each within its bound above (M: the sums of |terms| of bf16_mags). */
static void check_bf16_all(const char *mode, const attn_case *c, const bf_mags *m, const float *out,
                           const float *lse, float *const g[3], const float *out_r, const float *lse_r,
                           float *const gr[3]) {
  const int64_t nq = (int64_t)c->B * c->T * c->H * c->hd, nk = (int64_t)c->B * c->T * c->K * c->hd;
  const int64_t nl = (int64_t)c->B * c->H * c->T;
  const double terms = (double)c->T * (c->H / c->K);
  check_bf16("out", mode, c, out, out_r, m->out, m->eps_s, 2.0 * c->T + 64, nq);
  check_bf16("lse", mode, c, lse, lse_r, NULL, m->eps_s, c->T + 16, nl);
  check_bf16("dq", mode, c, g[0], gr[0], m->dq, m->eps_s, terms + c->hd + 64, nq);
  check_bf16("dk", mode, c, g[1], gr[1], m->dk, m->eps_s, terms + c->hd + 64, nk);
  check_bf16("dv", mode, c, g[2], gr[2], m->dv, m->eps_s, terms + c->hd + 64, nk);
}

static float *alloc_fill_bf16(int64_t n, uint64_t *st, float lo, float hi) {
  float *x = gt_test_alloc_fill(n, st, lo, hi);
  gt_bf16_round(x, n); /* the caller's rounding: q, k, v hold bf16 values */
  return x;
}

static void run_case_bf16(const attn_case *c, float scale, uint64_t seed) {
  uint64_t st = seed;
  const int64_t nq = (int64_t)c->B * c->T * c->H * c->hd;
  const int64_t nk = (int64_t)c->B * c->T * c->K * c->hd;
  const int64_t nl = (int64_t)c->B * c->H * c->T;
  gt_attn_dims d = {c->B, c->T, c->H, c->K, c->hd, c->window, scale, 1, 0, NULL};
  gt_attn_dims d32 = d;
  d32.bf16 = 0;
  float *q = alloc_fill_bf16(nq, &st, -2, 2);
  float *k = alloc_fill_bf16(nk, &st, -2, 2);
  float *v = alloc_fill_bf16(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1); /* not rounded: the kernel rounds it */
  int32_t *seg = make_seg(c->B, c->T, c->seg, &st);
  float *out_r = malloc(nq * sizeof(float)), *out_f = malloc(nq * sizeof(float));
  float *lse_r = malloc(nl * sizeof(float)), *lse_f = malloc(nl * sizeof(float));
  float *out_e = malloc(nq * sizeof(float)), *lse_e = malloc(nl * sizeof(float));
  float *out_32 = malloc(nq * sizeof(float)), *lse_32 = malloc(nl * sizeof(float));
  float *out_w = malloc(nq * sizeof(float)), *lse_w = malloc(nl * sizeof(float));
  float *g0[3], *gr[3], *gf[3], *ge[3], *gw[3];
  for (int i = 0; i < 3; i++) {
    g0[i] = gt_test_alloc_fill(i ? nk : nq, &st, -0.1f, 0.1f);
    gr[i] = gt_test_copy(g0[i], i ? nk : nq);
    gf[i] = gt_test_copy(g0[i], i ? nk : nq);
    ge[i] = gt_test_copy(g0[i], i ? nk : nq);
    gw[i] = gt_test_copy(g0[i], i ? nk : nq);
  }

  gt_attention_forward_ref(out_r, lse_r, q, k, v, seg, &d);
  memset(out_f, 0xff, nq * sizeof(float));
  memset(lse_f, 0xff, nl * sizeof(float));
  /* vdpbf16ps where the CPU has it, whichever path gt_bgemm chose (the
   * kernel follows that choice: attention.c's gt__attn_bmode; on the AVX2
   * copy, which has no pairs, the widened mode) */
  gt__bgemm_force_path(GT_BGEMM_DP);
  ck_assert_int_eq(gt_attention_forward(out_f, lse_f, q, k, v, seg, &d), 0);
  gt_attention_backward_ref(gr[0], gr[1], gr[2], dout, out_r, lse_r, q, k, v, seg, &d);
  ck_assert_int_eq(gt_attention_backward(gf[0], gf[1], gf[2], dout, out_r, lse_r, q, k, v, seg, &d), 0);
  gt__bgemm_force_path(-1);

  bf_mags m = bf16_mags(&d, q, k, v, dout, out_r, lse_r, seg);
  check_bf16_all("", c, &m, out_f, lse_f, gf, out_r, lse_r, gr);
  /* the pairs exist on the AVX-512 copy only: on the AVX2 copy every run
   * below is the widened mode, so only what holds of it is checked */
  const int pairs = gt__kernels_avx512();

  /* The fallback (float32 FMAs under DAZ/FTZ) gives the same bits as the
   * vdpbf16ps path (where the CPU has it; otherwise both runs take it). */
  gt__bgemm_force_fallback(1);
  gt_attention_forward(out_e, lse_e, q, k, v, seg, &d);
  gt_attention_backward(ge[0], ge[1], ge[2], dout, out_r, lse_r, q, k, v, seg, &d);
  gt__bgemm_force_fallback(0);
  ck_assert(memcmp(out_e, out_f, nq * sizeof(float)) == 0);
  ck_assert(memcmp(lse_e, lse_f, nl * sizeof(float)) == 0);
  for (int i = 0; i < 3; i++) ck_assert(memcmp(ge[i], gf[i], (i ? nk : nq) * sizeof(float)) == 0);

  /* Widened mode (where gt_bgemm takes its widened or AMX path; on the
   * AVX2 copy whatever it takes): the
   * float32 tile products on the same operands rounded to bf16, so exact
   * products summed in float32 in another order: the same bounds. */
  gt__bgemm_force_path(GT_BGEMM_WIDE);
  ck_assert_int_eq(gt_attention_forward(out_w, lse_w, q, k, v, seg, &d), 0);
  ck_assert_int_eq(gt_attention_backward(gw[0], gw[1], gw[2], dout, out_r, lse_r, q, k, v, seg, &d), 0);
  gt__bgemm_force_path(-1);
  check_bf16_all("widened: ", c, &m, out_w, lse_w, gw, out_r, lse_r, gr);
  /* and it is another kernel: the pairs sum two products at a time, so on
   * sums of many terms some bits differ (docs/precision.md) */
  if (pairs && c->hd >= 16 && c->T >= 64) ck_assert(memcmp(gw[0], gf[0], nq * sizeof(float)) != 0);
  if (!pairs) {
    /* the AVX2 copy: the widened mode on gt_bgemm's other path there too
     * (its rounded copies), forward and backward */
    float *oc = malloc(nq * sizeof(float)), *lc = malloc(nl * sizeof(float)), *gc[3];
    for (int i = 0; i < 3; i++) gc[i] = gt_test_copy(g0[i], i ? nk : nq);
    gt__bgemm_force_path(GT_BGEMM_COPY);
    ck_assert_int_eq(gt_attention_forward(oc, lc, q, k, v, seg, &d), 0);
    ck_assert_int_eq(gt_attention_backward(gc[0], gc[1], gc[2], dout, out_r, lse_r, q, k, v, seg, &d), 0);
    gt__bgemm_force_path(-1);
    ck_assert_msg(memcmp(oc, out_w, nq * sizeof(float)) == 0 && memcmp(lc, lse_w, nl * sizeof(float)) == 0,
                  "AVX2, rounded-copies path: out or lse differ from the widened mode's");
    for (int i = 0; i < 3; i++)
      ck_assert_msg(memcmp(gc[i], gw[i], (i ? nk : nq) * sizeof(float)) == 0,
                    "AVX2, rounded-copies path: gradient %d differs from the widened mode's", i);
    free(oc), free(lc);
    for (int i = 0; i < 3; i++) free(gc[i]);
  }
  /* It reads Q, K and V as they are, bf16 values by the contract
   * (gt_attn_dims.bf16; the layers round them), and rounds only the
   * operands it makes (dO's copy, P, dS): values off their bf16 give other
   * bits, where the pairs, which round as they pack, give the same. */
  {
    float *qu = gt_test_copy(q, nq), *ku = gt_test_copy(k, nk), *vu = gt_test_copy(v, nk);
    for (int64_t i = 0; i < nq; i++) qu[i] *= 1.0f + 0x1p-12f;
    for (int64_t i = 0; i < nk; i++) ku[i] *= 1.0f - 0x1p-12f, vu[i] *= 1.0f + 0x1p-12f;
    float *ou = malloc(nq * sizeof(float)), *lu = malloc(nl * sizeof(float));
    gt__bgemm_force_path(GT_BGEMM_WIDE);
    ck_assert_int_eq(gt_attention_forward(ou, lu, qu, ku, vu, seg, &d), 0);
    gt__bgemm_force_path(-1);
    if (c->hd >= 8 && c->T >= 7 && c->window != 1)
      ck_assert_msg(memcmp(ou, out_w, nq * sizeof(float)) != 0, "widened: Q, K, V rounded again");
    gt__bgemm_force_fallback(1);
    ck_assert_int_eq(gt_attention_forward(ou, lu, qu, ku, vu, seg, &d), 0);
    gt__bgemm_force_fallback(0);
    if (pairs) ck_assert_msg(memcmp(ou, out_e, nq * sizeof(float)) == 0, "pairs: out depends on Q, K, V's bits below bf16");
    free(qu), free(ku), free(vu), free(ou), free(lu);
  }

  /* The flag is not ignored: float32 mode on the same inputs differs
   * (unless every query sees only itself: W = 1 makes out = v exactly). */
  gt_attention_forward(out_32, lse_32, q, k, v, seg, &d32);
  if (c->hd >= 8 && c->T >= 7 && c->window != 1) {
    ck_assert(memcmp(out_32, out_f, nq * sizeof(float)) != 0);
    ck_assert(memcmp(out_32, out_w, nq * sizeof(float)) != 0);
  }

  free(m.out), free(m.dq), free(m.dk), free(m.dv);
  free(q), free(k), free(v), free(dout), free(seg), free(out_r), free(out_f), free(lse_r);
  free(lse_f), free(out_e), free(lse_e), free(out_32), free(lse_32), free(out_w), free(lse_w);
  for (int i = 0; i < 3; i++) free(g0[i]), free(gr[i]), free(gf[i]), free(ge[i]), free(gw[i]);
}

START_TEST(test_bf16_vs_ref) {
  run_case_bf16(&cases[_i], 1.0f / sqrtf((float)cases[_i].hd), 3000 + (uint64_t)_i);
  printf("bf16 case %2d (kernel %d): worst |fast - ref| / bound %.3g\n", _i, gt__bgemm_kernel(),
         bf_worst);
}
END_TEST

/* Shapes of the small Gemma 4 fixtures (scale 1: query_pre_attn_scalar 1
 * with q/k norms, so scores reach tens and P is sharp; head dims 12 and 16,
 * window 6) and Gemma 3-like ones at hd 512. */
static const attn_case cases_sharp[] = {
    {2, 24, 4, 1, 12, 6, 1}, {2, 24, 4, 1, 16, 0, 1}, {1, 130, 4, 1, 12, 6, 0},
    {1, 100, 2, 1, 512, 0, 0}, {1, 70, 4, 1, 512, 33, 1},
};

START_TEST(test_bf16_sharp) {
  const attn_case *c = &cases_sharp[_i];
  run_case_bf16(c, c->hd >= 512 ? 1.0f / sqrtf((float)c->hd) : 1.0f, 4000 + (uint64_t)_i);
  printf("bf16 sharp case %d (kernel %d): worst |fast - ref| / bound %.3g\n", _i, gt__bgemm_kernel(), bf_worst);
}
END_TEST

/* bf16 mode: on the pairs, the same bits on 2 threads twice and on 1
 * thread, with and without the fallback forced (and the two paths equal);
 * in widened mode, the same bits on 2, 1, 3 and 2 threads. (On the AVX2
 * copy both sets of runs are the widened mode.) */
START_TEST(test_bf16_deterministic) {
  uint64_t st = 6;
  const int B = 2, T = 333, H = 4, K = 2, hd = 40;
  const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd;
  const int64_t nl = (int64_t)B * H * T;
  float *q = alloc_fill_bf16(nq, &st, -2, 2);
  float *k = alloc_fill_bf16(nk, &st, -2, 2);
  float *v = alloc_fill_bf16(nk, &st, -1, 1);
  float *dout = gt_test_alloc_fill(nq, &st, -1, 1);
  int32_t *seg = make_seg(B, T, 1, &st);
  /* each mode's runs: the path forced, the fallback forced or not, threads;
   * every run of a mode must give its first run's bits */
  static const struct {
    int path, fallback, threads;
  } runs[2][4] = {{{GT_BGEMM_DP, 0, 2}, {GT_BGEMM_DP, 0, 2}, {GT_BGEMM_DP, 0, 1}, {GT_BGEMM_DP, 1, 2}},
                  {{GT_BGEMM_WIDE, 0, 2}, {GT_BGEMM_WIDE, 0, 1}, {GT_BGEMM_WIDE, 0, 3}, {GT_BGEMM_WIDE, 0, 2}}};
  for (int wi = 0; wi < 2; wi++)
    for (int mode = 0; mode < 2; mode++) {
      gt_attn_dims d = {B, T, H, K, hd, wi ? 100 : 0, 0.15f, 1, 0, NULL};
      float *o[4], *l[4], *g[4][3];
      for (int r = 0; r < 4; r++) {
        gt__bgemm_force_path(runs[mode][r].path); /* pairs: vdpbf16ps where the CPU has it, as above */
        gt__bgemm_force_fallback(runs[mode][r].fallback);
        gt_team_set_process(runs[mode][r].threads);
        o[r] = malloc(nq * sizeof(float));
        l[r] = malloc(nl * sizeof(float));
        for (int i = 0; i < 3; i++) g[r][i] = gt_test_zeros(i ? nk : nq);
        gt_attention_forward(o[r], l[r], q, k, v, wi ? seg : NULL, &d);
        gt_attention_backward(g[r][0], g[r][1], g[r][2], dout, o[r], l[r], q, k, v, wi ? seg : NULL, &d);
      }
      gt__bgemm_force_fallback(0);
      gt__bgemm_force_path(-1);
      for (int r = 1; r < 4; r++) {
        ck_assert(memcmp(o[0], o[r], nq * sizeof(float)) == 0);
        ck_assert(memcmp(l[0], l[r], nl * sizeof(float)) == 0);
        for (int i = 0; i < 3; i++) ck_assert(memcmp(g[0][i], g[r][i], (i ? nk : nq) * sizeof(float)) == 0);
      }
      for (int r = 0; r < 4; r++) {
        free(o[r]), free(l[r]);
        for (int i = 0; i < 3; i++) free(g[r][i]);
      }
    }
  free(q), free(k), free(v), free(dout), free(seg);
}
END_TEST

/* is x a bf16 value */
static int is_bf16(float x) { return gt_bf16_round1(x) == x; }

/* bf16 mode rounds dO, P and dS before their products, on every path. One
 * query row i0 (of T 70, across key tiles) has a nonzero output gradient,
 * so every gradient is a single product of two rounded values, exact in
 * float32: dV[j] = P[i0,j] dO[i0], dK[j] = s dS[i0,j] Q[i0], dQ[i0] =
 * s sum_j dS[i0,j] K[j] with only K[j1] nonzero in column c0 (s = 1/4, a
 * power of two). With dO[i0,c0] = 1 + 2^-12 (bf16 1.0) and Q[i0,c0] =
 * K[j1,c0] = 1: dV[j,c0] is P[i0,j] and must be a bf16 value, dV[j,c] /
 * dV[j,c0] is dO[i0,c] rounded, dK[j,c0] / s is dS[i0,j] rounded, and
 * dQ[i0,c0] equals dK[j1,c0]. Unrounded dO, P or dS break them; float32
 * mode must break the first (the check can fail). */
START_TEST(test_bf16_rounds_do_p_ds) {
  const int T = 70, hd = 16, i0 = 69, j1 = 5, c0 = 3;
  const float scale = 0.25f;
  uint64_t st = 12;
  const int64_t n = (int64_t)T * hd;
  float *q = alloc_fill_bf16(n, &st, -2, 2), *k = alloc_fill_bf16(n, &st, -2, 2), *v = alloc_fill_bf16(n, &st, -1, 1);
  q[i0 * hd + c0] = 1.0f;
  for (int j = 0; j < T; j++) k[j * hd + c0] = j == j1 ? 1.0f : 0.0f;
  float *dout = calloc((size_t)n, sizeof(float));
  for (int c = 0; c < hd; c++) dout[i0 * hd + c] = (float)gt_test_rand_u64(&st) / 0x1p64f * 2.0f - 1.0f;
  dout[i0 * hd + c0] = 1.0f + 0x1p-12f;
  const int paths[] = {GT_BGEMM_DP, GT_BGEMM_WIDE, GT_BGEMM_AMX};
  for (int pi = 0; pi < 4; pi++) { /* the pairs, widened, AMX where usable, then float32 mode */
    if (pi == 2 && !gt__cpu_amx_bf16()) continue;
    gt_attn_dims d = {1, T, 1, 1, hd, 0, scale, pi < 3, 0, NULL};
    float *out = malloc(n * sizeof(float)), *lse = malloc(T * sizeof(float));
    float *dq = calloc((size_t)n, sizeof(float)), *dk = calloc((size_t)n, sizeof(float)),
          *dv = calloc((size_t)n, sizeof(float));
    if (pi < 3) gt__bgemm_force_path(paths[pi]);
    ck_assert_int_eq(gt_attention_forward(out, lse, q, k, v, NULL, &d), 0);
    ck_assert_int_eq(gt_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, NULL, &d), 0);
    gt__bgemm_force_path(-1);
    int broken = 0;
    for (int j = 0; j <= i0; j++) {
      const float p = dv[j * hd + c0];
      broken += !is_bf16(p) || !(p > 0.0f);
      for (int c = 0; c < hd && pi < 3; c++)
        ck_assert_msg(is_bf16(dv[j * hd + c] / p) && dv[j * hd + c] == p * (dv[j * hd + c] / p),
                      "path %d: dV[%d,%d] / P = %a is not dO rounded to bf16", pi, j, c, dv[j * hd + c] / p);
      if (pi < 3) ck_assert_msg(is_bf16(dk[j * hd + c0] / scale), "path %d: dK[%d,c0] / s = %a: dS not rounded", pi,
                                j, dk[j * hd + c0] / scale);
    }
    if (pi < 3) {
      ck_assert_msg(broken == 0, "path %d: %d of P's dV columns are not bf16 values (P or dO not rounded)", pi, broken);
      ck_assert_msg(dq[i0 * hd + c0] == dk[j1 * hd + c0], "path %d: dQ[i0,c0] %a != dK[j1,c0] %a", pi,
                    dq[i0 * hd + c0], dk[j1 * hd + c0]);
      for (int i = 0; i < i0; i++)
        for (int c = 0; c < hd; c++) ck_assert(dq[i * hd + c] == 0.0f);
    } else {
      ck_assert_msg(broken > 0, "float32 mode: every P * (1 + 2^-12) a bf16 value, so the check cannot fail");
    }
    free(out), free(lse), free(dq), free(dk), free(dv);
  }
  free(q), free(k), free(v), free(dout);
}
END_TEST

/* ---- dtype=bfloat16's output: rounded as it is finished, and its copy ----
 * round_out gives the bits of the forward and then a gt_bf16_round pass;
 * out16 is gt_bf16_pack of that output; the backward reading out16 (out
 * NULL) gives the bits of reading the widened copy; in float32 and bf16
 * products (any path), on 1 and 2 threads. A head wider than the stack
 * row takes the in-loop form: the same gradients within float rounding. */
START_TEST(test_round_out_and_copy) {
  static const int hds[] = {5, 64, GT_ATTN_OUT16_HD_MAX + 3};
  for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
    for (int bf = 0; bf < 2; bf++)
      for (int th = 1; th <= 2; th++) {
        const int B = 2, T = hds[hi] > 64 ? 5 : 70, H = 4, K = 2, hd = hds[hi];
        const int wide = hd > GT_ATTN_OUT16_HD_MAX;
        const int threads_before = gt_team_threads();
        gt_team_set_process(th);
        uint64_t st = 90 + hi;
        gt_attn_dims d = {B, T, H, K, hd, 0, 1.0f / sqrtf((float)hd), bf, 0, NULL};
        const int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * K * hd, nl = (int64_t)B * H * T;
        float *q = gt_test_alloc_fill(nq, &st, -1.5f, 1.5f), *k = gt_test_alloc_fill(nk, &st, -1.5f, 1.5f);
        float *v = gt_test_alloc_fill(nk, &st, -1, 1), *dout = gt_test_alloc_fill(nq, &st, -1, 1);
        gt_bf16_round(q, nq), gt_bf16_round(k, nk), gt_bf16_round(v, nk); /* the caller's rounding */
        float *o = malloc(nq * sizeof(float)), *lse = malloc(nl * sizeof(float));
        float *e = malloc(nq * sizeof(float)), *el = malloc(nl * sizeof(float));
        uint16_t *o16 = malloc(nq * sizeof(uint16_t)), *want = malloc(nq * sizeof(uint16_t));
        ck_assert_int_eq(gt_attention_forward(e, el, q, k, v, NULL, &d), 0);
        gt_bf16_round(e, nq);
        gt_bf16_pack(want, e, nq);
        gt_attn_dims dr = d;
        dr.round_out = 1, dr.out16 = o16;
        ck_assert_int_eq(gt_attention_forward(o, lse, q, k, v, NULL, &dr), 0);
        ck_assert_msg(gt_test_same_bits(o, e, nq) && gt_test_same_bits(lse, el, nl), "hd %d bf16 %d: rounded out", hd, bf);
        ck_assert_msg(!memcmp(o16, want, nq * sizeof(uint16_t)), "hd %d bf16 %d: out's copy", hd, bf);
        float *g[3], *eg[3];
        for (int i = 0; i < 3; i++) g[i] = gt_test_zeros(i ? nk : nq), eg[i] = gt_test_zeros(i ? nk : nq);
        ck_assert_int_eq(gt_attention_backward(eg[0], eg[1], eg[2], dout, o, lse, q, k, v, NULL, &d), 0);
        gt_attn_dims db = d;
        db.out16 = o16;
        ck_assert_int_eq(gt_attention_backward(g[0], g[1], g[2], dout, NULL, lse, q, k, v, NULL, &db), 0);
        for (int i = 0; i < 3; i++) {
          const int64_t n = i ? nk : nq;
          if (wide)
            gt_test_check_err("attention backward from out16, wide head", gt_test_scaled_err(g[i], eg[i], n), 1e-5);
          else
            ck_assert_msg(gt_test_same_bits(g[i], eg[i], n), "hd %d bf16 %d threads %d: gradient %d from out16", hd,
                          bf, th, i);
        }
        /* the references: the same wrapping (a rounding pass and a pack; out16 widened) */
        if (!wide) {
          float *ro = malloc(nq * sizeof(float)), *rl = malloc(nl * sizeof(float)), *re = malloc(nq * sizeof(float));
          uint16_t *r16 = malloc(nq * sizeof(uint16_t));
          gt_attn_dims rd = d;
          rd.round_out = 1, rd.out16 = r16;
          gt_attention_forward_ref(ro, rl, q, k, v, NULL, &rd);
          gt_attention_forward_ref(re, rl, q, k, v, NULL, &d);
          gt_bf16_round(re, nq);
          gt_bf16_pack(want, re, nq);
          ck_assert_msg(gt_test_same_bits(ro, re, nq) && !memcmp(r16, want, nq * sizeof(uint16_t)), "ref: round_out, out16");
          for (int i = 0; i < 3; i++) memset(g[i], 0, (i ? nk : nq) * sizeof(float)), memset(eg[i], 0, (i ? nk : nq) * sizeof(float));
          gt_attention_backward_ref(eg[0], eg[1], eg[2], dout, ro, rl, q, k, v, NULL, &d);
          gt_attention_backward_ref(g[0], g[1], g[2], dout, NULL, rl, q, k, v, NULL, &rd);
          for (int i = 0; i < 3; i++) ck_assert_msg(gt_test_same_bits(g[i], eg[i], i ? nk : nq), "ref: gradient %d from out16", i);
          free(ro), free(rl), free(re), free(r16);
        }
        /* neither out nor out16: refused, nothing written */
        ck_assert_int_eq(gt_attention_backward(g[0], g[1], g[2], dout, NULL, lse, q, k, v, NULL, &d), -1);
        for (int i = 0; i < 3; i++) free(g[i]), free(eg[i]);
        free(q), free(k), free(v), free(dout), free(o), free(lse), free(e), free(el), free(o16), free(want);
        gt_team_set_process(threads_before);
      }
}
END_TEST

static Suite *attention_suite(void) {
  Suite *s = suite_create("attention");
  TCase *tc = gt_test_tcase(s, "fast_vs_ref");
  tcase_add_loop_test(tc, test_fast_vs_ref, 0, NCASES);
  tc = gt_test_tcase(s, "finite_differences");
  tcase_add_test(tc, test_fd_causal);
  tcase_add_test(tc, test_fd_window_seg);
  tcase_add_test(tc, test_fd_window_gqa);
  tc = gt_test_tcase(s, "masking");
  tcase_add_test(tc, test_poison_window);
  tcase_add_test(tc, test_poison_window_seg);
  tcase_add_test(tc, test_poison_k_exact);
  tc = gt_test_tcase(s, "determinism");
  tcase_add_test(tc, test_deterministic);
  tcase_add_loop_test(tc, test_split_threads, 0, (int)(sizeof cases_split / sizeof cases_split[0]));
  tc = gt_test_tcase(s, "bf16 activations");
  tcase_add_test(tc, test_round_out_and_copy);
  if (gt__kernels_path() != GT__PATH_PORTABLE) { /* on the portable path the bf16 mode is ignored (kernels.h) */
    tc = gt_test_tcase(s, "bf16");
    tcase_add_loop_test(tc, test_bf16_vs_ref, 0, NCASES);
    tcase_add_loop_test(tc, test_bf16_sharp, 0, (int)(sizeof cases_sharp / sizeof cases_sharp[0]));
    tcase_add_test(tc, test_bf16_deterministic);
    tcase_add_test(tc, test_bf16_rounds_do_p_ds);
  }
  return s;
}

int main(void) {
  return gt_test_run_suite(attention_suite(), 0);
}
