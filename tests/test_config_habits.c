/* Keys from other tools: MaxText keys with no effect here (accepted with a
 * note), MaxText keys of features gemtrain lacks (refused as such, accepted
 * only when they leave the feature off), Hugging Face Trainer names
 * (answered with gemtrain's name), MaxText's YAML config files (read into
 * the same configuration as the equal JSON file), and the overrides' source
 * in gt_ctx_configure's messages. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/yaml.h"
#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"

#define CFG_DIR GT_SOURCE_DIR "/configs"

static gt_rc load1(gt_config *c, const char *user, const char *ov, gt_err *e) {
  gt_err_clear(e);
  return gt_config_load(c, CFG_DIR, user, ov ? 1 : 0, ov ? &ov : NULL, e);
}

static char *write_file(const char *name, const char *text) {
  char *dir = gt_test_mkdtemp("habits");
  char *path = gt_test_path(dir, name);
  gt_test_write_text(path, text);
  free(dir);
  return path;
}

START_TEST(test_noop_keys_accepted_with_a_note) {
  gt_config c, plain;
  gt_err e;
  ck_assert_int_eq(load1(&plain, NULL, NULL, &e), GT_OK);
  ck_assert_str_eq(plain.notes, "");
  const char *ov[] = {"scan_layers=false", "attention=flash", "steps=3", "hardware=tpu"};
  gt_err_clear(&e);
  ck_assert_int_eq(gt_config_load(&c, CFG_DIR, NULL, 4, ov, &e), GT_OK);
  ck_assert_int_eq(c.steps, 3);
  /* one line per key, naming it */
  ck_assert_ptr_nonnull(strstr(c.notes, "'scan_layers' has no effect here"));
  ck_assert_ptr_nonnull(strstr(c.notes, "'attention' has no effect here"));
  ck_assert_ptr_nonnull(strstr(c.notes, "'hardware' has no effect here"));
  int lines = 0;
  for (const char *p = c.notes; *p; p++) lines += *p == '\n';
  ck_assert_int_eq(lines, 3);
  /* nothing else of the configuration moved */
  c.steps = plain.steps;
  char *a = gt_config_to_json(&c), *b = gt_config_to_json(&plain);
  ck_assert_str_eq(a, b);
  free(a), free(b);
}
END_TEST

START_TEST(test_unsupported_keys_refused_as_such) {
  gt_config c;
  gt_err e;
  static const char *on[][2] = {
      {"ici_tensor_parallelism=2", "tensor parallelism"},
      {"ici_pipeline_parallelism=4", "pipeline parallelism"},
      {"num_pipeline_microbatches=8", "pipeline parallelism"},
      {"ici_sequence_parallelism=2", "sequence parallelism"},
      {"quantization=int8", "quantized training"},
  };
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    ck_assert_int_eq(load1(&c, NULL, on[i][0], &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "does not support") && strstr(e.msg, on[i][1]), "%s: %s", on[i][0], e.msg);
    /* never a did-you-mean to another feature's key (ici_tensor_parallelism
     * is two edits from ici_expert_parallelism's neighbours) */
    ck_assert_msg(!strstr(e.msg, "did you mean"), "%s", e.msg);
  }
  /* the value that leaves the feature off (MaxText's default) is accepted */
  const char *off[] = {"ici_tensor_parallelism=1", "num_pipeline_microbatches=-1", "quantization=",
                       "dropout_rate=0.0", "use_multimodal=False"};
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    ck_assert_msg(load1(&c, NULL, off[i], &e) == GT_OK, "%s: %s", off[i], e.msg);
    ck_assert_ptr_nonnull(strstr(c.notes, "accepted and ignored"));
  }
}
END_TEST

/* Every top-level key of MaxText's base.yml (repository
 * AI-Hypercomputer/maxtext, file MaxText/configs/base.yml under its src
 * directory; the version whose last keys are mhc_expansion_rate and
 * sinkhorn_iterations), in its order. */
static const char maxtext_base_yml_keys[] =
    "run_name model_name override_model_config override_logical_axis_rules debug normalization_layer_epsilon "
    "load_parameters_path lora_input_adapters_path load_full_state_path enable_checkpointing "
    "save_checkpoint_on_completion async_checkpointing checkpoint_period max_num_checkpoints_to_keep "
    "enable_continuous_checkpointing enable_single_replica_ckpt_restoring force_unroll "
    "checkpoint_storage_target_data_file_size_bytes checkpoint_storage_use_ocdbt checkpoint_storage_use_zarr3 "
    "checkpoint_storage_concurrent_gb enable_orbax_v1 checkpoint_conversion_fn source_checkpoint_layout "
    "colocated_python_checkpointing reuse_example_batch metrics_file gcs_metrics save_config_to_gcs grad_dtype "
    "dtype quantization constant_bound_config matmul_precision activations_in_float32 replicate_quant_scale "
    "quant_cfg_path quantize_kvcache kv_quant_axis kv_quant_dtype checkpoint_is_quantized "
    "save_quantized_params_path model_call_mode use_qwix_quantization weight_quantization_calibration_method "
    "act_quantization_calibration_method bwd_quantization_calibration_method quantization_local_shard_count "
    "decoder_block weight_dtype global_parameter_scale base_emb_dim base_num_query_heads base_num_kv_heads "
    "base_mlp_dim base_num_decoder_layers head_dim mlp_activations mlp_activations_limit dropout_rate "
    "logits_via_embedding normalize_embedding_logits logits_dot_in_fp32 cast_logits_to_fp32 float32_qk_product "
    "float32_logits float32_weight_sum mtp_num_layers mtp_loss_scaling_factor mtp_eval_target_module "
    "num_experts num_experts_per_tok megablox sparse_matmul capacity_factor load_balance_loss_weight "
    "use_random_routing use_custom_sort_vjp use_ring_of_experts wi_tile_fwd_batch_seq wi_tile_fwd_embed_dim "
    "wi_tile_fwd_mlp_dim wi_tile_dlhs_batch_seq wi_tile_dlhs_embed_dim wi_tile_dlhs_mlp_dim "
    "wi_tile_drhs_batch_seq wi_tile_drhs_embed_dim wi_tile_drhs_mlp_dim wo_tile_fwd_batch_seq "
    "wo_tile_fwd_embed_dim wo_tile_fwd_mlp_dim wo_tile_dlhs_batch_seq wo_tile_dlhs_embed_dim "
    "wo_tile_dlhs_mlp_dim wo_tile_drhs_batch_seq wo_tile_drhs_embed_dim wo_tile_drhs_mlp_dim "
    "wi_tile_fwd_buffer_count wi_tile_dlhs_buffer_count wi_tile_drhs_buffer_count wo_tile_fwd_buffer_count "
    "wo_tile_dlhs_buffer_count wo_tile_drhs_buffer_count norm_topk_prob expert_shard_attention_option "
    "moe_fsdp_use_two_stage_all_gather shard_exp_on_fsdp use_2d_fsdp_sharding base_moe_mlp_dim "
    "first_num_dense_layers shared_experts routed_scaling_factor routed_score_func routed_bias "
    "routed_bias_update_rate mlp_bias n_routing_groups topk_routing_group use_batch_split_schedule "
    "inhomogeneous_layer_cycle_interval num_layers_per_pipeline_stage num_pipeline_repeats "
    "pipeline_parallel_layers num_pipeline_microbatches pipeline_delay_activation_forwarding "
    "pipeline_fsdp_ag_once scan_pipeline_iterations scan_layers_per_stage "
    "set_remat_policy_on_pipeline_iterations set_remat_policy_on_layers_per_stage remat_policy "
    "decoder_layer_input context mlpwi mlpwi_0 mlpwi_1 mlpwo query_proj key_proj value_proj qkv_proj out_proj "
    "mla_q mla_kv optimizer_memory_host_offload parameter_memory_host_offload scan_layers param_scan_axis "
    "attention attention_type attention_bias attention_sink sliding_window_size chunk_attn_window_size "
    "attn_logits_soft_cap final_logits_soft_cap use_post_attn_norm use_post_ffw_norm mla_naive_kvcache moba "
    "moba_chunk_size moba_topk use_sparse_indexer index_head_dim index_n_heads index_topk q_lora_rank "
    "kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim fused_qkv fused_mlp record_internal_nn_metrics "
    "base_output_directory enable_multi_tier_checkpointing multi_tier_checkpointing_backup_interval_minutes "
    "mtc_data_parallelism enable_emergency_checkpoint local_checkpoint_directory local_checkpoint_period "
    "jax_cache_dir hardware shard_mode mesh_axes logical_axis_rules data_sharding "
    "input_data_sharding_logical_axes sharding_tolerance dcn_data_parallelism dcn_fsdp_parallelism "
    "dcn_fsdp_transpose_parallelism dcn_sequence_parallelism dcn_context_parallelism "
    "dcn_context_autoregressive_parallelism dcn_tensor_parallelism dcn_tensor_transpose_parallelism "
    "dcn_tensor_sequence_parallelism dcn_pipeline_parallelism dcn_expert_parallelism "
    "dcn_autoregressive_parallelism ici_data_parallelism ici_fsdp_parallelism ici_fsdp_transpose_parallelism "
    "ici_sequence_parallelism ici_context_parallelism ici_context_autoregressive_parallelism "
    "ici_tensor_parallelism ici_tensor_transpose_parallelism ici_tensor_sequence_parallelism "
    "ici_autoregressive_parallelism ici_pipeline_parallelism ici_expert_parallelism shard_optimizer_over_data "
    "num_slices num_vocab_tiling vocab_size tokenizer_path tokenizer_type use_chat_template chat_template_path "
    "tokenize_train_data tokenize_eval_data add_bos add_eos use_truncation per_device_batch_size "
    "expansion_factor_real_data eval_per_device_batch_size max_corpus_chars train_data_columns "
    "train_image_column eval_data_columns eval_image_column packing num_epoch generate_padding_batch_train "
    "generate_padding_batch_eval max_segments_per_seq enable_rampup_batch_size per_device_batch_size_start "
    "per_device_batch_size_increment global_rampup_samples use_dpo dpo_label_smoothing dpo_beta use_sft "
    "sft_train_on_completion_only dataset_type dataset_path dataset_name eval_dataset_name train_split "
    "eval_split hf_path hf_name hf_data_dir hf_train_files hf_eval_split hf_eval_files hf_access_token "
    "grain_train_files grain_eval_files grain_train_mixture_config_path grain_file_type grain_packing_type "
    "grain_worker_count grain_per_worker_buffer_size grain_num_threads grain_prefetch_buffer_size "
    "grain_worker_count_eval grain_per_worker_buffer_size_eval grain_ram_budget_mb grain_num_threads_eval "
    "grain_prefetch_buffer_size_eval grain_data_source_max_workers colocated_python_data_input steps log_period "
    "jax_distributed_initialization_timeout jax_debug_log_modules skip_jax_distributed_system learning_rate "
    "lr_schedule_type learning_rate_final_fraction wsd_decay_steps_fraction wsd_decay_style "
    "warmup_steps_fraction learning_rate_schedule_steps max_target_length max_prefill_predict_length prompt "
    "load_from_prefill_dir prefill_cache_dir autoregressive_decode_assert profiler upload_all_profiler_results "
    "skip_first_n_steps_for_profiler profiler_steps hide_profiler_step_metric profile_cleanly "
    "profile_periodically_period managed_mldiagnostics managed_mldiagnostics_run_group dump_hlo dump_step "
    "dump_hlo_local_dir dump_hlo_delete_local_after dump_hlo_gcs_dir dump_hlo_local_module_name "
    "dump_hlo_module_name dump_hlo_xla_flags dump_hlo_upload_all dump_jaxpr dump_jaxpr_local_dir "
    "dump_jaxpr_delete_local_after dump_jaxpr_gcs_dir enable_dropout enable_data_shuffling data_shuffle_seed "
    "init_weights_seed gradient_clipping_threshold gradient_accumulation_steps opt_type adam_b1 adam_b2 "
    "adam_eps adam_eps_root adam_weight_decay mu_dtype muon_beta muon_weight_decay muon_consistent_rms "
    "collect_stack_trace stack_trace_to_cloud stack_trace_interval_seconds use_iota_embed "
    "use_untrainable_positional_embedding trainable_position_size rope_type rope_linear_scaling_factor "
    "rope_use_scale rope_min_timescale rope_max_timescale local_rope_max_timescale max_position_embeddings "
    "original_max_position_embeddings rope_factor beta_fast beta_slow mscale rope_interleave rope_truncate "
    "rope_attention_scaling compiled_trainstep_file compile_topology compile_topology_num_slices "
    "decode_sampling_strategy decode_sampling_nucleus_p decode_sampling_top_k decode_sampling_temperature "
    "eval_interval eval_steps target_eval_loss enable_goodput_recording monitor_goodput "
    "goodput_upload_interval_seconds enable_pathways_goodput monitor_step_time_deviation "
    "step_deviation_interval_seconds enable_gcp_goodput_metrics enable_gcp_step_deviation_metrics "
    "report_heartbeat_metric_for_gcp_monitoring heartbeat_reporting_interval_in_seconds "
    "report_performance_metric_for_gcp_monitoring enable_tensorboard use_vertex_tensorboard "
    "vertex_tensorboard_project vertex_tensorboard_region max_checkify inference_microbenchmark_prefill_lengths "
    "inference_microbenchmark_stages inference_microbenchmark_loop_iters inference_microbenchmark_log_file_path "
    "inference_microbenchmark_num_samples inference_metadata_file inference_server prefill_slice generate_slice "
    "inference_benchmark_test enable_model_warmup enable_llm_inference_pool multi_sampling return_log_prob "
    "stack_prefill_result_cache prefill_cache_axis_order ar_cache_axis_order compute_axis_order reshape_q "
    "prometheus_port enable_jax_profiler jax_profiler_port log_config debug_sharding "
    "enable_checkpoint_cloud_logger enable_single_controller custom_mesh allow_split_physical_axes "
    "optimize_mesh_for_tpu_v6e shardy use_ragged_attention ragged_block_size sa_block_q sa_block_kv "
    "sa_block_kv_compute sa_block_q_dkv sa_block_kv_dkv sa_block_kv_dkv_compute sa_block_q_dq sa_block_kv_dq "
    "sa_use_fused_bwd_kernel sa_q_layout sa_k_layout sa_v_layout use_max_logit_estimate cost_estimate_flops_fwd "
    "cost_estimate_flops_bwd dq_reduction_steps use_splash_scheduler context_parallel_load_balance "
    "context_parallel_strategy pagedattn_num_pages pagedattn_tokens_per_page pagedattn_pages_per_compute_block "
    "pagedattn_max_pages_per_group pagedattn_head_dim_alignment prefill_chunk_size use_chunked_prefill "
    "enable_prefix_caching prefix_caching_hbm_byte prefix_caching_dram_byte enable_padding_causal_mask "
    "use_qk_norm nope_layer_interval interleave_moe_layer_step temperature_tuning use_multimodal use_audio "
    "freeze_vision_encoder_params freeze_audio_encoder_params dtype_mm remat_policy_for_vit image_size_for_vit "
    "image_path image_placeholder video_path audio_path use_audio_in_video posemb_type_for_vit "
    "max_num_images_per_example hidden_size_for_vit intermediate_size_for_vit num_attention_heads_for_vit "
    "num_channels_for_vit tile_size_for_vit patch_size_for_vit conv_stride_for_vit num_hidden_layers_for_vit "
    "projector_input_dim_for_vit projector_output_dim_for_vit rope_theta_for_vit vision_output_dim_for_vit "
    "pixel_shuffle_ratio_for_vit projector_dropout_for_vit spatial_merge_size_for_vit out_hidden_size_for_vit "
    "temporal_patch_size_for_vit num_position_embeddings_for_vit deepstack_visual_indexes_for_vit "
    "d_model_for_audio encoder_attention_heads_for_audio encoder_ffn_dim_for_audio encoder_layers_for_audio "
    "attention_dropout_for_audio activation_dropout_for_audio activation_function_for_audio "
    "num_mel_bins_for_audio max_source_positions_for_audio scale_embedding_for_audio n_window_for_audio "
    "n_window_infer_for_audio conv_chunksize_for_audio downsample_hidden_size_for_audio output_dim_for_audio "
    "num_conv_layers_for_audio max_timescale_for_audio max_sample_len_for_audio use_mrope mrope_section "
    "position_id_per_seconds subslice_shape enable_nnx gdn_conv_kernel_dim gdn_key_head_dim gdn_value_head_dim "
    "gdn_num_key_heads gdn_num_value_heads gdn_chunk_size use_qk_norm_in_gdn partial_rotary_factor "
    "use_tokamax_gmm use_tokamax_splash use_jax_splash vllm_hf_config_path vllm_additional_config "
    "force_q_layout mhc_expansion_rate sinkhorn_iterations";

/* A MaxText key is gemtrain's, or answered as a MaxText key: accepted with a
 * note naming it, or refused naming it; never with an edit-distance guess at
 * another key (rope_min_timescale is not rope_max_timescale). */
START_TEST(test_maxtext_keys_never_guessed) {
  gt_config c;
  gt_err e;
  ck_assert_int_eq(load1(&c, NULL, NULL, &e), GT_OK);
  char names[sizeof maxtext_base_yml_keys];
  memcpy(names, maxtext_base_yml_keys, sizeof names);
  int n = 0, foreign = 0;
  static const char *values[] = {"1", "", "on"};
  for (char *save = NULL, *k = strtok_r(names, " ", &save); k; k = strtok_r(NULL, " ", &save), n++) {
    if (gt_config_key(k)) continue;
    foreign++;
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
      c.notes[0] = '\0';
      gt_err_clear(&e);
      gt_rc rc = gt_config_set(&c, k, values[v], "the test", &e);
      const char *said = rc == GT_OK ? c.notes : e.msg;
      ck_assert_msg(!strstr(said, "did you mean"), "%s=%s: %s", k, values[v], said);
      char quoted[128];
      snprintf(quoted, sizeof quoted, "'%s'", k);
      ck_assert_msg(strstr(said, quoted) && strstr(said, "MaxText key"), "%s=%s: %s", k, values[v], said);
    }
    /* a lookup of the key is answered the same way */
    char buf[64];
    gt_err_clear(&e);
    ck_assert_int_eq(gt_config_get_text(&c, k, buf, sizeof buf, &e), GT_ERR_CONFIG);
    ck_assert_msg(!strstr(e.msg, "did you mean") && strstr(e.msg, "MaxText key"), "lookup %s: %s", k, e.msg);
  }
  ck_assert_int_eq(n, 518);
  ck_assert_int_ge(foreign, 300);
}
END_TEST

/* The keys the edit distance answered with another feature's key: each is
 * accepted at the value matching what gemtrain does and otherwise refused
 * as what it asks for. */
START_TEST(test_maxtext_keys_of_other_features) {
  gt_config c;
  gt_err e;
  static const char *ok[] = {"rope_min_timescale=1", "attn_logits_soft_cap=0.0", "ici_fsdp_transpose_parallelism=1",
                             "dcn_fsdp_transpose_parallelism=1", "eval_per_device_batch_size=0.0", "mlpwi=remat",
                             "num_slices=-1", "global_parameter_scale=1", "rope_type=default",
                             "routed_scaling_factor=1.0", "use_post_attn_norm=True", "logits_via_embedding=true",
                             "mlp_activations=[\"gelu\", \"linear\"]"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ck_assert_msg(load1(&c, NULL, ok[i], &e) == GT_OK, "%s: %s", ok[i], e.msg);
    ck_assert_msg(strstr(c.notes, "matches gemtrain") && strstr(c.notes, "accepted and ignored"), "%s: %s", ok[i],
                  c.notes);
  }
  /* ... and nothing of the configuration moved: RoPE keeps its base */
  ck_assert_int_eq(load1(&c, NULL, "rope_min_timescale=1", &e), GT_OK);
  gt_config plain;
  ck_assert_int_eq(load1(&plain, NULL, NULL, &e), GT_OK);
  ck_assert(c.rope_max_timescale == plain.rope_max_timescale && c.rope_max_timescale > 1);
  static const char *no[][3] = {
      {"rope_min_timescale=2", "RoPE minimum timescale", "rope_max_timescale ="},
      {"attn_logits_soft_cap=50", "attention logits", "final_logits_soft_cap'"},
      {"ici_fsdp_transpose_parallelism=2", "fsdp-transpose", "ici_fsdp_parallelism'"},
      {"eval_per_device_batch_size=4", "eval batch size of its own", "'per_device_batch_size'"},
      {"mlpwi=device", "mlpwi_0 and mlpwi_1", "mlpwo"},
      {"num_slices=2", "number of slices", "num_devices'"},
      {"global_parameter_scale=2", "power of 2", "load_parameters_path"},
      {"rope_type=yarn", "yarn RoPE scaling", "opt_type"},
      {"routed_scaling_factor=2.5", "routed experts", "skip_step_scaling_factor"},
      {"use_post_ffw_norm=false", "post-feed-forward norm", "did you mean"},
      {"mlp_activations=silu,linear", "GeGLU", "did you mean"},
  };
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    ck_assert_int_eq(load1(&c, NULL, no[i][0], &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "which gemtrain does not support") && strstr(e.msg, no[i][1]), "%s: %s", no[i][0],
                  e.msg);
    ck_assert_msg(!strstr(e.msg, "did you mean") && !strstr(e.msg, no[i][2]), "%s: %s", no[i][0], e.msg);
  }
  /* a MaxText key no value of which says what gemtrain does */
  ck_assert_int_eq(load1(&c, NULL, "hf_eval_files=x.jsonl", &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'hf_eval_files' (in the command line) is a MaxText key gemtrain does not implement") &&
                    strstr(e.msg, "eval_dataset_path"),
                "%s", e.msg);
  /* a list in a YAML file compares item by item */
  char *y = write_file("acts.yml", "mlp_activations: [\"gelu\",\"linear\"]\nuse_post_attn_norm: true\n");
  ck_assert_msg(load1(&c, y, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_ptr_nonnull(strstr(c.notes, "'mlp_activations' = [gelu,linear] matches gemtrain"));
  free(y);
  y = write_file("acts.yml", "mlp_activations:\n  - silu\n  - linear\n");
  ck_assert_int_eq(load1(&c, y, NULL, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'mlp_activations' = '[silu,linear]'") && strstr(e.msg, "GeGLU"), "%s", e.msg);
  free(y);
}
END_TEST

/* More notes than the notes hold: every line whole, the last says some
 * were left out. */
START_TEST(test_notes_overflow_said) {
  char text[8192] = "";
  size_t o = 0;
  for (int i = 0; i < 24; i++) /* MaxText's tile sizes, each noted */
    o += (size_t)snprintf(text + o, sizeof text - o, "%s_tile_%s_%s: 512\n", i % 2 ? "wo" : "wi",
                          (const char *[]){"fwd", "dlhs", "drhs"}[i / 2 % 3],
                          (const char *[]){"batch_seq", "embed_dim", "mlp_dim", "buffer_count"}[i / 6 % 4]);
  char *y = write_file("many.yml", text);
  gt_config c;
  gt_err e;
  ck_assert_msg(load1(&c, y, NULL, &e) == GT_OK, "%s", e.msg);
  size_t n = strlen(c.notes);
  ck_assert(n > 0 && c.notes[n - 1] == '\n');
  const char *last = c.notes + n - 1;
  while (last > c.notes && last[-1] != '\n') last--;
  ck_assert_str_eq(last, "config: more notes left out (more MaxText keys accepted and ignored)\n");
  for (const char *p = c.notes; *p; p = strchr(p, '\n') + 1)
    ck_assert_msg(!strncmp(p, "config: ", 8), "%s", p);
  free(y);
}
END_TEST

/* A key set twice: in one file (also as a key and its MaxText alias) it is
 * refused; on the command line the last wins, said in a note. */
START_TEST(test_key_set_twice) {
  gt_config c;
  gt_err e;
  static const char *files[][2] = {
      {"alias.json", "{\"lora_restore_path\": \"/a\", \"hf_lora_adapter_path\": \"/b\"}"},
      {"alias.yml", "hf_lora_adapter_path: /b\nsteps: 3\nlora_restore_path: /a\n"},
  };
  for (size_t i = 0; i < 2; i++) {
    char *p = write_file(files[i][0], files[i][1]);
    ck_assert_int_eq(load1(&c, p, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "'lora_restore_path'") && strstr(e.msg, "'hf_lora_adapter_path'") &&
                      strstr(e.msg, "set the same key") && strstr(e.msg, files[i][0]),
                  "%s", e.msg);
    free(p);
  }
  const char *ov[] = {"learning_rate=0.1", "steps=4", "learning_rate=0.001"};
  gt_err_clear(&e);
  ck_assert_int_eq(gt_config_load(&c, CFG_DIR, NULL, 3, ov, &e), GT_OK);
  ck_assert(c.learning_rate == 0.001);
  ck_assert_str_eq(c.notes,
                   "config: key 'learning_rate' is set 2 times (in the command line); the last, 'learning_rate=0.001', "
                   "is used\n");
  const char *al[] = {"lora_restore_path=/a", "hf_lora_adapter_path=/b", "enable_lora=true"};
  gt_err_clear(&e);
  ck_assert_msg(gt_config_load(&c, CFG_DIR, NULL, 3, al, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.lora_restore_path, "/b");
  ck_assert_ptr_nonnull(strstr(c.notes, "key 'lora_restore_path' is set 2 times (in the command line); the last, "
                                        "'hf_lora_adapter_path=/b', is used"));
  /* a file's key and the command line's are layers, not a repeat */
  char *p = write_file("lr.json", "{\"learning_rate\": 0.1}");
  ck_assert_int_eq(load1(&c, p, "learning_rate=0.2", &e), GT_OK);
  ck_assert_str_eq(c.notes, "");
  free(p);
}
END_TEST

START_TEST(test_hugging_face_names_suggested) {
  gt_config c;
  gt_err e;
  static const char *hf[][2] = {
      {"gradient_checkpointing=true", "remat_policy"}, {"weight_decay=0.1", "adam_weight_decay"},
      {"save_steps=50", "checkpoint_period"},          {"batch_size=4", "per_device_batch_size"},
      {"warmup_steps=10", "warmup_steps_fraction"},    {"num_train_epochs=3", "rows per epoch"},
      {"max_grad_norm=1", "gradient_clipping_threshold"},
  };
  for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
    ck_assert_int_eq(load1(&c, NULL, hf[i][0], &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "gemtrain's name for it is") && strstr(e.msg, hf[i][1]), "%s: %s", hf[i][0], e.msg);
  }
  /* an ordinary typo still gets the edit-distance guess */
  ck_assert_int_eq(load1(&c, NULL, "learning_rat=1", &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "did you mean 'learning_rate'"));
}
END_TEST

static const char yaml_text[] =
    "# MaxText-style\n"
    "base_config: \"base.yml\"\n"
    "model_name: gemma3-tiny   # a preset\n"
    "steps: 7\n"
    "learning_rate: 3.e-4\n"
    "enable_checkpointing: False\n"
    "scan_layers: True\n"
    "run_name: 'it''s \"here\"'\n"
    "dataset_path: \"a # not a comment\"\n"
    "trainable_parameters_mask:\n"
    "  - 'self_attn'\n"
    "  - norm\n"
    "logical_axis_rules: [\n"
    "    ['activation_batch', ['data', 'fsdp']],\n"
    "  ]\n"
    "ici_tensor_parallelism: 1\n"
    "sample_prompt:\n";

static const char json_text[] =
    "{\"model_name\": \"gemma3-tiny\", \"steps\": 7, \"learning_rate\": 3e-4, \"enable_checkpointing\": false,"
    " \"run_name\": \"it's \\\"here\\\"\", \"dataset_path\": \"a # not a comment\","
    " \"trainable_parameters_mask\": [\"self_attn\", \"norm\"], \"sample_prompt\": \"\"}";

START_TEST(test_yaml_reads_as_json) {
  char *y = write_file("maxtext.yml", yaml_text), *j = write_file("same.json", json_text);
  gt_config a, b;
  gt_err e;
  ck_assert_msg(load1(&a, y, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(load1(&b, j, NULL, &e) == GT_OK, "%s", e.msg);
  char *ta = gt_config_to_json(&a), *tb = gt_config_to_json(&b);
  ck_assert_str_eq(ta, tb);
  ck_assert_str_eq(a.run_name, "it's \"here\"");
  ck_assert_str_eq(a.trainable_parameters_mask, "self_attn norm");
  ck_assert_int_eq(a.steps, 7);
  ck_assert_ptr_nonnull(strstr(a.notes, "'logical_axis_rules'"));
  ck_assert_ptr_nonnull(strstr(a.notes, "'base_config'"));
  /* the user file's keys count as the user's, as from JSON */
  ck_assert_int_eq(gt_config_is_user_set(&a, "steps"), 1);
  free(ta), free(tb), free(y), free(j);
}
END_TEST

/* The forms MaxText's own YAML files use: digit separators (YAML 1.1's
 * 10_000), None for a key whose MaxText default is None, and a list for
 * train_data_columns. */
START_TEST(test_yaml_maxtext_forms) {
  gt_config c;
  gt_err e;
  char *y = write_file("forms.yml",
                       "checkpoint_period: 12_345\n"
                       "learning_rate: 0.000_3\n"
                       "steps: 1_000\n"
                       "max_num_checkpoints_to_keep: None\n"
                       "train_data_columns: ['text']\n"
                       "run_name: '2024_01_05'\n"
                       "checkpoint_storage_target_data_file_size_bytes: 2_147_483_648\n");
  ck_assert_msg(load1(&c, y, "max_num_checkpoints_to_keep=None", &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c.checkpoint_period, 12345);
  ck_assert(c.learning_rate == 0.0003);
  ck_assert_int_eq(c.steps, 1000);
  ck_assert_int_eq(c.max_num_checkpoints_to_keep, 0);
  ck_assert_str_eq(c.train_data_columns, "text");
  ck_assert_str_eq(c.run_name, "2024_01_05");
  free(y);
  /* None is MaxText's keep-all, 0 here, over an earlier count; JSON's null too */
  ck_assert_int_eq(gt_config_set(&c, "max_num_checkpoints_to_keep", "5", "t", &e), GT_OK);
  ck_assert_int_eq(gt_config_set(&c, "max_num_checkpoints_to_keep", "None", "t", &e), GT_OK);
  ck_assert_int_eq(c.max_num_checkpoints_to_keep, 0);
  y = write_file("null.json", "{\"max_num_checkpoints_to_keep\": null, \"steps\": 3}");
  ck_assert_msg(load1(&c, y, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(c.max_num_checkpoints_to_keep, 0);
  free(y);
  /* several columns are the comma-separated text */
  y = write_file("cols.yml", "train_data_columns:\n  - prompt\n  - completion\n");
  ck_assert_msg(load1(&c, y, NULL, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(c.train_data_columns, "prompt,completion");
  free(y);
  /* what stays refused: None for a key with no None, a separator in text,
   * a column list that is not plain names */
  static const char *bad[][2] = {
      {"steps: None\n", "key 'steps' expects an integer, got 'None'"},
      {"run_name: 2024_01_05\n", "line 1: a plain value YAML reads as a number written with '_' separators"},
      {"train_data_columns: ['a,b']\n", "must be a list of field names"},
      {"train_data_columns: []\n", "train_data_columns"},
      {"checkpoint_period: 1__0x\n", "expects an integer"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    y = write_file("bad.yml", bad[i][0]);
    ck_assert_int_eq(load1(&c, y, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, bad[i][1]), "%s: %s", bad[i][0], e.msg);
    free(y);
  }
}
END_TEST

START_TEST(test_yaml_refusals_name_the_line) {
  static const char *bad[][2] = {
      {"steps: 3\n\tlearning_rate: 1\n", "line 2"},
      {"steps: 3\nrun_name: 'open\n", "line 2"},
      /* a backslash that ends a double-quoted value, mid-file and at the end */
      {"steps: 3\nrun_name: \"a\\\nb\"\n", "line 2: a quoted value has no closing quote"},
      {"steps: 3\nrun_name: \"a\\", "no closing quote"},
      {"steps: 3\nsteps: 4\n", "appears twice"},
      {"steps: 3\nlearning_rate: *anchor\n", "line 2"},
      {"steps: 3\n---\nsteps: 4\n", "a second document"},
      /* what YAML reads as structure is not taken as text */
      {"steps: 3\nrun_name: a: b\n", "line 2: a plain value with ': ' in it"},
      {"run_name: a:\n", "line 1: a plain value with ': ' in it or ':' at its end"},
      {"steps: 3\nrun_name: - foo\n", "line 2: a plain value starting with '- '"},
      {"run_name: -\n", "starting with '- '"},
      {"trainable_parameters_mask: [a: b]\n", "which YAML reads as a mapping"},
      /* after the end marker, only another document could follow */
      {"steps: 3\n...\nsteps: 4\n", "line 3: text after the document's end ('...')"},
      {"steps: 3\n...\n---\nsteps: 4\n", "line 3: a second document"},
      {"weight_decay: 0.1\n", "adam_weight_decay"},
      {"steps: [1, 2]\n", "number, string or boolean"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *p = write_file("bad.yaml", bad[i][0]);
    gt_config c;
    gt_err e;
    ck_assert_int_eq(load1(&c, p, NULL, &e), GT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, bad[i][1]), "case %zu: %s", i, e.msg);
    free(p);
  }
}
END_TEST

START_TEST(test_yaml_parser_values) {
  const char *t = "a: 'x'' y' # c\nb: \"q\\\"r\\n\"\nc: [1, 'two', three ]\nd: ~\ne:\n  - 1\n  - '#2'\n";
  cJSON *o = NULL;
  gt_err e;
  ck_assert_int_eq(gt_config_parse_yaml(t, strlen(t), "t.yml", &o, &e), GT_OK);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "a")->valuestring, "x' y");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "b")->valuestring, "q\"r\n");
  cJSON *c = cJSON_GetObjectItem(o, "c");
  ck_assert_int_eq(cJSON_GetArraySize(c), 3);
  ck_assert_str_eq(cJSON_GetArrayItem(c, 1)->valuestring, "two");
  ck_assert_str_eq(cJSON_GetArrayItem(c, 2)->valuestring, "three");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "d")->valuestring, "");
  cJSON *l = cJSON_GetObjectItem(o, "e");
  ck_assert_int_eq(cJSON_GetArraySize(l), 2);
  ck_assert_str_eq(cJSON_GetArrayItem(l, 1)->valuestring, "#2");
  cJSON_Delete(o);
  /* an apostrophe inside a plain scalar opens no quote: the comment after
   * it is still a comment */
  const char *t2 = "run_name: bob's_run  # mine\nsample_prompt: It's \"here\" # c\nx: [a, 'b # c', d] # e\n";
  ck_assert_int_eq(gt_config_parse_yaml(t2, strlen(t2), "t2.yml", &o, &e), GT_OK);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "run_name")->valuestring, "bob's_run");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "sample_prompt")->valuestring, "It's \"here\"");
  c = cJSON_GetObjectItem(o, "x");
  ck_assert_int_eq(cJSON_GetArraySize(c), 3);
  ck_assert_str_eq(cJSON_GetArrayItem(c, 1)->valuestring, "b # c");
  cJSON_Delete(o);
  /* '...' ends the document, comments may follow; a colon without a blank
   * after it, a quoted ': ' and a negative number are plain text */
  const char *t3 = "run_name: 'a: b'\ndataset_path: http://x/y\nz: -1\nl: [-2, \"c: d\"]\n...\n# done\n...\n";
  ck_assert_msg(gt_config_parse_yaml(t3, strlen(t3), "t3.yml", &o, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(cJSON_GetObjectItem(o, "run_name")->valuestring, "a: b");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "dataset_path")->valuestring, "http://x/y");
  ck_assert_str_eq(cJSON_GetObjectItem(o, "z")->valuestring, "-1");
  ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "l"), 1)->valuestring, "c: d");
  cJSON_Delete(o);
}
END_TEST

START_TEST(test_ctx_configure_names_its_overrides) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"stepz=3"};
  ck_assert_int_eq(gt_ctx_configure(c, "gemma3-tiny", 1, ov), GT_ERR_CONFIG);
  ck_assert_msg(strstr(gt_ctx_error(c), "gt_ctx_configure") && !strstr(gt_ctx_error(c), "command line"), "%s",
                gt_ctx_error(c));
  gt_ctx_free(c);
}
END_TEST

Suite *habits_suite(void) {
  Suite *s = suite_create("config_habits");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_noop_keys_accepted_with_a_note);
  tcase_add_test(tc, test_unsupported_keys_refused_as_such);
  tcase_add_test(tc, test_maxtext_keys_never_guessed);
  tcase_add_test(tc, test_maxtext_keys_of_other_features);
  tcase_add_test(tc, test_notes_overflow_said);
  tcase_add_test(tc, test_key_set_twice);
  tcase_add_test(tc, test_hugging_face_names_suggested);
  tcase_add_test(tc, test_yaml_reads_as_json);
  tcase_add_test(tc, test_yaml_maxtext_forms);
  tcase_add_test(tc, test_yaml_refusals_name_the_line);
  tcase_add_test(tc, test_yaml_parser_values);
  tcase_add_test(tc, test_ctx_configure_names_its_overrides);
  return s;
}

int main(void) { return gt_test_run_suite(habits_suite(), 0); }
