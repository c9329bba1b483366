/* Chat templates: a conversation (role, content, thinking per message) as
 * the text Google's chat template for the model renders, cut into pieces
 * that say what each part is (the prompt, the model's answer, its thought),
 * so the data source can encode them with a loss mask and decoding can open
 * a model turn. No Jinja engine: each template is written out here, and
 * tests compare it with the published template rendered by Jinja.
 *
 * Gemma 3 (<start_of_turn> ... <end_of_turn>):
 *   <bos><start_of_turn>user\n{system}\n\n{content}<end_of_turn>\n
 *   <start_of_turn>model\n{content}<end_of_turn>\n ...
 *   The system message is folded (untrimmed) into the first user turn; the
 *   roles alternate user/model starting with user; content is trimmed;
 *   there is no thought channel (a message with thinking is refused).
 *   Generation prompt: <start_of_turn>model\n
 *
 * Gemma 4 (<|turn> ... <turn|>):
 *   <bos>[<|turn>system\n[<|think|>\n]{system}<turn|>\n]
 *   <|turn>user\n{content}<turn|>\n
 *   <|turn>model\n[<|channel>thought\n{thinking}\n<channel|>]{content}<turn|>\n ...
 *   A system turn is written when there is a system (or developer) message
 *   or thinking is enabled (enable_thinking: <|think|> opens it). A model
 *   turn's thinking is rendered in the thought channel only after the last
 *   user message, as Google's template does (earlier turns' thinking is
 *   dropped); a model turn's content loses any <|channel>...<channel|> block
 *   it holds, then is trimmed.
 *   Generation prompt: <|turn>model\n, and on the larger models (not E2B /
 *   E4B: not the gemma4_small decoder, no per-layer embeddings) with
 *   thinking off an empty, closed thought block <|channel>thought\n<channel|>
 *   (Google publishes a template per variant; they differ only there).
 *   In training each model turn opens as the generation prompt opens it, so
 *   on the larger models a model turn without thinking starts with that
 *   empty block (out of the loss: the prompt supplies it).
 *
 * The loss: each model turn's content and its end-of-turn marker, as the
 * model generates them; the thought channel with its markers too when
 * sft_train_on_thinking, else out of the loss. */
#ifndef GEMTRAIN_DATA_CHAT_H
#define GEMTRAIN_DATA_CHAT_H

#include <stddef.h>

#include "base/common.h"
#include "config/config.h"

typedef enum gt_chat_template { GT_CHAT_GEMMA3 = 0, GT_CHAT_GEMMA4 = 1 } gt_chat_template;

typedef struct gt_chat_msg {
  const char *role;     /* system (first only), developer (Gemma 4, first only), user, assistant or model */
  const char *content;
  const char *thinking; /* may be NULL: the model turn's reasoning (Gemma 4's thought channel) */
} gt_chat_msg;

/* The template a model uses: chat_template when it names one (set by the
 * user, or from a Hugging Face directory's own template), else from
 * decoder_block (gemma4 / gemma4_small -> GEMMA4, else GEMMA3). */
gt_chat_template gt_chat_template_for(const gt_config *cfg);
/* 1 when the model opens a model turn with an empty, closed thought block
 * while thinking is off: Gemma 4's larger models, not E2B/E4B
 * (chat_template=gemma4_small, decoder_block=gemma4_small or per-layer
 * embeddings). */
int gt_chat_primes_empty_thought(const gt_config *cfg);

/* Renders messages as the template's text; add_generation_prompt: end with
 * the opening of a model turn (with the priming that variant needs), as
 * HF's apply_chat_template(add_generation_prompt=True). *out is malloc'ed,
 * caller frees. GT_ERR_FORMAT naming the message that breaks the template. */
gt_rc gt_chat_render_text(gt_chat_template t, const gt_config *cfg, const gt_chat_msg *m, int n,
                          int add_generation_prompt, char **out, gt_err *err);

/* The text of the end-of-turn marker ("<end_of_turn>" / "<turn|>"), which
 * decoding stops at. */
const char *gt_chat_end_of_turn(gt_chat_template t);
/* "Gemma 3" / "Gemma 4" */
const char *gt_chat_template_name(gt_chat_template t);

/* Jinja's trim (Python's str.strip()) of n bytes at *s: moves *s and sets
 * *n past the leading and before the trailing whitespace characters
 * (str.isspace(): ASCII's, U+001C-001F, U+0085 and Unicode's spaces). */
void gt_chat_trim(const char **s, size_t *n);
/* A Gemma 4 model turn's text (n bytes; it may hold NUL bytes) cut at its
 * thought channel: *answer is what Google's strip_thinking macro leaves (the
 * text outside <|channel>...<channel|> blocks, text after a <|channel> with
 * no closing marker dropped, trimmed); *thought the text inside the blocks,
 * each without the channel's name ("thought") and trimmed, joined by "\n",
 * or NULL when there is no <|channel>. Both malloc'd and NUL-terminated. */
gt_rc gt_chat_split_thinking(const char *s, size_t n, char **answer, size_t *answer_n, char **thought,
                             size_t *thought_n, gt_err *err);

/* ---- a Hugging Face directory's own template (chat_detect.c) ---- */
/* Which of Google's templates the Jinja text is: value gets "gemma3",
 * "gemma4" (the larger models': the generation prompt primes an empty
 * thought block) or "gemma4_small" (E2B/E4B's: it does not), chat_template's
 * values. Any other template, or an early revision of Google's Gemma 4 one,
 * is refused (GT_ERR_CONFIG) naming source and the difference. */
gt_rc gt_chat_template_recognise(const char *text, const char *source, char *value, size_t n, gt_err *err);
/* The template of a Hugging Face directory: chat_template.jinja, else
 * tokenizer_config.json's "chat_template" (a string, or the template named
 * default). *found = 0 (value untouched) when it has neither. */
gt_rc gt_chat_template_of_dir(const char *dir, char *value, size_t n, int *found, gt_err *err);

/* ---- the rendering in pieces ---- */
/* What a piece of the rendering is. */
enum {
  GT_CHAT_BOS,    /* the <bos> token (text "<bos>") */
  GT_CHAT_PROMPT, /* template text and the user's / system's content: out of the loss with completion-only */
  GT_CHAT_ANSWER, /* a model turn's content and its end-of-turn marker: in the loss */
  GT_CHAT_THOUGHT /* a model turn's thought channel, markers included: in the loss with sft_train_on_thinking */
};
typedef struct gt_chat_piece {
  const char *s; /* not NUL-terminated: n bytes */
  size_t n;
  int kind;
} gt_chat_piece;
typedef struct gt_chat_pieces {
  gt_chat_piece *v;
  int n, cap;
  char **owned; /* text the rendering made (a model turn's content without its thought blocks) */
  int n_owned, cap_owned;
} gt_chat_pieces;

/* How to render. */
typedef struct gt_chat_opts {
  gt_chat_template t;
  int prime_empty_thought; /* gt_chat_primes_empty_thought */
  int enable_thinking;     /* Gemma 4: <|think|> in the system turn, no empty thought block */
  const char *where;       /* error prefix, e.g. "data: 'chat.jsonl' line 3" ("chat" when NULL) */
  const char *field;       /* the messages' name in errors ("messages" when NULL) */
} gt_chat_opts;
void gt_chat_opts_init(gt_chat_opts *o, const gt_config *cfg);

/* The pieces of a conversation (pointing into m's strings and static text:
 * m must outlive them). Free with gt_chat_pieces_free, also after an error. */
gt_rc gt_chat_render(const gt_chat_opts *o, const gt_chat_msg *m, int n, int add_generation_prompt,
                     gt_chat_pieces *out, gt_err *err);
void gt_chat_pieces_free(gt_chat_pieces *p);

#endif
