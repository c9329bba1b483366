/* The data module's parts, shared by its files:
 *   paths.c   dataset_path: comma lists, directories, globs
 *   gtok.c    the .gtok shard format: write, read whole, header, verify, ranges
 *   jsonl.c   JSON Lines records (plain or gzip), one line at a time
 *   docs.c    records into tokens and a loss mask; the byte tokenizer
 *   store.c   a corpus held in memory or as shards, read by token range
 *   rows.c    rows (windows or whole records) and a row into a batch row
 *   order.c   the epoch order: seeded bijections computed on the fly
 *   pairs.c   preference pairs (use_dpo): records, row pairs, their rows
 *   data.c    gt_data: open, batches, seek, description */
#ifndef GT_DATA_INTERNAL_H
#define GT_DATA_INTERNAL_H

#include <stdint.h>

#include "data/data.h"
#include "data/docs.h"

#define GT__NOLOSS GT_TOK_NOLOSS

/* ---- paths.c ---- */
typedef struct gt__paths {
  char **v;
  int n;
} gt__paths;
/* Expands a comma-separated list of files, directories (their files whose
 * names end in one of exts, in name order) and globs (in name order) into
 * file names. An entry that names nothing is refused naming `key`. */
gt_rc gt__paths_expand(const char *spec, const char *key, const char *const *exts, gt__paths *out, gt_err *err);
void gt__paths_free(gt__paths *p);

/* ---- gtok.c ---- */
#define GT__TOK_HDR 36
typedef struct gt__gtok_hdr {
  uint32_t flags, vocab, crc;
  int64_t n_tokens;
  uint64_t payload;
} gt__gtok_hdr;
/* Reads and checks the header of an open shard (magic, version, sizes). */
gt_rc gt__gtok_header(const char *path, int fd, gt__gtok_hdr *h, gt_err *err);
/* One pass over the payload in bounded memory: inflates it when
 * compressed, checks the crc32 and that every id is below vocab. */
gt_rc gt__gtok_verify(const char *path, int fd, const gt__gtok_hdr *h, int64_t vocab, gt_err *err);
/* Tokens [off, off + n) of an uncompressed shard. */
gt_rc gt__gtok_pread(const char *path, int fd, int64_t off, int64_t n, uint32_t *out, gt_err *err);
/* The whole payload of a compressed shard into out[n_tokens]. */
gt_rc gt__gtok_inflate(const char *path, int fd, const gt__gtok_hdr *h, uint32_t *out, gt_err *err);

/* ---- store.c ---- */
typedef struct gt__shard {
  char *path;
  gt__gtok_hdr h;
  /* the file as it was checked at open: a read finds it the same or stops */
  int64_t size, mtime_ns, ino, dev;
} gt__shard;

/* A corpus: tokens in memory (text, JSON Lines) or shards on disk. Token
 * offsets are global: the shards laid end to end. */
typedef struct gt__store {
  const char *type; /* dataset_type */
  int32_t bos, eos; /* a document starts at <bos> and ends after <eos> */
  uint32_t *tok;    /* memory: ids | GT__NOLOSS, tracked */
  int64_t n_tok;
  gt__shard *shards;
  int n_shards;
  int64_t *shard_tok0; /* [n_shards + 1] global offset of each shard */
  /* records (whole documents) when rows are made of them: rec[i] is the
   * offset of record i, rec[n_rec] = n_tok */
  int64_t *rec;
  int64_t n_rec, n_docs, n_truncated;
  /* pairs: the tokens overlong_records=truncate dropped from each pair
   * (uint32 values), so the split can tell training from eval */
  gt_tokvec pair_cut;
  /* where each file starts (global token offset), for positions in words */
  char **files;
  int64_t *file_tok0;
  int n_files;
  /* reading shards: one open file, up to two inflated compressed shards */
  int fd, fd_shard;
  uint32_t *infl[2];
  int infl_shard[2], infl_next;
  gt_mem *mem;
} gt__store;

gt_rc gt__store_open(gt__store *s, const gt_config *c, const char *path_spec, int eval, gt_mem *mem, gt_err *err);
void gt__store_close(gt__store *s);
/* Tokens [off, off + n) (global offsets; n <= a row) into out. */
gt_rc gt__store_read(gt__store *s, int64_t off, int64_t n, uint32_t *out, gt_err *err);
/* The index of the file holding global token offset off. */
int gt__store_file_at(const gt__store *s, int64_t off);
/* s->files from p (store.c's, shared with pairs.c). */
gt_rc gt__files_from(gt__store *s, const gt__paths *p, gt_err *err);
/* Appends off to s->rec (growing it; *cap its capacity). */
gt_rc gt__rec_push(gt__store *s, int64_t *cap, int64_t off, gt_err *err);

/* ---- rows.c ---- */
/* A run of rows over one contiguous token range [lo, hi) of a store: the
 * range's windows of T+1 tokens, or rows made of whole records. */
typedef struct gt__part {
  int64_t lo, hi;
  int64_t n_rows;
  int64_t *start; /* record rows: each row's first token and length; NULL for windows */
  int32_t *len;
} gt__part;

typedef struct gt__data_src {
  gt__store *store;
  gt__part *parts;
  int n_parts;
  int64_t n_rows, n_tokens; /* n_tokens: those the rows read (a truncated record's first T + 1) */
  /* overlong_records=truncate: the records (pairs) of these rows that were
   * cut, and the tokens cut off them */
  int64_t n_truncated, n_dropped;
  int64_t *part_row0; /* [n_parts + 1] rows before each part, file order */
  /* the order of the epoch last asked for: the parts' visiting order and
   * the rows before each visited part */
  int64_t ord_epoch;
  int *ord_part;
  int64_t *ord_row0;
  gt_mem *mem;
} gt__data_src;

/* The rows of tokens [lo, hi): windows of T+1 (pack_windows), or whole
 * records rec_lo .. rec_hi - 1 of the store, several to a row when packing. */
gt_rc gt__src_add_windows(gt__data_src *src, int64_t lo, int64_t hi, int T, gt_err *err);
gt_rc gt__src_add_records(gt__data_src *src, int64_t rec_lo, int64_t rec_hi, int T, int packing, gt_err *err);
void gt__src_free(gt__data_src *src);
/* Row k (file order) as a token range. For a row of whole records, with
 * lens (T + 1 ints) not NULL, the lengths of the records it holds go to
 * lens and their count is returned; 0 for a window (and for pairs, whose
 * rows index pairs). */
int gt__src_row(const gt__data_src *src, int64_t k, int64_t *off, int64_t *n, int T, int32_t *lens);
/* One batch row from the tokens of a row (n <= T + 1): inputs, targets,
 * positions and segments, as data.h describes. The documents are the
 * n_lens records of lens when n_lens > 0, else told by <bos> and <eos>. */
void gt__fill_row(const uint32_t *s, int64_t n, int T, const int32_t *lens, int n_lens, int32_t bos, int32_t eos,
                  int32_t *in, int32_t *tg, int32_t *pos, int32_t *seg);
/* A row that is not this process's: padding. */
void gt__blank_row(int T, int32_t *in, int32_t *tg, int32_t *pos, int32_t *seg);

/* ---- pairs.c ---- */
/* Preference pairs (use_dpo): the store's records come two by two, pair
 * p's chosen sequence at tokens [rec[2p], rec[2p+1]) and its rejected one
 * at [rec[2p+1], rec[2p+2]), each at most T + 1 tokens (overlong_records
 * applied), <bos> and the prompt out of the loss (GT__NOLOSS), at least one
 * response token in it. n_docs counts the pairs. */
gt_rc gt__open_pairs(gt__store *s, const gt_config *c, const char *spec, const char *key, const gt_encoder *enc,
                     gt_err *err);
/* The row pairs of pairs [p_lo, p_hi) as a part: row j of the part is a
 * row pair holding pairs start[j] .. start[j] + len[j] - 1 (one, or with
 * packing as many consecutive pairs as fit both rows). */
gt_rc gt__src_add_pairs(gt__data_src *src, int64_t p_lo, int64_t p_hi, int T, int packing, gt_err *err);
/* Row pair k (file order) of src into batch rows r (chosen) and r + 1
 * (rejected) of in/tg/pos/seg (each [B*T]); buf holds T + 1 tokens, lens
 * T + 1 ints. */
gt_rc gt__put_pair_rows(gt__data_src *src, int64_t k, int T, int r, uint32_t *buf, int32_t *lens, int32_t *in,
                        int32_t *tg, int32_t *pos, int32_t *seg, gt_err *err);
/* Sequences laid end to end in one batch row: sequence j (lens[j] tokens
 * of s, consecutive) has segment j + 1, positions from 0, targets its next
 * tokens (-1 for its last token and for a token flagged GT__NOLOSS); the
 * row's (T + 1)-th token is only a target; the rest is padding. */
void gt__fill_seqs(const uint32_t *s, const int32_t *lens, int n, int T, int32_t *in, int32_t *tg, int32_t *pos,
                   int32_t *seg);

/* ---- order.c ---- */
/* A seeded bijection of [0, n): a Feistel network on the next power of four
 * with cycle walking; O(1) memory, any element in a few hashes. */
typedef struct gt__perm {
  uint64_t n, mask;
  int half;
  uint64_t key[6];
} gt__perm;
void gt__perm_init(gt__perm *p, uint64_t n, uint64_t seed, uint64_t a, uint64_t b);
uint64_t gt__perm_at(const gt__perm *p, uint64_t i);
/* The order's scratch (per part), once the parts are known. */
gt_rc gt__order_init(gt__data_src *src, gt_err *err);
/* The row (file order) at cursor c of epoch e (0 <= c < src->n_rows). */
int64_t gt__order_row(gt__data_src *src, uint64_t seed, int shuffle, int64_t e, int64_t c);

#endif
