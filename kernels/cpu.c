/* The kernel path, decided once from cpuid (docs/cpus.md). Compiled for
 * baseline x86-64 like everything outside the AVX-512 copies. */
#define _DEFAULT_SOURCE /* syscall */
#include "kernels/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* 0: not decided yet, else a gt__kernels_path() value */
static atomic_int gt__path;

#if defined(__x86_64__) || defined(__i386__)
/* libgcc's checks include the OS's: AVX and AVX-512 count only when XGETBV
 * says the YMM (and ZMM and mask) registers are saved on a context switch */
static int gt__cpu_has_avx512(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("avx2");
}
static int gt__cpu_has_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#endif

static int gt__detect(void) {
  /* GT_TEST_KERNELS=portable|avx2: the tests' way to run the portable or
   * the AVX2 copies on a CPU that has more (CI runs the unit suites all
   * three ways); not a setting for users, who get the fastest path their
   * CPU has. A copy the CPU cannot run gives way to the portable one. */
  const char *e = getenv("GT_TEST_KERNELS");
  if (e && strcmp(e, "portable") == 0) return GT__PATH_PORTABLE;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (e && strcmp(e, "avx2") == 0) return gt__cpu_has_avx2() ? GT__PATH_AVX2 : GT__PATH_PORTABLE;
  if (gt__cpu_has_avx512()) return GT__PATH_AVX512;
  if (gt__cpu_has_avx2()) return GT__PATH_AVX2;
#endif
  return GT__PATH_PORTABLE;
}

int gt__kernels_path(void) {
  int p = atomic_load_explicit(&gt__path, memory_order_relaxed);
  if (p == 0) {
    /* racing first calls compute the same answer */
    p = gt__detect();
    atomic_store_explicit(&gt__path, p, memory_order_relaxed);
  }
  return p;
}

int gt__kernels_avx512(void) { return gt__kernels_path() == GT__PATH_AVX512; }

const char *gt__kernels_name(void) {
  const int p = gt__kernels_path();
  return p == GT__PATH_AVX512 ? "avx512" : p == GT__PATH_AVX2 ? "avx2" : "portable";
}

void gt__cpu_ident(char vendor[13], int *family, int *model) {
  memset(vendor, 0, 13);
  *family = *model = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int fam = (int)((a >> 8) & 0xf), mod = (int)((a >> 4) & 0xf);
  if (fam == 0xf) fam += (int)((a >> 20) & 0xff);
  if (fam == 6 || fam >= 0xf) mod += (int)((a >> 16) & 0xf) << 4;
  *family = fam, *model = mod;
#endif
}

/* 0: not decided, 1: no, 2: yes */
static int gt__amx;
static pthread_once_t gt__amx_once = PTHREAD_ONCE_INIT;

static void gt__amx_init(void) {
  gt__amx = 1;
  /* the tile kernels belong to the AVX-512 copy (every CPU with AMX has
   * AVX-512): GT_TEST_KERNELS=portable or avx2 turns them off with it */
  if (gt__kernels_path() != GT__PATH_AVX512) return;
#if defined(__x86_64__) && defined(__linux__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  const unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;
  if ((d & (amx_bf16 | amx_tile)) != (amx_bf16 | amx_tile)) return;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return; /* XTILECFG and XTILEDATA */
  /* Linux keeps the tile data state (8 KiB a thread) off until a process
   * asks: ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18); a tile
   * instruction before it ends the process with SIGILL */
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return;
  gt__amx = 2;
#endif
}

int gt__cpu_amx_bf16(void) {
  pthread_once(&gt__amx_once, gt__amx_init);
  return gt__amx == 2;
}
