/* The one place that decides how many threads compute. OpenBLAS is linked as
 * its OpenMP build, so BLAS and our own kernels share one OpenMP pool: outside
 * a parallel region a BLAS call uses omp_get_max_threads() threads, inside one
 * (a device's worker thread) it runs on the calling thread. We never call
 * openblas_set_num_threads (in that build it would also resize our pool). */
#include <omp.h>

#include "train/train.h"

int gt_threads_configure(const gt_config *cfg) {
  int n = (int)cfg->threads_per_device;
  if (n <= 0) {
    n = omp_get_num_procs() / (int)cfg->num_devices;
    if (n < 1) n = 1;
  }
  omp_set_num_threads(n);
  return n;
}
