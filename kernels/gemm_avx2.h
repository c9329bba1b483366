/* The packed float32 GEMM for CPUs with AVX2 and FMA but no AVX-512
 * (kernels/gemm_avx2.c): gt__gemm_run's loops (kernels/gemm_blocking.h)
 * with a 6 x 16 micro-kernel of 256-bit FMAs, the blocking of BLIS's
 * Haswell kernel. gt_sgemm's AVX2 copy (kernels/gemm.c) calls it. Compiled
 * for AVX2 whatever -march says: call it only when the CPU has AVX2 and FMA
 * (gt__kernels_path() == GT__PATH_AVX2). Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_GEMM_AVX2_H
#define GEMTRAIN_KERNELS_GEMM_AVX2_H

#include <stdint.h>

#include "kernels/gemm_blocking.h"
#include "kernels/quant.h"

/* C = alpha op(A) op(B) + beta C, as gt_sgemm, for M, N, K > 0 and alpha
 * != 0. rnd 1 rounds every operand to bf16 as it is packed (gt_bgemm's
 * widened path: the products of the packed values are then exact, and C is
 * gt_sgemm's on operands rounded beforehand); epi as gt__gemm_run's (NULL:
 * C as computed; epi->a16: A holds bf16 patterns, widened as packed, B is
 * then rounded whatever rnd). 0; -1 or 1 as gt__gemm_run, with nothing
 * written. Every output is one fixed-order sum, the same on any team. A
 * product of at most 4 rows times B^T without epi takes one dot product
 * per output instead of packing (decoding; 16 lanes, so another order than
 * the packed loops'), with the sums of the AVX-512 copy's row kernels
 * (gt_sgemm's, and gt_bgemm's with rnd). */
int gt__sgemm_avx2(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi);

/* The same loops with W a stored matrix (kernels/quant.h), dequantized as
 * it is packed: gt_qgemm's product (rnd 0) and gt_qbgemm's (rnd 1: A and
 * the dequantized W rounded to bf16, a bf16 store's values widened), with
 * the bits of gt__sgemm_avx2 on the dequantized matrix and of the AVX-512
 * copy's packed products for stored weights. transA, epi and the return as
 * gt__sgemm_avx2; at most 4 rows times W^T take the row kernel with W
 * dequantized in registers (its sums; A held as bf16 patterns is widened
 * first, and epi->round rounds C after). */
int gt__qgemm_avx2(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const gt_qweight *W, float beta, float *C, int64_t ldc, int rnd, const gt__gemm_epi *epi);

/* The micro-kernel's own rate in GFLOP/s (gt__sgemm_kernel_gflops). */
double gt__sgemm_avx2_kernel_gflops(double seconds);

#endif
