/* Records into documents: the byte tokenizer, the encoder the data source
 * and `gemtrain tokenize` share, and each record kind's tokens and loss
 * mask (docs.h has the layouts). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "data/chat.h"
#include "data/docs.h"

int64_t gt_bytes_encode(const unsigned char *s, int64_t n, int32_t *ids) {
  for (int64_t i = 0; i < n; i++) ids[i] = 4 + (int32_t)s[i];
  return n;
}

int64_t gt_bytes_decode(const int32_t *ids, int64_t n, unsigned char *out) {
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 4 && ids[i] < 260) out[j++] = (unsigned char)(ids[i] - 4);
  return j;
}

/* ---------- token arrays ---------- */

gt_rc gt_tokvec_push(gt_tokvec *t, const uint32_t *ids, int64_t n, gt_err *err) {
  if (t->n + n > t->cap) {
    int64_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + n) cap *= 2;
    uint32_t *v = t->mem ? gt_mem_alloc_uninit(t->mem, GT_MEM_DATA, (size_t)cap * sizeof(uint32_t))
                         : malloc((size_t)cap * sizeof(uint32_t));
    if (!v) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld tokens", (long long)cap);
    if (t->n) memcpy(v, t->v, (size_t)t->n * sizeof(uint32_t));
    if (t->mem)
      gt_mem_free(t->mem, t->v);
    else
      free(t->v);
    t->v = v;
    t->cap = cap;
  }
  if (n) memcpy(t->v + t->n, ids, (size_t)n * sizeof(uint32_t));
  t->n += n;
  return GT_OK;
}

void gt_tokvec_free(gt_tokvec *t) {
  if (t->mem)
    gt_mem_free(t->mem, t->v);
  else
    free(t->v);
  t->v = NULL;
  t->n = t->cap = 0;
}

/* ---------- the encoder ---------- */

static int32_t gt__special(const gt_tokenizer *tok, const char *a, const char *b, int32_t dflt) {
  int32_t id = tok ? gt_tokenizer_token_id(tok, a, strlen(a)) : -1;
  if (id < 0 && tok) id = gt_tokenizer_token_id(tok, b, strlen(b));
  return id >= 0 ? id : dflt;
}

void gt_encoder_init(gt_encoder *e, const gt_tokenizer *tok, int64_t vocab) {
  e->tok = tok;
  e->bos = gt__special(tok, "<bos>", "<s>", GT_TOK_BOS);
  e->eos = gt__special(tok, "<eos>", "</s>", GT_TOK_EOS);
  e->vocab = vocab;
}

gt_rc gt_encode_append(const gt_encoder *e, const char *text, size_t n, uint32_t flag, gt_tokvec *out,
                       const char *where, gt_err *err) {
  int64_t n_ids = 0;
  int32_t *ids = NULL;
  gt_rc rc = GT_OK;
  if (e->tok) {
    if ((rc = gt_tokenizer_encode(e->tok, text, n, 0, &ids, &n_ids, err))) return rc;
  } else {
    ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory to encode %s", where);
    n_ids = gt_bytes_encode((const unsigned char *)text, (int64_t)n, ids);
  }
  for (int64_t i = 0; i < n_ids && !rc; i++) {
    if (ids[i] < 0 || ids[i] >= e->vocab)
      rc = gt_err_set(err, GT_ERR_CONFIG, "data: %s gives token id %d; vocab_size = %lld must exceed every id", where,
                      ids[i], (long long)e->vocab);
    ids[i] = (int32_t)((uint32_t)ids[i] | flag);
  }
  if (!rc) rc = gt_tokvec_push(out, (const uint32_t *)ids, n_ids, err);
  free(ids);
  return rc;
}

static gt_rc gt__put_id(gt_tokvec *out, int32_t id, uint32_t flag, gt_err *err) {
  uint32_t v = (uint32_t)id | flag;
  return gt_tokvec_push(out, &v, 1, err);
}

gt_rc gt_encoder_check_chat(const gt_encoder *e, gt_chat_template t, const char *tokenizer_path, gt_err *err) {
  if (!e->tok) return GT_OK; /* byte tokens: every marker is its bytes, by design */
  static const char *const g3[] = {"<start_of_turn>", "<end_of_turn>"};
  static const char *const g4[] = {"<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>"};
  const char *const *m = t == GT_CHAT_GEMMA4 ? g4 : g3;
  const size_t n = t == GT_CHAT_GEMMA4 ? sizeof g4 / sizeof *g4 : sizeof g3 / sizeof *g3;
  for (size_t i = 0; i < n; i++)
    if (gt_tokenizer_token_id(e->tok, m[i], strlen(m[i])) < 0)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "data: %s's chat template marks turns with '%s', which is not a token of the tokenizer "
                        "(tokenizer_path = '%s'): it would be split into ordinary tokens; expected the tokenizer of a "
                        "%s model, or set chat_template to the tokenizer's own (gemma3, gemma4 or gemma4_small)",
                        gt_chat_template_name(t), m[i], tokenizer_path, gt_chat_template_name(t));
  return GT_OK;
}

gt_rc gt_encode_pieces(const gt_encoder *e, const gt_chat_pieces *p, const uint32_t *flags, gt_tokvec *out,
                       const char *where, gt_err *err) {
  char *buf = NULL;
  size_t cap = 0;
  gt_rc rc = GT_OK;
  for (int i = 0; i < p->n && !rc;) {
    if (p->v[i].kind == GT_CHAT_BOS) {
      rc = gt__put_id(out, e->bos, flags[i], err);
      i++;
      continue;
    }
    int j = i;
    size_t len = 0;
    for (; j < p->n && p->v[j].kind != GT_CHAT_BOS && flags[j] == flags[i]; j++) len += p->v[j].n;
    const char *text = p->v[i].s;
    if (j > i + 1) { /* the run's text in one buffer */
      if (len > cap) {
        char *nb = realloc(buf, len);
        if (!nb) {
          rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory to encode %s (%zu bytes)", where, len);
          break;
        }
        buf = nb, cap = len;
      }
      size_t k = 0;
      for (int q = i; q < j; q++) memcpy(buf + k, p->v[q].s, p->v[q].n), k += p->v[q].n;
      text = buf;
    }
    rc = gt_encode_append(e, text, len, flags[i], out, where, err);
    i = j;
  }
  free(buf);
  return rc;
}

/* ---------- record formats ---------- */

/* train_data_columns: comma-separated names, spaces around them dropped */
static int gt__split_columns(const char *s, char col[][GT_STR_SHORT], int max) {
  int n = 0;
  while (*s) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    const char *a = s, *b = s + len;
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    if (n < max) snprintf(col[n], GT_STR_SHORT, "%.*s", (int)(b - a), a);
    n++;
    if (!e) break;
    s = e + 1;
  }
  return n;
}

gt_rc gt_doc_format_init(gt_doc_format *f, const gt_config *c, gt_err *err) {
  memset(f, 0, sizeof *f);
  char col[3][GT_STR_SHORT];
  int n = gt__split_columns(c->train_data_columns, col, 3);
  for (int i = 0; i < n && i < 3; i++)
    if (!col[i][0])
      return gt_err_set(err, GT_ERR_CONFIG, "data: key 'train_data_columns' = '%s' has an empty field name",
                        c->train_data_columns);
  f->completion_only = c->sft_train_on_completion_only;
  gt_chat_opts_init(&f->chat, c);
  f->train_thinking = c->sft_train_on_thinking;
  if (!c->use_sft) {
    if (n != 1)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "data: key 'train_data_columns' = '%s' names %d fields; documents are read from one text "
                        "field (use_sft=true reads prompt,completion or chat messages)",
                        c->train_data_columns, n);
    f->kind = GT_DOC_TEXT;
  } else if (n == 1) {
    f->kind = GT_DOC_CHAT;
  } else if (n == 2) {
    f->kind = GT_DOC_PROMPT_COMPLETION;
  } else {
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'train_data_columns' = '%s' names %d fields; with use_sft=true expected one (chat "
                      "messages) or two (prompt, completion)",
                      c->train_data_columns, n);
  }
  for (int i = 0; i < n && i < 2; i++) memcpy(f->col[i], col[i], GT_STR_SHORT);
  if (f->kind == GT_DOC_CHAT && c->enable_thinking && f->chat.t != GT_CHAT_GEMMA4)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'enable_thinking' = true, but the chat template is Gemma 3's, which has no thinking "
                      "mode (chat_template = %s, decoder_block = %s)",
                      c->chat_template, c->decoder_block);
  return GT_OK;
}

void gt_doc_format_name(const gt_doc_format *f, char *buf, size_t n) {
  if (f->kind == GT_DOC_TEXT)
    snprintf(buf, n, "text field '%s'", f->col[0]);
  else if (f->kind == GT_DOC_PROMPT_COMPLETION)
    snprintf(buf, n, "prompt/completion fields '%s', '%s'", f->col[0], f->col[1]);
  else if (f->chat.t == GT_CHAT_GEMMA3)
    snprintf(buf, n, "chat field '%s' (Gemma's chat template)", f->col[0]);
  else
    snprintf(buf, n, "chat field '%s' (Gemma 4's chat template%s%s, thought channel %s)", f->col[0],
             f->chat.enable_thinking ? ", thinking on" : "",
             f->chat.prime_empty_thought && !f->chat.enable_thinking ? ", model turns opened by an empty thought block"
                                                                     : "",
             f->train_thinking ? "in the loss" : "out of the loss");
}

/* The field names of a record, for "no field" errors. */
static void gt__field_list(const cJSON *rec, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  const cJSON *it;
  int k = 0;
  cJSON_ArrayForEach(it, rec) {
    if (o + 1 >= n) break;
    o += (size_t)snprintf(buf + o, n - o, "%s'%s'", k++ ? ", " : "", it->string ? it->string : "");
  }
  if (!k) snprintf(buf, n, "none");
}

static gt_rc gt__no_field(const cJSON *rec, const char *name, const char *file, int64_t line, gt_err *err) {
  char have[400];
  gt__field_list(rec, have, sizeof have);
  /* a chat or prompt/completion file read with the default columns: the
   * keys that read it */
  const char *fix = "";
  if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(rec, "messages")))
    fix = "; a chat file: set train_data_columns=messages and use_sft=true";
  else if (cJSON_GetObjectItemCaseSensitive(rec, "prompt") && cJSON_GetObjectItemCaseSensitive(rec, "completion"))
    fix = "; a prompt/completion file: set train_data_columns=prompt,completion and use_sft=true";
  return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: no field '%s' (train_data_columns); the record has %s%s",
                    file, (long long)line, name, have, fix);
}

static gt_rc gt__string_field(const cJSON *rec, const char *name, const char *file, int64_t line, const char **s,
                              gt_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, name);
  if (!v) return gt__no_field(rec, name, file, line, err);
  if (!cJSON_IsString(v) || !v->valuestring)
    return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' is %s; expected a string", file,
                      (long long)line, name, gt_json_type_name(v));
  *s = v->valuestring;
  return GT_OK;
}

const cJSON *gt_doc_reasoning(const cJSON *msg, const char **key) {
  /* Gemma 4's template takes message.reasoning or message.reasoning_content:
   * the first that is not empty (Jinja's `or`), so an empty one passes on */
  static const char *const keys[] = {"reasoning", "reasoning_content", "thinking"};
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, keys[i]);
    if (!v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring && !v->valuestring[0])) continue;
    *key = keys[i];
    return v;
  }
  *key = NULL;
  return NULL;
}

gt_rc gt_doc_messages(const cJSON *msgs, const char *file, int64_t line, const char *name, gt_chat_msg **out, int *n,
                      gt_err *err) {
  *out = NULL;
  *n = 0;
  if (!cJSON_IsArray(msgs))
    return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' is %s; expected an array of messages",
                      file, (long long)line, name, gt_json_type_name(msgs));
  int nm = cJSON_GetArraySize(msgs);
  if (nm == 0)
    return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' is an empty conversation", file,
                      (long long)line, name);
  gt_chat_msg *cm = calloc((size_t)nm, sizeof *cm);
  if (!cm) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %d messages", nm);
  gt_rc rc = GT_OK;
  int k = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsObject(m)) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: %s[%d] is %s; expected a message object", file,
                      (long long)line, name, k, gt_json_type_name(m));
      break;
    }
    /* a tool call is no text turn: rendered as its content alone, an empty
     * answer would teach the model to end its turn at once */
    static const char *const calls[] = {"tool_calls", "function_call"};
    for (int q = 0; q < 2 && !rc; q++) {
      if (!gt_json_unset(cJSON_GetObjectItemCaseSensitive(m, calls[q])))
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: %s[%d] has '%s'; gemtrain's chat templates render text turns, not "
                        "tool calls",
                        file, (long long)line, name, k, calls[q]);
    }
    if (rc) break;
    if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: %s[%d] has 'role' %s and 'content' %s; expected two strings", file,
                      (long long)line, name, k, gt_json_type_name(role), gt_json_type_name(content));
      break;
    }
    cm[k].role = role->valuestring;
    cm[k].content = content->valuestring;
    const char *th_key;
    const cJSON *th = gt_doc_reasoning(m, &th_key);
    if (th && (!cJSON_IsString(th) || !th->valuestring)) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: %s[%d] has '%s' %s; expected a string", file,
                      (long long)line, name, k, th_key, gt_json_type_name(th));
      break;
    }
    cm[k].thinking = th ? th->valuestring : NULL;
    k++;
  }
  if (rc) {
    free(cm);
    return rc;
  }
  *out = cm;
  *n = nm;
  return GT_OK;
}

/* A chat record through the model's chat template (data/chat.h): the
 * template's pieces encoded one by one, each with its place in the loss. */
static gt_rc gt__render_chat(const gt_encoder *e, const gt_doc_format *f, const cJSON *rec, const char *file,
                             int64_t line, gt_tokvec *out, int64_t *n_loss, gt_err *err) {
  const char *name = f->col[0];
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(rec, name);
  if (!msgs) return gt__no_field(rec, name, file, line, err);
  gt_chat_msg *cm;
  int nm;
  gt_rc rc = gt_doc_messages(msgs, file, line, name, &cm, &nm, err);
  if (rc) return rc;
  char where[600];
  snprintf(where, sizeof where, "data: '%s' line %lld", file, (long long)line);
  gt_chat_opts o = f->chat;
  o.where = where;
  o.field = name;
  gt_chat_pieces p;
  memset(&p, 0, sizeof p);
  if (!rc) rc = gt_chat_render(&o, cm, nm, 0, &p, err);
  uint32_t mask = f->completion_only ? GT_TOK_NOLOSS : 0;
  uint32_t thought = f->train_thinking ? 0 : GT_TOK_NOLOSS;
  snprintf(where, sizeof where, "'%s' line %lld", file, (long long)line);
  uint32_t *fl = rc ? NULL : malloc(sizeof *fl * (size_t)(p.n + 1));
  if (!rc && !fl) rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %s", where);
  for (int i = 0; i < p.n && !rc; i++) {
    const int kind = p.v[i].kind;
    fl[i] = kind == GT_CHAT_ANSWER ? 0 : kind == GT_CHAT_THOUGHT ? thought : mask;
    /* (a model turn's answer always has its end-of-turn marker) */
    if (kind == GT_CHAT_ANSWER && p.v[i].n) ++*n_loss;
  }
  if (!rc) rc = gt_encode_pieces(e, &p, fl, out, where, err);
  free(fl);
  gt_chat_pieces_free(&p);
  free(cm);
  if (!rc) rc = gt__put_id(out, e->eos, mask, err);
  return rc;
}

gt_rc gt_doc_render(const gt_encoder *e, const gt_doc_format *f, const cJSON *rec, const char *file, int64_t line,
                    gt_tokvec *out, gt_err *err) {
  int64_t n0 = out->n, n_loss = 0;
  char where[600];
  snprintf(where, sizeof where, "'%s' line %lld", file, (long long)line);
  gt_rc rc;
  if (f->kind == GT_DOC_CHAT) {
    rc = gt__render_chat(e, f, rec, file, line, out, &n_loss, err);
    if (!rc && f->completion_only && n_loss == 0)
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: field '%s' has no model turn with content: nothing is in the loss "
                      "(sft_train_on_completion_only)",
                      file, (long long)line, f->col[0]);
  } else if (f->kind == GT_DOC_PROMPT_COMPLETION) {
    const char *p, *c;
    if ((rc = gt__string_field(rec, f->col[0], file, line, &p, err)) ||
        (rc = gt__string_field(rec, f->col[1], file, line, &c, err)))
      goto out;
    if (!c[0]) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' (the completion) is empty", file,
                      (long long)line, f->col[1]);
      goto out;
    }
    uint32_t mask = f->completion_only ? GT_TOK_NOLOSS : 0;
    if (!(rc = gt__put_id(out, e->bos, mask, err)) && !(rc = gt_encode_append(e, p, strlen(p), mask, out, where, err)) &&
        !(rc = gt_encode_append(e, c, strlen(c), 0, out, where, err)))
      rc = gt__put_id(out, e->eos, 0, err);
  } else {
    const char *t;
    if ((rc = gt__string_field(rec, f->col[0], file, line, &t, err))) goto out;
    if (!t[0]) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: field '%s' is an empty document", file,
                      (long long)line, f->col[0]);
      goto out;
    }
    if (!f->no_bos) rc = gt__put_id(out, e->bos, 0, err);
    if (!rc) rc = gt_encode_append(e, t, strlen(t), 0, out, where, err);
    if (!rc && !f->no_eos) rc = gt__put_id(out, e->eos, 0, err);
  }
out:
  if (rc) out->n = n0;
  return rc;
}
