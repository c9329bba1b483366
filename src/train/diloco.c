/* DiLoCo's outer state and sync (diloco.h). */
#include "train/diloco.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "base/shard.h"
#include "dist/dist.h"
#include "model/model.h"

struct gt_diloco {
  gt_fsdp *fs;
  int n_dev, P;
  int64_t period;
  int64_t last; /* the step count after which the run ends its schedule (-1: none of its steps) */
  float lr, mu;
  int measure;
  float **outer, **mom; /* [n_dev] each device's shard */
  int64_t *n;           /* [n_dev] */
};

int gt_diloco_on(const gt_config *cfg) { return cfg->enable_diloco && cfg->dcn_diloco_parallelism > 1; }

gt_rc gt_diloco_setup_ranks(const gt_config *c, gt_err *err) {
  if (!gt_diloco_on(c)) return GT_OK;
  int W = gt_dist_size(), P = (int)c->dcn_diloco_parallelism;
  /* without MPI the configuration's own check refuses it, naming that */
  if (!gt_dist_compiled()) return GT_OK;
  if (W == 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'enable_diloco' = true with dcn_diloco_parallelism = %d, but the run has 1 rank; "
                      "DiLoCo replicas are groups of MPI ranks (mpirun -np %d or more)",
                      P, P);
  if (W % P)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dcn_diloco_parallelism' = %d does not divide the %d ranks mpirun started; each "
                      "replica is the same number of consecutive ranks",
                      P, W);
  /* the dcn axes lay out one replica's ranks: their fixed part must fit */
  long long ax[3] = {c->dcn_data_parallelism, c->dcn_fsdp_parallelism, c->dcn_expert_parallelism}, known = 1;
  int fill = 0;
  for (int i = 0; i < 3; i++) {
    if (ax[i] > 0) known *= ax[i];
    else fill = 1;
  }
  if ((fill && (W / P) % known) || (!fill && known != W / P))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: dcn_data_parallelism x dcn_fsdp_parallelism x dcn_expert_parallelism = %lld x %lld x "
                      "%lld lay out one DiLoCo replica, which has %d rank%s (%d ranks / dcn_diloco_parallelism = %d); "
                      "expected their product to be %d",
                      ax[0], ax[1], ax[2], W / P, W / P > 1 ? "s" : "", W, P, W / P);
  return gt_dist_set_replicas(P, err);
}

int64_t gt_diloco_sync_bytes(int64_t elems, int replicas) {
  return elems * (int64_t)sizeof(float) * (int64_t)(replicas > 1 ? replicas - 1 : 0);
}

void gt_diloco_outer_update(float *outer, float *mom, const float *delta_sum, int64_t n, int P, float lr, float mu) {
  const float inv = 1.0f / (float)P;
  for (int64_t i = 0; i < n; i++) {
    float delta = delta_sum[i] * inv;
    float m = mu * mom[i] + delta;
    mom[i] = m;
    outer[i] = outer[i] - lr * (delta + mu * m);
  }
}

void gt_diloco_destroy(gt_diloco *d) {
  if (!d) return;
  for (int i = 0; i < d->n_dev; i++) {
    gt_mem *mem = gt_fsdp_device_mem(d->fs, i);
    if (d->outer) gt_mem_free(mem, d->outer[i]);
    if (d->mom) gt_mem_free(mem, d->mom[i]);
  }
  free(d->outer);
  free(d->mom);
  free(d->n);
  free(d);
}

gt_rc gt_diloco_create(gt_diloco **out, const gt_config *cfg, gt_fsdp *fs, gt_err *err) {
  *out = NULL;
  if (!gt_diloco_on(cfg)) return GT_OK;
  gt_diloco *d = calloc(1, sizeof *d);
  if (!d) return gt_err_set(err, GT_ERR_NOMEM, "diloco: no memory");
  d->fs = fs;
  d->n_dev = gt_fsdp_devices(fs);
  d->P = (int)cfg->dcn_diloco_parallelism;
  d->period = cfg->diloco_sync_period;
  /* a run whose last step ends its learning-rate schedule syncs there too,
   * so its final parameters (checkpoint, export, last eval) hold every
   * replica's steps, not replica 0's alone; a run stopped inside its
   * schedule (to be continued) does not, so it resumes as the straight run */
  d->last = cfg->learning_rate_schedule_steps > cfg->steps ? -1 : cfg->steps;
  d->lr = (float)cfg->diloco_outer_lr;
  d->mu = (float)cfg->diloco_outer_momentum;
  d->measure = gt_mem_measuring(gt_fsdp_device_mem(fs, 0));
  /* the sync sums over the replicas the ranks were split into: a real run
   * needs that split (gemtrain train makes it), or the mean would be wrong */
  if (!d->measure && gt_dist_replicas() != d->P) {
    int have = gt_dist_replicas();
    free(d);
    return gt_err_set(err, GT_ERR_CONFIG,
                      "diloco: key 'enable_diloco' = true with dcn_diloco_parallelism = %d, but the ranks are split "
                      "into %d replica%s; run it under mpirun with gemtrain train (which splits them)",
                      (int)cfg->dcn_diloco_parallelism, have, have > 1 ? "s" : "");
  }
  d->outer = calloc((size_t)d->n_dev, sizeof *d->outer);
  d->mom = calloc((size_t)d->n_dev, sizeof *d->mom);
  d->n = calloc((size_t)d->n_dev, sizeof *d->n);
  if (!d->outer || !d->mom || !d->n) {
    gt_diloco_destroy(d);
    return gt_err_set(err, GT_ERR_NOMEM, "diloco: no memory");
  }
  for (int i = 0; i < d->n_dev; i++) {
    gt_mem *mem = gt_fsdp_device_mem(fs, i);
    gt_fsdp_trainable_shard(fs, i, &d->n[i]);
    size_t bytes = (size_t)(d->n[i] > 0 ? d->n[i] : 1) * sizeof(float);
    d->outer[i] = gt_mem_alloc_named(mem, GT_MEM_OPTIM, bytes, "diloco outer parameters");
    d->mom[i] = gt_mem_alloc_named(mem, GT_MEM_OPTIM, bytes, "diloco outer momentum");
    if (!d->outer[i] || !d->mom[i]) {
      gt_diloco_destroy(d);
      return gt_err_set(err, GT_ERR_NOMEM, "diloco: no memory for device %d's outer state (2 x %lld floats)", i,
                        (long long)d->n[i]);
    }
  }
  gt_diloco_reset(d);
  *out = d;
  return GT_OK;
}

void gt_diloco_reset(gt_diloco *d) {
  if (!d || d->measure) return;
  for (int i = 0; i < d->n_dev; i++) {
    int64_t n;
    const float *p = gt_fsdp_trainable_shard(d->fs, i, &n);
    memcpy(d->outer[i], p, (size_t)n * sizeof(float));
    memset(d->mom[i], 0, (size_t)n * sizeof(float));
  }
}

/* Every device's pseudo-gradient (outer - inner, written over its
 * parameters, which the sync replaces anyway), summed over the replicas,
 * the outer step, and the new outer parameters as every replica's. */
static gt_rc gt__sync(gt_diloco *d, int64_t *bytes, gt_err *err) {
  *bytes = 0;
  for (int i = 0; i < d->n_dev; i++) {
    int64_t n;
    float *p = gt_fsdp_trainable_shard(d->fs, i, &n);
    const float *o = d->outer[i];
    for (int64_t k = 0; k < n; k++) p[k] = o[k] - p[k];
    gt_rc rc = gt_dist_cross_allreduce_f32(p, n, "the DiLoCo sync of the replicas", err);
    if (rc) return rc;
    gt_diloco_outer_update(d->outer[i], d->mom[i], p, n, d->P, d->lr, d->mu);
    memcpy(p, d->outer[i], (size_t)n * sizeof(float));
    *bytes += gt_diloco_sync_bytes(n, d->P);
  }
  return GT_OK;
}

gt_rc gt_diloco_step_end(gt_diloco *d, int64_t done, gt_step_metrics *sm, gt_err *err) {
  if (!d || d->measure) return GT_OK;
  double t0 = gt_prof_now();
  sm->diloco_synced = 0;
  sm->diloco_bytes = 0;
  if (done % d->period == 0 || done == d->last) {
    gt_rc rc = gt__sync(d, &sm->diloco_bytes, err);
    if (rc) return rc;
    sm->diloco_synced = 1;
  }
  /* the step's report over every replica's rows: token-weighted LM loss,
   * the mean load-balance loss, the RMS of the replicas' gradient norms;
   * and the replicas that skipped it (each decides its own step) */
  double v[8] = {sm->lm_loss * (double)sm->total_weights,
                 (double)sm->total_weights,
                 sm->moe_lb_loss,
                 sm->grad_norm * sm->grad_norm,
                 sm->skipped != 0,
                 sm->no_tokens != 0,
                 sm->spike_skipped != 0,
                 sm->skipped || sm->no_tokens || sm->spike_skipped};
  gt_rc rc = gt_dist_cross_allreduce_f64(v, 8, "the step's loss over the DiLoCo replicas", err);
  if (rc) return rc;
  sm->skipped = v[4] > 0;
  sm->no_tokens = v[5] > 0;
  sm->spike_skipped = v[6] > 0;
  sm->diloco_replicas = d->P;
  sm->diloco_replicas_skipped = (int)llround(v[7]);
  sm->total_weights = (int64_t)llround(v[1]);
  sm->lm_loss = v[1] > 0 ? v[0] / v[1] : 0.0;
  sm->moe_lb_loss = v[2] / d->P;
  sm->loss = sm->lm_loss + sm->moe_lb_loss;
  sm->perplexity = exp(sm->lm_loss);
  sm->grad_norm = sqrt(v[3] / d->P);
  /* the step's time includes its sync: the rates follow */
  double dt = gt_prof_now() - t0, secs = sm->seconds + dt;
  if (secs > 0 && sm->seconds > 0) {
    sm->tokens_per_s_per_device *= sm->seconds / secs;
    sm->tflops_per_s_per_device *= sm->seconds / secs;
  }
  sm->seconds = secs;
  return GT_OK;
}

gt_rc gt_diloco_sum(gt_diloco *d, double *v, int n, const char *what, gt_err *err) {
  if (!d || d->measure) return GT_OK;
  return gt_dist_cross_allreduce_f64(v, n, what, err);
}

int gt_diloco_devices(const gt_diloco *d) { return d->n_dev; }

void gt_diloco_shard(gt_diloco *d, int dev, const float **outer, const float **mom, int64_t *n) {
  *outer = d->outer[dev];
  *mom = d->mom[dev];
  *n = d->n[dev];
}

void gt_diloco_set_from_full(gt_diloco *d, const float *outer_full, const float *mom_full) {
  if (d->measure) return;
  for (int i = 0; i < d->n_dev; i++) {
    gt_fsdp_trainable_from_full(d->fs, i, outer_full, d->outer[i]);
    gt_fsdp_trainable_from_full(d->fs, i, mom_full, d->mom[i]);
  }
}

void gt_diloco_ckpt_shard(gt_diloco *d, int r, const float **outer, const float **mu, const float **nu) {
  *outer = *mu = *nu = NULL;
  gt_mesh *m = gt_fsdp_mesh(d->fs);
  if (gt_mesh_rank_of(m, r) != gt_mesh_rank(m)) return;
  for (int i = 0; i < d->n_dev; i++)
    if (gt_mesh_global_id(m, i) == r) {
      *outer = d->outer[i];
      *mu = *nu = d->mom[i];
    }
}

gt_rc gt_diloco_plan(const gt_config *cfg, int64_t *elems, int64_t *bytes_per_sync, int64_t *outer_bytes, gt_err *err) {
  gt_model m;
  gt_rc rc = gt_model_build(&m, cfg, err);
  if (rc) return rc;
  int dp, fs, ep;
  gt_config_global_axes(cfg, &dp, &fs, &ep);
  int64_t n = 0;
  for (int64_t u = 0; u < gt_model_n_units(&m); u++) n += gt_shard_len(gt_model_unit_trainable(&m, u), fs, 0);
  gt_model_free(&m);
  *elems = n;
  *bytes_per_sync = gt_diloco_sync_bytes(n, (int)cfg->dcn_diloco_parallelism);
  *outer_bytes = 2 * n * (int64_t)sizeof(float);
  return GT_OK;
}
