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

#endif
