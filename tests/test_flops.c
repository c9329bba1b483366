/* MaxText's TFLOPs formula against the worked numbers of
 * ../shared/spec/gemma.md section 5.2 (B=1, T=2048) and a hand count. */
#include <check.h>
#include <math.h>

#include "gemtrain/config.h"
#include "gemtrain/flops.h"
#include "gt_testutil.h"

static gt_flops for_model(const char *name, int tl) {
  gt_config c;
  gt_err e;
  char mn[64], t[64];
  snprintf(mn, sizeof mn, "model_name=%s", name);
  snprintf(t, sizeof t, "max_target_length=%d", tl);
  const char *ov[] = {mn, "per_device_batch_size=1", t};
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 3, ov, &e) == GT_OK, "%s", e.msg);
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

int main(void) {
  Suite *s = suite_create("flops");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_spec_worked_numbers);
  tcase_add_test(tc, test_hand_count_tiny);
  tcase_add_test(tc, test_hand_count_gemma4);
  suite_add_tcase(s, tc);
  return gt_test_run_suite(s, 0);
}
