/* Quantized storage of frozen weight matrices, and products that read it.
 *
 * A frozen base (enable_lora, lora_weight_qtype) keeps its matrices in one
 * of these formats; the trainer never updates them, so they never need a
 * float32 master copy. A matrix W [rows, cols] (Hugging Face's [out, in])
 * is stored row-major as its elements, then (at the next 4-byte boundary)
 * its float32 scales:
 *   GT_Q_F32   float32 elements, no scales
 *   GT_Q_BF16  bfloat16 elements (kernels/bf16.h), no scales
 *   GT_Q_INT8  int8 q, one scale per row: w = q * scale[row], scale =
 *              absmax(row) / 127 (LLM.int8's row-wise absmax)
 *   GT_Q_NF4   4-bit indices into gt_nf4_code, two a byte (the even element
 *              in the high nibble, as bitsandbytes packs them), one absmax per
 *              block of GT_Q_NF4_BLOCK consecutive elements of the flattened
 *              matrix: w = gt_nf4_code[q] * absmax[block] (QLoRA's NormalFloat)
 * The values match gt_store_dtype's (src/model/store.h), which names the
 * same formats for the parameter store.
 *
 * Products dequantize where the GEMM packs its weight operand (the AVX-512
 * paths: kernels/gemm.c's and kernels/gemm_bf16.c's quantized packers; the
 * portable path: bounded panels in the thread's packing buffer): no
 * full-size float copy of a weight is ever made (docs/quantization.md).
 * Contract (tests/test_quant.c): a product with a quantized W has the same
 * bits as gt_sgemm (gt_qbgemm: gt_bgemm) on the dequantized float matrix,
 * on any thread count. */
#ifndef GEMTRAIN_KERNELS_QUANT_H
#define GEMTRAIN_KERNELS_QUANT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_qtype { GT_Q_F32 = 0, GT_Q_BF16 = 1, GT_Q_INT8 = 2, GT_Q_NF4 = 3 } gt_qtype;

#define GT_Q_NF4_BLOCK 64

/* The 16 NormalFloat4 values (QLoRA, appendix E; bitsandbytes' table). */
extern const float gt_nf4_code[16];
/* bitsandbytes' quantization thresholds (the midpoints of adjacent codes, as
 * its dQuantizeNF4 spells them), ascending: a normalized value x gets the
 * code index counting the thresholds x is strictly greater than. */
extern const float gt_nf4_mid[15];

/* A read-only view of one stored matrix. */
typedef struct gt_qweight {
  gt_qtype type;
  const void *data;     /* rows * cols elements in the type's encoding */
  const float *scales;  /* int8: rows; nf4: ceil(rows*cols / 64); else NULL */
  int64_t rows, cols;
} gt_qweight;

/* Bytes of the elements; number of float32 scales; 4-byte words of the
 * whole stored matrix (elements rounded up to a word, then the scales). */
int64_t gt_q_data_bytes(gt_qtype t, int64_t numel);
int64_t gt_q_scale_count(gt_qtype t, int64_t numel, int64_t rows);
int64_t gt_q_words(gt_qtype t, int64_t rows, int64_t cols);
/* The view of a matrix stored at `base` (gt_q_words words). */
gt_qweight gt_qweight_at(gt_qtype t, const void *base, int64_t rows, int64_t cols);

/* Quantizes src [rows, cols] into the storage at dst (gt_q_words words), as
 * bitsandbytes does: nf4 codes of v * (1 / absmax) by gt_nf4_mid (an
 * all-zero block: code 0 with absmax 0); int8 q = round-to-nearest-even(v *
 * (127 / absmax)), scale absmax / 127 (an all-zero row: 0 and 0). On the
 * calling thread's team; the bytes do not depend on the thread count or the
 * CPU. gt_quantize_ref: the scalar reference (one thread, bitsandbytes'
 * decision tree written out). */
void gt_quantize(gt_qtype t, const float *src, int64_t rows, int64_t cols, void *dst);
void gt_quantize_ref(gt_qtype t, const float *src, int64_t rows, int64_t cols, void *dst);
/* Rows [r0, r0 + n) of w as float32 into out [n, cols]. */
void gt_dequantize_rows(const gt_qweight *w, int64_t r0, int64_t n, float *out);
void gt_dequantize_rows_ref(const gt_qweight *w, int64_t r0, int64_t n, float *out);

/* C[M,N] = alpha * A[M,K] . op(W) + beta * C (beta 0 never reads C);
 * transW 1: op(W) = W^T with W [N, K] (a forward projection x . W^T);
 * transW 0: op(W) = W with W [K, N] (the input gradient dy . W).
 * gt_qbgemm rounds A and the dequantized W to bf16 (float32 sums), as
 * gt_bgemm. The references sum in double. */
void gt_qgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const gt_qweight *W, float beta, float *C, int64_t ldc);
void gt_qbgemm(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const gt_qweight *W, float beta, float *C, int64_t ldc);
/* gt_qbgemm with op(A) = A^T (A [K, M]) when transA: the weight gradient
 * dy^T . x of an input x kept in bf16 (a GT_Q_BF16 W), the same bits as
 * gt_bgemm(1, transW, ...) on x widened to float32. */
void gt_qbgemm_t(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const gt_qweight *W, float beta, float *C, int64_t ldc);
/* gt_qbgemm_t with A held as bf16 patterns (row stride lda; op(A) as
 * transA): the weight gradient dY^T.X whose dY a bf16 step kept in 2 bytes
 * (model/linear.h); the bits of gt_qbgemm_t on the widened floats. */
void gt_qbgemm_t16(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A16,
                   int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc);
/* gt_qbgemm with C then rounded to bf16: the bits of gt_qbgemm followed by
 * gt_bf16_round over the M x N block, where the packed loops round each
 * tile of C as they finish it (gt_bgemm_rnd's contract; a dtype=bfloat16
 * projection or head over a frozen stored base, model/linear.h). */
void gt_qbgemm_rnd(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const gt_qweight *W, float beta, float *C, int64_t ldc);
/* 1 when gt_qbgemm reads a stored W as it packs it on this process's bf16
 * path (every AVX-512 path, and the AVX2 copy's widened one); 0 on the
 * rounded copies path (neither AVX-512 nor AVX2, or forced by
 * GT_TEST_BF16_PATH=copies), which widens W a panel
 * at a time and rounds A again for each panel: a caller that can have W in
 * float32 is faster with gt_bgemm there. */
int gt_qbgemm_packs_stored(void);
void gt_qgemm_ref(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const gt_qweight *W, float beta, float *C, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif
