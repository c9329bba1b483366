/* Rotary position embedding, rotate-half pairing (i, i + head_dim/2). */
#include <math.h>

#include "base/team.h"
#include "kernels/kernels.h"
#include "kernels/rope_row.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__rope_args {
  float *x, *cos_tab, *sin_tab;
  const float *cos_in, *sin_in;
  const int32_t *pos;
  int max_pos, head_dim, half, rot, nheads;
  double base, scale;
  float dir;
} gt__rope_args;

static void gt__table_part(void *arg, int64_t i0, int64_t i1) {
  const gt__rope_args *a = arg;
  const int half = a->half, max_pos = a->max_pos, head_dim = a->head_dim;
  for (int i = (int)i0; i < (int)i1; i++) {
    float inv = 0.0f;
    if (i < a->rot)
      inv = 1.0f / powf((float)a->base, (float)(2 * i) / (float)head_dim) / (float)a->scale;
    for (int p = 0; p < max_pos; p++) {
      const float ang = (float)p * inv;
      a->cos_tab[(int64_t)p * half + i] = cosf(ang);
      a->sin_tab[(int64_t)p * half + i] = sinf(ang);
    }
  }
}

static void gt__rotate_part(void *p, int64_t t0, int64_t t1) {
  const gt__rope_args *a = p;
  const int half = a->half, nheads = a->nheads, head_dim = a->head_dim;
  for (int64_t t = t0; t < t1; t++) {
    const float *c = a->cos_in + (int64_t)a->pos[t] * half;
    const float *s = a->sin_in + (int64_t)a->pos[t] * half;
    for (int h = 0; h < nheads; h++) gt__rope_row(a->x + (t * nheads + h) * head_dim, c, s, half, a->dir);
  }
}

void gt_rope_table_fill(float *cos_tab, float *sin_tab, int max_pos, int head_dim,
                        double base, double scale, double fraction) {
  const int half = head_dim / 2;
  if (max_pos <= 0 || half <= 0) return;
  int rot = (int)(fraction * head_dim / 2);
  if (rot < 0) rot = 0;
  if (rot > half) rot = half;
  /* float32 throughout, in HF's order (pow, reciprocal, then the linear
   * scaling divide), so angles round the way the reference model's do. */
  gt__rope_args a = {.cos_tab = cos_tab, .sin_tab = sin_tab, .max_pos = max_pos, .head_dim = head_dim,
                     .half = half, .rot = rot, .base = base, .scale = scale};
  gt_team_for(gt__par((int64_t)max_pos * half), half, gt__table_part, &a);
}

/* Rotates every row-head of x (kernels/rope_row.h). */
static void gt__rotate(float *x, const int32_t *pos, const float *cos_tab, const float *sin_tab, int64_t ntok,
                       int nheads, int head_dim, float dir) {
  const int half = head_dim / 2;
  if (ntok <= 0 || nheads <= 0 || half <= 0) return;
  gt__rope_args a = {.x = x, .cos_in = cos_tab, .sin_in = sin_tab, .pos = pos, .head_dim = head_dim,
                     .half = half, .nheads = nheads, .dir = dir};
  gt_team_for(gt__par(ntok * nheads * head_dim), ntok, gt__rotate_part, &a);
}

void gt_rope_forward(float *x, const int32_t *pos, const float *cos_tab,
                     const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  gt__rotate(x, pos, cos_tab, sin_tab, ntok, nheads, head_dim, 1.0f);
}

void gt_rope_backward(float *dx, const int32_t *pos, const float *cos_tab,
                      const float *sin_tab, int64_t ntok, int nheads, int head_dim) {
  gt__rotate(dx, pos, cos_tab, sin_tab, ntok, nheads, head_dim, -1.0f);
}
