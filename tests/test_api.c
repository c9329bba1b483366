/* libgemtrain's API as a consumer uses it: train a tiny model, errors by
 * context, two contexts in two threads equal to one after the other,
 * save/load resuming bit-exactly, and create/train/free cycles (run without
 * forking, so the sanitizer build's LeakSanitizer checks them at exit). */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"
#include "ckpt/paramfile.h"
#include "ckpt/safetensors.h"
#include "config/config.h"
#include "model/model.h"
#include "train/api_internal.h"
#include "train/train.h"

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

/* gt_ctx_num_params counts elements: a base stored as bf16, int8 or nf4
 * takes fewer words of the flat buffer but has the same parameters, the
 * ones gemtrain's own count from the config gives */
START_TEST(test_num_params_any_storage) {
  const char *q[] = {"float32", "bfloat16", "int8", "nf4"};
  int64_t first = 0;
  for (int i = 0; i < 4; i++) {
    char qt[64];
    snprintf(qt, sizeof qt, "lora_weight_qtype=%s", q[i]);
    const char *ov[] = {"dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=32",
                        "enable_lora=true", "lora_rank=4", qt};
    gt_ctx *c = gt_ctx_new();
    ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 6, ov) == GT_OK, "%s", gt_ctx_error(c));
    ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
    int64_t n = gt_ctx_num_params(c);
    if (i == 0) {
      first = n;
      ck_assert_int_eq(n, gt_model_count_params(gt__ctx_config(c)));
    }
    ck_assert_msg(n == first, "lora_weight_qtype=%s: %lld parameters, float32's %lld", q[i], (long long)n,
                  (long long)first);
    gt_ctx_free(c);
  }
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

/* ---------- contexts on two threads, one of them remade ---------- */

/* The context of thread A computes on the host (forward_logits, on its own
 * team of 2) and through its device (eval) over and over, while thread B
 * makes, initialises, uses and frees contexts of other thread counts and
 * device counts. Each context computes on a team of its own: one's init
 * once replaced the process-wide team while the other's kernels ran on it
 * (a hang, or a read of freed memory). Every result is compared with the
 * same context's alone, bit for bit. */
enum { RACE_SEQ = 16, RACE_VOCAB = 260, RACE_B_CFGS = 4, RACE_B_ROUNDS = 3 };
static const char *race_base[] = {"dataset_type=synthetic", "base_num_decoder_layers=2", "layer_pattern=LG",
                                  "max_target_length=16", "per_device_batch_size=1"};
static const char *race_b_cfg[RACE_B_CFGS][2] = {{"num_devices=1", "threads_per_device=0"},
                                                 {"num_devices=2", "threads_per_device=0"},
                                                 {"num_devices=1", "threads_per_device=1"},
                                                 {"num_devices=2", "threads_per_device=2"}};

typedef struct race {
  int32_t tok[RACE_SEQ + 1];
  float want_a[RACE_SEQ * RACE_VOCAB], want_b[RACE_B_CFGS][RACE_SEQ * RACE_VOCAB];
  double want_eval;
  _Atomic int b_done;
  int a_runs, a_wrong, b_runs, b_wrong;
  char a_err[GT_ERR_MSG_MAX], b_err[GT_ERR_MSG_MAX];
} race;

/* A context of the race's base keys and extra ones, initialised (NULL with
 * its message in err when refused). */
static gt_ctx *race_ctx(int n_extra, const char *const *extra, char *err) {
  const char *ov[8];
  int n = 0;
  for (int i = 0; i < 5; i++) ov[n++] = race_base[i];
  for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
  gt_ctx *c = gt_ctx_new();
  if (gt_ctx_configure(c, "gemma3-tiny", n, ov) || gt_ctx_init(c)) {
    snprintf(err, GT_ERR_MSG_MAX, "%s", gt_ctx_error(c));
    gt_ctx_free(c);
    return NULL;
  }
  return c;
}

static const char *race_a_extra[] = {"threads_per_device=2"};

static void *race_a(void *arg) {
  race *r = arg;
  gt_ctx *c = race_ctx(1, race_a_extra, r->a_err);
  float *lg = malloc(sizeof r->want_a);
  if (!c || !lg) {
    free(lg);
    gt_ctx_free(c);
    return NULL;
  }
  /* at least as long as B makes contexts */
  while (r->a_runs < 20 || !atomic_load(&r->b_done)) {
    double ev = 0;
    if (gt_ctx_forward_logits(c, r->tok, 1, RACE_SEQ, lg) || gt_ctx_eval_tokens(c, r->tok, 1, RACE_SEQ, &ev)) {
      snprintf(r->a_err, sizeof r->a_err, "%s", gt_ctx_error(c));
      break;
    }
    r->a_wrong += memcmp(lg, r->want_a, sizeof r->want_a) != 0 || memcmp(&ev, &r->want_eval, sizeof ev) != 0;
    r->a_runs++;
  }
  free(lg);
  gt_ctx_free(c);
  return NULL;
}

static void *race_b(void *arg) {
  race *r = arg;
  float *lg = malloc(sizeof r->want_a);
  for (int k = 0; lg && k < RACE_B_CFGS * RACE_B_ROUNDS; k++) {
    int v = k % RACE_B_CFGS;
    gt_ctx *c = race_ctx(2, race_b_cfg[v], r->b_err);
    if (!c) break;
    gt_rc rc = gt_ctx_forward_logits(c, r->tok, 1, RACE_SEQ, lg);
    if (rc) snprintf(r->b_err, sizeof r->b_err, "%s", gt_ctx_error(c));
    gt_ctx_free(c);
    if (rc) break;
    r->b_wrong += memcmp(lg, r->want_b[v], sizeof r->want_a) != 0;
    r->b_runs++;
  }
  free(lg);
  atomic_store(&r->b_done, 1);
  return NULL;
}

START_TEST(test_two_threads_host_team) {
  race *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  for (int i = 0; i <= RACE_SEQ; i++) r->tok[i] = 4 + (i * 37) % 250;
  /* each context alone first */
  char err[GT_ERR_MSG_MAX];
  gt_ctx *c = race_ctx(1, race_a_extra, err);
  ck_assert_msg(c != NULL, "%s", err);
  ck_assert(gt_ctx_forward_logits(c, r->tok, 1, RACE_SEQ, r->want_a) == GT_OK);
  ck_assert(gt_ctx_eval_tokens(c, r->tok, 1, RACE_SEQ, &r->want_eval) == GT_OK);
  gt_ctx_free(c);
  for (int v = 0; v < RACE_B_CFGS; v++) {
    c = race_ctx(2, race_b_cfg[v], err);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert(gt_ctx_forward_logits(c, r->tok, 1, RACE_SEQ, r->want_b[v]) == GT_OK);
    gt_ctx_free(c);
  }
  pthread_t ta, tb;
  ck_assert(pthread_create(&ta, NULL, race_a, r) == 0);
  ck_assert(pthread_create(&tb, NULL, race_b, r) == 0);
  /* A hang is the failure this test looks for: a bound far above the
   * seconds the race takes on a busy machine ends it with a message
   * instead of ctest's timeout. */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 600;
  ck_assert_msg(pthread_timedjoin_np(tb, NULL, &until) == 0 && pthread_timedjoin_np(ta, NULL, &until) == 0,
                "two contexts on two threads did not finish in 600 s (A ran %d times, B %d): a deadlock", r->a_runs,
                r->b_runs);
  ck_assert_msg(!r->a_err[0] && !r->b_err[0], "A: '%s', B: '%s'", r->a_err, r->b_err);
  ck_assert_int_eq(r->b_runs, RACE_B_CFGS * RACE_B_ROUNDS);
  ck_assert_int_ge(r->a_runs, 20);
  ck_assert_msg(r->a_wrong == 0 && r->b_wrong == 0, "results unlike each context's alone: A %d of %d, B %d of %d",
                r->a_wrong, r->a_runs, r->b_wrong, r->b_runs);
  free(r);
}
END_TEST

/* A negative id is a pad, wherever it is: a row padded at its end has the
 * loss, the logits and the training step of the row without the padding
 * (the targets after its last token masked, and the pads, read as inputs,
 * seen only by those masked positions). */
START_TEST(test_padded_rows) {
  char err[GT_ERR_MSG_MAX];
  gt_ctx *c = race_ctx(0, NULL, err), *d = race_ctx(0, NULL, err);
  ck_assert_msg(c && d, "%s", err);
  int32_t row[5] = {1, 10, 11, 12, 13};
  int32_t pad[9] = {1, 10, 11, 12, 13, -1, -1, -1, -1}, pad5[9] = {1, 10, 11, 12, 13, -5, -1, -7, -1};
  double l4, l8, l8b;
  ck_assert_msg(gt_ctx_eval_tokens(c, row, 1, 4, &l4) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_eval_tokens(c, pad, 1, 8, &l8) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_eval_tokens(c, pad5, 1, 8, &l8b) == GT_OK, "%s", gt_ctx_error(c));
  /* the same loss as the unpadded row, up to the rounding of products of
   * another row count (bit for bit on the AVX2 and AVX-512 kernels, not on
   * the portable copy); the two paddings are the same row */
  ck_assert_msg(l8 == l8b && fabs(l8 - l4) <= 1e-6 * l4, "padded %.17g and %.17g, unpadded %.17g", l8, l8b, l4);
  /* the logits: a pad input reads as id 0 (the same bits as a row of
   * zeros there), and the positions before it are the unpadded row's (up
   * to the rounding of products of another row count) */
  static float lr[4 * RACE_VOCAB], lp[8 * RACE_VOCAB], lz[8 * RACE_VOCAB];
  int32_t zeros[8] = {1, 10, 11, 12, 13, 0, 0, 0};
  ck_assert(gt_ctx_forward_logits(c, row, 1, 4, lr) == GT_OK);
  ck_assert_msg(gt_ctx_forward_logits(c, pad5, 1, 8, lp) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(gt_ctx_forward_logits(c, zeros, 1, 8, lz) == GT_OK);
  ck_assert(memcmp(lp, lz, sizeof lp) == 0);
  ck_assert_msg(gt_test_max_abs_err(lr, lp, 4 * RACE_VOCAB) <= 1e-5 * gt_test_max_abs(lr, 4 * RACE_VOCAB),
                "first 4 positions: %g apart", gt_test_max_abs_err(lr, lp, 4 * RACE_VOCAB));
  /* a step on the padded row is the step on the row */
  double sa, sb, ea, eb;
  ck_assert_msg(gt_ctx_train_tokens(c, pad, 1, 8, &sa) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_train_tokens(d, row, 1, 4, &sb) == GT_OK, "%s", gt_ctx_error(d));
  gt_step_metrics ma, mb;
  ck_assert(gt_ctx_last_metrics(c, &ma) == GT_OK && gt_ctx_last_metrics(d, &mb) == GT_OK);
  ck_assert_int_eq(ma.total_weights, 4);
  ck_assert_int_eq(mb.total_weights, 4);
  ck_assert_msg(sa == l8 && sb == l4 && fabs(sa - sb) <= 1e-6 * sb, "step loss padded %.17g, unpadded %.17g, eval %.17g",
                sa, sb, l4);
  /* the warmup's first rate is 0: the next steps move the parameters, by
   * gradients summed over 8 or 4 positions (the same up to rounding) */
  for (int k = 0; k < 2; k++) {
    ck_assert(gt_ctx_train_tokens(c, pad, 1, 8, &sa) == GT_OK && gt_ctx_train_tokens(d, row, 1, 4, &sb) == GT_OK);
    ck_assert_msg(fabs(sa - sb) <= 1e-6 * sb, "step %d: loss padded %.17g, unpadded %.17g", k + 1, sa, sb);
  }
  ck_assert(gt_ctx_eval_tokens(c, row, 1, 4, &ea) == GT_OK && gt_ctx_eval_tokens(d, row, 1, 4, &eb) == GT_OK);
  ck_assert_msg(fabs(ea - eb) <= 1e-6 * eb && ea < l4 - 0.01,
                "after the steps: padded %.17g, unpadded %.17g (before %.17g)", ea, eb, l4);
  /* an id past the vocabulary is still refused, as input or target */
  int32_t big[9] = {1, 10, 11, 12, 13, RACE_VOCAB, -1, -1, -1};
  ck_assert_int_eq(gt_ctx_eval_tokens(c, big, 1, 8, &l8), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "token [0, 5] = 260 is outside the vocabulary"), "%s", gt_ctx_error(c));
  big[5] = -1, big[8] = RACE_VOCAB;
  ck_assert_int_eq(gt_ctx_eval_tokens(c, big, 1, 8, &l8), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "token [0, 8] = 260"), "%s", gt_ctx_error(c));
  gt_ctx_free(c), gt_ctx_free(d);
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
  /* a model of another shape is refused, naming the key that differs */
  const char *ov[] = {"dataset_type=synthetic", "base_emb_dim=32"};
  gt_ctx *e = gt_ctx_new();
  ck_assert(gt_ctx_configure(e, "gemma3-tiny", 2, ov) == GT_OK && gt_ctx_init(e) == GT_OK);
  ck_assert_int_eq(gt_ctx_load(e, path), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(e), "base_emb_dim = 64 in the file, 32 here"), "%s", gt_ctx_error(e));
  free(la), free(lb), free(dir);
  gt_ctx_free(c), gt_ctx_free(d), gt_ctx_free(e);
}
END_TEST

/* ---------- save / load: everything the next steps depend on ---------- */

enum { SL_BEFORE = 8, SL_AFTER = 6 };

/* Step k's tokens, [2, 33]: a batch of its own per step, so the losses move
 * and the spike guard has something to decide. */
static void step_tokens(int k, int32_t *t) {
  uint64_t st = 1000 + (uint64_t)k * 77;
  gt_test_fill_ids(t, 2 * 33, &st, 4, 204);
}

static gt_ctx *tiny_with(int n_extra, const char *const *extra) {
  const char *ov[16];
  int n = 0;
  for (int i = 0; i < 5; i++) ov[n++] = tiny_ov[i];
  for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
  gt_ctx *c = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", n, ov) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  return c;
}

/* One step of step k's tokens, or of the context's data (from_data). */
static void sl_step(gt_ctx *c, int k, int from_data, double *loss, gt_step_metrics *mt) {
  int32_t t[2 * 33];
  step_tokens(k, t);
  gt_rc rc = from_data ? gt_ctx_train(c, 1, loss) : gt_ctx_train_tokens(c, t, 2, 32, loss);
  ck_assert_msg(rc == GT_OK, "%s", gt_ctx_error(c));
  ck_assert(gt_ctx_last_metrics(c, mt) == GT_OK);
}

/* A context trains SL_BEFORE steps, saves, and trains SL_AFTER more; a
 * fresh context that loads the file trains the same SL_AFTER steps. Every
 * one of them is the same in both, bit for bit: loss, gradient norm, step
 * index, spike decision and steps not applied. Returns the spikes the
 * guard skipped after the save. */
static int save_load_resumes(int n_extra, const char *const *extra, int from_data) {
  gt_ctx *c = tiny_with(n_extra, extra);
  double l;
  gt_step_metrics mt;
  for (int k = 0; k < SL_BEFORE; k++) sl_step(c, k, from_data, &l, &mt);
  char *dir = gt_test_mkdtemp("api_resume");
  char path[600];
  snprintf(path, sizeof path, "%s/state.safetensors", dir);
  ck_assert_msg(gt_ctx_save(c, path) == GT_OK, "%s", gt_ctx_error(c));
  gt_ctx *d = tiny_with(n_extra, extra);
  ck_assert_msg(gt_ctx_load(d, path) == GT_OK, "%s", gt_ctx_error(d));
  int spikes = 0;
  for (int k = SL_BEFORE; k < SL_BEFORE + SL_AFTER; k++) {
    double a, b;
    gt_step_metrics ma, mb;
    sl_step(c, k, from_data, &a, &ma);
    sl_step(d, k, from_data, &b, &mb);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0 && memcmp(&ma.grad_norm, &mb.grad_norm, sizeof a) == 0,
                  "step %d: loss %.17g grad_norm %.17g continued, %.17g %.17g loaded", k, a, ma.grad_norm, b,
                  mb.grad_norm);
    ck_assert_msg(ma.step == k && mb.step == k, "step %d: step index %lld continued, %lld loaded", k,
                  (long long)ma.step, (long long)mb.step);
    ck_assert_msg(ma.spike_skipped == mb.spike_skipped && ma.skipped_steps == mb.skipped_steps,
                  "step %d: spike_skipped %d (skipped_steps %lld) continued, %d (%lld) loaded", k, ma.spike_skipped,
                  (long long)ma.skipped_steps, mb.spike_skipped, (long long)mb.skipped_steps);
    spikes += ma.spike_skipped;
  }
  gt_ctx_free(c), gt_ctx_free(d);
  gt_test_rm_rf(dir);
  free(dir);
  return spikes;
}

/* The spike guard's window and count: with a factor of 0 every step above
 * the window's mean is a spike, so the guard skips steps after the save,
 * and a window that did not come back (an empty one) decides otherwise. */
START_TEST(test_save_load_spike_guard) {
  const char *g[] = {"skip_step_on_spikes=true", "skip_step_interval=4", "skip_step_scaling_factor=0",
                     "gradient_clipping_threshold=0", "warmup_steps_fraction=0"};
  int spikes = save_load_resumes(5, g, 0);
  ck_assert_msg(spikes >= 1 && spikes < SL_AFTER, "%d of the %d steps after the save skipped", spikes, SL_AFTER);
}
END_TEST

/* The adapters' dropout masks are seeded by the step index, which the file
 * carries. */
START_TEST(test_save_load_lora_dropout) {
  const char *lo[] = {"enable_lora=true", "lora_rank=4", "lora_dropout=0.5", "warmup_steps_fraction=0"};
  save_load_resumes(4, lo, 0);
}
END_TEST

/* A parameter file for c's model (initial parameters, zero moments) with
 * AdamW step opt_step and the training state ts (NULL: none). */
static void write_file(gt_ctx *c, const char *path, int64_t opt_step, const gt_paramfile_train *ts) {
  const gt_config *cfg = gt__ctx_config(c);
  gt_model m;
  gt_err e;
  ck_assert(gt_model_build(&m, cfg, &e) == GT_OK);
  gt_mem mem;
  gt_mem_init(&mem);
  ck_assert(gt_model_alloc_inference(&m, &mem, &e) == GT_OK);
  ck_assert(gt_model_init_params(&m, 1, 1.0) == GT_OK);
  float *mom = calloc((size_t)m.n_params * 2, sizeof(float));
  ck_assert(mom != NULL);
  ck_assert_msg(gt_paramfile_write_train(path, &m, cfg, mom, mom + m.n_params, opt_step, ts, &e) == GT_OK, "%s",
                e.msg);
  free(mom);
  gt_model_free(&m);
}

/* The next step's index and steps not applied. */
static void next_step(gt_ctx *c, int64_t *step, int64_t *skipped) {
  double l;
  gt_step_metrics mt;
  ck_assert_msg(gt_ctx_train(c, 1, &l) == GT_OK && gt_ctx_last_metrics(c, &mt) == GT_OK, "%s", gt_ctx_error(c));
  *step = mt.step, *skipped = mt.skipped_steps;
}

/* A file without the training state (gemtrain convert's, or written before
 * gt_ctx_save recorded it) still loads: the step index is its AdamW step,
 * the spike window empty. A training state that contradicts the file (fewer
 * steps than AdamW updates, a window longer than its count) is refused
 * naming the file and field, and changes nothing. */
START_TEST(test_load_training_state_absent_or_bad) {
  gt_ctx *c = tiny();
  char *dir = gt_test_mkdtemp("api_tstate");
  char path[600];
  snprintf(path, sizeof path, "%s/p.safetensors", dir);
  int64_t step, skipped;
  write_file(c, path, 5, NULL);
  ck_assert_msg(gt_ctx_load(c, path) == GT_OK, "%s", gt_ctx_error(c));
  next_step(c, &step, &skipped);
  ck_assert_int_eq(step, 5);
  gt_paramfile_train *ts = calloc(1, sizeof *ts);
  ts->step = 3; /* 3 steps for 5 AdamW updates */
  write_file(c, path, 5, ts);
  ck_assert_int_eq(gt_ctx_load(c, path), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(c), path) && strstr(gt_ctx_error(c), "training_state field 'step' = 3"), "%s",
                gt_ctx_error(c));
  ts->step = 7;
  ts->spike.count = 2, ts->spike.n = 3;
  write_file(c, path, 5, ts);
  ck_assert_int_eq(gt_ctx_load(c, path), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(c), "training_state spike_guard field 'loss'"), "%s", gt_ctx_error(c));
  next_step(c, &step, &skipped); /* nothing changed */
  ck_assert_int_eq(step, 6);
  /* a whole record: the step index and the steps not applied come back */
  ts->spike.count = 3, ts->spike.skipped_steps = 2;
  write_file(c, path, 5, ts);
  ck_assert_msg(gt_ctx_load(c, path) == GT_OK, "%s", gt_ctx_error(c));
  next_step(c, &step, &skipped);
  ck_assert_int_eq(step, 7);
  ck_assert_int_eq(skipped, 2);
  free(ts);
  gt_ctx_free(c);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* gt_ctx_train reads the context's data: the file carries its position. */
START_TEST(test_save_load_data_position) {
  char *dir = gt_test_mkdtemp("api_data");
  char cp[600], dp[700];
  snprintf(cp, sizeof cp, "%s/corpus.txt", dir);
  FILE *fp = fopen(cp, "w");
  ck_assert_ptr_nonnull(fp);
  static const char *w[] = {"in", "the", "beginning", "was", "light", "and", "waters", "divided", "firmament"};
  uint64_t st = 5;
  for (int i = 0; i < 1500; i++) fprintf(fp, "%s%s", w[gt_test_rand_u64(&st) % 9], i % 11 == 10 ? ".\n" : " ");
  fclose(fp);
  snprintf(dp, sizeof dp, "dataset_path=%s", cp);
  const char *tx[] = {"dataset_type=text", dp, "eval_split_fraction=0.05", "warmup_steps_fraction=0"};
  save_load_resumes(4, tx, 1);
  /* a position past this data's rows is refused, naming the file, and the
   * context reads on where it was */
  gt_ctx *c = tiny_with(4, tx), *ref = tiny_with(4, tx);
  double la[2], lb[2];
  ck_assert(gt_ctx_train(c, 1, la) == GT_OK && gt_ctx_train(ref, 1, lb) == GT_OK);
  char path[700];
  snprintf(path, sizeof path, "%s/far.safetensors", dir);
  gt_paramfile_train *ts = calloc(1, sizeof *ts);
  ts->step = 1, ts->data.cursor = 1000000;
  write_file(c, path, 1, ts);
  ck_assert_int_eq(gt_ctx_load(c, path), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), path) && strstr(gt_ctx_error(c), "data_cursor = 1000000"), "%s",
                gt_ctx_error(c));
  ck_assert(gt_ctx_train(c, 1, la + 1) == GT_OK && gt_ctx_train(ref, 1, lb + 1) == GT_OK);
  ck_assert_msg(la[1] == lb[1], "after the refused load %.17g, without it %.17g", la[1], lb[1]);
  free(ts);
  gt_ctx_free(c), gt_ctx_free(ref);
  gt_test_rm_rf(dir);
  free(dir);
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

/* One trainer: gemtrain train's loop (gt_train) and a gt_ctx, given the same
 * config of gemma4-tiny-moe (MoE layers, so the load-balance loss is in the
 * loss), give the same losses, bit for bit, step by step — on one device
 * and on a 2-device expert-parallel mesh. */
typedef struct losses {
  double loss[8], lm[8], lb[8];
  int n;
} losses;

static void record(const gt_step_metrics *sm, void *ctx) {
  losses *l = ctx;
  l->loss[l->n] = sm->loss, l->lm[l->n] = sm->lm_loss, l->lb[l->n] = sm->moe_lb_loss;
  l->n++;
}

static void ctx_equals_train(int n_extra, const char *const *extra) {
  char *dir = gt_test_mkdtemp("api_one_trainer");
  char bo[600];
  snprintf(bo, sizeof bo, "base_output_directory=%s", dir);
  const char *ov[16] = {"dataset_type=synthetic", "steps=8", "learning_rate=0.01", "max_target_length=16",
                        "sample_tokens=0", "enable_checkpointing=false", "run_name=cli", bo};
  int n = 8;
  for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
  /* gemtrain train's path */
  gt_ctx *cfgc = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(cfgc, "gemma4-tiny-moe", n, ov) == GT_OK, "%s", gt_ctx_error(cfgc));
  losses a = {{0}, {0}, {0}, 0};
  gt_train_opts o = {.test_after_step = record, .test_ctx = &a};
  gt_train_result res;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_train(gt__ctx_config(cfgc), &o, &res, &e) == GT_OK, "%s", e.msg);
  gt_ctx_free(cfgc);
  ck_assert_int_eq(a.n, 8);
  /* the library's */
  gt_ctx *c = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(c, "gemma4-tiny-moe", n, ov) == GT_OK, "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  for (int s = 0; s < 8; s++) {
    double l;
    ck_assert_msg(gt_ctx_train(c, 1, &l) == GT_OK, "%s", gt_ctx_error(c));
    gt_step_metrics mt;
    ck_assert(gt_ctx_last_metrics(c, &mt) == GT_OK);
    ck_assert_msg(l == a.loss[s] && mt.lm_loss == a.lm[s] && mt.moe_lb_loss == a.lb[s],
                  "step %d: gt_ctx %.17g (lm %.17g, lb %.17g), gemtrain train %.17g (lm %.17g, lb %.17g)", s, l,
                  mt.lm_loss, mt.moe_lb_loss, a.loss[s], a.lm[s], a.lb[s]);
    ck_assert_msg(a.lb[s] > 0 && mt.has_moe, "step %d: the load-balance loss is part of the loss", s);
  }
  gt_ctx_free(c);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}

START_TEST(test_ctx_equals_train_moe) {
  const char *one[] = {"per_device_batch_size=2"};
  ctx_equals_train(1, one);
}
END_TEST

START_TEST(test_ctx_equals_train_moe_expert_parallel) {
  const char *two[] = {"num_devices=2", "ici_expert_parallelism=2", "per_device_batch_size=1"};
  ctx_equals_train(3, two);
}
END_TEST

/* gt_ctx honours load_parameters_path as gemtrain train does: a context
 * pointed at another context's saved parameters starts from them (its
 * first eval loss is the saver's), and its config names the loaded model. */
START_TEST(test_ctx_load_parameters_path) {
  gt_ctx *a = tiny();
  double l[3];
  ck_assert(gt_ctx_train(a, 3, l) == GT_OK);
  char *dir = gt_test_mkdtemp("api_lpp");
  char path[600], lp[700];
  snprintf(path, sizeof path, "%s/params.safetensors", dir);
  ck_assert_msg(gt_ctx_save(a, path) == GT_OK, "%s", gt_ctx_error(a));
  int32_t tok[2 * 33];
  for (int i = 0; i < 2 * 33; i++) tok[i] = 4 + (i * 7) % 200;
  double want, got, fresh;
  ck_assert(gt_ctx_eval_tokens(a, tok, 2, 32, &want) == GT_OK);
  snprintf(lp, sizeof lp, "load_parameters_path=%s", path);
  const char *ov[] = {"dataset_type=synthetic", "learning_rate=0.01", "per_device_batch_size=2",
                      "max_target_length=32", lp};
  gt_ctx *b = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(b, NULL, 5, ov) == GT_OK, "%s", gt_ctx_error(b));
  char mn[64];
  ck_assert(gt_ctx_get(b, "model_name", mn, sizeof mn) == GT_OK);
  ck_assert_msg(strstr(mn, "gemma3-tiny"), "model_name %s", mn);
  ck_assert_msg(gt_ctx_init(b) == GT_OK, "%s", gt_ctx_error(b));
  ck_assert(gt_ctx_eval_tokens(b, tok, 2, 32, &got) == GT_OK);
  ck_assert_msg(got == want, "loaded %.17g, saved %.17g", got, want);
  gt_ctx *f = tiny();
  ck_assert(gt_ctx_eval_tokens(f, tok, 2, 32, &fresh) == GT_OK);
  ck_assert_msg(fresh != want, "the fresh model must differ from the trained one");
  /* a model key that contradicts the file is refused, naming both values */
  const char *bad[] = {"dataset_type=synthetic", "base_emb_dim=48", lp};
  gt_ctx *d = gt_ctx_new();
  ck_assert_int_eq(gt_ctx_configure(d, NULL, 3, bad), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(d), "base_emb_dim"), "%s", gt_ctx_error(d));
  gt_ctx_free(a), gt_ctx_free(b), gt_ctx_free(f), gt_ctx_free(d);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* path's tensors written to out without metadata, the first 1-D tensor cut
 * to 8 values (cut) or one tensor more (extra, named extra_name); returns
 * the cut tensor's name and length in *name and *len. */
static void craft_file(const char *path, const char *out, int cut, const char *extra_name, char *name, int64_t *len) {
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, path, &e) == GT_OK, "%s", e.msg);
  gt_st_wtensor *w = calloc((size_t)f.n_tensors + 1, sizeof *w);
  float **data = calloc((size_t)f.n_tensors + 1, sizeof *data);
  int n = 0, done = 0;
  for (int i = 0; i < f.n_tensors; i++) {
    const gt_st_tensor *t = &f.tensors[i];
    data[i] = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    ck_assert(gt_st_read_f32(t, data[i], t->numel, &e) == GT_OK);
    w[n] = (gt_st_wtensor){t->name, GT_DT_F32, t->ndim, {0}, data[i]};
    memcpy(w[n].shape, t->shape, sizeof t->shape);
    if (cut && !done && t->ndim == 1 && t->shape[0] > 8 && strncmp(t->name, "optimizer.", 10)) {
      snprintf(name, 256, "%s", t->name);
      *len = t->shape[0];
      w[n].shape[0] = 8;
      done = 1;
    }
    n++;
  }
  if (extra_name) {
    w[n] = w[0];
    w[n].name = extra_name;
    n++;
  }
  ck_assert(!cut || done);
  ck_assert_msg(gt_st_write(out, n, w, NULL, &e) == GT_OK, "%s", e.msg);
  for (int i = 0; i < f.n_tensors; i++) free(data[i]);
  free(data), free(w);
  gt_st_close(&f);
}

/* gt_ctx_load takes files of the context's own model only: a file of more
 * layers, of another layer pattern or with adapters the context lacks is
 * refused naming what differs, and so is a file without a config whose
 * tensors are not the model's (a shape named as it is, an extra tensor by
 * name). Nothing changes: the context evaluates as before. */
START_TEST(test_load_refuses_other_model) {
  char *dir = gt_test_mkdtemp("api_other");
  char p6[600], plg[600], plora[600], pcut[600], pextra[600];
  snprintf(p6, sizeof p6, "%s/six.safetensors", dir);
  snprintf(plg, sizeof plg, "%s/lg.safetensors", dir);
  snprintf(plora, sizeof plora, "%s/lora.safetensors", dir);
  snprintf(pcut, sizeof pcut, "%s/cut.safetensors", dir);
  snprintf(pextra, sizeof pextra, "%s/extra.safetensors", dir);
  const char *lg[] = {"base_num_decoder_layers=2", "layer_pattern=LG"},
             *gg[] = {"base_num_decoder_layers=2", "layer_pattern=GG"},
             *lo[] = {"base_num_decoder_layers=2", "layer_pattern=LG", "enable_lora=true", "lora_rank=4"};
  gt_ctx *six = tiny(), *two = tiny_with(2, lg), *twogg = tiny_with(2, gg), *lora = tiny_with(4, lo);
  ck_assert(gt_ctx_save(six, p6) == GT_OK && gt_ctx_save(two, plg) == GT_OK && gt_ctx_save(lora, plora) == GT_OK);
  int32_t tok[2 * 33];
  for (int i = 0; i < 2 * 33; i++) tok[i] = 4 + (i * 13) % 200;
  double before, after;
  ck_assert(gt_ctx_eval_tokens(two, tok, 2, 32, &before) == GT_OK);
  ck_assert_int_eq(gt_ctx_load(two, p6), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(two), p6) &&
                    strstr(gt_ctx_error(two), "base_num_decoder_layers = 6 in the file, 2 here") &&
                    strstr(gt_ctx_error(two), "layer_pattern = LLLLLG in the file, LG here"),
                "%s", gt_ctx_error(two));
  ck_assert_int_eq(gt_ctx_load(twogg, plg), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(twogg), "1 model key differs: layer_pattern = LG in the file, GG here"), "%s",
                gt_ctx_error(twogg));
  ck_assert_int_eq(gt_ctx_load(two, plora), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(two), "tensors this model does not have") && strstr(gt_ctx_error(two), "lora"),
                "%s", gt_ctx_error(two));
  /* files without a config: their tensors decide */
  char cut_name[256];
  int64_t cut_len = 0;
  craft_file(plg, pcut, 1, NULL, cut_name, &cut_len);
  ck_assert_int_eq(gt_ctx_load(two, pcut), GT_ERR_FORMAT);
  char want[400];
  snprintf(want, sizeof want, "tensor '%s' has shape [8], the model wants [%lld]", cut_name, (long long)cut_len);
  ck_assert_msg(strstr(gt_ctx_error(two), want), "'%s' should say '%s'", gt_ctx_error(two), want);
  craft_file(plg, pextra, 0, "model.layers.7.mlp.up_proj.weight", NULL, NULL);
  ck_assert_int_eq(gt_ctx_load(two, pextra), GT_ERR_FORMAT);
  ck_assert_msg(
      strstr(gt_ctx_error(two), "holds 1 tensor this model does not have ('model.layers.7.mlp.up_proj.weight')"), "%s",
      gt_ctx_error(two));
  ck_assert(gt_ctx_eval_tokens(two, tok, 2, 32, &after) == GT_OK);
  ck_assert_msg(after == before, "after the refused loads %.17g, before %.17g", after, before);
  /* the file of the same model loads */
  ck_assert_msg(gt_ctx_load(two, plg) == GT_OK, "%s", gt_ctx_error(two));
  gt_ctx_free(six), gt_ctx_free(two), gt_ctx_free(twogg), gt_ctx_free(lora);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* A parameter file's optimizer step is metadata no crc protects: a negative
 * one (AdamW's bias correction would turn NaN) is refused naming the file. */
START_TEST(test_load_refuses_bad_optimizer_step) {
  gt_ctx *c = tiny();
  char *dir = gt_test_mkdtemp("api_badstep");
  char path[600];
  snprintf(path, sizeof path, "%s/p.safetensors", dir);
  write_file(c, path, -100, NULL);
  ck_assert_int_eq(gt_ctx_load(c, path), GT_ERR_FORMAT);
  ck_assert_msg(strstr(gt_ctx_error(c), "optimizer_step = '-100'") && strstr(gt_ctx_error(c), path), "%s",
                gt_ctx_error(c));
  gt_ctx_free(c);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* A refused pass on a 2-device mesh leaves nothing behind: the next eval
 * equals a fresh context's (a pass that failed inside the devices once left
 * gathered copies that the next pass read as the current weights). */
START_TEST(test_refused_pass_leaves_no_state) {
  const char *ov[] = {"dataset_type=synthetic", "num_devices=2", "per_device_batch_size=1", "max_target_length=16",
                      "num_vocab_tiling=2"};
  gt_ctx *a = gt_ctx_new(), *b = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(a, "gemma3-tiny", 5, ov) == GT_OK && gt_ctx_init(a) == GT_OK, "%s", gt_ctx_error(a));
  ck_assert_msg(gt_ctx_configure(b, "gemma3-tiny", 5, ov) == GT_OK && gt_ctx_init(b) == GT_OK, "%s", gt_ctx_error(b));
  int32_t tok[2 * 17];
  for (int i = 0; i < 2 * 17; i++) tok[i] = 4 + (i * 11) % 200;
  /* trained parameters in a file, to load after the refused pass */
  double l[3], la, lb;
  ck_assert(gt_ctx_train(b, 3, l) == GT_OK);
  char *dir = gt_test_mkdtemp("api_refused");
  char path[600];
  snprintf(path, sizeof path, "%s/p.safetensors", dir);
  ck_assert_msg(gt_ctx_save(b, path) == GT_OK, "%s", gt_ctx_error(b));
  /* 7 tokens a device do not split into 2 vocab tiles: refused up front */
  ck_assert_int_eq(gt_ctx_eval_tokens(a, tok, 2, 7, &la), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(a), "num_vocab_tiling = 2"), "%s", gt_ctx_error(a));
  ck_assert_msg(gt_ctx_load(a, path) == GT_OK, "%s", gt_ctx_error(a));
  ck_assert(gt_ctx_eval_tokens(a, tok, 2, 16, &la) == GT_OK);
  ck_assert(gt_ctx_eval_tokens(b, tok, 2, 16, &lb) == GT_OK);
  ck_assert_msg(la == lb, "loaded after a refused pass %.17g, the saver %.17g", la, lb);
  gt_ctx_free(a), gt_ctx_free(b);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

/* Keys by name: every key reads back what was set, in text and typed,
 * through each of the five key types; an unknown key and a refused value
 * are named and change nothing; a set key reaches the model. */
START_TEST(test_keys_get_set) {
  gt_ctx *c = gt_ctx_new();
  char v[GT_STR_PATH + 32], w[GT_STR_PATH + 32];
  ck_assert_int_eq(gt_ctx_get(c, "learning_rate", v, sizeof v), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "gt_ctx_configure"), "%s", gt_ctx_error(c));
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 5, tiny_ov) == GT_OK, "%s", gt_ctx_error(c));
  /* every key: its text set back gives the same text */
  int types[5] = {0};
  for (int i = 0; i < gt_config_num_keys(); i++) {
    const gt_key_spec *k = gt_config_key_at(i);
    ck_assert_msg(gt_ctx_get(c, k->name, v, sizeof v) == GT_OK, "%s", gt_ctx_error(c));
    ck_assert_msg(gt_ctx_set(c, k->name, v) == GT_OK, "%s = '%s': %s", k->name, v, gt_ctx_error(c));
    ck_assert(gt_ctx_get(c, k->name, w, sizeof w) == GT_OK);
    ck_assert_msg(!strcmp(v, w), "%s: '%s' read back as '%s'", k->name, v, w);
    types[k->type]++;
  }
  for (int t = 0; t < 5; t++) ck_assert_int_gt(types[t], 0);
  /* model_name chooses the preset: gt_ctx_set does not rename it */
  ck_assert_int_eq(gt_ctx_set(c, "model_name", "gemma3-1b"), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'model_name'") && strstr(gt_ctx_error(c), "gt_ctx_configure"), "%s",
                gt_ctx_error(c));
  ck_assert(gt_ctx_get(c, "model_name", v, sizeof v) == GT_OK && !strcmp(v, "gemma3-tiny"));
  /* integer (long long and int fields) */
  int64_t iv;
  ck_assert(gt_ctx_set(c, "base_emb_dim", "48") == GT_OK && gt_ctx_get_int(c, "base_emb_dim", &iv) == GT_OK);
  ck_assert_int_eq(iv, 48);
  ck_assert(gt_ctx_set_int(c, "init_weights_seed", 12345) == GT_OK);
  ck_assert(gt_ctx_get(c, "init_weights_seed", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "12345");
  /* float: the text is the shortest that reads back to the same double */
  double dv, third = 1.0 / 3.0;
  ck_assert(gt_ctx_set(c, "learning_rate", "0.003") == GT_OK && gt_ctx_get(c, "learning_rate", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "0.003");
  ck_assert(gt_ctx_set_double(c, "adam_b2", third) == GT_OK && gt_ctx_get_double(c, "adam_b2", &dv) == GT_OK);
  ck_assert(dv == third);
  ck_assert(gt_ctx_get(c, "adam_b2", v, sizeof v) == GT_OK);
  ck_assert_msg(strtod(v, NULL) == third, "%s", v);
  ck_assert(gt_ctx_get_double(c, "base_emb_dim", &dv) == GT_OK && dv == 48.0);
  /* boolean */
  ck_assert(gt_ctx_set(c, "packing", "false") == GT_OK && gt_ctx_get_int(c, "packing", &iv) == GT_OK);
  ck_assert_int_eq(iv, 0);
  ck_assert(gt_ctx_set_int(c, "packing", 1) == GT_OK && gt_ctx_get(c, "packing", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "true");
  /* string and enumeration */
  ck_assert(gt_ctx_set(c, "run_name", "a run") == GT_OK && gt_ctx_get(c, "run_name", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "a run");
  ck_assert(gt_ctx_set(c, "mu_dtype", "bfloat16") == GT_OK && gt_ctx_get(c, "mu_dtype", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "bfloat16");
  ck_assert(gt_ctx_set(c, "mu_dtype", "float32") == GT_OK);
  /* an unknown key, named with the nearest known one */
  ck_assert_int_eq(gt_ctx_set(c, "learnin_rate", "0.1"), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'learnin_rate'") && strstr(gt_ctx_error(c), "did you mean 'learning_rate'"),
                "%s", gt_ctx_error(c));
  ck_assert_int_eq(gt_ctx_get(c, "no_such_key", v, sizeof v), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'no_such_key'"), "%s", gt_ctx_error(c));
  ck_assert_int_eq(gt_ctx_get_int(c, "no_such_key", &iv), GT_ERR_CONFIG);
  /* refused values name key and value and leave the old value */
  const char *bad[][2] = {{"learning_rate", "fast"}, {"base_emb_dim", "4.5"}, {"packing", "maybe"},
                          {"mu_dtype", "float8"}, {"adam_b1", "-3"}};
  for (int i = 0; i < 5; i++) {
    char before[64], after[64];
    ck_assert(gt_ctx_get(c, bad[i][0], before, sizeof before) == GT_OK);
    ck_assert_int_eq(gt_ctx_set(c, bad[i][0], bad[i][1]), GT_ERR_CONFIG);
    ck_assert_msg(strstr(gt_ctx_error(c), bad[i][0]) && strstr(gt_ctx_error(c), bad[i][1]), "%s", gt_ctx_error(c));
    ck_assert(gt_ctx_get(c, bad[i][0], after, sizeof after) == GT_OK);
    ck_assert_str_eq(before, after);
  }
  /* a typed read of another type, and a buffer too small, are refused */
  ck_assert_int_eq(gt_ctx_get_int(c, "learning_rate", &iv), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'learning_rate' is a float"), "%s", gt_ctx_error(c));
  ck_assert_int_eq(gt_ctx_get_double(c, "mu_dtype", &dv), GT_ERR_CONFIG);
  ck_assert_int_eq(gt_ctx_get(c, "run_name", v, 3), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'run_name' holds 5 characters"), "%s", gt_ctx_error(c));
  /* keys set one by one build the model that the same overrides build */
  ck_assert_msg(gt_ctx_init(c) == GT_OK, "%s", gt_ctx_error(c));
  const char *ov[] = {"dataset_type=synthetic", "learning_rate=0.003", "per_device_batch_size=2",
                      "max_target_length=32", "base_emb_dim=48", "init_weights_seed=12345", "adam_b2=0.5"};
  gt_ctx *d = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(d, "gemma3-tiny", 7, ov) == GT_OK && gt_ctx_set_double(d, "adam_b2", third) == GT_OK &&
                    gt_ctx_init(d) == GT_OK,
                "%s", gt_ctx_error(d));
  ck_assert_int_eq(gt_ctx_num_params(c), gt_ctx_num_params(d));
  double lc[2], ld[2];
  ck_assert(gt_ctx_train(c, 2, lc) == GT_OK && gt_ctx_train(d, 2, ld) == GT_OK);
  ck_assert_msg(lc[0] == ld[0] && lc[1] == ld[1], "%.17g %.17g vs %.17g %.17g", lc[0], lc[1], ld[0], ld[1]);
  /* after init the configuration is fixed */
  ck_assert_int_eq(gt_ctx_set(c, "learning_rate", "0.1"), GT_ERR_ARG);
  ck_assert_msg(strstr(gt_ctx_error(c), "'learning_rate'") && strstr(gt_ctx_error(c), "gt_ctx_init"), "%s",
                gt_ctx_error(c));
  ck_assert(gt_ctx_get(c, "learning_rate", v, sizeof v) == GT_OK);
  ck_assert_str_eq(v, "0.003");
  ck_assert_str_eq(gt_rc_str(GT_ERR_NOMEM), "out of memory");
  ck_assert_str_eq(gt_rc_str(GT_OK), "ok");
  gt_ctx_free(c), gt_ctx_free(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("api");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_train_loss_falls);
  tcase_add_test(tc, test_num_params_any_storage);
  tcase_add_test(tc, test_errors_per_context);
  tcase_add_test(tc, test_two_threads_equal_sequential);
  tcase_add_test(tc, test_two_threads_host_team);
  tcase_add_test(tc, test_padded_rows);
  tcase_add_test(tc, test_tokens_logits_save_load);
  tcase_add_test(tc, test_save_load_spike_guard);
  tcase_add_test(tc, test_save_load_lora_dropout);
  tcase_add_test(tc, test_save_load_data_position);
  tcase_add_test(tc, test_load_training_state_absent_or_bad);
  tcase_add_test(tc, test_create_train_free_cycles);
  tcase_add_test(tc, test_ctx_equals_train_moe);
  tcase_add_test(tc, test_ctx_equals_train_moe_expert_parallel);
  tcase_add_test(tc, test_ctx_load_parameters_path);
  tcase_add_test(tc, test_load_refuses_bad_optimizer_step);
  tcase_add_test(tc, test_load_refuses_other_model);
  tcase_add_test(tc, test_refused_pass_leaves_no_state);
  tcase_add_test(tc, test_keys_get_set);
  /* no fork: leaks of every test are the process's, seen by LeakSanitizer */
  return gt_test_run_suite(s, 1);
}
