/* Low-rank adapters <-> Hugging Face PEFT adapter directories (peft.h). */
#define _POSIX_C_SOURCE 200809L
#include "hf/peft.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "data/docs.h"
#include "hf/hf_internal.h"

static const char *const gt__text_prefixes[] = {"model.language_model.", "language_model.model.", "model."};
#define GT__NTEXT ((int)(sizeof gt__text_prefixes / sizeof gt__text_prefixes[0]))

static int gt__ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int gt_peft_is_adapter(const char *name, char *base, size_t n, int *is_b) {
  static const char *const suf[2] = {".lora_A.weight", ".lora_B.weight"};
  for (int k = 0; k < 2; k++)
    if (gt__ends_with(name, suf[k])) {
      size_t stem = strlen(name) - strlen(suf[k]);
      if (stem == 0) return 0;
      if (base) snprintf(base, n, "%.*s.weight", (int)stem, name);
      if (is_b) *is_b = k;
      return 1;
    }
  return 0;
}

double gt_peft_scale(const gt_config *cfg) {
  double r = (double)cfg->lora_rank;
  return cfg->lora_use_rslora ? cfg->lora_alpha / sqrt(r) : cfg->lora_alpha / r;
}

const char *gt_peft_hf_prefix(const char *architecture) {
  return architecture && strstr(architecture, "ConditionalGeneration") ? "model.language_model." : "model.";
}

void gt_peft_tensor_name(const char *name, const char *hf_prefix, char *out, size_t n) {
  snprintf(out, n, "%s%s%s", GT_PEFT_NAME_ROOT, hf_prefix ? hf_prefix : "model.", name);
}

int gt_peft_parse_name(const char *peft_name, char *out, size_t n) {
  /* PeftModel.save_pretrained writes the root; transformers' own adapter
   * integration (model.add_adapter, then save_pretrained) writes the
   * model's module names without it, and load_adapter reads both */
  size_t rl = strlen(GT_PEFT_NAME_ROOT);
  const char *rest = strncmp(peft_name, GT_PEFT_NAME_ROOT, rl) ? peft_name : peft_name + rl;
  for (int p = 0; p < GT__NTEXT; p++) {
    size_t pl = strlen(gt__text_prefixes[p]);
    if (strncmp(rest, gt__text_prefixes[p], pl)) continue;
    rest += pl;
    /* PEFT's in-memory names carry the adapter's name: ".lora_A.default.weight" */
    const char *d = strstr(rest, ".default.weight");
    if (d && d[15] == '\0')
      snprintf(out, n, "%.*s.weight", (int)(d - rest), rest);
    else
      snprintf(out, n, "%s", rest);
    return 1;
  }
  return 0;
}

/* ---- adapter_config.json ---- */

/* whether s is one of the n strings of list */
static int gt__one_of(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    if (!strcmp(s, list[i])) return 1;
  return 0;
}
#define GT__ONE_OF(s, list) gt__one_of((s), (list), sizeof(list) / sizeof *(list))

/* A short rendering of a JSON value for messages. */
static void gt__json_show(const cJSON *v, char *buf, size_t n) {
  char *s = cJSON_PrintUnformatted(v);
  snprintf(buf, n, "%.120s%s", s ? s : "?", s && strlen(s) > 120 ? "..." : "");
  free(s);
}

gt_rc gt_peft_parse_config(const char *json, const char *where, gt_peft_config *pc, gt_err *err) {
  memset(pc, 0, sizeof *pc);
  cJSON *j = cJSON_Parse(json);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return gt_err_set(err, GT_ERR_FORMAT, "peft: %s is not a JSON object", where);
  }
  gt_rc rc = GT_OK;
  char shown[160];
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "peft_type");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, "LORA")) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has peft_type %s; gemtrain reads LORA adapters only", where,
                    v ? shown : "(missing)");
    goto out;
  }
  /* options that change what the adapters compute or which weights they
   * touch: a model loaded without them would differ from the one trained */
  static const char *const must_be_empty[] = {"use_dora",        "modules_to_save",         "rank_pattern",
                                              "alpha_pattern",   "layers_to_transform",     "layers_pattern",
                                              "layer_replication", "fan_in_fan_out",        "lora_bias",
                                              "trainable_token_indices", "target_parameters", "use_qalora",
                                              "megatron_config", "loftq_config"};
  /* the keys read below, and those that only describe how the adapters
   * were made or run (metadata, initialisation settings, which modules
   * were left out: the tensors say which modules have adapters) */
  static const char *const known[] = {"peft_type", "task_type", "r", "lora_alpha", "use_rslora", "lora_dropout",
                                      "bias", "init_lora_weights", "target_modules", "base_model_name_or_path",
                                      "revision", "inference_mode", "auto_mapping", "peft_version",
                                      "exclude_modules", "megatron_core", "eva_config", "corda_config",
                                      "qalora_group_size", "runtime_config", "ensure_weight_tying"};
  /* Any other key set to something: PEFT adds options release by release,
   * and one gemtrain does not know may change what the adapters compute
   * (alora_invocation_tokens applies them only after an invocation
   * sequence), so it is refused rather than passed over. Unset (absent,
   * null, false, empty) it is what every older release computed. */
  for (const cJSON *it = j->child; it; it = it->next) {
    if (GT__ONE_OF(it->string, must_be_empty) || GT__ONE_OF(it->string, known) || gt_json_unset(it)) continue;
    gt__json_show(it, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "peft: %s sets %.60s = %s, an option gemtrain does not know: the adapters may compute something "
                    "other than plain LoRA; expected it absent, null, false or empty",
                    where, it->string ? it->string : "?", shown);
    goto out;
  }
  for (size_t i = 0; i < sizeof must_be_empty / sizeof must_be_empty[0]; i++) {
    v = cJSON_GetObjectItemCaseSensitive(j, must_be_empty[i]);
    if (gt_json_unset(v)) continue;
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s sets %s = %s, which gemtrain does not implement; expected %s", where,
                    must_be_empty[i], shown,
                    cJSON_IsBool(v) ? "false" : cJSON_IsArray(v) || cJSON_IsObject(v) ? "it empty or null" : "null");
    goto out;
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "bias");
  if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "none"))) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "peft: %s sets bias = %s, which gemtrain does not implement (its projections have no bias); "
                    "expected \"none\"",
                    where, shown);
    goto out;
  }
  /* true, false, "gaussian", "orthogonal" and "eva" only choose A's and
   * B's starting values, which the file replaces; pissa, olora, loftq
   * and corda also change the base weights when the adapters are made, so
   * the adapters belong to a base this model is not */
  v = cJSON_GetObjectItemCaseSensitive(j, "init_lora_weights");
  if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
    static const char *const init_only[] = {"gaussian", "orthogonal", "eva"};
    static const char *const base_changing[] = {"pissa", "olora", "loftq", "corda"};
    const char *init = cJSON_IsString(v) ? v->valuestring : NULL;
    int ok = GT__ONE_OF(init, init_only), changes_base = 0;
    for (size_t i = 0; init && i < sizeof base_changing / sizeof base_changing[0]; i++)
      changes_base |= !strncmp(init, base_changing[i], strlen(base_changing[i])); /* pissa_niter_N too */
    if (!ok) {
      gt__json_show(v, shown, sizeof shown);
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "peft: %s sets init_lora_weights = %s, %s; expected true, false, \"gaussian\", \"orthogonal\" "
                      "or \"eva\"",
                      where, shown,
                      changes_base ? "which changes the base weights when the adapters are made (gemtrain does not "
                                     "implement it)"
                                   : "an initialisation gemtrain does not know");
      goto out;
    }
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "task_type");
  if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "CAUSAL_LM"))) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has task_type %s; gemtrain trains causal language models "
                    "(expected \"CAUSAL_LM\")", where, shown);
    goto out;
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "r");
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 65536) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has r = %s; expected a whole number in [1, 65536]", where,
                    v ? shown : "(missing)");
    goto out;
  }
  pc->r = (long long)v->valuedouble;
  v = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
  if (!v) pc->alpha = 8; /* LoraConfig's default */
  else if (cJSON_IsNumber(v) && v->valuedouble >= 0 && isfinite(v->valuedouble)) pc->alpha = v->valuedouble;
  else {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has lora_alpha = %s; expected a number >= 0", where, shown);
    goto out;
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");
  if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has use_rslora = %s; expected true or false", where, shown);
    goto out;
  }
  pc->use_rslora = cJSON_IsTrue(v);
  v = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
  if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v)) {
    gt__json_show(v, shown, sizeof shown);
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has lora_dropout = %s; expected a number in [0, 1)", where, shown);
    goto out;
  }
  if (cJSON_IsNumber(v)) pc->dropout = v->valuedouble;
  if (!(pc->dropout >= 0 && pc->dropout < 1)) {
    rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has lora_dropout = %g; expected [0, 1)", where, pc->dropout);
    goto out;
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "base_model_name_or_path");
  if (cJSON_IsString(v)) snprintf(pc->base_model, sizeof pc->base_model, "%s", v->valuestring);
out:
  cJSON_Delete(j);
  return rc;
}

static gt_rc gt__read_config(const char *dir, gt_peft_config *pc, gt_err *err) {
  char path[GT_STR_PATH + 64];
  snprintf(path, sizeof path, "%s/%s", dir, GT_PEFT_CONFIG_FILE);
  char *js = NULL;
  size_t n;
  gt_rc rc = gt_read_file(path, "peft: adapter config", &js, &n, err);
  if (rc) return rc;
  char where[GT_STR_PATH + 80];
  snprintf(where, sizeof where, "'%s'", path);
  rc = gt_peft_parse_config(js, where, pc, err);
  free(js);
  return rc;
}

static void gt__shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t j = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && j < n; i++) j += (size_t)snprintf(buf + j, n - j, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (j < n) snprintf(buf + j, n - j, "]");
}

/* ---- module-choosing expressions ---- */

/* The adapted projections as (layer, module) pairs: "layers.3.self_attn.q_proj.weight"
 * is layer 3, module "self_attn.q_proj"; a name outside the layers is layer -1
 * with its whole stem. */
typedef struct gt__mod {
  int layer;
  char mod[96];
} gt__mod;

static void gt__mod_of(const char *base, gt__mod *o) {
  int l, used = 0;
  size_t n = strlen(base) - strlen(".weight");
  if (sscanf(base, "layers.%d.%n", &l, &used) == 1 && used > 0) {
    o->layer = l;
    snprintf(o->mod, sizeof o->mod, "%.*s", (int)(n - (size_t)used), base + used);
  } else {
    o->layer = -1;
    snprintf(o->mod, sizeof o->mod, "%.*s", (int)n, base);
  }
}

/* Appends s to buf with '.' escaped; returns 0 when it does not fit. */
static int gt__put(char *buf, size_t n, size_t *o, const char *s, int escape) {
  for (; *s; s++) {
    if (escape && *s == '.') {
      if (*o + 2 >= n) return 0;
      buf[(*o)++] = '\\';
    }
    if (*o + 1 >= n) return 0;
    buf[(*o)++] = *s;
  }
  buf[*o] = '\0';
  return 1;
}

/* An expression over the modules mods[0..k): alternatives grouping the
 * layers that adapt the same set of modules,
 *   <head>layers\.(0|1|5)\.(self_attn\.q_proj|mlp\.down_proj)<tail>
 * with [0-9]+ for a group holding all L layers. anchor: each alternative
 * in ^...$ (POSIX search semantics); without, Python's re.fullmatch
 * semantics. Returns 0 when it does not fit in n bytes. */
static int gt__modules_regex(const gt__mod *mods, int k, int L, const char *head, const char *tail, int anchor,
                             char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  int max_layer = -1;
  for (int i = 0; i < k; i++) if (mods[i].layer > max_layer) max_layer = mods[i].layer;
  int nl = max_layer + 1;
  /* each layer's module set as text ("a|b|c", in first-seen order, which is
   * table order for both callers) */
  char (*sig)[512] = nl ? calloc((size_t)nl, sizeof *sig) : NULL;
  unsigned char *done = nl ? calloc((size_t)nl, 1) : NULL;
  if (nl && (!sig || !done)) {
    free(sig), free(done);
    return 0;
  }
  int ok = 1;
  for (int i = 0; i < k && ok; i++) {
    if (mods[i].layer < 0) continue;
    char *s = sig[mods[i].layer];
    size_t so = strlen(s);
    char esc[200];
    size_t eo = 0;
    esc[0] = '\0';
    if (!gt__put(esc, sizeof esc, &eo, mods[i].mod, 1)) ok = 0;
    if (ok && so + eo + 2 >= sizeof sig[0]) ok = 0;
    if (ok) snprintf(s + so, sizeof sig[0] - so, "%s%s", so ? "|" : "", esc);
  }
  int alts = 0;
  for (int l = 0; l < nl && ok; l++) {
    if (done[l] || !sig[l][0]) continue;
    /* the layers sharing layer l's set */
    int count = 0;
    for (int q = l; q < nl; q++) if (!strcmp(sig[q], sig[l])) count++;
    ok = gt__put(buf, n, &o, alts++ ? "|" : "", 0) && gt__put(buf, n, &o, anchor ? "^" : "", 0) &&
         gt__put(buf, n, &o, head, 1) && gt__put(buf, n, &o, "layers\\.", 0);
    if (ok && count == L && l == 0) {
      ok = gt__put(buf, n, &o, "[0-9]+", 0);
      for (int q = 0; q < nl; q++) done[q] = 1;
    } else {
      ok = ok && gt__put(buf, n, &o, count > 1 ? "(" : "", 0);
      int first = 1;
      for (int q = l; q < nl && ok; q++) {
        if (strcmp(sig[q], sig[l])) continue;
        char num[16];
        snprintf(num, sizeof num, "%s%d", first ? "" : "|", q);
        ok = gt__put(buf, n, &o, num, 0);
        first = 0;
        done[q] = 1;
      }
      ok = ok && gt__put(buf, n, &o, count > 1 ? ")" : "", 0);
    }
    int several = strchr(sig[l], '|') != NULL;
    ok = ok && gt__put(buf, n, &o, several ? "\\.(" : "\\.", 0) && gt__put(buf, n, &o, sig[l], 0) &&
         gt__put(buf, n, &o, several ? ")" : "", 0) && gt__put(buf, n, &o, tail, 0) &&
         gt__put(buf, n, &o, anchor ? "$" : "", 0);
  }
  for (int i = 0; i < k && ok; i++) {
    if (mods[i].layer >= 0) continue;
    ok = gt__put(buf, n, &o, alts++ ? "|" : "", 0) && gt__put(buf, n, &o, anchor ? "^" : "", 0) &&
         gt__put(buf, n, &o, head, 1) && gt__put(buf, n, &o, mods[i].mod, 1) && gt__put(buf, n, &o, tail, 0) &&
         gt__put(buf, n, &o, anchor ? "$" : "", 0);
  }
  free(sig);
  free(done);
  return ok && alts > 0;
}

/* ---- reading ---- */

/* The adapter tensors of an opened adapter_model.safetensors: each pair's
 * base (gemtrain names), checked to be lora_A/lora_B pairs of rank r.
 * *mods (malloc'd, caller frees) gets one entry per pair, *k their count. */
static gt_rc gt__file_pairs(const gt_st_file *f, const char *where, long long r, gt__mod **mods, int *k, gt_err *err) {
  *mods = NULL;
  *k = 0;
  typedef char gt__name[300];
  gt__mod *out = calloc((size_t)f->n_tensors + 1, sizeof *out);
  gt__name *names = calloc((size_t)f->n_tensors + 1, sizeof *names); /* the gemtrain names, "" unread */
  if (!out || !names) {
    free(out);
    free(names);
    return gt_err_set(err, GT_ERR_NOMEM, "peft: no memory for %d tensor names", f->n_tensors);
  }
  for (int i = 0; i < f->n_tensors; i++)
    if (!gt_peft_parse_name(f->tensors[i].name, names[i], sizeof names[i])) names[i][0] = '\0';
  int n = 0;
  for (int i = 0; i < f->n_tensors; i++) {
    const gt_st_tensor *s = &f->tensors[i];
    const char *name = names[i];
    char base[300], partner[300];
    int is_b;
    if (!name[0] || !gt_peft_is_adapter(name, base, sizeof base, &is_b)) {
      free(out);
      free(names);
      return gt_err_set(err, GT_ERR_CONFIG,
                        "peft: %s holds '%s', which is not a lora_A or lora_B weight of the text decoder's "
                        "projections; gemtrain reads only those (no embedding adapters, DoRA magnitudes or saved "
                        "modules)",
                        where, s->name);
    }
    char shape[96];
    gt__shape_text(shape, sizeof shape, s->ndim, s->shape);
    if (s->ndim != 2 || (is_b ? s->shape[1] : s->shape[0]) != r) {
      free(out);
      free(names);
      return gt_err_set(err, GT_ERR_CONFIG, "peft: %s: '%s' has shape %s; with r = %lld expected %s", where, s->name,
                        shape, r, is_b ? "[out, r]" : "[r, in]");
    }
    /* its partner, under any of the names gt_peft_parse_name reads (either
     * text prefix, the saved or the in-memory ".default." spelling); the
     * same tensor twice is refused (the last read would win) */
    snprintf(partner, sizeof partner, "%.*s.lora_%c.weight", (int)(strlen(base) - 7), base, is_b ? 'A' : 'B');
    int found = 0;
    for (int j = 0; j < f->n_tensors; j++) {
      found |= !strcmp(names[j], partner);
      if (j != i && !strcmp(names[j], name)) {
        free(out);
        gt_err_set(err, GT_ERR_CONFIG, "peft: %s holds '%s' and '%s', the same adapter tensor twice", where,
                   f->tensors[j < i ? j : i].name, f->tensors[j < i ? i : j].name);
        free(names);
        return GT_ERR_CONFIG;
      }
    }
    if (!found) {
      free(out);
      free(names);
      return gt_err_set(err, GT_ERR_CONFIG, "peft: %s has '%s' without its lora_%c", where, s->name, is_b ? 'A' : 'B');
    }
    if (!is_b) gt__mod_of(base, &out[n++]);
  }
  free(names);
  if (!n) {
    free(out);
    return gt_err_set(err, GT_ERR_CONFIG, "peft: %s holds no adapter tensors", where);
  }
  *mods = out;
  *k = n;
  return GT_OK;
}

static gt_rc gt__open_weights(const char *dir, gt_st_file *f, char *where, size_t wn, gt_err *err) {
  char path[GT_STR_PATH + 64];
  snprintf(path, sizeof path, "%s/%s", dir, GT_PEFT_WEIGHTS_FILE);
  snprintf(where, wn, "'%s'", path);
  memset(f, 0, sizeof *f);
  gt_rc rc = gt_st_open(f, path, err);
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return gt_err_set(err, rc, "peft: adapter weights: %s", msg);
  }
  return GT_OK;
}

/* A key the user set explicitly must equal the adapter directory's value. */
static gt_rc gt__agree(gt_config *cfg, const char *key, const char *have, const char *theirs, const char *dir,
                       const char *field, gt_err *err) {
  if (!gt_config_is_user_set(cfg, key) || !strcmp(have, theirs)) return GT_OK;
  return gt_err_set(err, GT_ERR_CONFIG,
                    "peft: key '%s' = %s is set explicitly, but the adapter directory '%s' (lora_restore_path) holds "
                    "%s = %s; drop the key to take the directory's",
                    key, have, dir, field, theirs);
}

int gt_peft_base_model(const char *dir, char *buf, size_t n) {
  gt_peft_config pc;
  gt_err e;
  buf[0] = '\0';
  if (gt__read_config(dir, &pc, &e) || !pc.base_model[0]) return 0;
  snprintf(buf, n, "%s", pc.base_model);
  return 1;
}

gt_rc gt_peft_apply_config(const char *dir, gt_config *cfg, gt_err *err) {
  gt_peft_config pc;
  gt_rc rc = gt__read_config(dir, &pc, err);
  if (rc) return rc;
  gt_st_file f;
  char where[GT_STR_PATH + 80];
  if ((rc = gt__open_weights(dir, &f, where, sizeof where, err))) return rc;
  gt__mod *mods = NULL;
  int k = 0;
  rc = gt__file_pairs(&f, where, pc.r, &mods, &k, err);
  gt_st_close(&f);
  if (rc) return rc;
  char have[64], theirs[64];
  if (gt_config_is_user_set(cfg, "enable_lora") && !cfg->enable_lora) {
    free(mods);
    return gt_err_set(err, GT_ERR_CONFIG,
                      "peft: key 'enable_lora' = false is set explicitly, but lora_restore_path names the adapter "
                      "directory '%s'; drop one of the two",
                      dir);
  }
  snprintf(have, sizeof have, "%lld", cfg->lora_rank);
  snprintf(theirs, sizeof theirs, "%lld", pc.r);
  if (!rc) rc = gt__agree(cfg, "lora_rank", have, theirs, dir, "r", err);
  snprintf(have, sizeof have, "%.10g", cfg->lora_alpha);
  snprintf(theirs, sizeof theirs, "%.10g", pc.alpha);
  if (!rc) rc = gt__agree(cfg, "lora_alpha", have, theirs, dir, "lora_alpha", err);
  if (!rc)
    rc = gt__agree(cfg, "lora_use_rslora", cfg->lora_use_rslora ? "true" : "false", pc.use_rslora ? "true" : "false",
                   dir, "use_rslora", err);
  if (!rc && !gt_config_is_user_set(cfg, "lora_module_path")) {
    char re[sizeof cfg->lora_module_path];
    if (!gt__modules_regex(mods, k, (int)cfg->base_num_decoder_layers, "", "\\.weight", 1, re, sizeof re))
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "peft: the %d adapted projections of '%s' need an expression longer than %zu characters; set "
                      "lora_module_path to one that chooses them",
                      k, dir, sizeof re - 1);
    else
      snprintf(cfg->lora_module_path, sizeof cfg->lora_module_path, "%s", re);
  }
  free(mods);
  if (rc) return rc;
  cfg->enable_lora = 1;
  cfg->lora_rank = pc.r;
  cfg->lora_alpha = pc.alpha;
  cfg->lora_use_rslora = pc.use_rslora;
  if (!gt_config_is_user_set(cfg, "lora_dropout")) cfg->lora_dropout = pc.dropout;
  return GT_OK;
}

/* "vision" or "audio" when an adapted projection belongs to a multimodal
 * model's vision or audio part (its tower, projector or embedder), else NULL */
static const char *gt__media_part(const char *base) {
  static const struct {
    const char *prefix, *part;
  } parts[] = {{"vision_tower.", "vision"}, {"multi_modal_projector.", "vision"}, {"embed_vision.", "vision"},
               {"audio_tower.", "audio"},   {"embed_audio.", "audio"}};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    if (!strncmp(base, parts[i].prefix, strlen(parts[i].prefix))) return parts[i].part;
  return NULL;
}

gt_rc gt_peft_load(const char *dir, const gt_model *m, float *params, int *n_loaded, gt_err *err) {
  if (n_loaded) *n_loaded = 0;
  gt_st_file f;
  char where[GT_STR_PATH + 80];
  gt_rc rc = gt__open_weights(dir, &f, where, sizeof where, err);
  if (rc) return rc;
  unsigned char *seen = calloc((size_t)m->n_tensors + 1, 1);
  if (!seen) {
    gt_st_close(&f);
    return gt_err_set(err, GT_ERR_NOMEM, "peft: no memory");
  }
  int n = 0;
  for (int i = 0; i < f.n_tensors && !rc; i++) {
    const gt_st_tensor *s = &f.tensors[i];
    char name[300], base[300], want[96], got[96];
    if (!gt_peft_parse_name(s->name, name, sizeof name) || !gt_peft_is_adapter(name, base, sizeof base, NULL)) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s holds '%s', which is not a lora_A or lora_B weight of the text "
                      "decoder's projections", where, s->name);
      break;
    }
    const gt_tensor_info *t = gt_model_find_tensor(m, name);
    const char *part;
    if (!t) {
      const gt_tensor_info *bt = gt_model_find_tensor(m, base);
      if (bt)
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "peft: %s has an adapter for '%s', which the model does not adapt (lora_module_path); "
                        "leave lora_module_path unset to take the directory's projections",
                        where, base);
      else if ((part = gt__media_part(base)) != NULL)
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "peft: %s has an adapter for '%s', a projection of the multimodal model's %s part; "
                        "gemtrain loads and trains the text decoder's adapters only",
                        where, base, part);
      else
        rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s has an adapter for '%s', which the model does not have "
                        "(a different base model?)", where, base);
      break;
    }
    gt__shape_text(want, sizeof want, t->ndim, t->shape);
    gt__shape_text(got, sizeof got, s->ndim, s->shape);
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (!same) {
      const gt_tensor_info *bt = gt_model_find_tensor(m, base);
      char bs[96] = "?";
      if (bt) gt__shape_text(bs, sizeof bs, bt->ndim, bt->shape);
      rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s: '%s' has shape %s, the model wants %s (base '%s' is %s, rank %lld)",
                      where, s->name, got, want, base, bs, (long long)(strstr(name, ".lora_A.") ? t->shape[0] : t->shape[1]));
      break;
    }
    if (seen[t - m->tensors]) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "peft: %s holds '%s' twice (under two names)", where, t->name);
      break;
    }
    if (t->dtype != GT_STORE_F32) {
      rc = gt_err_set(err, GT_ERR_INTERNAL, "peft: the model stores adapter '%s' as %s; adapters are float32",
                      t->name, gt_store_dtype_name(t->dtype));
      break;
    }
    gt_err sub;
    gt_err_clear(&sub);
    float *x = params + t->offset;
    if (gt_st_read_f32_range(s, 0, t->numel, x, &sub)) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "peft: %s: %s", where, sub.msg);
      break;
    }
    for (int64_t e = 0; e < t->numel; e++)
      if (!isfinite(x[e])) {
        rc = gt_err_set(err, GT_ERR_FORMAT, "peft: %s: tensor '%s' element %lld is %g; adapter weights must be finite",
                        where, s->name, (long long)e, (double)x[e]);
        break;
      }
    seen[t - m->tensors] = 1;
    n++;
  }
  for (int i = 0; i < m->n_tensors && !rc; i++) {
    char base[300];
    if (seen[i] || !gt_peft_is_adapter(m->tensors[i].name, base, sizeof base, NULL)) continue;
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "peft: the model adapts '%s' (lora_module_path), but %s has no adapter tensor '%s' for it; "
                    "leave lora_module_path unset to take the directory's projections",
                    base, where, m->tensors[i].name);
  }
  free(seen);
  gt_st_close(&f);
  if (!rc && n_loaded) *n_loaded = n;
  return rc;
}

/* ---- writing ---- */

void gt_peft_pair(const gt_model *m, const gt_tensor_info *base, const gt_tensor_info **a, const gt_tensor_info **b) {
  *a = *b = NULL;
  char nm[160];
  size_t l = strlen(base->name);
  if (l < 8 || !gt__ends_with(base->name, ".weight") || gt_peft_is_adapter(base->name, NULL, 0, NULL)) return;
  snprintf(nm, sizeof nm, "%.*s.lora_A.weight", (int)(l - 7), base->name);
  const gt_tensor_info *ta = gt_model_find_tensor(m, nm);
  snprintf(nm, sizeof nm, "%.*s.lora_B.weight", (int)(l - 7), base->name);
  const gt_tensor_info *tb = gt_model_find_tensor(m, nm);
  if (ta && tb) *a = ta, *b = tb;
}

int gt_peft_count(const gt_model *m) {
  int n = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    int is_b;
    if (gt_peft_is_adapter(m->tensors[i].name, NULL, 0, &is_b) && !is_b) n++;
  }
  return n;
}

void gt_peft_merge_one(float *w, const float *a, const float *b, int64_t out, int64_t in, int64_t r, double scale) {
  for (int64_t o = 0; o < out; o++)
    for (int64_t i = 0; i < in; i++) {
      double s = 0;
      for (int64_t k = 0; k < r; k++) s += (double)b[o * r + k] * (double)a[k * in + i];
      w[o * in + i] = (float)((double)w[o * in + i] + scale * s);
    }
}

/* target_modules: the list of short names when it means exactly the adapted
 * modules (a text-only model, every projection of those names adapted),
 * else an expression over whole module names. */
static cJSON *gt__target_modules(const gt_model *m, const char *prefix, const gt__mod *mods, int k) {
  int text_only = !strcmp(prefix, "model.");
  char shorts[32][64];
  int ns = 0, list_ok = text_only;
  for (int i = 0; i < k && list_ok; i++) {
    const char *dot = strrchr(mods[i].mod, '.');
    const char *s = dot ? dot + 1 : mods[i].mod;
    int have = 0;
    for (int q = 0; q < ns; q++) have |= !strcmp(shorts[q], s);
    if (!have) {
      if (ns == 32) list_ok = 0;
      else snprintf(shorts[ns++], sizeof shorts[0], "%s", s);
    }
  }
  /* every 2-D tensor of the table whose module has one of these short names is adapted */
  for (int i = 0; i < m->n_tensors && list_ok; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    char stem[128];
    if (t->ndim != 2 || gt_peft_is_adapter(t->name, NULL, 0, NULL) || !gt__ends_with(t->name, ".weight")) continue;
    snprintf(stem, sizeof stem, "%.*s", (int)(strlen(t->name) - 7), t->name);
    const char *dot = strrchr(stem, '.');
    const char *s = dot ? dot + 1 : stem;
    for (int q = 0; q < ns; q++)
      if (!strcmp(shorts[q], s)) {
        const gt_tensor_info *a, *b;
        gt_peft_pair(m, t, &a, &b);
        if (!a) list_ok = 0;
      }
  }
  if (list_ok) {
    cJSON *arr = cJSON_CreateArray();
    for (int q = 0; q < ns; q++) cJSON_AddItemToArray(arr, cJSON_CreateString(shorts[q]));
    return arr;
  }
  size_t cap = 1 << 16;
  char *re = malloc(cap);
  cJSON *s = NULL;
  if (re && gt__modules_regex(mods, k, (int)m->n_layers, prefix, "", 0, re, cap)) s = cJSON_CreateString(re);
  free(re);
  return s;
}

static gt_rc gt__write_text(const char *path, const char *text, gt_err *err) {
  FILE *f = fopen(path, "wb");
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f) ok = fclose(f) == 0 && ok;
  return ok ? GT_OK : gt_err_set(err, GT_ERR_IO, "peft: cannot write '%s'", path);
}

gt_rc gt_peft_write(const gt_model *m, const float *params, const gt_config *cfg, const gt_peft_write_opts *o,
                    const char *out_dir, int *n_written, gt_err *err) {
  const char *prefix = o && o->hf_prefix ? o->hf_prefix : "model.";
  const char *base_model = o && o->base_model && o->base_model[0] ? o->base_model : NULL;
  if (n_written) *n_written = 0;
  int k = gt_peft_count(m);
  if (!k) return gt_err_set(err, GT_ERR_ARG, "peft: the model has no adapters to write (enable_lora=false?)");
  /* A base tensor trained beside the adapters (trainable_parameters_mask)
   * is part of what the run learned; PEFT would carry it as a
   * modules_to_save module, which is not written here, and the adapters
   * alone over the original base would be another model. */
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    if (t->lora || t->role != GT_ROLE_TRAINABLE) continue;
    return gt_err_set(err, GT_ERR_ARG,
                      "peft: '%s' trained in full beside the adapters (trainable_parameters_mask = '%s'); a PEFT "
                      "directory would need it as a modules_to_save module, which gemtrain does not write, and the "
                      "adapters alone would lose it: export the merged model with `gemtrain convert to_hf` instead",
                      t->name, cfg->trainable_parameters_mask);
  }
  gt_st_wtensor *w = calloc((size_t)2 * k, sizeof *w);
  char (*names)[256] = calloc((size_t)2 * k, sizeof *names);
  gt__mod *mods = calloc((size_t)k, sizeof *mods);
  gt_rc rc = GT_OK;
  if (!w || !names || !mods) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "peft: no memory for %d adapters", k);
    goto out;
  }
  int n = 0, p = 0;
  long long rank = -1;
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    char base[160];
    int is_b;
    if (!gt_peft_is_adapter(t->name, base, sizeof base, &is_b)) continue;
    if (t->dtype != GT_STORE_F32) {
      rc = gt_err_set(err, GT_ERR_INTERNAL, "peft: adapter '%s' is stored as %s; adapters are float32", t->name,
                      gt_store_dtype_name(t->dtype));
      goto out;
    }
    long long r = is_b ? t->shape[1] : t->shape[0];
    if (rank >= 0 && r != rank) {
      rc = gt_err_set(err, GT_ERR_ARG, "peft: adapter '%s' has rank %lld, the others %lld; a PEFT directory has one r",
                      t->name, r, rank);
      goto out;
    }
    rank = r;
    gt_peft_tensor_name(t->name, prefix, names[n], sizeof names[n]);
    w[n] = (gt_st_wtensor){names[n], GT_DT_F32, 2, {t->shape[0], t->shape[1]}, params + t->offset};
    n++;
    if (!is_b) gt__mod_of(base, &mods[p++]);
  }
  if (rank != cfg->lora_rank) {
    rc = gt_err_set(err, GT_ERR_ARG, "peft: the adapters have rank %lld, the config's lora_rank is %lld", rank,
                    cfg->lora_rank);
    goto out;
  }
  if ((rc = gt_mkdirs(out_dir, "peft", err))) goto out;
  char path[GT_STR_PATH + 64];
  snprintf(path, sizeof path, "%s/%s", out_dir, GT_PEFT_WEIGHTS_FILE);
  if ((rc = gt_st_write(path, n, w, "{\"format\":\"pt\"}", err))) goto out;
  /* LoraConfig's fields as PeftModel.save_pretrained writes them (sorted),
   * those a version of PEFT from before they existed would not know left
   * out: every value here is the field's default except what gemtrain sets */
  cJSON *j = cJSON_CreateObject();
  cJSON_AddItemToObject(j, "alpha_pattern", cJSON_CreateObject());
  cJSON_AddNullToObject(j, "auto_mapping");
  if (base_model) cJSON_AddStringToObject(j, "base_model_name_or_path", base_model);
  else cJSON_AddNullToObject(j, "base_model_name_or_path");
  cJSON_AddStringToObject(j, "bias", "none");
  cJSON_AddFalseToObject(j, "fan_in_fan_out");
  cJSON_AddTrueToObject(j, "inference_mode");
  cJSON_AddTrueToObject(j, "init_lora_weights");
  cJSON_AddNullToObject(j, "layers_pattern");
  cJSON_AddNullToObject(j, "layers_to_transform");
  if (cfg->lora_alpha == floor(cfg->lora_alpha) && cfg->lora_alpha < 1e15)
    cJSON_AddNumberToObject(j, "lora_alpha", cfg->lora_alpha); /* LoraConfig declares an int */
  else
    gt__hf_add_float(j, "lora_alpha", cfg->lora_alpha);
  gt__hf_add_float(j, "lora_dropout", cfg->lora_dropout);
  cJSON_AddNullToObject(j, "modules_to_save");
  cJSON_AddStringToObject(j, "peft_type", "LORA");
  cJSON_AddNumberToObject(j, "r", (double)rank);
  cJSON_AddItemToObject(j, "rank_pattern", cJSON_CreateObject());
  cJSON_AddNullToObject(j, "revision");
  cJSON *tm = gt__target_modules(m, prefix, mods, p);
  if (!tm) {
    cJSON_Delete(j);
    rc = gt_err_set(err, GT_ERR_NOMEM, "peft: no memory for target_modules");
    goto out;
  }
  cJSON_AddItemToObject(j, "target_modules", tm);
  cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
  cJSON_AddFalseToObject(j, "use_dora");
  if (cfg->lora_use_rslora) cJSON_AddTrueToObject(j, "use_rslora");
  else cJSON_AddFalseToObject(j, "use_rslora");
  char *js = cJSON_Print(j);
  cJSON_Delete(j);
  snprintf(path, sizeof path, "%s/%s", out_dir, GT_PEFT_CONFIG_FILE);
  rc = js ? gt__write_text(path, js, err) : gt_err_set(err, GT_ERR_NOMEM, "peft: no memory for %s", path);
  free(js);
  if (!rc && n_written) *n_written = n;
out:
  free(mods);
  free(names);
  free(w);
  return rc;
}
