/* The decoder: prefill of a prompt in one pass, then one token per step
 * against the KV cache.
 *
 * Neither path has math of its own. Prefill is the training layer
 * (gt_layer_forward) over the prompt, after which each layer's keys and
 * values (after k-norm and RoPE) are copied into the cache. A step runs the
 * layer's ops that produce q, k and v for the one token, appends k and v to
 * the cache, runs gt_attention_decode over the visible cached positions in
 * place of the training attention op, and runs the remaining ops. The logits
 * come from the training output head on the last row.
 *
 * Gemma 4: a KV-shared layer has no k/v ops; it attends over its donor's
 * cache (gt_kv_cache) and, in prefill, over the donor's prompt keys, which are
 * kept until the prefill ends. PLE models compute the per-layer inputs of the
 * prompt (or of the one token) with the training PLE code first. */
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "kernels/bf16.h"
#include "model/qstore.h"
#include "kernels/kernels.h"
#include "model/head.h"
#include "model/linear.h"
#include "model/ple.h"

static void gt__free_tables(gt_decoder *d) {
  for (int r = 0; r < GT_MAX_ROPE; r++) {
    gt_mem_free(d->m->mem, d->rope_cos[r]);
    gt_mem_free(d->m->mem, d->rope_sin[r]);
    d->rope_cos[r] = d->rope_sin[r] = NULL;
  }
}

void gt_decoder_free(gt_decoder *d) {
  if (!d->m) return;
  gt_kv_cache_free(&d->cache);
  for (int k = 1; k < GT_A_NSLOTS; k++) gt_mem_free(d->m->mem, d->acts[k]); /* slot 0 is d->x */
  gt_mem_free(d->m->mem, d->x);
  gt_mem_free(d->m->mem, d->xn);
  gt_mem_free(d->m->mem, d->ple);
  gt_mem_free(d->m->mem, d->rounded);
  gt__free_tables(d);
  memset(d, 0, sizeof *d);
}

gt_rc gt_decoder_init(gt_decoder *d, gt_model *m, int64_t max_len, gt_err *err) {
  memset(d, 0, sizeof *d);
  if (!m->params || m->view || !m->mem)
    return gt_err_set(err, GT_ERR_ARG, "decode: the model's parameters must be allocated in one place (not sharded)");
  if (max_len < 1) return gt_err_set(err, GT_ERR_ARG, "decode: a context of %lld positions", (long long)max_len);
  d->m = m;
  d->view = *m;
  d->params = m->params;
  gt_rc rc;
  if (m->bf16_act) {
    if (!(d->rounded = gt_mem_alloc_uninit_named(m->mem, GT_MEM_GATHERED, (size_t)m->n_params * sizeof(float),
                                                 "weights (bf16 copy)")))
      return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the bf16 copy of %lld weights",
                        (long long)m->n_params);
    memcpy(d->rounded, m->params, (size_t)m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) /* a quantized tensor is already in its storage format */
      if (m->tensors[i].dtype == GT_STORE_F32) gt_bf16_round(d->rounded + m->tensors[i].offset, m->tensors[i].numel);
    d->params = d->rounded;
  }
  if (max_len > m->max_pos) {
    /* The model's tables stop at max_target_length; a longer context gets
     * tables of its own, filled by the same function (entries do not depend
     * on the table length, so positions below max_pos are the model's). */
    d->view.max_pos = max_len;
    rc = gt_model_alloc_tables(&d->view, m->mem, err);
    for (int r = 0; r < m->n_rope; r++) d->rope_cos[r] = d->view.rope_cos[r], d->rope_sin[r] = d->view.rope_sin[r];
    if (rc) goto fail;
  }
  if ((rc = gt_kv_cache_init(&d->cache, m, max_len, m->mem, err))) goto fail;
  for (int k = 1; k < GT_A_NSLOTS; k++) { /* slot 0, the layer input, is d->x */
    int64_t n = 1;
    for (int64_t l = 0; l < m->n_layers; l++) {
      int64_t nl = gt_act_numel(m, &m->layers[l], (gt_act)k, 1, 1);
      n = nl > n ? nl : n;
    }
    if (!(d->acts[k] = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)n * sizeof(float)))) goto nomem;
  }
  d->x = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)m->d * sizeof(float));
  d->xn = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)m->d * sizeof(float));
  if (!d->x || !d->xn) goto nomem;
  if (m->ple_dim && !(d->ple = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)(m->n_layers * m->ple_dim) * sizeof(float))))
    goto nomem;
  return GT_OK;
nomem:
  rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for one token's activations");
fail:
  gt_decoder_free(d);
  return rc;
}

void gt_decoder_reset(gt_decoder *d) { d->cache.len = 0; }

static gt_rc gt__check_ids(const gt_decoder *d, const int32_t *ids, int64_t n, gt_err *err) {
  if (d->cache.len + n > d->cache.max_len)
    return gt_err_set(err, GT_ERR_ARG, "decode: %lld more positions after %lld exceed the cache's %lld",
                      (long long)n, (long long)d->cache.len, (long long)d->cache.max_len);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= d->m->vocab)
      return gt_err_set(err, GT_ERR_ARG, "decode: token %lld has id %d, outside the vocabulary of %lld", (long long)i,
                        ids[i], (long long)d->m->vocab);
  return GT_OK;
}

/* Logits of the last of the rows in x: the final norm and tied head. */
static gt_rc gt__logits(gt_decoder *d, const float *x_last, float *logits, gt_err *err) {
  int64_t off, cnt;
  gt_model_unit(d->m, 0, &off, &cnt);
  const int32_t no_target = -1;
  gt_loss_stats st = {0};
  return gt__head_run(&d->view, d->params + off, NULL, NULL, x_last, &no_target, 1, 1, 0.0f, NULL, logits, &st, err);
}

/* Copies the keys and values of positions [p0, p0 + n) (rows of k and v)
 * into layer l's cache; only the last cap of them survive in a ring. */
static void gt__store(gt_kv_cache *c, int64_t l, const float *k, const float *v, int64_t p0, int64_t n) {
  gt_kv_layer *kl = &c->layers[l];
  if (kl->src != l) return; /* a sharing layer writes nothing */
  size_t row = (size_t)kl->n_kv_heads * (size_t)kl->head_dim;
  for (int64_t i = n > kl->cap ? n - kl->cap : 0; i < n; i++) {
    int64_t r = (p0 + i) % kl->cap;
    memcpy(kl->k + (size_t)r * row, k + (size_t)i * row, row * sizeof(float));
    memcpy(kl->v + (size_t)r * row, v + (size_t)i * row, row * sizeof(float));
  }
}

gt_rc gt_decoder_prefill(gt_decoder *d, const int32_t *ids, int64_t n, float *logits, gt_err *err) {
  gt_model *m = d->m;
  if (d->cache.len != 0) return gt_err_set(err, GT_ERR_ARG, "decode: prefill needs an empty cache (reset first)");
  if (n < 1) return gt_err_set(err, GT_ERR_ARG, "decode: prefill of %lld tokens; the prompt needs at least one", (long long)n);
  gt_rc rc = gt__check_ids(d, ids, n, err);
  if (rc) return rc;
  int64_t dm = m->d;
  int32_t *pos = malloc((size_t)n * sizeof(int32_t));
  float *x = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, (size_t)(n * dm) * sizeof(float));
  float *a[GT_A_NSLOTS] = {0};
  float *xn = NULL, *ple = NULL;
  /* a KV donor's prompt keys and values, kept for the layers that share them
   * (the ring alone does not hold a prompt longer than the window) */
  float **kept = calloc((size_t)(2 * m->n_layers), sizeof(float *));
  if (!pos || !x || !kept) goto nomem;
  for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)i;
  gt_qstore_lookup(m, m->embed_qtype, d->params + m->embed_offset, m->vocab, dm, ids, n, m->emb_scale, x);
  gt__act_round(m, x, n * dm);
  if (m->ple_dim) {
    int64_t hoff, hcnt;
    gt_model_unit(m, 0, &hoff, &hcnt);
    if (!(ple = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, (size_t)(n * m->n_layers * m->ple_dim) * sizeof(float))))
      goto nomem;
    if ((rc = gt__ple_forward(m, d->params + hoff, x, ids, n, ple, err))) goto done;
  }
  for (int64_t l = 0; l < m->n_layers; l++) {
    const gt_layer_desc *L = &m->layers[l];
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      int64_t numel = gt_act_numel(m, L, (gt_act)k, 1, n);
      if (numel && !(a[k] = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, (size_t)numel * sizeof(float)))) goto nomem;
    }
    if (!(xn = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, (size_t)(n * dm) * sizeof(float)))) goto nomem;
    a[GT_A_X_IN] = x;
    gt_layer_io io = {.m = &d->view, .L = L, .B = 1, .T = (int)n, .pos = pos, .params = d->params + L->param_offset};
    if (L->kv_donor >= 0) io.kv_k = kept[2 * L->kv_donor], io.kv_v = kept[2 * L->kv_donor + 1];
    if (L->ple_dim) io.ple = ple + l * L->ple_dim, io.ple_stride = m->n_layers * L->ple_dim;
    gt_layer_forward(&io, a, xn);
    if (L->kv_donor < 0) gt__store(&d->cache, l, a[GT_A_K], a[GT_A_V], 0, n);
    for (int64_t r = l + 1; r < m->n_layers; r++)
      if (m->layers[r].kv_donor == l) { /* a donor: its readers come later */
        kept[2 * l] = a[GT_A_K], kept[2 * l + 1] = a[GT_A_V];
        a[GT_A_K] = a[GT_A_V] = NULL;
        break;
      }
    for (int k = 1; k < GT_A_NSLOTS; k++) gt_mem_free(m->mem, a[k]), a[k] = NULL;
    gt_mem_free(m->mem, x);
    x = xn;
    xn = NULL;
  }
  d->cache.len = n;
  rc = gt__logits(d, x + (n - 1) * dm, logits, err);
  goto done;
nomem:
  rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory to prefill %lld tokens", (long long)n);
done:
  for (int k = 1; k < GT_A_NSLOTS; k++) gt_mem_free(m->mem, a[k]);
  for (int64_t k = 0; kept && k < 2 * m->n_layers; k++) gt_mem_free(m->mem, kept[k]);
  free(kept);
  gt_mem_free(m->mem, ple);
  gt_mem_free(m->mem, xn);
  gt_mem_free(m->mem, x);
  free(pos);
  return rc;
}

gt_rc gt_decoder_step(gt_decoder *d, int32_t id, float *logits, gt_err *err) {
  gt_model *m = d->m;
  gt_rc rc = gt__check_ids(d, &id, 1, err);
  if (rc) return rc;
  const int64_t p = d->cache.len;
  const int32_t pos = (int32_t)p;
  const uint32_t attn = gt_layer_attention_op(), before = attn - 1;
  gt_qstore_lookup(m, m->embed_qtype, d->params + m->embed_offset, m->vocab, m->d, &id, 1, m->emb_scale, d->x);
  gt__act_round(m, d->x, m->d);
  if (d->ple) {
    int64_t hoff, hcnt;
    gt_model_unit(m, 0, &hoff, &hcnt);
    if ((rc = gt__ple_forward(m, d->params + hoff, d->x, &id, 1, d->ple, err))) return rc;
  }
  for (int64_t l = 0; l < m->n_layers; l++) {
    const gt_layer_desc *L = &m->layers[l];
    gt_layer_io io = {.m = &d->view, .L = L, .B = 1, .T = 1, .pos = &pos, .params = d->params + L->param_offset};
    const uint32_t after = gt_layer_all_ops(L) & ~(attn | before);
    if (L->ple_dim) io.ple = d->ple + l * L->ple_dim, io.ple_stride = m->n_layers * L->ple_dim;
    d->acts[GT_A_X_IN] = d->x;
    /* a KV-shared layer's kind has no k/v ops and no cache of its own */
    gt_layer_forward_ops(&io, d->acts, before, d->xn);
    if (L->kv_donor < 0) gt__store(&d->cache, l, d->acts[GT_A_K], d->acts[GT_A_V], p, 1);
    const gt_kv_layer *src = &d->cache.layers[d->cache.layers[l].src];
    int64_t start, n;
    gt_kv_visible(&d->cache, l, p, &start, &n);
    gt_attn_cache_dims ad = {L->n_heads, L->n_kv_heads, L->head_dim, src->cap, start, n, L->q_scale};
    gt_attention_decode(d->acts[GT_A_CTX], d->acts[GT_A_Q], src->k, src->v, &ad);
    gt_layer_forward_ops(&io, d->acts, after, d->xn);
    float *t = d->x;
    d->x = d->xn;
    d->xn = t;
  }
  d->acts[GT_A_X_IN] = NULL; /* not owned: d->x */
  d->cache.len = p + 1;
  return gt__logits(d, d->x, logits, err);
}
