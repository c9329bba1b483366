/* The one place that decides how many threads compute outside a mesh; the
 * cores are counted from the affinity mask. */
#define _GNU_SOURCE
#include "base/threads.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/team.h"

int gt_threads_local_ranks(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return 1;
}

int gt_threads_process_cores(void) {
  cpu_set_t set;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int procs = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
  if (procs < 1) procs = 1;
  /* a mask smaller than the host is the launcher's binding: ours alone */
  int ranks = online > 0 && procs < online ? 1 : gt_threads_local_ranks();
  int n = procs / ranks;
  return n < 1 ? 1 : n;
}

int gt_threads_count(long long threads_per_device, long long num_devices) {
  long long n = threads_per_device;
  if (n <= 0) n = gt_threads_process_cores() / (num_devices > 0 ? num_devices : 1);
  if (n < 1) n = 1;
  if (n > 1024) n = 1024;
  return (int)n;
}

int gt_threads_use(long long threads_per_device, long long num_devices) {
  return gt_team_set_process(gt_threads_count(threads_per_device, num_devices));
}
