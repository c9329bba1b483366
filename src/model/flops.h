/* Analytic FLOPs per training step per device, MaxText's formula
 * (maxtext_utils calculate_mixed_attention_model_tflops_training_per_device):
 * forward + backward = 3 x forward; the embedding lookup is free and the tied
 * logits matmul counts once; local layers count the exact banded triangle.
 * Gemma 4 (calculate_gemma4_tflops_training_per_device) counts per layer:
 * globals with their head dim and kv heads, K = V as one projection, no K/V
 * projection on KV-shared layers, double-wide MLPs, and PLE's projections.
 * A frozen weight (trainable_parameters_mask, model/store.h) has no weight
 * gradient: its dW product (a third of its 3 x forward) is not counted.
 * DPO (use_dpo with preference_algo=dpo) adds the reference's forward over
 * the step's micro-batches, as MaxText does (the learnable and attention
 * FLOPs of a model that trains everything, divided by 3): the base with the
 * adapters off, or the frozen copy of every parameter. */
#ifndef GEMTRAIN_FLOPS_H
#define GEMTRAIN_FLOPS_H

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_flops {
  double learnable_tflops; /* weight matmuls incl. the logits */
  double attention_tflops; /* q.k and p.v */
  double total_tflops;
  /* the forward of the decoder layers alone (projections, MLP, attention;
   * not the embedding, PLE's model projection or the logits): what
   * remat_policy=full computes a second time in the backward */
  double layers_forward_tflops;
} gt_flops;

/* The model's layer descriptors give each layer's geometry (head dim, kv
 * heads, window, MLP width, K/V sharing, experts); cfg gives the batch, the
 * sequence length and gradient accumulation. */
/* MaxText's forward FLOPs of one attention layer's q.k and p.v (not TFLOPs):
 * with a window W < T the exact band 4 B (T W - W^2 / 2) H hd, else (window
 * 0: global) the causal half of 4 B T^2 H hd. */
double gt_flops_attention_forward(double B, double T, double H, double head_dim, double window);

struct gt_model;
gt_flops gt_flops_of_model(const struct gt_model *m, const gt_config *cfg);
/* The same on the descriptors gt_model_build makes of cfg (zero if cfg does
 * not build: it is validated long before anyone asks). */
gt_flops gt_flops_per_step_per_device(const gt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
