/* The process layer over MPI (dist.h), built when CMake finds MPI.
 *
 * Only non-blocking point-to-point calls move data, and every wait is our
 * own poll loop (wait_reqs), so every wait is bounded by the timeout and a
 * timeout names exactly the ranks whose part did not arrive. The host
 * collectives are all-to-all exchanges of each rank's contribution (R is a
 * handful of slices), combined in rank order, so their bits never depend on
 * which message arrived first.
 *
 * Communicators: MPI_COMM_WORLD is duplicated once for the host collectives
 * and once per exchange lane, so a host collective, a device thread's ring
 * step and a comm thread's ring step can never match each other's messages.
 * Inside a lane the tag is from_dev * S + to_dev, S the devices per process
 * (gt_dist_set_devices; 1024 until it is called, when the library's
 * MPI_TAG_UB allows that many). */
#define _POSIX_C_SOURCE 200809L
#include "dist/dist.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
  LANES = 2,
  MAX_DEV = 1024,
  /* host-collective tags: one per kind, so ranks that call different
   * collectives time out naming the call instead of mixing their bytes */
  TAG_BARRIER = 1,
  TAG_BCAST,
  TAG_I64,
  TAG_F64,
  TAG_BOR,
  TAG_GATHER,
  TAG_AGREE,
  TAG_F32,
};
/* MPI counts are int: larger transfers go as several messages of this size,
 * matched in order on their channel (MPI's non-overtaking rule). */
#define MSG_MAX ((size_t)1 << 30)
/* Reductions go through at most this many bytes per rank at a time: a
 * multi-hundred-MB OR of checkpoint pieces needs R x this in scratch, not R
 * copies of the buffer. */
#define REDUCE_CHUNK ((size_t)4 << 20)

/* ---- the poll loop's rule (wait_reqs) ----
 * A wait polls MPI_Testsome. A poll that completes a request, or that
 * spends longer inside MPI than PROGRESS_NS (PROGRESS_COLD_NS for the
 * first poll after a sleep), counts as progress; progress (and the start)
 * opens a busy phase of SPIN_NS, polling back to back with a
 * sched_yield() between polls, and resets the sleep to SLEEP_MIN_NS. Out
 * of the busy phase the loop sleeps, the sleep doubling up to
 * SLEEP_MAX_NS, until progress, completion or the timeout.
 *
 * Why, measured on the 2-core dev machine (Open MPI 4.1.4, shared-memory
 * BTL 'vader', 2 ranks exchanging 64 MiB float32 both ways; tests/bench_dist.c,
 * medians of 15; the machine is shared, so the figures are from runs while
 * it was quiet, and noisy runs swing 2-3x either way):
 * - CMA single copy (the default here): the receiver's one MPI_Test that
 *   matches the message copies all 64 MiB (~13 ms) and the sender finishes
 *   when it sees the FIN. gt_dist_exchange 13.5-14.1 ms, MPI_Sendrecv
 *   13.9-14.2 ms.
 * - without single copy (btl_vader_single_copy_mechanism=none, what a
 *   machine that forbids ptrace between ranks gets) the message moves in
 *   32 KiB fragments, only while both sides are inside MPI. The same loop
 *   without the progress rule (busy 80 us from the start only, then the
 *   sleeps) takes 750-770 ms: every sleep stalls the pipeline. With the
 *   rule 16.6-16.9 ms, MPI_Sendrecv 16.4-16.6 ms. MPICH 4.0 (ch4, shared
 *   memory) behaves the same: 20.6 ms with the rule and with MPI_Sendrecv,
 *   147 ms without the rule.
 * - PROGRESS_NS: an idle poll takes < 0.25 us; polls that move fragments
 *   2-8 us. At 2 us part of them were missed (fine here, fragile on a
 *   faster memcpy), at 5 us the exchange took 31 ms instead of 20.
 * - PROGRESS_COLD_NS: the first poll after a sleep runs on cold caches: at
 *   a 1 us threshold 18% of them looked like progress while the peer was
 *   simply late, each restarting the busy phase, and the waiting thread
 *   used 20-30 ms of CPU per 300 ms of waiting; at 4 us it uses 6-11 ms
 *   (2-4% of a core). A peer that starts 20 ms late still gets the full
 *   rate once it starts (15.4-15.7 ms with CMA, 18.1 ms without).
 * - sched_yield: when the cores are oversubscribed (another job, or the
 *   rank's own compute threads), a busy phase that does not yield takes the
 *   core from the peer it waits for: under outside load 149-161 ms against
 *   21-22 ms with the yield; without load the yield costs nothing
 *   measurable. */
#define SPIN_NS 80000L          /* busy phase after the start and after progress */
#define PROGRESS_NS 1000L       /* a poll this long moved data */
#define PROGRESS_COLD_NS 4000L  /* the same for the first poll after a sleep */
#define SLEEP_MIN_NS 20000L
#define SLEEP_MAX_NS 1000000L

enum { ST_NONE = 0, ST_ONE, ST_MPI, ST_FAILED, ST_DONE };

static struct {
  pthread_mutex_t init_mu;
  int state;      /* ST_*: ST_ONE without a launcher, ST_MPI while MPI runs */
  int own_mpi;    /* gt_dist_init called MPI_Init_thread (and so finalizes) */
  int rank, size;
  int multiple;   /* MPI_THREAD_MULTIPLE: no mutex around MPI calls */
  MPI_Comm host, lane[LANES];
  /* replica groups (gt_dist_set_replicas): the replica's own host
   * communicator (host itself while there is one replica; the lanes are
   * then split too) and the one across replicas (same rank in the replica) */
  MPI_Comm rhost, cross;
  int replica, nrep, rrank, rsize;
  long tag_ub;    /* the library's largest tag */
  _Atomic int stride; /* devices per process in the exchange's tags (0: not set and 1024 too many) */
  char host_name[MPI_MAX_PROCESSOR_NAME + 1];
  char init_msg[GT_ERR_MSG_MAX]; /* ST_FAILED: why, repeated on every init */
  pthread_mutex_t mpi_mu;        /* every MPI call below MPI_THREAD_MULTIPLE */
  atomic_int broken;
  pthread_mutex_t broken_mu;
  char broken_msg[GT_ERR_MSG_MAX];
} g = {
    .init_mu = PTHREAD_MUTEX_INITIALIZER,
    .rank = 0,
    .size = 1,
    .mpi_mu = PTHREAD_MUTEX_INITIALIZER,
    .broken_mu = PTHREAD_MUTEX_INITIALIZER,
};

static void mpi_lock(void) {
  if (!g.multiple) pthread_mutex_lock(&g.mpi_mu);
}
static void mpi_unlock(void) {
  if (!g.multiple) pthread_mutex_unlock(&g.mpi_mu);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static const char *mpi_errstr(int code, char *buf) {
  int len = 0;
  mpi_lock();
  int rc = MPI_Error_string(code, buf, &len);
  mpi_unlock();
  if (rc != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", code);
  return buf;
}

/* The first failure is the job's: later calls repeat it. */
static gt_rc set_broken(gt_err *err, gt_rc rc, const char *msg) {
  pthread_mutex_lock(&g.broken_mu);
  if (!atomic_load(&g.broken)) {
    snprintf(g.broken_msg, sizeof g.broken_msg, "%s", msg);
    atomic_store(&g.broken, 1);
  }
  pthread_mutex_unlock(&g.broken_mu);
  return gt_err_set(err, rc, "%s", msg);
}

static gt_rc broken_err(const char *who, const char *what, gt_err *err) {
  char first[GT_ERR_MSG_MAX];
  pthread_mutex_lock(&g.broken_mu);
  snprintf(first, sizeof first, "%s", g.broken_msg);
  pthread_mutex_unlock(&g.broken_mu);
  return gt_err_set(err, GT_ERR_IO, "%s: %s: an earlier collective failed (%s)", who, what, first);
}

/* ---- environment ---- */

int gt_dist_compiled(void) { return 1; }

int gt_dist_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK");
}

/* ---- init / finalize ---- */

static gt_rc init_fail(gt_err *err, const char *fmt, int code) {
  char es[MPI_MAX_ERROR_STRING];
  char msg[GT_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, fmt, mpi_errstr(code, es));
  snprintf(g.init_msg, sizeof g.init_msg, "%s", msg);
  g.state = ST_FAILED;
  return gt_err_set(err, GT_ERR_IO, "%s", msg);
}

static gt_rc init_mpi(gt_err *err) {
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  if (inited) {
    /* the program embedding us started MPI itself: use it as it is */
    rc = MPI_Query_thread(&provided);
  } else {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    g.own_mpi = rc == MPI_SUCCESS;
  }
  if (rc != MPI_SUCCESS) return init_fail(err, "dist: MPI_Init_thread failed: %s", rc);
  if (provided < MPI_THREAD_SERIALIZED) {
    snprintf(g.init_msg, sizeof g.init_msg,
             "dist: the MPI library gives thread level %s; gemtrain needs MPI_THREAD_SERIALIZED at least "
             "(its devices are threads)",
             provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED");
    /* every rank gets the same level, so all finalize here and the job
     * ends cleanly with this message */
    if (g.own_mpi) MPI_Finalize();
    g.own_mpi = 0;
    g.state = ST_FAILED;
    return gt_err_set(err, GT_ERR_IO, "%s", g.init_msg);
  }
  g.multiple = provided >= MPI_THREAD_MULTIPLE;
  /* a transport error returns to us (and fails one call) instead of
   * killing the process; duplicates inherit the handler */
  if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
    return init_fail(err, "dist: MPI_Comm_set_errhandler failed: %s", rc);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  /* MPI promises tags up to 32767 only (Open MPI and MPICH give far
   * more, Intel MPI 524287): the exchange's tags need (devices per
   * process)^2, checked by gt_dist_set_devices */
  int *tag_ub = NULL, flag = 0;
  rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  g.tag_ub = rc == MPI_SUCCESS && flag && tag_ub ? *tag_ub : 32767;
  g.stride = (long)(MAX_DEV - 1) * MAX_DEV + (MAX_DEV - 1) <= g.tag_ub ? MAX_DEV : 0;
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &g.host)) != MPI_SUCCESS)
    return init_fail(err, "dist: MPI_Comm_dup failed: %s", rc);
  for (int l = 0; l < LANES; l++)
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &g.lane[l])) != MPI_SUCCESS)
      return init_fail(err, "dist: MPI_Comm_dup failed: %s", rc);
  MPI_Comm_set_errhandler(g.host, MPI_ERRORS_RETURN);
  for (int l = 0; l < LANES; l++) MPI_Comm_set_errhandler(g.lane[l], MPI_ERRORS_RETURN);
  int len = 0;
  if (MPI_Get_processor_name(g.host_name, &len) != MPI_SUCCESS) len = 0;
  g.host_name[len > 0 && len <= MPI_MAX_PROCESSOR_NAME ? len : 0] = '\0';
  g.rhost = g.host; /* one replica: the job itself */
  g.cross = MPI_COMM_NULL;
  g.replica = 0, g.nrep = 1, g.rrank = g.rank, g.rsize = g.size;
  g.state = ST_MPI;
  return GT_OK;
}

gt_rc gt_dist_init(gt_err *err) {
  pthread_mutex_lock(&g.init_mu);
  gt_rc rc = GT_OK;
  switch (g.state) {
  case ST_NONE:
    if (gt_dist_launched()) {
      rc = init_mpi(err);
    } else {
      if (gethostname(g.host_name, sizeof g.host_name - 1)) g.host_name[0] = '\0';
      g.host_name[sizeof g.host_name - 1] = '\0';
      g.state = ST_ONE;
    }
    break;
  case ST_FAILED:
    rc = gt_err_set(err, GT_ERR_IO, "%s", g.init_msg);
    break;
  case ST_DONE:
    rc = gt_err_set(err, GT_ERR_INTERNAL, "dist: gt_dist_init after gt_dist_finalize (MPI cannot start twice)");
    break;
  default:
    break;
  }
  pthread_mutex_unlock(&g.init_mu);
  return rc;
}

void gt_dist_finalize(void) {
  pthread_mutex_lock(&g.init_mu);
  if (g.state == ST_MPI && !atomic_load(&g.broken)) {
    if (g.rhost != g.host) MPI_Comm_free(&g.rhost);
    if (g.cross != MPI_COMM_NULL) MPI_Comm_free(&g.cross);
    MPI_Comm_free(&g.host);
    for (int l = 0; l < LANES; l++) MPI_Comm_free(&g.lane[l]);
    if (g.own_mpi) MPI_Finalize();
    g.state = ST_DONE;
  }
  pthread_mutex_unlock(&g.init_mu);
}

void gt_dist_abort(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    /* A thread may hold the MPI mutex in a poll; the abort goes ahead
     * after a bounded wait either way. */
    if (!g.multiple) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_mutex_timedlock(&g.mpi_mu, &ts);
    }
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  exit(code);
}

/* ---- queries ---- */

static int mpi_on(void) { return g.state == ST_MPI; }

int gt_dist_rank(void) { return mpi_on() ? g.rank : 0; }
int gt_dist_size(void) { return mpi_on() ? g.size : 1; }
const char *gt_dist_host(void) { return g.host_name; }
const char *gt_dist_thread_level(void) { return mpi_on() ? (g.multiple ? "multiple" : "serialized") : "none"; }

/* The calling thread's (see dist.h); 0: not set, the default. */
static _Thread_local double tl_timeout;

void gt_dist_set_timeout(double seconds) {
  if (seconds > 0 && isfinite(seconds)) tl_timeout = seconds;
}
double gt_dist_timeout(void) { return tl_timeout > 0 ? tl_timeout : GT_DIST_DEFAULT_TIMEOUT; }
int gt_dist_broken(void) { return atomic_load(&g.broken); }

/* ---- the poll loop ---- */

/* What one request is, for its error message. */
typedef struct req_info {
  int is_recv;
  int rank, dev; /* the peer (dev -1: a host collective) */
  size_t bytes;  /* a receive's expected size */
} req_info;

/* Abandons what is still pending after a failure: receives are cancelled,
 * sends are left to MPI (a send cannot be taken back). */
static void abandon(MPI_Request *req, const req_info *info, int n) {
  mpi_lock();
  for (int i = 0; i < n; i++) {
    if (req[i] == MPI_REQUEST_NULL) continue;
    if (info[i].is_recv) MPI_Cancel(&req[i]);
    MPI_Request_free(&req[i]);
  }
  mpi_unlock();
}

static void peer_name(char *buf, size_t n, const req_info *r) {
  if (r->dev >= 0)
    snprintf(buf, n, "rank %d device %d", r->rank, r->dev);
  else
    snprintf(buf, n, "rank %d", r->rank);
}

/* The timeout's message: the peers whose data did not arrive (and those
 * that did not take ours), each named once though a transfer may be
 * several messages. */
static gt_rc timeout_err(MPI_Request *req, const req_info *info, int n, const char *who, const char *what,
                         gt_err *err) {
  enum { LIST = 512, MAX_NAMED = 64 };
  char msg[GT_ERR_MSG_MAX], from[LIST] = "", to[LIST] = "", ranks[256] = "", p[64];
  int n_from = 0, n_to = 0, n_ranks = 0;
  int named[MAX_NAMED]; /* indices into info of the peers already listed */
  int n_named = 0, seen[MAX_NAMED];
  for (int i = 0; i < n; i++) {
    if (req[i] == MPI_REQUEST_NULL) continue;
    int dup = 0;
    for (int k = 0; k < n_named; k++)
      dup |= info[named[k]].is_recv == info[i].is_recv && info[named[k]].rank == info[i].rank &&
             info[named[k]].dev == info[i].dev;
    if (dup) continue;
    if (n_named < MAX_NAMED) named[n_named++] = i;
    peer_name(p, sizeof p, &info[i]);
    char *list = info[i].is_recv ? from : to;
    int *cnt = info[i].is_recv ? &n_from : &n_to;
    size_t l = strlen(list);
    snprintf(list + l, LIST - l, "%s%s", *cnt ? ", " : "", p);
    (*cnt)++;
    int rdup = 0;
    for (int k = 0; k < n_ranks; k++) rdup |= seen[k] == info[i].rank;
    if (!rdup && n_ranks < MAX_NAMED) {
      l = strlen(ranks);
      snprintf(ranks + l, sizeof ranks - l, "%s%d", n_ranks ? ", " : "", info[i].rank);
      seen[n_ranks++] = info[i].rank;
    }
  }
  const char *alive = n_ranks > 1 ? "are ranks" : "is rank";
  double t = gt_dist_timeout();
  /* a message longer than msg is cut at its end, where only the list of
   * ranks to check runs on (w is read so gcc knows the cut is intended) */
  int w;
  if (n_from && n_to)
    w = snprintf(msg, sizeof msg,
             "%s: %s: no data from %s, and %s did not take ours, within %g s (collective_timeout_seconds); %s %s "
             "alive?",
             who, what, from, to, t, alive, ranks);
  else if (n_from)
    w = snprintf(msg, sizeof msg, "%s: %s: no data from %s within %g s (collective_timeout_seconds); %s %s alive?", who,
             what, from, t, alive, ranks);
  else
    w = snprintf(msg, sizeof msg, "%s: %s: %s did not take our data within %g s (collective_timeout_seconds); %s %s alive?",
                 who, what, to, t, alive, ranks);
  (void)w;
  abandon(req, info, n);
  return set_broken(err, GT_ERR_IO, msg);
}

static gt_rc transport_err(MPI_Request *req, const req_info *info, int n, int i, int code, const char *who,
                           const char *what, gt_err *err) {
  char es[MPI_MAX_ERROR_STRING], p[64], msg[GT_ERR_MSG_MAX];
  peer_name(p, sizeof p, &info[i]);
  snprintf(msg, sizeof msg, "%s: %s: %s %s failed: %s", who, what, info[i].is_recv ? "receiving from" : "sending to",
           p, mpi_errstr(code, es));
  abandon(req, info, n);
  return set_broken(err, GT_ERR_IO, msg);
}

/* Waits for every request (completed ones become MPI_REQUEST_NULL) under
 * the rule at the top of this file. */
static gt_rc wait_reqs(MPI_Request *req, const req_info *info, int n, const char *who, const char *what,
                       gt_err *err) {
  enum { STACK = 32 };
  int idx_s[STACK];
  MPI_Status st_s[STACK];
  int *idx = idx_s;
  MPI_Status *st = st_s;
  if (n > STACK) {
    idx = malloc(sizeof *idx * (size_t)n);
    st = malloc(sizeof *st * (size_t)n);
    if (!idx || !st) {
      free(idx), free(st);
      abandon(req, info, n);
      return set_broken(err, GT_ERR_NOMEM, "dist: out of memory for a wait's status array");
    }
  }
  gt_rc rc = GT_OK;
  int left = 0;
  for (int i = 0; i < n; i++) left += req[i] != MPI_REQUEST_NULL;
  int64_t start = now_ns();
  int64_t deadline = start + (int64_t)(gt_dist_timeout() * 1e9);
  int64_t spin_until = start + SPIN_NS;
  long nap = SLEEP_MIN_NS;
  int cold = 0; /* the last thing this loop did was sleep */
  while (left > 0) {
    int out = 0;
    int64_t t0 = now_ns();
    mpi_lock();
    int mrc = MPI_Testsome(n, req, &out, idx, st);
    mpi_unlock();
    int64_t t1 = now_ns();
    if (mrc != MPI_SUCCESS && mrc != MPI_ERR_IN_STATUS) {
      int bad = 0; /* the call itself failed: blame the first pending */
      while (bad < n - 1 && req[bad] == MPI_REQUEST_NULL) bad++;
      rc = transport_err(req, info, n, bad, mrc, who, what, err);
      break;
    }
    if (out == MPI_UNDEFINED) out = 0;
    for (int k = 0; k < out && rc == GT_OK; k++) {
      int i = idx[k];
      left--;
      if (mrc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS) {
        rc = transport_err(req, info, n, i, st[k].MPI_ERROR, who, what, err);
      } else if (info[i].is_recv) {
        int count = 0;
        mpi_lock(); /* an MPI call like any other below MPI_THREAD_MULTIPLE */
        MPI_Get_count(&st[k], MPI_BYTE, &count);
        mpi_unlock();
        if ((size_t)count != info[i].bytes) {
          char p[64], msg[GT_ERR_MSG_MAX];
          peer_name(p, sizeof p, &info[i]);
          snprintf(msg, sizeof msg, "%s: %s: %s sent %d bytes, expected %zu (the ranks disagree on the sizes)", who,
                   what, p, count, info[i].bytes);
          abandon(req, info, n);
          rc = set_broken(err, GT_ERR_IO, msg);
        }
      }
    }
    if (rc != GT_OK || left == 0) break;
    if (out > 0 || t1 - t0 > (cold ? PROGRESS_COLD_NS : PROGRESS_NS)) {
      spin_until = t1 + SPIN_NS;
      nap = SLEEP_MIN_NS;
    }
    cold = 0;
    if (t1 > deadline) {
      rc = timeout_err(req, info, n, who, what, err);
      break;
    }
    if (atomic_load(&g.broken)) { /* another thread's call failed: so does this one */
      abandon(req, info, n);
      rc = broken_err(who, what, err);
      break;
    }
    if (t1 < spin_until) {
      sched_yield(); /* the peer may need this core to make the progress we wait for */
      continue;
    }
    int64_t rest = deadline - t1;
    sleep_ns(rest < nap ? (long)rest + 1 : nap);
    cold = 1;
    nap = nap * 2 > SLEEP_MAX_NS ? SLEEP_MAX_NS : nap * 2;
  }
  if (idx != idx_s) free(idx), free(st);
  return rc;
}

/* Messages of one transfer: ceil(bytes / MSG_MAX), at least `min`. */
/* After posting n requests (mrc: how the last post went): wait for them,
 * or on a failed post abandon what was posted and break the job. */
static gt_rc settle(MPI_Request *req, const req_info *info, int n, int mrc, const char *who, const char *what,
                    gt_err *err) {
  if (mrc == MPI_SUCCESS) return wait_reqs(req, info, n, who, what, err);
  char es[MPI_MAX_ERROR_STRING], msg[GT_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "%s: %s: posting a transfer failed: %s", who, what, mpi_errstr(mrc, es));
  abandon(req, info, n);
  return set_broken(err, GT_ERR_IO, msg);
}

static int n_msgs(size_t bytes, int min) {
  size_t m = (bytes + MSG_MAX - 1) / MSG_MAX;
  return m < (size_t)min ? min : (int)m;
}

/* Posts the messages of one transfer; each posted request is recorded. */
static int post(int is_recv, void *buf, size_t bytes, int min_msgs, int rank, int dev, int tag, MPI_Comm comm,
                MPI_Request *req, req_info *info, int *n, int name_rank) {
  int m = n_msgs(bytes, min_msgs);
  for (int k = 0; k < m; k++) {
    size_t off = (size_t)k * MSG_MAX;
    int cnt = bytes ? (int)(bytes - off < MSG_MAX ? bytes - off : MSG_MAX) : 0;
    char *p = bytes ? (char *)buf + off : buf; /* no offset on a NULL of 0 bytes */
    int rc;
    mpi_lock();
    if (is_recv)
      rc = MPI_Irecv(p, cnt, MPI_BYTE, rank, tag, comm, &req[*n]);
    else
      rc = MPI_Isend(p, cnt, MPI_BYTE, rank, tag, comm, &req[*n]);
    mpi_unlock();
    if (rc != MPI_SUCCESS) return rc;
    info[*n] = (req_info){is_recv, name_rank, dev, (size_t)cnt};
    (*n)++;
  }
  return MPI_SUCCESS;
}

/* ---- point-to-point ---- */

gt_rc gt_dist_set_devices(int n, gt_err *err) {
  if (!mpi_on()) return GT_OK;
  if (n < 1 || n > MAX_DEV)
    return gt_err_set(err, GT_ERR_ARG, "dist: %d devices per process; expected 1..%d", n, MAX_DEV);
  if ((long)n * n - 1 > g.tag_ub)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "dist: this MPI library's largest tag (MPI_TAG_UB) is %ld, but %d devices per process need "
                      "tags up to %ld (one per pair of devices); use fewer devices per process (num_devices)",
                      g.tag_ub, n, (long)n * n - 1);
  atomic_store(&g.stride, n);
  return GT_OK;
}

gt_rc gt_dist_exchange(const gt_dist_xfer *x, int lane, int dev, const char *what, gt_err *err) {
  char who[64];
  what = what ? what : "gt_dist_exchange";
  snprintf(who, sizeof who, "rank %d device %d", gt_dist_rank(), dev);
  if (!x) return gt_err_set(err, GT_ERR_ARG, "%s: %s: no transfer given", who, what);
  if (lane < 0 || lane >= LANES)
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: lane %d; expected 0 (devices) or 1 (comm threads)", who, what, lane);
  if (dev < 0 || dev >= MAX_DEV)
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: device %d; expected 0..%d", who, what, dev, MAX_DEV - 1);
  int snd = x->to_rank >= 0 && x->send_bytes > 0;
  int rcv = x->from_rank >= 0 && x->recv_bytes > 0;
  int size = gt_dist_replica_size(); /* the mesh's ranks are its replica's */
  if (snd && (x->to_rank >= size || x->to_dev < 0 || x->to_dev >= MAX_DEV || !x->send))
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: send to rank %d device %d (%s); expected rank < %d, device < %d",
                      who, what, x->to_rank, x->to_dev, x->send ? "buffer given" : "no buffer", size, MAX_DEV);
  if (rcv && (x->from_rank >= size || x->from_dev < 0 || x->from_dev >= MAX_DEV || !x->recv))
    return gt_err_set(err, GT_ERR_ARG,
                      "%s: %s: receive from rank %d device %d (%s); expected rank < %d, device < %d", who, what,
                      x->from_rank, x->from_dev, x->recv ? "buffer given" : "no buffer", size, MAX_DEV);
  if (atomic_load(&g.broken)) return broken_err(who, what, err);
  if (!snd && !rcv) return GT_OK;
  if (!mpi_on()) /* one rank: the only rank is this one, and a ring step never sends to itself */
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: one rank (no MPI running) has no peer to exchange with", who, what);

  enum { STACK = 8 };
  MPI_Request req_s[STACK];
  req_info info_s[STACK];
  const int stride = atomic_load(&g.stride);
  if (stride < 1 || dev >= stride || (snd && x->to_dev >= stride) || (rcv && x->from_dev >= stride))
    return gt_err_set(err, GT_ERR_ARG,
                      "%s: %s: devices %d, %d and %d on a channel of %d devices per process; call "
                      "gt_dist_set_devices with the devices per process first",
                      who, what, dev, snd ? x->to_dev : -1, rcv ? x->from_dev : -1, stride);
  int cap = (snd ? n_msgs(x->send_bytes, 1) : 0) + (rcv ? n_msgs(x->recv_bytes, 1) : 0);
  MPI_Request *req = req_s;
  req_info *info = info_s;
  if (cap > STACK) {
    req = malloc(sizeof *req * (size_t)cap);
    info = malloc(sizeof *info * (size_t)cap);
    if (!req || !info) {
      free(req), free(info);
      return gt_err_set(err, GT_ERR_NOMEM, "%s: %s: out of memory for %d requests", who, what, cap);
    }
  }
  int n = 0, mrc = MPI_SUCCESS;
  MPI_Comm comm = g.lane[lane];
  /* the receive first, so a message that arrives early lands in place */
  const int rbase = g.replica * g.rsize; /* peers are named by their rank in the job */
  if (rcv) mrc = post(1, x->recv, x->recv_bytes, 1, x->from_rank, x->from_dev, x->from_dev * stride + dev, comm,
                      req, info, &n, rbase + x->from_rank);
  if (snd && mrc == MPI_SUCCESS)
    mrc = post(0, (void *)x->send, x->send_bytes, 1, x->to_rank, x->to_dev, dev * stride + x->to_dev, comm,
               req, info, &n, rbase + x->to_rank);
  gt_rc rc = settle(req, info, n, mrc, who, what, err);
  if (req != req_s) free(req), free(info);
  return rc;
}

/* ---- host collectives ----
 * Three scopes: every rank of the job (MPI_COMM_WORLD's duplicate), the
 * ranks of this process's replica, and the ranks of the same place in every
 * replica (gt_dist_set_replicas). With one replica the first two are the
 * same communicator. Peers are named by their rank in the job. */

typedef struct scope {
  MPI_Comm comm;
  int rank, size;
  int nbase, nstride; /* a peer's rank in the job: nbase + r * nstride */
} scope;

static scope world_scope(void) { return (scope){g.host, g.rank, g.size, 0, 1}; }
static scope replica_scope(void) { return (scope){g.rhost, g.rrank, g.rsize, g.replica * g.rsize, 1}; }
static scope cross_scope(void) { return (scope){g.cross, g.replica, g.nrep, g.rrank, g.rsize}; }

static gt_rc host_begin(char *who, size_t n, const char **what, gt_err *err) {
  snprintf(who, n, "rank %d", gt_dist_rank());
  *what = *what ? *what : "host collective";
  if (atomic_load(&g.broken)) return broken_err(who, *what, err);
  return GT_OK;
}

/* all[r * bytes ..] = rank r's `mine` for every rank of the scope (this
 * rank's copied), one message per peer and direction (more beyond
 * MSG_MAX), even of 0 bytes, so that it is also a barrier. */
static gt_rc host_allgather(scope sc, const void *mine, void *all, size_t bytes, int tag, const char *who,
                            const char *what, gt_err *err) {
  int R = sc.size, me = sc.rank;
  if (bytes) memmove((char *)all + (size_t)me * bytes, mine, bytes);
  if (R == 1) return GT_OK;
  int per = n_msgs(bytes, 1);
  int cap = 2 * (R - 1) * per;
  MPI_Request *req = malloc(sizeof *req * (size_t)cap);
  req_info *info = malloc(sizeof *info * (size_t)cap);
  if (!req || !info) {
    free(req), free(info);
    return gt_err_set(err, GT_ERR_NOMEM, "%s: %s: out of memory for %d requests", who, what, cap);
  }
  int n = 0, mrc = MPI_SUCCESS;
  char *base = all;
  for (int k = 1; k < R && mrc == MPI_SUCCESS; k++) {
    int r = (me + R - k) % R;
    mrc = post(1, bytes ? base + (size_t)r * bytes : NULL, bytes, 1, r, -1, tag, sc.comm, req, info, &n,
               sc.nbase + r * sc.nstride);
  }
  for (int k = 1; k < R && mrc == MPI_SUCCESS; k++) { /* the next ranks first: spreads the load */
    int r = (me + k) % R;
    mrc = post(0, bytes ? base + (size_t)me * bytes : NULL, bytes, 1, r, -1, tag, sc.comm, req, info, &n,
               sc.nbase + r * sc.nstride);
  }
  gt_rc rc = settle(req, info, n, mrc, who, what, err);
  free(req), free(info);
  return rc;
}

static gt_rc barrier_in(scope sc, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc || !mpi_on()) return rc;
  return host_allgather(sc, NULL, NULL, 0, TAG_BARRIER, who, what, err);
}

gt_rc gt_dist_barrier(const char *what, gt_err *err) { return barrier_in(world_scope(), what, err); }

static gt_rc bcast_in(scope sc, void *buf, size_t bytes, int root, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc) return rc;
  int R = mpi_on() ? sc.size : 1, me = mpi_on() ? sc.rank : 0;
  if (root < 0 || root >= R)
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: broadcast root %d; expected 0..%d", who, what, root, R - 1);
  if (bytes && !buf) return gt_err_set(err, GT_ERR_ARG, "%s: %s: no buffer for %zu bytes", who, what, bytes);
  if (R == 1) return GT_OK;
  int per = n_msgs(bytes, 1);
  int cap = me == root ? (R - 1) * per : per;
  MPI_Request *req = malloc(sizeof *req * (size_t)cap);
  req_info *info = malloc(sizeof *info * (size_t)cap);
  if (!req || !info) {
    free(req), free(info);
    return gt_err_set(err, GT_ERR_NOMEM, "%s: %s: out of memory for %d requests", who, what, cap);
  }
  int n = 0, mrc = MPI_SUCCESS;
  if (me == root)
    for (int k = 1; k < R && mrc == MPI_SUCCESS; k++) {
      int r = (me + k) % R;
      mrc = post(0, buf, bytes, 1, r, -1, TAG_BCAST, sc.comm, req, info, &n, sc.nbase + r * sc.nstride);
    }
  else
    mrc = post(1, buf, bytes, 1, root, -1, TAG_BCAST, sc.comm, req, info, &n, sc.nbase + root * sc.nstride);
  rc = settle(req, info, n, mrc, who, what, err);
  free(req), free(info);
  return rc;
}

gt_rc gt_dist_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err) {
  return bcast_in(world_scope(), buf, bytes, root, what, err);
}

/* acc[i] = acc[i] (op) src[i]: called for ranks 1..R-1 in order on the
 * copy of rank 0's values, so every rank combines the same way. */
typedef void (*combine_fn)(void *acc, const void *src, size_t n, int op);

static void comb_i64(void *acc, const void *src, size_t n, int op) {
  int64_t *a = acc;
  const int64_t *s = src;
  for (size_t i = 0; i < n; i++) {
    if (op == GT_DIST_SUM) /* wraps like the hardware instead of UB */
      a[i] = (int64_t)((uint64_t)a[i] + (uint64_t)s[i]);
    else if (op == GT_DIST_MAX)
      a[i] = s[i] > a[i] ? s[i] : a[i];
    else
      a[i] = s[i] < a[i] ? s[i] : a[i];
  }
}
static void comb_f64(void *acc, const void *src, size_t n, int op) {
  double *a = acc;
  const double *s = src;
  for (size_t i = 0; i < n; i++) a[i] += s[i];
}
static void comb_f32(void *acc, const void *src, size_t n, int op) {
  float *a = acc;
  const float *s = src;
  for (size_t i = 0; i < n; i++) a[i] += s[i];
}
static void comb_bor(void *acc, const void *src, size_t n, int op) {
  uint32_t *a = acc;
  const uint32_t *s = src;
  for (size_t i = 0; i < n; i++) a[i] |= s[i];
}

static gt_rc host_allreduce(scope sc, void *v, size_t n, size_t esize, int op, combine_fn comb, int tag,
                            const char *who, const char *what, gt_err *err) {
  int R = sc.size;
  size_t per = REDUCE_CHUNK / esize;
  size_t m0 = n < per ? n : per;
  char *all = malloc((size_t)R * (m0 ? m0 : 1) * esize);
  if (!all)
    return gt_err_set(err, GT_ERR_NOMEM, "%s: %s: out of memory for %zu bytes of reduce scratch", who, what,
                      (size_t)R * m0 * esize);
  gt_rc rc = GT_OK;
  size_t off = 0;
  do { /* one round even for n = 0: every collective synchronises */
    size_t m = n - off < per ? n - off : per;
    size_t bytes = m * esize;
    char *dst = (char *)v + off * esize;
    rc = host_allgather(sc, dst, all, bytes, tag, who, what, err);
    if (rc) break;
    memcpy(dst, all, bytes);
    for (int r = 1; r < R; r++) comb(dst, all + (size_t)r * bytes, m, op);
    off += m;
  } while (off < n);
  free(all);
  return rc;
}

static gt_rc allreduce_i64_in(scope sc, int64_t *v, int n, int op, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc) return rc;
  if (n < 0 || (n && !v) || (op != GT_DIST_SUM && op != GT_DIST_MAX && op != GT_DIST_MIN))
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: allreduce_i64 of n = %d, op %d; expected n >= 0 values and op SUM, MAX or MIN",
                      who, what, n, op);
  if (!mpi_on()) return GT_OK;
  return host_allreduce(sc, v, (size_t)n, sizeof *v, op, comb_i64, TAG_I64, who, what, err);
}

gt_rc gt_dist_allreduce_i64(int64_t *v, int n, int op, const char *what, gt_err *err) {
  return allreduce_i64_in(world_scope(), v, n, op, what, err);
}

/* A sum over the ranks of scope sc (skip: the scope has one member, so
 * nothing to add), after the checks every sum makes; name is the
 * operation in messages, unit what the values are. */
static gt_rc sum_in(scope sc, int skip, void *v, int64_t n, size_t esize, combine_fn comb, int tag,
                    const char *name, const char *unit, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc) return rc;
  if (n < 0 || (n && !v))
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: %s of n = %lld; expected n >= 0 %s", who, what, name,
                      (long long)n, unit);
  if (!mpi_on() || skip) return GT_OK;
  return host_allreduce(sc, v, (size_t)n, esize, GT_DIST_SUM, comb, tag, who, what, err);
}

static gt_rc allreduce_f64_in(scope sc, double *v, int64_t n, const char *what, gt_err *err) {
  return sum_in(sc, 0, v, n, sizeof *v, comb_f64, TAG_F64, "allreduce_f64_sum", "values", what, err);
}

gt_rc gt_dist_allreduce_f64_sum(double *v, int n, const char *what, gt_err *err) {
  return allreduce_f64_in(world_scope(), v, n, what, err);
}

static gt_rc allreduce_bor_in(scope sc, uint32_t *v, int64_t n, const char *what, gt_err *err) {
  return sum_in(sc, 0, v, n, sizeof *v, comb_bor, TAG_BOR, "allreduce_bor", "words", what, err);
}

gt_rc gt_dist_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err) {
  return allreduce_bor_in(world_scope(), v, n, what, err);
}

gt_rc gt_dist_allgather_i64(const int64_t *in, int n, int64_t *out, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc) return rc;
  if (n < 0 || (n && (!in || !out)))
    return gt_err_set(err, GT_ERR_ARG, "%s: %s: allgather_i64 of n = %d; expected n >= 0 and both buffers", who, what,
                      n);
  if (!mpi_on()) {
    if (n) memmove(out, in, sizeof *in * (size_t)n);
    return GT_OK;
  }
  return host_allgather(world_scope(), in, out, sizeof *in * (size_t)n, TAG_GATHER, who, what, err);
}

/* One rank's outcome on the wire. */
typedef struct agree_msg {
  int32_t rc;
  char msg[GT_ERR_MSG_MAX];
} agree_msg;

static gt_rc agree_in(scope sc, gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  char who[32];
  gt_rc rc = host_begin(who, sizeof who, &what, err);
  if (rc) return rc;
  int R = mpi_on() ? sc.size : 1, me = mpi_on() ? sc.rank : 0;
  agree_msg my = {(int32_t)mine, ""};
  if (mine != GT_OK)
    snprintf(my.msg, sizeof my.msg, "%s", mine_err && mine_err->msg[0] ? mine_err->msg : gt_rc_name(mine));
  agree_msg *all = NULL;
  if (R > 1) {
    all = malloc(sizeof *all * (size_t)R);
    if (!all) return gt_err_set(err, GT_ERR_NOMEM, "%s: %s: out of memory for the agreement", who, what);
    rc = host_allgather(sc, &my, all, sizeof my, TAG_AGREE, who, what, err);
    if (rc) {
      free(all);
      return rc;
    }
  }
  gt_rc out = GT_OK;
  for (int r = 0; r < R; r++) {
    const agree_msg *a = R > 1 ? &all[r] : &my;
    if (a->rc == GT_OK) continue;
    out = a->rc > 0 && a->rc <= GT_ERR_INTERNAL ? (gt_rc)a->rc : GT_ERR_INTERNAL;
    if (r == me) {
      if (err && err != mine_err) {
        if (mine_err)
          *err = *mine_err;
        else
          gt_err_set(err, out, "%s", my.msg);
        err->rc = out;
      }
    } else {
      gt_err_set(err, out, "rank %d: %.*s", sc.nbase + r * sc.nstride, (int)sizeof a->msg - 1, a->msg);
    }
    break;
  }
  free(all);
  return out;
}

gt_rc gt_dist_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  return agree_in(world_scope(), mine, mine_err, what, err);
}

/* ---- replica groups ---- */

int gt_dist_replica(void) { return mpi_on() ? g.replica : 0; }
int gt_dist_replicas(void) { return mpi_on() ? g.nrep : 1; }
int gt_dist_replica_rank(void) { return mpi_on() ? g.rrank : 0; }
int gt_dist_replica_size(void) { return mpi_on() ? g.rsize : 1; }

gt_rc gt_dist_set_replicas(int n, gt_err *err) {
  int W = gt_dist_size();
  if (n < 1 || W % n)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "dist: %d replicas of the %d rank%s (dcn_diloco_parallelism); expected a divisor of the ranks", n,
                      W, W > 1 ? "s" : "");
  if (n == gt_dist_replicas()) return GT_OK;
  if (gt_dist_replicas() != 1)
    return gt_err_set(err, GT_ERR_ARG, "dist: the ranks are already split into %d replicas; cannot split into %d",
                      gt_dist_replicas(), n);
  /* MPI_Comm_split waits without a bound: a barrier (bounded) first, so a
   * missing rank is named instead of hanging every other */
  gt_rc rc = gt_dist_barrier("splitting the ranks into replicas", err);
  if (rc) return rc;
  int per = W / n, color = g.rank / per;
  MPI_Comm rh = MPI_COMM_NULL, cr = MPI_COMM_NULL, ln[LANES];
  int mrc = MPI_Comm_split(g.host, color, g.rank, &rh);
  if (mrc == MPI_SUCCESS) mrc = MPI_Comm_split(g.host, g.rank % per, g.rank, &cr);
  for (int l = 0; l < LANES && mrc == MPI_SUCCESS; l++) mrc = MPI_Comm_split(g.lane[l], color, g.rank, &ln[l]);
  if (mrc != MPI_SUCCESS) {
    char es[MPI_MAX_ERROR_STRING], msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "rank %d: splitting the ranks into %d replicas: MPI_Comm_split failed: %s", g.rank, n,
             mpi_errstr(mrc, es));
    return set_broken(err, GT_ERR_IO, msg);
  }
  MPI_Comm_set_errhandler(rh, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(cr, MPI_ERRORS_RETURN);
  for (int l = 0; l < LANES; l++) {
    MPI_Comm_set_errhandler(ln[l], MPI_ERRORS_RETURN);
    MPI_Comm_free(&g.lane[l]);
    g.lane[l] = ln[l];
  }
  g.rhost = rh;
  g.cross = cr;
  g.replica = color;
  g.nrep = n;
  g.rrank = g.rank % per;
  g.rsize = per;
  return GT_OK;
}

gt_rc gt_dist_replica_barrier(const char *what, gt_err *err) { return barrier_in(replica_scope(), what, err); }
gt_rc gt_dist_replica_bcast(void *buf, size_t bytes, int root, const char *what, gt_err *err) {
  return bcast_in(replica_scope(), buf, bytes, root, what, err);
}
gt_rc gt_dist_replica_allreduce_i64(int64_t *v, int n, int op, const char *what, gt_err *err) {
  return allreduce_i64_in(replica_scope(), v, n, op, what, err);
}
gt_rc gt_dist_replica_allreduce_bor(uint32_t *v, int64_t n, const char *what, gt_err *err) {
  return allreduce_bor_in(replica_scope(), v, n, what, err);
}
gt_rc gt_dist_replica_agree(gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  return agree_in(replica_scope(), mine, mine_err, what, err);
}

gt_rc gt_dist_cross_allreduce_f32(float *v, int64_t n, const char *what, gt_err *err) {
  return sum_in(cross_scope(), g.nrep == 1, v, n, sizeof *v, comb_f32, TAG_F32, "cross-replica sum", "values", what,
                err);
}

gt_rc gt_dist_cross_allreduce_f64(double *v, int64_t n, const char *what, gt_err *err) {
  return sum_in(cross_scope(), g.nrep == 1, v, n, sizeof *v, comb_f64, TAG_F64, "cross-replica sum", "values", what,
                err);
}

gt_rc gt_dist_bench_allreduce(float *buf, int64_t n, int reps, double *seconds, gt_err *err) {
  if (!mpi_on() || g.size < 2) return gt_err_set(err, GT_ERR_ARG, "gt_dist_bench_allreduce: needs 2 or more ranks");
  if (n > INT_MAX) return gt_err_set(err, GT_ERR_ARG, "gt_dist_bench_allreduce: n = %lld; at most INT_MAX", (long long)n);
  enum { MAXR = 64 };
  double t[MAXR];
  if (reps < 1 || reps > MAXR)
    return gt_err_set(err, GT_ERR_ARG, "gt_dist_bench_allreduce: reps = %d; expected 1 .. %d", reps, (int)MAXR);
  for (int r = 0; r < reps; r++) {
    for (int64_t i = 0; i < n; i++) buf[i] = 1.0f;
    /* the library's own blocking calls, as an MPI program would make them */
    mpi_lock();
    int rc = MPI_Barrier(g.host);
    double t0 = MPI_Wtime();
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g.host);
    double t1 = MPI_Wtime();
    mpi_unlock();
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING + 1];
      return gt_err_set(err, GT_ERR_IO, "rank %d: MPI_Allreduce of %lld floats failed: %s", g.rank, (long long)n,
                        mpi_errstr(rc, msg));
    }
    t[r] = t1 - t0;
  }
  for (int i = 1; i < reps; i++) /* median */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  *seconds = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
  return GT_OK;
}
