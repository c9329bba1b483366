/* Thread teams (src/base/team.h): every member runs once per run with its
 * own tid and the run's count, barriers hold every member, the dynamic
 * counter hands out each item once, nested and concurrent use runs alone,
 * a mesh device computes on its own team, a thread's own team is not
 * disturbed by remaking the process team, and no OpenMP or OpenBLAS pool
 * starts beside the teams. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/team.h"
#include "base/threads.h"
#include "gt_testutil.h"
#include "kernels/gemm_fixed.h"
#include "mesh/mesh.h"

#define MAXT 8

typedef struct seen {
  atomic_int runs[MAXT]; /* fn calls per tid */
  atomic_int bad;        /* a call with a wrong tid or count */
  pthread_t who[MAXT];
  int want_n;
} seen;

static void note(void *arg, int tid, int n) {
  seen *s = arg;
  if (tid < 0 || tid >= MAXT || n != s->want_n || tid >= n || !gt_team_inside()) {
    atomic_fetch_add(&s->bad, 1);
    return;
  }
  atomic_fetch_add(&s->runs[tid], 1);
  s->who[tid] = pthread_self();
}

static gt_team *make(int n) {
  gt_team *t = NULL;
  ck_assert_int_eq(gt_team_create(n, &t, NULL), GT_OK);
  ck_assert_int_eq(gt_team_size(t), n);
  return t;
}

START_TEST(test_every_member_once) {
  for (int n = 1; n <= 4; n++) {
    gt_team *t = make(n);
    seen s = {.want_n = n};
    gt_team_run(t, note, &s);
    ck_assert_int_eq(atomic_load(&s.bad), 0);
    for (int i = 0; i < n; i++) ck_assert_int_eq(atomic_load(&s.runs[i]), 1);
    /* tid 0 is the caller; the others are distinct threads */
    ck_assert(pthread_equal(s.who[0], pthread_self()));
    for (int i = 1; i < n; i++)
      for (int j = 0; j < i; j++) ck_assert(!pthread_equal(s.who[i], s.who[j]));
    ck_assert(!gt_team_inside());
    gt_team_destroy(t);
  }
}
END_TEST

/* member tid adds its round into slot tid, waits at the barrier, then checks
 * that every member's slot holds this round */
typedef struct rounds {
  atomic_int slot[MAXT];
  atomic_int bad;
  int nrounds;
} rounds;

static void barrier_rounds(void *arg, int tid, int n) {
  rounds *r = arg;
  for (int k = 1; k <= r->nrounds; k++) {
    atomic_store(&r->slot[tid], k);
    gt_team_barrier();
    for (int i = 0; i < n; i++)
      if (atomic_load(&r->slot[i]) < k) atomic_fetch_add(&r->bad, 1);
    gt_team_barrier(); /* nobody starts round k + 1 before all checked k */
  }
}

START_TEST(test_back_to_back_runs_and_barriers) {
  gt_team *t = make(3);
  seen s = {.want_n = 3};
  const int runs = 20000; /* short runs: workers both spinning and asleep */
  for (int k = 0; k < runs; k++) {
    gt_team_run(t, note, &s);
    if (k % 5000 == 0) usleep(2000); /* long enough that the workers sleep */
  }
  ck_assert_int_eq(atomic_load(&s.bad), 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(atomic_load(&s.runs[i]), runs);
  rounds r = {.nrounds = 2000};
  gt_team_run(t, barrier_rounds, &r);
  ck_assert_int_eq(atomic_load(&r.bad), 0);
  gt_team_destroy(t);
}
END_TEST

START_TEST(test_run_on_fewer_members) {
  gt_team *t = make(4);
  for (int k = 1; k <= 5; k++) {
    int want = k < 4 ? k : 4;
    seen s = {.want_n = want};
    gt_team_run_n(t, k, note, &s);
    ck_assert_int_eq(atomic_load(&s.bad), 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(atomic_load(&s.runs[i]), i < want);
    rounds r = {.nrounds = 50};
    gt_team_run_n(t, k, barrier_rounds, &r); /* barriers count the members that run */
    ck_assert_int_eq(atomic_load(&r.bad), 0);
  }
  gt_team_destroy(t);
}
END_TEST

/* two dynamic loops in one run, the second from base n1 + n */
typedef struct dyn {
  gt_team_counter next;
  int64_t n1, n2;
  atomic_int taken1[1000], taken2[700];
  atomic_int by[MAXT];
} dyn;

static void dyn_loops(void *arg, int tid, int n) {
  dyn *d = arg;
  for (int64_t i; (i = gt_team_take(&d->next, 0)) < d->n1;) {
    atomic_fetch_add(&d->taken1[i], 1);
    atomic_fetch_add(&d->by[tid], 1);
    if (i % 97 == tid) usleep(50); /* uneven items */
  }
  gt_team_barrier();
  for (int64_t i; (i = gt_team_take(&d->next, d->n1 + n)) < d->n2;) atomic_fetch_add(&d->taken2[i], 1);
}

START_TEST(test_dynamic_counter_each_item_once) {
  for (int n = 1; n <= 3; n++) {
    gt_team *t = make(n);
    dyn *d = calloc(1, sizeof *d);
    d->n1 = 1000, d->n2 = 700;
    gt_team_run(t, dyn_loops, d);
    for (int i = 0; i < 1000; i++) ck_assert_int_eq(atomic_load(&d->taken1[i]), 1);
    for (int i = 0; i < 700; i++) ck_assert_int_eq(atomic_load(&d->taken2[i]), 1);
    int sum = 0;
    for (int i = 0; i < n; i++) sum += atomic_load(&d->by[i]);
    ck_assert_int_eq(sum, 1000);
    free(d);
    gt_team_destroy(t);
  }
}
END_TEST

START_TEST(test_split_as_static) {
  /* schedule(static) without a chunk: the first n % nth members one more */
  for (int64_t n = 0; n <= 40; n++)
    for (int nth = 1; nth <= 5; nth++) {
      int64_t next = 0;
      for (int t = 0; t < nth; t++) {
        int64_t lo, hi;
        gt_team_split(n, t, nth, &lo, &hi);
        ck_assert_int_eq(lo, next);
        ck_assert_int_eq(hi - lo, n / nth + (t < n % nth));
        next = hi;
      }
      ck_assert_int_eq(next, n);
    }
}
END_TEST

/* inside a member: a region of its own runs alone */
typedef struct nested {
  atomic_int bad, inner;
} nested;

static void inner(void *arg, int tid, int n) {
  nested *x = arg;
  if (tid != 0 || n != 1) atomic_fetch_add(&x->bad, 1);
  atomic_fetch_add(&x->inner, 1);
}

static void outer(void *arg, int tid, int n) {
  nested *x = arg;
  if (gt_team_threads() != 1 || !gt_team_inside()) atomic_fetch_add(&x->bad, 1);
  gt_team_par(1, inner, x);
  gt_team_barrier(); /* the outer run's barrier still holds all members */
}

START_TEST(test_nested_runs_alone) {
  gt_team *t = make(3);
  gt_team *prev = gt_team_set_current(t);
  ck_assert_int_eq(gt_team_threads(), 3);
  nested x = {0};
  gt_team_par(1, outer, &x);
  ck_assert_int_eq(atomic_load(&x.bad), 0);
  ck_assert_int_eq(atomic_load(&x.inner), 3);
  /* par false: the caller alone */
  seen s = {.want_n = 1};
  gt_team_par(0, note, &s);
  ck_assert_int_eq(atomic_load(&s.runs[0]), 1);
  gt_team_set_current(prev);
  gt_team_destroy(t);
}
END_TEST

/* a mesh device's kernels run on the device's own team */
typedef struct dev_job {
  seen s[2];
  atomic_int bad;
  gt_team *team[2];
  int want_size;
} dev_job;

static void on_device(int d, void *arg) {
  dev_job *j = arg;
  gt_team *t = gt_team_current();
  j->team[d] = t;
  if (gt_team_size(t) != j->want_size || gt_team_inside()) atomic_fetch_add(&j->bad, 1);
  gt_team_par(1, note, &j->s[d]);
}

START_TEST(test_mesh_device_team) {
  gt_mesh *m = NULL;
  ck_assert_int_eq(gt_mesh_create(&m, 2, NULL), GT_OK);
  gt_mesh_set_threads(m, 2);
  dev_job *j = calloc(1, sizeof *j);
  for (int run = 0; run < 3; run++) {
    memset(j, 0, sizeof *j);
    j->s[0].want_n = j->s[1].want_n = j->want_size = 2;
    gt_mesh_run(m, on_device, j);
    ck_assert_int_eq(atomic_load(&j->bad), 0);
    ck_assert(j->team[0] != j->team[1]); /* one team per device */
    for (int d = 0; d < 2; d++) {
      ck_assert_int_eq(atomic_load(&j->s[d].bad), 0);
      ck_assert_int_eq(atomic_load(&j->s[d].runs[0]), 1);
      ck_assert_int_eq(atomic_load(&j->s[d].runs[1]), 1);
    }
  }
  /* resized between runs */
  gt_mesh_set_threads(m, 3);
  memset(j, 0, sizeof *j);
  j->s[0].want_n = j->s[1].want_n = j->want_size = 3;
  gt_mesh_run(m, on_device, j);
  ck_assert_int_eq(atomic_load(&j->bad), 0);
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < 3; i++) ck_assert_int_eq(atomic_load(&j->s[d].runs[i]), 1);
  free(j);
  gt_mesh_destroy(m);
}
END_TEST

/* several plain threads on one process team: one runs it, the others alone */
typedef struct busy_job {
  atomic_int bad, total;
} busy_job;

static void count_members(void *arg, int tid, int n) {
  busy_job *b = arg;
  if (n != 1 && n != 2) atomic_fetch_add(&b->bad, 1);
  atomic_fetch_add(&b->total, 1);
}

static void hammer(void *arg, int t) {
  for (int k = 0; k < 2000; k++) gt_team_par(1, count_members, arg);
}

START_TEST(test_concurrent_callers) {
  ck_assert_int_eq(gt_team_set_process(2), 2);
  busy_job b = {0};
  gt_test_on_threads(4, hammer, &b);
  ck_assert_int_eq(atomic_load(&b.bad), 0);
  ck_assert_int_ge(atomic_load(&b.total), 4 * 2000);
  ck_assert_int_le(atomic_load(&b.total), 4 * 2000 * 2);
}
END_TEST

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

START_TEST(test_no_other_pool) {
  /* products through OpenBLAS on a team of 2 (the OpenMP build of OpenBLAS
   * threads a call made outside an OpenMP region): the process then holds
   * the caller and the team's one worker, nothing else */
  ck_assert_int_eq(gt_team_set_process(2), 2);
  int64_t M = 512, N = 384, K = 256;
  uint64_t seed = 5;
  float *A = gt_test_alloc_fill(M * K, &seed, -1, 1), *B = gt_test_alloc_fill(K * N, &seed, -1, 1);
  float *C = gt_test_zeros(M * N);
  for (int rep = 0; rep < 3; rep++) gt__sgemm_fixed(0, 0, M, N, K, 1, A, K, B, N, 0, C, N);
  ck_assert_int_eq(count_threads(), 2);
  free(A), free(B), free(C);
}
END_TEST

START_TEST(test_fork_child_runs_alone) {
  gt_team *t = make(2);
  gt_team_set_current(t);
  seen s = {.want_n = 2};
  gt_team_par(1, note, &s); /* the workers exist in the parent */
  ck_assert_int_eq(atomic_load(&s.runs[1]), 1);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    alarm(20); /* a hang waiting for workers that the child lacks ends here */
    busy_job b = {0};
    gt_team_par(1, count_members, &b); /* the inherited team: the child alone */
    if (atomic_load(&b.bad) || atomic_load(&b.total) != 1) _exit(2);
    gt_team_set_current(NULL);
    gt_team_destroy(t); /* frees the copy; its workers are not here to join */
    if (gt_team_set_process(2) != 2) _exit(3); /* a new team, with workers */
    gt_team_par(1, count_members, &b);
    _exit(atomic_load(&b.bad) == 0 && atomic_load(&b.total) == 3 ? 0 : 1);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  gt_team_set_current(NULL);
  gt_team_destroy(t);
}
END_TEST

/* gt_team_create_upto: the size asked (at least 1). A thread that set
 * such a team of its own computes on it while another thread remakes the
 * process team again and again (what a gt_ctx relies on: another
 * context's init must not pull its team away). */
typedef struct own_job {
  atomic_int stop, runs, bad;
} own_job;

static void count_two(void *arg, int tid, int n) {
  own_job *j = arg;
  if (n != 2 || tid < 0 || tid > 1) atomic_fetch_add(&j->bad, 1);
  if (tid == 0) atomic_fetch_add(&j->runs, 1);
}

static void *own_team_runs(void *arg) {
  own_job *j = arg;
  gt_team *t = gt_team_create_upto(2);
  gt_team *prev = gt_team_set_current(t);
  while (!atomic_load(&j->stop) || atomic_load(&j->runs) < 100) gt_team_par(1, count_two, j);
  gt_team_set_current(prev);
  gt_team_destroy(t);
  return NULL;
}

START_TEST(test_own_team_beside_process_team) {
  gt_team *t = gt_team_create_upto(3);
  ck_assert_int_eq(gt_team_size(t), 3);
  gt_team_destroy(t);
  t = gt_team_create_upto(0);
  ck_assert_int_eq(gt_team_size(t), 1);
  gt_team_destroy(t);
  own_job j = {0};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, own_team_runs, &j), 0);
  for (int k = 0; k < 200; k++) gt_team_set_process(1 + k % 2);
  atomic_store(&j.stop, 1);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_int_eq(atomic_load(&j.bad), 0);
  ck_assert_int_ge(atomic_load(&j.runs), 100);
}
END_TEST

int main(void) {
  Suite *s = suite_create("team");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_every_member_once);
  tcase_add_test(tc, test_back_to_back_runs_and_barriers);
  tcase_add_test(tc, test_run_on_fewer_members);
  tcase_add_test(tc, test_dynamic_counter_each_item_once);
  tcase_add_test(tc, test_split_as_static);
  tcase_add_test(tc, test_nested_runs_alone);
  tcase_add_test(tc, test_mesh_device_team);
  tcase_add_test(tc, test_concurrent_callers);
  tcase_add_test(tc, test_no_other_pool);
  tcase_add_test(tc, test_fork_child_runs_alone);
  tcase_add_test(tc, test_own_team_beside_process_team);
  return gt_test_run_suite(s, 0);
}
