/* The loss of every held-out row of a data source, each row once. */
#include <math.h>
#include <string.h>

#include "base/prof.h"
#include "eval/eval.h"

gt_rc gt_eval_perplexity(gt_fsdp *f, gt_data *d, int row0, int nrows, gt_eval_ppl *out, gt_err *err) {
  double t0 = gt_prof_now();
  memset(out, 0, sizeof *out);
  out->loss = out->perplexity = NAN;
  if (!gt_data_has_eval(d))
    return gt_err_set(err, GT_ERR_CONFIG, "eval: the data source has no held-out rows (dataset_type synthetic, or "
                                          "eval_split_fraction holds none out)");
  gt_data_set_rows(d, row0, nrows);
  gt_data_eval_reset(d);
  int64_t rows = d->n_eval_rows, nb = (rows + d->B - 1) / d->B;
  gt_loss_stats st = {0};
  for (int64_t i = 0; i < nb; i++) {
    gt_batch b;
    gt_rc rc = gt_data_read_eval(d, &b, err);
    if (rc) return rc;
    /* the last batch wraps around to the first rows: out of the loss */
    for (int64_t r = rows - i * d->B; r < d->B; r++)
      for (int64_t j = 0; j < d->T; j++) d->tg[r * d->T + j] = -1;
    if ((rc = gt_fsdp_eval(f, &b, 1, &st, err))) return rc;
  }
  out->rows = rows;
  out->batches = nb;
  out->tokens = st.total_weights;
  if (st.total_weights > 0) {
    out->loss = st.xent_sum / (double)st.total_weights;
    out->perplexity = exp(out->loss);
  }
  out->seconds = gt_prof_now() - t0;
  return GT_OK;
}
