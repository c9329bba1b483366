/* eval/: multiple-choice scoring as lm-evaluation-harness defines it.
 *  - the metrics by hand: acc, acc_norm (characters) and acc_bytes (UTF-8
 *    bytes) that disagree on a choice with non-ASCII letters, the
 *    harness's mean_stderr, numpy's first-of-ties argmax;
 *  - the harness's tokenisation of a pair (trailing spaces move to the
 *    continuation, <bos> first), with byte tokens and Gemma 3's tokenizer,
 *    and the HellaSwag and MMLU text;
 *  - each choice's log-likelihood on the mesh (gt_fsdp_eval_tokens) against
 *    a scalar reference: the model's whole logits (gt_exec_forward_logits,
 *    one sequence at a time) through a float64 log-softmax;
 *  - the same log-likelihoods at batch sizes 2, 4, 6 and on 1 and 2 devices,
 *    and with a z-loss in the training loss; a MoE model's within rounding;
 *  - the eval_tasks list checked before any file is read;
 *  - bad records refused in one line naming file, line and field;
 *  - a sweep's task columns: the last eval's scores of a run's
 *    metrics.jsonl, kept through results.jsonl. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "eval/eval.h"
#include "tokenizer/tokenizer.h"
#include "exec/exec.h"
#include "kernels/cpu.h"
#include "mesh/fsdp.h"
#include "model/model.h"
#include "sweep/sweep.h"
#include "gt_testutil.h"

/* ---------- metrics ---------- */

static gt_eval_example ex3(const char *a, const char *b, const char *c, int label) {
  gt_eval_example e = {strdup("ctx"), 3, calloc(3, sizeof(char *)), label, 1};
  e.choices[0] = strdup(a), e.choices[1] = strdup(b), e.choices[2] = strdup(c);
  return e;
}

START_TEST(metrics_by_hand) {
  gt_eval_task t = {0};
  t.n = 3;
  t.ex = calloc(3, sizeof *t.ex);
  /* example 0: ll = -4, -5, -6 over "ab" (2 chars, 2 bytes), "ééé" (3
   * chars, 6 bytes), "abcdef" (6, 6): acc picks 0 (-4); per character
   * -2, -1.667, -1 picks 2; per byte -2, -0.833, -1 picks 1 = the label */
  t.ex[0] = ex3("ab", "\xc3\xa9\xc3\xa9\xc3\xa9", "abcdef", 1);
  /* example 1: ll = -1, -1, -3: a tie goes to the first (numpy) = label 0;
   * per character -0.5, -0.333, -0.5 picks 1; per byte -0.5, -0.1667, -0.5: 1 */
  t.ex[1] = ex3("ab", "\xc3\xa9\xc3\xa9\xc3\xa9", "abcdef", 0);
  /* example 2: ll = -9, -1, -2: everything picks 1 = the label... except per
   * character: -4.5, -0.333, -0.333 (tie: 1) and bytes -4.5, -0.1667, -0.333: 1 */
  t.ex[2] = ex3("ab", "\xc3\xa9\xc3\xa9\xc3\xa9", "abcdef", 1);
  double ll[9] = {-4, -5, -6, -1, -1, -3, -9, -1, -2};
  gt_eval_result r;
  memset(&r, 0, sizeof r);
  gt_eval_metrics(&t, ll, &r);
  ck_assert_int_eq(r.n, 3);
  /* acc: 0, 1, 1; acc_norm: 0 (picked 2), 0 (picked 1), 1; acc_bytes: 1, 0, 1 */
  ck_assert_double_eq_tol(r.acc, 2.0 / 3, 1e-15);
  ck_assert_double_eq_tol(r.acc_norm, 1.0 / 3, 1e-15);
  ck_assert_double_eq_tol(r.acc_bytes, 2.0 / 3, 1e-15);
  /* mean_stderr: sample std (n - 1) / sqrt(n); for 0/1 scores
   * sqrt(p (1 - p) / (n - 1)): p = 2/3 -> sqrt(2/9 / 2) = 1/3 */
  ck_assert_double_eq_tol(r.acc_stderr, 1.0 / 3, 1e-15);
  ck_assert_double_eq_tol(r.acc_norm_stderr, 1.0 / 3, 1e-15);
  ck_assert_double_eq_tol(r.acc_bytes_stderr, 1.0 / 3, 1e-15);
  /* one example: no standard error */
  t.n = 1;
  gt_eval_metrics(&t, ll, &r);
  ck_assert(r.acc == 0.0 && isnan(r.acc_stderr));
  t.n = 3;
  gt_eval_task_free(&t);
  ck_assert_int_eq(gt_eval_chars("\xc3\xa9t\xc3\xa9"), 3);
}
END_TEST

/* ---------- text ---------- */

START_TEST(encode_pair_as_the_harness) {
  gt_encoder e;
  gt_encoder_init(&e, NULL, 260); /* byte tokens: byte b is id 4 + b, <bos> 2 */
  int32_t *ids;
  int64_t n, nc;
  gt_err err;
  /* "Hi " + " A": the context's trailing space joins the continuation */
  ck_assert(gt_eval_encode_pair(&e, "Hi ", " A", &ids, &n, &nc, "t", &err) == GT_OK);
  int32_t want[] = {2, 4 + 'H', 4 + 'i', 4 + ' ', 4 + ' ', 4 + 'A'};
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(nc, 3);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(ids[i], want[i]);
  free(ids);
  /* the harness's HellaSwag cleaning, checked against its Python
   * (utils.preprocess) on the same strings */
  char *p = gt_eval_hellaswag_preprocess("  Cooking: [header] How to  boil [title] Fill the pot.  [step] Wait ");
  ck_assert_str_eq(p, "Cooking: How to boil. Fill the pot.  Wait"); /* one pass: 3 spaces leave 2 */
  free(p);
  p = gt_eval_hellaswag_preprocess("a [b\n c] d");
  ck_assert_str_eq(p, "a [b\n c] d"); /* '.' does not cross a newline */
  free(p);
  /* a HF HellaSwag row: activity_label + ": " + ctx_a + " " + ctx_b.capitalize() */
  cJSON *rec = cJSON_Parse("{\"activity_label\": \"Removing ice\", \"ctx_a\": \"A man stands.\", \"ctx_b\": \"then HE "
                           "Scrapes\", \"ctx\": \"ignored\", \"endings\": [\" the car. \", \"a [title] b\"], \"label\": \"1\"}");
  gt_eval_example ex;
  gt_eval_format f;
  ck_assert_msg(gt_eval_example_parse(rec, GT_EVAL_AUTO, "'x' line 1", &ex, &f, &err) == GT_OK, "%s", err.msg);
  ck_assert_int_eq(f, GT_EVAL_HELLASWAG);
  ck_assert_str_eq(ex.context, "Removing ice: A man stands. Then he scrapes");
  ck_assert_str_eq(ex.choices[0], "the car.");
  ck_assert_str_eq(ex.choices[1], "a. b");
  ck_assert_int_eq(ex.label, 1);
  gt_eval_example_free(&ex);
  cJSON_Delete(rec);
  /* a cais/mmlu row */
  rec = cJSON_Parse("{\"question\": \" What is 2+2? \", \"subject\": \"elementary_mathematics\", \"choices\": [\"3\", "
                    "\"4\", \"5\", \"6\"], \"answer\": 1}");
  ck_assert(gt_eval_example_parse(rec, GT_EVAL_AUTO, "'x' line 1", &ex, &f, &err) == GT_OK);
  ck_assert_int_eq(f, GT_EVAL_MMLU);
  ck_assert_str_eq(ex.context, "The following are multiple choice questions (with answers) about elementary "
                               "mathematics.\n\nWhat is 2+2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:");
  ck_assert_int_eq(ex.n_choices, 4);
  ck_assert_str_eq(ex.choices[3], "D");
  ck_assert_int_eq(ex.label, 1);
  gt_eval_example_free(&ex);
  cJSON_Delete(rec);
}
END_TEST

/* The same with Gemma 3's tokenizer: MMLU's " B" is one token after
 * "Answer:", and a context's trailing space joins the continuation, so
 * "sat on the " + "mat" scores the one token "▁mat" (not "▁" then "mat"). */
START_TEST(encode_pair_gemma3) {
  const char *path = GT_SOURCE_DIR "/data/tokenizers/gemma3/tokenizer.json";
  if (access(path, R_OK) != 0) ck_abort_msg("missing %s: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)", path);
  gt_tokenizer *tok;
  gt_err err;
  ck_assert_msg(gt_tokenizer_load(path, &tok, &err) == GT_OK, "%s", err.msg);
  gt_encoder e;
  gt_encoder_init(&e, tok, gt_tokenizer_n_ids(tok));
  int32_t *ids, *ctx_ids = NULL;
  int64_t n, nc, n_ctx;
  ck_assert(gt_eval_encode_pair(&e, "What is 2+2?\nA. 3\nB. 4\nAnswer:", " B", &ids, &n, &nc, "t", &err) == GT_OK);
  ck_assert_int_eq(nc, 1);
  ck_assert_int_eq(ids[0], 2); /* <bos> */
  ck_assert_int_eq(ids[n - 1], gt_tokenizer_token_id(tok, "\xe2\x96\x81" "B", 4));
  ck_assert(gt_tokenizer_encode(tok, "What is 2+2?\nA. 3\nB. 4\nAnswer:", 30, 0, &ctx_ids, &n_ctx, &err) == GT_OK);
  ck_assert_int_eq(n, n_ctx + 2);
  for (int64_t i = 0; i < n_ctx; i++) ck_assert_int_eq(ids[1 + i], ctx_ids[i]);
  free(ids), free(ctx_ids);
  ck_assert(gt_eval_encode_pair(&e, "The cat sat on the ", "mat", &ids, &n, &nc, "t", &err) == GT_OK);
  ck_assert_int_eq(nc, 1);
  ck_assert_int_eq(ids[n - 1], gt_tokenizer_token_id(tok, "\xe2\x96\x81" "mat", 6));
  free(ids);
  gt_tokenizer_free(tok);
}
END_TEST

/* ---------- bad records ---------- */

static void refused(const char *json, const char *want) {
  cJSON *rec = cJSON_Parse(json);
  ck_assert(rec);
  gt_eval_example ex;
  gt_err err;
  gt_err_clear(&err);
  ck_assert_msg(gt_eval_example_parse(rec, GT_EVAL_AUTO, "'t.jsonl' line 7", &ex, NULL, &err) != GT_OK, "%s", json);
  ck_assert_msg(!strcmp(err.msg, want), "got '%s', want '%s'", err.msg, want);
  ck_assert(!strchr(err.msg, '\n'));
  cJSON_Delete(rec);
}

START_TEST(bad_records) {
  refused("{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}",
          "eval: 't.jsonl' line 7: field 'choices' has 1 choice; a multiple-choice example needs at least 2");
  refused("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}",
          "eval: 't.jsonl' line 7: field 'label' = 2 is out of range for 2 choices (0..1)");
  refused("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": -1}",
          "eval: 't.jsonl' line 7: field 'label' = -1 is out of range for 2 choices (0..1)");
  refused("{\"context\": \"\", \"choices\": [\"b\", \"c\"], \"label\": 1}", "eval: 't.jsonl' line 7: field 'context' is empty");
  refused("{\"context\": \"a\", \"choices\": \"b\", \"label\": 1}",
          "eval: 't.jsonl' line 7: field 'choices' is a string; expected a list of strings");
  refused("{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"label\": 1}",
          "eval: 't.jsonl' line 7: field 'choices' item 1 is empty");
  refused("{\"ctx\": \" [x] \", \"endings\": [\"b\", \"c\"], \"label\": \"0\"}",
          "eval: 't.jsonl' line 7: field 'ctx' is empty");
  refused("{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": \"\"}",
          "eval: 't.jsonl' line 7: field 'label' is a string that is no index; expected the index of the right choice");
  refused("{\"question\": \" \", \"choices\": [\"b\", \"c\"], \"answer\": 0}",
          "eval: 't.jsonl' line 7: field 'question' is empty");
  refused("{\"text\": \"a\"}",
          "eval: 't.jsonl' line 7: not a task record: expected the fields context/choices/label (mc), "
          "ctx/endings/label (hellaswag) or question/choices/answer (mmlu)");
}
END_TEST

/* ---------- log-likelihoods on the mesh ---------- */

/* A task over byte tokens: contexts and choices of assorted lengths, one
 * with more choices, three too long for max_target_length = 48 whole:
 * their contexts are cut on the left, as the harness cuts them. */
static gt_eval_task small_task(void) {
  static const char *ctx[] = {"In the beginning", "And God said, Let there be", "The LORD is my",
                              "Amen. The grace of our Lord", "And the earth was without form, and void"};
  static const char *ch[][4] = {{"God", "the sea", "a whale", NULL},
                                {"light", "darkness upon the face of the deep", NULL, NULL},
                                {"shepherd; I shall not want.", "king", "\xc3\xa9t\xc3\xa9", "rock"},
                                {"Jesus Christ be with you all.", "be", NULL, NULL},
                                {"yy", "and darkness was upon the face", NULL, NULL}};
  gt_eval_task t = {0};
  snprintf(t.name, sizeof t.name, "small");
  snprintf(t.path, sizeof t.path, "small.jsonl");
  t.n = 5;
  t.ex = calloc(5, sizeof *t.ex);
  for (int i = 0; i < 5; i++) {
    int k = 0;
    while (k < 4 && ch[i][k]) k++;
    t.ex[i].context = strdup(ctx[i]);
    t.ex[i].n_choices = k;
    t.ex[i].choices = calloc((size_t)k, sizeof(char *));
    for (int c = 0; c < k; c++) t.ex[i].choices[c] = strdup(ch[i][c]);
    t.ex[i].label = i % k;
    t.ex[i].line = i + 1;
  }
  return t;
}

static const char *g_z = "z_loss_multiplier=0";         /* the next mesh's */
static const char *g_model = "model_name=gemma3-tiny"; /* the next mesh's */

static gt_fsdp *mesh(int devices, int per_device, gt_config *c) {
  char nd[32], pd[32];
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", per_device);
  const char *ov[] = {g_model, "dataset_type=synthetic", "max_target_length=48", nd, pd,
                      "init_weights_seed=11", g_z};
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, 7, ov, &e) == GT_OK, "%s", e.msg);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, c, NULL, &e) == GT_OK, "%s", e.msg);
  return f;
}

static int64_t n_requests(const gt_eval_task *t) {
  int64_t n = 0;
  for (int i = 0; i < t->n; i++) n += t->ex[i].n_choices;
  return n;
}

/* ll of every request on a mesh of `devices` with `per_device` rows each */
static double *score(const gt_eval_task *t, int devices, int per_device, gt_eval_result *r) {
  gt_config c;
  gt_fsdp *f = mesh(devices, per_device, &c);
  gt_encoder enc;
  gt_encoder_init(&enc, NULL, c.vocab_size);
  gt_eval_opts o = gt_eval_opts_from_config(&c);
  o.batches_per_call = 2;
  double *ll = malloc(sizeof(double) * (size_t)n_requests(t));
  gt_err e;
  ck_assert_msg(gt_eval_task_score(f, &enc, &o, t, r, ll, &e) == GT_OK, "%s", e.msg);
  gt_fsdp_destroy(f);
  return ll;
}

START_TEST(loglikelihood_against_reference) {
  gt_eval_task t = small_task();
  gt_eval_result r;
  double *ll = score(&t, 1, 4, &r);
  /* the reference: the full parameters on a plain model, every logit of
   * the request's sequence, log-softmax in float64 */
  gt_config c;
  gt_fsdp *f = mesh(1, 4, &c);
  gt_model m;
  gt_err e;
  gt_mem mem;
  gt_mem_init(&mem);
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  ck_assert(gt_model_alloc_inference(&m, &mem, &e) == GT_OK);
  ck_assert(gt_fsdp_full_params(f, m.params, &e) == GT_OK);
  gt_encoder enc;
  gt_encoder_init(&enc, NULL, c.vocab_size);
  int64_t k = 0, V = m.vocab, truncated = 0;
  double worst = 0;
  int hits[3] = {0, 0, 0};
  for (int i = 0; i < t.n; i++) {
    const gt_eval_example *ex = &t.ex[i];
    double best[3] = {-INFINITY, -INFINITY, -INFINITY};
    int pick[3] = {0, 0, 0};
    for (int ch = 0; ch < ex->n_choices; ch++, k++) {
      char cont[128];
      snprintf(cont, sizeof cont, " %s", ex->choices[ch]);
      int32_t *ids;
      int64_t n, nc;
      ck_assert(gt_eval_encode_pair(&enc, ex->context, cont, &ids, &n, &nc, "t", &e) == GT_OK);
      int64_t drop = n > c.max_target_length + 1 ? n - (c.max_target_length + 1) : 0;
      truncated += drop > 0;
      int L = (int)(n - drop - 1);
      int32_t *tg = malloc(sizeof(int32_t) * (size_t)L), *pos = malloc(sizeof(int32_t) * (size_t)L);
      for (int j = 0; j < L; j++) tg[j] = -1, pos[j] = j;
      float *logits = malloc(sizeof(float) * (size_t)(L * V));
      gt_batch b = {1, L, ids + drop, tg, pos, NULL};
      ck_assert(gt_exec_forward_logits(&m, &b, logits, &e) == GT_OK);
      double want = 0;
      for (int64_t j = L - nc; j < L; j++) {
        const float *z = logits + j * V;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        for (int64_t v = 0; v < V; v++) s += exp((double)z[v] - mx);
        want += (double)z[ids[drop + j + 1]] - mx - log(s);
      }
      double err = fabs(ll[k] - want) / (1 + fabs(want));
      if (!(err <= worst)) worst = err; /* a NaN stays */
      /* the choice each metric picks, from the reference */
      double sc[3] = {want, want / (double)gt_eval_chars(ex->choices[ch]), want / (double)strlen(ex->choices[ch])};
      for (int q = 0; q < 3; q++)
        if (sc[q] > best[q]) best[q] = sc[q], pick[q] = ch;
      free(ids), free(tg), free(pos), free(logits);
    }
    for (int q = 0; q < 3; q++) hits[q] += pick[q] == ex->label;
  }
  gt_test_check_err("continuation log-likelihood vs the full logits", worst, 1e-5);
  ck_assert_int_eq(truncated, 3); /* three requests cut their context */
  ck_assert_int_eq(r.truncated, 3);
  ck_assert_int_eq(r.requests, k);
  ck_assert_double_eq_tol(r.acc, hits[0] / 5.0, 1e-15);
  ck_assert_double_eq_tol(r.acc_norm, hits[1] / 5.0, 1e-15);
  ck_assert_double_eq_tol(r.acc_bytes, hits[2] / 5.0, 1e-15);
  gt_model_free(&m);
  gt_fsdp_destroy(f);
  free(ll);
  gt_eval_task_free(&t);
}
END_TEST

START_TEST(invariant_to_batch_and_devices) {
  gt_eval_task t = small_task();
  gt_eval_result r0, r;
  double *ll0 = score(&t, 1, 2, &r0);
  int64_t n = n_requests(&t);
  const int cases[][2] = {{1, 4}, {1, 6}, {2, 1}, {2, 3}};
  /* bit for bit on the AVX-512 and AVX2 kernels, whose sums' order does not
   * follow a product's row count (every product here has at least 8 rows,
   * past the few-row dot products). On the portable ones OpenBLAS's can
   * (its AVX2 kernel sums a row by its place in a 12-row group): there the
   * requests agree to float32 rounding (measured 2e-9 relative) */
  const double tol = gt__kernels_path() == GT__PATH_PORTABLE ? 1e-6 : 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double *ll = score(&t, cases[c][0], cases[c][1], &r);
    for (int64_t i = 0; i < n; i++)
      ck_assert_msg(fabs(ll[i] - ll0[i]) <= tol * fabs(ll0[i]), "%d devices x %d rows: request %lld: %.17g, at 1 x 2 %.17g",
                    cases[c][0], cases[c][1], (long long)i, ll[i], ll0[i]);
    ck_assert(r.acc == r0.acc && r.acc_norm == r0.acc_norm && r.acc_bytes == r0.acc_bytes);
    free(ll);
  }
  /* a z-loss in the training loss is no part of a log-likelihood */
  g_z = "z_loss_multiplier=0.1";
  double *llz = score(&t, 2, 2, &r);
  g_z = "z_loss_multiplier=0";
  for (int64_t i = 0; i < n; i++) ck_assert_msg(llz[i] == ll0[i], "z-loss: request %lld", (long long)i);
  free(llz);
  free(ll0);
  gt_eval_task_free(&t);
}
END_TEST

/* A MoE model: an expert's products have as many rows as the batch routed
 * to it, and at 4 rows and fewer gt_sgemm sums each output as a dot
 * product (kernels/gemm.c), in another order than its packed kernel: so
 * the batch and the devices can move a request's bits (measured up to 9e-8
 * relative, gemma4-tiny-moe). What holds, and docs/evaluation.md says: the
 * log-likelihoods agree to float32 rounding at every batch size and device
 * count, and a given batch and device count repeats its bits. */
START_TEST(moe_within_rounding_of_batch_and_devices) {
  g_model = "model_name=gemma4-tiny-moe";
  gt_eval_task t = small_task();
  gt_eval_result r0, r;
  double *ll0 = score(&t, 1, 2, &r0);
  int64_t n = n_requests(&t);
  const int cases[][2] = {{1, 2}, {1, 4}, {1, 3}, {2, 2}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double *ll = score(&t, cases[c][0], cases[c][1], &r);
    const double tol = c == 0 ? 0 : 1e-6; /* the first repeats 1 x 2 */
    for (int64_t i = 0; i < n; i++)
      ck_assert_msg(isfinite(ll[i]) && fabs(ll[i] - ll0[i]) <= tol * fabs(ll0[i]),
                    "gemma4-tiny-moe, %d devices x %d rows: request %lld: %.17g, at 1 x 2 %.17g", cases[c][0],
                    cases[c][1], (long long)i, ll[i], ll0[i]);
    free(ll);
  }
  g_model = "model_name=gemma3-tiny";
  free(ll0);
  gt_eval_task_free(&t);
}
END_TEST

/* ---------- the eval_tasks list ---------- */

static char *write_task(const char *dir, const char *name) {
  char *p = malloc(1024);
  snprintf(p, 1024, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  ck_assert_msg(f != NULL, "%s", p);
  fputs("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0}\n", f);
  fclose(f);
  return p;
}

START_TEST(task_list_checked) {
  char *dir = gt_test_mkdtemp("eval_tasks");
  char sub[600], list[4096];
  snprintf(sub, sizeof sub, "%s/d2", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  char *a = write_task(dir, "t.jsonl"), *b = write_task(sub, "t.jsonl.gz"), *c = write_task(dir, "u.jsonl");
  gt_err e;
  int n = -1;
  snprintf(list, sizeof list, " %s , %s", a, c);
  ck_assert_msg(gt_eval_tasks_check(list, 8, &n, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(n, 2);
  /* t.jsonl and d2/t.jsonl.gz: both 't' */
  snprintf(list, sizeof list, "%s,%s,%s", a, c, b);
  ck_assert(gt_eval_tasks_check(list, 0, &n, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'eval_tasks' names two tasks called 't'") && strstr(e.msg, b), "%s", e.msg);
  /* two names alike in their first 63 characters: one name once cut */
  char l1[80], l2[80];
  memset(l1, 'x', 70);
  memcpy(l1 + 70, "1.jsonl", 8);
  memcpy(l2, l1, sizeof l1);
  l2[70] = '2';
  char *p1 = write_task(dir, l1), *p2 = write_task(dir, l2);
  snprintf(list, sizeof list, "%s,%s", p1, p2);
  ck_assert(gt_eval_tasks_check(list, 0, &n, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "their names cut to 63 characters"), "%s", e.msg);
  /* a file that does not open; more than max */
  snprintf(list, sizeof list, "%s,%s/none.jsonl", a, dir);
  ck_assert(gt_eval_tasks_check(list, 0, &n, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'eval_tasks': task file") && strstr(e.msg, "none.jsonl' cannot be opened"), "%s",
                e.msg);
  snprintf(list, sizeof list, "%s,%s", a, c);
  ck_assert(gt_eval_tasks_check(list, 1, &n, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "names more than 1 task files"), "%s", e.msg);
  /* training's limit and its never-evaluating runs */
  gt_config cfg;
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", list};
  char key[4200];
  snprintf(key, sizeof key, "eval_tasks=%s,%s", a, c);
  ov[2] = key;
  ck_assert_msg(gt_config_load(&cfg, GT_SOURCE_DIR "/configs", NULL, 3, ov, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_eval_train_tasks_check(&cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_eval_train_never_evaluates(&cfg)); /* synthetic: no held-out data */
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "text");
  cfg.eval_interval = -1;
  ck_assert(gt_eval_train_never_evaluates(&cfg));
  cfg.eval_interval = 10;
  ck_assert(!gt_eval_train_never_evaluates(&cfg));
  free(a), free(b), free(c), free(p1), free(p2);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* ---------- a sweep's task columns ---------- */

START_TEST(sweep_task_columns) {
  ck_assert(gt_sweep_is_metric("tasks/hs/acc") && gt_sweep_is_metric("tasks/a/b/acc_norm_stderr") &&
            gt_sweep_is_metric("tasks/hs/n"));
  ck_assert(!gt_sweep_is_metric("tasks/hs/f1") && !gt_sweep_is_metric("tasks//acc") && !gt_sweep_is_metric("tasks/acc"));
  char *dir = gt_test_mkdtemp("eval_sweep");
  char path[512];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  ck_assert(f);
  /* two evals: the last one's scores are the point's */
  fputs("{\"step\": 0, \"loss\": 3, \"eval_loss\": 2.5, \"tasks\": {\"hs\": {\"n\": 4, \"acc\": 0.25, \"acc_norm\": 0.5, "
        "\"acc_stderr\": 0.25, \"acc_norm_stderr\": 0.2886}}}\n"
        "{\"step\": 1, \"loss\": 2}\n"
        "{\"step\": 2, \"loss\": 1.5, \"eval_loss\": 2, \"tasks\": {\"hs\": {\"n\": 4, \"acc\": 0.75, \"acc_norm\": 1, "
        "\"acc_stderr\": 0.25, \"acc_norm_stderr\": 0}, \"mmlu\": {\"n\": 3, \"acc\": null, \"acc_norm\": 0}}}\n",
        f);
  fclose(f);
  gt_sweep_result r, back;
  gt_sweep_result_init(&r);
  gt_err e;
  ck_assert_msg(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_sweep_result_metric(&r, "tasks/hs/acc") == 0.75);
  ck_assert(gt_sweep_result_metric(&r, "tasks/hs/acc_norm") == 1.0);
  ck_assert(gt_sweep_result_metric(&r, "tasks/hs/n") == 4.0);
  ck_assert(gt_sweep_result_metric(&r, "tasks/mmlu/acc_norm") == 0.0);
  ck_assert(isnan(gt_sweep_result_metric(&r, "tasks/mmlu/acc")));   /* null: not measured */
  ck_assert(isnan(gt_sweep_result_metric(&r, "tasks/other/acc"))); /* never evaluated */
  /* results.jsonl keeps them */
  r.point = 1;
  char *line = gt_sweep_result_to_json(&r);
  ck_assert_msg(gt_sweep_result_from_json(&back, line, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_sweep_result_metric(&back, "tasks/hs/acc") == 0.75);
  ck_assert(gt_sweep_result_metric(&back, "tasks/mmlu/n") == 3.0);
  ck_assert(isnan(gt_sweep_result_metric(&back, "tasks/mmlu/acc")));
  free(line);
  gt_sweep_result_free(&back);
  gt_sweep_result_free(&r);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("eval");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, metrics_by_hand);
  tcase_add_test(tc, encode_pair_as_the_harness);
  tcase_add_test(tc, encode_pair_gemma3);
  tcase_add_test(tc, bad_records);
  tcase_add_test(tc, loglikelihood_against_reference);
  tcase_add_test(tc, invariant_to_batch_and_devices);
  tcase_add_test(tc, moe_within_rounding_of_batch_and_devices);
  tcase_add_test(tc, task_list_checked);
  tcase_add_test(tc, sweep_task_columns);
  return gt_test_run_suite(s, 0);
}
