/* The decoding KV cache: one entry per layer, laid out from its descriptor.
 *
 * A local layer's query sees at most `window` positions (its own included),
 * so it keeps exactly that many rows and overwrites the oldest: position p
 * lives in row p % cap. A global layer keeps every position up to max_len
 * (then cap = max_len and p % cap = p). Rows are position-major,
 * [cap, n_kv_heads * head_dim], so writing one token is one contiguous copy. */
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

/* The layer whose cache layer l reads. A Gemma 4 KV-shared layer (spec 3.5)
 * reads its donor's (the last non-shared layer of the same attention kind,
 * so the same window and ring size), gets no cache of its own, and computes
 * no k or v (its layer kind has no such ops). Every other layer owns one. */
static int gt__kv_src(const gt_model *m, int64_t l) {
  return m->layers[l].kv_donor >= 0 ? m->layers[l].kv_donor : (int)l;
}

static int64_t gt__kv_cap(const gt_layer_desc *L, int64_t max_len) {
  return L->window > 0 && L->window < max_len ? L->window : max_len;
}

int64_t gt_kv_cache_bytes(const gt_model *m, int64_t max_len) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < m->n_layers; l++) {
    const gt_layer_desc *L = &m->layers[l];
    if (gt__kv_src(m, l) != l) continue;
    bytes += 2 * gt__kv_cap(L, max_len) * L->n_kv_heads * L->head_dim * (int64_t)sizeof(float);
  }
  return bytes;
}

gt_rc gt_kv_cache_init(gt_kv_cache *c, const gt_model *m, int64_t max_len, gt_mem *mem, gt_err *err) {
  memset(c, 0, sizeof *c);
  if (max_len < 1) return gt_err_set(err, GT_ERR_ARG, "kv cache: max_len %lld must be at least 1", (long long)max_len);
  c->layers = calloc((size_t)m->n_layers, sizeof *c->layers);
  if (!c->layers) return gt_err_set(err, GT_ERR_NOMEM, "kv cache: no memory for %lld layer entries", (long long)m->n_layers);
  c->n_layers = m->n_layers;
  c->max_len = max_len;
  c->mem = mem;
  for (int64_t l = 0; l < m->n_layers; l++) {
    const gt_layer_desc *L = &m->layers[l];
    gt_kv_layer *kl = &c->layers[l];
    kl->src = gt__kv_src(m, l);
    kl->window = L->window;
    kl->n_kv_heads = L->n_kv_heads;
    kl->head_dim = L->head_dim;
    kl->cap = gt__kv_cap(L, max_len);
    if (kl->src != l) continue;
    size_t bytes = (size_t)kl->cap * (size_t)L->n_kv_heads * (size_t)L->head_dim * sizeof(float);
    kl->k = gt_mem_alloc_uninit(mem, GT_MEM_KVCACHE, bytes);
    kl->v = gt_mem_alloc_uninit(mem, GT_MEM_KVCACHE, bytes);
    if (!kl->k || !kl->v) {
      gt_kv_cache_free(c);
      return gt_err_set(err, GT_ERR_NOMEM, "kv cache: no memory for layer %lld (%lld positions, %.1f MiB)",
                        (long long)l, (long long)kl->cap, 2.0 * (double)bytes / 1048576.0);
    }
  }
  return GT_OK;
}

void gt_kv_cache_free(gt_kv_cache *c) {
  if (c->layers)
    for (int64_t l = 0; l < c->n_layers; l++) {
      gt_mem_free(c->mem, c->layers[l].k);
      gt_mem_free(c->mem, c->layers[l].v);
    }
  free(c->layers);
  memset(c, 0, sizeof *c);
}

void gt_kv_visible(const gt_kv_cache *c, int64_t l, int64_t pos, int64_t *start, int64_t *n) {
  const gt_kv_layer *kl = &c->layers[l];
  int64_t first = kl->window > 0 && pos - kl->window + 1 > 0 ? pos - kl->window + 1 : 0;
  *start = first % c->layers[kl->src].cap; /* the rows live in the source layer's ring */
  *n = pos - first + 1;
}
