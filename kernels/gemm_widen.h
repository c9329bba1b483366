/* The bf16 GEMM's widened path (kernels/gemm_bf16.c, docs/precision.md):
 * gt_sgemm's packed loops, blocks and float32 micro-kernel (kernels/gemm.c's
 * AVX-512 copy) with packers that round every operand to bf16 as they pack
 * it, as gt_qgemm dequantizes its W there. The packed floats are bf16
 * values widened to float32, so each FMA's product is exact and the sums
 * are float32 in gt_sgemm's order: the bits are gt_sgemm's on operands
 * rounded to bf16 beforehand. gt__wqgemm_packed does the same for a stored
 * W (dequantized, then rounded). epi is gt__gemm_run's (NULL: C as
 * computed). Call them only when gt__kernels_avx512();
 * they take M, N, K > 0 and alpha != 0, and return 0, or -1 with nothing
 * written when their buffers cannot grow. Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_GEMM_WIDEN_H
#define GEMTRAIN_KERNELS_GEMM_WIDEN_H

#include <stdint.h>

#include "kernels/gemm_blocking.h"
#include "kernels/quant.h"

int gt__wgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                     const gt__gemm_epi *epi);
int gt__wqgemm_packed(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc, const gt__gemm_epi *epi);

/* M rows of bf16 patterns (row stride lda) widened into the calling
 * thread's B packing buffer as M x K floats (row stride K), for a row
 * kernel that reads floats and packs nothing (any copy); NULL when the
 * buffer cannot grow. Defined in kernels/gemm_bf16.c. */
float *gt__rows_widened(const uint16_t *a16, int64_t lda, int64_t M, int64_t K);
/* M rows of floats rounded to bf16 into the same buffer (row stride K), for
 * a row kernel rounding its operands: A's rows once, not once per output
 * column (A being that buffer, gt__rows_widened's rows: returned as they
 * are); NULL when the buffer cannot grow. Defined in kernels/gemm_bf16.c. */
float *gt__rows_rounded(const float *A, int64_t lda, int64_t M, int64_t K);

#endif
