/* The model source (src/hf/model_source.h): load_parameters_path is
 * classified (checkpoint step / checkpoints / run directory, Hugging Face
 * directory, parameter file) from fixtures written by the real writers; the
 * source's model keys replace the preset's, an explicit conflicting model key
 * is refused with both values, an agreeing one is accepted; parameters load
 * bit for bit; the config records which keys the user set. */
#define _GNU_SOURCE /* asprintf */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "hf/model_source.h"
#include "ckpt/paramfile.h"
#include "gt_testutil.h"
#include "hf/hf.h"

static char *g_dir;

static void setup(void) {
  g_dir = gt_test_mkdtemp("model_source");
  ck_assert_ptr_nonnull(g_dir);
}

static void teardown(void) {
  gt_test_system("rm -rf '%s'", g_dir);
  free(g_dir);
}

static char *pth(const char *name) {
  char *p = NULL;
  ck_assert(asprintf(&p, "%s/%s", g_dir, name) > 0);
  return p;
}

static void load_cfg(gt_config *c, int n, const char **ov) {
  gt_err e;
  ck_assert_msg(gt_config_load(c, NULL, NULL, n, ov, &e) == GT_OK, "%s", e.msg);
}

/* The fixture model: gemma3-tiny (d=64, 6 layers, window 16) with random
 * weights, in memory. */
typedef struct fixture {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
} fixture;

static void make_model(fixture *f, const char *preset, uint64_t seed) {
  char mn[96];
  snprintf(mn, sizeof mn, "model_name=%s", preset);
  const char *ov[] = {mn};
  load_cfg(&f->cfg, 1, ov);
  gt_mem_init(&f->mem);
  gt_err e;
  ck_assert_msg(gt_model_build(&f->m, &f->cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_model_alloc_inference(&f->m, &f->mem, &e) == GT_OK, "%s", e.msg);
  uint64_t st = seed;
  gt_test_fill(f->m.params, f->m.n_params, &st, -0.5f, 0.5f);
}

static void write_hf(const fixture *f, const char *dir) {
  gt_hf_export_opts o = {GT_DT_F32, 0, 1};
  gt_err e;
  ck_assert_msg(gt_hf_export(&f->m, &f->cfg, dir, &o, NULL, &e) == GT_OK, "%s", e.msg);
}

/* A run directory <run>/checkpoints with step 1 (the model) and step 2 (its
 * parameters times 2), `latest` naming step 2. */
static void write_run(const fixture *f, const char *run) {
  int64_t n = f->m.n_params;
  float *zeros = calloc((size_t)n, sizeof(float)), *twice = malloc(sizeof(float) * (size_t)n);
  ck_assert(zeros && twice);
  for (int64_t i = 0; i < n; i++) twice[i] = 2.0f * f->m.params[i];
  char root[1200];
  snprintf(root, sizeof root, "%s/checkpoints", run);
  char *cj = gt_config_to_json(&f->cfg);
  gt_err e;
  for (int s = 1; s <= 2; s++) {
    const float *p[1] = {s == 1 ? f->m.params : twice}, *z[1] = {zeros};
    gt_ckpt_src src = {1, p, z, z};
    gt_ckpt_state st = {s, s, {0, 0}, 1, 1, 0, {0}, {0}, 0};
    ck_assert_msg(gt_ckpt_save(root, &f->m, &src, &st, cj, 0, 0, &e) == GT_OK, "%s", e.msg);
  }
  free(cj), free(zeros), free(twice);
}

static void open_ok(const char *path, gt_model_source *s) {
  gt_err e;
  ck_assert_msg(gt_model_source_open(path, s, &e) == GT_OK, "%s: %s", path, e.msg);
}

/* Builds the model cfg describes and loads the source into it. */
static void load_into(gt_model_source *s, const gt_config *cfg, gt_model *m, gt_mem *mem) {
  gt_err e;
  ck_assert_msg(gt_model_build(m, cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_model_alloc_inference(m, mem, &e) == GT_OK, "%s", e.msg);
  memset(m->params, 0, sizeof(float) * (size_t)m->n_params);
  ck_assert_msg(gt_model_source_load_params(s, m, m->params, &e) == GT_OK, "%s", e.msg);
}

START_TEST(test_classify_each_kind) {
  fixture f;
  make_model(&f, "gemma3-tiny", 3);
  char *hf = pth("hf_tiny"), *run = pth("run"), *pf = pth("tiny.safetensors");
  write_hf(&f, hf);
  write_run(&f, run);
  gt_err e;
  ck_assert_msg(gt_paramfile_write(pf, &f.m, &f.cfg, NULL, NULL, 5, &e) == GT_OK, "%s", e.msg);

  gt_model_source s;
  open_ok(hf, &s);
  ck_assert_int_eq(s.kind, GT_SRC_HF);
  ck_assert_str_eq(s.name, "hf:hf_tiny");
  ck_assert_str_eq(s.hf.architecture, "Gemma3ForCausalLM");
  ck_assert_int_eq(s.cfg.base_emb_dim, 64);
  ck_assert_int_eq(s.cfg.sliding_window_size, 16);
  char want[2400];
  snprintf(want, sizeof want, "Hugging Face directory %s (Gemma3ForCausalLM, gemma3, 6 layers)", hf);
  ck_assert_str_eq(s.desc, want);

  /* a run directory, its checkpoints directory (with a trailing slash) and
   * `latest`: step 2 */
  char step2[1300], step1[1300], ckdir[1300];
  snprintf(step2, sizeof step2, "%s/checkpoints/step_00000002", run);
  snprintf(step1, sizeof step1, "%s/checkpoints/step_00000001", run);
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints/", run);
  open_ok(run, &s);
  ck_assert_int_eq(s.kind, GT_SRC_CHECKPOINT);
  ck_assert_str_eq(s.dir, step2);
  ck_assert_str_eq(s.name, "gemma3-tiny");
  snprintf(want, sizeof want, "checkpoint step_00000002 of run %s (gemma3-tiny, 6 layers)", run);
  ck_assert_str_eq(s.desc, want);
  open_ok(ckdir, &s);
  ck_assert_int_eq(s.kind, GT_SRC_CHECKPOINT);
  ck_assert_str_eq(s.dir, step2);
  /* a step directory is itself, even when `latest` is newer */
  open_ok(step1, &s);
  ck_assert_int_eq(s.kind, GT_SRC_CHECKPOINT);
  ck_assert_str_eq(s.dir, step1);
  snprintf(want, sizeof want, "checkpoint step_00000001 of run %s (gemma3-tiny, 6 layers)", run);
  ck_assert_str_eq(s.desc, want);
  /* without `latest`: the newest step directory */
  ck_assert_int_eq(gt_test_system("rm '%s/checkpoints/latest'", run), 0);
  open_ok(run, &s);
  ck_assert_str_eq(s.dir, step2);

  open_ok(pf, &s);
  ck_assert_int_eq(s.kind, GT_SRC_PARAMFILE);
  ck_assert_str_eq(s.dir, pf);
  ck_assert_str_eq(s.name, "gemma3-tiny");
  ck_assert_int_eq(s.cfg.base_mlp_dim, 128);
  snprintf(want, sizeof want, "parameter file %s (gemma3-tiny, 6 layers)", pf);
  ck_assert_str_eq(s.desc, want);

  gt_model_free(&f.m);
  free(hf), free(run), free(pf);
}
END_TEST

START_TEST(test_refuses_what_is_none) {
  gt_model_source s;
  gt_err e;
  char *none = pth("none"), *empty = pth("empty"), *half = pth("half"), *junk = pth("junk.safetensors");
  ck_assert_int_eq(gt_model_source_open(none, &s, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, none) && strstr(e.msg, "No such file"), "%s", e.msg);
  ck_assert_int_eq(gt_model_source_open("", &s, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "load_parameters_path"), "%s", e.msg);

  ck_assert_int_eq(gt_test_system("mkdir -p '%s' '%s/checkpoints'", empty, half), 0);
  ck_assert_int_eq(gt_model_source_open(empty, &s, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, empty) && strstr(e.msg, "without a checkpoint") && strstr(e.msg, "Hugging Face"), "%s",
                e.msg);
  ck_assert_int_eq(gt_model_source_open(half, &s, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "checkpoints' holds no checkpoint"), "%s", e.msg);
  /* config.json without weights: say what is missing */
  ck_assert_int_eq(gt_test_system("echo '{}' > '%s/config.json'", empty), 0);
  ck_assert_int_eq(gt_model_source_open(empty, &s, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, empty) && strstr(e.msg, "has config.json but neither model.safetensors"), "%s", e.msg);
  /* a file that is not safetensors */
  ck_assert_int_eq(gt_test_system("echo 'not safetensors' > '%s'", junk), 0);
  ck_assert_int_ne(gt_model_source_open(junk, &s, &e), GT_OK);
  ck_assert_msg(strstr(e.msg, junk), "%s", e.msg);

  /* `latest` naming a step directory that is not there */
  fixture f;
  make_model(&f, "gemma3-tiny", 3);
  char *run = pth("run");
  write_run(&f, run);
  ck_assert_int_eq(gt_test_system("echo step_00000009 > '%s/checkpoints/latest'", run), 0);
  ck_assert_int_eq(gt_model_source_open(run, &s, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "names 'step_00000009', which is not a step directory"), "%s", e.msg);
  gt_model_free(&f.m);
  free(none), free(empty), free(half), free(junk), free(run);
}
END_TEST

START_TEST(test_params_load_bit_identical) {
  fixture f;
  make_model(&f, "gemma3-tiny", 9);
  char *hf = pth("hf"), *run = pth("run"), *pf = pth("p.safetensors");
  write_hf(&f, hf);
  write_run(&f, run);
  gt_err e;
  ck_assert_msg(gt_paramfile_write(pf, &f.m, &f.cfg, NULL, NULL, 0, &e) == GT_OK, "%s", e.msg);
  char step1[1300];
  snprintf(step1, sizeof step1, "%s/checkpoints/step_00000001", run);
  const char *paths[] = {hf, pf, step1, run};
  for (int k = 0; k < 4; k++) {
    gt_model_source s;
    open_ok(paths[k], &s);
    gt_config cfg;
    load_cfg(&cfg, 0, NULL); /* gemma3-small's dimensions, replaced */
    ck_assert_msg(gt_model_source_apply_config(&s, &cfg, &e) == GT_OK, "%s", e.msg);
    gt_mem mem;
    gt_mem_init(&mem);
    gt_model m;
    load_into(&s, &cfg, &m, &mem);
    ck_assert_int_eq(m.n_params, f.m.n_params);
    float mul = k == 3 ? 2.0f : 1.0f; /* the run's latest is step 2: twice the parameters */
    int64_t bad = -1;
    for (int64_t i = 0; i < m.n_params && bad < 0; i++)
      if (m.params[i] != mul * f.m.params[i]) bad = i;
    ck_assert_msg(bad < 0, "%s: parameter %lld differs", paths[k], (long long)bad);
    if (k == 0) { /* the import's findings */
      ck_assert_str_eq(s.hf.prefix, "model.");
      ck_assert_str_eq(s.hf.dtype, "F32");
      ck_assert_str_eq(s.hf.architecture, "Gemma3ForCausalLM");
    }
    gt_model_free(&m);
  }
  /* a model of another layout is refused naming the tensor */
  gt_model_source s;
  open_ok(pf, &s);
  gt_config other;
  load_cfg(&other, 0, NULL);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  ck_assert_msg(gt_model_build(&m, &other, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_model_alloc_inference(&m, &mem, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_ne(gt_model_source_load_params(&s, &m, m.params, &e), GT_OK);
  ck_assert_msg(strstr(e.msg, pf) && strstr(e.msg, "shape"), "%s", e.msg);
  gt_model_free(&m);
  gt_model_free(&f.m);
  free(hf), free(run), free(pf);
}
END_TEST

/* A conflict: sliding_window_size=6 on the command line with an HF
 * directory whose config.json says 16. */
START_TEST(test_conflicting_explicit_key_refused) {
  fixture f;
  make_model(&f, "gemma3-tiny", 3);
  char *hf = pth("hf"), *run = pth("run"), *pf = pth("p.safetensors"), *user = pth("user.json");
  write_hf(&f, hf);
  write_run(&f, run);
  gt_err e;
  ck_assert_msg(gt_paramfile_write(pf, &f.m, &f.cfg, NULL, NULL, 0, &e) == GT_OK, "%s", e.msg);
  char step2[1300];
  snprintf(step2, sizeof step2, "%s/checkpoints/step_00000002", run);
  struct {
    const char *path, *ov, *key, *ours, *theirs, *where;
  } cases[] = {
      {hf, "sliding_window_size=6", "sliding_window_size", "= 6", "= 16", hf},
      {run, "base_mlp_dim=96", "base_mlp_dim", "= 96", "= 128", step2},
      {pf, "rope_max_timescale=5000.5", "rope_max_timescale", "= 5000.5", "= 1000000", pf},
      {hf, "layer_pattern=LG", "layer_pattern", "= LG", "= LLLLLG", hf},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_model_source s;
    open_ok(cases[i].path, &s);
    gt_config cfg;
    const char *ov[] = {"max_target_length=40", cases[i].ov};
    load_cfg(&cfg, 2, ov);
    gt_config before = cfg;
    ck_assert_int_eq(gt_model_source_apply_config(&s, &cfg, &e), GT_ERR_CONFIG);
    char key[96];
    snprintf(key, sizeof key, "key '%s'", cases[i].key);
    ck_assert_msg(strstr(e.msg, key) && strstr(e.msg, cases[i].ours) && strstr(e.msg, cases[i].theirs) &&
                      strstr(e.msg, cases[i].where),
                  "case %zu: %s", i, e.msg);
    ck_assert_msg(memcmp(&before, &cfg, sizeof cfg) == 0, "case %zu: a refused apply changed cfg", i);
  }
  /* a user config file is explicit too */
  ck_assert_int_eq(gt_test_system("echo '{\"head_dim\": 8}' > '%s'", user), 0);
  gt_config cfg;
  ck_assert_msg(gt_config_load(&cfg, NULL, user, 0, NULL, &e) == GT_OK, "%s", e.msg);
  gt_model_source s;
  open_ok(hf, &s);
  ck_assert_int_eq(gt_model_source_apply_config(&s, &cfg, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'head_dim' = 8") && strstr(e.msg, "head_dim = 16"), "%s", e.msg);
  gt_model_free(&f.m);
  free(hf), free(run), free(pf), free(user);
}
END_TEST

START_TEST(test_agreeing_keys_and_preset_keys) {
  fixture f;
  make_model(&f, "gemma3-tiny", 3);
  char *hf = pth("hf"), *run = pth("run");
  write_hf(&f, hf);
  write_run(&f, run);
  gt_err e;
  /* explicit and equal to the source's: accepted; the other keys stay */
  gt_model_source s;
  open_ok(hf, &s);
  const char *ov[] = {"sliding_window_size=16", "base_emb_dim=64", "max_target_length=40", "learning_rate=0.02",
                      "per_device_batch_size=3"};
  gt_config cfg;
  load_cfg(&cfg, 5, ov);
  ck_assert_int_eq(cfg.base_mlp_dim, 1024); /* base.json's gemma3-small */
  ck_assert_msg(gt_model_source_apply_config(&s, &cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(cfg.model_name, "hf:hf");
  ck_assert_int_eq(cfg.sliding_window_size, 16);
  ck_assert_int_eq(cfg.base_emb_dim, 64);
  ck_assert_int_eq(cfg.base_mlp_dim, 128);
  ck_assert_int_eq(cfg.head_dim, 16);
  ck_assert_int_eq(cfg.max_target_length, 40);
  ck_assert(cfg.learning_rate == 0.02);
  ck_assert(cfg.per_device_batch_size == 3);
  ck_assert(gt_config_is_user_set(&cfg, "sliding_window_size")); /* the record survives */

  /* a preset's model keys are not the user's: a gemma4 preset gives way to
   * a gemma3 checkpoint, and model_name becomes the checkpoint's */
  const char *ov4[] = {"model_name=gemma4-tiny-moe", "max_target_length=24"};
  load_cfg(&cfg, 2, ov4);
  ck_assert_int_eq(cfg.num_experts, 8);
  open_ok(run, &s);
  ck_assert_msg(gt_model_source_apply_config(&s, &cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(cfg.model_name, "gemma3-tiny");
  ck_assert_str_eq(cfg.decoder_block, "gemma3");
  ck_assert_int_le(cfg.num_experts, 1);
  ck_assert_int_eq(cfg.global_head_dim, 0);
  ck_assert_int_eq(cfg.max_target_length, 24);
  ck_assert(cfg.load_balance_loss_weight == 0.01); /* a training key, not the model's: the preset's stays */
  gt_model m;
  gt_mem mem;
  gt_mem_init(&mem);
  load_into(&s, &cfg, &m, &mem);
  gt_model_free(&m);

  /* a checkpoint without a model_name is named after its run */
  fixture g;
  make_model(&g, "gemma3-tiny", 4);
  snprintf(g.cfg.model_name, sizeof g.cfg.model_name, "%s", "");
  char *anon = pth("anon_run");
  write_run(&g, anon);
  open_ok(anon, &s);
  ck_assert_str_eq(s.name, "ckpt:anon_run");
  gt_model_free(&g.m);
  gt_model_free(&f.m);
  free(hf), free(run), free(anon);
}
END_TEST

/* Gemma 4: config.json has no layer_scalar_trainable, so the user's stays. */
START_TEST(test_hf_gemma4_keeps_keys_it_cannot_say) {
  fixture f;
  make_model(&f, "gemma4-tiny-moe", 5);
  char *hf = pth("hf4");
  write_hf(&f, hf);
  gt_model_source s;
  open_ok(hf, &s);
  ck_assert_int_eq(s.cfg.num_experts, 8);
  gt_err e;
  const char *ov[] = {"layer_scalar_trainable=false", "max_target_length=32"};
  gt_config cfg;
  load_cfg(&cfg, 2, ov);
  ck_assert_msg(gt_model_source_apply_config(&s, &cfg, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(cfg.layer_scalar_trainable, 0);
  /* the buffers this model leaves unused are counted before any load: the
   * random fixture's values, none of them 1 */
  ck_assert_int_eq(s.hf.n_unused_scalars, (int)f.m.n_layers);
  ck_assert_int_eq(s.hf.n_unused_scalars_not_one, (int)f.m.n_layers);
  ck_assert_str_eq(cfg.decoder_block, "gemma4");
  ck_assert_int_eq(cfg.num_experts, 8);
  ck_assert_int_eq(cfg.base_moe_mlp_dim, 32);
  ck_assert_int_eq(cfg.global_head_dim, 32);
  /* with the scalars trained, none is unused */
  gt_config tr;
  const char *ov1[] = {"max_target_length=32"};
  load_cfg(&tr, 1, ov1);
  ck_assert_msg(gt_model_source_apply_config(&s, &tr, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(s.hf.n_unused_scalars, 0);
  ck_assert_int_eq(s.hf.n_unused_scalars_not_one, 0);
  /* ...but an explicit MoE key that contradicts it is refused */
  const char *ov2[] = {"num_experts_per_tok=3"};
  load_cfg(&cfg, 1, ov2);
  ck_assert_int_eq(gt_model_source_apply_config(&s, &cfg, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'num_experts_per_tok' = 3") && strstr(e.msg, "num_experts_per_tok = 2"), "%s",
                e.msg);
  gt_model_free(&f.m);
  free(hf);
}
END_TEST

/* A checkpoint of a LoRA run: its lora_dropout comes with its adapters (a
 * PEFT export writes it, a continued run trains with it) unless the user
 * sets one, which is kept, not refused (dropout changes training only). The
 * stored config is what apply_config reads; the tensors are not loaded. */
START_TEST(test_lora_dropout_from_checkpoint) {
  fixture f;
  make_model(&f, "gemma3-tiny", 4);
  char *run = pth("lora_run");
  f.cfg.enable_lora = 1;
  f.cfg.lora_rank = 4;
  f.cfg.lora_alpha = 8;
  f.cfg.lora_dropout = 0.1;
  write_run(&f, run);
  gt_err e;
  for (int k = 0; k < 2; k++) {
    gt_model_source s;
    open_ok(run, &s);
    gt_config cfg;
    const char *ov[] = {"max_target_length=32", "lora_dropout=0.25"};
    load_cfg(&cfg, k ? 2 : 1, ov);
    ck_assert_msg(gt_model_source_apply_config(&s, &cfg, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(cfg.enable_lora, 1);
    ck_assert_int_eq(cfg.lora_rank, 4);
    ck_assert_msg(cfg.lora_dropout == (k ? 0.25 : 0.1), "case %d: lora_dropout %g", k, cfg.lora_dropout);
  }
  gt_model_free(&f.m);
  free(run);
}
END_TEST

/* The one list of model keys: everything an HF config.json sets is in it,
 * and the run's own keys are not. */
START_TEST(test_model_key_flags) {
  const char *model[] = {"decoder_block", "vocab_size", "base_emb_dim", "head_dim", "sliding_window_size",
                         "layer_pattern", "rope_max_timescale", "num_experts", "layer_scalar_trainable"};
  const char *run[] = {"model_name", "max_target_length", "per_device_batch_size", "num_devices", "learning_rate",
                       "load_balance_loss_weight", "weight_init_scale", "remat_policy", "load_parameters_path"};
  for (size_t i = 0; i < sizeof model / sizeof model[0]; i++)
    ck_assert_msg(gt_config_key(model[i])->flags & GT_KEY_MODEL, "%s is not a model key", model[i]);
  for (size_t i = 0; i < sizeof run / sizeof run[0]; i++)
    ck_assert_msg(!(gt_config_key(run[i])->flags & GT_KEY_MODEL), "%s is a model key", run[i]);
  const char *presets[] = {"gemma3-tiny", "gemma4-tiny-moe", "gemma4-tiny-ple"};
  for (int p = 0; p < 3; p++) {
    fixture f;
    make_model(&f, presets[p], 1);
    char *hf = pth(presets[p]);
    write_hf(&f, hf);
    /* read onto a config far from it: every key it changes must be a model key */
    const char *ov[] = {p ? "model_name=gemma3-small" : "model_name=gemma4-tiny-moe"};
    gt_config before, after;
    load_cfg(&before, 1, ov);
    after = before;
    gt_err e;
    ck_assert_msg(gt_hf_config_read(hf, &after, NULL, &e) == GT_OK, "%s", e.msg);
    int changed = 0;
    for (int i = 0; i < gt_config_num_keys(); i++) {
      const gt_key_spec *k = gt_config_key_at(i);
      char a[1100], b[1100];
      gt_config_get_text(&before, k->name, a, sizeof a, NULL);
      gt_config_get_text(&after, k->name, b, sizeof b, NULL);
      if (strcmp(a, b)) {
        changed++;
        ck_assert_msg(k->flags & GT_KEY_MODEL, "%s: config.json sets '%s' (%s -> %s), which is not a model key",
                      presets[p], k->name, a, b);
      }
    }
    ck_assert_int_gt(changed, 3);
    gt_model_free(&f.m);
    free(hf);
  }
}
END_TEST

START_TEST(test_user_set_record) {
  char *user = pth("u.json");
  ck_assert_int_eq(gt_test_system("echo '{\"steps\": 7, \"head_dim\": 16}' > '%s'", user), 0);
  const char *ov[] = {"model_name=gemma3-tiny", "sliding_window_size=8"};
  gt_config c;
  gt_err e;
  ck_assert_msg(gt_config_load(&c, NULL, user, 2, ov, &e) == GT_OK, "%s", e.msg);
  ck_assert(gt_config_is_user_set(&c, "model_name"));
  ck_assert(gt_config_is_user_set(&c, "sliding_window_size"));
  ck_assert(gt_config_is_user_set(&c, "steps"));
  ck_assert(gt_config_is_user_set(&c, "head_dim"));
  ck_assert(!gt_config_is_user_set(&c, "base_emb_dim")); /* the preset's */
  ck_assert(!gt_config_is_user_set(&c, "learning_rate")); /* base.json's */
  ck_assert(!gt_config_is_user_set(&c, "no_such_key"));
  gt_config copy = c;
  ck_assert(gt_config_is_user_set(&copy, "sliding_window_size"));
  /* gt_config_set is not the user's word */
  ck_assert(gt_config_set(&copy, "base_mlp_dim", "32", "test", &e) == GT_OK);
  ck_assert(!gt_config_is_user_set(&copy, "base_mlp_dim"));
  /* a fresh load forgets */
  ck_assert_msg(gt_config_load(&c, NULL, NULL, 0, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert(!gt_config_is_user_set(&c, "sliding_window_size"));
  free(user);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_source");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_classify_each_kind);
  tcase_add_test(tc, test_refuses_what_is_none);
  tcase_add_test(tc, test_params_load_bit_identical);
  tcase_add_test(tc, test_conflicting_explicit_key_refused);
  tcase_add_test(tc, test_agreeing_keys_and_preset_keys);
  tcase_add_test(tc, test_hf_gemma4_keeps_keys_it_cannot_say);
  tcase_add_test(tc, test_lora_dropout_from_checkpoint);
  tcase_add_test(tc, test_model_key_flags);
  tcase_add_test(tc, test_user_set_record);
  return gt_test_run_suite(s, 0);
}
