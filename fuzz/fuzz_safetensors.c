/* The safetensors reader: any file through gt_st_open (the 8-byte length,
 * the JSON header, every tensor entry checked against the file), and for a
 * file it accepts, every tensor found by name and read back as float32 (the
 * first elements only, so a large tensor costs no time). */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>

#include "ckpt/safetensors.h"

#define GT_FUZZ_MAX_READ 4096 /* elements read per tensor */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return -1;
  const char *path = gt_fuzz_write("model.safetensors", data, size);
  gt_st_file f;
  gt_err e;
  gt_rc rc = gt_st_open(&f, path, &e);
  gt_fuzz_note("open", rc ? e.msg : "accepted");
  if (!rc) {
    float *buf = malloc(sizeof(float) * GT_FUZZ_MAX_READ);
    if (!buf) abort();
    for (int i = 0; i < f.n_tensors; i++) {
      const gt_st_tensor *t = gt_st_find(&f, f.tensors[i].name);
      if (t != &f.tensors[i]) {
        fprintf(stderr, "fuzz: gt_st_find('%s') did not find the file's own tensor %d\n", f.tensors[i].name, i);
        abort();
      }
      int64_t n = t->numel < GT_FUZZ_MAX_READ ? t->numel : GT_FUZZ_MAX_READ;
      if (t->numel <= GT_FUZZ_MAX_READ) (void)gt_st_read_f32(t, buf, t->numel, &e);
      (void)gt_st_read_f32_range(t, 0, n, buf, &e);
      if (t->numel > 1) (void)gt_st_read_f32_range(t, t->numel - 1, 1, buf, &e);
      (void)gt_st_read_f32_range(t, t->numel, 1, buf, &e); /* one past the end: refused */
    }
    (void)gt_st_find(&f, "");
    free(buf);
  }
  gt_st_close(&f);
  gt_fuzz_check_quiet();
  return 0;
}
