/* The frozen reference of DPO when every parameter trains: read from its
 * source at every start, fresh or resumed, without a copy in the
 * checkpoints. The source is dpo_reference_path when set, else the
 * parameters the run started from: load_parameters_path, or the
 * initialisation (init_weights_seed). The checkpoints record the source and
 * the checksum of what was read, and a resume that reads other parameters
 * (the source left out of the command, a `latest` that moved, a file
 * rewritten) is refused: a resume holds the same reference bit for bit or
 * does not start. With adapters the reference is the frozen base (the
 * adapters off), which the checkpoints' frozen record covers, and nothing
 * is read. */
#include <stdlib.h>
#include <string.h>

#include "hf/model_source.h"
#include "mesh/fsdp.h"
#include "model/store.h"
#include "train/pref.h"
#include "train/train_internal.h"
#include "train/trainer.h"

gt_rc gt__train_pref_reference(const gt__tstate *s, gt_err *err) {
  const gt_config *c = s->cfg;
  if (!c->use_dpo || !gt_pref_needs_reference(c) || c->enable_lora) return GT_OK;
  if (!c->dpo_reference_path[0] && c->load_full_state_path[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: DPO over all parameters from key 'load_full_state_path' = '%s' has no reference model: "
                      "set key 'dpo_reference_path' (the parameters to hold frozen as the reference), or train "
                      "adapters (enable_lora=true: the reference is the base)",
                      c->load_full_state_path);
  gt_model *m = s->m;
  float *p = gt_mem_alloc_uninit(s->mem, GT_MEM_OTHER, (size_t)m->n_params * sizeof(float));
  if (!p)
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory to read the DPO reference's %lld parameters",
                      (long long)m->n_params);
  gt_rc rc = GT_OK;
  if (c->dpo_reference_path[0]) {
    gt_model_source *src = calloc(1, sizeof *src);
    gt_config rcfg = *c;
    if (!src) rc = gt_err_set(err, GT_ERR_NOMEM, "train: no memory");
    if (!rc) rc = gt_model_source_open(c->dpo_reference_path, src, err);
    if (!rc) rc = gt_model_source_apply_config(src, &rcfg, err);
    if (!rc) rc = gt_model_source_load_params(src, m, p, err);
    free(src);
    if (rc) {
      char msg[GT_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      gt_err_set(err, rc, "train: key 'dpo_reference_path' = '%s': %s", c->dpo_reference_path, msg);
    }
  } else if (c->load_parameters_path[0]) {
    rc = s->src ? gt_model_source_load_params(s->src, m, p, err)
                : gt_err_set(err, GT_ERR_INTERNAL, "train: load_parameters_path was not opened");
  } else {
    gt_model view = *m;
    view.params = p;
    if (gt_model_init_params(&view, (uint64_t)c->init_weights_seed, c->weight_init_scale))
      rc = gt_err_set(err, GT_ERR_NOMEM, "train: no memory to initialise the DPO reference (init_weights_seed=%d)",
                      c->init_weights_seed);
  }
  gt_ckpt_reference now = {gt_store_sum(GT_STORE_SUM_INIT, p, m->n_params), ""};
  if (c->dpo_reference_path[0])
    snprintf(now.source, sizeof now.source, "dpo_reference_path=%.1000s", c->dpo_reference_path);
  else if (c->load_parameters_path[0])
    snprintf(now.source, sizeof now.source, "load_parameters_path=%.500s (%.500s)", c->load_parameters_path,
             s->src ? s->src->dir : "");
  else
    snprintf(now.source, sizeof now.source, "init_weights_seed=%d (weight_init_scale=%.9g)", c->init_weights_seed,
             c->weight_init_scale);
  if (!now.sum) now.sum = 1; /* 0 means "none recorded" */
  const gt_ckpt_reference *was = s->ref ? &s->ref[1] : NULL;
  if (!rc && was && was->sum && was->sum != now.sum)
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "train: the DPO reference is not the one this run started with: its checkpoint records %s "
                    "(checksum %016llx), and this start read %s (checksum %016llx); resume with the run's source "
                    "(keys dpo_reference_path and load_parameters_path as the run had them, the files unchanged), or "
                    "start another run (run_name)",
                    was->source, (unsigned long long)was->sum, now.source, (unsigned long long)now.sum);
  if (!rc && s->ref) s->ref[0] = now;
  if (!rc) rc = gt_fsdp_set_reference(gt_trainer_fsdp(s->tr), p, err);
  gt_mem_free(s->mem, p);
  return rc;
}
