/* The process layer (src/dist/dist.h).
 *
 * One suite, two forms. As a plain process it is one rank: every call is a
 * local no-op with the right values (bcast leaves the buffer, allreduce
 * returns v, agree returns mine), a transfer to a peer is refused, and the
 * launcher variables are recognised (a build without MPI refuses to run as
 * one of several ranks). Under `mpirun -np 2` (any R >= 2 works) it checks
 * every call across ranks against values computed here from every rank's
 * known inputs: ring exchanges of 0 bytes to 3 MiB on both lanes from two
 * threads at once (the same device ids on both lanes, crossed device pairs
 * on one lane), every host collective (f64 sums bit-exact in rank order,
 * -0.0 kept, OR of pieces across the reduce chunks, agreement naming the
 * lowest failing rank), and last a timeout: rank 0 waits for an exchange
 * rank 1 never joins and must fail naming rank 1, while rank 1 waits in a
 * barrier rank 0 never joins and must fail naming rank 0.
 *
 * It links only the process layer (Check directly, not gt_testutil), so
 * the same file is also built against dist_none.c (test_dist_none) in a
 * build that has MPI. */
#define _POSIX_C_SOURCE 200809L
#include "gt_check.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef GT_HAVE_MPI
#include <mpi.h>
#endif

#include "dist/dist.h"

static int R = 1, me = 0;

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* The bytes a message of `key` carries: different for every sender,
 * lane, device pair, size and round, so a message delivered to the wrong
 * channel cannot pass. */
static void fill(uint8_t *p, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = mix(key * 0x100000001B3ull + i / 8);
    for (size_t k = 0; k < 8 && i + k < n; k++) p[i + k] = (uint8_t)(w >> (8 * k));
  }
}
static size_t first_diff(const uint8_t *p, size_t n, uint64_t key) {
  uint8_t *want = malloc(n ? n : 1);
  fill(want, n, key);
  size_t i = 0;
  while (i < n && p[i] == want[i]) i++;
  free(want);
  return i;
}
static uint64_t msg_key(int src_rank, int lane, int src_dev, int dst_dev, size_t bytes, int round) {
  return mix(((uint64_t)src_rank << 48) ^ ((uint64_t)lane << 44) ^ ((uint64_t)src_dev << 32) ^
             ((uint64_t)dst_dev << 20) ^ (uint64_t)round) ^
         (uint64_t)bytes;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ================= one rank ================= */

START_TEST(test_one_rank_identity) {
  ck_assert_int_eq(gt_dist_rank(), 0);
  ck_assert_int_eq(gt_dist_size(), 1);
  ck_assert_int_eq(gt_dist_broken(), 0);
#ifdef GT_HAVE_MPI
  ck_assert_int_eq(gt_dist_compiled(), 1);
#else
  ck_assert_int_eq(gt_dist_compiled(), 0);
#endif
  if (!gt_dist_launched()) ck_assert_str_eq(gt_dist_thread_level(), "none");
  char h[256] = "";
  ck_assert_int_eq(gethostname(h, sizeof h - 1), 0);
  ck_assert_str_eq(gt_dist_host(), h);
  gt_err e;
  ck_assert_int_eq(gt_dist_init(&e), GT_OK); /* idempotent */
  ck_assert_int_eq(gt_dist_size(), 1);
}
END_TEST

START_TEST(test_one_rank_timeout_setting) {
  ck_assert(gt_dist_timeout() == 300.0);
  gt_dist_set_timeout(2.5);
  ck_assert(gt_dist_timeout() == 2.5);
  gt_dist_set_timeout(0); /* refused: not > 0 */
  gt_dist_set_timeout(-1);
  gt_dist_set_timeout(NAN);
  gt_dist_set_timeout(INFINITY);
  ck_assert(gt_dist_timeout() == 2.5);
}
END_TEST

START_TEST(test_one_rank_collectives_are_identity) {
  gt_err e;
  ck_assert_int_eq(gt_dist_barrier("b", &e), GT_OK);
  unsigned char buf[5] = {1, 2, 3, 4, 5}, want[5] = {1, 2, 3, 4, 5};
  ck_assert_int_eq(gt_dist_bcast(buf, sizeof buf, 0, "bc", &e), GT_OK);
  ck_assert_mem_eq(buf, want, 5);
  ck_assert_int_eq(gt_dist_bcast(buf, sizeof buf, 1, "bc", &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "root 1"), "%s", e.msg);

  int64_t iv[4] = {-3, 0, INT64_MAX, INT64_MIN};
  for (int op = GT_DIST_SUM; op <= GT_DIST_MIN; op++) {
    int64_t v[4];
    memcpy(v, iv, sizeof v);
    ck_assert_int_eq(gt_dist_allreduce_i64(v, 4, op, "i64", &e), GT_OK);
    ck_assert_mem_eq(v, iv, sizeof v);
  }
  ck_assert_int_eq(gt_dist_allreduce_i64(iv, 4, 7, "i64", &e), GT_ERR_ARG);

  double dv[4] = {-0.0, 0.1, NAN, -INFINITY}, d[4];
  memcpy(d, dv, sizeof d);
  ck_assert_int_eq(gt_dist_allreduce_f64_sum(d, 4, "f64", &e), GT_OK);
  ck_assert_mem_eq(d, dv, sizeof d); /* bits: -0.0 stays -0.0 (0.0 + -0.0 would not) */

  uint32_t wv[3] = {0x80000000u, 0x7fc00001u, 1}, w[3];
  memcpy(w, wv, sizeof w);
  ck_assert_int_eq(gt_dist_allreduce_bor(w, 3, "bor", &e), GT_OK);
  ck_assert_mem_eq(w, wv, sizeof w);

  int64_t out[3] = {0};
  ck_assert_int_eq(gt_dist_allgather_i64(iv, 3, out, "ag", &e), GT_OK);
  ck_assert_mem_eq(out, iv, sizeof out);
  ck_assert_int_eq(gt_dist_allgather_i64(iv, 0, out, "ag", &e), GT_OK);
}
END_TEST

START_TEST(test_one_rank_agree_returns_mine) {
  gt_err e, mine;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_dist_agree(GT_OK, NULL, "a", &e), GT_OK);
  gt_err_set(&mine, GT_ERR_NUMERIC, "loss is nan at step 3");
  ck_assert_int_eq(gt_dist_agree(GT_ERR_NUMERIC, &mine, "a", &e), GT_ERR_NUMERIC);
  ck_assert_str_eq(e.msg, "loss is nan at step 3");
  ck_assert_int_eq(e.rc, GT_ERR_NUMERIC);
  ck_assert_int_eq(gt_dist_agree(GT_ERR_IO, &mine, "a", &mine), GT_ERR_IO); /* err may be mine_err */
  ck_assert_str_eq(mine.msg, "loss is nan at step 3");
  ck_assert_int_eq(gt_dist_agree(GT_ERR_CONFIG, NULL, "a", &e), GT_ERR_CONFIG);
  ck_assert_str_eq(e.msg, gt_rc_name(GT_ERR_CONFIG));
}
END_TEST

START_TEST(test_one_rank_exchange) {
  gt_err e;
  char s[4] = "abc", r[4] = "xyz";
  gt_dist_xfer none = {s, 4, -1, 0, r, 4, -1, 0}; /* no peer on either side */
  ck_assert_int_eq(gt_dist_exchange(&none, 0, 0, "ring", &e), GT_OK);
  gt_dist_xfer empty = {s, 0, 0, 0, r, 0, 0, 0}; /* 0 bytes both ways: no message */
  ck_assert_int_eq(gt_dist_exchange(&empty, 1, 3, "ring", &e), GT_OK);
  ck_assert_str_eq(r, "xyz");
  ck_assert_int_eq(gt_dist_exchange(&none, 2, 0, "ring", &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "lane 2"), "%s", e.msg);
  if (!strcmp(gt_dist_thread_level(), "none")) { /* no MPI running: nobody to talk to */
    gt_dist_xfer peer = {s, 4, 0, 1, r, 4, 0, 1};
    ck_assert_int_eq(gt_dist_exchange(&peer, 0, 0, "gt_all_gather", &e), GT_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "rank 0 device 0: gt_all_gather:") && strstr(e.msg, "no peer"), "%s", e.msg);
    ck_assert_str_eq(r, "xyz");
  }
  ck_assert_int_eq(gt_dist_broken(), 0);
}
END_TEST

/* Sets one launcher variable, asks, restores. */
static int launched_with(const char *name, const char *value) {
  setenv(name, value, 1);
  int l = gt_dist_launched();
  unsetenv(name);
  return l;
}

START_TEST(test_one_rank_launcher_variables) {
  if (gt_dist_launched()) return; /* under a launcher: the variables are its own */
  ck_assert_int_eq(gt_dist_launched(), 0);
  ck_assert_int_eq(launched_with("OMPI_COMM_WORLD_SIZE", "2"), 1);
  ck_assert_int_eq(launched_with("PMI_SIZE", "2"), 1);
  ck_assert_int_eq(launched_with("PMIX_RANK", "0"), 1);
  ck_assert_int_eq(gt_dist_launched(), 0);
#ifndef GT_HAVE_MPI
  /* a build without MPI under a launcher of several ranks refuses */
  gt_err e;
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ck_assert_int_eq(gt_dist_init(&e), GT_ERR_CONFIG);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  ck_assert_msg(strstr(e.msg, "2 ranks") && strstr(e.msg, "built without MPI; rebuild with libopenmpi-dev installed"),
                "%s", e.msg);
  setenv("PMIX_RANK", "1", 1);
  ck_assert_int_eq(gt_dist_init(&e), GT_ERR_CONFIG);
  unsetenv("PMIX_RANK");
  ck_assert_msg(strstr(e.msg, "rank 1"), "%s", e.msg);
  setenv("PMI_SIZE", "1", 1); /* one rank under a launcher is fine */
  setenv("PMI_RANK", "0", 1);
  ck_assert_int_eq(gt_dist_init(&e), GT_OK);
  unsetenv("PMI_SIZE");
  unsetenv("PMI_RANK");
#endif
}
END_TEST

/* ================= R >= 2: exchange ================= */

/* One device thread's ring: for each size and round, send to the next
 * rank's device to_dev and receive from the previous rank's device
 * from_dev. Failures are recorded, not asserted (Check asserts only on the
 * main thread). */
typedef struct ring_arg {
  int lane, dev, to_dev, from_dev;
  int rounds;
  char fail[GT_ERR_MSG_MAX + 128];
} ring_arg;

static const size_t ring_sizes[] = {0, 1, 4097, 3u << 20};

static void *ring_thread(void *p) {
  ring_arg *a = p;
  int next = (me + 1) % R, prev = (me + R - 1) % R;
  size_t cap = 3u << 20;
  uint8_t *s = malloc(cap), *r = malloc(cap + 1);
  for (size_t k = 0; k < sizeof ring_sizes / sizeof *ring_sizes && !a->fail[0]; k++) {
    size_t n = ring_sizes[k];
    for (int round = 0; round < a->rounds && !a->fail[0]; round++) {
      fill(s, n, msg_key(me, a->lane, a->dev, a->to_dev, n, round));
      memset(r, 0xA5, n + 1);
      gt_dist_xfer x = {s, n, next, a->to_dev, r, n, prev, a->from_dev};
      gt_err e;
      if (gt_dist_exchange(&x, a->lane, a->dev, "ring test", &e)) {
        snprintf(a->fail, sizeof a->fail, "lane %d dev %d, %zu bytes: %s", a->lane, a->dev, n, e.msg);
        break;
      }
      size_t d = first_diff(r, n, msg_key(prev, a->lane, a->from_dev, a->dev, n, round));
      if (d != n || r[n] != 0xA5)
        snprintf(a->fail, sizeof a->fail, "lane %d dev %d, %zu bytes, round %d: %s at byte %zu", a->lane, a->dev, n,
                 round, d != n ? "wrong data" : "written past the end", d);
    }
  }
  free(s), free(r);
  return NULL;
}

static void run_two(ring_arg a[2]) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, ring_thread, &a[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) ck_assert_msg(!a[i].fail[0], "rank %d: %s", me, a[i].fail);
}

START_TEST(test_exchange_lanes_concurrently) {
  ring_arg a[2] = {{.lane = 0, .dev = 0, .to_dev = 0, .from_dev = 0, .rounds = 3},
                   {.lane = 1, .dev = 1, .to_dev = 1, .from_dev = 1, .rounds = 3}};
  run_two(a);
}
END_TEST

START_TEST(test_exchange_same_devices_on_both_lanes) {
  /* the same tags on both lanes: only the lane keeps them apart */
  ring_arg a[2] = {{.lane = 0, .dev = 0, .to_dev = 0, .from_dev = 0, .rounds = 3},
                   {.lane = 1, .dev = 0, .to_dev = 0, .from_dev = 0, .rounds = 3}};
  run_two(a);
}
END_TEST

START_TEST(test_exchange_crossed_devices_on_one_lane) {
  /* device 0 sends to the next rank's device 1 and back: one lane, two
   * device pairs at once, and the largest device id */
  ring_arg a[2] = {{.lane = 0, .dev = 0, .to_dev = 1023, .from_dev = 1023, .rounds = 2},
                   {.lane = 0, .dev = 1023, .to_dev = 0, .from_dev = 0, .rounds = 2}};
  run_two(a);
}
END_TEST

START_TEST(test_exchange_one_way) {
  /* rank 0 only sends, rank 1 only receives (the other side absent) */
  uint8_t s[100], r[101];
  fill(s, 100, 77);
  memset(r, 0xA5, sizeof r);
  gt_err e;
  gt_dist_xfer x = {s, 100, me == 0 ? 1 : -1, 5, r, 100, me == 1 ? 0 : -1, 4};
  ck_assert_msg(gt_dist_exchange(&x, 1, me == 0 ? 4 : 5, "one way", &e) == GT_OK, "%s", e.msg);
  if (me == 1) {
    ck_assert_uint_eq(first_diff(r, 100, 77), 100);
    ck_assert_uint_eq(r[100], 0xA5);
  } else {
    ck_assert_uint_eq(r[0], 0xA5); /* nothing received */
  }
}
END_TEST

START_TEST(test_exchange_refusals_do_not_break) {
  gt_err e;
  char b[4];
  gt_dist_xfer bad_rank = {b, 4, R, 0, NULL, 0, -1, 0};
  ck_assert_int_eq(gt_dist_exchange(&bad_rank, 0, 0, "ring", &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "send to rank"), "%s", e.msg);
  gt_dist_xfer bad_dev = {NULL, 0, -1, 0, b, 4, 0, 1024};
  ck_assert_int_eq(gt_dist_exchange(&bad_dev, 0, 0, "ring", &e), GT_ERR_ARG);
  ck_assert_int_eq(gt_dist_exchange(&bad_dev, 0, 1024, "ring", &e), GT_ERR_ARG);
  ck_assert_int_eq(gt_dist_broken(), 0);
}
END_TEST

/* ================= R >= 2: host collectives ================= */

START_TEST(test_bcast_from_every_root) {
  static const size_t sizes[] = {0, 13, 3u << 20};
  uint8_t *b = malloc((3u << 20) + 1);
  gt_err e;
  for (int root = 0; root < R; root++)
    for (size_t k = 0; k < 3; k++) {
      size_t n = sizes[k];
      memset(b, 0x5A, n + 1);
      if (me == root) fill(b, n, msg_key(root, 9, 0, 0, n, 0));
      ck_assert_msg(gt_dist_bcast(b, n, root, "bcast test", &e) == GT_OK, "%s", e.msg);
      ck_assert_uint_eq(first_diff(b, n, msg_key(root, 9, 0, 0, n, 0)), n);
      ck_assert_uint_eq(b[n], 0x5A);
    }
  free(b);
}
END_TEST

START_TEST(test_barrier_waits_for_every_rank) {
  /* every rank leaves a file before the barrier; after it, all must be
   * there (the ranks share this machine's /tmp) */
  char dir[64] = "";
  gt_err e;
  if (me == 0) {
    snprintf(dir, sizeof dir, "/tmp/gt_test_dist.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
  }
  ck_assert_msg(gt_dist_bcast(dir, sizeof dir, 0, "dir", &e) == GT_OK, "%s", e.msg);
  char path[96];
  for (int round = 0; round < 3; round++) {
    struct timespec later = {0, me * 20000000L}; /* the higher ranks arrive later */
    nanosleep(&later, NULL);
    snprintf(path, sizeof path, "%s/r%d.%d", dir, me, round);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_msg(gt_dist_barrier("barrier test", &e) == GT_OK, "%s", e.msg);
    for (int r = 0; r < R; r++) {
      struct stat st;
      snprintf(path, sizeof path, "%s/r%d.%d", dir, r, round);
      ck_assert_msg(stat(path, &st) == 0, "rank %d passed the barrier before rank %d reached it", me, r);
    }
  }
  ck_assert_msg(gt_dist_barrier("barrier test", &e) == GT_OK, "%s", e.msg);
  if (me == 0) {
    for (int r = 0; r < R; r++)
      for (int round = 0; round < 3; round++) {
        snprintf(path, sizeof path, "%s/r%d.%d", dir, r, round);
        unlink(path);
      }
    rmdir(dir);
  }
}
END_TEST

enum { NI = 6 };
static int64_t i64_of(int r, int i) {
  switch (i) {
  case 0: return r + 1;
  case 1: return -(int64_t)r * r - 5;
  case 2: return INT64_MAX - r; /* the sum wraps */
  case 3: return INT64_MIN + r;
  case 4: return r == 1 ? 42 : -7;
  default: return (int64_t)r * 1000003;
  }
}

START_TEST(test_allreduce_i64) {
  gt_err e;
  for (int op = GT_DIST_SUM; op <= GT_DIST_MIN; op++) {
    int64_t v[NI], want[NI];
    for (int i = 0; i < NI; i++) {
      v[i] = i64_of(me, i);
      uint64_t sum = 0;
      int64_t mx = INT64_MIN, mn = INT64_MAX;
      for (int r = 0; r < R; r++) {
        int64_t x = i64_of(r, i);
        sum += (uint64_t)x;
        mx = x > mx ? x : mx;
        mn = x < mn ? x : mn;
      }
      want[i] = op == GT_DIST_SUM ? (int64_t)sum : op == GT_DIST_MAX ? mx : mn;
    }
    ck_assert_msg(gt_dist_allreduce_i64(v, NI, op, "i64 test", &e) == GT_OK, "%s", e.msg);
    for (int i = 0; i < NI; i++)
      ck_assert_msg(v[i] == want[i], "op %d [%d]: %lld, expected %lld", op, i, (long long)v[i], (long long)want[i]);
  }
  int64_t none = 5;
  ck_assert_msg(gt_dist_allreduce_i64(&none, 0, GT_DIST_SUM, "i64 test", &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(none, 5);
}
END_TEST

enum { NF = 5 };
static double f64_of(int r, int i) {
  switch (i) {
  case 0: return r % 3 == 0 ? 1e16 : r % 3 == 1 ? 1.0 : -1e16; /* order decides from 3 ranks on */
  case 1: return -0.0;                                          /* every rank: the sum is -0.0 */
  case 2: return 0.1 * (r + 1);
  case 3: return r == 0 ? -0.0 : 0.0;
  default: return ldexp(1.0, -1074) * (r + 1); /* denormals */
  }
}

START_TEST(test_allreduce_f64_in_rank_order) {
  gt_err e;
  double v[NF], want[NF];
  for (int i = 0; i < NF; i++) {
    v[i] = f64_of(me, i);
    want[i] = f64_of(0, i); /* rank 0's value, then ranks 1.. in order: not 0.0 + ... */
    for (int r = 1; r < R; r++) want[i] += f64_of(r, i);
  }
  ck_assert(signbit(want[1]));
  ck_assert_msg(gt_dist_allreduce_f64_sum(v, NF, "f64 test", &e) == GT_OK, "%s", e.msg);
  for (int i = 0; i < NF; i++)
    ck_assert_msg(!memcmp(&v[i], &want[i], sizeof v[i]), "[%d]: %a, expected %a (bits)", i, v[i], want[i]);
}
END_TEST

START_TEST(test_allreduce_bor_assembles_pieces) {
  /* 1.5 M words: more than one reduce chunk (4 MiB); rank r writes the
   * words i % R == r into a zeroed buffer */
  const int64_t n = 1536 * 1024 + 3;
  uint32_t *full = malloc(sizeof *full * (size_t)n), *v = calloc((size_t)n, sizeof *v);
  for (int64_t i = 0; i < n; i++) {
    switch (i % 5) {
    case 0: full[i] = 0x80000000u; break; /* -0.0f */
    case 1: full[i] = 0x7fc00000u | (uint32_t)(i & 0xffff); break; /* NaN payloads */
    case 2: full[i] = (uint32_t)mix((uint64_t)i); break;
    case 3: full[i] = 0; break;
    default: full[i] = 1; break; /* the smallest denormal */
    }
    if (i % R == me) v[i] = full[i];
  }
  gt_err e;
  ck_assert_msg(gt_dist_allreduce_bor(v, n, "bor test", &e) == GT_OK, "%s", e.msg);
  int64_t bad = 0;
  while (bad < n && v[bad] == full[bad]) bad++;
  ck_assert_msg(bad == n, "word %lld: %08x, expected %08x", (long long)bad, bad < n ? v[bad] : 0,
                bad < n ? full[bad] : 0);
  uint32_t one = me == 0 ? 0x80000000u : 0;
  ck_assert_msg(gt_dist_allreduce_bor(&one, 1, "bor test", &e) == GT_OK, "%s", e.msg);
  ck_assert_uint_eq(one, 0x80000000u);
  free(full), free(v);
}
END_TEST

START_TEST(test_allgather_i64) {
  gt_err e;
  int64_t in[3], *out = malloc(sizeof *out * 3 * (size_t)R);
  for (int i = 0; i < 3; i++) in[i] = (int64_t)me * 100 + i - 50;
  ck_assert_msg(gt_dist_allgather_i64(in, 3, out, "gather test", &e) == GT_OK, "%s", e.msg);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < 3; i++) ck_assert_int_eq(out[r * 3 + i], (int64_t)r * 100 + i - 50);
  ck_assert_msg(gt_dist_allgather_i64(in, 0, out, "gather test", &e) == GT_OK, "%s", e.msg);
  free(out);
}
END_TEST

START_TEST(test_agree_names_the_lowest_failing_rank) {
  gt_err e, mine;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_dist_agree(GT_OK, NULL, "agree", &e), GT_OK);

  /* ranks 1.. fail, each its own way: rank 1 is the one named */
  gt_rc rc = GT_OK;
  if (me >= 1) rc = me == 1 ? GT_ERR_NUMERIC : GT_ERR_IO;
  gt_err_set(&mine, rc, "loss is nan at step %d on rank %d", 3, me);
  gt_rc got = gt_dist_agree(rc, rc ? &mine : NULL, "agree", &e);
  ck_assert_int_eq(got, GT_ERR_NUMERIC);
  if (me == 1)
    ck_assert_str_eq(e.msg, "loss is nan at step 3 on rank 1");
  else
    ck_assert_str_eq(e.msg, "rank 1: loss is nan at step 3 on rank 1");

  /* rank 0 fails too, without a message: its rc's name stands in */
  rc = me == 0 ? GT_ERR_CONFIG : GT_ERR_NUMERIC;
  gt_err_set(&mine, rc, "rank %d's own trouble", me);
  got = gt_dist_agree(rc, me == 0 ? NULL : &mine, "agree", &e);
  ck_assert_int_eq(got, GT_ERR_CONFIG);
  char want[128];
  snprintf(want, sizeof want, "%s%s", me == 0 ? "" : "rank 0: ", gt_rc_name(GT_ERR_CONFIG));
  ck_assert_str_eq(e.msg, want);
}
END_TEST

START_TEST(test_host_refusals_do_not_break) {
  gt_err e;
  char b[4];
  ck_assert_int_eq(gt_dist_bcast(b, 4, R, "bc", &e), GT_ERR_ARG);
  ck_assert_int_eq(gt_dist_allreduce_i64(NULL, -1, GT_DIST_SUM, "i64", &e), GT_ERR_ARG);
  ck_assert_int_eq(gt_dist_broken(), 0);
  ck_assert_msg(gt_dist_barrier("after refusals", &e) == GT_OK, "%s", e.msg);
}
END_TEST

/* ================= R >= 2: the timeout (last: it breaks the job) ================= */

START_TEST(test_timeout_names_the_missing_rank) {
  gt_err e;
  char want[GT_ERR_MSG_MAX + 128];
  gt_dist_set_timeout(2);
  int64_t t0 = now_ns();
  gt_rc rc;
  if (me == 0) {
    /* rank 1 never joins this exchange */
    char s[16] = "sixteen bytes..", r[16];
    gt_dist_xfer x = {s, 16, 1, 0, r, 16, 1, 0};
    rc = gt_dist_exchange(&x, 0, 0, "timeout test", &e);
    snprintf(want, sizeof want,
             "rank 0 device 0: timeout test: no data from rank 1 device 0 within 2 s (collective_timeout_seconds); "
             "is rank 1 alive?");
  } else {
    /* ...because it waits in a barrier rank 0 never joins (ranks 2.. too) */
    rc = gt_dist_barrier("checkpoint commit", &e);
    snprintf(want, sizeof want,
             "rank %d: checkpoint commit: no data from rank 0 within 2 s (collective_timeout_seconds); "
             "is rank 0 alive?",
             me);
  }
  double waited = (double)(now_ns() - t0) * 1e-9;
  ck_assert_int_eq(rc, GT_ERR_IO);
  ck_assert_str_eq(e.msg, want);
  ck_assert_msg(waited >= 2.0, "failed after %.3f s, before the 2 s timeout", waited);
  ck_assert_int_eq(gt_dist_broken(), 1);
  /* from now on every call fails at once, repeating the first failure */
  gt_err e2;
  ck_assert_int_eq(gt_dist_barrier("later", &e2), GT_ERR_IO);
  snprintf(want, sizeof want, "rank %d: later: an earlier collective failed (%s)", me, e.msg);
  ck_assert_str_eq(e2.msg, want);
  char b[4] = "abc";
  gt_dist_xfer x = {b, 4, (me + 1) % R, 0, NULL, 0, -1, 0};
  ck_assert_int_eq(gt_dist_exchange(&x, 1, 2, "later ring", &e2), GT_ERR_IO);
  ck_assert_msg(strstr(e2.msg, "rank ") && strstr(e2.msg, "device 2: later ring: an earlier collective failed ("),
                "%s", e2.msg);
}
END_TEST

static TCase *tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 0); /* no Check timer: ctest's TIMEOUT catches a hang */
  suite_add_tcase(s, tc);
  return tc;
}

int main(void) {
  gt_err e;
  gt_err_clear(&e);
  if (gt_dist_init(&e) != GT_OK) {
    fprintf(stderr, "test_dist: %s\n", e.msg);
    return 1;
  }
  R = gt_dist_size();
  me = gt_dist_rank();
  Suite *s = suite_create("dist");
  if (R == 1) {
    TCase *tc = tcase(s, "one_rank");
    tcase_add_test(tc, test_one_rank_identity);
    tcase_add_test(tc, test_one_rank_timeout_setting);
    tcase_add_test(tc, test_one_rank_collectives_are_identity);
    tcase_add_test(tc, test_one_rank_agree_returns_mine);
    tcase_add_test(tc, test_one_rank_exchange);
    tcase_add_test(tc, test_one_rank_launcher_variables);
  } else {
    /* a rank whose test fails leaves its peers waiting: not for 300 s */
    gt_dist_set_timeout(120);
    TCase *tc = tcase(s, "exchange");
    tcase_add_test(tc, test_exchange_lanes_concurrently);
    tcase_add_test(tc, test_exchange_same_devices_on_both_lanes);
    tcase_add_test(tc, test_exchange_crossed_devices_on_one_lane);
    tcase_add_test(tc, test_exchange_one_way);
    tcase_add_test(tc, test_exchange_refusals_do_not_break);
    tc = tcase(s, "host");
    tcase_add_test(tc, test_bcast_from_every_root);
    tcase_add_test(tc, test_barrier_waits_for_every_rank);
    tcase_add_test(tc, test_allreduce_i64);
    tcase_add_test(tc, test_allreduce_f64_in_rank_order);
    tcase_add_test(tc, test_allreduce_bor_assembles_pieces);
    tcase_add_test(tc, test_allgather_i64);
    tcase_add_test(tc, test_agree_names_the_lowest_failing_rank);
    tcase_add_test(tc, test_host_refusals_do_not_break);
    tc = tcase(s, "timeout");
    tcase_add_test(tc, test_timeout_names_the_missing_rank);
  }
  SRunner *sr = srunner_create(s);
  /* MPI does not survive fork: under a launcher the tests run in this
   * process, in order, the same on every rank */
  if (gt_dist_launched()) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
#ifdef GT_HAVE_MPI
  if (gt_dist_broken()) {
    /* gt_dist_finalize leaves MPI alone after a timeout (it would wait for
     * a dead peer); here every peer is alive, and an MPI process that
     * exits without MPI_Finalize makes mpirun fail the job, so the suite
     * ends MPI itself. The messages the timeout left unmatched were sent
     * eagerly (16 and 0 bytes) and are dropped by MPI_Finalize. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return failed ? 1 : 0;
  }
#endif
  gt_dist_finalize();
  return failed ? 1 : 0;
}
