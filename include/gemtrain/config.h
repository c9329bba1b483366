/* gemtrain configuration: the resolved keys of a run (MaxText's names).
 * Loading, validation and the key table are private (src/config/config.h);
 * a library user gets a gt_config from gt_ctx_config().
 *
 * Layers, each overriding the one before:
 *   configs/base.json  ->  configs/models/<model_name>.json  ->  user JSON file
 *   ->  key=value overrides (command line or API).
 * configs/base.json defines every key (it is the table of defaults); the key
 * table in config.c gives each key its type, valid range and description.
 * model_name is resolved first (from the later layers if they set it) so the
 * right preset is loaded. */
#ifndef GEMTRAIN_CONFIG_H
#define GEMTRAIN_CONFIG_H

#include "gemtrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

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
  char matmul_precision[GT_STR_SHORT]; /* default (inputs in dtype) | high | highest (float32 inputs) */
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
  double adam_b1;
  double adam_b2;
  double adam_eps;
  double adam_eps_root;
  double adam_weight_decay;
  double gradient_clipping_threshold;
  char trainable_parameters_mask[GT_STR_PATH];
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
  char overlong_records[GT_STR_SHORT];
  double eval_split_fraction;
  long long eval_interval;
  long long eval_steps;
  /* checking logits (load_parameters_path is with the checkpoint keys) */
  char golden_logits_path[GT_STR_PATH];
  double max_kl_div;
  double atol;
  char output_logits_path[GT_STR_PATH];
  long long sample_tokens;
  char sample_prompt[GT_STR_PATH];
  /* seeing inside a run */
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
  /* One bit per key of the key table (gt_config_is_user_set): set by
   * gt_config_load for every key of the user file and of the key=value
   * overrides, never for base.json or a preset; kept by copies. It lets a
   * model source (load_parameters_path) refuse an explicit model key that
   * contradicts the model it loads, and replace the preset's silently. */
  unsigned char user_set[GT_CONFIG_MAX_KEYS / 8];
} gt_config;

#ifdef __cplusplus
}
#endif
#endif
