/* The program's OpenMP wait policy (issue 18, "threads that share well").
 *
 * Why here, and why a re-exec. OpenMP's worker threads wait for each other at
 * the end of every parallel region and between regions. libgomp (GCC's
 * OpenMP runtime, which our kernels and the OpenMP build of OpenBLAS share)
 * spins GOMP_SPINCOUNT times (300000 when neither OMP_WAIT_POLICY nor
 * GOMP_SPINCOUNT is set: a few milliseconds) before it sleeps on a futex. On
 * a machine where another process wants one of the cores, a spinning waiter
 * keeps the thread it waits for off the CPU and a step collapses to a third of
 * its quiet speed. libgomp reads both variables once, in its constructor,
 * before main() runs, and has no API to change the spin afterwards (omp.h
 * only sets the thread count, schedule and nesting). So main() calls this
 * first: when the user set neither variable, put the measured spin count into
 * the environment and execute the same program again, which then starts with
 * it. The user's own setting always wins (either variable, any value, even
 * one libgomp ignores).
 *
 * The value, measured with tools/bench_shared.sh (the tiny model of issue 18:
 * V4096 d256 L6, B8 T256, remat none, 5 steps; 2-core AMD EPYC Zen 4, where a
 * pause takes ~25 ns, so 1000 spins are ~25 us; tokens/s, medians of 2 runs
 * (4 where a setting was in both sessions), quiet and with
 * `sh -c 'while :; do :; done'` on one core; quiet runs of one setting vary
 * by up to 20% from run to run on this shared machine):
 *
 *   GOMP_SPINCOUNT            quiet   one core busy   busy/quiet
 *   300000 (libgomp default)  3242     1080            33%
 *   30000                     3223      942            29%
 *   10000                     3555     1326            37%
 *   3000                      3412     1560            46%
 *   1000 (chosen)             3071     1636            53%
 *   300                       3025     1721            57%
 *   100                       3327     1753            53%
 *   0                         3109     1739            56%
 *   OMP_WAIT_POLICY=PASSIVE   3025     1698            56%
 *
 * At 3000 and above a busy core costs more than a passive wait does and the
 * busy figure falls towards the collapse; from 1000 down the busy figures are
 * alike, and the quiet ones are within the noise of each other (the passive
 * ones a little lower). 1000 keeps a short spin for the quiet case (a
 * balanced barrier completes within it) at the same busy speed. On the small
 * model (d640 L12, B4 T512, 3 steps) 1000 gave 297 quiet and 170 busy
 * tokens/s (57%) against 301 and 160 (53%) with the default.
 *
 * Guards. The re-executed program sees GOMP_SPINCOUNT set and does not
 * execute again; GEMTRAIN_WAIT_REEXEC marks that it was us (if something
 * strips GOMP_SPINCOUNT on the way, the mark alone stops a second exec). The
 * process keeps its pid, arguments (argv[0] too), open files, signal
 * dispositions and mask, so a parent (a shell, mpirun, the sweep runner)
 * sees the same process and the same exit status. If the exec fails (no
 * /proc), the program runs on with libgomp's default and the environment
 * restored. Children (the sweep runner's) inherit the variable and so start
 * with the same policy without executing twice. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>

#include "base/threads.h"
#include "cli.h"

/* GOMP_SPINCOUNT chosen from the table above (the library's header names
 * it for library users too). */
#define GT__SPINCOUNT GT_THREADS_GOMP_SPINCOUNT
#define GT__REEXEC_MARK "GEMTRAIN_WAIT_REEXEC"

void gt_cli_wait_policy(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return; /* the user's, or ours after the exec */
  if (getenv(GT__REEXEC_MARK)) return;                              /* executed once already: never twice */
  if (setenv("GOMP_SPINCOUNT", GT__SPINCOUNT, 1) || setenv(GT__REEXEC_MARK, GT__SPINCOUNT, 1)) {
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(GT__REEXEC_MARK);
    return;
  }
  execv("/proc/self/exe", argv);
  /* still here: the exec failed; run on as we are, the environment as it was */
  unsetenv("GOMP_SPINCOUNT");
  unsetenv(GT__REEXEC_MARK);
}
