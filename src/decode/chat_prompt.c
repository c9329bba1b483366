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

void gt_decode_chat_free(gt_decode_chat *c) {
  for (int i = 0; i < c->n; i++) free(c->turns[i].role), free(c->turns[i].content), free(c->turns[i].thinking);
  free(c->turns);
  memset(c, 0, sizeof *c);
}

/* A message's content: a string, or the concatenated text of a list of
 * {"type": "text", "text": ...} parts (malloc'd into *out). */
static gt_rc gt__content(const cJSON *v, const char *where, int k, char **out, gt_err *err) {
  if (cJSON_IsString(v)) return (*out = strdup(v->valuestring)) ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  if (!cJSON_IsArray(v))
    return gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d].content is neither a string nor a list of parts",
                      where, k);
  size_t len = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, v) {
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsString(tx))
      return gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d].content has a part without a \"text\" string",
                        where, k);
    len += strlen(tx->valuestring);
  }
  if (!(*out = malloc(len + 1))) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  (*out)[0] = '\0';
  cJSON_ArrayForEach(p, v) strcat(*out, cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
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
    char *content = NULL;
    if (!cJSON_IsString(role))
      rc = gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d] has no \"role\" string", where, k);
    else if (th && !cJSON_IsString(th))
      rc = gt_err_set(err, GT_ERR_FORMAT, "decode: %s: messages[%d].%s is not a string", where, k, th_key);
    else
      rc = gt__content(cJSON_GetObjectItemCaseSensitive(m, "content"), where, k, &content, err);
    if (!rc) rc = gt__add(c, role->valuestring, content, cJSON_IsString(th) ? th->valuestring : NULL, err);
    free(content);
    if (rc) break;
    k++;
  }
  cJSON_Delete(j);
  return rc;
}

gt_rc gt_decode_chat_render(const gt_config *cfg, const gt_decode_chat *c, char **text, const char **end_of_turn,
                            gt_err *err) {
  *text = NULL;
  if (!c->n) return gt_err_set(err, GT_ERR_ARG, "decode: the conversation is empty");
  const char *last = c->turns[c->n - 1].role;
  if (strcmp(last, "user"))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: the conversation's last message has role '%s'; the model answers a user turn, so "
                      "the last message must have role 'user'",
                      last);
  gt_chat_msg *m = malloc(sizeof *m * (size_t)c->n);
  if (!m) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  for (int i = 0; i < c->n; i++) {
    m[i].role = c->turns[i].role;
    m[i].content = c->turns[i].content;
    m[i].thinking = c->turns[i].thinking;
  }
  gt_chat_template t = gt_chat_template_for(cfg);
  gt_rc rc = gt_chat_render_text(t, cfg, m, c->n, 1, text, err);
  free(m);
  if (!rc) *end_of_turn = gt_chat_end_of_turn(t);
  return rc;
}
