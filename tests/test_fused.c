/* Fused elementwise sweeps (kernels/norm_rope.c, gt_geglu_forward_rnd):
 *  - each gives the SAME BITS as the unfused fast kernels run in sequence
 *    (so a remat recompute, which may run either, and the recorded losses do
 *    not change), over awkward sizes and sizes that take the threaded path,
 *    with outputs that start as NaN (written, never read);
 *  - each agrees with its scalar reference (kernels/norm_rope_ref.c) to
 *    float rounding, or to one bf16 step where it rounds;
 *  - the bits do not depend on the thread count. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "gt_testutil.h"
#include "kernels/bf16.h"
#include "kernels/bf16_row.h"
#include "kernels/kernels.h"

#define TOL_REF 2e-6
/* a bf16 rounding of one side can move a value by 2^-8 of itself, and a value
 * near a rounding boundary may round the other way on the other side */
#define TOL_REF_BF16 8e-3

static const float gt__off[3] = {1.0f, 0.0f, 0.0f};
static const char *gt__wname[3] = {"w_offset=1", "w_offset=0", "w=NULL"};

static float *gt__weight(int variant, int dim, uint64_t *seed) {
  return variant == 2 ? NULL : gt_test_alloc_fill(dim, seed, -0.5f, 0.5f);
}

static float *gt__nans(int64_t n) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}

/* the tolerance against the reference */
static double gt__tol(int rnd) { return rnd ? TOL_REF_BF16 : TOL_REF; }

/* ---------- the in-loop rounding ---------- */

/* gt__bf16_round1_nb (branch-free, vectorized inside the fused loops) against
 * gt_bf16_round1 on every top half with the low halves around the tie
 * (0x7fff, 0x8000, 0x8001), the extremes and a random one: every exponent,
 * both signs, denormals, infinities and NaNs (quiet and signalling). */
START_TEST(test_round_nb_bits) {
  static const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  uint64_t seed = 40;
  for (uint32_t hi = 0; hi < 65536u; hi++)
    for (size_t k = 0; k <= sizeof lows / sizeof lows[0]; k++) {
      const uint32_t lo = k < sizeof lows / sizeof lows[0] ? lows[k] : (uint32_t)(gt_test_rand_u64(&seed) & 0xffffu);
      const uint32_t u = hi << 16 | lo;
      float x, a, b;
      memcpy(&x, &u, 4);
      a = gt__bf16_round1_nb(x);
      b = gt_bf16_round1(x);
      ck_assert_msg(!memcmp(&a, &b, 4), "bits 0x%08x: branch-free rounding differs from gt_bf16_round1", u);
    }
}
END_TEST

/* ---------- q/k norm + RoPE ---------- */

static const int gt__hds[] = {2, 5, 33, 64, 128};
static const int64_t gt__ntoks[] = {0, 1, 3, 17, 700};
#define GT__P 64 /* table positions */

/* RoPE tables for head_dim hd (at least one column: hd 1 rotates nothing) */
static void gt__rope_tables(int hd, float **ct, float **st) {
  const int cols = hd / 2 > 0 ? hd / 2 : 1;
  *ct = gt_test_zeros(GT__P * cols), *st = gt_test_zeros(GT__P * cols);
  gt_rope_table_fill(*ct, *st, GT__P, hd, 10000.0, 1.0, 1.0);
}

/* One q/k norm case's inputs: T positions below GT__P, x of T * H row-heads
 * of hd in [-2, 2] and the weight of variant, drawn in that order. */
static void gt__rope_inputs(int64_t T, int H, int hd, int variant, uint64_t *seed, int32_t **pos, float **x,
                            float **w) {
  *pos = malloc((size_t)(T > 0 ? T : 1) * sizeof(int32_t));
  gt_test_fill_ids(*pos, T, seed, 0, GT__P);
  *x = gt_test_alloc_fill(T * H * hd, seed, -2, 2), *w = gt__weight(variant, hd, seed);
}

START_TEST(test_rmsnorm_rope_forward_vs_unfused_and_ref) {
  uint64_t seed = 41;
  const float eps = 1e-6f;
  for (size_t hi = 0; hi < sizeof gt__hds / sizeof gt__hds[0]; hi++) {
    const int hd = gt__hds[hi];
    float *ct, *st;
    gt__rope_tables(hd, &ct, &st);
    for (size_t ti = 0; ti < sizeof gt__ntoks / sizeof gt__ntoks[0]; ti++)
      for (int H = 1; H <= 3; H += 2)
        for (int variant = 0; variant < 3; variant++)
          for (int rnd = 0; rnd < 2; rnd++) {
            const int64_t T = gt__ntoks[ti], rows = T * H, n = rows * hd;
            const float off = gt__off[variant];
            char what[160];
            int32_t *pos;
            float *x, *w;
            gt__rope_inputs(T, H, hd, variant, &seed, &pos, &x, &w);
            float *o = gt__nans(n), *rs = gt__nans(rows);
            gt_rmsnorm_rope_forward(o, rs, x, w, pos, ct, st, T, H, hd, eps, off, rnd);
            /* unfused: norm, rotate, round */
            float *uo = gt_test_zeros(n), *urs = gt_test_zeros(rows);
            gt_rmsnorm_forward(uo, urs, x, w, rows, hd, eps, off);
            gt_rope_forward(uo, pos, ct, st, T, H, hd);
            if (rnd) gt_bf16_round(uo, n);
            snprintf(what, sizeof what, "norm+rope fwd hd=%d T=%ld H=%d %s round=%d: the unfused bits", hd, (long)T, H,
                     gt__wname[variant], rnd);
            ck_assert_msg(gt_test_same_bits(o, uo, n) && gt_test_same_bits(rs, urs, rows), "%s", what);
            float *ro = gt_test_zeros(n), *rrs = gt_test_zeros(rows);
            gt_rmsnorm_rope_forward_ref(ro, rrs, x, w, pos, ct, st, T, H, hd, eps, off, rnd);
            snprintf(what, sizeof what, "norm+rope fwd vs ref hd=%d T=%ld H=%d %s round=%d", hd, (long)T, H,
                     gt__wname[variant], rnd);
            gt_test_check_err(what, gt_test_scaled_err(o, ro, n), gt__tol(rnd));
            gt_test_check_err(what, gt_test_scaled_err(rs, rrs, rows), TOL_REF);
            free(pos); free(x); free(w); free(o); free(rs); free(uo); free(urs); free(ro); free(rrs);
          }
    free(ct); free(st);
  }
}
END_TEST

START_TEST(test_rope_rmsnorm_backward_vs_unfused_and_ref) {
  uint64_t seed = 42;
  for (size_t hi = 0; hi < sizeof gt__hds / sizeof gt__hds[0]; hi++) {
    const int hd = gt__hds[hi];
    float *ct, *st;
    gt__rope_tables(hd, &ct, &st);
    for (size_t ti = 0; ti < sizeof gt__ntoks / sizeof gt__ntoks[0]; ti++)
      for (int H = 1; H <= 3; H += 2)
        for (int variant = 0; variant < 3; variant++) {
          const int64_t T = gt__ntoks[ti], rows = T * H, n = rows * hd;
          const float off = gt__off[variant];
          char what[160];
          int32_t *pos;
          float *x, *w;
          gt__rope_inputs(T, H, hd, variant, &seed, &pos, &x, &w);
          float *rs = gt_test_zeros(rows), *tmp = gt_test_zeros(n);
          gt_rmsnorm_forward(tmp, rs, x, w, rows, hd, 1e-6f, off);
          float *dout = gt_test_alloc_fill(n, &seed, -1, 1), *dw0 = gt_test_alloc_fill(hd, &seed, -1, 1);
          /* fused: dx written over NaN, dw added to, dout rotated back in place */
          float *fd = gt_test_copy(dout, n), *dx = gt__nans(n), *dw = w ? gt_test_copy(dw0, hd) : NULL;
          gt_rope_rmsnorm_backward(dx, dw, fd, x, rs, w, pos, ct, st, T, H, hd, off);
          float *ud = gt_test_copy(dout, n), *udx = gt__nans(n), *udw = w ? gt_test_copy(dw0, hd) : NULL;
          gt_rope_backward(ud, pos, ct, st, T, H, hd);
          gt_rmsnorm_residual_backward(udx, udw, NULL, ud, x, rs, w, rows, hd, off, 0);
          snprintf(what, sizeof what, "rope+norm bwd hd=%d T=%ld H=%d %s: the unfused bits", hd, (long)T, H,
                   gt__wname[variant]);
          ck_assert_msg(gt_test_same_bits(dx, udx, n) && gt_test_same_bits(fd, ud, n), "%s", what);
          if (w) ck_assert_msg(gt_test_same_bits(dw, udw, hd), "%s (dw)", what);
          float *rd = gt_test_copy(dout, n), *rdx = gt__nans(n), *rdw = w ? gt_test_copy(dw0, hd) : NULL;
          gt_rope_rmsnorm_backward_ref(rdx, rdw, rd, x, rs, w, pos, ct, st, T, H, hd, off);
          snprintf(what, sizeof what, "rope+norm bwd vs ref hd=%d T=%ld H=%d %s", hd, (long)T, H, gt__wname[variant]);
          gt_test_check_err(what, gt_test_scaled_err(dx, rdx, n), TOL_REF);
          if (w) gt_test_check_err(what, gt_test_scaled_err(dw, rdw, hd), TOL_REF);
          /* no dx: the weight gradient alone, from the rotated-back dout */
          if (w) {
            float *fd2 = gt_test_copy(dout, n), *dw2 = gt_test_copy(dw0, hd);
            gt_rope_rmsnorm_backward(NULL, dw2, fd2, x, rs, w, pos, ct, st, T, H, hd, off);
            ck_assert_msg(gt_test_same_bits(dw2, udw, hd) && gt_test_same_bits(fd2, ud, n), "%s (dx NULL)", what);
            free(fd2); free(dw2);
          }
          free(pos); free(x); free(w); free(rs); free(tmp); free(dout); free(dw0); free(fd); free(dx); free(dw);
          free(ud); free(udx); free(udw); free(rd); free(rdx); free(rdw);
        }
    free(ct); free(st);
  }
}
END_TEST

/* ---------- RMSNorm (plain, with the residual) and GeGLU, rounded ---------- */

/* The norms' cases: row counts (none, one, odd, the threaded path) by row
 * widths (vector tails) by weight variants (gt__off); index s: rows s / 12,
 * width s / 3 % 4, variant s % 3. The inputs: x and res in [-2, 2] and the
 * two norms' weights, drawn in that order. */
static const int64_t gt__norm_rows[] = {0, 1, 3, 17, 1000};
static const int gt__norm_dims[] = {1, 5, 33, 257};
#define GT__NORM_CASES 60
typedef struct gt__norm_case {
  int64_t rows, n;
  int dim, variant;
  float off;
  float *x, *res, *w, *w2;
} gt__norm_case;

static gt__norm_case gt__norm_case_new(int s, uint64_t *seed) {
  gt__norm_case c = {.rows = gt__norm_rows[s / 12], .dim = gt__norm_dims[s / 3 % 4], .variant = s % 3};
  c.n = c.rows * c.dim, c.off = gt__off[c.variant];
  c.x = gt_test_alloc_fill(c.n, seed, -2, 2), c.res = gt_test_alloc_fill(c.n, seed, -2, 2);
  c.w = gt__weight(c.variant, c.dim, seed), c.w2 = gt__weight(c.variant, c.dim, seed);
  return c;
}

static void gt__norm_case_free(gt__norm_case *c) { free(c->x), free(c->res), free(c->w), free(c->w2); }

START_TEST(test_rmsnorm_rnd_vs_unfused_and_ref) {
  uint64_t seed = 43;
  const float eps = 1e-6f;
  for (int si = 0; si < GT__NORM_CASES; si++)
    for (int rnd = 0; rnd < 2; rnd++) {
      gt__norm_case c = gt__norm_case_new(si, &seed);
      const int64_t rows = c.rows, n = c.n;
      const int dim = c.dim, variant = c.variant;
      const float off = c.off, *x = c.x, *res = c.res, *w = c.w, *w2 = c.w2;
      char what[160];
      /* plain norm */
      float *o = gt__nans(n), *rs = gt__nans(rows), *uo = gt_test_zeros(n), *urs = gt_test_zeros(rows);
      gt_rmsnorm_forward_rnd(o, rs, x, w, rows, dim, eps, off, rnd);
      gt_rmsnorm_forward(uo, urs, x, w, rows, dim, eps, off);
      if (rnd) gt_bf16_round(uo, n);
      snprintf(what, sizeof what, "rmsnorm rnd rows=%ld dim=%d %s round=%d", (long)rows, dim, gt__wname[variant], rnd);
      ck_assert_msg(gt_test_same_bits(o, uo, n) && gt_test_same_bits(rs, urs, rows), "%s: the unfused bits", what);
      float *ro = gt_test_zeros(n), *rrs = gt_test_zeros(rows);
      gt_rmsnorm_forward_rnd_ref(ro, rrs, x, w, rows, dim, eps, off, rnd);
      gt_test_check_err(what, gt_test_scaled_err(o, ro, n), gt__tol(rnd));
      /* with the residual, with and without the next norm */
      for (int with2 = 0; with2 < 2; with2++) {
        float *x1 = gt__nans(n), *r1 = gt__nans(rows), *o2 = with2 ? gt__nans(n) : NULL;
        float *r2 = with2 ? gt__nans(rows) : NULL;
        gt_rmsnorm_residual_forward_rnd(x1, r1, o2, r2, res, x, w, with2 ? w2 : NULL, rows, dim, eps, off, rnd);
        float *ux1 = gt_test_zeros(n), *ur1 = gt_test_zeros(rows), *uo2 = with2 ? gt_test_zeros(n) : NULL;
        float *ur2 = with2 ? gt_test_zeros(rows) : NULL;
        gt_rmsnorm_residual_forward(ux1, ur1, uo2, ur2, res, x, w, with2 ? w2 : NULL, rows, dim, eps, off);
        if (rnd) {
          gt_bf16_round(ux1, n);
          if (with2) gt_bf16_round(uo2, n);
        }
        snprintf(what, sizeof what, "rmsnorm+residual rnd rows=%ld dim=%d %s round=%d out2=%d", (long)rows, dim,
                 gt__wname[variant], rnd, with2);
        ck_assert_msg(gt_test_same_bits(x1, ux1, n) && gt_test_same_bits(r1, ur1, rows), "%s: the unfused bits", what);
        if (with2)
          ck_assert_msg(gt_test_same_bits(o2, uo2, n) && gt_test_same_bits(r2, ur2, rows), "%s: the unfused bits (out2)",
                        what);
        float *rx1 = gt_test_zeros(n), *rr1 = gt_test_zeros(rows), *ro2 = with2 ? gt_test_zeros(n) : NULL;
        float *rr2 = with2 ? gt_test_zeros(rows) : NULL;
        gt_rmsnorm_residual_forward_rnd_ref(rx1, rr1, ro2, rr2, res, x, w, with2 ? w2 : NULL, rows, dim, eps, off, rnd);
        gt_test_check_err(what, gt_test_scaled_err(x1, rx1, n), gt__tol(rnd));
        if (with2) gt_test_check_err(what, gt_test_scaled_err(o2, ro2, n), gt__tol(rnd));
        free(x1); free(r1); free(o2); free(r2); free(ux1); free(ur1); free(uo2); free(ur2);
        free(rx1); free(rr1); free(ro2); free(rr2);
      }
      gt__norm_case_free(&c);
      free(o); free(rs); free(uo); free(urs); free(ro); free(rrs);
    }
}
END_TEST

START_TEST(test_geglu_rnd_vs_unfused_and_ref) {
  /* chunk edges (1024), vector tails (16) and the threaded path */
  const int64_t ns[] = {0, 1, 15, 17, 1023, 1024, 1025, 4097, 100003};
  uint64_t seed = 44;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (int rnd = 0; rnd < 2; rnd++) {
      const int64_t n = ns[a];
      char what[96];
      float *g = gt_test_alloc_fill(n, &seed, -6, 6), *u = gt_test_alloc_fill(n, &seed, -2, 2);
      /* values whose products are denormal or huge, and a NaN: the rounding
       * keeps denormals and quiets NaNs the same way in both forms */
      if (n > 8) {
        g[0] = 1e-20f, u[0] = 1e-20f;
        g[1] = 3e18f, u[1] = 3e18f;
        g[2] = NAN;
        g[3] = -0.0f;
        u[4] = 1e-38f;
      }
      float *o = gt__nans(n), *uo = gt_test_zeros(n), *ro = gt_test_zeros(n);
      gt_geglu_forward_rnd(o, g, u, n, rnd);
      gt_geglu_forward(uo, g, u, n);
      if (rnd) gt_bf16_round(uo, n);
      snprintf(what, sizeof what, "geglu rnd n=%ld round=%d", (long)n, rnd);
      ck_assert_msg(gt_test_same_bits(o, uo, n), "%s: the unfused bits", what);
      if (n > 8) /* the reference without the NaN */
        g[2] = 0.5f, gt_geglu_forward_rnd(o, g, u, n, rnd);
      gt_geglu_forward_rnd_ref(ro, g, u, n, rnd);
      gt_test_check_err(what, gt_test_scaled_err(o, ro, n), rnd ? TOL_REF_BF16 : 1e-5);
      free(g); free(u); free(o); free(uo); free(ro);
    }
}
END_TEST

static uint16_t *gt__h16(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(uint16_t)); }

START_TEST(test_geglu_pack_vs_unfused_and_ref) {
  /* gt_geglu_forward_pack: forward_rnd then gt_bf16_pack of out, gate and
   * up, bit for bit, each copy alone or with the others; gate and up as the
   * executor has them (bf16 values) and as any floats (the pack rounds).
   * Chunk edges (512), vector tails and the threaded path. */
  const int64_t ns[] = {0, 1, 15, 17, 511, 512, 513, 4097, 100003};
  uint64_t seed = 46;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (int rounded = 0; rounded < 2; rounded++)
      for (int which = 1; which < 8; which++) {
        const int64_t n = ns[a];
        char what[96];
        snprintf(what, sizeof what, "geglu pack n=%ld rounded=%d copies=%d", (long)n, rounded, which);
        float *g = gt_test_alloc_fill(n, &seed, -6, 6), *u = gt_test_alloc_fill(n, &seed, -2, 2);
        if (n > 8) g[0] = 1e-20f, u[0] = 1e-20f, g[1] = NAN, g[2] = -0.0f, u[3] = 1e-38f, u[4] = INFINITY;
        if (rounded) gt_bf16_round(g, n), gt_bf16_round(u, n);
        uint16_t *o16 = which & 1 ? gt__h16(n) : NULL, *g16 = which & 2 ? gt__h16(n) : NULL;
        uint16_t *u16 = which & 4 ? gt__h16(n) : NULL;
        float *o = gt__nans(n), *uo = gt_test_zeros(n);
        gt_geglu_forward_pack(o, o16, g16, u16, g, u, n);
        gt_geglu_forward_rnd(uo, g, u, n, 1);
        ck_assert_msg(gt_test_same_bits(o, uo, n), "%s: the output", what);
        uint16_t *want = gt__h16(n);
        const float *src[3] = {uo, g, u};
        uint16_t *got[3] = {o16, g16, u16};
        for (int k = 0; k < 3; k++) {
          if (!got[k]) continue;
          gt_bf16_pack(want, src[k], n);
          ck_assert_msg(n == 0 || !memcmp(got[k], want, (size_t)n * sizeof(uint16_t)), "%s: copy %d", what, k);
        }
        /* the reference: the references' sequence, within forward_rnd's bound
         * (scaled by the largest value: over more than a few elements) */
        if (n > 8) g[1] = 0.5f, u[4] = 2.0f; /* no NaN or infinity */
        float *ro = gt_test_zeros(n);
        uint16_t *r16[3] = {o16 ? gt__h16(n) : NULL, g16 ? gt__h16(n) : NULL, u16 ? gt__h16(n) : NULL};
        gt_geglu_forward_pack(o, o16, g16, u16, g, u, n);
        gt_geglu_forward_pack_ref(ro, r16[0], r16[1], r16[2], g, u, n);
        if (n > 8) gt_test_check_err(what, gt_test_scaled_err(o, ro, n), TOL_REF_BF16);
        for (int k = 1; k < 3; k++) /* the inputs' copies are exact in both */
          if (got[k]) ck_assert_msg(n == 0 || !memcmp(got[k], r16[k], (size_t)n * sizeof(uint16_t)), "%s: ref copy %d", what, k);
        free(g); free(u); free(o16); free(g16); free(u16); free(o); free(uo); free(want); free(ro);
        for (int k = 0; k < 3; k++) free(r16[k]);
      }
}
END_TEST

START_TEST(test_geglu_from_b16_vs_pack_and_ref) {
  /* gt_geglu_forward_b16 (gate and up only in bf16, as gt_bgemm_c16 writes
   * them): the output and its copy are gt_geglu_forward_pack's from the
   * widened inputs, bit for bit, with out, out16 or both; special values
   * (denormal products, NaN, -0, infinity) included; chunk edges (512),
   * vector tails and the threaded path. The reference's sequence within
   * forward_rnd's bound. */
  const int64_t ns[] = {0, 1, 15, 17, 511, 512, 513, 4097, 100003};
  uint64_t seed = 48;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (int which = 1; which < 4; which++) {
      const int64_t n = ns[a];
      char what[96];
      snprintf(what, sizeof what, "geglu from b16 n=%ld outputs=%d", (long)n, which);
      float *g = gt_test_alloc_fill(n, &seed, -6, 6), *u = gt_test_alloc_fill(n, &seed, -2, 2);
      if (n > 8) g[0] = 1e-20f, u[0] = 1e-20f, g[1] = NAN, g[2] = -0.0f, u[3] = 1e-38f, u[4] = INFINITY;
      uint16_t *g16 = gt__h16(n), *u16 = gt__h16(n);
      gt_bf16_pack(g16, g, n);
      gt_bf16_pack(u16, u, n);
      gt_bf16_unpack(g, g16, n); /* the floats the copies hold */
      gt_bf16_unpack(u, u16, n);
      float *o = which & 1 ? gt__nans(n) : NULL, *eo = gt__nans(n);
      uint16_t *o16 = which & 2 ? gt__h16(n) : NULL, *e16 = gt__h16(n);
      gt_geglu_forward_b16(o, o16, g16, u16, n);
      gt_geglu_forward_pack(eo, e16, NULL, NULL, g, u, n);
      if (o) ck_assert_msg(gt_test_same_bits(o, eo, n), "%s: the output", what);
      if (o16) ck_assert_msg(n == 0 || !memcmp(o16, e16, (size_t)n * sizeof(uint16_t)), "%s: the copy", what);
      if (n > 8) {
        g16[1] = gt_f32_to_bf16(0.5f), u16[4] = gt_f32_to_bf16(2.0f); /* no NaN or infinity */
        float *ro = gt_test_zeros(n), *fo = gt__nans(n);
        gt_geglu_forward_b16(fo, NULL, g16, u16, n);
        gt_geglu_forward_b16_ref(ro, NULL, g16, u16, n);
        gt_test_check_err(what, gt_test_scaled_err(fo, ro, n), TOL_REF_BF16);
        free(ro), free(fo);
      }
      free(g); free(u); free(g16); free(u16); free(o); free(eo); free(o16); free(e16);
    }
}
END_TEST

START_TEST(test_geglu_backward_b16_vs_unpacked_and_ref) {
  /* gate and up read from bf16 copies: the bits of unpacking them and
   * running gt_geglu_backward_write, with either gradient alone; both
   * gradients written as bf16 patterns (gt_geglu_backward_b16_to_b16): the
   * float gradients' patterns; and the reference's sequence within its
   * bound */
  const int64_t ns[] = {0, 1, 15, 17, 1025, 4097, 100003};
  uint64_t seed = 47;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (int want = 1; want < 4; want++) {
      const int64_t n = ns[a];
      char what[96];
      snprintf(what, sizeof what, "geglu backward b16 n=%ld grads=%d", (long)n, want);
      float *g = gt_test_alloc_fill(n, &seed, -6, 6), *u = gt_test_alloc_fill(n, &seed, -2, 2);
      float *dout = gt_test_alloc_fill(n, &seed, -1, 1);
      uint16_t *g16 = gt__h16(n), *u16 = gt__h16(n);
      gt_bf16_pack(g16, g, n);
      gt_bf16_pack(u16, u, n);
      float *gw = gt_test_zeros(n), *uw = gt_test_zeros(n);
      gt_bf16_unpack(gw, g16, n);
      gt_bf16_unpack(uw, u16, n);
      float *dg = want & 1 ? gt__nans(n) : NULL, *du = want & 2 ? gt__nans(n) : NULL;
      float *edg = want & 1 ? gt__nans(n) : NULL, *edu = want & 2 ? gt__nans(n) : NULL;
      gt_geglu_backward_write_b16(dg, du, dout, g16, u16, n);
      gt_geglu_backward_write(edg, edu, dout, gw, uw, n);
      if (dg) ck_assert_msg(gt_test_same_bits(dg, edg, n), "%s: d(gate)", what);
      if (du) ck_assert_msg(gt_test_same_bits(du, edu, n), "%s: d(up)", what);
      if (dg && du) { /* both wanted only in bf16: the patterns of the same floats */
        uint16_t *dg16 = gt__h16(n), *du16 = gt__h16(n), *w16 = gt__h16(n);
        gt_geglu_backward_b16_to_b16(dg16, du16, dout, g16, u16, n);
        gt_bf16_pack(w16, dg, n);
        ck_assert_msg(n == 0 || !memcmp(dg16, w16, (size_t)n * sizeof(uint16_t)), "%s: d(gate) in bf16", what);
        gt_bf16_pack(w16, du, n);
        ck_assert_msg(n == 0 || !memcmp(du16, w16, (size_t)n * sizeof(uint16_t)), "%s: d(up) in bf16", what);
        if (n > 8) { /* the reference's patterns, within one bf16 step */
          uint16_t *rg16 = gt__h16(n), *ru16 = gt__h16(n);
          float *a = gt_test_zeros(n), *b = gt_test_zeros(n);
          gt_geglu_backward_b16_to_b16_ref(rg16, ru16, dout, g16, u16, n);
          gt_bf16_unpack(a, dg16, n), gt_bf16_unpack(b, rg16, n);
          gt_test_check_err(what, gt_test_scaled_err(a, b, n), TOL_REF_BF16);
          gt_bf16_unpack(a, du16, n), gt_bf16_unpack(b, ru16, n);
          gt_test_check_err(what, gt_test_scaled_err(a, b, n), TOL_REF_BF16);
          free(rg16); free(ru16); free(a); free(b);
        }
        free(dg16); free(du16); free(w16);
      }
      float *rdg = want & 1 ? gt_test_zeros(n) : NULL, *rdu = want & 2 ? gt_test_zeros(n) : NULL;
      gt_geglu_backward_write_b16_ref(rdg, rdu, dout, g16, u16, n);
      if (dg && n > 8) gt_test_check_err(what, gt_test_scaled_err(dg, rdg, n), 1e-5);
      if (du && n > 8) gt_test_check_err(what, gt_test_scaled_err(du, rdu, n), 1e-5);
      free(g); free(u); free(dout); free(g16); free(u16); free(gw); free(uw);
      free(dg); free(du); free(edg); free(edu); free(rdg); free(rdu);
    }
}
END_TEST

static int gt__same16(const uint16_t *a, const uint16_t *b, int64_t n) {
  return n <= 0 || !memcmp(a, b, (size_t)n * sizeof(uint16_t));
}

START_TEST(test_rmsnorm_pack_copy_only) {
  /* The normalised output wanted only as its copy (its readers, the
   * projections, take the copy): gt_rmsnorm_forward_pack with out NULL and
   * gt_rmsnorm_residual_forward_pack with out2 NULL write the same patterns
   * and statistics (and the residual output) as with the float32 outputs,
   * bit for bit; so do the references. */
  uint64_t seed = 49;
  const float eps = 1e-6f;
  for (int si = 0; si < GT__NORM_CASES; si++) {
    gt__norm_case c = gt__norm_case_new(si, &seed);
    const int64_t rows = c.rows, n = c.n;
    const int dim = c.dim;
    char what[128];
    snprintf(what, sizeof what, "copy only rows=%ld dim=%d %s", (long)rows, dim, gt__wname[c.variant]);
    float *o = gt__nans(n), *rs = gt__nans(rows), *rs1 = gt__nans(rows);
    uint16_t *want = gt__h16(n), *got = gt__h16(n);
    gt_rmsnorm_forward_pack(o, want, rs, c.x, NULL, c.w, rows, dim, eps, c.off);
    gt_rmsnorm_forward_pack(NULL, got, rs1, c.x, NULL, c.w, rows, dim, eps, c.off);
    ck_assert_msg(gt__same16(got, want, n) && gt_test_same_bits(rs, rs1, rows), "%s: plain norm", what);
    gt_rmsnorm_forward_pack_ref(NULL, got, rs1, c.x, NULL, c.w, rows, dim, eps, c.off);
    gt_rmsnorm_forward_pack_ref(o, want, rs, c.x, NULL, c.w, rows, dim, eps, c.off);
    ck_assert_msg(gt__same16(got, want, n), "%s: plain norm's reference", what);
    for (int ww = 0; ww < 2; ww++) {
      const float *w2 = ww ? c.w2 : NULL;
      float *y = gt_test_alloc_fill(n, &seed, -2, 2), *x1 = gt__nans(n), *x1b = gt__nans(n), *o2 = gt__nans(n);
      float *r2 = gt__nans(rows), *r2b = gt__nans(rows);
      uint16_t *x16 = gt__h16(n), *x16b = gt__h16(n);
      gt_rmsnorm_residual_forward_pack(x1, x16, rs, o2, want, r2, c.res, y, NULL, c.w, w2, rows, dim, eps, c.off);
      gt_rmsnorm_residual_forward_pack(x1b, x16b, rs1, NULL, got, r2b, c.res, y, NULL, c.w, w2, rows, dim, eps, c.off);
      ck_assert_msg(gt__same16(got, want, n) && gt_test_same_bits(r2, r2b, rows), "%s w2=%d: out2's copy", what, ww);
      ck_assert_msg(gt_test_same_bits(x1, x1b, n) && gt_test_same_bits(rs, rs1, rows) && gt__same16(x16, x16b, n),
                    "%s w2=%d: the residual output", what, ww);
      gt_rmsnorm_residual_forward_pack_ref(x1, NULL, rs, o2, want, r2, c.res, y, NULL, c.w, w2, rows, dim, eps, c.off);
      gt_rmsnorm_residual_forward_pack_ref(x1b, NULL, rs1, NULL, got, r2b, c.res, y, NULL, c.w, w2, rows, dim, eps,
                                           c.off);
      ck_assert_msg(gt__same16(got, want, n), "%s w2=%d: the reference", what, ww);
      free(y); free(x1); free(x1b); free(o2); free(r2); free(r2b); free(x16); free(x16b);
    }
    gt__norm_case_free(&c);
    free(o); free(rs); free(rs1); free(want); free(got);
  }
}
END_TEST

START_TEST(test_rmsnorm_pack_vs_unfused_and_ref) {
  /* gt_rmsnorm_forward_pack and gt_rmsnorm_residual_forward_pack: the
   * forward_rnd forms' outputs and statistics, then gt_bf16_pack of each
   * copy asked for, bit for bit, each copy alone or with the others; the
   * residual's input y as the executor has it (bf16 values, a product's
   * rounded output) and as any floats (the pack rounds). Against the
   * references' sequences: the copies of the inputs exactly, the rest within
   * forward_rnd's bound. */
  uint64_t seed = 48;
  const float eps = 1e-6f;
  for (int si = 0; si < GT__NORM_CASES; si++) {
    gt__norm_case c = gt__norm_case_new(si, &seed);
    const int64_t rows = c.rows, n = c.n;
    const int dim = c.dim, variant = c.variant;
    const float off = c.off, *x = c.x, *res = c.res, *w = c.w, *w2 = c.w2;
    char what[160];
    uint16_t *want = gt__h16(n);
    /* plain norm */
    for (int copy = 0; copy < 4; copy++) { /* 1: out's copy, 2: x's */
      float *o = gt__nans(n), *rs = gt__nans(rows), *uo = gt_test_zeros(n), *urs = gt_test_zeros(rows);
      uint16_t *o16 = copy & 1 ? gt__h16(n) : NULL, *x16 = copy & 2 ? gt__h16(n) : NULL;
      gt_rmsnorm_forward_pack(o, o16, rs, x, x16, w, rows, dim, eps, off);
      gt_rmsnorm_forward_rnd(uo, urs, x, w, rows, dim, eps, off, 1);
      snprintf(what, sizeof what, "rmsnorm pack rows=%ld dim=%d %s copy=%d", (long)rows, dim, gt__wname[variant],
               copy);
      ck_assert_msg(gt_test_same_bits(o, uo, n) && gt_test_same_bits(rs, urs, rows), "%s: the unfused bits", what);
      if (o16) {
        gt_bf16_pack(want, uo, n);
        ck_assert_msg(gt__same16(o16, want, n), "%s: out's copy", what);
      }
      if (x16) {
        gt_bf16_pack(want, x, n);
        ck_assert_msg(gt__same16(x16, want, n), "%s: x's copy", what);
      }
      float *ro = gt_test_zeros(n), *rrs = gt_test_zeros(rows);
      uint16_t *rx16 = x16 ? gt__h16(n) : NULL;
      gt_rmsnorm_forward_pack_ref(ro, NULL, rrs, x, rx16, w, rows, dim, eps, off);
      gt_test_check_err(what, gt_test_scaled_err(o, ro, n), TOL_REF_BF16);
      if (rx16) ck_assert_msg(gt__same16(x16, rx16, n), "%s: ref copy of x", what);
      free(o); free(rs); free(uo); free(urs); free(o16); free(x16); free(ro); free(rrs); free(rx16);
    }
    /* with the residual, with and without the next norm, every set of copies */
    for (int rounded = 0; rounded < 2; rounded++)
      for (int with2 = 0; with2 < 2; with2++)
        for (int which = 0; which < 8; which++) {
          if (!with2 && (which & 2)) continue; /* out2's copy only with out2 */
          float *y = gt_test_alloc_fill(n, &seed, -2, 2);
          if (rounded) gt_bf16_round(y, n);
          float *x1 = gt__nans(n), *r1 = gt__nans(rows), *o2 = with2 ? gt__nans(n) : NULL;
          float *r2 = with2 ? gt__nans(rows) : NULL;
          uint16_t *c16[3] = {which & 1 ? gt__h16(n) : NULL, which & 2 ? gt__h16(n) : NULL,
                              which & 4 ? gt__h16(n) : NULL};
          gt_rmsnorm_residual_forward_pack(x1, c16[0], r1, o2, c16[1], r2, res, y, c16[2], w, with2 ? w2 : NULL,
                                           rows, dim, eps, off);
          float *ux1 = gt_test_zeros(n), *ur1 = gt_test_zeros(rows), *uo2 = with2 ? gt_test_zeros(n) : NULL;
          float *ur2 = with2 ? gt_test_zeros(rows) : NULL;
          gt_rmsnorm_residual_forward_rnd(ux1, ur1, uo2, ur2, res, y, w, with2 ? w2 : NULL, rows, dim, eps, off, 1);
          snprintf(what, sizeof what, "rmsnorm+residual pack rows=%ld dim=%d %s rounded=%d out2=%d copies=%d",
                   (long)rows, dim, gt__wname[variant], rounded, with2, which);
          ck_assert_msg(gt_test_same_bits(x1, ux1, n) && gt_test_same_bits(r1, ur1, rows), "%s: the unfused bits",
                        what);
          if (with2)
            ck_assert_msg(gt_test_same_bits(o2, uo2, n) && gt_test_same_bits(r2, ur2, rows),
                          "%s: the unfused bits (out2)", what);
          const float *src[3] = {ux1, uo2, y};
          for (int k = 0; k < 3; k++) {
            if (!c16[k]) continue;
            gt_bf16_pack(want, src[k], n);
            ck_assert_msg(gt__same16(c16[k], want, n), "%s: copy %d", what, k);
          }
          float *rx1 = gt_test_zeros(n), *rr1 = gt_test_zeros(rows), *ro2 = with2 ? gt_test_zeros(n) : NULL;
          float *rr2 = with2 ? gt_test_zeros(rows) : NULL;
          uint16_t *ry16 = c16[2] ? gt__h16(n) : NULL;
          gt_rmsnorm_residual_forward_pack_ref(rx1, NULL, rr1, ro2, NULL, rr2, res, y, ry16, w, with2 ? w2 : NULL,
                                               rows, dim, eps, off);
          gt_test_check_err(what, gt_test_scaled_err(x1, rx1, n), TOL_REF_BF16);
          if (with2) gt_test_check_err(what, gt_test_scaled_err(o2, ro2, n), TOL_REF_BF16);
          if (ry16) ck_assert_msg(gt__same16(c16[2], ry16, n), "%s: ref copy of y", what);
          free(y); free(x1); free(r1); free(o2); free(r2); free(ux1); free(ur1); free(uo2); free(ur2);
          free(rx1); free(rr1); free(ro2); free(rr2); free(ry16);
          for (int k = 0; k < 3; k++) free(c16[k]);
        }
    gt__norm_case_free(&c);
    free(want);
  }
}
END_TEST

START_TEST(test_rmsnorm_backward_b16_vs_unpacked_and_ref) {
  /* the norms' backward reading x from its bf16 copy: the bits of unpacking
   * it and running the float32 kernel, for the plain norm (dx added, dw
   * added) and the residual one in each of its modes (written, added, with
   * and without the residual gradient), dx or dw alone; rows that take the
   * threaded path and 2 threads' column split of dw. Against the references'
   * sequences within float rounding. */
  uint64_t seed = 49;
  for (int si = 0; si < GT__NORM_CASES; si++)
    for (int mode = 0; mode < 6; mode++) {
      /* mode 0: plain; 1..4: residual, accumulate = mode & 1, dres when mode >= 3; 5: residual, dw only */
      const int64_t rows = gt__norm_rows[si / 12], n = rows * gt__norm_dims[si / 3 % 4];
      const int dim = gt__norm_dims[si / 3 % 4], variant = si % 3;
      const float off = gt__off[variant];
      const int acc = mode & 1, with_res = mode >= 3 && mode < 5, dx_too = mode != 5;
      char what[160];
      snprintf(what, sizeof what, "rmsnorm backward b16 rows=%ld dim=%d %s mode=%d", (long)rows, dim,
               gt__wname[variant], mode);
      float *x = gt_test_alloc_fill(n, &seed, -2, 2), *dout = gt_test_alloc_fill(n, &seed, -1, 1);
      float *dres = with_res ? gt_test_alloc_fill(n, &seed, -1, 1) : NULL;
      float *rs = gt_test_alloc_fill(rows, &seed, 0.5f, 2), *w = gt__weight(variant, dim, &seed);
      uint16_t *x16 = gt__h16(n);
      gt_bf16_pack(x16, x, n);
      float *xw = gt_test_zeros(n);
      gt_bf16_unpack(xw, x16, n);
      /* dx starts as values (added to) or NaN (written); dw as values */
      float *dx = NULL, *edx = NULL, *rdx = NULL;
      if (dx_too) {
        dx = mode == 0 || acc ? gt_test_alloc_fill(n, &seed, -1, 1) : gt__nans(n);
        edx = gt_test_zeros(n), rdx = gt_test_zeros(n);
        memcpy(edx, dx, (size_t)n * sizeof(float));
        memcpy(rdx, dx, (size_t)n * sizeof(float));
      }
      float *dw = w ? gt_test_alloc_fill(dim, &seed, -1, 1) : NULL, *edw = NULL, *rdw = NULL;
      if (w) {
        edw = gt_test_zeros(dim), rdw = gt_test_zeros(dim);
        memcpy(edw, dw, (size_t)dim * sizeof(float));
        memcpy(rdw, dw, (size_t)dim * sizeof(float));
      }
      if (mode == 0) {
        gt_rmsnorm_backward_b16(dx, dw, dout, x16, rs, w, rows, dim, off);
        gt_rmsnorm_backward(edx, edw, dout, xw, rs, w, rows, dim, off);
        gt_rmsnorm_backward_b16_ref(rdx, rdw, dout, x16, rs, w, rows, dim, off);
      } else {
        gt_rmsnorm_residual_backward_b16(dx, dw, dres, dout, x16, rs, w, rows, dim, off, acc);
        gt_rmsnorm_residual_backward(edx, edw, dres, dout, xw, rs, w, rows, dim, off, acc);
        gt_rmsnorm_residual_backward_b16_ref(rdx, rdw, dres, dout, x16, rs, w, rows, dim, off, acc);
      }
      if (dx) ck_assert_msg(gt_test_same_bits(dx, edx, n), "%s: dx", what);
      if (dw) ck_assert_msg(gt_test_same_bits(dw, edw, dim), "%s: dw", what);
      if (dx && n > 8) gt_test_check_err(what, gt_test_scaled_err(dx, rdx, n), 1e-5);
      if (dw && n > 8) gt_test_check_err(what, gt_test_scaled_err(dw, rdw, dim), 1e-5);
      free(x); free(dout); free(dres); free(rs); free(w); free(x16); free(xw);
      free(dx); free(edx); free(rdx); free(dw); free(edw); free(rdw);
    }
  /* rows wider than the stack row read the patterns in the loops: the same
   * values, the dot products within float rounding of the float32 kernel's;
   * dw (no reduction along the row) to the bit */
  const int wide = GT_RMS_B16_ROW_MAX + 17;
  const int64_t rows = 5, n = rows * wide;
  float *x = gt_test_alloc_fill(n, &seed, -2, 2), *dout = gt_test_alloc_fill(n, &seed, -1, 1);
  float *dres = gt_test_alloc_fill(n, &seed, -1, 1), *rs = gt_test_alloc_fill(rows, &seed, 0.5f, 2);
  float *w = gt_test_alloc_fill(wide, &seed, -0.5f, 0.5f);
  uint16_t *x16 = gt__h16(n);
  gt_bf16_pack(x16, x, n);
  float *xw = gt_test_zeros(n);
  gt_bf16_unpack(xw, x16, n);
  for (int mode = 0; mode < 2; mode++) {
    float *dx = gt__nans(n), *edx = gt__nans(n), *dw = gt_test_zeros(wide), *edw = gt_test_zeros(wide);
    if (mode) {
      gt_rmsnorm_residual_backward_b16(dx, dw, dres, dout, x16, rs, w, rows, wide, 1.0f, 0);
      gt_rmsnorm_residual_backward(edx, edw, dres, dout, xw, rs, w, rows, wide, 1.0f, 0);
    } else {
      memset(dx, 0, (size_t)n * sizeof(float)), memset(edx, 0, (size_t)n * sizeof(float));
      gt_rmsnorm_backward_b16(dx, dw, dout, x16, rs, w, rows, wide, 1.0f);
      gt_rmsnorm_backward(edx, edw, dout, xw, rs, w, rows, wide, 1.0f);
    }
    gt_test_check_err(mode ? "wide rows, residual" : "wide rows", gt_test_scaled_err(dx, edx, n), 1e-6);
    ck_assert_msg(gt_test_same_bits(dw, edw, wide), "wide rows mode %d: dw", mode);
    free(dx); free(edx); free(dw); free(edw);
  }
  free(x); free(dout); free(dres); free(rs); free(w); free(x16); free(xw);
}
END_TEST

START_TEST(test_rope_norm_b16_vs_unfused_and_ref) {
  /* the q/k norm with RoPE in bf16: the forward's copies of out and x are
   * gt_bf16_pack's of the forward_rnd form's output and of x, bit for bit
   * (each alone or both; x as the executor has it, bf16 values, and as any
   * floats); the backward reading x's copy gives the bits of unpacking it
   * (dx written, dw added, dout rotated back in place; dx NULL too). Against
   * the references' sequences within their bounds. */
  uint64_t seed = 50;
  const float eps = 1e-6f;
  static const int hds[] = {1, 2, 5, 33, 64, 128}; /* 1: nothing to rotate */
  for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
    const int hd = hds[hi];
    float *ct, *st;
    gt__rope_tables(hd, &ct, &st);
    for (size_t ti = 0; ti < sizeof gt__ntoks / sizeof gt__ntoks[0]; ti++)
      for (int H = 1; H <= 3; H += 2)
        for (int variant = 0; variant < 3; variant++)
          for (int which = 0; which < 8; which++) {
            /* which: 1 out's copy, 2 x's copy, 4 x already bf16 values */
            const int64_t T = gt__ntoks[ti], rows = T * H, n = rows * hd;
            const float off = gt__off[variant];
            char what[160];
            snprintf(what, sizeof what, "norm+rope b16 hd=%d T=%ld H=%d %s which=%d", hd, (long)T, H,
                     gt__wname[variant], which);
            int32_t *pos;
            float *x, *w;
            gt__rope_inputs(T, H, hd, variant, &seed, &pos, &x, &w);
            if (which & 4) gt_bf16_round(x, n);
            uint16_t *o16 = which & 1 ? gt__h16(n) : NULL, *x16 = which & 2 ? gt__h16(n) : NULL, *want = gt__h16(n);
            float *o = gt__nans(n), *rs = gt__nans(rows), *uo = gt_test_zeros(n), *urs = gt_test_zeros(rows);
            gt_rmsnorm_rope_forward_pack(o, o16, rs, x, x16, w, pos, ct, st, T, H, hd, eps, off);
            gt_rmsnorm_rope_forward(uo, urs, x, w, pos, ct, st, T, H, hd, eps, off, 1);
            ck_assert_msg(gt_test_same_bits(o, uo, n) && gt_test_same_bits(rs, urs, rows), "%s: the unfused bits", what);
            if (o16) gt_bf16_pack(want, uo, n), ck_assert_msg(gt__same16(o16, want, n), "%s: out's copy", what);
            if (x16) gt_bf16_pack(want, x, n), ck_assert_msg(gt__same16(x16, want, n), "%s: x's copy", what);
            float *ro = gt_test_zeros(n), *rrs = gt_test_zeros(rows);
            uint16_t *rx16 = x16 ? gt__h16(n) : NULL;
            gt_rmsnorm_rope_forward_pack_ref(ro, NULL, rrs, x, rx16, w, pos, ct, st, T, H, hd, eps, off);
            gt_test_check_err(what, gt_test_scaled_err(o, ro, n), TOL_REF_BF16);
            if (rx16) ck_assert_msg(gt__same16(x16, rx16, n), "%s: ref copy of x", what);
            /* the backward from x's copy (made here when not asked for above) */
            uint16_t *xk = x16 ? x16 : gt__h16(n);
            if (!x16) gt_bf16_pack(xk, x, n);
            float *xw = gt_test_zeros(n);
            gt_bf16_unpack(xw, xk, n);
            float *dout = gt_test_alloc_fill(n, &seed, -1, 1), *dw0 = gt_test_alloc_fill(hd > 0 ? hd : 1, &seed, -1, 1);
            for (int with_dx = 0; with_dx < 2; with_dx++) {
              float *fd = gt_test_copy(dout, n), *dx = with_dx ? gt__nans(n) : NULL, *dw = w ? gt_test_copy(dw0, hd) : NULL;
              float *ud = gt_test_copy(dout, n), *udx = with_dx ? gt__nans(n) : NULL, *udw = w ? gt_test_copy(dw0, hd) : NULL;
              gt_rope_rmsnorm_backward_b16(dx, dw, fd, xk, rs, w, pos, ct, st, T, H, hd, off);
              gt_rope_rmsnorm_backward(udx, udw, ud, xw, rs, w, pos, ct, st, T, H, hd, off);
              ck_assert_msg(gt_test_same_bits(fd, ud, n), "%s dx=%d: dout rotated back", what, with_dx);
              if (dx) ck_assert_msg(gt_test_same_bits(dx, udx, n), "%s: dx", what);
              if (w) ck_assert_msg(gt_test_same_bits(dw, udw, hd), "%s dx=%d: dw", what, with_dx);
              if (with_dx && n > 8) {
                float *rd = gt_test_copy(dout, n), *rdx = gt__nans(n), *rdw = w ? gt_test_copy(dw0, hd) : NULL;
                gt_rope_rmsnorm_backward_b16_ref(rdx, rdw, rd, xk, rs, w, pos, ct, st, T, H, hd, off);
                gt_test_check_err(what, gt_test_scaled_err(dx, rdx, n), TOL_REF);
                if (w) gt_test_check_err(what, gt_test_scaled_err(dw, rdw, hd), TOL_REF);
                free(rd); free(rdx); free(rdw);
              }
              free(fd); free(dx); free(dw); free(ud); free(udx); free(udw);
            }
            free(pos); free(x); free(w); free(o16); free(want); free(o); free(rs); free(uo); free(urs);
            free(ro); free(rrs); free(rx16); free(xw); free(dout); free(dw0);
            if (!x16) free(xk);
            free(x16);
          }
    free(ct); free(st);
  }
}
END_TEST

/* ---------- thread count ---------- */

START_TEST(test_fused_deterministic) {
  const int64_t T = 700;
  const int H = 3, hd = 128, half = hd / 2, dim = 257;
  const int64_t n = T * H * hd, rows = 1000, nd = rows * dim, ng = 100003;
  uint64_t seed = 45;
  float *ct = gt_test_zeros(GT__P * half), *st = gt_test_zeros(GT__P * half);
  gt_rope_table_fill(ct, st, GT__P, hd, 10000.0, 1.0, 1.0);
  int32_t *pos = malloc((size_t)T * sizeof(int32_t));
  gt_test_fill_ids(pos, T, &seed, 0, GT__P);
  float *x = gt_test_alloc_fill(n, &seed, -2, 2), *w = gt_test_alloc_fill(hd, &seed, -0.5f, 0.5f);
  float *dout = gt_test_alloc_fill(n, &seed, -1, 1), *y = gt_test_alloc_fill(nd, &seed, -2, 2);
  float *res = gt_test_alloc_fill(nd, &seed, -2, 2), *wd = gt_test_alloc_fill(dim, &seed, -0.5f, 0.5f);
  float *g = gt_test_alloc_fill(ng, &seed, -6, 6), *u = gt_test_alloc_fill(ng, &seed, -2, 2);
  float *o[2], *rs[2], *d[2], *dx[2], *dw[2], *x1[2], *o2[2], *r1[2], *r2[2], *act[2];
  for (int t = 0; t < 2; t++) {
    gt_team_set_process(t + 1);
    o[t] = gt_test_zeros(n), rs[t] = gt_test_zeros(T * H);
    gt_rmsnorm_rope_forward(o[t], rs[t], x, w, pos, ct, st, T, H, hd, 1e-6f, 1.0f, 1);
    d[t] = gt_test_copy(dout, n), dx[t] = gt_test_zeros(n), dw[t] = gt_test_zeros(hd);
    gt_rope_rmsnorm_backward(dx[t], dw[t], d[t], x, rs[t], w, pos, ct, st, T, H, hd, 1.0f);
    x1[t] = gt_test_zeros(nd), o2[t] = gt_test_zeros(nd), r1[t] = gt_test_zeros(rows), r2[t] = gt_test_zeros(rows);
    gt_rmsnorm_residual_forward_rnd(x1[t], r1[t], o2[t], r2[t], res, y, wd, wd, rows, dim, 1e-6f, 1.0f, 1);
    act[t] = gt_test_zeros(ng);
    gt_geglu_forward_rnd(act[t], g, u, ng, 1);
  }
  gt_team_set_process(2);
  ck_assert(gt_test_same_bits(o[0], o[1], n) && gt_test_same_bits(rs[0], rs[1], T * H));
  ck_assert(gt_test_same_bits(d[0], d[1], n) && gt_test_same_bits(dx[0], dx[1], n) && gt_test_same_bits(dw[0], dw[1], hd));
  ck_assert(gt_test_same_bits(x1[0], x1[1], nd) && gt_test_same_bits(o2[0], o2[1], nd));
  ck_assert(gt_test_same_bits(act[0], act[1], ng));
  for (int t = 0; t < 2; t++) {
    free(o[t]); free(rs[t]); free(d[t]); free(dx[t]); free(dw[t]); free(x1[t]); free(o2[t]); free(r1[t]); free(r2[t]);
    free(act[t]);
  }
  free(ct); free(st); free(pos); free(x); free(w); free(dout); free(y); free(res); free(wd); free(g); free(u);
}
END_TEST

static Suite *gt__suite(void) {
  Suite *s = suite_create("fused");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_round_nb_bits);
  tcase_add_test(tc, test_rmsnorm_rope_forward_vs_unfused_and_ref);
  tcase_add_test(tc, test_rope_rmsnorm_backward_vs_unfused_and_ref);
  tcase_add_test(tc, test_rmsnorm_rnd_vs_unfused_and_ref);
  tcase_add_test(tc, test_geglu_rnd_vs_unfused_and_ref);
  tcase_add_test(tc, test_geglu_pack_vs_unfused_and_ref);
  tcase_add_test(tc, test_geglu_backward_b16_vs_unpacked_and_ref);
  tcase_add_test(tc, test_geglu_from_b16_vs_pack_and_ref);
  tcase_add_test(tc, test_rmsnorm_pack_copy_only);
  tcase_add_test(tc, test_rmsnorm_pack_vs_unfused_and_ref);
  tcase_add_test(tc, test_rmsnorm_backward_b16_vs_unpacked_and_ref);
  tcase_add_test(tc, test_rope_norm_b16_vs_unfused_and_ref);
  tcase_add_test(tc, test_fused_deterministic);
  return s;
}

int main(void) { return gt_test_run_suite(gt__suite(), 0); }
