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
#include <time.h>

#include "base/alloc.h"
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

/* GEMTRAIN_TEST_CKPT_AT="<point>:kill:N" raises SIGKILL the N-th time a
 * save of this process reaches the named point (ckpt/ckpt_seam.h:
 * prepared, half, written, renamed, latest, committed); "<point>:sleep:MS"
 * sleeps MS milliseconds there every time. Either says on stderr
 * "test seam: step_<N> at <point>" first, so a test can wait for it. */
static char g_at_point[32];
static long g_at_n, g_at_seen, g_at_sleep_ms;
static void gt__at_point(void *ctx, const char *point, int64_t step) {
  (void)ctx;
  if (strcmp(point, g_at_point)) return;
  fprintf(stderr, "test seam: step_%08lld at %s\n", (long long)step, point);
  fflush(stderr);
  if (g_at_sleep_ms) {
    struct timespec ts = {g_at_sleep_ms / 1000, (g_at_sleep_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
  } else if (++g_at_seen == g_at_n) {
    raise(SIGKILL);
  }
}

static void gt__install_ckpt_at(void) {
  const char *s = getenv("GEMTRAIN_TEST_CKPT_AT");
  if (!s) return;
  const char *c = strchr(s, ':');
  long n = 0;
  if (c && (size_t)(c - s) < sizeof g_at_point) {
    snprintf(g_at_point, sizeof g_at_point, "%.*s", (int)(c - s), s);
    if (gt__count_after(c + 1, "kill:", &n))
      g_at_n = n;
    else if (gt__count_after(c + 1, "sleep:", &n))
      g_at_sleep_ms = n;
  }
  if (!n) { /* a test that meant to inject a fault must not pass without one */
    fprintf(stderr, "gemtrain: GEMTRAIN_TEST_CKPT_AT='%s' ignored: expected <point>:kill:N or <point>:sleep:MS\n", s);
    return;
  }
  gt__ckpt_set_point_hook(gt__at_point, NULL);
}

void gt_cli_install_test_seams(void) {
  gt__install_ckpt_at();
  /* GEMTRAIN_ARENA=0 serves every step from the heap, =1 from the step
   * arena (the default; base/alloc.h): for comparisons */
  const char *ar = getenv("GEMTRAIN_ARENA");
  if (ar && (!strcmp(ar, "0") || !strcmp(ar, "1"))) gt_mem_arena_set_default(ar[0] == '1');
  /* GEMTRAIN_TEST_CKPT_FAULT="kill:N": SIGKILL half-way through the N-th
   * checkpoint this process writes; "enospc:N": that checkpoint's write
   * fails with ENOSPC there. */
  /* GEMTRAIN_TEST_CKPT_READ_FAULT=N: loading step N fails in this process,
   * as a read error on one host would */
  const char *rf = getenv("GEMTRAIN_TEST_CKPT_READ_FAULT");
  long rn;
  if (rf && gt__count_after(rf, "", &rn))
    gt__ckpt_set_read_fault(rn);
  else if (rf)
    fprintf(stderr, "gemtrain: GEMTRAIN_TEST_CKPT_READ_FAULT='%s' ignored: expected a step N >= 1\n", rf);
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
