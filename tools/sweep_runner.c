/* gemtrain sweep: the process runner. Each point not yet recorded runs as
 * `gemtrain train` in its own process, at most max_parallel at a time, each
 * killed at point_timeout_s; a live status line (on a terminal) counts the
 * points and estimates the time left. The library does the rest: the points
 * (src/sweep/spec.c), the records (results.c), the table and the plot. */
#define _POSIX_C_SOURCE 200809L
#include "sweep_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/prof.h"

typedef struct gt__slot {
  pid_t pid;
  int k;
  double t0;
  int killed;
} gt__slot;

typedef struct gt__runner {
  const gt_sweep *s;
  const gt_sweep_run_opts *o;
  char dir[GT_STR_PATH];
  gt_sweep_kvs *ov;     /* merged overrides per point */
  gt_sweep_result *res; /* per point */
  int *done;            /* per point: 1 recorded (this run or before) */
  int *to_run;          /* per point: its in-process check passed */
  char **want;          /* per point: its GT_SWEEP_POINT_FILE (gt_sweep_point_identity_text) */
  FILE *jsonl;
  gt_sweep_kvs defaults; /* the sweep's own defaults, below everything else */
  int n_finished, n_ran_finished, n_to_run;
  double ran_seconds;
  double t_start;
} gt__runner;

static void gt__fmt_eta(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0) {
    snprintf(buf, n, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

/* the mean time of the points run so far, spread over the parallel slots */
static double gt__eta(const gt__runner *r) {
  int remaining = r->n_to_run - r->n_finished;
  if (remaining <= 0) return 0;
  if (!r->n_ran_finished) return NAN;
  int par = r->s->max_parallel < remaining ? r->s->max_parallel : remaining;
  return r->ran_seconds / r->n_ran_finished * remaining / par;
}

static void gt__report(gt__runner *r, int k) {
  const gt_sweep_run_opts *o = r->o;
  FILE *f = o->progress ? o->progress : o->out;
  if (!f) return;
  const gt_sweep_result *res = &r->res[k];
  char eta[32], status[64];
  gt__fmt_eta(gt__eta(r), eta, sizeof eta);
  gt_sweep_result_status_text(res, status, sizeof status);
  if (o->progress) fputs("\r\033[K", f);
  fprintf(f, "point %d/%d:", k + 1, r->s->n_points);
  for (int i = 0; i < r->s->points[k].n; i++) fprintf(f, " %s", r->s->points[k].kv[i]);
  /* a pending point's reason says whether it resumes: "<what>; <next>" */
  const char *next = res->status == GT_SWEEP_PENDING ? strstr(res->reason, "; ") : NULL;
  if (next)
    fprintf(f, " -> %.*s (%.1f s)%s\n", (int)(next - res->reason), res->reason,
            isnan(res->wall_seconds) ? 0.0 : res->wall_seconds, next);
  else
    fprintf(f, " -> %s (%.1f s), ETA %s\n", status, isnan(res->wall_seconds) ? 0.0 : res->wall_seconds, eta);
  fflush(f);
}

static void gt__status_line(gt__runner *r, const gt__slot *slots, int n_run) {
  FILE *f = r->o->progress;
  if (!f || !n_run) return;
  char eta[32];
  gt__fmt_eta(gt__eta(r), eta, sizeof eta);
  fprintf(f, "\r\033[K[%d/%d done] running", r->n_finished, r->n_to_run);
  double now = gt_prof_now();
  for (int i = 0; i < n_run; i++) fprintf(f, " point %d (%.0f s)", slots[i].k + 1, now - slots[i].t0);
  fprintf(f, ", ETA %s", eta);
  fflush(f);
}

/* Record a finished point: results.jsonl (appended), the console, and the
 * table and plot (rewritten so an interrupted sweep still has them). */
static void gt__finish(gt__runner *r, int k, int ran) {
  gt_sweep_result *res = &r->res[k];
  /* a stopped point (checkpointed) is not a result: unrecorded, it resumes
   * on the sweep's next run */
  int stopped = res->status == GT_SWEEP_PENDING;
  r->done[k] = !stopped;
  r->n_finished++;
  if (r->o->dry_run) return; /* the table says it all */
  gt_err e;
  if (!stopped && r->jsonl && gt_sweep_result_append(r->jsonl, res, &e) && r->o->out)
    fprintf(r->o->out, "sweep: %s\n", e.msg);
  if (ran) {
    r->n_ran_finished++;
    r->ran_seconds += res->wall_seconds;
  }
  gt__report(r, k);
  char path[GT_STR_PATH + 32];
  snprintf(path, sizeof path, "%s/results.md", r->dir);
  gt_sweep_write_table(r->s, r->res, path, &e);
  snprintf(path, sizeof path, "%s/plot.svg", r->dir);
  gt_sweep_write_plot(r->s, r->res, path, &e);
}

/* The environment a point's process runs with: the sweep's, and the number
 * of the run lock's descriptor it inherits (train/run_lock.h). Built before
 * fork: the child only execs. */
static char **gt__child_env(int lock_fd) {
  extern char **environ;
  static char var[64];
  size_t n = 0, plen = strlen(GT_RUN_LOCK_FD_ENV);
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof(char *));
  if (!env) return NULL;
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], GT_RUN_LOCK_FD_ENV, plen) || environ[i][plen] != '=') env[m++] = environ[i];
  snprintf(var, sizeof var, "%s=%d", GT_RUN_LOCK_FD_ENV, lock_fd);
  env[m++] = var;
  env[m] = NULL;
  return env;
}

/* Start point k's process (checked in-process before anything started).
 * Returns the pid, or 0 when the point could not start (res says why). */
static pid_t gt__start(gt__runner *r, int k) {
  gt_sweep_result *res = &r->res[k];
  const gt_sweep *s = r->s;
  gt_err e;
  gt_err_clear(&e);
  gt_sweep_kvs args;
  if (gt_sweep_point_args(&r->defaults, &r->ov[k], k, r->dir, &args, &e)) {
    res->status = GT_SWEEP_CONFIG_ERROR;
    snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    return 0;
  }

  /* the point's files (its directory and its log) are touched only under
   * its run lock, which then passes to its process */
  gt_run_lock lk;
  char moved[GT_STR_PATH + 96];
  if (gt_sweep_point_claim(r->dir, k, r->want[k], &lk, moved, sizeof moved, &e)) {
    res->status = GT_SWEEP_FAILED;
    snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    gt_sweep_kvs_free(&args);
    return 0;
  }
  FILE *say = r->o->progress ? r->o->progress : r->o->out;
  if (moved[0] && say) {
    if (r->o->progress) fputs("\r\033[K", say);
    fprintf(say, "sweep: runs/point-%d held a run of other settings; moved it to %s\n", k + 1, moved);
  }
  /* appended: the log is this point's own (gt_sweep_point_claim), and a
   * resumed point keeps the console of its earlier attempt */
  snprintf(res->log, sizeof res->log, "runs/point-%d.log", k + 1);
  char log[2 * GT_STR_PATH + 64];
  snprintf(log, sizeof log, "%s/%s", r->dir, res->log);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  char **argv = calloc((size_t)args.n + 4, sizeof(char *));
  char **envp = gt__child_env(lk.fd);
  if (fd < 0 || !argv || !envp) {
    res->status = GT_SWEEP_FAILED;
    gt_sweep_msg(res->reason, sizeof res->reason, "cannot write the log '%s': %s", log,
                 fd < 0 ? strerror(errno) : "no memory");
    if (fd >= 0) close(fd);
    free(argv);
    free(envp);
    gt_sweep_kvs_free(&args);
    gt_run_lock_release(&lk);
    return 0;
  }
  int a = 0;
  argv[a++] = (char *)r->o->exe;
  argv[a++] = (char *)"train";
  if (s->base_config[0]) argv[a++] = (char *)s->base_config;
  for (int i = 0; i < args.n; i++) argv[a++] = args.kv[i];
  argv[a] = NULL;
  if (r->o->out) fflush(r->o->out);
  if (r->o->progress) fflush(r->o->progress);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* the child dies with the sweep (killed, or its terminal gone) rather
     * than train on unobserved (Linux) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    /* its own process group: a Ctrl-C at the terminal reaches the sweep
     * alone, which passes one SIGTERM on (a second signal would kill the
     * point before its checkpoint) */
    setpgid(0, 0);
    /* its log is its stdout and stderr, nothing on stdin */
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, STDIN_FILENO);
    /* the point's lock stays open across exec: the run adopts it */
    fcntl(lk.fd, F_SETFD, 0);
    execve(r->o->exe, argv, envp);
    dprintf(STDERR_FILENO, "gemtrain: sweep: cannot run '%s': %s\n", r->o->exe, strerror(errno));
    _exit(127);
  }
  int fork_errno = errno;
  /* the child holds the lock now (the same open file); the sweep lets go */
  gt_run_lock_release(&lk);
  close(fd);
  free(argv);
  free(envp);
  gt_sweep_kvs_free(&args);
  if (pid < 0) {
    res->status = GT_SWEEP_FAILED;
    snprintf(res->reason, sizeof res->reason, "cannot start a process: %s", strerror(fork_errno));
    return 0;
  }
  return pid;
}

/* Classify a point whose process has ended, by how it ended. */
static void gt__reap(gt__runner *r, const gt__slot *sl, int wstatus, int stopping) {
  gt_sweep_result *res = &r->res[sl->k];
  res->wall_seconds = gt_prof_now() - sl->t0;
  gt_sweep_exit x = {sl->killed, WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0,
                     WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, stopping != 0};
  char log[2 * GT_STR_PATH + 64], run_dir[2 * GT_STR_PATH + 64];
  snprintf(log, sizeof log, "%s/%s", r->dir, res->log);
  snprintf(run_dir, sizeof run_dir, "%s/runs/point-%d", r->dir, sl->k + 1);
  gt_sweep_classify(res, x, run_dir, log, r->s->point_timeout_s);
}

/* A line about the sweep's files (a run moved), above the status line. */
static void gt__say_line(void *ctx, const char *line) {
  const gt__runner *r = ctx;
  FILE *f = r->o->progress ? r->o->progress : r->o->out;
  if (!f) return;
  if (r->o->progress) fputs("\r\033[K", f);
  fprintf(f, "%s\n", line);
}

static void gt__skipped_line(void *ctx, int lineno, const char *why) {
  const gt__runner *r = ctx;
  if (r->o->out) fprintf(r->o->out, "sweep: ignoring line %d of %s/results.jsonl (%s)\n", lineno, r->dir, why);
}

/* The base alone must be valid: a typo on the command line would otherwise
 * fail every point, one process at a time. Gives the sweep directory. */
static gt_rc gt__check_base(const gt_sweep *s, const gt_sweep_run_opts *o, char *dir, size_t n, gt_err *err) {
  for (int i = 0; i < o->n_cli; i++)
    if (!strchr(o->cli[i], '=') || gt_sweep_reserved_key(o->cli[i], gt_sweep_key_len(o->cli[i]), 0))
      return gt_err_set(err, GT_ERR_CONFIG, "sweep: command-line argument '%s' %s", o->cli[i],
                        strchr(o->cli[i], '=') ? "is set by the sweep for each point" : "is not key=value");
  /* the command line wins over a point's keys: a swept key set there would
   * make every point the same run, under the labels of different ones */
  for (int i = 0; i < o->n_cli; i++)
    for (int q = 0; q < s->n_keys; q++)
      if (gt_sweep_key_len(o->cli[i]) == strlen(s->keys[q]) && !strncmp(o->cli[i], s->keys[q], strlen(s->keys[q])))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "sweep: command-line argument '%s' sets '%s', which '%s' sweeps (its grid or points): "
                          "every point would run with that one value; change the sweep file instead",
                          o->cli[i], s->keys[q], s->path);
  gt_sweep_kvs base = {0, 0, NULL};
  gt_rc rc = GT_OK;
  for (int i = 0; i < s->n_base && !rc; i++) rc = gt_sweep_kvs_set(&base, s->base[i], err);
  if (!rc && s->steps) {
    char buf[64];
    snprintf(buf, sizeof buf, "steps=%lld", s->steps);
    rc = gt_sweep_kvs_set(&base, buf, err);
  }
  for (int i = 0; i < o->n_cli && !rc; i++) rc = gt_sweep_kvs_set(&base, o->cli[i], err);
  if (rc) {
    gt_sweep_kvs_free(&base);
    return rc;
  }
  gt_config cfg;
  gt_err e;
  rc = gt_config_load(&cfg, NULL, s->base_config[0] ? s->base_config : NULL, base.n, (const char *const *)base.kv, &e);
  gt_sweep_kvs_free(&base);
  if (rc)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "sweep: '%s': the base configuration (before any point's keys) is refused: %s", s->path, e.msg);
  /* empty, the sweep would write at the filesystem's root */
  if (!s->output_directory[0] && !cfg.base_output_directory[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "sweep: key 'base_output_directory' is empty and '%s' sets no output_directory; give a "
                      "directory ('.' for here)",
                      s->path);
  int w = s->output_directory[0] ? snprintf(dir, n, "%s", s->output_directory)
                                 : snprintf(dir, n, "%s/%s", cfg.base_output_directory, s->name);
  if (w < 0 || (size_t)w >= n) return gt_err_set(err, GT_ERR_CONFIG, "sweep: the output directory path is too long");
  return GT_OK;
}

gt_rc gt_sweep_run(const gt_sweep *s, const gt_sweep_run_opts *o, gt_sweep_summary *sum, gt_err *err) {
  memset(sum, 0, sizeof *sum);
  gt__runner r;
  memset(&r, 0, sizeof r);
  r.s = s;
  r.o = o;
  r.t_start = gt_prof_now();
  gt_rc rc = gt__check_base(s, o, r.dir, sizeof r.dir, err);
  if (rc) return rc;
  snprintf(sum->dir, sizeof sum->dir, "%s", r.dir);
  char path[GT_STR_PATH + 64];
  snprintf(path, sizeof path, "%s/runs", r.dir);
  if (!o->dry_run && (rc = gt_mkdirs(path, "sweep", err))) return rc;
  /* one sweep per directory: two would record each other's points */
  gt_run_lock lock = {-1};
  if (!o->dry_run && (rc = gt_dir_lock_take(&lock, r.dir, "sweep", "sweep directory",
                                            "wait for that sweep to finish or choose another output_directory", err)))
    return rc;
  if ((rc = gt_sweep_point_defaults(s, &r.defaults, err))) {
    gt_run_lock_release(&lock);
    return rc;
  }

  int n = s->n_points;
  r.ov = calloc((size_t)n, sizeof *r.ov);
  r.res = calloc((size_t)n, sizeof *r.res);
  r.done = calloc((size_t)n, sizeof *r.done);
  r.to_run = calloc((size_t)n, sizeof *r.to_run);
  r.want = calloc((size_t)n, sizeof *r.want);
  gt_sweep_result *pre = calloc((size_t)n, sizeof *pre);
  const char **ident = calloc((size_t)n, sizeof *ident);
  gt__slot *slots = calloc((size_t)s->max_parallel, sizeof *slots);
  int next = 0, n_run = 0, n_skipped = 0, fd = -1;
  double last_draw = 0;
  if (!r.ov || !r.res || !r.done || !r.to_run || !r.want || !pre || !ident || !slots) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    goto out;
  }
  for (int k = 0; k < n; k++) {
    gt_sweep_result_init(&r.res[k]);
    gt_sweep_result_init(&pre[k]);
    r.res[k].point = pre[k].point = k + 1;
    if ((rc = gt_sweep_point_overrides(s, k, o->n_cli, o->cli, &r.ov[k], err))) goto out;
    /* where the sweep lives is not what a point is: the same sweep moved
     * or re-aimed at another directory still matches its records */
    gt_sweep_kvs_remove(&r.ov[k], "base_output_directory");
  }
  /* every point is checked in-process before any starts: its configuration
   * (a refusal costs no process), its plan, and its identity, which decides
   * which record and which run directory are its own */
  for (int k = 0; k < n; k++) {
    gt_sweep_result *p = &pre[k];
    snprintf(p->config, sizeof p->config, "%s", s->base_config);
    if ((rc = gt_sweep_kvs_copy(&p->overrides, &r.ov[k], err))) goto out;
    gt_sweep_kvs args;
    gt_err e;
    gt_err_clear(&e);
    double t0 = gt_prof_now();
    if (gt_sweep_point_args(&r.defaults, &r.ov[k], k, r.dir, &args, &e)) {
      p->status = GT_SWEEP_CONFIG_ERROR;
      snprintf(p->reason, sizeof p->reason, "%s", e.msg);
      gt_sweep_refusal_identity(e.msg, p->identity, sizeof p->identity);
    } else {
      /* a dry run has no process to ask whether the plan fits */
      r.to_run[k] = gt_sweep_point_check(s, &r.ov[k], &args, o->dry_run, p);
      gt_sweep_kvs_free(&args);
    }
    p->wall_seconds = gt_prof_now() - t0;
    ident[k] = p->identity;
    if (!(r.want[k] = gt_sweep_point_identity_text(s->base_config, p->identity, &r.ov[k]))) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
      goto out;
    }
  }
  snprintf(path, sizeof path, "%s/results.jsonl", r.dir);
  if ((rc = gt_sweep_results_restore(s, r.ov, ident, o->retry_failed, path, r.res, r.done, gt__skipped_line, &r,
                                     err)))
    goto out;
  fd = o->dry_run ? -2 : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd == -1 || (fd >= 0 && !(r.jsonl = fdopen(fd, "a")))) {
    rc = gt_err_set(err, GT_ERR_IO, "sweep: cannot write '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    goto out;
  }
  /* each point's files at its number, before anything runs: a point
   * inserted into a grid renumbers the ones after it, and their records,
   * run directories and logs must stay together */
  if (!o->dry_run && (rc = gt_sweep_arrange_runs(r.dir, n, (const char *const *)r.want, gt__say_line, &r, err)))
    goto out;
  for (int k = 0; k < n; k++) {
    if (r.done[k]) {
      n_skipped++;
      if (r.res[k].point == k + 1) continue;
      /* a record under another number: its files are at k + 1 now; the
       * record is appended again under that number (the last one wins) */
      r.res[k].point = k + 1;
      if (r.res[k].log[0]) snprintf(r.res[k].log, sizeof r.res[k].log, "runs/point-%d.log", k + 1);
      gt_err e;
      if (r.jsonl && gt_sweep_result_append(r.jsonl, &r.res[k], &e) && o->out) fprintf(o->out, "sweep: %s\n", e.msg);
      continue;
    }
    /* a pending row shows what it will run with: its values and its plan */
    gt_sweep_result_free(&r.res[k]);
    if ((rc = gt_sweep_result_copy(&r.res[k], &pre[k], err))) {
      gt_sweep_result_init(&r.res[k]);
      goto out;
    }
    if (o->dry_run && r.to_run[k]) r.res[k].status = GT_SWEEP_WOULD_RUN;
  }
  r.n_to_run = n - n_skipped;
  sum->n_points = n;
  sum->n_skipped = n_skipped;
  if (o->out) {
    fprintf(o->out, "sweep %s: %d point%s, %d to run, %d skipped (already in %s), max_parallel %d; directory %s\n",
            s->name, n, n == 1 ? "" : "s", r.n_to_run, n_skipped, path, s->max_parallel, r.dir);
    fflush(o->out);
  }
  /* the points refused in-process are recorded at once, before any
   * process starts */
  for (int k = 0; k < n; k++)
    if (!r.done[k] && (!r.to_run[k] || o->dry_run)) gt__finish(&r, k, 0);
  if (o->dry_run) next = n; /* nothing starts */

  int stopping = 0;
  for (;;) {
    if (o->stop && *o->stop && !stopping) {
      /* stop: no new point; each running one checkpoints and exits */
      stopping = (int)*o->stop;
      for (int i = 0; i < n_run; i++) kill(slots[i].pid, SIGTERM);
      if (o->progress) fputs("\r\033[K", o->progress);
      if (o->out)
        fprintf(o->out, "sweep: stopping (%s): %d running point%s finish%s the step and stop%s (a checkpoint first, "
                "when enabled)\n",
                stopping == SIGINT ? "SIGINT" : "SIGTERM", n_run, n_run == 1 ? "" : "s", n_run == 1 ? "es" : "",
                n_run == 1 ? "s" : ""), fflush(o->out);
    }
    while (!stopping && n_run < s->max_parallel && next < n) {
      int k = next++;
      if (r.done[k] || !r.to_run[k]) continue;
      double t0 = gt_prof_now();
      pid_t pid = gt__start(&r, k);
      if (pid > 0) {
        slots[n_run++] = (gt__slot){pid, k, t0, 0};
        sum->n_ran++;
      } else {
        r.res[k].wall_seconds = gt_prof_now() - t0;
        gt__finish(&r, k, 0);
      }
    }
    if (!n_run && (next >= n || stopping)) break;
    double now = gt_prof_now();
    for (int i = 0; i < n_run; i++) {
      int ws = 0;
      pid_t got = waitpid(slots[i].pid, &ws, WNOHANG);
      if (got == slots[i].pid || (got < 0 && errno != EINTR)) {
        if (got < 0) ws = 0x7f00; /* lost the child: classify as an exit with 127 */
        gt__reap(&r, &slots[i], ws, stopping);
        gt__finish(&r, slots[i].k, 1);
        slots[i--] = slots[--n_run];
        continue;
      }
      if (!slots[i].killed && now - slots[i].t0 > s->point_timeout_s) {
        /* SIGKILL, not SIGTERM: a stuck step must not be able to ignore it */
        kill(slots[i].pid, SIGKILL);
        slots[i].killed = 1;
      }
    }
    if (o->progress && now - last_draw > 0.5) {
      gt__status_line(&r, slots, n_run);
      last_draw = now;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (o->progress) fputs("\r\033[K", o->progress), fflush(o->progress);

  sum->stopped = stopping;
  for (int k = 0; k < n; k++) {
    gt_sweep_status st = r.res[k].status;
    sum->n_ok += st == GT_SWEEP_OK;
    sum->n_pending += st == GT_SWEEP_PENDING;
    sum->n_not_ok += st != GT_SWEEP_OK && st != GT_SWEEP_PENDING && st != GT_SWEEP_WOULD_RUN;
  }
  if (o->dry_run) {
    if (o->out) {
      int would = 0;
      for (int k = 0; k < n; k++) would += r.res[k].status == GT_SWEEP_WOULD_RUN;
      fprintf(o->out, "sweep %s (dry run): %d of %d point%s would run, %d skipped; nothing written\n", s->name, would, n,
              n == 1 ? "" : "s",
              n_skipped);
      gt_sweep_print_table(o->out, s, r.res);
    }
    goto out;
  }
  snprintf(path, sizeof path, "%s/results.md", r.dir);
  if ((rc = gt_sweep_write_table(s, r.res, path, err))) goto out;
  snprintf(path, sizeof path, "%s/plot.svg", r.dir);
  if ((rc = gt_sweep_write_plot(s, r.res, path, err))) goto out;
  if (o->out) {
    fprintf(o->out, "sweep %s: ran %d, skipped %d; %d of %d point%s ok%s; %.1f s\n", s->name, sum->n_ran, n_skipped,
            sum->n_ok, n, n == 1 ? "" : "s", stopping ? " (stopped before the others finished)" : "",
            gt_prof_now() - r.t_start);
    fprintf(o->out, "wrote %s/results.jsonl, results.md%s\n", r.dir, s->plot_x[0] ? " and plot.svg" : "");
    gt_sweep_print_table(o->out, s, r.res);
    fflush(o->out);
  }
out:
  /* on an error while points run, stop them: no orphan keeps writing */
  for (int i = 0; i < n_run; i++) {
    kill(slots[i].pid, SIGKILL);
    waitpid(slots[i].pid, NULL, 0);
  }
  if (r.jsonl) fclose(r.jsonl);
  for (int k = 0; r.ov && k < n; k++) gt_sweep_kvs_free(&r.ov[k]);
  for (int k = 0; r.res && k < n; k++) gt_sweep_result_free(&r.res[k]);
  for (int k = 0; pre && k < n; k++) gt_sweep_result_free(&pre[k]);
  for (int k = 0; r.want && k < n; k++) free(r.want[k]);
  free(r.ov);
  free(r.res);
  free(r.done);
  free(r.to_run);
  free(r.want);
  free(pre);
  free(ident);
  free(slots);
  gt_sweep_kvs_free(&r.defaults);
  gt_run_lock_release(&lock);
  return rc;
}
