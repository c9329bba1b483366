/* Dropout on a row (LoRA's input dropout, model/lora.h). A row's draws
 * are the splitmix64 stream seeded with its key (base/common.h): output j,
 * mix(key + (j + 1) 0x9E3779B97F4A7C15), gives column 2j its low 32 bits
 * and column 2j + 1 its high 32 bits, each a uniform draw u in [0, 1) times
 * 2^32. Element c is kept when that draw is at or above the threshold
 * gt_dropout_threshold(p) = ceil(p 2^32): exactly u >= p, compared as
 * integers so the loop has no float in it and vectorises. One 64-bit hash
 * serves two elements (two vpmullq, where a draw per element of 53 bits
 * took three each), and the stream's counter is an induction variable, not
 * a product. The mask is a pure function of (key, c): it does not depend on
 * the thread count, the chunking or the ISA. The rows are drawn a chunk at
 * a time into a byte mask on the stack, then applied in a second loop that
 * vectorises too (no FMA: the build passes -ffp-contract=off). */
#include <math.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

/* columns drawn at a time (even: a chunk starts on a pair) */
#define GT__DROP_CHUNK 512

uint64_t gt_dropout_threshold(double p) {
  /* p 2^32 is exact (a power-of-two scaling) and at most 2^32: p = 1 keeps
   * nothing, as no 32-bit draw reaches 2^32 */
  return p <= 0.0 ? 0 : (uint64_t)ceil(p * 4294967296.0);
}

/* splitmix64's output j of the stream seeded with key */
static inline uint64_t gt__drop_draws(uint64_t key, uint64_t j) {
  uint64_t z = key + (j + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A chunk's draws: the stream's outputs as 64-bit words, read back as the
 * 32-bit halves in column order (x86 is little-endian: word j's low half
 * is column 2j, its high half column 2j + 1). The two loops vectorise
 * without shuffles: the hash on 8 words, the comparison on 16 halves. */
typedef union gt__draws {
  uint64_t q[GT__DROP_CHUNK / 2 + 1];
  uint32_t d[GT__DROP_CHUNK + 2];
} gt__draws;

void gt_dropout_mask(uint8_t *keep, uint64_t key, int64_t c0, int64_t n, uint64_t thresh) {
  if (thresh > 0xFFFFFFFFull) { /* p = 1: no 32-bit draw reaches 2^32 */
    if (n > 0) memset(keep, 0, (size_t)n);
    return;
  }
  const uint32_t t = (uint32_t)thresh;
  gt__draws w;
  for (int64_t s = 0; s < n; s += GT__DROP_CHUNK) {
    const int64_t cn = n - s < GT__DROP_CHUNK ? n - s : GT__DROP_CHUNK, c = c0 + s;
    const uint64_t j0 = (uint64_t)c >> 1;
    const int off = (int)(c & 1), np = (int)((off + cn + 1) / 2);
#pragma omp simd
    for (int j = 0; j < np; j++) w.q[j] = gt__drop_draws(key, j0 + (uint64_t)j);
    uint8_t *k = keep + s;
#pragma omp simd
    for (int64_t i = 0; i < cn; i++) k[i] = (uint8_t)(w.d[off + i] >= t);
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
