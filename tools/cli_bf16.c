/* The bf16 products' path, said in one line by `gemtrain train` and
 * `gemtrain bench` before they start with dtype=bfloat16: which arithmetic
 * the bf16 GEMM runs on this CPU and how that was decided
 * (kernels/bf16_path.h, docs/cpus.md), and a note when bf16 is likely the
 * slower dtype here. Where vdpbf16ps runs at twice the FMA rate (Zen 4) the
 * products take it and a bf16 step runs at 1.7-2.2x the float32 one; where
 * it runs at half of it (the Intel Xeon of docs/cpus.md) or is missing, the
 * products are float32 FMAs on operands widened from bf16 in the float32
 * GEMM's packing, at the float32 GEMM's rate, and bf16 keeps its memory
 * savings. Only the rounded float32 copies (no AVX-512) and vdpbf16ps's
 * emulation (a test switch) are slower than float32. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kernels/bf16.h"
#include "kernels/bf16_path.h"
#include "kernels/kernels.h"

const char *gt_cli_bf16_verdict(int path, double bf16_peak, double fma_peak) {
  if (path == GT_BGEMM_COPY) return "this CPU has no AVX-512: bf16 products are rounded float32 copies multiplied in float32";
  if (path == GT_BGEMM_EMUL) return "its bf16 products are vdpbf16ps's arithmetic emulated with float32 FMAs (a test switch)";
  /* measured: 0.98x float32 on Zen 4 forced onto it, 0.91-0.95x on the
   * Xeon with AMX (docs/cpus.md) */
  if (path == GT_BGEMM_WIDE)
    return "its bf16 products are float32 FMAs on widened operands (no faster bf16 unit here), and the conversions "
           "to and from bf16 add a few percent to a step (bf16 halves the saved activations, not the time)";
  if (path != GT_BGEMM_DP) return NULL; /* AMX tiles: about twice float32 */
  if (!(bf16_peak > 0) || !(fma_peak > 0)) return NULL; /* nothing measured: no claim */
  if (bf16_peak < fma_peak) return "its vdpbf16ps peak is below its float32 FMA peak";
  return NULL;
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
               c->path == GT_BGEMM_COPY  ? "no AVX-512"
               : c->path == GT_BGEMM_AMX ? "the CPU and the OS allow AMX-BF16 tiles"
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
  const char *why = gt_cli_bf16_verdict(c.path, c.dp, c.fma);
  if (why)
    fprintf(f, "note: dtype=bfloat16 is likely slower than float32 on this CPU: %s; docs/cpus.md says where bf16 is "
               "faster\n", why);
  fflush(f);
}
