/* libgemtrain's API as a consumer uses it: train a tiny model, errors by
 * context, two contexts in two threads equal to one after the other,
 * save/load resuming bit-exactly, and create/train/free cycles (run without
 * forking, so the sanitizer build's LeakSanitizer checks them at exit). */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"

static const char *tiny_ov[] = {"dataset_type=synthetic", "steps=20", "learning_rate=0.01",
                                "per_device_batch_size=2", "max_target_length=32"};

static gt_ctx *tiny(void) {
  gt_ctx *c = gt_ctx_new();
  ck_assert_ptr_nonnull(c);
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 5, tiny_ov) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  return c;
}

START_TEST(test_train_loss_falls) {
  gt_ctx *c = tiny();
  ck_assert_int_gt(gt_ctx_num_params(c), 1000);
  double loss[20];
  ck_assert(gt_ctx_train(c, 20, loss) == GT_OK);
  /* synthetic data is one fixed batch: a model memorises it */
  ck_assert_msg(loss[19] < 0.8 * loss[0], "loss %.4f -> %.4f", loss[0], loss[19]);
  gt_step_metrics mt;
  ck_assert(gt_ctx_last_metrics(c, &mt) == GT_OK);
  ck_assert_int_eq(mt.step, 19);
  ck_assert(mt.loss == loss[19] && mt.total_weights == 64);
  ck_assert_str_eq(gt_ctx_error(c), "");
  gt_ctx_free(c);
}
END_TEST

START_TEST(test_errors_per_context) {
  gt_ctx *c = gt_ctx_new();
  double l;
  ck_assert_int_eq(gt_ctx_train(c, 1, &l), GT_ERR_ARG);
  ck_assert(strstr(gt_ctx_error(c), "gt_ctx_configure"));
  const char *bad[] = {"learnin_rate=1"};
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, bad), GT_ERR_CONFIG);
  ck_assert(strstr(gt_ctx_error(c), "did you mean 'learning_rate'"));
  ck_assert_int_eq(gt_ctx_configure(c, "no-such-preset", 0, NULL), GT_ERR_CONFIG);
  ck_assert(strstr(gt_ctx_error(c), "no preset"));
  gt_ctx *d = tiny(); /* another context is unaffected */
  ck_assert_str_eq(gt_ctx_error(d), "");
  int32_t toks[2 * 33];
  for (int i = 0; i < 66; i++) toks[i] = 999; /* outside the vocabulary */
  ck_assert_int_eq(gt_ctx_train_tokens(d, toks, 2, 32, &l), GT_ERR_ARG);
  ck_assert(strstr(gt_ctx_error(d), "outside the vocabulary"));
  ck_assert(strstr(gt_ctx_error(c), "no preset")); /* c's message is its own */
  gt_ctx_free(c);
  gt_ctx_free(d);
}
END_TEST

typedef struct job {
  int seed;
  double loss[8];
} job;

static void *run_job(void *arg) {
  job *j = arg;
  char s[64];
  snprintf(s, sizeof s, "init_weights_seed=%d", j->seed);
  const char *ov[] = {"dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=32", s,
                      "threads_per_device=1"};
  gt_ctx *c = gt_ctx_new();
  if (gt_ctx_configure(c, "gemma3-tiny", 5, ov) || gt_ctx_init(c) || gt_ctx_train(c, 8, j->loss)) j->loss[0] = NAN;
  gt_ctx_free(c);
  return NULL;
}

START_TEST(test_two_threads_equal_sequential) {
  job a = {1, {0}}, b = {2, {0}}, a2 = {1, {0}}, b2 = {2, {0}};
  run_job(&a);
  run_job(&b);
  pthread_t ta, tb;
  pthread_create(&ta, NULL, run_job, &a2);
  pthread_create(&tb, NULL, run_job, &b2);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ck_assert(memcmp(a.loss, a2.loss, sizeof a.loss) == 0);
  ck_assert(memcmp(b.loss, b2.loss, sizeof b.loss) == 0);
  ck_assert(a.loss[7] != b.loss[7]); /* different seeds, different runs */
}
END_TEST

START_TEST(test_tokens_logits_save_load) {
  gt_ctx *c = tiny();
  int32_t toks[2 * 33];
  uint64_t st = 9;
  for (int i = 0; i < 66; i++) toks[i] = (int32_t)(gt_test_rand_u64(&st) % 260);
  double l0, l1;
  ck_assert(gt_ctx_eval_tokens(c, toks, 2, 32, &l0) == GT_OK);
  for (int i = 0; i < 5; i++) ck_assert(gt_ctx_train_tokens(c, toks, 2, 32, &l1) == GT_OK);
  double l2;
  ck_assert(gt_ctx_eval_tokens(c, toks, 2, 32, &l2) == GT_OK);
  ck_assert_msg(l2 < l0, "eval loss %.4f -> %.4f", l0, l2);
  /* save, keep training; a fresh context loading the file continues identically */
  char *dir = gt_test_mkdtemp("api");
  char path[512];
  snprintf(path, sizeof path, "%s/state.safetensors", dir);
  ck_assert_msg(gt_ctx_save(c, path) == GT_OK, "%s", gt_ctx_error(c));
  double cont[3], resumed[3];
  for (int i = 0; i < 3; i++) ck_assert(gt_ctx_train_tokens(c, toks, 2, 32, &cont[i]) == GT_OK);
  gt_ctx *d = tiny();
  ck_assert_msg(gt_ctx_load(d, path) == GT_OK, "%s", gt_ctx_error(d));
  for (int i = 0; i < 3; i++) ck_assert(gt_ctx_train_tokens(d, toks, 2, 32, &resumed[i]) == GT_OK);
  ck_assert(memcmp(cont, resumed, sizeof cont) == 0);
  /* logits agree too */
  float *la = malloc(sizeof(float) * 32 * 260), *lb = malloc(sizeof(float) * 32 * 260);
  ck_assert(gt_ctx_forward_logits(c, toks, 1, 32, la) == GT_OK);
  ck_assert(gt_ctx_forward_logits(d, toks, 1, 32, lb) == GT_OK);
  ck_assert(memcmp(la, lb, sizeof(float) * 32 * 260) == 0);
  for (int i = 0; i < 32 * 260; i++) ck_assert(isfinite(la[i]));
  /* a model of another shape is refused, naming the tensor */
  const char *ov[] = {"dataset_type=synthetic", "base_emb_dim=32"};
  gt_ctx *e = gt_ctx_new();
  ck_assert(gt_ctx_configure(e, "gemma3-tiny", 2, ov) == GT_OK && gt_ctx_init(e) == GT_OK);
  ck_assert_int_eq(gt_ctx_load(e, path), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(e), "embed_tokens.weight") && strstr(gt_ctx_error(e), "shape"), "%s",
                gt_ctx_error(e));
  free(la), free(lb), free(dir);
  gt_ctx_free(c), gt_ctx_free(d), gt_ctx_free(e);
}
END_TEST

START_TEST(test_create_train_free_cycles) {
  for (int i = 0; i < 5; i++) {
    gt_ctx *c = tiny();
    double l[2];
    ck_assert(gt_ctx_train(c, 2, l) == GT_OK);
    if (i % 2) ck_assert(gt_ctx_configure(c, "gemma3-tiny", 5, tiny_ov) == GT_OK); /* re-configure frees the model */
    gt_ctx_free(c);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("api");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_train_loss_falls);
  tcase_add_test(tc, test_errors_per_context);
  tcase_add_test(tc, test_two_threads_equal_sequential);
  tcase_add_test(tc, test_tokens_logits_save_load);
  tcase_add_test(tc, test_create_train_free_cycles);
  suite_add_tcase(s, tc);
  /* no fork: leaks of every test are the process's, seen by LeakSanitizer */
  return gt_test_run_suite(s, 1);
}
