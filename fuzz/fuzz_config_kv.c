/* The config loader's key=value layer and its file layer: the input is a
 * user config file and key=value overrides,
 *   <user JSON file> NUL <key=value> \n <key=value> \n ...
 * (no NUL: no user file, every line an override). Each override goes
 * through gt_config_set on the defaults, then all of them through
 * gt_config_load with the file, as `gemtrain train FILE k=v ...` does. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define GT_FUZZ_MAX_OV 32

static gt_config gt_fuzz_defaults;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  gt_fuzz_load_defaults(&gt_fuzz_defaults);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return -1;
  const uint8_t *nul = memchr(data, 0, size);
  const char *user = NULL;
  if (nul) user = gt_fuzz_write("input.json", data, (size_t)(nul - data));
  size_t off = nul ? (size_t)(nul - data) + 1 : 0;
  char *text = gt_fuzz_cstr(data + off, size - off); /* a NUL further on ends the overrides */
  const char *ov[GT_FUZZ_MAX_OV];
  int n = 0;
  for (char *line = text, *next; line && n < GT_FUZZ_MAX_OV; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    if (*line) ov[n++] = line;
  }
  gt_config cfg = gt_fuzz_defaults;
  gt_err e;
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(ov[i], '=');
    if (!eq) continue;
    char key[128];
    size_t kl = (size_t)(eq - ov[i]);
    if (kl >= sizeof key) continue;
    memcpy(key, ov[i], kl);
    key[kl] = '\0';
    (void)gt_config_set(&cfg, key, eq + 1, "fuzz", &e);
  }
  gt_config loaded;
  gt_rc rc = gt_config_load(&loaded, GT_FUZZ_CONFIG_DIR, user, n, ov, &e);
  gt_fuzz_note("load", rc ? e.msg : "accepted");
  if (!rc) {
    char *js = gt_config_to_json(&loaded);
    free(js);
  }
  free(text);
  gt_fuzz_check_quiet();
  return 0;
}
