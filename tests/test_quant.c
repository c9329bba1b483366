/* Stored weights (kernels/quant.h): the formats, quantization as bitsandbytes
 * does it, dequantization, and the products' contract.
 * - the NF4 code table against the published one (QLoRA, appendix E), the
 *   thresholds as the midpoints of adjacent codes, hand-checked codes;
 * - gt_quantize gives gt_quantize_ref's bytes (the scalar reference, with
 *   bitsandbytes' decision tree written out) for every format, odd shapes,
 *   ties at the midpoints, zero blocks and rows, NaN and infinite elements,
 *   on 1 and 2 threads;
 * - round trips: each element's code is the nearest, int8 within half a
 *   step, bf16 within half an ulp;
 * - gt_dequantize_rows gives the reference's bits;
 * - gt_qgemm / gt_qbgemm give gt_sgemm / gt_bgemm's bits on the dequantized
 *   matrix in both orientations, odd shapes (M = 1, the row products' 4 and
 *   5, N and K off the register and cache blocks, K not a multiple of 64,
 *   blocks crossed), alpha and beta, 1 and 2 threads, the bf16 GEMM's
 *   fallback kernel, and the double reference within float32's (bf16's)
 *   rounding.
 * Quantizing and dequantizing rows run on the path the CPU takes (AVX-512,
 * AVX2 or scalar), so each is checked where it runs; CI runs this suite again
 * with GT_TEST_KERNELS=avx2 (on an AVX-512 CPU) and portable (the scalar
 * loops; the products then dequantize panels into gt_sgemm / gt_bgemm's
 * portable paths). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "gt_testutil.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

static const gt_qtype QTYPES[] = {GT_Q_BF16, GT_Q_INT8, GT_Q_NF4};
static const char *QNAME[] = {"f32", "bf16", "int8", "nf4"};

/* a stored matrix of src [rows, cols], malloc'ed, and its view */
static void *stored(gt_qtype t, const float *src, int64_t rows, int64_t cols, gt_qweight *w) {
  void *buf = calloc((size_t)gt_q_words(t, rows, cols) + 1, 4);
  gt_quantize(t, src, rows, cols, buf);
  *w = gt_qweight_at(t, buf, rows, cols);
  return buf;
}

static float *dequantized(const gt_qweight *w) {
  float *d = malloc(sizeof(float) * (size_t)(w->rows * w->cols) + 4);
  gt_dequantize_rows_ref(w, 0, w->rows, d);
  return d;
}

START_TEST(test_nf4_table) {
  /* QLoRA (Dettmers et al. 2023), appendix E, and bitsandbytes' table */
  static const double published[16] = {-1.0,
                                       -0.6961928009986877,
                                       -0.5250730514526367,
                                       -0.39491748809814453,
                                       -0.28444138169288635,
                                       -0.18477343022823334,
                                       -0.09105003625154495,
                                       0.0,
                                       0.07958029955625534,
                                       0.16093020141124725,
                                       0.24611230194568634,
                                       0.33791524171829224,
                                       0.44070982933044434,
                                       0.5626170039176941,
                                       0.7229568362236023,
                                       1.0};
  for (int i = 0; i < 16; i++) ck_assert_float_eq(gt_nf4_code[i], (float)published[i]);
  for (int i = 0; i < 15; i++) {
    ck_assert_float_lt(gt_nf4_code[i], gt_nf4_mid[i]);
    ck_assert_float_lt(gt_nf4_mid[i], gt_nf4_code[i + 1]);
    ck_assert_msg(fabs(gt_nf4_mid[i] - (published[i] + published[i + 1]) / 2) < 1e-7, "midpoint %d", i);
  }
}
END_TEST

static int nf4_at(const void *buf, int64_t i) {
  const uint8_t b = ((const uint8_t *)buf)[i / 2];
  return i % 2 ? b & 15 : b >> 4;
}

START_TEST(test_hand_values) {
  /* one nf4 block, absmax 2: x = v / 2 */
  float v[64] = {0};
  v[0] = 2.0f;   /* x 1: code 15 */
  v[1] = -2.0f;  /* x -1: code 0 */
  v[2] = 1.0f;   /* x 0.5, below the 12|13 midpoint 0.50166: code 12 */
  v[3] = 0.16f;  /* x 0.08, between 0.0398 and 0.1203: code 8 */
  v[4] = -0.1f;  /* x -0.05, below -0.04553: code 6 */
  v[5] = 0.0f;   /* code 7 (0.0) */
  v[6] = 1.45f;  /* x 0.725, above 0.6428, below 0.8615: code 14 */
  gt_qweight w;
  void *buf = stored(GT_Q_NF4, v, 1, 64, &w);
  const int want[7] = {15, 0, 12, 8, 6, 7, 14};
  for (int i = 0; i < 7; i++) ck_assert_int_eq(nf4_at(buf, i), want[i]);
  ck_assert_uint_eq(((uint8_t *)buf)[0], 0xF0); /* the even element in the high nibble */
  ck_assert_float_eq(w.scales[0], 2.0f);
  float d[64];
  gt_dequantize_rows(&w, 0, 1, d);
  ck_assert_float_eq(d[2], 0.44070982933044434f * 2.0f);
  ck_assert_float_eq(d[6], 0.7229568362236023f * 2.0f);
  free(buf);
  /* an all-zero block: absmax 0, x = 0 * inf (NaN): bitsandbytes' code 0,
   * dequantized to (signed) zero */
  float z[64] = {0};
  buf = stored(GT_Q_NF4, z, 2, 32, &w);
  ck_assert_float_eq(w.scales[0], 0.0f);
  ck_assert_int_eq(nf4_at(buf, 5), 0);
  gt_dequantize_rows(&w, 0, 2, d);
  for (int i = 0; i < 64; i++) ck_assert_float_eq(d[i], 0.0f);
  free(buf);
  /* int8: absmax 1, q = rint(127 v), ties to even */
  float r[5] = {1.0f, -0.5f, 0.25f, 0.0f, -1.0f};
  buf = stored(GT_Q_INT8, r, 1, 5, &w);
  const int8_t *q = buf;
  ck_assert_int_eq(q[0], 127);
  ck_assert_int_eq(q[1], -64); /* -63.5 */
  ck_assert_int_eq(q[2], 32);  /* 31.75 */
  ck_assert_int_eq(q[3], 0);
  ck_assert_int_eq(q[4], -127);
  ck_assert_float_eq(w.scales[0], 1.0f / 127.0f);
  free(buf);
  /* int8 ties: absmax 127 makes the multiplier exactly 1, so every x.5 is a
   * tie, which nearest-even rounds to the even code and half-away-from-zero
   * (roundf) does not; 21 values reach the vector loops and their tails */
  float t[21] = {127.0f, 62.5f, -0.5f, 1.5f, -2.5f, 0.5f, 3.5f, -4.5f, 5.5f, -6.5f, 7.5f,
                 -8.5f, 9.5f, -10.5f, 11.5f, -12.5f, 13.5f, -14.5f, 15.5f, 16.5f, -126.5f};
  const int want_t[21] = {127, 62, 0, 2, -2, 0, 4, -4, 6, -6, 8, -8, 10, -10, 12, -12, 14, -14, 16, 16, -126};
  buf = stored(GT_Q_INT8, t, 1, 21, &w);
  q = buf;
  for (int i = 0; i < 21; i++) ck_assert_msg(q[i] == want_t[i], "int8 tie %g: code %d, want %d", t[i], q[i], want_t[i]);
  ck_assert_float_eq(w.scales[0], 1.0f);
  free(buf);
  /* the layout: 5 int8 bytes, then the scale at the next word */
  ck_assert_int_eq(gt_q_words(GT_Q_INT8, 1, 5), 3);
  ck_assert_int_eq(gt_q_words(GT_Q_NF4, 3, 43), 17 + 3); /* 65 bytes, 3 blocks */
  ck_assert_int_eq(gt_q_words(GT_Q_BF16, 3, 3), 5);
}
END_TEST

/* random values with some exactly on the nf4 midpoints times the block's
 * absmax and a zero block, rows and columns of odd sizes */
static float *quant_input(int64_t rows, int64_t cols, uint64_t seed) {
  uint64_t s = seed;
  const int64_t n = rows * cols;
  float *x = gt_test_alloc_fill(n, &s, -3, 3);
  for (int64_t i = 0; i < n; i += 7) {
    /* a tie: the block's absmax 4 (set below) times a midpoint */
    x[i] = 4.0f * gt_nf4_mid[(i / 7) % 15];
  }
  for (int64_t b = 0; b * 64 < n; b++) x[b * 64] = b % 2 ? -4.0f : 4.0f;
  if (n > 256)
    for (int64_t i = 128; i < 192; i++) x[i] = 0.0f;
  return x;
}

START_TEST(test_quantize_matches_ref) {
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 5}, {7, 65}, {13, 33}, {64, 64}, {5, 129}, {300, 301}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int t = 0; t < 4; t++) {
      const int64_t rows = shapes[si][0], cols = shapes[si][1], words = gt_q_words((gt_qtype)t, rows, cols);
      float *x = quant_input(rows, cols, 5 + si);
      uint32_t *a = calloc((size_t)words, 4), *b = calloc((size_t)words, 4);
      memset(a, 0xAB, (size_t)words * 4); /* the padding bytes must be written */
      gt_quantize((gt_qtype)t, x, rows, cols, a);
      gt_quantize_ref((gt_qtype)t, x, rows, cols, b);
      ck_assert_msg(memcmp(a, b, (size_t)words * 4) == 0, "%s %lldx%lld: the stored bytes differ from the reference",
                    QNAME[t], (long long)rows, (long long)cols);
      free(x), free(a), free(b);
    }
}
END_TEST

/* NaN and infinite elements: each path (the one this CPU takes; CI's
 * GT_TEST_KERNELS runs give the others) writes the reference's bytes. A
 * NaN is passed over by the absmax (fmaxf's rule) and coded 0 in int8 and
 * nf4 (int8: NaN * (127 / absmax); nf4: greater than no midpoint); an
 * infinity makes the absmax infinite, and every other element of its row
 * or block a 0 (or NaN: 0 times inf) code. Rows of 70: the vector loops'
 * whole lanes, a tail, and a NaN in the first and in a later lane group. */
START_TEST(test_quantize_nan_inf) {
  const int64_t rows = 6, cols = 70, n = rows * cols;
  uint64_t st = 11;
  float *x = gt_test_alloc_fill(n, &st, -2, 2);
  x[0 * cols + 1] = NAN;                          /* row 0: a NaN among values */
  for (int64_t c = 0; c < cols; c++) x[1 * cols + c] = 0.0f;
  x[1 * cols + 40] = NAN;                         /* row 1: zeros and a NaN (absmax 0) */
  x[2 * cols + 9] = INFINITY;                     /* row 2: an infinity */
  x[3 * cols + 66] = -INFINITY, x[3 * cols + 3] = NAN; /* row 3: both, one in the tail */
  x[4 * cols + 69] = NAN;                         /* row 4: a NaN in the last lane */
  for (int t = 1; t < 4; t++) {
    const int64_t words = gt_q_words((gt_qtype)t, rows, cols);
    uint32_t *a = calloc((size_t)words, 4), *b = calloc((size_t)words, 4);
    gt_quantize((gt_qtype)t, x, rows, cols, a);
    gt_quantize_ref((gt_qtype)t, x, rows, cols, b);
    ck_assert_msg(memcmp(a, b, (size_t)words * 4) == 0, "%s: NaN and infinite elements: the stored bytes differ from "
                  "the reference", QNAME[t]);
    free(a), free(b);
  }
  /* the rule itself, on the reference: int8 row 0's NaN is code 0 and its
   * scale that of the other elements; nf4 block 0 (row 0's first 64) too */
  gt_qweight w;
  void *buf = stored(GT_Q_INT8, x, rows, cols, &w);
  float amax = 0.0f;
  for (int64_t c = 0; c < cols; c++) amax = c == 1 ? amax : fmaxf(amax, fabsf(x[c]));
  ck_assert_int_eq(((const int8_t *)buf)[1], 0);
  ck_assert_float_eq(w.scales[0], amax / 127.0f);
  ck_assert_int_eq(((const int8_t *)buf)[1 * cols + 40], 0);
  free(buf);
  buf = stored(GT_Q_NF4, x, rows, cols, &w);
  ck_assert_int_eq(((const uint8_t *)buf)[0] & 15, 0); /* element 1: the low nibble of byte 0 */
  free(buf);
  free(x);
}
END_TEST

START_TEST(test_quantize_threads) {
  /* large enough to run on the team: the bytes do not depend on it */
  const int64_t rows = 301, cols = 515;
  float *x = quant_input(rows, cols, 99);
  for (int t = 1; t < 4; t++) {
    const int64_t words = gt_q_words((gt_qtype)t, rows, cols);
    uint32_t *a = calloc((size_t)words, 4), *b = calloc((size_t)words, 4), *r = calloc((size_t)words, 4);
    gt_team_set_process(1);
    gt_quantize((gt_qtype)t, x, rows, cols, a);
    gt_team_set_process(2);
    gt_quantize((gt_qtype)t, x, rows, cols, b);
    gt_quantize_ref((gt_qtype)t, x, rows, cols, r);
    ck_assert_msg(memcmp(a, b, (size_t)words * 4) == 0, "%s: 1 and 2 threads differ", QNAME[t]);
    ck_assert_msg(memcmp(a, r, (size_t)words * 4) == 0, "%s: differs from the reference", QNAME[t]);
    free(a), free(b), free(r);
  }
  free(x);
}
END_TEST

START_TEST(test_round_trip) {
  const int64_t rows = 37, cols = 203, n = rows * cols;
  float *x = quant_input(rows, cols, 3);
  for (int ti = 0; ti < 3; ti++) {
    gt_qweight w;
    void *buf = stored(QTYPES[ti], x, rows, cols, &w);
    float *d = dequantized(&w);
    for (int64_t i = 0; i < n; i++) {
      const double v = x[i], e = fabs((double)d[i] - v);
      if (w.type == GT_Q_BF16) {
        ck_assert_msg(e <= fabs(v) * 0x1p-8, "bf16 %lld", (long long)i);
      } else if (w.type == GT_Q_INT8) {
        ck_assert_msg(e <= w.scales[i / cols] * 0.5 * (1 + 1e-5), "int8 %lld: %g from %g", (long long)i, d[i], v);
      } else {
        /* the chosen code is a nearest one (ties either way) */
        const double amax = w.scales[i / 64], xn = v / amax;
        if (amax == 0.0) { /* the zero block */
          ck_assert_float_eq(d[i], 0.0f);
          continue;
        }
        double best = 1e30;
        for (int c = 0; c < 16; c++) best = fmin(best, fabs(xn - gt_nf4_code[c]));
        const int q = nf4_at(buf, i);
        ck_assert_msg(fabs(xn - gt_nf4_code[q]) <= best + 1e-6, "nf4 %lld: code %d for %g", (long long)i, q, xn);
        ck_assert_float_eq(d[i], gt_nf4_code[q] * w.scales[i / 64]);
      }
    }
    free(d), free(buf);
  }
  free(x);
}
END_TEST

START_TEST(test_dequantize_rows) {
  const int64_t rows = 29, cols = 77; /* rows start off the nf4 blocks and bytes */
  float *x = quant_input(rows, cols, 8);
  for (int t = 0; t < 4; t++) {
    gt_qweight w;
    void *buf = stored((gt_qtype)t, x, rows, cols, &w);
    for (int64_t r0 = 0; r0 < rows; r0 += 5) {
      const int64_t n = r0 + 7 <= rows ? 7 : rows - r0;
      float *a = malloc(sizeof(float) * (size_t)(n * cols)), *b = malloc(sizeof(float) * (size_t)(n * cols));
      gt_dequantize_rows(&w, r0, n, a);
      gt_dequantize_rows_ref(&w, r0, n, b);
      ck_assert_msg(gt_test_same_bits(a, b, n * cols), "%s rows %lld..", QNAME[t], (long long)r0);
      free(a), free(b);
    }
    free(buf);
  }
  free(x);
}
END_TEST

/* ---- products ---- */

typedef struct prod_case {
  int64_t M, N, K;
} prod_case;

/* M: one row, the row products' limit 4 and past it, a few tiles, several
 * row tasks; N: one column, off the 32-wide panel, past one 1024-column
 * block; K: 1, off 16 and 64, past one K block (1024) */
static const prod_case CASES[] = {{1, 37, 65}, {4, 100, 130}, {5, 33, 63}, {1, 1, 1}, {13, 70, 1},
                                  {50, 1100, 40}, {29, 65, 1100}, {300, 96, 256}, {2, 1030, 129}};

static void check_product(int bf, int transW, const prod_case *pc, gt_qtype t, float alpha, float beta, uint64_t seed) {
  const int64_t M = pc->M, N = pc->N, K = pc->K, ldc = N + 3, lda = K + 1;
  uint64_t s = seed;
  float *A = gt_test_alloc_fill(M * lda, &s, -1, 1);
  const int64_t wr = transW ? N : K, wc = transW ? K : N;
  float *src = quant_input(wr, wc, seed + 1);
  gt_qweight w;
  void *buf = stored(t, src, wr, wc, &w);
  float *Wd = dequantized(&w);
  float *C0 = gt_test_alloc_fill(M * ldc, &s, -2, 2), *C1 = gt_test_copy(C0, M * ldc), *C2 = gt_test_copy(C0, M * ldc);
  (bf ? gt_qbgemm : gt_qgemm)(transW, M, N, K, alpha, A, lda, &w, beta, C1, ldc);
  (bf ? gt_bgemm : gt_sgemm)(0, transW, M, N, K, alpha, A, lda, Wd, wc, beta, C2, ldc);
  ck_assert_msg(gt_test_same_bits(C1, C2, M * ldc), "%s %s transW %d M%lld N%lld K%lld alpha %g beta %g: not the bits of the GEMM on the dequantized matrix",
                bf ? "qbgemm" : "qgemm", QNAME[t], transW, (long long)M, (long long)N, (long long)K, alpha, beta);
  /* against the double reference: float32 sums (bf16: A and W rounded) */
  float *C3 = gt_test_copy(C0, M * ldc);
  gt_qgemm_ref(transW, M, N, K, alpha, A, lda, &w, beta, C3, ldc);
  double err = gt_test_scaled_err(C1, C3, M * ldc);
  gt_test_check_err(bf ? "qbgemm vs double" : "qgemm vs double", err, bf ? 2e-2 : 1e-5);
  free(A), free(src), free(buf), free(Wd), free(C0), free(C1), free(C2), free(C3);
}

START_TEST(test_products_bits) {
  for (int bf = 0; bf < 2; bf++)
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
      for (int ti = 0; ti < 3; ti++)
        for (int tw = 0; tw < 2; tw++)
          check_product(bf, tw, &CASES[c], QTYPES[ti], 1.0f, 0.0f, 100 + c);
}
END_TEST

START_TEST(test_products_alpha_beta) {
  const float ab[][2] = {{0.75f, 1.0f}, {1.5f, -0.5f}, {-1.0f, 0.0f}};
  const prod_case cs[] = {{3, 50, 70}, {40, 66, 200}};
  for (int bf = 0; bf < 2; bf++)
    for (int i = 0; i < 3; i++)
      for (int c = 0; c < 2; c++)
        for (int ti = 0; ti < 3; ti++)
          for (int tw = 0; tw < 2; tw++) check_product(bf, tw, &cs[c], QTYPES[ti], ab[i][0], ab[i][1], 7 + i);
  /* alpha 0 and K 0: C = beta C, W never read */
  float C[6] = {1, 2, 3, 4, 5, 6}, A[6] = {0};
  gt_qweight none = {GT_Q_NF4, NULL, NULL, 3, 0};
  gt_qgemm(1, 2, 3, 0, 1.0f, A, 1, &none, 0.5f, C, 3);
  ck_assert_float_eq(C[5], 3.0f);
  gt_qbgemm(1, 2, 3, 0, 1.0f, A, 1, &none, 0.0f, C, 3);
  ck_assert_float_eq(C[5], 0.0f);
}
END_TEST

START_TEST(test_products_threads_and_fallback) {
  const prod_case cs[] = {{200, 300, 520}, {3, 700, 300}, {60, 2100, 70}};
  for (int bf = 0; bf < 2; bf++)
    for (int c = 0; c < 3; c++)
      for (int ti = 0; ti < 3; ti++)
        for (int tw = 0; tw < 2; tw++) {
          const int64_t M = cs[c].M, N = cs[c].N, K = cs[c].K, wr = tw ? N : K, wc = tw ? K : N;
          uint64_t s = 31 + c;
          float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *src = quant_input(wr, wc, 41 + c);
          gt_qweight w;
          void *buf = stored(QTYPES[ti], src, wr, wc, &w);
          float *C1 = gt_test_zeros(M * N), *C2 = gt_test_zeros(M * N);
          gt_team_set_process(1);
          (bf ? gt_qbgemm : gt_qgemm)(tw, M, N, K, 1.0f, A, K, &w, 0.0f, C1, N);
          gt_team_set_process(2);
          (bf ? gt_qbgemm : gt_qgemm)(tw, M, N, K, 1.0f, A, K, &w, 0.0f, C2, N);
          ck_assert_msg(gt_test_same_bits(C1, C2, M * N), "%s %s transW %d M%lld: 1 and 2 threads differ",
                        bf ? "qbgemm" : "qgemm", QNAME[QTYPES[ti]], tw, (long long)M);
          if (bf) {
            /* the bf16 GEMM's fallback kernel (two FMAs a pair): its bits */
            gt__bgemm_force_fallback(1);
            float *Wd = dequantized(&w);
            gt_qbgemm(tw, M, N, K, 1.0f, A, K, &w, 0.0f, C1, N);
            gt_bgemm(0, tw, M, N, K, 1.0f, A, K, Wd, wc, 0.0f, C2, N);
            gt__bgemm_force_fallback(0);
            ck_assert_msg(gt_test_same_bits(C1, C2, M * N), "qbgemm fallback %s transW %d M%lld",
                          QNAME[QTYPES[ti]], tw, (long long)M);
            free(Wd);
          }
          free(A), free(src), free(buf), free(C1), free(C2);
        }
}
END_TEST

int main(void) {
  Suite *s = suite_create("quant");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_nf4_table);
  tcase_add_test(tc, test_hand_values);
  tcase_add_test(tc, test_quantize_matches_ref);
  tcase_add_test(tc, test_quantize_nan_inf);
  tcase_add_test(tc, test_quantize_threads);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_dequantize_rows);
  tcase_add_test(tc, test_products_bits);
  tcase_add_test(tc, test_products_alpha_beta);
  tcase_add_test(tc, test_products_threads_and_fallback);
  return gt_test_run_suite(s, 0);
}
