/* The three compiled copies of the kernels (docs/cpus.md):
 * - the path: gt__kernels_path() follows cpuid (AVX-512 F, BW, VL, DQ, FMA
 *   and AVX2; else AVX2 and FMA; else portable) and GT_TEST_KERNELS=portable
 *   or =avx2 picks a lesser copy (CI runs the unit suites all three ways;
 *   this suite then checks that the switch took);
 * - each copy the CPU can run (AVX2, AVX-512) called side by side with the
 *   portable one on the same inputs: the elementwise kernels, AdamW, the
 *   bf16 conversions and the double-lane reductions give the same bits (the
 *   same float32 operations in the same order, only the vector width
 *   differs); RMSNorm, the cross-entropy and the float32 GEMM sum in another
 *   order and agree within float32 rounding of those sums;
 * - on a CPU with AVX-512, the AVX2 and AVX-512 GEMMs give the same bits:
 *   the same K blocks, one FMA per k in k order, the same epilogue
 *   (kernels/gemm_avx2.c), for plain, rounded (bf16's widened path) and
 *   few-row products, and their products with a stored (bf16, int8, nf4)
 *   W, which the AVX2 copy's quantized packer also gives on the
 *   dequantized matrix's bits on any AVX2 CPU.
 * The suites of each kernel check a copy against the scalar references
 * (run them with GT_TEST_KERNELS=portable or =avx2 for the lesser ones). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gt_testutil.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm_avx2.h"
#include "kernels/gemm_widen.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_gemm.h"

#define GT__BOTH(fn) extern __typeof__(fn) fn##__avx512, fn##__avx2, fn##__portable;
GT__BOTH(gt_geglu_forward)
GT__BOTH(gt_geglu_backward)
GT__BOTH(gt_rope_forward)
GT__BOTH(gt_softcap_forward)
GT__BOTH(gt_softcap_backward)
GT__BOTH(gt_scale_forward)
GT__BOTH(gt_embedding_forward)
GT__BOTH(gt_bf16_round)
GT__BOTH(gt_bf16_round_rows)
GT__BOTH(gt_bf16_pack)
GT__BOTH(gt_bf16_unpack)
GT__BOTH(gt_adamw_update)
GT__BOTH(gt_adamw_update_mu_bf16)
GT__BOTH(gt_sumsq)
GT__BOTH(gt_dot)
GT__BOTH(gt_rmsnorm_forward)
GT__BOTH(gt_xent_forward)
GT__BOTH(gt_sgemm)

/* One copy's kernels, to call beside the portable ones */
typedef struct copy {
  const char *name;
  int (*runs)(void); /* the CPU can run it */
  __typeof__(gt_geglu_forward) *geglu_forward;
  __typeof__(gt_geglu_backward) *geglu_backward;
  __typeof__(gt_rope_forward) *rope_forward;
  __typeof__(gt_softcap_forward) *softcap_forward;
  __typeof__(gt_softcap_backward) *softcap_backward;
  __typeof__(gt_scale_forward) *scale_forward;
  __typeof__(gt_embedding_forward) *embedding_forward;
  __typeof__(gt_bf16_round) *bf16_round;
  __typeof__(gt_bf16_round_rows) *bf16_round_rows;
  __typeof__(gt_bf16_pack) *bf16_pack;
  __typeof__(gt_bf16_unpack) *bf16_unpack;
  __typeof__(gt_adamw_update) *adamw_update;
  __typeof__(gt_adamw_update_mu_bf16) *adamw_update_mu_bf16;
  __typeof__(gt_sumsq) *sumsq;
  __typeof__(gt_dot) *dot;
  __typeof__(gt_rmsnorm_forward) *rmsnorm_forward;
  __typeof__(gt_xent_forward) *xent_forward;
  __typeof__(gt_sgemm) *sgemm;
} copy;

static int cpu_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
}
static int cpu_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

#define COPY(isa, runs) {#isa, runs, gt_geglu_forward__##isa, gt_geglu_backward__##isa, gt_rope_forward__##isa, gt_softcap_forward__##isa, gt_softcap_backward__##isa, gt_scale_forward__##isa, gt_embedding_forward__##isa, gt_bf16_round__##isa, gt_bf16_round_rows__##isa, gt_bf16_pack__##isa, gt_bf16_unpack__##isa, gt_adamw_update__##isa, gt_adamw_update_mu_bf16__##isa, gt_sumsq__##isa, gt_dot__##isa, gt_rmsnorm_forward__##isa, gt_xent_forward__##isa, gt_sgemm__##isa}
static const copy copies[] = {COPY(avx512, cpu_avx512), COPY(avx2, cpu_avx2)};

START_TEST(test_path) {
  const char *e = getenv("GT_TEST_KERNELS");
  const int portable = e && strcmp(e, "portable") == 0, avx2 = e && strcmp(e, "avx2") == 0;
  const int want = portable ? GT__PATH_PORTABLE
                   : cpu_avx512() && !avx2 ? GT__PATH_AVX512
                   : cpu_avx2()           ? GT__PATH_AVX2
                                          : GT__PATH_PORTABLE;
  ck_assert_int_eq(gt__kernels_path(), want);
  ck_assert_int_eq(gt__kernels_avx512(), want == GT__PATH_AVX512);
  ck_assert_str_eq(gt__kernels_name(), want == GT__PATH_AVX512 ? "avx512" : want == GT__PATH_AVX2 ? "avx2" : "portable");
  /* decided once: the same answer after the environment changes */
  setenv("GT_TEST_KERNELS", portable ? "" : "portable", 1);
  ck_assert_int_eq(gt__kernels_path(), want);
  /* the bf16 GEMM follows the same choice (0: no vdpbf16ps kernel or its
   * emulation: the copies, or the widened path on the AVX2 copy) */
  if (want != GT__PATH_AVX512) ck_assert_int_eq(gt__bgemm_kernel(), 0);
  else ck_assert_int_ne(gt__bgemm_kernel(), 0);
  /* and so does the micro-kernel's rate `gemtrain bench gemm` prints: none
   * on the portable copy (its products are OpenBLAS's), a rate on ours */
  const double k = gt__sgemm_kernel_gflops(0.001);
  if (want == GT__PATH_PORTABLE) ck_assert_double_eq(k, 0.0);
  else ck_assert_double_gt(k, 0.0);
}
END_TEST

/* n not a multiple of 16 or 4: every copy's vector tail runs */
enum { N = 4099 };

static float *dup_of(const float *x, int64_t n) { return gt_test_copy(x, n); }

#define SAME(a, b, n) ck_assert_msg(gt_test_same_bits(a, b, n), "%s: the %s copy differs from the portable one", what, c->name)

START_TEST(test_same_bits) {
  const copy *c = &copies[_i];
  if (!c->runs()) return; /* that copy cannot run here */
  uint64_t st = 12345;
  float *x = gt_test_alloc_fill(N, &st, -6, 6), *y = gt_test_alloc_fill(N, &st, -2, 2);
  float *z = gt_test_alloc_fill(N, &st, -1, 1);
  const char *what;
  {
    what = "geglu_forward";
    float *a = gt_test_zeros(N), *b = gt_test_zeros(N);
    c->geglu_forward(a, x, y, N), gt_geglu_forward__portable(b, x, y, N);
    SAME(a, b, N);
    what = "geglu_backward";
    float *a2 = gt_test_copy(y, N), *b2 = gt_test_copy(y, N);
    c->geglu_backward(a, a2, z, x, y, N), gt_geglu_backward__portable(b, b2, z, x, y, N);
    SAME(a, b, N), SAME(a2, b2, N);
    free(a), free(b), free(a2), free(b2);
  }
  {
    what = "softcap";
    float *a = dup_of(x, N), *b = dup_of(x, N);
    c->softcap_forward(a, N, 3.0f), gt_softcap_forward__portable(b, N, 3.0f);
    SAME(a, b, N);
    float *da = dup_of(z, N), *db = dup_of(z, N);
    c->softcap_backward(da, a, N, 3.0f), gt_softcap_backward__portable(db, a, N, 3.0f);
    SAME(da, db, N);
    what = "scale";
    c->scale_forward(a, x, 0.37f, N), gt_scale_forward__portable(b, x, 0.37f, N);
    SAME(a, b, N);
    free(a), free(b), free(da), free(db);
  }
  {
    what = "rope";
    enum { T = 37, H = 3, HD = 64 };
    float cs[T * HD / 2], sn[T * HD / 2];
    gt_rope_table_fill(cs, sn, T, HD, 10000.0, 1.0, 1.0);
    int32_t pos[T];
    for (int t = 0; t < T; t++) pos[t] = (t * 7) % T;
    float *r = gt_test_alloc_fill(T * H * HD, &st, -2, 2);
    float *a = dup_of(r, T * H * HD), *b = dup_of(r, T * H * HD);
    c->rope_forward(a, pos, cs, sn, T, H, HD), gt_rope_forward__portable(b, pos, cs, sn, T, H, HD);
    SAME(a, b, T * H * HD);
    free(r);
    what = "embedding"; /* rows of 100 of x: the table */
    c->embedding_forward(a, pos, x, T, 100, 1.5f), gt_embedding_forward__portable(b, pos, x, T, 100, 1.5f);
    SAME(a, b, T * 100);
    free(a), free(b);
  }
  {
    /* bf16 conversions: the range's edges too (denormals, infinities, NaN) */
    what = "bf16_round";
    float *s = dup_of(x, N);
    const uint32_t special[] = {0x00000001u, 0x007fffffu, 0x00808000u, 0x7f7fffffu, 0x7f800000u,
                                0xff800000u, 0x7fc00001u, 0xff800001u, 0x3f808000u, 0x3f818000u};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++) memcpy(s + 100 * i, &special[i], 4);
    float *a = dup_of(s, N), *b = dup_of(s, N);
    c->bf16_round(a, N), gt_bf16_round__portable(b, N);
    SAME(a, b, N);
    what = "bf16_round_rows"; /* rows of 37 floats 40 apart: vectors, a masked tail, the gaps untouched */
    float *ra = dup_of(s, N), *rb = dup_of(s, N);
    c->bf16_round_rows(ra, 40, ra, 40, N / 40, 37), gt_bf16_round_rows__portable(rb, 40, rb, 40, N / 40, 37);
    SAME(ra, rb, N);
    free(ra), free(rb);
    what = "bf16_pack";
    uint16_t *pa = calloc(N, 2), *pb = calloc(N, 2);
    c->bf16_pack(pa, s, N), gt_bf16_pack__portable(pb, s, N);
    ck_assert_msg(memcmp(pa, pb, 2 * N) == 0, "bf16_pack: the %s copy differs", c->name);
    what = "bf16_unpack";
    c->bf16_unpack(a, pa, N), gt_bf16_unpack__portable(b, pa, N);
    SAME(a, b, N);
    free(s), free(a), free(b), free(pa), free(pb);
  }
  {
    what = "adamw";
    const gt_adamw_hparams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.1f, 7, 0.8f};
    float *pa = dup_of(x, N), *pb = dup_of(x, N), *ma = dup_of(z, N), *mb = dup_of(z, N);
    float *va = gt_test_alloc_fill(N, &st, 0, 1), *vb = dup_of(va, N);
    c->adamw_update(pa, y, ma, va, N, &h), gt_adamw_update__portable(pb, y, mb, vb, N, &h);
    SAME(pa, pb, N), SAME(ma, mb, N), SAME(va, vb, N);
    what = "adamw_mu_bf16";
    uint16_t *ua = calloc(N, 2), *ub;
    gt_bf16_pack__portable(ua, z, N);
    ub = malloc(2 * N), memcpy(ub, ua, 2 * N);
    c->adamw_update_mu_bf16(pa, y, ua, va, N, &h), gt_adamw_update_mu_bf16__portable(pb, y, ub, vb, N, &h);
    SAME(pa, pb, N), SAME(va, vb, N);
    ck_assert_msg(memcmp(ua, ub, 2 * N) == 0, "adamw_mu_bf16: m differs");
    /* a large step, so the update's last bits reach p (at lr 1e-3 an ulp
     * of the update is below an ulp of p) */
    what = "adamw, lr 0.5";
    const gt_adamw_hparams h2 = {0.5f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.1f, 7, 0.8f};
    c->adamw_update(pa, y, ma, va, N, &h2), gt_adamw_update__portable(pb, y, mb, vb, N, &h2);
    SAME(pa, pb, N), SAME(ma, mb, N), SAME(va, vb, N);
    what = "adamw_mu_bf16, lr 0.5";
    c->adamw_update_mu_bf16(pa, y, ua, va, N, &h2), gt_adamw_update_mu_bf16__portable(pb, y, ub, vb, N, &h2);
    SAME(pa, pb, N), SAME(va, vb, N);
    ck_assert_msg(memcmp(ua, ub, 2 * N) == 0, "adamw_mu_bf16, lr 0.5: m differs");
    free(pa), free(pb), free(ma), free(mb), free(va), free(vb), free(ua), free(ub);
  }
  /* sums over 16 double lanes: the same bits on both */
  ck_assert(c->sumsq(x, N) == gt_sumsq__portable(x, N));
  ck_assert(c->dot(x, y, N) == gt_dot__portable(x, y, N));
  free(x), free(y), free(z);
}
END_TEST

/* Sums whose order follows the vector width (RMSNorm's sum of squares, the
 * cross-entropy's logsumexp) or the blocking (OpenBLAS against our GEMM):
 * the same values to float32 rounding of the sums. */
START_TEST(test_close) {
  const copy *c = &copies[_i];
  if (!c->runs()) return;
  uint64_t st = 777;
  enum { R = 13, D = 1000, V = 517, M = 70, NN = 90, K = 300 };
  float *x = gt_test_alloc_fill(R * D, &st, -3, 3), *w = gt_test_alloc_fill(D, &st, -1, 1);
  float *a = gt_test_zeros(R * D), *b = gt_test_zeros(R * D), ra[R], rb[R];
  c->rmsnorm_forward(a, ra, x, w, R, D, 1e-6f, 1.0f);
  gt_rmsnorm_forward__portable(b, rb, x, w, R, D, 1e-6f, 1.0f);
  ck_assert_double_le(gt_test_max_rel_err(a, b, R * D, 1e-3), 1e-5);
  ck_assert_double_le(gt_test_max_rel_err(ra, rb, R, 1e-3), 1e-5);
  int32_t tgt[R];
  for (int r = 0; r < R; r++) tgt[r] = (r * 31) % V;
  float la[R], lb[R], sa[R], sb[R];
  c->xent_forward(la, sa, x, tgt, R, V), gt_xent_forward__portable(lb, sb, x, tgt, R, V);
  ck_assert_double_le(gt_test_max_rel_err(la, lb, R, 1e-3), 1e-5);
  ck_assert_double_le(gt_test_max_rel_err(sa, sb, R, 1e-3), 1e-5);
  float *A = gt_test_alloc_fill(M * K, &st, -1, 1), *B = gt_test_alloc_fill(K * NN, &st, -1, 1);
  float *Ca = gt_test_zeros(M * NN), *Cb = gt_test_zeros(M * NN);
  c->sgemm(0, 0, M, NN, K, 1.0f, A, K, B, NN, 0.0f, Ca, NN);
  gt_sgemm__portable(0, 0, M, NN, K, 1.0f, A, K, B, NN, 0.0f, Cb, NN);
  /* |c| is about sqrt(K / 9) here; each sum errs by at most K 2^-24 sum|ab| */
  ck_assert_double_le(gt_test_max_abs_err(Ca, Cb, M * NN), 2.0 * K * K / 3.0 * 0x1p-24);
  free(x), free(w), free(a), free(b), free(A), free(B), free(Ca), free(Cb);
}
END_TEST

/* The AVX2 GEMM against the AVX-512 one on a CPU that runs both: the same
 * bits for every shape, transpose, alpha and beta (K over several blocks,
 * ragged tiles, few-row products), and on the bf16 widened path (operands
 * rounded as packed, A as bf16 patterns, C's tiles rounded). */
START_TEST(test_gemm_avx2_avx512) {
  if (!cpu_avx512()) return;
  static const struct {
    int64_t M, N, K;
    int tA, tB;
  } sh[] = {{70, 90, 300, 0, 0}, {37, 130, 2100, 1, 0}, {129, 33, 517, 0, 1}, {3, 200, 300, 0, 1},
            {4, 64, 17, 0, 1},   {13, 1, 5, 1, 1},      {256, 257, 1030, 0, 1}, {61, 47, 2500, 1, 1}};
  static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -0.75f}, {2.0f, 0.0f}, {0.5f, 1.0f}};
  uint64_t st = 4242;
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
    for (size_t j = 0; j < sizeof ab / sizeof ab[0]; j++) {
      const int64_t M = sh[i].M, N = sh[i].N, K = sh[i].K;
      const int tA = sh[i].tA, tB = sh[i].tB;
      const int64_t lda = tA ? M : K, ldb = tB ? K : N;
      const float alpha = ab[j][0], beta = ab[j][1];
      float *A = gt_test_alloc_fill(M * K, &st, -1, 1), *B = gt_test_alloc_fill(K * N, &st, -1, 1);
      float *C0 = gt_test_alloc_fill(M * N, &st, -1, 1), *C1 = gt_test_copy(C0, M * N);
      float *C2 = gt_test_copy(C0, M * N), *C3 = gt_test_copy(C0, M * N);
      gt_sgemm__avx2(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C0, N);
      gt_sgemm__avx512(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C1, N);
      ck_assert_msg(gt_test_same_bits(C0, C1, M * N), "sgemm %lld x %lld x %lld (%d%d) alpha %g beta %g: the AVX2 and "
                    "AVX-512 GEMMs differ", (long long)M, (long long)N, (long long)K, tA, tB, alpha, beta);
      if (M > 4 || tA || !tB) { /* (few rows times B^T: the bf16 row kernels, not these loops) */
        ck_assert_int_eq(gt__sgemm_avx2(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C2, N, 1, NULL), 0);
        ck_assert_int_eq(gt__wgemm_packed(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C3, N, NULL), 0);
        ck_assert_msg(gt_test_same_bits(C2, C3, M * N), "widened %lld x %lld x %lld (%d%d): the copies differ",
                      (long long)M, (long long)N, (long long)K, tA, tB);
        /* A as bf16 patterns, C's tiles rounded */
        uint16_t *A16 = malloc((size_t)(M * K) * 2);
        gt_bf16_pack(A16, A, M * K);
        const gt__gemm_epi epi = {1, gt_bf16_round_rows, NULL, NULL, 0};
        ck_assert_int_eq(gt__sgemm_avx2(tA, tB, M, N, K, alpha, (const float *)(const void *)A16, lda, B, ldb, beta,
                                        C2, N, 1, &epi), 0);
        ck_assert_int_eq(gt__wgemm_packed(tA, tB, M, N, K, alpha, (const float *)(const void *)A16, lda, B, ldb,
                                          beta, C3, N, &epi), 0);
        ck_assert_msg(gt_test_same_bits(C2, C3, M * N), "widened, A in bf16, C rounded, %lld x %lld x %lld (%d%d): "
                      "the copies differ", (long long)M, (long long)N, (long long)K, tA, tB);
        free(A16);
      }
      free(A), free(B), free(C0), free(C1), free(C2), free(C3);
    }
  /* the bf16 rounding of the widened packers at the edges: a NaN, an
   * infinity, a value that rounds to infinity, denormals; and C written as
   * bf16 straight from the tiles (beta 0, one K block) */
  {
    const int64_t M = 70, N = 90, K = 120;
    float *A = gt_test_alloc_fill(M * K, &st, -1, 1), *B = gt_test_alloc_fill(K * N, &st, -1, 1);
    const uint32_t nan = 0x7fa00001u, big = 0x7f7fffffu, den = 0x00000003u;
    const float inf = INFINITY;
    memcpy(&A[3 * K + 5], &nan, 4), memcpy(&A[9 * K + 7], &big, 4), memcpy(&A[11 * K + 2], &den, 4);
    memcpy(&B[17 * K + 4], &inf, 4), memcpy(&B[21 * K + 6], &den, 4); /* B is [N, K]: transB */
    float *C2 = gt_test_zeros(M * N), *C3 = gt_test_zeros(M * N);
    ck_assert_int_eq(gt__sgemm_avx2(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N, 1, NULL), 0);
    ck_assert_int_eq(gt__wgemm_packed(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C3, N, NULL), 0);
    ck_assert_msg(gt_test_same_bits(C2, C3, M * N), "widened with NaN, infinities, denormals: the copies differ");
    uint16_t *h2 = calloc((size_t)(M * N), 2), *h3 = calloc((size_t)(M * N), 2);
    const gt__gemm_epi e2 = {0, NULL, gt_bf16_pack_rows, h2, N}, e3 = {0, NULL, gt_bf16_pack_rows, h3, N};
    const int r2 = gt__sgemm_avx2(1, 0, M, N, K, 0.5f, A, M, B, N, 0.0f, NULL, N, 1, &e2);
    const int r3 = gt__wgemm_packed(1, 0, M, N, K, 0.5f, A, M, B, N, 0.0f, NULL, N, &e3);
    ck_assert_int_eq(r2, r3);
    ck_assert_msg(memcmp(h2, h3, 2 * (size_t)(M * N)) == 0, "bf16 tiles (c16): the copies differ");
    free(A), free(B), free(C2), free(C3), free(h2), free(h3);
  }
}
END_TEST

/* The AVX2 copy's packed products with a stored W (gt__qgemm_avx2, the
 * quantized packer) on any CPU with AVX2: the bits of gt__sgemm_avx2 on the
 * dequantized matrix, for bf16, int8 and nf4 stores in both orientations
 * (N and K off the 16-wide panel and the 8-wide lanes, odd row lengths so
 * nf4 rows start on either nibble, K over several blocks, the row kernel's
 * few rows times W^T, among them one row and rows of whole nf4 blocks,
 * which take the block-table path), float32 (rnd 0) and bf16 (rnd 1, also with A as
 * bf16 patterns and C's tiles rounded); an int8 row and an nf4 block
 * whose scale is infinite give what the dequantized matrix's infinities
 * give. On a CPU with AVX-512 too (and its copy not turned off by
 * GT_TEST_KERNELS), the AVX-512 copy's products for stored weights give
 * the same bits. */
START_TEST(test_qgemm_avx2) {
  if (!cpu_avx2()) return;
  static const struct {
    int64_t M, N, K;
    int tA, tW;
  } sh[] = {{70, 37, 300, 0, 1}, {37, 130, 1100, 1, 0}, {9, 33, 517, 0, 0}, {129, 21, 2100, 0, 1},
            {5, 64, 17, 1, 1},   {13, 1, 5, 0, 0},      {6, 257, 131, 0, 1}, {3, 70, 300, 0, 1},
            {1, 33, 17, 0, 1},   {4, 100, 129, 0, 1},   {2, 5, 1030, 0, 0},   {1, 45, 640, 0, 1},
            {3, 20, 192, 0, 1}};
  static const gt_qtype types[] = {GT_Q_BF16, GT_Q_INT8, GT_Q_NF4};
  uint64_t st = 777;
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
    for (int t = 0; t < 3; t++)
      for (int rnd = 0; rnd < 2; rnd++) {
        const int64_t M = sh[i].M, N = sh[i].N, K = sh[i].K;
        const int tA = sh[i].tA, tW = sh[i].tW;
        const int64_t lda = tA ? M : K, wr = tW ? N : K, wc = tW ? K : N;
        float *A = gt_test_alloc_fill(M * K, &st, -1, 1), *src = gt_test_alloc_fill(wr * wc, &st, -1, 1);
        void *buf = calloc((size_t)gt_q_words(types[t], wr, wc) + 1, 4);
        gt_quantize(types[t], src, wr, wc, buf);
        gt_qweight w = gt_qweight_at(types[t], buf, wr, wc);
        if ((i == 0 || K % 64 == 0) && types[t] != GT_Q_BF16) /* an infinite scale: row 3 (int8), block 2 (nf4) */
          ((float *)(void *)w.scales)[types[t] == GT_Q_INT8 ? 3 : 2] = INFINITY;
        float *Wd = malloc(sizeof(float) * (size_t)(wr * wc));
        gt_dequantize_rows_ref(&w, 0, wr, Wd);
        const float alpha = 0.75f, beta = i % 2 ? 0.5f : 0.0f;
        float *C0 = gt_test_alloc_fill(M * N, &st, -1, 1), *C1 = gt_test_copy(C0, M * N);
        float *C2 = gt_test_copy(C0, M * N), *C3 = gt_test_copy(C0, M * N);
        ck_assert_int_eq(gt__qgemm_avx2(tA, tW, M, N, K, alpha, A, lda, &w, beta, C0, N, rnd, NULL), 0);
        ck_assert_int_eq(gt__sgemm_avx2(tA, tW, M, N, K, alpha, A, lda, Wd, wc, beta, C1, N, rnd, NULL), 0);
        ck_assert_msg(gt_test_same_bits(C0, C1, M * N), "stored %d rnd %d, %lld x %lld x %lld (%d%d): not the bits "
                      "of the product on the dequantized matrix", (int)types[t], rnd, (long long)M, (long long)N,
                      (long long)K, tA, tW);
        const int rows = M <= 4 && !tA && tW; /* the row kernels */
        if (cpu_avx512() && gt__kernels_avx512()) { /* (not under GT_TEST_KERNELS=avx2: these check it) */
          const int r = rnd && rows ? gt__qbgemm_packed(tA, tW, M, N, K, alpha, A, lda, &w, beta, C2, N, 0, 0)
                        : rnd       ? gt__wqgemm_packed(tA, tW, M, N, K, alpha, A, lda, &w, beta, C2, N, NULL)
                        : tA        ? (gt_sgemm__avx512(tA, tW, M, N, K, alpha, A, lda, Wd, wc, beta, C2, N), 0)
                                    : gt__qgemm_packed(tW, M, N, K, alpha, A, lda, &w, beta, C2, N);
          ck_assert_int_eq(r, 0);
          ck_assert_msg(gt_test_same_bits(C0, C2, M * N), "stored %d rnd %d, %lld x %lld x %lld (%d%d): the AVX2 and "
                        "AVX-512 copies differ", (int)types[t], rnd, (long long)M, (long long)N, (long long)K, tA, tW);
        }
        if (rnd && rows) { /* the row kernel: C rounded after it; A as bf16 patterns widened first */
          const gt__gemm_epi er = {0, gt_bf16_round_rows, NULL, NULL, 0}, e16 = {1, NULL, NULL, NULL, 0};
          memcpy(C2, C3, sizeof(float) * (size_t)(M * N));
          ck_assert_int_eq(gt__qgemm_avx2(tA, tW, M, N, K, alpha, A, lda, &w, beta, C2, N, 1, &er), 0);
          float *C4 = gt_test_copy(C1, M * N);
          for (int64_t e = 0; e < M * N; e++) C4[e] = gt_bf16_round1(C4[e]);
          ck_assert_msg(gt_test_same_bits(C4, C2, M * N), "stored %d, few rows, C rounded, %lld x %lld x %lld",
                        (int)types[t], (long long)M, (long long)N, (long long)K);
          /* A's bf16 patterns: the bits of the row kernel on A rounded beforehand (what it rounds A to) */
          uint16_t *A16 = malloc((size_t)(M * K) * 2);
          gt_bf16_pack(A16, A, M * K);
          memcpy(C2, C3, sizeof(float) * (size_t)(M * N));
          ck_assert_int_eq(gt__qgemm_avx2(tA, tW, M, N, K, alpha, (const float *)(const void *)A16, lda, &w, beta, C2,
                                          N, 1, &e16), 0);
          ck_assert_msg(gt_test_same_bits(C1, C2, M * N), "stored %d, few rows, A in bf16, %lld x %lld x %lld",
                        (int)types[t], (long long)M, (long long)N, (long long)K);
          free(A16), free(C4);
        } else if (rnd) { /* A as bf16 patterns, C's tiles rounded */
          uint16_t *A16 = malloc((size_t)(M * K) * 2);
          gt_bf16_pack(A16, A, M * K);
          const gt__gemm_epi epi = {1, gt_bf16_round_rows, NULL, NULL, 0};
          memcpy(C2, C3, sizeof(float) * (size_t)(M * N));
          ck_assert_int_eq(gt__qgemm_avx2(tA, tW, M, N, K, alpha, (const float *)(const void *)A16, lda, &w, beta, C2,
                                          N, 1, &epi), 0);
          ck_assert_int_eq(gt__sgemm_avx2(tA, tW, M, N, K, alpha, (const float *)(const void *)A16, lda, Wd, wc, beta,
                                          C3, N, 1, &epi), 0);
          ck_assert_msg(gt_test_same_bits(C2, C3, M * N), "stored %d, A in bf16, C rounded, %lld x %lld x %lld (%d%d)",
                        (int)types[t], (long long)M, (long long)N, (long long)K, tA, tW);
          free(A16);
        }
        free(A), free(src), free(buf), free(Wd), free(C0), free(C1), free(C2), free(C3);
      }
}
END_TEST

int main(void) {
  Suite *s = suite_create("kernel_paths");
  TCase *tc = gt_test_tcase(s, "path");
  tcase_add_test(tc, test_path);
  tc = gt_test_tcase(s, "copies");
  tcase_add_loop_test(tc, test_same_bits, 0, 2);
  tcase_add_loop_test(tc, test_close, 0, 2);
  tcase_add_test(tc, test_gemm_avx2_avx512);
  tcase_add_test(tc, test_qgemm_avx2);
  return gt_test_run_suite(s, 0);
}
