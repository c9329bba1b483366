/* Benchmark of the process layer's exchange (src/dist) between 2 ranks;
 * built with MPI, never run by ctest (timing is not a test):
 *
 *   mpirun --allow-run-as-root --bind-to none -np 2 build/bench_dist [MiB] [reps]
 *
 * For a message of MiB (default 64) float32s, both ranks sending to each
 * other at once (the 2-rank ring step), it prints the median and best time
 * and bandwidth (bytes one way / time) of
 *   gt_dist_exchange       the library's poll loop
 *   MPI_Sendrecv           blocking, the MPI library's own wait
 *   naive poll             MPI_Testall, spin 80 us, then sleeps of 20 us
 *                          doubling to 1 ms, without the library's progress
 *                          rule: what the rule is there to avoid
 *   MPI_Allreduce (sum)    time and algorithm bandwidth (bytes / time)
 *   peer 20 ms late        gt_dist_exchange when rank 1 starts 20 ms after
 *                          rank 0 (time from rank 1's start): the sleeping
 *                          rank must get back to full speed
 * and then the CPU time rank 0 spends in gt_dist_exchange while rank 1
 * comes 300 ms late (a late peer must cost sleeps, not a spinning core).
 * `--mca btl_vader_single_copy_mechanism none` shows a machine without CMA.
 * The figures and the rule they led to: src/dist/dist_mpi.c, wait_reqs. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void naive_poll(MPI_Request *req, int n) {
  double spin_until = now() + 80e-6;
  long nap = 20000;
  for (;;) {
    int done = 0;
    MPI_Status st[2]; /* (MPICH's MPI_STATUSES_IGNORE trips gcc's access checks) */
    MPI_Testall(n, req, &done, st);
    if (done) return;
    if (now() < spin_until) continue;
    struct timespec ts = {0, nap};
    nanosleep(&ts, NULL);
    nap = nap * 2 > 1000000 ? 1000000 : nap * 2;
  }
}

static void report(int me, const char *name, double *t, int reps, size_t bytes) {
  double all[256];
  memcpy(all, t, sizeof *t * (size_t)reps);
  qsort(all, (size_t)reps, sizeof *all, cmp);
  if (me == 0)
    printf("%-24s median %8.2f ms  %6.2f GB/s   best %8.2f ms  %6.2f GB/s\n", name, all[reps / 2] * 1e3,
           bytes / all[reps / 2] / 1e9, all[0] * 1e3, bytes / all[0] / 1e9);
}

int main(int argc, char **argv) {
  gt_err e;
  if (gt_dist_init(&e)) {
    fprintf(stderr, "bench_dist: %s\n", e.msg);
    return 1;
  }
  int R = gt_dist_size(), me = gt_dist_rank();
  if (R != 2) {
    if (me == 0) fprintf(stderr, "bench_dist: run it as 2 ranks (mpirun -np 2), not %d\n", R);
    gt_dist_finalize();
    return 1;
  }
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1 || reps > 256) reps = 15;
  size_t n = mib << 18, bytes = n * sizeof(float);
  float *s = malloc(bytes), *r = malloc(bytes);
  for (size_t i = 0; i < n; i++) s[i] = (float)(i % 1000) * 0.5f + me, r[i] = 0;
  int peer = 1 - me;
  double t[256];
  if (me == 0)
    printf("bench_dist: %zu MiB float32 each way between 2 ranks, %d reps; MPI thread level %s\n", mib, reps,
           gt_dist_thread_level());

  for (int it = -2; it < reps; it++) { /* 2 warm-up rounds */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    gt_dist_xfer x = {s, bytes, peer, 0, r, bytes, peer, 0};
    if (gt_dist_exchange(&x, 0, 0, "bench", &e)) {
      fprintf(stderr, "bench_dist: %s\n", e.msg);
      gt_dist_abort(1);
    }
    if (it >= 0) t[it] = now() - t0;
  }
  if (r[1] != 0.5f + peer) fprintf(stderr, "bench_dist: rank %d received wrong data\n", me);
  report(me, "gt_dist_exchange", t, reps, bytes);

  for (int it = -2; it < reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    MPI_Sendrecv(s, (int)bytes, MPI_BYTE, peer, 7, r, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (it >= 0) t[it] = now() - t0;
  }
  report(me, "MPI_Sendrecv", t, reps, bytes);

  for (int it = -2; it < reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    MPI_Request q[2];
    MPI_Irecv(r, (int)bytes, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &q[0]);
    MPI_Isend(s, (int)bytes, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &q[1]);
    naive_poll(q, 2);
    if (it >= 0) t[it] = now() - t0;
  }
  report(me, "naive poll (no rule)", t, reps, bytes);

  for (int it = -2; it < reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    MPI_Allreduce(s, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (it >= 0) t[it] = now() - t0;
  }
  report(me, "MPI_Allreduce sum", t, reps, bytes);

  /* rank 1 starts 20 ms late: the transfer must still run at full speed
   * once it starts, though rank 0 is in its sleeping phase by then */
  for (int it = -1; it < reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if (me == 1) {
      struct timespec ts = {0, 20000000L};
      nanosleep(&ts, NULL);
    }
    gt_dist_xfer x = {s, bytes, peer, 0, r, bytes, peer, 0};
    if (gt_dist_exchange(&x, 0, 0, "bench", &e)) {
      fprintf(stderr, "bench_dist: %s\n", e.msg);
      gt_dist_abort(1);
    }
    if (it >= 0) t[it] = now() - t0 - 0.020;
  }
  report(me, "exchange, peer 20 ms late", t, reps, bytes);

  /* the same 300 ms in plain sleep: what MPI's own threads use meanwhile */
  MPI_Barrier(MPI_COMM_WORLD);
  double b0 = cpu_now();
  struct timespec idle = {0, 300000000L};
  nanosleep(&idle, NULL);
  double b1 = cpu_now();
  /* a late peer: rank 1 joins 300 ms after rank 0 */
  MPI_Barrier(MPI_COMM_WORLD);
  double c0 = cpu_now(), w0 = now(), tc0 = thread_cpu_now();
  if (me == 1) {
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
  }
  gt_dist_xfer small = {s, 4096, peer, 0, r, 4096, peer, 0};
  if (gt_dist_exchange(&small, 0, 0, "bench late", &e)) {
    fprintf(stderr, "bench_dist: %s\n", e.msg);
    gt_dist_abort(1);
  }
  double c1 = cpu_now(), w1 = now(), tc1 = thread_cpu_now();
  if (me == 0)
    printf("late peer (300 ms)       rank 0 waited %.1f ms using %.1f ms of CPU (%.1f%%; the waiting thread %.1f ms, "
           "the process in 300 ms of plain sleep %.1f ms)\n",
           (w1 - w0) * 1e3, (c1 - c0) * 1e3, 100 * (c1 - c0) / (w1 - w0), (tc1 - tc0) * 1e3, (b1 - b0) * 1e3);
  free(s), free(r);
  gt_dist_finalize();
  return 0;
}
