/* Chat prompts for decoding (text.h): a conversation, from the command line
 * or a JSON Lines chat record, rendered by the chat template that SFT data
 * goes through (data/chat.h), so a fine-tuned model sees at decode time
 * exactly the text it was trained on. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat.h"
#include "data/docs.h"
#include "decode/text.h"

static char *gt__dup(const char *s) { return s ? strdup(s) : NULL; }

static gt_rc gt__add(gt_decode_chat *c, const char *role, const char *content, const char *thinking, gt_err *err) {
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 8;
    gt_decode_turn *t = realloc(c->turns, sizeof *t * (size_t)cap);
    if (!t) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the conversation");
    c->turns = t;
    c->cap = cap;
  }
  gt_decode_turn *t = &c->turns[c->n];
  memset(t, 0, sizeof *t);
  t->role = gt__dup(role);
  t->content = gt__dup(content);
  t->thinking = gt__dup(thinking);
  if (!t->role || !t->content || (thinking && !t->thinking)) {
    free(t->role), free(t->content), free(t->thinking);
    return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the conversation");
  }
  c->n++;
  return GT_OK;
}

gt_rc gt_decode_chat_add(gt_decode_chat *c, const char *role, const char *content, gt_err *err) {
  return gt__add(c, role, content, NULL, err);
}

gt_rc gt_decode_chat_add_reply(gt_decode_chat *c, const gt_textgen_out *o, gt_err *err) {
  return gt__add(c, "assistant", o->text ? o->text : "", o->thinking, err);
}

static void gt__turn_free(gt_decode_turn *t) {
  free(t->role), free(t->content), free(t->thinking);
  for (int i = 0; t->parts && i < t->n_parts; i++) free(t->parts[i]);
  free(t->parts);
}

void gt_decode_chat_free(gt_decode_chat *c) {
  for (int i = 0; i < c->n; i++) gt__turn_free(&c->turns[i]);
  free(c->turns);
  memset(c, 0, sizeof *c);
}

/* How a part's text goes into its turn: as it is, trimmed, or through
 * Google's strip_thinking (which trims too). */
typedef enum { GT__AS_IS, GT__TRIM, GT__STRIP_THINKING } gt__cut;

/* n texts, each as `how` says, joined into a malloc'd string. */
static gt_rc gt__join(char *const *parts, int n, gt__cut how, char **out, gt_err *err) {
  size_t len = 0;
  for (int i = 0; i < n; i++) len += strlen(parts[i]);
  char *r = malloc(len + 1);
  if (!r) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  size_t o = 0;
  for (int i = 0; i < n; i++) {
    const char *p = parts[i];
    size_t pn = strlen(p);
    char *own = NULL, *th = NULL;
    size_t tn;
    if (how == GT__TRIM) {
      gt_chat_trim(&p, &pn);
    } else if (how == GT__STRIP_THINKING) {
      gt_rc rc = gt_chat_split_thinking(p, pn, &own, &pn, &th, &tn, err);
      if (rc) {
        free(r);
        return rc;
      }
      free(th);
      p = own;
    }
    memcpy(r + o, p, pn);
    o += pn;
    free(own);
  }
  r[o] = '\0';
  *out = r;
  return GT_OK;
}

/* A message's content: a string, or a list of {"type": "text", "text": ...}
 * parts (their texts into *parts, malloc'd, and *out the parts trimmed and
 * joined, as Google's templates write a turn's parts). */
static gt_rc gt__content(const cJSON *v, const char *where, int k, char **out, char ***parts_out, int *n_parts,
                         gt_err *err) {
  *out = NULL;
  *parts_out = NULL;
  *n_parts = 0;
  if (cJSON_IsString(v)) return (*out = strdup(v->valuestring)) ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  if (!cJSON_IsArray(v))
    return gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d].content is neither a string nor a list of parts",
                      where, k);
  int n = cJSON_GetArraySize(v), i = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, v) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsString(ty))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "decode: %s: messages[%d].content[%d] has no \"type\" string; expected {\"type\": \"text\", "
                        "\"text\": ...}",
                        where, k, i);
    if (strcmp(ty->valuestring, "text"))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "decode: %s: messages[%d].content[%d] is a part of type '%.40s'; decoding takes text parts "
                        "only ({\"type\": \"text\", \"text\": ...})",
                        where, k, i, ty->valuestring);
    if (!cJSON_IsString(tx))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "decode: %s: messages[%d].content[%d] is a text part without a \"text\" string", where, k, i);
    i++;
  }
  char **parts = calloc((size_t)(n ? n : 1), sizeof *parts);
  if (!parts) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  gt_rc rc = GT_OK;
  i = 0;
  cJSON_ArrayForEach(p, v) if (!rc && !(parts[i++] = strdup(cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring)))
    rc = gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  if (!rc) rc = gt__join(parts, n, GT__TRIM, out, err);
  if (rc) {
    for (int j = 0; j < n; j++) free(parts[j]);
    free(parts);
    return rc;
  }
  *parts_out = parts;
  *n_parts = n;
  return GT_OK;
}

gt_rc gt_decode_chat_parse(const char *json, const char *where, gt_decode_chat *c, gt_err *err) {
  cJSON *j = cJSON_Parse(json);
  const cJSON *ms = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "messages") : NULL;
  gt_rc rc = GT_OK;
  if (!j)
    rc = gt_err_set(err, GT_ERR_FORMAT, "decode: %s is not valid JSON", where);
  else if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms))
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "decode: %s has no \"messages\" list; expected {\"messages\": [{\"role\": \"user\", \"content\": "
                    "...}, ...]}",
                    where);
  const cJSON *m;
  int k = 0;
  if (!rc) cJSON_ArrayForEach(m, ms) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    /* the reasoning under the keys training reads */
    const char *th_key;
    const cJSON *th = gt_doc_reasoning(m, &th_key);
    char *content = NULL, **parts = NULL;
    int n_parts = 0;
    if (!cJSON_IsString(role))
      rc = gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d] has no \"role\" string", where, k);
    else if (th && !cJSON_IsString(th))
      rc = gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d].%s is not a string", where, k, th_key);
    else
      rc = gt__content(cJSON_GetObjectItemCaseSensitive(m, "content"), where, k, &content, &parts, &n_parts, err);
    if (!rc) rc = gt__add(c, role->valuestring, content, cJSON_IsString(th) ? th->valuestring : NULL, err);
    if (!rc) {
      c->turns[c->n - 1].parts = parts;
      c->turns[c->n - 1].n_parts = n_parts;
    } else {
      for (int i = 0; parts && i < n_parts; i++) free(parts[i]);
      free(parts);
    }
    free(content);
    if (rc) break;
    k++;
  }
  cJSON_Delete(j);
  return rc;
}

gt_rc gt_decode_chat_check(const gt_config *cfg, gt_err *err) {
  gt_chat_template t = gt_chat_template_for(cfg);
  if (cfg->enable_thinking && t != GT_CHAT_GEMMA4)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: key 'enable_thinking' = true, but the chat template is %s's, which has no thinking "
                      "mode (chat_template = %s, decoder_block = %s)",
                      gt_chat_template_name(t), cfg->chat_template, cfg->decoder_block);
  return GT_OK;
}

/* The content of turn k as the template writes its parts (malloc'd into
 * *out), or *out = NULL when it was a string. */
static gt_rc gt__turn_content(gt_chat_template t, const gt_decode_turn *u, int k, char **out, gt_err *err) {
  *out = NULL;
  if (!u->parts) return GT_OK;
  if (!strcmp(u->role, "system") || !strcmp(u->role, "developer")) {
    if (t == GT_CHAT_GEMMA4)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "decode: messages[%d] is a %s message with content as a list of parts; Gemma 4's chat "
                        "template writes a system message's content as a string: give it as one",
                        k, u->role);
    if (u->n_parts != 1)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "decode: messages[%d] is a system message with %d content parts; Gemma 3's chat template "
                        "takes the first part's text alone: give one part or a string",
                        k, u->n_parts);
    return gt__join(u->parts, 1, GT__AS_IS, out, err);
  }
  int model = !strcmp(u->role, "assistant") || !strcmp(u->role, "model");
  return gt__join(u->parts, u->n_parts, model && t == GT_CHAT_GEMMA4 ? GT__STRIP_THINKING : GT__TRIM, out, err);
}

gt_rc gt_decode_chat_render(const gt_config *cfg, const gt_decode_chat *c, char **text, const char **end_of_turn,
                            gt_err *err) {
  *text = NULL;
  gt_rc rc = gt_decode_chat_check(cfg, err);
  if (rc) return rc;
  if (!c->n) return gt_err_set(err, GT_ERR_ARG, "decode: the conversation is empty");
  const char *last = c->turns[c->n - 1].role;
  if (strcmp(last, "user"))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: the conversation's last message has role '%s'; the model answers a user turn, so "
                      "the last message must have role 'user'",
                      last);
  gt_chat_template t = gt_chat_template_for(cfg);
  gt_chat_msg *m = malloc(sizeof *m * (size_t)c->n);
  char **own = calloc((size_t)c->n, sizeof *own);
  if (!m || !own) {
    free(m), free(own);
    return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  }
  for (int i = 0; i < c->n && !rc; i++) {
    rc = gt__turn_content(t, &c->turns[i], i, &own[i], err);
    m[i].role = c->turns[i].role;
    m[i].content = own[i] ? own[i] : c->turns[i].content;
    m[i].thinking = c->turns[i].thinking;
  }
  if (!rc) rc = gt_chat_render_text(t, cfg, m, c->n, 1, text, err);
  for (int i = 0; i < c->n; i++) free(own[i]);
  free(own);
  free(m);
  if (!rc) *end_of_turn = gt_chat_end_of_turn(t);
  return rc;
}
