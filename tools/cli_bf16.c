/* The bf16 products' path, said in one line by `gemtrain train` and
 * `gemtrain bench` before they start with dtype=bfloat16: which arithmetic
 * the bf16 GEMM runs on this CPU and how that was decided
 * (kernels/bf16_path.h, docs/cpus.md), and a note when bf16 is not the
 * faster dtype here. Where vdpbf16ps runs at twice the FMA rate (Zen 4) or
 * AMX tiles are usable, a bf16 step runs at 1.6-2.8x the float32 one; where
 * vdpbf16ps runs at half the FMA rate (the Intel Xeon of docs/cpus.md) or
 * is missing, the products are float32 FMAs on operands widened from bf16,
 * at the float32 GEMM's rate, and a bf16 step runs at float32's speed
 * (0.99-1.01x measured with that path forced) while keeping bf16's memory
 * savings. Slower than float32: the rounded float32 copies (neither AVX-512
 * nor AVX2), the AVX2 copy's widened path (0.89-1.05x on a Zen 3) and vdpbf16ps's
 * emulation (a test switch). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"

gt_cli_bf16_speed gt_cli_bf16_verdict(int path, double bf16_peak, double fma_peak, const char **why) {
  *why = NULL;
  if (path == GT_BGEMM_COPY) {
    /* the portable kernels' only path; with AVX2 or AVX-512 kernels running
     * only a test switch chooses it */
    *why = gt__kernels_path() == GT__PATH_PORTABLE
               ? "this CPU has neither AVX-512 nor AVX2 (or GT_TEST_KERNELS=portable): bf16 products are rounded "
                 "float32 copies multiplied in float32"
               : "its bf16 products are rounded float32 copies multiplied in float32 (a test switch)";
    return GT_CLI_BF16_SLOWER;
  }
  if (path == GT_BGEMM_EMUL) {
    *why = "its bf16 products are vdpbf16ps's arithmetic emulated with float32 FMAs (a test switch)";
    return GT_CLI_BF16_SLOWER;
  }
  /* the AVX2 copy's widened path: its products at the float32 GEMM's rate,
   * but the bf16 conversions around them are not all folded into the
   * kernels' sweeps as on AVX-512: 0.89-1.05x float32 on a Zen 3 (docs/cpus.md) */
  if (path == GT_BGEMM_WIDE && gt__kernels_path() == GT__PATH_AVX2) {
    *why = "this CPU has no AVX-512: bf16 products are float32 FMAs on operands widened from bf16 (AVX2), and the "
           "bf16 conversions around them cost more than the halved activations save";
    return GT_CLI_BF16_SLOWER;
  }
  /* measured with the path forced: 0.99-1.01x float32 on the Xeon with AMX
   * (docs/performance.md), 0.98x on Zen 4 (docs/cpus.md) */
  if (path == GT_BGEMM_WIDE) {
    *why = "its bf16 products are float32 FMAs on widened operands (no faster bf16 unit here); bf16 halves the "
           "saved activations, not the step time";
    return GT_CLI_BF16_SAME;
  }
  if (path != GT_BGEMM_DP) return GT_CLI_BF16_NO_CLAIM; /* AMX tiles: 2.5-2.8x float32 */
  if (!(bf16_peak > 0) || !(fma_peak > 0)) return GT_CLI_BF16_NO_CLAIM; /* nothing measured */
  if (bf16_peak < fma_peak) {
    *why = "its vdpbf16ps peak is below its float32 FMA peak";
    return GT_CLI_BF16_SLOWER;
  }
  return GT_CLI_BF16_NO_CLAIM;
}

void gt_cli_bf16_how(const gt__bf16_choice *c, char *buf, size_t n) {
  const char *name = gt__bgemm_path_name(c->path);
  switch (c->by) {
    case GT_BF16_BY_FORCE:
      snprintf(buf, n, "%s (forced by a test switch: GT_TEST_BF16_PATH or the tests' seam)", name);
      break;
    case GT_BF16_BY_TABLE:
      snprintf(buf, n, "%s (chosen by the CPU table: %s, vdpbf16ps at %.2fx the FMA rate; vdpbf16ps from %.2fx)",
               name, c->table, c->ratio, GT_BF16_DP_MIN);
      break;
    case GT_BF16_BY_MEASURE:
      snprintf(buf, n,
               "%s (chosen by measurement, the CPU not being in the table: vdpbf16ps %.0f against FMA %.0f GFLOP/s "
               "on 1 thread, %.2fx; vdpbf16ps from %.2fx)",
               name, c->dp, c->fma, c->ratio, GT_BF16_DP_MIN);
      break;
    default:
      snprintf(buf, n, "%s (%s)", name,
               c->path == GT_BGEMM_COPY    ? "neither AVX-512 nor AVX2"
               : c->path == GT_BGEMM_AMX   ? "the CPU and the OS allow AMX-BF16 tiles"
               : gt__kernels_path() == GT__PATH_AVX2 ? "AVX2 and FMA, no AVX-512: kernels/gemm_avx2.c"
                                           : "no AVX512_BF16, or GEMTRAIN_NO_AVX512BF16");
  }
}

void gt_cli_bf16_note(const gt_config *cfg, FILE *f) {
  if (strcmp(cfg->dtype, "bfloat16") || strcmp(cfg->matmul_precision, "default")) return;
  gt__bf16_choice c;
  gt__bgemm_choice(&c);
  char how[512];
  gt_cli_bf16_how(&c, how, sizeof how);
  fprintf(f, "bf16 products: %s\n", how);
  const char *why;
  gt_cli_bf16_speed v = gt_cli_bf16_verdict(c.path, c.dp, c.fma, &why);
  if (v == GT_CLI_BF16_SLOWER)
    fprintf(f, "note: dtype=bfloat16 is likely slower than float32 on this CPU: %s; docs/cpus.md says where bf16 is "
               "faster\n", why);
  else if (v == GT_CLI_BF16_SAME)
    fprintf(f, "note: dtype=bfloat16 runs at about float32's speed on this CPU: %s; docs/cpus.md says where bf16 is "
               "faster\n", why);
  fflush(f);
}
