/* The gemtrain command: one file per subcommand. */
#ifndef GT_CLI_H
#define GT_CLI_H

#include "gemtrain/config.h"

/* Split argv into an optional leading *.json config file and key=value
 * overrides, load and validate. Prints the error and returns non-zero. */
int gt_cli_load_config(int argc, char **argv, gt_config *cfg);
int gt_cmd_train(int argc, char **argv);
int gt_cmd_bench(int argc, char **argv);
int gt_cmd_plan(int argc, char **argv);
int gt_cmd_sweep(int argc, char **argv);
int gt_cmd_tokenize(int argc, char **argv);

#endif
