#include "model/head.h"

#include <string.h>

#include "kernels/kernels.h"
#include "model/linear.h"

/* One logits tile's backward: the loss's gradient into the tile (in place),
 * then dh = dlogits . E (written) and gE += dlogits^T . h. With bf16
 * products that read bf16 operands in place (over a float32 E, or a
 * frozen E of any storage: a LoRA base's tied head) the gradient's only
 * readers are those products, which round it as they pack it: it is
 * written as bf16 patterns over the first half of each row's own logits
 * (row stride 2 V; gt_xent_backward_b16) and read so, half the bytes each
 * way. */
static void gt__head_tile_backward(const gt_model *m, float *logits, const float *lse, const int32_t *tt,
                                   const float *roww, float z, float cap, float *dh, float *gE, const float *ht,
                                   const float *E, int64_t R, int64_t d, int64_t V) {
  const gt__weight w = {E, m->embed_qtype};
  if (gt__matmul_a16(m) && (w.qtype == GT_STORE_F32 || !gE)) {
    uint16_t *d16 = (uint16_t *)(void *)logits;
    if (cap)
      GT_PROF(m->prof, GT_PROF_XENT, gt_softcap_xent_backward_b16(d16, 2 * V, logits, lse, tt, roww, R, V, cap, z));
    else
      GT_PROF(m->prof, GT_PROF_XENT, gt_xent_backward_b16(d16, 2 * V, logits, lse, tt, roww, R, V, z));
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward16(m, 1, dh, gE, d16, 2 * V, ht, NULL, w, R, d, V));
    return;
  }
  if (cap)
    GT_PROF(m->prof, GT_PROF_XENT, gt_softcap_xent_backward(logits, logits, lse, tt, roww, R, V, cap, z));
  else
    GT_PROF(m->prof, GT_PROF_XENT, gt_xent_backward(logits, logits, lse, tt, roww, R, V, z));
  GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_backward_write(m, dh, gE, logits, ht, w, R, d, V));
}

/* The pairs of the rows: each token with a target gets the index of its
 * sequence (2 * pair + side) in tok_seq (-1 otherwise), and seq[] sums its
 * sequence's token losses. Returns the pairs seen, with or without tokens
 * on both sides (the caller keeps those that have). */
static int64_t gt__pref_gather(const gt_pref_head *ph, const int32_t *targets, const float *tok_loss, int64_t B,
                               int32_t *tok_seq, int32_t *seg_of, gt_pref_seq *seq) {
  const int64_t T = ph->T;
  int64_t np = 0;
  for (int64_t rp = 0; rp + 1 < B; rp += 2) {
    const int64_t p0 = np; /* the row pair's pairs are [p0, np) */
    int64_t last = -1;
    for (int side = 0; side < 2; side++) {
      const int64_t base = (rp + side) * T;
      for (int64_t t = 0; t < T; t++) {
        const int64_t i = base + t;
        tok_seq[i] = -1;
        if (targets[i] < 0) continue;
        const int32_t s = ph->segments ? ph->segments[i] : 1;
        if (last < 0 || seg_of[last] != s) { /* segments run in blocks: look up only on a change */
          last = -1;
          for (int64_t p = p0; p < np; p++)
            if (seg_of[p] == s) { last = p; break; }
          if (last < 0) {
            last = np++;
            seg_of[last] = s;
            seq[2 * last] = seq[2 * last + 1] = (gt_pref_seq){0.0, 0.0, 0.0};
          }
        }
        gt_pref_seq *q = &seq[2 * last + side];
        q->logp -= (double)tok_loss[i];
        if (ph->ref_loss) q->ref -= (double)ph->ref_loss[i];
        q->n += 1.0;
        tok_seq[i] = (int32_t)(2 * last + side);
      }
      last = -1;
    }
  }
  return np;
}

int64_t gt_pref_count_pairs(const gt_batch *b) {
  const int64_t T = b->T;
  int64_t n = 0;
  for (int64_t rp = 0; rp + 1 < b->B; rp += 2) {
    const int32_t *tc = b->targets + rp * T, *tr = tc + T;
    const int32_t *sc = b->segments ? b->segments + rp * T : NULL, *sr = sc ? sc + T : NULL;
    int32_t prev = 0;
    int have_prev = 0;
    for (int64_t i = 0; i < T; i++) {
      if (tc[i] < 0) continue;
      const int32_t s = sc ? sc[i] : 1;
      if (have_prev && s == prev) continue;
      have_prev = 1;
      prev = s;
      /* a block start of segment s: counted once, at its first block */
      int seen = 0;
      for (int64_t j = 0; j < i && !seen; j++) seen = tc[j] >= 0 && (sc ? sc[j] : 1) == s;
      if (seen) continue;
      int other = 0;
      for (int64_t j = 0; j < T && !other; j++) other = tr[j] >= 0 && (sr ? sr[j] : 1) == s;
      n += other;
    }
  }
  return n;
}

/* Preference mode (head.h): forward over every tile, per-sequence sums,
 * the pairs' coefficients, then the backward with them as token weights. */
static gt_rc gt__head_pref(gt_model *m, const float *hp, const float *hm, float *hg, const float *x, const int32_t *targets, int64_t N,
                           int n_tiles, float row_weight, float *dx, gt_loss_stats *st, gt_err *err) {
  gt_mem *mem = m->mem;
  const gt_pref_head *ph = m->pref;
  int64_t d = m->d, V = m->vocab;
  if (n_tiles < 1 || N % n_tiles)
    return gt_err_set(err, GT_ERR_ARG, "head: %lld tokens do not split into %d vocab tiles",
                      (long long)N, n_tiles);
  if (ph->T < 1 || N % ph->T || (N / ph->T) % 2)
    return gt_err_set(err, GT_ERR_ARG,
                      "head: preference pairs need an even number of rows of %d tokens; found %lld tokens", ph->T,
                      (long long)N);
  const int64_t R = N / n_tiles, B = N / ph->T;
  const float *E = (hm ? hm : hp) + m->embed_offset;
  const float *wn = hp + m->final_norm_offset;
  float *gE = gt_model_head_grad(m, hg, m->embed_offset), *gN = gt_model_head_grad(m, hg, m->final_norm_offset);
  const int bwd = dx != NULL, cap = m->softcap > 0;
  float *h = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float), "final norm output");
  float *rstd = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)N * sizeof(float), "final norm rstd");
  float *dh = bwd ? gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float), "head input gradient") : NULL;
  float *logits = gt_mem_alloc_uninit_named(mem, GT_MEM_LOGITS, (size_t)(R * V) * sizeof(float), "logits tile");
  /* per token: its loss, then its weight in the backward; lse; its sequence */
  float *tok = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)N * sizeof(float), "token losses (preference)");
  float *lse = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)N * sizeof(float), "log-sum-exp (preference)");
  int32_t *tseq = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)N * sizeof(int32_t), "token sequences (preference)");
  /* at most N pairs seen (each has a token on one side at least; a valid
   * one on both, so at most N / 2 valid), two sequences each */
  int32_t *segof = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N + 1) * sizeof(int32_t), "pair segments");
  gt_pref_seq *seq = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(2 * N + 2) * sizeof(gt_pref_seq), "pair sums");
  double *dl = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N + 2) * sizeof(double), "pair coefficients");
  gt_pref_seq *vseq = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N + 2) * sizeof(gt_pref_seq), "valid pair sums");
  int32_t *vmap = gt_mem_alloc_uninit_named(mem, GT_MEM_TEMP, (size_t)(N + 1) * sizeof(int32_t), "valid pair index");
  gt_rc rc = GT_OK;
  if (!h || !rstd || (bwd && !dh) || !logits || !tok || !lse || !tseq || !segof || !seq || !dl || !vseq || !vmap) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "head: no memory for the preference loss of %lld tokens (tile %lld x %lld)",
                    (long long)N, (long long)R, (long long)V);
    goto done;
  }
  if (gt_mem_measuring(mem)) goto done;
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(h, rstd, x, wn, N, (int)d, m->eps, m->norm_offset, m->bf16_act));
  for (int t = 0; t < n_tiles; t++) {
    const float *ht = h + (int64_t)t * R * d;
    const int32_t *tt = targets + (int64_t)t * R;
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, logits, ht, (gt__weight){E, m->embed_qtype}, R, d, V, m->bf16_act));
    if (cap)
      GT_PROF(m->prof, GT_PROF_XENT, gt_softcap_xent_forward(tok + (int64_t)t * R, lse + (int64_t)t * R, logits, tt, R, V, m->softcap));
    else
      GT_PROF(m->prof, GT_PROF_XENT, gt_xent_forward(tok + (int64_t)t * R, lse + (int64_t)t * R, logits, tt, R, V));
  }
  /* the pairs: only those with tokens on both sides go to the loss */
  int64_t np = gt__pref_gather(ph, targets, tok, B, tseq, segof, seq), nv = 0;
  for (int64_t p = 0; p < np; p++) {
    if (seq[2 * p].n > 0 && seq[2 * p + 1].n > 0) {
      vmap[p] = (int32_t)nv;
      vseq[2 * nv] = seq[2 * p];
      vseq[2 * nv + 1] = seq[2 * p + 1];
      nv++;
    } else {
      vmap[p] = -1;
    }
  }
  if (nv > 0) ph->pairs(ph->ctx, nv, vseq, bwd ? dl : NULL, st);
  if (!bwd) goto done;
  /* d(loss)/d(token loss) = -d(loss)/d(logp) of its sequence: the tokens'
   * weights, into tok (its losses are no longer needed) */
  for (int64_t i = 0; i < N; i++) {
    int32_t k = tseq[i];
    int32_t v = k >= 0 ? vmap[k / 2] : -1;
    tok[i] = v >= 0 ? (float)(-(double)row_weight * dl[2 * v + (k & 1)]) : 0.0f;
  }
  for (int t = 0; t < n_tiles; t++) {
    const float *ht = h + (int64_t)t * R * d;
    const int32_t *tt = targets + (int64_t)t * R;
    if (n_tiles > 1) { /* the tile's logits again: the forward's were overwritten by the next tile */
      GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, logits, ht, (gt__weight){E, m->embed_qtype}, R, d, V, m->bf16_act));
      if (cap) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_softcap_forward(logits, R * V, m->softcap));
    }
    gt__head_tile_backward(m, logits, lse + (int64_t)t * R, tt, tok + (int64_t)t * R, 0.0f, cap ? m->softcap : 0.0f,
                           dh + (int64_t)t * R * d, gE, ht, E, R, d, V);
  }
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_residual_backward(dx, gN, NULL, dh, x, rstd, wn, N, (int)d,
                                                                   m->norm_offset, 0));
done:
  gt_mem_free(mem, h);
  gt_mem_free(mem, rstd);
  gt_mem_free(mem, dh);
  gt_mem_free(mem, logits);
  gt_mem_free(mem, tok);
  gt_mem_free(mem, lse);
  gt_mem_free(mem, tseq);
  gt_mem_free(mem, segof);
  gt_mem_free(mem, seq);
  gt_mem_free(mem, dl);
  gt_mem_free(mem, vseq);
  gt_mem_free(mem, vmap);
  return rc;
}

gt_rc gt__head_run(gt_model *m, const float *hp, const float *hm, float *hg, const float *x, const int32_t *targets, int64_t N,
                   int n_tiles, float row_weight, float *dx, float *logits_out, gt_loss_stats *st, gt_err *err) {
  if (m->pref && !logits_out) return gt__head_pref(m, hp, hm, hg, x, targets, N, n_tiles, row_weight, dx, st, err);
  gt_mem *mem = m->mem;
  int64_t d = m->d, V = m->vocab;
  if (n_tiles < 1 || N % n_tiles)
    return gt_err_set(err, GT_ERR_ARG, "head: %lld tokens do not split into %d vocab tiles",
                      (long long)N, n_tiles);
  int64_t R = N / n_tiles;
  /* the head unit starts at 0; a frozen tensor has no gradient (NULL) */
  const float *E = (hm ? hm : hp) + m->embed_offset;
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
  GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_rmsnorm_forward_rnd(h, rstd, x, wn, N, (int)d, m->eps, m->norm_offset, m->bf16_act));
  if (roww)
    for (int64_t r = 0; r < R; r++) roww[r] = row_weight;
  for (int t = 0; t < n_tiles; t++) {
    const float *ht = h + (int64_t)t * R * d;
    const int32_t *tt = targets + (int64_t)t * R;
    /* dtype=bfloat16: the logits come out of the head in bf16, as MaxText's
     * do before it casts them to float32 for the loss */
    GT_PROF(m->prof, GT_PROF_MATMUL, gt__matmul_forward(m, logits, ht, (gt__weight){E, m->embed_qtype}, R, d, V, m->bf16_act));
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
    gt__head_tile_backward(m, logits, lse, tt, roww, m->z_loss, cap ? m->softcap : 0.0f, dh + (int64_t)t * R * d, gE, ht,
                           E, R, d, V);
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
