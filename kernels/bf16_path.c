/* gt_bgemm's path choice (kernels/bf16_path.h, docs/cpus.md). Compiled for
 * baseline x86-64: it runs no vector code itself. */
#include "kernels/bf16_path.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"

/* CPUs whose vdpbf16ps rate against the FMA peak (1 thread, as
 * `gemtrain bench gemm` measures both: 2 flops per product) is known.
 * Family 25 is AMD's Zen 3 and Zen 4; only Zen 4 has AVX512_BF16 (and the
 * row applies only with it). Intel's family 6 model 143 (Sapphire Rapids)
 * has the core of model 207 (Emerald Rapids) and is taken to have its
 * ratio; not measured. */
static const struct {
  const char *vendor;
  int family, model; /* model -1: every model of the family */
  double ratio;
  const char *name;
} gt__bf16_rows[] = {
    {"AuthenticAMD", 25, -1, 231.0 / 116.0, "AMD Zen 4 (family 25)"},
    {"GenuineIntel", 6, 207, 92.0 / 185.0, "Intel Xeon family 6 model 207 (Emerald Rapids)"},
    {"GenuineIntel", 6, 143, 92.0 / 185.0, "Intel Xeon family 6 model 143 (Sapphire Rapids, as model 207)"},
};

int gt__bf16_table(const char *vendor, int family, int model, double *ratio, const char **name) {
  for (size_t i = 0; i < sizeof gt__bf16_rows / sizeof gt__bf16_rows[0]; i++)
    if (strcmp(vendor, gt__bf16_rows[i].vendor) == 0 && family == gt__bf16_rows[i].family &&
        (gt__bf16_rows[i].model < 0 || model == gt__bf16_rows[i].model)) {
      *ratio = gt__bf16_rows[i].ratio;
      if (name) *name = gt__bf16_rows[i].name;
      return 1;
    }
  return 0;
}

void gt__bf16_decide(const gt__bf16_cpu *cpu, void (*measure)(double *dp, double *fma), gt__bf16_choice *out) {
  memset(out, 0, sizeof *out);
  out->by = GT_BF16_BY_ISA;
  if (!cpu->avx512) {
    out->path = cpu->avx2 ? GT_BGEMM_WIDE : GT_BGEMM_COPY;
    return;
  }
  if (cpu->amx_bf16) {
    out->path = GT_BGEMM_AMX;
    return;
  }
  if (!cpu->avx512bf16) {
    out->path = GT_BGEMM_WIDE;
    return;
  }
  if (gt__bf16_table(cpu->vendor, cpu->family, cpu->model, &out->ratio, &out->table)) {
    out->by = GT_BF16_BY_TABLE;
  } else {
    out->by = GT_BF16_BY_MEASURE;
    if (measure) measure(&out->dp, &out->fma);
    out->ratio = out->fma > 0 ? out->dp / out->fma : 0;
  }
  out->path = out->ratio >= GT_BF16_DP_MIN ? GT_BGEMM_DP : GT_BGEMM_WIDE;
}

void gt__bf16_cpu_detect(gt__bf16_cpu *cpu) {
  memset(cpu, 0, sizeof *cpu);
  gt__cpu_ident(cpu->vendor, &cpu->family, &cpu->model);
  cpu->avx512 = gt__kernels_avx512();
  cpu->avx2 = gt__kernels_path() == GT__PATH_AVX2;
  if (!cpu->avx512) return;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const char *e = getenv("GEMTRAIN_NO_AVX512BF16");
  cpu->avx512bf16 = __builtin_cpu_supports("avx512bf16") && !(e && *e && strcmp(e, "0") != 0);
#endif
  cpu->amx_bf16 = cpu->avx512bf16 && gt__cpu_amx_bf16();
}

/* Best of three short runs each, alternated: a peak is the best rate seen,
 * and alternating keeps a burst of another process's load from landing on
 * one of the two only. About 0.06 s. */
static void gt__bf16_measure(double *dp, double *fma) {
  *dp = *fma = 0;
  for (int i = 0; i < 3; i++) {
    double f = gt_fma_peak_gflops(1, 0.01), d = gt_bf16_peak_gflops(1, 0.01);
    if (f > *fma) *fma = f;
    if (d > *dp) *dp = d;
  }
}

static gt__bf16_choice gt__choice;
static int gt__env_path = -1;
static atomic_int gt__forced = -1;
static pthread_once_t gt__choice_once = PTHREAD_ONCE_INIT;

static void gt__choice_init(void) {
  gt__bf16_cpu cpu;
  gt__bf16_cpu_detect(&cpu);
  gt__bf16_decide(&cpu, gt__bf16_measure, &gt__choice);
  /* the tests' switch (docs/testing.md) */
  const char *e = getenv("GT_TEST_BF16_PATH");
  if (e) {
    if (strcmp(e, "pairs") == 0) gt__env_path = GT_BGEMM_DP;
    else if (strcmp(e, "widened") == 0) gt__env_path = GT_BGEMM_WIDE;
    else if (strcmp(e, "amx") == 0) gt__env_path = GT_BGEMM_AMX;
    else if (strcmp(e, "copies") == 0) gt__env_path = GT_BGEMM_COPY;
  }
}

void gt__bgemm_force_path(int path) { atomic_store(&gt__forced, path); }

/* the path asked for, made runnable: the widened path (kernels/gemm_avx2.c)
 * or the copies on the AVX2 copy, nothing but copies on the portable one,
 * AMX only where usable, vdpbf16ps on its emulation where missing or off */
static int gt__runnable(int p) {
  if (gt__kernels_path() == GT__PATH_AVX2) return p == GT_BGEMM_COPY ? GT_BGEMM_COPY : GT_BGEMM_WIDE;
  if (!gt__kernels_avx512()) return GT_BGEMM_COPY;
  if (p == GT_BGEMM_AMX && !gt__cpu_amx_bf16()) p = gt__choice.path == GT_BGEMM_AMX ? GT_BGEMM_WIDE : gt__choice.path;
  if (p == GT_BGEMM_DP || p == GT_BGEMM_EMUL) p = gt__bgemm_kernel() == 2 ? GT_BGEMM_DP : GT_BGEMM_EMUL;
  return p;
}

int gt__bgemm_path(void) {
  pthread_once(&gt__choice_once, gt__choice_init);
  if (gt__bgemm_fallback_forced() && gt__kernels_avx512()) return GT_BGEMM_EMUL;
  int p = atomic_load(&gt__forced);
  if (p < 0) p = gt__env_path;
  if (p < 0) p = gt__choice.path;
  return gt__runnable(p);
}

void gt__bgemm_choice(gt__bf16_choice *out) {
  pthread_once(&gt__choice_once, gt__choice_init);
  *out = gt__choice;
  int f = atomic_load(&gt__forced);
  if (f < 0) f = gt__env_path;
  if (f >= 0) out->by = GT_BF16_BY_FORCE;
  out->path = gt__bgemm_path();
}

const char *gt__bgemm_path_name(int path) {
  switch (path) {
    case GT_BGEMM_COPY: return "rounded float32 copies (gt_sgemm)";
    case GT_BGEMM_EMUL: return "vdpbf16ps's arithmetic emulated with float32 FMAs";
    case GT_BGEMM_DP: return "vdpbf16ps";
    case GT_BGEMM_WIDE: return "float32 FMA on operands widened from bf16";
    case GT_BGEMM_AMX: return "AMX-BF16 tiles";
    default: return "?";
  }
}
