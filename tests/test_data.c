/* Data: byte tokens, token shards (format, compression, corruption), rows of
 * T+1 tokens that do not overlap, documents packed with segment ids,
 * positions and targets that stay inside a document, SFT loss masks,
 * JSON Lines (plain, gzip, several files, globs, directories) and each
 * malformed record refused with its file and line, the seeded epoch order
 * and file order, resume positions, a process's rows of the global batch,
 * the held-out split, synthetic data. */
#define _GNU_SOURCE
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "config/config.h"
#include "data/data.h"
#include "data/data_internal.h"
#include "data/docs.h"
#include "exec/exec.h"
#include "gt_testutil.h"

static char *tmp_path(const char *name) {
  char *dir = gt_test_mkdtemp("data"), *p = gt_test_path(dir, name);
  free(dir);
  return p;
}

/* A config from NULL-terminated key=value overrides. */
static void cfg(gt_config *c, ...) {
  const char *ov[64];
  int n = 0;
  va_list ap;
  va_start(ap, c);
  for (const char *s; (s = va_arg(ap, const char *)) && n < 64;) ov[n++] = s;
  va_end(ap);
  gt_test_config(c, n, ov);
}

static void open_ok(gt_data *d, const gt_config *c, gt_mem *mem) {
  gt_err e;
  ck_assert_msg(gt_data_open(d, c, mem, &e) == GT_OK, "%s", e.msg);
}

static gt_batch train_batch(gt_data *d) {
  gt_batch b;
  gt_err e;
  ck_assert_msg(gt_data_read_train(d, &b, &e) == GT_OK, "%s", e.msg);
  return b;
}

START_TEST(test_bytes_round_trip) {
  const char *s = "In the beginning\n\xe2\x9c\x9d \xff\x00z";
  int64_t n = 24;
  int32_t ids[32];
  unsigned char back[32];
  ck_assert_int_eq(gt_bytes_encode((const unsigned char *)s, n, ids), n);
  ck_assert_int_eq(ids[0], 4 + 'I');
  ck_assert_int_eq(ids[21], 4 + 0xff);
  ck_assert_int_eq(ids[22], 4);
  int32_t with_special[40];
  with_special[0] = GT_TOK_BOS;
  memcpy(with_special + 1, ids, sizeof(int32_t) * n);
  with_special[n + 1] = GT_TOK_EOS;
  ck_assert_int_eq(gt_bytes_decode(with_special, n + 2, back), n);
  ck_assert(memcmp(back, s, (size_t)n) == 0);
}
END_TEST

START_TEST(test_shard_round_trip) {
  enum { N = 10007 };
  uint32_t *ids = malloc(4 * N);
  for (int i = 0; i < N; i++) ids[i] = (uint32_t)((i * 7919) % 262144);
  for (int z = 0; z < 2; z++) {
    char *p = tmp_path("a.gtok");
    gt_err e;
    ck_assert(gt_tokens_write(p, ids, N, 262144, z, &e) == GT_OK);
    uint32_t *back = NULL, vocab = 0;
    int64_t n = 0;
    ck_assert_msg(gt_tokens_read(p, &back, &n, &vocab, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(n, N);
    ck_assert_int_eq(vocab, 262144);
    ck_assert(memcmp(back, ids, 4 * N) == 0);
    long len = 0;
    char *raw = gt_test_read_file(p, &len);
    ck_assert(memcmp(raw, "GTOK", 4) == 0);
    if (!z) ck_assert_int_eq(len, 36 + 4 * N);
    else ck_assert_int_lt(len, 36 + 4 * N);
    free(raw);
    free(back);
    free(p);
  }
  free(ids);
}
END_TEST

static void expect_bad(const char *p, const char *needle) {
  uint32_t *ids = NULL, vocab;
  int64_t n;
  gt_err e;
  gt_rc rc = gt_tokens_read(p, &ids, &n, &vocab, &e);
  ck_assert_int_ne(rc, GT_OK);
  ck_assert_msg(strstr(e.msg, needle) && strstr(e.msg, p), "'%s' lacks '%s'", e.msg, needle);
}

START_TEST(test_shard_corruption) {
  uint32_t ids[100];
  for (int i = 0; i < 100; i++) ids[i] = (uint32_t)i;
  char *p = tmp_path("b.gtok");
  gt_err e;
  for (int z = 0; z < 2; z++) {
    ck_assert(gt_tokens_write(p, ids, 100, 1000, z, &e) == GT_OK);
    /* flip one payload byte */
    ck_assert_int_eq(gt_test_system("printf '\\x55' | dd of=%s bs=1 seek=60 conv=notrunc status=none", p), 0);
    expect_bad(p, z ? "" : "crc32");
  }
  ck_assert(gt_tokens_write(p, ids, 100, 1000, 0, &e) == GT_OK);
  ck_assert_int_eq(gt_test_system("truncate -s 200 %s", p), 0);
  expect_bad(p, "file has 200 bytes");
  ck_assert_int_eq(gt_test_system("truncate -s 10 %s", p), 0);
  expect_bad(p, "shorter than");
  ck_assert(gt_tokens_write(p, ids, 100, 1000, 0, &e) == GT_OK);
  ck_assert_int_eq(gt_test_system("printf 'XTOK' | dd of=%s bs=1 conv=notrunc status=none", p), 0);
  expect_bad(p, "magic");
  free(p);
}
END_TEST

/* A shard of ids base, base + 1, ... (no <bos> or <eos> among them). */
static char *counting_shard(const char *name, int n, int base, int compress) {
  uint32_t *ids = malloc(4 * (size_t)n);
  for (int i = 0; i < n; i++) ids[i] = (uint32_t)(base + i);
  char *p = tmp_path(name);
  gt_err e;
  ck_assert_msg(gt_tokens_write(p, ids, n, 8192, compress, &e) == GT_OK, "%s", e.msg);
  free(ids);
  return p;
}

START_TEST(test_windows_order_and_split) {
  /* ids 10, 11, ...: every row is T+1 consecutive tokens, rows do not
   * overlap, train rows never reach the eval tail */
  char *p = counting_shard("c.gtok", 5000, 10, 1);
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp, "max_target_length=10",
      "per_device_batch_size=3", "eval_split_fraction=0.1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train, 4500);
  ck_assert_int_eq(d.n_train_rows, 409); /* 4500 / 11 */
  ck_assert_int_eq(d.n_eval_rows, 45);
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "each row is the next 11 tokens (T + 1)"));
  int *seen = calloc(409, sizeof(int));
  for (int s = 0; s < 409 / 3; s++) { /* one epoch visits each row once */
    gt_batch b = train_batch(&d);
    for (int r = 0; r < 3; r++) {
      int32_t start = b.inputs[r * 10] - 10;
      ck_assert_int_eq(start % 11, 0);
      ck_assert_int_lt(start + 11, 4500 + 1);
      seen[start / 11]++;
      for (int t = 0; t < 10; t++) {
        ck_assert_int_eq(b.inputs[r * 10 + t], 10 + start + t);
        ck_assert_int_eq(b.targets[r * 10 + t], 10 + start + t + 1);
        ck_assert_int_eq(b.positions[r * 10 + t], t);
        ck_assert_int_eq(b.segments[r * 10 + t], 1);
      }
    }
  }
  int distinct = 0;
  for (int w = 0; w < 409; w++) {
    ck_assert_int_le(seen[w], 1);
    distinct += seen[w];
  }
  ck_assert_int_eq(distinct, 408);
  /* eval comes from the tail and restarts at reset */
  gt_batch eb;
  gt_err e;
  gt_data_eval_reset(&d);
  ck_assert(gt_data_read_eval(&d, &eb, &e) == GT_OK);
  ck_assert_int_eq(eb.inputs[0], 10 + 4500);
  ck_assert_int_eq(eb.inputs[10], 10 + 4511);
  gt_data_eval_reset(&d);
  ck_assert(gt_data_read_eval(&d, &eb, &e) == GT_OK);
  ck_assert_int_eq(eb.inputs[0], 10 + 4500);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(seen);
  free(p);
}
END_TEST

/* A saved position outside the data is refused naming the field, its value
 * and the range, instead of reading past the row order; the
 * position just after an epoch's last row is a real one. */
START_TEST(test_seek_refuses_bad_position) {
  char *p = counting_shard("s.gtok", 5000, 10, 0);
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp, "max_target_length=10",
      "per_device_batch_size=3", "eval_split_fraction=0.1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train_rows, 409);
  static const struct {
    gt_data_state st;
    const char *want;
  } bad[] = {
      {{0, -1}, "data: saved data_cursor = -1 is outside [0, 409], the training rows of an epoch"},
      {{0, 410}, "data: saved data_cursor = 410 is outside [0, 409], the training rows of an epoch"},
      {{-1, 0}, "data: saved data_epoch = -1 is outside [0, 9223372036854775806]"},
      {{INT64_MAX, 0}, "data: saved data_epoch = 9223372036854775807 is outside [0, 9223372036854775806]"},
  };
  gt_err e;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(gt_data_seek(&d, bad[i].st, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, bad[i].want), "'%s' lacks '%s'", e.msg, bad[i].want);
  }
  ck_assert_msg(gt_data_seek(&d, (gt_data_state){2, 409}, &e) == GT_OK, "%s", e.msg);
  char pos[300];
  gt_data_position(&d, d.st, pos, sizeof pos);
  ck_assert_msg(strstr(pos, "epoch 2, row 409 of 409 (next: '") && strstr(pos, "s.gtok', token "), "%s", pos);
  train_batch(&d);
  ck_assert_int_eq(d.st.epoch, 3);
  ck_assert_int_eq(d.st.cursor, 3);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
}
END_TEST

/* The refusals of a too-small corpus name its sizes (they used to be
 * formatted after the data source was cleared: "fewer than one batch of 0 x 1"). */
START_TEST(test_too_small_names_sizes) {
  char *p = tmp_path("small.txt");
  gt_test_write_text(p, "In the beginning God created");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=text", dp, "max_target_length=10", "per_device_batch_size=4",
      "eval_split_fraction=0.1", "eval_interval=-1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  /* 28 bytes and <bos>: 29 tokens, 2 held out, 27 for training: 2 rows of 11 */
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "makes 2 training rows of 11 tokens (max_target_length + 1) of its 27 training tokens, "
                              "fewer than one batch of 4"),
                "%s", e.msg);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  /* enough to train on, too little held out for one eval sequence */
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 20; i++) fputs("In the beginning God created ", f);
  fclose(f);
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=text", dp, "max_target_length=10", "per_device_batch_size=4",
      "eval_split_fraction=0.01", "eval_interval=5", NULL);
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "leaves 5 tokens, fewer than one eval sequence of 11"), "%s", e.msg);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
}
END_TEST

/* Shards whose tokens would fill a batch but each shorter than a row (a
 * row never spans two shards): the refusal gives the rows, not the
 * tokens, and says why there are none. */
START_TEST(test_short_shards_make_no_row) {
  char *a = counting_shard("short_a.gtok", 10, 10, 0), *b = counting_shard("short_b.gtok", 10, 40, 1),
       *c3 = counting_shard("short_c.gtok", 12, 70, 0);
  char dp[2000];
  snprintf(dp, sizeof dp, "dataset_path=%s,%s,%s", a, b, c3);
  gt_config c;
  /* 32 tokens, more than one batch of 2 x 11, in shards of 10, 10 and 12:
   * one row (the 12-token shard's) */
  cfg(&c, "model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp, "max_target_length=10",
      "per_device_batch_size=2", "eval_split_fraction=0", "eval_interval=-1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "makes 1 training rows, fewer than one batch of 2: a row is 11 tokens "
                              "(max_target_length + 1) of one shard, and each shard shorter than max_target_length + "
                              "1 tokens makes no row (2 of the 3 shards with training tokens make none; 32 training "
                              "tokens)"),
                "%s", e.msg);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(a), free(b), free(c3);
}
END_TEST

START_TEST(test_synthetic_fixed_batch) {
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=synthetic", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  gt_batch a = train_batch(&d);
  int n = a.B * a.T;
  int32_t *keep = malloc(sizeof(int32_t) * n);
  memcpy(keep, a.inputs, sizeof(int32_t) * n);
  gt_batch b = train_batch(&d);
  ck_assert(memcmp(keep, b.inputs, sizeof(int32_t) * n) == 0); /* reused every step */
  ck_assert_ptr_null(b.segments);
  int lo = 1 << 30, hi = -1;
  for (int i = 0; i < n; i++) {
    lo = a.inputs[i] < lo ? a.inputs[i] : lo;
    hi = a.inputs[i] > hi ? a.inputs[i] : hi;
    if (i % a.T != a.T - 1) ck_assert_int_eq(a.targets[i], a.inputs[i + 1]);
  }
  ck_assert(lo >= 0 && hi < c.vocab_size && hi - lo > c.vocab_size / 2);
  free(keep);
  gt_data_close(&d);
}
END_TEST

/* Byte tokens are for a model of the byte vocabulary: in a larger one (a
 * Gemma model whose tokenizer_path is not set) every byte id is in range
 * and would train without a word, so text and JSON Lines without a
 * tokenizer are refused for any vocab_size but 260, naming both keys. */
START_TEST(test_text_needs_byte_vocab) {
  char *p = tmp_path("t.txt"), *j = tmp_path("t.jsonl");
  FILE *f = fopen(p, "w"), *g = fopen(j, "w");
  for (int i = 0; i < 2000; i++) fputs("In the beginning. ", f);
  for (int i = 0; i < 200; i++) fputs("{\"text\": \"In the beginning.\"}\n", g);
  fclose(f), fclose(g);
  char dp[600], jp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  snprintf(jp, sizeof jp, "dataset_path=%s", j);
  static const char *const vocab[] = {"vocab_size=200", "vocab_size=261", "vocab_size=262144"};
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  gt_config c;
  for (int k = 0; k < 3; k++)
    for (int t = 0; t < 2; t++) {
      cfg(&c, "model_name=gemma3-tiny", t ? "dataset_type=jsonl" : "dataset_type=text", t ? jp : dp, vocab[k], NULL);
      ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
      char want[400];
      snprintf(want, sizeof want, "data: dataset_type '%s' without tokenizer_path is read as byte tokens (260 ids), but "
               "vocab_size = %s: the model's vocabulary is another; set tokenizer_path to the model's tokenizer.json "
               "(byte tokens need vocab_size = 260)", t ? "jsonl" : "text", vocab[k] + 11);
      ck_assert_msg(!strcmp(e.msg, want), "'%s', expected '%s'", e.msg, want);
      ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
    }
  /* the byte vocabulary, or a tokenizer: read */
  for (int t = 0; t < 2; t++) {
    cfg(&c, "model_name=gemma3-tiny", t ? "dataset_type=jsonl" : "dataset_type=text", t ? jp : dp, "eval_interval=-1",
        NULL);
    open_ok(&d, &c, &mem);
    ck_assert_int_eq(c.vocab_size, 260);
    gt_data_close(&d);
    cfg(&c, "model_name=gemma3-tiny", t ? "dataset_type=jsonl" : "dataset_type=text", t ? jp : dp, "vocab_size=262144",
        "eval_interval=-1", "tokenizer_path=" GT_TEST_DATA_DIR "/tokenizer_small.json", NULL);
    open_ok(&d, &c, &mem);
    gt_data_close(&d);
  }
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p), free(j);
}
END_TEST

/* Synthetic data has no records: the keys that shape records (use_sft,
 * packing=false, use_dpo) are refused with it, not ignored. */
START_TEST(test_synthetic_refuses_record_keys) {
  static const struct {
    const char *key, *want;
  } cases[] = {
      {"use_sft=true", "data: key 'use_sft' = true needs dataset_type=jsonl (prompt/completion or chat records); "
                       "dataset_type is 'synthetic'"},
      {"packing=false", "data: key 'packing' = false needs documents as records (dataset_type=jsonl); a 'synthetic' "
                        "corpus is read as packed windows"},
      {"use_dpo=true", "data: key 'use_dpo' = true needs dataset_type=jsonl"},
  };
  gt_mem mem;
  gt_mem_init(&mem);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_config c;
    cfg(&c, "model_name=gemma3-tiny", "dataset_type=synthetic", "per_device_batch_size=2", cases[i].key, NULL);
    gt_data d;
    gt_err e;
    ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, cases[i].want), "'%s' lacks '%s'", e.msg, cases[i].want);
    ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  }
}
END_TEST

/* ---------- documents ---------- */

#define B4(ch) (4 + (ch))

/* Three documents in one row of 12 tokens: segment ids, positions that
 * restart, no target across a document's end (written out by hand). */
START_TEST(test_packed_documents_by_hand) {
  char *p = tmp_path("three.jsonl");
  gt_test_write_text(p, "{\"text\": \"ab\"}\n{\"text\": \"cde\"}\n\n{\"text\": \"f\", \"id\": 3}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=11", "per_device_batch_size=1",
      "eval_split_fraction=0", "eval_interval=-1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_stream, 12);
  ck_assert_int_eq(d.n_train_rows, 1);
  gt_batch b = train_batch(&d);
  const int32_t in[11] = {2, B4('a'), B4('b'), 1, 2, B4('c'), B4('d'), B4('e'), 1, 2, B4('f')};
  const int32_t tg[11] = {B4('a'), B4('b'), 1, -1, B4('c'), B4('d'), B4('e'), 1, -1, B4('f'), 1};
  const int32_t sg[11] = {1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3};
  const int32_t ps[11] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1};
  for (int i = 0; i < 11; i++) {
    ck_assert_int_eq(b.inputs[i], in[i]);
    ck_assert_int_eq(b.targets[i], tg[i]);
    ck_assert_int_eq(b.segments[i], sg[i]);
    ck_assert_int_eq(b.positions[i], ps[i]);
  }
  ck_assert_int_eq(gt_batch_total_weights(&b), 9);
  gt_data_close(&d);
  /* packing=false: each document alone in its row, padded out of the loss */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=6", "per_device_batch_size=3",
      "eval_split_fraction=0", "eval_interval=-1", "packing=false", "enable_data_shuffling=false", NULL);
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train_rows, 3);
  b = train_batch(&d);
  const int32_t in2[18] = {2, B4('a'), B4('b'), 0, 0, 0, 2, B4('c'), B4('d'), B4('e'), 0, 0, 2, B4('f'), 0, 0, 0, 0};
  const int32_t tg2[18] = {B4('a'), B4('b'), 1, -1, -1, -1, B4('c'), B4('d'), B4('e'), 1, -1, -1,
                           B4('f'), 1,       -1, -1, -1, -1};
  const int32_t sg2[18] = {1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0};
  for (int i = 0; i < 18; i++) {
    ck_assert_int_eq(b.inputs[i], in2[i]);
    ck_assert_int_eq(b.targets[i], tg2[i]);
    ck_assert_int_eq(b.segments[i], sg2[i]);
  }
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "one record per row (packing=false)"));
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
}
END_TEST

/* The unmasked targets of a row, in order, as bytes (specials as their id). */
static int loss_bytes(const gt_batch *b, int row, char *out, int cap) {
  int n = 0;
  for (int t = 0; t < b->T; t++) {
    int32_t y = b->targets[row * b->T + t];
    if (y < 0) continue;
    if (n < cap - 1) out[n] = y >= 4 ? (char)(y - 4) : (char)('0' + y);
    n++;
  }
  out[n < cap ? n : cap - 1] = '\0';
  return n;
}

static int row_text(const gt_batch *b, int row, char *out, int cap) {
  int n = 0;
  for (int t = 0; t < b->T && n < cap - 1; t++) {
    int32_t x = b->inputs[row * b->T + t];
    if (b->segments[row * b->T + t] == 0) break;
    out[n++] = x >= 4 ? (char)(x - 4) : (char)('0' + x);
  }
  out[n] = '\0';
  return n;
}

/* SFT: the loss is on the completion (and <eos>) or the model turns (their
 * content and <end_of_turn>) only: total_weights counts exactly those. */
START_TEST(test_sft_masks) {
  char *p = tmp_path("pc.jsonl");
  gt_test_write_text(p, "{\"prompt\": \"Q: 1+1?\", \"completion\": \" A: 2\"}\n"
                        "{\"completion\": \"done\", \"prompt\": \"\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=40", "per_device_batch_size=2",
      "eval_split_fraction=0", "eval_interval=-1", "use_sft=true", "train_data_columns=prompt,completion",
      "packing=false", "enable_data_shuffling=false", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  gt_batch b = train_batch(&d);
  char got[256];
  ck_assert_int_eq(loss_bytes(&b, 0, got, sizeof got), 6);
  ck_assert_str_eq(got, " A: 21"); /* the completion, then <eos> (id 1) */
  ck_assert_int_eq(loss_bytes(&b, 1, got, sizeof got), 5);
  ck_assert_str_eq(got, "done1");
  ck_assert_int_eq(gt_batch_total_weights(&b), 11);
  row_text(&b, 0, got, sizeof got);
  ck_assert_str_eq(got, "2Q: 1+1? A: 2"); /* <bos> prompt completion (the <eos> is only a target) */
  gt_data_close(&d);
  /* without completion-only every next token is in the loss */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=40", "per_device_batch_size=2",
      "eval_split_fraction=0", "eval_interval=-1", "use_sft=true", "train_data_columns=prompt,completion",
      "packing=false", "enable_data_shuffling=false", "sft_train_on_completion_only=false", NULL);
  open_ok(&d, &c, &mem);
  b = train_batch(&d);
  ck_assert_int_eq(gt_batch_total_weights(&b), (7 + 5 + 1) + (4 + 1));
  gt_data_close(&d);

  /* chat: Gemma's template, system folded into the first user turn */
  char *q = tmp_path("chat.jsonl");
  gt_test_write_text(q, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                        "{\"role\": \"user\", \"content\": \" Hi \"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, "
                        "{\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"model\", \"content\": \"Bye.\\n\"}]}\n");
  snprintf(dp, sizeof dp, "dataset_path=%s", q);
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=200", "per_device_batch_size=1",
      "eval_split_fraction=0", "eval_interval=-1", "use_sft=true", "train_data_columns=messages", NULL);
  open_ok(&d, &c, &mem);
  b = train_batch(&d);
  row_text(&b, 0, got, sizeof got);
  ck_assert_str_eq(got, "2<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nBye.<end_of_turn>\n");
  ck_assert_int_eq(loss_bytes(&b, 0, got, sizeof got), 6 + 13 + 4 + 13);
  ck_assert_str_eq(got, "Hello!<end_of_turn>Bye.<end_of_turn>");
  ck_assert_int_eq(gt_batch_total_weights(&b), 36);
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "loss on the completions / model turns only"));
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
  free(q);
}
END_TEST

/* ---------- JSON Lines files ---------- */

static void write_gz(const char *path, const char *text, size_t n) {
  gzFile g = gzopen(path, "wb");
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(gzwrite(g, text, (unsigned)n), (int)n);
  ck_assert_int_eq(gzclose(g), Z_OK);
}

/* n records of seeded lengths, one per line, as JSON Lines text. */
static char *records_text(int n, uint64_t seed, int sft) {
  size_t cap = (size_t)n * 400 + 1, o = 0;
  char *s = malloc(cap);
  uint64_t st = seed;
  for (int i = 0; i < n; i++) {
    char a[200], b[200];
    int la = 1 + (int)(gt_test_rand_u64(&st) % 60), lb = 1 + (int)(gt_test_rand_u64(&st) % 30);
    for (int k = 0; k < la; k++) a[k] = (char)('a' + gt_test_rand_u64(&st) % 26);
    for (int k = 0; k < lb; k++) b[k] = (char)('A' + gt_test_rand_u64(&st) % 26);
    a[la] = b[lb] = '\0';
    /* in byte tokens Gemma's chat template takes 56 tokens around a user
     * turn: a prompt of up to 4 leaves some of the model turn inside a row
     * of 64 (a record with no token in the loss is refused) */
    if (sft == 2 && la > 4) a[4] = '\0';
    if (sft == 1)
      o += (size_t)snprintf(s + o, cap - o, "{\"prompt\": \"%s?\", \"completion\": \" %s.\"}\n", a, b);
    else if (sft == 2)
      o += (size_t)snprintf(s + o, cap - o,
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}, "
                            "{\"role\": \"assistant\", \"content\": \"%s\"}]}\n",
                            a, b);
    else
      o += (size_t)snprintf(s + o, cap - o, "{\"text\": \"%s %d\"}\n", a, i);
  }
  return s;
}

/* Every batch of two data sources, bit for bit. */
static void same_batches(gt_data *a, gt_data *b, int n) {
  for (int s = 0; s < n; s++) {
    gt_batch x = train_batch(a), y = train_batch(b);
    size_t bytes = sizeof(int32_t) * (size_t)x.B * x.T;
    ck_assert_int_eq(x.B * x.T, y.B * y.T);
    ck_assert(!memcmp(x.inputs, y.inputs, bytes) && !memcmp(x.targets, y.targets, bytes) &&
              !memcmp(x.positions, y.positions, bytes));
    ck_assert((!x.segments && !y.segments) || !memcmp(x.segments, y.segments, bytes));
  }
}

/* One file == the same records split over a plain and a gzip file == a
 * glob == a directory: the same rows. */
START_TEST(test_jsonl_files_gzip_globs) {
  char *dir = gt_test_mkdtemp("jsonl");
  char *all = records_text(60, 5, 0);
  char *one = gt_test_path(dir, "one.jsonl");
  gt_test_write_text(one, all);
  char *cut = all;
  for (int k = 0; k < 25; k++) cut = strchr(cut, '\n') + 1;
  char *sub = gt_test_path(dir, "parts");
  ck_assert_int_eq(gt_test_system("mkdir -p %s", sub), 0);
  char *pa = gt_test_path(sub, "a.jsonl"), *pb = gt_test_path(sub, "b.jsonl.gz"), *notes = gt_test_path(sub, "notes.txt");
  gt_test_write_file(pa, all, (size_t)(cut - all));
  write_gz(pb, cut, strlen(cut));
  gt_test_write_text(notes, "not data");
  char spec[4][1200];
  snprintf(spec[0], sizeof spec[0], "dataset_path=%s", one);
  snprintf(spec[1], sizeof spec[1], "dataset_path=%s,%s", pa, pb);
  snprintf(spec[2], sizeof spec[2], "dataset_path=%s/*.jsonl*", sub);
  snprintf(spec[3], sizeof spec[3], "dataset_path=%s", sub);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data ref;
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", spec[0], "max_target_length=16", "per_device_batch_size=4",
      "eval_split_fraction=0.1", "eval_interval=-1", NULL);
  open_ok(&ref, &c, &mem);
  ck_assert_int_gt(ref.n_train_rows, 40);
  for (int i = 1; i < 4; i++) {
    gt_data d;
    cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", spec[i], "max_target_length=16",
        "per_device_batch_size=4", "eval_split_fraction=0.1", "eval_interval=-1", NULL);
    open_ok(&d, &c, &mem);
    ck_assert_int_eq(d.n_stream, ref.n_stream);
    ck_assert_int_eq(d.n_train_rows, ref.n_train_rows);
    gt_err e;
    ck_assert(gt_data_seek(&ref, (gt_data_state){0, 0}, &e) == GT_OK);
    same_batches(&ref, &d, 14); /* past the end of the first epoch */
    if (i == 1) ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "in 60 records of 2 files"));
    gt_data_close(&d);
  }
  gt_data_close(&ref);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_test_rm_rf(dir);
  free(all), free(one), free(sub), free(pa), free(pb), free(notes), free(dir);
}
END_TEST

/* Each malformed input: refused with one line naming the file and line. */
START_TEST(test_jsonl_refusals) {
  static const struct {
    const char *text, *extra, *want;
  } cases[] = {
      {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", NULL, "line 2: malformed JSON at column"},
      {"{\"text\": \"a\"}\n[\"b\"]\n", NULL, "line 2: the line is an array; expected a JSON object"},
      {"{\"text\": \"a\"} {\"text\": \"b\"}\n", NULL, "line 1: text after the JSON value at column 15"},
      {"{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n", NULL, "line 3: no field 'text' (train_data_columns); the record has 'txt'"},
      {"{\"text\": 5}\n", NULL, "line 1: field 'text' is a number; expected a string"},
      {"{\"text\": \"\"}\n", NULL, "line 1: field 'text' is an empty document"},
      {"", NULL, "holds no records"},
      {"{\"text\": \"abcdefghijklmnopqrstuvwxyz\"}\n", "packing=false",
       "line 1: the record is 28 tokens, longer than a sequence of max_target_length + 1 = 17 (overlong_records=refuse"},
      {"{\"prompt\": \"a\", \"completion\": \"\"}\n", "pc", "line 1: field 'completion' (the completion) is empty"},
      {"{\"prompt\": \"a\", \"completion\": [1]}\n", "pc", "line 1: field 'completion' is an array; expected a string"},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n", "chat",
       "line 1: messages[0] is a model turn; Gemma's chat template needs the roles to alternate"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"bot\", \"content\": \"y\"}]}\n", "chat",
       "line 1: messages[1] has role 'bot'"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": 7}]}\n", "chat",
       "line 1: messages[0] has 'role' a string and 'content' a number; expected two strings"},
      {"{\"messages\": \"hi\"}\n", "chat", "line 1: field 'messages' is a string; expected an array of messages"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", "chat", "line 1: field 'messages' has no model turn"},
      /* cJSON would end the string at the NUL and drop the rest silently */
      {"{\"text\": \"a\"}\n{\"text\": \"ab\\u0000cd\"}\n", NULL, "line 2: a NUL character at column 13"},
  };
  char *dir = gt_test_mkdtemp("refuse");
  gt_mem mem;
  gt_mem_init(&mem);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "case%zu.jsonl", i);
    char *p = gt_test_path(dir, name);
    gt_test_write_text(p, cases[i].text);
    char dp[600];
    snprintf(dp, sizeof dp, "dataset_path=%s", p);
    const char *x = cases[i].extra ? cases[i].extra : "";
    gt_config c;
    cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=16", "per_device_batch_size=1",
        "eval_interval=-1", !strcmp(x, "packing=false") ? "packing=false" : "packing=true",
        !strcmp(x, "pc") || !strcmp(x, "chat") ? "use_sft=true" : "use_sft=false",
        !strcmp(x, "pc") ? "train_data_columns=prompt,completion"
                         : !strcmp(x, "chat") ? "train_data_columns=messages" : "train_data_columns=text",
        NULL);
    gt_data d;
    gt_err e;
    ck_assert_int_ne(gt_data_open(&d, &c, &mem, &e), GT_OK);
    ck_assert_msg(strstr(e.msg, cases[i].want) && (strstr(e.msg, p) || i == 6) && !strchr(e.msg, '\n'),
                  "case %zu: '%s' lacks '%s'", i, e.msg, cases[i].want);
    ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
    free(p);
  }
  /* a gzip file cut short; a glob that matches nothing; SFT without jsonl */
  char *gz = gt_test_path(dir, "cut.jsonl.gz");
  char *big = records_text(400, 9, 0);
  write_gz(gz, big, strlen(big));
  ck_assert_int_eq(gt_test_system("truncate -s 3000 %s", gz), 0);
  static const char *const want[] = {"the gzip stream ends early (a truncated file)", "matches no file",
                                     "key 'use_sft' = true needs dataset_type=jsonl"};
  for (int i = 0; i < 3; i++) {
    char dp[800];
    if (i == 1)
      snprintf(dp, sizeof dp, "dataset_path=%s/nothing-*.jsonl", dir);
    else
      snprintf(dp, sizeof dp, "dataset_path=%s", gz);
    gt_config c;
    cfg(&c, "model_name=gemma3-tiny", i == 2 ? "dataset_type=text" : "dataset_type=jsonl", dp,
        "max_target_length=16", "eval_interval=-1", i == 2 ? "use_sft=true" : "use_sft=false", NULL);
    gt_data d;
    gt_err e;
    ck_assert_int_ne(gt_data_open(&d, &c, &mem, &e), GT_OK);
    ck_assert_msg(strstr(e.msg, want[i]), "'%s' lacks '%s'", e.msg, want[i]);
    if (i == 0) ck_assert_msg(strstr(e.msg, "cut.jsonl.gz' line "), "%s", e.msg);
  }
  /* overlong_records=truncate keeps the first T + 1 tokens */
  char *p = gt_test_path(dir, "long.jsonl");
  gt_test_write_text(p, "{\"text\": \"abcdefghijklmnopqrstuvwxyz\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=16", "per_device_batch_size=1",
      "eval_interval=-1", "eval_split_fraction=0", "packing=false", "overlong_records=truncate", NULL);
  gt_data d;
  open_ok(&d, &c, &mem);
  gt_batch b = train_batch(&d);
  ck_assert_int_eq(b.inputs[0], GT_TOK_BOS);
  ck_assert_int_eq(b.inputs[15], B4('o'));
  ck_assert_int_eq(b.targets[15], B4('p'));
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "1 record truncated to 17 tokens"));
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_test_rm_rf(dir);
  free(gz), free(big), free(p), free(dir);
}
END_TEST

/* A line with no newline is refused at GT_JSONL_MAX_LINE (64 MiB), naming
 * its own line number, before it is held in memory: a 64 KiB gzip file
 * would otherwise become a line of any size first. */
START_TEST(test_jsonl_line_cap) {
  char *dir = gt_test_mkdtemp("cap");
  char *p = gt_test_path(dir, "long.jsonl.gz");
  gzFile g = gzopen(p, "wb");
  ck_assert_ptr_nonnull(g);
  const char *first = "{\"text\": \"a\"}\n";
  ck_assert_int_eq(gzwrite(g, first, (unsigned)strlen(first)), (int)strlen(first));
  enum { CH = 1 << 20 };
  char *zeros = calloc(CH, 1);
  for (int i = 0; i <= GT_JSONL_MAX_LINE / CH; i++) ck_assert_int_eq(gzwrite(g, zeros, CH), CH);
  ck_assert_int_eq(gzclose(g), Z_OK);
  free(zeros);
  gt_jsonl r;
  gt_err e;
  ck_assert_msg(gt_jsonl_open(&r, p, &e) == GT_OK, "%s", e.msg);
  cJSON *rec;
  ck_assert_msg(gt_jsonl_next(&r, &rec, &e) == GT_OK && rec, "%s", e.msg);
  cJSON_Delete(rec);
  ck_assert_int_eq(gt_jsonl_next(&r, &rec, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "long.jsonl.gz' line 2: longer than 64 MiB, the limit for one record"), "%s", e.msg);
  /* held at most the cap (and the read buffer's chunk) */
  ck_assert_uint_le(r.line_cap, (size_t)GT_JSONL_MAX_LINE + 1);
  gt_jsonl_close(&r);
  gt_test_rm_rf(dir);
  free(p), free(dir);
}
END_TEST

/* A directory or a glob reads regular files only: a FIFO in a dataset
 * directory is refused naming it (reading one that nobody writes blocks
 * forever), not opened. */
START_TEST(test_dataset_dir_fifo_refused) {
  char *dir = gt_test_mkdtemp("fifo");
  char *a = gt_test_path(dir, "a.jsonl"), *b = gt_test_path(dir, "b.jsonl");
  gt_test_write_text(a, "{\"text\": \"hello\"}\n");
  ck_assert_int_eq(mkfifo(b, 0644), 0);
  static const char *const exts[] = {".jsonl", NULL};
  char glob_spec[600];
  snprintf(glob_spec, sizeof glob_spec, "%s/*.jsonl", dir);
  const char *specs[] = {dir, glob_spec};
  const char *how[] = {"holds", "matches"};
  for (int i = 0; i < 2; i++) {
    gt__paths ps;
    gt_err e;
    ck_assert_int_eq(gt__paths_expand(specs[i], "dataset_path", exts, &ps, &e), GT_ERR_IO);
    char want[800];
    snprintf(want, sizeof want, "data: dataset_path '%s' %s '%s', a FIFO, not a regular file; name it in dataset_path",
             specs[i], how[i], b);
    ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  }
  /* the same refusal from gt_data_open, which never opens the FIFO */
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", dir);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=16", "eval_interval=-1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "a FIFO, not a regular file"), "%s", e.msg);
  gt_test_rm_rf(dir);
  free(a), free(b), free(dir);
}
END_TEST

/* The data line's total is the training files' tokens; an
 * eval_dataset_path's tokens are named apart, not added in. */
START_TEST(test_describe_train_tokens_apart_from_eval) {
  char *tp = counting_shard("train.gtok", 5000, 10, 0), *ep = counting_shard("eval.gtok", 700, 10, 0);
  char dp[600], ev[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", tp);
  snprintf(ev, sizeof ev, "eval_dataset_path=%s", ep);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp, ev, "max_target_length=10",
      "per_device_batch_size=3", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  char want[1400];
  snprintf(want, sizeof want, "data: tokens '%s', 5000 tokens in 1 shard (5000 train; eval: '%s', 700 tokens)", tp, ep);
  ck_assert_msg(strstr(gt_data_describe(&d), want), "'%s' lacks '%s'", gt_data_describe(&d), want);
  gt_data_close(&d);
  free(tp), free(ep);
}
END_TEST

/* A shard records the vocabulary of the tokenizer that wrote it (gemtrain
 * tokenize: the tokenizer's id count, 260 for byte tokens): with
 * tokenizer_path it must be that tokenizer's id count; without, byte tokens
 * only go into a byte model; the shards of a run, its eval shards too,
 * record one vocabulary. Every id here is below every vocabulary, so only
 * the headers tell the shards apart. */
START_TEST(test_shard_vocab_is_the_runs) {
  char *dir = gt_test_mkdtemp("vocab");
  gt_tokenizer *tok = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load(GT_TEST_DATA_DIR "/tokenizer_small.json", &tok, &e) == GT_OK, "%s", e.msg);
  uint32_t n_ids = (uint32_t)gt_tokenizer_n_ids(tok);
  gt_tokenizer_free(tok);
  ck_assert_uint_ne(n_ids, 260);
  uint32_t ids[200];
  for (int i = 0; i < 200; i++) ids[i] = (uint32_t)(i % (int)n_ids);
  char *by = gt_test_path(dir, "bytes.gtok"), *tk = gt_test_path(dir, "small.gtok"), *o1 = gt_test_path(dir, "o1.gtok"),
       *o2 = gt_test_path(dir, "o2.gtok");
  ck_assert(gt_tokens_write(by, ids, 200, 260, 0, &e) == GT_OK);
  ck_assert(gt_tokens_write(tk, ids, 200, n_ids, 1, &e) == GT_OK);
  ck_assert(gt_tokens_write(o1, ids, 200, 8192, 0, &e) == GT_OK);
  ck_assert(gt_tokens_write(o2, ids, 200, 1000, 0, &e) == GT_OK);
  char p_by[700], p_tk[700], p_o1[700], p_o12[1400], p_ev2[700], want[2000];
  snprintf(p_by, sizeof p_by, "dataset_path=%s", by);
  snprintf(p_tk, sizeof p_tk, "dataset_path=%s", tk);
  snprintf(p_o1, sizeof p_o1, "dataset_path=%s", o1);
  snprintf(p_o12, sizeof p_o12, "dataset_path=%s,%s", o1, o2);
  snprintf(p_ev2, sizeof p_ev2, "eval_dataset_path=%s", o2);
  const char *tp = "tokenizer_path=" GT_TEST_DATA_DIR "/tokenizer_small.json";
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_config c;
#define OPEN(...) cfg(&c, "model_name=gemma3-tiny", "dataset_type=tokens", "max_target_length=10", \
                      "per_device_batch_size=2", "eval_split_fraction=0", "eval_interval=-1", __VA_ARGS__, NULL)
  /* byte-token shards under a tokenizer: refused naming both vocabularies */
  OPEN(p_by, tp);
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: shard '%s' records vocab_size 260 in its header (byte tokens, written without "
           "tokenizer_path), but tokenizer_path '%s' has %u ids", by, GT_TEST_DATA_DIR "/tokenizer_small.json", n_ids);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  /* another tokenizer's shards under it: refused too */
  OPEN(p_o1, tp);
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: shard '%s' records vocab_size 8192 in its header (the ids of the tokenizer that "
           "wrote it), but tokenizer_path '%s' has %u ids", o1, GT_TEST_DATA_DIR "/tokenizer_small.json", n_ids);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  /* its own shards: read */
  OPEN(p_tk, tp);
  open_ok(&d, &c, &mem);
  gt_data_close(&d);
  /* byte tokens without a tokenizer: a byte model reads them, another refuses them */
  OPEN(p_by, "vocab_size=260");
  open_ok(&d, &c, &mem);
  gt_data_close(&d);
  OPEN(p_by, "vocab_size=262144");
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: shard '%s' holds byte tokens (vocab_size 260 in its header: written without "
           "tokenizer_path), but vocab_size = 262144, a model of another vocabulary", by);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  /* a tokenizer's shards without tokenizer_path: read (the ids are checked against vocab_size) */
  OPEN(p_o1, "vocab_size=8192");
  open_ok(&d, &c, &mem);
  gt_data_close(&d);
  /* shards of two vocabularies, in dataset_path or across eval_dataset_path */
  OPEN(p_o12, "vocab_size=8192");
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: shard '%s' records vocab_size 1000 in its header, shard '%s' 8192: the shards of "
           "a run must come from one tokenizer", o2, o1);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  OPEN(p_o1, p_ev2, "vocab_size=8192");
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: eval_dataset_path shard '%s' records vocab_size 1000 in its header, dataset_path "
           "shard '%s' 8192: the eval shards must come from the training shards' tokenizer", o2, o1);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
#undef OPEN
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_test_rm_rf(dir);
  free(by), free(tk), free(o1), free(o2), free(dir);
}
END_TEST

/* overlong_records=truncate: the train and eval figures count the tokens
 * the rows read (a truncated record's first T + 1), and the description
 * says what was cut from the training rows and from the eval rows. Byte
 * tokens: a record "x...x" of n letters is <bos> n letters <eos>. */
START_TEST(test_truncation_counts_kept_tokens) {
  char *dir = gt_test_mkdtemp("trunc");
  char *all = gt_test_path(dir, "all.jsonl"), *tr = gt_test_path(dir, "train.jsonl"),
       *ev = gt_test_path(dir, "eval.jsonl");
  /* T = 15, rows of 16: training records of 32, 4 and 6 x 5 tokens (the
   * first loses 16); eval records of 22 (loses 6) and 3 */
  const char *train_recs = "{\"text\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n{\"text\": \"ab\"}\n"
                           "{\"text\": \"abc\"}\n{\"text\": \"abc\"}\n{\"text\": \"abc\"}\n"
                           "{\"text\": \"abc\"}\n{\"text\": \"abc\"}\n{\"text\": \"abc\"}\n";
  const char *eval_recs = "{\"text\": \"bbbbbbbbbbbbbbbbbbbb\"}\n{\"text\": \"x\"}\n";
  char both[1000];
  snprintf(both, sizeof both, "%s%s", train_recs, eval_recs);
  gt_test_write_text(all, both);
  gt_test_write_text(tr, train_recs);
  gt_test_write_text(ev, eval_recs);
  char p_all[700], p_tr[700], p_ev[700], want[2000];
  snprintf(p_all, sizeof p_all, "dataset_path=%s", all);
  snprintf(p_tr, sizeof p_tr, "dataset_path=%s", tr);
  snprintf(p_ev, sizeof p_ev, "eval_dataset_path=%s", ev);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_config c;
  const char *cut = "; training: 1 record truncated to 16 tokens, 16 tokens dropped; eval: 1 record truncated to 16 "
                    "tokens, 6 tokens dropped (overlong_records=truncate)";
  /* one file, the last 2 of its 10 records held out */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", p_all, "max_target_length=15", "per_device_batch_size=1",
      "packing=false", "overlong_records=truncate", "eval_split_fraction=0.2", "eval_interval=5", NULL);
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train, 16 + 4 + 6 * 5);
  ck_assert_int_eq(d.n_stream, 32 + 4 + 6 * 5 + 22 + 3);
  snprintf(want, sizeof want, "data: jsonl '%s', 91 tokens in 10 records of 1 file (50 train, 19 eval)", all);
  ck_assert_msg(strstr(gt_data_describe(&d), want), "'%s' lacks '%s'", gt_data_describe(&d), want);
  ck_assert_msg(strstr(gt_data_describe(&d), cut), "'%s' lacks '%s'", gt_data_describe(&d), cut);
  gt_data_close(&d);
  /* the same records in eval_dataset_path: its truncation is reported too */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", p_tr, p_ev, "max_target_length=15", "per_device_batch_size=1",
      "packing=false", "overlong_records=truncate", "eval_interval=5", NULL);
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train, 50);
  snprintf(want, sizeof want, "data: jsonl '%s', 66 tokens in 8 records of 1 file (50 train; eval: '%s', 25 tokens)", tr,
           ev);
  ck_assert_msg(strstr(gt_data_describe(&d), want), "'%s' lacks '%s'", gt_data_describe(&d), want);
  ck_assert_msg(strstr(gt_data_describe(&d), cut), "'%s' lacks '%s'", gt_data_describe(&d), cut);
  gt_data_close(&d);
  /* preference pairs: a pair is cut a side at a time; <bos> "p" and a
   * response of n letters and <eos> are n + 3 tokens a side */
  gt_test_write_text(all, "{\"prompt\": \"p\", \"chosen\": \"cccccccccccccccccccc\", \"rejected\": \"r\"}\n"
                          "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"s\"}\n"
                          "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"t\"}\n"
                          "{\"prompt\": \"p\", \"chosen\": \"cccccccccccccccccc\", \"rejected\": \"rrrrrrrrrrrrrrrrrrrr\"}\n");
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", p_all, "max_target_length=15", "per_device_batch_size=2",
      "use_dpo=true", "packing=false", "overlong_records=truncate", "eval_split_fraction=0.25", "eval_interval=5", NULL);
  open_ok(&d, &c, &mem);
  /* training: 16 + 4, 4 + 4, 4 + 4 (the first chosen loses 7); eval: 16 + 16 (5 and 7 lost) */
  ck_assert_int_eq(d.n_train, 36);
  const char *pcut = "; training: 1 pair truncated to 16 tokens a side, 7 tokens dropped; eval: 1 pair truncated to 16 "
                     "tokens a side, 12 tokens dropped (overlong_records=truncate)";
  ck_assert_msg(strstr(gt_data_describe(&d), pcut), "'%s' lacks '%s'", gt_data_describe(&d), pcut);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_test_rm_rf(dir);
  free(all), free(tr), free(ev), free(dir);
}
END_TEST

/* eval_dataset_path is held out: a file it names that dataset_path also
 * holds, under any name (here a symbolic link, dataset_path a directory),
 * is refused naming both; a caller that sets eval_dataset_path to a file
 * of its own is not refused. */
START_TEST(test_eval_files_not_training_files) {
  char *dir = gt_test_mkdtemp("overlap"), *other = gt_test_mkdtemp("overlap_eval");
  char *a = gt_test_path(dir, "a.jsonl"), *b = gt_test_path(dir, "b.jsonl"), *alias = gt_test_path(other, "alias.jsonl"),
       *own = gt_test_path(other, "own.jsonl");
  char *text = records_text(40, 5, 0);
  gt_test_write_text(a, text);
  gt_test_write_text(b, text);
  gt_test_write_text(own, text);
  ck_assert_int_eq(symlink(a, alias), 0);
  char dp[700], ep[700], op[700], want[3000];
  snprintf(dp, sizeof dp, "dataset_path=%s", dir);
  snprintf(ep, sizeof ep, "eval_dataset_path=%s", alias);
  snprintf(op, sizeof op, "eval_dataset_path=%s", own);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, ep, "max_target_length=64", "per_device_batch_size=2",
      NULL);
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  snprintf(want, sizeof want, "data: eval_dataset_path '%s' holds '%s', which is also a training file (dataset_path "
           "'%s' holds it as '%s'): held-out data must not be trained on", alias, alias, dir, a);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  /* a file of its own (the same text, another file): read */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, op, "max_target_length=64", "per_device_batch_size=2",
      NULL);
  open_ok(&d, &c, &mem);
  gt_data_close(&d);
  /* set by the caller, not the user: read */
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=64", "per_device_batch_size=2", NULL);
  snprintf(c.eval_dataset_path, sizeof c.eval_dataset_path, "%s", a);
  open_ok(&d, &c, &mem);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_test_rm_rf(dir), gt_test_rm_rf(other);
  free(a), free(b), free(alias), free(own), free(text), free(dir), free(other);
}
END_TEST

/* ---------- order ---------- */

START_TEST(test_permutations_are_bijections) {
  static const uint64_t ns[] = {1, 2, 3, 4, 5, 16, 17, 1000, 4097, 65537};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    uint64_t n = ns[i];
    char *hit = calloc(n, 1);
    gt__perm p;
    gt__perm_init(&p, n, 42, 7, i);
    uint64_t fixed = 0;
    for (uint64_t k = 0; k < n; k++) {
      uint64_t v = gt__perm_at(&p, k);
      ck_assert_uint_lt(v, n);
      ck_assert_int_eq(hit[v], 0);
      hit[v] = 1;
      fixed += v == k;
    }
    if (n >= 1000) ck_assert_uint_lt(fixed, 10); /* shuffled, not the identity */
    free(hit);
  }
}
END_TEST

/* Three shards: without shuffling the rows come in file order every epoch;
 * with it, each epoch visits every row once, part after part (a shard at a
 * time), in an order that changes with the epoch and the seed. */
START_TEST(test_order_file_and_shuffled) {
  char *a = counting_shard("o1.gtok", 110, 100, 0), *b = counting_shard("o2.gtok", 220, 1000, 1),
       *c3 = counting_shard("o3.gtok", 55, 3000, 0);
  char dp[2000];
  snprintf(dp, sizeof dp, "dataset_path=%s,%s,%s", a, b, c3);
  gt_mem mem;
  gt_mem_init(&mem);
  int32_t first[3][35];
  for (int mode = 0; mode < 3; mode++) {
    gt_config c;
    cfg(&c, "model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp, "max_target_length=10",
        "per_device_batch_size=5", "eval_split_fraction=0", "eval_interval=-1",
        mode == 0 ? "enable_data_shuffling=false" : "enable_data_shuffling=true",
        mode == 2 ? "data_shuffle_seed=9" : "data_shuffle_seed=0", NULL);
    gt_data d;
    open_ok(&d, &c, &mem);
    ck_assert_int_eq(d.n_train_rows, 35); /* 10 + 20 + 5 rows of 11 */
    ck_assert_int_eq(d.train->n_parts, 3);
    for (int e = 0; e < 2; e++) {
      int32_t order[35];
      int seen[35] = {0}, switches = 0;
      for (int s = 0; s < 7; s++) {
        gt_batch x = train_batch(&d);
        for (int r = 0; r < 5; r++) {
          int32_t v = x.inputs[r * 10];
          int row = v < 1000 ? (v - 100) / 11 : v < 3000 ? 10 + (v - 1000) / 11 : 30 + (v - 3000) / 11;
          order[s * 5 + r] = row;
          seen[row]++;
        }
      }
      for (int k = 0; k < 35; k++) {
        ck_assert_int_eq(seen[k], 1);
        if (k) switches += (order[k] < 10) != (order[k - 1] < 10) || (order[k] >= 30) != (order[k - 1] >= 30);
      }
      ck_assert_int_le(switches, 2); /* each shard's rows together */
      if (mode == 0)
        for (int k = 0; k < 35; k++) ck_assert_int_eq(order[k], k);
      if (e == 0) memcpy(first[mode], order, sizeof order);
      if (e == 1 && mode > 0) ck_assert(memcmp(first[mode], order, sizeof order) != 0);
    }
    gt_data_close(&d);
  }
  ck_assert(memcmp(first[1], first[2], sizeof first[1]) != 0);
  ck_assert(memcmp(first[0], first[1], sizeof first[0]) != 0);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(a), free(b), free(c3);
}
END_TEST

/* ---------- a process's rows, resume, every input type ---------- */

typedef struct variant {
  const char *name;
  const char *ov[8];
} variant;

/* Two readers of rows 0-1 and 2-3 give exactly the full reader's rows (and
 * blank rows elsewhere), for train and eval batches; a reader seeked to a
 * saved position continues exactly as the one that saved it. */
START_TEST(test_rows_and_resume_every_type) {
  char *dir = gt_test_mkdtemp("types");
  char *txt = gt_test_path(dir, "t.txt"), *js = gt_test_path(dir, "d.jsonl"), *pc = gt_test_path(dir, "pc.jsonl.gz"),
       *ch = gt_test_path(dir, "chat.jsonl");
  char *text = records_text(80, 3, 0);
  gt_test_write_text(txt, text);
  gt_test_write_text(js, text);
  char *pct = records_text(80, 4, 1);
  write_gz(pc, pct, strlen(pct));
  char *cht = records_text(80, 6, 2);
  gt_test_write_text(ch, cht);
  /* shards of documents: <bos> ... <eos> runs in a plain and a compressed shard */
  uint32_t ids[3000];
  uint64_t st = 11;
  for (int i = 0; i < 3000; i++) {
    uint64_t r = gt_test_rand_u64(&st) % 40;
    ids[i] = r == 0 ? GT_TOK_BOS : r == 1 ? GT_TOK_EOS : (uint32_t)(4 + gt_test_rand_u64(&st) % 256);
  }
  char *s1 = gt_test_path(dir, "s1.gtok"), *s2 = gt_test_path(dir, "s2.gtok");
  gt_err e;
  ck_assert(gt_tokens_write(s1, ids, 1700, 260, 0, &e) == GT_OK);
  ck_assert(gt_tokens_write(s2, ids + 1700, 1300, 260, 1, &e) == GT_OK);
  char p_txt[700], p_js[700], p_pc[700], p_ch[700], p_sh[1500];
  snprintf(p_txt, sizeof p_txt, "dataset_path=%s", txt);
  snprintf(p_js, sizeof p_js, "dataset_path=%s", js);
  snprintf(p_pc, sizeof p_pc, "dataset_path=%s", pc);
  snprintf(p_ch, sizeof p_ch, "dataset_path=%s", ch);
  snprintf(p_sh, sizeof p_sh, "dataset_path=%s,%s", s1, s2);
  const variant vs[] = {
      {"text", {"dataset_type=text", p_txt}},
      {"tokens", {"dataset_type=tokens", p_sh}},
      {"jsonl packed", {"dataset_type=jsonl", p_js}},
      {"jsonl unpacked", {"dataset_type=jsonl", p_js, "packing=false", "overlong_records=truncate"}},
      {"sft prompt/completion",
       {"dataset_type=jsonl", p_pc, "use_sft=true", "train_data_columns=prompt,completion", "overlong_records=truncate"}},
      {"sft chat unpacked",
       {"dataset_type=jsonl", p_ch, "use_sft=true", "train_data_columns=messages", "packing=false",
        "overlong_records=truncate"}},
      {"synthetic", {"dataset_type=synthetic"}},
  };
  gt_mem mem;
  gt_mem_init(&mem);
  for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
    const char *ov[20] = {"model_name=gemma3-tiny", "max_target_length=64", "per_device_batch_size=4",
                          "eval_split_fraction=0.1", "eval_interval=10"};
    int n = 5;
    for (int k = 0; vs[v].ov[k]; k++) ov[n++] = vs[v].ov[k];
    gt_config c;
    gt_test_config(&c, n, ov);
    gt_data full, lo, hi;
    open_ok(&full, &c, &mem);
    open_ok(&lo, &c, &mem);
    open_ok(&hi, &c, &mem);
    gt_data_set_rows(&lo, 0, 2);
    gt_data_set_rows(&hi, 2, 2);
    int T = 64, rowlen = T * (int)sizeof(int32_t);
    for (int s = 0; s < 60; s++) { /* past the first epoch of every source */
      int eval = s % 5 == 4;
      gt_batch f, a, b;
      if (eval) {
        gt_data_eval_reset(&full), gt_data_eval_reset(&lo), gt_data_eval_reset(&hi);
        ck_assert(gt_data_read_eval(&full, &f, &e) == GT_OK && gt_data_read_eval(&lo, &a, &e) == GT_OK &&
                  gt_data_read_eval(&hi, &b, &e) == GT_OK);
      } else {
        f = train_batch(&full), a = train_batch(&lo), b = train_batch(&hi);
      }
      for (int r = 0; r < 4; r++) {
        const gt_batch *mine = r < 2 ? &a : &b, *other = r < 2 ? &b : &a;
        const int32_t *arrs_f[4] = {f.inputs, f.targets, f.positions, f.segments},
                      *arrs_m[4] = {mine->inputs, mine->targets, mine->positions, mine->segments},
                      *arrs_o[4] = {other->inputs, other->targets, other->positions, other->segments};
        for (int k = 0; k < 4; k++) {
          if (!arrs_f[k]) continue; /* synthetic has no segments */
          ck_assert_msg(!memcmp(arrs_f[k] + r * T, arrs_m[k] + r * T, (size_t)rowlen), "%s: step %d row %d array %d",
                        vs[v].name, s, r, k);
          for (int t = 0; t < T; t++) ck_assert_int_eq(arrs_o[k][r * T + t], k == 1 ? -1 : 0);
        }
      }
    }
    ck_assert_int_eq(full.st.epoch, lo.st.epoch);
    ck_assert_int_eq(full.st.cursor, hi.st.cursor);
    if (v < 6) ck_assert_int_ge(full.st.epoch, 1); /* the order wrapped at least once */
    /* resume: a reader opened afresh and seeked continues bit for bit */
    gt_data again;
    open_ok(&again, &c, &mem);
    ck_assert_msg(gt_data_seek(&again, full.st, &e) == GT_OK, "%s", e.msg);
    same_batches(&full, &again, 6);
    gt_data_close(&again);
    gt_data_close(&full), gt_data_close(&lo), gt_data_close(&hi);
    ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  }
  gt_test_rm_rf(dir);
  free(txt), free(js), free(pc), free(ch), free(text), free(pct), free(cht), free(s1), free(s2), free(dir);
}
END_TEST

/* JSON Lines through a Hugging Face tokenizer: the tokenizer's own <s> and
 * </s> frame each document (tests/data/tokenizer_small.json). */
START_TEST(test_jsonl_with_tokenizer) {
  char *p = tmp_path("tok.jsonl");
  gt_test_write_text(p, "{\"text\": \"ab<x>c\"}\n{\"text\": \"ab\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "tokenizer_path=" GT_TEST_DATA_DIR "/tokenizer_small.json",
      "max_target_length=7", "per_device_batch_size=1", "eval_split_fraction=0", "eval_interval=-1", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  gt_batch b = train_batch(&d);
  /* <s>=1 ab<x>c = 7 18 5 </s>=2, <s> ab = 7 </s>: one row of 8 tokens */
  const int32_t in[7] = {1, 7, 18, 5, 2, 1, 7}, tg[7] = {7, 18, 5, 2, -1, 7, 2};
  for (int i = 0; i < 7; i++) {
    ck_assert_int_eq(b.inputs[i], in[i]);
    ck_assert_int_eq(b.targets[i], tg[i]);
  }
  gt_data_close(&d);
  free(p);
}
END_TEST

/* Rows of whole records take their documents from the records, not from
 * the ids: a record whose text holds the tokenizer's "<s>" or "</s>" (a
 * Hugging Face tokenizer makes them the special ids, as it does in
 * training with transformers) stays one document, its tokens in the loss
 * where its mask says so. Windows over a text stream, which have only the
 * ids, still cut at them (test_jsonl_with_tokenizer). */
START_TEST(test_records_keep_special_text) {
  char *p = tmp_path("special.jsonl");
  gt_test_write_text(p, "{\"prompt\": \"a<s>b\", \"completion\": \"</s>c\"}\n"
                        "{\"prompt\": \"ab\", \"completion\": \"c\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "tokenizer_path=" GT_TEST_DATA_DIR "/tokenizer_small.json",
      "max_target_length=10", "per_device_batch_size=1", "eval_split_fraction=0", "eval_interval=-1", "use_sft=true",
      "train_data_columns=prompt,completion", "enable_data_shuffling=false", NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  open_ok(&d, &c, &mem);
  ck_assert_int_eq(d.n_train_rows, 1);
  gt_batch b = train_batch(&d);
  /* <s> a <s> b | </s> c </s>, then <s> ab | c </s> (prompts out of the
   * loss): 11 tokens, one packed row; the literal "</s>" predicts c */
  const int32_t in[10] = {1, 3, 1, 4, 2, 5, 2, 1, 7, 5}, tg[10] = {-1, -1, -1, 2, 5, 2, -1, -1, 5, 2};
  const int32_t sg[10] = {1, 1, 1, 1, 1, 1, 1, 2, 2, 2}, ps[10] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2};
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(b.inputs[i], in[i]);
    ck_assert_int_eq(b.targets[i], tg[i]);
    ck_assert_int_eq(b.segments[i], sg[i]);
    ck_assert_int_eq(b.positions[i], ps[i]);
  }
  gt_data_close(&d);
  /* packing=false: a text record alone in its row is one document */
  gt_test_write_text(p, "{\"text\": \"a</s><s>b\"}\n");
  cfg(&c, "model_name=gemma3-tiny", "dataset_type=jsonl", dp, "tokenizer_path=" GT_TEST_DATA_DIR "/tokenizer_small.json",
      "max_target_length=5", "per_device_batch_size=1", "eval_split_fraction=0", "eval_interval=-1", "packing=false",
      NULL);
  open_ok(&d, &c, &mem);
  b = train_batch(&d);
  const int32_t in2[5] = {1, 3, 2, 1, 4}, tg2[5] = {3, 2, 1, 4, 2};
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(b.inputs[i], in2[i]);
    ck_assert_int_eq(b.targets[i], tg2[i]);
    ck_assert_int_eq(b.segments[i], 1);
    ck_assert_int_eq(b.positions[i], i);
  }
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("data");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_bytes_round_trip);
  tcase_add_test(tc, test_shard_round_trip);
  tcase_add_test(tc, test_shard_corruption);
  tcase_add_test(tc, test_windows_order_and_split);
  tcase_add_test(tc, test_seek_refuses_bad_position);
  tcase_add_test(tc, test_too_small_names_sizes);
  tcase_add_test(tc, test_synthetic_fixed_batch);
  tcase_add_test(tc, test_text_needs_byte_vocab);
  tcase_add_test(tc, test_synthetic_refuses_record_keys);
  tcase_add_test(tc, test_short_shards_make_no_row);
  tcase_add_test(tc, test_packed_documents_by_hand);
  tcase_add_test(tc, test_sft_masks);
  tcase_add_test(tc, test_jsonl_files_gzip_globs);
  tcase_add_test(tc, test_jsonl_refusals);
  tcase_add_test(tc, test_jsonl_line_cap);
  tcase_add_test(tc, test_dataset_dir_fifo_refused);
  tcase_add_test(tc, test_describe_train_tokens_apart_from_eval);
  tcase_add_test(tc, test_shard_vocab_is_the_runs);
  tcase_add_test(tc, test_truncation_counts_kept_tokens);
  tcase_add_test(tc, test_eval_files_not_training_files);
  tcase_add_test(tc, test_permutations_are_bijections);
  tcase_add_test(tc, test_order_file_and_shuffled);
  tcase_add_test(tc, test_rows_and_resume_every_type);
  tcase_add_test(tc, test_jsonl_with_tokenizer);
  tcase_add_test(tc, test_records_keep_special_text);
  return gt_test_run_suite(s, 0);
}
