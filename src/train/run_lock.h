/* One run per run directory: `gemtrain train` holds an exclusive flock(2) on
 * <run_dir>/.lock for as long as it runs. A second run on the same
 * directory is refused at once, naming the first one's pid. The kernel drops
 * the lock when its holder exits or is killed, so a crashed run leaves a
 * lock file but never a stale lock. `gemtrain sweep` holds the same kind of
 * lock on its sweep directory, and takes each point's run lock before it
 * touches the point's files. */
#ifndef GT_TRAIN_RUN_LOCK_H
#define GT_TRAIN_RUN_LOCK_H

#include "base/common.h"

typedef struct gt_run_lock {
  int fd; /* -1: not held */
} gt_run_lock;

/* A held lock passed on to a child process: the parent clears FD_CLOEXEC on
 * lk->fd and sets this variable to its number before exec; the child's
 * gt_run_lock_take on the same directory adopts that descriptor (the lock
 * belongs to the open file, which the child now shares), so no other
 * process can take the directory between the parent's check and the
 * child's start. A number that is not a descriptor of that lock file is
 * ignored. */
#define GT_RUN_LOCK_FD_ENV "GEMTRAIN_RUN_LOCK_FD"

/* Takes the lock of run_dir (which must exist) or fails with GT_ERR_IO
 * naming the directory and the holder's pid. */
gt_rc gt_run_lock_take(gt_run_lock *lk, const char *run_dir, gt_err *err);
/* The same lock on a directory of another kind: messages start with
 * `stage` ("sweep"), the refusal calls the directory `what` ("sweep
 * directory") and ends with `hint`, what to do instead. */
gt_rc gt_dir_lock_take(gt_run_lock *lk, const char *dir, const char *stage, const char *what, const char *hint,
                       gt_err *err);
/* Releases it (a lock never taken is fine). */
void gt_run_lock_release(gt_run_lock *lk);

#endif
