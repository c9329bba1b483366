/* Generation as text (text.h): ids in and out through the model's
 * tokenizer (or byte tokens), stopping at the end of a turn or a stop
 * string, on top of the decoder's gt_decode_generate_until. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat.h"
#include "data/data.h"
#include "data/docs.h"
#include "decode/text.h"

/* ---- the stop key ---- */

void gt_stop_strings_free(char **s, int n) {
  for (int i = 0; s && i < n; i++) free(s[i]);
  free(s);
}

gt_rc gt_stop_strings_parse(const char *value, char ***out, int *n, gt_err *err) {
  *out = NULL;
  *n = 0;
  if (!value || !value[0]) return GT_OK;
  cJSON *j = value[0] == '[' ? cJSON_Parse(value) : NULL;
  int count = 1;
  if (cJSON_IsArray(j)) {
    count = cJSON_GetArraySize(j);
    const cJSON *e;
    cJSON_ArrayForEach(e, j) if (!cJSON_IsString(e) || !e->valuestring[0]) {
      cJSON_Delete(j);
      return gt_err_set(err, GT_ERR_CONFIG,
                        "decode: key 'stop' = %s is a list with an element that is not a non-empty string; expected "
                        "a string or a JSON list of strings",
                        value);
    }
  } else {
    cJSON_Delete(j); /* not a JSON list: the value is the one stop string */
    j = NULL;
  }
  char **s = calloc((size_t)(count ? count : 1), sizeof *s);
  gt_rc rc = s ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the stop strings");
  if (!rc && j) {
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, j) if (!rc && !(s[i++] = strdup(e->valuestring)))
      rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the stop strings");
  } else if (!rc && !(s[0] = strdup(value))) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the stop strings");
  }
  cJSON_Delete(j);
  if (rc) {
    gt_stop_strings_free(s, count);
    return rc;
  }
  *out = s;
  *n = count;
  return GT_OK;
}

/* ---- text and ids ---- */

gt_rc gt_textgen_init(gt_textgen *g, gt_model *m, const gt_tokenizer *tok, gt_sampler *smp, gt_err *err) {
  memset(g, 0, sizeof *g);
  g->m = m;
  g->tok = tok;
  g->smp = smp;
  g->eot_id = -1;
  g->eot_stop = -1;
  g->ch_open_id = g->ch_close_id = -1;
  /* byte tokens fit any larger vocabulary, so a model of another one (a
   * run on Gemma-tokenized shards, which records no tokenizer) would read
   * its prompt as bytes and write ids >= 260 as nothing, without a word:
   * byte tokens are for byte models, as training has them (data/store.c) */
  if (!tok && m->vocab != GT_BYTE_VOCAB)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: text without a tokenizer is read as byte tokens (%d ids), but the model's vocab_size "
                      "is %lld: its vocabulary is another; set tokenizer_path to the model's tokenizer.json (the "
                      "one its data was tokenized with; byte tokens need vocab_size = %d)",
                      GT_BYTE_VOCAB, (long long)m->vocab, GT_BYTE_VOCAB);
  /* <bos> and <eos> as training takes them from the tokenizer */
  gt_encoder e;
  gt_encoder_init(&e, tok, m->vocab);
  g->bos = e.bos;
  g->eos = e.eos;
  /* the ids a sample may take: the tokenizer's (its ids are dense) */
  g->n_ids = tok ? gt_tokenizer_n_ids(tok) : 0;
  return GT_OK;
}

void gt_textgen_free(gt_textgen *g) {
  for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
  if (g->dec_len) gt_decoder_free(&g->dec);
  memset(g, 0, sizeof *g);
}

gt_rc gt_textgen_add_stop(gt_textgen *g, const char *s, gt_err *err) {
  if (!s || !s[0]) return gt_err_set(err, GT_ERR_CONFIG, "decode: a stop string is empty");
  if (g->n_stops == GT_TEXTGEN_MAX_STOPS)
    return gt_err_set(err, GT_ERR_CONFIG, "decode: more than %d stop strings", GT_TEXTGEN_MAX_STOPS - 1);
  if (!(g->stops[g->n_stops] = strdup(s))) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  g->n_stops++;
  return GT_OK;
}

gt_rc gt_textgen_set_end_of_turn(gt_textgen *g, const char *marker, gt_err *err) {
  int32_t id = g->tok ? gt_tokenizer_token_id(g->tok, marker, strlen(marker)) : -1;
  if (id >= 0) {
    g->eot_id = id;
    return GT_OK;
  }
  gt_rc rc = gt_textgen_add_stop(g, marker, err);
  if (!rc) g->eot_stop = g->n_stops - 1;
  return rc;
}

gt_rc gt_textgen_set_chat(gt_textgen *g, const gt_config *cfg, gt_err *err) {
  gt_chat_template t = gt_chat_template_for(cfg);
  gt_rc rc = GT_OK;
  if (g->eot_id < 0 && g->eot_stop < 0 && (rc = gt_textgen_set_end_of_turn(g, gt_chat_end_of_turn(t), err))) return rc;
  if (t == GT_CHAT_GEMMA4) {
    g->ch_open = "<|channel>";
    g->ch_close = "<channel|>";
    g->ch_open_id = g->tok ? gt_tokenizer_token_id(g->tok, g->ch_open, strlen(g->ch_open)) : -1;
    g->ch_close_id = g->tok ? gt_tokenizer_token_id(g->tok, g->ch_close, strlen(g->ch_close)) : -1;
  }
  return GT_OK;
}

gt_rc gt_textgen_encode(const gt_textgen *g, const char *text, int32_t **ids_out, int64_t *n_out, gt_err *err) {
  *ids_out = NULL;
  *n_out = 0;
  if (!strncmp(text, "<bos>", 5)) text += 5;
  size_t len = strlen(text);
  int32_t *ids = NULL, *t = NULL;
  int64_t k = (int64_t)len;
  gt_rc rc = GT_OK;
  if (g->tok && (rc = gt_tokenizer_encode(g->tok, text, len, 0, &t, &k, err))) return rc;
  if (!(ids = malloc(sizeof(int32_t) * (size_t)(k + 1)))) {
    free(t);
    return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for %lld prompt tokens", (long long)k + 1);
  }
  ids[0] = g->bos;
  if (g->tok)
    memcpy(ids + 1, t, (size_t)k * sizeof(int32_t));
  else
    gt_bytes_encode((const unsigned char *)text, k, ids + 1);
  free(t);
  for (int64_t i = 0; i <= k; i++)
    if (ids[i] < 0 || ids[i] >= g->m->vocab) {
      size_t tl = 0;
      const char *ts = g->tok ? gt_tokenizer_token(g->tok, ids[i], &tl) : NULL;
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "decode: the prompt's token %lld is id %d ('%.*s'), outside the model's vocab_size %lld; the "
                      "tokenizer is not the model's (set tokenizer_path to the one it was trained with)",
                      (long long)i, ids[i], (int)(tl > 40 ? 40 : tl), ts ? ts : "", (long long)g->m->vocab);
      free(ids);
      return rc;
    }
  *ids_out = ids;
  *n_out = k + 1;
  return GT_OK;
}

/* The text of ids with the thought channel's marker tokens kept as their
 * text: the runs between them decoded as usual. */
static gt_rc gt__text_channel(const gt_textgen *g, const int32_t *ids, int64_t n, char **text, size_t *len,
                              gt_err *err) {
  size_t cap = 64, o = 0;
  char *r = malloc(cap);
  gt_rc rc = r ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the text");
  for (int64_t i = 0; !rc && i < n;) {
    int64_t j = i;
    while (j < n && ids[j] != g->ch_open_id && ids[j] != g->ch_close_id) j++;
    char *t = NULL;
    size_t tl = 0;
    const char *piece;
    if (j > i) {
      if ((rc = gt_tokenizer_decode(g->tok, ids + i, j - i, GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE, &t,
                                    &tl, err)))
        break;
      piece = t;
    } else {
      piece = ids[i] == g->ch_open_id ? g->ch_open : g->ch_close;
      tl = strlen(piece);
      j = i + 1;
    }
    if (o + tl + 1 > cap) {
      while (o + tl + 1 > cap) cap *= 2;
      char *q = realloc(r, cap);
      if (!q) rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the text");
      else r = q;
    }
    if (!rc) memcpy(r + o, piece, tl), o += tl;
    free(t);
    i = j;
  }
  if (rc) {
    free(r);
    return rc;
  }
  r[o] = '\0';
  *text = r;
  *len = o;
  return GT_OK;
}

gt_rc gt_textgen_text(const gt_textgen *g, const int32_t *ids, int64_t n, char **text, size_t *len, gt_err *err) {
  if (g->tok && (g->ch_open_id >= 0 || g->ch_close_id >= 0)) return gt__text_channel(g, ids, n, text, len, err);
  if (g->tok)
    return gt_tokenizer_decode(g->tok, ids, n, GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE, text, len, err);
  if (!(*text = malloc((size_t)n + 1))) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the text");
  *len = (size_t)gt_bytes_decode(ids, n, (unsigned char *)*text);
  (*text)[*len] = '\0';
  return GT_OK;
}

/* The first occurrence of s (NUL-terminated) in t[0..n), or -1: the text
 * may hold NUL bytes (<0x00> is a token like any other). */
static int64_t gt__find(const char *t, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; k <= n && i <= n - k; i++)
    if (t[i] == s[0] && !memcmp(t + i, s, k)) return (int64_t)i;
  return -1;
}

/* ---- generation ---- */

typedef struct gt__stopctx {
  gt_textgen *g;
  gt_textgen_out *o;
  int64_t cut; /* byte offset of the stop string's match in the reply */
} gt__stopctx;

static gt_rc gt__stop(void *ctx, const int32_t *ids, int64_t n, int *halt, gt_err *err) {
  gt__stopctx *c = ctx;
  gt_textgen *g = c->g;
  if (ids[n - 1] == g->eot_id) {
    c->o->reason = GT_STOP_END_OF_TURN;
    *halt = 1;
    return GT_OK;
  }
  if (!g->n_stops) return GT_OK;
  /* the text so far, searched whole: a stop string may span tokens, and a
   * byte-fallback run is only whole when its last byte has come */
  char *t = NULL;
  size_t len = 0;
  gt_rc rc = gt_textgen_text(g, ids, n, &t, &len, err);
  if (rc) return rc;
  int64_t best = -1;
  for (int i = 0; i < g->n_stops; i++) {
    int64_t p = gt__find(t, len, g->stops[i]);
    if (p >= 0 && (best < 0 || p < best)) {
      best = p;
      c->o->stop_index = i;
    }
  }
  free(t);
  if (best >= 0) {
    c->cut = best;
    c->o->reason = c->o->stop_index == g->eot_stop ? GT_STOP_END_OF_TURN : GT_STOP_STRING;
    *halt = 1;
  }
  return GT_OK;
}

gt_rc gt_textgen_generate(gt_textgen *g, const int32_t *prompt, int64_t n_prompt, int64_t max_new, gt_textgen_out *o,
                          gt_err *err) {
  memset(o, 0, sizeof *o);
  if (max_new < 0) return gt_err_set(err, GT_ERR_ARG, "decode: max_decode_steps = %lld is negative", (long long)max_new);
  int64_t need = n_prompt + (max_new > 0 ? max_new - 1 : 0);
  gt_rc rc;
  if (need > g->dec_len) {
    if (g->dec_len) gt_decoder_free(&g->dec);
    g->dec_len = 0;
    if ((rc = gt_decoder_init(&g->dec, g->m, need, err))) return rc;
    g->dec_len = need;
  }
  if (!(o->ids = malloc(sizeof(int32_t) * (size_t)(max_new > 0 ? max_new : 1))))
    return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for %lld tokens", (long long)max_new);
  gt__stopctx c = {g, o, -1};
  const gt_decode_ctl ctl = {g->eos, g->n_ids, gt__stop, &c};
  rc = gt_decode_generate_until(&g->dec, g->smp, prompt, n_prompt, max_new, o->ids, NULL, &ctl, &o->st, err);
  o->n_new = o->st.n_new;
  if (o->st.stopped_at_eos) o->reason = GT_STOP_EOS;
  /* the reply's text: without the token that ended the turn, cut before a stop string */
  int64_t n_text = o->n_new - (o->reason == GT_STOP_EOS || (o->reason == GT_STOP_END_OF_TURN && c.cut < 0));
  if (!rc) rc = gt_textgen_text(g, o->ids, n_text, &o->text, &o->len, err);
  if (!rc && c.cut >= 0) o->text[o->len = (size_t)c.cut] = '\0';
  if (!rc) rc = gt_textgen_split_thinking(g, o, err);
  if (rc) gt_textgen_out_free(o);
  return rc;
}

gt_rc gt_textgen_split_thinking(const gt_textgen *g, gt_textgen_out *o, gt_err *err) {
  if (!g->ch_open || !o->text ||
      (gt__find(o->text, o->len, g->ch_open) < 0 && gt__find(o->text, o->len, g->ch_close) < 0))
    return GT_OK;
  char *answer, *thought;
  size_t an, tn;
  gt_rc rc = gt_chat_split_thinking(o->text, o->len, &answer, &an, &thought, &tn, err);
  if (rc) return rc;
  free(o->text);
  free(o->thinking);
  o->text = answer;
  o->len = an;
  o->thinking = thought;
  o->thinking_len = tn;
  return GT_OK;
}

void gt_textgen_out_free(gt_textgen_out *o) {
  free(o->ids);
  free(o->text);
  free(o->thinking);
  o->ids = NULL;
  o->text = NULL;
  o->thinking = NULL;
}

void gt_textgen_reason_text(const gt_textgen *g, const gt_textgen_out *o, char *buf, size_t n) {
  switch (o->reason) {
    case GT_STOP_EOS: snprintf(buf, n, "stopped at <eos>"); break;
    case GT_STOP_END_OF_TURN: snprintf(buf, n, "stopped at the end of turn"); break;
    case GT_STOP_STRING: {
      /* 1-based among the user's stop strings (the end-of-turn text, when there is one, is not theirs) */
      int k = o->stop_index + 1 - (g->eot_stop >= 0 && g->eot_stop < o->stop_index);
      snprintf(buf, n, "stopped at stop string %d", k);
      break;
    }
    default: snprintf(buf, n, "max_decode_steps reached");
  }
}
