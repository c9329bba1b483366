#define _GNU_SOURCE
#include "gt_testutil.h"

#include <check.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

uint64_t gt_test_rand_u64(uint64_t *s) {
  uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

float gt_test_rand_uniform(uint64_t *s, float lo, float hi) {
  double u = (double)(gt_test_rand_u64(s) >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

void gt_test_fill(float *x, int64_t n, uint64_t *s, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) x[i] = gt_test_rand_uniform(s, lo, hi);
}

float *gt_test_alloc_fill(int64_t n, uint64_t *s, float lo, float hi) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  gt_test_fill(x, n, s, lo, hi);
  return x;
}

double gt_test_max_rel_err(const float *a, const float *b, int64_t n, double floor) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double m = fabs((double)b[i]);
    if (m < floor) m = floor;
    double r = d / m;
    if (!(r <= worst)) worst = r; /* NaN propagates as the worst */
  }
  return worst;
}

double gt_test_max_abs_err(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

double gt_test_norm_rel_err(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  if (den == 0) return sqrt(num);
  return sqrt(num / den);
}

char *gt_test_mkdtemp(const char *tag) {
  char *p = NULL;
  if (asprintf(&p, "/tmp/gt_test_%s_XXXXXX", tag) < 0) return NULL;
  if (!mkdtemp(p)) {
    free(p);
    return NULL;
  }
  return p;
}

int gt_test_system(const char *fmt, ...) {
  char *cmd = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&cmd, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  int st = system(cmd);
  free(cmd);
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

char *gt_test_read_file(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return NULL;
  }
  buf[n] = '\0';
  fclose(f);
  if (len) *len = n;
  return buf;
}

int gt_test_run_suite(Suite *s, int nofork) {
  SRunner *sr = srunner_create(s);
  if (nofork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
