/* gemtrain sweep: what became of a point whose process ended. The decision
 * is the process's exit status (tools/cli.h) and its result file
 * (metrics.jsonl); its log only supplies the reason's text. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "cli.h"
#include "sweep_runner.h"

void gt_sweep_msg(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

gt_sweep_status gt_sweep_status_of_exit(gt_sweep_exit x) {
  if (x.timed_out) return GT_SWEEP_TIMEOUT;
  /* the sweep's own SIGTERM, which struck before the point's handler was
   * in place (a point started just before the stop): not a crash, it runs
   * on the sweep's next run */
  if (x.signal == SIGTERM && x.stopping) return GT_SWEEP_PENDING;
  if (x.signal) return GT_SWEEP_CRASHED;
  switch (x.code) {
    case GT_EXIT_OK: return GT_SWEEP_OK;
    case GT_EXIT_CONFIG: return GT_SWEEP_CONFIG_ERROR;
    case GT_EXIT_PLAN: return GT_SWEEP_DOES_NOT_FIT;
    case GT_EXIT_NUMERIC: return GT_SWEEP_DIVERGED;
    case GT_EXIT_STOPPED: return GT_SWEEP_PENDING; /* checkpointed: it resumes on the sweep's next run */
    default: return GT_SWEEP_FAILED; /* GT_EXIT_ERROR, 127 (exec failed), anything else */
  }
}

void gt_sweep_last_error_line(const char *log, char *buf, size_t n) {
  if (!n) return;
  buf[0] = '\0';
  if (!log) return;
  const char *best_err = NULL, *best_any = NULL;
  size_t len_err = 0, len_any = 0;
  for (const char *p = log; *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    /* progress bars redraw with \r: keep what follows the last one */
    const char *cr = NULL;
    for (const char *c = p; c < p + len; c++)
      if (*c == '\r') cr = c;
    const char *s = cr ? cr + 1 : p;
    /* and drop the terminal's erase-line codes */
    while (s < p + len && s[0] == '\033' && s + 1 < p + len && s[1] == '[') {
      s += 2;
      while (s < p + len && !isalpha((unsigned char)*s)) s++;
      if (s < p + len) s++;
    }
    size_t sl = len - (size_t)(s - p);
    while (sl && isspace((unsigned char)s[sl - 1])) sl--;
    if (sl) {
      best_any = s, len_any = sl;
      if (!strncmp(s, "gemtrain", 8) || strstr(s, "error") || strstr(s, "Error")) best_err = s, len_err = sl;
    }
    p = e ? e + 1 : p + len;
  }
  const char *s = best_err ? best_err : best_any;
  size_t sl = best_err ? len_err : len_any;
  if (!s) return;
  if (!strncmp(s, "gemtrain: ", 10)) s += 10, sl -= 10;
  snprintf(buf, n, "%.*s", (int)sl, s);
}

/* The last `tail` bytes of a file as a string; NULL if it cannot be read. */
static char *gt__read_tail(const char *path, long tail) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  long from = n > tail ? n - tail : 0;
  char *buf = n >= 0 ? malloc((size_t)(n - from) + 1) : NULL;
  size_t got = buf && fseek(f, from, SEEK_SET) == 0 ? fread(buf, 1, (size_t)(n - from), f) : 0;
  fclose(f);
  if (buf) buf[got] = '\0';
  return buf;
}

void gt_sweep_classify(gt_sweep_result *res, gt_sweep_exit x, const char *run_dir, const char *log_path,
                       double point_timeout_s) {
  char lasterr[GT_ERR_MSG_MAX], metrics_path[GT_STR_PATH + 32];
  gt_sweep_msg(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", run_dir);
  char *log = gt__read_tail(log_path, 65536);
  gt_sweep_last_error_line(log, lasterr, sizeof lasterr);
  free(log);
  gt_err e;
  gt_err_clear(&e);
  int have_metrics = gt_sweep_read_run_metrics(res, metrics_path, &e) == GT_OK;
  res->status = gt_sweep_status_of_exit(x);
  res->signal = res->status == GT_SWEEP_CRASHED ? x.signal : 0;
  res->reason[0] = '\0';
  /* an exit 0 is ok only with its result to show for it */
  if (res->status == GT_SWEEP_OK && !have_metrics) {
    res->status = GT_SWEEP_FAILED;
    gt_sweep_msg(res->reason, sizeof res->reason, "exited 0 but %s", e.msg + (strncmp(e.msg, "sweep: ", 7) ? 0 : 7));
  } else if (res->status == GT_SWEEP_OK && !isfinite(res->final_loss)) {
    res->status = GT_SWEEP_DIVERGED;
  }
  switch (res->status) {
    case GT_SWEEP_OK: break;
    case GT_SWEEP_PENDING: {
      /* exit 5 says the run stopped on a signal, not that it wrote a
       * checkpoint (enable_checkpointing=false writes none): whether the
       * next run resumes is for the run directory to say */
      int ck = gt_ckpt_present(run_dir);
      if (x.signal) /* the sweep's SIGTERM came before the point could take it */
        snprintf(res->reason, sizeof res->reason,
                 "stopped by the sweep's SIGTERM after %lld steps, before it could checkpoint; it %s on the next run",
                 res->steps_done, ck ? "resumes from its last checkpoint" : "starts over");
      else if (ck)
        snprintf(res->reason, sizeof res->reason, "stopped and checkpointed after %lld steps; it resumes on the next run",
                 res->steps_done);
      else
        snprintf(res->reason, sizeof res->reason,
                 "stopped after %lld steps without a checkpoint; it starts over on the next run", res->steps_done);
      break;
    }
    case GT_SWEEP_TIMEOUT:
      snprintf(res->reason, sizeof res->reason, "killed after %.1f s (point_timeout_s = %g) at step %lld",
               res->wall_seconds, point_timeout_s, res->steps_done);
      break;
    case GT_SWEEP_CRASHED:
      gt_sweep_msg(res->reason, sizeof res->reason, "killed by signal %d (%s%s) after %lld steps%s%s", x.signal,
                   strsignal(x.signal), x.signal == SIGKILL ? ", as the kernel's out-of-memory killer sends" : "",
                   res->steps_done, lasterr[0] ? "; last line: " : "", lasterr);
      break;
    case GT_SWEEP_DIVERGED:
      snprintf(res->reason, sizeof res->reason, "%s", lasterr[0] ? lasterr : "non-finite loss");
      break;
    default:
      if (res->reason[0]) break;
      if (lasterr[0])
        snprintf(res->reason, sizeof res->reason, "%s", lasterr);
      else
        snprintf(res->reason, sizeof res->reason, "exit status %d with an empty log", x.code);
  }
  if (res->status != GT_SWEEP_OK) {
    /* only a finished run's timings are comparable; keep how far it got */
    res->median_step_seconds = res->tokens_per_s_per_device = res->tflops_per_s_per_device = NAN;
    res->measured_peak_bytes = NAN;
  }
  if (res->status == GT_SWEEP_PENDING) {
    /* a point that goes on later has no final figures yet: a loss in its
     * row would read as the result of a run that has not ended */
    res->final_loss = res->final_eval_loss = NAN;
    res->final_rewards_accuracies = res->final_rewards_margins = NAN;
    res->final_eval_rewards_accuracies = res->final_eval_rewards_margins = NAN;
    res->n_tasks = 0;
  }
}
