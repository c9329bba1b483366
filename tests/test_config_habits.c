/* Keys from other tools: MaxText keys with no effect here (accepted with a
 * note), MaxText keys of features gemtrain lacks (refused as such, accepted
 * only when they leave the feature off), Hugging Face Trainer names
 * (answered with gemtrain's name), MaxText's YAML config files (read into
 * the same configuration as the equal JSON file), and the overrides' source
 * in gt_ctx_configure's messages. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/yaml.h"
#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"

#define CFG_DIR GT_SOURCE_DIR "/configs"

static gt_rc load1(gt_config *c, const char *user, const char *ov, gt_err *e) {
  gt_err_clear(e);
  return gt_config_load(c, CFG_DIR, user, ov ? 1 : 0, ov ? &ov : NULL, e);
}

static char *write_file(const char *name, const char *text) {
  char *dir = gt_test_mkdtemp("habits");
  char *path = gt_test_path(dir, name);
  gt_test_write_text(path, text);
  free(dir);
  return path;
}

START_TEST(test_noop_keys_accepted_with_a_note) {
  gt_config c, plain;
  gt_err e;
  ck_assert_int_eq(load1(&plain, NULL, NULL, &e), GT_OK);
  ck_assert_str_eq(plain.notes, "");
  const char *ov[] = {"scan_layers=false", "attention=flash", "steps=3", "hardware=tpu"};
  gt_err_clear(&e);
  ck_assert_int_eq(gt_config_load(&c, CFG_DIR, NULL, 4, ov, &e), GT_OK);
  ck_assert_int_eq(c.steps, 3);
  /* one line per key, naming it */
  ck_assert_ptr_nonnull(strstr(c.notes, "'scan_layers' has no effect here"));
  ck_assert_ptr_nonnull(strstr(c.notes, "'attention' has no effect here"));
  ck_assert_ptr_nonnull(strstr(c.notes, "'hardware' has no effect here"));
  int lines = 0;
  for (const char *p = c.notes; *p; p++) lines += *p == '\n';
  ck_assert_int_eq(lines, 3);
  /* nothing else of the configuration moved */
  c.steps = plain.steps;
  char *a = gt_config_to_json(&c), *b = gt_config_to_json(&plain);
  ck_assert_str_eq(a, b);
  free(a), free(b);
}
END_TEST

START_TEST(test_unsupported_keys_refused_as_such) {
  gt_config c;
  gt_err e;
  static const char *on[][2] = {
      {"ici_tensor_parallelism=2", "tensor parallelism"},
      {"ici_pipeline_parallelism=4", "pipeline parallelism"},
      {"num_pipeline_microbatches=8", "pipeline parallelism"},
      {"ici_sequence_parallelism=2", "sequence parallelism"},
      {"quantization=int8", "quantized training"},
  };
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    ck_assert_int_eq(load1(&c, NULL, on[i][0], &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "does not support") && strstr(e.msg, on[i][1]), "%s: %s", on[i][0], e.msg);
    /* never a did-you-mean to another feature's key (ici_tensor_parallelism
     * is two edits from ici_expert_parallelism's neighbours) */
    ck_assert_msg(!strstr(e.msg, "did you mean"), "%s", e.msg);
  }
  /* the value that leaves the feature off (MaxText's default) is accepted */
  const char *off[] = {"ici_tensor_parallelism=1", "num_pipeline_microbatches=-1", "quantization=",
                       "dropout_rate=0.0", "use_multimodal=False"};
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    ck_assert_msg(load1(&c, NULL, off[i], &e) == GT_OK, "%s: %s", off[i], e.msg);
    ck_assert_ptr_nonnull(strstr(c.notes, "accepted and ignored"));
  }
}
END_TEST

START_TEST(test_hugging_face_names_suggested) {
  gt_config c;
  gt_err e;
  static const char *hf[][2] = {
      {"gradient_checkpointing=true", "remat_policy"}, {"weight_decay=0.1", "adam_weight_decay"},
      {"save_steps=50", "checkpoint_period"},          {"batch_size=4", "per_device_batch_size"},
      {"warmup_steps=10", "warmup_steps_fraction"},    {"num_train_epochs=3", "rows per epoch"},
      {"max_grad_norm=1", "gradient_clipping_threshold"},
  };
  for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
    ck_assert_int_eq(load1(&c, NULL, hf[i][0], &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "gemtrain's name for it is") && strstr(e.msg, hf[i][1]), "%s: %s", hf[i][0], e.msg);
  }
  /* an ordinary typo still gets the edit-distance guess */
  ck_assert_int_eq(load1(&c, NULL, "learning_rat=1", &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "did you mean 'learning_rate'"));
}
END_TEST

static const char yaml_text[] =
    "# MaxText-style\n"
    "base_config: \"base.yml\"\n"
    "model_name: gemma3-tiny   # a preset\n"
    "steps: 7\n"
    "learning_rate: 3.e-4\n"
    "enable_checkpointing: False\n"
    "scan_layers: True\n"
    "run_name: 'it''s \"here\"'\n"
    "dataset_path: \"a # not a comment\"\n"
    "trainable_parameters_mask:\n"
    "  - 'self_attn'\n"
    "  - norm\n"
    "logical_axis_rules: [\n"
    "    ['activation_batch', ['data', 'fsdp']],\n"
    "  ]\n"
    "ici_tensor_parallelism: 1\n"
    "sample_prompt:\n";

static const char json_text[] =
    "{\"model_name\": \"gemma3-tiny\", \"steps\": 7, \"learning_rate\": 3e-4, \"enable_checkpointing\": false,"
    " \"run_name\": \"it's \\\"here\\\"\", \"dataset_path\": \"a # not a comment\","
    " \"trainable_parameters_mask\": [\"self_attn\", \"norm\"], \"sample_prompt\": \"\"}";

START_TEST(test_yaml_reads_as_json) {
  char *y = write_file("maxtext.yml", yaml_text), *j = write_file("same.json", json_text);
  gt_config a, b;
  gt_err e;
  ck_assert_msg(load1(&a, y, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(load1(&b, j, NULL, &e) == GT_OK, "%s", e.msg);
  char *ta = gt_config_to_json(&a), *tb = gt_config_to_json(&b);
  ck_assert_str_eq(ta, tb);
  ck_assert_str_eq(a.run_name, "it's \"here\"");
  ck_assert_str_eq(a.trainable_parameters_mask, "self_attn norm");
  ck_assert_int_eq(a.steps, 7);
  ck_assert_ptr_nonnull(strstr(a.notes, "'logical_axis_rules'"));
  ck_assert_ptr_nonnull(strstr(a.notes, "'base_config'"));
  /* the user file's keys count as the user's, as from JSON */
  ck_assert_int_eq(gt_config_is_user_set(&a, "steps"), 1);
  free(ta), free(tb), free(y), free(j);
}
END_TEST

START_TEST(test_yaml_refusals_name_the_line) {
  static const char *bad[][2] = {
      {"steps: 3\n\tlearning_rate: 1\n", "line 2"},
      {"steps: 3\nrun_name: 'open\n", "line 2"},
      /* a backslash that ends a double-quoted value, mid-file and at the end */
      {"steps: 3\nrun_name: \"a\\\nb\"\n", "line 2: a quoted value has no closing quote"},
      {"steps: 3\nrun_name: \"a\\", "no closing quote"},
      {"steps: 3\nsteps: 4\n", "appears twice"},
      {"steps: 3\nlearning_rate: *anchor\n", "line 2"},
      {"steps: 3\n---\nsteps: 4\n", "a second document"},
      /* what YAML reads as structure is not taken as text */
      {"steps: 3\nrun_name: a: b\n", "line 2: a plain value with ': ' in it"},
      {"run_name: a:\n", "line 1: a plain value with ': ' in it or ':' at its end"},
      {"steps: 3\nrun_name: - foo\n", "line 2: a plain value starting with '- '"},
      {"run_name: -\n", "starting with '- '"},
      {"trainable_parameters_mask: [a: b]\n", "which YAML reads as a mapping"},
      /* after the end marker, only another document could follow */
      {"steps: 3\n...\nsteps: 4\n", "line 3: text after the document's end ('...')"},
      {"steps: 3\n...\n---\nsteps: 4\n", "line 3: a second document"},
      {"weight_decay: 0.1\n", "adam_weight_decay"},
      {"steps: [1, 2]\n", "number, string or boolean"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *p = write_file("bad.yaml", bad[i][0]);
    gt_config c;
    gt_err e;
    ck_assert_int_eq(load1(&c, p, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, bad[i][1]), "case %zu: %s", i, e.msg);
    free(p);
  }
}
END_TEST

START_TEST(test_yaml_parser_values) {
  const char *t = "a: 'x'' y' # c\nb: \"q\\\"r\\n\"\nc: [1, 'two', three ]\nd: ~\ne:\n  - 1\n  - '#2'\n";
  cJSON *o = NULL;
  gt_err e;
  ck_assert_int_eq(gt_config_parse_yaml(t, strlen(t), "t.yml", &o, &e), GT_OK);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "a")->valuestring, "x' y");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "b")->valuestring, "q\"r\n");
  cJSON *c = cJSON_GetObjectItem(o, "c");
  ck_assert_int_eq(cJSON_GetArraySize(c), 3);
  ck_assert_str_eq(cJSON_GetArrayItem(c, 1)->valuestring, "two");
  ck_assert_str_eq(cJSON_GetArrayItem(c, 2)->valuestring, "three");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "d")->valuestring, "");
  cJSON *l = cJSON_GetObjectItem(o, "e");
  ck_assert_int_eq(cJSON_GetArraySize(l), 2);
  ck_assert_str_eq(cJSON_GetArrayItem(l, 1)->valuestring, "#2");
  cJSON_Delete(o);
  /* an apostrophe inside a plain scalar opens no quote: the comment after
   * it is still a comment */
  const char *t2 = "run_name: bob's_run  # mine\nsample_prompt: It's \"here\" # c\nx: [a, 'b # c', d] # e\n";
  ck_assert_int_eq(gt_config_parse_yaml(t2, strlen(t2), "t2.yml", &o, &e), GT_OK);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "run_name")->valuestring, "bob's_run");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "sample_prompt")->valuestring, "It's \"here\"");
  c = cJSON_GetObjectItem(o, "x");
  ck_assert_int_eq(cJSON_GetArraySize(c), 3);
  ck_assert_str_eq(cJSON_GetArrayItem(c, 1)->valuestring, "b # c");
  cJSON_Delete(o);
  /* '...' ends the document, comments may follow; a colon without a blank
   * after it, a quoted ': ' and a negative number are plain text */
  const char *t3 = "run_name: 'a: b'\ndataset_path: http://x/y\nz: -1\nl: [-2, \"c: d\"]\n...\n# done\n...\n";
  ck_assert_msg(gt_config_parse_yaml(t3, strlen(t3), "t3.yml", &o, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "run_name")->valuestring, "a: b");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "dataset_path")->valuestring, "http://x/y");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "z")->valuestring, "-1");
  ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "l"), 1)->valuestring, "c: d");
  cJSON_Delete(o);
}
END_TEST

START_TEST(test_ctx_configure_names_its_overrides) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"stepz=3"};
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, ov), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "gt_ctx_configure") && !strstr(gt_ctx_error(c), "command line"), "%s",
                gt_ctx_error(c));
  gt_ctx_free(c);
}
END_TEST

Suite *habits_suite(void) {
  Suite *s = suite_create("config_habits");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_noop_keys_accepted_with_a_note);
  tcase_add_test(tc, test_unsupported_keys_refused_as_such);
  tcase_add_test(tc, test_hugging_face_names_suggested);
  tcase_add_test(tc, test_yaml_reads_as_json);
  tcase_add_test(tc, test_yaml_refusals_name_the_line);
  tcase_add_test(tc, test_yaml_parser_values);
  tcase_add_test(tc, test_ctx_configure_names_its_overrides);
  return s;
}

int main(void) { return gt_test_run_suite(habits_suite(), 0); }
