/* The frozen reference of DPO when every parameter trains: read from its
 * source at every start, fresh or resumed, so a resume holds the same
 * reference bit for bit without a copy in the checkpoints. The source is
 * dpo_reference_path when set, else the parameters the run started from:
 * load_parameters_path, or the initialisation (init_weights_seed). With
 * adapters the reference is the frozen base (the adapters off) and nothing
 * is read. */
#include <stdlib.h>
#include <string.h>

#include "hf/model_source.h"
#include "mesh/fsdp.h"
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
    gt_model_init_params(&view, (uint64_t)c->init_weights_seed, c->weight_init_scale);
  }
  if (!rc) rc = gt_fsdp_set_reference(gt_trainer_fsdp(s->tr), p, err);
  gt_mem_free(s->mem, p);
  return rc;
}
