/* load_parameters_path for the commands: an HF directory or a gemtrain
 * parameter file, each of which carries its own model config. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gemtrain/paramfile.h"

int gt_cli_load_params(const char *path, long long max_target_length, gt_config *cfg, gt_model *m, gt_mem *mem,
                       gt_hf_info *info) {
  gt_err err;
  gt_err_clear(&err);
  memset(m, 0, sizeof *m);
  if (info) memset(info, 0, sizeof *info);
  gt_rc rc;
  if (gt_hf_is_dir(path)) {
    /* base.json's defaults for everything config.json does not define */
    if ((rc = gt_config_load(cfg, NULL, NULL, 0, NULL, &err)) == GT_OK) {
      cfg->max_target_length = max_target_length;
      rc = gt_hf_load_model(path, cfg, m, mem, info, &err);
    }
  } else {
    if ((rc = gt_paramfile_read_config(path, cfg, &err)) == GT_OK) {
      cfg->max_target_length = max_target_length;
      if ((rc = gt_model_build(m, cfg, &err)) == GT_OK && (rc = gt_model_alloc_inference(m, mem, &err)) == GT_OK)
        rc = gt_paramfile_read(path, m, NULL, NULL, NULL, &err);
      if (rc) gt_model_free(m);
    }
  }
  if (rc) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 2;
  }
  return 0;
}
