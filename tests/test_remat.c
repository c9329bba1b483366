/* Remat changes memory, never math: every policy and both scopes give loss
 * and gradients bit-identical to remat_policy=none, for Gemma 3 and every
 * Gemma 4 kind (KV-shared layers and PLE included), and keep exactly what
 * the policy names (full + layer scope keeps L carries; on a KV-sharing
 * model also the donors' K/V and the per-layer inputs). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "exec/exec.h"
#include "model/layer.h"
#include "model/model.h"
#include "gt_testutil.h"

static const char *policies[] = {"none", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
                                 "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj", "save_out_proj",
                                 "qkv_proj_offloaded", "minimal_offloaded", "full", "custom"};
#define NPOL ((int)(sizeof policies / sizeof policies[0]))

typedef struct run {
  double loss, lb;
  float *grads;
  int64_t n;
  int64_t saved_peak, host_peak;
} run;

static run run_model(const char *model, const char *policy, const char *scope, int layers, const char *pattern,
                     int shared) {
  gt_config c;
  gt_err e;
  gt_test_remat_config(&c, model, policy, scope, layers, pattern, shared);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_test_model_build(&m, &c);
  ck_assert(gt_model_alloc(&m, &mem, &e) == GT_OK);
  gt_model_init_params(&m, 3, 1.0);
  int B = 2, T = 24;
  int32_t in[48], tg[48], pos[48];
  uint64_t st = 77;
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)(gt_test_rand_u64(&st) % 260);
    tg[i] = (int32_t)(gt_test_rand_u64(&st) % 260);
    pos[i] = i % T;
  }
  gt_batch b = {B, T, in, tg, pos, NULL};
  gt_loss_stats ls = {0};
  ck_assert(gt_exec_forward_backward(&m, &b, 1, 1.0f / 48, &ls, &e) == GT_OK);
  run r;
  r.loss = ls.xent_sum;
  r.lb = ls.moe_lb_sum;
  r.n = m.n_params;
  r.grads = malloc(sizeof(float) * (size_t)m.n_params);
  memcpy(r.grads, m.grads, sizeof(float) * (size_t)m.n_params);
  r.saved_peak = gt_mem_peak(&mem, GT_MEM_SAVED);
  r.host_peak = gt_mem_peak(&mem, GT_MEM_HOST);
  int64_t params_only = gt_mem_total_cur(&mem);
  gt_model_free(&m);
  ck_assert(params_only > 0);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_HOST), 0);
  return r;
}

static run run_step(const char *policy, const char *scope, int layers, const char *pattern) {
  return run_model("gemma3-tiny", policy, scope, layers, pattern, 0);
}

/* Every policy and scope against none on one model shape. */
static void check_policies(const char *model, int layers, const char *pattern, int shared) {
  const char *scopes[] = {"layer", "block"};
  run ref = run_model(model, "none", "layer", layers, pattern, shared);
  for (int sc = 0; sc < 2; sc++)
    for (int i = 0; i < NPOL; i++) {
      run r = run_model(model, policies[i], scopes[sc], layers, pattern, shared);
      ck_assert_msg(r.loss == ref.loss && r.lb == ref.lb, "%s L=%d %s: %s/%s: loss differs", model, layers, pattern,
                    policies[i], scopes[sc]);
      ck_assert_msg(memcmp(r.grads, ref.grads, sizeof(float) * (size_t)r.n) == 0, "%s L=%d %s: %s/%s: gradients differ",
                    model, layers, pattern, policies[i], scopes[sc]);
      free(r.grads);
    }
  free(ref.grads);
}

START_TEST(test_every_policy_bit_identical) {
  const char *scopes[] = {"layer", "block"};
  for (int lay = 0; lay < 2; lay++) {
    int layers = lay ? 5 : 6;
    const char *pattern = lay ? "LLG" : "LLLLLG"; /* 5 layers in blocks of 3: a partial last block */
    run ref = run_step("none", "layer", layers, pattern);
    for (int sc = 0; sc < 2; sc++)
      for (int i = 0; i < NPOL; i++) {
        run r = run_step(policies[i], scopes[sc], layers, pattern);
        ck_assert_msg(r.loss == ref.loss, "%s/%s: loss differs", policies[i], scopes[sc]);
        ck_assert_msg(memcmp(r.grads, ref.grads, sizeof(float) * (size_t)r.n) == 0, "%s/%s: gradients differ",
                      policies[i], scopes[sc]);
        if (strstr(policies[i], "offloaded") || !strcmp(policies[i], "custom"))
          ck_assert_msg(r.host_peak > 0, "%s keeps nothing in the host pool", policies[i]);
        else
          ck_assert_int_eq(r.host_peak, 0);
        free(r.grads);
      }
    free(ref.grads);
  }
}
END_TEST

START_TEST(test_gemma4_dense_policies) {
  check_policies("gemma4-tiny-dense", 6, "LLLLLG", 0);
  check_policies("gemma4-tiny-dense", 5, "LLG", 0); /* a partial last block */
}
END_TEST

START_TEST(test_gemma4_moe_policies) {
  /* MoE layers: the routed experts' state goes with mlpwi_0 (kept by
   * minimal, recomputed by full, save_dot_except_mlp, custom, ...); the
   * load-balance sum must not change either */
  check_policies("gemma4-tiny-moe", 6, "LLLLLG", 0);
  check_policies("gemma4-tiny-moe", 5, "LLG", 0); /* a partial last block */
  run r = run_model("gemma4-tiny-moe", "full", "layer", 6, "LLLLLG", 0);
  ck_assert(r.lb > 0);
  /* full + layer scope keeps the 6 carries [48, 64] and nothing else */
  ck_assert_int_eq(r.saved_peak, 6 * 48 * 64 * 4);
  free(r.grads);
}
END_TEST

START_TEST(test_gemma4_kv_shared_policies) {
  /* PLE, layers 6..9 reading layers 5 and 4 (one block of five apart with
   * block scope), double-wide MLPs */
  check_policies("gemma4-tiny-ple", 10, "LLLLG", 4);
  /* shared layers 4..6 (donors 3 and 2), blocks of three: a reader in the
   * donor's own block, one in the next, and a partial last block */
  check_policies("gemma4-tiny-ple", 7, "LLG", 3);
}
END_TEST

START_TEST(test_gemma4_full_keeps_carries_donor_kv_and_ple) {
  /* gemma4-tiny-ple, B=2 T=24 (N=48), d=64, P=8: full remat keeps the 10
   * carries [N,d], the per-layer inputs [N, 10*8], and the K and V of the
   * two donors with their norm statistics: layer 5 (local, 1 kv head of 16)
   * and layer 4 (global, 1 kv head of 32): K, V [N,hd] and rstd [N] each */
  run r = run_model("gemma4-tiny-ple", "full", "layer", 10, "LLLLG", 4);
  int64_t N = 48;
  int64_t want = 10 * N * 64 + N * 80 + 2 * (N * 16 + N) + 2 * (N * 32 + N);
  ck_assert_int_eq(r.saved_peak, want * 4);
  free(r.grads);
}
END_TEST

START_TEST(test_full_keeps_only_carries) {
  /* layer scope: the L layer inputs (the final hidden state is a temporary) */
  run r = run_step("full", "layer", 6, "LLLLLG");
  ck_assert_int_eq(r.saved_peak, 6LL * 48 * 64 * 4);
  free(r.grads);
  /* block scope, blocks of 3: only the 2 block inputs */
  r = run_step("full", "block", 6, "LLG");
  ck_assert_int_eq(r.saved_peak, 2LL * 48 * 64 * 4);
  free(r.grads);
  /* save_out_proj adds one [N,d] per layer */
  r = run_step("save_out_proj", "layer", 6, "LLLLLG");
  ck_assert_int_eq(r.saved_peak, 6LL * 2 * 48 * 64 * 4);
  free(r.grads);
}
END_TEST

static gt_model build(int n, const char *const *ov) {
  gt_config c;
  gt_test_config(&c, n, ov);
  gt_model m;
  gt_test_model_build(&m, &c);
  return m;
}

START_TEST(test_recompute_ops) {
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_model m = build(1, ov);
  const gt_layer_desc *L = &m.layers[0];
  uint8_t have[GT_A_NSLOTS];
  memset(have, 1, sizeof have);
  ck_assert_int_eq(gt_layer_recompute_ops(L, have), 0);
  /* only the carry: every op runs */
  memset(have, 0, sizeof have);
  have[GT_A_X_IN] = 1;
  ck_assert_int_eq(gt_layer_recompute_ops(L, have), gt_layer_all_ops(L));
  /* everything but the context: only attention runs again */
  memset(have, 1, sizeof have);
  have[GT_A_CTX] = 0;
  uint32_t ops = gt_layer_recompute_ops(L, have);
  uint8_t outs[GT_A_NSLOTS];
  gt_layer_ops_outputs(L, ops, outs);
  ck_assert(outs[GT_A_CTX] && outs[GT_A_LSE]);
  int n = 0;
  for (int k = 0; k < GT_A_NSLOTS; k++) n += outs[k];
  ck_assert_int_eq(n, 2);
  /* a Gemma 3 layer has none of Gemma 4's slots */
  for (int k = GT_A_V_RAW; k < GT_A_NSLOTS; k++) ck_assert(!gt_layer_has_slot(L, (gt_act)k));
  gt_model_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("remat");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_every_policy_bit_identical);
  tcase_add_test(tc, test_full_keeps_only_carries);
  tcase_add_test(tc, test_gemma4_dense_policies);
  tcase_add_test(tc, test_gemma4_kv_shared_policies);
  tcase_add_test(tc, test_gemma4_moe_policies);
  tcase_add_test(tc, test_gemma4_full_keeps_carries_donor_kv_and_ple);
  tcase_add_test(tc, test_recompute_ops);
  return gt_test_run_suite(s, 0);
}
