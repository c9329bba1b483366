/* Packed documents and SFT masks through the model: a row the data source
 * packs with three documents gives each document the logits and the loss
 * it gets alone (segment ids keep attention inside a document, positions
 * restart, no target crosses a boundary), on local (window) and global
 * layers; and an SFT row's gradient is the sum of its completion tokens'
 * gradients alone, so the prompt's targets take no part in it. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "exec/exec.h"
#include "model/model.h"
#include "gt_testutil.h"

static char *write_tmp(const char *name, const char *text) {
  char *dir = gt_test_mkdtemp("packing"), *p = gt_test_path(dir, name);
  free(dir);
  gt_test_write_text(p, text);
  return p;
}

static gt_batch read_batch(gt_data *d, const gt_config *c, gt_mem *mem) {
  gt_err e;
  ck_assert_msg(gt_data_open(d, c, mem, &e) == GT_OK, "%s", e.msg);
  gt_batch b;
  ck_assert_msg(gt_data_read_train(d, &b, &e) == GT_OK, "%s", e.msg);
  return b;
}

START_TEST(test_packed_documents_match_alone) {
  /* 10, 15 and 10 bytes: 12 + 17 + 12 = 41 tokens with <bos> and <eos>,
   * one row of T + 1 = 41; the 17-token document is longer than the local
   * window of gemma3-tiny (16) */
  const char *texts[3] = {"In the beg", "inning God crea", "ted heaven"};
  char *p = write_tmp("three.jsonl", "{\"text\": \"In the beg\"}\n{\"text\": \"inning God crea\"}\n"
                                     "{\"text\": \"ted heaven\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=40",
                      "per_device_batch_size=1", "eval_split_fraction=0", "eval_interval=-1"};
  gt_config c;
  gt_mem mem;
  gt_model m;
  gt_test_model_random(&m, &c, &mem, 7, ov, 3, 0);
  ck_assert_int_eq(m.layers[0].kind, GT_LAYER_LOCAL);
  gt_mem dmem;
  gt_mem_init(&dmem);
  gt_data d;
  gt_batch b = read_batch(&d, &c, &dmem);
  int T = 40, V = (int)m.vocab;
  ck_assert_int_eq(b.segments[11], 1);
  ck_assert_int_eq(b.segments[12], 2);
  ck_assert_int_eq(b.segments[29], 3);
  float *packed = malloc(sizeof(float) * (size_t)T * V);
  gt_err e;
  ck_assert_msg(gt_exec_forward_logits(&m, &b, packed, &e) == GT_OK, "%s", e.msg);
  gt_loss_stats whole = {0};
  ck_assert(gt_exec_forward_loss(&m, &b, 1, &whole, &e) == GT_OK);
  ck_assert_int_eq(whole.total_weights, 11 + 16 + 11);
  double alone_sum = 0, worst = 0;
  int start = 0;
  for (int k = 0; k < 3; k++) {
    /* the document alone: <bos> text as inputs, text <eos> as targets */
    int n = (int)strlen(texts[k]) + 1;
    int32_t in[20], tg[20], pos[20];
    in[0] = GT_TOK_BOS;
    for (int i = 0; i < n - 1; i++) in[i + 1] = 4 + (unsigned char)texts[k][i];
    for (int i = 0; i < n; i++) {
      tg[i] = i + 1 < n ? in[i + 1] : GT_TOK_EOS;
      pos[i] = i;
      ck_assert_int_eq(b.inputs[start + i], in[i]);
      ck_assert_int_eq(b.targets[start + i], tg[i]);
      ck_assert_int_eq(b.positions[start + i], i);
    }
    if (k < 2) ck_assert_int_eq(b.targets[start + n], -1); /* <eos> predicts nothing across the boundary */
    gt_batch one = {1, n, in, tg, pos, NULL};
    float *alone = malloc(sizeof(float) * (size_t)n * V);
    ck_assert(gt_exec_forward_logits(&m, &one, alone, &e) == GT_OK);
    double err = gt_test_max_abs_err(packed + (size_t)start * V, alone, (int64_t)n * V);
    double scale = gt_test_max_abs(alone, (int64_t)n * V);
    if (err / scale > worst) worst = err / scale;
    gt_loss_stats st = {0};
    ck_assert(gt_exec_forward_loss(&m, &one, 1, &st, &e) == GT_OK);
    ck_assert_int_eq(st.total_weights, n);
    alone_sum += st.xent_sum;
    free(alone);
    start += n + 1;
  }
  /* the same math on batches of other sizes: equal up to the float32
   * summation order of the blocked matmuls (observed 5e-7 of the largest
   * logit, 4e-9 of the loss); a document that saw another would be off by
   * more than 1e-4 (below) */
  gt_test_check_err("packed vs alone logits", worst, 1e-5);
  gt_test_check_err("packed vs alone loss", fabs(whole.xent_sum - alone_sum) / alone_sum, 1e-5);
  /* and without segment ids the documents do see each other */
  b.segments = NULL;
  gt_loss_stats open_st = {0};
  ck_assert(gt_exec_forward_loss(&m, &b, 1, &open_st, &e) == GT_OK);
  ck_assert(fabs(open_st.xent_sum - alone_sum) / alone_sum > 1e-4);
  free(packed);
  gt_data_close(&d);
  gt_model_free(&m);
  free(p);
}
END_TEST

static float *grads_of(gt_model *m, const gt_batch *b, int64_t tw) {
  gt_err e;
  gt_loss_stats st = {0};
  gt_model_zero_grads(m);
  ck_assert_msg(gt_exec_forward_backward(m, b, 1, 1.0f / (float)tw, &st, &e) == GT_OK, "%s", e.msg);
  return gt_test_copy(m->grads, m->n_params);
}

START_TEST(test_sft_gradient_ignores_prompt_targets) {
  char *p = write_tmp("sft.jsonl", "{\"prompt\": \"Say yes: \", \"completion\": \"yes\"}\n");
  char dp[600];
  snprintf(dp, sizeof dp, "dataset_path=%s", p);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=jsonl", dp, "max_target_length=24",
                      "per_device_batch_size=1", "eval_split_fraction=0", "eval_interval=-1", "use_sft=true",
                      "train_data_columns=prompt,completion"};
  gt_config c;
  gt_mem mem;
  gt_model m;
  gt_test_model_random(&m, &c, &mem, 9, ov, 5, 0);
  gt_mem dmem;
  gt_mem_init(&dmem);
  gt_data d;
  gt_batch b = read_batch(&d, &c, &dmem);
  int T = 24;
  int64_t tw = gt_batch_total_weights(&b);
  ck_assert_int_eq(tw, 4); /* "yes" and <eos> */
  float *g = grads_of(&m, &b, tw);
  /* the sum of each completion target's gradient alone */
  int32_t *tg = malloc(sizeof(int32_t) * T);
  gt_model_zero_grads(&m);
  gt_err e;
  for (int j = 0; j < T; j++) {
    if (b.targets[j] < 0) continue;
    for (int t = 0; t < T; t++) tg[t] = t == j ? b.targets[j] : -1;
    gt_batch one = b;
    one.targets = tg;
    gt_loss_stats st = {0};
    ck_assert(gt_exec_forward_backward(&m, &one, 1, 1.0f / (float)tw, &st, &e) == GT_OK); /* adds */
  }
  gt_test_check_err("sft gradient vs its completion targets' sum", gt_test_scaled_err(g, m.grads, m.n_params), 1e-5);
  /* the prompt's next tokens as targets would change it */
  for (int t = 0; t + 1 < T; t++) tg[t] = b.segments[t + 1] == b.segments[t] && b.segments[t] ? b.inputs[t + 1] : b.targets[t];
  gt_batch all = b;
  all.targets = tg;
  float *g_all = grads_of(&m, &all, gt_batch_total_weights(&all));
  ck_assert(gt_test_scaled_err(g_all, g, m.n_params) > 1e-2);
  free(g), free(g_all), free(tg);
  gt_data_close(&d);
  gt_model_free(&m);
  free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("packing");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_packed_documents_match_alone);
  tcase_add_test(tc, test_sft_gradient_ignores_prompt_targets);
  return gt_test_run_suite(s, 0);
}
