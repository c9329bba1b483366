/* Quantization and row dequantization on AVX2 and FMA, for CPUs without
 * AVX-512 (kernels/quant.c dispatches to them on the AVX2 path): the same
 * bytes and bits as kernels/quant.c's scalar loops. Private to kernels/. */
#ifndef GEMTRAIN_KERNELS_QUANT_AVX2_H
#define GEMTRAIN_KERNELS_QUANT_AVX2_H

#include <stdint.h>

#include "kernels/quant.h"

/* rows [r0, r1) of an int8 matrix of cols columns: codes and row scales */
void gt__quant_int8_rows_avx2(const float *src, int64_t cols, int64_t r0, int64_t r1, int8_t *d, float *scales);
/* whole nf4 blocks [b0, b1) (GT_Q_NF4_BLOCK elements each): codes and absmaxes */
void gt__quant_nf4_blocks_avx2(const float *src, int64_t b0, int64_t b1, uint8_t *d, float *scales);
/* gt_dequantize_rows */
void gt__dequant_rows_avx2(const gt_qweight *w, int64_t r0, int64_t n, float *out);

#endif
