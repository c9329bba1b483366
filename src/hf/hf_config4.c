/* Hugging Face Gemma 4 text config.json <-> gt_config (see hf.h).
 *
 * Field names and defaults are transformers' Gemma4TextConfig
 * (configuration_gemma4.py), read the way modeling_gemma4.py uses them:
 *  - global layers (layer_types "full_attention") use global_head_dim (null
 *    or 0: head_dim), and num_global_key_value_heads only when
 *    attention_k_eq_v is set (then they have no v_proj); without
 *    attention_k_eq_v they keep num_key_value_heads;
 *  - the last layer is always full_attention (transformers forces it);
 *  - RoPE is rope_parameters per layer type: "default" (the whole head) or
 *    "proportional" (partial_rotary_factor of the rotary pairs, frequencies
 *    over the whole head dim, optional linear "factor"), which is what
 *    gemtrain's *_rope_proportion keys compute;
 *  - attention is scaled by 1 (no query_pre_attn_scalar field), v_norm has no
 *    weight, layer_scalar is a buffer (not part of the config);
 *  - hidden_size_per_layer_input defaults to 256: a file that omits it has
 *    per-layer embeddings;
 *  - the MoE block (enable_moe_block, num_experts, top_k_experts,
 *    moe_intermediate_size) sits on every layer beside the dense MLP
 *    (intermediate_size), which is its one shared expert.
 * transformers releases differ on num_global_key_value_heads = null with
 * attention_k_eq_v: older ones fail, newer ones fall back to
 * num_key_value_heads; gemtrain reads it as the newer ones do. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf_internal.h"

/* Gemma4TextConfig's defaults (configuration_gemma4.py). */
#define GT__HF4_DEF_VOCAB 262144
#define GT__HF4_DEF_HIDDEN 2304
#define GT__HF4_DEF_FFN 9216
#define GT__HF4_DEF_LAYERS 30
#define GT__HF4_DEF_HEADS 8
#define GT__HF4_DEF_KV 4
#define GT__HF4_DEF_HEAD_DIM 256
#define GT__HF4_DEF_GLOBAL_HEAD_DIM 512
#define GT__HF4_DEF_MAX_POS 131072
#define GT__HF4_DEF_WINDOW 512
#define GT__HF4_DEF_PLE_DIM 256
#define GT__HF4_DEF_PLE_VOCAB 262144
#define GT__HF4_PATTERN 6 /* layer_types when absent: 5 sliding, 1 full */

/* ---- reading ---- */

/* An integer key that may be null (null_value then). */
static gt_rc gt__hf4_int_or_null(const gt__hfc *h, const char *key, long long def, long long null_value, long long lo,
                                 long long hi, long long *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(h->obj, key);
  if (j && cJSON_IsNull(j)) return *out = null_value, GT_OK;
  return gt__hf_int(h, key, def, lo, hi, out);
}

/* use_bidirectional_attention: null (causal), or "vision", which only opens
 * attention among image tokens; a text-only decoder stays causal. */
static int gt__hf4_causal(const cJSON *j) {
  return cJSON_IsNull(j) || cJSON_IsFalse(j) || (cJSON_IsString(j) && !strcmp(j->valuestring, "vision"));
}

/* A positive number in a rope_parameters entry (def when absent or null). */
static gt_rc gt__hf4_entry_num(const gt__hfc *h, const cJSON *r, const char *entry, const char *name, double def,
                               double *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(r, name);
  if (!j || cJSON_IsNull(j)) return *out = def, GT_OK;
  if (!cJSON_IsNumber(j) || !(j->valuedouble > 0))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s.%s' is %s, expected a positive number", h->where, entry,
                      name, cJSON_IsNumber(j) ? "not positive" : gt__hf_kind(j));
  *out = j->valuedouble;
  return GT_OK;
}

typedef struct gt__hf4_rope {
  double theta, fraction, factor;
} gt__hf4_rope;

/* rope_parameters[type]: "default" or "proportional". full: the
 * full_attention entry, whose head dim is global_head_dim (hd_differs: it is
 * not head_dim, which transformers' "default" RoPE would size its table by). */
static gt_rc gt__hf4_rope_entry(const gt__hfc *h, const cJSON *rp, const char *type, int full, int hd_differs,
                                gt__hf4_rope *out) {
  char key[64];
  snprintf(key, sizeof key, "rope_parameters.%s", type);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(rp, type);
  if (!cJSON_IsObject(r))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is %s%s, expected an object (Gemma 4 sets RoPE per "
                      "layer type)", h->where, key, r ? "a JSON " : "missing", r ? gt__hf_kind(r) : "");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
  const char *rt = cJSON_IsString(t) ? t->valuestring : "default";
  double theta_def = full ? 1e6 : 1e4;
  gt_rc rc;
  if ((rc = gt__hf4_entry_num(h, r, key, "rope_theta", theta_def, &out->theta))) return rc;
  out->fraction = 1.0;
  out->factor = 1.0;
  if (!strcmp(rt, "default")) {
    if (full && hd_differs)
      return gt_err_set(h->err, GT_ERR_CONFIG,
                        "hf: %s: key '%s' has rope_type 'default', which transformers sizes by head_dim while these "
                        "layers use global_head_dim; expected 'proportional'", h->where, key);
    return GT_OK;
  }
  if (strcmp(rt, "proportional"))
    return gt_err_set(h->err, GT_ERR_CONFIG,
                      "hf: %s: key '%s' has rope_type '%.40s'; gemtrain runs default or proportional (Gemma 4)",
                      h->where, key, rt);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "partial_rotary_factor");
  if (p && !(cJSON_IsNumber(p) && p->valuedouble >= 0 && p->valuedouble <= 1))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s.partial_rotary_factor' is %s, expected 0 .. 1",
                      h->where, key, cJSON_IsNumber(p) ? "out of range" : gt__hf_kind(p));
  if (p) out->fraction = p->valuedouble;
  if ((rc = gt__hf4_entry_num(h, r, key, "factor", 1.0, &out->factor))) return rc;
  if (!full && out->factor != 1.0)
    return gt_err_set(h->err, GT_ERR_CONFIG,
                      "hf: %s: key '%s.factor' = %g; gemtrain never scales local-layer positions (expected 1)",
                      h->where, key, out->factor);
  return GT_OK;
}

static gt_rc gt__hf4_ropes(const gt__hfc *h, const char *kinds, long long L, int hd_differs, gt_config *cfg) {
  gt__hf4_rope full = {1e6, 0.25, 1.0}, slide = {1e4, 1.0, 1.0}; /* transformers' defaults */
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(h->obj, "rope_parameters");
  if (rp && !cJSON_IsNull(rp)) {
    if (!cJSON_IsObject(rp))
      return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key 'rope_parameters' is a JSON %s, expected an object",
                        h->where, gt__hf_kind(rp));
    int any_full = 0, any_slide = 0;
    for (long long i = 0; i < L; i++) any_full |= kinds[i], any_slide |= !kinds[i];
    gt_rc rc;
    if (any_full && (rc = gt__hf4_rope_entry(h, rp, "full_attention", 1, hd_differs, &full))) return rc;
    if (any_slide && (rc = gt__hf4_rope_entry(h, rp, "sliding_attention", 0, 0, &slide))) return rc;
  } else if (cJSON_GetObjectItemCaseSensitive(h->obj, "rope_scaling")) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(h->obj, "rope_scaling");
    if (!cJSON_IsNull(rs))
      return gt_err_set(h->err, GT_ERR_CONFIG,
                        "hf: %s: key 'rope_scaling' is not read by Gemma 4 (it uses rope_parameters per layer type)",
                        h->where);
  }
  cfg->rope_max_timescale = full.theta;
  cfg->rope_linear_scaling_factor = full.factor;
  cfg->global_rope_proportion = full.fraction;
  cfg->local_rope_max_timescale = slide.theta;
  cfg->local_rope_proportion = slide.fraction;
  return GT_OK;
}

/* The key table entry of a MoE key, or NULL in a gemtrain without MoE. The
 * MoE keys are set and read by name so this file builds either way. */
static const gt_key_spec *gt__hf4_moe_key(const char *name) { return gt_config_key(name); }

static gt_rc gt__hf4_set_key(const gt__hfc *h, gt_config *cfg, const char *key, long long v, const char *hf_key) {
  char text[32];
  snprintf(text, sizeof text, "%lld", v);
  gt_err sub;
  gt_err_clear(&sub);
  if (gt_config_set(cfg, key, text, "hf", &sub))
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' = %lld cannot be gemtrain's '%s': %s", h->where,
                      hf_key, v, key, sub.msg);
  return GT_OK;
}

gt_rc gt__hf_set_dense(gt_config *cfg) {
  /* the smallest num_experts is the dense layer whichever way the key
   * counts (0 or 1 expert) */
  const gt_key_spec *ne = gt__hf4_moe_key("num_experts");
  if (!ne) return GT_OK;
  char text[32];
  snprintf(text, sizeof text, "%lld", (long long)ne->min);
  return gt_config_set(cfg, "num_experts", text, "hf", NULL);
}

static gt_rc gt__hf4_moe(const gt__hfc *h, gt_config *cfg) {
  int moe;
  gt_rc rc = gt__hf_bool(h, "enable_moe_block", 0, &moe);
  if (rc) return rc;
  if (!moe) {
    if (gt__hf_set_dense(cfg))
      return gt_err_set(h->err, GT_ERR_INTERNAL, "hf: %s: cannot reset key 'num_experts' for a dense model", h->where);
    return GT_OK;
  }
  static const char *const need[] = {"num_experts", "num_experts_per_tok", "base_moe_mlp_dim"};
  for (int i = 0; i < 3; i++)
    if (!gt__hf4_moe_key(need[i]))
      return gt_err_set(h->err, GT_ERR_CONFIG,
                        "hf: %s: key 'enable_moe_block' = true, but this gemtrain has no MoE layer (no config key "
                        "'%s')", h->where, need[i]);
  /* gemtrain key <- HF key; transformers has no default for these */
  static const char *const map[][2] = {
      {"num_experts", "num_experts"}, {"num_experts_per_tok", "top_k_experts"}, {"base_moe_mlp_dim", "moe_intermediate_size"}};
  for (int i = 0; i < 3; i++) {
    long long v;
    if ((rc = gt__hf4_int_or_null(h, map[i][1], -1, -1, 1, 1 << 24, &v))) return rc;
    if (v < 0)
      return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key '%s' is missing or null; enable_moe_block needs it",
                        h->where, map[i][1]);
    /* gemtrain's num_experts = 1 means a dense MLP; HF's is a one-expert MoE block */
    if (i == 0 && v < 2)
      return gt_err_set(h->err, GT_ERR_CONFIG,
                        "hf: %s: key 'num_experts' = %lld with enable_moe_block = true; gemtrain's MoE layer needs at "
                        "least 2 experts (its num_experts = 1 is a dense feed-forward)",
                        h->where, v);
    if ((rc = gt__hf4_set_key(h, cfg, map[i][0], v, map[i][1]))) return rc;
  }
  /* HF's MoE layer keeps its dense MLP beside the routed experts: one shared expert */
  if (gt__hf4_moe_key("shared_experts") && (rc = gt__hf4_set_key(h, cfg, "shared_experts", 1, "enable_moe_block")))
    return rc;
  return GT_OK;
}

gt_rc gt__hf4_text_config(const gt__hfc *h, gt_config *cfg, gt_hf_info *info) {
  gt_rc rc;
  long long V, d, F, L, H, K, hd, ghd, gK, maxpos, W, P, Vp, nshared;
  int kev, wide;
  if ((rc = gt__hf_int(h, "vocab_size", GT__HF4_DEF_VOCAB, 4, 100000000, &V)) ||
      (rc = gt__hf_int(h, "hidden_size", GT__HF4_DEF_HIDDEN, 1, 1 << 20, &d)) ||
      (rc = gt__hf_int(h, "intermediate_size", GT__HF4_DEF_FFN, 1, 1 << 24, &F)) ||
      (rc = gt__hf_int(h, "num_hidden_layers", GT__HF4_DEF_LAYERS, 1, 4096, &L)) ||
      (rc = gt__hf_int(h, "num_attention_heads", GT__HF4_DEF_HEADS, 1, 4096, &H)) ||
      (rc = gt__hf_int(h, "num_key_value_heads", GT__HF4_DEF_KV, 1, 4096, &K)) ||
      (rc = gt__hf_int(h, "head_dim", GT__HF4_DEF_HEAD_DIM, 2, 8192, &hd)) ||
      (rc = gt__hf4_int_or_null(h, "global_head_dim", GT__HF4_DEF_GLOBAL_HEAD_DIM, 0, 0, 8192, &ghd)) ||
      (rc = gt__hf_int(h, "max_position_embeddings", GT__HF4_DEF_MAX_POS, 1, 1LL << 40, &maxpos)) ||
      (rc = gt__hf_int(h, "sliding_window", GT__HF4_DEF_WINDOW, 1, 1000000000000LL, &W)) ||
      (rc = gt__hf4_int_or_null(h, "hidden_size_per_layer_input", GT__HF4_DEF_PLE_DIM, 0, 0, 1 << 16, &P)) ||
      (rc = gt__hf_int(h, "vocab_size_per_layer_input", GT__HF4_DEF_PLE_VOCAB, 1, 100000000, &Vp)) ||
      (rc = gt__hf_int(h, "num_kv_shared_layers", 0, 0, 4096, &nshared)) ||
      (rc = gt__hf_bool(h, "attention_k_eq_v", 0, &kev)) || (rc = gt__hf_bool(h, "use_double_wide_mlp", 0, &wide)))
    return rc;
  if (ghd == 0) ghd = hd; /* modeling: `global_head_dim if ... and config.global_head_dim else head_dim` */
  gK = 0;
  if (kev && (rc = gt__hf4_int_or_null(h, "num_global_key_value_heads", 0, 0, 1, 4096, &gK))) return rc;
  double eps, cap;
  if ((rc = gt__hf_num_in(h, h->obj, "rms_norm_eps", 1e-6, NAN, &eps)) ||
      (rc = gt__hf_num_in(h, h->obj, "final_logit_softcapping", 0.0, 0.0, &cap)))
    return rc;
  if ((rc = gt__hf_require(h, "hidden_activation", "gelu_pytorch_tanh (GeGLU with tanh GELU)", gt__hf_is_gelu_tanh)) ||
      (rc = gt__hf_require(h, "hidden_act", "gelu_pytorch_tanh (GeGLU with tanh GELU)", gt__hf_is_gelu_tanh)) ||
      (rc = gt__hf_require(h, "attn_logit_softcapping", "no attention soft-cap (null)", gt__hf_is_null)) ||
      (rc = gt__hf_require(h, "attention_bias", "projections without bias (false)", gt__hf_is_false)) ||
      (rc = gt__hf_require(h, "use_bidirectional_attention", "causal text attention (null or \"vision\")",
                           gt__hf4_causal)) ||
      (rc = gt__hf_require(h, "tie_word_embeddings", "the tied output head (true)", gt__hf_is_true)))
    return rc;
  if (eps >= 1)
    return gt_err_set(h->err, GT_ERR_CONFIG, "hf: %s: key 'rms_norm_eps' = %g, expected below 1", h->where, eps);
  char *kinds = malloc((size_t)L);
  if (!kinds) return gt_err_set(h->err, GT_ERR_NOMEM, "hf: no memory for %lld layer kinds", L);
  char pat[GT_STR_SHORT];
  int found;
  rc = gt__hf_layer_types(h, L, kinds, &found);
  if (rc == GT_OK) {
    if (!found)
      for (long long i = 0; i < L; i++) kinds[i] = (i + 1) % GT__HF4_PATTERN == 0;
    kinds[L - 1] = 1; /* Gemma4TextConfig forces the last layer to full_attention */
    rc = gt__hf_pattern(h, kinds, L, pat, sizeof pat);
  }
  if (rc == GT_OK) rc = gt__hf4_ropes(h, kinds, L, ghd != hd, cfg);
  free(kinds);
  if (rc || (rc = gt__hf4_moe(h, cfg))) return rc;

  snprintf(cfg->decoder_block, sizeof cfg->decoder_block, "%s", P > 0 || nshared > 0 ? "gemma4_small" : "gemma4");
  cfg->vocab_size = V;
  cfg->base_emb_dim = d;
  cfg->base_mlp_dim = F;
  cfg->base_num_decoder_layers = L;
  cfg->base_num_query_heads = H;
  cfg->base_num_kv_heads = K;
  cfg->head_dim = hd;
  cfg->global_head_dim = ghd;
  cfg->global_num_kv_heads = gK;
  cfg->share_kv_projections = kev;
  cfg->sliding_window_size = W;
  snprintf(cfg->layer_pattern, sizeof cfg->layer_pattern, "%s", pat);
  cfg->query_pre_attn_scalar = 1.0; /* Gemma4TextAttention.scaling = 1.0 */
  cfg->v_norm_with_scale = 0;       /* v_norm is Gemma4RMSNorm(with_scale=False) */
  cfg->hidden_size_per_layer_input = P;
  cfg->vocab_size_per_layer_input = P > 0 ? Vp : 0;
  cfg->num_kv_shared_layers = nshared;
  cfg->use_double_wide_mlp = wide;
  cfg->normalization_layer_epsilon = eps;
  cfg->final_logits_soft_cap = cap;
  return gt__hf_finish(h, cfg, info, maxpos, V);
}

/* ---- writing ---- */

/* The routed-expert layout, read from the model's tensor table (router and
 * expert tensors in HF's names and shapes): *E = 0 for a dense model. */
typedef struct gt__hf4_moe_shape {
  long long E, F, topk;
} gt__hf4_moe_shape;

static gt_rc gt__hf4_moe_layout(const gt_config *cfg, gt__hf4_moe_shape *ms, gt_err *err) {
  memset(ms, 0, sizeof *ms);
  gt_model m;
  gt_rc rc = gt_model_build(&m, cfg, err);
  if (rc) return rc;
  long long n_moe = 0;
  for (int64_t l = 0; l < m.n_layers && rc == GT_OK; l++) {
    char name[96];
    snprintf(name, sizeof name, "layers.%lld.router.proj.weight", (long long)l);
    const gt_tensor_info *r = gt_model_find_tensor(&m, name);
    snprintf(name, sizeof name, "layers.%lld.experts.down_proj", (long long)l);
    const gt_tensor_info *dn = gt_model_find_tensor(&m, name);
    if (!r) continue;
    n_moe++;
    if (!dn || dn->ndim != 3)
      rc = gt_err_set(err, GT_ERR_CONFIG, "hf: layer %lld has a router but no 3-D experts.down_proj", (long long)l);
    else
      ms->E = r->shape[0], ms->F = dn->shape[2];
  }
  gt_model_free(&m);
  if (rc) return rc;
  if (n_moe && n_moe != cfg->base_num_decoder_layers)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: %lld of %lld layers are MoE layers; Hugging Face's enable_moe_block puts one on every layer",
                      n_moe, cfg->base_num_decoder_layers);
  if (!n_moe) return GT_OK;
  char text[64];
  if (gt_config_get_text(cfg, "num_experts_per_tok", text, sizeof text, err))
    return gt_err_set(err, GT_ERR_CONFIG, "hf: the model has MoE layers but no config key 'num_experts_per_tok'");
  ms->topk = strtoll(text, NULL, 10);
  if (gt_config_key("shared_experts") && !gt_config_get_text(cfg, "shared_experts", text, sizeof text, NULL) &&
      strtoll(text, NULL, 10) != 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'shared_experts' = %s; Hugging Face's Gemma 4 MoE layer has exactly 1 (its dense MLP)",
                      text);
  return GT_OK;
}

gt_rc gt__hf4_exportable(const gt_config *c, gt_err *err) {
  if (c->v_norm_with_scale)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'v_norm_with_scale' = true; Hugging Face's Gemma 4 v_norm has no weight (expected false)");
  if (c->query_pre_attn_scalar != 1.0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'query_pre_attn_scalar' = %g; Hugging Face's Gemma 4 scales attention by 1 (expected 1)",
                      c->query_pre_attn_scalar);
  if (!c->share_kv_projections && c->global_num_kv_heads > 0 && c->global_num_kv_heads != c->base_num_kv_heads)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'global_num_kv_heads' = %lld without share_kv_projections; Hugging Face's Gemma 4 uses "
                      "num_global_key_value_heads only with attention_k_eq_v (expected 0 or %lld)",
                      c->global_num_kv_heads, c->base_num_kv_heads);
  if (!gt_config_layer_is_global(c, c->base_num_decoder_layers - 1))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "hf: key 'layer_pattern' = '%s' makes the last of %lld layers local; Hugging Face's Gemma 4 "
                      "forces it to full attention",
                      c->layer_pattern, c->base_num_decoder_layers);
  gt__hf4_moe_shape ms;
  return gt__hf4_moe_layout(c, &ms, err);
}

static void gt__hf4_add_rope(cJSON *o, const char *type, double theta, double fraction, double factor) {
  cJSON *r = cJSON_AddObjectToObject(o, type);
  int prop = fraction != 1.0 || factor != 1.0 || !strcmp(type, "full_attention");
  if (factor != 1.0) gt__hf_add_float(r, "factor", factor);
  if (prop) gt__hf_add_float(r, "partial_rotary_factor", fraction);
  gt__hf_add_float(r, "rope_theta", theta);
  cJSON_AddStringToObject(r, "rope_type", prop ? "proportional" : "default");
}

static void gt__hf4_add_int_or_null(cJSON *o, const char *key, long long v, int present) {
  if (present)
    cJSON_AddNumberToObject(o, key, (double)v);
  else
    cJSON_AddNullToObject(o, key);
}

char *gt__hf4_config_to_json(const gt_config *cfg, const char *torch_dtype) {
  gt__hf4_moe_shape ms;
  if (gt__hf4_moe_layout(cfg, &ms, NULL)) return NULL;
  long long L = cfg->base_num_decoder_layers, hd = cfg->head_dim;
  long long ghd = cfg->global_head_dim > 0 ? cfg->global_head_dim : hd;
  long long gK = cfg->global_num_kv_heads > 0 ? cfg->global_num_kv_heads : cfg->base_num_kv_heads;
  long long P = cfg->hidden_size_per_layer_input;
  long long Vp = cfg->vocab_size_per_layer_input > 0 ? cfg->vocab_size_per_layer_input : cfg->vocab_size;
  cJSON *o = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("Gemma4ForCausalLM"));
  cJSON_AddStringToObject(o, "model_type", "gemma4_text");
  cJSON_AddBoolToObject(o, "attention_bias", 0);
  gt__hf_add_float(o, "attention_dropout", 0.0);
  cJSON_AddBoolToObject(o, "attention_k_eq_v", cfg->share_kv_projections);
  cJSON_AddNumberToObject(o, "bos_token_id", 2);
  cJSON_AddBoolToObject(o, "enable_moe_block", ms.E > 0);
  cJSON_AddNumberToObject(o, "eos_token_id", 1);
  if (cfg->final_logits_soft_cap > 0)
    gt__hf_add_float(o, "final_logit_softcapping", cfg->final_logits_soft_cap);
  else
    cJSON_AddNullToObject(o, "final_logit_softcapping");
  cJSON_AddNumberToObject(o, "global_head_dim", (double)ghd);
  cJSON_AddNumberToObject(o, "head_dim", (double)hd);
  cJSON_AddStringToObject(o, "hidden_activation", "gelu_pytorch_tanh");
  cJSON_AddNumberToObject(o, "hidden_size", (double)cfg->base_emb_dim);
  cJSON_AddNumberToObject(o, "hidden_size_per_layer_input", (double)P);
  gt__hf_add_float(o, "initializer_range", 0.02);
  cJSON_AddNumberToObject(o, "intermediate_size", (double)cfg->base_mlp_dim);
  cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
  for (long long i = 0; i < L; i++) cJSON_AddItemToArray(lt, cJSON_CreateString(gt__hf_layer_type_name(cfg, i)));
  long long maxpos = cfg->max_target_length > GT__HF4_DEF_MAX_POS ? cfg->max_target_length : GT__HF4_DEF_MAX_POS;
  cJSON_AddNumberToObject(o, "max_position_embeddings", (double)maxpos);
  gt__hf4_add_int_or_null(o, "moe_intermediate_size", ms.F, ms.E > 0);
  cJSON_AddNumberToObject(o, "num_attention_heads", (double)cfg->base_num_query_heads);
  gt__hf4_add_int_or_null(o, "num_experts", ms.E, ms.E > 0);
  gt__hf4_add_int_or_null(o, "num_global_key_value_heads", gK, cfg->share_kv_projections);
  cJSON_AddNumberToObject(o, "num_hidden_layers", (double)L);
  cJSON_AddNumberToObject(o, "num_key_value_heads", (double)cfg->base_num_kv_heads);
  cJSON_AddNumberToObject(o, "num_kv_shared_layers", (double)cfg->num_kv_shared_layers);
  cJSON_AddNumberToObject(o, "pad_token_id", 0);
  gt__hf_add_float(o, "rms_norm_eps", cfg->normalization_layer_epsilon);
  cJSON *rp = cJSON_AddObjectToObject(o, "rope_parameters");
  gt__hf4_add_rope(rp, "full_attention", cfg->rope_max_timescale, cfg->global_rope_proportion,
                   cfg->rope_linear_scaling_factor);
  gt__hf4_add_rope(rp, "sliding_attention", cfg->local_rope_max_timescale, cfg->local_rope_proportion, 1.0);
  cJSON_AddNumberToObject(o, "sliding_window", (double)cfg->sliding_window_size);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
  gt__hf4_add_int_or_null(o, "top_k_experts", ms.topk, ms.E > 0);
  cJSON_AddStringToObject(o, "torch_dtype", torch_dtype);
  /* no transformers_version: the first release with Gemma 4 is not pinned
   * here, and transformers does not need the field to load the file */
  cJSON_AddNullToObject(o, "use_bidirectional_attention");
  cJSON_AddBoolToObject(o, "use_cache", 1);
  cJSON_AddBoolToObject(o, "use_double_wide_mlp", cfg->use_double_wide_mlp);
  cJSON_AddNumberToObject(o, "vocab_size", (double)cfg->vocab_size);
  cJSON_AddNumberToObject(o, "vocab_size_per_layer_input", (double)Vp);
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  return s;
}
