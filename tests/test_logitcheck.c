/* The logit checker's metrics against values worked out by hand, and its
 * golden JSONL format: bit-exact round trip and every refusal by line. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemtrain/logitcheck.h"
#include "gt_testutil.h"

static char *g_dir;

static void setup(void) { g_dir = gt_test_mkdtemp("lc"); }

static void teardown(void) {
  gt_test_system("rm -rf '%s'", g_dir);
  free(g_dir);
}

START_TEST(test_kl_by_hand) {
  /* position 0: golden p = (1, 2, 3)/6 (logits log 1, log 2, log 3, shifted
   * by 5, which softmax ignores), model q uniform; position 1: equal. */
  float golden[6] = {5.0f, 5.0f + (float)log(2.0), 5.0f + (float)log(3.0), 1, 2, 3};
  float model[6] = {0, 0, 0, 1, 2, 3};
  gt_logit_cmp c;
  gt_err e;
  ck_assert_int_eq(gt_logit_compare(model, 3, golden, 3, 2, &c, &e), GT_OK);
  /* sum p log(p / q) with p computed from the float32 logits */
  double p1 = 1.0, p2 = exp((double)(float)log(2.0)), p3 = exp((double)(float)log(3.0)), z = p1 + p2 + p3;
  double want = p1 / z * log(p1 / z * 3) + p2 / z * log(p2 / z * 3) + p3 / z * log(p3 / z * 3);
  ck_assert_msg(fabs(c.kl[0] - want) < 1e-12, "%.17g vs %.17g", c.kl[0], want);
  ck_assert(fabs(want - (log(0.5) / 6 + log(1.5) / 2)) < 1e-7); /* the exact (1,2,3)/6 value */
  ck_assert(fabs(c.kl[1]) < 1e-15);
  ck_assert(c.kl_max == c.kl[0] && c.kl_argmax == 0);
  ck_assert(fabs(c.kl_mean - want / 2) < 1e-12);
  /* the largest |difference|: position 0, index 2 */
  ck_assert(c.abs_pos == 0 && c.abs_index == 2);
  ck_assert(fabs(c.max_abs_diff - (5.0 + (float)log(3.0))) < 1e-6);
  ck_assert_int_eq(c.k, 3);
  gt_logit_cmp_free(&c);
}
END_TEST

START_TEST(test_topk_metrics) {
  /* 14 entries; golden's top 10 are ids 13..4 (descending); the model swaps
   * ids 13 and 12 and has id 0 instead of id 4 */
  float golden[14], model[14];
  for (int i = 0; i < 14; i++) golden[i] = model[i] = (float)i;
  model[13] = 12, model[12] = 13;
  model[0] = 4.5f;
  gt_logit_cmp c;
  gt_err e;
  ck_assert_int_eq(gt_logit_compare(model, 14, golden, 14, 1, &c, &e), GT_OK);
  ck_assert_int_eq(c.k, 10);
  int64_t want_g[10] = {13, 12, 11, 10, 9, 8, 7, 6, 5, 4};
  int64_t want_m[10] = {12, 13, 11, 10, 9, 8, 7, 6, 5, 0};
  for (int i = 0; i < 10; i++) ck_assert(c.top_golden[i] == want_g[i] && c.top_model[i] == want_m[i]);
  ck_assert_int_eq(c.overlap, 9);                    /* all but 4 / 0 */
  ck_assert(fabs(c.jaccard - 9.0 / 11.0) < 1e-12);   /* union of 11 ids */
  ck_assert(fabs(c.rank_agreement - 70.0) < 1e-12);  /* ranks 2..8 agree */
  gt_logit_cmp_free(&c);
  /* ties go to the lower id */
  float flat[5] = {1, 3, 3, 2, 3};
  int64_t idx[3];
  gt_logit_topk(flat, 5, 3, idx);
  ck_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 4);
}
END_TEST

START_TEST(test_vocab_mismatch) {
  /* a golden file from a 262208-row HF head against a 262144 model: the
   * common entries are compared (MaxText does the same) */
  float model[4] = {0, 1, 2, 3}, golden[6] = {0, 1, 2, 3, 100, 100};
  gt_logit_cmp c;
  gt_err e;
  ck_assert_int_eq(gt_logit_compare(model, 4, golden, 6, 1, &c, &e), GT_OK);
  ck_assert_int_eq(c.vocab, 4);
  ck_assert(c.kl[0] == 0 && c.max_abs_diff == 0);
  gt_logit_cmp_free(&c);
}
END_TEST

START_TEST(test_golden_roundtrip) {
  char *p = NULL;
  ck_assert(asprintf(&p, "%s/g.jsonl", g_dir) > 0);
  uint64_t st = 3;
  float lg[2 * 3 * 7];
  gt_test_fill(lg, 42, &st, -30.0f, 30.0f);
  float odd[4] = {1e-38f, -3.4028235e38f, 0.1f, 1.17549435e-38f / 3}; /* tiny, huge, inexact, subnormal */
  memcpy(lg, odd, sizeof odd);
  int32_t tok[2][3] = {{5, 0, 6}, {1, 2, 3}};
  FILE *f = fopen(p, "w");
  fputs("\n", f); /* blank lines are skipped */
  ck_assert_int_eq(gt_golden_write_line(f, tok[0], 3, lg, 7), 0);
  ck_assert_int_eq(gt_golden_write_line(f, tok[1], 3, lg + 21, 7), 0);
  fputs("{\"prompt\": \"I love to\", \"tokens\": [4], \"logits\": [[1, 2.5]]}\n", f); /* MaxText's extra key */
  fclose(f);
  gt_golden g;
  gt_err e;
  ck_assert_msg(gt_golden_read(p, &g, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(g.n, 3);
  for (int s = 0; s < 2; s++) {
    ck_assert(g.seqs[s].n_tokens == 3 && g.seqs[s].vocab == 7);
    ck_assert(memcmp(g.seqs[s].tokens, tok[s], sizeof tok[s]) == 0);
    ck_assert_msg(memcmp(g.seqs[s].logits, lg + 21 * s, 21 * sizeof(float)) == 0, "sequence %d not bit-exact", s);
  }
  ck_assert(g.seqs[2].vocab == 2 && g.seqs[2].logits[1] == 2.5f && g.seqs[2].tokens[0] == 4);
  gt_golden_free(&g);
  free(p);
}
END_TEST

START_TEST(test_golden_refusals) {
  struct {
    const char *text, *want;
  } cases[] = {
      {"{\"tokens\": [1], \"logits\": [[1]]}\nnot json\n", "line 2 is not valid JSON"},
      {"[1, 2]\n", "line 1 is not a JSON object"},
      {"{\"tokens\": [1]}\n", "line 1 needs arrays \"tokens\" and \"logits\""},
      {"{\"tokens\": [1, 2], \"logits\": [[1, 2]]}\n", "line 1 has 2 tokens but 1 rows of logits"},
      {"{\"tokens\": [1, 2], \"logits\": [[1, 2], [3]]}\n", "line 1: logits[1] has 1 entries, logits[0] has 2"},
      {"{\"tokens\": [1, -2], \"logits\": [[1], [3]]}\n", "line 1: tokens[1] is not a token id"},
      {"{\"tokens\": [1], \"logits\": [[1, \"x\"]]}\n", "line 1: logits[0][1] is not a number"},
      {"{\"tokens\": [], \"logits\": []}\n", "line 1 has no tokens"},
      {"\n\n", "holds no sequences"},
  };
  char *p = NULL;
  ck_assert(asprintf(&p, "%s/bad.jsonl", g_dir) > 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FILE *f = fopen(p, "w");
    fputs(cases[i].text, f);
    fclose(f);
    gt_golden g;
    gt_err e;
    gt_err_clear(&e);
    ck_assert_int_eq(gt_golden_read(p, &g, &e), GT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, cases[i].want) && strstr(e.msg, p), "case %zu: '%s' lacks '%s'", i, e.msg,
                  cases[i].want);
    ck_assert(g.n == 0 && g.seqs == NULL);
  }
  gt_golden g;
  gt_err e;
  ck_assert_int_eq(gt_golden_read("/nonexistent/g.jsonl", &g, &e), GT_ERR_IO);
  free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("logitcheck");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_kl_by_hand);
  tcase_add_test(tc, test_topk_metrics);
  tcase_add_test(tc, test_vocab_mismatch);
  tcase_add_test(tc, test_golden_roundtrip);
  tcase_add_test(tc, test_golden_refusals);
  suite_add_tcase(s, tc);
  return gt_test_run_suite(s, 0);
}
