/* gemtrain sweep: one JSON file in, one run per point, one table and one
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
 * Precedence of a point's keys, each layer overriding the one before:
 *   configs/base.json -> preset -> base.config file -> base.overrides ->
 *   "steps" -> the point's own keys -> command-line key=value.
 * The command line wins so that one sweep file can be re-aimed (another
 * model, fewer steps) without editing it. */
#ifndef GEMTRAIN_SWEEP_H
#define GEMTRAIN_SWEEP_H

#include <stdio.h>

#include "gemtrain/common.h"
#include "gemtrain/config.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* A key=value list with one entry per key: setting a key again replaces its
 * value in place (the last layer wins, the first position stays). */
typedef struct gt_sweep_kvs {
  int n, cap;
  char **kv;
} gt_sweep_kvs;
gt_rc gt_sweep_kvs_set(gt_sweep_kvs *l, const char *kv, gt_err *err);
/* The value of key, or NULL. */
const char *gt_sweep_kvs_get(const gt_sweep_kvs *l, const char *key);
/* Same keys with the same values, in any order. */
int gt_sweep_kvs_equal(const gt_sweep_kvs *a, const gt_sweep_kvs *b);
void gt_sweep_kvs_free(gt_sweep_kvs *l);

/* The merged overrides of point k (0-based): base overrides, steps, the
 * point's keys, then `cli`, one entry per key. */
gt_rc gt_sweep_point_overrides(const gt_sweep *s, int k, int n_cli, const char *const *cli, gt_sweep_kvs *out,
                               gt_err *err);

/* ---------- results ---------- */

/* Statuses: "ok", "does_not_fit", "config_error", "failed", "diverged",
 * "timeout", "crashed (signal N)"; "" while a point has not finished;
 * "would_run" in a dry run. */
typedef struct gt_sweep_result {
  int point;                /* 1-based, as in point-<k> */
  char config[GT_STR_PATH]; /* base.config as run ("" none) */
  gt_sweep_kvs overrides;   /* the merged overrides */
  gt_sweep_kvs values;      /* each swept key's value as run (resolved config when it loaded) */
  char status[48];
  char reason[GT_ERR_MSG_MAX];
  /* metrics; NaN when unknown */
  double planned_peak_bytes;      /* device peak of the plan */
  double planned_host_bytes;      /* host pool (offloaded activations) of the plan */
  double measured_peak_bytes;     /* max peak_memory_bytes over the steps */
  double median_step_seconds;     /* skipping step 0 when there are more than 2 steps */
  double tokens_per_s_per_device; /* median, same steps */
  double tflops_per_s_per_device; /* median, same steps */
  double final_loss;
  double final_eval_loss;
  double wall_seconds; /* the whole point: process start to exit */
  long long steps_done;
  char log[GT_STR_PATH]; /* relative to the sweep directory */
} gt_sweep_result;

void gt_sweep_result_init(gt_sweep_result *r);
void gt_sweep_result_free(gt_sweep_result *r);
/* One line of JSON (no newline); heap string. */
char *gt_sweep_result_to_json(const gt_sweep_result *r);
gt_rc gt_sweep_result_from_json(gt_sweep_result *r, const char *line, gt_err *err);

/* The metric names results.md and plot.y accept. */
int gt_sweep_num_metrics(void);
const char *gt_sweep_metric_name(int i);
int gt_sweep_is_metric(const char *name);
/* A result's metric by name; NaN if unknown or not measured. */
double gt_sweep_result_metric(const gt_sweep_result *r, const char *name);

/* Fill the measured metrics of r from a run's metrics.jsonl. */
gt_rc gt_sweep_read_run_metrics(gt_sweep_result *r, const char *metrics_path, gt_err *err);
/* Does a training log show a non-finite loss ("non-finite", "loss nan",
 * "loss: inf", ...)? */
int gt_sweep_log_diverged(const char *log);
/* The log's last error line ("gemtrain: " stripped), else its last non-empty
 * line, else "". */
void gt_sweep_log_last_error(const char *log, char *buf, size_t n);

/* results.md (results[i] belongs to point i+1) and plot.svg. */
gt_rc gt_sweep_write_table(const gt_sweep *s, const gt_sweep_result *results, const char *path, gt_err *err);
/* The markdown table alone, into f (used by write_table and the console). */
void gt_sweep_print_table(FILE *f, const gt_sweep *s, const gt_sweep_result *results);
gt_rc gt_sweep_write_plot(const gt_sweep *s, const gt_sweep_result *results, const char *path, gt_err *err);

/* ---------- running ---------- */

typedef struct gt_sweep_run_opts {
  const char *exe; /* the gemtrain binary each point runs with (`exe train ...`) */
  int n_cli;
  const char *const *cli; /* command-line key=value, applied to every point */
  int retry_failed;       /* rerun every recorded point whose status is not "ok" */
  int dry_run;            /* check every point (config, plan) and print the table; run and write nothing */
  FILE *out;              /* a line per point (when progress is NULL) and the summary; NULL: silent */
  FILE *progress;         /* a terminal: point lines and a live status line go here */
} gt_sweep_run_opts;

typedef struct gt_sweep_summary {
  int n_points, n_ran, n_skipped, n_ok;
  char dir[GT_STR_PATH]; /* the sweep directory */
} gt_sweep_summary;

gt_rc gt_sweep_run(const gt_sweep *s, const gt_sweep_run_opts *o, gt_sweep_summary *sum, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
