/* gt_sgemm through OpenBLAS, with the same bits on any thread count.
 *
 * Where our packed kernel cannot run (the portable path, or packing
 * buffers that cannot grow) gt_sgemm hands the product to cblas_sgemm. A
 * multi-threaded OpenBLAS call cuts the product by its thread count, and its
 * bits follow the cut: a non-native build gave different C on 1 and 2
 * threads (test_gemm, test_fsdp's devices). So the product is cut here into
 * blocks that depend on its shape only, each block is one single-threaded
 * cblas_sgemm (the OpenMP build of OpenBLAS runs single-threaded inside an
 * active parallel region, and one thread is one thread), and a block's bits
 * are then the same whichever thread computes it. */
#include "kernels/gemm_fixed.h"

#include <cblas.h>
#include <omp.h>

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

void gt__sgemm_fixed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t nb = gt__sgemm_fixed_blocks(M, N);
  /* Inside a caller's active region, or alone: the blocks in order on this
   * thread (OpenBLAS is single-threaded in the first case, and has one
   * thread in the second). */
  if (omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t b = 0; b < nb; b++)
      gt__fixed_block(b, nb, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  /* An active team even for one block, so that OpenBLAS never threads a
   * block by itself (a spare thread of the team just finds no work). */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < nb; b++)
    gt__fixed_block(b, nb, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
