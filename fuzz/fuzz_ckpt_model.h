/* The tiny model whose checkpoints fuzz_ckpt reads and ckpt_seed.c writes
 * (a few hundred parameters: a whole checkpoint is a small input). */
#ifndef GT_FUZZ_CKPT_MODEL_H
#define GT_FUZZ_CKPT_MODEL_H

static const char *const gt_fuzz_model_keys[] = {
    "model_name=gemma3-tiny", "vocab_size=16",         "base_emb_dim=8",         "base_num_query_heads=2",
    "base_num_kv_heads=1",    "head_dim=4",            "base_mlp_dim=8",         "base_num_decoder_layers=2",
    "layer_pattern=LG",       "sliding_window_size=4", "query_pre_attn_scalar=4", "max_target_length=8",
    "per_device_batch_size=1"};
#define GT_FUZZ_N_MODEL_KEYS ((int)(sizeof gt_fuzz_model_keys / sizeof *gt_fuzz_model_keys))

#endif
