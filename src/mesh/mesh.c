/* gt_mesh: persistent worker threads standing in for devices, and collectives
 * between them over shared memory (see src/mesh/mesh.h).
 *
 * Threads and cores. Every device thread owns a thread team (base/team.h) of
 * threads_per_device = max(1, cores / N) threads, itself included, made at
 * its start and remade before a run when the count changed, and set as its
 * current team: the kernels called inside a device compute on that team, so
 * devices x threads never exceeds the cores and workers never oversubscribe
 * them (on this 2-core machine: 2 threads for 1 device, 1 each for 2
 * devices). With more devices than cores every device gets 1 thread
 * and the OS time-slices them; the collectives then block rather than spin.
 *
 * Runs. gt_mesh_run publishes fn/arg, bumps a generation counter and
 * broadcasts a condition variable; each device thread waits for a generation
 * it has not run yet, runs fn once and counts itself done; the caller sleeps
 * on a second condition variable until all N are done. N = 1 uses its worker
 * thread too, so fn always runs on the same team and thread identity.
 *
 * Collectives. Each device publishes its buffer pointers in its slot of a
 * per-mesh array, then all wait at a barrier; after it a device may read its
 * ring predecessor's (d-1 mod N) published memory. Steps are separated by the
 * same reusable barrier, and every collective ends with one, so no device
 * returns (and lets its caller reuse its buffers) while another still reads
 * them. A device only ever reads memory of d-1 (and of root in broadcast).
 *
 * Chunks are the shards of mesh.h: chunk c = [gt_shard_begin(n,N,c),
 * gt_shard_begin(n,N,c+1)), possibly empty when n < N.
 *
 * Reduce-scatter (ring, N-1 steps). At step s = 0..N-1 device d works on chunk
 * c = (d-1-s) mod N. Step 0: its accumulator for chunk d-1 is its own
 * contribution (no copy: it just publishes the pointer into `in`). Step
 * s >= 1: acc_d = acc_{d-1} (from step s-1, same chunk) + in_d[chunk], i.e.
 * device d adds the chunk "received" from d-1 to its own contribution. At
 * s = N-1 the chunk is d itself and the sum lands in `out`. So chunk c is
 * accumulated left to right in the FIXED device order
 *     ((x_{c+1} + x_{c+2}) + x_{c+3}) + ... + x_c      (indices mod N)
 * every element with one float (double) rounding per addition; float addition
 * is commutative, so "prev + own" and "own + prev" give the same bits and only
 * this association order matters. The result is bit-identical run to run and
 * independent of timing or thread scheduling (but differs across N).
 * Accumulators live in a per-device scratch buffer, double-buffered by step
 * parity (device d writes buffer s&1 at step s while d+1 reads d's buffer
 * (s-1)&1), because `in` is const and `out` holds one chunk only. The scratch
 * is plain malloc'ed, grown on demand by its own device before the publish
 * barrier (others read it only after it) and kept for later calls; N <= 2
 * never needs it. A failed grow is recorded as the mesh's error (see Errors);
 * it is at most 2 * ceil(n/N) elements per device.
 *
 * All-gather (ring, N-1 steps). Device d first copies its `in` into its own
 * range of `out` (skipped when in already is that range). At step s = 0..N-2
 * it copies chunk c = (d-1-s) mod N from d-1: at s = 0 from d-1's `in` (its
 * own shard), later from d-1's `out`, where d-1 received it at step s-1.
 * Nobody reads a device's own range of `out`, and the chunk d writes at step s
 * is not the one d+1 reads from it at the same step, so no double buffer.
 *
 * The all-gather moves bytes: the same code runs on 4-byte (float32) and
 * 2-byte elements (gt_all_gather_bf16*: bf16 bit patterns, moved as they
 * are), with chunks over the same element ranges and bytes counted at the
 * element's size; an async request carries its element size.
 *
 * All-reduce = reduce-scatter into buf's own range (in = out = buf: a device's
 * own chunk of buf is read only by itself, at the last step, element by
 * element) followed by all-gather with in = own range of buf; the publish
 * barrier of the gather is the last barrier of the scatter. Same chunk order,
 * so every device ends with the same bits. all_reduce_f64 is the same on
 * doubles (the global gradient norm).
 *
 * Broadcast: non-root devices copy root's whole buffer after the publish
 * barrier (in shared memory one direct copy is as cheap as any pipeline and
 * the data path does not change the result). Its bytes are counted per the
 * bandwidth-optimal model (root's buffer in N chunks pipelined around the
 * ring): (N-1)*n elements cross links in total, attributed evenly as in
 * all-gather, n - len(chunk d+1) per device, i.e. ~(N-1)/N * n * 4 bytes.
 *
 * Stats (per device, each device writes only its own): bytes_sent is what a
 * ring sends from that device: reduce-scatter forwards its partial sums of
 * every chunk but its own, (n - len(d)) elements; all-gather forwards every
 * chunk but d+1's, (n - len(d+1)); all-reduce both; barrier 0. calls counts
 * each public collective once (all_reduce is one call; barrier counts);
 * seconds is CLOCK_MONOTONIC wall time inside the call (waiting included).
 *
 * Barrier. A generation barrier: arrivals are counted with an atomic
 * fetch-add; the last arriver resets the count and bumps the generation under
 * the mutex and broadcasts; the others spin briefly on the generation (only
 * when there are no more devices than cores, so a spinner cannot keep the
 * thread it waits for off the CPU) and then sleep on the condition variable,
 * re-checking the generation under the mutex, so a wakeup cannot be lost. The
 * generation (not a counter) tells a waiter its barrier completed, so it is
 * reusable back to back: a fast device may arrive at the next barrier before
 * slow ones wake from this one. The fetch-add (acq_rel) and the
 * generation's release/acquire make every write before the barrier visible
 * after it. Chosen over a pure spin barrier because 8 devices on 2 cores must
 * not burn the core the last arriver needs, and over a plain mutex+cond one
 * because 1 device per core with balanced work wakes in microseconds.
 *
 * Groups. The devices form a data x fsdp x expert grid (gt_mesh_set_axes3,
 * default 1 x N x 1; device = (data index * fsdp + fsdp index) * expert +
 * expert index, so without an expert axis the layout is data x fsdp). A group collective runs the algorithms above among the G members
 * of the caller's group, with "device" replaced by "rank in the group":
 * member(k) = base + k * stride (GT_GROUP_ALL: 0 + k; GT_GROUP_FSDP: data
 * index * fsdp + k; GT_GROUP_DATA: fsdp index + k * fsdp), chunks by
 * gt_shard_begin(n, G, rank), ring predecessor member(rank - 1 mod G), bytes
 * with G. The old functions are the GT_GROUP_ALL case (G = N, rank = d,
 * member(k) = k), literally the same code, so their bits do not change.
 * Several groups of one kind run at the same time on disjoint devices, so
 * every group INSTANCE has its own barrier (1 for ALL, `data` fsdp groups,
 * `fsdp` data groups; arrays of N + N + 1 allocated once, their sizes set by
 * set_axes between runs); the published pointers are per device, and a
 * device is in one collective at a time per thread, so they need no split.
 *
 * Lanes. Slots and barriers come in two lanes: lane 0 is used by the device
 * threads (synchronous collectives), lane 1 by the communication threads
 * (asynchronous all-gathers). A device thread may sit in a synchronous
 * collective while its comm thread runs an async gather: they never share a
 * slot or a barrier, and each lane's slot has its own cache line.
 *
 * Async all-gather. Every device has a comm thread (created with the mesh,
 * a one-thread team: it only memcpy's) and a FIFO of requests guarded by a
 * per-device mutex. gt_all_gather_async captures the group geometry at issue
 * time, appends {ticket, in, out, n, element size} and signals; the comm thread sleeps on a
 * condition variable when the FIFO is empty (no busy-spin while idle), runs
 * requests in order with the lane-1 slots/barriers of the group instance,
 * then publishes done = ticket under the mutex and broadcasts. Tickets are
 * 1, 2, ... per device; done only grows, so gt_mesh_wait(t) returns once
 * done >= t, which also covers every earlier ticket. Because every device
 * issues the same async gathers in the same order, the k-th request of every
 * member of a group is the same gather, and each comm thread only depends on
 * its group peers' comm threads (never on device threads), so it completes
 * whatever the device threads do meanwhile. The same ring code runs, so the
 * bits equal gt_all_gather_g. The gather ends with a lane-1 barrier, so when
 * a ticket is done no peer still reads that device's in/out. Stats: the comm
 * thread keeps its own counters (bytes, calls, and seconds from starting the
 * request to finishing it, queueing time excluded), updated under the
 * device's comm mutex; gt_mesh_stats returns device + comm counters summed.
 * gt_mesh_destroy lets every comm thread drain its FIFO (so gathers nobody
 * waited for still finish consistently on all peers), then joins it.
 *
 * Contracts: every device calls the same collectives in the same order with
 * the same n (and root); dev is the device id fn was given; collectives,
 * gt_barrier and the stats of one's own device are called only inside
 * gt_mesh_run; gt_mesh_run, gt_mesh_reset_stats and gt_mesh_destroy are
 * called from outside it (a device calling gt_mesh_run would deadlock).
 * Devices' buffers are distinct.
 *
 * Errors. The collectives return void and run on every device's thread, so a
 * misuse the code can see (bad dev, n < 0, unknown group, bad root, a wait on
 * a ticket never issued) or a failed scratch allocation cannot be returned,
 * and aborting would take the whole process down. Instead the first one is
 * recorded on the mesh (m->failed, m->error under mu) for gt_mesh_take_error.
 * The failing call still takes part in its group's barriers (n taken as 0, an
 * unknown group as the whole mesh, a wrong dev replaced by the calling device
 * thread's own id, which gt__self knows), so its peers are released; and
 * every collective decides whether to move data from the verdict of its
 * publish barrier: the last arriver samples m->failed and stores it next to
 * the generation it releases, so every member of one collective sees the
 * same verdict and either all of them move data or none does (a member that
 * skipped its step would leave a peer reading a stale accumulator). The
 * failing device records the error before it arrives, so its own collective
 * is already skipped by everyone; so is every later one until the error is
 * taken. A verdict cannot be overwritten before every member has read it:
 * the next generation of the same barrier needs them all to arrive first.
 * A device whose own work failed (an allocation in its step) and that will
 * call no more collectives in this run leaves it (gt_mesh_leave): it records
 * the error, then counts as arrived at every barrier of its groups until the
 * run ends, so its peers' collectives complete with a failed verdict. A
 * barrier's arrivals and leaves are one word, so exactly one of them
 * completes a generation.
 * Misuses the code cannot see (devices calling different collectives, or
 * different groups or n) still hang or corrupt, as in MPI. */
#define _POSIX_C_SOURCE 200809L

#include "mesh/mesh.h"
#include "base/prof.h"
#include "base/trace.h"
#include "base/team.h"
#include "base/threads.h"
#include "dist/dist.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Far more devices than anyone simulates on a CPU; bounds the allocation. */
#define GT__MAX_DEVICES 1024
/* Devices over all ranks; bounds the barrier arrays (3 per device). */
#define GT__MAX_GLOBAL_DEVICES 65536
#define GT__CACHE_LINE 64
/* Pause iterations of the barrier's spin before sleeping: ~10-100 us,
 * depending on the CPU's pause latency; enough to cover a balanced step. */
#define GT__BARRIER_SPIN 2000
/* Lane 0: device threads (synchronous collectives); lane 1: comm threads. */
#define GT__LANE_DEV 0
#define GT__LANE_COMM 1
/* A reduce-scatter step receives a chunk from another rank in pieces of
 * this size, each added while it is in cache (gt__rs_steps). Measured with
 * `gemtrain bench mpi` (64 MiB, 2 ranks, median of 9): the all-reduce took
 * 0.99-1.01x MPI_Allreduce's time with 256 KiB pieces, 1.10-1.25x with 64
 * KiB (more messages), 1.22x with 1 MiB and 1.33x whole (the received chunk
 * written to memory and read back for the addition). */
#define GT__PIECE_BYTES ((size_t)1 << 18)
/* Initial request FIFO capacity per device; doubles when full. */
#define GT__QUEUE_INIT 8

/* Cache-line aligned: barriers of concurrently running group instances sit
 * side by side in one array and must not false-share their counters. */
typedef struct gt__barrier {
  _Alignas(GT__CACHE_LINE) pthread_mutex_t mu;
  pthread_cond_t cv;
  /* arrivals at the current generation (low 32 bits) and members that
   * left the run (high 32, gt_mesh_leave): one word, so that an arrival
   * and a leave cannot both, or neither, see the barrier complete */
  _Atomic uint64_t state;
  atomic_uint gen;      /* completed barriers (wraps; only != matters) */
  atomic_int verdict;   /* the mesh's failed flag when gen last advanced */
  const atomic_int *failed; /* the mesh's sticky error flag */
  int n;
  int spin;             /* 0 when threads outnumber cores */
} gt__barrier;

/* What a device publishes for the collective its thread of this lane is in;
 * read by its ring successor after the publish barrier. Own cache line, so a
 * device thread and its comm thread publishing at once do not false-share. */
typedef struct gt__slot {
  _Alignas(GT__CACHE_LINE) const void *pub_in;
  void *pub_out;
  /* Reduce-scatter accumulators: two of ceil(n/G) elements (step parity). */
  char *scratch;
  size_t scratch_cap;
  /* A chunk received from a predecessor on another rank (one of ceil(n/G)). */
  char *rbuf;
  size_t rbuf_cap;
} gt__slot;

/* A group instance as seen by one member: G members, member(k) = device
 * base + k * stride, the caller has rank r; bar is that instance's barrier
 * in the lane the collective runs in. */
typedef struct gt__grp {
  int G, r, base, stride, lane;
  int me; /* the caller's local device (its channel on another rank's link) */
  gt__barrier *bar;
} gt__grp;

/* One queued async all-gather; the group is resolved at issue time. */
typedef struct gt__req {
  int ticket;
  gt_group g; /* for the trace */
  gt__grp grp;
  const void *in;
  void *out;
  int64_t n;
  size_t es; /* element bytes: 4 (float) or 2 (bf16) */
} gt__req;

/* One device: its threads, its published pointers and its counters. Aligned
 * to a cache line so devices writing their own slots do not false-share. */
typedef struct gt__dev {
  _Alignas(GT__CACHE_LINE) gt_mesh *mesh;
  int id;
  int gid; /* global device index (rank and local index on a mesh over ranks) */
  pthread_t thread;
  gt_comm_stats stats; /* synchronous collectives; written by the device thread */
  gt__slot slot[2];    /* per lane */

  /* Comm thread state: the FIFO, tickets and counters, all under cmu. */
  pthread_t comm_thread;
  pthread_mutex_t cmu;
  pthread_cond_t cwork; /* device -> comm thread: request queued or quit */
  pthread_cond_t cdone; /* comm thread -> waiters: done advanced */
  gt__req *q;           /* circular, q_cap entries, q_len from q_head */
  int q_cap, q_head, q_len;
  int issued;           /* last ticket handed out (0: none yet) */
  int done;             /* last ticket completed; only grows */
  bool cquit;
  gt_comm_stats cstats; /* async gathers, written by the comm thread */
} gt__dev;

/* Barriers of one lane: [0] the whole mesh, [1 + i] fsdp group i (data
 * index * expert + expert index), [1 + G + j] data group j (fsdp index *
 * expert + expert index), [1 + 2G + k] expert group k (data index * fsdp +
 * fsdp index), in global indices (G devices over all ranks). Each counts the
 * group's members on this rank only; members on other ranks synchronise
 * through their messages. Unused indices have size 1. */
typedef struct gt__lane {
  gt__barrier *bar;
  int n_init; /* barriers initialised (cleanup on failure) */
} gt__lane;

struct gt_mesh {
  int n;                  /* devices of this process (worker threads) */
  int threads_per_device; /* threads of each device's team */
  int data, fsdp, expert; /* global axes; data * fsdp * expert == G */
  /* Ranks (see gt_mesh_set_layout): R processes of n devices each, this
   * one is `rank`; G = R * n global devices. g_rank/g_dev: where global
   * device g lives; R = 1 is the one-process mesh (g = local index). */
  int R, rank, G;
  int ici[3], dcn[3];
  int *g_rank, *g_dev;
  int nbar;               /* barriers allocated per lane (1 + 3G) */
  int spin[2];            /* barrier spin per lane (0: sleep at once) */
  gt__dev *dev;           /* n slots, cache-line aligned */
  int n_started;          /* device threads created (for cleanup on failure) */
  int n_comm_init;        /* devices whose cmu/cwork/cdone exist */
  int n_comm_started;     /* comm threads created */
  gt__lane lane[2];

  /* Run hand-off, all under mu. */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* caller -> devices: new generation or quit */
  pthread_cond_t done_cv; /* devices -> caller: all done; run slot free */
  uint64_t run_gen;
  int n_done;
  bool busy; /* a gt_mesh_run is in flight (serialises concurrent callers) */
  int n_left; /* devices that left this run (gt_mesh_leave) */
  bool quit;
  void (*fn)(int device, void *arg);
  void *arg;

  /* The first error of a collective (see Errors): failed is read without the
   * lock by every collective; error is written and taken under mu. */
  atomic_int failed;
  gt_err error;

  /* collective_timeout_seconds of the exchanges its threads make with other
   * ranks (0: the default): set on each device and comm thread before it
   * works, so two meshes of one process keep each their own */
  _Atomic double timeout;

  /* The profiler timeline (NULL: off): set between runs, read by the
   * device and comm threads, each recording on its own lane. */
  _Atomic(gt_trace *) trace;
};

/* The device whose thread this is (NULL on any other thread): a collective
 * called with a wrong dev still takes part as the device it really runs on. */
static _Thread_local const struct gt__dev *gt__self;

typedef enum { GT__F32, GT__F64 } gt__dtype;

static size_t gt__esize(gt__dtype t) { return t == GT__F32 ? sizeof(float) : sizeof(double); }

/* Records the mesh's first error; later ones are dropped (the first is the
 * cause, the rest mostly its consequences). Takes mu, so the caller must
 * not hold a device's cmu (set_axes locks mu, then cmu). */
static void gt__fail(gt_mesh *m, gt_rc rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void gt__fail(gt_mesh *m, gt_rc rc, const char *fmt, ...) {
  pthread_mutex_lock(&m->mu);
  if (!atomic_load(&m->failed)) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(m->error.msg, sizeof m->error.msg, "mesh: ");
    vsnprintf(m->error.msg + k, sizeof m->error.msg - (size_t)k, fmt, ap);
    va_end(ap);
    m->error.rc = rc;
    /* seq_cst: ordered before this thread's next barrier arrival, so the
     * last arriver of that barrier sees it */
    atomic_store(&m->failed, 1);
  }
  pthread_mutex_unlock(&m->mu);
}

static inline int gt__mod(int a, int n) { return ((a % n) + n) % n; }

static inline void gt__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- barrier ------------------------------------------------------------ */

static int gt__barrier_init(gt__barrier *b, int n, int spin, const atomic_int *failed) {
  if (pthread_mutex_init(&b->mu, NULL) != 0) return -1;
  if (pthread_cond_init(&b->cv, NULL) != 0) {
    pthread_mutex_destroy(&b->mu);
    return -1;
  }
  atomic_init(&b->state, 0);
  atomic_init(&b->gen, 0u);
  atomic_init(&b->verdict, 0);
  b->failed = failed;
  b->n = n;
  b->spin = spin;
  return 0;
}

static void gt__barrier_destroy(gt__barrier *b) {
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
}

#define GT__ARRIVED(v) ((int)((v) & 0xffffffffu))
#define GT__LEFT(v) ((int)((v) >> 32))
#define GT__ONE_LEFT ((uint64_t)1 << 32)

/* The last of the barrier's members to arrive or leave completes it: the
 * verdict (the mesh's failed flag, or any member gone: a collective missing
 * a member moves no data), the count reset, the next generation published. */
static bool gt__barrier_release(gt__barrier *b, unsigned g, uint64_t v) {
  /* Every member's arrival (and so any error it recorded before it)
   * happens before this load through the fetch-add chain. */
  int fail = atomic_load(b->failed) || GT__LEFT(v) > 0;
  atomic_store_explicit(&b->verdict, fail, memory_order_relaxed);
  /* Reset before publishing the new generation: a device that sees it may
   * arrive at the next barrier at once. Members that left stay left. */
  atomic_fetch_sub_explicit(&b->state, (uint64_t)GT__ARRIVED(v), memory_order_relaxed);
  pthread_mutex_lock(&b->mu);
  atomic_store_explicit(&b->gen, g + 1u, memory_order_release);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  return fail;
}

/* Returns the verdict every member of this barrier shares: nonzero when the
 * mesh had an error recorded by the time the last member arrived. */
static bool gt__barrier_wait(gt__barrier *b) {
  /* The generation cannot move past ours before we arrive, so this load
   * reads the generation of the barrier we are about to join. */
  unsigned g = atomic_load_explicit(&b->gen, memory_order_acquire);
  uint64_t v = atomic_fetch_add_explicit(&b->state, 1, memory_order_acq_rel) + 1;
  if (GT__ARRIVED(v) + GT__LEFT(v) == b->n) return gt__barrier_release(b, g, v);
  bool passed = false;
  for (int i = 0; i < b->spin && !passed; i++) {
    passed = atomic_load_explicit(&b->gen, memory_order_acquire) != g;
    if (!passed) gt__cpu_relax();
  }
  if (!passed) {
    pthread_mutex_lock(&b->mu);
    /* Checked under the mutex the last arriver holds to bump it: no lost
     * wakeup, and spurious wakeups just loop. */
    while (atomic_load_explicit(&b->gen, memory_order_acquire) == g) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
  }
  /* Written before the generation's release; not rewritten before this
   * member arrives at the barrier's next generation. */
  return atomic_load_explicit(&b->verdict, memory_order_relaxed) != 0;
}

/* A member leaves the barrier for the rest of the run: it counts as
 * arrived at this and every later generation. The generation cannot move
 * between the load and the add: without this member neither arrived nor
 * left, no generation completes. */
static void gt__barrier_leave(gt__barrier *b) {
  unsigned g = atomic_load_explicit(&b->gen, memory_order_acquire);
  uint64_t v = atomic_fetch_add_explicit(&b->state, GT__ONE_LEFT, memory_order_acq_rel) + GT__ONE_LEFT;
  if (GT__ARRIVED(v) > 0 && GT__ARRIVED(v) + GT__LEFT(v) == b->n) gt__barrier_release(b, g, v);
}

/* Which group instances global device g belongs to (barrier indices). */
static void gt__instances(const gt_mesh *m, int g, int idx[3]) {
  const int F = m->fsdp, E = m->expert, G = m->G;
  const int e = g % E, f = (g / E) % F, a = g / (E * F);
  idx[0] = 1 + a * E + e;         /* its fsdp group */
  idx[1] = 1 + G + f * E + e;     /* its data group */
  idx[2] = 1 + 2 * G + a * F + f; /* its expert group */
}

/* Group instance sizes for the current axes (see gt__lane): the members on
 * this rank. Only called when no collective is in flight, so every count
 * is 0. */
static void gt__size_barriers(gt_mesh *m) {
  for (int l = 0; l < 2; l++) {
    gt__barrier *b = m->lane[l].bar;
    for (int i = 0; i < m->nbar; i++) b[i].n = 0;
    b[0].n = m->n;
    for (int d = 0; d < m->n; d++) {
      int idx[3];
      gt__instances(m, m->dev[d].gid, idx);
      for (int k = 0; k < 3; k++) b[idx[k]].n++;
    }
    for (int i = 0; i < m->nbar; i++)
      if (b[i].n == 0) b[i].n = 1;
  }
}

/* ---- groups ------------------------------------------------------------- */

static gt__grp gt__group(gt_mesh *m, int lane, gt_group g, int d) {
  /* global device = (data index * fsdp + fsdp index) * expert + expert index */
  const int F = m->fsdp, E = m->expert, gd = m->dev[d].gid;
  const int e = gd % E, f = (gd / E) % F, a = gd / (E * F);
  int idx[3];
  gt__instances(m, gd, idx);
  gt__barrier *bars = m->lane[lane].bar;
  gt__grp x = {.lane = lane, .me = d};
  switch (g) {
  case GT_GROUP_FSDP: /* same data and expert index; ranks are fsdp indices */
    x.G = F;
    x.r = f;
    x.base = a * F * E + e;
    x.stride = E;
    x.bar = &bars[idx[0]];
    break;
  case GT_GROUP_DATA: /* same fsdp and expert index; ranks are data indices */
    x.G = m->data;
    x.r = a;
    x.base = f * E + e;
    x.stride = F * E;
    x.bar = &bars[idx[1]];
    break;
  case GT_GROUP_EXPERT: /* same data and fsdp index; ranks are expert indices */
    x.G = E;
    x.r = e;
    x.base = (a * F + f) * E;
    x.stride = 1;
    x.bar = &bars[idx[2]];
    break;
  default:
    x.G = m->G;
    x.r = gd;
    x.base = 0;
    x.stride = 1;
    x.bar = &bars[0];
    break;
  }
  return x;
}

/* Member k of a group: its slot when it is a device of this process, else
 * NULL with its rank and local index (a ring link to it is a message). */
typedef struct gt__peer {
  gt__slot *slot;
  int rank, dev;
} gt__peer;

static inline gt__peer gt__peer_at(gt_mesh *m, const gt__grp *x, int k) {
  int g = x->base + k * x->stride;
  gt__peer p = {NULL, m->g_rank[g], m->g_dev[g]};
  if (p.rank == m->rank) p.slot = &m->dev[p.dev].slot[x->lane];
  return p;
}

static inline gt__slot *gt__member(gt_mesh *m, const gt__grp *x, int k) { return gt__peer_at(m, x, k).slot; }

/* ---- threads ------------------------------------------------------------ */

/* The device's team of n (this thread and n - 1 workers), kept while n
 * stays; fewer threads when the system refuses more (the results are the
 * same on any count), NULL for one. Set as the thread's current team, so
 * the kernels it calls compute on its share of the cores. */
static gt_team *gt__device_team(gt_team *t, int n) {
  if (gt_team_size(t) != n) {
    gt_team_destroy(t);
    t = NULL;
    while (n > 1 && gt_team_create(n, &t, NULL)) n--;
  }
  gt_team_set_current(t ? t : gt_team_alone());
  return t;
}

static void *gt__device_main(void *p) {
  gt__dev *dv = p;
  gt_mesh *m = dv->mesh;
  gt__self = dv;
  gt_team *team = gt__device_team(NULL, m->threads_per_device);
  uint64_t seen = 0;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (m->run_gen == seen && !m->quit) pthread_cond_wait(&m->work_cv, &m->mu);
    if (m->quit) break;
    seen = m->run_gen;
    void (*fn)(int, void *) = m->fn;
    void *arg = m->arg;
    pthread_mutex_unlock(&m->mu);
    /* Again before each run: gt_mesh_set_threads may have changed the
     * count, and a run that set another current team must not leak it
     * into the next one. */
    team = gt__device_team(team, m->threads_per_device);
    gt_dist_set_timeout(atomic_load(&m->timeout));
    fn(dv->id, arg);
    pthread_mutex_lock(&m->mu);
    if (++m->n_done == m->n) pthread_cond_broadcast(&m->done_cv);
  }
  pthread_mutex_unlock(&m->mu);
  gt_team_set_current(NULL);
  gt_team_destroy(team);
  return NULL;
}

static bool gt__ag(gt_mesh *m, const gt__grp *x, const char *in, char *out, int64_t n, size_t es, int64_t *dcn);
static int64_t gt__ag_sent(int64_t n, int G, int r);

static const char *gt__group_name(gt_group g) {
  return g == GT_GROUP_FSDP ? "fsdp" : g == GT_GROUP_DATA ? "data" : g == GT_GROUP_EXPERT ? "expert" : "all";
}

/* The comm thread: runs its device's async gathers in issue order. Sleeps on
 * cwork while the FIFO is empty (an idle comm thread costs no CPU); on quit
 * it first drains the FIFO so peers waiting in a ring are not stranded. */
static void *gt__comm_main(void *p) {
  gt__dev *dv = p;
  gt_mesh *m = dv->mesh;
  /* It only memcpy's; it must not add threads next to the device's. */
  gt_team_set_current(gt_team_alone());
  pthread_mutex_lock(&dv->cmu);
  for (;;) {
    while (dv->q_len == 0 && !dv->cquit) pthread_cond_wait(&dv->cwork, &dv->cmu);
    if (dv->q_len == 0) break; /* quit and drained */
    gt__req rq = dv->q[dv->q_head];
    dv->q_head = (dv->q_head + 1) % dv->q_cap;
    dv->q_len--;
    pthread_mutex_unlock(&dv->cmu);
    gt_dist_set_timeout(atomic_load(&m->timeout));
    double t0 = gt_prof_now();
    int64_t dcn = 0;
    bool skipped = gt__ag(m, &rq.grp, (const char *)rq.in, (char *)rq.out, rq.n, rq.es, &dcn);
    double t1 = gt_prof_now(), dt = t1 - t0;
    gt_trace *tr = atomic_load_explicit(&m->trace, memory_order_acquire);
    if (tr && !skipped)
      gt_trace_span_arg(gt_trace_comm(tr, dv->id), rq.es == 2 ? "all_gather bf16 (async)" : "all_gather (async)",
                        "collective", t0, t1, "bytes", gt__ag_sent(rq.n, rq.grp.G, rq.grp.r) * (int64_t)rq.es,
                        gt__group_name(rq.g));
    pthread_mutex_lock(&dv->cmu);
    if (!skipped) {
      dv->cstats.bytes_sent += gt__ag_sent(rq.n, rq.grp.G, rq.grp.r) * (int64_t)rq.es;
      dv->cstats.calls += 1;
      dv->cstats.seconds += dt;
      dv->cstats.bytes_dcn += dcn;
    }
    /* A skipped gather is done too: it took part in every barrier. */
    dv->done = rq.ticket;
    pthread_cond_broadcast(&dv->cdone);
  }
  pthread_mutex_unlock(&dv->cmu);
  return NULL;
}

static void gt__free_layout(gt_mesh *m) {
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < m->lane[l].n_init; i++) gt__barrier_destroy(&m->lane[l].bar[i]);
    free(m->lane[l].bar);
    m->lane[l].bar = NULL;
    m->lane[l].n_init = 0;
  }
  free(m->g_rank);
  free(m->g_dev);
  m->g_rank = m->g_dev = NULL;
  m->nbar = 0;
}

/* (Re)allocates the barriers and the global device map for R ranks of
 * m->n devices (G = R * n); the map itself is filled by the caller. */
static gt_rc gt__alloc_layout(gt_mesh *m, int R, int G, gt_err *err) {
  gt__free_layout(m);
  const int nbar = 1 + 3 * G;
  m->g_rank = malloc(sizeof(int) * (size_t)G);
  m->g_dev = malloc(sizeof(int) * (size_t)G);
  if (!m->g_rank || !m->g_dev) return gt_err_set(err, GT_ERR_NOMEM, "mesh: out of memory for %d devices over %d ranks", G, R);
  for (int g = 0; g < G; g++) { /* one process: global = local */
    m->g_rank[g] = 0;
    m->g_dev[g] = g;
  }
  for (int l = 0; l < 2; l++) {
    /* aligned_alloc wants a size that is a multiple of the alignment; the
     * struct's alignment already pads its size to one */
    m->lane[l].bar = aligned_alloc(GT__CACHE_LINE, sizeof(gt__barrier) * (size_t)nbar);
    if (!m->lane[l].bar) return gt_err_set(err, GT_ERR_NOMEM, "mesh: out of memory for %d devices over %d ranks", G, R);
    for (int i = 0; i < nbar; i++) {
      if (gt__barrier_init(&m->lane[l].bar[i], 1, m->spin[l], &m->failed) != 0)
        return gt_err_set(err, GT_ERR_INTERNAL, "mesh: barrier init failed");
      m->lane[l].n_init = i + 1;
    }
  }
  m->nbar = nbar;
  return GT_OK;
}

static void gt__free(gt_mesh *m) {
  if (!m) return;
  if (m->dev) {
    /* Comm threads first: they may still be draining gathers. */
    for (int d = 0; d < m->n_comm_started; d++) {
      gt__dev *dv = &m->dev[d];
      pthread_mutex_lock(&dv->cmu);
      dv->cquit = true;
      pthread_cond_signal(&dv->cwork);
      pthread_mutex_unlock(&dv->cmu);
    }
    for (int d = 0; d < m->n_comm_started; d++) pthread_join(m->dev[d].comm_thread, NULL);
    pthread_mutex_lock(&m->mu);
    m->quit = true;
    pthread_cond_broadcast(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    for (int d = 0; d < m->n_started; d++) pthread_join(m->dev[d].thread, NULL);
    for (int d = 0; d < m->n_comm_init; d++) {
      pthread_cond_destroy(&m->dev[d].cdone);
      pthread_cond_destroy(&m->dev[d].cwork);
      pthread_mutex_destroy(&m->dev[d].cmu);
    }
    for (int d = 0; d < m->n; d++) {
      free(m->dev[d].q);
      for (int l = 0; l < 2; l++) {
        free(m->dev[d].slot[l].scratch);
        free(m->dev[d].slot[l].rbuf);
      }
    }
    free(m->dev);
  }
  gt__free_layout(m);
  pthread_cond_destroy(&m->done_cv);
  pthread_cond_destroy(&m->work_cv);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

gt_rc gt_mesh_create(gt_mesh **out, int n_devices, gt_err *err) {
  if (!out) return gt_err_set(err, GT_ERR_ARG, "gt_mesh_create: out is NULL");
  *out = NULL;
  if (n_devices < 1 || n_devices > GT__MAX_DEVICES)
    return gt_err_set(err, GT_ERR_ARG, "gt_mesh_create: n_devices = %d; expected 1..%d", n_devices,
                      GT__MAX_DEVICES);
  gt_mesh *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ERR_NOMEM, "gt_mesh_create: out of memory for %d devices", n_devices);
  int procs = gt_threads_process_cores();
  m->n = n_devices;
  m->threads_per_device = procs / n_devices > 1 ? procs / n_devices : 1;
  m->data = 1;
  m->fsdp = n_devices;
  m->expert = 1;
  atomic_init(&m->failed, 0);
  atomic_init(&m->timeout, 0.0);
  atomic_init(&m->trace, NULL);
  if (pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m);
    return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&m->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&m->mu);
    free(m);
    return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_cond_init failed");
  }
  if (pthread_cond_init(&m->done_cv, NULL) != 0) {
    pthread_cond_destroy(&m->work_cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_cond_init failed");
  }
  /* From here gt__free cleans up whatever exists. Spinning only pays when
   * the spinners cannot keep the awaited thread off a core: device threads
   * alone (the old rule, N <= cores), and for comm threads device + comm
   * threads together (2N <= cores), since devices compute meanwhile. */
  m->spin[0] = n_devices <= procs ? GT__BARRIER_SPIN : 0;
  m->spin[1] = 2 * n_devices <= procs ? GT__BARRIER_SPIN : 0;
  m->R = 1;
  m->G = n_devices;
  gt_rc brc = gt__alloc_layout(m, 1, n_devices, err);
  if (brc) {
    gt__free(m);
    return brc;
  }
  /* aligned_alloc wants a size that is a multiple of the alignment; the
   * struct's alignment already pads its size to one. */
  m->dev = aligned_alloc(GT__CACHE_LINE, sizeof(gt__dev) * (size_t)n_devices);
  if (!m->dev) {
    gt__free(m);
    return gt_err_set(err, GT_ERR_NOMEM, "gt_mesh_create: out of memory for %d devices", n_devices);
  }
  memset(m->dev, 0, sizeof(gt__dev) * (size_t)n_devices);
  for (int d = 0; d < n_devices; d++) m->dev[d].gid = d;
  gt__size_barriers(m);
  for (int d = 0; d < n_devices; d++) {
    gt__dev *dv = &m->dev[d];
    dv->mesh = m;
    dv->id = d;
    dv->gid = d;
    dv->q = malloc(sizeof(gt__req) * GT__QUEUE_INIT);
    if (!dv->q) {
      gt__free(m);
      return gt_err_set(err, GT_ERR_NOMEM, "gt_mesh_create: out of memory for %d devices", n_devices);
    }
    dv->q_cap = GT__QUEUE_INIT;
    if (pthread_mutex_init(&dv->cmu, NULL) != 0) {
      gt__free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&dv->cwork, NULL) != 0) {
      pthread_mutex_destroy(&dv->cmu);
      gt__free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_cond_init failed");
    }
    if (pthread_cond_init(&dv->cdone, NULL) != 0) {
      pthread_cond_destroy(&dv->cwork);
      pthread_mutex_destroy(&dv->cmu);
      gt__free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: pthread_cond_init failed");
    }
    m->n_comm_init = d + 1;
  }
  for (int d = 0; d < n_devices; d++) {
    int rc = pthread_create(&m->dev[d].thread, NULL, gt__device_main, &m->dev[d]);
    if (rc != 0) {
      gt__free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: could not start device thread %d of %d (%s)",
                        d, n_devices, strerror(rc));
    }
    m->n_started = d + 1;
  }
  for (int d = 0; d < n_devices; d++) {
    int rc = pthread_create(&m->dev[d].comm_thread, NULL, gt__comm_main, &m->dev[d]);
    if (rc != 0) {
      gt__free(m);
      return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: could not start comm thread %d of %d (%s)", d,
                        n_devices, strerror(rc));
    }
    m->n_comm_started = d + 1;
  }
  *out = m;
  return GT_OK;
}

void gt_mesh_destroy(gt_mesh *m) { gt__free(m); }

int gt_mesh_size(const gt_mesh *m) { return m ? m->n : 0; }

void gt_mesh_run(gt_mesh *m, void (*fn)(int device, void *arg), void *arg) {
  if (!m) return;
  if (!fn) {
    gt__fail(m, GT_ERR_ARG, "gt_mesh_run: fn is NULL; expected the function every device runs");
    return;
  }
  pthread_mutex_lock(&m->mu);
  while (m->busy) pthread_cond_wait(&m->done_cv, &m->mu);
  m->busy = true;
  m->fn = fn;
  m->arg = arg;
  m->n_done = 0;
  m->run_gen++;
  pthread_cond_broadcast(&m->work_cv);
  while (m->n_done < m->n) pthread_cond_wait(&m->done_cv, &m->mu);
  if (m->n_left) {
    /* Members that left count as arrived until the next run: once every
     * comm thread has finished what the run queued (outside mu: a gather
     * may record an error, which takes it), no barrier has a member left
     * in it and the next run starts with every member present. */
    pthread_mutex_unlock(&m->mu);
    for (int d = 0; d < m->n; d++) {
      gt__dev *dv = &m->dev[d];
      pthread_mutex_lock(&dv->cmu);
      while (dv->done < dv->issued) pthread_cond_wait(&dv->cdone, &dv->cmu);
      pthread_mutex_unlock(&dv->cmu);
    }
    for (int l = 0; l < 2; l++)
      for (int i = 0; i < m->nbar; i++) atomic_store(&m->lane[l].bar[i].state, 0);
    pthread_mutex_lock(&m->mu);
    m->n_left = 0;
  }
  m->busy = false;
  /* Wake a caller queued behind this run. */
  pthread_cond_broadcast(&m->done_cv);
  pthread_mutex_unlock(&m->mu);
}

/* ---- axes --------------------------------------------------------------- */

gt_rc gt_mesh_set_axes(gt_mesh *m, int data, int fsdp, gt_err *err) {
  return gt_mesh_set_axes3(m, data, fsdp, 1, err);
}

gt_rc gt_mesh_set_axes3(gt_mesh *m, int data, int fsdp, int expert, gt_err *err) {
  if (!m) return gt_err_set(err, GT_ERR_ARG, "gt_mesh_set_axes: mesh is NULL");
  if (expert == 1 && (data < 1 || fsdp < 1 || (long long)data * fsdp != m->n))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "mesh axes data %d x fsdp %d = %lld devices, but the mesh has %d: "
                      "data * fsdp must equal the device count",
                      data, fsdp, (long long)data * fsdp, m->n);
  const int ici[3] = {data, fsdp, expert}, dcn[3] = {1, 1, 1};
  return gt_mesh_set_layout(m, ici, dcn, 0, err);
}

/* Whether a gather is queued or running on any device (the layout must not
 * change under it). Called with mu held. */
static int gt__gathers_in_flight(gt_mesh *m) {
  for (int d = 0; d < m->n; d++) {
    gt__dev *dv = &m->dev[d];
    pthread_mutex_lock(&dv->cmu);
    bool pending = dv->done != dv->issued;
    pthread_mutex_unlock(&dv->cmu);
    if (pending) return d;
  }
  return -1;
}

gt_rc gt_mesh_set_layout(gt_mesh *m, const int ici[3], const int dcn[3], int rank, gt_err *err) {
  if (!m) return gt_err_set(err, GT_ERR_ARG, "gt_mesh_set_layout: mesh is NULL");
  static const char *ax[3] = {"data", "fsdp", "expert"};
  long long li = 1, ld = 1;
  for (int k = 0; k < 3; k++) {
    if (ici[k] < 1 || dcn[k] < 1)
      return gt_err_set(err, GT_ERR_CONFIG, "mesh: the %s axis is ici %d x dcn %d; expected both >= 1", ax[k], ici[k],
                        dcn[k]);
    li *= ici[k];
    ld *= dcn[k];
  }
  if (li != m->n)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "mesh axes data %d x fsdp %d x expert %d = %lld devices, but the mesh has %d: "
                      "data * fsdp * expert must equal the device count",
                      ici[0], ici[1], ici[2], li, m->n);
  if (ld * li > GT__MAX_GLOBAL_DEVICES)
    return gt_err_set(err, GT_ERR_CONFIG, "mesh: %lld ranks x %d devices = %lld devices; at most %d", ld, m->n,
                      ld * li, GT__MAX_GLOBAL_DEVICES);
  if (rank < 0 || rank >= ld)
    return gt_err_set(err, GT_ERR_ARG, "mesh: rank %d; expected 0..%lld (dcn axes %d x %d x %d)", rank, ld - 1, dcn[0],
                      dcn[1], dcn[2]);
  /* Holding mu keeps a run from starting while the barriers are resized. */
  pthread_mutex_lock(&m->mu);
  if (m->busy) {
    pthread_mutex_unlock(&m->mu);
    return gt_err_set(err, GT_ERR_ARG, "gt_mesh_set_axes: called during gt_mesh_run; call it between runs");
  }
  int busy = gt__gathers_in_flight(m);
  if (busy >= 0) {
    pthread_mutex_unlock(&m->mu);
    return gt_err_set(err, GT_ERR_ARG, "gt_mesh_set_axes: device %d has async gathers in flight; wait for them first",
                      busy);
  }
  const int R = (int)ld, G = (int)(ld * li);
  gt_rc rc = GT_OK;
  if (G != m->G || m->nbar != 1 + 3 * G) rc = gt__alloc_layout(m, R, G, err);
  if (rc) {
    /* the old arrays are gone: leave a consistent one-process layout */
    gt_err keep = *err;
    gt_err_clear(err);
    (void)gt__alloc_layout(m, 1, m->n, err);
    *err = keep;
    m->R = 1, m->rank = 0, m->G = m->n, m->data = 1, m->fsdp = m->n, m->expert = 1;
    for (int d = 0; d < m->n; d++) m->dev[d].gid = d;
    gt__size_barriers(m);
    pthread_mutex_unlock(&m->mu);
    return rc;
  }
  m->R = R;
  m->rank = rank;
  m->G = G;
  for (int k = 0; k < 3; k++) m->ici[k] = ici[k], m->dcn[k] = dcn[k];
  m->data = ici[0] * dcn[0];
  m->fsdp = ici[1] * dcn[1];
  m->expert = ici[2] * dcn[2];
  /* MaxText's hybrid mesh: on each axis the slice (rank) index is the outer
   * part, so a rank's devices are one contiguous block of each axis. */
  for (int r = 0; r < R; r++) {
    const int rd = r / (dcn[1] * dcn[2]), rf = r / dcn[2] % dcn[1], re = r % dcn[2];
    for (int l = 0; l < m->n; l++) {
      const int ld_ = l / (ici[1] * ici[2]), lf = l / ici[2] % ici[1], le = l % ici[2];
      const int a = rd * ici[0] + ld_, f = rf * ici[1] + lf, e = re * ici[2] + le;
      const int g = (a * m->fsdp + f) * m->expert + e;
      m->g_rank[g] = r;
      m->g_dev[g] = l;
      if (r == rank) m->dev[l].gid = g;
    }
  }
  gt__size_barriers(m);
  pthread_mutex_unlock(&m->mu);
  return GT_OK;
}

void gt_mesh_rows(const gt_mesh *m, int B, int *row0, int *nrows) {
  int lo = m->G, hi = -1;
  for (int d = 0; d < m->n; d++) {
    if (m->dev[d].gid < lo) lo = m->dev[d].gid;
    if (m->dev[d].gid > hi) hi = m->dev[d].gid;
  }
  if (m->R == 1 || B % m->G) { /* one process, or a batch that does not split (refused later) */
    *row0 = 0;
    *nrows = B;
    return;
  }
  const int per = B / m->G;
  *row0 = lo * per;
  *nrows = (hi - lo + 1) * per;
}

int gt_mesh_ranks(const gt_mesh *m) { return m ? m->R : 0; }
int gt_mesh_rank(const gt_mesh *m) { return m ? m->rank : 0; }
int gt_mesh_global_size(const gt_mesh *m) { return m ? m->G : 0; }
int gt_mesh_global_id(const gt_mesh *m, int dev) { return m && dev >= 0 && dev < m->n ? m->dev[dev].gid : -1; }
int gt_mesh_rank_of(const gt_mesh *m, int gid) { return m && gid >= 0 && gid < m->G ? m->g_rank[gid] : -1; }

int gt_mesh_group_size(const gt_mesh *m, gt_group g) {
  if (!m) return 0;
  switch (g) {
  case GT_GROUP_ALL: return m->G;
  case GT_GROUP_FSDP: return m->fsdp;
  case GT_GROUP_DATA: return m->data;
  case GT_GROUP_EXPERT: return m->expert;
  }
  return 0;
}

int gt_mesh_group_rank(const gt_mesh *m, gt_group g, int dev) {
  if (!m || dev < 0 || dev >= m->n) return -1;
  const int gd = m->dev[dev].gid;
  switch (g) {
  case GT_GROUP_ALL: return gd;
  case GT_GROUP_FSDP: return gd / m->expert % m->fsdp;
  case GT_GROUP_DATA: return gd / (m->expert * m->fsdp);
  case GT_GROUP_EXPERT: return gd % m->expert;
  }
  return -1;
}

/* ---- collectives -------------------------------------------------------- */

static bool gt__group_known(gt_group g) {
  return g == GT_GROUP_ALL || g == GT_GROUP_FSDP || g == GT_GROUP_DATA || g == GT_GROUP_EXPERT;
}

/* Checks a collective's arguments on entry (see Errors). A misuse is recorded
 * and repaired so that the call still takes part in its group's barriers: a
 * wrong dev becomes the calling device thread's own id, n < 0 becomes 0, an
 * unknown group (g may be NULL: none) the whole mesh. Returns the device that
 * takes part, or -1 when there is none: a NULL mesh, or a bad dev from a
 * thread that is no device of m (no peer waits for such a thread). */
static int gt__enter(gt_mesh *m, int dev, gt_group *g, int64_t *n, const char *who) {
  if (!m) return -1;
  const gt__dev *self = gt__self && gt__self->mesh == m ? gt__self : NULL;
  if (dev < 0 || dev >= m->n || (self && self->id != dev)) {
    if (!self) {
      gt__fail(m, GT_ERR_ARG, "%s: device %d; expected 0..%d (and no device thread of this mesh called it)", who,
               dev, m->n - 1);
      return -1;
    }
    gt__fail(m, GT_ERR_ARG, "device %d: %s called as device %d; expected its own index %d (mesh of %d devices)",
             self->id, who, dev, self->id, m->n);
    dev = self->id;
  }
  if (*n < 0) {
    gt__fail(m, GT_ERR_ARG, "device %d: %s: n = %lld; expected n >= 0", dev, who, (long long)*n);
    *n = 0;
  }
  if (g && !gt__group_known(*g)) {
    gt__fail(m, GT_ERR_ARG,
             "device %d: %s: unknown group %d; expected GT_GROUP_ALL, GT_GROUP_FSDP, GT_GROUP_DATA or "
             "GT_GROUP_EXPERT",
             dev, who, (int)*g);
    *g = GT_GROUP_ALL;
  }
  return dev;
}

/* The largest chunk: shards differ by at most one element. Written without
 * n + G - 1, which overflows for an absurd n. */
static int64_t gt__max_chunk(int64_t n, int G) { return n / G + (n % G != 0); }

/* Scratch for two accumulators of the largest chunk. Called by the device
 * itself before the publish barrier, so no other device is reading it. A
 * failure is recorded before that barrier, so its verdict skips the
 * collective on every member and nobody reads the missing scratch; with an
 * error already recorded the collective is skipped anyway, so no grow. */
/* Grows a per-slot buffer to `need` bytes (kept for later calls); a failure
 * becomes the mesh's error, before the publish barrier (see below). */
static void gt__grow_buf(gt_mesh *m, char **buf, size_t *cap, size_t need, int id, const char *who, const char *what,
                         int64_t n, int G) {
  if (need <= *cap) return;
  free(*buf);
  *cap = 0;
  *buf = malloc(need);
  if (!*buf) {
    gt__fail(m, GT_ERR_NOMEM, "device %d: %s: out of memory for %zu bytes of %s (n = %lld over %d devices)", id, who,
             need, what, (long long)n, G);
    return;
  }
  *cap = need;
}

static void gt__grow_scratch(gt_mesh *m, gt__slot *sl, int id, int64_t n, int G, gt__dtype t, const char *who) {
  if (G < 3 || atomic_load(&m->failed)) return; /* accumulators only between the first and last step */
  const size_t es = gt__esize(t);
  const uint64_t chunk = (uint64_t)gt__max_chunk(n, G);
  if (chunk > SIZE_MAX / 2 / es) {
    gt__fail(m, GT_ERR_NOMEM,
             "device %d: %s: reduce scratch for n = %lld over %d devices is more than the address space holds", id,
             who, (long long)n, G);
    return;
  }
  gt__grow_buf(m, &sl->scratch, &sl->scratch_cap, 2 * (size_t)chunk * es, id, who, "reduce scratch", n, G);
}

/* dst[i] = a[i] + b[i]. dst may be b itself (all-reduce's last step), so no
 * restrict; the compiler still vectorises with a runtime overlap check. */
static void gt__add(void *dst, const void *a, const void *b, int64_t k, gt__dtype t) {
  if (t == GT__F32) {
    float *y = dst;
    const float *x0 = a, *x1 = b;
    for (int64_t i = 0; i < k; i++) y[i] = x0[i] + x1[i];
  } else {
    double *y = dst;
    const double *x0 = a, *x1 = b;
    for (int64_t i = 0; i < k; i++) y[i] = x0[i] + x1[i];
  }
}

/* The receive buffer for a chunk from a predecessor on another rank (one
 * piece of it, at most the largest chunk), grown like the scratch, before
 * the publish barrier. */
static void gt__grow_rbuf(gt_mesh *m, gt__slot *sl, int id, int64_t n, int G, size_t es, const char *who) {
  if (G < 2 || atomic_load(&m->failed)) return;
  /* one piece at most (gt__rs_steps), so no size can overflow */
  const uint64_t chunk = (uint64_t)gt__max_chunk(n, G);
  size_t need = chunk >= GT__PIECE_BYTES / es ? GT__PIECE_BYTES : (size_t)chunk * es;
  gt__grow_buf(m, &sl->rbuf, &sl->rbuf_cap, need, id, who, "receive buffer", n, G);
}

/* One ring step's messages to and from other ranks: `send` (sb bytes) goes
 * to `next` when it lives on another rank, `recv` (rb bytes) comes from
 * `prev` when it does. Links inside the process are shared memory and move
 * nothing here. A failed exchange (a peer that does not answer within
 * collective_timeout_seconds) becomes the mesh's error; the step's data is
 * then garbage, and the error stops the run. Returns the bytes sent. */
static int64_t gt__link(gt_mesh *m, const gt__grp *x, const gt__peer *next, const void *send, size_t sb,
                        const gt__peer *prev, void *recv, size_t rb, const char *what) {
  gt_dist_xfer t = {NULL, 0, -1, -1, NULL, 0, -1, -1};
  if (!next->slot && sb > 0) t.send = send, t.send_bytes = sb, t.to_rank = next->rank, t.to_dev = next->dev;
  if (!prev->slot && rb > 0) t.recv = recv, t.recv_bytes = rb, t.from_rank = prev->rank, t.from_dev = prev->dev;
  if (t.to_rank < 0 && t.from_rank < 0) return 0;
  gt_err e;
  gt_err_clear(&e);
  if (gt_dist_exchange(&t, x->lane, x->me, what, &e)) gt__fail(m, e.rc, "%s", e.msg);
  return (int64_t)t.send_bytes;
}

/* Reduce-scatter steps 1..G-1 (step 0 is the publish of `in`, already done
 * and followed by a barrier). Ends with a barrier. skip (the publish
 * barrier's verdict, the same on every member of this process): only the
 * barriers. A neighbour on another rank is a message instead of a read of
 * its memory: at step s the successor gets what it would have read from us
 * (our chunk r-s: the raw contribution at s = 1, else our accumulator of
 * step s-1), and the predecessor's lands in rbuf; the additions and their
 * order are the same, so the bits do not depend on where devices live.
 * Adds the bytes sent to other ranks to *dcn. */
static void gt__rs_steps(gt_mesh *m, const gt__grp *x, const char *in, char *out_own, int64_t n, gt__dtype t,
                         bool skip, int64_t *dcn, const char *what) {
  const int G = x->G, r = x->r;
  const size_t es = gt__esize(t);
  const gt__peer prev = gt__peer_at(m, x, gt__mod(r - 1, G)), next = gt__peer_at(m, x, gt__mod(r + 1, G));
  gt__slot *me = gt__member(m, x, r);
  const size_t half = (size_t)gt__max_chunk(n, G) * es;
  for (int s = 1; s < G; s++) {
    int c = gt__mod(r - 1 - s, G), cn = gt__mod(r - s, G);
    int64_t len = skip ? 0 : gt_shard_len(n, G, c), nlen = skip ? 0 : gt_shard_len(n, G, cn);
    /* formed only when data moves: a skipped step (len = nlen = 0) may
     * have n out of range and no scratch */
    const char *snd = nlen == 0 ? NULL
                      : s == 1  ? in + (size_t)gt_shard_begin(n, G, cn) * es
                                : me->scratch + (size_t)((s - 1) & 1) * half;
    char *dst = len == 0 ? NULL : s == G - 1 ? out_own : me->scratch + (size_t)(s & 1) * half;
    if (!prev.slot) {
      /* the predecessor's chunk arrives in pieces small enough to stay in
       * cache until they are added (one piece of rbuf, reused), so a
       * received byte is not written to memory and read back; the
       * successor, on whichever rank, gets ours in the same pieces */
      const int64_t pe = (int64_t)(GT__PIECE_BYTES / es), beg = gt_shard_begin(n, G, c);
      const int64_t np = (len > nlen ? len : nlen) / pe + ((len > nlen ? len : nlen) % pe != 0);
      for (int64_t k = 0; k < np; k++) {
        int64_t o = k * pe, rl = len - o < pe ? (len - o > 0 ? len - o : 0) : pe;
        int64_t sl = nlen - o < pe ? (nlen - o > 0 ? nlen - o : 0) : pe;
        *dcn += gt__link(m, x, &next, sl > 0 ? snd + (size_t)o * es : NULL, (size_t)sl * es, &prev, me->rbuf,
                         (size_t)rl * es, what);
        if (rl > 0) gt__add(dst + (size_t)o * es, me->rbuf, in + (size_t)(beg + o) * es, rl, t);
      }
      gt__barrier_wait(x->bar);
      continue;
    }
    if (!next.slot) *dcn += gt__link(m, x, &next, snd, (size_t)nlen * es, &prev, NULL, 0, what);
    /* r-1 worked on the same chunk at step s-1: at step 0 that is its raw
     * contribution, later its accumulator of parity (s-1)&1. */
    if (len > 0) { /* empty chunks (n < G) may have NULL buffers */
      int64_t beg = gt_shard_begin(n, G, c);
      const char *src = s == 1 ? (const char *)prev.slot->pub_in + (size_t)beg * es
                               : prev.slot->scratch + (size_t)((s - 1) & 1) * half;
      gt__add(dst, src, in + (size_t)beg * es, len, t);
    }
    gt__barrier_wait(x->bar);
  }
}

/* All-gather steps 0..G-2, after the publish barrier; out's own range must
 * already hold the member's shard. If own_in_out, a member's shard is read
 * from its `out` at step 0 (all-reduce), else from its published `in`. Ends
 * with a barrier. skip: only the barriers, as in gt__rs_steps. Across ranks
 * the successor gets chunk r-s (what it would have read from us) and the
 * predecessor's chunk lands straight in `out`. */
static void gt__ag_steps(gt_mesh *m, const gt__grp *x, const char *in, char *out, int64_t n, size_t es,
                         bool own_in_out, bool skip, int64_t *dcn, const char *what) {
  const int G = x->G, r = x->r;
  const gt__peer prev = gt__peer_at(m, x, gt__mod(r - 1, G)), next = gt__peer_at(m, x, gt__mod(r + 1, G));
  for (int s = 0; s < G - 1; s++) {
    int c = gt__mod(r - 1 - s, G), cn = gt__mod(r - s, G);
    int64_t len = skip ? 0 : gt_shard_len(n, G, c), nlen = skip ? 0 : gt_shard_len(n, G, cn);
    int64_t beg = gt_shard_begin(n, G, c);
    if (!prev.slot || !next.slot) { /* pointers formed only for data that moves (see gt__rs_steps) */
      const char *snd = nlen == 0 ? NULL : s == 0 && !own_in_out ? in : out + (size_t)gt_shard_begin(n, G, cn) * es;
      *dcn += gt__link(m, x, &next, snd, (size_t)nlen * es, &prev, len > 0 ? out + (size_t)beg * es : NULL,
                       (size_t)len * es, what);
    }
    if (len > 0 && prev.slot) {
      const char *src = s == 0 && !own_in_out ? (const char *)prev.slot->pub_in
                                              : (const char *)prev.slot->pub_out + (size_t)beg * es;
      memcpy(out + (size_t)beg * es, src, (size_t)len * es);
    }
    gt__barrier_wait(x->bar);
  }
}

/* Counts a completed synchronous collective (and records its span on the
 * device's lane when a trace is attached). */
static void gt__account(gt_mesh *m, int d, int64_t elems, size_t es, int64_t dcn, double t0, const char *what,
                         gt_group g) {
  gt_comm_stats *st = &m->dev[d].stats;
  double t1 = gt_prof_now();
  st->bytes_sent += elems * (int64_t)es;
  st->bytes_dcn += dcn;
  st->calls += 1;
  st->seconds += t1 - t0;
  gt_trace *tr = atomic_load_explicit(&m->trace, memory_order_acquire);
  if (tr) gt_trace_span_arg(gt_trace_device(tr, d), what, "collective", t0, t1, "bytes", elems * (int64_t)es, gt__group_name(g));
}

static int64_t gt__rs_sent(int64_t n, int G, int r) { return n - gt_shard_len(n, G, r); }
static int64_t gt__ag_sent(int64_t n, int G, int r) { return n - gt_shard_len(n, G, (r + 1) % G); }

/* The whole ring reduce-scatter of a group, in the lane of x. Returns true
 * when it was skipped (an error is recorded): it moved no data. */
static bool gt__rs(gt_mesh *m, int dev, const gt__grp *x, const float *in, float *out, int64_t n, int64_t *dcn) {
  const int G = x->G;
  if (G == 1) {
    bool skip = atomic_load(&m->failed); /* alone in its group: its own view is the verdict */
    if (!skip && out != in && n > 0) memmove(out, in, (size_t)n * sizeof(float));
    gt__barrier_wait(x->bar); /* keeps "every collective synchronises" */
    return skip;
  }
  gt__slot *me = gt__member(m, x, x->r);
  gt__grow_scratch(m, me, dev, n, G, GT__F32, "gt_reduce_scatter");
  if (!gt__peer_at(m, x, gt__mod(x->r - 1, G)).slot) gt__grow_rbuf(m, me, dev, n, G, sizeof(float), "gt_reduce_scatter");
  me->pub_in = in;
  me->pub_out = out;
  bool skip = gt__barrier_wait(x->bar);
  gt__rs_steps(m, x, (const char *)in, (char *)out, n, GT__F32, skip, dcn, "gt_reduce_scatter");
  return skip;
}

/* The whole ring all-gather of a group, in the lane of x: shared by the
 * synchronous calls (lane 0) and the comm threads (lane 1), hence the same
 * bits. Returns true when it was skipped. */
static bool gt__ag(gt_mesh *m, const gt__grp *x, const char *in, char *out, int64_t n, size_t es, int64_t *dcn) {
  int64_t beg = gt_shard_begin(n, x->G, x->r), len = gt_shard_len(n, x->G, x->r);
  /* Nobody reads our own range of out, so this can precede the barrier
   * (and whether it happens need not agree with the verdict). */
  if (!atomic_load(&m->failed) && len > 0 && out + (size_t)beg * es != in)
    memmove(out + (size_t)beg * es, in, (size_t)len * es);
  gt__slot *me = gt__member(m, x, x->r);
  me->pub_in = in;
  me->pub_out = out;
  bool skip = gt__barrier_wait(x->bar);
  gt__ag_steps(m, x, in, out, n, es, false, skip, dcn, x->lane == GT__LANE_COMM ? "gt_all_gather_async" : "gt_all_gather");
  return skip;
}

static bool gt__ar(gt_mesh *m, int dev, const gt__grp *x, void *buf, int64_t n, gt__dtype t, int64_t *dcn) {
  const int G = x->G;
  const size_t es = gt__esize(t);
  gt__slot *me = gt__member(m, x, x->r);
  gt__grow_scratch(m, me, dev, n, G, t, "gt_all_reduce");
  if (!gt__peer_at(m, x, gt__mod(x->r - 1, G)).slot) gt__grow_rbuf(m, me, dev, n, G, es, "gt_all_reduce");
  me->pub_in = buf;
  me->pub_out = buf;
  bool skip = gt__barrier_wait(x->bar);
  if (G > 1) {
    char *b = buf;
    /* out_own is only dereferenced when the own chunk is non-empty. */
    char *own = gt_shard_len(n, G, x->r) > 0 ? b + (size_t)gt_shard_begin(n, G, x->r) * es : NULL;
    gt__rs_steps(m, x, b, own, n, t, skip, dcn, "gt_all_reduce");
    gt__ag_steps(m, x, b, b, n, es, true, skip, dcn, "gt_all_reduce");
  }
  return skip;
}

void gt_reduce_scatter_g(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n) {
  if ((dev = gt__enter(m, dev, &g, &n, "gt_reduce_scatter")) < 0) return;
  double t0 = gt_prof_now();
  gt__grp x = gt__group(m, GT__LANE_DEV, g, dev);
  int64_t dcn = 0;
  if (!gt__rs(m, dev, &x, in, out, n, &dcn))
    gt__account(m, dev, gt__rs_sent(n, x.G, x.r), sizeof(float), dcn, t0, "reduce_scatter", g);
}

void gt_all_gather_g(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n) {
  if ((dev = gt__enter(m, dev, &g, &n, "gt_all_gather")) < 0) return;
  double t0 = gt_prof_now();
  gt__grp x = gt__group(m, GT__LANE_DEV, g, dev);
  int64_t dcn = 0;
  if (!gt__ag(m, &x, (const char *)in, (char *)out, n, sizeof(float), &dcn))
    gt__account(m, dev, gt__ag_sent(n, x.G, x.r), sizeof(float), dcn, t0, "all_gather", g);
}

/* The same ring on 2-byte elements: the chunks are the same element ranges
 * (gt_shard_begin over n), each moved as raw bytes, so every element keeps
 * its bits and a device contributes exactly its shard; over ranks the
 * messages are half the bytes. */
void gt_all_gather_bf16_g(gt_mesh *m, int dev, gt_group g, const uint16_t *in, uint16_t *out, int64_t n) {
  if ((dev = gt__enter(m, dev, &g, &n, "gt_all_gather_bf16")) < 0) return;
  double t0 = gt_prof_now();
  gt__grp x = gt__group(m, GT__LANE_DEV, g, dev);
  int64_t dcn = 0;
  if (!gt__ag(m, &x, (const char *)in, (char *)out, n, sizeof(uint16_t), &dcn))
    gt__account(m, dev, gt__ag_sent(n, x.G, x.r), sizeof(uint16_t), dcn, t0, "all_gather (bf16)", g);
}

static void gt__all_reduce_g(gt_mesh *m, int dev, gt_group g, void *buf, int64_t n, gt__dtype t) {
  double t0 = gt_prof_now();
  gt__grp x = gt__group(m, GT__LANE_DEV, g, dev);
  int64_t dcn = 0;
  if (!gt__ar(m, dev, &x, buf, n, t, &dcn))
    gt__account(m, dev, gt__rs_sent(n, x.G, x.r) + gt__ag_sent(n, x.G, x.r), gt__esize(t), dcn, t0,
                t == GT__F32 ? "all_reduce" : "all_reduce (f64)", g);
}

void gt_all_reduce_g(gt_mesh *m, int dev, gt_group g, float *buf, int64_t n) {
  if ((dev = gt__enter(m, dev, &g, &n, "gt_all_reduce")) < 0) return;
  gt__all_reduce_g(m, dev, g, buf, n, GT__F32);
}

void gt_all_reduce_f64_g(gt_mesh *m, int dev, gt_group g, double *buf, int64_t n) {
  if ((dev = gt__enter(m, dev, &g, &n, "gt_all_reduce_f64")) < 0) return;
  gt__all_reduce_g(m, dev, g, buf, n, GT__F64);
}

/* The whole-mesh collectives are the GT_GROUP_ALL case: the same code with
 * G = N, rank = device, so the same bits, bytes and barriers as before. */
void gt_reduce_scatter(gt_mesh *m, int dev, const float *in, float *out, int64_t n) {
  gt_reduce_scatter_g(m, dev, GT_GROUP_ALL, in, out, n);
}

void gt_all_gather(gt_mesh *m, int dev, const float *in, float *out, int64_t n) {
  gt_all_gather_g(m, dev, GT_GROUP_ALL, in, out, n);
}

void gt_all_gather_bf16(gt_mesh *m, int dev, const uint16_t *in, uint16_t *out, int64_t n) {
  gt_all_gather_bf16_g(m, dev, GT_GROUP_ALL, in, out, n);
}

void gt_all_reduce(gt_mesh *m, int dev, float *buf, int64_t n) { gt_all_reduce_g(m, dev, GT_GROUP_ALL, buf, n); }

void gt_all_reduce_f64(gt_mesh *m, int dev, double *buf, int64_t n) {
  gt_all_reduce_f64_g(m, dev, GT_GROUP_ALL, buf, n);
}

/* Over ranks: each process first has the buffer on one device (root's,
 * or local device 0 through the process layer's broadcast from root's
 * rank), then its other devices copy it. Rare (no step uses it), so plain. */
void gt_broadcast(gt_mesh *m, int dev, float *buf, int64_t n, int root) {
  if ((dev = gt__enter(m, dev, NULL, &n, "gt_broadcast")) < 0) return;
  if (root < 0 || root >= m->G) {
    gt__fail(m, GT_ERR_ARG, "device %d: gt_broadcast: root %d; expected 0..%d", dev, root, m->G - 1);
    root = m->dev[dev].gid; /* never read: the verdict below skips the copy */
  }
  double t0 = gt_prof_now();
  const int G = m->G;
  const int root_rank = m->g_rank[root], root_dev = m->g_dev[root];
  gt__barrier *bar = &m->lane[GT__LANE_DEV].bar[0];
  m->dev[dev].slot[GT__LANE_DEV].pub_out = buf;
  bool skip = gt__barrier_wait(bar);
  /* the device of this process that holds root's data after phase 1 */
  int src_dev = root_rank == m->rank ? root_dev : 0;
  if (m->R > 1) {
    if (!skip && dev == 0 && n > 0) {
      const float *src = m->dev[root_dev].slot[GT__LANE_DEV].pub_out;
      if (root_rank == m->rank && root_dev != 0) memcpy(buf, src, (size_t)n * sizeof(float));
      gt_err e;
      gt_err_clear(&e);
      if (gt_dist_replica_bcast(buf, (size_t)n * sizeof(float), root_rank, "gt_broadcast", &e)) gt__fail(m, e.rc, "%s", e.msg);
    }
    gt__barrier_wait(bar);
    src_dev = 0;
  }
  const float *src = m->dev[src_dev].slot[GT__LANE_DEV].pub_out;
  if (!skip && dev != src_dev && src != buf && n > 0) memcpy(buf, src, (size_t)n * sizeof(float));
  /* Root must not return (and overwrite buf) while others still copy. */
  gt__barrier_wait(bar);
  if (!skip)
    gt__account(m, dev, G > 1 ? gt__ag_sent(n, G, m->dev[dev].gid) : 0, sizeof(float), 0, t0, "broadcast", GT_GROUP_ALL);
}

void gt_barrier(gt_mesh *m, int dev) {
  int64_t n = 0;
  if ((dev = gt__enter(m, dev, NULL, &n, "gt_barrier")) < 0) return;
  double t0 = gt_prof_now();
  bool skip = gt__barrier_wait(&m->lane[GT__LANE_DEV].bar[0]);
  if (m->R > 1) {
    if (dev == 0) {
      gt_err e;
      gt_err_clear(&e);
      if (gt_dist_replica_barrier("gt_barrier", &e)) gt__fail(m, e.rc, "%s", e.msg);
    }
    skip = gt__barrier_wait(&m->lane[GT__LANE_DEV].bar[0]) || skip;
  }
  if (!skip) gt__account(m, dev, 0, 0, 0, t0, "barrier", GT_GROUP_ALL);
}

/* ---- asynchronous all-gather -------------------------------------------- */

static int gt__all_gather_async(gt_mesh *m, int dev, gt_group g, const void *in, void *out, int64_t n, size_t es,
                                const char *who) {
  if ((dev = gt__enter(m, dev, &g, &n, who)) < 0) return 0;
  gt__dev *dv = &m->dev[dev];
  /* Resolved now: the axes cannot change while it is queued (set_axes
   * refuses while gathers are in flight), and the comm thread need not
   * read them. A misused call (repaired by gt__enter) is queued too, so the
   * peers' comm threads find their partner; its verdict skips it. */
  gt__req rq = {.g = g, .grp = gt__group(m, GT__LANE_COMM, g, dev), .in = in, .out = out, .n = n, .es = es};
  pthread_mutex_lock(&dv->cmu);
  while (dv->q_len == dv->q_cap) {
    /* Unwrap into a buffer twice the size; the comm thread only touches the
     * FIFO under cmu, which we hold. */
    gt__req *q = malloc(sizeof(gt__req) * 2 * (size_t)dv->q_cap);
    if (!q) {
      /* No memory to grow: wait until the comm thread takes a request. It
       * will: the queued gathers were issued by the peers before (or will
       * be, before they reach any collective this device is past). */
      pthread_cond_wait(&dv->cdone, &dv->cmu);
      continue;
    }
    for (int i = 0; i < dv->q_len; i++) q[i] = dv->q[(dv->q_head + i) % dv->q_cap];
    free(dv->q);
    dv->q = q;
    dv->q_head = 0;
    dv->q_cap *= 2;
  }
  rq.ticket = ++dv->issued;
  dv->q[(dv->q_head + dv->q_len) % dv->q_cap] = rq;
  dv->q_len++;
  pthread_cond_signal(&dv->cwork);
  pthread_mutex_unlock(&dv->cmu);
  return rq.ticket;
}

int gt_all_gather_async(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n) {
  return gt__all_gather_async(m, dev, g, in, out, n, sizeof(float), "gt_all_gather_async");
}

int gt_all_gather_bf16_async(gt_mesh *m, int dev, gt_group g, const uint16_t *in, uint16_t *out, int64_t n) {
  return gt__all_gather_async(m, dev, g, in, out, n, sizeof(uint16_t), "gt_all_gather_bf16_async");
}

void gt_mesh_wait(gt_mesh *m, int dev, int ticket) {
  int64_t n = 0;
  if ((dev = gt__enter(m, dev, NULL, &n, "gt_mesh_wait")) < 0) return;
  gt__dev *dv = &m->dev[dev];
  pthread_mutex_lock(&dv->cmu);
  if (ticket < 1 || ticket > dv->issued) {
    int issued = dv->issued;
    /* gt__fail takes mu: never while holding cmu (set_axes nests them the
     * other way). */
    pthread_mutex_unlock(&dv->cmu);
    if (issued == 0)
      gt__fail(m, GT_ERR_ARG,
               "device %d: gt_mesh_wait: ticket %d was never issued; expected none: the device issued no async "
               "gather",
               dev, ticket);
    else
      gt__fail(m, GT_ERR_ARG, "device %d: gt_mesh_wait: ticket %d was never issued; expected 1..%d", dev, ticket,
               issued);
    return;
  }
  /* done only grows and tickets complete in order, so done >= ticket means
   * this gather and every earlier one of the device are complete (a skipped
   * gather completes too: it still takes part in its barriers). */
  gt_trace *tr = atomic_load_explicit(&m->trace, memory_order_acquire);
  double t0 = tr ? gt_prof_now() : 0.0;
  while (dv->done < ticket) pthread_cond_wait(&dv->cdone, &dv->cmu);
  pthread_mutex_unlock(&dv->cmu);
  /* the device's time blocked on its prefetch (the gather itself is on the
   * comm lane) */
  if (tr) gt_trace_span_arg(gt_trace_device(tr, dev), "wait for gather", "collective", t0, gt_prof_now(), "ticket", ticket, NULL);
}

void gt_mesh_set_trace(gt_mesh *m, gt_trace *tr) {
  if (m) atomic_store_explicit(&m->trace, tr, memory_order_release);
}

int gt_mesh_failed(const gt_mesh *m) { return atomic_load(&m->failed) != 0; }

gt_rc gt_mesh_take_error(gt_mesh *m, gt_err *err) {
  if (!m) return gt_err_set(err, GT_ERR_ARG, "gt_mesh_take_error: mesh is NULL");
  gt_err e;
  pthread_mutex_lock(&m->mu);
  if (m->busy) {
    pthread_mutex_unlock(&m->mu);
    /* Clearing the flag between a device's check and its barrier's verdict
     * would let peers read a scratch that device never grew. */
    return gt_err_set(err, GT_ERR_ARG, "gt_mesh_take_error: called during gt_mesh_run; call it between runs");
  }
  bool had = atomic_load(&m->failed) != 0;
  if (had) {
    e = m->error;
    atomic_store(&m->failed, 0);
  }
  pthread_mutex_unlock(&m->mu);
  if (!had) return GT_OK;
  return gt_err_set(err, e.rc, "%s", e.msg);
}

/* ---- stats -------------------------------------------------------------- */

gt_comm_stats gt_mesh_stats(const gt_mesh *m, int dev) {
  gt_comm_stats z = {0, 0, 0.0, 0};
  if (!m || dev < 0 || dev >= m->n) return z;
  /* The mesh is never a const object (gt_mesh_create mallocs it), so
   * locking its mutex through a cast is fine; the comm counters may be
   * written by a comm thread at any time. */
  gt__dev *dv = (gt__dev *)&m->dev[dev];
  gt_comm_stats s = dv->stats;
  pthread_mutex_lock(&dv->cmu);
  s.bytes_sent += dv->cstats.bytes_sent;
  s.bytes_dcn += dv->cstats.bytes_dcn;
  s.calls += dv->cstats.calls;
  s.seconds += dv->cstats.seconds;
  pthread_mutex_unlock(&dv->cmu);
  return s;
}

void gt_mesh_reset_stats(gt_mesh *m) {
  if (!m) return;
  for (int d = 0; d < m->n; d++) {
    gt__dev *dv = &m->dev[d];
    dv->stats = (gt_comm_stats){0, 0, 0.0, 0};
    pthread_mutex_lock(&dv->cmu);
    dv->cstats = (gt_comm_stats){0, 0, 0.0, 0};
    pthread_mutex_unlock(&dv->cmu);
  }
}

void gt_mesh_set_threads(gt_mesh *m, int threads_per_device) {
  /* applied by each device thread at the start of its next run */
  if (threads_per_device > 0) m->threads_per_device = threads_per_device;
}

void gt_mesh_leave(gt_mesh *m, int dev) {
  if (!m || !gt__self || gt__self->mesh != m) return; /* only a device thread of this mesh */
  gt__dev *dv = &m->dev[gt__self->id];
  (void)dev; /* the thread's own device, whatever it was given */
  gt__fail(m, GT_ERR_INTERNAL, "device %d left the run before its peers' collectives (its own error says why)",
           dv->id);
  int idx[3];
  gt__instances(m, dv->gid, idx);
  /* the device thread's barriers first: peers blocked in them go on (and
   * issue the gathers this device's comm thread may still share with them) */
  gt__barrier *b = m->lane[0].bar;
  gt__barrier_leave(&b[0]);
  for (int k = 0; k < 3; k++) gt__barrier_leave(&b[idx[k]]);
  /* then the comm thread's, once it has done every gather queued before */
  pthread_mutex_lock(&dv->cmu);
  while (dv->done < dv->issued) pthread_cond_wait(&dv->cdone, &dv->cmu);
  pthread_mutex_unlock(&dv->cmu);
  b = m->lane[1].bar;
  gt__barrier_leave(&b[0]);
  for (int k = 0; k < 3; k++) gt__barrier_leave(&b[idx[k]]);
  pthread_mutex_lock(&m->mu);
  m->n_left++;
  pthread_mutex_unlock(&m->mu);
}

void gt_mesh_set_timeout(gt_mesh *m, double seconds) {
  if (seconds > 0 && isfinite(seconds)) atomic_store(&m->timeout, seconds);
}

double gt_mesh_timeout(const gt_mesh *m) {
  double t = atomic_load(&m->timeout);
  return t > 0 ? t : GT_DIST_DEFAULT_TIMEOUT;
}
