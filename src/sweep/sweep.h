/* gemtrain sweep, the library half: one JSON file in, one table and one
 * plot out.
 *
 * A sweep file names a base (a user config file and/or overrides), the points
 * (a grid, a union of grids and/or explicit points), the steps per point and
 * the metrics to report. Every point runs as its own `gemtrain train` process
 * with its own run directory, so a refused plan, a crash or a timeout in one
 * point never stops the others. Results are appended to results.jsonl as
 * points finish; results.md and plot.svg are rewritten from them; a restarted
 * sweep skips the points already recorded.
 *
 * The library parses the file into points (spec.c, kvs.c), reads and writes
 * the records (results.c) and draws the table (table.c) and the plot
 * (plot.c). Starting and watching the processes is the command's job
 * (tools/sweep_runner.c): a library never forks.
 *
 * Precedence of a point's keys, each layer overriding the one before:
 *   configs/base.json -> preset -> base.config file -> base.overrides ->
 *   "steps" -> the point's own keys -> command-line key=value.
 * The command line wins so that one sweep file can be re-aimed (another
 * model, fewer steps) without editing it. */
#ifndef GEMTRAIN_SWEEP_H
#define GEMTRAIN_SWEEP_H

#include <stddef.h>
#include <stdio.h>

#include "base/common.h"
#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------- key=value lists (kvs.c) ---------- */

/* A key=value list with one entry per key: setting a key again replaces its
 * value in place (the last layer wins, the first position stays). */
/* The most points a sweep may define: each is a training run, and the
 * parser keeps the first of equal points by comparing each new point with
 * every earlier one (a fuzzer's 35,000-point grid took 14 s to parse). */
#define GT_SWEEP_MAX_POINTS 4096

typedef struct gt_sweep_kvs {
  int n, cap;
  char **kv;
} gt_sweep_kvs;
gt_rc gt_sweep_kvs_set(gt_sweep_kvs *l, const char *kv, gt_err *err);
/* The value of key, or NULL. */
const char *gt_sweep_kvs_get(const gt_sweep_kvs *l, const char *key);
/* Same keys with the same values, in any order. */
int gt_sweep_kvs_equal(const gt_sweep_kvs *a, const gt_sweep_kvs *b);
/* dst = a copy of src (dst need not be initialised). */
gt_rc gt_sweep_kvs_copy(gt_sweep_kvs *dst, const gt_sweep_kvs *src, gt_err *err);
void gt_sweep_kvs_remove(gt_sweep_kvs *l, const char *key);
void gt_sweep_kvs_free(gt_sweep_kvs *l);
/* The length of the key in "key=value" (the whole text without '='). */
size_t gt_sweep_key_len(const char *kv);
/* The shortest text that reads back as the same double (0.1, not
 * 0.10000000000000001). */
void gt_sweep_num_text(double v, char *buf, size_t n);

/* ---------- the sweep file (spec.c) ---------- */

/* One point: its own keys (from a grid or an explicit point), in the order
 * the file wrote them, as "key=value" strings. */
typedef struct gt_sweep_point {
  int n;
  char **kv;
} gt_sweep_point;

typedef struct gt_sweep {
  char path[GT_STR_PATH];        /* the sweep file (for messages) */
  char name[GT_STR_PATH];        /* its stem: the default output directory's name */
  char base_config[GT_STR_PATH]; /* user config file, resolved against the sweep file's directory; "" none */
  int n_base;
  char **base;     /* base overrides, "key=value" */
  long long steps; /* steps per point; 0: not set (the config's own) */
  int n_points;
  gt_sweep_point *points; /* grids in the file's key order (last key fastest), then points */
  int n_keys;
  char **keys; /* swept keys: every key a point sets, in order of first appearance */
  int n_metrics;
  char **metrics;   /* columns of results.md */
  char sort_by[64]; /* "" = point order */
  int sort_desc;
  char plot_x[128], plot_y[64];       /* "" x = no plot (nothing swept) */
  int max_parallel;                   /* >= 1 */
  double point_timeout_s;             /* > 0 */
  char output_directory[GT_STR_PATH]; /* "" = <base_output_directory>/<name> */
} gt_sweep;

/* Parse a sweep from JSON text; `path` names it in messages and anchors
 * base.config. Refuses malformed files with one line naming the key. */
gt_rc gt_sweep_parse(gt_sweep *s, const char *text, const char *path, gt_err *err);
gt_rc gt_sweep_load(gt_sweep *s, const char *path, gt_err *err);
void gt_sweep_free(gt_sweep *s);

/* Keys the sweep sets for each point itself (run_name; and, for a point,
 * base_output_directory): a layer setting them would make points overwrite
 * each other. `point`: the key comes from a point rather than the base or
 * the command line. */
int gt_sweep_reserved_key(const char *key, size_t klen, int point);

/* The merged overrides of point k (0-based): base overrides, steps, the
 * point's keys, then `cli`, one entry per key. */
gt_rc gt_sweep_point_overrides(const gt_sweep *s, int k, int n_cli, const char *const *cli, gt_sweep_kvs *out,
                               gt_err *err);

/* ---------- results (results.c) ---------- */

/* What became of a point. Each has one name in results.jsonl and results.md
 * (gt_sweep_status_name); crashed is written with its signal, "crashed
 * (signal 9)". */
typedef enum gt_sweep_status {
  GT_SWEEP_PENDING = 0,  /* "": not finished (the table says "pending") */
  GT_SWEEP_OK,           /* "ok" */
  GT_SWEEP_DOES_NOT_FIT, /* "does_not_fit": the memory plan is over the limit */
  GT_SWEEP_CONFIG_ERROR, /* "config_error": the point's configuration is refused */
  GT_SWEEP_FAILED,       /* "failed": any other error */
  GT_SWEEP_DIVERGED,     /* "diverged": a non-finite step */
  GT_SWEEP_TIMEOUT,      /* "timeout": killed at point_timeout_s */
  GT_SWEEP_CRASHED,      /* "crashed": killed by a signal */
  GT_SWEEP_WOULD_RUN,    /* "would_run": a dry run's point that fits */
  GT_SWEEP_NUM_STATUSES
} gt_sweep_status;

/* The status's name as written in results.jsonl and results.md ("" for
 * pending). */
const char *gt_sweep_status_name(gt_sweep_status st);

/* A point's identity: what decides its results, so a record or a run
 * directory is reused only for the same run. A configuration that loads is
 * "cfg-" and the FNV-1a hash of the JSON its run writes (config.json, every
 * key resolved through configs/base.json, the preset, base.config, the
 * overrides and the sweep's own defaults), run_name and
 * base_output_directory blanked: they say where the run is, not what it
 * computes. One refused is "refused-" and the hash of the refusal: the
 * same refusal is the same outcome. */
#define GT_SWEEP_IDENTITY_MAX 32
void gt_sweep_config_identity(const gt_config *cfg, char *buf, size_t n);
void gt_sweep_refusal_identity(const char *msg, char *buf, size_t n);

typedef struct gt_sweep_result {
  int point;                /* 1-based, as in point-<k> */
  char config[GT_STR_PATH]; /* base.config as run ("" none) */
  char identity[GT_SWEEP_IDENTITY_MAX]; /* gt_sweep_config_identity of the point as run ("" unknown) */
  gt_sweep_kvs overrides;   /* the merged overrides */
  gt_sweep_kvs values;      /* each swept key's value as run (resolved config when it loaded) */
  gt_sweep_status status;
  int signal; /* GT_SWEEP_CRASHED: the signal that ended the process */
  char reason[GT_ERR_MSG_MAX];
  /* metrics; NaN when unknown */
  double planned_peak_bytes;      /* device peak of the plan */
  double planned_host_bytes;      /* host pool (offloaded activations) of the plan */
  double measured_peak_bytes;     /* max peak_memory_bytes over the steps */
  double median_step_seconds;     /* skipping step 0 when there are more than 2 steps */
  double tokens_per_s_per_device; /* a step's tokens per device / median_step_seconds */
  double tflops_per_s_per_device; /* a step's TFLOP per device / median_step_seconds */
  double final_loss;
  double final_eval_loss;
  /* use_dpo: the last step's rewards/accuracies and rewards/margins, and
   * the last eval's (eval_rewards/...) */
  double final_rewards_accuracies, final_rewards_margins;
  double final_eval_rewards_accuracies, final_eval_rewards_margins;
  double wall_seconds; /* the whole point: process start to exit */
  long long steps_done;
  char log[GT_STR_PATH]; /* relative to the sweep directory */
  /* eval_tasks: each task's scores at the run's last eval ("tasks" of its
   * metrics.jsonl); metric tasks/<name>/<field>, field one of
   * GT_SWEEP_TASK_FIELDS */
  int n_tasks;
  struct {
    char name[64];
    double v[5]; /* acc, acc_norm, acc_stderr, acc_norm_stderr, n */
  } tasks[8];
} gt_sweep_result;
#define GT_SWEEP_TASK_FIELDS "acc, acc_norm, acc_stderr, acc_norm_stderr, n"

void gt_sweep_result_init(gt_sweep_result *r);
void gt_sweep_result_free(gt_sweep_result *r);
/* dst = a deep copy of src (dst need not be initialised). */
gt_rc gt_sweep_result_copy(gt_sweep_result *dst, const gt_sweep_result *src, gt_err *err);
/* The status as recorded: its name, with the signal for a crash. */
void gt_sweep_result_status_text(const gt_sweep_result *r, char *buf, size_t n);
/* One line of JSON (no newline); heap string. */
char *gt_sweep_result_to_json(const gt_sweep_result *r);
gt_rc gt_sweep_result_from_json(gt_sweep_result *r, const char *line, gt_err *err);
/* A swept key's value as run (else as overridden), or "-". */
const char *gt_sweep_result_value(const gt_sweep_result *r, const char *key);

/* The metric names results.md and plot.y accept: these, and
 * tasks/<task>/<field> for an eval task's scores (eval_tasks). */
int gt_sweep_num_metrics(void);
const char *gt_sweep_metric_name(int i);
int gt_sweep_is_metric(const char *name);
/* A result's metric by name; NaN if unknown or not measured. */
double gt_sweep_result_metric(const gt_sweep_result *r, const char *name);
/* A metric's column heading: bytes are shown in MiB ("planned_peak MiB"). */
void gt_sweep_metric_header(const char *name, char *buf, size_t n);

/* Fill the measured metrics of r from a run's metrics.jsonl. */
gt_rc gt_sweep_read_run_metrics(gt_sweep_result *r, const char *metrics_path, gt_err *err);

/* Append r to results.jsonl (one line, flushed: a sweep killed right after
 * still has it). */
gt_rc gt_sweep_result_append(FILE *jsonl, const gt_sweep_result *r, gt_err *err);

/* Read an earlier run's results.jsonl into res[k] for the points whose
 * overrides (ov[k]), config and identity (identity[k]) match a record; the
 * last record of a point wins. A record is kept (done[k] = 1) when its
 * status is final: any status but pending and would_run, and with
 * retry_failed only ok. res[k].point keeps the record's number, which is
 * not k + 1 when points were added or removed before it. A missing file is
 * an empty one. A line that does not parse (an interrupted write) is
 * skipped and reported to on_skip (may be NULL): that point runs again. */
typedef void (*gt_sweep_skip_fn)(void *ctx, int lineno, const char *why);
gt_rc gt_sweep_results_restore(const gt_sweep *s, const gt_sweep_kvs *ov, const char *const *identity,
                               int retry_failed, const char *path, gt_sweep_result *res, int *done,
                               gt_sweep_skip_fn on_skip, void *ctx, gt_err *err);

/* ---------- results.md (table.c) and plot.svg (plot.c) ---------- */

/* results.md (results[i] belongs to point i+1). */
gt_rc gt_sweep_write_table(const gt_sweep *s, const gt_sweep_result *results, const char *path, gt_err *err);
/* The markdown table alone, into f (used by write_table and the console). */
void gt_sweep_print_table(FILE *f, const gt_sweep *s, const gt_sweep_result *results);
gt_rc gt_sweep_write_plot(const gt_sweep *s, const gt_sweep_result *results, const char *path, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
