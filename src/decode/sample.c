/* Next-token sampling: greedy, weighted (temperature), top-k and nucleus,
 * with MaxText's names and candidate rules (inference_utils.py), in double
 * precision, from a seeded splitmix64 stream. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

int32_t gt_sample_argmax(const float *logits, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  return (int32_t)best;
}

/* qsort has no context argument; the logits being sorted by travel in a
 * thread-local so two threads may sample at once. */
static _Thread_local const float *gt__sort_logits;

static int gt__by_logit_desc(const void *a, const void *b) {
  int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
  float li = gt__sort_logits[i], lj = gt__sort_logits[j];
  if (li != lj) return li > lj ? -1 : 1;
  return (i > j) - (i < j);
}

static void gt__sort_ids(const float *logits, int64_t V, int32_t *ids) {
  for (int64_t v = 0; v < V; v++) ids[v] = (int32_t)v;
  gt__sort_logits = logits;
  qsort(ids, (size_t)V, sizeof *ids, gt__by_logit_desc);
  gt__sort_logits = NULL;
}

int64_t gt_sample_topk_set(const float *logits, int64_t V, int64_t k, int32_t *ids) {
  gt__sort_ids(logits, V, ids);
  return k < V ? k : V;
}

int64_t gt_sample_nucleus_set(const float *logits, int64_t V, double p, int32_t *ids) {
  gt__sort_ids(logits, V, ids);
  if (p >= 1.0) return V;
  /* MaxText: with probabilities in falling order, the cut is the first index
   * whose running sum reaches p; every logit below the cut's is dropped. */
  double mx = logits[ids[0]], z = 0.0;
  for (int64_t i = 0; i < V; i++) z += exp((double)logits[ids[i]] - mx);
  double cum = 0.0;
  int64_t cut = V - 1;
  for (int64_t i = 0; i < V; i++) {
    cum += exp((double)logits[ids[i]] - mx) / z;
    if (cum >= p) {
      cut = i;
      break;
    }
  }
  while (cut + 1 < V && logits[ids[cut + 1]] == logits[ids[cut]]) cut++;
  return cut + 1;
}

gt_rc gt_sampler_init(gt_sampler *s, gt_sample_strategy strategy, double temperature, int64_t top_k,
                      double top_p, uint64_t seed, int64_t vocab, gt_err *err) {
  memset(s, 0, sizeof *s);
  if (!(temperature >= 0.0) || isinf(temperature))
    return gt_err_set(err, GT_ERR_CONFIG, "decode: decode_sampling_temperature = %g; expected a finite value >= 0",
                      temperature);
  if (strategy == GT_SAMPLE_TOPK && (top_k < 1 || top_k > vocab))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: decode_sampling_top_k = %lld; decode_sampling_strategy=topk needs 1 .. vocab_size (%lld)",
                      (long long)top_k, (long long)vocab);
  if (strategy == GT_SAMPLE_NUCLEUS && !(top_p > 0.0 && top_p <= 1.0))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "decode: decode_sampling_nucleus_p = %g; decode_sampling_strategy=nucleus needs 0 < p <= 1", top_p);
  s->strategy = strategy;
  s->temperature = temperature;
  s->top_k = top_k;
  s->top_p = top_p;
  s->rng = seed;
  s->vocab = vocab;
  s->cand = malloc((size_t)vocab * sizeof *s->cand);
  s->w = malloc((size_t)vocab * sizeof *s->w);
  if (!s->cand || !s->w) {
    gt_sampler_free(s);
    return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the sampler of %lld tokens", (long long)vocab);
  }
  return GT_OK;
}

gt_rc gt_sampler_from_config(gt_sampler *s, const gt_config *c, int64_t vocab, gt_err *err) {
  static const char *names[] = {"greedy", "weighted", "topk", "nucleus"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(c->decode_sampling_strategy, names[i]))
      return gt_sampler_init(s, (gt_sample_strategy)i, c->decode_sampling_temperature, c->decode_sampling_top_k,
                             c->decode_sampling_nucleus_p, (uint64_t)c->decode_seed, vocab, err);
  return gt_err_set(err, GT_ERR_CONFIG, "decode: decode_sampling_strategy '%s'; expected greedy, weighted, topk or nucleus",
                    c->decode_sampling_strategy);
}

void gt_sampler_free(gt_sampler *s) {
  free(s->cand);
  free(s->w);
  memset(s, 0, sizeof *s);
}

void gt_sampler_reseed(gt_sampler *s, uint64_t seed, uint64_t stream) {
  uint64_t z = stream * 0x9E3779B97F4A7C15ull; /* splitmix64's finaliser: 0 stays 0 */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  s->rng = seed ^ (z ^ (z >> 31));
}

int32_t gt_sampler_next(gt_sampler *s, const float *logits) {
  const int64_t V = s->vocab;
  /* The most likely token is in every candidate set, so temperature 0 (the
   * limit of the tempered softmax) is greedy whatever the strategy. */
  if (s->strategy == GT_SAMPLE_GREEDY || s->temperature == 0.0) return gt_sample_argmax(logits, V);
  int64_t n = V;
  if (s->strategy == GT_SAMPLE_TOPK)
    n = gt_sample_topk_set(logits, V, s->top_k, s->cand);
  else if (s->strategy == GT_SAMPLE_NUCLEUS)
    n = gt_sample_nucleus_set(logits, V, s->top_p, s->cand);
  else
    for (int64_t v = 0; v < V; v++) s->cand[v] = (int32_t)v;
  double mx = -INFINITY, sum = 0.0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, (double)logits[s->cand[i]]);
  for (int64_t i = 0; i < n; i++) sum += (s->w[i] = exp(((double)logits[s->cand[i]] - mx) / s->temperature));
  const double target = (double)(gt_splitmix64(&s->rng) >> 11) / 9007199254740992.0 * sum;
  double acc = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; i++) {
    if (s->w[i] <= 0.0) continue;
    acc += s->w[i];
    last = i;
    if (acc > target) return s->cand[i];
  }
  return s->cand[last]; /* the running sum rounded below the draw */
}
