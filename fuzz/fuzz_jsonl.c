/* The JSON Lines data source: any file as dataset_path through gt_data_open
 * (zlib's reader, so plain and gzip alike; records rendered as text,
 * prompt/completion or chat documents with their loss masks, or use_dpo
 * preference pairs; rows packed or one record each), then a few training
 * and eval batches, a resume, a partial batch, the description and the
 * position. The input is
 *   <mode byte> <shape byte> <the .jsonl file, plain or gzip>
 *   mode  bits 0-1  0 text ('text'), 1 use_sft prompt,completion, 2 use_sft messages,
 *                   3 use_dpo pairs (prompt/chosen/rejected strings or chosen/rejected messages)
 *         bit 2     packing          bit 3  overlong_records=truncate (else refuse)
 *         bit 4     sft_train_on_completion_only
 *         bit 5     enable_data_shuffling
 *         bit 6     eval_dataset_path = the same file (else eval_split_fraction 0.25)
 *         bit 7     eval_interval=-1 (no eval rows needed)
 *   shape bits 0-2  max_target_length 1, 2, 3, 5, 8, 16, 40, 128 (a chat record needs 128)
 *         bits 3-4  per_device_batch_size 1..4 (pairs: 2, 4, 6, 8)
 *         bits 5-7  data_shuffle_seed
 * Byte tokens, vocab_size 260: every id is checked against the vocabulary
 * the data is cut for. A refusal must come back as a gt_rc with a message;
 * an accepted file's batches must keep data.h's contract ("Sequences"), or
 * the harness traps so libFuzzer reports it. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "config/config.h"
#include "data/data.h"

#define GT_FUZZ_MAX_FILE (64u << 10)
#define GT_FUZZ_VOCAB 260
#define GT_FUZZ_TRAIN_BATCHES 3
#define GT_FUZZ_EVAL_BATCHES 2

/* A contract broken: say which and trap (libFuzzer saves the input). */
#define GT_FUZZ_CHECK(cond, ...)                    \
  do {                                              \
    if (!(cond)) {                                  \
      fprintf(stderr, "fuzz: jsonl: " __VA_ARGS__); \
      fprintf(stderr, " [%s]\n", #cond);            \
      __builtin_trap();                             \
    }                                               \
  } while (0)

/* The keys every input shares, set once through gt_config_set (the keys
 * that vary are then written into the struct, so the fuzzer's comparison
 * tracing sees no key names). */
static gt_config gt_fuzz_base;

/* The harness's own settings: a key it cannot set is a broken harness. */
static void gt_fuzz_set(gt_config *c, const char *key, const char *value) {
  gt_err e;
  if (gt_config_set(c, key, value, "fuzz", &e)) {
    fprintf(stderr, "fuzz: jsonl: cannot set %s=%s: %s\n", key, value, e.msg);
    abort();
  }
}

typedef struct gt_fuzz_mode {
  int kind;   /* 0 text, 1 prompt/completion, 2 chat, 3 preference pairs */
  int masked; /* SFT with completion_only: targets may be -1 inside a document */
  int whole;  /* rows made of whole records */
} gt_fuzz_mode;

/* The config of a mode and a shape byte (the table at the top). */
static void gt_fuzz_config(uint8_t mode, uint8_t shape, gt_config *c, gt_fuzz_mode *m) {
  static const long long Ts[8] = {1, 2, 3, 5, 8, 16, 40, 128};
  static const int seeds[8] = {0, 1, 2, 7, 42, 1234, 99991, 2147483647};
  *c = gt_fuzz_base;
  m->kind = mode & 3;
  c->use_sft = m->kind == 1 || m->kind == 2;
  c->use_dpo = m->kind == 3;
  snprintf(c->train_data_columns, sizeof c->train_data_columns, "%s",
           m->kind == 1   ? "prompt,completion"
           : m->kind == 2 ? "messages"
                          : "text"); /* pairs: the fields prompt, chosen, rejected */
  c->packing = !!(mode & 4);
  snprintf(c->overlong_records, sizeof c->overlong_records, "%s", mode & 8 ? "truncate" : "refuse");
  c->sft_train_on_completion_only = !!(mode & 16);
  c->enable_data_shuffling = !!(mode & 32);
  if (mode & 64) memcpy(c->eval_dataset_path, c->dataset_path, sizeof c->eval_dataset_path);
  c->eval_interval = mode & 128 ? -1 : 10;
  c->max_target_length = Ts[shape & 7];
  c->per_device_batch_size = (1 + ((shape >> 3) & 3)) * (m->kind == 3 ? 2 : 1);
  c->data_shuffle_seed = seeds[shape >> 5];
  m->masked = (m->kind && (mode & 16)) || m->kind == 3;
  m->whole = m->kind || !(mode & 4);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char path[600];
  gt_fuzz_path(path, sizeof path, "input.jsonl");
  gt_fuzz_load_defaults(&gt_fuzz_base);
  gt_fuzz_set(&gt_fuzz_base, "dataset_type", "jsonl");
  gt_fuzz_set(&gt_fuzz_base, "dataset_path", path);
  gt_fuzz_set(&gt_fuzz_base, "vocab_size", "260");
  gt_fuzz_set(&gt_fuzz_base, "tokenizer_path", "");
  gt_fuzz_set(&gt_fuzz_base, "eval_dataset_path", "");
  gt_fuzz_set(&gt_fuzz_base, "eval_split_fraction", "0.25");
  /* every config the harness makes is one a run would accept */
  for (int mode = 0; mode < 256; mode++)
    for (int shape = 0; shape < 256; shape++) {
      gt_config c;
      gt_fuzz_mode m;
      gt_err e;
      gt_fuzz_config((uint8_t)mode, (uint8_t)shape, &c, &m);
      if (gt_config_validate(&c, &e)) {
        fprintf(stderr, "fuzz: jsonl: mode %d shape %d: the harness's config is refused: %s\n", mode, shape, e.msg);
        abort();
      }
    }
  return 0;
}

/* The loss mask of SFT records (docs.h): each run of targets in the loss
 * is what the model generates. Of a prompt/completion record it is one run,
 * the completion and its <eos>; of a chat, each model turn's content and its
 * <end_of_turn>, after the "<start_of_turn>model\n" it is prompted with. A
 * run the row's end cuts short (a truncated record) is not judged. */
static void gt_fuzz_check_mask(const int32_t *in, const int32_t *tg, const int32_t *seg, int T, const gt_fuzz_mode *m,
                               const char *what, int r) {
  static const char eot[] = "<end_of_turn>";
  const int n_eot = (int)sizeof eot - 1;
  int32_t seg_with_run = 0;
  for (int i0 = 0; i0 < T; i0++) {
    if (tg[i0] < 0) continue;
    int i1 = i0;
    while (i1 + 1 < T && tg[i1 + 1] >= 0) i1++;
    int closed = i1 + 1 < T && seg[i1 + 1] == seg[i1];
    if (m->kind == 1) {
      GT_FUZZ_CHECK(seg[i0] != seg_with_run, "%s row %d: a second run in the loss at position %d of segment %d", what,
                    r, i0, seg[i0]);
      seg_with_run = seg[i0];
      if (closed)
        GT_FUZZ_CHECK(tg[i1] == GT_TOK_EOS, "%s row %d position %d: the loss ends at target %d, not the <eos>", what, r,
                      i1, tg[i1]);
    } else {
      GT_FUZZ_CHECK(in[i0] == 4 + '\n',
                    "%s row %d position %d: the loss starts after input %d, not the model turn's "
                    "header",
                    what, r, i0, in[i0]);
      if (closed) {
        GT_FUZZ_CHECK(i1 - i0 + 1 >= n_eot, "%s row %d position %d: a run of %d in the loss", what, r, i0, i1 - i0 + 1);
        for (int k = 0; k < n_eot; k++)
          GT_FUZZ_CHECK(tg[i1 - n_eot + 1 + k] == 4 + (unsigned char)eot[k],
                        "%s row %d position %d: the loss ends with target %d, not <end_of_turn>", what, r, i1,
                        tg[i1 - n_eot + 1 + k]);
      }
    }
    i0 = i1;
  }
}

/* A row pair of preference pairs against data.h's "Preference pairs": the
 * same segments in both rows, each opening with <bos> and holding at least
 * one target (its response); before its first target the pair's prompt,
 * the same in both rows. */
static void gt_fuzz_check_pair(const int32_t *in, const int32_t *tg, const int32_t *seg, int T, const char *what,
                               int r) {
  const int32_t *in2 = in + T, *tg2 = tg + T, *seg2 = seg + T;
  int32_t nseg = 0, nseg2 = 0;
  for (int i = 0; i < T; i++) nseg = seg[i] > nseg ? seg[i] : nseg, nseg2 = seg2[i] > nseg2 ? seg2[i] : nseg2;
  GT_FUZZ_CHECK(nseg == nseg2, "%s rows %d, %d: %d chosen sequences, %d rejected", what, r, r + 1, nseg, nseg2);
  for (int32_t s = 1; s <= nseg; s++) {
    int a = 0, b = 0;
    while (a < T && seg[a] != s) a++;
    while (b < T && seg2[b] != s) b++;
    GT_FUZZ_CHECK(a < T && b < T, "%s rows %d, %d: segment %d missing", what, r, r + 1, s);
    GT_FUZZ_CHECK(in[a] == GT_TOK_BOS && in2[b] == GT_TOK_BOS, "%s rows %d, %d: pair %d opens with %d / %d", what, r,
                  r + 1, s, in[a], in2[b]);
    int fa = -1, fb = -1;
    for (int i = a; i < T && seg[i] == s && fa < 0; i++) fa = tg[i] >= 0 ? i - a : -1;
    for (int i = b; i < T && seg2[i] == s && fb < 0; i++) fb = tg2[i] >= 0 ? i - b : -1;
    GT_FUZZ_CHECK(fa >= 0 && fb >= 0, "%s rows %d, %d: pair %d has no target on the %s side", what, r, r + 1, s,
                  fa < 0 ? "chosen" : "rejected");
    GT_FUZZ_CHECK(fa == fb && !memcmp(in + a, in2 + b, sizeof(int32_t) * (size_t)(fa + 1)),
                  "%s rows %d, %d: pair %d's prompts differ (loss from %d and %d)", what, r, r + 1, s, fa, fb);
  }
}

/* One batch against data.h's "Sequences": ids in range, padding only at a
 * row's end, segments 1, 2, ... changing only after <eos> or at <bos>,
 * positions restarting with each segment, no target across a boundary and
 * every target the next input. */
static void gt_fuzz_check_batch(const gt_batch *b, int B, int T, const gt_fuzz_mode *m, const char *what) {
  GT_FUZZ_CHECK(b->B == B && b->T == T, "%s batch is %d x %d, expected %d x %d", what, b->B, b->T, B, T);
  GT_FUZZ_CHECK(b->inputs && b->targets && b->positions && b->segments, "%s batch lacks an array", what);
  for (int r = 0; r < B; r++) {
    const int32_t *in = b->inputs + (int64_t)r * T, *tg = b->targets + (int64_t)r * T,
                  *pos = b->positions + (int64_t)r * T, *seg = b->segments + (int64_t)r * T;
    for (int i = 0; i < T; i++) {
      GT_FUZZ_CHECK(in[i] >= 0 && in[i] < GT_FUZZ_VOCAB, "%s row %d position %d: input %d", what, r, i, in[i]);
      GT_FUZZ_CHECK(tg[i] == -1 || (tg[i] >= 0 && tg[i] < GT_FUZZ_VOCAB), "%s row %d position %d: target %d", what, r,
                    i, tg[i]);
      GT_FUZZ_CHECK(pos[i] >= 0 && pos[i] < T, "%s row %d position %d: position %d", what, r, i, pos[i]);
      GT_FUZZ_CHECK(seg[i] >= 0, "%s row %d position %d: segment %d", what, r, i, seg[i]);
      if (seg[i] == 0) { /* padding, and only padding after it */
        GT_FUZZ_CHECK(in[i] == GT_TOK_PAD && tg[i] == -1 && pos[i] == 0, "%s row %d position %d: padding is %d/%d/%d",
                      what, r, i, in[i], tg[i], pos[i]);
        GT_FUZZ_CHECK(i + 1 == T || seg[i + 1] == 0, "%s row %d position %d: a segment after padding", what, r, i);
        continue;
      }
      if (i == 0)
        GT_FUZZ_CHECK(seg[0] == 1 && pos[0] == 0, "%s row %d starts at segment %d position %d", what, r, seg[0],
                      pos[0]);
      /* what the rows are cut from: <eos> ends a document, <bos> opens one */
      GT_FUZZ_CHECK(in[i] != GT_TOK_PAD && in[i] != GT_TOK_UNK, "%s row %d position %d: input %d inside a document",
                    what, r, i, in[i]);
      GT_FUZZ_CHECK(tg[i] != GT_TOK_BOS && tg[i] != GT_TOK_PAD && tg[i] != GT_TOK_UNK,
                    "%s row %d position %d: target %d", what, r, i, tg[i]);
      if (in[i] == GT_TOK_EOS)
        GT_FUZZ_CHECK(tg[i] == -1, "%s row %d position %d: <eos> predicts %d", what, r, i, tg[i]);
      if (in[i] == GT_TOK_BOS)
        GT_FUZZ_CHECK(pos[i] == 0, "%s row %d position %d: <bos> at position %d", what, r, i, pos[i]);
      int last = i + 1 == T || seg[i + 1] == 0; /* the row's last real input */
      if (!last) {
        int same = seg[i + 1] == seg[i];
        GT_FUZZ_CHECK(same || seg[i + 1] == seg[i] + 1, "%s row %d position %d: segment %d then %d", what, r, i, seg[i],
                      seg[i + 1]);
        GT_FUZZ_CHECK(same ? pos[i + 1] == pos[i] + 1 : pos[i + 1] == 0,
                      "%s row %d position %d: segment %d position %d then segment %d position %d", what, r, i, seg[i],
                      pos[i], seg[i + 1], pos[i + 1]);
        GT_FUZZ_CHECK(same || in[i] == GT_TOK_EOS || in[i + 1] == GT_TOK_BOS,
                      "%s row %d position %d: a new segment after %d, at %d", what, r, i, in[i], in[i + 1]);
        GT_FUZZ_CHECK(same || tg[i] == -1, "%s row %d position %d: target %d crosses into segment %d", what, r, i,
                      tg[i], seg[i + 1]);
        GT_FUZZ_CHECK(tg[i] == -1 || tg[i] == in[i + 1], "%s row %d position %d: target %d, next input %d", what, r, i,
                      tg[i], in[i + 1]);
        /* without a loss mask only a boundary takes a target away */
        if (!m->masked)
          GT_FUZZ_CHECK(tg[i] >= 0 || !same || in[i] == GT_TOK_EOS,
                        "%s row %d position %d: input %d has no target inside a document", what, r, i, in[i]);
      }
    }
    /* a row of whole records starts a record: <bos> at position 0 */
    if (m->whole && seg[0] != 0)
      GT_FUZZ_CHECK(in[0] == GT_TOK_BOS, "%s row %d: a row of whole records starts with %d", what, r, in[0]);
    if (m->kind == 3 && r % 2 == 0) GT_FUZZ_CHECK(r + 1 < B, "%s: an odd row count %d", what, B);
    if (m->kind == 3 && r % 2 == 1) gt_fuzz_check_pair(in - T, tg - T, seg - T, T, what, r - 1);
    else if (m->masked && m->kind != 3) gt_fuzz_check_mask(in, tg, seg, T, m, what, r);
  }
}

typedef struct gt_fuzz_copy {
  int32_t *in, *tg, *pos, *seg;
} gt_fuzz_copy;

static void gt_fuzz_save(gt_fuzz_copy *c, const gt_batch *b) {
  size_t n = (size_t)b->B * (size_t)b->T * sizeof(int32_t);
  c->in = malloc(n), c->tg = malloc(n), c->pos = malloc(n), c->seg = malloc(n);
  if (!c->in || !c->tg || !c->pos || !c->seg) abort();
  memcpy(c->in, b->inputs, n), memcpy(c->tg, b->targets, n), memcpy(c->pos, b->positions, n),
      memcpy(c->seg, b->segments, n);
}

static void gt_fuzz_free(gt_fuzz_copy *c) { free(c->in), free(c->tg), free(c->pos), free(c->seg); }

/* Rows [r0, r1) of b equal those of a saved batch. */
static int gt_fuzz_same_rows(const gt_fuzz_copy *c, const gt_batch *b, int r0, int r1) {
  size_t at = (size_t)r0 * (size_t)b->T, n = (size_t)(r1 - r0) * (size_t)b->T * sizeof(int32_t);
  return !memcmp(c->in + at, b->inputs + at, n) && !memcmp(c->tg + at, b->targets + at, n) &&
         !memcmp(c->pos + at, b->positions + at, n) && !memcmp(c->seg + at, b->segments + at, n);
}

static void gt_fuzz_use(gt_data *d, const gt_fuzz_mode *m, int B, int T) {
  gt_err e;
  gt_batch b;
  const char *desc = gt_data_describe(d);
  GT_FUZZ_CHECK(desc && desc[0], "an open data source without a description");
  GT_FUZZ_CHECK(d->n_train_rows >= B, "open with %lld training rows for a batch of %d", (long long)d->n_train_rows, B);
  char where[512];
  gt_fuzz_copy first = {0};
  gt_data_state s1 = {0, 0};
  for (int k = 0; k < GT_FUZZ_TRAIN_BATCHES; k++) {
    if (k == 1) s1 = d->st;
    e.msg[0] = '\0';
    gt_rc rc = gt_data_read_train(d, &b, &e);
    /* the corpus is in memory: nothing can fail to be read */
    GT_FUZZ_CHECK(rc == GT_OK, "training batch %d refused: %s", k, e.msg);
    gt_fuzz_check_batch(&b, B, T, m, "training");
    if (k == 1) gt_fuzz_save(&first, &b);
    gt_data_position(d, d->st, where, sizeof where); /* the resume line's words: its reads are what is checked */
  }
  /* a resume reads exactly what was read: the whole batch, then a process's
   * share of it (the rows it does not fill are padding) */
  e.msg[0] = '\0';
  GT_FUZZ_CHECK(gt_data_seek(d, s1, &e) == GT_OK, "seek to a position it gave refused: %s", e.msg);
  GT_FUZZ_CHECK(gt_data_read_train(d, &b, &e) == GT_OK, "training batch after a seek refused: %s", e.msg);
  GT_FUZZ_CHECK(gt_fuzz_same_rows(&first, &b, 0, B), "a resumed batch differs (epoch %lld, row %lld)",
                (long long)s1.epoch, (long long)s1.cursor);
  const int skip = m->kind == 3 ? 2 : 1; /* pairs: a process fills whole row pairs */
  if (B > skip) {
    GT_FUZZ_CHECK(gt_data_seek(d, s1, &e) == GT_OK, "seek refused: %s", e.msg);
    gt_data_set_rows(d, skip, B - skip);
    GT_FUZZ_CHECK(gt_data_read_train(d, &b, &e) == GT_OK, "a partial training batch refused: %s", e.msg);
    gt_fuzz_check_batch(&b, B, T, m, "partial");
    GT_FUZZ_CHECK(gt_fuzz_same_rows(&first, &b, skip, B), "a process's rows differ from the whole batch's");
    for (int i = 0; i < skip * T; i++)
      GT_FUZZ_CHECK(b.segments[i] == 0, "the rows another process fills are not padding (position %d)", i);
    gt_data_set_rows(d, 0, B);
  }
  gt_fuzz_free(&first);
  /* positions this data does not have are refused with a message */
  gt_data_state past = {0, d->n_train_rows + 1}, neg = {-1, 0}, end = {2, d->n_train_rows};
  e.msg[0] = '\0';
  GT_FUZZ_CHECK(gt_data_seek(d, past, &e) != GT_OK && e.msg[0], "a cursor past the rows accepted");
  e.msg[0] = '\0';
  GT_FUZZ_CHECK(gt_data_seek(d, neg, &e) != GT_OK && e.msg[0], "a negative epoch accepted");
  GT_FUZZ_CHECK(gt_data_seek(d, end, &e) == GT_OK, "the end of an epoch refused: %s", e.msg);
  gt_data_position(d, end, where, sizeof where);
  GT_FUZZ_CHECK(gt_data_read_train(d, &b, &e) == GT_OK, "the next epoch's first batch refused: %s", e.msg);
  gt_fuzz_check_batch(&b, B, T, m, "next epoch's");
  GT_FUZZ_CHECK(d->st.epoch == 3, "the batch after an epoch's end is in epoch %lld", (long long)d->st.epoch);

  /* eval: from the start each time, the same batches */
  gt_fuzz_copy ev = {0};
  for (int pass = 0; pass < 2; pass++) {
    gt_data_eval_reset(d);
    for (int k = 0; k < GT_FUZZ_EVAL_BATCHES; k++) {
      e.msg[0] = '\0';
      GT_FUZZ_CHECK(gt_data_read_eval(d, &b, &e) == GT_OK, "eval batch %d refused: %s", k, e.msg);
      gt_fuzz_check_batch(&b, B, T, m, "eval");
      if (k == 0 && pass == 0) gt_fuzz_save(&ev, &b);
      if (k == 0 && pass == 1) GT_FUZZ_CHECK(gt_fuzz_same_rows(&ev, &b, 0, B), "eval batches differ after a reset");
    }
  }
  gt_fuzz_free(&ev);
  if (!gt_data_has_eval(d)) /* then every eval row is padding */
    for (int64_t i = 0; i < (int64_t)B * T; i++)
      GT_FUZZ_CHECK(b.segments[i] == 0 && b.targets[i] == -1, "eval rows without eval data");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size - 2 > GT_FUZZ_MAX_FILE) return -1;
  uint8_t mode = data[0], shape = data[1];
  gt_fuzz_write("input.jsonl", data + 2, size - 2);
  gt_fuzz_mode m;
  gt_config c;
  gt_fuzz_config(mode, shape, &c, &m);
  gt_err e;
  int B = (int)gt_config_global_batch(&c), T = (int)c.max_target_length;

  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  e.msg[0] = '\0';
  gt_rc rc = gt_data_open(&d, &c, &mem, &e);
  gt_fuzz_note("open", rc ? e.msg : "accepted");
  if (rc) {
    GT_FUZZ_CHECK(e.msg[0], "refused (%s) without a message", gt_rc_name(rc));
    GT_FUZZ_CHECK(!d.store && !d.in && !d.desc, "a refused open left memory behind");
  } else {
    gt_fuzz_note("data", gt_data_describe(&d));
    gt_fuzz_use(&d, &m, B, T);
    gt_data_close(&d);
  }
  GT_FUZZ_CHECK(mem.total_cur == 0 && mem.bad_frees == 0, "tracked memory after close: %lld bytes, %lld bad frees",
                (long long)mem.total_cur, (long long)mem.bad_frees);
  gt_fuzz_check_quiet();
  return 0;
}
