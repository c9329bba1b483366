/* Helpers shared by the Check suites, so each suite states only what it
 * checks: seeded random data, error measures, finite differences, scratch
 * directories and files, configs and models, and running a suite. The
 * helpers that can fail assert through Check (they run inside a test). */
#ifndef GT_TESTUTIL_H
#define GT_TESTUTIL_H

#include <stdint.h>

#include "gt_check.h"
#include "config/config.h"
#include "ckpt/safetensors.h"
#include "model/model.h"

/* ---- threads ---- */

/* fn(arg, t) on n plain threads at once (t = 0..n-1, none of them a team
 * member: callers of the library from threads of their own), joined
 * before it returns. */
void gt_test_on_threads(int n, void (*fn)(void *arg, int t), void *arg);

/* ---- seeded random data ---- */

/* xorshift64* stream; the same seed gives the same numbers everywhere. */
uint64_t gt_test_rand_u64(uint64_t *state);
float gt_test_rand_uniform(uint64_t *state, float lo, float hi);
void gt_test_fill(float *x, int64_t n, uint64_t *state, float lo, float hi);
float *gt_test_alloc_fill(int64_t n, uint64_t *state, float lo, float hi);
/* ids[i] = lo + (a draw mod (hi - lo)): token ids in [lo, hi). */
void gt_test_fill_ids(int32_t *ids, int64_t n, uint64_t *state, int64_t lo, int64_t hi);

/* ---- buffers ---- */

float *gt_test_copy(const float *x, int64_t n);
float *gt_test_zeros(int64_t n);
double *gt_test_to_double(const float *x, int64_t n);
/* 1 when the n floats are bit-identical. */
int gt_test_same_bits(const float *a, const float *b, int64_t n);

/* ---- error measures (a NaN anywhere makes the error NaN, which fails
 * every `err <= tol` check) ---- */

/* max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute
 * floor so values near zero do not blow it up. */
double gt_test_max_rel_err(const float *a, const float *b, int64_t n, double floor);
double gt_test_max_abs_err(const float *a, const float *b, int64_t n);
/* ||a-b|| / ||b|| over the whole vector. */
double gt_test_norm_rel_err(const float *a, const float *b, int64_t n);
/* max_i |x_i|. */
double gt_test_max_abs(const float *x, int64_t n);
/* max|a - b| / max|b|, the error relative to the scale of the result (the
 * plain max|a - b| when b is all zero); a non-finite a is infinitely wrong. */
double gt_test_scaled_err(const float *a, const float *b, int64_t n);
double gt_test_scaled_err_d(const float *a, const double *b, int64_t n);
/* Asserts err <= tol naming `what`; with GT_TEST_VERBOSE=1 in the
 * environment it also prints every error and its tolerance. */
void gt_test_check_err(const char *what, double err, double tol);

/* ---- finite differences ---- */

typedef double (*gt_test_loss_fn)(void *ctx);
/* grad_i = (f(p + h e_i) - f(p - h e_i)) / 2h for every element of p, which
 * f reads through ctx; p is restored. */
void gt_test_central_diff(double *grad, double *p, int64_t n, double h, gt_test_loss_fn f, void *ctx);

/* ---- scratch directories and files ---- */

/* Make a fresh empty directory under /tmp for one test; returns a heap
 * string the caller frees. The directory is removed when the process that
 * made it exits (gt_test_rm_rf removes it sooner). */
char *gt_test_mkdtemp(const char *tag);
/* dir/name as a heap string. */
char *gt_test_path(const char *dir, const char *name);
/* rm -rf dir (NULL is ignored). */
void gt_test_rm_rf(const char *dir);
/* A checked fixture's scratch directory: gt_test_dir_setup makes it (named
 * after the suite's program) in gt_test_dir, gt_test_dir_teardown removes it. */
extern char *gt_test_dir;
void gt_test_dir_setup(void);
void gt_test_dir_teardown(void);
/* gt_test_path(gt_test_dir, name). */
char *gt_test_dir_path(const char *name);
/* Run a shell command, return its exit status (0 = success). */
int gt_test_system(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The standard output of a shell command as a heap string, asserting the
 * command succeeded. */
char *gt_test_output(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Read a whole file into a NUL-terminated heap buffer (NULL if missing). */
char *gt_test_read_file(const char *path, long *len);
/* Write n bytes / a string to path, replacing it; asserts it worked. */
void gt_test_write_file(const char *path, const void *buf, size_t n);
void gt_test_write_text(const char *path, const char *text);

/* ---- configs, models, tensors ---- */

/* gt_config_load from the source tree's configs/ with these overrides;
 * asserts it loads, showing the error. */
void gt_test_config(gt_config *c, int n, const char *const *ov);
/* The remat suites' small model: `model` reshaped to `layers` layers of
 * `pattern` (num_kv_shared_layers `shared`), T = 24, window 7, batch 2, under
 * `policy` and `scope`; policy custom keeps q and context on the device and
 * offloads mlpwo. */
void gt_test_remat_config(gt_config *c, const char *model, const char *policy, const char *scope, int layers,
                          const char *pattern, int shared);
/* gt_model_build of c; asserts it builds, showing the error. */
void gt_test_model_build(gt_model *m, const gt_config *c);
/* Shard r of S of a full parameter-layout buffer, unit by unit (what a
 * device of an S-way fsdp axis holds, what a checkpoint shard stores); free(). */
float *gt_test_shard_of(const gt_model *m, const float *full, int r, int S);
/* A tiny model (gemma3-tiny with one override) with random parameters and
 * AdamW moments in full flat buffers: a training state to checkpoint. */
typedef struct gt_test_state {
  gt_config cfg;
  gt_model m;
  float *p, *mu, *nu;
} gt_test_state;
void gt_test_state_make(gt_test_state *f, const char *override, uint64_t seed);
void gt_test_state_free(gt_test_state *f);
/* Every norm weight (the 1-d tensors) uniform in [-0.3, 0.3) from *state,
 * so the (1 + w) path matters; plus 1 when the model stores the scale
 * itself (Gemma 4, norm_offset 0) and around_one is set. */
void gt_test_randomize_norms(gt_model *m, uint64_t *state, int around_one);
/* The model of these overrides, allocated in mem (initialised here), with
 * gt_model_init_params(seed, 1.0) and gt_test_randomize_norms from seed + 17;
 * returns that random state, for more draws. */
uint64_t gt_test_model_random(gt_model *m, gt_config *c, gt_mem *mem, int n, const char *const *ov, uint64_t seed,
                              int around_one);
/* The F32 values of tensor `name` of a safetensors fixture, asserting it
 * exists and holds `want` elements. */
float *gt_test_st_f32(const gt_st_file *f, const char *name, int64_t want);

/* ---- the memory plan ---- */

/* Asserts that the plan equals what the trainer's devices measured since
 * they were made (run a step first): every category's peak is the largest
 * device's, the total the busiest device's. `what` names the case. */
struct gt_plan;
struct gt_trainer;
void gt_test_plan_matches(const struct gt_plan *p, struct gt_trainer *tr, const char *what);

/* ---- running a suite ---- */

/* A test case added to s with no Check timeout: a slow shared machine must
 * not fail a test (ctest's own TIMEOUT catches hangs). */
struct Suite;
struct TCase;
struct TCase *gt_test_tcase(struct Suite *s, const char *name);
/* Runs a Check suite (forking each test unless nofork) and returns the
 * process exit status: 0 when every test passed. */
int gt_test_run_suite(struct Suite *s, int nofork);

#endif
