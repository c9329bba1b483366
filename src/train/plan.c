/* The plan's driver: the trainer (train/trainer.h) runs one step on an
 * allocation-only mesh with the plan's probes on its devices' trackers
 * (exec/plan.c counts what they see). */
#include "train/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/fsdp.h"
#include "mesh/mesh.h"
#include "train/train_internal.h"
#include "train/trainer.h"

gt_rc gt_plan_apply_source(gt_config *cfg, gt_err *err) {
  gt_model_source *src = malloc(sizeof *src); /* holds a config and the HF import's record */
  if (!src) return gt_err_set(err, GT_ERR_NOMEM, "plan: no memory");
  int have = 0;
  gt_rc rc = gt__train_source(cfg, src, &have, err);
  free(src);
  if (rc && !strncmp(err->msg, "train: ", 7)) { /* train's words, said by the plan */
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg + 7);
    gt_err_set(err, rc, "plan: %s", msg);
  }
  return rc ? rc : gt_config_validate(cfg, err);
}

gt_rc gt_plan_compute(gt_plan *p, const gt_config *c, gt_err *err) {
  gt_plan_watch *w;
  gt_rc rc = gt_plan_watch_open(&w, p, c, err);
  if (rc) return rc;
  int *rank_of = NULL; /* [global devices] the rank of each, the mesh's own map */
  int G = 0;
  int64_t snap = 0;
  gt_trainer *tr = NULL;
  if ((rc = gt_trainer_create(&tr, c, gt_plan_watch_probes(w), err))) goto out;
  gt_step_metrics sm;
  rc = gt_trainer_step_zero(tr, &sm, err);
  gt_fsdp *fs = gt_trainer_fsdp(tr);
  for (int d = 0; !rc && d < (int)c->num_devices; d++) rc = gt_plan_watch_device(w, d, gt_fsdp_device_mem(fs, d), err);
  const gt_mesh *mesh = gt_fsdp_mesh(fs);
  G = gt_mesh_global_size(mesh);
  if (!rc && !(rank_of = malloc(sizeof(int) * (size_t)G))) rc = gt_err_set(err, GT_ERR_NOMEM, "plan: no memory");
  for (int g = 0; !rc && g < G; g++) rank_of[g] = gt_mesh_rank_of(mesh, g);
  /* the snapshot async_checkpointing keeps beside the steps */
  snap = c->enable_checkpointing && c->async_checkpointing
                     ? gt__train_snapshot_bytes(fs, gt_fsdp_device_model(fs, 0))
                     : 0;
  gt_trainer_destroy(tr); /* its frees still reach the probes: the watch stays put */
out:
  rc = gt_plan_watch_close(w, rc, rank_of, G, err);
  if (!rc) p->ckpt_snapshot_bytes = snap;
  free(rank_of);
  return rc;
}
