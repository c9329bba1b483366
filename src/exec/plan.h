/* gemtrain plan: the bytes of every buffer of a training step, before
 * anything is allocated. It watches the executor's allocation sequence
 * (forward, head, per-boundary recompute and backward) on a virtual tracker,
 * so the planned peak of each category is what the tracked allocator will
 * measure; tests hold the two together. gt_plan_compute (train/plan.h)
 * makes one: the trainer runs a step under the watch below. */
#ifndef GEMTRAIN_PLAN_H
#define GEMTRAIN_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "model/flops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_PLAN_TOP 8

typedef struct gt_plan_buf {
  char name[192];
  gt_mem_cat cat;
  int64_t bytes;
} gt_plan_buf;

typedef struct gt_plan {
  int64_t n_params;
  int64_t n_active_params;         /* what one token uses (MoE: top-k experts); = n_params when dense */
  int64_t n_trainable;             /* of n_params, the trainable group's (model/store.h) */
  int n_frozen_tensors;            /* tensors of the frozen group: parameters only */
  char frozen_qtype[16];           /* the frozen base's storage (lora_weight_qtype; "float32" when not quantized) */
  char frozen_embed_qtype[16];     /* its lookup tables' (lora_embedding_qtype; "float32" when none is frozen) */
  char frozen_storage[40];         /* both for people (model/qstore.h gt_qstore_describe): "nf4, embedding bfloat16" */
  int64_t n_layers;
  int64_t cat_peak[GT_MEM_NCAT];   /* peak of each category on its own */
  int64_t at_peak[GT_MEM_NCAT];    /* each category's bytes at the moment of the device peak */
  int64_t peak_total;              /* device peak (all categories but the host pool); with
                                      num_devices > 1, the busiest device's */
  int64_t host_peak;               /* host pool peak (offloaded activations) */
  /* async_checkpointing (with enable_checkpointing): this rank's checkpoint
   * snapshot, its shards of the parameters and both moments in float32,
   * held beside the steps while a write runs (host memory, apart from the
   * device peak and from gt_plan_total_bytes: a run whose need and snapshot
   * together exceed the limit writes synchronously instead); 0 otherwise */
  int64_t ckpt_snapshot_bytes;
  char peak_where[96];             /* the phase of the step where the device peak happens */
  int n_top;
  gt_plan_buf top[GT_PLAN_TOP];    /* largest buffers live at the device peak */
  int64_t *saved_per_layer;        /* [n_layers] bytes a layer keeps after its forward (device) */
  int64_t saved_total;
  /* the activation peak outside the output head (forward and backward over
   * the layers): activations, carries and temporaries only, without the
   * parameters, gradients, optimizer state and gathered weights */
  int64_t layer_act_peak;
  int64_t layer_act_saved;          /* of which saved activations (carries, kept tensors) */
  char layer_act_where[96];
  gt_flops flops;
  /* sharded runs (num_devices > 1), per device */
  int n_devices;
  int64_t shard_state_bytes;  /* this device's shards of params, grads and both moments */
  int64_t gathered_peak;      /* all-gathered weights live at once */
  int64_t comm_bytes_per_step; /* sent per device per step (ring model) */
  /* MPI ranks (the dcn_* axes): the plan is one rank's (every rank holds
   * num_devices devices alike); of the bytes above, those sent to another
   * rank (the busiest device's) */
  int n_ranks;
  int64_t comm_bytes_dcn_per_step;
} gt_plan;

/* The watch over one allocation-only step of cfg (validated), for the
 * driver, train/plan.c: _open fills p's model figures and makes one probe
 * per device (_probes, num_devices of them) for the step's trackers; after
 * the step, while the trackers live, _device reads device d's; the trackers
 * may then go (their frees still reach the probes); _close takes the mesh's
 * map of the G global devices to ranks, completes p and frees the watch
 * (and p, when rc or its own work fails), returning rc or its own error. */
typedef struct gt_plan_watch gt_plan_watch;
gt_rc gt_plan_watch_open(gt_plan_watch **w, gt_plan *p, const gt_config *cfg, gt_err *err);
gt_mem_probe *gt_plan_watch_probes(gt_plan_watch *w);
gt_rc gt_plan_watch_device(gt_plan_watch *w, int d, const gt_mem *mem, gt_err *err);
gt_rc gt_plan_watch_close(gt_plan_watch *w, gt_rc rc, const int *rank_of, int G, gt_err *err);

void gt_plan_free(gt_plan *p);
void gt_plan_print(FILE *f, const gt_plan *p, const gt_config *cfg);
char *gt_plan_to_json(const gt_plan *p, const gt_config *cfg);
/* What the run needs of this machine: every device's peak and host pool. */
int64_t gt_plan_total_bytes(const gt_plan *p);
/* memory_limit_bytes, or the machine's available RAM when it is 0. */
int64_t gt_plan_memory_limit(const gt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
