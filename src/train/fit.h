/* Making a plan fit: the search over the settings that change a training
 * step's memory but not its maths (docs/memory-plan.md, "Making it fit").
 *
 * The knobs are the remat policy and scope, the micro-batch (a smaller
 * per_device_batch_size with gradient_accumulation_steps raised to keep the
 * global batch), num_vocab_tiling and mu_dtype (float32 to bfloat16 only).
 * Every combination of their values is a setting; each is ranked by an
 * estimate of its step time, and the search returns the fastest that the
 * memory plan (train/plan.h) says fits the limit.
 *
 * "Fastest" is MaxText's estimate: the step's FLOPs (gt_flops, the 3 x
 * forward count) plus the forward ops remat makes the backward run again
 * (their matmuls and attention, per layer, exactly the ops the executor
 * re-runs for that policy and scope). Settings with the same FLOPs are ranked
 * by the knobs in table order: a float32 first moment (a bf16 one is rounded
 * every step: the least faithful of the knobs), then fewer micro-batches
 * (each is a pass over every weight, its gradient and, sharded, its
 * gathers), then fewer vocab tiles, then the remat list's order (the user's
 * own first, then none, then MaxText's policies from the most kept).
 *
 * A knob is a row in fit.c's table (its values, fastest first, and whether
 * later values never need more memory); a memory category that no knob
 * changes is a row in its table of fixed state, which names what alone
 * exceeds a limit. */
#ifndef GEMTRAIN_FIT_H
#define GEMTRAIN_FIT_H

#include <stdint.h>

#include "base/common.h"
#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_FIT_MAX_KNOBS 8
#define GT_FIT_MAX_SET 12

/* One key a setting sets. */
typedef struct gt_fit_kv {
  char key[48];
  char value[64];
} gt_fit_kv;

/* One setting of the knobs: its value index on each knob and its estimate. */
typedef struct gt_fit_setting {
  int idx[GT_FIT_MAX_KNOBS];
  double tflops;           /* estimated FLOPs of a step, recomputation included (TFLOPs per device) */
  double recompute_tflops; /* of which the forward ops remat runs again */
} gt_fit_setting;

/* The ranking: < 0 when a is faster than b by the estimate, 0 when the
 * same setting. */
int gt_fit_cmp(const gt_fit_setting *a, const gt_fit_setting *b);

/* The FLOPs the backward spends re-running forward ops under cfg's remat
 * policy and scope, per step per device (TFLOPs); cfg validated. */
double gt_fit_recompute_tflops(const gt_config *cfg);

/* Every setting of the knobs for base (validated), ranked fastest first:
 * *out (the caller frees) holds the *n settings that validate. */
gt_rc gt_fit_settings(const gt_config *base, gt_fit_setting **out, int *n, gt_err *err);
/* The config of setting s: base with its knobs' keys set, validated. */
gt_rc gt_fit_setting_config(const gt_config *base, const gt_fit_setting *s, gt_config *cfg, gt_err *err);

typedef struct gt_fit {
  int found;            /* 1: cfg is the fastest setting searched that fits */
  gt_config cfg;        /* found: the setting */
  gt_fit_setting best;  /* found: its rank and estimate */
  int n_set;            /* found: the keys whose value differs from base, in knob order */
  gt_fit_kv set[GT_FIT_MAX_SET];
  int64_t need_bytes;   /* found: its plan's need (gt_plan_total_bytes); else the least seen */
  int64_t peak_bytes;   /* found: its plan's device peak */
  double base_tflops;   /* base's estimate */
  int n_settings;       /* settings ranked */
  int n_planned;        /* of which planned (the rest were ruled out by a plan that needs less) */
  /* nothing fits: the least memory planned, with its settings, and what of
   * it no knob changes (parameters, gradients, optimizer state, ...) */
  int n_least;
  gt_fit_kv least[GT_FIT_MAX_SET];
  int64_t fixed_bytes;
  char why[600];
} gt_fit;

/* Searches base's settings (base validated, its model source applied) for
 * the fastest whose plan needs at most limit bytes; fills *f. A setting
 * whose plan fails is skipped; only a failure to allocate is returned. */
gt_rc gt_fit_search(const gt_config *base, int64_t limit, gt_fit *f, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
