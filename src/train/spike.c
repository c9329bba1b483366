#include "train/spike.h"

#include <math.h>
#include <string.h>

void gt_spike_init(gt_spike *g, int64_t interval, double factor) {
  memset(g, 0, sizeof *g);
  if (interval < 1) interval = 1;
  if (interval > GT_SPIKE_MAX_INTERVAL) interval = GT_SPIKE_MAX_INTERVAL;
  g->interval = interval;
  g->factor = factor;
}

int64_t gt_spike_held(const gt_spike *g) { return g->count < g->interval ? g->count : g->interval; }

/* slot of the i-th held value, oldest first */
static int64_t gt__slot(const gt_spike *g, int64_t i) { return (g->count - gt_spike_held(g) + i) % g->interval; }

void gt_spike_stats(const gt_spike *g, int which, double *mean, double *std) {
  const float *v = which ? g->norm : g->loss;
  int64_t n = gt_spike_held(g);
  double sum = 0.0, sq = 0.0;
  for (int64_t i = 0; i < n; i++) sum += v[gt__slot(g, i)];
  double m = sum / (double)(n > 1 ? n : 1);
  for (int64_t i = 0; i < n; i++) {
    double d = v[gt__slot(g, i)] - m;
    sq += d * d;
  }
  /* Bessel's correction, as MaxText (torch.std): n - 1, at least 1 */
  *mean = m;
  *std = sqrt(sq / (double)(n > 2 ? n - 1 : 1));
}

int gt_spike_check(const gt_spike *g, double loss, double norm) {
  /* MaxText: enforced once the window has at least half the interval (at
   * least 2) counting this step */
  int64_t min_history = g->interval / 2 > 2 ? g->interval / 2 : 2;
  if (g->count + 1 < min_history) return 0;
  /* the values as the window will hold them */
  const float x[2] = {(float)loss, (float)norm};
  for (int w = 0; w < 2; w++) {
    double mean, std;
    gt_spike_stats(g, w, &mean, &std);
    if (!((double)x[w] - mean <= g->factor * std)) return 1;
  }
  return 0;
}

void gt_spike_push(gt_spike *g, double loss, double norm) {
  int64_t k = g->count % g->interval;
  g->loss[k] = (float)loss;
  g->norm[k] = (float)norm;
  g->count++;
}

int gt_spike_decide(gt_spike *g, double loss, double norm) {
  int spike = gt_spike_check(g, loss, norm);
  gt_spike_push(g, loss, norm);
  return spike;
}

void gt_spike_save(const gt_spike *g, gt_ckpt_spike *out) {
  memset(out, 0, sizeof *out);
  out->count = g->count;
  out->skipped_steps = g->skipped_steps;
  out->n = (int)gt_spike_held(g);
  for (int i = 0; i < out->n; i++) {
    out->loss[i] = g->loss[gt__slot(g, i)];
    out->grad_norm[i] = g->norm[gt__slot(g, i)];
  }
}

void gt_spike_load(gt_spike *g, const gt_ckpt_spike *in) {
  int64_t interval = g->interval;
  double factor = g->factor;
  gt_spike_init(g, interval, factor);
  int n = in->n < 0 ? 0 : in->n > GT_CKPT_SPIKE_MAX ? GT_CKPT_SPIKE_MAX : in->n;
  int keep = n < g->interval ? n : (int)g->interval;
  int64_t count = in->count < n ? n : in->count; /* a record holds at most count values */
  /* a window wider than the record holds only its `keep` values and fills
   * up from there, as a new run's does (counting the writer's steps would
   * hold empty slots as zeros: gt_spike_held is min(count, interval)) */
  if (keep < g->interval) count = keep;
  /* the newest `keep` values, at the slots they had in the writer's run */
  g->count = count - keep;
  for (int i = n - keep; i < n; i++) gt_spike_push(g, in->loss[i], in->grad_norm[i]);
  g->skipped_steps = in->skipped_steps;
}
