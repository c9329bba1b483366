/* A model source: what load_parameters_path names, resolved in one place
 * for every caller (train, the gt_ctx library, decode, convert, logit-check).
 *
 * A path is one of
 *   - a gemtrain checkpoint: a step directory (step_<N>), a checkpoints
 *     directory, or a run directory with checkpoints/ in it. It resolves to
 *     one step directory: the path itself, or the one `latest` names (the
 *     newest step directory when there is no `latest`);
 *   - a Hugging Face directory: config.json with model.safetensors or
 *     model.safetensors.index.json (hf.h);
 *   - a gemtrain parameter file: the safetensors of gt_ctx_save or convert
 *     from_hf, its config in the metadata (paramfile.h).
 * Each carries its own model, so the source, not the preset, defines the
 * model keys (the key table's GT_KEY_MODEL keys: dimensions, layer pattern,
 * window, RoPE, norms, Gemma 4 and MoE layout).
 *
 * Model keys the user set: a model key that the user set explicitly (the
 * user config file or a key=value override, gt_config_is_user_set) to a
 * value other than the source's is REFUSED (GT_ERR_CONFIG naming the key,
 * both values and the path), never silently replaced: the user asked for a
 * model the source does not hold, and running the source's would answer a
 * different question than the one asked. An explicit key equal to the
 * source's is accepted. Model keys from base.json or a preset are replaced
 * without a word: naming a preset (or none) only chose defaults. model_name is
 * not a model key: it becomes the name of what was loaded.
 *
 * A damaged checkpoint is refused naming the file, not walked back to an
 * older one: a new run starts from the parameters it was pointed at, and the
 * description names exactly what is loaded. (Resuming a run walks back:
 * that is the trainer's gt_ckpt_load_latest on the run's own checkpoints.)
 *
 * It lives in hf/, the highest of the file formats, because it reads all
 * three: hf/ uses ckpt/, never the reverse (tools/layers.txt). */
#ifndef GT_MODEL_SOURCE_H
#define GT_MODEL_SOURCE_H

#include "base/common.h"
#include "config/config.h"
#include "hf/hf.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_model_source_kind {
  GT_SRC_CHECKPOINT = 1, /* a gemtrain step directory */
  GT_SRC_HF,             /* a Hugging Face directory */
  GT_SRC_PARAMFILE       /* a gemtrain parameter file */
} gt_model_source_kind;

typedef struct gt_model_source {
  gt_model_source_kind kind;
  char path[GT_STR_PATH];   /* as given */
  char dir[GT_STR_PATH + 64]; /* checkpoint: the resolved step directory; else path */
  char name[GT_STR_SHORT];  /* what apply_config puts into model_name */
  char desc[2 * GT_STR_PATH + 512]; /* one line for the console, no newline */
  /* The source's model: configs/base.json's defaults overridden by the
   * checkpoint's or parameter file's stored config, or by config.json's
   * model keys (validated). */
  gt_config cfg;
  /* HF: what config.json said (open) and, after load_params, what the
   * import found (prefix, dtype, files, skipped tensors). */
  gt_hf_info hf;
  /* A PEFT adapter directory (lora_restore_path, peft.h) whose adapters
   * load_params reads after the base; set by apply_config. */
  char lora_dir[GT_STR_PATH];
  /* After load_params: a note for the console when the source's frozen
   * base was stored quantized (or in bf16) and the reader stores it
   * otherwise, so its values were rounded a second time ("" else). */
  char converted[GT_STR_PATH + 640];
} gt_model_source;

/* Classifies path and reads the model it holds. Refuses (naming the path and
 * what is there) a path that does not exist or is none of the three kinds,
 * and a source whose config cannot be read. */
gt_rc gt_model_source_open(const char *path, gt_model_source *src, gt_err *err);

/* Replaces cfg's model keys with the source's and model_name with src->name,
 * keeping every other key (max_target_length, devices, batch, remat, ...),
 * then validates cfg. A model key the user set (gt_config_is_user_set) to
 * another value than the source's is refused, see above; cfg is unchanged
 * on failure.
 *
 * The tokenizer: unless the user set tokenizer_path (set empty, byte
 * tokens), cfg->tokenizer_path becomes the source's: a Hugging Face
 * directory's tokenizer.json when it has one, or the tokenizer_path a
 * checkpoint's or parameter file's stored config names (the order
 * gt_decode_tokenizer takes, decode/text.h); a source without one leaves it
 * as it is. The data source then reads text with the model's tokenizer, and
 * a run's config records it.
 *
 * Adapters: a checkpoint of a run that trained low-rank adapters
 * (enable_lora) holds them, so its adapter keys (enable_lora, lora_rank,
 * lora_alpha, lora_use_rslora, lora_module_path, lora_weight_qtype) define
 * the model as the model keys do, with the same rule for keys the user set;
 * its lora_dropout is taken too unless the user set one (dropout changes
 * training only, so an explicit value is kept, not refused).
 * Then cfg's lora_restore_path, when set, names a PEFT directory whose keys
 * cfg takes (gt_peft_apply_config) and whose adapters load_params reads
 * after the base (recorded in src->lora_dir).
 *
 * An HF Gemma 4 source applied with layer_scalar_trainable=false: its
 * layer_scalar buffers, which that model does not use, are counted into
 * src->hf (n_unused_scalars, n_unused_scalars_not_one: gt_hf_scan_scalars),
 * so the caller can tell the user before loading that the model differs
 * from the checkpoint's; load_params counts them again. */
gt_rc gt_model_source_apply_config(gt_model_source *src, gt_config *cfg, gt_err *err);

/* Fills params (n_params floats of m's layout, the caller's buffer) with the
 * source's parameters. m must be built from a config the source was applied
 * to; every tensor is checked against m's table. Checkpoints: parameters
 * only (resuming the full state is gt_ckpt_load_latest). HF: records what
 * the import found in src->hf. An HF directory or a parameter file holds no
 * adapters: their tensors are left as they are (the caller initialises
 * them) unless src->lora_dir names a PEFT directory to read them from. */
gt_rc gt_model_source_load_params(gt_model_source *src, const gt_model *m, float *params, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
