#define _POSIX_C_SOURCE 200809L
#include "gemtrain/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemtrain/kernels.h"
#include "gemtrain/remat.h"

static int gt__rope_index(gt_model *m, double base, double scale, double fraction) {
  for (int i = 0; i < m->n_rope; i++)
    if (m->rope[i].base == base && m->rope[i].scale == scale && m->rope[i].fraction == fraction)
      return i;
  if (m->n_rope == GT_MAX_ROPE) return -1;
  m->rope[m->n_rope] = (gt_rope_desc){base, scale, fraction};
  return m->n_rope++;
}

static void gt__add_tensor(gt_model *m, int64_t *cursor, int layer, const char *name, int ndim,
                           int64_t s0, int64_t s1) {
  gt_tensor_info *t = &m->tensors[m->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = s0;
  t->shape[1] = ndim > 1 ? s1 : 1;
  t->numel = s0 * (ndim > 1 ? s1 : 1);
  t->offset = *cursor;
  t->layer = layer;
  *cursor += t->numel;
}

gt_rc gt_model_build(gt_model *m, const gt_config *c, gt_err *err) {
  memset(m, 0, sizeof *m);
  if (strcmp(c->decoder_block, "gemma3"))
    return gt_err_set(err, GT_ERR_CONFIG, "model: decoder_block '%s' is not built yet; expected gemma3",
                      c->decoder_block);
  m->vocab = c->vocab_size;
  m->d = c->base_emb_dim;
  m->n_layers = c->base_num_decoder_layers;
  m->eps = (float)c->normalization_layer_epsilon;
  m->norm_offset = 1.0f;
  /* HF multiplies by sqrt(d) cast to the compute dtype; we compute in fp32. */
  m->emb_scale = sqrtf((float)m->d);
  m->softcap = (float)c->final_logits_soft_cap;
  m->max_pos = c->max_target_length;
  gt_rc rc = gt_remat_from_config(&m->remat, c, err);
  if (rc) return rc;

  int64_t L = m->n_layers, d = m->d;
  m->layers = calloc((size_t)L, sizeof *m->layers);
  m->tensors = calloc((size_t)(L * GT_P_NSLOTS + 2), sizeof *m->tensors);
  if (!m->layers || !m->tensors) {
    gt_model_free(m);
    return gt_err_set(err, GT_ERR_NOMEM, "model: no memory for %lld layer descriptors", (long long)L);
  }
  /* The head unit (embedding, final norm) first, then the layers: every
   * unit is one contiguous range, the grain of gathering and sharding. */
  int64_t cur = 0;
  m->embed_offset = cur;
  gt__add_tensor(m, &cur, -1, "embed_tokens.weight", 2, m->vocab, d);
  m->final_norm_offset = cur;
  gt__add_tensor(m, &cur, -1, "norm.weight", 1, d, 0);
  for (int64_t l = 0; l < L; l++) {
    gt_layer_desc *ld = &m->layers[l];
    int global = gt_config_layer_is_global(c, l);
    ld->index = (int)l;
    ld->kind = global ? GT_LAYER_GLOBAL : GT_LAYER_LOCAL;
    ld->window = global ? 0 : (int)c->sliding_window_size;
    ld->n_heads = (int)c->base_num_query_heads;
    ld->n_kv_heads = (int)c->base_num_kv_heads;
    ld->head_dim = (int)c->head_dim;
    ld->mlp_dim = (int)c->base_mlp_dim;
    ld->q_scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
    /* Local layers never scale positions (MaxText forces 1 on gemma3 local). */
    ld->rope = global ? gt__rope_index(m, c->rope_max_timescale, c->rope_linear_scaling_factor, 1.0)
                      : gt__rope_index(m, c->local_rope_max_timescale, 1.0, 1.0);
    if (ld->rope < 0) {
      gt_model_free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "model: more than %d RoPE tables", GT_MAX_ROPE);
    }
    for (int s = 0; s < GT_P_NSLOTS; s++) ld->slot_offset[s] = -1;
    ld->param_offset = cur;
    int64_t qd = (int64_t)ld->n_heads * ld->head_dim, kd = (int64_t)ld->n_kv_heads * ld->head_dim;
    int64_t F = ld->mlp_dim, hd = ld->head_dim;
    struct {
      gt_lparam slot;
      const char *name;
      int ndim;
      int64_t s0, s1;
    } spec[] = {
        {GT_P_INPUT_NORM, "input_layernorm.weight", 1, d, 0},
        {GT_P_WQ, "self_attn.q_proj.weight", 2, qd, d},
        {GT_P_WK, "self_attn.k_proj.weight", 2, kd, d},
        {GT_P_WV, "self_attn.v_proj.weight", 2, kd, d},
        {GT_P_Q_NORM, "self_attn.q_norm.weight", 1, hd, 0},
        {GT_P_K_NORM, "self_attn.k_norm.weight", 1, hd, 0},
        {GT_P_WO, "self_attn.o_proj.weight", 2, d, qd},
        {GT_P_POST_ATTN_NORM, "post_attention_layernorm.weight", 1, d, 0},
        {GT_P_PRE_FFW_NORM, "pre_feedforward_layernorm.weight", 1, d, 0},
        {GT_P_W_GATE, "mlp.gate_proj.weight", 2, F, d},
        {GT_P_W_UP, "mlp.up_proj.weight", 2, F, d},
        {GT_P_W_DOWN, "mlp.down_proj.weight", 2, d, F},
        {GT_P_POST_FFW_NORM, "post_feedforward_layernorm.weight", 1, d, 0},
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
      char name[96];
      snprintf(name, sizeof name, "layers.%lld.%s", (long long)l, spec[i].name);
      ld->slot_offset[spec[i].slot] = cur;
      gt__add_tensor(m, &cur, (int)l, name, spec[i].ndim, spec[i].s0, spec[i].s1);
    }
    ld->param_count = cur - ld->param_offset;
  }
  m->n_params = cur;
  return GT_OK;
}

void gt_model_unit(const gt_model *m, int64_t u, int64_t *offset, int64_t *count) {
  if (u == 0) {
    *offset = m->embed_offset;
    *count = m->vocab * m->d + m->d;
  } else {
    *offset = m->layers[u - 1].param_offset;
    *count = m->layers[u - 1].param_count;
  }
}

int64_t gt_model_count_params(const gt_config *cfg) {
  gt_model m;
  if (gt_model_build(&m, cfg, NULL)) return -1;
  int64_t n = m.n_params;
  gt_model_free(&m);
  return n;
}

const gt_tensor_info *gt_model_find_tensor(const gt_model *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}

gt_rc gt_model_alloc_tables(gt_model *m, gt_mem *mem, gt_err *err) {
  m->mem = mem;
  for (int r = 0; r < m->n_rope; r++) {
    int hd = 0;
    for (int64_t l = 0; l < m->n_layers; l++)
      if (m->layers[l].rope == r) hd = m->layers[l].head_dim;
    size_t tb = (size_t)m->max_pos * (size_t)(hd / 2) * sizeof(float);
    m->rope_cos[r] = gt_mem_alloc(mem, GT_MEM_OTHER, tb);
    m->rope_sin[r] = gt_mem_alloc(mem, GT_MEM_OTHER, tb);
    if (!m->rope_cos[r] || !m->rope_sin[r])
      return gt_err_set(err, GT_ERR_NOMEM, "model: cannot allocate RoPE tables");
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
static uint64_t gt__splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void gt__fill_normal(float *x, int64_t n, uint64_t seed, double std) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((double)(gt__splitmix(&s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(gt__splitmix(&s) >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(std * r * cos(6.283185307179586 * u2));
    if (i + 1 < n) x[i + 1] = (float)(std * r * sin(6.283185307179586 * u2));
  }
}

void gt_model_init_params(gt_model *m, uint64_t seed, double init_scale) {
  /* Each tensor gets its own stream (seed, tensor index), so the values of a
   * tensor do not depend on the shapes of the tensors before it. */
  for (int i = 0; i < m->n_tensors; i++) {
    gt_tensor_info *t = &m->tensors[i];
    float *p = m->params + t->offset;
    if (t->ndim == 1) {
      memset(p, 0, (size_t)t->numel * sizeof(float)); /* (1 + w) with w = 0 */
      continue;
    }
    double std = t->offset == m->embed_offset ? 1.0 / sqrt((double)m->d)
                                              : init_scale / sqrt((double)t->shape[1]);
    gt__fill_normal(p, t->numel, seed * 1000003ull + (uint64_t)i * 7919ull + 1, std);
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
