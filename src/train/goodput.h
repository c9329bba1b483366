/* Goodput: where a run's wall time went. The loop hands the time since its
 * last mark to one bucket at each mark (a lap timer), so the buckets always
 * add up to the wall time measured from the run's start to the last mark.
 * The bucket names are those of MaxText's goodput recorder
 * (ml-goodput-measurement's BadputType) where one fits; eval and unapplied
 * steps are gemtrain's own. */
#ifndef GT_TRAIN_GOODPUT_H
#define GT_TRAIN_GOODPUT_H

#include <stddef.h>

typedef enum gt_goodput_bucket {
  GT_GP_STEP,          /* applied training steps: the goodput */
  GT_GP_PREP,          /* training_prep: config, plan, run directory, model, data, first parameters */
  GT_GP_RESTORE,       /* unproductive_checkpoint_restore_time: resuming from a checkpoint */
  GT_GP_DATA,          /* data_loading_sync: reading the step's batches */
  GT_GP_EVAL,          /* eval: held-out loss and eval tasks */
  GT_GP_CKPT,          /* unproductive_checkpoint_save_time: the loop blocked by a checkpoint */
  GT_GP_SKIPPED,       /* unapplied_steps: steps computed but not applied (spike, non-finite, no tokens) */
  GT_GP_OTHER,         /* other: reporting, profiler, the closing plot */
  GT_GP_N
} gt_goodput_bucket;

typedef struct gt_goodput {
  double t0, last;          /* the run's start and the last mark (gt_prof_now seconds) */
  double seconds[GT_GP_N];
} gt_goodput;

void gt_goodput_start(gt_goodput *g, double now);
/* Hands now - last to bucket b; now becomes the last mark. */
void gt_goodput_mark(gt_goodput *g, gt_goodput_bucket b, double now);
/* Wall time from the start to the last mark (the sum of the buckets). */
double gt_goodput_wall(const gt_goodput *g);
/* The bucket's name in metrics.jsonl and the closing line. */
const char *gt_goodput_name(gt_goodput_bucket b);
/* "goodput: 81.2% of 12.3 s in applied steps; badput: training_prep 5.0%,
 * ..." (every bucket, shares of the wall time to 0.1%). */
void gt_goodput_format(const gt_goodput *g, char *buf, size_t n);

#endif
