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
} gt__geglu_args;

static void gt__geglu_fwd_part(void *p, int64_t i0, int64_t i1) {
  const gt__geglu_args *a = p;
  float *out = a->out;
  const float *gate = a->gate, *up = a->up;
  if (a->round_bf16) {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) out[i] = gt__bf16_round1_nb(gt__geglu1(gate[i], up[i]));
  } else {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) out[i] = gt__geglu1(gate[i], up[i]);
  }
}

void gt_geglu_forward(float *out, const float *gate, const float *up, int64_t n) {
  gt__geglu_args a = {out, gate, up, 0};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* dtype=bfloat16: each value is rounded in the loop that computes it,
 * instead of in a second pass over memory (bf16_row.h; the same bits). */
void gt_geglu_forward_rnd(float *out, const float *gate, const float *up, int64_t n, int round_bf16) {
  gt__geglu_args a = {out, gate, up, round_bf16 != 0};
  gt_team_for(n >= GT__PAR_MIN, n, gt__geglu_fwd_part, &a);
}

/* d gelu/dx = s + x * 2 s (1 - s) * K0 (1 + 3 K1 x^2) with s = sigmoid(2u).
 * 1 - s is formed as e * s (e = e^(-2u)) to avoid cancellation; e is capped
 * so that e * s never becomes inf * 0 (the capped terms are below 1e-34).
 * want_* are constants at each call site, so every variant is a branch-free
 * vector loop. */
static inline __attribute__((always_inline)) void
gt__geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
              const float *up, int64_t i0, int64_t i1, const int want_gate,
              const int want_up, const int set) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    const float x = gate[i];
    const float x2 = x * x;
    const float u = GT__K0 * (x + GT__K1 * (x2 * x));
    float a = -2.0f * u;
    a = a > 80.0f ? 80.0f : a;
    const float e = gt__expf(a);
    const float s = 1.0f / (1.0f + e);
    if (want_gate) {
      const float dg = s + 2.0f * x * s * (e * s) * GT__K0 * (1.0f + 3.0f * GT__K1 * x2);
      const float v = dout[i] * up[i] * dg;
      if (set)
        dgate[i] = v;
      else
        dgate[i] += v;
    }
    if (want_up) {
      const float v = dout[i] * (x * s);
      if (set)
        dup[i] = v;
      else
        dup[i] += v;
    }
  }
}

typedef struct gt__geglu_bwd_args {
  float *dgate, *dup;
  const float *dout, *gate, *up;
  int64_t n;
  int set;
} gt__geglu_bwd_args;

/* Member t of nt: 16-element aligned blocks, so that two members never
 * write one cache line. */
static void gt__geglu_bwd_member(void *p, int t, int nt) {
  const gt__geglu_bwd_args *a = p;
  float *dgate = a->dgate, *dup = a->dup;
  const float *dout = a->dout, *gate = a->gate, *up = a->up;
  int64_t i0, i1;
  gt_team_split_blocks(a->n, 16, t, nt, &i0, &i1);
  if (a->set) {
    if (dgate && dup)
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 1, 1, 1);
    else if (dgate)
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 1, 0, 1);
    else
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 0, 1, 1);
  } else {
    if (dgate && dup)
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 1, 1, 0);
    else if (dgate)
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 1, 0, 0);
    else
      gt__geglu_bwd(dgate, dup, dout, gate, up, i0, i1, 0, 1, 0);
  }
}

/* set: overwrite the gradients instead of adding (a destination that was not
 * zeroed); the value written is the one that would have been added to 0. */
static void gt__geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               int64_t n, const int set) {
  if (n <= 0 || (!dgate && !dup)) return;
  gt__geglu_bwd_args a = {dgate, dup, dout, gate, up, n, set};
  gt_team_par(n >= GT__PAR_MIN, gt__geglu_bwd_member, &a);
}

void gt_geglu_backward(float *dgate, float *dup, const float *dout,
                       const float *gate, const float *up, int64_t n) {
  gt__geglu_backward(dgate, dup, dout, gate, up, n, 0);
}

void gt_geglu_backward_write(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                             int64_t n) {
  gt__geglu_backward(dgate, dup, dout, gate, up, n, 1);
}
