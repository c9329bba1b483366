#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config/yaml.h"
#include "dist/dist.h"

int gt_cli_load_config(int argc, char **argv, gt_config *cfg) {
  const char *user = NULL;
  int first = 0;
  /* main puts options first; the command has taken its own */
  if (argc > 0 && argv[0][0] == '-' && argv[0][1]) {
    fprintf(stderr, "gemtrain: unknown option '%s'\n", argv[0]);
    return 2;
  }
  if (argc > 0 && !strchr(argv[0], '=')) {
    size_t n = strlen(argv[0]);
    if ((n > 5 && !strcmp(argv[0] + n - 5, ".json")) || gt_config_path_is_yaml(argv[0])) {
      user = argv[0];
      first = 1;
    } else {
      fprintf(stderr, "gemtrain: argument '%s' is neither a config file (.json, or MaxText's .yml) nor key=value\n",
              argv[0]);
      return 2;
    }
  }
  gt_err err;
  gt_err_clear(&err);
  if (gt_config_load(cfg, NULL, user, argc - first, (const char *const *)argv + first, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 2;
  }
  /* MaxText keys accepted with no effect: one line each, on stderr (stdout
   * may be a command's JSON), from one rank */
  if (cfg->notes[0] && gt_dist_rank() == 0) fputs(cfg->notes, stderr);
  return 0;
}

int gt_cli_exit_code(gt_rc rc) {
  switch (rc) {
    case GT_OK: return GT_EXIT_OK;
    case GT_ERR_CONFIG: return GT_EXIT_CONFIG;
    case GT_ERR_PLAN: return GT_EXIT_PLAN;
    case GT_ERR_NUMERIC: return GT_EXIT_NUMERIC;
    default: return GT_EXIT_ERROR;
  }
}

const char *gt_cli_prog = "gemtrain";

/* An argument as a POSIX shell reads it back: as it is when it holds only
 * characters no shell treats specially, else in single quotes. */
static void gt__shell_word(FILE *f, const char *a) {
  int plain = *a != '\0';
  for (const char *p = a; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("_-+=.,/:@%^", *p))) plain = 0;
  if (plain) {
    fputs(a, f);
    return;
  }
  fputc('\'', f);
  for (const char *p = a; *p; p++)
    if (*p == '\'') fputs("'\\''", f);
    else fputc(*p, f);
  fputc('\'', f);
}

void gt_cli_print_command(FILE *f, const char *cmd, int argc, char **argv, const char *const *drop_keys,
                          const char *const *extra) {
  gt__shell_word(f, gt_cli_prog);
  fprintf(f, " %s", cmd);
  for (int i = 0; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    int drop = 0;
    for (int k = 0; eq && drop_keys && drop_keys[k]; k++)
      drop |= strlen(drop_keys[k]) == (size_t)(eq - argv[i]) && !strncmp(argv[i], drop_keys[k], (size_t)(eq - argv[i]));
    if (drop) continue;
    fputc(' ', f);
    gt__shell_word(f, argv[i]);
  }
  for (int k = 0; extra && extra[k]; k++) {
    fputc(' ', f);
    gt__shell_word(f, extra[k]);
  }
}
