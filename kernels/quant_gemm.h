/* The packed quantized products (kernels/quant.h's gt_qgemm, gt_qbgemm) as
 * the AVX-512 GEMMs define them: gt__qgemm_packed in gemm.c's AVX-512 copy,
 * gt__qbgemm_packed in gemm_bf16.c (-1 where the bf16 GEMM takes its copies
 * path); call either only when gt__kernels_avx512() (the AVX2 copy's are
 * gt__qgemm_avx2, kernels/gemm_avx2.h). Both take the
 * caller's M, N > 0, K > 0, alpha != 0 and a W that is not float32, and
 * return 0, or -1 with nothing written when their buffers cannot grow (the
 * caller then takes another path). Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_QUANT_GEMM_H
#define GEMTRAIN_KERNELS_QUANT_GEMM_H

#include <stdint.h>

#include "kernels/quant.h"

int gt__qgemm_packed(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const gt_qweight *W, float beta, float *C, int64_t ldc);
/* transA 1: op(A) = A^T with A [K, M] (gt_qbgemm_t); a16: A holds bf16
 * patterns (gt_qbgemm_t16; the pointer passed as a float one); round: C
 * rounded to bf16 as each tile is finished (gt_qbgemm_rnd) */
int gt__qbgemm_packed(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc, int a16, int round);

/* The two B packers a packed GEMM hands gt__gemm_run for a stored W (the
 * driver passes the gt_qweight through as B; ldb unused), from its own
 * inline packer qpack(d, tW, B, k0, kc, j0, n, rnd): _u packs the
 * dequantized values, _w rounds them to bf16 (gt_qbgemm's widened path)
 * but for a bf16 store, whose values are bf16 already (the weight
 * gradients' kept inputs, model/linear.h): widened only, the rounding
 * would change nothing. */
#define GT__QPACK_B_ENTRIES(qpack)                                                                          \
  static void gt__qpack_b_u(uint32_t *d, int tW, const float *B, int64_t ldb, int64_t k0, int64_t kc,       \
                            int64_t j0, int64_t n) {                                                        \
    (void)ldb;                                                                                              \
    qpack(d, tW, B, k0, kc, j0, n, 0);                                                                      \
  }                                                                                                         \
  static void gt__qpack_b_w(uint32_t *d, int tW, const float *B, int64_t ldb, int64_t k0, int64_t kc,       \
                            int64_t j0, int64_t n) {                                                        \
    (void)ldb;                                                                                              \
    if (((const gt_qweight *)(const void *)B)->type == GT_Q_BF16)                                           \
      qpack(d, tW, B, k0, kc, j0, n, 0);                                                                    \
    else                                                                                                    \
      qpack(d, tW, B, k0, kc, j0, n, 1);                                                                    \
  }

#endif
