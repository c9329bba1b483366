#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_PROCESS_CPUTIME_ID (gcc got them through cblas.h) */
/* gemtrain bench gemm: gt_sgemm and cblas_sgemm (OpenBLAS as loaded) on the
 * products of a training step, on 1 and 2 threads, next to the machine's
 * fp32 FMA peak measured by the same run (kernels/peak.c); and gt_bgemm (bf16
 * inputs, kernels/gemm_bf16.c) on the same products on both of its AVX-512
 * paths (kernels/bf16_path.h: vdpbf16ps and the widened float32 FMAs), each
 * as a share of the same FMA peak and against gt_sgemm; and (the set
 * `quant`) the products with a stored frozen weight (kernels/quant.h):
 * gt_qgemm and gt_qbgemm with a bf16, int8 and nf4 W beside gt_sgemm and
 * gt_bgemm on the float W, forward and input gradient of each projection,
 * then the rates of storing a matrix and reading it back by rows.
 * Timing lives here, never in tests. */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/team.h"
#include "cli.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/gemm_fixed.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* One model's dimensions: the products of its step come from these. */
typedef struct bench_model {
  const char *key, *desc;
  int64_t M, d, F, H, K, hd, V;
  int64_t L; /* decoder layers: the step's count of each layer product */
} bench_model;

static const bench_model models[] = {
    {"tiny", "tiny: d256 F1024 H4 K1 hd64 V4096, B8 T256", 2048, 256, 1024, 4, 1, 64, 4096, 6},
    {"small", "small: d640 F2048 H4 K1 hd128 V32768, B4 T512", 2048, 640, 2048, 4, 1, 128, 32768, 12},
    {"270m", "gemma3-270m: d640 F2048 H4 K1 hd256 V262144, B1 T512", 512, 640, 2048, 4, 1, 256, 262144, 18},
};

/* beta: 0 where the step writes C (every forward product, some dX), 1
 * where it adds into C (dW, the other dX): a written C is never read,
 * an added one is, and for the heads' C (512 MB at gemma3-270m's 512 x
 * 262144) that read is about 4% of the product's time (92.2 against 96.3
 * GFLOP/s on 1 thread, one harness run) */
typedef struct shape {
  const char *what;
  int ta, tb;
  int64_t M, N, K;
  float beta;
} shape;

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* `threads` threads for both libraries: the process team (our kernels) and
 * OpenBLAS's own OpenMP pool, which the library otherwise keeps at one
 * thread (kernels/gemm_fixed.c) and this command sets back to one at the
 * end. */
static void use_threads(int threads) {
  gt_team_set_process(threads);
  openblas_set_num_threads(threads);
}

typedef double (*gemm_fn)(const shape *s, const float *A, const float *B, float *C);

static double run_ours(const shape *s, const float *A, const float *B, float *C) {
  int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  double t0 = wall_now();
  gt_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
  return wall_now() - t0;
}

static double run_bf16(const shape *s, const float *A, const float *B, float *C) {
  int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  double t0 = wall_now();
  gt_bgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
  return wall_now() - t0;
}

/* gt_bgemm on one path (kernels/bf16_path.h), whichever this CPU chose:
 * the benchmark's use of the tests' switch, so both run side by side */
static double run_path(int path, const shape *s, const float *A, const float *B, float *C) {
  gt__bgemm_force_path(path);
  double t = run_bf16(s, A, B, C);
  gt__bgemm_force_path(-1);
  return t;
}
static double run_pairs(const shape *s, const float *A, const float *B, float *C) {
  return run_path(GT_BGEMM_DP, s, A, B, C);
}
static double run_wide(const shape *s, const float *A, const float *B, float *C) {
  return run_path(GT_BGEMM_WIDE, s, A, B, C);
}
static double run_amx(const shape *s, const float *A, const float *B, float *C) {
  return run_path(GT_BGEMM_AMX, s, A, B, C);
}

/* 1 where AMX-BF16 tiles are usable: the tables gain the AMX path's columns */
static int with_amx;
/* a section's title row, as wide as the table */
static void section_row(const char *title) {
  printf("| **%s** | | | | | | | | | | | |%s\n", title, with_amx ? " | | |" : "");
}

static double run_blas(const shape *s, const float *A, const float *B, float *C) {
  int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  double t0 = wall_now();
  cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (blasint)s->M,
              (blasint)s->N, (blasint)s->K, 1.0f, A, (blasint)lda, B, (blasint)ldb, s->beta, C, (blasint)s->N);
  return wall_now() - t0;
}

/* Process CPU seconds (all threads) */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median seconds of one product: one untimed warm-up call when calls are
 * short, then calls until about `budget` seconds have passed (3 to 25 of
 * them); a call of more than 0.15 s is itself the warm-up's measurement,
 * and the median of three such calls is taken (the vocabulary heads take
 * about a second each; one call alone moved 5-10% between runs).
 * *use: the process's CPU time over threads x wall time of the timed calls:
 * about 1 when every thread had a core throughout (they spin at barriers),
 * lower when another process took one. */
static double time_median(gemm_fn f, const shape *s, const float *A, const float *B, float *C, int threads,
                          double budget, double *use) {
  use_threads(threads);
  double v[25];
  int n = 0;
  double c0 = cpu_now(), w0 = wall_now();
  double t = f(s, A, B, C);
  if (t > 0.15) {
    v[n++] = t;
    for (int i = 0; i < 2; i++) v[n++] = f(s, A, B, C);
  } else {
    double spent = 0;
    c0 = cpu_now(), w0 = wall_now();
    while (n < 25 && (n < 3 || spent < budget)) {
      v[n] = f(s, A, B, C);
      spent += v[n++];
    }
  }
  double wall = wall_now() - w0;
  *use = wall > 0 ? (cpu_now() - c0) / (wall * threads) : 1;
  return gt_bench_median(v, n);
}

static void fill(float *x, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((seed >> 40) & 0xFFFF) / 32768.0f - 1.0f;
  }
}

static double peak1, peak2, bpeak1, bpeak2;
/* the quant table's bf16 columns' peak: the vdpbf16ps one where gt_bgemm
 * runs on it (pairs), else the FMA one its arithmetic runs on (widened,
 * copies; AMX: still the FMA one, the CPU's other vector rate) */
static double qbpeak2;
static int qb_pairs, qb_amx;

static int bench_shape(const shape *s) {
  int64_t na = s->M * s->K, nb = s->K * s->N, nc = s->M * s->N;
  float *A = malloc(sizeof(float) * (size_t)na), *B = malloc(sizeof(float) * (size_t)nb),
        *C = malloc(sizeof(float) * (size_t)nc);
  if (!A || !B || !C) {
    fprintf(stderr, "gemtrain bench gemm: no memory for %lld x %lld x %lld\n", (long long)s->M, (long long)s->N,
            (long long)s->K);
    free(A), free(B), free(C);
    return 1;
  }
  fill(A, na, 1), fill(B, nb, 2), fill(C, nc, 3);
  double fl = 2.0 * (double)s->M * (double)s->N * (double)s->K / 1e9, g[10] = {0}, use[10] = {0};
  gemm_fn fns[5] = {run_ours, run_blas, run_pairs, run_wide, run_amx};
  const int ncol = with_amx ? 10 : 8;
  /* Three rounds over the columns (8, or 10 with AMX), each column's best round kept (as
   * the peaks keep their best of three): the machine may be shared, and
   * another process on the second core for a second or so used to halve
   * every 2-thread column of a row at once. A column whose best round still
   * had a thread without its core (CPU use under 90%) is marked '*'. Calls
   * of more than 0.15 s (timed three times each already): one round. */
  for (int round = 0; round < 3; round++) {
    int any_short = 0;
    for (int i = 0; i < ncol; i++) {
      double u, t = time_median(fns[i / 2], s, A, B, C, 1 + i % 2, 0.04, &u);
      if (fl / t > g[i]) g[i] = fl / t, use[i] = u;
      any_short |= t <= 0.15;
    }
    if (!any_short) break;
  }
  /* every column as a share of the FMA peak: the bf16 paths' products are
   * counted as float32 ones, 2 flops each */
  const double pk[10] = {peak1, peak2, peak1, peak2, peak1, peak2, peak1, peak2, peak1, peak2};
  printf("| %s | %lld %lld %lld | %c%c ", s->what, (long long)s->M, (long long)s->N, (long long)s->K,
         s->ta ? 'T' : 'N', s->tb ? 'T' : 'N');
  for (int i = 0; i < ncol; i++) printf("| %.1f (%.0f%%)%s ", g[i], 100 * g[i] / pk[i], use[i] < 0.9 ? " *" : "");
  printf("| %.2f / %.2f | %.2f / %.2f ", g[4] / g[0], g[5] / g[1], g[6] / g[0], g[7] / g[1]);
  if (with_amx) printf("| %.2f / %.2f ", g[8] / g[0], g[9] / g[1]);
  printf("|\n");
  fflush(stdout);
  free(A), free(B), free(C);
  return 0;
}

/* The three products of a projection out[M, o] = in[M, i] . W[o, i]^T:
 * forward, the input gradient and the weight gradient. */
static int bench_proj(const char *name, int64_t M, int64_t in, int64_t out, float dx_beta) {
  char w[3][64];
  snprintf(w[0], sizeof w[0], "%s fwd X.W^T", name);
  snprintf(w[1], sizeof w[1], "%s dX = dY.W", name);
  snprintf(w[2], sizeof w[2], "%s dW = dY^T.X", name);
  shape sh[3] = {{w[0], 0, 1, M, out, in, 0.0f}, {w[1], 0, 0, M, in, out, dx_beta}, {w[2], 1, 0, out, in, M, 1.0f}};
  for (int i = 0; i < 3; i++)
    if (bench_shape(&sh[i])) return 1;
  return 0;
}

static int bench_model_products(const bench_model *m) {
  section_row(m->desc);
  int64_t qd = m->H * m->hd, kd = m->K * m->hd;
  /* dX's beta as src/model/layer.c calls it: q's, o's, down's and the
   * head's write, k's, v's and up's add onto q's and gate's */
  if (bench_proj("q", m->M, m->d, qd, 0.0f) || bench_proj("k, v", m->M, m->d, kd, 1.0f) ||
      bench_proj("o", m->M, qd, m->d, 0.0f) || bench_proj("gate, up", m->M, m->d, m->F, 1.0f) ||
      bench_proj("down", m->M, m->F, m->d, 0.0f) || bench_proj("head", m->M, m->d, m->V, 0.0f))
    return 1;
  return 0;
}

/* A 64 x 64 attention tile (the shapes of kernels/attention.c's products) and
 * one decoding token's projections (M = 1). */
static int bench_small_products(void) {
  section_row("attention tiles (64 x 64, hd 128) and decoding (M = 1, 270m)");
  shape sh[] = {{"tile S = Q.K^T", 0, 1, 64, 64, 128, 0.0f},   {"tile O += P.V", 0, 0, 64, 128, 64, 1.0f},
                {"tile dV += P^T.dO", 1, 0, 64, 128, 64, 1.0f}, {"decode gate", 0, 1, 1, 2048, 640, 0.0f},
                {"decode down", 0, 1, 1, 640, 2048, 0.0f},      {"decode head", 0, 1, 1, 262144, 640, 0.0f}};
  for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
    if (bench_shape(&sh[i])) return 1;
  return 0;
}

/* ---- the bf16 paths by CPU time (the set bf16-cpu) ----
 * gt_sgemm, gt_bgemm widened and gt_bgemm pairs on the 12-layer model's
 * products, 1 thread, each call timed by the thread's CPU clock
 * (CLOCK_THREAD_CPUTIME_ID), the three alternated, the best of 7 (3 for
 * calls of 20 GFLOP and more): time the thread spent off its core does
 * not count, so the ratios hold on a shared machine where wall-clock
 * columns do not (another process still shares the caches). */
static double thread_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_bf16_cpu(const bench_model *m) {
  const int64_t qd = m->H * m->hd, kd = m->K * m->hd;
  const struct {
    const char *name;
    int64_t in, out;
  } pr[] = {{"q", m->d, qd}, {"k, v", m->d, kd}, {"o", qd, m->d}, {"gate, up", m->d, m->F}, {"down", m->F, m->d},
            {"head", m->d, m->V}};
  const int64_t maxio = m->V > m->F ? m->V : m->F;
  float *A = malloc(sizeof(float) * (size_t)(m->M * maxio)), *B = malloc(sizeof(float) * (size_t)(maxio * m->d)),
        *C = malloc(sizeof(float) * (size_t)(m->M * maxio));
  if (!A || !B || !C) {
    free(A), free(B), free(C);
    fprintf(stderr, "gemtrain bench gemm: no memory for bf16-cpu\n");
    return 1;
  }
  fill(A, m->M * maxio, 1), fill(B, maxio * m->d, 2), fill(C, m->M * maxio, 3);
  use_threads(1);
  printf("\nbf16 paths by thread CPU time, 1 thread, %s: GFLOP/s per CPU second, best of 7 alternated calls (3 for\n"
         "20 GFLOP and more); widened/f32 and pairs/f32 = their rate over gt_sgemm's\n\n",
         m->desc);
  printf("| product | M N K | op(A) op(B) | gt_sgemm | gt_bgemm widened | gt_bgemm pairs | widened/f32 | pairs/f32 |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  double lo = 1e9, hi = 0;
  for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++) {
    const shape sh[3] = {{"fwd X.W^T", 0, 1, m->M, pr[i].out, pr[i].in, 0.0f},
                         {"dX = dY.W", 0, 0, m->M, pr[i].in, pr[i].out, 0.0f},
                         {"dW = dY^T.X", 1, 0, pr[i].out, pr[i].in, m->M, 1.0f}};
    for (int j = 0; j < 3; j++) {
      const shape *x = &sh[j];
      const double fl = 2.0 * (double)x->M * (double)x->N * (double)x->K / 1e9;
      double best[3] = {0, 0, 0};
      for (int r = 0; r < (fl >= 20 ? 3 : 7); r++)
        for (int p = 0; p < 3; p++) {
          const double t0 = thread_now();
          if (p == 0) run_ours(x, A, B, C);
          else run_path(p == 1 ? GT_BGEMM_WIDE : GT_BGEMM_DP, x, A, B, C);
          const double t = thread_now() - t0;
          if (t > 0 && fl / t > best[p]) best[p] = fl / t;
        }
      const double w = best[0] > 0 ? best[1] / best[0] : 0;
      lo = w < lo ? w : lo, hi = w > hi ? w : hi;
      printf("| %s %s | %lld %lld %lld | %c%c | %.1f | %.1f | %.1f | %.2f | %.2f |\n", pr[i].name, x->what,
             (long long)x->M, (long long)x->N, (long long)x->K, x->ta ? 'T' : 'N', x->tb ? 'T' : 'N', best[0],
             best[1], best[2], w, best[0] > 0 ? best[2] / best[0] : 0);
      fflush(stdout);
    }
  }
  printf("\nwidened/f32 over these products: %.2f to %.2f\n", lo, hi);
  free(A), free(B), free(C);
  return 0;
}

/* ---- float32 products by CPU time (the set f32-cpu) ----
 * gt_sgemm on every product of a model's step, 1 thread, each call timed by
 * the thread's CPU clock, the best of 7 (3 for calls of 20 GFLOP and more),
 * as a share of the FMA peak of the moment (the best of many short wall-
 * clock runs: one of 5 ms is rarely interrupted). Then the step's products
 * together, each weighted by how often a step runs it (per layer, k and v
 * twice, gate and up twice; the head once): their FLOPs over their summed
 * times. Time off the core does not count, so these figures hold on a
 * shared machine where the wall-clock tables do not (another process still
 * shares the caches and can only lower them). */
static double cpu_peak1, cpu_kernel1;

static int bench_f32_cpu(const bench_model *m) {
  const int64_t qd = m->H * m->hd, kd = m->K * m->hd;
  const struct {
    const char *name;
    int64_t in, out, count;
    float dx_beta;
  } pr[] = {{"q", m->d, qd, m->L, 0.0f},         {"k, v", m->d, kd, 2 * m->L, 1.0f},
            {"o", qd, m->d, m->L, 0.0f},         {"gate, up", m->d, m->F, 2 * m->L, 1.0f},
            {"down", m->F, m->d, m->L, 0.0f},    {"head", m->d, m->V, 1, 0.0f}};
  /* C is [M, out] or, for a weight gradient, [out, in]: the head's
   * [V, d] is larger than [M, V] where M < d */
  const int64_t maxio = m->V > m->F ? m->V : m->F, mc = m->M > m->d ? m->M : m->d;
  float *A = malloc(sizeof(float) * (size_t)(m->M * maxio)), *B = malloc(sizeof(float) * (size_t)(maxio * m->d)),
        *C = malloc(sizeof(float) * (size_t)(mc * maxio));
  if (!A || !B || !C) {
    free(A), free(B), free(C);
    fprintf(stderr, "gemtrain bench gemm: no memory for f32-cpu\n");
    return 1;
  }
  fill(A, m->M * maxio, 1), fill(B, maxio * m->d, 2), fill(C, mc * maxio, 3);
  use_threads(1);
  if (cpu_peak1 <= 0)
    for (int r = 0; r < 20; r++) {
      const double g = gt_fma_peak_gflops(1, 0.005);
      cpu_peak1 = g > cpu_peak1 ? g : cpu_peak1;
      const double k = gt__sgemm_kernel_gflops(0.005);
      cpu_kernel1 = k > cpu_kernel1 ? k : cpu_kernel1;
    }
  printf("\nfloat32 products by thread CPU time, 1 thread, %s: GFLOP/s per CPU second, best of 7 calls\n"
         "(3 for 20 GFLOP and more), and the share of the FMA peak %.1f GFLOP/s (best of 20 runs of 5 ms); per\n"
         "step: how often a step runs the product, its share of the step's product FLOPs and of their time\n",
         m->desc, cpu_peak1);
  if (cpu_kernel1 > 0)
    printf("gt_sgemm's micro-kernel alone (its panels in L1, measured as the peak): %.1f GFLOP/s, %.1f%% of the\n"
           "peak, the ceiling of every product below\n",
           cpu_kernel1, 100 * cpu_kernel1 / cpu_peak1);
  printf("\n");
  printf("| product | M N K | op(A) op(B) | beta | gt_sgemm GFLOP/s | share of peak | per step | FLOPs share | time share |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  double fl_tot = 0, t_tot = 0, fls[18], ts[18], rate[18];
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < sizeof pr / sizeof pr[0]; i++) {
      const shape sh[3] = {{"fwd X.W^T", 0, 1, m->M, pr[i].out, pr[i].in, 0.0f},
                           {"dX = dY.W", 0, 0, m->M, pr[i].in, pr[i].out, pr[i].dx_beta},
                           {"dW = dY^T.X", 1, 0, pr[i].out, pr[i].in, m->M, 1.0f}};
      for (int j = 0; j < 3; j++) {
        const shape *x = &sh[j];
        const int id = (int)i * 3 + j;
        const double fl = 2.0 * (double)x->M * (double)x->N * (double)x->K / 1e9;
        if (pass == 0) {
          double best = 0;
          for (int r = 0; r < (fl >= 20 ? 3 : 7); r++) {
            const double t0 = thread_now();
            run_ours(x, A, B, C);
            const double t = thread_now() - t0;
            if (t > 0 && fl / t > best) best = fl / t;
          }
          rate[id] = best;
          fls[id] = fl * (double)pr[i].count;
          ts[id] = best > 0 ? fls[id] / best : 0;
          fl_tot += fls[id], t_tot += ts[id];
          continue;
        }
        printf("| %s %s | %lld %lld %lld | %c%c | %g | %.1f | %.1f%% | %lld | %.1f%% | %.1f%% |\n", pr[i].name, x->what,
               (long long)x->M, (long long)x->N, (long long)x->K, x->ta ? 'T' : 'N', x->tb ? 'T' : 'N',
               (double)x->beta, rate[id], 100 * rate[id] / cpu_peak1, (long long)pr[i].count, 100 * fls[id] / fl_tot,
               100 * ts[id] / t_tot);
      }
    }
  const double all = t_tot > 0 ? fl_tot / t_tot : 0;
  printf("\nthe step's products together (%.1f GFLOP): %.1f GFLOP/s per CPU second, %.1f%% of the peak", fl_tot, all,
         100 * all / cpu_peak1);
  if (cpu_kernel1 > 0) printf(", %.1f%% of the\nmicro-kernel alone", 100 * all / cpu_kernel1);
  printf("\n");
  fflush(stdout);
  free(A), free(B), free(C);
  return 0;
}

/* ---- stored (quantized) weights ---- */

/* the stored W the gt_qgemm / gt_qbgemm columns multiply by (B unused) */
static const gt_qweight *g_qw;

static double run_q(const shape *s, const float *A, const float *B, float *C) {
  (void)B;
  double t0 = wall_now();
  gt_qgemm(s->tb, s->M, s->N, s->K, 1.0f, A, s->K, g_qw, s->beta, C, s->N);
  return wall_now() - t0;
}

static double run_qb(const shape *s, const float *A, const float *B, float *C) {
  (void)B;
  double t0 = wall_now();
  gt_qbgemm(s->tb, s->M, s->N, s->K, 1.0f, A, s->K, g_qw, s->beta, C, s->N);
  return wall_now() - t0;
}

/* One product with W [rows, cols] float (the gt_sgemm / gt_bgemm columns)
 * and stored as bf16, int8 and nf4, on 2 threads, best of three rounds. */
static int bench_qshape(const shape *s) {
  const int64_t wr = s->tb ? s->N : s->K, wc = s->tb ? s->K : s->N;
  float *A = malloc(sizeof(float) * (size_t)(s->M * s->K)), *W = malloc(sizeof(float) * (size_t)(wr * wc)),
        *C = malloc(sizeof(float) * (size_t)(s->M * s->N));
  void *q[3] = {NULL, NULL, NULL};
  gt_qweight qw[3];
  int ok = A && W && C;
  for (int t = 0; ok && t < 3; t++) {
    q[t] = malloc(4 * (size_t)gt_q_words((gt_qtype)(t + 1), wr, wc));
    if (!(ok = q[t] != NULL)) break;
  }
  if (!ok) {
    fprintf(stderr, "gemtrain bench gemm: no memory for %lld x %lld x %lld\n", (long long)s->M, (long long)s->N,
            (long long)s->K);
    free(A), free(W), free(C), free(q[0]), free(q[1]), free(q[2]);
    return 1;
  }
  fill(A, s->M * s->K, 1), fill(W, wr * wc, 2), fill(C, s->M * s->N, 3);
  for (int t = 0; t < 3; t++) {
    gt_quantize((gt_qtype)(t + 1), W, wr, wc, q[t]);
    qw[t] = gt_qweight_at((gt_qtype)(t + 1), q[t], wr, wc);
  }
  /* columns: gt_sgemm, gt_qgemm bf16/int8/nf4, gt_bgemm, gt_qbgemm bf16/int8/nf4 */
  const double fl = 2.0 * (double)s->M * (double)s->N * (double)s->K / 1e9;
  double g[8] = {0}, use[8] = {0};
  for (int round = 0; round < 3; round++) {
    int any_short = 0;
    for (int i = 0; i < 8; i++) {
      gemm_fn f = i == 0 ? run_ours : i == 4 ? run_bf16 : i < 4 ? run_q : run_qb;
      g_qw = i % 4 ? &qw[i % 4 - 1] : NULL;
      double u, t = time_median(f, s, A, W, C, 2, 0.04, &u);
      if (fl / t > g[i]) g[i] = fl / t, use[i] = u;
      any_short |= t <= 0.15;
    }
    if (!any_short) break;
  }
  printf("| %s | %lld %lld %lld ", s->what, (long long)s->M, (long long)s->N, (long long)s->K);
  for (int i = 0; i < 8; i++)
    printf("| %.1f (%.0f%%)%s ", g[i], 100 * g[i] / (i < 4 ? peak2 : qbpeak2), use[i] < 0.9 ? " *" : "");
  printf("| %.2f / %.2f |\n", g[3] / g[1], g[7] / g[5]);
  fflush(stdout);
  free(A), free(W), free(C), free(q[0]), free(q[1]), free(q[2]);
  return 0;
}

/* a projection out[M, o] = in[M, i] . W[o, i]^T: forward and dX */
static int bench_qproj(const char *name, int64_t M, int64_t in, int64_t out, float dx_beta) {
  char w[2][64];
  snprintf(w[0], sizeof w[0], "%s fwd X.W^T", name);
  snprintf(w[1], sizeof w[1], "%s dX = dY.W", name);
  shape sh[2] = {{w[0], 0, 1, M, out, in, 0.0f}, {w[1], 0, 0, M, in, out, dx_beta}};
  for (int i = 0; i < 2; i++)
    if (bench_qshape(&sh[i])) return 1;
  return 0;
}

static int bench_quant(const bench_model *m) {
  printf("| **%s** | | | | | | | | | | |\n", m->desc);
  int64_t qd = m->H * m->hd, kd = m->K * m->hd;
  if (bench_qproj("q", m->M, m->d, qd, 0.0f) || bench_qproj("k, v", m->M, m->d, kd, 1.0f) ||
      bench_qproj("o", m->M, qd, m->d, 0.0f) || bench_qproj("gate, up", m->M, m->d, m->F, 1.0f) ||
      bench_qproj("down", m->M, m->F, m->d, 0.0f) || bench_qproj("head", m->M, m->d, m->V, 0.0f))
    return 1;
  return 0;
}

/* How fast a frozen base is stored (gt_quantize: what a QLoRA run does to
 * its whole base as it starts, on 2 threads) and read back by rows
 * (gt_dequantize_rows: a stored embedding's lookups, on 1 thread), in
 * millions of elements a second, best of three. */
static int bench_quant_rates(void) {
  const int64_t rows = 8192, cols = 2048, n = rows * cols, rb = 64;
  float *W = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)(rb * cols));
  void *q = malloc(4 * (size_t)gt_q_words(GT_Q_BF16, rows, cols));
  if (!W || !out || !q) {
    fprintf(stderr, "gemtrain bench gemm: no memory for the quantization rates\n");
    free(W), free(out), free(q);
    return 1;
  }
  fill(W, n, 4);
  printf("\nStoring and reading a %lld x %lld matrix: millions of elements a second (gt_quantize on 2 threads,\n"
         "as a QLoRA run stores its base when it starts; gt_dequantize_rows on 1, %lld rows a call, as a stored\n"
         "embedding is read)\n\n| format | gt_quantize | gt_dequantize_rows |\n|---|---|---|\n",
         (long long)rows, (long long)cols, (long long)rb);
  static const char *const names[] = {"bf16", "int8", "nf4"};
  for (int t = 1; t < 4; t++) {
    double bq = 1e30, bd = 1e30;
    const gt_qweight w = gt_qweight_at((gt_qtype)t, q, rows, cols);
    for (int r = 0; r < 3; r++) {
      double t0 = wall_now();
      gt_quantize((gt_qtype)t, W, rows, cols, q);
      const double tq = wall_now() - t0;
      gt_team_set_process(1);
      t0 = wall_now();
      for (int64_t r0 = 0; r0 < rows; r0 += rb) gt_dequantize_rows(&w, r0, rb, out);
      const double td = wall_now() - t0;
      gt_team_set_process(2);
      if (tq < bq) bq = tq;
      if (td < bd) bd = td;
    }
    printf("| %s | %.0f | %.0f |\n", names[t - 1], (double)n / bq / 1e6, (double)n / bd / 1e6);
  }
  fflush(stdout);
  free(W), free(out), free(q);
  return 0;
}

static void print_quant_header(void) {
  printf("\nStored frozen weights (kernels/quant.h), 2 threads: GFLOP/s (share of the 2-thread peak: gt_sgemm and\n"
         "gt_qgemm columns of the fp32 peak, gt_bgemm and gt_qbgemm of the %s); W stored as bf16, int8 (a\n"
         "scale per row) or nf4 (an absmax per 64) and dequantized where the GEMM packs it; nf4/bf16 = the nf4\n"
         "column's rate over the bf16 one, in the float32 / bf16 GEMM\n\n",
         qb_pairs  ? "bf16 (vdpbf16ps) peak, the arithmetic gt_bgemm runs on here"
         : qb_amx  ? "fp32 peak too (gt_bgemm runs on the AMX tiles here, whose rate\n"
                     "passes it: shares above 100% are possible)"
                   : "fp32 peak too: gt_bgemm runs on float32 FMAs here, not on vdpbf16ps");
  printf("| product | M N K | gt_sgemm f32 W | gt_qgemm bf16 | gt_qgemm int8 | gt_qgemm nf4 | gt_bgemm f32 W "
         "| gt_qbgemm bf16 | gt_qbgemm int8 | gt_qbgemm nf4 | nf4/bf16 |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
}

int gt_bench_gemm(int argc, char **argv) {
  int want[6] = {argc == 0, argc == 0, argc == 0, argc == 0, argc == 0, 0}, want_cpu[3] = {0, 0, 0};
  for (int i = 0; i < argc; i++) {
    int found = 0;
    for (int j = 0; j < 3; j++)
      if (!strcmp(argv[i], models[j].key)) want[j] = found = 1;
    if (!strcmp(argv[i], "small-products")) want[3] = found = 1;
    if (!strcmp(argv[i], "quant")) want[4] = found = 1;
    if (!strcmp(argv[i], "bf16-cpu")) want[5] = found = 1;
    for (int j = 0; j < 3; j++) {
      char key[32];
      snprintf(key, sizeof key, "%s-cpu", models[j].key);
      if (!strcmp(argv[i], key)) want_cpu[j] = found = 1;
    }
    if (!found) {
      fprintf(stderr,
              "gemtrain bench gemm: unknown set '%s'; expected tiny, small, 270m, small-products, quant, bf16-cpu, tiny-cpu, small-cpu or 270m-cpu\n",
              argv[i]);
      return 2;
    }
  }
  /* quant or bf16-cpu alone: the stored-weight table of the 12-layer model
   * (small) and gemma3-270m, or the bf16 paths by CPU time, without the
   * float tables */
  const int quant_only = (want[4] || want[5] || want_cpu[0] || want_cpu[1] || want_cpu[2]) && !want[0] && !want[1] &&
                         !want[2] && !want[3];
  int threads0 = gt_team_size(gt_team_current());
  gt__blas_one_thread(); /* first, so that it does not undo use_threads later */
  const int fell = gt_bench_peaks("fp32 FMA", gt_fma_peak_gflops, &peak1, &peak2);
  printf("gemm benchmark: fp32 FMA peak measured %.1f GFLOP/s on 1 thread, %.1f on 2%s; OpenBLAS core %s\n", peak1,
         peak2, fell ? " (2 x 1 thread: see the note)" : "", openblas_get_corename());
  {
    /* what the core gives the FMAs once they need operands: the products'
     * ceiling, so a product's distance from the peak splits into the
     * kernel's and the blocking's (kernels/gemm.c) */
    double k1 = 0;
    for (int r = 0; r < 3; r++) {
      const double k = gt__sgemm_kernel_gflops(0.1);
      k1 = k > k1 ? k : k1;
    }
    if (k1 > 0)
      printf("gt_sgemm's micro-kernel alone (%s tile, its panels in L1, no packing or C traffic): %.1f GFLOP/s on\n"
             "1 thread, %.1f%% of the FMA peak: the ceiling of every gt_sgemm column below\n",
             gt__kernels_path() == GT__PATH_AVX2 ? "6 x 16" : "12 x 32", k1, peak1 > 0 ? 100 * k1 / peak1 : 0);
  }
  const int bfell = gt_bench_peaks("bf16 (vdpbf16ps)", gt_bf16_peak_gflops, &bpeak1, &bpeak2);
  {
    gt__bf16_choice ch;
    gt__bgemm_choice(&ch);
    with_amx = gt__cpu_amx_bf16();
    char how[512];
    gt_cli_bf16_how(&ch, how, sizeof how);
    printf("bf16 (vdpbf16ps) peak measured %.1f GFLOP/s on 1 thread, %.1f on 2%s (%.2fx the FMA peak)\n"
           "gt_bgemm path: %s\n",
           bpeak1, bpeak2, bfell ? " (2 x 1 thread: see the note)" : "", peak1 > 0 ? bpeak1 / peak1 : 0, how);
    qb_pairs = ch.path == GT_BGEMM_DP, qb_amx = ch.path == GT_BGEMM_AMX;
  }
  if (!quant_only)
    printf("GFLOP/s (share of the fp32 FMA peak, for every column: a bf16 product counts 2 flops as a float32 one),\n"
         "median of repeated calls, the best of three rounds; beta as the step calls them: C = A.B (beta 0) for\n"
         "forward products and the dX of q, o, gate, down and the head, C += A.B (beta 1) for the others.\n"
         "gt_bgemm pairs: vdpbf16ps (its float32-FMA emulation where the CPU lacks it); gt_bgemm widened: the\n"
         "float32 micro-kernel on operands widened from bf16 (kernels/bf16_path.h), both forced whatever this CPU\n"
         "chose; pairs/f32, widened/f32 = their rate over gt_sgemm's on 1 / 2 threads; * = a thread lacked its\n"
         "core (another process) even in the best round%s%s\n\n",
         with_amx ? ".\ngt_bgemm AMX: the AMX-BF16 tiles (kernels/gemm_amx.c), forced likewise; amx/f32 = its rate over gt_sgemm's"
                  : "",
         gt__kernels_path() == GT__PATH_AVX2
             ? ".\nThis CPU runs the AVX2 copy, which has no pairs path: the pairs columns time the widened path again"
             : "");
  if (peak1 <= 0 || peak2 <= 0) peak1 = peak2 = 1; /* no FMA: shares are meaningless */
  if (bpeak1 <= 0 || bpeak2 <= 0) bpeak1 = bpeak2 = 1; /* no AVX512_BF16: likewise */
  qbpeak2 = qb_pairs ? bpeak2 : peak2;
  if (!quant_only) printf("| product | M N K | op(A) op(B) | gt_sgemm 1 thread | gt_sgemm 2 threads | OpenBLAS 1 thread "
         "| OpenBLAS 2 threads | gt_bgemm pairs 1 thread | gt_bgemm pairs 2 threads | gt_bgemm widened 1 thread "
         "| gt_bgemm widened 2 threads |%s pairs/f32 | widened/f32 |%s\n",
         with_amx ? " gt_bgemm AMX 1 thread | gt_bgemm AMX 2 threads |" : "", with_amx ? " amx/f32 |" : "");
  if (!quant_only) printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", with_amx ? "---|---|---|" : "");
  {
    /* warm both libraries up on both thread counts first: OpenBLAS starts
     * its threads and buffers on its first call */
    shape w = {"warm-up", 0, 1, 256, 256, 256, 1.0f};
    float *x = calloc(256 * 256 * 3, sizeof(float));
    if (!x) return 1;
    for (int t = 1; t <= 2; t++) {
      use_threads(t);
      run_ours(&w, x, x + 65536, x + 131072);
      run_blas(&w, x, x + 65536, x + 131072);
      run_pairs(&w, x, x + 65536, x + 131072);
      run_wide(&w, x, x + 65536, x + 131072);
      if (with_amx) run_amx(&w, x, x + 65536, x + 131072);
    }
    free(x);
  }
  int rc = 0;
  for (int j = 0; j < 3 && !rc; j++)
    if (want[j]) rc = bench_model_products(&models[j]);
  if (!rc && want[3]) rc = bench_small_products();
  if (!rc && want[5]) rc = bench_bf16_cpu(&models[1]);
  for (int j = 0; j < 3 && !rc; j++)
    if (want_cpu[j]) rc = bench_f32_cpu(&models[j]);
  if (!rc && want[4]) {
    print_quant_header();
    for (int j = 1; j < 3 && !rc; j++) rc = bench_quant(&models[j]);
    if (!rc) rc = bench_quant_rates();
  }
  gt_team_set_process(threads0);
  openblas_set_num_threads(1);
  return rc;
}
