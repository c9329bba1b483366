/* The process layer without MPI (dist.h): this build is one rank, every
 * call a local no-op. Built instead of dist_mpi.c when CMake finds no MPI
 * or GT_MPI is OFF. The one thing it cannot do is run under a launcher that
 * started several copies of it: each would train alone as "rank 0" and
 * overwrite the others' files, so gt_dist_init refuses. */
#define _POSIX_C_SOURCE 200809L
#include "dist/dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char host_name[256];
static _Thread_local double timeout_s; /* the calling thread's; 0: the default */

int gt_dist_compiled(void) { return 0; }

int gt_dist_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK");
}

/* A launcher's variable as a count, -1 when unset or not a number. */
static long env_long(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  long v = strtol(s, &end, 10);
  return *end || v < 0 ? -1 : v;
}

gt_rc gt_dist_init(gt_err *err) {
  if (gt_dist_launched()) {
    /* Open MPI and Hydra name the size; PMIx names only the rank, and a
     * rank above 0 means several processes */
    long size = env_long("OMPI_COMM_WORLD_SIZE");
    if (size < 0) size = env_long("PMI_SIZE");
    long rank = env_long("OMPI_COMM_WORLD_RANK");
    if (rank < 0) rank = env_long("PMI_RANK");
    if (rank < 0) rank = env_long("PMIX_RANK");
    if (size > 1)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "dist: an MPI launcher started %ld ranks, but this gemtrain was built without MPI; rebuild "
                        "with libopenmpi-dev installed",
                        size);
    if (rank > 0)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "dist: an MPI launcher started this process as rank %ld, but this gemtrain was built without "
                        "MPI; rebuild with libopenmpi-dev installed",
                        rank);
  }
  if (!host_name[0] && gethostname(host_name, sizeof host_name - 1)) host_name[0] = '\0';
  return GT_OK;
}

void gt_dist_finalize(void) {}
void gt_dist_abort(int code) { exit(code); }

int gt_dist_rank(void) { return 0; }
int gt_dist_size(void) { return 1; }
const char *gt_dist_host(void) { return host_name; }
const char *gt_dist_thread_level(void) { return "none"; }

void gt_dist_set_timeout(double seconds) {
  if (seconds > 0 && isfinite(seconds)) timeout_s = seconds;
}
double gt_dist_timeout(void) { return timeout_s > 0 ? timeout_s : GT_DIST_DEFAULT_TIMEOUT; }
int gt_dist_broken(void) { return 0; }

gt_rc gt_dist_barrier(const char *what, gt_err *err) { return GT_OK; }

gt_rc gt_dist_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err) {
  if (root != 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: broadcast root %d; expected 0 (one rank)", what ? what : "bcast",
                      root);
  return GT_OK;
}

gt_rc gt_dist_allreduce_i64(int64_t *v, int n, int op, const char *what, gt_err *err) {
  if (n < 0 || (op != GT_DIST_SUM && op != GT_DIST_MAX && op != GT_DIST_MIN))
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: allreduce_i64 of n = %d, op %d; expected n >= 0 and op SUM, MAX or MIN",
                      what ? what : "allreduce", n, op);
  return GT_OK;
}

gt_rc gt_dist_allreduce_f64_sum(double *v, int n, const char *what, gt_err *err) {
  if (n < 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: allreduce_f64_sum of n = %d; expected n >= 0",
                      what ? what : "allreduce", n);
  return GT_OK;
}

gt_rc gt_dist_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err) {
  if (n < 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: allreduce_bor of n = %lld; expected n >= 0",
                      what ? what : "allreduce", (long long)n);
  return GT_OK;
}

gt_rc gt_dist_allgather_i64(const int64_t *in, int n, int64_t *out, const char *what, gt_err *err) {
  if (n < 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: allgather_i64 of n = %d; expected n >= 0",
                      what ? what : "allgather", n);
  if (n) memmove(out, in, sizeof *in * (size_t)n);
  return GT_OK;
}

gt_rc gt_dist_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  if (mine != GT_OK && err && err != mine_err) {
    if (mine_err)
      *err = *mine_err;
    else
      gt_err_set(err, mine, "%s", gt_rc_name(mine));
    err->rc = mine;
  }
  return mine;
}

gt_rc gt_dist_exchange(const gt_dist_xfer *x, int lane, int dev, const char *what, gt_err *err) {
  what = what ? what : "gt_dist_exchange";
  if (!x) return gt_err_set(err, GT_ERR_ARG, "rank 0 device %d: %s: no transfer given", dev, what);
  if (lane < 0 || lane > 1)
    return gt_err_set(err, GT_ERR_ARG, "rank 0 device %d: %s: lane %d; expected 0 (devices) or 1 (comm threads)", dev,
                      what, lane);
  if ((x->to_rank >= 0 && x->send_bytes > 0) || (x->from_rank >= 0 && x->recv_bytes > 0))
    return gt_err_set(err, GT_ERR_ARG,
                      "rank 0 device %d: %s: one rank (built without MPI) has no peer to exchange with "
                      "(to rank %d, from rank %d)",
                      dev, what, x->to_rank, x->from_rank);
  return GT_OK;
}

gt_rc gt_dist_bench_allreduce(float *buf, int64_t n, int reps, double *seconds, gt_err *err) {
  (void)buf, (void)n, (void)reps, (void)seconds;
  return gt_err_set(err, GT_ERR_ARG, "gt_dist_bench_allreduce: one rank (this gemtrain was built without MPI)");
}

gt_rc gt_dist_set_devices(int n, gt_err *err) {
  (void)n, (void)err;
  return GT_OK;
}

int gt_dist_replica(void) { return 0; }
int gt_dist_replicas(void) { return 1; }
int gt_dist_replica_rank(void) { return 0; }
int gt_dist_replica_size(void) { return 1; }

gt_rc gt_dist_set_replicas(int n, gt_err *err) {
  if (n != 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "dist: %d replicas of the 1 rank (dcn_diloco_parallelism); expected a divisor of the ranks", n);
  return GT_OK;
}

gt_rc gt_dist_replica_barrier(const char *what, gt_err *err) { return gt_dist_barrier(what, err); }
gt_rc gt_dist_replica_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err) {
  return gt_dist_bcast(buf, bytes, root, what, err);
}
gt_rc gt_dist_replica_allreduce_i64(int64_t *v, int n, int op, const char *what, gt_err *err) {
  return gt_dist_allreduce_i64(v, n, op, what, err);
}
gt_rc gt_dist_replica_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err) {
  return gt_dist_allreduce_bor(v, n, what, err);
}
gt_rc gt_dist_replica_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  return gt_dist_agree(mine, mine_err, what, err);
}
gt_rc gt_dist_cross_allreduce_f32(float *v, int64_t n, const char *what, gt_err *err) {
  (void)v;
  if (n < 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: cross-replica sum of n = %lld; expected n >= 0 values",
                      what ? what : "cross", (long long)n);
  return GT_OK;
}
gt_rc gt_dist_cross_allreduce_f64(double *v, int64_t n, const char *what, gt_err *err) {
  (void)v;
  if (n < 0)
    return gt_err_set(err, GT_ERR_ARG, "rank 0: %s: allreduce_f64_sum of n = %lld; expected n >= 0 values",
                      what ? what : "cross", (long long)n);
  return GT_OK;
}
