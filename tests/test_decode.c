/* Decoding: the KV cache, prefill and one-token steps against the full
 * forward pass; the decode attention kernel against its scalar reference and
 * the training attention; sampling on hand-made distributions; cache memory
 * against its formula; decoding parameters saved by gt_ctx_save.
 *
 * The reference for every logit is the training forward (gt_exec_forward_
 * logits) over the whole token sequence, which test_model and test_reference
 * hold to finite differences and an independent PyTorch implementation. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "decode/decode.h"
#include "exec/exec.h"
#include "gemtrain/gemtrain.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "ckpt/paramfile.h"
#include "gt_testutil.h"

typedef struct fixture {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
} fixture;

/* A model with random weights (norm weights too, so (1 + w) matters). */
static void setup(fixture *f, int n, const char *const *ov, uint64_t seed) {
  gt_test_model_random(&f->m, &f->cfg, &f->mem, n, ov, seed, 0);
}

static void teardown(fixture *f) {
  gt_model_free(&f->m);
  ck_assert_int_eq(gt_mem_total_cur(&f->mem), 0); /* nothing left in the tracker */
}

static int32_t *random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
  gt_test_fill_ids(ids, n, &seed, 4, vocab); /* ids >= 4 and != eos: plain tokens */
  return ids;
}

/* Full-forward logits [n, V] of ids. */
static float *full_logits(gt_model *m, const int32_t *ids, int64_t n) {
  int32_t *tg = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) tg[i] = -1, pos[i] = (int32_t)i;
  float *lg = malloc(sizeof(float) * (size_t)(n * m->vocab));
  gt_batch b = {1, (int)n, ids, tg, pos, NULL};
  gt_err e;
  ck_assert_msg(gt_exec_forward_logits(m, &b, lg, &e) == GT_OK, "%s", e.msg);
  free(tg);
  free(pos);
  return lg;
}

/* max |a - b| over the row, relative to the row's largest |b|. */
static double row_rel_err(const float *a, const float *b, int64_t V) {
  double scale = 0.0;
  for (int64_t v = 0; v < V; v++) scale = fmax(scale, fabs((double)b[v]));
  return gt_test_max_abs_err(a, b, V) / scale;
}

/* Prefill n_prompt tokens, then step through the rest of ids; every row of
 * logits must match the full forward over all n tokens. */
static void check_cached_equals_full(gt_model *m, int64_t n, int64_t n_prompt, int64_t max_len, uint64_t seed) {
  int32_t *ids = random_ids(n, m->vocab, seed);
  float *ref = full_logits(m, ids, n);
  float *got = malloc(sizeof(float) * (size_t)m->vocab);
  gt_decoder d;
  gt_err e;
  ck_assert_msg(gt_decoder_init(&d, m, max_len, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_decoder_prefill(&d, ids, n_prompt, got, &e) == GT_OK, "%s", e.msg);
  double worst = row_rel_err(got, ref + (n_prompt - 1) * m->vocab, m->vocab);
  for (int64_t t = n_prompt; t < n; t++) {
    ck_assert_msg(gt_decoder_step(&d, ids[t], got, &e) == GT_OK, "%s", e.msg);
    double r = row_rel_err(got, ref + t * m->vocab, m->vocab);
    ck_assert_msg(r < 1e-5, "position %lld (prompt %lld): relative error %.3g", (long long)t, (long long)n_prompt, r);
    worst = fmax(worst, r);
  }
  ck_assert_msg(worst < 1e-5, "prefill row: relative error %.3g", worst);
  ck_assert_int_eq(d.cache.len, n);
  /* one more position than the cache holds is refused */
  if (max_len == n) {
    ck_assert_int_eq(gt_decoder_step(&d, ids[0], got, &e), GT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "exceed the cache"));
  }
  gt_decoder_free(&d);
  free(ids);
  free(ref);
  free(got);
}

/* gemma3-tiny: W = 16, layers LLLLLG. The prompt (23) is longer than the
 * window and the steps wrap the local rings three times (to 64). */
START_TEST(test_cached_equals_full_tiny) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=64"};
  setup(&f, 2, ov, 1);
  ck_assert_int_eq(f.m.layers[0].window, 16);
  ck_assert_int_eq(f.m.layers[5].window, 0);
  check_cached_equals_full(&f.m, 64, 23, 64, 11);
  /* prefill of a single token, every other position a step */
  check_cached_equals_full(&f.m, 40, 1, 40, 12);
  /* a prompt of exactly the window, a cache larger than needed */
  check_cached_equals_full(&f.m, 30, 16, 64, 13);
  teardown(&f);
}
END_TEST

/* Several local layers (window 5) around two globals, GQA 4:1, a soft-cap,
 * a head dim unlike the hidden size. */
START_TEST(test_cached_equals_full_mixed) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny", "base_num_decoder_layers=7", "layer_pattern=LLLG",
                      "sliding_window_size=5", "base_num_kv_heads=1", "head_dim=24", "final_logits_soft_cap=30",
                      "max_target_length=48"};
  setup(&f, 8, ov, 2);
  int n_global = 0;
  for (int l = 0; l < 7; l++) n_global += f.m.layers[l].window == 0;
  ck_assert_int_eq(n_global, 1);
  check_cached_equals_full(&f.m, 48, 9, 48, 21);
  check_cached_equals_full(&f.m, 20, 1, 20, 22);
  check_cached_equals_full(&f.m, 12, 12, 12, 23); /* prefill only, prompt > window */
  teardown(&f);
}
END_TEST

/* Gemma 4: K=V global layers with their own head dim and partial RoPE,
 * v-norm, layer scalars (gemma4-tiny-dense); PLE, KV-shared layers reading
 * their donors' caches and double-wide MLPs (gemma4-tiny-ple: layers 6-9
 * share the K/V of layers 4 and 5); routed experts and the shared expert
 * (gemma4-tiny-moe: the routed op runs on one token at a time). Prompts
 * longer than the window, steps that wrap the donors' rings. */
START_TEST(test_cached_equals_full_gemma4) {
  const char *presets[] = {"model_name=gemma4-tiny-dense", "model_name=gemma4-tiny-ple", "model_name=gemma4-tiny-moe"};
  for (int i = 0; i < 3; i++) {
    fixture f;
    const char *ov[] = {presets[i], "max_target_length=64"};
    setup(&f, 2, ov, 30 + (uint64_t)i);
    int shared = 0;
    for (int64_t l = 0; l < f.m.n_layers; l++) shared += f.m.layers[l].kv_donor >= 0;
    ck_assert_int_eq(shared, i == 1 ? 4 : 0);
    ck_assert_int_eq(f.m.ple_dim > 0, i == 1);
    check_cached_equals_full(&f.m, 64, 21, 64, 31);
    check_cached_equals_full(&f.m, 24, 1, 24, 32);
    teardown(&f);
  }
}
END_TEST

/* A context longer than max_target_length: the decoder's own RoPE tables
 * continue the model's; the reference is a model with a longer
 * max_target_length and the same weights. */
START_TEST(test_context_beyond_max_target_length) {
  fixture shortm, longm;
  const char *ov_s[] = {"model_name=gemma3-tiny", "max_target_length=24"};
  const char *ov_l[] = {"model_name=gemma3-tiny", "max_target_length=50"};
  setup(&shortm, 2, ov_s, 3);
  setup(&longm, 2, ov_l, 3);
  ck_assert_int_eq(shortm.m.n_params, longm.m.n_params);
  ck_assert_mem_eq(shortm.m.params, longm.m.params, (size_t)shortm.m.n_params * sizeof(float));
  int32_t *ids = random_ids(50, shortm.m.vocab, 31);
  float *ref = full_logits(&longm.m, ids, 50);
  float *got = malloc(sizeof(float) * (size_t)shortm.m.vocab);
  gt_decoder d;
  gt_err e;
  ck_assert_msg(gt_decoder_init(&d, &shortm.m, 50, &e) == GT_OK, "%s", e.msg);
  ck_assert_ptr_nonnull(d.rope_cos[0]); /* tables of its own */
  ck_assert_msg(gt_decoder_prefill(&d, ids, 20, got, &e) == GT_OK, "%s", e.msg);
  ck_assert_double_lt(row_rel_err(got, ref + 19 * shortm.m.vocab, shortm.m.vocab), 1e-5);
  for (int t = 20; t < 50; t++) {
    ck_assert_msg(gt_decoder_step(&d, ids[t], got, &e) == GT_OK, "%s", e.msg);
    ck_assert_double_lt(row_rel_err(got, ref + (int64_t)t * shortm.m.vocab, shortm.m.vocab), 1e-5);
  }
  gt_decoder_free(&d);
  free(ids);
  free(ref);
  free(got);
  teardown(&shortm);
  teardown(&longm);
}
END_TEST

/* ---- the decode attention kernel ---- */

static void check_decode_kernel(int H, int K, int hd, int64_t cap, int64_t start, int64_t n, uint64_t seed) {
  uint64_t s = seed;
  float *q = gt_test_alloc_fill((int64_t)H * hd, &s, -1.5f, 1.5f);
  float *kc = gt_test_alloc_fill(cap * K * hd, &s, -1.5f, 1.5f);
  float *vc = gt_test_alloc_fill(cap * K * hd, &s, -1.0f, 1.0f);
  float *o = malloc(sizeof(float) * (size_t)(H * hd)), *o_ref = malloc(sizeof(float) * (size_t)(H * hd));
  gt_attn_cache_dims d = {H, K, hd, cap, start, n, 0.35f};
  gt_attention_decode(o, q, kc, vc, &d);
  gt_attention_decode_ref(o_ref, q, kc, vc, &d);
  /* float dot products against double ones: relative to the largest output */
  double r = row_rel_err(o, o_ref, (int64_t)H * hd);
  ck_assert_msg(r < 1e-5, "H%d K%d hd%d cap %lld start %lld n %lld: %.3g", H, K, hd, (long long)cap,
                (long long)start, (long long)n, r);
  free(q), free(kc), free(vc), free(o), free(o_ref);
}

START_TEST(test_decode_kernel_vs_ref) {
  check_decode_kernel(4, 2, 16, 16, 0, 1, 1);      /* the first position */
  check_decode_kernel(4, 2, 16, 16, 5, 16, 2);     /* a full ring that wraps */
  check_decode_kernel(8, 1, 24, 200, 0, 200, 3);   /* several key blocks, one kv head */
  check_decode_kernel(6, 3, 8, 130, 100, 129, 4);  /* wrap inside a block, uneven block */
  check_decode_kernel(2, 2, 64, 65, 64, 65, 5);    /* start at the last row */
  check_decode_kernel(32, 8, 128, 700, 3, 650, 6); /* large enough for the threaded path */
}
END_TEST

/* The kernel over a ring equals the training attention's last query row
 * over the unrolled sequence (keys within the window). */
START_TEST(test_decode_kernel_vs_training_attention) {
  const int H = 4, K = 2, hd = 8, T = 23, W = 7;
  uint64_t s = 9;
  float *q = gt_test_alloc_fill((int64_t)T * H * hd, &s, -1, 1);
  float *k = gt_test_alloc_fill((int64_t)T * K * hd, &s, -1, 1);
  float *v = gt_test_alloc_fill((int64_t)T * K * hd, &s, -1, 1);
  float *out = malloc(sizeof(float) * T * H * hd), *lse = malloc(sizeof(float) * H * T);
  gt_attn_dims ad = {1, T, H, K, hd, W, 0.5f, 0, 0, NULL};
  gt_attention_forward_ref(out, lse, q, k, v, NULL, &ad);
  /* a ring of W rows holding positions T-W .. T-1 at row p % W */
  float *kc = malloc(sizeof(float) * W * K * hd), *vc = malloc(sizeof(float) * W * K * hd);
  for (int p = T - W; p < T; p++) {
    memcpy(kc + (p % W) * K * hd, k + p * K * hd, sizeof(float) * K * hd);
    memcpy(vc + (p % W) * K * hd, v + p * K * hd, sizeof(float) * K * hd);
  }
  float *o = malloc(sizeof(float) * H * hd);
  gt_attn_cache_dims d = {H, K, hd, W, (T - W) % W, W, 0.5f};
  gt_attention_decode(o, q + (T - 1) * H * hd, kc, vc, &d);
  ck_assert_double_lt(row_rel_err(o, out + (T - 1) * H * hd, H * hd), 1e-5);
  free(q), free(k), free(v), free(out), free(lse), free(kc), free(vc), free(o);
}
END_TEST

/* ---- cache memory ---- */

START_TEST(test_cache_memory_formula) {
  fixture f;
  /* 7 layers LLLG LLL: 6 local (W = 5), 1 global; K = 1, hd = 24 */
  const char *ov[] = {"model_name=gemma3-tiny", "base_num_decoder_layers=7", "layer_pattern=LLLG",
                      "sliding_window_size=5", "base_num_kv_heads=1", "head_dim=24"};
  setup(&f, 6, ov, 4);
  const int64_t row = 1 * 24 * 4; /* bytes of one position's k (or v) */
  const int64_t lens[] = {1, 3, 5, 6, 100};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    int64_t T = lens[i], w = T < 5 ? T : 5;
    int64_t want = 6 * 2 * w * row + 1 * 2 * T * row;
    gt_kv_cache c;
    gt_err e;
    int64_t before = gt_mem_cur(&f.mem, GT_MEM_KVCACHE);
    ck_assert_int_eq(before, 0);
    ck_assert_msg(gt_kv_cache_init(&c, &f.m, T, &f.mem, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(gt_kv_cache_bytes(&f.m, T), want);
    ck_assert_int_eq(gt_mem_cur(&f.mem, GT_MEM_KVCACHE), want);
    for (int l = 0; l < 7; l++) ck_assert_int_eq(c.layers[l].cap, l == 3 ? T : w);
    gt_kv_cache_free(&c);
    ck_assert_int_eq(gt_mem_cur(&f.mem, GT_MEM_KVCACHE), 0);
  }
  /* the decoder allocates exactly one cache */
  gt_decoder d;
  gt_err e;
  ck_assert(gt_decoder_init(&d, &f.m, 40, &e) == GT_OK);
  ck_assert_int_eq(gt_mem_cur(&f.mem, GT_MEM_KVCACHE), 6 * 2 * 5 * row + 2 * 40 * row);
  gt_decoder_free(&d);
  teardown(&f);
}
END_TEST

START_TEST(test_visible_window) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny", "sliding_window_size=4"};
  setup(&f, 2, ov, 5);
  gt_kv_cache c;
  gt_err e;
  ck_assert(gt_kv_cache_init(&c, &f.m, 10, &f.mem, &e) == GT_OK);
  int64_t start, n;
  gt_kv_visible(&c, 0, 0, &start, &n); /* local, first position */
  ck_assert(start == 0 && n == 1);
  gt_kv_visible(&c, 0, 3, &start, &n); /* positions 0..3 */
  ck_assert(start == 0 && n == 4);
  gt_kv_visible(&c, 0, 9, &start, &n); /* positions 6..9: rows 2, 3, 0, 1 */
  ck_assert(start == 2 && n == 4);
  gt_kv_visible(&c, 5, 9, &start, &n); /* global: positions 0..9 */
  ck_assert(start == 0 && n == 10);
  gt_kv_cache_free(&c);
  teardown(&f);
}
END_TEST

/* ---- sampling ---- */

/* probabilities 0.05, 0.5, 0.1, 0.2, 0.15 at ids 0..4 */
static const double hand_p[5] = {0.05, 0.5, 0.1, 0.2, 0.15};

static void hand_logits(float *l, double shift) {
  for (int i = 0; i < 5; i++) l[i] = (float)(log(hand_p[i]) + shift);
}

START_TEST(test_nucleus_set) {
  float l[5];
  int32_t ids[5];
  hand_logits(l, 3.0); /* softmax is shift-invariant */
  /* falling order: 1 (0.5), 3 (0.2), 4 (0.15), 2 (0.1), 0 (0.05); running sums .5 .7 .85 .95 1 */
  const double ps[] = {0.3, 0.5 - 1e-6, 0.6, 0.8, 0.9, 0.99, 1.0};
  const int64_t want[] = {1, 1, 2, 3, 4, 5, 5};
  for (int i = 0; i < 7; i++) {
    int64_t n = gt_sample_nucleus_set(l, 5, ps[i], ids);
    ck_assert_msg(n == want[i], "p=%g: kept %lld, want %lld", ps[i], (long long)n, (long long)want[i]);
  }
  ck_assert_int_eq(gt_sample_nucleus_set(l, 5, 0.9, ids), 4);
  ck_assert(ids[0] == 1 && ids[1] == 3 && ids[2] == 4 && ids[3] == 2);
  /* a tie at the cut keeps both tied tokens, the lower id first */
  float t[4] = {0.0f, 2.0f, 2.0f, -1.0f};
  ck_assert_int_eq(gt_sample_nucleus_set(t, 4, 0.3, ids), 2);
  ck_assert(ids[0] == 1 && ids[1] == 2);
}
END_TEST

START_TEST(test_topk_set_and_argmax) {
  float l[5];
  int32_t ids[5];
  hand_logits(l, 0.0);
  ck_assert_int_eq(gt_sample_topk_set(l, 5, 3, ids), 3);
  ck_assert(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
  ck_assert_int_eq(gt_sample_topk_set(l, 5, 9, ids), 5);
  ck_assert_int_eq(gt_sample_argmax(l, 5), 1);
  float t[3] = {1.0f, 3.0f, 3.0f};
  ck_assert_int_eq(gt_sample_argmax(t, 3), 1); /* ties: the lowest id */
}
END_TEST

/* Frequencies of 40000 seeded draws against the renormalised probabilities
 * of the candidate set (tempered). The draws are deterministic, so this
 * cannot flake; 0.01 is about 4 standard errors. */
static void check_frequencies(gt_sample_strategy st, double temp, int64_t k, double p, const double *want) {
  float l[5];
  hand_logits(l, -1.0);
  gt_sampler s;
  gt_err e;
  ck_assert_msg(gt_sampler_init(&s, st, temp, k, p, 12345, 5, &e) == GT_OK, "%s", e.msg);
  int cnt[5] = {0};
  const int N = 40000;
  for (int i = 0; i < N; i++) cnt[gt_sampler_next(&s, l)]++;
  for (int i = 0; i < 5; i++) {
    if (want[i] == 0.0)
      ck_assert_msg(cnt[i] == 0, "strategy %d: id %d drawn %d times, outside the candidates", st, i, cnt[i]);
    else
      ck_assert_msg(fabs(cnt[i] / (double)N - want[i]) < 0.01, "strategy %d: id %d frequency %.4f, want %.4f", st, i,
                    cnt[i] / (double)N, want[i]);
  }
  gt_sampler_free(&s);
}

START_TEST(test_sampling_frequencies) {
  /* weighted at temperature 1: the probabilities themselves */
  check_frequencies(GT_SAMPLE_WEIGHTED, 1.0, 0, -1, hand_p);
  /* weighted at temperature 0.5: p^2 renormalised */
  double z = 0, w2[5];
  for (int i = 0; i < 5; i++) z += hand_p[i] * hand_p[i];
  for (int i = 0; i < 5; i++) w2[i] = hand_p[i] * hand_p[i] / z;
  check_frequencies(GT_SAMPLE_WEIGHTED, 0.5, 0, -1, w2);
  /* top-2: ids 1 and 3, as 0.5 : 0.2 */
  const double top2[5] = {0, 0.5 / 0.7, 0, 0.2 / 0.7, 0};
  check_frequencies(GT_SAMPLE_TOPK, 1.0, 2, -1, top2);
  /* nucleus p = 0.8: ids 1, 3, 4 (running sum 0.85) */
  const double nuc[5] = {0, 0.5 / 0.85, 0, 0.2 / 0.85, 0.15 / 0.85};
  check_frequencies(GT_SAMPLE_NUCLEUS, 1.0, 0, 0.8, nuc);
  /* temperature 1e-3: the others have weight (p_i / 0.5)^1000, below 1e-300 */
  const double only1[5] = {0, 1, 0, 0, 0};
  check_frequencies(GT_SAMPLE_WEIGHTED, 1e-3, 0, -1, only1);
  check_frequencies(GT_SAMPLE_WEIGHTED, 0.0, 0, -1, only1);
  check_frequencies(GT_SAMPLE_NUCLEUS, 0.0, 0, 0.95, only1);
}
END_TEST

START_TEST(test_sampler_refusals) {
  gt_sampler s;
  gt_err e;
  ck_assert_int_eq(gt_sampler_init(&s, GT_SAMPLE_TOPK, 1.0, 0, -1, 0, 260, &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "decode_sampling_top_k = 0"));
  ck_assert_int_eq(gt_sampler_init(&s, GT_SAMPLE_NUCLEUS, 1.0, 0, -1, 0, 260, &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "decode_sampling_nucleus_p = -1"));
  ck_assert_int_eq(gt_sampler_init(&s, GT_SAMPLE_WEIGHTED, -0.5, 0, -1, 0, 260, &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "decode_sampling_temperature"));
  /* from the config keys */
  gt_config c;
  const char *ov[] = {"decode_sampling_strategy=topk", "decode_sampling_top_k=3"};
  gt_test_config(&c, 2, ov);
  ck_assert_msg(gt_sampler_from_config(&s, &c, 260, &e) == GT_OK, "%s", e.msg);
  ck_assert(s.strategy == GT_SAMPLE_TOPK && s.top_k == 3 && s.temperature == 1.0);
  gt_sampler_free(&s);
}
END_TEST

/* ---- generation on a model ---- */

static void generate(gt_model *m, gt_sample_strategy st, double temp, int64_t k, double p, uint64_t seed,
                     const int32_t *prompt, int64_t np, int64_t max_new, int32_t *out, float *lg, gt_decode_stats *ds) {
  gt_decoder d;
  gt_sampler s;
  gt_err e;
  ck_assert_msg(gt_decoder_init(&d, m, np + max_new, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_sampler_init(&s, st, temp, k, p, seed, m->vocab, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_decode_generate(&d, &s, prompt, np, max_new, out, lg, ds, &e) == GT_OK, "%s", e.msg);
  gt_sampler_free(&s);
  gt_decoder_free(&d);
}

START_TEST(test_greedy_matches_full_forward) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny", "max_target_length=64"};
  setup(&f, 2, ov, 6);
  const int64_t np = 20, nn = 40;
  int32_t *ids = random_ids(np + nn, f.m.vocab, 61);
  int32_t a[40], b[40];
  gt_decode_stats sa, sb;
  generate(&f.m, GT_SAMPLE_GREEDY, 1.0, 0, -1, 0, ids, np, nn, a, NULL, &sa);
  generate(&f.m, GT_SAMPLE_GREEDY, 1.0, 0, -1, 99, ids, np, nn, b, NULL, &sb);
  ck_assert_int_eq(sa.n_new, sb.n_new);
  ck_assert_mem_eq(a, b, sizeof(int32_t) * (size_t)sa.n_new);
  ck_assert_int_eq(sa.n_prompt, np);
  /* each new token is the argmax of the full forward's logits there */
  memcpy(ids + np, a, sizeof(int32_t) * (size_t)sa.n_new);
  int64_t n = np + sa.n_new;
  float *ref = full_logits(&f.m, ids, n);
  for (int64_t t = 0; t < sa.n_new; t++)
    ck_assert_int_eq(a[t], gt_sample_argmax(ref + (np - 1 + t) * f.m.vocab, f.m.vocab));
  ck_assert(sa.stopped_at_eos == (a[sa.n_new - 1] == GT_DECODE_EOS));
  /* temperature 0 and top-k = 1 give the greedy tokens for any seed */
  int32_t c[40];
  gt_decode_stats sc;
  generate(&f.m, GT_SAMPLE_NUCLEUS, 0.0, 0, 0.9, 5, ids, np, nn, c, NULL, &sc);
  ck_assert_int_eq(sc.n_new, sa.n_new);
  ck_assert_mem_eq(c, a, sizeof(int32_t) * (size_t)sa.n_new);
  generate(&f.m, GT_SAMPLE_TOPK, 1.0, 1, -1, 7, ids, np, nn, c, NULL, &sc);
  ck_assert_int_eq(sc.n_new, sa.n_new);
  ck_assert_mem_eq(c, a, sizeof(int32_t) * (size_t)sa.n_new);
  free(ref);
  free(ids);
  teardown(&f);
}
END_TEST

START_TEST(test_seeded_sampling_reproducible) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny"};
  setup(&f, 1, ov, 7);
  int32_t *prompt = random_ids(10, f.m.vocab, 71);
  const gt_sample_strategy st[3] = {GT_SAMPLE_WEIGHTED, GT_SAMPLE_TOPK, GT_SAMPLE_NUCLEUS};
  for (int i = 0; i < 3; i++) {
    int32_t a[30], b[30], c[30];
    float *la = malloc(sizeof(float) * 30 * (size_t)f.m.vocab);
    gt_decode_stats sa, sb, sc;
    generate(&f.m, st[i], 1.5, 20, 0.95, 42, prompt, 10, 30, a, la, &sa);
    generate(&f.m, st[i], 1.5, 20, 0.95, 42, prompt, 10, 30, b, NULL, &sb);
    generate(&f.m, st[i], 1.5, 20, 0.95, 43, prompt, 10, 30, c, NULL, &sc);
    ck_assert_int_eq(sa.n_new, sb.n_new);
    ck_assert_mem_eq(a, b, sizeof(int32_t) * (size_t)sa.n_new);
    /* another seed gives another sequence (over 260 tokens at temperature 1.5) */
    int64_t m = sa.n_new < sc.n_new ? sa.n_new : sc.n_new;
    ck_assert_msg(m < 5 || memcmp(a, c, sizeof(int32_t) * (size_t)m) != 0, "strategy %d: seeds 42 and 43 agree", i);
    /* every sampled token lies in its step's candidate set */
    int32_t *set = malloc(sizeof(int32_t) * (size_t)f.m.vocab);
    for (int64_t t = 0; t < sa.n_new; t++) {
      const float *row = la + t * f.m.vocab;
      int64_t n = st[i] == GT_SAMPLE_TOPK ? gt_sample_topk_set(row, f.m.vocab, 20, set)
                  : st[i] == GT_SAMPLE_NUCLEUS ? gt_sample_nucleus_set(row, f.m.vocab, 0.95, set)
                                               : f.m.vocab;
      int found = st[i] == GT_SAMPLE_WEIGHTED;
      for (int64_t j = 0; j < n && !found; j++) found = set[j] == a[t];
      ck_assert_msg(found, "strategy %d step %lld: token %d outside the candidates", i, (long long)t, a[t]);
    }
    free(set);
    free(la);
  }
  free(prompt);
  teardown(&f);
}
END_TEST

/* Generation stops after <eos>: make the eos row of the tied embedding twice
 * the row greedy picks first, so eos has twice its (positive) logit. */
START_TEST(test_stops_at_eos) {
  fixture f;
  const char *ov[] = {"model_name=gemma3-tiny"};
  setup(&f, 1, ov, 8);
  int32_t *prompt = random_ids(6, f.m.vocab, 81);
  int32_t a[8];
  gt_decode_stats st;
  float *lg = malloc(sizeof(float) * 8 * (size_t)f.m.vocab);
  generate(&f.m, GT_SAMPLE_GREEDY, 1, 0, -1, 0, prompt, 6, 8, a, lg, &st);
  ck_assert_int_eq(st.n_new, 8);
  ck_assert_int_ne(a[0], GT_DECODE_EOS);
  ck_assert_float_gt(lg[a[0]], 0.0f);
  float *E = f.m.params + f.m.embed_offset;
  for (int64_t c = 0; c < f.m.d; c++) E[GT_DECODE_EOS * f.m.d + c] = 2.0f * E[a[0] * f.m.d + c];
  generate(&f.m, GT_SAMPLE_GREEDY, 1, 0, -1, 0, prompt, 6, 8, a, NULL, &st);
  ck_assert_int_eq(st.n_new, 1);
  ck_assert_int_eq(a[0], GT_DECODE_EOS);
  ck_assert_int_eq(st.stopped_at_eos, 1);
  free(lg);
  free(prompt);
  teardown(&f);
}
END_TEST

/* ---- loading ---- */

/* A file written by the library's gt_ctx_save (parameters and optimizer
 * moments) decodes to the logits of the context that saved it. */
START_TEST(test_load_ctx_save_file) {
  char *dir = gt_test_mkdtemp("dec");
  char path[512];
  snprintf(path, sizeof path, "%s/ctx.safetensors", dir);
  gt_ctx *ctx = gt_ctx_new();
  const char *ov[] = {"dataset_type=synthetic", "max_target_length=16", "per_device_batch_size=2"};
  ck_assert_msg(gt_ctx_configure(ctx, "gemma3-tiny", 3, ov) == GT_OK, "%s", gt_ctx_error(ctx));
  ck_assert_msg(gt_ctx_init(ctx) == GT_OK, "%s", gt_ctx_error(ctx));
  ck_assert_msg(gt_ctx_train(ctx, 2, NULL) == GT_OK, "%s", gt_ctx_error(ctx));
  ck_assert_msg(gt_ctx_save(ctx, path) == GT_OK, "%s", gt_ctx_error(ctx));
  int32_t *ids = random_ids(12, 260, 91);
  float *ref = malloc(sizeof(float) * 12 * 260);
  ck_assert_msg(gt_ctx_forward_logits(ctx, ids, 1, 12, ref) == GT_OK, "%s", gt_ctx_error(ctx));
  /* the file describes its own model (paramfile.h), as gemtrain decode loads it */
  gt_config c;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_err e;
  ck_assert_msg(gt_paramfile_read_config(path, &c, &e) == GT_OK, "%s", e.msg);
  gt_test_model_build(&m, &c);
  ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_paramfile_read(path, &m, NULL, NULL, NULL, &e) == GT_OK, "%s", e.msg);
  gt_decoder d;
  float got[260];
  ck_assert(gt_decoder_init(&d, &m, 12, &e) == GT_OK);
  ck_assert(gt_decoder_prefill(&d, ids, 4, got, &e) == GT_OK);
  ck_assert_double_lt(row_rel_err(got, ref + 3 * 260, 260), 1e-5);
  for (int t = 4; t < 12; t++) {
    ck_assert(gt_decoder_step(&d, ids[t], got, &e) == GT_OK);
    ck_assert_double_lt(row_rel_err(got, ref + t * 260, 260), 1e-5);
  }
  gt_decoder_free(&d);
  gt_model_free(&m);
  ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
  gt_ctx_free(ctx);
  free(ids);
  free(ref);
  gt_test_rm_rf(dir);
  free(dir);
}
END_TEST

static Suite *decode_suite(void) {
  Suite *s = suite_create("decode");
  TCase *tc = gt_test_tcase(s, "decode");
  tcase_add_test(tc, test_cached_equals_full_tiny);
  tcase_add_test(tc, test_cached_equals_full_mixed);
  tcase_add_test(tc, test_cached_equals_full_gemma4);
  tcase_add_test(tc, test_context_beyond_max_target_length);
  tcase_add_test(tc, test_decode_kernel_vs_ref);
  tcase_add_test(tc, test_decode_kernel_vs_training_attention);
  tcase_add_test(tc, test_cache_memory_formula);
  tcase_add_test(tc, test_visible_window);
  tcase_add_test(tc, test_nucleus_set);
  tcase_add_test(tc, test_topk_set_and_argmax);
  tcase_add_test(tc, test_sampling_frequencies);
  tcase_add_test(tc, test_sampler_refusals);
  tcase_add_test(tc, test_greedy_matches_full_forward);
  tcase_add_test(tc, test_seeded_sampling_reproducible);
  tcase_add_test(tc, test_stops_at_eos);
  tcase_add_test(tc, test_load_ctx_save_file);
  return s;
}

int main(void) { return gt_test_run_suite(decode_suite(), 0); }
