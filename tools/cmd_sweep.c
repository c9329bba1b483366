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

static void sweep_usage(FILE *f) {
  fprintf(f,
          "usage: gemtrain sweep [--retry-failed] [--dry-run] <sweep.json> [key=value ...]\n"
          "Runs each point of the sweep as its own 'gemtrain train' process (run directory\n"
          "<sweep dir>/runs/point-<k>, console log runs/point-<k>.log), then writes results.jsonl,\n"
          "results.md (a table sorted as asked) and plot.svg in the sweep directory\n"
          "(output_directory, default <base_output_directory>/<sweep file stem>).\n"
          "key=value arguments apply to every point and win over the file's keys.\n"
          "A sweep rerun in the same directory skips the points results.jsonl already records;\n"
          "--retry-failed reruns every recorded point whose status is not ok.\n"
          "--dry-run checks every point (config and memory plan) and prints the table; it runs\n"
          "and writes nothing.\n"
          "\n"
          "sweep file keys: base {config, overrides}, grid {key: [values]}, grids [grid, ...],\n"
          "points [{key: value}, ...], steps, metrics [names], sort_by, sort_desc, plot {x, y},\n"
          "max_parallel, point_timeout_s, output_directory, description.\n"
          "\n"
          "statuses, from how a point's process ended: exit 0 ok (with its metrics.jsonl),\n"
          "2 config_error, 3 does_not_fit (the memory plan is over the limit), 4 diverged\n"
          "(a non-finite step), any other exit failed; a signal crashed; killed at point_timeout_s\n"
          "timeout. A point whose configuration is refused never starts: config_error.\n"
          "metrics:");
  for (int i = 0; i < gt_sweep_num_metrics(); i++) fprintf(f, " %s", gt_sweep_metric_name(i));
  fprintf(f, "\n");
}

int gt_cmd_sweep(int argc, char **argv) {
  int retry = 0, dry = 0, first = 0;
  while (first < argc && argv[first][0] == '-') {
    if (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h")) {
      sweep_usage(stdout);
      return 0;
    }
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
