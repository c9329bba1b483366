/* gemtrain convert: Hugging Face Gemma 3 and Gemma 4 checkpoints in and out.
 *
 * The conversion itself (hf.h) works on a model in memory; this command only
 * chooses the container on gemtrain's side, which for now is the parameter
 * file of gt_ctx_save (paramfile.h) until the checkpoint format lands. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ckpt/ckpt.h"
#include "ckpt/paramfile.h"
#include "hf/model_source.h"
#include "hf/peft.h"
#include "train/train.h"

/* base.json's defaults: a source given to convert brings its own model keys
 * and convert takes no other config. Prints the error. */
static int gt__convert_defaults(gt_config *cfg) { return gt_cli_load_config(0, NULL, cfg); }

static int gt__parse_bool(const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "1")) return *out = 1, 1;
  if (!strcmp(v, "false") || !strcmp(v, "0")) return *out = 0, 1;
  return 0;
}

/* Takes the options convert owns out of argv (in place); the rest stays for
 * the config. Returns non-zero (printed) on a bad value. */
static int gt__convert_opts(int *argc, char **argv, gt_hf_export_opts *o, double *norm_std) {
  int k = 0;
  for (int i = 0; i < *argc; i++) {
    const char *a = argv[i];
    char *end = NULL;
    if (!strncmp(a, "dtype=", 6)) {
      if (!strcmp(a + 6, "bfloat16"))
        o->dtype = GT_DT_BF16;
      else if (!strcmp(a + 6, "float32"))
        o->dtype = GT_DT_F32;
      else {
        fprintf(stderr, "gemtrain convert: dtype = '%s'; expected bfloat16 or float32\n", a + 6);
        return 2;
      }
    } else if (!strncmp(a, "max_shard_size=", 15)) {
      unsigned long long v = strtoull(a + 15, &end, 10);
      if (!a[15] || *end || a[15] == '-') {
        fprintf(stderr, "gemtrain convert: max_shard_size = '%s'; expected bytes (0: one file)\n", a + 15);
        return 2;
      }
      o->max_shard_bytes = v;
    } else if (!strncmp(a, "pad_vocab=", 10)) {
      if (!strcmp(a + 10, "auto")) {
        o->pad_vocab = -1;
      } else if (!gt__parse_bool(a + 10, &o->pad_vocab)) {
        fprintf(stderr, "gemtrain convert: pad_vocab = '%s'; expected auto, true or false\n", a + 10);
        return 2;
      }
    } else if (!strncmp(a, "init_norm_std=", 14)) {
      *norm_std = strtod(a + 14, &end);
      if (!a[14] || *end || !(*norm_std >= 0)) {
        fprintf(stderr, "gemtrain convert: init_norm_std = '%s'; expected a number >= 0\n", a + 14);
        return 2;
      }
    } else {
      argv[k++] = argv[i];
    }
  }
  *argc = k;
  return 0;
}

static int gt__to_hf(int argc, char **argv) {
  const char *src = argv[0], *out = argv[1];
  gt_hf_export_opts o = gt_hf_export_defaults();
  o.pad_vocab = -1; /* auto: as the HF table the source came from */
  double norm_std = 0;
  int rest = argc - 2;
  char **rv = argv + 2;
  int rc = gt__convert_opts(&rest, rv, &o, &norm_std);
  if (rc) return rc;
  int init = !strcmp(src, "init");
  /* a source brings its own config; only the adapters to merge into it
   * (lora_restore_path, and the base storage they were trained over) are
   * the user's */
  int bad = -1;
  for (int i = 0; !init && i < rest && bad < 0; i++)
    if (strncmp(rv[i], "lora_restore_path=", 18) && strncmp(rv[i], "hf_lora_adapter_path=", 21) &&
        strncmp(rv[i], "lora_weight_qtype=", 18) && strncmp(rv[i], "lora_embedding_qtype=", 21))
      bad = i;
  if (!init && (bad >= 0 || norm_std > 0)) {
    fprintf(stderr,
            "gemtrain convert: '%s' is for to_hf init only; the source's own config is used (a source takes "
            "lora_restore_path=, lora_weight_qtype= and lora_embedding_qtype= alone)\n",
            bad >= 0 ? rv[bad] : "init_norm_std");
    return 2;
  }
  gt_config cfg;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_err err;
  gt_err_clear(&err);
  if (init) {
    if ((rc = gt_cli_load_config(rest, rv, &cfg))) return rc;
    if (gt_model_build(&m, &cfg, &err) || gt_model_alloc_inference(&m, &mem, &err)) {
      fprintf(stderr, "gemtrain: %s\n", err.msg);
      gt_model_free(&m);
      return 2;
    }
    if (gt_model_init_params(&m, (uint64_t)cfg.init_weights_seed, cfg.weight_init_scale)) {
      fprintf(stderr, "gemtrain: no memory to initialise the stored-quantized tensors of the frozen base\n");
      gt_model_free(&m);
      return 2;
    }
    if (norm_std > 0) {
      gt_model_init_norms(&m, (uint64_t)cfg.init_weights_seed, norm_std);
      /* Gemma 4 norms (and layer_scalar) hold the multiplier itself: noise
       * around 1, as Gemma 3's w is noise around 0 in its (1 + w) */
      for (int i = 0; i < m.n_tensors && m.norm_offset == 0.0f; i++)
        if (m.tensors[i].ndim == 1)
          for (int64_t k = 0; k < m.tensors[i].numel; k++) m.params[m.tensors[i].offset + k] += 1.0f;
    }
  } else if ((rc = gt_cli_load_config(rest, rv, &cfg)) || (rc = gt_cli_load_params(src, 1, &cfg, &m, &mem, NULL))) {
    return rc;
  }
  gt_threads_configure(&cfg);
  /* pad_vocab=auto: a Gemma 3 table goes back with the rows of the HF table
   * the source was read from (262208 for 4b and up, 262144 for 1b and 270m) */
  long long src_rows = 0;
  int auto_pad = o.pad_vocab < 0;
  if (auto_pad && !init && gt_hf_source_rows(src, &src_rows, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_model_free(&m);
    return 2;
  }
  if (auto_pad) o.pad_vocab = src_rows == GT_HF_GEMMA3_ROWS;
  gt_hf_info info;
  if (gt_hf_export(&m, &cfg, out, &o, &info, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_model_free(&m);
    return 2;
  }
  char where[96] = "model.safetensors";
  if (o.max_shard_bytes)
    snprintf(where, sizeof where, "shards of at most %llu bytes + index", (unsigned long long)o.max_shard_bytes);
  int64_t n_base = gt_model_numel(&m);
  for (int i = 0; i < m.n_tensors; i++)
    if (gt_peft_is_adapter(m.tensors[i].name, NULL, 0, NULL)) n_base -= m.tensors[i].numel;
  char padded[160] = "";
  if (info.embed_rows != m.vocab)
    snprintf(padded, sizeof padded, " (zero-padded from the model's %lld: %s)", (long long)m.vocab,
             auto_pad ? "the source's Hugging Face table has 262208 rows" : "pad_vocab=true");
  printf("convert: wrote %s: config.json and %d tensors in %s (%s), %lld parameters; embedding %lld rows%s\n", out,
         info.n_tensors, where, info.dtype, (long long)n_base, info.embed_rows, padded);
  if (info.n_merged)
    printf("convert: merged the adapters of %d projections (W + %.6g * B A)\n", info.n_merged, gt_peft_scale(&cfg));
  /* the tokenizer and generation_config.json: from the HF directory the
   * source descends from, else the run's tokenizer_path */
  char hf_dir[GT_STR_PATH] = "", tok[GT_STR_PATH] = "";
  gt_hf_extras ex;
  if ((!init && gt_hf_source_origin(src, hf_dir, sizeof hf_dir, tok, sizeof tok, &err)) ||
      (init && (snprintf(tok, sizeof tok, "%s", cfg.tokenizer_path), 0)) ||
      gt_hf_write_extras(&cfg, hf_dir, tok, out, &ex, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_model_free(&m);
    return 2;
  }
  printf("convert: %s; generation_config.json %s\n",
         ex.copied_tokenizer ? (tok[0] ? "tokenizer.json from the run's tokenizer_path"
                                       : "tokenizer files copied from the source's HF directory")
         : ex.has_tokenizer  ? "tokenizer.json kept: it was in the output directory already"
                             : m.vocab == GT_BYTE_VOCAB ? "no tokenizer files (the model uses byte tokens)"
                                                        : "no tokenizer files (the source names none: give the "
                                                          "directory the model's tokenizer.json before decoding)",
         ex.wrote_generation_config    ? "written (Gemma's defaults)"
         : ex.copied_generation_config ? "copied from the source's HF directory"
                                       : "kept: it was in the output directory already");
  gt_model_free(&m);
  return 0;
}

/* A PEFT adapter directory from a model with adapters: a run's checkpoint,
 * or a base with lora_restore_path (a copy). */
static int gt__to_peft(int argc, char **argv) {
  if (argc < 2) {
    gt_cli_help(stderr, "convert", NULL);
    return 2;
  }
  const char *src = argv[0], *out = argv[1];
  gt_config cfg;
  int rc = gt_cli_load_config(argc - 2, argv + 2, &cfg);
  if (rc) return rc;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  if ((rc = gt_cli_load_params(src, 1, &cfg, &m, &mem, NULL))) return rc;
  gt_err err;
  gt_err_clear(&err);
  if (!gt_peft_count(&m)) {
    fprintf(stderr, "gemtrain: convert to_peft: '%s' holds no adapters (a run trained with enable_lora=true, or "
                    "lora_restore_path=DIR)\n", src);
    gt_model_free(&m);
    return 2;
  }
  /* PEFT names modules as the base model's HF class does */
  char hf_dir[GT_STR_PATH] = "", tok[GT_STR_PATH] = "";
  gt_hf_info hi;
  memset(&hi, 0, sizeof hi);
  const char *base = NULL;
  if (gt_hf_source_origin(src, hf_dir, sizeof hf_dir, tok, sizeof tok, &err) == GT_OK && hf_dir[0]) {
    gt_config tmp = cfg;
    if (gt_hf_config_read(hf_dir, &tmp, &hi, &err) == GT_OK) base = hf_dir;
  }
  gt_peft_write_opts o = {gt_peft_hf_prefix(hi.architecture), base};
  int n = 0;
  if (gt_peft_write(&m, m.params, &cfg, &o, out, &n, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_model_free(&m);
    return 2;
  }
  printf("convert: wrote %s: %s and %s (%d tensors, r=%lld, lora_alpha=%g%s, names under %s%s), base model %s\n", out,
         GT_PEFT_CONFIG_FILE, GT_PEFT_WEIGHTS_FILE, n, cfg.lora_rank, cfg.lora_alpha,
         cfg.lora_use_rslora ? ", rslora" : "", GT_PEFT_NAME_ROOT, o.hf_prefix, base ? base : "(not an HF directory)");
  gt_model_free(&m);
  return 0;
}

/* A checkpoint at step 0 (zero AdamW moments) in <dir>/checkpoints, so the
 * result is a run directory that load_parameters_path and to_hf take; its
 * header records the HF table's rows (hf_rows). */
static gt_rc gt__write_checkpoint(const char *dir, const gt_model *m, const gt_config *cfg, long long hf_rows,
                                  gt_err *err) {
  float *zeros = calloc((size_t)m->n_params ? (size_t)m->n_params : 1, sizeof(float));
  if (!zeros) return gt_err_set(err, GT_ERR_NOMEM, "convert: no memory for %lld moments", (long long)m->n_params);
  const float *p[1] = {m->params}, *z[1] = {zeros};
  gt_ckpt_src src = {1, p, z, z};
  gt_ckpt_state st = {0, 0, {0, 0}, 1, 1, 0, {0}, {0}, 0};
  char root[2100];
  snprintf(root, sizeof root, "%s/checkpoints", dir);
  char *cj = gt_config_to_json(cfg);
  gt_rc rc = gt_ckpt_save_hf(root, m, &src, &st, cj, hf_rows, err);
  free(cj);
  free(zeros);
  return rc;
}

/* field = the absolute path of path (which may be field itself); prints
 * the error. */
static int gt__absolute(const char *key, const char *path, char *field, size_t n) {
  char *abs = realpath(path, NULL);
  if (!abs) {
    fprintf(stderr, "gemtrain: convert: cannot resolve '%s' (key '%s' of the written config) to an absolute path\n",
            path, key);
    return 1;
  }
  size_t len = strlen(abs);
  if (len >= n) {
    fprintf(stderr,
            "gemtrain: convert: '%s' (key '%s' of the written config) is %zu characters long; the key holds at most "
            "%zu\n",
            abs, key, len, n - 1);
    free(abs);
    return 2;
  }
  memcpy(field, abs, len + 1);
  free(abs);
  return 0;
}

static int gt__from_hf(int argc, char **argv) {
  if (argc != 2) {
    gt_cli_help(stderr, "convert", NULL);
    return 2;
  }
  const char *dir = argv[0], *out = argv[1];
  if (!gt_hf_is_dir(dir)) {
    fprintf(stderr,
            "gemtrain: convert: '%s' is not a Hugging Face directory (config.json with model.safetensors or "
            "model.safetensors.index.json)\n",
            dir);
    return 2;
  }
  gt_config cfg;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_hf_info info;
  int rc = gt__convert_defaults(&cfg);
  if (rc || (rc = gt_cli_load_params(dir, 1, &cfg, &m, &mem, &info))) return rc;
  /* the written config names the HF directory as the model it was loaded
   * from (load_parameters_path, as a run started from the directory records
   * it) and the directory's tokenizer.json, both by absolute paths: to_hf
   * finds the directory's tokenizer files and generation_config.json
   * through it (gt_hf_source_origin), and decode its tokenizer, from any
   * working directory */
  if ((rc = gt__absolute("load_parameters_path", dir, cfg.load_parameters_path, sizeof cfg.load_parameters_path)) ||
      (cfg.tokenizer_path[0] &&
       (rc = gt__absolute("tokenizer_path", cfg.tokenizer_path, cfg.tokenizer_path, sizeof cfg.tokenizer_path)))) {
    gt_model_free(&m);
    return rc;
  }
  gt_err err;
  gt_err_clear(&err);
  size_t ol = strlen(out);
  int as_file = ol > 12 && !strcmp(out + ol - 12, ".safetensors");
  /* the table's rows go with the model, so to_hf pads it back to them */
  if (as_file ? gt_paramfile_write_hf(out, &m, &cfg, info.embed_rows, &err)
              : gt__write_checkpoint(out, &m, &cfg, info.embed_rows, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_model_free(&m);
    return 2;
  }
  printf("convert: read %s (%s%s, prefix '%s', %s in %d file%s, embedding %lld rows): %s, %lld layers, d=%lld, "
         "H=%lld, K=%lld, head_dim=%lld, F=%lld, vocab=%lld, layer_pattern %s, window %lld\n",
         dir, info.architecture, info.multimodal ? " text decoder" : "", info.prefix, info.dtype, info.n_files,
         info.n_files == 1 ? "" : "s",
         info.embed_rows, cfg.decoder_block, cfg.base_num_decoder_layers, cfg.base_emb_dim, cfg.base_num_query_heads,
         cfg.base_num_kv_heads, cfg.head_dim, cfg.base_mlp_dim, cfg.vocab_size, cfg.layer_pattern,
         cfg.sliding_window_size);
  if (info.n_ignored)
    printf("convert: skipped %d tensor%s that are not the text decoder's (e.g. '%s')\n", info.n_ignored,
           info.n_ignored == 1 ? "" : "s", info.first_ignored);
  if (info.n_unused_shared_kv)
    printf("convert: skipped %d k/v tensor%s of KV-shared layers (transformers drops them too)\n",
           info.n_unused_shared_kv, info.n_unused_shared_kv == 1 ? "" : "s");
  if (info.n_unused_scalars)
    printf("convert: skipped %d layer_scalar buffer%s (layer_scalar_trainable=false: the model multiplies by 1)\n",
           info.n_unused_scalars, info.n_unused_scalars == 1 ? "" : "s");
  printf("convert: wrote %s%s (%lld parameters, F32)\n", out, as_file ? "" : "/checkpoints/step_00000000",
         (long long)gt_model_numel(&m));
  gt_model_free(&m);
  return 0;
}

int gt_cmd_convert(int argc, char **argv) {
  /* convert has no options; main puts them first, but a file name keeps
   * its place, so look at every argument */
  for (int i = 0; i < argc; i++)
    if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "gemtrain convert: unknown option '%s'\n", argv[i]);
      return 2;
    }
  if (argc < 1) {
    gt_cli_help(stderr, "convert", NULL);
    return 2;
  }
  if (!strcmp(argv[0], "to_hf") && argc >= 3) return gt__to_hf(argc - 1, argv + 1);
  if (!strcmp(argv[0], "from_hf")) return gt__from_hf(argc - 1, argv + 1);
  if (!strcmp(argv[0], "to_peft")) return gt__to_peft(argc - 1, argv + 1);
  if (strcmp(argv[0], "to_hf"))
    fprintf(stderr, "gemtrain convert: unknown direction '%s'; expected to_hf, to_peft or from_hf\n", argv[0]);
  else
    gt_cli_help(stderr, "convert", NULL);
  return 2;
}
