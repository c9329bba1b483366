#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "train/train.h"

/* SIGINT/SIGTERM/SIGUSR1: the run finishes its step, checkpoints and
 * returns; the handler resets itself, so a second signal kills. SIGUSR1 is
 * for MPI jobs: Open MPI's mpirun forwards it to every rank, where SIGTERM
 * to mpirun kills the ranks shortly after passing it on (docs/sharding.md). */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

/* The run's last line: its name, how it ended, and the command that
 * continues it (the same arguments with run_name set, so an unnamed run
 * resumes instead of starting another; past the end of a fixed schedule,
 * where every step runs at learning rate 0, with the schedule raised too).
 * A run refused before it had a directory has no name to give. */
static void run_line(const gt_config *cfg, const gt_train_result *res, gt_rc r, int argc, char **argv) {
  if (!res->run_name[0]) return;
  char name[GT_STR_PATH + 16], more[64];
  snprintf(name, sizeof name, "run_name=%s", res->run_name);
  const char *drop[] = {"run_name", "dump_config", NULL}, *drop_steps[] = {"run_name", "dump_config", "steps", NULL};
  char ck[2200];
  snprintf(ck, sizeof ck, "%s/checkpoints", res->run_dir);
  int can_resume = cfg->enable_checkpointing && gt_ckpt_present(ck);
  FILE *f = stdout;
  fflush(stdout);
  if (r && !can_resume) {
    fprintf(f, "%s: ended with the error below, and has no checkpoint to resume from\n", name);
    return;
  }
  if (!r && res->reached_target) {
    fprintf(f, "%s: reached target_eval_loss = %g after step %lld, %lld of %lld steps (exit status %d)%s\n", name,
            cfg->target_eval_loss, res->target_step, res->steps_done, cfg->steps, GT_EXIT_OK,
            can_resume ? "; its checkpoint holds the state" : "");
    fflush(f);
    return;
  }
  if (!r && !res->interrupted) {
    long long next = cfg->steps * 2, S = cfg->learning_rate_schedule_steps;
    /* a fixed schedule that ends before the new steps do: past its end every
     * step runs at learning rate 0 and trains nothing, so it is raised too */
    int past_end = S > 0 && S < next;
    char sched[64];
    snprintf(more, sizeof more, "steps=%lld", next);
    snprintf(sched, sizeof sched, "learning_rate_schedule_steps=%lld", next);
    fprintf(f, "%s: finished, %lld steps (exit status %d)%s", name, cfg->steps, GT_EXIT_OK,
            can_resume ? "; to continue it to step " : "\n");
    if (can_resume) {
      if (past_end)
        fprintf(f,
                "%lld: the learning-rate schedule ends at step %lld (learning_rate_schedule_steps=%lld), past which "
                "every step runs at learning rate 0 and trains nothing, so raise it too (the schedule stretches to "
                "%lld steps: the learning rate jumps)",
                next, S, S, next);
      else if (S > 0)
        fprintf(f, "%lld", next);
      else /* the schedule's length is steps: it stretches */
        fprintf(f, "%lld (the schedule stretches to %lld steps: the learning rate jumps)", next, next);
      if (gt_dist_size() > 1) fprintf(f, " under the same mpirun (%d ranks)", gt_dist_size());
      fputs(": ", f);
      const char *drop_sched[] = {"run_name", "dump_config", "steps", "learning_rate_schedule_steps", NULL};
      const char *extra[] = {name, more, past_end ? sched : NULL, NULL};
      gt_cli_print_command(f, "train", argc, argv, past_end ? drop_sched : drop_steps, extra);
      fputc('\n', f);
    }
    fflush(f);
    return;
  }
  if (!can_resume) {
    fprintf(f, "%s: stopped after step %lld (exit status %d) without a checkpoint (enable_checkpointing=false); "
               "it cannot be resumed\n", name, res->steps_done - 1, GT_EXIT_STOPPED);
    return;
  }
  char under[64] = "";
  if (gt_dist_size() > 1) snprintf(under, sizeof under, " (under the same mpirun, %d ranks)", gt_dist_size());
  if (r)
    fprintf(f, "%s: stopped by the error below; once it is fixed, to resume from its latest checkpoint%s: ", name,
            under);
  else
    fprintf(f, "%s: stopped after step %lld (exit status %d); to resume%s: ", name, res->steps_done - 1,
            GT_EXIT_STOPPED, under);
  const char *extra[] = {name, NULL};
  gt_cli_print_command(f, "train", argc, argv, drop, extra);
  fputc('\n', f);
  fflush(f);
}

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
  if (gt_dist_rank() == 0) {
    gt_cli_bf16_note(&cfg, stdout);
    gt_cli_source_note(&cfg, stdout);
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
  if (gt_dist_rank() == 0) run_line(&cfg, &res, r, argc, argv);
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
  return res.interrupted ? GT_EXIT_STOPPED : GT_EXIT_OK;
}
