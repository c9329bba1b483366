/* gemtrain bench mpi: what running over MPI ranks costs and gives.
 *
 * Under mpirun (R ranks, one device each): the mesh's all-reduce and
 * reduce-scatter of a large buffer (64 MiB by default) across the ranks,
 * next to the MPI library's own MPI_Allreduce of the same buffer, and the
 * training throughput of the config on R ranks x 1 device x 1 thread.
 * Without mpirun: the same collectives between 2 in-process devices, and
 * the throughput of 1 process x 2 devices x 1 thread and of 1 process x 1
 * device x 2 threads. tools/bench_mpi.sh runs both and prints the ratios.
 * Timing lives here, never in tests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "cli.h"
#include "dist/dist.h"
#include "mesh/mesh.h"
#include "train/train.h"

typedef struct coll_bench {
  gt_mesh *m;
  int64_t n;
  int reps;
  float **buf, **out; /* [devices] */
  double *t_ar, *t_rs; /* [reps], device 0's */
} coll_bench;

/* Every device: a barrier, then the collective, timed on device 0 (the
 * barrier lines the devices up, so the time is the collective's). */
static void run_colls(int dev, void *arg) {
  coll_bench *b = arg;
  for (int r = 0; r < b->reps; r++) {
    gt_barrier(b->m, dev);
    double t0 = gt_prof_now();
    gt_all_reduce(b->m, dev, b->buf[dev], b->n);
    double t1 = gt_prof_now();
    gt_barrier(b->m, dev);
    double t2 = gt_prof_now();
    gt_reduce_scatter(b->m, dev, b->buf[dev], b->out[dev], b->n);
    double t3 = gt_prof_now();
    if (dev == 0) b->t_ar[r] = t1 - t0, b->t_rs[r] = t3 - t2;
  }
}

/* The mesh's collectives over `ranks` ranks x `devs` devices per rank. */
static int bench_collectives(int devs, int64_t n, int reps, double *ar_s, double *rs_s, int *ok) {
  gt_err err;
  gt_err_clear(&err);
  coll_bench b = {NULL, n, reps, NULL, NULL, NULL, NULL};
  int R = gt_dist_size();
  const int ici[3] = {1, devs, 1}, dcn[3] = {1, R, 1};
  if (gt_dist_set_devices(devs, &err) || gt_mesh_create(&b.m, devs, &err) ||
      gt_mesh_set_layout(b.m, ici, dcn, gt_dist_rank(), &err)) {
    fprintf(stderr, "gemtrain bench mpi: %s\n", err.msg);
    gt_mesh_destroy(b.m);
    return 1;
  }
  b.buf = calloc((size_t)devs, sizeof(float *));
  b.out = calloc((size_t)devs, sizeof(float *));
  b.t_ar = calloc((size_t)reps, sizeof(double));
  b.t_rs = calloc((size_t)reps, sizeof(double));
  int fail = !b.buf || !b.out || !b.t_ar || !b.t_rs;
  for (int d = 0; !fail && d < devs; d++) {
    b.buf[d] = malloc((size_t)n * sizeof(float));
    b.out[d] = malloc((size_t)n * sizeof(float));
    fail = !b.buf[d] || !b.out[d];
  }
  if (fail) {
    fprintf(stderr, "gemtrain bench mpi: no memory for %lld floats per device\n", (long long)n);
  } else {
    /* small integers: every sum is exact, whatever the order */
    for (int d = 0; d < devs; d++)
      for (int64_t i = 0; i < n; i++) b.buf[d][i] = (float)(gt_mesh_global_id(b.m, d) + 1);
    gt_mesh_run(b.m, run_colls, &b);
    if (gt_mesh_take_error(b.m, &err)) {
      fprintf(stderr, "gemtrain bench mpi: %s\n", err.msg);
      fail = 1;
    }
  }
  if (!fail) {
    /* after reps all-reduces in place every element is (sum of 1..G) x G^(reps-1) */
    int G = gt_mesh_global_size(b.m);
    double want = G * (G + 1) / 2.0 * pow(G, reps - 1);
    *ok = b.buf[0][0] == (float)want && b.buf[0][n - 1] == (float)want;
    *ar_s = gt_bench_median(b.t_ar, reps);
    *rs_s = gt_bench_median(b.t_rs, reps);
  }
  for (int d = 0; b.buf && d < devs; d++) free(b.buf[d]);
  for (int d = 0; b.out && d < devs; d++) free(b.out[d]);
  free(b.buf), free(b.out), free(b.t_ar), free(b.t_rs);
  gt_mesh_destroy(b.m);
  return fail;
}

int gt_bench_mpi(int argc, char **argv, int steps, int mib, int reps) {
  if (mib < 1) mib = 1;
  if (reps < 1) reps = 1;
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "synthetic");
  const int R = gt_dist_size(), me = gt_dist_rank();
  const int64_t n = (int64_t)mib * 1048576 / (int64_t)sizeof(float);
  const double bytes = (double)n * sizeof(float);
  /* 1. collectives: across the ranks (1 device each), or 2 devices in this process */
  int devs = R > 1 ? 1 : 2, G = R * devs, ok = 0;
  double ar = 0, rs = 0, mpi_ar = 0;
  if (bench_collectives(devs, n, reps, &ar, &rs, &ok)) return 1;
  if (R > 1) {
    gt_err err;
    gt_err_clear(&err);
    float *buf = malloc((size_t)n * sizeof(float));
    if (!buf || gt_dist_bench_allreduce(buf, n, reps, &mpi_ar, &err)) {
      fprintf(stderr, "gemtrain bench mpi: %s\n", buf ? err.msg : "no memory");
      free(buf);
      return 1;
    }
    free(buf);
  }
  if (me == 0) {
    /* algorithm bandwidth: bytes / time; bus bandwidth (what each link
     * carries): x 2(G-1)/G for an all-reduce, x (G-1)/G for a reduce-scatter */
    printf("collectives: %d MiB of float32, %d %s, median of %d (MPI threads: %s)\n", mib, G,
           R > 1 ? "ranks x 1 device" : "devices in one process", reps, gt_dist_thread_level());
    printf("| collective | seconds | algbw GB/s | busbw GB/s |%s\n", R > 1 ? " vs MPI_Allreduce |" : "");
    printf("|---|---|---|---|%s\n", R > 1 ? "---|" : "");
    double f_ar = 2.0 * (G - 1) / G, f_rs = (double)(G - 1) / G;
    printf("| gemtrain all_reduce%s | %.4f | %.2f | %.2f |", ok ? "" : " (WRONG SUM)", ar, bytes / ar / 1e9,
           bytes / ar / 1e9 * f_ar);
    if (R > 1) printf(" %.2fx |", ar / mpi_ar);
    printf("\n| gemtrain reduce_scatter | %.4f | %.2f | %.2f |", rs, bytes / rs / 1e9, bytes / rs / 1e9 * f_rs);
    if (R > 1) printf(" %.2fx |", rs / mpi_ar);
    printf("\n");
    if (R > 1)
      printf("| MPI_Allreduce | %.4f | %.2f | %.2f | 1.00x |\n", mpi_ar, bytes / mpi_ar / 1e9, bytes / mpi_ar / 1e9 * f_ar);
    printf("\n");
    fflush(stdout);
  }
  /* 2. training throughput, the same global batch on every layout: the
   * config's per_device_batch_size for 2 devices (R of them under mpirun) */
  const int ndev = R > 1 ? R : 2;
  long long gb = llround(cfg.per_device_batch_size * ndev);
  struct { int dev, threads; } runs[2] = {{1, 1}, {1, 1}};
  int nruns = 1;
  if (R == 1) runs[0].dev = 2, runs[1].threads = 2, nruns = 2;
  if (me == 0)
    printf("training: %s, %lld layers, global batch %lld x %lld, median of %d steps\n", cfg.model_name,
           cfg.base_num_decoder_layers, gb, cfg.max_target_length, steps);
  for (int i = 0; i < nruns; i++) {
    gt_config c = cfg;
    c.num_devices = runs[i].dev;
    c.threads_per_device = runs[i].threads;
    c.ici_data_parallelism = 1, c.ici_expert_parallelism = 1, c.ici_fsdp_parallelism = -1;
    c.dcn_data_parallelism = 1, c.dcn_expert_parallelism = 1, c.dcn_fsdp_parallelism = R;
    c.per_device_batch_size = (double)gb / (runs[i].dev * R);
    gt_err e;
    if (gt_config_validate(&c, &e)) {
      fprintf(stderr, "gemtrain bench mpi: %s\n", e.msg);
      return 2;
    }
    gt_threads_configure(&c);
    double step_s = 0;
    if (gt_bench_step_seconds(&c, steps, &step_s)) return 1;
    if (me == 0) {
      printf("tokens/s: %.1f  (%d process%s x %d device%s x %d thread%s)\n", (double)gb * c.max_target_length / step_s,
             R, R > 1 ? "es" : "", runs[i].dev, runs[i].dev > 1 ? "s" : "", runs[i].threads,
             runs[i].threads > 1 ? "s" : "");
      fflush(stdout);
    }
  }
  return 0;
}
