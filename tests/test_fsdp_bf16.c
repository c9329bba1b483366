/* The sharded side of dtype=bfloat16 and mu_dtype=bfloat16 (src/mesh/fsdp.c):
 *  - what the executor gets from acquire() is gt_bf16_round of the master
 *    weights, bit for bit, on 1 (a rounded copy), 2 and 3 devices (a bf16
 *    gather, with and without prefetch), and the master shards stay float32;
 *    float32 hands out the master weights themselves; on 1 device the
 *    layers' projections and the embedding are read from the master shard
 *    itself (the products round them as they pack them, the lookup its
 *    rows), and training that way gives the bits of
 *    training on a copy with every tensor rounded, for every model kind and
 *    remat policy;
 *  - a bf16 step's gathers send exactly half the bytes of a float32 step's
 *    (per device: the float32 total minus 2 bytes per gathered element), the
 *    reduce-scatters and sums the same;
 *  - mu_dtype=bfloat16 stores the first moment in 2 bytes (GT_MEM_OPTIM
 *    smaller by 2 x the shard): its first step's moments are the float32
 *    run's, mu rounded to bf16 (the update uses the float32 moment, so the
 *    parameters and nu are the float32 run's bits); later steps stay finite,
 *    every exported mu value is a bf16 value, and the loss stays within a
 *    stated bound of the float32-mu run; the state set from an export
 *    continues bit for bit;
 *  - the memory plan (an allocation-only replay of the same code): the
 *    optimizer category 2 bytes per parameter of the shard smaller with
 *    mu_dtype=bfloat16; dtype=bfloat16 on one device plans the rounded
 *    copies (GT_MEM_GATHERED), and every device's measured peak equals the
 *    plan's. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "mesh/fsdp.h"
#include "train/trainer.h"
#include "model/model.h"
#include "train/plan.h"
#include "gt_testutil.h"

#define GLOBAL_B 6

static void load(gt_config *c, int devices, const char *dtype, const char *mu_dtype, const char *prefetch) {
  char nd[64], pd[64], dt[64], md[64], pf[64];
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", GLOBAL_B / devices);
  snprintf(dt, sizeof dt, "dtype=%s", dtype);
  snprintf(md, sizeof md, "mu_dtype=%s", mu_dtype);
  snprintf(pf, sizeof pf, "prefetch=%s", prefetch);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "max_target_length=16",
                      "learning_rate=0.01", "gradient_clipping_threshold=0.5", nd, pd, dt, md, pf};
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, 10, ov, &e) == GT_OK, "%s", e.msg);
}

/* ---------- what acquire hands the executor ---------- */

typedef struct view_job {
  gt_fsdp *f;
  int64_t n_units;
  float **got; /* [device][full layout]: unit u at its offset */
  int64_t direct[8]; /* elements read from projections() */
  int64_t *off;
  gt_rc rc[8];
} view_job;

/* Every device acquires every unit in forward order (so with prefetch each
 * acquire finds the unit the previous one started), copies what it got,
 * releases it; then drops whatever is left (the last prefetch). */
static void view_fn(int d, void *arg) {
  view_job *j = arg;
  gt_model *m = gt_fsdp_device_model(j->f, d);
  gt_param_view *v = m->view;
  gt_err e;
  j->rc[d] = GT_OK;
  for (int64_t u = 0; u < j->n_units && !j->rc[d]; u++) {
    const float *p = NULL;
    int64_t off, cnt;
    gt_model_unit(m, u, &off, &cnt);
    if ((j->rc[d] = v->acquire(v->ctx, u, 0, &p, NULL, &e))) break;
    memcpy(j->got[d] + off, p, (size_t)cnt * sizeof(float));
    /* the unit's projections, where the products read them */
    const float *pr = v->projections(v->ctx, u);
    for (int i = 0; pr && i < m->n_tensors; i++) {
      const gt_tensor_info *t = &m->tensors[i];
      if (t->layer + 1 == u && gt_model_tensor_is_projection(m, i)) {
        memcpy(j->got[d] + t->offset, pr + (t->offset - off), (size_t)t->words * sizeof(float));
        j->direct[d] += t->words;
      }
    }
    v->release(v->ctx, u, 0);
  }
  for (int64_t u = 0; u < j->n_units; u++) v->drop_params(v->ctx, u);
}

static void check_acquired(int devices, const char *dtype, const char *prefetch, int steps) {
  gt_config c;
  load(&c, devices, dtype, "float32", prefetch);
  gt_err e;
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK, "%s", e.msg);
  if (steps) { /* weights that moved: not the initial ones */
    gt_mem host;
    gt_mem_init(&host);
    gt_data dd;
    ck_assert(gt_data_open(&dd, &c, &host, &e) == GT_OK);
    for (int s = 0; s < steps; s++) {
      gt_batch b;
      gt_data_next_train(&dd, &b);
      gt_mesh_step_info fi;
      ck_assert_msg(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK, "%s", e.msg);
    }
    gt_data_close(&dd);
  }
  int64_t n = gt_fsdp_num_params(f);
  float *master = malloc(sizeof(float) * (size_t)n);
  ck_assert(gt_fsdp_full_params(f, master, &e) == GT_OK);
  view_job j = {.f = f, .n_units = gt_model_n_units(gt_fsdp_device_model(f, 0))};
  j.got = calloc((size_t)devices, sizeof(float *));
  for (int d = 0; d < devices; d++) j.got[d] = calloc((size_t)n, sizeof(float));
  gt_mesh_run(gt_fsdp_mesh(f), view_fn, &j);
  ck_assert(gt_mesh_take_error(gt_fsdp_mesh(f), &e) == GT_OK);
  int bf16 = !strcmp(dtype, "bfloat16");
  float *want = gt_test_copy(master, n);
  if (bf16) gt_bf16_round(want, n);
  int64_t moved = 0;
  for (int64_t i = 0; i < n; i++) moved += want[i] != master[i];
  if (bf16) ck_assert_msg(moved > n / 2, "only %lld of %lld weights change when rounded", (long long)moved, (long long)n);
  /* one bf16 device: the projections and the embedding as they are in the
   * master shard (more than half the weights), everything else rounded */
  float *want1 = gt_test_copy(want, n);
  const gt_model *m0 = gt_fsdp_device_model(f, 0);
  int64_t proj = 0;
  for (int i = 0; bf16 && devices == 1 && i < m0->n_tensors; i++) {
    const gt_tensor_info *t = &m0->tensors[i];
    if (!gt_model_tensor_is_projection(m0, i)) continue;
    memcpy(want1 + t->offset, master + t->offset, (size_t)t->words * sizeof(float));
    proj += t->words;
  }
  if (bf16 && devices == 1) ck_assert_msg(proj > n / 2, "projections %lld of %lld", (long long)proj, (long long)n);
  for (int d = 0; d < devices; d++) {
    ck_assert_int_eq(j.rc[d], GT_OK);
    ck_assert_int_eq(j.direct[d], proj);
    const float *w = devices == 1 ? want1 : want;
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&j.got[d][i], &w[i], 4))
        ck_abort_msg("%s, %d devices, prefetch=%s, device %d, element %lld: %.9g, expected %.9g (master %.9g)", dtype,
                     devices, prefetch, d, (long long)i, (double)j.got[d][i], (double)w[i], (double)master[i]);
    /* no gathered copy outlives the pass */
    ck_assert_int_eq(gt_mem_cur(gt_fsdp_device_mem(f, d), GT_MEM_GATHERED), 0);
  }
  /* the master weights are untouched */
  float *after = malloc(sizeof(float) * (size_t)n);
  ck_assert(gt_fsdp_full_params(f, after, &e) == GT_OK);
  ck_assert(gt_test_same_bits(after, master, n));
  for (int d = 0; d < devices; d++) free(j.got[d]);
  free(j.got), free(master), free(want), free(want1), free(after);
  gt_fsdp_destroy(f);
}

START_TEST(test_acquired_weights_are_rounded_master) {
  int counts[] = {1, 2, 3};
  for (int i = 0; i < 3; i++) {
    check_acquired(counts[i], "bfloat16", "true", 0);
    check_acquired(counts[i], "bfloat16", "false", 2);
    check_acquired(counts[i], "float32", "true", 2);
  }
}
END_TEST

/* ---------- bytes ---------- */

/* One step; each device's bytes and peak memory. */
static void one_step(int devices, const char *dtype, const char *mu_dtype, const char *prefetch, int64_t *bytes,
                     int64_t *gathered_peak, int64_t *optim) {
  gt_config c;
  load(&c, devices, dtype, mu_dtype, prefetch);
  gt_err e;
  gt_mem host;
  gt_mem_init(&host);
  gt_data dd;
  ck_assert(gt_data_open(&dd, &c, &host, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_batch b;
  gt_data_next_train(&dd, &b);
  gt_mesh_step_info fi;
  ck_assert_msg(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK, "%s", e.msg);
  ck_assert(isfinite(fi.loss));
  for (int d = 0; d < devices; d++) {
    if (bytes) bytes[d] = gt_mesh_stats(gt_fsdp_mesh(f), d).bytes_sent;
    if (gathered_peak) gathered_peak[d] = gt_mem_peak(gt_fsdp_device_mem(f, d), GT_MEM_GATHERED);
    if (optim) optim[d] = gt_mem_cur(gt_fsdp_device_mem(f, d), GT_MEM_OPTIM);
  }
  gt_fsdp_destroy(f);
  gt_data_close(&dd);
}

START_TEST(test_bf16_gathers_half_the_bytes) {
  gt_config c;
  load(&c, 1, "float32", "float32", "true");
  gt_model m;
  gt_err e;
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  for (int N = 2; N <= 3; N++)
    for (int pf = 0; pf < 2; pf++) {
      int64_t b32[3], b16[3], g32[3], g16[3];
      one_step(N, "float32", "float32", pf ? "true" : "false", b32, g32, NULL);
      one_step(N, "bfloat16", "float32", pf ? "true" : "false", b16, g16, NULL);
      for (int d = 0; d < N; d++) {
        /* every unit is gathered twice per micro-batch (forward, backward;
         * gemma3-tiny has no PLE), device d sending all but shard d+1 */
        int64_t elems = 0;
        for (int64_t u = 0; u < gt_model_n_units(&m); u++) {
          int64_t off, cnt;
          gt_model_unit(&m, u, &off, &cnt);
          elems += 2 * (cnt - gt_shard_len(cnt, N, (d + 1) % N));
        }
        /* float32 gathers 4 bytes an element, bf16 2: the rest is the same */
        ck_assert_msg(b32[d] - b16[d] == 2 * elems, "%d devices, prefetch %d, device %d: %lld vs %lld bytes", N, pf, d,
                      (long long)b32[d], (long long)b16[d]);
        ck_assert_int_gt(b16[d], 0);
        /* the gathered buffers are the same size (bf16 lands in their upper half) */
        ck_assert_int_eq(g32[d], g16[d]);
      }
    }
  gt_model_free(&m);
}
END_TEST

START_TEST(test_in_place_bf16_holds_a_rounded_copy) {
  /* one device: float32 computes on its shard (no gathered bytes), bf16 on
   * a rounded copy of one unit at a time (two with the head's) */
  int64_t g32, g16;
  one_step(1, "float32", "float32", "true", NULL, &g32, NULL);
  one_step(1, "bfloat16", "float32", "true", NULL, &g16, NULL);
  ck_assert_int_eq(g32, 0);
  ck_assert_int_gt(g16, 0);
}
END_TEST

START_TEST(test_mu_bf16_halves_its_memory) {
  for (int N = 1; N <= 3; N++) {
    int64_t o32[3], o16[3];
    one_step(N, "float32", "float32", "true", NULL, NULL, o32);
    one_step(N, "float32", "bfloat16", "true", NULL, NULL, o16);
    /* mu (4 bytes) + nu (4) -> mu (2) + nu (4) per element of the shard */
    for (int d = 0; d < N; d++) ck_assert_int_eq(o16[d] * 8, o32[d] * 6);
  }
}
END_TEST

/* ---------- mu_dtype=bfloat16 training ---------- */

typedef struct state {
  double loss[8];
  float *p, *mu, *nu;
  int64_t n;
} state;

/* `steps` steps of the config; full: gt_fsdp_full_bf16_copy (one device) */
static state train_config(const gt_config *c, int full, int steps) {
  gt_err e;
  gt_mem host;
  gt_mem_init(&host);
  gt_data dd;
  ck_assert(gt_data_open(&dd, c, &host, &e) == GT_OK);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, c, NULL, &e) == GT_OK, "%s", e.msg);
  if (full) gt_fsdp_full_bf16_copy(f, 1);
  /* one bf16 device reads the projections from the master shard (the
   * head's embedding without PLE), unless full */
  const gt_model *m0 = gt_fsdp_device_model(f, 0);
  const gt_param_view *v = m0->view;
  const int direct = c->num_devices == 1 && !strcmp(c->dtype, "bfloat16") && !full;
  for (int64_t u = 0; u < gt_model_n_units(m0); u++)
    ck_assert_msg((v->projections(v->ctx, u) != NULL) == (direct && (u > 0 || !m0->ple_dim)), "unit %lld",
                  (long long)u);
  state s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < steps; i++) {
    gt_batch b;
    gt_data_next_train(&dd, &b);
    gt_mesh_step_info fi;
    ck_assert_msg(gt_trainer_mesh_step(f, &b, 1, &fi, &e) == GT_OK, "%s", e.msg);
    ck_assert(!fi.update.skipped);
    s.loss[i] = fi.loss;
  }
  s.n = gt_fsdp_num_params(f);
  s.p = malloc(sizeof(float) * (size_t)s.n);
  s.mu = malloc(sizeof(float) * (size_t)s.n);
  s.nu = malloc(sizeof(float) * (size_t)s.n);
  ck_assert(gt_fsdp_full_state(f, s.p, s.mu, s.nu, &e) == GT_OK);
  gt_fsdp_destroy(f);
  gt_data_close(&dd);
  return s;
}

static state train(int devices, const char *dtype, const char *mu_dtype, int steps) {
  gt_config c;
  load(&c, devices, dtype, mu_dtype, "true");
  return train_config(&c, 0, steps);
}

static void free_state(state *s) { free(s->p), free(s->mu), free(s->nu); }

/* One device, dtype=bfloat16: `steps` steps of `model` under `remat`, the
 * products reading the projections from the master shard, or (full) from
 * a copy with every tensor rounded (the test seam). */
static state train_one_device(const char *model, const char *remat, const char *width, int full, int steps) {
  const char *ov[] = {model, remat, width, "dataset_type=synthetic", "max_target_length=16", "learning_rate=0.01",
                      "gradient_clipping_threshold=0.5", "num_devices=1", "per_device_batch_size=4",
                      "dtype=bfloat16"};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 10, ov, &e) == GT_OK, "%s", e.msg);
  return train_config(&c, full, steps);
}

START_TEST(test_projections_from_master_train_bit_for_bit) {
  /* every consumer of a projection is a bf16 product that rounds it, so
   * reading it unrounded changes no bit: losses, weights and moments equal
   * the full copy's, for each model kind (dense, PLE, MoE) and remat policy
   * (full re-runs the projections in the backward). A norm left out of the
   * copy, or a projection a float32 path read unrounded, breaks it. */
  const char *models[] = {"model_name=gemma3-tiny", "model_name=gemma4-tiny-dense", "model_name=gemma4-tiny-ple",
                          "model_name=gemma4-tiny-moe", "model_name=gemma3-tiny"};
  /* the last at width 96: sqrt(96) is no power of two, so the lookup's
   * scaling would not hide rows left unrounded (at 64 it scales by 8,
   * which commutes with the rounding) */
  const char *widths[] = {"base_emb_dim=64", "base_emb_dim=64", "base_emb_dim=64", "base_emb_dim=64",
                          "base_emb_dim=96"};
  const char *remats[] = {"remat_policy=none", "remat_policy=minimal", "remat_policy=full"};
  for (int mi = 0; mi < 5; mi++)
    for (int ri = 0; ri < 3; ri++) {
      state a = train_one_device(models[mi], remats[ri], widths[mi], 0, 3);
      state b = train_one_device(models[mi], remats[ri], widths[mi], 1, 3);
      for (int i = 0; i < 3; i++)
        ck_assert_msg(isfinite(a.loss[i]) && !memcmp(&a.loss[i], &b.loss[i], sizeof(double)),
                      "%s %s %s step %d: %.17g vs %.17g", models[mi], widths[mi], remats[ri], i, a.loss[i], b.loss[i]);
      ck_assert_msg(a.loss[2] < a.loss[0], "%s: the weights move", models[mi]);
      ck_assert_msg(gt_test_same_bits(a.p, b.p, a.n), "%s %s: weights", models[mi], remats[ri]);
      ck_assert_msg(gt_test_same_bits(a.mu, b.mu, a.n), "%s %s: mu", models[mi], remats[ri]);
      ck_assert_msg(gt_test_same_bits(a.nu, b.nu, a.n), "%s %s: nu", models[mi], remats[ri]);
      free_state(&a), free_state(&b);
    }
}
END_TEST

START_TEST(test_mu_bf16_first_step_is_rounded_float32) {
  for (int N = 1; N <= 2; N++) {
    state a = train(N, "float32", "float32", 1), b = train(N, "float32", "bfloat16", 1);
    ck_assert(a.loss[0] == b.loss[0]);
    /* the step used the float32 moment: the same parameters and nu */
    ck_assert(gt_test_same_bits(b.p, a.p, a.n));
    ck_assert(gt_test_same_bits(b.nu, a.nu, a.n));
    float *r = gt_test_copy(a.mu, a.n);
    gt_bf16_round(r, a.n);
    ck_assert(gt_test_same_bits(b.mu, r, a.n));
    free(r);
    free_state(&a), free_state(&b);
  }
}
END_TEST

START_TEST(test_mu_bf16_trains_close_to_float32) {
  /* 8 steps at lr 0.01: each step's m differs from the float32 run's by at
   * most 2^-9 relative (one rounding), which moves a parameter by at most
   * about lr * 2^-9 ~ 2e-5 more per step than the float32 run; over 8
   * steps that is ~1.6e-4 per weight, against weights of ~0.02-1 and
   * updates of lr = 0.01 per step, so the losses agree to well under 1e-3
   * relative. Measured: steps 1-2 equal (the first update used the float32
   * moment), then 3e-7, 7e-7, 2e-6, 6e-6, 1.1e-5, 2.2e-5 (roughly doubling),
   * the final weights 1.4e-4 apart (norm-relative): the bounds leave ~45x
   * and ~7x */
  for (int N = 1; N <= 3; N += 2) {
    state a = train(N, "float32", "float32", 8), b = train(N, "float32", "bfloat16", 8);
    for (int i = 0; i < 8; i++) {
      ck_assert(isfinite(b.loss[i]));
      ck_assert_msg(fabs(b.loss[i] - a.loss[i]) <= 1e-3 * fabs(a.loss[i]), "%d devices step %d: %.9g vs %.9g", N, i,
                    b.loss[i], a.loss[i]);
    }
    for (int64_t i = 0; i < b.n; i++) {
      ck_assert(isfinite(b.mu[i]) && isfinite(b.p[i]) && isfinite(b.nu[i]));
      if (gt_bf16_round1(b.mu[i]) != b.mu[i]) ck_abort_msg("mu[%lld] = %.9g is no bf16 value", (long long)i, (double)b.mu[i]);
    }
    ck_assert_msg(gt_test_norm_rel_err(b.p, a.p, a.n) < 1e-3, "weights: %.3g", gt_test_norm_rel_err(b.p, a.p, a.n));
    free_state(&a), free_state(&b);
  }
  /* with bf16 weights too, on 1, 2 and 3 devices: the same training up to
   * reduction order. The first loss is the same (same rounded weights);
   * later the master weights differ by float32 ulps (the gradient sums'
   * order), which flips a bf16 copy by one bf16 ulp (2^-8) only where a
   * master weight sits that close to a rounding boundary, a few weights in
   * 2^16. dtype=bfloat16 also rounds every activation: once a weight or
   * an activation flips, everything downstream differs in float32 and
   * flips further bf16 roundings (2^-9 relative each), so the runs drift
   * apart at bf16's noise level rather than float32's: measured 1.0e-4 at
   * step 4 (1.3e-6 with the weights rounded but float32 activations);
   * 2e-3 is about four bf16 roundings of the loss. */
  state one = train(1, "bfloat16", "bfloat16", 6);
  for (int N = 2; N <= 3; N++) {
    state s = train(N, "bfloat16", "bfloat16", 6);
    /* the same weights: on the AVX-512 kernels only the loss sum's order
     * differs. On the portable ones OpenBLAS's sums follow the product's
     * row count (docs/cpus.md), so the devices' forward passes already part
     * in float32's last bits, which flip bf16 roundings downstream */
    const double tol0 = gt__kernels_avx512() ? 1e-12 : 2e-3;
    ck_assert_msg(fabs(s.loss[0] - one.loss[0]) <= tol0 * one.loss[0], "%d devices step 0: %.17g vs %.17g", N,
                  s.loss[0], one.loss[0]);
    for (int i = 0; i < 6; i++)
      ck_assert_msg(fabs(s.loss[i] - one.loss[i]) <= 2e-3 * fabs(one.loss[i]), "%d devices step %d: %.9g vs %.9g", N,
                    i, s.loss[i], one.loss[i]);
    free_state(&s);
  }
  free_state(&one);
}
END_TEST

START_TEST(test_mu_bf16_set_state_continues_bit_exact) {
  /* 4 steps straight, or 2 steps, export (float32), a new mesh set from
   * the export, 2 more: the same losses and state, bit for bit */
  for (int N = 1; N <= 2; N++) {
    gt_config c;
    load(&c, N, "bfloat16", "bfloat16", "true");
    gt_err e;
    state a = train(N, "bfloat16", "bfloat16", 4), b = train(N, "bfloat16", "bfloat16", 2);
    gt_mem host;
    gt_mem_init(&host);
    gt_data dd;
    ck_assert(gt_data_open(&dd, &c, &host, &e) == GT_OK);
    gt_batch bt;
    for (int i = 0; i < 2; i++) gt_data_next_train(&dd, &bt); /* the batches b used */
    gt_fsdp *f;
    ck_assert(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK);
    ck_assert(gt_fsdp_set_state(f, b.p, b.mu, b.nu, 2, &e) == GT_OK);
    for (int i = 2; i < 4; i++) {
      gt_data_next_train(&dd, &bt);
      gt_mesh_step_info fi;
      ck_assert(gt_trainer_mesh_step(f, &bt, 1, &fi, &e) == GT_OK);
      ck_assert_msg(fi.loss == a.loss[i], "%d devices step %d: %.9g vs %.9g", N, i, fi.loss, a.loss[i]);
    }
    ck_assert(gt_fsdp_full_state(f, b.p, b.mu, b.nu, &e) == GT_OK);
    ck_assert(gt_test_same_bits(b.p, a.p, a.n));
    ck_assert(gt_test_same_bits(b.mu, a.mu, a.n));
    ck_assert(gt_test_same_bits(b.nu, a.nu, a.n));
    /* the shards a checkpoint writes: float32 copies of the same values,
     * unit by unit (the checkpoint's shard layout), held until done */
    gt_mem staging;
    gt_mem_init(&staging);
    int64_t t0 = gt_mem_cur(gt_fsdp_device_mem(f, 0), GT_MEM_TEMP) + gt_mem_cur(gt_fsdp_device_mem(f, 0), GT_MEM_OTHER);
    gt_model *m = gt_fsdp_device_model(f, 0);
    for (int r = 0; r < gt_fsdp_num_shards(f); r++) {
      const float *p, *mu, *nu;
      ck_assert(gt_fsdp_shard_state(f, r, &p, &mu, &nu, &staging, &e) == GT_OK);
      ck_assert(p && mu && nu);
      int64_t k = 0;
      for (int64_t u = 0; u < gt_model_n_units(m); u++) {
        int64_t off, cnt;
        gt_model_unit(m, u, &off, &cnt);
        int64_t b0 = gt_shard_begin(cnt, N, r), len = gt_shard_len(cnt, N, r);
        ck_assert(gt_test_same_bits(mu + k, a.mu + off + b0, len));
        ck_assert(gt_test_same_bits(p + k, a.p + off + b0, len));
        k += len;
      }
    }
    /* staged in the caller's tracker, not in device memory */
    ck_assert_int_eq(gt_mem_cur(&staging, GT_MEM_OTHER), 4 * a.n);
    ck_assert_int_eq(gt_mem_cur(gt_fsdp_device_mem(f, 0), GT_MEM_TEMP) + gt_mem_cur(gt_fsdp_device_mem(f, 0), GT_MEM_OTHER), t0);
    gt_fsdp_shard_state_done(f);
    ck_assert_int_eq(gt_mem_cur(&staging, GT_MEM_OTHER), 0);
    gt_fsdp_destroy(f);
    gt_data_close(&dd);
    free_state(&a), free_state(&b);
  }
}
END_TEST

/* ---------- the memory plan ---------- */

static void plan_of(gt_plan *p, int devices, const char *dtype, const char *mu_dtype) {
  gt_config c;
  load(&c, devices, dtype, mu_dtype, "true");
  gt_err e;
  ck_assert_msg(gt_plan_compute(p, &c, &e) == GT_OK, "%s", e.msg);
}

START_TEST(test_plan_mu_bf16_and_bf16_copies) {
  gt_config c;
  load(&c, 1, "float32", "float32", "true");
  gt_model m;
  gt_err e;
  ck_assert(gt_model_build(&m, &c, &e) == GT_OK);
  for (int N = 1; N <= 3; N++) {
    gt_plan a, b, w;
    plan_of(&a, N, "float32", "float32");
    plan_of(&b, N, "float32", "bfloat16");
    plan_of(&w, N, "bfloat16", "float32");
    /* the plan's device (the largest): 2 bytes less per element of its
     * shard, which is one of the shards of gt_shard_len */
    int64_t diff = a.cat_peak[GT_MEM_OPTIM] - b.cat_peak[GT_MEM_OPTIM], ok = 0;
    for (int d = 0; d < N; d++) {
      int64_t sn = 0;
      for (int64_t u = 0; u < gt_model_n_units(&m); u++) {
        int64_t off, cnt;
        gt_model_unit(&m, u, &off, &cnt);
        sn += gt_shard_len(cnt, N, d);
      }
      ok |= diff == 2 * sn;
    }
    ck_assert_msg(ok, "%d devices: optimizer %lld -> %lld bytes", N, (long long)a.cat_peak[GT_MEM_OPTIM],
                  (long long)b.cat_peak[GT_MEM_OPTIM]);
    if (N == 1) {
      ck_assert_int_eq(diff, 2 * m.n_params);
      ck_assert_int_eq(a.cat_peak[GT_MEM_GATHERED], 0); /* float32 computes on its shard */
      ck_assert_int_gt(w.cat_peak[GT_MEM_GATHERED], 0); /* bf16 on rounded copies */
    } else {
      ck_assert_int_eq(w.cat_peak[GT_MEM_GATHERED], a.cat_peak[GT_MEM_GATHERED]); /* same buffers */
    }
    /* the runs allocate what the plans say */
    int64_t g[3];
    one_step(N, "bfloat16", "float32", "true", NULL, g, NULL);
    int64_t gmax = 0;
    for (int d = 0; d < N; d++) gmax = g[d] > gmax ? g[d] : gmax;
    ck_assert_int_eq(gmax, w.cat_peak[GT_MEM_GATHERED]);
    int64_t o[3];
    one_step(N, "float32", "bfloat16", "true", NULL, NULL, o);
    int64_t omax = 0;
    for (int d = 0; d < N; d++) omax = o[d] > omax ? o[d] : omax;
    ck_assert_int_eq(omax, b.cat_peak[GT_MEM_OPTIM]);
    gt_plan_free(&a), gt_plan_free(&b), gt_plan_free(&w);
  }
  gt_model_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fsdp_bf16");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_acquired_weights_are_rounded_master);
  tcase_add_test(tc, test_bf16_gathers_half_the_bytes);
  tcase_add_test(tc, test_in_place_bf16_holds_a_rounded_copy);
  tcase_add_test(tc, test_mu_bf16_halves_its_memory);
  tcase_add_test(tc, test_projections_from_master_train_bit_for_bit);
  tcase_add_test(tc, test_mu_bf16_first_step_is_rounded_float32);
  tcase_add_test(tc, test_mu_bf16_trains_close_to_float32);
  tcase_add_test(tc, test_mu_bf16_set_state_continues_bit_exact);
  tcase_add_test(tc, test_plan_mu_bf16_and_bf16_copies);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? 1 : 0;
}
