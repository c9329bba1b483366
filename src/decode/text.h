/* Decoding text: the tokenizer a model was trained with, prompts as ids,
 * generation that stops at an end-of-turn token or a stop string, the reply
 * as text, and that text made safe for a console.
 *
 *   gt_tokenizer *tok;  gt_decode_tokenizer(&cfg, path, &tok, what, sizeof what, &err);
 *   gt_textgen g;  gt_textgen_init(&g, &model, tok, &sampler, &err);
 *   gt_textgen_add_stop(&g, "\n\n", &err);          (any number)
 *   gt_textgen_set_end_of_turn(&g, "<end_of_turn>", &err);
 *   gt_textgen_encode(&g, text, &ids, &n, &err);
 *   gt_textgen_generate(&g, ids, n, max_new, &out, &err);  ... out.text
 *   gt_textgen_out_free(&out);  gt_textgen_free(&g);
 *
 * Private to libgemtrain (not in the installed API). */
#ifndef GEMTRAIN_DECODE_TEXT_H
#define GEMTRAIN_DECODE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "config/config.h"
#include "decode/decode.h"
#include "tokenizer/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- console text ----
 * A copy of n bytes for a terminal or a log: valid UTF-8 passes, newlines and
 * tabs too; every other control character is escaped (C0 and DEL as \xNN,
 * C1 as \u0080 .. \u009F), and each byte that does not start a complete,
 * valid UTF-8 sequence (overlong forms, surrogates and code points above
 * U+10FFFF included) as \xNN. Backslashes are kept as they are: the copy is
 * for reading, not for parsing back. malloc'd, NUL-terminated; NULL when
 * there is no memory. */
char *gt_text_escape(const char *s, size_t n);

/* ---- the tokenizer of a model ----
 * Which tokenizer the text of a model goes through, in this order: the
 * tokenizer_path the user set (cfg, gt_config_is_user_set; set empty, byte
 * tokens); else the one the
 * model was trained with, which its checkpoint's or parameter file's stored
 * config names; else a Hugging Face directory's own tokenizer.json; else
 * none (*tok = NULL: byte tokens). A tokenizer the source names but that
 * cannot be read is refused (naming the file and where it was named), never
 * replaced by byte tokens. `what` (may be NULL) gets a few words on where it
 * came from, for the console. */
gt_rc gt_decode_tokenizer(const gt_config *cfg, const char *load_parameters_path, gt_tokenizer **tok, char *what,
                          size_t what_n, gt_err *err);

/* ---- stop strings ----
 * The `stop` key's value as strings: empty -> none; a JSON list of strings
 * -> those; anything else -> the value itself, one string. *out (malloc'd
 * array of malloc'd strings) and *n; free with gt_stop_strings_free. */
gt_rc gt_stop_strings_parse(const char *value, char ***out, int *n, gt_err *err);
void gt_stop_strings_free(char **s, int n);

/* ---- chat prompts ----
 * A conversation to render with the model's chat template (src/data/chat.h,
 * the one SFT data is rendered with). Roles as in the JSON Lines chat form:
 * system, user, assistant (or model). */
typedef struct gt_decode_turn {
  char *role, *content, *thinking; /* thinking may be NULL */
  char **parts; /* content given as a list of text parts: their texts (n_parts of them), else NULL;
                   content is then the parts trimmed and joined */
  int n_parts;
} gt_decode_turn;

typedef struct gt_decode_chat {
  gt_decode_turn *turns;
  int n, cap;
} gt_decode_chat;

gt_rc gt_decode_chat_add(gt_decode_chat *c, const char *role, const char *content, gt_err *err);
struct gt_textgen_out;
/* Appends the model's reply as an assistant turn: o->text its content,
 * o->thinking (when there is one) its reasoning, which the template renders
 * only after the last user message (so not once the next turn is added). */
gt_rc gt_decode_chat_add_reply(gt_decode_chat *c, const struct gt_textgen_out *o, gt_err *err);
/* Appends the messages of one JSON Lines chat record, {"messages": [{"role":
 * ..., "content": ...}, ...]} (content a string or a list of {"type": "text",
 * "text": ...} parts, another type refused naming the message and the type;
 * a model turn's reasoning optional, under the keys SFT data takes:
 * "reasoning", "reasoning_content" or "thinking"). where names the file and
 * line. */
gt_rc gt_decode_chat_parse(const char *json, const char *where, gt_decode_chat *c, gt_err *err);
/* The chat keys against the model's template: enable_thinking=true with a
 * template that has no thinking mode (Gemma 3's) is refused, as training
 * refuses it. */
gt_rc gt_decode_chat_check(const gt_config *cfg, gt_err *err);
/* The conversation as the prompt of the model's next turn (the template's
 * generation prompt after it; it must end with a user turn), and the
 * template's end-of-turn marker (a static string). *text malloc'd. Content
 * given as parts is rendered as Google's templates render it: each text
 * part trimmed (a Gemma 4 model turn's: strip_thinking'd), the parts joined
 * with nothing between them; a system message's parts: Gemma 3's template
 * takes the first part's text untrimmed (one part is taken so, more are
 * refused, as the template would drop them), Gemma 4's writes the content
 * as a string (refused). Checks cfg with gt_decode_chat_check first. */
gt_rc gt_decode_chat_render(const gt_config *cfg, const gt_decode_chat *c, char **text, const char **end_of_turn,
                            gt_err *err);
void gt_decode_chat_free(gt_decode_chat *c);

/* ---- generation as text ---- */

typedef enum gt_stop_reason {
  GT_STOP_MAX = 0,     /* max_new tokens generated */
  GT_STOP_EOS,         /* <eos> */
  GT_STOP_END_OF_TURN, /* the chat template's end of turn (a token, or its text with byte tokens) */
  GT_STOP_STRING       /* one of the stop strings */
} gt_stop_reason;

#define GT_TEXTGEN_MAX_STOPS 64

typedef struct gt_textgen {
  gt_model *m;
  const gt_tokenizer *tok; /* NULL: byte tokens (dataset_type=text's) */
  gt_sampler *smp;
  int32_t bos, eos;        /* the tokenizer's <bos>/<s> and <eos>/</s> (gt_encoder_init: training's) */
  int64_t n_ids;           /* the tokenizer's id count: larger ids are never sampled (0: byte tokens) */
  int32_t eot_id;          /* the end-of-turn token, or -1 */
  const char *ch_open, *ch_close; /* Gemma 4's thought channel markers in a chat, else NULL */
  int32_t ch_open_id, ch_close_id; /* their tokens, or -1 (byte tokens: the markers are text) */
  char *stops[GT_TEXTGEN_MAX_STOPS]; /* stop strings (owned) */
  int n_stops;
  int eot_stop;            /* index of the end-of-turn text among stops (byte tokens), or -1 */
  gt_decoder dec;
  int64_t dec_len;         /* positions dec holds (0: none yet) */
} gt_textgen;

typedef struct gt_textgen_out {
  int32_t *ids;            /* [n_new] the tokens sampled, the stopping one included */
  int64_t n_new;
  char *text;              /* the reply: the new tokens' text up to the stop (the end-of-turn
                              token, <eos> and a stop string are not in it); raw, not escaped,
                              NUL-terminated but it may hold NUL bytes. With a thought channel
                              (gt_textgen_set_chat) and a reply that opens or closes one: the
                              answer alone (gt_chat_split_thinking) */
  size_t len;              /* its bytes */
  char *thinking;          /* then the thought (NULL when the reply has no <|channel>) */
  size_t thinking_len;
  gt_stop_reason reason;
  int stop_index;          /* GT_STOP_STRING: which of the stop strings */
  gt_decode_stats st;
} gt_textgen_out;

/* tok NULL (byte tokens) with a model whose vocab_size is not 260 is
 * refused (GT_ERR_CONFIG, naming tokenizer_path): every text path encodes
 * and decodes through it. */
gt_rc gt_textgen_init(gt_textgen *g, gt_model *m, const gt_tokenizer *tok, gt_sampler *smp, gt_err *err);
void gt_textgen_free(gt_textgen *g);
/* A stop string (copied); an empty one is refused. */
gt_rc gt_textgen_add_stop(gt_textgen *g, const char *s, gt_err *err);
/* The chat template's end-of-turn marker: its token when the tokenizer has
 * it as one, else (byte tokens) its text as a stop string. */
gt_rc gt_textgen_set_end_of_turn(gt_textgen *g, const char *marker, gt_err *err);
/* A chat in the model's template (cfg: gt_chat_template_for): its end of
 * turn (as gt_textgen_set_end_of_turn, when none is set yet) and, for
 * Gemma 4, its thought channel: the reply's text keeps the <|channel> and
 * <channel|> tokens (the other special tokens are dropped) and is split
 * into the answer and the thought (gt_textgen_split_thinking). */
gt_rc gt_textgen_set_chat(gt_textgen *g, const gt_config *cfg, gt_err *err);
/* With a thought channel set: when o->text (len bytes) holds either marker,
 * it becomes the answer and o->thinking the thought, as
 * gt_chat_split_thinking cuts them; else nothing changes. */
gt_rc gt_textgen_split_thinking(const gt_textgen *g, gt_textgen_out *o, gt_err *err);
/* Text -> ids with exactly one <bos> (g->bos) first: a leading "<bos>" in
 * the text (a rendered chat template starts with it) is that <bos>, else one
 * is added. Ids outside the model's vocabulary are refused. *ids malloc'd. */
gt_rc gt_textgen_encode(const gt_textgen *g, const char *text, int32_t **ids, int64_t *n, gt_err *err);
/* The text of ids (special tokens dropped, but for a thought channel's
 * markers when one is set; with a tokenizer an invalid
 * byte-fallback run is U+FFFD per byte, as HF). *text malloc'd,
 * NUL-terminated, *len bytes (it may hold NUL bytes). */
gt_rc gt_textgen_text(const gt_textgen *g, const int32_t *ids, int64_t n, char **text, size_t *len, gt_err *err);
/* Generates up to max_new tokens after the prompt (the decoder is sized, or
 * re-made, for n_prompt + max_new positions) and stops at <eos>, the end of
 * turn or a stop string, whichever comes first. Ids the tokenizer does not
 * have (>= its id count) are masked to -inf before sampling: no strategy
 * picks them. Stop strings are searched in the whole
 * reply, a thought channel (with its markers) included. */
gt_rc gt_textgen_generate(gt_textgen *g, const int32_t *prompt, int64_t n_prompt, int64_t max_new, gt_textgen_out *out,
                          gt_err *err);
void gt_textgen_out_free(gt_textgen_out *o);
/* "max_decode_steps reached", "stopped at <eos>", "stopped at the end of turn",
 * "stopped at stop string 1" (1-based, of the stops added). */
void gt_textgen_reason_text(const gt_textgen *g, const gt_textgen_out *o, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
