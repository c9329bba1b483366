#include "train/goodput.h"

#include <stdio.h>
#include <string.h>

void gt_goodput_start(gt_goodput *g, double now) {
  memset(g, 0, sizeof *g);
  g->t0 = g->last = now;
}

void gt_goodput_mark(gt_goodput *g, gt_goodput_bucket b, double now) {
  if (now < g->last) now = g->last; /* a monotonic clock never does this; stay additive anyway */
  g->seconds[b] += now - g->last;
  g->last = now;
}

double gt_goodput_wall(const gt_goodput *g) { return g->last - g->t0; }

const char *gt_goodput_name(gt_goodput_bucket b) {
  static const char *const names[GT_GP_N] = {"step",
                                             "training_prep",
                                             "unproductive_checkpoint_restore_time",
                                             "data_loading_sync",
                                             "eval",
                                             "unproductive_checkpoint_save_time",
                                             "unapplied_steps",
                                             "other"};
  return (unsigned)b < GT_GP_N ? names[b] : "?";
}

void gt_goodput_format(const gt_goodput *g, char *buf, size_t n) {
  double wall = gt_goodput_wall(g), inv = wall > 0 ? 100.0 / wall : 0.0;
  int w = snprintf(buf, n, "goodput: %.1f%% of %.1f s wall time in applied training steps; badput:",
                   g->seconds[GT_GP_STEP] * inv, wall);
  for (int b = 1; b < GT_GP_N && w >= 0 && (size_t)w < n; b++)
    w += snprintf(buf + w, n - (size_t)w, "%s %s %.1f%%", b > 1 ? "," : "", gt_goodput_name((gt_goodput_bucket)b),
                  g->seconds[b] * inv);
}
