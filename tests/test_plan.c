/* The plan is the truth: for several presets, lengths, policies, scopes and
 * vocab tilings, the tracked allocator's measured peak of every category
 * during a real trainer step equals what gemtrain plan measured running the
 * same step allocation-only. And the 4b plan matches the spec. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "train/plan.h"
#include "train/trainer.h"
#include "gt_testutil.h"

/* One real trainer step (real memory, real arithmetic) against the plan,
 * which ran the same step allocation-only: equal, byte for byte, in every
 * category and in total. */
static void measure_vs_plan(int n, const char *const *ov) {
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, n, ov, &e) == GT_OK, "%s", e.msg);
  gt_plan p;
  ck_assert_msg(gt_plan_compute(&p, &c, &e) == GT_OK, "%s", e.msg);
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_step_metrics sm;
  ck_assert_msg(gt_trainer_step_zero(tr, &sm, &e) == GT_OK, "%s", e.msg);
  char what[256];
  snprintf(what, sizeof what, "%s %s/%s T=%lld tiles=%lld", c.model_name, c.remat_policy, c.remat_scope,
           c.max_target_length, c.num_vocab_tiling);
  gt_mem *mem = gt_fsdp_device_mem(gt_trainer_fsdp(tr), 0);
  for (int k = 0; k < GT_MEM_NCAT; k++) {
    int64_t got = gt_mem_peak(mem, (gt_mem_cat)k), want = p.cat_peak[k];
    ck_assert_msg(got == want, "%s: %s peak measured %lld, planned %lld", what, gt_mem_cat_name((gt_mem_cat)k),
                  (long long)got, (long long)want);
  }
  ck_assert_msg(gt_mem_total_peak(mem) == p.peak_total, "%s: total peak measured %lld, planned %lld", what,
                (long long)gt_mem_total_peak(mem), (long long)p.peak_total);
  ck_assert_int_eq(gt_mem_bad_frees(mem), 0);
  gt_trainer_destroy(tr);
  gt_plan_free(&p);
}

START_TEST(test_measured_equals_plan) {
  const char *models[] = {"model_name=gemma3-tiny", "model_name=gemma3-small"};
  const char *lens[] = {"max_target_length=64", "max_target_length=128"};
  const char *pols[] = {"remat_policy=none", "remat_policy=full", "remat_policy=minimal",
                        "remat_policy=save_dot_except_mlp", "remat_policy=minimal_offloaded"};
  const char *scopes[] = {"remat_scope=layer", "remat_scope=block"};
  for (int mi = 0; mi < 2; mi++)
    for (int li = 0; li < 2; li++)
      for (int pi = 0; pi < 5; pi++)
        for (int si = 0; si < 2; si++) {
          const char *ov[] = {models[mi], lens[li], pols[pi], scopes[si], "dataset_type=synthetic",
                              "per_device_batch_size=2", li ? "num_vocab_tiling=4" : "num_vocab_tiling=1"};
          measure_vs_plan(7, ov);
        }
}
END_TEST

START_TEST(test_gemma4_measured_equals_plan) {
  /* dense (K=V globals, hd 32) and small (PLE, KV sharing across
   * boundaries, double-wide MLPs): the donors' kept K/V, their gradient
   * accumulators, the per-layer inputs and the PLE backward are all planned */
  const char *models[] = {"model_name=gemma4-tiny-dense", "model_name=gemma4-tiny-ple", "model_name=gemma4-tiny-moe"};
  const char *pols[] = {"remat_policy=none", "remat_policy=full", "remat_policy=minimal",
                        "remat_policy=save_dot_except_mlp", "remat_policy=minimal_offloaded"};
  const char *scopes[] = {"remat_scope=layer", "remat_scope=block"};
  /* gemma4-tiny-moe: the routed experts' saved block (kept with mlpwi_0),
   * their scratch in forward, recompute and backward */
  for (int mi = 0; mi < 3; mi++)
    for (int pi = 0; pi < 5; pi++)
      for (int si = 0; si < 2; si++) {
        const char *ov[] = {models[mi], "max_target_length=64", pols[pi], scopes[si], "dataset_type=synthetic",
                            "per_device_batch_size=2", pi == 1 ? "num_vocab_tiling=4" : "num_vocab_tiling=1"};
        measure_vs_plan(7, ov);
      }
}
END_TEST

/* The plans of `model` under `policy` with remat_scope layer (*pa) and block (*pb). */
static void plan_scopes(const char *model, const char *policy, gt_plan *pa, gt_plan *pb) {
  const char *a[] = {model, policy, "remat_scope=layer", "dataset_type=synthetic"};
  const char *b[] = {model, policy, "remat_scope=block", "dataset_type=synthetic"};
  gt_config ca, cb;
  gt_err e;
  ck_assert_msg(gt_config_load(&ca, GT_SOURCE_DIR "/configs", NULL, 4, a, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_config_load(&cb, GT_SOURCE_DIR "/configs", NULL, 4, b, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_plan_compute(pa, &ca, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_plan_compute(pb, &cb, &e) == GT_OK, "%s", e.msg);
}

START_TEST(test_block_scope_costs_more) {
  gt_plan pa, pb;
  plan_scopes("model_name=gemma3-small", "remat_policy=full", &pa, &pb);
  ck_assert_msg(pb.peak_total > pa.peak_total, "block %lld vs layer %lld", (long long)pb.peak_total,
                (long long)pa.peak_total);
  ck_assert(strstr(pb.peak_where, "backward"));
  gt_plan_free(&pa);
  gt_plan_free(&pb);
}
END_TEST

/* remat_policy=none recomputes nothing: every layer keeps its carry under
 * either scope, so the saved activations (in all and per layer) and the
 * peak are the same with remat_scope=block as with layer */
START_TEST(test_none_saves_the_same_in_blocks) {
  gt_plan pa, pb;
  plan_scopes("model_name=gemma3-tiny", "remat_policy=none", &pa, &pb);
  ck_assert_int_eq(pa.n_layers, pb.n_layers);
  for (int64_t l = 0; l < pa.n_layers; l++)
    ck_assert_msg(pa.saved_per_layer[l] == pb.saved_per_layer[l], "layer %lld keeps %lld bytes in blocks, %lld alone",
                  (long long)l, (long long)pb.saved_per_layer[l], (long long)pa.saved_per_layer[l]);
  ck_assert_int_eq(pa.saved_total, pb.saved_total);
  ck_assert_int_eq(pa.cat_peak[GT_MEM_SAVED], pb.cat_peak[GT_MEM_SAVED]);
  ck_assert_int_eq(pa.peak_total, pb.peak_total);
  gt_plan_free(&pa);
  gt_plan_free(&pb);
}
END_TEST

START_TEST(test_4b_plan_matches_spec) {
  const char *ov[] = {"model_name=gemma3-4b", "per_device_batch_size=1", "max_target_length=2048",
                      "dataset_type=synthetic"};
  gt_config c;
  gt_err e;
  ck_assert(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 4, ov, &e) == GT_OK);
  gt_plan p;
  ck_assert(gt_plan_compute(&p, &c, &e) == GT_OK);
  ck_assert_int_eq(p.n_params, 3880099328LL);
  ck_assert(fabs(p.flops.total_tflops - 49.05) < 0.01);
  /* params + grads + 2 moments, 4 bytes each */
  ck_assert_int_eq(p.cat_peak[GT_MEM_PARAMS] + p.cat_peak[GT_MEM_GRADS] + p.cat_peak[GT_MEM_OPTIM],
                   16LL * 3880099328LL);
  /* full remat (base.json) keeps 34 carries of [2048, 2560] floats */
  ck_assert_int_eq(p.saved_total, 34LL * 2048 * 2560 * 4);
  ck_assert_int_gt(p.peak_total, 16LL * 3880099328LL);
  char *js = gt_plan_to_json(&p, &c);
  ck_assert(strstr(js, "\"peak_bytes\""));
  free(js);
  gt_plan_free(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("plan");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_measured_equals_plan);
  tcase_add_test(tc, test_gemma4_measured_equals_plan);
  tcase_add_test(tc, test_block_scope_costs_more);
  tcase_add_test(tc, test_none_saves_the_same_in_blocks);
  tcase_add_test(tc, test_4b_plan_matches_spec);
  return gt_test_run_suite(s, 0);
}
