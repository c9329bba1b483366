/* acc, acc_norm and acc_bytes as lm-evaluation-harness computes them
 * (api/task.py, multiple_choice; api/metrics.py, mean_stderr). */
#include <math.h>
#include <string.h>

#include "eval/eval.h"

/* mean of 0/1 scores and sample_stddev / sqrt(n) */
static void gt__mean_stderr(int64_t hits, int64_t n, double *mean, double *stderr_out) {
  double p = n ? (double)hits / (double)n : NAN;
  *mean = p;
  /* sum (x - p)^2 over 0/1 values is hits (1-p)^2 + (n-hits) p^2 */
  double ss = (double)hits * (1 - p) * (1 - p) + (double)(n - hits) * p * p;
  *stderr_out = n > 1 ? sqrt(ss / (double)(n - 1)) / sqrt((double)n) : NAN;
}

void gt_eval_metrics(const gt_eval_task *t, const double *ll, gt_eval_result *r) {
  int64_t a = 0, an = 0, ab = 0, off = 0;
  for (int i = 0; i < t->n; i++) {
    const gt_eval_example *ex = &t->ex[i];
    /* numpy's argmax: the first of equal maxima */
    int k = 0, kn = 0, kb = 0;
    double bn = 0, bb = 0;
    for (int c = 0; c < ex->n_choices; c++) {
      double x = ll[off + c], xn = x / (double)gt_eval_chars(ex->choices[c]), xb = x / (double)strlen(ex->choices[c]);
      if (c == 0 || x > ll[off + k]) k = c;
      if (c == 0 || xn > bn) kn = c, bn = xn;
      if (c == 0 || xb > bb) kb = c, bb = xb;
    }
    a += k == ex->label;
    an += kn == ex->label;
    ab += kb == ex->label;
    off += ex->n_choices;
  }
  r->n = t->n;
  gt__mean_stderr(a, t->n, &r->acc, &r->acc_stderr);
  gt__mean_stderr(an, t->n, &r->acc_norm, &r->acc_norm_stderr);
  gt__mean_stderr(ab, t->n, &r->acc_bytes, &r->acc_bytes_stderr);
}
