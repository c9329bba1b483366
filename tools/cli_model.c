/* load_parameters_path for the commands: a gemtrain checkpoint (step,
 * checkpoints or run directory), an HF directory or a gemtrain parameter
 * file, each of which carries its own model config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ckpt/ckpt.h"
#include "ckpt/paramfile.h"

int gt_cli_load_params(const char *path, long long max_target_length, gt_config *cfg, gt_model *m, gt_mem *mem,
                       gt_hf_info *info) {
  gt_err err;
  gt_err_clear(&err);
  memset(m, 0, sizeof *m);
  if (info) memset(info, 0, sizeof *info);
  gt_rc rc;
  struct stat sb;
  int is_file = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
  if (!gt_hf_is_dir(path) && !is_file && gt_ckpt_present(path)) {
    /* a gemtrain checkpoint: its header holds the resolved config */
    char *js = NULL;
    if ((rc = gt_ckpt_read_config(path, &js, &err)) == GT_OK &&
        (rc = gt_config_load(cfg, NULL, NULL, 0, NULL, &err)) == GT_OK &&
        (rc = gt_config_apply_json_text(cfg, js, path, &err)) == GT_OK) {
      cfg->max_target_length = max_target_length;
      cfg->num_devices = 1, cfg->ici_data_parallelism = cfg->ici_fsdp_parallelism = 1, cfg->ici_expert_parallelism = 1;
      gt_ckpt_loaded ld;
      if ((rc = gt_model_build(m, cfg, &err)) == GT_OK && (rc = gt_model_alloc_inference(m, mem, &err)) == GT_OK &&
          (rc = gt_ckpt_load_latest(path, m, m->params, NULL, NULL, &ld, NULL, NULL, &err)) == GT_OK)
        free(ld.config_json);
      if (rc) gt_model_free(m);
    }
    free(js);
  } else if (gt_hf_is_dir(path)) {
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
