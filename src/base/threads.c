/* The one place that decides how many threads compute. OpenBLAS is linked as
 * its OpenMP build, so BLAS and our own kernels share one OpenMP pool: outside
 * a parallel region a BLAS call uses omp_get_max_threads() threads, inside one
 * (a device's worker thread) it runs on the calling thread. We never call
 * openblas_set_num_threads (in that build it would also resize our pool). */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/threads.h"
#include "train/train.h"

int gt_threads_local_ranks(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return 1;
}

int gt_threads_process_cores(void) {
  int procs = omp_get_num_procs();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (procs < 1) procs = 1;
  /* a mask smaller than the host is the launcher's binding: ours alone */
  int ranks = online > 0 && procs < online ? 1 : gt_threads_local_ranks();
  int n = procs / ranks;
  return n < 1 ? 1 : n;
}

int gt_threads_configure(const gt_config *cfg) {
  int n = (int)cfg->threads_per_device;
  if (n <= 0) {
    n = gt_threads_process_cores() / (int)cfg->num_devices;
    if (n < 1) n = 1;
  }
  omp_set_num_threads(n);
  return n;
}
