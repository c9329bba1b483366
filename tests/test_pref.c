/* Preference tuning (train/pref.h, the head's preference mode in
 * model/head.h, the reference pass in mesh/fsdp.h):
 *  - DPO's and ORPO's pair losses against a float64 scalar reference
 *    written from the papers' formulas (log of the sigmoid as written),
 *    their derivatives against central differences of that reference;
 *  - beta = 0 without smoothing: the DPO gradient is exactly zero, pair
 *    and whole model;
 *  - the whole model's gradient (pairs packed and not, 1 and 2 vocab
 *    tiles, with and without the soft-cap) against central differences of
 *    its preference loss;
 *  - the pair count and the head's skipping of one-sided pairs;
 *  - step 0 with fresh adapters (reference: the base, adapters off) and
 *    with a copy of the parameters: the log-ratios are exactly 0, the loss
 *    log 2, the rewards 0;
 *  - a mesh of 1 and 2 devices agree (DPO with adapters, DPO over all
 *    parameters, ORPO), also in bf16 and with gradient accumulation;
 *  - remat policies give the preference gradient's bits;
 *  - the memory plan equals what a step measures (the reference pass and
 *    the reference copy included);
 *  - a sweep reads the rewards by name. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "exec/exec.h"
#include "mesh/fsdp.h"
#include "model/head.h"
#include "model/model.h"
#include "sweep/sweep.h"
#include "train/plan.h"
#include "train/pref.h"
#include "train/report.h"
#include "train/trainer.h"
#include "gt_testutil.h"

/* ---------- the pair losses against the papers' formulas ---------- */

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

typedef struct {
  int orpo;
  double beta, eps, lambda;
  double v[6]; /* logp_c, ref_c, n_c, logp_r, ref_r, n_r */
} pair_ref;

/* Rafailov et al. eq. 7 with label smoothing (MaxText's dpo_loss_fn), and
 * Hong et al. eq. 6-8 on the mean log-probabilities (TRL's odds_ratio_loss) */
static double pair_ref_loss(void *p) {
  const pair_ref *c = p;
  const double *v = c->v;
  if (!c->orpo) {
    const double h = (v[0] - v[1]) - (v[3] - v[4]);
    return -(1 - c->eps) * log(sig(c->beta * h)) - c->eps * log(sig(-c->beta * h));
  }
  const double a = v[0] / v[2], b = v[3] / v[5];
  const double odds_a = exp(a) / (1 - exp(a)), odds_b = exp(b) / (1 - exp(b));
  const double lo = log(odds_a / odds_b);
  return -a - c->lambda * log(sig(lo));
}

START_TEST(test_pair_vs_reference) {
  uint64_t s = 5;
  for (int orpo = 0; orpo < 2; orpo++)
    for (int k = 0; k < 200; k++) {
      pair_ref c = {orpo, 0.0, 0.0, 0.0, {0}};
      c.beta = k % 5 == 0 ? 1.0 : gt_test_rand_uniform(&s, 0.01f, 0.5f);
      c.eps = k % 3 == 0 ? 0.0 : gt_test_rand_uniform(&s, 0.0f, 0.4f);
      c.lambda = gt_test_rand_uniform(&s, 0.05f, 1.0f);
      c.v[2] = 1 + (double)(gt_test_rand_u64(&s) % 20);
      c.v[5] = 1 + (double)(gt_test_rand_u64(&s) % 20);
      /* mean token losses in (0.05, 6): logps below 0 */
      c.v[0] = -c.v[2] * gt_test_rand_uniform(&s, 0.05f, 6.0f);
      c.v[3] = -c.v[5] * gt_test_rand_uniform(&s, 0.05f, 6.0f);
      c.v[1] = orpo ? 0 : -c.v[2] * gt_test_rand_uniform(&s, 0.05f, 6.0f);
      c.v[4] = orpo ? 0 : -c.v[5] * gt_test_rand_uniform(&s, 0.05f, 6.0f);
      gt_pref_cfg p = {orpo ? GT_PREF_ORPO : GT_PREF_DPO, c.beta, c.eps, c.lambda};
      gt_pref_seq sc = {c.v[0], c.v[1], c.v[2]}, sr = {c.v[3], c.v[4], c.v[5]};
      gt_pref_pair_out o;
      gt_pref_pair(&p, &sc, &sr, &o);
      const double L = pair_ref_loss(&c);
      ck_assert_msg(fabs(o.loss - L) <= 1e-12 * fmax(1.0, fabs(L)), "%s %d: loss %.17g vs %.17g", orpo ? "orpo" : "dpo",
                    k, o.loss, L);
      double g[6];
      gt_test_central_diff(g, c.v, 6, 1e-6, pair_ref_loss, &c);
      ck_assert_msg(fabs(o.dlogp_c - g[0]) <= 1e-6 * fmax(1.0, fabs(g[0])), "%d: d/dlogp_c %.12g vs fd %.12g", k,
                    o.dlogp_c, g[0]);
      ck_assert_msg(fabs(o.dlogp_r - g[3]) <= 1e-6 * fmax(1.0, fabs(g[3])), "%d: d/dlogp_r %.12g vs fd %.12g", k,
                    o.dlogp_r, g[3]);
      if (!orpo) {
        ck_assert(fabs(o.reward_c - c.beta * (c.v[0] - c.v[1])) <= 1e-12 * fmax(1, fabs(o.reward_c)));
        ck_assert(fabs(o.reward_r - c.beta * (c.v[3] - c.v[4])) <= 1e-12 * fmax(1, fabs(o.reward_r)));
        ck_assert(o.logp_c == c.v[0] && o.logp_r == c.v[3]);
      } else {
        const double a = c.v[0] / c.v[2], b = c.v[3] / c.v[5];
        ck_assert(fabs(o.reward_c - c.lambda * a) <= 1e-12 && fabs(o.reward_r - c.lambda * b) <= 1e-12);
        ck_assert(fabs(o.nll + a) <= 1e-12);
        const double lo = (a - b) - (log(1 - exp(a)) - log(1 - exp(b)));
        ck_assert_msg(fabs(o.log_odds_ratio - log(sig(lo))) <= 1e-12, "%.17g vs %.17g", o.log_odds_ratio, log(sig(lo)));
      }
    }
  /* the log sigmoid far out on both sides (the formula as written overflows) */
  ck_assert(gt_pref_log_sigmoid(800) == 0.0 || fabs(gt_pref_log_sigmoid(800)) < 1e-300);
  ck_assert(fabs(gt_pref_log_sigmoid(-800) + 800) < 1e-9);
  ck_assert(gt_pref_log_sigmoid(0) == -log(2.0));
}
END_TEST

START_TEST(test_beta_zero_pair) {
  gt_pref_cfg p = {GT_PREF_DPO, 0.0, 0.0, 0.0};
  gt_pref_seq c = {-12.5, -3.0, 5}, r = {-2.0, -9.0, 4};
  gt_pref_pair_out o;
  gt_pref_pair(&p, &c, &r, &o);
  ck_assert(o.dlogp_c == 0.0 && o.dlogp_r == 0.0);
  ck_assert(o.loss == log(2.0));
  /* and it shrinks with beta: |dL/dh| = beta sigmoid(-beta h) <= beta */
  for (double b = 1e-1; b > 1e-9; b /= 10) {
    p.beta = b;
    gt_pref_pair(&p, &c, &r, &o);
    ck_assert(fabs(o.dlogp_c) <= b && fabs(o.dlogp_c) >= 0.4 * b);
  }
}
END_TEST

/* ---------- the model in preference mode ---------- */

typedef struct {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
  int B, T;
  int32_t *in, *tg, *pos, *seg;
  float *ref;
  gt_batch b;
  gt_pref_cfg pc;
  gt_pref_head ph;
} fx;

/* Rows: pair p's prompt (targets -1) then its response. Row pair 0 holds
 * one pair (segment 1); row pair 1 packs two (segments 1 and 2), the
 * rejected answers of other lengths; the rest of a row is padding
 * (target -1, segment 0). */
static void fx_batch(fx *x, uint64_t *s) {
  const int B = x->B, T = x->T;
  for (int i = 0; i < B * T; i++) x->tg[i] = -1, x->seg[i] = 0, x->in[i] = 0, x->pos[i] = 0;
  gt_test_fill_ids(x->in, B * T, s, 1, x->m.vocab);
  for (int rp = 0; rp < B / 2; rp++) {
    const int npairs = rp % 2 ? 2 : 1;
    for (int side = 0; side < 2; side++) {
      int32_t *tg = x->tg + (2 * rp + side) * T, *sg = x->seg + (2 * rp + side) * T, *ps = x->pos + (2 * rp + side) * T;
      int at = 0;
      for (int p = 0; p < npairs; p++) {
        const int len = npairs == 1 ? T - 1 - side : T / 2 - 1 - side * p, prompt = 2 + p;
        for (int k = 0; k < len && at < T; k++, at++) {
          sg[at] = p + 1;
          ps[at] = k;
          tg[at] = k >= prompt ? (int32_t)(1 + gt_test_rand_u64(s) % (uint64_t)(x->m.vocab - 1)) : -1;
        }
      }
    }
  }
  gt_test_fill(x->ref, B * T, s, 0.5f, 6.0f);
  x->b = (gt_batch){B, T, x->in, x->tg, x->pos, x->seg};
}

static void fx_make(fx *x, int n, const char *const *ov, uint64_t seed, const char *algo) {
  uint64_t s = gt_test_model_random(&x->m, &x->cfg, &x->mem, n, ov, seed, 1);
  x->B = (int)gt_config_global_batch(&x->cfg);
  x->T = (int)x->cfg.max_target_length;
  const size_t bt = (size_t)x->B * (size_t)x->T;
  x->in = malloc(sizeof(int32_t) * bt);
  x->tg = malloc(sizeof(int32_t) * bt);
  x->pos = malloc(sizeof(int32_t) * bt);
  x->seg = malloc(sizeof(int32_t) * bt);
  x->ref = malloc(sizeof(float) * bt);
  fx_batch(x, &s);
  x->pc = (gt_pref_cfg){!strcmp(algo, "orpo") ? GT_PREF_ORPO : GT_PREF_DPO, 0.5, 0.1, 0.3};
  x->ph = (gt_pref_head){gt_pref_pairs_loss, &x->pc, x->T, x->seg, x->pc.algo == GT_PREF_DPO ? x->ref : NULL};
  x->m.pref = &x->ph;
}

static void fx_free(fx *x) {
  free(x->in);
  free(x->tg);
  free(x->pos);
  free(x->seg);
  free(x->ref);
  x->m.pref = NULL;
  gt_model_free(&x->m);
  ck_assert_int_eq(gt_mem_total_cur(&x->mem), 0);
}

static double fx_loss(fx *x) {
  gt_loss_stats st = {0};
  gt_err e;
  ck_assert_msg(gt_exec_forward_loss(&x->m, &x->b, 1, &st, &e) == GT_OK, "%s", e.msg);
  ck_assert(st.total_weights > 0);
  return st.xent_sum / (double)st.total_weights;
}

static gt_loss_stats fx_grads(fx *x, int tiles) {
  gt_loss_stats st = {0};
  gt_err e;
  gt_model_zero_grads(&x->m);
  const int64_t np = gt_pref_count_pairs(&x->b);
  ck_assert_msg(gt_exec_forward_backward(&x->m, &x->b, tiles, 1.0f / (float)np, &st, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(st.total_weights, np);
  return st;
}

/* The gradient of the mean pair loss along a random direction and at the
 * largest entry of each tensor, against central differences of the loss;
 * 2 vocab tiles against 1. */
static void check_model_fd(int n, const char *const *ov, const char *algo) {
  fx x;
  fx_make(&x, n, ov, 7, algo);
  gt_model *m = &x.m;
  ck_assert_int_eq(gt_pref_count_pairs(&x.b), 3 * x.B / 4);
  gt_loss_stats st = fx_grads(&x, 1);
  const int64_t P = m->n_params;
  float *g = gt_test_copy(m->grads, P), *p0 = gt_test_copy(m->params, P), *dir = gt_test_zeros(P);
  fx_grads(&x, 2);
  gt_test_check_err("2 tiles vs 1", gt_test_scaled_err(m->grads, g, P), 1e-5);
  ck_assert_msg(fabs(fx_loss(&x) - st.xent_sum / (double)st.total_weights) <= 1e-6 * fabs(fx_loss(&x)),
                "forward-only and training losses differ");
  uint64_t s = 99;
  gt_test_fill(dir, P, &s, -1, 1);
  double gd = 0;
  for (int64_t i = 0; i < P; i++) gd += (double)g[i] * dir[i];
  const double h = 2e-3;
  for (int64_t i = 0; i < P; i++) m->params[i] = p0[i] + (float)h * dir[i];
  const double lp = fx_loss(&x);
  for (int64_t i = 0; i < P; i++) m->params[i] = p0[i] - (float)h * dir[i];
  const double lm = fx_loss(&x);
  memcpy(m->params, p0, sizeof(float) * (size_t)P);
  const double fd = (lp - lm) / (2 * h);
  ck_assert_msg(fabs(fd - gd) <= 0.02 * fabs(gd) + 1e-4, "%s directional: fd %.6g vs analytic %.6g", algo, fd, gd);
  int checked = 0;
  for (int t = 0; t < m->n_tensors; t++) {
    const gt_tensor_info *ti = &m->tensors[t];
    int64_t best = ti->offset;
    for (int64_t i = ti->offset; i < ti->offset + ti->numel; i++)
      if (fabsf(g[i]) > fabsf(g[best])) best = i;
    if (fabsf(g[best]) < 1e-3f) continue;
    const double hh = 3e-3;
    m->params[best] = p0[best] + (float)hh;
    const double a = fx_loss(&x);
    m->params[best] = p0[best] - (float)hh;
    const double b = fx_loss(&x);
    m->params[best] = p0[best];
    const double fde = (a - b) / (2 * hh);
    ck_assert_msg(fabs(fde - g[best]) <= 0.05 * fabs(g[best]) + 2e-4, "%s %s[%lld]: fd %.6g vs analytic %.6g", algo,
                  ti->name, (long long)(best - ti->offset), fde, g[best]);
    checked++;
  }
  ck_assert_int_ge(checked, m->n_tensors / 2);
  free(g);
  free(p0);
  free(dir);
  fx_free(&x);
}

static const char *const fd_ov[] = {"model_name=gemma3-tiny", "max_target_length=12", "per_device_batch_size=4",
                                    "layer_pattern=LG", "base_num_decoder_layers=2"};

START_TEST(test_model_fd_dpo) { check_model_fd(5, fd_ov, "dpo"); }
END_TEST

START_TEST(test_model_fd_orpo) { check_model_fd(5, fd_ov, "orpo"); }
END_TEST

START_TEST(test_model_fd_softcap) {
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=12", "per_device_batch_size=4",
                      "layer_pattern=LG", "base_num_decoder_layers=2", "final_logits_soft_cap=3"};
  check_model_fd(6, ov, "dpo");
}
END_TEST

/* beta = 0, no smoothing: every gradient is exactly zero (the tokens'
 * weights are), while the loss is log 2 */
START_TEST(test_beta_zero_model) {
  fx x;
  fx_make(&x, 5, fd_ov, 3, "dpo");
  x.pc.beta = 0.0;
  x.pc.eps = 0.0;
  gt_loss_stats st = fx_grads(&x, 2);
  for (int64_t i = 0; i < x.m.n_params; i++) ck_assert_msg(x.m.grads[i] == 0.0f, "grad[%lld] = %g", (long long)i, x.m.grads[i]);
  ck_assert(fabs(st.xent_sum / (double)st.total_weights - log(2.0)) <= 1e-15);
  fx_free(&x);
}
END_TEST

/* A pair with response tokens on one side only is no pair: no loss, no
 * gradient from its tokens; the count agrees with the head's. */
START_TEST(test_one_sided_pair) {
  fx x;
  fx_make(&x, 5, fd_ov, 4, "dpo");
  /* row pair 1's second pair: mask its rejected tokens */
  int32_t *rej = x.tg + 3 * x.T;
  for (int t = 0; t < x.T; t++)
    if (x.seg[3 * x.T + t] == 2) rej[t] = -1;
  const int64_t np = gt_pref_count_pairs(&x.b);
  ck_assert_int_eq(np, 2);
  gt_loss_stats st = fx_grads(&x, 1);
  ck_assert_int_eq(st.total_weights, 2);
  /* the chosen tokens of that pair carry no weight: changing their targets
   * changes nothing */
  float *g = gt_test_copy(x.m.grads, x.m.n_params);
  for (int t = 0; t < x.T; t++)
    if (x.seg[2 * x.T + t] == 2 && x.tg[2 * x.T + t] >= 0) x.tg[2 * x.T + t] = (x.tg[2 * x.T + t] + 1) % x.m.vocab;
  gt_loss_stats st2 = fx_grads(&x, 1);
  ck_assert(gt_test_same_bits(x.m.grads, g, x.m.n_params));
  ck_assert(st2.xent_sum == st.xent_sum);
  free(g);
  fx_free(&x);
}
END_TEST

/* A batch not laid out as pairs: every token its own segment, the
 * rejected row's segments none of the chosen row's: as many sequences as
 * tokens, no pair, no loss, no gradient (and no write out of bounds) */
START_TEST(test_no_pairs) {
  fx x;
  fx_make(&x, 5, fd_ov, 8, "dpo");
  for (int r = 0; r < x.B; r++)
    for (int t = 0; t < x.T; t++) {
      x.seg[r * x.T + t] = 1 + t + (r % 2) * x.T;
      x.tg[r * x.T + t] = 1 + (r * x.T + t) % (x.m.vocab - 1);
    }
  ck_assert_int_eq(gt_pref_count_pairs(&x.b), 0);
  gt_loss_stats st = fx_grads(&x, 1);
  ck_assert_int_eq(st.total_weights, 0);
  ck_assert(st.xent_sum == 0.0);
  for (int64_t i = 0; i < x.m.n_params; i++) ck_assert(x.m.grads[i] == 0.0f);
  fx_free(&x);
}
END_TEST

/* ---------- the mesh: reference pass, step 0, devices ---------- */

typedef struct {
  int n;
  double loss[4], pref[4][GT_PREF_NSUMS];
  int64_t pairs[4];
  gt_loss_stats eval;
  float *params;
  int64_t np;
} run;

static void hand_batch(fx *x, int B, int T, int vocab, uint64_t seed) {
  x->B = B;
  x->T = T;
  x->m.vocab = vocab;
  const size_t bt = (size_t)B * (size_t)T;
  x->in = malloc(sizeof(int32_t) * bt);
  x->tg = malloc(sizeof(int32_t) * bt);
  x->pos = malloc(sizeof(int32_t) * bt);
  x->seg = malloc(sizeof(int32_t) * bt);
  x->ref = malloc(sizeof(float) * bt);
  uint64_t s = seed;
  fx_batch(x, &s);
}

static run train_mesh(int devices, const char *algo, const char *lora, const char *dtype, int ga, int steps) {
  char nd[64], pd[64], al[64], gak[64];
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", 4 / devices);
  snprintf(al, sizeof al, "preference_algo=%s", algo);
  snprintf(gak, sizeof gak, "gradient_accumulation_steps=%d", ga);
  const char *ov[] = {"model_name=gemma3-tiny", "dataset_type=synthetic", "max_target_length=12", "learning_rate=0.01",
                      "base_num_decoder_layers=2", "layer_pattern=LG", "use_dpo=true", "dpo_beta=0.5",
                      nd, pd, al, lora, dtype, gak, "lora_rank=4"};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 15, ov, &e) == GT_OK, "%s", e.msg);
  gt_fsdp *f;
  ck_assert_msg(gt_fsdp_create(&f, &c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_pref_cfg pc;
  ck_assert(gt_pref_cfg_from(&c, &pc, &e) == GT_OK);
  int ref = !gt_pref_needs_reference(&c) ? GT_FSDP_REF_NONE : c.enable_lora ? GT_FSDP_REF_BASE : GT_FSDP_REF_COPY;
  ck_assert_msg(gt_fsdp_set_pref(f, gt_pref_pairs_loss, &pc, ref, 2, &e) == GT_OK, "%s", e.msg);
  run r;
  memset(&r, 0, sizeof r);
  fx b[3];
  memset(b, 0, sizeof b);
  for (int i = 0; i < 3; i++) hand_batch(&b[i], 4, 12, (int)gt_fsdp_device_model(f, 0)->vocab, 100 + (uint64_t)i);
  for (int s = 0; s < steps; s++) {
    gt_batch mb[2] = {b[s % 2].b, b[(s + 1) % 2].b};
    gt_mesh_step_info fi;
    ck_assert_msg(gt_trainer_mesh_step(f, mb, ga, &fi, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = fi.loss;
    r.pairs[s] = fi.total_weights;
    memcpy(r.pref[s], fi.pref, sizeof fi.pref);
  }
  ck_assert_msg(gt_fsdp_eval(f, &b[2].b, 1, &r.eval, &e) == GT_OK, "%s", e.msg);
  /* scoring sequences (eval_tasks) stays the LM loss: every target's token loss */
  {
    float *tl = malloc(sizeof(float) * 4 * 12);
    gt_loss_stats ts = {0};
    ck_assert_msg(gt_fsdp_eval_tokens(f, &b[2].b, 1, tl, &ts, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(ts.total_weights, gt_batch_total_weights(&b[2].b));
    for (int i = 0; i < 4 * 12; i++) ck_assert(b[2].tg[i] < 0 ? tl[i] == 0.0f : tl[i] > 0.0f);
    free(tl);
  }
  r.np = gt_fsdp_num_params(f);
  r.params = malloc(sizeof(float) * (size_t)r.np);
  ck_assert(gt_fsdp_full_params(f, r.params, &e) == GT_OK);
  gt_fsdp_destroy(f);
  for (int i = 0; i < 3; i++) {
    free(b[i].in);
    free(b[i].tg);
    free(b[i].pos);
    free(b[i].seg);
    free(b[i].ref);
  }
  return r;
}

/* step 0: the policy is the reference (fresh adapters; or the copy), so
 * every log-ratio is exactly 0: loss log 2, rewards 0, accuracy 0 */
static void check_step0(const char *lora, const char *dtype) {
  run r = train_mesh(1, "dpo", lora, dtype, 1, 3);
  ck_assert_int_eq(r.pairs[0], 3);
  ck_assert_msg(r.loss[0] == log(2.0), "%s %s: step 0 loss %.17g", lora, dtype, r.loss[0]);
  ck_assert(r.pref[0][GT_PREF_REWARD_C] == 0.0 && r.pref[0][GT_PREF_REWARD_R] == 0.0);
  ck_assert(r.pref[0][GT_PREF_ACC] == 0.0);
  ck_assert(r.pref[0][GT_PREF_LOGP_C] < 0.0 && r.pref[0][GT_PREF_LOGP_R] < 0.0);
  /* after an update (step 0's learning rate is 0: the warmup) the
   * log-ratios moved */
  ck_assert_msg(r.loss[2] != log(2.0) && r.pref[2][GT_PREF_REWARD_C] != 0.0, "%s: step 2 loss %.17g", lora, r.loss[2]);
  free(r.params);
}

START_TEST(test_step0_lora) { check_step0("enable_lora=true", "dtype=float32"); }
END_TEST

START_TEST(test_step0_lora_bf16) { check_step0("enable_lora=true", "dtype=bfloat16"); }
END_TEST

START_TEST(test_step0_full) { check_step0("enable_lora=false", "dtype=float32"); }
END_TEST

static void check_devices(const char *algo, const char *lora, const char *dtype, int ga, double tol) {
  const int steps = 3;
  run one = train_mesh(1, algo, lora, dtype, ga, steps);
  run two = train_mesh(2, algo, lora, dtype, ga, steps);
  for (int s = 0; s < steps; s++) {
    ck_assert_int_eq(one.pairs[s], 3 * ga);
    ck_assert_int_eq(two.pairs[s], one.pairs[s]);
    ck_assert_msg(fabs(two.loss[s] - one.loss[s]) <= tol * fabs(one.loss[s]), "%s %s step %d: loss %.9g vs %.9g",
                  algo, lora, s, two.loss[s], one.loss[s]);
    for (int k = 0; k < GT_PREF_NSUMS; k++)
      ck_assert_msg(fabs(two.pref[s][k] - one.pref[s][k]) <= tol * fmax(1.0, fabs(one.pref[s][k])) * 10,
                    "%s step %d sum %d: %.9g vs %.9g", algo, s, k, two.pref[s][k], one.pref[s][k]);
  }
  ck_assert_int_eq(one.eval.total_weights, 3);
  ck_assert_msg(fabs(two.eval.xent_sum - one.eval.xent_sum) <= tol * fabs(one.eval.xent_sum), "eval %.9g vs %.9g",
                two.eval.xent_sum, one.eval.xent_sum);
  ck_assert_msg(fabs(two.eval.pref[GT_PREF_REWARD_C] - one.eval.pref[GT_PREF_REWARD_C]) <=
                    tol * 10 * fmax(1.0, fabs(one.eval.pref[GT_PREF_REWARD_C])),
                "eval reward %.9g vs %.9g", two.eval.pref[GT_PREF_REWARD_C], one.eval.pref[GT_PREF_REWARD_C]);
  const double err = gt_test_norm_rel_err(two.params, one.params, one.np);
  ck_assert_msg(err <= tol, "%s %s: final weights differ by %.3g", algo, lora, err);
  free(one.params);
  free(two.params);
}

START_TEST(test_devices_dpo_lora) { check_devices("dpo", "enable_lora=true", "dtype=float32", 1, 1e-5); }
END_TEST

START_TEST(test_devices_dpo_full) { check_devices("dpo", "enable_lora=false", "dtype=float32", 1, 1e-5); }
END_TEST

START_TEST(test_devices_orpo_accum) { check_devices("orpo", "enable_lora=false", "dtype=float32", 2, 1e-5); }
END_TEST

START_TEST(test_devices_dpo_bf16) { check_devices("dpo", "enable_lora=true", "dtype=bfloat16", 2, 5e-4); }
END_TEST

/* the remat policy changes what is kept, not the bits */
START_TEST(test_remat_same_bits) {
  const char *pol[3] = {"remat_policy=none", "remat_policy=full", "remat_policy=minimal"};
  float *ref = NULL;
  for (int k = 0; k < 3; k++) {
    const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=12", "per_device_batch_size=4",
                        "layer_pattern=LG", "base_num_decoder_layers=2", pol[k]};
    fx x;
    fx_make(&x, 6, ov, 9, "dpo");
    fx_grads(&x, 2);
    if (!ref) ref = gt_test_copy(x.m.grads, x.m.n_params);
    else ck_assert_msg(gt_test_same_bits(x.m.grads, ref, x.m.n_params), "%s: other gradient bits", pol[k]);
    fx_free(&x);
  }
  free(ref);
}
END_TEST

/* the plan of a preference step is what the step allocates: the reference
 * pass's forward, the reference's per-token losses, the copy of the
 * trainable shard (all parameters, DPO), the head's pair buffers */
START_TEST(test_plan_equals_measured) {
  const char *cases[3][2] = {{"enable_lora=true", "preference_algo=dpo"},
                             {"enable_lora=false", "preference_algo=dpo"},
                             {"enable_lora=false", "preference_algo=orpo"}};
  int64_t frozen[3][2] = {{0}};
  for (int k = 0; k < 3; k++)
    for (int devices = 1; devices <= 2; devices++) {
      char nd[32];
      snprintf(nd, sizeof nd, "num_devices=%d", devices);
      const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=16", "per_device_batch_size=2", "use_dpo=true",
                          "num_vocab_tiling=2", cases[k][0], cases[k][1], nd};
      gt_config c;
      gt_err e;
      gt_test_config(&c, 8, ov);
      gt_plan p;
      ck_assert_msg(gt_plan_compute(&p, &c, &e) == GT_OK, "%s", e.msg);
      gt_trainer *tr;
      ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK, "%s", e.msg);
      gt_step_metrics sm;
      ck_assert_msg(gt_trainer_step_zero(tr, &sm, &e) == GT_OK, "%s", e.msg);
      char what[160];
      snprintf(what, sizeof what, "%s %s, %d devices", cases[k][0], cases[k][1], devices);
      gt_test_plan_matches(&p, tr, what);
      frozen[k][devices - 1] = gt_mem_peak(gt_fsdp_device_mem(gt_trainer_fsdp(tr), 0), GT_MEM_FROZEN);
      gt_trainer_destroy(tr);
      gt_plan_free(&p);
    }
  /* the copy: DPO over all parameters holds the trainable shard twice; ORPO none */
  ck_assert_msg(frozen[1][0] > 0 && frozen[2][0] == 0 && frozen[1][1] < frozen[1][0], "frozen %lld %lld %lld",
                (long long)frozen[1][0], (long long)frozen[2][0], (long long)frozen[1][1]);
}
END_TEST

/* a sweep's columns by name: the last step's and eval's rewards */
START_TEST(test_sweep_columns) {
  char *dir = gt_test_mkdtemp("pref_sweep"), *path = gt_test_path(dir, "metrics.jsonl");
  gt_test_write_text(path, "{\"step\": 0, \"loss\": 0.69, \"seconds\": 1, \"rewards/accuracies\": 0, "
                           "\"rewards/margins\": 0}\n"
                           "{\"step\": 1, \"loss\": 0.5, \"seconds\": 1, \"rewards/accuracies\": 0.75, "
                           "\"rewards/margins\": 0.25, \"eval_loss\": 0.6, \"eval_rewards/accuracies\": 0.625, "
                           "\"eval_rewards/margins\": 0.125}\n");
  gt_sweep_result r;
  gt_err e;
  gt_sweep_result_init(&r);
  ck_assert_msg(gt_sweep_read_run_metrics(&r, path, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_sweep_is_metric("final_rewards_accuracies") && gt_sweep_is_metric("final_eval_rewards_margins"));
  ck_assert(gt_sweep_result_metric(&r, "final_rewards_accuracies") == 0.75);
  ck_assert(gt_sweep_result_metric(&r, "final_rewards_margins") == 0.25);
  ck_assert(gt_sweep_result_metric(&r, "final_eval_rewards_accuracies") == 0.625);
  ck_assert(gt_sweep_result_metric(&r, "final_eval_rewards_margins") == 0.125);
  free(path);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

/* TensorBoard: every preference tag beside every other one (8 eval tasks
 * included), none lost */
START_TEST(test_tensorboard_tags) {
  gt_step_metrics sm;
  memset(&sm, 0, sizeof sm);
  sm.loss = sm.lm_loss = 0.5, sm.perplexity = 1.6, sm.grad_norm = 1, sm.param_norm = 2, sm.seconds = 1;
  sm.has_moe = sm.has_z_loss = sm.has_checkpoint = sm.diloco_synced = sm.has_eval = 1;
  sm.has_pref = sm.pref_orpo = sm.has_eval_pref = 1;
  sm.rewards_accuracies = 0.75, sm.log_odds_ratio = -0.25, sm.eval_rewards_margins = 1.5;
  sm.n_tasks = 8;
  for (int i = 0; i < 8; i++) snprintf(sm.tasks[i].name, sizeof sm.tasks[i].name, "task%d", i);
  gt_report_tb b;
  int n = gt_report_tb_scalars(&sm, 1.0, 1, &b);
  ck_assert_int_le(n, GT_REPORT_TB_MAX);
  int found = 0;
  for (int i = 0; i < n; i++) {
    found += !strcmp(b.v[i].tag, "rewards/accuracies") && b.v[i].value == 0.75f;
    found += !strcmp(b.v[i].tag, "log_odds_ratio") && b.v[i].value == -0.25f;
    found += !strcmp(b.v[i].tag, "eval/rewards/margins") && b.v[i].value == 1.5f;
    found += !strcmp(b.v[i].tag, "logps/rejected");
    found += !strcmp(b.v[i].tag, "eval/task7/acc_norm_stderr");
  }
  ck_assert_int_eq(found, 5);
}
END_TEST

/* refusals, naming the key */
START_TEST(test_config_refused) {
  gt_config c;
  gt_err e;
  gt_trainer *t;
  const char *ov[] = {"model_name=gemma3-tiny", "use_dpo=true", "per_device_batch_size=1"};
  gt_test_config(&c, 3, ov);
  ck_assert(gt_trainer_create(&t, &c, NULL, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "per_device_batch_size"), "%s", e.msg);
  const char *ov2[] = {"model_name=gemma3-tiny", "use_dpo=true", "per_device_batch_size=2", "z_loss_multiplier=0.1"};
  gt_test_config(&c, 4, ov2);
  ck_assert(gt_trainer_create(&t, &c, NULL, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "z_loss_multiplier"), "%s", e.msg);
  /* and out of range by gt_pref_cfg_from (the config's own check says it first) */
  gt_pref_cfg p;
  c.dpo_label_smoothing = 0.7;
  ck_assert(gt_pref_cfg_from(&c, &p, &e) == GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "dpo_label_smoothing"), "%s", e.msg);
}
END_TEST

static Suite *pref_suite(void) {
  Suite *s = suite_create("pref");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_pair_vs_reference);
  tcase_add_test(tc, test_beta_zero_pair);
  tcase_add_test(tc, test_model_fd_dpo);
  tcase_add_test(tc, test_model_fd_orpo);
  tcase_add_test(tc, test_model_fd_softcap);
  tcase_add_test(tc, test_beta_zero_model);
  tcase_add_test(tc, test_one_sided_pair);
  tcase_add_test(tc, test_no_pairs);
  tcase_add_test(tc, test_step0_lora);
  tcase_add_test(tc, test_step0_lora_bf16);
  tcase_add_test(tc, test_step0_full);
  tcase_add_test(tc, test_devices_dpo_lora);
  tcase_add_test(tc, test_devices_dpo_full);
  tcase_add_test(tc, test_devices_orpo_accum);
  tcase_add_test(tc, test_devices_dpo_bf16);
  tcase_add_test(tc, test_config_refused);
  tcase_add_test(tc, test_remat_same_bits);
  tcase_add_test(tc, test_plan_equals_measured);
  tcase_add_test(tc, test_sweep_columns);
  tcase_add_test(tc, test_tensorboard_tags);
  return s;
}

int main(void) { return gt_test_run_suite(pref_suite(), 0); }
