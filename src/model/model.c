#define _POSIX_C_SOURCE 200809L
#include "model/model.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/qstore.h"
#include "model/remat.h"

static int gt__rope_index(gt_model *m, double base, double scale, double fraction, int head_dim) {
  for (int i = 0; i < m->n_rope; i++)
    if (m->rope[i].base == base && m->rope[i].scale == scale && m->rope[i].fraction == fraction &&
        m->rope[i].head_dim == head_dim)
      return i;
  if (m->n_rope == GT_MAX_ROPE) return -1;
  m->rope[m->n_rope] = (gt_rope_desc){base, scale, fraction, head_dim};
  return m->n_rope++;
}

static void gt__add_tensor3(gt_model *m, int64_t *cursor, int layer, const char *name, int ndim, int64_t s0,
                            int64_t s1, int64_t s2) {
  gt_tensor_info *t = &m->tensors[m->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = s0;
  t->shape[1] = ndim > 1 ? s1 : 1;
  t->shape[2] = ndim > 2 ? s2 : 1;
  t->numel = t->shape[0] * t->shape[1] * t->shape[2];
  t->words = t->numel;
  t->offset = *cursor;
  t->layer = layer;
  t->slot = -1;
  t->lora = GT_LORA_NONE;
  *cursor += t->words;
}

static void gt__add_tensor(gt_model *m, int64_t *cursor, int layer, const char *name, int ndim, int64_t s0,
                           int64_t s1) {
  gt__add_tensor3(m, cursor, layer, name, ndim, s0, s1, 1);
}

/* One layer's descriptor from the config (everything but its parameters). */
static gt_rc gt__describe_layer(gt_model *m, const gt_config *c, int64_t l, gt_err *err) {
  gt_layer_desc *ld = &m->layers[l];
  int global = gt_config_layer_is_global(c, l), g4 = gt_config_is_gemma4(c);
  ld->index = (int)l;
  ld->kind = global ? GT_LAYER_GLOBAL : GT_LAYER_LOCAL;
  ld->window = global ? 0 : (int)c->sliding_window_size;
  ld->n_heads = (int)c->base_num_query_heads;
  ld->n_kv_heads = (int)gt_config_layer_kv_heads(c, l);
  ld->head_dim = (int)gt_config_layer_head_dim(c, l);
  ld->mlp_dim = (int)gt_config_layer_mlp_dim(c, l);
  ld->q_scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
  ld->gemma4 = g4;
  ld->k_eq_v = g4 && gt_config_layer_k_eq_v(c, l);
  ld->kv_donor = g4 ? (int)gt_config_layer_kv_donor(c, l) : -1;
  ld->kv_last_reader = -1;
  ld->ple_dim = g4 ? (int)c->hidden_size_per_layer_input : 0;
  ld->layer_scalar = 1.0f;
  if (gt_config_layer_is_moe(c, l)) {
    ld->n_experts = (int)c->num_experts;
    ld->experts_per_tok = (int)c->num_experts_per_tok;
    ld->moe_mlp_dim = (int)c->base_moe_mlp_dim;
    ld->lb_weight = (float)c->load_balance_loss_weight;
    ld->moe_ep = 1;
  }
  /* Local layers never scale positions (MaxText forces 1 on gemma3 local). */
  ld->rope = global ? gt__rope_index(m, c->rope_max_timescale, c->rope_linear_scaling_factor,
                                     c->global_rope_proportion, ld->head_dim)
                    : gt__rope_index(m, c->local_rope_max_timescale, 1.0, c->local_rope_proportion, ld->head_dim);
  if (ld->rope < 0) return gt_err_set(err, GT_ERR_INTERNAL, "model: more than %d RoPE tables", GT_MAX_ROPE);
  if (ld->kv_donor >= 0) m->layers[ld->kv_donor].kv_last_reader = (int)l;
  return GT_OK;
}

/* The layer's tensors in Hugging Face's names; a kind lacks what it does not
 * use (a KV-shared layer has no k/v projections or k_norm, a K=V layer no
 * v_proj), so the layout holds exactly the parameters that train. */
static void gt__layer_tensors(gt_model *m, const gt_config *c, int64_t l, int64_t *cur) {
  gt_layer_desc *ld = &m->layers[l];
  int64_t d = m->d, qd = (int64_t)ld->n_heads * ld->head_dim, kd = (int64_t)ld->n_kv_heads * ld->head_dim;
  int64_t F = ld->mlp_dim, hd = ld->head_dim, P = ld->ple_dim, E = ld->n_experts, FE = ld->moe_mlp_dim;
  int own_kv = ld->kv_donor < 0, g4 = ld->gemma4, moe = E > 0;
  /* the expert tensors come last, so a device holding some experts keeps
   * every other tensor at its place (gt_model_set_expert_shard) */
  struct {
    gt_lparam slot;
    const char *name;
    int ndim;
    int64_t s0, s1, s2;
    int present;
  } spec[] = {
      {GT_P_INPUT_NORM, "input_layernorm.weight", 1, d, 0, 1, 1},
      {GT_P_WQ, "self_attn.q_proj.weight", 2, qd, d, 1, 1},
      {GT_P_WK, "self_attn.k_proj.weight", 2, kd, d, 1, own_kv},
      {GT_P_WV, "self_attn.v_proj.weight", 2, kd, d, 1, own_kv && !ld->k_eq_v},
      {GT_P_Q_NORM, "self_attn.q_norm.weight", 1, hd, 0, 1, 1},
      {GT_P_K_NORM, "self_attn.k_norm.weight", 1, hd, 0, 1, own_kv},
      {GT_P_WO, "self_attn.o_proj.weight", 2, d, qd, 1, 1},
      {GT_P_POST_ATTN_NORM, "post_attention_layernorm.weight", 1, d, 0, 1, 1},
      {GT_P_PRE_FFW_NORM, "pre_feedforward_layernorm.weight", 1, d, 0, 1, 1},
      {GT_P_W_GATE, "mlp.gate_proj.weight", 2, F, d, 1, 1},
      {GT_P_W_UP, "mlp.up_proj.weight", 2, F, d, 1, 1},
      {GT_P_W_DOWN, "mlp.down_proj.weight", 2, d, F, 1, 1},
      {GT_P_POST_FFW_NORM, "post_feedforward_layernorm.weight", 1, d, 0, 1, 1},
      {GT_P_V_NORM, "self_attn.v_norm.weight", 1, hd, 0, 1, g4 && own_kv && c->v_norm_with_scale},
      {GT_P_PLE_GATE, "per_layer_input_gate.weight", 2, P, d, 1, P > 0},
      {GT_P_PLE_PROJ, "per_layer_projection.weight", 2, d, P, 1, P > 0},
      {GT_P_PLE_NORM, "post_per_layer_input_norm.weight", 1, d, 0, 1, P > 0},
      {GT_P_LAYER_SCALAR, "layer_scalar", 1, 1, 0, 1, g4 && c->layer_scalar_trainable},
      {GT_P_ROUTER_PROJ, "router.proj.weight", 2, E, d, 1, moe},
      {GT_P_ROUTER_SCALE, "router.scale", 1, d, 0, 1, moe},
      {GT_P_EXPERT_SCALE, "router.per_expert_scale", 1, E, 0, 1, moe},
      {GT_P_PRE_FFW_NORM_2, "pre_feedforward_layernorm_2.weight", 1, d, 0, 1, moe},
      {GT_P_POST_FFW_NORM_1, "post_feedforward_layernorm_1.weight", 1, d, 0, 1, moe},
      {GT_P_POST_FFW_NORM_2, "post_feedforward_layernorm_2.weight", 1, d, 0, 1, moe},
      {GT_P_EXPERT_GATE_UP, "experts.gate_up_proj", 3, E, 2 * FE, d, moe},
      {GT_P_EXPERT_DOWN, "experts.down_proj", 3, E, d, FE, moe},
  };
  for (int s = 0; s < GT_P_NSLOTS; s++) ld->slot_offset[s] = -1;
  ld->param_offset = *cur;
  for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
    if (!spec[i].present) continue;
    char name[96];
    snprintf(name, sizeof name, "layers.%lld.%s", (long long)l, spec[i].name);
    ld->slot_offset[spec[i].slot] = *cur;
    gt__add_tensor3(m, cur, (int)l, name, spec[i].ndim, spec[i].s0, spec[i].s1, spec[i].s2);
    m->tensors[m->n_tensors - 1].slot = spec[i].slot;
  }
  ld->param_count = *cur - ld->param_offset;
  ld->local_count = ld->param_count;
  for (int s = 0; s < GT_P_NSLOTS; s++) ld->slot_rel[s] = ld->slot_offset[s] < 0 ? -1 : ld->slot_offset[s] - ld->param_offset;
}

void gt_model_some_names(const gt_model *m, char *buf, size_t n) {
  /* the head's, then layer 0's and the last layer's first few */
  size_t o = 0;
  buf[0] = '\0';
  int picks[8], np = 0;
  for (int i = 0; i < m->n_tensors && np < 4; i++)
    if (m->tensors[i].layer <= 0) picks[np++] = i;
  for (int i = m->n_tensors - 1, k = 0; i >= 0 && k < 2; i--, k++) picks[np++] = i;
  for (int k = 0; k < np && o + 2 < n; k++) {
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= picks[j] == picks[k];
    if (dup) continue;
    o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", m->tensors[picks[k]].name);
  }
}

/* The store's roles from trainable_parameters_mask, and the layout they
 * imply: inside each unit the trainable tensors first (in table order), then
 * the frozen ones, so a unit's gradient block is a prefix of its parameter
 * block. Table order (and with it each tensor's initialisation stream) does
 * not change; with everything trainable neither do the offsets. */
static gt_rc gt__place(gt_model *m, gt_err *err);

static gt_rc gt__apply_store(gt_model *m, const gt_config *c, gt_err *err) {
  gt_store_mask *mk = NULL;
  gt_rc rc = gt_store_mask_compile(c->trainable_parameters_mask, &mk, err);
  if (rc) return rc;
  int64_t n_train = 0, n_masked = 0;
  const int n_re0 = gt_store_mask_count(mk);
  for (int i = 0; i < m->n_tensors; i++) {
    gt_tensor_info *t = &m->tensors[i];
    t->dtype = GT_STORE_F32;
    /* with adapters the base is frozen but for what the mask names (an
     * empty mask: nothing of it); the adapters always train */
    int trains = t->lora ? 1 : c->enable_lora && n_re0 == 0 ? 0 : gt_store_mask_trains(mk, t->name);
    if (trains && !t->lora) n_masked += t->numel;
    t->role = trains ? GT_ROLE_TRAINABLE : GT_ROLE_FROZEN;
    t->group = t->role == GT_ROLE_TRAINABLE ? GT_GROUP_TRAINABLE : GT_GROUP_FROZEN;
    if ((rc = gt_store_check(t->name, t->role, t->dtype, err))) break;
    if (t->role == GT_ROLE_TRAINABLE) n_train += t->numel;
    else m->n_frozen_tensors++;
  }
  int n_re = gt_store_mask_count(mk);
  gt_store_mask_free(mk);
  if (rc) return rc;
  if (n_re > 0 && n_masked == 0) {
    char names[600];
    gt_model_some_names(m, names, sizeof names);
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'trainable_parameters_mask' = '%s' matches none of the model's %d parameters, so "
                      "nothing would train; its expressions are searched for in names such as %s",
                      c->trainable_parameters_mask, m->n_tensors, names);
  }
  m->n_trainable = n_train;
  if ((rc = gt_qstore_decide(m, c, err))) return rc;
  return gt__place(m, err);
}

/* Places the tensors unit by unit (unit 0 the head's, 1 + l layer l's;
 * adapters sit in their base's unit although the table lists them last):
 * inside a unit the trainable ones first, then the frozen ones, each in
 * table order, advancing by their words. Every offset of the descriptors
 * (layers' ranges and slots, the head's tensors) follows from it. */
static gt_rc gt__place(gt_model *m, gt_err *err) {
  (void)err;
  m->head_train_count = 0;
  int64_t cur = 0;
  for (int64_t u = 0; u <= m->n_layers; u++) {
    int layer = (int)u - 1;
    gt_layer_desc *ld = layer >= 0 ? &m->layers[layer] : NULL;
    int64_t start = cur;
    if (ld) {
      ld->train_count = 0;
      for (int s = 0; s < GT_P_NSLOTS; s++) {
        ld->slot_offset[s] = ld->slot_rel[s] = ld->lora_a_rel[s] = ld->lora_b_rel[s] = -1;
        ld->frozen[s] = 0;
      }
    }
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < m->n_tensors; i++) {
        gt_tensor_info *t = &m->tensors[i];
        if (t->layer != layer || (int)t->role != pass) continue;
        t->offset = cur;
        cur += t->words;
        if (t->role == GT_ROLE_TRAINABLE) {
          if (ld) ld->train_count += t->numel;
          else m->head_train_count += t->numel;
        }
        if (!ld) {
          if (!strcmp(t->name, "embed_tokens.weight")) m->embed_offset = t->offset;
          else if (!strcmp(t->name, "norm.weight")) m->final_norm_offset = t->offset;
          else if (!strcmp(t->name, "embed_tokens_per_layer.weight")) m->ple_embed_offset = t->offset;
          else if (!strcmp(t->name, "per_layer_model_projection.weight")) m->ple_proj_offset = t->offset;
          else if (!strcmp(t->name, "per_layer_projection_norm.weight")) m->ple_norm_offset = t->offset;
          continue;
        }
        if (t->slot < 0) continue;
        int64_t rel = t->offset - start;
        if (t->lora == GT_LORA_A) ld->lora_a_rel[t->slot] = rel;
        else if (t->lora == GT_LORA_B) ld->lora_b_rel[t->slot] = rel;
        else {
          ld->slot_offset[t->slot] = t->offset;
          ld->slot_rel[t->slot] = rel;
          ld->frozen[t->slot] = t->role == GT_ROLE_FROZEN;
        }
      }
    if (ld) {
      int whole = ld->local_count == ld->param_count; /* not an expert shard (gt_model_set_expert_shard) */
      ld->param_offset = start;
      ld->param_count = cur - start;
      if (whole) ld->local_count = ld->param_count;
    }
  }
  m->n_params = cur;
  return GT_OK;
}

/* The adapters (enable_lora; model/lora.h): A [r, in] and B [out, r] for
 * every projection lora_module_path matches, appended to the table (so
 * every model tensor keeps its index, and with it its initialisation
 * stream) in the base's layer. Refuses a path that matches nothing, or a
 * tensor that cannot carry an adapter, or a rank above a projection's
 * smaller dimension. */
static gt_rc gt__add_adapters(gt_model *m, const gt_config *c, int64_t *cur, gt_err *err) {
  regex_t re;
  int rrc = regcomp(&re, c->lora_module_path, REG_EXTENDED | REG_NOSUB);
  if (rrc) {
    char why[128];
    regerror(rrc, &re, why, sizeof why);
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'lora_module_path' = '%s' is not a POSIX extended regular "
                      "expression: %s", c->lora_module_path, why);
  }
  const int n_base = m->n_tensors;
  const int64_t r = c->lora_rank;
  char bad[400] = "";
  int n_bad = 0, n_match = 0;
  gt_rc rc = GT_OK;
  for (int i = 0; i < n_base && !rc; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    if (regexec(&re, t->name, 0, NULL, 0)) continue;
    n_match++;
    if (t->layer < 0 || t->ndim != 2 || !gt_lora_slot_supported((gt_lparam)t->slot)) {
      if (n_bad++ < 3)
        snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s%s", n_bad > 1 ? ", " : "", t->name);
      continue;
    }
    int64_t out = t->shape[0], in = t->shape[1];
    if (r > (out < in ? out : in)) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "config: key 'lora_rank' = %lld is larger than tensor '%s' [%lld, %lld] "
                      "allows: an adapter's rank is at most the projection's smaller dimension (%lld)",
                      (long long)r, t->name, (long long)out, (long long)in, (long long)(out < in ? out : in));
      break;
    }
    /* "layers.3.self_attn.q_proj.weight" -> "layers.3.self_attn.q_proj.lora_A.weight" */
    char stem[80], name[120];
    size_t n = strlen(t->name);
    snprintf(stem, sizeof stem, "%.*s", (int)(n > 7 && !strcmp(t->name + n - 7, ".weight") ? n - 7 : n), t->name);
    int layer = t->layer, slot = t->slot;
    snprintf(name, sizeof name, "%s.lora_A.weight", stem);
    gt__add_tensor(m, cur, layer, name, 2, r, in);
    m->tensors[m->n_tensors - 1].slot = slot;
    m->tensors[m->n_tensors - 1].lora = GT_LORA_A;
    snprintf(name, sizeof name, "%s.lora_B.weight", stem);
    gt__add_tensor(m, cur, layer, name, 2, out, r);
    m->tensors[m->n_tensors - 1].slot = slot;
    m->tensors[m->n_tensors - 1].lora = GT_LORA_B;
    m->n_lora_tensors += 2;
    m->n_lora_params += r * (in + out);
  }
  regfree(&re);
  if (rc) return rc;
  /* a path that also matches other tensors (a norm, the model-level PLE
   * projection) adapts what it can; one that matches only those is refused */
  if (n_bad && n_bad == n_match)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_module_path' = '%s' matches only %s%s, which cannot carry an adapter: adapters go "
                      "on the layers' self_attn.q/k/v/o_proj, mlp.gate/up/down_proj, per_layer_input_gate and "
                      "per_layer_projection (not on embeddings, norms, the router, the routed experts or "
                      "per_layer_model_projection)",
                      c->lora_module_path, bad, n_bad > 3 ? " and others" : "");
  if (!n_match) {
    char names[400] = "";
    for (int i = 0; i < n_base && m->tensors[i].layer <= 0; i++)
      if (m->tensors[i].layer == 0 && gt_lora_slot_supported((gt_lparam)m->tensors[i].slot))
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                 m->tensors[i].name);
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_module_path' = '%s' matches none of the model's parameter names, so no "
                      "adapter would train; it is searched for in names such as %s",
                      c->lora_module_path, names);
  }
  return GT_OK;
}

gt_rc gt_model_build(gt_model *m, const gt_config *c, gt_err *err) {
  memset(m, 0, sizeof *m);
  if (strcmp(c->decoder_block, "gemma3") && !gt_config_is_gemma4(c))
    return gt_err_set(err, GT_ERR_CONFIG, "model: decoder_block '%s' is not built yet; expected gemma3, gemma4 or "
                      "gemma4_small", c->decoder_block);
  int g4 = gt_config_is_gemma4(c);
  m->vocab = c->vocab_size;
  m->d = c->base_emb_dim;
  m->n_layers = c->base_num_decoder_layers;
  m->eps = (float)c->normalization_layer_epsilon;
  /* Gemma 4 stores the norm scale itself (spec 3.2.1) */
  m->norm_offset = g4 ? 0.0f : 1.0f;
  m->bf16_act = !strcmp(c->dtype, "bfloat16");
  m->bf16_mm = m->bf16_act && !strcmp(c->matmul_precision, "default");
  /* HF multiplies by sqrt(d) cast to the compute dtype */
  m->emb_scale = m->bf16_act ? gt_bf16_round1(sqrtf((float)m->d)) : sqrtf((float)m->d);
  m->softcap = (float)c->final_logits_soft_cap;
  m->z_loss = (float)c->z_loss_multiplier;
  m->max_pos = c->max_target_length;
  m->ple_dim = g4 ? c->hidden_size_per_layer_input : 0;
  m->ple_vocab = m->ple_dim ? (c->vocab_size_per_layer_input > 0 ? c->vocab_size_per_layer_input : c->vocab_size) : 0;
  m->ple_embed_offset = m->ple_proj_offset = m->ple_norm_offset = -1;
  gt_rc rc = gt_remat_from_config(&m->remat, c, err);
  if (rc) return rc;

  int64_t L = m->n_layers, d = m->d;
  m->layers = calloc((size_t)L, sizeof *m->layers);
  /* the layers' tensors and up to two adapters for each */
  m->tensors = calloc((size_t)(3 * L * GT_P_NSLOTS + 5), sizeof *m->tensors);
  m->n_moe_layers = (int)gt_config_num_moe_layers(c);
  m->moe_dlb = m->n_moe_layers ? 1.0f / (float)m->n_moe_layers : 0.0f;
  m->ep_size = 1;
  if (!m->layers || !m->tensors) {
    gt_model_free(m);
    return gt_err_set(err, GT_ERR_NOMEM, "model: no memory for %lld layer descriptors", (long long)L);
  }
  for (int64_t l = 0; l < L; l++)
    if ((rc = gt__describe_layer(m, c, l, err))) {
      gt_model_free(m);
      return rc;
    }
  /* The head unit (embedding, final norm, PLE) first, then the layers: every
   * unit is one contiguous range, the grain of gathering and sharding. */
  int64_t cur = 0;
  m->embed_offset = cur;
  gt__add_tensor(m, &cur, -1, "embed_tokens.weight", 2, m->vocab, d);
  m->final_norm_offset = cur;
  gt__add_tensor(m, &cur, -1, "norm.weight", 1, d, 0);
  if (m->ple_dim) {
    int64_t LP = L * m->ple_dim;
    m->ple_embed_offset = cur;
    gt__add_tensor(m, &cur, -1, "embed_tokens_per_layer.weight", 2, m->ple_vocab, LP);
    m->ple_proj_offset = cur;
    gt__add_tensor(m, &cur, -1, "per_layer_model_projection.weight", 2, LP, d);
    m->ple_norm_offset = cur;
    gt__add_tensor(m, &cur, -1, "per_layer_projection_norm.weight", 1, m->ple_dim, 0);
  }
  for (int64_t l = 0; l < L; l++) gt__layer_tensors(m, c, l, &cur);
  if (c->enable_lora) {
    m->lora_rank = (int)c->lora_rank;
    m->lora_scale = gt_lora_scale(c);
    m->lora_dropout = (float)c->lora_dropout;
    m->lora_seed = (uint64_t)c->init_weights_seed;
    if ((rc = gt__add_adapters(m, c, &cur, err))) {
      gt_model_free(m);
      return rc;
    }
  }
  m->n_params = cur;
  if ((rc = gt__apply_store(m, c, err))) {
    gt_model_free(m);
    return rc;
  }
  return GT_OK;
}

void gt_model_unit(const gt_model *m, int64_t u, int64_t *offset, int64_t *count) {
  if (u == 0) {
    /* the head unit starts the layout (its first tensor need not be the
     * embedding: a frozen one follows the trainable ones) */
    *offset = 0;
    *count = m->n_layers > 0 ? m->layers[0].param_offset : m->n_params;
  } else {
    *offset = m->layers[u - 1].param_offset;
    *count = m->layers[u - 1].param_count;
  }
}

int64_t gt_model_numel(const gt_model *m) {
  int64_t n = 0;
  for (int i = 0; i < m->n_tensors; i++) n += m->tensors[i].numel;
  return n;
}

int64_t gt_model_count_params(const gt_config *cfg) {
  gt_model m;
  if (gt_model_build(&m, cfg, NULL)) return -1;
  int64_t n = gt_model_numel(&m);
  gt_model_free(&m);
  return n;
}

int64_t gt_model_count_active_params(const gt_config *cfg) {
  gt_model m;
  if (gt_model_build(&m, cfg, NULL)) return -1;
  int64_t n = 0;
  for (int i = 0; i < m.n_tensors; i++) n += m.tensors[i].numel;
  for (int64_t l = 0; l < m.n_layers; l++) {
    const gt_layer_desc *L = &m.layers[l];
    /* a token runs num_experts_per_tok of the E experts */
    int64_t per_expert = 3 * (int64_t)L->moe_mlp_dim * m.d;
    n -= (int64_t)(L->n_experts - L->experts_per_tok) * per_expert * (L->n_experts > 0);
  }
  gt_model_free(&m);
  return n;
}

void gt_model_set_expert_shard(gt_model *m, int P, int rank) {
  for (int64_t l = 0; l < m->n_layers; l++) {
    gt_layer_desc *L = &m->layers[l];
    if (!L->n_experts) continue;
    int64_t per_gu = 2 * (int64_t)L->moe_mlp_dim * m->d, per_dn = (int64_t)m->d * L->moe_mlp_dim, EL = L->n_experts / P;
    L->slot_rel[GT_P_EXPERT_DOWN] = L->slot_rel[GT_P_EXPERT_GATE_UP] + EL * per_gu;
    L->local_count = L->slot_rel[GT_P_EXPERT_DOWN] + EL * per_dn;
    L->moe_ep = P;
  }
  m->ep_size = P;
  m->ep_rank = rank;
}

int gt_model_unit_pieces(const gt_model *m, int64_t u, int64_t full_off[3], int64_t local_off[3], int64_t len[3]) {
  int64_t off, cnt;
  gt_model_unit(m, u, &off, &cnt);
  const gt_layer_desc *L = u > 0 ? &m->layers[u - 1] : NULL;
  full_off[0] = off, local_off[0] = 0, len[0] = cnt;
  if (!L || !L->n_experts || L->moe_ep == 1) return 1;
  /* [replicated part | owned gate_up experts | owned down experts] */
  int EL = L->n_experts / m->ep_size, rank = m->ep_rank;
  int64_t per_gu = 2 * (int64_t)L->moe_mlp_dim * m->d, per_dn = (int64_t)m->d * L->moe_mlp_dim;
  int64_t rep = L->slot_rel[GT_P_EXPERT_GATE_UP];
  len[0] = rep;
  full_off[1] = L->slot_offset[GT_P_EXPERT_GATE_UP] + (int64_t)rank * EL * per_gu;
  local_off[1] = rep;
  len[1] = EL * per_gu;
  full_off[2] = L->slot_offset[GT_P_EXPERT_DOWN] + (int64_t)rank * EL * per_dn;
  local_off[2] = L->slot_rel[GT_P_EXPERT_DOWN];
  len[2] = EL * per_dn;
  return 3;
}

gt_rc gt_model_copy_unmasked(const gt_model *m, gt_model *out, gt_err *err) {
  return gt_model_copy_frozen(m, NULL, 0, out, err);
}

gt_rc gt_model_copy_frozen(const gt_model *m, const char *names, int n, gt_model *out, gt_err *err) {
  return gt_model_copy_frozen_as(m, names, n, gt_qstore_dtype(m), gt_qstore_embed_dtype(m), out, err);
}

gt_rc gt_model_copy_frozen_as(const gt_model *m, const char *names, int n, gt_store_dtype q, gt_store_dtype eq,
                              gt_model *out, gt_err *err) {
  *out = *m;
  out->mem = NULL;
  out->params = out->grads = NULL;
  for (int r = 0; r < GT_MAX_ROPE; r++) out->rope_cos[r] = out->rope_sin[r] = NULL;
  out->view = NULL;
  out->layers = malloc(sizeof *m->layers * (size_t)(m->n_layers > 0 ? m->n_layers : 1));
  out->tensors = malloc(sizeof *m->tensors * (size_t)(m->n_tensors > 0 ? m->n_tensors : 1));
  if (!out->layers || !out->tensors) {
    free(out->layers), free(out->tensors);
    memset(out, 0, sizeof *out);
    return gt_err_set(err, GT_ERR_NOMEM, "model: no memory to copy the layout");
  }
  memcpy(out->layers, m->layers, sizeof *m->layers * (size_t)m->n_layers);
  memcpy(out->tensors, m->tensors, sizeof *m->tensors * (size_t)m->n_tensors);
  for (int i = 0; i < out->n_tensors; i++) out->tensors[i].role = GT_ROLE_TRAINABLE, out->tensors[i].group = GT_GROUP_TRAINABLE;
  for (int64_t l = 0; l < out->n_layers; l++) memset(out->layers[l].frozen, 0, sizeof out->layers[l].frozen);
  out->n_frozen_tensors = 0;
  out->n_trainable = 0;
  for (int i = 0; i < out->n_tensors; i++) out->n_trainable += out->tensors[i].numel;
  gt_rc rc = GT_OK;
  const char *nm = names;
  for (int k = 0; k < n && !rc; k++, nm += strlen(nm) + 1) {
    int i = 0;
    while (i < out->n_tensors && strcmp(out->tensors[i].name, nm)) i++;
    if (i == out->n_tensors) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "model: no tensor named '%s' to freeze", nm);
      break;
    }
    if (out->tensors[i].role == GT_ROLE_FROZEN) continue;
    out->tensors[i].role = GT_ROLE_FROZEN;
    out->tensors[i].group = GT_GROUP_FROZEN;
    out->n_frozen_tensors++;
    out->n_trainable -= out->tensors[i].numel;
  }
  /* the storage follows from the roles as in the model (a trainable tensor
   * is float32), and the slots' frozen flags in gt__place */
  if (!rc) gt_qstore_apply(out, q, eq);
  if (!rc) rc = gt__place(out, err);
  if (rc) gt_model_free(out);
  return rc;
}

int64_t gt_model_unit_trainable(const gt_model *m, int64_t u) {
  if (u == 0) return m->head_train_count;
  const gt_layer_desc *L = &m->layers[u - 1];
  /* every tensor trains: the whole block (with expert parallelism, its own
   * experts only); else the leading ones, which never include an expert
   * shard (gt_fsdp refuses trainable experts behind a frozen tensor) */
  return L->train_count == L->param_count ? L->local_count : L->train_count;
}

float *gt_model_head_grad(const gt_model *m, float *hg, int64_t offset) {
  if (!hg) return NULL;
  for (int i = 0; i < m->n_tensors && m->tensors[i].layer < 0; i++)
    if (m->tensors[i].offset == offset) return m->tensors[i].role == GT_ROLE_FROZEN ? NULL : hg + offset;
  return NULL;
}

uint64_t gt_model_frozen_sum(const gt_model *m, const float *params) {
  uint64_t h = GT_STORE_SUM_INIT;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].role == GT_ROLE_FROZEN) h = gt_store_sum(h, params + m->tensors[i].offset, m->tensors[i].words);
  return h;
}

int64_t gt_model_unit_local(const gt_model *m, int64_t u) {
  int64_t off, cnt;
  gt_model_unit(m, u, &off, &cnt);
  return u > 0 ? m->layers[u - 1].local_count : cnt;
}

int64_t gt_model_unit_replicated(const gt_model *m, int64_t u) {
  const gt_layer_desc *L = u > 0 ? &m->layers[u - 1] : NULL;
  if (L && L->n_experts && L->moe_ep > 1) return L->slot_rel[GT_P_EXPERT_GATE_UP];
  return gt_model_unit_local(m, u);
}

const gt_tensor_info *gt_model_find_tensor(const gt_model *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}

gt_rc gt_model_alloc_tables(gt_model *m, gt_mem *mem, gt_err *err) {
  m->mem = mem;
  for (int r = 0; r < m->n_rope; r++) {
    int hd = m->rope[r].head_dim;
    size_t tb = (size_t)m->max_pos * (size_t)(hd / 2) * sizeof(float);
    m->rope_cos[r] = gt_mem_alloc_named(mem, GT_MEM_OTHER, tb, "rope cos");
    m->rope_sin[r] = gt_mem_alloc_named(mem, GT_MEM_OTHER, tb, "rope sin");
    if (!m->rope_cos[r] || !m->rope_sin[r])
      return gt_err_set(err, GT_ERR_NOMEM, "model: cannot allocate RoPE tables");
    if (gt_mem_measuring(mem)) continue; /* allocation only: the tables have no memory behind them */
    gt_rope_table_fill(m->rope_cos[r], m->rope_sin[r], (int)m->max_pos, hd, m->rope[r].base,
                       m->rope[r].scale, m->rope[r].fraction);
  }
  return GT_OK;
}

gt_rc gt_model_alloc_inference(gt_model *m, gt_mem *mem, gt_err *err) {
  m->mem = mem;
  size_t bytes = (size_t)m->n_params * sizeof(float);
  m->params = gt_mem_alloc(mem, GT_MEM_PARAMS, bytes);
  if (!m->params)
    return gt_err_set(err, GT_ERR_NOMEM, "model: cannot allocate %lld parameters (%.1f MiB)", (long long)m->n_params,
                      (double)bytes / 1048576.0);
  return gt_model_alloc_tables(m, mem, err);
}

gt_rc gt_model_alloc(gt_model *m, gt_mem *mem, gt_err *err) {
  gt_rc rc = gt_model_alloc_inference(m, mem, err);
  if (rc) return rc;
  size_t bytes = (size_t)m->n_params * sizeof(float);
  m->grads = gt_mem_alloc(mem, GT_MEM_GRADS, bytes);
  if (!m->grads)
    return gt_err_set(err, GT_ERR_NOMEM, "model: cannot allocate the gradients of %lld parameters (%.1f MiB)",
                      (long long)m->n_params, (double)bytes / 1048576.0);
  return GT_OK;
}

/* splitmix64 drives a Box-Muller normal: cheap, seeded, identical everywhere. */
static void gt__fill_normal_from(float *x, int64_t n, uint64_t *state, double std) {
  uint64_t s = *state;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((double)(gt_splitmix64(&s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(gt_splitmix64(&s) >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(std * r * cos(6.283185307179586 * u2));
    if (i + 1 < n) x[i + 1] = (float)(std * r * sin(6.283185307179586 * u2));
  }
  *state = s;
}

static void gt__fill_normal(float *x, int64_t n, uint64_t seed, double std) {
  uint64_t s = seed;
  gt__fill_normal_from(x, n, &s, std);
}

/* A stored-quantized tensor: the same stream as float32, drawn a chunk of
 * rows at a time into a float scratch and quantized into place (chunks of
 * an even number of elements continue the stream's pairs exactly), so the
 * stored tensor is gt_quantize of the float32 model's. */
static gt_rc gt__fill_normal_stored(const gt_tensor_info *t, float *p, uint64_t seed, double std, gt_err *err) {
  int64_t rows = t->shape[0], cols = gt_qstore_cols(t), ck = gt_qstore_chunk_rows(t);
  if (ck > rows) ck = rows;
  gt_mem scratch;
  gt_mem_init(&scratch);
  float *tmp = gt_mem_alloc_uninit_named(&scratch, GT_MEM_TEMP, (size_t)(ck * cols) * sizeof(float), "initialisation scratch");
  if (!tmp)
    return gt_err_set(err, GT_ERR_NOMEM, "model: no memory to initialise tensor '%s' (stored as %s): a scratch of %lld "
                      "floats", t->name, gt_store_dtype_name(t->dtype), (long long)(ck * cols));
  uint64_t s = seed;
  gt_rc rc = GT_OK;
  for (int64_t r0 = 0; r0 < rows && !rc; r0 += ck) {
    int64_t n = rows - r0 < ck ? rows - r0 : ck;
    gt__fill_normal_from(tmp, n * cols, &s, std);
    rc = gt_qstore_put_rows(t, p, r0, n, tmp, err);
  }
  gt_mem_free(&scratch, tmp);
  return rc;
}

gt_rc gt_model_init_params(gt_model *m, uint64_t seed, double init_scale) {
  gt_rc rc = GT_OK;
  for (int i = 0; i < m->n_tensors && !rc; i++)
    rc = gt_model_init_tensor(m, i, seed, init_scale, m->params + m->tensors[i].offset, NULL);
  return rc;
}

gt_rc gt_model_init_tensor(const gt_model *m, int i, uint64_t seed, double init_scale, float *p, gt_err *err) {
  /* Each tensor gets its own stream (seed, tensor index), so the values of a
   * tensor do not depend on the shapes of the tensors before it. */
  {
    const gt_tensor_info *t = &m->tensors[i];
    if (t->lora) { /* PEFT's initialisation (model/lora.h) */
      gt_lora_init_tensor(t, p, seed * 1000003ull + (uint64_t)i * 7919ull + 1);
      return GT_OK;
    }
    if (t->ndim == 1) {
      /* norms start as the identity: (1 + w) with w = 0 on Gemma 3, a stored
       * scale of 1 on Gemma 4 (and layer_scalar = 1) */
      float one = 1.0f - m->norm_offset;
      for (int64_t k = 0; k < t->numel; k++) p[k] = one;
      return GT_OK;
    }
    /* embeddings so a looked-up row is O(1) after its scale: the main table
     * times sqrt(d), the PLE table times sqrt(ple_dim) */
    double std = t->offset == m->embed_offset       ? 1.0 / sqrt((double)m->d)
                 : t->offset == m->ple_embed_offset ? 1.0 / sqrt((double)m->ple_dim)
                                                    : init_scale / sqrt((double)t->shape[t->ndim - 1]);
    uint64_t ts = seed * 1000003ull + (uint64_t)i * 7919ull + 1;
    if (t->dtype != GT_STORE_F32) return gt__fill_normal_stored(t, p, ts, std, err);
    gt__fill_normal(p, t->numel, ts, std);
    return GT_OK;
  }
}

void gt_model_init_norms(gt_model *m, uint64_t seed, double std) {
  for (int i = 0; i < m->n_tensors; i++) {
    gt_tensor_info *t = &m->tensors[i];
    if (t->ndim == 1) gt__fill_normal(m->params + t->offset, t->numel, seed * 1000003ull + (uint64_t)i * 7919ull + 2, std);
  }
}

void gt_model_zero_grads(gt_model *m) {
  if (m->grads) memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
}

void gt_model_free(gt_model *m) {
  if (m->mem) {
    gt_mem_free(m->mem, m->params);
    gt_mem_free(m->mem, m->grads);
    for (int r = 0; r < m->n_rope; r++) {
      gt_mem_free(m->mem, m->rope_cos[r]);
      gt_mem_free(m->mem, m->rope_sin[r]);
    }
  }
  free(m->layers);
  free(m->tensors);
  memset(m, 0, sizeof *m);
}

int gt_model_unit_has_projections(const gt_model *m, int64_t u) { return u > 0 || !m->ple_dim; }

int gt_model_tensor_is_projection(const gt_model *m, int i) {
  const gt_tensor_info *t = &m->tensors[i];
  if (t->layer < 0) return t->offset == m->embed_offset && gt_model_unit_has_projections(m, 0);
  const gt_layer_desc *L = &m->layers[t->layer];
  for (int s = 0; s < GT_P_NSLOTS; s++)
    if (gt_layer_slot_is_projection((gt_lparam)s) && L->slot_offset[s] == t->offset) return 1;
  return 0;
}

void gt_model_round_unit_but_projections(const gt_model *m, int64_t u, float *dst, const float *src, int64_t n) {
  int64_t uoff, ucnt;
  gt_model_unit(m, u, &uoff, &ucnt);
  /* the projections' ranges [beg, end) inside the unit, in order; then every
   * gap between them (norms, scalars, router, experts, adapters) rounded */
  int64_t beg[GT_P_NSLOTS], end[GT_P_NSLOTS];
  int np = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    if ((t->layer < 0 ? 0 : t->layer + 1) != u || !gt_model_tensor_is_projection(m, i)) continue;
    int k = np++;
    for (; k > 0 && beg[k - 1] > t->offset - uoff; k--) beg[k] = beg[k - 1], end[k] = end[k - 1];
    beg[k] = t->offset - uoff, end[k] = beg[k] + t->words;
  }
  int64_t at = 0;
  for (int k = 0; k <= np; k++) {
    int64_t stop = k < np ? beg[k] : n;
    if (stop > at) gt_bf16_round_copy(dst + at, src + at, stop - at);
    if (k < np) at = end[k];
  }
}

void gt_model_round_params(gt_model *m) {
  if (!m->bf16_act || !m->params) return;
  /* a quantized tensor is already in its storage format: only float32 ones */
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].dtype == GT_STORE_F32) gt_bf16_round(m->params + m->tensors[i].offset, m->tensors[i].numel);
}
