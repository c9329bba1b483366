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
 * train's loop with checkpoints, TensorBoard and a resume; and a frozen base
 * stored quantized (its initialisation, a Hugging Face import into it and a
 * conversion between two quantized storages, whose scratch comes from the
 * tracked allocator).
 * To look at one failure: GT_FAULT_FROM=n starts at the n-th allocation,
 * GT_FAULT_TRACE=1 prints each n before its run (a hang shows which). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "ckpt/safetensors.h"
#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"
#include "config/config.h"
#include "hf/hf.h"
#include "mesh/fsdp.h"
#include "model/model.h"
#include "model/qstore.h"
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

/* A frozen base stored quantized (the keys ov with lora_weight_qtype=nf4,
 * lora_embedding_qtype=nf4 so the embedding is quantized too, and
 * trainable_parameters_mask=norm, a vocabulary of more rows than
 * gt_qstore_chunk_rows, here 128 rows of 64: 8 Ki elements a chunk, so the
 * embedding is drawn, read and converted a chunk of rows at a time): initialised in place on one device and from a
 * full model for two (gt_fsdp_create), loaded from the Hugging Face
 * directory hf_dir (gt_hf_import_params), and its embedding converted to
 * int8 (gt_qstore_convert). */
static char *hf_dir;

static run life_qbase(int n_ov, const char *const *ov) {
  run r = {GT_OK, ""};
  gt_err e;
  gt_err_clear(&e);
  const char *all[16];
  for (int i = 0; i < n_ov; i++) all[i] = ov[i];
  gt_config c;
  for (int nd = 1; nd <= 2 && !r.rc; nd++) {
    all[n_ov] = nd == 1 ? "num_devices=1" : "num_devices=2";
    gt_fsdp *f = NULL;
    if (!(r.rc = gt_config_load(&c, NULL, NULL, n_ov + 1, all, &e))) r.rc = gt_fsdp_create(&f, &c, NULL, &e);
    gt_fsdp_destroy(f);
  }
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model q;
  memset(&q, 0, sizeof q);
  float *dst = NULL;
  if (!r.rc && !(r.rc = gt_model_build(&q, &c, &e)) && !(r.rc = gt_model_alloc_inference(&q, &mem, &e))) {
    gt_st_set set;
    memset(&set, 0, sizeof set);
    if (!(r.rc = gt_st_set_open(&set, hf_dir, &e))) r.rc = gt_hf_import_params(&q, &set, "the export", NULL, &e);
    gt_st_set_close(&set);
    const gt_tensor_info *from = gt_model_find_tensor(&q, "embed_tokens.weight");
    ck_assert(from && from->dtype == GT_STORE_NF4 && from->shape[0] > gt_qstore_chunk_rows(from));
    gt_tensor_info to = *from;
    to.dtype = GT_STORE_INT8;
    to.words = gt_q_words(GT_Q_INT8, to.shape[0], gt_qstore_cols(&to));
    if (!r.rc && !(dst = gt_mem_alloc(&mem, GT_MEM_OTHER, (size_t)to.words * sizeof(float))))
      r.rc = gt_err_set(&e, GT_ERR_NOMEM, "test: no memory for the int8 copy");
    if (!r.rc) r.rc = gt_qstore_convert(&to, dst, from, q.params + from->offset, &e);
  }
  gt_mem_free(&mem, dst);
  gt_model_free(&q);
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

START_TEST(test_fault_quantized_base) {
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "base_num_decoder_layers=2",
                      "layer_pattern=LG", "per_device_batch_size=1", "max_target_length=16", "threads_per_device=1",
                      "trainable_parameters_mask=norm", "lora_weight_qtype=nf4", "vocab_size=300",
                      "lora_embedding_qtype=nf4"};
  gt_qstore_set_chunk_elems(8192); /* 128 rows of d = 64: 3 chunks of the embedding */
  const int n = 11;
  /* the directory: the float32 model of the same shapes, exported */
  hf_dir = gt_test_mkdtemp("alloc_fault_hf");
  {
    const char *fo[16];
    for (int i = 0; i < n; i++) fo[i] = ov[i];
    fo[8] = "lora_weight_qtype=float32";
    fo[10] = "lora_embedding_qtype=auto";
    gt_config c;
    gt_err e;
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model f;
    ck_assert_msg(gt_config_load(&c, NULL, NULL, n, fo, &e) == GT_OK, "%s", e.msg);
    ck_assert(gt_model_build(&f, &c, &e) == GT_OK && gt_model_alloc_inference(&f, &mem, &e) == GT_OK);
    ck_assert(gt_model_init_params(&f, 5, 1.0) == GT_OK);
    gt_hf_export_opts o = gt_hf_export_defaults();
    ck_assert_msg(gt_hf_export(&f, &c, hf_dir, &o, NULL, &e) == GT_OK, "%s", e.msg);
    gt_model_free(&f);
  }
  /* the scratch is reported by name: rows of the embedding quantized a
   * chunk at a time (the first tracked allocation of the import) */
  {
    gt_config c;
    gt_err e;
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model q;
    ck_assert_msg(gt_config_load(&c, NULL, NULL, n, ov, &e) == GT_OK, "%s", e.msg);
    ck_assert(gt_model_build(&q, &c, &e) == GT_OK && gt_model_alloc_inference(&q, &mem, &e) == GT_OK);
    gt_st_set set;
    memset(&set, 0, sizeof set);
    ck_assert_msg(gt_st_set_open(&set, hf_dir, &e) == GT_OK, "%s", e.msg);
    gt_err_clear(&e);
    gt_mem_fault_arm(1);
    gt_rc rc = gt_hf_import_params(&q, &set, "the export", NULL, &e);
    ck_assert(gt_mem_fault_fired());
    gt_mem_fault_arm(0);
    ck_assert_msg(rc == GT_ERR_NOMEM && strstr(e.msg, "rows 0..") && strstr(e.msg, "'embed_tokens.weight' as nf4"),
                  "rc %d, '%s'", (int)rc, e.msg);
    gt_st_set_close(&set);
    gt_model_free(&q);
  }
  every_allocation_fails_cleanly(life_qbase, n, ov);
  gt_qstore_set_chunk_elems(0);
  gt_test_rm_rf(hf_dir);
  free(hf_dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc_fault");
  tcase_add_test(gt_test_tcase(s, "one_device"), test_fault_one_device);
  tcase_add_test(gt_test_tcase(s, "two_devices"), test_fault_two_devices);
  tcase_add_test(gt_test_tcase(s, "expert_parallel"), test_fault_expert_parallel);
  tcase_add_test(gt_test_tcase(s, "moe_bf16"), test_fault_moe_bf16);
  tcase_add_test(gt_test_tcase(s, "train_loop"), test_fault_train_loop);
  tcase_add_test(gt_test_tcase(s, "quantized_base"), test_fault_quantized_base);
  /* no fork: LeakSanitizer sees every run's leaks at exit */
  return gt_test_run_suite(s, 1);
}
