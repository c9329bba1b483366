/* A (context, continuation) pair into tokens, as lm-evaluation-harness's
 * Hugging Face model does it (api/model.py, TemplateLM._encode_pair, with
 * the <bos> it adds for Gemma models). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

int64_t gt_eval_chars(const char *s) {
  int64_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
  return n;
}

/* Python's str.isspace for ASCII and the separators it also counts */
static int gt__space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f); }

gt_rc gt_eval_encode_pair(const gt_encoder *e, const char *context, const char *continuation, int32_t **ids,
                          int64_t *n, int64_t *n_cont, const char *where, gt_err *err) {
  *ids = NULL;
  *n = *n_cont = 0;
  /* context.rstrip(): its trailing whitespace starts the continuation */
  size_t lc = strlen(context), lk = strlen(continuation), cut = lc;
  while (cut && gt__space((unsigned char)context[cut - 1])) cut--;
  char *whole = malloc(lc + lk + 1);
  if (!whole) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory to encode %s", where);
  memcpy(whole, context, lc);
  memcpy(whole + lc, continuation, lk + 1);
  uint32_t bos = (uint32_t)e->bos;
  gt_tokvec ctx = {0}, all = {0};
  gt_rc rc = gt_tokvec_push(&ctx, &bos, 1, err);
  if (!rc) rc = gt_encode_append(e, whole, cut, 0, &ctx, where, err);
  if (!rc) rc = gt_tokvec_push(&all, &bos, 1, err);
  if (!rc) rc = gt_encode_append(e, whole, lc + lk, 0, &all, where, err);
  free(whole);
  /* the continuation's tokens: whole[len(ctx):], after the context's own */
  if (!rc && all.n <= ctx.n)
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "eval: %s: the continuation '%.40s' gives no token of its own after the context's %lld", where,
                    continuation, (long long)ctx.n);
  if (!rc) {
    int64_t k = all.n - ctx.n;
    *ids = malloc((size_t)(ctx.n + k) * sizeof(int32_t));
    if (!*ids) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory to encode %s", where);
    } else {
      for (int64_t i = 0; i < ctx.n; i++) (*ids)[i] = (int32_t)ctx.v[i];
      for (int64_t i = 0; i < k; i++) (*ids)[ctx.n + i] = (int32_t)all.v[ctx.n + i];
      *n = ctx.n + k;
      *n_cont = k;
    }
  }
  gt_tokvec_free(&ctx);
  gt_tokvec_free(&all);
  return rc;
}
