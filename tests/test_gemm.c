/* gt_sgemm (our packed AVX-512 kernel) against the float64 reference over
 * every transpose combination, sizes off the register and cache blocks,
 * alpha/beta, strided leading dimensions, and thread-count invariance.
 *
 * Bound: |got - want| <= 1e-5 (sqrt(K) + |want|) for inputs in [-1, 1]: a
 * float32 sum of K products of size <= 1 errs by about eps sqrt(K) on
 * average; the kernel's order (blocks of KC, then k within) is not the
 * reference's, so only this bound, not the bits, can be asserted. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/team.h"
#include "kernels/gemm_blocking.h"
#include "kernels/kernels.h"
#include "gt_testutil.h"

/* GT_TEST_SHAPES=reduced (the sanitizer build sets it for this suite:
 * CMakeLists.txt) leaves out the two largest products of the thread-count
 * tests, each for a smaller one that takes the same path; the normal build
 * runs every shape. */
static int reduced_shapes(void) {
  const char *e = getenv("GT_TEST_SHAPES");
  return e && strcmp(e, "reduced") == 0;
}

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
    gt_team_set_process(1);
    gt_sgemm(ta, 1, M, N, K, 1, A, ta ? M : K, B, K, 0, C1, N);
    gt_team_set_process(2);
    gt_sgemm(ta, 1, M, N, K, 1, A, ta ? M : K, B, K, 0, C2, N);
    ck_assert(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0);
  }
  /* small M takes the column split: still the same bits */
  gt_team_set_process(1);
  gt_sgemm(0, 0, 7, N, K, 1, A, K, B, N, 0, C1, N);
  gt_team_set_process(2);
  gt_sgemm(0, 0, 7, N, K, 1, A, K, B, N, 0, C2, N);
  ck_assert(memcmp(C1, C2, sizeof(float) * 7 * (size_t)N) == 0);
  /* one row times B^T (decoding) splits the outputs: the same bits too */
  gt_team_set_process(1);
  gt_sgemm(0, 1, 1, N, K, 1, A, K, B, K, 0, C1, N);
  gt_team_set_process(2);
  gt_sgemm(0, 1, 1, N, K, 1, A, K, B, K, 0, C2, N);
  ck_assert(memcmp(C1, C2, sizeof(float) * (size_t)N) == 0);
  free(A), free(B), free(C1), free(C2);
}
END_TEST

START_TEST(test_block_edges) {
  /* K across the KC blocks (up to 1024 here: 640 is one block, 1025 and
   * 2048 two, 2100 three), N across the NC blocks (1024 here: 8229 is nine),
   * M across row blocks and MR, with every transpose, alpha and beta
   * 0 / 1 / other; 250 x 2100 with A transposed packs A rows across many
   * panels with a partial last one and a K tail not a multiple of 4 */
  int64_t sizes[][3] = {{25, 40, 511}, {25, 40, 512}, {13, 70, 513}, {37, 33, 1100}, {5, 8229, 20},
                        {1000, 31, 19}, {121, 97, 64}, {11, 31, 1},   {26, 45, 640}, {25, 40, 1024},
                        {14, 35, 1025}, {250, 70, 2100}, {29, 100, 2051}};
  float betas[] = {0.0f, 1.0f, -0.7f};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        run_case(ta, tb, sizes[i][0], sizes[i][1], sizes[i][2], (i % 2) ? 0.5f : 1.0f, betas[(i + ta + tb) % 3],
                 (int)((i + ta) % 3));
}
END_TEST

/* C of one product on `threads` threads into C (beta 0.5 over a fixed C). */
static void product_on(int threads, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                       float *C) {
  for (int64_t i = 0; i < M * N; i++) C[i] = (float)(i % 7) - 3.0f;
  gt_team_set_process(threads);
  gt_sgemm(ta, tb, M, N, K, 1.25f, A, ta ? M : K, B, tb ? K : N, 0.5f, C, N);
}

/* Every shape under every transpose: the same bits on 2 and 3 threads as on
 * 1; with `ref`, also within the reference's bound (run_case). */
static void same_bits_any_team(int64_t (*shapes)[3], size_t n, const float *A, const float *B, float *C1,
                               float *C2, int ref) {
  for (size_t i = 0; i < n; i++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        product_on(1, ta, tb, M, N, K, A, B, C1);
        for (int t = 2; t <= 3; t++) {
          product_on(t, ta, tb, M, N, K, A, B, C2);
          ck_assert_msg(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0,
                        "M%lld N%lld K%lld ta%d tb%d: %d threads differ from 1", (long long)M, (long long)N,
                        (long long)K, ta, tb, t);
        }
        if (!ref) continue;
        gt_team_set_process(2);
        run_case(ta, tb, M, N, K, 0.5f, (i & 1) ? 0.0f : -0.7f, (int)i % 3);
      }
}

/* same_bits_any_team on inputs filled from seed, sized for every shape */
static void same_bits_shapes(int64_t (*shapes)[3], size_t n, uint64_t seed, int ref) {
  int64_t na = 1, nb = 1, nc = 1;
  for (size_t i = 0; i < n; i++) {
    na = shapes[i][0] * shapes[i][2] > na ? shapes[i][0] * shapes[i][2] : na;
    nb = shapes[i][2] * shapes[i][1] > nb ? shapes[i][2] * shapes[i][1] : nb;
    nc = shapes[i][0] * shapes[i][1] > nc ? shapes[i][0] * shapes[i][1] : nc;
  }
  float *A = gt_test_alloc_fill(na, &seed, -1, 1), *B = gt_test_alloc_fill(nb, &seed, -1, 1);
  float *C1 = malloc(sizeof(float) * (size_t)nc), *C2 = malloc(sizeof(float) * (size_t)nc);
  same_bits_any_team(shapes, n, A, B, C1, C2, ref);
  free(A), free(B), free(C1), free(C2);
}

START_TEST(test_dynamic_tiles_thread_counts) {
  /* tiles go to whichever thread asks first, so 1, 2 and 3 threads cut the
   * work differently and share it by timing; every element must still come
   * out bit-identical. Shapes: rows split (many rows, one panel), columns
   * split (few rows, two NC blocks), several KC blocks (1030: two; 2100:
   * three), and the M <= 4 dot-product path. */
  int64_t shapes[][3] = {{300, 200, 700}, {2000, 20, 600}, {7, 9000, 40},
                         {13, 33, 1030}, {3, 500, 77},   {150, 97, 2100}};
  same_bits_shapes(shapes, sizeof shapes / sizeof shapes[0], 11, 0);
}
END_TEST

typedef struct concurrent_job {
  int64_t M, N, K;
  const float *A, *B;
  float *got;
} concurrent_job;

static void concurrent_product(void *arg, int t) {
  const concurrent_job *j = arg;
  gt_sgemm(0, 1, j->M, j->N, j->K, 1, j->A, j->K, j->B, j->K, 0, j->got + t * j->M * j->N, j->N);
}

START_TEST(test_inside_parallel_region) {
  /* inside a parallel region (a device's worker) each call runs on its own
   * thread with that thread's own packing buffers: concurrent calls give the
   * serial call's bits */
  int64_t M = 150, N = 90, K = 600;
  uint64_t s = 21;
  float *A = gt_test_alloc_fill(M * K, &s, -1, 1), *B = gt_test_alloc_fill(K * N, &s, -1, 1);
  float *want = calloc((size_t)(M * N), sizeof(float)), *got = calloc((size_t)(3 * M * N), sizeof(float));
  gt_team_set_process(1);
  gt_sgemm(0, 1, M, N, K, 1, A, K, B, K, 0, want, N);
  gt_team_set_process(3);
  concurrent_job j = {M, N, K, A, B, got};
  gt_test_on_threads(3, concurrent_product, &j);
  for (int t = 0; t < 3; t++) ck_assert(memcmp(want, got + t * M * N, sizeof(float) * (size_t)(M * N)) == 0);
  free(A), free(B), free(want), free(got);
}
END_TEST

START_TEST(test_plan_rows_cover_once) {
  /* the row blocks of every plan (the tail of small blocks with rows to
   * spare, the equal blocks otherwise) tile [0, M) in order, no gap or
   * overlap, none past the buffer's mc rows: a row block lost or taken
   * twice would leave C rows unwritten or written twice */
  const gt__gemm_blocks b = {.mr = 12, .nr = 32, .kc_max = 1024, .kalign = 8, .mc_max = 120, .nc_max = 4096};
  int64_t Ms[] = {1, 12, 100, 255, 256, 383, 384, 385, 512, 640, 1000, 1024, 2048, 2049, 5000, 32768};
  int tails = 0;
  for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
    for (int nt = 1; nt <= 8; nt++) {
      gt__gemm_plan p;
      gt__gemm_plan_make(&p, &b, Ms[i], 640, 640, nt);
      int64_t end = 0, mpanels = (Ms[i] + 11) / 12;
      tails += p.tail_levels > 0;
      for (int64_t ib = 0; ib < p.nic; ib++) {
        int64_t p0, p1;
        gt__gemm_plan_rows(&p, ib, &p0, &p1);
        ck_assert_msg(p0 == end && p1 > p0 && (p1 - p0) * 12 <= p.mc, "M%lld nt%d block %lld: [%lld, %lld) after %lld",
                      (long long)Ms[i], nt, (long long)ib, (long long)p0, (long long)p1, (long long)end);
        end = p1;
      }
      ck_assert_msg(end == mpanels, "M%lld nt%d: blocks end at panel %lld of %lld", (long long)Ms[i], nt,
                    (long long)end, (long long)mpanels);
    }
  ck_assert(tails > 0); /* the tail was exercised */
}
END_TEST

START_TEST(test_row_tail_thread_counts) {
  /* products with rows to spare (row tasks with a tail of small blocks on
   * 2 and 3 threads): the same bits as on 1 thread, every transpose, a K
   * of two blocks, and within the reference's bound; one K block and
   * several B blocks (N > 1024) keep every row block's packed A for all B
   * blocks (517 x 2100 x 300, 40 x 1500 x 64) */
  int64_t shapes[][3] = {{384, 70, 300},  {517, 200, 640},  {1000, 40, 1030},
                         {2049, 65, 129}, {517, 2100, 300}, {40, 1500, 64}};
  /* reduced: 517 x 1100 x 100 (the same row blocks, two B blocks, one K
   * block with the same K tail mod 8) for 517 x 2100 x 300, a sixth of it */
  if (reduced_shapes()) shapes[4][1] = 1100, shapes[4][2] = 100;
  same_bits_shapes(shapes, sizeof shapes / sizeof shapes[0], 17, 1);
}
END_TEST

START_TEST(test_whole_b_blocks_per_thread) {
  /* few rows, one K block and 16 or more B blocks of at most 1024 columns
   * (NC, from the caches): on 2 threads each thread packs and multiplies
   * whole B blocks of its own (gemma3-270m's head at B = 1): the same bits
   * as the shared-block loops on 1 and 3 threads, and every block within
   * the reference's bound */
  int64_t shapes[][3] = {{50, 16429, 37}, {13, 16500, 129}};
  /* reduced: the second shape alone (the same 17 whole B blocks) */
  if (reduced_shapes()) {
    same_bits_shapes(shapes + 1, 1, 23, 1);
    return;
  }
  same_bits_shapes(shapes, sizeof shapes / sizeof shapes[0], 23, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gemm");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_all_transposes_odd_sizes);
  tcase_add_test(tc, test_alpha_beta_and_empty_k);
  tcase_add_test(tc, test_thread_invariance);
  tcase_add_test(tc, test_block_edges);
  tcase_add_test(tc, test_dynamic_tiles_thread_counts);
  tcase_add_test(tc, test_inside_parallel_region);
  tcase_add_test(tc, test_plan_rows_cover_once);
  tcase_add_test(tc, test_row_tail_thread_counts);
  tcase_add_test(tc, test_whole_b_blocks_per_thread);
  return gt_test_run_suite(s, 0);
}
