/* gt_sgemm's OpenBLAS path with thread-count-independent bits (see
 * kernels/gemm_fixed.c). Private to kernels/ and its tests. */
#ifndef GEMTRAIN_GEMM_FIXED_H
#define GEMTRAIN_GEMM_FIXED_H

#include <stdint.h>

/* C = alpha * op(A) . op(B) + beta * C, row-major, as gt_sgemm, computed as
 * gt__sgemm_fixed_blocks(M, N) single-threaded cblas_sgemm calls on blocks of
 * C's longer side, spread over the caller's team: the same bits on any team. */
void gt__sgemm_fixed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* OpenBLAS set to one thread for the calling thread (once per thread):
 * call before any cblas_* (a multi-threaded call would start an OpenMP pool
 * beside the teams, and cut the product by its own thread count). */
void gt__blas_one_thread(void);
/* How many blocks: a function of the shape alone. */
int64_t gt__sgemm_fixed_blocks(int64_t M, int64_t N);

#endif
