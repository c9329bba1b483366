/* gemtrain bench checkpoint: how long a full-state checkpoint takes to
 * write (fsync included) and to read back with every crc checked, stored
 * raw and through zlib, for the configured model. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ckpt/ckpt.h"
#include "model/model.h"
#include "base/prof.h"

static long long gt__dir_bytes(const char *dir) {
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "du -sb '%s' 2>/dev/null", dir);
  FILE *p = popen(cmd, "r");
  long long b = -1;
  if (p) {
    if (fscanf(p, "%lld", &b) != 1) b = -1;
    pclose(p);
  }
  return b;
}

int gt_bench_checkpoint(int argc, char **argv, int reps) {
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  gt_err err;
  gt_err_clear(&err);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  if (gt_model_build(&m, &cfg, &err) || gt_model_alloc(&m, &mem, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 1;
  }
  /* a trained-looking state: initialised weights; moments of the same
   * spread (their bits compress like real ones: barely) */
  if (gt_model_init_params(&m, (uint64_t)cfg.init_weights_seed, cfg.weight_init_scale)) {
    fprintf(stderr, "gemtrain: bench checkpoint: no memory to initialise the stored-quantized tensors\n");
    return 1;
  }
  size_t nb = (size_t)m.n_params * sizeof(float);
  float *mu = malloc(nb), *nu = malloc(nb);
  if (!mu || !nu) {
    fprintf(stderr, "gemtrain: bench checkpoint: no memory for %lld moments\n", (long long)m.n_params);
    return 1;
  }
  for (int64_t i = 0; i < m.n_params; i++) mu[i] = 1e-3f * m.params[i], nu[i] = 1e-6f * m.params[i] * m.params[i];
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/bench-checkpoint-%d", cfg.base_output_directory, (int)getpid());
  printf("checkpoint benchmark: %s, %lld parameters (%.1f MiB of state: params + 2 AdamW moments), %s, best of %d\n\n",
         cfg.model_name, (long long)m.n_params, 3.0 * (double)nb / 1048576.0, dir, reps);
  printf("| stored | file MiB | write s (with fsync) | write MiB/s | load s (all crc32 checked) | load MiB/s |\n");
  printf("|---|---|---|---|---|---|\n");
  const float *p[1] = {m.params}, *a[1] = {mu}, *b[1] = {nu};
  gt_ckpt_src src = {1, p, a, b};
  int levels[] = {0, 1, 6};
  float *back = malloc(nb);
  for (int li = 0; li < 3 && back; li++) {
    double wbest = 1e30, rbest = 1e30;
    long long bytes = 0;
    for (int r = 0; r < reps; r++) {
      char root[1200];
      snprintf(root, sizeof root, "%s/z%d", dir, levels[li]);
      gt_ckpt_state st = {1 + r, 1 + r, {0, 0}, 1, 1, 0, {0}, {0}, 0};
      double t0 = gt_prof_now();
      if (gt_ckpt_save(root, &m, &src, &st, NULL, levels[li], 1, &err)) {
        fprintf(stderr, "gemtrain: %s\n", err.msg);
        return 1;
      }
      double t1 = gt_prof_now();
      gt_ckpt_loaded ld;
      if (gt_ckpt_load_latest(root, &m, back, mu, nu, &ld, NULL, NULL, &err)) {
        fprintf(stderr, "gemtrain: %s\n", err.msg);
        return 1;
      }
      double t2 = gt_prof_now();
      free(ld.config_json);
      if (memcmp(back, m.params, nb)) {
        fprintf(stderr, "gemtrain: bench checkpoint: the parameters read back differ\n");
        return 1;
      }
      wbest = t1 - t0 < wbest ? t1 - t0 : wbest;
      rbest = t2 - t1 < rbest ? t2 - t1 : rbest;
      bytes = gt__dir_bytes(root);
    }
    double mib = 3.0 * (double)nb / 1048576.0;
    printf("| %s | %.1f | %.3f | %.0f | %.3f | %.0f |\n", levels[li] ? (levels[li] == 1 ? "zlib 1" : "zlib 6") : "raw",
           (double)bytes / 1048576.0, wbest, mib / wbest, rbest, mib / rbest);
    fflush(stdout);
  }
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "gemtrain: bench checkpoint: could not remove %s\n", dir);
  free(back), free(mu), free(nu);
  gt_model_free(&m);
  return 0;
}
