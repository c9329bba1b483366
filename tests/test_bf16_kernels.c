/* bf16 kernels (kernels/bf16.h): the conversions against their scalar
 * references bit for bit, and gt_bgemm (kernels/gemm_bf16.c) against
 * gt_bgemm_ref, its fallback, its thread counts and the float32 matmuls.
 *
 * gt_bgemm bound. The reference sums the exact bf16 products in double; the
 * kernel sums them in float32 (two rounded adds per pair, per K block, then
 * the blocks into C): at most K + (blocks) + 2 roundings of a running sum
 * bounded by S = sum_k |a_k b_k|, each off by at most 2^-24 of it, plus the
 * epilogues' roundings (alpha, beta, the reference's own float rounding) of
 * at most 2^-24 (|alpha| S + |beta C0|) each. So, with no bf16-denormal
 * inputs (the kernel reads those as zero, DAZ, like vdpbf16ps) and nothing
 * below 2^-126 (FTZ):
 *   |C - C_ref| <= 2^-24 ((K + 8) |alpha| S + 4 |beta C0|).
 * The fallback (float32 FMAs under DAZ/FTZ) gives the fast path's bits: it
 * does the same operations in the same order, and this CPU's vdpbf16ps was
 * measured to round each of its two adds as an FMA does (see gemm_bf16.c);
 * asserted here over the whole float range, denormals, infinities and NaNs
 * included. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/kernels.h"
#include "gt_testutil.h"

static float bits_to_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t f_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* n floats: random bit patterns (every class) with the edge cases first */
static float *special_floats(int64_t n, uint64_t *s) {
  static const uint32_t edge[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,               /* zeros, infinities */
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, /* NaNs, low payloads */
      0x7f80ffffu, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u, /* denormals, their ties */
      0x007f8000u, 0x007fffffu, 0x3f808000u, 0x3f818000u, 0x3f808001u, /* ties to even, just above */
      0xbf818000u, 0x7f7f8000u, 0x7f7fffffu, 0xff7f8000u, 0x3f7fffffu, /* rounding into infinity */
      0x00800000u, 0x80800000u, 0x3f800000u, 0x477fe000u};
  float *x = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    x[i] = i < (int64_t)(sizeof edge / sizeof edge[0]) ? bits_to_f(edge[i]) : bits_to_f((uint32_t)gt_test_rand_u64(s));
  return x;
}

START_TEST(test_conversions_bit_exact) {
  /* lengths off the 16-lane vectors and the 1024 chunks, and one long enough
   * for the threaded path */
  int64_t lens[] = {1, 15, 17, 33, 1000, 1029, 70001};
  uint64_t s = 99;
  for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
    int64_t n = lens[c];
    float *x = special_floats(n, &s), *r1 = gt_test_copy(x, n), *r2 = gt_test_copy(x, n);
    gt_bf16_round(r1, n);
    gt_bf16_round_ref(r2, n);
    ck_assert_msg(memcmp(r1, r2, sizeof(float) * (size_t)n) == 0, "round, n %lld", (long long)n);
    float *r3 = malloc(sizeof(float) * (size_t)n);
    gt_bf16_round_copy(r3, x, n);
    ck_assert_msg(memcmp(r3, r2, sizeof(float) * (size_t)n) == 0, "round_copy, n %lld", (long long)n);
    free(r3);
    /* in rows: 17 of every 19 (a vector and a one-lane tail), the other 2 untouched */
    float *r4 = gt_test_copy(x, n), *r5 = gt_test_copy(x, n);
    gt_bf16_round_rows(r4, 19, r4, 19, n / 19, 17);
    for (int64_t i = 0; i < n / 19; i++) gt_bf16_round_ref(r5 + i * 19, 17);
    ck_assert_msg(memcmp(r4, r5, sizeof(float) * (size_t)n) == 0, "round_rows, n %lld", (long long)n);
    free(r4), free(r5);
    uint16_t *p1 = malloc(2 * (size_t)n), *p2 = malloc(2 * (size_t)n);
    gt_bf16_pack(p1, x, n);
    gt_bf16_pack_ref(p2, x, n);
    ck_assert_msg(memcmp(p1, p2, 2 * (size_t)n) == 0, "pack, n %lld", (long long)n);
    /* every 16-bit pattern back to float, and the packed values */
    float *u1 = malloc(sizeof(float) * (size_t)n), *u2 = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p1[i] = (uint16_t)gt_test_rand_u64(&s);
    gt_bf16_unpack(u1, p1, n);
    gt_bf16_unpack_ref(u2, p1, n);
    ck_assert_msg(memcmp(u1, u2, sizeof(float) * (size_t)n) == 0, "unpack, n %lld", (long long)n);
    free(x), free(r1), free(r2), free(p1), free(p2), free(u1), free(u2);
  }
  /* the reference itself on the edge cases: ties to even, NaN stays NaN,
   * denormals kept, overflow to infinity */
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x3f808000u)), 0x3f80);
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x3f818000u)), 0x3f82);
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x3f808001u)), 0x3f81);
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x7f800001u)), 0x7fc0);
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x00018000u)), 0x0002);
  ck_assert_uint_eq(gt_f32_to_bf16(bits_to_f(0x7f7f8000u)), 0x7f80);
}
END_TEST

/* ---- gt_bgemm against the reference ---- */

static float opA(int ta, const float *A, int64_t lda, int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; }
static float opB(int tb, const float *B, int64_t ldb, int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; }

/* C = alpha op(A) op(B) + beta C0 by gt_bgemm and by the reference; asserts
 * the bound of the header element by element */
static void run_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad) {
  uint64_t s = (uint64_t)(M * 131 + N * 7 + K + ta * 3 + tb + 1);
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
  float *A = gt_test_alloc_fill(na, &s, -1, 1), *B = gt_test_alloc_fill(nb, &s, -1, 1);
  float *C0 = gt_test_alloc_fill(nc, &s, -1, 1), *R = gt_test_copy(C0, nc), *C = gt_test_copy(C0, nc);
  if (beta == 0.0f) /* beta = 0 must not read C */
    for (int64_t i = 0; i < nc; i++) C[i] = NAN;
  gt_bgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  gt_bgemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double S = 0;
      for (int64_t k = 0; k < K; k++)
        S += fabs((double)gt_bf16_round1(opA(ta, A, lda, i, k)) * gt_bf16_round1(opB(tb, B, ldb, k, j)));
      double tol = ldexp((double)(K + 8) * fabs(alpha) * S + 4 * fabs(beta * C0[i * ldc + j]), -24);
      double got = C[i * ldc + j], want = R[i * ldc + j];
      ck_assert_msg(fabs(got - want) <= tol, "ta%d tb%d M%lld N%lld K%lld [%lld,%lld]: %.9g vs %.9g (tol %.3g)", ta,
                    tb, (long long)M, (long long)N, (long long)K, (long long)i, (long long)j, got, want, tol);
    }
  free(A), free(B), free(C0), free(R), free(C);
}

START_TEST(test_bgemm_transposes_and_edges) {
  /* M around MR (12) and its multiples, N around NR (32), K odd, around the
   * 32-k packing steps and the KC blocks (1024 k on 1 MiB L2s: 2049 is three
   * blocks), N over an NC block (8192); M <= 4 with B^T takes the
   * dot-product path */
  int64_t sizes[][3] = {{1, 1, 1},     {11, 31, 3},   {12, 32, 32},   {13, 33, 33},   {24, 64, 63},
                        {25, 65, 65},  {37, 17, 301}, {5, 100, 1023}, {13, 40, 1024}, {7, 33, 1025},
                        {30, 20, 2049}, {3, 8229, 9}, {200, 7, 31},   {0, 5, 5},      {5, 0, 5},
                        /* up to 4 rows times B^T: the dot-product path (decoding) */
                        {1, 2048, 640}, {4, 300, 641}, {2, 70, 15}};
  float ab[][2] = {{1, 0}, {1, 1}, {0.5f, -0.75f}, {-2, 0}, {1, 1}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const float *p = ab[(i + ta + 2 * tb) % 5];
        run_case(ta, tb, sizes[i][0], sizes[i][1], sizes[i][2], p[0], p[1], (int)((i + tb) % 3));
      }
}
END_TEST

START_TEST(test_bgemm_alpha_zero_and_empty_k) {
  float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {NAN}, B[1] = {NAN};
  gt_bgemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 2.0f, C, 3);
  ck_assert(C[0] == 2 && C[5] == 12);
  gt_bgemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3);
  ck_assert(C[0] == 0 && C[5] == 0);
  for (int i = 0; i < 6; i++) C[i] = NAN;
  gt_bgemm(0, 1, 2, 3, 1, 0.0f, A, 1, B, 1, 0.0f, C, 3); /* alpha 0, beta 0: zeros, inputs unread */
  for (int i = 0; i < 6; i++) ck_assert(C[i] == 0);
}
END_TEST

START_TEST(test_bgemm_specials_and_denormals) {
  /* infinities and NaNs go through as in the reference; a bf16-denormal
   * input counts as zero (vdpbf16ps reads denormals as zero), so the
   * reference is run on the inputs with those flushed */
  int64_t M = 20, N = 40, K = 77;
  uint64_t s = 7;
  float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *B = gt_test_alloc_fill(K * N, &s, -1, 1);
  A[3 * K + 5] = INFINITY;  /* row 3: +-inf */
  A[7 * K + 76] = NAN;      /* row 7: NaN (the last, odd k: its pair is padded) */
  B[10 * N + 2] = -INFINITY; /* column 2: +-inf */
  B[5 * N + 2] = 0.0f;       /* row 3, column 2: inf times 0, NaN */
  for (int64_t k = 0; k < K; k += 9) A[11 * K + k] = 3e-39f * (float)(k % 2 ? 1 : -1); /* denormals */
  for (int64_t j = 0; j < N; j++) B[4 * N + j] = bits_to_f(0x00400000u); /* a denormal row of B */
  float *C = calloc((size_t)(M * N), sizeof(float)), *R = calloc((size_t)(M * N), sizeof(float));
  gt_bgemm(0, 0, M, N, K, 1, A, K, B, N, 0, C, N);
  float *Af = gt_test_copy(A, M * K), *Bf = gt_test_copy(B, K * N);
  for (int64_t i = 0; i < M * K; i++)
    if (fabsf(gt_bf16_round1(Af[i])) < 0x1p-126f) Af[i] = 0;
  for (int64_t i = 0; i < K * N; i++)
    if (fabsf(gt_bf16_round1(Bf[i])) < 0x1p-126f) Bf[i] = 0;
  gt_bgemm_ref(0, 0, M, N, K, 1, Af, K, Bf, N, 0, R, N);
  for (int64_t i = 0; i < M * N; i++) {
    if (isnan(R[i]) || isinf(R[i])) {
      ck_assert_msg(f_to_bits(C[i]) == f_to_bits(R[i]) || (isnan(C[i]) && isnan(R[i])), "[%lld]: %g vs %g",
                    (long long)i, C[i], R[i]);
      continue;
    }
    ck_assert_msg(fabsf(C[i] - R[i]) <= ldexpf((float)(K + 8) * (float)K, -24), "[%lld]: %g vs %g", (long long)i,
                  C[i], R[i]);
  }
  ck_assert(isinf(C[3 * N + 0]) && isnan(C[3 * N + 2]) && isnan(C[7 * N + 5]) && isinf(C[9 * N + 2]));
  free(A), free(B), free(C), free(R), free(Af), free(Bf);
}
END_TEST

/* ---- the fallback ---- */

/* n floats with random sign and mantissa, biased exponent in [elo, ehi]
 * (0: denormals; 255: infinities and NaNs) */
static float *exp_range(int64_t n, uint64_t *s, int elo, int ehi) {
  float *x = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = gt_test_rand_u64(s);
    uint32_t e = (uint32_t)(elo + (int)((r >> 32) % (uint64_t)(ehi - elo + 1)));
    x[i] = bits_to_f((uint32_t)(r & 0x807fffffu) | e << 23);
  }
  return x;
}

static int same_or_both_nan(const float *a, const float *b, int64_t n, int64_t *where) {
  for (int64_t i = 0; i < n; i++)
    if (f_to_bits(a[i]) != f_to_bits(b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
      *where = i;
      return 0;
    }
  return 1;
}

START_TEST(test_fallback_same_bits) {
  if (gt__bgemm_kernel() != 2) {
    /* no AVX512_BF16 here: the fallback is the only AVX-512 path and the
     * comparison below would compare it with itself */
    ck_assert_int_le(gt__bgemm_kernel(), 1);
    return;
  }
  /* the pairs path, whichever path this CPU chose (kernels/bf16_path.h) */
  gt__bgemm_force_path(GT_BGEMM_DP);
  /* exponent ranges: ordinary values, small ones whose products and sums
   * fall under 2^-126 (FTZ), denormal inputs (DAZ), everything (overflow,
   * infinities, NaNs) */
  int ranges[][2] = {{110, 140}, {40, 90}, {0, 70}, {0, 255}};
  int64_t shapes[][3] = {{37, 70, 301}, {13, 33, 1100}, {100, 45, 64}};
  uint64_t s = 2024;
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
      for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        float *A = exp_range(M * K, &s, ranges[r][0], ranges[r][1]);
        float *B = exp_range(K * N, &s, ranges[r][0], ranges[r][1]);
        float *C0 = exp_range(M * N, &s, ranges[r][0], ranges[r][1]);
        float *Cf = gt_test_copy(C0, M * N), *Cs = gt_test_copy(C0, M * N);
        float alpha = t == 3 ? 0.75f : 1.0f, beta = (float)(t % 3) * 0.5f;
        gt_bgemm(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, Cf, N);
        gt__bgemm_force_fallback(1);
        ck_assert_int_eq(gt__bgemm_kernel(), 1);
        gt_bgemm(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, Cs, N);
        gt__bgemm_force_fallback(0);
        int64_t w = 0;
        ck_assert_msg(same_or_both_nan(Cf, Cs, M * N, &w),
                      "exponents [%d, %d] M%lld N%lld K%lld ta%d tb%d [%lld]: vdpbf16ps %a, fallback %a", ranges[r][0],
                      ranges[r][1], (long long)M, (long long)N, (long long)K, ta, tb, (long long)w, Cf[w], Cs[w]);
        free(A), free(B), free(C0), free(Cf), free(Cs);
      }
}
END_TEST

START_TEST(test_bgemm_pack_paths) {
  /* The vdpbf16ps path packs with vcvtne2ps2bf16 (it flushes float32
   * denormals, which the integer rounding keeps: a block holding one is
   * packed again), A not transposed in groups of 16 pair steps (a last group
   * of K/2 mod 16 steps), and computes tiles of at most 4 or 8 rows with
   * fewer accumulators. Against the fallback (integer rounding, [kp][MR]
   * panels, all twelve rows) bit for bit and against the reference, on
   * M mod 12 of 1..4, 5..8 and 9..11, K around the 32-k steps: ordinary
   * values, then the same with one float32 denormal that rounds to the
   * smallest normal bf16 (2^-126) in A, then in B, whose products must
   * survive. */
  if (gt__bgemm_kernel() != 2) return;
  gt__bgemm_force_path(GT_BGEMM_DP);
  int64_t shapes[][3] = {{4, 40, 31}, {8, 33, 32}, {44, 64, 33}, {45, 31, 47}, {52, 96, 65}, {64, 70, 300}, {23, 5, 2}};
  uint64_t s = 77;
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int t = 0; t < 4; t++)
      for (int den = 0; den < 3; den++) {
        int ta = t & 1, tb = t >> 1;
        int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *B = gt_test_alloc_fill(K * N, &s, 1, 2);
        int64_t lda = ta ? M : K, ldb = tb ? K : N, i = M - 1, j = N / 2, k = K - 1;
        if (den == 1) { /* A row i: zero but for one denormal at k */
          for (int64_t kk = 0; kk < K; kk++) A[ta ? kk * lda + i : i * lda + kk] = 0;
          A[ta ? k * lda + i : i * lda + k] = bits_to_f(0x007fffffu);
        } else if (den == 2) { /* B column j: likewise */
          for (int64_t kk = 0; kk < K; kk++) B[tb ? j * ldb + kk : kk * ldb + j] = 0;
          B[tb ? j * ldb + k : k * ldb + j] = bits_to_f(0x007fffffu);
          A[ta ? k * lda : k] = 1.5f; /* row 0's product with it: 1.5 2^-126 */
        }
        float *Cf = calloc((size_t)(M * N), sizeof(float)), *Cs = calloc((size_t)(M * N), sizeof(float));
        gt_bgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, Cf, N);
        gt__bgemm_force_fallback(1);
        gt_bgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, Cs, N);
        gt__bgemm_force_fallback(0);
        ck_assert_msg(memcmp(Cf, Cs, sizeof(float) * (size_t)(M * N)) == 0, "M%lld N%lld K%lld ta%d tb%d den%d",
                      (long long)M, (long long)N, (long long)K, ta, tb, den);
        if (den == 1) /* 2^-126 b with b in [1, 2]: a normal float, not flushed */
          ck_assert(Cf[i * N + j] >= 0x1p-126f && Cf[i * N + 0] >= 0x1p-126f);
        if (den == 2) ck_assert(Cf[j] == 1.5f * 0x1p-126f);
        free(A), free(B), free(Cf), free(Cs);
        if (den == 0) run_case(ta, tb, M, N, K, 0.5f, 1.0f, (int)(c % 3));
      }
}
END_TEST

START_TEST(test_bgemv_same_bits) {
  /* up to 4 rows times B^T (decoding): on the vdpbf16ps path the rows of A
   * are rounded once per call and B's with vcvtne2ps2bf16 (a float32
   * denormal takes the integer rounding), four rows of B side by side; the
   * fallback rounds both in registers, one output at a time. The same FMAs
   * in the same order: the same bits, on every exponent range (denormals,
   * infinities and NaNs included), for M 1..4, N around the groups of four
   * rows and K around the 32-float steps and the 16-float tail. */
  if (gt__bgemm_kernel() != 2) return;
  int ranges[][2] = {{110, 140}, {0, 70}, {0, 255}};
  int64_t nk[][2] = {{1, 15}, {3, 16}, {4, 31}, {5, 32}, {7, 33}, {9, 47}, {70, 640}, {13, 2049}};
  uint64_t s = 404;
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
    for (size_t c = 0; c < sizeof nk / sizeof nk[0]; c++)
      for (int64_t M = 1; M <= 4; M++) {
        int64_t N = nk[c][0], K = nk[c][1], ldc = N + 1;
        float *A = exp_range(M * K, &s, ranges[r][0], ranges[r][1]);
        float *B = exp_range(K * N, &s, ranges[r][0], ranges[r][1]);
        float *C0 = exp_range(M * ldc, &s, 110, 140);
        float *Cf = gt_test_copy(C0, M * ldc), *Cs = gt_test_copy(C0, M * ldc);
        float beta = (float)(c % 3) * 0.5f;
        gt_bgemm(0, 1, M, N, K, 1.0f, A, K, B, K, beta, Cf, ldc);
        gt__bgemm_force_fallback(1);
        gt_bgemm(0, 1, M, N, K, 1.0f, A, K, B, K, beta, Cs, ldc);
        gt__bgemm_force_fallback(0);
        int64_t w = 0;
        ck_assert_msg(same_or_both_nan(Cf, Cs, M * ldc, &w), "exponents [%d, %d] M%lld N%lld K%lld [%lld]: %a vs %a",
                      ranges[r][0], ranges[r][1], (long long)M, (long long)N, (long long)K, (long long)w, Cf[w], Cs[w]);
        free(A), free(B), free(C0), free(Cf), free(Cs);
      }
  /* a float32 denormal in B, alone in its row, times 2^100: kept by the
   * rounding (no DAZ on this path), so the output is 2^100 bf16(d) */
  static const uint32_t dens[] = {0x00400000u, 0x007fffffu, 0x80018000u};
  for (int64_t K = 31; K <= 65; K += 17)
    for (size_t d = 0; d < sizeof dens / sizeof dens[0]; d++) {
      int64_t N = 6;
      float *A = malloc(sizeof(float) * (size_t)K), *B = calloc((size_t)(N * K), sizeof(float)), C[6];
      for (int64_t k = 0; k < K; k++) A[k] = 0x1p100f;
      for (int64_t j = 0; j < N; j++) B[j * K + (j * 7) % K] = bits_to_f(dens[d]);
      gt_bgemm(0, 1, 1, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
      for (int64_t j = 0; j < N; j++)
        ck_assert_msg(C[j] == 0x1p100f * gt_bf16_round1(bits_to_f(dens[d])), "K%lld d%zu [%lld]: %a", (long long)K, d,
                      (long long)j, C[j]);
      free(A), free(B);
    }
}
END_TEST

/* the kernel a child process picks with GEMTRAIN_NO_AVX512BF16=value */
static int kernel_with_env(const char *value) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("GEMTRAIN_NO_AVX512BF16", value, 1);
    _exit(gt__bgemm_kernel());
  }
  int st = 0;
  ck_assert(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
  return WEXITSTATUS(st);
}

START_TEST(test_env_forces_fallback) {
  /* runs in its own process (Check forks each test; it is also the first
   * test, for CK_FORK=no): the variable is read once per process */
  int hw = kernel_with_env("0");
  ck_assert_int_eq(kernel_with_env("1"), hw == 2 ? 1 : hw);
}
END_TEST

/* ---- threads ---- */

static void product_on(int threads, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                       float *C) {
  for (int64_t i = 0; i < M * N; i++) C[i] = (float)(i % 7) - 3.0f;
  gt_team_set_process(threads);
  gt_bgemm(ta, tb, M, N, K, 1.25f, A, ta ? M : K, B, tb ? K : N, 0.5f, C, N);
}

START_TEST(test_bgemm_thread_counts) {
  /* tiles go to whichever thread asks first; 1, 2 and 3 threads must give
   * the same bits. Shapes: rows split, columns split over two NC blocks,
   * several KC blocks, a skinny one */
  int64_t shapes[][3] = {{300, 200, 700}, {2000, 20, 600}, {7, 9000, 40}, {13, 33, 2100}, {3, 500, 77}};
  uint64_t s = 11;
  float *A = gt_test_alloc_fill(2000 * 2100, &s, -1, 1), *B = gt_test_alloc_fill(9000 * 600, &s, -1, 1);
  float *C1 = malloc(sizeof(float) * 360000), *C2 = malloc(sizeof(float) * 360000);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int t = 0; t < 4; t++) {
      int ta = t & 1, tb = t >> 1;
      int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
      product_on(1, ta, tb, M, N, K, A, B, C1);
      for (int th = 2; th <= 3; th++) {
        product_on(th, ta, tb, M, N, K, A, B, C2);
        ck_assert_msg(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0,
                      "M%lld N%lld K%lld ta%d tb%d: %d threads differ from 1", (long long)M, (long long)N,
                      (long long)K, ta, tb, th);
      }
    }
  free(A), free(B), free(C1), free(C2);
}
END_TEST

typedef struct concurrent_job {
  int64_t M, N, K;
  const float *A, *B;
  float *junk, *got;
} concurrent_job;

/* thread t: a float32 and a bf16 product, three times, into its own C */
static void concurrent_products(void *arg, int t) {
  const concurrent_job *j = arg;
  const int64_t M = j->M, N = j->N, K = j->K;
  for (int rep = 0; rep < 3; rep++) {
    gt_sgemm(0, 1, M, N, K, 1, j->A, K, j->B, K, 0, j->junk + t * M * N, N);
    gt_bgemm(0, 1, M, N, K, 1, j->A, K, j->B, K, 0, j->got + t * M * N, N);
  }
}

START_TEST(test_bgemm_inside_parallel_region) {
  /* concurrent calls, each on its own thread with its own buffers (and the
   * float32 kernel's calls in between sharing them), give the serial bits */
  int64_t M = 150, N = 90, K = 600;
  uint64_t s = 21;
  float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *B = gt_test_alloc_fill(K * N, &s, -1, 1);
  float *want = calloc((size_t)(M * N), sizeof(float)), *got = calloc((size_t)(3 * M * N), sizeof(float));
  float *junk = calloc((size_t)(3 * M * N), sizeof(float));
  gt_team_set_process(1);
  gt_bgemm(0, 1, M, N, K, 1, A, K, B, K, 0, want, N);
  gt_team_set_process(3);
  concurrent_job j = {M, N, K, A, B, junk, got};
  gt_test_on_threads(3, concurrent_products, &j);
  for (int t = 0; t < 3; t++) ck_assert(memcmp(want, got + t * M * N, sizeof(float) * (size_t)(M * N)) == 0);
  free(A), free(B), free(want), free(got), free(junk);
}
END_TEST

/* ---- the bf16 matmuls ---- */

/* |x - y| <= 2^-24 2 (K + 8) S elementwise, S[i] the sum of |products|
 * (both are float32 sums of the same exact products, in different orders) */
static void check_close(const char *what, const float *x, const float *y, const double *S, int64_t n, int64_t K) {
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(fabs((double)x[i] - y[i]) <= ldexp(2.0 * (double)(K + 8) * S[i], -24) + 1e-30,
                  "%s [%lld]: %.9g vs %.9g", what, (long long)i, x[i], y[i]);
}

START_TEST(test_matmul_bf16_vs_float32) {
  /* on inputs already rounded to bf16 every product is exact in float32, so
   * the float32 matmuls compute the same sums in another order */
  int64_t n = 70, in = 130, out = 45;
  uint64_t s = 5;
  float *x = gt_test_alloc_fill(n * in, &s, -2, 2), *w = gt_test_alloc_fill(out * in, &s, -1, 1);
  float *dy = gt_test_alloc_fill(n * out, &s, -1, 1);
  gt_bf16_round(x, n * in), gt_bf16_round(w, out * in), gt_bf16_round(dy, n * out);
  float *y1 = gt_test_zeros(n * out), *y2 = gt_test_zeros(n * out);
  gt_matmul_forward_bf16(y1, x, w, n, in, out);
  gt_matmul_forward(y2, x, w, n, in, out);
  double *S = calloc((size_t)(n * out + n * in + out * in), sizeof(double));
  for (int64_t i = 0; i < n; i++)
    for (int64_t o = 0; o < out; o++)
      for (int64_t k = 0; k < in; k++) S[i * out + o] += fabs((double)x[i * in + k] * w[o * in + k]);
  check_close("forward", y1, y2, S, n * out, in);
  /* backward accumulates into the gradients: start them from the same values */
  float *dx1 = gt_test_alloc_fill(n * in, &s, -1, 1), *dw1 = gt_test_alloc_fill(out * in, &s, -1, 1);
  float *dx2 = gt_test_copy(dx1, n * in), *dw2 = gt_test_copy(dw1, out * in);
  gt_matmul_backward_bf16(dx1, dw1, dy, x, w, n, in, out);
  gt_matmul_backward(dx2, dw2, dy, x, w, n, in, out);
  memset(S, 0, sizeof(double) * (size_t)(n * out + n * in + out * in));
  double *Sx = S, *Sw = S + n * in;
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < in; k++) {
      Sx[i * in + k] = fabs(dx2[i * in + k]);
      for (int64_t o = 0; o < out; o++) Sx[i * in + k] += fabs((double)dy[i * out + o] * w[o * in + k]);
    }
  for (int64_t o = 0; o < out; o++)
    for (int64_t k = 0; k < in; k++) {
      Sw[o * in + k] = fabs(dw2[o * in + k]);
      for (int64_t i = 0; i < n; i++) Sw[o * in + k] += fabs((double)dy[i * out + o] * x[i * in + k]);
    }
  check_close("dinp", dx1, dx2, Sx, n * in, out);
  check_close("dw", dw1, dw2, Sw, out * in, n);
  /* dinp or dw NULL: the other alone, the same bits */
  float *dx4 = gt_test_alloc_fill(n * in, &s, -1, 1), *dx5 = gt_test_copy(dx4, n * in);
  gt_matmul_backward_bf16(dx4, NULL, dy, x, w, n, in, out);
  gt_bgemm(0, 0, n, in, out, 1.0f, dy, out, w, in, 1.0f, dx5, in);
  ck_assert(memcmp(dx4, dx5, sizeof(float) * (size_t)(n * in)) == 0);
  free(x), free(w), free(dy), free(y1), free(y2), free(S), free(dx1), free(dw1), free(dx2), free(dw2), free(dx4),
      free(dx5);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bf16_kernels");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_env_forces_fallback);
  tcase_add_test(tc, test_conversions_bit_exact);
  tcase_add_test(tc, test_bgemm_transposes_and_edges);
  tcase_add_test(tc, test_bgemm_alpha_zero_and_empty_k);
  tcase_add_test(tc, test_bgemm_specials_and_denormals);
  tcase_add_test(tc, test_fallback_same_bits);
  tcase_add_test(tc, test_bgemm_pack_paths);
  tcase_add_test(tc, test_bgemv_same_bits);
  tcase_add_test(tc, test_bgemm_thread_counts);
  tcase_add_test(tc, test_bgemm_inside_parallel_region);
  tcase_add_test(tc, test_matmul_bf16_vs_float32);
  return gt_test_run_suite(s, 0);
}
