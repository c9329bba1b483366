#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "dist/dist.h"
#include "train/train.h"

/* SIGINT/SIGTERM/SIGUSR1: the run finishes its step, checkpoints and
 * returns; the handler resets itself, so a second signal kills. SIGUSR1 is
 * for MPI jobs: Open MPI's mpirun forwards it to every rank, where SIGTERM
 * to mpirun kills the ranks shortly after passing it on (docs/sharding.md). */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

int gt_cmd_train(int argc, char **argv) {
  /* train has no options (main answers --help); main puts them first */
  if (argc > 0 && argv[0][0] == '-' && argv[0][1]) {
    fprintf(stderr, "gemtrain train: unknown option '%s'\n", argv[0]);
    return 2;
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
  gt_train_opts o = {.out = stdout, .progress = isatty(STDERR_FILENO) ? stderr : NULL, .stop = &g_stop};
  gt_cli_train_test_seams(&o);
  struct sigaction sa, old[3];
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old[0]);
  sigaction(SIGTERM, &sa, &old[1]);
  sigaction(SIGUSR1, &sa, &old[2]);
  gt_train_result res;
  gt_err err;
  gt_err_clear(&err);
  gt_rc r = gt_train(&cfg, &o, &res, &err);
  /* The handlers stay until the process exits: over MPI ranks the run
   * stops when any rank was signalled, and a signal that reaches another
   * rank after its loop ended (pkill of every rank, one after the other)
   * must not turn its clean exit into a kill. */
  (void)old;
  if (r) {
    fflush(stdout);
    if (gt_dist_size() == 1) {
      fprintf(stderr, "gemtrain: %s\n", err.msg);
      return gt_cli_exit_code(r);
    }
    /* over MPI ranks: an error every rank agreed on is printed once and
     * every rank exits with it; one this rank saw alone is printed with the
     * rank, and the whole job ends (a peer may be waiting for this rank) */
    if (res.agreed) {
      if (gt_dist_rank() == 0) fprintf(stderr, "gemtrain: %s\n", err.msg);
      return gt_cli_exit_code(r);
    }
    /* a message from the process layer already starts with "rank R: " */
    char own[32];
    snprintf(own, sizeof own, "rank %d: ", gt_dist_rank());
    if (!strncmp(err.msg, own, strlen(own)))
      fprintf(stderr, "gemtrain: rank %d of %d: %s\n", gt_dist_rank(), gt_dist_size(), err.msg + strlen(own));
    else
      fprintf(stderr, "gemtrain: rank %d of %d: %s\n", gt_dist_rank(), gt_dist_size(), err.msg);
    fflush(stderr);
    /* Open MPI forwards a rank's output through its daemon, and MPI_Abort
     * kills the job at once: give the line time to reach the terminal
     * (without this pause it was lost in about half of the runs) */
    struct timespec pause = {0, 500000000};
    nanosleep(&pause, NULL);
    gt_dist_abort(gt_cli_exit_code(r));
  }
  return 0;
}
