#include "model/linear.h"

#include <limits.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* row blocks as kernels/matmul.c takes them (sgemm dimensions may be 32-bit) */
#define GT__ROW_BLOCK ((int64_t)INT_MAX)

/* dinp (+)= dout . W for a stored-quantized W: the input gradient of a
 * frozen base, beta 1 adding, 0 writing */
static void gt__qmatmul_dinp(const gt_model *m, float *dinp, const float *dout, gt__weight w, int64_t n,
                             int64_t in_dim, int64_t out_dim, float beta) {
  if (!dinp || n <= 0 || in_dim <= 0 || out_dim <= 0) return;
  const gt_qweight q = gt_qweight_at((gt_qtype)w.qtype, w.p, out_dim, in_dim);
  (m->bf16_mm ? gt_qbgemm : gt_qgemm)(0, n, in_dim, out_dim, 1.0f, dout, out_dim, &q, beta, dinp, in_dim);
}

/* the product, unrounded */
static void gt__matmul_forward_raw(const gt_model *m, float *out, const float *inp, gt__weight w, int64_t n,
                                   int64_t in_dim, int64_t out_dim) {
  if (w.qtype != GT_STORE_F32) {
    const gt_qweight q = gt_qweight_at((gt_qtype)w.qtype, w.p, out_dim, in_dim);
    (m->bf16_mm ? gt_qbgemm : gt_qgemm)(1, n, out_dim, in_dim, 1.0f, inp, in_dim, &q, 0.0f, out, out_dim);
  } else if (m->bf16_mm) {
    gt_matmul_forward_bf16(out, inp, w.p, n, in_dim, out_dim);
  } else {
    gt_matmul_forward(out, inp, w.p, n, in_dim, out_dim);
  }
}

void gt__matmul_forward(const gt_model *m, float *out, const float *inp, gt__weight w, int64_t n, int64_t in_dim,
                        int64_t out_dim, int rnd) {
  rnd = rnd && m->bf16_act; /* a float32 model has nothing to round */
  if (rnd && m->bf16_mm && w.qtype == GT_STORE_F32) {
    gt_matmul_forward_bf16_rnd(out, inp, w.p, n, in_dim, out_dim);
    return;
  }
  if (rnd && m->bf16_mm && n > 0 && in_dim > 0 && out_dim > 0) { /* a frozen base stored quantized or in bf16 */
    const gt_qweight q = gt_qweight_at((gt_qtype)w.qtype, w.p, out_dim, in_dim);
    gt_qbgemm_rnd(1, n, out_dim, in_dim, 1.0f, inp, in_dim, &q, 0.0f, out, out_dim);
    return;
  }
  gt__matmul_forward_raw(m, out, inp, w, n, in_dim, out_dim);
  if (rnd) gt__act_round(m, out, n * out_dim);
}

int gt__matmul_a16(const gt_model *m) {
  /* (the rounded copies path, with neither AVX-512 nor AVX2, has no 2-byte
   * packers: it would widen each bf16 operand into a copy first) */
  return m->bf16_act && m->bf16_mm && gt_qbgemm_packs_stored();
}

int gt__matmul_b16_forms(const gt_model *m, gt__weight w) { return gt__matmul_a16(m) && w.qtype == GT_STORE_F32; }

void gt__matmul_forward_a16(const gt_model *m, float *out, const uint16_t *inp16, gt__weight w, int64_t n,
                            int64_t in_dim, int64_t out_dim) {
  (void)m; /* bf16 products (gt__matmul_a16) */
  if (w.qtype != GT_STORE_F32) {
    const gt_qweight q = gt_qweight_at((gt_qtype)w.qtype, w.p, out_dim, in_dim);
    gt_qbgemm_t16(0, 1, n, out_dim, in_dim, 1.0f, inp16, in_dim, &q, 0.0f, out, out_dim);
    return;
  }
  const gt_bgemm_form f = {inp16, 0, NULL, 0};
  gt_bgemm_x(0, 1, n, out_dim, in_dim, 1.0f, NULL, in_dim, w.p, in_dim, 0.0f, out, out_dim, &f);
}

void gt__matmul_forward_b16(const gt_model *m, float *out, uint16_t *out16, const float *inp, const uint16_t *inp16,
                            gt__weight w, int64_t n, int64_t in_dim, int64_t out_dim) {
  (void)m; /* bf16 products (gt__matmul_b16_forms) */
  const gt_bgemm_form f = {inp16, out16 == NULL, out16, out_dim};
  gt_bgemm_x(0, 1, n, out_dim, in_dim, 1.0f, inp16 ? NULL : inp, in_dim, w.p, in_dim, 0.0f, out, out_dim, &f);
}

void gt__matmul_backward(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp, gt__weight w,
                     int64_t n, int64_t in_dim, int64_t out_dim) {
  if (w.qtype != GT_STORE_F32)
    gt__qmatmul_dinp(m, dinp, dout, w, n, in_dim, out_dim, 1.0f);
  else if (m->bf16_mm)
    gt_matmul_backward_bf16(dinp, dw, dout, inp, w.p, n, in_dim, out_dim);
  else
    gt_matmul_backward(dinp, dw, dout, inp, w.p, n, in_dim, out_dim);
}

void gt__matmul_backward_write(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp,
                           gt__weight w, int64_t n, int64_t in_dim, int64_t out_dim) {
  if (n <= 0 || in_dim <= 0) return;
  if (w.qtype != GT_STORE_F32 && out_dim > 0) {
    gt__qmatmul_dinp(m, dinp, dout, w, n, in_dim, out_dim, 0.0f);
    return;
  }
  if (out_dim <= 0) { /* an empty sum: the written gradient is 0, nothing to add to dw */
    if (dinp) memset(dinp, 0, (size_t)(n * in_dim) * sizeof(float));
    return;
  }
  if (dinp)
    for (int64_t r0 = 0; r0 < n; r0 += GT__ROW_BLOCK) {
      const int64_t rows = n - r0 < GT__ROW_BLOCK ? n - r0 : GT__ROW_BLOCK;
      (m->bf16_mm ? gt_bgemm : gt_sgemm)(0, 0, rows, in_dim, out_dim, 1.0f, dout + r0 * out_dim, out_dim, w.p, in_dim,
                                         0.0f, dinp + r0 * in_dim, in_dim);
    }
  if (dw) gt__matmul_backward(m, NULL, dw, dout, inp, w, n, in_dim, out_dim);
}

void gt__matmul_dw_b16(const gt_model *m, float *dw, const float *dout, const uint16_t *inp16, int64_t n,
                       int64_t in_dim, int64_t out_dim) {
  (void)m; /* bf16 products only (gt_layer_reads_b16) */
  if (!dw || n <= 0 || in_dim <= 0 || out_dim <= 0) return;
  const gt_qweight x = gt_qweight_at(GT_Q_BF16, inp16, n, in_dim);
  gt_qbgemm_t(1, 0, out_dim, in_dim, n, 1.0f, dout, out_dim, &x, 1.0f, dw, in_dim);
}

void gt__matmul_backward16(const gt_model *m, int write, float *dinp, float *dw, const uint16_t *dout16, int64_t ld16,
                           const float *inp, const uint16_t *inp16, gt__weight w, int64_t n, int64_t in_dim,
                           int64_t out_dim) {
  (void)m; /* bf16 products (gt__matmul_b16_forms; a frozen stored base: gt__matmul_a16) */
  if (n <= 0 || in_dim <= 0 || out_dim <= 0) {
    if (write && dinp && n > 0 && in_dim > 0) memset(dinp, 0, (size_t)(n * in_dim) * sizeof(float));
    return;
  }
  const gt_bgemm_form f = {dout16, 0, NULL, 0};
  if (dinp && w.qtype != GT_STORE_F32) { /* a frozen base stored quantized or in bf16 */
    const gt_qweight q = gt_qweight_at((gt_qtype)w.qtype, w.p, out_dim, in_dim);
    gt_qbgemm_t16(0, 0, n, in_dim, out_dim, 1.0f, dout16, ld16, &q, write ? 0.0f : 1.0f, dinp, in_dim);
  } else if (dinp) {
    gt_bgemm_x(0, 0, n, in_dim, out_dim, 1.0f, NULL, ld16, w.p, in_dim, write ? 0.0f : 1.0f, dinp, in_dim, &f);
  }
  if (!dw || w.qtype != GT_STORE_F32) return;
  if (inp16) {
    const gt_qweight x = gt_qweight_at(GT_Q_BF16, inp16, n, in_dim);
    gt_qbgemm_t16(1, 0, out_dim, in_dim, n, 1.0f, dout16, ld16, &x, 1.0f, dw, in_dim);
  } else {
    gt_bgemm_x(1, 0, out_dim, in_dim, n, 1.0f, NULL, ld16, inp, in_dim, 1.0f, dw, in_dim, &f);
  }
}

void gt__gemm(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  (m->bf16_mm ? gt_bgemm : gt_sgemm)(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gt__gemm_a16(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, const uint16_t *A16, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
  if (!A16) {
    gt__gemm(m, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M <= 0 || N <= 0) return;
  const gt_bgemm_form f = {A16, 0, NULL, 0};
  gt_bgemm_x(transA, transB, M, N, K, alpha, NULL, lda, B, ldb, beta, C, ldc, &f);
}

void gt__gemm_rnd(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (m->bf16_act && m->bf16_mm) {
    gt_bgemm_rnd(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gt__gemm(m, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (m->bf16_act)
    for (int64_t i = 0; i < M; i++) gt__act_round(m, C + i * ldc, N);
}

void gt__act_round(const gt_model *m, float *x, int64_t n) {
  if (m->bf16_act && x) gt_bf16_round(x, n);
}
