/* Scaled embedding lookup. The backward scatter-add is split over columns:
 * each thread owns a column range of the whole table and walks the tokens in
 * order, so repeated tokens never race and every element is summed in token
 * order whatever the thread count. */
#include "base/team.h"
#include "kernels/kernels.h"

#define GT__PAR_MIN 32768
#define GT__COL_BLOCK 16

static inline int gt__par(int64_t work) { return work >= GT__PAR_MIN; }

typedef struct gt__emb_args {
  float *dst;
  const float *src;
  const int32_t *tok;
  int64_t n;
  int dim;
  float scale;
} gt__emb_args;

static void gt__emb_fwd_part(void *p, int64_t i0, int64_t i1) {
  const gt__emb_args *a = p;
  const int dim = a->dim;
  const float scale = a->scale;
  for (int64_t i = i0; i < i1; i++) {
    const float *src = a->src + (int64_t)a->tok[i] * dim;
    float *o = a->dst + i * dim;
#pragma omp simd
    for (int j = 0; j < dim; j++) o[j] = src[j] * scale;
  }
}

/* Member t's columns of the table: whole blocks of GT__COL_BLOCK. */
static void gt__emb_bwd_member(void *p, int t, int nt) {
  const gt__emb_args *a = p;
  const int64_t dim = a->dim, n = a->n;
  const float scale = a->scale;
  int64_t c0, c1;
  gt_team_split_blocks(dim, GT__COL_BLOCK, t, nt, &c0, &c1);
  for (int64_t i = 0; i < n && c0 < c1; i++) {
    float *dst = a->dst + (int64_t)a->tok[i] * dim;
    const float *g = a->src + i * dim;
#pragma omp simd
    for (int64_t j = c0; j < c1; j++) dst[j] += scale * g[j];
  }
}

void gt_embedding_forward(float *out, const int32_t *tok, const float *table,
                          int64_t n, int dim, float scale) {
  if (n <= 0 || dim <= 0) return;
  gt__emb_args a = {out, table, tok, n, dim, scale};
  gt_team_for(gt__par(n * dim), n, gt__emb_fwd_part, &a);
}

void gt_embedding_backward(float *dtable, const float *dout, const int32_t *tok,
                           int64_t n, int dim, float scale) {
  if (n <= 0 || dim <= 0) return;
  gt__emb_args a = {dtable, dout, tok, n, dim, scale};
  gt_team_par(gt__par(n * dim), gt__emb_bwd_member, &a);
}
