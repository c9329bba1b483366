/* Chat templates (chat.h has the layouts). Each template is written out as
 * the pieces Google's Jinja template would print for the messages gemtrain
 * renders (text content, a system message, a model turn's reasoning). */
#define _POSIX_C_SOURCE 200809L
#include "data/chat.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gt_chat_template gt_chat_template_for(const gt_config *cfg) {
  if (!strcmp(cfg->chat_template, "gemma3")) return GT_CHAT_GEMMA3;
  if (!strncmp(cfg->chat_template, "gemma4", 6)) return GT_CHAT_GEMMA4;
  return gt_config_is_gemma4(cfg) ? GT_CHAT_GEMMA4 : GT_CHAT_GEMMA3;
}

/* Whether a Gemma 4 template primes the model turn: E2B/E4B's template
 * (named after their decoder block, gemma4_small) does not. */
static int gt__primes(const gt_config *cfg) {
  if (!strcmp(cfg->chat_template, "gemma4")) return 1;
  if (!strcmp(cfg->chat_template, "gemma4_small")) return 0;
  return strcmp(cfg->decoder_block, "gemma4_small") != 0 && cfg->hidden_size_per_layer_input == 0;
}

int gt_chat_primes_empty_thought(const gt_config *cfg) {
  return gt_chat_template_for(cfg) == GT_CHAT_GEMMA4 && gt__primes(cfg);
}

const char *gt_chat_end_of_turn(gt_chat_template t) { return t == GT_CHAT_GEMMA4 ? "<turn|>" : "<end_of_turn>"; }

const char *gt_chat_template_name(gt_chat_template t) { return t == GT_CHAT_GEMMA4 ? "Gemma 4" : "Gemma 3"; }

void gt_chat_opts_init(gt_chat_opts *o, const gt_config *cfg) {
  memset(o, 0, sizeof *o);
  o->t = gt_chat_template_for(cfg);
  o->prime_empty_thought = gt_chat_primes_empty_thought(cfg);
  o->enable_thinking = o->t == GT_CHAT_GEMMA4 && cfg->enable_thinking;
}

/* ---------- pieces ---------- */

static gt_rc gt__piece(gt_chat_pieces *p, const char *s, size_t n, int kind, gt_err *err) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 32;
    gt_chat_piece *v = realloc(p->v, (size_t)cap * sizeof *v);
    if (!v) return gt_err_set(err, GT_ERR_NOMEM, "chat: no memory for the rendering");
    p->v = v;
    p->cap = cap;
  }
  p->v[p->n++] = (gt_chat_piece){s, n, kind};
  return GT_OK;
}

static gt_rc gt__lit(gt_chat_pieces *p, const char *s, int kind, gt_err *err) {
  return gt__piece(p, s, strlen(s), kind, err);
}

static gt_rc gt__own(gt_chat_pieces *p, char *s, gt_err *err) {
  if (p->n_owned == p->cap_owned) {
    int cap = p->cap_owned ? 2 * p->cap_owned : 8;
    char **v = realloc(p->owned, (size_t)cap * sizeof *v);
    if (!v) {
      free(s);
      return gt_err_set(err, GT_ERR_NOMEM, "chat: no memory for the rendering");
    }
    p->owned = v;
    p->cap_owned = cap;
  }
  p->owned[p->n_owned++] = s;
  return GT_OK;
}

void gt_chat_pieces_free(gt_chat_pieces *p) {
  for (int i = 0; i < p->n_owned; i++) free(p->owned[i]);
  free(p->owned);
  free(p->v);
  memset(p, 0, sizeof *p);
}

/* Jinja's trim is Python's str.strip(): it removes the characters
 * str.isspace() holds, which are more than ASCII's six: the separators
 * U+001C-001F, U+0085, and Unicode's spaces and line separators (U+00A0,
 * U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000). */
static int gt__space_cp(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
/* The length of the UTF-8 space at a (1 to 3 bytes), or 0. */
static size_t gt__space_at(const unsigned char *a, size_t n) {
  if (n >= 1 && a[0] < 0x80) return gt__space_cp(a[0]) ? 1 : 0;
  if (n >= 2 && (a[0] & 0xE0) == 0xC0 && (a[1] & 0xC0) == 0x80)
    return gt__space_cp(((uint32_t)(a[0] & 0x1F) << 6) | (a[1] & 0x3F)) ? 2 : 0;
  if (n >= 3 && (a[0] & 0xF0) == 0xE0 && (a[1] & 0xC0) == 0x80 && (a[2] & 0xC0) == 0x80)
    return gt__space_cp(((uint32_t)(a[0] & 0x0F) << 12) | ((uint32_t)(a[1] & 0x3F) << 6) | (a[2] & 0x3F)) ? 3 : 0;
  return 0;
}
void gt_chat_trim(const char **s, size_t *n) {
  const unsigned char *a = (const unsigned char *)*s, *b = a + *n;
  for (size_t k; a < b && (k = gt__space_at(a, (size_t)(b - a))) > 0;) a += k;
  while (b > a) { /* the last character: back over its continuation bytes */
    const unsigned char *c = b - 1;
    while (c > a && (*c & 0xC0) == 0x80 && b - c < 3) c--;
    size_t k = gt__space_at(c, (size_t)(b - c));
    if (k == 0 || c + k != b) break;
    b = c;
  }
  *s = (const char *)a;
  *n = (size_t)(b - a);
}

static gt_rc gt__refuse(const gt_chat_opts *o, gt_err *err, const char *fmt, ...) {
  char msg[GT_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gt_err_set(err, GT_ERR_FORMAT, "%s: %s", o->where ? o->where : "chat", msg);
}

/* The roles a conversation may hold, checked as both templates need them:
 * a system (Gemma 4: or developer) message first only, then user and model
 * turns alternating, starting with user. Sets *sys (1 when m[0] is a system
 * message). */
static gt_rc gt__check_roles(const gt_chat_opts *o, const gt_chat_msg *m, int n, int *sys, gt_err *err) {
  const char *f = o->field ? o->field : "messages";
  const char *tn = gt_chat_template_name(o->t);
  *sys = 0;
  if (n <= 0) return gt__refuse(o, err, "field '%s' is an empty conversation", f);
  int turn = 0;
  for (int k = 0; k < n; k++) {
    const char *r = m[k].role ? m[k].role : "";
    if (!m[k].content) return gt__refuse(o, err, "%s[%d] has no content", f, k);
    int system = !strcmp(r, "system") || (o->t == GT_CHAT_GEMMA4 && !strcmp(r, "developer"));
    if (system) {
      if (k != 0)
        return gt__refuse(o, err, "%s[%d] is a %s message; only the first message may be one", f, k, r);
      *sys = 1;
      if (m[k].thinking) return gt__refuse(o, err, "%s[%d] is a %s message with thinking; only model turns think", f, k, r);
      continue;
    }
    int model = !strcmp(r, "assistant") || !strcmp(r, "model");
    if (!model && strcmp(r, "user"))
      return gt__refuse(o, err, "%s[%d] has role '%s'; expected user, assistant (or model) or system%s", f, k, r,
                        o->t == GT_CHAT_GEMMA4 ? " (or developer)" : "");
    if (model != (turn % 2 == 1))
      return gt__refuse(o, err,
                        "%s[%d] is a %s turn; Gemma's chat template needs the roles to alternate "
                        "user/assistant/user/..., starting with user",
                        f, k, model ? "model" : "user");
    if (m[k].thinking && !model)
      return gt__refuse(o, err, "%s[%d] is a user turn with thinking; only model turns think", f, k);
    if (m[k].thinking && o->t == GT_CHAT_GEMMA3)
      return gt__refuse(o, err,
                        "%s[%d] has thinking, but %s's chat template has no thought channel (a Gemma 4 model "
                        "renders it; or drop the field)",
                        f, k, tn);
    turn++;
  }
  if (turn == 0 && o->t == GT_CHAT_GEMMA3) return gt__refuse(o, err, "field '%s' holds only a system message", f);
  return GT_OK;
}

static gt_rc gt__render_gemma3(const gt_chat_opts *o, const gt_chat_msg *m, int n, int sys, int gen,
                               gt_chat_pieces *p, gt_err *err) {
  gt_rc rc = gt__lit(p, "<bos>", GT_CHAT_BOS, err);
  int turn = 0;
  for (int k = sys; k < n && !rc; k++, turn++) {
    int model = turn % 2 == 1;
    rc = gt__lit(p, model ? "<start_of_turn>model\n" : "<start_of_turn>user\n", GT_CHAT_PROMPT, err);
    if (!rc && sys && turn == 0) { /* folded into the first user turn, untrimmed */
      rc = gt__lit(p, m[0].content, GT_CHAT_PROMPT, err);
      if (!rc) rc = gt__lit(p, "\n\n", GT_CHAT_PROMPT, err);
    }
    const char *s = m[k].content;
    size_t sn = strlen(s);
    gt_chat_trim(&s, &sn);
    int kind = model ? GT_CHAT_ANSWER : GT_CHAT_PROMPT;
    if (!rc) rc = gt__piece(p, s, sn, kind, err);
    if (!rc) rc = gt__lit(p, "<end_of_turn>", kind, err);
    if (!rc) rc = gt__lit(p, "\n", GT_CHAT_PROMPT, err);
  }
  if (!rc && gen) rc = gt__lit(p, "<start_of_turn>model\n", GT_CHAT_PROMPT, err);
  return rc;
}

/* The first occurrence of the NUL-terminated m in s[0..n), or NULL: the
 * text may hold NUL bytes. */
static const char *gt__find(const char *s, size_t n, const char *m) {
  size_t k = strlen(m);
  for (size_t i = 0; k <= n && i <= n - k; i++)
    if (s[i] == m[0] && !memcmp(s + i, m, k)) return s + i;
  return NULL;
}

gt_rc gt_chat_split_thinking(const char *s, size_t n, char **answer, size_t *answer_n, char **thought,
                             size_t *thought_n, gt_err *err) {
  static const char open[] = "<|channel>", close[] = "<channel|>", name[] = "thought";
  *answer = *thought = NULL;
  *answer_n = *thought_n = 0;
  char *a = malloc(n + 1), *t = malloc(n + 1);
  if (!a || !t) {
    free(a), free(t);
    return gt_err_set(err, GT_ERR_NOMEM, "chat: no memory for %zu bytes of a reply", n);
  }
  size_t an = 0, tn = 0;
  int blocks = 0;
  /* text.split('<channel|>'): each part keeps what comes before its first
   * <|channel>; what follows it is the thought */
  const char *part = s, *end_all = s + n;
  for (;;) {
    const char *end = gt__find(part, (size_t)(end_all - part), close);
    size_t pn = end ? (size_t)(end - part) : (size_t)(end_all - part);
    const char *o = gt__find(part, pn, open);
    size_t keep = o ? (size_t)(o - part) : pn;
    memcpy(a + an, part, keep);
    an += keep;
    if (o) {
      const char *b = o + sizeof open - 1;
      size_t bn = pn - keep - (sizeof open - 1);
      if (bn >= sizeof name - 1 && !memcmp(b, name, sizeof name - 1)) /* the channel's name */
        b += sizeof name - 1, bn -= sizeof name - 1;
      gt_chat_trim(&b, &bn);
      if (tn && bn) t[tn++] = '\n';
      blocks++;
      memmove(t + tn, b, bn);
      tn += bn;
    }
    if (!end) break;
    part = end + sizeof close - 1;
  }
  const char *as = a;
  gt_chat_trim(&as, &an);
  memmove(a, as, an);
  a[an] = '\0';
  t[tn] = '\0';
  *answer = a;
  *answer_n = an;
  if (blocks) {
    *thought = t;
    *thought_n = tn;
  } else {
    free(t);
  }
  return GT_OK;
}

/* Google's strip_thinking macro: the text outside <|channel>...<channel|>
 * blocks (text after a <|channel> with no closing marker is dropped too),
 * trimmed. Into a new string owned by p. */
static gt_rc gt__strip_thinking(gt_chat_pieces *p, const char *s, const char **out, size_t *out_n, gt_err *err) {
  if (!strstr(s, "<|channel>") && !strstr(s, "<channel|>")) {
    *out = s;
    *out_n = strlen(s);
    gt_chat_trim(out, out_n);
    return GT_OK;
  }
  char *r, *th;
  size_t rn, tn;
  gt_rc rc = gt_chat_split_thinking(s, strlen(s), &r, &rn, &th, &tn, err);
  if (rc) return rc;
  free(th);
  if ((rc = gt__own(p, r, err))) return rc;
  *out = r;
  *out_n = rn;
  return GT_OK;
}

static gt_rc gt__render_gemma4(const gt_chat_opts *o, const gt_chat_msg *m, int n, int sys, int gen,
                               gt_chat_pieces *p, gt_err *err) {
  gt_rc rc = gt__lit(p, "<bos>", GT_CHAT_BOS, err);
  if (!rc && (o->enable_thinking || sys)) {
    rc = gt__lit(p, "<|turn>system\n", GT_CHAT_PROMPT, err);
    if (!rc && o->enable_thinking) rc = gt__lit(p, "<|think|>\n", GT_CHAT_PROMPT, err);
    if (!rc && sys) {
      const char *s = m[0].content;
      size_t sn = strlen(s);
      gt_chat_trim(&s, &sn);
      rc = gt__piece(p, s, sn, GT_CHAT_PROMPT, err);
    }
    if (!rc) rc = gt__lit(p, "<turn|>\n", GT_CHAT_PROMPT, err);
  }
  int last_user = -1;
  for (int k = sys; k < n; k++)
    if (!strcmp(m[k].role, "user")) last_user = k;
  for (int k = sys; k < n && !rc; k++) {
    int model = strcmp(m[k].role, "user") != 0;
    if (!model) {
      const char *s = m[k].content;
      size_t sn = strlen(s);
      gt_chat_trim(&s, &sn);
      rc = gt__lit(p, "<|turn>user\n", GT_CHAT_PROMPT, err);
      if (!rc) rc = gt__piece(p, s, sn, GT_CHAT_PROMPT, err);
      if (!rc) rc = gt__lit(p, "<turn|>\n", GT_CHAT_PROMPT, err);
      continue;
    }
    rc = gt__lit(p, "<|turn>model\n", GT_CHAT_PROMPT, err);
    /* the template renders reasoning only after the last user message */
    int think = m[k].thinking && m[k].thinking[0] && k > last_user;
    if (!rc && think) {
      rc = gt__lit(p, "<|channel>thought\n", GT_CHAT_THOUGHT, err);
      if (!rc) rc = gt__lit(p, m[k].thinking, GT_CHAT_THOUGHT, err);
      if (!rc) rc = gt__lit(p, "\n<channel|>", GT_CHAT_THOUGHT, err);
    } else if (!rc && o->prime_empty_thought && !o->enable_thinking && k > last_user) {
      /* the generation prompt's priming opens the turn (the model never
       * writes it); earlier turns are history, which the template renders
       * without it */
      rc = gt__lit(p, "<|channel>thought\n<channel|>", GT_CHAT_PROMPT, err);
    }
    const char *s;
    size_t sn;
    if (!rc) rc = gt__strip_thinking(p, m[k].content, &s, &sn, err);
    if (!rc) rc = gt__piece(p, s, sn, GT_CHAT_ANSWER, err);
    if (!rc) rc = gt__lit(p, "<turn|>", GT_CHAT_ANSWER, err);
    if (!rc) rc = gt__lit(p, "\n", GT_CHAT_PROMPT, err);
  }
  if (!rc && gen) {
    rc = gt__lit(p, "<|turn>model\n", GT_CHAT_PROMPT, err);
    if (!rc && o->prime_empty_thought && !o->enable_thinking)
      rc = gt__lit(p, "<|channel>thought\n<channel|>", GT_CHAT_PROMPT, err);
  }
  return rc;
}

gt_rc gt_chat_render(const gt_chat_opts *o, const gt_chat_msg *m, int n, int add_generation_prompt,
                     gt_chat_pieces *out, gt_err *err) {
  memset(out, 0, sizeof *out);
  int sys;
  gt_rc rc = gt__check_roles(o, m, n, &sys, err);
  if (rc) return rc;
  return o->t == GT_CHAT_GEMMA4 ? gt__render_gemma4(o, m, n, sys, add_generation_prompt, out, err)
                                : gt__render_gemma3(o, m, n, sys, add_generation_prompt, out, err);
}

gt_rc gt_chat_render_text(gt_chat_template t, const gt_config *cfg, const gt_chat_msg *m, int n,
                          int add_generation_prompt, char **out, gt_err *err) {
  *out = NULL;
  gt_chat_opts o;
  gt_chat_opts_init(&o, cfg);
  o.t = t;
  o.prime_empty_thought = t == GT_CHAT_GEMMA4 && gt__primes(cfg);
  o.enable_thinking = t == GT_CHAT_GEMMA4 && cfg->enable_thinking;
  gt_chat_pieces p;
  gt_rc rc = gt_chat_render(&o, m, n, add_generation_prompt, &p, err);
  size_t len = 0;
  for (int i = 0; !rc && i < p.n; i++) len += p.v[i].n;
  char *s = rc ? NULL : malloc(len + 1);
  if (!rc && !s) rc = gt_err_set(err, GT_ERR_NOMEM, "chat: no memory for the rendering");
  if (!rc) {
    size_t o2 = 0;
    for (int i = 0; i < p.n; i++) {
      memcpy(s + o2, p.v[i].s, p.v[i].n);
      o2 += p.v[i].n;
    }
    s[o2] = '\0';
    *out = s;
  }
  gt_chat_pieces_free(&p);
  return rc;
}
