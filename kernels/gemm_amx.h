/* gt_bgemm's AMX path (kernels/gemm_amx.c): C = alpha bf16(op(A))
 * bf16(op(B)) + beta C on AMX-BF16 tiles. Call it only when
 * gt__cpu_amx_bf16() (kernels/cpu.h); M, N, K > 0, alpha != 0. 0, or -1
 * with nothing written when the buffers cannot grow. epi is
 * gt__gemm_run's (NULL: C as computed). Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_GEMM_AMX_H
#define GEMTRAIN_KERNELS_GEMM_AMX_H

#include <stdint.h>

#include "kernels/gemm_blocking.h"

int gt__amx_bgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                         const gt__gemm_epi *epi);

/* Whether the AMX path packs with vcvtne2ps2bf16 (AVX512_BF16, not turned
 * off by GEMTRAIN_NO_AVX512BF16 or gt__bgemm_force_fallback): then
 * gt__amx_bgemm_packed_with packs A so, and gt_bgemm passes the vdpbf16ps
 * kernel's B packer that does too. The packed bits are the integer
 * rounding's either way (kernels/bf16_cvt.h). Tests:
 * gt__amx_force_integer_packing(1) packs both with the integer rounding, to
 * compare (a switch during a product only mixes packers with the same
 * bits). */
int gt__amx_cvt(void);
void gt__amx_force_integer_packing(int on);

/* The same product with the caller's packer of op(B) (gt_qbgemm's stored
 * weights, and gt_bgemm's with vcvtne2ps2bf16: kernels/gemm_bf16.c). pack_b writes rows k0..k0+kc and columns
 * j0..j0+n of op(B) as panels of 32 columns, each [ceil(kc / 2)][32] pairs
 * (k = 2q in the low half, 2q + 1 in the high half, bf16 by the integer
 * rounding; an odd kc's last high half and the columns past n zero): the
 * vdpbf16ps kernel's B panels, so one packer serves both. */
typedef void (*gt__amx_pack_b_fn)(uint32_t *Bp, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc,
                                  int64_t j0, int64_t n);
int gt__amx_bgemm_packed_with(gt__amx_pack_b_fn pack_b, int transA, int transB, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                              float *C, int64_t ldc, const gt__gemm_epi *epi);

#endif
