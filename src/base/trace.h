/* A timeline recorder in the Chrome trace-event format (trace.json, opened by
 * ui.perfetto.dev and chrome://tracing).
 *
 * A gt_trace has lanes (one thread track each): the host (the training
 * loop), and per device its worker thread and its communication thread.
 * Each lane is written by one thread only, into its own chunked buffer, so
 * recording takes no lock: an event is a few stores (a malloc every
 * GT_TRACE_CHUNK events). Lanes are bounded (max_events each); events past
 * the bound are counted as dropped, never recorded. Whoever hands a lane
 * from one thread to another (attach between steps, write at the end)
 * does it across a synchronisation point (the mesh's run hand-off).
 *
 * Every function takes a NULL lane and does nothing: code that records asks
 * for its lane once (NULL when profiling is off) and pays a NULL check.
 *
 * Times are gt_prof_now() seconds; the file has microseconds since the
 * trace was created, at nanosecond resolution, so spans recorded on one
 * thread nest exactly as they ran. */
#ifndef GEMTRAIN_TRACE_H
#define GEMTRAIN_TRACE_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_trace gt_trace;
typedef struct gt_trace_lane gt_trace_lane;

#define GT_TRACE_CHUNK 1024
#define GT_TRACE_MAX_EVENTS_DEFAULT (1 << 18) /* per lane: 36 MiB at most */

/* n_devices >= 1; max_events per lane (<= 0: the default). */
gt_rc gt_trace_create(gt_trace **out, int n_devices, int64_t max_events, gt_err *err);
void gt_trace_destroy(gt_trace *t);
int gt_trace_devices(const gt_trace *t);
/* The lanes (NULL for a NULL trace or a device out of range). */
gt_trace_lane *gt_trace_host(gt_trace *t);
gt_trace_lane *gt_trace_device(gt_trace *t, int dev);
gt_trace_lane *gt_trace_comm(gt_trace *t, int dev);
/* The checkpoint writer's lane ("checkpoint writer"), listed in the file
 * only when it holds events: the spans of background checkpoint writes,
 * recorded by the training loop once a write has ended. */
gt_trace_lane *gt_trace_writer(gt_trace *t);

/* A complete span [t0, t1] named by a string with static storage; cat
 * (static) groups spans by kind ("layer", "collective", "matmul", ...). */
void gt_trace_span(gt_trace_lane *l, const char *name, const char *cat, double t0, double t1);
/* The same with one integer argument (arg_name static, e.g. "bytes") and an
 * optional static string argument "group" (NULL: none). */
void gt_trace_span_arg(gt_trace_lane *l, const char *name, const char *cat, double t0, double t1,
                       const char *arg_name, int64_t arg, const char *group);
/* The same with a name copied from a buffer (truncated to 63 bytes). */
void gt_trace_span_text(gt_trace_lane *l, const char *text, const char *cat, double t0, double t1,
                        const char *arg_name, int64_t arg);
/* A timed statement (GT_PROF): stmt is its source text; the span is named
 * by the function it calls ("gt_matmul_forward(...)" -> "matmul_forward"). */
void gt_trace_stmt(gt_trace_lane *l, const char *stmt, const char *cat, double t0, double t1);
/* Phases: a phase lasts from its start until the next phase of the lane or
 * gt_trace_phase_end (a span of category "layer"). */
void gt_trace_phase(gt_trace_lane *l, const char *text, double now);
void gt_trace_phase_end(gt_trace_lane *l, double now);
/* A counter sample: n (<= 8) series named by keys (static) under name. */
void gt_trace_counter(gt_trace_lane *l, const char *name, double t, int n, const char *const *keys,
                      const int64_t *vals);

/* Memory counters: installs a probe on m whose phases become the lane's
 * phases and whose allocations and frees become samples of the counter
 * "memory (<lane name>)" by category (parameters, gradients, optimizer,
 * saved activations, temporaries, logits, gathered weights, other; the
 * host pool apart), so the series sum to gt_mem_total_cur at every sample.
 * Records the current values at once. Between steps only (gt_mem_set_probe);
 * m's allocations must then come from the lane's thread. NULL l removes the
 * probe. */
void gt_trace_watch_mem(gt_trace_lane *l, gt_mem *m);

/* Events recorded and dropped (over the bound), over all lanes. */
int64_t gt_trace_events(const gt_trace *t);
int64_t gt_trace_dropped(const gt_trace *t);

/* Writes the JSON object {"traceEvents": [...], "displayTimeUnit": "ms",
 * "otherData": {...}} to path (through path.tmp and a rename, so a failed
 * write leaves no half file). process is the process track's name; other
 * (may be NULL) is extra JSON members for "otherData" ("\"k\": 1, ..."). Call
 * when no thread records. */
gt_rc gt_trace_write(gt_trace *t, const char *path, const char *process, const char *other, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
