/* The machine's float32 FMA peak, measured: `gemtrain bench gemm` divides
 * every GEMM rate by it, so "share of peak" means the same thing on every CPU
 * without a table of clock speeds and port counts.
 *
 * The loop is inline assembly on purpose: with intrinsics gcc may keep an
 * accumulator array in memory, and the loop then measures store forwarding,
 * not the FMA units. Twelve independent accumulators cover the FMA latency
 * (4 cycles) times the FMA ports (1 to 2 per cycle for 512 bits) of the CPUs
 * we run on; the operands never change, so no load or dependency chain other
 * than each accumulator's own limits the rate. The bf16 peak (vdpbf16ps)
 * follows at the end. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

#if defined(GT__KERNELS_AVX512)
#define GT__FMA(acc) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #acc "\n\t"
#define GT__ZERO "vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31\n\t"
#define GT__CLOB "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", \
                 "zmm10", "zmm11", "zmm30", "zmm31"
enum { GT__LANES = 16 };
#define GT__FMA_CPU() 1
#elif defined(__x86_64__)
/* the portable copy: 256-bit FMAs where the CPU has them (the assembler
 * takes the instructions whatever the compiler targets) */
#define GT__FMA(acc) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #acc "\n\t"
#define GT__ZERO "vxorps %%ymm14, %%ymm14, %%ymm14\n\tvxorps %%ymm15, %%ymm15, %%ymm15\n\t"
#define GT__CLOB "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                 "xmm10", "xmm11", "xmm14", "xmm15"
enum { GT__LANES = 8 };
#define GT__FMA_CPU() (__builtin_cpu_init(), __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma"))
#endif

#if defined(GT__FMA) || defined(__x86_64__)
/* Seconds for n iterations of loop on each of `threads` threads: a team of
 * its own, made before the clock starts (a team of fewer when the system
 * refuses threads: the figure then counts the threads that ran). */
typedef struct gt__peak_job {
  void (*loop)(long);
  long n;
} gt__peak_job;

static void gt__peak_member(void *arg, int tid, int nth) {
  const gt__peak_job *j = arg;
  j->loop(j->n);
}

static double gt__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gt__peak_run(void (*loop)(long), int *threads, long n) {
  gt_team *t = NULL;
  while (*threads > 1 && gt_team_create(*threads, &t, NULL)) --*threads;
  gt__peak_job j = {loop, n};
  double t0 = gt__now();
  gt_team_run(t, gt__peak_member, &j);
  double dt = gt__now() - t0;
  gt_team_destroy(t);
  return dt;
}
#endif

#ifdef GT__FMA
/* n iterations of 12 vector FMAs. */
static void gt__fma_loop(long n) {
  __asm__ volatile(GT__ZERO
                   "1:\n\t" GT__FMA(0) GT__FMA(1) GT__FMA(2) GT__FMA(3) GT__FMA(4) GT__FMA(5)
                   GT__FMA(6) GT__FMA(7) GT__FMA(8) GT__FMA(9) GT__FMA(10) GT__FMA(11)
                   "dec %0\n\t"
                   "jnz 1b"
                   : "+r"(n)
                   :
                   : "memory", "cc", GT__CLOB);
}

/* Seconds for n iterations on `threads` threads (each runs the whole loop). */
static double gt__fma_run(int *threads, long n) { return gt__peak_run(gt__fma_loop, threads, n); }

double gt_fma_peak_gflops(int threads, double seconds) {
  if (!GT__FMA_CPU()) return 0.0;
  if (threads < 1) threads = 1;
  /* calibrate: a short run sizes the timed ones to `seconds` each */
  long n = 1000000;
  double t = gt__fma_run(&threads, n);
  if (t > 0) n = (long)((double)n * (seconds > 0 ? seconds : 0.2) / t) + 1;
  double best = 0;
  /* the best of three: a peak is what the units can do, and any interruption
   * (another process, a frequency step) only lowers a run */
  for (int rep = 0; rep < 3; rep++) {
    t = gt__fma_run(&threads, n);
    double g = t > 0 ? (double)n * 12.0 * 2.0 * GT__LANES * threads / t / 1e9 : 0;
    if (g > best) best = g;
  }
  return best;
}
#else
double gt_fma_peak_gflops(int threads, double seconds) {
  (void)threads, (void)seconds;
  return 0.0;
}
#endif

/* ---- bf16: vdpbf16ps (AVX512_BF16), chosen from cpuid whatever -march ----
 * The same scheme: twelve independent accumulators (vdpbf16ps's latency is
 * about 6 cycles on Zen 4), fixed operands; each instruction is 32 bf16
 * product-adds, counted as 64 flops. The instruction is spelled in the asm
 * text, so the function needs no target attribute. */
#if defined(__x86_64__)
#define GT__DP(acc) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #acc "\n\t"
/* noinline: the one function that needs AVX-512 registers (its callers run
 * only after the cpuid check) */
__attribute__((noinline, target("avx512f"))) static void gt__dp_loop(long n) {
  __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31\n\t"
                   "1:\n\t" GT__DP(0) GT__DP(1) GT__DP(2) GT__DP(3) GT__DP(4) GT__DP(5)
                   GT__DP(6) GT__DP(7) GT__DP(8) GT__DP(9) GT__DP(10) GT__DP(11)
                   "dec %0\n\t"
                   "jnz 1b\n\t"
                   "vzeroupper"
                   : "+r"(n)
                   :
                   : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                     "xmm9", "xmm10", "xmm11", "xmm30", "xmm31");
}

static double gt__dp_run(int *threads, long n) { return gt__peak_run(gt__dp_loop, threads, n); }

double gt_bf16_peak_gflops(int threads, double seconds) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  if (threads < 1) threads = 1;
  long n = 1000000;
  double t = gt__dp_run(&threads, n);
  if (t > 0) n = (long)((double)n * (seconds > 0 ? seconds : 0.2) / t) + 1;
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    t = gt__dp_run(&threads, n);
    double g = t > 0 ? (double)n * 12.0 * 64.0 * threads / t / 1e9 : 0;
    if (g > best) best = g;
  }
  return best;
}
#else
double gt_bf16_peak_gflops(int threads, double seconds) {
  (void)threads, (void)seconds;
  return 0.0;
}
#endif
