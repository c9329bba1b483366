/* The checkpoint reader: a shard file (.gtck) as the only shard of step 7,
 * read with gt_ckpt_load_dir into a tiny model's buffers (preamble, header
 * JSON, state, model table, tensor table, every tensor's bytes and crc32)
 * and with gt_ckpt_read_config.
 *
 * The first input byte picks how the rest becomes the file:
 *   'H'  the rest is the header JSON alone; the file is built around it
 *        (preamble, checksums, the model's raw tensors all zero), so every
 *        mutation lands in the state, config, model and tensor tables;
 *   'F'  a whole file whose checksums are fixed first: the header runs from
 *        the preamble's header offset to the end of the file and both crc32s
 *        are recomputed (mutations of the tensor bytes, zlib streams and
 *        header together);
 *   else the bytes as they are (the preamble checks themselves). */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "ckpt/ckpt.h"
#include "config/config.h"
#include "fuzz_ckpt_model.h"

static gt_model gt_fuzz_model;
static float *gt_fuzz_p, *gt_fuzz_mu, *gt_fuzz_nu;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_config cfg;
  gt_err e;
  char p[600];
  if (gt_config_load(&cfg, GT_FUZZ_CONFIG_DIR, NULL, GT_FUZZ_N_MODEL_KEYS,
                     gt_fuzz_model_keys, &e) ||
      gt_model_build(&gt_fuzz_model, &cfg, &e)) {
    fprintf(stderr, "fuzz: cannot build the checkpoint's model: %s\n", e.msg);
    abort();
  }
  size_t n = (size_t)gt_fuzz_model.n_params;
  gt_fuzz_p = calloc(n, sizeof(float)), gt_fuzz_mu = calloc(n, sizeof(float)), gt_fuzz_nu = calloc(n, sizeof(float));
  if (!gt_fuzz_p || !gt_fuzz_mu || !gt_fuzz_nu || mkdir(gt_fuzz_path(p, sizeof p, "step_00000007"), 0755)) abort();
  return 0;
}

static void gt_fuzz_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t gt_fuzz_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Preamble fields and checksums for a file whose header is [hoff, n). */
static void gt_fuzz_seal(uint8_t *file, uint64_t hoff, uint64_t n) {
  uint64_t hn = n - hoff;
  for (int i = 0; i < 8; i++) file[16 + i] = (uint8_t)(hoff >> (8 * i)), file[24 + i] = (uint8_t)(hn >> (8 * i));
  gt_fuzz_put32(file + 32, (uint32_t)crc32(0, file + hoff, (uInt)hn));
  gt_fuzz_put32(file + 36, (uint32_t)crc32(0, file, 36));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 1 << 20) return -1;
  uint8_t mode = data[0];
  size_t n = size - 1;
  uint8_t *file;
  if (mode == 'H') {
    /* the header alone: the file is built around it, preamble and zeroed
     * raw tensors (whose crc32s the seed's header records) */
    size_t tens = 3 * sizeof(float) * (size_t)gt_fuzz_model.n_params, hoff = 64 + tens;
    if (!(file = calloc(hoff + n, 1))) abort();
    memcpy(file, "GTCKPT\0\0\1\0\0\0", 12); /* magic, version 1, flags 0 */
    memcpy(file + hoff, data + 1, n);
    n += hoff;
    gt_fuzz_seal(file, hoff, n);
  } else {
    if (!(file = malloc(n ? n : 1))) abort();
    memcpy(file, data + 1, n);
    if (mode == 'F' && n >= 64) {
      uint64_t hoff = gt_fuzz_get64(file + 16);
      if (hoff >= 64 && hoff <= n)
        gt_fuzz_seal(file, hoff, n);
      else
        gt_fuzz_put32(file + 36, (uint32_t)crc32(0, file, 36));
    }
  }
  char dir[600];
  gt_fuzz_path(dir, sizeof dir, "step_00000007");
  gt_fuzz_write("step_00000007/shard_00000-of-00001.gtck", file, n);
  free(file);
  gt_ckpt_loaded ld;
  gt_err e;
  if (gt_ckpt_load_dir(dir, &gt_fuzz_model, gt_fuzz_p, gt_fuzz_mu, gt_fuzz_nu, &ld, &e) == GT_OK)
    free(ld.config_json), gt_fuzz_note("load", "accepted");
  else
    gt_fuzz_note("load", e.msg);
  char *cj = NULL;
  if (gt_ckpt_read_config(dir, &cj, &e) == GT_OK)
    free(cj), gt_fuzz_note("config", "accepted");
  else
    gt_fuzz_note("config", e.msg);
  gt_fuzz_check_quiet();
  return 0;
}
