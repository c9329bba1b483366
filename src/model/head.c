#include "model/head.h"

#include <string.h>

#include "kernels/kernels.h"
#include "model/linear.h"

gt_rc gt__head_run(gt_model *m, const float *hp, float *hg, const float *x, const int32_t *targets, int64_t N,
                   int n_tiles, float row_weight, float *dx, float *logits_out, gt_loss_stats *st, gt_err *err) {
  gt_mem *mem = m->mem;
  int64_t d = m->d, V = m->vocab;
  if (n_tiles < 1 || N % n_tiles)
    return gt_err_set(err, GT_ERR_ARG, "head: %lld tokens do not split into %d vocab tiles",
                      (long long)N, n_tiles);
  int64_t R = N / n_tiles;
  /* the head unit starts at 0; a frozen tensor has no gradient (NULL) */
  const float *E = hp + m->embed_offset;
  const float *wn = hp + m->final_norm_offset;
  float *gE = gt_model_head_grad(m, hg, m->embed_offset), *gN = gt_model_head_grad(m, hg, m->final_norm_offset);
  int bwd = dx != NULL;
  int cap = m->softcap > 0;
  const double z = m->z_loss; /* lse is of the capped logits, as MaxText's loss sees them */

  /* Every buffer is written in full before it is read (dh tile by tile by
   * the written form of the projection's backward), so none is zeroed. */
  float *h = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float), "final norm output");
  float *rstd = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)N * sizeof(float), "final norm rstd");
  float *dh = bwd ? gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float), "head input gradient") : NULL;
  float *logits = gt_mem_alloc_uninit_named(mem, GT_MEM_LOGITS, (size_t)(R * V) * sizeof(float), "logits tile");
  float *loss = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)R * sizeof(float), "tile losses");
  float *lse = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)R * sizeof(float), "tile log-sum-exp");
  float *roww = bwd ? gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)R * sizeof(float), "tile row weights") : NULL;
  gt_rc rc = GT_OK;
  if (!h || !rstd || (bwd && (!dh || !roww)) || !logits || !loss || !lse) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "head: no memory for a logits tile of %lld x %lld",
                    (long long)R, (long long)V);
    goto done;
  }
  if (gt_mem_measuring(mem)) {
    /* allocation only: no logits, but the token count is the batch's */
    for (int64_t i = 0; i < N; i++) st->total_weights += targets[i] >= 0;
    goto done;
  }
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward(h, rstd, x, wn, N, (int)d, m->eps, m->norm_offset));
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__act_round(m, h, N * d));
  if (roww)
    for (int64_t r = 0; r < R; r++) roww[r] = row_weight;
  for (int t = 0; t < n_tiles; t++) {
    const float *ht = h + (int64_t)t * R * d;
    const int32_t *tt = targets + (int64_t)t * R;
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, logits, ht, (gt__weight){E, m->embed_qtype}, R, d, V));
    /* dtype=bfloat16: the logits come out of the head in bf16, as MaxText's
     * do before it casts them to float32 for the loss */
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__act_round(m, logits, R * V));
    if (cap && !logits_out) { /* the cap inside the loss's sweep */
      GT_PROF(m->prof, GT_PROF_XENT, gt_softcap_xent_forward(loss, lse, logits, tt, R, V, m->softcap));
    } else {
      if (cap) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_softcap_forward(logits, R * V, m->softcap));
      if (logits_out) memcpy(logits_out + (int64_t)t * R * V, logits, (size_t)(R * V) * sizeof(float));
      GT_PROF(m->prof, GT_PROF_XENT, gt_xent_forward(loss, lse, logits, tt, R, V));
    }
    if (m->token_loss)
      for (int64_t r = 0; r < R; r++) m->token_loss[(int64_t)t * R + r] = tt[r] >= 0 ? loss[r] : 0.0f;
    for (int64_t r = 0; r < R; r++)
      if (tt[r] >= 0) {
        double l = loss[r];
        if (z != 0.0) { /* PaLM's z-loss, part of the token's loss as in MaxText */
          const double zr = z * (double)lse[r] * (double)lse[r];
          st->z_sum += zr;
          l += zr;
        }
        st->xent_sum += l;
        st->total_weights++;
      }
    if (!bwd) continue;
    /* with the cap: one pass from the capped logits, overwriting them */
    if (cap)
      GT_PROF(m->prof, GT_PROF_XENT, gt_softcap_xent_backward(logits, logits, lse, tt, roww, R, V, m->softcap, m->z_loss));
    else
      GT_PROF(m->prof, GT_PROF_XENT, gt_xent_backward(logits, logits, lse, tt, roww, R, V, m->z_loss));
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward_write(m, dh + (int64_t)t * R * d, gE, logits, ht, (gt__weight){E, m->embed_qtype}, R, d, V));
  }
  if (bwd)
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_backward(dx, gN, NULL, dh, x, rstd, wn, N, (int)d,
                                                                     m->norm_offset, 0));
done:
  gt_mem_free(mem, h);
  gt_mem_free(mem, rstd);
  gt_mem_free(mem, dh);
  gt_mem_free(mem, logits);
  gt_mem_free(mem, loss);
  gt_mem_free(mem, lse);
  gt_mem_free(mem, roww);
  return rc;
}
