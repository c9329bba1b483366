/* gt__sgemm_fixed (kernels/gemm_fixed.c), gt_sgemm's OpenBLAS path: the
 * float64 reference over every transpose, sizes cut in rows and in columns,
 * alpha/beta and strided leading dimensions; and the same bits on 1, 2 and 3
 * threads, called alone or from inside a caller's parallel region. A native
 * build reaches this path only when packing buffers cannot grow; a build
 * without AVX-512 takes it for every product, and before it existed gave
 * different bits on 1 and 2 threads (test_gemm and test_fsdp failed there):
 * OpenBLAS cuts a multi-threaded call by its thread count.
 *
 * Bound: |got - want| <= 1e-5 (sqrt(K) + |want|) for inputs in [-1, 1], as
 * in test_gemm (OpenBLAS's order of additions is not the reference's). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "kernels/gemm_fixed.h"
#include "kernels/kernels.h"
#include "gt_testutil.h"

typedef struct prod {
  int ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float *A, *B, *C0; /* C0: C before the call */
} prod;

static prod prod_make(int ta, int tb, int64_t M, int64_t N, int64_t K, int pad) {
  prod p = {ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad, NULL, NULL, NULL};
  uint64_t s = (uint64_t)(M * 131 + N * 7 + K + ta * 3 + tb);
  p.A = gt_test_alloc_fill((ta ? K : M) * p.lda, &s, -1, 1);
  p.B = gt_test_alloc_fill((tb ? N : K) * p.ldb, &s, -1, 1);
  p.C0 = gt_test_alloc_fill(M * p.ldc, &s, -1, 1);
  return p;
}

static void prod_free(prod *p) { free(p->A), free(p->B), free(p->C0); }

typedef struct inside_job {
  const prod *p;
  float alpha, beta;
  float *C;
} inside_job;

/* member 0 of a running team computes the product (it then runs alone) */
static void inside_product(void *arg, int tid, int nth) {
  const inside_job *j = arg;
  const prod *p = j->p;
  if (tid == 0)
    gt__sgemm_fixed(p->ta, p->tb, p->M, p->N, p->K, j->alpha, p->A, p->lda, p->B, p->ldb, j->beta, j->C, p->ldc);
}

/* C = C0, then the product into it on `threads` threads; inside: called by
 * one member of a running team of 2 (the caller's own region) */
static float *prod_run(const prod *p, float alpha, float beta, int threads, int inside) {
  size_t n = (size_t)(p->M * p->ldc);
  float *C = malloc(sizeof(float) * n);
  memcpy(C, p->C0, sizeof(float) * n);
  gt_team_set_process(threads);
  if (inside) {
    gt_team *t = NULL;
    ck_assert_int_eq(gt_team_create(2, &t, NULL), GT_OK);
    inside_job j = {p, alpha, beta, C};
    gt_team_run(t, inside_product, &j);
    gt_team_destroy(t);
  } else {
    gt__sgemm_fixed(p->ta, p->tb, p->M, p->N, p->K, alpha, p->A, p->lda, p->B, p->ldb, beta, C, p->ldc);
  }
  return C;
}

START_TEST(test_against_reference) {
  /* rows cut (M >= N), columns cut, one block, and sides that do not
   * divide into the blocks evenly */
  int64_t sizes[][3] = {{1, 1, 1}, {13, 33, 7}, {300, 200, 700}, {200, 300, 70}, {2100, 40, 33},
                        {17, 2500, 65}, {129, 127, 256}};
  float ab[][2] = {{1, 0}, {0.5f, 1}, {-2, 0.25f}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int k = 0; k < 3; k++) {
          int pad = (int)((i + (size_t)k) % 3);
          prod p = prod_make(ta, tb, sizes[i][0], sizes[i][1], sizes[i][2], pad);
          float *C = prod_run(&p, ab[k][0], ab[k][1], 2, 0);
          float *R = malloc(sizeof(float) * (size_t)(p.M * p.ldc));
          memcpy(R, p.C0, sizeof(float) * (size_t)(p.M * p.ldc));
          gt_sgemm_ref(ta, tb, p.M, p.N, p.K, ab[k][0], p.A, p.lda, p.B, p.ldb, ab[k][1], R, p.ldc);
          for (int64_t r = 0; r < p.M; r++)
            for (int64_t c = 0; c < p.ldc; c++) {
              double want = R[r * p.ldc + c], got = C[r * p.ldc + c];
              if (c >= p.N) { /* the padding is not C's: untouched */
                ck_assert_msg(got == p.C0[r * p.ldc + c], "padding [%lld,%lld] written", (long long)r,
                              (long long)c);
                continue;
              }
              ck_assert_msg(fabs(got - want) <= 1e-5 * (sqrt((double)p.K) + fabs(want)),
                            "ta%d tb%d M%lld N%lld K%lld [%lld,%lld]: %.8g vs %.8g", ta, tb, (long long)p.M,
                            (long long)p.N, (long long)p.K, (long long)r, (long long)c, got, want);
            }
          free(C), free(R);
          prod_free(&p);
        }
}
END_TEST

START_TEST(test_same_bits_any_team) {
  int64_t sizes[][3] = {{300, 200, 700}, {64, 1000, 640}, {2048, 256, 256}, {100, 100, 2000}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        prod p = prod_make(ta, tb, sizes[i][0], sizes[i][1], sizes[i][2], 1);
        float *C1 = prod_run(&p, 1, 0.5f, 1, 0);
        size_t bytes = sizeof(float) * (size_t)(p.M * p.ldc);
        int cases[][2] = {{2, 0}, {3, 0}, {1, 1}, {2, 1}};
        for (int c = 0; c < 4; c++) {
          float *C = prod_run(&p, 1, 0.5f, cases[c][0], cases[c][1]);
          ck_assert_msg(memcmp(C1, C, bytes) == 0, "M%lld N%lld K%lld ta%d tb%d: %d threads%s differ from 1",
                        (long long)p.M, (long long)p.N, (long long)p.K, ta, tb, cases[c][0],
                        cases[c][1] ? " (inside a parallel region)" : "");
          free(C);
        }
        free(C1);
        prod_free(&p);
      }
  gt_team_set_process(2);
}
END_TEST

START_TEST(test_blocks_follow_the_shape) {
  ck_assert_int_eq(gt__sgemm_fixed_blocks(1, 1), 1);
  ck_assert_int_eq(gt__sgemm_fixed_blocks(255, 3), 1);
  ck_assert_int_eq(gt__sgemm_fixed_blocks(256, 3), 2);
  ck_assert_int_eq(gt__sgemm_fixed_blocks(40, 2100), 16); /* the long side, columns */
  ck_assert_int_eq(gt__sgemm_fixed_blocks(1 << 20, 640), 16);
  int t = gt_team_size(gt_team_current());
  gt_team_set_process(3);
  ck_assert_int_eq(gt__sgemm_fixed_blocks(300, 200), 2); /* no team in it */
  gt_team_set_process(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("blas_fixed");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_against_reference);
  tcase_add_test(tc, test_same_bits_any_team);
  tcase_add_test(tc, test_blocks_follow_the_shape);
  return gt_test_run_suite(s, 0);
}
