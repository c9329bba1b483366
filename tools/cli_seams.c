/* The command's test hooks: environment variables that scripts (the
 * end-to-end tests) set to inject faults into a real run. The library reads
 * no environment; this file turns the variables into calls of its test-only
 * seams. Never set them in production. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_seam.h"
#include "cli.h"
#include "train/train.h"

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

/* GEMTRAIN_TEST_NAN_STEP=N poisons step N's gradient (as a diverging step
 * would); GEMTRAIN_TEST_SIGNAL_STEP=N raises SIGTERM after step N, so the
 * real handler path stops the run there. */
static int64_t g_nan_step = -1, g_signal_step = -1;
static void gt__raise_at(const gt_step_metrics *sm, void *ctx) {
  if (sm->step == *(const int64_t *)ctx) raise(SIGTERM);
}

void gt_cli_train_test_seams(gt_train_opts *o) {
  const char *nan_env = getenv("GEMTRAIN_TEST_NAN_STEP"), *sig_env = getenv("GEMTRAIN_TEST_SIGNAL_STEP");
  if (nan_env) g_nan_step = atoll(nan_env), o->test_nan_step = &g_nan_step;
  if (sig_env) g_signal_step = atoll(sig_env), o->test_after_step = gt__raise_at, o->test_ctx = &g_signal_step;
}
