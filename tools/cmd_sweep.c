/* gemtrain sweep: run every point of a sweep file as its own `gemtrain
 * train` process and tabulate the results. The command line lives here, the
 * process runner in tools/sweep_runner.c, the sweep file and the results in
 * the library (src/sweep/sweep.h). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sweep_runner.h"

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
  gt_sweep_run_opts o = {exe, argc - first, (const char *const *)argv + first,    retry,
                         dry, stdout,       isatty(STDERR_FILENO) ? stderr : NULL};
  gt_sweep_summary sum;
  gt_rc rc = gt_sweep_run(&s, &o, &sum, &err);
  gt_sweep_free(&s);
  if (rc) {
    fflush(stdout);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return rc == GT_ERR_CONFIG ? GT_EXIT_CONFIG : GT_EXIT_ERROR;
  }
  return GT_EXIT_OK;
}
