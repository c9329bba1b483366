/* Pieces shared by the packed GEMMs, kernels/gemm.c (float32) and
 * kernels/gemm_bf16.c (bf16): the cache sizes, the plan that cuts one product
 * into tasks, and the per-thread packing buffers. Defined in gemm.c in plain
 * C (no vector code), so they exist whatever -march the library is built
 * for. Private to kernels/. */
#ifndef GEMTRAIN_GEMM_BLOCKING_H
#define GEMTRAIN_GEMM_BLOCKING_H

#include <stddef.h>
#include <stdint.h>

static inline int64_t gt__gmin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t gt__gmax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t gt__gcdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* L2 and L3 sizes in bytes, read once (sysconf; 1 MiB and 8 MiB when the
 * system does not say). */
int64_t gt__gemm_l2_bytes(void);
int64_t gt__gemm_l3_bytes(void);

/* A kernel's register tile (mr x nr) and cache blocks: kc_max elements of K
 * per block, K blocks rounded up to a multiple of kalign, at most mc_max rows
 * per A block and nc_max columns per B block. */
typedef struct gt__gemm_blocks {
  int64_t mr, nr, kc_max, kalign, mc_max, nc_max;
} gt__gemm_blocks;

/* How one call is cut: K in blocks of kc, N in blocks of nc; the C block
 * [M, nc] in nic row blocks (whole mr panels, at most mc rows) times ngroups
 * groups of nr panels: nic * ngroups tasks for a team of nt. Row blocks: the
 * first nhead split the first headp panels evenly; when ngroups is 1 the
 * rest are a tail of tail_levels levels of tail_nt blocks each, from
 * 2^tail_levels panels down to 2 (gt__gemm_plan_rows). The cut of K (so every
 * element's order of operations) depends on K and the blocks only, never on
 * the thread count. */
typedef struct gt__gemm_plan {
  int64_t kc, nc, mc, nic, ngroups;
  int64_t headp, nhead, tail_levels, tail_nt;
  int nt;
} gt__gemm_plan;
void gt__gemm_plan_make(gt__gemm_plan *p, const gt__gemm_blocks *b, int64_t M, int64_t N, int64_t K, int nt);
/* Row block ib (0 <= ib < nic) of a plan: mr panels [*p0, *p1). */
void gt__gemm_plan_rows(const gt__gemm_plan *p, int64_t ib, int64_t *p0, int64_t *p1);

/* The calling thread's packing buffers (a: the A blocks of its team, b: the
 * shared B block), grown on demand, kept between calls, freed when the thread
 * exits; NULL when they cannot be set up. Both GEMMs use the same ones (a
 * thread runs one product at a time). w: a panel of a stored weight
 * dequantized for a GEMM that packs into a and b (kernels/quant.c). */
typedef struct gt__gemm_cache {
  void *a, *b, *w;
  size_t acap, bcap, wcap; /* bytes */
} gt__gemm_cache;
gt__gemm_cache *gt__gemm_cache_get(void);
/* *p holds at least `bytes`, 64-byte aligned: 0, or -1 with *p unchanged. */
int gt__gemm_grow(void **p, size_t *cap, size_t bytes);

/* One packed GEMM's kernel: how it packs and multiplies. A packed element
 * is 4 bytes and holds kdiv consecutive k (a float: 1; a pair of bf16: 2),
 * so a K block of kc takes ku = ceil(kc / kdiv) elements per row. A panel is
 * mr (A) or nr (B) elements wide; pack_a writes a block of mc rows as
 * mr-tall panels, pack_b the columns j0..j0+n (n > 0) as consecutive
 * nr-wide panels of ku x nr elements (the last one zero-padded; one call per
 * thread and K block, for its run of panels); micro multiplies one A panel
 * by one B panel over ku elements into the mr x nr tile of C at C
 * (prefetching cnext, the tile the next call writes). */
typedef void (*gt__gemm_pack_a_fn)(uint32_t *Ap, int transA, const float *A, int64_t lda, int64_t i0, int64_t mc,
                                   int64_t k0, int64_t kc);
typedef struct gt__gemm_kernel {
  const gt__gemm_blocks *blocks;
  int64_t kdiv;
  gt__gemm_pack_a_fn pack_a;
  void (*pack_b)(uint32_t *Bp, int transB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                 int64_t n);
  void (*micro)(int64_t ku, const uint32_t *Ap, const uint32_t *Bp, float *C, int64_t ldc, int64_t mr, int64_t nr,
                float alpha, float beta, const float *cnext);
} gt__gemm_kernel;

/* Rounds a rows x cols tile of C (row stride ldc) on the calling thread,
 * called with dst = src = C: gt_bf16_round_rows (kernels/bf16.h), for
 * gt_bgemm_rnd. */
typedef void (*gt__gemm_round_fn)(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                  int64_t cols);

/* The bf16 forms of a product's operands and output (NULL: float32 A, C as
 * computed). a16: A holds bf16 patterns (plain or transposed; the pointer
 * is passed as a float one), which the path's wrapper packs with its
 * 2-byte packer (gt_bgemm_x's a16). Then what gt__gemm_run does with each tile of C once
 * its last K block is in, while the tile is still in L1:
 *   round  rounds the tile in place (gt_bgemm_rnd): C then holds
 *          round(alpha op(A) op(B) + beta C), the bits of a separate
 *          rounding pass over C without the pass;
 *   c16    the tile is computed into a scratch tile on the stack instead of
 *          C and written to c16 (row stride ldc16) as bf16 patterns
 *          (pack, gt_bf16_pack_rows; gt_bgemm_c16): the float32 product never
 *          reaches memory and C is not touched (it may be NULL). Only with
 *          beta 0 and K within one K block of the plan: gt__gemm_run
 *          returns 1 for a longer K, with nothing written. */
typedef void (*gt__gemm_pack_fn)(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                 int64_t cols);
typedef struct gt__gemm_epi {
  int a16;
  gt__gemm_round_fn round;
  gt__gemm_pack_fn pack; /* with c16: gt_bf16_pack_rows (the caller's ISA copy) */
  uint16_t *c16;
  int64_t ldc16;
} gt__gemm_epi;

/* The loops both packed GEMMs share (kernels/gemm.c): C = alpha op(A) op(B)
 * + beta C with the blocks' plan and the calling thread's buffers, each
 * finished tile then handed to epi. 0; -1 when the buffers cannot grow; 1
 * when epi->c16 cannot be served (both with nothing written: the caller
 * takes another path). M, N, K > 0. */
int gt__gemm_run(const gt__gemm_kernel *k, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 const gt__gemm_epi *epi);

/* The row-times-B^T products' loop (kernels/gemm_tile.h's GT__GEMV_BT_COLS):
 * cols(args, j0, j1) on chunks of `chunk` columns of [0, N), each to the
 * team member free first (a member whose core is taken does fewer); every
 * output is one member's fixed-order sum, so the bits do not depend on
 * which. On the caller's team when N * K >= 2^15, else on the caller. cols
 * is the caller's vector code: this loop itself holds none. */
typedef void (*gt__gemm_cols_fn)(const void *args, int64_t j0, int64_t j1);
void gt__gemm_cols(int64_t N, int64_t K, int64_t chunk, gt__gemm_cols_fn cols, const void *args);

/* What a GEMM does with K 0 or alpha 0: C = beta C (0 when beta is 0, C
 * then not read). */
void gt__gemm_beta_only(int64_t M, int64_t N, float beta, float *C, int64_t ldc);

/* A micro-kernel's own rate, GFLOP/s: call(Ap, Bp, C) on one mr x kc A
 * panel, one kc x nr B panel and one C tile (all in L1; at most 1536, 4096
 * and 384 floats, else 0), repeated for about `seconds` (0: 0.2), the best
 * of three timed runs. */
typedef void (*gt__gemm_ceil_fn)(const float *Ap, const float *Bp, float *C);
double gt__gemm_rate(gt__gemm_ceil_fn call, int64_t mr, int64_t nr, int64_t kc, double seconds);

#endif
