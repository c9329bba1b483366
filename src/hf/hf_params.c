/* Hugging Face Gemma 3 and Gemma 4 parameters <-> a gt_model in memory (see
 * hf.h). Both directions walk the model's tensor table, so every tensor kind
 * the model has (3-D expert stacks included) converts by name and shape. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf/hf.h"
#include "hf/peft.h"
#include "model/qstore.h"

/* Where the text decoder's tensors live: Gemma3ForCausalLM, then the
 * multimodal checkpoints as current transformers saves them, then as the
 * older hub shards do (spec 6.1). */
static const char *const gt__hf_prefixes[] = {"model.", "model.language_model.", "language_model.model."};
#define GT__HF_NPREFIX ((int)(sizeof gt__hf_prefixes / sizeof gt__hf_prefixes[0]))

gt_hf_export_opts gt_hf_export_defaults(void) { return (gt_hf_export_opts){GT_DT_BF16, 0, 0}; }

/* Gemma 4 layers: stored norm scales, 262144-row tables without HF padding */
static int gt__is_gemma4(const gt_model *m) { return m->n_layers > 0 && m->layers[0].gemma4; }

static void gt__shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t j = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && j < n; i++) j += (size_t)snprintf(buf + j, n - j, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (j < n) snprintf(buf + j, n - j, "]");
}

gt_rc gt_hf_export(const gt_model *m, const gt_config *cfg, const char *out_dir, const gt_hf_export_opts *o,
                   gt_hf_info *info, gt_err *err) {
  gt_hf_export_opts def = gt_hf_export_defaults();
  if (!o) o = &def;
  if (o->dtype != GT_DT_F32 && o->dtype != GT_DT_BF16)
    return gt_err_set(err, GT_ERR_ARG, "hf: export dtype %s; expected F32 or BF16", gt_dtype_name(o->dtype));
  if (!m->params) return gt_err_set(err, GT_ERR_ARG, "hf: the model has no parameters in memory to export");
  gt_rc rc = gt_hf_config_exportable(cfg, err);
  if (rc || (rc = gt_mkdirs(out_dir, "hf", err))) return rc;
  int g4 = gt__is_gemma4(m);
  /* A Gemma 3 262144-token table read from HF's 262208 rows (4b and up)
   * goes back with zero rows, as MaxText pads it; 1b and 270m have 262144
   * rows, as does Gemma 4. */
  int64_t rows = (o->pad_vocab && !g4 && m->vocab == GT_HF_GEMMA3_VOCAB) ? GT_HF_GEMMA3_ROWS : m->vocab;
  float *padded = NULL;
  if (rows != m->vocab) {
    padded = gt_mem_alloc(m->mem, GT_MEM_OTHER, (size_t)(rows * m->d) * sizeof(float)); /* zero-filled */
    if (!padded)
      return gt_err_set(err, GT_ERR_NOMEM, "hf: no memory for the padded %lld x %lld embedding", (long long)rows,
                        (long long)m->d);
  }
  /* HF's Gemma 4 layers all carry a layer_scalar buffer; a model that does
   * not train it writes the constant it multiplies by. */
  int n_max = m->n_tensors + (g4 ? (int)m->n_layers : 0), n = 0, n_merged = 0, n_tmp = 0;
  gt_st_wtensor *w = calloc((size_t)n_max, sizeof *w);
  char (*names)[128] = calloc((size_t)n_max, sizeof *names);
  float *scalars = g4 ? calloc((size_t)m->n_layers, sizeof *scalars) : NULL;
  /* float32 copies of the tensors that are not written as they are stored:
   * a base merged with its adapters */
  float **tmp = calloc((size_t)m->n_tensors + 1, sizeof *tmp);
  if (!w || !names || (g4 && !scalars) || !tmp) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "hf: no memory for %d tensor entries", n_max);
    goto out;
  }
  double scale = gt_peft_count(m) ? gt_peft_scale(cfg) : 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    /* an HF checkpoint has no adapters: they are merged into their base */
    if (gt_peft_is_adapter(t->name, NULL, 0, NULL)) continue;
    const float *data = m->params + t->offset;
    const gt_tensor_info *ta, *tb;
    gt_peft_pair(m, t, &ta, &tb);
    if (ta || t->dtype != GT_STORE_F32) {
      float *x = gt_mem_alloc_uninit(m->mem, GT_MEM_OTHER, (size_t)t->numel * sizeof(float));
      if (!x) {
        rc = gt_err_set(err, GT_ERR_NOMEM, "hf: no memory for a float32 copy of '%s'", t->name);
        goto out;
      }
      tmp[n_tmp++] = x;
      if (t->dtype == GT_STORE_F32) {
        memcpy(x, data, (size_t)t->numel * sizeof(float));
      } else {
        /* a frozen base stored quantized: the values the model computes with */
        gt_qstore_rows(t, data, 0, t->shape[0], x);
      }
      data = x;
    }
    if (ta) {
      float *x = (float *)data;
      gt_peft_merge_one(x, m->params + ta->offset, m->params + tb->offset, t->shape[0], t->shape[1], ta->shape[0],
                        scale);
      data = x;
      n_merged++;
    }
    snprintf(names[n], sizeof names[n], "model.%s", t->name);
    w[n].name = names[n];
    w[n].dtype = o->dtype;
    w[n].ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) w[n].shape[d] = t->shape[d];
    w[n].data = data;
    if (t->offset == m->embed_offset && padded) {
      memcpy(padded, data, (size_t)(m->vocab * m->d) * sizeof(float));
      w[n].shape[0] = rows;
      w[n].data = padded;
    }
    n++;
    int l = t->layer, next = i + 1;
    while (next < m->n_tensors && gt_peft_is_adapter(m->tensors[next].name, NULL, 0, NULL)) next++;
    int last_of_layer = l >= 0 && (next == m->n_tensors || m->tensors[next].layer != l);
    if (g4 && last_of_layer && m->layers[l].slot_offset[GT_P_LAYER_SCALAR] < 0) {
      scalars[l] = m->layers[l].layer_scalar;
      snprintf(names[n], sizeof names[n], "model.layers.%d.layer_scalar", l);
      w[n] = (gt_st_wtensor){names[n], o->dtype, 1, {1}, &scalars[l]};
      n++;
    }
  }
  if ((rc = gt_st_write_sharded(out_dir, n, w, o->max_shard_bytes, err))) goto out;
  char *js = gt_hf_config_to_json(cfg, (long long)rows, o->dtype == GT_DT_F32 ? "float32" : "bfloat16");
  char path[GT_STR_PATH + 16];
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  FILE *f = js ? fopen(path, "wb") : NULL;
  int ok = f && fputs(js, f) >= 0 && fputc('\n', f) != EOF;
  if (f) ok = fclose(f) == 0 && ok;
  free(js);
  if (!ok) {
    rc = gt_err_set(err, GT_ERR_IO, "hf: cannot write '%s'", path);
    goto out;
  }
  if (info) {
    memset(info, 0, sizeof *info);
    snprintf(info->prefix, sizeof info->prefix, "model.");
    snprintf(info->architecture, sizeof info->architecture, "%s", g4 ? "Gemma4ForCausalLM" : "Gemma3ForCausalLM");
    info->embed_rows = rows;
    info->n_tensors = n;
    info->n_merged = n_merged;
    snprintf(info->dtype, sizeof info->dtype, "%s", gt_dtype_name(o->dtype));
  }
out:
  for (int i = 0; tmp && i < n_tmp; i++) gt_mem_free(m->mem, tmp[i]);
  free(tmp);
  free(scalars);
  free(names);
  free(w);
  gt_mem_free(m->mem, padded);
  return rc;
}

/* What a Gemma 4 tensor the model lacks is (name without the prefix): 1 a
 * layer_scalar buffer of a layer that does not train it, 2 a k/v projection
 * or norm of a KV-shared layer (transformers drops those on load), 0
 * neither. */
static int gt__hf4_unused_kind(const gt_model *m, const char *name) {
  int l, used = 0;
  if (!gt__is_gemma4(m) || sscanf(name, "layers.%d.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= m->n_layers)
    return 0;
  const char *rest = name + used;
  if (!strcmp(rest, "layer_scalar")) return m->layers[l].slot_offset[GT_P_LAYER_SCALAR] < 0 ? 1 : 0;
  static const char *const kv[] = {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight",
                                   "self_attn.v_norm.weight"};
  if (m->layers[l].kv_donor >= 0)
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
      if (!strcmp(rest, kv[i])) return 2;
  return 0;
}

static int gt__set_has(const gt_st_set *set, const char *prefix, const char *name) {
  char full[400];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  return gt_st_set_find(set, full) != NULL;
}

/* A tensor the model stores quantized (a frozen base): read a chunk of rows
 * at a time as float32 and quantized into place (model/qstore.h), never a
 * float32 copy of the whole tensor. A bfloat16 tensor into a bfloat16 base is
 * exact. */
static gt_rc gt__import_stored(gt_model *m, const gt_tensor_info *t, const gt_st_tensor *s, const char *where,
                               const char *full, gt_err *err) {
  int64_t rows = t->shape[0], cols = gt_qstore_cols(t), ck = gt_qstore_chunk_rows(t);
  if (ck > rows) ck = rows;
  float *x = malloc((size_t)(ck * cols) * sizeof(float));
  if (!x) return gt_err_set(err, GT_ERR_NOMEM, "hf: no memory to read '%s' (%lld rows at a time)", full, (long long)ck);
  gt_rc rc = GT_OK;
  for (int64_t r0 = 0; r0 < rows && !rc; r0 += ck) {
    int64_t n = rows - r0 < ck ? rows - r0 : ck;
    gt_err sub;
    gt_err_clear(&sub);
    if (gt_st_read_f32_range(s, r0 * cols, n * cols, x, &sub)) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "hf: %s: %s", where, sub.msg);
      break;
    }
    for (int64_t k = 0; k < n * cols && !rc; k++)
      if (!isfinite(x[k]))
        rc = gt_err_set(err, GT_ERR_FORMAT, "hf: %s: tensor '%s' element %lld of %lld is %g; a model's weights must be finite",
                        where, full, (long long)(r0 * cols + k), (long long)t->numel, (double)x[k]);
    if (!rc) rc = gt_qstore_put_rows(t, m->params + t->offset, r0, n, x, err);
  }
  free(x);
  return rc;
}

gt_rc gt_hf_import_params(gt_model *m, const gt_st_set *set, const char *where, gt_hf_info *info, gt_err *err) {
  gt_rc rc;
  gt_hf_info local;
  if (!info) info = &local;
  info->n_files = set->n_files;
  info->n_tensors = m->n_tensors;
  info->n_ignored = 0;
  info->first_ignored[0] = '\0';
  info->dtype[0] = '\0';
  const char *prefix = NULL;
  for (int p = 0; p < GT__HF_NPREFIX && !prefix; p++)
    if (gt__set_has(set, gt__hf_prefixes[p], "embed_tokens.weight")) prefix = gt__hf_prefixes[p];
  if (!prefix)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "hf: %s has no tensor 'embed_tokens.weight' under any of the prefixes model., "
                      "model.language_model., language_model.model.; not a Gemma checkpoint",
                      where);
  snprintf(info->prefix, sizeof info->prefix, "%s", prefix);
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    /* adapters (model/lora.h) are not the base's: they come from
     * lora_restore_path or keep their initialisation */
    if (t->lora || gt_peft_is_adapter(t->name, NULL, 0, NULL)) {
      info->n_tensors--;
      continue;
    }
    char full[400], want[96], got[96];
    snprintf(full, sizeof full, "%s%s", prefix, t->name);
    gt__shape_text(want, sizeof want, t->ndim, t->shape);
    const gt_st_tensor *s = gt_st_set_find(set, full);
    if (!s)
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s has no tensor '%s' (expected shape %s)", where, full, want);
    int is_embed = t->offset == m->embed_offset;
    /* Rows 262144.. of HF's table are the image token and padding. */
    int truncate = is_embed && !gt__is_gemma4(m) && m->vocab == GT_HF_GEMMA3_VOCAB && s->ndim == 2 && s->shape[0] == GT_HF_GEMMA3_ROWS &&
                   s->shape[1] == t->shape[1];
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (!same && !truncate) {
      gt__shape_text(got, sizeof got, s->ndim, s->shape);
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: tensor '%s' has shape %s, the model wants %s%s", where, full, got,
                        want, is_embed && !gt__is_gemma4(m) && m->vocab == GT_HF_GEMMA3_VOCAB ? " (or 262208 rows)" : "");
    }
    if (is_embed) info->embed_rows = s->shape[0];
    const char *dn = gt_dtype_name(s->dtype);
    if (!info->dtype[0])
      snprintf(info->dtype, sizeof info->dtype, "%s", dn);
    else if (strcmp(info->dtype, dn))
      snprintf(info->dtype, sizeof info->dtype, "mixed");
    gt_err sub;
    gt_err_clear(&sub);
    if (t->dtype != GT_STORE_F32) { /* a frozen base stored quantized */
      if ((rc = gt__import_stored(m, t, s, where, full, err))) return rc;
      continue;
    }
    if (gt_st_read_f32_range(s, 0, t->numel, m->params + t->offset, &sub))
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: %s", where, sub.msg);
    /* a NaN or Inf weight would only show as a non-finite loss at step 0 */
    const float *x = m->params + t->offset;
    for (int64_t k = 0; k < t->numel; k++)
      if (!isfinite(x[k]))
        return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: tensor '%s' element %lld of %lld is %g; a model's weights must be finite",
                          where, full, (long long)k, (long long)t->numel, (double)x[k]);
  }
  /* Everything else is counted, not loaded: Gemma 4 buffers and tensors HF
   * itself drops, then what is not the text decoder's (vision and audio
   * towers, projectors, a stored copy of the tied head). */
  info->n_unused_scalars = info->n_unused_scalars_not_one = info->n_unused_shared_kv = 0;
  size_t pl = strlen(prefix);
  for (int fi = 0; fi < set->n_files; fi++)
    for (int j = 0; j < set->files[fi].n_tensors; j++) {
      const gt_st_tensor *s = &set->files[fi].tensors[j];
      const char *nm = s->name;
      int ours = !strncmp(nm, prefix, pl);
      if (ours && gt_model_find_tensor(m, nm + pl)) continue;
      int kind = ours ? gt__hf4_unused_kind(m, nm + pl) : 0;
      if (kind == 1) {
        float v = 1.0f;
        gt_err sub;
        if (s->numel != 1 || (gt_st_read_f32_range(s, 0, 1, &v, &sub) == GT_OK && v != 1.0f))
          info->n_unused_scalars_not_one++;
        info->n_unused_scalars++;
      } else if (kind == 2) {
        info->n_unused_shared_kv++;
      } else if (info->n_ignored++ == 0) {
        snprintf(info->first_ignored, sizeof info->first_ignored, "%s", nm);
      }
    }
  return GT_OK;
}

gt_rc gt_hf_scan_scalars(const gt_st_set *set, const char *where, gt_hf_info *info, gt_err *err) {
  info->n_unused_scalars = info->n_unused_scalars_not_one = 0;
  const char *prefix = NULL;
  for (int p = 0; p < GT__HF_NPREFIX && !prefix; p++)
    if (gt__set_has(set, gt__hf_prefixes[p], "embed_tokens.weight")) prefix = gt__hf_prefixes[p];
  if (!prefix) return GT_OK; /* not a checkpoint the import would take: it says so */
  size_t pl = strlen(prefix);
  for (int fi = 0; fi < set->n_files; fi++)
    for (int j = 0; j < set->files[fi].n_tensors; j++) {
      const gt_st_tensor *s = &set->files[fi].tensors[j];
      int l, used = 0;
      if (strncmp(s->name, prefix, pl) || sscanf(s->name + pl, "layers.%d.layer_scalar%n", &l, &used) != 1 ||
          s->name[pl + (size_t)used] != '\0')
        continue;
      float v = 1.0f;
      gt_err sub;
      if (s->numel == 1 && gt_st_read_f32_range(s, 0, 1, &v, &sub))
        return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: %s", where, sub.msg);
      info->n_unused_scalars++;
      if (s->numel != 1 || v != 1.0f) info->n_unused_scalars_not_one++;
    }
  return GT_OK;
}

int gt_hf_is_dir(const char *path) {
  char p[GT_STR_PATH + 64];
  struct stat st;
  if (!path || stat(path, &st) || !S_ISDIR(st.st_mode)) return 0;
  snprintf(p, sizeof p, "%s/config.json", path);
  if (stat(p, &st)) return 0;
  snprintf(p, sizeof p, "%s/model.safetensors", path);
  if (stat(p, &st) == 0) return 1;
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
  return stat(p, &st) == 0;
}

gt_rc gt_hf_load_model(const char *dir, gt_config *cfg, gt_model *m, gt_mem *mem, gt_hf_info *info, gt_err *err) {
  gt_hf_info local;
  if (!info) info = &local;
  memset(m, 0, sizeof *m);
  gt_rc rc = gt_hf_config_read(dir, cfg, info, err);
  if (rc) return rc;
  gt_st_set set;
  memset(&set, 0, sizeof set);
  if ((rc = gt_st_set_open(&set, dir, err))) return rc;
  if ((rc = gt_model_build(m, cfg, err)) == GT_OK) {
    rc = gt_model_alloc_inference(m, mem, err);
    char where[GT_STR_PATH + 8];
    snprintf(where, sizeof where, "'%s'", dir);
    if (rc == GT_OK) rc = gt_hf_import_params(m, &set, where, info, err);
    if (rc) gt_model_free(m);
  }
  gt_st_set_close(&set);
  return rc;
}
