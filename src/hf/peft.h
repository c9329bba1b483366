/* Low-rank adapters <-> Hugging Face PEFT adapter directories.
 *
 * gemtrain keeps an adapter as two ordinary float32 tensors of the model's
 * table, named after the projection they adapt: the base
 * "layers.3.self_attn.q_proj.weight" [out, in] gets
 * "layers.3.self_attn.q_proj.lora_A.weight" [r, in] and
 * "layers.3.self_attn.q_proj.lora_B.weight" [out, r]; the projection computes
 * y = x W^T + scale * (x A^T) B^T with scale = lora_alpha / lora_rank
 * (lora_use_rslora: lora_alpha / sqrt(lora_rank)).
 *
 * A PEFT directory (what PeftModel.save_pretrained writes and
 * PeftModel.from_pretrained reads) is
 *   adapter_config.json        LoraConfig: peft_type LORA, r, lora_alpha,
 *                              use_rslora, target_modules, ...
 *   adapter_model.safetensors  the same tensors under the name of the module
 *                              inside PeftModel: "base_model.model." + the HF
 *                              model's module path, e.g.
 *                              base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight
 *                              for Gemma3ForCausalLM / Gemma4ForCausalLM,
 *                              base_model.model.model.language_model.layers.3...
 *                              for the multimodal Gemma3ForConditionalGeneration
 *                              / Gemma4ForConditionalGeneration.
 * The shapes are PEFT's and gemtrain's alike (lora_A [r, in], lora_B
 * [out, r]), so the tensors are copied, never transposed.
 *
 * What gemtrain does not implement is refused on reading, naming the option:
 * use_dora, bias other than "none", lora_bias, modules_to_save,
 * rank_pattern / alpha_pattern, layers_to_transform / layers_pattern,
 * layer_replication, fan_in_fan_out, an init_lora_weights that changes the
 * base (pissa, olora, loftq, corda) or is not known, loftq_config,
 * trainable_token_indices, target_parameters, use_qalora, megatron_config,
 * any other option it does not know set to a value (absent, null, false or
 * empty is accepted), a task_type other than CAUSAL_LM, and adapter tensors
 * other than lora_A / lora_B of a linear projection (embedding adapters,
 * DoRA magnitudes, saved modules). */
#ifndef GEMTRAIN_PEFT_H
#define GEMTRAIN_PEFT_H

#include <stddef.h>

#include "base/common.h"
#include "config/config.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_PEFT_CONFIG_FILE "adapter_config.json"
#define GT_PEFT_WEIGHTS_FILE "adapter_model.safetensors"
#define GT_PEFT_NAME_ROOT "base_model.model."

/* 1 when `name` is an adapter tensor of gemtrain's table (ends in
 * ".lora_A.weight" or ".lora_B.weight"); then base (if not NULL) gets the
 * adapted tensor's name ("...q_proj.weight") and *is_b says which of the two
 * it is. 0 otherwise. */
int gt_peft_is_adapter(const char *name, char *base, size_t n, int *is_b);

/* The output scale of the adapters a config trains: lora_alpha / lora_rank,
 * or lora_alpha / sqrt(lora_rank) with lora_use_rslora. */
double gt_peft_scale(const gt_config *cfg);

/* The tensor-name prefix of the text decoder inside the HF model: "model."
 * (Gemma3ForCausalLM, Gemma4ForCausalLM) or "model.language_model." (the
 * multimodal *ForConditionalGeneration), from an architecture name. */
const char *gt_peft_hf_prefix(const char *architecture);

/* gemtrain name -> PEFT name: GT_PEFT_NAME_ROOT + hf_prefix + name. */
void gt_peft_tensor_name(const char *name, const char *hf_prefix, char *out, size_t n);
/* PEFT name -> gemtrain name: strips GT_PEFT_NAME_ROOT (when present:
 * transformers' own adapter integration saves without it) and one of the text
 * decoder's prefixes ("model.", "model.language_model.",
 * "language_model.model."); an adapter name PEFT keeps while training
 * (".lora_A.default.weight") reads as the saved one. 0 when the name is not
 * under the text decoder. */
int gt_peft_parse_name(const char *peft_name, char *out, size_t n);

/* What an adapter_config.json says (the options gemtrain implements). */
typedef struct gt_peft_config {
  long long r;
  double alpha;
  int use_rslora;
  double dropout;
  char base_model[GT_STR_PATH]; /* base_model_name_or_path ("" when null) */
} gt_peft_config;

/* Parses adapter_config.json text; refuses what gemtrain does not implement
 * naming the option (see above). `where` names the file in messages. */
gt_rc gt_peft_parse_config(const char *json, const char *where, gt_peft_config *pc, gt_err *err);

/* Takes a PEFT directory's adapter keys into cfg before the model is built
 * (lora_restore_path = dir): enable_lora, lora_rank (r), lora_alpha,
 * lora_use_rslora and lora_dropout become the file's, and lora_module_path
 * an expression choosing exactly the projections the file has adapters for.
 * A key the user set (gt_config_is_user_set) to another value than the
 * file's is refused naming the key and both values; lora_module_path and
 * lora_dropout are the exceptions: an explicit lora_module_path is kept and
 * must choose the file's projections (checked by gt_peft_load, naming the
 * tensor), an explicit lora_dropout is kept (it only changes training).
 * The adapter tensors must be lora_A/lora_B pairs of rank r. */
gt_rc gt_peft_apply_config(const char *dir, gt_config *cfg, gt_err *err);
/* The base model the directory's adapters were trained over, as its
 * adapter_config.json names it (base_model_name_or_path), into buf: 1, or
 * 0 with buf "" when it names none or cannot be read. PEFT does not check
 * it against the model it loads adapters onto, and neither does gemtrain
 * (a local path and a hub id may name the same model): the commands print
 * it beside the base they load. */
int gt_peft_base_model(const char *dir, char *buf, size_t n);

/* Fills the adapter tensors of m (in params, a flat buffer of m's layout)
 * from a PEFT directory. Every adapter the model has must be in the file and
 * every adapter of the file in the model, with the model's shapes; refused
 * otherwise naming the tensor, expected vs found. *n_loaded (may be NULL)
 * gets the number of tensors read. */
gt_rc gt_peft_load(const char *dir, const gt_model *m, float *params, int *n_loaded, gt_err *err);

/* Options of a PEFT directory written by gemtrain. */
typedef struct gt_peft_write_opts {
  const char *hf_prefix;  /* NULL: "model." */
  const char *base_model; /* base_model_name_or_path (NULL or "": null) */
} gt_peft_write_opts;

/* Writes out_dir/adapter_config.json and out_dir/adapter_model.safetensors
 * (float32) from the adapters of m (params: a flat buffer of m's layout)
 * trained with cfg's keys. target_modules is a list of module names
 * (["q_proj", "v_proj"]) when every layer that has such a projection adapts
 * it and the model is text-only, else an expression PEFT matches against
 * whole module names. Refuses a model without adapters. *n_written (may be
 * NULL) gets the tensor count. */
gt_rc gt_peft_write(const gt_model *m, const float *params, const gt_config *cfg, const gt_peft_write_opts *o,
                    const char *out_dir, int *n_written, gt_err *err);

/* w [out, in] += scale * b [out, r] a [r, in], each element's sum over r in
 * double, rounded once: what merging one adapter into its base does. */
void gt_peft_merge_one(float *w, const float *a, const float *b, int64_t out, int64_t in, int64_t r, double scale);

/* The adapter pair of a base tensor of m (NULL, NULL when it has none). */
void gt_peft_pair(const gt_model *m, const gt_tensor_info *base, const gt_tensor_info **a, const gt_tensor_info **b);
/* Number of adapter pairs in m. */
int gt_peft_count(const gt_model *m);

#ifdef __cplusplus
}
#endif
#endif
