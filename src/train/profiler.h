/* profiler=trace: records the timeline of steps [start + skip, start + skip
 * + profiler_steps) of a run (skip = skip_first_n_steps_for_profiler,
 * clipped to the run; start is the step the run starts from, as MaxText
 * counts), attached through the trainer, and writes <run_dir>/trace.json
 * when the window closes. A window that starts at or past `steps` is empty:
 * nothing is recorded, and the run's start note says so (a trace.json left
 * in the run directory is then an earlier run's, and stays).
 *
 * The overhead it reports compares the mean measured time of the traced
 * steps with the mean of the untraced steps of the same run right before
 * them (up to profiler_steps of them, never the run's first step, which
 * warms caches and allocators); when there is none, with the untraced steps
 * right after the window (so that line comes once they have run). */
#ifndef GT_TRAIN_PROFILER_H
#define GT_TRAIN_PROFILER_H

#include <stdint.h>

#include "base/trace.h"
#include "config/config.h"
#include "train/trainer.h"

typedef struct gt_profiler {
  int64_t first, begin, end; /* the run's first step; the window [begin, end), empty when begin >= end */
  int64_t steps;             /* the run's steps (the window ends there) */
  int64_t n_base;            /* baseline steps wanted */
  int64_t base_lo;           /* the baseline before the window: [base_lo, begin) */
  gt_trace *tr;              /* while recording */
  double traced_s, base_s;
  int64_t n_traced, n_based;
  int64_t events, dropped;
  int written, reported;
  int after;                 /* the baseline is the steps after the window */
  char path[2200];
  char run_name[GT_STR_PATH + 16]; /* the process track: "gemtrain <run_name>" */
  char other[256];                 /* the caller's extra "otherData" members ("\"k\":1,..."; empty: none) */
} gt_profiler;

/* Off (every call a no-op) unless cfg->profiler is "trace". */
void gt_profiler_init(gt_profiler *p, const gt_config *cfg, int64_t start, const char *run_dir);
/* After init with the run's start: when the window is empty, a note for the
 * console that no trace will be written (else ""). */
void gt_profiler_start_note(const gt_profiler *p, char *line, size_t n);
/* Before step `step`'s work (its data loading included): attaches at the
 * window's first step. */
gt_rc gt_profiler_step_begin(gt_profiler *p, gt_trainer *t, int64_t step, gt_err *err);
/* The host lane while recording (NULL otherwise): the loop's spans. */
gt_trace_lane *gt_profiler_host(gt_profiler *p);
/* After step `step` and what follows it in the loop (eval, checkpoint);
 * seconds is its measured time. At the window's last step it detaches and
 * writes trace.json. line gets a line for the console when there is one to
 * print (else ""). */
gt_rc gt_profiler_step_end(gt_profiler *p, gt_trainer *t, int64_t step, double seconds, char *line, size_t n,
                           gt_err *err);
/* At the end of the run (also a stopped one): writes a window cut short and
 * gives the pending line, or, when the run ended before its window began,
 * a note that no trace was written. */
gt_rc gt_profiler_finish(gt_profiler *p, gt_trainer *t, char *line, size_t n, gt_err *err);
/* Detaches and frees what is left (every exit path; before the trainer is
 * destroyed, whose frees the trace's probes watch). */
void gt_profiler_close(gt_profiler *p, gt_trainer *t);

#endif
