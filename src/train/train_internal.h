/* Inside `gemtrain train`: the training state as checkpoints see it
 * (train_state.c), shared by the loop in train.c. */
#ifndef GT_TRAIN_INTERNAL_H
#define GT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "gemtrain/config.h"
#include "data/data.h"
#include "mesh/fsdp.h"
#include "model/model.h"
#include "train/optim.h"

typedef struct gt__tstate {
  gt_model *m;     /* layout; its params are the state when fs is NULL */
  gt_optim *opt;   /* one device */
  gt_fsdp *fs;     /* sharded: the devices hold the state */
  gt_data *data;
  const gt_config *cfg;
  gt_mem *mem;
  FILE *out;
} gt__tstate;

/* Writes the checkpoint of `step` completed steps under <run_dir>/checkpoints. */
gt_rc gt__train_save(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err);

/* Before the first step: auto-resume from <run_dir>/checkpoints, else
 * load_full_state_path, else load_parameters_path, else nothing. *start is
 * the first step to run; *resumed is 1 when the run directory's own
 * checkpoint was used (its metrics continue). */
gt_rc gt__train_restore(const gt__tstate *s, const char *run_dir, int64_t *start, int *resumed, gt_err *err);

/* Resume: keeps the lines of metrics.jsonl for steps before `start`, fills
 * the history arrays (length n) from them, and returns the file open for
 * appending. */
FILE *gt__metrics_reopen(const char *path, int64_t start, double *xs, double *ls, double *es, double *tps, int64_t n,
                         gt_err *err);

#endif
