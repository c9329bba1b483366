/* Parameter files: the model's tensors, by Hugging Face name, as safetensors. */
#include <stdio.h>
#include <stdlib.h>

#include "gemtrain/model.h"
#include "gemtrain/safetensors.h"

gt_rc gt_model_save_params(const gt_model *m, const char *path, const char *metadata_json, gt_err *err) {
  if (!m->params) return gt_err_set(err, GT_ERR_ARG, "model: no parameters to save to '%s'", path);
  gt_st_wtensor *w = calloc((size_t)m->n_tensors, sizeof *w);
  if (!w) return gt_err_set(err, GT_ERR_NOMEM, "model: no memory to save '%s'", path);
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    w[i] = (gt_st_wtensor){.name = t->name, .dtype = GT_DT_F32, .ndim = t->ndim, .data = m->params + t->offset};
    for (int k = 0; k < t->ndim; k++) w[i].shape[k] = t->shape[k];
  }
  gt_rc rc = gt_st_write(path, m->n_tensors, w, metadata_json, err);
  free(w);
  return rc;
}

static void gt__shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

gt_rc gt_model_load_params(gt_model *m, const char *path, gt_err *err) {
  if (!m->params) return gt_err_set(err, GT_ERR_ARG, "model: parameters are not allocated to load '%s'", path);
  gt_st_file f;
  gt_rc rc = gt_st_open(&f, path, err);
  if (rc) return rc;
  for (int i = 0; i < m->n_tensors && rc == GT_OK; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    const gt_st_tensor *s = gt_st_find(&f, t->name);
    if (!s) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "model: '%s' has no tensor '%s' (the configured model needs it)", path, t->name);
      break;
    }
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (!same) {
      char want[96], got[96];
      gt__shape_text(want, sizeof want, t->ndim, t->shape);
      gt__shape_text(got, sizeof got, s->ndim, s->shape);
      rc = gt_err_set(err, GT_ERR_FORMAT, "model: '%s' tensor '%s' has shape %s, the configured model wants %s", path,
                      t->name, got, want);
      break;
    }
    rc = gt_st_read_f32(s, m->params + t->offset, t->numel, err);
  }
  gt_st_close(&f);
  return rc;
}
