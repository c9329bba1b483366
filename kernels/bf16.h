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

static inline uint16_t gt_f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
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
/* dst[i] = bf16(src[i]) (round to nearest even) */
void gt_bf16_pack(uint16_t *dst, const float *src, int64_t n);
/* dst[i] = float(src[i]) (exact) */
void gt_bf16_unpack(float *dst, const uint16_t *src, int64_t n);

/* scalar references (tests) */
void gt_bf16_round_ref(float *x, int64_t n);
void gt_bf16_pack_ref(uint16_t *dst, const float *src, int64_t n);
void gt_bf16_unpack_ref(float *dst, const uint16_t *src, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
