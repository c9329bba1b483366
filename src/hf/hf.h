/* gemtrain <-> Hugging Face Gemma 3 and Gemma 4 checkpoints
 * (the Gemma spec (kept outside the repository), sections 2, 3, 6 and 8).
 *
 * An HF directory holds config.json (Gemma3ForCausalLM / model_type
 * gemma3_text, or the multimodal wrapper Gemma3ForConditionalGeneration /
 * gemma3 with a text_config) and model.safetensors, or shards listed by
 * model.safetensors.index.json. gemtrain already keeps its parameters under
 * HF's names (without the prefix) in HF's [out, in] layout, so conversion is
 * a rename plus two things MaxText also does: the 262208-row HF embedding
 * of Gemma 3 4b and up (262144 tokens + the image token + padding) is
 * truncated to 262144 rows on import and zero-padded back on export when
 * asked (pad_vocab: the caller asks for a model that came from such a
 * table; 1b and 270m have 262144 rows).
 *
 * Norm weights: Gemma 3 stores w and applies (1 + w), in HF and in gemtrain
 * (gt_model.norm_offset = 1, used as off + w by the RMSNorm kernels), so they
 * are copied unchanged in both directions. (MaxText stores 1 + w instead and
 * converts; gemtrain does not.)
 *
 * Gemma 4 (Gemma4ForCausalLM / gemma4_text, or Gemma4ForConditionalGeneration
 * / gemma4 with a text_config; tensors under model. or model.language_model.)
 * is converted by the same table walk: its norms hold the scale itself, in HF
 * and in gemtrain, and are copied unchanged; its 262144-row embedding is not
 * padded; the PLE table has vocab_size_per_layer_input rows, unpadded. What
 * differs is what one side has and the other lacks: HF keeps layer_scalar as
 * a buffer in every layer (exported always; imported only when
 * layer_scalar_trainable makes it a parameter), and HF drops the k/v
 * projections and norms of KV-shared layers on load (ignored if present).
 *
 * The conversion works on a gt_model with its parameters in memory and its
 * gt_config, independent of gemtrain's own file container. */
#ifndef GEMTRAIN_HF_H
#define GEMTRAIN_HF_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "model/model.h"
#include "ckpt/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_HF_GEMMA3_VOCAB 262144LL /* tokenizer entries: gemtrain's vocab_size */
#define GT_HF_GEMMA3_ROWS 262208LL  /* rows of the HF embedding table (4b and up) */

/* What an import found (or an export wrote). */
typedef struct gt_hf_info {
  int multimodal;                  /* config.json was the gemma3 wrapper */
  long long max_position_embeddings;
  char prefix[32];                 /* tensor name prefix: "model.", "model.language_model.", ... */
  long long embed_rows;            /* rows of embed_tokens.weight in the files */
  char dtype[8];                   /* "F32", "BF16", "F16" or "mixed" */
  int n_files;                     /* safetensors files */
  int n_tensors;                   /* tensors written (export) or loaded (import) */
  int n_ignored;                   /* tensors that are not the text decoder's (vision tower, lm_head) */
  char first_ignored[256];
  char architecture[48];           /* "Gemma3ForCausalLM", "Gemma4ForConditionalGeneration", ... */
  /* Gemma 4 import: tensors HF saves that this model does not use */
  int n_unused_scalars;            /* layer_scalar buffers (layer_scalar_trainable = false) */
  int n_unused_scalars_not_one;    /* ... of them holding a value other than 1 */
  int n_unused_shared_kv;          /* k/v projections and norms of KV-shared layers */
  int n_merged;                    /* export: projections written with their adapters merged */
} gt_hf_info;

/* ---- config.json <-> gt_config ---- */

/* Sets cfg's model keys (decoder_block, vocab_size, base_emb_dim, heads,
 * head_dim, base_mlp_dim, layers, sliding_window_size, layer_pattern,
 * query_pre_attn_scalar, RoPE bases and scale, epsilon, soft-cap; for Gemma 4
 * also its keys and, where this gemtrain has them, the MoE keys) from an HF
 * config.json given as text; every other key of cfg is left as it is. Keys
 * the file omits take Gemma3TextConfig's or Gemma4TextConfig's defaults, as
 * transformers does. A
 * value gemtrain cannot run (another model_type, rope type, activation,
 * attention soft-cap, bias, untied head, ...) is refused naming the key.
 * `where` names the file in messages. info may be NULL. */
gt_rc gt_hf_config_parse(const char *json, const char *where, gt_config *cfg, gt_hf_info *info, gt_err *err);
/* The same from a file (config.json, or a directory holding it). */
gt_rc gt_hf_config_read(const char *path, gt_config *cfg, gt_hf_info *info, gt_err *err);
/* GT_OK if cfg has an HF config.json that transformers runs as gemtrain
 * does; else refuses naming the key (Gemma 4: v_norm_with_scale,
 * query_pre_attn_scalar other than 1, global_num_kv_heads without
 * share_kv_projections, a last layer that is not global, a MoE layout HF
 * cannot hold); Gemma 3: a query_pre_attn_scalar that is not a whole
 * number (Gemma3TextConfig declares it an int). */
gt_rc gt_hf_config_exportable(const gt_config *cfg, gt_err *err);
/* The config.json transformers loads for this model: Gemma3ForCausalLM with
 * `embed_rows` as vocab_size, or (decoder_block gemma4*) Gemma4ForCausalLM
 * (embed_rows unused); torch_dtype "float32" or "bfloat16". Call
 * gt_hf_config_exportable first. Heap string, caller frees (NULL when out of
 * memory). */
char *gt_hf_config_to_json(const gt_config *cfg, long long embed_rows, const char *torch_dtype);

/* ---- parameters ---- */

typedef struct gt_hf_export_opts {
  gt_dtype dtype;           /* GT_DT_F32 or GT_DT_BF16 (round to nearest even) */
  uint64_t max_shard_bytes; /* 0: one model.safetensors; else shards + index json */
  int pad_vocab;            /* 1: a Gemma 3 262144-row embedding is written with 262208 rows */
} gt_hf_export_opts;

/* Default options: BF16 (what HF ships), one file, no padding (the caller
 * pads when the model came from a 262208-row table: gt_hf_source_rows). */
gt_hf_export_opts gt_hf_export_defaults(void);

/* Writes out_dir/config.json and the safetensors (names "model." + gemtrain's
 * names) of a model whose parameters are in m->params. Creates out_dir.
 * Low-rank adapters (peft.h) are merged: each adapted projection is written
 * as W + scale * B A (scale from cfg's lora keys, the sum over the rank in
 * double), the adapter tensors themselves are not written.
 * Gemma 4: every layer gets model.layers.N.layer_scalar (the parameter, or
 * the constant the model uses when it is not trained); pad_vocab does not
 * apply. Refuses what gt_hf_config_exportable refuses. */
gt_rc gt_hf_export(const gt_model *m, const gt_config *cfg, const char *out_dir, const gt_hf_export_opts *o,
                   gt_hf_info *info, gt_err *err);

/* Fills m->params (m built from the matching config and allocated) from an
 * opened HF safetensors set: finds the prefix, checks that every tensor the
 * model needs is there with its shape (a 262208-row embedding for a
 * 262144-token model is truncated), converts F32/BF16/F16 to float32 and
 * counts the tensors it did not need. `where` names the checkpoint.
 * Adapter tensors of m (peft.h) are not the base's and are left as they are.
 * Gemma 4: layer_scalar buffers the model has no parameter for, and k/v
 * projections and norms of KV-shared layers, are counted apart (see
 * gt_hf_info) and not loaded. */
gt_rc gt_hf_import_params(gt_model *m, const gt_st_set *set, const char *where, gt_hf_info *info, gt_err *err);

/* Gemma 4 with layer_scalar_trainable=false, before any model is built:
 * counts the layer_scalar buffers of an opened HF set (under the prefix the
 * import would use) into info->n_unused_scalars, and those that do not hold
 * exactly 1 into info->n_unused_scalars_not_one; the model multiplies by 1
 * instead, so with any of the latter it is not the checkpoint's model.
 * `where` names the checkpoint. */
gt_rc gt_hf_scan_scalars(const gt_st_set *set, const char *where, gt_hf_info *info, gt_err *err);

/* ---- the rest of a model directory ---- */

typedef struct gt_hf_extras {
  int n_copied;                /* files copied from the source */
  int has_tokenizer;           /* out_dir has tokenizer.json */
  int copied_tokenizer;        /* ... copied now (from hf_dir or tokenizer_path) */
  int copied_generation_config; /* generation_config.json copied from hf_dir */
  int wrote_tokenizer_config;  /* tokenizer_config.json written (the source had none) */
  int wrote_generation_config; /* generation_config.json written (the source had none, nor out_dir) */
} gt_hf_extras;

/* Where a model source (load_parameters_path, model_source.h) comes from:
 * hf_dir gets the Hugging Face directory it is or descends from (a run
 * started from one, a run started from that run's checkpoint, ...), "" when
 * none; tokenizer the first tokenizer_path met on the way ("" when none). */
gt_rc gt_hf_source_origin(const char *path, char *hf_dir, size_t hn, char *tokenizer, size_t tn, gt_err *err);

/* The rows of the Hugging Face embedding table a model source (path, as for
 * gt_hf_source_origin) descends from, 0 when none is known: an HF
 * directory's own (its config.json's vocab_size), or the one a checkpoint or
 * parameter file of convert from_hf records (gt_ckpt_read_hf_rows,
 * gt_paramfile_read_hf_rows), found through the load_parameters_path each
 * run's config names. */
gt_rc gt_hf_source_rows(const char *path, long long *rows, gt_err *err);

/* Makes out_dir (holding config.json and the weights) a drop-in HF model
 * directory: copies from hf_dir (may be NULL or "") the chat templates and
 * generation_config.json it has, and its tokenizer files (tokenizer.json,
 * tokenizer_config.json, tokenizer.model, special_tokens_map.json,
 * added_tokens.json) unless tokenizer_path (may be NULL or "": the run's)
 * is set; that one is copied as tokenizer.json, with the
 * tokenizer_config.json beside it, or writes a Gemma one (<bos> <eos> <pad>
 * <unk>, add_bos_token); without a generation_config.json, writes Google's
 * Gemma defaults (bos 2, eos [1, the end-of-turn token when the tokenizer
 * has one], pad 0, top_k 64, top_p 0.95). A model with byte tokens gets
 * generation_config.json alone. */
gt_rc gt_hf_write_extras(const gt_config *cfg, const char *hf_dir, const char *tokenizer_path, const char *out_dir,
                         gt_hf_extras *info, gt_err *err);

/* 1 if path is a directory holding config.json and model.safetensors or
 * model.safetensors.index.json. */
int gt_hf_is_dir(const char *path);

/* What load_parameters_path does with an HF directory: dir's config.json
 * defines the model (its model keys replace cfg's; the rest of cfg, such as
 * max_target_length, stays), then the model is built, its parameters and
 * RoPE tables allocated from mem (no gradient buffer: m->grads is NULL) and
 * filled from the safetensors. On failure m is freed. info may be NULL. */
gt_rc gt_hf_load_model(const char *dir, gt_config *cfg, gt_model *m, gt_mem *mem, gt_hf_info *info, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
