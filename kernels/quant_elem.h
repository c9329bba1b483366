/* One element of a stored matrix as float32 (kernels/quant.h's formats):
 * the one definition of each format's dequantized value, which the
 * products' contract (same bits as on the dequantized matrix) rests on. */
#ifndef GEMTRAIN_KERNELS_QUANT_ELEM_H
#define GEMTRAIN_KERNELS_QUANT_ELEM_H

#include "kernels/bf16.h"
#include "kernels/quant.h"

static inline float gt__q_elem(const gt_qweight *w, int64_t i) {
  switch (w->type) {
  case GT_Q_F32: return ((const float *)w->data)[i];
  case GT_Q_BF16: return gt_bf16_to_f32(((const uint16_t *)w->data)[i]);
  case GT_Q_INT8: return (float)((const int8_t *)w->data)[i] * w->scales[i / w->cols];
  case GT_Q_NF4: {
    const uint8_t byte = ((const uint8_t *)w->data)[i / 2];
    return gt_nf4_code[i % 2 ? byte & 15 : byte >> 4] * w->scales[i / GT_Q_NF4_BLOCK];
  }
  }
  return 0.0f;
}

#endif
