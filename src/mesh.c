/* gt_mesh: persistent worker threads standing in for devices, and collectives
 * between them over shared memory (see include/gemtrain/mesh.h).
 *
 * Threads and cores. Every device thread sets its own OpenMP thread count
 * (the nthreads ICV is per thread) to threads_per_device =
 * max(1, omp_get_num_procs() / N), at its start and again before every run.
 * With N devices the cores are split between them (on this 2-core machine: 2
 * threads for 1 device, 1 each for 2 devices): BLAS (the OpenMP build, see
 * src/threads.c) and our kernels called inside a device use that device's
 * count, so devices x threads never exceeds the cores and workers never
 * oversubscribe them. With more devices than cores every device gets 1 thread
 * and the OS time-slices them; the collectives then block rather than spin.
 *
 * Runs. gt_mesh_run publishes fn/arg, bumps a generation counter and
 * broadcasts a condition variable; each device thread waits for a generation
 * it has not run yet, runs fn once and counts itself done; the caller sleeps
 * on a second condition variable until all N are done. N = 1 uses its worker
 * thread too, so fn always runs with the same ICVs and thread identity.
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
 * never needs it. The collectives return void, so a failed grow aborts with a
 * message (it is at most 2 * ceil(n/N) elements per device).
 *
 * All-gather (ring, N-1 steps). Device d first copies its `in` into its own
 * range of `out` (skipped when in already is that range). At step s = 0..N-2
 * it copies chunk c = (d-1-s) mod N from d-1: at s = 0 from d-1's `in` (its
 * own shard), later from d-1's `out`, where d-1 received it at step s-1.
 * Nobody reads a device's own range of `out`, and the chunk d writes at step s
 * is not the one d+1 reads from it at the same step, so no double buffer.
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
 * Contracts (violations abort: these functions cannot return an error): every
 * device calls the same collectives in the same order with the same n (and
 * root); dev is the device id fn was given; collectives, gt_barrier and the
 * stats of one's own device are called only inside gt_mesh_run; gt_mesh_run,
 * gt_mesh_reset_stats and gt_mesh_destroy are called from outside it (a
 * device calling gt_mesh_run would deadlock). Devices' buffers are distinct. */
#define _POSIX_C_SOURCE 200809L

#include "gemtrain/mesh.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Far more devices than anyone simulates on a CPU; bounds the allocation. */
#define GT__MAX_DEVICES 1024
#define GT__CACHE_LINE 64
/* Pause iterations of the barrier's spin before sleeping: ~10-100 us,
 * depending on the CPU's pause latency; enough to cover a balanced step. */
#define GT__BARRIER_SPIN 2000

typedef struct gt__barrier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_int count;     /* arrivals at the current generation */
  atomic_uint gen;      /* completed barriers (wraps; only != matters) */
  int n;
  int spin;             /* 0 when devices outnumber cores */
} gt__barrier;

/* One device: its thread, its published pointers and its counters. Aligned
 * to a cache line so devices writing their own slots do not false-share. */
typedef struct gt__dev {
  _Alignas(GT__CACHE_LINE) gt_mesh *mesh;
  int id;
  pthread_t thread;
  /* Published for the current collective; read by d+1 after the barrier. */
  const void *pub_in;
  void *pub_out;
  /* Reduce-scatter accumulators: two of ceil(n/N) elements (step parity). */
  char *scratch;
  size_t scratch_cap;
  gt_comm_stats stats;
} gt__dev;

struct gt_mesh {
  int n;
  int threads_per_device; /* OpenMP threads each device computes with */
  gt__dev *dev;           /* n slots, cache-line aligned */
  int n_started;          /* threads created (for cleanup on failure) */

  /* Run hand-off, all under mu. */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* caller -> devices: new generation or quit */
  pthread_cond_t done_cv; /* devices -> caller: all done; run slot free */
  uint64_t run_gen;
  int n_done;
  bool busy; /* a gt_mesh_run is in flight (serialises concurrent callers) */
  bool quit;
  void (*fn)(int device, void *arg);
  void *arg;

  gt__barrier bar;
};

typedef enum { GT__F32, GT__F64 } gt__dtype;

static size_t gt__esize(gt__dtype t) { return t == GT__F32 ? sizeof(float) : sizeof(double); }

static void gt__die(const char *what) {
  fprintf(stderr, "gemtrain mesh: %s\n", what);
  abort();
}

static double gt__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static int gt__barrier_init(gt__barrier *b, int n, int spin) {
  if (pthread_mutex_init(&b->mu, NULL) != 0) return -1;
  if (pthread_cond_init(&b->cv, NULL) != 0) {
    pthread_mutex_destroy(&b->mu);
    return -1;
  }
  atomic_init(&b->count, 0);
  atomic_init(&b->gen, 0u);
  b->n = n;
  b->spin = spin;
  return 0;
}

static void gt__barrier_destroy(gt__barrier *b) {
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
}

static void gt__barrier_wait(gt__barrier *b) {
  /* The generation cannot move past ours before we arrive, so this load
   * reads the generation of the barrier we are about to join. */
  unsigned g = atomic_load_explicit(&b->gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->n - 1) {
    /* Last arriver. Reset before publishing the new generation: a device
     * that sees it may arrive at the next barrier at once. */
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    pthread_mutex_lock(&b->mu);
    atomic_store_explicit(&b->gen, g + 1u, memory_order_release);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return;
  }
  for (int i = 0; i < b->spin; i++) {
    if (atomic_load_explicit(&b->gen, memory_order_acquire) != g) return;
    gt__cpu_relax();
  }
  pthread_mutex_lock(&b->mu);
  /* Checked under the mutex the last arriver holds to bump it: no lost
   * wakeup, and spurious wakeups just loop. */
  while (atomic_load_explicit(&b->gen, memory_order_acquire) == g) pthread_cond_wait(&b->cv, &b->mu);
  pthread_mutex_unlock(&b->mu);
}

/* ---- threads ------------------------------------------------------------ */

static void *gt__device_main(void *p) {
  gt__dev *dv = p;
  gt_mesh *m = dv->mesh;
  /* Per-thread ICV: this device's BLAS and kernels use its share of cores. */
  omp_set_num_threads(m->threads_per_device);
  uint64_t seen = 0;
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (m->run_gen == seen && !m->quit) pthread_cond_wait(&m->work_cv, &m->mu);
    if (m->quit) break;
    seen = m->run_gen;
    void (*fn)(int, void *) = m->fn;
    void *arg = m->arg;
    pthread_mutex_unlock(&m->mu);
    /* Again before each run, so a run that changed it does not leak into
     * the next one; fn may still change it for itself. */
    omp_set_num_threads(m->threads_per_device);
    fn(dv->id, arg);
    pthread_mutex_lock(&m->mu);
    if (++m->n_done == m->n) pthread_cond_broadcast(&m->done_cv);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

static void gt__free(gt_mesh *m) {
  if (!m) return;
  if (m->dev) {
    pthread_mutex_lock(&m->mu);
    m->quit = true;
    pthread_cond_broadcast(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    for (int d = 0; d < m->n_started; d++) pthread_join(m->dev[d].thread, NULL);
    for (int d = 0; d < m->n; d++) free(m->dev[d].scratch);
    free(m->dev);
  }
  gt__barrier_destroy(&m->bar);
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
  int procs = omp_get_num_procs();
  if (procs < 1) procs = 1;
  m->n = n_devices;
  m->threads_per_device = procs / n_devices > 1 ? procs / n_devices : 1;
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
  if (gt__barrier_init(&m->bar, n_devices, n_devices <= procs ? GT__BARRIER_SPIN : 0) != 0) {
    pthread_cond_destroy(&m->done_cv);
    pthread_cond_destroy(&m->work_cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return gt_err_set(err, GT_ERR_INTERNAL, "gt_mesh_create: barrier init failed");
  }
  /* aligned_alloc wants a size that is a multiple of the alignment; the
   * struct's alignment already pads its size to one. */
  m->dev = aligned_alloc(GT__CACHE_LINE, sizeof(gt__dev) * (size_t)n_devices);
  if (!m->dev) {
    gt__free(m);
    return gt_err_set(err, GT_ERR_NOMEM, "gt_mesh_create: out of memory for %d devices", n_devices);
  }
  memset(m->dev, 0, sizeof(gt__dev) * (size_t)n_devices);
  for (int d = 0; d < n_devices; d++) {
    m->dev[d].mesh = m;
    m->dev[d].id = d;
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
  *out = m;
  return GT_OK;
}

void gt_mesh_destroy(gt_mesh *m) { gt__free(m); }

int gt_mesh_size(const gt_mesh *m) { return m ? m->n : 0; }

void gt_mesh_run(gt_mesh *m, void (*fn)(int device, void *arg), void *arg) {
  if (!m || !fn) gt__die("gt_mesh_run: NULL mesh or fn");
  pthread_mutex_lock(&m->mu);
  while (m->busy) pthread_cond_wait(&m->done_cv, &m->mu);
  m->busy = true;
  m->fn = fn;
  m->arg = arg;
  m->n_done = 0;
  m->run_gen++;
  pthread_cond_broadcast(&m->work_cv);
  while (m->n_done < m->n) pthread_cond_wait(&m->done_cv, &m->mu);
  m->busy = false;
  /* Wake a caller queued behind this run. */
  pthread_cond_broadcast(&m->done_cv);
  pthread_mutex_unlock(&m->mu);
}

/* ---- collectives -------------------------------------------------------- */

static void gt__check(const gt_mesh *m, int dev, int64_t n, const char *who) {
  if (!m) gt__die("collective on a NULL mesh");
  if (dev < 0 || dev >= m->n || n < 0) {
    fprintf(stderr, "gemtrain mesh: %s: device %d of %d, n = %lld\n", who, dev, m->n, (long long)n);
    abort();
  }
}

/* The largest chunk: shards differ by at most one element. */
static int64_t gt__max_chunk(int64_t n, int N) { return (n + N - 1) / N; }

/* Scratch for two accumulators of the largest chunk. Called by the device
 * itself before the publish barrier, so no other device is reading it. */
static void gt__grow_scratch(gt__dev *dv, int64_t n, int N, gt__dtype t) {
  if (N < 3) return; /* accumulators only between the first and last step */
  size_t need = 2 * (size_t)gt__max_chunk(n, N) * gt__esize(t);
  if (need <= dv->scratch_cap) return;
  free(dv->scratch);
  dv->scratch = malloc(need);
  if (!dv->scratch) {
    fprintf(stderr, "gemtrain mesh: device %d: out of memory for %zu bytes of reduce scratch\n", dv->id, need);
    abort();
  }
  dv->scratch_cap = need;
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

/* Reduce-scatter steps 1..N-1 (step 0 is the publish of `in`, already done
 * and followed by a barrier). Ends with a barrier. */
static void gt__rs_steps(gt_mesh *m, int d, const char *in, char *out_own, int64_t n, gt__dtype t) {
  const int N = m->n;
  const size_t es = gt__esize(t);
  const int p = gt__mod(d - 1, N);
  const gt__dev *prev = &m->dev[p];
  const size_t half = (size_t)gt__max_chunk(n, N) * es;
  for (int s = 1; s < N; s++) {
    int c = gt__mod(d - 1 - s, N);
    int64_t beg = gt_shard_begin(n, N, c), len = gt_shard_len(n, N, c);
    /* d-1 worked on the same chunk at step s-1: at step 0 that is its raw
     * contribution, later its accumulator of parity (s-1)&1. */
    if (len > 0) { /* empty chunks (n < N) may have NULL buffers */
      const char *src = s == 1 ? (const char *)prev->pub_in + (size_t)beg * es
                               : prev->scratch + (size_t)((s - 1) & 1) * half;
      char *dst = s == N - 1 ? out_own : m->dev[d].scratch + (size_t)(s & 1) * half;
      gt__add(dst, src, in + (size_t)beg * es, len, t);
    }
    gt__barrier_wait(&m->bar);
  }
}

/* All-gather steps 0..N-2, after the publish barrier; out's own range must
 * already hold the device's shard. If own_in_out, a device's shard is read
 * from its `out` at step 0 (all-reduce), else from its published `in`. Ends
 * with a barrier. */
static void gt__ag_steps(gt_mesh *m, int d, char *out, int64_t n, size_t es, bool own_in_out) {
  const int N = m->n;
  const gt__dev *prev = &m->dev[gt__mod(d - 1, N)];
  for (int s = 0; s < N - 1; s++) {
    int c = gt__mod(d - 1 - s, N);
    int64_t beg = gt_shard_begin(n, N, c), len = gt_shard_len(n, N, c);
    if (len > 0) {
      const char *src = s == 0 && !own_in_out ? (const char *)prev->pub_in
                                              : (const char *)prev->pub_out + (size_t)beg * es;
      memcpy(out + (size_t)beg * es, src, (size_t)len * es);
    }
    gt__barrier_wait(&m->bar);
  }
}

static void gt__account(gt_mesh *m, int d, int64_t elems, size_t es, double t0) {
  gt_comm_stats *st = &m->dev[d].stats;
  st->bytes_sent += elems * (int64_t)es;
  st->calls += 1;
  st->seconds += gt__now() - t0;
}

static int64_t gt__rs_sent(int64_t n, int N, int d) { return n - gt_shard_len(n, N, d); }
static int64_t gt__ag_sent(int64_t n, int N, int d) { return n - gt_shard_len(n, N, (d + 1) % N); }

void gt_reduce_scatter(gt_mesh *m, int dev, const float *in, float *out, int64_t n) {
  gt__check(m, dev, n, "gt_reduce_scatter");
  double t0 = gt__now();
  const int N = m->n;
  gt__dev *dv = &m->dev[dev];
  if (N == 1) {
    if (out != in && n > 0) memmove(out, in, (size_t)n * sizeof(float));
    gt__barrier_wait(&m->bar); /* keeps "every collective synchronises" */
  } else {
    gt__grow_scratch(dv, n, N, GT__F32);
    dv->pub_in = in;
    dv->pub_out = out;
    gt__barrier_wait(&m->bar);
    gt__rs_steps(m, dev, (const char *)in, (char *)out, n, GT__F32);
  }
  gt__account(m, dev, gt__rs_sent(n, N, dev), sizeof(float), t0);
}

void gt_all_gather(gt_mesh *m, int dev, const float *in, float *out, int64_t n) {
  gt__check(m, dev, n, "gt_all_gather");
  double t0 = gt__now();
  const int N = m->n;
  int64_t beg = gt_shard_begin(n, N, dev), len = gt_shard_len(n, N, dev);
  /* Nobody reads our own range of out, so this can precede the barrier. */
  if (len > 0 && out + beg != in) memmove(out + beg, in, (size_t)len * sizeof(float));
  m->dev[dev].pub_in = in;
  m->dev[dev].pub_out = out;
  gt__barrier_wait(&m->bar);
  gt__ag_steps(m, dev, (char *)out, n, sizeof(float), false);
  gt__account(m, dev, gt__ag_sent(n, N, dev), sizeof(float), t0);
}

static void gt__all_reduce(gt_mesh *m, int dev, void *buf, int64_t n, gt__dtype t) {
  double t0 = gt__now();
  const int N = m->n;
  const size_t es = gt__esize(t);
  gt__dev *dv = &m->dev[dev];
  gt__grow_scratch(dv, n, N, t);
  dv->pub_in = buf;
  dv->pub_out = buf;
  gt__barrier_wait(&m->bar);
  if (N > 1) {
    char *b = buf;
    /* out_own is only dereferenced when the own chunk is non-empty. */
    char *own = gt_shard_len(n, N, dev) > 0 ? b + (size_t)gt_shard_begin(n, N, dev) * es : NULL;
    gt__rs_steps(m, dev, b, own, n, t);
    gt__ag_steps(m, dev, b, n, es, true);
  }
  gt__account(m, dev, gt__rs_sent(n, N, dev) + gt__ag_sent(n, N, dev), es, t0);
}

void gt_all_reduce(gt_mesh *m, int dev, float *buf, int64_t n) {
  gt__check(m, dev, n, "gt_all_reduce");
  gt__all_reduce(m, dev, buf, n, GT__F32);
}

void gt_all_reduce_f64(gt_mesh *m, int dev, double *buf, int64_t n) {
  gt__check(m, dev, n, "gt_all_reduce_f64");
  gt__all_reduce(m, dev, buf, n, GT__F64);
}

void gt_broadcast(gt_mesh *m, int dev, float *buf, int64_t n, int root) {
  gt__check(m, dev, n, "gt_broadcast");
  if (root < 0 || root >= m->n) {
    fprintf(stderr, "gemtrain mesh: gt_broadcast: root %d of %d devices\n", root, m->n);
    abort();
  }
  double t0 = gt__now();
  const int N = m->n;
  m->dev[dev].pub_out = buf;
  gt__barrier_wait(&m->bar);
  const float *src = m->dev[root].pub_out;
  if (dev != root && src != buf && n > 0) memcpy(buf, src, (size_t)n * sizeof(float));
  /* Root must not return (and overwrite buf) while others still copy. */
  gt__barrier_wait(&m->bar);
  gt__account(m, dev, N > 1 ? gt__ag_sent(n, N, dev) : 0, sizeof(float), t0);
}

void gt_barrier(gt_mesh *m, int dev) {
  gt__check(m, dev, 0, "gt_barrier");
  double t0 = gt__now();
  gt__barrier_wait(&m->bar);
  gt__account(m, dev, 0, 0, t0);
}

/* ---- stats -------------------------------------------------------------- */

gt_comm_stats gt_mesh_stats(const gt_mesh *m, int dev) {
  gt_comm_stats z = {0, 0, 0.0};
  if (!m || dev < 0 || dev >= m->n) return z;
  return m->dev[dev].stats;
}

void gt_mesh_reset_stats(gt_mesh *m) {
  if (!m) return;
  for (int d = 0; d < m->n; d++) m->dev[d].stats = (gt_comm_stats){0, 0, 0.0};
}

void gt_mesh_set_threads(gt_mesh *m, int threads_per_device) {
  /* applied by each device thread at the start of its next run */
  if (threads_per_device > 0) m->threads_per_device = threads_per_device;
}
