/* The output head's soft-cap fused with its cross-entropy. Unfused, a logits
 * tile is swept by the cap, the loss's two reductions, a copy of the capped
 * logits (the cap's backward needs them after the loss's backward overwrote
 * the tile), the loss's backward and the cap's backward. Fused, the cap runs
 * row by row right before the row's reductions (the row is then in cache),
 * and the backward reads the capped logit y once and writes
 * (softmax - onehot) * w * (1 - (y/cap)^2) over it: no copy, and no second
 * tile-sized buffer. Each element is computed by the unfused expressions
 * (the shared inline code of kernels/softcap_tanh.h and kernels/xent_row.h),
 * so the results are the unfused bits. */
#include <math.h>
#include <stdint.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "softcap_tanh.h"
#include "xent_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__sx_args {
  float *loss, *lse, *logits, *dlogits;
  const float *clogits, *lse_in, *row_weight;
  const int32_t *target;
  int64_t V;
  float cap, z;
  uint16_t *d16; /* gt_softcap_xent_backward_b16's output (row stride ld16) */
  int64_t ld16;
} gt__sx_args;

static void gt__sx_fwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__sx_args *a = p;
  const int64_t V = a->V;
  const float cap = a->cap;
  for (int64_t r = r0; r < r1; r++) {
    float *l = a->logits + r * V;
#pragma omp simd
    for (int64_t j = 0; j < V; j++) l[j] = cap * gt__tanhf(l[j] / cap);
    const float ls = gt__xent_row_lse(l, V);
    if (a->lse) a->lse[r] = ls;
    a->loss[r] = a->target[r] < 0 ? 0.0f : ls - l[a->target[r]];
  }
}

static void gt__sx_bwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__sx_args *a = p;
  const int64_t V = a->V;
  const int32_t *target = a->target;
  for (int64_t r = r0; r < r1; r++)
    if (a->d16)
      gt__xent_row_backward(NULL, a->clogits + r * V, target[r] < 0 ? 0.0f : a->lse_in[r], target[r],
                            a->row_weight ? a->row_weight[r] : 1.0f, a->z, V, a->cap, a->d16 + r * a->ld16, 1);
    else
      gt__xent_row_backward(a->dlogits + r * V, a->clogits + r * V, target[r] < 0 ? 0.0f : a->lse_in[r], target[r],
                            a->row_weight ? a->row_weight[r] : 1.0f, a->z, V, a->cap, NULL, 0);
}

void gt_softcap_xent_forward(float *loss, float *lse, float *logits, const int32_t *target, int64_t rows, int64_t V,
                             float cap) {
  if (rows <= 0) return;
  if (V <= 0) {
    gt_xent_forward(loss, lse, logits, target, rows, V);
    return;
  }
  gt__sx_args a = {.loss = loss, .lse = lse, .logits = logits, .target = target, .V = V, .cap = cap};
  gt_team_for(gt__par(rows * V), rows, gt__sx_fwd_part, &a);
}

void gt_softcap_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *target,
                              const float *row_weight, int64_t rows, int64_t V, float cap, float z) {
  if (rows <= 0 || V <= 0) return;
  gt__sx_args a = {.dlogits = dlogits, .clogits = logits, .lse_in = lse, .row_weight = row_weight,
                   .target = target, .V = V, .cap = cap, .z = z};
  gt_team_for(gt__par(rows * V), rows, gt__sx_bwd_part, &a);
}

void gt_softcap_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse,
                                  const int32_t *target, const float *row_weight, int64_t rows, int64_t V, float cap,
                                  float z) {
  if (rows <= 0 || V <= 0) return;
  gt__sx_args a = {.clogits = logits, .lse_in = lse, .row_weight = row_weight, .target = target, .V = V, .cap = cap,
                   .z = z, .d16 = d16, .ld16 = ld16};
  gt_team_for(gt__par(rows * V), rows, gt__sx_bwd_part, &a);
}
