/* Preference pairs in a batch (use_dpo; the layout is data/data.h's
 * "Preference pairs"): row 2i holds chosen sequences and row 2i + 1 the
 * rejected sequences of the same pairs, a pair under the same segment id
 * in both rows. The loss side lists the pairs of its rows here and sums
 * each sequence's token log-probabilities over its columns whose target
 * is >= 0 (the response tokens). */
#ifndef GEMTRAIN_PREF_PAIRS_H
#define GEMTRAIN_PREF_PAIRS_H

#include <stdint.h>

#include "model/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_pref_pair {
  int row;    /* the chosen sequence's row (even); the rejected one is in row + 1 */
  int seg;    /* the pair's segment id in both rows (1, 2, ...) */
  int c0, c1; /* columns [c0, c1) of the chosen sequence in row */
  int r0, r1; /* columns [r0, r1) of the rejected sequence in row + 1 */
} gt_pref_pair;

/* The most pairs a row pair of T columns can hold: every sequence has at
 * least two tokens (<bos> and a response token), and a row at most T + 1. */
static inline int gt_pref_pairs_per_row_pair(int T) { return (T + 1) / 2; }

/* The pairs of rows [row0, row0 + nrows) of b (row0 and nrows even), in
 * row order then segment order, into out[0 .. cap) (the count is returned
 * even when larger than cap). A row pair whose two rows do not hold the
 * same segment ids, in the same order (a batch not laid out as pairs),
 * returns -1 - (its chosen row); rows of padding (segment 0) hold none. */
int64_t gt_pref_pairs(const gt_batch *b, int row0, int nrows, gt_pref_pair *out, int64_t cap);

#ifdef __cplusplus
}
#endif
#endif
