#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_PROCESS_CPUTIME_ID */
/* gemtrain bench moe: the routed experts' products (kernels/moe.c) as a
 * share of the FMA peak by their active FLOPs (the routed rows only), next to
 * the same projections run as one dense product over all N*k rows and a
 * dense feed-forward of equal active FLOPs (F' = k*F over the N tokens), all
 * three through the same expert loop (a dense reference is one "expert"
 * holding every row); and the whole layer's time by stage. Timing lives
 * here, never in tests. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/team.h"
#include "cli.h"
#include "kernels/kernels.h"
#include "kernels/moe.h"
#include "kernels/moe_stages.h"
#include "model/moe.h"

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double thread_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock of every timed call: on 1 thread the thread's CPU time (time
 * off its core does not count, so the figures hold on a shared machine), on
 * more the wall clock (the team's CPU use is then printed beside). */
static double (*bench_now)(void) = wall_now;

/* The 1-thread FMA peak of a quiet core: the best wall-clock rate of many
 * short runs of kernels/peak.c's loop (a few ms each, so on a shared
 * machine some run between two preemptions; the thread's CPU clock, which
 * the products are timed by, leaves preemptions out the same way). */
static double peak1_quiet(void) {
  double best = 0;
  for (int i = 0; i < 40; i++) {
    double g = gt_fma_peak_gflops(1, 0.003);
    best = g > best ? g : best;
  }
  return best;
}

static float *fill(int64_t n, uint64_t *seed, float lo, float hi) {
  float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!x) return NULL;
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = lo + (hi - lo) * (float)((*seed >> 40) & 0xFFFFFF) / 16777216.0f;
  }
  return x;
}

/* One layer's tensors, state and scratch: the MoE itself, or a dense
 * reference (E = 1, every row routed to it) sharing the gathered rows. */
typedef struct bench_layer {
  gt_moe_dims d;
  gt_moe_weights w;
  gt_moe_grads g;
  gt_moe_saved s;
  void *saved, *work;
  float *t[7], *gr[7]; /* router_proj, router_scale, pes, pre, post, gate_up, down; gradients */
  float *out, *dh;
} bench_layer;

static int layer_alloc(bench_layer *L, const gt_moe_dims *d, uint64_t seed) {
  memset(L, 0, sizeof *L);
  L->d = *d;
  const int64_t N = d->B * d->T, D = d->d, E = d->E, F = d->F;
  const int64_t n[7] = {E * D, D, E, D, D, E * 2 * F * D, E * D * F};
  /* router rows of O(1) entries spread the logits: the top-k is near
   * uniform over experts, as a trained, load-balanced router's is */
  const float lo[7] = {-1.0f, 0.8f, 0.8f, 0.8f, 0.8f, -0.05f, -0.05f}, hi[7] = {1.0f, 1.2f, 1.2f, 1.2f, 1.2f, 0.05f, 0.05f};
  for (int i = 0; i < 7; i++) {
    L->t[i] = fill(n[i], &seed, lo[i], hi[i]);
    L->gr[i] = calloc((size_t)n[i], sizeof(float));
    if (!L->t[i] || !L->gr[i]) return 1;
  }
  L->w = (gt_moe_weights){L->t[0], L->t[1], L->t[2], L->t[3], L->t[4], L->t[5], L->t[6]};
  L->g = (gt_moe_grads){L->gr[0], L->gr[1], L->gr[2], L->gr[3], L->gr[4], L->gr[5], L->gr[6]};
  L->saved = aligned_alloc(64, (gt_moe_saved_bytes(d) + 63) & ~(size_t)63);
  L->work = aligned_alloc(64, (gt_moe_work_bytes(d) + 63) & ~(size_t)63);
  L->out = calloc((size_t)(N * D), sizeof(float));
  L->dh = calloc((size_t)(N * D), sizeof(float));
  if (!L->saved || !L->work || !L->out || !L->dh) return 1;
  memset(L->saved, 0, gt_moe_saved_bytes(d));
  memset(L->work, 0, gt_moe_work_bytes(d));
  gt_moe_saved_bind(&L->s, L->saved, d);
  return 0;
}

static void layer_free(bench_layer *L) {
  for (int i = 0; i < 7; i++) free(L->t[i]), free(L->gr[i]);
  free(L->saved), free(L->work), free(L->out), free(L->dh);
}

/* A dense reference: one expert of width F holding all `rows` rows (the
 * gathered input copied from the MoE's, so the products see real values). */
static int dense_alloc(bench_layer *L, const bench_layer *moe, int F, int k, uint64_t seed) {
  gt_moe_dims d = moe->d;
  d.E = 1, d.F = F, d.k = k, d.lb_weight = 0;
  if (layer_alloc(L, &d, seed)) return 1;
  const int64_t rows = d.B * d.T * k;
  L->s.counts[0] = (int32_t)rows;
  L->s.offsets[0] = 0, L->s.offsets[1] = (int32_t)rows;
  L->s.n_rows = rows;
  gt__moe_pass p, q;
  gt__moe_pass_init(&p, &L->s, NULL, &L->w, &L->d, L->work);
  gt__moe_pass_init(&q, (gt_moe_saved *)&moe->s, NULL, &moe->w, &moe->d, moe->work);
  for (int64_t r = 0; r < rows; r++)
    memcpy(p.wk.x + r * d.d, q.wk.x + (r % moe->s.n_rows) * d.d, sizeof(float) * (size_t)d.d);
  return 0;
}

static gt__moe_pass pass_of(bench_layer *L, const float *h, const float *dout) {
  gt__moe_pass p;
  gt__moe_pass_init(&p, &L->s, h, &L->w, &L->d, L->work);
  p.dh = L->dh, p.g = &L->g, p.dout = dout, p.dlb = 1.0f;
  return p;
}

typedef struct timing {
  double wall, use; /* seconds; process CPU time / (threads * wall) */
} timing;

/* The products of one direction: one untimed call, then `reps` calls, the
 * median wall time (the ratio of CPU to wall time over them in *use). */
static timing time_products(bench_layer *L, int backward, int reps, int threads) {
  gt__moe_pass p = pass_of(L, NULL, NULL);
  gt__moe_products(&p, backward);
  double v[64];
  double c0 = cpu_now(), w0 = wall_now();
  for (int r = 0; r < reps; r++) {
    double t0 = bench_now();
    gt__moe_products(&p, backward);
    v[r] = bench_now() - t0;
  }
  double wall = wall_now() - w0;
  timing t = {gt_bench_median(v, reps), threads == 1 ? 1 : wall > 0 ? (cpu_now() - c0) / (wall * threads) : 1};
  return t;
}

/* 1 when kv is key=N with N a whole int (else 0; *bad set when the key
 * matched but its value is no integer) */
static int parse_int(const char *kv, const char *key, int *out, int *bad) {
  size_t n = strlen(key);
  if (strncmp(kv, key, n) || kv[n] != '=') return 0;
  char *end;
  errno = 0;
  long v = strtol(kv + n + 1, &end, 10);
  if (end == kv + n + 1 || *end || errno || v < INT_MIN || v > INT_MAX) *bad = 1;
  else *out = (int)v;
  return 1;
}

int gt_bench_moe(int argc, char **argv) {
  int B = 4, T = 1024, D = 512, E = 128, K = 8, F = 256, threads = 2, reps = 5, rounds = 3, bf16 = 0;
  for (int i = 0; i < argc; i++) {
    int bad = 0;
    if (!(parse_int(argv[i], "B", &B, &bad) || parse_int(argv[i], "T", &T, &bad) || parse_int(argv[i], "d", &D, &bad) ||
          parse_int(argv[i], "E", &E, &bad) || parse_int(argv[i], "k", &K, &bad) || parse_int(argv[i], "F", &F, &bad) ||
          parse_int(argv[i], "threads", &threads, &bad) || parse_int(argv[i], "reps", &reps, &bad) ||
          parse_int(argv[i], "rounds", &rounds, &bad) || parse_int(argv[i], "bf16", &bf16, &bad))) {
      fprintf(stderr, "gemtrain bench moe: unknown argument '%s'; expected B= T= d= E= k= F= threads= reps= rounds= "
                      "bf16=0|1\n", argv[i]);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "gemtrain bench moe: '%s': expected an integer\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64) { /* the timing arrays hold 64 calls */
    fprintf(stderr, "gemtrain bench moe: reps=%d; expected 1 .. 64\n", reps);
    return 2;
  }
  if (rounds < 1 || threads < 1) {
    fprintf(stderr, "gemtrain bench moe: %s=%d; expected at least 1\n", rounds < 1 ? "rounds" : "threads",
            rounds < 1 ? rounds : threads);
    return 2;
  }
  gt_moe_dims d = {B, T, D, E, K, F, 1e-6f, 0.01f, 1, 0, bf16 != 0};
  gt_err err;
  if (gt_moe_dims_check(&d, &err)) {
    fprintf(stderr, "gemtrain bench moe: %s\n", err.msg);
    return 2;
  }
  const int threads0 = gt_team_size(gt_team_current());
  double peak1, peak2;
  const int fell = gt_bench_peaks("fp32 FMA", gt_fma_peak_gflops, &peak1, &peak2);
  threads = gt_team_set_process(threads);
  double peak = threads == 1 ? peak1 : peak2;
  if (threads == 1) {
    bench_now = thread_now;
    peak = peak1_quiet();
  } else if (threads > 2) {
    /* the team's own thread count (gt_fma_peak_gflops is the best of 3) */
    peak = 0;
    for (int r = 0; r < 3; r++) {
      double g = gt_fma_peak_gflops(threads, 0.3);
      peak = g > peak ? g : peak;
    }
  }
  const int64_t N = (int64_t)B * T;

  bench_layer moe, dn, ffn;
  uint64_t seed = 12345;
  float *h = fill(N * D, &seed, -2.0f, 2.0f), *dout = fill(N * D, &seed, -1.0f, 1.0f);
  if (!h || !dout || layer_alloc(&moe, &d, 7)) {
    fprintf(stderr, "gemtrain bench moe: no memory\n");
    return 1;
  }
  /* one whole forward and backward: the routing every later call uses */
  gt_moe_forward(moe.out, &moe.s, h, &moe.w, &moe.d, moe.work);
  gt_moe_backward(moe.dh, &moe.g, dout, 1.0f, &moe.s, h, &moe.w, &moe.d, moe.work);
  const int64_t rows = moe.s.n_rows;
  int cmin = INT32_MAX, cmax = 0;
  for (int e = 0; e < E; e++) cmin = moe.s.counts[e] < cmin ? moe.s.counts[e] : cmin, cmax = moe.s.counts[e] > cmax ? moe.s.counts[e] : cmax;
  /* the backward's last stage overwrote the gathered rows: gather them
   * again, for the MoE's products and the dense references' copies */
  gt__moe_pass p0 = pass_of(&moe, h, dout);
  gt__moe_fwd_stage(&p0, GT__MOE_F_GATHER);
  if (dense_alloc(&dn, &moe, F, K, 8) || dense_alloc(&ffn, &moe, F * K, 1, 9)) {
    fprintf(stderr, "gemtrain bench moe: no memory\n");
    return 1;
  }

  printf("moe benchmark: B%d T%d (N = %lld tokens) d%d E%d top-%d F%d%s, %d thread%s; rows per expert %d..%d "
         "(mean %.1f)\n",
         B, T, (long long)N, D, E, K, F, bf16 ? " bf16" : "", threads, threads > 1 ? "s" : "", cmin, cmax,
         (double)rows / E);
  printf("fp32 FMA peak measured %.1f GFLOP/s on 1 thread, %.1f on 2%s (wall clock)", peak1, peak2,
         fell ? " (2 x 1 thread: see the note)" : "");
  if (threads == 1)
    printf(";\nquiet 1-thread peak (best of 40 runs of 3 ms) %.1f: the figures below use it, each call timed by the\n"
           "thread's CPU time\n\n", peak);
  else if (threads == 2)
    printf("; the figures below use the 2-thread one and the\nwall clock\n\n");
  else
    printf(", %.1f on %d (the best of 3 runs);\nthe figures below use the %d-thread one and the wall clock\n\n", peak,
           threads, threads);

  /* active FLOPs: 2 per multiply-add of the routed rows; gate, up, down
   * forward (3 products of rows x d x F), twice that backward */
  const double fl_f = 6.0 * (double)rows * D * F / 1e9, fl_b = 2 * fl_f;
  /* products: MoE, dense over N*k rows, dense FFN; alternated, best round */
  bench_layer *L[3] = {&moe, &dn, &ffn};
  timing best[3][2];
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++) best[a][b] = (timing){1e30, 0};
  for (int r = 0; r < rounds; r++)
    for (int bw = 0; bw < 2; bw++)
      for (int a = 0; a < 3; a++) {
        timing t = time_products(L[a], bw, reps, threads);
        if (t.wall < best[a][bw].wall) best[a][bw] = t;
      }
  printf("Expert products (gt_sgemm%s per expert, the GEMMs of the expert loop alone) by active FLOPs, GFLOP/s\n"
         "(share of the FMA peak), median of %d calls, best of %d alternated rounds; dense N*k: the same projections\n"
         "as one product over all %lld routed rows; dense FFN: one MLP of F' = k*F = %d over the %lld tokens (the\n"
         "same FLOPs); ratio: MoE share / dense share; * = CPU use under 90%% (another process had a core)%s\n\n",
         bf16 ? "/gt_bgemm" : "", reps, rounds, (long long)rows, F * K, (long long)N,
         bf16 ? ";\nbf16: shares of the fp32 FMA peak, a bf16 product counted as 2 flops (as bench gemm does)" : "");
  printf("| pass | GFLOP | MoE experts | dense over N*k rows | MoE / dense | dense FFN F'=%d | MoE / dense FFN |\n",
         F * K);
  printf("|---|---|---|---|---|---|---|\n");
  double sum[3] = {0, 0, 0};
  for (int bw = 0; bw < 3; bw++) {
    double g[3];
    const char *mark[3];
    for (int a = 0; a < 3; a++) {
      double t = bw < 2 ? best[a][bw].wall : best[a][0].wall + best[a][1].wall;
      if (bw < 2) sum[a] += t;
      g[a] = (bw == 0 ? fl_f : bw == 1 ? fl_b : fl_f + fl_b) / t;
      double use = bw < 2 ? best[a][bw].use : fmin(best[a][0].use, best[a][1].use);
      mark[a] = use < 0.9 ? " *" : "";
    }
    printf("| %s | %.2f | %.1f (%.1f%%)%s | %.1f (%.1f%%)%s | %.3f | %.1f (%.1f%%)%s | %.3f |\n",
           bw == 0 ? "forward" : bw == 1 ? "backward" : "forward+backward", bw == 0 ? fl_f : bw == 1 ? fl_b : fl_f + fl_b,
           g[0], 100 * g[0] / peak, mark[0], g[1], 100 * g[1] / peak, mark[1], g[0] / g[1], g[2], 100 * g[2] / peak,
           mark[2], g[0] / g[2]);
  }

  /* the whole layer by stage: forward stages, post-norm, backward stages */
  const int nf = GT__MOE_FWD_STAGES, nb = GT__MOE_BWD_STAGES;
  double st[GT__MOE_FWD_STAGES + 1 + GT__MOE_BWD_STAGES][64];
  int nrep = reps;
  for (int r = 0; r < nrep; r++) {
    gt__moe_pass p = pass_of(&moe, h, dout);
    for (int i = 0; i < nf; i++) {
      double t0 = bench_now();
      gt__moe_fwd_stage(&p, i);
      st[i][r] = bench_now() - t0;
    }
    double t0 = bench_now();
    gt_moe_forward_finish(moe.out, &moe.s, &moe.w, &moe.d);
    st[nf][r] = bench_now() - t0;
    for (int i = 0; i < nb; i++) {
      t0 = bench_now();
      gt__moe_bwd_stage(&p, i);
      st[nf + 1 + i][r] = bench_now() - t0;
    }
  }
  double med[GT__MOE_FWD_STAGES + 1 + GT__MOE_BWD_STAGES], tf = 0, tb = 0;
  for (int i = 0; i < nf + 1 + nb; i++) {
    med[i] = gt_bench_median(st[i], nrep);
    if (i <= nf) tf += med[i];
    else tb += med[i];
  }
  printf("\nThe whole routed layer (gt_moe_forward, gt_moe_backward) by stage, median of %d runs, ms (share of its\n"
         "pass); the experts stage is the products above plus the GeGLU and the routing weight's elementwise work\n\n",
         nrep);
  printf("| pass | stage | ms | share |\n|---|---|---|---|\n");
  for (int i = 0; i < nf + 1 + nb; i++) {
    const int bw = i > nf;
    const char *name = i < nf ? gt__moe_stage_name(0, i) : i == nf ? "post-norm" : gt__moe_stage_name(1, i - nf - 1);
    printf("| %s | %s | %.2f | %.1f%% |\n", bw ? "backward" : "forward", name, 1e3 * med[i],
           100 * med[i] / (bw ? tb : tf));
  }
  const double pf = best[0][0].wall, pb = best[0][1].wall;
  printf("| forward | all stages | %.2f | 100%% (expert products %.1f%%, the rest %.1f%%) |\n", 1e3 * tf, 100 * pf / tf,
         100 * (1 - pf / tf));
  printf("| backward | all stages | %.2f | 100%% (expert products %.1f%%, the rest %.1f%%) |\n", 1e3 * tb,
         100 * pb / tb, 100 * (1 - pb / tb));
  printf("\nwhole layer by active FLOPs (experts, router %.2f GFLOP fwd): %.1f GFLOP/s = %.1f%% of the peak\n",
         2.0 * N * D * E / 1e9, (3 * (fl_f + 2.0 * N * D * E / 1e9)) / (tf + tb),
         100 * (3 * (fl_f + 2.0 * N * D * E / 1e9)) / (tf + tb) / peak);

  layer_free(&moe), layer_free(&dn), layer_free(&ffn);
  free(h), free(dout);
  gt_team_set_process(threads0);
  return 0;
}
