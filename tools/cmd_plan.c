/* gemtrain plan: the memory plan and FLOPs of a training step, nothing
 * allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/plan.h"

int gt_cmd_plan(int argc, char **argv) {
  int json = 0, first = 0;
  while (first < argc && argv[first][0] == '-' && argv[first][1]) {
    if (strcmp(argv[first], "--json")) {
      fprintf(stderr, "gemtrain plan: unknown option '%s'\n", argv[first]);
      return 2;
    }
    json = 1;
    first++;
  }
  gt_config cfg;
  int rc = gt_cli_load_config(argc - first, argv + first, &cfg);
  if (rc) return rc;
  gt_plan p;
  gt_err err;
  gt_err_clear(&err);
  if (gt_plan_compute(&p, &cfg, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 2;
  }
  if (json) {
    char *s = gt_plan_to_json(&p, &cfg);
    printf("%s\n", s);
    free(s);
  } else {
    gt_plan_print(stdout, &p, &cfg);
    int64_t limit = gt_plan_memory_limit(&cfg);
    printf("  memory limit: %.1f MiB (%s): %s\n", (double)limit / 1048576.0,
           cfg.memory_limit_bytes ? "memory_limit_bytes" : "available RAM",
           gt_plan_total_bytes(&p) <= limit ? "fits" : "DOES NOT FIT");
  }
  gt_plan_free(&p);
  return 0;
}
