/* gemtrain's process layer: MPI ranks as MaxText's slices (the DCN axes).
 *
 * A run started by an MPI launcher (mpirun / mpiexec of Open MPI or MPICH)
 * has one rank per process; each rank's devices are worker threads (the ICI
 * axes, src/mesh). Everything here uses only the MPI C API. A build without
 * MPI (GT_HAVE_MPI undefined, dist_none.c) and a run not started by a
 * launcher are one rank: every call below is then a local no-op that
 * succeeds, so callers need no #ifdef.
 *
 * Nothing here prints, exits or aborts, except gt_dist_abort (for the
 * command line only). Every wait is bounded: a peer that does not answer
 * within the timeout (collective_timeout_seconds) fails the call with
 * GT_ERR_IO and a one-line message naming the rank(s) that did not answer.
 *
 * Threads: MPI_THREAD_MULTIPLE is asked for, because device threads and
 * their communication threads exchange at the same time. When the library
 * provides less (MPI_THREAD_SERIALIZED at least is required), every MPI call
 * is made under one process-wide mutex and only non-blocking calls are used
 * (polled with MPI_Test), so correctness is the same and only overlap is
 * lost. gt_dist_thread_level() says which. */
#ifndef GT_DIST_DIST_H
#define GT_DIST_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build has MPI (the compile-time GT_HAVE_MPI). */
int gt_dist_compiled(void);
/* 1 when the environment says a launcher started this process (Open MPI's
 * OMPI_COMM_WORLD_SIZE, MPICH/Hydra's PMI_SIZE, PMIx's PMIX_RANK). */
int gt_dist_launched(void);

/* Initialises MPI when this process was launched by mpirun (else nothing:
 * one rank). Idempotent. GT_ERR_CONFIG when launched with more than one
 * rank but the build has no MPI; GT_ERR_IO when MPI_Init_thread fails or
 * gives less than MPI_THREAD_SERIALIZED, or the library's MPI_TAG_UB is
 * below what the exchange's tags need (4,191,231). If the host program
 * started MPI itself, that MPI is used as it is (and not finalized here). */
gt_rc gt_dist_init(gt_err *err);
/* MPI_Finalize when gt_dist_init started MPI (and no call timed out: a
 * rank that lost a peer must not wait for it in MPI_Finalize). */
void gt_dist_finalize(void);
/* Ends every rank of the job with `code` (MPI_Abort), or exit(code) with
 * one rank. The command line calls it after a failed collective, when
 * peers may be stuck; library code never does. (Open MPI's mpirun also
 * ends the whole job, non-zero, when a rank exits without MPI_Finalize, as
 * a broken rank does after gt_dist_finalize.) */
void gt_dist_abort(int code);

int gt_dist_rank(void);       /* 0 with one rank */
int gt_dist_size(void);       /* 1 with one rank */
const char *gt_dist_host(void); /* this rank's host name ("" if unknown; set by gt_dist_init) */
/* "multiple", "serialized" (see above) or "none" (one rank). */
const char *gt_dist_thread_level(void);

/* The timeout of every wait below, in seconds (> 0; default 300), is the
 * calling thread's: each thread starts at the default, and a set (a value
 * not > 0 or not finite is ignored) changes only its own. So the host
 * collectives of two trainers in two threads, and the exchanges of two
 * meshes (each sets its own on its device and comm threads, see
 * gt_mesh_set_timeout), keep each their collective_timeout_seconds. */
#define GT_DIST_DEFAULT_TIMEOUT 300.0
void gt_dist_set_timeout(double seconds);
double gt_dist_timeout(void);
/* 1 after any call has timed out or seen a transport error: the job is
 * broken and every later call fails at once, with "rank R: <what>: an
 * earlier collective failed (<the first failure's message>)". Calls still
 * waiting in other threads give up the same way. A refused argument
 * (GT_ERR_ARG: bad lane, device, rank or root) does not break the job. */
int gt_dist_broken(void);

/* ---- host collectives ----
 * Called by one thread of every rank (the main thread, outside mesh runs),
 * in the same order on every rank. `what` names the call in error messages
 * ("checkpoint commit"). Results are the same bits on every rank and do not
 * depend on timing (sums are taken in rank order). Each but bcast (root
 * to every other rank) is an exchange of every rank's part with every
 * other rank, so also a barrier; a timeout names the ranks whose part did
 * not arrive ("rank 1: checkpoint commit: no data from rank 0 within 300 s
 * (collective_timeout_seconds); is rank 0 alive?"). They use their own
 * communicator: exchanges of device threads may run at the same time.
 * Reductions go through the network R x 4 MiB at a time (scratch of that
 * size, not of the buffer). */
gt_rc gt_dist_barrier(const char *what, gt_err *err);
/* buf[n] of every rank = root's. */
gt_rc gt_dist_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err);
/* In place, element-wise over ranks (i64 sums wrap around). */
gt_rc gt_dist_allreduce_i64(int64_t *v, int n, int op /* GT_DIST_SUM / MAX / MIN */, const char *what,
                            gt_err *err);
gt_rc gt_dist_allreduce_f64_sum(double *v, int n, const char *what, gt_err *err);
/* Bitwise OR of n 32-bit words (assembles pieces each written by one rank
 * into zeroed buffers: exact, -0.0 stays -0.0). */
gt_rc gt_dist_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err);
/* out[size * n]: rank r's n values at out[r * n]. */
gt_rc gt_dist_allgather_i64(const int64_t *in, int n, int64_t *out, const char *what, gt_err *err);
/* Agreement on an outcome: returns GT_OK when every rank passed GT_OK (err
 * untouched); else the first failing rank's rc, with err = "rank R: <its
 * message>" (the failing rank's own err when it is this rank; a failing
 * rank without mine_err sends its rc's name). err may be mine_err. */
gt_rc gt_dist_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err);

enum { GT_DIST_SUM = 0, GT_DIST_MAX = 1, GT_DIST_MIN = 2 };

/* ---- replica groups (DiLoCo: dcn_diloco_parallelism) ----
 * The ranks can be split once into n replicas of consecutive ranks (rank r
 * is in replica r / (R / n), at place r % (R / n) in it). Each replica
 * trains on its own mesh: the point-to-point exchanges of gt_dist_exchange
 * then run among the ranks of the caller's replica (its ranks and devices
 * numbered inside the replica, as gt_mesh_set_layout sees them), and so do
 * the gt_dist_replica_* host collectives; the plain host collectives above
 * stay over every rank of the job (one run directory, one stop decision).
 * gt_dist_cross_* run among the ranks at the same place of every replica:
 * sums in replica order, the same bits on every rank. Before a split (and
 * with one rank) the replica is the whole job and the cross collectives
 * are no-ops. Error messages name peers by their rank in the job. */
/* Collective over every rank (a bounded barrier, then MPI_Comm_split);
 * GT_ERR_CONFIG when n does not divide the ranks, GT_ERR_ARG when already
 * split another way. n = 1 (or the current count) changes nothing. */
gt_rc gt_dist_set_replicas(int n, gt_err *err);
int gt_dist_replica(void);      /* this rank's replica, 0 .. replicas - 1 */
int gt_dist_replicas(void);     /* 1 until split */
int gt_dist_replica_rank(void); /* this rank's place in its replica */
int gt_dist_replica_size(void); /* ranks per replica */
gt_rc gt_dist_replica_barrier(const char *what, gt_err *err);
gt_rc gt_dist_replica_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err);
gt_rc gt_dist_replica_allreduce_i64(int64_t *v, int n, int op, const char *what, gt_err *err);
gt_rc gt_dist_replica_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err);
gt_rc gt_dist_replica_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err);
/* In place: v[i] = sum over replicas (replica 0 first, then 1, ...). Each
 * rank sends its n values to every other replica's rank at its place:
 * (replicas - 1) x n x the element size. */
gt_rc gt_dist_cross_allreduce_f32(float *v, int64_t n, const char *what, gt_err *err);
gt_rc gt_dist_cross_allreduce_f64(double *v, int64_t n, const char *what, gt_err *err);

/* ---- point-to-point for the mesh's rings ----
 * One ring step of one device thread: send `send_bytes` from `send` to
 * device `to_dev` of rank `to_rank` (a rank of the caller's replica, see
 * above), and receive `recv_bytes` into `recv`
 * from device `from_dev` of rank `from_rank`, both at once (either side may
 * be absent: rank -1 or 0 bytes; an absent side sends or expects no message
 * at all, so both ends must agree, as they do when both derive the sizes
 * from the same shapes). Messages are bytes, whatever the elements (the
 * mesh's float32 rings and its 2-byte bf16 all-gather alike, MPI_BYTE on
 * the wire). recv_bytes must equal the sender's send_bytes: a
 * different size fails (GT_ERR_IO, naming both) and breaks the job. Devices
 * (dev, to_dev, from_dev) are 0..1023. Any thread may call it, several at
 * once. `lane` (0 device threads, 1 comm threads)
 * and the device pair select the channel, so concurrent rings of different
 * lanes and devices never match each other's messages; on one channel
 * messages arrive in the order they were sent (MPI's non-overtaking rule).
 * `dev` is the calling device (local index); `what` names the collective.
 * Waits are polled: a short busy phase, then sleeps that grow to 1 ms, so
 * a waiting thread leaves the cores to computing ones.
 * GT_ERR_IO on timeout ("rank 0 device 1: gt_all_gather: no data from rank 1
 * device 0 within 300 s (collective_timeout_seconds); is rank 1 alive?") or
 * a transport error; the pending requests are then abandoned and
 * gt_dist_broken() is 1. An abandoned receive that MPI had already matched
 * may still be written by a late peer during later MPI activity of this
 * process: after such a failure keep `recv` alive or end the job
 * (gt_dist_abort). */
/* The devices of each process (the same on every rank), before the first
 * exchange: the channels' tags are from_dev * n + to_dev, so the library's
 * MPI_TAG_UB must reach n^2 - 1 (GT_ERR_CONFIG naming both otherwise; MPI
 * promises only 32767, i.e. 181 devices). Until it is called, 1024 when the
 * library allows that many. A no-op with one rank. */
gt_rc gt_dist_set_devices(int n, gt_err *err);

typedef struct gt_dist_xfer {
  const void *send;
  size_t send_bytes;
  int to_rank, to_dev;
  void *recv;
  size_t recv_bytes;
  int from_rank, from_dev;
} gt_dist_xfer;
gt_rc gt_dist_exchange(const gt_dist_xfer *x, int lane, int dev, const char *what, gt_err *err);

/* The benchmark's yardstick (gemtrain bench mpi): `reps` MPI_Allreduce
 * (MPI_SUM, float) of buf[n] over all ranks, the median seconds of one.
 * Collective over ranks; GT_ERR_ARG with one rank or reps outside 1..64. */
gt_rc gt_dist_bench_allreduce(float *buf, int64_t n, int reps, double *seconds, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
