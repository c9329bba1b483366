/* gt_bgemm's AMX path (kernels/gemm_amx.c): C = alpha bf16(op(A))
 * bf16(op(B)) + beta C on AMX-BF16 tiles. Call it only when
 * gt__cpu_amx_bf16() (kernels/cpu.h); M, N, K > 0, alpha != 0. 0, or -1
 * with nothing written when the buffers cannot grow. Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_GEMM_AMX_H
#define GEMTRAIN_KERNELS_GEMM_AMX_H

#include <stdint.h>

int gt__amx_bgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
