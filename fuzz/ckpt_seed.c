/* Writes fuzz_ckpt's seeds: checkpoints of the tiny model in
 * fuzz_ckpt_model.h, one raw and one zlib-compressed, saved by
 * gt_ckpt_save itself, each prefixed with the harness's mode byte:
 *   gemtrain_fuzz_ckpt_seed OUT_DIR
 * writes OUT_DIR/{raw,zlib}{,_fix}.gtck (the _fix ones start with 'F') and
 * OUT_DIR/header.json, the 'H' seed: the header of a raw checkpoint whose
 * tensors are all zero. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "fuzz_util.h"
#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "config/config.h"
#include "fuzz_ckpt_model.h"

static void die(const char *what, const gt_err *e) {
  fprintf(stderr, "ckpt_seed: %s: %s\n", what, e ? e->msg : "failed");
  exit(1);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  if (remove(path)) perror(path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  gt_config cfg;
  gt_model m;
  gt_err e;
  if (gt_config_load(&cfg, GT_FUZZ_CONFIG_DIR, NULL, GT_FUZZ_N_MODEL_KEYS, gt_fuzz_model_keys, &e)) die("config", &e);
  if (gt_model_build(&m, &cfg, &e)) die("model", &e);
  size_t n = (size_t)m.n_params;
  float *p = malloc(n * sizeof(float)), *mu = malloc(n * sizeof(float)), *nu = malloc(n * sizeof(float));
  if (!p || !mu || !nu) die("no memory", NULL);
  for (size_t i = 0; i < n; i++) p[i] = (float)i / (float)n - 0.5f, mu[i] = 0.01f * (float)(i % 7), nu[i] = 1e-4f;
  const float *ps[1] = {p}, *ms[1] = {mu}, *ns[1] = {nu};
  gt_ckpt_src src = {1, ps, ms, ns};
  gt_ckpt_state st = {7, 6, {1, 3}, 1, 1, 1e-3};
  static const char *names[3] = {"raw", "zlib", "zero"};
  for (int z = 0; z < 3; z++) {
    if (z == 2) memset(p, 0, n * sizeof(float)), memset(mu, 0, n * sizeof(float)), memset(nu, 0, n * sizeof(float));
    char root[600], shard[700], out[700];
    snprintf(root, sizeof root, "%s/ckpt_%s", gt_fuzz_dir(), names[z]);
    if (gt_ckpt_save(root, &m, &src, &st, "{\"steps\":7}", z == 1 ? 6 : 0, 0, &e)) die("save", &e);
    snprintf(shard, sizeof shard, "%s/step_00000007/shard_00000-of-00001.gtck", root);
    char *buf;
    size_t len;
    if (gt_read_file(shard, "shard", &buf, &len, &e)) die("read", &e);
    if (z == 2) { /* 'H' and the header: it starts at 64 + the raw tensors */
      size_t hoff = 64 + 3 * n * sizeof(float);
      snprintf(out, sizeof out, "%s/header.json", argv[1]);
      FILE *f = fopen(out, "wb");
      if (len < hoff || !f || fputc('H', f) == EOF || fwrite(buf + hoff, 1, len - hoff, f) != len - hoff || fclose(f))
        die(out, NULL);
    }
    for (int fix = 0; fix < 2 && z < 2; fix++) {
      snprintf(out, sizeof out, "%s/%s%s.gtck", argv[1], names[z], fix ? "_fix" : "");
      FILE *f = fopen(out, "wb");
      if (!f || fputc(fix ? 'F' : 'R', f) == EOF || fwrite(buf, 1, len, f) != len || fclose(f)) die(out, NULL);
    }
    free(buf);
  }
  free(p), free(mu), free(nu);
  gt_model_free(&m);
  char root[600];
  static const char *dirs[3] = {"ckpt_raw", "ckpt_zlib", "ckpt_zero"};
  for (int z = 0; z < 3; z++) /* the saved checkpoints; the scratch directory itself goes at exit */
    nftw(gt_fuzz_path(root, sizeof root, dirs[z]), rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  return 0;
}
