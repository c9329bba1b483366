/* Allocation-only mode: on a measuring tracker the executor allocates and
 * frees exactly what a real step does (the same sequence of allocations and
 * frees, categories, sizes and names, under the same phases, so the same
 * per-category peaks) while touching no buffer. The plan measures the real
 * schedule this way instead of restating it. Also the tracker's own
 * contract: measuring blocks, the probe, phases and foreign frees. */
#define _GNU_SOURCE
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "exec/exec.h"
#include "config/config.h"
#include "model/model.h"
#include "gt_testutil.h"

/* ---------- a probe that records everything ---------- */

typedef struct ev {
  char kind; /* 'a' alloc, 'f' free, 'p' phase */
  gt_mem_cat cat;
  size_t bytes;
  const char *name;
  char phase[96];
  const void *ptr;
} ev;

typedef struct rec {
  ev *e;
  int n, cap;
} rec;

static ev *rec_push(rec *r) {
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 1024;
    r->e = realloc(r->e, sizeof *r->e * (size_t)r->cap);
    ck_assert(r->e);
  }
  ev *e = &r->e[r->n++];
  memset(e, 0, sizeof *e);
  return e;
}

static void on_alloc(void *ctx, const void *p, gt_mem_cat cat, size_t bytes, const char *name) {
  ev *e = rec_push(ctx);
  e->kind = 'a';
  e->cat = cat;
  e->bytes = bytes;
  e->name = name;
  e->ptr = p;
}

static void on_free(void *ctx, const void *p, gt_mem_cat cat, size_t bytes, const char *name) {
  ev *e = rec_push(ctx);
  e->kind = 'f';
  e->cat = cat;
  e->bytes = bytes;
  e->name = name;
  e->ptr = p;
}

static void on_phase(void *ctx, const char *phase) {
  ev *e = rec_push(ctx);
  e->kind = 'p';
  snprintf(e->phase, sizeof e->phase, "%s", phase);
}

static gt_mem_probe probe_of(rec *r) {
  gt_mem_probe p = {r, on_alloc, on_free, on_phase};
  return p;
}

static int same_name(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* ---------- one step, real or measured ---------- */

typedef struct step {
  rec r;
  int64_t peak[GT_MEM_NCAT], total_peak, bad_frees, left;
  gt_loss_stats st;
} step;

/* One forward+backward (train) or forward+loss (!train) of B=2, T=24 on a
 * real or a measuring tracker, recorded from before the model's allocation.
 * The measuring run never initialises the parameters: they have no memory. */
static step run(const gt_config *c, int measure, int train, int n_tiles) {
  step s;
  memset(&s, 0, sizeof s);
  gt_mem mem;
  if (measure)
    gt_mem_init_measure(&mem);
  else
    gt_mem_init(&mem);
  gt_mem_probe pr = probe_of(&s.r);
  gt_mem_set_probe(&mem, &pr);
  gt_err e;
  gt_model m;
  ck_assert(gt_model_build(&m, c, &e) == GT_OK);
  ck_assert_msg(gt_model_alloc(&m, &mem, &e) == GT_OK, "%s", e.msg);
  if (!measure) gt_model_init_params(&m, 3, 1.0);
  int B = 2, T = 24;
  int32_t in[48], tg[48], pos[48];
  uint64_t st = 77;
  for (int i = 0; i < B * T; i++) {
    in[i] = (int32_t)(gt_test_rand_u64(&st) % 260);
    tg[i] = i % 11 == 5 ? -1 : (int32_t)(gt_test_rand_u64(&st) % 260); /* some padding */
    pos[i] = i % T;
  }
  gt_batch b = {B, T, in, tg, pos, NULL};
  gt_rc rc = train ? gt_exec_forward_backward(&m, &b, n_tiles, 1.0f / 48, &s.st, &e)
                   : gt_exec_forward_loss(&m, &b, n_tiles, &s.st, &e);
  ck_assert_msg(rc == GT_OK, "%s", e.msg);
  gt_model_free(&m);
  gt_mem_set_probe(&mem, NULL);
  for (int k = 0; k < GT_MEM_NCAT; k++) s.peak[k] = gt_mem_peak(&mem, (gt_mem_cat)k);
  s.total_peak = gt_mem_total_peak(&mem);
  s.bad_frees = gt_mem_bad_frees(&mem);
  s.left = gt_mem_n_allocs(&mem);
  return s;
}

static void same_schedule(const step *real, const step *meas, const char *what) {
  ck_assert_int_eq(real->bad_frees, 0);
  ck_assert_int_eq(meas->bad_frees, 0);
  ck_assert_int_eq(real->left, 0);
  ck_assert_int_eq(meas->left, 0);
  ck_assert_msg(real->r.n == meas->r.n, "%s: %d events real, %d measured", what, real->r.n, meas->r.n);
  int allocs = 0;
  for (int i = 0; i < real->r.n; i++) {
    const ev *a = &real->r.e[i], *b = &meas->r.e[i];
    ck_assert_msg(a->kind == b->kind && a->cat == b->cat && a->bytes == b->bytes && same_name(a->name, b->name) &&
                      !strcmp(a->phase, b->phase),
                  "%s: event %d differs: real %c %s %zu '%s' '%s', measured %c %s %zu '%s' '%s'", what, i, a->kind,
                  gt_mem_cat_name(a->cat), a->bytes, a->name ? a->name : "", a->phase, b->kind,
                  gt_mem_cat_name(b->cat), b->bytes, b->name ? b->name : "", b->phase);
    allocs += a->kind == 'a';
  }
  ck_assert(allocs > 10);
  for (int k = 0; k < GT_MEM_NCAT; k++)
    ck_assert_msg(real->peak[k] == meas->peak[k], "%s: %s peak %lld real, %lld measured", what,
                  gt_mem_cat_name((gt_mem_cat)k), (long long)real->peak[k], (long long)meas->peak[k]);
  ck_assert_int_eq(real->total_peak, meas->total_peak);
  /* no arithmetic, but the tokens are counted from the (real) batch */
  ck_assert(meas->st.xent_sum == 0.0 && meas->st.moe_lb_sum == 0.0);
  ck_assert_int_eq(meas->st.total_weights, real->st.total_weights);
  ck_assert_int_eq(real->st.total_weights, 48 - 4); /* i % 11 == 5: 5, 16, 27, 38 */
}

static void free_step(step *s) { free(s->r.e); }

static const char *policies[] = {"none", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
                                 "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj", "save_out_proj",
                                 "qkv_proj_offloaded", "minimal_offloaded", "full", "custom"};
#define NPOL ((int)(sizeof policies / sizeof policies[0]))

/* Every policy, both scopes: the measured schedule is the real one. */
static void check_model(const char *model, int layers, const char *pattern, int shared) {
  const char *scopes[] = {"layer", "block"};
  for (int sc = 0; sc < 2; sc++)
    for (int i = 0; i < NPOL; i++) {
      gt_config c;
      gt_test_remat_config(&c, model, policies[i], scopes[sc], layers, pattern, shared);
      char what[160];
      snprintf(what, sizeof what, "%s L=%d %s %s/%s", model, layers, pattern, policies[i], scopes[sc]);
      step real = run(&c, 0, 1, 1), meas = run(&c, 1, 1, 1);
      same_schedule(&real, &meas, what);
      /* the phases the plan reports by */
      int fwd = 0, head = 0, rec_ = 0, bwd = 0;
      for (int k = 0; k < real.r.n; k++) {
        const char *ph = real.r.e[k].phase;
        fwd += !strncmp(ph, "forward, layer ", 15);
        head += !strcmp(ph, "output head (logits and loss)");
        rec_ += !strncmp(ph, "backward, recomputing layer ", 28);
        bwd += !strncmp(ph, "backward, layer ", 16);
      }
      ck_assert_int_eq(fwd, layers);
      ck_assert_int_eq(head, 1);
      ck_assert_int_eq(rec_, layers);
      ck_assert_int_eq(bwd, layers);
      free_step(&real);
      free_step(&meas);
    }
}

START_TEST(test_gemma3_schedule) { check_model("gemma3-tiny", 5, "LLG", 0); }
END_TEST

START_TEST(test_gemma4_dense_schedule) { check_model("gemma4-tiny-dense", 5, "LLG", 0); }
END_TEST

START_TEST(test_gemma4_ple_kv_shared_schedule) {
  /* shared layers 4..6 reading donors 3 and 2: the K/V gradient
   * accumulators and the per-layer embeddings' backward */
  check_model("gemma4-tiny-ple", 7, "LLG", 3);
}
END_TEST

START_TEST(test_gemma4_moe_schedule) {
  /* the routed experts' scratch: sized by the worst case (every slot on
   * this device), never by the routing, so both runs take the same */
  check_model("gemma4-tiny-moe", 5, "LLG", 0);
}
END_TEST

START_TEST(test_tiles_and_forward_loss) {
  /* vocab tiling, soft-capped logits (the MoE preset caps), and the
   * evaluation forward */
  const char *models[] = {"gemma3-tiny", "gemma4-tiny-moe"};
  for (int i = 0; i < 2; i++) {
    gt_config c;
    gt_test_remat_config(&c, models[i], "minimal", "layer", 6, "LLLLLG", 0);
    step real = run(&c, 0, 1, 4), meas = run(&c, 1, 1, 4);
    same_schedule(&real, &meas, "4 vocab tiles");
    free_step(&real);
    free_step(&meas);
    real = run(&c, 0, 0, 2);
    meas = run(&c, 1, 0, 2);
    same_schedule(&real, &meas, "forward and loss");
    free_step(&real);
    free_step(&meas);
  }
}
END_TEST

START_TEST(test_names_and_phases) {
  /* the names a plan shows, under the phase they were taken in */
  gt_config c;
  gt_test_remat_config(&c, "gemma3-tiny", "minimal", "layer", 6, "LLLLLG", 0);
  step s = run(&c, 1, 1, 1);
  const char *phase = "";
  int logits = 0, q5 = 0, carry = 0, mlp_grad2 = 0, rope = 0;
  for (int i = 0; i < s.r.n; i++) {
    const ev *e = &s.r.e[i];
    if (e->kind == 'p') phase = e->phase;
    if (e->kind != 'a') continue;
    ck_assert_msg(e->name || e->cat == GT_MEM_PARAMS || e->cat == GT_MEM_GRADS, "an unnamed %s block during %s",
                  gt_mem_cat_name(e->cat), phase);
    if (!e->name) continue;
    logits += !strcmp(e->name, "logits tile") && !strcmp(phase, "output head (logits and loss)") &&
              e->cat == GT_MEM_LOGITS && e->bytes == 48 * 260 * 4;
    q5 += !strcmp(e->name, "query_proj") && !strcmp(phase, "forward, layer 5") && e->bytes == 48 * 64 * 4;
    carry += !strcmp(e->name, "layer input (carry)") && e->cat == GT_MEM_SAVED;
    mlp_grad2 += !strcmp(e->name, "MLP gradients") && !strcmp(phase, "backward, layer 2");
    rope += !strncmp(e->name, "rope ", 5) && e->cat == GT_MEM_OTHER;
  }
  ck_assert_int_eq(logits, 1);
  ck_assert_int_eq(q5, 1);
  ck_assert_int_eq(carry, 6); /* layer scope: every layer's input is kept */
  ck_assert_int_eq(mlp_grad2, 1);
  ck_assert_int_eq(rope, 4); /* cos and sin of the local and the global RoPE */
  free_step(&s);
}
END_TEST

START_TEST(test_measures_what_cannot_be_allocated) {
  /* A shape whose step needs far more memory than this machine has: the
   * measuring tracker accounts for it without reserving it, and since no
   * buffer has memory behind it, any kernel or copy that ran would write
   * far outside its 64-byte block (AddressSanitizer names the first). */
  const char *ov[] = {"model_name=gemma3-tiny", "base_emb_dim=8192", "base_mlp_dim=32768", "vocab_size=262144",
                      "base_num_query_heads=32", "base_num_kv_heads=8", "head_dim=256", "max_target_length=4096",
                      "per_device_batch_size=8", "remat_policy=minimal", "query_pre_attn_scalar=256"};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 11, ov, &e) == GT_OK, "%s", e.msg);
  gt_mem mem;
  gt_mem_init_measure(&mem);
  ck_assert(gt_mem_measuring(&mem));
  gt_model m;
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  ck_assert(gt_model_alloc(&m, &mem, &e) == GT_OK);
  int B = 8, T = 4096, N = B * T;
  int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N),
          *pos = malloc(sizeof(int32_t) * (size_t)N);
  for (int i = 0; i < N; i++) {
    in[i] = i % 262144;
    tg[i] = (i * 7) % 262144;
    pos[i] = i % T;
  }
  gt_batch b = {B, T, in, tg, pos, NULL};
  gt_loss_stats st = {0};
  ck_assert_msg(gt_exec_forward_backward(&m, &b, 1, 1.0f / (float)N, &st, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(st.total_weights, N);
  /* one logits tile of [N, V] floats: 32 GiB */
  ck_assert_int_eq(gt_mem_peak(&mem, GT_MEM_LOGITS), (int64_t)N * 262144 * 4);
  ck_assert_int_eq(gt_mem_peak(&mem, GT_MEM_PARAMS), m.n_params * 4);
  ck_assert(gt_mem_total_peak(&mem) > ((int64_t)64 << 30));
  gt_model_free(&m);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  ck_assert_int_eq(gt_mem_n_allocs(&mem), 0);
  ck_assert_int_eq(gt_mem_bad_frees(&mem), 0);
  free(in);
  free(tg);
  free(pos);
}
END_TEST

/* ---------- the tracker itself ---------- */

START_TEST(test_measuring_blocks) {
  gt_mem mem;
  gt_mem_init_measure(&mem);
  rec r = {NULL, 0, 0};
  gt_mem_probe pr = probe_of(&r);
  gt_mem_set_probe(&mem, &pr);
  void *p[64];
  for (int i = 0; i < 64; i++) {
    p[i] = gt_mem_alloc_named(&mem, i % 2 ? GT_MEM_TEMP : GT_MEM_HOST, (size_t)1 << 40, "huge");
    ck_assert_ptr_nonnull(p[i]);
    ck_assert_int_eq((uintptr_t)p[i] % 64, 0);
    for (int j = 0; j < i; j++) ck_assert_ptr_ne(p[i], p[j]);
  }
  /* a terabyte each, counted, none reserved; the host pool apart */
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_TEMP), 32LL << 40);
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_HOST), 32LL << 40);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 32LL << 40);
  ck_assert_int_eq(gt_mem_n_allocs(&mem), 64);
  gt_mem_phase(&mem, "backward, layer %lld", 12LL);
  for (int i = 0; i < 64; i++) gt_mem_free(&mem, p[i]);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  ck_assert_int_eq(gt_mem_total_peak(&mem), 32LL << 40);
  ck_assert_int_eq(gt_mem_peak(&mem, GT_MEM_HOST), 32LL << 40);
  ck_assert_int_eq(gt_mem_n_allocs(&mem), 0);
  /* the probe saw 64 allocations, the phase, 64 frees with their names */
  ck_assert_int_eq(r.n, 129);
  ck_assert_int_eq(r.e[64].kind, 'p');
  ck_assert_str_eq(r.e[64].phase, "backward, layer 12");
  for (int i = 0; i < 64; i++) {
    ck_assert_int_eq(r.e[65 + i].kind, 'f');
    ck_assert_ptr_eq(r.e[65 + i].ptr, p[i]);
    ck_assert_str_eq(r.e[65 + i].name, "huge");
    ck_assert_int_eq(r.e[65 + i].bytes, (size_t)1 << 40);
    ck_assert_int_eq(r.e[65 + i].cat, i % 2 ? GT_MEM_TEMP : GT_MEM_HOST);
  }
  /* without a probe, nothing is called */
  gt_mem_set_probe(&mem, NULL);
  gt_mem_phase(&mem, "forward, layer %lld", 1LL);
  gt_mem_free(&mem, gt_mem_alloc(&mem, GT_MEM_TEMP, 10));
  ck_assert_int_eq(r.n, 129);
  ck_assert_int_eq(gt_mem_bad_frees(&mem), 0);
  free(r.e);
}
END_TEST

START_TEST(test_real_blocks_and_foreign_frees) {
  gt_mem mem;
  gt_mem_init(&mem);
  ck_assert(!gt_mem_measuring(&mem));
  float *a = gt_mem_alloc_named(&mem, GT_MEM_SAVED, 100 * sizeof(float), "a");
  float *b = gt_mem_alloc_uninit_named(&mem, GT_MEM_SAVED, 100 * sizeof(float), "b");
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  for (int i = 0; i < 100; i++) ck_assert(a[i] == 0.0f); /* zero-filled */
  b[99] = 1.0f;                                           /* real payload */
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_SAVED), 800);
  /* a pointer this tracker did not hand out: counted, left alone, no abort */
  char *foreign = calloc(1, 256);
  gt_mem_free(&mem, foreign + 128);
  ck_assert_int_eq(gt_mem_bad_frees(&mem), 1);
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_SAVED), 800);
  free(foreign);
  gt_mem_free(&mem, a);
  gt_mem_free(&mem, b);
  gt_mem_free(&mem, NULL);
  ck_assert_int_eq(gt_mem_cur(&mem, GT_MEM_SAVED), 0);
  ck_assert_int_eq(gt_mem_peak(&mem, GT_MEM_SAVED), 800);
  ck_assert_int_eq(gt_mem_bad_frees(&mem), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("measure");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_measuring_blocks);
  tcase_add_test(tc, test_real_blocks_and_foreign_frees);
  tcase_add_test(tc, test_names_and_phases);
  tcase_add_test(tc, test_tiles_and_forward_loss);
  tcase_add_test(tc, test_gemma3_schedule);
  tcase_add_test(tc, test_gemma4_dense_schedule);
  tcase_add_test(tc, test_gemma4_ple_kv_shared_schedule);
  tcase_add_test(tc, test_gemma4_moe_schedule);
  tcase_add_test(tc, test_measures_what_cannot_be_allocated);
  return gt_test_run_suite(s, 0);
}
