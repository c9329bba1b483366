/* gt_sgemm (our packed AVX-512 kernel) against the float64 reference over
 * every transpose combination, sizes off the register and cache blocks,
 * alpha/beta, strided leading dimensions, and thread-count invariance. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "gt_testutil.h"

static void run_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int pad) {
  uint64_t s = (uint64_t)(M * 131 + N * 7 + K + ta * 3 + tb);
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
  float *A = gt_test_alloc_fill(na, &s, -1, 1), *B = gt_test_alloc_fill(nb, &s, -1, 1);
  float *C = gt_test_alloc_fill(nc, &s, -1, 1), *R = malloc(sizeof(float) * (size_t)(nc > 0 ? nc : 1));
  memcpy(R, C, sizeof(float) * (size_t)nc);
  if (beta == 0.0f) /* beta = 0 must not read C: poison it */
    for (int64_t i = 0; i < nc; i++) C[i] = NAN;
  gt_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  gt_sgemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double want = R[i * ldc + j], got = C[i * ldc + j];
      ck_assert_msg(fabs(got - want) <= 1e-5 * (sqrt((double)K) + fabs(want)),
                    "ta%d tb%d M%lld N%lld K%lld [%lld,%lld]: %.8g vs %.8g", ta, tb, (long long)M,
                    (long long)N, (long long)K, (long long)i, (long long)j, got, want);
    }
  free(A), free(B), free(C), free(R);
}

START_TEST(test_all_transposes_odd_sizes) {
  int64_t sizes[][3] = {{1, 1, 1}, {13, 33, 7}, {12, 32, 256}, {25, 65, 257}, {200, 17, 300},
                        {3, 100, 513}, {97, 2100, 5}, {0, 5, 5}, {5, 0, 5},
                        /* at most 4 rows times B^T: the dot-product path of decoding */
                        {1, 777, 300}, {2, 5, 16}, {4, 64, 33}, {1, 3000, 15}, {4, 1, 1024}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        run_case(ta, tb, sizes[i][0], sizes[i][1], sizes[i][2], 1.0f, (i & 1) ? 1.0f : 0.0f, (int)(i % 3));
}
END_TEST

START_TEST(test_alpha_beta_and_empty_k) {
  run_case(0, 1, 40, 50, 60, 0.5f, -2.0f, 1);
  run_case(0, 1, 1, 500, 60, 0.5f, -2.0f, 1);
  run_case(0, 1, 3, 50, 17, -1.5f, 0.25f, 2);
  run_case(1, 0, 40, 50, 60, 2.0f, 0.25f, 0);
  /* K = 0: C = beta C */
  float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
  gt_sgemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 2.0f, C, 3);
  ck_assert(C[0] == 2 && C[5] == 12);
  gt_sgemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.0f, C, 3);
  ck_assert(C[0] == 0 && C[5] == 0);
}
END_TEST

START_TEST(test_thread_invariance) {
  /* every element is summed by one thread in a fixed k order */
  int64_t M = 300, N = 200, K = 700;
  uint64_t s = 5;
  float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *B = gt_test_alloc_fill(K * N, &s, -1, 1);
  float *C1 = calloc((size_t)(M * N), 4), *C2 = calloc((size_t)(M * N), 4);
  for (int ta = 0; ta < 2; ta++) {
    omp_set_num_threads(1);
    gt_sgemm(ta, 1, M, N, K, 1, A, ta ? M : K, B, K, 0, C1, N);
    omp_set_num_threads(2);
    gt_sgemm(ta, 1, M, N, K, 1, A, ta ? M : K, B, K, 0, C2, N);
    ck_assert(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0);
  }
  /* small M takes the column split: still the same bits */
  omp_set_num_threads(1);
  gt_sgemm(0, 0, 7, N, K, 1, A, K, B, N, 0, C1, N);
  omp_set_num_threads(2);
  gt_sgemm(0, 0, 7, N, K, 1, A, K, B, N, 0, C2, N);
  ck_assert(memcmp(C1, C2, sizeof(float) * 7 * (size_t)N) == 0);
  /* one row times B^T (decoding) splits the outputs: the same bits too */
  omp_set_num_threads(1);
  gt_sgemm(0, 1, 1, N, K, 1, A, K, B, K, 0, C1, N);
  omp_set_num_threads(2);
  gt_sgemm(0, 1, 1, N, K, 1, A, K, B, K, 0, C2, N);
  ck_assert(memcmp(C1, C2, sizeof(float) * (size_t)N) == 0);
  free(A), free(B), free(C1), free(C2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gemm");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_all_transposes_odd_sizes);
  tcase_add_test(tc, test_alpha_beta_and_empty_k);
  tcase_add_test(tc, test_thread_invariance);
  return gt_test_run_suite(s, 0);
}
