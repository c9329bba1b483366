#define _POSIX_C_SOURCE 200809L
#include "train/profiler.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void gt_profiler_init(gt_profiler *p, const gt_config *cfg, int64_t start, const char *run_dir) {
  memset(p, 0, sizeof *p);
  p->first = start;
  if (strcmp(cfg->profiler, "trace")) {
    p->begin = p->end = -1;
    return;
  }
  p->begin = start + cfg->skip_first_n_steps_for_profiler;
  p->end = p->begin + cfg->profiler_steps;
  if (p->end > cfg->steps) p->end = cfg->steps;
  p->steps = cfg->steps;
  p->n_base = cfg->profiler_steps;
  p->base_lo = p->begin - p->n_base > start + 1 ? p->begin - p->n_base : start + 1;
  snprintf(p->path, sizeof p->path, "%s/trace.json", run_dir);
  snprintf(p->run_name, sizeof p->run_name, "gemtrain %s", cfg->run_name);
}

/* Appends "; <path> is an earlier run's trace, left as it was" when the run
 * directory holds a trace.json this run did not write: a reader must not
 * take it for this run's. */
static void gt__stale(const gt_profiler *p, char *line, size_t n) {
  size_t k = strlen(line);
  if (k < n && access(p->path, F_OK) == 0)
    snprintf(line + k, n - k, "; %s is an earlier run's trace, left as it was", p->path);
}

void gt_profiler_start_note(const gt_profiler *p, char *line, size_t n) {
  line[0] = 0;
  if (p->begin < 0 || p->begin < p->end) return;
  snprintf(line, n,
           "note: profiler=trace: the window starts at step %lld (the run's first step %lld + "
           "skip_first_n_steps_for_profiler=%lld), past the run's last step %lld (steps=%lld): no trace written",
           (long long)p->begin, (long long)p->first, (long long)(p->begin - p->first), (long long)p->steps - 1,
           (long long)p->steps);
  gt__stale(p, line, n);
}

gt_rc gt_profiler_step_begin(gt_profiler *p, gt_trainer *t, int64_t step, gt_err *err) {
  if (step != p->begin || p->begin >= p->end || p->tr) return GT_OK;
  gt_rc rc = gt_trace_create(&p->tr, gt_fsdp_devices(gt_trainer_fsdp(t)), 0, err);
  if (!rc && (rc = gt_trainer_set_trace(t, p->tr, err))) {
    gt_trace_destroy(p->tr);
    p->tr = NULL;
  }
  return rc;
}

gt_trace_lane *gt_profiler_host(gt_profiler *p) { return gt_trace_host(p->tr); }

/* The console line: what was written and, once a baseline exists, the
 * overhead against it. */
static void gt__line(gt_profiler *p, char *line, size_t n, int final) {
  int64_t last = p->begin + p->n_traced - 1;
  char drop[64] = "";
  if (p->dropped) snprintf(drop, sizeof drop, ", %lld more dropped over the bound", (long long)p->dropped);
  int k = snprintf(line, n, "profiler: wrote %s (steps %lld-%lld, %lld events%s)", p->path, (long long)p->begin,
                   (long long)last, (long long)p->events, drop);
  if (k < 0 || (size_t)k >= n) return;
  double tm = p->n_traced ? p->traced_s / (double)p->n_traced : 0.0;
  if (p->n_based > 0) {
    double bm = p->base_s / (double)p->n_based;
    snprintf(line + k, n - (size_t)k,
             "; overhead: the traced steps took %.4f s on average, the %lld untraced step%s %s them %.4f s (%+.1f%%)",
             tm, (long long)p->n_based, p->n_based > 1 ? "s" : "", p->after ? "right after" : "right before",
             bm, 100.0 * (tm - bm) / bm);
  } else if (final) {
    snprintf(line + k, n - (size_t)k,
             "; overhead not measured: no untraced step but the run's first ran next to the window (traced steps: "
             "%.4f s on average)",
             tm);
  }
  p->reported = p->n_based > 0 || final;
}

static gt_rc gt__write(gt_profiler *p, gt_trainer *t, gt_err *err) {
  gt_rc rc = gt_trainer_set_trace(t, NULL, err);
  if (rc) return rc;
  char other[480];
  snprintf(other, sizeof other, "\"first_step\":%lld,\"last_step\":%lld%s%s", (long long)p->begin,
           (long long)(p->begin + p->n_traced - 1), p->other[0] ? "," : "", p->other);
  p->events = gt_trace_events(p->tr);
  p->dropped = gt_trace_dropped(p->tr);
  rc = gt_trace_write(p->tr, p->path, p->run_name, other, err);
  gt_trace_destroy(p->tr);
  p->tr = NULL;
  p->written = 1;
  /* no untraced step before the window: measure against the ones after it */
  if (p->n_based == 0) {
    p->after = 1;
    p->base_lo = p->begin + p->n_traced;
  }
  return rc;
}

gt_rc gt_profiler_step_end(gt_profiler *p, gt_trainer *t, int64_t step, double seconds, char *line, size_t n,
                           gt_err *err) {
  line[0] = 0;
  if (p->begin >= p->end) return GT_OK;
  if (p->tr) {
    p->traced_s += seconds;
    p->n_traced++;
    if (step != p->end - 1) return GT_OK;
    gt_rc rc = gt__write(p, t, err);
    if (rc) return rc;
    gt__line(p, line, n, 0);
    if (!p->reported) line[0] = 0;
    return GT_OK;
  }
  int in_base = p->written ? p->after : step < p->begin;
  if (in_base && step >= p->base_lo && p->n_based < p->n_base && step != p->first) {
    p->base_s += seconds;
    p->n_based++;
    if (p->written && !p->reported && p->n_based == p->n_base) gt__line(p, line, n, 1);
  }
  return GT_OK;
}

gt_rc gt_profiler_finish(gt_profiler *p, gt_trainer *t, char *line, size_t n, gt_err *err) {
  line[0] = 0;
  if (p->tr) {
    gt_rc rc = gt__write(p, t, err);
    if (rc) return rc;
  }
  if (p->written && !p->reported) gt__line(p, line, n, 1);
  if (p->begin >= 0 && p->begin < p->end && !p->written) {
    /* stopped (a signal, target_eval_loss) before the window's first step */
    snprintf(line, n, "note: profiler=trace: the run ended before step %lld, the window's first: no trace written",
             (long long)p->begin);
    gt__stale(p, line, n);
  }
  return GT_OK;
}

void gt_profiler_close(gt_profiler *p, gt_trainer *t) {
  if (!p->tr) return;
  gt_err e;
  if (t) gt_trainer_set_trace(t, NULL, &e);
  gt_trace_destroy(p->tr);
  p->tr = NULL;
}
