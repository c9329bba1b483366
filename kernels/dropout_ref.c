/* Scalar reference of the dropout kernels: the draw as a double in [0, 1)
 * compared with p, one element at a time, then applied to it. */
#include "base/common.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

/* the draw of column c: output c / 2 of the splitmix64 stream seeded with
 * key (base/common.h: each output adds the increment, then mixes), its low
 * 32 bits for an even c, its high 32 bits for an odd one */
static int gt__keep_ref(uint64_t key, int64_t c, double p) {
  uint64_t state = key + (uint64_t)(c / 2) * 0x9E3779B97F4A7C15ull;
  const uint64_t v = gt_splitmix64(&state);
  const uint32_t u = (uint32_t)(c % 2 ? v >> 32 : v);
  return (double)u * (1.0 / 4294967296.0) >= p;
}

void gt_dropout_mask_ref(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, double p) {
  for (int64_t i = 0; i < n; i++) keep[i] = (uint8_t)gt__keep_ref(key, c0 + i, p);
}

void gt_dropout_apply_ref(float *y, const float *x, uint64_t key, int64_t n, double p, float inv) {
  for (int64_t c = 0; c < n; c++) y[c] = gt__keep_ref(key, c, p) ? x[c] * inv : 0.0f;
}

void gt_dropout_apply16_ref(uint16_t *y16, const uint16_t *x16, uint64_t key, int64_t n, double p, float inv) {
  for (int64_t c = 0; c < n; c++) y16[c] = gt_f32_to_bf16(gt__keep_ref(key, c, p) ? gt_bf16_to_f32(x16[c]) * inv : 0.0f);
}

void gt_dropout_undo_ref(float *dx, const float *g, uint64_t key, int64_t n, double p, float inv) {
  for (int64_t c = 0; c < n; c++)
    if (gt__keep_ref(key, c, p)) dx[c] += g[c] * inv;
}
