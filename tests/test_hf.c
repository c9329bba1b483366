/* Hugging Face conversion: config.json both ways (and the real 4b hub
 * config's defaults), export -> import bit-identical for F32, BF16 export
 * rounded to nearest even (checked against a rounding written here), the
 * 262208-row embedding padded and truncated, both multimodal prefixes with
 * the vision tower skipped, and every refusal naming its key or tensor.
 * Gemma 4: the presets' config.json against the spec's numbers (section 3.1)
 * under transformers' field names and back to the same gemtrain config,
 * transformers' defaults and forced last global layer, export -> import
 * bit-identical with the tensors HF has and lacks (K=V, KV-shared, PLE,
 * layer_scalar buffers), the multimodal wrapper, and the refusals. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "ckpt/paramfile.h"
#include "gt_testutil.h"

/* A model of cfg with random weights and random norm weights w. */
static void random_model(gt_model *m, gt_mem *mem, const gt_config *c, uint64_t seed) {
  gt_err e;
  gt_test_model_build(m, c);
  ck_assert_msg(gt_model_alloc_inference(m, mem, &e) == GT_OK, "%s", e.msg);
  uint64_t st = seed;
  gt_test_fill(m->params, m->n_params, &st, -0.5f, 0.5f);
}

static void tiny_cfg(gt_config *c) {
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_test_config(c, 1, ov);
}

static void expect_same_model(const gt_config *a, const gt_config *b) {
  ck_assert_str_eq(a->decoder_block, b->decoder_block);
  ck_assert_int_eq(a->vocab_size, b->vocab_size);
  ck_assert_int_eq(a->base_emb_dim, b->base_emb_dim);
  ck_assert_int_eq(a->base_num_query_heads, b->base_num_query_heads);
  ck_assert_int_eq(a->base_num_kv_heads, b->base_num_kv_heads);
  ck_assert_int_eq(a->head_dim, b->head_dim);
  ck_assert_int_eq(a->base_mlp_dim, b->base_mlp_dim);
  ck_assert_int_eq(a->base_num_decoder_layers, b->base_num_decoder_layers);
  ck_assert_int_eq(a->sliding_window_size, b->sliding_window_size);
  ck_assert_str_eq(a->layer_pattern, b->layer_pattern);
  ck_assert(a->query_pre_attn_scalar == b->query_pre_attn_scalar);
  ck_assert(a->rope_max_timescale == b->rope_max_timescale);
  ck_assert(a->local_rope_max_timescale == b->local_rope_max_timescale);
  ck_assert(a->rope_linear_scaling_factor == b->rope_linear_scaling_factor);
  ck_assert(a->normalization_layer_epsilon == b->normalization_layer_epsilon);
  ck_assert(a->final_logits_soft_cap == b->final_logits_soft_cap);
}

/* ---- config.json ---- */

START_TEST(test_config_roundtrip) {
  const char *presets[] = {"gemma3-tiny", "gemma3-1b", "gemma3-4b", "gemma3-27b"};
  for (int i = 0; i < 4; i++) {
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", presets[i]);
    const char *ov[] = {mn, "final_logits_soft_cap=30"};
    gt_config a, b;
    gt_test_config(&a, i == 3 ? 2 : 1, ov); /* a soft-cap once, to carry a number */
    long long rows = a.vocab_size == GT_HF_GEMMA3_VOCAB ? GT_HF_GEMMA3_ROWS : a.vocab_size;
    char *js = gt_hf_config_to_json(&a, rows, "bfloat16");
    ck_assert_ptr_nonnull(js);
    ck_assert_ptr_nonnull(strstr(js, "\"Gemma3ForCausalLM\""));
    ck_assert_ptr_nonnull(strstr(js, "\"gemma3_text\""));
    tiny_cfg(&b); /* different model keys to start from */
    gt_hf_info info;
    gt_err e;
    ck_assert_msg(gt_hf_config_parse(js, "test", &b, &info, &e) == GT_OK, "%s: %s", presets[i], e.msg);
    expect_same_model(&a, &b);
    ck_assert_int_eq(info.embed_rows, rows);
    ck_assert_int_eq(info.multimodal, 0);
    free(js);
  }
}
END_TEST

/* google/gemma-3-4b-it's config.json lists only what differs from the
 * defaults (values as published on the hub); the rest must come from
 * Gemma3TextConfig, giving the spec's 4b (section 2). */
START_TEST(test_config_hub_4b_wrapper) {
  const char *js =
      "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"boi_token_index\": 255999,"
      " \"eoi_token_index\": 256000, \"eos_token_id\": [1, 106], \"image_token_index\": 262144,"
      " \"initializer_range\": 0.02, \"mm_tokens_per_image\": 256, \"model_type\": \"gemma3\","
      " \"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": \"gemma3_text\","
      "   \"num_hidden_layers\": 34, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
      "   \"sliding_window\": 1024},"
      " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\","
      " \"vision_config\": {\"hidden_size\": 1152, \"image_size\": 896, \"intermediate_size\": 4304,"
      "   \"model_type\": \"siglip_vision_model\", \"num_attention_heads\": 16, \"num_hidden_layers\": 27,"
      "   \"patch_size\": 14, \"vision_use_head\": false}}";
  gt_config c, want;
  tiny_cfg(&c);
  const char *ov[] = {"model_name=gemma3-4b"};
  gt_test_config(&want, 1, ov);
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_config_parse(js, "4b", &c, &info, &e) == GT_OK, "%s", e.msg);
  expect_same_model(&want, &c);
  ck_assert_int_eq(info.multimodal, 1);
  ck_assert_int_eq(info.embed_rows, 262208);
  ck_assert_int_eq(info.max_position_embeddings, 131072);
  /* 3,880,099,328: the spec's 3.880B, and Keras' published count */
  ck_assert_int_eq(gt_model_count_params(&c), 3880099328LL);
}
END_TEST

/* Newer transformers: layer_types and per-layer-type rope_parameters. */
START_TEST(test_config_rope_parameters) {
  const char *js =
      "{\"model_type\": \"gemma3_text\", \"vocab_size\": 260, \"hidden_size\": 64, \"intermediate_size\": 128,"
      " \"num_hidden_layers\": 5, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
      " \"sliding_window\": 7, \"query_pre_attn_scalar\": 16, \"rms_norm_eps\": 1e-5,"
      " \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\","
      "   \"sliding_attention\"],"
      " \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 4.0, \"rope_theta\": 500000},"
      "   \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 20000}},"
      " \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null}";
  gt_config c;
  tiny_cfg(&c);
  gt_err e;
  ck_assert_msg(gt_hf_config_parse(js, "new", &c, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.layer_pattern, "LG");
  ck_assert(c.rope_max_timescale == 500000 && c.local_rope_max_timescale == 20000);
  ck_assert(c.rope_linear_scaling_factor == 4.0 && c.normalization_layer_epsilon == 1e-5);
  ck_assert_int_eq(c.sliding_window_size, 7);
  ck_assert_int_eq(c.base_num_decoder_layers, 5);
  /* the older sliding_window_pattern alone */
  const char *old = "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 7, \"sliding_window_pattern\": 3}";
  ck_assert_msg(gt_hf_config_parse(old, "old", &c, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.layer_pattern, "LLG");
  /* rope_scaling's older "type" names the type as "rope_type" does */
  const char *typed = "{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 8.0}}";
  ck_assert_msg(gt_hf_config_parse(typed, "typed", &c, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert(c.rope_linear_scaling_factor == 8.0);
}
END_TEST

START_TEST(test_config_refusals) {
  struct {
    const char *json, *want;
  } cases[] = {
      {"{\"model_type\": \"llama\"}", "key 'model_type' is 'llama'"},
      {"{\"hidden_size\": 64}", "key 'model_type' is '(missing)'"},
      {"[1]", "is not a JSON object"},
      {"{\"model_type\": \"gemma3_text\", \"hidden_size\": 64.5}", "key 'hidden_size' is a JSON number with a fraction"},
      {"{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": \"6\"}", "key 'num_hidden_layers' is a JSON string"},
      {"{\"model_type\": \"gemma3_text\", \"hidden_activation\": \"gelu\"}", "key 'hidden_activation' = \"gelu\""},
      {"{\"model_type\": \"gemma3_text\", \"attn_logit_softcapping\": 50.0}", "key 'attn_logit_softcapping' = 50"},
      {"{\"model_type\": \"gemma3_text\", \"attention_bias\": true}", "key 'attention_bias'"},
      {"{\"model_type\": \"gemma3_text\", \"tie_word_embeddings\": false}", "key 'tie_word_embeddings'"},
      {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
       "key 'rope_scaling' has rope_type 'yarn'"},
      {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"rope_type\": \"linear\"}}",
       "key 'rope_scaling.factor' is missing"},
      /* no type: not "no scaling" (transformers either fails on it or drops the factor) */
      {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"factor\": 8.0}}",
       "key 'rope_scaling' is {\"factor\":8}, with neither 'rope_type' nor 'type'"},
      {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {}}",
       "key 'rope_scaling' is {}, with neither 'rope_type' nor 'type'"},
      {"{\"model_type\": \"gemma3_text\", \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"linear\","
       " \"factor\": 2}}}",
       "key 'rope_parameters.sliding_attention' has rope_type 'linear'"},
      {"{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 3, \"layer_types\": [\"full_attention\"]}",
       "key 'layer_types' must list one type per layer (num_hidden_layers = 3), found array of 1"},
      {"{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 1, \"layer_types\": [\"chunked_attention\"]}",
       "key 'layer_types'[0] is 'chunked_attention'"},
      {"{\"model_type\": \"gemma3\", \"text_config\": 5}", "key 'text_config' is a JSON number"},
      {"{\"model_type\": \"gemma3_text\", \"rms_norm_eps\": -1}", "key 'rms_norm_eps' is not positive"},
      {"{\"model_type\": \"gemma3_text\", \"head_dim\": 15}", "key 'head_dim' = 15 must be even"},
      {"{\"model_type\": \"gemma3_text\", \"num_attention_heads\": 6, \"num_key_value_heads\": 4}",
       "does not divide base_num_query_heads"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_config c;
    tiny_cfg(&c);
    gt_err e;
    gt_err_clear(&e);
    ck_assert_int_eq(gt_hf_config_parse(cases[i].json, "'x/config.json'", &c, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, cases[i].want), "case %zu: '%s' lacks '%s'", i, e.msg, cases[i].want);
    ck_assert_msg(strstr(e.msg, "x/config.json"), "case %zu does not name the file: %s", i, e.msg);
  }
}
END_TEST

/* ---- parameters ---- */

START_TEST(test_export_import_bit_identical) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model(&a, &mem, &c, 11);
  char *d1 = gt_test_dir_path("hf1"), *d2 = gt_test_dir_path("hf2");
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_export(&a, &c, d1, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_hf_is_dir(d1));
  gt_config c2;
  gt_test_config(&c2, 0, NULL); /* base.json's model, replaced by the directory's */
  ck_assert_msg(gt_hf_load_model(d1, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
  expect_same_model(&c, &c2);
  ck_assert_ptr_null(b.grads);
  ck_assert_int_eq(b.n_params, a.n_params);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
  ck_assert_str_eq(info.prefix, "model.");
  ck_assert_str_eq(info.dtype, "F32");
  ck_assert_int_eq(info.n_ignored, 0);
  /* from_hf -> to_hf: the same bytes */
  ck_assert_msg(gt_hf_export(&b, &c2, d2, &o, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_test_system("cmp -s '%s/model.safetensors' '%s/model.safetensors'", d1, d2), 0);
  ck_assert_int_eq(gt_test_system("cmp -s '%s/config.json' '%s/config.json'", d1, d2), 0);
  /* the names and shapes are HF's */
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, d1, &e) == GT_OK, "%s", e.msg);
  const gt_st_tensor *t = gt_st_set_find(&set, "model.layers.5.self_attn.o_proj.weight");
  ck_assert_ptr_nonnull(t);
  ck_assert(t->ndim == 2 && t->shape[0] == 64 && t->shape[1] == 4 * 16);
  ck_assert_ptr_nonnull(gt_st_set_find(&set, "model.norm.weight"));
  ck_assert_ptr_null(gt_st_set_find(&set, "lm_head.weight"));
  gt_st_set_close(&set);
  /* sharded: same tensors, an index, still bit-identical */
  char *d3 = gt_test_dir_path("hf3");
  gt_hf_export_opts sh = {GT_DT_F32, 100000, 1};
  ck_assert_msg(gt_hf_export(&a, &c, d3, &sh, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_test_system("test -f '%s/model.safetensors.index.json' -a ! -e '%s/model.safetensors'", d3, d3), 0);
  gt_model s;
  ck_assert_msg(gt_hf_load_model(d3, &c2, &s, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_gt(info.n_files, 2);
  ck_assert(memcmp(a.params, s.params, sizeof(float) * (size_t)a.n_params) == 0);
  gt_model_free(&s);
  gt_model_free(&a);
  gt_model_free(&b);
  free(d1), free(d2), free(d3);
}
END_TEST

/* round to nearest even on the 16 dropped bits (no NaN in the data) */
static uint16_t rne_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t low = u & 0xffffu, keep = u >> 16;
  if (low > 0x8000u || (low == 0x8000u && (keep & 1u))) keep++;
  return (uint16_t)keep;
}

START_TEST(test_bf16_export_rounding) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a;
  random_model(&a, &mem, &c, 12);
  /* ties both ways, the largest float and a subnormal */
  float *w = a.params + a.final_norm_offset;
  uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x00012345u, 0xbf80ffffu};
  for (int i = 0; i < 6; i++) memcpy(&w[i], &bits[i], 4);
  char *d = gt_test_dir_path("bf");
  gt_hf_export_opts o = gt_hf_export_defaults();
  ck_assert_int_eq(o.dtype, GT_DT_BF16);
  gt_err e;
  ck_assert_msg(gt_hf_export(&a, &c, d, &o, NULL, &e) == GT_OK, "%s", e.msg);
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, d, &e) == GT_OK, "%s", e.msg);
  long long checked = 0;
  for (int i = 0; i < a.n_tensors; i++) {
    char name[128];
    snprintf(name, sizeof name, "model.%s", a.tensors[i].name);
    const gt_st_tensor *t = gt_st_set_find(&set, name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, GT_DT_BF16);
    const unsigned char *raw = t->data;
    for (int64_t k = 0; k < a.tensors[i].numel; k++) {
      uint16_t got = (uint16_t)(raw[2 * k] | raw[2 * k + 1] << 8);
      ck_assert_msg(got == rne_bf16(a.params[a.tensors[i].offset + k]), "%s[%lld]: %04x", name, (long long)k, got);
      checked++;
    }
  }
  ck_assert_int_eq(checked, a.n_params);
  ck_assert_int_eq(gt_test_system("grep -q '\"torch_dtype\":.*\"bfloat16\"' '%s/config.json'", d), 0);
  gt_st_set_close(&set);
  gt_model_free(&a);
  free(d);
}
END_TEST

START_TEST(test_vocab_pad_truncate) {
  const char *ov[] = {"model_name=gemma3-tiny", "vocab_size=262144", "base_emb_dim=8", "base_mlp_dim=8",
                      "base_num_decoder_layers=1", "head_dim=4", "base_num_query_heads=2", "base_num_kv_heads=1"};
  gt_config c;
  gt_test_config(&c, 8, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model(&a, &mem, &c, 13);
  char *d = gt_test_dir_path("pad");
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_export(&a, &c, d, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.embed_rows, 262208);
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, d, &e) == GT_OK, "%s", e.msg);
  const gt_st_tensor *t = gt_st_set_find(&set, "model.embed_tokens.weight");
  ck_assert(t->shape[0] == 262208 && t->shape[1] == 8);
  float *all = malloc(sizeof(float) * 262208 * 8);
  ck_assert_int_eq(gt_st_read_f32(t, all, 262208 * 8, &e), GT_OK);
  ck_assert(memcmp(all, a.params + a.embed_offset, sizeof(float) * 262144 * 8) == 0);
  for (int64_t i = 262144 * 8; i < 262208 * 8; i++) ck_assert(all[i] == 0.0f);
  free(all);
  gt_st_set_close(&set);
  ck_assert_int_eq(gt_test_system("grep -q '\"vocab_size\":.*262208' '%s/config.json'", d), 0);
  /* import cuts the table back to the 262144 tokens */
  gt_config c2;
  gt_test_config(&c2, 0, NULL);
  ck_assert_msg(gt_hf_load_model(d, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c2.vocab_size, 262144);
  ck_assert_int_eq(info.embed_rows, 262208);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
  gt_model_free(&b);
  /* pad_vocab off: as stored */
  o.pad_vocab = 0;
  ck_assert_msg(gt_hf_export(&a, &c, d, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.embed_rows, 262144);
  ck_assert_msg(gt_hf_load_model(d, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
  gt_model_free(&a);
  gt_model_free(&b);
  free(d);
}
END_TEST

/* BF16 entries for the model's tensors named `prefix` + name in w[0..),
 * names in names[0..); returns their count. */
static int model_entries(const gt_model *m, const char *prefix, gt_st_wtensor *w, char (*names)[160]) {
  for (int i = 0; i < m->n_tensors; i++) {
    snprintf(names[i], sizeof names[i], "%s%s", prefix, m->tensors[i].name);
    w[i] = (gt_st_wtensor){names[i], GT_DT_BF16, m->tensors[i].ndim, {0}, m->params + m->tensors[i].offset};
    for (int d = 0; d < m->tensors[i].ndim; d++) w[i].shape[d] = m->tensors[i].shape[d];
  }
  return m->n_tensors;
}

/* dir/config.json: the multimodal wrapper `arch` / `type` around the text
 * config gemtrain writes for c. */
static void write_wrapper_config(const char *dir, const gt_config *c, const char *arch, const char *type,
                                 const char *vision_type) {
  char *text = gt_hf_config_to_json(c, c->vocab_size, "bfloat16");
  char path[1200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"text_config\": %s, "
             "\"vision_config\": {\"model_type\": \"%s\"}}\n", arch, type, text, vision_type);
  fclose(f);
  free(text);
}

/* Writes the model's tensors as `prefix` + name, plus extra tensors, and a
 * multimodal config.json whose text_config is the model's. */
static void write_prefixed(const char *dir, const gt_model *m, const gt_config *c, const char *prefix) {
  gt_test_system("mkdir -p '%s'", dir);
  int n = m->n_tensors + 2;
  gt_st_wtensor *w = calloc((size_t)n, sizeof *w);
  char(*names)[160] = calloc((size_t)n, sizeof *names);
  model_entries(m, prefix, w, names);
  static const float vision[6] = {1, 2, 3, 4, 5, 6};
  w[n - 2] = (gt_st_wtensor){"vision_tower.vision_model.embeddings.patch_embedding.weight", GT_DT_F32, 2, {2, 3}, vision};
  w[n - 1] = (gt_st_wtensor){"multi_modal_projector.mm_soft_emb_norm.weight", GT_DT_F32, 1, {6}, vision};
  gt_err e;
  ck_assert_msg(gt_st_write_sharded(dir, n, w, 0, &e) == GT_OK, "%s", e.msg);
  write_wrapper_config(dir, c, "Gemma3ForConditionalGeneration", "gemma3", "siglip_vision_model");
  free(names);
  free(w);
}

START_TEST(test_multimodal_prefixes) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a;
  random_model(&a, &mem, &c, 14);
  /* exact in BF16, so the import must give the same floats back */
  for (int64_t i = 0; i < a.n_params; i++) a.params[i] = (float)((int)(a.params[i] * 256.0f)) / 256.0f;
  const char *prefixes[] = {"language_model.model.", "model.language_model."};
  for (int k = 0; k < 2; k++) {
    char *d = gt_test_dir_path(k ? "mm2" : "mm1");
    write_prefixed(d, &a, &c, prefixes[k]);
    gt_config c2;
    gt_test_config(&c2, 0, NULL);
    gt_model b;
    gt_hf_info info;
    gt_err e;
    ck_assert_msg(gt_hf_load_model(d, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
    expect_same_model(&c, &c2);
    ck_assert_str_eq(info.prefix, prefixes[k]);
    ck_assert_int_eq(info.multimodal, 1);
    ck_assert_str_eq(info.dtype, "BF16");
    ck_assert_int_eq(info.n_ignored, 2);
    ck_assert_str_eq(info.first_ignored, "multi_modal_projector.mm_soft_emb_norm.weight");
    ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
    gt_model_free(&b);
    free(d);
  }
  gt_model_free(&a);
}
END_TEST

/* Re-writes dir's model.safetensors without tensor `drop` and with
 * `reshape` given the shape [3, 5]. */
static void damage(const char *dir, const gt_model *m, const char *drop, const char *reshape) {
  int n = 0;
  gt_st_wtensor *w = calloc((size_t)m->n_tensors, sizeof *w);
  char(*names)[160] = calloc((size_t)m->n_tensors, sizeof *names);
  for (int i = 0; i < m->n_tensors; i++) {
    if (drop && !strcmp(m->tensors[i].name, drop)) continue;
    snprintf(names[n], sizeof names[n], "model.%s", m->tensors[i].name);
    w[n] = (gt_st_wtensor){names[n], GT_DT_F32, m->tensors[i].ndim, {0}, m->params + m->tensors[i].offset};
    for (int d = 0; d < m->tensors[i].ndim; d++) w[n].shape[d] = m->tensors[i].shape[d];
    if (reshape && !strcmp(m->tensors[i].name, reshape)) w[n].ndim = 2, w[n].shape[0] = 3, w[n].shape[1] = 5;
    n++;
  }
  gt_err e;
  ck_assert_msg(gt_st_write_sharded(dir, n, w, 0, &e) == GT_OK, "%s", e.msg);
  free(names);
  free(w);
}

START_TEST(test_missing_and_bad_shapes) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model(&a, &mem, &c, 15);
  char *d = gt_test_dir_path("bad");
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_err e;
  ck_assert_msg(gt_hf_export(&a, &c, d, &o, NULL, &e) == GT_OK, "%s", e.msg);
  gt_config c2;
  gt_test_config(&c2, 0, NULL);
  damage(d, &a, "layers.3.mlp.up_proj.weight", NULL);
  ck_assert_int_eq(gt_hf_load_model(d, &c2, &b, &mem, NULL, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "has no tensor 'model.layers.3.mlp.up_proj.weight' (expected shape [128, 64])"), "%s",
                e.msg);
  ck_assert_ptr_null(b.params);
  damage(d, &a, NULL, "layers.0.self_attn.k_norm.weight");
  ck_assert_int_eq(gt_hf_load_model(d, &c2, &b, &mem, NULL, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "tensor 'model.layers.0.self_attn.k_norm.weight' has shape [3, 5], the model wants [16]"),
                "%s", e.msg);
  /* not a Gemma checkpoint at all */
  float x = 1;
  gt_st_wtensor other = {"transformer.wte.weight", GT_DT_F32, 1, {1}, &x};
  ck_assert_int_eq(gt_st_write_sharded(d, 1, &other, 0, &e), GT_OK);
  ck_assert_int_eq(gt_hf_load_model(d, &c2, &b, &mem, NULL, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "no tensor 'embed_tokens.weight' under any of the prefixes"), "%s", e.msg);
  /* a config.json that is not Gemma */
  gt_test_system("echo '{\"model_type\": \"gpt2\"}' > '%s/config.json'", d);
  ck_assert_int_eq(gt_hf_load_model(d, &c2, &b, &mem, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'model_type' is 'gpt2'"), "%s", e.msg);
  gt_model_free(&a);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0); /* nothing left behind by the refusals */
  free(d);
}
END_TEST

/* NaN or Inf weights in a Hugging Face directory are refused at import,
 * naming the tensor and the element (they used to be taken, and training
 * stopped at step 0). */
START_TEST(test_nonfinite_weights_refused) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model(&a, &mem, &c, 21);
  const gt_tensor_info *t = gt_model_find_tensor(&a, "layers.1.mlp.down_proj.weight");
  ck_assert_ptr_nonnull(t);
  char *d = gt_test_dir_path("nonfinite");
  static const struct {
    float v;
    gt_dtype dt;
    const char *want;
  } cases[] = {
      {NAN, GT_DT_F32, "tensor 'model.layers.1.mlp.down_proj.weight' element 7 of 8192 is nan"},
      {INFINITY, GT_DT_BF16, "tensor 'model.layers.1.mlp.down_proj.weight' element 7 of 8192 is inf"},
      {-INFINITY, GT_DT_F32, "tensor 'model.layers.1.mlp.down_proj.weight' element 7 of 8192 is -inf"},
  };
  for (int i = 0; i < 3; i++) {
    a.params[t->offset + 7] = cases[i].v;
    gt_hf_export_opts o = {cases[i].dt, 0, 1};
    gt_err e;
    ck_assert_msg(gt_hf_export(&a, &c, d, &o, NULL, &e) == GT_OK, "%s", e.msg);
    gt_config c2;
    gt_test_config(&c2, 0, NULL);
    ck_assert_int_eq(gt_hf_load_model(d, &c2, &b, &mem, NULL, &e), GT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, cases[i].want) && strstr(e.msg, "weights must be finite"), "'%s' lacks '%s'", e.msg,
                  cases[i].want);
    ck_assert_ptr_null(b.params);
  }
  gt_model_free(&a);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  free(d);
}
END_TEST

/* from_hf writes gt_ctx_save's format: its own config, zero moments. */
START_TEST(test_paramfile_roundtrip) {
  gt_config c;
  tiny_cfg(&c);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model(&a, &mem, &c, 16);
  char *p = gt_test_dir_path("p.safetensors");
  gt_err e;
  ck_assert_msg(gt_paramfile_write(p, &a, &c, NULL, NULL, 0, &e) == GT_OK, "%s", e.msg);
  gt_config c2;
  ck_assert_msg(gt_paramfile_read_config(p, &c2, &e) == GT_OK, "%s", e.msg);
  expect_same_model(&c, &c2);
  ck_assert_msg(gt_model_build(&b, &c2, &e) == GT_OK && gt_model_alloc(&b, &mem, &e) == GT_OK, "%s", e.msg);
  float *mu = calloc((size_t)b.n_params, sizeof(float)), *nu = calloc((size_t)b.n_params, sizeof(float));
  mu[3] = nu[5] = 1;
  int64_t step = -1;
  ck_assert_msg(gt_paramfile_read(p, &b, mu, nu, &step, &e) == GT_OK, "%s", e.msg);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
  ck_assert(mu[3] == 0 && nu[5] == 0 && step == 0);
  free(mu), free(nu);
  gt_model_free(&a);
  gt_model_free(&b);
  free(p);
}
END_TEST

/* ---- Gemma 4 ---- */

static void expect_same_model4(const gt_config *a, const gt_config *b) {
  expect_same_model(a, b);
  ck_assert_int_eq(a->global_head_dim, b->global_head_dim);
  ck_assert_int_eq(a->global_num_kv_heads, b->global_num_kv_heads);
  ck_assert_int_eq(a->share_kv_projections, b->share_kv_projections);
  ck_assert(a->global_rope_proportion == b->global_rope_proportion);
  ck_assert(a->local_rope_proportion == b->local_rope_proportion);
  ck_assert_int_eq(a->v_norm_with_scale, b->v_norm_with_scale);
  ck_assert_int_eq(a->hidden_size_per_layer_input, b->hidden_size_per_layer_input);
  ck_assert_int_eq(a->vocab_size_per_layer_input, b->vocab_size_per_layer_input);
  ck_assert_int_eq(a->num_kv_shared_layers, b->num_kv_shared_layers);
  ck_assert_int_eq(a->use_double_wide_mlp, b->use_double_wide_mlp);
  /* the MoE keys, where this gemtrain has them */
  static const char *const moe[] = {"num_experts", "num_experts_per_tok", "base_moe_mlp_dim", "shared_experts"};
  for (int i = 0; i < 4; i++) {
    if (!gt_config_key(moe[i])) continue;
    char x[64], y[64];
    gt_config_get_text(a, moe[i], x, sizeof x, NULL);
    gt_config_get_text(b, moe[i], y, sizeof y, NULL);
    ck_assert_msg(!strcmp(x, y), "%s: %s vs %s", moe[i], x, y);
  }
}

static double jnum(const cJSON *o, const char *key) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsNumber(j), "config.json lacks number '%s'", key);
  return j->valuedouble;
}

static int jtrue(const cJSON *o, const char *key) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsBool(j), "config.json lacks boolean '%s'", key);
  return cJSON_IsTrue(j);
}

static int preset_exists(const char *name) {
  return gt_test_system("test -f '%s/configs/models/%s.json'", GT_SOURCE_DIR, name) == 0;
}

/* The spec's table (section 3.1) in transformers' Gemma4TextConfig names:
 * what to_hf must write for each preset, and reading it back must give the
 * preset's gemtrain config. */
START_TEST(test_config4_presets) {
  struct {
    const char *preset;
    double d, L, F, H, K, gK, window, ple, shared, first_global, period;
    int kev, wide;
  } want[] = {
      {"gemma4-e2b", 1536, 35, 6144, 8, 1, -1, 512, 256, 20, 4, 5, 0, 1},
      {"gemma4-e4b", 2560, 42, 10240, 8, 2, -1, 512, 256, 18, 5, 6, 0, 0},
      {"gemma4-31b", 5376, 60, 21504, 32, 16, 4, 1024, 0, 0, 5, 6, 1, 0},
      {"gemma4-tiny-dense", 64, 6, 128, 4, 2, 1, 16, 0, 0, 5, 6, 1, 0},
      {"gemma4-tiny-ple", 64, 10, 96, 4, 1, -1, 16, 8, 4, 4, 5, 0, 1},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", want[i].preset);
    const char *ov[] = {mn};
    gt_config a, b;
    gt_test_config(&a, 1, ov);
    gt_err e;
    ck_assert_msg(gt_hf_config_exportable(&a, &e) == GT_OK, "%s: %s", want[i].preset, e.msg);
    char *js = gt_hf_config_to_json(&a, 0, "bfloat16");
    ck_assert_ptr_nonnull(js);
    cJSON *o = cJSON_Parse(js);
    ck_assert_ptr_nonnull(o);
    const char *p = want[i].preset;
    ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "architectures"), 0)->valuestring, "Gemma4ForCausalLM");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "model_type")->valuestring, "gemma4_text");
    ck_assert_msg(jnum(o, "hidden_size") == want[i].d && jnum(o, "num_hidden_layers") == want[i].L &&
                      jnum(o, "intermediate_size") == want[i].F && jnum(o, "num_attention_heads") == want[i].H &&
                      jnum(o, "num_key_value_heads") == want[i].K && jnum(o, "sliding_window") == want[i].window,
                  "%s: sizes", p);
    ck_assert_msg(jnum(o, "hidden_size_per_layer_input") == want[i].ple &&
                      jnum(o, "num_kv_shared_layers") == want[i].shared,
                  "%s: PLE / KV sharing", p);
    ck_assert_msg(jtrue(o, "attention_k_eq_v") == want[i].kev && jtrue(o, "use_double_wide_mlp") == want[i].wide &&
                      !jtrue(o, "enable_moe_block"),
                  "%s: flags", p);
    const cJSON *gk = cJSON_GetObjectItem(o, "num_global_key_value_heads");
    ck_assert_msg(want[i].gK < 0 ? cJSON_IsNull(gk) : (cJSON_IsNumber(gk) && gk->valuedouble == want[i].gK), "%s", p);
    ck_assert(jnum(o, "head_dim") == (i < 3 ? 256 : 16) && jnum(o, "global_head_dim") == (i < 3 ? 512 : 32));
    ck_assert(jnum(o, "vocab_size") == (i < 3 ? 262144 : 260) && jnum(o, "final_logit_softcapping") == 30);
    /* globals at first_global, first_global + period, ...; the last layer global */
    const cJSON *lt = cJSON_GetObjectItem(o, "layer_types");
    ck_assert_int_eq(cJSON_GetArraySize(lt), (int)want[i].L);
    for (int l = 0; l < (int)want[i].L; l++) {
      int g = l >= want[i].first_global && (l - (int)want[i].first_global) % (int)want[i].period == 0;
      ck_assert_str_eq(cJSON_GetArrayItem(lt, l)->valuestring, g ? "full_attention" : "sliding_attention");
    }
    const cJSON *rp = cJSON_GetObjectItem(o, "rope_parameters");
    const cJSON *full = cJSON_GetObjectItem(rp, "full_attention"), *slide = cJSON_GetObjectItem(rp, "sliding_attention");
    ck_assert_str_eq(cJSON_GetObjectItem(full, "rope_type")->valuestring, "proportional");
    ck_assert(jnum(full, "partial_rotary_factor") == 0.25 && jnum(full, "rope_theta") == 1e6);
    ck_assert_str_eq(cJSON_GetObjectItem(slide, "rope_type")->valuestring, "default");
    ck_assert(jnum(slide, "rope_theta") == 1e4);
    cJSON_Delete(o);
    /* back, starting from a Gemma 3 model */
    tiny_cfg(&b);
    gt_hf_info info;
    ck_assert_msg(gt_hf_config_parse(js, "test", &b, &info, &e) == GT_OK, "%s: %s", p, e.msg);
    expect_same_model4(&a, &b);
    ck_assert_str_eq(info.architecture, "Gemma4ForCausalLM");
    ck_assert_int_eq(gt_model_count_params(&a), gt_model_count_params(&b));
    free(js);
  }
}
END_TEST

/* gemma4-tiny-moe (branch moe2): enabled once the preset exists. */
START_TEST(test_config4_moe_preset) {
  if (!preset_exists("gemma4-tiny-moe") || !gt_config_key("num_experts")) return; /* MoE not in this tree yet */
  const char *ov[] = {"model_name=gemma4-tiny-moe"};
  gt_config a, b;
  gt_test_config(&a, 1, ov);
  gt_err e;
  ck_assert_msg(gt_hf_config_exportable(&a, &e) == GT_OK, "%s", e.msg);
  char *js = gt_hf_config_to_json(&a, 0, "float32");
  ck_assert_ptr_nonnull(js);
  cJSON *o = cJSON_Parse(js);
  char t[64];
  gt_config_get_text(&a, "num_experts", t, sizeof t, NULL);
  ck_assert(jtrue(o, "enable_moe_block") && jnum(o, "num_experts") == strtod(t, NULL));
  gt_config_get_text(&a, "num_experts_per_tok", t, sizeof t, NULL);
  ck_assert(jnum(o, "top_k_experts") == strtod(t, NULL));
  gt_config_get_text(&a, "base_moe_mlp_dim", t, sizeof t, NULL);
  ck_assert(jnum(o, "moe_intermediate_size") == strtod(t, NULL));
  cJSON_Delete(o);
  tiny_cfg(&b);
  ck_assert_msg(gt_hf_config_parse(js, "moe", &b, NULL, &e) == GT_OK, "%s", e.msg);
  expect_same_model4(&a, &b);
  free(js);
}
END_TEST

/* What a file omits takes Gemma4TextConfig's defaults; the wrapper's
 * text_config is the decoder; the last layer is forced global. */
START_TEST(test_config4_defaults_and_wrapper) {
  gt_config c;
  tiny_cfg(&c);
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_config_parse("{\"model_type\": \"gemma4_text\"}", "min", &c, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.decoder_block, "gemma4_small"); /* hidden_size_per_layer_input defaults to 256 */
  ck_assert(c.vocab_size == 262144 && c.base_emb_dim == 2304 && c.base_mlp_dim == 9216);
  ck_assert(c.base_num_decoder_layers == 30 && c.base_num_query_heads == 8 && c.base_num_kv_heads == 4);
  ck_assert(c.head_dim == 256 && c.global_head_dim == 512 && c.global_num_kv_heads == 0 && !c.share_kv_projections);
  ck_assert(c.hidden_size_per_layer_input == 256 && c.vocab_size_per_layer_input == 262144);
  ck_assert(c.sliding_window_size == 512 && c.num_kv_shared_layers == 0 && !c.use_double_wide_mlp);
  ck_assert_str_eq(c.layer_pattern, "LLLLLG");
  ck_assert(c.rope_max_timescale == 1e6 && c.global_rope_proportion == 0.25 && c.rope_linear_scaling_factor == 1);
  ck_assert(c.local_rope_max_timescale == 1e4 && c.local_rope_proportion == 1);
  ck_assert(c.query_pre_attn_scalar == 1 && c.final_logits_soft_cap == 0 && c.normalization_layer_epsilon == 1e-6);
  ck_assert_str_eq(info.architecture, "Gemma4ForCausalLM");
  ck_assert_int_eq(info.multimodal, 0);

  /* the wrapper, K=V with its own global kv heads, a forced last layer,
   * proportional RoPE on local layers too, linear factor on globals */
  const char *js =
      "{\"architectures\": [\"Gemma4ForConditionalGeneration\"], \"model_type\": \"gemma4\","
      " \"text_config\": {\"model_type\": \"gemma4_text\", \"vocab_size\": 300, \"hidden_size\": 32,"
      "  \"intermediate_size\": 48, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
      "  \"head_dim\": 8, \"global_head_dim\": 16, \"attention_k_eq_v\": true, \"num_global_key_value_heads\": 1,"
      "  \"hidden_size_per_layer_input\": 0, \"sliding_window\": 5, \"final_logit_softcapping\": 30.0,"
      "  \"use_bidirectional_attention\": \"vision\","
      "  \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\"],"
      "  \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.5,"
      "     \"rope_theta\": 500000, \"factor\": 8},"
      "   \"sliding_attention\": {\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.5, \"rope_theta\": 20000}}},"
      " \"vision_config\": {\"model_type\": \"gemma4_vision\"}}";
  ck_assert_msg(gt_hf_config_parse(js, "wrap", &c, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.decoder_block, "gemma4");
  ck_assert_str_eq(c.layer_pattern, "LG"); /* [L, G, L, L] with the last forced to G */
  ck_assert(c.share_kv_projections && c.global_num_kv_heads == 1 && c.global_head_dim == 16);
  ck_assert(c.hidden_size_per_layer_input == 0 && c.vocab_size_per_layer_input == 0);
  ck_assert(c.rope_max_timescale == 5e5 && c.rope_linear_scaling_factor == 8 && c.global_rope_proportion == 0.5);
  ck_assert(c.local_rope_max_timescale == 2e4 && c.local_rope_proportion == 0.5);
  ck_assert_str_eq(info.architecture, "Gemma4ForConditionalGeneration");
  ck_assert_int_eq(info.multimodal, 1);
  /* and out again: the same model */
  gt_config b;
  tiny_cfg(&b);
  char *out = gt_hf_config_to_json(&c, 0, "float32");
  ck_assert_msg(gt_hf_config_parse(out, "again", &b, NULL, &e) == GT_OK, "%s", e.msg);
  expect_same_model4(&c, &b);
  free(out);
  /* without attention_k_eq_v, num_global_key_value_heads does not apply */
  const char *nokev = "{\"model_type\": \"gemma4_text\", \"num_global_key_value_heads\": 1, \"num_key_value_heads\": 2,"
                      " \"hidden_size_per_layer_input\": 0}";
  ck_assert_msg(gt_hf_config_parse(nokev, "nokev", &c, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert(c.global_num_kv_heads == 0 && !c.share_kv_projections && c.base_num_kv_heads == 2);
  /* a Gemma 3 file after a Gemma 4 one: the Gemma 4 keys go back to their gemma3 values */
  ck_assert_msg(gt_hf_config_parse("{\"model_type\": \"gemma3_text\"}", "g3", &c, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert(c.global_head_dim == 0 && c.global_rope_proportion == 1 && c.hidden_size_per_layer_input == 0);
}
END_TEST

START_TEST(test_config4_refusals) {
  struct {
    const char *json, *want;
  } cases[] = {
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"yarn\","
       " \"rope_theta\": 1e6}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
       "key 'rope_parameters.full_attention' has rope_type 'yarn'"},
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\","
       " \"rope_theta\": 1e6}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
       "key 'rope_parameters.full_attention' has rope_type 'default', which transformers sizes by head_dim"},
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"proportional\","
       " \"rope_theta\": 1e6}, \"sliding_attention\": {\"rope_type\": \"proportional\", \"factor\": 2}}}",
       "key 'rope_parameters.sliding_attention.factor' = 2"},
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\"}}}",
       "key 'rope_parameters.full_attention' is missing"},
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"proportional\","
       " \"partial_rotary_factor\": 1.5}, \"sliding_attention\": {}}}",
       "key 'rope_parameters.full_attention.partial_rotary_factor' is out of range"},
      {"{\"model_type\": \"gemma4_text\", \"rope_parameters\": {\"full_attention\": {\"rope_theta\": -3,"
       " \"rope_type\": \"proportional\"}, \"sliding_attention\": {}}}",
       "key 'rope_parameters.full_attention.rope_theta' is not positive"},
      {"{\"model_type\": \"gemma4_text\", \"use_bidirectional_attention\": \"all\"}",
       "key 'use_bidirectional_attention' = \"all\" is not supported"},
      {"{\"model_type\": \"gemma4_text\", \"attention_k_eq_v\": \"yes\"}",
       "key 'attention_k_eq_v' is a JSON string, expected true or false"},
      {"{\"model_type\": \"gemma4_text\", \"hidden_activation\": \"silu\"}", "key 'hidden_activation' = \"silu\""},
      {"{\"model_type\": \"gemma4_text\", \"tie_word_embeddings\": false}", "key 'tie_word_embeddings'"},
      {"{\"model_type\": \"gemma4\", \"text_config\": {\"model_type\": \"gemma3_text\"}}",
       "key 'text_config.model_type' is not gemma4_text"},
      {"{\"model_type\": \"gemma4_text\", \"num_hidden_layers\": 4, \"num_kv_shared_layers\": 4}",
       "key 'num_kv_shared_layers' = 4 must be below base_num_decoder_layers"},
      {"{\"model_type\": \"gemma4_text\", \"hidden_size_per_layer_input\": 8, \"vocab_size\": 300,"
       " \"vocab_size_per_layer_input\": 200}",
       "key 'vocab_size_per_layer_input' = 200 is below vocab_size = 300"},
      {"{\"model_type\": \"gemma4_text\", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8}}",
       "key 'rope_scaling' is not read by Gemma 4"},
      /* with MoE keys in this gemtrain, the HF keys the block needs */
      {"{\"model_type\": \"gemma4_text\", \"enable_moe_block\": true, \"num_experts\": 4, \"top_k_experts\": 2}",
       gt_config_key("num_experts") ? "key 'moe_intermediate_size' is missing or null"
                                    : "key 'enable_moe_block' = true, but this gemtrain has no MoE layer"},
      /* HF's one-expert block is still a MoE block; gemtrain's num_experts = 1 is dense */
      {"{\"model_type\": \"gemma4_text\", \"enable_moe_block\": true, \"num_experts\": 1, \"top_k_experts\": 1,"
       " \"moe_intermediate_size\": 8}",
       gt_config_key("num_experts") ? "key 'num_experts' = 1 with enable_moe_block = true"
                                    : "key 'enable_moe_block' = true, but this gemtrain has no MoE layer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_config c;
    tiny_cfg(&c);
    gt_err e;
    gt_err_clear(&e);
    ck_assert_int_eq(gt_hf_config_parse(cases[i].json, "'x/config.json'", &c, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, cases[i].want), "case %zu: '%s' lacks '%s'", i, e.msg, cases[i].want);
    ck_assert_msg(strstr(e.msg, "x/config.json"), "case %zu does not name the file: %s", i, e.msg);
  }
  /* exports transformers would run differently */
  struct {
    const char *ov, *want;
  } ex[] = {
      {"v_norm_with_scale=true", "key 'v_norm_with_scale' = true"},
      {"query_pre_attn_scalar=16", "key 'query_pre_attn_scalar' = 16"},
      {"share_kv_projections=false", "key 'global_num_kv_heads' = 1 without share_kv_projections"},
      {"layer_pattern=LLLLGL", "key 'layer_pattern' = 'LLLLGL' makes the last of 6 layers local"},
  };
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
    const char *ov[] = {"model_name=gemma4-tiny-dense", ex[i].ov};
    gt_config c;
    gt_test_config(&c, 2, ov);
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model m;
    random_model(&m, &mem, &c, 30 + i);
    char *d = gt_test_dir_path("refused");
    gt_err e;
    ck_assert_int_eq(gt_hf_export(&m, &c, d, NULL, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, ex[i].want), "export %zu: '%s' lacks '%s'", i, e.msg, ex[i].want);
    ck_assert_int_ne(gt_test_system("test -e '%s'", d), 0); /* nothing written */
    gt_model_free(&m);
    free(d);
  }
}
END_TEST

/* A random model of a preset, its 1-D tensors (norms, layer_scalar) around 1 as Gemma 4 stores them. */
static void random_model4(gt_model *m, gt_mem *mem, const gt_config *c, uint64_t seed) {
  random_model(m, mem, c, seed);
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].ndim == 1)
      for (int64_t k = 0; k < m->tensors[i].numel; k++) m->params[m->tensors[i].offset + k] += 1.0f;
}

static int has_tensor(const gt_st_set *set, const char *fmt, int l) {
  char name[160];
  snprintf(name, sizeof name, fmt, l);
  return gt_st_set_find(set, name) != NULL;
}

/* The same parameters under the same names in both models. */
static void expect_same_params(const gt_model *a, const gt_model *b) {
  ck_assert_int_eq(a->n_params, b->n_params);
  ck_assert_int_eq(a->n_tensors, b->n_tensors);
  for (int i = 0; i < a->n_tensors; i++) {
    const gt_tensor_info *t = gt_model_find_tensor(b, a->tensors[i].name);
    ck_assert_msg(t && t->numel == a->tensors[i].numel, "%s", a->tensors[i].name);
    ck_assert_msg(!memcmp(a->params + a->tensors[i].offset, b->params + t->offset, sizeof(float) * (size_t)t->numel),
                  "%s differs", a->tensors[i].name);
  }
}

START_TEST(test_export_import4_bit_identical) {
  const char *presets[] = {"gemma4-tiny-dense", "gemma4-tiny-ple", "gemma4-tiny-moe"};
  for (int k = 0; k < 3; k++) {
    if (k == 2 && !preset_exists(presets[k])) continue; /* MoE: once branch moe2 is in */
    char mn[64];
    snprintf(mn, sizeof mn, "model_name=%s", presets[k]);
    const char *ov[] = {mn};
    gt_config c, c2;
    gt_test_config(&c, 1, ov);
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model a, b;
    random_model4(&a, &mem, &c, 40 + (uint64_t)k);
    char *d1 = gt_test_dir_path("g4a"), *d2 = gt_test_dir_path("g4b");
    gt_hf_export_opts o = {GT_DT_F32, 0, 1};
    gt_hf_info info;
    gt_err e;
    ck_assert_msg(gt_hf_export(&a, &c, d1, &o, &info, &e) == GT_OK, "%s: %s", presets[k], e.msg);
    ck_assert_str_eq(info.architecture, "Gemma4ForCausalLM");
    ck_assert_int_eq(info.embed_rows, c.vocab_size);
    tiny_cfg(&c2);
    ck_assert_msg(gt_hf_load_model(d1, &c2, &b, &mem, &info, &e) == GT_OK, "%s: %s", presets[k], e.msg);
    expect_same_model4(&c, &c2);
    ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
    ck_assert_int_eq(info.n_ignored + info.n_unused_scalars + info.n_unused_shared_kv, 0);
    ck_assert_msg(gt_hf_export(&b, &c2, d2, &o, NULL, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_test_system("cmp -s '%s/model.safetensors' '%s/model.safetensors'", d1, d2), 0);
    ck_assert_int_eq(gt_test_system("cmp -s '%s/config.json' '%s/config.json'", d1, d2), 0);
    /* HF's tensors: a layer_scalar in every layer, no v_proj on K=V globals,
     * no k/v projections or k_norm on KV-shared layers */
    gt_st_set set;
    ck_assert_msg(gt_st_set_open(&set, d1, &e) == GT_OK, "%s", e.msg);
    for (int l = 0; l < (int)c.base_num_decoder_layers; l++) {
      int shared = l >= c.base_num_decoder_layers - c.num_kv_shared_layers;
      int kev = c.share_kv_projections && gt_config_layer_is_global(&c, l);
      ck_assert_msg(has_tensor(&set, "model.layers.%d.layer_scalar", l), "layer %d: no layer_scalar", l);
      ck_assert_int_eq(has_tensor(&set, "model.layers.%d.self_attn.k_proj.weight", l), !shared);
      ck_assert_int_eq(has_tensor(&set, "model.layers.%d.self_attn.k_norm.weight", l), !shared);
      ck_assert_int_eq(has_tensor(&set, "model.layers.%d.self_attn.v_proj.weight", l), !shared && !kev);
      ck_assert_int_eq(has_tensor(&set, "model.layers.%d.self_attn.v_norm.weight", l), 0);
    }
    if (c.hidden_size_per_layer_input) {
      int64_t LP = c.base_num_decoder_layers * c.hidden_size_per_layer_input;
      const gt_st_tensor *t = gt_st_set_find(&set, "model.embed_tokens_per_layer.weight");
      ck_assert(t && t->ndim == 2 && t->shape[0] == c.vocab_size_per_layer_input && t->shape[1] == LP);
      t = gt_st_set_find(&set, "model.per_layer_model_projection.weight");
      ck_assert(t && t->shape[0] == LP && t->shape[1] == c.base_emb_dim);
      t = gt_st_set_find(&set, "model.per_layer_projection_norm.weight");
      ck_assert(t && t->ndim == 1 && t->shape[0] == c.hidden_size_per_layer_input);
      ck_assert(has_tensor(&set, "model.layers.%d.per_layer_input_gate.weight", 3));
    }
    gt_st_set_close(&set);
    gt_model_free(&a);
    gt_model_free(&b);
    free(d1), free(d2);
  }
}
END_TEST

/* layer_scalar is a buffer in HF: written even when gemtrain does not train
 * it (as the constant 1), and on import used only when it is a parameter. */
START_TEST(test_layer_scalar_buffer) {
  const char *ov_t[] = {"model_name=gemma4-tiny-ple"};
  const char *ov_f[] = {"model_name=gemma4-tiny-ple", "layer_scalar_trainable=false"};
  gt_config ct, cf;
  gt_test_config(&ct, 1, ov_t);
  gt_test_config(&cf, 2, ov_f);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model t, f, g;
  random_model4(&t, &mem, &ct, 50);
  random_model4(&f, &mem, &cf, 51);
  char *dt = gt_test_dir_path("trained"), *df = gt_test_dir_path("fixed");
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_export(&f, &cf, df, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.n_tensors, f.n_tensors + 10); /* the table, and 10 scalars */
  gt_st_set set;
  ck_assert_msg(gt_st_set_open(&set, df, &e) == GT_OK, "%s", e.msg);
  for (int l = 0; l < (int)cf.base_num_decoder_layers; l++) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.layer_scalar", l);
    const gt_st_tensor *s = gt_st_set_find(&set, name);
    ck_assert_msg(s && s->ndim == 1 && s->shape[0] == 1, "%s", name);
    float v = 0;
    ck_assert_int_eq(gt_st_read_f32(s, &v, 1, &e), GT_OK);
    ck_assert(v == 1.0f);
  }
  gt_st_set_close(&set);
  /* trained scalars (random, not 1) read by a model that does not train
   * them: skipped and counted; every other tensor loads */
  ck_assert_msg(gt_hf_export(&t, &ct, dt, &o, NULL, &e) == GT_OK, "%s", e.msg);
  gt_config c2 = cf;
  ck_assert_msg(gt_hf_load_model(dt, &c2, &g, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c2.layer_scalar_trainable, 0);
  ck_assert_int_eq(info.n_unused_scalars, 10);
  ck_assert_int_eq(info.n_unused_scalars_not_one, 10);
  ck_assert_int_eq(info.n_ignored, 0);
  for (int i = 0; i < g.n_tensors; i++) {
    const gt_tensor_info *w = gt_model_find_tensor(&t, g.tensors[i].name);
    ck_assert_ptr_nonnull(w);
    ck_assert(!memcmp(g.params + g.tensors[i].offset, t.params + w->offset, sizeof(float) * (size_t)w->numel));
  }
  gt_model_free(&g);
  /* the fixed model's ones, read by a model that trains them */
  c2 = ct;
  ck_assert_msg(gt_hf_load_model(df, &c2, &g, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.n_unused_scalars, 0);
  for (int l = 0; l < (int)ct.base_num_decoder_layers; l++)
    ck_assert(g.params[g.layers[l].slot_offset[GT_P_LAYER_SCALAR]] == 1.0f);
  gt_model_free(&g);
  gt_model_free(&t);
  gt_model_free(&f);
  free(dt), free(df);
}
END_TEST

/* Gemma4ForConditionalGeneration's layout: tensors under
 * model.language_model., towers beside them, and (as some exports have) the
 * k/v tensors of KV-shared layers, which transformers drops on load. */
START_TEST(test_gemma4_wrapper_and_shared_kv) {
  const char *ov[] = {"model_name=gemma4-tiny-ple"};
  gt_config c;
  gt_test_config(&c, 1, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model4(&a, &mem, &c, 60);
  /* multiples of 1/64 below 2 in magnitude: exact in BF16 */
  for (int64_t i = 0; i < a.n_params; i++) a.params[i] = (float)((int)(a.params[i] * 64.0f)) / 64.0f;
  char *d = gt_test_dir_path("g4mm");
  gt_test_system("mkdir -p '%s'", d);
  int nshared = (int)c.num_kv_shared_layers, n = a.n_tensors + 3 * nshared + 1;
  gt_st_wtensor *w = calloc((size_t)n, sizeof *w);
  char(*names)[160] = calloc((size_t)n, sizeof *names);
  int k = model_entries(&a, "model.language_model.", w, names);
  static float junk[64 * 64]; /* the largest: a global shared layer's [32, 64] */
  for (int l = (int)c.base_num_decoder_layers - nshared; l < c.base_num_decoder_layers; l++) {
    int hd = (int)gt_config_layer_head_dim(&c, l);
    const char *kv[] = {"k_proj.weight", "v_proj.weight", "k_norm.weight"};
    for (int j = 0; j < 3; j++, k++) {
      snprintf(names[k], sizeof names[k], "model.language_model.layers.%d.self_attn.%s", l, kv[j]);
      w[k] = j < 2 ? (gt_st_wtensor){names[k], GT_DT_BF16, 2, {hd, 64}, junk}
                   : (gt_st_wtensor){names[k], GT_DT_BF16, 1, {hd}, junk};
    }
  }
  w[k++] = (gt_st_wtensor){"model.vision_tower.encoder.layers.0.mlp.fc1.weight", GT_DT_BF16, 2, {4, 16}, junk};
  ck_assert_int_eq(k, n);
  gt_err e;
  ck_assert_msg(gt_st_write_sharded(d, n, w, 0, &e) == GT_OK, "%s", e.msg);
  write_wrapper_config(d, &c, "Gemma4ForConditionalGeneration", "gemma4", "gemma4_vision");
  gt_config c2;
  tiny_cfg(&c2);
  gt_hf_info info;
  ck_assert_msg(gt_hf_load_model(d, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
  expect_same_model4(&c, &c2);
  ck_assert_str_eq(info.architecture, "Gemma4ForConditionalGeneration");
  ck_assert_str_eq(info.prefix, "model.language_model.");
  ck_assert_int_eq(info.n_unused_shared_kv, 3 * nshared);
  ck_assert_int_eq(info.n_ignored, 1);
  ck_assert_str_eq(info.first_ignored, "model.vision_tower.encoder.layers.0.mlp.fc1.weight");
  expect_same_params(&a, &b);
  gt_model_free(&a);
  gt_model_free(&b);
  free(names);
  free(w);
  free(d);
}
END_TEST

/* Gemma 4's HF table has the 262144 rows itself: no padding either way. */
START_TEST(test_gemma4_vocab_not_padded) {
  const char *ov[] = {"model_name=gemma4-tiny-dense", "vocab_size=262144", "base_emb_dim=8", "base_mlp_dim=8",
                      "head_dim=4", "global_head_dim=8"};
  gt_config c, c2;
  gt_test_config(&c, 6, ov);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model a, b;
  random_model4(&a, &mem, &c, 70);
  char *d = gt_test_dir_path("g4v");
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_hf_info info;
  gt_err e;
  ck_assert_msg(gt_hf_export(&a, &c, d, &o, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(info.embed_rows, 262144);
  ck_assert_int_eq(gt_test_system("grep -q '\"vocab_size\":.*262144,' '%s/config.json'", d), 0);
  tiny_cfg(&c2);
  ck_assert_msg(gt_hf_load_model(d, &c2, &b, &mem, &info, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c2.vocab_size, 262144);
  ck_assert(memcmp(a.params, b.params, sizeof(float) * (size_t)a.n_params) == 0);
  gt_model_free(&a);
  gt_model_free(&b);
  free(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_config_roundtrip);
  tcase_add_test(tc, test_config_hub_4b_wrapper);
  tcase_add_test(tc, test_config_rope_parameters);
  tcase_add_test(tc, test_config_refusals);
  tcase_add_test(tc, test_export_import_bit_identical);
  tcase_add_test(tc, test_bf16_export_rounding);
  tcase_add_test(tc, test_vocab_pad_truncate);
  tcase_add_test(tc, test_multimodal_prefixes);
  tcase_add_test(tc, test_missing_and_bad_shapes);
  tcase_add_test(tc, test_nonfinite_weights_refused);
  tcase_add_test(tc, test_paramfile_roundtrip);
  tcase_add_test(tc, test_config4_presets);
  tcase_add_test(tc, test_config4_moe_preset);
  tcase_add_test(tc, test_config4_defaults_and_wrapper);
  tcase_add_test(tc, test_config4_refusals);
  tcase_add_test(tc, test_export_import4_bit_identical);
  tcase_add_test(tc, test_layer_scalar_buffer);
  tcase_add_test(tc, test_gemma4_wrapper_and_shared_kv);
  tcase_add_test(tc, test_gemma4_vocab_not_padded);
  return gt_test_run_suite(s, 0);
}
