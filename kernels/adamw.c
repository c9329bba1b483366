/* Fused AdamW step with optax.adamw semantics (see kernels.h). Per-element
 * math is float32 in the order optax applies it; only the two bias
 * corrections are scalars, formed once in double. */
#include "base/team.h"
#include "kernels/adamw_step.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 32768

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

/* the vector step of the copy's width, then the scalar tail
 * (kernels/adamw_step.h) */
static void gt__adamw_range(float *p, const float *g, float *m, float *v,
                            int64_t i0, int64_t i1, const gt__adamw_k *k) {
  int64_t i = i0;
#ifdef GT__ADAMW_W
  const gt__adamw_v c = gt__adamw_vconsts(k);
  for (; i + GT__ADAMW_W <= i1; i += GT__ADAMW_W)
    GT__V(storeu_ps)(m + i, gt__adamw_vstep(&c, p, g, v, GT__V(loadu_ps)(m + i), i));
#endif
  for (; i < i1; i++) m[i] = gt__adamw_1(k, p, g, v, m[i], i);
}

typedef struct gt__adamw_args {
  float *p;
  const float *g;
  float *m;
  float *v;
  int64_t n;
  const gt__adamw_k *k;
} gt__adamw_args;

/* Member t's part: a static split by hand, in 16-element blocks (one cache
 * line of floats). */
static void gt__adamw_member(void *arg, int t, int nt) {
  const gt__adamw_args *a = arg;
  int64_t i0, i1;
  gt_team_split_blocks(a->n, 16, t, nt, &i0, &i1);
  if (i0 < i1) gt__adamw_range(a->p, a->g, a->m, a->v, i0, i1, a->k);
}

void gt_adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                     const gt_adamw_hparams *h) {
  if (n <= 0) return;
  const gt__adamw_k k = gt__adamw_consts(h);
  /* Static split by hand, in 16-element blocks (one cache line of floats). */
  gt__adamw_args a = {p, g, m, v, n, &k};
  gt_team_par(gt__par(n), gt__adamw_member, &a);
}
