/* Logit soft-cap y = cap * tanh(x / cap), in place. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "softcap_tanh.h"

#define GT__PAR_MIN 32768

typedef struct gt__softcap_args {
  float *x;
  const float *y;
  float cap;
} gt__softcap_args;

static void gt__softcap_fwd_part(void *p, int64_t i0, int64_t i1) {
  const gt__softcap_args *a = p;
  float *x = a->x;
  const float cap = a->cap;
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) x[i] = cap * gt__tanhf(x[i] / cap);
}

static void gt__softcap_bwd_part(void *p, int64_t i0, int64_t i1) {
  const gt__softcap_args *a = p;
  float *dx = a->x;
  const float *y = a->y;
  const float cap = a->cap;
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    const float t = y[i] / cap;
    dx[i] = dx[i] * (1.0f - t * t);
  }
}

void gt_softcap_forward(float *x, int64_t n, float cap) {
  gt__softcap_args a = {x, NULL, cap};
  gt_team_for(n >= GT__PAR_MIN, n, gt__softcap_fwd_part, &a);
}

void gt_softcap_backward(float *dx, const float *y, int64_t n, float cap) {
  gt__softcap_args a = {dx, y, cap};
  gt_team_for(n >= GT__PAR_MIN, n, gt__softcap_bwd_part, &a);
}
