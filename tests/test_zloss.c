/* The z-loss (z_loss_multiplier, PaLM's auxiliary loss z * log(Z)^2 per loss
 * token, Z the softmax normaliser of the capped logits), as MaxText adds it:
 * part of each token's loss (so of the step's loss and eval loss), its sum
 * reported apart.
 *  - kernels: the backward with z against its scalar reference and against
 *    float64 finite differences of sum_r w_r (xent_r + z lse_r^2), with and
 *    without the soft-cap;
 *  - the output head with 1, 2, 4 and 8 vocab tiles against a float64
 *    scalar reference of the head (final norm, tied logits, cap, loss):
 *    the loss, the z sum, and the directional derivatives of dx, the
 *    embedding and the final-norm gradients, each by finite differences of
 *    the reference;
 *  - the whole model's gradient against finite differences of its loss;
 *  - bf16: the z sum is that of the logits the loss saw;
 *  - remat gives the same bits; multiplier 0 is off, bit for bit;
 *  - a mesh of 1 and 2 devices agree, and loss - z_loss is the loss without. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "exec/exec.h"
#include "kernels/kernels.h"
#include "mesh/fsdp.h"
#include "model/head.h"
#include "model/model.h"
#include "train/trainer.h"
#include "gt_testutil.h"

/* ---------- kernels ---------- */

typedef struct {
  double *l, *w;
  const int32_t *tg;
  int64_t rows, V;
  double z, cap; /* cap 0: none */
} xz_ctx;

/* sum_r w_r (lse_r - y_r[t] + z lse_r^2) over unmasked rows, y the capped logits */
static double xz_loss(void *p) {
  const xz_ctx *c = p;
  double L = 0;
  double *y = malloc(sizeof(double) * (size_t)c->V);
  for (int64_t r = 0; r < c->rows; r++) {
    if (c->tg[r] < 0) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c->V; j++) {
      const double x = c->l[r * c->V + j];
      y[j] = c->cap > 0 ? c->cap * tanh(x / c->cap) : x;
      mx = fmax(mx, y[j]);
    }
    for (int64_t j = 0; j < c->V; j++) s += exp(y[j] - mx);
    const double lse = mx + log(s);
    L += c->w[r] * (lse - y[c->tg[r]] + c->z * lse * lse);
  }
  free(y);
  return L;
}

START_TEST(test_kernel_vs_fd) {
  const int64_t rows = 4, V = 7;
  const int32_t tg[4] = {3, -1, 0, 6};
  const float zs[] = {0.02f, 0.5f};
  const float caps[] = {0.0f, 4.0f};
  for (int zi = 0; zi < 2; zi++)
    for (int ci = 0; ci < 2; ci++) {
      uint64_t seed = 301 + (uint64_t)(2 * zi + ci);
      const float z = zs[zi], cap = caps[ci];
      /* logits shifted off zero: log Z away from 0, so the z term is large */
      float *l = gt_test_alloc_fill(rows * V, &seed, -1, 5), *w = gt_test_alloc_fill(rows, &seed, 0.5f, 2);
      float *y = gt_test_copy(l, rows * V), *loss = gt_test_zeros(rows), *lse = gt_test_zeros(rows);
      if (cap > 0)
        gt_softcap_xent_forward(loss, lse, y, tg, rows, V, cap);
      else
        gt_xent_forward(loss, lse, y, tg, rows, V);
      float *d = gt_test_zeros(rows * V);
      if (cap > 0)
        gt_softcap_xent_backward(d, y, lse, tg, w, rows, V, cap, z);
      else
        gt_xent_backward(d, y, lse, tg, w, rows, V, z);
      xz_ctx c = {gt_test_to_double(l, rows * V), gt_test_to_double(w, rows), tg, rows, V, z, cap};
      double *gl = malloc(sizeof(double) * (size_t)(rows * V));
      gt_test_central_diff(gl, c.l, rows * V, 1e-4, xz_loss, &c);
      char what[96];
      snprintf(what, sizeof what, "dlogits vs FD, z %g cap %g", z, cap);
      gt_test_check_err(what, gt_test_scaled_err_d(d, gl, rows * V), 2e-5);
      free(l); free(w); free(y); free(loss); free(lse); free(d); free(c.l); free(c.w); free(gl);
    }
}
END_TEST

START_TEST(test_kernel_vs_ref) {
  const int64_t rows_list[] = {1, 3, 17, 300};
  const int64_t Vs[] = {1, 5, 33, 257, 4099};
  const float z = 0.03f, cap = 30.0f;
  uint64_t seed = 311;
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 5; b++) {
      const int64_t rows = rows_list[a], V = Vs[b], n = rows * V;
      char what[128];
      float *l = gt_test_alloc_fill(n, &seed, -20, 40);
      int32_t *tg = malloc(sizeof(int32_t) * (size_t)rows);
      for (int64_t r = 0; r < rows; r++) tg[r] = (r % 3 == 2) ? -1 : (int32_t)(gt_test_rand_u64(&seed) % V);
      float *w = gt_test_alloc_fill(rows, &seed, 0, 2);
      float *loss = gt_test_zeros(rows), *lse = gt_test_zeros(rows);
      gt_xent_forward(loss, lse, l, tg, rows, V);
      float *d = gt_test_zeros(n), *dr = gt_test_zeros(n);
      gt_xent_backward(d, l, lse, tg, w, rows, V, z);
      gt_xent_backward_ref(dr, l, lse, tg, w, rows, V, z);
      snprintf(what, sizeof what, "xent bwd with z vs ref rows=%ld V=%ld", (long)rows, (long)V);
      gt_test_check_err(what, gt_test_scaled_err(d, dr, n), 1e-5);
      /* in place, as the head runs it */
      float *ip = gt_test_copy(l, n);
      gt_xent_backward(ip, ip, lse, tg, w, rows, V, z);
      ck_assert_msg(gt_test_same_bits(ip, d, n), "in place differs");
      /* fused with the cap against the composed references */
      float *fl = gt_test_copy(l, n), *rl = gt_test_copy(l, n);
      float *rloss = gt_test_zeros(rows), *rlse = gt_test_zeros(rows), *rd = gt_test_zeros(n);
      gt_softcap_xent_forward(loss, lse, fl, tg, rows, V, cap);
      gt_softcap_xent_backward(fl, fl, lse, tg, w, rows, V, cap, z);
      gt_softcap_xent_forward_ref(rloss, rlse, rl, tg, rows, V, cap);
      gt_softcap_xent_backward_ref(rd, rl, rlse, tg, w, rows, V, cap, z);
      snprintf(what, sizeof what, "softcap+xent bwd with z vs ref rows=%ld V=%ld", (long)rows, (long)V);
      gt_test_check_err(what, gt_test_scaled_err(fl, rd, n), 1e-5);
      for (int64_t r = 0; r < rows; r++)
        if (tg[r] < 0)
          for (int64_t j = 0; j < V; j++) ck_assert(d[r * V + j] == 0.0f && fl[r * V + j] == 0.0f);
      free(l); free(tg); free(w); free(loss); free(lse); free(d); free(dr); free(ip); free(fl); free(rl);
      free(rloss); free(rlse); free(rd);
    }
}
END_TEST

/* ---------- the output head against a float64 scalar reference ---------- */

typedef struct {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
} model_fx;

static void model_make(model_fx *f, int n, const char *const *ov, uint64_t seed) {
  gt_test_model_random(&f->m, &f->cfg, &f->mem, n, ov, seed, 1);
}

static void model_free(model_fx *f) {
  gt_model_free(&f->m);
  ck_assert_int_eq(gt_mem_total_cur(&f->mem), 0);
}

/* The head in float64: h = x rstd (1 + wn), logits = h E^T, y = cap
 * tanh(logits / cap), loss = sum over targets of w (lse - y_t + z lse^2). */
typedef struct {
  int64_t N, d, V;
  double *x, *E, *wn; /* [N d], [V d], [d] */
  const int32_t *tg;
  double eps, cap, z, w;
  double z_sum; /* out: sum of z lse^2 */
} head_ref;

static double head_ref_loss(void *p) {
  head_ref *c = p;
  double L = 0, zs = 0;
  double *h = malloc(sizeof(double) * (size_t)c->d), *y = malloc(sizeof(double) * (size_t)c->V);
  for (int64_t r = 0; r < c->N; r++) {
    if (c->tg[r] < 0) continue;
    const double *xr = c->x + r * c->d;
    double ss = 0;
    for (int64_t k = 0; k < c->d; k++) ss += xr[k] * xr[k];
    const double rs = 1.0 / sqrt(ss / (double)c->d + c->eps);
    for (int64_t k = 0; k < c->d; k++) h[k] = xr[k] * rs * (1.0 + c->wn[k]);
    double mx = -INFINITY;
    for (int64_t v = 0; v < c->V; v++) {
      double a = 0;
      for (int64_t k = 0; k < c->d; k++) a += h[k] * c->E[v * c->d + k];
      y[v] = c->cap > 0 ? c->cap * tanh(a / c->cap) : a;
      mx = fmax(mx, y[v]);
    }
    double s = 0;
    for (int64_t v = 0; v < c->V; v++) s += exp(y[v] - mx);
    const double lse = mx + log(s);
    L += c->w * (lse - y[c->tg[r]] + c->z * lse * lse);
    zs += c->z * lse * lse;
  }
  c->z_sum = zs;
  free(h);
  free(y);
  return L;
}

/* d/dt L(p + t dir) by central differences of the float64 reference (p one
 * of the reference's arrays, n long) */
static double ref_dir_deriv(head_ref *c, double *p, const double *dir, int64_t n) {
  const double h = 1e-5;
  double *p0 = malloc(sizeof(double) * (size_t)n);
  memcpy(p0, p, sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) p[i] = p0[i] + h * dir[i];
  const double a = head_ref_loss(c);
  for (int64_t i = 0; i < n; i++) p[i] = p0[i] - h * dir[i];
  const double b = head_ref_loss(c);
  memcpy(p, p0, sizeof(double) * (size_t)n);
  free(p0);
  return (a - b) / (2 * h);
}

static double dot_fd(const float *g, const double *dir, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)g[i] * dir[i];
  return s;
}

/* The head's loss sums and gradients for each tile count against the
 * reference; every tile count against one tile to float32 accuracy. */
static void check_head(const char *cap, float z) {
  char zk[64];
  snprintf(zk, sizeof zk, "z_loss_multiplier=%g", z);
  const char *ov[] = {"model_name=gemma3-tiny", "base_num_decoder_layers=1", "layer_pattern=G", zk, cap};
  model_fx f;
  model_make(&f, 5, ov, 41);
  gt_model *m = &f.m;
  const int64_t N = 32, d = m->d, V = m->vocab;
  uint64_t s = 42;
  float *x = gt_test_alloc_fill(N * d, &s, -2, 2), *dx = gt_test_zeros(N * d), *dx1 = gt_test_zeros(N * d);
  int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
  gt_test_fill_ids(tg, N, &s, 0, V);
  tg[3] = tg[17] = -1;
  int64_t tw = 0;
  for (int64_t i = 0; i < N; i++) tw += tg[i] >= 0;
  /* embeddings large enough that log Z sits well away from 0 and ln V */
  float *E = m->params + m->embed_offset;
  for (int64_t i = 0; i < V * d; i++) E[i] *= 10.0f;
  const float w = 1.0f / (float)tw;
  head_ref c = {N, d, V, gt_test_to_double(x, N * d), gt_test_to_double(E, V * d),
                gt_test_to_double(m->params + m->final_norm_offset, d), tg, m->eps, m->softcap, m->z_loss, w, 0};
  const double L = head_ref_loss(&c), zref = c.z_sum;
  ck_assert_msg(zref > 0.05 * L * tw || z == 0.0f, "the z term is too small to see (%g of %g)", zref, L * tw);
  double *dir_x = malloc(sizeof(double) * (size_t)(N * d)), *dir_E = malloc(sizeof(double) * (size_t)(V * d));
  double dir_n[64];
  ck_assert_int_le(d, 64);
  for (int64_t i = 0; i < N * d; i++) dir_x[i] = gt_test_rand_uniform(&s, -1, 1);
  for (int64_t i = 0; i < V * d; i++) dir_E[i] = gt_test_rand_uniform(&s, -1, 1);
  for (int64_t i = 0; i < d; i++) dir_n[i] = gt_test_rand_uniform(&s, -1, 1);
  const double fx = ref_dir_deriv(&c, c.x, dir_x, N * d), fE = ref_dir_deriv(&c, c.E, dir_E, V * d),
               fn = ref_dir_deriv(&c, c.wn, dir_n, d);
  float *g1 = malloc(sizeof(float) * (size_t)m->n_params);
  const int tiles[] = {1, 2, 4, 8};
  for (int ti = 0; ti < 4; ti++) {
    gt_loss_stats st = {0};
    gt_err e;
    gt_model_zero_grads(m);
    ck_assert_msg(gt__head_run(m, m->params, NULL, m->grads, x, tg, N, tiles[ti], w, dx, NULL, &st, &e) == GT_OK, "%s",
                  e.msg);
    char what[128];
    ck_assert_int_eq(st.total_weights, tw);
    snprintf(what, sizeof what, "%s z %g tiles %d: loss vs float64 reference", cap, z, tiles[ti]);
    gt_test_check_err(what, fabs(st.xent_sum * w - L) / L, 1e-6);
    snprintf(what, sizeof what, "%s z %g tiles %d: z sum vs float64 reference", cap, z, tiles[ti]);
    gt_test_check_err(what, z == 0.0f ? fabs(st.z_sum) : fabs(st.z_sum - zref) / zref, 1e-6);
    const float *gE = m->grads + m->embed_offset, *gN = m->grads + m->final_norm_offset;
    snprintf(what, sizeof what, "%s z %g tiles %d: dx along a direction vs FD", cap, z, tiles[ti]);
    gt_test_check_err(what, fabs(dot_fd(dx, dir_x, N * d) - fx) / fabs(fx), 1e-4);
    snprintf(what, sizeof what, "%s z %g tiles %d: embedding gradient along a direction vs FD", cap, z, tiles[ti]);
    gt_test_check_err(what, fabs(dot_fd(gE, dir_E, V * d) - fE) / fabs(fE), 1e-4);
    snprintf(what, sizeof what, "%s z %g tiles %d: final-norm gradient along a direction vs FD", cap, z, tiles[ti]);
    gt_test_check_err(what, fabs(dot_fd(gN, dir_n, d) - fn) / fabs(fn), 1e-4);
    if (ti == 0) {
      memcpy(g1, m->grads, sizeof(float) * (size_t)m->n_params);
      memcpy(dx1, dx, sizeof(float) * (size_t)(N * d));
    } else { /* float32 accuracy: 8 tiles of 4 rows take another matmul path (up to 1e-6 seen) */
      snprintf(what, sizeof what, "%s z %g tiles %d vs 1: gradients", cap, z, tiles[ti]);
      gt_test_check_err(what, gt_test_norm_rel_err(m->grads, g1, m->n_params), 3e-6);
      gt_test_check_err(what, gt_test_norm_rel_err(dx, dx1, N * d), 3e-6);
    }
  }
  free(x); free(dx); free(dx1); free(tg); free(c.x); free(c.E); free(c.wn); free(dir_x); free(dir_E); free(g1);
  model_free(&f);
}

START_TEST(test_head_tiles_vs_reference) { check_head("final_logits_soft_cap=0", 0.05f); }
END_TEST

START_TEST(test_head_tiles_vs_reference_softcap) { check_head("final_logits_soft_cap=8", 0.05f); }
END_TEST

START_TEST(test_head_reference_without_z) { check_head("final_logits_soft_cap=8", 0.0f); }
END_TEST

/* ---------- the whole model ---------- */

typedef struct {
  model_fx f;
  int32_t *in, *tg, *pos;
  gt_batch b;
} batch_fx;

static void batch_make(batch_fx *x, int n, const char *const *ov, uint64_t seed) {
  uint64_t s = gt_test_model_random(&x->f.m, &x->f.cfg, &x->f.mem, n, ov, seed, 1);
  int B = (int)gt_config_global_batch(&x->f.cfg), T = (int)x->f.cfg.max_target_length;
  x->in = malloc(sizeof(int32_t) * (size_t)(B * T));
  x->tg = malloc(sizeof(int32_t) * (size_t)(B * T));
  x->pos = malloc(sizeof(int32_t) * (size_t)(B * T));
  gt_test_fill_ids(x->in, B * T, &s, 0, x->f.m.vocab);
  gt_test_fill_ids(x->tg, B * T, &s, 0, x->f.m.vocab);
  for (int i = 0; i < B * T; i++) x->pos[i] = i % T;
  x->tg[1] = -1;
  x->b = (gt_batch){B, T, x->in, x->tg, x->pos, NULL};
}

static void batch_free(batch_fx *x) {
  free(x->in);
  free(x->tg);
  free(x->pos);
  model_free(&x->f);
}

static gt_loss_stats loss_of(batch_fx *x) {
  gt_loss_stats st = {0};
  gt_err e;
  ck_assert_msg(gt_exec_forward_loss(&x->f.m, &x->b, 1, &st, &e) == GT_OK, "%s", e.msg);
  return st;
}

static gt_loss_stats grads_of(batch_fx *x, int tiles) {
  gt_loss_stats st = {0};
  gt_err e;
  gt_model_zero_grads(&x->f.m);
  const int64_t tw = gt_batch_total_weights(&x->b);
  ck_assert_msg(gt_exec_forward_backward(&x->f.m, &x->b, tiles, 1.0f / (float)tw, &st, &e) == GT_OK, "%s", e.msg);
  return st;
}

/* The gradient of the step's loss (xent_sum / total_weights, the z-loss in
 * it) along a random direction and at the largest entry of each tensor,
 * against central differences of the float32 loss. */
static void check_model_fd(int n, const char *const *ov) {
  batch_fx x;
  batch_make(&x, n, ov, 7);
  gt_model *m = &x.f.m;
  gt_loss_stats st = grads_of(&x, 1);
  const double tw = (double)st.total_weights;
  ck_assert_msg(st.z_sum > 0.05 * st.xent_sum, "z term %g of %g: too small to test", st.z_sum, st.xent_sum);
  const int64_t P = m->n_params;
  float *g = gt_test_copy(m->grads, P), *p0 = gt_test_copy(m->params, P), *dir = gt_test_zeros(P);
  uint64_t s = 99;
  gt_test_fill(dir, P, &s, -1, 1);
  double gd = 0;
  for (int64_t i = 0; i < P; i++) gd += (double)g[i] * dir[i];
  const double h = 2e-3;
  for (int64_t i = 0; i < P; i++) m->params[i] = p0[i] + (float)h * dir[i];
  const double lp = loss_of(&x).xent_sum / tw;
  for (int64_t i = 0; i < P; i++) m->params[i] = p0[i] - (float)h * dir[i];
  const double lm = loss_of(&x).xent_sum / tw;
  memcpy(m->params, p0, sizeof(float) * (size_t)P);
  const double fd = (lp - lm) / (2 * h);
  ck_assert_msg(fabs(fd - gd) <= 0.02 * fabs(gd) + 1e-4, "directional: fd %.6g vs analytic %.6g", fd, gd);
  int checked = 0;
  for (int t = 0; t < m->n_tensors; t++) {
    const gt_tensor_info *ti = &m->tensors[t];
    int64_t best = ti->offset;
    for (int64_t i = ti->offset; i < ti->offset + ti->numel; i++)
      if (fabsf(g[i]) > fabsf(g[best])) best = i;
    if (fabsf(g[best]) < 1e-3f) continue;
    const double hh = 3e-3;
    m->params[best] = p0[best] + (float)hh;
    const double a = loss_of(&x).xent_sum / tw;
    m->params[best] = p0[best] - (float)hh;
    const double b = loss_of(&x).xent_sum / tw;
    m->params[best] = p0[best];
    const double fde = (a - b) / (2 * hh);
    ck_assert_msg(fabs(fde - g[best]) <= 0.05 * fabs(g[best]) + 2e-4, "%s[%lld]: fd %.6g vs analytic %.6g", ti->name,
                  (long long)(best - ti->offset), fde, g[best]);
    checked++;
  }
  ck_assert_int_ge(checked, m->n_tensors / 2);
  free(g);
  free(p0);
  free(dir);
  batch_free(&x);
}

START_TEST(test_model_fd) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=8", "per_device_batch_size=2",
                      "layer_pattern=LG", "base_num_decoder_layers=2", "z_loss_multiplier=0.2"};
  check_model_fd(6, ov);
}
END_TEST

START_TEST(test_model_fd_softcap) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=8", "per_device_batch_size=1",
                      "layer_pattern=LG", "base_num_decoder_layers=2", "final_logits_soft_cap=3",
                      "z_loss_multiplier=0.2"};
  check_model_fd(7, ov);
}
END_TEST

/* The z sum of a model's loss against float64 z lse^2 of the logits the
 * loss saw (gt_exec_forward_logits: after the cap; bf16-rounded in bf16). */
static void check_z_sum_of_logits(const char *dtype) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2",
                      "base_num_decoder_layers=2", "layer_pattern=LG", "final_logits_soft_cap=5",
                      "z_loss_multiplier=0.01", dtype};
  batch_fx x;
  batch_make(&x, 8, ov, 21);
  const int64_t N = (int64_t)x.b.B * x.b.T, V = x.f.m.vocab;
  float *logits = gt_test_zeros(N * V);
  gt_err e;
  ck_assert_msg(gt_exec_forward_logits(&x.f.m, &x.b, logits, &e) == GT_OK, "%s", e.msg);
  double zr = 0, xr = 0;
  for (int64_t r = 0; r < N; r++) {
    if (x.tg[r] < 0) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, logits[r * V + v]);
    for (int64_t v = 0; v < V; v++) s += exp(logits[r * V + v] - mx);
    const double lse = mx + log(s);
    zr += (double)x.f.m.z_loss * lse * lse;
    xr += lse - logits[r * V + x.tg[r]] + (double)x.f.m.z_loss * lse * lse;
  }
  gt_loss_stats st = loss_of(&x), sb = grads_of(&x, 4);
  char what[96];
  snprintf(what, sizeof what, "%s: z sum vs the logits' float64", dtype);
  gt_test_check_err(what, fabs(st.z_sum - zr) / zr, 1e-6);
  gt_test_check_err(what, fabs(sb.z_sum - zr) / zr, 1e-6);
  snprintf(what, sizeof what, "%s: loss (z included) vs the logits' float64", dtype);
  gt_test_check_err(what, fabs(st.xent_sum - xr) / xr, 1e-6);
  free(logits);
  batch_free(&x);
}

START_TEST(test_z_sum_of_logits) { check_z_sum_of_logits("dtype=float32"); }
END_TEST

START_TEST(test_z_sum_of_logits_bf16) { check_z_sum_of_logits("dtype=bfloat16"); }
END_TEST

/* Remat recomputes the layers, never the head: the same bits. */
START_TEST(test_remat_same_bits) {
  const char *pol[] = {"remat_policy=none", "remat_policy=full"};
  float *g[2];
  gt_loss_stats st[2];
  int64_t P = 0;
  for (int i = 0; i < 2; i++) {
    const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2",
                        "base_num_decoder_layers=2", "layer_pattern=LG", "z_loss_multiplier=0.01", pol[i]};
    batch_fx x;
    batch_make(&x, 7, ov, 31);
    st[i] = grads_of(&x, 2);
    P = x.f.m.n_params;
    g[i] = gt_test_copy(x.f.m.grads, P);
    batch_free(&x);
  }
  ck_assert(st[0].z_sum > 0);
  ck_assert(st[0].xent_sum == st[1].xent_sum && st[0].z_sum == st[1].z_sum);
  ck_assert_msg(gt_test_same_bits(g[0], g[1], P), "remat full: other gradient bits");
  free(g[0]);
  free(g[1]);
}
END_TEST

/* Multiplier 0 is off: no z sum, and the loss and gradient bits of a model
 * that never had the term (a model built with z > 0 and then set to 0 runs
 * the same as one built with 0: the multiplier is the term's only state). */
START_TEST(test_zero_is_off) {
  float *g[3];
  gt_loss_stats st[3];
  int64_t P = 0;
  const char *zk[] = {"z_loss_multiplier=0", "z_loss_multiplier=0.5", "z_loss_multiplier=0.5"};
  for (int i = 0; i < 3; i++) {
    const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2",
                        "base_num_decoder_layers=2", "layer_pattern=LG", "final_logits_soft_cap=5", zk[i]};
    batch_fx x;
    batch_make(&x, 7, ov, 51);
    if (i == 2) x.f.m.z_loss = 0.0f;
    st[i] = grads_of(&x, 2);
    P = x.f.m.n_params;
    g[i] = gt_test_copy(x.f.m.grads, P);
    batch_free(&x);
  }
  ck_assert(st[0].z_sum == 0.0 && st[2].z_sum == 0.0 && st[1].z_sum > 0.0);
  ck_assert(st[0].xent_sum == st[2].xent_sum);
  ck_assert(gt_test_same_bits(g[0], g[2], P));
  /* and the term is there at 0.5: the loss grew by exactly its sum */
  ck_assert_msg(fabs(st[1].xent_sum - st[1].z_sum - st[0].xent_sum) <= 1e-9 * st[0].xent_sum, "%.17g - %.17g vs %.17g",
                st[1].xent_sum, st[1].z_sum, st[0].xent_sum);
  ck_assert(!gt_test_same_bits(g[0], g[1], P));
  for (int i = 0; i < 3; i++) free(g[i]);
}
END_TEST

/* ---------- the mesh ---------- */

typedef struct {
  double loss[4], z[4];
  gt_loss_stats eval; /* an eval pass over the next batch after the steps */
  float *params;
  int64_t n;
} run;

static run train_mesh(int devices, const char *z, const char *dtype, int steps) {
  char nd[64], pd[64];
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", 4 / devices);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "max_target_length=16", "learning_rate=0.01",
                      "base_num_decoder_layers=2", "layer_pattern=LG", "final_logits_soft_cap=5", nd, pd, z, dtype};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 11, ov, &e) == GT_OK, "%s", e.msg);
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, &c, &host, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK, "%s", e.msg);
  run r;
  memset(&r, 0, sizeof r);
  for (int s = 0; s < steps; s++) {
    gt_batch b;
    gt_data_next_train(&d, &b);
    gt_mesh_step_info fi;
    ck_assert_msg(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = fi.loss;
    r.z[s] = fi.z_loss;
  }
  gt_batch b;
  gt_data_next_train(&d, &b);
  ck_assert_msg(gt_fsdp_eval(f, &b, 1, &r.eval, &e) == GT_OK, "%s", e.msg);
  r.n = gt_fsdp_num_params(f);
  r.params = malloc(sizeof(float) * (size_t)r.n);
  ck_assert(gt_fsdp_full_params(f, r.params, &e) == GT_OK);
  gt_fsdp_destroy(f);
  gt_data_close(&d);
  return r;
}

static void check_devices(const char *dtype, double tol) {
  const int steps = 4;
  run one = train_mesh(1, "z_loss_multiplier=0.02", dtype, steps);
  run two = train_mesh(2, "z_loss_multiplier=0.02", dtype, steps);
  run off = train_mesh(1, "z_loss_multiplier=0", dtype, 1);
  for (int s = 0; s < steps; s++) {
    ck_assert_msg(one.z[s] > 0.05 * one.loss[s], "step %d: z %g of %g", s, one.z[s], one.loss[s]);
    ck_assert_msg(fabs(two.loss[s] - one.loss[s]) <= tol * one.loss[s], "%s step %d: loss %.9g vs %.9g", dtype, s,
                  two.loss[s], one.loss[s]);
    ck_assert_msg(fabs(two.z[s] - one.z[s]) <= tol * one.z[s], "%s step %d: z_loss %.9g vs %.9g", dtype, s, two.z[s],
                  one.z[s]);
  }
  ck_assert_msg(off.z[0] == 0.0 && off.eval.z_sum == 0.0, "z off: z_loss %g", off.z[0]);
  /* eval: the z sum reduced over the devices too, and in the eval loss */
  ck_assert_msg(one.eval.z_sum > 0.05 * one.eval.xent_sum, "eval z sum %g of %g", one.eval.z_sum, one.eval.xent_sum);
  ck_assert_msg(fabs(two.eval.z_sum - one.eval.z_sum) <= tol * one.eval.z_sum, "%s eval z sum %.9g vs %.9g", dtype,
                two.eval.z_sum, one.eval.z_sum);
  ck_assert_msg(fabs(two.eval.xent_sum - one.eval.xent_sum) <= tol * one.eval.xent_sum, "%s eval loss sum %.9g vs %.9g",
                dtype, two.eval.xent_sum, one.eval.xent_sum);
  /* the first step's parameters are the same: the loss is the one without plus the z part */
  ck_assert_msg(fabs(one.loss[0] - one.z[0] - off.loss[0]) <= 1e-6 * off.loss[0], "%.9g - %.9g vs %.9g", one.loss[0],
                one.z[0], off.loss[0]);
  const double err = gt_test_norm_rel_err(two.params, one.params, one.n);
  ck_assert_msg(err <= tol, "%s: final weights differ by %.3g", dtype, err);
  free(one.params);
  free(two.params);
  free(off.params);
}

START_TEST(test_devices_agree) { check_devices("dtype=float32", 1e-5); }
END_TEST

START_TEST(test_devices_agree_bf16) { check_devices("dtype=bfloat16", 5e-4); }
END_TEST

static Suite *zloss_suite(void) {
  Suite *s = suite_create("zloss");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_kernel_vs_fd);
  tcase_add_test(tc, test_kernel_vs_ref);
  tcase_add_test(tc, test_head_tiles_vs_reference);
  tcase_add_test(tc, test_head_tiles_vs_reference_softcap);
  tcase_add_test(tc, test_head_reference_without_z);
  tcase_add_test(tc, test_model_fd);
  tcase_add_test(tc, test_model_fd_softcap);
  tcase_add_test(tc, test_z_sum_of_logits);
  tcase_add_test(tc, test_z_sum_of_logits_bf16);
  tcase_add_test(tc, test_remat_same_bits);
  tcase_add_test(tc, test_zero_is_off);
  tcase_add_test(tc, test_devices_agree);
  tcase_add_test(tc, test_devices_agree_bf16);
  return s;
}

int main(void) { return gt_test_run_suite(zloss_suite(), 0); }
