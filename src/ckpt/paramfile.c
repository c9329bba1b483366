/* gemtrain parameter files (see paramfile.h). */
#include "ckpt/paramfile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors.h"
#include "model/qstore.h"

static const char *const gt__prefix[3] = {"", "optimizer.mu.", "optimizer.nu."};

/* The "training_state" metadata text (paramfile.h), or NULL without memory. */
static char *gt__train_json(const gt_paramfile_train *ts) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "step", (double)ts->step);
  cJSON_AddNumberToObject(o, "data_epoch", (double)ts->data.epoch);
  cJSON_AddNumberToObject(o, "data_cursor", (double)ts->data.cursor);
  gt__ckpt_add_spike(o, &ts->spike);
  char *t = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return t;
}

static gt_rc gt__write(const char *path, const gt_model *m, const gt_config *cfg, const float *mu, const float *nu,
                       int64_t step, long long hf_rows, const gt_paramfile_train *ts, gt_err *err) {
  int nt = m->n_tensors;
  int64_t biggest = 0;
  for (int i = 0; i < nt; i++)
    if (m->tensors[i].numel > biggest) biggest = m->tensors[i].numel;
  gt_st_wtensor *w = calloc((size_t)(3 * nt), sizeof *w);
  char **names = calloc((size_t)(3 * nt), sizeof(char *));
  /* Moments not given are zeros: one zero tensor serves every name (and
   * the frozen base's, which has none). A frozen base stored quantized is
   * written as the float32 values the model computes with. */
  int nq = 0;
  for (int i = 0; i < nt; i++) nq += m->tensors[i].dtype != GT_STORE_F32;
  float *zeros = (!mu || !nu || nq) ? calloc((size_t)biggest + 1, sizeof(float)) : NULL;
  float **deq = calloc((size_t)nt + 1, sizeof *deq);
  if (!w || !names || ((!mu || !nu || nq) && !zeros) || !deq) {
    free(w), free(names), free(zeros), free(deq);
    return gt_err_set(err, GT_ERR_NOMEM, "params: no memory to save '%s'", path);
  }
  for (int i = 0; i < nt; i++)
    if (m->tensors[i].dtype != GT_STORE_F32) {
      if (!(deq[i] = malloc((size_t)m->tensors[i].numel * sizeof(float)))) {
        for (int j = 0; j < i; j++) free(deq[j]);
        free(w), free(names), free(zeros), free(deq);
        return gt_err_set(err, GT_ERR_NOMEM, "params: no memory to dequantize '%s' for '%s'", m->tensors[i].name, path);
      }
      gt_qstore_rows(&m->tensors[i], m->params + m->tensors[i].offset, 0, m->tensors[i].shape[0], deq[i]);
    }
  const float *bases[3] = {m->params, mu, nu};
  gt_rc rc = GT_OK;
  for (int k = 0; k < 3 && rc == GT_OK; k++)
    for (int i = 0; i < nt; i++) {
      const gt_tensor_info *t = &m->tensors[i];
      size_t len = strlen(gt__prefix[k]) + strlen(t->name) + 1;
      names[k * nt + i] = malloc(len);
      if (!names[k * nt + i]) {
        rc = gt_err_set(err, GT_ERR_NOMEM, "params: no memory to save '%s'", path);
        break;
      }
      snprintf(names[k * nt + i], len, "%s%s", gt__prefix[k], t->name);
      gt_st_wtensor *x = &w[k * nt + i];
      x->name = names[k * nt + i];
      x->dtype = GT_DT_F32;
      x->ndim = t->ndim;
      for (int d = 0; d < t->ndim; d++) x->shape[d] = t->shape[d];
      x->data = bases[k] ? bases[k] + t->offset : zeros;
      if (deq[i]) x->data = k == 0 ? deq[i] : zeros;
    }
  if (rc == GT_OK) {
    char *cfg_s = gt_config_to_json(cfg);
    cJSON *meta = cJSON_CreateObject();
    char st[32];
    snprintf(st, sizeof st, "%lld", (long long)step);
    cJSON_AddStringToObject(meta, "format", "gemtrain params+optimizer v1");
    cJSON_AddStringToObject(meta, "optimizer_step", st);
    cJSON_AddStringToObject(meta, "config", cfg_s ? cfg_s : "{}");
    char rows[32];
    snprintf(rows, sizeof rows, "%lld", hf_rows);
    if (hf_rows > 0) cJSON_AddStringToObject(meta, "hf_embed_rows", rows);
    /* safetensors metadata values are strings: the JSON as text */
    char *ts_s = ts ? gt__train_json(ts) : NULL;
    if (ts_s) cJSON_AddStringToObject(meta, "training_state", ts_s);
    char *meta_s = cJSON_PrintUnformatted(meta);
    rc = (ts && !ts_s) || !meta_s ? gt_err_set(err, GT_ERR_NOMEM, "params: no memory to save '%s'", path)
                                  : gt_st_write(path, 3 * nt, w, meta_s, err);
    cJSON_Delete(meta);
    free(meta_s), free(cfg_s), free(ts_s);
  }
  for (int i = 0; i < 3 * nt; i++) free(names[i]);
  for (int i = 0; i < nt; i++) free(deq[i]);
  free(names), free(w), free(zeros), free(deq);
  return rc;
}

gt_rc gt_paramfile_write(const char *path, const gt_model *m, const gt_config *cfg, const float *mu,
                         const float *nu, int64_t step, gt_err *err) {
  return gt__write(path, m, cfg, mu, nu, step, 0, NULL, err);
}

gt_rc gt_paramfile_write_train(const char *path, const gt_model *m, const gt_config *cfg, const float *mu,
                               const float *nu, int64_t opt_step, const gt_paramfile_train *ts, gt_err *err) {
  return gt__write(path, m, cfg, mu, nu, opt_step, 0, ts, err);
}

gt_rc gt_paramfile_write_hf(const char *path, const gt_model *m, const gt_config *cfg, long long hf_embed_rows,
                            gt_err *err) {
  if (hf_embed_rows < 1)
    return gt_err_set(err, GT_ERR_ARG, "params: hf_embed_rows = %lld for '%s'; expected a row count of at least 1",
                      hf_embed_rows, path);
  return gt__write(path, m, cfg, NULL, NULL, 0, hf_embed_rows, NULL, err);
}

gt_rc gt_paramfile_read_hf_rows(const char *path, long long *rows, gt_err *err) {
  *rows = 0;
  gt_st_file f;
  gt_rc rc = gt_st_open(&f, path, err);
  if (rc) return rc;
  cJSON *meta = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(meta, "hf_embed_rows");
  if (r) {
    const char *v = cJSON_IsString(r) ? r->valuestring : "";
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 1 || v[0] == '+' || v[0] == ' ')
      rc = gt_err_set(err, GT_ERR_FORMAT, "params: '%s' metadata hf_embed_rows = '%.40s'; expected a whole number >= 1",
                      path, cJSON_IsString(r) ? v : "(not a string)");
    else
      *rows = n;
  }
  cJSON_Delete(meta);
  gt_st_close(&f);
  return rc;
}

static gt_rc gt__read_stored(const gt_st_tensor *s, const gt_tensor_info *t, float *dst, gt_err *err) {
  int64_t rows = t->shape[0], cols = gt_qstore_cols(t), ck = gt_qstore_chunk_rows(t);
  if (ck > rows) ck = rows;
  float *x = malloc((size_t)(ck * cols) * sizeof(float));
  if (!x) return gt_err_set(err, GT_ERR_NOMEM, "params: no memory to read '%s'", t->name);
  gt_rc rc = GT_OK;
  for (int64_t r0 = 0; r0 < rows && !rc; r0 += ck) {
    int64_t n = rows - r0 < ck ? rows - r0 : ck;
    if (!(rc = gt_st_read_f32_range(s, r0 * cols, n * cols, x, err))) rc = gt_qstore_put_rows(t, dst, r0, n, x, err);
  }
  free(x);
  return rc;
}

/* The "training_state" text of path's metadata into ts, checked against the
 * file's optimizer step. */
static gt_rc gt__read_train(const char *path, const char *text, int64_t opt_step, gt_paramfile_train *ts,
                            gt_err *err) {
  cJSON *o = cJSON_Parse(text);
  gt_rc rc = GT_OK;
  const char *what = "metadata training_state";
  if (!cJSON_IsObject(o))
    rc = gt_err_set(err, GT_ERR_FORMAT, "params: '%s' metadata training_state = '%.60s'; expected a JSON object", path,
                    text);
  else if (!(rc = gt__ckpt_int(o, "step", opt_step, GT__CKPT_INT_MAX, path, what,
                               "steps done, at least the optimizer_step's updates", &ts->step, err)) &&
           !(rc = gt__ckpt_int(o, "data_epoch", 0, GT__CKPT_INT_MAX, path, what, NULL, &ts->data.epoch, err)) &&
           !(rc = gt__ckpt_int(o, "data_cursor", 0, GT__CKPT_INT_MAX, path, what, NULL, &ts->data.cursor, err)))
    rc = gt__ckpt_read_spike(cJSON_GetObjectItemCaseSensitive(o, "spike_guard"), path,
                             "metadata training_state spike_guard", ts->step, &ts->spike, err);
  ts->present = rc == GT_OK;
  cJSON_Delete(o);
  return rc;
}

/* A shape as "[8]", "[8, 16]" or "[]" (a scalar). */
static const char *gt__shape_text(const int64_t *shape, int ndim, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && o < n; d++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

/* The adapter keys that change what the adapters compute without changing
 * their shapes (the rank and the modules show in the tensors). */
static const char *const gt__lora_math_keys[] = {"lora_alpha", "lora_use_rslora"};

/* Whether cfg's key k differs between cfg and file; appends "k = a (file b)"
 * to the list in msg. */
static int gt__key_differs(const gt_config *cfg, const gt_config *file, const gt_key_spec *k, char *msg, size_t n,
                           size_t *o) {
  char have[GT_STR_PATH + 32], theirs[GT_STR_PATH + 32];
  gt_config_get_text(cfg, k->name, have, sizeof have, NULL);
  gt_config_get_text(file, k->name, theirs, sizeof theirs, NULL);
  if (!strcmp(have, theirs)) return 0;
  if (*o < n)
    *o += (size_t)snprintf(msg + *o, n - *o, "%s%s = %s in the file, %s here", *o ? "; " : "", k->name, theirs, have);
  return 1;
}

/* The file's metadata config names the same model as cfg: every model key
 * (the key table's GT_KEY_MODEL: shapes and math) and, when both train
 * adapters, their scale keys. A file whose metadata holds no config (not
 * written by gemtrain) is judged by its tensors alone. */
static gt_rc gt__same_model(const char *path, const gt_st_file *f, const gt_config *cfg, gt_err *err) {
  cJSON *meta = f->metadata_json ? cJSON_Parse(f->metadata_json) : NULL;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta, "config");
  gt_config *file = cJSON_IsString(c) ? malloc(sizeof *file) : NULL;
  gt_rc rc = GT_OK;
  if (cJSON_IsString(c) && !file)
    rc = gt_err_set(err, GT_ERR_NOMEM, "params: no memory to read the config of '%s'", path);
  if (file) {
    /* the file's keys over cfg: a key an older file lacks counts as cfg's */
    *file = *cfg;
    char source[1100];
    snprintf(source, sizeof source, "the metadata of '%s'", path);
    rc = gt_config_apply_json_text(file, c->valuestring, source, err);
  }
  if (file && !rc) {
    char list[700] = "";
    size_t o = 0;
    int nd = 0;
    for (int i = 0; i < gt_config_num_keys(); i++) {
      const gt_key_spec *k = gt_config_key_at(i);
      if (k->flags & GT_KEY_MODEL) nd += gt__key_differs(cfg, file, k, list, sizeof list, &o);
    }
    if (cfg->enable_lora && file->enable_lora)
      for (size_t i = 0; i < sizeof gt__lora_math_keys / sizeof gt__lora_math_keys[0]; i++)
        nd += gt__key_differs(cfg, file, gt_config_key(gt__lora_math_keys[i]), list, sizeof list, &o);
    if (nd)
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "params: '%s' holds another model than this one (%d model key%s differ%s: %s); expected a file "
                      "saved from the same model",
                      path, nd, nd > 1 ? "s" : "", nd > 1 ? "" : "s", list);
  }
  free(file);
  cJSON_Delete(meta);
  return rc;
}

/* Every tensor of f is one of m's, or its moment: a file of a larger model
 * (more layers, adapters m lacks) is not m's. */
static gt_rc gt__no_other_tensors(const char *path, const gt_st_file *f, const gt_model *m, gt_err *err) {
  char list[600] = "";
  size_t o = 0;
  int extra = 0;
  for (int j = 0; j < f->n_tensors; j++) {
    const char *name = f->tensors[j].name;
    for (int k = 1; k < 3; k++)
      if (!strncmp(name, gt__prefix[k], strlen(gt__prefix[k]))) name += strlen(gt__prefix[k]);
    int known = 0;
    for (int i = 0; i < m->n_tensors && !known; i++) known = !strcmp(name, m->tensors[i].name);
    if (known) continue;
    if (extra++ < 4 && o < sizeof list)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s'%s'", extra > 1 ? ", " : "", f->tensors[j].name);
  }
  if (!extra) return GT_OK;
  return gt_err_set(err, GT_ERR_FORMAT,
                    "params: '%s' holds %d tensor%s this model does not have (%s%s); expected a file saved from the "
                    "same model",
                    path, extra, extra > 1 ? "s" : "", list, extra > 4 ? ", ..." : "");
}

static gt_rc gt__read(const char *path, gt_model *m, const gt_config *same, float *mu, float *nu, int64_t *step,
                      gt_paramfile_train *ts, gt_err *err) {
  if (ts) ts->present = 0;
  gt_st_file f;
  gt_rc rc = gt_st_open(&f, path, err);
  if (rc) return rc;
  if (same && ((rc = gt__same_model(path, &f, same, err)) || (rc = gt__no_other_tensors(path, &f, m, err)))) {
    gt_st_close(&f);
    return rc;
  }
  float *bases[3] = {m->params, mu, nu};
  for (int k = 0; k < 3 && rc == GT_OK; k++) {
    if (!bases[k]) continue;
    for (int i = 0; i < m->n_tensors && rc == GT_OK; i++) {
      const gt_tensor_info *t = &m->tensors[i];
      char name[300];
      snprintf(name, sizeof name, "%s%s", gt__prefix[k], t->name);
      const gt_st_tensor *s = gt_st_find(&f, name);
      if (!s) {
        rc = gt_err_set(err, GT_ERR_FORMAT, "params: '%s' has no tensor '%s'", path, name);
        break;
      }
      int same_shape = s->ndim == t->ndim;
      for (int d = 0; same_shape && d < t->ndim; d++) same_shape = s->shape[d] == t->shape[d];
      if (!same_shape) {
        char a[128], b[128];
        rc = gt_err_set(err, GT_ERR_FORMAT, "params: '%s' tensor '%s' has shape %s, the model wants %s", path, name,
                        gt__shape_text(s->shape, s->ndim, a, sizeof a), gt__shape_text(t->shape, t->ndim, b, sizeof b));
        break;
      }
      if (t->dtype != GT_STORE_F32) { /* a frozen base stored quantized: no moments; its values a chunk at a time */
        if (k == 0) rc = gt__read_stored(s, t, bases[k] + t->offset, err);
        continue;
      }
      rc = gt_st_read_f32(s, bases[k] + t->offset, t->numel, err);
    }
  }
  if (rc == GT_OK && step) {
    *step = 0;
    cJSON *meta = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(meta, "optimizer_step");
    if (cJSON_IsString(st)) {
      /* a whole decimal number of updates, 0 .. 2^53 (the metadata is not
       * crc-protected: "-100" made AdamW's bias correction NaN) */
      const char *v = st->valuestring;
      char *end = NULL;
      errno = 0;
      long long n = strtoll(v, &end, 10);
      if (errno || end == v || *end || n < 0 || n > (1LL << 53) || v[0] == '+' || v[0] == ' ')
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "paramfile '%s': metadata optimizer_step = '%s'; expected a whole number of AdamW updates "
                        "in [0, 2^53]",
                        path, v);
      else
        *step = n;
    }
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(meta, "training_state");
    if (rc == GT_OK && ts && tr)
      rc = cJSON_IsString(tr) ? gt__read_train(path, tr->valuestring, *step, ts, err)
                              : gt_err_set(err, GT_ERR_FORMAT,
                                           "params: '%s' metadata training_state is not a string; expected JSON text",
                                           path);
    cJSON_Delete(meta);
  }
  gt_st_close(&f);
  return rc;
}

gt_rc gt_paramfile_read(const char *path, gt_model *m, float *mu, float *nu, int64_t *step, gt_err *err) {
  return gt__read(path, m, NULL, mu, nu, step, NULL, err);
}

gt_rc gt_paramfile_read_train(const char *path, gt_model *m, const gt_config *same, float *mu, float *nu,
                              int64_t *opt_step, gt_paramfile_train *ts, gt_err *err) {
  int64_t own;
  return gt__read(path, m, same, mu, nu, opt_step ? opt_step : &own, ts, err);
}

gt_rc gt_paramfile_read_config(const char *path, gt_config *cfg, gt_err *err) {
  gt_st_file f;
  gt_rc rc = gt_st_open(&f, path, err);
  if (rc) return rc;
  cJSON *meta = f.metadata_json ? cJSON_Parse(f.metadata_json) : NULL;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta, "config");
  if (!cJSON_IsString(c)) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "params: '%s' has no \"config\" in its metadata; expected a file written by gt_ctx_save or "
                    "gemtrain convert",
                    path);
  } else if ((rc = gt_config_load(cfg, NULL, NULL, 0, NULL, err)) == GT_OK) {
    char source[1100];
    snprintf(source, sizeof source, "the metadata of '%s'", path);
    if ((rc = gt_config_apply_json_text(cfg, c->valuestring, source, err)) == GT_OK)
      rc = gt_config_validate(cfg, err);
  }
  cJSON_Delete(meta);
  gt_st_close(&f);
  return rc;
}
