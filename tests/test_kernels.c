/* Kernel suite (everything in kernels.h but attention).
 *
 * Three kinds of check:
 *  - fast against the scalar reference over awkward sizes (0, 1, 3, 17, 1000+
 *    rows; dims 1, 5, 33, 257), sizes large enough to take the threaded path;
 *  - every backward against central differences of a double-precision forward
 *    written here, with loss = sum(out * R) for a random R;
 *  - determinism where the header promises it (bit-identical for 1 and 2
 *    threads).
 * Errors are measured as max|a - b| / max|b| (relative to the scale of the
 * result) unless a check says otherwise. Set GT_TEST_VERBOSE=1 to print the
 * largest error of every check. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "gt_testutil.h"

/* Tolerances. Fast kernels reorder float sums; FD gradients are exact to
 * about 1e-8, so the FD tolerance is all float rounding in the kernel. */
#define TOL_REF 2e-6
#define TOL_FD 2e-5
/* the central-difference step of the double-precision forwards */
#define FD_H 1e-4

/* ---------- matmul ---------- */

typedef struct {
  int64_t n, k, m;
} gt__mm_case;

START_TEST(test_matmul_vs_ref) {
  const gt__mm_case cases[] = {{0, 5, 3},  {1, 1, 1},    {3, 5, 7},   {17, 33, 5},
                               {5, 257, 33}, {1000, 17, 3}, {4, 0, 3}, {4, 3, 0},
                               {129, 65, 47}};
  uint64_t seed = 11;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t n = cases[c].n, k = cases[c].k, m = cases[c].m;
    char what[96];
    float *x = gt_test_alloc_fill(n * k, &seed, -1, 1);
    float *w = gt_test_alloc_fill(m * k, &seed, -1, 1);
    float *dy = gt_test_alloc_fill(n * m, &seed, -1, 1);
    float *y = gt_test_alloc_fill(n * m, &seed, -1, 1); /* garbage: overwritten */
    float *yr = gt_test_zeros(n * m);
    gt_matmul_forward(y, x, w, n, k, m);
    gt_matmul_forward_ref(yr, x, w, n, k, m);
    snprintf(what, sizeof what, "matmul fwd n=%ld in=%ld out=%ld", (long)n, (long)k, (long)m);
    gt_test_check_err(what, gt_test_scaled_err(y, yr, n * m), TOL_REF);

    /* backward accumulates onto whatever is there */
    float *dx = gt_test_alloc_fill(n * k, &seed, -1, 1), *dxr = gt_test_copy(dx, n * k);
    float *dw = gt_test_alloc_fill(m * k, &seed, -1, 1), *dwr = gt_test_copy(dw, m * k);
    gt_matmul_backward(dx, dw, dy, x, w, n, k, m);
    gt_matmul_backward_ref(dxr, dwr, dy, x, w, n, k, m);
    snprintf(what, sizeof what, "matmul bwd dinp n=%ld in=%ld out=%ld", (long)n, (long)k, (long)m);
    gt_test_check_err(what, gt_test_scaled_err(dx, dxr, n * k), TOL_REF);
    snprintf(what, sizeof what, "matmul bwd dw n=%ld in=%ld out=%ld", (long)n, (long)k, (long)m);
    gt_test_check_err(what, gt_test_scaled_err(dw, dwr, m * k), TOL_REF);

    /* NULL gradients are skipped, the other one is unchanged in meaning */
    float *dx2 = gt_test_zeros(n * k), *dw2 = gt_test_zeros(m * k);
    float *dx2r = gt_test_zeros(n * k), *dw2r = gt_test_zeros(m * k);
    gt_matmul_backward(dx2, NULL, dy, x, w, n, k, m);
    gt_matmul_backward(NULL, dw2, dy, x, w, n, k, m);
    gt_matmul_backward_ref(dx2r, NULL, dy, x, w, n, k, m);
    gt_matmul_backward_ref(NULL, dw2r, dy, x, w, n, k, m);
    gt_test_check_err("matmul bwd dinp only", gt_test_scaled_err(dx2, dx2r, n * k), TOL_REF);
    gt_test_check_err("matmul bwd dw only", gt_test_scaled_err(dw2, dw2r, m * k), TOL_REF);
    free(x); free(w); free(dy); free(y); free(yr); free(dx); free(dxr); free(dw);
    free(dwr); free(dx2); free(dw2); free(dx2r); free(dw2r);
  }
}
END_TEST

typedef struct {
  double *x, *w, *R;
  int64_t n, k, m;
} gt__mm_ctx;

static double gt__mm_loss(void *p) {
  const gt__mm_ctx *c = p;
  double L = 0;
  for (int64_t i = 0; i < c->n; i++)
    for (int64_t o = 0; o < c->m; o++) {
      double s = 0;
      for (int64_t j = 0; j < c->k; j++) s += c->x[i * c->k + j] * c->w[o * c->k + j];
      L += s * c->R[i * c->m + o];
    }
  return L;
}

START_TEST(test_matmul_fd) {
  const int64_t n = 3, k = 5, m = 4;
  uint64_t seed = 12;
  float *x = gt_test_alloc_fill(n * k, &seed, -1, 1), *w = gt_test_alloc_fill(m * k, &seed, -1, 1);
  float *R = gt_test_alloc_fill(n * m, &seed, -1, 1);
  float *dx = gt_test_zeros(n * k), *dw = gt_test_zeros(m * k);
  gt_matmul_backward(dx, dw, R, x, w, n, k, m);
  gt__mm_ctx c = {gt_test_to_double(x, n * k), gt_test_to_double(w, m * k), gt_test_to_double(R, n * m), n, k, m};
  double *gx = malloc(n * k * sizeof(double)), *gw = malloc(m * k * sizeof(double));
  gt_test_central_diff(gx, c.x, n * k, FD_H, gt__mm_loss, &c);
  gt_test_central_diff(gw, c.w, m * k, FD_H, gt__mm_loss, &c);
  gt_test_check_err("matmul dinp vs FD", gt_test_scaled_err_d(dx, gx, n * k), TOL_FD);
  gt_test_check_err("matmul dw vs FD", gt_test_scaled_err_d(dw, gw, m * k), TOL_FD);
  free(x); free(w); free(R); free(dx); free(dw); free(c.x); free(c.w); free(c.R);
  free(gx); free(gw);
}
END_TEST

/* ---------- rmsnorm ---------- */

/* variant 0: Gemma 3 (w, offset 1); 1: Gemma 4 (w, offset 0); 2: no weight */
static const float gt__rms_off[3] = {1.0f, 0.0f, 0.0f};
static const char *gt__rms_name[3] = {"w_offset=1", "w_offset=0", "w=NULL"};

static float *gt__rms_weight(int variant, int dim, uint64_t *seed) {
  if (variant == 2) return NULL;
  /* offset 1 stores a small delta; offset 0 stores the scale itself */
  return variant == 0 ? gt_test_alloc_fill(dim, seed, -0.5f, 0.5f)
                      : gt_test_alloc_fill(dim, seed, 0.5f, 1.5f);
}

START_TEST(test_rmsnorm_vs_ref) {
  const int64_t rows_list[] = {0, 1, 3, 17, 1000};
  const int dims[] = {1, 5, 33, 257};
  uint64_t seed = 21;
  const float eps = 1e-6f;
  for (int variant = 0; variant < 3; variant++)
    for (size_t a = 0; a < 5; a++)
      for (size_t b = 0; b < 4; b++) {
        const int64_t rows = rows_list[a];
        const int dim = dims[b];
        const int64_t n = rows * dim;
        const float off = gt__rms_off[variant];
        char what[128];
        float *x = gt_test_alloc_fill(n, &seed, -2, 2);
        float *w = gt__rms_weight(variant, dim, &seed);
        float *dy = gt_test_alloc_fill(n, &seed, -1, 1);
        float *y = gt_test_zeros(n), *yr = gt_test_zeros(n);
        float *rs = gt_test_zeros(rows), *rsr = gt_test_zeros(rows);
        gt_rmsnorm_forward(y, rs, x, w, rows, dim, eps, off);
        gt_rmsnorm_forward_ref(yr, rsr, x, w, rows, dim, eps, off);
        snprintf(what, sizeof what, "rmsnorm fwd %s rows=%ld dim=%d", gt__rms_name[variant],
                 (long)rows, dim);
        gt_test_check_err(what, gt_test_scaled_err(y, yr, n), TOL_REF);
        gt_test_check_err("rmsnorm rstd", gt_test_scaled_err(rs, rsr, rows), TOL_REF);

        float *dx = gt_test_alloc_fill(n, &seed, -1, 1), *dxr = gt_test_copy(dx, n);
        float *dw = gt_test_alloc_fill(dim, &seed, -1, 1), *dwr = gt_test_copy(dw, dim);
        gt_rmsnorm_backward(dx, dw, dy, x, rsr, w, rows, dim, off);
        gt_rmsnorm_backward_ref(dxr, dwr, dy, x, rsr, w, rows, dim, off);
        snprintf(what, sizeof what, "rmsnorm bwd dx %s rows=%ld dim=%d", gt__rms_name[variant],
                 (long)rows, dim);
        gt_test_check_err(what, gt_test_scaled_err(dx, dxr, n), TOL_REF);
        snprintf(what, sizeof what, "rmsnorm bwd dw %s rows=%ld dim=%d", gt__rms_name[variant],
                 (long)rows, dim);
        gt_test_check_err(what, gt_test_scaled_err(dw, dwr, dim), TOL_REF);
        if (variant == 2)
          ck_assert_msg(gt_test_same_bits(dw, dwr, dim), "dw must be untouched without a weight");

        /* each gradient alone */
        float *dx1 = gt_test_zeros(n), *dx1r = gt_test_zeros(n), *dw1 = gt_test_zeros(dim), *dw1r = gt_test_zeros(dim);
        gt_rmsnorm_backward(dx1, NULL, dy, x, rsr, w, rows, dim, off);
        gt_rmsnorm_backward(NULL, dw1, dy, x, rsr, w, rows, dim, off);
        gt_rmsnorm_backward_ref(dx1r, NULL, dy, x, rsr, w, rows, dim, off);
        gt_rmsnorm_backward_ref(NULL, dw1r, dy, x, rsr, w, rows, dim, off);
        gt_test_check_err("rmsnorm bwd dx only", gt_test_scaled_err(dx1, dx1r, n), TOL_REF);
        gt_test_check_err("rmsnorm bwd dw only", gt_test_scaled_err(dw1, dw1r, dim), TOL_REF);
        free(x); free(w); free(dy); free(y); free(yr); free(rs); free(rsr); free(dx);
        free(dxr); free(dw); free(dwr); free(dx1); free(dx1r); free(dw1); free(dw1r);
      }
}
END_TEST

typedef struct {
  double *x, *w, *R;
  int64_t rows;
  int dim;
  double eps, off;
} gt__rms_ctx;

static double gt__rms_loss(void *p) {
  const gt__rms_ctx *c = p;
  double L = 0;
  for (int64_t r = 0; r < c->rows; r++) {
    const double *x = c->x + r * c->dim;
    double ss = 0;
    for (int j = 0; j < c->dim; j++) ss += x[j] * x[j];
    const double rs = 1.0 / sqrt(ss / c->dim + c->eps);
    for (int j = 0; j < c->dim; j++) {
      const double s = c->w ? c->off + c->w[j] : 1.0;
      L += x[j] * rs * s * c->R[r * c->dim + j];
    }
  }
  return L;
}

START_TEST(test_rmsnorm_fd) {
  const int dims[] = {5, 17};
  uint64_t seed = 22;
  for (int variant = 0; variant < 3; variant++)
    for (int d = 0; d < 2; d++) {
      const int64_t rows = 3;
      const int dim = dims[d];
      const int64_t n = rows * dim;
      const float off = gt__rms_off[variant], eps = 1e-6f;
      char what[96];
      float *x = gt_test_alloc_fill(n, &seed, -2, 2), *w = gt__rms_weight(variant, dim, &seed);
      float *R = gt_test_alloc_fill(n, &seed, -1, 1);
      float *y = gt_test_zeros(n), *rs = gt_test_zeros(rows), *dx = gt_test_zeros(n), *dw = gt_test_zeros(dim);
      gt_rmsnorm_forward(y, rs, x, w, rows, dim, eps, off);
      gt_rmsnorm_backward(dx, dw, R, x, rs, w, rows, dim, off);
      gt__rms_ctx c = {gt_test_to_double(x, n), w ? gt_test_to_double(w, dim) : NULL, gt_test_to_double(R, n), rows, dim,
                       eps, off};
      double *gx = malloc(n * sizeof(double)), *gw = malloc(dim * sizeof(double));
      gt_test_central_diff(gx, c.x, n, FD_H, gt__rms_loss, &c);
      snprintf(what, sizeof what, "rmsnorm dx vs FD %s dim=%d", gt__rms_name[variant], dim);
      gt_test_check_err(what, gt_test_scaled_err_d(dx, gx, n), TOL_FD);
      if (w) {
        gt_test_central_diff(gw, c.w, dim, FD_H, gt__rms_loss, &c);
        snprintf(what, sizeof what, "rmsnorm dw vs FD %s dim=%d", gt__rms_name[variant], dim);
        gt_test_check_err(what, gt_test_scaled_err_d(dw, gw, dim), TOL_FD);
      }
      free(x); free(w); free(R); free(y); free(rs); free(dx); free(dw); free(c.x); free(c.w);
      free(c.R); free(gx); free(gw);
    }
}
END_TEST

START_TEST(test_rmsnorm_deterministic) {
  /* big enough for the threaded path */
  const int64_t rows = 1000;
  const int dim = 257;
  const int64_t n = rows * dim;
  uint64_t seed = 23;
  float *x = gt_test_alloc_fill(n, &seed, -2, 2), *w = gt_test_alloc_fill(dim, &seed, -0.5f, 0.5f);
  float *dy = gt_test_alloc_fill(n, &seed, -1, 1);
  float *y = gt_test_zeros(n), *rs = gt_test_zeros(rows);
  gt_rmsnorm_forward(y, rs, x, w, rows, dim, 1e-6f, 1.0f);
  float *dx[2], *dw[2], *yy[2];
  for (int t = 0; t < 2; t++) {
    gt_team_set_process(t + 1);
    yy[t] = gt_test_zeros(n);
    float *rs2 = gt_test_zeros(rows);
    gt_rmsnorm_forward(yy[t], rs2, x, w, rows, dim, 1e-6f, 1.0f);
    free(rs2);
    dx[t] = gt_test_zeros(n);
    dw[t] = gt_test_zeros(dim);
    gt_rmsnorm_backward(dx[t], dw[t], dy, x, rs, w, rows, dim, 1.0f);
  }
  ck_assert_msg(gt_test_same_bits(yy[0], yy[1], n), "rmsnorm forward differs between 1 and 2 threads");
  ck_assert_msg(gt_test_same_bits(dx[0], dx[1], n), "rmsnorm dx differs between 1 and 2 threads");
  ck_assert_msg(gt_test_same_bits(dw[0], dw[1], dim), "rmsnorm dw differs between 1 and 2 threads");
  /* and run to run */
  float *dw3 = gt_test_zeros(dim);
  gt_rmsnorm_backward(NULL, dw3, dy, x, rs, w, rows, dim, 1.0f);
  ck_assert(gt_test_same_bits(dw3, dw[1], dim));
  for (int t = 0; t < 2; t++) {
    free(dx[t]); free(dw[t]); free(yy[t]);
  }
  free(x); free(w); free(dy); free(y); free(rs); free(dw3);
}
END_TEST

typedef struct rms_job {
  const float *x, *w, *dy, *y, *dx, *dw;
  int64_t rows;
  int dim;
  atomic_int bad;
} rms_job;

/* on each thread: the same norm forward and backward, compared with the
 * caller's */
static void rms_concurrent(void *arg, int t) {
  rms_job *j = arg;
  const int64_t rows = j->rows, n = rows * j->dim;
  const int dim = j->dim;
  float *y2 = gt_test_zeros(n), *rs2 = gt_test_zeros(rows), *dx2 = gt_test_zeros(n), *dw2 = gt_test_zeros(dim);
  gt_rmsnorm_forward(y2, rs2, j->x, j->w, rows, dim, 1e-6f, 1.0f);
  gt_rmsnorm_backward(dx2, dw2, j->dy, j->x, rs2, j->w, rows, dim, 1.0f);
  int bad = !gt_test_same_bits(j->y, y2, n) + !gt_test_same_bits(j->dx, dx2, n) + !gt_test_same_bits(j->dw, dw2, dim);
  bad += gt_sumsq(j->x, n) != gt_sumsq(j->x, n);
  atomic_fetch_add(&j->bad, bad);
  free(y2); free(rs2); free(dx2); free(dw2);
}

START_TEST(test_rmsnorm_in_parallel_region) {
  /* Called from inside a parallel region (one worker per device), a kernel
   * runs on the calling thread and still gives the same answer. */
  const int64_t rows = 300;
  const int dim = 257;
  const int64_t n = rows * dim;
  uint64_t seed = 24;
  float *x = gt_test_alloc_fill(n, &seed, -2, 2), *w = gt_test_alloc_fill(dim, &seed, -0.5f, 0.5f);
  float *dy = gt_test_alloc_fill(n, &seed, -1, 1);
  float *y = gt_test_zeros(n), *rs = gt_test_zeros(rows), *dx = gt_test_zeros(n), *dw = gt_test_zeros(dim);
  gt_rmsnorm_forward(y, rs, x, w, rows, dim, 1e-6f, 1.0f);
  gt_rmsnorm_backward(dx, dw, dy, x, rs, w, rows, dim, 1.0f);
  int bad = 0;
  gt_team_set_process(2);
  rms_job rj = {x, w, dy, y, dx, dw, rows, dim, 0};
  gt_test_on_threads(2, rms_concurrent, &rj);
  bad = atomic_load(&rj.bad);
  ck_assert_int_eq(bad, 0);
  free(x); free(w); free(dy); free(y); free(rs); free(dx); free(dw);
}
END_TEST

/* ---------- rmsnorm fused with the residual stream ---------- */

/* Equal as floats, element by element (a written 0 may be -0 where zeroing
 * and adding gives +0: the same value); NaN never equals. */
static int gt__same_values(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(a[i] == b[i])) return 0;
  return 1;
}

static float *gt__nans(int64_t n) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}

START_TEST(test_rmsnorm_residual_vs_unfused_and_ref) {
  const int64_t rows_list[] = {0, 1, 3, 17, 1000};
  const int dims[] = {1, 5, 33, 257};
  uint64_t seed = 25;
  const float eps = 1e-6f;
  for (int variant = 0; variant < 3; variant++)
    for (size_t a = 0; a < 5; a++)
      for (size_t b = 0; b < 4; b++) {
        const int64_t rows = rows_list[a];
        const int dim = dims[b];
        const int64_t n = rows * dim;
        const float off = gt__rms_off[variant];
        char what[160];
        float *res = gt_test_alloc_fill(n, &seed, -2, 2), *y = gt_test_alloc_fill(n, &seed, -2, 2);
        float *w = gt__rms_weight(variant, dim, &seed), *w2 = gt__rms_weight(variant, dim, &seed);
        /* forward: fused (outputs start as NaN: written, never read) vs the
         * unfused fast kernels, bit for bit, and vs the reference */
        float *x1 = gt__nans(n), *rs = gt__nans(rows), *o2 = gt__nans(n), *rs2 = gt__nans(rows);
        gt_rmsnorm_residual_forward(x1, rs, o2, rs2, res, y, w, w2, rows, dim, eps, off);
        float *ux1 = gt_test_zeros(n), *urs = gt_test_zeros(rows), *uo2 = gt_test_zeros(n), *urs2 = gt_test_zeros(rows);
        gt_rmsnorm_forward(ux1, urs, y, w, rows, dim, eps, off);
        for (int64_t i = 0; i < n; i++) ux1[i] += res[i];
        gt_rmsnorm_forward(uo2, urs2, ux1, w2, rows, dim, eps, off);
        snprintf(what, sizeof what, "rmsnorm+residual fwd %s rows=%ld dim=%d: bits of the unfused kernels",
                 gt__rms_name[variant], (long)rows, dim);
        ck_assert_msg(gt_test_same_bits(x1, ux1, n) && gt_test_same_bits(rs, urs, rows) &&
                          gt_test_same_bits(o2, uo2, n) && gt_test_same_bits(rs2, urs2, rows),
                      "%s", what);
        /* without the second norm */
        float *x1b = gt__nans(n), *rsb = gt__nans(rows);
        gt_rmsnorm_residual_forward(x1b, rsb, NULL, NULL, res, y, w, NULL, rows, dim, eps, off);
        ck_assert_msg(gt_test_same_bits(x1b, ux1, n) && gt_test_same_bits(rsb, urs, rows), "%s (no out2)", what);
        float *rx1 = gt_test_zeros(n), *rrs = gt_test_zeros(rows), *ro2 = gt_test_zeros(n), *rrs2 = gt_test_zeros(rows);
        gt_rmsnorm_residual_forward_ref(rx1, rrs, ro2, rrs2, res, y, w, w2, rows, dim, eps, off);
        snprintf(what, sizeof what, "rmsnorm+residual fwd vs ref %s rows=%ld dim=%d", gt__rms_name[variant], (long)rows, dim);
        gt_test_check_err(what, gt_test_scaled_err(x1, rx1, n), TOL_REF);
        gt_test_check_err(what, gt_test_scaled_err(o2, ro2, n), TOL_REF);
        gt_test_check_err(what, gt_test_scaled_err(rs2, rrs2, rows), TOL_REF);

        /* backward, every mode: accumulate 0 (dx starts as NaN) or 1, with
         * and without a residual gradient */
        float *dout = gt_test_alloc_fill(n, &seed, -1, 1), *dres = gt_test_alloc_fill(n, &seed, -1, 1);
        float *dx0 = gt_test_alloc_fill(n, &seed, -1, 1);
        for (int acc = 0; acc < 2; acc++)
          for (int with_res = 0; with_res < 2; with_res++) {
            const float *dr = with_res ? dres : NULL;
            float *dx = acc ? gt_test_copy(dx0, n) : gt__nans(n);
            float *dw = gt_test_alloc_fill(dim, &seed, -1, 1), *udw = gt_test_copy(dw, dim), *rdw = gt_test_copy(dw, dim);
            gt_rmsnorm_residual_backward(dx, dw, dr, dout, y, urs, w, rows, dim, off, acc);
            float *udx = acc ? gt_test_copy(dx0, n) : gt_test_zeros(n);
            if (dr)
              for (int64_t i = 0; i < n; i++) udx[i] += dr[i];
            gt_rmsnorm_backward(udx, udw, dout, y, urs, w, rows, dim, off);
            snprintf(what, sizeof what, "rmsnorm+residual bwd %s rows=%ld dim=%d accumulate=%d dres=%d: the unfused kernels",
                     gt__rms_name[variant], (long)rows, dim, acc, with_res);
            ck_assert_msg(gt__same_values(dx, udx, n) && gt_test_same_bits(dw, udw, dim), "%s", what);
            float *rdx = acc ? gt_test_copy(dx0, n) : gt__nans(n);
            gt_rmsnorm_residual_backward_ref(rdx, rdw, dr, dout, y, urs, w, rows, dim, off, acc);
            snprintf(what, sizeof what, "rmsnorm+residual bwd vs ref %s rows=%ld dim=%d accumulate=%d dres=%d",
                     gt__rms_name[variant], (long)rows, dim, acc, with_res);
            gt_test_check_err(what, gt_test_scaled_err(dx, rdx, n), TOL_REF);
            gt_test_check_err(what, gt_test_scaled_err(dw, rdw, dim), TOL_REF);
            free(dx); free(dw); free(udw); free(rdw); free(udx); free(rdx);
          }
        free(res); free(y); free(w); free(w2); free(x1); free(rs); free(o2); free(rs2); free(ux1); free(urs);
        free(uo2); free(urs2); free(x1b); free(rsb); free(rx1); free(rrs); free(ro2); free(rrs2); free(dout);
        free(dres); free(dx0);
      }
}
END_TEST

START_TEST(test_rmsnorm_residual_deterministic) {
  const int64_t rows = 1000;
  const int dim = 257;
  const int64_t n = rows * dim;
  uint64_t seed = 26;
  float *res = gt_test_alloc_fill(n, &seed, -2, 2), *y = gt_test_alloc_fill(n, &seed, -2, 2);
  float *w = gt_test_alloc_fill(dim, &seed, -0.5f, 0.5f), *w2 = gt_test_alloc_fill(dim, &seed, -0.5f, 0.5f);
  float *dout = gt_test_alloc_fill(n, &seed, -1, 1), *dres = gt_test_alloc_fill(n, &seed, -1, 1);
  float *x1[2], *o2[2], *rs[2], *rs2[2], *dx[2], *dw[2];
  for (int t = 0; t < 2; t++) {
    gt_team_set_process(t + 1);
    x1[t] = gt_test_zeros(n), o2[t] = gt_test_zeros(n), rs[t] = gt_test_zeros(rows), rs2[t] = gt_test_zeros(rows);
    gt_rmsnorm_residual_forward(x1[t], rs[t], o2[t], rs2[t], res, y, w, w2, rows, dim, 1e-6f, 1.0f);
    dx[t] = gt_test_copy(dres, n), dw[t] = gt_test_zeros(dim);
    gt_rmsnorm_residual_backward(dx[t], dw[t], dres, dout, y, rs[t], w, rows, dim, 1.0f, 1);
  }
  ck_assert_msg(gt_test_same_bits(x1[0], x1[1], n) && gt_test_same_bits(o2[0], o2[1], n) &&
                    gt_test_same_bits(rs2[0], rs2[1], rows),
                "rmsnorm+residual forward differs between 1 and 2 threads");
  ck_assert_msg(gt_test_same_bits(dx[0], dx[1], n) && gt_test_same_bits(dw[0], dw[1], dim),
                "rmsnorm+residual backward differs between 1 and 2 threads");
  for (int t = 0; t < 2; t++) {
    free(x1[t]); free(o2[t]); free(rs[t]); free(rs2[t]); free(dx[t]); free(dw[t]);
  }
  free(res); free(y); free(w); free(w2); free(dout); free(dres);
}
END_TEST

/* ---------- rope ---------- */

START_TEST(test_rope_table) {
  /* standard RoPE */
  {
    const int P = 50, hd = 64, half = hd / 2;
    float *c = gt_test_zeros(P * half), *s = gt_test_zeros(P * half);
    gt_rope_table_fill(c, s, P, hd, 10000.0, 1.0, 1.0);
    double worst = 0;
    for (int p = 0; p < P; p++)
      for (int i = 0; i < half; i++) {
        const double ang = p / pow(10000.0, 2.0 * i / hd);
        /* the float angle is off by a few ulp of itself */
        const double tol = 1e-6 + 4e-7 * ang;
        const double e = fmax(fabs(c[p * half + i] - cos(ang)), fabs(s[p * half + i] - sin(ang)));
        if (e / tol > worst) worst = e / tol;
      }
    gt_test_check_err("rope table (fraction 1) error / tolerance", worst, 1.0);
    ck_assert(c[0] == 1.0f && s[0] == 0.0f);
    free(c); free(s);
  }
  /* Gemma 4 proportional partial RoPE with linear scaling */
  {
    const int P = 40, hd = 32, half = hd / 2, rot = 4; /* (int)(0.25 * 32 / 2) */
    float *c = gt_test_zeros(P * half), *s = gt_test_zeros(P * half);
    gt_rope_table_fill(c, s, P, hd, 1e6, 8.0, 0.25);
    double worst = 0;
    for (int p = 0; p < P; p++)
      for (int i = 0; i < half; i++) {
        if (i >= rot) {
          ck_assert_msg(c[p * half + i] == 1.0f && s[p * half + i] == 0.0f,
                        "pair %d beyond rot_pairs must be the identity", i);
          continue;
        }
        /* the denominator stays head_dim, and the scale divides the angle */
        const double ang = p / (pow(1e6, 2.0 * i / hd) * 8.0);
        const double tol = 1e-6 + 4e-7 * ang;
        const double e = fmax(fabs(c[p * half + i] - cos(ang)), fabs(s[p * half + i] - sin(ang)));
        if (e / tol > worst) worst = e / tol;
      }
    gt_test_check_err("rope table (fraction 0.25, scale 8) error / tolerance", worst, 1.0);
    free(c); free(s);
  }
}
END_TEST

typedef struct {
  int hd;
  double base, scale, frac;
} gt__rope_cfg;

static const gt__rope_cfg gt__rope_cfgs[] = {
    {2, 10000.0, 1.0, 1.0},  {34, 10000.0, 1.0, 1.0}, {64, 10000.0, 1.0, 1.0},
    {64, 1e6, 8.0, 0.25},    {16, 1e6, 8.0, 0.25},
};

START_TEST(test_rope_vs_ref) {
  const int64_t ntoks[] = {0, 1, 3, 17, 700};
  const int heads[] = {1, 3};
  const int P = 64;
  uint64_t seed = 31;
  for (size_t ci = 0; ci < sizeof gt__rope_cfgs / sizeof gt__rope_cfgs[0]; ci++) {
    const gt__rope_cfg *cf = &gt__rope_cfgs[ci];
    const int half = cf->hd / 2;
    float *ct = gt_test_zeros(P * half), *st = gt_test_zeros(P * half);
    gt_rope_table_fill(ct, st, P, cf->hd, cf->base, cf->scale, cf->frac);
    for (size_t a = 0; a < 5; a++)
      for (size_t b = 0; b < 2; b++) {
        const int64_t T = ntoks[a];
        const int H = heads[b];
        const int64_t n = T * H * cf->hd;
        char what[96];
        int32_t *pos = malloc((size_t)(T > 0 ? T : 1) * sizeof(int32_t));
        gt_test_fill_ids(pos, T, &seed, 0, P);
        float *x = gt_test_alloc_fill(n, &seed, -2, 2);
        float *y = gt_test_copy(x, n), *yr = gt_test_copy(x, n);
        gt_rope_forward(y, pos, ct, st, T, H, cf->hd);
        gt_rope_forward_ref(yr, pos, ct, st, T, H, cf->hd);
        snprintf(what, sizeof what, "rope fwd hd=%d frac=%.2f T=%ld H=%d", cf->hd, cf->frac,
                 (long)T, H);
        gt_test_check_err(what, gt_test_scaled_err(y, yr, n), TOL_REF);
        float *g = gt_test_copy(x, n), *gr = gt_test_copy(x, n);
        gt_rope_backward(g, pos, ct, st, T, H, cf->hd);
        gt_rope_backward_ref(gr, pos, ct, st, T, H, cf->hd);
        gt_test_check_err("rope bwd vs ref", gt_test_scaled_err(g, gr, n), TOL_REF);
        /* backward is the inverse rotation: it undoes the forward */
        gt_rope_backward(y, pos, ct, st, T, H, cf->hd);
        gt_test_check_err("rope bwd(fwd(x)) == x", gt_test_scaled_err(y, x, n), TOL_REF);
        free(pos); free(x); free(y); free(yr); free(g); free(gr);
      }
    free(ct); free(st);
  }
}
END_TEST

typedef struct {
  double *x, *R;
  const float *ct, *st;
  const int32_t *pos;
  int64_t T;
  int H, hd;
} gt__rope_ctx;

static double gt__rope_loss(void *p) {
  const gt__rope_ctx *c = p;
  const int half = c->hd / 2;
  double L = 0;
  for (int64_t t = 0; t < c->T; t++)
    for (int h = 0; h < c->H; h++) {
      const int64_t o = (t * c->H + h) * c->hd;
      for (int i = 0; i < half; i++) {
        const double cs = c->ct[c->pos[t] * half + i], sn = c->st[c->pos[t] * half + i];
        const double x1 = c->x[o + i], x2 = c->x[o + i + half];
        L += (x1 * cs - x2 * sn) * c->R[o + i] + (x2 * cs + x1 * sn) * c->R[o + i + half];
      }
    }
  return L;
}

START_TEST(test_rope_fd) {
  const int P = 32;
  uint64_t seed = 32;
  const gt__rope_cfg cfgs[] = {{8, 10000.0, 1.0, 1.0}, {16, 1e6, 8.0, 0.25}};
  for (int ci = 0; ci < 2; ci++) {
    const gt__rope_cfg *cf = &cfgs[ci];
    const int half = cf->hd / 2, H = 2;
    const int64_t T = 3, n = T * H * cf->hd;
    float *ct = gt_test_zeros(P * half), *st = gt_test_zeros(P * half);
    gt_rope_table_fill(ct, st, P, cf->hd, cf->base, cf->scale, cf->frac);
    const int32_t pos[3] = {0, 7, 31};
    float *x = gt_test_alloc_fill(n, &seed, -2, 2), *R = gt_test_alloc_fill(n, &seed, -1, 1);
    float *g = gt_test_copy(R, n);
    gt_rope_backward(g, pos, ct, st, T, H, cf->hd);
    gt__rope_ctx c = {gt_test_to_double(x, n), gt_test_to_double(R, n), ct, st, pos, T, H, cf->hd};
    double *gx = malloc(n * sizeof(double));
    gt_test_central_diff(gx, c.x, n, FD_H, gt__rope_loss, &c);
    gt_test_check_err(ci == 0 ? "rope dx vs FD (fraction 1)" : "rope dx vs FD (fraction 0.25, scale 8)",
              gt_test_scaled_err_d(g, gx, n), TOL_FD);
    free(ct); free(st); free(x); free(R); free(g); free(c.x); free(c.R); free(gx);
  }
}
END_TEST

/* ---------- geglu ---------- */

/* 0.5 x (1 + tanh u) written as x * sigmoid(2u): the literal form cancels
 * even in double once x < -6 or so. */
static double gt__gelu_d(double x) {
  const double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u));
}

START_TEST(test_geglu_vs_ref) {
  const int64_t ns[] = {0, 1, 3, 17, 1000, 4099, 70001};
  uint64_t seed = 41;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
    const int64_t n = ns[a];
    char what[96];
    float *g = gt_test_alloc_fill(n, &seed, -8, 8), *u = gt_test_alloc_fill(n, &seed, -2, 2);
    float *dy = gt_test_alloc_fill(n, &seed, -1, 1);
    float *y = gt_test_zeros(n), *yr = gt_test_zeros(n);
    gt_geglu_forward(y, g, u, n);
    gt_geglu_forward_ref(yr, g, u, n);
    /* The reference loses every bit of 1 + tanh(u) for x << 0; compare with an
     * absolute floor of 1 (relative above it). */
    snprintf(what, sizeof what, "geglu fwd vs ref n=%ld (rel, floor 1)", (long)n);
    gt_test_check_err(what, gt_test_max_rel_err(y, yr, n, 1.0), TOL_REF);
    /* and the fast one is accurate elementwise against double. For x << 0
     * gelu ~ x e^(-2u), whose relative error is |2u| times that of u (up to
     * 50 float ulp at x = -8, in any float code): below |y| = 1e-3 the
     * comparison is absolute. */
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
      const double ex = gt__gelu_d(g[i]) * u[i];
      const double e = fabs(y[i] - ex) / fmax(fabs(ex), 1e-3);
      if (e > worst) worst = e;
    }
    snprintf(what, sizeof what, "geglu fwd vs double n=%ld (rel, floor 1e-3)", (long)n);
    gt_test_check_err(what, worst, 2e-6);

    float *dg = gt_test_alloc_fill(n, &seed, -1, 1), *dgr = gt_test_copy(dg, n);
    float *du = gt_test_alloc_fill(n, &seed, -1, 1), *dur = gt_test_copy(du, n);
    gt_geglu_backward(dg, du, dy, g, u, n);
    gt_geglu_backward_ref(dgr, dur, dy, g, u, n);
    snprintf(what, sizeof what, "geglu bwd dgate vs ref n=%ld (rel, floor 1)", (long)n);
    gt_test_check_err(what, gt_test_max_rel_err(dg, dgr, n, 1.0), 4e-6);
    snprintf(what, sizeof what, "geglu bwd dup vs ref n=%ld (rel, floor 1)", (long)n);
    gt_test_check_err(what, gt_test_max_rel_err(du, dur, n, 1.0), TOL_REF);

    float *dg1 = gt_test_zeros(n), *du1 = gt_test_zeros(n), *dg1r = gt_test_zeros(n), *du1r = gt_test_zeros(n);
    gt_geglu_backward(dg1, NULL, dy, g, u, n);
    gt_geglu_backward(NULL, du1, dy, g, u, n);
    gt_geglu_backward_ref(dg1r, NULL, dy, g, u, n);
    gt_geglu_backward_ref(NULL, du1r, dy, g, u, n);
    gt_test_check_err("geglu bwd dgate only", gt_test_max_rel_err(dg1, dg1r, n, 1.0), 4e-6);
    gt_test_check_err("geglu bwd dup only", gt_test_max_rel_err(du1, du1r, n, 1.0), TOL_REF);
    free(g); free(u); free(dy); free(y); free(yr); free(dg); free(dgr); free(du); free(dur);
    free(dg1); free(du1); free(dg1r); free(du1r);
  }
  /* extremes: no NaN from inf * 0 inside the fast formula */
  const float xs[] = {-1e4f, -200.0f, -30.0f, -10.0f, 0.0f, 1e-20f, 10.0f, 200.0f, 1e4f};
  const int64_t m = sizeof xs / sizeof xs[0];
  float ones[9], y[9], yr[9], dg[9] = {0}, dgr[9] = {0};
  for (int i = 0; i < m; i++) ones[i] = 1.0f;
  gt_geglu_forward(y, xs, ones, m);
  gt_geglu_forward_ref(yr, xs, ones, m);
  gt_geglu_backward(dg, NULL, ones, xs, ones, m);
  gt_geglu_backward_ref(dgr, NULL, ones, xs, ones, m);
  for (int i = 0; i < m; i++) {
    ck_assert_msg(isfinite(y[i]) && isfinite(dg[i]), "geglu extreme x=%g: %g %g", xs[i], y[i], dg[i]);
    ck_assert_msg(fabsf(y[i] - yr[i]) <= 1e-6f * fmaxf(1.0f, fabsf(yr[i])), "geglu x=%g", xs[i]);
    ck_assert_msg(fabsf(dg[i] - dgr[i]) <= 1e-6f, "geglu' x=%g: %g vs %g", xs[i], dg[i], dgr[i]);
  }
}
END_TEST

START_TEST(test_geglu_backward_write) {
  /* the written form equals the adding one on zeroed buffers, bit for bit,
   * never reads its destinations (they start as NaN), and matches the
   * reference's write form */
  const int64_t ns[] = {0, 1, 17, 4099, 70001};
  uint64_t seed = 43;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
    const int64_t n = ns[a];
    float *g = gt_test_alloc_fill(n, &seed, -8, 8), *u = gt_test_alloc_fill(n, &seed, -2, 2);
    float *dy = gt_test_alloc_fill(n, &seed, -1, 1);
    for (int which = 0; which < 3; which++) { /* both, dgate only, dup only */
      float *dg = which != 2 ? gt__nans(n) : NULL, *du = which != 1 ? gt__nans(n) : NULL;
      float *adg = which != 2 ? gt_test_zeros(n) : NULL, *adu = which != 1 ? gt_test_zeros(n) : NULL;
      float *rdg = which != 2 ? gt__nans(n) : NULL, *rdu = which != 1 ? gt__nans(n) : NULL;
      gt_geglu_backward_write(dg, du, dy, g, u, n);
      gt_geglu_backward(adg, adu, dy, g, u, n);
      gt_geglu_backward_write_ref(rdg, rdu, dy, g, u, n);
      if (dg) {
        ck_assert_msg(gt__same_values(dg, adg, n), "geglu write dgate n=%ld: not the adding form's values", (long)n);
        gt_test_check_err("geglu write dgate vs ref", gt_test_max_rel_err(dg, rdg, n, 1.0), 4e-6);
      }
      if (du) {
        ck_assert_msg(gt__same_values(du, adu, n), "geglu write dup n=%ld: not the adding form's values", (long)n);
        gt_test_check_err("geglu write dup vs ref", gt_test_max_rel_err(du, rdu, n, 1.0), TOL_REF);
      }
      free(dg); free(du); free(adg); free(adu); free(rdg); free(rdu);
    }
    free(g); free(u); free(dy);
  }
}
END_TEST

typedef struct {
  double *g, *u, *R;
  int64_t n;
} gt__geglu_ctx;

static double gt__geglu_loss(void *p) {
  const gt__geglu_ctx *c = p;
  double L = 0;
  for (int64_t i = 0; i < c->n; i++) L += gt__gelu_d(c->g[i]) * c->u[i] * c->R[i];
  return L;
}

START_TEST(test_geglu_fd) {
  const int64_t n = 33;
  uint64_t seed = 42;
  float *g = gt_test_alloc_fill(n, &seed, -5, 5), *u = gt_test_alloc_fill(n, &seed, -2, 2);
  float *R = gt_test_alloc_fill(n, &seed, -1, 1);
  float *dg = gt_test_zeros(n), *du = gt_test_zeros(n);
  gt_geglu_backward(dg, du, R, g, u, n);
  gt__geglu_ctx c = {gt_test_to_double(g, n), gt_test_to_double(u, n), gt_test_to_double(R, n), n};
  double *gg = malloc(n * sizeof(double)), *gu = malloc(n * sizeof(double));
  gt_test_central_diff(gg, c.g, n, FD_H, gt__geglu_loss, &c);
  gt_test_central_diff(gu, c.u, n, FD_H, gt__geglu_loss, &c);
  gt_test_check_err("geglu dgate vs FD", gt_test_scaled_err_d(dg, gg, n), TOL_FD);
  gt_test_check_err("geglu dup vs FD", gt_test_scaled_err_d(du, gu, n), TOL_FD);
  /* the reference too */
  float *dgr = gt_test_zeros(n), *dur = gt_test_zeros(n);
  gt_geglu_backward_ref(dgr, dur, R, g, u, n);
  gt_test_check_err("geglu ref dgate vs FD", gt_test_scaled_err_d(dgr, gg, n), TOL_FD);
  gt_test_check_err("geglu ref dup vs FD", gt_test_scaled_err_d(dur, gu, n), TOL_FD);
  free(g); free(u); free(R); free(dg); free(du); free(c.g); free(c.u); free(c.R); free(gg);
  free(gu); free(dgr); free(dur);
}
END_TEST

/* ---------- embedding ---------- */

START_TEST(test_embedding_vs_ref) {
  const int64_t ns[] = {0, 1, 3, 17, 1000};
  const int dims[] = {1, 5, 33, 257};
  const int Vocab = 7; /* small, so tokens repeat */
  uint64_t seed = 51;
  for (size_t a = 0; a < 5; a++)
    for (size_t b = 0; b < 4; b++) {
      const int64_t n = ns[a];
      const int dim = dims[b];
      const float scale = 33.941125f;
      char what[96];
      int32_t *tok = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
      gt_test_fill_ids(tok, n, &seed, 0, Vocab);
      float *tab = gt_test_alloc_fill((int64_t)Vocab * dim, &seed, -1, 1);
      float *y = gt_test_zeros(n * dim), *yr = gt_test_zeros(n * dim);
      gt_embedding_forward(y, tok, tab, n, dim, scale);
      gt_embedding_forward_ref(yr, tok, tab, n, dim, scale);
      ck_assert_msg(gt_test_same_bits(y, yr, n * dim), "embedding forward n=%ld dim=%d", (long)n, dim);
      float *dy = gt_test_alloc_fill(n * dim, &seed, -1, 1);
      float *dt = gt_test_alloc_fill((int64_t)Vocab * dim, &seed, -1, 1);
      float *dtr = gt_test_copy(dt, (int64_t)Vocab * dim);
      gt_embedding_backward(dt, dy, tok, n, dim, scale);
      gt_embedding_backward_ref(dtr, dy, tok, n, dim, scale);
      snprintf(what, sizeof what, "embedding bwd n=%ld dim=%d", (long)n, dim);
      gt_test_check_err(what, gt_test_scaled_err(dt, dtr, (int64_t)Vocab * dim), TOL_REF);
      free(tok); free(tab); free(y); free(yr); free(dy); free(dt); free(dtr);
    }
}
END_TEST

typedef struct {
  double *tab, *R;
  const int32_t *tok;
  int64_t n;
  int dim;
  double scale;
} gt__emb_ctx;

static double gt__emb_loss(void *p) {
  const gt__emb_ctx *c = p;
  double L = 0;
  for (int64_t i = 0; i < c->n; i++)
    for (int j = 0; j < c->dim; j++)
      L += c->tab[c->tok[i] * c->dim + j] * c->scale * c->R[i * c->dim + j];
  return L;
}

START_TEST(test_embedding_fd) {
  const int64_t n = 9;
  const int dim = 5, Vocab = 4;
  const int32_t tok[9] = {1, 3, 1, 0, 1, 3, 2, 2, 1}; /* repeats on purpose */
  uint64_t seed = 52;
  float *tab = gt_test_alloc_fill(Vocab * dim, &seed, -1, 1), *R = gt_test_alloc_fill(n * dim, &seed, -1, 1);
  float *dt = gt_test_zeros(Vocab * dim);
  gt_embedding_backward(dt, R, tok, n, dim, 2.5f);
  gt__emb_ctx c = {gt_test_to_double(tab, Vocab * dim), gt_test_to_double(R, n * dim), tok, n, dim, 2.5};
  double *gt = malloc(Vocab * dim * sizeof(double));
  gt_test_central_diff(gt, c.tab, Vocab * dim, FD_H, gt__emb_loss, &c);
  gt_test_check_err("embedding dtable vs FD", gt_test_scaled_err_d(dt, gt, Vocab * dim), TOL_FD);
  free(tab); free(R); free(dt); free(c.tab); free(c.R); free(gt);
}
END_TEST

START_TEST(test_embedding_deterministic) {
  const int64_t n = 2000;
  const int dim = 257, Vocab = 11;
  uint64_t seed = 53;
  int32_t *tok = malloc(n * sizeof(int32_t));
  gt_test_fill_ids(tok, n, &seed, 0, Vocab);
  float *dy = gt_test_alloc_fill(n * dim, &seed, -1, 1);
  float *dt[3];
  for (int t = 0; t < 3; t++) {
    gt_team_set_process(t == 0 ? 1 : 2);
    dt[t] = gt_test_zeros((int64_t)Vocab * dim);
    gt_embedding_backward(dt[t], dy, tok, n, dim, 1.5f);
  }
  ck_assert_msg(gt_test_same_bits(dt[0], dt[1], (int64_t)Vocab * dim), "embedding bwd: 1 vs 2 threads");
  ck_assert_msg(gt_test_same_bits(dt[1], dt[2], (int64_t)Vocab * dim), "embedding bwd: run to run");
  for (int t = 0; t < 3; t++) free(dt[t]);
  free(tok); free(dy);
}
END_TEST

/* ---------- cross-entropy ---------- */

static void gt__xent_d(double *loss, double *lse, const float *l, const int32_t *tg,
                       int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; r++) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; j++) mx = fmax(mx, l[r * V + j]);
    for (int64_t j = 0; j < V; j++) s += exp((double)l[r * V + j] - mx);
    lse[r] = mx + log(s);
    loss[r] = tg[r] < 0 ? 0.0 : lse[r] - l[r * V + tg[r]];
  }
}

START_TEST(test_xent_vs_double_and_ref) {
  const int64_t rows_list[] = {1, 3, 17, 300};
  const int64_t Vs[] = {1, 5, 33, 257, 4099};
  uint64_t seed = 61;
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 5; b++) {
      const int64_t rows = rows_list[a], V = Vs[b];
      char what[96];
      float *l = gt_test_alloc_fill(rows * V, &seed, -20, 20);
      int32_t *tg = malloc(rows * sizeof(int32_t));
      for (int64_t r = 0; r < rows; r++)
        tg[r] = (r % 3 == 2) ? -1 : (int32_t)(gt_test_rand_u64(&seed) % V);
      if (rows >= 3) /* far-off logits: the max must be subtracted */
        for (int64_t j = 0; j < V; j++) l[1 * V + j] += 10000.0f;
      float *loss = gt_test_zeros(rows), *lse = gt_test_zeros(rows);
      float *lossr = gt_test_zeros(rows), *lser = gt_test_zeros(rows);
      double *ld = malloc(rows * sizeof(double)), *lsed = malloc(rows * sizeof(double));
      gt_xent_forward(loss, lse, l, tg, rows, V);
      gt_xent_forward_ref(lossr, lser, l, tg, rows, V);
      gt__xent_d(ld, lsed, l, tg, rows, V);
      /* absolute error against double, per unit of |lse| (float spacing) */
      double wl = 0, wlr = 0, wlse = 0;
      for (int64_t r = 0; r < rows; r++) {
        const double sc = 1.0 + fabs(lsed[r]);
        wl = fmax(wl, fabs(loss[r] - ld[r]) / sc);
        wlr = fmax(wlr, fabs(lossr[r] - ld[r]) / sc);
        wlse = fmax(wlse, fabs(lse[r] - lsed[r]) / sc);
        if (tg[r] < 0) {
          ck_assert_msg(loss[r] == 0.0f && lossr[r] == 0.0f, "masked row %ld has a loss", (long)r);
        }
      }
      snprintf(what, sizeof what, "xent loss vs double rows=%ld V=%ld", (long)rows, (long)V);
      gt_test_check_err(what, wl, 1e-6);
      gt_test_check_err("xent ref loss vs double", wlr, 1e-6);
      gt_test_check_err("xent lse vs double", wlse, 1e-6);

      float *w = gt_test_alloc_fill(rows, &seed, 0, 2);
      float *d = gt_test_alloc_fill(rows * V, &seed, -1, 1), *dr = gt_test_zeros(rows * V);
      gt_xent_backward(d, l, lse, tg, w, rows, V, 0.0f);
      gt_xent_backward_ref(dr, l, lse, tg, w, rows, V, 0.0f);
      snprintf(what, sizeof what, "xent bwd vs ref rows=%ld V=%ld", (long)rows, (long)V);
      gt_test_check_err(what, gt_test_scaled_err(d, dr, rows * V), TOL_REF);
      for (int64_t r = 0; r < rows; r++)
        if (tg[r] < 0)
          for (int64_t j = 0; j < V; j++)
            ck_assert_msg(d[r * V + j] == 0.0f, "masked row %ld: dlogits not 0", (long)r);

      /* in place: dlogits aliases logits */
      float *inplace = gt_test_copy(l, rows * V);
      gt_xent_backward(inplace, inplace, lse, tg, w, rows, V, 0.0f);
      ck_assert_msg(gt_test_same_bits(inplace, d, rows * V), "xent bwd in place differs");
      float *inplace_r = gt_test_copy(l, rows * V);
      gt_xent_backward_ref(inplace_r, inplace_r, lse, tg, w, rows, V, 0.0f);
      ck_assert_msg(gt_test_same_bits(inplace_r, dr, rows * V), "xent ref bwd in place differs");

      /* row_weight NULL means weight 1 */
      float *ones = malloc(rows * sizeof(float));
      for (int64_t r = 0; r < rows; r++) ones[r] = 1.0f;
      float *d1 = gt_test_zeros(rows * V), *d2 = gt_test_zeros(rows * V);
      gt_xent_backward(d1, l, lse, tg, NULL, rows, V, 0.0f);
      gt_xent_backward(d2, l, lse, tg, ones, rows, V, 0.0f);
      ck_assert(gt_test_same_bits(d1, d2, rows * V));
      free(l); free(tg); free(loss); free(lse); free(lossr); free(lser); free(ld); free(lsed);
      free(w); free(d); free(dr); free(inplace); free(inplace_r); free(ones); free(d1); free(d2);
    }
}
END_TEST

typedef struct {
  double *l, *w;
  const int32_t *tg;
  int64_t rows, V;
} gt__xent_ctx;

static double gt__xent_loss(void *p) {
  const gt__xent_ctx *c = p;
  double L = 0;
  for (int64_t r = 0; r < c->rows; r++) {
    if (c->tg[r] < 0) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c->V; j++) mx = fmax(mx, c->l[r * c->V + j]);
    for (int64_t j = 0; j < c->V; j++) s += exp(c->l[r * c->V + j] - mx);
    L += c->w[r] * (mx + log(s) - c->l[r * c->V + c->tg[r]]);
  }
  return L;
}

START_TEST(test_xent_fd) {
  const int64_t rows = 4, V = 7;
  const int32_t tg[4] = {3, -1, 0, 6};
  uint64_t seed = 62;
  float *l = gt_test_alloc_fill(rows * V, &seed, -3, 3), *w = gt_test_alloc_fill(rows, &seed, 0.5f, 2);
  float *loss = gt_test_zeros(rows), *lse = gt_test_zeros(rows), *d = gt_test_zeros(rows * V);
  gt_xent_forward(loss, lse, l, tg, rows, V);
  gt_xent_backward(d, l, lse, tg, w, rows, V, 0.0f);
  gt__xent_ctx c = {gt_test_to_double(l, rows * V), gt_test_to_double(w, rows), tg, rows, V};
  double *gl = malloc(rows * V * sizeof(double));
  gt_test_central_diff(gl, c.l, rows * V, FD_H, gt__xent_loss, &c);
  gt_test_check_err("xent dlogits vs FD (one row masked)", gt_test_scaled_err_d(d, gl, rows * V), TOL_FD);
  /* the weighted loss itself */
  double L = 0;
  for (int64_t r = 0; r < rows; r++) L += (double)w[r] * loss[r];
  gt_test_check_err("xent weighted loss vs double", fabs(L - gt__xent_loss(&c)) / fabs(gt__xent_loss(&c)), 1e-6);
  free(l); free(w); free(loss); free(lse); free(d); free(c.l); free(c.w); free(gl);
}
END_TEST

/* ---------- softcap ---------- */

START_TEST(test_softcap_vs_ref) {
  const int64_t ns[] = {0, 1, 3, 17, 1000, 70001};
  const float caps[] = {30.0f, 50.0f};
  const float ranges[] = {100.0f, 1.0f, 1e-3f}; /* big, moderate, near 0 */
  uint64_t seed = 71;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (int ci = 0; ci < 2; ci++)
      for (int ri = 0; ri < 3; ri++) {
        const int64_t n = ns[a];
        const float cap = caps[ci];
        char what[96];
        float *x = gt_test_alloc_fill(n, &seed, -ranges[ri], ranges[ri]);
        float *y = gt_test_copy(x, n), *yr = gt_test_copy(x, n);
        gt_softcap_forward(y, n, cap);
        gt_softcap_forward_ref(yr, n, cap);
        double worst = 0, worst_r = 0;
        for (int64_t i = 0; i < n; i++) {
          const double ex = cap * tanh((double)x[i] / cap);
          worst = fmax(worst, fabs(y[i] - ex) / fmax(fabs(ex), 1e-30));
          worst_r = fmax(worst_r, fabs(y[i] - yr[i]) / fmax(fabs(yr[i]), 1e-30));
        }
        snprintf(what, sizeof what, "softcap fwd vs double n=%ld cap=%g |x|<%g (elem rel)",
                 (long)n, cap, ranges[ri]);
        gt_test_check_err(what, worst, 1e-6);
        gt_test_check_err("softcap fwd vs ref (elementwise rel)", worst_r, TOL_REF);
        float *dx = gt_test_alloc_fill(n, &seed, -1, 1), *dxr = gt_test_copy(dx, n);
        gt_softcap_backward(dx, yr, n, cap);
        gt_softcap_backward_ref(dxr, yr, n, cap);
        gt_test_check_err("softcap bwd vs ref", gt_test_scaled_err(dx, dxr, n), TOL_REF);
        free(x); free(y); free(yr); free(dx); free(dxr);
      }
  float ex[5] = {INFINITY, -INFINITY, NAN, 1e30f, -0.0f};
  gt_softcap_forward(ex, 5, 30.0f);
  ck_assert(ex[0] == 30.0f && ex[1] == -30.0f && isnan(ex[2]) && ex[3] == 30.0f && ex[4] == 0.0f);
}
END_TEST

typedef struct {
  double *x, *R;
  int64_t n;
  double cap;
} gt__sc_ctx;

static double gt__sc_loss(void *p) {
  const gt__sc_ctx *c = p;
  double L = 0;
  for (int64_t i = 0; i < c->n; i++) L += c->cap * tanh(c->x[i] / c->cap) * c->R[i];
  return L;
}

START_TEST(test_softcap_fd) {
  const int64_t n = 17;
  const float cap = 5.0f;
  uint64_t seed = 72;
  float *x = gt_test_alloc_fill(n, &seed, -15, 15), *R = gt_test_alloc_fill(n, &seed, -1, 1);
  float *y = gt_test_copy(x, n), *d = gt_test_copy(R, n);
  gt_softcap_forward(y, n, cap);
  gt_softcap_backward(d, y, n, cap);
  gt__sc_ctx c = {gt_test_to_double(x, n), gt_test_to_double(R, n), n, cap};
  double *gx = malloc(n * sizeof(double));
  gt_test_central_diff(gx, c.x, n, FD_H, gt__sc_loss, &c);
  gt_test_check_err("softcap dx vs FD", gt_test_scaled_err_d(d, gx, n), TOL_FD);
  free(x); free(R); free(y); free(d); free(c.x); free(c.R); free(gx);
}
END_TEST

/* ---------- AdamW ---------- */

START_TEST(test_adamw_by_hand) {
  /* Step 1 from zero state: the bias corrections make mh = g and vh = g^2,
   * so the Adam direction is g / (|g| + eps), i.e. about sign(g):
   *   p = {1, -2, 0.5}, g = {0.1, -0.2, 0}, lr 0.1, b1 0.9, b2 0.999,
   *   eps 1e-8, wd 0.01
   *   m = (1 - b1) g   = {0.01, -0.02, 0}
   *   v = (1 - b2) g^2 = {1e-5, 4e-5, 0}
   *   u = g/(|g|+1e-8) + 0.01 p = {1.0099999, -1.01999995, 0.005}
   *   p - 0.1 u        = {0.89900001, -1.898000005, 0.4995}
   * The hyperparameters are floats, so 1 - b2 is 1 - 0.999f = 0.00099998713
   * (optax, with Python's double 0.999, gets 0.001f): v is 1.3e-5 below the
   * decimal value. At t = 1 the bias correction (formed from the same float
   * b2) cancels it, so p comes out as written. */
  for (int fast = 0; fast < 2; fast++) {
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, -0.2f, 0.0f}, m[3] = {0}, v[3] = {0};
    const gt_adamw_hparams h = {.lr = 0.1f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f,
                                .eps_root = 0.0f, .weight_decay = 0.01f, .t = 1, .grad_scale = 1.0f};
    (fast ? gt_adamw_update : gt_adamw_update_ref)(p, g, m, v, 3, &h);
    const double pe[3] = {0.89900001, -1.898000005, 0.4995};
    const double me[3] = {0.01, -0.02, 0.0};
    const double ve[3] = {0.99998713e-5, 3.9999485e-5, 0.0}; /* (1 - 0.999f) g^2 */
    for (int i = 0; i < 3; i++) {
      ck_assert_msg(fabs(p[i] - pe[i]) <= 1.5e-7, "%s p[%d] = %.9g, want %.9g",
                    fast ? "fast" : "ref", i, p[i], pe[i]);
      ck_assert_msg(fabs(m[i] - me[i]) <= 5e-7 * fabs(me[i]) && fabs(v[i] - ve[i]) <= 5e-7 * ve[i],
                    "m[%d] = %.9g, v[%d] = %.9g", i, m[i], i, v[i]);
    }
  }
  /* Step 2 from a nonzero state, with clipping scale and eps_root:
   *   p 2, g 0.4, grad_scale 0.5 -> g' = 0.2; m 0.05, v 0.001; t = 2;
   *   lr 0.01, b1 0.9, b2 0.99, eps 1e-8, eps_root 1e-6, wd 0.1
   *   m  = 0.9*0.05 + 0.1*0.2       = 0.065
   *   v  = 0.99*0.001 + 0.01*0.04   = 0.00139
   *   mh = 0.065 / (1 - 0.81)       = 0.34210526
   *   vh = 0.00139 / (1 - 0.9801)   = 0.069849246
   *   u  = mh / (sqrt(vh + 1e-6) + 1e-8) + 0.1*2 = 1.2944217 + 0.2 = 1.4944217
   *   p  = 2 - 0.01 u               = 1.98505578 */
  for (int fast = 0; fast < 2; fast++) {
    float p = 2.0f, g = 0.4f, m = 0.05f, v = 0.001f;
    const gt_adamw_hparams h = {.lr = 0.01f, .b1 = 0.9f, .b2 = 0.99f, .eps = 1e-8f,
                                .eps_root = 1e-6f, .weight_decay = 0.1f, .t = 2, .grad_scale = 0.5f};
    (fast ? gt_adamw_update : gt_adamw_update_ref)(&p, &g, &m, &v, 1, &h);
    /* float b1, b2: 1 - 0.9f and 1 - 0.99f are off the decimals by 2.4e-7
     * and 9.5e-7 relative, hence the tolerances */
    ck_assert_msg(fabs(m - 0.065) <= 5e-7 * 0.065 && fabs(v - 0.00139) <= 5e-7 * 0.00139,
                  "m %.9g v %.9g", m, v);
    ck_assert_msg(fabs(p - 1.98505578) <= 2.5e-7, "%s p = %.9g", fast ? "fast" : "ref", p);
  }
}
END_TEST

START_TEST(test_adamw_vs_ref) {
  const int64_t ns[] = {0, 1, 3, 17, 1000, 100003};
  uint64_t seed = 81;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
    const int64_t n = ns[a];
    char what[96];
    float *p = gt_test_alloc_fill(n, &seed, -1, 1), *pr = gt_test_copy(p, n);
    float *m = gt_test_zeros(n), *mr = gt_test_zeros(n), *v = gt_test_zeros(n), *vr = gt_test_zeros(n);
    for (int step = 1; step <= 3; step++) {
      float *g = gt_test_alloc_fill(n, &seed, -1e-2f, 1e-2f);
      const gt_adamw_hparams h = {.lr = 3e-4f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f,
                                  .eps_root = 0.0f, .weight_decay = 0.1f, .t = step,
                                  .grad_scale = step == 2 ? 0.25f : 1.0f};
      gt_adamw_update(p, g, m, v, n, &h);
      gt_adamw_update_ref(pr, g, mr, vr, n, &h);
      free(g);
    }
    snprintf(what, sizeof what, "adamw 3 steps n=%ld: p", (long)n);
    gt_test_check_err(what, gt_test_max_rel_err(p, pr, n, 1e-30), 1e-6);
    gt_test_check_err("adamw 3 steps: m", gt_test_max_rel_err(m, mr, n, 1e-30), 1e-6);
    gt_test_check_err("adamw 3 steps: v", gt_test_max_rel_err(v, vr, n, 1e-30), 1e-6);
    free(p); free(pr); free(m); free(mr); free(v); free(vr);
  }
}
END_TEST

/* ---------- sum of squares ---------- */

/* The dropout kernels (LoRA's input dropout): the mask drawn as an integer
 * comparison against gt_dropout_threshold(p) keeps exactly the elements
 * whose draw, as a double in [0, 1), is >= p (the scalar reference), for
 * p at 0, tiny, common, 1/3 and near 1, on row offsets and lengths around
 * the vector width and the chunk (512); a draw exactly at p is kept and
 * one a step above p's threshold dropped; apply, apply16 and undo give
 * their references' bits (undo leaves a dropped -0 as it is). */
START_TEST(test_dropout_vs_ref) {
  const double ps[] = {0.0, 1e-300, 0.05, 0.1, 1.0 / 3.0, 0.5, 0.999, 1.0}; /* (p = 1: inv is infinite, nothing kept) */
  const int64_t lens[] = {1, 7, 8, 9, 63, 511, 512, 513, 1500};
  uint64_t st = 99;
  int64_t kept = 0, all = 0;
  for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
      const int64_t n = lens[li], c0 = (int64_t)(gt_test_rand_u64(&st) % 5000);
      const uint64_t key = gt_test_rand_u64(&st);
      const float inv = (float)(1.0 / (1.0 - ps[pi]));
      uint8_t *k1 = malloc((size_t)n), *k2 = malloc((size_t)n);
      gt_dropout_mask(k1, key, c0, n, gt_dropout_threshold(ps[pi]));
      gt_dropout_mask_ref(k2, key, c0, n, ps[pi]);
      ck_assert_msg(memcmp(k1, k2, (size_t)n) == 0, "mask: p %g, n %lld, c0 %lld", ps[pi], (long long)n,
                    (long long)c0);
      for (int64_t i = 0; i < n; i++) kept += k1[i], all++;
      float *x = gt_test_alloc_fill(n, &st, -2, 2), *y1 = malloc(sizeof(float) * (size_t)n),
            *y2 = malloc(sizeof(float) * (size_t)n);
      gt_dropout_apply(y1, x, key, n, gt_dropout_threshold(ps[pi]), inv);
      gt_dropout_apply_ref(y2, x, key, n, ps[pi], inv);
      ck_assert_msg(gt_test_same_bits(y1, y2, n), "apply: p %g, n %lld", ps[pi], (long long)n);
      uint16_t *x16 = malloc(2 * (size_t)n), *z1 = malloc(2 * (size_t)n), *z2 = malloc(2 * (size_t)n);
      gt_bf16_pack_ref(x16, x, n);
      gt_dropout_apply16(z1, x16, key, n, gt_dropout_threshold(ps[pi]), inv);
      gt_dropout_apply16_ref(z2, x16, key, n, ps[pi], inv);
      ck_assert_msg(memcmp(z1, z2, 2 * (size_t)n) == 0, "apply16: p %g, n %lld", ps[pi], (long long)n);
      float *d1 = gt_test_alloc_fill(n, &st, -1, 1), *d2 = malloc(sizeof(float) * (size_t)n);
      d1[0] = -0.0f;
      memcpy(d2, d1, sizeof(float) * (size_t)n);
      gt_dropout_undo(d1, x, key, n, gt_dropout_threshold(ps[pi]), inv);
      gt_dropout_undo_ref(d2, x, key, n, ps[pi], inv);
      ck_assert_msg(gt_test_same_bits(d1, d2, n), "undo: p %g, n %lld", ps[pi], (long long)n);
      free(k1), free(k2), free(x), free(y1), free(y2), free(x16), free(z1), free(z2), free(d1), free(d2);
    }
  ck_assert(kept > 0 && kept < all);
  /* undo leaves a dropped element's gradient as it is, -0 included (adding
   * 0 would make it +0): a key whose column 0 is dropped at p = 0.5 */
  {
    uint64_t kk = 1;
    uint8_t k0 = 1;
    for (; k0; kk++) gt_dropout_mask_ref(&k0, kk, 0, 1, 0.5);
    kk--;
    float dx[2] = {-0.0f, -0.0f}, g[2] = {0.25f, 0.25f};
    gt_dropout_undo(dx, g, kk, 1, gt_dropout_threshold(0.5), 2.0f);
    ck_assert_msg(dx[0] == 0.0f && signbit(dx[0]), "undo of a dropped -0 gave %g", (double)dx[0]);
    gt_dropout_undo_ref(dx + 1, g, kk, 1, 0.5, 2.0f);
    ck_assert(dx[1] == 0.0f && signbit(dx[1]));
  }
  /* the boundary: p equal to one element's draw keeps it; the next
   * representable p above drops it */
  const uint64_t key = 12345;
  uint8_t k;
  gt_dropout_mask(&k, key, 0, 1, 0);
  ck_assert_int_eq(k, 1); /* p = 0 keeps everything */
  for (int64_t c = 0; c < 64; c++) {
    double lo = 0.0, hi = 1.0; /* find the element's draw u by bisection on the reference */
    for (int it = 0; it < 200; it++) {
      double mid = (lo + hi) / 2;
      gt_dropout_mask_ref(&k, key, c, 1, mid);
      if (k) lo = mid; else hi = mid;
    }
    gt_dropout_mask(&k, key, c, 1, gt_dropout_threshold(lo));
    ck_assert_msg(k == 1, "column %lld: p at its draw %.17g dropped", (long long)c, lo);
    gt_dropout_mask(&k, key, c, 1, gt_dropout_threshold(nextafter(lo, 1.0)));
    ck_assert_msg(k == 0, "column %lld: p above its draw %.17g kept", (long long)c, lo);
  }
}
END_TEST

START_TEST(test_sumsq) {
  const float three[3] = {1.0f, 2.0f, 3.0f};
  ck_assert(gt_sumsq(three, 3) == 14.0 && gt_sumsq_ref(three, 3) == 14.0);
  ck_assert(gt_sumsq(three, 0) == 0.0 && gt_sumsq_ref(three, 0) == 0.0);
  /* across the 64K chunk size and the 256-chunk batch */
  const int64_t ns[] = {1, 3, 17, 1000, 65536, 65537, 200003, 256 * 65536 + 70001};
  uint64_t seed = 91;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
    const int64_t n = ns[a];
    char what[96];
    float *x = gt_test_alloc_fill(n, &seed, -3, 3);
    gt_team_set_process(1);
    const double s1 = gt_sumsq(x, n);
    gt_team_set_process(2);
    const double s2 = gt_sumsq(x, n);
    const double s2b = gt_sumsq(x, n);
    const double sr = gt_sumsq_ref(x, n);
    long double sl = 0;
    for (int64_t i = 0; i < n; i++) sl += (long double)x[i] * x[i];
    ck_assert_msg(s1 == s2 && s2 == s2b, "sumsq n=%ld: %.17g (1 thread) vs %.17g (2)", (long)n, s1, s2);
    /* one long sequential double sum drifts by up to n * 1e-16: the
     * reference is the less accurate of the two */
    snprintf(what, sizeof what, "sumsq n=%ld vs ref (rel)", (long)n);
    gt_test_check_err(what, fabs(s1 - sr) / sr, 1e-10);
    snprintf(what, sizeof what, "sumsq n=%ld vs long double (rel)", (long)n);
    gt_test_check_err(what, (double)(fabsl(s1 - sl) / sl), 1e-13);
    free(x);
  }
}
END_TEST

/* ---------- dot and scale (Gemma 4's layer_scalar) ---------- */

START_TEST(test_dot) {
  const float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {-4.0f, 0.5f, 2.0f};
  ck_assert(gt_dot(a, b, 3) == 3.0 && gt_dot_ref(a, b, 3) == 3.0);
  const int64_t ns[] = {1, 17, 65537, 3 * 65536 + 11};
  uint64_t seed = 93;
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    const int64_t n = ns[k];
    float *x = gt_test_alloc_fill(n, &seed, -3, 3), *y = gt_test_alloc_fill(n, &seed, -3, 3);
    gt_team_set_process(1);
    const double d1 = gt_dot(x, y, n);
    gt_team_set_process(2);
    const double d2 = gt_dot(x, y, n);
    long double dl = 0, al = 0;
    for (int64_t i = 0; i < n; i++) dl += (long double)x[i] * y[i], al += fabsl((long double)x[i] * y[i]);
    ck_assert_msg(d1 == d2, "dot n=%ld: %.17g (1 thread) vs %.17g (2)", (long)n, d1, d2);
    /* relative to the sum of |terms|: the dot itself may nearly cancel */
    gt_test_check_err("dot vs long double", (double)(fabsl(d1 - dl) / al), 1e-15);
    gt_test_check_err("dot ref vs long double", (double)(fabsl(gt_dot_ref(x, y, n) - dl) / al), 1e-13);
    /* the sum of squares is the dot of x with itself, bit for bit */
    ck_assert(gt_sumsq(x, n) == gt_dot(x, x, n));
    free(x);
    free(y);
  }
}
END_TEST

typedef struct {
  double *x, *R, s;
  int64_t n;
} gt__scale_ctx;

static double gt__scale_loss(void *p) {
  const gt__scale_ctx *c = p;
  double L = 0;
  for (int64_t i = 0; i < c->n; i++) L += c->s * c->x[i] * c->R[i];
  return L;
}

START_TEST(test_scale_vs_ref_and_fd) {
  const int64_t ns[] = {1, 19, 70001};
  uint64_t seed = 94;
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    const int64_t n = ns[k];
    const float sc = 0.8125f;
    float *x = gt_test_alloc_fill(n, &seed, -2, 2), *R = gt_test_alloc_fill(n, &seed, -1, 1);
    float *y = gt_test_zeros(n), *yr = gt_test_zeros(n), *dx = gt_test_zeros(n), *dxr = gt_test_zeros(n);
    float ds = 0.25f, dsr = 0.25f; /* backward adds */
    gt_scale_forward(y, x, sc, n);
    gt_scale_forward_ref(yr, x, sc, n);
    ck_assert(gt_test_same_bits(y, yr, n));
    gt_scale_backward(dx, &ds, R, x, sc, n);
    gt_scale_backward_ref(dxr, &dsr, R, x, sc, n);
    gt_test_check_err("scale bwd dx vs ref", gt_test_scaled_err(dx, dxr, n), TOL_REF);
    gt_test_check_err("scale bwd ds vs ref", fabs((double)ds - dsr) / fabs(dsr), TOL_REF);
    gt_scale_backward(NULL, NULL, R, x, sc, n); /* NULL gradients are skipped */
    if (n < 100) { /* against central differences in double */
      gt__scale_ctx c = {gt_test_to_double(x, n), gt_test_to_double(R, n), sc, n};
      double *gx = malloc((size_t)n * sizeof(double)), gs;
      gt_test_central_diff(gx, c.x, n, FD_H, gt__scale_loss, &c);
      gt_test_central_diff(&gs, &c.s, 1, FD_H, gt__scale_loss, &c);
      gt_test_check_err("scale dx vs FD", gt_test_scaled_err_d(dx, gx, n), TOL_FD);
      gt_test_check_err("scale ds vs FD", fabs((double)ds - 0.25 - gs) / fabs(gs), TOL_FD);
      free(c.x), free(c.R), free(gx);
    }
    free(x), free(R), free(y), free(yr), free(dx), free(dxr);
  }
}
END_TEST

/* ---------- soft-cap fused with the cross-entropy ---------- */

START_TEST(test_softcap_xent_vs_unfused_and_ref) {
  const int64_t rows_list[] = {1, 3, 17, 300};
  const int64_t Vs[] = {1, 5, 33, 257, 4099};
  const float cap = 30.0f;
  uint64_t seed = 65;
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 5; b++) {
      const int64_t rows = rows_list[a], V = Vs[b], n = rows * V;
      char what[128];
      float *l = gt_test_alloc_fill(n, &seed, -60, 60);
      int32_t *tg = malloc(rows * sizeof(int32_t));
      for (int64_t r = 0; r < rows; r++) tg[r] = (r % 3 == 2) ? -1 : (int32_t)(gt_test_rand_u64(&seed) % V);
      float *w = gt_test_alloc_fill(rows, &seed, 0, 2);
      /* unfused fast kernels */
      float *ul = gt_test_copy(l, n), *uloss = gt_test_zeros(rows), *ulse = gt_test_zeros(rows);
      gt_softcap_forward(ul, n, cap);
      gt_xent_forward(uloss, ulse, ul, tg, rows, V);
      float *ud = gt_test_copy(ul, n);
      gt_xent_backward(ud, ud, ulse, tg, w, rows, V, 0.0f);
      gt_softcap_backward(ud, ul, n, cap);
      /* fused, in place as the head runs it */
      float *fl = gt_test_copy(l, n), *floss = gt_test_zeros(rows), *flse = gt_test_zeros(rows);
      gt_softcap_xent_forward(floss, flse, fl, tg, rows, V, cap);
      snprintf(what, sizeof what, "softcap+xent fwd rows=%ld V=%ld: the unfused bits", (long)rows, (long)V);
      ck_assert_msg(gt_test_same_bits(fl, ul, n) && gt_test_same_bits(floss, uloss, rows) &&
                        gt_test_same_bits(flse, ulse, rows),
                    "%s", what);
      gt_softcap_xent_backward(fl, fl, flse, tg, w, rows, V, cap, 0.0f);
      snprintf(what, sizeof what, "softcap+xent bwd rows=%ld V=%ld: the unfused bits", (long)rows, (long)V);
      ck_assert_msg(gt_test_same_bits(fl, ud, n), "%s", what);
      /* the reference, composed from the unfused references */
      float *rl = gt_test_copy(l, n), *rloss = gt_test_zeros(rows), *rlse = gt_test_zeros(rows);
      gt_softcap_xent_forward_ref(rloss, rlse, rl, tg, rows, V, cap);
      float *rd = gt_test_zeros(n);
      gt_softcap_xent_backward_ref(rd, rl, rlse, tg, w, rows, V, cap, 0.0f);
      snprintf(what, sizeof what, "softcap+xent vs ref rows=%ld V=%ld", (long)rows, (long)V);
      gt_test_check_err(what, gt_test_scaled_err(ul, rl, n), TOL_REF);
      gt_test_check_err(what, gt_test_scaled_err(floss, rloss, rows), 1e-5);
      gt_test_check_err(what, gt_test_scaled_err(fl, rd, n), 1e-5);
      free(l); free(tg); free(w); free(ul); free(uloss); free(ulse); free(ud); free(fl); free(floss); free(flse);
      free(rl); free(rloss); free(rlse); free(rd);
    }
}
END_TEST

START_TEST(test_xent_backward_b16) {
  /* The loss's gradient as bf16 patterns (the head's bf16 step, whose
   * products round it as they pack it): gt_xent_backward_b16 and
   * gt_softcap_xent_backward_b16 write the patterns of the float forms'
   * gradients, bit for bit, into a buffer of their own (its row padding
   * untouched) and over the logits themselves (row stride 2 V, as the head
   * runs them), with and without the z-loss, ignored targets, on the
   * threaded path too (300 x 4099); and the references' patterns within
   * one bf16 step. */
  const int64_t rows_list[] = {1, 3, 17, 300};
  const int64_t Vs[] = {1, 5, 33, 257, 4099};
  uint64_t seed = 66;
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 5; b++)
      for (int form = 0; form < 4; form++) {
        const int64_t rows = rows_list[a], V = Vs[b], n = rows * V, ld16 = V + 3;
        const float cap = form & 1 ? 30.0f : 0.0f, z = form & 2 ? 1e-3f : 0.0f;
        char what[128];
        snprintf(what, sizeof what, "xent bwd b16 rows=%ld V=%ld cap=%g z=%g", (long)rows, (long)V, cap, z);
        float *l = gt_test_alloc_fill(n, &seed, -20, 20), *loss = gt_test_zeros(rows), *lse = gt_test_zeros(rows);
        int32_t *tg = malloc(rows * sizeof(int32_t));
        for (int64_t r = 0; r < rows; r++) tg[r] = (r % 3 == 2) ? -1 : (int32_t)(gt_test_rand_u64(&seed) % V);
        float *w = gt_test_alloc_fill(rows, &seed, 0, 2);
        if (cap > 0)
          gt_softcap_xent_forward(loss, lse, l, tg, rows, V, cap); /* l: the capped logits */
        else
          gt_xent_forward(loss, lse, l, tg, rows, V);
        float *d = gt_test_zeros(n);
        if (cap > 0)
          gt_softcap_xent_backward(d, l, lse, tg, w, rows, V, cap, z);
        else
          gt_xent_backward(d, l, lse, tg, w, rows, V, z);
        uint16_t *want = malloc((size_t)n * 2), *own = malloc((size_t)(rows * ld16) * 2);
        gt_bf16_pack(want, d, n);
        for (int64_t i = 0; i < rows * ld16; i++) own[i] = 0xABCD;
        float *over = gt_test_copy(l, n);
        if (cap > 0) {
          gt_softcap_xent_backward_b16(own, ld16, l, lse, tg, w, rows, V, cap, z);
          gt_softcap_xent_backward_b16((uint16_t *)(void *)over, 2 * V, over, lse, tg, w, rows, V, cap, z);
        } else {
          gt_xent_backward_b16(own, ld16, l, lse, tg, w, rows, V, z);
          gt_xent_backward_b16((uint16_t *)(void *)over, 2 * V, over, lse, tg, w, rows, V, z);
        }
        /* the reference: the float reference's gradient packed, within one
         * bf16 step (8e-3) of the largest gradient */
        uint16_t *ref16 = malloc((size_t)n * 2);
        float *rw = gt_test_zeros(n), *fw = gt_test_zeros(n);
        if (cap > 0)
          gt_softcap_xent_backward_b16_ref(ref16, V, l, lse, tg, w, rows, V, cap, z);
        else
          gt_xent_backward_b16_ref(ref16, V, l, lse, tg, w, rows, V, z);
        gt_bf16_unpack(rw, ref16, n);
        gt_bf16_unpack(fw, want, n);
        gt_test_check_err(what, gt_test_scaled_err(fw, rw, n), 8e-3);
        free(ref16), free(rw), free(fw);
        for (int64_t r = 0; r < rows; r++) {
          ck_assert_msg(!memcmp(own + r * ld16, want + r * V, (size_t)V * 2), "%s: own buffer, row %ld", what, (long)r);
          for (int64_t j = V; j < ld16; j++) ck_assert_uint_eq(own[r * ld16 + j], 0xABCD);
          ck_assert_msg(!memcmp((uint16_t *)(void *)over + r * 2 * V, want + r * V, (size_t)V * 2),
                        "%s: over the logits, row %ld", what, (long)r);
        }
        free(l); free(loss); free(lse); free(tg); free(w); free(d); free(want); free(own); free(over);
      }
}
END_TEST

static Suite *gt__suite(void) {
  Suite *s = suite_create("kernels");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_matmul_vs_ref);
  tcase_add_test(tc, test_dot);
  tcase_add_test(tc, test_scale_vs_ref_and_fd);
  tcase_add_test(tc, test_matmul_fd);
  tcase_add_test(tc, test_rmsnorm_vs_ref);
  tcase_add_test(tc, test_rmsnorm_fd);
  tcase_add_test(tc, test_rmsnorm_deterministic);
  tcase_add_test(tc, test_rmsnorm_in_parallel_region);
  tcase_add_test(tc, test_rmsnorm_residual_vs_unfused_and_ref);
  tcase_add_test(tc, test_rmsnorm_residual_deterministic);
  tcase_add_test(tc, test_rope_table);
  tcase_add_test(tc, test_rope_vs_ref);
  tcase_add_test(tc, test_rope_fd);
  tcase_add_test(tc, test_geglu_vs_ref);
  tcase_add_test(tc, test_geglu_fd);
  tcase_add_test(tc, test_geglu_backward_write);
  tcase_add_test(tc, test_embedding_vs_ref);
  tcase_add_test(tc, test_embedding_fd);
  tcase_add_test(tc, test_embedding_deterministic);
  tcase_add_test(tc, test_xent_vs_double_and_ref);
  tcase_add_test(tc, test_xent_fd);
  tcase_add_test(tc, test_softcap_vs_ref);
  tcase_add_test(tc, test_softcap_fd);
  tcase_add_test(tc, test_softcap_xent_vs_unfused_and_ref);
  tcase_add_test(tc, test_xent_backward_b16);
  tcase_add_test(tc, test_adamw_by_hand);
  tcase_add_test(tc, test_adamw_vs_ref);
  tcase_add_test(tc, test_sumsq);
  tcase_add_test(tc, test_dropout_vs_ref);
  return s;
}

int main(void) { return gt_test_run_suite(gt__suite(), 0); }
