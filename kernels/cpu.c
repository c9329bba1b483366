/* The kernel path, decided once from cpuid (docs/cpus.md). Compiled for
 * baseline x86-64 like everything outside the AVX-512 copies. */
#include "kernels/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 0: not decided yet, 1: portable, 2: AVX-512 */
static atomic_int gt__path;

static int gt__detect(void) {
  /* GT_TEST_KERNELS=portable: the tests' way to run the portable copies on
   * an AVX-512 machine (CI runs the unit suites both ways); not a setting
   * for users, who get the fastest path their CPU has. */
  const char *e = getenv("GT_TEST_KERNELS");
  if (e && strcmp(e, "portable") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  /* libgcc's checks include the OS's: AVX-512 counts only when XGETBV says
   * the ZMM and mask registers are saved on a context switch */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("avx2"))
    return 2;
#endif
  return 1;
}

int gt__kernels_avx512(void) {
  int p = atomic_load_explicit(&gt__path, memory_order_relaxed);
  if (p == 0) {
    /* racing first calls compute the same answer */
    p = gt__detect();
    atomic_store_explicit(&gt__path, p, memory_order_relaxed);
  }
  return p == 2;
}

const char *gt__kernels_name(void) { return gt__kernels_avx512() ? "avx512" : "portable"; }
