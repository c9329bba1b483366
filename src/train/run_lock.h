/* One run per run directory: `gemtrain train` holds an exclusive flock(2) on
 * <run_dir>/.lock for as long as it runs. A second run on the same
 * directory is refused at once, naming the first one's pid. The kernel drops
 * the lock when its holder exits or is killed, so a crashed run leaves a
 * lock file but never a stale lock. */
#ifndef GT_TRAIN_RUN_LOCK_H
#define GT_TRAIN_RUN_LOCK_H

#include "base/common.h"

typedef struct gt_run_lock {
  int fd; /* -1: not held */
} gt_run_lock;

/* Takes the lock of run_dir (which must exist) or fails with GT_ERR_IO
 * naming the directory and the holder's pid. */
gt_rc gt_run_lock_take(gt_run_lock *lk, const char *run_dir, gt_err *err);
/* Releases it (a lock never taken is fine). */
void gt_run_lock_release(gt_run_lock *lk);

#endif
