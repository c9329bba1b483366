/* gt_mesh and its collectives against serial references computed here.
 *
 * Reductions are compared BIT for bit with a serial sum in the ring order
 * mesh.h documents (chunk c summed over devices c+1, c+2, ..., c mod N), and
 * with a wider-precision sum to the float error bound of that summation.
 * Sizes: 0, 1, 7 (prime, below most device counts, so empty shards), 1000003
 * (large prime, uneven shards) and 5040 (divisible by every N in 1..8). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemtrain/mesh.h"
#include "gt_testutil.h"

#define MAX_DEV 8
static const int64_t SIZES[] = {0, 1, 7, 1000003, 5040};
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
  r->omp_threads[d] = omp_get_max_threads();
  omp_set_num_threads(7); /* must not leak into the next run */
}

START_TEST(test_run_once_per_device_and_reuse) {
  int procs = omp_get_num_procs();
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
        ck_assert_msg(r->omp_threads[d] == want, "N=%d device %d: %d OpenMP threads, want %d", N, d,
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

int main(void) {
  Suite *s = suite_create("mesh");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
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
  suite_add_tcase(s, tc);
  return gt_test_run_suite(s, 0);
}
