/* Multiply by one scalar: Gemma 4's layer_scalar on a layer's output. The
 * scalar's gradient is a dot product over the whole activation, summed by
 * gt_dot's fixed partition so it does not depend on the thread count. */
#include "base/team.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 65536

typedef struct gt__scale_args {
  float *out;
  const float *x;
  float s;
  int add;
} gt__scale_args;

static void gt__scale_part(void *p, int64_t i0, int64_t i1) {
  const gt__scale_args *a = p;
  float *out = a->out;
  const float *x = a->x;
  const float s = a->s;
  if (a->add) {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) out[i] += s * x[i];
  } else {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) out[i] = s * x[i];
  }
}

void gt_scale_forward(float *out, const float *x, float s, int64_t n) {
  gt__scale_args a = {out, x, s, 0};
  gt_team_for(n >= GT__PAR_MIN, n, gt__scale_part, &a);
}

void gt_scale_backward(float *dx, float *ds, const float *dout, const float *x, float s, int64_t n) {
  if (dx) {
    gt__scale_args a = {dx, dout, s, 1};
    gt_team_for(n >= GT__PAR_MIN, n, gt__scale_part, &a);
  }
  if (ds) *ds += (float)gt_dot(dout, x, n);
}
