/* Checkpoints written by several ranks at once (gt_ckpt_save_sync), each
 * rank a thread here and the ranks' agreement a pthread fake of
 * gt_dist_agree: the files are byte for byte those of a save by one process;
 * any rank's failure (a full disk, a poisoned shard, a shard no rank or two
 * ranks wrote, ranks that disagree on the state, rank 0's commit) reaches
 * every rank naming that rank, with `latest` and the previous checkpoint
 * untouched and no temporary directory left; a crashed save's temporary
 * directory is ignored by loads and removed by the next save. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_seam.h"
#include "mesh/mesh.h"
#include "gt_testutil.h"

#define MAXR 4
#define MAXS 8

/* ---------- the fake: gt_dist_agree over threads ---------- */

typedef struct world world;
struct world {
  int size;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  long gen;
  gt_rc rcs[MAXR];
  char msgs[MAXR][GT_ERR_MSG_MAX];
  char whats[MAXR][128];
  gt_rc out_rc; /* the last completed agreement */
  char out_msg[GT_ERR_MSG_MAX + 32];
  int mismatch;    /* ranks called one agreement with different `what`s */
  char log[2048];  /* every agreement's `what`, one a line */
  /* run once per agreement, when every rank has arrived and before any
   * leaves: what happens on disk between two protocol steps */
  void (*hook)(world *w, const char *what);
  const char *hook_root;
};

typedef struct rank_ctx {
  world *w;
  int rank;
} rank_ctx;

/* as dist.h specifies gt_dist_agree: GT_OK when every rank passed GT_OK,
 * else the lowest failing rank's rc with "rank R: <its message>" */
static gt_rc fake_agree(void *ctx, gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  rank_ctx *c = ctx;
  world *w = c->w;
  pthread_mutex_lock(&w->mu);
  long gen = w->gen;
  w->rcs[c->rank] = mine;
  snprintf(w->msgs[c->rank], sizeof w->msgs[0], "%s", mine ? mine_err->msg : "");
  snprintf(w->whats[c->rank], sizeof w->whats[0], "%s", what);
  if (++w->arrived == w->size) {
    w->out_rc = GT_OK;
    for (int r = 0; r < w->size; r++) {
      if (strcmp(w->whats[r], w->whats[0])) w->mismatch = 1;
      if (w->rcs[r] && !w->out_rc) {
        w->out_rc = w->rcs[r];
        snprintf(w->out_msg, sizeof w->out_msg, "rank %d: %s", r, w->msgs[r]);
      }
    }
    size_t o = strlen(w->log);
    snprintf(w->log + o, sizeof w->log - o, "%s\n", what);
    if (w->hook) w->hook(w, what);
    w->arrived = 0;
    w->gen++;
    pthread_cond_broadcast(&w->cv);
  } else {
    while (w->gen == gen) pthread_cond_wait(&w->cv, &w->mu);
  }
  gt_rc rc = w->out_rc;
  if (rc) gt_err_set(err, rc, "%s", w->out_msg);
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* ---------- the state: a tiny model's params and moments ---------- */

typedef gt_test_state fixture;

static gt_ckpt_state state_of(int64_t step, int S) { return (gt_ckpt_state){step, step - 1, {3, 17}, S, S, 1e-3, {0}, {0}, 0}; }

/* the same state saved by one process, every shard */
static void save_one_process(fixture *f, const char *root, int64_t step, int S, int level) {
  float *ps[MAXS], *ms[MAXS], *ns[MAXS];
  for (int r = 0; r < S; r++)
    ps[r] = gt_test_shard_of(&f->m, f->p, r, S), ms[r] = gt_test_shard_of(&f->m, f->mu, r, S), ns[r] = gt_test_shard_of(&f->m, f->nu, r, S);
  gt_ckpt_src src = {S, (const float *const *)ps, (const float *const *)ms, (const float *const *)ns};
  gt_ckpt_state st = state_of(step, S);
  gt_err e;
  ck_assert_msg(gt_ckpt_save(root, &f->m, &src, &st, "{\"steps\": 7}", level, 0, &e) == GT_OK, "%s", e.msg);
  for (int r = 0; r < S; r++) free(ps[r]), free(ms[r]), free(ns[r]);
}

/* ---------- one save by `size` rank threads ---------- */

typedef struct job {
  rank_ctx rc_ctx;
  fixture *f;
  const char *root;
  int64_t step, keep;
  int S, level;
  unsigned held;          /* bit r: this rank holds shard r */
  int S_seen;             /* the shard count this rank believes in (0: S) */
  int64_t cursor;         /* this rank's data cursor (0: 17, the others') */
  int poison;             /* a NaN in opt_nu element 5 of each shard it holds */
  int half;               /* passes its shards without opt_mu */
  gt_rc rc;
  char msg[GT_ERR_MSG_MAX];
  char latest[64];        /* what `latest` said when the save returned here */
} job;

static void *rank_main(void *arg) {
  job *j = arg;
  int S = j->S_seen ? j->S_seen : j->S;
  const float *ps[MAXS] = {0}, *ms[MAXS] = {0}, *ns[MAXS] = {0};
  for (int r = 0; r < S; r++)
    if (j->held >> r & 1) {
      float *nu = gt_test_shard_of(&j->f->m, j->f->nu, r, S);
      if (j->poison) nu[5] = NAN;
      ps[r] = gt_test_shard_of(&j->f->m, j->f->p, r, S), ms[r] = gt_test_shard_of(&j->f->m, j->f->mu, r, S), ns[r] = nu;
    }
  const float *mus[MAXS] = {0};
  for (int r = 0; r < S && !j->half; r++) mus[r] = ms[r];
  gt_ckpt_src src = {S, ps, mus, ns};
  gt_ckpt_state st = state_of(j->step, S);
  if (j->cursor) st.data.cursor = j->cursor;
  gt_ckpt_sync sync = {j->rc_ctx.rank, j->rc_ctx.w->size, fake_agree, &j->rc_ctx};
  gt_err e = {GT_OK, ""};
  j->rc = gt_ckpt_save_sync(j->root, &j->f->m, &src, &st, "{\"steps\": 7}", j->level, j->keep, &sync, &e);
  snprintf(j->msg, sizeof j->msg, "%s", e.msg);
  char lp[600];
  snprintf(lp, sizeof lp, "%s/latest", j->root);
  char *lt = gt_test_read_file(lp, NULL);
  snprintf(j->latest, sizeof j->latest, "%s", lt ? lt : "");
  free(lt);
  for (int r = 0; r < S; r++) free((void *)ps[r]), free((void *)ms[r]), free((void *)ns[r]);
  return NULL;
}

/* Runs one save on size ranks; jobs[k] starts as a template (held, S_seen,
 * cursor, poison) and ends holding rank k's outcome. */
static void save_ranks(world *w, job *jobs, int size, fixture *f, const char *root, int64_t step, int S, int level,
                       int64_t keep) {
  memset(w->log, 0, sizeof w->log);
  w->size = size;
  w->arrived = 0;
  w->mismatch = 0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_t th[MAXR];
  for (int k = 0; k < size; k++) {
    jobs[k].rc_ctx = (rank_ctx){w, k};
    jobs[k].f = f, jobs[k].root = root, jobs[k].step = step, jobs[k].keep = keep;
    jobs[k].S = S, jobs[k].level = level;
    ck_assert_int_eq(pthread_create(&th[k], NULL, rank_main, &jobs[k]), 0);
  }
  for (int k = 0; k < size; k++) pthread_join(th[k], NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  ck_assert_msg(!w->mismatch, "the ranks called one agreement with different names");
}

/* every rank returned rc, each with the same message holding `want` */
static void expect_all(const job *jobs, int size, gt_rc rc, const char *want) {
  for (int k = 0; k < size; k++) {
    ck_assert_msg(jobs[k].rc == rc, "rank %d returned %d (%s), expected %d", k, jobs[k].rc, jobs[k].msg, rc);
    if (want) ck_assert_msg(strstr(jobs[k].msg, want), "rank %d: '%s' lacks '%s'", k, jobs[k].msg, want);
    ck_assert_str_eq(jobs[k].msg, jobs[0].msg);
  }
}

/* the checkpoint `latest` picks is step `step`, bit for bit the fixture's */
static void expect_latest_loads(fixture *f, const char *root, int64_t step) {
  int64_t n = f->m.n_params;
  float *p = calloc((size_t)n, 4), *mu = calloc((size_t)n, 4), *nu = calloc((size_t)n, 4);
  gt_ckpt_loaded ld;
  gt_err e;
  ck_assert_msg(gt_ckpt_load_latest(root, &f->m, p, mu, nu, &ld, NULL, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(ld.state.step, step);
  ck_assert_int_eq(ld.n_refused, 0);
  ck_assert_int_eq(ld.state.data.cursor, 17);
  ck_assert(gt_test_same_bits(p, f->p, n) && gt_test_same_bits(mu, f->mu, n) && gt_test_same_bits(nu, f->nu, n));
  free(ld.config_json);
  free(p), free(mu), free(nu);
}

/* the checkpoints directory holds exactly `names` (LC_ALL=C ls -A, one a line) */
static void expect_ls(const char *root, const char *names) {
  char *ls = gt_test_output("LC_ALL=C ls -A %s", root);
  ck_assert_str_eq(ls, names);
  free(ls);
}

/* ---------- tests ---------- */

/* 2 and 3 ranks, each holding some shards (interleaved, one rank with
 * none, one rank with all), raw and zlib: every file of the step directory
 * and `latest` are byte for byte those of the same state saved by one
 * process (the format holds nothing of the writer: no time, pid or host),
 * it loads bit-exactly, and no rank returns before `latest` names it. */
START_TEST(test_ranks_write_what_one_process_writes) {
  static const struct {
    int size, S, level;
    unsigned held[MAXR];
  } cases[] = {
      {2, 2, 0, {0x1, 0x2}},         {2, 4, 6, {0x5, 0xa}},      {3, 5, 0, {0x09, 0x12, 0x04}},
      {3, 2, 1, {0x0, 0x1, 0x2}},    {3, 3, 0, {0x7, 0x0, 0x0}}, {2, 1, 0, {0x0, 0x1}},
  };
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 21);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *one = gt_test_mkdtemp("ckptd_one"), *many = gt_test_mkdtemp("ckptd_many");
    save_one_process(&f, one, 10, cases[i].S, cases[i].level);
    world w = {0};
    job jobs[MAXR] = {0};
    for (int k = 0; k < cases[i].size; k++) jobs[k].held = cases[i].held[k];
    save_ranks(&w, jobs, cases[i].size, &f, many, 10, cases[i].S, cases[i].level, 0);
    expect_all(jobs, cases[i].size, GT_OK, NULL);
    for (int k = 0; k < cases[i].size; k++) ck_assert_str_eq(jobs[k].latest, "step_00000010\n");
    ck_assert_str_eq(w.log, "checkpoint step_00000010: prepare\ncheckpoint step_00000010: write\n"
                            "checkpoint step_00000010: commit\n");
    ck_assert_msg(gt_test_system("diff -r %s %s", one, many) == 0, "case %zu: the files differ", i);
    expect_ls(many, "latest\nstep_00000010\n");
    char *n = gt_test_output("ls %s/step_00000010 | wc -l", many);
    ck_assert_int_eq(atoi(n), cases[i].S);
    free(n);
    expect_latest_loads(&f, many, 10);
    /* a second save by the ranks, keeping 1: the first is pruned */
    save_ranks(&w, jobs, cases[i].size, &f, many, 20, cases[i].S, cases[i].level, 1);
    expect_all(jobs, cases[i].size, GT_OK, NULL);
    expect_ls(many, "latest\nstep_00000020\n");
    expect_latest_loads(&f, many, 20);
    gt_test_rm_rf(one), gt_test_rm_rf(many);
    free(one), free(many);
  }
  gt_test_state_free(&f);
}
END_TEST

/* after a failed save: `latest` and the previous checkpoint as they were,
 * nothing else in the directory */
static void expect_untouched(fixture *f, const char *root) {
  expect_ls(root, "latest\nstep_00000010\n");
  expect_latest_loads(f, root, 10);
}

/* Rank 1 (holding both shards, so the only writer) meets a full disk
 * half-way through its first file (the seam of ckpt_seam.h): every rank
 * returns its error, naming rank 1. */
START_TEST(test_full_disk_on_one_rank) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 22);
  char *root = gt_test_mkdtemp("ckptd_full");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2}};
  save_ranks(&w, jobs, 2, &f, root, 10, 2, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  gt__ckpt_set_fault(GT__CKPT_FAULT_ENOSPC, 1);
  job bad[MAXR] = {{.held = 0x0}, {.held = 0x3}};
  save_ranks(&w, bad, 2, &f, root, 20, 2, 0, 0);
  gt__ckpt_set_fault(GT__CKPT_FAULT_NONE, 0);
  expect_all(bad, 2, GT_ERR_IO, "rank 1: checkpoint: cannot write '");
  ck_assert_msg(strstr(bad[0].msg, ".tmp-step_00000020/shard_00000-of-00002.gtck': No space left on device"), "%s",
                bad[0].msg);
  for (int k = 0; k < 2; k++) ck_assert_str_eq(bad[k].latest, "step_00000010\n");
  /* the protocol stopped at the write agreement: nothing was committed */
  ck_assert_str_eq(w.log, "checkpoint step_00000020: prepare\ncheckpoint step_00000020: write\n");
  expect_untouched(&f, root);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

/* Rank 2's shard holds a NaN (a rank whose state went bad): refused there,
 * and by every rank with rank 2's message. */
START_TEST(test_poisoned_shard_on_one_rank) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 23);
  char *root = gt_test_mkdtemp("ckptd_nan");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2}, {.held = 0x4}};
  save_ranks(&w, jobs, 3, &f, root, 10, 3, 0, 0);
  expect_all(jobs, 3, GT_OK, NULL);
  job bad[MAXR] = {{.held = 0x1}, {.held = 0x2}, {.held = 0x4, .poison = 1}};
  save_ranks(&w, bad, 3, &f, root, 20, 3, 0, 0);
  expect_all(bad, 3, GT_ERR_NUMERIC, "rank 2: checkpoint: refusing to write '");
  ck_assert_msg(strstr(bad[0].msg, "opt_nu element 5 of shard 2 is nan (not finite)"), "%s", bad[0].msg);
  expect_untouched(&f, root);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

/* No rank holds shard 1 (each thought it was another's): rank 0 finds the
 * hole before the commit. Two ranks holding shard 1: the second to create
 * it is refused. */
START_TEST(test_shard_held_by_none_or_two) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 24);
  char *root = gt_test_mkdtemp("ckptd_hole");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x6}};
  save_ranks(&w, jobs, 2, &f, root, 10, 3, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  job hole[MAXR] = {{.held = 0x1}, {.held = 0x4}};
  save_ranks(&w, hole, 2, &f, root, 20, 3, 0, 0);
  expect_all(hole, 2, GT_ERR_ARG, "rank 0: checkpoint: no rank wrote shard 1 of 3 ('");
  ck_assert_msg(strstr(hole[0].msg, ".tmp-step_00000020/shard_00001-of-00003.gtck')"), "%s", hole[0].msg);
  /* rank 0 decided after the write agreement, and said so in the last */
  ck_assert_str_eq(w.log, "checkpoint step_00000020: prepare\ncheckpoint step_00000020: write\n"
                          "checkpoint step_00000020: commit\n");
  expect_untouched(&f, root);
  job twice[MAXR] = {{.held = 0x3}, {.held = 0x6}};
  save_ranks(&w, twice, 2, &f, root, 20, 3, 0, 0);
  expect_all(twice, 2, GT_ERR_ARG, "shard_00001-of-00003.gtck': it exists; is another rank writing shard 1 too?");
  ck_assert_msg(!strncmp(twice[0].msg, "rank 0: ", 8) || !strncmp(twice[0].msg, "rank 1: ", 8), "%s", twice[0].msg);
  expect_untouched(&f, root);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

/* Ranks that do not save one state: rank 1 at another data position, or
 * with another shard count. Each file is whole, but the loader would
 * refuse the mix: rank 0 refuses it before the commit. */
START_TEST(test_ranks_disagree) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 25);
  char *root = gt_test_mkdtemp("ckptd_mixed");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2}};
  save_ranks(&w, jobs, 2, &f, root, 10, 2, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  job cur[MAXR] = {{.held = 0x1}, {.held = 0x2, .cursor = 18}};
  save_ranks(&w, cur, 2, &f, root, 20, 2, 0, 0);
  expect_all(cur, 2, GT_ERR_ARG, "rank 0: checkpoint: '");
  ck_assert_msg(strstr(cur[0].msg, "shard_00001-of-00002.gtck' holds the state {") &&
                    strstr(cur[0].msg, "\"data_cursor\":18") && strstr(cur[0].msg, "rank 0 saves {") &&
                    strstr(cur[0].msg, "\"data_cursor\":17") && strstr(cur[0].msg, "did not save one state"),
                "%s", cur[0].msg);
  expect_untouched(&f, root);
  job cnt[MAXR] = {{.held = 0x1}, {.held = 0x2, .S_seen = 3}};
  save_ranks(&w, cnt, 2, &f, root, 20, 2, 0, 0);
  expect_all(cnt, 2, GT_ERR_ARG, "rank 0: checkpoint: '");
  ck_assert_msg(strstr(cnt[0].msg, "holds 'shard_00001-of-00003.gtck', which is not one of its 2 shard files") &&
                    strstr(cnt[0].msg, "another shard count"),
                "%s", cnt[0].msg);
  expect_untouched(&f, root);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

/* Between the write and the commit, a same-step directory appears that
 * rank 0 cannot move aside (its aside name is taken by a full directory):
 * rank 0's commit fails, and the last agreement tells every rank. */
static void block_move_aside(world *w, const char *what) {
  if (!strstr(what, ": write")) return;
  ck_assert_int_eq(gt_test_system("mkdir -p %s/step_00000020 %s/.old-step_00000020 && touch %s/.old-step_00000020/x",
                                  w->hook_root, w->hook_root, w->hook_root),
                   0);
}

START_TEST(test_commit_failure_reaches_every_rank) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 26);
  char *root = gt_test_mkdtemp("ckptd_commit");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2}};
  save_ranks(&w, jobs, 2, &f, root, 10, 2, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  w.hook = block_move_aside, w.hook_root = root;
  save_ranks(&w, jobs, 2, &f, root, 20, 2, 0, 0);
  w.hook = NULL;
  expect_all(jobs, 2, GT_ERR_IO, "rank 0: checkpoint: cannot move '");
  ck_assert_msg(strstr(jobs[1].msg, "/step_00000020' aside: "), "%s", jobs[1].msg);
  for (int k = 0; k < 2; k++) ck_assert_str_eq(jobs[k].latest, "step_00000010\n");
  /* no temporary directory; the planted ones stay, and the empty step
   * directory above `latest` is ignored */
  expect_ls(root, ".old-step_00000020\nlatest\nstep_00000010\nstep_00000020\n");
  expect_latest_loads(&f, root, 10);
  /* the next save clears the stale aside directory and writes */
  save_ranks(&w, jobs, 2, &f, root, 20, 2, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  expect_ls(root, "latest\nstep_00000010\nstep_00000020\n");
  expect_latest_loads(&f, root, 20);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

/* A save whose writing rank is killed half-way (SIGKILL from the seam, in a
 * child process holding both rank threads): its temporary directory stays
 * behind, loads ignore it, and the next save by the ranks (of the same
 * step: the same temporary name) removes it with everything in it, stray
 * files of another shard count included, and writes what one process
 * would. */
START_TEST(test_crashed_save_leftovers) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 27);
  char *root = gt_test_mkdtemp("ckptd_crash"), *one = gt_test_mkdtemp("ckptd_crash_one");
  world w = {0};
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2}};
  save_ranks(&w, jobs, 2, &f, root, 10, 2, 0, 0);
  expect_all(jobs, 2, GT_OK, NULL);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    gt__ckpt_set_fault(GT__CKPT_FAULT_KILL, 1);
    job dying[MAXR] = {{.held = 0x0}, {.held = 0x3}};
    save_ranks(&w, dying, 2, &f, root, 20, 2, 0, 0);
    _exit(0); /* only when the seam did not fire */
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the ranks ended with status %#x, not SIGKILL",
                status);
  expect_ls(root, ".tmp-step_00000020\nlatest\nstep_00000010\n");
  char *part = gt_test_output("ls %s/.tmp-step_00000020", root);
  ck_assert_str_eq(part, "shard_00000-of-00002.gtck\n");
  free(part);
  ck_assert_int_eq(gt_test_system("echo junk > %s/.tmp-step_00000020/shard_00001-of-00005.gtck", root), 0);
  /* loads see only `latest` */
  expect_latest_loads(&f, root, 10);
  char *cj = NULL;
  gt_err e;
  ck_assert_msg(gt_ckpt_read_config(root, &cj, &e) == GT_OK, "%s", e.msg);
  free(cj);
  job again[MAXR] = {{.held = 0x2}, {.held = 0x1}};
  save_ranks(&w, again, 2, &f, root, 20, 2, 0, 0);
  expect_all(again, 2, GT_OK, NULL);
  expect_ls(root, "latest\nstep_00000010\nstep_00000020\n");
  save_one_process(&f, one, 20, 2, 0);
  ck_assert_int_eq(gt_test_system("diff -r %s/step_00000020 %s/step_00000020", one, root), 0);
  expect_latest_loads(&f, root, 20);
  gt_test_rm_rf(root), gt_test_rm_rf(one);
  free(root), free(one);
  gt_test_state_free(&f);
}
END_TEST

/* What a caller can get wrong: a shard missing from a save by one process,
 * half a shard given (by the only rank, or by rank 1 of 2), a rank outside
 * its world. */
START_TEST(test_bad_arguments) {
  fixture f;
  gt_test_state_make(&f, "base_emb_dim=64", 28);
  char *root = gt_test_mkdtemp("ckptd_args");
  float *p0 = gt_test_shard_of(&f.m, f.p, 0, 2), *m0 = gt_test_shard_of(&f.m, f.mu, 0, 2), *n0 = gt_test_shard_of(&f.m, f.nu, 0, 2);
  const float *ps[2] = {p0, NULL}, *ms[2] = {m0, NULL}, *ns[2] = {n0, NULL};
  gt_ckpt_src src = {2, ps, ms, ns};
  gt_ckpt_state st = state_of(10, 2);
  gt_err e;
  ck_assert_int_eq(gt_ckpt_save(root, &f.m, &src, &st, NULL, 0, 0, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "checkpoint: shard 1 of 2 for '") &&
                    strstr(e.msg, "has params NULL, opt_mu NULL, opt_nu NULL; expected all three given"),
                "%s", e.msg);
  ck_assert_int_eq(gt_test_system("test -z \"$(ls -A %s)\"", root), 0);
  ms[0] = NULL;
  world w = {.size = 1};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  rank_ctx rc0 = {&w, 0};
  gt_ckpt_sync sync = {0, 1, fake_agree, &rc0};
  ck_assert_int_eq(gt_ckpt_save_sync(root, &f.m, &src, &st, NULL, 0, 0, &sync, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "rank 0: checkpoint: shard 0 of 2 for '") &&
                    strstr(e.msg, "has params given, opt_mu NULL, opt_nu given; expected all three given (a shard of "
                                  "this rank) or all three NULL (another rank's)"),
                "%s", e.msg);
  ck_assert_str_eq(w.log, "checkpoint step_00000010: prepare\n");
  ck_assert_int_eq(gt_test_system("test -z \"$(ls -A %s)\"", root), 0);
  gt_ckpt_sync outside = {2, 2, fake_agree, &rc0};
  ck_assert_int_eq(gt_ckpt_save_sync(root, &f.m, &src, &st, NULL, 0, 0, &outside, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "checkpoint: rank 2 of 2; expected 0 <= rank < size"), "%s", e.msg);
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  /* rank 1 passes half a shard: refused at the first agreement, after rank
   * 0 made the temporary directory, which goes again */
  job jobs[MAXR] = {{.held = 0x1}, {.held = 0x2, .half = 1}};
  save_ranks(&w, jobs, 2, &f, root, 10, 2, 0, 0);
  expect_all(jobs, 2, GT_ERR_ARG, "rank 1: checkpoint: shard 1 of 2 for '");
  ck_assert_str_eq(w.log, "checkpoint step_00000010: prepare\n");
  ck_assert_int_eq(gt_test_system("test -z \"$(ls -A %s)\"", root), 0);
  free(p0), free(m0), free(n0);
  gt_test_rm_rf(root);
  free(root);
  gt_test_state_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt_dist");
  TCase *tc = gt_test_tcase(s, "ranks");
  tcase_add_test(tc, test_ranks_write_what_one_process_writes);
  tcase_add_test(tc, test_full_disk_on_one_rank);
  tcase_add_test(tc, test_poisoned_shard_on_one_rank);
  tcase_add_test(tc, test_shard_held_by_none_or_two);
  tcase_add_test(tc, test_ranks_disagree);
  tcase_add_test(tc, test_commit_failure_reaches_every_rank);
  tcase_add_test(tc, test_crashed_save_leftovers);
  tcase_add_test(tc, test_bad_arguments);
  return gt_test_run_suite(s, 0);
}
