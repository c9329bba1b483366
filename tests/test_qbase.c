/* A frozen base stored as lora_weight_qtype (src/model/qstore.h): the
 * stored tensors are gt_quantize of the float32 base's, tensor by tensor
 * (random init drawn and quantized a chunk of rows at a time); a model
 * over a quantized base trains exactly as a float32 model whose frozen
 * weights are the dequantized values (the same losses and the same updated
 * trainable tensors, bit for bit: kernels/quant.h's products equal gt_sgemm
 * / gt_bgemm on the dequantized matrix, and the lookups dequantize the same
 * values); 2 devices agree with 1; dtype=bfloat16 leaves the quantized words
 * untouched; the plan equals the measured peak for every qtype, the frozen
 * base in its own category at its stored size. The frozen subset comes from
 * trainable_parameters_mask (the adapters freeze the same way). */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "decode/decode.h"
#include "exec/exec.h"
#include "ckpt/safetensors.h"
#include "exec/plan.h"
#include "hf/hf.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "mesh/fsdp.h"
#include "model/model.h"
#include "model/qstore.h"
#include "train/plan.h"
#include "train/trainer.h"
#include "gt_testutil.h"

static const char *const g_qtypes[] = {"bfloat16", "int8", "nf4"};
static const char *g_dtype = "dtype=float32";
static const char *g_lora = "enable_lora=false"; /* adapters (lora_rank 4 by the next cfg_of) */
static const char *g_embed = "lora_embedding_qtype=auto";

static void cfg_of(gt_config *c, const char *model, const char *mask, const char *qtype, int devices) {
  char mn[96], mk[256], nd[64], pd[64], qt[64];
  snprintf(mn, sizeof mn, "model_name=%s", model);
  snprintf(mk, sizeof mk, "trainable_parameters_mask=%s", mask);
  snprintf(nd, sizeof nd, "num_devices=%d", devices);
  snprintf(pd, sizeof pd, "per_device_batch_size=%d", 4 / devices);
  snprintf(qt, sizeof qt, "lora_weight_qtype=%s", qtype);
  const char *ov[] = {mn, mk, nd, pd, qt, "dataset_type=synthetic", "max_target_length=16", "learning_rate=0.01",
                      g_dtype, g_lora, "lora_rank=4", g_embed};
  gt_err e;
  ck_assert_msg(gt_config_load(c, GT_SOURCE_DIR "/configs", NULL, 12, ov, &e) == GT_OK, "%s", e.msg);
}

/* The lookup tables: the tied embedding (also the output head) and the PLE
 * table, which Hugging Face's bitsandbytes QLoRA leaves unquantized. */
static int is_table(const char *name) {
  return !strcmp(name, "embed_tokens.weight") || !strcmp(name, "embed_tokens_per_layer.weight");
}

START_TEST(test_decision_and_layout) {
  gt_config c;
  gt_err e;
  gt_model f, q;
  cfg_of(&c, "gemma4-tiny-ple", "norm", "float32", 1);
  ck_assert(gt_model_build(&f, &c, &e) == GT_OK);
  cfg_of(&c, "gemma4-tiny-ple", "norm", "nf4", 1);
  ck_assert_msg(gt_model_build(&q, &c, &e) == GT_OK, "%s", e.msg);
  int nq = 0, nt = 0;
  int64_t words = 0;
  for (int i = 0; i < q.n_tensors; i++) {
    const gt_tensor_info *t = &q.tensors[i];
    /* every frozen matrix, nothing else: the projections (the PLE
     * projection among them) as nf4, the lookup tables as bfloat16 */
    int want = t->role == GT_ROLE_FROZEN && t->ndim == 2, table = want && is_table(t->name);
    gt_store_dtype dt = !want ? GT_STORE_F32 : table ? GT_STORE_BF16 : GT_STORE_NF4;
    ck_assert_msg(t->dtype == dt, "%s is stored as %s", t->name, gt_store_dtype_name(t->dtype));
    ck_assert_int_eq(t->words, want ? gt_q_words((gt_qtype)dt, t->shape[0], t->numel / t->shape[0]) : t->numel);
    ck_assert_int_eq(f.tensors[i].words, f.tensors[i].numel);
    nq += want && !table, nt += table;
    words += t->words;
  }
  ck_assert_int_gt(nq, 0);
  ck_assert_int_eq(nt, 2);
  ck_assert_int_eq(q.n_params, words); /* units follow one another, no gaps */
  ck_assert_int_lt(q.n_params, f.n_params);
  ck_assert(q.embed_qtype == GT_STORE_BF16 && q.ple_embed_qtype == GT_STORE_BF16 && q.ple_proj_qtype == GT_STORE_NF4);
  ck_assert(q.layers[0].qtype[GT_P_WQ] == GT_STORE_NF4 && q.layers[0].qtype[GT_P_PLE_GATE] == GT_STORE_NF4);
  ck_assert(q.layers[0].qtype[GT_P_INPUT_NORM] == GT_STORE_F32);
  /* the base's storage is the projections' (the table comes first in the
   * layout and does not count); the tables' is apart */
  ck_assert(gt_qstore_dtype(&q) == GT_STORE_NF4 && gt_qstore_embed_dtype(&q) == GT_STORE_BF16);
  ck_assert_str_eq(gt_qstore_name(&q), "nf4");
  ck_assert_str_eq(gt_qstore_embed_name(&q), "bfloat16");
  ck_assert_str_eq(gt_qstore_describe(&q), "nf4, embedding bfloat16");
  ck_assert_str_eq(gt_qstore_describe(&f), "float32");
  for (int64_t u = 0; u < gt_model_n_units(&q); u++) {
    int64_t off, cnt;
    gt_model_unit(&q, u, &off, &cnt);
    for (int i = 0; i < q.n_tensors; i++)
      if (q.tensors[i].layer == (int)u - 1)
        ck_assert(q.tensors[i].offset >= off && q.tensors[i].offset + q.tensors[i].words <= off + cnt);
  }
  ck_assert_int_eq(gt_model_count_params(&c), f.n_params); /* elements, not words */
  gt_model_free(&f);
  gt_model_free(&q);
  /* MoE: the router and the experts stay float32 */
  cfg_of(&c, "gemma4-tiny-moe", "norm", "int8", 1);
  ck_assert(gt_model_build(&q, &c, &e) == GT_OK);
  for (int i = 0; i < q.n_tensors; i++)
    if (strstr(q.tensors[i].name, "router") || strstr(q.tensors[i].name, "experts"))
      ck_assert_msg(q.tensors[i].dtype == GT_STORE_F32, "%s", q.tensors[i].name);
  gt_model_free(&q);
}
END_TEST

/* A norm-masked model twice from one seed: f all float32, q with its frozen
 * base stored as qtype (c is q's config), both allocated in mem. */
static void float_and_stored(gt_config *c, const char *model, const char *qtype, gt_model *f, gt_model *q,
                             gt_mem *mem) {
  gt_err e;
  gt_mem_init(mem);
  cfg_of(c, model, "norm", "float32", 1);
  ck_assert(gt_model_build(f, c, &e) == GT_OK && gt_model_alloc_inference(f, mem, &e) == GT_OK);
  cfg_of(c, model, "norm", qtype, 1);
  ck_assert(gt_model_build(q, c, &e) == GT_OK && gt_model_alloc_inference(q, mem, &e) == GT_OK);
  gt_model_init_params(f, 11, 1.0);
  gt_model_init_params(q, 11, 1.0);
}

/* The stored base equals gt_quantize of the float32 base, tensor by tensor. */
START_TEST(test_stored_equals_quantized_float_base) {
  const char *models[] = {"gemma3-tiny", "gemma4-tiny-ple"};
  for (int mi = 0; mi < 2; mi++)
    for (int k = 0; k < 3; k++) {
      gt_config c;
      gt_model f, q;
      gt_mem mem;
      float_and_stored(&c, models[mi], g_qtypes[k], &f, &q, &mem);
      for (int i = 0; i < q.n_tensors; i++) {
        const gt_tensor_info *t = &q.tensors[i];
        const float *src = f.params + f.tensors[i].offset;
        if (t->dtype == GT_STORE_F32) {
          ck_assert(gt_test_same_bits(src, q.params + t->offset, t->numel));
          continue;
        }
        float *want = calloc((size_t)t->words, sizeof(float));
        gt_quantize((gt_qtype)t->dtype, src, t->shape[0], t->numel / t->shape[0], want);
        ck_assert_msg(gt_test_same_bits(want, q.params + t->offset, t->words), "%s %s: %s differs", models[mi],
                      g_qtypes[k], t->name);
        free(want);
      }
      gt_model_free(&f);
      gt_model_free(&q);
    }
}
END_TEST

/* Rows stored a chunk at a time equal the whole tensor quantized at once
 * (the chunks' blocks are the tensor's), whatever the chunk. */
START_TEST(test_put_rows_in_chunks) {
  for (int k = 0; k < 3; k++) {
    gt_tensor_info t;
    memset(&t, 0, sizeof t);
    t.ndim = 2, t.shape[0] = 300, t.shape[1] = 40, t.numel = 12000; /* a row is not a whole nf4 block */
    t.dtype = (gt_store_dtype)(k + 1);
    t.words = gt_q_words((gt_qtype)t.dtype, 300, 40);
    float *x = malloc(sizeof(float) * 12000);
    for (int i = 0; i < 12000; i++) x[i] = sinf(0.37f * (float)i) * (1.0f + (float)(i % 97));
    float *a = malloc(sizeof(float) * (size_t)t.words), *b = malloc(sizeof(float) * (size_t)t.words);
    memset(a, 0xff, sizeof(float) * (size_t)t.words); /* the padding is zeroed either way */
    memset(b, 0, sizeof(float) * (size_t)t.words);
    gt_err e;
    ck_assert(gt_qstore_put_rows(&t, a, 0, 300, x, &e) == GT_OK);
    for (int64_t r0 = 0; r0 < 300; r0 += 64)
      ck_assert(gt_qstore_put_rows(&t, b, r0, r0 + 64 <= 300 ? 64 : 300 - r0, x + r0 * 40, &e) == GT_OK);
    ck_assert_msg(gt_test_same_bits(a, b, t.words), "%s", gt_store_dtype_name(t.dtype));
    /* and reading rows back is gt_dequantize_rows */
    float *r = malloc(sizeof(float) * 3 * 40), *s = malloc(sizeof(float) * 3 * 40);
    gt_qstore_rows(&t, a, 101, 3, r);
    gt_qweight w = gt_qweight_at((gt_qtype)t.dtype, a, 300, 40);
    gt_dequantize_rows_ref(&w, 101, 3, s);
    ck_assert(gt_test_same_bits(r, s, 120));
    free(x), free(a), free(b), free(r), free(s);
  }
}
END_TEST

typedef struct run {
  float *p0, *p;
  double loss[4];
  int64_t n;
} run;

/* Trains `steps` steps; when `start` is given, from those parameters (a
 * buffer of this config's layout). */
static run train(const char *model, const char *mask, const char *qtype, int devices, int steps, float *start) {
  gt_config c;
  gt_err e;
  cfg_of(&c, model, mask, qtype, devices);
  gt_mem host;
  gt_mem_init(&host);
  gt_data d;
  ck_assert(gt_data_open(&d, &c, &host, &e) == GT_OK);
  gt_trainer *tr;
  ck_assert_msg(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK, "%s", e.msg);
  gt_fsdp *f = gt_trainer_fsdp(tr);
  run r;
  r.n = gt_fsdp_num_params(f);
  r.p0 = malloc(sizeof(float) * (size_t)r.n);
  r.p = malloc(sizeof(float) * (size_t)r.n);
  if (start) ck_assert_msg(gt_fsdp_set_state(f, start, NULL, NULL, 0, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_fsdp_full_params(f, r.p0, &e) == GT_OK);
  for (int s = 0; s < steps; s++) {
    gt_batch b;
    gt_data_next_train(&d, &b);
    gt_step_metrics sm;
    ck_assert_msg(gt_trainer_step(tr, &b, 1, &sm, &e) == GT_OK, "%s", e.msg);
    r.loss[s] = sm.loss;
  }
  ck_assert(gt_fsdp_full_params(f, r.p, &e) == GT_OK);
  gt_trainer_destroy(tr);
  gt_data_close(&d);
  return r;
}

static void build(gt_model *m, const char *model, const char *mask, const char *qtype) {
  gt_config c;
  gt_err e;
  cfg_of(&c, model, mask, qtype, 1);
  ck_assert(gt_model_build(m, &c, &e) == GT_OK);
}

/* A quantized base trains as the float32 model of its dequantized values:
 * the same losses and trainable tensors, bit for bit; its words unchanged. */
static void check_same_as_dequantized(const char *model, const char *mask) {
  gt_model fm;
  build(&fm, model, mask, "float32");
  for (int k = 0; k < 3; k++) {
    gt_model qm;
    build(&qm, model, mask, g_qtypes[k]);
    run q = train(model, mask, g_qtypes[k], 1, 3, NULL);
    /* the float32 model starts from the same values: its frozen matrices
     * are the quantized ones dequantized */
    float *start = malloc(sizeof(float) * (size_t)fm.n_params);
    for (int i = 0; i < fm.n_tensors; i++)
      gt_qstore_rows(&qm.tensors[i], q.p0 + qm.tensors[i].offset, 0, qm.tensors[i].shape[0],
                     start + fm.tensors[i].offset);
    run f = train(model, mask, "float32", 1, 3, start);
    for (int s = 0; s < 3; s++)
      ck_assert_msg(q.loss[s] == f.loss[s], "%s %s %s step %d: %.9g vs %.9g", model, g_dtype, g_qtypes[k], s,
                    q.loss[s], f.loss[s]);
    for (int i = 0; i < qm.n_tensors; i++) {
      const gt_tensor_info *t = &qm.tensors[i];
      if (t->role == GT_ROLE_FROZEN) {
        ck_assert_msg(gt_test_same_bits(q.p0 + t->offset, q.p + t->offset, t->words), "%s: frozen %s changed",
                      g_qtypes[k], t->name);
      } else {
        ck_assert_msg(gt_test_same_bits(q.p + t->offset, f.p + fm.tensors[i].offset, t->numel),
                      "%s %s %s: trainable %s differs from the float32 model's", model, g_dtype, g_qtypes[k], t->name);
        ck_assert_msg(!gt_test_same_bits(q.p + t->offset, q.p0 + t->offset, t->numel), "%s did not train", t->name);
      }
    }
    free(start);
    free(q.p0), free(q.p), free(f.p0), free(f.p);
    gt_model_free(&qm);
  }
  gt_model_free(&fm);
}

START_TEST(test_same_as_dequantized_float32) {
  /* the head's and the layers' norms train; the tied embedding (lookup and
   * logits) and every projection are quantized */
  check_same_as_dequantized("gemma3-tiny", "norm");
  /* PLE: its table, projection and per-layer gates quantized too */
  check_same_as_dequantized("gemma4-tiny-ple", "norm|self_attn\\.q_proj");
}
END_TEST

START_TEST(test_same_as_dequantized_bf16) {
  /* dtype=bfloat16: the float32 model rounds its (dequantized) weights to
   * bf16 where it computes; the quantized model rounds the same values
   * where it dequantizes them */
  g_dtype = "dtype=bfloat16";
  check_same_as_dequantized("gemma3-tiny", "norm");
  check_same_as_dequantized("gemma4-tiny-ple", "norm");
  g_dtype = "dtype=float32";
}
END_TEST

START_TEST(test_adapters_over_quantized_base) {
  /* LoRA over a quantized base: the adapters (every attention and MLP
   * projection, and Gemma 4's PLE gate and projection) train exactly as
   * over the float32 base of the dequantized values, in float32 and bf16 */
  g_lora = "enable_lora=true";
  check_same_as_dequantized("gemma3-tiny", "");
  check_same_as_dequantized("gemma4-tiny-ple", "");
  g_dtype = "dtype=bfloat16";
  check_same_as_dequantized("gemma3-tiny", "");
  g_dtype = "dtype=float32";
  g_lora = "enable_lora=false";
}
END_TEST

START_TEST(test_two_devices) {
  const char *dts[] = {"dtype=float32", "dtype=bfloat16"};
  for (int di = 0; di < 2; di++)
    for (int k = 0; k < 3; k++) {
      g_dtype = dts[di];
      gt_model qm;
      build(&qm, "gemma3-tiny", "norm|self_attn\\.o_proj", g_qtypes[k]);
      run one = train("gemma3-tiny", "norm|self_attn\\.o_proj", g_qtypes[k], 1, 3, NULL);
      run two = train("gemma3-tiny", "norm|self_attn\\.o_proj", g_qtypes[k], 2, 3, NULL);
      /* the frozen shards are gathered raw: the first step computes with
       * the same weights on any device count. On the portable kernels
       * (docs/cpus.md) OpenBLAS sums in an order that follows the product's
       * shape (each device has half the rows), and under dtype=bfloat16
       * rounding the activations turns those last bits into whole bf16
       * steps: nf4's first losses part by 7.8e-5 there (measured) */
      const double tol0 = gt__kernels_avx512() || di == 0 ? 1e-5 : 5e-4;
      ck_assert_msg(fabs(two.loss[0] - one.loss[0]) <= tol0 * fabs(one.loss[0]), "%s %s: %.9g vs %.9g", dts[di],
                    g_qtypes[k], two.loss[0], one.loss[0]);
      if (di == 0) {
        for (int s = 1; s < 3; s++) ck_assert(fabs(two.loss[s] - one.loss[s]) <= 1e-5 * fabs(one.loss[s]));
        for (int i = 0; i < qm.n_tensors; i++) { /* the trainable ones (quantized words are no floats) */
          const gt_tensor_info *t = &qm.tensors[i];
          if (t->role == GT_ROLE_FROZEN) continue;
          /* one small tensor's relative error: looser than test_fsdp's 1e-5
           * over the whole model (a norm of 64 values after 3 AdamW steps
           * moves by 1.7e-5 between reduction orders) */
          double err = gt_test_norm_rel_err(two.p + t->offset, one.p + t->offset, t->numel);
          ck_assert_msg(err <= 1e-4, "%s: %s differs by %.3g", g_qtypes[k], t->name, err);
        }
      }
      for (int i = 0; i < qm.n_tensors; i++) {
        const gt_tensor_info *t = &qm.tensors[i];
        if (t->role != GT_ROLE_FROZEN) continue;
        ck_assert_msg(gt_test_same_bits(one.p0 + t->offset, one.p + t->offset, t->words), "%s", t->name);
        ck_assert_msg(gt_test_same_bits(one.p0 + t->offset, two.p + t->offset, t->words), "%s %s %s: 2 devices",
                      dts[di], g_qtypes[k], t->name);
      }
      free(one.p0), free(one.p), free(two.p0), free(two.p);
      gt_model_free(&qm);
    }
  g_dtype = "dtype=float32";
}
END_TEST

START_TEST(test_plan_equals_measured) {
  const char *qts[] = {"float32", "bfloat16", "int8", "nf4"};
  const char *dts[] = {"dtype=float32", "dtype=bfloat16", "dtype=float32"};
  for (int di = 0; di < 3; di++)
    for (int k = 0; k < 4; k++)
      for (int devices = 1; devices <= 2; devices++) {
        g_dtype = dts[di];
        g_lora = di == 2 ? "enable_lora=true" : "enable_lora=false"; /* the last: adapters over the base */
        gt_config c;
        gt_err e;
        cfg_of(&c, "gemma4-tiny-ple", "norm|self_attn\\.q_proj", qts[k], devices);
        gt_plan p;
        ck_assert_msg(gt_plan_compute(&p, &c, &e) == GT_OK, "%s", e.msg);
        gt_trainer *tr;
        ck_assert(gt_trainer_create(&tr, &c, NULL, &e) == GT_OK);
        gt_step_metrics sm;
        ck_assert_msg(gt_trainer_step_zero(tr, &sm, &e) == GT_OK, "%s", e.msg);
        /* the plan's figures are the busiest device's (the devices' frozen
         * shards differ by the rounding of the split) */
        char what[160];
        snprintf(what, sizeof what, "%s %s %d devices", dts[di], qts[k], devices);
        gt_test_plan_matches(&p, tr, what);
        gt_model m;
        build(&m, "gemma4-tiny-ple", "norm|self_attn\\.q_proj", qts[k]);
        int64_t fw = 0, fe = 0;
        for (int i = 0; i < m.n_tensors; i++)
          if (m.tensors[i].role == GT_ROLE_FROZEN) fw += m.tensors[i].words, fe += m.tensors[i].numel;
        ck_assert_str_eq(p.frozen_qtype, qts[k]);
        ck_assert_int_eq(p.n_params - p.n_trainable, fe); /* elements */
        if (devices == 1) /* the frozen base at its stored size, in its own category */
          ck_assert_int_eq(p.cat_peak[GT_MEM_FROZEN], 4 * fw);
        if (k == 3) ck_assert_int_lt(4 * fw, fe); /* nf4: about half a byte an element */
        gt_model_free(&m);
        gt_trainer_destroy(tr);
        gt_plan_free(&p);
      }
  g_dtype = "dtype=float32";
  g_lora = "enable_lora=false";
}
END_TEST

/* Loading a Hugging Face directory into a quantized base quantizes each
 * tensor as read (a chunk of rows at a time): the same words as
 * gt_quantize of the float32 tensor; a bf16 checkpoint into a bf16 base
 * is exact (the words are the file's values). */
START_TEST(test_hf_load_quantizes) {
  gt_config c;
  gt_err e;
  gt_model f;
  gt_mem mem;
  gt_mem_init(&mem);
  cfg_of(&c, "gemma3-tiny", "norm", "float32", 1);
  ck_assert(gt_model_build(&f, &c, &e) == GT_OK && gt_model_alloc_inference(&f, &mem, &e) == GT_OK);
  gt_model_init_params(&f, 5, 1.0);
  char dir[] = "/tmp/gt_test_qbase.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const gt_dtype dts[] = {GT_DT_F32, GT_DT_BF16};
  for (int di = 0; di < 2; di++) {
    gt_hf_export_opts o = gt_hf_export_defaults();
    o.dtype = dts[di];
    ck_assert_msg(gt_hf_export(&f, &c, dir, &o, NULL, &e) == GT_OK, "%s", e.msg);
    gt_st_set set;
    memset(&set, 0, sizeof set);
    ck_assert_msg(gt_st_set_open(&set, dir, &e) == GT_OK, "%s", e.msg);
    for (int k = 0; k < 3; k++) {
      gt_config cq;
      gt_model q;
      cfg_of(&cq, "gemma3-tiny", "norm", g_qtypes[k], 1);
      ck_assert(gt_model_build(&q, &cq, &e) == GT_OK && gt_model_alloc_inference(&q, &mem, &e) == GT_OK);
      ck_assert_msg(gt_hf_import_params(&q, &set, "the export", NULL, &e) == GT_OK, "%s", e.msg);
      for (int i = 0; i < q.n_tensors; i++) {
        const gt_tensor_info *t = &q.tensors[i];
        /* what the file holds: the float32 values, or their bf16 rounding */
        float *x = malloc(sizeof(float) * (size_t)t->numel);
        memcpy(x, f.params + f.tensors[i].offset, sizeof(float) * (size_t)t->numel);
        if (dts[di] == GT_DT_BF16) gt_bf16_round_ref(x, t->numel);
        float *want = calloc((size_t)t->words, sizeof(float));
        if (t->dtype == GT_STORE_F32) memcpy(want, x, sizeof(float) * (size_t)t->numel);
        else gt_quantize((gt_qtype)t->dtype, x, t->shape[0], t->numel / t->shape[0], want);
        ck_assert_msg(gt_test_same_bits(want, q.params + t->offset, t->words), "%s from %s: %s", g_qtypes[k],
                      gt_dtype_name(dts[di]), t->name);
        if (dts[di] == GT_DT_BF16 && t->dtype == GT_STORE_BF16) { /* exact: the dequantized values are the file's */
          float *back = malloc(sizeof(float) * (size_t)t->numel);
          gt_qstore_rows(t, q.params + t->offset, 0, t->shape[0], back);
          ck_assert(gt_test_same_bits(back, x, t->numel));
          free(back);
        }
        free(x), free(want);
      }
      gt_model_free(&q);
    }
    gt_st_set_close(&set);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  gt_model_free(&f);
}
END_TEST

/* lora_embedding_qtype: auto keeps the tables in bfloat16 beside an int8 or
 * nf4 base and in the base's storage otherwise; an explicit value stores
 * them so (every one beside every stored base); a float32 base refuses any
 * but float32. */
START_TEST(test_embedding_qtype_key) {
  static const struct {
    const char *base, *embed;
    gt_store_dtype want;
    const char *desc;
  } cases[] = {
      {"int8", "auto", GT_STORE_BF16, "int8, embedding bfloat16"},
      {"nf4", "auto", GT_STORE_BF16, "nf4, embedding bfloat16"},
      {"bfloat16", "auto", GT_STORE_BF16, "bfloat16"},
      {"float32", "auto", GT_STORE_F32, "float32"},
      {"float32", "float32", GT_STORE_F32, "float32"},
      {"nf4", "nf4", GT_STORE_NF4, "nf4"},
      {"nf4", "int8", GT_STORE_INT8, "nf4, embedding int8"},
      {"nf4", "float32", GT_STORE_F32, "nf4, embedding float32"},
      {"int8", "bfloat16", GT_STORE_BF16, "int8, embedding bfloat16"},
      {"bfloat16", "nf4", GT_STORE_NF4, "bfloat16, embedding nf4"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char eq[64];
    snprintf(eq, sizeof eq, "lora_embedding_qtype=%s", cases[k].embed);
    g_embed = eq;
    gt_config c;
    gt_err e;
    gt_model m;
    cfg_of(&c, "gemma4-tiny-ple", "norm", cases[k].base, 1);
    ck_assert_msg(gt_model_build(&m, &c, &e) == GT_OK, "%s", e.msg);
    gt_store_dtype base;
    ck_assert(gt_store_dtype_parse(cases[k].base, &base, &e) == GT_OK);
    for (int i = 0; i < m.n_tensors; i++) {
      const gt_tensor_info *t = &m.tensors[i];
      if (t->role != GT_ROLE_FROZEN || t->ndim != 2) continue;
      gt_store_dtype dt = is_table(t->name) ? cases[k].want : base;
      ck_assert_msg(t->dtype == dt, "%s %s: %s is %s", cases[k].base, cases[k].embed, t->name,
                    gt_store_dtype_name(t->dtype));
      ck_assert_int_eq(t->words, gt_q_words((gt_qtype)dt, t->shape[0], t->numel / t->shape[0]));
    }
    ck_assert(m.embed_qtype == cases[k].want && m.ple_embed_qtype == cases[k].want && m.ple_proj_qtype == base);
    ck_assert(gt_qstore_dtype(&m) == base);
    ck_assert_str_eq(gt_qstore_describe(&m), cases[k].desc);
    gt_model_free(&m);
  }
  /* nothing to store apart beside a float32 base: refused, naming both keys */
  const char *refused[] = {"bfloat16", "int8", "nf4"};
  for (int k = 0; k < 3; k++) {
    char eq[64];
    snprintf(eq, sizeof eq, "lora_embedding_qtype=%s", refused[k]);
    const char *ov[] = {"model_name=gemma3-tiny", "enable_lora=true", eq};
    gt_config c;
    gt_err e;
    ck_assert(gt_config_load(&c, GT_SOURCE_DIR "/configs", NULL, 3, ov, &e) == GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "lora_embedding_qtype") && strstr(e.msg, refused[k]) &&
                      strstr(e.msg, "lora_weight_qtype=float32"),
                  "%s", e.msg);
  }
  g_embed = "lora_embedding_qtype=auto";
}
END_TEST

/* The logits (the full forward and a decoder's prefill) of an int8 or nf4
 * base equal those of the float32 model whose projections are the
 * quantized values dequantized and whose tied embedding and PLE table are
 * the float32 values rounded to bf16: a reference made here from the
 * float32 initialisation (bitsandbytes' quantization of each projection,
 * gt_bf16_round_ref of each table), not read from the stored base. */
START_TEST(test_logits_bf16_embedding) {
  const char *models[] = {"gemma3-tiny", "gemma4-tiny-ple"};
  const gt_store_dtype qs[] = {GT_STORE_INT8, GT_STORE_NF4};
  for (int mi = 0; mi < 2; mi++)
    for (int k = 0; k < 2; k++) {
      gt_config c;
      gt_model f, q;
      gt_mem mem;
      float_and_stored(&c, models[mi], gt_store_dtype_name(qs[k]), &f, &q, &mem);
      gt_err e;
      int tables = 0;
      for (int i = 0; i < f.n_tensors; i++) {
        const gt_tensor_info *t = &f.tensors[i];
        float *w = f.params + t->offset;
        if (t->role != GT_ROLE_FROZEN || t->ndim != 2) continue;
        int64_t rows = t->shape[0], cols = t->numel / rows;
        if (is_table(t->name)) {
          gt_bf16_round_ref(w, t->numel);
          tables++;
          continue;
        }
        float *st = calloc((size_t)gt_q_words((gt_qtype)qs[k], rows, cols), sizeof(float));
        gt_quantize_ref((gt_qtype)qs[k], w, rows, cols, st);
        gt_qweight qw = gt_qweight_at((gt_qtype)qs[k], st, rows, cols);
        gt_dequantize_rows_ref(&qw, 0, rows, w);
        free(st);
      }
      ck_assert_int_eq(tables, mi == 0 ? 1 : 2);
      const int T = 9;
      int32_t ids[9], tg[9], pos[9];
      uint64_t seed = 17;
      gt_test_fill_ids(ids, T, &seed, 4, f.vocab);
      for (int i = 0; i < T; i++) tg[i] = -1, pos[i] = i;
      gt_batch b = {1, T, ids, tg, pos, NULL};
      float *lf = malloc(sizeof(float) * (size_t)(T * f.vocab)), *lq = malloc(sizeof(float) * (size_t)(T * q.vocab));
      ck_assert_msg(gt_exec_forward_logits(&f, &b, lf, &e) == GT_OK, "%s", e.msg);
      ck_assert_msg(gt_exec_forward_logits(&q, &b, lq, &e) == GT_OK, "%s", e.msg);
      ck_assert_msg(gt_test_same_bits(lf, lq, T * f.vocab), "%s %s: the logits differ from the reference's",
                    models[mi], gt_store_dtype_name(qs[k]));
      gt_decoder df, dq;
      ck_assert(gt_decoder_init(&df, &f, T, &e) == GT_OK && gt_decoder_init(&dq, &q, T, &e) == GT_OK);
      ck_assert(gt_decoder_prefill(&df, ids, T, lf, &e) == GT_OK && gt_decoder_prefill(&dq, ids, T, lq, &e) == GT_OK);
      ck_assert_msg(gt_test_same_bits(lf, lq, f.vocab), "%s %s: the decoder's logits differ from the reference's",
                    models[mi], gt_store_dtype_name(qs[k]));
      gt_decoder_free(&df);
      gt_decoder_free(&dq);
      free(lf), free(lq);
      gt_model_free(&f);
      gt_model_free(&q);
      ck_assert_int_eq(gt_mem_total_cur(&mem), 0);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("qbase");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_decision_and_layout);
  tcase_add_test(tc, test_stored_equals_quantized_float_base);
  tcase_add_test(tc, test_put_rows_in_chunks);
  tcase_add_test(tc, test_same_as_dequantized_float32);
  tcase_add_test(tc, test_same_as_dequantized_bf16);
  tcase_add_test(tc, test_adapters_over_quantized_base);
  tcase_add_test(tc, test_two_devices);
  tcase_add_test(tc, test_plan_equals_measured);
  tcase_add_test(tc, test_hf_load_quantizes);
  tcase_add_test(tc, test_embedding_qtype_key);
  tcase_add_test(tc, test_logits_bf16_embedding);
  return gt_test_run_suite(s, 0);
}
