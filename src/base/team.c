/* Thread teams (see team.h).
 *
 * A run. The owner publishes fn/ctx, sets `left` to the n - 1 workers and
 * bumps the generation `gen`; workers waiting for a generation they have not
 * run see it, run fn and decrement `left`; the owner runs tid 0, then waits
 * for `left` to reach 0. Barriers inside a run count arrivals and bump their
 * own generation. Every wait is the same two stages: up to GT__TEAM_SPIN
 * pauses re-reading the word, then futex sleeps until it changes. A waker
 * only makes the wake call when a sleeper announced itself (sequentially
 * consistent store of the sleeper count before the sleeper's last check,
 * load after the waker's change: one of them sees the other), so a run on
 * busy cores costs no system call.
 *
 * The spin. A waiter that spins while another process wants its core keeps
 * the thread it waits for off that core; a waiter that sleeps at once pays
 * a wake-up (a few microseconds) at every region and barrier. libgomp's
 * default spin (300000 pauses, ~8 ms on Zen 4 where a pause takes ~25 ns)
 * cut a step to a third of its quiet speed with one core busy elsewhere;
 * tools/bench_shared.sh measured GOMP_SPINCOUNT from 0 to 300000 on the same
 * loops (2-core Zen 4, tiny model, tokens/s, quiet / one core busy):
 *   300000  3242 / 1080 (33%)     3000  3412 / 1560 (46%)
 *    30000  3223 /  942 (29%)     1000  3071 / 1636 (53%)
 *    10000  3555 / 1326 (37%)      300  3025 / 1721 (57%)
 *        0  3109 / 1739 (56%)   PASSIVE 3025 / 1698 (56%)
 * From 1000 down the shared figures are alike and the quiet ones within the
 * noise of each other; 1000 (~25 us) keeps a balanced barrier inside the
 * spin on quiet cores. The same count here, for the same reasons.
 *
 * Fork. A child has only the forking thread: the teams it inherited have no
 * workers. pthread_atfork bumps an epoch in the child; a team made in an
 * older epoch runs everything on the caller, and the process team is made
 * again on first use. */
#define _GNU_SOURCE
#include "base/team.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/threads.h"

#define GT__TEAM_SPIN 1000
#define GT__TEAM_MAX 1024

typedef struct gt__member {
  struct gt_team *t;
  int tid;
} gt__member;

struct gt_team {
  int n;
  unsigned epoch; /* gt__epoch when made */
  /* the run */
  gt_team_fn fn;
  void *ctx;
  int active; /* members that run fn (the first ones); the rest skip it */
  _Atomic int busy;          /* a thread is running the team */
  _Atomic uint32_t gen;      /* bumped per run (futex word of the workers) */
  _Atomic int wsleep;        /* workers asleep on gen */
  _Atomic uint32_t left;     /* workers still in this run (owner's futex word) */
  _Atomic int osleep;        /* the owner asleep on left */
  _Atomic int quit;
  /* the barrier */
  _Atomic uint32_t bcount;
  _Atomic uint32_t bgen;
  _Atomic int bsleep;
  int started; /* workers created */
  pthread_t *th;
  gt__member *mem;
};

static _Atomic unsigned gt__epoch;
static pthread_once_t gt__fork_once = PTHREAD_ONCE_INIT;
static gt_team *_Atomic gt__process; /* outside a mesh; see gt_team_set_process */
static pthread_mutex_t gt__process_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gt_team gt__one = {.n = 1, .active = 1};
static _Thread_local gt_team *gt__cur;     /* the thread's own setting */
static _Thread_local gt_team *gt__running; /* the team whose member this thread is now */
static _Thread_local int gt__depth;        /* > 0 inside a member's fn */

static void gt__pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void gt__futex_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void gt__futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Until *w != v: the spin, then sleeps announced in *sleepers. */
static uint32_t gt__wait_change(_Atomic uint32_t *w, uint32_t v, _Atomic int *sleepers) {
  uint32_t x;
  for (int i = 0; i < GT__TEAM_SPIN; i++) {
    if ((x = atomic_load_explicit(w, memory_order_acquire)) != v) return x;
    gt__pause();
  }
  while ((x = atomic_load(w)) == v) {
    atomic_fetch_add(sleepers, 1);
    if (atomic_load(w) == v) gt__futex_wait(w, v);
    atomic_fetch_sub(sleepers, 1);
  }
  return x;
}

static void gt__wake(_Atomic uint32_t *w, _Atomic int *sleepers) {
  if (atomic_load(sleepers) > 0) gt__futex_wake(w);
}

static void gt__child(void) {
  atomic_fetch_add(&gt__epoch, 1);
  atomic_store(&gt__process, NULL); /* its workers are not in this process: made again on use */
  pthread_mutex_init(&gt__process_mu, NULL);
}
static void gt__fork_init(void) { pthread_atfork(NULL, NULL, gt__child); }

static void gt__member_run(gt_team *t, int tid) {
  gt_team *prev = gt__running;
  gt__running = t;
  gt__depth++;
  t->fn(t->ctx, tid, t->active);
  gt__depth--;
  gt__running = prev;
}

static void *gt__worker(void *p) {
  gt__member *me = p;
  gt_team *t = me->t;
  uint32_t seen = 0;
  for (;;) {
    seen = gt__wait_change(&t->gen, seen, &t->wsleep);
    if (atomic_load_explicit(&t->quit, memory_order_acquire)) break;
    if (me->tid < t->active) gt__member_run(t, me->tid);
    if (atomic_fetch_sub(&t->left, 1) == 1) gt__wake(&t->left, &t->osleep);
  }
  return NULL;
}

gt_rc gt_team_create(int n, gt_team **out, gt_err *err) {
  if (!out) return gt_err_set(err, GT_ERR_ARG, "gt_team_create: out is NULL");
  *out = NULL;
  if (n < 1 || n > GT__TEAM_MAX)
    return gt_err_set(err, GT_ERR_ARG, "gt_team_create: %d threads; expected 1..%d", n, GT__TEAM_MAX);
  pthread_once(&gt__fork_once, gt__fork_init);
  gt_team *t = calloc(1, sizeof *t);
  if (!t) return gt_err_set(err, GT_ERR_NOMEM, "gt_team_create: out of memory for a team of %d", n);
  t->n = n;
  t->epoch = atomic_load(&gt__epoch);
  if (n > 1) {
    t->th = calloc((size_t)n, sizeof *t->th);
    t->mem = calloc((size_t)n, sizeof *t->mem);
    if (!t->th || !t->mem) {
      gt_team_destroy(t);
      return gt_err_set(err, GT_ERR_NOMEM, "gt_team_create: out of memory for a team of %d", n);
    }
    for (int i = 1; i < n; i++) {
      t->mem[i] = (gt__member){t, i};
      int e = pthread_create(&t->th[i], NULL, gt__worker, &t->mem[i]);
      if (e) {
        gt_team_destroy(t);
        return gt_err_set(err, GT_ERR_INTERNAL, "gt_team_create: thread %d of %d did not start (error %d)", i, n,
                          e);
      }
      t->started = i;
    }
  }
  *out = t;
  return GT_OK;
}

void gt_team_destroy(gt_team *t) {
  if (!t || t == &gt__one) return;
  if (t->started > 0 && t->epoch == atomic_load(&gt__epoch)) {
    atomic_store(&t->quit, 1);
    atomic_fetch_add(&t->gen, 1);
    gt__futex_wake(&t->gen);
    for (int i = 1; i <= t->started; i++) pthread_join(t->th[i], NULL);
  }
  free(t->th);
  free(t->mem);
  free(t);
}

int gt_team_size(const gt_team *t) { return t ? t->n : 1; }

static void gt__alone(gt_team_fn fn, void *ctx) {
  gt_team alone = {.n = 1, .fn = fn, .ctx = ctx, .active = 1};
  gt__member_run(&alone, 0);
}

void gt_team_run_n(gt_team *t, int max_threads, gt_team_fn fn, void *ctx) {
  int expect = 0;
  if (!t || t->n == 1 || max_threads <= 1 || gt__depth > 0 ||
      t->epoch != atomic_load_explicit(&gt__epoch, memory_order_relaxed) ||
      !atomic_compare_exchange_strong(&t->busy, &expect, 1)) {
    gt__alone(fn, ctx);
    return;
  }
  t->fn = fn;
  t->ctx = ctx;
  t->active = max_threads < t->n ? max_threads : t->n;
  atomic_store_explicit(&t->left, (uint32_t)(t->n - 1), memory_order_relaxed);
  atomic_fetch_add(&t->gen, 1); /* publishes fn, ctx and left */
  gt__wake(&t->gen, &t->wsleep);
  gt__member_run(t, 0);
  uint32_t v;
  while ((v = atomic_load_explicit(&t->left, memory_order_acquire)) != 0) gt__wait_change(&t->left, v, &t->osleep);
  atomic_store(&t->busy, 0);
}

void gt_team_run(gt_team *t, gt_team_fn fn, void *ctx) { gt_team_run_n(t, t ? t->n : 1, fn, ctx); }

void gt_team_barrier(void) {
  gt_team *t = gt__running;
  if (!t || t->active == 1) return;
  uint32_t g = atomic_load(&t->bgen);
  if (atomic_fetch_add(&t->bcount, 1) == (uint32_t)t->active - 1) {
    atomic_store(&t->bcount, 0);
    atomic_fetch_add(&t->bgen, 1);
    gt__wake(&t->bgen, &t->bsleep);
    return;
  }
  gt__wait_change(&t->bgen, g, &t->bsleep);
}

gt_team *gt_team_create_upto(int n) {
  if (n < 1) n = 1;
  if (n > GT__TEAM_MAX) n = GT__TEAM_MAX;
  gt_team *t = NULL;
  /* fewer threads than asked when the system refuses more: the results are
   * the same on any count */
  while (n > 1 && gt_team_create(n, &t, NULL)) n--;
  if (!t && gt_team_create(1, &t, NULL)) t = &gt__one;
  return t;
}

int gt_team_set_process(int n) {
  if (n < 1) n = 1;
  pthread_mutex_lock(&gt__process_mu);
  if (!gt__process || gt__process->n != n) {
    gt_team *t = gt_team_create_upto(n);
    gt_team_destroy(gt__process);
    atomic_store(&gt__process, t);
  }
  int got = gt_team_size(gt__process);
  pthread_mutex_unlock(&gt__process_mu);
  return got;
}

gt_team *gt_team_current(void) {
  if (gt__cur) return gt__cur;
  gt_team *p = atomic_load_explicit(&gt__process, memory_order_acquire);
  if (p) return p;
  gt_team_set_process(gt_threads_process_cores());
  p = atomic_load(&gt__process);
  return p ? p : &gt__one;
}

gt_team *gt_team_set_current(gt_team *t) {
  gt_team *prev = gt__cur;
  gt__cur = t;
  return prev;
}

gt_team *gt_team_alone(void) { return &gt__one; }

void gt_team_par(int par, gt_team_fn fn, void *ctx) {
  if (par && gt__depth == 0) {
    gt_team_run(gt_team_current(), fn, ctx);
    return;
  }
  gt__alone(fn, ctx);
}

void gt_team_par_n(int max_threads, gt_team_fn fn, void *ctx) {
  if (max_threads > 1 && gt__depth == 0) {
    gt_team_run_n(gt_team_current(), max_threads, fn, ctx);
    return;
  }
  gt__alone(fn, ctx);
}

typedef struct gt__for {
  gt_team_range_fn body;
  void *ctx;
  int64_t n;
} gt__for;

static void gt__for_member(void *p, int tid, int nth) {
  const gt__for *f = p;
  int64_t lo, hi;
  gt_team_split(f->n, tid, nth, &lo, &hi);
  if (hi > lo) f->body(f->ctx, lo, hi);
}

void gt_team_for(int par, int64_t n, gt_team_range_fn body, void *ctx) {
  if (n <= 0) return;
  if (!par || gt__depth > 0) {
    body(ctx, 0, n);
    return;
  }
  gt__for f = {body, ctx, n};
  gt_team_run(gt_team_current(), gt__for_member, &f);
}

int gt_team_threads(void) { return gt__depth > 0 ? 1 : gt_team_size(gt_team_current()); }

int gt_team_inside(void) { return gt__depth > 0; }
