/* The closing sample of a training run (sample_prompt, sample_tokens,
 * sample_at_end). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "decode/text.h"

int gt_decode_sample_wanted(const gt_config *c) {
  if (c->sample_tokens <= 0 || !strcmp(c->sample_at_end, "off")) return 0;
  /* a fine-tuned chat model answers turns; continuing a pretraining-style
   * prompt shows little, so an SFT run samples only when asked */
  return !strcmp(c->sample_at_end, "on") || !c->use_sft;
}

/* Continue the prompt by sampling (temperature 0.7, seeded) with the cached
 * decoder (decode.h): one pass over the prompt, then one token per step, as
 * `gemtrain decode` does with the same tokenizer, rendering and stops. */
gt_rc gt_decode_sample_text(gt_model *m, const gt_config *c, char **text_out, int64_t *n_new_out, gt_err *err) {
  *text_out = NULL;
  *n_new_out = 0;
  gt_tokenizer *tok = NULL;
  gt_sampler smp;
  gt_textgen g;
  gt_textgen_out o;
  gt_decode_chat chat;
  memset(&smp, 0, sizeof smp);
  memset(&g, 0, sizeof g);
  memset(&o, 0, sizeof o);
  memset(&chat, 0, sizeof chat);
  int32_t *ids = NULL;
  int64_t n = 0;
  char *prompt = NULL, *head = NULL, *body = NULL;
  const char *eot = NULL;
  gt_rc rc = GT_OK;
  if (c->tokenizer_path[0]) rc = gt_tokenizer_load(c->tokenizer_path, &tok, err);
  if (!rc) rc = gt_textgen_init(&g, m, tok, &smp, err);
  if (!rc) rc = gt_sampler_init(&smp, GT_SAMPLE_WEIGHTED, 0.7, 0, -1.0, 0x5EED0000ull + (uint64_t)c->init_weights_seed,
                                m->vocab, err);
  /* an SFT run's model answers the prompt as a user turn of its chat template */
  if (!rc && c->use_sft && !(rc = gt_decode_chat_add(&chat, "user", c->sample_prompt, err)) &&
      !(rc = gt_decode_chat_render(c, &chat, &prompt, &eot, err)))
    rc = gt_textgen_set_end_of_turn(&g, eot, err);
  if (!rc) rc = gt_textgen_encode(&g, prompt ? prompt : c->sample_prompt, &ids, &n, err);
  if (!rc) rc = gt_textgen_generate(&g, ids, n, c->sample_tokens, &o, err);
  /* the console and the log get escaped text: a model's bytes may be
   * control characters or invalid UTF-8 */
  if (!rc && !(head = gt_text_escape(c->sample_prompt, strlen(c->sample_prompt))))
    rc = gt_err_set(err, GT_ERR_NOMEM, "sample: no memory");
  if (!rc && !(body = gt_text_escape(o.text, o.len))) rc = gt_err_set(err, GT_ERR_NOMEM, "sample: no memory");
  if (!rc) {
    size_t len = strlen(head) + strlen(body) + 32;
    if (!(*text_out = malloc(len)))
      rc = gt_err_set(err, GT_ERR_NOMEM, "sample: no memory");
    else if (prompt)
      snprintf(*text_out, len, "user: %s\nmodel: %s", head, body);
    else
      snprintf(*text_out, len, "%s%s", head, body);
    *n_new_out = o.n_new;
  }
  free(head);
  free(body);
  free(prompt);
  free(ids);
  gt_decode_chat_free(&chat);
  gt_textgen_out_free(&o);
  gt_textgen_free(&g);
  gt_sampler_free(&smp);
  gt_tokenizer_free(tok);
  return rc;
}
