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
#include "train/trainer.h"

typedef struct gt__tstate {
  gt_model *m;     /* the layout (descriptors, tensor table); no parameters */
  gt_trainer *tr;  /* holds the state, sharded over its devices */
  gt_data *data;
  const gt_config *cfg;
  gt_mem *mem;     /* host memory for assembling full buffers */
  FILE *out;
  gt_model_source *src; /* load_parameters_path, opened (NULL: none) */
  gt_ckpt_writer writer; /* recorded in every shard it saves (zero: none) */
} gt__tstate;

/* Opens load_parameters_path (when set) into *src and lets it define cfg's
 * model keys (hf/model_source.h); *have is 1 when there is a source. */
gt_rc gt__train_source(gt_config *cfg, gt_model_source *src, int *have, gt_err *err);

/* Writes the checkpoint of `step` completed steps under <run_dir>/checkpoints. */
gt_rc gt__train_save(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err);

/* The DiLoCo parts of a checkpoint (train/diloco_ckpt.c): save_root writes
 * this process's state (outer: DiLoCo's outer state instead) under root. */
typedef gt_rc (*gt__save_root_fn)(const gt__tstate *s, const char *root, int64_t keep, int outer, int64_t step,
                                  gt_err *err);
gt_rc gt_diloco_ckpt_save(const gt__tstate *s, gt__save_root_fn save_root, const char *run_dir, int64_t step,
                          gt_err *err);
/* A resume from the run directory: `own` (its checkpoints) becomes this
 * replica's part when the checkpoint has one. */
gt_rc gt_diloco_ckpt_path(const gt_config *cfg, const char *run_dir, char *own, size_t n, gt_err *err);
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
