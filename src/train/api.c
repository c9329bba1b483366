/* libgemtrain's small API: a context that owns one model's state. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "exec/exec.h"
#include "config/flops.h"
#include "gemtrain/gemtrain.h"
#include "model/model.h"
#include "train/optim.h"
#include "base/prof.h"
#include "ckpt/paramfile.h"
#include "train/train.h"

struct gt_ctx {
  gt_err err;
  int configured, initialised;
  gt_config cfg;
  gt_mem mem;
  gt_model model;
  gt_optim opt;
  gt_data data;
  gt_step_metrics last;
  int has_last;
  int32_t *tok_in, *tok_tg, *tok_pos; /* scratch for caller-supplied tokens */
  int64_t tok_cap;
};

gt_ctx *gt_ctx_new(void) {
  gt_ctx *c = calloc(1, sizeof *c);
  if (c) gt_mem_init(&c->mem);
  return c;
}

static void gt__release(gt_ctx *c) {
  if (!c->initialised) return;
  gt_optim_free(&c->opt);
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
  free(c);
}

const char *gt_ctx_error(const gt_ctx *c) { return c ? c->err.msg : "no context"; }

static gt_rc gt__need(gt_ctx *c, int init) {
  if (!c->configured) return gt_err_set(&c->err, GT_ERR_ARG, "api: call gt_ctx_configure first");
  if (init && !c->initialised) return gt_err_set(&c->err, GT_ERR_ARG, "api: call gt_ctx_init first");
  return GT_OK;
}

gt_rc gt_ctx_configure(gt_ctx *c, const char *preset, int n, const char *const *ov) {
  gt_err_clear(&c->err);
  gt__release(c);
  c->configured = 0;
  const char *user = NULL;
  char mn[GT_STR_SHORT + 16];
  const char **all = malloc(sizeof(char *) * (size_t)(n + 1));
  if (!all) return gt_err_set(&c->err, GT_ERR_NOMEM, "api: no memory");
  int k = 0;
  if (preset) {
    size_t l = strlen(preset);
    if (l > 5 && !strcmp(preset + l - 5, ".json")) {
      user = preset;
    } else {
      snprintf(mn, sizeof mn, "model_name=%s", preset);
      all[k++] = mn;
    }
  }
  for (int i = 0; i < n; i++) all[k++] = ov[i];
  gt_rc rc = gt_config_load(&c->cfg, NULL, user, k, all, &c->err);
  free(all);
  if (rc == GT_OK) c->configured = 1;
  return rc;
}

const gt_config *gt_ctx_config(const gt_ctx *c) { return c->configured ? &c->cfg : NULL; }

gt_rc gt_ctx_init(gt_ctx *c) {
  gt_rc rc = gt__need(c, 0);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt__release(c);
  if (c->cfg.num_devices > 1)
    return gt_err_set(&c->err, GT_ERR_CONFIG, "api: num_devices = %lld: a gt_ctx trains on one device (sharded "
                      "training is `gemtrain train` and gt_fsdp); expected num_devices=1", c->cfg.num_devices);
  gt_threads_configure(&c->cfg);
  if ((rc = gt_model_build(&c->model, &c->cfg, &c->err))) return rc;
  if ((rc = gt_model_alloc(&c->model, &c->mem, &c->err)) ||
      (rc = gt_optim_init(&c->opt, c->model.n_params, &c->mem, &c->err)) ||
      (rc = gt_data_open(&c->data, &c->cfg, &c->mem, &c->err))) {
    gt_optim_free(&c->opt);
    gt_model_free(&c->model);
    return rc;
  }
  gt_model_init_params(&c->model, (uint64_t)c->cfg.init_weights_seed, c->cfg.weight_init_scale);
  c->initialised = 1;
  return GT_OK;
}

int64_t gt_ctx_num_params(const gt_ctx *c) { return c->initialised ? c->model.n_params : 0; }

/* One optimizer step over `micro` batches produced by next(). */
static gt_rc gt__step(gt_ctx *c, const gt_batch *given, double *loss_out) {
  double t0 = gt_prof_now();
  gt_model *m = &c->model;
  gt_model_zero_grads(m);
  gt_loss_stats st = {0, 0, 0};
  int ga = given ? 1 : (int)c->cfg.gradient_accumulation_steps;
  gt_rc rc;
  for (int i = 0; i < ga; i++) {
    gt_batch b;
    if (given)
      b = *given;
    else
      gt_data_next_train(&c->data, &b);
    int64_t tw = gt_batch_total_weights(&b);
    float w = ga == 1 ? (tw ? 1.0f / (float)tw : 0.0f) : 1.0f;
    if ((rc = gt_exec_forward_backward(m, &b, (int)c->cfg.num_vocab_tiling, w, &st, &c->err))) return rc;
  }
  if (st.total_weights == 0) return gt_err_set(&c->err, GT_ERR_ARG, "api: every target of the batch is masked");
  if (ga > 1) {
    float inv = 1.0f / (float)st.total_weights;
    for (int64_t i = 0; i < m->n_params; i++) m->grads[i] *= inv;
  }
  double loss = st.xent_sum / (double)st.total_weights;
  gt_update_info ui;
  gt_optim_step(&c->opt, m->params, m->grads, &c->cfg, &ui);
  if (!isfinite(loss) || !isfinite(ui.grad_norm))
    return gt_err_set(&c->err, GT_ERR_NUMERIC, "api: step %lld has loss %g and gradient norm %g",
                      (long long)(c->opt.t - 1), loss, ui.grad_norm);
  double secs = gt_prof_now() - t0;
  gt_flops fl = gt_flops_per_step_per_device(&c->cfg);
  gt_step_metrics *s = &c->last;
  memset(s, 0, sizeof *s);
  s->step = c->opt.t - 1;
  s->seconds = secs;
  s->tflops_per_s_per_device = fl.total_tflops / secs;
  s->tokens_per_s_per_device = (double)st.total_weights / secs;
  s->total_weights = st.total_weights;
  s->loss = s->lm_loss = loss;
  s->perplexity = exp(loss);
  s->learning_rate = ui.lr;
  s->grad_norm = ui.grad_norm;
  s->peak_memory_bytes = gt_mem_total_peak(&c->mem);
  c->has_last = 1;
  if (loss_out) *loss_out = loss;
  return GT_OK;
}

gt_rc gt_ctx_train(gt_ctx *c, int n, double *losses) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  for (int i = 0; i < n; i++)
    if ((rc = gt__step(c, NULL, losses ? &losses[i] : NULL))) return rc;
  return GT_OK;
}

/* Splits [batch, seq + 1] tokens into a batch (inputs, targets, positions). */
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
    for (int t = 0; t < seq; t++) {
      int32_t id = tokens[(int64_t)r * row + t];
      if (id < 0 || id >= c->model.vocab)
        return gt_err_set(&c->err, GT_ERR_ARG, "api: token [%d, %d] = %d is outside the vocabulary 0..%lld", r, t,
                          id, (long long)c->model.vocab - 1);
      c->tok_in[(int64_t)r * seq + t] = id;
      c->tok_tg[(int64_t)r * seq + t] = with_targets ? tokens[(int64_t)r * row + t + 1] : -1;
      c->tok_pos[(int64_t)r * seq + t] = t;
    }
  for (int64_t i = 0; i < n; i++)
    if (c->tok_tg[i] >= c->model.vocab)
      return gt_err_set(&c->err, GT_ERR_ARG, "api: target %d is outside the vocabulary", c->tok_tg[i]);
  *b = (gt_batch){batch, seq, c->tok_in, c->tok_tg, c->tok_pos, NULL};
  return GT_OK;
}

gt_rc gt_ctx_train_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 1, &b))) return rc;
  if ((int64_t)batch * seq % c->cfg.num_vocab_tiling)
    return gt_err_set(&c->err, GT_ERR_ARG, "api: %d x %d tokens do not split into num_vocab_tiling = %lld tiles",
                      batch, seq, c->cfg.num_vocab_tiling);
  return gt__step(c, &b, loss);
}

gt_rc gt_ctx_eval_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 1, &b))) return rc;
  gt_loss_stats st = {0, 0, 0};
  if ((rc = gt_exec_forward_loss(&c->model, &b, 1, &st, &c->err))) return rc;
  *loss = st.total_weights ? st.xent_sum / (double)st.total_weights : NAN;
  return GT_OK;
}

gt_rc gt_ctx_last_metrics(const gt_ctx *c, gt_step_metrics *out) {
  if (!c->has_last) return GT_ERR_ARG;
  *out = c->last;
  return GT_OK;
}

gt_rc gt_ctx_forward_logits(gt_ctx *c, const int32_t *tokens, int batch, int seq, float *logits) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  gt_batch b;
  if ((rc = gt__tokens_batch(c, tokens, batch, seq, 0, &b))) return rc;
  return gt_exec_forward_logits(&c->model, &b, logits, &c->err);
}

/* ---------- save / load ---------- */

gt_rc gt_ctx_save(gt_ctx *c, const char *path) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  return gt_paramfile_write(path, &c->model, &c->cfg, c->opt.mu, c->opt.nu, (int64_t)c->opt.t, &c->err);
}

gt_rc gt_ctx_load(gt_ctx *c, const char *path) {
  gt_rc rc = gt__need(c, 1);
  if (rc) return rc;
  gt_err_clear(&c->err);
  int64_t step = 0;
  rc = gt_paramfile_read(path, &c->model, c->opt.mu, c->opt.nu, &step, &c->err);
  if (rc == GT_OK) c->opt.t = step;
  return rc;
}
