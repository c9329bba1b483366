/* The command's test hooks: environment variables that scripts (the
 * end-to-end tests) set to inject faults into a real run. The library reads
 * no environment; this file turns the variables into calls of its test-only
 * seams. Never set them in production. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_seam.h"
#include "cli.h"

/* "<prefix>N" with N a whole number >= 1: *n = N, 1. Else 0. */
static int gt__count_after(const char *s, const char *prefix, long *n) {
  size_t k = strlen(prefix);
  if (strncmp(s, prefix, k)) return 0;
  char *end;
  errno = 0;
  long v = strtol(s + k, &end, 10);
  if (errno || end == s + k || *end || v < 1) return 0;
  *n = v;
  return 1;
}

void gt_cli_install_test_seams(void) {
  /* GEMTRAIN_TEST_CKPT_FAULT="kill:N": SIGKILL half-way through the N-th
   * checkpoint this process writes; "enospc:N": that checkpoint's write
   * fails with ENOSPC there. */
  const char *s = getenv("GEMTRAIN_TEST_CKPT_FAULT");
  if (!s) return;
  long n;
  if (gt__count_after(s, "kill:", &n))
    gt__ckpt_set_fault(GT__CKPT_FAULT_KILL, n);
  else if (gt__count_after(s, "enospc:", &n))
    gt__ckpt_set_fault(GT__CKPT_FAULT_ENOSPC, n);
  else /* a test that meant to inject a fault must not pass without one */
    fprintf(stderr, "gemtrain: GEMTRAIN_TEST_CKPT_FAULT='%s' ignored: expected kill:N or enospc:N (N >= 1)\n", s);
}
