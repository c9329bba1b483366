/* How many OpenMP parallel regions a gemtrain run opens, and how long the
 * host runs alone between them: an LD_PRELOAD interposer on libgomp's
 * GOMP_parallel (what gcc emits for `#pragma omp parallel`). A region that
 * starts after a gap longer than the spin (GOMP_SPINCOUNT=1000, about 25 us
 * here) finds the pool's threads asleep and pays a futex wake
 * (tools/omp/region_cost.c measures it); docs/performance.md, "One team per
 * step?", uses both. Not part of the build:
 *
 *   gcc -O2 -shared -fPIC tools/omp/regions.c -o /tmp/regions.so -ldl
 *   LD_PRELOAD=/tmp/regions.so build/gemtrain bench --steps 6 ...
 *
 * prints one line at exit; run it for two step counts and subtract to get
 * one step's figures. Counts only the calling thread's regions' starts, from
 * any thread (a mesh worker's regions too), without a lock: the counters are
 * atomics. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* gap classes, upper edges in seconds */
static const double edges[] = {10e-6, 25e-6, 100e-6, 1e-3, 10e-3, 1e30};
#define NCLASS (sizeof edges / sizeof edges[0])
static atomic_long regions, gaps[NCLASS];
static _Thread_local double last_end;

typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

void GOMP_parallel(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags) {
  static gomp_parallel_fn real;
  if (!real) real = (gomp_parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  double t = now();
  if (last_end > 0) {
    size_t c = 0;
    while (t - last_end >= edges[c]) c++;
    atomic_fetch_add(&gaps[c], 1);
  }
  atomic_fetch_add(&regions, 1);
  real(fn, data, nthreads, flags);
  last_end = now();
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr,
          "omp regions: %ld; gaps before them: <10us %ld, 10-25us %ld, 25-100us %ld, 0.1-1ms %ld, 1-10ms %ld, "
          ">10ms %ld\n",
          (long)regions, (long)gaps[0], (long)gaps[1], (long)gaps[2], (long)gaps[3], (long)gaps[4], (long)gaps[5]);
}
