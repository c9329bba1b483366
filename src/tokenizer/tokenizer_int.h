/* Internals of the tokenizer shared by its files: the tables built from
 * tokenizer.json (src/tokenizer/tokenizer_load.c), the BPE model
 * (src/tokenizer/tokenizer_bpe.c), and the pipeline around it
 * (src/tokenizer/tokenizer.c). */
#ifndef GT_TOKENIZER_INT_H
#define GT_TOKENIZER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* A growable id list. */
typedef struct gt__ids {
  int32_t *v;
  int64_t n, cap;
} gt__ids;
int gt__ids_push(gt__ids *a, int32_t id); /* 0 on success, -1 out of memory */

/* A byte string that points into tokenizer-owned memory. */
typedef struct gt__str {
  const char *p;
  size_t n;
} gt__str;

/* Split behaviours (HF SplitDelimiterBehavior). */
enum { GT__SPLIT_REMOVED, GT__SPLIT_ISOLATED, GT__SPLIT_PREV, GT__SPLIT_NEXT, GT__SPLIT_CONTIGUOUS };
enum { GT__NORM_REPLACE, GT__NORM_PREPEND };
enum { GT__DEC_REPLACE, GT__DEC_BYTE_FALLBACK, GT__DEC_FUSE };

typedef struct gt__step {
  int kind;
  gt__str a, b; /* pattern and content (Replace), prepend (Prepend), pattern (Split) */
  int behavior; /* Split */
} gt__step;

#define GT__MAX_STEPS 16

/* Trie of the added tokens, matched on raw bytes. */
typedef struct gt__trie_node {
  int32_t child;   /* first child or -1 */
  int32_t sibling; /* next sibling or -1 */
  int32_t id;      /* token id ending here or -1 */
  unsigned char byte;
} gt__trie_node;

struct gt_tokenizer {
  /* every id's string, in one pool */
  char *pool;
  size_t pool_len, pool_cap;
  int32_t n_ids;
  uint64_t *tok; /* (offset << 24 | length) into pool; length 0 with offset 0 = no token */
  unsigned char *flags; /* per id: 1 added, 2 special, 4 in the model vocabulary */
  int16_t *byte_of;     /* per id: b for "<0xNN>", else -1 */

  /* model vocabulary: open-addressing string -> id */
  int32_t *vhash;
  uint32_t vmask;
  /* merges: (left id, right id) -> rank and merged id */
  uint64_t *mkey; /* left << 32 | right, ~0 = empty */
  int32_t *mrank, *mnew;
  uint32_t mmask;

  int32_t byte_id[256]; /* id of <0xNN>, or -1 */
  int32_t unk_id;       /* -1: none */
  int byte_fallback, fuse_unk, ignore_merges;
  int newline_splits; /* see gt_tokenizer_split_point */

  gt__trie_node *trie;
  int32_t n_trie, cap_trie;
  int32_t root[256]; /* first-level nodes by byte (-1: none) */

  gt__step norm[GT__MAX_STEPS], pre[GT__MAX_STEPS], dec[GT__MAX_STEPS];
  int n_norm, n_pre, n_dec;
  int32_t post_pre[8], post_suf[8];
  int n_post_pre, n_post_suf;
};

/* FNV-1a; the tables are sized to powers of two. */
uint64_t gt__tok_hash(const char *s, size_t n);
/* Length of the valid UTF-8 character at s (n bytes available), or 0 when the
 * bytes there are not one (Rust's rules: no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
int gt__utf8_len(const unsigned char *s, size_t n);
/* Id of a model-vocabulary string, or -1. */
int32_t gt__vocab_get(const gt_tokenizer *t, const char *s, size_t n);
/* Rank and merged id of a pair; returns 0 when there is no such merge. */
int gt__merge_get(const gt_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

/* Scratch reused across the words of one encode call. */
typedef struct gt__bpe_scratch {
  int32_t *id, *prev, *next;
  uint64_t *heap;
  int64_t cap, heap_cap;
} gt__bpe_scratch;
void gt__bpe_scratch_free(gt__bpe_scratch *s);
/* Appends the BPE ids of one pre-tokenized word (n bytes) to out. */
gt_rc gt__bpe_word(const gt_tokenizer *t, const char *w, size_t n, gt__bpe_scratch *s, gt__ids *out,
                   gt_err *err);

#endif
