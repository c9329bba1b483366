/* Products with a stored (quantized) weight: kernels/quant.h.
 *
 * This version dequantizes a bounded panel of W at a time (at most
 * GT__Q_PANEL floats, never the whole matrix) and multiplies it with the
 * float32 or bf16 GEMM. Each output column is computed by one product over
 * the whole K, so its bits are those of the same GEMM on the dequantized
 * matrix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_elem.h"

#define GT__Q_PANEL ((int64_t)1 << 20)

const float gt_nf4_code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

int64_t gt_q_data_bytes(gt_qtype t, int64_t numel) {
  switch (t) {
  case GT_Q_F32: return numel * 4;
  case GT_Q_BF16: return numel * 2;
  case GT_Q_INT8: return numel;
  case GT_Q_NF4: return (numel + 1) / 2;
  }
  return 0;
}

int64_t gt_q_scale_count(gt_qtype t, int64_t numel, int64_t rows) {
  if (t == GT_Q_INT8) return rows;
  if (t == GT_Q_NF4) return (numel + GT_Q_NF4_BLOCK - 1) / GT_Q_NF4_BLOCK;
  return 0;
}

int64_t gt_q_words(gt_qtype t, int64_t rows, int64_t cols) {
  return (gt_q_data_bytes(t, rows * cols) + 3) / 4 + gt_q_scale_count(t, rows * cols, rows);
}

gt_qweight gt_qweight_at(gt_qtype t, const void *base, int64_t rows, int64_t cols) {
  gt_qweight w = {t, base, NULL, rows, cols};
  if (gt_q_scale_count(t, rows * cols, rows))
    w.scales = (const float *)base + (gt_q_data_bytes(t, rows * cols) + 3) / 4;
  return w;
}

/* The nearest code value's index (the lower one on a tie). */
static int gt__nf4_nearest(float v) {
  int best = 0;
  float bd = fabsf(v - gt_nf4_code[0]);
  for (int i = 1; i < 16; i++) {
    float d = fabsf(v - gt_nf4_code[i]);
    if (d < bd) bd = d, best = i;
  }
  return best;
}

void gt_quantize(gt_qtype t, const float *src, int64_t rows, int64_t cols, void *dst) {
  const int64_t n = rows * cols;
  gt_qweight w = gt_qweight_at(t, dst, rows, cols);
  float *scales = (float *)w.scales;
  switch (t) {
  case GT_Q_F32: memcpy(dst, src, (size_t)n * 4); break;
  case GT_Q_BF16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = gt_f32_to_bf16(src[i]);
    break;
  case GT_Q_INT8:
    for (int64_t r = 0; r < rows; r++) {
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(src[r * cols + c]));
      const float s = amax / 127.0f;
      scales[r] = s;
      for (int64_t c = 0; c < cols; c++) {
        float q = s > 0.0f ? nearbyintf(src[r * cols + c] / s) : 0.0f;
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
        ((int8_t *)dst)[r * cols + c] = (int8_t)q;
      }
    }
    break;
  case GT_Q_NF4: {
    uint8_t *d = dst;
    memset(d, 0, (size_t)gt_q_data_bytes(t, n));
    for (int64_t b = 0; b * GT_Q_NF4_BLOCK < n; b++) {
      const int64_t i0 = b * GT_Q_NF4_BLOCK, i1 = i0 + GT_Q_NF4_BLOCK < n ? i0 + GT_Q_NF4_BLOCK : n;
      float amax = 0.0f;
      for (int64_t i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(src[i]));
      scales[b] = amax;
      for (int64_t i = i0; i < i1; i++) {
        const int q = gt__nf4_nearest(amax > 0.0f ? src[i] / amax : 0.0f);
        d[i / 2] |= (uint8_t)(i % 2 ? q : q << 4);
      }
    }
    break;
  }
  }
}


void gt_dequantize_rows(const gt_qweight *w, int64_t r0, int64_t n, float *out) {
  for (int64_t i = 0; i < n * w->cols; i++) out[i] = gt__q_elem(w, r0 * w->cols + i);
}

typedef void (*gt__gemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                            int64_t, float, float *, int64_t);

static void gt__qgemm_with(gt__gemm_fn gemm, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (W->type == GT_Q_F32) {
    gemm(0, transW, M, N, K, alpha, A, lda, (const float *)W->data, W->cols, beta, C, ldc);
    return;
  }
  int64_t nb = K > 0 ? GT__Q_PANEL / K : N;
  if (nb < 16) nb = 16;
  if (nb > N) nb = N;
  float *panel = malloc((size_t)(nb * (K > 0 ? K : 1)) * sizeof(float));
  if (!panel) { /* no room for a panel: plain sums, slower, never wrong */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s += A[i * lda + k] * gt__q_elem(W, transW ? j * W->cols + k : k * W->cols + j);
        C[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
      }
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += nb) {
    const int64_t n = N - j0 < nb ? N - j0 : nb;
    if (transW) { /* W [N, K]: rows j0.. are the panel [n, K] */
      gt_dequantize_rows(W, j0, n, panel);
      gemm(0, 1, M, n, K, alpha, A, lda, panel, K, beta, C + j0, ldc);
    } else { /* W [K, N]: columns j0.. as the panel [K, n] */
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < n; j++) panel[k * n + j] = gt__q_elem(W, k * W->cols + j0 + j);
      gemm(0, 0, M, n, K, alpha, A, lda, panel, n, beta, C + j0, ldc);
    }
  }
  free(panel);
}

void gt_qgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt__qgemm_with(gt_sgemm, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}

void gt_qbgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const gt_qweight *W, float beta, float *C, int64_t ldc) {
  gt__qgemm_with(gt_bgemm, transW, M, N, K, alpha, A, lda, W, beta, C, ldc);
}
