/* Recognising a Hugging Face directory's chat template as one of Google's
 * (chat.h), without a Jinja engine.
 *
 * The method: the template is normalised, then checked for the fragments
 * that decide how Google's template renders what gemtrain renders (text
 * turns, a system message, enable_thinking, a model turn's reasoning, the
 * generation prompt), and for the markers it prints.
 *   Normalising: Jinja comments {# ... #} are dropped; inside {{ }} and
 *   {% %} tags the whitespace-control marks (-, +) and all whitespace outside
 *   string literals are dropped, and a literal's quotes become '...' (its
 *   text is kept byte for byte: "\n" stays the two characters of the
 *   escape); text between tags is dropped (Google's templates print nothing
 *   there but the tool-declaration syntax). So the same template indented
 *   or with other whitespace control normalises to the same text, while a
 *   change of what a tag prints does not.
 *   Checking: every fragment of the family's list must be present (the first
 *   missing one is named, with what it does in Google's template), and every
 *   string literal a {{ }} tag prints that holds a '<' must be one of the
 *   markers Google's template prints (another is named).
 * A template that passes renders the conversations gemtrain reads as
 * gemtrain's template does; the variant (Gemma 4: whether the generation
 * prompt primes an empty thought block) is read from the same fragments.
 * Google has revised the Gemma 4 template since its release; the early
 * revisions differ in what gemtrain renders (no newline after <|think|>,
 * reasoning written only beside tool calls) and are refused naming that. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/chat.h"

static int gt__ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* The normalised text (malloc'ed; NULL without memory). Each input byte
 * gives at most one output byte, but for the closing quote of a string
 * literal left unterminated at the end: n + 1 bytes and the NUL. */
static char *gt__normalise(const char *t) {
  size_t n = strlen(t);
  char *o = malloc(n + 2);
  if (!o) return NULL;
  size_t k = 0;
  const char *p = t;
  while (*p) {
    if (p[0] == '{' && p[1] == '#') { /* comment */
      const char *e = strstr(p + 2, "#}");
      p = e ? e + 2 : p + strlen(p);
      continue;
    }
    if (p[0] == '{' && (p[1] == '{' || p[1] == '%')) {
      char close = p[1] == '{' ? '}' : '%';
      o[k++] = '{', o[k++] = p[1];
      p += 2;
      if (*p == '-' || *p == '+') p++;
      while (*p) {
        if (*p == '\'' || *p == '"') { /* a string literal, kept verbatim */
          char q = *p;
          const char *s = p + 1;
          while (*s && *s != q) s += (*s == '\\' && s[1]) ? 2 : 1;
          int has_single = memchr(p + 1, '\'', (size_t)(s - p - 1)) != NULL;
          char d = q == '"' && !has_single ? '\'' : q;
          o[k++] = d;
          memcpy(o + k, p + 1, (size_t)(s - p - 1));
          k += (size_t)(s - p - 1);
          o[k++] = d;
          p = *s ? s + 1 : s;
          continue;
        }
        if ((*p == '-' || *p == '+') && p[1] == close && p[2] == '}') {
          p++;
          continue;
        }
        if (*p == close && p[1] == '}') {
          o[k++] = close, o[k++] = '}';
          p += 2;
          break;
        }
        if (!gt__ws(*p)) o[k++] = *p;
        p++;
      }
      continue;
    }
    p++; /* text between tags */
  }
  o[k] = '\0';
  return o;
}

typedef struct gt__frag {
  const char *text; /* normalised */
  const char *what; /* what it does in Google's template */
} gt__frag;

static const gt__frag gt__gemma3[] = {
    {"{{bos_token}}", "starts with <bos>"},
    {"first_user_prefix=messages[0]['content']+'\\n\\n'", "folds a system message into the first user turn"},
    {"(message['role']=='user')!=(loop.index0%2==0)", "needs the roles to alternate user/model"},
    {"{%if(message['role']=='assistant')%}{%setrole='model'%}", "names the assistant's turns model"},
    {"{{'<start_of_turn>'+role+'\\n'+(first_user_prefixifloop.firstelse'')}}", "opens each turn"},
    {"{{message['content']|trim}}", "trims each turn's content"},
    {"{{'<end_of_turn>\\n'}}", "closes each turn"},
    {"{%ifadd_generation_prompt%}{{'<start_of_turn>model\\n'}}{%endif%}", "opens the model's turn"},
};
static const char *const gt__gemma3_markers[] = {"<start_of_turn>", "<end_of_turn>\\n", "<start_of_turn>model\\n",
                                                 "<start_of_image>", "<audio_soft_token>", "<image_soft_token>"};

static const gt__frag gt__gemma4[] = {
    {"{{bos_token}}", "starts with <bos>"},
    {"{{'<|turn>system\\n'}}", "opens the system turn"},
    {"{{'<|think|>\\n'}}", "opens the system turn with <|think|> and a newline when thinking is on"},
    {"{{messages[0]['content']|trim}}", "writes the system message trimmed"},
    {"{{'<|turn>'+role+'\\n'}}", "opens each turn"},
    {"setrole='model'ifmessage['role']=='assistant'elsemessage['role']", "names the assistant's turns model"},
    {"thinking_text=message.get('reasoning')ormessage.get('reasoning_content')",
     "reads a model turn's reasoning from 'reasoning' or 'reasoning_content'"},
    {"thinking_gate=(loop.index0>ns_turn.last_user_idx)",
     "writes the reasoning of the model turns after the last user message"},
    {"{%ifthinking_textandthinking_gate%}", "writes the reasoning of the model turns after the last user message"},
    {"{{'<|channel>thought\\n'+thinking_text+'\\n<channel|>'}}", "writes the reasoning in the thought channel"},
    {"text.split('<channel|>')", "drops thought blocks from a model turn's content"},
    {"part.split('<|channel>')[0]", "drops thought blocks from a model turn's content"},
    {"{{strip_thinking(message['content'])}}", "drops thought blocks from a model turn's content"},
    {"{{message['content']|trim}}", "trims a user turn's content"},
    {"{{'<turn|>\\n'}}", "closes each turn"},
    {"{%ifadd_generation_prompt%}", "opens the model's turn"},
    {"{{'<|turn>model\\n'}}", "opens the model's turn"},
};
static const char *const gt__gemma4_markers[] = {
    "<|turn>system\\n", "<|think|>\\n", "<|tool>", "<tool|>", "<turn|>\\n", "<|turn>", "<|channel>thought\\n",
    "\\n<channel|>", "<|tool_call>call:", "}<tool_call|>", "<|tool_response>", "<tool_response|>", "<|image|>",
    "<|audio|>", "<|video|>", "<|\"|>", "<|turn>model\\n", "<|channel>thought\\n<channel|>",
    "\\n\\n<|image|>\\n\\n", "\\n\\n<|video|>\\n\\n"};
/* the larger models' generation prompt with thinking off: the empty
 * thought block under "not enable_thinking", which Google's revisions and
 * the copies in circulation spell with or without "| default(false)" */
#define GT__EMPTY_THOUGHT "{{'<|channel>thought\\n<channel|>'}}"
static const char *const gt__primings[] = {
    "{%ifnotenable_thinking%}" GT__EMPTY_THOUGHT "{%endif%}",
    "{%ifnotenable_thinking|default(false)%}" GT__EMPTY_THOUGHT "{%endif%}",
    "{%ifnot(enable_thinking|default(false))%}" GT__EMPTY_THOUGHT "{%endif%}",
    "{%ifnot(enable_thinking)%}" GT__EMPTY_THOUGHT "{%endif%}"};

/* The first string literal a {{ }} tag of norm prints that holds a '<' and
 * is not one of the markers; NULL when there is none. Into buf. */
static const char *gt__unknown_marker(const char *norm, const char *const *known, int n_known, char *buf, size_t n) {
  for (const char *p = strstr(norm, "{{"); p; p = strstr(p, "{{")) {
    const char *end = strstr(p, "}}");
    if (!end) break;
    for (const char *q = p + 2; q < end; q++) {
      if (*q != '\'') continue;
      const char *e = q + 1;
      while (e < end && *e != '\'') e += (*e == '\\' && e + 1 < end) ? 2 : 1;
      size_t len = (size_t)(e - q - 1);
      if (memchr(q + 1, '<', len)) {
        int ok = 0;
        for (int i = 0; i < n_known && !ok; i++) ok = strlen(known[i]) == len && !memcmp(known[i], q + 1, len);
        if (!ok) {
          snprintf(buf, n, "%.*s", (int)(len > 80 ? 80 : len), q + 1);
          return buf;
        }
      }
      q = e;
    }
    p = end + 2;
  }
  return NULL;
}

gt_rc gt_chat_template_recognise(const char *text, const char *source, char *value, size_t n, gt_err *err) {
  char *norm = gt__normalise(text);
  if (!norm) return gt_err_set(err, GT_ERR_NOMEM, "chat: no memory to read %s", source);
  gt_rc rc = GT_OK;
  int g4 = strstr(text, "<|turn>") != NULL, g3 = strstr(text, "<start_of_turn>") != NULL;
  const char *name = g4 ? "Gemma 4" : "Gemma 3";
  const char *fix = "set chat_template (gemma3, gemma4 or gemma4_small) to render the records with that template "
                    "instead";
  if (g4 == g3) {
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "chat: %s is neither Google's Gemma 3 chat template (<start_of_turn> turns) nor Gemma 4's "
                    "(<|turn> turns)%s; gemtrain renders only those (no Jinja engine): %s",
                    source, g4 ? ", it has both" : "", fix);
    goto out;
  }
  const gt__frag *fr = g4 ? gt__gemma4 : gt__gemma3;
  int nf = g4 ? (int)(sizeof gt__gemma4 / sizeof *fr) : (int)(sizeof gt__gemma3 / sizeof *fr);
  for (int i = 0; i < nf; i++) {
    if (strstr(norm, fr[i].text)) continue;
    /* the early Gemma 4 revisions, named by what they render differently */
    const char *early = NULL;
    int google = g4 && strstr(norm, "{{'<|turn>'+role+'\\n'}}") && strstr(norm, "{{'<|turn>system\\n'}}") &&
                 strstr(norm, "{{strip_thinking(message['content'])}}");
    if (google && strstr(norm, "{{'<|think|>'}}"))
      early = "writes <|think|> without the newline the current one puts after it";
    else if (google && strstr(norm, "ifthinking_textandloop.index0>ns_turn.last_user_idxandmessage.get('tool_calls')"))
      early = "writes a model turn's reasoning only beside tool calls, where the current one writes it for every "
              "model turn after the last user message";
    else if (google && !strstr(norm, "thinking_text"))
      early = "never writes a model turn's reasoning, where the current one writes it in the thought channel";
    if (early)
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "chat: %s is an early revision of Google's Gemma 4 chat template: it %s; gemtrain renders "
                      "the revision of 2026-07-09 (the model's Hugging Face page has it: replace the file), or %s",
                      source, early, fix);
    else
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "chat: %s is not Google's %s chat template: it lacks \"%s\" (Google's %s); gemtrain renders "
                      "only Google's templates (no Jinja engine): %s",
                      source, name, fr[i].text, fr[i].what, fix);
    goto out;
  }
  char buf[100];
  const char *unknown = g4 ? gt__unknown_marker(norm, gt__gemma4_markers,
                                                 (int)(sizeof gt__gemma4_markers / sizeof *gt__gemma4_markers), buf,
                                                 sizeof buf)
                           : gt__unknown_marker(norm, gt__gemma3_markers,
                                                 (int)(sizeof gt__gemma3_markers / sizeof *gt__gemma3_markers), buf,
                                                 sizeof buf);
  if (unknown) {
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "chat: %s is not Google's %s chat template: it prints '%s', which Google's does not; gemtrain "
                    "renders only Google's templates (no Jinja engine): %s",
                    source, name, unknown, fix);
    goto out;
  }
  int primes = 0;
  for (size_t i = 0; g4 && i < sizeof gt__primings / sizeof *gt__primings; i++) primes |= strstr(norm, gt__primings[i]) != NULL;
  /* the empty thought block printed under another condition: which variant
   * it is cannot be told, and guessing E2B/E4B's would drop the block */
  if (g4 && !primes && strstr(norm, GT__EMPTY_THOUGHT)) {
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "chat: %s prints the empty thought block '<|channel>thought\\n<channel|>' under a condition "
                    "other than Google's \"if not enable_thinking\": gemtrain cannot tell whether model turns "
                    "open with it (the larger models' template) or not (E2B/E4B's): %s",
                    source, "set chat_template=gemma4 or chat_template=gemma4_small");
    goto out;
  }
  snprintf(value, n, "%s", !g4 ? "gemma3" : primes ? "gemma4" : "gemma4_small");
out:
  free(norm);
  return rc;
}

static gt_rc gt__slurp(const char *path, char **out, int *missing, gt_err *err) {
  *out = NULL;
  *missing = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) {
      *missing = 1;
      return GT_OK;
    }
    return gt_err_set(err, GT_ERR_IO, "chat: cannot read '%s': %s", path, strerror(errno));
  }
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *nb = cap < ((size_t)64 << 20) ? realloc(b, cap * 2) : NULL;
    if (!nb) free(b);
    b = nb;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!b) return gt_err_set(err, GT_ERR_NOMEM, "chat: '%s' is too large to read (64 MiB at most)", path);
  if (bad) {
    free(b);
    return gt_err_set(err, GT_ERR_IO, "chat: cannot read '%s'", path);
  }
  b[n] = '\0';
  *out = b;
  return GT_OK;
}

gt_rc gt_chat_template_of_dir(const char *dir, char *value, size_t n, int *found, gt_err *err) {
  *found = 0;
  char path[GT_STR_PATH + 64], source[GT_STR_PATH + 128];
  char *text = NULL;
  int missing;
  /* transformers saves the template as chat_template.jinja and reads it
   * before tokenizer_config.json's "chat_template" */
  snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
  gt_rc rc = gt__slurp(path, &text, &missing, err);
  if (rc) return rc;
  if (!missing) {
    snprintf(source, sizeof source, "'%s'", path);
    rc = gt_chat_template_recognise(text, source, value, n, err);
    free(text);
    *found = !rc;
    return rc;
  }
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  if ((rc = gt__slurp(path, &text, &missing, err)) || missing) return rc;
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (!j) return gt_err_set(err, GT_ERR_FORMAT, "chat: '%s' is not valid JSON", path);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
  const char *tmpl = NULL;
  if (cJSON_IsString(t)) tmpl = t->valuestring;
  if (cJSON_IsArray(t)) { /* named templates: the default one */
    const cJSON *it;
    cJSON_ArrayForEach(it, t) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"), *tx = cJSON_GetObjectItemCaseSensitive(it, "template");
      if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default") && cJSON_IsString(tx)) tmpl = tx->valuestring;
    }
  }
  if (t && !cJSON_IsNull(t) && !tmpl)
    rc = gt_err_set(err, GT_ERR_FORMAT, "chat: '%s': \"chat_template\" is %s; expected a string (or a list with a "
                    "template named default)", path, cJSON_IsArray(t) ? "a list without a default template" : "not a string");
  if (!rc && tmpl) {
    snprintf(source, sizeof source, "the chat_template of '%s'", path);
    rc = gt_chat_template_recognise(tmpl, source, value, n, err);
    *found = !rc;
  }
  cJSON_Delete(j);
  return rc;
}
