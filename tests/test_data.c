/* Data: byte tokens, token shards (format, compression, corruption), packed
 * windows, the seeded epoch order, the held-out split, synthetic data. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "gt_testutil.h"

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

static char *tmp_path(const char *name) {
  char *dir = gt_test_mkdtemp("data"), *p = gt_test_path(dir, name);
  free(dir);
  return p;
}

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

START_TEST(test_windows_order_and_split) {
  /* a token stream 0,1,2,...: every window is consecutive, targets are
   * inputs shifted by one, train windows never reach the eval tail */
  enum { N = 5000 };
  uint32_t *ids = malloc(4 * N);
  for (int i = 0; i < N; i++) ids[i] = (uint32_t)i;
  char *p = tmp_path("c.gtok");
  gt_err e;
  ck_assert(gt_tokens_write(p, ids, N, 8192, 1, &e) == GT_OK);
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp,
                      "max_target_length=10", "per_device_batch_size=3", "eval_split_fraction=0.1"};
  gt_config c;
  gt_test_config(&c, 7, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  ck_assert_msg(gt_data_open(&d, &c, &mem, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(d.n_train, 4500);
  ck_assert_int_eq(d.n_train_windows, 449);
  int *seen = calloc(449, sizeof(int));
  /* one epoch visits each window exactly once */
  for (int s = 0; s < 449 / 3; s++) {
    gt_batch b;
    gt_data_next_train(&d, &b);
    for (int r = 0; r < 3; r++) {
      int32_t start = b.inputs[r * 10];
      ck_assert_int_eq(start % 10, 0);
      ck_assert_int_lt(start + 10, 4500);
      seen[start / 10]++;
      for (int t = 0; t < 10; t++) {
        ck_assert_int_eq(b.inputs[r * 10 + t], start + t);
        ck_assert_int_eq(b.targets[r * 10 + t], start + t + 1);
        ck_assert_int_eq(b.positions[r * 10 + t], t);
      }
    }
  }
  for (int w = 0; w < 447; w++) ck_assert_int_le(seen[w], 1);
  int distinct = 0;
  for (int w = 0; w < 449; w++) distinct += seen[w];
  ck_assert_int_eq(distinct, 447);
  /* eval comes from the tail and restarts at reset */
  gt_batch eb;
  gt_data_eval_reset(&d);
  gt_data_next_eval(&d, &eb);
  ck_assert_int_eq(eb.inputs[0], 4500);
  ck_assert_int_eq(eb.inputs[10], 4510);
  gt_data_eval_reset(&d);
  gt_data_next_eval(&d, &eb);
  ck_assert_int_eq(eb.inputs[0], 4500);
  /* resume: seeking to a saved position reproduces the batches after it */
  gt_data_state mid = d.st;
  gt_batch b1, b2;
  gt_data_next_train(&d, &b1);
  int32_t first[30];
  memcpy(first, b1.inputs, sizeof first);
  gt_data d2;
  ck_assert(gt_data_open(&d2, &c, &mem, &e) == GT_OK);
  ck_assert_msg(gt_data_seek(&d2, mid, &e) == GT_OK, "%s", e.msg);
  gt_data_next_train(&d2, &b2);
  ck_assert(memcmp(first, b2.inputs, sizeof first) == 0);
  gt_data_close(&d2);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(seen);
  free(ids);
  free(p);
}
END_TEST

/* A saved position outside the data is refused naming the field, its value
 * and the range, instead of reading past the window order (issue 20); the
 * position just after an epoch's last window is a real one. */
START_TEST(test_seek_refuses_bad_position) {
  enum { N = 5000 };
  uint32_t *ids = malloc(4 * N);
  for (int i = 0; i < N; i++) ids[i] = (uint32_t)i;
  char *p = tmp_path("s.gtok");
  gt_err e;
  ck_assert(gt_tokens_write(p, ids, N, 8192, 0, &e) == GT_OK);
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "vocab_size=8192", "dataset_type=tokens", dp,
                      "max_target_length=10", "per_device_batch_size=3", "eval_split_fraction=0.1"};
  gt_config c;
  gt_test_config(&c, 7, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  ck_assert_msg(gt_data_open(&d, &c, &mem, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(d.n_train_windows, 449);
  static const struct {
    gt_data_state st;
    const char *want;
  } bad[] = {
      {{0, -1}, "data: saved data_cursor = -1 is outside [0, 449], the training windows of an epoch"},
      {{0, 450}, "data: saved data_cursor = 450 is outside [0, 449], the training windows of an epoch"},
      {{-1, 0}, "data: saved data_epoch = -1 is outside [0, 9223372036854775806]"},
      {{INT64_MAX, 0}, "data: saved data_epoch = 9223372036854775807 is outside [0, 9223372036854775806]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(gt_data_seek(&d, bad[i].st, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, bad[i].want), "'%s' lacks '%s'", e.msg, bad[i].want);
  }
  ck_assert_msg(gt_data_seek(&d, (gt_data_state){2, 449}, &e) == GT_OK, "%s", e.msg);
  gt_batch b;
  gt_data_next_train(&d, &b);
  ck_assert_int_eq(d.st.epoch, 3);
  ck_assert_int_eq(d.st.cursor, 3);
  gt_data_close(&d);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(ids);
  free(p);
}
END_TEST

/* The refusals of a too-small corpus name its sizes (issue 20: they were
 * formatted after the data source was cleared: "fewer than one batch of 0 x 1"). */
START_TEST(test_too_small_names_sizes) {
  char *p = tmp_path("small.txt");
  gt_test_write_text(p, "In the beginning God created");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=text", dp, "max_target_length=10",
                      "per_device_batch_size=4", "eval_split_fraction=0.1", "eval_interval=-1"};
  gt_config c;
  gt_test_config(&c, 7, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  /* 28 bytes and <bos>: 29 tokens, 2 held out, 27 for training: 2 windows */
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "has 27 training tokens, fewer than one batch of 4 x 11"), "%s", e.msg);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  /* enough to train on, too little held out for one eval sequence */
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 20; i++) fputs("In the beginning God created ", f);
  fclose(f);
  const char *ov2[] = {"model_name=gemma3-tiny", "dataset_type=text", dp, "max_target_length=10",
                       "per_device_batch_size=4", "eval_split_fraction=0.01", "eval_interval=5"};
  gt_test_config(&c, 7, ov2);
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "leaves 5 tokens, fewer than one eval sequence of 11"), "%s", e.msg);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(p);
}
END_TEST

START_TEST(test_synthetic_fixed_batch) {
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic"};
  gt_config c;
  gt_test_config(&c, 2, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  ck_assert(gt_data_open(&d, &c, &mem, &e) == GT_OK);
  gt_batch a, b;
  gt_data_next_train(&d, &a);
  int n = a.B * a.T;
  int32_t *keep = malloc(sizeof(int32_t) * n);
  memcpy(keep, a.inputs, sizeof(int32_t) * n);
  gt_data_next_train(&d, &b);
  ck_assert(memcmp(keep, b.inputs, sizeof(int32_t) * n) == 0); /* reused every step */
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

START_TEST(test_text_needs_byte_vocab) {
  char *p = tmp_path("t.txt");
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 2000; i++) fputs("In the beginning. ", f);
  fclose(f);
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=text", dp, "vocab_size=200"};
  gt_config c;
  gt_test_config(&c, 4, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  gt_err e;
  ck_assert_int_eq(gt_data_open(&d, &c, &mem, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "vocab_size = 200") && strstr(e.msg, ">= 260"), "%s", e.msg);
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
  return gt_test_run_suite(s, 0);
}
