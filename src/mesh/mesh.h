/* gemtrain mesh: num_devices worker threads standing in for devices, and the
 * collectives between them over shared memory.
 *
 * SPMD: gt_mesh_run runs one function on every device's worker thread; inside
 * it each device calls the collectives with its own buffers, like an MPI rank.
 * A device reads another device's memory only inside a collective.
 *
 * Sharding of an n-element buffer over N devices: device d owns elements
 * [gt_shard_begin(n, N, d), gt_shard_begin(n, N, d + 1)), so shards differ by
 * at most one element and any n (0, 1, prime, ...) works.
 *
 * Reductions follow a chunked ring: the sum of chunk c is accumulated in the
 * fixed device order c+1, c+2, ..., c (mod N), so results are the same run to
 * run (not across device counts, whose order differs). Each collective counts
 * the bytes a ring would send per device and the time it takes. */
#ifndef GEMTRAIN_MESH_H
#define GEMTRAIN_MESH_H

#include <stdint.h>

#include "base/common.h"
#include "base/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_mesh gt_mesh;

typedef struct gt_comm_stats {
  int64_t bytes_sent; /* per device, as a ring would send them */
  int64_t calls;
  double seconds;     /* wall time inside collectives */
  int64_t bytes_dcn;  /* of bytes_sent, those that went to another rank (MPI) */
} gt_comm_stats;

/* n_devices >= 1 worker threads (created once, reused by every run). Each
 * device thread computes with a team of max(1, cores / n_devices) threads
 * (base/team.h; remade before a run when the count changed), so devices
 * never oversubscribe the cores. GT_ERR_ARG for n_devices outside 1..1024. */
gt_rc gt_mesh_create(gt_mesh **out, int n_devices, gt_err *err);
void gt_mesh_destroy(gt_mesh *m);
int gt_mesh_size(const gt_mesh *m);
/* Threads each device computes with (default: cores / devices, at
 * least 1); the config's threads_per_device when it is set. Call between runs. */
void gt_mesh_set_threads(gt_mesh *m, int threads_per_device);
/* collective_timeout_seconds of this mesh's exchanges with other ranks (> 0
 * and finite, else ignored; default 300): each device and comm thread takes
 * it as its own (gt_dist_set_timeout) before it works, so meshes of one
 * process do not share it. Call between runs. */
void gt_mesh_set_timeout(gt_mesh *m, double seconds);
double gt_mesh_timeout(const gt_mesh *m);
/* Runs fn(device, arg) once on every device's thread and waits for all.
 * Not from inside fn (it would deadlock); concurrent callers are serialised.
 * A misused or failed collective inside fn cannot return an error (see
 * gt_mesh_take_error): call that after every run. A NULL fn is recorded
 * there too; a NULL mesh does nothing. */
void gt_mesh_run(gt_mesh *m, void (*fn)(int device, void *arg), void *arg);
/* The mesh's first recorded error, returned (rc and message in err) and
 * cleared; GT_OK when there is none. Call it between runs (during one:
 * GT_ERR_ARG, and the error stays).
 *
 * A collective that sees a misuse (bad dev, n < 0, an unknown group, a bad
 * root, gt_mesh_wait on a ticket never issued) or cannot allocate its reduce
 * scratch records one line naming the device, the collective, what was
 * expected and what was found, e.g. "mesh: device 1: gt_all_gather: n = -3;
 * expected n >= 0" (GT_ERR_ARG; GT_ERR_NOMEM for the scratch). Only the
 * first error is kept. The failing call does nothing harmful but still takes
 * part in its group's barriers (as its caller's own device, with n = 0, an
 * unknown group as GT_GROUP_ALL), so its peers are released; from then on,
 * until the error is taken, every collective moves no data and counts no
 * stats but keeps its barriers, so no device hangs as long as every device
 * keeps calling the same collectives (the results of such a run are
 * garbage: discard them). Misuses the mesh cannot see (devices calling
 * different collectives, groups or n) still hang or corrupt. */
gt_rc gt_mesh_take_error(gt_mesh *m, gt_err *err);
/* Called by a device inside a run when it stops calling collectives (its
 * step failed): records the mesh's error (GT_ERR_INTERNAL, "device d left
 * the run before its peers' collectives") and from then until the run ends
 * counts the device as arrived at every barrier of its groups, so its peers'
 * collectives complete without moving data (their verdict is failed) and no
 * peer waits for it. Its async gathers already queued are finished first.
 * The next run starts with every device present. Peers on other ranks
 * are not told: their exchanges with this rank time out. */
void gt_mesh_leave(gt_mesh *m, int dev);
/* 1 when an error is recorded and not yet taken. Read after a collective
 * that every device completed, all devices see the same answer: a device
 * step checks it before applying an update computed from collectives. */
int gt_mesh_failed(const gt_mesh *m);

/* Collectives: every device of the mesh calls the same one with the same n.
 * all_gather: out[n] = concatenation of every device's shard (in = its own
 *   shard, gt_shard_len(n, N, d) elements). in may alias out's own range.
 * reduce_scatter: out (own shard) = sum over devices of in[n]'s shard range.
 * all_reduce: buf[n] = sum over devices, in place.
 * broadcast: buf[n] of every device = root's.
 * barrier: waits for every device.
 * They are called only inside gt_mesh_run, dev = the device fn was given, by
 * every device in the same order with the same n (and root); each device's
 * buffers are its own. reduce_scatter never writes `in` (accumulators live in
 * a per-device scratch grown on demand). Every collective ends with a barrier,
 * so on return no other device still reads this device's buffers. Misuse
 * (bad dev, n < 0, bad root) and a failed scratch allocation are recorded
 * for gt_mesh_take_error (they return nothing). bytes_sent per device: reduce_scatter n - len(d), all_gather
 * and broadcast n - len(d+1 mod N), all_reduce both, times the element size. */
void gt_all_gather(gt_mesh *m, int dev, const float *in, float *out, int64_t n);
void gt_reduce_scatter(gt_mesh *m, int dev, const float *in, float *out, int64_t n);
void gt_all_reduce(gt_mesh *m, int dev, float *buf, int64_t n);
void gt_all_reduce_f64(gt_mesh *m, int dev, double *buf, int64_t n);
void gt_broadcast(gt_mesh *m, int dev, float *buf, int64_t n, int root);
/* all_gather of 2-byte elements (bfloat16 bit patterns, moved as they are):
 * the same ring, chunks and order over the same element ranges
 * (gt_shard_begin(n, N, d)), so every element arrives with its bits; bytes
 * counted are 2 per element (half a float32 gather's). */
void gt_all_gather_bf16(gt_mesh *m, int dev, const uint16_t *in, uint16_t *out, int64_t n);
void gt_barrier(gt_mesh *m, int dev);

/* ---- mesh axes and group collectives ----
 * The devices form a data x fsdp grid (x expert, see gt_mesh_set_axes3): device d has data index d / fsdp and
 * fsdp index d % fsdp (MaxText's ici_data_parallelism x ici_fsdp_parallelism;
 * the default is 1 x N). A group collective runs among the devices of the
 * caller's fsdp group (same data index; ranks = fsdp index) or data group
 * (same fsdp index; ranks = data index), with shards by gt_shard_begin over
 * the group size and the same ring order and byte accounting as above.
 * Every device calls the same group collectives in the same order (groups
 * of the same kind run concurrently). GT_GROUP_ALL is the whole mesh. */
typedef enum gt_group { GT_GROUP_ALL = 0, GT_GROUP_FSDP = 1, GT_GROUP_DATA = 2, GT_GROUP_EXPERT = 3 } gt_group;
/* data * fsdp must equal the mesh size (else GT_ERR_CONFIG, one line naming
 * both axes and the device count; the axes stay as they were); call between
 * runs with no async gather in flight (else GT_ERR_ARG). */
gt_rc gt_mesh_set_axes(gt_mesh *m, int data, int fsdp, gt_err *err);
/* The same with a third axis (ici_expert_parallelism): device d has expert
 * index d % expert, fsdp index d / expert % fsdp and data index
 * d / (expert * fsdp). GT_GROUP_EXPERT is the devices with the caller's data
 * and fsdp index (ranks = expert index); the fsdp and data groups also keep
 * the caller's expert index. set_axes(data, fsdp) = set_axes3(.., 1). */
gt_rc gt_mesh_set_axes3(gt_mesh *m, int data, int fsdp, int expert, gt_err *err);
/* ---- ranks (MaxText's DCN axes, over MPI: src/dist/dist.h) ----
 * A mesh can be one process's part of a global mesh: R = dcn[0] * dcn[1] *
 * dcn[2] processes ("ranks", MaxText's slices) of n devices each, n =
 * ici[0] * ici[1] * ici[2]; axis k of the global mesh is ici[k] * dcn[k]
 * long (data, fsdp, expert) and, as in MaxText's hybrid mesh, its rank part
 * is the outer one: rank (rd, rf, re) = (r / (dcn1 * dcn2), r / dcn2 % dcn1,
 * r % dcn2) holds data indices [rd * ici0, (rd + 1) * ici0), and so on. Global
 * device g = (data index * fsdp + fsdp index) * expert + expert index as
 * above; local device l of this rank is the l-th of its block in that
 * order. Every collective takes local device indices and runs over the
 * global groups: links between devices of one process are shared memory,
 * links to another rank are messages (gt_dist_exchange), and the ring and
 * its order of additions are the same, so results do not depend on how the
 * devices are spread over processes (2 ranks x 1 device = 1 rank x 2
 * devices, bit for bit). `rank` is this process's (gt_dist_rank()), or any
 * rank for an allocation-only mesh that never communicates. GT_ERR_CONFIG
 * when the ici product is not the mesh size; between runs (as set_axes).
 * gt_mesh_set_axes3(d, f, e) is the layout {d, f, e} x {1, 1, 1}. */
gt_rc gt_mesh_set_layout(gt_mesh *m, const int ici[3], const int dcn[3], int rank, gt_err *err);
int gt_mesh_ranks(const gt_mesh *m);
int gt_mesh_rank(const gt_mesh *m);
int gt_mesh_global_size(const gt_mesh *m);         /* G = ranks x devices */
int gt_mesh_global_id(const gt_mesh *m, int dev);  /* local device -> global */
int gt_mesh_rank_of(const gt_mesh *m, int gid);    /* global device -> its rank */
/* The rows of a global batch of B rows (B / G per global device, in global
 * device order) that this process's devices compute: [row0, row0 + nrows),
 * the span covering them (all B with one rank). */
void gt_mesh_rows(const gt_mesh *m, int B, int *row0, int *nrows);

/* Group sizes and a local device's rank in its group, over the global mesh
 * (GT_GROUP_ALL: G and the global index). */
int gt_mesh_group_size(const gt_mesh *m, gt_group g);
int gt_mesh_group_rank(const gt_mesh *m, gt_group g, int dev);
void gt_all_gather_g(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n);
void gt_all_gather_bf16_g(gt_mesh *m, int dev, gt_group g, const uint16_t *in, uint16_t *out, int64_t n);
void gt_reduce_scatter_g(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n);
void gt_all_reduce_g(gt_mesh *m, int dev, gt_group g, float *buf, int64_t n);
void gt_all_reduce_f64_g(gt_mesh *m, int dev, gt_group g, double *buf, int64_t n);

/* ---- asynchronous all-gather (prefetch) ----
 * Hands the gather to the device's communication thread and returns at once
 * with a ticket; gt_mesh_wait returns when `out` is complete. The
 * communication threads of a group run the same ring as gt_all_gather_g, so
 * the result is bit-identical to it, while the device thread computes. Every
 * device issues the same async gathers in the same order; `in` and `out` must
 * stay valid until the wait. Synchronous collectives issued while an async
 * one is in flight are allowed (they use the device threads).
 * Tickets are 1, 2, 3, ... per device, across runs. Gathers complete in
 * issue order, so waiting on a ticket also completes every earlier one of
 * the device; waiting on a ticket never issued by this device records an
 * error (gt_mesh_take_error) and returns at once, and a device must not
 * wait on a ticket its group peers never issue (it would block forever).
 * Each async gather counts in gt_mesh_stats like a
 * synchronous one (bytes, one call); its seconds are the comm thread's time
 * running it (queueing excluded), so they may overlap the device's own.
 * gt_mesh_destroy first finishes every queued gather, then joins the comm
 * threads. A misused call (see gt_mesh_take_error) is queued and skipped
 * like a synchronous one; it returns 0 only when no device of the mesh
 * called it. */
int gt_all_gather_async(gt_mesh *m, int dev, gt_group g, const float *in, float *out, int64_t n);
/* The same on 2-byte elements (gt_all_gather_bf16_g's ring, its bits and
 * bytes); shares the device's FIFO and tickets with the float32 one. */
int gt_all_gather_bf16_async(gt_mesh *m, int dev, gt_group g, const uint16_t *in, uint16_t *out, int64_t n);
void gt_mesh_wait(gt_mesh *m, int dev, int ticket);

/* The profiler timeline (base/trace.h; NULL detaches): every completed
 * collective becomes a span with its bytes on the lane of the thread that
 * ran it (device lanes for the synchronous ones and the waits on a prefetch,
 * communication lanes for the async gathers). tr must have at least as many
 * devices as the mesh. Between runs, like gt_mesh_set_axes. */
struct gt_trace;
void gt_mesh_set_trace(gt_mesh *m, struct gt_trace *tr);

/* Per-device counters (since creation or the last reset). Read them, and
 * reset, between runs (a device may read its own inside a run). */
gt_comm_stats gt_mesh_stats(const gt_mesh *m, int dev);
void gt_mesh_reset_stats(gt_mesh *m);

#ifdef __cplusplus
}
#endif
#endif
