/* gt_sgemm: our own packed sgemm (BLIS layout: packed panels, one register-
 * blocked micro-kernel), because the OpenBLAS 0.3.21 that Debian ships does
 * not recognise every CPU we run on and then falls back to its generic SSE3
 * ("Prescott") kernel at a tenth of the machine's speed; the kernel is chosen
 * when the library loads, so a program cannot fix that for itself.
 *
 * Loops: jc over N by NC, pc over K by KC (pack B: KC x NC into NR-wide
 * panels, all threads), then the C block [M, NC] is cut into tasks of mc rows
 * times a group of NR panels, handed out dynamically (a thread that lost its
 * core to another process simply takes fewer tasks); with rows to spare,
 * full-width row blocks ending in smaller ones (gt__gemm_plan_make). A task
 * packs its mc x KC block of A (MR-tall panels; with one K block kept for
 * every B block) and runs, per B panel, the micro-kernel over every A
 * panel: the A block stays in L2, the B micro-panel streams.
 *
 * Determinism: every C element gets the same operations in the same order
 * whoever computes it: within a (jc, pc) block a tile is computed whole by one
 * task, blocks follow each other in a fixed order behind barriers, and the
 * blocking (KC, MC, NC) depends on the cache sizes only, never on the thread
 * count. So the bits do not depend on the thread count or on timing.
 *
 * Block sizes come from the caches, read once at run time (sysconf): KC and
 * the A block (mc x KC) from L2, the B block (KC x NC) at most half of L3
 * (capped); see gt__block_init.
 *
 * Buffers: each calling thread owns one cache of packing buffers (the shared
 * B block and one A block per team thread), grown on demand and kept between
 * calls, freed when the thread exits (a pthread key destructor; the main
 * thread's lives until the process ends). If it cannot grow, the call goes to
 * OpenBLAS instead; on the portable path every call does. Either way it goes
 * through gt__sgemm_fixed (kernels/gemm_fixed.c), in blocks fixed by the
 * shape, so the bits stay independent of the thread count there too.
 *
 * The cache sizes, the plan and the buffers are shared with the bf16 kernel
 * (kernels/gemm_blocking.h, defined here in plain C, in the portable copy).
 *
 * Stored weights (kernels/quant.h): gt__qgemm_packed runs these loops with
 * a packer that dequantizes W into the same panels (gt__qpack_b_u), so
 * gt_qgemm has gt_sgemm's bits on the dequantized matrix
 * (docs/quantization.md). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime: gt__sgemm_kernel_gflops */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/team.h"
#include "kernels/gemm_blocking.h"
#include "kernels/gemm_fixed.h"
#include "kernels/kernels.h"

/* The shared driver below is compiled once, in the portable build of this
 * file (kernels/isa.h); the AVX-512 copy holds the kernel alone and runs
 * through it, as the bf16 kernel and the AVX2 one (kernels/gemm_avx2.c)
 * do. */
#if defined(GT__KERNELS_PORTABLE_COPY)

/* Row tasks with a tail of small blocks (gt__gemm_plan_make) from this many
 * MR panels per thread up: 32 (768 rows on 2 threads). With fewer the rows
 * do not split into enough tasks (256 rows, 22 panels: 6, 6, 6, 2, 2), and
 * the columns split too, as before; at 512 rows (43 panels: 8, 8, 8, 7, 4,
 * 4, 2, 2) the two cuts measured the same per shape (0.97 to 1.02, 2
 * threads, alternated) but `gemtrain bench gemm` put the row cut 5-10%
 * lower on gemma3-270m's 512-row products in two runs, so those keep the
 * old cut. */
#ifndef GT__GEMM_ROWS_MODE
#define GT__GEMM_ROWS_MODE 32
#endif
/* Whole B blocks per thread (gt__gemm_run_cols) from this many B blocks per
 * thread up, for products with fewer rows than the row tasks take. */
#ifndef GT__COLS_BLOCKS
#define GT__COLS_BLOCKS 8
#endif

/* ------------------------------------------- shared (gemm_blocking.h) */

static int64_t gt__l2, gt__l3;
static pthread_once_t gt__caches_once = PTHREAD_ONCE_INIT;

static int64_t gt__cache_bytes(int name, int64_t fallback) {
  long v = sysconf(name);
  return v > 0 ? (int64_t)v : fallback;
}

static void gt__caches_init(void) {
  gt__l2 = gt__cache_bytes(_SC_LEVEL2_CACHE_SIZE, 1 << 20);
  gt__l3 = gt__cache_bytes(_SC_LEVEL3_CACHE_SIZE, 8 << 20);
}

int64_t gt__gemm_l2_bytes(void) {
  pthread_once(&gt__caches_once, gt__caches_init);
  return gt__l2;
}

int64_t gt__gemm_l3_bytes(void) {
  pthread_once(&gt__caches_once, gt__caches_init);
  return gt__l3;
}

/* Enough tasks that dynamic scheduling balances the team (4 per thread),
 * as few as that allows (each task packs its own A block). Depends on nt
 * only through the cut of C into tasks, never through the k order: kc and
 * so every element's order of operations come from K and the caches.
 *
 * With rows to spare the tasks are row blocks of the full width, the last
 * ones smaller: the team takes tasks as it frees up, so the last task to
 * start leaves the other threads idle for its length; equal tasks of a
 * tenth of a thread's share cost about 5% on 2 threads (perf: that much in
 * libgomp's barrier wait). A tail of tail_nt blocks of each size 2^L .. 4, 2
 * panels (largest first) ends the product within a small block of each
 * other, each row block still packed once. Measured (2 threads, alternated
 * with the equal tasks): the 2048-row products of the 12-layer model +3% to
 * +6%, to 87-91% of the 2-thread peak. */
void gt__gemm_plan_make(gt__gemm_plan *p, const gt__gemm_blocks *b, int64_t M, int64_t N, int64_t K, int nt) {
  const int64_t MR = b->mr, NR = b->nr;
  /* a product too small to pay for waking a second thread runs on one */
  if ((double)M * N * K < 4e6) nt = 1;
  /* K in equal blocks of at most kc_max (256 = 192 + 64 would waste the
   * second block's call overhead on little work) */
  p->kc = gt__gcdiv(gt__gcdiv(K, gt__gcdiv(K, b->kc_max)), b->kalign) * b->kalign;
  p->nc = gt__gmin(b->nc_max, gt__gcdiv(N, NR) * NR);
  int64_t npanels = gt__gcdiv(gt__gmin(p->nc, N), NR), mpanels = gt__gcdiv(M, MR);
  int64_t nic = gt__gmin(mpanels, gt__gcdiv(M, b->mc_max)), ng = 1;
  p->tail_levels = 0, p->tail_nt = nt;
  if (nt > 1 && mpanels >= GT__GEMM_ROWS_MODE * (int64_t)nt) {
    /* rows to spare: the tail takes at most half of them */
    int64_t mcp = gt__gcdiv(mpanels, nic), L = 0;
    while ((2 << L) < mcp && nt * ((2 << (L + 1)) - 2) <= mpanels / 2) L++;
    p->tail_levels = L;
    p->headp = mpanels - nt * ((2 << L) - 2);
    p->nhead = gt__gcdiv(p->headp, mcp);
    p->nic = p->nhead + L * nt;
    p->mc = gt__gcdiv(p->headp, p->nhead) * MR;
    p->ngroups = 1;
    p->nt = nt;
    return;
  }
  if (nt > 1) {
    /* skinny products get their tasks from the long side: few rows split
     * the columns, few columns the rows */
    int64_t target = 4 * (int64_t)nt;
    ng = gt__gmin(npanels, gt__gcdiv(target, nic));
    if (nic * ng < target) nic = gt__gmin(mpanels, gt__gcdiv(target, ng));
    /* a multiple of the team when possible: near-equal tasks then split
     * evenly (9 tasks on 2 threads would leave one idle for a ninth) */
    for (int tries = 0; (nic * ng) % nt && tries < nt; tries++) {
      if (nic < mpanels)
        nic++;
      else if (ng < npanels)
        ng++;
      else
        break;
    }
  }
  /* row block b holds MR panels [mpanels*b/nic, mpanels*(b+1)/nic) */
  p->nic = nic;
  p->headp = mpanels, p->nhead = nic;
  p->mc = gt__gcdiv(mpanels, nic) * MR;
  p->ngroups = ng;
  p->nt = (int)gt__gmin(nt, nic * ng);
}

void gt__gemm_plan_rows(const gt__gemm_plan *p, int64_t ib, int64_t *p0, int64_t *p1) {
  if (ib < p->nhead) {
    *p0 = p->headp * ib / p->nhead, *p1 = p->headp * (ib + 1) / p->nhead;
    return;
  }
  /* tail block i: level l (size 2^(l+1)) from L-1 down to 0, tail_nt each */
  int64_t i = ib - p->nhead, L = p->tail_levels, l = L - 1 - i / p->tail_nt, sz = (int64_t)2 << l;
  *p0 = p->headp + p->tail_nt * ((2 << L) - (4 << l)) + (i % p->tail_nt) * sz;
  *p1 = *p0 + sz;
}

static pthread_key_t gt__cache_key;
static int gt__cache_key_ok;
static pthread_once_t gt__cache_once = PTHREAD_ONCE_INIT;

static void gt__cache_free(void *p) {
  gt__gemm_cache *c = p;
  free(c->a);
  free(c->b);
  free(c->w);
  free(c);
}

static void gt__cache_key_init(void) { gt__cache_key_ok = pthread_key_create(&gt__cache_key, gt__cache_free) == 0; }

gt__gemm_cache *gt__gemm_cache_get(void) {
  pthread_once(&gt__cache_once, gt__cache_key_init);
  if (!gt__cache_key_ok) return NULL;
  gt__gemm_cache *c = pthread_getspecific(gt__cache_key);
  if (c) return c;
  c = calloc(1, sizeof *c);
  if (c && pthread_setspecific(gt__cache_key, c)) {
    free(c);
    c = NULL;
  }
  return c;
}

int gt__gemm_grow(void **p, size_t *cap, size_t bytes) {
  if (bytes <= *cap) return 0;
  size_t n = (bytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
  void *q = aligned_alloc(64, n);
  if (!q) return -1;
  free(*p);
  *p = q;
  *cap = bytes;
  return 0;
}

/* The tiles of one task: B panels [q0, q1) of the packed block Bp, each
 * against every MR-tall panel of the m rows of packed A At, into C (the
 * task's top-left corner) with the micro-kernel; the next tile (below, or
 * the top of the next panel) is the one prefetched. With c16 (the task's
 * corner of epi->c16; beta is then 0) each tile goes to a scratch tile and
 * from there to c16 as bf16, and C is not used. */
enum { GT__TILE_SCRATCH = 32 * 32 };
static void gt__gemm_tiles(const gt__gemm_kernel *k, int64_t ku, const uint32_t *At, const uint32_t *Bp, int64_t q0,
                           int64_t q1, int64_t m, int64_t nc, float alpha, float beta, float *C, int64_t ldc,
                           gt__gemm_round_fn rnd, gt__gemm_pack_fn pack, uint16_t *c16, int64_t ldc16) {
  const int64_t MR = k->blocks->mr, NR = k->blocks->nr;
  if (c16) {
    _Alignas(64) float tile[GT__TILE_SCRATCH]; /* MR x NR, in L1 throughout */
    for (int64_t q = q0; q < q1; q++) {
      const uint32_t *bq = Bp + q * NR * ku;
      int64_t nr = gt__gmin(NR, nc - q * NR);
      for (int64_t ir = 0; ir < m; ir += MR) {
        const int64_t mr = gt__gmin(MR, m - ir);
        k->micro(ku, At + ir * ku, bq, tile, NR, mr, nr, alpha, 0.0f, tile);
        pack(c16 + ir * ldc16 + q * NR, ldc16, tile, NR, mr, nr);
      }
    }
    return;
  }
  for (int64_t q = q0; q < q1; q++) {
    const uint32_t *bq = Bp + q * NR * ku;
    float *cq = C + q * NR;
    int64_t nr = gt__gmin(NR, nc - q * NR);
    for (int64_t ir = 0; ir < m; ir += MR) {
      const float *cn = ir + MR < m ? cq + (ir + MR) * ldc : cq + NR;
      const int64_t mr = gt__gmin(MR, m - ir);
      k->micro(ku, At + ir * ku, bq, cq + ir * ldc, ldc, mr, nr, alpha, beta, cn);
      /* the tile is final and still in L1: rounding it here costs no pass
       * over memory */
      if (rnd) rnd(cq + ir * ldc, ldc, cq + ir * ldc, ldc, mr, nr);
    }
  }
}

typedef struct gt__gemm_job {
  const gt__gemm_kernel *k;
  const gt__gemm_plan *pl;
  int transA, transB;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
  uint32_t *Ap, *Bp; /* packing buffers: A (kept or per member), B (shared or per member) */
  int a_keep;
  gt__gemm_round_fn round_c; /* rounds C's tiles once their last K block is in (gt__gemm_run) */
  gt__gemm_pack_fn pack;     /* or writes them to c16 as bf16 instead (gt__gemm_epi) */
  uint16_t *c16;
  int64_t ldc16;
  gt_team_counter next;
} gt__gemm_job;

static void gt__gemm_cols_member(void *arg, int tid, int nth) {
  gt__gemm_job *j = arg;
  const gt__gemm_kernel *k = j->k;
  const int64_t M = j->M, N = j->N, K = j->K, MR = k->blocks->mr, NR = k->blocks->nr, ku = gt__gcdiv(K, k->kdiv);
  const int64_t ncb = j->pl->nc, mpanels = gt__gcdiv(M, MR), nb = gt__gcdiv(N, ncb), mcp = j->pl->mc / MR;
  uint32_t *Ap = j->Ap;
  for (int64_t p = mpanels * tid / nth; p < mpanels * (tid + 1) / nth; p++)
    k->pack_a(Ap + p * MR * ku, j->transA, j->A, j->lda, p * MR, gt__gmin(MR, M - p * MR), 0, K);
  gt_team_barrier();
  uint32_t *Bp = j->Bp + (int64_t)tid * ncb * ku;
  for (int64_t jb; (jb = gt_team_take(&j->next, 0)) < nb;) {
    const int64_t jc = jb * ncb, nc = gt__gmin(ncb, N - jc), npanels = gt__gcdiv(nc, NR);
    k->pack_b(Bp, j->transB, j->B, j->ldb, 0, K, jc, nc);
    /* row blocks of mc rows (the A block stays in L2), then as there */
    for (int64_t p0 = 0; p0 < mpanels; p0 += mcp) {
      const int64_t ic = p0 * MR, m = gt__gmin(M, (p0 + mcp) * MR) - ic;
      gt__gemm_tiles(k, ku, Ap + ic * ku, Bp, 0, npanels, m, nc, j->alpha, j->beta,
                     j->c16 ? NULL : j->C + ic * j->ldc + jc, j->ldc, j->round_c, j->pack,
                     j->c16 ? j->c16 + ic * j->ldc16 + jc : NULL, j->ldc16);
    }
  }
}

/* Many B blocks, few rows, one K block (gemma3-270m's head X.W^T at B =
 * 1: 512 rows, 256 blocks of 1024 columns): each thread takes whole B
 * blocks, packs each into its own buffer and multiplies every row by it; A
 * is packed once and shared. The shared-block loops below made both threads
 * pack the same block at once, each waiting on memory, then meet at a
 * barrier, 512 times a call: on 2 threads packing took 12% of the time
 * there (6% on 1) and the barrier 3%. Every tile is the same micro call on
 * the same packed data as there, so the bits are the same. */
static void gt__gemm_run_cols(gt__gemm_job *j) { gt_team_par_n(j->pl->nt, gt__gemm_cols_member, j); }

/* One member's part of gt__gemm_run's loops. */
static void gt__gemm_member(void *arg, int tid, int nth) {
  gt__gemm_job *j = arg;
  const gt__gemm_kernel *k = j->k;
  const gt__gemm_plan *pl = j->pl;
  const gt__gemm_blocks *bl = k->blocks;
  const int64_t M = j->M, N = j->N, K = j->K, MR = bl->mr, NR = bl->nr, kub = pl->kc / k->kdiv;
  const int64_t kcb = pl->kc, ncb = pl->nc, mc = pl->mc, nic = pl->nic, ng = pl->ngroups;
  const int a_keep = j->a_keep;
  uint32_t *Bp = j->Bp, *Abase = j->Ap;
  uint32_t *Ap = Abase + (int64_t)tid * mc * kub;
  int64_t base = 0; /* the dynamic loops' running start (gt_team_take) */
  for (int64_t jc = 0; jc < N; jc += ncb) {
    int64_t nc = gt__gmin(ncb, N - jc), npanels = gt__gcdiv(nc, NR);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      int64_t kc = gt__gmin(kcb, K - pc), ku = gt__gcdiv(kc, k->kdiv);
      float bta = pc == 0 ? j->beta : 1.0f;
      /* every thread packs a run of panels of the shared B block (one
       * call: rows of B not transposed are then read in runs across the
       * panels); the barrier keeps them from reading it early */
      {
        int64_t q0 = npanels * tid / nth, q1 = npanels * (tid + 1) / nth;
        if (q1 > q0)
          k->pack_b(Bp + q0 * NR * ku, j->transB, j->B, j->ldb, pc, kc, jc + q0 * NR, gt__gmin(nc, q1 * NR) - q0 * NR);
      }
      gt_team_barrier();
      int64_t packed_ic = -1; /* the row block this thread's Ap holds (this pc) */
      const int64_t ntasks = nic * ng;
      for (int64_t t; (t = gt_team_take(&j->next, base)) < ntasks;) {
        int64_t ib = t / ng, g = t % ng, rp0, rp1;
        gt__gemm_plan_rows(pl, ib, &rp0, &rp1);
        int64_t ic = rp0 * MR, m = gt__gmin(M, rp1 * MR) - ic;
        /* kept: row block ib's own place, packed in the first B block
         * (the barrier ending that block's loop publishes it) */
        uint32_t *At = a_keep ? Abase + ic * ku : Ap;
        if (a_keep ? jc == 0 : ib != packed_ic) {
          k->pack_a(At, j->transA, j->A, j->lda, ic, m, pc, kc);
          packed_ic = ib;
        }
        gt__gemm_tiles(k, ku, At, Bp, npanels * g / ng, npanels * (g + 1) / ng, m, nc, j->alpha, bta,
                       j->c16 ? NULL : j->C + ic * j->ldc + jc, j->ldc, pc + kcb >= K ? j->round_c : NULL, j->pack,
                       j->c16 ? j->c16 + ic * j->ldc16 + jc : NULL, j->ldc16);
      }
      base += ntasks + nth;
      /* ... and this barrier keeps the next pack from overwriting B while
       * a task still reads it */
      gt_team_barrier();
    }
  }
}

typedef struct gt__cols_job {
  gt__gemm_cols_fn cols;
  const void *args;
  int64_t N, chunk;
  gt_team_counter next;
} gt__cols_job;

static void gt__cols_member(void *arg, int tid, int nth) {
  gt__cols_job *j = arg;
  const int64_t nchunks = gt__gcdiv(j->N, j->chunk);
  for (int64_t c; (c = gt_team_take(&j->next, 0)) < nchunks;)
    j->cols(j->args, c * j->chunk, gt__gmin(j->N, (c + 1) * j->chunk));
}

void gt__gemm_cols(int64_t N, int64_t K, int64_t chunk, gt__gemm_cols_fn cols, const void *args) {
  gt__cols_job j = {cols, args, N, chunk, {0}};
  gt_team_par(N * K >= (1 << 15), gt__cols_member, &j);
}

void gt__gemm_beta_only(int64_t M, int64_t N, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

double gt__gemm_rate(gt__gemm_ceil_fn call, int64_t mr, int64_t nr, int64_t kc, double seconds) {
  enum { GT__CEIL_A = 1536, GT__CEIL_B = 4096, GT__CEIL_C = 384 };
  if (mr * kc > GT__CEIL_A || nr * kc > GT__CEIL_B || mr * nr > GT__CEIL_C) return 0.0;
  _Alignas(64) float Ap[GT__CEIL_A], Bp[GT__CEIL_B], C[GT__CEIL_C]; /* 24 KiB of stack */
  /* small values, no denormals: the rate of an FMA does not depend on them
   * otherwise, and C grows by only about 0.19 per call */
  for (int i = 0; i < GT__CEIL_A; i++) Ap[i] = (float)(i % 7) / 64.0f;
  for (int i = 0; i < GT__CEIL_B; i++) Bp[i] = (float)(i % 5) / 64.0f;
  for (int i = 0; i < GT__CEIL_C; i++) C[i] = 0.0f;
  long n = 1000;
  struct timespec t0, t1;
  double best = 0;
  for (int rep = -1; rep < 3; rep++) { /* rep -1 sizes the timed runs to `seconds` */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) call(Ap, Bp, C);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double t = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (t <= 0) continue;
    if (rep < 0) {
      n = (long)((double)n * (seconds > 0 ? seconds : 0.2) / t) + 1;
      continue;
    }
    const double g = (double)n * 2.0 * (double)(mr * nr * kc) / t / 1e9;
    if (g > best) best = g;
  }
  /* C is read once, so the calls cannot be dropped as dead stores */
  volatile float sink = C[0];
  (void)sink;
  return best;
}

/* Loops: jc over N by nc, pc over K by kc (pack B: kc x nc into nr-wide
 * panels, all threads), then the C block [M, nc] cut into tasks of mc rows
 * times a group of nr panels, handed out dynamically (a thread that lost its
 * core takes fewer). A task packs its mc x kc block of A and runs, per B
 * panel, the micro-kernel over every A panel: the A block stays in L2, the
 * B micro-panel streams. Every C tile is computed whole by one task in a
 * fixed k order, blocks follow each other behind barriers: the bits do not
 * depend on the thread count or on timing. */
int gt__gemm_run(const gt__gemm_kernel *k, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 const gt__gemm_epi *epi) {
  const gt__gemm_blocks *bl = k->blocks;
  gt__gemm_plan pl;
  gt__gemm_plan_make(&pl, bl, M, N, K, gt_team_threads());
  const gt__gemm_round_fn round_c = epi ? epi->round : NULL;
  const gt__gemm_pack_fn pack = epi ? epi->pack : NULL;
  uint16_t *const c16 = pack && epi->c16 ? epi->c16 : NULL;
  const int64_t ldc16 = epi ? epi->ldc16 : 0;
  /* bf16 tiles straight from the micro-kernel: only when each tile is
   * final after one micro call (one K block) and owes nothing to C */
  if (c16 && (K > pl.kc || beta != 0.0f || bl->mr * bl->nr > GT__TILE_SCRATCH)) return 1;
  /* the plan's task cut uses the team size it asked for; the buffers are
   * sized for it, and a smaller team only takes more tasks each */
  const int64_t MR = bl->mr, kub = pl.kc / k->kdiv; /* elements per full K block */
  /* One K block, several B blocks, tasks of whole rows: every row block's
   * A is the same for each B block, so keep them all (packed while the
   * first B block is computed, into the row block's own place) instead of
   * packing each once per B block: gemma3-270m's head X.W^T (512 rows, 256
   * B blocks) packed its 1.3 MB of X 256 times. Up to 16 MiB of them. */
  const int64_t mall = gt__gcdiv(M, MR) * MR;
  const int a_fits = K <= pl.kc && 4 * mall * kub <= ((int64_t)16 << 20); /* one K block, A keepable */
  const int a_keep = a_fits && pl.ngroups == 1 && N > pl.nc;
  gt__gemm_cache *cache = gt__gemm_cache_get();
  /* whole B blocks per thread: a team, A keepable, at least GT__COLS_BLOCKS
   * blocks a thread, rows too few for row tasks */
  if (pl.nt > 1 && a_fits && gt__gcdiv(N, pl.nc) >= GT__COLS_BLOCKS * pl.nt &&
      gt__gcdiv(M, MR) < GT__GEMM_ROWS_MODE * pl.nt) {
    if (!cache || gt__gemm_grow(&cache->b, &cache->bcap, 4 * (size_t)(pl.nt * kub * pl.nc)) ||
        gt__gemm_grow(&cache->a, &cache->acap, 4 * (size_t)(mall * kub)))
      return -1;
    gt__gemm_job jc = {k,    &pl,  transA, transB, M,        N,        K,     lda, ldb, ldc, alpha, beta,
                       A,    B,    C,      cache->a, cache->b, 0,        round_c, pack, c16, ldc16, {0}};
    gt__gemm_run_cols(&jc);
    return 0;
  }
  if (!cache || gt__gemm_grow(&cache->b, &cache->bcap, 4 * (size_t)(kub * pl.nc)) ||
      gt__gemm_grow(&cache->a, &cache->acap, 4 * (size_t)(a_keep ? mall * kub : pl.nt * pl.mc * kub)))
    return -1;
  gt__gemm_job job = {k, &pl, transA, transB, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C, cache->a, cache->b,
                      a_keep, round_c, pack, c16, ldc16, {0}};
  gt_team_par_n(pl.nt, gt__gemm_member, &job);
  return 0;
}

#endif /* GT__KERNELS_PORTABLE_COPY */

#if defined(GT__KERNELS_AVX512)
#include <immintrin.h>

#include "kernels/bf16_lanes.h"
#include "kernels/gemm_tile.h"
#include "kernels/gemm_tr16.h"
#include "kernels/gemm_widen.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_lanes.h"

enum { MR = 12, NR = 32 };
/* gt_sgemm's row-times-B^T products take this many rows and fewer */
#define GT__QGEMV_ROWS 4


/* ------------------------------------------------------------- blocking */

static gt__gemm_blocks gt__blocks;
static pthread_once_t gt__block_once = PTHREAD_ONCE_INIT;

static void gt__block_init(void) {
  int64_t l2 = gt__gemm_l2_bytes(), l3 = gt__gemm_l3_bytes();
  /* KC as large as lets an A block of 128 rows take half of L2, capped at
   * 1024 (1024 on 1 and 2 MiB L2s), so the step's K of 512, 640 and 1024
   * are one block and 2048 two: each further K block re-reads and re-writes
   * all of C (the 12-layer model's head: 256 MB) and waits at one more
   * barrier. Measured on Zen 4 (1 MiB L2) against KC 512, which cut K = 640
   * into 320 + 320: the head's X.W^T went from 80% to 89% of the peak, the
   * 270m model's MLP products from 74-80% to 85-90%; KC 640 (one block for
   * 640, 4 x 512 for 2048) measured the same within noise. The KC x NR B
   * micro-panel (128 KiB) streams from L2 fast enough: the kernel needs 128
   * bytes per 24 FMAs.
   *
   * NC at most 1024 columns (a B block of 2.5-4 MiB), though half of this
   * L3 (32 MiB) would hold 4096: per B block the L3, a victim cache, also
   * takes the block's C rows (with 512 rows, 8 MiB at 4096 columns) and
   * the source rows the pack reads (another 10 MiB for gemma3-270m's head
   * W), and the VM's L3 may not be ours alone. Alternated with 4096 on
   * that head's X.W^T (512 x 262144 x 640: each packed B element serves
   * 512 rows, a quarter of the 2048-row products'), five runs: +1% to +8% on 1 thread,
   * -1% to +8% on 2 (this VM's noise is about 5%); 512 columns no better;
   * the other products with N > 1024 within +-1%, the small model's head
   * within noise. */
  int64_t kc = gt__gmax(128, gt__gmin(1024, l2 / 2 / (128 * 4) / 16 * 16));
  gt__blocks = (gt__gemm_blocks){.mr = MR,
                                 .nr = NR,
                                 .kc_max = kc,
                                 .kalign = 8,
                                 .mc_max = gt__gmax(4 * MR, gt__gmin(4096, l2 / 2 / (kc * 4) / MR * MR)),
                                 .nc_max = gt__gmax(16 * NR, gt__gmin(1024, l3 / 2 / (kc * 4) / NR * NR))};
}

/* -------------------------------------------------------------- packing */

/* The packers below take rnd: 0 copies the floats as they are (gt_sgemm),
 * 1 rounds each to bf16 as it is packed (gt_bgemm's widened path,
 * kernels/gemm_widen.h): the panels then hold bf16 values widened to
 * float32, and the micro-kernel's products of them are exact. Rounding a
 * zero (the padding) gives zero. */
#define GT__PK(rnd, v) ((rnd) ? _mm512_castsi512_ps(gt__bf16_round16(v)) : (v))

/* rows[0..nrows) of a matrix whose rows run along k: 16 k values each from
 * k (masked to kn), the other rows 0, transposed: r[kk] = column k + kk. */
static inline __attribute__((always_inline)) void gt__load_tr(__m512 r[16], const float *src, int64_t ld,
                                                              int64_t nrows, int64_t k, int64_t kn,
                                                              const float *next, int64_t nnext, const int rnd) {
  __mmask16 m = (__mmask16)(kn >= 16 ? 0xFFFF : (1u << kn) - 1);
  /* rows of a KB or two are too short for the hardware prefetcher to ramp
   * up: ask now for the same line of the rows packed next (nnext of them
   * from `next`), a whole panel ahead; without it the loads below waited
   * on L3 for most of the packing time */
  for (int64_t i = 0; i < nnext; i++) _mm_prefetch((const char *)(next + i * ld + k), _MM_HINT_T0);
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++)
    r[i] = i < nrows ? GT__PK(rnd, _mm512_maskz_loadu_ps(m, src + i * ld + k)) : _mm512_setzero_ps();
  gt__tr16(r);
}

/* A block [mc, kc] from (i0, k0) into MR-tall panels: panel p holds
 * rows p*MR.., k-major (MR floats per k), rows past mc zero. */
static inline __attribute__((always_inline)) void gt__pack_a(float *dst, int transA, const float *A, int64_t lda,
                                                             int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                                                             const int rnd) {
  if (transA) {
    /* op(A)(i, k) = A[k][i]: each k's MR values are contiguous. Row by row
     * of A across all the panels: one row's mc values are one contiguous
     * run (whole lines, read once), where panel by panel read 48 bytes of
     * each of kc rows lda apart per panel and waited on memory for each (a
     * 128 KB stride defeats the hardware prefetcher). Four rows at a time,
     * so each panel gets whole lines written; the rows 8 ahead are
     * requested while these are copied. Measured on the 12-layer model's
     * head dY^T.X (lda 32768): pack_a fell from 11% of the time to 6%. */
    for (int64_t k = 0; k < kc; k += 4) {
      const float *src = A + (k0 + k) * lda + i0;
      int64_t kn = gt__gmin(4, kc - k);
      if (k + 8 < kc)
        for (int64_t kk = 0; kk < gt__gmin(4, kc - k - 8); kk++)
          for (int64_t i = 0; i < mc; i += 16) _mm_prefetch((const char *)(src + (8 + kk) * lda + i), _MM_HINT_T0);
      for (int64_t p = 0; p < mc; p += MR) {
        int64_t mr = gt__gmin(MR, mc - p);
        __mmask16 m = (__mmask16)((1u << mr) - 1);
        for (int64_t kk = 0; kk < kn; kk++)
          _mm512_mask_storeu_ps(dst + p * kc + (k + kk) * MR, 0x0FFF,
                                GT__PK(rnd, _mm512_maskz_loadu_ps(m, src + kk * lda + p)));
      }
    }
    return;
  }
  /* rows run along k: transpose 16 k at a time (12 rows + 4 zero rows) */
  for (int64_t p = 0; p < mc; p += MR) {
    int64_t mr = gt__gmin(MR, mc - p);
    float *d = dst + p * kc;
    const float *src = A + (i0 + p) * lda;
    int64_t nnext = gt__gmax(0, gt__gmin(MR, mc - p - MR));
    const float *next = nnext ? src + MR * lda : src;
    for (int64_t k = 0; k < kc; k += 16) {
      __m512 r[16];
      int64_t kn = gt__gmin(16, kc - k);
      gt__load_tr(r, src, lda, mr, k0 + k, kn, next, nnext, rnd);
      if (kn == 16) {
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; kk++) _mm512_mask_storeu_ps(d + (k + kk) * MR, 0x0FFF, r[kk]);
      } else {
        for (int64_t kk = 0; kk < kn; kk++) _mm512_mask_storeu_ps(d + (k + kk) * MR, 0x0FFF, r[kk]);
      }
    }
  }
}

/* gt__pack_a's panels from A held as bf16 patterns (row stride lda in
 * elements; the driver hands the pointer through as a float one):
 * each pattern widened (a shift: exact), so the panels hold the same floats
 * as gt__pack_a rounding the float32 A they came from, read at 2 bytes an
 * element with no rounding to do. */
static inline __attribute__((always_inline)) __m512 gt__widen16(__mmask16 m, const uint16_t *src) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src)), 16));
}
static inline __attribute__((always_inline)) void gt__pack_a16(float *dst, int transA, const uint16_t *A, int64_t lda,
                                                               int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  if (transA) {
    /* op(A)(i, k) = A[k][i] (a weight gradient's dY^T): row by row of A
     * across all the panels, as gt__pack_a */
    for (int64_t k = 0; k < kc; k++) {
      const uint16_t *src = A + (k0 + k) * lda + i0;
      if (k + 8 < kc)
        for (int64_t i = 0; i < mc; i += 32) _mm_prefetch((const char *)(src + 8 * lda + i), _MM_HINT_T0);
      for (int64_t p = 0; p < mc; p += MR) {
        const int64_t mr = gt__gmin(MR, mc - p);
        _mm512_mask_storeu_ps(dst + p * kc + k * MR, 0x0FFF, gt__widen16((__mmask16)((1u << mr) - 1), src + p));
      }
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += MR) {
    int64_t mr = gt__gmin(MR, mc - p);
    float *d = dst + p * kc;
    const uint16_t *src = A + (i0 + p) * lda + k0;
    const int64_t nnext = gt__gmax(0, gt__gmin(MR, mc - p - MR));
    for (int64_t k = 0; k < kc; k += 16) {
      __m512 r[16];
      const int64_t kn = gt__gmin(16, kc - k);
      const __mmask16 m = (__mmask16)(kn >= 16 ? 0xFFFF : (1u << kn) - 1);
      for (int64_t i = 0; i < nnext; i++) _mm_prefetch((const char *)(src + (MR + i) * lda + k), _MM_HINT_T0);
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++)
        r[i] = i < mr ? gt__widen16(m, src + i * lda + k) : _mm512_setzero_ps();
      gt__tr16(r);
      for (int64_t kk = 0; kk < kn; kk++) _mm512_mask_storeu_ps(d + (k + kk) * MR, 0x0FFF, r[kk]);
    }
  }
}

/* B panel: op(B) rows k0..k0+kc, columns j0..j0+nr into [kc][NR], columns
 * past nr zero. */
static inline __attribute__((always_inline)) void gt__pack_b_panel(float *d, int transB, const float *B,
                                                                   int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                                                                   int64_t nr, int64_t nnext, const int rnd) {
  if (!transB) {
    /* rows of B lie ldb apart (8 KB and more): ask for the row 8 ahead
     * while this one is copied, as the hardware prefetcher does not */
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    for (int64_t k = 0; k < kc; k++) {
      const float *src = B + (k0 + k) * ldb + j0;
      if (k + 8 < kc) {
        _mm_prefetch((const char *)(src + 8 * ldb), _MM_HINT_T0);
        _mm_prefetch((const char *)(src + 8 * ldb + 31), _MM_HINT_T0);
      }
      _mm512_store_ps(d + k * NR, GT__PK(rnd, _mm512_maskz_loadu_ps(m0, src)));
      _mm512_store_ps(d + k * NR + 16, GT__PK(rnd, _mm512_maskz_loadu_ps(m1, src + 16)));
    }
    return;
  }
  /* op(B)(k, j) = B[j][k]: rows of B run along k; two 16-row transposes */
  const float *src = B + j0 * ldb;
  for (int64_t k = 0; k < kc; k += 16) {
    __m512 r[16], s[16];
    int64_t kn = gt__gmin(16, kc - k);
    gt__load_tr(r, src, ldb, gt__gmin(16, nr), k0 + k, kn, src + 32 * ldb, gt__gmin(16, nnext), rnd);
    gt__load_tr(s, nr > 16 ? src + 16 * ldb : src, ldb, gt__gmax(0, nr - 16), k0 + k, kn, src + 48 * ldb,
                gt__gmax(0, nnext - 16), rnd);
    if (kn == 16) {
#pragma GCC unroll 16
      for (int kk = 0; kk < 16; kk++) {
        _mm512_store_ps(d + (k + kk) * NR, r[kk]);
        _mm512_store_ps(d + (k + kk) * NR + 16, s[kk]);
      }
    } else {
      for (int64_t kk = 0; kk < kn; kk++) {
        _mm512_store_ps(d + (k + kk) * NR, r[kk]);
        _mm512_store_ps(d + (k + kk) * NR + 16, s[kk]);
      }
    }
  }
}

/* --------------------------------------------------------- micro-kernel */

/* C[mr, nr] = alpha * Ap . Bp + beta * C (beta == 0: C is not read).
 * Ap: [kc][MR], Bp: [kc][NR] (64-byte aligned). Cnext is the tile the next
 * call writes: its lines are requested (for writing) now, a whole k loop
 * ahead, so the next epilogue does not wait for L3 or memory. The rows are
 * spelled out one by one so the 24 accumulators stay in registers. */
static void gt__micro(int64_t kc, const float *Ap, const float *Bp, float *C, int64_t ldc, int64_t mr, int64_t nr,
                      float alpha, float beta, const float *Cnext) {
  GT__TILE_PREFETCH
  GT__TILE_ROWS(GT__TILE_DECL)
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_load_ps(Bp + k * NR), b1 = _mm512_load_ps(Bp + k * NR + 16);
    const float *a = Ap + k * MR;
#define GT__ROW(r)                            \
  {                                           \
    __m512 ar = _mm512_set1_ps(a[r]);         \
    c##r##0 = _mm512_fmadd_ps(ar, b0, c##r##0); \
    c##r##1 = _mm512_fmadd_ps(ar, b1, c##r##1); \
  }
    GT__TILE_ROWS(GT__ROW)
#undef GT__ROW
  }
  GT__TILE_EPILOGUE
}

/* the shared driver's view of this kernel (gemm_blocking.h: packed
 * elements of 4 bytes, here one float each) */
static void gt__pack_a_u(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a((float *)(void *)d, tA, A, lda, i0, mc, k0, kc, 0);
}
static void gt__pack_b_u(uint32_t *d, int tB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                         int64_t n) {
  for (int64_t p = 0; p * NR < n; p++)
    gt__pack_b_panel((float *)(void *)d + p * NR * kc, tB, B, ldb, k0, kc, j0 + p * NR, gt__gmin(NR, n - p * NR),
                     gt__gmax(0, gt__gmin(NR, n - (p + 1) * NR)), 0);
}
/* the same, rounding to bf16 (the widened path) */
static void gt__pack_a_w(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a((float *)(void *)d, tA, A, lda, i0, mc, k0, kc, 1);
}
/* A as bf16 patterns (gt__gemm_epi.a16) */
static void gt__pack_a_h(uint32_t *d, int tA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                         int64_t kc) {
  gt__pack_a16((float *)(void *)d, tA, (const uint16_t *)(const void *)A, lda, i0, mc, k0, kc);
}
static void gt__pack_b_w(uint32_t *d, int tB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                         int64_t n) {
  for (int64_t p = 0; p * NR < n; p++)
    gt__pack_b_panel((float *)(void *)d + p * NR * kc, tB, B, ldb, k0, kc, j0 + p * NR, gt__gmin(NR, n - p * NR),
                     gt__gmax(0, gt__gmin(NR, n - (p + 1) * NR)), 1);
}
static void gt__micro_u(int64_t kc, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr,
                        int64_t nr, float alpha, float beta, const float *cn) {
  gt__micro(kc, (const float *)(const void *)Ap, (const float *)(const void *)Bp, C, ldc, mr, nr, alpha, beta, cn);
}

/* ------------------------------------------- quantized weights (quant.h) */

/* gt_qgemm's B operand: a stored matrix W read through kernels/quant_lanes.h
 * as it is packed, into the same panels gt__pack_b_u writes from the
 * dequantized float matrix (every packed float is that matrix's element),
 * so the micro-kernel, the blocking and the bits are gt_sgemm's. The driver
 * hands B through untouched: here it is the gt_qweight (ldb unused). */
static inline __attribute__((always_inline)) void gt__qpack_b(uint32_t *d, int tW, const float *B, int64_t k0,
                                                              int64_t kc, int64_t j0, int64_t n, const int rnd) {
  const gt_qweight *w = (const gt_qweight *)(const void *)B;
  const int64_t cols = w->cols, np = gt__gcdiv(n, NR);
  const __m512 lut = gt__qlut();
  float *df = (float *)(void *)d;
  if (!tW) {
    /* op(W) = W [K, N]: row k0 + k's run j0..j0+n, one row at a time across
     * the panels (one contiguous read of the stored row) */
    for (int64_t k = 0; k < kc; k++) {
      const int64_t row = k0 + k, base = row * cols + j0;
      const float rs = gt__qrow_scale(w, row);
      for (int64_t p = 0; p < np; p++) {
        const int64_t nr = gt__gmin(NR, n - p * NR);
        float *dk = df + p * NR * kc + k * NR;
        _mm512_store_ps(dk, GT__PK(rnd, gt__qdeq16(w, base + p * NR, gt__gmin(16, nr), rs, lut)));
        _mm512_store_ps(dk + 16, GT__PK(rnd, gt__qdeq16(w, base + p * NR + 16, nr - 16, rs, lut)));
      }
    }
    return;
  }
  /* op(W) = W^T, W [N, K]: rows of W run along k; 16 k of 32 rows, two
   * 16 x 16 transposes (gt__pack_b_panel's, on dequantized lanes) */
  for (int64_t p = 0; p < np; p++) {
    const int64_t nr = gt__gmin(NR, n - p * NR), r0 = j0 + p * NR;
    float *dp = df + p * NR * kc;
    for (int64_t k = 0; k < kc; k += 16) {
      __m512 r[16], s[16];
      const int64_t kn = gt__gmin(16, kc - k);
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) {
        r[i] = i < nr ? GT__PK(rnd, gt__qdeq16(w, (r0 + i) * cols + k0 + k, kn, gt__qrow_scale(w, r0 + i), lut))
                      : _mm512_setzero_ps();
        s[i] = i + 16 < nr
                   ? GT__PK(rnd, gt__qdeq16(w, (r0 + 16 + i) * cols + k0 + k, kn, gt__qrow_scale(w, r0 + 16 + i), lut))
                   : _mm512_setzero_ps();
      }
      gt__tr16(r);
      gt__tr16(s);
      for (int64_t kk = 0; kk < kn; kk++) {
        _mm512_store_ps(dp + (k + kk) * NR, r[kk]);
        _mm512_store_ps(dp + (k + kk) * NR + 16, s[kk]);
      }
    }
  }
}

GT__QPACK_B_ENTRIES(gt__qpack_b)

/* gt__gemv_bt's sums with row j of W dequantized in registers: each output
 * gets the same FMAs in the same order (lane l sums k = l mod 16 in k
 * order, the last partial vector masked, then _mm512_reduce_add_ps), so
 * the bits are gt_sgemm's on the dequantized matrix. */
typedef struct gt__qgemv_args {
  int64_t M, K, lda, ldc;
  float alpha, beta;
  const float *A;
  const gt_qweight *W;
  float *C;
} gt__qgemv_args;

static void gt__qgemv_cols(const void *arg, int64_t j0, int64_t j1) {
  const gt__qgemv_args *g = arg;
  const int64_t M = g->M, K = g->K;
  const __m512 lut = gt__qlut();
  for (int64_t j = j0; j < j1; j++) {
    __m512 acc[GT__QGEMV_ROWS];
    for (int64_t i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
    const float rs = gt__qrow_scale(g->W, j);
    for (int64_t k = 0; k < K; k += 16) {
      const int64_t kn = gt__gmin(16, K - k);
      const __mmask16 m = (__mmask16)(kn >= 16 ? 0xFFFF : (1u << kn) - 1);
      const __m512 b = gt__qdeq16(g->W, j * K + k, kn, rs, lut);
      for (int64_t i = 0; i < M; i++)
        acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, g->A + i * g->lda + k), b, acc[i]);
    }
    for (int64_t i = 0; i < M; i++) {
      float dot = g->alpha * _mm512_reduce_add_ps(acc[i]);
      float *c = g->C + i * g->ldc + j;
      *c = g->beta == 0.0f ? dot : dot + g->beta * *c;
    }
  }
}

/* ------------------------------------------------------- small products */

/* A few rows times B^T (decoding one token: x [1, K] times W [N, K]^T):
 * packing would copy all of W for one use, so each output is a dot product of
 * two contiguous rows instead, memory-bound as it must be. Every output is
 * one thread's fixed-order sum, so the bits do not depend on threads. */
#define GT__GEMV_ROWS 4
#define GT__AS_IS(v) (v)
typedef struct gt__gemv_args {
  int64_t M, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
} gt__gemv_args;

static void gt__gemv_bt_cols(const void *arg, int64_t j0, int64_t j1) {
  const gt__gemv_args *g = arg;
  const int64_t M = g->M, K = g->K, lda = g->lda, ldb = g->ldb, ldc = g->ldc;
  const float alpha = g->alpha, beta = g->beta, *A = g->A, *B = g->B;
  float *C = g->C;
  GT__GEMV_BT_COLS(GT__AS_IS, j0, j1)
}

/* chunks of 64 columns, handed out dynamically */
static void gt__gemv_bt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc) {
  const gt__gemv_args g = {M, K, lda, ldb, ldc, alpha, beta, A, B, C};
  gt__gemm_cols(N, K, 64, gt__gemv_bt_cols, &g);
}

/* ---------------------------------------------------------------- driver */

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    gt__gemm_beta_only(M, N, beta, C, ldc);
    return;
  }
  if (M <= GT__GEMV_ROWS && !transA && transB) {
    gt__gemv_bt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_u, gt__pack_b_u, gt__micro_u};
  if (gt__gemm_run(&kern, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL))
    gt__sgemm_fixed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* gt_qgemm's packed path (kernels/quant_gemm.h): gt_sgemm's choices and
 * loops with the quantized packer. */
int gt__qgemm_packed(int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const gt_qweight *W, float beta, float *C, int64_t ldc) {
  if (M <= GT__GEMV_ROWS && transW) {
    const gt__qgemv_args g = {M, K, lda, ldc, alpha, beta, A, W, C};
    gt__gemm_cols(N, K, 64, gt__qgemv_cols, &g);
    return 0;
  }
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_u, gt__qpack_b_u, gt__micro_u};
  return gt__gemm_run(&kern, 0, transW, M, N, K, alpha, A, lda, (const float *)(const void *)W, W->cols, beta, C,
                      ldc, NULL);
}

/* gt_bgemm's and gt_qbgemm's widened path (kernels/gemm_widen.h): these
 * loops, blocks and micro-kernel with the packers that round to bf16. */
int gt__wgemm_packed(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                     const gt__gemm_epi *epi) {
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_w, gt__pack_b_w, gt__micro_u};
  static const gt__gemm_kernel kern16 = {&gt__blocks, 1, gt__pack_a_h, gt__pack_b_w, gt__micro_u};
  return gt__gemm_run(epi && epi->a16 ? &kern16 : &kern, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                      epi);
}

int gt__wqgemm_packed(int transA, int transW, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      int64_t lda, const gt_qweight *W, float beta, float *C, int64_t ldc, const gt__gemm_epi *epi) {
  pthread_once(&gt__block_once, gt__block_init);
  static const gt__gemm_kernel kern = {&gt__blocks, 1, gt__pack_a_w, gt__qpack_b_w, gt__micro_u};
  static const gt__gemm_kernel kern16 = {&gt__blocks, 1, gt__pack_a_h, gt__qpack_b_w, gt__micro_u};
  return gt__gemm_run(epi && epi->a16 ? &kern16 : &kern, transA, transW, M, N, K, alpha, A, lda,
                      (const float *)(const void *)W, W->cols, beta, C, ldc, epi);
}

_Static_assert(GT__QGEMV_ROWS == GT__GEMV_ROWS, "gt_qgemm's row products are gt_sgemm's");

/* ----------------------------------------------------- the kernel alone */

/* The micro-kernel's own rate, the ceiling of every packed product: one A
 * and one B panel of GT__CEIL_KC k (6 and 16 KiB, so both stay in L1) and
 * one C tile, multiplied again and again (beta 1, the step's commonest
 * epilogue), with no packing, no C traffic beyond L1 and no thread. What a
 * product loses below this rate is the blocking's (panels from L2, C tiles
 * from memory, packing, tails, threads); what this rate lies below the FMA
 * peak is the core's own (the loads and broadcasts that feed the FMAs). */
enum { GT__CEIL_KC = 128 };
static void gt__ceil_call(const float *Ap, const float *Bp, float *C) {
  gt__micro(GT__CEIL_KC, Ap, Bp, C, NR, MR, NR, 1.0f, 1.0f, C);
}
double gt__sgemm_kernel_gflops(double seconds) { return gt__gemm_rate(gt__ceil_call, MR, NR, GT__CEIL_KC, seconds); }

#elif defined(GT__KERNELS_AVX2) /* the AVX2 copy: kernels/gemm_avx2.c's kernel */
#include "kernels/gemm_avx2.h"

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {
    gt__gemm_beta_only(M, N, beta, C, ldc);
    return;
  }
  /* OpenBLAS only when the packing buffers cannot grow */
  if (gt__sgemm_avx2(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0, NULL))
    gt__sgemm_fixed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

double gt__sgemm_kernel_gflops(double seconds) { return gt__sgemm_avx2_kernel_gflops(seconds); }

#else /* the portable copy: OpenBLAS */

void gt_sgemm(int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    gt__gemm_beta_only(M, N, beta, C, ldc);
    return;
  }
  gt__sgemm_fixed(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

double gt__sgemm_kernel_gflops(double seconds) {
  (void)seconds;
  return 0.0; /* no kernel of ours here: OpenBLAS's is */
}
#endif
