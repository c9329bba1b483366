/* Per-layer embeddings (PLE, Gemma 4 small; spec 3.4), the model-wide half:
 * computed once per forward from the token ids and the scaled main
 * embedding x0, read by every layer's PLE block as its column slice.
 *
 *   ple = (Eple[tok] * sqrt(P) + RMSNorm_P(x0 . Wproj^T * d^-0.5)) * 2^-0.5
 *
 * with sqrt(P) rounded to bf16 under dtype=bfloat16 (as the main
 * embedding's sqrt(d)),
 * as [N, L*P] (layer l reads columns l*P .. l*P+P-1). The parameters live in
 * the head unit after the final norm. */
#ifndef GT_PLE_H
#define GT_PLE_H

#include "model/model.h"

/* The sizes, in floats, of the temporaries: forward allocates one [N, L*P]
 * (fwd); backward allocates two [N, L*P] (bwd_cols each) and [N*L] (bwd_rows),
 * in that order, and frees them at its end (on a measuring tracker: only
 * that, no arithmetic). */
void gt__ple_temps(const gt_model *m, int64_t N, int64_t *fwd, int64_t *bwd_cols, int64_t *bwd_rows);

/* hp: the head unit's parameters; ple: [N, L*P] output. */
gt_rc gt__ple_forward(const gt_model *m, const float *hp, const float *x0, const int32_t *tok, int64_t N, float *ple,
                      gt_err *err);
/* dple: [N, L*P], the layers' gradient (overwritten: it is scaled in
 * place). Adds the PLE parameters' gradients into hg (the head unit's
 * gradients) and d(loss)/d(x0) into dx0. The projection is recomputed from
 * x0 rather than kept through the step. */
gt_rc gt__ple_backward(const gt_model *m, const float *hp, float *hg, const float *x0, const int32_t *tok, int64_t N,
                       float *dple, float *dx0, gt_err *err);

#endif
