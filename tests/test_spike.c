/* The spike guard (train/spike.h, skip_step_on_spikes) and param_norm:
 *  - the rolling mean and standard deviation against a scalar reference
 *    (and hand values), the decision at its boundary (value - mean equal to
 *    factor x std is applied, the next float32 above is a spike), the
 *    warm-up before max(2, interval / 2) values, spikes entering the window;
 *  - a saved and restored window decides every later step as the original;
 *    a checkpoint holds the record exactly, one without it loads empty, a
 *    bad one is refused naming the field;
 *  - a planted spike (a batch whose targets are replaced by uniform random
 *    tokens: several times the loss) is skipped, and the run ends bit for
 *    bit where the run without that batch ends (same later losses, same
 *    parameters, same AdamW step), on 1 device, 2 (fsdp) and 2 (data
 *    parallel); with the guard off the same batch is applied and the end
 *    differs, and the window still takes every step's values;
 *    param_norm is the norm of the full parameters after each step;
 *  - `gemtrain train`'s loop with a checkpoint in the middle and a resume
 *    makes every later decision, loss and norm of the uninterrupted run bit
 *    for bit, with a guard that skips several steps on each side of the
 *    resume (factor 0, window 6, no clipping, on text). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "train/spike.h"
#include "train/train.h"
#include "train/trainer.h"
#include "gt_testutil.h"

/* ---------- the guard alone ---------- */

/* the scalar reference: mean and sample std of the last min(count,
 * interval) values of a plain history, in long double */
static void ref_stats(const float *hist, int64_t count, int64_t interval, double *mean, double *std) {
  int64_t n = count < interval ? count : interval;
  long double s = 0, q = 0;
  for (int64_t i = count - n; i < count; i++) s += hist[i];
  long double m = n ? s / n : 0;
  for (int64_t i = count - n; i < count; i++) q += (hist[i] - m) * (hist[i] - m);
  *mean = (double)m;
  *std = (double)sqrtl(n > 1 ? q / (n - 1) : 0);
}

START_TEST(test_stats_reference) {
  /* hand values: {1, 3, 5} has mean 3 and std sqrt(8 / 2) = 2 exactly */
  gt_spike g;
  gt_spike_init(&g, 8, 1.0);
  double m, s;
  gt_spike_stats(&g, 0, &m, &s);
  ck_assert(m == 0.0 && s == 0.0);
  for (int i = 0; i < 3; i++) gt_spike_push(&g, 1 + 2 * i, 10 - 4 * i);
  gt_spike_stats(&g, 0, &m, &s);
  ck_assert_msg(m == 3.0 && s == 2.0, "loss window {1,3,5}: mean %.17g std %.17g", m, s);
  gt_spike_stats(&g, 1, &m, &s); /* {10, 6, 2}: mean 6, std 4 */
  ck_assert_msg(m == 6.0 && s == 4.0, "norm window {10,6,2}: mean %.17g std %.17g", m, s);
  /* one value: std 0 (MaxText's n - 1 is at least 1) */
  gt_spike_init(&g, 8, 1.0);
  gt_spike_push(&g, 2.5, 1.0);
  gt_spike_stats(&g, 0, &m, &s);
  ck_assert(m == 2.5 && s == 0.0);
  /* random values through several wraps of windows of 1, 2, 7 and 64 */
  const int64_t intervals[] = {1, 2, 7, 64};
  for (int k = 0; k < 4; k++) {
    enum { N = 300 };
    float hl[N], hn[N];
    uint64_t st = 7 + (uint64_t)k;
    gt_spike_init(&g, intervals[k], 6.0);
    for (int64_t i = 0; i < N; i++) {
      hl[i] = (float)gt_test_rand_uniform(&st, 1.0f, 9.0f);
      hn[i] = (float)gt_test_rand_uniform(&st, 0.1f, 3.0f);
      gt_spike_push(&g, hl[i], hn[i]);
      ck_assert_int_eq(gt_spike_held(&g), i + 1 < intervals[k] ? i + 1 : intervals[k]);
      for (int w = 0; w < 2; w++) {
        double rm, rs;
        ref_stats(w ? hn : hl, i + 1, intervals[k], &rm, &rs);
        gt_spike_stats(&g, w, &m, &s);
        ck_assert_msg(fabs(m - rm) <= 1e-12 * fabs(rm) && fabs(s - rs) <= 1e-12 * fmax(rs, 1e-3),
                      "interval %lld after %lld values, window %d: mean %.17g std %.17g, reference %.17g %.17g",
                      (long long)intervals[k], (long long)i + 1, w, m, s, rm, rs);
      }
    }
  }
}
END_TEST

START_TEST(test_boundary) {
  /* window {1, 3, 5}: mean 3, std 2; factor 1.5 puts the bound at exactly 6 */
  gt_spike g;
  gt_spike_init(&g, 8, 1.5);
  for (int i = 0; i < 3; i++) gt_spike_push(&g, 1 + 2 * i, 1 + 2 * i);
  double above = nextafterf(6.0f, 7.0f);
  ck_assert_int_eq(gt_spike_check(&g, 6.0, 6.0), 0);   /* at the bound: applied */
  ck_assert_int_eq(gt_spike_check(&g, above, 1.0), 1); /* the loss one float above */
  ck_assert_int_eq(gt_spike_check(&g, 1.0, above), 1); /* the norm one float above */
  ck_assert_int_eq(gt_spike_check(&g, 0.0, 0.0), 0);   /* below the mean */
  /* a value is compared as the window holds it (float32): within the
   * rounding of 6.0 it is at the bound */
  ck_assert_int_eq(gt_spike_check(&g, 6.0 + 1e-9, 6.0), 0);
  /* a flat window (std 0): the mean itself is applied, anything above not */
  gt_spike_init(&g, 4, 6.0);
  for (int i = 0; i < 3; i++) gt_spike_push(&g, 2.0, 0.5);
  ck_assert_int_eq(gt_spike_check(&g, 2.0, 0.5), 0);
  ck_assert_int_eq(gt_spike_check(&g, nextafterf(2.0f, 3.0f), 0.5), 1);
  /* factor 0: above the mean is a spike */
  gt_spike_init(&g, 4, 0.0);
  gt_spike_push(&g, 1.0, 1.0);
  gt_spike_push(&g, 3.0, 1.0);
  ck_assert_int_eq(gt_spike_check(&g, 2.0, 1.0), 0);
  ck_assert_int_eq(gt_spike_check(&g, 2.5, 1.0), 1);
}
END_TEST

START_TEST(test_warmup_and_window) {
  /* interval 8: min_history 4, so the steps that find 0, 1 or 2 values in
   * the window are never spikes, the one that finds 3 can be */
  gt_spike g;
  gt_spike_init(&g, 8, 6.0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(gt_spike_decide(&g, i == 2 ? 1e6 : 1.0, 1.0), 0);
  ck_assert_int_eq(gt_spike_check(&g, 1e7, 1.0), 1);
  /* interval 1 (min_history 2): from the second step on, against the last value */
  gt_spike_init(&g, 1, 0.0);
  ck_assert_int_eq(gt_spike_decide(&g, 5.0, 1.0), 0);
  ck_assert_int_eq(gt_spike_decide(&g, 6.0, 1.0), 1);
  ck_assert_int_eq(gt_spike_decide(&g, 6.0, 1.0), 0); /* the spike became the baseline */
  /* interval 3: min_history 2 (max(2, 3 / 2)) */
  gt_spike_init(&g, 3, 0.0);
  ck_assert_int_eq(gt_spike_decide(&g, 5.0, 1.0), 0);
  ck_assert_int_eq(gt_spike_decide(&g, 6.0, 1.0), 1);
  /* a spike enters the window (MaxText appends skipped steps too) */
  gt_spike_init(&g, 4, 6.0);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(gt_spike_decide(&g, 2.0 - 0.01 * i, 1.0), 0);
  double m0, s0, m1, s1;
  gt_spike_stats(&g, 0, &m0, &s0);
  ck_assert_int_eq(gt_spike_decide(&g, 50.0, 1.0), 1);
  ck_assert_int_eq(g.count, 5);
  gt_spike_stats(&g, 0, &m1, &s1);
  ck_assert(m1 > m0 + 10 && s1 > 20);
  ck_assert_int_eq(gt_spike_decide(&g, 40.0, 1.0), 0); /* within the widened window */
}
END_TEST

START_TEST(test_save_load_continues) {
  /* a window saved after 23 pushes (wrapped: interval 10) and restored
   * decides the next 200 steps exactly as the original, and holds the same
   * statistics bit for bit */
  gt_spike a, b;
  gt_spike_init(&a, 10, 1.0);
  uint64_t st = 5;
  for (int i = 0; i < 23; i++) {
    double l = gt_test_rand_uniform(&st, 1, 3), n = gt_test_rand_uniform(&st, 0, 1);
    gt_spike_decide(&a, l, n);
  }
  a.skipped_steps = 4;
  gt_ckpt_spike rec;
  gt_spike_save(&a, &rec);
  ck_assert_int_eq(rec.count, 23);
  ck_assert_int_eq(rec.n, 10);
  ck_assert_int_eq(rec.skipped_steps, 4);
  gt_spike_init(&b, 10, 1.0);
  gt_spike_load(&b, &rec);
  ck_assert_int_eq(b.skipped_steps, 4);
  int spikes = 0;
  for (int i = 0; i < 200; i++) {
    double l = gt_test_rand_uniform(&st, 1, 3), n = gt_test_rand_uniform(&st, 0, 1);
    double ma, sa, mb, sb;
    for (int w = 0; w < 2; w++) {
      gt_spike_stats(&a, w, &ma, &sa);
      gt_spike_stats(&b, w, &mb, &sb);
      ck_assert(memcmp(&ma, &mb, sizeof ma) == 0 && memcmp(&sa, &sb, sizeof sa) == 0);
    }
    int da = gt_spike_decide(&a, l, n), db = gt_spike_decide(&b, l, n);
    ck_assert_int_eq(da, db);
    spikes += da;
  }
  ck_assert_msg(spikes > 20 && spikes < 180, "factor 1 over uniform values: %d spikes of 200", spikes);
  /* restored into a shorter window: the newest values */
  gt_spike c;
  gt_spike_init(&c, 4, 1.0);
  gt_spike_load(&c, &rec);
  ck_assert_int_eq(gt_spike_held(&c), 4);
  double m, s, rm, rs;
  gt_spike_stats(&c, 0, &m, &s);
  ref_stats(rec.loss, rec.n, 4, &rm, &rs);
  ck_assert(fabs(m - rm) <= 1e-12 * rm && fabs(s - rs) <= 1e-12 * fmax(rs, 1e-3));
  /* restored into a wider window: the record's 10 values and no empty
   * slots (they would be zeros in the mean and the std) */
  gt_spike w;
  gt_spike_init(&w, 16, 1.0);
  gt_spike_load(&w, &rec);
  ck_assert_int_eq(gt_spike_held(&w), 10);
  gt_spike_stats(&w, 0, &m, &s);
  ref_stats(rec.loss, rec.n, 10, &rm, &rs);
  ck_assert(fabs(m - rm) <= 1e-12 * rm && fabs(s - rs) <= 1e-12 * fmax(rs, 1e-3));
  /* it fills up to the wider interval, the oldest values first out after */
  for (int i = 0; i < 6; i++) gt_spike_push(&w, 2.0, 0.5);
  ck_assert_int_eq(gt_spike_held(&w), 16);
  /* an empty record: an empty window */
  gt_ckpt_spike none;
  memset(&none, 0, sizeof none);
  gt_spike_load(&c, &none);
  ck_assert_int_eq(c.count, 0);
  ck_assert_int_eq(gt_spike_held(&c), 0);
}
END_TEST

/* 1 when the file holds the text (a shard's header is plain JSON) */
static int has_text(const char *path, const char *text) {
  long len;
  char *b = gt_test_read_file(path, &len);
  ck_assert(b != NULL);
  size_t n = strlen(text);
  int found = 0;
  for (long i = 0; !found && i + (long)n <= len; i++) found = !memcmp(b + i, text, n);
  free(b);
  return found;
}

/* the record through a checkpoint: exact, absent when empty, checked */
START_TEST(test_checkpoint_record) {
  gt_test_state f;
  gt_test_state_make(&f, "num_devices=1", 3);
  char *dir = gt_test_mkdtemp("spike_ckpt");
  const float *p[1] = {f.p}, *mu[1] = {f.mu}, *nu[1] = {f.nu};
  gt_ckpt_src src = {1, p, mu, nu};
  gt_err e;
  gt_ckpt_state st = {7, 5, {0, 0}, 1, 1, 1e-3, {0}, {0}, 0};
  /* without a record: no "spike_guard" in the header, an empty record back */
  ck_assert_msg(gt_ckpt_save(dir, &f.m, &src, &st, NULL, 0, 0, &e) == GT_OK, "%s", e.msg);
  char path[700];
  snprintf(path, sizeof path, "%s/step_00000007/shard_00000-of-00001.gtck", dir);
  ck_assert(!has_text(path, "spike_guard"));
  snprintf(path, sizeof path, "%s/step_00000007", dir);
  gt_ckpt_loaded ld;
  ck_assert_msg(gt_ckpt_load_dir(path, &f.m, f.p, f.mu, f.nu, &ld, &e) == GT_OK, "%s", e.msg);
  free(ld.config_json);
  ck_assert(ld.state.spike.count == 0 && ld.state.spike.n == 0 && ld.state.spike.skipped_steps == 0);
  /* a record of a wrapped window, with values that need all of float32 */
  gt_spike g;
  gt_spike_init(&g, 5, 6.0);
  uint64_t s = 11;
  for (int i = 0; i < 9; i++) {
    double l = gt_test_rand_uniform(&s, 0, 12), n = gt_test_rand_uniform(&s, 0, 1e-3f);
    gt_spike_push(&g, l, n);
  }
  g.skipped_steps = 2;
  st.step = 8;
  gt_spike_save(&g, &st.spike);
  ck_assert_msg(gt_ckpt_save(dir, &f.m, &src, &st, NULL, 0, 0, &e) == GT_OK, "%s", e.msg);
  snprintf(path, sizeof path, "%s/step_00000008/shard_00000-of-00001.gtck", dir);
  ck_assert(has_text(path, "\"spike_guard\""));
  snprintf(path, sizeof path, "%s/step_00000008", dir);
  ck_assert_msg(gt_ckpt_load_dir(path, &f.m, f.p, f.mu, f.nu, &ld, &e) == GT_OK, "%s", e.msg);
  free(ld.config_json);
  ck_assert_int_eq(ld.state.spike.count, 9);
  ck_assert_int_eq(ld.state.spike.n, 5);
  ck_assert_int_eq(ld.state.spike.skipped_steps, 2);
  ck_assert(memcmp(ld.state.spike.loss, st.spike.loss, 5 * sizeof(float)) == 0);
  ck_assert(memcmp(ld.state.spike.grad_norm, st.spike.grad_norm, 5 * sizeof(float)) == 0);
  /* a state the loader would refuse is not written: more steps skipped
   * than run, more values than pushed */
  gt_ckpt_state bad = st;
  bad.spike.skipped_steps = 9;
  ck_assert_int_eq(gt_ckpt_save(dir, &f.m, &src, &bad, NULL, 0, 0, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "'skipped_steps' = 9") != NULL, "%s", e.msg);
  bad = st;
  bad.spike.count = 3;
  ck_assert_int_eq(gt_ckpt_save(dir, &f.m, &src, &bad, NULL, 0, 0, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "spike_guard field 'loss'") != NULL, "%s", e.msg);
  gt_test_rm_rf(dir);
  free(dir);
  gt_test_state_free(&f);
}
END_TEST

/* ---------- a planted spike in the trainer ---------- */

typedef struct batch_buf {
  int32_t *in, *tg, *pos;
  gt_batch b;
} batch_buf;

/* batch k of a periodic token stream (period 23, easy to learn), or with
 * garbage its targets replaced by uniform random tokens */
static void batch_make(batch_buf *x, const gt_config *c, int k, int garbage) {
  int B = (int)gt_config_global_batch(c), T = (int)c->max_target_length;
  size_t n = (size_t)B * (size_t)T;
  x->in = calloc(n, sizeof(int32_t));
  x->tg = calloc(n, sizeof(int32_t));
  x->pos = calloc(n, sizeof(int32_t));
  uint64_t st = 1234 + (uint64_t)k;
  for (int r = 0; r < B; r++)
    for (int t = 0; t < T; t++) {
      size_t i = (size_t)r * (size_t)T + (size_t)t;
      int64_t at = (int64_t)(k * B + r) * 5 + t;
      x->in[i] = (int32_t)(4 + (at * 7) % 23);
      x->tg[i] = (int32_t)(4 + ((at + 1) * 7) % 23);
      x->pos[i] = t;
    }
  if (garbage) gt_test_fill_ids(x->tg, (int64_t)n, &st, 4, c->vocab_size);
  x->b = (gt_batch){B, T, x->in, x->tg, x->pos, NULL};
}

static void batch_free(batch_buf *x) {
  free(x->in);
  free(x->tg);
  free(x->pos);
}

static float *full_params(gt_trainer *tr) {
  int64_t n = gt_trainer_num_params(tr);
  float *p = malloc((size_t)n * sizeof(float));
  gt_err err;
  ck_assert_msg(gt_fsdp_full_params(gt_trainer_fsdp(tr), p, &err) == GT_OK, "%s", err.msg);
  return p;
}

enum { K = 6, M = 5 }; /* normal steps before the spike, after it */

typedef struct run_out {
  double loss[K + M + 1];
  int spike[K + M + 1];
  int64_t skipped_steps, opt_step;
  float *params;
  int64_t n;
  gt_ckpt_spike *rec; /* the guard's record after the last step */
} run_out;

/* K normal batches, the garbage one when planted, then M normal ones */
static run_out run_steps(int n_ov, const char *const *ov, int planted) {
  gt_config c;
  gt_test_config(&c, n_ov, ov);
  gt_err err;
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &err) == GT_OK, "%s", err.msg);
  run_out o;
  memset(&o, 0, sizeof o);
  int steps = K + M + (planted ? 1 : 0);
  for (int s = 0, k = 0; s < steps; s++) {
    int garbage = planted && s == K;
    batch_buf b;
    batch_make(&b, &c, garbage ? 999 : k++, garbage);
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step(tr, &b.b, 1, &sm, &err) == GT_OK, "%s", err.msg);
    batch_free(&b);
    o.loss[s] = sm.loss;
    o.spike[s] = sm.spike_skipped;
    ck_assert_int_eq(sm.skipped, 0);
    o.skipped_steps = sm.skipped_steps;
    /* param_norm: the full parameters' norm after the step */
    float *p = full_params(tr);
    long double q = 0;
    for (int64_t i = 0; i < gt_trainer_num_params(tr); i++) q += (long double)p[i] * p[i];
    double want = (double)sqrtl(q);
    ck_assert_msg(fabs(sm.param_norm - want) <= 1e-9 * want, "step %d: param_norm %.17g, full parameters' %.17g", s,
                  sm.param_norm, want);
    free(p);
  }
  o.opt_step = gt_fsdp_opt_step(gt_trainer_fsdp(tr));
  o.params = full_params(tr);
  o.n = gt_trainer_num_params(tr);
  o.rec = malloc(sizeof *o.rec);
  gt_trainer_spike_state(tr, o.rec);
  gt_trainer_destroy(tr);
  return o;
}

static void planted_case(const char *dev, const char *pdbs, const char *axis) {
  const char *on[] = {"model_name=gemma3-tiny", dev, pdbs, axis, "dataset_type=synthetic", "learning_rate=0.01",
                      "warmup_steps_fraction=0", "learning_rate_schedule_steps=20", "skip_step_on_spikes=true",
                      "skip_step_interval=4"};
  run_out a = run_steps(10, on, 1), b = run_steps(10, on, 0);
  /* the run with the spike: only that step skipped */
  for (int s = 0; s < K + M + 1; s++) ck_assert_msg(a.spike[s] == (s == K), "step %d: spike_skipped %d", s, a.spike[s]);
  ck_assert_msg(a.loss[K] > 1.5 * a.loss[K - 1], "the garbage batch's loss %g against %g before", a.loss[K],
                a.loss[K - 1]);
  ck_assert_int_eq(a.skipped_steps, 1);
  /* the run without it: nothing skipped, and the same end bit for bit */
  for (int s = 0; s < K + M; s++) ck_assert_msg(!b.spike[s], "step %d skipped without a spike", s);
  ck_assert_int_eq(b.skipped_steps, 0);
  ck_assert_int_eq(a.opt_step, K + M);
  ck_assert_int_eq(b.opt_step, K + M);
  for (int s = 0; s < K + M; s++) {
    double la = a.loss[s < K ? s : s + 1];
    ck_assert_msg(memcmp(&la, &b.loss[s], sizeof la) == 0, "step %d: %.17g with the spike, %.17g without", s, la,
                  b.loss[s]);
  }
  ck_assert_msg(gt_test_same_bits(a.params, b.params, a.n), "the parameters differ from the run without the spike");
  /* the guard off: the same batch is applied, and the run ends elsewhere */
  const char *off[] = {"model_name=gemma3-tiny", dev, pdbs, axis, "dataset_type=synthetic", "learning_rate=0.01",
                       "warmup_steps_fraction=0", "learning_rate_schedule_steps=20", "skip_step_on_spikes=false"};
  run_out c = run_steps(9, off, 1);
  ck_assert_int_eq(c.spike[K], 0);
  ck_assert_int_eq(c.opt_step, K + M + 1);
  ck_assert(!gt_test_same_bits(c.params, b.params, c.n));
  ck_assert(c.loss[K + M] != b.loss[K + M - 1]);
  /* and its window is current: every step's loss entered it (the default
   * interval holds them all), nothing counted as skipped */
  ck_assert_int_eq(c.rec->count, K + M + 1);
  ck_assert_int_eq(c.rec->n, K + M + 1);
  ck_assert_int_eq(c.rec->skipped_steps, 0);
  for (int s = 0; s < K + M + 1; s++)
    ck_assert_msg(c.rec->loss[s] == (float)c.loss[s], "step %d: the window holds %.9g, the step's loss %.9g", s,
                  (double)c.rec->loss[s], c.loss[s]);
  free(a.params), free(b.params), free(c.params);
  free(a.rec), free(b.rec), free(c.rec);
}

START_TEST(test_planted_one_device) { planted_case("num_devices=1", "per_device_batch_size=4", "ici_data_parallelism=1"); }
END_TEST

START_TEST(test_planted_two_devices) { planted_case("num_devices=2", "per_device_batch_size=2", "ici_data_parallelism=1"); }
END_TEST

/* data parallel: every device holds every parameter, so each counts once
 * in param_norm through the gradient norm's weights */
START_TEST(test_planted_data_parallel) {
  planted_case("num_devices=2", "per_device_batch_size=2", "ici_data_parallelism=2");
}
END_TEST

/* ---------- decisions across a resume ---------- */

typedef struct rec {
  int n;
  int64_t step[64];
  double loss[64], grad_norm[64], param_norm[64];
  int spike[64];
  int64_t skipped_steps[64];
} rec;

static void record(const gt_step_metrics *sm, void *ctx) {
  rec *r = ctx;
  if (r->n >= 64) return;
  r->step[r->n] = sm->step;
  r->loss[r->n] = sm->loss;
  r->grad_norm[r->n] = sm->grad_norm;
  r->param_norm[r->n] = sm->param_norm;
  r->spike[r->n] = sm->spike_skipped;
  r->skipped_steps[r->n] = sm->skipped_steps;
  r->n++;
}

static void write_corpus(const char *path) {
  static const char *w[] = {"the", "lord", "said", "unto", "moses", "and", "it", "was", "so", "light", "waters"};
  FILE *fp = fopen(path, "w");
  ck_assert(fp != NULL);
  uint64_t s = 99;
  for (int i = 0; i < 900; i++) fprintf(fp, "%s%s", w[gt_test_rand_u64(&s) % 11], i % 13 == 12 ? ".\n" : " ");
  fclose(fp);
}

static gt_rc train(const char *base, const char *name, const char *steps, rec *r, gt_train_result *res, gt_err *e) {
  char bo[600], rn[128], dp[600];
  snprintf(bo, sizeof bo, "base_output_directory=%s", base);
  snprintf(rn, sizeof rn, "run_name=%s", name);
  snprintf(dp, sizeof dp, "dataset_path=%s/corpus.txt", base);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=text", dp, bo, rn, steps, "learning_rate=0.015",
                      "eval_interval=-1", "sample_tokens=0", "learning_rate_schedule_steps=30",
                      "eval_split_fraction=0.05", "threads_per_device=1", "skip_step_on_spikes=true",
                      "skip_step_interval=6", "skip_step_scaling_factor=0", "gradient_clipping_threshold=0"};
  gt_config c;
  gt_test_config(&c, (int)(sizeof ov / sizeof *ov), ov);
  gt_train_opts o = {.test_after_step = record, .test_ctx = r};
  gt_err_clear(e);
  return gt_train(&c, &o, res, e);
}

START_TEST(test_resume_decides_alike) {
  char *base = gt_test_mkdtemp("spike_resume"), cp[700];
  snprintf(cp, sizeof cp, "%s/corpus.txt", base);
  write_corpus(cp);
  rec a = {0}, b = {0};
  gt_train_result res;
  gt_err e;
  ck_assert_msg(train(base, "straight", "steps=30", &a, &res, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(a.n, 30);
  ck_assert_msg(train(base, "resumed", "steps=15", &b, &res, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(train(base, "resumed", "steps=30", &b, &res, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(res.start_step, 15);
  ck_assert_int_eq(b.n, 30);
  int before = 0, after = 0;
  for (int i = 0; i < 30; i++) {
    ck_assert_int_eq(a.step[i], i);
    ck_assert_int_eq(b.step[i], i);
    ck_assert_msg(a.spike[i] == b.spike[i] && a.skipped_steps[i] == b.skipped_steps[i],
                  "step %d: spike_skipped %d (skipped_steps %lld) straight, %d (%lld) resumed", i, a.spike[i],
                  (long long)a.skipped_steps[i], b.spike[i], (long long)b.skipped_steps[i]);
    ck_assert_msg(memcmp(&a.loss[i], &b.loss[i], 8) == 0 && memcmp(&a.grad_norm[i], &b.grad_norm[i], 8) == 0 &&
                      memcmp(&a.param_norm[i], &b.param_norm[i], 8) == 0,
                  "step %d: loss %.17g grad_norm %.17g param_norm %.17g straight; %.17g %.17g %.17g resumed", i,
                  a.loss[i], a.grad_norm[i], a.param_norm[i], b.loss[i], b.grad_norm[i], b.param_norm[i]);
    if (i < 15) before += a.spike[i];
    else after += a.spike[i];
  }
  /* the window mattered: steps were skipped, and applied, on both sides
   * (3 before and 2 after on the portable and AVX2 copies) */
  ck_assert_msg(before >= 1 && after >= 1 && before + after <= 20, "%d spikes before the resume, %d after", before, after);
  ck_assert_int_eq(a.skipped_steps[29], before + after);
  gt_test_rm_rf(base);
  free(base);
}
END_TEST

static Suite *spike_suite(void) {
  Suite *s = suite_create("spike");
  TCase *tc = gt_test_tcase(s, "guard");
  tcase_add_test(tc, test_stats_reference);
  tcase_add_test(tc, test_boundary);
  tcase_add_test(tc, test_warmup_and_window);
  tcase_add_test(tc, test_save_load_continues);
  tcase_add_test(tc, test_checkpoint_record);
  TCase *tt = gt_test_tcase(s, "trainer");
  tcase_add_test(tt, test_planted_one_device);
  tcase_add_test(tt, test_planted_two_devices);
  tcase_add_test(tt, test_planted_data_parallel);
  tcase_add_test(tt, test_resume_decides_alike);
  return s;
}

int main(void) { return gt_test_run_suite(spike_suite(), 0); }
