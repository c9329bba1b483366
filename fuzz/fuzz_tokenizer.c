/* tokenizer.json loading and encoding: the input is
 *   <tokenizer.json text> NUL <text to encode>
 * (no NUL: the whole input is the tokenizer and a fixed text is encoded).
 * A tokenizer that loads encodes the text with and without special tokens,
 * decodes the ids both ways, looks every id up, and asks for a split point.
 * Sizes are capped (64 KiB of JSON, 1 KiB of text): BPE merging is
 * quadratic in a word's length by design, and a slow input is not a bug. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

#define GT_FUZZ_MAX_JSON (64u << 10)
#define GT_FUZZ_MAX_TEXT 1024u

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t jn = nul ? (size_t)(nul - data) : size;
  const char *text = nul ? (const char *)nul + 1 : "Hello  world\n\n<bos>caf\xc3\xa9 \xff";
  size_t tn = nul ? size - jn - 1 : strlen(text);
  if (jn > GT_FUZZ_MAX_JSON || tn > GT_FUZZ_MAX_TEXT) return -1;
  gt_tokenizer *t = NULL;
  gt_err e;
  gt_rc rc = gt_tokenizer_load_json((const char *)data, jn, "fuzz.json", &t, &e);
  gt_fuzz_note("load", rc ? e.msg : "accepted");
  if (!rc) {
    int32_t nid = gt_tokenizer_n_ids(t);
    for (int flags = 0; flags <= GT_TOK_ADD_SPECIAL; flags++) {
      int32_t *ids = NULL;
      int64_t n = 0;
      if (gt_tokenizer_encode(t, text, tn, flags, &ids, &n, &e) == GT_OK) {
        for (int64_t i = 0; i < n; i++) {
          if (ids[i] < 0 || ids[i] >= nid) {
            fprintf(stderr, "fuzz: encode gave id %d outside [0, %d)\n", ids[i], nid);
            abort();
          }
          size_t len;
          const char *tok = gt_tokenizer_token(t, ids[i], &len);
          if (tok) (void)gt_tokenizer_token_id(t, tok, len);
          (void)gt_tokenizer_is_special(t, ids[i]);
        }
        for (int df = 0; df <= (GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE); df++) {
          char *out = NULL;
          size_t on = 0;
          if (gt_tokenizer_decode(t, ids, n, df, &out, &on, &e) == GT_OK) free(out);
        }
      }
      free(ids);
    }
    int32_t bad[2] = {-1, nid};
    char *out = NULL;
    size_t on = 0;
    if (gt_tokenizer_decode(t, bad, 2, 0, &out, &on, &e) == GT_OK) {
      fprintf(stderr, "fuzz: decode accepted ids outside [0, %d)\n", nid);
      abort();
    }
    free(out);
    size_t sp = gt_tokenizer_split_point(t, text, tn, tn);
    if (sp > tn) {
      fprintf(stderr, "fuzz: split point %zu past the text's %zu bytes\n", sp, tn);
      abort();
    }
    (void)gt_tokenizer_token_id(t, "", 0);
  }
  gt_tokenizer_free(t);
  gt_fuzz_check_quiet();
  return 0;
}
