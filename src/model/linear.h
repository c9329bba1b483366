/* A linear layer's backward that WRITES its input gradient: the first product
 * into a buffer then needs no zeroing pass before it (gt_matmul_backward adds,
 * by the kernels' convention). */
#ifndef GEMTRAIN_MODEL_LINEAR_H
#define GEMTRAIN_MODEL_LINEAR_H

#include <stdint.h>

/* dinp[n,in_dim] = dout . w (overwritten, never read); dw[out_dim,in_dim] +=
 * dout^T . inp (dw may be NULL). The same bits as gt_matmul_backward on a
 * zeroed dinp: one gt_sgemm with beta 0 instead of 1 on zeros. */
void gt__linear_backward_write(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int64_t n,
                               int64_t in_dim, int64_t out_dim);

#endif
