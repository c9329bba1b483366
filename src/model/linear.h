/* The model's linear layers and its activations' precision.
 *
 * Every projection of the model goes through these, so the precision is
 * chosen in one place: float32 inputs, or bf16 inputs with float32
 * accumulation when m->bf16_mm (dtype=bfloat16, matmul_precision=default).
 * gt__act_round rounds an activation a forward op just wrote to bf16 when
 * m->bf16_act (dtype=bfloat16); it does nothing in float32 runs. */
#ifndef GEMTRAIN_MODEL_LINEAR_H
#define GEMTRAIN_MODEL_LINEAR_H

#include <stdint.h>

#include "model/model.h"

/* A weight matrix [out_dim, in_dim] where it lives (a slot of a parameter
 * block) and how it is stored there (gt_store_dtype): float32, or a frozen
 * base's bfloat16/int8/nf4 (kernels/quant.h), which the products dequantize
 * as they pack it. A stored-quantized weight is frozen: its dw is NULL. */
typedef struct gt__weight {
  const float *p;
  int qtype;
} gt__weight;
static inline gt__weight gt__wf32(const float *p) {
  gt__weight w = {p, GT_STORE_F32};
  return w;
}

/* out[n,out_dim] = inp . w^T (overwritten), then with rnd (dtype=bfloat16)
 * rounded to bf16: inside the bf16 product's tile loop where it has one
 * (gt_bgemm_rnd, gt_qbgemm_rnd for a stored base), else a pass of its own;
 * the bits of the product followed by gt__act_round either way. */
void gt__matmul_forward(const gt_model *m, float *out, const float *inp, gt__weight w, int64_t n, int64_t in_dim,
                        int64_t out_dim, int rnd);
/* Whether products can read bf16 inputs as bf16 patterns, whatever the
 * weight's storage: dtype=bfloat16 with bf16 products on a path whose
 * packers read bf16 operands as they are (gt_qbgemm_packs_stored). */
int gt__matmul_a16(const gt_model *m);
/* out = inp16 . w^T, unrounded, from the input's bf16 copy (inp16 [n,
 * in_dim]) for w of any storage: the bits of gt__matmul_forward with rnd 0
 * on the widened input (a projection an adapter adds into). Only where
 * gt__matmul_a16. */
void gt__matmul_forward_a16(const gt_model *m, float *out, const uint16_t *inp16, gt__weight w, int64_t n,
                            int64_t in_dim, int64_t out_dim);
/* Whether a projection of w can take the bf16 forms
 * (gt__matmul_forward_b16, gt__matmul_backward16): dtype=bfloat16 with bf16
 * products of a float32-stored w, on a bf16 path whose packers read bf16
 * operands as they are (gt_qbgemm_packs_stored). */
int gt__matmul_b16_forms(const gt_model *m, gt__weight w);
/* gt__matmul_forward (rounded) with its input and output in bf16 forms
 * (gt_bgemm_x): inp16, when given, is inp's bf16 copy and is read instead
 * of inp (which may then be NULL), at 2 bytes an element; out16, when
 * given, receives the output's bf16 patterns, written by the product where
 * it can (out is then its scratch, contents unspecified). The same bits as
 * gt__matmul_forward then gt_bf16_pack. Only where gt__matmul_b16_forms. */
void gt__matmul_forward_b16(const gt_model *m, float *out, uint16_t *out16, const float *inp, const uint16_t *inp16,
                            gt__weight w, int64_t n, int64_t in_dim, int64_t out_dim);
/* dinp += dout . w ; dw += dout^T . inp (either may be NULL) */
void gt__matmul_backward(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp, gt__weight w,
                     int64_t n, int64_t in_dim, int64_t out_dim);
/* The same, but dinp is WRITTEN (never read): the first product into a
 * buffer then needs no zeroing pass. The same bits as gt__matmul_backward on a
 * zeroed dinp: one product with beta 0 instead of 1 on zeros. */
void gt__matmul_backward_write(const gt_model *m, float *dinp, float *dw, const float *dout, const float *inp,
                           gt__weight w, int64_t n, int64_t in_dim, int64_t out_dim);
/* dw += dout^T . inp for an input kept as bf16 patterns (inp16 [n,
 * in_dim]; dtype=bfloat16 with bf16 products): gt__matmul_backward's weight
 * gradient, read from the copy as a stored bf16 matrix (gt_qbgemm_t), so it
 * is never widened into memory; the same bits. */
void gt__matmul_dw_b16(const gt_model *m, float *dw, const float *dout, const uint16_t *inp16, int64_t n,
                       int64_t in_dim, int64_t out_dim);
/* A projection's backward from its output gradient as bf16 patterns
 * (dout16, row stride ld16; the bf16 products round the gradient to that
 * anyway) and its input as floats (inp) or kept in bf16 (inp16, read as a
 * stored matrix): dinp (+)= dout . w (written when write, else added; may
 * be NULL) and dw += dout^T . inp (may be NULL), the bits of
 * gt__matmul_backward(_write) and gt__matmul_dw_b16 on the float32
 * gradient. Only where gt__matmul_b16_forms, or for a frozen base of any
 * storage (dw NULL) where gt__matmul_a16. */
void gt__matmul_backward16(const gt_model *m, int write, float *dinp, float *dw, const uint16_t *dout16, int64_t ld16,
                           const float *inp, const uint16_t *inp16, gt__weight w, int64_t n, int64_t in_dim,
                           int64_t out_dim);
/* C = alpha * op(A) . op(B) + beta * C (gt_sgemm's arguments) in the
 * model's matmul precision: gt_bgemm when m->bf16_mm, else gt_sgemm.
 * Float32 operands only (the adapters' products). */
void gt__gemm(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* gt__gemm with op(A) given as A or, when A16 is not NULL, as its bf16
 * patterns (row stride lda; bf16 products, gt__matmul_a16): the bits of
 * gt__gemm on the widened floats. */
void gt__gemm_a16(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, const uint16_t *A16, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc);
/* gt__gemm with C then rounded to bf16 under dtype=bfloat16 (inside the
 * product's tile loop where it has one, gt_bgemm_rnd): the bits of gt__gemm
 * followed by gt__act_round over the M x N block. */
void gt__gemm_rnd(const gt_model *m, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* dtype=bfloat16: x[0..n) rounded to bf16 in place */
void gt__act_round(const gt_model *m, float *x, int64_t n);

#endif
