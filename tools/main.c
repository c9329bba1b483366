#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dist/dist.h"
#include "base/common.h"

/* What main needs to know of a command's arguments to print its help and to
 * let options stand anywhere, so no command re-implements either. */
typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  /* mode words the command reads only as its first argument (bench remat):
   * the first positional argument, if it is one, is put back in front */
  const char *const *words;
  /* options whose value is the next argument (--steps N); --steps=N is
   * passed on as --steps N */
  const char *const *value_opts;
  /* positional arguments are file names that may contain '=' (convert's
   * <src> <out_dir>, tokenize's FILE...): only options move, the rest keeps
   * its order for the command's own parser */
  int files;
} command;

static const char *const bench_words[] = {"remat", "devices", "checkpoint", "mpi", "gemm", "attention", "moe", NULL};
static const char *const bench_value_opts[] = {"--steps", "--mib", "--reps", NULL};
static const char *const data_value_opts[] = {"--batches", "--rows", "--time", NULL};
static const char *const eval_value_opts[] = {"--json", "--format", "--samples", "--limit", NULL};

static const command commands[] = {
    {"train", gt_cmd_train, NULL, NULL, 0},
    {"plan", gt_cmd_plan, NULL, NULL, 0},
    {"bench", gt_cmd_bench, bench_words, bench_value_opts, 0},
    {"sweep", gt_cmd_sweep, NULL, NULL, 0},
    {"convert", gt_cmd_convert, NULL, NULL, 1},
    {"logit-check", gt_cmd_logit_check, NULL, NULL, 0},
    {"decode", gt_cmd_decode, NULL, NULL, 0},
    {"eval", gt_cmd_eval, NULL, eval_value_opts, 0},
    {"tokenize", gt_cmd_tokenize, NULL, NULL, 1},
    {"data", gt_cmd_data, NULL, data_value_opts, 0},
};

static int in_list(const char *const *list, const char *s) {
  for (int i = 0; list && list[i]; i++)
    if (!strcmp(list[i], s)) return i;
  return -1;
}

/* An option is any argument that starts with '-' (a lone "-" is not); no
 * command takes a positional argument or a key of that form, and a value such
 * as learning_rate=-1 starts with its key. */
static int is_option(const char *a) { return a[0] == '-' && a[1]; }

/* The command's arguments in the order every parser accepts: its mode word
 * (bench remat), the options (each with its value), the positional
 * arguments (config.json, sweep.json), then key=value, each group in its
 * given order. So options and files may stand anywhere among the keys
 * without any parser looking past its own group. It cannot change what a
 * working command line means: each parser already required this order (or,
 * for decode, convert and tokenize, read options wherever they stand),
 * key=value keeps its order (later wins) and so do positional arguments.
 * An argument with '=' is key=value because gt_cli_load_config and sweep
 * already refuse a config or sweep file name with '='; commands whose files
 * may hold one are marked `files` and only their options move.
 * Sets *help (--help or -h among the options) and *sub (the mode word).
 * Returns the new arguments (NULL-terminated, *n of them; free it), or NULL
 * to leave argv as it is: an option whose value is missing, which the
 * command reports, or no memory. */
static char **reorder(const command *c, int argc, char **argv, int *n, int *help, const char **sub) {
  /* one block: out (argc + 1, or 2 per --opt=value), opt, pos, kv */
  size_t cap = 2 * (size_t)argc + 1;
  char **out = malloc(sizeof(char *) * 4 * cap);
  *help = 0;
  *sub = NULL;
  if (!out) return NULL;
  char **opt = out + cap, **pos = out + 2 * cap, **kv = out + 3 * cap;
  int n_opt = 0, n_pos = 0, n_kv = 0, keep = 0;
  for (int i = 0; i < argc; i++) {
    char *a = argv[i];
    int keyval = !c->files && strchr(a, '=') != NULL;
    if (!is_option(a)) {
      if (n_pos == 0 && !keyval && in_list(c->words, a) >= 0) *sub = a;
      if (keyval)
        kv[n_kv++] = a;
      else
        pos[n_pos++] = a;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) *help = 1;
    if (in_list(c->value_opts, a) >= 0) {
      if (i + 1 >= argc) {
        keep = 1;
        break;
      }
      opt[n_opt++] = a;
      opt[n_opt++] = argv[++i];
      continue;
    }
    const char *eq = strchr(a, '=');
    int v = -1;
    for (int k = 0; eq && eq[1] && c->value_opts && c->value_opts[k]; k++)
      if (strlen(c->value_opts[k]) == (size_t)(eq - a) && !strncmp(c->value_opts[k], a, (size_t)(eq - a))) v = k;
    if (v >= 0) { /* --steps=N: the table's string names the option, the value stays in argv[i] */
      opt[n_opt++] = (char *)c->value_opts[v];
      opt[n_opt++] = (char *)eq + 1;
    } else {
      opt[n_opt++] = a;
    }
  }
  if (keep) {
    free(out);
    return NULL;
  }
  int k = 0, p0 = 0;
  if (*sub) out[k++] = pos[p0++];
  for (int i = 0; i < n_opt; i++) out[k++] = opt[i];
  for (int i = p0; i < n_pos; i++) out[k++] = pos[i];
  for (int i = 0; i < n_kv; i++) out[k++] = kv[i];
  out[k] = NULL;
  *n = k;
  return out;
}

/* `--steps 10` and `--steps=10` where the command takes keys as key=value:
 * the line that says so names the key=value to write. Only for an option
 * that names a configuration key and is not the command's own (bench
 * --steps); for the commands whose options are all known here. */
static int option_is_key(const command *c, int argc, char **argv) {
  static const char *const keyed[] = {"train", "plan", "bench", "sweep", NULL};
  if (in_list(keyed, c->name) < 0) return 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!is_option(a)) continue;
    char key[128];
    const char *name = a + (a[1] == '-' ? 2 : 1), *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (len == 0 || len >= sizeof key) continue;
    /* the command's own option, as --steps or --steps=N */
    snprintf(key, sizeof key, "%.*s", (int)((size_t)(name - a) + len), a);
    if (in_list(c->value_opts, key) >= 0) continue;
    for (size_t k = 0; k < len; k++) key[k] = name[k] == '-' ? '_' : name[k];
    key[len] = '\0';
    if (!gt_config_key(key)) continue;
    const char *v = eq ? eq + 1 : (i + 1 < argc && !is_option(argv[i + 1]) && !strchr(argv[i + 1], '=')) ? argv[i + 1] : "...";
    fprintf(stderr, "gemtrain %s: unknown option '%s'; configuration keys are written key=value: %s=%s\n", c->name, a,
            key, v);
    return 1;
  }
  return 0;
}

static int run_command(const command *c, int argc, char **argv) {
  int n = 0, help;
  const char *sub;
  if (option_is_key(c, argc, argv)) return GT_EXIT_CONFIG;
  char **out = reorder(c, argc, argv, &n, &help, &sub);
  int rc;
  if (help) {
    rc = gt_cli_help(stdout, c->name, sub) ? GT_EXIT_ERROR : GT_EXIT_OK;
  } else {
    /* under mpirun every rank runs the command (SPMD); without a launcher
     * MPI is never started and this is one process as always */
    gt_err err;
    gt_err_clear(&err);
    if (gt_dist_init(&err)) {
      fprintf(stderr, "gemtrain: %s\n", err.msg);
      free(out);
      return GT_EXIT_CONFIG;
    }
    rc = out ? c->run(n, out) : c->run(argc, argv);
    gt_dist_finalize();
  }
  free(out);
  return rc;
}



int main(int argc, char **argv) {
  if (argc > 0 && argv[0] && argv[0][0]) gt_cli_prog = argv[0];
  /* A step frees and re-allocates the same activation buffers; keep them in
   * the heap (no mmap per buffer, no trimming) so each step does not pay
   * page faults for memory the previous step just released. Steps run on
   * the mesh's device threads, whose own malloc arenas ignore these settings
   * and hand freed pages back: one arena keeps every thread in the main heap
   * (`gemtrain bench`, one device: 3143 tokens/s with it, 2657 without; the
   * allocation share of the step 3.0% against 12.5%). glibc refuses an
   * M_MMAP_THRESHOLD above 32 MiB, so a larger buffer (logits, a big layer's
   * activations) would still be mmap'ed and unmapped every step: M_MMAP_MAX 0
   * turns mmap off instead, and a trim threshold of -1 never gives the top of
   * the heap back (gemma3-small d640 L12 T512 B4: 229 -> 260 tokens/s). The
   * library leaves malloc's settings alone: this is the program's choice. */
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  mallopt(M_ARENA_MAX, 1);
  gt_cli_install_test_seams(); /* GEMTRAIN_TEST_*: the end-to-end tests' fault injection */
  if (argc < 2) {
    gt_cli_usage(stderr);
    return GT_EXIT_CONFIG;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || (!strcmp(cmd, "help") && argc == 2)) {
    gt_cli_usage(stdout);
    return GT_EXIT_OK;
  }
  if (!strcmp(cmd, "help")) { /* gemtrain help <command> [word] */
    if (gt_cli_help(stdout, argv[2], argc > 3 ? argv[3] : NULL) == 0) return GT_EXIT_OK;
    cmd = argv[2];
  } else if (!strcmp(cmd, "--version")) {
    printf("gemtrain %s\n", gt_version());
    return GT_EXIT_OK;
  } else {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(cmd, commands[i].name)) return run_command(&commands[i], argc - 2, argv + 2);
  }
  /* the commands as the table has them, so the list cannot lag behind it */
  const size_t nc = sizeof commands / sizeof commands[0];
  fprintf(stderr, "gemtrain: unknown command '%s'; expected ", cmd);
  for (size_t i = 0; i < nc; i++)
    fprintf(stderr, "%s%s", commands[i].name, i + 2 < nc ? ", " : i + 1 < nc ? " or " : "");
  fprintf(stderr, " (see gemtrain --help)\n");
  return GT_EXIT_CONFIG;
}
