/* A test-only seam into the checkpoint writer: a fault injected on purpose,
 * so tests can check what a crash or a full disk in the middle of a write
 * leaves behind (latest untouched, no partial directory, a resume that
 * matches an uninterrupted run). Not API: tests call it directly, and the
 * command calls it from GEMTRAIN_TEST_CKPT_FAULT (tools/cli_seams.c); the
 * library itself reads no environment. */
#ifndef GT_CKPT_SEAM_H
#define GT_CKPT_SEAM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt__ckpt_fault {
  GT__CKPT_FAULT_NONE = 0,
  GT__CKPT_FAULT_KILL,   /* raise SIGKILL: the process dies mid-write */
  GT__CKPT_FAULT_ENOSPC, /* the write fails with ENOSPC, as on a full disk */
} gt__ckpt_fault;

/* Arms `kind` for the nth_save-th save in which this process writes a
 * shard file (every gt_ckpt_save; in a gt_ckpt_save_sync, one where this
 * rank holds a shard) from this call on (1: the next one). It fires once, when that save's first shard file has written
 * half of its raw tensor bytes. GT__CKPT_FAULT_NONE, or nth_save < 1,
 * disarms. Process-wide and not synchronised: call it between saves. */
void gt__ckpt_set_fault(gt__ckpt_fault kind, long nth_save);

/* Named points of a save, for tests that stop or slow it there (a kill at
 * each point must leave the last committed checkpoint loadable):
 *   "prepared"   the temporary directory .tmp-step_N exists (every rank agreed)
 *   "half"       half of this process's first shard file of the save is written
 *   "written"    this process's shard files are written and fsync'ed
 *   "renamed"    rank 0: step_N is in place (renamed, directory fsync'ed); `latest` still old
 *   "latest"     rank 0: the new `latest` is written as .tmp-latest, not yet renamed
 *   "committed"  rank 0: `latest` names step_N and is durable; retention not yet run
 * The hook runs on the thread that reaches the point (a background writer's
 * with async_checkpointing), with the save's step. NULL removes it. Set it
 * between saves. */
typedef void (*gt__ckpt_point_fn)(void *ctx, const char *point, int64_t step);
void gt__ckpt_set_point_hook(gt__ckpt_point_fn fn, void *ctx);

/* Makes loading step directory `step` fail in this process (GT_ERR_IO), as
 * a read error on one host would: the walk back then tries older steps.
 * step < 0 disarms. Process-wide; set it before a load. */
void gt__ckpt_set_read_fault(int64_t step);

#ifdef __cplusplus
}
#endif
#endif
