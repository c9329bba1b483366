/* The model as a whole: gradients of the full forward/backward against
 * finite differences (Gemma 3: local and global layers, window smaller than,
 * equal to and larger than the sequence; Gemma 4: each new op switched on
 * alone and the tiny presets whole), vocab tiling invariance and its logits
 * memory, and the layer graph built from the config. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "exec/exec.h"
#include "model/model.h"
#include "gt_testutil.h"

typedef struct fixture {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
  int32_t *in, *tg, *pos;
  gt_batch b;
} fixture;

static void setup(fixture *f, int n, const char *const *ov, uint64_t seed) {
  /* norm weights around 1 for Gemma 4, which stores the scale itself (and layer_scalar) */
  uint64_t s = gt_test_model_random(&f->m, &f->cfg, &f->mem, n, ov, seed, 1);
  int B = (int)gt_config_global_batch(&f->cfg), T = (int)f->cfg.max_target_length;
  f->in = malloc(sizeof(int32_t) * B * T);
  f->tg = malloc(sizeof(int32_t) * B * T);
  f->pos = malloc(sizeof(int32_t) * B * T);
  for (int i = 0; i < B * T; i++) {
    f->in[i] = (int32_t)(gt_test_rand_u64(&s) % (uint64_t)f->m.vocab);
    f->tg[i] = (int32_t)(gt_test_rand_u64(&s) % (uint64_t)f->m.vocab);
    f->pos[i] = i % T;
  }
  f->tg[1] = -1; /* one masked target */
  f->b = (gt_batch){B, T, f->in, f->tg, f->pos, NULL};
}

static void teardown(fixture *f) {
  gt_model_free(&f->m);
  free(f->in);
  free(f->tg);
  free(f->pos);
  ck_assert_int_eq(gt_mem_total_cur(&f->mem), 0); /* nothing leaked in the tracker */
}

static double loss_of(fixture *f) {
  gt_loss_stats st = {0};
  gt_err e;
  ck_assert(gt_exec_forward_loss(&f->m, &f->b, 1, &st, &e) == GT_OK);
  return st.xent_sum / (double)st.total_weights;
}

static void grads_of(fixture *f, int tiles, double *loss) {
  gt_loss_stats st = {0};
  gt_err e;
  gt_model_zero_grads(&f->m);
  int64_t tw = gt_batch_total_weights(&f->b);
  ck_assert_msg(gt_exec_forward_backward(&f->m, &f->b, tiles, 1.0f / (float)tw, &st, &e) == GT_OK,
                "%s", e.msg);
  ck_assert_int_eq(st.total_weights, tw);
  *loss = st.xent_sum / (double)st.total_weights;
}

/* Directional derivative along a random direction, plus a few single
 * entries of every tensor kind, against central differences. float32
 * forward passes limit the precision, so h is large and tolerances are a
 * few percent; the 1e-4 check against the float64 PyTorch reference is in
 * test_reference. */
static void check_fd_h(int n, const char *const *ov, double h, double hh);

static void check_fd(int n, const char *const *ov) { check_fd_h(n, ov, 2e-3, 3e-3); }

/* h: the step along the random direction; hh: the step of single entries */
static void check_fd_h(int n, const char *const *ov, double h, double hh) {
  fixture f;
  setup(&f, n, ov, 5);
  double loss;
  grads_of(&f, 1, &loss);
  ck_assert(fabs(loss - loss_of(&f)) < 1e-5 * fabs(loss));
  int64_t P = f.m.n_params;
  float *g = malloc(sizeof(float) * P), *p0 = malloc(sizeof(float) * P);
  float *dir = malloc(sizeof(float) * P);
  memcpy(g, f.m.grads, sizeof(float) * P);
  memcpy(p0, f.m.params, sizeof(float) * P);
  uint64_t s = 99;
  gt_test_fill(dir, P, &s, -1, 1);
  double gd = 0;
  for (int64_t i = 0; i < P; i++) gd += (double)g[i] * dir[i];
  for (int64_t i = 0; i < P; i++) f.m.params[i] = p0[i] + (float)h * dir[i];
  double lp = loss_of(&f);
  for (int64_t i = 0; i < P; i++) f.m.params[i] = p0[i] - (float)h * dir[i];
  double lm = loss_of(&f);
  memcpy(f.m.params, p0, sizeof(float) * P);
  double fd = (lp - lm) / (2 * h);
  ck_assert_msg(fabs(fd - gd) <= 0.02 * fabs(gd) + 1e-4, "directional: fd %.6g vs analytic %.6g", fd, gd);

  /* the largest-gradient entry of each tensor */
  int checked = 0;
  for (int t = 0; t < f.m.n_tensors; t++) {
    const gt_tensor_info *ti = &f.m.tensors[t];
    int64_t best = ti->offset;
    for (int64_t i = ti->offset; i < ti->offset + ti->numel; i++)
      if (fabsf(g[i]) > fabsf(g[best])) best = i;
    if (fabsf(g[best]) < 1e-3f) continue;
    f.m.params[best] = p0[best] + (float)hh;
    double a = loss_of(&f);
    f.m.params[best] = p0[best] - (float)hh;
    double bb = loss_of(&f);
    f.m.params[best] = p0[best];
    double fde = (a - bb) / (2 * hh);
    ck_assert_msg(fabs(fde - g[best]) <= 0.05 * fabs(g[best]) + 2e-4, "%s[%lld]: fd %.6g vs analytic %.6g",
                  ti->name, (long long)(best - ti->offset), fde, g[best]);
    checked++;
  }
  ck_assert_int_ge(checked, f.m.n_tensors / 2);
  free(g);
  free(p0);
  free(dir);
  teardown(&f);
}

START_TEST(test_fd_window_smaller) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=12", "sliding_window_size=4",
                      "per_device_batch_size=2", "base_num_decoder_layers=6"};
  check_fd(5, ov);
}
END_TEST

START_TEST(test_fd_window_equal) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=9", "sliding_window_size=9",
                      "per_device_batch_size=2", "layer_pattern=LG", "base_num_decoder_layers=2"};
  check_fd(6, ov);
}
END_TEST

START_TEST(test_fd_window_larger_gqa) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=10", "sliding_window_size=40",
                      "per_device_batch_size=1", "layer_pattern=GL", "base_num_decoder_layers=2",
                      "base_num_query_heads=4", "base_num_kv_heads=1"};
  check_fd(8, ov);
}
END_TEST

START_TEST(test_fd_softcap) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=8", "per_device_batch_size=1",
                      "layer_pattern=LG", "base_num_decoder_layers=2", "final_logits_soft_cap=3"};
  check_fd(6, ov);
}
END_TEST

START_TEST(test_vocab_tiling_invariance) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2"};
  fixture f;
  setup(&f, 3, ov, 11);
  int64_t P = f.m.n_params, N = 32, V = f.m.vocab;
  double l1;
  gt_mem_reset_peaks(&f.mem);
  grads_of(&f, 1, &l1);
  ck_assert_int_eq(gt_mem_peak(&f.mem, GT_MEM_LOGITS), N * V * 4);
  float *g1 = malloc(sizeof(float) * P);
  memcpy(g1, f.m.grads, sizeof(float) * P);
  int tiles[] = {2, 4, 8};
  for (int i = 0; i < 3; i++) {
    double l;
    gt_mem_reset_peaks(&f.mem);
    grads_of(&f, tiles[i], &l);
    /* only one tile of logits ever exists */
    ck_assert_int_eq(gt_mem_peak(&f.mem, GT_MEM_LOGITS), N / tiles[i] * V * 4);
    ck_assert_msg(fabs(l - l1) <= 1e-6 * fabs(l1), "tiles %d: loss %.9g vs %.9g", tiles[i], l, l1);
    double err = gt_test_norm_rel_err(f.m.grads, g1, P);
    ck_assert_msg(err <= 1e-6, "tiles %d: gradient rel err %.3g", tiles[i], err);
  }
  free(g1);
  teardown(&f);
}
END_TEST

START_TEST(test_deterministic) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2"};
  fixture f;
  setup(&f, 3, ov, 3);
  double l1, l2;
  grads_of(&f, 1, &l1);
  float *g1 = malloc(sizeof(float) * f.m.n_params);
  memcpy(g1, f.m.grads, sizeof(float) * f.m.n_params);
  grads_of(&f, 1, &l2);
  ck_assert(l1 == l2);
  ck_assert(memcmp(g1, f.m.grads, sizeof(float) * f.m.n_params) == 0);
  free(g1);
  teardown(&f);
}
END_TEST

START_TEST(test_initial_loss_near_uniform) {
  /* fresh weights: logits are O(1), so the loss sits near ln V */
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=32", "per_device_batch_size=2"};
  fixture f;
  setup(&f, 3, ov, 1);
  gt_model_init_params(&f.m, 1, 1.0);
  double l = loss_of(&f);
  ck_assert_msg(fabs(l - log((double)f.m.vocab)) < 1.0, "initial loss %.4f vs ln V %.4f", l,
                log((double)f.m.vocab));
  teardown(&f);
}
END_TEST

/* ---- Gemma 4: one new op at a time, then the tiny presets whole ----
 * Gemma 4 attends with scale 1 on RMS-normalised q and k, so at random
 * weights the softmax is sharp and the loss curves within a step of 2e-3
 * along a random direction of every parameter (the central difference then
 * misses by 5-40%, converging as h^2 when h shrinks, checked by hand). The
 * checks below soften the attention (query_pre_attn_scalar = 16, a scalar
 * the kernel already takes) and step 5e-4: what they test is the new ops'
 * gradients. Scale 1 itself is held to the float64 reference in
 * test_reference, which needs no step at all. */
static void check_fd_g4(int n, const char *const *ov) {
  const char *all[16];
  for (int i = 0; i < n; i++) all[i] = ov[i];
  all[n] = "query_pre_attn_scalar=16";
  check_fd_h(n + 1, all, 5e-4, 2e-3);
}

START_TEST(test_fd_gemma4_dense_k_eq_v) {
  /* global layers: head dim 32, one kv head, K = V (v = v_norm of raw k),
   * partial RoPE (a quarter of the pairs); layer_scalar trained; soft-cap 30 */
  const char *ov[] = {"model_name=gemma4-tiny-dense", "max_target_length=12", "sliding_window_size=4",
                      "per_device_batch_size=2"};
  check_fd_g4(4, ov);
}
END_TEST

START_TEST(test_fd_gemma4_own_v_scaled_vnorm) {
  /* separate v_proj on globals, a v-norm with a learnable scale, and
   * layer_scalar as the constant 1 (no parameter) */
  const char *ov[] = {"model_name=gemma4-tiny-dense", "max_target_length=10", "sliding_window_size=3",
                      "per_device_batch_size=2", "share_kv_projections=false", "v_norm_with_scale=true",
                      "layer_scalar_trainable=false", "layer_pattern=LG", "base_num_decoder_layers=4"};
  check_fd_g4(9, ov);
}
END_TEST

START_TEST(test_fd_gemma4_ple_only) {
  const char *ov[] = {"model_name=gemma4-tiny-ple", "max_target_length=9", "sliding_window_size=4",
                      "per_device_batch_size=2", "num_kv_shared_layers=0", "base_num_decoder_layers=5"};
  check_fd_g4(6, ov);
}
END_TEST

START_TEST(test_fd_gemma4_kv_sharing_only) {
  /* layers 3..5 read the K/V of layer 2 (local) and 1 (global) */
  const char *ov[] = {"model_name=gemma4-tiny-dense", "max_target_length=11", "sliding_window_size=4",
                      "per_device_batch_size=2", "layer_pattern=LGL", "base_num_decoder_layers=6",
                      "num_kv_shared_layers=3"};
  check_fd_g4(7, ov);
}
END_TEST

START_TEST(test_fd_gemma4_tiny_ple_whole) {
  /* PLE + KV sharing (layers 6..9; donors 5 and 4) + double-wide MLPs */
  const char *ov[] = {"model_name=gemma4-tiny-ple", "max_target_length=10", "sliding_window_size=4",
                      "per_device_batch_size=2"};
  check_fd_g4(4, ov);
}
END_TEST

/* ---------- MoE: the whole model, load-balance term included ---------- */

/* The step's loss as training sees it: LM loss + moe_dlb x the layers' lb
 * sum (the mean over MoE layers); *lb gets that lb term alone. */
static double moe_loss_of(fixture *f, double *lb) {
  gt_loss_stats st = {0};
  gt_err e;
  ck_assert(gt_exec_forward_loss(&f->m, &f->b, 1, &st, &e) == GT_OK);
  *lb = st.moe_lb_sum * (double)f->m.moe_dlb;
  return st.xent_sum / (double)st.total_weights + *lb;
}

/* Top-k routing is piecewise constant, so a central difference is only
 * meaningful when no token changes its experts between +h and -h. The
 * load-balance term tells: it is smooth in the probabilities, and a changed
 * choice moves its counts f by 1/T, a jump of about w E Pbar / (B T) (here
 * ~1e-3), while with the same routing its second difference is O(h^2). So
 * every difference below first asserts |lb(+) + lb(-) - 2 lb(0)| < 1e-6. */
static void check_fd_moe(int n, const char *const *ov, double h, double hh) {
  fixture f;
  setup(&f, n, ov, 5);
  ck_assert_int_gt(f.m.n_moe_layers, 0);
  gt_loss_stats st = {0};
  gt_err e;
  gt_model_zero_grads(&f.m);
  int64_t tw = gt_batch_total_weights(&f.b);
  ck_assert(gt_exec_forward_backward(&f.m, &f.b, 1, 1.0f / (float)tw, &st, &e) == GT_OK);
  double lb0, loss0 = moe_loss_of(&f, &lb0);
  ck_assert(fabs(st.xent_sum / (double)tw + st.moe_lb_sum * f.m.moe_dlb - loss0) < 1e-5 * loss0);
  ck_assert_msg(lb0 > 1e-3, "the lb term %.3g is too small to be checked", lb0);
  int64_t P = f.m.n_params;
  float *g = malloc(sizeof(float) * P), *p0 = malloc(sizeof(float) * P), *dir = malloc(sizeof(float) * P);
  memcpy(g, f.m.grads, sizeof(float) * P);
  memcpy(p0, f.m.params, sizeof(float) * P);
  uint64_t s = 99;
  gt_test_fill(dir, P, &s, -1, 1);
  double gd = 0, lbp, lbm;
  for (int64_t i = 0; i < P; i++) gd += (double)g[i] * dir[i];
  for (int64_t i = 0; i < P; i++) f.m.params[i] = p0[i] + (float)h * dir[i];
  double lp = moe_loss_of(&f, &lbp);
  for (int64_t i = 0; i < P; i++) f.m.params[i] = p0[i] - (float)h * dir[i];
  double lm = moe_loss_of(&f, &lbm);
  memcpy(f.m.params, p0, sizeof(float) * P);
  ck_assert_msg(fabs(lbp + lbm - 2 * lb0) < 1e-6, "routing changed under the directional step (lb %.9g %.9g %.9g)", lbm,
                lb0, lbp);
  double fd = (lp - lm) / (2 * h);
  ck_assert_msg(fabs(fd - gd) <= 0.02 * fabs(gd) + 1e-4, "directional: fd %.6g vs analytic %.6g", fd, gd);
  int checked = 0, moe_checked = 0;
  for (int t = 0; t < f.m.n_tensors; t++) {
    const gt_tensor_info *ti = &f.m.tensors[t];
    int64_t best = ti->offset;
    for (int64_t i = ti->offset; i < ti->offset + ti->numel; i++)
      if (fabsf(g[i]) > fabsf(g[best])) best = i;
    if (fabsf(g[best]) < 1e-3f) continue;
    f.m.params[best] = p0[best] + (float)hh;
    double a = moe_loss_of(&f, &lbp);
    f.m.params[best] = p0[best] - (float)hh;
    double bb = moe_loss_of(&f, &lbm);
    f.m.params[best] = p0[best];
    ck_assert_msg(fabs(lbp + lbm - 2 * lb0) < 1e-6, "%s: routing changed under the step", ti->name);
    double fde = (a - bb) / (2 * hh);
    ck_assert_msg(fabs(fde - g[best]) <= 0.05 * fabs(g[best]) + 2e-4, "%s[%lld]: fd %.6g vs analytic %.6g", ti->name,
                  (long long)(best - ti->offset), fde, g[best]);
    checked++;
    moe_checked += strstr(ti->name, "router") || strstr(ti->name, "experts") || strstr(ti->name, "_2.") ||
                   strstr(ti->name, "_1.");
  }
  ck_assert_int_ge(checked, f.m.n_tensors / 2);
  ck_assert_int_ge(moe_checked, 6); /* router, per-expert scale, experts and the new norms took part */
  free(g);
  free(p0);
  free(dir);
  teardown(&f);
}

START_TEST(test_fd_gemma4_tiny_moe_whole) {
  /* gemma4-tiny-moe cut to 2 layers (local + K = V global), 8 experts top-2
   * with a shared expert, lb weight 0.1 so its gradient is well above the
   * tolerance; 2 x 6 tokens */
  const char *ov[] = {"model_name=gemma4-tiny-moe", "max_target_length=6", "sliding_window_size=4",
                      "per_device_batch_size=2", "layer_pattern=LG", "base_num_decoder_layers=2",
                      "load_balance_loss_weight=0.1", "query_pre_attn_scalar=16"};
  check_fd_moe(8, ov, 5e-4, 2e-3);
}
END_TEST

START_TEST(test_moe_graph) {
  /* every layer of gemma4-tiny-moe is a MoE layer with HF's tensor names,
   * the expert tensors last in the layer (expert parallelism keeps the rest
   * in place), and the lb weight of each layer is 1 / #MoE layers */
  const char *ov[] = {"model_name=gemma4-tiny-moe"};
  gt_config c;
  gt_test_config(&c, 1, ov);
  gt_model m;
  gt_test_model_build(&m, &c);
  ck_assert_int_eq(m.n_moe_layers, 6);
  ck_assert(fabsf(m.moe_dlb - 1.0f / 6) < 1e-7f);
  const gt_tensor_info *gu = gt_model_find_tensor(&m, "layers.5.experts.gate_up_proj");
  const gt_tensor_info *dn = gt_model_find_tensor(&m, "layers.5.experts.down_proj");
  ck_assert(gu && dn && gu->ndim == 3 && dn->ndim == 3);
  ck_assert(gu->shape[0] == 8 && gu->shape[1] == 64 && gu->shape[2] == 64);
  ck_assert(dn->shape[0] == 8 && dn->shape[1] == 64 && dn->shape[2] == 32);
  ck_assert_int_eq(dn->offset + dn->numel, m.layers[5].param_offset + m.layers[5].param_count);
  ck_assert_int_eq(gu->offset + gu->numel, dn->offset);
  const char *names[] = {"router.proj.weight", "router.scale", "router.per_expert_scale",
                         "pre_feedforward_layernorm_2.weight", "post_feedforward_layernorm_1.weight",
                         "post_feedforward_layernorm_2.weight", "mlp.gate_proj.weight"};
  for (int i = 0; i < 7; i++) {
    char nm[96];
    snprintf(nm, sizeof nm, "layers.0.%s", names[i]);
    ck_assert_msg(gt_model_find_tensor(&m, nm) != NULL, "%s", nm);
  }
  ck_assert_int_eq(gt_model_find_tensor(&m, "layers.0.router.proj.weight")->shape[0], 8);
  /* expert parallelism over 2: the same block minus half the experts */
  gt_model_set_expert_shard(&m, 2, 1);
  const gt_layer_desc *L = &m.layers[5];
  ck_assert_int_eq(L->local_count, L->param_count - 4 * (64 * 64 + 64 * 32));
  int64_t fo[3], lo[3], ln[3];
  ck_assert_int_eq(gt_model_unit_pieces(&m, 6, fo, lo, ln), 3);
  ck_assert_int_eq(fo[1], gu->offset + 4 * 64 * 64);
  ck_assert_int_eq(fo[2], dn->offset + 4 * 64 * 32);
  ck_assert_int_eq(lo[2] + ln[2], L->local_count);
  ck_assert_int_eq(gt_model_unit_replicated(&m, 6), gu->offset - L->param_offset);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_gemma4_graph) {
  /* the descriptors of gemma4-tiny-ple: pattern LLLLG, layers 6..9 shared */
  const char *ov[] = {"model_name=gemma4-tiny-ple"};
  fixture f;
  setup(&f, 1, ov, 1);
  int donors[10] = {-1, -1, -1, -1, -1, -1, 5, 5, 5, 4};
  int last[10] = {-1, -1, -1, -1, 9, 8, -1, -1, -1, -1};
  for (int l = 0; l < 10; l++) {
    const gt_layer_desc *L = &f.m.layers[l];
    ck_assert_int_eq(L->kind, l % 5 == 4 ? GT_LAYER_GLOBAL : GT_LAYER_LOCAL);
    ck_assert_int_eq(L->head_dim, l % 5 == 4 ? 32 : 16);
    ck_assert_int_eq(L->kv_donor, donors[l]);
    ck_assert_int_eq(L->kv_last_reader, last[l]);
    ck_assert_int_eq(L->mlp_dim, l >= 6 ? 192 : 96);
    ck_assert_int_eq(L->slot_offset[GT_P_WK] < 0, l >= 6);
    ck_assert_int_eq(L->slot_offset[GT_P_K_NORM] < 0, l >= 6);
    ck_assert(L->slot_offset[GT_P_LAYER_SCALAR] >= 0 && L->slot_offset[GT_P_PLE_GATE] >= 0);
    ck_assert(L->q_scale == 1.0f);
  }
  ck_assert(f.m.norm_offset == 0.0f);
  ck_assert_ptr_nonnull(gt_model_find_tensor(&f.m, "embed_tokens_per_layer.weight"));
  ck_assert_ptr_nonnull(gt_model_find_tensor(&f.m, "layers.9.layer_scalar"));
  ck_assert_ptr_null(gt_model_find_tensor(&f.m, "layers.9.self_attn.k_proj.weight"));
  /* fresh norms and layer scalars are 1 (a stored scale), not 0 */
  gt_model_init_params(&f.m, 1, 1.0);
  ck_assert(f.m.params[gt_model_find_tensor(&f.m, "layers.3.layer_scalar")->offset] == 1.0f);
  ck_assert(f.m.params[gt_model_find_tensor(&f.m, "norm.weight")->offset] == 1.0f);
  teardown(&f);
}
END_TEST

START_TEST(test_gemma4_initial_loss_near_uniform) {
  const char *names[] = {"model_name=gemma4-tiny-dense", "model_name=gemma4-tiny-ple"};
  for (int i = 0; i < 2; i++) {
    const char *ov[] = {names[i], "max_target_length=32", "per_device_batch_size=2"};
    fixture f;
    setup(&f, 3, ov, 1);
    gt_model_init_params(&f.m, 1, 1.0);
    double l = loss_of(&f);
    ck_assert_msg(fabs(l - log((double)f.m.vocab)) < 1.0, "%s: initial loss %.4f vs ln V %.4f", names[i], l,
                  log((double)f.m.vocab));
    teardown(&f);
  }
}
END_TEST

Suite *model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_fd_window_smaller);
  tcase_add_test(tc, test_fd_window_equal);
  tcase_add_test(tc, test_fd_window_larger_gqa);
  tcase_add_test(tc, test_fd_softcap);
  tcase_add_test(tc, test_vocab_tiling_invariance);
  tcase_add_test(tc, test_deterministic);
  tcase_add_test(tc, test_initial_loss_near_uniform);
  TCase *g4 = gt_test_tcase(s, "gemma4");
  tcase_add_test(g4, test_fd_gemma4_dense_k_eq_v);
  tcase_add_test(g4, test_fd_gemma4_own_v_scaled_vnorm);
  tcase_add_test(g4, test_fd_gemma4_ple_only);
  tcase_add_test(g4, test_fd_gemma4_kv_sharing_only);
  tcase_add_test(g4, test_fd_gemma4_tiny_ple_whole);
  tcase_add_test(g4, test_gemma4_graph);
  tcase_add_test(g4, test_fd_gemma4_tiny_moe_whole);
  tcase_add_test(g4, test_moe_graph);
  tcase_add_test(g4, test_gemma4_initial_loss_near_uniform);
  return s;
}

int main(void) {
  return gt_test_run_suite(model_suite(), 0);
}
