/* Which arithmetic gt_bgemm (kernels/gemm_bf16.c) runs on this CPU, and why
 * (docs/cpus.md's path table). Every path multiplies the same bf16-rounded
 * operands, whose products are exact in float32, and sums in float32; they
 * differ in how (docs/precision.md gives the bits of each):
 *   GT_BGEMM_COPY  neither AVX-512 nor AVX2 (or GT_TEST_KERNELS=portable):
 *                  rounded float32 copies multiplied by gt_sgemm;
 *   GT_BGEMM_EMUL  vdpbf16ps's arithmetic (pairs of k, odd first, DAZ/FTZ)
 *                  on float32 FMAs: the pairs path where vdpbf16ps is
 *                  missing or turned off; bit-identical to GT_BGEMM_DP;
 *   GT_BGEMM_DP    vdpbf16ps (AVX512_BF16);
 *   GT_BGEMM_WIDE  the float32 GEMM's micro-kernel on operands rounded to
 *                  bf16 and widened back to float32 as they are packed
 *                  (kernels/gemm_widen.h; with AVX2 and no AVX-512,
 *                  kernels/gemm_avx2.h): gt_sgemm's bits on rounded
 *                  operands, at gt_sgemm's speed;
 *   GT_BGEMM_AMX   AMX-BF16 tiles (tdpbf16ps) where the CPU and the OS
 *                  allow them (kernels/gemm_amx.c).
 * The choice: AMX where usable; otherwise vdpbf16ps where it computes bf16
 * products clearly faster than FMA computes float32 ones (a vdpbf16ps rate
 * at least GT_BF16_DP_MIN times the FMA peak, both counted as 2 flops per
 * product), from a table of measured CPUs or, for a CPU not in it, a short
 * measurement of the two peaks (cached for the process); the widened path
 * everywhere else with AVX-512, and with AVX2 and FMA (the AVX2 copy).
 * Private to kernels/, the tools and tests. */
#ifndef GEMTRAIN_KERNELS_BF16_PATH_H
#define GEMTRAIN_KERNELS_BF16_PATH_H

#ifdef __cplusplus
extern "C" {
#endif

enum { GT_BGEMM_COPY = 0, GT_BGEMM_EMUL = 1, GT_BGEMM_DP = 2, GT_BGEMM_WIDE = 3, GT_BGEMM_AMX = 4 };

/* vdpbf16ps is chosen only when its rate is at least this multiple of the
 * FMA peak: a tie goes to the widened path (the float32 kernel), and a
 * measurement on a busy machine needs a margin to decide the same way
 * every time (the known CPUs are at 0.5x and 2x) */
#define GT_BF16_DP_MIN 1.25

/* How the choice was made */
enum {
  GT_BF16_BY_ISA = 0,   /* the only path the CPU has (no AVX-512) or AMX */
  GT_BF16_BY_TABLE = 1, /* the CPU's vendor, family and model are in the table */
  GT_BF16_BY_MEASURE = 2, /* the two peaks measured at the first bf16 product */
  GT_BF16_BY_FORCE = 3  /* GT_TEST_BF16_PATH or gt__bgemm_force_path (tests) */
};

/* What the choice depends on: filled from cpuid by gt__bf16_cpu_detect, or
 * by hand (tests: a fake CPU). */
typedef struct gt__bf16_cpu {
  char vendor[13]; /* "GenuineIntel", "AuthenticAMD", ... */
  int family, model;
  int avx512;      /* the AVX-512 copies run (kernels/cpu.h) */
  int avx2;        /* the AVX2 copies run (no AVX-512) */
  int avx512bf16;  /* vdpbf16ps usable (and not turned off by GEMTRAIN_NO_AVX512BF16) */
  int amx_bf16;    /* AMX-BF16 usable (kernels/cpu.h: cpuid, XCR0, Linux's permission) */
} gt__bf16_cpu;

typedef struct gt__bf16_choice {
  int path, by;
  double ratio;      /* the vdpbf16ps rate over the FMA peak the choice used (0: none) */
  double dp, fma;    /* the measured 1-thread peaks, GFLOP/s (GT_BF16_BY_MEASURE) */
  const char *table; /* the table row's CPU name (GT_BF16_BY_TABLE) */
} gt__bf16_choice;

/* The table: 1 and *ratio (and *name) for a known CPU with AVX512_BF16, 0
 * for one not in it. */
int gt__bf16_table(const char *vendor, int family, int model, double *ratio, const char **name);

/* The choice for cpu; measure(dp, fma) is called for the two 1-thread peaks
 * only when the table does not know the CPU (tests pass fake rates). */
void gt__bf16_decide(const gt__bf16_cpu *cpu, void (*measure)(double *dp, double *fma), gt__bf16_choice *out);

/* This CPU, from cpuid (kernels/cpu.h). */
void gt__bf16_cpu_detect(gt__bf16_cpu *cpu);

/* The path gt_bgemm runs now (the process's choice, or a forced one) and
 * how it was chosen. The choice is made once per process, at the first call;
 * a forced path the CPU cannot run gives way to the choice. */
int gt__bgemm_path(void);
void gt__bgemm_choice(gt__bf16_choice *out);
/* "rounded float32 copies", "vdpbf16ps", ... */
const char *gt__bgemm_path_name(int path);
/* Tests: make gt_bgemm take `path` from now on (-1: the choice again); not
 * while another thread runs gt_bgemm. GT_BGEMM_DP runs on its emulation
 * where vdpbf16ps is missing or off (gt__bgemm_force_fallback). The
 * environment's GT_TEST_BF16_PATH=pairs|widened|amx does the same for a
 * whole process (docs/testing.md). */
void gt__bgemm_force_path(int path);
/* 1 while gt__bgemm_force_fallback(1) (kernels/bf16.h) holds: gt_bgemm then
 * runs vdpbf16ps's emulation (GT_BGEMM_EMUL), whatever path was chosen or
 * forced, so a test compares it with the pairs path on any CPU. */
int gt__bgemm_fallback_forced(void);

#ifdef __cplusplus
}
#endif
#endif
