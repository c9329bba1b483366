/* libgemtrain's small API: a context that owns one model's state. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml.h"
#include "data/data.h"
#include "dist/dist.h"
#include "train/train_internal.h"
#include "train/trainer.h"
#include "exec/exec.h"
#include "model/flops.h"
#include "gemtrain/gemtrain.h"
#include "model/model.h"
#include "train/optim.h"
#include "base/prof.h"
#include "base/team.h"
#include "base/threads.h"
#include "ckpt/paramfile.h"
#include "train/train.h"
#include "train/api_internal.h"

struct gt_ctx {
  gt_err err;
  int configured, initialised;
  gt_config cfg;
  gt_mem mem;        /* host: data, caller-token scratch, full parameters */
  gt_model model;    /* the layout; params only while a forward or save needs them */
  gt_trainer *tr;    /* the state, on a mesh of num_devices */
  gt_model_source src; /* load_parameters_path, when have_src */
  int have_src;
  gt_data data;
  gt_step_metrics last;
  int has_last;
  int32_t *tok_in, *tok_tg, *tok_pos; /* scratch for caller-supplied tokens */
  int64_t tok_cap;
  /* The threads the kernels a call runs on its caller's thread compute
   * with (gt_ctx_forward_logits, loading and saving), set as that thread's
   * current team for the call. The context's own: the process team is one
   * for every thread, and remaking it at one context's init would pull it
   * from under another context's kernels. Mesh devices have their own. */
  gt_team *team;
};

gt_ctx *gt_ctx_new(void) {
  gt_ctx *c = calloc(1, sizeof *c);
  if (c) gt_mem_init(&c->mem);
  return c;
}

static void gt__release(gt_ctx *c) {
  if (!c->initialised) return;
  gt_trainer_destroy(c->tr);
  c->tr = NULL;
  gt_data_close(&c->data);
  gt_model_free(&c->model);
  free(c->tok_in), free(c->tok_tg), free(c->tok_pos);
  c->tok_in = c->tok_tg = c->tok_pos = NULL;
  c->tok_cap = 0;
  c->initialised = 0;
  c->has_last = 0;
}

void gt_ctx_free(gt_ctx *c) {
  if (!c) return;
  gt__release(c);
  gt_team_destroy(c->team);
  free(c);
}

const char *gt_ctx_error(const gt_ctx *c) { return c ? c->err.msg : "no context"; }

/* A NULL context has nowhere to keep a message: GT_ERR_ARG alone
 * (gt_ctx_error(NULL) says "no context"). */
#define GT__CTX_OR_ARG(c) \
  do {                    \
    if (!(c)) return GT_ERR_ARG; \
  } while (0)

static gt_rc gt__need(gt_ctx *c, int init) {
  GT__CTX_OR_ARG(c);
  if (!c->configured) return gt_err_set(&c->err, GT_ERR_ARG, "api: call gt_ctx_configure first");
  if (init && !c->initialised) return gt_err_set(&c->err, GT_ERR_ARG, "api: call gt_ctx_init first");
  /* the host-side collectives of this call wait by this context's timeout
   * (its mesh's threads have their own copy) */
  if (init) gt_dist_set_timeout(c->cfg.collective_timeout_seconds);
  return GT_OK;
}

/* Everything is read into a new configuration first: a refused configure
 * keeps the context's configuration and model as they were. */
gt_rc gt_ctx_configure(gt_ctx *c, const char *preset, int n, const char *const *ov) {
  GT__CTX_OR_ARG(c);
  gt_err_clear(&c->err);
  if (n < 0 || (n > 0 && !ov))
    return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_configure: %d overrides%s", n,
                      n < 0 ? " (a count cannot be negative)" : " but the array is NULL");
  for (int i = 0; i < n; i++)
    if (!ov[i]) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_configure: override %d of %d is NULL", i, n);
  const char *user = NULL;
  char mn[GT_STR_SHORT + 16];
  const char **all = malloc(sizeof(char *) * (size_t)(n + 1));
  gt_config *cfg = malloc(sizeof *cfg);
  gt_model_source *src = malloc(sizeof *src);
  if (!all || !cfg || !src) {
    free(all), free(cfg), free(src);
    return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory to configure");
  }
  int k = 0;
  if (preset) {
    size_t l = strlen(preset);
    if ((l > 5 && !strcmp(preset + l - 5, ".json")) || gt_config_path_is_yaml(preset)) {
      user = preset;
    } else {
      snprintf(mn, sizeof mn, "model_name=%s", preset);
      all[k++] = mn;
    }
  }
  for (int i = 0; i < n; i++) all[k++] = ov[i];
  int have = 0;
  gt_rc rc = gt_config_load_from(cfg, NULL, user, k, all, "gt_ctx_configure's overrides", &c->err);
  /* as `gemtrain train`: load_parameters_path defines the model keys, so
   * gt_ctx_get shows the model that will be loaded */
  if (rc == GT_OK) rc = gt__train_source(cfg, src, &have, &c->err);
  if (rc == GT_OK) {
    gt__release(c);
    c->cfg = *cfg;
    c->src = *src;
    c->have_src = have;
    c->configured = 1;
  }
  free(all), free(cfg), free(src);
  return rc;
}

const gt_config *gt__ctx_config(const gt_ctx *c) { return c->configured ? &c->cfg : NULL; }

struct gt_trainer *gt__ctx_trainer(gt_ctx *c) { return c->initialised ? c->tr : NULL; }

const char *gt_rc_str(gt_rc rc) { return gt_rc_name(rc); }

/* ---------- keys by name ---------- */

/* key's spec, or NULL with *rc and the context's error set. who names the
 * call in messages. */
static const gt_key_spec *gt__ctx_key(gt_ctx *c, const char *key, const char *who, gt_rc *rc) {
  *rc = gt__need(c, 0);
  if (*rc) return NULL;
  gt_err_clear(&c->err);
  if (!key) {
    *rc = gt_err_set(&c->err, GT_ERR_ARG, "api: the key is NULL");
    return NULL;
  }
  const gt_key_spec *k = gt_config_key(key);
  /* gt_config_set refuses an unknown key before it writes anything, naming
   * the key and the nearest known one */
  if (!k) *rc = gt_config_set(&c->cfg, key, "", who, &c->err);
  return k;
}

static const char *gt__type_name(gt_key_type t) {
  static const char *n[] = {"an integer", "a float", "a boolean", "a string", "an enumeration"};
  return n[t];
}

gt_rc gt_ctx_set(gt_ctx *c, const char *key, const char *value) {
  gt_rc rc;
  if (!gt__ctx_key(c, key, "gt_ctx_set", &rc)) return rc;
  if (!value) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_set: the value of key '%s' is NULL", key);
  if (c->initialised)
    return gt_err_set(&c->err, GT_ERR_ARG,
                      "api: key '%s' cannot change after gt_ctx_init (the model is built from it); call "
                      "gt_ctx_configure again",
                      key);
  /* model_name chooses the preset the other keys layer on: setting it alone
   * would rename the old preset's shapes */
  if (!strcmp(key, "model_name") && strcmp(value, c->cfg.model_name))
    return gt_err_set(&c->err, GT_ERR_ARG,
                      "api: gt_ctx_set cannot change key 'model_name' (to '%s'): it chooses the preset the other "
                      "keys are layered on; call gt_ctx_configure with the model name",
                      value);
  /* the old config comes back on any refusal: a refused set changes nothing */
  gt_config *old = malloc(sizeof *old);
  if (!old) return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory to set key '%s'", key);
  *old = c->cfg;
  rc = gt_config_set(&c->cfg, key, value, "gt_ctx_set", &c->err);
  if (rc == GT_OK) {
    gt_config_mark_user_set(&c->cfg, key);
    /* load_parameters_path defines the model keys, as at configure */
    rc = gt__train_source(&c->cfg, &c->src, &c->have_src, &c->err);
  }
  if (rc) {
    gt_err keep;
    c->cfg = *old;
    gt__train_source(&c->cfg, &c->src, &c->have_src, &keep);
  }
  free(old);
  return rc;
}

gt_rc gt_ctx_set_int(gt_ctx *c, const char *key, int64_t value) {
  gt_rc rc;
  const gt_key_spec *k = gt__ctx_key(c, key, "gt_ctx_set_int", &rc);
  if (!k) return rc;
  /* the types gt_ctx_get_int reads: a number written into a string key
   * would be taken as its text */
  if (k->type != GT_KEY_INT && k->type != GT_KEY_BOOL)
    return gt_err_set(&c->err, GT_ERR_CONFIG, "api: key '%s' is %s, not an integer or boolean%s", key,
                      gt__type_name(k->type), k->type == GT_KEY_FLOAT ? ": use gt_ctx_set_double" : ": use gt_ctx_set");
  char t[32];
  if (k->type == GT_KEY_BOOL && (value == 0 || value == 1))
    snprintf(t, sizeof t, "%s", value ? "true" : "false");
  else
    snprintf(t, sizeof t, "%lld", (long long)value);
  return gt_ctx_set(c, key, t);
}

gt_rc gt_ctx_set_double(gt_ctx *c, const char *key, double value) {
  gt_rc rc;
  const gt_key_spec *k = gt__ctx_key(c, key, "gt_ctx_set_double", &rc);
  if (!k) return rc;
  /* the types gt_ctx_get_double reads (an integer key takes a whole value) */
  if (k->type != GT_KEY_FLOAT && k->type != GT_KEY_INT)
    return gt_err_set(&c->err, GT_ERR_CONFIG, "api: key '%s' is %s, not a number: use gt_ctx_set%s", key,
                      gt__type_name(k->type), k->type == GT_KEY_BOOL ? "_int" : "");
  char t[40];
  snprintf(t, sizeof t, "%.17g", value);
  return gt_ctx_set(c, key, t);
}

gt_rc gt_ctx_get(gt_ctx *c, const char *key, char *buf, size_t n) {
  gt_rc rc;
  const gt_key_spec *k = gt__ctx_key(c, key, "gt_ctx_get", &rc);
  if (!k) return rc;
  if (!buf || !n) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_get: no buffer for key '%s'", key);
  char t[GT_STR_PATH + 32];
  if (k->type == GT_KEY_FLOAT) {
    /* the shortest of %.15g .. %.17g that reads back to the same double */
    double v = *(const double *)((const char *)&c->cfg + k->offset);
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(t, sizeof t, "%.*g", prec, v);
      if (strtod(t, NULL) == v) break;
    }
  } else if ((rc = gt_config_get_text(&c->cfg, key, t, sizeof t, &c->err))) {
    return rc;
  }
  size_t len = strlen(t);
  snprintf(buf, n, "%s", t);
  if (len >= n)
    return gt_err_set(&c->err, GT_ERR_ARG, "api: key '%s' holds %zu characters; the buffer has room for %zu", key,
                      len, n - 1);
  return GT_OK;
}

gt_rc gt_ctx_get_int(gt_ctx *c, const char *key, int64_t *value) {
  gt_rc rc;
  const gt_key_spec *k = gt__ctx_key(c, key, "gt_ctx_get_int", &rc);
  if (!k) return rc;
  if (!value) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_get_int: no place for key '%s'", key);
  const char *f = (const char *)&c->cfg + k->offset;
  if (k->type == GT_KEY_BOOL)
    *value = *(const int *)f;
  else if (k->type == GT_KEY_INT)
    *value = k->size == sizeof(int) ? *(const int *)f : *(const long long *)f;
  else
    return gt_err_set(&c->err, GT_ERR_CONFIG, "api: key '%s' is %s, not an integer or boolean%s", key,
                      gt__type_name(k->type), k->type == GT_KEY_FLOAT ? ": use gt_ctx_get_double" : ": use gt_ctx_get");
  return GT_OK;
}

gt_rc gt_ctx_get_double(gt_ctx *c, const char *key, double *value) {
  gt_rc rc;
  const gt_key_spec *k = gt__ctx_key(c, key, "gt_ctx_get_double", &rc);
  if (!k) return rc;
  if (!value) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_get_double: no place for key '%s'", key);
  const char *f = (const char *)&c->cfg + k->offset;
  if (k->type == GT_KEY_FLOAT)
    *value = *(const double *)f;
  else if (k->type == GT_KEY_INT)
    *value = (double)(k->size == sizeof(int) ? *(const int *)f : *(const long long *)f);
  else
    return gt_err_set(&c->err, GT_ERR_CONFIG, "api: key '%s' is %s, not a number: use gt_ctx_get", key,
                      gt__type_name(k->type));
  return GT_OK;
}

/* The layout model's host parameter buffer (allocated once, on demand). */
static gt_rc gt__host_alloc(gt_ctx *c) {
  return c->model.params ? GT_OK : gt_model_alloc_inference(&c->model, &c->mem, &c->err);
}

/* The current parameters, gathered from the devices onto the host model. */
static gt_rc gt__host_params(gt_ctx *c) {
  gt_rc rc = gt__host_alloc(c);
  return rc ? rc : gt_fsdp_full_params(gt_trainer_fsdp(c->tr), c->model.params, &c->err);
}

/* load_parameters_path, as `gemtrain train` honours it: parameters from a
 * checkpoint, an HF directory or a parameter file; optimizer and data fresh. */
static gt_rc gt__ctx_restore(gt_ctx *c) {
  if (!c->have_src) return GT_OK;
  gt__tstate ts = {&c->model, c->tr, &c->data, &c->cfg, &c->mem, NULL, &c->src, {0, 0}, NULL, NULL};
  gt_config cfg = c->cfg;
  cfg.enable_checkpointing = 0; /* a context has no run directory of its own */
  cfg.load_full_state_path[0] = '\0';
  ts.cfg = &cfg;
  int64_t start;
  int resumed;
  gt_rc rc = gt__train_restore(&ts, "", &start, &resumed, &c->err);
  return rc ? rc : gt__train_pref_reference(&ts, &c->err); /* use_dpo: the reference is what the run starts from */
}

/* The context's team sized for its configuration (kept while the size
 * stays). Nothing runs on it now: the context's calls run one at a time. */
static void gt__ctx_team(gt_ctx *c) {
  int n = gt_threads_count(c->cfg.threads_per_device, c->cfg.num_devices);
  if (c->team && gt_team_size(c->team) == n) return;
  gt_team_destroy(c->team);
  c->team = gt_team_create_upto(n);
}

/* The calls that run kernels on the caller's thread run them on the
 * context's team, and give the thread its previous team back. */
#define GT__ON_TEAM(c, call)                               \
  do {                                                     \
    GT__CTX_OR_ARG(c);                                     \
    gt_team *prev_ = gt_team_set_current((c)->team);       \
    gt_rc rc_ = (call);                                    \
    gt_team_set_current(prev_);                            \
    return rc_;                                            \
  } while (0)

static gt_rc gt__init(gt_ctx *c) {
  gt_rc rc;
  if ((rc = gt_model_build(&c->model, &c->cfg, &c->err))) return rc;
  c->initialised = 1; /* from here gt__release frees what was made */
  if ((rc = gt_data_open(&c->data, &c->cfg, &c->mem, &c->err)) ||
      (rc = gt_trainer_create(&c->tr, &c->cfg, NULL, &c->err)) || (rc = gt__ctx_restore(c))) {
    gt__release(c);
    return rc;
  }
  return GT_OK;
}

gt_rc gt_ctx_init(gt_ctx *c) {
  gt_rc rc = gt__need(c, 0);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt__release(c);
  if ((rc = gt_config_validate(&c->cfg, &c->err))) return rc;
  gt__ctx_team(c);
  GT__ON_TEAM(c, gt__init(c));
}

/* elements, not the flat buffer's words (fewer for a base stored quantized) */
int64_t gt_ctx_num_params(const gt_ctx *c) { return c && c->initialised ? gt_model_numel(&c->model) : 0; }

/* One trainer step; the metrics are the ones `gemtrain train` logs. */
static gt_rc gt__step(gt_ctx *c, const gt_batch *given, double *loss_out) {
  gt_rc rc = given ? gt_trainer_step(c->tr, given, 1, &c->last, &c->err)
                   : gt_trainer_step_data(c->tr, &c->data, &c->last, &c->err);
  if (rc) return rc;
  c->has_last = 1;
  if (loss_out) *loss_out = c->last.loss;
  return GT_OK;
}

static gt_rc gt__train(gt_ctx *c, int n, double *losses) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  if (n < 0) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_train: %d steps (a count cannot be negative)", n);
  for (int i = 0; i < n; i++)
    if ((rc = gt__step(c, NULL, losses ? &losses[i] : NULL))) return rc;
  return GT_OK;
}

gt_rc gt_ctx_train(gt_ctx *c, int n, double *losses) {
  GT__ON_TEAM(c, gt__train(c, n, losses));
}

/* Splits [batch, seq + 1] tokens into a batch (inputs, targets, positions).
 * A negative id is a pad: every id but a row's first is the previous
 * position's target and the next one's input, so a row padded at its end
 * ({1, 10, 11, -1, -1}) has pads among its inputs. As a target a pad is
 * masked; as an input it reads as id 0 (Gemma's <pad>), which only the
 * positions after it see (the attention is causal), and their targets are
 * pads too when the padding is at the row's end. */
static gt_rc gt__tokens_batch(gt_ctx *c, const int32_t *tokens, int batch, int seq, int with_targets, gt_batch *b) {
  if (!tokens || batch < 1 || seq < 1 || seq > c->cfg.max_target_length)
    return gt_err_set(&c->err, GT_ERR_ARG, "api: tokens must be [batch >= 1, seq in 1..%lld%s], got [%d, %d]",
                      c->cfg.max_target_length, with_targets ? " (+1)" : "", batch, seq);
  int64_t n = (int64_t)batch * seq;
  if (n > c->tok_cap) {
    free(c->tok_in), free(c->tok_tg), free(c->tok_pos);
    c->tok_in = malloc(sizeof(int32_t) * (size_t)n);
    c->tok_tg = malloc(sizeof(int32_t) * (size_t)n);
    c->tok_pos = malloc(sizeof(int32_t) * (size_t)n);
    c->tok_cap = n;
    if (!c->tok_in || !c->tok_tg || !c->tok_pos) {
      c->tok_cap = 0;
      return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory for %lld tokens", (long long)n);
    }
  }
  int row = with_targets ? seq + 1 : seq;
  for (int r = 0; r < batch; r++)
    for (int t = 0; t < row; t++) {
      int32_t id = tokens[(int64_t)r * row + t];
      if (id >= c->model.vocab)
        return gt_err_set(&c->err, GT_ERR_ARG,
                          "api: token [%d, %d] = %d is outside the vocabulary 0..%lld (a negative id is a pad)", r, t,
                          id, (long long)c->model.vocab - 1);
    }
  for (int r = 0; r < batch; r++)
    for (int t = 0; t < seq; t++) {
      int32_t id = tokens[(int64_t)r * row + t];
      c->tok_in[(int64_t)r * seq + t] = id < 0 ? 0 : id;
      int32_t tg = with_targets ? tokens[(int64_t)r * row + t + 1] : -1;
      c->tok_tg[(int64_t)r * seq + t] = tg < 0 ? -1 : tg;
      c->tok_pos[(int64_t)r * seq + t] = t;
    }
  *b = (gt_batch){batch, seq, c->tok_in, c->tok_tg, c->tok_pos, NULL};
  return GT_OK;
}

static gt_rc gt__train_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  /* the step is the configured one (its memory plan, its mean over the
   * global batch): a batch of another row count is not that step */
  long long global = gt_config_global_batch(&c->cfg);
  if (tokens && batch != global)
    return gt_err_set(&c->err, GT_ERR_ARG,
                      "api: gt_ctx_train_tokens: %d rows; expected the global batch of %lld (per_device_batch_size x "
                      "num_devices x MPI ranks)",
                      batch, global);
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 1, &b))) return rc;
  if ((int64_t)batch * seq % c->cfg.num_vocab_tiling)
    return gt_err_set(&c->err, GT_ERR_ARG, "api: %d x %d tokens do not split into num_vocab_tiling = %lld tiles",
                      batch, seq, c->cfg.num_vocab_tiling);
  if (gt_batch_total_weights(&b) == 0) return gt_err_set(&c->err, GT_ERR_ARG, "api: every target of the batch is masked");
  return gt__step(c, &b, loss);
}

gt_rc gt_ctx_train_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  GT__ON_TEAM(c, gt__train_tokens(c, tokens, batch, seq, loss));
}

static gt_rc gt__eval_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  if (!loss) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_eval_tokens: no place for the loss");
  /* the devices hold the activations of the global batch at most (the
   * memory plan); fewer rows are the same pass on fewer */
  long long global = gt_config_global_batch(&c->cfg);
  if (tokens && batch > global)
    return gt_err_set(&c->err, GT_ERR_ARG,
                      "api: gt_ctx_eval_tokens: %d rows; expected at most the global batch of %lld "
                      "(per_device_batch_size x num_devices x MPI ranks)",
                      batch, global);
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 1, &b))) return rc;
  /* no target in the loss: no mean to report (never a NaN) */
  if (gt_batch_total_weights(&b) == 0) return gt_err_set(&c->err, GT_ERR_ARG, "api: every target of the batch is masked");
  gt_loss_stats st = {0};
  if ((rc = gt_trainer_eval(c->tr, &b, 1, &st, &c->err))) return rc;
  *loss = st.xent_sum / (double)st.total_weights;
  return GT_OK;
}

gt_rc gt_ctx_eval_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  GT__ON_TEAM(c, gt__eval_tokens(c, tokens, batch, seq, loss));
}

gt_rc gt_ctx_last_metrics(const gt_ctx *c, gt_step_metrics *out) {
  /* the message is the context's one mutable part a reader may write: every
   * context comes from gt_ctx_new, never a const object */
  gt_ctx *w = (gt_ctx *)c;
  gt_rc rc = gt__need(w, 1);
  if (rc) return rc;
  gt_err_clear(&w->err);
  if (!out) return gt_err_set(&w->err, GT_ERR_ARG, "api: gt_ctx_last_metrics: no place for the metrics");
  if (!c->has_last)
    return gt_err_set(&w->err, GT_ERR_ARG,
                      "api: gt_ctx_last_metrics: no step since gt_ctx_init; call gt_ctx_train or gt_ctx_train_tokens "
                      "first");
  *out = c->last;
  return GT_OK;
}

static gt_rc gt__forward_logits(gt_ctx *c, const int32_t *tokens, int batch, int seq, float *logits) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  if (!logits) return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_forward_logits: no buffer for the logits");
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 0, &b)) || (rc = gt__host_params(c))) return rc;
  return gt_exec_forward_logits(&c->model, &b, logits, &c->err);
}

gt_rc gt_ctx_forward_logits(gt_ctx *c, const int32_t *tokens, int batch, int seq, float *logits) {
  GT__ON_TEAM(c, gt__forward_logits(c, tokens, batch, seq, logits));
}

/* ---------- save / load ---------- */

/* The file holds, beside the parameters, the moments and the AdamW step,
 * what else the next steps depend on (paramfile.h's training_state), as a
 * checkpoint does: the step index (it seeds the adapters' dropout), the data
 * position of gt_ctx_train and the spike guard's record. */
static gt_rc gt__save(gt_ctx *c, const char *path) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  if (!path || !path[0])
    return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_save: the path is %s; expected a file name",
                      path ? "empty" : "NULL");
  int64_t n = c->model.n_params;
  float *mu = gt_mem_alloc_uninit(&c->mem, GT_MEM_OTHER, (size_t)n * 2 * sizeof(float));
  gt_paramfile_train *ts = malloc(sizeof *ts); /* the spike record is 32 KiB: not on a caller thread's stack */
  if (!mu || !ts) {
    gt_mem_free(&c->mem, mu);
    free(ts);
    return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory to save the state of %lld parameter words", (long long)n);
  }
  gt_fsdp *fs = gt_trainer_fsdp(c->tr);
  ts->present = 1;
  ts->step = gt_trainer_step_index(c->tr);
  ts->data = c->data.st;
  gt_trainer_spike_state(c->tr, &ts->spike);
  if (!(rc = gt__host_alloc(c)) && !(rc = gt_fsdp_full_state(fs, c->model.params, mu, mu + n, &c->err)))
    rc = gt_paramfile_write_train(path, &c->model, &c->cfg, mu, mu + n, gt_fsdp_opt_step(fs), ts, &c->err);
  gt_mem_free(&c->mem, mu);
  free(ts);
  return rc;
}

gt_rc gt_ctx_save(gt_ctx *c, const char *path) {
  GT__ON_TEAM(c, gt__save(c, path));
}

/* Everything is read and checked before any of the context's state changes:
 * a refused load leaves the context as it was. */
static gt_rc gt__load(gt_ctx *c, const char *path) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  if (!path || !path[0])
    return gt_err_set(&c->err, GT_ERR_ARG, "api: gt_ctx_load: the path is %s; expected a file name",
                      path ? "empty" : "NULL");
  int64_t n = c->model.n_params, step = 0;
  float *mu = gt_mem_alloc_uninit(&c->mem, GT_MEM_OTHER, (size_t)n * 2 * sizeof(float));
  gt_paramfile_train *ts = calloc(1, sizeof *ts);
  if (!mu || !ts) {
    gt_mem_free(&c->mem, mu);
    free(ts);
    return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory to load the state of %lld parameter words", (long long)n);
  }
  gt_data_state was = c->data.st;
  if (!(rc = gt__host_alloc(c)) &&
      !(rc = gt_paramfile_read_train(path, &c->model, &c->cfg, mu, mu + n, &step, ts, &c->err)) &&
      ts->present && (rc = gt_data_seek(&c->data, ts->data, &c->err))) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", c->err.msg);
    gt_err_set(&c->err, rc, "api: gt_ctx_load: '%s' holds a data position this context's data cannot take: %s", path,
               msg);
  }
  if (!rc) rc = gt_fsdp_set_state(gt_trainer_fsdp(c->tr), c->model.params, mu, mu + n, step, &c->err);
  if (rc) {
    c->data.st = was;
  } else {
    /* a file without the training state (gemtrain convert's, an older
     * gemtrain's): the step index is the AdamW step (the same when no step
     * was skipped), the spike window empty, the data position unchanged */
    gt_trainer_set_step_index(c->tr, ts->present ? ts->step : step);
    gt_trainer_set_spike_state(c->tr, &ts->spike); /* all zero when absent: an empty window */
  }
  gt_mem_free(&c->mem, mu);
  free(ts);
  return rc;
}

gt_rc gt_ctx_load(gt_ctx *c, const char *path) {
  GT__ON_TEAM(c, gt__load(c, path));
}
