/* The plan of a training step (exec/plan.h) as the real trainer makes it:
 * one step, allocation only, watched on every device's tracker. */
#ifndef GEMTRAIN_TRAIN_PLAN_H
#define GEMTRAIN_TRAIN_PLAN_H

#include "base/common.h"
#include "config/config.h"
#include "exec/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Plans one training step of cfg (validated). */
gt_rc gt_plan_compute(gt_plan *p, const gt_config *cfg, gt_err *err);

/* What `gemtrain train` does to its config before it plans: with
 * load_parameters_path set, the source there (an HF directory, a checkpoint
 * or a parameter file, hf/model_source.h) defines the model keys, a
 * conflicting key=value refused as train refuses it; then cfg is validated. */
gt_rc gt_plan_apply_source(gt_config *cfg, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
