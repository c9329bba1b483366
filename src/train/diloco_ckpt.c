/* DiLoCo's part of a checkpoint (train_internal.h; docs/sharding.md):
 *   <run_dir>/checkpoints/          replica 0's state, as any run's
 *   <run_dir>/diloco/replica_<p>/   replica p's (p >= 1) parameters, AdamW
 *                                   moments, steps and data position
 *   <run_dir>/diloco/outer/         the outer parameters (as "params") and
 *                                   the outer momentum (as both moments)
 * each a checkpoints directory of the usual format, written by the ranks of
 * one replica. The parts are written first and agreed over every rank, then
 * replica 0 writes its state: its `latest` is the commit point of the
 * whole, so a crash at any moment leaves the last committed step with every
 * part (the parts keep one step more than max_num_checkpoints_to_keep, as
 * they may be one step ahead of it). A resume loads each replica's part and
 * the outer state of the step replica 0 loaded (its `latest`, or the step
 * its load fell back to: world rank 0 sends it to every rank before the
 * other replicas load). A checkpoint with no outer state up to that step (a
 * run without DiLoCo, of any layout) is converted: every replica starts
 * from its state, the outer parameters are that state and the momentum
 * zero. One with outer state but not this replica's part (fewer replicas),
 * or a DiLoCo checkpoint missing a part, is refused. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/diloco.h"
#include "train/train_internal.h"

static int gt__is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

gt_rc gt_diloco_ckpt_save(const gt__tstate *s, gt__save_root_fn save_root, const char *run_dir, int64_t step,
                          gt_err *err) {
  char root[2200];
  const int p = gt_dist_replica();
  int64_t keep = s->cfg->max_num_checkpoints_to_keep, keep_parts = keep > 0 ? keep + 1 : 0;
  if (p == 0) snprintf(root, sizeof root, "%s/diloco/outer", run_dir);
  else snprintf(root, sizeof root, "%s/diloco/replica_%d", run_dir, p);
  gt_rc rc = save_root(s, root, keep_parts, p == 0, step, err);
  gt_err mine = *err;
  if ((rc = gt_dist_agree(rc, &mine, "the DiLoCo checkpoint's parts", err))) return rc;
  if (p == 0) {
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    rc = save_root(s, root, keep, 0, step, err);
  }
  mine = *err;
  return gt_dist_agree(rc, &mine, "the DiLoCo checkpoint's commit", err);
}

/* Whether the run has DiLoCo outer state at `step` or before it: then a
 * missing part of `step` is a broken checkpoint, not a run without DiLoCo.
 * (Outer states after it are parts of a checkpoint that was never
 * committed, as when a converted run stopped during its first save.) */
static int gt__outer_upto(const char *run_dir, int64_t step) {
  char dir[2300];
  snprintf(dir, sizeof dir, "%s/diloco/outer", run_dir);
  DIR *d = opendir(dir);
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    long long k;
    char tail;
    found = sscanf(e->d_name, "step_%lld%c", &k, &tail) == 1 && k <= step;
  }
  closedir(d);
  return found;
}

gt_rc gt_diloco_ckpt_path(const gt_config *cfg, const char *run_dir, int64_t step, char *own, size_t n,
                          gt_err *err) {
  const int p = gt_dist_replica();
  if (!gt_diloco_on(cfg) || p == 0) return GT_OK;
  char part[2600], outer[2600];
  snprintf(part, sizeof part, "%s/diloco/replica_%d/step_%08lld", run_dir, p, (long long)step);
  snprintf(outer, sizeof outer, "%s/diloco/outer/step_%08lld", run_dir, (long long)step);
  if (gt__is_dir(part)) {
    snprintf(own, n, "%s", part);
    return GT_OK;
  }
  if (gt__is_dir(outer))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: the checkpoint %s/checkpoints/step_%08lld was written by DiLoCo with fewer replicas: "
                      "it has no part for replica %d (%s); run with the dcn_diloco_parallelism it was written with",
                      run_dir, (long long)step, p, part);
  if (gt__outer_upto(run_dir, step))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: the DiLoCo checkpoint of step %lld in %s lacks replica %d's part (%s) and its outer "
                      "state (%s); it cannot be resumed",
                      (long long)step, run_dir, p, part, outer);
  return GT_OK; /* no outer state: a run without DiLoCo, converted */
}

gt_rc gt_diloco_ckpt_restore(gt_diloco *d, const gt_model *m, const char *run_dir, int64_t step, float *p, float *mu,
                             float *nu, FILE *out, gt_err *err) {
  if (!d) return GT_OK;
  char dir[2300];
  snprintf(dir, sizeof dir, "%s/diloco/outer/step_%08lld", run_dir, (long long)step);
  if (step >= 0 && !gt__is_dir(dir) && gt__outer_upto(run_dir, step))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: the DiLoCo checkpoint of step %lld in %s lacks its outer state (%s); it cannot be resumed",
                      (long long)step, run_dir, dir);
  if (step < 0 || !gt__is_dir(dir)) {
    gt_diloco_reset(d);
    if (step >= 0 && out)
      fprintf(out, "DiLoCo: the checkpoint has no outer state (a run without DiLoCo): converted, every replica starts "
                   "from its parameters and AdamW moments, the outer parameters are those, the outer momentum zero\n");
    return GT_OK;
  }
  gt_ckpt_loaded ld;
  memset(&ld, 0, sizeof ld);
  gt_rc rc = gt_ckpt_load_dir(dir, m, p, mu, nu, &ld, err);
  free(ld.config_json);
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return gt_err_set(err, rc, "train: cannot resume DiLoCo's outer state from '%s': %s", dir, msg);
  }
  gt_diloco_set_from_full(d, p, mu);
  if (out) fprintf(out, "DiLoCo: resumed the outer parameters and momentum from %s\n", dir);
  return GT_OK;
}
