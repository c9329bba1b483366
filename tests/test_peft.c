/* PEFT adapter directories (src/hf/peft.h): PEFT's tensor names for the
 * causal and the multimodal Gemma classes, adapter_config.json's fields as
 * PEFT's LoraConfig names them, target_modules as a list and as an
 * expression that chooses exactly the adapted modules, a directory written
 * then read back into a fresh model bit for bit (its keys taken into the
 * config), every refusal (PEFT options gemtrain does not implement, keys
 * that disagree, tensors whose names or shapes disagree with the model),
 * the merged HF export against W + scale * B A computed here in double, and
 * the tokenizer files and generation_config.json beside an export.
 *
 * The model's adapters are the lora_A / lora_B tensors the model builder
 * lays out for enable_lora (model/lora.h). */
#define _GNU_SOURCE
#include <check.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "hf/hf.h"
#include "hf/model_source.h"
#include "exec/exec.h"
#include "hf/peft.h"
#include "kernels/quant.h"
#include "gt_testutil.h"

/* ---- a model with adapters ---- */

static int matches(const char *re, const char *name) {
  regex_t r;
  ck_assert_int_eq(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
  int ok = regexec(&r, name, 0, NULL, 0) == 0;
  regfree(&r);
  return ok;
}

/* The projections gemtrain adapts (peft.h's list). */
static int adaptable(const gt_tensor_info *t) {
  static const char *const kinds[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                      "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                      "mlp.down_proj.weight",    "per_layer_input_gate.weight",
                                      "per_layer_projection.weight"};
  if (t->layer < 0 || t->ndim != 2) return 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    size_t a = strlen(t->name), b = strlen(kinds[i]);
    if (a > b && !strcmp(t->name + a - b, kinds[i]) && t->name[a - b - 1] == '.') return 1;
  }
  return 0;
}

/* cfg (gemma3-tiny unless model is given) with adapters of rank r on the
 * projections `modules` chooses, random weights and adapters. */
static void lora_model(gt_model *m, gt_config *c, gt_mem *mem, const char *model, const char *modules, int r,
                       uint64_t seed) {
  char mn[64], mp[600], rk[32];
  snprintf(mn, sizeof mn, "model_name=%s", model ? model : "gemma3-tiny");
  snprintf(mp, sizeof mp, "lora_module_path=%s", modules);
  snprintf(rk, sizeof rk, "lora_rank=%d", r);
  const char *ov[] = {mn, mp, rk, "lora_alpha=24"};
  gt_test_config(c, 4, ov);
  c->enable_lora = 1;
  gt_test_model_build(m, c);
  ck_assert_int_gt(gt_peft_count(m), 0);
  gt_err e;
  ck_assert_msg(gt_model_alloc_inference(m, mem, &e) == GT_OK, "%s", e.msg);
  uint64_t st = seed;
  gt_test_fill(m->params, m->n_params, &st, -0.5f, 0.5f);
}

static char *read_json(const char *dir, const char *name) {
  char *p = gt_test_path(dir, name);
  char *s = gt_test_read_file(p, NULL);
  ck_assert_msg(s != NULL, "%s missing", p);
  free(p);
  return s;
}

/* ---- names ---- */

START_TEST(test_names) {
  char out[300];
  gt_peft_tensor_name("layers.3.self_attn.q_proj.lora_A.weight", gt_peft_hf_prefix("Gemma3ForCausalLM"), out,
                      sizeof out);
  ck_assert_str_eq(out, "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight");
  gt_peft_tensor_name("layers.0.mlp.down_proj.lora_B.weight", gt_peft_hf_prefix("Gemma3ForConditionalGeneration"),
                      out, sizeof out);
  ck_assert_str_eq(out, "base_model.model.model.language_model.layers.0.mlp.down_proj.lora_B.weight");
  ck_assert_str_eq(gt_peft_hf_prefix("Gemma4ForConditionalGeneration"), "model.language_model.");
  ck_assert_str_eq(gt_peft_hf_prefix("Gemma4ForCausalLM"), "model.");
  ck_assert_str_eq(gt_peft_hf_prefix(""), "model.");
  /* back, from each prefix, and from PEFT's in-memory names */
  const char *in[] = {"base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight",
                      "base_model.model.model.language_model.layers.3.self_attn.q_proj.lora_A.weight",
                      "base_model.model.language_model.model.layers.3.self_attn.q_proj.lora_A.weight",
                      "base_model.model.model.layers.3.self_attn.q_proj.lora_A.default.weight"};
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(gt_peft_parse_name(in[i], out, sizeof out), 1);
    ck_assert_str_eq(out, "layers.3.self_attn.q_proj.lora_A.weight");
  }
  /* transformers' own adapter integration saves without the root */
  ck_assert_int_eq(gt_peft_parse_name("model.layers.3.self_attn.q_proj.lora_A.weight", out, sizeof out), 1);
  ck_assert_str_eq(out, "layers.3.self_attn.q_proj.lora_A.weight");
  ck_assert_int_eq(gt_peft_parse_name("lm_head.lora_A.weight", out, sizeof out), 0);
  ck_assert_int_eq(gt_peft_parse_name("base_model.model.vision_tower.x.lora_A.weight", out, sizeof out), 0);
  char base[200];
  int is_b = -1;
  ck_assert_int_eq(gt_peft_is_adapter("layers.3.mlp.up_proj.lora_B.weight", base, sizeof base, &is_b), 1);
  ck_assert_str_eq(base, "layers.3.mlp.up_proj.weight");
  ck_assert_int_eq(is_b, 1);
  ck_assert_int_eq(gt_peft_is_adapter("layers.3.mlp.up_proj.lora_A.weight", base, sizeof base, &is_b), 1);
  ck_assert_int_eq(is_b, 0);
  ck_assert_int_eq(gt_peft_is_adapter("layers.3.mlp.up_proj.weight", NULL, 0, NULL), 0);
  /* the scale */
  gt_config c;
  gt_test_config(&c, 0, NULL);
  c.lora_rank = 16, c.lora_alpha = 32, c.lora_use_rslora = 0;
  ck_assert(gt_peft_scale(&c) == 2.0);
  c.lora_use_rslora = 1;
  ck_assert(gt_peft_scale(&c) == 8.0);
}
END_TEST

/* ---- writing ---- */

/* A base tensor trained beside the adapters (here the norms, by
 * trainable_parameters_mask) would be lost in a PEFT directory of the
 * adapters alone: the export is refused, naming the tensor and the way
 * out, and writes nothing. */
START_TEST(test_write_refuses_trained_base) {
  const char *ov[] = {"model_name=gemma3-tiny", "lora_module_path=self_attn\\.q_proj", "lora_rank=2",
                      "trainable_parameters_mask=norm"};
  gt_config c;
  gt_test_config(&c, 4, ov);
  c.enable_lora = 1;
  gt_model m;
  gt_test_model_build(&m, &c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_err e;
  ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
  char *dir = gt_test_dir_path("trained_base");
  gt_err_clear(&e);
  ck_assert_int_eq(gt_peft_write(&m, m.params, &c, NULL, dir, NULL, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "norm") && strstr(e.msg, "trained in full beside the adapters") &&
                    strstr(e.msg, "convert to_hf"),
                "%s", e.msg);
  char *p = gt_test_path(dir, "adapter_config.json");
  ck_assert_msg(access(p, F_OK) != 0, "%s written", p);
  free(p);
  free(dir);
  gt_model_free(&m);
}
END_TEST

START_TEST(test_write_fields) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_config c;
  lora_model(&m, &c, &mem, NULL, "self_attn\\.(q|v)_proj", 4, 1);
  char *dir = gt_test_dir_path("w1");
  gt_peft_write_opts o = {"model.", "/models/gemma-3-tiny"};
  gt_err e;
  int n = 0;
  ck_assert_msg(gt_peft_write(&m, m.params, &c, &o, dir, &n, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(n, 4 * (int)m.n_layers);
  char *js = read_json(dir, "adapter_config.json");
  cJSON *j = cJSON_Parse(js);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "peft_type")->valuestring, "LORA");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "task_type")->valuestring, "CAUSAL_LM");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "bias")->valuestring, "none");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "base_model_name_or_path")->valuestring, "/models/gemma-3-tiny");
  ck_assert_int_eq(cJSON_GetObjectItem(j, "r")->valueint, 4);
  /* LoraConfig's lora_alpha is an int: written without a decimal point */
  ck_assert_ptr_nonnull(strstr(js, "\"lora_alpha\":\t24,"));
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "use_dora")));
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "use_rslora")));
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "fan_in_fan_out")));
  ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "modules_to_save")));
  const cJSON *tm = cJSON_GetObjectItem(j, "target_modules");
  ck_assert(cJSON_IsArray(tm));
  ck_assert_int_eq(cJSON_GetArraySize(tm), 2);
  ck_assert_str_eq(cJSON_GetArrayItem(tm, 0)->valuestring, "q_proj");
  ck_assert_str_eq(cJSON_GetArrayItem(tm, 1)->valuestring, "v_proj");
  cJSON_Delete(j);
  free(js);
  /* the safetensors: PEFT's names, [r, in] and [out, r], float32, the tensors as they are */
  char *wp = gt_test_path(dir, "adapter_model.safetensors");
  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, wp, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.n_tensors, n);
  ck_assert_ptr_nonnull(f.metadata_json);
  ck_assert_ptr_nonnull(strstr(f.metadata_json, "\"format\":\"pt\""));
  const gt_st_tensor *a = gt_st_find(&f, "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight");
  const gt_st_tensor *b = gt_st_find(&f, "base_model.model.model.layers.2.self_attn.q_proj.lora_B.weight");
  const gt_tensor_info *wq = gt_model_find_tensor(&m, "layers.2.self_attn.q_proj.weight");
  const gt_tensor_info *ta = gt_model_find_tensor(&m, "layers.2.self_attn.q_proj.lora_A.weight");
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(a->dtype, GT_DT_F32);
  ck_assert_int_eq(a->shape[0], 4);
  ck_assert_int_eq(a->shape[1], wq->shape[1]);
  ck_assert_int_eq(b->shape[0], wq->shape[0]);
  ck_assert_int_eq(b->shape[1], 4);
  float *got = gt_test_st_f32(&f, a->name, ta->numel);
  ck_assert(gt_test_same_bits(got, m.params + ta->offset, ta->numel));
  free(got);
  ck_assert_ptr_null(gt_st_find(&f, "base_model.model.model.layers.2.self_attn.k_proj.lora_A.weight"));
  gt_st_close(&f);
  free(wp);
  free(dir);
  gt_model_free(&m);
}
END_TEST

/* The expression form: adapters on some layers only, and a multimodal
 * prefix; checked as Python's re.fullmatch reads it (the whole module name;
 * the syntax used is the same in POSIX ERE) against every module. */
START_TEST(test_write_regex_targets) {
  for (int multimodal = 0; multimodal < 2; multimodal++) {
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model m;
    gt_config c;
    lora_model(&m, &c, &mem, NULL, "layers\\.(0|2|3)\\.self_attn\\.o_proj|layers\\.[13]\\.mlp\\.down_proj", 2, 2);
    char *dir = gt_test_dir_path(multimodal ? "w3" : "w2");
    const char *prefix = multimodal ? "model.language_model." : "model.";
    gt_peft_write_opts o = {prefix, NULL};
    gt_err e;
    ck_assert_msg(gt_peft_write(&m, m.params, &c, &o, dir, NULL, &e) == GT_OK, "%s", e.msg);
    char *js = read_json(dir, "adapter_config.json");
    cJSON *j = cJSON_Parse(js);
    const cJSON *tm = cJSON_GetObjectItem(j, "target_modules");
    ck_assert_msg(cJSON_IsString(tm), "%s", js);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "base_model_name_or_path")));
    char re[4096];
    snprintf(re, sizeof re, "^(%s)$", tm->valuestring);
    int hits = 0;
    for (int i = 0; i < m.n_tensors; i++) {
      const gt_tensor_info *t = &m.tensors[i];
      if (gt_peft_is_adapter(t->name, NULL, 0, NULL) || strlen(t->name) < 8) continue;
      char key[200];
      snprintf(key, sizeof key, "%s%.*s", prefix, (int)(strlen(t->name) - 7), t->name); /* the module, no .weight */
      const gt_tensor_info *a, *b;
      gt_peft_pair(&m, t, &a, &b);
      ck_assert_msg(matches(re, key) == (a != NULL), "target_modules '%s' on '%s'", tm->valuestring, key);
      hits += a != NULL;
    }
    ck_assert_int_eq(hits, 5);
    /* a vision tower's module of the same name is not chosen */
    ck_assert(!matches(re, "model.vision_tower.vision_model.encoder.layers.0.self_attn.o_proj"));
    cJSON_Delete(j);
    free(js);
    free(dir);
    gt_model_free(&m);
  }
}
END_TEST

/* ---- reading ---- */

/* Written, then read into a fresh model of a config that names none of
 * the adapter keys: they come from the directory, the module expression
 * chooses exactly the written projections, the tensors are bit-identical. */
START_TEST(test_roundtrip) {
  const char *cases[][2] = {{NULL, "self_attn\\.(q|k|v|o)_proj|mlp\\.(gate|up|down)_proj"},
                            {NULL, "layers\\.(0|5)\\.mlp\\.up_proj|layers\\.2\\.self_attn\\.k_proj"},
                            {"gemma4-tiny-ple", "per_layer_(input_gate|projection)|self_attn\\.q_proj"}};
  for (int k = 0; k < 3; k++) {
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model m;
    gt_config c;
    lora_model(&m, &c, &mem, cases[k][0], cases[k][1], 3, 10 + k);
    c.lora_use_rslora = k == 1;
    c.lora_dropout = 0.05;
    char name[16];
    snprintf(name, sizeof name, "rt%d", k);
    char *dir = gt_test_dir_path(name);
    gt_err e;
    ck_assert_msg(gt_peft_write(&m, m.params, &c, NULL, dir, NULL, &e) == GT_OK, "%s", e.msg);
    /* a config with base.json's adapter keys (rank 16, alpha 32, every projection) */
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", cases[k][0] ? cases[k][0] : "gemma3-tiny");
    const char *ov[] = {mn};
    gt_config c2;
    gt_test_config(&c2, 1, ov);
    ck_assert_msg(gt_peft_apply_config(dir, &c2, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(c2.enable_lora, 1);
    ck_assert_int_eq(c2.lora_rank, 3);
    ck_assert(c2.lora_alpha == 24);
    ck_assert_int_eq(c2.lora_use_rslora, k == 1);
    ck_assert(c2.lora_dropout == 0.05);
    /* the expression chooses what was written, and nothing else */
    for (int i = 0; i < m.n_tensors; i++) {
      const gt_tensor_info *t = &m.tensors[i];
      if (!adaptable(t)) continue;
      const gt_tensor_info *a, *b;
      gt_peft_pair(&m, t, &a, &b);
      ck_assert_msg(matches(c2.lora_module_path, t->name) == (a != NULL), "'%s' on %s", c2.lora_module_path, t->name);
    }
    gt_model m2;
    gt_test_model_build(&m2, &c2);
    ck_assert_int_gt(gt_peft_count(&m2), 0);
    ck_assert_int_eq(m2.n_params, m.n_params);
    ck_assert_msg(gt_model_alloc_inference(&m2, &mem, &e) == GT_OK, "%s", e.msg);
    memset(m2.params, 0, (size_t)m2.n_params * sizeof(float));
    int n = 0;
    ck_assert_msg(gt_peft_load(dir, &m2, m2.params, &n, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(n, 2 * gt_peft_count(&m));
    for (int i = 0; i < m.n_tensors; i++) {
      const gt_tensor_info *t = &m.tensors[i], *t2 = gt_model_find_tensor(&m2, t->name);
      ck_assert_ptr_nonnull(t2);
      if (gt_peft_is_adapter(t->name, NULL, 0, NULL))
        ck_assert_msg(gt_test_same_bits(m.params + t->offset, m2.params + t2->offset, t->numel), "%s", t->name);
      else
        ck_assert(gt_test_max_abs(m2.params + t2->offset, t->numel) == 0); /* the base is not the adapters' */
    }
    gt_model_free(&m2);
    gt_model_free(&m);
    free(dir);
  }
}
END_TEST

/* A written directory with one field of adapter_config.json replaced. */
static char *dir_with(const char *tag, const char *key, const char *value_json) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_config c;
  lora_model(&m, &c, &mem, NULL, "self_attn\\.q_proj", 2, 5);
  char *dir = gt_test_dir_path(tag);
  gt_err e;
  ck_assert_msg(gt_peft_write(&m, m.params, &c, NULL, dir, NULL, &e) == GT_OK, "%s", e.msg);
  gt_model_free(&m);
  if (key) {
    char *js = read_json(dir, "adapter_config.json");
    cJSON *j = cJSON_Parse(js);
    cJSON_DeleteItemFromObject(j, key);
    cJSON_AddItemToObject(j, key, cJSON_Parse(value_json));
    char *s = cJSON_Print(j);
    char *p = gt_test_path(dir, "adapter_config.json");
    gt_test_write_text(p, s);
    free(p), free(s), free(js);
    cJSON_Delete(j);
  }
  return dir;
}

static void expect_refused(const char *dir, const char *want1, const char *want2) {
  gt_config c;
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_test_config(&c, 1, ov);
  gt_err e;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_peft_apply_config(dir, &c, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)), "message: %s", e.msg);
  ck_assert_ptr_null(strchr(e.msg, '\n'));
}

START_TEST(test_refuse_options) {
  const char *cases[][4] = {
      {"use_dora", "true", "use_dora = true", "does not implement"},
      {"bias", "\"lora_only\"", "bias = \"lora_only\"", "expected \"none\""},
      {"bias", "\"all\"", "bias = \"all\"", NULL},
      {"modules_to_save", "[\"lm_head\"]", "modules_to_save = [\"lm_head\"]", NULL},
      {"rank_pattern", "{\"q_proj\": 8}", "rank_pattern", NULL},
      {"alpha_pattern", "{\"q_proj\": 8}", "alpha_pattern", NULL},
      {"layers_to_transform", "[0, 1]", "layers_to_transform = [0,1]", NULL},
      {"layers_pattern", "\"layers\"", "layers_pattern", NULL},
      {"fan_in_fan_out", "true", "fan_in_fan_out = true", NULL},
      {"lora_bias", "true", "lora_bias", NULL},
      {"layer_replication", "[[0, 2]]", "layer_replication", NULL},
      {"init_lora_weights", "\"pissa\"", "init_lora_weights = \"pissa\"", "base weights"},
      {"init_lora_weights", "\"olora\"", "olora", NULL},
      {"trainable_token_indices", "[5]", "trainable_token_indices", NULL},
      {"target_parameters", "[\"experts.gate_up_proj\"]", "target_parameters", NULL},
      {"use_qalora", "true", "use_qalora", NULL},
      {"peft_type", "\"LOHA\"", "peft_type \"LOHA\"", "LORA adapters only"},
      {"task_type", "\"SEQ_CLS\"", "task_type \"SEQ_CLS\"", NULL},
      {"r", "0", "r = 0", NULL},
      {"init_lora_weights", "\"corda\"", "corda", "base weights"},
      {"init_lora_weights", "\"fancy\"", "fancy", "does not know"},
      {"loftq_config", "{\"loftq_bits\": 4}", "loftq_config", NULL},
      /* options PEFT added later: applied only after an invocation
       * sequence; not known here at all */
      {"alora_invocation_tokens", "[1, 2]", "alora_invocation_tokens = [1,2]", "does not know"},
      {"some_future_option", "\"on\"", "some_future_option", "does not know"},
      {"use_rslora", "\"true\"", "use_rslora = \"true\"", "true or false"},
      {"lora_dropout", "\"0.1\"", "lora_dropout = \"0.1\"", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char tag[32];
    snprintf(tag, sizeof tag, "opt%zu", i);
    char *dir = dir_with(tag, cases[i][0], cases[i][1]);
    expect_refused(dir, cases[i][2], cases[i][3]);
    free(dir);
  }
  /* what PEFT writes by default is accepted: empty patterns, nulls, true init, gaussian */
  const char *fine[][2] = {{"rank_pattern", "{}"},
                           {"modules_to_save", "null"},
                           {"init_lora_weights", "\"gaussian\""},
                           {"init_lora_weights", "\"orthogonal\""},
                           {"init_lora_weights", "\"eva\""},
                           {"layers_to_transform", "null"},
                           {"use_dora", "false"},
                           {"exclude_modules", "[\"x\"]"},
                           {"qalora_group_size", "16"},
                           {"peft_version", "\"0.17.1\""},
                           {"loftq_config", "{}"},
                           {"alora_invocation_tokens", "null"},
                           {"some_future_option", "false"}};
  for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
    char tag[32];
    snprintf(tag, sizeof tag, "fine%zu", i);
    char *dir = dir_with(tag, fine[i][0], fine[i][1]);
    gt_config c;
    const char *ov[] = {"model_name=gemma3-tiny"};
    gt_test_config(&c, 1, ov);
    gt_err e;
    ck_assert_msg(gt_peft_apply_config(dir, &c, &e) == GT_OK, "%s: %s", fine[i][0], e.msg);
    free(dir);
  }
}
END_TEST

/* Keys set explicitly that disagree with the directory, one line each. */
START_TEST(test_refuse_keys) {
  char *dir = dir_with("keys", NULL, NULL); /* r 2, alpha 24 */
  const char *cases[][2] = {{"lora_rank=8", "key 'lora_rank' = 8 is set explicitly"},
                            {"lora_alpha=16", "holds lora_alpha = 24"},
                            {"lora_use_rslora=true", "use_rslora = false"},
                            {"enable_lora=false", "enable_lora"}};
  for (int i = 0; i < 4; i++) {
    const char *ov[] = {"model_name=gemma3-tiny", cases[i][0]};
    gt_config c;
    gt_test_config(&c, 2, ov);
    gt_err e;
    ck_assert_int_eq(gt_peft_apply_config(dir, &c, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, cases[i][1]) != NULL, "%s: %s", cases[i][0], e.msg);
  }
  /* the same values given explicitly are fine */
  const char *ov[] = {"model_name=gemma3-tiny", "lora_rank=2", "lora_alpha=24"};
  gt_config c;
  gt_test_config(&c, 3, ov);
  gt_err e;
  ck_assert_msg(gt_peft_apply_config(dir, &c, &e) == GT_OK, "%s", e.msg);
  free(dir);
}
END_TEST

/* Tensors that disagree with the model: another module set, another base
 * (shapes), a rank that is not r, a tensor gemtrain does not read. */
START_TEST(test_refuse_tensors) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_err e;
  char *dir = dir_with("tens", NULL, NULL); /* q_proj of every layer, r 2 */
  /* a model adapting k_proj too (lora_module_path set explicitly) */
  {
    gt_model m;
    gt_config c;
    lora_model(&m, &c, &mem, NULL, "self_attn\\.(q|k)_proj", 2, 3);
    ck_assert_int_eq(gt_peft_load(dir, &m, m.params, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "the model adapts 'layers.0.self_attn.k_proj.weight'") != NULL, "%s", e.msg);
    gt_model_free(&m);
  }
  /* a model adapting only v_proj: the file's q_proj adapters are not its */
  {
    gt_model m;
    gt_config c;
    lora_model(&m, &c, &mem, NULL, "self_attn\\.v_proj", 2, 3);
    ck_assert_int_eq(gt_peft_load(dir, &m, m.params, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "which the model does not adapt") && strstr(e.msg, "self_attn.q_proj.weight"), "%s",
                  e.msg);
    gt_model_free(&m);
  }
  /* another base: gemma3-tiny with a wider model dimension */
  {
    gt_model m;
    gt_config c;
    char mn[64] = "model_name=gemma3-tiny";
    const char *ov[] = {mn, "lora_module_path=self_attn\\.q_proj", "lora_rank=2", "base_emb_dim=96", "enable_lora=true"};
    gt_test_config(&c, 5, ov);
    gt_test_model_build(&m, &c);
    ck_assert_int_gt(gt_peft_count(&m), 0);
    ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_peft_load(dir, &m, m.params, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "lora_A.weight' has shape [2, ") && strstr(e.msg, "the model wants [2, 96]"), "%s",
                  e.msg);
    gt_model_free(&m);
  }
  /* a file whose model has more layers: an adapter for a tensor the model lacks */
  {
    gt_model m;
    gt_config c;
    lora_model(&m, &c, &mem, NULL, "self_attn\\.q_proj", 2, 3);
    char *d2 = dir_with("more", NULL, NULL);
    char *wp = gt_test_path(d2, "adapter_model.safetensors");
    float a[2 * 64], b[64 * 2];
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    const gt_tensor_info *wq = gt_model_find_tensor(&m, "layers.0.self_attn.q_proj.weight");
    gt_st_wtensor w[2] = {
        {"base_model.model.model.layers.40.self_attn.q_proj.lora_A.weight", GT_DT_F32, 2, {2, wq->shape[1]}, a},
        {"base_model.model.model.layers.40.self_attn.q_proj.lora_B.weight", GT_DT_F32, 2, {wq->shape[0], 2}, b}};
    ck_assert(wq->shape[1] <= 64 && wq->shape[0] <= 64);
    ck_assert_msg(gt_st_write(wp, 2, w, NULL, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_peft_load(d2, &m, m.params, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "'layers.40.self_attn.q_proj.weight', which the model does not have"), "%s", e.msg);
    /* the vision tower's adapters of a multimodal model, named as such */
    gt_st_wtensor wv[2] = {
        {"base_model.model.model.vision_tower.encoder.layers.0.self_attn.q_proj.lora_A.weight", GT_DT_F32, 2,
         {2, wq->shape[1]}, a},
        {"base_model.model.model.vision_tower.encoder.layers.0.self_attn.q_proj.lora_B.weight", GT_DT_F32, 2,
         {wq->shape[0], 2}, b}};
    ck_assert_msg(gt_st_write(wp, 2, wv, NULL, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_peft_load(d2, &m, m.params, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "a projection of the multimodal model's vision part"), "%s", e.msg);
    /* a DoRA magnitude beside the pairs */
    gt_st_wtensor w3[3] = {w[0], w[1], {"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
                                        GT_DT_F32, 1, {wq->shape[0]}, a}};
    ck_assert_msg(gt_st_write(wp, 3, w3, NULL, &e) == GT_OK, "%s", e.msg);
    expect_refused(d2, "lora_magnitude_vector", "not a lora_A or lora_B weight");
    /* lora_A of another rank than r */
    gt_st_wtensor w4[2] = {
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", GT_DT_F32, 2, {1, wq->shape[1]}, a},
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", GT_DT_F32, 2, {wq->shape[0], 1}, b}};
    ck_assert_msg(gt_st_write(wp, 2, w4, NULL, &e) == GT_OK, "%s", e.msg);
    expect_refused(d2, "lora_A.weight' has shape [1, ", "with r = 2");
    /* lora_A without its lora_B */
    ck_assert_msg(gt_st_write(wp, 1, w, NULL, &e) == GT_OK, "%s", e.msg);
    expect_refused(d2, "without its lora_B", NULL);
    /* PEFT's in-memory spelling (".default.") pairs as the saved one does */
    gt_st_wtensor w5[2] = {
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", GT_DT_F32, 2, {2, wq->shape[1]}, a},
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight", GT_DT_F32, 2, {wq->shape[0], 2}, b}};
    ck_assert_msg(gt_st_write(wp, 2, w5, NULL, &e) == GT_OK, "%s", e.msg);
    {
      gt_config c5;
      const char *ov5[] = {"model_name=gemma3-tiny"};
      gt_test_config(&c5, 1, ov5);
      ck_assert_msg(gt_peft_apply_config(d2, &c5, &e) == GT_OK, "%s", e.msg);
      ck_assert_int_eq(c5.lora_rank, 2);
    }
    /* the same adapter under both text prefixes: refused, not the last read */
    gt_st_wtensor w6[3] = {
        w5[0], w5[1],
        {"base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight", GT_DT_F32, 2,
         {2, wq->shape[1]}, a}};
    ck_assert_msg(gt_st_write(wp, 3, w6, NULL, &e) == GT_OK, "%s", e.msg);
    expect_refused(d2, "the same adapter tensor twice", "language_model.layers.0.self_attn.q_proj.lora_A.weight");
    free(wp);
    free(d2);
    gt_model_free(&m);
  }
  free(dir);
}
END_TEST

/* ---- merging ---- */

START_TEST(test_merge_one) {
  uint64_t st = 3;
  int64_t out = 7, in = 5, r = 3;
  float *w = gt_test_alloc_fill(out * in, &st, -1, 1), *a = gt_test_alloc_fill(r * in, &st, -1, 1),
        *b = gt_test_alloc_fill(out * r, &st, -1, 1);
  double *want = malloc((size_t)(out * in) * sizeof(double));
  for (int64_t o = 0; o < out; o++)
    for (int64_t i = 0; i < in; i++) {
      double s = 0;
      for (int64_t k = 0; k < r; k++) s += (double)b[o * r + k] * a[k * in + i];
      want[o * in + i] = w[o * in + i] + 0.75 * s;
    }
  gt_peft_merge_one(w, a, b, out, in, r, 0.75);
  for (int64_t i = 0; i < out * in; i++) ck_assert_msg(w[i] == (float)want[i], "element %lld", (long long)i);
  free(w), free(a), free(b), free(want);
}
END_TEST

/* The HF export of a model with adapters: every adapted projection is
 * W + scale * B A (here in double, rounded once), everything else as it is,
 * no adapter tensor in the file; and the export imports as a plain model. */
START_TEST(test_export_merged) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_config c;
  lora_model(&m, &c, &mem, NULL, "self_attn\\.(q|o)_proj|mlp\\.down_proj", 4, 21);
  c.lora_use_rslora = 1; /* scale 24 / 2 */
  char *dir = gt_test_dir_path("merged");
  gt_hf_export_opts o = gt_hf_export_defaults();
  o.dtype = GT_DT_F32;
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_export(&m, &c, dir, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.n_merged, 3 * (int)m.n_layers);
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, dir, &e) == GT_OK, "%s", e.msg);
  int n_file = 0;
  for (int f = 0; f < set.n_files; f++) n_file += set.files[f].n_tensors;
  ck_assert_int_eq(n_file, m.n_tensors - 2 * gt_peft_count(&m));
  for (int i = 0; i < m.n_tensors; i++) {
    const gt_tensor_info *t = &m.tensors[i];
    char full[200];
    snprintf(full, sizeof full, "model.%s", t->name);
    const gt_st_tensor *s = gt_st_set_find(&set, full);
    if (gt_peft_is_adapter(t->name, NULL, 0, NULL)) {
      ck_assert_ptr_null(s);
      continue;
    }
    ck_assert_ptr_nonnull(s);
    float *got = malloc((size_t)t->numel * sizeof(float));
    ck_assert(gt_st_read_f32(s, got, t->numel, &e) == GT_OK);
    const gt_tensor_info *a, *b;
    gt_peft_pair(&m, t, &a, &b);
    const float *w = m.params + t->offset;
    if (!a) {
      ck_assert_msg(gt_test_same_bits(got, w, t->numel), "%s changed", t->name);
    } else {
      int64_t O = t->shape[0], I = t->shape[1], R = a->shape[0];
      const float *pa = m.params + a->offset, *pb = m.params + b->offset;
      for (int64_t oo = 0; oo < O; oo++)
        for (int64_t ii = 0; ii < I; ii++) {
          double s2 = 0;
          for (int64_t k = 0; k < R; k++) s2 += (double)pb[oo * R + k] * pa[k * I + ii];
          float want = (float)(w[oo * I + ii] + 12.0 * s2);
          ck_assert_msg(got[oo * I + ii] == want, "%s[%lld, %lld]: %g, want %g", t->name, (long long)oo,
                        (long long)ii, got[oo * I + ii], want);
        }
    }
    free(got);
  }
  gt_st_set_close(&set);
  /* the export is an ordinary HF directory: a model without adapters loads it */
  gt_config c2;
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_test_config(&c2, 1, ov);
  gt_model m2;
  ck_assert_msg(gt_hf_load_model(dir, &c2, &m2, &mem, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_peft_count(&m2), 0);
  gt_model_free(&m2);
  gt_model_free(&m);
  free(dir);
}
END_TEST

/* A frozen base stored quantized (nf4, int8, bfloat16) is exported as the
 * values the model computes with, its adapters merged into them:
 * dequantize(W) + scale * B A. The test moves one adapted projection and
 * one plain one to quantized storage at the end of the flat buffer. */
START_TEST(test_export_quantized_base) {
  const gt_qtype types[] = {GT_Q_NF4, GT_Q_INT8, GT_Q_BF16};
  for (int qi = 0; qi < 3; qi++) {
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model m;
    gt_config c;
    char mn[64] = "model_name=gemma3-tiny";
    const char *ov[] = {mn, "lora_module_path=self_attn\\.q_proj", "lora_rank=2", "lora_alpha=24"};
    gt_test_config(&c, 4, ov);
    c.enable_lora = 1;
    gt_test_model_build(&m, &c);
    ck_assert_int_gt(gt_peft_count(&m), 0);
    const char *qn[2] = {"layers.1.self_attn.q_proj.weight", "layers.1.mlp.up_proj.weight"};
    for (int k = 0; k < 2; k++) {
      gt_tensor_info *t = (gt_tensor_info *)gt_model_find_tensor(&m, qn[k]);
      t->dtype = (gt_store_dtype)types[qi];
      t->words = gt_q_words(types[qi], t->shape[0], t->shape[1]);
      t->offset = m.n_params;
      m.n_params += t->words;
    }
    gt_err e;
    ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
    uint64_t st = 50 + qi;
    gt_test_fill(m.params, m.n_params, &st, -0.5f, 0.5f);
    float *deq[2];
    for (int k = 0; k < 2; k++) {
      const gt_tensor_info *t = gt_model_find_tensor(&m, qn[k]);
      float *src = gt_test_alloc_fill(t->numel, &st, -1, 1);
      gt_quantize(types[qi], src, t->shape[0], t->shape[1], m.params + t->offset);
      deq[k] = malloc((size_t)t->numel * sizeof(float));
      gt_qweight q = gt_qweight_at(types[qi], m.params + t->offset, t->shape[0], t->shape[1]);
      gt_dequantize_rows_ref(&q, 0, t->shape[0], deq[k]);
      free(src);
    }
    char tag[16];
    snprintf(tag, sizeof tag, "q%d", qi);
    char *dir = gt_test_dir_path(tag);
    gt_hf_export_opts o = gt_hf_export_defaults();
    o.dtype = GT_DT_F32;
    ck_assert_msg(gt_hf_export(&m, &c, dir, &o, NULL, &e) == GT_OK, "%s", e.msg);
    gt_st_set set;
    ck_assert_msg(gt_st_set_open(&set, dir, &e) == GT_OK, "%s", e.msg);
    for (int k = 0; k < 2; k++) {
      const gt_tensor_info *t = gt_model_find_tensor(&m, qn[k]), *a, *b;
      char full[200];
      snprintf(full, sizeof full, "model.%s", qn[k]);
      float *got = gt_test_st_f32(&set.files[0], full, t->numel);
      gt_peft_pair(&m, t, &a, &b);
      ck_assert((a != NULL) == (k == 0));
      if (a) {
        int64_t O = t->shape[0], I = t->shape[1];
        for (int64_t oo = 0; oo < O; oo++)
          for (int64_t ii = 0; ii < I; ii++) {
            double s2 = 0;
            for (int64_t r = 0; r < 2; r++)
              s2 += (double)m.params[b->offset + oo * 2 + r] * m.params[a->offset + r * I + ii];
            ck_assert(got[oo * I + ii] == (float)(deq[k][oo * I + ii] + 12.0 * s2));
          }
      } else {
        ck_assert(gt_test_same_bits(got, deq[k], t->numel));
      }
      free(got);
      free(deq[k]);
    }
    gt_st_set_close(&set);
    free(dir);
    gt_model_free(&m);
  }
}
END_TEST

/* An HF directory loads into a model with adapters: the base from the
 * file, the adapters left as they were (their initialisation's). */
START_TEST(test_import_skips_adapters) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_config c;
  lora_model(&m, &c, &mem, NULL, "mlp\\.up_proj", 2, 31);
  char *dir = gt_test_dir_path("plain");
  gt_hf_export_opts o = gt_hf_export_defaults();
  o.dtype = GT_DT_F32;
  gt_err e;
  /* zero B: the merged export holds the base exactly */
  for (int i = 0; i < m.n_tensors; i++) {
    int is_b;
    if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, &is_b) && is_b)
      memset(m.params + m.tensors[i].offset, 0, (size_t)m.tensors[i].numel * sizeof(float));
  }
  ck_assert_msg(gt_hf_export(&m, &c, dir, &o, NULL, &e) == GT_OK, "%s", e.msg);
  float *keep = gt_test_copy(m.params, m.n_params);
  memset(m.params, 0, (size_t)m.n_params * sizeof(float));
  for (int i = 0; i < m.n_tensors; i++) /* adapters hold a marker */
    if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, NULL))
      for (int64_t k = 0; k < m.tensors[i].numel; k++) m.params[m.tensors[i].offset + k] = 7.0f;
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, dir, &e) == GT_OK, "%s", e.msg);
  gt_hf_info info;
  ck_assert_msg(gt_hf_import_params(&m, &set, "test", &info, &e) == GT_OK, "%s", e.msg);
  gt_st_set_close(&set);
  ck_assert_int_eq(info.n_ignored, 0);
  ck_assert_int_eq(info.n_tensors, m.n_tensors - 2 * gt_peft_count(&m));
  for (int i = 0; i < m.n_tensors; i++) {
    const gt_tensor_info *t = &m.tensors[i];
    if (gt_peft_is_adapter(t->name, NULL, 0, NULL))
      ck_assert(m.params[t->offset] == 7.0f && m.params[t->offset + t->numel - 1] == 7.0f);
    else
      ck_assert_msg(gt_test_same_bits(m.params + t->offset, keep + t->offset, t->numel), "%s", t->name);
  }
  free(keep);
  gt_model_free(&m);
  free(dir);
}
END_TEST

/* ---- the model source with lora_restore_path ---- */

START_TEST(test_source_restore) {
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_config c;
  lora_model(&m, &c, &mem, NULL, "self_attn\\.v_proj", 2, 41);
  char *hf = gt_test_dir_path("src_hf"), *pd = gt_test_dir_path("src_peft");
  gt_hf_export_opts o = gt_hf_export_defaults();
  o.dtype = GT_DT_F32;
  gt_err e;
  gt_config plain = c;
  plain.enable_lora = 0;
  /* the base alone: export a copy of the model without its adapters' effect */
  float *keep = gt_test_copy(m.params, m.n_params);
  for (int i = 0; i < m.n_tensors; i++)
    if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, NULL))
      memset(m.params + m.tensors[i].offset, 0, (size_t)m.tensors[i].numel * sizeof(float));
  ck_assert_msg(gt_hf_export(&m, &c, hf, &o, NULL, &e) == GT_OK, "%s", e.msg);
  memcpy(m.params, keep, (size_t)m.n_params * sizeof(float));
  ck_assert_msg(gt_peft_write(&m, m.params, &c, NULL, pd, NULL, &e) == GT_OK, "%s", e.msg);
  /* a config naming the HF base and the adapters, no adapter keys */
  char lp[1100];
  snprintf(lp, sizeof lp, "lora_restore_path=%s", pd);
  const char *ov[] = {"model_name=gemma3-tiny", lp};
  gt_config c2;
  gt_test_config(&c2, 2, ov);
  gt_model_source src;
  ck_assert_msg(gt_model_source_open(hf, &src, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_model_source_apply_config(&src, &c2, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c2.enable_lora, 1);
  ck_assert_int_eq(c2.lora_rank, 2);
  ck_assert_str_eq(src.lora_dir, pd);
  gt_model m2;
  gt_test_model_build(&m2, &c2);
  ck_assert_int_gt(gt_peft_count(&m2), 0);
  ck_assert_msg(gt_model_alloc_inference(&m2, &mem, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_model_source_load_params(&src, &m2, m2.params, &e) == GT_OK, "%s", e.msg);
  for (int i = 0; i < m.n_tensors; i++) {
    const gt_tensor_info *t2 = gt_model_find_tensor(&m2, m.tensors[i].name);
    ck_assert_ptr_nonnull(t2);
    ck_assert_msg(gt_test_same_bits(m2.params + t2->offset, keep + m.tensors[i].offset, t2->numel), "%s",
                  t2->name);
  }
  /* the same directory with a model key the base lacks: refused naming it */
  gt_config c3;
  const char *ov3[] = {"model_name=gemma3-tiny", lp, "lora_rank=5"};
  gt_test_config(&c3, 3, ov3);
  ck_assert_int_eq(gt_model_source_apply_config(&src, &c3, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "lora_rank") != NULL, "%s", e.msg);
  (void)plain;
  free(keep);
  gt_model_free(&m2);
  gt_model_free(&m);
  free(hf), free(pd);
}
END_TEST

/* ---- logits ---- */

static float *logits_of(gt_model *m, int T) {
  int32_t ids[32], tg[32], pos[32];
  for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 11) % m->vocab), tg[t] = -1, pos[t] = t;
  gt_batch b = {1, T, ids, tg, pos, NULL};
  float *lg = malloc(sizeof(float) * (size_t)T * (size_t)m->vocab);
  gt_err e;
  ck_assert_msg(gt_exec_forward_logits(m, &b, lg, &e) == GT_OK, "%s", e.msg);
  return lg;
}

/* The model's forward with adapters (B not zero), against (1) the same
 * model read back from its PEFT directory over its HF base: the same
 * logits bit for bit, and (2) the merged HF export loaded as a plain model:
 * the same logits to float32 rounding. Gemma 3 and Gemma 4 (PLE). */
START_TEST(test_logits) {
  const char *models[] = {"gemma3-tiny", "gemma4-tiny-ple"};
  for (int k = 0; k < 2; k++) {
    gt_mem mem;
    gt_mem_init(&mem);
    gt_config c;
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", models[k]);
    const char *ov[] = {mn, "enable_lora=true", "lora_rank=3", "lora_alpha=6", "max_target_length=16",
                        "lora_module_path=self_attn\\.(q|v|o)_proj|mlp\\.(gate|down)_proj|per_layer_projection"};
    gt_test_config(&c, 6, ov);
    gt_model m;
    gt_test_model_build(&m, &c);
    ck_assert_int_gt(gt_peft_count(&m), 0);
    gt_err e;
    ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
    gt_model_init_params(&m, 7, 1.0);
    uint64_t st = 90 + k;
    for (int i = 0; i < m.n_tensors; i++) /* adapters that change the output */
      if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, NULL))
        gt_test_fill(m.params + m.tensors[i].offset, m.tensors[i].numel, &st, -0.3f, 0.3f);
    float *want = logits_of(&m, 12);
    /* the base alone (B = 0) as an HF directory, the adapters as a PEFT one */
    char *hf = gt_test_dir_path(k ? "lg_hf4" : "lg_hf"), *pd = gt_test_dir_path(k ? "lg_peft4" : "lg_peft"),
         *mg = gt_test_dir_path(k ? "lg_merged4" : "lg_merged");
    gt_hf_export_opts o = gt_hf_export_defaults();
    o.dtype = GT_DT_F32;
    ck_assert_msg(gt_peft_write(&m, m.params, &c, NULL, pd, NULL, &e) == GT_OK, "%s", e.msg);
    ck_assert_msg(gt_hf_export(&m, &c, mg, &o, NULL, &e) == GT_OK, "%s", e.msg);
    float *keep = gt_test_copy(m.params, m.n_params);
    for (int i = 0; i < m.n_tensors; i++)
      if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, NULL))
        memset(m.params + m.tensors[i].offset, 0, (size_t)m.tensors[i].numel * sizeof(float));
    ck_assert_msg(gt_hf_export(&m, &c, hf, &o, NULL, &e) == GT_OK, "%s", e.msg);
    free(keep);
    /* the adapters matter: without them the logits are far from these */
    float *base = logits_of(&m, 12);
    ck_assert_msg(gt_test_scaled_err(base, want, 12 * m.vocab) > 1e-3, "%s: the adapters change nothing", models[k]);
    free(base);
    /* (1) HF base + lora_restore_path through the model source */
    char lp[1100];
    snprintf(lp, sizeof lp, "lora_restore_path=%s", pd);
    const char *ov2[] = {mn, lp, "max_target_length=16"};
    gt_config c2;
    gt_test_config(&c2, 3, ov2);
    gt_model_source src;
    ck_assert_msg(gt_model_source_open(hf, &src, &e) == GT_OK, "%s", e.msg);
    ck_assert_msg(gt_model_source_apply_config(&src, &c2, &e) == GT_OK, "%s", e.msg);
    gt_model m2;
    gt_test_model_build(&m2, &c2);
    ck_assert_int_eq(gt_peft_count(&m2), gt_peft_count(&m));
    ck_assert_msg(gt_model_alloc_inference(&m2, &mem, &e) == GT_OK, "%s", e.msg);
    ck_assert_msg(gt_model_source_load_params(&src, &m2, m2.params, &e) == GT_OK, "%s", e.msg);
    float *got = logits_of(&m2, 12);
    ck_assert_msg(gt_test_same_bits(got, want, 12 * m.vocab), "%s: the PEFT round trip changed the logits",
                  models[k]);
    free(got);
    /* (2) the merged export, a model without adapters */
    gt_config c3;
    const char *ov3[] = {mn, "max_target_length=16"};
    gt_test_config(&c3, 2, ov3);
    gt_model m3;
    ck_assert_msg(gt_hf_load_model(mg, &c3, &m3, &mem, NULL, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_peft_count(&m3), 0);
    got = logits_of(&m3, 12);
    /* W + scale B A rounded once, then x W'^T, against x W^T + scale (x A^T) B^T:
     * float32 rounding through the layers (measured 3.3e-6 on Gemma 4, 10 layers) */
    gt_test_check_err(models[k], gt_test_scaled_err(got, want, 12 * m.vocab), 1e-5);
    free(got);
    free(want);
    gt_model_free(&m3);
    gt_model_free(&m2);
    gt_model_free(&m);
    free(hf), free(pd), free(mg);
  }
}
END_TEST

/* ---- tokenizer files and generation_config.json ---- */

START_TEST(test_extras) {
  gt_config c;
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_test_config(&c, 1, ov);
  gt_err e;
  /* byte tokens: generation_config.json alone, Gemma's ids */
  char *d1 = gt_test_dir_path("ex1");
  ck_assert_int_eq(gt_test_system("mkdir -p %s", d1), 0);
  gt_hf_extras x;
  ck_assert_msg(gt_hf_write_extras(&c, NULL, NULL, d1, &x, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(x.has_tokenizer, 0);
  ck_assert_int_eq(x.wrote_generation_config, 1);
  char *g = read_json(d1, "generation_config.json");
  cJSON *j = cJSON_Parse(g);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "bos_token_id")->valueint, 2);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "pad_token_id")->valueint, 0);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "eos_token_id")), 1);
  ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "eos_token_id"), 0)->valueint, 1);
  cJSON_Delete(j);
  free(g);
  /* a tokenizer_path with an end-of-turn token: copied, a tokenizer_config.json written, eos [1, its id] */
  char *src = gt_test_read_file(GT_SOURCE_DIR "/tests/data/tokenizer_small.json", NULL);
  ck_assert_ptr_nonnull(src);
  const char *anchor = "\"added_tokens\": [";
  char *at = strstr(src, anchor);
  ck_assert_ptr_nonnull(at);
  at += strlen(anchor);
  char *tj = NULL;
  ck_assert(asprintf(&tj, "%.*s\n    {\"id\": 19, \"content\": \"<end_of_turn>\", \"single_word\": false, \"lstrip\": "
                          "false, \"rstrip\": false, \"normalized\": false, \"special\": true},%s",
                     (int)(at - src), src, at) > 0);
  char *tp = gt_test_dir_path("tok.json");
  gt_test_write_text(tp, tj);
  char *d2 = gt_test_dir_path("ex2");
  ck_assert_int_eq(gt_test_system("mkdir -p %s", d2), 0);
  ck_assert_msg(gt_hf_write_extras(&c, "", tp, d2, &x, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(x.has_tokenizer, 1);
  ck_assert_int_eq(x.wrote_tokenizer_config, 1);
  char *copied = read_json(d2, "tokenizer.json");
  ck_assert_str_eq(copied, tj);
  g = read_json(d2, "generation_config.json");
  j = cJSON_Parse(g);
  cJSON *eos = cJSON_GetObjectItem(j, "eos_token_id");
  ck_assert_int_eq(cJSON_GetArraySize(eos), 2);
  ck_assert_int_eq(cJSON_GetArrayItem(eos, 1)->valueint, 19);
  cJSON_Delete(j);
  free(g);
  char *tc = read_json(d2, "tokenizer_config.json");
  j = cJSON_Parse(tc);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "bos_token")->valuestring, "<bos>");
  cJSON_Delete(j);
  /* an HF directory's own files are copied as they are, and win */
  char *d3 = gt_test_dir_path("ex3");
  ck_assert_int_eq(gt_test_system("mkdir -p %s && printf '{\"x\": 1}' > %s/generation_config.json && cp %s "
                                  "%s/tokenizer.json && printf '{\"chat\": 2}' > %s/tokenizer_config.json",
                                  d2 /* reuse as the source */, d2, tp, d2, d2) == 0, 1);
  ck_assert_int_eq(gt_test_system("mkdir -p %s", d3), 0);
  ck_assert_msg(gt_hf_write_extras(&c, d2, NULL, d3, &x, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(x.n_copied, 3);
  ck_assert_int_eq(x.wrote_generation_config, 0);
  ck_assert_int_eq(x.wrote_tokenizer_config, 0);
  char *g3 = read_json(d3, "generation_config.json");
  ck_assert_str_eq(g3, "{\"x\": 1}");
  /* a run's own tokenizer_path wins over the directory's tokenizer files,
   * the directory's generation_config.json still comes along */
  ck_assert_int_eq(gt_test_system("printf 'not this one' > %s/tokenizer.json", d2), 0);
  char *d5 = gt_test_dir_path("ex5");
  ck_assert_int_eq(gt_test_system("mkdir -p %s", d5), 0);
  ck_assert_msg(gt_hf_write_extras(&c, d2, tp, d5, &x, &e) == GT_OK, "%s", e.msg);
  char *t5 = read_json(d5, "tokenizer.json"), *g5 = read_json(d5, "generation_config.json");
  ck_assert_str_eq(t5, tj);
  ck_assert_str_eq(g5, "{\"x\": 1}");
  free(t5), free(g5), free(d5);
  free(g3), free(tc), free(copied), free(tj), free(src), free(tp), free(d1), free(d2), free(d3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("peft");
  TCase *tc = gt_test_tcase(s, "peft");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_write_fields);
  tcase_add_test(tc, test_write_regex_targets);
  tcase_add_test(tc, test_roundtrip);
  tcase_add_test(tc, test_refuse_options);
  tcase_add_test(tc, test_write_refuses_trained_base);
  tcase_add_test(tc, test_refuse_keys);
  tcase_add_test(tc, test_refuse_tensors);
  tcase_add_test(tc, test_merge_one);
  tcase_add_test(tc, test_export_merged);
  tcase_add_test(tc, test_export_quantized_base);
  tcase_add_test(tc, test_import_skips_adapters);
  tcase_add_test(tc, test_source_restore);
  tcase_add_test(tc, test_extras);
  tcase_add_test(tc, test_logits);
  return gt_test_run_suite(s, 0);
}
