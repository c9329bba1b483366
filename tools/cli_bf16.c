/* Whether dtype=bfloat16 is the slower path on this CPU, said in one line
 * by `gemtrain train` and `gemtrain bench` before they start. The bf16
 * GEMM's speed follows the machine's bf16 dot-product peak against its
 * float32 FMA peak (docs/precision.md): on Zen 4 vdpbf16ps runs at twice the
 * FMA rate and a bf16 step at 1.7-2.2x the float32 one; on an Intel Xeon
 * with AVX512_BF16 at half of it, and the bf16 step at 0.55x; without
 * AVX512_BF16 the products are emulated with float32 FMAs (or, without
 * AVX-512, rounded float32 copies), which is never faster than float32. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

const char *gt_cli_bf16_verdict(int kernel, double bf16_peak, double fma_peak) {
  if (kernel == 0) return "this CPU has no AVX-512: bf16 products are rounded float32 copies multiplied in float32";
  if (kernel == 1) return "its bf16 products are emulated with float32 FMAs (no AVX512_BF16, or GEMTRAIN_NO_AVX512BF16)";
  if (!(bf16_peak > 0) || !(fma_peak > 0)) return NULL; /* nothing measured: no claim */
  if (bf16_peak < fma_peak) return "its vdpbf16ps peak is below its float32 FMA peak";
  return NULL;
}

void gt_cli_bf16_note(const gt_config *cfg, FILE *f) {
  if (strcmp(cfg->dtype, "bfloat16") || strcmp(cfg->matmul_precision, "default")) return;
  int kernel = gt__bgemm_kernel();
  double bf = 0, fm = 0;
  /* one thread each, briefly: a ratio of peaks, not a benchmark */
  if (kernel == 2) bf = gt_bf16_peak_gflops(1, 0.02), fm = gt_fma_peak_gflops(1, 0.02);
  const char *why = gt_cli_bf16_verdict(kernel, bf, fm);
  if (!why) return;
  if (kernel == 2)
    fprintf(f,
            "note: dtype=bfloat16 is likely slower than float32 on this CPU: %s (%.0f against %.0f GFLOP/s on 1 "
            "thread); docs/precision.md says where bf16 is faster\n",
            why, bf, fm);
  else
    fprintf(f, "note: dtype=bfloat16 is likely slower than float32 on this CPU: %s; docs/precision.md says where bf16 "
               "is faster\n", why);
  fflush(f);
}
