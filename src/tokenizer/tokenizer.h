/* The Hugging Face tokenizer of Gemma: a tokenizer.json with a BPE model
 * (byte fallback), its normalizer, pre-tokenizer, added/special tokens,
 * post-processor and decoder, encoding and decoding as the `tokenizers`
 * library does.
 *
 * Supported components (anything else is refused when loading, naming it):
 *   model          BPE (byte_fallback, fuse_unk, ignore_merges; no dropout,
 *                  no continuing_subword_prefix / end_of_word_suffix)
 *   normalizer     Replace (String pattern), Prepend, Sequence, null
 *   pre_tokenizer  Split (String pattern, any behavior, not inverted),
 *                  Sequence, null
 *   post_processor TemplateProcessing (special tokens around $A), null
 *   decoder        Replace (String pattern), ByteFallback, Fuse, Sequence, null
 *   added_tokens   matched in the raw text, leftmost-longest, before the
 *                  normalizer (normalized=false; no lstrip/rstrip/single_word)
 *
 * Input that is not valid UTF-8 (which HF cannot take): each byte that does
 * not start a complete, valid UTF-8 sequence is its own symbol and goes
 * through byte fallback as <0xNN>, so decode(encode(x)) == x byte for byte.
 * Decoding writes the raw bytes of byte-fallback tokens; HF writes U+FFFD per
 * byte when such a run is not valid UTF-8 (GT_TOK_DECODE_REPLACE does that).
 * The one text that does not round-trip is U+2581 itself (Gemma's normalizer
 * turns spaces into it and its decoder turns it back into a space), as in HF.
 *
 * A loaded tokenizer is read-only: several threads may encode with it at once. */
#ifndef GEMTRAIN_TOKENIZER_H
#define GEMTRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_tokenizer gt_tokenizer;

/* Loads a tokenizer.json file. */
gt_rc gt_tokenizer_load(const char *path, gt_tokenizer **out, gt_err *err);
/* The same from JSON text in memory; `name` is used in error messages. */
gt_rc gt_tokenizer_load_json(const char *json, size_t len, const char *name, gt_tokenizer **out,
                             gt_err *err);
void gt_tokenizer_free(gt_tokenizer *t);

/* Number of ids (vocabulary and added tokens): 1 + the largest id. */
int32_t gt_tokenizer_n_ids(const gt_tokenizer *t);
/* The id of a token string (vocabulary or added token), or -1. */
int32_t gt_tokenizer_token_id(const gt_tokenizer *t, const char *tok, size_t len);
/* The string of an id (not NUL-terminated; *len set), or NULL. */
const char *gt_tokenizer_token(const gt_tokenizer *t, int32_t id, size_t *len);
/* 1 when id is an added token marked special (<bos>, <start_of_turn>, ...). */
int gt_tokenizer_is_special(const gt_tokenizer *t, int32_t id);

enum {
  GT_TOK_ADD_SPECIAL = 1 /* add the post-processor's tokens (Gemma: <bos>) */
};

/* Encodes n bytes of text into a malloc'd id array (*ids, *n_ids; the caller
 * frees). flags: GT_TOK_ADD_SPECIAL or 0 (what shard writing uses). */
gt_rc gt_tokenizer_encode(const gt_tokenizer *t, const char *text, size_t n, int flags, int32_t **ids,
                          int64_t *n_ids, gt_err *err);

/* A position p in (0, max], p < n, where the text may be cut and its two
 * parts encoded apart (flags 0) with the same ids as the whole: just after a
 * newline that is not followed by another. The byte after the cut is read,
 * so text[0, n) may be the start of a longer text (a read buffer): a cut at
 * its end, where the next read might go on with a newline, is never
 * returned. It exists when "\n" is an added
 * token and no added token mixes newlines with other characters (Gemma 3):
 * added tokens cut the text before BPE sees it, and a run of newlines is
 * matched from its first one. Returns 0 when there is no such point (or the
 * tokenizer has no such guarantee); then encode the text whole. This lets a
 * corpus of any size be encoded in bounded memory, exactly. */
size_t gt_tokenizer_split_point(const gt_tokenizer *t, const char *text, size_t n, size_t max);

enum {
  GT_TOK_DECODE_SKIP_SPECIAL = 1, /* drop special added tokens */
  GT_TOK_DECODE_REPLACE = 2       /* HF's U+FFFD per byte of an invalid byte-fallback run */
};

/* Decodes ids into a malloc'd byte string (*out, *n_out; NUL-terminated for
 * convenience; the caller frees). An id outside [0, n_ids) is refused. */
gt_rc gt_tokenizer_decode(const gt_tokenizer *t, const int32_t *ids, int64_t n, int flags, char **out,
                          size_t *n_out, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
