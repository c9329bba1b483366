/* The golden-logits reader (JSON Lines, streamed): any file through
 * gt_golden_read; for a file it accepts, each sequence's logits are compared
 * with themselves shifted by one position (gt_logit_compare, top-k), as
 * logit-check does with the model's. */
#include "fuzz_util.h" /* first: it sets _POSIX_C_SOURCE */
#include <stdlib.h>

#include "decode/logitcheck.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gt_fuzz_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return -1;
  const char *path = gt_fuzz_write("input.jsonl", data, size);
  gt_golden g;
  gt_err e;
  gt_rc rc = gt_golden_read(path, &g, &e);
  gt_fuzz_note("read", rc ? e.msg : "accepted");
  if (!rc) {
    for (int s = 0; s < g.n; s++) {
      const gt_golden_seq *q = &g.seqs[s];
      if (q->n_tokens < 1 || q->vocab < 1 || q->vocab > (1 << 16)) continue;
      gt_logit_cmp c;
      /* rows 1.. against rows 0..; a one-token sequence against itself */
      int np = q->n_tokens > 1 ? q->n_tokens - 1 : 1;
      const float *model = q->logits + (q->n_tokens > 1 ? q->vocab : 0);
      int64_t vm = q->vocab > 1 && s % 2 ? q->vocab - 1 : q->vocab; /* a smaller model vocabulary too */
      if (gt_logit_compare(model, q->vocab, q->logits, q->vocab, np, &c, &e) == GT_OK) gt_logit_cmp_free(&c);
      if (vm != q->vocab && gt_logit_compare(q->logits, vm, q->logits, q->vocab, 1, &c, &e) == GT_OK)
        gt_logit_cmp_free(&c);
    }
    gt_golden_free(&g);
  }
  gt_fuzz_check_quiet();
  return 0;
}
