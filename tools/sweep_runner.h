/* gemtrain sweep, the command's half: every point runs as its own `gemtrain
 * train` process (tools/sweep_runner.c), checked in-process first
 * (tools/sweep_point.c) and classified by how its process ended
 * (tools/sweep_outcome.c). The sweep file, the records, the table and the
 * plot are the library's (src/sweep/sweep.h). */
#ifndef GT_SWEEP_RUNNER_H
#define GT_SWEEP_RUNNER_H

#include <signal.h>
#include <stdio.h>

#include "sweep/sweep.h"
#include "train/run_lock.h"

/* ---------- running (sweep_runner.c) ---------- */

typedef struct gt_sweep_run_opts {
  const char *exe; /* the gemtrain binary each point runs with (`exe train ...`) */
  int n_cli;
  const char *const *cli; /* command-line key=value, applied to every point */
  int retry_failed;       /* rerun every recorded point whose status is not "ok" */
  int dry_run;            /* check every point (config, plan) and print the table; run and write nothing */
  FILE *out;              /* a line per point (when progress is NULL) and the summary; NULL: silent */
  FILE *progress;         /* a terminal: point lines and a live status line go here */
  /* Non-NULL: when *stop becomes non-zero (the signal number, set by the
   * caller's handler), no further point starts, each running point gets one
   * SIGTERM (it checkpoints and exits GT_EXIT_STOPPED, left pending so the
   * next run of the sweep resumes it) and the run returns once they end. */
  volatile sig_atomic_t *stop;
} gt_sweep_run_opts;

typedef struct gt_sweep_summary {
  int n_points, n_ran, n_skipped, n_ok;
  int n_pending;  /* not finished: never started, or stopped and checkpointed */
  int n_not_ok;   /* finished with another status than ok (this run or recorded before) */
  int stopped;    /* the signal that stopped the sweep (*o->stop), else 0 */
  char dir[GT_STR_PATH]; /* the sweep directory */
} gt_sweep_summary;

/* Run every point not yet recorded in the sweep directory's results.jsonl,
 * at most s->max_parallel at a time, each killed at s->point_timeout_s;
 * append each record as its point ends and rewrite results.md and plot.svg. */
gt_rc gt_sweep_run(const gt_sweep *s, const gt_sweep_run_opts *o, gt_sweep_summary *sum, gt_err *err);

/* ---------- a point before its process (sweep_point.c) ---------- */

/* The sweep's own defaults, under every layer the user writes:
 * sample_tokens=0 (a closing text sample is not what a sweep measures) and,
 * with max_parallel > 1, threads_per_device = cores / max_parallel (parallel
 * points share the cores instead of each taking all of them); a key the
 * base config file sets is left to it. */
gt_rc gt_sweep_point_defaults(const gt_sweep *s, gt_sweep_kvs *defaults, gt_err *err);
/* The arguments point k runs with: the defaults, its merged overrides ov,
 * then run_name=point-<k+1> and base_output_directory=<dir>/runs. */
gt_rc gt_sweep_point_args(const gt_sweep_kvs *defaults, const gt_sweep_kvs *ov, int k, const char *dir,
                          gt_sweep_kvs *args, gt_err *err);
/* Check a point in-process: its configuration loads (else config_error,
 * without a process) and its plan computes; fills res->values (each swept
 * key as run), res->identity and the planned bytes. With decide_fit (a dry run: no process
 * will say), a plan over the memory limit is does_not_fit here; otherwise
 * the process decides (`gemtrain train` exits GT_EXIT_PLAN). Returns 1 when
 * the point is to run, 0 when res->status and res->reason already say why
 * not. */
int gt_sweep_point_check(const gt_sweep *s, const gt_sweep_kvs *ov, const gt_sweep_kvs *args, int decide_fit,
                         gt_sweep_result *res);

/* The file in a point's directory that records its settings. */
#define GT_SWEEP_POINT_FILE "sweep_point.txt"

/* What GT_SWEEP_POINT_FILE holds for a point: base.config, its identity
 * (gt_sweep_config_identity) and its merged overrides ov, one per line
 * (where the sweep lives is not among them: a moved sweep still owns its
 * points). Heap string; NULL without memory. */
char *gt_sweep_point_identity_text(const char *base_config, const char *identity, const gt_sweep_kvs *ov);

/* Takes point k's run lock (<dir>/runs/point-<k+1>/.lock, the directory
 * made if missing) and makes the directory the point's: one holding a run
 * of other settings (its GT_SWEEP_POINT_FILE is not `want`: another sweep's
 * point k, a run by hand) is moved aside with its log to
 * point-<k+1>.previous-<n> (named in moved, else moved is "") and a new one
 * made, so a point resumes only its own checkpoint and metrics. On success
 * the lock is held (the caller hands it to the point's process); a point
 * directory in use is refused naming its holder's pid. */
gt_rc gt_sweep_point_claim(const char *dir, int k, const char *want, gt_run_lock *lk, char *moved, size_t moved_n,
                           gt_err *err);

/* Puts each point's files at its number before any point runs: point k's
 * run directory runs/point-<k+1> and its log runs/point-<k+1>.log are the
 * run whose GT_SWEEP_POINT_FILE is want[k], found wherever it is under
 * runs/ (another number, after points were added or reordered; moved
 * aside, when the sweep had other settings), or nothing. A run of other
 * settings there is moved aside with its log (point-<k+1>.previous-<n>); a
 * directory holding nothing but its lock and settings is removed. A
 * directory another process holds is left where it is. Each move is said
 * to say (may be NULL), one line without a newline. */
typedef void (*gt_sweep_say_fn)(void *ctx, const char *line);
gt_rc gt_sweep_arrange_runs(const char *dir, int n, const char *const *want, gt_sweep_say_fn say, void *ctx,
                            gt_err *err);

/* ---------- a point after its process (sweep_outcome.c) ---------- */

/* How a point's process ended. */
typedef struct gt_sweep_exit {
  int timed_out; /* the runner killed it at point_timeout_s */
  int signal;    /* ended by this signal; 0: it exited */
  int code;      /* its exit status, when signal == 0 */
  int stopping;  /* the sweep was stopping: it had sent the point SIGTERM */
} gt_sweep_exit;

/* The status an ending names, from `gemtrain train`'s exit status
 * (tools/cli.h): GT_EXIT_OK ok, GT_EXIT_CONFIG config_error, GT_EXIT_PLAN
 * does_not_fit, GT_EXIT_NUMERIC diverged, any other failed; a signal
 * crashed; the runner's kill at the timeout timeout. */
gt_sweep_status gt_sweep_status_of_exit(gt_sweep_exit x);

/* Classify a point whose process ended: the status from x, downgraded when
 * an exit 0 has no result to show (metrics.jsonl missing: failed; a
 * non-finite final loss: diverged); the measured metrics from run_dir's
 * metrics.jsonl (step timings kept only for ok: only a finished run's
 * compare; a pending point keeps no final figures either); the reason for
 * the table, which for a pending point says whether run_dir holds a
 * checkpoint to resume. The log (log_path) is read for the reason's text
 * only. */
void gt_sweep_classify(gt_sweep_result *res, gt_sweep_exit x, const char *run_dir, const char *log_path,
                       double point_timeout_s);

/* The log's last error line ("gemtrain: " stripped), else its last non-empty
 * line, else "": display text for the table, never a decision. */
void gt_sweep_last_error_line(const char *log, char *buf, size_t n);

/* snprintf for one-line messages, where cutting a long path short is
 * acceptable (and GCC's truncation warning is not useful). */
void gt_sweep_msg(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
