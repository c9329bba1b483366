#include "config/flops.h"

#include <string.h>

/* MaxText calculate_gemma4_tflops_training_per_device, layer by layer:
 * globals count their own head dim and kv heads (K = V: one projection),
 * KV-shared layers no K/V projection, double-wide layers their own F, and
 * PLE its model projection plus each layer's gate and projection; a MoE
 * layer its router (2BTdE), the shared expert and top-k routed experts. */
static gt_flops gt__gemma4(const gt_config *c) {
  double B = c->per_device_batch_size, T = (double)c->max_target_length;
  double d = (double)c->base_emb_dim, H = (double)c->base_num_query_heads, V = (double)c->vocab_size;
  double P = (double)c->hidden_size_per_layer_input;
  double W = (double)c->sliding_window_size < T ? (double)c->sliding_window_size : T;
  long long L = c->base_num_decoder_layers, first_shared = gt_config_first_kv_shared(c);
  double learn = 2 * B * T * d * V, attn = 0;
  if (P > 0) learn += 2 * B * T * d * ((double)L * P);
  for (long long l = 0; l < L; l++) {
    double hd = (double)gt_config_layer_head_dim(c, l), K = (double)gt_config_layer_kv_heads(c, l);
    double F = (double)gt_config_layer_mlp_dim(c, l);
    double kv_mult = l >= first_shared ? 0 : gt_config_layer_k_eq_v(c, l) ? 1 : 2;
    learn += 2 * B * T * F * d * 2 + 2 * B * T * F * d; /* the dense MLP, or MoE's shared expert */
    if (gt_config_layer_is_moe(c, l)) {
      /* the router, and num_experts_per_tok routed experts per token */
      double E = (double)c->num_experts, k = (double)c->num_experts_per_tok, FE = (double)c->base_moe_mlp_dim;
      learn += 2 * B * T * d * E + k * (2 * B * T * FE * d * 2 + 2 * B * T * FE * d);
    }
    learn += 2 * B * T * d * (H + kv_mult * K) * hd + 2 * B * T * d * H * hd;
    if (P > 0) learn += 2 * B * T * d * P + 2 * B * T * P * d;
    attn += gt_config_layer_is_global(c, l) ? 2 * B * T * T * H * hd : 4 * B * (T * W - 0.5 * W * W) * H * hd;
  }
  double ga = (double)c->gradient_accumulation_steps;
  gt_flops f;
  f.attention_tflops = ga * 3 * attn / 1e12;
  f.learnable_tflops = ga * 3 * learn / 1e12;
  f.total_tflops = f.attention_tflops + f.learnable_tflops;
  return f;
}

gt_flops gt_flops_per_step_per_device(const gt_config *c) {
  if (gt_config_is_gemma4(c)) return gt__gemma4(c);
  double B = c->per_device_batch_size, T = (double)c->max_target_length;
  double d = (double)c->base_emb_dim, H = (double)c->base_num_query_heads;
  double K = (double)c->base_num_kv_heads, hd = (double)c->head_dim, F = (double)c->base_mlp_dim;
  double V = (double)c->vocab_size;
  long long L = c->base_num_decoder_layers;
  double ffn = 2 * B * T * F * d * 2 + 2 * B * T * F * d; /* GeGLU: two up matmuls + down */
  double qkv = 2 * B * T * d * (H + 2 * K) * hd;
  double proj = 2 * B * T * d * H * hd;
  double emb = 2 * B * T * d * V;
  double W = (double)c->sliding_window_size < T ? (double)c->sliding_window_size : T;
  double glob = 2 * B * T * T * H * hd;            /* causal: half of 4 B T^2 H hd */
  double loc = 4 * B * (T * W - 0.5 * W * W) * H * hd; /* exact band */
  double n_glob = 0;
  for (long long l = 0; l < L; l++) n_glob += gt_config_layer_is_global(c, l);
  double n_loc = (double)L - n_glob;
  gt_flops f;
  double ga = (double)c->gradient_accumulation_steps;
  f.attention_tflops = ga * 3 * (n_glob * glob + n_loc * loc) / 1e12;
  f.learnable_tflops = ga * 3 * ((double)L * ffn + (double)L * (qkv + proj) + emb) / 1e12;
  f.total_tflops = f.attention_tflops + f.learnable_tflops;
  return f;
}
