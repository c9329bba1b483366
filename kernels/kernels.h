/* gemtrain compute kernels: forward/backward pairs, float32.
 *
 * Conventions (after llm.c): arguments go outputs, saved, inputs, weights,
 * dims. Forward functions overwrite their outputs. Backward functions ADD into
 * every gradient buffer they are given (the caller zeroes them), and any
 * gradient pointer may be NULL when that gradient is not needed.
 *
 * Every kernel has a plain scalar reference `*_ref` with the same signature;
 * tests compare the fast version against it, and the framework only ever calls
 * the fast one. Fast kernels split work over the calling thread's team
 * (src/base/team.h) with fixed partitions, so results are the same run to
 * run and on any thread count; called from inside a team member's work they
 * run on the calling thread.
 *
 * Layouts: activations are row-major [tokens, features]. Weight matrices are
 * stored as Hugging Face does, [out_features, in_features]. */
#ifndef GEMTRAIN_KERNELS_H
#define GEMTRAIN_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- general matrix product, row-major ----
 * C[M,N] = alpha * op(A) . op(B) + beta * C; op(A)(i,k) = A[i*lda+k], or
 * A[k*lda+i] when transA; op(B)(k,j) = B[k*ldb+j], or B[j*ldb+k] when transB.
 * beta == 0 never reads C. Our own packed AVX-512 kernel (kernels/gemm.c),
 * OpenBLAS where AVX-512 is missing (or, for one call, when the calling
 * thread's packing buffers cannot grow); the reference sums in double.
 * Bits do not depend on the thread count; inside a parallel region the call
 * runs on the calling thread. */
void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void gt_sgemm_ref(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* The measured float32 FMA peak of `threads` threads in GFLOP/s (kernels/
 * peak.c: an assembly loop of 12 independent vector FMAs per thread, the best
 * of three runs of about `seconds` each); 0 without FMA. `gemtrain bench
 * gemm` divides GEMM rates by it. */
double gt_fma_peak_gflops(int threads, double seconds);
/* gt_sgemm's micro-kernel alone on the calling thread in GFLOP/s (kernels/
 * gemm.c: its panels in L1, no packing, no C traffic; the best of three runs
 * of about `seconds`): the ceiling of every gt_sgemm product on this CPU.
 * 0 where gt_sgemm is OpenBLAS's (the portable copy). */
double gt__sgemm_kernel_gflops(double seconds);

/* ---- matmul (projections: gt_sgemm) ----
 * out[n,out_dim] = inp[n,in_dim] . w[out_dim,in_dim]^T  (overwrites out)
 * backward: dinp[n,in_dim] += dout . w ;  dw[out_dim,in_dim] += dout^T . inp */
void gt_matmul_forward(float *out, const float *inp, const float *w,
                       int64_t n, int64_t in_dim, int64_t out_dim);
void gt_matmul_backward(float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w,
                        int64_t n, int64_t in_dim, int64_t out_dim);
void gt_matmul_forward_ref(float *out, const float *inp, const float *w,
                           int64_t n, int64_t in_dim, int64_t out_dim);
void gt_matmul_backward_ref(float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w,
                            int64_t n, int64_t in_dim, int64_t out_dim);

/* ---- RMSNorm over the last dim ----
 * out = x * rstd * (w_offset + w), rstd[r] = 1/sqrt(mean(x_r^2) + eps).
 * Gemma 3 stores w and uses (1 + w): w_offset = 1. Gemma 4 stores the scale
 * itself: w_offset = 0. w == NULL means no learnable scale (multiplier 1).
 * All math in float32; rstd is saved for backward. */
void gt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                        int64_t rows, int dim, float eps, float w_offset);
void gt_rmsnorm_backward(float *dx, float *dw, const float *dout,
                         const float *x, const float *rstd, const float *w,
                         int64_t rows, int dim, float w_offset);
void gt_rmsnorm_forward_ref(float *out, float *rstd, const float *x, const float *w,
                            int64_t rows, int dim, float eps, float w_offset);
void gt_rmsnorm_backward_ref(float *dx, float *dw, const float *dout,
                             const float *x, const float *rstd, const float *w,
                             int64_t rows, int dim, float w_offset);

/* ---- RMSNorm fused with the residual stream (one sweep instead of two or three) ----
 * Forward: res_out = res + rmsnorm(y; w), rstd of y saved in rstd; when out2
 * is not NULL also out2 = rmsnorm(res_out; w2) with rstd2 saved (a block's
 * post-norm residual add and the next pre-norm in one pass).
 * Backward: dx = dres + g (accumulate = 0: dx is written, never read, so it
 * needs no zeroing; dres == NULL: dx = g) or dx = (dx + dres) + g
 * (accumulate = 1; dres == NULL: dx += g), g the input gradient of
 * gt_rmsnorm_backward; dw += as there.
 * Both are bit-identical to the unfused sequence (gt_rmsnorm_forward, then
 * the add, then gt_rmsnorm_forward; zero or keep dx, add dres, then
 * gt_rmsnorm_backward): they run the same row code in the same order. */
void gt_rmsnorm_residual_forward(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                 const float *y, const float *w, const float *w2, int64_t rows, int dim, float eps,
                                 float w_offset);
void gt_rmsnorm_residual_backward(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                                  const float *rstd, const float *w, int64_t rows, int dim, float w_offset,
                                  int accumulate);
void gt_rmsnorm_residual_forward_ref(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                     const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                     float eps, float w_offset);
void gt_rmsnorm_residual_backward_ref(float *dx, float *dw, const float *dres, const float *dout, const float *x,
                                      const float *rstd, const float *w, int64_t rows, int dim, float w_offset,
                                      int accumulate);

/* ---- RoPE, rotate-half convention ----
 * Table: cos/sin are [max_pos, head_dim/2]. Pair i (i < head_dim/2) rotates
 * dims (i, i + head_dim/2) by angle pos * inv_freq[i] with
 * inv_freq[i] = 1 / (base^(2i/head_dim) * scale) for i < rot_pairs and 0
 * (identity) after, rot_pairs = (int)(fraction * head_dim / 2). Computed in
 * float32 the way HF does. fraction = 1 is standard RoPE; Gemma 4 global
 * layers use 0.25 ("proportional": the denominator stays head_dim). */
void gt_rope_table_fill(float *cos_tab, float *sin_tab, int max_pos, int head_dim,
                        double base, double scale, double fraction);
/* In place on x[ntok, nheads, head_dim]; pos[ntok] indexes the table. */
void gt_rope_forward(float *x, const int32_t *pos, const float *cos_tab,
                     const float *sin_tab, int64_t ntok, int nheads, int head_dim);
/* In place: on entry dx holds d(out), on return d(in) (the inverse rotation). */
void gt_rope_backward(float *dx, const int32_t *pos, const float *cos_tab,
                      const float *sin_tab, int64_t ntok, int nheads, int head_dim);
void gt_rope_forward_ref(float *x, const int32_t *pos, const float *cos_tab,
                         const float *sin_tab, int64_t ntok, int nheads, int head_dim);
void gt_rope_backward_ref(float *dx, const int32_t *pos, const float *cos_tab,
                          const float *sin_tab, int64_t ntok, int nheads, int head_dim);

/* ---- causal attention with GQA and an optional sliding window ----
 * q: [B,T,H,hd]; k, v: [B,T,K,hd]; out: [B,T,H,hd]; lse: [B,H,T] (log-sum-exp
 * of the scaled scores of each query row, saved for backward).
 * Query head h reads kv head h / (H/K). Key j is visible to query i iff
 * j <= i, and i - j < window when window > 0 (window == 0: plain causal), and
 * seg[b,i] == seg[b,j] when seg != NULL (packed sequences).
 * score = scale * q.k. The fast version is tiled (online softmax forward,
 * recompute in backward) and never builds a T x T matrix; tiles that the mask
 * removes entirely are skipped, so a window-W layer costs O(T*W).
 * The fast versions return 0, or -1 when a thread's scratch (a few hundred
 * KB, independent of T) could not be allocated: then nothing is written and
 * the caller reports GT_ERR_NOMEM (the backward also returns -1, writing
 * nothing, when given neither out nor out16). The references return
 * nothing. */
typedef struct gt_attn_dims {
  int B, T, H, K, hd;
  int window;  /* 0 = global (causal only) */
  float scale;
  /* 0: float32 (products in float32). 1: bf16 products. q, k, v must hold
   * bf16 values (the caller rounded them): the pairs round them again where
   * they pack them, a no-op for such values, and the widened mode reads them
   * as they are (given other values it would compute with them unrounded).
   * The tile products S = Q.K^T,
   * O += P.V and in backward dP = dO.V^T, dQ += dS.K, dK += dS^T.Q,
   * dV += P^T.dO take bf16 inputs: P (the unnormalized exp(S - running max)
   * in forward, exp(S - lse) in backward), dS = P (dP - D) (unscaled) and dO
   * are rounded to bf16 (round to nearest even) where they enter a product.
   * Products accumulate in float32 in gt_bgemm's arithmetic: where it takes
   * the pairs path, on vdpbf16ps (pairs along the reduction dimension) or
   * its bit-identical float32-FMA emulation (gt__bgemm_kernel(),
   * kernels/bf16.h); where it takes the widened or AMX path
   * (kernels/bf16_path.h), on float32 FMAs over the rounded operands, one k
   * at a time (other bits, the same bounds).
   * Softmax, running max and sum, lse, D = rowsum(dO * O) (from the unrounded
   * dO) and all outputs stay float32. On the portable path (kernels/cpu.h)
   * the flag is ignored (float32 products). The references implement the same
   * rounding with sums in double. Trailing, so positional initializers leave
   * it 0. */
  int bf16;
  /* dtype=bfloat16's activations (trailing too): round_out rounds the
   * forward's output to bf16 as each row is finished (the bits of a
   * gt_bf16_round pass after it); out16, when not NULL, is the output's bf16
   * copy, written by the forward and read by the backward in place of out
   * (then NULL) for D = rowsum(dO * O), a row widened on the stack so the
   * same bits (head_dim up to GT_ATTN_OUT16_HD_MAX; wider rows read the
   * bits in the loop, within float rounding). */
  int round_out;
  uint16_t *out16;
} gt_attn_dims;
#define GT_ATTN_OUT16_HD_MAX 1024

int gt_attention_forward(float *out, float *lse, const float *q, const float *k,
                         const float *v, const int32_t *seg, const gt_attn_dims *d);
int gt_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                          const float *out, const float *lse, const float *q,
                          const float *k, const float *v, const int32_t *seg,
                          const gt_attn_dims *d);
void gt_attention_forward_ref(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, const gt_attn_dims *d);
void gt_attention_backward_ref(float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q,
                               const float *k, const float *v, const int32_t *seg,
                               const gt_attn_dims *d);

/* ---- one query row against a key/value cache (decoding) ----
 * q: [H, hd], one token's queries; kc, vc: [cap, K, hd], a cache of past
 * positions (a ring buffer when cap < the sequence). The visible keys are
 * the n rows (start + i) % cap, i = 0 .. n-1, oldest first; the caller has
 * already applied the causal mask and the window by choosing start and n.
 * Query head h reads kv head h / (H/K); score = scale * q.k; out: [H, hd].
 * The fast version streams the keys in blocks with an online softmax, so it
 * needs no buffer of n scores; the reference builds the whole row. */
typedef struct gt_attn_cache_dims {
  int H, K, hd;
  int64_t cap, start, n;
  float scale;
} gt_attn_cache_dims;

void gt_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                         const gt_attn_cache_dims *d);
void gt_attention_decode_ref(float *out, const float *q, const float *kc, const float *vc,
                             const gt_attn_cache_dims *d);

/* ---- GeGLU: out = gelu_tanh(gate) * up, elementwise over n ----
 * gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void gt_geglu_forward(float *out, const float *gate, const float *up, int64_t n);
void gt_geglu_backward(float *dgate, float *dup, const float *dout,
                       const float *gate, const float *up, int64_t n);
void gt_geglu_forward_ref(float *out, const float *gate, const float *up, int64_t n);
void gt_geglu_backward_ref(float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, int64_t n);
/* The same gradients WRITTEN instead of added (destinations need no zeroing);
 * bit-identical to gt_geglu_backward on zeroed buffers. */
void gt_geglu_backward_write(float *dgate, float *dup, const float *dout,
                             const float *gate, const float *up, int64_t n);
void gt_geglu_backward_write_ref(float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, int64_t n);
/* dtype=bfloat16 with the MLP's saved tensors kept in 2 bytes (the
 * executor): gt_geglu_forward_rnd(out, gate, up, n, 1) that also writes the
 * bf16 patterns (gt_bf16_pack's) of out, gate and up into out16, gate16
 * and up16 (each may be NULL) in the same sweep; and
 * gt_geglu_backward_write reading gate and up as bf16 patterns. Each is
 * bit-identical to the unfused sequence (forward_rnd then gt_bf16_pack;
 * gt_bf16_unpack then backward_write); the references are those sequences
 * of the references. */
void gt_geglu_forward_pack(float *out, uint16_t *out16, uint16_t *gate16, uint16_t *up16, const float *gate,
                           const float *up, int64_t n);
void gt_geglu_backward_write_b16(float *dgate, float *dup, const float *dout, const uint16_t *gate16,
                                 const uint16_t *up16, int64_t n);
/* gt_geglu_backward_write_b16 with both gradients written as bf16 patterns
 * (for bf16 products, which round them as they pack them: the same
 * products as from the float32 gradients) */
void gt_geglu_backward_b16_to_b16(uint16_t *dgate16, uint16_t *dup16, const float *dout, const uint16_t *gate16,
                                  const uint16_t *up16, int64_t n);
void gt_geglu_backward_b16_to_b16_ref(uint16_t *dgate16, uint16_t *dup16, const float *dout, const uint16_t *gate16,
                                      const uint16_t *up16, int64_t n);
/* The forward from gate and up kept only as bf16 patterns (their products
 * wrote nothing else, gt_bgemm_c16): out (rounded; may be NULL) and out16
 * (may be NULL) as gt_geglu_forward_pack writes them from the widened
 * inputs, bit for bit. */
void gt_geglu_forward_b16(float *out, uint16_t *out16, const uint16_t *gate16, const uint16_t *up16, int64_t n);
void gt_geglu_forward_b16_ref(float *out, uint16_t *out16, const uint16_t *gate16, const uint16_t *up16,
                              int64_t n);
void gt_geglu_forward_pack_ref(float *out, uint16_t *out16, uint16_t *gate16, uint16_t *up16, const float *gate,
                               const float *up, int64_t n);
void gt_geglu_backward_write_b16_ref(float *dgate, float *dup, const float *dout, const uint16_t *gate16,
                                     const uint16_t *up16, int64_t n);

/* ---- fused elementwise sweeps (kernels/norm_rope.c; gt_geglu_forward_rnd in
 * kernels/geglu.c) ----
 * One pass over the rows where the unfused sequence makes two or three. With
 * round_bf16 (dtype=bfloat16) each output is rounded to bf16 where it is
 * computed, in place of a gt_bf16_round pass over the output afterwards. Each
 * is bit-identical to the unfused sequence it names (the same expressions in
 * the same order), so a remat recompute that runs either gets the same bits.
 * gt_rmsnorm_forward_rnd: gt_rmsnorm_forward, then round out.
 * gt_rmsnorm_rope_forward: gt_rmsnorm_forward over ntok * nheads rows of
 *   head_dim, gt_rope_forward on out, then round out.
 * gt_rope_rmsnorm_backward: gt_rope_backward on dout (in place: dout holds
 *   the rotated-back gradient on return), then gt_rmsnorm_residual_backward
 *   (dx, dw, NULL, dout, ..., accumulate = 0): dx written, dw added to.
 * gt_rmsnorm_residual_forward_rnd: gt_rmsnorm_residual_forward, then round
 *   res_out and out2 (out2 is the norm of the unrounded res_out, as there).
 * gt_geglu_forward_rnd: gt_geglu_forward, then round out. */
void gt_rmsnorm_forward_rnd(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps,
                            float w_offset, int round_bf16);
void gt_rmsnorm_rope_forward(float *out, float *rstd, const float *x, const float *w, const int32_t *pos,
                             const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim,
                             float eps, float w_offset, int round_bf16);
void gt_rope_rmsnorm_backward(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w,
                              const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                              int nheads, int head_dim, float w_offset);
void gt_rmsnorm_residual_forward_rnd(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                     const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                     float eps, float w_offset, int round_bf16);
void gt_geglu_forward_rnd(float *out, const float *gate, const float *up, int64_t n, int round_bf16);
void gt_rmsnorm_forward_rnd_ref(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim,
                                float eps, float w_offset, int round_bf16);
void gt_rmsnorm_rope_forward_ref(float *out, float *rstd, const float *x, const float *w, const int32_t *pos,
                                 const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim,
                                 float eps, float w_offset, int round_bf16);
void gt_rope_rmsnorm_backward_ref(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w,
                                  const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                                  int nheads, int head_dim, float w_offset);
void gt_rmsnorm_residual_forward_rnd_ref(float *res_out, float *rstd, float *out2, float *rstd2, const float *res,
                                         const float *y, const float *w, const float *w2, int64_t rows, int dim,
                                         float eps, float w_offset, int round_bf16);
void gt_geglu_forward_rnd_ref(float *out, const float *gate, const float *up, int64_t n, int round_bf16);

/* dtype=bfloat16 with the norms' saved tensors kept in 2 bytes (the
 * executor), as the GeGLU's above:
 * gt_rmsnorm_forward_pack: gt_rmsnorm_forward_rnd(..., round_bf16 = 1) that
 *   also writes the bf16 patterns of out and the input x into out16 and x16
 *   (each may be NULL); with out NULL and out16 given, only the patterns
 *   (a forward whose readers of out take its copy);
 * gt_rmsnorm_residual_forward_pack: gt_rmsnorm_residual_forward_rnd(...,
 *   round_bf16 = 1) that also writes the patterns of res_out, out2 and the
 *   input y into res16, out2_16 and y16 (each may be NULL); the second norm
 *   runs when out2 or out2_16 is given, and with out2 NULL only its
 *   patterns are written;
 * gt_rmsnorm_backward_b16, gt_rmsnorm_residual_backward_b16:
 *   gt_rmsnorm_backward and gt_rmsnorm_residual_backward reading x as bf16
 *   patterns.
 * Each is bit-identical to the unfused sequence (the _rnd form then
 * gt_bf16_pack; gt_bf16_unpack then the float32 form) for rows of up to
 * GT_RMS_B16_ROW_MAX (the backward widens a row on the stack and runs the
 * float32 row code on it); a wider row's backward reads the patterns in its
 * loops, within float rounding of that. The references are those sequences
 * of the references. */
#define GT_RMS_B16_ROW_MAX 8192
/* the same for the q/k norm with RoPE: gt_rmsnorm_rope_forward(...,
 * round_bf16 = 1) writing the patterns of out and the input x into out16
 * and x16 (each may be NULL); gt_rope_rmsnorm_backward reading x as bf16
 * patterns (head_dim is the row) */
void gt_rmsnorm_rope_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float eps, float w_offset);
void gt_rope_rmsnorm_backward_b16(float *dx, float *dw, float *dout, const uint16_t *x16, const float *rstd,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float w_offset);
void gt_rmsnorm_rope_forward_pack_ref(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                      const float *w, const int32_t *pos, const float *cos_tab,
                                      const float *sin_tab, int64_t ntok, int nheads, int head_dim, float eps,
                                      float w_offset);
void gt_rope_rmsnorm_backward_b16_ref(float *dx, float *dw, float *dout, const uint16_t *x16, const float *rstd,
                                      const float *w, const int32_t *pos, const float *cos_tab,
                                      const float *sin_tab, int64_t ntok, int nheads, int head_dim, float w_offset);
void gt_rmsnorm_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                             const float *w, int64_t rows, int dim, float eps, float w_offset);
void gt_rmsnorm_residual_forward_pack(float *res_out, uint16_t *res16, float *rstd, float *out2, uint16_t *out2_16,
                                      float *rstd2, const float *res, const float *y, uint16_t *y16, const float *w,
                                      const float *w2, int64_t rows, int dim, float eps, float w_offset);
void gt_rmsnorm_backward_b16(float *dx, float *dw, const float *dout, const uint16_t *x16, const float *rstd,
                             const float *w, int64_t rows, int dim, float w_offset);
void gt_rmsnorm_residual_backward_b16(float *dx, float *dw, const float *dres, const float *dout,
                                      const uint16_t *x16, const float *rstd, const float *w, int64_t rows, int dim,
                                      float w_offset, int accumulate);
void gt_rmsnorm_forward_pack_ref(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                 const float *w, int64_t rows, int dim, float eps, float w_offset);
void gt_rmsnorm_residual_forward_pack_ref(float *res_out, uint16_t *res16, float *rstd, float *out2,
                                          uint16_t *out2_16, float *rstd2, const float *res, const float *y,
                                          uint16_t *y16, const float *w, const float *w2, int64_t rows, int dim,
                                          float eps, float w_offset);
void gt_rmsnorm_backward_b16_ref(float *dx, float *dw, const float *dout, const uint16_t *x16, const float *rstd,
                                 const float *w, int64_t rows, int dim, float w_offset);
void gt_rmsnorm_residual_backward_b16_ref(float *dx, float *dw, const float *dres, const float *dout,
                                          const uint16_t *x16, const float *rstd, const float *w, int64_t rows,
                                          int dim, float w_offset, int accumulate);

/* ---- embedding lookup, scaled ----
 * out[i,:] = table[tok[i],:] * scale ; backward dtable[tok[i],:] += scale*dout[i,:]
 * (backward is deterministic: each thread owns a range of columns). */
void gt_embedding_forward(float *out, const int32_t *tok, const float *table,
                          int64_t n, int dim, float scale);
void gt_embedding_backward(float *dtable, const float *dout, const int32_t *tok,
                           int64_t n, int dim, float scale);
void gt_embedding_forward_ref(float *out, const int32_t *tok, const float *table,
                              int64_t n, int dim, float scale);
void gt_embedding_backward_ref(float *dtable, const float *dout, const int32_t *tok,
                               int64_t n, int dim, float scale);

/* ---- softmax cross-entropy over rows of logits [rows, V] ----
 * loss[r] = logsumexp(logits[r]) - logits[r, target[r]] (float32 math with a
 * float64-free max-subtracted sum); lse[r] saved. target[r] < 0 masks the row:
 * loss 0. Backward OVERWRITES dlogits (it may alias logits):
 * dlogits[r] = (softmax(logits[r]) - onehot(target[r])) * row_weight[r],
 * and 0 for masked rows. z > 0: each unmasked row's loss also holds the
 * z-loss z * lse[r]^2 (the forward leaves it to the caller), so the softmax
 * is scaled by 1 + 2 z lse[r]; z = 0 gives the bits without it. */
void gt_xent_forward(float *loss, float *lse, const float *logits,
                     const int32_t *target, int64_t rows, int64_t V);
void gt_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *target, const float *row_weight,
                      int64_t rows, int64_t V, float z);
/* gt_xent_backward with the gradient written as bf16 patterns, row r at
 * d16 + r * ld16, for bf16 products (which round it as they pack it): the
 * patterns of the float gradient. d16 may overlay the logits with ld16 =
 * 2 V (each row's patterns in the first half of its own logits). */
void gt_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse, const int32_t *target,
                          const float *row_weight, int64_t rows, int64_t V, float z);
void gt_xent_backward_b16_ref(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                              const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float z);
void gt_xent_forward_ref(float *loss, float *lse, const float *logits,
                         const int32_t *target, int64_t rows, int64_t V);
void gt_xent_backward_ref(float *dlogits, const float *logits, const float *lse,
                          const int32_t *target, const float *row_weight,
                          int64_t rows, int64_t V, float z);

/* ---- logit soft-cap: y = cap * tanh(x / cap), in place ----
 * backward in place: on entry dx holds dy, y is the forward output. */
void gt_softcap_forward(float *x, int64_t n, float cap);
void gt_softcap_backward(float *dx, const float *y, int64_t n, float cap);
void gt_softcap_forward_ref(float *x, int64_t n, float cap);
void gt_softcap_backward_ref(float *dx, const float *y, int64_t n, float cap);

/* ---- soft-cap fused with the cross-entropy (the head's logits tile) ----
 * Forward: logits = cap * tanh(logits / cap) in place, then loss and lse as
 * gt_xent_forward, row by row in one sweep. Backward: dlogits = d(xent) *
 * (1 - (y / cap)^2) with y the capped logits (the forward's output), in one
 * pass that may overwrite them (dlogits may alias logits): the unfused form
 * needs a copy of y; z is gt_xent_backward's z-loss weight (of the capped
 * logits' lse). Both give the bits of the unfused kernels
 * (gt_softcap_forward then gt_xent_forward; gt_xent_backward then
 * gt_softcap_backward). */
void gt_softcap_xent_forward(float *loss, float *lse, float *logits, const int32_t *target, int64_t rows, int64_t V,
                             float cap);
/* gt_softcap_xent_backward's gradient as bf16 patterns, as
 * gt_xent_backward_b16 */
void gt_softcap_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                                  const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float cap,
                                  float z);
void gt_softcap_xent_backward_b16_ref(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                                      const int32_t *target, const float *row_weight, int64_t rows, int64_t V,
                                      float cap, float z);
void gt_softcap_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *target,
                              const float *row_weight, int64_t rows, int64_t V, float cap, float z);
void gt_softcap_xent_forward_ref(float *loss, float *lse, float *logits, const int32_t *target, int64_t rows,
                                 int64_t V, float cap);
void gt_softcap_xent_backward_ref(float *dlogits, const float *logits, const float *lse, const int32_t *target,
                                  const float *row_weight, int64_t rows, int64_t V, float cap, float z);

/* ---- AdamW (optax.adamw semantics), fused, in place ----
 * g' = g * grad_scale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * mh = m / (1 - b1^t); vh = v / (1 - b2^t);
 * p -= lr * ( mh / (sqrt(vh + eps_root) + eps) + weight_decay * p ) */
typedef struct gt_adamw_hparams {
  float lr, b1, b2, eps, eps_root, weight_decay;
  int64_t t;         /* 1-based step count for bias correction */
  float grad_scale;  /* clipping factor applied to g (1 = none) */
} gt_adamw_hparams;
void gt_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     const gt_adamw_hparams *h);
void gt_adamw_update_ref(float *p, const float *g, float *m, float *v, int64_t n,
                         const gt_adamw_hparams *h);
/* The same step with m stored as bf16 bit patterns (mu_dtype=bfloat16): m
 * is expanded to float32 (exact), every operation above is the same float32
 * operation in the same order (so p and v get gt_adamw_update's bits for
 * the expanded m), the update uses the float32 m, and m is stored rounded
 * to nearest even (gt_f32_to_bf16, kernels/bf16.h). */
void gt_adamw_update_mu_bf16(float *p, const float *g, uint16_t *m, float *v, int64_t n,
                             const gt_adamw_hparams *h);
void gt_adamw_update_mu_bf16_ref(float *p, const float *g, uint16_t *m, float *v, int64_t n,
                                 const gt_adamw_hparams *h);

/* ---- reductions ----
 * Sum of squares and dot product accumulated in double with a fixed
 * partition (deterministic whatever the thread timing); sumsq serves the
 * global gradient norm, dot the gradient of a scalar factor. */
double gt_sumsq(const float *x, int64_t n);
double gt_sumsq_ref(const float *x, int64_t n);
double gt_dot(const float *a, const float *b, int64_t n);
double gt_dot_ref(const float *a, const float *b, int64_t n);

/* ---- multiply by one scalar (Gemma 4's layer_scalar) ----
 * out = s * x. Backward: dx += s * dout; *ds += sum(dout * x) (gt_dot, so
 * the same bits for any thread count); dx or ds may be NULL. */
void gt_scale_forward(float *out, const float *x, float s, int64_t n);
void gt_scale_backward(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n);
void gt_scale_forward_ref(float *out, const float *x, float s, int64_t n);
void gt_scale_backward_ref(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n);

/* ---- dropout on a row (LoRA's input dropout, model/lora.h) ----
 * Element c of a row whose key is `key` is kept when its draw u in [0, 1)
 * is at or above p: u is 2^-32 times the low (c even) or high (c odd) 32
 * bits of output c / 2 of the splitmix64 stream seeded with key; thresh is
 * gt_dropout_threshold(p) = ceil(p 2^32) (the draw compared as an integer:
 * the same decision). The same mask on
 * every ISA and for any chunking. gt_dropout_mask: keep[i] for columns
 * c0 + i; apply: y = x / (1 - p) where kept, else 0 (inv = 1 / (1 - p));
 * apply16: the same on bf16 patterns, rounded to bf16; undo: dx += g inv
 * where kept (the dropped input's gradient into the input's). */
uint64_t gt_dropout_threshold(double p);
void gt_dropout_mask(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, uint64_t thresh);
void gt_dropout_apply(float *y, const float *x, uint64_t key, int64_t n, uint64_t thresh, float inv);
void gt_dropout_apply16(uint16_t *y16, const uint16_t *x16, uint64_t key, int64_t n, uint64_t thresh, float inv);
void gt_dropout_undo(float *dx, const float *g, uint64_t key, int64_t n, uint64_t thresh, float inv);
void gt_dropout_mask_ref(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, double p);
void gt_dropout_apply_ref(float *y, const float *x, uint64_t key, int64_t n, double p, float inv);
void gt_dropout_apply16_ref(uint16_t *y16, const uint16_t *x16, uint64_t key, int64_t n, double p, float inv);
void gt_dropout_undo_ref(float *dx, const float *g, uint64_t key, int64_t n, double p, float inv);

#ifdef __cplusplus
}
#endif
#endif
