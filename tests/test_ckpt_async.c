/* A save in phases (ckpt.h: gt_ckpt_save_begin, _write, _end), as the
 * background writer of async_checkpointing runs it: its files are byte for
 * byte those of gt_ckpt_save (the synchronous path) for the same state,
 * also when _write runs on another thread and when the arrays it was given
 * are only a snapshot (the caller's live arrays change meanwhile); an
 * abandoned save leaves `latest` where it was and nothing a load reads; the
 * seam's named points are passed in order, on the thread that does the
 * work; gemtrain train's step metrics carry each checkpoint's figures
 * (has_checkpoint, checkpoint_write_seconds, checkpoint_blocked_seconds) in
 * the first report after its commit. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_seam.h"
#include "train/train.h"
#include "gt_testutil.h"

typedef struct shards {
  int S;
  float *p[4], *mu[4], *nu[4];
  gt_ckpt_src src;
} shards;

static void shards_make(shards *s, gt_test_state *f, int S) {
  s->S = S;
  for (int r = 0; r < S; r++)
    s->p[r] = gt_test_shard_of(&f->m, f->p, r, S), s->mu[r] = gt_test_shard_of(&f->m, f->mu, r, S),
    s->nu[r] = gt_test_shard_of(&f->m, f->nu, r, S);
  gt_ckpt_src src = {S, (const float *const *)s->p, (const float *const *)s->mu, (const float *const *)s->nu};
  s->src = src;
}

static void shards_free(shards *s) {
  for (int r = 0; r < s->S; r++) free(s->p[r]), free(s->mu[r]), free(s->nu[r]);
}

/* Every file of step directory a equals b's, byte for byte. */
static void expect_same_files(const char *a, const char *b, int S) {
  for (int r = 0; r < S; r++) {
    char fa[700], fb[700];
    snprintf(fa, sizeof fa, "%s/shard_%05d-of-%05d.gtck", a, r, S);
    snprintf(fb, sizeof fb, "%s/shard_%05d-of-%05d.gtck", b, r, S);
    long na = 0, nb = 0;
    char *x = gt_test_read_file(fa, &na), *y = gt_test_read_file(fb, &nb);
    ck_assert_msg(x && y, "missing %s or %s", fa, fb);
    ck_assert_int_eq(na, nb);
    ck_assert_msg(memcmp(x, y, (size_t)na) == 0, "%s and %s differ", fa, fb);
    free(x), free(y);
  }
}

typedef struct job {
  gt_ckpt_pending *save;
  gt_rc rc;
  gt_err err;
} job;

static void *writer(void *arg) {
  job *j = arg;
  j->rc = gt_ckpt_save_write(j->save, &j->err);
  return NULL;
}

static const gt_ckpt_writer wr = {0x1234567890abcdefull, 0x0fedcba987654321ull};

START_TEST(test_phases_byte_identical) {
  gt_test_state f;
  gt_test_state_make(&f, "base_emb_dim=64", 3);
  char *dir = gt_test_mkdtemp("ckpt_async");
  for (int S = 1; S <= 3; S += 2)
    for (int level = 0; level <= 1; level++) {
      shards sh;
      shards_make(&sh, &f, S);
      gt_ckpt_state st = {10, 9, {2, 5}, S, S, 1e-3, {0}, {0}, 0};
      char a[500], b[500], da[600], db[600];
      snprintf(a, sizeof a, "%s/sync_%d_%d", dir, S, level);
      snprintf(b, sizeof b, "%s/async_%d_%d", dir, S, level);
      gt_err e;
      ck_assert_msg(gt_ckpt_save_frozen(a, &f.m, &sh.src, &st, NULL, &wr, "{\"steps\": 7}", level, 0, NULL, &e) ==
                        GT_OK,
                    "%s", e.msg);
      /* the phases, the write on another thread, from a snapshot that the
       * caller's arrays then move away from (as the next steps do) */
      shards snap;
      shards_make(&snap, &f, S);
      job j = {0};
      ck_assert_msg(gt_ckpt_save_begin(&j.save, b, &f.m, &snap.src, &st, NULL, &wr, "{\"steps\": 7}", level, 0, NULL,
                                       &e) == GT_OK,
                    "%s", e.msg);
      pthread_t th;
      ck_assert_int_eq(pthread_create(&th, NULL, writer, &j), 0);
      for (int r = 0; r < S; r++) sh.p[r][0] += 1.0f; /* the live state moves on; the snapshot does not */
      pthread_join(th, NULL);
      ck_assert_msg(gt_ckpt_save_end(j.save, j.rc, &j.err) == GT_OK, "%s", j.err.msg);
      snprintf(da, sizeof da, "%s/step_00000010", a);
      snprintf(db, sizeof db, "%s/step_00000010", b);
      expect_same_files(da, db, S);
      char lp[600];
      snprintf(lp, sizeof lp, "%s/latest", b);
      char *lt = gt_test_read_file(lp, NULL);
      ck_assert_str_eq(lt, "step_00000010\n");
      free(lt);
      shards_free(&sh), shards_free(&snap);
    }
  gt_test_rm_rf(dir);
  free(dir);
  gt_test_state_free(&f);
}
END_TEST

/* An abandoned save (a run that ended broken) or one whose write failed
 * leaves the last committed checkpoint as `latest`; the next save removes
 * the temporary directory and commits. */
START_TEST(test_abandon_keeps_latest) {
  gt_test_state f;
  gt_test_state_make(&f, "base_emb_dim=64", 4);
  char *dir = gt_test_mkdtemp("ckpt_async_ab");
  shards sh;
  shards_make(&sh, &f, 1);
  gt_err e;
  gt_ckpt_state st = {5, 5, {0, 1}, 1, 1, 1e-3, {0}, {0}, 0};
  ck_assert_msg(gt_ckpt_save(dir, &f.m, &sh.src, &st, NULL, 0, 0, &e) == GT_OK, "%s", e.msg);
  st.step = 10;
  gt_ckpt_pending *s;
  ck_assert_msg(gt_ckpt_save_begin(&s, dir, &f.m, &sh.src, &st, NULL, NULL, NULL, 0, 0, NULL, &e) == GT_OK, "%s",
                e.msg);
  ck_assert_int_eq(gt_ckpt_save_step(s), 10);
  ck_assert_int_eq(gt_ckpt_save_write(s, &e), GT_OK);
  gt_ckpt_save_abandon(s);
  char p[600];
  snprintf(p, sizeof p, "%s/latest", dir);
  char *lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000005\n");
  free(lt);
  snprintf(p, sizeof p, "%s/.tmp-step_00000010", dir);
  ck_assert_int_eq(gt_test_system("test -d '%s'", p), 0);
  int64_t n = f.m.n_params;
  float *q = calloc((size_t)n, 4);
  gt_ckpt_loaded ld;
  ck_assert_msg(gt_ckpt_load_latest(dir, &f.m, q, NULL, NULL, &ld, NULL, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(ld.state.step, 5);
  free(ld.config_json);
  /* a failed write: _end removes what it wrote, latest stays */
  ck_assert_msg(gt_ckpt_save_begin(&s, dir, &f.m, &sh.src, &st, NULL, NULL, NULL, 0, 0, NULL, &e) == GT_OK, "%s",
                e.msg);
  /* the stale one went first: the new temporary directory is empty */
  ck_assert_int_eq(gt_test_system("test -z \"$(ls -A '%s')\"", p), 0);
  gt_err we;
  gt_err_set(&we, GT_ERR_IO, "checkpoint: cannot write: No space left on device");
  ck_assert_int_eq(gt_ckpt_save_end(s, GT_ERR_IO, &we), GT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(we.msg, "No space left"));
  ck_assert_int_ne(gt_test_system("test -d '%s'", p), 0);
  snprintf(p, sizeof p, "%s/latest", dir);
  lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000005\n");
  free(lt);
  free(q);
  shards_free(&sh);
  gt_test_rm_rf(dir);
  free(dir);
  gt_test_state_free(&f);
}
END_TEST

static char seen[512];
static void note_point(void *ctx, const char *point, int64_t step) {
  (void)ctx;
  size_t o = strlen(seen);
  snprintf(seen + o, sizeof seen - o, "%s%s@%lld", o ? " " : "", point, (long long)step);
}

START_TEST(test_seam_points_in_order) {
  gt_test_state f;
  gt_test_state_make(&f, "base_emb_dim=64", 5);
  char *dir = gt_test_mkdtemp("ckpt_async_pts");
  shards sh;
  shards_make(&sh, &f, 2);
  gt_err e;
  gt_ckpt_state st = {7, 7, {0, 1}, 2, 2, 1e-3, {0}, {0}, 0};
  seen[0] = 0;
  gt__ckpt_set_point_hook(note_point, NULL);
  ck_assert_msg(gt_ckpt_save(dir, &f.m, &sh.src, &st, NULL, 0, 0, &e) == GT_OK, "%s", e.msg);
  gt__ckpt_set_point_hook(NULL, NULL);
  /* "half" once: in the save's first shard file only */
  ck_assert_str_eq(seen, "prepared@7 half@7 written@7 renamed@7 latest@7 committed@7");
  shards_free(&sh);
  gt_test_rm_rf(dir);
  free(dir);
  gt_test_state_free(&f);
}
END_TEST

/* The metrics of every step of a run (test_after_step sees each report's). */
typedef struct seen_steps {
  int n;
  gt_step_metrics sm[16];
} seen_steps;
static void keep_step(const gt_step_metrics *sm, void *ctx) {
  seen_steps *v = ctx;
  if (v->n < 16) v->sm[v->n++] = *sm;
}

static seen_steps train_tiny(const char *base, const char *name, const char *async) {
  char bo[600], rn[128];
  snprintf(bo, sizeof bo, "base_output_directory=%s", base);
  snprintf(rn, sizeof rn, "run_name=%s", name);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", bo, rn, "steps=8", "checkpoint_period=3",
                      "sample_tokens=0", "eval_interval=-1", "threads_per_device=1", async};
  gt_config c;
  gt_test_config(&c, 10, ov);
  seen_steps v = {0};
  gt_train_opts o = {.test_after_step = keep_step, .test_ctx = &v};
  gt_train_result res;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_train(&c, &o, &res, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(v.n, 8);
  /* the run ended after its last write: step 8 is committed */
  char lp[800];
  snprintf(lp, sizeof lp, "%s/%s/checkpoints/latest", base, name);
  char *lt = gt_test_read_file(lp, NULL);
  ck_assert_str_eq(lt, "step_00000008\n");
  free(lt);
  return v;
}

START_TEST(test_step_metrics) {
  char *dir = gt_test_mkdtemp("ckpt_async_metrics");
  /* synchronous: the saves after steps 3, 6 and 8 (indices 2, 5, 7) come
   * before their own step's report, and are in it; the loop waited for the
   * whole write */
  seen_steps s = train_tiny(dir, "s", "async_checkpointing=false");
  for (int i = 0; i < 8; i++) {
    int want = i == 2 || i == 5 || i == 7; /* 7: the save on completion */
    ck_assert_msg(s.sm[i].has_checkpoint == want, "sync: step %d has_checkpoint %d", i, s.sm[i].has_checkpoint);
    if (!want) continue;
    ck_assert(s.sm[i].checkpoint_write_seconds > 0);
    ck_assert(s.sm[i].checkpoint_blocked_seconds == s.sm[i].checkpoint_write_seconds);
  }
  /* async: step 3's write is reported once, from its own step's poll on and by step 6's
   * report at the latest (step 6's checkpoint waits for it); step 6's by
   * step 7's or, still in flight then, on the console only */
  seen_steps a = train_tiny(dir, "a", "async_checkpointing=true");
  int first = -1, reports = 0;
  for (int i = 0; i < 8; i++)
    if (a.sm[i].has_checkpoint) {
      reports++;
      if (first < 0) first = i;
      ck_assert(a.sm[i].checkpoint_write_seconds > 0 && a.sm[i].checkpoint_blocked_seconds >= 0);
    }
  ck_assert_msg(first >= 2 && first <= 6, "async: the first report is at step %d", first);
  ck_assert_msg(reports >= 1 && reports <= 3, "async: %d reports", reports);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(a.sm[i].has_checkpoint, 0);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt_async");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_phases_byte_identical);
  tcase_add_test(tc, test_abandon_keeps_latest);
  tcase_add_test(tc, test_seam_points_in_order);
  tcase_add_test(tc, test_step_metrics);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
