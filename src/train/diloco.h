/* DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
 * Training of Language Models"; MaxText's enable_diloco): the ranks are split
 * into dcn_diloco_parallelism replicas of consecutive ranks (dist.h). Each
 * replica is a mesh of its own (its dcn data/fsdp/expert axes over its ranks)
 * and runs AdamW steps on its own rows of every global batch; every
 * diloco_sync_period steps the replicas average their pseudo-gradients (the
 * outer parameters minus their current ones) and the outer optimizer, SGD
 * with Nesterov momentum as in optax.sgd(lr, momentum, nesterov=True), moves
 * the outer parameters, which then become every replica's parameters. The
 * inner AdamW state stays each replica's own (the paper's section 6.1).
 *
 * The outer state lives beside each device's trainable shard (the same
 * elements on every replica): the outer parameters and the momentum, float32,
 * in the device's tracker (GT_MEM_OPTIM), so the memory plan counts them.
 * The sync is a sum over replicas of each device's shard, in replica order
 * (gt_dist_cross_allreduce_f32): the same bits on every rank, whatever the
 * layout inside a replica. */
#ifndef GT_TRAIN_DILOCO_H
#define GT_TRAIN_DILOCO_H

#include <stdint.h>

#include "config/config.h"
#include "gemtrain/metrics.h"
#include "mesh/fsdp.h"

typedef struct gt_diloco gt_diloco;

/* 1 when cfg runs DiLoCo (enable_diloco with more than one replica). */
int gt_diloco_on(const gt_config *cfg);

/* Checks the DiLoCo keys against the ranks the launcher started and splits
 * them into replicas (collective over every rank; nothing when DiLoCo is
 * off). Refused, naming the keys: one rank, a replica count that does not
 * divide the ranks, and dcn axes whose product is not the ranks of one
 * replica. */
gt_rc gt_diloco_setup_ranks(const gt_config *cfg, gt_err *err);

/* The outer state over fs's devices, started from their current parameters
 * (momentum zero). *out is NULL when DiLoCo is off. On an allocation-only
 * fs (the plan) it is allocated and never touched. */
gt_rc gt_diloco_create(gt_diloco **out, const gt_config *cfg, gt_fsdp *fs, gt_err *err);
void gt_diloco_destroy(gt_diloco *d);

/* Outer parameters := the devices' current parameters, momentum zero (a
 * start from a checkpoint without outer state: a non-DiLoCo run's). */
void gt_diloco_reset(gt_diloco *d);

/* After `done` steps (the step index after the step): when done is a
 * multiple of diloco_sync_period, or the run's last step when it ends the
 * learning-rate schedule (learning_rate_schedule_steps at most steps), the
 * sync (collective over every rank);
 * then the step's loss and tokens are combined over the replicas (sums of
 * the replicas' token-weighted losses), and sm's diloco fields filled. */
gt_rc gt_diloco_step_end(gt_diloco *d, int64_t done, gt_step_metrics *sm, gt_err *err);

/* Sums over every replica's rows (collective): n values of this replica's,
 * replaced by their totals; `what` names them in errors. An evaluation's
 * loss and tokens, the preference pairs' metric sums. A no-op without
 * DiLoCo. */
gt_rc gt_diloco_sum(gt_diloco *d, double *v, int n, const char *what, gt_err *err);

/* The outer step on n elements of one shard, given the sum over the P
 * replicas of (outer - inner): delta = sum / P, mom = mu * mom + delta,
 * outer -= lr * (delta + mu * mom), all in float32 (optax's sgd with
 * nesterov=True). */
void gt_diloco_outer_update(float *outer, float *mom, const float *delta_sum, int64_t n, int P, float lr, float mu);

/* Bytes a rank with `elems` trainable elements on its devices sends to
 * other replicas per sync. */
int64_t gt_diloco_sync_bytes(int64_t elems, int replicas);

/* The plan's figures for cfg (DiLoCo on): the trainable elements on the
 * busiest device (the first shard of the fsdp axis), the bytes it sends to
 * other replicas per sync, and its outer state's bytes. */
gt_rc gt_diloco_plan(const gt_config *cfg, int64_t *elems, int64_t *bytes_per_sync, int64_t *outer_bytes, gt_err *err);

/* Checkpoint parts: the outer parameters and momentum of device dev's
 * shard, and their restore from full flat buffers of the model layout. */
int gt_diloco_devices(const gt_diloco *d);
void gt_diloco_shard(gt_diloco *d, int dev, const float **outer, const float **mom, int64_t *n);
void gt_diloco_set_from_full(gt_diloco *d, const float *outer_full, const float *mom_full);
/* Shard r of a checkpoint of the outer state (the FSDP shard global device
 * r holds): the outer parameters and the momentum (as both moments), all
 * NULL when another rank holds it. */
void gt_diloco_ckpt_shard(gt_diloco *d, int r, const float **outer, const float **mu, const float **nu);

#endif
