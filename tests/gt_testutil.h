/* Helpers shared by the Check suites: seeded random data and error measures. */
#ifndef GT_TESTUTIL_H
#define GT_TESTUTIL_H

#include <stdint.h>

/* xorshift64* stream; the same seed gives the same numbers everywhere. */
uint64_t gt_test_rand_u64(uint64_t *state);
float gt_test_rand_uniform(uint64_t *state, float lo, float hi);
void gt_test_fill(float *x, int64_t n, uint64_t *state, float lo, float hi);
float *gt_test_alloc_fill(int64_t n, uint64_t *state, float lo, float hi);

/* max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute
 * floor so values near zero do not blow it up. */
double gt_test_max_rel_err(const float *a, const float *b, int64_t n, double floor);
double gt_test_max_abs_err(const float *a, const float *b, int64_t n);
/* ||a-b|| / ||b|| over the whole vector. */
double gt_test_norm_rel_err(const float *a, const float *b, int64_t n);

/* Make a fresh empty directory under /tmp for one test; returns a static-free
 * heap string the caller frees. */
char *gt_test_mkdtemp(const char *tag);
/* Run a shell command, return its exit status (0 = success). */
int gt_test_system(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Read a whole file into a NUL-terminated heap buffer (NULL if missing). */
char *gt_test_read_file(const char *path, long *len);

/* Runs a Check suite (forking each test unless nofork) and returns the
 * process exit status: 0 when every test passed. */
struct Suite;
int gt_test_run_suite(struct Suite *s, int nofork);

#endif
