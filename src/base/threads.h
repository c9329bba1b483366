/* How many threads compute (see threads.c). */
#ifndef GT_BASE_THREADS_H
#define GT_BASE_THREADS_H

/* The cores this process's threads may use: its affinity mask's count,
 * divided among the MPI ranks of this host when they all share one unbound
 * mask (mpirun without core binding, e.g. --oversubscribe), so ranks x
 * devices x threads never exceed the host's cores. At least 1. */
int gt_threads_process_cores(void);
/* MPI ranks on this host as the launcher says (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_SIZE, MPICH/Hydra's MPI_LOCALNRANKS); 1 without. */
int gt_threads_local_ranks(void);

/* The threads a team outside a mesh gets for these keys: threads_per_device,
 * or cores / num_devices when that is 0 or less; 1 .. 1024. */
int gt_threads_count(long long threads_per_device, long long num_devices);

/* Sizes the process team (base/team.h: the threads kernels called outside a
 * mesh compute with, on a thread that set no team of its own) to
 * gt_threads_count and returns the count. Only for a program that runs one
 * model at a time (the command): it replaces the team that another thread's
 * kernels may be running on. A gt_ctx makes a team of its own (api.c), and
 * mesh devices size their own (mesh.c).
 *
 * The wait. Threads of a team that wait for each other spin a bounded
 * number of pauses (~25 us) and then sleep (team.c has the measurements), so
 * a core that another process takes costs a step about half its speed, not
 * two thirds of it. The count is the library's own: nothing in the
 * environment (GOMP_SPINCOUNT, OMP_WAIT_POLICY, OMP_NUM_THREADS) changes how
 * gemtrain's threads wait or how many there are. OpenBLAS is kept
 * single-threaded (kernels/gemm_fixed.c), so no OpenMP thread pool runs
 * beside the teams. */
int gt_threads_use(long long threads_per_device, long long num_devices);

#endif
