/* Config loader: precedence of every layer, every class of refusal (with its
 * message), round trip of the resolved config, and the presets' parameter
 * counts against ../shared/spec/gemma.md section 2. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemtrain/config.h"
#include "gemtrain/model.h"
#include "gt_testutil.h"

#define CFG_DIR GT_SOURCE_DIR "/configs"

static gt_rc load(gt_config *c, const char *user, int n, const char *const *ov, gt_err *e) {
  gt_err_clear(e);
  return gt_config_load(c, CFG_DIR, user, n, ov, e);
}

static char *write_tmp(const char *tag, const char *text) {
  char *dir = gt_test_mkdtemp(tag);
  char *path = NULL;
  ck_assert(asprintf(&path, "%s/user.json", dir) > 0);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  free(dir);
  return path;
}

/* ---- precedence ---- */

START_TEST(test_base_then_preset) {
  gt_config c;
  gt_err e;
  ck_assert_int_eq(load(&c, NULL, 0, NULL, &e), GT_OK);
  /* base.json names gemma3-small; its preset sets the dims */
  ck_assert_str_eq(c.model_name, "gemma3-small");
  ck_assert_int_eq(c.base_emb_dim, 256);
  /* a key only base.json sets keeps the base value */
  ck_assert(fabs(c.adam_b2 - 0.95) < 1e-12);
  ck_assert(fabs(c.adam_b1 - 0.9) < 1e-12);
}
END_TEST

START_TEST(test_every_layer_in_order) {
  gt_config c;
  gt_err e;
  /* preset (tiny: T=64) beats base (256) */
  const char *ov0[] = {"model_name=gemma3-tiny"};
  ck_assert_int_eq(load(&c, NULL, 1, ov0, &e), GT_OK);
  ck_assert_int_eq(c.max_target_length, 64);
  ck_assert_int_eq(c.base_emb_dim, 64);
  /* user file beats preset */
  char *user = write_tmp("cfg", "{\"max_target_length\": 32, \"learning_rate\": 0.5}");
  ck_assert_int_eq(load(&c, user, 1, ov0, &e), GT_OK);
  ck_assert_int_eq(c.max_target_length, 32);
  ck_assert(fabs(c.learning_rate - 0.5) < 1e-12);
  /* command line beats user file */
  const char *ov1[] = {"model_name=gemma3-tiny", "max_target_length=16"};
  ck_assert_int_eq(load(&c, user, 2, ov1, &e), GT_OK);
  ck_assert_int_eq(c.max_target_length, 16);
  ck_assert(fabs(c.learning_rate - 0.5) < 1e-12);
  free(user);
}
END_TEST

START_TEST(test_model_name_resolved_before_preset) {
  gt_config c;
  gt_err e;
  /* the user file picks 4b, the command line picks tiny: tiny's preset loads */
  char *user = write_tmp("cfg", "{\"model_name\": \"gemma3-4b\"}");
  const char *ov[] = {"model_name=gemma3-tiny"};
  ck_assert_int_eq(load(&c, user, 1, ov, &e), GT_OK);
  ck_assert_int_eq(c.base_emb_dim, 64);
  /* and with only the user file, 4b's preset loads */
  ck_assert_int_eq(load(&c, user, 0, NULL, &e), GT_OK);
  ck_assert_int_eq(c.base_emb_dim, 2560);
  ck_assert_int_eq(c.base_num_kv_heads, 4);
  free(user);
}
END_TEST

START_TEST(test_override_types) {
  gt_config c;
  gt_err e;
  const char *ov[] = {"steps=1e3", "dump_config=true", "dataset_type=synthetic", "run_name=x y",
                      "learning_rate=3e-4"};
  ck_assert_int_eq(load(&c, NULL, 5, ov, &e), GT_OK);
  ck_assert_int_eq(c.steps, 1000);
  ck_assert_int_eq(c.dump_config, 1);
  ck_assert_str_eq(c.dataset_type, "synthetic");
  ck_assert_str_eq(c.run_name, "x y");
  ck_assert(fabs(c.learning_rate - 3e-4) < 1e-15);
}
END_TEST

/* ---- refusals: each message names the key, the value and what is allowed ---- */

static void expect_refused(int n, const char *const *ov, const char *const *needles) {
  gt_config c;
  gt_err e;
  gt_rc rc = load(&c, NULL, n, ov, &e);
  ck_assert_int_eq(rc, GT_ERR_CONFIG);
  for (int i = 0; needles[i]; i++)
    ck_assert_msg(strstr(e.msg, needles[i]), "message '%s' lacks '%s'", e.msg, needles[i]);
  ck_assert(strchr(e.msg, '\n') == NULL); /* one line */
}

START_TEST(test_unknown_key_did_you_mean) {
  const char *ov[] = {"learnin_rate=0.1"};
  const char *want[] = {"unknown key 'learnin_rate'", "did you mean 'learning_rate'", NULL};
  expect_refused(1, ov, want);
  const char *ov2[] = {"per_device_batchsize=2"};
  const char *want2[] = {"did you mean 'per_device_batch_size'", NULL};
  expect_refused(1, ov2, want2);
  const char *ov3[] = {"zzzzqqq=1"};
  const char *want3[] = {"unknown key 'zzzzqqq'", "--help", NULL};
  expect_refused(1, ov3, want3);
}
END_TEST

START_TEST(test_wrong_types) {
  const char *a[] = {"steps=abc"};
  const char *wa[] = {"'steps'", "expects an integer", "'abc'", NULL};
  expect_refused(1, a, wa);
  const char *b[] = {"steps=2.5"};
  const char *wb[] = {"'steps'", "integer", "'2.5'", NULL};
  expect_refused(1, b, wb);
  const char *c[] = {"learning_rate=fast"};
  const char *wc[] = {"'learning_rate'", "expects a number", "'fast'", NULL};
  expect_refused(1, c, wc);
  const char *d[] = {"dump_config=maybe"};
  const char *wd[] = {"'dump_config'", "true or false", "'maybe'", NULL};
  expect_refused(1, d, wd);
  const char *f[] = {"dataset_type=csv"};
  const char *wf[] = {"'dataset_type'", "'csv'", "allowed: synthetic, text, tokens", NULL};
  expect_refused(1, f, wf);
  const char *g[] = {"steps"};
  const char *wg[] = {"'steps'", "not key=value", NULL};
  expect_refused(1, g, wg);
}
END_TEST

START_TEST(test_out_of_range) {
  const char *a[] = {"steps=0"};
  const char *wa[] = {"'steps' = 0", "out of range", "allowed: 1 ..", NULL};
  expect_refused(1, a, wa);
  const char *b[] = {"adam_b1=1.5"};
  const char *wb[] = {"'adam_b1' = 1.5", "out of range", "allowed: 0 .. 0.999999999", NULL};
  expect_refused(1, b, wb);
  const char *c[] = {"eval_split_fraction=0.9"};
  const char *wc[] = {"'eval_split_fraction'", "allowed: 0 .. 0.5", NULL};
  expect_refused(1, c, wc);
}
END_TEST

START_TEST(test_inconsistent_combinations) {
  const char *a[] = {"base_num_kv_heads=3"};
  const char *wa[] = {"'base_num_kv_heads' = 3", "base_num_query_heads = 4", "multiple", NULL};
  expect_refused(1, a, wa);
  const char *b[] = {"num_devices=4", "ici_data_parallelism=3", "ici_fsdp_parallelism=1"};
  const char *wb[] = {"3 x 1 = 3", "'num_devices' = 4", "must equal num_devices", NULL};
  expect_refused(3, b, wb);
  const char *b2[] = {"num_devices=4", "ici_data_parallelism=3"};
  const char *wb2[] = {"'ici_data_parallelism' = 3", "num_devices = 4", NULL};
  expect_refused(2, b2, wb2);
  const char *b3[] = {"ici_data_parallelism=-1", "ici_fsdp_parallelism=-1"};
  const char *wb3[] = {"both -1", NULL};
  expect_refused(2, b3, wb3);
  const char *c[] = {"per_device_batch_size=1", "max_target_length=100", "num_vocab_tiling=8"};
  const char *wc[] = {"'num_vocab_tiling' = 8", "1 x 100 = 100 tokens", NULL};
  expect_refused(3, c, wc);
  const char *d[] = {"per_device_batch_size=0.5"};
  const char *wd[] = {"'per_device_batch_size' = 0.5", "whole number", NULL};
  expect_refused(1, d, wd);
  const char *e[] = {"layer_pattern=LLXG"};
  const char *we[] = {"'layer_pattern' = 'LLXG'", "'X'", "L (local) and G (global)", NULL};
  expect_refused(1, e, we);
  const char *f[] = {"head_dim=7"};
  const char *wf[] = {"'head_dim' = 7", "even", NULL};
  expect_refused(1, f, wf);
  const char *g[] = {"dataset_type=tokens", "dataset_path="};
  const char *wg[] = {"'dataset_path'", "tokens", NULL};
  expect_refused(2, g, wg);
}
END_TEST

START_TEST(test_unknown_preset_and_bad_files) {
  const char *a[] = {"model_name=gemma3-5b"};
  const char *wa[] = {"'model_name' = 'gemma3-5b'", "no preset", "gemma3-4b", NULL};
  expect_refused(1, a, wa);
  gt_config c;
  gt_err e;
  char *bad = write_tmp("cfg", "{\"steps\": 10,\n \"learning_rate\": }");
  ck_assert_int_eq(load(&c, bad, 0, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "not valid JSON") && strstr(e.msg, bad) && strstr(e.msg, "line 2"),
                "%s", e.msg);
  free(bad);
  char *unk = write_tmp("cfg", "{\"stepz\": 10}");
  ck_assert_int_eq(load(&c, unk, 0, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "unknown key 'stepz'") && strstr(e.msg, unk) &&
                    strstr(e.msg, "did you mean 'steps'"),
                "%s", e.msg);
  free(unk);
  ck_assert_int_eq(load(&c, "/nonexistent/x.json", 0, NULL, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "/nonexistent/x.json"), "%s", e.msg);
  /* a base.json that misses a key is refused, naming the key */
  char *dir = gt_test_mkdtemp("cfgdir");
  ck_assert_int_eq(gt_test_system("grep -v '\"adam_b2\"' %s/base.json > %s/base.json", CFG_DIR, dir), 0);
  gt_err_clear(&e);
  ck_assert_int_eq(gt_config_load(&c, dir, NULL, 0, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "does not set key 'adam_b2'"), "%s", e.msg);
  free(dir);
}
END_TEST

/* ---- round trip ---- */

START_TEST(test_round_trip) {
  gt_config a, b;
  gt_err e;
  const char *ov[] = {"model_name=gemma3-27b", "learning_rate=1.25e-4", "run_name=rt",
                      "per_device_batch_size=2", "max_target_length=1024", "dump_config=true"};
  ck_assert_int_eq(load(&a, NULL, 6, ov, &e), GT_OK);
  char *dir = gt_test_mkdtemp("rt");
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  ck_assert_int_eq(gt_config_write_json(&a, path, &e), GT_OK);
  ck_assert_int_eq(load(&b, path, 0, NULL, &e), GT_OK);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  /* and every key appears in the file */
  char *text = gt_test_read_file(path, NULL);
  for (int i = 0; i < gt_config_num_keys(); i++) {
    char q[128];
    snprintf(q, sizeof q, "\"%s\":", gt_config_key_at(i)->name);
    ck_assert_msg(strstr(text, q), "%s missing", q);
  }
  free(text);
  free(dir);
}
END_TEST

START_TEST(test_every_key_documented) {
  for (int i = 0; i < gt_config_num_keys(); i++) {
    const gt_key_spec *k = gt_config_key_at(i);
    ck_assert_msg(k->desc && strlen(k->desc) > 8, "key %s has no description", k->name);
    ck_assert_ptr_eq(gt_config_key(k->name), k);
  }
}
END_TEST

/* ---- presets ---- */

static void check_preset(const char *name, double billions) {
  gt_config c;
  gt_err e;
  char ov[96];
  snprintf(ov, sizeof ov, "model_name=%s", name);
  const char *o[] = {ov};
  ck_assert_msg(load(&c, NULL, 1, o, &e) == GT_OK, "%s: %s", name, e.msg);
  int64_t n = gt_model_count_params(&c);
  double got = (double)n / 1e9;
  ck_assert_msg(fabs(got - billions) / billions < 1e-3, "%s: %.4fB parameters, spec says %.3fB", name,
                got, billions);
}

START_TEST(test_presets_param_counts) {
  /* ../shared/spec/gemma.md section 2, "params, text only (V=262144)" */
  check_preset("gemma3-270m", 0.268);
  check_preset("gemma3-1b", 1.000);
  check_preset("gemma3-4b", 3.880);
  check_preset("gemma3-12b", 11.766);
  check_preset("gemma3-27b", 27.009);
}
END_TEST

START_TEST(test_preset_exact_4b_and_structure) {
  gt_config c;
  gt_err e;
  const char *o[] = {"model_name=gemma3-4b"};
  ck_assert_int_eq(load(&c, NULL, 1, o, &e), GT_OK);
  /* by hand: V*d + L*(2 d H hd + 2 d K hd + 3 d F + 4 d + 2 hd) + d */
  int64_t d = 2560, H = 8, K = 4, hd = 256, F = 10240, L = 34, V = 262144;
  int64_t want = V * d + L * (2 * d * H * hd + 2 * d * K * hd + 3 * d * F + 4 * d + 2 * hd) + d;
  ck_assert_int_eq(gt_model_count_params(&c), want);
  ck_assert_int_eq(want, 3880099328LL);
  gt_model m;
  ck_assert_int_eq(gt_model_build(&m, &c, &e), GT_OK);
  int nglob = 0;
  for (int l = 0; l < m.n_layers; l++) {
    ck_assert_int_eq(m.layers[l].kind == GT_LAYER_GLOBAL, l % 6 == 5);
    nglob += m.layers[l].kind == GT_LAYER_GLOBAL;
    ck_assert_int_eq(m.layers[l].window, l % 6 == 5 ? 0 : 1024);
  }
  ck_assert_int_eq(nglob, 5);
  /* two RoPE tables: local base 1e4 unscaled, global 1e6 scaled by 8 */
  ck_assert_int_eq(m.n_rope, 2);
  gt_rope_desc lr = m.rope[m.layers[0].rope], gr = m.rope[m.layers[5].rope];
  ck_assert(lr.base == 1e4 && lr.scale == 1.0);
  ck_assert(gr.base == 1e6 && gr.scale == 8.0);
  ck_assert(fabsf(m.layers[0].q_scale - 1.0f / 16.0f) < 1e-7f);
  const gt_tensor_info *t = gt_model_find_tensor(&m, "layers.33.self_attn.k_proj.weight");
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->shape[0], 1024);
  ck_assert_int_eq(t->shape[1], 2560);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_27b_query_scale) {
  gt_config c;
  gt_err e;
  const char *o[] = {"model_name=gemma3-27b"};
  ck_assert_int_eq(load(&c, NULL, 1, o, &e), GT_OK);
  gt_model m;
  ck_assert_int_eq(gt_model_build(&m, &c, &e), GT_OK);
  ck_assert(fabsf(m.layers[0].q_scale - (float)(1.0 / sqrt(168.0))) < 1e-7f);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_small_presets_same_structure) {
  const char *names[] = {"gemma3-tiny", "gemma3-small"};
  for (int i = 0; i < 2; i++) {
    gt_config c;
    gt_err e;
    char ov[64];
    snprintf(ov, sizeof ov, "model_name=%s", names[i]);
    const char *o[] = {ov};
    ck_assert_int_eq(load(&c, NULL, 1, o, &e), GT_OK);
    ck_assert_str_eq(c.layer_pattern, "LLLLLG");
    ck_assert_int_eq(c.base_num_decoder_layers, 6);
    ck_assert(c.rope_max_timescale == 1e6 && c.local_rope_max_timescale == 1e4);
    ck_assert(c.sliding_window_size < c.max_target_length);
  }
}
END_TEST

Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_base_then_preset);
  tcase_add_test(tc, test_every_layer_in_order);
  tcase_add_test(tc, test_model_name_resolved_before_preset);
  tcase_add_test(tc, test_override_types);
  tcase_add_test(tc, test_unknown_key_did_you_mean);
  tcase_add_test(tc, test_wrong_types);
  tcase_add_test(tc, test_out_of_range);
  tcase_add_test(tc, test_inconsistent_combinations);
  tcase_add_test(tc, test_unknown_preset_and_bad_files);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_every_key_documented);
  tcase_add_test(tc, test_presets_param_counts);
  tcase_add_test(tc, test_preset_exact_4b_and_structure);
  tcase_add_test(tc, test_27b_query_scale);
  tcase_add_test(tc, test_small_presets_same_structure);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return gt_test_run_suite(config_suite(), 0);
}
