/* libgemtrain's entry points (include/gemtrain/gemtrain.h) misused: every
 * one with a NULL context, negative and NULL counts and buffers, calls in
 * the wrong order and after an error, and an all-masked batch. Each is
 * refused with GT_ERR_ARG (a message in gt_ctx_error when there is a
 * context), never a crash, a write out of bounds or a NaN returned as OK;
 * and a context that refused a call still works. The sanitizer build
 * (GT_SANITIZE) runs this suite under AddressSanitizer and UBSan, which is
 * where a negative override count used to write past its buffer. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"

static const char *tiny_ov[] = {"dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=16"};

static gt_ctx *tiny(void) {
  gt_ctx *c = gt_ctx_new();
  ck_assert_ptr_nonnull(c);
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 3, tiny_ov) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  return c;
}

static void has(const gt_ctx *c, const char *want) {
  ck_assert_msg(strstr(gt_ctx_error(c), want) != NULL, "error '%s' should say '%s'", gt_ctx_error(c), want);
}

/* Every call but gt_ctx_configure, on a context that cannot take it (NULL,
 * or not configured yet): each refused with GT_ERR_ARG. */
static void every_call_refused(gt_ctx *c) {
  int32_t tok[2 * 17] = {0};
  float logits[4];
  char buf[64];
  int64_t i64;
  double d;
  gt_step_metrics m;
  ck_assert_int_eq(gt_ctx_set(c, "steps", "3"), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get(c, "steps", buf, sizeof buf), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_set_int(c, "steps", 3), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_set_double(c, "learning_rate", 0.1), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", &i64), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get_double(c, "learning_rate", &d), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_init(c), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_num_params(c), 0);
  ck_assert_int_eq(gt_ctx_train(c, 1, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_train_tokens(c, tok, 2, 16, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_last_metrics(c, &m), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_eval_tokens(c, tok, 2, 16, &d), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_forward_logits(c, tok, 1, 1, logits), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_save(c, "/nonexistent/x"), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_load(c, "/nonexistent/x"), GT_ERR_ARG);
}

START_TEST(test_null_context) {
  const char *ov[] = {"steps=1"};
  gt_ctx_free(NULL);
  ck_assert_str_eq(gt_ctx_error(NULL), "no context");
  ck_assert_int_eq(gt_ctx_configure(NULL, "gemma3-tiny", 1, ov), GT_ERR_ARG);
  every_call_refused(NULL);
  /* the two free-standing calls */
  ck_assert_str_eq(gt_rc_str(GT_ERR_ARG), "bad argument");
  ck_assert_str_eq(gt_rc_str((gt_rc)12345), "unknown");
  ck_assert_ptr_nonnull(gt_version());
}
END_TEST

/* The headers' version macros are the library's version. */
START_TEST(test_version_macros) {
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", GT_VERSION_MAJOR, GT_VERSION_MINOR, GT_VERSION_PATCH);
  ck_assert_str_eq(gt_version(), want);
  ck_assert_int_eq(GT_VERSION_NUMBER, GT_VERSION_MAJOR * 10000 + GT_VERSION_MINOR * 100 + GT_VERSION_PATCH);
#if GT_VERSION_NUMBER < 200
#error "gt_step_metrics grew in 0.2.0: the version must say so"
#endif
}
END_TEST

/* Before gt_ctx_configure / gt_ctx_init: every call says which comes first. */
START_TEST(test_out_of_order) {
  gt_ctx *c = gt_ctx_new();
  int32_t tok[2 * 17] = {0};
  double d;
  ck_assert_str_eq(gt_ctx_error(c), "");
  ck_assert_int_eq(gt_ctx_set(c, "steps", "3"), GT_ERR_ARG);
  has(c, "gt_ctx_configure first");
  every_call_refused(c);
  gt_step_metrics m;
  ck_assert_int_eq(gt_ctx_last_metrics(c, &m), GT_ERR_ARG);
  has(c, "gt_ctx_configure first");
  /* configured, not initialised */
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 3, tiny_ov), GT_OK);
  ck_assert_int_eq(gt_ctx_train(c, 1, NULL), GT_ERR_ARG);
  has(c, "gt_ctx_init first");
  int64_t steps;
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", &steps), GT_OK); /* clears the message */
  ck_assert_int_eq(gt_ctx_last_metrics(c, &m), GT_ERR_ARG);
  has(c, "gt_ctx_init first");
  ck_assert_int_eq(gt_ctx_eval_tokens(c, tok, 2, 16, &d), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_save(c, "/nonexistent/x"), GT_ERR_ARG);
  gt_ctx_free(c);
}
END_TEST

/* Negative and NULL counts and arrays in gt_ctx_configure (a negative count
 * used to size the override array below its preset entry). */
START_TEST(test_configure_counts) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"steps=2", NULL};
  for (int n = -1; n >= -3; n -= 2) {
    ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", n, ov), GT_ERR_ARG);
    has(c, "cannot be negative");
  }
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", -2147483647 - 1, ov), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_configure(c, NULL, -1, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 2, NULL), GT_ERR_ARG);
  has(c, "NULL");
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 2, ov), GT_ERR_ARG);
  has(c, "override 1 of 2 is NULL");
  /* a refused configure changes nothing: a context never configured stays
   * so, not half-set */
  int64_t v;
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", &v), GT_ERR_ARG);
  has(c, "gt_ctx_configure first");
  /* n = 0 with a NULL array is no override */
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 0, NULL), GT_OK);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, ov), GT_OK);
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", &v), GT_OK);
  ck_assert_int_eq(v, 2);
  gt_ctx_free(c);
}
END_TEST

/* A refused configure of a context that has trained keeps its
 * configuration, model, optimizer state and position: it trains on as a
 * context that was never asked does, bit for bit. */
START_TEST(test_refused_configure_keeps_model) {
  gt_ctx *c = tiny(), *ref = tiny();
  double a[2], b[2];
  ck_assert(gt_ctx_train(c, 2, a) == GT_OK && gt_ctx_train(ref, 2, b) == GT_OK);
  int64_t n = gt_ctx_num_params(c);
  const char *nul[] = {"steps=2", NULL}, *unknown[] = {"stepz=2"}, *bad[] = {"steps=abc"},
             *lpp[] = {"load_parameters_path=/nonexistent/params.safetensors"};
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", -1, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 2, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 2, nul), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, unknown), GT_ERR_CONFIG);
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, bad), GT_ERR_CONFIG);
  ck_assert_int_eq(gt_ctx_configure(c, "no-such-model-preset", 0, NULL), GT_ERR_CONFIG);
  ck_assert_int_eq(gt_ctx_configure(c, "/nonexistent/config.json", 0, NULL), GT_ERR_IO);
  ck_assert_int_ne(gt_ctx_configure(c, "gemma3-tiny", 1, lpp), GT_OK);
  has(c, "/nonexistent/params.safetensors");
  ck_assert_int_eq(gt_ctx_num_params(c), n);
  int64_t len;
  ck_assert_int_eq(gt_ctx_get_int(c, "max_target_length", &len), GT_OK);
  ck_assert_int_eq(len, 16);
  ck_assert_msg(gt_ctx_train(c, 2, a) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(gt_ctx_train(ref, 2, b) == GT_OK);
  ck_assert_msg(a[0] == b[0] && a[1] == b[1], "after the refusals %.17g %.17g, without them %.17g %.17g", a[0], a[1],
                b[0], b[1]);
  gt_step_metrics m;
  ck_assert(gt_ctx_last_metrics(c, &m) == GT_OK);
  ck_assert_int_eq(m.step, 3);
  /* an accepted configure does free the model */
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 3, tiny_ov), GT_OK);
  ck_assert_int_eq(gt_ctx_num_params(c), 0);
  gt_ctx_free(c), gt_ctx_free(ref);
}
END_TEST

/* NULL keys, values and result pointers of the key calls; typed setters
 * given a key of another type. */
START_TEST(test_key_arguments) {
  gt_ctx *c = gt_ctx_new();
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 3, tiny_ov), GT_OK);
  char buf[8];
  ck_assert_int_eq(gt_ctx_set(c, NULL, "1"), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_set(c, "steps", NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get(c, "steps", NULL, 8), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get(c, "steps", buf, 0), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get(c, NULL, buf, sizeof buf), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_get_double(c, "learning_rate", NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_set_int(c, NULL, 1), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_set_double(c, NULL, 1.0), GT_ERR_ARG);
  /* a buffer too small: cut, NUL-terminated, refused */
  ck_assert_int_eq(gt_ctx_get(c, "model_name", buf, 4), GT_ERR_ARG);
  ck_assert_int_eq(strlen(buf), 3);
  /* a typed setter takes the types its getter reads, and refuses the rest
   * naming the key and its type, changing nothing */
  char before[64], after[64];
  ck_assert_int_eq(gt_ctx_get(c, "run_name", before, sizeof before), GT_OK);
  ck_assert_int_eq(gt_ctx_set_double(c, "run_name", 3.25), GT_ERR_CONFIG);
  has(c, "'run_name' is a string");
  ck_assert_int_eq(gt_ctx_set_int(c, "run_name", 7), GT_ERR_CONFIG);
  has(c, "'run_name' is a string");
  ck_assert_int_eq(gt_ctx_get(c, "run_name", after, sizeof after), GT_OK);
  ck_assert_str_eq(before, after);
  ck_assert_int_eq(gt_ctx_set_int(c, "learning_rate", 1), GT_ERR_CONFIG);
  has(c, "'learning_rate' is a float");
  has(c, "gt_ctx_set_double");
  ck_assert_int_eq(gt_ctx_set_int(c, "dataset_type", 1), GT_ERR_CONFIG);
  has(c, "'dataset_type' is an enumeration");
  ck_assert_int_eq(gt_ctx_set_double(c, "packing", 1.0), GT_ERR_CONFIG);
  has(c, "'packing' is a boolean");
  /* the types they take */
  double lr;
  ck_assert_int_eq(gt_ctx_set_double(c, "learning_rate", 0.25), GT_OK);
  ck_assert_int_eq(gt_ctx_get_double(c, "learning_rate", &lr), GT_OK);
  ck_assert(lr == 0.25);
  ck_assert_int_eq(gt_ctx_set_double(c, "steps", 9.0), GT_OK);
  ck_assert_int_eq(gt_ctx_set_double(c, "steps", 9.5), GT_ERR_CONFIG);
  ck_assert_int_eq(gt_ctx_set_int(c, "packing", 0), GT_OK);
  /* and the context still works */
  ck_assert_int_eq(gt_ctx_set_int(c, "steps", 7), GT_OK);
  int64_t v;
  ck_assert_int_eq(gt_ctx_get_int(c, "steps", &v), GT_OK);
  ck_assert_int_eq(v, 7);
  ck_assert_str_eq(gt_ctx_error(c), "");
  gt_ctx_free(c);
}
END_TEST

/* Token calls: NULL and negative shapes, batches other than the global
 * one, out-of-range ids, NULL outputs, negative step counts; an all-masked
 * batch is refused by both train and eval (its mean loss is 0 / 0), and a
 * refused call leaves a working context whose state did not move. */
START_TEST(test_token_calls) {
  gt_ctx *c = tiny();
  enum { B = 2, S = 16 };
  int32_t tok[B * (S + 1)];
  for (int i = 0; i < B * (S + 1); i++) tok[i] = 5 + i % 50;
  float *logits = malloc(sizeof(float) * 4 * 262144);
  double loss = 0.0, losses[2];
  ck_assert_int_eq(gt_ctx_train(c, -1, losses), GT_ERR_ARG);
  has(c, "cannot be negative");
  ck_assert_int_eq(gt_ctx_train(c, 0, NULL), GT_OK);
  const int shapes[][2] = {{-1, S}, {B, -1}, {0, S}, {B, 0}, {B, S + 1}, {-2147483647 - 1, S}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    ck_assert_int_eq(gt_ctx_train_tokens(c, tok, shapes[k][0], shapes[k][1], &loss), GT_ERR_ARG);
    ck_assert_int_eq(gt_ctx_eval_tokens(c, tok, shapes[k][0], shapes[k][1], &loss), GT_ERR_ARG);
    ck_assert_int_eq(gt_ctx_forward_logits(c, tok, shapes[k][0], shapes[k][1], logits), GT_ERR_ARG);
  }
  ck_assert_int_eq(gt_ctx_train_tokens(c, NULL, B, S, &loss), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_eval_tokens(c, NULL, B, S, &loss), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_eval_tokens(c, tok, B, S, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_forward_logits(c, NULL, 1, S, logits), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_forward_logits(c, tok, 1, S, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_save(c, NULL), GT_ERR_ARG);
  ck_assert_int_eq(gt_ctx_load(c, NULL), GT_ERR_ARG);
  /* an empty path is refused before anything is written or read */
  ck_assert_int_eq(gt_ctx_save(c, ""), GT_ERR_ARG);
  has(c, "gt_ctx_save: the path is empty");
  ck_assert_int_eq(gt_ctx_load(c, ""), GT_ERR_ARG);
  has(c, "gt_ctx_load: the path is empty");
  /* a step is the configured step: its batch is the global batch (2), and
   * an eval holds at most that many rows */
  int32_t three[3 * (S + 1)];
  for (int i = 0; i < 3 * (S + 1); i++) three[i] = 5 + i % 50;
  ck_assert_int_eq(gt_ctx_train_tokens(c, three, 1, S, &loss), GT_ERR_ARG);
  has(c, "gt_ctx_train_tokens: 1 rows; expected the global batch of 2");
  ck_assert_int_eq(gt_ctx_train_tokens(c, three, 3, S, &loss), GT_ERR_ARG);
  has(c, "gt_ctx_train_tokens: 3 rows; expected the global batch of 2");
  ck_assert_int_eq(gt_ctx_eval_tokens(c, three, 3, S, &loss), GT_ERR_ARG);
  has(c, "gt_ctx_eval_tokens: 3 rows; expected at most the global batch of 2");
  double one;
  ck_assert_msg(gt_ctx_eval_tokens(c, three, 1, S, &one) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(isfinite(one) && one > 0);
  /* ids past the vocabulary (a negative id is a pad, tests/test_api.c) */
  tok[3] = 260;
  ck_assert_int_eq(gt_ctx_train_tokens(c, tok, B, S, &loss), GT_ERR_ARG);
  has(c, "token [0, 3] = 260 is outside the vocabulary 0..259");
  tok[3] = 1 << 30;
  ck_assert_int_eq(gt_ctx_eval_tokens(c, tok, B, S, &loss), GT_ERR_ARG);
  tok[3] = 8;
  /* all targets masked (every id after each row's first a pad) */
  int32_t masked[B * 4] = {5, -1, -1, -1, 6, -1, -1, -1};
  loss = 123.0;
  ck_assert_int_eq(gt_ctx_eval_tokens(c, masked, B, 3, &loss), GT_ERR_ARG);
  has(c, "masked");
  ck_assert(loss == 123.0);
  ck_assert_int_eq(gt_ctx_train_tokens(c, masked, B, 3, &loss), GT_ERR_ARG);
  has(c, "masked");
  gt_step_metrics m;
  ck_assert_int_eq(gt_ctx_train(c, 0, NULL), GT_OK); /* clears the message */
  ck_assert_int_eq(gt_ctx_last_metrics(c, &m), GT_ERR_ARG); /* no step was taken */
  has(c, "gt_ctx_last_metrics: no step since gt_ctx_init");
  ck_assert_int_eq(gt_ctx_last_metrics(c, NULL), GT_ERR_ARG);
  has(c, "gt_ctx_last_metrics: no place for the metrics");
  /* after all that, the context trains and evaluates */
  double e0;
  ck_assert_msg(gt_ctx_eval_tokens(c, tok, B, S, &e0) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(isfinite(e0) && e0 > 0);
  ck_assert_msg(gt_ctx_train_tokens(c, tok, B, S, &loss) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(loss == e0); /* the refusals moved nothing: the first step's loss is the untrained eval */
  ck_assert_int_eq(gt_ctx_last_metrics(c, &m), GT_OK);
  ck_assert_int_eq(m.step, 0);
  ck_assert_str_eq(gt_ctx_error(c), "");
  free(logits);
  gt_ctx_free(c);
}
END_TEST

/* After a failed init the context is configured but holds no model, and a
 * refused configure keeps that configuration; after a failed load it keeps
 * its state. */
START_TEST(test_after_errors) {
  gt_ctx *c = gt_ctx_new();
  const char *bad[] = {"dataset_type=text", "dataset_path=/nonexistent/corpus.txt", "max_target_length=16"};
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 3, bad), GT_OK);
  ck_assert_int_ne(gt_ctx_init(c), GT_OK);
  ck_assert_str_ne(gt_ctx_error(c), "");
  ck_assert_int_eq(gt_ctx_num_params(c), 0);
  ck_assert_int_eq(gt_ctx_train(c, 1, NULL), GT_ERR_ARG);
  has(c, "gt_ctx_init first");
  /* a refused configure keeps the configuration: init fails as before */
  ck_assert_int_eq(gt_ctx_configure(c, "no-such-model-preset", 0, NULL), GT_ERR_CONFIG);
  ck_assert_int_ne(gt_ctx_init(c), GT_OK);
  has(c, "/nonexistent/corpus.txt");
  gt_ctx_free(c);
  c = tiny();
  ck_assert_int_ne(gt_ctx_load(c, "/nonexistent/dir/params.safetensors"), GT_OK);
  ck_assert_str_ne(gt_ctx_error(c), "");
  double l[1];
  ck_assert_msg(gt_ctx_train(c, 1, l) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(isfinite(l[0]));
  gt_ctx_free(c);
}
END_TEST

static Suite *misuse_suite(void) {
  Suite *s = suite_create("api_misuse");
  TCase *tc = gt_test_tcase(s, "misuse");
  tcase_add_test(tc, test_null_context);
  tcase_add_test(tc, test_version_macros);
  tcase_add_test(tc, test_out_of_order);
  tcase_add_test(tc, test_configure_counts);
  tcase_add_test(tc, test_refused_configure_keeps_model);
  tcase_add_test(tc, test_key_arguments);
  tcase_add_test(tc, test_token_calls);
  tcase_add_test(tc, test_after_errors);
  return s;
}

int main(void) { return gt_test_run_suite(misuse_suite(), 0); }
