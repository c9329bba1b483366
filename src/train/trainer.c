#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "base/trace.h"
#include "model/flops.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "train/diloco.h"
#include "train/optim.h"
#include "train/pref.h"
#include "train/spike.h"

struct gt_trainer {
  gt_config cfg;
  gt_fsdp *fs;
  gt_mem host;        /* the host's copies of the step's micro-batches */
  gt_batch *mb;       /* [n_mb] */
  int32_t *mbuf;
  int n_mb;
  /* the rows of each global batch this process's devices compute (over
   * MPI ranks the rest belongs to other processes and stays masked) */
  int row0, nrows;
  int64_t step;       /* steps done, skipped ones included */
  gt_flops flops;
  gt_trace *trace;    /* the profiler timeline (NULL: off) */
  int measure;        /* allocation-only (the plan): no tokens, nothing skipped */
  int guard;          /* skip_step_on_spikes (never on an allocation-only trainer) */
  gt_spike spike;     /* its windows (kept with the guard off too), and the count of steps not applied */
  gt_diloco *dl;      /* DiLoCo's outer state (NULL: off) */
  gt_pref_cfg pref;   /* use_dpo: the pairs' loss (the head's callback reads it) */
  double eval_pref[GT_PREF_NSUMS]; /* the last eval's preference sums, and its pairs */
  int64_t eval_pairs;
};

/* use_dpo: the rows are chosen/rejected pairs; the reference (DPO) is the
 * frozen base with the adapters off, or a copy of the parameters held like
 * them (train.c replaces it by the reference's own source) */
static gt_rc gt__trainer_pref(gt_trainer *t, gt_err *err) {
  const gt_config *c = &t->cfg;
  gt_rc rc = gt_pref_cfg_from(c, &t->pref, err);
  if (rc) return rc;
  long long rows = gt_config_global_batch(c) / gt_config_total_devices(c);
  if (rows % 2)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: use_dpo needs an even number of rows per device (a chosen and a rejected row per "
                      "pair); key 'per_device_batch_size' gives %lld",
                      rows);
  if (c->z_loss_multiplier > 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'z_loss_multiplier' = %g with use_dpo: the preference losses have no z-loss; set it "
                      "to 0", c->z_loss_multiplier);
  if (c->enable_lora && c->dpo_reference_path[0] && gt_pref_needs_reference(c))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'dpo_reference_path' = '%s' with enable_lora: the reference is the frozen base with "
                      "the adapters off; leave dpo_reference_path empty",
                      c->dpo_reference_path);
  /* the adapters' reference is the model with them off: base tensors that
   * train beside them would move it (PEFT's modules_to_save keeps an
   * original copy for this; gemtrain keeps none) */
  if (c->enable_lora && c->trainable_parameters_mask[0] && gt_pref_needs_reference(c))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'trainable_parameters_mask' = '%s' with enable_lora and DPO: the reference is the "
                      "base with the adapters off, and the base tensors the mask trains would move it with every "
                      "step; leave the mask empty (adapters only), or train every parameter (enable_lora=false: the "
                      "reference is a frozen copy)",
                      c->trainable_parameters_mask);
  int ref = !gt_pref_needs_reference(c) ? GT_FSDP_REF_NONE : c->enable_lora ? GT_FSDP_REF_BASE : GT_FSDP_REF_COPY;
  /* room for a step's micro-batches or an eval's batches, the plan's too */
  int64_t nb = c->gradient_accumulation_steps > c->eval_steps ? c->gradient_accumulation_steps : c->eval_steps;
  return gt_fsdp_set_pref(t->fs, gt_pref_pairs_loss, &t->pref, ref, nb, err);
}

gt_rc gt_trainer_create(gt_trainer **out, const gt_config *cfg, const gt_mem_probe *probes, gt_err *err) {
  *out = NULL;
  if (gt_config_total_devices(cfg) > 1 && cfg->per_device_batch_size != floor(cfg->per_device_batch_size))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'per_device_batch_size' = %g must be a whole number when num_devices = %lld "
                      "over %lld rank%s (each device takes its own rows of the global batch)",
                      cfg->per_device_batch_size, cfg->num_devices, gt_config_num_ranks(cfg),
                      gt_config_num_ranks(cfg) > 1 ? "s" : "");
  gt_trainer *t = calloc(1, sizeof *t);
  if (!t) return gt_err_set(err, GT_ERR_NOMEM, "train: no memory");
  t->cfg = *cfg;
  t->measure = probes != NULL;
  t->guard = cfg->skip_step_on_spikes && !probes;
  gt_spike_init(&t->spike, cfg->skip_step_interval, cfg->skip_step_scaling_factor);
  gt_dist_set_timeout(cfg->collective_timeout_seconds);
  gt_mem_init(&t->host);
  t->flops = gt_flops_per_step_per_device(cfg);
  gt_rc rc = gt_fsdp_create(&t->fs, cfg, probes, err);
  if (!rc && (rc = gt_diloco_create(&t->dl, cfg, t->fs, err))) gt_fsdp_destroy(t->fs);
  if (rc) {
    free(t);
    return rc;
  }
  /* each device's step arena: the first step is recorded, later ones served
   * from it (base/alloc.h; off on an allocation-only trainer) */
  for (int d = 0; d < gt_fsdp_devices(t->fs); d++) gt_mem_arena_enable(gt_fsdp_device_mem(t->fs, d));
  /* one buffer per micro-batch of a step (or eval batch): the data source
   * reuses its own, and every device reads its rows of each */
  int64_t nb = gt_config_global_batch(cfg) * cfg->max_target_length;
  int ga = (int)cfg->gradient_accumulation_steps;
  /* an allocation-only trainer (the plan) runs one step and no eval */
  t->n_mb = probes || ga > (int)cfg->eval_steps ? ga : (int)cfg->eval_steps;
  t->mb = calloc((size_t)t->n_mb, sizeof *t->mb);
  t->mbuf = gt_mem_alloc(&t->host, GT_MEM_DATA, (size_t)(4 * t->n_mb) * (size_t)nb * sizeof(int32_t));
  if (!t->mb || !t->mbuf) {
    int n = t->n_mb;
    gt_trainer_destroy(t);
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory for %d batches", n);
  }
  for (int i = 0; i < t->n_mb; i++)
    t->mb[i] = (gt_batch){(int)gt_config_global_batch(cfg), (int)cfg->max_target_length, t->mbuf + (4 * i) * nb,
                          t->mbuf + (4 * i + 1) * nb, t->mbuf + (4 * i + 2) * nb, NULL};
  /* this process's rows: those of its devices, one block of rows_per_device
   * each at the device's global index (one contiguous span when the rank
   * part of the mesh is outermost on the batch's axes; otherwise the span
   * covering them, of which each device computes only its own rows) */
  gt_mesh_rows(gt_fsdp_mesh(t->fs), (int)gt_config_global_batch(cfg), &t->row0, &t->nrows);
  if (cfg->use_dpo && (rc = gt__trainer_pref(t, err))) {
    gt_trainer_destroy(t);
    return rc;
  }
  *out = t;
  return GT_OK;
}

void gt_trainer_destroy(gt_trainer *t) {
  if (!t) return;
  gt_diloco_destroy(t->dl);
  gt_fsdp_destroy(t->fs);
  gt_mem_free(&t->host, t->mbuf);
  free(t->mb);
  free(t);
}

int64_t gt_trainer_peak_bytes(gt_trainer *t) {
  int64_t peak = 0; /* per device, as MaxText reports device memory: the largest */
  for (int d = 0; d < gt_fsdp_devices(t->fs); d++) {
    int64_t p = gt_mem_total_peak(gt_fsdp_device_mem(t->fs, d));
    if (p > peak) peak = p;
  }
  return peak;
}

/* reduce and norm, on every device: its shard's part of the squared global
 * gradient norm (the mesh says how often each element is held) */
static void gt__partial_norm(void *ctx, gt_fsdp_shard *s) {
  (void)ctx;
  double t0 = s->lane ? gt_prof_now() : 0.0, sum = 0.0;
  for (int i = 0; i < s->n_parts; i++) {
    const gt_fsdp_norm_part *p = &s->parts[i];
    const float *g = s->grads + p->off;
    sum += gt_sumsq(g, p->n_rep) / p->div_rep + gt_sumsq(g + p->n_rep, p->n - p->n_rep) / p->div_own;
  }
  s->sumsq = sum;
  if (s->lane) gt_trace_span(s->lane, "gradient norm", "optimizer", t0, gt_prof_now());
}

/* clip and update, on every device: AdamW (clip scale and weight decay in
 * its hyperparameters) on the trainable shard */
static void gt__optim_update(const gt_adamw_hparams *h, gt_fsdp_shard *s) {
  gt_optim_apply(h, s->params, s->grads, s->mu, s->mu16, s->nu, s->n);
}

static void gt__apply(void *ctx, gt_fsdp_shard *s) {
  /* its trace span is named by the call: "optim_update" */
  GT_PROF(s->prof, GT_PROF_OPTIM, gt__optim_update(ctx, s));
}

/* after the update, on every device: its shard's part of the squared norm
 * of the trainable parameters, each element counted once over its copies
 * (the gradient norm's weights) */
static void gt__param_sumsq(void *ctx, gt_fsdp_shard *s) {
  (void)ctx;
  double sum = 0.0;
  for (int i = 0; i < s->n_parts; i++) {
    const gt_fsdp_norm_part *p = &s->parts[i];
    const float *x = s->params + p->off;
    sum += gt_sumsq(x, p->n_rep) / p->div_rep + gt_sumsq(x + p->n_rep, p->n - p->n_rep) / p->div_own;
  }
  s->sumsq = sum;
}

/* The step; window (NULL: none) is the spike guard's, which takes the
 * values of every step that would apply, and with `enforce` may hold the
 * update back. */
static gt_rc gt__mesh_step(gt_fsdp *fs, const gt_batch *micro, int n_micro, gt_spike *window, int enforce,
                           gt_mesh_step_info *info, gt_err *err) {
  const gt_config *c = gt_fsdp_config(fs);
  memset(info, 0, sizeof *info);
  /* zero */
  gt_rc rc = gt_fsdp_zero(fs, micro, n_micro, err);
  /* forward/backward per micro-batch (gradients reduce-scatter as they come) */
  for (int i = 0; i < n_micro && !rc; i++) rc = gt_fsdp_forward_backward(fs, i, err);
  /* reduce and norm: loss sums and the squared norm of the trainable group */
  gt_fsdp_sums sums;
  if (!rc) rc = gt_fsdp_reduce(fs, gt__partial_norm, NULL, &sums, err);
  if (rc) return rc;
  /* clip and update: one decision for every device (their sums agree); a
   * non-finite loss or norm updates nothing */
  int64_t t = gt_fsdp_opt_step(fs);
  int finite = isfinite(sums.xent_sum) && isfinite(sums.moe_lb);
  gt_adamw_hparams h;
  int apply = gt_optim_prepare(c, t, sqrt(sums.sumsq), finite, &h, &info->update);
  /* no token of the global batch is in the loss (the count is all-reduced:
   * every device and rank decides alike): nothing to learn from, and weight
   * decay or the schedule must not move either */
  if (sums.total_weights == 0) {
    apply = 0;
    info->update.skipped = 1;
    info->no_tokens = 1;
  }
  /* the spike guard, on a step that would apply: MaxText's skip_step_on_spikes
   * watches the step's loss (LM with its z-loss, plus MoE load-balance: the
   * reported loss) and the norm of the gradient
   * the optimizer is given (after clipping). Both are all-reduced values,
   * the same on every device and rank, so every device and rank decides
   * alike; a held-back step leaves the parameters, the moments and the
   * AdamW step (so the schedule) where they were, as a non-finite one */
  if (window && apply) {
    double loss = sums.xent_sum / (double)sums.total_weights + sums.moe_lb,
           norm = info->update.grad_norm * info->update.clip_scale;
    int spike = enforce && gt_spike_check(window, loss, norm);
    /* with the guard off too: the window stays current, so a run resumed
     * with the guard on compares against the steps just before it */
    gt_spike_push(window, loss, norm);
    if (spike) {
      apply = 0;
      info->spike_skipped = 1;
    }
  }
  gt_fsdp_comm comm;
  if ((rc = gt_fsdp_update(fs, apply ? gt__apply : NULL, &h, &comm, err))) return rc;
  if (apply) gt_fsdp_set_opt_step(fs, t + 1);
  double psq;
  if ((rc = gt_fsdp_shard_sum(fs, gt__param_sumsq, NULL, &psq, err))) return rc;
  info->param_norm = sqrt(psq);
  /* report */
  /* no tokens (an empty or allocation-only step): no loss */
  info->loss = sums.total_weights ? sums.xent_sum / (double)sums.total_weights : 0.0;
  info->moe_lb_loss = sums.moe_lb;
  info->z_loss = sums.total_weights ? sums.z_sum / (double)sums.total_weights : 0.0;
  info->total_weights = sums.total_weights;
  info->comm_bytes = comm.bytes;
  info->comm_seconds = comm.seconds;
  info->comm_bytes_dcn = comm.bytes_dcn;
  memcpy(info->pref, sums.pref, sizeof info->pref);
  return GT_OK;
}

gt_rc gt_trainer_mesh_step(gt_fsdp *fs, const gt_batch *micro, int n_micro, gt_mesh_step_info *info, gt_err *err) {
  return gt__mesh_step(fs, micro, n_micro, NULL, 0, info, err);
}

gt_rc gt_trainer_step(gt_trainer *t, const gt_batch *micro, int n_micro, gt_step_metrics *sm, gt_err *err) {
  const gt_config *c = &t->cfg;
  double t0 = gt_prof_now();
  gt_mesh_step_info fi;
  gt_fsdp_set_step(t->fs, t->step); /* seeds the adapters' dropout */
  for (int d = 0; d < gt_fsdp_devices(t->fs); d++) gt_mem_step_begin(gt_fsdp_device_mem(t->fs, d));
  gt_rc rc = gt__mesh_step(t->fs, micro, n_micro, t->measure ? NULL : &t->spike, t->guard, &fi, err);
  for (int d = 0; d < gt_fsdp_devices(t->fs); d++) gt_mem_step_end(gt_fsdp_device_mem(t->fs, d), rc == GT_OK);
  if (rc) return rc;
  double t1 = gt_prof_now(), loss = fi.loss + fi.moe_lb_loss, secs = t1 - t0;
  if (t->trace) { /* the host's span is the step's measured time exactly */
    char name[32];
    snprintf(name, sizeof name, "step %lld", (long long)t->step);
    gt_trace_span_text(gt_trace_host(t->trace), name, "step", t0, t1, "step", t->step);
  }
  memset(sm, 0, sizeof *sm);
  sm->step = t->step;
  sm->seconds = secs;
  int64_t tokens = 0;
  for (int i = 0; i < n_micro; i++) tokens += (int64_t)micro[i].B * micro[i].T;
  /* the FLOPs count is the configured step's; a caller's own batch of
   * another size scales it (attention's share differs slightly: near enough) */
  double configured = (double)gt_config_global_batch(c) * (double)c->max_target_length *
                      (double)c->gradient_accumulation_steps;
  sm->tflops_per_s_per_device = t->flops.total_tflops * ((double)tokens / configured) / secs;
  sm->tokens_per_s_per_device = (double)tokens / (double)gt_config_total_devices(c) / secs;
  sm->total_weights = fi.total_weights;
  sm->loss = loss;
  sm->lm_loss = fi.loss;
  sm->perplexity = exp(fi.loss);
  sm->has_moe = gt_config_num_moe_layers(c) > 0;
  sm->moe_lb_loss = fi.moe_lb_loss;
  sm->has_z_loss = c->z_loss_multiplier > 0;
  sm->z_loss = fi.z_loss;
  sm->learning_rate = fi.update.lr;
  sm->grad_norm = fi.update.grad_norm;
  sm->skipped = fi.update.skipped && !t->measure;
  sm->no_tokens = fi.no_tokens && !t->measure;
  sm->spike_skipped = fi.spike_skipped;
  sm->param_norm = fi.param_norm;
  /* steps not applied: spikes and non-finite steps (not empty ones) */
  if (sm->spike_skipped || (sm->skipped && !sm->no_tokens)) t->spike.skipped_steps++;
  sm->skipped_steps = t->spike.skipped_steps;
  sm->peak_memory_bytes = gt_trainer_peak_bytes(t);
  sm->comm_seconds = fi.comm_seconds;
  sm->comm_bytes = fi.comm_bytes;
  sm->comm_bytes_dcn = fi.comm_bytes_dcn;
  sm->ranks = (int)gt_config_num_ranks(c);
  if (c->use_dpo) { /* over every DiLoCo replica's pairs, as the loss (gt_diloco_step_end) */
    double v[1 + GT_PREF_NSUMS] = {(double)fi.total_weights};
    memcpy(v + 1, fi.pref, sizeof fi.pref);
    gt_rc rc = gt_diloco_sum(t->dl, v, 1 + GT_PREF_NSUMS, "the preference metrics over the DiLoCo replicas", err);
    if (rc) return rc;
    gt_pref_metrics(sm, &t->pref, v + 1, (int64_t)llround(v[0]));
  }
  if (sm->skipped && !sm->no_tokens && !c->skip_nonfinite_steps)
    return gt_err_set(err, GT_ERR_NUMERIC,
                      "train: step %lld has loss %g and gradient norm %g; stopping without applying it or writing a "
                      "checkpoint (skip_nonfinite_steps=true would skip such steps)",
                      (long long)t->step, loss, fi.update.grad_norm);
  t->step++;
  return gt_diloco_step_end(t->dl, t->step, sm, err);
}

/* Copies the next train (or eval) batch out of the data source's buffers.
 * The source fills this process's rows only (gt_data_set_rows, set here
 * on first use); over MPI ranks the other rows belong to other processes
 * and arrive masked (input 0, target -1). */
static gt_rc gt__copy_batch(gt_trainer *t, gt_batch *dst, gt_data *d, int eval, gt_err *err) {
  if (d->row0 != t->row0 || d->nrows != t->nrows) gt_data_set_rows(d, t->row0, t->nrows);
  gt_batch b;
  gt_rc rc = eval ? gt_data_read_eval(d, &b, err) : gt_data_read_train(d, &b, err);
  if (rc) return rc;
  const size_t all = (size_t)b.B * (size_t)b.T, n = all * sizeof(int32_t);
  int32_t *seg = (int32_t *)dst->positions + all; /* the fourth array of this batch */
  memcpy((int32_t *)dst->inputs, b.inputs, n);
  memcpy((int32_t *)dst->targets, b.targets, n);
  memcpy((int32_t *)dst->positions, b.positions, n);
  if (b.segments) memcpy(seg, b.segments, n);
  dst->segments = b.segments ? seg : NULL; /* synthetic data has none */
  return GT_OK;
}

gt_rc gt_trainer_load_data(gt_trainer *t, gt_data *d, gt_err *err) {
  int ga = (int)t->cfg.gradient_accumulation_steps;
  double t0 = t->trace ? gt_prof_now() : 0.0;
  for (int i = 0; i < ga; i++) {
    gt_rc rc = gt__copy_batch(t, &t->mb[i], d, 0, err);
    if (rc) return rc;
  }
  if (t->trace) gt_trace_span_arg(gt_trace_host(t->trace), "data loading", "data", t0, gt_prof_now(), "batches", ga, NULL);
  return GT_OK;
}

gt_rc gt_trainer_step_loaded(gt_trainer *t, gt_step_metrics *sm, gt_err *err) {
  return gt_trainer_step(t, t->mb, (int)t->cfg.gradient_accumulation_steps, sm, err);
}

gt_rc gt_trainer_step_data(gt_trainer *t, gt_data *d, gt_step_metrics *sm, gt_err *err) {
  gt_rc rc = gt_trainer_load_data(t, d, err);
  return rc ? rc : gt_trainer_step_loaded(t, sm, err);
}

gt_rc gt_trainer_step_zero(gt_trainer *t, gt_step_metrics *sm, gt_err *err) {
  return gt_trainer_step(t, t->mb, (int)t->cfg.gradient_accumulation_steps, sm, err);
}

gt_rc gt_trainer_eval(gt_trainer *t, const gt_batch *b, int n, gt_loss_stats *st, gt_err *err) {
  return gt_fsdp_eval(t->fs, b, n, st, err);
}

gt_rc gt_trainer_eval_data(gt_trainer *t, gt_data *d, double *loss, int64_t *total_weights, gt_err *err) {
  gt_rc rc = gt_trainer_load_eval(t, d, err);
  return rc ? rc : gt_trainer_eval_loaded(t, loss, total_weights, err);
}

gt_rc gt_trainer_load_eval(gt_trainer *t, gt_data *d, gt_err *err) {
  int n = (int)t->cfg.eval_steps;
  gt_data_eval_reset(d);
  double t0 = t->trace ? gt_prof_now() : 0.0;
  for (int i = 0; i < n; i++) {
    gt_rc rc = gt__copy_batch(t, &t->mb[i], d, 1, err);
    if (rc) return rc;
  }
  if (t->trace) gt_trace_span_arg(gt_trace_host(t->trace), "data loading (eval)", "data", t0, gt_prof_now(), "batches", n, NULL);
  return GT_OK;
}

gt_rc gt_trainer_eval_loaded(gt_trainer *t, double *loss, int64_t *total_weights, gt_err *err) {
  int n = (int)t->cfg.eval_steps;
  gt_loss_stats st = {0};
  t->eval_pairs = 0;
  gt_rc rc = gt_fsdp_eval(t->fs, t->mb, n, &st, err);
  /* DiLoCo: every replica's rows (the pairs' metric sums too) */
  double v[2 + GT_PREF_NSUMS] = {st.xent_sum, (double)st.total_weights};
  memcpy(v + 2, st.pref, sizeof st.pref);
  if (!rc) rc = gt_diloco_sum(t->dl, v, t->cfg.use_dpo ? 2 + GT_PREF_NSUMS : 2, "the eval loss over the DiLoCo replicas", err);
  if (rc) return rc;
  st.xent_sum = v[0];
  st.total_weights = (int64_t)llround(v[1]);
  memcpy(st.pref, v + 2, sizeof st.pref);
  /* no token in the loss (all-reduced: every rank sees the same 0): no
   * loss; the caller skips the evaluation instead of reporting NaN */
  if (st.total_weights == 0) {
    *loss = 0.0;
    *total_weights = 0;
    return GT_OK;
  }
  *loss = st.xent_sum / (double)st.total_weights;
  *total_weights = st.total_weights;
  memcpy(t->eval_pref, st.pref, sizeof t->eval_pref);
  t->eval_pairs = st.total_weights;
  return GT_OK;
}

void gt_trainer_eval_pref_metrics(const gt_trainer *t, gt_step_metrics *sm) {
  if (!t->cfg.use_dpo || !t->eval_pairs) return;
  gt_step_metrics e;
  memset(&e, 0, sizeof e);
  gt_pref_metrics(&e, &t->pref, t->eval_pref, t->eval_pairs);
  sm->has_eval_pref = 1;
  sm->eval_rewards_chosen = e.rewards_chosen;
  sm->eval_rewards_rejected = e.rewards_rejected;
  sm->eval_rewards_accuracies = e.rewards_accuracies;
  sm->eval_rewards_margins = e.rewards_margins;
}

int64_t gt_trainer_step_index(const gt_trainer *t) { return t->step; }
void gt_trainer_set_step_index(gt_trainer *t, int64_t step) { t->step = step; }
int64_t gt_trainer_num_params(const gt_trainer *t) { return gt_fsdp_num_params(t->fs); }
gt_fsdp *gt_trainer_fsdp(gt_trainer *t) { return t->fs; }
gt_diloco *gt_trainer_diloco(gt_trainer *t) { return t->dl; }
gt_model *gt_trainer_device_model(gt_trainer *t, int d) { return gt_fsdp_device_model(t->fs, d); }
void gt__trainer_poison_next_step(gt_trainer *t) { gt_fsdp_poison_next_step(t->fs); }
void gt_trainer_spike_state(const gt_trainer *t, gt_ckpt_spike *out) { gt_spike_save(&t->spike, out); }
void gt_trainer_set_spike_state(gt_trainer *t, const gt_ckpt_spike *in) { gt_spike_load(&t->spike, in); }

gt_rc gt_trainer_set_trace(gt_trainer *t, gt_trace *tr, gt_err *err) {
  gt_rc rc = gt_fsdp_set_trace(t->fs, tr, err);
  if (!rc) t->trace = tr;
  return rc;
}

gt_trace *gt_trainer_trace(gt_trainer *t) { return t->trace; }
