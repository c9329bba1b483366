/* A thread team: the threads one device (or the process outside a mesh)
 * computes with, and the kernels' only source of parallelism.
 *
 * A team of n is its owner's thread (tid 0) plus n-1 workers created once.
 * gt_team_run(t, fn, ctx) calls fn(ctx, tid, n) on every member and returns
 * when all are done. Kernels never name a team: gt_team_par runs on the
 * calling thread's current team (set by a mesh device thread for itself,
 * else the process team that gt_threads_use sized, else one thread), so
 * their signatures carry no thread argument.
 *
 * Waiting. A waiting member (a worker between runs, a member at a barrier,
 * the owner at the end of a run) spins a bounded number of pauses, then
 * sleeps on a futex. The spin is ours, not the OpenMP runtime's: its length
 * no longer depends on what the user's environment says (team.c has the
 * measurements behind it).
 *
 * Nesting. A member that starts a region of its own (a kernel called inside
 * another's work) runs it alone, as tid 0 of 1; so does a thread whose team
 * is already running for another thread. Every kernel gives the same bits
 * on any thread count, so these fallbacks only cost speed.
 *
 * Work splitting. gt_team_split cuts [0, n) the way OpenMP's
 * schedule(static) did (the first n % nth members one item more), so each
 * member's range is the one it had; a gt_team_counter hands out items one
 * at a time (schedule(dynamic, 1)) for loops whose items differ in cost,
 * and is only used where an item's result does not depend on the member
 * that runs it. */
#ifndef GT_BASE_TEAM_H
#define GT_BASE_TEAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/common.h"

typedef struct gt_team gt_team;
typedef void (*gt_team_fn)(void *ctx, int tid, int nthreads);

/* n >= 1 threads: the caller's and n - 1 workers, which sleep until the
 * first run. GT_ERR_ARG outside 1..1024, GT_ERR_INTERNAL when a thread
 * cannot start (the ones started are stopped). */
gt_rc gt_team_create(int n, gt_team **out, gt_err *err);
/* Stops and joins the workers. Not while the team runs. NULL: nothing. */
void gt_team_destroy(gt_team *t);
int gt_team_size(const gt_team *t);

/* fn(ctx, tid, n) on every member, tid 0 on the calling thread; returns when
 * all are done. Alone (tid 0 of 1) when called from inside a member, when
 * the team is running for another thread, or in the child of a fork (whose
 * copy of the team has no workers). NULL t: alone. */
void gt_team_run(gt_team *t, gt_team_fn fn, void *ctx);
/* The same on the first min(max_threads, size) members only (fn sees that
 * count): a kernel whose buffers are sized for the threads it planned for. */
void gt_team_run_n(gt_team *t, int max_threads, gt_team_fn fn, void *ctx);

/* The calling thread's current team: the one it set, else the process team
 * (gt_threads_use; created with gt_threads_process_cores() threads on first
 * use), else a one-thread team. Never NULL. */
gt_team *gt_team_current(void);
/* Sets the calling thread's current team (NULL: back to the process team)
 * and returns the previous setting. A mesh device sets its own. */
gt_team *gt_team_set_current(gt_team *t);
/* (Re)makes the process team with n threads (fewer if the system refuses
 * threads; at least 1) and returns its size. Not while a kernel runs on the
 * old one (call it between steps, like gt_mesh_set_threads): only a program
 * that runs one model at a time may call it. Code that may run beside other
 * threads' kernels (a gt_ctx) makes a team of its own and sets it as its
 * thread's current one instead. */
int gt_team_set_process(int n);
/* A team of n threads, or fewer when the system refuses threads (the results
 * are the same on any count); gt_team_alone() when not even one can be
 * made (gt_team_destroy leaves that one alone). Never NULL. */
gt_team *gt_team_create_upto(int n);
/* A one-thread team (no workers): what a thread that must not fan out sets
 * as its current one. */
gt_team *gt_team_alone(void);

/* The region entry the kernels use: gt_team_run on the current team when par
 * is true, else fn(ctx, 0, 1) on the caller. */
void gt_team_par(int par, gt_team_fn fn, void *ctx);
/* gt_team_run_n on the current team with at most max_threads members (1 or
 * less: fn(ctx, 0, 1) on the caller). */
void gt_team_par_n(int max_threads, gt_team_fn fn, void *ctx);
/* The common region: body(ctx, lo, hi) once per member on its
 * gt_team_split part of [0, n) (empty parts are skipped), on the current
 * team when par is true, else body(ctx, 0, n) on the caller. */
typedef void (*gt_team_range_fn)(void *ctx, int64_t lo, int64_t hi);
void gt_team_for(int par, int64_t n, gt_team_range_fn body, void *ctx);
/* The members a region started here would have: 1 inside a member, else the
 * current team's size (a kernel plans its work cut with it; the run may
 * still have fewer, see gt_team_run). */
int gt_team_threads(void);
/* Whether the calling thread is running a member's share of a run. */
int gt_team_inside(void);

/* Inside fn: waits until every member of the run has called it. A no-op in a
 * run of one. Every member must call it the same number of times. */
void gt_team_barrier(void);

/* [*lo, *hi): member tid's part of [0, n) among nth, as schedule(static). */
static inline void gt_team_split(int64_t n, int tid, int nth, int64_t *lo, int64_t *hi) {
  int64_t q = n / nth, r = n % nth;
  *lo = q * tid + (tid < r ? tid : r);
  *hi = *lo + q + (tid < r);
}

/* [*lo, *hi): member tid's part of [0, n) in whole blocks of blk elements
 * (the last block may be short; a part may be empty), so no two members
 * write into one block (blk floats a cache line, or a kernel's column
 * block). */
static inline void gt_team_split_blocks(int64_t n, int64_t blk, int tid, int nth, int64_t *lo, int64_t *hi) {
  const int64_t nblk = (n + blk - 1) / blk;
  *lo = nblk * tid / nth * blk;
  *hi = nblk * (tid + 1) / nth * blk;
  if (*hi > n) *hi = n;
}

/* Items handed out one at a time. Set next to 0 before the run (a
 * gt_team_counter in the run's ctx, zero-initialised). Each member takes
 * items until it gets one >= n, so a loop over n items takes n + nth in
 * all: a second loop in the same run continues from base n + nth (pass the
 * running base; loops must be separated by a barrier). */
typedef struct gt_team_counter {
  _Atomic int64_t next;
} gt_team_counter;
static inline int64_t gt_team_take(gt_team_counter *c, int64_t base) {
  return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed) - base;
}

#endif
