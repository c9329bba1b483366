/* The tokenizer pipeline around the BPE model, in HF tokenizers' order:
 * added tokens are cut out of the raw text first (leftmost-longest), each
 * remaining segment is normalized, pre-tokenized into words, and each word
 * goes through BPE; the post-processor's tokens are added last. Decoding maps
 * ids to strings and runs the decoder steps over the list. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

int gt__utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0; /* no overlong forms */
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else
    return 0;
  if ((size_t)len > n || s[1] < lo || s[1] > hi) return 0;
  for (int k = 2; k < len; k++)
    if ((s[k] & 0xC0) != 0x80) return 0;
  return len;
}

int32_t gt_tokenizer_n_ids(const gt_tokenizer *t) { return t->n_ids; }

const char *gt_tokenizer_token(const gt_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_ids || !t->flags[id]) return NULL;
  *len = (size_t)(t->tok[id] & 0xffffff);
  return t->pool + (t->tok[id] >> 24);
}

int gt_tokenizer_is_special(const gt_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_ids && (t->flags[id] & 2) != 0;
}

int32_t gt_tokenizer_token_id(const gt_tokenizer *t, const char *tok, size_t len) {
  /* added tokens first, as HF's token_to_id */
  if (len > 0 && t->root[(unsigned char)tok[0]] >= 0) {
    int32_t cur = t->root[(unsigned char)tok[0]];
    for (size_t i = 1; i < len && cur >= 0; i++) {
      int32_t c = t->trie[cur].child;
      while (c >= 0 && t->trie[c].byte != (unsigned char)tok[i]) c = t->trie[c].sibling;
      cur = c;
    }
    if (cur >= 0 && t->trie[cur].id >= 0) return t->trie[cur].id;
  }
  return gt__vocab_get(t, tok, len);
}

/* ---- a growable byte buffer ---- */

typedef struct gt__buf {
  char *p;
  size_t n, cap;
} gt__buf;

static int gt__buf_put(gt__buf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n + 1) nc *= 2;
    char *p = realloc(b->p, nc);
    if (!p) return -1;
    b->p = p;
    b->cap = nc;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

/* Appends s with every occurrence of pat (left to right, not overlapping)
 * replaced by rep. */
static int gt__replace_into(gt__buf *out, const char *s, size_t n, gt__str pat, gt__str rep) {
  size_t i = 0, from = 0;
  while (i + pat.n <= n) {
    if (s[i] == pat.p[0] && !memcmp(s + i, pat.p, pat.n)) {
      if (gt__buf_put(out, s + from, i - from) || gt__buf_put(out, rep.p, rep.n)) return -1;
      i += pat.n;
      from = i;
    } else {
      i++;
    }
  }
  return gt__buf_put(out, s + from, n - from);
}

/* ---- encoding ---- */

typedef struct gt__span {
  size_t a, b;
} gt__span;

typedef struct gt__spans {
  gt__span *v;
  int64_t n, cap;
} gt__spans;

static int gt__spans_push(gt__spans *s, size_t a, size_t b) {
  if (s->n == s->cap) {
    int64_t nc = s->cap ? s->cap * 2 : 16;
    gt__span *v = realloc(s->v, (size_t)nc * sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->cap = nc;
  }
  s->v[s->n].a = a;
  s->v[s->n++].b = b;
  return 0;
}

/* One Split step over the span [a, b) of s (HF Split with a String pattern):
 * the span is cut into matches and the text between, then the behaviour
 * decides where each match goes; empty pieces are dropped. */
static int gt__split(const char *s, size_t a, size_t b, const gt__step *st, gt__spans *out) {
  gt__span prev = {a, a};
  int have_prev = 0, prev_match = 0;
  size_t i = a, from = a;
  const gt__str pat = st->a;
  for (;;) {
    int at_end = i + pat.n > b;
    int hit = !at_end && s[i] == pat.p[0] && !memcmp(s + i, pat.p, pat.n);
    if (!at_end && !hit) {
      i++;
      continue;
    }
    /* pieces: [from, i) not a match (when non-empty), then [i, i+len) a match */
    gt__span pieces[2] = {{from, at_end ? b : i}, {i, i + pat.n}};
    int is_match[2] = {0, 1};
    int np = at_end ? 1 : 2;
    for (int k = 0; k < np; k++) {
      gt__span p = pieces[k];
      if (!is_match[k] && p.a == p.b) continue;
      int m = is_match[k];
      switch (st->behavior) {
      case GT__SPLIT_REMOVED:
        if (!m && gt__spans_push(out, p.a, p.b)) return -1;
        break;
      case GT__SPLIT_ISOLATED:
        if (gt__spans_push(out, p.a, p.b)) return -1;
        break;
      case GT__SPLIT_CONTIGUOUS:
        if (m && prev_match && have_prev) {
          prev.b = p.b;
        } else {
          if (have_prev && gt__spans_push(out, prev.a, prev.b)) return -1;
          prev = p;
          have_prev = 1;
        }
        break;
      case GT__SPLIT_PREV:
        /* a match joins the piece before it, unless that was a match too */
        if (m && !prev_match && have_prev) {
          prev.b = p.b;
        } else {
          if (have_prev && gt__spans_push(out, prev.a, prev.b)) return -1;
          prev = p;
          have_prev = 1;
        }
        break;
      case GT__SPLIT_NEXT:
        /* a match joins the piece after it, unless that is a match too */
        if (have_prev && prev_match && !m) {
          prev.b = p.b;
        } else {
          if (have_prev && gt__spans_push(out, prev.a, prev.b)) return -1;
          prev = p;
          have_prev = 1;
        }
        break;
      }
      prev_match = m;
    }
    if (at_end) break;
    i += pat.n;
    from = i;
  }
  if (have_prev && gt__spans_push(out, prev.a, prev.b)) return -1;
  return 0;
}

typedef struct gt__enc {
  const gt_tokenizer *t;
  gt__buf norm, tmp;
  gt__spans sp[2];
  gt__bpe_scratch bpe;
  gt__ids out;
  gt_err *err;
} gt__enc;

static gt_rc gt__nomem_enc(gt__enc *e) {
  return gt_err_set(e->err, GT_ERR_NOMEM, "tokenizer: no memory while encoding");
}

/* A segment of text between added tokens: normalize, pre-tokenize, BPE. */
static gt_rc gt__segment(gt__enc *e, const char *s, size_t n) {
  const gt_tokenizer *t = e->t;
  if (n == 0) return GT_OK;
  e->norm.n = 0;
  if (gt__buf_put(&e->norm, s, n)) return gt__nomem_enc(e);
  for (int k = 0; k < t->n_norm; k++) {
    const gt__step *st = &t->norm[k];
    e->tmp.n = 0;
    int bad;
    if (st->kind == GT__NORM_REPLACE)
      bad = gt__replace_into(&e->tmp, e->norm.p, e->norm.n, st->a, st->b);
    else /* Prepend: only to a non-empty string, as HF */
      bad = e->norm.n && (gt__buf_put(&e->tmp, st->a.p, st->a.n) || gt__buf_put(&e->tmp, e->norm.p, e->norm.n));
    if (bad) return gt__nomem_enc(e);
    if (st->kind == GT__NORM_REPLACE || e->norm.n) {
      gt__buf x = e->norm;
      e->norm = e->tmp;
      e->tmp = x;
    }
  }
  const char *w = e->norm.p;
  gt__spans *cur = &e->sp[0], *nxt = &e->sp[1];
  cur->n = 0;
  if (e->norm.n && gt__spans_push(cur, 0, e->norm.n)) return gt__nomem_enc(e);
  for (int k = 0; k < t->n_pre; k++) {
    nxt->n = 0;
    for (int64_t i = 0; i < cur->n; i++)
      if (gt__split(w, cur->v[i].a, cur->v[i].b, &t->pre[k], nxt)) return gt__nomem_enc(e);
    gt__spans *x = cur;
    cur = nxt;
    nxt = x;
  }
  for (int64_t i = 0; i < cur->n; i++) {
    gt_rc rc = gt__bpe_word(t, w + cur->v[i].a, cur->v[i].b - cur->v[i].a, &e->bpe, &e->out, e->err);
    if (rc) return rc;
  }
  return GT_OK;
}

/* The longest added token starting at s (n bytes left): its id and length. */
static int32_t gt__added_at(const gt_tokenizer *t, const unsigned char *s, size_t n, size_t *len) {
  int32_t cur = t->root[s[0]], best = -1;
  size_t i = 1;
  while (cur >= 0) {
    if (t->trie[cur].id >= 0) {
      best = t->trie[cur].id;
      *len = i;
    }
    if (i == n) break;
    int32_t c = t->trie[cur].child;
    while (c >= 0 && t->trie[c].byte != s[i]) c = t->trie[c].sibling;
    cur = c;
    i++;
  }
  return best;
}

gt_rc gt_tokenizer_encode(const gt_tokenizer *t, const char *text, size_t n, int flags, int32_t **ids,
                          int64_t *n_ids, gt_err *err) {
  gt__enc e;
  memset(&e, 0, sizeof e);
  e.t = t;
  e.err = err;
  *ids = NULL;
  *n_ids = 0;
  gt_rc rc = GT_OK;
  const unsigned char *s = (const unsigned char *)text;
  if (flags & GT_TOK_ADD_SPECIAL)
    for (int i = 0; i < t->n_post_pre && !rc; i++)
      if (gt__ids_push(&e.out, t->post_pre[i])) rc = gt__nomem_enc(&e);
  size_t from = 0;
  for (size_t i = 0; i < n && !rc;) {
    size_t len = 0;
    int32_t id = t->root[s[i]] >= 0 ? gt__added_at(t, s + i, n - i, &len) : -1;
    if (id < 0) {
      i++;
      continue;
    }
    rc = gt__segment(&e, text + from, i - from);
    if (!rc && gt__ids_push(&e.out, id)) rc = gt__nomem_enc(&e);
    i += len;
    from = i;
  }
  if (!rc) rc = gt__segment(&e, text + from, n - from);
  if (flags & GT_TOK_ADD_SPECIAL)
    for (int i = 0; i < t->n_post_suf && !rc; i++)
      if (gt__ids_push(&e.out, t->post_suf[i])) rc = gt__nomem_enc(&e);
  free(e.norm.p);
  free(e.tmp.p);
  free(e.sp[0].v);
  free(e.sp[1].v);
  gt__bpe_scratch_free(&e.bpe);
  if (rc) {
    free(e.out.v);
    return rc;
  }
  if (!e.out.v) e.out.v = malloc(sizeof(int32_t)); /* a valid pointer for an empty result */
  if (!e.out.v) return gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory while encoding");
  *ids = e.out.v;
  *n_ids = e.out.n;
  return GT_OK;
}

size_t gt_tokenizer_split_point(const gt_tokenizer *t, const char *text, size_t n, size_t max) {
  if (!t->newline_splits || n == 0) return 0;
  /* the byte after the cut must be known (another newline would continue
   * the run), so the text may be a prefix of a longer one */
  if (max >= n) max = n - 1;
  for (size_t p = max; p > 0; p--)
    if (text[p - 1] == '\n' && text[p] != '\n') return p;
  return 0;
}

/* ---- decoding ---- */

/* A list of strings: string i is p[off[i] .. off[i+1]). */
typedef struct gt__strs {
  gt__buf b;
  size_t *off;
  int64_t n, cap;
} gt__strs;

/* Ends string n (whose bytes were appended to b). */
static int gt__strs_end(gt__strs *l) {
  if (l->n + 2 > l->cap) {
    int64_t nc = l->cap ? l->cap * 2 : 64;
    size_t *o = realloc(l->off, (size_t)nc * sizeof *o);
    if (!o) return -1;
    l->off = o;
    l->cap = nc;
  }
  if (l->n == 0) l->off[0] = 0;
  l->off[++l->n] = l->b.n;
  return 0;
}

static void gt__strs_free(gt__strs *l) {
  free(l->b.p);
  free(l->off);
}

static int gt__byte_token(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; k++) {
    char c = s[k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

static int gt__utf8_valid(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    int l = gt__utf8_len(s + i, n - i);
    if (!l) return 0;
    i += (size_t)l;
  }
  return 1;
}

/* Flushes a run of byte-fallback bytes as one string, or (HF) as U+FFFD per
 * byte when the run is not valid UTF-8 and `replace` asks for it. */
static int gt__flush_bytes(gt__strs *o, gt__buf *run, int replace) {
  if (!run->n) return 0;
  if (replace && !gt__utf8_valid((const unsigned char *)run->p, run->n)) {
    for (size_t k = 0; k < run->n; k++)
      if (gt__buf_put(&o->b, "\xEF\xBF\xBD", 3) || gt__strs_end(o)) return -1;
  } else if (gt__buf_put(&o->b, run->p, run->n) || gt__strs_end(o)) {
    return -1;
  }
  run->n = 0;
  return 0;
}

static int gt__decode_step(const gt__step *st, const gt__strs *in, gt__strs *o, int replace) {
  gt__buf run = {0};
  int bad = 0;
  for (int64_t i = 0; i < in->n && !bad; i++) {
    const char *s = in->b.p + in->off[i];
    size_t n = in->off[i + 1] - in->off[i];
    if (st->kind == GT__DEC_REPLACE) {
      bad = gt__replace_into(&o->b, s, n, st->a, st->b) || gt__strs_end(o);
    } else if (st->kind == GT__DEC_BYTE_FALLBACK) {
      int v = gt__byte_token(s, n);
      if (v >= 0) {
        unsigned char c = (unsigned char)v;
        bad = gt__buf_put(&run, &c, 1);
      } else {
        bad = gt__flush_bytes(o, &run, replace) || gt__buf_put(&o->b, s, n) || gt__strs_end(o);
      }
    } else { /* Fuse: everything into one string */
      bad = gt__buf_put(&o->b, s, n);
    }
  }
  if (!bad && st->kind == GT__DEC_BYTE_FALLBACK) bad = gt__flush_bytes(o, &run, replace);
  if (!bad && st->kind == GT__DEC_FUSE) bad = gt__strs_end(o);
  free(run.p);
  return bad ? -1 : 0;
}

gt_rc gt_tokenizer_decode(const gt_tokenizer *t, const int32_t *ids, int64_t n, int flags, char **out,
                          size_t *n_out, gt_err *err) {
  *out = NULL;
  *n_out = 0;
  gt__strs a = {0}, b = {0};
  gt_rc rc = GT_OK;
  for (int64_t i = 0; i < n && !rc; i++) {
    size_t len;
    const char *s = gt_tokenizer_token(t, ids[i], &len);
    if (!s) {
      rc = gt_err_set(err, GT_ERR_ARG, "tokenizer: cannot decode id %d at index %lld; ids run 0 .. %d", ids[i],
                      (long long)i, t->n_ids - 1);
      break;
    }
    if ((flags & GT_TOK_DECODE_SKIP_SPECIAL) && (t->flags[ids[i]] & 2)) continue;
    if (gt__buf_put(&a.b, s, len) || gt__strs_end(&a)) rc = gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory");
  }
  for (int k = 0; k < t->n_dec && !rc; k++) {
    b.b.n = 0;
    b.n = 0;
    if (gt__decode_step(&t->dec[k], &a, &b, (flags & GT_TOK_DECODE_REPLACE) != 0))
      rc = gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory");
    gt__strs x = a;
    a = b;
    b = x;
  }
  if (!rc && gt__buf_put(&a.b, "", 0)) rc = gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory");
  gt__strs_free(&b);
  if (rc) {
    gt__strs_free(&a);
    return rc;
  }
  free(a.off);
  *out = a.b.p;
  *n_out = a.b.n;
  return GT_OK;
}
