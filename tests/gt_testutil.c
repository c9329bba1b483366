#define _GNU_SOURCE
#include "gt_testutil.h"

#include <check.h>

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mesh/mesh.h"
#include "train/plan.h"
#include "train/trainer.h"

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

void gt_test_fill_ids(int32_t *ids, int64_t n, uint64_t *s, int64_t lo, int64_t hi) {
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(lo + (int64_t)(gt_test_rand_u64(s) % (uint64_t)(hi - lo)));
}

float *gt_test_copy(const float *x, int64_t n) {
  float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (n > 0) memcpy(y, x, (size_t)n * sizeof(float));
  return y;
}

float *gt_test_zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

double *gt_test_to_double(const float *x, int64_t n) {
  double *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}

int gt_test_same_bits(const float *a, const float *b, int64_t n) {
  return n <= 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* The worst so far, keeping a NaN once seen (`!(x <= worst)` alone would let
 * a later finite value replace it). */
static double worse(double worst, double x) {
  if (isnan(worst)) return worst;
  return (x <= worst) ? worst : x;
}

double gt_test_max_rel_err(const float *a, const float *b, int64_t n, double floor) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double m = fabs((double)b[i]);
    if (m < floor) m = floor;
    worst = worse(worst, d / m);
  }
  return worst;
}

double gt_test_max_abs_err(const float *a, const float *b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) worst = worse(worst, fabs((double)a[i] - (double)b[i]));
  return worst;
}

double gt_test_max_abs(const float *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = worse(m, fabs((double)x[i]));
  return m;
}

double gt_test_scaled_err(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    num = worse(num, fabs((double)a[i] - (double)b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  if (num == 0) return 0;
  return den > 0 ? num / den : num;
}

double gt_test_scaled_err_d(const float *a, const double *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    num = worse(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fabs(b[i]));
  }
  if (num == 0) return 0;
  return den > 0 ? num / den : num;
}

void gt_test_check_err(const char *what, double err, double tol) {
  const char *v = getenv("GT_TEST_VERBOSE");
  if (v && *v && strcmp(v, "0") != 0) printf("  %-60s %10.3g (tol %.1g)\n", what, err, tol);
  ck_assert_msg(err <= tol, "%s: error %.4g above %.4g", what, err, tol);
}

void gt_test_central_diff(double *grad, double *p, int64_t n, double h, gt_test_loss_fn f, void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    const double save = p[i];
    p[i] = save + h;
    const double lp = f(ctx);
    p[i] = save - h;
    const double lm = f(ctx);
    p[i] = save;
    grad[i] = (lp - lm) / (2 * h);
  }
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

/* Every directory gt_test_mkdtemp made, with the process that made it:
 * removed when that process exits, so a test that returns (or fails) without
 * gt_test_rm_rf leaves nothing in /tmp (many did: thousands of directories
 * after a day of test runs). Check runs each test in a forked child, which
 * inherits this list and the atexit handler: the pid keeps a child from
 * removing its parent's directories, such as an unchecked fixture's. */
enum { GT__MAX_TMP = 256 };
static struct {
  char *dir;
  pid_t pid;
} gt__tmp[GT__MAX_TMP];
static int gt__ntmp;

static void gt__tmp_cleanup(void) {
  for (int i = 0; i < gt__ntmp; i++)
    if (gt__tmp[i].pid == getpid()) gt_test_rm_rf(gt__tmp[i].dir);
}

char *gt_test_mkdtemp(const char *tag) {
  char *p = NULL;
  if (asprintf(&p, "/tmp/gt_test_%s_XXXXXX", tag) < 0) return NULL;
  if (!mkdtemp(p)) {
    free(p);
    return NULL;
  }
  if (gt__ntmp == 0) atexit(gt__tmp_cleanup);
  if (gt__ntmp < GT__MAX_TMP) {
    gt__tmp[gt__ntmp].dir = strdup(p);
    gt__tmp[gt__ntmp].pid = getpid();
    if (gt__tmp[gt__ntmp].dir) gt__ntmp++;
  }
  return p;
}

char *gt_test_path(const char *dir, const char *name) {
  char *p = NULL;
  ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
  return p;
}

void gt_test_rm_rf(const char *dir) {
  if (dir) gt_test_system("rm -rf '%s'", dir);
}

char *gt_test_dir;

void gt_test_dir_setup(void) {
  gt_test_dir = gt_test_mkdtemp(program_invocation_short_name);
  ck_assert_ptr_nonnull(gt_test_dir);
}

void gt_test_dir_teardown(void) {
  gt_test_rm_rf(gt_test_dir);
  free(gt_test_dir);
  gt_test_dir = NULL;
}

char *gt_test_dir_path(const char *name) { return gt_test_path(gt_test_dir, name); }

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

char *gt_test_output(const char *fmt, ...) {
  char *cmd = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&cmd, fmt, ap);
  va_end(ap);
  ck_assert(n >= 0);
  FILE *p = popen(cmd, "r");
  ck_assert_msg(p != NULL, "cannot run %s", cmd);
  size_t len = 0, cap = 4096;
  char *out = malloc(cap);
  size_t got;
  while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len - 1 == 0) out = realloc(out, cap *= 2);
  }
  out[len] = '\0';
  int st = pclose(p);
  ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %d)", cmd, st);
  free(cmd);
  return out;
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

void gt_test_write_file(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

void gt_test_write_text(const char *path, const char *text) { gt_test_write_file(path, text, strlen(text)); }

void gt_test_config(gt_config *c, int n, const char *const *ov) {
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, n, ov, &e) == GT_OK, "%s", e.msg);
}

void gt_test_model_build(gt_model *m, const gt_config *c) {
  gt_err e;
  ck_assert_msg(gt_model_build(m, c, &e) == GT_OK, "%s", e.msg);
}

void gt_test_randomize_norms(gt_model *m, uint64_t *s, int around_one) {
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].ndim == 1) {
      float *p = m->params + m->tensors[i].offset;
      gt_test_fill(p, m->tensors[i].numel, s, -0.3f, 0.3f);
      if (around_one && m->norm_offset == 0.0f)
        for (int64_t k = 0; k < m->tensors[i].numel; k++) p[k] += 1.0f;
    }
}

uint64_t gt_test_model_random(gt_model *m, gt_config *c, gt_mem *mem, int n, const char *const *ov, uint64_t seed,
                              int around_one) {
  gt_test_config(c, n, ov);
  gt_mem_init(mem);
  gt_test_model_build(m, c);
  gt_err e;
  ck_assert_msg(gt_model_alloc(m, mem, &e) == GT_OK, "%s", e.msg);
  gt_model_init_params(m, seed, 1.0);
  uint64_t s = seed + 17;
  gt_test_randomize_norms(m, &s, around_one);
  return s;
}

float *gt_test_st_f32(const gt_st_file *f, const char *name, int64_t want) {
  const gt_st_tensor *t = gt_st_find(f, name);
  ck_assert_msg(t != NULL, "fixture lacks tensor %s", name);
  ck_assert_msg(t->numel == want, "%s has %lld elements, want %lld", name, (long long)t->numel, (long long)want);
  float *v = malloc(sizeof(float) * (size_t)(want > 0 ? want : 1));
  gt_err e;
  ck_assert_msg(gt_st_read_f32(t, v, want, &e) == GT_OK, "%s", e.msg);
  return v;
}

TCase *gt_test_tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 0); /* 0: no timer at all */
  suite_add_tcase(s, tc);
  return tc;
}

int gt_test_run_suite(Suite *s, int nofork) {
  SRunner *sr = srunner_create(s);
  if (nofork) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

void gt_test_remat_config(gt_config *c, const char *model, const char *policy, const char *scope, int layers,
                          const char *pattern, int shared) {
  char mn[96], p[96], s[64], l[64], pat[64], sh[64];
  snprintf(mn, sizeof mn, "model_name=%s", model);
  snprintf(p, sizeof p, "remat_policy=%s", policy);
  snprintf(s, sizeof s, "remat_scope=%s", scope);
  snprintf(l, sizeof l, "base_num_decoder_layers=%d", layers);
  snprintf(pat, sizeof pat, "layer_pattern=%s", pattern);
  snprintf(sh, sizeof sh, "num_kv_shared_layers=%d", shared);
  const char *ov[] = {mn, "max_target_length=24", "sliding_window_size=7", "per_device_batch_size=2",
                      p, s, l, pat, "query_proj=device", "context=device", "mlpwo=offload", sh};
  gt_test_config(c, 12, ov);
}

float *gt_test_shard_of(const gt_model *m, const float *full, int r, int S) {
  int64_t n = 0;
  for (int64_t u = 0; u < gt_model_n_units(m); u++) {
    int64_t off, cnt;
    gt_model_unit(m, u, &off, &cnt);
    n += gt_shard_len(cnt, S, r);
  }
  float *out = malloc(sizeof(float) * (size_t)(n ? n : 1)), *o = out;
  for (int64_t u = 0; u < gt_model_n_units(m); u++) {
    int64_t off, cnt;
    gt_model_unit(m, u, &off, &cnt);
    int64_t b = gt_shard_begin(cnt, S, r), k = gt_shard_len(cnt, S, r);
    memcpy(o, full + off + b, sizeof(float) * (size_t)k);
    o += k;
  }
  return out;
}

void gt_test_state_make(gt_test_state *f, const char *override, uint64_t seed) {
  const char *ov[] = {"model_name=gemma3-tiny", override};
  gt_test_config(&f->cfg, 2, ov);
  gt_test_model_build(&f->m, &f->cfg);
  uint64_t s = seed;
  f->p = gt_test_alloc_fill(f->m.n_params, &s, -1, 1);
  f->mu = gt_test_alloc_fill(f->m.n_params, &s, -1, 1);
  f->nu = gt_test_alloc_fill(f->m.n_params, &s, 0, 1);
}

void gt_test_state_free(gt_test_state *f) {
  free(f->p), free(f->mu), free(f->nu);
  gt_model_free(&f->m);
}

typedef struct gt__test_thread {
  void (*fn)(void *, int);
  void *arg;
  int t;
} gt__test_thread;

static void *gt__test_thread_main(void *p) {
  gt__test_thread *x = p;
  x->fn(x->arg, x->t);
  return NULL;
}

void gt_test_on_threads(int n, void (*fn)(void *arg, int t), void *arg) {
  pthread_t th[16];
  gt__test_thread x[16];
  ck_assert_int_le(n, 16);
  for (int t = 0; t < n; t++) {
    x[t] = (gt__test_thread){fn, arg, t};
    ck_assert_int_eq(pthread_create(&th[t], NULL, gt__test_thread_main, &x[t]), 0);
  }
  for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
}

void gt_test_plan_matches(const gt_plan *p, gt_trainer *tr, const char *what) {
  gt_fsdp *fs = gt_trainer_fsdp(tr);
  int64_t cat[GT_MEM_NCAT] = {0}, total = 0;
  for (int dv = 0; dv < gt_fsdp_devices(fs); dv++) {
    gt_mem *mem = gt_fsdp_device_mem(fs, dv);
    for (int j = 0; j < GT_MEM_NCAT; j++)
      if (gt_mem_peak(mem, (gt_mem_cat)j) > cat[j]) cat[j] = gt_mem_peak(mem, (gt_mem_cat)j);
    if (gt_mem_total_peak(mem) > total) total = gt_mem_total_peak(mem);
  }
  for (int j = 0; j < GT_MEM_NCAT; j++)
    ck_assert_msg(cat[j] == p->cat_peak[j], "%s: %s measured %lld, planned %lld", what, gt_mem_cat_name((gt_mem_cat)j),
                  (long long)cat[j], (long long)p->cat_peak[j]);
  ck_assert_msg(total == p->peak_total, "%s: total measured %lld, planned %lld", what, (long long)total,
                (long long)p->peak_total);
}
