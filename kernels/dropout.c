/* Dropout on a row (LoRA's input dropout, model/lora.h). Element c of a
 * row is kept when the splitmix64 finaliser of key ^ (c * 0xD1B54A32
 * D192ED03) has its top 53 bits, a uniform draw u in [0, 1) times 2^53, at
 * or above the threshold gt_dropout_threshold(p) = ceil(p 2^53): exactly
 * u >= p, compared as integers so the loop has no float in it and
 * vectorises (the AVX-512 copy multiplies 8 lanes of 64 bits at once,
 * vpmullq). One draw per element, a pure function of (key, c): the mask
 * does not depend on the thread count, the chunking or the ISA. The rows
 * are drawn a chunk at a time into a byte mask on the stack, then applied
 * in a second loop that vectorises too (no FMA: the build passes
 * -ffp-contract=off). */
#include <math.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

/* columns drawn at a time */
#define GT__DROP_CHUNK 512

uint64_t gt_dropout_threshold(double p) {
  /* p 2^53 is exact (a power-of-two scaling) and at most 2^53 */
  return p <= 0.0 ? 0 : (uint64_t)ceil(p * 9007199254740992.0);
}

void gt_dropout_mask(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, uint64_t thresh) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    uint64_t z = key ^ ((uint64_t)(c0 + i) * 0xD1B54A32D192ED03ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    keep[i] = (uint8_t)((z >> 11) >= thresh);
  }
}

/* What a row's sweep does with its mask */
enum { GT__APPLY, GT__APPLY16, GT__UNDO };

/* One row in chunks: each chunk's mask drawn, then applied by mode's loop */
static void gt__drop_row(int mode, void *out, const void *in, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  uint8_t keep[GT__DROP_CHUNK];
  for (int64_t c0 = 0; c0 < n; c0 += GT__DROP_CHUNK) {
    const int64_t cn = n - c0 < GT__DROP_CHUNK ? n - c0 : GT__DROP_CHUNK;
    gt_dropout_mask(keep, key, c0, cn, thresh);
    if (mode == GT__APPLY) {
      float *y = (float *)out + c0;
      const float *x = (const float *)in + c0;
#pragma omp simd
      for (int64_t i = 0; i < cn; i++) y[i] = keep[i] ? x[i] * inv : 0.0f;
    } else if (mode == GT__APPLY16) {
      uint16_t *y16 = (uint16_t *)out + c0;
      const uint16_t *x16 = (const uint16_t *)in + c0;
#pragma omp simd
      for (int64_t i = 0; i < cn; i++) {
        const uint32_t u = (uint32_t)x16[i] << 16;
        float x, v;
        memcpy(&x, &u, 4);
        v = keep[i] ? x * inv : 0.0f;
        uint32_t b;
        memcpy(&b, &v, 4);
        y16[i] = (uint16_t)(gt__bf16_round_bits(b) >> 16);
      }
    } else {
      /* (a dropped element is left as it is: adding 0 would turn -0 into +0) */
      float *dx = (float *)out + c0;
      const float *g = (const float *)in + c0;
#pragma omp simd
      for (int64_t i = 0; i < cn; i++) dx[i] = keep[i] ? dx[i] + g[i] * inv : dx[i];
    }
  }
}

void gt_dropout_apply(float *y, const float *x, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  gt__drop_row(GT__APPLY, y, x, key, n, thresh, inv);
}

void gt_dropout_apply16(uint16_t *y16, const uint16_t *x16, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  gt__drop_row(GT__APPLY16, y16, x16, key, n, thresh, inv);
}

void gt_dropout_undo(float *dx, const float *g, uint64_t key, int64_t n, uint64_t thresh, float inv) {
  gt__drop_row(GT__UNDO, dx, g, key, n, thresh, inv);
}
