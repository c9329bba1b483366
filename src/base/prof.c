#define _POSIX_C_SOURCE 200809L
#include "base/prof.h"

#include <time.h>

#include "base/trace.h"

double gt_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *gt_prof_cat_name(gt_prof_cat c) {
  static const char *n[GT_PROF_NCAT] = {"matmul", "attention", "softmax-xent", "elementwise", "optimizer"};
  return (int)c >= 0 && c < GT_PROF_NCAT ? n[c] : "?";
}

void gt_prof_span(gt_prof *p, gt_prof_cat cat, const char *stmt, double t0, double t1) {
  gt_trace_stmt(p->trace, stmt, gt_prof_cat_name(cat), t0, t1);
}
