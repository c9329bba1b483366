/* GeGLU: out = gelu_tanh(gate) * up.
 *
 * The fast version uses 0.5 (1 + tanh u) = sigmoid(2u), so gelu = x / (1 +
 * e^(-2u)): one vectorizable exp and no cancellation for negative x, where
 * 1 + tanh(u) loses all its bits in float. The reference keeps the literal
 * formula; the two agree to a few 1e-7 absolute and the fast one is closer to
 * the exact value. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16_row.h"
#include "kernels/kernels.h"
#include "simd_exp.h"

#define GT__PAR_MIN 32768
#define GT__K0 0.7978845608028654f /* sqrt(2/pi) */
#define GT__K1 0.044715f

/* One element of the forward, shared by both forms below so that they give
 * the same bits. */
static inline __attribute__((always_inline)) float gt__geglu1(float x, float up) {
  const float u = GT__K0 * (x + GT__K1 * (x * x * x));
  const float s = 1.0f / (1.0f + gt__expf(-2.0f * u));
  return (x * s) * up;
}

typedef struct gt__geglu_args {
  float *out;
  const float *gate, *up;
  int round_bf16;
  uint16_t *out16, *gate16, *up16; /* gt_geglu_forward_pack's (NULL: none) */
  const uint16_t *gin16, *uin16;    /* gt_geglu_forward_b16's inputs (gate and up NULL) */
} gt__geglu_args;


/* Rounded to bf16 (gt_geglu_forward_rnd, gt_geglu_forward_pack): each chunk
 * of 512 computed, then the copies asked for (if any) packed from it and
 * its inputs while they are in L1 */
#define GT__PACK_CHUNK 512
static void gt__geglu_fwd_rnd_part(const gt__geglu_args *a, int64_t i0, int64_t i1) {
  if (a->gin16) {
    /* the inputs as bf16 patterns, widened as they are loaded (exact):
     * gt__geglu1 on the same floats, so the bits of the float inputs' loop;
     * the copy is the rounded value's top half, stored in the same loop */
    const uint16_t *g16 = a->gin16, *u16 = a->uin16;
    float *out = a->out;
    uint16_t *o16 = a->out16;
    if (out && o16) {
#pragma omp simd
      for (int64_t i = i0; i < i1; i++) {
        out[i] = gt__bf16_round1_nb(gt__geglu1(gt_bf16_to_f32(g16[i]), gt_bf16_to_f32(u16[i])));
        o16[i] = gt__bf16_pattern_nb(out[i]);
      }
    } else if (out) {
#pragma omp simd
      for (int64_t i = i0; i < i1; i++)
        out[i] = gt__bf16_round1_nb(gt__geglu1(gt_bf16_to_f32(g16[i]), gt_bf16_to_f32(u16[i])));
    } else if (o16) {
#pragma omp simd
      for (int64_t i = i0; i < i1; i++)
        o16[i] = gt__bf16_pattern_nb(gt__geglu1(gt_bf16_to_f32(g16[i]), gt_bf16_to_f32(u16[i])));
    }
    return;
  }
  for (int64_t c = i0; c < i1; c += GT__PACK_CHUNK) {
    const int64_t e = c + GT__PACK_CHUNK < i1 ? c + GT__PACK_CHUNK : i1;
    float *out = a->out;
    const float *gate = a->gate, *up = a->up;
#pragma omp simd
    for (int64_t i = c; i < e; i++) out[i] = gt__bf16_round1_nb(gt__geglu1(gate[i], up[i]));
    if (a->out16) gt__bf16_pack_row(a->out16 + c, out + c, e - c);
    if (a->gate16) gt__bf16_pack_row(a->gate16 + c, gate + c, e - c);
    if (a->up16) gt__bf16_pack_row(a->up16 + c, up + c, e - c);
  }
}

static void gt__geglu_fwd_part(void *p, int64_t i0, int64_t i1) {
  const gt__geglu_args *a = p;
  float *out = a->out;
  const float *gate = a->gate, *up = a->up;
  if (a->round_bf16) {
    gt__geglu_fwd_rnd_part(a, i0, i1);
  } else {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) out[i] = gt__geglu1(gate[i], up[i]);
  }
}

void gt_geglu_forward(float *out, const float *gate, const float *up, int64_t n) {
  gt__geglu_args a = {out, gate, up, 0, NULL, NULL, NULL, NULL, NULL};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* dtype=bfloat16: each value is rounded in the loop that computes it,
 * instead of in a second pass over memory (bf16_row.h; the same bits). */
void gt_geglu_forward_rnd(float *out, const float *gate, const float *up, int64_t n, int round_bf16) {
  gt__geglu_args a = {out, gate, up, round_bf16 != 0, NULL, NULL, NULL, NULL, NULL};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* The saved copies written by the sweep that reads and writes the values
 * anyway, instead of by a gt_bf16_pack pass over each afterwards, which
 * would read them back from memory. */
void gt_geglu_forward_pack(float *out, uint16_t *out16, uint16_t *gate16, uint16_t *up16, const float *gate,
                           const float *up, int64_t n) {
  gt__geglu_args a = {out, gate, up, 1, out16, gate16, up16, NULL, NULL};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* gate and up written only as bf16 by their products (gt_bgemm_c16): read
 * at 2 bytes an element, where the float32 sweep reads 4 */
void gt_geglu_forward_b16(float *out, uint16_t *out16, const uint16_t *gate16, const uint16_t *up16, int64_t n) {
  gt__geglu_args a = {out, NULL, NULL, 1, out16, NULL, NULL, gate16, up16};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* d gelu/dx = s + x * 2 s (1 - s) * K0 (1 + 3 K1 x^2) with s = sigmoid(2u).
 * 1 - s is formed as e * s (e = e^(-2u)) to avoid cancellation; e is capped
 * so that e * s never becomes inf * 0 (the capped terms are below 1e-34).
 * want_*, set, in16 (gate and up read from gate16 and up16) and to16 (the
 * gradients written as bf16 patterns to dgate16 and dup16) are constants
 * at each call site, so every variant is a branch-free vector loop. */
static inline __attribute__((always_inline)) void
gt__geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
              const float *up, const uint16_t *gate16, const uint16_t *up16, int64_t i0, int64_t i1,
              const int want_gate, const int want_up, const int set, uint16_t *dgate16, uint16_t *dup16,
              const int to16, const int in16) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    const float x = in16 ? gt_bf16_to_f32(gate16[i]) : gate[i];
    const float x2 = x * x;
    const float u = GT__K0 * (x + GT__K1 * (x2 * x));
    float a = -2.0f * u;
    a = a > 80.0f ? 80.0f : a;
    const float e = gt__expf(a);
    const float s = 1.0f / (1.0f + e);
    if (want_gate) {
      const float dg = s + 2.0f * x * s * (e * s) * GT__K0 * (1.0f + 3.0f * GT__K1 * x2);
      const float v = dout[i] * (in16 ? gt_bf16_to_f32(up16[i]) : up[i]) * dg;
      if (to16)
        dgate16[i] = gt__bf16_pattern_nb(v);
      else if (set)
        dgate[i] = v;
      else
        dgate[i] += v;
    }
    if (want_up) {
      const float v = dout[i] * (x * s);
      if (to16)
        dup16[i] = gt__bf16_pattern_nb(v);
      else if (set)
        dup[i] = v;
      else
        dup[i] += v;
    }
  }
}

typedef struct gt__geglu_bwd_args {
  float *dgate, *dup;
  const float *dout, *gate, *up;
  const uint16_t *gate16, *up16; /* gt_geglu_backward_write_b16's inputs (else NULL) */
  int64_t n;
  int set;
  uint16_t *dgate16, *dup16; /* gt_geglu_backward_b16_to_b16's outputs (then both, with gate16 and up16) */
} gt__geglu_bwd_args;

/* the branch-free variants of one input type (G, U: the inputs) and one
 * SET: which gradients are wanted */
#define GT__GEGLU_BWD_WANTS(G, U, G16, U16, SET, IN16)                                     \
  do {                                                                                     \
    if (dgate && dup)                                                                      \
      gt__geglu_bwd(dgate, dup, dout, G, U, G16, U16, i0, i1, 1, 1, SET, NULL, NULL, 0, IN16); \
    else if (dgate)                                                                        \
      gt__geglu_bwd(dgate, dup, dout, G, U, G16, U16, i0, i1, 1, 0, SET, NULL, NULL, 0, IN16); \
    else                                                                                   \
      gt__geglu_bwd(dgate, dup, dout, G, U, G16, U16, i0, i1, 0, 1, SET, NULL, NULL, 0, IN16); \
  } while (0)
#define GT__GEGLU_BWD_VARIANTS(G, U, G16, U16, IN16) \
  do {                                               \
    if (a->set)                                      \
      GT__GEGLU_BWD_WANTS(G, U, G16, U16, 1, IN16);  \
    else                                             \
      GT__GEGLU_BWD_WANTS(G, U, G16, U16, 0, IN16);  \
  } while (0)

/* Member t of nt: aligned blocks of one cache line's elements (16 floats,
 * 32 patterns), so that two members never write one line. */
static void gt__geglu_bwd_member(void *p, int t, int nt) {
  const gt__geglu_bwd_args *a = p;
  float *dgate = a->dgate, *dup = a->dup;
  const float *dout = a->dout;
  int64_t i0, i1;
  gt_team_split_blocks(a->n, a->dgate16 ? 32 : 16, t, nt, &i0, &i1);
  if (a->dgate16)
    gt__geglu_bwd(NULL, NULL, dout, NULL, NULL, a->gate16, a->up16, i0, i1, 1, 1, 1, a->dgate16, a->dup16, 1, 1);
  else if (a->gate16)
    GT__GEGLU_BWD_VARIANTS((const float *)NULL, (const float *)NULL, a->gate16, a->up16, 1);
  else
    GT__GEGLU_BWD_VARIANTS(a->gate, a->up, (const uint16_t *)NULL, (const uint16_t *)NULL, 0);
}

/* set: overwrite the gradients instead of adding (a destination that was not
 * zeroed); the value written is the one that would have been added to 0. */
static void gt__geglu_backward(gt__geglu_bwd_args *a) {
  if (a->n <= 0 || (!a->dgate && !a->dup)) return;
  gt_team_par(a->n >= GT__PAR_MIN, gt__geglu_bwd_member, a);
}

void gt_geglu_backward(float *dgate, float *dup, const float *dout,
                       const float *gate, const float *up, int64_t n) {
  gt__geglu_bwd_args a = {dgate, dup, dout, gate, up, NULL, NULL, n, 0, NULL, NULL};
  gt__geglu_backward(&a);
}

void gt_geglu_backward_write(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                             int64_t n) {
  gt__geglu_bwd_args a = {dgate, dup, dout, gate, up, NULL, NULL, n, 1, NULL, NULL};
  gt__geglu_backward(&a);
}

/* The kept bf16 copies widened as they are loaded (exact), so no float32
 * copy of them is made: the same bits as unpacking them first. */
void gt_geglu_backward_write_b16(float *dgate, float *dup, const float *dout, const uint16_t *gate16,
                                 const uint16_t *up16, int64_t n) {
  gt__geglu_bwd_args a = {dgate, dup, dout, NULL, NULL, gate16, up16, n, 1, NULL, NULL};
  gt__geglu_backward(&a);
}

/* Both gradients wanted only by bf16 products, which round them as they
 * pack them: written as their bf16 patterns, 2 bytes an element */
void gt_geglu_backward_b16_to_b16(uint16_t *dgate16, uint16_t *dup16, const float *dout, const uint16_t *gate16,
                                  const uint16_t *up16, int64_t n) {
  gt__geglu_bwd_args a = {(float *)(void *)dgate16, (float *)(void *)dup16, dout, NULL, NULL, gate16, up16, n, 1,
                          dgate16, dup16};
  gt__geglu_backward(&a);
}
