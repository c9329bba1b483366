#define _GNU_SOURCE
#include "train/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

gt_rc gt_run_lock_take(gt_run_lock *lk, const char *run_dir, gt_err *err) {
  lk->fd = -1;
  char path[2200];
  snprintf(path, sizeof path, "%s/.lock", run_dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "train: cannot open the run lock '%s': %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    if (e != EWOULDBLOCK)
      return gt_err_set(err, GT_ERR_IO, "train: cannot lock '%s': %s", path, strerror(e));
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    return gt_err_set(err, GT_ERR_IO,
                      "train: run directory '%s' is in use by another gemtrain (pid %s); wait for it to finish or "
                      "choose another run_name",
                      run_dir, pid[0] ? pid : "unknown");
  }
  /* the holder's pid, for the message a second run prints */
  char pid[32];
  int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
    int e = errno;
    close(fd);
    return gt_err_set(err, GT_ERR_IO, "train: cannot write the run lock '%s': %s", path, strerror(e));
  }
  lk->fd = fd;
  return GT_OK;
}

void gt_run_lock_release(gt_run_lock *lk) {
  if (lk->fd >= 0) close(lk->fd); /* closing the descriptor drops the flock */
  lk->fd = -1;
}
