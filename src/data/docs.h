/* Documents from records: JSON Lines reading (jsonl.c) and a record turned
 * into tokens with a loss mask (docs.c). Shared by the data source and
 * `gemtrain tokenize` / `gemtrain data`.
 *
 * A record is one JSON object per line. What it holds (train_data_columns,
 * use_sft):
 *   text        {"text": "..."}                  <bos> text <eos>, all in the loss
 *   prompt/     {"prompt": "...",                <bos> prompt completion <eos>; with
 *   completion   "completion": "..."}            sft_train_on_completion_only the loss
 *                                                covers the completion and <eos>
 *   chat        {"messages": [{"role": "user",   Gemma's chat template (system folded into
 *                "content": "..."}, ...]}        the first user turn, roles alternating
 *                                                user/model, content trimmed):
 *     <bos><start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n{content}<end_of_turn>\n ... <eos>
 *                                                the loss covers each model turn's content
 *                                                and its <end_of_turn>
 * The parts are encoded separately (the template's markers are the
 * tokenizer's added tokens, which cut the text the same way) and joined. */
#ifndef GEMTRAIN_DATA_DOCS_H
#define GEMTRAIN_DATA_DOCS_H

#include <stdint.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "data/chat.h"
#include "tokenizer/tokenizer.h"

struct cJSON;

/* ---- JSON Lines ---- */
/* The longest line (one record) read, in bytes: a longer one is refused
 * naming its file and line, before it is held in memory. */
#define GT_JSONL_MAX_LINE (64 << 20)
typedef struct gt_jsonl {
  char *path;
  void *gz;           /* gzFile: reads gzip and plain files alike */
  char *buf;          /* read buffer */
  size_t buf_len, buf_pos;
  char *line;         /* the current line */
  size_t line_len, line_cap;
  int64_t line_no;    /* 1-based number of the current line */
  int eof;
  uint64_t bytes_in;  /* compressed bytes read so far (progress) */
} gt_jsonl;

gt_rc gt_jsonl_open(gt_jsonl *r, const char *path, gt_err *err);
/* The next record: *rec is a JSON object the caller deletes, or NULL at the
 * end. Blank lines are skipped. A line that is not one JSON object, or a
 * damaged gzip stream, is refused naming the file and line. */
gt_rc gt_jsonl_next(gt_jsonl *r, struct cJSON **rec, gt_err *err);
void gt_jsonl_close(gt_jsonl *r);
/* What a JSON value is, for messages: "an array", "a string", ... ("absent"
 * for NULL). */
const char *gt_json_type_name(const struct cJSON *v);
/* Whether a JSON value leaves an option unset: absent (NULL), null, false,
 * or an empty string, array or object. */
int gt_json_unset(const struct cJSON *v);

/* ---- tokens of a record ---- */
/* The bit of a held token that keeps it out of the loss (an SFT prompt):
 * it is never the target of a prediction. Ids are below 2^31. */
#define GT_TOK_NOLOSS 0x80000000u
/* A growing token array in tracked memory (category data), or malloc when
 * mem is NULL. */
typedef struct gt_tokvec {
  uint32_t *v;
  int64_t n, cap;
  gt_mem *mem;
} gt_tokvec;
gt_rc gt_tokvec_push(gt_tokvec *t, const uint32_t *ids, int64_t n, gt_err *err);
void gt_tokvec_free(gt_tokvec *t);

/* Byte tokens (tok NULL) or a Hugging Face tokenizer. */
typedef struct gt_encoder {
  const gt_tokenizer *tok;
  int32_t bos, eos;
  int64_t vocab; /* every id must be below it */
} gt_encoder;
/* bos and eos: the tokenizer's <bos>/<s> and <eos>/</s> (Gemma's 2 and 1
 * when it has neither, and for byte tokens). */
void gt_encoder_init(gt_encoder *e, const gt_tokenizer *tok, int64_t vocab);
/* Appends the ids of n bytes of text, each or'ed with flag (0 or the
 * not-in-the-loss bit). An id >= vocab is refused naming `where`. */
gt_rc gt_encode_append(const gt_encoder *e, const char *text, size_t n, uint32_t flag, gt_tokvec *out,
                       const char *where, gt_err *err);
/* Whether the tokenizer has template t's turn markers as tokens of their
 * own (true of byte tokens, where each is its bytes by design); refused,
 * naming the marker, where one would be split into ordinary tokens (a
 * Gemma 3 template over a Gemma 4 tokenizer, or the other way round). */
gt_rc gt_encoder_check_chat(const gt_encoder *e, gt_chat_template t, const char *tokenizer_path, gt_err *err);
/* Appends a chat template's pieces (data/chat.h), piece i with flags[i], as
 * Hugging Face encodes the rendered text whole: a run of adjacent pieces
 * with the same flag is encoded as one text, so the tokenizer's merges
 * cross the seams between them (a system message's "\n" and the template's
 * "\n\n" are Gemma's one "\n\n\n" token, as in the whole text). A <bos>
 * piece is the encoder's bos id. */
gt_rc gt_encode_pieces(const gt_encoder *e, const gt_chat_pieces *p, const uint32_t *flags, gt_tokvec *out,
                       const char *where, gt_err *err);

enum { GT_DOC_TEXT, GT_DOC_PROMPT_COMPLETION, GT_DOC_CHAT };
typedef struct gt_doc_format {
  int kind;
  char col[2][GT_STR_SHORT];
  int completion_only;
  gt_chat_opts chat;  /* chat: the model's template (data/chat.h) */
  int train_thinking; /* chat: the thought channel is in the loss (sft_train_on_thinking) */
  int no_bos, no_eos; /* text documents without <bos> / <eos> (gemtrain tokenize's add_bos / add_eos) */
} gt_doc_format;
/* From train_data_columns, use_sft and sft_train_on_completion_only. */
gt_rc gt_doc_format_init(gt_doc_format *f, const gt_config *c, gt_err *err);
/* "text 'text'", "prompt/completion 'prompt', 'completion'", "chat 'messages'" */
void gt_doc_format_name(const gt_doc_format *f, char *buf, size_t n);
/* Appends record rec (line `line` of `file`) as one document: ids, with
 * GT_TOK_NOLOSS on the tokens out of the loss. A missing field, a wrong type,
 * an empty document or a chat that breaks the template is refused naming
 * the file, the line and the field. */
gt_rc gt_doc_render(const gt_encoder *e, const gt_doc_format *f, const struct cJSON *rec, const char *file,
                    int64_t line, gt_tokvec *out, gt_err *err);
/* The messages of a chat field (msgs, named `name` in errors) as a malloc'ed
 * array pointing into msgs' strings (free it; msgs must outlive it). Not an
 * array, empty, or a message without string role and content is refused
 * naming the file, the line and the message. */
/* A chat message's reasoning member: the first of 'reasoning' and
 * 'reasoning_content' (the keys Google's Gemma 4 template reads), then
 * 'thinking', that is present and not null (its key in *key), or NULL. The
 * caller checks that it is a string. SFT data and decode's messages read
 * it alike. */
const struct cJSON *gt_doc_reasoning(const struct cJSON *msg, const char **key);
gt_rc gt_doc_messages(const struct cJSON *msgs, const char *file, int64_t line, const char *name, gt_chat_msg **out,
                      int *n, gt_err *err);

#endif
