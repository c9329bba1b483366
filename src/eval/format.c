/* A task record into an example: the three layouts (eval.h), with the
 * harness's text handling of HellaSwag and its MMLU prompt. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

static const char *const gt__fmt_names[] = {"auto", "mc", "hellaswag", "mmlu"};

int gt_eval_format_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, gt__fmt_names[i])) return i;
  return -1;
}

const char *gt_eval_format_name(gt_eval_format f) { return f >= 0 && f <= GT_EVAL_MMLU ? gt__fmt_names[f] : "?"; }

/* ---------- text helpers ---------- */

typedef struct gt__buf {
  char *s;
  size_t n, cap;
  int oom;
} gt__buf;

static void gt__put(gt__buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *t = realloc(b->s, cap);
    if (!t) {
      b->oom = 1;
      return;
    }
    b->s = t, b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}
static void gt__puts(gt__buf *b, const char *s) { gt__put(b, s, strlen(s)); }
static char *gt__done(gt__buf *b) {
  if (!b->oom && !b->s) gt__put(b, "", 0);
  if (b->oom) {
    free(b->s);
    return NULL;
  }
  return b->s;
}

/* Python's str.isspace for ASCII and the C1 separators it also counts. */
static int gt__space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f); }

/* str.strip(): a malloc'd copy without leading and trailing whitespace */
static char *gt__strip(const char *s) {
  while (*s && gt__space((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && gt__space((unsigned char)s[n - 1])) n--;
  gt__buf b = {0};
  gt__put(&b, s, n);
  return gt__done(&b);
}

/* s.replace(from, to): every non-overlapping occurrence, left to right */
static char *gt__replace(const char *s, const char *from, const char *to) {
  gt__buf b = {0};
  size_t fl = strlen(from);
  for (const char *p; (p = strstr(s, from)); s = p + fl) {
    gt__put(&b, s, (size_t)(p - s));
    gt__puts(&b, to);
  }
  gt__puts(&b, s);
  return gt__done(&b);
}

char *gt_eval_hellaswag_preprocess(const char *s) {
  char *a = gt__strip(s), *b = a ? gt__replace(a, " [title]", ". ") : NULL;
  free(a);
  if (!b) return NULL;
  /* re.sub("\\[.*?\\]", "", text): '.' stops at a newline */
  gt__buf c = {0};
  for (const char *p = b; *p;) {
    if (*p == '[') {
      const char *q = p + 1;
      while (*q && *q != ']' && *q != '\n') q++;
      if (*q == ']') {
        p = q + 1;
        continue;
      }
    }
    gt__put(&c, p, 1);
    p++;
  }
  free(b);
  char *d = gt__done(&c);
  char *e = d ? gt__replace(d, "  ", " ") : NULL;
  free(d);
  return e;
}

/* str.capitalize(): the first character upper case, the rest lower (ASCII
 * letters; other characters are kept) */
static char *gt__capitalize(const char *s) {
  char *t = strdup(s);
  if (!t) return NULL;
  for (char *p = t; *p; p++)
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
  if (t[0] >= 'a' && t[0] <= 'z') t[0] = (char)(t[0] - 'a' + 'A');
  return t;
}

/* ---------- fields ---------- */

static const cJSON *gt__get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static gt_rc gt__str(const cJSON *o, const char *k, const char *where, const char **out, gt_err *err) {
  const cJSON *v = gt__get(o, k);
  if (!cJSON_IsString(v))
    return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' is %s; expected a string", where, k,
                      gt_json_type_name(v));
  *out = v->valuestring;
  return GT_OK;
}

/* A label: an integer, its digits as a string (HellaSwag's), or a letter
 * A-Z (the index of the choice it names). */
static gt_rc gt__label(const cJSON *o, const char *k, int n, const char *where, int *out, gt_err *err) {
  const cJSON *v = gt__get(o, k);
  long long x = -1;
  int ok = 0;
  if (cJSON_IsNumber(v) && fabs(v->valuedouble) < 1e15 && v->valuedouble == floor(v->valuedouble)) {
    x = (long long)v->valuedouble;
    ok = 1;
  } else if (cJSON_IsString(v) && v->valuestring[0]) {
    const char *s = v->valuestring;
    if (s[0] >= 'A' && s[0] <= 'Z' && !s[1]) {
      x = s[0] - 'A';
      ok = 1;
    } else {
      char *end;
      x = strtoll(s, &end, 10);
      ok = !*end && s[0] != ' ';
    }
  }
  if (!ok)
    return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' is %s; expected the index of the right choice", where,
                      k, cJSON_IsString(v) ? "a string that is no index" : gt_json_type_name(v));
  if (x < 0 || x >= n)
    return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' = %lld is out of range for %d choices (0..%d)", where,
                      k, x, n, n - 1);
  *out = (int)x;
  return GT_OK;
}

/* The list of choices in field k, each through fix (may be NULL). */
static gt_rc gt__choices(const cJSON *o, const char *k, const char *where, char *(*fix)(const char *),
                         gt_eval_example *ex, gt_err *err) {
  const cJSON *v = gt__get(o, k);
  if (!cJSON_IsArray(v))
    return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' is %s; expected a list of strings", where, k,
                      gt_json_type_name(v));
  int n = cJSON_GetArraySize(v);
  if (n < 2)
    return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' has %d choice%s; a multiple-choice example needs at "
                      "least 2", where, k, n, n == 1 ? "" : "s");
  if (!(ex->choices = calloc((size_t)n, sizeof(char *)))) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  ex->n_choices = n;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, v) {
    if (!cJSON_IsString(it))
      return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' item %d is %s; expected a string", where, k, i,
                        gt_json_type_name(it));
    ex->choices[i] = fix ? fix(it->valuestring) : strdup(it->valuestring);
    if (!ex->choices[i]) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
    if (!ex->choices[i][0])
      return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' item %d is empty", where, k, i);
    i++;
  }
  return GT_OK;
}

/* ---------- the layouts ---------- */

static gt_rc gt__mc(const cJSON *o, const char *where, gt_eval_example *ex, gt_err *err) {
  const char *ctx;
  gt_rc rc = gt__str(o, "context", where, &ctx, err);
  if (!rc) rc = gt__choices(o, "choices", where, NULL, ex, err);
  if (!rc) rc = gt__label(o, "label", ex->n_choices, where, &ex->label, err);
  if (!rc && !(ex->context = strdup(ctx))) rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  if (!rc && !ctx[0]) rc = gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field 'context' is empty", where);
  return rc;
}

/* lm-evaluation-harness, tasks/hellaswag/utils.py: query =
 * preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize()),
 * choices = preprocess(ending) each. A row with ctx alone uses it for
 * ctx_a + " " + ctx_b. */
static gt_rc gt__hellaswag(const cJSON *o, const char *where, gt_eval_example *ex, gt_err *err) {
  const char *a = NULL, *b = NULL, *act = NULL, *whole = NULL;
  gt_rc rc = GT_OK;
  const char *ctx_field = "ctx";
  if (gt__get(o, "ctx_a")) {
    ctx_field = "ctx_a";
    if (!(rc = gt__str(o, "ctx_a", where, &a, err))) rc = gt__str(o, "ctx_b", where, &b, err);
  } else {
    rc = gt__str(o, "ctx", where, &whole, err);
  }
  if (!rc && gt__get(o, "activity_label")) rc = gt__str(o, "activity_label", where, &act, err);
  if (!rc) rc = gt__choices(o, "endings", where, gt_eval_hellaswag_preprocess, ex, err);
  if (!rc) rc = gt__label(o, "label", ex->n_choices, where, &ex->label, err);
  if (rc) return rc;
  gt__buf q = {0};
  if (act) gt__puts(&q, act), gt__puts(&q, ": ");
  if (a) {
    char *cb = gt__capitalize(b);
    gt__puts(&q, a), gt__puts(&q, " ");
    if (cb) gt__puts(&q, cb);
    else q.oom = 1;
    free(cb);
  } else {
    gt__puts(&q, whole);
  }
  char *raw = gt__done(&q);
  ex->context = raw ? gt_eval_hellaswag_preprocess(raw) : NULL;
  free(raw);
  if (!ex->context) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  if (!ex->context[0]) return gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field '%s' is empty", where, ctx_field);
  return GT_OK;
}

/* lm-evaluation-harness, tasks/mmlu/default: the description "The following
 * are multiple choice questions (with answers) about <subject>.\n\n", then
 * "{{question.strip()}}\nA. {{choices[0]}}\n...\nAnswer:"; the choices are
 * the letters. */
static gt_rc gt__mmlu(const cJSON *o, const char *where, gt_eval_example *ex, gt_err *err) {
  const char *qs, *subject = NULL;
  gt_eval_example opts = {0};
  gt_rc rc = gt__str(o, "question", where, &qs, err);
  if (!rc && gt__get(o, "subject")) rc = gt__str(o, "subject", where, &subject, err);
  if (!rc) rc = gt__choices(o, "choices", where, NULL, &opts, err);
  if (!rc && opts.n_choices > 26)
    rc = gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field 'choices' has %d choices; the MMLU prompt letters at most 26",
                    where, opts.n_choices);
  if (!rc) rc = gt__label(o, "answer", opts.n_choices, where, &ex->label, err);
  char *q = rc ? NULL : gt__strip(qs);
  if (!rc && !q) rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  if (!rc && !q[0]) rc = gt_err_set(err, GT_ERR_FORMAT, "eval: %s: field 'question' is empty", where);
  if (!rc) {
    gt__buf b = {0};
    if (subject && subject[0]) {
      char *s = gt__replace(subject, "_", " ");
      gt__puts(&b, "The following are multiple choice questions (with answers) about ");
      if (s) gt__puts(&b, s);
      else b.oom = 1;
      gt__puts(&b, ".\n\n");
      free(s);
    }
    gt__puts(&b, q);
    for (int i = 0; i < opts.n_choices; i++) {
      char l[8];
      snprintf(l, sizeof l, "\n%c. ", 'A' + i);
      gt__puts(&b, l);
      gt__puts(&b, opts.choices[i]);
    }
    gt__puts(&b, "\nAnswer:");
    ex->context = gt__done(&b);
    ex->n_choices = opts.n_choices;
    ex->choices = calloc((size_t)opts.n_choices, sizeof(char *));
    for (int i = 0; ex->choices && i < opts.n_choices; i++) {
      char l[2] = {(char)('A' + i), '\0'};
      ex->choices[i] = strdup(l);
    }
    int ok = ex->context && ex->choices;
    for (int i = 0; ok && i < opts.n_choices; i++) ok = ex->choices[i] != NULL;
    if (!ok) rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  }
  free(q);
  gt_eval_example_free(&opts);
  return rc;
}

gt_rc gt_eval_example_parse(const cJSON *rec, gt_eval_format force, const char *where, gt_eval_example *ex,
                            gt_eval_format *found, gt_err *err) {
  memset(ex, 0, sizeof *ex);
  gt_eval_format f = force;
  if (f == GT_EVAL_AUTO) {
    if (gt__get(rec, "endings")) f = GT_EVAL_HELLASWAG;
    else if (gt__get(rec, "question") && gt__get(rec, "answer")) f = GT_EVAL_MMLU;
    else if (gt__get(rec, "context") || gt__get(rec, "choices")) f = GT_EVAL_MC;
    else
      return gt_err_set(err, GT_ERR_FORMAT,
                        "eval: %s: not a task record: expected the fields context/choices/label (mc), "
                        "ctx/endings/label (hellaswag) or question/choices/answer (mmlu)",
                        where);
  }
  if (found) *found = f;
  gt_rc rc = f == GT_EVAL_HELLASWAG ? gt__hellaswag(rec, where, ex, err)
             : f == GT_EVAL_MMLU    ? gt__mmlu(rec, where, ex, err)
                                    : gt__mc(rec, where, ex, err);
  if (rc) gt_eval_example_free(ex);
  return rc;
}

void gt_eval_example_free(gt_eval_example *ex) {
  for (int i = 0; ex->choices && i < ex->n_choices; i++) free(ex->choices[i]);
  free(ex->choices);
  free(ex->context);
  memset(ex, 0, sizeof *ex);
}
