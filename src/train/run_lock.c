#define _GNU_SOURCE
#include "train/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The descriptor a parent handed down for this lock file (see
 * GT_RUN_LOCK_FD_ENV), or -1. */
static int gt__inherited(const char *path) {
  const char *v = getenv(GT_RUN_LOCK_FD_ENV);
  if (!v || !v[0]) return -1;
  char *end;
  long fd = strtol(v, &end, 10);
  struct stat a, b;
  if (*end || fd < 0 || fd > 1 << 20 || fstat((int)fd, &a) != 0 || stat(path, &b) != 0) return -1;
  if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) return -1;
  fcntl((int)fd, F_SETFD, FD_CLOEXEC);
  return (int)fd;
}

gt_rc gt_dir_lock_take(gt_run_lock *lk, const char *dir, const char *stage, const char *what, const char *hint,
                       gt_err *err) {
  lk->fd = -1;
  char path[2200];
  snprintf(path, sizeof path, "%s/.lock", dir);
  int fd = gt__inherited(path);
  if (fd < 0) fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "%s: cannot open the lock '%s': %s", stage, path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    if (e != EWOULDBLOCK) return gt_err_set(err, GT_ERR_IO, "%s: cannot lock '%s': %s", stage, path, strerror(e));
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    return gt_err_set(err, GT_ERR_IO, "%s: %s '%s' is in use by another gemtrain (pid %s); %s", stage, what, dir,
                      pid[0] ? pid : "unknown", hint);
  }
  /* the holder's pid, for the message a second one prints */
  char pid[32];
  int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
    int e = errno;
    close(fd);
    return gt_err_set(err, GT_ERR_IO, "%s: cannot write the lock '%s': %s", stage, path, strerror(e));
  }
  lk->fd = fd;
  return GT_OK;
}

gt_rc gt_run_lock_take(gt_run_lock *lk, const char *run_dir, gt_err *err) {
  return gt_dir_lock_take(lk, run_dir, "train", "run directory", "wait for it to finish or choose another run_name",
                          err);
}

void gt_run_lock_release(gt_run_lock *lk) {
  if (lk->fd >= 0) close(lk->fd); /* closing the descriptor drops the flock */
  lk->fd = -1;
}
