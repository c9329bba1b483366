#define _GNU_SOURCE /* dladdr */
#include "config/config.h"
#include "config/yaml.h"
#include "dist/dist.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* F: an ordinary key's field. M: a model key's field, one that defines the
 * model a checkpoint, parameter file or Hugging Face directory carries with
 * it (GT_KEY_MODEL; see gt_key_spec). */
#define F(field) offsetof(gt_config, field), sizeof(((gt_config *)0)->field), 0u
#define M(field) offsetof(gt_config, field), sizeof(((gt_config *)0)->field), GT_KEY_MODEL
#define BIG 1e12

/* The key table: the one place that knows every key's type, range and
 * meaning. Defaults live in configs/base.json, which must set every key. */
static const gt_key_spec gt__keys[] = {
    /* run */
    {"model_name", GT_KEY_STR, F(model_name), 0, 0, NULL,
     "preset to load from configs/models/<model_name>.json (empty: none)"},
    {"run_name", GT_KEY_STR, F(run_name), 0, 0, NULL,
     "run directory name under base_output_directory (empty: <model_name>-<date>-<time>)"},
    {"base_output_directory", GT_KEY_STR, F(base_output_directory), 0, 0, NULL,
     "where run directories are created"},
    {"dump_config", GT_KEY_BOOL, F(dump_config), 0, 1, NULL,
     "print the resolved configuration as JSON and exit (the JSON says dump_config false, so given back as the "
     "config file it trains)"},
    {"init_weights_seed", GT_KEY_INT, F(init_weights_seed), 0, 2147483647, NULL,
     "seed of the parameter initialisation"},
    {"data_shuffle_seed", GT_KEY_INT, F(data_shuffle_seed), 0, 2147483647, NULL,
     "seed of the data order (and of synthetic data)"},
    {"steps", GT_KEY_INT, F(steps), 1, BIG, NULL, "number of training steps"},
    /* checkpoints (see docs/checkpoints.md) */
    {"enable_checkpointing", GT_KEY_BOOL, F(enable_checkpointing), 0, 1, NULL,
     "write full-state checkpoints into <run directory>/checkpoints and resume from them"},
    {"checkpoint_period", GT_KEY_INT, F(checkpoint_period), 1, BIG, NULL,
     "write a checkpoint every this many steps"},
    {"save_checkpoint_on_completion", GT_KEY_BOOL, F(save_checkpoint_on_completion), 0, 1, NULL,
     "write a checkpoint after the last step"},
    {"max_num_checkpoints_to_keep", GT_KEY_INT, F(max_num_checkpoints_to_keep), 0, BIG, NULL,
     "keep only the newest this many checkpoints (0: keep all; MaxText's None, or null, reads as 0)"},
    {"checkpoint_compression", GT_KEY_INT, F(checkpoint_compression), 0, 9, NULL,
     "zlib level for checkpoint tensors (0: stored raw)"},
    {"load_parameters_path", GT_KEY_STR, F(load_parameters_path), 0, 0, NULL,
     "start a new run from these parameters: a checkpoint (step, checkpoints or run directory), a Hugging Face "
     "directory (config.json + *.safetensors; its config.json then defines the model) or a gemtrain parameter file"},
    {"load_full_state_path", GT_KEY_STR, F(load_full_state_path), 0, 0, NULL,
     "continue from the full state (parameters, optimizer, step, data position) of this checkpoint"},
    {"skip_nonfinite_steps", GT_KEY_BOOL, F(skip_nonfinite_steps), 0, 1, NULL,
     "a step with a non-finite loss or gradient norm is skipped (true) or stops the run (false)"},
    {"async_checkpointing", GT_KEY_BOOL, F(async_checkpointing), 0, 1, NULL,
     "write checkpoints from a background thread while training goes on (false: the step waits for the write)"},
    {"skip_step_on_spikes", GT_KEY_BOOL, F(skip_step_on_spikes), 0, 1, NULL,
     "do not apply a step whose loss or gradient norm is more than skip_step_scaling_factor rolling standard "
     "deviations above its rolling mean"},
    {"skip_step_interval", GT_KEY_INT, F(skip_step_interval), 1, 4096, NULL,
     "the spike guard's rolling window, in steps (a checkpoint holds it whole)"},
    {"skip_step_scaling_factor", GT_KEY_FLOAT, F(skip_step_scaling_factor), 0, 1e6, NULL,
     "the spike guard's threshold, in rolling standard deviations above the rolling mean"},
    /* model */
    {"decoder_block", GT_KEY_ENUM, M(decoder_block), 0, 0, "gemma3|gemma4|gemma4_small",
     "layer family of the decoder: gemma3, or gemma4 / gemma4_small (same layer math here; "
     "gemma4_small is MaxText's name for the PLE + KV-sharing models)"},
    {"vocab_size", GT_KEY_INT, M(vocab_size), 4, 1e8, NULL, "vocabulary size (rows of the tied embedding)"},
    {"base_emb_dim", GT_KEY_INT, M(base_emb_dim), 1, 1 << 20, NULL, "hidden size d"},
    {"base_num_query_heads", GT_KEY_INT, M(base_num_query_heads), 1, 4096, NULL, "query heads H"},
    {"base_num_kv_heads", GT_KEY_INT, M(base_num_kv_heads), 1, 4096, NULL,
     "key/value heads K (GQA: H must be a multiple of K)"},
    {"head_dim", GT_KEY_INT, M(head_dim), 2, 8192, NULL, "per-head dimension (even, for RoPE)"},
    {"base_mlp_dim", GT_KEY_INT, M(base_mlp_dim), 1, 1 << 24, NULL, "GeGLU intermediate size F"},
    {"base_num_decoder_layers", GT_KEY_INT, M(base_num_decoder_layers), 1, 4096, NULL,
     "number of decoder layers L"},
    {"sliding_window_size", GT_KEY_INT, M(sliding_window_size), 1, 2147483647.0, NULL,
     "keys visible to a query on local layers (i-W < j <= i)"},
    {"layer_pattern", GT_KEY_STR, M(layer_pattern), 0, 0, NULL,
     "attention kind per layer, repeated: L = local (sliding window), G = global"},
    {"query_pre_attn_scalar", GT_KEY_FLOAT, M(query_pre_attn_scalar), 1e-9, BIG, NULL,
     "queries are scaled by query_pre_attn_scalar^-0.5"},
    {"rope_max_timescale", GT_KEY_FLOAT, M(rope_max_timescale), 1, BIG, NULL,
     "RoPE base of global layers"},
    {"local_rope_max_timescale", GT_KEY_FLOAT, M(local_rope_max_timescale), 1, BIG, NULL,
     "RoPE base of local layers"},
    {"rope_linear_scaling_factor", GT_KEY_FLOAT, M(rope_linear_scaling_factor), 1e-6, 1e6, NULL,
     "linear RoPE position scaling on global layers (local layers always use 1)"},
    {"normalization_layer_epsilon", GT_KEY_FLOAT, M(normalization_layer_epsilon), 0, 1, NULL,
     "RMSNorm epsilon"},
    {"final_logits_soft_cap", GT_KEY_FLOAT, M(final_logits_soft_cap), 0, 1e6, NULL,
     "cap * tanh(logits / cap) on the output logits (0: off, as in Gemma 3)"},
    {"global_head_dim", GT_KEY_INT, M(global_head_dim), 0, 8192, NULL,
     "Gemma 4: head dimension of global layers (0: head_dim)"},
    {"global_num_kv_heads", GT_KEY_INT, M(global_num_kv_heads), 0, 4096, NULL,
     "Gemma 4: key/value heads of global layers (0: base_num_kv_heads)"},
    {"share_kv_projections", GT_KEY_BOOL, M(share_kv_projections), 0, 1, NULL,
     "Gemma 4: K = V on global layers (no v_proj; v = v_norm of the raw key projection)"},
    {"global_rope_proportion", GT_KEY_FLOAT, M(global_rope_proportion), 0, 1, NULL,
     "fraction of a global head's rotary pairs that rotate (the rest pass through; "
     "frequencies keep the full head dim, as Gemma 4's proportional RoPE)"},
    {"local_rope_proportion", GT_KEY_FLOAT, M(local_rope_proportion), 0, 1, NULL,
     "the same for local layers"},
    {"v_norm_with_scale", GT_KEY_BOOL, M(v_norm_with_scale), 0, 1, NULL,
     "Gemma 4: the value RMSNorm has a learnable scale (self_attn.v_norm.weight)"},
    {"layer_scalar_trainable", GT_KEY_BOOL, M(layer_scalar_trainable), 0, 1, NULL,
     "Gemma 4: layer_scalar is a trained parameter (MaxText) or the constant 1 (HF keeps it as a buffer holding "
     "the checkpoint's values, which false leaves unused, with a note)"},
    {"hidden_size_per_layer_input", GT_KEY_INT, M(hidden_size_per_layer_input), 0, 1 << 16, NULL,
     "Gemma 4: per-layer embedding (PLE) width per layer (0: no PLE)"},
    {"vocab_size_per_layer_input", GT_KEY_INT, M(vocab_size_per_layer_input), 0, 1e8, NULL,
     "Gemma 4: rows of the PLE table embed_tokens_per_layer (0: vocab_size)"},
    {"num_kv_shared_layers", GT_KEY_INT, M(num_kv_shared_layers), 0, 4096, NULL,
     "Gemma 4: the last this-many layers reuse the K/V of the last earlier layer of their kind"},
    {"use_double_wide_mlp", GT_KEY_BOOL, M(use_double_wide_mlp), 0, 1, NULL,
     "Gemma 4: KV-shared layers use an MLP of width 2 x base_mlp_dim"},
    /* Gemma 4 mixture of experts (MaxText's names) */
    {"num_experts", GT_KEY_INT, M(num_experts), 0, 65536, NULL,
     "Gemma 4: routed experts per layer; 0 or 1: a dense feed-forward (no MoE)"},
    {"num_experts_per_tok", GT_KEY_INT, M(num_experts_per_tok), 1, 65536, NULL,
     "Gemma 4 MoE: experts each token is routed to (top-k)"},
    {"base_moe_mlp_dim", GT_KEY_INT, M(base_moe_mlp_dim), 0, 1 << 20, NULL,
     "Gemma 4 MoE: intermediate size of each routed expert (the shared expert uses base_mlp_dim)"},
    {"shared_experts", GT_KEY_INT, M(shared_experts), 0, 1, NULL,
     "Gemma 4 MoE: dense shared experts beside the routed ones; must be 1 with experts (Gemma 4 26b's mlp.*)"},
    {"load_balance_loss_weight", GT_KEY_FLOAT, F(load_balance_loss_weight), 0, 1e6, NULL,
     "Gemma 4 MoE: weight of the load-balance loss averaged over MoE layers and added to the loss (0: off)"},
    {"weight_init_scale", GT_KEY_FLOAT, F(weight_init_scale), 0, 1e3, NULL,
     "matrices start as normal(0, scale / sqrt(fan_in)); the embedding as normal(0, 1/sqrt(d))"},
    {"dtype", GT_KEY_ENUM, F(dtype), 0, 0, "float32|bfloat16",
     "activations and matmul inputs (bfloat16: rounded to bf16, float32 accumulation and statistics)"},
    {"weight_dtype", GT_KEY_ENUM, F(weight_dtype), 0, 0, "float32",
     "master weights (what AdamW updates and checkpoints keep); dtype=bfloat16 computes with a bf16 copy"},
    {"mu_dtype", GT_KEY_ENUM, F(mu_dtype), 0, 0, "float32|bfloat16",
     "AdamW's first moment (bfloat16: stored in 2 bytes, updated in float32); the second moment stays float32"},
    {"matmul_precision", GT_KEY_ENUM, F(matmul_precision), 0, 0, "default|high|highest",
     "how the products take their inputs: default = rounded to dtype; high and highest = as they are, in float32 "
     "(with dtype=bfloat16 the weights' bf16 copies and the activations stay rounded; gradients and attention's P "
     "and dS enter unrounded)"},
    /* batch and sequence */
    {"per_device_batch_size", GT_KEY_FLOAT, F(per_device_batch_size), 1e-9, 1e6, NULL,
     "sequences per device per step; global batch = this x num_devices"},
    {"max_target_length", GT_KEY_INT, F(max_target_length), 1, 1 << 24, NULL,
     "sequence length T"},
    {"num_vocab_tiling", GT_KEY_INT, F(num_vocab_tiling), 1, 1 << 20, NULL,
     "compute logits and loss in this many row tiles, so [B*T, V] never exists at once"},
    {"gradient_accumulation_steps", GT_KEY_INT, F(gradient_accumulation_steps), 1, 1 << 20, NULL,
     "micro-batches summed into one optimizer step"},
    /* remat and memory */
    {"remat_policy", GT_KEY_ENUM, F(remat_policy), 0, 0,
     "none|minimal|minimal_with_context|save_dot_with_context_except_mlp|save_dot_except_mlpwi|"
     "save_dot_except_mlp|save_qkv_proj|save_out_proj|qkv_proj_offloaded|minimal_offloaded|full|custom",
     "which named activations a layer keeps for backward (MaxText's names); the rest is recomputed"},
    {"remat_scope", GT_KEY_ENUM, F(remat_scope), 0, 0, "layer|block",
     "remat boundary: each layer, or each whole layer_pattern block (MaxText's old behaviour)"},
    {"query_proj", GT_KEY_ENUM, F(query_proj), 0, 0, "remat|device|offload",
     "remat_policy=custom: q after norm and RoPE"},
    {"key_proj", GT_KEY_ENUM, F(key_proj), 0, 0, "remat|device|offload",
     "remat_policy=custom: k after norm and RoPE"},
    {"value_proj", GT_KEY_ENUM, F(value_proj), 0, 0, "remat|device|offload", "remat_policy=custom: v"},
    {"context", GT_KEY_ENUM, F(context), 0, 0, "remat|device|offload",
     "remat_policy=custom: attention output before o_proj"},
    {"out_proj", GT_KEY_ENUM, F(out_proj), 0, 0, "remat|device|offload",
     "remat_policy=custom: o_proj output"},
    {"mlpwi_0", GT_KEY_ENUM, F(mlpwi_0), 0, 0, "remat|device|offload",
     "remat_policy=custom: gate projection output"},
    {"mlpwi_1", GT_KEY_ENUM, F(mlpwi_1), 0, 0, "remat|device|offload",
     "remat_policy=custom: up projection output"},
    {"mlpwo", GT_KEY_ENUM, F(mlpwo), 0, 0, "remat|device|offload",
     "remat_policy=custom: down projection output"},
    {"memory_limit_bytes", GT_KEY_INT, F(memory_limit_bytes), 0, 9e18, NULL,
     "refuse a run whose memory plan exceeds this many bytes, or a size such as 24GiB or 512MB (0: the "
     "machine's available RAM)"},
    /* optimizer */
    {"opt_type", GT_KEY_ENUM, F(opt_type), 0, 0, "adamw", "optimizer"},
    {"learning_rate", GT_KEY_FLOAT, F(learning_rate), 0, 1e3, NULL, "peak learning rate"},
    {"lr_schedule_type", GT_KEY_ENUM, F(lr_schedule_type), 0, 0, "cosine|wsd",
     "cosine: linear warmup then cosine decay; wsd: warmup, stable at learning_rate, then decay over "
     "wsd_decay_steps_fraction of the schedule"},
    {"warmup_steps_fraction", GT_KEY_FLOAT, F(warmup_steps_fraction), 0, 1, NULL,
     "fraction of learning_rate_schedule_steps spent warming up"},
    {"learning_rate_schedule_steps", GT_KEY_INT, F(learning_rate_schedule_steps), -1, BIG, NULL,
     "length of the schedule (-1: steps); the rate is 0 after it"},
    {"learning_rate_final_fraction", GT_KEY_FLOAT, F(learning_rate_final_fraction), 0, 1e3, NULL,
     "the cosine ends at learning_rate x this"},
    {"wsd_decay_steps_fraction", GT_KEY_FLOAT, F(wsd_decay_steps_fraction), 0, 1, NULL,
     "lr_schedule_type=wsd: fraction of the schedule spent decaying"},
    {"wsd_decay_style", GT_KEY_ENUM, F(wsd_decay_style), 0, 0, "linear|cosine",
     "lr_schedule_type=wsd: shape of the decay"},
    {"z_loss_multiplier", GT_KEY_FLOAT, F(z_loss_multiplier), 0, 1e6, NULL,
     "weight z of PaLM's z-loss, z log(Z)^2 per loss token (Z: the softmax normaliser of the capped logits), "
     "part of the loss as in MaxText and reported apart as z_loss (0: off)"},
    {"adam_b1", GT_KEY_FLOAT, F(adam_b1), 0, 0.999999999, NULL, "AdamW first-moment decay"},
    {"adam_b2", GT_KEY_FLOAT, F(adam_b2), 0, 0.999999999, NULL, "AdamW second-moment decay"},
    {"adam_eps", GT_KEY_FLOAT, F(adam_eps), 0, 1, NULL, "AdamW epsilon outside the sqrt"},
    {"adam_eps_root", GT_KEY_FLOAT, F(adam_eps_root), 0, 1, NULL, "AdamW epsilon inside the sqrt"},
    {"adam_weight_decay", GT_KEY_FLOAT, F(adam_weight_decay), 0, 1e3, NULL,
     "decoupled weight decay (applied to every parameter, as MaxText's empty mask)"},
    {"gradient_clipping_threshold", GT_KEY_FLOAT, F(gradient_clipping_threshold), 0, 1e12, NULL,
     "clip the global gradient norm to this (0: off)"},
    {"trainable_parameters_mask", GT_KEY_STR, F(trainable_parameters_mask), 0, 0, NULL,
     "POSIX extended regular expressions separated by spaces (a JSON list is joined): a parameter trains when one "
     "matches somewhere in its name (e.g. 'layers.3.self_attn.q_proj.weight'); the others are frozen: no gradient, no "
     "optimizer state, not stored in checkpoints (docs/parameter-store.md). Empty: everything trains"},
    /* low-rank adapters */
    {"enable_lora", GT_KEY_BOOL, F(enable_lora), 0, 1, NULL,
     "train low-rank adapters (LoRA) beside the projections lora_module_path chooses; the base model is frozen "
     "except what trainable_parameters_mask names"},
    {"lora_rank", GT_KEY_INT, F(lora_rank), 1, 65536, NULL, "the adapters' rank r: A is [r, in], B is [out, r]"},
    {"lora_alpha", GT_KEY_FLOAT, F(lora_alpha), 0, 1e9, NULL,
     "the adapters' output is scaled by lora_alpha / lora_rank (lora_use_rslora: / sqrt(lora_rank))"},
    {"lora_use_rslora", GT_KEY_BOOL, F(lora_use_rslora), 0, 1, NULL,
     "rank-stabilised scale lora_alpha / sqrt(lora_rank), as PEFT's use_rslora"},
    {"lora_module_path", GT_KEY_STR, F(lora_module_path), 0, 0, NULL,
     "POSIX extended regular expression over parameter names (e.g. 'layers.3.self_attn.q_proj.weight'): the "
     "projections that get adapters"},
    {"lora_dropout", GT_KEY_FLOAT, F(lora_dropout), 0, 0.999, NULL,
     "dropout on the adapters' input (training only; seeded, so runs repeat)"},
    {"lora_weight_qtype", GT_KEY_ENUM, F(lora_weight_qtype), 0, 0, "float32|bfloat16|int8|nf4",
     "storage of the frozen base's matrices: float32, bfloat16, int8 (absmax per output channel) or nf4 (QLoRA's "
     "4-bit NormalFloat, absmax per block of 64)"},
    {"lora_embedding_qtype", GT_KEY_ENUM, F(lora_embedding_qtype), 0, 0, "auto|float32|bfloat16|int8|nf4",
     "storage of the frozen tied embedding (also the output head) and Gemma 4's per-layer embedding table beside a "
     "base stored as lora_weight_qtype: auto keeps them in bfloat16 under int8 and nf4 (as Hugging Face's "
     "bitsandbytes QLoRA keeps embeddings and the tied head unquantized) and as lora_weight_qtype otherwise; "
     "bfloat16, int8 or nf4 needs lora_weight_qtype other than float32"},
    {"lora_restore_path", GT_KEY_STR, F(lora_restore_path), 0, 0, NULL,
     "a Hugging Face PEFT adapter directory (adapter_config.json, adapter_model.safetensors) to start the adapters "
     "from (MaxText's hf_lora_adapter_path)"},
    /* data */
    {"dataset_type", GT_KEY_ENUM, F(dataset_type), 0, 0, "synthetic|text|tokens|jsonl",
     "synthetic (uniform ids, as MaxText), text (one UTF-8 file, one document), tokens (gemtrain .gtok shards), "
     "jsonl (JSON Lines records, plain or gzip; see docs/data.md)"},
    {"dataset_path", GT_KEY_STR, F(dataset_path), 0, 0, NULL,
     "text: one file; tokens and jsonl: files, directories or globs, comma-separated, read in the order given "
     "(a directory or glob in name order)"},
    {"tokenizer_path", GT_KEY_STR, F(tokenizer_path), 0, 0, NULL,
     "a Hugging Face tokenizer.json for dataset_type=text and jsonl (empty: load_parameters_path's own, else byte tokens, which need vocab_size=260)"},
    {"eval_dataset_path", GT_KEY_STR, F(eval_dataset_path), 0, 0, NULL,
     "eval data of the same dataset_type (MaxText's hf_eval_files); empty: the held-out tail "
     "(eval_split_fraction) of dataset_path"},
    {"train_data_columns", GT_KEY_STR, F(train_data_columns), 0, 0, NULL,
     "jsonl: the record fields read, comma-separated (in a config file also a list, as MaxText's ['text']): one "
     "text field; with use_sft, one field of chat messages or two fields, prompt then completion"},
    {"packing", GT_KEY_BOOL, F(packing), 0, 1, NULL,
     "several documents share a sequence, each attending only within itself (false: one document per "
     "sequence, padded)"},
    {"enable_data_shuffling", GT_KEY_BOOL, F(enable_data_shuffling), 0, 1, NULL,
     "visit the training sequences in a seeded random order, a new one each epoch (false: file order)"},
    {"use_sft", GT_KEY_BOOL, F(use_sft), 0, 1, NULL,
     "jsonl: records are supervised fine-tuning examples (prompt/completion or chat messages in the model's "
     "chat template, chat_template)"},
    {"sft_train_on_completion_only", GT_KEY_BOOL, F(sft_train_on_completion_only), 0, 1, NULL,
     "use_sft: only the completion (the model turns) is in the loss"},
    {"chat_template", GT_KEY_ENUM, F(chat_template), 0, 0, "auto|gemma3|gemma4|gemma4_small",
     "use_sft chat records: the chat template; auto: the model's (a Hugging Face directory's own template, else "
     "gemma3, or for decoder_block gemma4 / gemma4_small the Gemma 4 template of that variant); gemma4_small is "
     "E2B/E4B's, which does not open a model turn with an empty thought block (docs/data.md)"},
    {"enable_thinking", GT_KEY_BOOL, F(enable_thinking), 0, 1, NULL,
     "Gemma 4 chat template: thinking mode (<|think|> in the system turn; as apply_chat_template's enable_thinking)"},
    {"sft_train_on_thinking", GT_KEY_BOOL, F(sft_train_on_thinking), 0, 1, NULL,
     "use_sft chat records: a model turn's reasoning (Gemma 4's thought channel) is in the loss (false: masked, "
     "still read as context)"},
    {"overlong_records", GT_KEY_ENUM, F(overlong_records), 0, 0, "refuse|truncate",
     "a record that must stay whole (use_sft, each side of a use_dpo pair, or packing=false) but is longer than "
     "max_target_length + 1 tokens: refuse it naming its file and line, or keep its first max_target_length + 1 "
     "tokens"},
    {"use_dpo", GT_KEY_BOOL, F(use_dpo), 0, 1, NULL,
     "jsonl: records are preference pairs (prompt/chosen/rejected, or chosen/rejected chat messages), trained "
     "with preference_algo's loss on the response tokens"},
    {"preference_algo", GT_KEY_ENUM, F(preference_algo), 0, 0, "dpo|orpo",
     "use_dpo: dpo (against a frozen reference: the base with adapters off, or dpo_reference_path) or orpo "
     "(the chosen answer's loss plus an odds-ratio term; no reference)"},
    {"dpo_beta", GT_KEY_FLOAT, F(dpo_beta), 0, 1e6, NULL,
     "DPO: beta, the scale of the policy-minus-reference log-ratios in the sigmoid loss"},
    {"dpo_label_smoothing", GT_KEY_FLOAT, F(dpo_label_smoothing), 0, 0.5, NULL,
     "DPO: the share of pairs assumed mislabelled (conservative DPO; 0: plain DPO)"},
    {"orpo_lambda", GT_KEY_FLOAT, F(orpo_lambda), 0, 1e6, NULL,
     "ORPO: the weight of the odds-ratio term added to the chosen answer's loss"},
    {"dpo_reference_path", GT_KEY_STR, F(dpo_reference_path), 0, 0, NULL,
     "DPO with every parameter training: the reference model (a checkpoint, parameter file or Hugging Face "
     "directory), held frozen and sharded like the policy (with enable_lora: empty, the reference is the base "
     "with the adapters off)"},
    {"eval_split_fraction", GT_KEY_FLOAT, F(eval_split_fraction), 0, 0.5, NULL,
     "fraction of the corpus held out for eval (taken from its end)"},
    {"eval_interval", GT_KEY_INT, F(eval_interval), -1, BIG, NULL,
     "run eval every this many steps (-1: never; 0: only at the end)"},
    {"eval_steps", GT_KEY_INT, F(eval_steps), 1, 1 << 20, NULL, "batches per eval"},
    {"target_eval_loss", GT_KEY_FLOAT, F(target_eval_loss), 0, 1e30, NULL,
     "end the run, with a checkpoint, at the first eval whose loss is at or below this (0: off)"},
    {"eval_tasks", GT_KEY_STR, F(eval_tasks), 0, 0, NULL,
     "multiple-choice task files (JSON Lines, comma-separated) scored at every eval (empty: none)"},
    /* loading parameters and checking logits (gemtrain logit-check) */
    {"golden_logits_path", GT_KEY_STR, F(golden_logits_path), 0, 0, NULL,
     "logit-check: JSONL of {\"tokens\": [ids], \"logits\": [[V floats] per position]} to compare against"},
    {"max_kl_div", GT_KEY_FLOAT, F(max_kl_div), -1, 1e30, NULL,
     "logit-check: fail when a token's KL(golden || model) exceeds this (-1: not checked)"},
    {"atol", GT_KEY_FLOAT, F(atol), -1, 1e30, NULL,
     "logit-check: fail when a logit differs from the golden one by more than this (-1: not checked)"},
    {"output_logits_path", GT_KEY_STR, F(output_logits_path), 0, 0, NULL,
     "logit-check: also write gemtrain's logits here, in the golden JSONL format (empty: no)"},
    {"sample_tokens", GT_KEY_INT, F(sample_tokens), 0, 1 << 20, NULL,
     "tokens of text generated from the trained model at the end (0: none)"},
    {"sample_prompt", GT_KEY_STR, F(sample_prompt), 0, 0, NULL,
     "text the end-of-run sample continues (byte tokens, or tokenizer_path's); with use_sft, the user turn the "
     "model answers"},
    {"sample_at_end", GT_KEY_ENUM, F(sample_at_end), 0, 0, "auto|on|off",
     "the end-of-run sample: on, off, or auto (on, except for use_sft runs)"},
    /* seeing inside a run (MaxText's keys) */
    {"log_period", GT_KEY_INT, F(log_period), 1, BIG, NULL,
     "print the step line every this many steps (and the first, the last and every eval); metrics.jsonl and "
     "TensorBoard still get every step. Without a terminal the line also says step N of total and the ETA"},
    {"enable_tensorboard", GT_KEY_BOOL, F(enable_tensorboard), 0, 1, NULL,
     "write TensorBoard event files (scalars of every step) into <run directory>/tensorboard"},
    {"profiler", GT_KEY_ENUM, F(profiler), 0, 0, "|trace",
     "trace: write <run directory>/trace.json, a Chrome trace-event timeline of profiler_steps steps (empty: off)"},
    {"profiler_steps", GT_KEY_INT, F(profiler_steps), 1, BIG, NULL, "steps the profiler records"},
    {"skip_first_n_steps_for_profiler", GT_KEY_INT, F(skip_first_n_steps_for_profiler), 0, BIG, NULL,
     "steps run before the profiler starts recording (the first steps warm caches and allocators)"},
    /* decoding (gemtrain decode) */
    {"prompt", GT_KEY_STR, F(prompt), 0, 0, NULL,
     "text gemtrain decode continues (with chat, the user turn it answers)"},
    {"max_decode_steps", GT_KEY_INT, F(max_decode_steps), 0, 1 << 24, NULL,
     "gemtrain decode: new tokens to generate at most (it stops earlier at <eos>, the end of a chat turn or a "
     "stop string)"},
    {"decode_sampling_strategy", GT_KEY_ENUM, F(decode_sampling_strategy), 0, 0, "greedy|weighted|topk|nucleus",
     "greedy (argmax), weighted (softmax(logits / temperature)), topk or nucleus (top-p), as MaxText"},
    {"decode_sampling_temperature", GT_KEY_FLOAT, F(decode_sampling_temperature), 0, 1e6, NULL,
     "logits are divided by this before sampling; 0 picks the most likely token (greedy)"},
    {"decode_sampling_top_k", GT_KEY_INT, F(decode_sampling_top_k), 0, 1e8, NULL,
     "topk: sample among the k most likely tokens (0: unset)"},
    {"decode_sampling_nucleus_p", GT_KEY_FLOAT, F(decode_sampling_nucleus_p), -1, 1, NULL,
     "nucleus: sample among the fewest most likely tokens whose probability reaches p (-1: unset)"},
    {"decode_seed", GT_KEY_INT, F(decode_seed), 0, 2147483647, NULL, "seed of the decoding sampler"},
    {"chat", GT_KEY_BOOL, F(chat), 0, 1, NULL,
     "gemtrain decode: render prompt as one user turn with the model's chat template and stop at the end of the "
     "model's turn"},
    {"messages_path", GT_KEY_STR, F(messages_path), 0, 0, NULL,
     "gemtrain decode: a JSON Lines file of chat records {\"messages\": [{\"role\": ..., \"content\": ...}]}, each "
     "answered as the model's next turn"},
    {"stop", GT_KEY_STR, F(stop), 0, 0, NULL,
     "gemtrain decode: generation stops when the text contains this string (a JSON list: any of them); the reply "
     "ends before it"},
    /* devices */
    {"num_devices", GT_KEY_INT, F(num_devices), 1, 1024, NULL,
     "worker threads standing in for devices"},
    {"threads_per_device", GT_KEY_INT, F(threads_per_device), 0, 1024, NULL,
     "compute threads per device (0: cores / num_devices)"},
    {"ici_data_parallelism", GT_KEY_INT, F(ici_data_parallelism), -1, 1024, NULL,
     "data-parallel axis of the mesh (-1: fill in)"},
    {"ici_fsdp_parallelism", GT_KEY_INT, F(ici_fsdp_parallelism), -1, 1024, NULL,
     "FSDP axis of the mesh (-1: fill in); product of axes = num_devices"},
    {"ici_expert_parallelism", GT_KEY_INT, F(ici_expert_parallelism), -1, 1024, NULL,
     "expert axis of the mesh: each device holds num_experts / this of every MoE layer's experts (-1: fill in)"},
    {"prefetch", GT_KEY_BOOL, F(prefetch), 0, 1, NULL,
     "sharded runs: gather the next layer's weights together with the current one's"},
    {"dcn_data_parallelism", GT_KEY_INT, F(dcn_data_parallelism), -1, 65536, NULL,
     "data-parallel axis across MPI ranks (-1: fill in with the ranks mpirun started)"},
    {"dcn_fsdp_parallelism", GT_KEY_INT, F(dcn_fsdp_parallelism), -1, 65536, NULL,
     "FSDP axis across MPI ranks (-1: fill in); product of dcn axes = ranks"},
    {"dcn_expert_parallelism", GT_KEY_INT, F(dcn_expert_parallelism), -1, 65536, NULL,
     "expert axis across MPI ranks (-1: fill in)"},
    {"collective_timeout_seconds", GT_KEY_FLOAT, F(collective_timeout_seconds), 0.001, 1e6, NULL,
     "MPI runs: a rank that does not answer a collective within this time fails the run, naming it"},
    {"enable_diloco", GT_KEY_BOOL, F(enable_diloco), 0, 1, NULL,
     "DiLoCo: dcn_diloco_parallelism groups of ranks train on their own and sync every diloco_sync_period steps"},
    {"dcn_diloco_parallelism", GT_KEY_INT, F(dcn_diloco_parallelism), 1, 65536, NULL,
     "DiLoCo: number of replicas (groups of ranks); must divide the ranks"},
    {"diloco_sync_period", GT_KEY_INT, F(diloco_sync_period), 0, BIG, NULL,
     "DiLoCo: inner steps between syncs of the replicas"},
    {"diloco_outer_lr", GT_KEY_FLOAT, F(diloco_outer_lr), 0, 1e3, NULL, "DiLoCo: the outer optimizer's learning rate"},
    {"diloco_outer_momentum", GT_KEY_FLOAT, F(diloco_outer_momentum), 0, 0.999999999, NULL,
     "DiLoCo: the outer optimizer's Nesterov momentum"},
};

#define GT__NKEYS ((int)(sizeof gt__keys / sizeof gt__keys[0]))
_Static_assert(sizeof gt__keys / sizeof gt__keys[0] <= GT_CONFIG_MAX_KEYS,
               "gt_config.user_set has one bit per key: raise GT_CONFIG_MAX_KEYS");

int gt_config_num_keys(void) { return GT__NKEYS; }
const gt_key_spec *gt_config_key_at(int i) { return i >= 0 && i < GT__NKEYS ? &gt__keys[i] : NULL; }

/* Other names a key is known by elsewhere (MaxText's), read as the key. */
static const char *const gt__aliases[][2] = {
    {"hf_lora_adapter_path", "lora_restore_path"},
};

/* The name a key is set by: the table's for an alias, else name itself. */
static const char *gt__canonical(const char *name) {
  for (size_t a = 0; a < sizeof gt__aliases / sizeof gt__aliases[0]; a++)
    if (!strcmp(name, gt__aliases[a][0])) return gt__aliases[a][1];
  return name;
}

const gt_key_spec *gt_config_key(const char *name) {
  name = gt__canonical(name);
  for (int i = 0; i < GT__NKEYS; i++)
    if (strcmp(gt__keys[i].name, name) == 0) return &gt__keys[i];
  return NULL;
}

static void gt__mark_user_set(gt_config *cfg, const char *key) {
  const gt_key_spec *k = gt_config_key(key);
  if (!k) return;
  int i = (int)(k - gt__keys);
  cfg->user_set[i / 8] |= (unsigned char)(1u << (i % 8));
}

int gt_config_is_user_set(const gt_config *cfg, const char *key) {
  const gt_key_spec *k = gt_config_key(key);
  if (!k) return 0;
  int i = (int)(k - gt__keys);
  return (cfg->user_set[i / 8] >> (i % 8)) & 1;
}

void gt_config_mark_user_set(gt_config *cfg, const char *key) { gt__mark_user_set(cfg, key); }

/* ---------- did you mean ---------- */

int gt_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int c = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + c < v) v = d[i - 1][j - 1] + c;
      /* a swap of two neighbours counts as one edit */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

static const char *gt__nearest_key(const char *name) {
  const char *best = NULL;
  int bestd = 1 << 30;
  for (int i = 0; i < GT__NKEYS; i++) {
    int dd = gt_edit_distance(name, gt__keys[i].name);
    if (dd < bestd) {
      bestd = dd;
      best = gt__keys[i].name;
    }
  }
  int limit = (int)strlen(name) / 3;
  if (limit < 2) limit = 2;
  return bestd <= limit ? best : NULL;
}

/* ---------- keys from elsewhere: MaxText's and Hugging Face's ---------- */

/* MaxText's keys that gemtrain's table does not hold. Every key of MaxText's
 * base.yml is either in the table or in one of the three lists below, so a
 * MaxText key is answered as what it is and never with an edit-distance
 * guess at a key of some other feature (rope_min_timescale is not
 * rope_max_timescale, attn_logits_soft_cap not final_logits_soft_cap).
 * tests/test_config_habits.c walks base.yml's key names to hold this. */

/* MaxText keys that change nothing here (how XLA compiles, TPU kernels and
 * their block sizes, cloud logging, the inference server), or that MaxText
 * itself reads only under a feature gemtrain does not have (the YaRN keys
 * under rope_type=yarn, the vision encoder's under use_multimodal):
 * accepted with a note, whatever their value, so a MaxText config runs as
 * it is. The feature's own switch is in gt__unsupported_keys. */
#define GT__SPLASH "there is one CPU attention kernel; the splash kernel's settings are for TPUs"
#define GT__GMM "the MoE kernels are gemtrain's own (kernels/moe*.c); these tile TPU grouped matmuls"
#define GT__NO_XLA "there is no XLA"
#define GT__NO_JAX "there is no JAX"
#define GT__MESH "devices are worker threads; the mesh is data x fsdp x expert"
#define GT__GTCK "checkpoints are gemtrain's .gtck files (docs/checkpoints.md)"
#define GT__METRICS "metrics go to <run directory>/metrics.jsonl; nothing is uploaded"
#define GT__SERVER "there is no inference server; gemtrain decode generates from the command line"
#define GT__KV_LAYOUT "gemtrain decode keeps its own KV cache layout"
#define GT__VISION "read with use_multimodal=true only; gemtrain has no multimodal inputs"
#define GT__YARN "read with rope_type=yarn only; gemtrain's RoPE is the default kind"
#define GT__MLA "read with attention_type=mla only (DeepSeek's latent attention, which Gemma does not have)"
#define GT__PIPELINE "read with pipeline parallelism only, which gemtrain does not have"
#define GT__QUANT "read with quantization only, which gemtrain does not support (lora_weight_qtype stores a frozen base quantized)"
#define GT__GRAIN "there is no Grain: gemtrain's data pipeline (docs/data.md) has no workers to tune"
static const char *const gt__noop_keys[][2] = {
    {"scan_layers", "the layers always run one after another, each its own remat boundary"},
    {"param_scan_axis", "the layers always run one after another, each its own remat boundary"},
    {"inhomogeneous_layer_cycle_interval", "the layers always run one after another, each its own remat boundary"},
    {"force_unroll", "the layers always run one after another, each its own remat boundary"},
    {"scan_pipeline_iterations", GT__PIPELINE},
    {"scan_layers_per_stage", GT__PIPELINE},
    {"set_remat_policy_on_pipeline_iterations", GT__PIPELINE},
    {"set_remat_policy_on_layers_per_stage", GT__PIPELINE},
    {"attention", "there is one CPU attention kernel, tiled with an online softmax"},
    {"sa_block_q", GT__SPLASH},
    {"sa_block_kv", GT__SPLASH},
    {"sa_block_kv_compute", GT__SPLASH},
    {"sa_block_q_dkv", GT__SPLASH},
    {"sa_block_kv_dkv", GT__SPLASH},
    {"sa_block_kv_dkv_compute", GT__SPLASH},
    {"sa_block_q_dq", GT__SPLASH},
    {"sa_block_kv_dq", GT__SPLASH},
    {"sa_use_fused_bwd_kernel", GT__SPLASH},
    {"sa_q_layout", GT__SPLASH},
    {"sa_k_layout", GT__SPLASH},
    {"sa_v_layout", GT__SPLASH},
    {"cost_estimate_flops_fwd", GT__SPLASH},
    {"cost_estimate_flops_bwd", GT__SPLASH},
    {"dq_reduction_steps", GT__SPLASH},
    {"use_splash_scheduler", GT__SPLASH},
    {"use_tokamax_splash", GT__SPLASH},
    {"use_jax_splash", GT__SPLASH},
    {"force_q_layout", GT__SPLASH},
    {"use_ragged_attention", "there is one CPU attention kernel; the ragged kernel is a TPU one"},
    {"ragged_block_size", "there is one CPU attention kernel; the ragged kernel is a TPU one"},
    {"enable_padding_causal_mask", "there is one CPU attention kernel (the flag is TransformerEngine's)"},
    {"hardware", "gemtrain runs on CPUs only"},
    {"fused_qkv", "the kernels choose their own fusion"},
    {"fused_mlp", "the kernels choose their own fusion"},
    {"megablox", "the MoE kernels are gemtrain's own (kernels/moe*.c)"},
    {"sparse_matmul", "the MoE kernels are gemtrain's own (kernels/moe*.c)"},
    {"use_tokamax_gmm", "the MoE kernels are gemtrain's own (kernels/moe*.c)"},
    {"use_custom_sort_vjp", "the MoE kernels are gemtrain's own (kernels/moe*.c)"},
    {"use_ring_of_experts", "the MoE kernels are gemtrain's own (kernels/moe*.c)"},
    {"use_batch_split_schedule", "MaxText reads it in DeepSeek's layers only"},
    {"wi_tile_fwd_batch_seq", GT__GMM},
    {"wi_tile_fwd_embed_dim", GT__GMM},
    {"wi_tile_fwd_mlp_dim", GT__GMM},
    {"wi_tile_dlhs_batch_seq", GT__GMM},
    {"wi_tile_dlhs_embed_dim", GT__GMM},
    {"wi_tile_dlhs_mlp_dim", GT__GMM},
    {"wi_tile_drhs_batch_seq", GT__GMM},
    {"wi_tile_drhs_embed_dim", GT__GMM},
    {"wi_tile_drhs_mlp_dim", GT__GMM},
    {"wo_tile_fwd_batch_seq", GT__GMM},
    {"wo_tile_fwd_embed_dim", GT__GMM},
    {"wo_tile_fwd_mlp_dim", GT__GMM},
    {"wo_tile_dlhs_batch_seq", GT__GMM},
    {"wo_tile_dlhs_embed_dim", GT__GMM},
    {"wo_tile_dlhs_mlp_dim", GT__GMM},
    {"wo_tile_drhs_batch_seq", GT__GMM},
    {"wo_tile_drhs_embed_dim", GT__GMM},
    {"wo_tile_drhs_mlp_dim", GT__GMM},
    {"wi_tile_fwd_buffer_count", GT__GMM},
    {"wi_tile_dlhs_buffer_count", GT__GMM},
    {"wi_tile_drhs_buffer_count", GT__GMM},
    {"wo_tile_fwd_buffer_count", GT__GMM},
    {"wo_tile_dlhs_buffer_count", GT__GMM},
    {"wo_tile_drhs_buffer_count", GT__GMM},
    {"use_iota_embed", "the embedding is a row gather"},
    {"float32_qk_product", "attention scores are always float32"},
    {"float32_logits", "logits are always float32"},
    {"cast_logits_to_fp32", "logits are always float32"},
    {"optimizer_memory_host_offload", "the optimizer state is in host memory already"},
    {"parameter_memory_host_offload", "the parameters are in host memory already"},
    {"checkpoint_storage_use_ocdbt", GT__GTCK},
    {"checkpoint_storage_use_zarr3", GT__GTCK},
    {"checkpoint_storage_concurrent_gb", GT__GTCK},
    {"checkpoint_storage_target_data_file_size_bytes", GT__GTCK},
    {"enable_orbax_v1", GT__GTCK},
    {"checkpoint_conversion_fn", "load_parameters_path reads a checkpoint, a Hugging Face directory or a parameter file, "
                                 "whichever it is given"},
    {"source_checkpoint_layout", "load_parameters_path reads a checkpoint, a Hugging Face directory or a parameter file, "
                                 "whichever it is given"},
    {"enable_single_replica_ckpt_restoring", "every rank reads its own checkpoint shards"},
    {"multi_tier_checkpointing_backup_interval_minutes", "read with enable_multi_tier_checkpointing=true only"},
    {"mtc_data_parallelism", "read with enable_multi_tier_checkpointing=true only"},
    {"local_checkpoint_directory", "read with enable_emergency_checkpoint or enable_multi_tier_checkpointing only"},
    {"local_checkpoint_period", "read with enable_emergency_checkpoint or enable_multi_tier_checkpointing only"},
    {"enable_goodput_recording", "goodput is always recorded: in every metrics.jsonl record and the run's closing line"},
    {"monitor_goodput", "goodput is always recorded: in every metrics.jsonl record and the run's closing line"},
    {"enable_pathways_goodput", "there is no goodput recorder"},
    {"goodput_upload_interval_seconds", GT__METRICS},
    {"monitor_step_time_deviation", GT__METRICS},
    {"step_deviation_interval_seconds", GT__METRICS},
    {"enable_gcp_goodput_metrics", GT__METRICS},
    {"enable_gcp_step_deviation_metrics", GT__METRICS},
    {"report_heartbeat_metric_for_gcp_monitoring", GT__METRICS},
    {"heartbeat_reporting_interval_in_seconds", GT__METRICS},
    {"report_performance_metric_for_gcp_monitoring", GT__METRICS},
    {"managed_mldiagnostics", GT__METRICS},
    {"managed_mldiagnostics_run_group", GT__METRICS},
    {"enable_checkpoint_cloud_logger", GT__METRICS},
    {"collect_stack_trace", "there is no stack-trace collector"},
    {"stack_trace_to_cloud", "there is no stack-trace collector"},
    {"stack_trace_interval_seconds", "there is no stack-trace collector"},
    {"gcs_metrics", "metrics go to <run directory>/metrics.jsonl"},
    {"metrics_file", "metrics go to <run directory>/metrics.jsonl"},
    {"save_config_to_gcs", "the resolved config goes to <run directory>/config.json"},
    {"log_config", "the resolved config goes to <run directory>/config.json (dump_config=true prints it)"},
    {"upload_all_profiler_results", "profiler=trace writes <run directory>/trace.json"},
    {"hide_profiler_step_metric", "profiler=trace writes <run directory>/trace.json"},
    {"profile_cleanly", "profiler=trace writes <run directory>/trace.json"},
    {"use_vertex_tensorboard", "TensorBoard events go to <run directory>/tensorboard"},
    {"vertex_tensorboard_project", "TensorBoard events go to <run directory>/tensorboard"},
    {"vertex_tensorboard_region", "TensorBoard events go to <run directory>/tensorboard"},
    {"jax_cache_dir", GT__NO_JAX},
    {"jax_debug_log_modules", GT__NO_JAX},
    {"max_checkify", GT__NO_JAX},
    {"enable_jax_profiler", GT__NO_JAX},
    {"jax_profiler_port", GT__NO_JAX},
    {"debug_sharding", GT__NO_JAX},
    {"enable_nnx", "there is no Flax"},
    {"dump_hlo", GT__NO_XLA},
    {"dump_step", GT__NO_XLA},
    {"dump_hlo_local_dir", GT__NO_XLA},
    {"dump_hlo_delete_local_after", GT__NO_XLA},
    {"dump_hlo_gcs_dir", GT__NO_XLA},
    {"dump_hlo_local_module_name", GT__NO_XLA},
    {"dump_hlo_module_name", GT__NO_XLA},
    {"dump_hlo_xla_flags", GT__NO_XLA},
    {"dump_hlo_upload_all", GT__NO_XLA},
    {"dump_jaxpr", GT__NO_JAX},
    {"dump_jaxpr_local_dir", GT__NO_JAX},
    {"dump_jaxpr_delete_local_after", GT__NO_JAX},
    {"dump_jaxpr_gcs_dir", GT__NO_JAX},
    {"shardy", GT__NO_XLA},
    {"jax_distributed_initialization_timeout", "ranks start under mpirun (collective_timeout_seconds bounds a wait)"},
    {"skip_jax_distributed_system", "ranks start under mpirun"},
    {"enable_single_controller", "ranks start under mpirun"},
    {"colocated_python_checkpointing", "there is no Pathways; ranks start under mpirun"},
    {"colocated_python_data_input", "there is no Pathways; ranks start under mpirun"},
    {"subslice_shape", "there is no Pathways; ranks start under mpirun"},
    {"compile_topology", "there is no ahead-of-time compilation"},
    {"compile_topology_num_slices", "there is no ahead-of-time compilation"},
    {"compiled_trainstep_file", "there is no ahead-of-time compilation"},
    {"allow_split_physical_axes", GT__MESH},
    {"custom_mesh", GT__MESH},
    {"optimize_mesh_for_tpu_v6e", GT__MESH},
    {"shard_mode", GT__MESH},
    {"sharding_tolerance", GT__MESH},
    {"moe_fsdp_use_two_stage_all_gather", GT__MESH},
    {"shard_exp_on_fsdp", GT__MESH},
    {"use_2d_fsdp_sharding", GT__MESH},
    {"context_parallel_load_balance", "read with context parallelism only, which gemtrain does not have"},
    {"context_parallel_strategy", "read with context parallelism only, which gemtrain does not have"},
    {"mesh_axes", "the mesh is data x fsdp x expert, set by the ici_* and dcn_* keys"},
    {"logical_axis_rules", "the mesh is data x fsdp x expert, set by the ici_* and dcn_* keys"},
    {"override_logical_axis_rules", "the mesh is data x fsdp x expert, set by the ici_* and dcn_* keys"},
    {"data_sharding", "the mesh is data x fsdp x expert, set by the ici_* and dcn_* keys"},
    {"input_data_sharding_logical_axes", "the mesh is data x fsdp x expert, set by the ici_* and dcn_* keys"},
    {"override_model_config", "a command-line value overrides a preset's value without it"},
    {"enable_dropout", "the model has no dropout (lora_dropout is the adapters')"},
    {"base_config", "the base is gemtrain's configs/base.json, then the model_name preset"},
    {"debug", "MaxText's reinforcement-learning debugging; there is no RL trainer"},
    {"max_corpus_chars", "MaxText reads it when it trains a tokenizer; gemtrain reads a trained one (tokenizer_path)"},
    {"grain_worker_count", GT__GRAIN},
    {"grain_per_worker_buffer_size", GT__GRAIN},
    {"grain_num_threads", GT__GRAIN},
    {"grain_prefetch_buffer_size", GT__GRAIN},
    {"grain_worker_count_eval", GT__GRAIN},
    {"grain_per_worker_buffer_size_eval", GT__GRAIN},
    {"grain_ram_budget_mb", GT__GRAIN},
    {"grain_num_threads_eval", GT__GRAIN},
    {"grain_prefetch_buffer_size_eval", GT__GRAIN},
    {"grain_data_source_max_workers", GT__GRAIN},
    {"per_device_batch_size_start", "read with enable_rampup_batch_size=true only"},
    {"per_device_batch_size_increment", "read with enable_rampup_batch_size=true only"},
    {"global_rampup_samples", "read with enable_rampup_batch_size=true only"},
    {"mtp_loss_scaling_factor", "read with mtp_num_layers > 0 only (multi-token prediction, which gemtrain does not have)"},
    {"mtp_eval_target_module", "read with mtp_num_layers > 0 only (multi-token prediction, which gemtrain does not have)"},
    {"muon_beta", "read with opt_type=muon only; gemtrain's optimizer is adamw"},
    {"muon_weight_decay", "read with opt_type=muon only; gemtrain's optimizer is adamw"},
    {"muon_consistent_rms", "read with opt_type=muon only; gemtrain's optimizer is adamw"},
    {"rope_use_scale", "read with rope_type=llama3.1 only; gemtrain's RoPE is the default kind"},
    {"max_position_embeddings", GT__YARN},
    {"original_max_position_embeddings", GT__YARN},
    {"rope_factor", GT__YARN},
    {"beta_fast", GT__YARN},
    {"beta_slow", GT__YARN},
    {"mscale", GT__YARN},
    {"rope_interleave", GT__YARN},
    {"rope_truncate", GT__YARN},
    {"rope_attention_scaling", GT__YARN},
    {"q_lora_rank", GT__MLA},
    {"kv_lora_rank", GT__MLA},
    {"qk_nope_head_dim", GT__MLA},
    {"qk_rope_head_dim", GT__MLA},
    {"v_head_dim", GT__MLA},
    {"mla_naive_kvcache", GT__MLA},
    {"mla_q", GT__MLA},
    {"mla_kv", GT__MLA},
    {"moba_chunk_size", "read with moba=true only (mixture of block attention, which gemtrain does not have)"},
    {"moba_topk", "read with moba=true only (mixture of block attention, which gemtrain does not have)"},
    {"index_head_dim", "read with use_sparse_indexer=true only (DeepSeek's sparse attention, which gemtrain does not have)"},
    {"index_n_heads", "read with use_sparse_indexer=true only (DeepSeek's sparse attention, which gemtrain does not have)"},
    {"index_topk", "read with use_sparse_indexer=true only (DeepSeek's sparse attention, which gemtrain does not have)"},
    {"gdn_conv_kernel_dim", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"gdn_key_head_dim", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"gdn_value_head_dim", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"gdn_num_key_heads", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"gdn_num_value_heads", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"gdn_chunk_size", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"use_qk_norm_in_gdn", "read by decoder_block qwen3_next only (its gated delta net)"},
    {"sinkhorn_iterations", "read with mhc_expansion_rate > 0 only (hyper-connections, which gemtrain does not have)"},
    {"kv_quant_axis", "read with quantize_kvcache=true only, which gemtrain does not support"},
    {"kv_quant_dtype", "read with quantize_kvcache=true only, which gemtrain does not support"},
    {"quant_cfg_path", GT__QUANT},
    {"constant_bound_config", GT__QUANT},
    {"replicate_quant_scale", GT__QUANT},
    {"weight_quantization_calibration_method", GT__QUANT},
    {"act_quantization_calibration_method", GT__QUANT},
    {"bwd_quantization_calibration_method", GT__QUANT},
    {"quantization_local_shard_count", GT__QUANT},
    {"vllm_hf_config_path", "read by MaxText's vLLM adapter only; there is none here"},
    {"vllm_additional_config", "read by MaxText's vLLM adapter only; there is none here"},
    {"inference_microbenchmark_prefill_lengths", GT__SERVER},
    {"inference_microbenchmark_stages", GT__SERVER},
    {"inference_microbenchmark_loop_iters", GT__SERVER},
    {"inference_microbenchmark_log_file_path", GT__SERVER},
    {"inference_microbenchmark_num_samples", GT__SERVER},
    {"inference_metadata_file", GT__SERVER},
    {"inference_server", GT__SERVER},
    {"inference_benchmark_test", GT__SERVER},
    {"prefill_slice", GT__SERVER},
    {"generate_slice", GT__SERVER},
    {"enable_model_warmup", GT__SERVER},
    {"enable_llm_inference_pool", GT__SERVER},
    {"prometheus_port", GT__SERVER},
    {"enable_prefix_caching", GT__SERVER},
    {"prefix_caching_hbm_byte", GT__SERVER},
    {"prefix_caching_dram_byte", GT__SERVER},
    {"use_chunked_prefill", "gemtrain decode prefills the whole prompt at once"},
    {"prefill_chunk_size", "gemtrain decode prefills the whole prompt at once"},
    {"stack_prefill_result_cache", GT__KV_LAYOUT},
    {"prefill_cache_axis_order", GT__KV_LAYOUT},
    {"ar_cache_axis_order", GT__KV_LAYOUT},
    {"compute_axis_order", GT__KV_LAYOUT},
    {"reshape_q", GT__KV_LAYOUT},
    {"pagedattn_num_pages", GT__KV_LAYOUT},
    {"pagedattn_tokens_per_page", GT__KV_LAYOUT},
    {"pagedattn_pages_per_compute_block", GT__KV_LAYOUT},
    {"pagedattn_max_pages_per_group", GT__KV_LAYOUT},
    {"pagedattn_head_dim_alignment", GT__KV_LAYOUT},
    {"train_image_column", GT__VISION},
    {"eval_image_column", GT__VISION},
    {"freeze_vision_encoder_params", GT__VISION},
    {"freeze_audio_encoder_params", GT__VISION},
    {"dtype_mm", GT__VISION},
    {"remat_policy_for_vit", GT__VISION},
    {"image_size_for_vit", GT__VISION},
    {"image_path", GT__VISION},
    {"image_placeholder", GT__VISION},
    {"video_path", GT__VISION},
    {"audio_path", GT__VISION},
    {"posemb_type_for_vit", GT__VISION},
    {"max_num_images_per_example", GT__VISION},
    {"hidden_size_for_vit", GT__VISION},
    {"intermediate_size_for_vit", GT__VISION},
    {"num_attention_heads_for_vit", GT__VISION},
    {"num_channels_for_vit", GT__VISION},
    {"tile_size_for_vit", GT__VISION},
    {"patch_size_for_vit", GT__VISION},
    {"conv_stride_for_vit", GT__VISION},
    {"num_hidden_layers_for_vit", GT__VISION},
    {"projector_input_dim_for_vit", GT__VISION},
    {"projector_output_dim_for_vit", GT__VISION},
    {"rope_theta_for_vit", GT__VISION},
    {"vision_output_dim_for_vit", GT__VISION},
    {"pixel_shuffle_ratio_for_vit", GT__VISION},
    {"projector_dropout_for_vit", GT__VISION},
    {"spatial_merge_size_for_vit", GT__VISION},
    {"out_hidden_size_for_vit", GT__VISION},
    {"temporal_patch_size_for_vit", GT__VISION},
    {"num_position_embeddings_for_vit", GT__VISION},
    {"deepstack_visual_indexes_for_vit", GT__VISION},
    {"d_model_for_audio", GT__VISION},
    {"encoder_attention_heads_for_audio", GT__VISION},
    {"encoder_ffn_dim_for_audio", GT__VISION},
    {"encoder_layers_for_audio", GT__VISION},
    {"attention_dropout_for_audio", GT__VISION},
    {"activation_dropout_for_audio", GT__VISION},
    {"activation_function_for_audio", GT__VISION},
    {"num_mel_bins_for_audio", GT__VISION},
    {"max_source_positions_for_audio", GT__VISION},
    {"scale_embedding_for_audio", GT__VISION},
    {"n_window_for_audio", GT__VISION},
    {"n_window_infer_for_audio", GT__VISION},
    {"conv_chunksize_for_audio", GT__VISION},
    {"downsample_hidden_size_for_audio", GT__VISION},
    {"output_dim_for_audio", GT__VISION},
    {"num_conv_layers_for_audio", GT__VISION},
    {"max_timescale_for_audio", GT__VISION},
    {"max_sample_len_for_audio", GT__VISION},
    {"mrope_section", GT__VISION},
    {"position_id_per_seconds", GT__VISION},
};

/* MaxText keys of what gemtrain does not have, or does one fixed way.
 * Set to the value that matches what gemtrain does (for a feature, the
 * value that leaves it off: MaxText's default, as its base.yml writes it;
 * for Gemma's fixed architecture, Gemma's value, as MaxText's gemma3 model
 * files write it) they are accepted with a note; any other value is refused
 * as not supported, never answered with a key of some other feature. `off`
 * in [brackets] is a list, compared element by element. */
static const struct {
  const char *name, *off, *what;
} gt__unsupported_keys[] = {
    {"ici_tensor_parallelism", "1", "tensor parallelism"},
    {"ici_tensor_transpose_parallelism", "1", "tensor parallelism"},
    {"ici_tensor_sequence_parallelism", "1", "tensor-sequence parallelism"},
    {"ici_sequence_parallelism", "1", "sequence parallelism"},
    {"ici_context_parallelism", "1", "context parallelism"},
    {"ici_context_autoregressive_parallelism", "1", "autoregressive parallelism"},
    {"ici_autoregressive_parallelism", "1", "autoregressive parallelism"},
    {"ici_pipeline_parallelism", "1", "pipeline parallelism"},
    {"ici_fsdp_transpose_parallelism", "1", "fsdp-transpose parallelism (a second FSDP axis)"},
    {"dcn_tensor_parallelism", "1", "tensor parallelism"},
    {"dcn_tensor_transpose_parallelism", "1", "tensor parallelism"},
    {"dcn_tensor_sequence_parallelism", "1", "tensor-sequence parallelism"},
    {"dcn_sequence_parallelism", "1", "sequence parallelism"},
    {"dcn_context_parallelism", "1", "context parallelism"},
    {"dcn_context_autoregressive_parallelism", "1", "autoregressive parallelism"},
    {"dcn_autoregressive_parallelism", "1", "autoregressive parallelism"},
    {"dcn_pipeline_parallelism", "1", "pipeline parallelism"},
    {"dcn_fsdp_transpose_parallelism", "1", "fsdp-transpose parallelism (a second FSDP axis)"},
    {"num_slices", "-1", "a set number of slices (the ranks are the processes mpirun starts; the dcn_* keys lay them out)"},
    {"shard_optimizer_over_data", "false", "ZeRO-1 optimizer sharding over the data axis (ici_fsdp_parallelism shards "
                                           "parameters and optimizer state together)"},
    {"expert_shard_attention_option", "fsdp", "the expert axis acting as context parallelism"},
    {"num_layers_per_pipeline_stage", "1", "pipeline parallelism"},
    {"num_pipeline_repeats", "-1", "pipeline parallelism"},
    {"num_pipeline_microbatches", "-1", "pipeline parallelism"},
    {"pipeline_parallel_layers", "-1", "pipeline parallelism"},
    {"pipeline_delay_activation_forwarding", "false", "pipeline parallelism"},
    {"pipeline_fsdp_ag_once", "false", "pipeline parallelism"},
    {"quantization", "", "quantized training (AQT, fp8)"},
    {"use_qwix_quantization", "false", "quantized training (Qwix)"},
    {"checkpoint_is_quantized", "false", "quantized checkpoints"},
    {"save_quantized_params_path", "", "quantized checkpoints"},
    {"quantize_kvcache", "false", "a quantized KV cache"},
    {"model_call_mode", "", "an inference-only model call"},
    {"dropout_rate", "0", "dropout in the base model"},
    {"capacity_factor", "-1", "MoE token dropping (every routed token is computed)"},
    {"use_multimodal", "false", "multimodal inputs"},
    {"use_audio", "false", "multimodal inputs"},
    {"use_audio_in_video", "false", "multimodal inputs"},
    {"use_mrope", "false", "multimodal RoPE"},
    {"reuse_example_batch", "0", "reusing one batch for every step"},
    {"global_parameter_scale", "1", "scaling the model by a power of 2 (set base_emb_dim, base_num_query_heads, "
                                    "base_num_kv_heads, base_mlp_dim, base_num_decoder_layers or head_dim instead)"},
    {"mlp_activations", "[gelu,linear]", "a feed-forward other than Gemma's GeGLU (gelu times linear)"},
    {"mlp_activations_limit", "-1", "clamping the feed-forward's activations"},
    {"mlp_bias", "false", "feed-forward biases"},
    {"logits_via_embedding", "true", "an output projection apart from the embedding (Gemma's logits use the tied "
                                     "embedding)"},
    {"normalize_embedding_logits", "false", "logits divided by sqrt(base_emb_dim) (gemtrain's logits are the tied "
                                            "embedding's product, unscaled, as Hugging Face's Gemma)"},
    {"logits_dot_in_fp32", "false", "a float32 logits matmul alone (matmul_precision=high makes every matmul float32)"},
    {"activations_in_float32", "false", "float32 activations alone (dtype=float32 computes everything in float32)"},
    {"grad_dtype", "float32", "gradients in another dtype (they are float32)"},
    {"float32_weight_sum", "true", "summing the experts' weighted outputs below float32"},
    {"mtp_num_layers", "0", "multi-token prediction"},
    {"use_random_routing", "false", "random MoE routing"},
    {"norm_topk_prob", "true", "top-k routing weights left unnormalised (gemtrain divides them by their sum, as Gemma "
                               "4)"},
    {"first_num_dense_layers", "0", "dense layers before the MoE ones (every layer of a Gemma 4 MoE model has "
                                    "experts)"},
    {"interleave_moe_layer_step", "1", "MoE on every n-th layer only (every layer of a Gemma 4 MoE model has "
                                       "experts)"},
    {"routed_scaling_factor", "1", "scaling of the routed experts' weights (DeepSeek's)"},
    {"routed_score_func", "", "a routing score other than the softmax"},
    {"routed_bias", "false", "a learned routing bias"},
    {"routed_bias_update_rate", "0", "a learned routing bias"},
    {"n_routing_groups", "-1", "group-limited routing (DeepSeek's)"},
    {"topk_routing_group", "-1", "group-limited routing (DeepSeek's)"},
    {"attention_type", "global", "one attention kind for every layer (layer_pattern sets each layer's: L local, G "
                                 "global)"},
    {"attention_bias", "false", "biases on the query, key and value projections"},
    {"attention_sink", "false", "attention sinks"},
    {"chunk_attn_window_size", "0", "chunked attention (Llama 4's)"},
    {"attn_logits_soft_cap", "0", "soft-capping of the attention logits (Gemma 2's)"},
    {"use_post_attn_norm", "true", "layers without the post-attention norm (Gemma's layers always have it)"},
    {"use_post_ffw_norm", "true", "layers without the post-feed-forward norm (Gemma's layers always have it)"},
    {"use_qk_norm", "false", "Llama 4's query/key L2 norm after RoPE (Gemma's query/key RMSNorm before RoPE is "
                             "always on)"},
    {"nope_layer_interval", "-1", "layers without RoPE (Llama 4's)"},
    {"temperature_tuning", "false", "attention temperature tuning (Llama 4's)"},
    {"use_max_logit_estimate", "-1", "a fixed max-logit estimate in the attention softmax"},
    {"moba", "false", "mixture of block attention (MoBA)"},
    {"use_sparse_indexer", "false", "DeepSeek's sparse attention indexer"},
    {"mhc_expansion_rate", "0", "hyper-connections (DeepSeek's mHC)"},
    {"trainable_position_size", "-1", "learned position embeddings (GPT-3's)"},
    {"use_untrainable_positional_embedding", "false", "sinusoidal position embeddings"},
    {"rope_type", "default", "llama3.1 and yarn RoPE scaling (rope_linear_scaling_factor scales the global layers' "
                             "positions)"},
    {"rope_min_timescale", "1", "a RoPE minimum timescale other than 1 (rope_max_timescale and "
                                "local_rope_max_timescale are the bases)"},
    {"partial_rotary_factor", "1", "partial RoPE set by this key (Qwen3-Next's; gemtrain's are global_rope_proportion "
                                   "and local_rope_proportion)"},
    {"decoder_layer_input", "device", "offloading a layer's input (it is the remat boundary, always kept)"},
    {"mlpwi", "remat", "a remat choice for the fused gate-and-up projection (gemtrain's are mlpwi_0 and mlpwi_1)"},
    {"qkv_proj", "remat", "a remat choice for the fused query/key/value projection (gemtrain's are query_proj, "
                          "key_proj and value_proj)"},
    {"record_internal_nn_metrics", "0", "recording internal activation statistics"},
    {"profile_periodically_period", "-1", "profiling every n steps (profiler=trace records profiler_steps steps "
                                          "once)"},
    {"enable_continuous_checkpointing", "false", "continuous checkpointing (checkpoint_period sets when checkpoints "
                                                 "are written)"},
    {"enable_multi_tier_checkpointing", "false", "multi-tier checkpointing"},
    {"enable_emergency_checkpoint", "false", "emergency checkpoints (a SIGTERM checkpoints, docs/checkpoints.md)"},
    {"lora_input_adapters_path", "", "serving several LoRA adapters (lora_restore_path starts training from one PEFT "
                                     "adapter)"},
    {"chat_template_path", "", "a chat template file (chat_template chooses gemtrain's built-in templates)"},
    {"tokenizer_type", "huggingface", "a sentencepiece or tiktoken tokenizer (tokenizer_path is a Hugging Face "
                                      "tokenizer.json)"},
    {"add_bos", "true", "documents without <bos> (every document starts with it, docs/data.md)"},
    {"add_eos", "true", "documents without <eos> (every document ends with it, docs/data.md)"},
    {"generate_padding_batch_train", "false", "padding batches"},
    {"generate_padding_batch_eval", "false", "padding batches"},
    {"max_segments_per_seq", "-1", "a limit on the documents packed into one sequence"},
    {"expansion_factor_real_data", "-1", "loading data on some hosts only"},
    {"eval_per_device_batch_size", "0", "an eval batch size of its own (an eval batch is the training batch's size; "
                                        "eval_steps sets how many)"},
    {"enable_rampup_batch_size", "false", "batch-size ramp-up"},
    {"multi_sampling", "false", "several samples per prompt"},
    {"return_log_prob", "false", "log-probabilities in decode's output"},
    {"load_from_prefill_dir", "false", "a prefill read from a directory"},
    {"prefill_cache_dir", "", "a prefill read from a directory"},
    {"autoregressive_decode_assert", "", "checking decode's output against a given text"},
};

/* MaxText keys of what gemtrain does differently, where no value of the key
 * would say what gemtrain does (a TFDS or Hugging Face Hub dataset, Grain's
 * file lists): refused, whatever the value, naming gemtrain's way when it
 * has one. */
#define GT__LOCAL_DATA "gemtrain reads local files: dataset_type and dataset_path (docs/data.md)"
static const char *const gt__unimplemented_keys[][2] = {
    {"dataset_name", GT__LOCAL_DATA},
    {"eval_dataset_name", GT__LOCAL_DATA},
    {"train_split", GT__LOCAL_DATA},
    {"eval_split", GT__LOCAL_DATA},
    {"hf_path", GT__LOCAL_DATA},
    {"hf_name", GT__LOCAL_DATA},
    {"hf_data_dir", GT__LOCAL_DATA},
    {"hf_eval_split", GT__LOCAL_DATA},
    {"hf_access_token", GT__LOCAL_DATA},
    {"hf_train_files", "gemtrain's is dataset_path"},
    {"grain_train_files", "gemtrain's is dataset_path"},
    {"hf_eval_files", "gemtrain's is eval_dataset_path"},
    {"grain_eval_files", "gemtrain's is eval_dataset_path"},
    {"grain_train_mixture_config_path", GT__LOCAL_DATA},
    {"grain_file_type", GT__LOCAL_DATA},
    {"grain_packing_type", "packing=true packs documents into sequences (docs/data.md)"},
    {"eval_data_columns", "eval data is read with train_data_columns"},
    {"tokenize_train_data", "dataset_type says what the files hold: text and jsonl are tokenized, tokens (.gtok "
                            "shards) are not"},
    {"tokenize_eval_data", "dataset_type says what the files hold: text and jsonl are tokenized, tokens (.gtok "
                           "shards) are not"},
    {"use_truncation", "packing and overlong_records decide what becomes of a long document (docs/data.md)"},
    {"use_chat_template", "use_sft chat records are always rendered with chat_template's template"},
    {"num_epoch", "steps counts optimizer steps; the data repeats epoch after epoch (the run's 'order:' line gives "
                  "the rows per epoch)"},
    {"max_prefill_predict_length", "gemtrain decode prefills the whole prompt"},
};

/* Hugging Face Trainer / TRL / PEFT names and what gemtrain calls the same
 * thing (a name close to a gemtrain key but meaning something else is
 * answered here, before the edit distance guesses). */
static const char *const gt__hf_names[][2] = {
    {"gradient_checkpointing", "remat_policy (true is remat_policy=full, false remat_policy=none; "
                               "docs/memory-plan.md lists the policies between)"},
    {"weight_decay", "adam_weight_decay"},
    {"save_steps", "checkpoint_period"},
    {"save_total_limit", "max_num_checkpoints_to_keep"},
    {"batch_size", "per_device_batch_size (sequences per device per step)"},
    {"per_device_train_batch_size", "per_device_batch_size"},
    {"train_batch_size", "per_device_batch_size (the global batch is per_device_batch_size x num_devices)"},
    {"warmup_steps", "warmup_steps_fraction (a fraction of the schedule: warmup_steps=100 of steps=1000 is "
                     "warmup_steps_fraction=0.1)"},
    {"warmup_ratio", "warmup_steps_fraction"},
    {"num_train_epochs", "steps (gemtrain counts optimizer steps: epochs x training rows per epoch / global batch; "
                         "the run's 'order:' line and `gemtrain data` give the rows per epoch)"},
    {"epochs", "steps (gemtrain counts optimizer steps: epochs x training rows per epoch / global batch; "
               "the run's 'order:' line and `gemtrain data` give the rows per epoch)"},
    {"max_steps", "steps"},
    {"lr", "learning_rate"},
    {"lr_scheduler_type", "lr_schedule_type"},
    {"max_grad_norm", "gradient_clipping_threshold"},
    {"adam_beta1", "adam_b1"},
    {"adam_beta2", "adam_b2"},
    {"adam_epsilon", "adam_eps"},
    {"optim", "opt_type"},
    {"seed", "init_weights_seed and data_shuffle_seed"},
    {"output_dir", "base_output_directory (the run's directory is base_output_directory/run_name)"},
    {"logging_steps", "log_period"},
    {"eval_strategy", "eval_interval (steps between evaluations; -1: never)"},
    {"evaluation_strategy", "eval_interval (steps between evaluations; -1: never)"},
    {"per_device_eval_batch_size", "eval_steps (batches per eval, each of the training batch's size)"},
    {"max_seq_length", "max_target_length"},
    {"max_length", "max_target_length"},
    {"seq_length", "max_target_length"},
    {"bf16", "dtype=bfloat16"},
    {"fp16", "dtype=bfloat16 (there is no float16 path)"},
    {"torch_dtype", "dtype"},
    {"model_name_or_path", "load_parameters_path (a Hugging Face directory) or model_name (a preset)"},
    {"resume_from_checkpoint", "run_name (a run resumes its own latest checkpoint) or load_full_state_path"},
    {"dataset_text_field", "train_data_columns"},
    {"report_to", "enable_tensorboard"},
    {"r", "lora_rank"},
    {"lora_r", "lora_rank"},
    {"target_modules", "lora_module_path (a regular expression over parameter names)"},
    {"use_rslora", "lora_use_rslora"},
    {"completion_only_loss", "sft_train_on_completion_only"},
    {"steps_per_epoch", "steps"},
};

static const char *gt__noop_why(const char *key) {
  for (size_t i = 0; i < sizeof gt__noop_keys / sizeof gt__noop_keys[0]; i++)
    if (!strcmp(key, gt__noop_keys[i][0])) return gt__noop_keys[i][1];
  return NULL;
}

static int gt__unsupported_at(const char *key) {
  for (size_t i = 0; i < sizeof gt__unsupported_keys / sizeof gt__unsupported_keys[0]; i++)
    if (!strcmp(key, gt__unsupported_keys[i].name)) return (int)i;
  return -1;
}

static const char *gt__unimplemented_hint(const char *key) {
  for (size_t i = 0; i < sizeof gt__unimplemented_keys / sizeof gt__unimplemented_keys[0]; i++)
    if (!strcmp(key, gt__unimplemented_keys[i][0])) return gt__unimplemented_keys[i][1];
  return NULL;
}

/* A list as text without its brackets, quotes and blanks: "[\"gelu\",
 * 'linear']" and "gelu, linear" are both "gelu,linear". */
static void gt__list_words(const char *v, char *buf, size_t n) {
  size_t j = 0;
  for (; *v && j + 1 < n; v++)
    if (!strchr("[]'\" \t", *v)) buf[j++] = *v;
  buf[j] = '\0';
}

/* A value that matches what gemtrain does: the same number, the same word
 * (in any case; true/false also as 1/0, and an empty value as false), or
 * for a [list] the same items in the same order. */
static int gt__is_off_value(const char *off, const char *v) {
  while (isspace((unsigned char)*v)) v++;
  if (off[0] == '[') {
    char a[128], b[128];
    gt__list_words(off, a, sizeof a);
    gt__list_words(v, b, sizeof b);
    return !strcasecmp(a, b);
  }
  char *e1, *e2;
  double a = strtod(off, &e1), b = strtod(v, &e2);
  if (*off && *v && !*e1 && !*e2) return a == b;
  if (!strcasecmp(off, "false")) return !strcasecmp(v, "false") || !strcmp(v, "0") || !*v;
  if (!strcasecmp(off, "true")) return !strcasecmp(v, "true") || !strcmp(v, "1");
  return !strcasecmp(off, v);
}

void gt_config_add_note(gt_config *cfg, const char *fmt, ...) {
  size_t n = strlen(cfg->notes);
  va_list ap;
  va_start(ap, fmt);
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (strstr(cfg->notes, line)) return; /* the same key in two layers: one note */
  /* a MaxText file may bring more notes than fit: the last line that fits
   * says so rather than a note being cut off or dropped unsaid */
  static const char more[] = "config: more notes left out (more MaxText keys accepted and ignored)\n";
  if (strstr(cfg->notes, more)) return;
  if (n + strlen(line) + 1 + sizeof more >= sizeof cfg->notes) {
    snprintf(cfg->notes + n, sizeof cfg->notes - n, "%s", more);
    return;
  }
  snprintf(cfg->notes + n, sizeof cfg->notes - n, "%s\n", line);
}

/* A key outside the table that is still known: a no-op MaxText key (noted,
 * GT_OK), an unsupported feature (at gemtrain's value: noted, GT_OK;
 * otherwise refused), a MaxText key gemtrain does not implement (refused).
 * value NULL: a lookup, not a setting. Returns -1 when the key is none of
 * these. */
static int gt__foreign_key(gt_config *cfg, const char *key, const char *value, const char *source, gt_err *err,
                           gt_rc *rc) {
  const char *why = gt__noop_why(key);
  if (why && !value) {
    *rc = gt_err_set(err, GT_ERR_CONFIG, "config: MaxText key '%s' (in %s) has no effect in gemtrain (%s); it has no value",
                     key, source, why);
    return 1;
  }
  if (why) {
    gt_config_add_note(cfg, "config: MaxText key '%s' has no effect here (%s); accepted and ignored", key, why);
    *rc = GT_OK;
    return 1;
  }
  const char *hint = gt__unimplemented_hint(key);
  if (hint) {
    *rc = gt_err_set(err, GT_ERR_CONFIG, "config: '%s' (in %s) is a MaxText key gemtrain does not implement (%s); remove it",
                     key, source, hint);
    return 1;
  }
  int u = gt__unsupported_at(key);
  if (u < 0) return -1;
  const char *off = gt__unsupported_keys[u].off, *q = off[0] ? "" : "'";
  if (!value) {
    *rc = gt_err_set(err, GT_ERR_CONFIG,
                     "config: MaxText key '%s' (in %s) is not one of gemtrain's: it does not support %s (the key is "
                     "accepted only as %s%s%s)",
                     key, source, gt__unsupported_keys[u].what, q, off, q);
    return 1;
  }
  if (gt__is_off_value(off, value)) {
    gt_config_add_note(cfg, "config: MaxText key '%s' = %s matches gemtrain, which does not support %s; accepted and "
                            "ignored",
                       key, *value ? value : "''", gt__unsupported_keys[u].what);
    *rc = GT_OK;
    return 1;
  }
  *rc = gt_err_set(err, GT_ERR_CONFIG,
                   "config: MaxText key '%s' = '%s' (in %s) asks for %s, which gemtrain does not support; remove "
                   "it (or set it to %s%s%s)",
                   key, value, source, gt__unsupported_keys[u].what, q, off, q);
  return 1;
}

/* A key outside the table. A MaxText or Hugging Face name is answered as
 * what it is; only a name neither knows gets the edit-distance guess. */
static gt_rc gt__unknown_key(const char *key, const char *source, gt_err *err) {
  for (size_t i = 0; i < sizeof gt__hf_names / sizeof gt__hf_names[0]; i++)
    if (!strcmp(key, gt__hf_names[i][0]))
      return gt_err_set(err, GT_ERR_CONFIG, "config: unknown key '%s' (in %s); gemtrain's name for it is %s", key,
                        source, gt__hf_names[i][1]);
  gt_rc rc;
  if (gt__foreign_key(NULL, key, NULL, source, err, &rc) >= 0) return rc;
  const char *near = gt__nearest_key(key);
  if (near)
    return gt_err_set(err, GT_ERR_CONFIG, "config: unknown key '%s' (in %s); did you mean '%s'?",
                      key, source, near);
  return gt_err_set(err, GT_ERR_CONFIG,
                    "config: unknown key '%s' (in %s); 'gemtrain train --help' lists the keys", key,
                    source);
}

/* ---------- set one key ---------- */

/* Numbers are decimal. strtod also reads hexadecimal ("0x10" is 16,
 * "0x1p-4" 1/16), and "010" is octal 8 in C and YAML 1.1 (MaxText's configs
 * are YAML): a value in either form is refused rather than guessed at.
 * Returns why, or NULL for a decimal (or not numeric at all) text. */
static const char *gt__not_decimal(const char *s) {
  while (isspace((unsigned char)*s)) s++;
  if (*s == '+' || *s == '-') s++;
  if (s[0] == '0' && s[1] && strchr("xXoObB", s[1]))
    return "hexadecimal, octal and binary forms are refused";
  if (s[0] == '0' && isdigit((unsigned char)s[1])) return "a leading zero is refused (octal in some parsers)";
  return NULL;
}

static int gt__parse_ll(const char *s, long long *out) {
  char *end;
  errno = 0;
  while (isspace((unsigned char)*s)) s++;
  if (!*s || gt__not_decimal(s)) return 0;
  long long v = strtoll(s, &end, 10);
  if (errno == 0 && *end == '\0') {
    *out = v;
    return 1;
  }
  /* accept integral floats such as 1e6 or 2048.0 */
  errno = 0;
  double d = strtod(s, &end);
  if (errno || *end || !isfinite(d) || d != floor(d) || fabs(d) > 9e15) return 0;
  *out = (long long)d;
  return 1;
}

/* A size for memory_limit_bytes: a number of bytes, or a decimal number
 * with a unit, binary (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB),
 * case-insensitive, a space allowed before it: "24GiB", "1.5 GB". The bytes
 * must come out whole. */
static int gt__parse_size(const char *s, long long *out) {
  static const struct { const char *unit; double bytes; } units[] = {
      {"b", 1},      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"kb", 1e3},   {"mb", 1e6},     {"gb", 1e9},        {"tb", 1e12}};
  char *end;
  while (isspace((unsigned char)*s)) s++;
  if (!isdigit((unsigned char)*s) || gt__not_decimal(s)) return 0;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !isfinite(v)) return 0;
  while (*end == ' ') end++;
  double scale = *end ? 0 : 1;
  for (size_t i = 0; *end && i < sizeof units / sizeof units[0]; i++) {
    size_t j = 0;
    while (end[j] && tolower((unsigned char)end[j]) == units[i].unit[j]) j++;
    if (!end[j] && !units[i].unit[j]) scale = units[i].bytes;
  }
  v *= scale;
  if (scale == 0 || v != floor(v) || v > 9e18) return 0;
  *out = (long long)v;
  return 1;
}

static int gt__parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  while (isspace((unsigned char)*s)) s++;
  if (!*s || gt__not_decimal(s)) return 0;
  double d = strtod(s, &end);
  if (errno || *end || !isfinite(d)) return 0;
  *out = d;
  return 1;
}

static int gt__parse_bool(const char *s, int *out) {
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1")) return *out = 1, 1;
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "0")) return *out = 0, 1;
  return 0;
}

static int gt__enum_has(const char *choices, const char *v) {
  size_t n = strlen(v);
  const char *p = choices;
  while (*p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

static void gt__choices_text(const char *choices, char *buf, size_t n) {
  size_t j = 0;
  for (const char *p = choices; *p && j + 3 < n; p++) {
    if (*p == '|') {
      buf[j++] = ',';
      buf[j++] = ' ';
    } else {
      buf[j++] = *p;
    }
  }
  buf[j] = '\0';
}

static void gt__num_text(double v, char *buf, size_t n) {
  if (fabs(v) >= 1e12)
    snprintf(buf, n, "%g", v);
  else
    snprintf(buf, n, "%.10g", v);
}

/* Keys whose MaxText default is None (`max_num_checkpoints_to_keep: None`
 * in its base.yml), and the value that means the same here. A null value
 * (YAML's null, ~ or None, JSON's null, or the text None or null) is read as
 * it; for other keys null stays an empty value. */
static const char *const gt__none_means[][2] = {
    {"max_num_checkpoints_to_keep", "0"}, /* None: keep every checkpoint, as 0 here */
};

static const char *gt__none_means_for(const char *key) {
  for (size_t i = 0; i < sizeof gt__none_means / sizeof gt__none_means[0]; i++)
    if (!strcmp(key, gt__none_means[i][0])) return gt__none_means[i][1];
  return NULL;
}

static const char *gt__none_value(const char *key, const char *value) {
  const char *means = gt__none_means_for(key);
  return means && (!*value || !strcmp(value, "None") || !strcmp(value, "null")) ? means : value;
}

gt_rc gt_config_set(gt_config *cfg, const char *key, const char *value, const char *source,
                    gt_err *err) {
  const gt_key_spec *k = gt_config_key(key);
  if (k) value = gt__none_value(k->name, value);
  gt_rc frc;
  if (!k && gt__foreign_key(cfg, key, value, source, err, &frc) >= 0) return frc;
  if (!k) return gt__unknown_key(key, source, err);
  char *field = (char *)cfg + k->offset;
  char lo[32], hi[32];
  gt__num_text(k->min, lo, sizeof lo);
  gt__num_text(k->max, hi, sizeof hi);
  switch (k->type) {
    case GT_KEY_INT: {
      long long v;
      if (!strcmp(k->name, "memory_limit_bytes")) { /* also "24GiB", "512MB" */
        if (!gt__parse_size(value, &v))
          return gt_err_set(err, GT_ERR_CONFIG,
                            "config: key '%s' expects a size: bytes, or a number with KiB, MiB, GiB, TiB, kB, MB, "
                            "GB or TB (24GiB), got '%s' (in %s)",
                            key, value, source);
        *(long long *)field = v;
        return GT_OK;
      }
      const char *nd = gt__not_decimal(value);
      if (nd)
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' expects a decimal integer, got '%s' (in %s); %s", key,
                          value, source, nd);
      if (!gt__parse_ll(value, &v))
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' expects an integer, got '%s' (in %s)",
                          key, value, source);
      if ((double)v < k->min || (double)v > k->max)
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' = %lld is out of range (in %s); allowed: %s .. %s", key, v,
                          source, lo, hi);
      if (k->size == sizeof(int))
        *(int *)field = (int)v;
      else
        *(long long *)field = v;
      return GT_OK;
    }
    case GT_KEY_FLOAT: {
      double v;
      const char *nd = gt__not_decimal(value);
      if (nd)
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' expects a decimal number, got '%s' (in %s); %s", key,
                          value, source, nd);
      if (!gt__parse_double(value, &v))
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' expects a number, got '%s' (in %s)",
                          key, value, source);
      if (v < k->min || v > k->max)
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' = %s is out of range (in %s); allowed: %s .. %s", key,
                          value, source, lo, hi);
      *(double *)field = v;
      return GT_OK;
    }
    case GT_KEY_BOOL: {
      int v;
      if (!gt__parse_bool(value, &v))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' expects true or false, got '%s' (in %s)", key, value,
                          source);
      *(int *)field = v;
      return GT_OK;
    }
    case GT_KEY_ENUM: {
      if (!gt__enum_has(k->choices, value)) {
        char c[256];
        gt__choices_text(k->choices, c, sizeof c);
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' = '%s' is not allowed (in %s); allowed: %s", key, value,
                          source, c);
      }
    } /* fall through: stored as a string */
    /* FALLTHRU */
    case GT_KEY_STR:
      if (strlen(value) >= k->size)
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' is too long (%zu characters, in %s); at most %zu", key,
                          strlen(value), source, k->size - 1);
      memcpy(field, value, strlen(value) + 1);
      return GT_OK;
  }
  return gt_err_set(err, GT_ERR_INTERNAL, "config: key '%s' has no type", key);
}

gt_rc gt_config_get_text(const gt_config *cfg, const char *key, char *buf, size_t n, gt_err *err) {
  const gt_key_spec *k = gt_config_key(key);
  if (!k) return gt__unknown_key(key, "a lookup", err);
  const char *field = (const char *)cfg + k->offset;
  switch (k->type) {
    case GT_KEY_INT:
      snprintf(buf, n, "%lld",
               k->size == sizeof(int) ? (long long)*(const int *)field : *(const long long *)field);
      break;
    case GT_KEY_FLOAT:
      snprintf(buf, n, "%.17g", *(const double *)field);
      break;
    case GT_KEY_BOOL:
      snprintf(buf, n, "%s", *(const int *)field ? "true" : "false");
      break;
    default:
      snprintf(buf, n, "%s", field);
  }
  return GT_OK;
}

/* ---------- JSON layers ---------- */

/* cJSON keeps every member of an object, so a key written twice was applied
 * twice and the last one won without a word; so would a key and its alias
 * (lora_restore_path and MaxText's hf_lora_adapter_path), which are compared
 * as the one key they set. where names the file or text ("'path'",
 * "point 2"). */
static gt_rc gt__no_duplicate_keys(const cJSON *obj, const char *where, gt_err *err) {
  for (const cJSON *a = obj->child; a; a = a->next)
    for (const cJSON *b = a->next; b; b = b->next) {
      if (!a->string || !b->string || strcmp(gt__canonical(a->string), gt__canonical(b->string))) continue;
      if (!strcmp(a->string, b->string))
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' appears twice in %s; set each key once", a->string,
                          where);
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: keys '%s' and '%s' in %s set the same key, '%s' (the other is its MaxText name); set "
                        "it once",
                        a->string, b->string, where, gt__canonical(a->string));
    }
  return GT_OK;
}

static gt_rc gt__read_json(const char *path, cJSON **out, gt_err *err) {
  char *buf;
  size_t n;
  gt_rc rc = gt_read_file(path, "config: file", &buf, &n, err);
  if (rc) return rc;
  char quoted[GT_STR_PATH + 8];
  snprintf(quoted, sizeof quoted, "'%s'", path);
  if (gt_config_path_is_yaml(path)) { /* MaxText's form of the same keys */
    rc = gt_config_parse_yaml(buf, n, path, out, err);
    free(buf);
    /* (a name written twice is refused at its line; a key and its alias
     * here) */
    if (!rc && (rc = gt__no_duplicate_keys(*out, quoted, err))) {
      cJSON_Delete(*out);
      *out = NULL;
    }
    return rc;
  }
  /* a NUL byte would end the text cJSON sees: what follows it would be
   * ignored, so it is refused as not JSON at its line */
  const char *nul = memchr(buf, '\0', n), *where = nul;
  cJSON *j = nul ? NULL : cJSON_ParseWithOpts(buf, &where, 1);
  if (!j) {
    long off = where ? (long)(where - buf) : 0;
    int line = 1;
    for (long i = 0; i < off && i < (long)n; i++) line += buf[i] == '\n';
    free(buf);
    return gt_err_set(err, GT_ERR_CONFIG, "config: '%s' is not valid JSON (near line %d)", path, line);
  }
  free(buf);
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return gt_err_set(err, GT_ERR_CONFIG, "config: '%s' must hold a JSON object of key: value", path);
  }
  if ((rc = gt__no_duplicate_keys(j, quoted, err))) {
    cJSON_Delete(j);
    return rc;
  }
  *out = j;
  return GT_OK;
}

static gt_rc gt__json_value_text(const cJSON *it, const char *path, char *buf, size_t n, gt_err *err) {
  if (cJSON_IsString(it)) {
    snprintf(buf, n, "%s", it->valuestring);
  } else if (cJSON_IsBool(it)) {
    snprintf(buf, n, "%s", cJSON_IsTrue(it) ? "true" : "false");
  } else if (cJSON_IsNumber(it)) {
    snprintf(buf, n, "%.17g", it->valuedouble);
  } else if (cJSON_IsArray(it) && it->string && !strcmp(it->string, "stop")) {
    /* a list of stop strings stays a JSON list, the form the key reads */
    const cJSON *e;
    cJSON_ArrayForEach(e, it) if (!cJSON_IsString(e))
      return gt_err_set(err, GT_ERR_CONFIG, "config: key 'stop' in '%s' must be a string or a list of strings", path);
    char *t = cJSON_PrintUnformatted(it);
    if (!t) return gt_err_set(err, GT_ERR_NOMEM, "config: no memory for key 'stop'");
    int too_long = strlen(t) >= n;
    snprintf(buf, n, "%s", t);
    cJSON_free(t);
    if (too_long) return gt_err_set(err, GT_ERR_CONFIG, "config: key 'stop' in '%s' is too long", path);
  } else if (cJSON_IsNull(it) && it->string && gt_config_key(it->string) &&
             gt__none_means_for(gt_config_key(it->string)->name)) {
    snprintf(buf, n, "%s", "None"); /* gt_config_set reads it (gt__none_means) */
  } else if (cJSON_IsArray(it) && it->string && !strcmp(it->string, "train_data_columns")) {
    /* MaxText's list form (train_data_columns: ['text']): the fields in
     * order, as the comma-separated text the key reads */
    size_t o = 0;
    buf[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, it) {
      if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, ','))
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key 'train_data_columns' in '%s' must be a list of field names (non-empty, "
                          "without ',') or one comma-separated text",
                          path);
      o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o ? "," : "", e->valuestring);
    }
    if (!o) return gt_err_set(err, GT_ERR_CONFIG, "config: key 'train_data_columns' in '%s' is an empty list", path);
    if (o >= n) return gt_err_set(err, GT_ERR_CONFIG, "config: key 'train_data_columns' in '%s' is too long", path);
  } else if (cJSON_IsArray(it) && it->string && !strcmp(it->string, "trainable_parameters_mask")) {
    /* MaxText's list of expressions: joined by spaces, the key's separator */
    size_t o = 0;
    buf[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, it) {
      if (!cJSON_IsString(e))
        return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' in '%s' must be a list of strings", it->string, path);
      o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o ? " " : "", e->valuestring);
    }
    if (o >= n) return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' in '%s' is too long", it->string, path);
  } else {
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key '%s' in '%s' must be a number, string or boolean", it->string, path);
  }
  return GT_OK;
}

/* A list or map under a MaxText key outside the table, as text the key's
 * check can compare: a list of scalars as "[a,b]" (mlp_activations), null as
 * "", anything nested as "[...]". */
static void gt__foreign_list_text(const cJSON *it, char *buf, size_t n) {
  snprintf(buf, n, "%s", cJSON_IsNull(it) ? "" : "[...]");
  if (!cJSON_IsArray(it)) return;
  size_t o = (size_t)snprintf(buf, n, "[");
  const cJSON *e;
  cJSON_ArrayForEach(e, it) {
    char one[64];
    if (cJSON_IsString(e)) snprintf(one, sizeof one, "%s", e->valuestring);
    else if (cJSON_IsNumber(e)) snprintf(one, sizeof one, "%.17g", e->valuedouble);
    else return (void)snprintf(buf, n, "[...]");
    o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o > 1 ? "," : "", one);
  }
  if (o + 2 > n) return (void)snprintf(buf, n, "[...]");
  snprintf(buf + o, n - o, "]");
}

static gt_rc gt__apply_json(gt_config *cfg, const cJSON *obj, const char *path, uint8_t *seen,
                            gt_err *err) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    char text[GT_STR_PATH + 32];
    gt_rc rc;
    /* a MaxText key outside the table may hold a list or a map (mesh_axes,
     * logical_axis_rules): it is judged by name, and by value when a
     * scalar says whether its feature is off */
    if (!gt_config_key(it->string) && (cJSON_IsArray(it) || cJSON_IsObject(it) || cJSON_IsNull(it))) {
      char items[256];
      gt__foreign_list_text(it, items, sizeof items);
      if (gt__foreign_key(cfg, it->string, items, path, err, &rc) < 0)
        return gt__unknown_key(it->string, path, err);
      if (rc) return rc;
      continue;
    }
    rc = gt__json_value_text(it, path, text, sizeof text, err);
    if (rc) return rc;
    rc = gt_config_set(cfg, it->string, text, path, err);
    if (rc) return rc;
    if (seen && gt_config_key(it->string)) seen[gt_config_key(it->string) - gt__keys] = 1;
  }
  return GT_OK;
}

gt_rc gt_config_apply_json_text(gt_config *cfg, const char *json, const char *source, gt_err *err) {
  cJSON *j = json ? cJSON_Parse(json) : NULL;
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return gt_err_set(err, GT_ERR_CONFIG, "config: %s does not hold a JSON object of key: value", source);
  }
  gt_rc rc = gt__no_duplicate_keys(j, source, err);
  if (!rc) rc = gt__apply_json(cfg, j, source, NULL, err);
  cJSON_Delete(j);
  return rc;
}

static int gt__is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Where an installed library or binary finds its configs: next to itself,
 * at the install layout's relative path (so a staged or relocated install
 * works), found through the address of this very function. */
static int gt__dir_near_self(char *buf, size_t n) {
  Dl_info info;
  if (!dladdr((void *)gt__dir_near_self, &info) || !info.dli_fname) return 0;
  char self[GT_STR_PATH];
  snprintf(self, sizeof self, "%s", info.dli_fname);
  char *slash = strrchr(self, '/');
  if (!slash) return 0;
  *slash = '\0';
  const char *rel[] = {GT_CONFIG_REL_FROM_LIB, GT_CONFIG_REL_FROM_BIN};
  for (int i = 0; i < 2; i++) {
    snprintf(buf, n, "%s/%s", self, rel[i]);
    if (gt__is_dir(buf)) return 1;
  }
  return 0;
}

const char *gt_config_default_dir(char *buf, size_t n) {
  const char *env = getenv("GEMTRAIN_CONFIG_DIR");
  if (env && *env) return snprintf(buf, n, "%s", env), buf;
  if (gt__dir_near_self(buf, n)) return buf;
  if (gt__is_dir(GT_SOURCE_CONFIG_DIR)) return snprintf(buf, n, "%s", GT_SOURCE_CONFIG_DIR), buf;
  return snprintf(buf, n, "%s", GT_INSTALL_CONFIG_DIR), buf;
}

static void gt__list_presets(const char *dir, char *buf, size_t n) {
  char path[GT_STR_PATH + 16];
  snprintf(path, sizeof path, "%s/models", dir);
  buf[0] = '\0';
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  /* sorted insertion keeps the message stable */
  char names[64][GT_STR_SHORT];
  int cnt = 0;
  while ((e = readdir(d)) && cnt < 64) {
    size_t l = strlen(e->d_name);
    if (l > 5 && l - 5 < GT_STR_SHORT && !strcmp(e->d_name + l - 5, ".json")) {
      memcpy(names[cnt], e->d_name, l - 5);
      names[cnt][l - 5] = '\0';
      int i = cnt++;
      while (i > 0 && strcmp(names[i - 1], names[i]) > 0) {
        char t[GT_STR_SHORT];
        memcpy(t, names[i], sizeof t);
        memcpy(names[i], names[i - 1], sizeof t);
        memcpy(names[i - 1], t, sizeof t);
        i--;
      }
    }
  }
  closedir(d);
  size_t j = 0;
  for (int i = 0; i < cnt; i++) {
    int w = snprintf(buf + j, n - j, "%s%s", i ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= n - j) break;
    j += (size_t)w;
  }
}

static gt_rc gt__split_override(const char *ov, char *key, size_t kn, const char **value, const char *source,
                                gt_err *err) {
  const char *eq = strchr(ov, '=');
  if (!eq || eq == ov)
    return gt_err_set(err, GT_ERR_CONFIG, "config: argument '%s' (in %s) is not key=value (or a .json or .yml config file)",
                      ov, source);
  size_t len = (size_t)(eq - ov);
  if (len >= kn) return gt__unknown_key(ov, source, err);
  memcpy(key, ov, len);
  key[len] = '\0';
  *value = eq + 1;
  return GT_OK;
}

/* A key=value whose key an earlier one set too (also by an alias). Not
 * refused: scripts pass a shared list of keys, then the keys one run
 * changes, and the later wins as on MaxText's command line. But said once,
 * at the last of them, so a slip (learning_rate=0.1 ... learning_rate=0.001)
 * is seen. */
static void gt__note_repeated(gt_config *cfg, const char *const *ov, int n, int i, const char *key,
                              const char *source) {
  const gt_key_spec *k = gt_config_key(key);
  if (!k) return;
  int times = 1;
  for (int j = 0; j < n; j++) {
    if (j == i) continue;
    const char *eq = strchr(ov[j], '=');
    char other[128];
    if (!eq || (size_t)(eq - ov[j]) >= sizeof other) continue;
    memcpy(other, ov[j], (size_t)(eq - ov[j]));
    other[eq - ov[j]] = '\0';
    if (gt_config_key(other) != k) continue;
    if (j > i) return; /* said at the last one */
    times++;
  }
  if (times > 1)
    gt_config_add_note(cfg, "config: key '%s' is set %d times (in %s); the last, '%s', is used", k->name, times,
                       source, ov[i]);
}

gt_rc gt_config_load(gt_config *cfg, const char *config_dir, const char *user_file, int n_overrides,
                     const char *const *overrides, gt_err *err) {
  return gt_config_load_from(cfg, config_dir, user_file, n_overrides, overrides, "the command line", err);
}

gt_rc gt_config_load_from(gt_config *cfg, const char *config_dir, const char *user_file, int n_overrides,
                          const char *const *overrides, const char *source, gt_err *err) {
  memset(cfg, 0, sizeof *cfg);
  char dirbuf[GT_STR_PATH];
  if (!config_dir) config_dir = gt_config_default_dir(dirbuf, sizeof dirbuf);
  char path[GT_STR_PATH + 64];
  cJSON *base = NULL, *user = NULL, *model = NULL;
  uint8_t seen[GT__NKEYS];
  memset(seen, 0, sizeof seen);
  gt_rc rc;

  snprintf(path, sizeof path, "%s/base.json", config_dir);
  if ((rc = gt__read_json(path, &base, err))) goto done;
  if ((rc = gt__apply_json(cfg, base, path, seen, err))) goto done;
  for (int i = 0; i < GT__NKEYS; i++)
    if (!seen[i]) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "config: '%s' does not set key '%s' (it must set every key)",
                      path, gt__keys[i].name);
      goto done;
    }

  /* model_name decides which preset loads, so resolve it from the later
   * layers first, exactly as they will be applied. */
  if (user_file) {
    if ((rc = gt__read_json(user_file, &user, err))) goto done;
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(user, "model_name");
    if (mn) {
      char text[GT_STR_PATH];
      if ((rc = gt__json_value_text(mn, user_file, text, sizeof text, err))) goto done;
      if ((rc = gt_config_set(cfg, "model_name", text, user_file, err))) goto done;
    }
  }
  for (int i = 0; i < n_overrides; i++) {
    char key[128];
    const char *value;
    if ((rc = gt__split_override(overrides[i], key, sizeof key, &value, source, err))) goto done;
    if (!strcmp(key, "model_name") && (rc = gt_config_set(cfg, key, value, source, err)))
      goto done;
  }

  if (cfg->model_name[0]) {
    snprintf(path, sizeof path, "%s/models/%s.json", config_dir, cfg->model_name);
    struct stat st;
    if (stat(path, &st) != 0) {
      char list[1024];
      gt__list_presets(config_dir, list, sizeof list);
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'model_name' = '%s' has no preset (%s not found); presets: %s",
                      cfg->model_name, path, list);
      goto done;
    }
    if ((rc = gt__read_json(path, &model, err))) goto done;
    if ((rc = gt__apply_json(cfg, model, path, NULL, err))) goto done;
  }
  if (user) {
    if ((rc = gt__apply_json(cfg, user, user_file, NULL, err))) goto done;
    const cJSON *it;
    cJSON_ArrayForEach(it, user) gt__mark_user_set(cfg, it->string);
  }
  for (int i = 0; i < n_overrides; i++) {
    char key[128];
    const char *value;
    if ((rc = gt__split_override(overrides[i], key, sizeof key, &value, source, err))) goto done;
    if ((rc = gt_config_set(cfg, key, value, source, err))) goto done;
    gt__mark_user_set(cfg, key);
    gt__note_repeated(cfg, overrides, n_overrides, i, key, source);
  }
  rc = gt_config_validate(cfg, err);
done:
  cJSON_Delete(base);
  cJSON_Delete(user);
  cJSON_Delete(model);
  return rc;
}

/* ---------- cross-key validation ---------- */

long long gt_config_global_batch(const gt_config *cfg) {
  return llround(cfg->per_device_batch_size * (double)gt_config_total_devices(cfg));
}

void gt_config_dcn_axes(const gt_config *cfg, int *data, int *fsdp, int *expert) {
  long long ax[3] = {cfg->dcn_data_parallelism, cfg->dcn_fsdp_parallelism, cfg->dcn_expert_parallelism};
  long long known = 1;
  for (int i = 0; i < 3; i++)
    if (ax[i] > 0) known *= ax[i];
  /* a DiLoCo replica's mesh covers its own ranks (dist.h) */
  long long ranks = gt_dist_replica_size();
  for (int i = 0; i < 3; i++)
    if (ax[i] < 1) ax[i] = known > 0 && ranks % known == 0 && ranks >= known ? ranks / known : 1;
  *data = (int)ax[0];
  *fsdp = (int)ax[1];
  *expert = (int)ax[2];
}

long long gt_config_num_ranks(const gt_config *cfg) {
  int d, f, e;
  gt_config_dcn_axes(cfg, &d, &f, &e);
  return (long long)d * f * e;
}

long long gt_config_total_devices(const gt_config *cfg) { return cfg->num_devices * gt_config_num_ranks(cfg); }

void gt_config_global_axes(const gt_config *cfg, int *data, int *fsdp, int *expert) {
  int id, i_f, ie, dd, df, de;
  gt_config_mesh_axes(cfg, &id, &i_f, &ie);
  gt_config_dcn_axes(cfg, &dd, &df, &de);
  *data = id * dd;
  *fsdp = i_f * df;
  *expert = ie * de;
}

int gt_config_layer_is_global(const gt_config *cfg, long long layer) {
  size_t n = strlen(cfg->layer_pattern);
  return n && cfg->layer_pattern[layer % (long long)n] == 'G';
}

int gt_config_is_gemma4(const gt_config *cfg) { return !strncmp(cfg->decoder_block, "gemma4", 6); }

long long gt_config_first_kv_shared(const gt_config *cfg) {
  return cfg->base_num_decoder_layers - cfg->num_kv_shared_layers;
}

long long gt_config_layer_kv_donor(const gt_config *cfg, long long layer) {
  long long first = gt_config_first_kv_shared(cfg);
  if (layer < first) return -1;
  int g = gt_config_layer_is_global(cfg, layer);
  for (long long j = first - 1; j >= 0; j--)
    if (gt_config_layer_is_global(cfg, j) == g) return j;
  return -2;
}

long long gt_config_layer_head_dim(const gt_config *cfg, long long layer) {
  return gt_config_layer_is_global(cfg, layer) && cfg->global_head_dim > 0 ? cfg->global_head_dim : cfg->head_dim;
}

long long gt_config_layer_kv_heads(const gt_config *cfg, long long layer) {
  return gt_config_layer_is_global(cfg, layer) && cfg->global_num_kv_heads > 0 ? cfg->global_num_kv_heads
                                                                               : cfg->base_num_kv_heads;
}

long long gt_config_layer_mlp_dim(const gt_config *cfg, long long layer) {
  int wide = cfg->use_double_wide_mlp && layer >= gt_config_first_kv_shared(cfg);
  return cfg->base_mlp_dim * (wide ? 2 : 1);
}

int gt_config_layer_k_eq_v(const gt_config *cfg, long long layer) {
  return cfg->share_kv_projections && gt_config_layer_is_global(cfg, layer);
}

int gt_config_layer_is_moe(const gt_config *cfg, long long layer) {
  return gt_config_is_gemma4(cfg) && cfg->num_experts > 1 && layer >= 0 && layer < cfg->base_num_decoder_layers;
}

int gt_config_dpo_reference(const gt_config *cfg) { return cfg->use_dpo && !strcmp(cfg->preference_algo, "dpo"); }

long long gt_config_num_moe_layers(const gt_config *cfg) {
  long long n = 0;
  for (long long l = 0; l < cfg->base_num_decoder_layers; l++) n += gt_config_layer_is_moe(cfg, l);
  return n;
}

void gt_config_mesh_axes(const gt_config *cfg, int *data, int *fsdp, int *expert) {
  long long ax[3] = {cfg->ici_data_parallelism, cfg->ici_fsdp_parallelism, cfg->ici_expert_parallelism};
  long long known = 1;
  for (int i = 0; i < 3; i++)
    if (ax[i] > 0) known *= ax[i];
  for (int i = 0; i < 3; i++)
    if (ax[i] == -1) ax[i] = known > 0 ? cfg->num_devices / known : 1;
  *data = (int)ax[0];
  *fsdp = (int)ax[1];
  *expert = (int)ax[2];
}

/* The DCN axes (MaxText's, across MPI ranks): positive or -1 (at most one,
 * filled in with the ranks the launcher started). A build without MPI can
 * only be one rank. Whether the ranks match is checked when the mesh is
 * built (the trainer), since `gemtrain plan` may plan for ranks it has not. */
static gt_rc gt__validate_dcn(const gt_config *c, gt_err *err) {
  long long ax[3] = {c->dcn_data_parallelism, c->dcn_fsdp_parallelism, c->dcn_expert_parallelism};
  static const char *axn[3] = {"dcn_data_parallelism", "dcn_fsdp_parallelism", "dcn_expert_parallelism"};
  int n_fill = 0;
  for (int i = 0; i < 3; i++) {
    if (ax[i] == 0)
      return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' = 0; mesh axes are positive or -1 (fill in)", axn[i]);
    if (ax[i] == -1) n_fill++;
    if (ax[i] > 1 && !gt_dist_compiled())
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key '%s' = %lld, but this gemtrain was built without MPI (one process only); "
                        "install libopenmpi-dev and rebuild, or set it to 1",
                        axn[i], ax[i]);
  }
  if (n_fill > 1)
    for (int i = 0; i < 3; i++)
      if (ax[i] == -1 && i > 0)
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' is -1 and so is another dcn axis; at most one may be filled in", axn[i]);
  return GT_OK;
}

/* The MoE keys: a MoE feed-forward exists on Gemma 4 only, its shapes must
 * be whole, and the expert axis must split the experts evenly. */
static gt_rc gt__validate_moe(const gt_config *c, gt_err *err) {
  int dp, fs, ep;
  gt_config_global_axes(c, &dp, &fs, &ep);
  if (c->num_experts <= 1) {
    if (ep != 1)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key 'ici_expert_parallelism' = %d needs a mixture of experts, but num_experts = %lld; "
                        "expected 1 on a dense model (and dcn_expert_parallelism too)",
                        ep, c->num_experts);
    return GT_OK;
  }
  if (!gt_config_is_gemma4(c))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'num_experts' = %lld, but decoder_block = '%s' has no mixture of experts; expected "
                      "0 there (or decoder_block gemma4)",
                      c->num_experts, c->decoder_block);
  if (c->num_experts_per_tok > c->num_experts)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'num_experts_per_tok' = %lld exceeds num_experts = %lld; a token picks at most "
                      "every expert",
                      c->num_experts_per_tok, c->num_experts);
  if (c->base_moe_mlp_dim < 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'base_moe_mlp_dim' = %lld; a mixture of experts (num_experts = %lld) needs an "
                      "expert width >= 1",
                      c->base_moe_mlp_dim, c->num_experts);
  if (c->shared_experts != 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'shared_experts' = %lld; Gemma 4's MoE block has exactly one shared expert "
                      "(mlp.*), expected 1",
                      c->shared_experts);
  if (c->num_experts % ep)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: %s = %d does not divide num_experts = %lld; every device of the expert axis holds "
                      "the same number of whole experts",
                      c->dcn_expert_parallelism == 1 ? "key 'ici_expert_parallelism'"
                                                     : "the expert axis ici_expert_parallelism x dcn_expert_parallelism",
                      ep, c->num_experts);
  if (c->gradient_accumulation_steps > 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'gradient_accumulation_steps' = %lld with num_experts = %lld; the load-balance "
                      "loss is not built for accumulated steps yet, expected 1",
                      c->gradient_accumulation_steps, c->num_experts);
  return GT_OK;
}

/* Gemma 4 keys must stay at their defaults on a gemma3 decoder, so a
 * reshaped preset never silently mixes the two families. */
static gt_rc gt__validate_gemma4(const gt_config *c, gt_err *err) {
  if (!gt_config_is_gemma4(c)) {
    struct {
      const char *key;
      int set;
      const char *dflt;
    } g4[] = {
        {"global_head_dim", c->global_head_dim != 0, "0"},
        {"global_num_kv_heads", c->global_num_kv_heads != 0, "0"},
        {"share_kv_projections", c->share_kv_projections, "false"},
        {"global_rope_proportion", c->global_rope_proportion != 1.0, "1"},
        {"local_rope_proportion", c->local_rope_proportion != 1.0, "1"},
        {"v_norm_with_scale", c->v_norm_with_scale, "false"},
        {"hidden_size_per_layer_input", c->hidden_size_per_layer_input != 0, "0"},
        {"vocab_size_per_layer_input", c->vocab_size_per_layer_input != 0, "0"},
        {"num_kv_shared_layers", c->num_kv_shared_layers != 0, "0"},
        {"use_double_wide_mlp", c->use_double_wide_mlp, "false"},
    };
    for (size_t i = 0; i < sizeof g4 / sizeof g4[0]; i++)
      if (g4[i].set)
        return gt_err_set(err, GT_ERR_CONFIG,
                          "config: key '%s' is a Gemma 4 setting, but decoder_block = '%s'; expected %s there "
                          "(or decoder_block gemma4 / gemma4_small)",
                          g4[i].key, c->decoder_block, g4[i].dflt);
    return GT_OK;
  }
  long long ghd = c->global_head_dim;
  if (ghd % 2)
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'global_head_dim' = %lld must be even (RoPE pairs dims)", ghd);
  if (c->global_num_kv_heads > 0 && c->base_num_query_heads % c->global_num_kv_heads)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'global_num_kv_heads' = %lld does not divide base_num_query_heads = %lld",
                      c->global_num_kv_heads, c->base_num_query_heads);
  if (c->num_kv_shared_layers >= c->base_num_decoder_layers)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'num_kv_shared_layers' = %lld must be below base_num_decoder_layers = %lld "
                      "(a shared layer needs an earlier layer to share with)",
                      c->num_kv_shared_layers, c->base_num_decoder_layers);
  for (long long l = gt_config_first_kv_shared(c); l < c->base_num_decoder_layers; l++)
    if (gt_config_layer_kv_donor(c, l) == -2)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key 'num_kv_shared_layers' = %lld leaves shared %s layer %lld without an earlier "
                        "%s layer to take K/V from (layer_pattern '%s')",
                        c->num_kv_shared_layers, gt_config_layer_is_global(c, l) ? "global" : "local", l,
                        gt_config_layer_is_global(c, l) ? "global" : "local", c->layer_pattern);
  if (c->vocab_size_per_layer_input > 0 && c->vocab_size_per_layer_input < c->vocab_size)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'vocab_size_per_layer_input' = %lld is below vocab_size = %lld; every token "
                      "needs a per-layer embedding row",
                      c->vocab_size_per_layer_input, c->vocab_size);
  return GT_OK;
}

/* The adapters' keys (docs/fine-tuning.md): a quantized base only where
 * something freezes it (adapters, or a trainable_parameters_mask: the
 * matrices it leaves frozen are stored quantized); a quantized tensor
 * cannot train. Other adapter keys without enable_lora do nothing
 * (`gemtrain train` notes them). The model build checks what needs the
 * model: the module path's matches and the rank against each projection. */
static gt_rc gt__validate_lora(const gt_config *c, gt_err *err) {
  /* the embedding tables are stored apart only beside a stored base: a
   * float32 base keeps them float32 too */
  if (!strcmp(c->lora_weight_qtype, "float32") && strcmp(c->lora_embedding_qtype, "auto") &&
      strcmp(c->lora_embedding_qtype, "float32"))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_embedding_qtype' = '%s' stores the frozen embedding apart from a base stored "
                      "as lora_weight_qtype=float32, which keeps every frozen matrix float32; set lora_weight_qtype "
                      "(bfloat16, int8 or nf4) too, or lora_embedding_qtype=auto",
                      c->lora_embedding_qtype);
  /* lora_restore_path turns the adapters on once the model source reads
   * the directory (src/hf/peft.h) */
  if (c->enable_lora || c->lora_restore_path[0] || c->trainable_parameters_mask[0]) return GT_OK;
  if (strcmp(c->lora_weight_qtype, "float32"))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_weight_qtype' = '%s' stores the frozen base quantized, but enable_lora = false "
                      "and trainable_parameters_mask is empty, so every tensor trains and a quantized one cannot; set "
                      "enable_lora=true (adapters train over the frozen base) or lora_weight_qtype=float32",
                      c->lora_weight_qtype);
  return GT_OK;
}

/* DiLoCo's keys (train/diloco.h): replicas are groups of MPI ranks. The
 * rank count itself is checked when the run starts (a plan stands for one
 * rank), and here too when a launcher started this process. */
static gt_rc gt__validate_diloco(const gt_config *c, gt_err *err) {
  if (!c->enable_diloco) {
    if (c->dcn_diloco_parallelism > 1)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key 'dcn_diloco_parallelism' = %lld, but enable_diloco = false; set enable_diloco=true "
                        "to train that many DiLoCo replicas, or dcn_diloco_parallelism=1",
                        c->dcn_diloco_parallelism);
    return GT_OK;
  }
  if (c->diloco_sync_period < 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'diloco_sync_period' = %lld with enable_diloco = true; the replicas sync every that "
                      "many steps, expected >= 1",
                      c->diloco_sync_period);
  if (c->dcn_diloco_parallelism < 2)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dcn_diloco_parallelism' = %lld with enable_diloco = true; DiLoCo needs 2 or more "
                      "replicas (groups of MPI ranks)",
                      c->dcn_diloco_parallelism);
  int W = gt_dist_size();
  if (W > 1 && W % c->dcn_diloco_parallelism)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dcn_diloco_parallelism' = %lld does not divide the %d ranks mpirun started; each "
                      "replica is the same number of consecutive ranks",
                      c->dcn_diloco_parallelism, W);
  int dp, fs, ep;
  gt_config_global_axes(c, &dp, &fs, &ep);
  if (ep > 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'enable_diloco' = true with an expert axis of %d (ici_expert_parallelism x "
                      "dcn_expert_parallelism); DiLoCo runs on data and fsdp axes only, expected 1",
                      ep);
  if (!gt_dist_compiled())
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'enable_diloco' = true, but this gemtrain was built without MPI (one process only); "
                      "DiLoCo replicas are groups of MPI ranks: install libopenmpi-dev and rebuild");
  return GT_OK;
}

gt_rc gt_config_validate(const gt_config *c, gt_err *err) {
  /* the run directory is <base_output_directory>/<run_name>: a '/' or a
   * "." / ".." name would put it (and its checkpoints) somewhere else */
  if (strchr(c->run_name, '/') || !strcmp(c->run_name, ".") || !strcmp(c->run_name, ".."))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'run_name' = '%s' must name one directory inside base_output_directory (no '/', "
                      "not '.' or '..')",
                      c->run_name);
  if (c->base_num_query_heads % c->base_num_kv_heads)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'base_num_kv_heads' = %lld does not divide base_num_query_heads = "
                      "%lld; the query heads must be a multiple of the kv heads",
                      c->base_num_kv_heads, c->base_num_query_heads);
  if (c->head_dim % 2)
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'head_dim' = %lld must be even (RoPE pairs dims)",
                      c->head_dim);
  /* (also a window read from a Hugging Face config.json, which sets the key
   * after its range was checked) */
  if (c->sliding_window_size < 1 || c->sliding_window_size > 2147483647LL)
    return gt_err_set(err, GT_ERR_CONFIG, "config: key 'sliding_window_size' = %lld; expected 1 to 2147483647",
                      (long long)c->sliding_window_size);
  /* settings under which training silently does nothing */
  if (c->enable_lora && c->lora_alpha == 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_alpha' = 0 with enable_lora: the adapters' output is scaled by 0, so they "
                      "never move; expected lora_alpha > 0 (PEFT's default is 8)");
  const int dpo = gt_config_dpo_reference(c);
  if (dpo && c->dpo_beta == 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dpo_beta' = 0 with use_dpo: every gradient of the DPO loss is 0; expected "
                      "dpo_beta > 0 (TRL's default 0.1)");
  if (c->dpo_reference_path[0] && !dpo)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dpo_reference_path' = '%s' is read only by DPO (use_dpo=true, "
                      "preference_algo=dpo); here use_dpo = %s and preference_algo = '%s': leave it empty",
                      c->dpo_reference_path, c->use_dpo ? "true" : "false", c->preference_algo);
  size_t pl = strlen(c->layer_pattern);
  if (pl == 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'layer_pattern' is empty; expected letters L (local) and G (global)");
  for (size_t i = 0; i < pl; i++)
    if (c->layer_pattern[i] != 'L' && c->layer_pattern[i] != 'G')
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key 'layer_pattern' = '%s' has '%c' at position %zu; expected only L "
                        "(local) and G (global)",
                        c->layer_pattern, c->layer_pattern[i], i);
  /* mesh axes: at most one -1, filled so the product equals num_devices */
  long long ax[3] = {c->ici_data_parallelism, c->ici_fsdp_parallelism, c->ici_expert_parallelism};
  static const char *axn[3] = {"ici_data_parallelism", "ici_fsdp_parallelism", "ici_expert_parallelism"};
  long long known = 1;
  int n_fill = 0, fill = -1;
  for (int i = 0; i < 3; i++) {
    if (ax[i] == 0)
      return gt_err_set(err, GT_ERR_CONFIG, "config: key '%s' = 0; mesh axes are positive or -1 (fill in)", axn[i]);
    if (ax[i] == -1)
      n_fill++, fill = i;
    else
      known *= ax[i];
  }
  if (n_fill > 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: keys '%s' and '%s' are both -1; at most one mesh axis may be filled in",
                      axn[fill == 2 && ax[1] == -1 ? 1 : 0], axn[fill]);
  if (n_fill) {
    int named = fill == 0 ? 1 : 0; /* name a fixed axis that is not 1 */
    for (int i = 0; i < 3; i++)
      if (i != fill && ax[i] > 1) {
        named = i;
        break;
      }
    if (c->num_devices % known)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "config: key '%s' = %lld (fixed mesh axes multiply to %lld) does not divide num_devices = "
                        "%lld, so the -1 axis '%s' cannot be filled in",
                        axn[named], ax[named], known, c->num_devices, axn[fill]);
  } else if (known != c->num_devices) {
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: ici_data_parallelism x ici_fsdp_parallelism x ici_expert_parallelism = %lld x %lld "
                      "x %lld = %lld, but key 'num_devices' = %lld; the product of the mesh axes must equal "
                      "num_devices",
                      ax[0], ax[1], ax[2], known, c->num_devices);
  }
  gt_rc drc = gt__validate_dcn(c, err);
  if (drc) return drc;
  if ((drc = gt__validate_diloco(c, err))) return drc;
  double gb = c->per_device_batch_size * (double)gt_config_total_devices(c);
  if (fabs(gb - llround(gb)) > 1e-9 || llround(gb) < 1)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'per_device_batch_size' = %g gives a global batch of %g sequences "
                      "with num_devices = %lld; it must be a whole number >= 1",
                      c->per_device_batch_size, gb, c->num_devices);
  double rows = c->per_device_batch_size * (double)c->max_target_length;
  if (fabs(rows - llround(rows)) > 1e-9 || llround(rows) % c->num_vocab_tiling)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'num_vocab_tiling' = %lld does not divide per_device_batch_size x "
                      "max_target_length = %g x %lld = %g tokens",
                      c->num_vocab_tiling, c->per_device_batch_size, c->max_target_length, rows);
  if (c->load_parameters_path[0] && c->load_full_state_path[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: keys 'load_parameters_path' = '%s' and 'load_full_state_path' = '%s' are both "
                      "set; set at most one (parameters only, or the full training state)",
                      c->load_parameters_path, c->load_full_state_path);
  gt_rc rc4 = gt__validate_gemma4(c, err);
  if (rc4) return rc4;
  if ((rc4 = gt__validate_moe(c, err))) return rc4;
  if (c->learning_rate_schedule_steps == 0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'learning_rate_schedule_steps' = 0; use -1 (= steps) or a positive "
                      "count");
  /* MaxText's check (types.py): the stable phase would be negative */
  if (!strcmp(c->lr_schedule_type, "wsd") && c->warmup_steps_fraction + c->wsd_decay_steps_fraction > 1.0)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: lr_schedule_type = 'wsd': keys 'warmup_steps_fraction' = %g and "
                      "'wsd_decay_steps_fraction' = %g sum to %g; they must not exceed 1 (what is left is the "
                      "stable phase)",
                      c->warmup_steps_fraction, c->wsd_decay_steps_fraction,
                      c->warmup_steps_fraction + c->wsd_decay_steps_fraction);
  if (strcmp(c->dataset_type, "synthetic") && !c->dataset_path[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'dataset_path' is empty but dataset_type = '%s' needs a file",
                      c->dataset_type);
  return gt__validate_lora(c, err);
}

/* ---------- output ---------- */

char *gt_config_to_json(const gt_config *cfg) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < GT__NKEYS; i++) {
    const gt_key_spec *k = &gt__keys[i];
    const char *field = (const char *)cfg + k->offset;
    switch (k->type) {
      case GT_KEY_INT:
        cJSON_AddNumberToObject(o, k->name,
                                k->size == sizeof(int) ? (double)*(const int *)field
                                                       : (double)*(const long long *)field);
        break;
      case GT_KEY_FLOAT:
        cJSON_AddNumberToObject(o, k->name, *(const double *)field);
        break;
      case GT_KEY_BOOL:
        /* dump_config is what asked for this text, not part of the run it
         * describes: written true, the dump fed back as a config file would
         * print itself again instead of training */
        cJSON_AddBoolToObject(o, k->name, strcmp(k->name, "dump_config") ? *(const int *)field : 0);
        break;
      default:
        cJSON_AddStringToObject(o, k->name, field);
    }
  }
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  return s;
}

gt_rc gt_config_write_json(const gt_config *cfg, const char *path, gt_err *err) {
  char *s = gt_config_to_json(cfg);
  if (!s) return gt_err_set(err, GT_ERR_NOMEM, "config: no memory to print the config");
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(s);
    return gt_err_set(err, GT_ERR_IO, "config: cannot write '%s': %s", path, strerror(errno));
  }
  int ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
  ok = (fclose(f) == 0) && ok;
  free(s);
  if (!ok) return gt_err_set(err, GT_ERR_IO, "config: writing '%s' failed: %s", path, strerror(errno));
  return GT_OK;
}

void gt_config_print_help(FILE *f, const gt_config *defaults) {
  static const char *tn[] = {"int", "float", "bool", "string", "enum"};
  for (int i = 0; i < GT__NKEYS; i++) {
    const gt_key_spec *k = &gt__keys[i];
    char val[GT_STR_PATH + 32] = "";
    if (defaults) gt_config_get_text(defaults, k->name, val, sizeof val, NULL);
    if (k->type == GT_KEY_FLOAT) {
      double v = defaults ? *(const double *)((const char *)defaults + k->offset) : 0;
      snprintf(val, sizeof val, "%g", v);
    }
    char range[300] = "";
    if (k->type == GT_KEY_INT || k->type == GT_KEY_FLOAT) {
      char lo[32], hi[32];
      gt__num_text(k->min, lo, sizeof lo);
      gt__num_text(k->max, hi, sizeof hi);
      snprintf(range, sizeof range, " [%s .. %s]", lo, hi);
    } else if (k->type == GT_KEY_ENUM) {
      char c[256];
      gt__choices_text(k->choices, c, sizeof c);
      snprintf(range, sizeof range, " {%s}", c);
    }
    fprintf(f, "  %-30s %-6s = %-16s%s\n      %s\n", k->name, tn[k->type],
            val[0] ? val : "\"\"", range, k->desc);
  }
}
