/* gt_mesh and its collectives against serial references computed here.
 *
 * Reductions are compared BIT for bit with a serial sum in the ring order
 * mesh.h documents (chunk c summed over devices c+1, c+2, ..., c mod N), and
 * with a wider-precision sum to the float error bound of that summation.
 * Sizes: 0, 1, 7 (prime, below most device counts, so empty shards), 100003
 * (a larger prime, uneven shards of thousands of elements) and 5040
 * (divisible by every N in 1..8). The in-process collectives have no
 * size threshold, so a larger prime would only add fresh pages. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/team.h"
#include "base/threads.h"
#include "mesh/mesh.h"
#include "gt_testutil.h"

#define MAX_DEV 8
static const int64_t SIZES[] = {0, 1, 7, 100003, 5040};
#define N_SIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

static gt_mesh *make_mesh(int n_dev) {
  gt_mesh *m = NULL;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_mesh_create(&m, n_dev, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_mesh_size(m), n_dev);
  return m;
}

static uint64_t seed_for(int n_dev, int64_t n, int d, int salt) {
  return 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 1000003u + (uint64_t)n_dev * 131u + (uint64_t)d * 7919u +
                                  (uint64_t)salt * 104729u + 1u);
}

static double rand_f64(uint64_t *s) {
  return (double)(gt_test_rand_u64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static size_t nbytes(int64_t n, size_t es) { return (size_t)(n > 0 ? n : 1) * es; }

/* ---- jobs: what every device does inside gt_mesh_run ---------------------- */

enum op { OP_RS, OP_AG, OP_AG_ALIAS, OP_AR, OP_AR64, OP_BCAST };

typedef struct job {
  gt_mesh *m;
  int n_dev;
  int64_t n;
  enum op op;
  int root;
  float *in[MAX_DEV];
  float *out[MAX_DEV];
  double *buf64[MAX_DEV];
} job;

static void job_fn(int d, void *arg) {
  job *j = arg;
  int64_t beg = gt_shard_begin(j->n, j->n_dev, d);
  switch (j->op) {
  case OP_RS: gt_reduce_scatter(j->m, d, j->in[d], j->out[d], j->n); break;
  case OP_AG: gt_all_gather(j->m, d, j->in[d], j->out[d], j->n); break;
  case OP_AG_ALIAS: gt_all_gather(j->m, d, j->out[d] + beg, j->out[d], j->n); break;
  case OP_AR: gt_all_reduce(j->m, d, j->out[d], j->n); break;
  case OP_AR64: gt_all_reduce_f64(j->m, d, j->buf64[d], j->n); break;
  case OP_BCAST: gt_broadcast(j->m, d, j->out[d], j->n, j->root); break;
  }
}

static void run_job(job *j, enum op op) {
  j->op = op;
  gt_mesh_run(j->m, job_fn, j);
}

/* ---- serial references ---------------------------------------------------- */

/* Chunk c accumulated in the documented ring order: ((x_{c+1} + x_{c+2}) +
 * ...) + x_c, indices mod N, one float rounding per addition. */
static void ring_sum_f32(float *const *x, int N, int64_t n, float *ref) {
  for (int c = 0; c < N; c++) {
    int64_t b = gt_shard_begin(n, N, c), e = b + gt_shard_len(n, N, c);
    for (int64_t i = b; i < e; i++) {
      float acc = x[(c + 1) % N][i];
      for (int k = 2; k <= N; k++) acc = acc + x[(c + k) % N][i];
      ref[i] = acc;
    }
  }
}

static void ring_sum_f64(double *const *x, int N, int64_t n, double *ref) {
  for (int c = 0; c < N; c++) {
    int64_t b = gt_shard_begin(n, N, c), e = b + gt_shard_len(n, N, c);
    for (int64_t i = b; i < e; i++) {
      double acc = x[(c + 1) % N][i];
      for (int k = 2; k <= N; k++) acc = acc + x[(c + k) % N][i];
      ref[i] = acc;
    }
  }
}

/* |got - exact sum| within the recursive-summation bound (N-1) u sum|x|
 * (u = 2^-24), with 1% slack; exact sum and sum|x| in double (exact for <= 8
 * floats of similar magnitude to well below u). */
static void check_close_f32(const float *got, float *const *x, int N, int64_t n, int64_t lo, int64_t hi) {
  const double u = ldexp(1.0, -24);
  for (int64_t i = lo; i < hi; i++) {
    double s = 0, a = 0;
    for (int k = 0; k < N; k++) {
      s += (double)x[k][i];
      a += fabs((double)x[k][i]);
    }
    double tol = 1.01 * (N - 1) * u * a + 1e-30;
    /* Assert only on failure: every ck_assert costs Check a write. */
    if (!(fabs((double)got[i] - s) <= tol))
      ck_abort_msg("N=%d n=%lld i=%lld: %.9g vs %.17g (tol %.3g)", N, (long long)n, (long long)i,
                   (double)got[i], s, tol);
  }
}

static void check_close_f64(const double *got, double *const *x, int N, int64_t n) {
  const double u = ldexp(1.0, -53);
  for (int64_t i = 0; i < n; i++) {
    long double s = 0, a = 0;
    for (int k = 0; k < N; k++) {
      s += (long double)x[k][i];
      a += fabsl((long double)x[k][i]);
    }
    double tol = (double)(1.01L * (N - 1) * u * a + 4.0L * N * ldexpl(1.0L, -64) * a) + 1e-300;
    if (!(fabs(got[i] - (double)s) <= tol))
      ck_abort_msg("N=%d n=%lld i=%lld: %.17g vs %.17g", N, (long long)n, (long long)i, got[i], (double)s);
  }
}

static void free_job(job *j) {
  for (int d = 0; d < j->n_dev; d++) {
    free(j->in[d]);
    free(j->out[d]);
    free(j->buf64[d]);
  }
}

/* ---- reduce-scatter ------------------------------------------------------- */

START_TEST(test_reduce_scatter) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    for (int si = 0; si < N_SIZES; si++) {
      int64_t n = SIZES[si];
      job j = {.m = m, .n_dev = N, .n = n};
      float *keep[MAX_DEV];
      for (int d = 0; d < N; d++) {
        uint64_t s = seed_for(N, n, d, 1);
        j.in[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
        keep[d] = malloc(nbytes(n, 4));
        if (n) memcpy(keep[d], j.in[d], (size_t)n * 4);
        int64_t len = gt_shard_len(n, N, d);
        j.out[d] = malloc(nbytes(len, 4));
        for (int64_t i = 0; i < len; i++) j.out[d][i] = NAN;
      }
      float *ref = malloc(nbytes(n, 4));
      ring_sum_f32(j.in, N, n, ref);
      run_job(&j, OP_RS);
      for (int d = 0; d < N; d++) {
        int64_t b = gt_shard_begin(n, N, d), len = gt_shard_len(n, N, d);
        ck_assert_msg(len == 0 || memcmp(j.out[d], ref + b, (size_t)len * 4) == 0,
                      "reduce_scatter N=%d n=%lld device %d: not bit-identical to the ring order", N,
                      (long long)n, d);
        check_close_f32(j.out[d] - b, j.in, N, n, b, b + len);
        ck_assert_msg(n == 0 || memcmp(j.in[d], keep[d], (size_t)n * 4) == 0,
                      "reduce_scatter N=%d n=%lld modified device %d's input", N, (long long)n, d);
        free(keep[d]);
      }
      free(ref);
      free_job(&j);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

/* The bit-identical comparisons above only mean something if the order is
 * visible in the bits: the ring order must differ from a plain 0..N-1 sum. */
START_TEST(test_ring_order_is_visible) {
  const int N = 8;
  const int64_t n = 100003;
  float *x[N];
  for (int d = 0; d < N; d++) {
    uint64_t s = seed_for(N, n, d, 2);
    x[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
  }
  float *ring = malloc((size_t)n * 4);
  ring_sum_f32(x, N, n, ring);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; i++) {
    float acc = x[0][i];
    for (int k = 1; k < N; k++) acc += x[k][i];
    differ += acc != ring[i];
  }
  ck_assert_msg(differ > n / 100, "only %lld of %lld sums depend on the order", (long long)differ,
                (long long)n);
  free(ring);
  for (int d = 0; d < N; d++) free(x[d]);
}
END_TEST

/* ---- all-gather ----------------------------------------------------------- */

static void all_gather_case(bool alias) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    for (int si = 0; si < N_SIZES; si++) {
      int64_t n = SIZES[si];
      job j = {.m = m, .n_dev = N, .n = n};
      float *want = malloc(nbytes(n, 4));
      for (int d = 0; d < N; d++) {
        int64_t b = gt_shard_begin(n, N, d), len = gt_shard_len(n, N, d);
        uint64_t s = seed_for(N, n, d, 3);
        j.in[d] = gt_test_alloc_fill(len, &s, -1.f, 1.f);
        if (len) memcpy(want + b, j.in[d], (size_t)len * 4);
        j.out[d] = malloc(nbytes(n, 4));
        for (int64_t i = 0; i < n; i++) j.out[d][i] = NAN;
        if (alias && len) memcpy(j.out[d] + b, j.in[d], (size_t)len * 4);
      }
      run_job(&j, alias ? OP_AG_ALIAS : OP_AG);
      for (int d = 0; d < N; d++)
        ck_assert_msg(n == 0 || memcmp(j.out[d], want, (size_t)n * 4) == 0,
                      "all_gather%s N=%d n=%lld device %d: wrong result", alias ? " (aliased)" : "", N,
                      (long long)n, d);
      free(want);
      free_job(&j);
    }
    gt_mesh_destroy(m);
  }
}

START_TEST(test_all_gather) { all_gather_case(false); }
END_TEST

START_TEST(test_all_gather_in_aliases_out) { all_gather_case(true); }
END_TEST

/* ---- all-reduce ----------------------------------------------------------- */

START_TEST(test_all_reduce) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    for (int si = 0; si < N_SIZES; si++) {
      int64_t n = SIZES[si];
      job j = {.m = m, .n_dev = N, .n = n};
      for (int d = 0; d < N; d++) {
        uint64_t s = seed_for(N, n, d, 4);
        j.in[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
        j.out[d] = malloc(nbytes(n, 4));
        if (n) memcpy(j.out[d], j.in[d], (size_t)n * 4);
      }
      float *ref = malloc(nbytes(n, 4));
      ring_sum_f32(j.in, N, n, ref);
      run_job(&j, OP_AR);
      for (int d = 0; d < N; d++)
        ck_assert_msg(n == 0 || memcmp(j.out[d], ref, (size_t)n * 4) == 0,
                      "all_reduce N=%d n=%lld device %d: not bit-identical to the ring order", N,
                      (long long)n, d);
      check_close_f32(j.out[0], j.in, N, n, 0, n);

      /* Determinism: the same inputs again give the same bits. */
      float *first = malloc(nbytes(n, 4));
      if (n) memcpy(first, j.out[0], (size_t)n * 4);
      for (int d = 0; d < N; d++)
        if (n) memcpy(j.out[d], j.in[d], (size_t)n * 4);
      run_job(&j, OP_AR);
      for (int d = 0; d < N; d++)
        ck_assert_msg(n == 0 || memcmp(j.out[d], first, (size_t)n * 4) == 0,
                      "all_reduce N=%d n=%lld device %d: second run differs", N, (long long)n, d);
      free(first);
      free(ref);
      free_job(&j);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

START_TEST(test_all_reduce_f64) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    for (int si = 0; si < N_SIZES; si++) {
      int64_t n = SIZES[si];
      job j = {.m = m, .n_dev = N, .n = n};
      double *x[MAX_DEV];
      for (int d = 0; d < N; d++) {
        uint64_t s = seed_for(N, n, d, 5);
        x[d] = malloc(nbytes(n, 8));
        for (int64_t i = 0; i < n; i++) x[d][i] = rand_f64(&s);
        j.buf64[d] = malloc(nbytes(n, 8));
        if (n) memcpy(j.buf64[d], x[d], (size_t)n * 8);
      }
      double *ref = malloc(nbytes(n, 8));
      ring_sum_f64(x, N, n, ref);
      run_job(&j, OP_AR64);
      for (int d = 0; d < N; d++)
        ck_assert_msg(n == 0 || memcmp(j.buf64[d], ref, (size_t)n * 8) == 0,
                      "all_reduce_f64 N=%d n=%lld device %d: not bit-identical to the ring order", N,
                      (long long)n, d);
      check_close_f64(j.buf64[0], x, N, n);
      for (int d = 0; d < N; d++) free(x[d]);
      free(ref);
      free_job(&j);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

/* ---- broadcast ------------------------------------------------------------ */

START_TEST(test_broadcast_every_root) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    for (int si = 0; si < N_SIZES; si++) {
      int64_t n = SIZES[si];
      for (int root = 0; root < N; root++) {
        job j = {.m = m, .n_dev = N, .n = n, .root = root};
        for (int d = 0; d < N; d++) {
          uint64_t s = seed_for(N, n, d, 6 + root);
          j.out[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
        }
        float *want = malloc(nbytes(n, 4));
        if (n) memcpy(want, j.out[root], (size_t)n * 4);
        run_job(&j, OP_BCAST);
        for (int d = 0; d < N; d++)
          ck_assert_msg(n == 0 || memcmp(j.out[d], want, (size_t)n * 4) == 0,
                        "broadcast N=%d n=%lld root %d: device %d differs", N, (long long)n, root, d);
        free(want);
        free_job(&j);
      }
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

/* ---- stats ---------------------------------------------------------------- */

START_TEST(test_stats_ring_bytes) {
  static const struct {
    int N;
    int64_t n;
  } cases[] = {{1, 1000}, {2, 1000}, {3, 7}, {4, 1}, {5, 1003}, {8, 5040}, {8, 3}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    int N = cases[ci].N;
    int64_t n = cases[ci].n;
    gt_mesh *m = make_mesh(N);
    job j = {.m = m, .n_dev = N, .n = n, .root = N - 1};
    for (int d = 0; d < N; d++) {
      uint64_t s = seed_for(N, n, d, 20);
      j.in[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
      j.out[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
      j.buf64[d] = calloc((size_t)(n > 0 ? n : 1), 8);
    }
    /* One collective at a time: bytes of each against its ring formula. */
    for (int op = OP_RS; op <= OP_BCAST; op++) {
      gt_mesh_reset_stats(m);
      for (int d = 0; d < N; d++) {
        gt_comm_stats st = gt_mesh_stats(m, d);
        ck_assert(st.bytes_sent == 0 && st.calls == 0 && st.seconds == 0.0);
      }
      run_job(&j, (enum op)op);
      for (int d = 0; d < N; d++) {
        int64_t rs = n - gt_shard_len(n, N, d);           /* every chunk but its own */
        int64_t ag = n - gt_shard_len(n, N, (d + 1) % N); /* every chunk but d+1's */
        int64_t want = 0;
        switch ((enum op)op) {
        case OP_RS: want = 4 * rs; break;
        case OP_AG:
        case OP_AG_ALIAS:
        case OP_BCAST: want = 4 * ag; break;
        case OP_AR: want = 4 * (rs + ag); break;
        case OP_AR64: want = 8 * (rs + ag); break;
        }
        gt_comm_stats st = gt_mesh_stats(m, d);
        ck_assert_msg(st.bytes_sent == want, "op %d N=%d n=%lld device %d: %lld bytes, ring formula %lld", op,
                      N, (long long)n, d, (long long)st.bytes_sent, (long long)want);
        ck_assert_int_eq(st.calls, 1);
        ck_assert(st.seconds >= 0.0 && st.seconds < 10.0);
      }
    }
    /* (N-1)/N * n * 4 per device when N divides n. */
    if (N > 1 && n % N == 0) {
      gt_mesh_reset_stats(m);
      run_job(&j, OP_BCAST);
      ck_assert_int_eq(gt_mesh_stats(m, 0).bytes_sent, (N - 1) * (n / N) * 4);
    }
    /* Accumulation over calls, then reset. */
    gt_mesh_reset_stats(m);
    run_job(&j, OP_AR);
    run_job(&j, OP_AR);
    run_job(&j, OP_RS);
    for (int d = 0; d < N; d++) {
      gt_comm_stats st = gt_mesh_stats(m, d);
      int64_t rs = n - gt_shard_len(n, N, d), ag = n - gt_shard_len(n, N, (d + 1) % N);
      ck_assert_int_eq(st.bytes_sent, 4 * (2 * (rs + ag) + rs));
      ck_assert_int_eq(st.calls, 3);
      ck_assert(st.seconds > 0.0);
    }
    gt_mesh_reset_stats(m);
    for (int d = 0; d < N; d++) {
      gt_comm_stats st = gt_mesh_stats(m, d);
      ck_assert(st.bytes_sent == 0 && st.calls == 0 && st.seconds == 0.0);
    }
    free_job(&j);
    gt_mesh_destroy(m);
  }
}
END_TEST

/* ---- barrier -------------------------------------------------------------- */

#define BARRIER_ROUNDS 300

typedef struct barrier_job {
  gt_mesh *m;
  int n_dev;
  atomic_int arrived;
  atomic_int bad;
} barrier_job;

static void barrier_fn(int d, void *arg) {
  barrier_job *b = arg;
  for (int r = 0; r < BARRIER_ROUNDS; r++) {
    /* Make a different device arrive last now and then. */
    if (r % 50 == d % 50) nanosleep(&(struct timespec){0, 200000}, NULL);
    atomic_fetch_add(&b->arrived, 1);
    gt_barrier(b->m, d);
    if (atomic_load(&b->arrived) != b->n_dev * (r + 1)) atomic_fetch_add(&b->bad, 1);
    /* Nobody starts the next round before everyone checked this one. */
    gt_barrier(b->m, d);
  }
}

START_TEST(test_barrier) {
  for (int N = 1; N <= MAX_DEV; N++) {
    barrier_job b = {.m = make_mesh(N), .n_dev = N};
    atomic_init(&b.arrived, 0);
    atomic_init(&b.bad, 0);
    gt_mesh_run(b.m, barrier_fn, &b);
    ck_assert_msg(atomic_load(&b.bad) == 0, "N=%d: %d devices passed a barrier early", N, atomic_load(&b.bad));
    ck_assert_int_eq(atomic_load(&b.arrived), N * BARRIER_ROUNDS);
    ck_assert_int_eq(gt_mesh_stats(b.m, 0).calls, 2 * BARRIER_ROUNDS);
    ck_assert_int_eq(gt_mesh_stats(b.m, 0).bytes_sent, 0);
    gt_mesh_destroy(b.m);
  }
}
END_TEST

/* ---- gt_mesh_run ---------------------------------------------------------- */

#define RUNS 100

typedef struct run_job_t {
  int n_dev;
  int run;
  atomic_int calls[MAX_DEV];
  atomic_int bad_id;
  pthread_t tid[RUNS][MAX_DEV];
  int omp_threads[MAX_DEV];
} run_job_t;

static void run_fn(int d, void *arg) {
  run_job_t *r = arg;
  if (d < 0 || d >= r->n_dev) {
    atomic_fetch_add(&r->bad_id, 1);
    return;
  }
  atomic_fetch_add(&r->calls[d], 1);
  r->tid[r->run][d] = pthread_self();
  r->omp_threads[d] = gt_team_size(gt_team_current());
  gt_team_set_current(gt_team_alone()); /* must not leak into the next run */
}

START_TEST(test_run_once_per_device_and_reuse) {
  int procs = gt_threads_process_cores();
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    run_job_t *r = calloc(1, sizeof *r);
    r->n_dev = N;
    pthread_t self = pthread_self();
    for (int run = 0; run < RUNS; run++) {
      r->run = run;
      gt_mesh_run(m, run_fn, r);
      for (int d = 0; d < N; d++) {
        ck_assert_msg(atomic_load(&r->calls[d]) == run + 1, "N=%d run %d: device %d ran %d times", N, run, d,
                      atomic_load(&r->calls[d]));
        /* The cores are split between devices: max(1, procs / N) each. */
        int want = procs / N > 1 ? procs / N : 1;
        ck_assert_msg(r->omp_threads[d] == want, "N=%d device %d: a team of %d threads, want %d", N, d,
                      r->omp_threads[d], want);
      }
    }
    ck_assert_int_eq(atomic_load(&r->bad_id), 0);
    for (int d = 0; d < N; d++) {
      ck_assert(!pthread_equal(r->tid[0][d], self));
      for (int e = 0; e < d; e++) ck_assert_msg(!pthread_equal(r->tid[0][d], r->tid[0][e]), "shared thread");
      for (int run = 1; run < RUNS; run++)
        ck_assert_msg(pthread_equal(r->tid[run][d], r->tid[0][d]), "N=%d device %d: new thread in run %d", N,
                      d, run);
    }
    free(r);
    gt_mesh_destroy(m);
  }
}
END_TEST

START_TEST(test_create_rejects_bad_count) {
  gt_mesh *m = (gt_mesh *)&m;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_mesh_create(&m, 0, &e), GT_ERR_ARG);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(e.msg, "n_devices") != NULL, "%s", e.msg);
  ck_assert_int_eq(gt_mesh_create(&m, -3, NULL), GT_ERR_ARG);
  gt_mesh_destroy(NULL);
}
END_TEST

/* ---- a long mixed sequence: slots, scratch growth and barrier reuse ------- */

#define MIX_ITERS 300

typedef struct mix_job {
  gt_mesh *m;
  int n_dev;
  atomic_int bad;
} mix_job;

/* Small integers, so every sum is exact whatever the order and the device can
 * check its own results. */
static float mix_val(int it, int d, int64_t i) { return (float)((it * 7 + d * 13 + (int)i * 3) % 41 - 20); }

static void mix_fn(int d, void *arg) {
  mix_job *j = arg;
  const int N = j->n_dev;
  float buf[64], in[64], out[64];
  for (int it = 0; it < MIX_ITERS; it++) {
    int64_t n = (it * 11) % 64; /* varies: grows and shrinks scratch, hits n < N */
    for (int64_t i = 0; i < n; i++) buf[i] = in[i] = mix_val(it, d, i);
    gt_all_reduce(j->m, d, buf, n);
    for (int64_t i = 0; i < n; i++) {
      float want = 0;
      for (int e = 0; e < N; e++) want += mix_val(it, e, i);
      if (buf[i] != want) atomic_fetch_add(&j->bad, 1);
    }
    int64_t b = gt_shard_begin(n, N, d), len = gt_shard_len(n, N, d);
    gt_reduce_scatter(j->m, d, in, out, n);
    for (int64_t i = 0; i < len; i++)
      if (out[i] != buf[b + i]) atomic_fetch_add(&j->bad, 1);
    gt_all_gather(j->m, d, out, in, n);
    for (int64_t i = 0; i < n; i++)
      if (in[i] != buf[i]) atomic_fetch_add(&j->bad, 1);
    int root = it % N;
    for (int64_t i = 0; i < n; i++) buf[i] = (float)(d == root ? it + i : -1);
    gt_broadcast(j->m, d, buf, n, root);
    for (int64_t i = 0; i < n; i++)
      if (buf[i] != (float)(it + i)) atomic_fetch_add(&j->bad, 1);
    if (it % 3 == 0) gt_barrier(j->m, d);
  }
}

START_TEST(test_mixed_sequence) {
  for (int N = 1; N <= MAX_DEV; N++) {
    mix_job j = {.m = make_mesh(N), .n_dev = N};
    atomic_init(&j.bad, 0);
    gt_mesh_run(j.m, mix_fn, &j);
    ck_assert_msg(atomic_load(&j.bad) == 0, "N=%d: %d wrong elements", N, atomic_load(&j.bad));
    gt_mesh_destroy(j.m);
  }
}
END_TEST

/* ---- mesh axes and groups ------------------------------------------------- */

static const gt_group GROUPS[] = {GT_GROUP_ALL, GT_GROUP_FSDP, GT_GROUP_DATA};
static const char *const GROUP_NAME[] = {"all", "fsdp", "data"};
static const int64_t GSIZES[] = {0, 1, 7, 100003};
#define N_GSIZES ((int)(sizeof GSIZES / sizeof GSIZES[0]))

/* Every data x fsdp factorisation of N; returns how many, data values out. */
static int factorisations(int N, int *data) {
  int k = 0;
  for (int a = 1; a <= N; a++)
    if (N % a == 0) data[k++] = a;
  return k;
}

static void set_axes_ok(gt_mesh *m, int data, int fsdp) {
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_mesh_set_axes(m, data, fsdp, &e) == GT_OK, "%s", e.msg);
}

/* The group of device d re-derived from the grid definition (data index
 * d / fsdp, fsdp index d % fsdp), independently of mesh.c: members in rank
 * order; returns the size and d's rank in *rank. */
static int ref_group(int N, int fsdp, gt_group g, int d, int *mem, int *rank) {
  int G = 0;
  for (int e = 0; e < N; e++) {
    bool same = g == GT_GROUP_ALL || (g == GT_GROUP_FSDP && e / fsdp == d / fsdp) ||
                (g == GT_GROUP_DATA && e % fsdp == d % fsdp);
    if (!same) continue;
    if (e == d) *rank = G;
    mem[G++] = e; /* increasing e is increasing rank for every kind */
  }
  return G;
}

START_TEST(test_axes_group_sizes_and_ranks) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    /* Default 1 x N: fsdp is the whole mesh, data groups are singletons. */
    ck_assert_int_eq(gt_mesh_group_size(m, GT_GROUP_ALL), N);
    ck_assert_int_eq(gt_mesh_group_size(m, GT_GROUP_FSDP), N);
    ck_assert_int_eq(gt_mesh_group_size(m, GT_GROUP_DATA), 1);
    int datas[MAX_DEV];
    int nf = factorisations(N, datas);
    for (int f = 0; f < nf; f++) {
      int data = datas[f], fsdp = N / data;
      set_axes_ok(m, data, fsdp);
      for (int gi = 0; gi < 3; gi++) {
        gt_group g = GROUPS[gi];
        int want_G = g == GT_GROUP_ALL ? N : g == GT_GROUP_FSDP ? fsdp : data;
        ck_assert_int_eq(gt_mesh_group_size(m, g), want_G);
        for (int d = 0; d < N; d++) {
          int mem[MAX_DEV], rank = -1;
          int G = ref_group(N, fsdp, g, d, mem, &rank);
          ck_assert_msg(G == want_G && gt_mesh_group_rank(m, g, d) == rank,
                        "N=%d %dx%d %s device %d: rank %d, want %d (group size %d)", N, data, fsdp,
                        GROUP_NAME[gi], d, gt_mesh_group_rank(m, g, d), rank, G);
          /* Ranks within the group are 0..G-1, each once. */
          int seen = 0;
          for (int k = 0; k < G; k++) seen |= 1 << gt_mesh_group_rank(m, g, mem[k]);
          ck_assert_int_eq(seen, (1 << G) - 1);
        }
      }
      ck_assert_int_eq(gt_mesh_group_rank(m, GT_GROUP_FSDP, N), -1);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

START_TEST(test_set_axes_rejects_wrong_product) {
  gt_mesh *m = make_mesh(6);
  set_axes_ok(m, 3, 2);
  static const int bad[][2] = {{4, 2}, {2, 2}, {6, 6}, {0, 6}, {6, 0}, {-2, -3}, {1, 5}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gt_err e;
    gt_err_clear(&e);
    ck_assert_int_eq(gt_mesh_set_axes(m, bad[i][0], bad[i][1], &e), GT_ERR_CONFIG);
    char want[64];
    snprintf(want, sizeof want, "data %d x fsdp %d", bad[i][0], bad[i][1]);
    ck_assert_msg(strstr(e.msg, want) && strstr(e.msg, "6") && !strchr(e.msg, '\n'),
                  "unclear message: %s", e.msg);
    /* A refused call leaves the axes as they were. */
    ck_assert_int_eq(gt_mesh_group_size(m, GT_GROUP_DATA), 3);
    ck_assert_int_eq(gt_mesh_group_size(m, GT_GROUP_FSDP), 2);
  }
  ck_assert_int_eq(gt_mesh_set_axes(m, 4, 2, NULL), GT_ERR_CONFIG);
  gt_mesh_destroy(m);
}
END_TEST

/* ---- group collectives against serial ring-order references -------------- */

typedef struct gjob {
  gt_mesh *m;
  int64_t n;
  gt_group g;
  float *x[MAX_DEV]; /* every device's n inputs */
  double *x64[MAX_DEV];
  float *rs[MAX_DEV], *ag[MAX_DEV], *ar[MAX_DEV];
  double *ar64[MAX_DEV];
} gjob;

static void gjob_fn(int d, void *arg) {
  gjob *j = arg;
  int G = gt_mesh_group_size(j->m, j->g), r = gt_mesh_group_rank(j->m, j->g, d);
  gt_reduce_scatter_g(j->m, d, j->g, j->x[d], j->rs[d], j->n);
  gt_all_gather_g(j->m, d, j->g, j->x[d] + gt_shard_begin(j->n, G, r), j->ag[d], j->n);
  gt_all_reduce_g(j->m, d, j->g, j->ar[d], j->n);
  gt_all_reduce_f64_g(j->m, d, j->g, j->ar64[d], j->n);
}

/* Checks one group instance (members mem[0..G-1]) of a finished gjob. */
static void check_group_instance(gjob *j, int N, int data, int fsdp, int gi, const int *mem, int G, float *ref,
                                 double *ref64, float *want_ag) {
  const int64_t n = j->n;
  float *xs[MAX_DEV];
  double *xs64[MAX_DEV];
  for (int k = 0; k < G; k++) {
    xs[k] = j->x[mem[k]];
    xs64[k] = j->x64[mem[k]];
    int64_t b = gt_shard_begin(n, G, k), len = gt_shard_len(n, G, k);
    if (len) memcpy(want_ag + b, xs[k] + b, (size_t)len * 4);
  }
  ring_sum_f32(xs, G, n, ref);
  ring_sum_f64(xs64, G, n, ref64);
  for (int k = 0; k < G; k++) {
    int d = mem[k];
    int64_t b = gt_shard_begin(n, G, k), len = gt_shard_len(n, G, k);
    bool rs_ok = len == 0 || memcmp(j->rs[d], ref + b, (size_t)len * 4) == 0;
    bool ag_ok = n == 0 || memcmp(j->ag[d], want_ag, (size_t)n * 4) == 0;
    bool ar_ok = n == 0 || memcmp(j->ar[d], ref, (size_t)n * 4) == 0;
    bool ar64_ok = n == 0 || memcmp(j->ar64[d], ref64, (size_t)n * 8) == 0;
    ck_assert_msg(rs_ok && ag_ok && ar_ok && ar64_ok,
                  "N=%d axes %dx%d group %s n=%lld device %d (rank %d of %d): reduce_scatter %s, "
                  "all_gather %s, all_reduce %s, all_reduce_f64 %s",
                  N, data, fsdp, GROUP_NAME[gi], (long long)n, d, k, G, rs_ok ? "ok" : "WRONG",
                  ag_ok ? "ok" : "WRONG", ar_ok ? "ok" : "WRONG", ar64_ok ? "ok" : "WRONG");
    /* Bytes as a ring of G would send them, for the four calls. */
    int64_t rsb = n - gt_shard_len(n, G, k), agb = n - gt_shard_len(n, G, (k + 1) % G);
    gt_comm_stats st = gt_mesh_stats(j->m, d);
    ck_assert_msg(st.bytes_sent == 4 * rsb + 4 * agb + 12 * (rsb + agb) && st.calls == 4,
                  "N=%d %dx%d %s n=%lld device %d: %lld bytes in %lld calls", N, data, fsdp, GROUP_NAME[gi],
                  (long long)n, d, (long long)st.bytes_sent, (long long)st.calls);
  }
}

/* Every factorisation of every N, every group kind, every size: the groups
 * of one kind run concurrently (e.g. `data` fsdp groups at once), each must
 * give exactly its own serial ring-order result. */
START_TEST(test_group_collectives) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    int datas[MAX_DEV];
    int nf = factorisations(N, datas);
    for (int si = 0; si < N_GSIZES; si++) {
      int64_t n = GSIZES[si];
      gjob j = {.m = m, .n = n};
      for (int d = 0; d < N; d++) {
        uint64_t s = seed_for(N, n, d, 30);
        j.x[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
        j.x64[d] = malloc(nbytes(n, 8));
        for (int64_t i = 0; i < n; i++) j.x64[d][i] = rand_f64(&s);
        j.rs[d] = malloc(nbytes(n, 4)); /* room for the largest shard of any G */
        j.ag[d] = malloc(nbytes(n, 4));
        j.ar[d] = malloc(nbytes(n, 4));
        j.ar64[d] = malloc(nbytes(n, 8));
      }
      float *ref = malloc(nbytes(n, 4)), *want_ag = malloc(nbytes(n, 4));
      double *ref64 = malloc(nbytes(n, 8));
      for (int f = 0; f < nf; f++) {
        int data = datas[f], fsdp = N / data;
        set_axes_ok(m, data, fsdp);
        for (int gi = 0; gi < 3; gi++) {
          j.g = GROUPS[gi];
          for (int d = 0; d < N; d++) {
            if (n) memcpy(j.ar[d], j.x[d], (size_t)n * 4);
            if (n) memcpy(j.ar64[d], j.x64[d], (size_t)n * 8);
          }
          gt_mesh_reset_stats(m);
          gt_mesh_run(m, gjob_fn, &j);
          /* One check per group instance, led by its rank-0 member. */
          for (int d = 0; d < N; d++) {
            int mem[MAX_DEV], rank = -1;
            int G = ref_group(N, fsdp, j.g, d, mem, &rank);
            if (rank == 0) check_group_instance(&j, N, data, fsdp, gi, mem, G, ref, ref64, want_ag);
          }
        }
      }
      /* The whole-mesh functions are the GT_GROUP_ALL ones, bit for bit:
       * last run was data groups; now the old API on fresh copies. */
      j.g = GT_GROUP_ALL;
      job oj = {.m = m, .n_dev = N, .n = n};
      for (int d = 0; d < N; d++) {
        oj.out[d] = malloc(nbytes(n, 4));
        if (n) memcpy(oj.out[d], j.x[d], (size_t)n * 4);
      }
      run_job(&oj, OP_AR);
      for (int d = 0; d < N; d++) {
        if (n) memcpy(j.ar[d], j.x[d], (size_t)n * 4);
        if (n) memcpy(j.ar64[d], j.x64[d], (size_t)n * 8);
      }
      gt_mesh_run(m, gjob_fn, &j);
      for (int d = 0; d < N; d++)
        ck_assert_msg(n == 0 || memcmp(oj.out[d], j.ar[d], (size_t)n * 4) == 0,
                      "N=%d n=%lld: gt_all_reduce differs from gt_all_reduce_g(ALL)", N, (long long)n);
      free_job(&oj);
      for (int d = 0; d < N; d++) {
        free(j.x[d]);
        free(j.x64[d]);
        free(j.rs[d]);
        free(j.ag[d]);
        free(j.ar[d]);
        free(j.ar64[d]);
      }
      free(ref);
      free(ref64);
      free(want_ag);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

/* Two (or more) groups of a kind at once, many times, with one group made
 * late now and then: small integer data distinct per group, so any
 * cross-talk between instances (a shared slot or barrier) changes a sum. */
#define GROUPS_ITERS 200

typedef struct groups_job {
  gt_mesh *m;
  int fsdp;
  atomic_int bad;
} groups_job;

static float grp_val(int it, int d, int64_t i) { return (float)((it * 5 + d * 17 + (int)i * 3) % 29 - 14); }

static void groups_fn(int d, void *arg) {
  groups_job *j = arg;
  const int F = j->fsdp;
  float buf[97], in[97], out[97];
  for (int it = 0; it < GROUPS_ITERS; it++) {
    int64_t n = (it * 13) % 97;
    gt_group g = it % 2 ? GT_GROUP_FSDP : GT_GROUP_DATA;
    int G = gt_mesh_group_size(j->m, g), r = gt_mesh_group_rank(j->m, g, d);
    /* Now and then make the same rank late in EVERY group of the kind: the
     * others of all groups arrive together, so a barrier shared between
     * instances would release them before their own late peer published. */
    if (it % 5 == 0 && r == (it / 5) % G) nanosleep(&(struct timespec){0, 300000}, NULL);
    for (int64_t i = 0; i < n; i++) buf[i] = in[i] = grp_val(it, d, i);
    gt_all_reduce_g(j->m, d, g, buf, n);
    for (int64_t i = 0; i < n; i++) {
      float want = 0;
      for (int k = 0; k < G; k++) want += grp_val(it, g == GT_GROUP_FSDP ? d - r + k : d % F + k * F, i);
      if (buf[i] != want) atomic_fetch_add(&j->bad, 1);
    }
    int64_t b = gt_shard_begin(n, G, r), len = gt_shard_len(n, G, r);
    gt_reduce_scatter_g(j->m, d, g, in, out, n);
    for (int64_t i = 0; i < len; i++)
      if (out[i] != buf[b + i]) atomic_fetch_add(&j->bad, 1);
    gt_all_gather_g(j->m, d, g, out, in, n);
    for (int64_t i = 0; i < n; i++)
      if (in[i] != buf[i]) atomic_fetch_add(&j->bad, 1);
  }
}

START_TEST(test_two_groups_at_once) {
  static const int axes[][2] = {{2, 2}, {2, 4}, {4, 2}, {2, 3}, {3, 2}};
  for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
    int data = axes[a][0], fsdp = axes[a][1];
    groups_job j = {.m = make_mesh(data * fsdp), .fsdp = fsdp};
    atomic_init(&j.bad, 0);
    set_axes_ok(j.m, data, fsdp);
    gt_mesh_run(j.m, groups_fn, &j);
    ck_assert_msg(atomic_load(&j.bad) == 0, "axes %dx%d: %d wrong elements", data, fsdp, atomic_load(&j.bad));
    gt_mesh_destroy(j.m);
  }
}
END_TEST

/* ---- asynchronous all-gather ---------------------------------------------- */

typedef struct ajob {
  gt_mesh *m;
  int64_t n;
  gt_group g;
  float *x[MAX_DEV];
  float *sync_out[MAX_DEV], *async_out[MAX_DEV];
} ajob;

/* The sync gather runs on the device threads while the async one of the same
 * data runs on the comm threads. */
static void ajob_fn(int d, void *arg) {
  ajob *j = arg;
  int G = gt_mesh_group_size(j->m, j->g), r = gt_mesh_group_rank(j->m, j->g, d);
  const float *in = j->x[d] + gt_shard_begin(j->n, G, r);
  int t = gt_all_gather_async(j->m, d, j->g, in, j->async_out[d], j->n);
  gt_all_gather_g(j->m, d, j->g, in, j->sync_out[d], j->n);
  gt_mesh_wait(j->m, d, t);
}

START_TEST(test_async_equals_sync) {
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m = make_mesh(N);
    int datas[MAX_DEV];
    int nf = factorisations(N, datas);
    for (int si = 0; si < N_GSIZES; si++) {
      int64_t n = GSIZES[si];
      ajob j = {.m = m, .n = n};
      for (int d = 0; d < N; d++) {
        uint64_t s = seed_for(N, n, d, 40);
        j.x[d] = gt_test_alloc_fill(n, &s, -1.f, 1.f);
        j.sync_out[d] = malloc(nbytes(n, 4));
        j.async_out[d] = malloc(nbytes(n, 4));
      }
      float *want = malloc(nbytes(n, 4));
      for (int f = 0; f < nf; f++) {
        int data = datas[f], fsdp = N / data;
        set_axes_ok(m, data, fsdp);
        for (int gi = 0; gi < 3; gi++) {
          j.g = GROUPS[gi];
          for (int d = 0; d < N; d++) {
            for (int64_t i = 0; i < n; i++) j.async_out[d][i] = NAN;
          }
          gt_mesh_reset_stats(m);
          gt_mesh_run(m, ajob_fn, &j);
          for (int d = 0; d < N; d++) {
            int mem[MAX_DEV], rank = -1;
            int G = ref_group(N, fsdp, j.g, d, mem, &rank);
            for (int k = 0; k < G; k++) {
              int64_t b = gt_shard_begin(n, G, k), len = gt_shard_len(n, G, k);
              if (len) memcpy(want + b, j.x[mem[k]] + b, (size_t)len * 4);
            }
            ck_assert_msg(n == 0 || (memcmp(j.async_out[d], j.sync_out[d], (size_t)n * 4) == 0 &&
                                     memcmp(j.async_out[d], want, (size_t)n * 4) == 0),
                          "N=%d %dx%d %s n=%lld device %d: async gather differs", N, data, fsdp,
                          GROUP_NAME[gi], (long long)n, d);
            /* Both gathers counted in the same per-device stats. */
            int64_t agb = n - gt_shard_len(n, G, (rank + 1) % G);
            gt_comm_stats st = gt_mesh_stats(m, d);
            ck_assert_msg(st.calls == 2 && st.bytes_sent == 2 * 4 * agb && st.seconds >= 0.0,
                          "N=%d %s n=%lld device %d: %lld bytes in %lld calls", N, GROUP_NAME[gi],
                          (long long)n, d, (long long)st.bytes_sent, (long long)st.calls);
          }
        }
      }
      for (int d = 0; d < N; d++) {
        free(j.x[d]);
        free(j.sync_out[d]);
        free(j.async_out[d]);
      }
      free(want);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

/* Three gathers in flight per device (fsdp, data, all: different groups,
 * so the comm threads switch barriers in between), waited in order, only on
 * the last, and out of order; while they fly the device threads run
 * synchronous all-reduces that must still be bit-exact. */
#define FLY_N 200003
#define FLY_AR_N 100003

typedef struct fly_job {
  gt_mesh *m;
  int mode; /* 0: wait 1,2,3; 1: wait 3 only (then 1, 2: no-ops); 2: wait 2,1,3 */
  float *x[MAX_DEV];
  float *out[3][MAX_DEV];
  float *want[3][MAX_DEV]; /* per device, per gather */
  float *ar_in[MAX_DEV], *ar[MAX_DEV], *ar_ref, *arf[MAX_DEV], *arf_ref[MAX_DEV];
  int tickets[MAX_DEV][3];
  atomic_int bad;
} fly_job;

static const gt_group FLY_G[3] = {GT_GROUP_FSDP, GT_GROUP_DATA, GT_GROUP_ALL};

static bool fly_ok(fly_job *j, int k, int d) { return memcmp(j->out[k][d], j->want[k][d], FLY_N * 4) == 0; }

static void fly_fn(int d, void *arg) {
  fly_job *j = arg;
  int *t = j->tickets[d];
  for (int k = 0; k < 3; k++) {
    gt_group g = FLY_G[k];
    int G = gt_mesh_group_size(j->m, g), r = gt_mesh_group_rank(j->m, g, d);
    t[k] = gt_all_gather_async(j->m, d, g, j->x[d] + gt_shard_begin(FLY_N, G, r), j->out[k][d], FLY_N);
  }
  /* Synchronous collectives on the device threads meanwhile. */
  memcpy(j->ar[d], j->ar_in[d], FLY_AR_N * 4);
  gt_all_reduce(j->m, d, j->ar[d], FLY_AR_N);
  memcpy(j->arf[d], j->ar_in[d], FLY_AR_N * 4);
  gt_all_reduce_g(j->m, d, GT_GROUP_FSDP, j->arf[d], FLY_AR_N);
  if (memcmp(j->ar[d], j->ar_ref, FLY_AR_N * 4) != 0 || memcmp(j->arf[d], j->arf_ref[d], FLY_AR_N * 4) != 0)
    atomic_fetch_add(&j->bad, 1000);
  switch (j->mode) {
  case 0:
    for (int k = 0; k < 3; k++) {
      gt_mesh_wait(j->m, d, t[k]);
      if (!fly_ok(j, k, d)) atomic_fetch_add(&j->bad, 1);
    }
    break;
  case 1:
    /* The last ticket completes every earlier one of this device. */
    gt_mesh_wait(j->m, d, t[2]);
    for (int k = 0; k < 3; k++)
      if (!fly_ok(j, k, d)) atomic_fetch_add(&j->bad, 1);
    gt_mesh_wait(j->m, d, t[0]);
    gt_mesh_wait(j->m, d, t[1]);
    break;
  default:
    gt_mesh_wait(j->m, d, t[1]);
    if (!fly_ok(j, 0, d) || !fly_ok(j, 1, d)) atomic_fetch_add(&j->bad, 1);
    gt_mesh_wait(j->m, d, t[0]);
    gt_mesh_wait(j->m, d, t[2]);
    if (!fly_ok(j, 2, d)) atomic_fetch_add(&j->bad, 1);
    break;
  }
}

START_TEST(test_async_in_flight_with_sync) {
  static const int axes[][2] = {{1, 1}, {1, 2}, {2, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 4}, {4, 2}, {8, 1}};
  for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
    int data = axes[a][0], fsdp = axes[a][1], N = data * fsdp;
    fly_job *j = calloc(1, sizeof *j);
    j->m = make_mesh(N);
    atomic_init(&j->bad, 0);
    set_axes_ok(j->m, data, fsdp);
    for (int d = 0; d < N; d++) {
      uint64_t s = seed_for(N, FLY_N, d, 50);
      j->x[d] = gt_test_alloc_fill(FLY_N, &s, -1.f, 1.f);
      j->ar_in[d] = gt_test_alloc_fill(FLY_AR_N, &s, -1.f, 1.f);
      j->ar[d] = malloc(FLY_AR_N * 4);
      j->arf[d] = malloc(FLY_AR_N * 4);
      j->arf_ref[d] = malloc(FLY_AR_N * 4);
      for (int k = 0; k < 3; k++) {
        j->out[k][d] = malloc(FLY_N * 4);
        j->want[k][d] = malloc(FLY_N * 4);
      }
    }
    j->ar_ref = malloc(FLY_AR_N * 4);
    ring_sum_f32(j->ar_in, N, FLY_AR_N, j->ar_ref);
    for (int d = 0; d < N; d++) {
      int mem[MAX_DEV], rank = -1;
      int G = ref_group(N, fsdp, GT_GROUP_FSDP, d, mem, &rank);
      float *xs[MAX_DEV];
      for (int k = 0; k < G; k++) xs[k] = j->ar_in[mem[k]];
      ring_sum_f32(xs, G, FLY_AR_N, j->arf_ref[d]);
      for (int k = 0; k < 3; k++) {
        G = ref_group(N, fsdp, FLY_G[k], d, mem, &rank);
        for (int q = 0; q < G; q++) {
          int64_t b = gt_shard_begin(FLY_N, G, q), len = gt_shard_len(FLY_N, G, q);
          memcpy(j->want[k][d] + b, j->x[mem[q]] + b, (size_t)len * 4);
        }
      }
    }
    for (int mode = 0; mode < 3; mode++) {
      j->mode = mode;
      for (int k = 0; k < 3; k++)
        for (int d = 0; d < N; d++) memset(j->out[k][d], 0xff, FLY_N * 4);
      gt_mesh_run(j->m, fly_fn, j);
      ck_assert_msg(atomic_load(&j->bad) == 0, "axes %dx%d wait mode %d: %d failures (>= 1000: sync all_reduce)",
                    data, fsdp, mode, atomic_load(&j->bad));
      /* Tickets are monotonic per device, 1, 2, 3, then 4, 5, 6, ... */
      for (int d = 0; d < N; d++)
        for (int k = 0; k < 3; k++) ck_assert_int_eq(j->tickets[d][k], 3 * mode + k + 1);
    }
    gt_mesh_destroy(j->m);
    for (int d = 0; d < N; d++) {
      free(j->x[d]);
      free(j->ar_in[d]);
      free(j->ar[d]);
      free(j->arf[d]);
      free(j->arf_ref[d]);
      for (int k = 0; k < 3; k++) {
        free(j->out[k][d]);
        free(j->want[k][d]);
      }
    }
    free(j->ar_ref);
    free(j);
  }
}
END_TEST

/* 100 runs reusing the device and comm threads: each issues two small async
 * gathers (n varies, including n < G), checks them, and the stats add up. */
#define ASYNC_RUNS 100

typedef struct reuse_job {
  gt_mesh *m;
  int run;
  atomic_int bad;
} reuse_job;

static float reuse_val(int run, int64_t i) { return (float)(run * 1000 + i); }

static void reuse_fn(int d, void *arg) {
  reuse_job *j = arg;
  int64_t n = (j->run * 37) % 150;
  float out1[150], out2[150], in1[150], in2[150];
  int G1 = gt_mesh_group_size(j->m, GT_GROUP_FSDP), r1 = gt_mesh_group_rank(j->m, GT_GROUP_FSDP, d);
  int G2 = gt_mesh_group_size(j->m, GT_GROUP_ALL), r2 = d;
  /* Each device supplies its shard of the same global vector. */
  int64_t b1 = gt_shard_begin(n, G1, r1), b2 = gt_shard_begin(n, G2, r2);
  for (int64_t i = 0; i < n; i++) in1[i] = in2[i] = reuse_val(j->run, i);
  int t1 = gt_all_gather_async(j->m, d, GT_GROUP_FSDP, in1 + b1, out1, n);
  int t2 = gt_all_gather_async(j->m, d, GT_GROUP_ALL, in2 + b2, out2, n);
  if (t2 != t1 + 1 || t1 != 2 * j->run + 1) atomic_fetch_add(&j->bad, 1);
  gt_mesh_wait(j->m, d, t2);
  for (int64_t i = 0; i < n; i++)
    if (out1[i] != reuse_val(j->run, i) || out2[i] != reuse_val(j->run, i)) atomic_fetch_add(&j->bad, 1);
}

START_TEST(test_async_reuse_runs) {
  static const int axes[][2] = {{1, 1}, {1, 2}, {1, 3}, {2, 2}, {3, 2}, {2, 4}};
  for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
    int data = axes[a][0], fsdp = axes[a][1], N = data * fsdp;
    reuse_job j = {.m = make_mesh(N)};
    atomic_init(&j.bad, 0);
    set_axes_ok(j.m, data, fsdp);
    int64_t want_bytes[MAX_DEV] = {0};
    for (int run = 0; run < ASYNC_RUNS; run++) {
      j.run = run;
      gt_mesh_run(j.m, reuse_fn, &j);
      int64_t n = (run * 37) % 150;
      for (int d = 0; d < N; d++)
        want_bytes[d] += 4 * (n - gt_shard_len(n, fsdp, (d % fsdp + 1) % fsdp)) +
                         4 * (n - gt_shard_len(n, N, (d + 1) % N));
    }
    ck_assert_msg(atomic_load(&j.bad) == 0, "axes %dx%d: %d failures", data, fsdp, atomic_load(&j.bad));
    for (int d = 0; d < N; d++) {
      gt_comm_stats st = gt_mesh_stats(j.m, d);
      ck_assert_msg(st.calls == 2 * ASYNC_RUNS && st.bytes_sent == want_bytes[d] && st.seconds > 0.0,
                    "axes %dx%d device %d: %lld calls, %lld bytes (want %lld)", data, fsdp, d, (long long)st.calls,
                    (long long)st.bytes_sent, (long long)want_bytes[d]);
    }
    gt_mesh_destroy(j.m);
  }
}
END_TEST

/* Gathers issued and never waited for: destroy drains them (on every peer)
 * before joining, so the outputs are complete and nothing leaks or hangs;
 * set_axes refuses while they are in flight. */
typedef struct nowait_job {
  gt_mesh *m;
  float *in[4], *out[4];
} nowait_job;

#define NOWAIT_N 300007

static void nowait_fn(int d, void *arg) {
  nowait_job *j = arg;
  for (int k = 0; k < 3; k++)
    gt_all_gather_async(j->m, d, GT_GROUP_ALL, j->in[d], j->out[d], NOWAIT_N);
}

START_TEST(test_async_destroy_drains) {
  nowait_job j = {.m = make_mesh(4)};
  float *want = malloc(NOWAIT_N * 4);
  for (int d = 0; d < 4; d++) {
    int64_t b = gt_shard_begin(NOWAIT_N, 4, d), len = gt_shard_len(NOWAIT_N, 4, d);
    uint64_t s = seed_for(4, NOWAIT_N, d, 60);
    j.in[d] = gt_test_alloc_fill(len, &s, -1.f, 1.f);
    memcpy(want + b, j.in[d], (size_t)len * 4);
    j.out[d] = calloc(NOWAIT_N, 4);
  }
  gt_mesh_run(j.m, nowait_fn, &j);
  gt_err e;
  gt_err_clear(&e);
  gt_rc rc = gt_mesh_set_axes(j.m, 2, 2, &e);
  /* Either they already finished (fine) or set_axes must refuse. */
  ck_assert_msg(rc == GT_OK || (rc == GT_ERR_ARG && strstr(e.msg, "in flight")), "%d: %s", rc, e.msg);
  gt_mesh_destroy(j.m);
  for (int d = 0; d < 4; d++) {
    ck_assert_msg(memcmp(j.out[d], want, NOWAIT_N * 4) == 0, "device %d: gather not drained", d);
    free(j.in[d]);
    free(j.out[d]);
  }
  free(want);
}
END_TEST

/* ---- misuse: a sticky error, never an abort or a hang --------------------- */

#define MIS_DEV 3 /* three devices, so a reduce-scatter needs its scratch */
#define MIS_N 10

enum misuse {
  MIS_NEG_N,        /* device 1 gathers n = -3, the others n = 10 */
  MIS_BAD_DEV,      /* device 2 reduce-scatters as device 7 */
  MIS_OTHER_DEV,    /* device 0 all-reduces as device 1 (in range, not its own) */
  MIS_BAD_ROOT,     /* everyone broadcasts from root 5 */
  MIS_BAD_GROUP,    /* everyone all-reduces in group 9 */
  MIS_WAIT_NEVER,   /* device 0 waits on ticket 42 without issuing any */
  MIS_WAIT_BEYOND,  /* device 2 issues one gather and waits on ticket 2 */
  MIS_SCRATCH,      /* everyone reduce-scatters an absurd n: its scratch cannot exist */
  MIS_ASYNC_NEG_N,  /* device 1 issues an async gather of n = -1, the others n = 10 */
};

typedef struct misuse_job {
  gt_mesh *m;
  enum misuse kind;
  float *in[MIS_DEV], *out[MIS_DEV], *buf[MIS_DEV];
  atomic_int finished; /* devices whose fn returned */
} misuse_job;

static void misuse_fn(int d, void *arg) {
  misuse_job *j = arg;
  switch (j->kind) {
  case MIS_NEG_N: gt_all_gather(j->m, d, j->in[d], j->out[d], d == 1 ? -3 : MIS_N); break;
  case MIS_BAD_DEV: gt_reduce_scatter(j->m, d == 2 ? 7 : d, j->in[d], j->out[d], MIS_N); break;
  case MIS_OTHER_DEV: gt_all_reduce(j->m, d == 0 ? 1 : d, j->buf[d], MIS_N); break;
  case MIS_BAD_ROOT: gt_broadcast(j->m, d, j->buf[d], MIS_N, 5); break;
  case MIS_BAD_GROUP: gt_all_reduce_g(j->m, d, (gt_group)9, j->buf[d], MIS_N); break;
  case MIS_WAIT_NEVER:
    if (d == 0) gt_mesh_wait(j->m, d, 42);
    break;
  case MIS_WAIT_BEYOND: {
    int t = gt_all_gather_async(j->m, d, GT_GROUP_ALL, j->in[d], j->out[d], MIS_N);
    gt_mesh_wait(j->m, d, d == 2 ? t + 1 : t);
    gt_mesh_wait(j->m, d, t); /* the gather itself still completes */
    break;
  }
  case MIS_SCRATCH: gt_reduce_scatter(j->m, d, j->out[d], j->in[d], INT64_MAX); break;
  case MIS_ASYNC_NEG_N: {
    int t = gt_all_gather_async(j->m, d, GT_GROUP_ALL, j->in[d], j->out[d], d == 1 ? -1 : MIS_N);
    gt_mesh_wait(j->m, d, t);
    break;
  }
  }
  /* Later collectives of the run are no-ops that still synchronise: buf
   * keeps every device's own values, and a second misuse does not replace
   * the first error. */
  gt_all_reduce(j->m, d, j->buf[d], MIS_N);
  gt_broadcast(j->m, d, j->buf[d], MIS_N, -1);
  gt_barrier(j->m, d);
  atomic_fetch_add(&j->finished, 1);
}

/* A correct all-reduce after the error was taken: the mesh is usable again. */
static void sum_fn(int d, void *arg) {
  misuse_job *j = arg;
  gt_all_reduce(j->m, d, j->buf[d], MIS_N);
}

static void fill_misuse(misuse_job *j) {
  for (int d = 0; d < MIS_DEV; d++)
    for (int i = 0; i < MIS_N; i++) {
      j->in[d][i] = (float)(100 * d + i);
      j->out[d][i] = -1.0f;
      j->buf[d][i] = (float)(d + 1);
    }
}

static void check_misuse(enum misuse kind, gt_rc want_rc, const char *want_msg) {
  misuse_job j = {.m = make_mesh(MIS_DEV), .kind = kind};
  atomic_init(&j.finished, 0);
  for (int d = 0; d < MIS_DEV; d++) {
    j.in[d] = malloc(MIS_N * sizeof(float));
    j.out[d] = malloc(MIS_N * sizeof(float));
    j.buf[d] = malloc(MIS_N * sizeof(float));
  }
  fill_misuse(&j);
  gt_mesh_run(j.m, misuse_fn, &j);
  ck_assert_int_eq(atomic_load(&j.finished), MIS_DEV);
  gt_err e;
  gt_err_clear(&e);
  gt_rc rc = gt_mesh_take_error(j.m, &e);
  ck_assert_msg(rc == want_rc, "misuse %d: rc %s, want %s (%s)", kind, gt_rc_name(rc), gt_rc_name(want_rc), e.msg);
  ck_assert_msg(strstr(e.msg, want_msg), "misuse %d: '%s' does not contain '%s'", kind, e.msg, want_msg);
  for (int d = 0; d < MIS_DEV; d++) {
    for (int i = 0; i < MIS_N; i++)
      ck_assert_msg(j.buf[d][i] == (float)(d + 1), "misuse %d: device %d: buf[%d] = %g after a no-op", kind, d, i,
                    (double)j.buf[d][i]);
    /* The failed collectives moved nothing and counted nothing. The async
     * gather of MIS_WAIT_BEYOND was issued before the error: it ran or was
     * skipped depending on timing, but alike on every device. */
    int64_t calls = gt_mesh_stats(j.m, d).calls;
    if (kind == MIS_WAIT_BEYOND)
      ck_assert_msg(calls == gt_mesh_stats(j.m, 0).calls && calls <= 1, "device %d: %lld calls", d, (long long)calls);
    else
      ck_assert_msg(calls == 0, "misuse %d: device %d counted %lld calls", kind, d, (long long)calls);
  }
  /* Taken: cleared. */
  ck_assert_int_eq(gt_mesh_take_error(j.m, &e), GT_OK);
  fill_misuse(&j);
  gt_mesh_run(j.m, sum_fn, &j);
  ck_assert_int_eq(gt_mesh_take_error(j.m, &e), GT_OK);
  for (int d = 0; d < MIS_DEV; d++)
    for (int i = 0; i < MIS_N; i++) ck_assert_float_eq(j.buf[d][i], 6.0f); /* 1 + 2 + 3 */
  gt_mesh_destroy(j.m);
  for (int d = 0; d < MIS_DEV; d++) {
    free(j.in[d]);
    free(j.out[d]);
    free(j.buf[d]);
  }
}

START_TEST(test_misuse_records_error) {
  check_misuse(MIS_NEG_N, GT_ERR_ARG, "mesh: device 1: gt_all_gather: n = -3; expected n >= 0");
  check_misuse(MIS_BAD_DEV, GT_ERR_ARG,
               "mesh: device 2: gt_reduce_scatter called as device 7; expected its own index 2 (mesh of 3 devices)");
  check_misuse(MIS_OTHER_DEV, GT_ERR_ARG,
               "mesh: device 0: gt_all_reduce called as device 1; expected its own index 0 (mesh of 3 devices)");
  check_misuse(MIS_BAD_ROOT, GT_ERR_ARG, ": gt_broadcast: root 5; expected 0..2");
  check_misuse(MIS_BAD_GROUP, GT_ERR_ARG,
               ": gt_all_reduce: unknown group 9; expected GT_GROUP_ALL, GT_GROUP_FSDP, GT_GROUP_DATA or "
               "GT_GROUP_EXPERT");
  check_misuse(MIS_WAIT_NEVER, GT_ERR_ARG,
               "mesh: device 0: gt_mesh_wait: ticket 42 was never issued; expected none: the device issued no "
               "async gather");
  check_misuse(MIS_WAIT_BEYOND, GT_ERR_ARG, "mesh: device 2: gt_mesh_wait: ticket 2 was never issued; expected 1..1");
  check_misuse(MIS_SCRATCH, GT_ERR_NOMEM,
               ": gt_reduce_scatter: reduce scratch for n = 9223372036854775807 over 3 devices is more than the "
               "address space holds");
  check_misuse(MIS_ASYNC_NEG_N, GT_ERR_ARG, "mesh: device 1: gt_all_gather_async: n = -1; expected n >= 0");
}
END_TEST

/* Outside any run: a collective from a thread that is no device, and a run
 * without a function, are recorded too (nobody waits for them). */
START_TEST(test_misuse_outside_run) {
  gt_mesh *m = make_mesh(2);
  gt_err e;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_mesh_take_error(m, &e), GT_OK);
  gt_barrier(m, 5);
  gt_all_reduce(m, 2, NULL, 4); /* dropped: only the first error is kept */
  ck_assert_int_eq(gt_mesh_take_error(m, &e), GT_ERR_ARG);
  ck_assert_str_eq(e.msg, "mesh: gt_barrier: device 5; expected 0..1 (and no device thread of this mesh called it)");
  ck_assert_int_eq(gt_mesh_take_error(m, &e), GT_OK);
  gt_mesh_run(m, NULL, NULL);
  ck_assert_int_eq(gt_mesh_take_error(m, &e), GT_ERR_ARG);
  ck_assert_str_eq(e.msg, "mesh: gt_mesh_run: fn is NULL; expected the function every device runs");
  ck_assert_int_eq(gt_mesh_take_error(NULL, &e), GT_ERR_ARG);
  gt_mesh_run(NULL, NULL, NULL); /* nothing to record it on; must not crash */
  gt_mesh_destroy(m);
}
END_TEST

/* An error on one fsdp group's device while the other group computes: both
 * groups are released, and the second group's collective after the error
 * is skipped on every one of its members alike (never half-done). */
typedef struct two_group_job {
  gt_mesh *m;
  float *buf[4];
} two_group_job;

static void two_group_fn(int d, void *arg) {
  two_group_job *j = arg;
  if (d == 3) gt_all_reduce_g(j->m, d, GT_GROUP_FSDP, j->buf[d], -1);
  else gt_all_reduce_g(j->m, d, GT_GROUP_FSDP, j->buf[d], MIS_N);
  gt_all_reduce_g(j->m, d, GT_GROUP_FSDP, j->buf[d], MIS_N);
}

START_TEST(test_misuse_in_one_group) {
  gt_err e;
  for (int rep = 0; rep < 50; rep++) {
    two_group_job j = {.m = make_mesh(4)};
    ck_assert_int_eq(gt_mesh_set_axes(j.m, 2, 2, &e), GT_OK);
    for (int d = 0; d < 4; d++) {
      j.buf[d] = malloc(MIS_N * sizeof(float));
      for (int i = 0; i < MIS_N; i++) j.buf[d][i] = (float)(d + 1);
    }
    gt_mesh_run(j.m, two_group_fn, &j);
    ck_assert_int_eq(gt_mesh_take_error(j.m, &e), GT_ERR_ARG);
    ck_assert_str_eq(e.msg, "mesh: device 3: gt_all_reduce: n = -1; expected n >= 0");
    /* Group {2, 3} did nothing. Group {0, 1} did 0, 1 or 2 reductions, but
     * the same number on both members: (1, 2), then (3, 3), then (6, 6). */
    for (int i = 0; i < MIS_N; i++) {
      ck_assert_float_eq(j.buf[2][i], 3.0f);
      ck_assert_float_eq(j.buf[3][i], 4.0f);
      float b0 = j.buf[0][i], b1 = j.buf[1][i];
      ck_assert_msg((b0 == 1.0f && b1 == 2.0f) || (b0 == 3.0f && b1 == 3.0f) || (b0 == 6.0f && b1 == 6.0f),
                    "rep %d: group {0, 1} ended with (%g, %g)", rep, (double)b0, (double)b1);
    }
    gt_mesh_destroy(j.m);
    for (int d = 0; d < 4; d++) free(j.buf[d]);
  }
}
END_TEST

/* A device that leaves a run part way (its step failed) releases its peers:
 * every collective after the leave completes on the others without moving
 * data, the mesh records who left, and the next run has every device back,
 * with sums that are right again. Device 1 leaves at point `at`: before any
 * collective, after the first all-reduce, or with an async gather of its
 * own still queued (the leave finishes it first). */
enum { LV_N = 96 };
typedef struct leave_job {
  gt_mesh *m;
  int at;
  float buf[3][LV_N], gath[3][3 * LV_N], own[3][LV_N];
  double sums[3][2];
} leave_job;

static void leave_fn(int d, void *arg) {
  leave_job *j = arg;
  if (d == 1 && j->at == 0) return gt_mesh_leave(j->m, d);
  gt_all_reduce(j->m, d, j->buf[d], LV_N);
  int t = gt_all_gather_async(j->m, d, GT_GROUP_ALL, j->own[d], j->gath[d], 3 * LV_N);
  if (d == 1 && j->at == 1) return gt_mesh_leave(j->m, d);
  gt_mesh_wait(j->m, d, t);
  if (d == 1) return gt_mesh_leave(j->m, d);
  gt_all_reduce(j->m, d, j->buf[d], LV_N);
  gt_all_gather(j->m, d, j->own[d], j->gath[d], 3 * LV_N);
  gt_barrier(j->m, d);
  gt_all_reduce_f64(j->m, d, j->sums[d], 2);
  t = gt_all_gather_async(j->m, d, GT_GROUP_ALL, j->own[d], j->gath[d], 3 * LV_N);
  gt_mesh_wait(j->m, d, t);
}

static void all_reduce_fn(int d, void *arg) {
  leave_job *j = arg;
  gt_all_reduce(j->m, d, j->buf[d], LV_N);
}

START_TEST(test_device_leaves_run) {
  for (int rep = 0; rep < 30; rep++) {
    leave_job *j = calloc(1, sizeof *j);
    j->m = make_mesh(3);
    j->at = rep % 3;
    for (int d = 0; d < 3; d++) {
      for (int i = 0; i < LV_N; i++) j->buf[d][i] = (float)(d + 1), j->own[d][i] = (float)(10 * d + 1);
      j->sums[d][0] = d, j->sums[d][1] = 1;
    }
    gt_mesh_run(j->m, leave_fn, j);
    gt_err e;
    ck_assert_int_eq(gt_mesh_take_error(j->m, &e), GT_ERR_INTERNAL);
    ck_assert_str_eq(e.msg, "mesh: device 1 left the run before its peers' collectives (its own error says why)");
    /* devices 0 and 2: the first all-reduce ran when device 1 was still in
     * (sum 6) or moved nothing (the leave came first); nothing after the
     * leave moved data, and both ended alike */
    float want = j->at == 0 ? 0.0f : 6.0f;
    for (int d = 0; d < 3; d += 2) {
      for (int i = 0; i < LV_N; i++)
        ck_assert_msg(j->buf[d][i] == (want ? want : (float)(d + 1)), "rep %d device %d: %g", rep, d,
                      (double)j->buf[d][i]);
      ck_assert(j->sums[d][0] == d && j->sums[d][1] == 1);
    }
    /* the next run has all three back */
    for (int d = 0; d < 3; d++)
      for (int i = 0; i < LV_N; i++) j->buf[d][i] = (float)(d + 1);
    gt_mesh_run(j->m, all_reduce_fn, j);
    ck_assert_int_eq(gt_mesh_take_error(j->m, &e), GT_OK);
    for (int d = 0; d < 3; d++)
      for (int i = 0; i < LV_N; i++) ck_assert_float_eq(j->buf[d][i], 6.0f);
    gt_mesh_destroy(j->m);
    free(j);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("mesh");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_create_rejects_bad_count);
  tcase_add_test(tc, test_run_once_per_device_and_reuse);
  tcase_add_test(tc, test_barrier);
  tcase_add_test(tc, test_ring_order_is_visible);
  tcase_add_test(tc, test_reduce_scatter);
  tcase_add_test(tc, test_all_gather);
  tcase_add_test(tc, test_all_gather_in_aliases_out);
  tcase_add_test(tc, test_all_reduce);
  tcase_add_test(tc, test_all_reduce_f64);
  tcase_add_test(tc, test_broadcast_every_root);
  tcase_add_test(tc, test_stats_ring_bytes);
  tcase_add_test(tc, test_mixed_sequence);
  tcase_add_test(tc, test_axes_group_sizes_and_ranks);
  tcase_add_test(tc, test_set_axes_rejects_wrong_product);
  tcase_add_test(tc, test_group_collectives);
  tcase_add_test(tc, test_two_groups_at_once);
  tcase_add_test(tc, test_async_equals_sync);
  tcase_add_test(tc, test_async_in_flight_with_sync);
  tcase_add_test(tc, test_async_reuse_runs);
  tcase_add_test(tc, test_async_destroy_drains);
  tcase_add_test(tc, test_misuse_records_error);
  tcase_add_test(tc, test_misuse_outside_run);
  tcase_add_test(tc, test_misuse_in_one_group);
  tcase_add_test(tc, test_device_leaves_run);
  return gt_test_run_suite(s, 0);
}
