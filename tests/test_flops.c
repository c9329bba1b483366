/* MaxText's TFLOPs formula against the worked numbers of
 * the Gemma spec (kept outside the repository), section 5.2 (B=1, T=2048)
 * and a hand count. */
#include <check.h>
#include <math.h>

#include "config/config.h"
#include "model/flops.h"
#include "model/model.h"
#include "gt_testutil.h"

static gt_flops for_model(const char *name, int tl) {
  gt_config c;
  char mn[64], t[64];
  snprintf(mn, sizeof mn, "model_name=%s", name);
  snprintf(t, sizeof t, "max_target_length=%d", tl);
  const char *ov[] = {mn, "per_device_batch_size=1", t};
  gt_test_config(&c, 3, ov);
  return gt_flops_per_step_per_device(&c);
}

START_TEST(test_spec_worked_numbers) {
  gt_flops f = for_model("gemma3-4b", 2048);
  ck_assert_msg(fabs(f.learnable_tflops - 47.67) < 0.01, "4b learnable %.4f", f.learnable_tflops);
  ck_assert_msg(fabs(f.attention_tflops - 1.38) < 0.01, "4b attention %.4f", f.attention_tflops);
  ck_assert_msg(fabs(f.total_tflops - 49.05) < 0.01, "4b total %.4f", f.total_tflops);
  f = for_model("gemma3-1b", 2048);
  ck_assert_msg(fabs(f.total_tflops - 12.64) < 0.01, "1b total %.4f", f.total_tflops);
  f = for_model("gemma3-270m", 2048);
  ck_assert_msg(fabs(f.total_tflops - 3.54) < 0.01, "270m total %.4f", f.total_tflops);
}
END_TEST

START_TEST(test_hand_count_tiny) {
  /* gemma3-tiny at T=64, B=1: d=64 H=4 K=2 hd=16 F=128 V=260 L=6, W=16 */
  gt_flops f = for_model("gemma3-tiny", 64);
  double B = 1, T = 64, d = 64, H = 4, K = 2, hd = 16, F = 128, V = 260, W = 16;
  double per_layer = 6 * B * T * F * d + 2 * B * T * d * (H + 2 * K) * hd + 2 * B * T * d * H * hd;
  double learn = 3 * (6 * per_layer + 2 * B * T * d * V) / 1e12;
  double attn = 3 * (1 * 2 * B * T * T * H * hd + 5 * 4 * B * (T * W - 0.5 * W * W) * H * hd) / 1e12;
  ck_assert(fabs(f.learnable_tflops - learn) < 1e-15);
  ck_assert(fabs(f.attention_tflops - attn) < 1e-15);
  /* what remat_policy=full recomputes: the six layers' forward, no logits */
  double fwd = (6 * per_layer + 1 * 2 * B * T * T * H * hd + 5 * 4 * B * (T * W - 0.5 * W * W) * H * hd) / 1e12;
  ck_assert_msg(fabs(f.layers_forward_tflops - fwd) < 1e-15, "layers forward %.6g, hand %.6g", f.layers_forward_tflops, fwd);
}
END_TEST

/* DPO's reference pass: one more forward of the whole model (MaxText's
 * learnable / 3 + attention / 3), with adapters the base's; ORPO has no
 * reference. gemma3-tiny at B=1 T=64, by hand as above. */
static gt_flops for_keys(int n, const char *const *extra) {
  const char *ov[8] = {"model_name=gemma3-tiny", "per_device_batch_size=1", "max_target_length=64"};
  for (int i = 0; i < n; i++) ov[3 + i] = extra[i];
  gt_config c;
  gt_test_config(&c, 3 + n, ov);
  return gt_flops_per_step_per_device(&c);
}

START_TEST(test_dpo_reference_pass) {
  double B = 1, T = 64, d = 64, H = 4, K = 2, hd = 16, F = 128, V = 260, W = 16;
  double per_layer = 6 * B * T * F * d + 2 * B * T * d * (H + 2 * K) * hd + 2 * B * T * d * H * hd;
  double fwd = (6 * per_layer + 2 * B * T * d * V + 1 * 2 * B * T * T * H * hd +
                5 * 4 * B * (T * W - 0.5 * W * W) * H * hd) / 1e12;
  const char *dpo[] = {"use_dpo=true"}, *orpo[] = {"use_dpo=true", "preference_algo=orpo"};
  const char *lora[] = {"enable_lora=true", "lora_rank=4"}, *lora_dpo[] = {"enable_lora=true", "lora_rank=4", "use_dpo=true"};
  double plain = for_keys(0, NULL).total_tflops;
  ck_assert_msg(fabs(for_keys(1, dpo).total_tflops - (plain + fwd)) < 1e-15, "DPO %.9g, want %.9g",
                for_keys(1, dpo).total_tflops, plain + fwd);
  ck_assert(for_keys(2, orpo).total_tflops == plain);
  double with_adapters = for_keys(2, lora).total_tflops;
  ck_assert_msg(fabs(for_keys(3, lora_dpo).total_tflops - (with_adapters + fwd)) < 1e-15, "LoRA DPO %.9g, want %.9g",
                for_keys(3, lora_dpo).total_tflops, with_adapters + fwd);
  /* remat recomputes no reference pass */
  ck_assert(for_keys(1, dpo).layers_forward_tflops == for_keys(0, NULL).layers_forward_tflops);
}
END_TEST

START_TEST(test_hand_count_gemma4) {
  /* spec 5.2, Gemma 4 (small), at B=1 T=64 on gemma4-tiny-ple: d=64 H=4
   * V=260 P=8 L=10, locals hd 16 K 1 W 16, globals (4, 9) hd 32 K 1, layers
   * 6..9 KV-shared with F=192 (double-wide), the others F=96 */
  gt_flops f = for_model("gemma4-tiny-ple", 64);
  double B = 1, T = 64, d = 64, H = 4, V = 260, P = 8, W = 16, L = 10;
  double learn = 2 * B * T * d * V + 2 * B * T * d * (L * P), attn = 0;
  for (int l = 0; l < 10; l++) {
    int g = l % 5 == 4, shared = l >= 6;
    double hd = g ? 32 : 16, F = shared ? 192 : 96, kv = shared ? 0 : 2;
    learn += 6 * B * T * F * d + 2 * B * T * d * (H + kv * 1) * hd + 2 * B * T * d * H * hd;
    learn += 2 * B * T * d * P + 2 * B * T * P * d;
    attn += g ? 2 * B * T * T * H * hd : 4 * B * (T * W - 0.5 * W * W) * H * hd;
  }
  ck_assert(fabs(f.learnable_tflops - 3 * learn / 1e12) < 1e-15);
  ck_assert(fabs(f.attention_tflops - 3 * attn / 1e12) < 1e-15);
  /* the layers' forward leaves out the logits and PLE's model projection,
   * which run once per step whatever the remat policy */
  double outside = 2 * B * T * d * V + 2 * B * T * d * (L * P);
  ck_assert(fabs(f.layers_forward_tflops - (learn - outside + attn) / 1e12) < 1e-15);
  /* gemma4-tiny-dense: K=V on the global (layer 5: hd 32, 1 kv head, one
   * projection), locals hd 16 with 2 kv heads */
  f = for_model("gemma4-tiny-dense", 64);
  double learn2 = 2 * B * T * d * V, attn2 = 0;
  for (int l = 0; l < 6; l++) {
    int g = l == 5;
    double hd = g ? 32 : 16, K = g ? 1 : 2, mult = g ? 1 : 2;
    learn2 += 6 * B * T * 128 * d + 2 * B * T * d * (H + mult * K) * hd + 2 * B * T * d * H * hd;
    attn2 += g ? 2 * B * T * T * H * hd : 4 * B * (T * W - 0.5 * W * W) * H * hd;
  }
  ck_assert(fabs(f.learnable_tflops - 3 * learn2 / 1e12) < 1e-15);
  ck_assert(fabs(f.attention_tflops - 3 * attn2 / 1e12) < 1e-15);
}
END_TEST

START_TEST(test_hand_count_moe) {
  /* spec 5.2, Gemma 4 MoE: per MoE layer the router 2BTdE, the shared
   * expert 6BTFd (F = base_mlp_dim) and top_k routed experts 6BTF_e d each.
   * gemma4-26b at B=1 T=4096: d=2816 H=16 V=262144 L=30, E=128 k=8 F=2112
   * F_e=704; locals hd 256 K 8 (kv_mult 2) W 1024, globals (5, 11, ...)
   * hd 512 K 2 with K = V (kv_mult 1). Evaluated by hand in float64:
   * learnable 93.9253, attention 8.6329, total 102.5582 TFLOPs. */
  gt_flops f = for_model("gemma4-26b", 4096);
  double B = 1, T = 4096, d = 2816, H = 16, V = 262144, W = 1024, E = 128, k = 8, F = 2112, FE = 704;
  double learn = 2 * B * T * d * V, attn = 0;
  for (int l = 0; l < 30; l++) {
    int g = l % 6 == 5;
    double hd = g ? 512 : 256, K = g ? 2 : 8, mult = g ? 1 : 2;
    learn += 6 * B * T * F * d + 2 * B * T * d * E + k * 6 * B * T * FE * d;
    learn += 2 * B * T * d * (H + mult * K) * hd + 2 * B * T * d * H * hd;
    attn += g ? 2 * B * T * T * H * hd : 4 * B * (T * W - 0.5 * W * W) * H * hd;
  }
  ck_assert(fabs(f.learnable_tflops - 3 * learn / 1e12) < 1e-9);
  ck_assert(fabs(f.attention_tflops - 3 * attn / 1e12) < 1e-9);
  ck_assert_msg(fabs(f.total_tflops - 102.5582) < 1e-4, "26b total %.6f", f.total_tflops);
  /* gemma4-tiny-moe at T=64: d=64 H=4 V=260, 8 experts top-2, F=64 F_e=32 */
  f = for_model("gemma4-tiny-moe", 64);
  double learn2 = 2 * 64.0 * 64 * 260, attn2 = 0;
  for (int l = 0; l < 6; l++) {
    int g = l == 5;
    double hd = g ? 32 : 16, K = g ? 1 : 2, mult = g ? 1 : 2, t = 64, dd = 64;
    learn2 += 6 * t * 64 * dd + 2 * t * dd * 8 + 2 * 6 * t * 32 * dd;
    learn2 += 2 * t * dd * (4 + mult * K) * hd + 2 * t * dd * 4 * hd;
    attn2 += g ? 2 * t * t * 4 * hd : 4 * (t * 16 - 0.5 * 16 * 16) * 4 * hd;
  }
  ck_assert(fabs(f.learnable_tflops - 3 * learn2 / 1e12) < 1e-15);
  ck_assert(fabs(f.attention_tflops - 3 * attn2 / 1e12) < 1e-15);
}
END_TEST

START_TEST(test_moe_param_counts) {
  /* gemma4-26b by hand (HF tensors): embedding V d = 738197504 and the
   * final norm d; a local layer q,o 2*16*256*d, k,v 2*8*256*d, q/k norms
   * 2*256, the shared MLP 3*2112*d, 8 d-sized norms (input, post-attention,
   * pre/post-FFW, router scale, pre_2, post_1, post_2), layer_scalar 1, the
   * router E d + per_expert_scale E, experts E*2*704*d + E*d*704; a global
   * one q,o 2*16*512*d, k 2*512*d (K = V: no v), norms 2*512. Sum:
   * 25233141790 (25.2B). Active: each layer runs 8 of 128 experts, so
   * 30 * 120 * 3*704*d fewer: 3822530590 (3.8B), Gemma 4 26B A4B's figures. */
  gt_config c;
  const char *ov[] = {"model_name=gemma4-26b"};
  gt_test_config(&c, 1, ov);
  ck_assert_int_eq(gt_model_count_params(&c), 25233141790LL);
  ck_assert_int_eq(gt_model_count_active_params(&c), 3822530590LL);
  /* a dense model: active = total */
  const char *ov2[] = {"model_name=gemma4-31b"};
  gt_test_config(&c, 1, ov2);
  ck_assert_int_eq(gt_model_count_active_params(&c), gt_model_count_params(&c));
}
END_TEST

START_TEST(test_reads_the_layer_descriptors) {
  /* The FLOPs follow the model's descriptors, not a second reading of the
   * config: make layer 0 of gemma4-tiny-dense (a local, hd 16, 2 kv heads,
   * window 16) a KV-shared global and the count moves by exactly that. */
  gt_config c;
  gt_err e;
  const char *ov[] = {"model_name=gemma4-tiny-dense", "per_device_batch_size=1", "max_target_length=64"};
  ck_assert(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 3, ov, &e) == GT_OK);
  gt_model m;
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  gt_flops a = gt_flops_of_model(&m, &c), ref = gt_flops_per_step_per_device(&c);
  ck_assert(a.total_tflops == ref.total_tflops && a.attention_tflops == ref.attention_tflops);
  m.layers[0].kind = GT_LAYER_GLOBAL;
  m.layers[0].window = 0;
  m.layers[0].kv_donor = 5;
  gt_flops b = gt_flops_of_model(&m, &c);
  double T = 64, d = 64, H = 4, hd = 16, K = 2, W = 16;
  double dattn = 2 * T * T * H * hd - 4 * (T * W - 0.5 * W * W) * H * hd, dlearn = -2 * T * d * 2 * K * hd;
  ck_assert(fabs((b.attention_tflops - a.attention_tflops) - 3 * dattn / 1e12) < 1e-15);
  ck_assert(fabs((b.learnable_tflops - a.learnable_tflops) - 3 * dlearn / 1e12) < 1e-15);
  gt_model_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("flops");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_spec_worked_numbers);
  tcase_add_test(tc, test_hand_count_tiny);
  tcase_add_test(tc, test_dpo_reference_pass);
  tcase_add_test(tc, test_hand_count_gemma4);
  tcase_add_test(tc, test_hand_count_moe);
  tcase_add_test(tc, test_moe_param_counts);
  tcase_add_test(tc, test_reads_the_layer_descriptors);
  return gt_test_run_suite(s, 0);
}
