/* One run per run directory: a second holder is refused naming the first
 * one's pid; a holder killed with SIGKILL leaves no stale lock; a released
 * lock can be taken again. Processes are real (fork), as two gemtrain runs
 * would be. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gt_testutil.h"
#include "train/run_lock.h"

/* In a child process: try to take the lock; exit 0 if taken, 1 if refused
 * with a message naming `want_pid`, 2 otherwise. */
static int child_try(const char *dir, pid_t want_pid) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    gt_run_lock lk;
    gt_err e;
    gt_err_clear(&e);
    if (gt_run_lock_take(&lk, dir, &e) == GT_OK) _exit(0);
    char pid[32];
    snprintf(pid, sizeof pid, "(pid %ld)", (long)want_pid);
    _exit(strstr(e.msg, pid) && strstr(e.msg, "in use by another gemtrain") && strstr(e.msg, dir) ? 1 : 2);
  }
  int st;
  ck_assert_int_eq(waitpid(p, &st, 0), p);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

START_TEST(test_second_run_refused) {
  char *dir = gt_test_mkdtemp("lock_second");
  gt_run_lock lk;
  gt_err e;
  ck_assert_msg(gt_run_lock_take(&lk, dir, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(child_try(dir, getpid()), 1);
  gt_run_lock_release(&lk);
  ck_assert_int_eq(child_try(dir, getpid()), 0); /* released: free again */
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(test_killed_holder_leaves_no_stale_lock) {
  char *dir = gt_test_mkdtemp("lock_killed");
  int ready[2];
  ck_assert_int_eq(pipe(ready), 0);
  pid_t holder = fork();
  ck_assert_int_ge(holder, 0);
  if (holder == 0) {
    gt_run_lock lk;
    gt_err e;
    if (gt_run_lock_take(&lk, dir, &e) != GT_OK) _exit(3);
    if (write(ready[1], "x", 1) != 1) _exit(4);
    for (;;) pause();
  }
  char c;
  ck_assert_int_eq(read(ready[0], &c, 1), 1);
  ck_assert_int_eq(child_try(dir, holder), 1); /* held by the holder, named by pid */
  kill(holder, SIGKILL);
  int st;
  ck_assert_int_eq(waitpid(holder, &st, 0), holder);
  ck_assert(WIFSIGNALED(st));
  /* the lock file is still there, the lock is not */
  gt_run_lock lk;
  gt_err e;
  ck_assert_msg(gt_run_lock_take(&lk, dir, &e) == GT_OK, "%s", e.msg);
  gt_run_lock_release(&lk);
  close(ready[0]), close(ready[1]);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(test_missing_directory_refused) {
  gt_run_lock lk;
  gt_err e;
  ck_assert_int_eq(gt_run_lock_take(&lk, "/nonexistent/gemtrain/run", &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "/nonexistent/gemtrain/run/.lock"), "%s", e.msg);
  gt_run_lock_release(&lk);
}
END_TEST

/* A lock handed to a child (the sweep's points) is adopted, not refused:
 * the child's descriptor is the holder's open file; a number naming another
 * file is ignored, and the lock then refuses as for any second holder. */
START_TEST(test_handed_down_lock_adopted) {
  char *dir = gt_test_mkdtemp("lock_handed");
  gt_run_lock held;
  gt_err e;
  ck_assert_msg(gt_run_lock_take(&held, dir, &e) == GT_OK, "%s", e.msg);
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    char v[32];
    snprintf(v, sizeof v, "%d", held.fd);
    setenv(GT_RUN_LOCK_FD_ENV, v, 1);
    gt_run_lock lk;
    if (gt_run_lock_take(&lk, dir, &e) != GT_OK || lk.fd != held.fd) _exit(1);
    /* the pid in the lock file is now the child's */
    char buf[32] = "", want[32];
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    if (pread(lk.fd, buf, sizeof buf - 1, 0) <= 0 || strcmp(buf, want)) _exit(2);
    /* stdin is not the lock file: ignored, and the lock is held */
    setenv(GT_RUN_LOCK_FD_ENV, "0", 1);
    gt_run_lock other;
    if (gt_run_lock_take(&other, dir, &e) == GT_OK || !strstr(e.msg, "in use by another gemtrain")) _exit(3);
    _exit(0);
  }
  int st;
  ck_assert_int_eq(waitpid(p, &st, 0), p);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  gt_run_lock_release(&held);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("run_lock");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_second_run_refused);
  tcase_add_test(tc, test_killed_holder_leaves_no_stale_lock);
  tcase_add_test(tc, test_missing_directory_refused);
  tcase_add_test(tc, test_handed_down_lock_adopted);
  return gt_test_run_suite(s, 0);
}
