/* A task on the mesh: one row per (example, choice) request, the rows in
 * global batches, each row's continuation log-likelihood from the head's
 * per-token losses (mesh/fsdp.h, gt_fsdp_eval_tokens). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "eval/eval.h"

gt_eval_opts gt_eval_opts_from_config(const gt_config *c) {
  gt_eval_opts o;
  o.B = (int)gt_config_global_batch(c);
  o.max_len = (int)c->max_target_length;
  o.tiles = (int)c->num_vocab_tiling;
  o.devices = (int)gt_config_total_devices(c);
  o.batches_per_call = 4;
  return o;
}

typedef struct gt__req {
  int32_t *ids;
  int64_t n, n_cont;
} gt__req;

/* The task's requests, tokenised; *T the row length they need. */
static gt_rc gt__requests(const gt_encoder *e, const gt_eval_opts *o, const gt_eval_task *t, gt__req **out,
                          int64_t *n_req, int *T, int64_t *truncated, gt_err *err) {
  int64_t n = 0;
  for (int i = 0; i < t->n; i++) n += t->ex[i].n_choices;
  gt__req *q = calloc((size_t)n, sizeof *q);
  if (!q) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory for the %lld requests of '%s'", (long long)n, t->path);
  *out = q;
  *n_req = n;
  *truncated = 0;
  int64_t k = 0, longest = 1;
  for (int i = 0; i < t->n; i++) {
    const gt_eval_example *ex = &t->ex[i];
    for (int c = 0; c < ex->n_choices; c++, k++) {
      char where[GT_STR_PATH + 80];
      snprintf(where, sizeof where, "'%s' line %lld choice %d", t->path, (long long)ex->line, c);
      size_t l = strlen(ex->choices[c]);
      char *cont = malloc(l + 2);
      if (!cont) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
      cont[0] = ' '; /* the harness's target_delimiter */
      memcpy(cont + 1, ex->choices[c], l + 1);
      gt_rc rc = gt_eval_encode_pair(e, ex->context, cont, &q[k].ids, &q[k].n, &q[k].n_cont, where, err);
      free(cont);
      if (rc) return rc;
      if (q[k].n_cont > o->max_len)
        return gt_err_set(err, GT_ERR_FORMAT,
                          "eval: %s: the continuation is %lld tokens; max_target_length = %d must hold it", where,
                          (long long)q[k].n_cont, o->max_len);
      /* the harness keeps the last max_length + 1 tokens */
      if (q[k].n > (int64_t)o->max_len + 1) {
        int64_t drop = q[k].n - (o->max_len + 1);
        memmove(q[k].ids, q[k].ids + drop, (size_t)(q[k].n - drop) * sizeof(int32_t));
        q[k].n -= drop;
        (*truncated)++;
      }
      if (q[k].n - 1 > longest) longest = q[k].n - 1;
    }
  }
  /* one length for the whole task, whatever the batch: a multiple of 8 when
   * the devices' tokens still split into the vocab tiles with it */
  int64_t L = (longest + 7) / 8 * 8;
  if (L > o->max_len) L = o->max_len;
  if ((int64_t)(o->B / o->devices) * L % o->tiles) L = o->max_len;
  *T = (int)L;
  return GT_OK;
}

static void gt__free_requests(gt__req *q, int64_t n) {
  for (int64_t i = 0; q && i < n; i++) free(q[i].ids);
  free(q);
}

/* Row r of a batch from request q (NULL: padding, out of the loss). */
static void gt__fill_row(const gt__req *q, int T, int32_t *in, int32_t *tg, int32_t *pos, int32_t *seg) {
  for (int j = 0; j < T; j++) in[j] = 0, tg[j] = -1, pos[j] = 0, seg[j] = 0;
  if (!q) return;
  int64_t L = q->n - 1, first = q->n - q->n_cont; /* the first continuation token's index in ids */
  for (int64_t j = 0; j < L; j++) {
    in[j] = q->ids[j];
    pos[j] = (int32_t)j;
    seg[j] = 1;
    if (j + 1 >= first) tg[j] = q->ids[j + 1];
  }
}

gt_rc gt_eval_task_score(gt_fsdp *f, const gt_encoder *e, const gt_eval_opts *o, const gt_eval_task *t,
                         gt_eval_result *r, double *ll, gt_err *err) {
  double t0 = gt_prof_now();
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", t->name);
  r->format = t->format;
  r->acc = r->acc_norm = r->acc_bytes = r->acc_stderr = r->acc_norm_stderr = r->acc_bytes_stderr = NAN;
  if (o->B < 1 || o->devices < 1 || o->B % o->devices)
    return gt_err_set(err, GT_ERR_ARG, "eval: %d rows per batch do not split over %d devices", o->B, o->devices);
  gt__req *q = NULL;
  int64_t nq = 0;
  int T = 0;
  gt_rc rc = gt__requests(e, o, t, &q, &nq, &T, &r->truncated, err);
  double *lls = NULL;
  int32_t *buf = NULL;
  float *tok = NULL;
  gt_batch *bs = NULL;
  int K = o->batches_per_call > 0 ? o->batches_per_call : 1;
  int64_t per = (int64_t)o->B * T, nb = (nq + o->B - 1) / o->B;
  if (!rc) {
    lls = ll ? ll : malloc(sizeof(double) * (size_t)nq);
    buf = malloc(sizeof(int32_t) * 4 * (size_t)(K * per));
    tok = malloc(sizeof(float) * (size_t)(K * per));
    bs = calloc((size_t)K, sizeof *bs);
    if (!lls || !buf || !tok || !bs)
      rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory for %d batches of %d x %d tokens", K, o->B, T);
  }
  for (int64_t b0 = 0; !rc && b0 < nb; b0 += K) {
    int k = nb - b0 < K ? (int)(nb - b0) : K;
    for (int i = 0; i < k; i++) {
      int32_t *in = buf + (int64_t)i * per, *tg = in + K * per, *pos = tg + K * per, *seg = pos + K * per;
      for (int row = 0; row < o->B; row++) {
        int64_t id = (b0 + i) * o->B + row;
        int64_t at = (int64_t)row * T;
        gt__fill_row(id < nq ? &q[id] : NULL, T, in + at, tg + at, pos + at, seg + at);
      }
      bs[i] = (gt_batch){o->B, T, in, tg, pos, seg};
    }
    gt_loss_stats st = {0};
    if ((rc = gt_fsdp_eval_tokens(f, bs, k, tok, &st, err))) break;
    for (int i = 0; i < k; i++)
      for (int row = 0; row < o->B; row++) {
        int64_t id = (b0 + i) * o->B + row;
        if (id >= nq) break;
        const float *tl = tok + (int64_t)i * per + (int64_t)row * T;
        double s = 0;
        for (int j = 0; j < T; j++) s += (double)tl[j];
        lls[id] = -s;
        r->tokens += q[id].n_cont;
      }
  }
  if (!rc) {
    r->requests = nq;
    gt_eval_metrics(t, lls, r);
  }
  r->seconds = gt_prof_now() - t0;
  if (lls != ll) free(lls);
  free(buf);
  free(tok);
  free(bs);
  gt__free_requests(q, nq);
  return rc;
}
