#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* gemtrain bench attention: the attention kernels' forward and backward
 * (kernels/attention.c) on the attention shapes of the models
 * tools/bench_perf.sh measures, float32 and bf16, 1 and 2 threads, in GFLOP/s next to the FMA
 * and vdpbf16ps peaks measured by the same run. The FLOPs are MaxText's
 * count (the exact band of a sliding window, half of T^2 for causal global
 * layers; backward twice the forward), so a share of the peak here is the
 * share a step's attention time gets credited with. The kernel does a
 * little more: the 16-wide column vectors on the band's edges in float32
 * and in bf16's widened mode, whole 64 x 64 tiles there on the pairs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/team.h"
#include "model/flops.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "tools/cli.h"

typedef struct attn_shape {
  const char *what;
  int B, T, H, K, hd, window; /* window 0: global (causal) */
} attn_shape;

static const attn_shape shapes[] = {
    {"tiny local (d256 L6, B8 T256)", 8, 256, 4, 1, 64, 64},
    {"tiny global", 8, 256, 4, 1, 64, 0},
    {"small local (d640 L12, B4 T512)", 4, 512, 4, 1, 128, 128},
    {"small global", 4, 512, 4, 1, 128, 0},
    {"gemma3-270m (B1 T512; its window 512 covers T)", 1, 512, 4, 1, 256, 0},
};

/* MaxText's forward count for one layer */
static double fwd_flops(const attn_shape *s) { return gt_flops_attention_forward(s->B, s->T, s->H, s->hd, s->window); }

static void fill(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
  }
}

typedef struct attn_bufs {
  float *q, *k, *v, *o, *lse, *dq, *dk, *dv, *dout;
} attn_bufs;

/* median seconds of one forward (bwd 0) or backward (bwd 1): a warm-up
 * call, then at least 5 calls and until about 0.3 s have passed */
static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double time_one(const attn_bufs *b, const gt_attn_dims *d, int bwd, int threads) {
  gt_team_set_process(threads);
  double v[41];
  int n = 0;
  double spent = 0;
  for (int i = -1; n < 41 && (n < 5 || spent < 0.3); i++) {
    double t0 = wall_now();
    int rc = bwd ? gt_attention_backward(b->dq, b->dk, b->dv, b->dout, b->o, b->lse, b->q, b->k, b->v, NULL, d)
                 : gt_attention_forward(b->o, b->lse, b->q, b->k, b->v, NULL, d);
    double t = wall_now() - t0;
    if (rc) return -1;
    if (i < 0) continue;
    v[n++] = t;
    spent += t;
  }
  return gt_bench_median(v, n);
}

int gt_bench_attn_bf16_peak(int path, int kernels_path, int has_dp) {
  /* kernels/attention.c's gt__attn_bmode: vdpbf16ps itself only on the
   * pairs path of an AVX-512 copy with the instruction */
  return has_dp && kernels_path == GT__PATH_AVX512 && path == GT_BGEMM_DP;
}

int gt_bench_attention(int argc, char **argv) {
  (void)argv;
  if (argc > 0) {
    fprintf(stderr, "gemtrain bench attention: takes no arguments (see --help)\n");
    return 2;
  }
  int threads0 = gt_team_size(gt_team_current());
  double peak[2], bpeak[2] = {0, 0};
  const int fell = gt_bench_peaks("fp32 FMA", gt_fma_peak_gflops, &peak[0], &peak[1]);
  /* attention's bf16 mode follows gt_bgemm's path (kernels/attention.c's gt__attn_bmode) */
  const int path = gt__bgemm_path();
  int has_bf16 = gt_bench_attn_bf16_peak(path, gt__kernels_path(), gt__bgemm_kernel() == 2), bfell = 0;
  if (has_bf16) bfell = gt_bench_peaks("bf16 (vdpbf16ps)", gt_bf16_peak_gflops, &bpeak[0], &bpeak[1]);
  printf("attention benchmark: fp32 FMA peak measured %.1f GFLOP/s on 1 thread, %.1f on 2%s", peak[0], peak[1],
         fell ? " (2 x 1 thread: see the note)" : "");
  if (has_bf16)
    printf("; bf16 (vdpbf16ps) peak %.1f on 1 thread, %.1f on 2%s", bpeak[0], bpeak[1],
           bfell ? " (2 x 1 thread: see the note)" : "");
  if (gt__kernels_path() == GT__PATH_PORTABLE)
    printf("\nbf16 rows: float32 products (the portable copy ignores attention's bf16 mode)");
  else if (path == GT_BGEMM_DP)
    printf("\nbf16 rows: the tile products on vdpbf16ps");
  else if (path == GT_BGEMM_EMUL)
    printf("\nbf16 rows: the tile products on vdpbf16ps's float32-FMA emulation");
  else
    printf("\nbf16 rows: the widened mode (the float32 tile kernels on P, dS and dO rounded to bf16)");
  printf("%s\n", has_bf16 ? "" : "; shares are of the fp32 peak");
  printf("GFLOP/s by MaxText's count (backward = 2 x forward) and the share of the peak of the dtype's\n"
         "products; medians of repeated calls of gt_attention_forward / gt_attention_backward\n\n");
  printf("| layer | dtype | forward 1 thread | forward 2 threads | backward 1 thread | backward 2 threads |\n");
  printf("|---|---|---|---|---|---|\n");
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const attn_shape *s = &shapes[si];
    size_t nq = (size_t)s->B * s->T * s->H * s->hd, nk = (size_t)s->B * s->T * s->K * s->hd;
    attn_bufs b = {malloc(nq * 4), malloc(nk * 4), malloc(nk * 4), malloc(nq * 4),
                   malloc((size_t)s->B * s->H * s->T * 4), malloc(nq * 4), malloc(nk * 4), malloc(nk * 4),
                   malloc(nq * 4)};
    if (!b.q || !b.k || !b.v || !b.o || !b.lse || !b.dq || !b.dk || !b.dv || !b.dout) {
      fprintf(stderr, "gemtrain bench attention: out of memory for %s\n", s->what);
      return 1;
    }
    fill(b.q, nq, 1 + si), fill(b.k, nk, 2 + si), fill(b.v, nk, 3 + si), fill(b.dout, nq, 4 + si);
    /* bf16 values, as the layers give them (gt_attn_dims.bf16); float32 the same inputs */
    gt_bf16_round(b.q, (int64_t)nq), gt_bf16_round(b.k, (int64_t)nk), gt_bf16_round(b.v, (int64_t)nk);
    const double fl = fwd_flops(s);
    for (int bf = 0; bf < 2; bf++) {
      gt_attn_dims d = {s->B, s->T, s->H, s->K, s->hd, s->window, 1.0f / sqrtf((float)s->hd), bf, 0, NULL};
      const double *pk = bf && has_bf16 ? bpeak : peak;
      printf("| %s | %s |", s->what, bf ? "bf16" : "float32");
      for (int bwd = 0; bwd < 2; bwd++)
        for (int t = 1; t <= 2; t++) {
          double sec = time_one(&b, &d, bwd, t);
          if (sec <= 0) {
            printf(" - |");
            continue;
          }
          double g = (bwd ? 2 : 1) * fl / sec / 1e9;
          printf(" %.1f (%.0f%%) |", g, 100 * g / pk[t - 1]);
        }
      printf("\n");
      fflush(stdout);
    }
    free(b.q), free(b.k), free(b.v), free(b.o), free(b.lse), free(b.dq), free(b.dk), free(b.dv), free(b.dout);
  }
  gt_team_set_process(threads0);
  return 0;
}
