/* Checkpoints: the file format round-trips bit for bit (any shard count,
 * raw or zlib); every kind of damage is refused with its own message and the
 * previous checkpoint is used instead; a run resumed from a checkpoint
 * continues bit-identically (and to 1e-5 on another device count; with
 * dtype=bfloat16 and mu_dtype=bfloat16 too, on 1 and 2 devices); NaN steps
 * stop or skip without a poisoned checkpoint; a signal checkpoints and stops. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_seam.h"
#include "mesh/mesh.h"
#include "train/train.h"
#include "gt_testutil.h"

/* a tiny model with random params and moments (full flat buffers) */
typedef gt_test_state fixture;

static gt_rc save_sharded(fixture *f, const char *root, int64_t step, int S, int level, int64_t keep, gt_err *e) {
  float *ps[8], *ms[8], *ns[8];
  for (int r = 0; r < S; r++)
    ps[r] = gt_test_shard_of(&f->m, f->p, r, S), ms[r] = gt_test_shard_of(&f->m, f->mu, r, S), ns[r] = gt_test_shard_of(&f->m, f->nu, r, S);
  gt_ckpt_src src = {S, (const float *const *)ps, (const float *const *)ms, (const float *const *)ns};
  gt_ckpt_state st = {step, step - 1, {3, 17}, S, S, 1e-3, {0}, {0}, 0};
  gt_rc rc = gt_ckpt_save(root, &f->m, &src, &st, "{\"steps\": 7}", level, keep, e);
  for (int r = 0; r < S; r++) free(ps[r]), free(ms[r]), free(ns[r]);
  return rc;
}

static void expect_loads_equal(fixture *f, const char *dir, int64_t step) {
  int64_t n = f->m.n_params;
  float *p = calloc((size_t)n, 4), *mu = calloc((size_t)n, 4), *nu = calloc((size_t)n, 4);
  gt_ckpt_loaded ld;
  gt_err e;
  ck_assert_msg(gt_ckpt_load_dir(dir, &f->m, p, mu, nu, &ld, &e) == GT_OK, "%s", e.msg);
  ck_assert(memcmp(p, f->p, (size_t)n * 4) == 0);
  ck_assert(memcmp(mu, f->mu, (size_t)n * 4) == 0);
  ck_assert(memcmp(nu, f->nu, (size_t)n * 4) == 0);
  ck_assert_int_eq(ld.state.step, step);
  ck_assert_int_eq(ld.state.opt_step, step - 1);
  ck_assert_int_eq(ld.state.data.epoch, 3);
  ck_assert_int_eq(ld.state.data.cursor, 17);
  ck_assert_ptr_nonnull(ld.config_json);
  ck_assert_ptr_nonnull(strstr(ld.config_json, "\"steps\":7"));
  free(ld.config_json);
  free(p), free(mu), free(nu);
}

START_TEST(test_roundtrip_any_shards) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 1);
  char *dir = gt_test_mkdtemp("ckpt_rt");
  int Ss[] = {1, 2, 3, 5};
  for (int level = 0; level <= 6; level += 6)
    for (int i = 0; i < 4; i++) {
      gt_err e;
      int64_t step = 10 * (i + 1) + level;
      ck_assert_msg(save_sharded(&f, dir, step, Ss[i], level, 0, &e) == GT_OK, "%s", e.msg);
      char sd[512];
      snprintf(sd, sizeof sd, "%s/step_%08lld", dir, (long long)step);
      expect_loads_equal(&f, sd, step);
    }
  /* latest names the last one; load_latest takes it */
  char lp[512];
  snprintf(lp, sizeof lp, "%s/latest", dir);
  char *lt = gt_test_read_file(lp, NULL);
  ck_assert_str_eq(lt, "step_00000046\n");
  free(lt);
  gt_ckpt_loaded ld;
  gt_err e;
  float *p = calloc((size_t)f.m.n_params, 4);
  ck_assert(gt_ckpt_load_latest(dir, &f.m, p, NULL, NULL, &ld, NULL, NULL, &e) == GT_OK);
  ck_assert_int_eq(ld.state.step, 46);
  ck_assert(memcmp(p, f.p, (size_t)f.m.n_params * 4) == 0);
  free(ld.config_json);
  free(p);
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

/* rewrites one byte of a file */
static void poke(const char *path, long at, int xor_with) {
  FILE *fp = fopen(path, "r+b");
  ck_assert_ptr_nonnull(fp);
  if (at < 0) {
    fseek(fp, 0, SEEK_END);
    at += ftell(fp);
  }
  fseek(fp, at, SEEK_SET);
  int c = fgetc(fp);
  fseek(fp, at, SEEK_SET);
  fputc(c ^ xor_with, fp);
  fclose(fp);
}

typedef struct logbuf {
  char text[4096];
  int lines;
} logbuf;
static void logger(void *ctx, const char *line) {
  logbuf *b = ctx;
  size_t o = strlen(b->text);
  snprintf(b->text + o, sizeof b->text - o, "%s\n", line);
  b->lines++;
}

/* Damage step 20 in one way; load_dir must refuse it with `want` in the
 * message and load_latest must fall back to step 10. */
static void damage_case(const char *what, const char *cmd_fmt, const char *want, int pokeat) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 2);
  char *dir = gt_test_mkdtemp("ckpt_bad");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 2, 0, 0, &e) == GT_OK);
  ck_assert(save_sharded(&f, dir, 20, 2, 0, 0, &e) == GT_OK);
  char shard[600], sd[512];
  snprintf(sd, sizeof sd, "%s/step_00000020", dir);
  snprintf(shard, sizeof shard, "%s/shard_00001-of-00002.gtck", sd);
  if (cmd_fmt)
    ck_assert_int_eq(gt_test_system(cmd_fmt, dir, dir), 0);
  else
    poke(shard, pokeat, 0x40);
  float *p = calloc((size_t)f.m.n_params, 4), *mu = calloc((size_t)f.m.n_params, 4),
        *nu = calloc((size_t)f.m.n_params, 4);
  gt_ckpt_loaded ld;
  ck_assert_msg(gt_ckpt_load_dir(sd, &f.m, p, mu, nu, &ld, &e) != GT_OK, "%s: damage not detected", what);
  ck_assert_msg(strstr(e.msg, want), "%s: message '%s' lacks '%s'", what, e.msg, want);
  logbuf lb = {"", 0};
  ck_assert_msg(gt_ckpt_load_latest(dir, &f.m, p, mu, nu, &ld, logger, &lb, &e) == GT_OK, "%s: %s", what, e.msg);
  ck_assert_int_eq(ld.state.step, 10);
  ck_assert_int_eq(ld.n_refused, 1);
  ck_assert_int_eq(lb.lines, 1);
  ck_assert_msg(strstr(lb.text, want) && strstr(lb.text, "trying the previous checkpoint"), "%s: log '%s'", what,
                lb.text);
  ck_assert(memcmp(p, f.p, (size_t)f.m.n_params * 4) == 0);
  free(ld.config_json);
  free(p), free(mu), free(nu);
  gt_test_state_free(&f);
  gt_test_rm_rf(dir);
  free(dir);
}

START_TEST(test_flipped_data_byte) { damage_case("data byte", NULL, "crc32", 64 + 1000); }
END_TEST
START_TEST(test_flipped_header_byte) { damage_case("header byte", NULL, "damaged header", -20); }
END_TEST
START_TEST(test_wrong_magic) { damage_case("magic", NULL, "wrong magic", 2); }
END_TEST
START_TEST(test_truncated) {
  damage_case("truncated", "truncate -s -1000 %s/step_00000020/shard_00001-of-00002.gtck #%s", "truncated", 0);
}
END_TEST
START_TEST(test_empty_file) {
  damage_case("empty", ": > %s/step_00000020/shard_00001-of-00002.gtck #%s", "truncated", 0);
}
END_TEST
START_TEST(test_swapped_headers) {
  /* a shard of another checkpoint put in its place: every crc checks out,
   * but it holds another step */
  damage_case("swapped",
              "cp %s/step_00000010/shard_00001-of-00002.gtck %s/step_00000020/shard_00001-of-00002.gtck",
              "at step 10, expected shard 1 of 2 at step 20", 0);
}
END_TEST
START_TEST(test_missing_shard) {
  damage_case("missing shard", "rm %s/step_00000020/shard_00001-of-00002.gtck #%s", "cannot open", 0);
}
END_TEST

/* ---------- valid crc32s, invalid contents ---------- */

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* One edit of a shard's JSON header: in object `obj` ("state", "shard", or
 * "tensors" with element `index`), `key` becomes the JSON value `value`. */
typedef struct header_edit {
  const char *obj;
  int index;
  const char *key, *value;
} header_edit;

/* Rewrites the header of a shard file with one edit and recomputes its size
 * and both crc32s (ckpt.h's layout), so every integrity check passes and only
 * the loader's validation of the contents can refuse it. */
static void rewrite_header(const char *path, const header_edit *ed) {
  long len = 0;
  unsigned char *f = (unsigned char *)gt_test_read_file(path, &len);
  ck_assert_ptr_nonnull(f);
  uint64_t hoff = le64(f + 16), hn = le64(f + 24);
  ck_assert_int_eq((long)(hoff + hn), len);
  cJSON *h = cJSON_ParseWithLength((const char *)f + hoff, (size_t)hn);
  ck_assert_ptr_nonnull(h);
  cJSON *o = cJSON_GetObjectItemCaseSensitive(h, ed->obj);
  if (cJSON_IsArray(o)) o = cJSON_GetArrayItem(o, ed->index);
  ck_assert_ptr_nonnull(o);
  cJSON *v = cJSON_Parse(ed->value);
  ck_assert_ptr_nonnull(v);
  if (cJSON_GetObjectItemCaseSensitive(o, ed->key))
    cJSON_ReplaceItemInObjectCaseSensitive(o, ed->key, v);
  else
    cJSON_AddItemToObject(o, ed->key, v);
  char *js = cJSON_PrintUnformatted(h);
  size_t n = strlen(js);
  put_le(f + 24, n, 8);
  put_le(f + 32, crc32(0, (const Bytef *)js, (uInt)n), 4);
  put_le(f + 36, crc32(0, f, 36), 4);
  FILE *fp = fopen(path, "wb");
  ck_assert_ptr_nonnull(fp);
  ck_assert(fwrite(f, 1, hoff, fp) == hoff && fwrite(js, 1, n, fp) == n);
  fclose(fp);
  cJSON_Delete(h);
  free(js);
  free(f);
}

/* Step 20 of two shards gets the edit in both shards (they agree, and every
 * crc32 checks out): load_dir must refuse it with `want` in the message and
 * load_latest must say so and fall back to step 10. */
static void state_case(const header_edit *ed, const char *want) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 8);
  char *dir = gt_test_mkdtemp("ckpt_state");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 2, 0, 0, &e) == GT_OK);
  ck_assert(save_sharded(&f, dir, 20, 2, 0, 0, &e) == GT_OK);
  char sd[512], shard[600];
  snprintf(sd, sizeof sd, "%s/step_00000020", dir);
  for (int r = 0; r < 2; r++) {
    snprintf(shard, sizeof shard, "%s/shard_%05d-of-00002.gtck", sd, r);
    rewrite_header(shard, ed);
  }
  float *p = calloc((size_t)f.m.n_params, 4), *mu = calloc((size_t)f.m.n_params, 4),
        *nu = calloc((size_t)f.m.n_params, 4);
  gt_ckpt_loaded ld;
  ck_assert_msg(gt_ckpt_load_dir(sd, &f.m, p, mu, nu, &ld, &e) == GT_ERR_FORMAT, "%s.%s = %s: not refused",
                ed->obj, ed->key, ed->value);
  ck_assert_msg(strstr(e.msg, want), "%s.%s = %s: message '%s' lacks '%s'", ed->obj, ed->key, ed->value, e.msg, want);
  logbuf lb = {"", 0};
  ck_assert_msg(gt_ckpt_load_latest(dir, &f.m, p, mu, nu, &ld, logger, &lb, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(ld.state.step, 10);
  ck_assert_int_eq(ld.n_refused, 1);
  ck_assert_msg(strstr(lb.text, want) && strstr(lb.text, "trying the previous checkpoint"), "log '%s'", lb.text);
  free(ld.config_json);
  free(p), free(mu), free(nu);
  gt_test_state_free(&f);
  gt_test_rm_rf(dir);
  free(dir);
}

/* Every state field out of its range, each refused naming the field, the
 * value and the range (unchecked, a negative data_cursor crashed the resume,
 * opt_step = -100 gave a NaN loss). */
START_TEST(test_state_fields_validated) {
  static const struct {
    header_edit ed;
    const char *want;
  } cases[] = {
      {{"state", 0, "data_cursor", "-5"}, "state field 'data_cursor' = -5; expected an integer in [0, 2^53]"},
      {{"state", 0, "data_cursor", "2.5"}, "state field 'data_cursor' = 2.5; expected an integer"},
      {{"state", 0, "data_cursor", "\"17\""}, "state field 'data_cursor' = \"17\"; expected an integer"},
      {{"state", 0, "data_epoch", "-1"}, "state field 'data_epoch' = -1; expected an integer in [0, 20971520]"},
      {{"state", 0, "data_epoch", "1e18"}, "state field 'data_epoch' = 1e+18; expected an integer in [0, 20971520]"},
      {{"state", 0, "opt_step", "-100"}, "state field 'opt_step' = -100; expected an integer in [0, 20]"},
      {{"state", 0, "opt_step", "21"}, "state field 'opt_step' = 21; expected an integer in [0, 20]"},
      {{"state", 0, "num_devices", "0"}, "state field 'num_devices' = 0; expected an integer in [1, 1024]"},
      {{"state", 0, "n_shards", "0"}, "state field 'n_shards' = 0; expected an integer in [2, 2]"},
      {{"state", 0, "n_shards", "3"}, "state field 'n_shards' = 3; expected an integer in [2, 2]"},
      {{"state", 0, "next_lr", "-1"}, "state field 'next_lr' = -1; expected a finite number >= 0"},
      {{"shard", 0, "of", "-2"}, "shard field 'of' = -2"},
      {{"tensors", 0, "dtype", "\"BF16\""}, "tensor 'params/head' has dtype \"BF16\"; checkpoints store F32"},
      {{"tensors", 1, "name", "\"params/bogus\""}, "tensor 1 is named \"params/bogus\"; expected 'params/layer_0000'"},
      {{"tensors", 0, "shape", "[1]"}, "tensor 'params/head' has shape [1]; expected ["},
      {{"tensors", 2, "offset", "-64"}, "tensor 'params/layer_0001' field 'offset' = -64"},
      {{"tensors", 2, "crc32", "1e300"}, "tensor 'params/layer_0001' field 'crc32' = 1e+300"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) state_case(&cases[i].ed, cases[i].want);
}
END_TEST

/* The writer refuses a state the loader would refuse, so a run never
 * leaves a checkpoint it cannot resume from. */
START_TEST(test_invalid_state_never_written) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 11);
  char *dir = gt_test_mkdtemp("ckpt_wstate");
  const float *p[1] = {f.p}, *mu[1] = {f.mu}, *nu[1] = {f.nu};
  gt_ckpt_src src = {1, p, mu, nu};
  gt_ckpt_state st = {10, 11, {0, 0}, 1, 1, 1e-3, {0}, {0}, 0};
  gt_err e;
  ck_assert_int_eq(gt_ckpt_save(dir, &f.m, &src, &st, NULL, 0, 0, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "refusing to write") && strstr(e.msg, "state field 'opt_step' = 11; expected an integer "
                                                                    "in [0, 10]"),
                "%s", e.msg);
  ck_assert_int_eq(gt_test_system("test -z \"$(ls -A %s)\"", dir), 0);
  gt_test_state_free(&f);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* The two shards of a checkpoint disagree on the state: each is whole, but
 * they are not of one save. */
START_TEST(test_shards_disagree_on_state) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 9);
  char *dir = gt_test_mkdtemp("ckpt_mixed");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 20, 2, 0, 0, &e) == GT_OK);
  char shard[600];
  snprintf(shard, sizeof shard, "%s/step_00000020/shard_00001-of-00002.gtck", dir);
  header_edit ed = {"state", 0, "data_cursor", "18"};
  rewrite_header(shard, &ed);
  snprintf(shard, sizeof shard, "%s/step_00000020", dir);
  float *p = calloc((size_t)f.m.n_params, 4);
  gt_ckpt_loaded ld;
  ck_assert_int_eq(gt_ckpt_load_dir(shard, &f.m, p, NULL, NULL, &ld, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "shard_00001-of-00002.gtck' holds the state") && strstr(e.msg, "\"data_cursor\":18") &&
                    strstr(e.msg, "\"data_cursor\":17"),
                "%s", e.msg);
  free(p);
  gt_test_state_free(&f);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* `latest` names a step whose directory is gone: the fallback says so,
 * naming latest's target and the checkpoint tried instead. */
START_TEST(test_latest_missing_said) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 10);
  char *dir = gt_test_mkdtemp("ckpt_latest");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 1, 0, 0, &e) == GT_OK);
  ck_assert(save_sharded(&f, dir, 20, 1, 0, 0, &e) == GT_OK);
  ck_assert_int_eq(gt_test_system("rm -r %s/step_00000020", dir), 0);
  float *p = calloc((size_t)f.m.n_params, 4);
  gt_ckpt_loaded ld;
  logbuf lb = {"", 0};
  ck_assert_msg(gt_ckpt_load_latest(dir, &f.m, p, NULL, NULL, &ld, logger, &lb, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(ld.state.step, 10);
  free(ld.config_json);
  ck_assert_int_eq(lb.lines, 1);
  ck_assert_msg(strstr(lb.text, "/latest' names 'step_00000020', which does not exist; trying the newest older "
                                "checkpoint, 'step_00000010'"),
                "log '%s'", lb.text);
  /* and with nothing older, the refusal names it too */
  ck_assert_int_eq(gt_test_system("rm -r %s/step_00000010", dir), 0);
  lb = (logbuf){"", 0};
  ck_assert_int_eq(gt_ckpt_load_latest(dir, &f.m, p, NULL, NULL, &ld, logger, &lb, &e), GT_ERR_IO);
  ck_assert_msg(strstr(lb.text, "names 'step_00000020', which does not exist; there is no older checkpoint"), "log '%s'",
                lb.text);
  free(p);
  gt_test_state_free(&f);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(test_every_checkpoint_bad) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 3);
  char *dir = gt_test_mkdtemp("ckpt_allbad");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 1, 0, 0, &e) == GT_OK);
  char shard[512];
  snprintf(shard, sizeof shard, "%s/step_00000010/shard_00000-of-00001.gtck", dir);
  poke(shard, 200, 1);
  float *p = calloc((size_t)f.m.n_params, 4);
  gt_ckpt_loaded ld;
  ck_assert(gt_ckpt_load_latest(dir, &f.m, p, NULL, NULL, &ld, NULL, NULL, &e) == GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "none of the 1 checkpoint"), "%s", e.msg);
  free(p);
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

START_TEST(test_other_model_refused) {
  fixture a, b;
  gt_test_state_make(&a, "base_emb_dim=64", 4);
  gt_test_state_make(&b, "base_mlp_dim=96", 4);
  char *dir = gt_test_mkdtemp("ckpt_model");
  gt_err e;
  ck_assert(save_sharded(&a, dir, 5, 1, 0, 0, &e) == GT_OK);
  float *p = calloc((size_t)b.m.n_params, 4);
  gt_ckpt_loaded ld;
  ck_assert(gt_ckpt_load_latest(dir, &b.m, p, NULL, NULL, &ld, NULL, NULL, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "different model") && strstr(e.msg, "layers.0.mlp.gate_proj.weight is [128, 64] there, "
                                                                  "[96, 64] here"),
                "%s", e.msg);
  free(p);
  gt_test_state_free(&a);
  gt_test_state_free(&b);
  free(dir);
}
END_TEST

START_TEST(test_keep_newest) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 5);
  char *dir = gt_test_mkdtemp("ckpt_keep");
  gt_err e;
  for (int s = 1; s <= 5; s++) ck_assert(save_sharded(&f, dir, s * 10, 1, 0, 2, &e) == GT_OK);
  struct stat sb;
  char p[512];
  for (int s = 1; s <= 5; s++) {
    snprintf(p, sizeof p, "%s/step_%08d", dir, s * 10);
    ck_assert_int_eq(stat(p, &sb) == 0, s >= 4);
  }
  /* step 50 left uncommitted (`latest` still names 40, as after a crash
   * between the rename and `latest`, or a resume that walked back from a
   * damaged 50): the next save, 45, keeps the committed 40 beside itself
   * and leaves 50 alone (a save of step 50 replaces it) */
  snprintf(p, sizeof p, "%s/latest", dir);
  gt_test_write_text(p, "step_00000040\n");
  ck_assert(save_sharded(&f, dir, 45, 1, 0, 2, &e) == GT_OK);
  const int want[][2] = {{40, 1}, {45, 1}, {50, 1}, {30, 0}};
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/step_%08d", dir, want[k][0]);
    ck_assert_msg((stat(p, &sb) == 0) == want[k][1], "step %d %s", want[k][0], want[k][1] ? "deleted" : "kept");
  }
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

START_TEST(test_nonfinite_never_written) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 6);
  char *dir = gt_test_mkdtemp("ckpt_nan");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 1, 0, 0, &e) == GT_OK);
  f.nu[12345] = NAN;
  ck_assert(save_sharded(&f, dir, 20, 1, 0, 0, &e) == GT_ERR_NUMERIC);
  ck_assert_msg(strstr(e.msg, "opt_nu element 12345") && strstr(e.msg, "not finite"), "%s", e.msg);
  char p[512];
  snprintf(p, sizeof p, "%s/latest", dir);
  char *lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000010\n");
  free(lt);
  struct stat sb;
  snprintf(p, sizeof p, "%s/step_00000020", dir);
  ck_assert(stat(p, &sb) != 0);
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

/* The write of the 2nd checkpoint fails half-way with ENOSPC (the test seam
 * of ckpt_seam.h, at the point where a full disk would stop it): latest
 * stays at the first, and no partial directory is left behind. */
START_TEST(test_disk_full_keeps_latest) {
  gt__ckpt_set_fault(GT__CKPT_FAULT_ENOSPC, 2);
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 7);
  char *dir = gt_test_mkdtemp("ckpt_full");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 2, 0, 0, &e) == GT_OK);
  ck_assert(save_sharded(&f, dir, 20, 2, 0, 0, &e) == GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "No space left on device"), "%s", e.msg);
  ck_assert_int_eq(gt_test_system("test \"$(ls -A %s)\" = \"latest\nstep_00000010\"", dir), 0);
  char p[512];
  snprintf(p, sizeof p, "%s/latest", dir);
  char *lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000010\n");
  free(lt);
  /* Fired once: a third save writes. */
  ck_assert(save_sharded(&f, dir, 30, 2, 0, 0, &e) == GT_OK);
  gt__ckpt_set_fault(GT__CKPT_FAULT_NONE, 0);
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

/* SIGKILL half-way through the 2nd checkpoint (the seam's other fault), in a
 * child process so the test survives it: latest stays at the first, the
 * half-written checkpoint is only a .tmp- directory, and the next save
 * clears it away. */
START_TEST(test_kill_mid_write_keeps_latest) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 7);
  char *dir = gt_test_mkdtemp("ckpt_kill");
  gt_err e;
  ck_assert(save_sharded(&f, dir, 10, 2, 0, 0, &e) == GT_OK);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    gt__ckpt_set_fault(GT__CKPT_FAULT_KILL, 1);
    save_sharded(&f, dir, 20, 2, 0, 0, &e);
    _exit(0); /* only when the seam did not fire */
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer ended with status %#x, not SIGKILL",
                status);
  ck_assert_int_eq(gt_test_system("test \"$(LC_ALL=C ls -A %s)\" = \".tmp-step_00000020\nlatest\nstep_00000010\"", dir),
                   0);
  char p[512];
  snprintf(p, sizeof p, "%s/latest", dir);
  char *lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000010\n");
  free(lt);
  /* This process never armed the seam: the next save writes. */
  ck_assert(save_sharded(&f, dir, 30, 2, 0, 0, &e) == GT_OK);
  ck_assert_int_eq(gt_test_system("test \"$(LC_ALL=C ls -A %s)\" = \"latest\nstep_00000010\nstep_00000030\"", dir), 0);
  gt_test_state_free(&f);
  free(dir);
}
END_TEST

/* ---------- whole runs through gt_train ---------- */

/* A small corpus (seeded words) that 20 steps of 4 x 64 tokens read more
 * than once, so the data position crosses an epoch. */
static void write_corpus(const char *path) {
  static const char *w[] = {"the", "lord", "said", "unto", "moses", "and", "it", "was", "so", "light", "waters"};
  FILE *fp = fopen(path, "w");
  uint64_t s = 99;
  for (int i = 0; i < 560; i++) fprintf(fp, "%s%s", w[gt_test_rand_u64(&s) % 11], i % 13 == 12 ? ".\n" : " ");
  fclose(fp);
}

/* a fresh directory holding corpus.txt, for the runs of one test */
static char *run_base(const char *tag) {
  char *base = gt_test_mkdtemp(tag), cp[600];
  snprintf(cp, sizeof cp, "%s/corpus.txt", base);
  write_corpus(cp);
  return base;
}

typedef struct run {
  gt_train_result res;
  gt_rc rc;
  char err[GT_ERR_MSG_MAX];
} run;

/* The test seams of gt_train_opts: the step whose gradient is poisoned, and
 * the step after which the process sends itself SIGTERM (-1: none). With
 * signals, a handler like the command's sets the stop flag. */
static int64_t g_nan_step = -1, g_signal_step = -1;
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }
static void raise_at(const gt_step_metrics *sm, void *ctx) {
  if (sm->step == *(const int64_t *)ctx) raise(SIGTERM);
}

static run train(const char *base, const char *name, int n_extra, const char *const *extra, int signals) {
  char bo[600], rn[128], dp[600];
  snprintf(bo, sizeof bo, "base_output_directory=%s", base);
  snprintf(rn, sizeof rn, "run_name=%s", name);
  snprintf(dp, sizeof dp, "dataset_path=%s/corpus.txt", base);
  const char *ov[24] = {"model_name=gemma3-tiny", "dataset_type=text", dp, bo, rn, "learning_rate=0.01",
                        "eval_interval=-1", "sample_tokens=0", "learning_rate_schedule_steps=20",
                        "eval_split_fraction=0.05", "threads_per_device=1"};
  int n = 11;
  for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
  gt_config c;
  gt_test_config(&c, n, ov);
  run r;
  memset(&r, 0, sizeof r);
  gt_err e;
  gt_err_clear(&e);
  gt_train_opts o = {.test_nan_step = g_nan_step >= 0 ? &g_nan_step : NULL};
  struct sigaction sa, old;
  if (signals) {
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old);
    g_stop = 0;
    o.stop = &g_stop;
    if (g_signal_step >= 0) o.test_after_step = raise_at, o.test_ctx = &g_signal_step;
  }
  r.rc = gt_train(&c, &o, &r.res, &e);
  if (signals) sigaction(SIGTERM, &old, NULL);
  snprintf(r.err, sizeof r.err, "%s", e.msg);
  return r;
}

/* the "loss" values of metrics.jsonl, one per line, as text */
static char *losses(const char *base, const char *name) {
  return gt_test_output("grep -o '\"loss\": [^,]*' %s/%s/metrics.jsonl", base, name);
}

/* the parameters of a run's final checkpoint */
static float *final_params(const char *base, const char *name, const char *model_ov, int64_t *n,
                           gt_ckpt_state *st) {
  const char *ov[] = {"model_name=gemma3-tiny", model_ov};
  gt_config c;
  gt_test_config(&c, model_ov ? 2 : 1, ov);
  gt_model m;
  gt_err e;
  gt_test_model_build(&m, &c);
  float *p = malloc(sizeof(float) * (size_t)m.n_params);
  char path[700];
  snprintf(path, sizeof path, "%s/%s", base, name);
  gt_ckpt_loaded ld;
  ck_assert_msg(gt_ckpt_load_latest(path, &m, p, NULL, NULL, &ld, NULL, NULL, &e) == GT_OK, "%s", e.msg);
  free(ld.config_json);
  if (st) *st = ld.state;
  *n = m.n_params;
  gt_model_free(&m);
  return p;
}

static void all_finite_checkpoints(const char *base, const char *name) {
  char *list = gt_test_output("ls -d %s/%s/checkpoints/step_*", base, name);
  const char *ov[] = {"model_name=gemma3-tiny"};
  gt_config c;
  gt_test_config(&c, 1, ov);
  gt_model m;
  gt_err e;
  gt_test_model_build(&m, &c);
  size_t nb = sizeof(float) * (size_t)m.n_params;
  float *p = malloc(nb), *mu = malloc(nb), *nu = malloc(nb);
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    gt_ckpt_loaded ld;
    ck_assert_msg(gt_ckpt_load_dir(line, &m, p, mu, nu, &ld, &e) == GT_OK, "%s", e.msg);
    for (int64_t i = 0; i < m.n_params; i++) ck_assert(isfinite(p[i]) && isfinite(mu[i]) && isfinite(nu[i]));
    free(ld.config_json);
  }
  free(p), free(mu), free(nu), free(list);
  gt_model_free(&m);
}

START_TEST(test_resume_bit_exact) {
  char *base = run_base("ckpt_resume");
  const char *s20[] = {"steps=20"}, *s10[] = {"steps=10"};
  run a = train(base, "straight", 1, s20, 0);
  ck_assert_msg(a.rc == GT_OK, "%s", a.err);
  run b1 = train(base, "resumed", 1, s10, 0);
  ck_assert_msg(b1.rc == GT_OK, "%s", b1.err);
  run b2 = train(base, "resumed", 1, s20, 0);
  ck_assert_msg(b2.rc == GT_OK, "%s", b2.err);
  ck_assert_int_eq(b2.res.start_step, 10);
  ck_assert_int_eq(b2.res.steps_done, 20);
  char *la = losses(base, "straight"), *lb = losses(base, "resumed");
  ck_assert_str_eq(la, lb); /* all 20 lines, steps 11-20 computed after the resume */
  int64_t n;
  float *pa = final_params(base, "straight", NULL, &n, NULL), *pb = final_params(base, "resumed", NULL, &n, NULL);
  ck_assert(memcmp(pa, pb, sizeof(float) * (size_t)n) == 0);
  /* the same with zlib-compressed checkpoints */
  const char *z10[] = {"steps=10", "checkpoint_compression=6"}, *z20[] = {"steps=20", "checkpoint_compression=6"};
  ck_assert(train(base, "zipped", 2, z10, 0).rc == GT_OK);
  ck_assert(train(base, "zipped", 2, z20, 0).rc == GT_OK);
  char *lz = losses(base, "zipped");
  ck_assert_str_eq(la, lz);
  free(la), free(lb), free(lz), free(pa), free(pb);
  free(base);
}
END_TEST

START_TEST(test_resume_bf16_bit_exact) {
  /* dtype=bfloat16 with mu_dtype=bfloat16, on 1 device (rounded copies) and
   * 2 (bf16 gathers, 2 shard files): 8 steps straight, or 4, a checkpoint
   * (float32 files: mu expanded exactly) and a resume for 4 more, give the
   * same losses and final checkpoint (params and both moments) bit for bit;
   * the saved mu are bf16 values */
  char *base = run_base("ckpt_bf16");
  const char *dev[2][2] = {{"num_devices=1", "per_device_batch_size=4"}, {"num_devices=2", "per_device_batch_size=2"}};
  for (int k = 0; k < 2; k++) {
    char sa[32], sr[32];
    snprintf(sa, sizeof sa, "straight%d", k);
    snprintf(sr, sizeof sr, "resumed%d", k);
    const char *s8[] = {"steps=8", "dtype=bfloat16", "mu_dtype=bfloat16", dev[k][0], dev[k][1]};
    const char *s4[] = {"steps=4", "dtype=bfloat16", "mu_dtype=bfloat16", dev[k][0], dev[k][1]};
    run a = train(base, sa, 5, s8, 0);
    ck_assert_msg(a.rc == GT_OK, "%s", a.err);
    ck_assert_msg(train(base, sr, 5, s4, 0).rc == GT_OK, "first half");
    run b = train(base, sr, 5, s8, 0);
    ck_assert_msg(b.rc == GT_OK && b.res.start_step == 4 && b.res.steps_done == 8, "%s", b.err);
    char *la = losses(base, sa), *lb = losses(base, sr);
    ck_assert_str_eq(la, lb);
    const char *ov[] = {"model_name=gemma3-tiny"};
    gt_config c;
    gt_test_config(&c, 1, ov);
    gt_model m;
    gt_err e;
    gt_test_model_build(&m, &c);
    size_t nb = sizeof(float) * (size_t)m.n_params;
    float *st[2][3];
    const char *names[2] = {sa, sr};
    for (int r = 0; r < 2; r++) {
      for (int x = 0; x < 3; x++) st[r][x] = malloc(nb);
      char path[700];
      snprintf(path, sizeof path, "%s/%s", base, names[r]);
      gt_ckpt_loaded ld;
      ck_assert_msg(gt_ckpt_load_latest(path, &m, st[r][0], st[r][1], st[r][2], &ld, NULL, NULL, &e) == GT_OK, "%s",
                    e.msg);
      ck_assert_int_eq(ld.state.step, 8);
      ck_assert_int_eq(ld.state.n_shards, k + 1);
      free(ld.config_json);
    }
    for (int x = 0; x < 3; x++) ck_assert(memcmp(st[0][x], st[1][x], nb) == 0);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < m.n_params; i++) {
      uint32_t u;
      memcpy(&u, &st[0][1][i], 4);
      ck_assert_msg((u & 0xffffu) == 0, "mu[%lld] = %.9g is no bf16 value", (long long)i, (double)st[0][1][i]);
      nonzero += st[0][1][i] != 0.0f;
    }
    ck_assert_int_gt(nonzero, m.n_params / 2);
    for (int r = 0; r < 2; r++)
      for (int x = 0; x < 3; x++) free(st[r][x]);
    gt_model_free(&m);
    free(la), free(lb);
  }
  free(base);
}
END_TEST

START_TEST(test_resume_expert_parallel) {
  /* gemma4-tiny-moe on 2 devices as 1 x 1 x 2 (each holds 4 of the 8
   * experts of every layer): stop at step 4, resume, and steps 5-8 (losses
   * with the lb term, and the final weights) are bit-identical to an
   * uninterrupted run on the same mesh; the checkpoint (the full state,
   * assembled from both devices' experts) also resumes on one device */
  char *base = gt_test_mkdtemp("ckpt_experts");
  char cp[600];
  snprintf(cp, sizeof cp, "%s/corpus.txt", base);
  write_corpus(cp);
  const char *mo = "model_name=gemma4-tiny-moe";
  const char *s8[] = {mo, "steps=8", "num_devices=2", "ici_expert_parallelism=2", "per_device_batch_size=2",
                      "max_target_length=32", "learning_rate_schedule_steps=8"};
  const char *s4[] = {mo, "steps=4", "num_devices=2", "ici_expert_parallelism=2", "per_device_batch_size=2",
                      "max_target_length=32", "learning_rate_schedule_steps=8"};
  run a = train(base, "straight", 7, s8, 0);
  ck_assert_msg(a.rc == GT_OK, "%s", a.err);
  ck_assert_msg(train(base, "resumed", 7, s4, 0).rc == GT_OK, "first half");
  run b = train(base, "resumed", 7, s8, 0);
  ck_assert_msg(b.rc == GT_OK && b.res.start_step == 4 && b.res.steps_done == 8, "%s", b.err);
  char *la = losses(base, "straight"), *lb = losses(base, "resumed");
  ck_assert_str_eq(la, lb);
  ck_assert_int_eq(gt_test_system("grep -c 'moe_lb_loss' %s/resumed/metrics.jsonl | grep -qx 8", base), 0);
  int64_t n;
  float *pa = final_params(base, "straight", mo, &n, NULL), *pb = final_params(base, "resumed", mo, &n, NULL);
  ck_assert(memcmp(pa, pb, sizeof(float) * (size_t)n) == 0);
  /* onto one device (global batch 4 either way): reduction order only */
  ck_assert(train(base, "moved", 7, s4, 0).rc == GT_OK);
  const char *one8[] = {mo, "steps=8", "per_device_batch_size=4", "max_target_length=32", "learning_rate_schedule_steps=8"};
  run c = train(base, "moved", 5, one8, 0);
  ck_assert_msg(c.rc == GT_OK && c.res.start_step == 4, "%s", c.err);
  float *pc = final_params(base, "moved", mo, &n, NULL);
  ck_assert_msg(gt_test_norm_rel_err(pc, pa, n) < 1e-4, "resumed on one device: %.3g", gt_test_norm_rel_err(pc, pa, n));
  free(la), free(lb), free(pa), free(pb), free(pc);
  free(base);
}
END_TEST

START_TEST(test_resume_other_device_count) {
  char *base = run_base("ckpt_devices");
  /* global batch 6 on 1, 2 and 3 devices */
  const char *one[] = {"steps=20", "per_device_batch_size=6"};
  run a = train(base, "one", 2, one, 0);
  ck_assert_msg(a.rc == GT_OK, "%s", a.err);
  const char *two10[] = {"steps=10", "num_devices=2", "per_device_batch_size=3"};
  const char *three20[] = {"steps=20", "num_devices=3", "per_device_batch_size=2"};
  const char *one20[] = {"steps=20", "per_device_batch_size=6"};
  const char *two20[] = {"steps=20", "num_devices=2", "per_device_batch_size=3"};
  ck_assert(train(base, "two_three", 3, two10, 0).rc == GT_OK);
  run b = train(base, "two_three", 3, three20, 0);
  ck_assert_msg(b.rc == GT_OK && b.res.start_step == 10, "%s", b.err);
  ck_assert(train(base, "two_one", 3, two10, 0).rc == GT_OK);
  run c = train(base, "two_one", 2, one20, 0);
  ck_assert_msg(c.rc == GT_OK && c.res.start_step == 10, "%s", c.err);
  ck_assert(train(base, "two_two", 3, two10, 0).rc == GT_OK);
  ck_assert(train(base, "two_two", 3, two20, 0).rc == GT_OK);
  ck_assert(train(base, "two_straight", 3, two20, 0).rc == GT_OK);
  /* same device count: bit-identical; another count: reduction order only */
  char *l22 = losses(base, "two_two"), *l2s = losses(base, "two_straight");
  ck_assert_str_eq(l22, l2s);
  int64_t n;
  float *p1 = final_params(base, "one", NULL, &n, NULL);
  const char *runs[] = {"two_three", "two_one", "two_two"};
  for (int k = 0; k < 3; k++) {
    float *pk = final_params(base, runs[k], NULL, &n, NULL);
    ck_assert_msg(gt_test_max_abs_err(pk, p1, n) < 1e-5, "%s: params differ by %g", runs[k],
                  gt_test_max_abs_err(pk, p1, n));
    free(pk);
    char *lk = losses(base, runs[k]), *l1 = losses(base, "one");
    /* compare loss values numerically, line by line */
    char *s1 = l1, *sk = lk;
    for (int i = 0; i < 20; i++) {
      char *x = strstr(s1, "\"loss\": "), *y = strstr(sk, "\"loss\": ");
      ck_assert(x && y);
      double vx = atof(x + 8), vy = atof(y + 8);
      ck_assert_msg(fabs(vx - vy) <= 1e-5 * fabs(vx), "%s step %d: %.9g vs %.9g", runs[k], i, vy, vx);
      s1 = x + 8, sk = y + 8;
    }
    free(lk), free(l1);
  }
  free(l22), free(l2s), free(p1);
  free(base);
}
END_TEST

START_TEST(test_nan_stops_without_checkpoint) {
  char *base = run_base("ckpt_nanstop");
  g_nan_step = 5;
  const char *ov[] = {"steps=20", "checkpoint_period=2"};
  run r = train(base, "stop", 2, ov, 0);
  ck_assert_int_eq(r.rc, GT_ERR_NUMERIC);
  ck_assert_msg(strstr(r.err, "step 5 has loss") && strstr(r.err, "without applying it or writing a checkpoint"), "%s",
                r.err);
  char p[700];
  snprintf(p, sizeof p, "%s/stop/checkpoints/latest", base);
  char *lt = gt_test_read_file(p, NULL);
  ck_assert_str_eq(lt, "step_00000004\n"); /* steps 0-3 done; step 5 never applied */
  free(lt);
  all_finite_checkpoints(base, "stop");
  g_nan_step = -1;
  free(base);
}
END_TEST

static void nan_skip_case(const char *devices, const char *pdb) {
  char *base = run_base("ckpt_nanskip");
  g_nan_step = 5;
  const char *ov[] = {"steps=12", "checkpoint_period=3", "skip_nonfinite_steps=true", devices, pdb};
  run r = train(base, "skip", 5, ov, 0);
  ck_assert_msg(r.rc == GT_OK, "%s", r.err);
  ck_assert_int_eq(r.res.skipped_steps, 1);
  ck_assert_int_eq(r.res.steps_done, 12);
  ck_assert(isfinite(r.res.last_loss));
  all_finite_checkpoints(base, "skip");
  /* the skipped update is not counted: 12 steps, 11 AdamW updates */
  int64_t n;
  gt_ckpt_state st;
  free(final_params(base, "skip", NULL, &n, &st));
  ck_assert_int_eq(st.step, 12);
  ck_assert_int_eq(st.opt_step, 11);
  ck_assert_int_eq(gt_test_system("grep -c '\"skipped\": true' %s/skip/metrics.jsonl | grep -qx 1", base), 0);
  g_nan_step = -1;
  free(base);
}

START_TEST(test_nan_skipped_one_device) { nan_skip_case("num_devices=1", "per_device_batch_size=4"); }
END_TEST
START_TEST(test_nan_skipped_two_devices) { nan_skip_case("num_devices=2", "per_device_batch_size=2"); }
END_TEST

/* SIGTERM after step 6 (sent by the process to itself at that step: the
 * handler path is the real one): the step finishes, a checkpoint is written,
 * gt_train returns OK; the rerun continues bit-identically. */
START_TEST(test_signal_checkpoints_and_stops) {
  char *base = run_base("ckpt_signal");
  const char *s20[] = {"steps=20"};
  ck_assert(train(base, "straight", 1, s20, 0).rc == GT_OK);
  g_signal_step = 6;
  run a = train(base, "sig", 1, s20, 1);
  g_signal_step = -1;
  ck_assert_msg(a.rc == GT_OK, "%s", a.err);
  ck_assert_int_eq(a.res.interrupted, 1);
  ck_assert_int_eq(a.res.steps_done, 7);
  run b = train(base, "sig", 1, s20, 1);
  ck_assert_msg(b.rc == GT_OK && b.res.start_step == 7 && !b.res.interrupted, "%s", b.err);
  char *la = losses(base, "straight"), *lb = losses(base, "sig");
  ck_assert_str_eq(la, lb);
  free(la), free(lb);
  free(base);
}
END_TEST

START_TEST(test_load_parameters_only) {
  char *base = run_base("ckpt_params");
  const char *s10[] = {"steps=10"};
  ck_assert(train(base, "pre", 1, s10, 0).rc == GT_OK);
  char lp[800], lf[800];
  snprintf(lp, sizeof lp, "load_parameters_path=%s/pre", base);
  snprintf(lf, sizeof lf, "load_full_state_path=%s/pre/checkpoints", base);
  const char *ov[] = {"steps=3", lp, "enable_checkpointing=false"};
  run r = train(base, "fine", 3, ov, 0);
  ck_assert_msg(r.rc == GT_OK && r.res.start_step == 0 && r.res.steps_done == 3, "%s", r.err);
  /* starts from the trained weights: its first loss is the pretrained run's
   * level, well under the fresh model's */
  run fresh = train(base, "fresh", 1, (const char *[]){"steps=3"}, 0);
  ck_assert(r.res.first_loss < fresh.res.first_loss - 0.3);
  /* the full state continues the step count */
  const char *ov2[] = {"steps=12", lf};
  run f2 = train(base, "cont", 2, ov2, 0);
  ck_assert_msg(f2.rc == GT_OK && f2.res.start_step == 10 && f2.res.steps_done == 12, "%s", f2.err);
  /* a model key given explicitly that contradicts the checkpoint's model is
   * refused naming the key and both values (hf/model_source.h) */
  const char *ov3[] = {"steps=3", lp, "base_mlp_dim=96", "enable_checkpointing=false"};
  run bad = train(base, "bad", 4, ov3, 0);
  ck_assert_int_eq(bad.rc, GT_ERR_CONFIG);
  ck_assert_msg(strstr(bad.err, "load_parameters_path") && strstr(bad.err, "'base_mlp_dim' = 96") &&
                    strstr(bad.err, "base_mlp_dim = 128"),
                "%s", bad.err);
  free(base);
}
END_TEST

/* A resumed run takes its data position from the checkpoint (unchecked, a
 * negative data_cursor with valid crc32s crashed the resume): the loader
 * refuses it; a cursor the checkpoint allows but the data source does not
 * have (past its windows) is refused by the data source, naming both. */
START_TEST(test_resume_bad_data_position) {
  char *base = run_base("ckpt_position");
  const char *s4[] = {"steps=4"}, *s8[] = {"steps=8"};
  run a = train(base, "pos", 1, s4, 0);
  ck_assert_msg(a.rc == GT_OK, "%s", a.err);
  char shard[800];
  snprintf(shard, sizeof shard, "%s/pos/checkpoints/step_00000004/shard_00000-of-00001.gtck", base);
  header_edit neg = {"state", 0, "data_cursor", "-5"};
  rewrite_header(shard, &neg);
  run b = train(base, "pos", 1, s8, 0);
  ck_assert_int_eq(b.rc, GT_ERR_FORMAT);
  ck_assert_msg(strstr(b.err, "none of the 1 checkpoint") && strstr(b.err, "state field 'data_cursor' = -5"), "%s",
                b.err);
  header_edit far = {"state", 0, "data_cursor", "100000"};
  rewrite_header(shard, &far);
  run c = train(base, "pos", 1, s8, 0);
  ck_assert_int_eq(c.rc, GT_ERR_CONFIG);
  ck_assert_msg(strstr(c.err, "step_00000004") && strstr(c.err, "data_cursor = 100000 is outside [0, "), "%s", c.err);
  /* the untouched position resumes */
  header_edit ok = {"state", 0, "data_cursor", "16"};
  rewrite_header(shard, &ok);
  run d = train(base, "pos", 1, s8, 0);
  ck_assert_msg(d.rc == GT_OK && d.res.start_step == 4, "%s", d.err);
  free(base);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt");
  TCase *tf = gt_test_tcase(s, "format");
  tcase_add_test(tf, test_roundtrip_any_shards);
  tcase_add_test(tf, test_flipped_data_byte);
  tcase_add_test(tf, test_flipped_header_byte);
  tcase_add_test(tf, test_wrong_magic);
  tcase_add_test(tf, test_truncated);
  tcase_add_test(tf, test_empty_file);
  tcase_add_test(tf, test_swapped_headers);
  tcase_add_test(tf, test_missing_shard);
  tcase_add_test(tf, test_every_checkpoint_bad);
  tcase_add_test(tf, test_state_fields_validated);
  tcase_add_test(tf, test_shards_disagree_on_state);
  tcase_add_test(tf, test_invalid_state_never_written);
  tcase_add_test(tf, test_latest_missing_said);
  tcase_add_test(tf, test_other_model_refused);
  tcase_add_test(tf, test_keep_newest);
  tcase_add_test(tf, test_nonfinite_never_written);
  tcase_add_test(tf, test_disk_full_keeps_latest);
  tcase_add_test(tf, test_kill_mid_write_keeps_latest);
  TCase *tr = gt_test_tcase(s, "runs");
  tcase_add_test(tr, test_resume_bit_exact);
  tcase_add_test(tr, test_resume_other_device_count);
  tcase_add_test(tr, test_resume_bf16_bit_exact);
  tcase_add_test(tr, test_resume_expert_parallel);
  tcase_add_test(tr, test_nan_stops_without_checkpoint);
  tcase_add_test(tr, test_nan_skipped_one_device);
  tcase_add_test(tr, test_nan_skipped_two_devices);
  tcase_add_test(tr, test_signal_checkpoints_and_stops);
  tcase_add_test(tr, test_load_parameters_only);
  tcase_add_test(tr, test_resume_bad_data_position);
  return gt_test_run_suite(s, 0);
}
