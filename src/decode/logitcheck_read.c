/* The golden-logits reader (see logitcheck.h): a streaming parser for
 * exactly MaxText's JSON Lines format, one object per line with "tokens" and
 * "logits" arrays (other keys skipped). A Gemma line holds 262144 floats per
 * position, ~1.5 GB of text for 500 positions: a JSON tree of it would take
 * 64+ bytes per number, and even the line itself is too big to hold. So the
 * text goes through a 64 KiB buffer and only the output arrays are kept; they
 * grow geometrically, or are sized exactly once both T and V are known.
 *
 * Decisions about the format (MaxText writes it with Python's `jsonlines`,
 * i.e. json.JSONEncoder with allow_nan, and reads it with json.loads, line by
 * line):
 * - a newline ends the line, so an object broken over lines is refused as
 *   truncated; other JSON whitespace (space, tab, CR) may appear anywhere;
 * - NaN, Infinity and -Infinity are numbers (Python writes them for
 *   non-finite logits): accepted in keys we skip, refused as logits (and
 *   so is a number beyond float32), naming the line and position;
 * - numbers follow the JSON grammar and are converted by strtod, then rounded
 *   to float as before (a %.9g value reads back to the same float);
 * - anything but whitespace after the object is refused, and so is a second
 *   "tokens" or "logits" key (json.loads would keep the last one silently). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode/logitcheck.h"

enum {
  GT__JR_BUF = 1 << 16, /* bytes read from the file at a time */
  GT__JR_NUM = 1024,    /* longest number accepted, in characters */
  GT__JR_DEPTH = 1000,  /* deepest nesting in a skipped value (cJSON's limit) */
  GT__JR_KEY = 16,      /* keys longer than this are none of ours */
};

typedef struct gt__jr {
  FILE *f;
  gt_err *err;
  long long col; /* column of the next byte in the line, from 1 */
  size_t pos, len;
  int eof, io_errno;
  char where[1100]; /* "'path' line N" */
  unsigned char buf[GT__JR_BUF];
} gt__jr;

/* What one line has given so far. */
typedef struct gt__jline {
  gt_golden_seq *s;
  int have_tok, have_lg; /* 0 absent, 1 an array, 2 another type */
  int64_t n_tok, cap_tok;
  int64_t rows, cap_floats;
} gt__jline;

static int gt__jr_fill(gt__jr *r) {
  if (r->eof) return -1;
  r->pos = 0;
  r->len = fread(r->buf, 1, sizeof r->buf, r->f);
  if (r->len == 0) {
    r->eof = 1;
    if (ferror(r->f)) r->io_errno = errno ? errno : EIO;
    return -1;
  }
  return r->buf[0];
}

/* The next byte without taking it; -1 at the end of the file. */
static inline int gt__jr_peek(gt__jr *r) { return r->pos < r->len ? r->buf[r->pos] : gt__jr_fill(r); }

/* Takes the byte that gt__jr_peek returned. */
static inline void gt__jr_take(gt__jr *r) {
  r->pos++;
  r->col++;
}

/* JSON whitespace except the newline, which ends the line. */
static int gt__jr_ws(gt__jr *r) {
  int c;
  while ((c = gt__jr_peek(r)) == ' ' || c == '\t' || c == '\r') gt__jr_take(r);
  return c;
}

static int gt__jr_num_start(int c) { return c == '-' || (c >= '0' && c <= '9') || c == 'N' || c == 'I'; }
static int gt__jr_value_start(int c) {
  return gt__jr_num_start(c) || c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n';
}

/* "not valid JSON", naming what was expected and the byte found instead. */
static gt_rc gt__jr_syntax(gt__jr *r, const char *expected) {
  int c = gt__jr_peek(r);
  if (c < 0 && r->io_errno)
    return gt_err_set(r->err, GT_ERR_IO, "logit-check: reading %s failed: %s", r->where, strerror(r->io_errno));
  char found[32];
  if (c < 0)
    snprintf(found, sizeof found, "the end of the file");
  else if (c == '\n')
    snprintf(found, sizeof found, "the end of the line");
  else if (c >= 0x20 && c < 0x7f)
    snprintf(found, sizeof found, "'%c'", c);
  else
    snprintf(found, sizeof found, "byte 0x%02x", (unsigned)c);
  return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s is not valid JSON: expected %s at column %lld, found %s",
                    r->where, expected, r->col, found);
}

static gt_rc gt__jr_literal(gt__jr *r, const char *word) {
  char want[24];
  snprintf(want, sizeof want, "\"%s\"", word);
  for (const char *p = word; *p; p++) {
    if (gt__jr_peek(r) != (unsigned char)*p) return gt__jr_syntax(r, want);
    gt__jr_take(r);
  }
  return GT_OK;
}

static int gt__jr_digit(gt__jr *r) {
  int c = gt__jr_peek(r);
  return c >= '0' && c <= '9';
}

/* Appends the peeked byte to the number text b[*n]. */
static gt_rc gt__jr_num_take(gt__jr *r, char *b, size_t *n) {
  if (*n == GT__JR_NUM)
    return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: a number at column %lld is longer than %d characters",
                      r->where, r->col - (long long)*n, GT__JR_NUM);
  b[(*n)++] = (char)gt__jr_peek(r);
  gt__jr_take(r);
  return GT_OK;
}

/* A JSON number, or NaN / Infinity / -Infinity, at the peeked byte. */
static gt_rc gt__jr_number(gt__jr *r, double *out) {
  char b[GT__JR_NUM + 1];
  size_t n = 0;
  gt_rc rc = GT_OK;
  int c = gt__jr_peek(r), neg = 0;
  if (c == 'N') {
    *out = NAN;
    return gt__jr_literal(r, "NaN");
  }
  if (c == '-') {
    neg = 1;
    if ((rc = gt__jr_num_take(r, b, &n))) return rc;
    c = gt__jr_peek(r);
  }
  if (c == 'I') {
    *out = neg ? -INFINITY : INFINITY;
    return gt__jr_literal(r, "Infinity");
  }
  if (c == '0') {
    rc = gt__jr_num_take(r, b, &n);
  } else {
    if (!gt__jr_digit(r)) return gt__jr_syntax(r, "a digit");
    while (!rc && gt__jr_digit(r)) rc = gt__jr_num_take(r, b, &n);
  }
  if (!rc && gt__jr_peek(r) == '.') {
    rc = gt__jr_num_take(r, b, &n);
    if (!rc && !gt__jr_digit(r)) return gt__jr_syntax(r, "a digit after '.'");
    while (!rc && gt__jr_digit(r)) rc = gt__jr_num_take(r, b, &n);
  }
  if (!rc && (gt__jr_peek(r) == 'e' || gt__jr_peek(r) == 'E')) {
    rc = gt__jr_num_take(r, b, &n);
    if (!rc && (gt__jr_peek(r) == '+' || gt__jr_peek(r) == '-')) rc = gt__jr_num_take(r, b, &n);
    if (!rc && !gt__jr_digit(r)) return gt__jr_syntax(r, "a digit in the exponent");
    while (!rc && gt__jr_digit(r)) rc = gt__jr_num_take(r, b, &n);
  }
  if (rc) return rc;
  b[n] = '\0';
  *out = strtod(b, NULL); /* out of range gives +-HUGE_VAL or 0, as json.loads does */
  return GT_OK;
}

/* A string from its opening quote. With key, the decoded text lands there
 * (escapes of non-ASCII or NUL as 0xff, and an over-long key as "", so that
 * neither can match a key we look for). */
static gt_rc gt__jr_string(gt__jr *r, char *key) {
  size_t n = 0;
  int too_long = 0;
  gt__jr_take(r);
  for (;;) {
    int c = gt__jr_peek(r);
    if (c < 0 || c == '\n') return gt__jr_syntax(r, "'\"' closing the string");
    if (c < 0x20) return gt__jr_syntax(r, "a string character (control characters must be escaped)");
    gt__jr_take(r);
    if (c == '"') break;
    if (c == '\\') {
      int e = gt__jr_peek(r);
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *hit = e > 0 ? strchr(from, e) : NULL;
      if (e == 'u') {
        gt__jr_take(r);
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          int h = gt__jr_peek(r);
          int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
          if (d < 0) return gt__jr_syntax(r, "a hex digit of a \\u escape");
          v = v * 16 + (unsigned)d;
          gt__jr_take(r);
        }
        c = v > 0 && v < 0x80 ? (int)v : 0xff;
      } else if (hit && e) {
        gt__jr_take(r);
        c = (unsigned char)to[hit - from];
      } else {
        return gt__jr_syntax(r, "an escape (one of \" \\ / b f n r t u) after '\\'");
      }
    }
    if (key) {
      if (n + 1 < GT__JR_KEY)
        key[n++] = (char)c;
      else
        too_long = 1;
    }
  }
  if (key) key[too_long ? 0 : n] = '\0';
  return GT_OK;
}

/* After an array's '[': *more = 0 when it is empty. */
static void gt__jr_open(gt__jr *r, int *more) {
  gt__jr_take(r);
  if (gt__jr_ws(r) == ']') {
    gt__jr_take(r);
    *more = 0;
  } else {
    *more = 1;
  }
}

/* After an element: ',' (*more = 1, at the next element) or ']' (*more = 0). */
static gt_rc gt__jr_next(gt__jr *r, int close, int *more) {
  int c = gt__jr_ws(r);
  if (c == ',') {
    gt__jr_take(r);
    gt__jr_ws(r);
    *more = 1;
    return GT_OK;
  }
  if (c == close) {
    gt__jr_take(r);
    *more = 0;
    return GT_OK;
  }
  return gt__jr_syntax(r, close == ']' ? "',' or ']'" : "',' or '}'");
}

/* Checks and discards any value (a key we do not use, or extra rows). */
static gt_rc gt__jr_skip(gt__jr *r, int depth) {
  int c = gt__jr_ws(r);
  if (c == '"') return gt__jr_string(r, NULL);
  if (c == 't') return gt__jr_literal(r, "true");
  if (c == 'f') return gt__jr_literal(r, "false");
  if (c == 'n') return gt__jr_literal(r, "null");
  if (gt__jr_num_start(c)) {
    double d;
    return gt__jr_number(r, &d);
  }
  if (c != '[' && c != '{') return gt__jr_syntax(r, "a JSON value");
  if (depth >= GT__JR_DEPTH)
    return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: values nested deeper than %d at column %lld", r->where,
                      GT__JR_DEPTH, r->col);
  int close = c == '[' ? ']' : '}', more = 1;
  gt__jr_take(r);
  if (gt__jr_ws(r) == close) {
    gt__jr_take(r);
    return GT_OK;
  }
  gt_rc rc = GT_OK;
  while (!rc && more) {
    if (close == '}') {
      if (gt__jr_ws(r) != '"') return gt__jr_syntax(r, "a key string");
      if ((rc = gt__jr_string(r, NULL))) return rc;
      if (gt__jr_ws(r) != ':') return gt__jr_syntax(r, "':'");
      gt__jr_take(r);
    }
    if (!(rc = gt__jr_skip(r, depth + 1))) rc = gt__jr_next(r, close, &more);
  }
  return rc;
}

static gt_rc gt__jr_tokens(gt__jr *r, gt__jline *L) {
  gt_golden_seq *s = L->s;
  int more;
  gt__jr_open(r, &more);
  while (more) {
    int c = gt__jr_peek(r);
    double d = 0;
    gt_rc rc;
    if (!gt__jr_num_start(c)) {
      if (!gt__jr_value_start(c)) return gt__jr_syntax(r, "a JSON value");
    } else if ((rc = gt__jr_number(r, &d))) {
      return rc;
    }
    if (!gt__jr_num_start(c) || d != floor(d) || d < 0 || d > 2e9)
      return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: tokens[%lld] is not a token id (an integer >= 0)",
                        r->where, (long long)L->n_tok);
    if (L->n_tok == L->cap_tok) {
      if (L->cap_tok >= INT_MAX / 2)
        return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s has more than %d tokens", r->where, INT_MAX / 2);
      int64_t cap = L->cap_tok ? 2 * L->cap_tok : 256;
      int32_t *nt = realloc(s->tokens, sizeof(int32_t) * (size_t)cap);
      if (!nt)
        return gt_err_set(r->err, GT_ERR_NOMEM, "logit-check: %s: no memory for %lld tokens", r->where, (long long)cap);
      s->tokens = nt;
      L->cap_tok = cap;
    }
    s->tokens[L->n_tok++] = (int32_t)d;
    if ((rc = gt__jr_next(r, ']', &more))) return rc;
  }
  return GT_OK;
}

/* Room for `floats` logits (rows * vocab, or row 0 while its length is
 * unknown). */
static gt_rc gt__jr_reserve(gt__jr *r, gt__jline *L, int64_t floats, int64_t rows) {
  if (floats <= L->cap_floats) return GT_OK;
  float *nl =
      (uint64_t)floats <= SIZE_MAX / sizeof(float) ? realloc(L->s->logits, sizeof(float) * (size_t)floats) : NULL;
  if (!nl)
    return gt_err_set(r->err, GT_ERR_NOMEM, "logit-check: %s: no memory for %lld x %lld logits", r->where,
                      (long long)rows, (long long)(rows > 0 ? floats / rows : floats));
  L->s->logits = nl;
  L->cap_floats = floats;
  return GT_OK;
}

/* A golden logit must be a finite float32: NaN or an infinity (Python
 * writes both) gives NaN probabilities, which the KL sum used to skip, so a
 * check on max_kl_div alone passed whatever the model said. */
static gt_rc gt__jr_nonfinite(gt__jr *r, int64_t t, int64_t v, double d) {
  char what[64];
  if (isnan(d))
    snprintf(what, sizeof what, "NaN");
  else if (isinf(d))
    snprintf(what, sizeof what, "%s", d > 0 ? "Infinity" : "-Infinity");
  else
    snprintf(what, sizeof what, "%g, beyond float32 (%s)", d, d > 0 ? "Infinity" : "-Infinity");
  return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[%lld][%lld] is %s; golden logits must be finite",
                    r->where, (long long)t, (long long)v, what);
}

/* Row t of the logits (at '['). Row 0 grows its buffer and sets the vocab;
 * later rows store up to vocab entries and count the rest. */
static gt_rc gt__jr_row(gt__jr *r, gt__jline *L, int64_t t, int64_t *count) {
  int64_t V = L->s->vocab, v = 0;
  int more;
  gt__jr_open(r, &more);
  while (more) {
    int c = gt__jr_peek(r);
    double d;
    gt_rc rc;
    if (!gt__jr_num_start(c))
      return gt__jr_value_start(c)
                 ? gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[%lld][%lld] is not a number", r->where,
                              (long long)t, (long long)v)
                 : gt__jr_syntax(r, "a JSON value");
    if ((rc = gt__jr_number(r, &d))) return rc;
    if (!isfinite((float)d)) return gt__jr_nonfinite(r, t, v, d);
    if (t == 0) {
      if (v == L->cap_floats && (rc = gt__jr_reserve(r, L, v ? 2 * v : 4096, 1))) return rc;
      L->s->logits[v] = (float)d;
    } else if (v < V) {
      L->s->logits[t * V + v] = (float)d;
    }
    v++;
    if ((rc = gt__jr_next(r, ']', &more))) return rc;
  }
  *count = v;
  return GT_OK;
}

static gt_rc gt__jr_logits(gt__jr *r, gt__jline *L) {
  gt_golden_seq *s = L->s;
  /* "tokens" came first: the row count is known, and rows past it are only
   * counted for the message */
  int64_t T = L->have_tok == 1 ? L->n_tok : -1;
  int more;
  gt_rc rc;
  gt__jr_open(r, &more);
  while (more) {
    int c = gt__jr_peek(r);
    int64_t t = L->rows, n;
    if (T >= 0 && t >= T) {
      if ((rc = gt__jr_skip(r, 1))) return rc;
    } else if (c != '[') {
      if (!gt__jr_value_start(c)) return gt__jr_syntax(r, "a JSON value");
      return t == 0
                 ? gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[0] is not a non-empty array", r->where)
                 : gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[%lld] has 0 entries, logits[0] has %lld",
                              r->where, (long long)t, (long long)s->vocab);
    } else if (t == 0) {
      if ((rc = gt__jr_row(r, L, 0, &n))) return rc;
      if (n == 0)
        return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[0] is not a non-empty array", r->where);
      s->vocab = n;
      if (T > 0 && n > INT64_MAX / T)
        return gt_err_set(r->err, GT_ERR_NOMEM, "logit-check: %s: no memory for %lld x %lld logits", r->where,
                          (long long)T, (long long)n);
      if (T > 0 && (rc = gt__jr_reserve(r, L, T * n, T))) return rc;
    } else {
      int64_t V = s->vocab, cap_rows = L->cap_floats / V;
      if (t >= cap_rows && (rc = gt__jr_reserve(r, L, 2 * cap_rows * V, 2 * cap_rows))) return rc;
      if ((rc = gt__jr_row(r, L, t, &n))) return rc;
      if (n != V)
        return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s: logits[%lld] has %lld entries, logits[0] has %lld",
                          r->where, (long long)t, (long long)n, (long long)V);
    }
    L->rows++;
    if ((rc = gt__jr_next(r, ']', &more))) return rc;
  }
  return GT_OK;
}

/* The members of one object (at '{'). */
static gt_rc gt__jr_object(gt__jr *r, gt__jline *L) {
  gt__jr_take(r);
  if (gt__jr_ws(r) == '}') {
    gt__jr_take(r);
    return GT_OK;
  }
  int more = 1;
  gt_rc rc = GT_OK;
  while (!rc && more) {
    char key[GT__JR_KEY];
    if (gt__jr_ws(r) != '"') return gt__jr_syntax(r, "a key string");
    if ((rc = gt__jr_string(r, key))) return rc;
    if (gt__jr_ws(r) != ':') return gt__jr_syntax(r, "':'");
    gt__jr_take(r);
    int c = gt__jr_ws(r), is_tok = !strcmp(key, "tokens"), is_lg = !strcmp(key, "logits");
    if (is_tok || is_lg) {
      int *have = is_tok ? &L->have_tok : &L->have_lg;
      if (*have) return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s has the key \"%s\" twice", r->where, key);
      *have = c == '[' ? 1 : 2;
      if (c != '[')
        rc = gt__jr_skip(r, 1);
      else
        rc = is_tok ? gt__jr_tokens(r, L) : gt__jr_logits(r, L);
    } else {
      rc = gt__jr_skip(r, 1);
    }
    if (!rc) rc = gt__jr_next(r, '}', &more);
  }
  return rc;
}

/* Nothing but whitespace may follow a line's value. */
static gt_rc gt__jr_line_end(gt__jr *r) {
  int c = gt__jr_ws(r);
  if (c == '\n') {
    gt__jr_take(r);
    return GT_OK;
  }
  if (c < 0 && !r->io_errno) return GT_OK;
  return gt__jr_syntax(r, "the end of the line after the value");
}

/* The checks that need the whole object, and the arrays cut to size. */
static gt_rc gt__jr_finish(gt__jr *r, gt__jline *L) {
  gt_golden_seq *s = L->s;
  static const char *const kind[3] = {"none", "an array", "another type"};
  if (L->have_tok != 1 || L->have_lg != 1)
    return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s needs arrays \"tokens\" and \"logits\", found %s and %s",
                      r->where, kind[L->have_tok], kind[L->have_lg]);
  if (L->n_tok < 1) return gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s has no tokens", r->where);
  if (L->rows != L->n_tok)
    return gt_err_set(r->err, GT_ERR_FORMAT,
                      "logit-check: %s has %lld tokens but %lld rows of logits; expected one per token", r->where,
                      (long long)L->n_tok, (long long)L->rows);
  s->n_tokens = (int)L->n_tok;
  int64_t floats = L->rows * s->vocab;
  if (L->cap_floats > floats) { /* give back the geometric slack */
    float *nl = realloc(s->logits, sizeof(float) * (size_t)floats);
    if (nl) s->logits = nl;
  }
  if (L->cap_tok > L->n_tok) {
    int32_t *nt = realloc(s->tokens, sizeof(int32_t) * (size_t)L->n_tok);
    if (nt) s->tokens = nt;
  }
  return GT_OK;
}

/* One non-blank line, at its first byte. */
static gt_rc gt__jr_line(gt__jr *r, gt_golden *g, int *cap_seqs) {
  if (gt__jr_peek(r) != '{') {
    gt_rc rc = gt__jr_skip(r, 0);
    if (!rc) rc = gt__jr_line_end(r);
    return rc ? rc : gt_err_set(r->err, GT_ERR_FORMAT, "logit-check: %s is not a JSON object", r->where);
  }
  if (g->n == *cap_seqs) {
    int cap = *cap_seqs ? 2 * *cap_seqs : 8;
    gt_golden_seq *ns = realloc(g->seqs, sizeof *ns * (size_t)cap);
    if (!ns) return gt_err_set(r->err, GT_ERR_NOMEM, "logit-check: no memory for %d sequences", cap);
    g->seqs = ns;
    *cap_seqs = cap;
  }
  gt_golden_seq *s = &g->seqs[g->n++]; /* counted now so that gt_golden_free releases a half-read line */
  memset(s, 0, sizeof *s);
  gt__jline L = {.s = s};
  gt_rc rc = gt__jr_object(r, &L);
  if (!rc) rc = gt__jr_line_end(r);
  if (!rc) rc = gt__jr_finish(r, &L);
  return rc;
}

gt_rc gt_golden_read(const char *path, gt_golden *g, gt_err *err) {
  memset(g, 0, sizeof *g);
  FILE *f = fopen(path, "rb");
  if (!f) return gt_err_set(err, GT_ERR_IO, "logit-check: cannot open '%s': %s", path, strerror(errno));
  gt__jr *r = calloc(1, sizeof *r);
  if (!r) {
    fclose(f);
    return gt_err_set(err, GT_ERR_NOMEM, "logit-check: no memory to read '%s'", path);
  }
  setvbuf(f, NULL, _IONBF, 0); /* r->buf is the only buffer: no copy through stdio's */
  r->f = f;
  r->err = err;
  gt_rc rc = GT_OK;
  int cap_seqs = 0;
  for (long long lineno = 1; !rc; lineno++) {
    r->col = 1;
    snprintf(r->where, sizeof r->where, "'%s' line %lld", path, lineno);
    int c = gt__jr_ws(r);
    if (c < 0) {
      if (r->io_errno)
        rc = gt_err_set(err, GT_ERR_IO, "logit-check: reading %s failed: %s", r->where, strerror(r->io_errno));
      break;
    }
    if (c == '\n') /* blank lines are skipped */
      gt__jr_take(r);
    else
      rc = gt__jr_line(r, g, &cap_seqs);
  }
  free(r);
  fclose(f);
  if (rc == GT_OK && g->n == 0) rc = gt_err_set(err, GT_ERR_FORMAT, "logit-check: '%s' holds no sequences", path);
  if (rc) gt_golden_free(g);
  return rc;
}
