/* gemtrain sweep: run every point of a sweep file as its own `gemtrain
 * train` process and tabulate the results. The command line lives here, the
 * process runner in tools/sweep_runner.c, the sweep file and the results in
 * the library (src/sweep/sweep.h). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sweep_runner.h"

/* SIGINT/SIGTERM: the runner stops starting points and lets the running
 * ones checkpoint (tools/sweep_runner.h) */
static volatile sig_atomic_t g_sweep_stop;
static void on_signal(int sig) { g_sweep_stop = sig; }

int gt_cmd_sweep(int argc, char **argv) {
  int retry = 0, dry = 0, first = 0;
  while (first < argc && argv[first][0] == '-') {
    if (!strcmp(argv[first], "--retry-failed") || !strcmp(argv[first], "--dry-run")) {
      if (argv[first][2] == 'r')
        retry = 1;
      else
        dry = 1;
      first++;
      continue;
    }
    fprintf(stderr, "gemtrain sweep: unknown option '%s' (see gemtrain sweep --help)\n", argv[first]);
    return GT_EXIT_CONFIG;
  }
  if (first >= argc || strchr(argv[first], '=')) {
    fprintf(stderr, "gemtrain sweep: expected a sweep file first: gemtrain sweep <sweep.json> [key=value ...]\n");
    return GT_EXIT_CONFIG;
  }
  const char *file = argv[first++];
  gt_sweep s;
  gt_err err;
  gt_err_clear(&err);
  if (gt_sweep_load(&s, file, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return GT_EXIT_CONFIG;
  }
  /* every point runs this same binary, so a sweep never mixes versions */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    fprintf(stderr, "gemtrain: sweep: cannot find its own binary (/proc/self/exe)\n");
    gt_sweep_free(&s);
    return GT_EXIT_ERROR;
  }
  exe[n] = '\0';
  gt_sweep_run_opts o = {exe,    argc - first, (const char *const *)argv + first,       retry, dry,
                         stdout, isatty(STDERR_FILENO) ? stderr : NULL, &g_sweep_stop};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND; /* a second signal ends the sweep (and, with it, its points) at once */
  sigemptyset(&sa.sa_mask);
  if (!dry) {
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
  }
  gt_sweep_summary sum;
  gt_rc rc = gt_sweep_run(&s, &o, &sum, &err);
  gt_sweep_free(&s);
  if (rc) {
    fflush(stdout);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return rc == GT_ERR_CONFIG ? GT_EXIT_CONFIG : GT_EXIT_ERROR;
  }
  /* the command that continues it: the same one (recorded points are
   * skipped, stopped ones resume from their checkpoints) */
  if (sum.stopped || sum.n_pending) {
    printf("sweep %s: %d of %d point%s finished (%d ok), %d pending; to continue: ",
           sum.stopped == SIGINT ? "stopped by SIGINT" : sum.stopped ? "stopped by SIGTERM" : "not finished",
           sum.n_points - sum.n_pending, sum.n_points,
           sum.n_points == 1 ? "" : "s", sum.n_ok, sum.n_pending);
    gt_cli_print_command(stdout, "sweep", argc, argv, NULL, NULL);
    printf("\n");
    return GT_EXIT_STOPPED;
  }
  if (sum.n_not_ok && !dry) {
    printf("sweep: %d of %d point%s did not end ok (results.md says why); exit status %d%s\n", sum.n_not_ok,
           sum.n_points, sum.n_points == 1 ? "" : "s", GT_EXIT_ERROR,
           retry ? "" : "; --retry-failed runs them again");
    return GT_EXIT_ERROR;
  }
  return GT_EXIT_OK;
}
