/* Every key of an exported config.json (Gemma 3 and Gemma 4) has the JSON
 * type Hugging Face's config class declares.
 * transformers' configs are @strict dataclasses (huggingface_hub): a key
 * declared `float | None` refuses a JSON integer, so "final_logit_softcapping":
 * 30 (how cJSON prints a whole double) made Gemma4ForCausalLM.from_pretrained
 * fail on every export. The test reads the exported text itself, since a
 * parsed cJSON number no longer says whether it was written 30 or 30.0.
 *
 * The tables are taken from transformers' declarations:
 * - Gemma3TextConfig: src/transformers/models/gemma3/configuration_gemma3.py
 *   (the @strict dataclass: vocab_size: int, ..., initializer_range: float,
 *   rms_norm_eps: float, attention_dropout: int | float | None,
 *   query_pre_attn_scalar: int, sliding_window: int | None,
 *   final_logit_softcapping: float | None, attn_logit_softcapping:
 *   float | None, rope_parameters: dict | None); the legacy keys gemtrain
 *   writes and convert_rope_params_to_dict pops (rope_theta,
 *   rope_local_base_freq: float; rope_scaling: dict; sliding_window_pattern:
 *   int) as the pre-dataclass docstring of the same file types them.
 * - Gemma4TextConfig: src/transformers/models/gemma4/configuration_gemma4.py
 *   (commit 008e574391258935f3ecc3035c882e73bbcac419: final_logit_softcapping:
 *   float | None, use_bidirectional_attention: Literal["all", "vision"] |
 *   None, num_experts / top_k_experts / moe_intermediate_size: int | None,
 *   ...; global_head_dim and num_global_key_value_heads are ints popped from
 *   kwargs in __post_init__).
 * - rope dicts: RopeParameters in src/transformers/modeling_rope_utils.py
 *   (rope_theta, factor, partial_rotary_factor: float; rope_type: str).
 * - architectures (list[str]), model_type, torch_dtype and
 *   transformers_version (str): PreTrainedConfig.
 * A key declared `int | float` is written as a float here: gemtrain holds
 * it as a double, and the float form is the one every reader takes. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "hf/hf.h"
#include "gt_testutil.h"

enum { T_INT = 1, T_FLOAT = 2, T_BOOL = 4, T_STR = 8, T_NULL = 16, T_STRS = 32, T_OBJ = 64 };

typedef struct {
  const char *key;
  unsigned types; /* allowed JSON types */
} key_type;

static const key_type gemma3_types[] = {
    {"architectures", T_STRS},
    {"model_type", T_STR},
    {"attention_bias", T_BOOL},
    {"attention_dropout", T_FLOAT},
    {"attn_logit_softcapping", T_FLOAT | T_NULL},
    {"bos_token_id", T_INT},
    {"eos_token_id", T_INT},
    {"pad_token_id", T_INT},
    {"final_logit_softcapping", T_FLOAT | T_NULL},
    {"head_dim", T_INT},
    {"hidden_activation", T_STR},
    {"hidden_size", T_INT},
    {"initializer_range", T_FLOAT},
    {"intermediate_size", T_INT},
    {"layer_types", T_STRS},
    {"max_position_embeddings", T_INT},
    {"num_attention_heads", T_INT},
    {"num_hidden_layers", T_INT},
    {"num_key_value_heads", T_INT},
    {"query_pre_attn_scalar", T_INT},
    {"rms_norm_eps", T_FLOAT},
    {"rope_local_base_freq", T_FLOAT},
    {"rope_scaling", T_OBJ | T_NULL},
    {"factor", T_FLOAT},
    {"rope_type", T_STR},
    {"rope_theta", T_FLOAT},
    {"sliding_window", T_INT | T_NULL},
    {"sliding_window_pattern", T_INT},
    {"tie_word_embeddings", T_BOOL},
    {"torch_dtype", T_STR},
    {"transformers_version", T_STR},
    {"use_cache", T_BOOL},
    {"vocab_size", T_INT},
};

static const key_type gemma4_types[] = {
    {"architectures", T_STRS},
    {"model_type", T_STR},
    {"attention_bias", T_BOOL},
    {"attention_dropout", T_FLOAT},
    {"attention_k_eq_v", T_BOOL},
    {"bos_token_id", T_INT},
    {"eos_token_id", T_INT},
    {"pad_token_id", T_INT},
    {"enable_moe_block", T_BOOL},
    {"final_logit_softcapping", T_FLOAT | T_NULL},
    {"global_head_dim", T_INT},
    {"head_dim", T_INT},
    {"hidden_activation", T_STR},
    {"hidden_size", T_INT},
    {"hidden_size_per_layer_input", T_INT},
    {"initializer_range", T_FLOAT},
    {"intermediate_size", T_INT},
    {"layer_types", T_STRS},
    {"max_position_embeddings", T_INT},
    {"moe_intermediate_size", T_INT | T_NULL},
    {"num_attention_heads", T_INT},
    {"num_experts", T_INT | T_NULL},
    {"num_global_key_value_heads", T_INT | T_NULL},
    {"num_hidden_layers", T_INT},
    {"num_key_value_heads", T_INT},
    {"num_kv_shared_layers", T_INT},
    {"rms_norm_eps", T_FLOAT},
    {"rope_parameters", T_OBJ},
    {"full_attention", T_OBJ},
    {"sliding_attention", T_OBJ},
    {"factor", T_FLOAT},
    {"partial_rotary_factor", T_FLOAT},
    {"rope_theta", T_FLOAT},
    {"rope_type", T_STR},
    {"sliding_window", T_INT},
    {"tie_word_embeddings", T_BOOL},
    {"top_k_experts", T_INT | T_NULL},
    {"torch_dtype", T_STR},
    {"use_bidirectional_attention", T_STR | T_NULL},
    {"use_cache", T_BOOL},
    {"use_double_wide_mlp", T_BOOL},
    {"vocab_size", T_INT},
    {"vocab_size_per_layer_input", T_INT},
};

/* The JSON type of the value text at v, as Python's json module reads it:
 * a number with a fraction or an exponent is a float, else an int. */
static unsigned kind_at(const char *v) {
  while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
  switch (*v) {
    case '"': return T_STR;
    case 't':
    case 'f': return T_BOOL;
    case 'n': return T_NULL;
    case '[': return T_STRS; /* that it holds strings is checked on the parsed tree */
    case '{': return T_OBJ;
  }
  unsigned k = T_INT;
  for (; *v && strchr("+-0123456789.eE", *v); v++)
    if (*v == '.' || *v == 'e' || *v == 'E') k = T_FLOAT;
  return k;
}

static const char *kind_name(unsigned k) {
  switch (k) {
    case T_INT: return "an int";
    case T_FLOAT: return "a float";
    case T_BOOL: return "a boolean";
    case T_STR: return "a string";
    case T_NULL: return "null";
    case T_STRS: return "a list of strings";
    case T_OBJ: return "an object";
  }
  return "?";
}

static const key_type *find_type(const key_type *t, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].key, key)) return &t[i];
  return NULL;
}

/* Every key of the tree, at any depth, is in the table; arrays hold strings. */
static void check_tree(const char *what, const cJSON *o, const key_type *t, size_t n) {
  for (const cJSON *it = o->child; it; it = it->next) {
    ck_assert_msg(find_type(t, n, it->string), "%s: key '%s' has no declared type in the test's table", what,
                  it->string);
    if (cJSON_IsObject(it)) check_tree(what, it, t, n);
    if (cJSON_IsArray(it))
      for (const cJSON *e = it->child; e; e = e->next)
        ck_assert_msg(cJSON_IsString(e), "%s: '%s' holds a non-string", what, it->string);
  }
}

/* Exports cfg and checks the type of every occurrence of every key. */
static void check_export(const char *what, const gt_config *cfg, const key_type *t, size_t n) {
  gt_err e;
  ck_assert_msg(gt_hf_config_exportable(cfg, &e) == GT_OK, "%s: %s", what, e.msg);
  char *json = gt_hf_config_to_json(cfg, cfg->vocab_size, "bfloat16");
  ck_assert_msg(json != NULL, "%s: no export", what);
  cJSON *root = cJSON_Parse(json);
  ck_assert_msg(cJSON_IsObject(root), "%s: the export is not a JSON object", what);
  check_tree(what, root, t, n);
  cJSON_Delete(root);
  for (size_t i = 0; i < n; i++) {
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", t[i].key);
    for (const char *p = strstr(json, quoted); p; p = strstr(p + 1, quoted)) {
      const char *v = p + strlen(quoted);
      v += strspn(v, " \t");
      unsigned k = kind_at(v);
      ck_assert_msg(k & t[i].types, "%s: \"%s\" is written as %s (%.*s); Hugging Face declares another type", what,
                    t[i].key, kind_name(k), (int)strcspn(v, ",\n"), v);
    }
  }
  free(json);
}

/* The value text of the first "key": in json, up to the line's end. */
static void value_text(const char *json, const char *key, char *out, size_t n) {
  char quoted[96];
  snprintf(quoted, sizeof quoted, "\"%s\":", key);
  const char *p = strstr(json, quoted);
  ck_assert_msg(p != NULL, "no %s", quoted);
  p += strlen(quoted);
  while (*p == ' ' || *p == '\t') p++;
  size_t k = strcspn(p, ",\n}");
  snprintf(out, n, "%.*s", (int)k, p);
}

#define N(t) (sizeof t / sizeof t[0])

START_TEST(test_gemma3_export_types) {
  static const char *presets[] = {"gemma3-tiny", "gemma3-small", "gemma3-12l", "gemma3-270m",
                                  "gemma3-1b",   "gemma3-4b",    "gemma3-12b", "gemma3-27b"};
  for (size_t i = 0; i < N(presets); i++) {
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", presets[i]);
    const char *ov[] = {mn};
    gt_config c;
    gt_test_config(&c, 1, ov);
    check_export(presets[i], &c, gemma3_types, N(gemma3_types));
  }
  /* every float key at a whole value, and the optional keys present */
  const char *ov[] = {"model_name=gemma3-tiny",           "final_logits_soft_cap=30",
                      "rope_linear_scaling_factor=8",     "rope_max_timescale=1000000",
                      "local_rope_max_timescale=10000",   "normalization_layer_epsilon=0.000001"};
  gt_config c;
  gt_test_config(&c, N(ov), ov);
  check_export("gemma3-tiny with whole floats", &c, gemma3_types, N(gemma3_types));
  char *json = gt_hf_config_to_json(&c, c.vocab_size, "float32");
  char v[64];
  value_text(json, "final_logit_softcapping", v, sizeof v);
  ck_assert_str_eq(v, "30.0");
  value_text(json, "factor", v, sizeof v);
  ck_assert_str_eq(v, "8.0");
  value_text(json, "rope_theta", v, sizeof v);
  ck_assert_str_eq(v, "1000000.0");
  value_text(json, "rms_norm_eps", v, sizeof v);
  ck_assert_str_eq(v, "1e-06");
  value_text(json, "query_pre_attn_scalar", v, sizeof v);
  ck_assert_str_eq(v, "16");
  value_text(json, "initializer_range", v, sizeof v);
  ck_assert_str_eq(v, "0.02");
  /* and the text still parses to the same numbers */
  cJSON *root = cJSON_Parse(json);
  ck_assert(cJSON_GetObjectItem(root, "final_logit_softcapping")->valuedouble == 30.0);
  ck_assert(cJSON_GetObjectItem(root, "rms_norm_eps")->valuedouble == 0.000001);
  cJSON_Delete(root);
  free(json);
}
END_TEST

START_TEST(test_gemma3_fractional_query_scale_refused) {
  /* Gemma3TextConfig declares query_pre_attn_scalar: int, so a fractional
   * value has no Hugging Face form: refused before anything is written */
  const char *ov[] = {"model_name=gemma3-tiny", "query_pre_attn_scalar=16.5"};
  gt_config c;
  gt_test_config(&c, 2, ov);
  gt_err e;
  ck_assert_int_eq(gt_hf_config_exportable(&c, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'query_pre_attn_scalar' = 16.5") && strstr(e.msg, "int"), "%s", e.msg);
}
END_TEST

START_TEST(test_gemma4_export_types) {
  static const char *presets[] = {"gemma4-tiny-dense", "gemma4-tiny-moe", "gemma4-tiny-ple", "gemma4-e2b",
                                  "gemma4-e4b",        "gemma4-26b",      "gemma4-31b"};
  for (size_t i = 0; i < N(presets); i++) {
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", presets[i]);
    const char *ov[] = {mn};
    gt_config c;
    gt_test_config(&c, 1, ov);
    check_export(presets[i], &c, gemma4_types, N(gemma4_types));
  }
  const char *ov[] = {"model_name=gemma4-tiny-moe",     "final_logits_soft_cap=30", "rope_linear_scaling_factor=8",
                      "rope_max_timescale=1000000",     "local_rope_max_timescale=10000",
                      "global_rope_proportion=1",       "local_rope_proportion=1"};
  gt_config c;
  gt_test_config(&c, N(ov), ov);
  check_export("gemma4-tiny-moe with whole floats", &c, gemma4_types, N(gemma4_types));
  char *json = gt_hf_config_to_json(&c, c.vocab_size, "bfloat16");
  char v[64];
  value_text(json, "final_logit_softcapping", v, sizeof v);
  ck_assert_str_eq(v, "30.0"); /* the value transformers refused as 30 */
  value_text(json, "partial_rotary_factor", v, sizeof v);
  ck_assert_str_eq(v, "1.0");
  free(json);
}
END_TEST

static Suite *hf_export_types_suite(void) {
  Suite *s = suite_create("hf_export_types");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_gemma3_export_types);
  tcase_add_test(tc, test_gemma3_fractional_query_scale_refused);
  tcase_add_test(tc, test_gemma4_export_types);
  return s;
}

int main(void) { return gt_test_run_suite(hf_export_types_suite(), 0); }
