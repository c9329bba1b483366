/* Training data: synthetic ids (as MaxText), a UTF-8 text corpus through the
 * byte tokenizer, or gemtrain token shards.
 *
 * Every source becomes one token stream. Sequences are packed: the stream is
 * cut into windows of T+1 tokens (inputs = first T, targets = last T), no
 * padding. The last eval_split_fraction of the stream is held out for eval.
 * Train windows are visited in a seeded random order, a new permutation per
 * epoch; the position (epoch, cursor) is all the state there is, so a run can
 * be resumed exactly. The global batch is the same whatever the device count. */
#ifndef GEMTRAIN_DATA_H
#define GEMTRAIN_DATA_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "exec/exec.h"

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
 * flagged). A dataset_path directory means all *.gtok files in name order. */
gt_rc gt_tokens_write(const char *path, const uint32_t *ids, int64_t n, uint32_t vocab_size,
                      int compress, gt_err *err);
/* Reads one shard into a malloc'd array. */
gt_rc gt_tokens_read(const char *path, uint32_t **ids, int64_t *n, uint32_t *vocab_size, gt_err *err);

typedef struct gt_data_state {
  int64_t epoch;
  int64_t cursor; /* next window index within the epoch's permutation */
} gt_data_state;

typedef struct gt_data {
  int kind; /* 0 synthetic, 1 stream (text or tokens) */
  int B, T;
  int32_t *stream;       /* whole token stream */
  int stream_tracked;    /* stream came from the tracked allocator */
  int64_t n_stream, n_train; /* train = [0, n_train), eval = the rest */
  int64_t n_train_windows, n_eval_windows;
  int64_t *perm;         /* permutation of train windows for the current epoch */
  uint64_t seed;
  gt_data_state st;
  int64_t eval_cursor;
  int32_t *in, *tg, *pos; /* batch buffers [B*T] */
  gt_mem *mem;
} gt_data;

gt_rc gt_data_open(gt_data *d, const gt_config *cfg, gt_mem *mem, gt_err *err);
void gt_data_close(gt_data *d);
/* Next training batch (global batch; the batch's arrays live in d). */
void gt_data_next_train(gt_data *d, gt_batch *b);
/* Eval batches: gt_data_eval_reset then eval_steps x next (wraps around). */
void gt_data_eval_reset(gt_data *d);
void gt_data_next_eval(gt_data *d, gt_batch *b);
/* Move to a saved position (resume). A position this data source does not
 * have (a negative one, or a cursor past its windows: another dataset or
 * window length) is refused naming the field, its value and the range. */
gt_rc gt_data_seek(gt_data *d, gt_data_state st, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
