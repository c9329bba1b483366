/* Scalar GeGLU reference: the literal tanh formula in float32. */
#include <string.h>
#include <math.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

#define GT__K0 0.7978845608028654f /* sqrt(2/pi) */
#define GT__K1 0.044715f

void gt_geglu_forward_ref(float *out, const float *gate, const float *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float x = gate[i];
    const float u = GT__K0 * (x + GT__K1 * (x * x * x));
    out[i] = (0.5f * x * (1.0f + tanhf(u))) * up[i];
  }
}

void gt_geglu_backward_ref(float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float x = gate[i];
    const float u = GT__K0 * (x + GT__K1 * (x * x * x));
    const float t = tanhf(u);
    const float gelu = 0.5f * x * (1.0f + t);
    const float dgelu = 0.5f * (1.0f + t) +
                        0.5f * x * (1.0f - t * t) * GT__K0 * (1.0f + 3.0f * GT__K1 * x * x);
    if (dgate) dgate[i] += dout[i] * up[i] * dgelu;
    if (dup) dup[i] += dout[i] * gelu;
  }
}

/* the write variant: the add variant on a zeroed destination */
void gt_geglu_backward_write_ref(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                 int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dgate) dgate[i] = 0.0f;
    if (dup) dup[i] = 0.0f;
  }
  gt_geglu_backward_ref(dgate, dup, dout, gate, up, n);
}

/* the fused sweeps' references: the unfused sequences of the references,
 * a chunk at a time through the stack */
#define GT__REF_CHUNK 256

void gt_geglu_forward_pack_ref(float *out, uint16_t *out16, uint16_t *gate16, uint16_t *up16, const float *gate,
                               const float *up, int64_t n) {
  gt_geglu_forward_rnd_ref(out, gate, up, n, 1);
  if (out16) gt_bf16_pack_ref(out16, out, n);
  if (gate16) gt_bf16_pack_ref(gate16, gate, n);
  if (up16) gt_bf16_pack_ref(up16, up, n);
}

void gt_geglu_forward_b16_ref(float *out, uint16_t *out16, const uint16_t *gate16, const uint16_t *up16,
                              int64_t n) {
  float g[GT__REF_CHUNK], u[GT__REF_CHUNK], o[GT__REF_CHUNK];
  for (int64_t c = 0; c < n; c += GT__REF_CHUNK) {
    int64_t k = n - c < GT__REF_CHUNK ? n - c : GT__REF_CHUNK;
    gt_bf16_unpack_ref(g, gate16 + c, k);
    gt_bf16_unpack_ref(u, up16 + c, k);
    gt_geglu_forward_rnd_ref(o, g, u, k, 1);
    if (out) memcpy(out + c, o, (size_t)k * sizeof(float));
    if (out16) gt_bf16_pack_ref(out16 + c, o, k);
  }
}

void gt_geglu_backward_write_b16_ref(float *dgate, float *dup, const float *dout, const uint16_t *gate16,
                                     const uint16_t *up16, int64_t n) {
  float g[GT__REF_CHUNK], u[GT__REF_CHUNK];
  for (int64_t c = 0; c < n; c += GT__REF_CHUNK) {
    int64_t k = n - c < GT__REF_CHUNK ? n - c : GT__REF_CHUNK;
    gt_bf16_unpack_ref(g, gate16 + c, k);
    gt_bf16_unpack_ref(u, up16 + c, k);
    gt_geglu_backward_write_ref(dgate ? dgate + c : NULL, dup ? dup + c : NULL, dout + c, g, u, k);
  }
}

void gt_geglu_backward_b16_to_b16_ref(uint16_t *dgate16, uint16_t *dup16, const float *dout, const uint16_t *gate16,
                                      const uint16_t *up16, int64_t n) {
  float g[GT__REF_CHUNK], u[GT__REF_CHUNK];
  for (int64_t c = 0; c < n; c += GT__REF_CHUNK) {
    int64_t k = n - c < GT__REF_CHUNK ? n - c : GT__REF_CHUNK;
    gt_geglu_backward_write_b16_ref(g, u, dout + c, gate16 + c, up16 + c, k);
    gt_bf16_pack_ref(dgate16 + c, g, k);
    gt_bf16_pack_ref(dup16 + c, u, k);
  }
}
