/* gt_sgemm through OpenBLAS, with the same bits on any thread count.
 *
 * Where our packed kernel cannot run (the portable path, or packing
 * buffers that cannot grow) gt_sgemm hands the product to cblas_sgemm. A
 * multi-threaded OpenBLAS call cuts the product by its thread count, and its
 * bits follow the cut: a non-native build gave different C on 1 and 2
 * threads (test_gemm, test_fsdp's devices). So the product is cut here into
 * blocks that depend on its shape only, each block is one single-threaded
 * cblas_sgemm on a member of the caller's team, and a block's bits are then
 * the same whichever member computes it.
 *
 * OpenBLAS threads of its own. The OpenMP build we link threads a call made
 * outside an OpenMP region (every call: the teams are not OpenMP's) on the
 * calling thread's OpenMP thread count, which starts an OpenMP pool
 * with libgomp's long spinning wait beside our teams, and cuts the block by
 * its own thread count (other bits). gt__blas_one_thread, called on every
 * thread before its first cblas call, sets that thread's count to one
 * (openblas_set_num_threads: OpenBLAS's count and the thread's OpenMP one),
 * so no pool ever starts. */
#include "kernels/gemm_fixed.h"

#include <cblas.h>

#include "base/team.h"

void gt__blas_one_thread(void) {
  static _Thread_local int done;
  if (!done) {
    openblas_set_num_threads(1);
    done = 1;
  }
}

/* Blocks of at least this many rows or columns (the long side is cut): a
 * block re-packs the other operand whole, which stays small against its
 * work at 128 and more; at most this many blocks, enough for dynamic
 * scheduling to balance a 2- to 8-thread team. */
#define GT__FIXED_MIN_SIDE 128
#define GT__FIXED_MAX_BLOCKS 16

int64_t gt__sgemm_fixed_blocks(int64_t M, int64_t N) {
  int64_t side = M >= N ? M : N, n = side / GT__FIXED_MIN_SIDE;
  if (n < 1) n = 1;
  return n > GT__FIXED_MAX_BLOCKS ? GT__FIXED_MAX_BLOCKS : n;
}

/* Block b of nb along the long side: C[i0.., j0..] from the matching rows of
 * op(A) (rows cut) or columns of op(B) (columns cut). */
static void gt__fixed_block(int64_t b, int64_t nb, int transA, int transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc) {
  gt__blas_one_thread();
  const int rows = M >= N;
  const int64_t side = rows ? M : N, s0 = side * b / nb, s1 = side * (b + 1) / nb;
  if (rows) {
    const float *Ab = transA ? A + s0 : A + s0 * lda; /* op(A) rows s0..s1 */
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                (blasint)(s1 - s0), (blasint)N, (blasint)K, alpha, Ab, (blasint)lda, B, (blasint)ldb, beta,
                C + s0 * ldc, (blasint)ldc);
  } else {
    const float *Bb = transB ? B + s0 * ldb : B + s0; /* op(B) columns s0..s1 */
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, (blasint)M,
                (blasint)(s1 - s0), (blasint)K, alpha, A, (blasint)lda, Bb, (blasint)ldb, beta, C + s0,
                (blasint)ldc);
  }
}

typedef struct gt__fixed_job {
  int transA, transB;
  int64_t M, N, K, lda, ldb, ldc, nb;
  float alpha, beta;
  const float *A, *B;
  float *C;
  gt_team_counter next;
} gt__fixed_job;

static void gt__fixed_member(void *arg, int tid, int nth) {
  gt__fixed_job *j = arg;
  for (int64_t b; (b = gt_team_take(&j->next, 0)) < j->nb;)
    gt__fixed_block(b, j->nb, j->transA, j->transB, j->M, j->N, j->K, j->alpha, j->A, j->lda, j->B, j->ldb, j->beta,
                    j->C, j->ldc);
}

void gt__sgemm_fixed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  gt__fixed_job j = {transA, transB, M, N, K, lda, ldb, ldc, gt__sgemm_fixed_blocks(M, N), alpha, beta, A, B, C,
                     {0}};
  /* blocks to the member free first; alone inside a caller's region */
  gt_team_par(j.nb > 1, gt__fixed_member, &j);
}
