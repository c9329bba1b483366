/* Scalar references of kernels/quant.h: every element read through its
 * format's one definition, sums in double; quantization with bitsandbytes'
 * NF4 decision tree as it writes it (dQuantizeNF4), so the reference does not
 * share gt_quantize's midpoint count. */
#include <math.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/quant.h"
#include "kernels/quant_elem.h"

void gt_dequantize_rows_ref(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  for (int64_t i = 0; i < n * w->cols; i++) out[i] = gt__q_elem(w, r0 * w->cols + i);
}

void gt_qgemm_ref(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const gt_qweight *W, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0.0;
      for (int64_t k = 0; k < K; k++)
        s += (double)A[i * lda + k] * (double)gt__q_elem(W, transW ? j * W->cols + k : k * W->cols + j);
      const double prev = beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j];
      C[i * ldc + j] = (float)((double)alpha * s + prev);
    }
}

static unsigned gt__nf4_tree(float x) {
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 15 : 14;
      return x > 0.5016634166240692f ? 13 : 12;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 11 : 10;
    return x > 0.1202552504837513f ? 9 : 8;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 7 : 6;
    return x > -0.23460740596055984f ? 5 : 4;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 3 : 2;
  return x > -0.8480964004993439f ? 1 : 0;
}

void gt_quantize_ref(gt_qtype t, const float *src, int64_t rows, int64_t cols, void *dst) {
  const int64_t n = rows * cols;
  gt_qweight w = gt_qweight_at(t, dst, rows, cols);
  float *scales = (float *)w.scales;
  memset(dst, 0, (size_t)((gt_q_data_bytes(t, n) + 3) / 4 * 4));
  switch (t) {
  case GT_Q_F32: memcpy(dst, src, (size_t)n * 4); break;
  case GT_Q_BF16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = gt_f32_to_bf16(src[i]);
    break;
  case GT_Q_INT8:
    for (int64_t r = 0; r < rows; r++) {
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(src[r * cols + c]));
      scales[r] = amax / 127.0f;
      for (int64_t c = 0; c < cols; c++) {
        float q = amax > 0.0f ? nearbyintf(src[r * cols + c] * (127.0f / amax)) : 0.0f;
        q = q != q ? 0.0f : q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q; /* a NaN: code 0 */
        ((int8_t *)dst)[r * cols + c] = (int8_t)q;
      }
    }
    break;
  case GT_Q_NF4:
    for (int64_t b = 0; b * GT_Q_NF4_BLOCK < n; b++) {
      const int64_t i0 = b * GT_Q_NF4_BLOCK, i1 = i0 + GT_Q_NF4_BLOCK < n ? i0 + GT_Q_NF4_BLOCK : n;
      float amax = 0.0f;
      for (int64_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(src[i]));
      scales[b] = amax;
      const float inv = 1.0f / amax;
      for (int64_t i = i0; i < i1; i++) {
        const unsigned q = gt__nf4_tree(src[i] * inv);
        ((uint8_t *)dst)[i / 2] |= (uint8_t)(i % 2 ? q : q << 4);
      }
    }
    break;
  }
}
