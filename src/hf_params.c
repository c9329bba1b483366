/* Hugging Face Gemma 3 parameters <-> a gt_model in memory (see hf.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gemtrain/hf.h"

/* Where the text decoder's tensors live: Gemma3ForCausalLM, then the
 * multimodal checkpoints as current transformers saves them, then as the
 * older hub shards do (spec 6.1). */
static const char *const gt__hf_prefixes[] = {"model.", "model.language_model.", "language_model.model."};
#define GT__HF_NPREFIX ((int)(sizeof gt__hf_prefixes / sizeof gt__hf_prefixes[0]))

gt_hf_export_opts gt_hf_export_defaults(void) { return (gt_hf_export_opts){GT_DT_BF16, 0, 1}; }

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
  gt_rc rc = gt_mkdirs(out_dir, "hf", err);
  if (rc) return rc;
  /* MaxText pads a 262144-token table with zero rows to HF's 262208. */
  int64_t rows = (o->pad_vocab && m->vocab == GT_HF_GEMMA3_VOCAB) ? GT_HF_GEMMA3_ROWS : m->vocab;
  float *padded = NULL;
  if (rows != m->vocab) {
    padded = gt_mem_alloc(m->mem, GT_MEM_OTHER, (size_t)(rows * m->d) * sizeof(float)); /* zero-filled */
    if (!padded)
      return gt_err_set(err, GT_ERR_NOMEM, "hf: no memory for the padded %lld x %lld embedding", (long long)rows,
                        (long long)m->d);
    memcpy(padded, m->params + m->embed_offset, (size_t)(m->vocab * m->d) * sizeof(float));
  }
  gt_st_wtensor *w = calloc((size_t)m->n_tensors, sizeof *w);
  char (*names)[128] = calloc((size_t)m->n_tensors, sizeof *names);
  if (!w || !names) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "hf: no memory for %d tensor entries", m->n_tensors);
    goto out;
  }
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    snprintf(names[i], sizeof names[i], "model.%s", t->name);
    w[i].name = names[i];
    w[i].dtype = o->dtype;
    w[i].ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
    w[i].data = m->params + t->offset;
    if (t->offset == m->embed_offset && padded) {
      w[i].shape[0] = rows;
      w[i].data = padded;
    }
  }
  if ((rc = gt_st_write_sharded(out_dir, m->n_tensors, w, o->max_shard_bytes, err))) goto out;
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
    info->embed_rows = rows;
    snprintf(info->dtype, sizeof info->dtype, "%s", gt_dtype_name(o->dtype));
  }
out:
  free(names);
  free(w);
  gt_mem_free(m->mem, padded);
  return rc;
}

static int gt__set_has(const gt_st_set *set, const char *prefix, const char *name) {
  char full[400];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  return gt_st_set_find(set, full) != NULL;
}

gt_rc gt_hf_import_params(gt_model *m, const gt_st_set *set, const char *where, gt_hf_info *info, gt_err *err) {
  gt_hf_info local;
  if (!info) info = &local;
  info->n_files = set->n_files;
  info->n_ignored = 0;
  info->first_ignored[0] = '\0';
  info->dtype[0] = '\0';
  const char *prefix = NULL;
  for (int p = 0; p < GT__HF_NPREFIX && !prefix; p++)
    if (gt__set_has(set, gt__hf_prefixes[p], "embed_tokens.weight")) prefix = gt__hf_prefixes[p];
  if (!prefix)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "hf: %s has no tensor 'embed_tokens.weight' under any of the prefixes model., "
                      "model.language_model., language_model.model.; not a Gemma 3 checkpoint",
                      where);
  snprintf(info->prefix, sizeof info->prefix, "%s", prefix);
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    char full[400], want[96], got[96];
    snprintf(full, sizeof full, "%s%s", prefix, t->name);
    gt__shape_text(want, sizeof want, t->ndim, t->shape);
    const gt_st_tensor *s = gt_st_set_find(set, full);
    if (!s)
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s has no tensor '%s' (expected shape %s)", where, full, want);
    int is_embed = t->offset == m->embed_offset;
    /* Rows 262144.. of HF's table are the image token and padding. */
    int truncate = is_embed && m->vocab == GT_HF_GEMMA3_VOCAB && s->ndim == 2 && s->shape[0] == GT_HF_GEMMA3_ROWS &&
                   s->shape[1] == t->shape[1];
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (!same && !truncate) {
      gt__shape_text(got, sizeof got, s->ndim, s->shape);
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: tensor '%s' has shape %s, the model wants %s%s", where, full, got,
                        want, is_embed && m->vocab == GT_HF_GEMMA3_VOCAB ? " (or 262208 rows)" : "");
    }
    if (is_embed) info->embed_rows = s->shape[0];
    const char *dn = gt_dtype_name(s->dtype);
    if (!info->dtype[0])
      snprintf(info->dtype, sizeof info->dtype, "%s", dn);
    else if (strcmp(info->dtype, dn))
      snprintf(info->dtype, sizeof info->dtype, "mixed");
    gt_err sub;
    gt_err_clear(&sub);
    if (gt_st_read_f32_range(s, 0, t->numel, m->params + t->offset, &sub))
      return gt_err_set(err, GT_ERR_FORMAT, "hf: %s: %s", where, sub.msg);
  }
  /* Everything else (vision tower, projector, a stored copy of the tied
   * head) is not the text decoder's: counted, not loaded. */
  for (int fi = 0; fi < set->n_files; fi++)
    for (int j = 0; j < set->files[fi].n_tensors; j++) {
      const char *nm = set->files[fi].tensors[j].name;
      size_t pl = strlen(prefix);
      if (!strncmp(nm, prefix, pl) && gt_model_find_tensor(m, nm + pl)) continue;
      if (info->n_ignored++ == 0) snprintf(info->first_ignored, sizeof info->first_ignored, "%s", nm);
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
