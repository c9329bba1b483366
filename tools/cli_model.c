/* load_parameters_path for the commands (decode, convert, logit-check): the
 * model source (src/hf/model_source.h) decides what the path is and which
 * model it holds; this builds that model for one device and loads it.
 *
 * cfg is in and out: on entry the command's own config (its explicit model
 * keys must agree with the source's, see model_source.h), on return that
 * config with the source's model keys, model_name naming what was loaded,
 * max_target_length positions and one device. */
#include <stdio.h>
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
  if (info) *info = src.hf;
  return 0;
}
