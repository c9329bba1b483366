/* Floats to bf16 pairs with AVX512_BF16's vcvtne2ps2bf16, for the packers
 * of the vdpbf16ps kernel (kernels/gemm_bf16.c) and the AMX kernel
 * (kernels/gemm_amx.c); see gemm_bf16.c's "packing with vcvtne2ps2bf16"
 * for why a block holding a float32 denormal is packed again by the
 * integer rounding (the conversion flushes those; the packed bits are the
 * integer rounding's in every case). A pair lane holds k = 2p in its low
 * half and 2p + 1 in its high half. Call it only where the CPU has
 * AVX512_BF16. Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_BF16_CVT_H
#define GEMTRAIN_KERNELS_BF16_CVT_H

#include <immintrin.h>
#include <stdint.h>

#define GT__FPCLASS_DENORMAL 0x20

/* 32 consecutive k of one row (masked to kn) -> 16 pair lanes; denormal
 * inputs marked in *den */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) __m512i
gt__row_pairs_cvt(const float *src, int64_t kn, __mmask16 *den) {
  __mmask16 m0 = (__mmask16)(kn >= 16 ? 0xFFFF : kn > 0 ? (1u << kn) - 1 : 0);
  __mmask16 m1 = (__mmask16)(kn >= 32 ? 0xFFFF : kn > 16 ? (1u << (kn - 16)) - 1 : 0);
  __m512 lo = _mm512_maskz_loadu_ps(m0, src), hi = _mm512_maskz_loadu_ps(m1, src + 16);
  *den |= _mm512_fpclass_ps_mask(lo, GT__FPCLASS_DENORMAL) | _mm512_fpclass_ps_mask(hi, GT__FPCLASS_DENORMAL);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* lane j of the 16 loaded from row 2p (e) and of those from row 2p + 1 (o)
 * -> pair lane j */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16"))) static inline __attribute__((always_inline)) __m512i
gt__two_rows_cvt(__m512 e, __m512 o, __mmask16 *den) {
  *den |= _mm512_fpclass_ps_mask(e, GT__FPCLASS_DENORMAL) | _mm512_fpclass_ps_mask(o, GT__FPCLASS_DENORMAL);
  /* words: e's 16 then o's 16; interleave them */
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(o, e));
}

#endif
