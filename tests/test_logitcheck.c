/* The logit checker's metrics against values worked out by hand, and its
 * golden JSONL format: bit-exact round trip and every refusal by line. */
#define _GNU_SOURCE
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/logitcheck.h"
#include "gt_testutil.h"

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
  /* a golden row shorter or longer than the model's vocabulary
   * used to be compared over the common prefix and could pass; a row must
   * hold one logit per vocabulary entry */
  float model[4] = {0, 1, 2, 3}, golden[6] = {0, 1, 2, 3, 100, 100};
  gt_logit_cmp c;
  gt_err e;
  ck_assert_int_eq(gt_logit_compare(model, 4, golden, 6, 1, &c, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "golden rows hold 6 logits but the model's vocabulary has 4 entries"), "%s", e.msg);
  ck_assert_ptr_null(c.kl);
  ck_assert_int_eq(gt_logit_compare(golden, 6, model, 4, 1, &c, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "golden rows hold 4 logits but the model's vocabulary has 6 entries"), "%s", e.msg);
}
END_TEST

START_TEST(test_compare_nonfinite_golden) {
  /* a NaN or infinite golden logit used to give KL 0 (its probability was
   * NaN and skipped), so max_kl_div alone passed whatever the model said;
   * the comparison refuses it, naming the position and index */
  float model[6] = {9, 0, 0, 0, 0, 9};
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  const char *name[3] = {"NaN", "Infinity", "-Infinity"};
  for (int i = 0; i < 3; i++) {
    float golden[6] = {0, 1, 2, 3, 4, 5};
    golden[4] = bad[i];
    gt_logit_cmp c;
    gt_err e;
    ck_assert_int_eq(gt_logit_compare(model, 3, golden, 3, 2, &c, &e), GT_ERR_FORMAT);
    char want[128];
    snprintf(want, sizeof want, "golden logit at position 1, vocab index 1 is %s", name[i]);
    ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
    ck_assert_ptr_null(c.kl);
  }
}
END_TEST

START_TEST(test_golden_roundtrip) {
  char *p = NULL;
  p = gt_test_dir_path("g.jsonl");
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
      /* the streaming reader's own refusals, each naming its line */
      {"{\"tokens\": [1], \"logits\": [[1]]}\n\n{\"tokens\": [1], \"logits\": [[1,\n2]]}\n",
       "line 3 is not valid JSON: expected a JSON value at column 31, found the end of the line"},
      {"{\"tokens\": [1], \"logits\": [[1",
       "line 1 is not valid JSON: expected ',' or ']' at column 30, found the end of the file"},
      {"{\"tokens\": [1], \"logits\": [[1]]} x\n",
       "line 1 is not valid JSON: expected the end of the line after the value at column 34, found 'x'"},
      {"{\"tokens\": [1], \"logits\": [[1]]}{}\n",
       "line 1 is not valid JSON: expected the end of the line after the value at column 33"},
      {"{\"logits\": [[1]]}\n", "line 1 needs arrays \"tokens\" and \"logits\", found none and an array"},
      {"{\"tokens\": \"1\", \"logits\": [[1]]}\n",
       "line 1 needs arrays \"tokens\" and \"logits\", found another type and an array"},
      {"{\"logits\": {\"0\": [1]}, \"tokens\": [1]}\n", "found an array and another type"},
      {"{}\n", "line 1 needs arrays \"tokens\" and \"logits\", found none and none"},
      {"{\"tokens\": [1.5], \"logits\": [[1]]}\n", "line 1: tokens[0] is not a token id"},
      {"{\"tokens\": [1, NaN], \"logits\": [[1], [2]]}\n", "line 1: tokens[1] is not a token id"},
      {"{\"tokens\": [\"3\"], \"logits\": [[1]]}\n", "line 1: tokens[0] is not a token id"},
      {"{\"tokens\": [3e9], \"logits\": [[1]]}\n", "line 1: tokens[0] is not a token id"},
      {"{\"tokens\": [1], \"logits\": [[]]}\n", "line 1: logits[0] is not a non-empty array"},
      {"{\"tokens\": [1], \"logits\": [1]}\n", "line 1: logits[0] is not a non-empty array"},
      {"{\"tokens\": [1, 2], \"logits\": [[1], []]}\n", "line 1: logits[1] has 0 entries, logits[0] has 1"},
      {"{\"tokens\": [1, 2], \"logits\": [[1], 2]}\n", "line 1: logits[1] has 0 entries, logits[0] has 1"},
      {"{\"tokens\": [1, 2], \"logits\": [[1], [2, 3, 4]]}\n", "line 1: logits[1] has 3 entries, logits[0] has 1"},
      {"{\"logits\": [[1, 2], [3]], \"tokens\": [1, 2]}\n", "line 1: logits[1] has 1 entries, logits[0] has 2"},
      {"{\"logits\": [[1], [2]], \"tokens\": [1]}\n", "line 1 has 1 tokens but 2 rows of logits"},
      {"{\"tokens\": [1], \"logits\": [[1], [2], [\"x\"]]}\n", "line 1 has 1 tokens but 3 rows of logits"},
      {"{\"tokens\": [1], \"logits\": [[1]], \"logits\": [[2]]}\n", "line 1 has the key \"logits\" twice"},
      {"{\"tokens\": [1], \"logits\": [[01]]}\n",
       "line 1 is not valid JSON: expected ',' or ']' at column 30, found '1'"},
      {"{\"tokens\": [1], \"logits\": [[1.]]}\n", "line 1 is not valid JSON: expected a digit after '.' at column 31"},
      {"{\"tokens\": [1], \"logits\": [[1e+]]}\n", "line 1 is not valid JSON: expected a digit in the exponent"},
      {"{\"tokens\": [1], \"logits\": [[-]]}\n", "line 1 is not valid JSON: expected a digit at column 30"},
      {"{\"tokens\": [1], \"logits\": [[+1]]}\n",
       "line 1 is not valid JSON: expected a JSON value at column 29, found '+'"},
      {"{\"tokens\": [1], \"logits\": [[.5]]}\n",
       "line 1 is not valid JSON: expected a JSON value at column 29, found '.'"},
      {"{\"tokens\": [1], \"logits\": [[-Infinit]]}\n", "line 1 is not valid JSON: expected \"Infinity\" at column 37"},
      {"{\"tokens\": [1], \"logits\": [[nan]]}\n", "line 1: logits[0][0] is not a number"},
      {"{\"tokens\": [1,], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected a JSON value at column 15, found ']'"},
      {"{\"tokens\": [1], \"logits\": [[1]],}\n",
       "line 1 is not valid JSON: expected a key string at column 33, found '}'"},
      {"{\"tokens\" [1], \"logits\": [[1]]}\n", "line 1 is not valid JSON: expected ':' at column 11, found '['"},
      {"{\"tokens\": [1] \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected ',' or '}' at column 16, found '\"'"},
      {"{\"p\": \"a\\qb\", \"tokens\": [1], \"logits\": [[1]]}\n", "line 1 is not valid JSON: expected an escape"},
      {"{\"p\": \"\\u12G4\", \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected a hex digit of a \\u escape at column 12, found 'G'"},
      {"{\"p\": \"a\tb\", \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected a string character"},
      {"{\"p\": \"ab\n\", \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected '\"' closing the string at column 10, found the end of the line"},
      {"{\"p\": [1, {\"a\": tru}], \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected \"true\" at column 20, found '}'"},
      {"{\"p\": [1 2], \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected ',' or ']' at column 10, found '2'"},
      {"{\"p\": {\"a\" 1}, \"tokens\": [1], \"logits\": [[1]]}\n",
       "line 1 is not valid JSON: expected ':' at column 12, found '1'"},
      {"{\"tokens\": [1], \"logits\": [[1]]}\n\"just a string\"\n", "line 2 is not a JSON object"},
      /* non-finite golden logits are refused by line and position
       * (Python writes NaN and Infinity; a KL against them means nothing) */
      {"{\"tokens\": [1], \"logits\": [[1]]}\n{\"tokens\": [1, 2], \"logits\": [[1, 2], [3, NaN]]}\n",
       "line 2: logits[1][1] is NaN; golden logits must be finite"},
      {"{\"tokens\": [1], \"logits\": [[Infinity, 0]]}\n", "line 1: logits[0][0] is Infinity; golden logits"},
      {"{\"logits\": [[0, 0, -Infinity]], \"tokens\": [1]}\n", "line 1: logits[0][2] is -Infinity; golden"},
      {"{\"tokens\": [1], \"logits\": [[0, 1e39]]}\n",
       "line 1: logits[0][1] is 1e+39, beyond float32 (Infinity); golden logits must be finite"},
      {"{\"tokens\": [1, 2], \"logits\": [[0], [-4e38]]}\n", "line 1: logits[1][0] is -4e+38, beyond float32"},
  };
  char *p = NULL;
  p = gt_test_dir_path("bad.jsonl");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_test_write_text(p, cases[i].text);
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

/* Writes text to gt_test_dir/name and reads it; the caller frees g and the path. */
static gt_rc read_text(const char *text, gt_golden *g, gt_err *e) {
  char *p = NULL;
  p = gt_test_dir_path("t.jsonl");
  gt_test_write_text(p, text);
  gt_err_clear(e);
  gt_rc rc = gt_golden_read(p, g, e);
  free(p);
  return rc;
}

START_TEST(test_golden_refusals_limits) {
  /* a skipped value nested past cJSON's limit of 1000 levels (the line's
   * object counts as one), and a number too long to be a float's text: both
   * refused, neither crashes */
  size_t n = 1000;
  char *text = malloc(2 * n + 64), *q = text;
  q += sprintf(q, "{\"p\": ");
  for (size_t i = 0; i < n; i++) *q++ = '[';
  for (size_t i = 0; i < n; i++) *q++ = ']';
  sprintf(q, ", \"tokens\": [1], \"logits\": [[1]]}\n");
  gt_golden g;
  gt_err e;
  ck_assert_int_eq(read_text(text, &g, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "line 1: values nested deeper than 1000 at column 1006"), "%s", e.msg);
  /* 1000 levels in all are fine */
  q = text + sprintf(text, "{\"p\": ");
  for (size_t i = 0; i < n - 1; i++) *q++ = '[';
  for (size_t i = 0; i < n - 1; i++) *q++ = ']';
  sprintf(q, ", \"tokens\": [1], \"logits\": [[1]]}\n");
  ck_assert_msg(read_text(text, &g, &e) == GT_OK, "%s", e.msg);
  gt_golden_free(&g);
  free(text);
  char num[1200] = "{\"tokens\": [1], \"logits\": [[0.";
  size_t len = strlen(num);
  memset(num + len, '1', 1030);
  strcpy(num + len + 1030, "]]}\n");
  ck_assert_int_eq(read_text(num, &g, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "line 1: a number at column 29 is longer than 1024 characters"), "%s", e.msg);
}
END_TEST

/* The float a JSON number text must give: strtod, then rounded to float. */
static float want_float(const char *text) { return (float)strtod(text, NULL); }

START_TEST(test_golden_forms) {
  /* line 2: keys in the other order, other keys before, between and after
   * with nested values and strings holding escaped quotes and brackets;
   * line 4 (after a blank line of spaces): whitespace everywhere JSON allows
   * it within the line and a CRLF ending; line 5: every JSON number form
   * (Python's NaN / Infinity, which its json module writes for non-finite
   * floats, in a skipped key: as logits they are refused), a key spelt with a \u escape, no final newline */
  const char *text =
      "\n"
      "{\"prompt\": \"say \\\"]}\\\" or [{\\\\\\/\\u005d\\u00e9\", "
      "\"logits\": [[1, 2.5, -3], [4, 5, 6e-1]], "
      "\"meta\": {\"a\": [1, {\"b\": [[], {}, \"]\"]}], \"t\": true, \"f\": false, \"n\": null, \"x\": [NaN, "
      "-Infinity]}, "
      "\"tokens\": [9, 0], \"tail\": {}}\n"
      "   \t \r\n"
      " \t{ \"tokens\" :[ 1 ,\t2 ] ,\r \"logits\"\t:\t[ [ 1 , 2 ] ,[3,4]\r] }  \r\n"
      "{\"\\u0074okens\": [3.0, 1e1, 2E0], \"logits\": "
      "[[-0, 0, 1e-7, 1E+3, 0.5e2, 12, -12, 1.5E-2, 3.4028235e38, 1e-45, -3.4028235e38, 1.17549435E-38, 8e-46, "
      "-1e-50, 0.100000001], "
      "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.0], "
      "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 123456789012345678901234567890]]}";
  gt_golden g;
  gt_err e;
  ck_assert_msg(read_text(text, &g, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(g.n, 3);
  /* line 2 */
  ck_assert(g.seqs[0].n_tokens == 2 && g.seqs[0].vocab == 3);
  ck_assert(g.seqs[0].tokens[0] == 9 && g.seqs[0].tokens[1] == 0);
  float l0[6] = {1, 2.5f, -3, 4, 5, want_float("6e-1")};
  ck_assert(memcmp(g.seqs[0].logits, l0, sizeof l0) == 0);
  /* line 4 */
  ck_assert(g.seqs[1].n_tokens == 2 && g.seqs[1].vocab == 2);
  ck_assert(g.seqs[1].tokens[0] == 1 && g.seqs[1].tokens[1] == 2);
  float l1[4] = {1, 2, 3, 4};
  ck_assert(memcmp(g.seqs[1].logits, l1, sizeof l1) == 0);
  /* line 5: tokens as integral numbers in any form, as before */
  const gt_golden_seq *s = &g.seqs[2];
  ck_assert(s->n_tokens == 3 && s->vocab == 15);
  ck_assert(s->tokens[0] == 3 && s->tokens[1] == 10 && s->tokens[2] == 2);
  const char *forms[14] = {"-0",    "0",             "1e-7",           "1E+3",  "0.5e2",  "12",   "-12",
                           "1.5E-2", "3.4028235e38", "1e-45", "-3.4028235e38", "1.17549435E-38", "8e-46", "-1e-50"};
  for (int v = 0; v < 14; v++) {
    float w = want_float(forms[v]);
    ck_assert_msg(memcmp(&s->logits[v], &w, sizeof w) == 0, "%s read as %.9g", forms[v], (double)s->logits[v]);
  }
  ck_assert(signbit(s->logits[0]) && s->logits[0] == 0 && !signbit(s->logits[1]));
  ck_assert(s->logits[2] == 1e-7f && s->logits[3] == 1000.0f && s->logits[4] == 50.0f && s->logits[6] == -12.0f);
  ck_assert(s->logits[9] == nextafterf(0, 1));          /* the smallest subnormal */
  ck_assert(s->logits[10] == -FLT_MAX && s->logits[11] == FLT_MIN);
  ck_assert(s->logits[12] == nextafterf(0, 1)); /* 8e-46 rounds up to the smallest subnormal */
  ck_assert(s->logits[13] == 0 && signbit(s->logits[13])); /* underflow keeps its sign */
  ck_assert(s->logits[14] == 0.1f); /* double first, then float: 0.100000001 -> 0.1f */
  ck_assert(signbit(s->logits[15 + 14]) && s->logits[15 + 14] == 0);
  ck_assert(s->logits[30 + 14] == want_float("123456789012345678901234567890"));
  gt_golden_free(&g);
}
END_TEST

/* Resident-set peak since the last reset, and the current size, in bytes. */
static long long proc_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  ck_assert(f != NULL);
  char line[256];
  long long kb = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = atoll(line + n + 1);
  fclose(f);
  ck_assert_msg(kb >= 0, "no %s in /proc/self/status", field);
  return kb * 1024;
}

START_TEST(test_golden_large) {
  /* a real Gemma vocabulary: 8 positions of 262144 logits, ~27 MB of text
   * per line. A JSON tree of it (the old reader) took ~64 bytes per number
   * plus the line, ~170 MB; the streaming reader should need the output
   * arrays (8 MiB) and little else. Two files: the writer's order, and
   * "logits" before "tokens" with a prompt in front (rows then grow
   * geometrically). */
  enum { T = 8, V = 262144 };
  uint64_t st = 11;
  float *lg = malloc(sizeof(float) * T * V);
  gt_test_fill(lg, (int64_t)T * V, &st, -40.0f, 40.0f);
  lg[5] = -0.0f, lg[6] = 1e-40f, lg[7] = 3.4028235e38f; /* signed zero, subnormal, FLT_MAX */
  int32_t tok[T] = {2, 262143, 0, 7, 7, 100000, 1, 5};
  char *p[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    ck_assert(asprintf(&p[k], "%s/big%d.jsonl", gt_test_dir, k) > 0);
    FILE *f = fopen(p[k], "w");
    ck_assert(f != NULL);
    if (k == 0) {
      ck_assert_int_eq(gt_golden_write_line(f, tok, T, lg, V), 0);
    } else {
      fputs("{\"prompt\": \"I love to\", \"logits\": [", f);
      for (int t = 0; t < T; t++) {
        fputs(t ? ", [" : "[", f);
        for (int v = 0; v < V; v++) fprintf(f, "%s%.9g", v ? "," : "", (double)lg[(size_t)t * V + v]);
        fputc(']', f);
      }
      fputs("], \"tokens\": [", f);
      for (int t = 0; t < T; t++) fprintf(f, "%s%d", t ? ", " : "", tok[t]);
      fputs("]}\n", f);
    }
    ck_assert(fclose(f) == 0);
  }
  for (int k = 0; k < 2; k++) {
    gt_golden g;
    gt_err e;
    gt_err_clear(&e);
    /* the peak resident size is reset (Linux's clear_refs "5") so that the
     * read's own peak can be measured */
    FILE *c = fopen("/proc/self/clear_refs", "w");
    ck_assert_msg(c && fputs("5", c) >= 0 && fclose(c) == 0, "cannot reset the peak RSS");
    long long before = proc_kb("VmRSS");
    ck_assert_msg(gt_golden_read(p[k], &g, &e) == GT_OK, "%s", e.msg);
    long long grown = proc_kb("VmHWM") - before;
    long long out = (long long)sizeof(float) * T * V;
    /* the output plus 4 MiB (the 64 KiB read buffer, the row-0 growth and
     * the allocator's own pages). glibc grows large blocks in place
     * (mremap); ASan's realloc copies, so there the last doubling briefly
     * holds the old half beside the new block, and shadow memory comes on
     * top: allow twice the output. */
#if defined(__SANITIZE_ADDRESS__)
    long long limit = 2 * out + (4 << 20);
#else
    long long limit = out + (4 << 20);
#endif
    ck_assert_msg(grown <= limit, "file %d: the read grew the RSS by %lld bytes for %lld of output (limit %lld)", k,
                  grown, out, limit);
    ck_assert(g.n == 1 && g.seqs[0].n_tokens == T && g.seqs[0].vocab == V);
    ck_assert(memcmp(g.seqs[0].tokens, tok, sizeof tok) == 0);
    ck_assert_msg(memcmp(g.seqs[0].logits, lg, sizeof(float) * T * V) == 0, "file %d not bit-exact", k);
    gt_golden_free(&g);
    free(p[k]);
  }
  free(lg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("logitcheck");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_kl_by_hand);
  tcase_add_test(tc, test_topk_metrics);
  tcase_add_test(tc, test_vocab_mismatch);
  tcase_add_test(tc, test_compare_nonfinite_golden);
  tcase_add_test(tc, test_golden_roundtrip);
  tcase_add_test(tc, test_golden_refusals);
  tcase_add_test(tc, test_golden_refusals_limits);
  tcase_add_test(tc, test_golden_forms);
  tcase_add_test(tc, test_golden_large);
  return gt_test_run_suite(s, 0);
}
