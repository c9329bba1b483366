/* The bf16 GEMM's paths (kernels/bf16_path.h): each forced in turn on this
 * CPU (GT_BGEMM_DP runs on its float32-FMA emulation where vdpbf16ps is
 * missing, with the same bits), against the bf16 scalar reference
 * gt_bgemm_ref under the bound of kernels/gemm_bf16.c, against each other,
 * and the widened path bit for bit against gt_sgemm on operands rounded
 * beforehand (what it is by construction); the path choice on fake CPU
 * descriptions; the test switch GT_TEST_BF16_PATH in a child process; the
 * AMX kernel where the CPU has it (skipped with a message elsewhere);
 * gt_bgemm_rnd (C rounded inside the tile loop) bit for bit against
 * gt_bgemm then rounded, on every path; gt_bgemm_c16 (bf16 patterns
 * straight from the tile loop) bit for bit against gt_bgemm then packed, on
 * every path; gt_bgemm_x reading A as bf16 patterns bit for bit against
 * gt_bgemm on the float32 A, in every output form, on every path; the
 * products' allocation-free
 * fallbacks under an address-space limit.
 *
 * Bound, per element, with S = sum_k |bf16(a_k) bf16(b_k)| (exact
 * products): |C - C_ref| <= 2^-24 ((K + 8) |alpha| S + 4 |beta C0|), for
 * inputs without bf16 denormals (the pairs and AMX paths read them as zero,
 * the widened path keeps them: data here are in [-1, 1]); two paths then
 * differ by at most twice it. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/gemm_amx.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "gt_testutil.h"

static float opA(int ta, const float *A, int64_t lda, int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; }
static float opB(int tb, const float *B, int64_t ldb, int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }

/* The products of a training step (kernels/matmul_bf16.c): forward
 * X.W^T (ta 0, tb 1, beta 0), input gradient dY.W (0, 0, beta 0 or 1),
 * weight gradient dY^T.X (1, 0, beta 1); the decoder's few rows times W^T;
 * shapes around the register tiles (12 x 32 and 16 x 32), odd K, K across
 * the K blocks (up to 1024) and the 16-pair AMX steps, a second B block. */
typedef struct pcase {
  int ta, tb;
  int64_t M, N, K;
  float alpha, beta;
} pcase;
static const pcase CASES[] = {
    {0, 1, 64, 96, 640, 1, 0},   {0, 0, 64, 640, 96, 1, 0},   {0, 0, 64, 640, 96, 1, 1},   {1, 0, 96, 640, 64, 1, 1},
    {0, 1, 37, 45, 33, 1, 0},    {0, 0, 13, 33, 31, 0.5f, -0.75f}, {1, 1, 25, 65, 65, -2, 0}, {1, 0, 11, 31, 3, 1, 1},
    {0, 1, 30, 20, 2049, 1, 1},  {0, 0, 17, 1100, 47, 1, 0},  {1, 0, 200, 7, 300, 1, 1},  {0, 1, 3, 300, 641, 1, 0},
    {0, 1, 1, 70, 15, 1, 0.5f},  {1, 1, 16, 32, 32, 1, 0},    {0, 0, 48, 64, 1025, 1, 0}, {0, 1, 7, 8229, 9, 1, 0}};
enum { NCASES = sizeof CASES / sizeof CASES[0] };
/* The forms' tests' further shapes: K over several K blocks (a tile's
 * epilogue must wait for the last), few rows (the row kernel), few rows
 * times many B blocks (whole B blocks per thread), K = 0 and alpha = 0, a
 * product within one K block, the weight gradients' transposed A. */
static const pcase EXTRA[] = {{0, 1, 50, 70, 2500, 1, 1},  {1, 0, 40, 33, 2300, 0.5f, 1},
                              {0, 1, 3, 200, 300, 1, 0},   {0, 1, 20, 16 * 8192 + 100, 32, 1, 0},
                              {0, 1, 5, 7, 0, 1, 0.5f},    {0, 0, 6, 9, 20, 0, 1},
                              {0, 1, 13, 45, 33, 1, 0},    {1, 0, 45, 37, 2100, 1, 1},
                              {1, 0, 3, 50, 31, 1, 1}};
enum { NEXTRA = sizeof EXTRA / sizeof EXTRA[0] };

typedef struct pdata {
  int64_t lda, ldb, ldc;
  float *A, *B, *C0;
  double *tol; /* the bound, per element */
  double *S;   /* |alpha| sum_k |bf16(a_k) bf16(b_k)|, per element */
} pdata;

static void pdata_make(const pcase *c, int idx, pdata *d) {
  uint64_t s = 1000 + (uint64_t)idx;
  const int pad = idx % 3;
  d->lda = (c->ta ? c->M : c->K) + pad, d->ldb = (c->tb ? c->K : c->N) + pad, d->ldc = c->N + pad;
  d->A = gt_test_alloc_fill((c->ta ? c->K : c->M) * d->lda, &s, -1, 1);
  d->B = gt_test_alloc_fill((c->tb ? c->N : c->K) * d->ldb, &s, -1, 1);
  d->C0 = gt_test_alloc_fill(c->M * d->ldc, &s, -1, 1);
  d->tol = calloc((size_t)(c->M * d->ldc), sizeof(double));
  d->S = calloc((size_t)(c->M * d->ldc), sizeof(double));
  for (int64_t i = 0; i < c->M; i++)
    for (int64_t j = 0; j < c->N; j++) {
      double S = 0;
      for (int64_t k = 0; k < c->K; k++)
        S += fabs((double)gt_bf16_round1(opA(c->ta, d->A, d->lda, i, k)) * gt_bf16_round1(opB(c->tb, d->B, d->ldb, k, j)));
      d->S[i * d->ldc + j] = fabs(c->alpha) * S;
      d->tol[i * d->ldc + j] =
          ldexp((double)(c->K + 8) * fabs(c->alpha) * S + 4 * fabs((double)c->beta * d->C0[i * d->ldc + j]), -24);
    }
}

static void pdata_free(pdata *d) { free(d->A), free(d->B), free(d->C0), free(d->tol), free(d->S); }

typedef void (*bgemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                         float, float *, int64_t);

/* C by fn (gt_bgemm or gt_bgemm_rnd) on `path`, the emulation forced when
 * emul, into a copy of C0 (beta 0: NaN, which must not be read) */
static float *run_fn(bgemm_fn fn, int path, int emul, const pcase *c, const pdata *d) {
  float *C = gt_test_copy(d->C0, c->M * d->ldc);
  if (c->beta == 0.0f)
    for (int64_t i = 0; i < c->M * d->ldc; i++) C[i] = NAN;
  gt__bgemm_force_path(path);
  gt__bgemm_force_fallback(emul);
  fn(c->ta, c->tb, c->M, c->N, c->K, c->alpha, d->A, d->lda, d->B, d->ldb, c->beta, C, d->ldc);
  gt__bgemm_force_fallback(0);
  gt__bgemm_force_path(-1);
  return C;
}

/* C by gt_bgemm on `path` */
static float *run_path(int path, const pcase *c, const pdata *d) { return run_fn(gt_bgemm, path, 0, c, d); }

/* worst |x - y| / (scale * tol) over the C block; asserts it is <= 1 */
static double check_within(const char *what, const pcase *c, const pdata *d, const float *x, const float *y,
                           double scale) {
  double worst = 0;
  for (int64_t i = 0; i < c->M; i++)
    for (int64_t j = 0; j < c->N; j++) {
      const int64_t e = i * d->ldc + j;
      const double diff = fabs((double)x[e] - y[e]), tol = scale * d->tol[e];
      ck_assert_msg(diff <= tol, "%s: ta%d tb%d M%lld N%lld K%lld [%lld,%lld]: %.9g vs %.9g (bound %.3g)", what, c->ta,
                    c->tb, (long long)c->M, (long long)c->N, (long long)c->K, (long long)i, (long long)j, x[e], y[e],
                    tol);
      if (tol > 0 && diff / tol > worst) worst = diff / tol;
    }
  return worst;
}

static float *reference(const pcase *c, const pdata *d) {
  float *R = gt_test_copy(d->C0, c->M * d->ldc);
  gt_bgemm_ref(c->ta, c->tb, c->M, c->N, c->K, c->alpha, d->A, d->lda, d->B, d->ldb, c->beta, R, d->ldc);
  return R;
}

START_TEST(test_paths_against_reference_and_each_other) {
  if (gt__kernels_path() == GT__PATH_PORTABLE) {
    printf("test_bf16_paths: neither AVX-512 nor AVX2 here (or GT_TEST_KERNELS=portable): one path, the rounded "
           "copies\n");
    ck_assert_int_eq(gt__bgemm_path(), GT_BGEMM_COPY);
    return;
  }
  if (gt__kernels_path() == GT__PATH_AVX2) {
    /* one packed path, the widened one on the AVX2 kernel (its bits are
     * gt_sgemm's on rounded copies: the next test) */
    ck_assert_int_eq(gt__bgemm_path(), GT_BGEMM_WIDE);
    double worst = 0;
    for (int n = 0; n < NCASES; n++) {
      const pcase *c = &CASES[n];
      pdata d;
      pdata_make(c, n, &d);
      float *R = reference(c, &d), *W = run_path(GT_BGEMM_WIDE, c, &d);
      worst = fmax(worst, check_within("widened (AVX2) vs reference", c, &d, W, R, 1.0));
      free(R), free(W);
      pdata_free(&d);
    }
    printf("test_bf16_paths: AVX2, no AVX-512: the widened path, worst |C - ref| / bound %.3g\n", worst);
    return;
  }
  double worst_w = 0, worst_p = 0, worst_wp = 0, worst_ulp = 0;
  int64_t differ = 0, total = 0;
  for (int n = 0; n < NCASES; n++) {
    const pcase *c = &CASES[n];
    pdata d;
    pdata_make(c, n, &d);
    float *R = reference(c, &d), *W = run_path(GT_BGEMM_WIDE, c, &d), *P = run_path(GT_BGEMM_DP, c, &d);
    double w = check_within("widened vs reference", c, &d, W, R, 1.0);
    double p = check_within("pairs vs reference", c, &d, P, R, 1.0);
    double wp = check_within("widened vs pairs", c, &d, W, P, 2.0);
    worst_w = fmax(worst_w, w), worst_p = fmax(worst_p, p), worst_wp = fmax(worst_wp, wp);
    for (int64_t i = 0; i < c->M; i++)
      for (int64_t j = 0; j < c->N; j++) {
        const int64_t e = i * d.ldc + j;
        differ += memcmp(&W[e], &P[e], 4) != 0, total++;
        /* the difference in units of 2^-24 |alpha| S */
        if (c->beta == 0.0f && d.S[e] > 0) worst_ulp = fmax(worst_ulp, fabs((double)W[e] - P[e]) / ldexp(d.S[e], -24));
      }
    /* the rows past N (the padding of ldc) are not written */
    for (int64_t i = 0; i < c->M; i++)
      for (int64_t j = c->N; j < d.ldc; j++)
        ck_assert(gt_test_same_bits(&W[i * d.ldc + j], &d.C0[i * d.ldc + j], 1) || c->beta == 0.0f);
    free(R), free(W), free(P);
    pdata_free(&d);
  }
  printf("bf16 paths, worst |C - ref| / bound: widened %.3g, pairs %.3g; |widened - pairs| / (2 bound) %.3g; "
         "%lld of %lld elements differ in bits, by at most %.2f x 2^-24 |alpha| S (beta 0)\n",
         worst_w, worst_p, worst_wp, (long long)differ, (long long)total, worst_ulp);
  /* the two paths are two different orders of float32 sums: they must not
   * be the same code (a switch that does nothing would give 0) */
  ck_assert_int_gt(differ, 0);
}
END_TEST

START_TEST(test_widened_is_sgemm_on_rounded) {
  /* by construction: gt_sgemm's loops and micro-kernel on panels rounded as
   * they are packed, so exactly gt_sgemm on rounded copies, every case and
   * the decoder's rows included (those take the row kernel, whose FMAs and
   * order are gt_sgemm's row kernel's); on the AVX2 copy too */
  if (gt__kernels_path() == GT__PATH_PORTABLE) return;
  for (int n = 0; n < NCASES; n++) {
    const pcase *c = &CASES[n];
    pdata d;
    pdata_make(c, n, &d);
    const int64_t na = (c->ta ? c->K : c->M) * d.lda, nb = (c->tb ? c->N : c->K) * d.ldb;
    float *Ar = gt_test_copy(d.A, na), *Br = gt_test_copy(d.B, nb);
    gt_bf16_round(Ar, na), gt_bf16_round(Br, nb);
    float *S = gt_test_copy(d.C0, c->M * d.ldc), *W = run_path(GT_BGEMM_WIDE, c, &d);
    gt_sgemm(c->ta, c->tb, c->M, c->N, c->K, c->alpha, Ar, d.lda, Br, d.ldb, c->beta, S, d.ldc);
    for (int64_t i = 0; i < c->M; i++)
      ck_assert_msg(gt_test_same_bits(S + i * d.ldc, W + i * d.ldc, c->N),
                    "case %d row %lld: widened != gt_sgemm on rounded operands", n, (long long)i);
    free(Ar), free(Br), free(S), free(W);
    pdata_free(&d);
  }
}
END_TEST

START_TEST(test_paths_deterministic_over_threads) {
  /* each path's bits do not depend on the thread count: 1, 2 and 3 (on
   * the AVX2 copy, its one packed path) */
  if (gt__kernels_path() == GT__PATH_PORTABLE) return;
  const pcase cs[] = {{0, 1, 300, 200, 700, 1.25f, 0.5f}, {1, 0, 130, 640, 512, 1, 1}, {0, 0, 7, 9000, 40, 1, 0}};
  const int paths[] = {GT_BGEMM_WIDE, GT_BGEMM_DP, GT_BGEMM_AMX};
  const size_t npaths = !gt__kernels_avx512() ? 1u : gt__cpu_amx_bf16() ? 3u : 2u;
  for (size_t pi = 0; pi < npaths; pi++)
    for (size_t n = 0; n < sizeof cs / sizeof cs[0]; n++) {
      pdata d;
      const pcase *c = &cs[n];
      uint64_t s = 7 + n;
      d.lda = c->ta ? c->M : c->K, d.ldb = c->tb ? c->K : c->N, d.ldc = c->N;
      d.A = gt_test_alloc_fill(c->M * c->K, &s, -1, 1), d.B = gt_test_alloc_fill(c->K * c->N, &s, -1, 1);
      d.C0 = gt_test_alloc_fill(c->M * c->N, &s, -1, 1), d.tol = NULL, d.S = NULL;
      gt_team_set_process(1);
      float *C1 = run_path(paths[pi], c, &d);
      for (int th = 2; th <= 3; th++) {
        gt_team_set_process(th);
        float *C2 = run_path(paths[pi], c, &d);
        ck_assert_msg(gt_test_same_bits(C1, C2, c->M * c->N), "path %d case %zu: %d threads differ from 1", paths[pi],
                      n, th);
        free(C2);
      }
      free(C1);
      pdata_free(&d);
    }
}
END_TEST

START_TEST(test_qbgemm_widened) {
  /* a stored W on the widened path: dequantized, rounded and packed in one
   * pass (on the AVX2 copy: dequantized into a panel, then packed); the
   * bits of gt_bgemm's widened path on the dequantized matrix */
  if (gt__kernels_path() == GT__PATH_PORTABLE) return;
  const gt_qtype ts[] = {GT_Q_BF16, GT_Q_INT8, GT_Q_NF4};
  for (size_t ti = 0; ti < 3; ti++)
    for (int tw = 0; tw < 2; tw++) {
      const int64_t M = 40, N = 96, K = 130, wr = tw ? N : K, wc = tw ? K : N;
      uint64_t s = 3 + ti;
      float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *src = gt_test_alloc_fill(wr * wc, &s, -1, 1);
      void *buf = malloc(4 * (size_t)gt_q_words(ts[ti], wr, wc));
      gt_quantize(ts[ti], src, wr, wc, buf);
      gt_qweight w = gt_qweight_at(ts[ti], buf, wr, wc);
      float *Wd = malloc(sizeof(float) * (size_t)(wr * wc));
      gt_dequantize_rows(&w, 0, wr, Wd);
      float *C1 = gt_test_zeros(M * N), *C2 = gt_test_zeros(M * N);
      gt__bgemm_force_path(GT_BGEMM_WIDE);
      gt_qbgemm(tw, M, N, K, 1.0f, A, K, &w, 0.0f, C1, N);
      gt_bgemm(0, tw, M, N, K, 1.0f, A, K, Wd, wc, 0.0f, C2, N);
      gt__bgemm_force_path(-1);
      ck_assert_msg(gt_test_same_bits(C1, C2, M * N), "qbgemm widened, type %zu transW %d", ti, tw);
      free(A), free(src), free(buf), free(Wd), free(C1), free(C2);
    }
}
END_TEST

/* every path this CPU can run, into paths[] (emul: the pairs emulated);
 * their count (at most 5) */
static int runnable_paths(int paths[5], int emul[5]) {
  int np = 0;
  paths[np] = GT_BGEMM_COPY, emul[np++] = 0;
  if (gt__kernels_path() == GT__PATH_AVX2) paths[np] = GT_BGEMM_WIDE, emul[np++] = 0;
  if (gt__kernels_avx512()) {
    paths[np] = GT_BGEMM_WIDE, emul[np++] = 0;
    paths[np] = GT_BGEMM_DP, emul[np++] = 0;
    paths[np] = GT_BGEMM_DP, emul[np++] = 1;
    if (gt__cpu_amx_bf16()) paths[np] = GT_BGEMM_AMX, emul[np++] = 0;
  }
  return np;
}

/* gt_qbgemm_t on the stored B below, as a bgemm_fn (its B argument unused) */
static const gt_qweight *stored_b;
static void qbgemm_t_fn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)B, (void)ldb;
  gt_qbgemm_t(ta, tb, M, N, K, alpha, A, lda, stored_b, beta, C, ldc);
}

/* gt_qbgemm_t16 with A as the patterns below (its A argument unused) */
static uint16_t *stored_a16;
static void qbgemm_t16_fn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)A, (void)B, (void)ldb;
  gt_qbgemm_t16(ta, tb, M, N, K, alpha, stored_a16, lda, stored_b, beta, C, ldc);
}

START_TEST(test_qbgemm_t_is_bgemm_on_bf16_values) {
  /* B kept as bf16 patterns (a GT_Q_BF16 W, as the executor keeps a saved
   * input for its weight gradient dY^T.X): gt_qbgemm_t gives gt_bgemm's
   * bits on B widened, with A plain or transposed, on every path this CPU
   * can run (the pairs emulated too), on 1 and 2 threads */
  int paths[5], emul[5], np = runnable_paths(paths, emul);
  int checked = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (int pi = 0; pi < np; pi++)
      for (int n = 0; n < NCASES; n++) {
        const pcase *c = &CASES[n];
        pdata d;
        pdata_make(c, n, &d);
        /* a stored matrix has no row padding: B compact, its values bf16 */
        const int64_t rows = c->tb ? c->N : c->K, cols = c->tb ? c->K : c->N, nb = rows * cols;
        for (int64_t r = 0; r < rows; r++) memmove(d.B + r * cols, d.B + r * d.ldb, (size_t)cols * sizeof(float));
        d.ldb = cols;
        gt_bf16_round(d.B, nb);
        uint16_t *h = malloc((size_t)nb * sizeof(uint16_t));
        gt_bf16_pack(h, d.B, nb);
        const gt_qweight w = gt_qweight_at(GT_Q_BF16, h, rows, cols);
        stored_b = &w;
        float *want = run_fn(gt_bgemm, paths[pi], emul[pi], c, &d), *got = run_fn(qbgemm_t_fn, paths[pi], emul[pi], c, &d);
        for (int64_t i = 0; i < c->M; i++)
          ck_assert_msg(gt_test_same_bits(got + i * d.ldc, want + i * d.ldc, c->N),
                        "path %d%s, %d threads, case %d (ta%d tb%d M%lld N%lld K%lld) row %lld", paths[pi],
                        emul[pi] ? " (pairs emulated)" : "", th, n, c->ta, c->tb, (long long)c->M, (long long)c->N,
                        (long long)c->K, (long long)i);
        /* and A held as bf16 patterns too (gt_qbgemm_t16: a weight
         * gradient's dY kept in 2 bytes) */
        const int64_t na = (c->ta ? c->K : c->M) * d.lda;
        stored_a16 = malloc((size_t)na * sizeof(uint16_t));
        gt_bf16_pack(stored_a16, d.A, na);
        float *got16 = run_fn(qbgemm_t16_fn, paths[pi], emul[pi], c, &d);
        for (int64_t i = 0; i < c->M; i++)
          ck_assert_msg(gt_test_same_bits(got16 + i * d.ldc, want + i * d.ldc, c->N),
                        "gt_qbgemm_t16: path %d%s, %d threads, case %d (ta%d tb%d M%lld N%lld K%lld) row %lld",
                        paths[pi], emul[pi] ? " (pairs emulated)" : "", th, n, c->ta, c->tb, (long long)c->M,
                        (long long)c->N, (long long)c->K, (long long)i);
        free(stored_a16), free(got16);
        checked++;
        free(h), free(want), free(got);
        pdata_free(&d);
      }
  }
  gt_team_set_process(2);
  ck_assert_int_eq(checked, 2 * np * NCASES);
}
END_TEST

/* ---- the choice ---- */

static int measured;
static void fake_measure_slow(double *dp, double *fma) { measured++, *dp = 92, *fma = 185; }
static void fake_measure_even(double *dp, double *fma) { measured++, *dp = 120, *fma = 116; }
static void fake_measure_fast(double *dp, double *fma) { measured++, *dp = 231, *fma = 116; }

static gt__bf16_cpu fake(const char *vendor, int family, int model, int avx512, int bf16, int amx) {
  gt__bf16_cpu c;
  memset(&c, 0, sizeof c);
  snprintf(c.vendor, sizeof c.vendor, "%s", vendor);
  c.family = family, c.model = model, c.avx512 = avx512, c.avx512bf16 = bf16, c.amx_bf16 = amx;
  return c;
}

START_TEST(test_choice_on_fake_cpus) {
  gt__bf16_choice ch;
  gt__bf16_cpu c;
  /* the project's Intel Xeon: in the table, vdpbf16ps at half the FMA
   * rate: the widened path, no measurement */
  measured = 0;
  c = fake("GenuineIntel", 6, 207, 1, 1, 0);
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  ck_assert_int_eq(ch.by, GT_BF16_BY_TABLE);
  ck_assert(ch.ratio > 0.4 && ch.ratio < 0.6 && ch.table && strstr(ch.table, "207"));
  ck_assert_int_eq(measured, 0);
  /* Zen 4: in the table at 2x: vdpbf16ps */
  c = fake("AuthenticAMD", 25, 17, 1, 1, 0);
  gt__bf16_decide(&c, fake_measure_slow, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_DP);
  ck_assert_int_eq(ch.by, GT_BF16_BY_TABLE);
  ck_assert_int_eq(measured, 0);
  /* a CPU not in the table: measured, once; slower or even: widened;
   * twice as fast: vdpbf16ps */
  c = fake("GenuineIntel", 6, 173, 1, 1, 0);
  gt__bf16_decide(&c, fake_measure_slow, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  ck_assert_int_eq(ch.by, GT_BF16_BY_MEASURE);
  ck_assert(ch.dp == 92 && ch.fma == 185);
  ck_assert_int_eq(measured, 1);
  c = fake("AuthenticAMD", 26, 2, 1, 1, 0);
  gt__bf16_decide(&c, fake_measure_even, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_DP);
  ck_assert_int_eq(ch.by, GT_BF16_BY_MEASURE);
  ck_assert_int_eq(measured, 3);
  /* nothing measured (no measurement function): no vdpbf16ps claim */
  gt__bf16_decide(&c, NULL, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  /* AVX-512 without AVX512_BF16 (Skylake-X, Ice Lake): widened, by the ISA,
   * the Intel model not consulted */
  measured = 0;
  c = fake("GenuineIntel", 6, 106, 1, 0, 0);
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  ck_assert_int_eq(ch.by, GT_BF16_BY_ISA);
  /* AMX usable: tiles, whatever the table says */
  c = fake("GenuineIntel", 6, 143, 1, 1, 1);
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_AMX);
  /* AVX2 without AVX-512 (Zen 2, Zen 3; family 25 is Zen 4's too, whose
   * table row needs AVX512_BF16): the widened path on the AVX2 kernel */
  c = fake("AuthenticAMD", 25, 1, 0, 0, 0);
  c.avx2 = 1;
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_WIDE);
  ck_assert_int_eq(ch.by, GT_BF16_BY_ISA);
  /* neither: the copies */
  c = fake("AuthenticAMD", 23, 49, 0, 0, 0);
  gt__bf16_decide(&c, fake_measure_fast, &ch);
  ck_assert_int_eq(ch.path, GT_BGEMM_COPY);
  ck_assert_int_eq(measured, 0);
  /* the table itself */
  double r = 0;
  ck_assert(!gt__bf16_table("GenuineIntel", 6, 85, &r, NULL));
  ck_assert(gt__bf16_table("AuthenticAMD", 25, 97, &r, NULL) && r > 1.9);
}
END_TEST

START_TEST(test_choice_on_this_cpu) {
  /* the process's choice is the decision on this CPU's description */
  gt__bf16_cpu c;
  gt__bf16_cpu_detect(&c);
  gt__bf16_choice want, got;
  gt__bf16_decide(&c, NULL, &want);
  gt__bgemm_choice(&got);
  /* (a measured choice may differ between two measurements; a forced path
   * is the environment's, GT_TEST_BF16_PATH) */
  if (want.by != GT_BF16_BY_MEASURE && got.by != GT_BF16_BY_FORCE) ck_assert_int_eq(got.path, want.path == GT_BGEMM_DP && gt__bgemm_kernel() != 2 ? GT_BGEMM_EMUL : want.path);
  printf("this CPU: %s family %d model %d, AVX-512 %d, AVX512_BF16 %d, AMX-BF16 %d: %s\n", c.vendor, c.family,
         c.model, c.avx512, c.avx512bf16, c.amx_bf16, gt__bgemm_path_name(got.path));
  /* a forced path the CPU cannot run gives way */
  gt__bgemm_force_path(GT_BGEMM_AMX);
  if (!gt__cpu_amx_bf16()) ck_assert_int_ne(gt__bgemm_path(), GT_BGEMM_AMX);
  gt__bgemm_force_path(-1);
}
END_TEST

/* the path a child process takes with GT_TEST_BF16_PATH=value */
static int path_with_env(const char *value) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("GT_TEST_BF16_PATH", value, 1);
    _exit(gt__bgemm_path());
  }
  int st = 0;
  ck_assert(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
  return WEXITSTATUS(st);
}

START_TEST(test_env_switch) {
  if (gt__kernels_path() == GT__PATH_PORTABLE) {
    ck_assert_int_eq(path_with_env("widened"), GT_BGEMM_COPY);
    return;
  }
  if (gt__kernels_path() == GT__PATH_AVX2) { /* widened, or the copies */
    ck_assert_int_eq(path_with_env("widened"), GT_BGEMM_WIDE);
    ck_assert_int_eq(path_with_env("pairs"), GT_BGEMM_WIDE);
    ck_assert_int_eq(path_with_env("amx"), GT_BGEMM_WIDE);
    ck_assert_int_eq(path_with_env("copies"), GT_BGEMM_COPY);
    return;
  }
  ck_assert_int_eq(path_with_env("widened"), GT_BGEMM_WIDE);
  ck_assert_int_eq(path_with_env("pairs"), gt__bgemm_kernel() == 2 ? GT_BGEMM_DP : GT_BGEMM_EMUL);
  ck_assert_int_eq(path_with_env("copies"), GT_BGEMM_COPY);
}
END_TEST

/* Other code in the process (another library's AMX kernels) may release or
 * reconfigure a thread's tiles between two products: the next product
 * loads its configuration again (kernels/gemm_amx.c keeps it only within a
 * product). Without that, tileloadd on released tiles faults (SIGILL). */
START_TEST(test_amx_after_foreign_tiles) {
  if (!gt__cpu_amx_bf16()) return;
  const pcase c = {0, 1, 64, 96, 640, 1, 0};
  pdata d;
  pdata_make(&c, 0, &d);
  gt_team_set_process(1); /* the products run on this thread */
  float *X1 = run_path(GT_BGEMM_AMX, &c, &d);
  __asm__ volatile("tilerelease" ::: "memory");
  float *X2 = run_path(GT_BGEMM_AMX, &c, &d);
  /* a configuration of other shapes (palette 1, one 1 x 4-byte tile) */
  struct __attribute__((packed, aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg = {.palette = 1, .colsb = {4}, .rows = {1}};
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  float *X3 = run_path(GT_BGEMM_AMX, &c, &d);
  __asm__ volatile("tilerelease" ::: "memory");
  gt_team_set_process(2);
  for (int64_t i = 0; i < c.M; i++) {
    ck_assert(gt_test_same_bits(X1 + i * d.ldc, X2 + i * d.ldc, c.N));
    ck_assert(gt_test_same_bits(X1 + i * d.ldc, X3 + i * d.ldc, c.N));
  }
  free(X1), free(X2), free(X3);
  pdata_free(&d);
}
END_TEST

START_TEST(test_amx_against_reference) {
  if (!gt__cpu_amx_bf16()) {
    printf("test_bf16_paths: AMX-BF16 not usable on this CPU (cpuid, XCR0 or the kernel's permission): the AMX "
           "kernel's reference test is skipped\n");
    return;
  }
  double worst = 0, worst_xp = 0;
  int64_t differ = 0, total = 0;
  for (int n = 0; n < NCASES; n++) {
    const pcase *c = &CASES[n];
    pdata d;
    pdata_make(c, n, &d);
    float *R = reference(c, &d), *X = run_path(GT_BGEMM_AMX, c, &d), *X2 = run_path(GT_BGEMM_AMX, c, &d);
    float *P = run_path(GT_BGEMM_DP, c, &d);
    worst = fmax(worst, check_within("AMX vs reference", c, &d, X, R, 1.0));
    /* against vdpbf16ps: the same pairs, summed even k first instead of odd */
    worst_xp = fmax(worst_xp, check_within("AMX vs pairs", c, &d, X, P, 2.0));
    for (int64_t i = 0; i < c->M; i++) {
      ck_assert(gt_test_same_bits(X + i * d.ldc, X2 + i * d.ldc, c->N));
      for (int64_t j = 0; j < c->N; j++) differ += memcmp(&X[i * d.ldc + j], &P[i * d.ldc + j], 4) != 0, total++;
      /* the columns past N (ldc's padding) are not written, tile stores included */
      for (int64_t j = c->N; j < d.ldc; j++)
        ck_assert(c->beta == 0.0f ? isnan(X[i * d.ldc + j]) : gt_test_same_bits(&X[i * d.ldc + j], &d.C0[i * d.ldc + j], 1));
    }
    free(R), free(X), free(X2), free(P);
    pdata_free(&d);
  }
  printf("AMX path, worst |C - ref| / bound %.3g; |AMX - pairs| / (2 bound) %.3g; %lld of %lld elements differ "
         "from the pairs path in bits\n",
         worst, worst_xp, (long long)differ, (long long)total);
  ck_assert_int_gt(differ, 0); /* another order of sums, not the pairs path under another name */
}
END_TEST

/* rnd (a product with C rounded to bf16) against plain then gt_bf16_round
 * over the M x N block, bit for bit, on path: every element a bf16 value
 * (not the unrounded C under another name), the columns past N (ldc's
 * padding) untouched. The elements checked. */
static int64_t check_rounded(bgemm_fn plain, bgemm_fn rnd, const char *what, int path, int emul, int th,
                             const pcase *c, const pdata *d) {
  float *want = run_fn(plain, path, emul, c, d);
  for (int64_t i = 0; i < c->M; i++) gt_bf16_round(want + i * d->ldc, c->N);
  float *got = run_fn(rnd, path, emul, c, d);
  for (int64_t i = 0; i < c->M; i++) {
    ck_assert_msg(gt_test_same_bits(want + i * d->ldc, got + i * d->ldc, c->N),
                  "%s: path %d%s, %d threads, ta%d tb%d M%lld N%lld K%lld, row %lld: not the product then rounded",
                  what, path, emul ? " (emulated)" : "", th, c->ta, c->tb, (long long)c->M, (long long)c->N,
                  (long long)c->K, (long long)i);
    for (int64_t j = 0; j < c->N; j++) ck_assert(gt_bf16_round1(got[i * d->ldc + j]) == got[i * d->ldc + j]);
    for (int64_t j = c->N; j < d->ldc; j++)
      ck_assert(c->beta == 0.0f ? isnan(got[i * d->ldc + j])
                                : gt_test_same_bits(&got[i * d->ldc + j], &d->C0[i * d->ldc + j], 1));
  }
  free(want), free(got);
  return c->M * c->N;
}

START_TEST(test_rounded_output) {
  /* gt_bgemm_rnd (a dtype=bfloat16 projection's output) is gt_bgemm then
   * gt_bf16_round over the M x N block, bit for bit, on every path this CPU
   * runs (the pairs on their emulation too) and on 1 and 2 threads. The
   * packed paths round each C tile after its last K block, so the cases add
   * K over several K blocks with beta 1 (a tile rounded after an earlier
   * block would carry a rounded partial sum into the next one), the
   * few-rows product (decoding's row kernel, rounded after), few rows
   * times many B blocks (the loop that gives each thread whole B blocks,
   * on 2 threads), K = 0 and alpha = 0 (C = beta C0, rounded). The rounded
   * copies (every CPU's path without AVX-512) run here on any CPU. The
   * columns past N (ldc's padding) stay untouched. */
  int paths[5], emul[5], np = runnable_paths(paths, emul);
  int64_t checked = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (int n = 0; n < NCASES + NEXTRA; n++) {
      const pcase *c = n < NCASES ? &CASES[n] : &EXTRA[n - NCASES];
      pdata d;
      if (n < NCASES) {
        pdata_make(c, n, &d);
      } else { /* no bound needed here: inputs and C0 only */
        uint64_t sd = 500 + (uint64_t)n;
        d.lda = (c->ta ? c->M : c->K) + 1, d.ldb = c->tb ? c->K : c->N, d.ldc = c->N + 3;
        d.A = gt_test_alloc_fill((c->ta ? c->K : c->M) * d.lda, &sd, -1, 1);
        d.B = gt_test_alloc_fill((c->tb ? c->N : c->K) * d.ldb, &sd, -1, 1);
        d.C0 = gt_test_alloc_fill(c->M * d.ldc, &sd, -1, 1), d.tol = NULL, d.S = NULL;
      }
      for (int p = 0; p < np; p++)
        checked += check_rounded(gt_bgemm, gt_bgemm_rnd, "gt_bgemm_rnd", paths[p], emul[p], th, c, &d);
      pdata_free(&d);
    }
  }
  printf("gt_bgemm_rnd: %lld elements on %d paths and 1 and 2 threads, each gt_bgemm's rounded\n", (long long)checked,
         np);
}
END_TEST

/* gt_qbgemm and gt_qbgemm_rnd on the stored W below, as bgemm_fns (A plain:
 * a projection's or the tied head's X.W^T or dY.W; their B unused) */
static void qbgemm_fn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)ta, (void)B, (void)ldb;
  gt_qbgemm(tb, M, N, K, alpha, A, lda, stored_b, beta, C, ldc);
}
static void qbgemm_rnd_fn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)ta, (void)B, (void)ldb;
  gt_qbgemm_rnd(tb, M, N, K, alpha, A, lda, stored_b, beta, C, ldc);
}

START_TEST(test_qbgemm_rounded_output) {
  /* gt_qbgemm_rnd (a dtype=bfloat16 projection or tied head over a frozen
   * base stored in bf16, int8 or nf4) is gt_qbgemm then gt_bf16_round over
   * the M x N block, bit for bit, on every path this CPU runs and on 1 and
   * 2 threads, for the shapes of test_rounded_output with A plain: K over
   * several K blocks with beta 1 (rounded after the last block only), the
   * few-rows product (the row kernel, rounded after), K = 0 and alpha = 0.
   * The columns past N stay untouched. */
  int paths[5], emul[5], np = runnable_paths(paths, emul);
  const gt_qtype ts[] = {GT_Q_BF16, GT_Q_INT8, GT_Q_NF4};
  int64_t checked = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (int n = 0; n < NCASES + NEXTRA; n++) {
      const pcase *c0 = n < NCASES ? &CASES[n] : &EXTRA[n - NCASES];
      if (c0->ta) continue;
      const pcase *c = c0;
      uint64_t sd = 700 + (uint64_t)n;
      pdata d;
      d.lda = c->K + 1, d.ldc = c->N + 3, d.tol = NULL, d.S = NULL;
      d.A = gt_test_alloc_fill(c->M * d.lda, &sd, -1, 1);
      d.C0 = gt_test_alloc_fill(c->M * d.ldc, &sd, -1, 1);
      const int64_t wr = c->tb ? c->N : c->K, wc = c->tb ? c->K : c->N;
      d.B = gt_test_alloc_fill(wr * wc, &sd, -1, 1), d.ldb = wc;
      for (size_t ti = 0; ti < 3; ti++) {
        void *buf = malloc(4 * (size_t)gt_q_words(ts[ti], wr, wc) + 4);
        gt_quantize(ts[ti], d.B, wr, wc, buf);
        const gt_qweight w = gt_qweight_at(ts[ti], buf, wr, wc);
        stored_b = &w;
        const char *what[] = {"gt_qbgemm_rnd over bf16", "gt_qbgemm_rnd over int8", "gt_qbgemm_rnd over nf4"};
        for (int p = 0; p < np; p++)
          checked += check_rounded(qbgemm_fn, qbgemm_rnd_fn, what[ti], paths[p], emul[p], th, c, &d);
        free(buf);
      }
      free(d.A), free(d.B), free(d.C0);
    }
  }
  gt_team_set_process(2);
  printf("gt_qbgemm_rnd: %lld elements on %d paths, 3 storages, 1 and 2 threads, each gt_qbgemm's rounded\n",
         (long long)checked, np);
}
END_TEST

START_TEST(test_bf16_output) {
  /* gt_bgemm_c16 (the MLP's gate and up written only as bf16) is gt_bgemm
   * with beta 0 then gt_bf16_pack over the M x N block, bit for bit, on
   * every path this CPU runs, on 1 and 2 threads: the step's shapes above,
   * K over several K blocks (the loops cannot hand a tile over after one
   * micro call: computed into C and packed), few rows (the row kernel),
   * few rows times many B blocks (each thread its own B blocks), K = 0 and
   * alpha = 0 (zeros). The columns past N (ldc16's padding) stay untouched.
   * Where the packed loops take K in one block (K <= 256 here, below every
   * kernel's smallest K block) and the rows are many, the float32 C is not
   * written at all: its NaNs are still there. */
  int paths[5], emul[5], np = runnable_paths(paths, emul);
  int64_t checked = 0, untouched = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (int n = 0; n < NCASES + NEXTRA; n++) {
      pcase c = n < NCASES ? CASES[n] : EXTRA[n - NCASES];
      c.beta = 0.0f;
      uint64_t sd = 700 + (uint64_t)n;
      const int64_t lda = (c.ta ? c.M : c.K) + 1, ldb = c.tb ? c.K : c.N, ldc = c.N + 3, ld16 = c.N + 5;
      float *A = gt_test_alloc_fill((c.ta ? c.K : c.M) * lda, &sd, -1, 1);
      float *B = gt_test_alloc_fill((c.tb ? c.N : c.K) * ldb, &sd, -1, 1);
      for (int p = 0; p < np; p++) {
        float *want = malloc((size_t)(c.M * ldc) * sizeof(float)), *C = malloc((size_t)(c.M * ldc) * sizeof(float));
        uint16_t *w16 = malloc((size_t)(c.M * ld16) * 2), *got = malloc((size_t)(c.M * ld16) * 2);
        for (int64_t i = 0; i < c.M * ldc; i++) C[i] = NAN;
        for (int64_t i = 0; i < c.M * ld16; i++) got[i] = 0xABCD;
        gt__bgemm_force_path(paths[p]);
        gt__bgemm_force_fallback(emul[p]);
        gt_bgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, 0.0f, want, ldc);
        for (int64_t i = 0; i < c.M; i++) gt_bf16_pack(w16 + i * ld16, want + i * ldc, c.N);
        gt_bgemm_c16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, C, ldc, got, ld16);
        gt__bgemm_force_fallback(0);
        gt__bgemm_force_path(-1);
        for (int64_t i = 0; i < c.M; i++) {
          ck_assert_msg(memcmp(w16 + i * ld16, got + i * ld16, (size_t)c.N * 2) == 0,
                        "path %d%s, %d threads, ta%d tb%d M%lld N%lld K%lld, row %lld: gt_bgemm_c16 != gt_bgemm "
                        "then packed",
                        paths[p], emul[p] ? " (emulated)" : "", th, c.ta, c.tb, (long long)c.M, (long long)c.N,
                        (long long)c.K, (long long)i);
          for (int64_t j = c.N; j < ld16; j++) ck_assert_uint_eq(got[i * ld16 + j], 0xABCD);
          checked += c.N;
        }
        if (paths[p] != GT_BGEMM_COPY && c.K > 0 && c.K <= 256 && c.alpha != 0.0f && c.M > 4) {
          for (int64_t i = 0; i < c.M * ldc; i++)
            ck_assert_msg(isnan(C[i]), "path %d, ta%d tb%d M%lld N%lld K%lld: C written at %lld", paths[p], c.ta,
                          c.tb, (long long)c.M, (long long)c.N, (long long)c.K, (long long)i);
          untouched++;
        }
        free(want), free(C), free(w16), free(got);
      }
      free(A), free(B);
    }
  }
  gt_team_set_process(1);
  printf("gt_bgemm_c16: %lld elements on %d paths and 1 and 2 threads, each gt_bgemm's packed; %lld products "
         "never wrote C\n",
         (long long)checked, np, (long long)untouched);
}
END_TEST

START_TEST(test_bf16_input) {
  /* gt_bgemm_x with op(A) held as bf16 patterns (a16: the forward's kept
   * inputs, read by the 2-byte packers) is gt_bgemm on the float32 A they
   * were packed from, bit for bit: plain (beta as the case has it), rounded
   * (gt_bgemm_rnd's) and as bf16 output (gt_bgemm_c16's), on every path
   * this CPU runs and 1 and 2 threads; every case above (A plain and
   * transposed: the weight gradients' dY^T) and EXTRA, A's row stride
   * padded. */
  int paths[5], emul[5], np = runnable_paths(paths, emul);
  int64_t checked = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (int n = 0; n < NCASES + NEXTRA; n++) {
      const pcase c = n < NCASES ? CASES[n] : EXTRA[n - NCASES];
      uint64_t sd = 900 + (uint64_t)n;
      const int64_t ar = c.ta ? c.K : c.M, lda = (c.ta ? c.M : c.K) + 3, ldb = c.tb ? c.K : c.N, ldc = c.N + 2;
      float *A = gt_test_alloc_fill(ar * lda, &sd, -1, 1), *B = gt_test_alloc_fill((c.tb ? c.N : c.K) * ldb, &sd, -1, 1);
      float *C0 = gt_test_alloc_fill(c.M * ldc, &sd, -1, 1);
      uint16_t *A16 = malloc((size_t)(ar * lda) * 2);
      gt_bf16_pack(A16, A, ar * lda);
      for (int p = 0; p < np; p++)
        for (int form = 0; form < 3; form++) {
          float *want = gt_test_copy(C0, c.M * ldc), *got = gt_test_copy(C0, c.M * ldc);
          uint16_t *w16 = calloc((size_t)(c.M * ldc), 2), *g16 = calloc((size_t)(c.M * ldc), 2);
          const float beta = form == 2 ? 0.0f : c.beta;
          gt__bgemm_force_path(paths[p]);
          gt__bgemm_force_fallback(emul[p]);
          if (form == 0) gt_bgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, beta, want, ldc);
          if (form == 1) gt_bgemm_rnd(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, beta, want, ldc);
          if (form == 2) gt_bgemm_c16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, want, ldc, w16, ldc);
          const gt_bgemm_form f = {A16, form == 1, form == 2 ? g16 : NULL, ldc};
          gt_bgemm_x(c.ta, c.tb, c.M, c.N, c.K, c.alpha, NULL, lda, B, ldb, beta, got, ldc, &f);
          gt__bgemm_force_fallback(0);
          gt__bgemm_force_path(-1);
          for (int64_t i = 0; i < c.M; i++) {
            const int same = form == 2 ? !memcmp(w16 + i * ldc, g16 + i * ldc, (size_t)c.N * 2)
                                       : gt_test_same_bits(want + i * ldc, got + i * ldc, c.N);
            ck_assert_msg(same, "path %d%s, %d threads, form %d, ta%d tb%d M%lld N%lld K%lld, row %lld: from bf16 A != "
                          "from float32 A",
                          paths[p], emul[p] ? " (emulated)" : "", th, form, c.ta, c.tb, (long long)c.M, (long long)c.N,
                          (long long)c.K, (long long)i);
            checked += c.N;
          }
          free(want), free(got), free(w16), free(g16);
        }
      free(A), free(B), free(C0), free(A16);
    }
  }
  gt_team_set_process(1);
  printf("gt_bgemm_x from bf16 A: %lld elements on %d paths, 3 forms, 1 and 2 threads, each the float32 A's\n",
         (long long)checked, np);
}
END_TEST

START_TEST(test_products_without_memory) {
  /* The rounded-copies path (no AVX-512) rounds A and B into heap copies,
   * and gt_qbgemm's panels path dequantizes W into a heap panel; where
   * those cannot be had, both must still write C, one output at a time,
   * with the operands rounded to bf16 (W dequantized first). A child
   * process runs them under an address-space limit just above its use, so
   * neither the 64 MiB copy of A nor the 16 MiB panel of W can be mapped;
   * C is memory shared with the parent, NaN before. Every operand is
   * 1 + 2^-10 (W: int8, dequantized to about that), which rounds to bf16
   * 1.0: each output must be exactly K = 2^20 (a float32 sum of ones is
   * exact below 2^24), where unrounded operands give about K + 1024.
   * gt_qbgemm_t's transposed A (the weight gradients' product) too, A read
   * as [K, M].
   * AddressSanitizer's shadow memory needs the address space the limit
   * takes away: skipped there. */
#if defined(__SANITIZE_ADDRESS__)
  printf("test_bf16_paths: the out-of-memory products need an address-space limit, which AddressSanitizer "
         "does not run under: skipped\n");
  return;
#endif
  const int64_t M = 16, N = 4, K = (int64_t)1 << 20;
  const float v = 1.0f + 0x1p-10f;
  float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
  for (int64_t i = 0; i < M * K; i++) A[i] = v;
  for (int64_t i = 0; i < K * N; i++) B[i] = v; /* also W's source, [N, K] */
  void *buf = malloc(4 * (size_t)gt_q_words(GT_Q_INT8, N, K));
  gt_quantize(GT_Q_INT8, B, N, K, buf);
  gt_qweight w = gt_qweight_at(GT_Q_INT8, buf, N, K);
  float *C = mmap(NULL, 3 * sizeof(float) * (size_t)(M * N), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(C != MAP_FAILED);
  float *Cq = C + M * N, *Ct = Cq + M * N;
  for (int64_t i = 0; i < 3 * M * N; i++) C[i] = NAN;
  (void)gt__bgemm_path(); /* the process's path choice made before the limit */
  pid_t pid = fork();
  if (pid == 0) {
    gt__bgemm_force_path(GT_BGEMM_COPY);
    long long kb = 0;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "VmSize: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    struct rlimit rl = {(rlim_t)(kb + 4096) * 1024, (rlim_t)(kb + 4096) * 1024};
    if (kb <= 0 || setrlimit(RLIMIT_AS, &rl)) _exit(2);
    void *volatile probe = malloc(sizeof(float) * (size_t)(N * K)); /* the panel's size */
    if (probe) _exit(3);
    gt_bgemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    gt_qbgemm(1, M, N, K, 1.0f, A, K, &w, 0.0f, Cq, N);
    gt_qbgemm_t(1, 1, M, N, K, 1.0f, A, M, &w, 0.0f, Ct, N);
    _exit(0);
  }
  int st = 0;
  ck_assert(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
  ck_assert_msg(WEXITSTATUS(st) == 0, "child: %d (2: no limit set, 3: the limit let 16 MiB through)", WEXITSTATUS(st));
  for (int64_t i = 0; i < M * N; i++) {
    ck_assert_msg(C[i] == (float)K, "gt_bgemm (rounded copies) without memory: C[%lld] = %.9g, not %lld",
                  (long long)i, C[i], (long long)K);
    ck_assert_msg(Cq[i] == (float)K, "gt_qbgemm (panels) without memory: C[%lld] = %.9g, not %lld", (long long)i,
                  Cq[i], (long long)K);
    ck_assert_msg(Ct[i] == (float)K, "gt_qbgemm_t (panels, A transposed) without memory: C[%lld] = %.9g, not %lld",
                  (long long)i, Ct[i], (long long)K);
  }
  munmap(C, 3 * sizeof(float) * (size_t)(M * N));
  free(A), free(B), free(buf);
}
END_TEST

/* C of gt_bgemm on the AMX path (beta 0), with the integer packing forced
 * when integer */
static float *amx_product(int integer, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B) {
  float *C = calloc((size_t)(M * N), sizeof(float));
  gt__bgemm_force_path(GT_BGEMM_AMX);
  gt__amx_force_integer_packing(integer);
  gt_bgemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N);
  gt__amx_force_integer_packing(0);
  gt__bgemm_force_path(-1);
  return C;
}

START_TEST(test_amx_cvt_packing) {
  /* Where the CPU has AVX512_BF16, the AMX path packs A and B with
   * vcvtne2ps2bf16 (kernels/bf16_cvt.h), a block holding a float32
   * denormal again with the integer rounding: C must be the integer
   * packing's exactly. Every transpose, shapes around the 16 x 32 tiles,
   * odd K and K over two blocks (2049: a last block of 641), 1 and 2
   * threads (the last shape is large enough for 2); values with ties to
   * even and the largest float in a few rows of A and columns of B (most
   * of C stays finite), then an infinity and a NaN. And the denormal
   * fallback, where C shows it: all of B (then all of A) the float32
   * denormal 0x007fffff, which the integer rounding takes to bf16 2^-126
   * (normal) and the conversion flushes to 0, times values in [1, 2]: C is
   * about K 2^-126, not 0. Both packers share their loops (gt__apack_a's
   * body), so a layout error in those shows in test_amx_against_reference,
   * not here. */
  if (!gt__cpu_amx_bf16() || !gt__amx_cvt()) {
    printf("test_bf16_paths: no AMX-BF16 with AVX512_BF16 here: the AMX packers' comparison is skipped\n");
    return;
  }
  const int64_t shapes[][3] = {{16, 32, 32}, {37, 45, 33}, {64, 96, 640}, {5, 70, 1100}, {130, 33, 2049}};
  static const uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3fc08000u, 0x7f7fffffu};
  const uint32_t inf = 0x7f800000u, nan = 0x7fc00001u, den = 0x007fffffu;
  int64_t cases = 0, finite = 0, total = 0;
  for (int th = 1; th <= 2; th++) {
    gt_team_set_process(th);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
      for (int t = 0; t < 4; t++)
        for (int kind = 0; kind < 3; kind++) { /* 0: ties, 1: denormals in B, 2: in A */
          const int ta = t & 1, tb = t >> 1;
          const int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
          uint64_t sd = 900 + c * 8 + (uint64_t)t * 3 + (uint64_t)kind;
          float *A = gt_test_alloc_fill(M * K, &sd, kind ? 1 : -2, 2), *B = gt_test_alloc_fill(K * N, &sd, kind ? 1 : -2, 2);
          if (kind == 0) {
            /* ties along one row of op(A) and one column of op(B), plus an
             * infinity and a NaN each */
            for (int64_t k = 0; k < K; k++) {
              memcpy(&A[ta ? k * M + 1 % M : 1 % M * K + k], &ties[k % 5], 4);
              memcpy(&B[tb ? 2 % N * K + k : k * N + 2 % N], &ties[(k + 2) % 5], 4);
            }
            memcpy(&A[M * K - 1], &inf, 4);
            memcpy(&B[K * N - 1], &nan, 4);
          }
          if (kind == 1)
            for (int64_t i = 0; i < K * N; i++) memcpy(&B[i], &den, 4);
          if (kind == 2)
            for (int64_t i = 0; i < M * K; i++) memcpy(&A[i], &den, 4);
          float *Cc = amx_product(0, ta, tb, M, N, K, A, B), *Ci = amx_product(1, ta, tb, M, N, K, A, B);
          ck_assert_msg(memcmp(Cc, Ci, sizeof(float) * (size_t)(M * N)) == 0,
                        "AMX, %d threads, ta%d tb%d M%lld N%lld K%lld, kind %d: vcvtne2ps2bf16 packing differs from "
                        "the integer rounding's",
                        th, ta, tb, (long long)M, (long long)N, (long long)K, kind);
          for (int64_t i = 0; i < M * N; i++) {
            finite += isfinite(Ci[i]) != 0, total++;
            if (kind) ck_assert_msg(Ci[i] > 0.0f, "kind %d: C[%lld] = %a, the packed 2^-126 lost", kind, (long long)i, Ci[i]);
          }
          cases++;
          free(A), free(B), free(Cc), free(Ci);
        }
  }
  printf("AMX packing: vcvtne2ps2bf16 gives the integer rounding's products in %lld cases (%lld of %lld outputs "
         "finite)\n",
         (long long)cases, (long long)finite, (long long)total);
  ck_assert_int_gt(finite, total * 9 / 10);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bf16_paths");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_env_switch);
  tcase_add_test(tc, test_choice_on_fake_cpus);
  tcase_add_test(tc, test_choice_on_this_cpu);
  tcase_add_test(tc, test_paths_against_reference_and_each_other);
  tcase_add_test(tc, test_widened_is_sgemm_on_rounded);
  tcase_add_test(tc, test_paths_deterministic_over_threads);
  tcase_add_test(tc, test_qbgemm_widened);
  tcase_add_test(tc, test_qbgemm_t_is_bgemm_on_bf16_values);
  tcase_add_test(tc, test_rounded_output);
  tcase_add_test(tc, test_qbgemm_rounded_output);
  tcase_add_test(tc, test_bf16_output);
  tcase_add_test(tc, test_bf16_input);
  tcase_add_test(tc, test_products_without_memory);
  tcase_add_test(tc, test_amx_cvt_packing);
  tcase_add_test(tc, test_amx_against_reference);
  tcase_add_test(tc, test_amx_after_foreign_tiles);
  return gt_test_run_suite(s, 0);
}
