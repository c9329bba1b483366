/* Config loader: precedence of every layer, every class of refusal (with its
 * message), round trip of the resolved config, and the presets' parameter
 * counts against the Gemma spec (kept outside the repository), section 2. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "model/model.h"
#include "gt_testutil.h"

#define CFG_DIR GT_SOURCE_DIR "/configs"

static gt_rc load(gt_config *c, const char *user, int n, const char *const *ov, gt_err *e) {
  gt_err_clear(e);
  return gt_config_load(c, CFG_DIR, user, n, ov, e);
}

static char *write_tmp(const char *tag, const char *text) {
  char *dir = gt_test_mkdtemp(tag);
  char *path = gt_test_path(dir, "user.json");
  gt_test_write_text(path, text);
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
  const char *wb[] = {"3 x 1 x 1 = 3", "'num_devices' = 4", "must equal num_devices", NULL};
  expect_refused(3, b, wb);
  const char *b2[] = {"num_devices=4", "ici_data_parallelism=3"};
  const char *wb2[] = {"'ici_data_parallelism' = 3", "num_devices = 4", NULL};
  expect_refused(2, b2, wb2);
  const char *b3[] = {"ici_data_parallelism=-1", "ici_fsdp_parallelism=-1"};
  const char *wb3[] = {"both -1", NULL};
  expect_refused(2, b3, wb3);
  /* the expert axis: a third mesh axis, and MoE's own refusals */
  const char *x1[] = {"model_name=gemma4-tiny-moe", "num_devices=4", "ici_expert_parallelism=3"};
  const char *wx1[] = {"'ici_expert_parallelism' = 3", "num_devices = 4", NULL};
  expect_refused(3, x1, wx1);
  const char *x2[] = {"model_name=gemma4-tiny-moe", "num_devices=3", "ici_expert_parallelism=3"};
  const char *wx2[] = {"'ici_expert_parallelism' = 3", "num_experts = 8", NULL};
  expect_refused(3, x2, wx2);
  const char *x3[] = {"model_name=gemma4-tiny-moe", "num_experts_per_tok=9"};
  const char *wx3[] = {"'num_experts_per_tok' = 9", "num_experts = 8", NULL};
  expect_refused(2, x3, wx3);
  const char *x4[] = {"model_name=gemma3-tiny", "num_experts=4"};
  const char *wx4[] = {"'num_experts' = 4", "decoder_block = 'gemma3'", NULL};
  expect_refused(2, x4, wx4);
  const char *x5[] = {"model_name=gemma4-tiny-dense", "num_devices=2", "ici_expert_parallelism=2"};
  const char *wx5[] = {"'ici_expert_parallelism' = 2", "num_experts = 0", NULL};
  expect_refused(3, x5, wx5);
  const char *x6[] = {"model_name=gemma4-tiny-moe", "base_moe_mlp_dim=0"};
  const char *wx6[] = {"'base_moe_mlp_dim' = 0", NULL};
  expect_refused(2, x6, wx6);
  const char *x7[] = {"model_name=gemma4-tiny-moe", "num_devices=4", "ici_fsdp_parallelism=-1", "ici_expert_parallelism=-1"};
  const char *wx7[] = {"both -1", NULL};
  expect_refused(4, x7, wx7);
  const char *x8[] = {"model_name=gemma4-tiny-moe", "gradient_accumulation_steps=2"};
  const char *wx8[] = {"'gradient_accumulation_steps' = 2", NULL};
  expect_refused(2, x8, wx8);
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
  /* settings under which training silently does nothing, or a key nothing reads */
  const char *h1[] = {"enable_lora=true", "lora_alpha=0"};
  const char *wh1[] = {"'lora_alpha' = 0", "never move", NULL};
  expect_refused(2, h1, wh1);
  const char *h2[] = {"use_dpo=true", "dpo_beta=0"};
  const char *wh2[] = {"'dpo_beta' = 0", "every gradient", NULL};
  expect_refused(2, h2, wh2);
  const char *h3[] = {"use_dpo=true", "preference_algo=orpo", "dpo_reference_path=/nonexistent"};
  const char *wh3[] = {"'dpo_reference_path' = '/nonexistent'", "preference_algo = 'orpo'", NULL};
  expect_refused(3, h3, wh3);
  const char *h4[] = {"dpo_reference_path=/nonexistent"};
  const char *wh4[] = {"'dpo_reference_path'", "use_dpo = false", NULL};
  expect_refused(1, h4, wh4);
  const char *h5[] = {"sliding_window_size=4294967312"};
  const char *wh5[] = {"'sliding_window_size'", "4294967312", NULL};
  expect_refused(1, h5, wh5);
  gt_config ok;
  gt_err er;
  const char *fine[] = {"use_dpo=true", "preference_algo=orpo", "dpo_beta=0"}; /* ORPO reads no beta */
  ck_assert_msg(load(&ok, NULL, 3, fine, &er) == GT_OK, "%s", er.msg);
}
END_TEST

START_TEST(test_gemma4_refusals) {
  /* a Gemma 4 key on a Gemma 3 decoder */
  const char *a[] = {"model_name=gemma3-tiny", "hidden_size_per_layer_input=8"};
  const char *wa[] = {"'hidden_size_per_layer_input' is a Gemma 4 setting", "decoder_block = 'gemma3'", NULL};
  expect_refused(2, a, wa);
  /* every layer shared */
  const char *b[] = {"model_name=gemma4-tiny-dense", "num_kv_shared_layers=6"};
  const char *wb[] = {"'num_kv_shared_layers' = 6", "below base_num_decoder_layers = 6", NULL};
  expect_refused(2, b, wb);
  /* the one global layer shared: no earlier global to take K/V from */
  const char *c[] = {"model_name=gemma4-tiny-dense", "num_kv_shared_layers=1"};
  const char *wc[] = {"'num_kv_shared_layers' = 1", "shared global layer 5", "'LLLLLG'", NULL};
  expect_refused(2, c, wc);
  const char *d[] = {"model_name=gemma4-tiny-dense", "global_num_kv_heads=3"};
  const char *wd[] = {"'global_num_kv_heads' = 3", "base_num_query_heads = 4", NULL};
  expect_refused(2, d, wd);
  const char *e[] = {"model_name=gemma4-tiny-ple", "vocab_size_per_layer_input=100"};
  const char *we[] = {"'vocab_size_per_layer_input' = 100", "vocab_size = 260", NULL};
  expect_refused(2, e, we);
  const char *f[] = {"decoder_block=gemma5"};
  const char *wf[] = {"'decoder_block' = 'gemma5'", "gemma3, gemma4, gemma4_small", NULL};
  expect_refused(1, f, wf);
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

/* ---- inputs that used to be taken wrongly ---- */

START_TEST(test_directory_where_a_file_is_expected) {
  /* a directory was read with malloc(ftell() + 1): ASan aborted on a 2^63
   * byte request, a release build said "no memory" */
  gt_config c;
  gt_err e;
  char *dir = gt_test_mkdtemp("cfgisdir");
  ck_assert_int_eq(load(&c, dir, 0, NULL, &e), GT_ERR_IO);
  char want[600];
  snprintf(want, sizeof want, "'%s' is a directory, expected a file", dir);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  /* the same for a preset: configs/models/<model_name>.json a directory */
  ck_assert_int_eq(gt_test_system("cp %s/base.json %s/ && mkdir -p %s/models/dirpreset.json", CFG_DIR, dir, dir), 0);
  const char *ov[] = {"model_name=dirpreset"};
  gt_err_clear(&e);
  ck_assert_int_eq(gt_config_load(&c, dir, NULL, 1, ov, &e), GT_ERR_IO);
  snprintf(want, sizeof want, "'%s/models/dirpreset.json' is a directory, expected a file", dir);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(test_fifo_config_is_read) {
  /* a pipe has no size: it is read to its end, not by ftell (which gave -1
   * and ignored the content) */
  char *dir = gt_test_mkdtemp("cfgfifo");
  char *fifo = gt_test_path(dir, "user.json");
  ck_assert_int_eq(gt_test_system("mkfifo %s && (printf '{\"steps\": 7, \"learning_rate\": 0.125}' > %s &)", fifo,
                                  fifo),
                   0);
  gt_config c;
  gt_err e;
  ck_assert_msg(load(&c, fifo, 0, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c.steps, 7);
  ck_assert(c.learning_rate == 0.125);
  gt_test_rm_rf(dir);
  free(fifo);
  free(dir);
}
END_TEST

START_TEST(test_duplicate_json_key) {
  /* cJSON keeps both members and the last one won silently */
  gt_config c;
  gt_err e;
  char *dup = write_tmp("cfgdup", "{\"steps\": 5,\n \"learning_rate\": 0.1,\n \"steps\": 6}");
  ck_assert_int_eq(load(&c, dup, 0, NULL, &e), GT_ERR_CONFIG);
  char want[600];
  snprintf(want, sizeof want, "key 'steps' appears twice in '%s'", dup);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  free(dup);
  /* and in JSON text applied by a caller (a sweep point) */
  ck_assert_int_eq(load(&c, NULL, 0, NULL, &e), GT_OK);
  ck_assert_int_eq(gt_config_apply_json_text(&c, "{\"steps\": 3, \"steps\": 4}", "point 2", &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'steps' appears twice in point 2"), "%s", e.msg);
}
END_TEST

START_TEST(test_numbers_are_decimal) {
  /* strtod read steps=0x10 as 16 */
  const char *a[] = {"steps=0x10"};
  const char *wa[] = {"key 'steps' expects a decimal integer, got '0x10' (in the command line)", NULL};
  expect_refused(1, a, wa);
  const char *b[] = {"learning_rate=0x1p-4"};
  const char *wb[] = {"key 'learning_rate' expects a decimal number, got '0x1p-4'", NULL};
  expect_refused(1, b, wb);
  const char *c[] = {"steps=010"};
  const char *wc[] = {"key 'steps'", "'010'", "leading zero", NULL};
  expect_refused(1, c, wc);
  const char *d[] = {"steps=-0X1"};
  const char *wd[] = {"key 'steps'", "'-0X1'", "decimal", NULL};
  expect_refused(1, d, wd);
  const char *f[] = {"learning_rate=infinity"};
  const char *wf[] = {"key 'learning_rate'", "'infinity'", NULL};
  expect_refused(1, f, wf);
  /* every decimal form still reads */
  gt_config cfg;
  gt_err e;
  const char *ok[] = {"steps=1e3", "learning_rate=-0.0", "adam_eps=1E-8", "warmup_steps_fraction=0.25",
                      "init_weights_seed=0", "gradient_clipping_threshold=.5", "adam_b1=+0.5", "max_target_length=2048.0"};
  ck_assert_msg(load(&cfg, NULL, 8, ok, &e) == GT_OK, "%s", e.msg);
  ck_assert(cfg.steps == 1000 && cfg.adam_eps == 1e-8 && cfg.gradient_clipping_threshold == 0.5 &&
            cfg.adam_b1 == 0.5 && cfg.max_target_length == 2048);
  /* a string in a JSON file is checked the same way */
  char *hex = write_tmp("cfghex", "{\"steps\": \"0x10\"}");
  ck_assert_int_eq(load(&cfg, hex, 0, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'0x10'") && strstr(e.msg, "decimal") && strstr(e.msg, hex), "%s", e.msg);
  free(hex);
}
END_TEST

START_TEST(test_run_name_stays_inside) {
  /* run_name=../../x wrote outside base_output_directory */
  const char *bad[] = {"../../x", "a/b", "..", ".", "/tmp/x", "x/"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char ov[64];
    snprintf(ov, sizeof ov, "run_name=%s", bad[i]);
    const char *a[] = {ov};
    char named[64];
    snprintf(named, sizeof named, "key 'run_name' = '%s'", bad[i]);
    const char *wa[] = {named, "one directory inside base_output_directory", NULL};
    expect_refused(1, a, wa);
  }
  gt_config c;
  gt_err e;
  const char *ok[] = {"run_name=..x.y"};
  ck_assert_msg(load(&c, NULL, 1, ok, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.run_name, "..x.y");
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
  memcpy(b.user_set, a.user_set, sizeof a.user_set); /* b's file set every key, a's command line six */
  /* all but dump_config, which the file says false: the dump of a
   * configuration, given back as its config file, trains */
  ck_assert_int_eq(a.dump_config, 1);
  ck_assert_int_eq(b.dump_config, 0);
  b.dump_config = 1;
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
  /* the Gemma spec, section 2, "params, text only (V=262144)" */
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
  gt_test_model_build(&m, &c);
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

/* Gemma 4 parameters by hand from spec 3.1-3.5 (the spec gives no totals):
 *   embedding V*d and the final norm d;
 *   PLE: table V*(L*P), projection (L*P)*d, its norm P;
 *   each layer: input, post-attention, pre-FFW, post-FFW norms (4d, and a
 *   fifth, post_per_layer_input_norm, with PLE), q_norm hd, q_proj and o_proj
 *   2*d*H*hd, MLP 3*d*F, PLE gate and projection 2*P*d, layer_scalar 1;
 *   layers with their own K/V add k_proj d*K*hd, v_proj d*K*hd (not with
 *   K=V) and k_norm hd. Globals use hd_g and K_g; shared layers (the last
 *   n_shared) own no K/V and use 2F with the double-wide MLP. */
static int64_t g4_count(int64_t V, int64_t d, int64_t H, int64_t K, int64_t Kg, int64_t hd, int64_t hdg, int64_t F,
                        int64_t L, int period, int64_t P, int64_t n_shared, int wide, int k_eq_v) {
  int64_t n = V * d + d + (P ? V * L * P + L * P * d + P : 0);
  for (int64_t l = 0; l < L; l++) {
    int g = l % period == period - 1, own = l < L - n_shared;
    int64_t h = g ? hdg : hd, k = g ? Kg : K, f = wide && !own ? 2 * F : F;
    n += (P ? 5 : 4) * d + h + 2 * d * H * h + 3 * d * f + 2 * P * d + 1;
    if (own) n += d * k * h * (g && k_eq_v ? 1 : 2) + h;
  }
  return n;
}

START_TEST(test_gemma4_presets_param_counts) {
  struct {
    const char *name;
    int64_t want, by_hand;
  } p[] = {
      /* e2b: 402,653,184 embedding + 2,362,573,056 PLE (table 2,348,810,240,
       * projection 13,762,560, norm 256) + 35 layers (15 with their own K/V,
       * 20 shared with F = 12288; globals 4, 9, ..., 34 with hd 512) */
      {"gemma4-e2b", 4628569379LL, g4_count(262144, 1536, 8, 1, 1, 256, 512, 6144, 35, 5, 256, 20, 1, 0)},
      {"gemma4-e4b", 7463013418LL, g4_count(262144, 2560, 8, 2, 2, 256, 512, 10240, 42, 6, 256, 18, 0, 0)},
      /* 31b: 1,409,286,144 embedding; globals K=V with 4 kv heads of 512 */
      {"gemma4-31b", 30697345340LL, g4_count(262144, 5376, 32, 16, 4, 256, 512, 21504, 60, 6, 0, 0, 0, 1)},
      {"gemma4-tiny-dense", 245798LL, g4_count(260, 64, 4, 2, 1, 16, 32, 128, 6, 6, 0, 0, 0, 1)},
      {"gemma4-tiny-ple", 427074LL, g4_count(260, 64, 4, 1, 1, 16, 32, 96, 10, 5, 8, 4, 1, 0)},
  };
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
    gt_config c;
    gt_err e;
    char ov[96];
    snprintf(ov, sizeof ov, "model_name=%s", p[i].name);
    const char *o[] = {ov};
    ck_assert_msg(load(&c, NULL, 1, o, &e) == GT_OK, "%s: %s", p[i].name, e.msg);
    ck_assert_int_eq(p[i].by_hand, p[i].want);
    ck_assert_msg(gt_model_count_params(&c) == p[i].want, "%s: %lld parameters, by hand %lld", p[i].name,
                  (long long)gt_model_count_params(&c), (long long)p[i].want);
  }
}
END_TEST

START_TEST(test_gemma4_e2b_structure) {
  /* spec 3.1, 3.5: 4 local + 1 global, globals hd 512 with 1 kv head and
   * partial RoPE (1e6, a quarter), locals 1e4 full; layers 15..34 share,
   * local donor 13, global donor 14; F doubles on the shared layers */
  gt_config c;
  gt_err e;
  const char *o[] = {"model_name=gemma4-e2b"};
  ck_assert_int_eq(load(&c, NULL, 1, o, &e), GT_OK);
  gt_model m;
  gt_test_model_build(&m, &c);
  for (int l = 0; l < 35; l++) {
    const gt_layer_desc *L = &m.layers[l];
    int g = l % 5 == 4;
    ck_assert_int_eq(L->kind == GT_LAYER_GLOBAL, g);
    ck_assert_int_eq(L->head_dim, g ? 512 : 256);
    ck_assert_int_eq(L->n_kv_heads, 1);
    ck_assert_int_eq(L->window, g ? 0 : 512);
    ck_assert_int_eq(L->kv_donor, l < 15 ? -1 : g ? 14 : 13);
    ck_assert_int_eq(L->mlp_dim, l < 15 ? 6144 : 12288);
    ck_assert(L->q_scale == 1.0f && !L->k_eq_v && L->ple_dim == 256);
    gt_rope_desc r = m.rope[L->rope];
    ck_assert(g ? (r.base == 1e6 && r.fraction == 0.25 && r.head_dim == 512)
                : (r.base == 1e4 && r.fraction == 1.0 && r.head_dim == 256));
  }
  ck_assert_int_eq(m.layers[13].kv_last_reader, 33);
  ck_assert_int_eq(m.layers[14].kv_last_reader, 34);
  const gt_tensor_info *t = gt_model_find_tensor(&m, "embed_tokens_per_layer.weight");
  ck_assert(t && t->shape[0] == 262144 && t->shape[1] == 35 * 256);
  ck_assert(m.softcap == 30.0f && m.norm_offset == 0.0f);
  gt_model_free(&m);
  /* 31b: K = V on globals, which have 4 kv heads and no v_proj */
  const char *o2[] = {"model_name=gemma4-31b"};
  ck_assert_int_eq(load(&c, NULL, 1, o2, &e), GT_OK);
  gt_test_model_build(&m, &c);
  ck_assert(m.layers[5].k_eq_v && m.layers[5].n_kv_heads == 4 && !m.layers[4].k_eq_v && m.layers[4].n_kv_heads == 16);
  ck_assert_ptr_null(gt_model_find_tensor(&m, "layers.5.self_attn.v_proj.weight"));
  ck_assert_ptr_nonnull(gt_model_find_tensor(&m, "layers.4.self_attn.v_proj.weight"));
  t = gt_model_find_tensor(&m, "layers.5.self_attn.k_proj.weight");
  ck_assert(t && t->shape[0] == 4 * 512 && t->shape[1] == 5376);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_27b_query_scale) {
  gt_config c;
  gt_err e;
  const char *o[] = {"model_name=gemma3-27b"};
  ck_assert_int_eq(load(&c, NULL, 1, o, &e), GT_OK);
  gt_model m;
  gt_test_model_build(&m, &c);
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
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_base_then_preset);
  tcase_add_test(tc, test_every_layer_in_order);
  tcase_add_test(tc, test_model_name_resolved_before_preset);
  tcase_add_test(tc, test_override_types);
  tcase_add_test(tc, test_unknown_key_did_you_mean);
  tcase_add_test(tc, test_wrong_types);
  tcase_add_test(tc, test_out_of_range);
  tcase_add_test(tc, test_inconsistent_combinations);
  tcase_add_test(tc, test_unknown_preset_and_bad_files);
  tcase_add_test(tc, test_directory_where_a_file_is_expected);
  tcase_add_test(tc, test_fifo_config_is_read);
  tcase_add_test(tc, test_duplicate_json_key);
  tcase_add_test(tc, test_numbers_are_decimal);
  tcase_add_test(tc, test_run_name_stays_inside);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_every_key_documented);
  tcase_add_test(tc, test_presets_param_counts);
  tcase_add_test(tc, test_gemma4_presets_param_counts);
  tcase_add_test(tc, test_gemma4_e2b_structure);
  tcase_add_test(tc, test_gemma4_refusals);
  tcase_add_test(tc, test_preset_exact_4b_and_structure);
  tcase_add_test(tc, test_27b_query_scale);
  tcase_add_test(tc, test_small_presets_same_structure);
  return s;
}

int main(void) {
  return gt_test_run_suite(config_suite(), 0);
}
