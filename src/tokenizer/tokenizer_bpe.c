/* The BPE model on one pre-tokenized word, as HF tokenizers' BPE::merge_word
 * and Word::merge_all do it: one symbol per character (or its byte-fallback
 * tokens), then merges applied lowest rank first, leftmost first among equal
 * ranks. Symbols form a doubly linked list and candidate pairs sit in a
 * binary min-heap keyed by (rank, position), so a word of n symbols costs
 * O(n log n) however long it is: Gemma's pre-tokenizer does not split at
 * spaces, so a "word" is a whole line of text. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

int gt__ids_push(gt__ids *a, int32_t id) {
  if (a->n == a->cap) {
    int64_t nc = a->cap ? a->cap * 2 : 64;
    int32_t *v = realloc(a->v, (size_t)nc * sizeof(int32_t));
    if (!v) return -1;
    a->v = v;
    a->cap = nc;
  }
  a->v[a->n++] = id;
  return 0;
}

void gt__bpe_scratch_free(gt__bpe_scratch *s) {
  free(s->id);
  free(s->prev);
  free(s->next);
  free(s->heap);
  memset(s, 0, sizeof *s);
}

static int gt__scratch_reserve(gt__bpe_scratch *s, int64_t n) {
  if (n <= s->cap) return 0;
  int64_t nc = s->cap ? s->cap : 256;
  while (nc < n) nc *= 2;
  int32_t *a = realloc(s->id, (size_t)nc * sizeof(int32_t));
  if (!a) return -1;
  s->id = a;
  a = realloc(s->prev, (size_t)nc * sizeof(int32_t));
  if (!a) return -1;
  s->prev = a;
  a = realloc(s->next, (size_t)nc * sizeof(int32_t));
  if (!a) return -1;
  s->next = a;
  s->cap = nc;
  return 0;
}

/* ---- binary min-heap of (rank << 32 | position) ---- */

static int gt__heap_push(gt__bpe_scratch *s, int64_t *n, uint64_t key) {
  if (*n == s->heap_cap) {
    int64_t nc = s->heap_cap ? s->heap_cap * 2 : 256;
    uint64_t *h = realloc(s->heap, (size_t)nc * sizeof(uint64_t));
    if (!h) return -1;
    s->heap = h;
    s->heap_cap = nc;
  }
  uint64_t *h = s->heap;
  int64_t i = (*n)++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (h[p] <= key) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = key;
  return 0;
}

static uint64_t gt__heap_pop(gt__bpe_scratch *s, int64_t *n) {
  uint64_t *h = s->heap, top = h[0], last = h[--(*n)];
  int64_t i = 0, m = *n;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= m) break;
    if (c + 1 < m && h[c + 1] < h[c]) c++;
    if (h[c] >= last) break;
    h[i] = h[c];
    i = c;
  }
  if (m > 0) h[i] = last;
  return top;
}

static int gt__queue_pair(const gt_tokenizer *t, gt__bpe_scratch *s, int64_t *hn, int32_t pos) {
  int32_t rank, merged;
  int32_t nx = s->next[pos];
  if (nx < 0 || !gt__merge_get(t, s->id[pos], s->id[nx], &rank, &merged)) return 0;
  return gt__heap_push(s, hn, (uint64_t)(uint32_t)rank << 32 | (uint32_t)pos);
}

/* ---- one word ---- */

/* Appends a symbol; fails only on memory. */
static int gt__sym(gt__bpe_scratch *s, int64_t *n, int32_t id) {
  if (gt__scratch_reserve(s, *n + 1)) return -1;
  s->id[*n] = id;
  (*n)++;
  return 0;
}

/* The initial symbols (HF merge_word): a character in the vocabulary is one
 * symbol; otherwise its bytes as <0xNN> when byte_fallback has them all;
 * otherwise <unk>, consecutive ones fused with fuse_unk (no unk token: the
 * character is dropped, as HF does). A byte that is not valid UTF-8 is a
 * character of its own here, which the vocabulary never holds. */
static gt_rc gt__init_symbols(const gt_tokenizer *t, const unsigned char *w, size_t n, gt__bpe_scratch *s,
                              int64_t *ns, gt_err *err) {
  int pending_unk = 0; /* an <unk> waiting to be added (fuse_unk may extend it) */
  for (size_t i = 0; i < n;) {
    int cl = gt__utf8_len(w + i, n - i);
    size_t len = cl > 0 ? (size_t)cl : 1;
    int32_t id = cl > 0 ? gt__vocab_get(t, (const char *)w + i, len) : -1;
    if (id >= 0) {
      if (pending_unk && gt__sym(s, ns, t->unk_id)) goto nomem;
      pending_unk = 0;
      if (gt__sym(s, ns, id)) goto nomem;
    } else {
      int all = t->byte_fallback;
      for (size_t k = 0; all && k < len; k++) all = t->byte_id[w[i + k]] >= 0;
      if (all) {
        /* HF leaves a pending <unk> pending here: it lands after these bytes */
        for (size_t k = 0; k < len; k++)
          if (gt__sym(s, ns, t->byte_id[w[i + k]])) goto nomem;
      } else if (t->unk_id >= 0) {
        if (pending_unk && !t->fuse_unk && gt__sym(s, ns, t->unk_id)) goto nomem;
        pending_unk = 1;
      }
    }
    i += len;
  }
  if (pending_unk && gt__sym(s, ns, t->unk_id)) goto nomem;
  return GT_OK;
nomem:
  return gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory for a word of %zu bytes", n);
}

gt_rc gt__bpe_word(const gt_tokenizer *t, const char *w, size_t n, gt__bpe_scratch *s, gt__ids *out,
                   gt_err *err) {
  if (n == 0) return GT_OK;
  if (n >= 0x7fffffff)
    return gt_err_set(err, GT_ERR_ARG, "tokenizer: a word of %zu bytes is too long (limit 2^31 bytes)", n);
  if (t->ignore_merges) {
    int32_t id = gt__vocab_get(t, w, n);
    if (id >= 0) {
      if (gt__ids_push(out, id)) goto nomem;
      return GT_OK;
    }
  }
  int64_t ns = 0;
  gt_rc rc = gt__init_symbols(t, (const unsigned char *)w, n, s, &ns, err);
  if (rc) return rc;
  for (int64_t i = 0; i < ns; i++) {
    s->prev[i] = (int32_t)i - 1;
    s->next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
  }
  int64_t hn = 0;
  for (int64_t i = 0; i + 1 < ns; i++)
    if (gt__queue_pair(t, s, &hn, (int32_t)i)) goto nomem;
  while (hn > 0) {
    uint64_t top = gt__heap_pop(s, &hn);
    int32_t pos = (int32_t)(top & 0xffffffffu), rank = (int32_t)(top >> 32);
    int32_t nx = s->next[pos];
    /* a stale entry: this symbol was merged away, or its pair changed
     * (boundaries only disappear, so the same rank means the same pair) */
    if (s->id[pos] < 0 || nx < 0) continue;
    int32_t r, merged;
    if (!gt__merge_get(t, s->id[pos], s->id[nx], &r, &merged) || r != rank) continue;
    s->id[pos] = merged;
    s->id[nx] = -1;
    int32_t nn = s->next[nx];
    s->next[pos] = nn;
    if (nn >= 0) s->prev[nn] = pos;
    if (s->prev[pos] >= 0 && gt__queue_pair(t, s, &hn, s->prev[pos])) goto nomem;
    if (gt__queue_pair(t, s, &hn, pos)) goto nomem;
  }
  for (int64_t i = 0; i < ns; i++)
    if (s->id[i] >= 0 && gt__ids_push(out, s->id[i])) goto nomem;
  return GT_OK;
nomem:
  return gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory for a word of %zu bytes", n);
}
