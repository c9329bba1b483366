/* The fit search (train/fit.h): its suggestion is planned and fits, and no
 * setting it ranks that fits is faster by its own estimate (every setting
 * planned here, none skipped); the recomputation it counts, against the
 * forward FLOPs of the layers and hand-counted projections; and the sizes
 * memory_limit_bytes reads. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "model/flops.h"
#include "train/fit.h"
#include "train/plan.h"
#include "gt_testutil.h"

static void load(gt_config *c, int n, const char *const *ov) {
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, n, ov, &e) == GT_OK, "%s", e.msg);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A small model whose logits matter (vocab 4096) at 4 x 128 tokens: every
 * setting is planned; for limits between the least and the most any of
 * them needs, the search's answer fits (planned again on its own) and no
 * setting that fits ranks before it. Below the least, nothing is found. */
START_TEST(test_suggestion_fits_and_is_fastest) {
  const char *ov[] = {"model_name=gemma3-tiny", "vocab_size=4096", "max_target_length=128", "per_device_batch_size=4",
                      "dataset_type=synthetic", "remat_policy=full"};
  gt_config base;
  load(&base, 6, ov);
  gt_err e;
  gt_fit_setting *s;
  int n;
  ck_assert_msg(gt_fit_settings(&base, &s, &n, &e) == GT_OK, "%s", e.msg);
  /* 2 moments x 18 remat choices x (3 micro-batch sizes x 9 tilings, but
   * 256 tiles do not divide one sequence's 128 rows) */
  ck_assert_int_eq(n, 2 * 18 * (3 * 9 - 1));
  int64_t *need = malloc(sizeof *need * (size_t)n), *sorted = malloc(sizeof *sorted * (size_t)n);
  gt_config *cfg = malloc(sizeof *cfg);
  for (int i = 0; i < n; i++) {
    ck_assert_msg(gt_fit_setting_config(&base, &s[i], cfg, &e) == GT_OK, "%s", e.msg);
    gt_plan p;
    ck_assert_msg(gt_plan_compute(&p, cfg, &e) == GT_OK, "%s", e.msg);
    need[i] = sorted[i] = gt_plan_total_bytes(&p);
    gt_plan_free(&p);
    if (i) ck_assert_int_le(gt_fit_cmp(&s[i - 1], &s[i]), 0); /* ranked fastest first */
  }
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_i64);
  ck_assert_int_lt(sorted[0], sorted[n - 1]);
  gt_fit *f = malloc(sizeof *f);
  int answers = 0;
  for (int q = 1; q <= 7; q++) {
    int64_t limit = sorted[(size_t)n * (size_t)q / 8];
    ck_assert_msg(gt_fit_search(&base, limit, f, &e) == GT_OK, "%s", e.msg);
    ck_assert_msg(f->found, "limit %lld: nothing found (%s)", (long long)limit, f->why);
    gt_plan p;
    ck_assert_msg(gt_plan_compute(&p, &f->cfg, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_le(gt_plan_total_bytes(&p), limit);
    ck_assert_int_eq(gt_plan_total_bytes(&p), f->need_bytes);
    gt_plan_free(&p);
    ck_assert_int_lt(f->n_planned, n); /* the point of ruling out: not everything */
    for (int i = 0; i < n; i++) {
      if (need[i] > limit) continue;
      ck_assert_msg(s[i].tflops >= f->best.tflops * (1 - 1e-9), "limit %lld: setting %d fits at %.6f TFLOPs < %.6f",
                    (long long)limit, i, s[i].tflops, f->best.tflops);
      ck_assert_msg(gt_fit_cmp(&s[i], &f->best) >= 0, "limit %lld: setting %d fits and ranks before the answer",
                    (long long)limit, i);
    }
    answers += f->n_set > 0;
  }
  ck_assert_int_ge(answers, 6); /* the limits are below the fastest setting's need but one, at most */
  /* below everything: not found, and the least need is the least of all */
  ck_assert_msg(gt_fit_search(&base, sorted[0] - 1, f, &e) == GT_OK, "%s", e.msg);
  ck_assert(!f->found);
  ck_assert_int_eq(f->need_bytes, sorted[0]);
  ck_assert_msg(strstr(f->why, "the least memory searched is") && strstr(f->why, "parameters, gradients and AdamW moments"),
                "%s", f->why);
  free(f);
  free(cfg);
  free(need);
  free(sorted);
  free(s);
}
END_TEST

/* The state alone over the limit: said so, with the moment's dtype. */
START_TEST(test_state_alone_exceeds) {
  const char *ov[] = {"model_name=gemma3-small", "dataset_type=synthetic"};
  gt_config base;
  load(&base, 2, ov);
  gt_err e;
  gt_fit f;
  ck_assert_msg(gt_fit_search(&base, 1 << 20, &f, &e) == GT_OK, "%s", e.msg);
  ck_assert(!f.found);
  ck_assert_msg(strstr(f.why, "parameters, gradients and AdamW moments alone are") &&
                    strstr(f.why, "(with mu_dtype=bfloat16)"),
                "%s", f.why);
  /* the state with a bf16 first moment: 4 + 4 + 2 + 4 bytes a parameter */
  gt_plan p;
  ck_assert_msg(gt_plan_compute(&p, &base, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.fixed_bytes, p.n_params * 14);
  gt_plan_free(&p);
}
END_TEST

/* What each policy recomputes: full re-runs every layer's forward (the
 * count flops.c makes of it, Gemma 3 and 4, dense and MoE); none nothing;
 * minimal_with_context keeps q and k only after their norms, so the two
 * projections run again; minimal also drops the context: attention too.
 * Block scope adds no product (only a layer output, a residual). */
static double recompute_with(const char *model, const char *policy, const char *scope, int lora) {
  char m[64], p[64], s[64];
  snprintf(m, sizeof m, "model_name=%s", model);
  snprintf(p, sizeof p, "remat_policy=%s", policy);
  snprintf(s, sizeof s, "remat_scope=%s", scope);
  const char *ov[] = {m, p, s, "dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=64",
                      "gradient_accumulation_steps=1", "enable_lora=true", "lora_rank=4"};
  gt_config c;
  load(&c, lora ? 9 : 7, ov);
  return gt_fit_recompute_tflops(&c);
}
static double recompute(const char *model, const char *policy, const char *scope) {
  return recompute_with(model, policy, scope, 0);
}

START_TEST(test_recompute_flops) {
  const char *models[] = {"gemma3-tiny", "gemma4-tiny-ple", "gemma4-tiny-dense", "gemma4-tiny-moe"};
  for (int i = 0; i < 4; i++) {
    char m[64];
    snprintf(m, sizeof m, "model_name=%s", models[i]);
    const char *ov[] = {m, "dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=64"};
    gt_config c;
    load(&c, 4, ov);
    double fwd = gt_flops_per_step_per_device(&c).layers_forward_tflops;
    ck_assert(fwd > 0);
    double full = recompute(models[i], "full", "layer");
    ck_assert_msg(fabs(full - fwd) <= 1e-12 * fwd, "%s: full recomputes %.9g, the layers' forward is %.9g", models[i],
                  full, fwd);
    ck_assert(recompute(models[i], "none", "layer") == 0);
    ck_assert(recompute(models[i], "none", "block") == 0);
    /* with adapters the layers' forward runs their products too */
    const char *lov[] = {m, "dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=64",
                         "enable_lora=true", "lora_rank=4"};
    load(&c, 6, lov);
    double lfwd = gt_flops_per_step_per_device(&c).layers_forward_tflops, lfull = recompute_with(models[i], "full", "layer", 1);
    ck_assert(lfwd > fwd);
    ck_assert_msg(fabs(lfull - lfwd) <= 1e-12 * lfwd, "%s with adapters: full recomputes %.9g, the layers' forward is %.9g",
                  models[i], lfull, lfwd);
  }
  /* gemma3-tiny: d 64, 4 query heads and 2 kv heads of 16, 6 layers (5 local
   * of window 16, 1 global), at 2 x 64 tokens */
  double N = 2 * 64, qk = 2 * N * 64 * (4 + 2) * 16 * 6;
  double attn = 5 * gt_flops_attention_forward(2, 64, 4, 16, 16) + gt_flops_attention_forward(2, 64, 4, 16, 0);
  double mwc = recompute("gemma3-tiny", "minimal_with_context", "layer") * 1e12;
  ck_assert_msg(fabs(mwc - qk) <= 1e-9 * qk, "minimal_with_context: %.9g, want %.9g", mwc, qk);
  /* rank-4 adapters on q and k add 2 N r (in + out) each */
  double qk_lora = qk + 2 * N * 4 * ((64 + 4 * 16) + (64 + 2 * 16)) * 6;
  double mwcl = recompute_with("gemma3-tiny", "minimal_with_context", "layer", 1) * 1e12;
  ck_assert_msg(fabs(mwcl - qk_lora) <= 1e-9 * qk_lora, "minimal_with_context with adapters: %.9g, want %.9g", mwcl,
                qk_lora);
  double mn = recompute("gemma3-tiny", "minimal", "layer") * 1e12;
  ck_assert_msg(fabs(mn - (qk + attn)) <= 1e-9 * mn, "minimal: %.9g, want %.9g", mn, qk + attn);
  ck_assert(recompute("gemma3-tiny", "minimal", "block") == recompute("gemma3-tiny", "minimal", "layer"));
  ck_assert(recompute("gemma3-tiny", "full", "block") == recompute("gemma3-tiny", "full", "layer"));
}
END_TEST

/* Micro-batches keep the global batch: every size the search offers has
 * per_device_batch_size x gradient_accumulation_steps of the base, and the
 * same step FLOPs before recomputation. */
START_TEST(test_micro_batches_keep_the_batch) {
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "per_device_batch_size=6",
                      "gradient_accumulation_steps=2", "remat_policy=none"};
  gt_config base, c;
  load(&base, 5, ov);
  gt_err e;
  gt_fit_setting *s;
  int n;
  ck_assert_msg(gt_fit_settings(&base, &s, &n, &e) == GT_OK, "%s", e.msg);
  double want = gt_flops_per_step_per_device(&base).total_tflops;
  int ga_seen[13] = {0};
  for (int i = 0; i < n; i++) {
    ck_assert_msg(gt_fit_setting_config(&base, &s[i], &c, &e) == GT_OK, "%s", e.msg);
    ck_assert(fabs(c.per_device_batch_size * (double)c.gradient_accumulation_steps - 12) < 1e-12);
    ck_assert(fabs(s[i].tflops - s[i].recompute_tflops - want) <= 1e-9 * want);
    if (c.gradient_accumulation_steps <= 12) ga_seen[c.gradient_accumulation_steps] = 1;
  }
  /* 6 sequences split 1, 2, 3 and 6 ways */
  for (int k = 1; k <= 6; k++) ck_assert_int_eq(ga_seen[2 * k], k == 1 || k == 2 || k == 3 || k == 6);
  free(s);
}
END_TEST

static long long size_of(const char *text, gt_rc *rc) {
  gt_config c;
  load(&c, 0, NULL);
  gt_err e;
  *rc = gt_config_set(&c, "memory_limit_bytes", text, "the test", &e);
  return c.memory_limit_bytes;
}

START_TEST(test_memory_limit_sizes) {
  const struct {
    const char *text;
    long long bytes;
  } ok[] = {{"24GiB", 25769803776LL}, {"24gib", 25769803776LL}, {"24 GiB", 25769803776LL},
            {"1.5GiB", 1610612736LL}, {"512MiB", 536870912LL},  {"64KiB", 65536LL},
            {"1TiB", 1099511627776LL}, {"24GB", 24000000000LL},  {"500MB", 500000000LL},
            {"64kB", 64000LL},         {"2TB", 2000000000000LL}, {"12345", 12345LL},
            {"100B", 100LL},           {"1e6", 1000000LL},       {"0", 0LL}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    gt_rc rc;
    long long b = size_of(ok[i].text, &rc);
    ck_assert_msg(rc == GT_OK, "'%s' refused", ok[i].text);
    ck_assert_msg(b == ok[i].bytes, "'%s' read as %lld, want %lld", ok[i].text, b, ok[i].bytes);
  }
  const char *bad[] = {"24XB", "GiB", "-1GiB", "0x10", "1.5B", "24 GiBs", "", "010GiB", "24G", "1.0000000001KiB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gt_rc rc;
    size_of(bad[i], &rc);
    ck_assert_msg(rc == GT_ERR_CONFIG, "'%s' accepted", bad[i]);
  }
  /* a config file's string and number */
  gt_config c;
  gt_err e;
  load(&c, 0, NULL);
  ck_assert_msg(gt_config_apply_json_text(&c, "{\"memory_limit_bytes\": \"2GiB\"}", "json", &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c.memory_limit_bytes, 2147483648LL);
  ck_assert_msg(gt_config_apply_json_text(&c, "{\"memory_limit_bytes\": 1000}", "json", &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c.memory_limit_bytes, 1000);
  /* the refusal names the forms */
  load(&c, 0, NULL);
  ck_assert(gt_config_set(&c, "memory_limit_bytes", "24XB", "the test", &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "memory_limit_bytes") && strstr(e.msg, "24GiB") && strstr(e.msg, "'24XB'"), "%s", e.msg);
}
END_TEST

/* Without load_parameters_path the source step changes nothing. */
START_TEST(test_apply_source_without_path) {
  gt_config c, before;
  load(&c, 0, NULL);
  before = c;
  gt_err e;
  ck_assert_msg(gt_plan_apply_source(&c, &e) == GT_OK, "%s", e.msg);
  ck_assert(!memcmp(&c, &before, sizeof c));
}
END_TEST

int main(void) {
  Suite *s = suite_create("fit");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_suggestion_fits_and_is_fastest);
  tcase_add_test(tc, test_state_alone_exceeds);
  tcase_add_test(tc, test_recompute_flops);
  tcase_add_test(tc, test_micro_batches_keep_the_batch);
  tcase_add_test(tc, test_memory_limit_sizes);
  tcase_add_test(tc, test_apply_source_without_path);
  return gt_test_run_suite(s, 0);
}
