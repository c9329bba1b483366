/* Configuration, inside libgemtrain: the key table, layered loading,
 * validation and the derived per-layer quantities. The struct is private:
 * library users read and set keys by name (gt_ctx_get / gt_ctx_set), so a
 * new key never changes the ABI.
 *
 * Layers, each overriding the one before:
 *   configs/base.json  ->  configs/models/<model_name>.json  ->  user JSON file
 *   ->  key=value overrides (command line or API).
 * configs/base.json defines every key (it is the table of defaults); the key
 * table in config.c gives each key its type, valid range and description.
 * model_name is resolved first (from the later layers if they set it) so the
 * right preset is loaded. */
#ifndef GT_CONFIG_CONFIG_H
#define GT_CONFIG_CONFIG_H

#include <stdio.h>

#include "base/common.h"

#define GT_STR_SHORT 64
#define GT_STR_PATH 1024
#define GT_CONFIG_MAX_KEYS 256 /* bits of gt_config.user_set */

typedef struct gt_config {
  /* run */
  char model_name[GT_STR_SHORT];
  char run_name[GT_STR_PATH];
  char base_output_directory[GT_STR_PATH];
  int dump_config;
  int init_weights_seed;
  int data_shuffle_seed;
  long long steps;
  /* checkpoints */
  int enable_checkpointing;
  long long checkpoint_period;
  int save_checkpoint_on_completion;
  long long max_num_checkpoints_to_keep;
  long long checkpoint_compression;
  char load_parameters_path[GT_STR_PATH];
  char load_full_state_path[GT_STR_PATH];
  int skip_nonfinite_steps;
  int async_checkpointing;               /* a background writer per rank (ckpt/) */
  /* the spike guard (train/spike.h) */
  int skip_step_on_spikes;
  long long skip_step_interval;
  double skip_step_scaling_factor;
  /* model */
  char decoder_block[GT_STR_SHORT];
  long long vocab_size;
  long long base_emb_dim;
  long long base_num_query_heads;
  long long base_num_kv_heads;
  long long head_dim;
  long long base_mlp_dim;
  long long base_num_decoder_layers;
  long long sliding_window_size;
  char layer_pattern[GT_STR_SHORT];
  double query_pre_attn_scalar;
  double rope_max_timescale;
  double local_rope_max_timescale;
  double rope_linear_scaling_factor;
  double normalization_layer_epsilon;
  double final_logits_soft_cap;
  /* Gemma 4 (decoder_block gemma4 / gemma4_small); gemma3 leaves them at base.json's defaults */
  long long global_head_dim;             /* 0: head_dim */
  long long global_num_kv_heads;         /* 0: base_num_kv_heads */
  int share_kv_projections;              /* K = V on global layers (no v_proj) */
  double global_rope_proportion;
  double local_rope_proportion;
  int v_norm_with_scale;
  int layer_scalar_trainable;
  long long hidden_size_per_layer_input; /* PLE dim; 0: no per-layer embeddings */
  long long vocab_size_per_layer_input;  /* PLE table rows; 0: vocab_size */
  long long num_kv_shared_layers;
  int use_double_wide_mlp;
  /* Gemma 4 mixture of experts (num_experts 0 or 1: dense) */
  long long num_experts;
  long long num_experts_per_tok;
  long long base_moe_mlp_dim;
  long long shared_experts;
  double load_balance_loss_weight;
  double weight_init_scale;
  char dtype[GT_STR_SHORT];            /* float32 | bfloat16: activations and matmul inputs */
  char weight_dtype[GT_STR_SHORT];     /* float32: the master weights AdamW updates */
  char mu_dtype[GT_STR_SHORT];         /* float32 | bfloat16: AdamW's first moment */
  char matmul_precision[GT_STR_SHORT]; /* default (products round their inputs to dtype) | high | highest (inputs as they are) */
  /* batch and sequence */
  double per_device_batch_size;
  long long max_target_length;
  long long num_vocab_tiling;
  long long gradient_accumulation_steps;
  /* remat and memory */
  char remat_policy[GT_STR_SHORT];
  char remat_scope[GT_STR_SHORT];
  char query_proj[GT_STR_SHORT];
  char key_proj[GT_STR_SHORT];
  char value_proj[GT_STR_SHORT];
  char context[GT_STR_SHORT];
  char out_proj[GT_STR_SHORT];
  char mlpwi_0[GT_STR_SHORT];
  char mlpwi_1[GT_STR_SHORT];
  char mlpwo[GT_STR_SHORT];
  long long memory_limit_bytes;
  /* optimizer */
  char opt_type[GT_STR_SHORT];
  double learning_rate;
  char lr_schedule_type[GT_STR_SHORT];
  double warmup_steps_fraction;
  long long learning_rate_schedule_steps;
  double learning_rate_final_fraction;
  double wsd_decay_steps_fraction;       /* lr_schedule_type=wsd */
  char wsd_decay_style[GT_STR_SHORT];    /* linear | cosine */
  double z_loss_multiplier;              /* PaLM's auxiliary loss on log-sum-exp of the logits */
  double adam_b1;
  double adam_b2;
  double adam_eps;
  double adam_eps_root;
  double adam_weight_decay;
  double gradient_clipping_threshold;
  char trainable_parameters_mask[GT_STR_PATH];
  /* low-rank adapters over a frozen base */
  int enable_lora;
  long long lora_rank;
  double lora_alpha;
  int lora_use_rslora;
  char lora_module_path[GT_STR_PATH];
  double lora_dropout;
  char lora_weight_qtype[GT_STR_SHORT]; /* float32 | bfloat16 | int8 | nf4: the frozen base's storage */
  char lora_embedding_qtype[GT_STR_SHORT]; /* auto | float32 | bfloat16 | int8 | nf4: its embedding tables' */
  char lora_restore_path[GT_STR_PATH];  /* a PEFT adapter directory to start from */
  /* data */
  char dataset_type[GT_STR_SHORT];
  char dataset_path[GT_STR_PATH];
  char tokenizer_path[GT_STR_PATH];
  char eval_dataset_path[GT_STR_PATH];
  char train_data_columns[GT_STR_SHORT];
  int packing;
  int enable_data_shuffling;
  int use_sft;
  int sft_train_on_completion_only;
  char chat_template[GT_STR_SHORT]; /* auto | gemma3 | gemma4 | gemma4_small (data/chat.h) */
  int enable_thinking;
  int sft_train_on_thinking;
  char overlong_records[GT_STR_SHORT];
  /* preference tuning (train/pref.h): records are chosen/rejected pairs */
  int use_dpo;
  char preference_algo[GT_STR_SHORT]; /* dpo | orpo */
  double dpo_beta;
  double dpo_label_smoothing;
  double orpo_lambda;
  char dpo_reference_path[GT_STR_PATH]; /* a frozen reference model when all parameters train */
  double eval_split_fraction;
  long long eval_interval;
  long long eval_steps;
  double target_eval_loss;               /* 0: off */
  char eval_tasks[GT_STR_PATH];          /* multiple-choice task files (eval/) run at eval_interval */
  /* checking logits (load_parameters_path is with the checkpoint keys) */
  char golden_logits_path[GT_STR_PATH];
  double max_kl_div;
  double atol;
  char output_logits_path[GT_STR_PATH];
  long long sample_tokens;
  char sample_prompt[GT_STR_PATH];
  char sample_at_end[GT_STR_SHORT]; /* auto | on | off */
  /* seeing inside a run */
  long long log_period;
  int enable_tensorboard;
  char profiler[GT_STR_SHORT];
  long long profiler_steps;
  long long skip_first_n_steps_for_profiler;
  /* decoding */
  char prompt[GT_STR_PATH];
  long long max_decode_steps;
  char decode_sampling_strategy[GT_STR_SHORT];
  double decode_sampling_temperature;
  long long decode_sampling_top_k;
  double decode_sampling_nucleus_p;
  long long decode_seed;
  int chat;                          /* decode: the prompt is a user turn of the model's chat template */
  char messages_path[GT_STR_PATH];   /* decode: JSON Lines chat records to answer */
  char stop[GT_STR_PATH];            /* decode: stop strings (one, or a JSON list) */
  /* devices */
  long long num_devices;
  long long threads_per_device;
  long long ici_data_parallelism;
  long long ici_fsdp_parallelism;
  long long ici_expert_parallelism;
  /* across MPI ranks (MaxText's DCN axes; -1: fill in with the ranks) */
  long long dcn_data_parallelism;
  long long dcn_fsdp_parallelism;
  long long dcn_expert_parallelism;
  double collective_timeout_seconds;
  int prefetch;
  /* DiLoCo across groups of ranks (train/diloco.h) */
  int enable_diloco;
  long long dcn_diloco_parallelism;
  long long diloco_sync_period;
  double diloco_outer_lr;
  double diloco_outer_momentum;
  /* One bit per key of the key table (gt_config_is_user_set): set by
   * gt_config_load for every key of the user file and of the key=value
   * overrides, never for base.json or a preset; kept by copies. It lets a
   * model source (load_parameters_path) refuse an explicit model key that
   * contradicts the model it loads, and replace the preset's silently. */
  unsigned char user_set[GT_CONFIG_MAX_KEYS / 8];
  /* Lines for the user that are not errors, each ending in '\n': MaxText
   * keys accepted with no effect here (gt_config_set). The command prints
   * them; they are not part of the configuration (config.json, checksums). */
  char notes[2048];
} gt_config;

typedef enum gt_key_type { GT_KEY_INT, GT_KEY_FLOAT, GT_KEY_BOOL, GT_KEY_STR, GT_KEY_ENUM } gt_key_type;

/* gt_key_spec.flags */
#define GT_KEY_MODEL 1u /* defines the model (shapes or math): a loaded model's own value replaces it */

typedef struct gt_key_spec {
  const char *name;
  gt_key_type type;
  size_t offset;      /* into gt_config */
  size_t size;        /* of the field (strings) */
  unsigned flags;     /* GT_KEY_MODEL */
  double min, max;    /* numbers: inclusive range */
  const char *choices; /* enums: "a|b|c" */
  const char *desc;
} gt_key_spec;

int gt_config_num_keys(void);
const gt_key_spec *gt_config_key_at(int i);
const gt_key_spec *gt_config_key(const char *name);
/* 1 when gt_config_load took `key` from the user file or a key=value
 * override (not from base.json or a preset); 0 otherwise or for an unknown
 * key. gt_config_set and gt_config_apply_json_text do not mark keys. */
int gt_config_is_user_set(const gt_config *cfg, const char *key);
/* Marks key as the user's (as gt_config_load does for the user file and the
 * overrides); an unknown key is ignored. */
void gt_config_mark_user_set(gt_config *cfg, const char *key);

/* The directory holding base.json and models/, written into buf (returned):
 * $GEMTRAIN_CONFIG_DIR, else share/gemtrain/configs beside the installed
 * library or binary, else the source tree's configs/, else the configured
 * install prefix's. */
const char *gt_config_default_dir(char *buf, size_t n);

/* Load and validate. config_dir NULL = gt_config_default_dir(). user_file
 * (JSON, or MaxText's YAML when it ends in .yml/.yaml: config/yaml.h) and
 * overrides may be NULL/0. Each override is "key=value". */
gt_rc gt_config_load(gt_config *cfg, const char *config_dir, const char *user_file,
                     int n_overrides, const char *const *overrides, gt_err *err);
/* The same; `source` names the overrides in messages (gt_config_load says
 * "the command line"). */
gt_rc gt_config_load_from(gt_config *cfg, const char *config_dir, const char *user_file, int n_overrides,
                          const char *const *overrides, const char *source, gt_err *err);
/* Set one key from its text form (type-checked and range-checked, not
 * cross-validated). `source` names where it came from, for messages. */
gt_rc gt_config_set(gt_config *cfg, const char *key, const char *value,
                    const char *source, gt_err *err);
/* Set every key of a JSON object given as text (as gt_config_set does, each
 * checked; not cross-validated). `source` names it in messages. */
gt_rc gt_config_apply_json_text(gt_config *cfg, const char *json, const char *source, gt_err *err);
/* Append one line (printf-style, without its '\n') to cfg->notes, once. */
void gt_config_add_note(gt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Cross-key consistency checks. */
gt_rc gt_config_validate(const gt_config *cfg, gt_err *err);

/* The resolved config as pretty JSON (heap string, caller frees) and to a file. */
char *gt_config_to_json(const gt_config *cfg);
gt_rc gt_config_write_json(const gt_config *cfg, const char *path, gt_err *err);
/* Read a value as text (for messages, sweeps): writes into buf. */
gt_rc gt_config_get_text(const gt_config *cfg, const char *key, char *buf, size_t n, gt_err *err);
/* Print every key with its value, type, range and description. */
void gt_config_print_help(FILE *f, const gt_config *defaults);

/* Edit distance for "did you mean" (case-insensitive; a swap of neighbours
 * is one edit; names over 63 characters are "far"). */
int gt_edit_distance(const char *a, const char *b);

/* Derived quantities. */
long long gt_config_global_batch(const gt_config *cfg); /* sequences per micro-batch (a step runs gradient_accumulation_steps of them) */
int gt_config_layer_is_global(const gt_config *cfg, long long layer);
/* decoder_block is gemma4 or gemma4_small */
int gt_config_is_gemma4(const gt_config *cfg);
/* The first of the last num_kv_shared_layers layers (L when none share). */
long long gt_config_first_kv_shared(const gt_config *cfg);
/* A KV-shared layer's donor: the last layer of the same kind (local or
 * global) before the shared ones; -1 for a layer with its own K/V, -2 when a
 * shared layer has no donor (a config error). */
long long gt_config_layer_kv_donor(const gt_config *cfg, long long layer);
/* Per-layer shapes: head dim and kv heads (globals may differ on Gemma 4),
 * and the MLP width (doubled on shared layers with use_double_wide_mlp). */
long long gt_config_layer_head_dim(const gt_config *cfg, long long layer);
long long gt_config_layer_kv_heads(const gt_config *cfg, long long layer);
long long gt_config_layer_mlp_dim(const gt_config *cfg, long long layer);
/* Does this layer's feed-forward run the mixture of experts? (Gemma 4 with
 * num_experts > 1: every layer.) And the number of such layers. */
int gt_config_layer_is_moe(const gt_config *cfg, long long layer);
long long gt_config_num_moe_layers(const gt_config *cfg);
/* use_dpo with preference_algo=dpo: a preference loss against a frozen
 * reference model (ORPO has none). */
int gt_config_dpo_reference(const gt_config *cfg);
/* The resolved mesh axes (a -1 filled in): data x fsdp x expert = num_devices. */
void gt_config_mesh_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
/* MaxText's DCN axes across MPI ranks, a -1 filled in with the ranks the
 * launcher started (gt_dist_size(): 1 without mpirun); their product is the
 * rank count the run expects. The global mesh is ici x dcn on each axis,
 * and the global batch is per_device_batch_size x num_devices x ranks. */
void gt_config_dcn_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
void gt_config_global_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
long long gt_config_num_ranks(const gt_config *cfg);
long long gt_config_total_devices(const gt_config *cfg); /* num_devices x ranks */
/* K = V on this layer (share_kv_projections applies to global layers). */
int gt_config_layer_k_eq_v(const gt_config *cfg, long long layer);

#endif
