/* Checkpoint shards record who wrote them (gt_ckpt_writer: the run's id and
 * its config checksum), and a step directory whose shards come from two
 * writers is refused naming both shard files, even when the two saves have
 * the same step and state (two runs with different seeds: the mix loaded
 * silently before). Shards of one writer load and report it; shards that
 * record no writer (older checkpoints) still load; one with and one without
 * a writer is a mix too. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "gt_testutil.h"

/* Saves f's state at step 5 in S = 2 shards under root, by `writer` (NULL: none). */
static void save(gt_test_state *f, const char *root, const gt_ckpt_writer *writer) {
  enum { S = 2 };
  float *ps[S], *ms[S], *ns[S];
  for (int r = 0; r < S; r++)
    ps[r] = gt_test_shard_of(&f->m, f->p, r, S), ms[r] = gt_test_shard_of(&f->m, f->mu, r, S),
    ns[r] = gt_test_shard_of(&f->m, f->nu, r, S);
  gt_ckpt_src src = {S, (const float *const *)ps, (const float *const *)ms, (const float *const *)ns};
  gt_ckpt_state st = {5, 5, {0, 40}, 1, S, 1e-3, {0}, {0}, 0};
  gt_err e;
  ck_assert_msg(gt_ckpt_save_frozen(root, &f->m, &src, &st, NULL, writer, NULL, 0, 0, NULL, &e) == GT_OK, "%s", e.msg);
  for (int r = 0; r < S; r++) free(ps[r]), free(ms[r]), free(ns[r]);
}

static char *shard(const char *root, int r) {
  char *p = malloc(1024);
  snprintf(p, 1024, "%s/step_00000005/shard_%05d-of-00002.gtck", root, r);
  return p;
}

/* shard 1 of root b replaces shard 1 of root a */
static void mix(const char *a, const char *b) {
  char *dst = shard(a, 1), *src = shard(b, 1);
  long n;
  char *bytes = gt_test_read_file(src, &n);
  ck_assert_ptr_nonnull(bytes);
  gt_test_write_file(dst, bytes, (size_t)n);
  free(bytes), free(dst), free(src);
}

static gt_rc load(gt_test_state *f, const char *root, gt_ckpt_loaded *ld, gt_err *e) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/step_00000005", root);
  int64_t n = f->m.n_params;
  float *p = calloc((size_t)n, 4), *mu = calloc((size_t)n, 4), *nu = calloc((size_t)n, 4);
  gt_rc rc = gt_ckpt_load_dir(dir, &f->m, p, mu, nu, ld, e);
  free(ld->config_json);
  ld->config_json = NULL;
  free(p), free(mu), free(nu);
  return rc;
}

START_TEST(test_shards_of_two_runs_are_refused) {
  gt_test_state f1, f2;
  gt_test_state_make(&f1, "base_emb_dim=64", 1);
  gt_test_state_make(&f2, "base_emb_dim=64", 2); /* another seed */
  char *dir = gt_test_mkdtemp("ckpt_writer");
  char ra[600], rb[600], rc0[600];
  snprintf(ra, sizeof ra, "%s/a", dir);
  snprintf(rb, sizeof rb, "%s/b", dir);
  snprintf(rc0, sizeof rc0, "%s/old", dir);
  gt_ckpt_writer wa = {0x1111222233334444ull, 0xabcdef0012345678ull}, wb = {0x5555666677778888ull, 0xabcdef0012345678ull};
  save(&f1, ra, &wa);
  save(&f2, rb, &wb);
  save(&f1, rc0, NULL);
  gt_ckpt_loaded ld;
  gt_err e;
  /* one writer: loads, and says who */
  ck_assert_msg(load(&f1, ra, &ld, &e) == GT_OK, "%s", e.msg);
  ck_assert(ld.writer.run_id == wa.run_id && ld.writer.config_sum == wa.config_sum);
  /* no writer recorded (older checkpoints): loads, writer zero */
  ck_assert_msg(load(&f1, rc0, &ld, &e) == GT_OK, "%s", e.msg);
  ck_assert(ld.writer.run_id == 0 && ld.writer.config_sum == 0);
  /* a mix of two runs, same step and state: refused naming both shards */
  mix(ra, rb);
  ck_assert_int_eq(load(&f1, ra, &ld, &e), GT_ERR_FORMAT);
  char *s0 = shard(ra, 0), *s1 = shard(ra, 1);
  ck_assert_msg(strstr(e.msg, s0) && strstr(e.msg, s1), "%s", e.msg);
  ck_assert_msg(strstr(e.msg, "1111222233334444") && strstr(e.msg, "5555666677778888"), "%s", e.msg);
  ck_assert_msg(strstr(e.msg, "different runs"), "%s", e.msg);
  free(s0), free(s1);
  /* one shard with a writer among shards without: refused */
  mix(rc0, rb);
  ck_assert_int_eq(load(&f1, rc0, &ld, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "recorded no run"), "%s", e.msg);
  gt_test_rm_rf(dir);
  free(dir);
  gt_test_state_free(&f1);
  gt_test_state_free(&f2);
}
END_TEST

static Suite *writer_suite(void) {
  Suite *s = suite_create("ckpt_writer");
  TCase *tc = gt_test_tcase(s, "writer");
  tcase_add_test(tc, test_shards_of_two_runs_are_refused);
  return s;
}

int main(void) { return gt_test_run_suite(writer_suite(), 0); }
