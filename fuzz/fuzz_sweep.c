/* The sweep file parser: any text through gt_sweep_parse (base, grids,
 * points, steps, metrics, plot, ...); for a sweep it accepts, every point's
 * merged overrides as the runner asks for them (with one command-line key). */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>

#include "sweep/sweep.h"

#define GT_FUZZ_MAX_POINTS 256 /* points merged per input */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return -1;
  char *text = gt_fuzz_cstr(data, size);
  char path[600];
  gt_fuzz_path(path, sizeof path, "input.json");
  gt_sweep s;
  gt_err e;
  gt_rc rc = gt_sweep_parse(&s, text, path, &e);
  gt_fuzz_note("parse", rc ? e.msg : "accepted");
  if (!rc) {
    const char *cli[] = {"steps=3"};
    int np = s.n_points < GT_FUZZ_MAX_POINTS ? s.n_points : GT_FUZZ_MAX_POINTS;
    for (int k = 0; k < np; k++) {
      gt_sweep_kvs kv = {0};
      if (gt_sweep_point_overrides(&s, k, 1, cli, &kv, &e) == GT_OK)
        for (int i = 0; i < kv.n; i++) (void)gt_sweep_key_len(kv.kv[i]);
      gt_sweep_kvs_free(&kv);
    }
    gt_sweep_free(&s);
  }
  free(text);
  gt_fuzz_check_quiet();
  return 0;
}
