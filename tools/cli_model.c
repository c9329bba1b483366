/* load_parameters_path for the commands (decode, convert, logit-check): the
 * model source (src/hf/model_source.h) decides what the path is and which
 * model it holds; this builds that model for one device and loads it, and
 * says (a note line) when it leaves real layer_scalar values unused.
 *
 * cfg is in and out: on entry the command's own config (its explicit model
 * keys must agree with the source's, see model_source.h), on return that
 * config with the source's model keys, model_name naming what was loaded,
 * max_target_length positions and one device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hf/model_source.h"

int gt_cli_load_params(const char *path, long long max_target_length, gt_config *cfg, gt_model *m, gt_mem *mem,
                       gt_hf_info *info) {
  gt_err err;
  gt_err_clear(&err);
  memset(m, 0, sizeof *m);
  if (info) memset(info, 0, sizeof *info);
  cfg->max_target_length = max_target_length;
  cfg->num_devices = 1;
  cfg->ici_data_parallelism = cfg->ici_fsdp_parallelism = cfg->ici_expert_parallelism = 1;
  gt_model_source src;
  gt_rc rc;
  if ((rc = gt_model_source_open(path, &src, &err)) == GT_OK &&
      (rc = gt_model_source_apply_config(&src, cfg, &err)) == GT_OK &&
      (rc = gt_model_build(m, cfg, &err)) == GT_OK && (rc = gt_model_alloc_inference(m, mem, &err)) == GT_OK)
    rc = gt_model_source_load_params(&src, m, m->params, &err);
  if (rc) {
    gt_model_free(m);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return gt_cli_exit_code(rc);
  }
  gt_cli_scalar_note(path, &src.hf, stdout);
  if (info) *info = src.hf;
  return 0;
}

void gt_cli_scalar_note(const char *path, const gt_hf_info *hf, FILE *f) {
  if (!hf->n_unused_scalars_not_one) return;
  fprintf(f,
          "note: load_parameters_path %s: %d of its %d layer_scalar buffers hold values other than 1, which "
          "layer_scalar_trainable=false leaves unused (the model multiplies by 1, so it is not the checkpoint's "
          "model; layer_scalar_trainable=true uses them)\n",
          path, hf->n_unused_scalars_not_one, hf->n_unused_scalars);
  fflush(f);
}

void gt_cli_source_note(const gt_config *cfg, FILE *f) {
  if (!cfg->load_parameters_path[0] || !gt_hf_is_dir(cfg->load_parameters_path)) return;
  gt_model_source *src = malloc(sizeof *src);
  gt_config *c = malloc(sizeof *c);
  gt_err err;
  gt_err_clear(&err);
  if (src && c) {
    *c = *cfg;
    /* a source that cannot be applied is the run's to refuse */
    if (gt_model_source_open(cfg->load_parameters_path, src, &err) == GT_OK &&
        gt_model_source_apply_config(src, c, &err) == GT_OK)
      gt_cli_scalar_note(cfg->load_parameters_path, &src->hf, f);
  }
  free(src);
  free(c);
}
