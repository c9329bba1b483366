/* Sharded training over a gt_mesh (FSDP, as MaxText runs a layer scan over
 * devices): every device holds a shard of every unit's parameters, gradients
 * and AdamW moments (gt_shard_begin/len of each unit), all-gathers a unit just
 * before using it (the next one too with `prefetch`), and reduce-scatters the
 * unit's gradient as soon as its backward is done. Each device runs the
 * ordinary executor on its slice of the global batch through a gt_param_view.
 * The global batch is the same whatever the device count; losses and the
 * gradient norm are summed across devices, so only reduction order differs.
 *
 * The parameter store's groups (model/store.h): each unit's block is its
 * trainable part then its frozen part; the trainable part's shard has
 * parameters, gradients and both moments, the frozen part's parameters only.
 * A gather delivers the whole unit; the gradient block, its reduce-scatter
 * and everything after cover the trainable part.
 *
 * dtype=bfloat16: the master shards stay float32 (AdamW updates them,
 * checkpoints keep them), and what acquire hands the executor is the unit
 * rounded to bf16 (gt_bf16_round), the same bits on any device count: one
 * device rounds a copy of the unit (a GT_MEM_GATHERED buffer, the shard
 * itself is never rounded); sharded, each device packs its own shard to
 * bf16, the devices all-gather 2-byte elements (half the bytes of a float32
 * gather, prefetch included) into the upper half of the float32 gathered
 * buffer, which is then expanded in place. Gradients, their reduce-scatter
 * and the optimizer stay float32. mu_dtype=bfloat16: AdamW's first moment is
 * stored as bf16 in the shards (2 bytes per parameter in GT_MEM_OPTIM; see
 * gt_optim_update_mu_bf16).
 *
 * Expert parallelism (ici_expert_parallelism = P, mesh data x fsdp x
 * expert): a device holds the experts [r*E/P, (r+1)*E/P) of every MoE layer
 * (r its expert index) and the whole of every other tensor; each unit's
 * block of the device (its experts only) is FSDP-sharded over the fsdp
 * group of the devices with its expert index. Gradients: reduce-scatter
 * over fsdp, all-reduce over data, and for everything but the own experts
 * also over the expert group (its devices hold different tokens). The
 * routed layers exchange tokens over the expert group (see layer.h). */
#ifndef GEMTRAIN_FSDP_H
#define GEMTRAIN_FSDP_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "exec/exec.h"
#include "mesh/mesh.h"
#include "model/head.h"
#include "model/model.h"

struct gt_trace_lane;

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_fsdp gt_fsdp;

/* A device's trainable shard as the optimizer (train/) sees it in the
 * reduce and update phases. The shard's part of the squared gradient norm
 * is, over parts p, sumsq(grads[off, off + n_rep)) / div_rep +
 * sumsq(grads[off + n_rep, off + n)) / div_own: each element counted once
 * over the devices that hold a copy of it (data replicas; with expert
 * parallelism every expert rank holds all but its own experts). */
typedef struct gt_fsdp_norm_part {
  int64_t off, n, n_rep;
  double div_rep, div_own;
} gt_fsdp_norm_part;

typedef struct gt_fsdp_shard {
  int dev;             /* this process's device index */
  float *params, *grads, *mu;
  uint16_t *mu16;      /* mu_dtype=bfloat16: the first moment in bf16 (mu is then NULL) */
  float *nu;
  int64_t n;           /* elements of each (the trainable group's shard) */
  const gt_fsdp_norm_part *parts;
  int n_parts;
  double sumsq;        /* the reduce phase's callback sets it */
  gt_prof *prof;       /* the device model's time profile (may be NULL) */
  struct gt_trace_lane *lane; /* the device's trace lane (NULL: not traced) */
} gt_fsdp_shard;

/* Runs on every device's thread, all at once. */
typedef void (*gt_fsdp_shard_fn)(void *ctx, gt_fsdp_shard *s);

/* The step's sums after the all-reduce, the same on every device. */
typedef struct gt_fsdp_sums {
  double xent_sum;       /* LM loss (the z-loss included), summed over the global batch's tokens */
  int64_t total_weights; /* tokens in the loss */
  double sumsq;          /* squared global gradient norm */
  double moe_lb;         /* MoE: mean over MoE layers (and token groups) of the load-balance loss */
  double z_sum;          /* of xent_sum, the z-loss terms (z_loss_multiplier > 0) */
  double pref[GT_PREF_NSUMS]; /* preference tuning: the pairs' metric sums (model/batch.h) */
} gt_fsdp_sums;

/* Communication of the last step, per device (the largest device's). */
typedef struct gt_fsdp_comm {
  int64_t bytes;
  double seconds;
  int64_t bytes_dcn;     /* of bytes, sent to other ranks */
} gt_fsdp_comm;

/* Builds the mesh and every device's shards, initialised exactly as the
 * single-device model would be (same seed, same values). Over MPI ranks
 * (the dcn_* keys, src/dist/dist.h) this process builds its own devices of
 * the global mesh; every call below except the accessors is then collective
 * (every rank makes it, in the same order), and the full-state exports
 * return the whole state on every rank. One device is a
 * 1-device mesh whose shards are whole units: it computes on them in place.
 * probes != NULL builds an allocation-only mesh (gemtrain plan): device d's
 * memory is tracked but never reserved, watched by probes[d], and steps
 * allocate and free every buffer in the real order without computing,
 * copying or exchanging anything. */
gt_rc gt_fsdp_create(gt_fsdp **out, const gt_config *cfg, const gt_mem_probe *probes, gt_err *err);
void gt_fsdp_destroy(gt_fsdp *f);
/* The phases of one optimizer step over n_micro global micro-batches, in
 * this order (train/trainer.c's step; the mesh moves bytes, train/ owns the
 * norm, clipping, the update and the schedule):
 *   gt_fsdp_zero              checks the batches, counts the global batch's
 *                             tokens, zeroes the gradient shards and loss sums
 *   gt_fsdp_forward_backward  micro-batch i on every device; each unit's
 *                             gradient reduce-scatters into the shards as its
 *                             backward ends
 *   gt_fsdp_reduce            averages over micro-batches, calls partial_norm
 *                             on every device's shard (it sets s->sumsq), and
 *                             all-reduces the loss sums and norms
 *   gt_fsdp_update            calls update on every device's shard (NULL: none,
 *                             a skipped step) and ends the step
 * An allocation-only mesh allocates as the real phases do and calls
 * neither callback. */
gt_rc gt_fsdp_zero(gt_fsdp *f, const gt_batch *micro, int n_micro, gt_err *err);
gt_rc gt_fsdp_forward_backward(gt_fsdp *f, int i, gt_err *err);
gt_rc gt_fsdp_reduce(gt_fsdp *f, gt_fsdp_shard_fn partial_norm, void *ctx, gt_fsdp_sums *out, gt_err *err);
gt_rc gt_fsdp_update(gt_fsdp *f, gt_fsdp_shard_fn update, void *ctx, gt_fsdp_comm *comm, gt_err *err);
/* A sum over every device's trainable shard, after a step (the trainer's
 * parameter norm): partial runs on each device's shard and sets s->sumsq
 * (weighting each element by s->parts as the gradient norm does, so each
 * counts once over its copies), and the values are all-reduced over the
 * devices and ranks as the gradient norm's are. Collective; *sum is 0 on
 * an allocation-only mesh. */
gt_rc gt_fsdp_shard_sum(gt_fsdp *f, gt_fsdp_shard_fn partial, void *ctx, double *sum, gt_err *err);
const gt_config *gt_fsdp_config(const gt_fsdp *f);
/* Loss of global batches without training. */
gt_rc gt_fsdp_eval(gt_fsdp *f, const gt_batch *batches, int n, gt_loss_stats *st, gt_err *err);
/* The same, and each token's loss (cross-entropy of its target; 0 where
 * the target is masked) into token_loss[n * B * T], batch by batch, row by
 * row as the batches lay them out: every rank gets every row's. The batches
 * share one shape. */
gt_rc gt_fsdp_eval_tokens(gt_fsdp *f, const gt_batch *batches, int n, float *token_loss, gt_loss_stats *st,
                          gt_err *err);
/* The full parameters (gathered) into a flat buffer of the model layout. */
gt_rc gt_fsdp_full_params(gt_fsdp *f, float *out, gt_err *err);
int64_t gt_fsdp_num_params(const gt_fsdp *f);
/* Of them, the trainable group's (model/store.h): the elements that have
 * gradients and moments; the rest is frozen (parameters only). */
int64_t gt_fsdp_num_trainable(const gt_fsdp *f);
/* Checksum (gt_model_frozen_sum) of the frozen parameters, taken when the
 * state was set (initialised or restored); they never change after. */
uint64_t gt_fsdp_frozen_sum(const gt_fsdp *f);
/* The full parameters and AdamW moments (each n_params, the model layout;
 * a frozen tensor's moments are zeros). */
gt_rc gt_fsdp_full_state(gt_fsdp *f, float *params, float *mu, float *nu, gt_err *err);
/* The expert axis (ici_expert_parallelism): with more than 1, a device's
 * shard holds its own experts only, so checkpoints go through full buffers. */
int gt_fsdp_expert_parallelism(const gt_fsdp *f);
int gt_fsdp_devices(const gt_fsdp *f); /* this process's */
gt_mesh *gt_fsdp_mesh(gt_fsdp *f);
/* Bytes the last step sent per device (the largest device's). */
int64_t gt_fsdp_last_comm_bytes(const gt_fsdp *f);
/* Device d's tracked memory (per-device peaks, e.g. gathered weights). */
gt_mem *gt_fsdp_device_mem(gt_fsdp *f, int d);
/* Device d's model: its layer descriptors (and an optional time profile). */
gt_model *gt_fsdp_device_model(gt_fsdp *f, int d);

/* Checkpoints (gemtrain/ckpt.h): the FSDP axis size, shard r's own arrays
 * (parameters and AdamW moments of every unit, unit by unit; all NULL when
 * another rank holds shard r), the optimizer step, and a restore from full
 * flat buffers of the model layout (mu, nu NULL: parameters only, moments
 * zeroed) — every rank restores from the same full buffers.
 *
 * The moments always cross this interface in float32, whatever mu_dtype:
 * with mu_dtype=bfloat16 gt_fsdp_shard_state expands the shard's bf16 mu
 * into a float32 copy (exact; allocated from `staging`, the caller's host
 * tracker, as GT_MEM_OTHER: a checkpoint's staging, not device memory;
 * GT_ERR_NOMEM when it cannot) that stays valid until
 * gt_fsdp_shard_state_done, which the caller makes once the arrays are
 * written (staging is unused with float32 moments); the full-state exports expand
 * the same way, and gt_fsdp_set_state rounds mu to bf16 (round to nearest
 * even: exact for moments saved by a mu_dtype=bfloat16 run, so a resume is
 * bit for bit). */
int gt_fsdp_num_shards(const gt_fsdp *f);
gt_rc gt_fsdp_shard_state(gt_fsdp *f, int r, const float **params, const float **mu, const float **nu, gt_mem *staging,
                          gt_err *err);
void gt_fsdp_shard_state_done(gt_fsdp *f);
int64_t gt_fsdp_opt_step(const gt_fsdp *f);
void gt_fsdp_set_opt_step(gt_fsdp *f, int64_t t); /* the trainer, after an applied update */
/* The training step the next micro-batches belong to (the trainer's step
 * index): it seeds the adapters' dropout masks (model/lora.h). */
void gt_fsdp_set_step(gt_fsdp *f, int64_t step);
gt_rc gt_fsdp_set_state(gt_fsdp *f, float *params, const float *mu, const float *nu, int64_t opt_step, gt_err *err);
/* The profiler timeline (base/trace.h; NULL detaches): device d's steps,
 * layer phases, timed ops and memory counters go on the trace's device lane
 * d, the collectives on the lane of the thread that runs them (the mesh's).
 * Installs a probe on every device's memory tracker, so not on an
 * allocation-only mesh (GT_ERR_ARG). Between steps. */
struct gt_trace;
gt_rc gt_fsdp_set_trace(gt_fsdp *f, struct gt_trace *tr, gt_err *err);
/* Device dev's trainable shard of the parameters (n elements; the same
 * range on every replica of a DiLoCo run, train/diloco.h), and the same
 * range copied out of a full flat buffer of the model layout. */
float *gt_fsdp_trainable_shard(gt_fsdp *f, int dev, int64_t *n);
void gt_fsdp_trainable_from_full(gt_fsdp *f, int dev, const float *full, float *out);
/* Preference tuning (train/pref.h): every micro-batch's and eval batch's
 * rows are chosen/rejected pairs (model/head.h's preference mode), fn gives
 * the pairs' losses and derivatives (ctx its argument; NULL: the LM loss),
 * and the step's token count is the global batch's pairs. A reference
 * (GT_FSDP_REF_BASE: the frozen base, the adapters off; GT_FSDP_REF_COPY: a
 * frozen copy of the trainable parameters, sharded like them, taken from
 * the current state) makes gt_fsdp_zero and gt_fsdp_eval run a forward-only
 * pass over the batches first and keep each token's reference loss, room
 * for max_batches batches per device. */
enum { GT_FSDP_REF_NONE = 0, GT_FSDP_REF_BASE = 1, GT_FSDP_REF_COPY = 2 };
gt_rc gt_fsdp_set_pref(gt_fsdp *f, gt_pref_pairs_fn fn, const void *ctx, int reference, int64_t max_batches,
                       gt_err *err);
/* GT_FSDP_REF_COPY: the reference's trainable part from a full flat buffer
 * of the model layout (NULL: a copy of the current parameters). */
gt_rc gt_fsdp_set_reference(gt_fsdp *f, const float *full, gt_err *err);
/* Test seam: dtype=bfloat16 on one device rounds a layer's projections into
 * the compute copy too, instead of the products reading them from the
 * master shard (the bits must not differ). */
void gt_fsdp_full_bf16_copy(gt_fsdp *f, int on);
/* Test seam: the next step's gradient gets a NaN (device 0, first element). */
void gt_fsdp_poison_next_step(gt_fsdp *f);

#ifdef __cplusplus
}
#endif
#endif
