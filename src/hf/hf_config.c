/* Hugging Face config.json <-> gt_config (see hf.h): the model_type
 * dispatch, the typed key readers (hf_internal.h) and Gemma 3; Gemma 4 is in
 * hf_config4.c.
 *
 * Reading follows transformers' Gemma3TextConfig: a key the file omits takes
 * that class's default (hub configs of the multimodal models list only what
 * differs, e.g. the 4b's text_config has no vocab_size and so means 262208),
 * layer_types wins over the older sliding_window_pattern, and RoPE comes
 * either as rope_theta / rope_local_base_freq / rope_scaling (transformers
 * 4.50+) or as per-layer-type rope_parameters (newer releases). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf/hf_internal.h"

/* Gemma3TextConfig's defaults (configuration_gemma3.py). */
#define GT__HF_DEF_VOCAB 262208
#define GT__HF_DEF_HIDDEN 2304
#define GT__HF_DEF_FFN 9216
#define GT__HF_DEF_LAYERS 26
#define GT__HF_DEF_HEADS 8
#define GT__HF_DEF_KV 4
#define GT__HF_DEF_HEAD_DIM 256
#define GT__HF_DEF_MAX_POS 131072
#define GT__HF_DEF_WINDOW 4096
#define GT__HF_DEF_PATTERN 6

const char *gt__hf_kind(const cJSON *j) {
  if (cJSON_IsNull(j)) return "null";
  if (cJSON_IsBool(j)) return "boolean";
  if (cJSON_IsNumber(j)) return "number";
  if (cJSON_IsString(j)) return "string";
  if (cJSON_IsArray(j)) return "array";
  return "object";
}

gt_rc gt__hf_int(const gt__hfc *h, const char *key, long long def, long long lo, long long hi, long long *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(h->obj, key);
  if (!j) return *out = def, GT_OK;
  if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is a JSON %s%s, expected an integer", h->where, key,
                      gt__hf_kind(j), cJSON_IsNumber(j) ? " with a fraction" : "");
  if (j->valuedouble < (double)lo || j->valuedouble > (double)hi)
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' = %.17g is out of range; gemtrain allows %lld .. %lld",
                      h->where, key, j->valuedouble, lo, hi);
  *out = (long long)j->valuedouble;
  return GT_OK;
}

gt_rc gt__hf_num_in(const gt__hfc *h, const cJSON *obj, const char *key, double def, double null_value,
                           double *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!j) return *out = def, GT_OK;
  if (cJSON_IsNull(j) && !isnan(null_value)) return *out = null_value, GT_OK;
  if (!cJSON_IsNumber(j) || !(j->valuedouble > 0))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is %s%s, expected a positive number", h->where, key,
                      cJSON_IsNumber(j) ? "" : "a JSON ", cJSON_IsNumber(j) ? "not positive" : gt__hf_kind(j));
  *out = j->valuedouble;
  return GT_OK;
}

gt_rc gt__hf_require(const gt__hfc *h, const char *key, const char *want_text,
                            int (*ok)(const cJSON *)) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(h->obj, key);
  if (!j || ok(j)) return GT_OK;
  char *v = cJSON_PrintUnformatted(j);
  gt_rc rc = gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' = %.60s is not supported; gemtrain runs %s", h->where,
                        key, v ? v : "?", want_text);
  free(v);
  return rc;
}

int gt__hf_is_gelu_tanh(const cJSON *j) { return cJSON_IsString(j) && !strcmp(j->valuestring, "gelu_pytorch_tanh"); }
int gt__hf_is_null(const cJSON *j) { return cJSON_IsNull(j); }
int gt__hf_is_false(const cJSON *j) { return cJSON_IsFalse(j) || cJSON_IsNull(j); }
int gt__hf_is_true(const cJSON *j) { return cJSON_IsTrue(j); }

gt_rc gt__hf_bool(const gt__hfc *h, const char *key, int def, int *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(h->obj, key);
  if (!j) return *out = def, GT_OK;
  if (!cJSON_IsBool(j) && !cJSON_IsNull(j))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is a JSON %s, expected true or false", h->where, key,
                      gt__hf_kind(j));
  *out = cJSON_IsTrue(j);
  return GT_OK;
}

/* {"rope_type" (or the older "type"): "default" | "linear", "factor": s}.
 * need_type: the object must name its type (rope_scaling: transformers
 * versions that read rope_scaling fail on one without, newer ones fold it
 * into rope_parameters as "default" and drop its factor, so no reading is
 * sure to be the file's); a rope_parameters entry without one is read as
 * "default". */
static gt_rc gt__hf_rope_kind(const gt__hfc *h, const cJSON *r, const char *key, int allow_linear, int need_type,
                              double *scale) {
  *scale = 1.0;
  if (!r || cJSON_IsNull(r)) return GT_OK;
  if (!cJSON_IsObject(r))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is a JSON %s, expected an object or null", h->where,
                      key, gt__hf_kind(r));
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
  if (!t) t = cJSON_GetObjectItemCaseSensitive(r, "type");
  if (!t && need_type) {
    char *shown = cJSON_PrintUnformatted(r);
    gt_rc rc = gt_err_set(h->err, GT_ERR_CONFIG,
                          "hf: %s: key '%s' is %.120s, with neither 'rope_type' nor 'type'; expected "
                          "{\"rope_type\": \"linear\", \"factor\": ...}, or null for no scaling",
                          h->where, key, shown ? shown : "an object");
    free(shown);
    return rc;
  }
  const char *type = cJSON_IsString(t) ? t->valuestring : "default";
  if (!strcmp(type, "default")) return GT_OK;
  if (strcmp(type, "linear") || !allow_linear)
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' has rope_type '%.40s'; gemtrain supports %s", h->where,
                      key, type, allow_linear ? "default or linear" : "default (local layers are never scaled)");
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "factor");
  if (!cJSON_IsNumber(f) || !(f->valuedouble > 0))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s.factor' is %s, expected a positive number", h->where,
                      key, f ? (cJSON_IsNumber(f) ? "not positive" : gt__hf_kind(f)) : "missing");
  *scale = f->valuedouble;
  return GT_OK;
}

gt_rc gt__hf_layer_types(const gt__hfc *h, long long L, char *kinds, int *found) {
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(h->obj, "layer_types");
  *found = lt && !cJSON_IsNull(lt);
  if (!*found) return GT_OK;
  if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != L)
    return gt_err_set(h->err, GT_ERR_CONFIG,
                      "hf: %s: key 'layer_types' must list one type per layer (num_hidden_layers = %lld), found %s "
                      "of %d",
                      h->where, L, gt__hf_kind(lt), cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0);
  long long i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, lt) {
    const char *s = cJSON_IsString(e) ? e->valuestring : "";
    if (!strcmp(s, "sliding_attention"))
      kinds[i] = 0;
    else if (!strcmp(s, "full_attention"))
      kinds[i] = 1;
    else
      return gt_err_set(h->err, GT_ERR_CONFIG,
                        "hf: %s: key 'layer_types'[%lld] is '%.40s'; expected sliding_attention or full_attention",
                        h->where, i, s);
    i++;
  }
  return GT_OK;
}

const char *gt__hf_layer_type_name(const gt_config *cfg, long long i) {
  return gt_config_layer_is_global(cfg, i) ? "full_attention" : "sliding_attention";
}

/* layer_types or sliding_window_pattern -> kinds[L] (1 = global). */
static gt_rc gt__hf_layer_kinds(const gt__hfc *h, long long L, char *kinds) {
  int found;
  gt_rc rc = gt__hf_layer_types(h, L, kinds, &found);
  if (rc || found) return rc;
  long long p;
  rc = gt__hf_int(h, "sliding_window_pattern", GT__HF_DEF_PATTERN, 1, 1 << 20, &p);
  if (rc) return rc;
  for (long long i = 0; i < L; i++) kinds[i] = (i + 1) % p == 0;
  return GT_OK;
}

/* The shortest layer_pattern that, repeated, gives kinds[0..L). */
gt_rc gt__hf_pattern(const gt__hfc *h, const char *kinds, long long L, char *pat, size_t n) {
  for (long long per = 1; per <= L && per < (long long)n; per++) {
    long long i = per;
    while (i < L && kinds[i] == kinds[i % per]) i++;
    if (i < L) continue;
    for (long long j = 0; j < per; j++) pat[j] = kinds[j] ? 'G' : 'L';
    pat[per] = '\0';
    return GT_OK;
  }
  return gt_err_set(h->err, GT_ERR_CONFIG,
                    "hf: %s: the layer types do not repeat with a period of at most %zu layers, which is what "
                    "gemtrain's layer_pattern can hold",
                    h->where, n - 1);
}

static gt_rc gt__hf_rope(const gt__hfc *h, gt_config *cfg) {
  double global = 1e6, local = 1e4, scale = 1.0, ls;
  gt_rc rc;
  if ((rc = gt__hf_num_in(h, h->obj, "rope_theta", global, NAN, &global)) ||
      (rc = gt__hf_num_in(h, h->obj, "rope_local_base_freq", local, NAN, &local)) ||
      (rc = gt__hf_rope_kind(h, cJSON_GetObjectItemCaseSensitive(h->obj, "rope_scaling"), "rope_scaling", 1, 1, &scale)))
    return rc;
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(h->obj, "rope_parameters");
  if (rp && !cJSON_IsNull(rp)) {
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    const cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
    if (!cJSON_IsObject(full) && !cJSON_IsObject(slide)) full = rp; /* one set for every layer type */
    if (cJSON_IsObject(full) &&
        ((rc = gt__hf_rope_kind(h, full, "rope_parameters.full_attention", 1, 0, &scale)) ||
         (rc = gt__hf_num_in(h, full, "rope_theta", global, NAN, &global))))
      return rc;
    if (cJSON_IsObject(slide) &&
        ((rc = gt__hf_rope_kind(h, slide, "rope_parameters.sliding_attention", 0, 0, &ls)) ||
         (rc = gt__hf_num_in(h, slide, "rope_theta", local, NAN, &local))))
      return rc;
  }
  cfg->rope_max_timescale = global;
  cfg->local_rope_max_timescale = local;
  cfg->rope_linear_scaling_factor = scale;
  return GT_OK;
}

static gt_rc gt__hf_text_config(const gt__hfc *h, gt_config *cfg, gt_hf_info *info) {
  gt_rc rc;
  long long V, d, F, L, H, K, hd, maxpos, W;
  if ((rc = gt__hf_int(h, "vocab_size", GT__HF_DEF_VOCAB, 4, 100000000, &V)) ||
      (rc = gt__hf_int(h, "hidden_size", GT__HF_DEF_HIDDEN, 1, 1 << 20, &d)) ||
      (rc = gt__hf_int(h, "intermediate_size", GT__HF_DEF_FFN, 1, 1 << 24, &F)) ||
      (rc = gt__hf_int(h, "num_hidden_layers", GT__HF_DEF_LAYERS, 1, 4096, &L)) ||
      (rc = gt__hf_int(h, "num_attention_heads", GT__HF_DEF_HEADS, 1, 4096, &H)) ||
      (rc = gt__hf_int(h, "num_key_value_heads", GT__HF_DEF_KV, 1, 4096, &K)) ||
      (rc = gt__hf_int(h, "head_dim", GT__HF_DEF_HEAD_DIM, 2, 8192, &hd)) ||
      (rc = gt__hf_int(h, "max_position_embeddings", GT__HF_DEF_MAX_POS, 1, 1LL << 40, &maxpos)) ||
      (rc = gt__hf_int(h, "sliding_window", GT__HF_DEF_WINDOW, 1, 1000000000000LL, &W)))
    return rc;
  double qpas, eps, cap;
  if ((rc = gt__hf_num_in(h, h->obj, "query_pre_attn_scalar", 256, NAN, &qpas)) ||
      (rc = gt__hf_num_in(h, h->obj, "rms_norm_eps", 1e-6, NAN, &eps)) ||
      (rc = gt__hf_num_in(h, h->obj, "final_logit_softcapping", 0.0, 0.0, &cap)))
    return rc;
  if ((rc = gt__hf_require(h, "hidden_activation", "gelu_pytorch_tanh (GeGLU with tanh GELU)", gt__hf_is_gelu_tanh)) ||
      (rc = gt__hf_require(h, "hidden_act", "gelu_pytorch_tanh (GeGLU with tanh GELU)", gt__hf_is_gelu_tanh)) ||
      (rc = gt__hf_require(h, "attn_logit_softcapping", "no attention soft-cap (null), as Gemma 3", gt__hf_is_null)) ||
      (rc = gt__hf_require(h, "attention_bias", "projections without bias (false)", gt__hf_is_false)) ||
      (rc = gt__hf_require(h, "use_bidirectional_attention", "causal attention (false)", gt__hf_is_false)) ||
      (rc = gt__hf_require(h, "tie_word_embeddings", "the tied output head (true)", gt__hf_is_true)))
    return rc;
  if (eps >= 1)
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key 'rms_norm_eps' = %g, expected below 1", h->where, eps);
  char *kinds = malloc((size_t)L);
  if (!kinds) return gt_err_set(h->err, GT_ERR_NOMEM, "hf: no memory for %lld layer kinds", L);
  char pat[GT_STR_SHORT];
  rc = gt__hf_layer_kinds(h, L, kinds);
  if (rc == GT_OK) rc = gt__hf_pattern(h, kinds, L, pat, sizeof pat);
  free(kinds);
  if (rc || (rc = gt__hf_rope(h, cfg))) return rc;

  snprintf(cfg->decoder_block, sizeof cfg->decoder_block, "gemma3");
  /* a Gemma 3 file says nothing of the Gemma 4 keys: their gemma3 values */
  cfg->global_head_dim = cfg->global_num_kv_heads = 0;
  cfg->share_kv_projections = cfg->v_norm_with_scale = cfg->use_double_wide_mlp = 0;
  cfg->global_rope_proportion = cfg->local_rope_proportion = 1.0;
  cfg->hidden_size_per_layer_input = cfg->vocab_size_per_layer_input = cfg->num_kv_shared_layers = 0;
  if (gt__hf_set_dense(cfg)) return gt_err_set(h->err, GT_ERR_INTERNAL, "hf: cannot reset key 'num_experts'");
  /* The extra HF rows are the image token and padding, not vocabulary. */
  cfg->vocab_size = V == GT_HF_GEMMA3_ROWS ? GT_HF_GEMMA3_VOCAB : V;
  cfg->base_emb_dim = d;
  cfg->base_mlp_dim = F;
  cfg->base_num_decoder_layers = L;
  cfg->base_num_query_heads = H;
  cfg->base_num_kv_heads = K;
  cfg->head_dim = hd;
  cfg->sliding_window_size = W;
  snprintf(cfg->layer_pattern, sizeof cfg->layer_pattern, "%s", pat);
  cfg->query_pre_attn_scalar = qpas;
  cfg->normalization_layer_epsilon = eps;
  cfg->final_logits_soft_cap = cap;
  return gt__hf_finish(h, cfg, info, maxpos, V);
}

/* The end of reading a text config: what the caller wants to know about the
 * file, and gemtrain's own validation of the model it describes. */
gt_rc gt__hf_finish(const gt__hfc *h, gt_config *cfg, gt_hf_info *info, long long maxpos, long long V) {
  if (info) {
    info->max_position_embeddings = maxpos;
    info->embed_rows = V;
  }
  gt_err sub;
  gt_err_clear(&sub);
  if (gt_config_validate(cfg, &sub))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s describes a model gemtrain refuses: %s", h->where, sub.msg);
  return GT_OK;
}

typedef gt_rc (*gt__hf_text_fn)(const gt__hfc *, gt_config *, gt_hf_info *);

/* The model types gemtrain reads: the text-only class, and the multimodal
 * wrapper whose text_config is the decoder. */
static const struct {
  const char *text_type, *wrapper_type, *text_arch, *wrapper_arch;
  gt__hf_text_fn parse;
} gt__hf_families[] = {
    {"gemma3_text", "gemma3", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", gt__hf_text_config},
    {"gemma4_text", "gemma4", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", gt__hf4_text_config},
};
#define GT__HF_NFAMILIES ((int)(sizeof gt__hf_families / sizeof gt__hf_families[0]))

gt_rc gt_hf_config_parse(const char *json, const char *where, gt_config *cfg, gt_hf_info *info, gt_err *err) {
  cJSON *root = json ? cJSON_Parse(json) : NULL;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return gt_err_set(err, GT_ERR_CONFIG, "hf: %s is not a JSON object", where);
  }
  gt__hfc h = {root, where, err};
  gt_rc rc = GT_OK;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  const char *type = cJSON_IsString(mt) ? mt->valuestring : "";
  if (info) memset(info, 0, sizeof *info);
  int fam = -1, wrapper = 0;
  for (int i = 0; i < GT__HF_NFAMILIES && fam < 0; i++) {
    if (!strcmp(type, gt__hf_families[i].text_type)) fam = i;
    if (!strcmp(type, gt__hf_families[i].wrapper_type)) fam = i, wrapper = 1;
  }
  if (fam < 0) {
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "hf: %s: key 'model_type' is '%.40s'; gemtrain reads gemma3_text (Gemma3ForCausalLM), gemma3 "
                    "(Gemma3ForConditionalGeneration), gemma4_text (Gemma4ForCausalLM) and gemma4 "
                    "(Gemma4ForConditionalGeneration)",
                    where, mt ? (cJSON_IsString(mt) ? mt->valuestring : "(not a string)") : "(missing)");
  } else if (!wrapper) {
    rc = gt__hf_families[fam].parse(&h, cfg, info);
  } else {
    /* the multimodal wrapper: the decoder is text_config (absent: the text
     * class's defaults, as transformers builds it) */
    const char *text_type = gt__hf_families[fam].text_type;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cJSON *empty = NULL;
    if (!tc || cJSON_IsNull(tc)) tc = empty = cJSON_CreateObject();
    if (!cJSON_IsObject(tc)) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "hf: %s: key 'text_config' is a JSON %s, expected an object", where,
                      gt__hf_kind(tc));
    } else {
      const cJSON *tmt = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
      if (tmt && !(cJSON_IsString(tmt) && !strcmp(tmt->valuestring, text_type)))
        rc = gt_err_set(err, GT_ERR_CONFIG, "hf: %s: key 'text_config.model_type' is not %s", where, text_type);
      h.obj = tc;
      if (rc == GT_OK) rc = gt__hf_families[fam].parse(&h, cfg, info);
    }
    cJSON_Delete(empty);
  }
  if (info && fam >= 0) {
    info->multimodal = wrapper;
    snprintf(info->architecture, sizeof info->architecture, "%s",
             wrapper ? gt__hf_families[fam].wrapper_arch : gt__hf_families[fam].text_arch);
  }
  cJSON_Delete(root);
  return rc;
}

gt_rc gt_hf_config_read(const char *path, gt_config *cfg, gt_hf_info *info, gt_err *err) {
  char file[GT_STR_PATH + 16];
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    snprintf(file, sizeof file, "%s/config.json", path);
  else
    snprintf(file, sizeof file, "%s", path);
  char *buf;
  size_t n;
  gt_rc rc = gt_read_file(file, "hf: config", &buf, &n, err);
  if (rc) return rc;
  char where[GT_STR_PATH + 32];
  snprintf(where, sizeof where, "'%s'", file);
  rc = gt_hf_config_parse(buf, where, cfg, info, err);
  free(buf);
  return rc;
}

gt_rc gt_hf_config_exportable(const gt_config *cfg, gt_err *err) {
  if (gt_config_is_gemma4(cfg)) return gt__hf4_exportable(cfg, err);
  /* Gemma3TextConfig (transformers, @strict) declares query_pre_attn_scalar
   * an int: a fractional scale has no form it loads */
  if (cfg->query_pre_attn_scalar != floor(cfg->query_pre_attn_scalar) || cfg->query_pre_attn_scalar > 1e15)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'query_pre_attn_scalar' = %g; Hugging Face's Gemma3TextConfig declares it an int "
                      "(expected a whole number)",
                      cfg->query_pre_attn_scalar);
  return GT_OK;
}

void gt__hf_add_float(cJSON *o, const char *key, double v) {
  char t[40];
  if (gt_json_float_text(v, t, sizeof t))
    cJSON_AddNullToObject(o, key);
  else
    cJSON_AddRawToObject(o, key, t);
}

char *gt_hf_config_to_json(const gt_config *cfg, long long embed_rows, const char *torch_dtype) {
  if (gt_config_is_gemma4(cfg)) return gt__hf4_config_to_json(cfg, torch_dtype);
  cJSON *o = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("Gemma3ForCausalLM"));
  cJSON_AddStringToObject(o, "model_type", "gemma3_text");
  cJSON_AddBoolToObject(o, "attention_bias", 0);
  gt__hf_add_float(o, "attention_dropout", 0.0);
  cJSON_AddNullToObject(o, "attn_logit_softcapping");
  cJSON_AddNumberToObject(o, "bos_token_id", 2);
  cJSON_AddNumberToObject(o, "eos_token_id", 1);
  cJSON_AddNumberToObject(o, "pad_token_id", 0);
  if (cfg->final_logits_soft_cap > 0)
    gt__hf_add_float(o, "final_logit_softcapping", cfg->final_logits_soft_cap);
  else
    cJSON_AddNullToObject(o, "final_logit_softcapping");
  cJSON_AddNumberToObject(o, "head_dim", (double)cfg->head_dim);
  cJSON_AddStringToObject(o, "hidden_activation", "gelu_pytorch_tanh");
  cJSON_AddNumberToObject(o, "hidden_size", (double)cfg->base_emb_dim);
  gt__hf_add_float(o, "initializer_range", 0.02);
  cJSON_AddNumberToObject(o, "intermediate_size", (double)cfg->base_mlp_dim);
  cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
  for (long long i = 0; i < cfg->base_num_decoder_layers; i++)
    cJSON_AddItemToArray(lt, cJSON_CreateString(gt__hf_layer_type_name(cfg, i)));
  /* gemtrain has no context limit of its own; HF's default unless the
   * configured sequences are longer. */
  long long maxpos = cfg->max_target_length > 131072 ? cfg->max_target_length : 131072;
  cJSON_AddNumberToObject(o, "max_position_embeddings", (double)maxpos);
  cJSON_AddNumberToObject(o, "num_attention_heads", (double)cfg->base_num_query_heads);
  cJSON_AddNumberToObject(o, "num_hidden_layers", (double)cfg->base_num_decoder_layers);
  cJSON_AddNumberToObject(o, "num_key_value_heads", (double)cfg->base_num_kv_heads);
  cJSON_AddNumberToObject(o, "query_pre_attn_scalar", (double)llround(cfg->query_pre_attn_scalar)); /* an int: see gt_hf_config_exportable */
  gt__hf_add_float(o, "rms_norm_eps", cfg->normalization_layer_epsilon);
  gt__hf_add_float(o, "rope_local_base_freq", cfg->local_rope_max_timescale);
  if (cfg->rope_linear_scaling_factor != 1.0) {
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    gt__hf_add_float(rs, "factor", cfg->rope_linear_scaling_factor);
    cJSON_AddStringToObject(rs, "rope_type", "linear");
  } else {
    cJSON_AddNullToObject(o, "rope_scaling");
  }
  gt__hf_add_float(o, "rope_theta", cfg->rope_max_timescale);
  cJSON_AddNumberToObject(o, "sliding_window", (double)cfg->sliding_window_size);
  /* Older transformers read only this: write it when the pattern is
   * "L...LG", the only shape it can express. */
  size_t pl = strlen(cfg->layer_pattern);
  int simple = pl > 0 && cfg->layer_pattern[pl - 1] == 'G';
  for (size_t i = 0; i + 1 < pl; i++) simple &= cfg->layer_pattern[i] == 'L';
  if (simple) cJSON_AddNumberToObject(o, "sliding_window_pattern", (double)pl);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
  cJSON_AddStringToObject(o, "torch_dtype", torch_dtype);
  /* the first transformers release with Gemma 3; transformers records the
   * version that wrote a file here and does not check it on loading (the
   * layer_types above are read from 4.53 on: docs/huggingface.md) */
  cJSON_AddStringToObject(o, "transformers_version", "4.50.0");
  cJSON_AddBoolToObject(o, "use_cache", 1);
  cJSON_AddNumberToObject(o, "vocab_size", (double)embed_rows);
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  return s;
}
