/* MaxText's YAML config files (src/config/yaml.c): any text through the
 * YAML reader; what it accepts goes on through the JSON layer a config file
 * takes (gt_config_apply_json_text), then the cross-validation. The library
 * must refuse with a message, never crash, print or leak. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/yaml.h"

static gt_config gt_fuzz_defaults;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  gt_fuzz_load_defaults(&gt_fuzz_defaults);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return -1; /* a config is small; big inputs only slow the search */
  cJSON *o = NULL;
  gt_err e;
  gt_rc rc = gt_config_parse_yaml((const char *)data, size, "fuzz.yml", &o, &e);
  gt_fuzz_note("yaml", rc ? e.msg : "parsed");
  if (!rc) {
    char *js = cJSON_PrintUnformatted(o);
    gt_config cfg = gt_fuzz_defaults;
    if (js) {
      rc = gt_config_apply_json_text(&cfg, js, "fuzz.yml", &e);
      if (!rc) rc = gt_config_validate(&cfg, &e);
      gt_fuzz_note("config", rc ? e.msg : "accepted");
    }
    free(js);
    cJSON_Delete(o);
  }
  gt_fuzz_check_quiet();
  return 0;
}
