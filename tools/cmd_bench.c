/* gemtrain bench: training-step throughput of a config on synthetic data,
 * with the share of time per kind of work. Timing lives here, never in tests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gemtrain/data.h"
#include "gemtrain/exec.h"
#include "gemtrain/flops.h"
#include "gemtrain/model.h"
#include "gemtrain/optim.h"
#include "gemtrain/prof.h"
#include "gemtrain/train.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int gt_cmd_bench(int argc, char **argv) {
  int steps = 5, warmup = 1;
  int first = 0;
  while (first < argc && !strncmp(argv[first], "--", 2)) {
    if (!strcmp(argv[first], "--steps") && first + 1 < argc) {
      steps = atoi(argv[first + 1]);
      first += 2;
    } else if (!strcmp(argv[first], "--help")) {
      printf("usage: gemtrain bench [--steps N] [config.json] [key=value ...]\n"
             "Times N training steps (forward, backward, AdamW) after one warm-up step on synthetic\n"
             "data and prints tokens/s and the share of time per kind of work.\n");
      return 0;
    } else {
      fprintf(stderr, "gemtrain bench: unknown option '%s'\n", argv[first]);
      return 2;
    }
  }
  if (steps < 1) steps = 1;
  gt_config cfg;
  int rc = gt_cli_load_config(argc - first, argv + first, &cfg);
  if (rc) return rc;
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "synthetic");
  int threads = gt_threads_configure(&cfg);
  gt_err err;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_data data;
  gt_optim opt = {0};
  gt_prof prof;
  if (gt_model_build(&m, &cfg, &err) || gt_model_alloc(&m, &mem, &err) ||
      gt_data_open(&data, &cfg, &mem, &err) || gt_optim_init(&opt, m.n_params, &mem, &err)) {
    fprintf(stderr, "gemtrain bench: %s\n", err.msg);
    return 1;
  }
  gt_model_init_params(&m, 0, 1.0);
  int B = (int)gt_config_global_batch(&cfg), T = (int)cfg.max_target_length;
  printf("bench: %s d=%lld L=%lld H=%lld K=%lld hd=%lld F=%lld V=%lld W=%lld, batch %d x %d, %d threads\n",
         cfg.model_name, cfg.base_emb_dim, cfg.base_num_decoder_layers, cfg.base_num_query_heads,
         cfg.base_num_kv_heads, cfg.head_dim, cfg.base_mlp_dim, cfg.vocab_size, cfg.sliding_window_size, B, T,
         threads);
  double *fb = malloc(sizeof(double) * steps), *full = malloc(sizeof(double) * steps);
  for (int s = -warmup; s < steps; s++) {
    if (s == 0) memset(&prof, 0, sizeof prof), m.prof = &prof;
    double t0 = gt_prof_now();
    gt_batch b;
    gt_data_next_train(&data, &b);
    gt_model_zero_grads(&m);
    gt_loss_stats st = {0, 0};
    if (gt_exec_forward_backward(&m, &b, (int)cfg.num_vocab_tiling, 1.0f / (float)(B * T), &st, &err)) {
      fprintf(stderr, "gemtrain bench: %s\n", err.msg);
      return 1;
    }
    double t1 = gt_prof_now();
    GT_PROF(m.prof, GT_PROF_OPTIM, gt_optim_step(&opt, m.params, m.grads, &cfg, NULL));
    double t2 = gt_prof_now();
    if (s >= 0) fb[s] = t1 - t0, full[s] = t2 - t0;
  }
  double total = 0;
  for (int s = 0; s < steps; s++) total += full[s];
  qsort(fb, (size_t)steps, sizeof(double), cmp_d);
  qsort(full, (size_t)steps, sizeof(double), cmp_d);
  double tok = (double)B * T;
  gt_flops fl = gt_flops_per_step_per_device(&cfg);
  printf("forward+backward: %.1f tokens/s (median %.3f s of %d steps)\n", tok / fb[steps / 2], fb[steps / 2], steps);
  printf("train step (with clipping and AdamW): %.1f tokens/s, %.1f GFLOP/s (MaxText count %.4f TFLOPs/step)\n",
         tok / full[steps / 2], fl.total_tflops * 1e3 / full[steps / 2], fl.total_tflops);
  printf("time shares:");
  double acc = 0;
  for (int c = 0; c < GT_PROF_NCAT; c++) {
    printf(" %s %.1f%%,", gt_prof_cat_name((gt_prof_cat)c), 100 * prof.seconds[c] / total);
    acc += prof.seconds[c];
  }
  printf(" other (allocation, copies, residual adds) %.1f%%\n", 100 * (total - acc) / total);
  printf("peak memory: %.1f MiB\n", (double)gt_mem_total_peak(&mem) / 1048576.0);
  free(fb);
  free(full);
  gt_optim_free(&opt);
  gt_data_close(&data);
  gt_model_free(&m);
  return 0;
}
