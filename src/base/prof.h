/* Optional time accounting by kind of work, owned by whoever wants it (a
 * benchmark hangs one on gt_model.prof); NULL costs nothing. With a trace
 * lane attached (the profiler timeline, base/trace.h) every timed statement
 * also becomes a span on that lane; without one it costs a NULL check. */
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

struct gt_trace_lane;

typedef struct gt_prof {
  double seconds[GT_PROF_NCAT];
  long long calls[GT_PROF_NCAT];
  struct gt_trace_lane *trace; /* NULL: no spans; written by one thread only */
} gt_prof;

double gt_prof_now(void);
const char *gt_prof_cat_name(gt_prof_cat c);
/* The span of one timed statement (its source text names it). */
void gt_prof_span(gt_prof *p, gt_prof_cat cat, const char *stmt, double t0, double t1);

/* Time one statement into prof (which may be NULL). */
#define GT_PROF(prof, cat, stmt)                                            \
  do {                                                                      \
    if (prof) {                                                             \
      double gt__t0 = gt_prof_now();                                        \
      stmt;                                                                 \
      double gt__t1 = gt_prof_now();                                        \
      (prof)->seconds[cat] += gt__t1 - gt__t0;                              \
      (prof)->calls[cat]++;                                                 \
      if ((prof)->trace) gt_prof_span((prof), (cat), #stmt, gt__t0, gt__t1); \
    } else {                                                                \
      stmt;                                                                 \
    }                                                                       \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
