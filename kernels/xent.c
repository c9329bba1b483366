/* Softmax cross-entropy over rows of logits, one row per iteration of a
 * static loop; each row's max and exp-sum are float32 vector reductions. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "xent_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__xent_args {
  float *loss, *lse, *dlogits;
  const float *logits, *lse_in, *row_weight;
  const int32_t *target;
  int64_t V;
  float z;
  uint16_t *d16; /* gt_xent_backward_b16's output (row stride ld16) */
  int64_t ld16;
} gt__xent_args;

static void gt__xent_fwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__xent_args *a = p;
  const int64_t V = a->V;
  for (int64_t r = r0; r < r1; r++) {
    const float *l = a->logits + r * V;
    const float ls = gt__xent_row_lse(l, V);
    if (a->lse) a->lse[r] = ls;
    a->loss[r] = a->target[r] < 0 ? 0.0f : ls - l[a->target[r]];
  }
}

static void gt__xent_bwd_part(void *p, int64_t r0, int64_t r1) {
  const gt__xent_args *a = p;
  const int64_t V = a->V;
  const int32_t *target = a->target;
  for (int64_t r = r0; r < r1; r++)
    if (a->d16)
      gt__xent_row_backward(NULL, a->logits + r * V, target[r] < 0 ? 0.0f : a->lse_in[r], target[r],
                            a->row_weight ? a->row_weight[r] : 1.0f, a->z, V, 0.0f, a->d16 + r * a->ld16, 1);
    else
      gt__xent_row_backward(a->dlogits + r * V, a->logits + r * V, target[r] < 0 ? 0.0f : a->lse_in[r], target[r],
                            a->row_weight ? a->row_weight[r] : 1.0f, a->z, V, 0.0f, NULL, 0);
}


void gt_xent_forward(float *loss, float *lse, const float *logits,
                     const int32_t *target, int64_t rows, int64_t V) {
  if (rows <= 0) return;
  if (V <= 0) {
    /* An empty softmax: log(0) = -inf, and no target can be scored. */
    for (int64_t r = 0; r < rows; r++) {
      loss[r] = 0.0f;
      if (lse) lse[r] = -INFINITY;
    }
    return;
  }
  gt__xent_args a = {.loss = loss, .lse = lse, .logits = logits, .target = target, .V = V};
  gt_team_for(gt__par(rows * V), rows, gt__xent_fwd_part, &a);
}

void gt_xent_backward(float *dlogits, const float *logits, const float *lse,
                      const int32_t *target, const float *row_weight,
                      int64_t rows, int64_t V, float z) {
  if (rows <= 0 || V <= 0) return;
  gt__xent_args a = {.dlogits = dlogits, .logits = logits, .lse_in = lse, .row_weight = row_weight,
                     .target = target, .V = V, .z = z};
  gt_team_for(gt__par(rows * V), rows, gt__xent_bwd_part, &a);
}

/* Rows split over threads as the float form's: a row's patterns, when they
 * overlay the logits (ld16 = 2 V), lie in the row's own first half, so no
 * thread writes where another reads. */
void gt_xent_backward_b16(uint16_t *d16, int64_t ld16, const float *logits, const float *lse, const int32_t *target,
                          const float *row_weight, int64_t rows, int64_t V, float z) {
  if (rows <= 0 || V <= 0) return;
  gt__xent_args a = {.logits = logits, .lse_in = lse, .row_weight = row_weight, .target = target, .V = V, .z = z,
                     .d16 = d16, .ld16 = ld16};
  gt_team_for(gt__par(rows * V), rows, gt__xent_bwd_part, &a);
}
