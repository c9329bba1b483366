/* Sharding changes reduction order only: 1, 2, 4 and 8 devices train the
 * same global batches to the same losses and final weights (1e-5 relative);
 * the same device count is bit-identical run to run; a device never holds
 * more than one layer's gathered weights (two with prefetch; a whole block
 * with remat_scope=block). */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "mesh/fsdp.h"
#include "train/trainer.h"
#include "model/model.h"
#include "train/plan.h"
#include "gt_testutil.h"
#include "kernels/cpu.h"

#define GLOBAL_B 8

typedef struct result {
  double loss[10], lb[10];
  float *params;
  int64_t n;
  int64_t gathered_peak, unit_max, block_units;
} result;

static result train_model(const char *model, int devices, int data, const char *prefetch, const char *scope, int steps);
static const char *g_lr = "learning_rate=0.01";
static int g_expert = 1; /* ici_expert_parallelism of the next train_model */

static result train(int devices, const char *prefetch, const char *scope, int steps) {
  return train_model("gemma3-tiny", devices, 1, prefetch, scope, steps);
}

static result train_axes(int devices, int data, const char *prefetch, const char *scope, int steps) {
  return train_model("gemma3-tiny", devices, data, prefetch, scope, steps);
}

static result train_model(const char *model, int devices, int data, const char *prefetch, const char *scope, int steps) {
  char mn[96], nd[64], pd[64], pf[64], sc[64], dp[64], ep[64];
  snprintf(mn, sizeof mn, "model_name=%s", model);
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", GLOBAL_B / devices);
  snprintf(pf, sizeof pf, "prefetch=%s", prefetch);
  snprintf(sc, sizeof sc, "remat_scope=%s", scope);
  snprintf(dp, sizeof dp, "ici_data_parallelism=%d", data);
  snprintf(ep, sizeof ep, "ici_expert_parallelism=%d", g_expert);
  const char *ov[] = {mn, "dataset_type=synthetic", "max_target_length=16",
                      g_lr, nd, pd, pf, sc, "gradient_clipping_threshold=0.5", dp, ep};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 11, ov, &e) == GT_OK, "%s", e.msg);
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, &c, &host, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK, "%s", e.msg);
  result r;
  memset(&r, 0, sizeof r);
  for (int s = 0; s < steps; s++) {
    gt_batch b;
    gt_data_next_train(&d, &b);
    gt_mesh_step_info fi;
    ck_assert_msg(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = fi.loss;
    r.lb[s] = fi.moe_lb_loss;
    if (devices > 1) ck_assert_int_gt(fi.comm_bytes, 0);
  }
  r.n = gt_fsdp_num_params(f);
  r.params = malloc(sizeof(float) * (size_t)r.n);
  ck_assert(gt_fsdp_full_params(f, r.params, &e) == GT_OK);
  for (int dv = 0; dv < devices; dv++) {
    int64_t g = gt_mem_peak(gt_fsdp_device_mem(f, dv), GT_MEM_GATHERED);
    if (g > r.gathered_peak) r.gathered_peak = g;
  }
  gt_model m;
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  for (int64_t u = 0; u < gt_model_n_units(&m); u++) {
    int64_t off, cnt;
    gt_model_unit(&m, u, &off, &cnt);
    if (cnt * 4 > r.unit_max) r.unit_max = cnt * 4;
  }
  r.block_units = (int64_t)strlen(c.layer_pattern);
  gt_model_free(&m);
  gt_fsdp_destroy(f);
  gt_data_close(&d);
  return r;
}

START_TEST(test_device_counts_agree) {
  result one = train(1, "true", "layer", 10);
  int counts[] = {2, 4, 8};
  for (int i = 0; i < 3; i++) {
    result r = train(counts[i], "true", "layer", 10);
    for (int s = 0; s < 10; s++)
      ck_assert_msg(fabs(r.loss[s] - one.loss[s]) <= 1e-5 * fabs(one.loss[s]), "%d devices step %d: %.9g vs %.9g",
                    counts[i], s, r.loss[s], one.loss[s]);
    double err = gt_test_norm_rel_err(r.params, one.params, one.n);
    ck_assert_msg(err <= 1e-5, "%d devices: final weights differ by %.3g", counts[i], err);
    free(r.params);
  }
  free(one.params);
}
END_TEST

START_TEST(test_data_axis_agrees) {
  /* data x fsdp meshes: parameters replicated along the data axis, sharded
   * along fsdp; the same training as one device */
  result one = train(1, "true", "layer", 6);
  int shapes[][2] = {{2, 2}, {4, 2}, {4, 4}, {8, 2}};
  for (int i = 0; i < 4; i++) {
    result r = train_axes(shapes[i][0], shapes[i][1], "true", "layer", 6);
    for (int s = 0; s < 6; s++)
      ck_assert_msg(fabs(r.loss[s] - one.loss[s]) <= 1e-5 * fabs(one.loss[s]), "%d devices, data %d, step %d: %.9g vs %.9g",
                    shapes[i][0], shapes[i][1], s, r.loss[s], one.loss[s]);
    double err = gt_test_norm_rel_err(r.params, one.params, one.n);
    ck_assert_msg(err <= 1e-5, "%d devices, data %d: final weights differ by %.3g", shapes[i][0], shapes[i][1], err);
    free(r.params);
  }
  free(one.params);
}
END_TEST

START_TEST(test_gemma4_devices_agree) {
  /* both Gemma 4 kinds (the small one: PLE in the head unit, gathered again
   * for its backward; KV-shared layers reading donors across boundaries).
   * At the base learning rate: Adam's first steps move a parameter by about
   * lr * sign(g), so a gradient entry near 0 whose rounding differs with
   * the reduction order moves by a whole step either way, and the small
   * model (scale-1 attention, PLE) grows such differences ~20x per step.
   * At lr 0.01 its 1- and 2-device losses part by 5e-5 at step 5 (measured;
   * the first update's weights agree to 1e-8); at 0.002 they agree to 1e-6.
   * On the portable kernels (docs/cpus.md) OpenBLAS sums in an order that
   * follows the product's shape, so the devices' forward passes already
   * differ in the last bits: there the small model's losses part by 5e-6 at
   * step 4 and 2.4e-5 at step 5 (measured, 2 and 4 devices), the weights by
   * 3e-6 (1.4e-5 in a GT_NATIVE=ON build). */
  g_lr = "learning_rate=0.002";
  const double tol = gt__kernels_avx512() ? 1e-5 : 1e-4;
  const char *models[] = {"gemma4-tiny-dense", "gemma4-tiny-ple"};
  for (int mi = 0; mi < 2; mi++) {
    result one = train_model(models[mi], 1, 1, "true", "layer", 6);
    int shapes[][2] = {{2, 1}, {4, 2}};
    const char *scopes[] = {"layer", "block"};
    for (int i = 0; i < 2; i++) {
      result r = train_model(models[mi], shapes[i][0], shapes[i][1], i ? "false" : "true", scopes[i], 6);
      for (int st = 0; st < 6; st++)
        ck_assert_msg(fabs(r.loss[st] - one.loss[st]) <= tol * fabs(one.loss[st]), "%s, %d devices, step %d: %.9g vs %.9g",
                      models[mi], shapes[i][0], st, r.loss[st], one.loss[st]);
      double err = gt_test_norm_rel_err(r.params, one.params, one.n);
      ck_assert_msg(err <= tol, "%s, %d devices: final weights differ by %.3g", models[mi], shapes[i][0], err);
      free(r.params);
    }
    free(one.params);
  }
}
END_TEST

START_TEST(test_same_count_bit_identical) {
  result a = train(2, "true", "layer", 4), b = train(2, "true", "layer", 4);
  ck_assert(memcmp(a.loss, b.loss, sizeof a.loss) == 0);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n) == 0);
  free(a.params), free(b.params);
}
END_TEST

START_TEST(test_gathered_weights_bounded) {
  /* the head unit (embedding) is the largest unit of gemma3-tiny; a layer
   * or two layers must be under these bounds too */
  result a = train(2, "false", "layer", 2);
  ck_assert_msg(a.gathered_peak <= a.unit_max, "no prefetch: %lld gathered bytes > one unit %lld",
                (long long)a.gathered_peak, (long long)a.unit_max);
  result b = train(2, "true", "layer", 2);
  ck_assert_msg(b.gathered_peak <= 2 * b.unit_max, "prefetch: %lld gathered bytes > two units %lld",
                (long long)b.gathered_peak, (long long)(2 * b.unit_max));
  ck_assert_int_ge(b.gathered_peak, a.gathered_peak);
  /* block scope: a whole block's gathers at the block's start */
  result c = train(2, "false", "block", 2);
  ck_assert_msg(c.gathered_peak > a.gathered_peak, "block scope gathered %lld, layer scope %lld",
                (long long)c.gathered_peak, (long long)a.gathered_peak);
  /* and all of them give the same training */
  for (int s = 0; s < 2; s++) ck_assert(a.loss[s] == b.loss[s] && a.loss[s] == c.loss[s]);
  free(a.params), free(b.params), free(c.params);
}
END_TEST

/* One sharded step of the config `ov`: bytes sent equal the plan, every
 * device's peak (and its gathered weights) is within the plan, and the
 * largest device's peak equals it. `what` names the case in failures. */
static void step_matches_plan(int n, const char *const *ov, const char *what) {
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, n, ov, &e) == GT_OK, "%s", e.msg);
  gt_plan p;
  ck_assert(gt_plan_compute(&p, &c, &e) == GT_OK);
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, &c, &host, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK);
  gt_batch b;
  gt_data_next_train(&d, &b);
  gt_mesh_step_info fi;
  ck_assert(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK);
  ck_assert_msg(fi.comm_bytes == p.comm_bytes_per_step, "%s: sent %lld, planned %lld", what, (long long)fi.comm_bytes,
                (long long)p.comm_bytes_per_step);
  int64_t worst = 0;
  for (int dv = 0; dv < gt_fsdp_devices(f); dv++) {
    gt_mem *m = gt_fsdp_device_mem(f, dv);
    if (gt_mem_total_peak(m) > worst) worst = gt_mem_total_peak(m);
    ck_assert_msg(gt_mem_total_peak(m) <= p.peak_total, "%s: device %d peak %lld > plan %lld", what, dv,
                  (long long)gt_mem_total_peak(m), (long long)p.peak_total);
    ck_assert_int_eq(gt_mem_peak(m, GT_MEM_GATHERED) <= p.cat_peak[GT_MEM_GATHERED], 1);
  }
  ck_assert_msg(worst == p.peak_total, "%s: largest device peak %lld, plan %lld", what, (long long)worst,
                (long long)p.peak_total);
  gt_fsdp_destroy(f);
  gt_data_close(&d);
  gt_plan_free(&p);
}

START_TEST(test_device_peaks_equal_plan) {
  /* the plan replays one sharded device's step: each device's measured peak
   * of every category equals the planned one (the largest device's) */
  const char *scopes[] = {"remat_scope=layer", "remat_scope=block"};
  const char *pfs[] = {"prefetch=true", "prefetch=false"};
  const char *nds[] = {"num_devices=2", "num_devices=3", "num_devices=4"};
  const char *pds[] = {"per_device_batch_size=4", "per_device_batch_size=2", "per_device_batch_size=2"};
  const char *dps[] = {"ici_data_parallelism=1", "ici_data_parallelism=1", "ici_data_parallelism=2"};
  const char *models[] = {"model_name=gemma3-tiny", "model_name=gemma4-tiny-ple"};
  for (int mi = 0; mi < 2; mi++)
  for (int si = 0; si < 2; si++)
    for (int pi = 0; pi < 2; pi++)
      for (int ni = 0; ni < 3; ni++) {
        const char *ov[] = {models[mi], "dataset_type=synthetic", "max_target_length=16",
                            nds[ni], pds[ni], pfs[pi], scopes[si], "remat_policy=minimal", dps[ni]};
        char what[200];
        snprintf(what, sizeof what, "%s %s %s %s", models[mi], nds[ni], pfs[pi], scopes[si]);
        step_matches_plan(9, ov, what);
      }
}
END_TEST

START_TEST(test_bf16_device_peaks_equal_plan) {
  /* dtype=bfloat16 and mu_dtype=bfloat16: the gathers send 2 bytes a
   * weight, kept activations take 2 bytes, mu 2 bytes; the plan says so */
  const char *nds[] = {"num_devices=1", "num_devices=2", "num_devices=3"};
  const char *pds[] = {"per_device_batch_size=4", "per_device_batch_size=2", "per_device_batch_size=2"};
  const char *models[] = {"model_name=gemma3-tiny", "model_name=gemma4-tiny-ple"};
  for (int mi = 0; mi < 2; mi++)
    for (int ni = 0; ni < 3; ni++) {
      const char *ov[] = {models[mi], "dataset_type=synthetic", "max_target_length=16", nds[ni], pds[ni],
                          "prefetch=true", "remat_policy=minimal", "dtype=bfloat16", "mu_dtype=bfloat16"};
      char what[200];
      snprintf(what, sizeof what, "bf16 %s %s", models[mi], nds[ni]);
      step_matches_plan(9, ov, what);
    }
}
END_TEST

START_TEST(test_frozen_part_bytes_equal_plan) {
  /* a frozen part is gathered but has no gradient: only the trainable part
   * is reduce-scattered and summed over the data axis. LoRA adapters over a
   * float32 base (gathered in 2 bytes under bf16), over an nf4 base
   * (gathered raw, 4 bytes a word, under either dtype), and a mask that
   * trains the norms only; on 2 devices and on 2 x 2 (data x fsdp) */
  const char *bases[] = {"lora_weight_qtype=float32", "lora_weight_qtype=nf4", "lora_weight_qtype=int8"};
  const char *dts[] = {"dtype=float32", "dtype=bfloat16"};
  const char *nds[] = {"num_devices=2", "num_devices=4"};
  const char *dps[] = {"ici_data_parallelism=1", "ici_data_parallelism=2"};
  for (int ni = 0; ni < 2; ni++)
    for (int di = 0; di < 2; di++) {
      for (int bi = 0; bi < 3; bi++) {
        const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "max_target_length=16", nds[ni],
                            "per_device_batch_size=2", dps[ni], dts[di], "enable_lora=true", "lora_rank=4",
                            bases[bi]};
        char what[200];
        snprintf(what, sizeof what, "LoRA %s %s %s %s", bases[bi], dts[di], nds[ni], dps[ni]);
        step_matches_plan(10, ov, what);
      }
      const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "max_target_length=16", nds[ni],
                          "per_device_batch_size=2", dps[ni], dts[di], "trainable_parameters_mask=norm"};
      char what[200];
      snprintf(what, sizeof what, "mask=norm %s %s %s", dts[di], nds[ni], dps[ni]);
      step_matches_plan(8, ov, what);
    }
  /* the PLE model: its head (embedding and PLE tables) is frozen whole and
   * gathered a third time */
  const char *ov[] = {"model_name=gemma4-tiny-ple", "dataset_type=synthetic", "max_target_length=16", "num_devices=3",
                      "per_device_batch_size=2", "dtype=bfloat16", "enable_lora=true", "lora_rank=4",
                      "lora_weight_qtype=nf4"};
  step_matches_plan(9, ov, "LoRA nf4 bf16 gemma4-tiny-ple, 3 devices");
}
END_TEST

START_TEST(test_moe_expert_parallel_agrees) {
  /* gemma4-tiny-moe (8 experts top-2, lb weight 0.01): one device against
   * 2 devices as 1x1x2 (expert axis only), 4 as 2x1x2 (data x expert) and
   * 1x2x2 (fsdp x expert, block scope without prefetch), and 2 devices of
   * plain FSDP: the same LM and load-balance losses to 1e-5 relative at a
   * small learning rate, and the same final weights */
  g_lr = "learning_rate=0.002";
  g_expert = 1;
  result one = train_model("gemma4-tiny-moe", 1, 1, "true", "layer", 6);
  struct {
    int devices, data, expert;
    const char *prefetch, *scope;
  } shapes[] = {{2, 1, 2, "true", "layer"}, {4, 2, 2, "true", "layer"}, {4, 1, 2, "false", "block"},
                {2, 1, 1, "true", "layer"}};
  for (int i = 0; i < 4; i++) {
    g_expert = shapes[i].expert;
    result r = train_model("gemma4-tiny-moe", shapes[i].devices, shapes[i].data, shapes[i].prefetch, shapes[i].scope, 6);
    for (int st = 0; st < 6; st++) {
      ck_assert_msg(fabs(r.loss[st] - one.loss[st]) <= 1e-5 * fabs(one.loss[st]), "%d devices (%d data, %d expert) step %d: %.9g vs %.9g",
                    shapes[i].devices, shapes[i].data, shapes[i].expert, st, r.loss[st], one.loss[st]);
      ck_assert_msg(one.lb[st] > 0.0 && fabs(r.lb[st] - one.lb[st]) <= 1e-5 * one.lb[st], "%d devices step %d: lb %.9g vs %.9g",
                    shapes[i].devices, st, r.lb[st], one.lb[st]);
    }
    double err = gt_test_norm_rel_err(r.params, one.params, one.n);
    ck_assert_msg(err <= 1e-5, "%d devices (%d expert): final weights differ by %.3g", shapes[i].devices,
                  shapes[i].expert, err);
    free(r.params);
  }
  g_expert = 1;
  free(one.params);
  /* the same mesh twice: bit-identical */
  g_expert = 2;
  result a = train_model("gemma4-tiny-moe", 2, 1, "true", "layer", 3), b = train_model("gemma4-tiny-moe", 2, 1, "true", "layer", 3);
  g_expert = 1;
  ck_assert(memcmp(a.loss, b.loss, sizeof a.loss) == 0 && memcmp(a.lb, b.lb, sizeof a.lb) == 0);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n) == 0);
  free(a.params), free(b.params);
}
END_TEST

START_TEST(test_moe_device_peaks_equal_plan) {
  /* expert-parallel meshes: each device's block holds half the experts, the
   * routed op's group buffers and its collectives; measured peaks and bytes
   * sent equal the plan, for a policy that keeps the routed state (minimal)
   * and two that recompute it (full, save_dot_except_mlp) */
  const char *nds[] = {"num_devices=2", "num_devices=4", "num_devices=4"};
  const char *pds[] = {"per_device_batch_size=4", "per_device_batch_size=2", "per_device_batch_size=2"};
  const char *dps[] = {"ici_data_parallelism=1", "ici_data_parallelism=2", "ici_data_parallelism=1"};
  const char *pols[] = {"remat_policy=minimal", "remat_policy=full", "remat_policy=save_dot_except_mlp"};
  for (int ni = 0; ni < 3; ni++)
    for (int pi = 0; pi < 3; pi++) {
      const char *ov[] = {"model_name=gemma4-tiny-moe", "dataset_type=synthetic", "max_target_length=16", nds[ni],
                          pds[ni], dps[ni], "ici_expert_parallelism=2", pols[pi],
                          pi == 2 ? "remat_scope=block" : "remat_scope=layer"};
      char what[200];
      snprintf(what, sizeof what, "%s %s %s", nds[ni], dps[ni], pols[pi]);
      step_matches_plan(9, ov, what);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("fsdp");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_device_counts_agree);
  tcase_add_test(tc, test_data_axis_agrees);
  tcase_add_test(tc, test_gemma4_devices_agree);
  tcase_add_test(tc, test_same_count_bit_identical);
  tcase_add_test(tc, test_gathered_weights_bounded);
  tcase_add_test(tc, test_device_peaks_equal_plan);
  tcase_add_test(tc, test_bf16_device_peaks_equal_plan);
  tcase_add_test(tc, test_frozen_part_bytes_equal_plan);
  tcase_add_test(tc, test_moe_expert_parallel_agrees);
  tcase_add_test(tc, test_moe_device_peaks_equal_plan);
  return gt_test_run_suite(s, 0);
}
