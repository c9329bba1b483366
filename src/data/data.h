/* Training data: synthetic ids (as MaxText), one UTF-8 text file, gemtrain
 * token shards (.gtok, streamed) or JSON Lines records (text documents, or
 * supervised fine-tuning examples with a loss mask). docs/data.md is the
 * user's account; this is the contract.
 *
 * Sequences. A batch row is cut from a "row" of at most T+1 tokens: its
 * inputs are the first T, its targets the last T (non-overlapping windows of
 * T+1 tokens: no token is read twice). Within a row of whole records, each
 * record is a document; within a window of text laid end to end, a
 * document ends after <eos> and a new one starts at <bos>. Each token gets
 * the segment id of its document piece (1, 2, ... along the row) and its
 * position within that piece, so attention stays inside a document and RoPE restarts; a target
 * that would cross into the next document, or that the loss mask excludes
 * (an SFT prompt), is -1. Padding (rows shorter than T+1) has input 0
 * (<pad>), target -1, position 0 and segment 0.
 *
 * Rows. packing=true over text documents: the documents are concatenated
 * and cut into rows of T+1 tokens (a long document spans rows, each piece
 * restarting at position 0). Records that must stay whole (use_sft, or
 * packing=false) make rows of their own: with packing, consecutive records
 * share a row while they fit; a record longer than T+1 tokens is refused or
 * truncated (overlong_records).
 *
 * Order. The training rows form "parts" (a token shard's rows, or all the
 * rows of a text or JSON Lines corpus). With enable_data_shuffling, each
 * epoch visits the parts in a seeded random order and the rows of each part
 * in a seeded random order (a bijection computed on the fly, no table), so
 * at most one or two shards are in use at a time; without it, file order.
 * The position (epoch, cursor) is all the state there is: the order is a
 * function of (data_shuffle_seed, epoch), so a run resumes bit-exactly. The
 * global batch is the same whatever the device count or process; a process
 * may fill only some rows of it (gt_data_set_rows).
 *
 * Preference pairs (use_dpo, JSON Lines only; docs/preference.md). Rows
 * come in pairs: row 2i holds chosen sequences and row 2i + 1 the rejected
 * sequences of the same pairs. packing=false: one pair per row pair, both
 * sequences segment 1. packing=true: consecutive pairs share a row pair
 * while both their sequences fit; pair j of the row pair has its chosen
 * sequence in row 2i and its rejected one in row 2i + 1 under the same
 * segment id s = j + 1 (1, 2, ... along both rows), so (row 2i, segment s)
 * and (row 2i + 1, segment s) are one pair (model/pref_pairs.h lists them).
 * Each sequence starts at position 0 with <bos>; the prompt's targets are
 * -1, the response's the next tokens (the loss covers only response
 * tokens; every sequence has at least one); a sequence's last token has
 * target -1 and the row's (T + 1)-th token is only a target, as above;
 * padding as above. A pair's two sequences are in different rows, so they
 * never attend to each other. per_device_batch_size must be even, so a
 * device, the rows a process fills (gt_data_set_rows) and DiLoCo's replica
 * rows hold whole row pairs (a read with an odd row0 or nrows is refused).
 * The order visits row pairs (shuffled as rows are); the cursor counts
 * rows and is always even; eval batches have the same layout.
 *
 * Memory. Shards are read with pread (uncompressed) or inflated one at a
 * time (zlib-compressed: at most two inflated shards are kept), so resident
 * memory is bounded by the shard size, not the corpus. Text and JSON Lines
 * are tokenized when opened and held in memory (tracked, category data): for
 * a corpus larger than memory, `gemtrain tokenize` it into shards. */
#ifndef GEMTRAIN_DATA_H
#define GEMTRAIN_DATA_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "model/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- byte tokenizer ----
 * Gemma's special ids: <pad> = 0, <eos> = 1, <bos> = 2, <unk> = 3; byte b is
 * id 4 + b, so the vocabulary needs at least 260 entries. */
#define GT_TOK_PAD 0
#define GT_TOK_EOS 1
#define GT_TOK_BOS 2
#define GT_TOK_UNK 3
#define GT_BYTE_VOCAB 260
/* Encodes n bytes into ids (capacity >= n); returns the count. */
int64_t gt_bytes_encode(const unsigned char *s, int64_t n, int32_t *ids);
/* Decodes ids to bytes (special ids are dropped); returns the byte count. */
int64_t gt_bytes_decode(const int32_t *ids, int64_t n, unsigned char *out);

/* ---- token shards (.gtok) ----
 * little-endian: "GTOK" | u32 version (1) | u32 flags (bit 0: zlib) |
 * u32 vocab_size | u64 n_tokens | u64 payload_bytes | u32 crc32 of the
 * uncompressed payload | payload = n_tokens uint32 ids (zlib-deflated when
 * flagged). */
gt_rc gt_tokens_write(const char *path, const uint32_t *ids, int64_t n, uint32_t vocab_size,
                      int compress, gt_err *err);
/* Reads one shard into a malloc'd array. */
gt_rc gt_tokens_read(const char *path, uint32_t **ids, int64_t *n, uint32_t *vocab_size, gt_err *err);

/* Where the next training batch comes from: all a resume needs, since the
 * order of every epoch is a function of data_shuffle_seed and the epoch. */
typedef struct gt_data_state {
  int64_t epoch;
  int64_t cursor; /* the next row of the epoch's order */
} gt_data_state;

struct gt__store;
struct gt__data_src;

typedef struct gt_data {
  int kind; /* 0 synthetic, 1 a corpus */
  int B, T;
  int64_t n_stream;         /* tokens of the corpus: training source and eval (held-out or eval_dataset_path) */
  int64_t n_train;          /* of which the training rows' source (a record overlong_records=truncate cuts
                               counts its first T + 1 tokens) */
  int64_t n_train_rows, n_eval_rows;
  gt_data_state st;
  int64_t eval_cursor;
  int row0, nrows;          /* the rows of each batch this process fills (gt_data_set_rows) */
  /* DiLoCo (enable_diloco): each batch is replica `rep`'s rows [rep x B,
   * (rep + 1) x B) of a batch of nrep x B rows over every replica, so the
   * replicas read different data and together what one mesh of all their
   * devices would (nrep 1: the whole batch) */
  int rep, nrep;
  int32_t *in, *tg, *pos, *seg; /* batch buffers [B*T] */
  uint32_t *row;            /* one row's tokens [T+1] */
  int pairs;                /* use_dpo: rows come in pairs (chosen, rejected); cursors move by 2 */
  int32_t *lens;            /* the records (or pairs' sequences) of one row, their lengths [T+1] */
  struct gt__store *store, *eval_store;
  struct gt__data_src *train, *eval;
  uint64_t seed;
  int shuffle;
  int64_t vocab_synthetic;
  char *desc;               /* gt_data_describe */
  int failed;               /* a read failed in gt_data_next_* (see there) */
  gt_err fail;
  gt_mem *mem;
} gt_data;

gt_rc gt_data_open(gt_data *d, const gt_config *cfg, gt_mem *mem, gt_err *err);
/* For scoring a model alone (gemtrain eval): opens only the rows it scores,
 * as d's eval rows (gt_data_eval_reset, gt_data_read_eval): with whole,
 * every row of dataset_path; else every row of eval_dataset_path when it is
 * set (dataset_path is then not opened at all), else the held-out last
 * eval_split_fraction of dataset_path, as training holds it out. There are
 * no training rows, and training's checks are not made: neither at least
 * one batch of training rows (a short eval batch is padded) nor that the
 * eval files are no training files (nothing is trained on); at least one
 * eval row is required, whatever eval_interval says. */
gt_rc gt_data_open_eval(gt_data *d, const gt_config *cfg, int whole, gt_mem *mem, gt_err *err);
void gt_data_close(gt_data *d);

/* From now on fill only rows [row0, row0 + nrows) of each batch (the rows
 * this process computes): the other rows get input 0, target -1 (out of the
 * loss), position 0, segment 0. Which data goes into each row does not
 * change, and the rows not filled are not read. Out-of-range values are
 * clamped to the batch. */
void gt_data_set_rows(gt_data *d, int row0, int nrows);

/* The next training batch (the global batch; its arrays live in d and are
 * overwritten by the next call). Fails only when a shard cannot be read
 * (an I/O error, or a file changed since it was opened). */
gt_rc gt_data_read_train(gt_data *d, gt_batch *b, gt_err *err);
/* Eval batches: gt_data_eval_reset then eval_steps x read (wraps around). */
void gt_data_eval_reset(gt_data *d);
gt_rc gt_data_read_eval(gt_data *d, gt_batch *b, gt_err *err);
/* The same without a result: a failed read leaves every target of the
 * batch masked and sets d->failed and d->fail (prefer the read_ forms). */
void gt_data_next_train(gt_data *d, gt_batch *b);
void gt_data_next_eval(gt_data *d, gt_batch *b);

/* Move to a saved position (resume). A position this data source does not
 * have (a negative one, or a cursor past its rows: another dataset,
 * sequence length or packing) is refused naming the field, its value and
 * the range. */
gt_rc gt_data_seek(gt_data *d, gt_data_state st, gt_err *err);

/* What the trainer will read, for the start of a run: the corpus and its
 * split, then how sequences are made and visited (lines separated by '\n',
 * no final newline). */
const char *gt_data_describe(const gt_data *d);
/* A saved position in words, for the resume line: "epoch 3, row 17 of 449
 * (next: 'shard-00002.gtok')". */
void gt_data_position(const gt_data *d, gt_data_state st, char *buf, size_t n);
/* 1 when there is eval data (not synthetic). */
int gt_data_has_eval(const gt_data *d);

#ifdef __cplusplus
}
#endif
#endif
