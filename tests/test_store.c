/* The parameter store (src/model/store.h): storage-dtype byte arithmetic,
 * roles and groups, trainable_parameters_mask matching and its refusals,
 * the layout it implies (trainable tensors first in each unit; unchanged
 * without a mask), and a model with a frozen subset in training: frozen
 * bytes identical after several steps while every trainable tensor moves,
 * 1 and 2 devices agreeing (1e-5 relative, the sharding invariant), the
 * plan equal to the measured peak with no gradient or moments for the
 * frozen group, and the FLOPs count without the frozen weights' dW. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "model/flops.h"
#include "data/data.h"
#include "exec/plan.h"
#include "train/plan.h"
#include "mesh/fsdp.h"
#include "model/model.h"
#include "model/store.h"
#include "train/trainer.h"
#include "gt_testutil.h"

START_TEST(test_dtype_bytes) {
  /* float32 4, bfloat16 2, int8 1 per element; nf4 two a byte */
  ck_assert_int_eq(gt_store_data_bytes(GT_STORE_F32, 10), 40);
  ck_assert_int_eq(gt_store_data_bytes(GT_STORE_BF16, 10), 20);
  ck_assert_int_eq(gt_store_data_bytes(GT_STORE_INT8, 10), 10);
  ck_assert_int_eq(gt_store_data_bytes(GT_STORE_NF4, 10), 5);
  ck_assert_int_eq(gt_store_data_bytes(GT_STORE_NF4, 11), 6);
  /* scales: none for the float types; int8 a float per output row; nf4 a
   * float per block of 64 (a partial block counts) */
  ck_assert_int_eq(gt_store_scale_bytes(GT_STORE_F32, 4096, 64), 0);
  ck_assert_int_eq(gt_store_scale_bytes(GT_STORE_BF16, 4096, 64), 0);
  ck_assert_int_eq(gt_store_scale_bytes(GT_STORE_INT8, 4096, 64), 256);
  ck_assert_int_eq(gt_store_scale_bytes(GT_STORE_NF4, 4096, 64), 256);
  ck_assert_int_eq(gt_store_scale_bytes(GT_STORE_NF4, 4097, 64), 260);
  /* a [640, 256] matrix: 655360 float32 bytes; int8 163840 + 640 rows x 4;
   * nf4 81920 + 2560 blocks x 4 */
  ck_assert_int_eq(gt_store_bytes(GT_STORE_F32, 163840, 640), 655360);
  ck_assert_int_eq(gt_store_bytes(GT_STORE_INT8, 163840, 640), 163840 + 2560);
  ck_assert_int_eq(gt_store_bytes(GT_STORE_NF4, 163840, 640), 81920 + 10240);
  gt_store_dtype t;
  gt_err e;
  ck_assert(gt_store_dtype_parse("nf4", &t, &e) == GT_OK && t == GT_STORE_NF4);
  ck_assert(gt_store_dtype_parse("int4", &t, &e) == GT_ERR_ARG);
  ck_assert(strstr(e.msg, "'int4'") && strstr(e.msg, "nf4"));
  ck_assert_str_eq(gt_store_dtype_name(GT_STORE_BF16), "bfloat16");
}
END_TEST

START_TEST(test_trainable_must_be_float32) {
  gt_err e;
  ck_assert(gt_store_check("layers.0.mlp.up_proj.weight", GT_ROLE_FROZEN, GT_STORE_NF4, &e) == GT_OK);
  ck_assert(gt_store_check("layers.0.mlp.up_proj.weight", GT_ROLE_FROZEN, GT_STORE_INT8, &e) == GT_OK);
  ck_assert(gt_store_check("layers.0.mlp.up_proj.weight", GT_ROLE_TRAINABLE, GT_STORE_F32, &e) == GT_OK);
  ck_assert(gt_store_check("layers.0.mlp.up_proj.weight", GT_ROLE_TRAINABLE, GT_STORE_BF16, &e) == GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "layers.0.mlp.up_proj.weight") && strstr(e.msg, "bfloat16") && strstr(e.msg, "float32"),
                "%s", e.msg);
  ck_assert(gt_store_check("x", GT_ROLE_FROZEN, (gt_store_dtype)9, &e) == GT_ERR_ARG);
}
END_TEST

START_TEST(test_mask_matching) {
  gt_store_mask *mk;
  gt_err e;
  ck_assert(gt_store_mask_compile("", &mk, &e) == GT_OK);
  ck_assert_int_eq(gt_store_mask_count(mk), 0);
  ck_assert(gt_store_mask_trains(mk, "anything"));
  gt_store_mask_free(mk);
  ck_assert(gt_store_mask_compile(" q_proj\n^norm\\.weight$   layers\\.1[0-9]\\. ", &mk, &e) == GT_OK);
  ck_assert_int_eq(gt_store_mask_count(mk), 3);
  ck_assert(gt_store_mask_trains(mk, "layers.3.self_attn.q_proj.weight")); /* found anywhere */
  ck_assert(gt_store_mask_trains(mk, "norm.weight"));
  ck_assert(!gt_store_mask_trains(mk, "layers.0.input_layernorm.weight")); /* anchored */
  ck_assert(gt_store_mask_trains(mk, "layers.12.mlp.up_proj.weight"));
  ck_assert(!gt_store_mask_trains(mk, "layers.2.mlp.up_proj.weight"));
  ck_assert(!gt_store_mask_trains(mk, "embed_tokens.weight"));
  gt_store_mask_free(mk);
  ck_assert(gt_store_mask_compile("ok (unclosed", &mk, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'(unclosed'") && strstr(e.msg, "trainable_parameters_mask"), "%s", e.msg);
  ck_assert_ptr_null(mk);
}
END_TEST

static const char *g_dtype = "dtype=float32"; /* of the next cfg_of */

static void cfg_of(gt_config *c, const char *model, const char *mask, int devices) {
  char mn[96], mk[256], nd[64], pd[64];
  snprintf(mn, sizeof mn, "model_name=%s", model);
  snprintf(mk, sizeof mk, "trainable_parameters_mask=%s", mask);
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", 4 / devices);
  const char *ov[] = {mn, mk, nd, pd, "dataset_type=synthetic", "max_target_length=16", "learning_rate=0.01", g_dtype};
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, 8, ov, &e) == GT_OK, "%s", e.msg);
}

START_TEST(test_layout_follows_roles) {
  gt_config c;
  gt_err e;
  gt_model a, b;
  cfg_of(&c, "gemma3-tiny", "", 1);
  ck_assert(gt_model_build(&a, &c, &e) == GT_OK);
  /* no mask: every tensor trains, offsets in table order, as before the store */
  int64_t cur = 0;
  for (int i = 0; i < a.n_tensors; i++) {
    ck_assert_int_eq(a.tensors[i].offset, cur);
    ck_assert(a.tensors[i].role == GT_ROLE_TRAINABLE && a.tensors[i].group == GT_GROUP_TRAINABLE);
    ck_assert(a.tensors[i].dtype == GT_STORE_F32);
    cur += a.tensors[i].numel;
  }
  ck_assert_int_eq(a.n_trainable, a.n_params);
  ck_assert_int_eq(a.n_frozen_tensors, 0);
  cfg_of(&c, "gemma3-tiny", "self_attn\\.[qo]_proj mlp.down", 1);
  ck_assert_msg(gt_model_build(&b, &c, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(b.n_params, a.n_params);
  int64_t want = 0;
  int frozen = 0;
  for (int i = 0; i < b.n_tensors; i++) {
    const gt_tensor_info *t = &b.tensors[i];
    int trains = strstr(t->name, "q_proj") || strstr(t->name, "o_proj") || strstr(t->name, "down_proj");
    ck_assert_msg((t->role == GT_ROLE_TRAINABLE) == trains, "%s", t->name);
    ck_assert(t->group == (trains ? GT_GROUP_TRAINABLE : GT_GROUP_FROZEN));
    want += trains ? t->numel : 0;
    frozen += !trains;
    ck_assert_str_eq(t->name, a.tensors[i].name); /* table order is kept */
  }
  ck_assert_int_eq(b.n_trainable, want);
  ck_assert_int_eq(b.n_frozen_tensors, frozen);
  /* each unit: the same range; its trainable tensors lead it, in table order */
  int64_t sum = 0;
  for (int64_t u = 0; u < gt_model_n_units(&b); u++) {
    int64_t oa, ca, ob, cb, t = gt_model_unit_trainable(&b, u);
    gt_model_unit(&a, u, &oa, &ca);
    gt_model_unit(&b, u, &ob, &cb);
    ck_assert(oa == ob && ca == cb);
    sum += t;
    for (int i = 0; i < b.n_tensors; i++) {
      const gt_tensor_info *x = &b.tensors[i];
      if (x->layer != (int)u - 1) continue;
      if (x->role == GT_ROLE_TRAINABLE) ck_assert(x->offset >= ob && x->offset + x->numel <= ob + t);
      else ck_assert(x->offset >= ob + t && x->offset + x->numel <= ob + cb);
    }
  }
  ck_assert_int_eq(sum, b.n_trainable);
  /* the executor's views: a frozen slot has no gradient */
  float g[1];
  const gt_layer_desc *L = &b.layers[1];
  ck_assert_ptr_null(gt_layer_grad(L, g, GT_P_WK));
  ck_assert_ptr_nonnull(gt_layer_grad(L, g - L->slot_rel[GT_P_WQ], GT_P_WQ));
  ck_assert_int_eq(L->slot_rel[GT_P_WQ], 0); /* the first trainable tensor leads the block */
  ck_assert_ptr_null(gt_layer_grad(L, NULL, GT_P_WQ));
  ck_assert_ptr_null(gt_model_head_grad(&b, g, b.embed_offset));
  /* the unmasked copy is the unmasked layout */
  gt_model p;
  ck_assert(gt_model_copy_unmasked(&b, &p, &e) == GT_OK);
  for (int i = 0; i < p.n_tensors; i++) ck_assert_int_eq(p.tensors[i].offset, a.tensors[i].offset);
  ck_assert_int_eq(p.n_trainable, p.n_params);
  gt_model_free(&p);
  gt_model_free(&a);
  gt_model_free(&b);
}
END_TEST

START_TEST(test_mask_matching_nothing_is_refused) {
  gt_config c;
  gt_err e;
  gt_model m;
  cfg_of(&c, "gemma3-tiny", "lora_A nothing_here", 1);
  ck_assert(gt_model_build(&m, &c, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "trainable_parameters_mask") && strstr(e.msg, "lora_A nothing_here") &&
                    strstr(e.msg, "embed_tokens.weight") && strstr(e.msg, "layers.0.input_layernorm.weight"),
                "%s", e.msg);
  cfg_of(&c, "gemma3-tiny", "[", 1);
  ck_assert(gt_model_build(&m, &c, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'['"), "%s", e.msg);
}
END_TEST

typedef struct run {
  float *p0, *p; /* parameters before and after */
  double loss[4];
  int64_t n;
} run;

static run train_masked(const char *model, const char *mask, int devices, int steps) {
  gt_config c;
  gt_err e;
  cfg_of(&c, model, mask, devices);
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, &c, &host, &e) == GT_OK);
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_fsdp *f = gt_trainer_fsdp(tr);
  run r;
  r.n = gt_fsdp_num_params(f);
  r.p0 = malloc(sizeof(float) * (size_t)r.n);
  r.p = malloc(sizeof(float) * (size_t)r.n);
  ck_assert(gt_fsdp_full_params(f, r.p0, &e) == GT_OK);
  for (int s = 0; s < steps; s++) {
    gt_batch b;
    gt_data_next_train(&d, &b);
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step(tr, &b, 1, &sm, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = sm.loss;
  }
  ck_assert(gt_fsdp_full_params(f, r.p, &e) == GT_OK);
  gt_trainer_destroy(tr);
  gt_data_close(&d);
  return r;
}

/* Frozen tensors keep their bytes; every trainable tensor moves. */
static void check_frozen(const char *model, const char *mask, const run *r) {
  gt_config c;
  gt_err e;
  gt_model m;
  cfg_of(&c, model, mask, 1);
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  ck_assert_int_gt(m.n_frozen_tensors, 0);
  for (int i = 0; i < m.n_tensors; i++) {
    const gt_tensor_info *t = &m.tensors[i];
    int same = gt_test_same_bits(r->p0 + t->offset, r->p + t->offset, t->numel);
    if (t->role == GT_ROLE_FROZEN) ck_assert_msg(same, "%s %s: frozen tensor %s changed", model, mask, t->name);
    else ck_assert_msg(!same, "%s %s: trainable tensor %s did not change", model, mask, t->name);
  }
  gt_model_free(&m);
}

START_TEST(test_frozen_subset_trains_only_the_subset) {
  /* attention and norms train, the MLPs and the (tied) embedding do not;
   * then the embedding and norms only (the head's gradient paths) */
  const char *masks[] = {"self_attn norm", "embed_tokens ^norm"};
  for (int k = 0; k < 2; k++) {
    run one = train_masked("gemma3-tiny", masks[k], 1, 3);
    check_frozen("gemma3-tiny", masks[k], &one);
    run two = train_masked("gemma3-tiny", masks[k], 2, 3);
    check_frozen("gemma3-tiny", masks[k], &two);
    for (int s = 0; s < 3; s++)
      ck_assert_msg(fabs(two.loss[s] - one.loss[s]) <= 1e-5 * fabs(one.loss[s]), "step %d: %.9g vs %.9g", s,
                    two.loss[s], one.loss[s]);
    double err = gt_test_norm_rel_err(two.p, one.p, one.n);
    ck_assert_msg(err <= 1e-5, "%s: 1 and 2 devices' final weights differ by %.3g", masks[k], err);
    free(one.p0), free(one.p), free(two.p0), free(two.p);
  }
}
END_TEST

START_TEST(test_frozen_subset_bf16) {
  /* dtype=bfloat16: each unit's two parts are packed, gathered in 2 bytes
   * and expanded together (sharded), or rounded as one copy (one device);
   * the master shards stay float32 and the frozen ones untouched */
  g_dtype = "dtype=bfloat16";
  double first = 0;
  for (int devices = 1; devices <= 2; devices++) {
    run r = train_masked("gemma3-tiny", "self_attn norm", devices, 3);
    check_frozen("gemma3-tiny", "self_attn norm", &r);
    for (int s = 0; s < 3; s++) ck_assert(isfinite(r.loss[s]));
    /* the first step computes with the same bf16 weights on any device count */
    if (devices == 1) first = r.loss[0];
    else ck_assert_msg(fabs(r.loss[0] - first) <= 1e-5 * fabs(first), "%.9g vs %.9g", r.loss[0], first);
    free(r.p0), free(r.p);
  }
  g_dtype = "dtype=float32";
}
END_TEST

START_TEST(test_frozen_ple_and_experts) {
  /* Gemma 4 PLE (its table, projection and norm frozen) and MoE (experts
   * and router frozen): only the rest moves */
  run a = train_masked("gemma4-tiny-ple", "self_attn mlp\\.", 1, 2);
  check_frozen("gemma4-tiny-ple", "self_attn mlp\\.", &a);
  free(a.p0), free(a.p);
  run b = train_masked("gemma4-tiny-moe", "self_attn layernorm", 1, 2);
  check_frozen("gemma4-tiny-moe", "self_attn layernorm", &b);
  free(b.p0), free(b.p);
}
END_TEST

START_TEST(test_plan_with_mask_equals_measured) {
  const char *mask = "self_attn norm";
  for (int devices = 1; devices <= 2; devices++) {
    gt_config c;
    gt_err e;
    cfg_of(&c, "gemma3-tiny", mask, devices);
    gt_plan p;
    ck_assert_msg(gt_plan_compute(&p, &c, &e) == GT_OK, "%s", e.msg);
    gt_trainer *tr;
    ck_assert(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK);
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step_zero(tr, &sm, &e) == GT_OK, "%s", e.msg);
    gt_mem *mem = gt_fsdp_device_mem(gt_trainer_fsdp(tr), 0);
    for (int k = 0; k < GT_MEM_NCAT; k++)
      ck_assert_msg(gt_mem_peak(mem, (gt_mem_cat)k) == p.cat_peak[k], "%d devices %s: measured %lld, planned %lld",
                    devices, gt_mem_cat_name((gt_mem_cat)k), (long long)gt_mem_peak(mem, (gt_mem_cat)k),
                    (long long)p.cat_peak[k]);
    ck_assert_int_eq(gt_mem_total_peak(mem), p.peak_total);
    ck_assert_int_lt(p.n_trainable, p.n_params);
    if (devices == 1) {
      /* one device: the whole state; gradients and moments of the
       * trainable group only, parameters of both */
      ck_assert_int_eq(p.cat_peak[GT_MEM_PARAMS], 4 * p.n_trainable);
      ck_assert_int_eq(p.cat_peak[GT_MEM_FROZEN], 4 * (p.n_params - p.n_trainable)); /* its own category */
      ck_assert_int_eq(p.cat_peak[GT_MEM_GRADS], 4 * p.n_trainable);
      ck_assert_int_eq(p.cat_peak[GT_MEM_OPTIM], 8 * p.n_trainable);
    }
    gt_trainer_destroy(tr);
    gt_plan_free(&p);
  }
}
END_TEST

START_TEST(test_flops_drop_frozen_dw) {
  gt_config a, b;
  cfg_of(&a, "gemma3-tiny", "", 1);
  cfg_of(&b, "gemma3-tiny", "self_attn norm", 1);
  gt_flops fa = gt_flops_per_step_per_device(&a), fb = gt_flops_per_step_per_device(&b);
  gt_model m;
  gt_err e;
  ck_assert(gt_model_build(&m, &b, &e) == GT_OK);
  /* frozen: the embedding (its tied logits product) and every MLP matrix */
  double frozen = (double)m.vocab * m.d;
  for (int64_t l = 0; l < m.n_layers; l++) frozen += 3.0 * m.layers[l].mlp_dim * m.d;
  double B = b.per_device_batch_size, T = (double)b.max_target_length;
  double want = 2 * B * T * frozen / 1e12;
  ck_assert_msg(fabs((fa.learnable_tflops - fb.learnable_tflops) - want) <= 1e-9 * want, "dropped %.9g, want %.9g",
                fa.learnable_tflops - fb.learnable_tflops, want);
  ck_assert(fabs((fa.total_tflops - fb.total_tflops) - want) <= 1e-9 * want);
  ck_assert(fa.attention_tflops == fb.attention_tflops && fa.layers_forward_tflops == fb.layers_forward_tflops);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_ep_refuses_trainable_experts_behind_frozen) {
  gt_config c;
  gt_err e;
  const char *ov[] = {"model_name=gemma4-tiny-moe", "trainable_parameters_mask=experts router",
                      "num_devices=2", "ici_expert_parallelism=2", "dataset_type=synthetic"};
  ck_assert(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 5, ov, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert(gt_fsdp_create(&f, &c, NULL, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "expert parallelism") && strstr(e.msg, "experts.gate_up_proj"), "%s", e.msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("store");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_dtype_bytes);
  tcase_add_test(tc, test_trainable_must_be_float32);
  tcase_add_test(tc, test_mask_matching);
  tcase_add_test(tc, test_layout_follows_roles);
  tcase_add_test(tc, test_mask_matching_nothing_is_refused);
  tcase_add_test(tc, test_frozen_subset_trains_only_the_subset);
  tcase_add_test(tc, test_frozen_subset_bf16);
  tcase_add_test(tc, test_frozen_ple_and_experts);
  tcase_add_test(tc, test_plan_with_mask_equals_measured);
  tcase_add_test(tc, test_flops_drop_frozen_dw);
  tcase_add_test(tc, test_ep_refuses_trainable_experts_behind_frozen);
  return gt_test_run_suite(s, 0);
}
