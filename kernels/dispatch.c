/* The public kernels of the files compiled three times (kernels/isa.h):
 * each calls its AVX-512, AVX2 or portable copy, as gt__kernels_path()
 * decided once for the process (docs/cpus.md). Compiled for baseline
 * x86-64: nothing here runs an instruction the CPU may lack. */
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"

#define GT__VARIANTS(fn) extern __typeof__(fn) fn##__avx512, fn##__avx2, fn##__portable;
#define GT__PICK(fn)                                                                          \
  (gt__kernels_path() == GT__PATH_AVX512 ? fn##__avx512                                     \
   : gt__kernels_path() == GT__PATH_AVX2 ? fn##__avx2                                       \
                                         : fn##__portable)
GT__VARIANTS(gt_sgemm)
GT__VARIANTS(gt_fma_peak_gflops)
GT__VARIANTS(gt__sgemm_kernel_gflops)
GT__VARIANTS(gt_bf16_peak_gflops)
GT__VARIANTS(gt_rmsnorm_forward)
GT__VARIANTS(gt_rmsnorm_backward)
GT__VARIANTS(gt_rmsnorm_residual_forward)
GT__VARIANTS(gt_rmsnorm_residual_backward)
GT__VARIANTS(gt_rope_table_fill)
GT__VARIANTS(gt_rope_forward)
GT__VARIANTS(gt_rope_backward)
GT__VARIANTS(gt_attention_forward)
GT__VARIANTS(gt_attention_backward)
GT__VARIANTS(gt_attention_decode)
GT__VARIANTS(gt_geglu_forward)
GT__VARIANTS(gt_geglu_backward)
GT__VARIANTS(gt_geglu_backward_write)
GT__VARIANTS(gt_rmsnorm_forward_rnd)
GT__VARIANTS(gt_rmsnorm_rope_forward)
GT__VARIANTS(gt_rope_rmsnorm_backward)
GT__VARIANTS(gt_rmsnorm_residual_forward_rnd)
GT__VARIANTS(gt_geglu_forward_rnd)
GT__VARIANTS(gt_geglu_forward_pack)
GT__VARIANTS(gt_geglu_backward_write_b16)
GT__VARIANTS(gt_geglu_forward_b16)
GT__VARIANTS(gt_geglu_backward_b16_to_b16)
GT__VARIANTS(gt_rmsnorm_forward_pack)
GT__VARIANTS(gt_rmsnorm_residual_forward_pack)
GT__VARIANTS(gt_rmsnorm_backward_b16)
GT__VARIANTS(gt_rmsnorm_residual_backward_b16)
GT__VARIANTS(gt_rmsnorm_rope_forward_pack)
GT__VARIANTS(gt_rope_rmsnorm_backward_b16)
GT__VARIANTS(gt_embedding_forward)
GT__VARIANTS(gt_embedding_backward)
GT__VARIANTS(gt_xent_forward)
GT__VARIANTS(gt_xent_backward)
GT__VARIANTS(gt_xent_backward_b16)
GT__VARIANTS(gt_softcap_xent_backward_b16)
GT__VARIANTS(gt_softcap_forward)
GT__VARIANTS(gt_softcap_backward)
GT__VARIANTS(gt_softcap_xent_forward)
GT__VARIANTS(gt_softcap_xent_backward)
GT__VARIANTS(gt_adamw_update)
GT__VARIANTS(gt_adamw_update_mu_bf16)
GT__VARIANTS(gt_sumsq)
GT__VARIANTS(gt_dot)
GT__VARIANTS(gt_scale_forward)
GT__VARIANTS(gt_scale_backward)
GT__VARIANTS(gt_dropout_threshold)
GT__VARIANTS(gt_dropout_mask)
GT__VARIANTS(gt_dropout_apply)
GT__VARIANTS(gt_dropout_apply16)
GT__VARIANTS(gt_dropout_undo)
GT__VARIANTS(gt_bf16_round)
GT__VARIANTS(gt_bf16_pack)
GT__VARIANTS(gt_bf16_round_copy)
GT__VARIANTS(gt_bf16_unpack)
GT__VARIANTS(gt_bf16_round_rows)
GT__VARIANTS(gt_bf16_pack_rows)

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  GT__PICK(gt_sgemm)(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
double gt_fma_peak_gflops(int threads, double seconds) {
  return GT__PICK(gt_fma_peak_gflops)(threads, seconds);
}
double gt__sgemm_kernel_gflops(double seconds) {
  return GT__PICK(gt__sgemm_kernel_gflops)(seconds);
}
double gt_bf16_peak_gflops(int threads, double seconds) {
  return GT__PICK(gt_bf16_peak_gflops)(threads, seconds);
}
void gt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps, float w_offset) {
  GT__PICK(gt_rmsnorm_forward)(out, rstd, x, w, rows, dim, eps, w_offset);
}
void gt_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w, int64_t rows, int dim, float w_offset) {
  GT__PICK(gt_rmsnorm_backward)(dx, dw, dout, x, rstd, w, rows, dim, w_offset);
}
void gt_rmsnorm_residual_forward(float *res_out, float *rstd, float *out2, float *rstd2, const float *res, const float *y, const float *w, const float *w2, int64_t rows, int dim, float eps, float w_offset) {
  GT__PICK(gt_rmsnorm_residual_forward)(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset);
}
void gt_rmsnorm_residual_backward(float *dx, float *dw, const float *dres, const float *dout, const float *x, const float *rstd, const float *w, int64_t rows, int dim, float w_offset, int accumulate) {
  GT__PICK(gt_rmsnorm_residual_backward)(dx, dw, dres, dout, x, rstd, w, rows, dim, w_offset, accumulate);
}
void gt_rope_table_fill(float *cos_tab, float *sin_tab, int max_pos, int head_dim, double base, double scale, double fraction) {
  GT__PICK(gt_rope_table_fill)(cos_tab, sin_tab, max_pos, head_dim, base, scale, fraction);
}
void gt_rope_forward(float *x, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  GT__PICK(gt_rope_forward)(x, pos, cos_tab, sin_tab, ntok, nheads, head_dim);
}
void gt_rope_backward(float *dx, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  GT__PICK(gt_rope_backward)(dx, pos, cos_tab, sin_tab, ntok, nheads, head_dim);
}
int gt_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *seg, const gt_attn_dims *d) {
  return GT__PICK(gt_attention_forward)(out, lse, q, k, v, seg, d);
}
int gt_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, const int32_t *seg, const gt_attn_dims *d) {
  return GT__PICK(gt_attention_backward)(dq, dk, dv, dout, out, lse, q, k, v, seg, d);
}
void gt_attention_decode(float *out, const float *q, const float *kc, const float *vc, const gt_attn_cache_dims *d) {
  GT__PICK(gt_attention_decode)(out, q, kc, vc, d);
}
void gt_geglu_forward(float *out, const float *gate, const float *up, int64_t n) {
  GT__PICK(gt_geglu_forward)(out, gate, up, n);
}
void gt_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
  GT__PICK(gt_geglu_backward)(dgate, dup, dout, gate, up, n);
}
void gt_geglu_backward_write(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
  GT__PICK(gt_geglu_backward_write)(dgate, dup, dout, gate, up, n);
}
void gt_rmsnorm_forward_rnd(float *out, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps, float w_offset, int round_bf16) {
  GT__PICK(gt_rmsnorm_forward_rnd)(out, rstd, x, w, rows, dim, eps, w_offset, round_bf16);
}
void gt_rmsnorm_rope_forward(float *out, float *rstd, const float *x, const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim, float eps, float w_offset, int round_bf16) {
  GT__PICK(gt_rmsnorm_rope_forward)(out, rstd, x, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, eps, w_offset, round_bf16);
}
void gt_rope_rmsnorm_backward(float *dx, float *dw, float *dout, const float *x, const float *rstd, const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok, int nheads, int head_dim, float w_offset) {
  GT__PICK(gt_rope_rmsnorm_backward)(dx, dw, dout, x, rstd, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, w_offset);
}
void gt_rmsnorm_residual_forward_rnd(float *res_out, float *rstd, float *out2, float *rstd2, const float *res, const float *y, const float *w, const float *w2, int64_t rows, int dim, float eps, float w_offset, int round_bf16) {
  GT__PICK(gt_rmsnorm_residual_forward_rnd)(res_out, rstd, out2, rstd2, res, y, w, w2, rows, dim, eps, w_offset, round_bf16);
}
void gt_geglu_forward_rnd(float *out, const float *gate, const float *up, int64_t n, int round_bf16) {
  GT__PICK(gt_geglu_forward_rnd)(out, gate, up, n, round_bf16);
}
void gt_geglu_forward_pack(float *out, uint16_t *out16, uint16_t *gate16, uint16_t *up16, const float *gate,
                           const float *up, int64_t n) {
  GT__PICK(gt_geglu_forward_pack)(out, out16, gate16, up16,
                                                                                         gate, up, n);
}
void gt_geglu_backward_write_b16(float *dgate, float *dup, const float *dout, const uint16_t *gate16,
                                 const uint16_t *up16, int64_t n) {
  GT__PICK(gt_geglu_backward_write_b16)(dgate, dup, dout, gate16, up16, n);
}
void gt_geglu_backward_b16_to_b16(uint16_t *dgate16, uint16_t *dup16, const float *dout, const uint16_t *gate16,
                                  const uint16_t *up16, int64_t n) {
  GT__PICK(gt_geglu_backward_b16_to_b16)(dgate16, dup16, dout, gate16, up16, n);
}
void gt_geglu_forward_b16(float *out, uint16_t *out16, const uint16_t *gate16, const uint16_t *up16, int64_t n) {
  GT__PICK(gt_geglu_forward_b16)(out, out16, gate16, up16, n);
}
void gt_rmsnorm_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                             const float *w, int64_t rows, int dim, float eps, float w_offset) {
  GT__PICK(gt_rmsnorm_forward_pack)(out, out16, rstd, x, x16, w, rows, dim, eps, w_offset);
}
void gt_rmsnorm_residual_forward_pack(float *res_out, uint16_t *res16, float *rstd, float *out2, uint16_t *out2_16,
                                      float *rstd2, const float *res, const float *y, uint16_t *y16, const float *w,
                                      const float *w2, int64_t rows, int dim, float eps, float w_offset) {
  GT__PICK(gt_rmsnorm_residual_forward_pack)(
      res_out, res16, rstd, out2, out2_16, rstd2, res, y, y16, w, w2, rows, dim, eps, w_offset);
}
void gt_rmsnorm_backward_b16(float *dx, float *dw, const float *dout, const uint16_t *x16, const float *rstd,
                             const float *w, int64_t rows, int dim, float w_offset) {
  GT__PICK(gt_rmsnorm_backward_b16)(dx, dw, dout, x16, rstd, w, rows, dim, w_offset);
}
void gt_rmsnorm_residual_backward_b16(float *dx, float *dw, const float *dres, const float *dout,
                                      const uint16_t *x16, const float *rstd, const float *w, int64_t rows, int dim,
                                      float w_offset, int accumulate) {
  GT__PICK(gt_rmsnorm_residual_backward_b16)(
      dx, dw, dres, dout, x16, rstd, w, rows, dim, w_offset, accumulate);
}
void gt_rmsnorm_rope_forward_pack(float *out, uint16_t *out16, float *rstd, const float *x, uint16_t *x16,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float eps, float w_offset) {
  GT__PICK(gt_rmsnorm_rope_forward_pack)(
      out, out16, rstd, x, x16, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, eps, w_offset);
}
void gt_rope_rmsnorm_backward_b16(float *dx, float *dw, float *dout, const uint16_t *x16, const float *rstd,
                                  const float *w, const int32_t *pos, const float *cos_tab, const float *sin_tab,
                                  int64_t ntok, int nheads, int head_dim, float w_offset) {
  GT__PICK(gt_rope_rmsnorm_backward_b16)(
      dx, dw, dout, x16, rstd, w, pos, cos_tab, sin_tab, ntok, nheads, head_dim, w_offset);
}
void gt_embedding_forward(float *out, const int32_t *tok, const float *table, int64_t n, int dim, float scale) {
  GT__PICK(gt_embedding_forward)(out, tok, table, n, dim, scale);
}
void gt_embedding_backward(float *dtable, const float *dout, const int32_t *tok, int64_t n, int dim, float scale) {
  GT__PICK(gt_embedding_backward)(dtable, dout, tok, n, dim, scale);
}
void gt_xent_forward(float *loss, float *lse, const float *logits, const int32_t *target, int64_t rows, int64_t V) {
  GT__PICK(gt_xent_forward)(loss, lse, logits, target, rows, V);
}
void gt_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse, const int32_t *target,
                          const float *row_weight, int64_t rows, int64_t V, float z) {
  GT__PICK(gt_xent_backward_b16)(d16, ld16, logits, lse, target,
                                                                                        row_weight, rows, V, z);
}
void gt_softcap_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                                  const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float cap,
                                  float z) {
  GT__PICK(gt_softcap_xent_backward_b16)(
      d16, ld16, logits, lse, target, row_weight, rows, V, cap, z);
}
void gt_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float z) {
  GT__PICK(gt_xent_backward)(dlogits, logits, lse, target, row_weight, rows, V, z);
}
void gt_softcap_forward(float *x, int64_t n, float cap) {
  GT__PICK(gt_softcap_forward)(x, n, cap);
}
void gt_softcap_backward(float *dx, const float *y, int64_t n, float cap) {
  GT__PICK(gt_softcap_backward)(dx, y, n, cap);
}
void gt_softcap_xent_forward(float *loss, float *lse, float *logits, const int32_t *target, int64_t rows, int64_t V, float cap) {
  GT__PICK(gt_softcap_xent_forward)(loss, lse, logits, target, rows, V, cap);
}
void gt_softcap_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float cap, float z) {
  GT__PICK(gt_softcap_xent_backward)(dlogits, logits, lse, target, row_weight, rows, V, cap, z);
}
void gt_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, const gt_adamw_hparams *h) {
  GT__PICK(gt_adamw_update)(p, g, m, v, n, h);
}
void gt_adamw_update_mu_bf16(float *p, const float *g, uint16_t *m, float *v, int64_t n, const gt_adamw_hparams *h) {
  GT__PICK(gt_adamw_update_mu_bf16)(p, g, m, v, n, h);
}
double gt_sumsq(const float *x, int64_t n) {
  return GT__PICK(gt_sumsq)(x, n);
}
double gt_dot(const float *a, const float *b, int64_t n) {
  return GT__PICK(gt_dot)(a, b, n);
}
void gt_scale_forward(float *out, const float *x, float s, int64_t n) {
  GT__PICK(gt_scale_forward)(out, x, s, n);
}
void gt_scale_backward(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n) {
  GT__PICK(gt_scale_backward)(dx, ds, dout, x, s, n);
}
uint64_t gt_dropout_threshold(double p) {
  return GT__PICK(gt_dropout_threshold)(p);
}
void gt_dropout_mask(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, uint64_t thresh) {
  GT__PICK(gt_dropout_mask)(keep, key, c0, n, thresh);
}
void gt_dropout_apply(float *y, const float *x, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  GT__PICK(gt_dropout_apply)(y, x, key, n, thresh, inv);
}
void gt_dropout_apply16(uint16_t *y16, const uint16_t *x16, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  GT__PICK(gt_dropout_apply16)(y16, x16, key, n, thresh, inv);
}
void gt_dropout_undo(float *dx, const float *g, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  GT__PICK(gt_dropout_undo)(dx, g, key, n, thresh, inv);
}
void gt_bf16_round(float *x, int64_t n) {
  GT__PICK(gt_bf16_round)(x, n);
}
void gt_bf16_round_copy(float *dst, const float *src, int64_t n) {
  GT__PICK(gt_bf16_round_copy)(dst, src, n);
}
void gt_bf16_pack(uint16_t *dst, const float *src, int64_t n) {
  GT__PICK(gt_bf16_pack)(dst, src, n);
}
void gt_bf16_unpack(float *dst, const uint16_t *src, int64_t n) {
  GT__PICK(gt_bf16_unpack)(dst, src, n);
}
void gt_bf16_round_rows(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
  GT__PICK(gt_bf16_round_rows)(dst, ldd, src, lds, rows, cols);
}
void gt_bf16_pack_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
  GT__PICK(gt_bf16_pack_rows)(dst, ldd, src, lds, rows, cols);
}
