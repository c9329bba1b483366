/* The closing sample of a training run (sample_prompt, sample_tokens). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "decode/decode.h"
#include "tokenizer/tokenizer.h"

/* Continue the prompt by sampling (temperature 0.7, seeded) with the cached
 * decoder (decode.h): one pass over the prompt, then one token per step.
 * With tokenizer_path the prompt and the sample go through that tokenizer.
 * *text (malloc'd, the caller frees it) is the prompt and its continuation. */
gt_rc gt_decode_sample_text(gt_model *m, const gt_config *c, char **text_out, int64_t *n_new_out, gt_err *err) {
  *text_out = NULL;
  *n_new_out = 0;
  int64_t n_new = c->sample_tokens, plen = (int64_t)strlen(c->sample_prompt);
  gt_tokenizer *tok = NULL;
  int32_t *prompt = NULL;
  int64_t np = plen;
  if (c->tokenizer_path[0]) {
    gt_rc r = gt_tokenizer_load(c->tokenizer_path, &tok, err);
    if (!r) r = gt_tokenizer_encode(tok, c->sample_prompt, (size_t)plen, 0, &prompt, &np, err);
    if (r) {
      gt_tokenizer_free(tok);
      return r;
    }
  }
  int64_t n_prompt = 1 + np;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_new));
  unsigned char *text = malloc((size_t)(n_prompt + n_new) + 1);
  char *dtext = NULL;
  size_t nd = 0;
  gt_decoder dec;
  gt_sampler smp;
  gt_decode_stats st;
  memset(&dec, 0, sizeof dec);
  memset(&smp, 0, sizeof smp);
  gt_rc rc = GT_OK;
  if (!ids || !text) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sample: no memory");
    goto done;
  }
  ids[0] = GT_TOK_BOS;
  if (tok)
    memcpy(ids + 1, prompt, (size_t)np * sizeof(int32_t));
  else
    gt_bytes_encode((const unsigned char *)c->sample_prompt, plen, ids + 1);
  if ((rc = gt_decoder_init(&dec, m, n_prompt + n_new, err)) ||
      (rc = gt_sampler_init(&smp, GT_SAMPLE_WEIGHTED, 0.7, 0, -1.0, 0x5EED0000ull + (uint64_t)c->init_weights_seed,
                            m->vocab, err)) ||
      (rc = gt_decode_generate(&dec, &smp, ids, n_prompt, n_new, ids + n_prompt, NULL, &st, err)))
    goto done;
  if (tok) {
    if ((rc = gt_tokenizer_decode(tok, ids, n_prompt + st.n_new, GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE,
                                  &dtext, &nd, err)))
      goto done;
  } else {
    int64_t nb = gt_bytes_decode(ids, n_prompt + st.n_new, text);
    text[nb] = '\0';
  }
  *n_new_out = st.n_new;
  if (dtext) {
    *text_out = dtext;
    dtext = NULL;
  } else {
    *text_out = (char *)text;
    text = NULL;
  }
done:
  gt_sampler_free(&smp);
  gt_decoder_free(&dec);
  gt_tokenizer_free(tok);
  free(prompt);
  free(dtext);
  free(ids);
  free(text);
  return rc;
}

