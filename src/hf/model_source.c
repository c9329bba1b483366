/* A model source (model_source.h): classify load_parameters_path, take the
 * model it defines, load its parameters. */
#include "hf/model_source.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/paramfile.h"
#include "ckpt/safetensors.h"
#include "data/chat.h"
#include "hf/peft.h"
#include "model/qstore.h"

static int gt__isdir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int gt__exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* The last path component (without trailing slashes) into buf. */
static const char *gt__basename(const char *path, char *buf, size_t n) {
  snprintf(buf, n, "%s", path);
  size_t l = strlen(buf);
  while (l > 1 && buf[l - 1] == '/') buf[--l] = '\0';
  const char *b = strrchr(buf, '/');
  return b && b[1] ? b + 1 : buf;
}

/* "step_00000010" -> 10; -1 for any other name. The names gt_ckpt_save
 * writes (ckpt.c); digits only, so "step_tmp..." never counts. */
static long long gt__step_of(const char *name) {
  if (strncmp(name, "step_", 5) || !name[5]) return -1;
  long long v = 0;
  for (const char *c = name + 5; *c; c++) {
    if (*c < '0' || *c > '9' || v > 100000000000000LL) return -1;
    v = v * 10 + (*c - '0');
  }
  return v;
}

/* The step directory a checkpoint path means: itself when it is one, else
 * the one `latest` names in its checkpoints directory (the run directory's
 * checkpoints/, or the path itself), else the newest step directory there.
 * ckpt.c's gt_ckpt_load_latest resolves the same way before walking back. */
static gt_rc gt__ckpt_step_dir(const char *path, char *dir, size_t n, gt_err *err) {
  char p[GT_STR_PATH], base[GT_STR_PATH], root[GT_STR_PATH + 16];
  snprintf(p, sizeof p, "%s", path);
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/') p[--l] = '\0';
  if (gt__step_of(gt__basename(p, base, sizeof base)) >= 0) {
    snprintf(dir, n, "%s", p);
    return GT_OK;
  }
  snprintf(root, sizeof root, "%s/checkpoints", p);
  if (!gt__isdir(root)) snprintf(root, sizeof root, "%s", p);
  char lp[GT_STR_PATH + 32];
  snprintf(lp, sizeof lp, "%s/latest", root);
  FILE *f = fopen(lp, "r");
  if (f) {
    char line[128] = "";
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(dir, n, "%s/%s", root, line);
    if (gt__step_of(line) < 0 || !gt__isdir(dir))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "model source: '%s' names '%s', which is not a step directory in '%s'; point "
                        "load_parameters_path at a step directory",
                        lp, line, root);
    return GT_OK;
  }
  DIR *d = opendir(root);
  if (!d) return gt_err_set(err, GT_ERR_IO, "model source: cannot open '%s': %s", root, strerror(errno));
  long long best = -1;
  char name[256] = "";
  struct dirent *e;
  while ((e = readdir(d))) {
    long long s = gt__step_of(e->d_name);
    char full[GT_STR_PATH + 300];
    snprintf(full, sizeof full, "%s/%s", root, e->d_name);
    if (s > best && gt__isdir(full)) best = s, snprintf(name, sizeof name, "%s", e->d_name);
  }
  closedir(d);
  if (best < 0) return gt_err_set(err, GT_ERR_IO, "model source: '%s' holds no step directory", root);
  snprintf(dir, n, "%s/%s", root, name);
  return GT_OK;
}

/* "checkpoint step_00000200 of run runs/a" (or "in <dir>" when the step
 * directory is not inside a run's checkpoints/). */
static void gt__ckpt_where(const char *step_dir, char *buf, size_t n) {
  char parent[GT_STR_PATH + 64], b1[GT_STR_PATH + 64], b2[GT_STR_PATH + 64];
  const char *step = gt__basename(step_dir, b1, sizeof b1);
  snprintf(parent, sizeof parent, "%s", step_dir);
  char *slash = strrchr(parent, '/');
  if (!slash) {
    snprintf(buf, n, "checkpoint %s", step);
    return;
  }
  *slash = '\0';
  if (strcmp(gt__basename(parent, b2, sizeof b2), "checkpoints")) {
    snprintf(buf, n, "checkpoint %s in %s", step, parent);
    return;
  }
  char *up = strrchr(parent, '/');
  if (up) *up = '\0';
  snprintf(buf, n, "checkpoint %s of run %s", step, up ? parent : ".");
}

static gt_rc gt__open_checkpoint(gt_model_source *s, gt_err *err) {
  gt_rc rc = gt__ckpt_step_dir(s->path, s->dir, sizeof s->dir, err);
  if (rc) return rc;
  char *js = NULL;
  if ((rc = gt_ckpt_read_config(s->dir, &js, err)) == GT_OK &&
      (rc = gt_config_load(&s->cfg, NULL, NULL, 0, NULL, err)) == GT_OK) {
    char source[GT_STR_PATH + 128];
    snprintf(source, sizeof source, "the config stored in checkpoint '%s'", s->dir);
    rc = gt_config_apply_json_text(&s->cfg, js, source, err);
  }
  free(js);
  /* a checkpoint whose frozen reference names no table storage was written
   * when the lookup tables were stored as lora_weight_qtype: its config
   * says so, and the model it builds is the one it trained (a header it
   * cannot read here is the load's to report) */
  char *fnames = NULL;
  int nf = 0;
  gt_ckpt_frozen fz;
  gt_err ferr;
  if (!rc && !gt_ckpt_read_frozen(s->dir, &fnames, &nf, &fz, &ferr) && nf && !fz.embed_qtype[0])
    snprintf(s->cfg.lora_embedding_qtype, sizeof s->cfg.lora_embedding_qtype, "%s", s->cfg.lora_weight_qtype);
  free(fnames);
  if (rc) return rc;
  char base[GT_STR_PATH], where[GT_STR_PATH * 2 + 64];
  /* the checkpoint's own model_name, else the run's name */
  char run[GT_STR_PATH + 64];
  snprintf(run, sizeof run, "%s", s->dir);
  char *cut = strrchr(run, '/'); /* <run>/checkpoints/step_N -> <run> */
  if (cut) *cut = '\0';
  cut = strrchr(run, '/');
  if (cut && !strcmp(cut, "/checkpoints")) *cut = '\0';
  if (s->cfg.model_name[0])
    snprintf(s->name, sizeof s->name, "%s", s->cfg.model_name);
  else
    snprintf(s->name, sizeof s->name, "ckpt:%.58s", gt__basename(run, base, sizeof base));
  gt__ckpt_where(s->dir, where, sizeof where);
  snprintf(s->desc, sizeof s->desc, "%s (%s, %lld layers)", where, s->name, s->cfg.base_num_decoder_layers);
  return GT_OK;
}

static gt_rc gt__open_hf(gt_model_source *s, gt_err *err) {
  gt_rc rc = gt_config_load(&s->cfg, NULL, NULL, 0, NULL, err);
  if (rc || (rc = gt_hf_config_read(s->path, &s->cfg, &s->hf, err))) return rc;
  char base[GT_STR_PATH];
  snprintf(s->name, sizeof s->name, "hf:%.60s", gt__basename(s->path, base, sizeof base));
  snprintf(s->cfg.model_name, sizeof s->cfg.model_name, "%s", s->name);
  snprintf(s->desc, sizeof s->desc, "Hugging Face directory %s (%s, %s, %lld layers)", s->path,
           s->hf.architecture[0] ? s->hf.architecture : "model", s->cfg.decoder_block,
           s->cfg.base_num_decoder_layers);
  return GT_OK;
}

static gt_rc gt__open_paramfile(gt_model_source *s, gt_err *err) {
  gt_rc rc = gt_paramfile_read_config(s->path, &s->cfg, err);
  if (rc) return rc;
  char base[GT_STR_PATH];
  if (s->cfg.model_name[0])
    snprintf(s->name, sizeof s->name, "%s", s->cfg.model_name);
  else
    snprintf(s->name, sizeof s->name, "params:%.56s", gt__basename(s->path, base, sizeof base));
  snprintf(s->desc, sizeof s->desc, "parameter file %s (%s, %lld layers)", s->path, s->name,
           s->cfg.base_num_decoder_layers);
  return GT_OK;
}

/* A directory that is none of the three: say what it lacks. */
static gt_rc gt__refuse_dir(const char *path, gt_err *err) {
  char p[GT_STR_PATH + 64];
  snprintf(p, sizeof p, "%s/config.json", path);
  if (gt__exists(p))
    return gt_err_set(err, GT_ERR_IO,
                      "model source: '%s' has config.json but neither model.safetensors nor "
                      "model.safetensors.index.json, so it is not a Hugging Face directory",
                      path);
  snprintf(p, sizeof p, "%s/checkpoints", path);
  if (gt__isdir(p))
    return gt_err_set(err, GT_ERR_IO, "model source: '%s' holds no checkpoint (no step_* directory, no 'latest')", p);
  return gt_err_set(err, GT_ERR_IO,
                    "model source: '%s' is a directory without a checkpoint (step_* directories, or checkpoints/ "
                    "with them) or a Hugging Face model (config.json + model.safetensors); expected a run, "
                    "checkpoint or Hugging Face directory or a parameter file",
                    path);
}

gt_rc gt_model_source_open(const char *path, gt_model_source *src, gt_err *err) {
  memset(src, 0, sizeof *src);
  if (!path || !path[0])
    return gt_err_set(err, GT_ERR_CONFIG, "model source: key 'load_parameters_path' is empty; expected a run, "
                                          "checkpoint or Hugging Face directory or a parameter file");
  if (strlen(path) >= sizeof src->path)
    return gt_err_set(err, GT_ERR_CONFIG, "model source: path '%.80s...' is longer than %zu characters", path,
                      sizeof src->path - 1);
  snprintf(src->path, sizeof src->path, "%s", path);
  snprintf(src->dir, sizeof src->dir, "%s", path);
  struct stat st;
  if (stat(path, &st))
    return gt_err_set(err, GT_ERR_IO,
                      "model source: cannot read '%s': %s (expected a run, checkpoint or Hugging Face directory or a "
                      "parameter file)",
                      path, strerror(errno));
  if (S_ISREG(st.st_mode)) {
    src->kind = GT_SRC_PARAMFILE;
    return gt__open_paramfile(src, err);
  }
  if (!S_ISDIR(st.st_mode))
    return gt_err_set(err, GT_ERR_IO, "model source: '%s' is neither a directory nor a regular file", path);
  if (gt_hf_is_dir(path)) {
    src->kind = GT_SRC_HF;
    return gt__open_hf(src, err);
  }
  if (gt_ckpt_present(path)) {
    src->kind = GT_SRC_CHECKPOINT;
    return gt__open_checkpoint(src, err);
  }
  return gt__refuse_dir(path, err);
}

static const char *gt__kind_name(gt_model_source_kind k) {
  return k == GT_SRC_HF ? "the Hugging Face directory" : k == GT_SRC_CHECKPOINT ? "the checkpoint" : "the parameter file";
}

/* A key's value as a person reads it (floats without the 17th digit). */
static void gt__show(const gt_config *c, const gt_key_spec *k, char *buf, size_t n) {
  if (k->type == GT_KEY_FLOAT)
    snprintf(buf, n, "%.10g", *(const double *)((const char *)c + k->offset));
  else
    gt_config_get_text(c, k->name, buf, n, NULL);
}

/* The keys of the adapters a checkpoint holds (see model_source.h). */
static const char *const gt__lora_keys[] = {"enable_lora",      "lora_rank",        "lora_alpha",
                                            "lora_use_rslora",  "lora_module_path", "lora_weight_qtype",
                                            "lora_embedding_qtype"};

gt_rc gt_model_source_apply_config(gt_model_source *src, gt_config *cfg, gt_err *err) {
  /* `want`: cfg with the source's model keys. An HF config.json is read onto
   * cfg itself, as transformers' defaults fill what the file omits and a key
   * the file cannot say (layer_scalar_trainable) stays the user's. */
  gt_config *want = malloc(sizeof *want), *next = malloc(sizeof *next);
  gt_rc rc = GT_OK;
  if (!want || !next) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "model source: no memory for a config");
    goto out;
  }
  *want = src->kind == GT_SRC_HF ? *cfg : src->cfg;
  if (src->kind == GT_SRC_HF && (rc = gt_hf_config_read(src->path, want, NULL, err))) goto out;
  *next = *cfg;
  int nk = gt_config_num_keys();
  for (int i = 0; i < nk; i++) {
    const gt_key_spec *k = gt_config_key_at(i);
    if (!(k->flags & GT_KEY_MODEL)) continue;
    char have[GT_STR_PATH + 32], theirs[GT_STR_PATH + 32];
    gt_config_get_text(cfg, k->name, have, sizeof have, NULL);
    gt_config_get_text(want, k->name, theirs, sizeof theirs, NULL);
    if (!strcmp(have, theirs)) continue;
    if (gt_config_is_user_set(cfg, k->name)) {
      gt__show(cfg, k, have, sizeof have);
      gt__show(want, k, theirs, sizeof theirs);
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "model source: key '%s' = %s is set explicitly, but %s '%s' holds a model with %s = %s; drop "
                      "the key to use the model as it is, or load another model",
                      k->name, have, gt__kind_name(src->kind), src->kind == GT_SRC_CHECKPOINT ? src->dir : src->path,
                      k->name, theirs);
      goto out;
    }
    memcpy((char *)next + k->offset, (const char *)want + k->offset, k->size);
  }
  /* the chat template is the model's unless the user names one
   * (data/chat.h): a Hugging Face directory's own, recognised as Google's,
   * or the one a checkpoint or parameter file was trained with */
  if (!gt_config_is_user_set(cfg, "chat_template")) {
    int found;
    if (src->kind == GT_SRC_HF)
      rc = gt_chat_template_of_dir(src->path, next->chat_template, sizeof next->chat_template, &found, err);
    else
      snprintf(next->chat_template, sizeof next->chat_template, "%s", want->chat_template);
    if (rc) goto out;
  }
  /* the tokenizer is the model's unless the user names one (tokenizer_path=
   * with nothing asks for byte tokens): a Hugging Face directory's
   * tokenizer.json, or the one a checkpoint or parameter file was trained
   * with. The order gemtrain decode takes (decode/text.h), so train, eval and
   * decode read text alike, and a run's config records what it read. */
  if (!gt_config_is_user_set(cfg, "tokenizer_path")) {
    char tp[GT_STR_PATH + 32] = "";
    if (src->kind == GT_SRC_HF) {
      snprintf(tp, sizeof tp, "%s/tokenizer.json", src->path);
      if (!gt__exists(tp)) tp[0] = '\0';
    } else {
      snprintf(tp, sizeof tp, "%s", src->cfg.tokenizer_path);
    }
    if (strlen(tp) >= sizeof next->tokenizer_path) {
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "model source: '%s' is the tokenizer of %s '%s', a path longer than tokenizer_path holds (%zu "
                      "characters); set tokenizer_path to a shorter path of it",
                      tp, gt__kind_name(src->kind), src->path, sizeof next->tokenizer_path - 1);
      goto out;
    }
    if (tp[0]) snprintf(next->tokenizer_path, sizeof next->tokenizer_path, "%s", tp);
  }
  if (src->kind == GT_SRC_CHECKPOINT && src->cfg.enable_lora)
    for (size_t i = 0; i < sizeof gt__lora_keys / sizeof gt__lora_keys[0]; i++) {
      const gt_key_spec *k = gt_config_key(gt__lora_keys[i]);
      char have[GT_STR_PATH + 32], theirs[GT_STR_PATH + 32];
      gt_config_get_text(cfg, k->name, have, sizeof have, NULL);
      gt_config_get_text(&src->cfg, k->name, theirs, sizeof theirs, NULL);
      if (!strcmp(have, theirs)) continue;
      if (gt_config_is_user_set(cfg, k->name)) {
        gt__show(cfg, k, have, sizeof have);
        gt__show(&src->cfg, k, theirs, sizeof theirs);
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "model source: key '%s' = %s is set explicitly, but the checkpoint '%s' holds adapters "
                        "trained with %s = %s; drop the key to use them as they are (or export the merged model "
                        "with gemtrain convert to_hf and load that)",
                        k->name, have, src->dir, k->name, theirs);
        goto out;
      }
      memcpy((char *)next + k->offset, (const char *)&src->cfg + k->offset, k->size);
    }
  /* the run's dropout continues with its adapters (and goes into a PEFT
   * export's adapter_config.json), unless the user sets another: it only
   * changes training, so an explicit value is kept, as a PEFT import does */
  if (src->kind == GT_SRC_CHECKPOINT && src->cfg.enable_lora && !gt_config_is_user_set(cfg, "lora_dropout"))
    next->lora_dropout = src->cfg.lora_dropout;
  src->lora_dir[0] = '\0';
  if (next->lora_restore_path[0]) {
    if ((rc = gt_peft_apply_config(next->lora_restore_path, next, err))) goto out;
    snprintf(src->lora_dir, sizeof src->lora_dir, "%s", next->lora_restore_path);
  }
  snprintf(next->model_name, sizeof next->model_name, "%s", src->name);
  if ((rc = gt_config_validate(next, err))) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    rc = gt_err_set(err, rc, "model source: with the model of '%s': %s", src->path, msg);
    goto out;
  }
  /* Gemma 4 layer_scalar buffers this model leaves unused: counted now, so
   * a caller can say so before it loads anything */
  src->hf.n_unused_scalars = src->hf.n_unused_scalars_not_one = 0;
  if (src->kind == GT_SRC_HF && gt_config_is_gemma4(next) && !next->layer_scalar_trainable) {
    gt_st_set set;
    memset(&set, 0, sizeof set);
    char where[GT_STR_PATH + 8];
    snprintf(where, sizeof where, "'%s'", src->path);
    if ((rc = gt_st_set_open(&set, src->path, err)) == GT_OK) rc = gt_hf_scan_scalars(&set, where, &src->hf, err);
    gt_st_set_close(&set);
    if (rc) goto out;
  }
  *cfg = *next;
out:
  free(want);
  free(next);
  return rc;
}

/* The frozen tensors of a checkpoint's layout km, re-created into buf from
 * the source its reference names: the initialisation (seed and scale) or
 * another model source. */
static gt_rc gt__frozen_base(const char *dir, const gt_model *km, const gt_ckpt_frozen *fz, float *buf, gt_err *err) {
  int seed;
  double scale;
  const char *lp = "load_parameters_path=";
  if (sscanf(fz->source, "init_weights_seed=%d (weight_init_scale=%lf)", &seed, &scale) == 2) {
    gt_model view = *km;
    view.params = buf;
    return gt_model_init_params(&view, (uint64_t)seed, scale) ? gt_err_set(err, GT_ERR_NOMEM, "model source: no memory "
           "to re-create the frozen base of checkpoint '%s' from %s", dir, fz->source) : GT_OK;
  }
  if (!strncmp(fz->source, lp, strlen(lp))) {
    gt_model_source *inner = malloc(sizeof *inner);
    if (!inner) return gt_err_set(err, GT_ERR_NOMEM, "model source: no memory");
    gt_rc rc = gt_model_source_open(fz->source + strlen(lp), inner, err);
    if (!rc) rc = gt_model_source_load_params(inner, km, buf, err);
    free(inner);
    return rc;
  }
  return gt_err_set(err, GT_ERR_FORMAT, "model source: checkpoint '%s' references frozen tensors from '%s', which is "
                    "neither an initialisation nor a load_parameters_path", dir, fz->source);
}

static gt_rc gt__load_base(gt_model_source *src, const gt_model *m, float *params, gt_err *err);

/* A checkpoint written without adapters (a pretraining run) loaded into a
 * model with them: it is read in its own layout (the model its stored
 * config builds, mask and frozen base included), then each of its tensors
 * moves to the same-named tensor of m, converted to m's storage; the
 * adapters keep what the caller put there (their initialisation). */
static gt_rc gt__load_under_adapters(gt_model_source *src, const gt_model *m, float *params, gt_err *err) {
  gt_model km;
  gt_rc rc = gt_model_build(&km, &src->cfg, err);
  if (rc) return rc;
  float *tmp = malloc((size_t)km.n_params * sizeof(float));
  if (!tmp) rc = gt_err_set(err, GT_ERR_NOMEM, "model source: no memory to read %lld parameters", (long long)km.n_params);
  if (!rc) rc = gt_model_source_load_params(src, &km, tmp, err);
  for (int i = 0; !rc && i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i], *kt;
    if (t->lora) continue;
    if (!(kt = gt_model_find_tensor(&km, t->name)) || kt->numel != t->numel)
      rc = gt_err_set(err, GT_ERR_CONFIG, "model source: checkpoint '%s' has no tensor '%s' of %lld elements for the "
                      "adapters' base", src->dir, t->name, (long long)t->numel);
    else
      rc = gt_qstore_convert(t, params + t->offset, kt, tmp + kt->offset, err);
  }
  free(tmp);
  gt_model_free(&km);
  return rc;
}

gt_rc gt_model_source_load_params(gt_model_source *src, const gt_model *m, float *params, gt_err *err) {
  gt_rc rc = gt__load_base(src, m, params, err);
  if (rc || !src->lora_dir[0]) return rc;
  return gt_peft_load(src->lora_dir, m, params, NULL, err);
}

static gt_rc gt__load_base(gt_model_source *src, const gt_model *m, float *params, gt_err *err) {
  /* the readers fill m->params: a view of m whose parameters are the caller's buffer */
  gt_model view = *m;
  view.params = params;
  gt_rc rc;
  switch (src->kind) {
    case GT_SRC_CHECKPOINT: {
      if (m->n_lora_tensors && !src->cfg.enable_lora) return gt__load_under_adapters(src, m, params, err);
      gt_ckpt_loaded ld;
      char *fnames = NULL;
      int nf = 0;
      gt_ckpt_frozen fz;
      if ((rc = gt_ckpt_read_frozen(src->dir, &fnames, &nf, &fz, err))) return rc;
      if (!nf && !m->n_frozen_tensors) {
        rc = gt_ckpt_load_dir(src->dir, m, params, NULL, NULL, &ld, err);
        if (rc == GT_OK) free(ld.config_json);
        return rc;
      }
      /* the store (model/store.h) places frozen tensors after the trainable
       * ones: read the checkpoint in the layout of the mask that wrote it,
       * its frozen tensors re-created from their source first (it holds only
       * what trained; the load checks their checksum), then move each
       * tensor to its place in m */
      gt_model km;
      /* in the storage it was trained over: converted tensor by tensor below */
      gt_store_dtype q = GT_STORE_F32, eq;
      if (fz.qtype[0] && (rc = gt_store_dtype_parse(fz.qtype, &q, err))) {
        free(fnames);
        return rc;
      }
      /* a checkpoint that names no table storage stored its tables as q */
      eq = q;
      if (fz.embed_qtype[0] && (rc = gt_store_dtype_parse(fz.embed_qtype, &eq, err))) {
        free(fnames);
        return rc;
      }
      if ((rc = gt_model_copy_frozen_as(m, fnames, nf, q, eq, &km, err))) {
        free(fnames);
        return rc;
      }
      float *tmp = malloc((size_t)km.n_params * sizeof(float));
      if (!tmp) rc = gt_err_set(err, GT_ERR_NOMEM, "model source: no memory to reorder %lld parameters", (long long)km.n_params);
      if (!rc && nf) rc = gt__frozen_base(src->dir, &km, &fz, tmp, err);
      if (!rc) rc = gt_ckpt_load_dir(src->dir, &km, tmp, NULL, NULL, &ld, err);
      if (rc == GT_OK) {
        free(ld.config_json);
        for (int i = 0; i < m->n_tensors && !rc; i++)
          rc = gt_qstore_convert(&m->tensors[i], params + m->tensors[i].offset, &km.tensors[i], tmp + km.tensors[i].offset, err);
      }
      /* float32 into a quantized base is the quantization asked for; a base
       * stored otherwise already is rounded again: say so */
      const char *was = gt_qstore_describe(&km), *now = gt_qstore_describe(m);
      src->converted[0] = '\0';
      if (!rc && strcmp(was, "float32") && strcmp(was, now))
        snprintf(src->converted, sizeof src->converted,
                 "note: %s's frozen base is stored as [%s], this run's as [%s]: its stored values are converted, "
                 "a second rounding (the same lora_weight_qtype and lora_embedding_qtype keep them)",
                 src->dir, was, now);
      free(tmp);
      free(fnames);
      gt_model_free(&km);
      return rc;
    }
    case GT_SRC_PARAMFILE:
      return gt_paramfile_read(src->path, &view, NULL, NULL, NULL, err);
    case GT_SRC_HF: {
      gt_st_set set;
      memset(&set, 0, sizeof set);
      char where[GT_STR_PATH + 8];
      snprintf(where, sizeof where, "'%s'", src->path);
      if ((rc = gt_st_set_open(&set, src->path, err)) == GT_OK)
        rc = gt_hf_import_params(&view, &set, where, &src->hf, err);
      gt_st_set_close(&set);
      return rc;
    }
  }
  return gt_err_set(err, GT_ERR_INTERNAL, "model source: '%s' was not opened", src->path);
}
