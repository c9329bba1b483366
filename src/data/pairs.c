/* Preference pairs (use_dpo): JSON Lines records of a prompt with a chosen
 * and a rejected response, each side tokenized as one sequence with the
 * prompt out of the loss; row pairs (chosen in row 2i, rejected in row
 * 2i + 1, a pair under one segment id in both); and those rows in a batch.
 * data.h has the contract, docs/preference.md the user's account.
 *
 * Record forms (field names from train_data_columns, see gt__pair_cols):
 *   plain          {"prompt": "...", "chosen": "...", "rejected": "..."}
 *                  <bos> prompt response <eos>, as SFT's prompt/completion:
 *                  the loss covers the response and <eos>
 *   chat           {"chosen": [messages], "rejected": [messages]}: the
 *                  messages before the final model turn are the prompt and
 *                  must be the same on both sides; the final model turn is
 *                  the response
 *   conversational {"prompt": [messages], "chosen": [messages],
 *                  "rejected": [messages]} (TRL's): the response is the
 *                  model turn(s) of chosen / rejected after the prompt
 * A chat side is the conversation rendered with the model's chat template
 * (data/chat.h), as SFT renders it: the prompt is everything up to and
 * including the opening of the first response turn (and the empty thought
 * block that primes it on Gemma 4's larger models); the loss covers the
 * response's model turns (content and end-of-turn marker; the thought
 * channel when sft_train_on_thinking), not a user turn inside a multi-turn
 * response, nor the closing <eos>. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

typedef struct gt__pair_fmt {
  char prompt[GT_STR_SHORT], chosen[GT_STR_SHORT], rejected[GT_STR_SHORT];
  gt_chat_opts chat;
  uint32_t thought; /* the flag of the thought channel's tokens: 0 (in the loss) or GT__NOLOSS */
  const char *tokenizer_path; /* for the marker check's message */
  int markers_checked;        /* the tokenizer's turn markers, checked at the first chat pair */
} gt__pair_fmt;

/* train_data_columns: the default 'text' (prompt, chosen, rejected), or
 * "prompt,chosen,rejected" / "chosen,rejected" under other names (the
 * prompt field is then 'prompt'). */
static gt_rc gt__pair_cols(gt__pair_fmt *f, const gt_config *c, gt_err *err) {
  char col[4][GT_STR_SHORT];
  int n = 0;
  for (const char *s = c->train_data_columns; n < 4;) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    while (len && *s == ' ') s++, len--;
    while (len && s[len - 1] == ' ') len--;
    snprintf(col[n++], GT_STR_SHORT, "%.*s", (int)len, s);
    if (!e) break;
    s = e + 1;
  }
  snprintf(f->prompt, GT_STR_SHORT, "prompt");
  snprintf(f->chosen, GT_STR_SHORT, "chosen");
  snprintf(f->rejected, GT_STR_SHORT, "rejected");
  int empty = 0;
  for (int i = 0; i < n; i++) empty |= !col[i][0];
  if (n == 1 && !strcmp(col[0], "text")) return GT_OK;
  if (!empty && (n == 2 || n == 3)) {
    if (n == 3) memcpy(f->prompt, col[0], GT_STR_SHORT);
    memcpy(f->chosen, col[n - 2], GT_STR_SHORT);
    memcpy(f->rejected, col[n - 1], GT_STR_SHORT);
    return GT_OK;
  }
  return gt_err_set(err, GT_ERR_CONFIG,
                    "data: use_dpo: key 'train_data_columns' = '%s'; expected prompt,chosen,rejected or chosen,rejected "
                    "(field names), or the default 'text' (fields prompt, chosen, rejected)",
                    c->train_data_columns);
}

static gt_rc gt__put(gt_tokvec *out, int32_t id, uint32_t flag, gt_err *err) {
  uint32_t v = (uint32_t)id | flag;
  return gt_tokvec_push(out, &v, 1, err);
}

static gt_rc gt__no(const char *file, int64_t line, const char *name, gt_err *err) {
  return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: no field '%s' (a preference record needs it)", file,
                    (long long)line, name);
}

static int gt__blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '\f' && *s != '\v') return 0;
  return 1;
}

static int gt__is_model(const gt_chat_msg *m) { return !strcmp(m->role, "assistant") || !strcmp(m->role, "model"); }

static int gt__same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* One chat side: prompt messages pm[0..np) then response messages
 * rm[0..nr), rendered and encoded piece by piece (docs.c's way). */
static gt_rc gt__chat_side(const gt_encoder *e, const gt__pair_fmt *f, const gt_chat_msg *pm, int np,
                           const gt_chat_msg *rm, int nr, const char *file, int64_t line, const char *field,
                           gt_tokvec *out, gt_err *err) {
  if (!gt__is_model(&rm[0]))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s': the response starts with a '%s' message; expected a model "
                      "turn (role assistant or model)",
                      file, (long long)line, field, rm[0].role);
  int content = 0;
  for (int k = 0; k < nr; k++) content |= gt__is_model(&rm[k]) && !gt__blank(rm[k].content);
  if (!content)
    return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s': the response is empty (no model turn with content)",
                      file, (long long)line, field);
  gt_chat_msg *all = malloc(sizeof *all * (size_t)(np + nr));
  if (!all) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %d messages", np + nr);
  if (np) memcpy(all, pm, sizeof *all * (size_t)np);
  memcpy(all + np, rm, sizeof *all * (size_t)nr);
  char where[600];
  snprintf(where, sizeof where, "data: '%s' line %lld", file, (long long)line);
  gt_chat_opts o = f->chat;
  o.where = where;
  o.field = field;
  gt_chat_pieces p;
  gt_rc rc = gt_chat_render(&o, all, np + nr, 0, &p, err);
  /* the response starts after the opening of model turn number m0 + 1 (m0:
   * the prompt's model turns), and after the empty thought block that
   * primes it, which the generation prompt supplies */
  int m0 = 0;
  for (int k = 0; k < np; k++) m0 += gt__is_model(&pm[k]);
  const char *open = o.t == GT_CHAT_GEMMA4 ? "<|turn>model\n" : "<start_of_turn>model\n";
  const char *prime = "<|channel>thought\n<channel|>";
  int R = -1, seen = 0;
  for (int i = 0; i < p.n && !rc && R < 0; i++) {
    const gt_chat_piece *pc = &p.v[i];
    if (pc->kind == GT_CHAT_PROMPT && pc->n == strlen(open) && !memcmp(pc->s, open, pc->n) && seen++ == m0) {
      R = i + 1;
      if (R < p.n && p.v[R].kind == GT_CHAT_PROMPT && p.v[R].n == strlen(prime) && !memcmp(p.v[R].s, prime, p.v[R].n))
        R++;
    }
  }
  if (!rc && R < 0)
    rc = gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s': no model turn opens the response", file,
                    (long long)line, field);
  snprintf(where, sizeof where, "'%s' line %lld", file, (long long)line);
  uint32_t *fl = rc ? NULL : malloc(sizeof *fl * (size_t)(p.n + 1));
  if (!rc && !fl) rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %s", where);
  for (int i = 0; i < p.n && !rc; i++) {
    const int kind = p.v[i].kind;
    fl[i] = GT__NOLOSS;
    if (i >= R && kind != GT_CHAT_BOS) fl[i] = kind == GT_CHAT_ANSWER ? 0 : kind == GT_CHAT_THOUGHT ? f->thought : GT__NOLOSS;
  }
  if (!rc) rc = gt_encode_pieces(e, &p, fl, out, where, err);
  free(fl);
  if (!rc) rc = gt__put(out, e->eos, GT__NOLOSS, err);
  gt_chat_pieces_free(&p);
  free(all);
  return rc;
}

static gt_rc gt__messages(const cJSON *rec, const char *name, const char *file, int64_t line, gt_chat_msg **m, int *n,
                          gt_err *err) {
  return gt_doc_messages(cJSON_GetObjectItemCaseSensitive(rec, name), file, line, name, m, n, err);
}

/* Record rec as its two sequences, chosen then rejected, appended to out. */
static gt_rc gt__render_pair(const gt_encoder *e, gt__pair_fmt *f, const cJSON *rec, const char *file,
                             int64_t line, gt_tokvec *out, int64_t *mid, gt_err *err) {
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(rec, f->prompt),
              *ch = cJSON_GetObjectItemCaseSensitive(rec, f->chosen),
              *rj = cJSON_GetObjectItemCaseSensitive(rec, f->rejected);
  if (!ch) return gt__no(file, line, f->chosen, err);
  if (!rj) return gt__no(file, line, f->rejected, err);
  char where[600];
  snprintf(where, sizeof where, "'%s' line %lld", file, (long long)line);
  if (cJSON_IsString(ch)) { /* plain text */
    if (!cJSON_IsString(rj))
      return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' is %s, '%s' a string; expected both strings",
                        file, (long long)line, f->rejected, gt_json_type_name(rj), f->chosen);
    if (!pr) return gt__no(file, line, f->prompt, err);
    if (!cJSON_IsString(pr))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: field '%s' is %s; expected a string, as '%s' and '%s' are", file,
                        (long long)line, f->prompt, gt_json_type_name(pr), f->chosen, f->rejected);
    const char *side[2] = {f->chosen, f->rejected}, *text[2] = {ch->valuestring, rj->valuestring};
    gt_rc rc = GT_OK;
    for (int k = 0; k < 2 && !rc; k++) {
      if (!text[k][0])
        return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' (a response) is empty", file,
                          (long long)line, side[k]);
      if (k == 1) *mid = out->n;
      if (!(rc = gt__put(out, e->bos, GT__NOLOSS, err)) &&
          !(rc = gt_encode_append(e, pr->valuestring, strlen(pr->valuestring), GT__NOLOSS, out, where, err)) &&
          !(rc = gt_encode_append(e, text[k], strlen(text[k]), 0, out, where, err)))
        rc = gt__put(out, e->eos, 0, err);
    }
    return rc;
  }
  if (!cJSON_IsArray(ch))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s' is %s; expected a string (with '%s') or an array of messages",
                      file, (long long)line, f->chosen, gt_json_type_name(ch), f->prompt);
  if (!cJSON_IsArray(rj))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s' is %s, '%s' an array of messages; expected both arrays", file,
                      (long long)line, f->rejected, gt_json_type_name(rj), f->chosen);
  /* (chat pairs only: plain ones are <bos> prompt response <eos>, no template) */
  if (!f->markers_checked) {
    gt_rc mk = gt_encoder_check_chat(e, f->chat.t, f->tokenizer_path, err);
    if (mk) return mk;
    f->markers_checked = 1;
  }
  if (pr && !cJSON_IsArray(pr))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s' is %s; with messages in '%s' and '%s' expected an array of "
                      "messages (the conversational form) or no '%s' (the prompt is the messages before the final "
                      "model turn)",
                      file, (long long)line, f->prompt, gt_json_type_name(pr), f->chosen, f->rejected, f->prompt);
  gt_chat_msg *pm = NULL, *cm = NULL, *rm = NULL;
  int np = 0, nc = 0, nr = 0;
  gt_rc rc = gt__messages(rec, f->chosen, file, line, &cm, &nc, err);
  if (!rc) rc = gt__messages(rec, f->rejected, file, line, &rm, &nr, err);
  if (!rc && pr) rc = gt__messages(rec, f->prompt, file, line, &pm, &np, err);
  const gt_chat_msg *rc_m = cm, *rr_m = rm; /* the responses */
  int rc_n = nc, rr_n = nr;
  if (!rc && !pr) {
    /* the shared prefix: every message before the final one, on both sides */
    if (nc != nr)
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s' has %d messages, '%s' %d; the prompt (the messages before the "
                      "final model turn) must be the same on both sides",
                      file, (long long)line, f->chosen, nc, f->rejected, nr);
    for (int k = 0; k + 1 < nc && !rc; k++)
      if (strcmp(cm[k].role, rm[k].role) || strcmp(cm[k].content, rm[k].content) ||
          !gt__same_str(cm[k].thinking, rm[k].thinking))
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: %s[%d] and %s[%d] differ; the prompt (the messages before the final "
                        "model turn) must be the same on both sides",
                        file, (long long)line, f->chosen, k, f->rejected, k);
    pm = NULL;
    np = nc - 1;
    rc_m = cm + np, rr_m = rm + np, rc_n = rr_n = 1;
    if (!rc) { /* the prompt is chosen's first messages, which rejected shares */
      if (!(pm = malloc(sizeof *pm * (size_t)(np ? np : 1)))) rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory");
      if (pm && np) memcpy(pm, cm, sizeof *pm * (size_t)np);
    }
  }
  if (!rc) rc = gt__chat_side(e, f, pm, np, rc_m, rc_n, file, line, f->chosen, out, err);
  if (!rc) *mid = out->n;
  if (!rc) rc = gt__chat_side(e, f, pm, np, rr_m, rr_n, file, line, f->rejected, out, err);
  free(pm);
  free(cm);
  free(rm);
  return rc;
}

/* Whether any of a sequence's targets (tokens 1 .. n - 1) is in the loss. */
static int gt__trains(const uint32_t *t, int64_t n) {
  for (int64_t k = 1; k < n; k++)
    if (!(t[k] & GT__NOLOSS)) return 1;
  return 0;
}

/* The tokens a sequence's loss reads: up to its last target in the loss. */
static int64_t gt__loss_span(const uint32_t *t, int64_t n) {
  while (n > 1 && (t[n - 1] & GT__NOLOSS)) n--;
  return n;
}

/* Two sides the same in every token the loss reads: the pair's log-ratios
 * cancel, so it adds a constant log 2 to the loss and a wrong answer to
 * the accuracy. Refused, naming the tokens compared. */
static gt_rc gt__same_sides(const uint32_t *a, int64_t na, const uint32_t *b, int64_t nb, const char *file,
                            int64_t line, const gt__pair_fmt *f, int cut, gt_err *err) {
  int64_t sa = gt__loss_span(a, na), sb = gt__loss_span(b, nb);
  if (sa != sb || memcmp(a, b, (size_t)sa * sizeof(uint32_t))) return GT_OK;
  return gt_err_set(err, GT_ERR_FORMAT,
                    "data: '%s' line %lld: fields '%s' and '%s' are the same in every token the loss reads (%lld "
                    "tokens once rendered%s); a pair needs two different responses",
                    file, (long long)line, f->chosen, f->rejected, (long long)sa,
                    cut ? ", as overlong_records=truncate cuts them" : "");
}

gt_rc gt__open_pairs(gt__store *s, const gt_config *c, const char *spec, const char *key, const gt_encoder *enc,
                     gt_err *err) {
  gt__pair_fmt f;
  memset(&f, 0, sizeof f);
  gt_rc rc = gt__pair_cols(&f, c, err);
  if (rc) return rc;
  gt_chat_opts_init(&f.chat, c);
  f.tokenizer_path = c->tokenizer_path;
  f.thought = c->sft_train_on_thinking ? 0 : GT__NOLOSS;
  if (c->enable_thinking && f.chat.t != GT_CHAT_GEMMA4)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'enable_thinking' = true, but the chat template is Gemma 3's, which has no thinking "
                      "mode (chat_template = %s, decoder_block = %s)",
                      c->chat_template, c->decoder_block);
  gt__paths p;
  if ((rc = gt__paths_expand(spec, key, (const char *const[]){".jsonl", ".jsonl.gz", ".json", ".json.gz", NULL}, &p,
                             err)))
    return rc;
  if ((rc = gt__files_from(s, &p, err))) {
    gt__paths_free(&p);
    return rc;
  }
  int truncate = !strcmp(c->overlong_records, "truncate");
  int64_t row = c->max_target_length + 1, rec_cap = 0;
  gt_tokvec tv = {NULL, 0, 0, s->mem};
  for (int i = 0; !rc && i < p.n; i++) {
    gt_jsonl r;
    s->file_tok0[i] = tv.n;
    if ((rc = gt_jsonl_open(&r, p.v[i], err))) break;
    for (;;) {
      cJSON *rec;
      if ((rc = gt_jsonl_next(&r, &rec, err)) || !rec) break;
      int64_t a0 = tv.n, a1 = 0;
      rc = gt__render_pair(enc, &f, rec, p.v[i], r.line_no, &tv, &a1, err);
      cJSON_Delete(rec);
      if (rc) {
        tv.n = a0;
        break;
      }
      int64_t L[2] = {a1 - a0, tv.n - a1};
      const char *side[2] = {f.chosen, f.rejected};
      if ((rc = gt__same_sides(tv.v + a0, L[0], tv.v + a1, L[1], p.v[i], r.line_no, &f, 0, err))) break;
      int cut = 0;
      for (int k = 0; k < 2 && !rc; k++)
        if (L[k] > row) {
          if (!truncate)
            rc = gt_err_set(err, GT_ERR_FORMAT,
                            "data: '%s' line %lld: field '%s' makes a sequence of %lld tokens, longer than "
                            "max_target_length + 1 = %lld (overlong_records=refuse; overlong_records=truncate keeps "
                            "the first %lld tokens of each side)",
                            p.v[i], (long long)r.line_no, side[k], (long long)L[k], (long long)row, (long long)row);
          cut = 1;
        }
      if (rc) break;
      /* what truncation drops, kept per pair: the split counts its sides' */
      uint32_t dropped = (uint32_t)((L[0] > row ? L[0] - row : 0) + (L[1] > row ? L[1] - row : 0));
      if ((rc = gt_tokvec_push(&s->pair_cut, &dropped, 1, err))) break;
      /* truncate: each side keeps its first T + 1 tokens (rejected moves up) */
      if (L[0] > row) {
        memmove(tv.v + a0 + row, tv.v + a1, (size_t)L[1] * sizeof(uint32_t));
        L[0] = row;
        a1 = a0 + row;
      }
      if (L[1] > row) L[1] = row;
      tv.n = a1 + L[1];
      for (int k = 0; k < 2 && !rc; k++)
        if (!gt__trains(tv.v + (k ? a1 : a0), L[k]))
          rc = gt_err_set(err, GT_ERR_FORMAT,
                          "data: '%s' line %lld: field '%s' keeps no response token in the loss (the prompt fills "
                          "the first %lld tokens, all that overlong_records=truncate keeps); shorten the prompt or "
                          "raise max_target_length",
                          p.v[i], (long long)r.line_no, side[k], (long long)row);
      if (!rc && cut) rc = gt__same_sides(tv.v + a0, L[0], tv.v + a1, L[1], p.v[i], r.line_no, &f, 1, err);
      if (rc) break;
      s->n_truncated += cut;
      s->n_docs++;
      if ((rc = gt__rec_push(s, &rec_cap, a0, err)) || (rc = gt__rec_push(s, &rec_cap, a1, err))) break;
    }
    gt_jsonl_close(&r);
  }
  if (!rc && s->n_docs == 0) rc = gt_err_set(err, GT_ERR_FORMAT, "data: %s '%s' holds no records", key, spec);
  if (!rc) { /* rec[n_rec] = the end */
    rc = gt__rec_push(s, &rec_cap, tv.n, err);
    s->n_rec--;
  }
  s->file_tok0[p.n] = tv.n;
  gt__paths_free(&p);
  if (rc) {
    gt_tokvec_free(&tv);
    return rc;
  }
  s->tok = tv.v;
  s->n_tok = tv.n;
  return GT_OK;
}

/* Pairs [lo, hi) into row pairs: each alone, or (packing) joining the row
 * pair before while both its sequences still fit their rows. */
static int64_t gt__pack_pairs(const int64_t *rec, int64_t lo, int64_t hi, int T, int packing, int64_t *start,
                              int32_t *len) {
  int64_t rows = 0, cur = -1, full = T + 1, used[2] = {0, 0};
  int32_t n = 0;
  for (int64_t q = lo; q < hi; q++) {
    int64_t L0 = rec[2 * q + 1] - rec[2 * q], L1 = rec[2 * q + 2] - rec[2 * q + 1];
    if (cur >= 0 && packing && used[0] + L0 <= full && used[1] + L1 <= full) {
      used[0] += L0, used[1] += L1, n++;
      continue;
    }
    if (cur >= 0) {
      if (start) start[rows] = cur, len[rows] = n;
      rows++;
    }
    cur = q, used[0] = L0, used[1] = L1, n = 1;
  }
  if (cur >= 0) {
    if (start) start[rows] = cur, len[rows] = n;
    rows++;
  }
  return rows;
}

gt_rc gt__src_add_pairs(gt__data_src *src, int64_t p_lo, int64_t p_hi, int T, int packing, gt_err *err) {
  const int64_t *rec = src->store->rec;
  int64_t n = gt__pack_pairs(rec, p_lo, p_hi, T, packing, NULL, NULL);
  if (n == 0) return GT_OK;
  gt__part pt = {rec[2 * p_lo], rec[2 * p_hi], n, NULL, NULL};
  pt.start = gt_mem_alloc_uninit(src->mem, GT_MEM_DATA, (size_t)n * sizeof(int64_t));
  pt.len = gt_mem_alloc_uninit(src->mem, GT_MEM_DATA, (size_t)n * sizeof(int32_t));
  gt__part *v = realloc(src->parts, sizeof *v * (size_t)(src->n_parts + 1));
  int64_t *r0 = realloc(src->part_row0, sizeof *r0 * (size_t)(src->n_parts + 2));
  if (v) src->parts = v;
  if (r0) src->part_row0 = r0;
  if (!pt.start || !pt.len || !v || !r0) {
    gt_mem_free(src->mem, pt.start);
    gt_mem_free(src->mem, pt.len);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld row pairs", (long long)n);
  }
  gt__pack_pairs(rec, p_lo, p_hi, T, packing, pt.start, pt.len);
  src->parts[src->n_parts] = pt;
  src->part_row0[src->n_parts] = src->n_rows;
  src->n_parts++;
  src->n_rows += n;
  src->part_row0[src->n_parts] = src->n_rows;
  src->n_tokens += pt.hi - pt.lo;
  for (int64_t q = p_lo; q < p_hi; q++)
    if (src->store->pair_cut.v[q]) src->n_truncated++, src->n_dropped += src->store->pair_cut.v[q];
  return GT_OK;
}

void gt__fill_seqs(const uint32_t *s, const int32_t *lens, int n, int T, int32_t *in, int32_t *tg, int32_t *pos,
                   int32_t *seg) {
  int64_t col = 0;
  for (int j = 0; j < n; j++) {
    for (int32_t i = 0; i < lens[j]; i++, s++) {
      if (col + i >= T) break;
      int last = i + 1 == lens[j];
      in[col + i] = (int32_t)(s[0] & ~GT__NOLOSS);
      tg[col + i] = last || (s[1] & GT__NOLOSS) ? -1 : (int32_t)s[1];
      pos[col + i] = i;
      seg[col + i] = j + 1;
    }
    col += lens[j];
  }
  if (col < T) gt__blank_row(T - (int)col, in + col, tg + col, pos + col, seg + col);
}

gt_rc gt__put_pair_rows(gt__data_src *src, int64_t k, int T, int r, uint32_t *buf, int32_t *lens, int32_t *in,
                        int32_t *tg, int32_t *pos, int32_t *seg, gt_err *err) {
  int64_t q0, n;
  gt__src_row(src, k, &q0, &n, T, NULL);
  const int64_t *rec = src->store->rec;
  for (int side = 0; side < 2; side++) {
    int64_t o = 0;
    for (int64_t j = 0; j < n; j++) {
      int64_t off = rec[2 * (q0 + j) + side], L = rec[2 * (q0 + j) + side + 1] - off;
      gt_rc rc = gt__store_read(src->store, off, L, buf + o, err);
      if (rc) return rc;
      lens[j] = (int32_t)L;
      o += L;
    }
    int64_t at = (int64_t)(r + side) * T;
    gt__fill_seqs(buf, lens, (int)n, T, in + at, tg + at, pos + at, seg + at);
  }
  return GT_OK;
}
