/* bfloat16: the storage type of dtype=bfloat16 (activations at rest and
 * matmul inputs; see docs/precision.md).
 *
 * A bf16 value is the top 16 bits of a float32. Conversion rounds to nearest
 * even, as PyTorch, JAX and the AVX512_BF16 instructions do; a NaN stays a
 * NaN (its quiet bit is set, so rounding cannot carry a low-only payload
 * into infinity). Denormals are kept (no flush to zero).
 *
 * "Rounding to bf16" a float32 buffer leaves it in float32 storage with
 * values that bf16 represents exactly: kernels then read it as plain floats,
 * and packing it to bf16 later is exact. */
#ifndef GEMTRAIN_BF16_H
#define GEMTRAIN_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rounding on a float32's bits: the bf16 pattern in the top half, the
 * low half zero. Written without a branch (a select) so that it vectorizes
 * inside a loop that computes the value (kernels/bf16_row.h); the one scalar
 * definition of the rounding (the 16-lane form is kernels/bf16_lanes.h). */
static inline uint32_t gt__bf16_round_bits(uint32_t u) {
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t q = (u | 0x00400000u) & 0xffff0000u; /* a NaN, quieted */
  return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}

static inline uint16_t gt_f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(gt__bf16_round_bits(u) >> 16);
}

static inline float gt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* x rounded to the nearest bf16, as a float32 */
static inline float gt_bf16_round1(float x) { return gt_bf16_to_f32(gt_f32_to_bf16(x)); }

/* x[i] = round_bf16(x[i]), in place. Threads split fixed ranges. */
void gt_bf16_round(float *x, int64_t n);
/* dst[i] = round_bf16(src[i]): a copy and gt_bf16_round in one pass (the
 * same bits; dst and src do not overlap) */
void gt_bf16_round_copy(float *dst, const float *src, int64_t n);
/* rows x cols block: dst (row stride ldd) = round_bf16(src (row stride
 * lds)), in place when dst == src and ldd == lds; on the calling thread only
 * (gt_bgemm_rnd rounds each C tile with it, bf16 attention its operands) */
void gt_bf16_round_rows(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
/* dst[i] = bf16(src[i]) (round to nearest even) */
void gt_bf16_pack(uint16_t *dst, const float *src, int64_t n);
/* rows x cols block: dst (row stride ldd) = bf16(src (row stride lds)), on
 * the calling thread only (gt_bgemm_c16 packs each C tile with it) */
void gt_bf16_pack_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
/* dst[i] = float(src[i]) (exact) */
void gt_bf16_unpack(float *dst, const uint16_t *src, int64_t n);

/* ---- bf16 matrix products, float32 accumulation ----
 * gt_bgemm: C = alpha * bf16(op(A)) . bf16(op(B)) + beta * C, arguments as
 * gt_sgemm (kernels.h): each input element is rounded to bf16 (exact for
 * inputs already rounded), products and sums in float32. Bits do not depend
 * on the thread count. */
void gt_bgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* gt_bgemm with C rounded to bf16 at the end: the bits of gt_bgemm then
 * gt_bf16_round over the M x N block, where the packed paths round each
 * tile of C as they finish it instead of in a second pass over memory (a
 * dtype=bfloat16 projection's output, model/linear.h). */
void gt_bgemm_rnd(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* C16 = bf16(alpha * bf16(op(A)) . bf16(op(B))) as bf16 patterns (row
 * stride ldc16; no beta: written): the bits of gt_bgemm_rnd with beta 0
 * followed by gt_bf16_pack. Where the packed loops take K in one block they
 * compute each tile into a scratch tile and write only its 2-byte patterns,
 * so the float32 product never reaches memory (a dtype=bfloat16
 * projection's output that only bf16 readers read: the MLP's gate and up,
 * docs/precision.md); elsewhere they compute into C (float32 [M, N], row
 * stride ldc: the caller's scratch, whose contents are then unspecified)
 * and pack from it. */
void gt_bgemm_c16(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, uint16_t *C16, int64_t ldc16);
/* gt_bgemm with its operands and output in the forms a dtype=bfloat16
 * forward keeps them, each optional (a zeroed form: gt_bgemm):
 *   a16    A held as bf16 patterns (row stride lda, op(A) as transA says;
 *          A is not read): the packers read 2 bytes an element and have
 *          nothing to round; the bits of gt_bgemm on the widened floats;
 *   round  C rounded to bf16 (gt_bgemm_rnd);
 *   c16    C16 = bf16(product) as gt_bgemm_c16 (beta taken as 0). */
typedef struct gt_bgemm_form {
  const uint16_t *a16;
  int round;
  uint16_t *c16;
  int64_t ldc16;
} gt_bgemm_form;
void gt_bgemm_x(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const gt_bgemm_form *f);
void gt_bgemm_ref(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* gt_matmul_forward / gt_matmul_backward (kernels.h) with bf16 inputs */
void gt_matmul_forward_bf16(float *out, const float *inp, const float *w, int64_t n, int64_t in_dim, int64_t out_dim);
/* the same with out rounded to bf16 (gt_bgemm_rnd) */
void gt_matmul_forward_bf16_rnd(float *out, const float *inp, const float *w, int64_t n, int64_t in_dim,
                                int64_t out_dim);
void gt_matmul_backward_bf16(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int64_t n,
                             int64_t in_dim, int64_t out_dim);

/* The kernel of vdpbf16ps's pair arithmetic (kernels/gemm_bf16.c; what
 * attention's bf16 tiles and gt_bgemm's pairs path run): 2 vdpbf16ps
 * (AVX512_BF16), 1 its emulation with float32 FMAs under DAZ/FTZ (no
 * AVX512_BF16, GEMTRAIN_NO_AVX512BF16=1, or forced), 0 none (no AVX-512).
 * The two give the same bits (measured; see gemm_bf16.c). Which path
 * gt_bgemm takes is gt__bgemm_path()'s (kernels/bf16_path.h). */
int gt__bgemm_kernel(void);
/* Tests: on != 0 makes gt_bgemm run the FMA emulation of vdpbf16ps (on any
 * path) and attention's bf16 products too; not for use while another
 * thread runs gt_bgemm. */
void gt__bgemm_force_fallback(int on);

/* The machine's bf16 dot-product peak in GFLOP/s on `threads` threads
 * (kernels/peak.c): a vdpbf16ps loop counted at 64 flops per 512-bit
 * instruction (32 bf16 products, each with its add: 2 flops); 0 without
 * AVX512_BF16. */
double gt_bf16_peak_gflops(int threads, double seconds);

/* scalar references (tests) */
void gt_bf16_round_ref(float *x, int64_t n);
void gt_bf16_pack_ref(uint16_t *dst, const float *src, int64_t n);
void gt_bf16_unpack_ref(float *dst, const uint16_t *src, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
