/* How many cores this process may compute on (see threads.c). */
#ifndef GT_BASE_THREADS_H
#define GT_BASE_THREADS_H

/* The cores this process's OpenMP threads may use: its affinity mask's
 * count, divided among the MPI ranks of this host when they all share one
 * unbound mask (mpirun without core binding, e.g. --oversubscribe), so
 * ranks x devices x threads never exceed the host's cores. At least 1. */
int gt_threads_process_cores(void);
/* MPI ranks on this host as the launcher says (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_SIZE, MPICH/Hydra's MPI_LOCALNRANKS); 1 without. */
int gt_threads_local_ranks(void);

/* The OpenMP wait: libgomp's idle threads spin GOMP_SPINCOUNT times before
 * they sleep (300000 when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set,
 * ~8 ms at the ~25 ns a pause takes on Zen 4). When another process wants a
 * core, a spinning waiter keeps the thread it waits for off it, and a step
 * falls to ~1/3 of its quiet speed (issue 18). libgomp reads both variables
 * once, before main(), and offers no call to change them: the library cannot
 * set them for its user. The gemtrain program executes itself again with
 * this value when the user set neither (tools/cli_threads.c, where the
 * measurements are). A program that links the library (gt_ctx, tests)
 * should start with GOMP_SPINCOUNT=1000 (or OMP_WAIT_POLICY=PASSIVE, a few
 * percent slower on quiet cores) in its environment: the job script, the
 * container, ctest's ENVIRONMENT property. */
#define GT_THREADS_GOMP_SPINCOUNT "1000"

#endif
