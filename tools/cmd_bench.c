/* gemtrain bench: training-step throughput of a config on synthetic data,
 * with the share of time per kind of work. Timing lives here, never in tests. */
#define _GNU_SOURCE /* getrusage's RUSAGE_SELF fields */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dist/dist.h"
#include "model/flops.h"
#include "train/plan.h"
#include "base/prof.h"
#include "train/train.h"
#include "train/trainer.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double gt_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int gt_bench_peaks(const char *what, double (*peak)(int threads, double seconds), double *one, double *two) {
  *one = *two = 0;
  /* untimed: the first loop of a process measured 25% low twice in a row
   * (86 GFLOP/s on 1 thread, 165 on 2, where the usual 115 and 230 came
   * right after), as if the cores were still waking up */
  (void)peak(2, 0.3);
  for (int round = 0; round < 5; round++) {
    double p1 = peak(1, 0.3), p2 = peak(2, 0.3);
    if (p1 > *one) *one = p1;
    if (p2 > *two) *two = p2;
    if (*two >= 1.8 * *one && *two <= 2.1 * *one) return 0;
  }
  if (*one <= 0) return 0; /* no such units: 0 for both */
  /* still implausible: a core stayed taken (or the one thread was slowed)
   * through every round; two cores' worth of the 1-thread peak is what the
   * 2-thread shares are meant against */
  printf("note: the %s peak measured %.1f GFLOP/s on 1 thread but %.1f on 2, outside 1.8-2.1x the 1-thread one in 5 "
         "rounds (another process held a core?): the 2-thread shares below use 2 x %.1f = %.1f\n",
         what, *one, *two, *one, 2 * *one);
  *two = 2 * *one;
  return 1;
}

typedef struct bench_result {
  double fb_s, step_s; /* medians */
  int64_t peak, planned;
  gt_prof prof;        /* device 0's */
  double total_s;
  double offload_s;
  long long offload_bytes;
  int64_t comm_bytes;     /* sent per device per step */
  int64_t gathered_peak;  /* gathered weights, the largest device's */
  /* the timed steps (every step after the first), from the allocator's
   * counters and getrusage over the process's threads */
  double sys_calls;       /* system allocations and frees per step */
  double minflt;          /* minor page faults per step */
  double user_s, sys_s;   /* CPU time in the timed steps */
  gt_mem_arena_stats arena; /* device 0's */
} bench_result;

static double tv_s(struct timeval t) { return (double)t.tv_sec + 1e-6 * (double)t.tv_usec; }

/* Times `steps` trainer steps (the same step `gemtrain train` runs) after
 * one warm-up step; forward+backward is the step less its optimizer time. */
static int bench_config(gt_config *cfg, int steps, bench_result *br) {
  gt_err err;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data data;
  gt_plan plan;
  gt_trainer *tr = NULL;
  memset(br, 0, sizeof *br);
  if (gt_plan_compute(&plan, cfg, &err) || gt_data_open(&data, cfg, &mem, &err) ||
      gt_trainer_create(&tr, cfg, NULL, &err)) {
    fprintf(stderr, "gemtrain bench: %s\n", err.msg);
    return 1;
  }
  br->planned = plan.peak_total;
  gt_plan_free(&plan);
  gt_model *m = gt_trainer_device_model(tr, 0);
  double *fb = malloc(sizeof(double) * steps), *full = malloc(sizeof(double) * steps);
  struct rusage ru0 = {0}, ru1;
  int64_t sys0 = 0;
  for (int s = -1; s < steps; s++) {
    if (s == 0) {
      getrusage(RUSAGE_SELF, &ru0);
      sys0 = gt_mem_sys_allocs() + gt_mem_sys_frees();
    }
    if (s == 0) {
      memset(&br->prof, 0, sizeof br->prof);
      m->prof = &br->prof;
      m->offload_seconds = 0;
      m->offload_bytes = 0;
    }
    double optim0 = br->prof.seconds[GT_PROF_OPTIM];
    gt_step_metrics sm;
    if (gt_trainer_step_data(tr, &data, &sm, &err)) {
      fprintf(stderr, "gemtrain bench: %s\n", err.msg);
      return 1;
    }
    if (s >= 0) {
      full[s] = sm.seconds;
      fb[s] = sm.seconds - (br->prof.seconds[GT_PROF_OPTIM] - optim0);
      br->total_s += sm.seconds;
    }
  }
  getrusage(RUSAGE_SELF, &ru1);
  br->sys_calls = (double)(gt_mem_sys_allocs() + gt_mem_sys_frees() - sys0) / steps;
  br->minflt = (double)(ru1.ru_minflt - ru0.ru_minflt) / steps;
  br->user_s = tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime);
  br->sys_s = tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime);
  gt_mem_arena_get_stats(gt_fsdp_device_mem(gt_trainer_fsdp(tr), 0), &br->arena);
  br->fb_s = gt_bench_median(fb, steps);
  br->step_s = gt_bench_median(full, steps);
  br->peak = gt_trainer_peak_bytes(tr);
  br->offload_s = m->offload_seconds / steps;
  br->offload_bytes = m->offload_bytes / steps;
  gt_fsdp *f = gt_trainer_fsdp(tr);
  br->comm_bytes = gt_fsdp_last_comm_bytes(f);
  for (int d = 0; d < gt_fsdp_devices(f); d++) {
    int64_t g = gt_mem_peak(gt_fsdp_device_mem(f, d), GT_MEM_GATHERED);
    if (g > br->gathered_peak) br->gathered_peak = g;
  }
  m->prof = NULL;
  free(fb);
  free(full);
  gt_trainer_destroy(tr);
  gt_data_close(&data);
  return 0;
}

int gt_bench_step_seconds(gt_config *cfg, int steps, double *step_s) {
  bench_result br;
  if (bench_config(cfg, steps, &br)) return 1;
  *step_s = br.step_s;
  return 0;
}

static const char *remat_policies[] = {"none", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
                                       "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj",
                                       "save_out_proj", "qkv_proj_offloaded", "minimal_offloaded", "full"};

static int bench_remat(int argc, char **argv, int steps) {
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "synthetic");
  int threads = gt_threads_configure(&cfg);
  printf("remat benchmark: %s, %lld layers, batch %lld x %lld, %d threads, median of %d steps\n\n",
         cfg.model_name, cfg.base_num_decoder_layers, gt_config_global_batch(&cfg), cfg.max_target_length, threads,
         steps);
  printf("| remat_policy | scope | planned peak MiB | measured peak MiB | step s | vs none | host copies MiB/step, s |\n");
  printf("|---|---|---|---|---|---|---|\n");
  double base = 0;
  int npol = (int)(sizeof remat_policies / sizeof remat_policies[0]);
  for (int i = 0; i < npol; i++)
    for (int sc = 0; sc < 2; sc++) {
      if (i == 0 && sc == 1) continue; /* none has no boundary */
      gt_config c = cfg;
      snprintf(c.remat_policy, sizeof c.remat_policy, "%s", remat_policies[i]);
      snprintf(c.remat_scope, sizeof c.remat_scope, "%s", sc ? "block" : "layer");
      gt_err e;
      if (gt_config_validate(&c, &e)) {
        fprintf(stderr, "gemtrain bench: %s\n", e.msg);
        return 2;
      }
      bench_result br;
      if (bench_config(&c, steps, &br)) return 1;
      if (i == 0) base = br.step_s;
      char host[64] = "-";
      if (br.offload_bytes) snprintf(host, sizeof host, "%.1f, %.3f", (double)br.offload_bytes / 1048576.0, br.offload_s);
      printf("| %s | %s | %.1f | %.1f | %.3f | %.2fx | %s |\n", c.remat_policy, c.remat_scope,
             (double)br.planned / 1048576.0, (double)br.peak / 1048576.0, br.step_s, br.step_s / base, host);
      fflush(stdout);
    }
  gt_flops fl = gt_flops_per_step_per_device(&cfg);
  printf("\nremat_policy=full computes every layer's forward twice: %.4f more TFLOPs on a step of %.4f (MaxText "
         "count), so at the same GFLOP/s it takes %.2fx the time of none\n",
         fl.layers_forward_tflops, fl.total_tflops, 1 + fl.layers_forward_tflops / fl.total_tflops);
  return 0;
}

static int bench_devices(int argc, char **argv, int steps) {
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "synthetic");
  long long gb = gt_config_global_batch(&cfg);
  double tok = (double)gb * cfg.max_target_length * (double)cfg.gradient_accumulation_steps; /* a step's micro-batches */
  printf("devices benchmark: %s, %lld layers, global batch %lld x %lld, median of %d steps\n\n", cfg.model_name,
         cfg.base_num_decoder_layers, gb, cfg.max_target_length, steps);
  printf("| setup | tokens/s | vs 1 device, 1 thread | sent per device per step | gathered weights peak |\n");
  printf("|---|---|---|---|---|\n");
  double base = 0;
  struct { int dev, threads; const char *scope; int prefetch; } runs[] = {
      {1, 1, "layer", 1}, {1, 2, "layer", 1}, {2, 1, "layer", 1}, {2, 1, "layer", 0}, {2, 1, "block", 0}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    gt_config c = cfg;
    c.num_devices = runs[i].dev;
    c.per_device_batch_size = (double)gb / runs[i].dev;
    c.threads_per_device = runs[i].threads;
    c.prefetch = runs[i].prefetch;
    snprintf(c.remat_scope, sizeof c.remat_scope, "%s", runs[i].scope);
    gt_err e;
    if (gt_config_validate(&c, &e)) {
      fprintf(stderr, "gemtrain bench: %s\n", e.msg);
      return 2;
    }
    gt_threads_configure(&c);
    bench_result br;
    if (bench_config(&c, steps, &br)) return 1;
    double st = br.step_s;
    int64_t comm = br.comm_bytes, gathered = br.gathered_peak;
    if (i == 0) base = st;
    char desc[128];
    snprintf(desc, sizeof desc, "%d device%s x %d BLAS/OpenMP thread%s%s%s", runs[i].dev, runs[i].dev > 1 ? "s" : "",
             runs[i].threads, runs[i].threads > 1 ? "s" : "", runs[i].dev > 1 ? (runs[i].prefetch ? ", prefetch" : ", no prefetch") : "",
             runs[i].dev > 1 ? (strcmp(runs[i].scope, "block") ? ", layer scope" : ", block scope") : "");
    printf("| %s | %.1f | %.2fx | %s%.1f MiB | %s%.2f MiB |\n", desc, tok / st, base / st, "", (double)comm / 1048576.0,
           "", (double)gathered / 1048576.0);
    fflush(stdout);
  }
  return 0;
}

/* The value of a count option (--steps, --mib, --reps): a whole integer in
 * lo .. hi, else a message naming the option and the value, and 0. */
static int count_arg(const char *opt, const char *v, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || *end || errno || x < lo || x > hi) {
    if (hi == INT_MAX)
      fprintf(stderr, "gemtrain bench: option '%s' = '%s'; expected an integer >= %d\n", opt, v, lo);
    else
      fprintf(stderr, "gemtrain bench: option '%s' = '%s'; expected an integer %d .. %d\n", opt, v, lo, hi);
    return 0;
  }
  *out = (int)x;
  return 1;
}

int gt_cmd_bench(int argc, char **argv) {
  int steps = 5, steps_given = 0;
  int first = 0, remat = 0, devices = 0, ckpt = 0, mpi = 0, gemm = 0, attn = 0, mib = 64, reps = 5;
  if (argc > 0 && !strcmp(argv[0], "remat")) remat = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "devices")) devices = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "checkpoint")) ckpt = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "mpi")) mpi = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "gemm")) gemm = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "attention")) attn = 1, first = 1;
  if (argc > 0 && !strcmp(argv[0], "moe")) return gt_bench_moe(argc - 1, argv + 1);
  while (first < argc && argv[first][0] == '-' && argv[first][1]) {
    if (!strcmp(argv[first], "--steps") && first + 1 < argc) {
      if (!count_arg("--steps", argv[first + 1], 1, INT_MAX, &steps)) return 2;
      steps_given = 1;
      first += 2;
    } else if (mpi && !strcmp(argv[first], "--mib") && first + 1 < argc) {
      /* n floats of a MiB each must fit the collectives' int64 and MPI's int count */
      if (!count_arg("--mib", argv[first + 1], 1, 8191, &mib)) return 2;
      first += 2;
    } else if (mpi && !strcmp(argv[first], "--reps") && first + 1 < argc) {
      /* gt_dist_bench_allreduce times at most 64 calls */
      if (!count_arg("--reps", argv[first + 1], 1, 64, &reps)) return 2;
      first += 2;
    } else {
      fprintf(stderr, "gemtrain bench: unknown option '%s'\n", argv[first]);
      return 2;
    }
  }
  if (remat) return bench_remat(argc - first, argv + first, steps);
  if (devices) return bench_devices(argc - first, argv + first, steps);
  /* a checkpoint's write and load are slow: 3 of each unless asked */
  if (ckpt) return gt_bench_checkpoint(argc - first, argv + first, steps_given ? steps : 3);
  if (mpi) return gt_bench_mpi(argc - first, argv + first, steps, mib, reps);
  if (gemm) return gt_bench_gemm(argc - first, argv + first);
  if (attn) return gt_bench_attention(argc - first, argv + first);
  gt_config cfg;
  int rc = gt_cli_load_config(argc - first, argv + first, &cfg);
  if (rc) return rc;
  snprintf(cfg.dataset_type, sizeof cfg.dataset_type, "synthetic");
  int threads = gt_threads_configure(&cfg);
  int B = (int)gt_config_global_batch(&cfg), T = (int)cfg.max_target_length;
  /* a step runs gradient_accumulation_steps micro-batches of B x T */
  const long long G = cfg.gradient_accumulation_steps;
  char ga[64] = "";
  if (G > 1) snprintf(ga, sizeof ga, " x %lld micro-batches", G);
  /* every rank runs the step (the global batch across all of them); rank 0 prints */
  const long long ranks = gt_config_num_ranks(&cfg), devs = cfg.num_devices, all_devs = gt_config_total_devices(&cfg);
  const int me = gt_dist_rank();
  char how[160];
  if (all_devs == 1)
    snprintf(how, sizeof how, "%d thread%s", threads, threads > 1 ? "s" : "");
  else if (ranks == 1)
    snprintf(how, sizeof how, "%lld devices x %d thread%s = %lld threads", devs, threads, threads > 1 ? "s" : "",
             devs * threads);
  else
    snprintf(how, sizeof how, "%lld ranks x %lld device%s x %d thread%s = %lld threads (%lld in each rank)", ranks, devs,
             devs > 1 ? "s" : "", threads, threads > 1 ? "s" : "", ranks * devs * threads, devs * threads);
  if (me == 0) {
    printf("bench: %s d=%lld L=%lld H=%lld K=%lld hd=%lld F=%lld V=%lld W=%lld, batch %d x %d%s, remat %s/%s, %s\n",
           cfg.model_name, cfg.base_emb_dim, cfg.base_num_decoder_layers, cfg.base_num_query_heads,
           cfg.base_num_kv_heads, cfg.head_dim, cfg.base_mlp_dim, cfg.vocab_size, cfg.sliding_window_size, B, T, ga,
           cfg.remat_policy, cfg.remat_scope, how);
    gt_cli_bf16_note(&cfg, stdout);
  }
  bench_result br;
  if (bench_config(&cfg, steps, &br)) return 1;
  if (me != 0) return 0;
  double tok = (double)B * T * (double)G;
  /* the whole step's FLOPs, every device of every rank, as tok is the
   * global batch's tokens */
  gt_flops fl = gt_flops_per_step_per_device(&cfg);
  const double step_tf = fl.total_tflops * (double)all_devs, remat_tf = fl.layers_forward_tflops * (double)all_devs;
  char per[96] = "";
  if (all_devs > 1)
    snprintf(per, sizeof per, " over all %lld devices, %.1f per device", all_devs, step_tf * 1e3 / br.step_s / all_devs);
  printf("forward+backward: %.1f tokens/s (median %.3f s of %d steps)\n", tok / br.fb_s, br.fb_s, steps);
  printf("train step (with clipping and AdamW): %.1f tokens/s, %.1f GFLOP/s%s (MaxText count %.4f TFLOPs/step)\n",
         tok / br.step_s, step_tf * 1e3 / br.step_s, per, step_tf);
  if (!strcmp(cfg.remat_policy, "full"))
    printf("remat_policy=full: the backward computes the layers' forward again, %.4f more TFLOPs (not in the count "
           "above): at the same GFLOP/s a step takes %.2fx the time of remat_policy=none\n",
           remat_tf, 1 + fl.layers_forward_tflops / fl.total_tflops);
  printf("time shares:");
  double acc = 0;
  for (int c = 0; c < GT_PROF_NCAT; c++) {
    printf(" %s %.1f%%,", gt_prof_cat_name((gt_prof_cat)c), 100 * br.prof.seconds[c] / br.total_s);
    acc += br.prof.seconds[c];
  }
  printf(" other (allocation, copies, residual adds) %.1f%%\n", 100 * (br.total_s - acc) / br.total_s);
  printf("peak memory: %.1f MiB measured, %.1f MiB planned\n", (double)br.peak / 1048576.0,
         (double)br.planned / 1048576.0);
  /* docs/memory-plan.md: a step after the first allocates nothing and
   * faults no page when the arena serves it */
  printf("steps after the first: %.1f system allocations and frees per step, %.0f minor page faults per step, "
         "system time %.2f%% of user time",
         br.sys_calls, br.minflt, br.user_s > 0 ? 100 * br.sys_s / br.user_s : 0.0);
  if (br.arena.state == 2)
    printf("; step arena %.1f MiB (live peak %.1f MiB), %lld of %d steps served\n", (double)br.arena.bytes / 1048576.0,
           (double)br.arena.live_peak / 1048576.0, (long long)br.arena.steps_served, steps);
  else
    printf("; %s\n", gt_mem_arena_default() ? "step arena not in use (a step kept a block)" : "step arena off (heap)");
  return 0;
}
