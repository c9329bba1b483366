/* Optional time accounting by kind of work, owned by whoever wants it (a
 * benchmark hangs one on gt_model.prof); NULL costs nothing. */
#ifndef GEMTRAIN_PROF_H
#define GEMTRAIN_PROF_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_prof_cat {
  GT_PROF_MATMUL = 0, /* sgemm: projections, MLP, logits */
  GT_PROF_ATTENTION,  /* the attention kernel, forward and backward */
  GT_PROF_XENT,       /* softmax cross-entropy over the vocabulary */
  GT_PROF_ELEMWISE,   /* norms, RoPE, GeGLU, embedding, residual adds */
  GT_PROF_OPTIM,      /* clipping and AdamW */
  GT_PROF_NCAT
} gt_prof_cat;

typedef struct gt_prof {
  double seconds[GT_PROF_NCAT];
  long long calls[GT_PROF_NCAT];
} gt_prof;

double gt_prof_now(void);
const char *gt_prof_cat_name(gt_prof_cat c);

/* Time one statement into prof (which may be NULL). */
#define GT_PROF(prof, cat, stmt)                                   \
  do {                                                             \
    if (prof) {                                                    \
      double gt__t0 = gt_prof_now();                               \
      stmt;                                                        \
      (prof)->seconds[cat] += gt_prof_now() - gt__t0;              \
      (prof)->calls[cat]++;                                        \
    } else {                                                       \
      stmt;                                                        \
    }                                                              \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
