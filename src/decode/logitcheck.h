/* The forward-pass logit checker (MaxText tests/utils/
 * forward_pass_logit_checker.py; the Gemma spec (kept outside the
 * repository), section 7): golden logits in, per-token KL divergence, the largest logit difference and the
 * top-k agreement of the last position out.
 *
 * Golden file: JSON Lines, one object per sequence,
 *   {"tokens": [ids...], "logits": [[V floats] per position]}
 * (other keys, such as MaxText's "prompt", are ignored). gemtrain writes its
 * own logits in the same format. */
#ifndef GEMTRAIN_LOGITCHECK_H
#define GEMTRAIN_LOGITCHECK_H

#include <stdint.h>
#include <stdio.h>

#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_golden_seq {
  int n_tokens;
  int32_t *tokens;
  int64_t vocab;  /* entries per logits row */
  float *logits;  /* [n_tokens, vocab] */
} gt_golden_seq;

typedef struct gt_golden {
  int n;
  gt_golden_seq *seqs;
} gt_golden;

/* Reads every line (blank lines are skipped), streaming: memory is the
 * output arrays plus a 64 KiB buffer, whatever the length of a line. Each
 * line needs "tokens" (integers >= 0) and "logits" with one row per token,
 * all rows of one length, in either order; other keys are checked as JSON
 * and skipped. Numbers are JSON numbers read with strtod and rounded to
 * float, plus NaN, Infinity and -Infinity (Python's json writes them); a
 * logit must be finite as a float32, or the line and position are named. A
 * newline ends the line. A violation (bad JSON, anything after the object,
 * a repeated key) is refused naming the line, and for syntax the column,
 * what was expected and what was found. */
gt_rc gt_golden_read(const char *path, gt_golden *g, gt_err *err);
void gt_golden_free(gt_golden *g);
/* One JSONL line; floats as %.9g, which reads back as the same float32. */
int gt_golden_write_line(FILE *f, const int32_t *tokens, int n_tokens, const float *logits, int64_t vocab);

#define GT_LOGIT_TOPK 10

typedef struct gt_logit_cmp {
  int n_pos;        /* positions compared */
  int64_t vocab;    /* entries compared: the vocabulary */
  double *kl;       /* [n_pos] KL(P_golden || Q_model) per token, nats (caller frees with gt_logit_cmp_free) */
  double kl_mean, kl_max;
  int kl_argmax;
  double max_abs_diff;  /* max |model - golden| over every compared logit */
  int abs_pos;          /* where it is */
  int64_t abs_index;
  /* top-k of the last position (MaxText's table): ids by descending logit,
   * ties to the lower id */
  int k;
  int64_t top_model[GT_LOGIT_TOPK], top_golden[GT_LOGIT_TOPK];
  int overlap;            /* |model ∩ golden| */
  double jaccard;         /* |∩| / |∪| */
  double rank_agreement;  /* % of ranks holding the same id */
} gt_logit_cmp;

/* Compares model logits [n_pos, vocab_model] with golden [n_pos,
 * vocab_golden], in float64. The golden rows must hold one logit per
 * vocabulary entry (vocab_golden == vocab_model: comparing a common prefix
 * could pass a file made for another model) and be finite; either is
 * refused with GT_ERR_FORMAT. */
gt_rc gt_logit_compare(const float *model, int64_t vocab_model, const float *golden, int64_t vocab_golden, int n_pos,
                       gt_logit_cmp *out, gt_err *err);
void gt_logit_cmp_free(gt_logit_cmp *c);

/* The k largest of x[0..n) by value, ties to the lower index. */
void gt_logit_topk(const float *x, int64_t n, int k, int64_t *idx);

#ifdef __cplusplus
}
#endif
#endif
