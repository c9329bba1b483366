/* Inside `gemtrain train`: the training state as checkpoints see it
 * (train_state.c), shared by the loop in train.c. */
#ifndef GT_TRAIN_INTERNAL_H
#define GT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "ckpt/ckpt.h"
#include "hf/model_source.h"
#include "data/data.h"
#include "config/config.h"
#include "model/model.h"
#include "train/profiler.h"
#include "train/trainer.h"

typedef struct gt__ckpt_async gt__ckpt_async;

typedef struct gt__tstate {
  gt_model *m;     /* the layout (descriptors, tensor table); no parameters */
  gt_trainer *tr;  /* holds the state, sharded over its devices */
  gt_data *data;
  const gt_config *cfg;
  gt_mem *mem;     /* host memory for assembling full buffers */
  FILE *out;
  gt_model_source *src; /* load_parameters_path, opened (NULL: none) */
  gt_ckpt_writer writer; /* recorded in every shard it saves (zero: none) */
  gt__ckpt_async *ckpt;  /* the run's checkpoint writer (gt__train_ckpt_open; NULL: every save synchronous) */
  /* use_dpo over all parameters: [0] the reference this run holds, which
   * its checkpoints record; [1] the record of the checkpoint it resumed
   * (NULL: no checkpoints, nothing recorded) */
  gt_ckpt_reference *ref;
} gt__tstate;

/* Opens load_parameters_path (when set) into *src and lets it define cfg's
 * model keys (hf/model_source.h); *have is 1 when there is a source. */
gt_rc gt__train_source(gt_config *cfg, gt_model_source *src, int *have, gt_err *err);

/* use_dpo over all parameters: the reference's parameters from their source
 * (train/pref_ref.c), at every start; at a resume, refused unless they are
 * the ones the checkpoint records (s->ref). */
gt_rc gt__train_pref_reference(const gt__tstate *s, gt_err *err);

/* Writes the checkpoint of `step` completed steps under <run_dir>/checkpoints
 * and returns once it is committed (a write in flight is finished first). */
gt_rc gt__train_save(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err);

/* async_checkpointing (docs/checkpoints.md). _open before the first step:
 * async 0 makes every save synchronous (every rank must pass the same).
 * _checkpoint at a step boundary where one is due: with async, waits for
 * the previous write (finishing it), copies this rank's shards into the
 * snapshot (allocated at the first one, kept for the run), agrees on the
 * temporary directory and starts the background writer; else
 * gt__train_save. _poll before each step's report: a write that every
 * rank has finished is agreed and committed (with several ranks the
 * agreement is collective: every rank calls it at the same point, and
 * every rank has the same save in flight), and a finished save's figures
 * go into sm (has_checkpoint, checkpoint_write_seconds,
 * checkpoint_blocked_seconds). _wait finishes the write in flight; _close
 * does too (broken: abandons it, without a collective) and frees. Every
 * one of them is collective over ranks when a save is in flight. */
gt_rc gt__train_ckpt_open(gt__tstate *s, int async, int fits, gt_profiler *prof, gt_err *err);
gt_rc gt__train_checkpoint(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err);
gt_rc gt__train_ckpt_poll(const gt__tstate *s, gt_step_metrics *sm, gt_err *err);
gt_rc gt__train_ckpt_wait(const gt__tstate *s, gt_err *err);
gt_rc gt__train_ckpt_close(gt__tstate *s, int broken, gt_err *err);
/* The snapshot's bytes on this rank: its shards of the parameters and both
 * moments in float32 (with the expert axis, the full state): what the plan
 * counts for async_checkpointing. */
int64_t gt__train_snapshot_bytes(gt_fsdp *fs, const gt_model *m);

/* The DiLoCo parts of a checkpoint (train/diloco_ckpt.c): save_root writes
 * this process's state (outer: DiLoCo's outer state instead) under root. */
typedef gt_rc (*gt__save_root_fn)(const gt__tstate *s, const char *root, int64_t keep, int outer, int64_t step,
                                  gt_err *err);
gt_rc gt_diloco_ckpt_save(const gt__tstate *s, gt__save_root_fn save_root, const char *run_dir, int64_t step,
                          gt_err *err);
/* A resume from the run directory at `step` (the step replica 0 loaded):
 * `own` (its checkpoints) becomes this replica's part of that step when the
 * checkpoint has one. */
gt_rc gt_diloco_ckpt_path(const gt_config *cfg, const char *run_dir, int64_t step, char *own, size_t n,
                          gt_err *err);
/* After the state is set: the outer state from the checkpoint of `step`
 * (-1: not the run's own), else from the state just set; p, mu, nu are
 * full scratch buffers of the layout (p holding the frozen tensors). */
struct gt_diloco;
gt_rc gt_diloco_ckpt_restore(struct gt_diloco *d, const gt_model *m, const char *run_dir, int64_t step, float *p,
                             float *mu, float *nu, FILE *out, gt_err *err);

/* Before the first step: auto-resume from <run_dir>/checkpoints, else
 * load_full_state_path, else load_parameters_path, else nothing. *start is
 * the first step to run; *resumed is 1 when the run directory's own
 * checkpoint was used (its metrics continue). */
gt_rc gt__train_restore(const gt__tstate *s, const char *run_dir, int64_t *start, int *resumed, gt_err *err);

#endif
