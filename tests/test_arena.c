/* The step arena on real training runs (base/alloc.h, docs/memory-plan.md):
 * for every remat policy and model kind, on 1 and 2 devices, a run whose
 * steps after the first are served from the arena gives losses and final
 * parameters bit for bit those of the same run on the heap; steps 2..n make
 * no call to the system allocator and every allocation of every device is
 * served (no fallback, no other thread); the plan still equals the measured
 * peak; and a step that differs from the recorded one falls back to the heap
 * and stays exact. The allocator's own cases (threads, reordered frees,
 * packing) are in test_arena_alloc.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "config/config.h"
#include "data/data.h"
#include "exec/plan.h"
#include "mesh/fsdp.h"
#include "train/plan.h"
#include "train/trainer.h"
#include "gt_testutil.h"

#define STEPS 3

typedef struct run {
  double loss[STEPS];
  float *p;
  int64_t n;
  int64_t sys_after_first; /* system allocations and frees in steps 2..STEPS */
  gt_mem_arena_stats st[2];
  int devices;
} run;

static void cfg_of(gt_config *c, const char *model, int devices, const char *a, const char *b) {
  char mn[96], nd[64], pd[64];
  snprintf(mn, sizeof mn, "model_name=%s", model);
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", 4 / devices);
  /* two micro-batches a step where the model allows it (MoE's load-balance
   * loss takes one) */
  const char *ga = strstr(model, "moe") ? "gradient_accumulation_steps=1" : "gradient_accumulation_steps=2";
  const char *ov[] = {mn, nd, pd, "dataset_type=synthetic", "max_target_length=16", "learning_rate=0.01", ga, a ? a : "init_weights_seed=0", b ? b : "init_weights_seed=0"};
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, 9, ov, &e) == GT_OK, "%s", e.msg);
}

/* STEPS steps of the config, on the arena (arena = 1) or the heap. */
static run train(const gt_config *c, int arena) {
  gt_mem_arena_set_default(arena);
  gt_err e;
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, c, &host, &e) == GT_OK);
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_fsdp *f = gt_trainer_fsdp(tr);
  run r = {0};
  r.devices = gt_fsdp_devices(f);
  for (int s = 0; s < STEPS; s++) {
    ck_assert_msg(gt_trainer_load_data(tr, &d, &e) == GT_OK, "%s", e.msg);
    int64_t a0 = gt_mem_sys_allocs() + gt_mem_sys_frees();
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step_loaded(tr, &sm, &e) == GT_OK, "%s", e.msg);
    if (s > 0) r.sys_after_first += gt_mem_sys_allocs() + gt_mem_sys_frees() - a0;
    r.loss[s] = sm.loss;
  }
  for (int dv = 0; dv < r.devices && dv < 2; dv++) gt_mem_arena_get_stats(gt_fsdp_device_mem(f, dv), &r.st[dv]);
  r.n = gt_fsdp_num_params(f);
  r.p = malloc(sizeof(float) * (size_t)r.n);
  ck_assert(gt_fsdp_full_params(f, r.p, &e) == GT_OK);
  gt_trainer_destroy(tr);
  gt_data_close(&d);
  gt_mem_arena_set_default(1);
  return r;
}

/* The arena's run equals the heap's bit for bit and was served whole. */
static void same_and_served(const char *model, int devices, const char *a, const char *b) {
  gt_config c;
  cfg_of(&c, model, devices, a, b);
  run h = train(&c, 0), x = train(&c, 1);
  char what[256];
  snprintf(what, sizeof what, "%s, %d device%s, %s %s", model, devices, devices > 1 ? "s" : "", a ? a : "",
           b ? b : "");
  for (int s = 0; s < STEPS; s++)
    ck_assert_msg(!memcmp(&h.loss[s], &x.loss[s], sizeof(double)), "%s: step %d loss %.17g on the arena, %.17g on the heap",
                  what, s, x.loss[s], h.loss[s]);
  ck_assert_int_eq(h.n, x.n);
  ck_assert_msg(gt_test_same_bits(h.p, x.p, h.n), "%s: final parameters differ", what);
  ck_assert_msg(h.st[0].state == 0, "%s: the heap run had an arena", what);
  ck_assert_msg(h.sys_after_first > 0, "%s: the heap run made no system allocation (the count counts nothing)", what);
  ck_assert_msg(x.sys_after_first == 0, "%s: %lld system allocations and frees in steps 2..%d", what,
                (long long)x.sys_after_first, STEPS);
  for (int dv = 0; dv < x.devices; dv++) {
    const gt_mem_arena_stats *st = &x.st[dv];
    ck_assert_msg(st->state == 2 && st->steps_served == STEPS - 1 && st->steps_fell_back == 0 && st->foreign == 0 &&
                      st->heap_in_steps == 0 && st->slots > 0,
                  "%s, device %d: state %d, %lld of %d steps served, %lld fell back, %lld from other threads, %lld "
                  "heap blocks in steps, %lld slots",
                  what, dv, st->state, (long long)st->steps_served, STEPS - 1, (long long)st->steps_fell_back,
                  (long long)st->foreign, (long long)st->heap_in_steps, (long long)st->slots);
    /* the packing's bound: never below the live peak, within 1.5x of it
     * (the arena's size over the live peak is in docs/memory-plan.md) */
    ck_assert_msg(st->bytes >= st->live_peak && st->bytes <= st->live_peak + st->live_peak / 2,
                  "%s, device %d: arena %lld bytes for a live peak of %lld", what, dv, (long long)st->bytes,
                  (long long)st->live_peak);
  }
  free(h.p);
  free(x.p);
}

START_TEST(test_remat_policies) {
  const char *pol[] = {"none", "minimal", "minimal_with_context", "save_dot_except_mlp", "save_qkv_proj", "full",
                       "minimal_offloaded"};
  for (int i = 0; i < (int)(sizeof pol / sizeof *pol); i++) {
    char p[96];
    snprintf(p, sizeof p, "remat_policy=%s", pol[i]);
    same_and_served("gemma3-tiny", 1, p, NULL);
    same_and_served("gemma3-tiny", 1, p, "remat_scope=block");
  }
  same_and_served("gemma3-tiny", 2, "remat_policy=minimal", NULL);
  same_and_served("gemma3-tiny", 2, "remat_policy=full", "num_vocab_tiling=2");
}
END_TEST

START_TEST(test_model_kinds) {
  for (int devices = 1; devices <= 2; devices++) {
    same_and_served("gemma4-tiny-moe", devices, NULL, NULL);
    same_and_served("gemma4-tiny-ple", devices, "remat_policy=minimal", NULL);
    same_and_served("gemma3-tiny", devices, "enable_lora=true", "lora_rank=4");
    same_and_served("gemma3-tiny", devices, "dtype=bfloat16", NULL);
    same_and_served("gemma4-tiny-moe", devices, "dtype=bfloat16", NULL);
  }
}
END_TEST

/* The plan is the allocation-only run of the same step; the arena changes
 * where blocks are, not what the tracker counts. */
START_TEST(test_plan_equals_measured) {
  for (int devices = 1; devices <= 2; devices++) {
    gt_config c;
    gt_err e;
    cfg_of(&c, devices == 1 ? "gemma3-tiny" : "gemma4-tiny-moe", devices, "remat_policy=minimal", NULL);
    gt_plan p;
    ck_assert_msg(gt_plan_compute(&p, &c, &e) == GT_OK, "%s", e.msg);
    gt_mem_arena_set_default(1);
    gt_trainer *tr;
    ck_assert(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK);
    for (int s = 0; s < 3; s++) {
      gt_step_metrics sm;
      ck_assert_msg(gt_trainer_step_zero(tr, &sm, &e) == GT_OK, "%s", e.msg);
    }
    gt_mem_arena_stats st;
    gt_mem_arena_get_stats(gt_fsdp_device_mem(gt_trainer_fsdp(tr), 0), &st);
    ck_assert_int_eq(st.steps_served, 2);
    gt_test_plan_matches(&p, tr, devices == 1 ? "gemma3-tiny on the arena" : "gemma4-tiny-moe on the arena, 2 devices");
    gt_trainer_destroy(tr);
    gt_plan_free(&p);
  }
}
END_TEST

/* A step on a batch of another shape (another length: every activation of
 * another size) between regular steps, and an evaluation (outside any step):
 * the odd step falls back to the heap part-way, the regular steps around it
 * are served, and every loss and the final parameters are the heap run's. */
typedef struct odd_run {
  double loss[5];
  float *p;
  int64_t n;
  gt_mem_arena_stats st;
} odd_run;

static odd_run odd(int arena, int devices) {
  gt_mem_arena_set_default(arena);
  gt_config c;
  gt_err e;
  cfg_of(&c, "gemma3-tiny", devices, "remat_policy=minimal", "eval_steps=1");
  gt_trainer *tr;
  ck_assert(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK);
  int B = 4, T = 16, Ts = 8;
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(4 * B * T));
  uint64_t rs = 11;
  gt_test_fill_ids(buf, 2 * B * T, &rs, 1, 200);
  for (int i = 0; i < B * T; i++) buf[2 * B * T + i] = i % T;
  gt_batch full[2] = {{B, T, buf, buf + B * T, buf + 2 * B * T, NULL}, {B, T, buf + B * T, buf, buf + 2 * B * T, NULL}};
  int32_t *sbuf = malloc(sizeof(int32_t) * (size_t)(3 * B * Ts));
  for (int i = 0; i < B * Ts; i++) sbuf[i] = buf[i], sbuf[B * Ts + i] = buf[B * T + i], sbuf[2 * B * Ts + i] = i % Ts;
  gt_batch shorter[2] = {{B, Ts, sbuf, sbuf + B * Ts, sbuf + 2 * B * Ts, NULL},
                         {B, Ts, sbuf + B * Ts, sbuf, sbuf + 2 * B * Ts, NULL}};
  odd_run r = {0};
  for (int s = 0; s < 5; s++) {
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step(tr, s == 2 ? shorter : full, 2, &sm, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = sm.loss;
    if (s == 3) {
      gt_loss_stats ls = {0};
      ck_assert_msg(gt_trainer_eval(tr, full, 1, &ls, &e) == GT_OK, "%s", e.msg);
    }
  }
  gt_fsdp *f = gt_trainer_fsdp(tr);
  gt_mem_arena_get_stats(gt_fsdp_device_mem(f, 0), &r.st);
  r.n = gt_fsdp_num_params(f);
  r.p = malloc(sizeof(float) * (size_t)r.n);
  ck_assert(gt_fsdp_full_params(f, r.p, &e) == GT_OK);
  gt_trainer_destroy(tr);
  free(buf);
  free(sbuf);
  gt_mem_arena_set_default(1);
  return r;
}

START_TEST(test_mismatch_falls_back) {
  for (int devices = 1; devices <= 2; devices++) {
    odd_run h = odd(0, devices), x = odd(1, devices);
    for (int s = 0; s < 5; s++)
      ck_assert_msg(!memcmp(&h.loss[s], &x.loss[s], sizeof(double)), "%d devices, step %d: loss %.17g vs %.17g",
                    devices, s, x.loss[s], h.loss[s]);
    ck_assert(gt_test_same_bits(h.p, x.p, h.n));
    /* steps 1, 3, 4 served; step 2 (the shorter batch) fell back */
    ck_assert_msg(x.st.steps_served == 3 && x.st.steps_fell_back == 1 && x.st.heap_in_steps > 0,
                  "%d devices: %lld served, %lld fell back, %lld heap blocks", devices, (long long)x.st.steps_served,
                  (long long)x.st.steps_fell_back, (long long)x.st.heap_in_steps);
    ck_assert_int_eq(gt_mem_process_blocks(), 0);
    free(h.p);
    free(x.p);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("arena");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_remat_policies);
  tcase_add_test(tc, test_model_kinds);
  tcase_add_test(tc, test_plan_equals_measured);
  tcase_add_test(tc, test_mismatch_falls_back);
  return gt_test_run_suite(s, 0);
}
