/* Fault injection: a tiny training run through the library (configure,
 * init, two optimizer steps, save, free) with its N-th tracked allocation
 * made to fail, for every N from 1 to the number the run makes. Each must
 * end in GT_ERR_NOMEM with a message, without a crash, and leave no tracked
 * byte behind once the context is freed; the sanitizer build runs the same
 * suite under AddressSanitizer and LeakSanitizer (no fork), which catch a
 * use of a half-built object or an untracked leak on an error path. The
 * runs: gemma3-tiny on one device and on two (one device failing while its
 * peer goes on), gemma4-tiny-moe with expert parallelism over two devices,
 * the MoE with bf16 activations and moments and full remat, and gemtrain
 * train's loop with checkpoints, TensorBoard and a resume.
 * To look at one failure: GT_FAULT_FROM=n starts at the n-th allocation,
 * GT_FAULT_TRACE=1 prints each n before its run (a hang shows which). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"
#include "config/config.h"
#include "train/train.h"

typedef struct run {
  gt_rc rc;
  char msg[GT_ERR_MSG_MAX];
} run;

static char *save_dir;

/* One run of a context's whole life; rc and message of the first failure. */
static run life_ctx(int n_ov, const char *const *ov) {
  run r = {GT_OK, ""};
  gt_ctx *c = gt_ctx_new();
  ck_assert_ptr_nonnull(c);
  double loss[2];
  char path[600];
  snprintf(path, sizeof path, "%s/p.safetensors", save_dir);
  if ((r.rc = gt_ctx_configure(c, strncmp(ov[1], "model_name=", 11) ? "gemma3-tiny" : NULL, n_ov, ov)) == GT_OK && (r.rc = gt_ctx_init(c)) == GT_OK &&
      (r.rc = gt_ctx_train(c, 2, loss)) == GT_OK)
    r.rc = gt_ctx_save(c, path);
  snprintf(r.msg, sizeof r.msg, "%s", gt_ctx_error(c));
  gt_ctx_free(c);
  return r;
}

/* gemtrain train's loop: checkpoints, metrics and TensorBoard events in a
 * run directory, resumed from its checkpoint after the first two steps. */
static run life_train(int n_ov, const char *const *ov) {
  run r = {GT_OK, ""};
  char bo[700];
  snprintf(bo, sizeof bo, "base_output_directory=%s", save_dir);
  const char *all[24];
  int n = 0;
  for (int i = 0; i < n_ov; i++) all[n++] = ov[i];
  all[n++] = bo;
  all[n++] = "run_name=fault";
  all[n++] = "enable_checkpointing=true";
  all[n++] = "checkpoint_period=2";
  all[n++] = "enable_tensorboard=true";
  all[n++] = "sample_tokens=0";
  gt_test_system("rm -rf '%s/fault'", save_dir);
  gt_config cfg;
  gt_err e;
  gt_err_clear(&e);
  for (int steps = 2; steps <= 3 && r.rc == GT_OK; steps++) {
    char st[32];
    snprintf(st, sizeof st, "steps=%d", steps);
    all[n] = st;
    gt_train_result res;
    gt_train_opts o = {0};
    if ((r.rc = gt_config_load(&cfg, NULL, NULL, n + 1, all, &e)) == GT_OK) r.rc = gt_train(&cfg, &o, &res, &e);
  }
  snprintf(r.msg, sizeof r.msg, "%s", e.msg);
  return r;
}

typedef run (*life_fn)(int n_ov, const char *const *ov);

static void every_allocation_fails_cleanly(life_fn life, int n_ov, const char *const *ov) {
  save_dir = gt_test_mkdtemp("alloc_fault");
  ck_assert_int_eq(gt_mem_process_bytes(), 0);
  /* the run without a failure, counting its allocations */
  gt_mem_fault_arm(0);
  run ok = life(n_ov, ov);
  ck_assert_msg(ok.rc == GT_OK, "%s", ok.msg);
  int64_t total = gt_mem_fault_count();
  ck_assert_int_gt(total, 20);
  ck_assert_int_eq(gt_mem_process_bytes(), 0);
  ck_assert_int_eq(gt_mem_process_blocks(), 0);
  int64_t from = getenv("GT_FAULT_FROM") ? atoll(getenv("GT_FAULT_FROM")) : 1;
  for (int64_t n = from < 1 ? 1 : from; n <= total; n++) {
    if (getenv("GT_FAULT_TRACE")) fprintf(stderr, "fault %lld\n", (long long)n);
    gt_mem_fault_arm(n);
    run r = life(n_ov, ov);
    int fired = gt_mem_fault_fired();
    gt_mem_fault_arm(0);
    ck_assert_msg(fired, "allocation %lld of %lld was never made", (long long)n, (long long)total);
    ck_assert_msg(r.rc == GT_ERR_NOMEM, "allocation %lld of %lld failed: rc %s (%d), '%s'", (long long)n,
                  (long long)total, gt_rc_str(r.rc), (int)r.rc, r.msg);
    ck_assert_msg(r.msg[0], "allocation %lld of %lld failed without a message", (long long)n, (long long)total);
    ck_assert_msg(gt_mem_process_bytes() == 0 && gt_mem_process_blocks() == 0,
                  "allocation %lld of %lld failed ('%s'): %lld bytes in %lld blocks left after gt_ctx_free",
                  (long long)n, (long long)total, r.msg, (long long)gt_mem_process_bytes(),
                  (long long)gt_mem_process_blocks());
  }
  /* and the same run without a failure still succeeds afterwards */
  run again = life(n_ov, ov);
  ck_assert_msg(again.rc == GT_OK, "%s", again.msg);
  ck_assert_int_eq(gt_mem_fault_count(), total);
  gt_test_rm_rf(save_dir);
  free(save_dir);
}

START_TEST(test_fault_one_device) {
  const char *ov[] = {"dataset_type=synthetic", "base_num_decoder_layers=2", "layer_pattern=LG",
                      "per_device_batch_size=2", "max_target_length=16", "threads_per_device=1"};
  every_allocation_fails_cleanly(life_ctx, 6, ov);
}
END_TEST

/* One device's allocation fails while its peer goes on: the failed device
 * leaves the mesh (gt_mesh_leave), so the peer is not left waiting in a
 * collective. */
START_TEST(test_fault_two_devices) {
  const char *ov[] = {"dataset_type=synthetic", "base_num_decoder_layers=2", "layer_pattern=LG",
                      "per_device_batch_size=1", "max_target_length=16", "threads_per_device=1", "num_devices=2"};
  every_allocation_fails_cleanly(life_ctx, 7, ov);
}
END_TEST

/* Expert parallelism over 2 devices: the MoE layers' collectives run in the
 * expert group, the prefetched gathers on the comm threads. */
START_TEST(test_fault_expert_parallel) {
  const char *ov[] = {"dataset_type=synthetic", "model_name=gemma4-tiny-moe", "base_num_decoder_layers=2",
                      "layer_pattern=LG", "per_device_batch_size=1", "max_target_length=16", "threads_per_device=1",
                      "num_devices=2", "ici_expert_parallelism=2"};
  every_allocation_fails_cleanly(life_ctx, 9, ov);
}
END_TEST

START_TEST(test_fault_moe_bf16) {
  const char *ov[] = {"dataset_type=synthetic", "model_name=gemma4-tiny-moe", "base_num_decoder_layers=2",
                      "layer_pattern=LG", "per_device_batch_size=2", "max_target_length=16", "threads_per_device=1",
                      "dtype=bfloat16", "mu_dtype=bfloat16", "remat_policy=full"};
  every_allocation_fails_cleanly(life_ctx, 10, ov);
}
END_TEST

START_TEST(test_fault_train_loop) {
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "base_num_decoder_layers=2",
                      "layer_pattern=LG", "per_device_batch_size=2", "max_target_length=16", "threads_per_device=1"};
  every_allocation_fails_cleanly(life_train, 7, ov);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc_fault");
  tcase_add_test(gt_test_tcase(s, "one_device"), test_fault_one_device);
  tcase_add_test(gt_test_tcase(s, "two_devices"), test_fault_two_devices);
  tcase_add_test(gt_test_tcase(s, "expert_parallel"), test_fault_expert_parallel);
  tcase_add_test(gt_test_tcase(s, "moe_bf16"), test_fault_moe_bf16);
  tcase_add_test(gt_test_tcase(s, "train_loop"), test_fault_train_loop);
  /* no fork: LeakSanitizer sees every run's leaks at exit */
  return gt_test_run_suite(s, 1);
}
