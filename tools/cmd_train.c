#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "train/train.h"

int gt_cmd_train(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      gt_config c;
      gt_err e;
      printf("usage: gemtrain train [config.json] [key=value ...]\n\nkeys (defaults from configs/base.json"
             " and the default preset):\n");
      if (gt_config_load(&c, NULL, NULL, 0, NULL, &e) == GT_OK)
        gt_config_print_help(stdout, &c);
      else
        gt_config_print_help(stdout, NULL);
      return 0;
    }
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  if (cfg.dump_config) {
    char *s = gt_config_to_json(&cfg);
    printf("%s\n", s);
    free(s);
    return 0;
  }
  gt_train_opts o = {stdout, isatty(STDERR_FILENO) ? stderr : NULL, 1};
  gt_train_result res;
  gt_err err;
  gt_err_clear(&err);
  gt_rc r = gt_train(&cfg, &o, &res, &err);
  if (r) {
    fflush(stdout);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return gt_cli_exit_code(r);
  }
  return 0;
}
