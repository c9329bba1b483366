/* Generation: prefill the prompt, then sample, feed back, repeat. */
#include <math.h>
#include <string.h>

#include "decode/decode.h"
#include "base/prof.h"

gt_rc gt_decode_generate(gt_decoder *d, gt_sampler *s, const int32_t *prompt, int64_t n_prompt, int64_t max_new,
                         int32_t *out, float *logits_out, gt_decode_stats *st, gt_err *err) {
  return gt_decode_generate_until(d, s, prompt, n_prompt, max_new, out, logits_out, NULL, st, err);
}

gt_rc gt_decode_generate_until(gt_decoder *d, gt_sampler *s, const int32_t *prompt, int64_t n_prompt,
                               int64_t max_new, int32_t *out, float *logits_out, const gt_decode_ctl *ctl,
                               gt_decode_stats *st, gt_err *err) {
  const gt_decode_ctl dflt = {GT_DECODE_EOS, 0, NULL, NULL};
  if (!ctl) ctl = &dflt;
  memset(st, 0, sizeof *st);
  st->n_prompt = n_prompt;
  if (max_new < 0) return gt_err_set(err, GT_ERR_ARG, "decode: max_decode_steps = %lld is negative", (long long)max_new);
  if (s->vocab != d->m->vocab)
    return gt_err_set(err, GT_ERR_ARG, "decode: the sampler's vocabulary (%lld) is not the model's (%lld)",
                      (long long)s->vocab, (long long)d->m->vocab);
  int64_t need = n_prompt + (max_new > 0 ? max_new - 1 : 0);
  if (need > d->cache.max_len)
    return gt_err_set(err, GT_ERR_ARG, "decode: %lld prompt tokens + %lld new need %lld positions; the cache holds %lld",
                      (long long)n_prompt, (long long)max_new, (long long)need, (long long)d->cache.max_len);
  const int64_t V = d->m->vocab;
  float *logits = gt_mem_alloc_uninit(d->m->mem, GT_MEM_LOGITS, (size_t)V * sizeof(float));
  if (!logits) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for a row of %lld logits", (long long)V);
  gt_decoder_reset(d);
  double t0 = gt_prof_now();
  gt_rc rc = gt_decoder_prefill(d, prompt, n_prompt, logits, err);
  double t1 = gt_prof_now();
  st->prefill_seconds = t1 - t0;
  for (int64_t k = 0; rc == GT_OK && k < max_new; k++) {
    /* ids the tokenizer cannot turn into text are never picked */
    for (int64_t v = ctl->n_ids > 0 ? ctl->n_ids : V; v < V; v++) logits[v] = -INFINITY;
    if (logits_out) memcpy(logits_out + k * V, logits, (size_t)V * sizeof(float));
    int32_t tok = gt_sampler_next(s, logits);
    out[st->n_new++] = tok;
    if (tok == ctl->eos) {
      st->stopped_at_eos = 1;
      break;
    }
    int halt = 0;
    if (ctl->stop && (rc = ctl->stop(ctl->ctx, out, st->n_new, &halt, err))) break;
    if (halt) {
      st->stopped_by_caller = 1;
      break;
    }
    if (k + 1 < max_new) rc = gt_decoder_step(d, tok, logits, err);
  }
  st->generate_seconds = gt_prof_now() - t1;
  gt_mem_free(d->m->mem, logits);
  return rc;
}
