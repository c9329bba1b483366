/* gemtrain decoding: a KV cache, prefill and one-token steps, sampling.
 *
 * The cache is laid out from the model's layer descriptors, one entry per
 * layer: a local (sliding-window) layer keeps only the last `window`
 * positions in a ring buffer, a global layer every position up to max_len.
 * Each entry carries its own kv heads and head dim, and names the layer whose
 * keys and values it reads (itself today), so per-layer head dims and
 * Gemma 4's KV-sharing layers are table entries, not code paths.
 *
 * Prefill runs the prompt through the training layer (gt_layer_forward:
 * batched matmuls, the tiled attention kernel) and stores each layer's keys
 * and values; a step runs one token through the same layer ops around
 * gt_attention_decode, which reads the cache. Both give the logits of the
 * full forward pass over the same tokens (to float rounding; tested).
 *
 *   gt_decoder d;  gt_sampler s;
 *   gt_decoder_init(&d, &model, n_prompt + max_new, &err);
 *   gt_sampler_init(&s, GT_SAMPLE_TOPK, 0.8, 40, -1, seed, model.vocab, &err);
 *   gt_decode_generate(&d, &s, prompt, n_prompt, max_new, out, NULL, &stats, &err);
 *   gt_sampler_free(&s);  gt_decoder_free(&d);
 */
#ifndef GEMTRAIN_DECODE_H
#define GEMTRAIN_DECODE_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/common.h"
#include "config/config.h"
#include "model/layer.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- KV cache ---- */

typedef struct gt_kv_layer {
  int src;          /* layer whose keys and values this layer attends to (itself) */
  int window;       /* keys visible per query; 0 = global (all earlier positions) */
  int n_kv_heads, head_dim;
  int64_t cap;      /* positions kept: min(window, max_len) local, max_len global */
  float *k, *v;     /* [cap, n_kv_heads * head_dim], position p in row p % cap;
                       NULL when src is another layer */
} gt_kv_layer;

typedef struct gt_kv_cache {
  int64_t n_layers;
  int64_t max_len; /* positions the cache can hold in all (global layers keep them all) */
  int64_t len;     /* positions written so far: the next token's position */
  gt_kv_layer *layers;
  gt_mem *mem;
} gt_kv_cache;

/* Bytes of the cache of model m for max_len positions (what init allocates
 * in GT_MEM_KVCACHE): the sum over layers that own their keys and values of
 * 2 * cap * n_kv_heads * head_dim * 4. */
int64_t gt_kv_cache_bytes(const gt_model *m, int64_t max_len);
gt_rc gt_kv_cache_init(gt_kv_cache *c, const gt_model *m, int64_t max_len, gt_mem *mem, gt_err *err);
void gt_kv_cache_free(gt_kv_cache *c);
/* The keys a query at position pos sees in layer l (its own already
 * written): the rows start, start+1, ... (mod cap), n of them, oldest first. */
void gt_kv_visible(const gt_kv_cache *c, int64_t l, int64_t pos, int64_t *start, int64_t *n);

/* ---- decoder ---- */

typedef struct gt_decoder {
  gt_model *m;     /* the model */
  /* the weights it computes with: m->params, or with dtype=bfloat16 a copy
   * rounded to bf16 when the decoder was made (as the trainer's compute
   * copy is; a decoder made before an update does not see it) */
  const float *params;
  float *rounded;
  gt_model view;   /* m with RoPE tables that cover max_len positions */
  float *rope_cos[GT_MAX_ROPE], *rope_sin[GT_MAX_ROPE]; /* own tables when max_len > m->max_pos */
  gt_kv_cache cache;
  float *acts[GT_A_NSLOTS]; /* one token's activations, sized for the largest layer */
  float *x, *xn;            /* [d] the residual stream in and out of a layer */
  float *ple;               /* [L*P] the token's per-layer inputs (Gemma 4 PLE models), else NULL */
} gt_decoder;

/* A decoder of model m (parameters allocated, no sharded view) for contexts
 * of up to max_len positions. Memory comes from m->mem: the cache as
 * GT_MEM_KVCACHE, one token's activations as temporaries, RoPE tables beyond
 * the model's own as other. */
gt_rc gt_decoder_init(gt_decoder *d, gt_model *m, int64_t max_len, gt_err *err);
void gt_decoder_free(gt_decoder *d);
/* Forget every position (the next prefill starts at position 0). */
void gt_decoder_reset(gt_decoder *d);
/* Runs n >= 1 tokens at positions 0 .. n-1 through the model in one pass
 * (the cache must be empty) and writes the logits of the last one, [V]. */
gt_rc gt_decoder_prefill(gt_decoder *d, const int32_t *ids, int64_t n, float *logits, gt_err *err);
/* Runs one token at the next position against the cache; logits [V]. */
gt_rc gt_decoder_step(gt_decoder *d, int32_t id, float *logits, gt_err *err);

/* ---- sampling (MaxText's decode_sampling_strategy) ----
 * greedy: the most likely token (the lowest id among equal logits).
 * weighted: softmax(logits / temperature) over the whole vocabulary.
 * topk: the same over the top_k most likely tokens.
 * nucleus: the same over the fewest most likely tokens whose probability
 *   (softmax of the logits before the temperature, as MaxText) reaches top_p;
 *   tokens tied with the last one kept are kept too.
 * temperature 0 picks the most likely token of the candidates, which is the
 * greedy choice for every strategy; as the temperature falls toward 0 the
 * samples converge to it. Draws come from a splitmix64 stream seeded by
 * `seed`, one draw per sampled token: the same seed gives the same tokens. */
typedef enum gt_sample_strategy {
  GT_SAMPLE_GREEDY = 0,
  GT_SAMPLE_WEIGHTED,
  GT_SAMPLE_TOPK,
  GT_SAMPLE_NUCLEUS
} gt_sample_strategy;

typedef struct gt_sampler {
  gt_sample_strategy strategy;
  double temperature;
  int64_t top_k;
  double top_p;
  uint64_t rng;
  int64_t vocab;
  int32_t *cand;  /* scratch [vocab]: candidate ids */
  double *w;      /* scratch [vocab]: their weights */
} gt_sampler;

/* top_k is used by topk (1 .. vocab), top_p by nucleus ((0, 1]); a value the
 * strategy needs out of range is refused naming its config key. */
gt_rc gt_sampler_init(gt_sampler *s, gt_sample_strategy strategy, double temperature, int64_t top_k,
                      double top_p, uint64_t seed, int64_t vocab, gt_err *err);
/* From the decode_sampling_* keys and decode_seed. */
gt_rc gt_sampler_from_config(gt_sampler *s, const gt_config *cfg, int64_t vocab, gt_err *err);
void gt_sampler_free(gt_sampler *s);
int32_t gt_sampler_next(gt_sampler *s, const float *logits);
/* Restarts the draws at stream `stream` of seed: stream 0 is the stream
 * gt_sampler_init(seed) starts, stream k > 0 one of its own (the seed
 * xor'ed with splitmix64's finaliser of k * 2^64/phi), so streams of one
 * seed do not overlap as shifted copies. decode's messages_path answers
 * record k from stream k. */
void gt_sampler_reseed(gt_sampler *s, uint64_t seed, uint64_t stream);

/* The candidate sets, in order of falling logit (equal logits: lower id
 * first); each returns the count written to ids (capacity V). */
int64_t gt_sample_topk_set(const float *logits, int64_t V, int64_t k, int32_t *ids);
int64_t gt_sample_nucleus_set(const float *logits, int64_t V, double p, int32_t *ids);
int32_t gt_sample_argmax(const float *logits, int64_t V);

/* ---- generation ---- */

typedef struct gt_decode_stats {
  int64_t n_prompt, n_new;
  double prefill_seconds;  /* the prompt's pass */
  double generate_seconds; /* sampling and one-token steps after it */
  int stopped_at_eos;      /* the last new token is <eos> */
  int stopped_by_caller;   /* the stop function ended it after the last new token */
} gt_decode_stats;

#define GT_DECODE_EOS 1 /* Gemma's <eos>, and byte tokens' */

/* Prefills the prompt, then samples up to max_new tokens into out, feeding
 * each back, and stops after <eos> (id GT_DECODE_EOS). logits_out
 * (optional, [max_new, V]) receives the logits each new token was sampled
 * from. The decoder is reset first; it must hold n_prompt + max_new - 1
 * positions. */
gt_rc gt_decode_generate(gt_decoder *d, gt_sampler *s, const int32_t *prompt, int64_t n_prompt, int64_t max_new,
                         int32_t *out, float *logits_out, gt_decode_stats *st, gt_err *err);

/* After each new token that is not <eos>, stop(ctx, out, n_new, &halt, err)
 * decides whether to end there (halt = 1); an error it returns ends the
 * generation with that error. */
typedef gt_rc (*gt_decode_stop_fn)(void *ctx, const int32_t *out, int64_t n_new, int *halt, gt_err *err);

/* How a generation runs beyond the sampler. */
typedef struct gt_decode_ctl {
  int32_t eos;            /* the token that ends it (written to out), or -1 for none */
  int64_t n_ids;          /* ids >= n_ids (a tokenizer's id count) get logit -inf before sampling,
                             so no strategy picks them; 0: none */
  gt_decode_stop_fn stop; /* or NULL */
  void *ctx;
} gt_decode_ctl;

/* gt_decode_generate as ctl says (NULL: eos GT_DECODE_EOS, nothing masked,
 * no stop function); logits_out gets the logits after the masking. */
gt_rc gt_decode_generate_until(gt_decoder *d, gt_sampler *s, const int32_t *prompt, int64_t n_prompt,
                               int64_t max_new, int32_t *out, float *logits_out, const gt_decode_ctl *ctl,
                               gt_decode_stats *st, gt_err *err);

/* Whether `gemtrain train` ends with a sample: sample_tokens > 0 and
 * sample_at_end on, or auto and not an SFT run (use_sft). */
int gt_decode_sample_wanted(const gt_config *cfg);
/* The closing sample of `gemtrain train`: sample_tokens tokens after
 * sample_prompt (temperature 0.7, seeded by init_weights_seed), through
 * tokenizer_path when set, else byte tokens. With use_sft the prompt is a
 * user turn of the model's chat template and the sample ends at the end of
 * the model's turn. *text (malloc'd; the caller frees it) is the prompt and
 * its continuation ("user: <prompt>\nmodel: <reply>" for a chat), escaped
 * for the console (gt_text_escape); *n_new the tokens sampled. */
gt_rc gt_decode_sample_text(gt_model *m, const gt_config *cfg, char **text, int64_t *n_new, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
