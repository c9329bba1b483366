/* Reading tokenizer.json into the tables of src/tokenizer/tokenizer_int.h. Every
 * component type is checked here, so encoding never meets one it does not
 * know: an unsupported type or option is refused with its name. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

uint64_t gt__tok_hash(const char *s, size_t n) { return gt_fnv1a(GT_FNV1A_INIT, s, n); }

static uint32_t gt__pow2_above(uint64_t n) {
  uint32_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

static gt__str gt__tok_str(const gt_tokenizer *t, int32_t id) {
  gt__str s = {t->pool + (t->tok[id] >> 24), (size_t)(t->tok[id] & 0xffffff)};
  return s;
}

int32_t gt__vocab_get(const gt_tokenizer *t, const char *s, size_t n) {
  for (uint32_t i = (uint32_t)gt__tok_hash(s, n) & t->vmask;; i = (i + 1) & t->vmask) {
    int32_t id = t->vhash[i];
    if (id < 0) return -1;
    gt__str k = gt__tok_str(t, id);
    if (k.n == n && !memcmp(k.p, s, n)) return id;
  }
}

static uint32_t gt__pair_slot(uint64_t key, uint32_t mask) {
  key *= 0x9E3779B97F4A7C15ull;
  return (uint32_t)(key >> 32) & mask;
}

int gt__merge_get(const gt_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (uint32_t i = gt__pair_slot(key, t->mmask);; i = (i + 1) & t->mmask) {
    if (t->mkey[i] == ~0ull) return 0;
    if (t->mkey[i] == key) {
      *rank = t->mrank[i];
      *merged = t->mnew[i];
      return 1;
    }
  }
}

/* ---- building ---- */

typedef struct gt__ld {
  gt_tokenizer *t;
  const char *name;
  gt_err *err;
  int32_t cap_ids;
  /* ids are dense: below the number of tokens the file defines (vocab plus
   * added tokens), so a 2 KB file cannot make the id tables gigabytes */
  int64_t id_bound;
} gt__ld;

static gt_rc gt__nomem(gt__ld *L) {
  return gt_err_set(L->err, GT_ERR_NOMEM, "tokenizer: no memory loading '%s'", L->name);
}

/* Copies s into the pool; returns its offset or -1. The pool exists after
 * the first call even for an empty string (a token ""), so that no NULL
 * pool reaches memcpy or memcmp. */
static int64_t gt__pool_add(gt_tokenizer *t, const char *s, size_t n) {
  if (!t->pool || t->pool_len + n > t->pool_cap) {
    size_t nc = t->pool_cap ? t->pool_cap : 1 << 20;
    while (nc < t->pool_len + n) nc *= 2;
    char *p = realloc(t->pool, nc);
    if (!p) return -1;
    t->pool = p;
    t->pool_cap = nc;
  }
  if (n) memcpy(t->pool + t->pool_len, s, n);
  t->pool_len += n;
  return (int64_t)(t->pool_len - n);
}

/* A token id as the JSON number holds it: an integer 0 .. 2^30 - 1,
 * checked on the double before any cast (past INT32_MAX the cast is
 * undefined, and 5000.7 would silently become 5000). what and name say
 * whose id it is ("token", "a"). */
static gt_rc gt__id(gt__ld *L, const cJSON *num, const char *what, const char *name, int32_t *out) {
  double d = num->valuedouble;
  int64_t bound = L->id_bound < (1 << 30) ? L->id_bound : (1 << 30);
  if (d >= 0 && d < (double)bound && d == floor(d)) {
    *out = (int32_t)d;
    return GT_OK;
  }
  char text[40];
  snprintf(text, sizeof text, "%.15g", d);
  if (strtod(text, NULL) != d) snprintf(text, sizeof text, "%.17g", d);
  return gt_err_set(L->err, GT_ERR_FORMAT,
                    "tokenizer: '%s': %s '%s' has id %s; expected an integer 0 .. %lld (ids are dense: the file "
                    "defines %lld tokens)",
                    L->name, what, name, text, (long long)bound - 1, (long long)L->id_bound);
}

/* Records id -> string; the id tables grow to hold it. */
static gt_rc gt__set_token(gt__ld *L, int32_t id, const char *s, unsigned char flag) {
  gt_tokenizer *t = L->t;
  size_t n = strlen(s);
  if (id < 0 || id >= (1 << 30))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': token '%s' has id %d; expected 0 .. 2^30",
                      L->name, s, id);
  if (n >= (1u << 24))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': a token of %zu bytes is too long", L->name, n);
  if (id >= t->n_ids) {
    if (id >= L->cap_ids) { /* geometric growth: vocabularies arrive in id order */
      int32_t nc = L->cap_ids ? L->cap_ids : 1024;
      while (nc <= id) nc *= 2;
      uint64_t *tok = realloc(t->tok, (size_t)nc * sizeof *tok);
      if (tok) t->tok = tok;
      unsigned char *fl = realloc(t->flags, (size_t)nc);
      if (fl) t->flags = fl;
      if (!tok || !fl) return gt__nomem(L);
      L->cap_ids = nc;
    }
    memset(t->tok + t->n_ids, 0, (size_t)(id + 1 - t->n_ids) * sizeof *t->tok);
    memset(t->flags + t->n_ids, 0, (size_t)(id + 1 - t->n_ids));
    t->n_ids = id + 1;
  }
  if ((flag & 4) && (t->flags[id] & 4))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model.vocab gives id %d to two tokens",
                      L->name, id);
  if (!t->flags[id] || !(t->flags[id] & 4)) {
    int64_t off = gt__pool_add(t, s, n);
    if (off < 0) return gt__nomem(L);
    if ((uint64_t)off >= (1ull << 40)) return gt__nomem(L);
    t->tok[id] = (uint64_t)off << 24 | n;
  }
  t->flags[id] |= flag;
  return GT_OK;
}

static const char *gt__type(const cJSON *o) {
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
  return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A {"String": "..."} pattern; Regex patterns are refused. */
static gt_rc gt__pattern(gt__ld *L, const cJSON *o, const char *where, gt__str *out) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
  if (cJSON_GetObjectItemCaseSensitive(p, "Regex"))
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': %s with a Regex pattern is not supported; expected a String pattern",
                      L->name, where);
  if (!cJSON_IsString(s) || !s->valuestring[0])
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': %s needs a non-empty pattern.String", L->name,
                      where);
  int64_t off = gt__pool_add(L->t, s->valuestring, strlen(s->valuestring));
  if (off < 0) return gt__nomem(L);
  out->p = (const char *)(intptr_t)off; /* an offset until the pool stops moving */
  out->n = strlen(s->valuestring);
  return GT_OK;
}

static gt_rc gt__string_field(gt__ld *L, const cJSON *o, const char *key, const char *where, gt__str *out) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(s))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': %s needs a string '%s'", L->name, where, key);
  int64_t off = gt__pool_add(L->t, s->valuestring, strlen(s->valuestring));
  if (off < 0) return gt__nomem(L);
  out->p = (const char *)(intptr_t)off;
  out->n = strlen(s->valuestring);
  return GT_OK;
}

static gt_rc gt__push_step(gt__ld *L, gt__step *steps, int *n, gt__step st, const char *what) {
  if (*n == GT__MAX_STEPS)
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': more than %d %s steps", L->name, GT__MAX_STEPS,
                      what);
  steps[(*n)++] = st;
  return GT_OK;
}

static gt_rc gt__normalizer(gt__ld *L, const cJSON *o) {
  if (!o || cJSON_IsNull(o)) return GT_OK;
  const char *ty = gt__type(o);
  gt__step st = {0};
  gt_rc rc;
  if (ty && !strcmp(ty, "Sequence")) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "normalizers")) if ((rc = gt__normalizer(L, e)))
        return rc;
    return GT_OK;
  }
  if (ty && !strcmp(ty, "Replace")) {
    st.kind = GT__NORM_REPLACE;
    if ((rc = gt__pattern(L, o, "normalizer Replace", &st.a)) ||
        (rc = gt__string_field(L, o, "content", "normalizer Replace", &st.b)))
      return rc;
  } else if (ty && !strcmp(ty, "Prepend")) {
    st.kind = GT__NORM_PREPEND;
    if ((rc = gt__string_field(L, o, "prepend", "normalizer Prepend", &st.a))) return rc;
  } else {
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': normalizer type '%s' is not supported; expected Replace, Prepend or "
                      "Sequence",
                      L->name, ty ? ty : "(none)");
  }
  return gt__push_step(L, L->t->norm, &L->t->n_norm, st, "normalizer");
}

static gt_rc gt__pre_tokenizer(gt__ld *L, const cJSON *o) {
  if (!o || cJSON_IsNull(o)) return GT_OK;
  const char *ty = gt__type(o);
  gt_rc rc;
  if (ty && !strcmp(ty, "Sequence")) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "pretokenizers")) if ((rc = gt__pre_tokenizer(L, e)))
        return rc;
    return GT_OK;
  }
  if (!ty || strcmp(ty, "Split"))
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': pre_tokenizer type '%s' is not supported; expected Split or Sequence",
                      L->name, ty ? ty : "(none)");
  gt__step st = {0};
  if ((rc = gt__pattern(L, o, "pre_tokenizer Split", &st.a))) return rc;
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "invert")))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': pre_tokenizer Split with invert=true is not supported",
                      L->name);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "behavior");
  static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  st.behavior = -1;
  for (int i = 0; i < 5; i++)
    if (cJSON_IsString(b) && !strcmp(b->valuestring, names[i])) st.behavior = i;
  if (st.behavior < 0)
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': pre_tokenizer Split behavior '%s' is unknown; expected Removed, Isolated, "
                      "MergedWithPrevious, MergedWithNext or Contiguous",
                      L->name, cJSON_IsString(b) ? b->valuestring : "(none)");
  return gt__push_step(L, L->t->pre, &L->t->n_pre, st, "pre_tokenizer");
}

static gt_rc gt__decoder(gt__ld *L, const cJSON *o) {
  if (!o || cJSON_IsNull(o)) return GT_OK;
  const char *ty = gt__type(o);
  gt__step st = {0};
  gt_rc rc;
  if (ty && !strcmp(ty, "Sequence")) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "decoders")) if ((rc = gt__decoder(L, e))) return rc;
    return GT_OK;
  }
  if (ty && !strcmp(ty, "Replace")) {
    st.kind = GT__DEC_REPLACE;
    if ((rc = gt__pattern(L, o, "decoder Replace", &st.a)) ||
        (rc = gt__string_field(L, o, "content", "decoder Replace", &st.b)))
      return rc;
  } else if (ty && !strcmp(ty, "ByteFallback")) {
    st.kind = GT__DEC_BYTE_FALLBACK;
  } else if (ty && !strcmp(ty, "Fuse")) {
    st.kind = GT__DEC_FUSE;
  } else {
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': decoder type '%s' is not supported; expected Replace, ByteFallback, Fuse "
                      "or Sequence",
                      L->name, ty ? ty : "(none)");
  }
  return gt__push_step(L, L->t->dec, &L->t->n_dec, st, "decoder");
}

static gt_rc gt__post_processor(gt__ld *L, const cJSON *o) {
  if (!o || cJSON_IsNull(o)) return GT_OK;
  const char *ty = gt__type(o);
  if (!ty || strcmp(ty, "TemplateProcessing"))
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': post_processor type '%s' is not supported; expected TemplateProcessing",
                      L->name, ty ? ty : "(none)");
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
  const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
  const cJSON *e;
  int seen_a = 0;
  gt_tokenizer *t = L->t;
  cJSON_ArrayForEach(e, single) {
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
    if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
      seen_a = 1;
      continue;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
    const cJSON *def = cJSON_IsString(name) ? cJSON_GetObjectItemCaseSensitive(specials, name->valuestring) : NULL;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids"), *id;
    if (!cJSON_IsArray(ids))
      return gt_err_set(L->err, GT_ERR_FORMAT,
                        "tokenizer: '%s': post_processor template names special token '%s' without its ids",
                        L->name, cJSON_IsString(name) ? name->valuestring : "(none)");
    cJSON_ArrayForEach(id, ids) {
      int32_t *dst = seen_a ? t->post_suf : t->post_pre;
      int *n = seen_a ? &t->n_post_suf : &t->n_post_pre;
      if (*n == 8 || !cJSON_IsNumber(id))
        return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': post_processor template is malformed", L->name);
      gt_rc rc = gt__id(L, id, "post_processor special token", name->valuestring, &dst[*n]);
      if (rc) return rc;
      (*n)++;
    }
  }
  if (!seen_a)
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': post_processor template has no $A sequence",
                      L->name);
  return GT_OK;
}

static gt_rc gt__vocab_table(gt__ld *L) {
  gt_tokenizer *t = L->t;
  int64_t nv = 0;
  for (int32_t i = 0; i < t->n_ids; i++) nv += (t->flags[i] & 4) != 0;
  t->vmask = gt__pow2_above((uint64_t)nv) - 1;
  t->vhash = malloc(((size_t)t->vmask + 1) * sizeof(int32_t));
  if (!t->vhash) return gt__nomem(L);
  memset(t->vhash, 0xff, ((size_t)t->vmask + 1) * sizeof(int32_t));
  for (int32_t id = 0; id < t->n_ids; id++) {
    if (!(t->flags[id] & 4)) continue;
    gt__str s = gt__tok_str(t, id);
    if (gt__vocab_get(t, s.p, s.n) >= 0)
      return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model.vocab holds '%.*s' twice", L->name,
                        (int)s.n, s.p);
    uint32_t i = (uint32_t)gt__tok_hash(s.p, s.n) & t->vmask;
    while (t->vhash[i] >= 0) i = (i + 1) & t->vmask;
    t->vhash[i] = id;
  }
  return GT_OK;
}

/* Merges are ["a", "b"] pairs (or "a b" strings in older files); the rank is
 * the position in the list and a repeated pair keeps its last rank, as HF's
 * map does. */
static gt_rc gt__merges(gt__ld *L, const cJSON *merges) {
  gt_tokenizer *t = L->t;
  int n = cJSON_GetArraySize(merges);
  t->mmask = gt__pow2_above((uint64_t)n) - 1;
  size_t cap = (size_t)t->mmask + 1;
  t->mkey = malloc(cap * sizeof(uint64_t));
  t->mrank = malloc(cap * sizeof(int32_t));
  t->mnew = malloc(cap * sizeof(int32_t));
  if (!t->mkey || !t->mrank || !t->mnew) return gt__nomem(L);
  memset(t->mkey, 0xff, cap * sizeof(uint64_t));
  char *buf = NULL;
  size_t bufcap = 0;
  gt_rc rc = GT_OK;
  int rank = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, merges) {
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
      a = m->child->valuestring;
      b = m->child->next->valuestring;
      na = strlen(a);
      nb = strlen(b);
    } else if (cJSON_IsString(m) && strchr(m->valuestring, ' ')) {
      a = m->valuestring;
      b = strchr(a, ' ') + 1;
      na = (size_t)(b - 1 - a);
      nb = strlen(b);
    } else {
      rc = gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': model.merges[%d] is neither a pair of strings nor \"a b\"", L->name, rank);
      break;
    }
    if (na + nb > bufcap) {
      bufcap = 2 * (na + nb);
      char *nbuf = realloc(buf, bufcap);
      if (!nbuf) {
        rc = gt__nomem(L);
        break;
      }
      buf = nbuf;
    }
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int32_t ia = gt__vocab_get(t, a, na), ib = gt__vocab_get(t, b, nb), im = gt__vocab_get(t, buf, na + nb);
    if (ia < 0 || ib < 0 || im < 0) {
      rc = gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': model.merges[%d] ('%.*s', '%.*s') uses a token missing from model.vocab",
                      L->name, rank, (int)na, a, (int)nb, b);
      break;
    }
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    uint32_t i = gt__pair_slot(key, t->mmask);
    while (t->mkey[i] != ~0ull && t->mkey[i] != key) i = (i + 1) & t->mmask;
    t->mkey[i] = key;
    t->mrank[i] = rank++;
    t->mnew[i] = im;
  }
  free(buf);
  return rc;
}

static gt_rc gt__model(gt__ld *L, const cJSON *model) {
  gt_tokenizer *t = L->t;
  const char *ty = gt__type(model);
  if (!cJSON_IsObject(model))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s' has no \"model\" object", L->name);
  if (!ty || strcmp(ty, "BPE"))
    return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model type '%s' is not supported; expected BPE",
                      L->name, ty ? ty : "(none)");
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0)
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': model.dropout = %g is not supported (encoding would not be deterministic)",
                      L->name, dropout->valuedouble);
  static const char *unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, unsupported[i]);
    if (cJSON_IsString(v) && v->valuestring[0])
      return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model.%s = '%s' is not supported; expected null",
                        L->name, unsupported[i], v->valuestring);
  }
  t->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
  t->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
  t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
    return gt_err_set(L->err, GT_ERR_FORMAT,
                      "tokenizer: '%s': model needs a \"vocab\" object and a \"merges\" array", L->name);
  gt_rc rc;
  const cJSON *e;
  cJSON_ArrayForEach(e, vocab) {
    if (!cJSON_IsNumber(e))
      return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model.vocab['%s'] is not a number", L->name,
                        e->string);
    int32_t id;
    if ((rc = gt__id(L, e, "token", e->string, &id)) || (rc = gt__set_token(L, id, e->string, 4))) return rc;
  }
  if ((rc = gt__vocab_table(L))) return rc;
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->byte_id[b] = gt__vocab_get(t, name, 6);
  }
  t->unk_id = -1;
  const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
  if (cJSON_IsString(unk)) {
    t->unk_id = gt__vocab_get(t, unk->valuestring, strlen(unk->valuestring));
    if (t->unk_id < 0)
      return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': model.unk_token '%s' is not in model.vocab",
                        L->name, unk->valuestring);
  }
  return gt__merges(L, merges);
}

static int32_t gt__trie_new(gt_tokenizer *t, unsigned char byte) {
  if (t->n_trie == t->cap_trie) {
    int32_t nc = t->cap_trie ? t->cap_trie * 2 : 1024;
    gt__trie_node *n = realloc(t->trie, (size_t)nc * sizeof *n);
    if (!n) return -1;
    t->trie = n;
    t->cap_trie = nc;
  }
  gt__trie_node nd = {-1, -1, -1, byte};
  t->trie[t->n_trie] = nd;
  return t->n_trie++;
}

static gt_rc gt__trie_add(gt__ld *L, const char *s, int32_t id) {
  gt_tokenizer *t = L->t;
  size_t n = strlen(s);
  if (n == 0) return GT_OK; /* an empty added token never matches */
  int32_t cur = t->root[(unsigned char)s[0]];
  if (cur < 0) {
    if ((cur = gt__trie_new(t, (unsigned char)s[0])) < 0) return gt__nomem(L);
    t->root[(unsigned char)s[0]] = cur;
  }
  for (size_t i = 1; i < n; i++) {
    int32_t c = t->trie[cur].child;
    while (c >= 0 && t->trie[c].byte != (unsigned char)s[i]) c = t->trie[c].sibling;
    if (c < 0) {
      if ((c = gt__trie_new(t, (unsigned char)s[i])) < 0) return gt__nomem(L);
      t->trie[c].sibling = t->trie[cur].child;
      t->trie[cur].child = c;
    }
    cur = c;
  }
  t->trie[cur].id = id; /* a repeated content keeps the last id, as HF's map */
  return GT_OK;
}

static gt_rc gt__added_tokens(gt__ld *L, const cJSON *added) {
  const cJSON *e;
  gt_rc rc;
  cJSON_ArrayForEach(e, added) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
      return gt_err_set(L->err, GT_ERR_FORMAT, "tokenizer: '%s': an added_tokens entry lacks its id or content",
                        L->name);
    static const char *flags[] = {"lstrip", "rstrip", "single_word", "normalized"};
    for (int i = 0; i < 4; i++)
      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, flags[i])))
        return gt_err_set(L->err, GT_ERR_FORMAT,
                          "tokenizer: '%s': added token '%s' has %s=true, which is not supported; expected false",
                          L->name, content->valuestring, flags[i]);
    int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
    int32_t v;
    if ((rc = gt__id(L, id, "added token", content->valuestring, &v)) ||
        (rc = gt__set_token(L, v, content->valuestring, (unsigned char)(1 | (special ? 2 : 0)))) ||
        (rc = gt__trie_add(L, content->valuestring, v)))
      return rc;
  }
  return GT_OK;
}

/* Patterns were stored as pool offsets while the pool could still move. */
static void gt__fix_steps(gt_tokenizer *t, gt__step *st, int n) {
  for (int i = 0; i < n; i++) {
    if (st[i].a.n) st[i].a.p = t->pool + (intptr_t)st[i].a.p;
    if (st[i].b.n) st[i].b.p = t->pool + (intptr_t)st[i].b.p;
  }
}

gt_rc gt_tokenizer_load_json(const char *json, size_t len, const char *name, gt_tokenizer **out, gt_err *err) {
  *out = NULL;
  cJSON *root = cJSON_ParseWithLength(json, len);
  if (!root || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return gt_err_set(err, GT_ERR_FORMAT, "tokenizer: '%s' is not valid JSON (expected a tokenizer.json object)",
                      name);
  }
  gt_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    cJSON_Delete(root);
    return gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory loading '%s'", name);
  }
  memset(t->root, 0xff, sizeof t->root);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  gt__ld L = {t, name, err, 0,
              (int64_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(model, "vocab")) +
                  cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"))};
  gt_rc rc = GT_OK;
  static const char *refused[] = {"truncation", "padding"};
  for (int i = 0; i < 2 && !rc; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, refused[i]);
    if (v && !cJSON_IsNull(v))
      rc = gt_err_set(err, GT_ERR_FORMAT, "tokenizer: '%s': %s is set, which is not supported; expected null", name,
                      refused[i]);
  }
  if (!rc) rc = gt__model(&L, model);
  if (!rc) rc = gt__added_tokens(&L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
  if (!rc) rc = gt__normalizer(&L, cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
  if (!rc) rc = gt__pre_tokenizer(&L, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
  if (!rc) rc = gt__post_processor(&L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
  if (!rc) rc = gt__decoder(&L, cJSON_GetObjectItemCaseSensitive(root, "decoder"));
  cJSON_Delete(root);
  if (!rc) {
    for (int i = 0; i < t->n_post_pre + t->n_post_suf; i++) {
      int32_t id = i < t->n_post_pre ? t->post_pre[i] : t->post_suf[i - t->n_post_pre];
      if (id < 0 || id >= t->n_ids || !t->flags[id])
        rc = gt_err_set(err, GT_ERR_FORMAT, "tokenizer: '%s': post_processor adds id %d, which no token has", name,
                        id);
    }
  }
  if (!rc) {
    t->byte_of = malloc((size_t)t->n_ids * sizeof(int16_t));
    if (!t->byte_of) rc = gt_err_set(err, GT_ERR_NOMEM, "tokenizer: no memory loading '%s'", name);
  }
  if (rc) {
    gt_tokenizer_free(t);
    return rc;
  }
  /* newlines cut the text exactly when "\n" is an added token and every added
   * token holding a newline is newlines only */
  int nl_token = 0, mixed = 0;
  for (int32_t i = 0; i < t->n_ids; i++) {
    if (!(t->flags[i] & 1)) continue;
    size_t len = (size_t)(t->tok[i] & 0xffffff);
    const char *s = t->pool + (t->tok[i] >> 24);
    size_t nl = 0;
    for (size_t k = 0; k < len; k++) nl += s[k] == '\n';
    nl_token |= len == 1 && nl == 1;
    mixed |= nl > 0 && nl < len;
  }
  t->newline_splits = nl_token && !mixed;
  for (int32_t i = 0; i < t->n_ids; i++) t->byte_of[i] = -1;
  for (int b = 0; b < 256; b++)
    if (t->byte_id[b] >= 0) t->byte_of[t->byte_id[b]] = (int16_t)b;
  gt__fix_steps(t, t->norm, t->n_norm);
  gt__fix_steps(t, t->pre, t->n_pre);
  gt__fix_steps(t, t->dec, t->n_dec);
  *out = t;
  return GT_OK;
}

gt_rc gt_tokenizer_load(const char *path, gt_tokenizer **out, gt_err *err) {
  *out = NULL;
  char *buf;
  size_t n;
  gt_rc rc = gt_read_file(path, "tokenizer: file", &buf, &n, err);
  if (rc) return rc;
  rc = gt_tokenizer_load_json(buf, n, path, out, err);
  free(buf);
  return rc;
}

void gt_tokenizer_free(gt_tokenizer *t) {
  if (!t) return;
  free(t->pool);
  free(t->tok);
  free(t->flags);
  free(t->byte_of);
  free(t->vhash);
  free(t->mkey);
  free(t->mrank);
  free(t->mnew);
  free(t->trie);
  free(t);
}
