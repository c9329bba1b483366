/* What starting an OpenMP parallel region of 2 threads costs, back to back
 * and after a serial gap of the host: with libgomp's pool the threads are
 * kept, so a start is a wake of threads that still spin (under a
 * microsecond) or that have gone to sleep (a futex wake). Best of 5 rounds
 * of 2000 regions per gap. Not part of the build:
 *
 *   gcc -O2 -fopenmp tools/omp/region_cost.c -o /tmp/region_cost
 *   GOMP_SPINCOUNT=1000 /tmp/region_cost     # gemtrain's own setting
 */
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void busy(double us) {
  double end = now() + us * 1e-6;
  while (now() < end) {
  }
}

int main(void) {
  static const int gap_us[] = {0, 10, 40, 160, 640};
  static volatile int slot[2 * 16]; /* one cache line per thread: no race, no sharing */
  for (size_t g = 0; g < sizeof gap_us / sizeof gap_us[0]; g++) {
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
      const int n = 2000;
      double t0 = now();
      for (int i = 0; i < n; i++) {
        busy(gap_us[g]);
#pragma omp parallel num_threads(2)
        slot[16 * omp_get_thread_num()] = i;
      }
      double per = (now() - t0) / n * 1e6 - gap_us[g];
      if (per < best) best = per;
    }
    printf("gap %3d us before each region: a region costs %.2f us\n", gap_us[g], best);
  }
  return slot[0] < 0;
}
