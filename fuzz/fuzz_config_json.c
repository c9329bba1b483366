/* The config loader's JSON layer: any text through gt_config_apply_json_text
 * on the defaults, then the cross-validation and the writer a run uses
 * (gt_config_validate, gt_config_to_json) on whatever it accepted. The
 * library must refuse with a message, never crash, print or leak. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>

#include "config/config.h"

static gt_config gt_fuzz_defaults;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  gt_fuzz_load_defaults(&gt_fuzz_defaults);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return -1; /* a config is small; big inputs only slow the search */
  char *text = gt_fuzz_cstr(data, size);
  gt_config cfg = gt_fuzz_defaults;
  gt_err e;
  gt_rc rc = gt_config_apply_json_text(&cfg, text, "fuzz.json", &e);
  if (!rc) rc = gt_config_validate(&cfg, &e);
  gt_fuzz_note("config", rc ? e.msg : "accepted");
  if (!rc) {
    /* what a run then asks of a valid config */
    char *js = gt_config_to_json(&cfg);
    free(js);
    (void)gt_config_global_batch(&cfg);
    long long L = cfg.base_num_decoder_layers < 64 ? cfg.base_num_decoder_layers : 64;
    for (long long l = 0; l < L; l++)
      (void)gt_config_layer_head_dim(&cfg, l), (void)gt_config_layer_kv_donor(&cfg, l),
          (void)gt_config_layer_mlp_dim(&cfg, l), (void)gt_config_layer_is_moe(&cfg, l);
  }
  free(text);
  gt_fuzz_check_quiet();
  return 0;
}
