#include "model/flops.h"

#include <string.h>

#include "model/model.h"

double gt_flops_attention_forward(double B, double T, double H, double head_dim, double window) {
  if (window <= 0 || window >= T) return 2 * B * T * T * H * head_dim;
  return 4 * B * (T * window - 0.5 * window * window) * H * head_dim;
}

/* A layer's window for gt_flops_attention_forward (0: global). */
static double gt__window(const gt_layer_desc *ld) { return ld->kind == GT_LAYER_GLOBAL ? 0 : (double)ld->window; }

/* MaxText calculate_gemma4_tflops_training_per_device, layer by layer:
 * globals count their own head dim and kv heads (K = V: one projection),
 * KV-shared layers no K/V projection, double-wide layers their own F, and
 * PLE its model projection plus each layer's gate and projection; a MoE
 * layer its router (2BTdE), the shared expert and top-k routed experts. */
static gt_flops gt__flops_all_trainable(const gt_model *m, const gt_config *c);

static gt_flops gt__gemma4(const gt_model *m, const gt_config *c) {
  double B = c->per_device_batch_size, T = (double)c->max_target_length;
  double d = (double)m->d, V = (double)m->vocab;
  double P = (double)m->ple_dim;
  int64_t L = m->n_layers;
  double learn = 2 * B * T * d * V, attn = 0;
  if (P > 0) learn += 2 * B * T * d * ((double)L * P);
  const double outside = learn; /* the embedding-side and head products, once per step */
  for (int64_t l = 0; l < L; l++) {
    const gt_layer_desc *ld = &m->layers[l];
    double H = (double)ld->n_heads, hd = (double)ld->head_dim, K = (double)ld->n_kv_heads;
    double F = (double)ld->mlp_dim;
    double kv_mult = ld->kv_donor >= 0 ? 0 : ld->k_eq_v ? 1 : 2;
    learn += 2 * B * T * F * d * 2 + 2 * B * T * F * d; /* the dense MLP, or MoE's shared expert */
    if (ld->n_experts) {
      /* the router, and num_experts_per_tok routed experts per token */
      double E = (double)ld->n_experts, k = (double)ld->experts_per_tok, FE = (double)ld->moe_mlp_dim;
      learn += 2 * B * T * d * E + k * (2 * B * T * FE * d * 2 + 2 * B * T * FE * d);
    }
    learn += 2 * B * T * d * (H + kv_mult * K) * hd + 2 * B * T * d * H * hd;
    if (ld->ple_dim > 0) learn += 2 * B * T * d * P + 2 * B * T * P * d;
    attn += gt_flops_attention_forward(B, T, H, hd, gt__window(ld));
  }
  double ga = (double)c->gradient_accumulation_steps;
  gt_flops f;
  f.attention_tflops = ga * 3 * attn / 1e12;
  f.learnable_tflops = ga * 3 * learn / 1e12;
  f.total_tflops = f.attention_tflops + f.learnable_tflops;
  f.layers_forward_tflops = ga * (learn - outside + attn) / 1e12;
  return f;
}

/* The weight-gradient products a frozen tensor does not have (model/store.h:
 * no gradient, so no dW): 2 B T per weight a token uses, per micro-batch.
 * The counted weights are the matrices: every 2-D and 3-D tensor but the
 * per-layer embedding table (a lookup, free like the main embedding's, whose
 * tied logits product is counted); a token uses num_experts_per_tok of a
 * layer's E experts. */
static double gt__frozen_dw(const gt_model *m, const gt_config *c) {
  if (!m->n_frozen_tensors) return 0;
  double B = c->per_device_batch_size, T = (double)c->max_target_length, used = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    if (t->role != GT_ROLE_FROZEN || t->ndim < 2 || t->offset == m->ple_embed_offset) continue;
    double n = (double)t->numel;
    if (t->ndim == 3 && t->layer >= 0 && m->layers[t->layer].n_experts)
      n *= (double)m->layers[t->layer].experts_per_tok / (double)m->layers[t->layer].n_experts;
    used += n;
  }
  return (double)c->gradient_accumulation_steps * 2 * B * T * used / 1e12;
}

gt_flops gt_flops_of_model(const gt_model *m, const gt_config *c) {
  gt_flops f = gt__flops_all_trainable(m, c);
  /* DPO's reference pass: a forward of the whole model without adapters */
  if (gt_config_dpo_reference(c)) {
    f.learnable_tflops *= 4.0 / 3.0;
    f.attention_tflops *= 4.0 / 3.0;
    f.total_tflops *= 4.0 / 3.0;
  }
  double dw = gt__frozen_dw(m, c);
  f.learnable_tflops -= dw;
  f.total_tflops -= dw;
  /* adapters (model/lora.h): h = x A^T and h B^T, 2 B T r (in + out) per
   * adapted projection in the forward (2 B T per adapter element), three
   * times that with backward; the layers' forward, which remat repeats,
   * includes them */
  if (m->n_lora_params) {
    double fwd = (double)c->gradient_accumulation_steps * 2 * c->per_device_batch_size * (double)c->max_target_length *
                 (double)m->n_lora_params / 1e12;
    f.learnable_tflops += 3 * fwd;
    f.total_tflops += 3 * fwd;
    f.layers_forward_tflops += fwd;
  }
  return f;
}

/* Gemma 3: every layer has the same projections and MLP (layer 0's), only
 * the attention span differs between local and global layers. */
static gt_flops gt__flops_all_trainable(const gt_model *m, const gt_config *c) {
  gt_flops f = {0, 0, 0, 0};
  if (m->n_layers < 1) return f;
  if (m->layers[0].gemma4) return gt__gemma4(m, c);
  const gt_layer_desc *l0 = &m->layers[0];
  double B = c->per_device_batch_size, T = (double)c->max_target_length;
  double d = (double)m->d, H = (double)l0->n_heads;
  double K = (double)l0->n_kv_heads, hd = (double)l0->head_dim, F = (double)l0->mlp_dim;
  double V = (double)m->vocab;
  int64_t L = m->n_layers;
  double ffn = 2 * B * T * F * d * 2 + 2 * B * T * F * d; /* GeGLU: two up matmuls + down */
  double qkv = 2 * B * T * d * (H + 2 * K) * hd;
  double proj = 2 * B * T * d * H * hd;
  double emb = 2 * B * T * d * V;
  /* Gemma 3's locals share one window: count the layers of each kind */
  double n_glob = 0, W = 0;
  for (int64_t l = 0; l < L; l++) {
    if (m->layers[l].kind == GT_LAYER_GLOBAL)
      n_glob++;
    else
      W = gt__window(&m->layers[l]);
  }
  double n_loc = (double)L - n_glob;
  double glob = gt_flops_attention_forward(B, T, H, hd, 0), loc = gt_flops_attention_forward(B, T, H, hd, W);
  double ga = (double)c->gradient_accumulation_steps;
  f.attention_tflops = ga * 3 * (n_glob * glob + n_loc * loc) / 1e12;
  f.learnable_tflops = ga * 3 * ((double)L * ffn + (double)L * (qkv + proj) + emb) / 1e12;
  f.total_tflops = f.attention_tflops + f.learnable_tflops;
  f.layers_forward_tflops = ga * ((double)L * (ffn + qkv + proj) + n_glob * glob + n_loc * loc) / 1e12;
  return f;
}

gt_flops gt_flops_per_step_per_device(const gt_config *c) {
  gt_flops f = {0, 0, 0, 0};
  gt_model m;
  gt_err err;
  if (gt_model_build(&m, c, &err) != GT_OK) return f;
  f = gt_flops_of_model(&m, c);
  gt_model_free(&m);
  return f;
}
