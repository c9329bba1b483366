/* The forward-pass logit checker's golden-file writer and metrics (see
 * logitcheck.h; the reader is logitcheck_read.c). */
#include "decode/logitcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void gt_golden_free(gt_golden *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) {
    free(g->seqs[i].tokens);
    free(g->seqs[i].logits);
  }
  free(g->seqs);
  g->seqs = NULL;
  g->n = 0;
}

int gt_golden_write_line(FILE *f, const int32_t *tokens, int n_tokens, const float *logits, int64_t vocab) {
  int bad = fputs("{\"tokens\": [", f) < 0;
  for (int t = 0; t < n_tokens; t++) bad |= fprintf(f, "%s%d", t ? ", " : "", tokens[t]) < 0;
  bad |= fputs("], \"logits\": [", f) < 0;
  for (int t = 0; t < n_tokens; t++) {
    bad |= fputs(t ? ", [" : "[", f) < 0;
    const float *r = logits + (size_t)t * (size_t)vocab;
    for (int64_t v = 0; v < vocab; v++) bad |= fprintf(f, "%s%.9g", v ? ", " : "", (double)r[v]) < 0;
    bad |= fputc(']', f) == EOF;
  }
  bad |= fputs("]}\n", f) < 0;
  return bad ? -1 : 0;
}

void gt_logit_topk(const float *x, int64_t n, int k, int64_t *idx) {
  /* insertion into a sorted list of k: k is 10, the pass is O(n k) worst case */
  int have = 0;
  for (int64_t i = 0; i < n; i++) {
    if (have == k && !(x[i] > x[idx[k - 1]])) continue;
    int j = have < k ? have++ : k - 1;
    while (j > 0 && x[i] > x[idx[j - 1]]) {
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = i;
  }
}

/* log-sum-exp of x[0..n) in double */
static double gt__lse(const float *x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > mx) mx = x[i];
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
  return mx + log(s);
}

gt_rc gt_logit_compare(const float *model, int64_t vocab_model, const float *golden, int64_t vocab_golden, int n_pos,
                       gt_logit_cmp *out, gt_err *err) {
  memset(out, 0, sizeof *out);
  if (n_pos < 1 || vocab_model < 1 || vocab_golden < 1)
    return gt_err_set(err, GT_ERR_ARG, "logit-check: nothing to compare (%d positions, vocab %lld and %lld)", n_pos,
                      (long long)vocab_model, (long long)vocab_golden);
  if (vocab_golden != vocab_model)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "logit-check: golden rows hold %lld logits but the model's vocabulary has %lld entries; a "
                      "golden row needs one logit per vocabulary entry",
                      (long long)vocab_golden, (long long)vocab_model);
  int64_t V = vocab_model;
  /* NaN or infinite golden logits make NaN probabilities, which the KL sum
   * below would skip (KL 0, a pass); the reader refuses them by line, and a
   * caller with its own arrays meets the same refusal here. */
  for (int t = 0; t < n_pos; t++)
    for (int64_t v = 0; v < V; v++) {
      float x = golden[(size_t)t * (size_t)V + (size_t)v];
      if (!isfinite(x))
        return gt_err_set(err, GT_ERR_FORMAT,
                          "logit-check: golden logit at position %d, vocab index %lld is %s; golden logits must be "
                          "finite",
                          t, (long long)v, isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
    }
  out->n_pos = n_pos;
  out->vocab = V;
  out->kl = calloc((size_t)n_pos, sizeof(double));
  if (!out->kl) return gt_err_set(err, GT_ERR_NOMEM, "logit-check: no memory for %d KL values", n_pos);
  out->max_abs_diff = -1;
  double sum = 0;
  for (int t = 0; t < n_pos; t++) {
    const float *q = model + (size_t)t * (size_t)vocab_model;
    const float *p = golden + (size_t)t * (size_t)vocab_golden;
    double lp = gt__lse(p, V), lq = gt__lse(q, V), kl = 0;
    for (int64_t v = 0; v < V; v++) {
      double logp = (double)p[v] - lp, logq = (double)q[v] - lq;
      double pv = exp(logp);
      if (pv > 0) kl += pv * (logp - logq); /* p log(p/q), 0 where p = 0 */
      double d = fabs((double)q[v] - (double)p[v]);
      if (d > out->max_abs_diff || isnan(d)) {
        out->max_abs_diff = isnan(d) ? INFINITY : d;
        out->abs_pos = t;
        out->abs_index = v;
      }
    }
    if (isnan(kl)) kl = INFINITY;
    out->kl[t] = kl;
    sum += kl;
    if (t == 0 || kl > out->kl_max) {
      out->kl_max = kl;
      out->kl_argmax = t;
    }
  }
  out->kl_mean = sum / n_pos;
  int k = V < GT_LOGIT_TOPK ? (int)V : GT_LOGIT_TOPK;
  out->k = k;
  const float *qm = model + (size_t)(n_pos - 1) * (size_t)vocab_model;
  const float *pg = golden + (size_t)(n_pos - 1) * (size_t)vocab_golden;
  gt_logit_topk(qm, V, k, out->top_model);
  gt_logit_topk(pg, V, k, out->top_golden);
  int same_rank = 0;
  for (int i = 0; i < k; i++) {
    same_rank += out->top_model[i] == out->top_golden[i];
    for (int j = 0; j < k; j++) out->overlap += out->top_model[i] == out->top_golden[j];
  }
  out->jaccard = (double)out->overlap / (double)(2 * k - out->overlap);
  out->rank_agreement = 100.0 * same_rank / k;
  return GT_OK;
}

void gt_logit_cmp_free(gt_logit_cmp *c) {
  if (!c) return;
  free(c->kl);
  c->kl = NULL;
}
