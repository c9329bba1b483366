/* The pairs of a preference batch (pref_pairs.h): each row's runs of one
 * segment id, matched between a row pair's two rows. */
#include "model/pref_pairs.h"

/* The next run of segment id != 0 from column *t of a row: [*a, *b), its id. */
static int gt__next_run(const int32_t *seg, int T, int *t, int *a, int *b) {
  while (*t < T && seg[*t] == 0) (*t)++;
  if (*t >= T) return 0;
  int s = seg[*t];
  *a = *t;
  while (*t < T && seg[*t] == s) (*t)++;
  *b = *t;
  return s;
}

int64_t gt_pref_pairs(const gt_batch *b, int row0, int nrows, gt_pref_pair *out, int64_t cap) {
  int64_t n = 0;
  if (!b->segments) return 0;
  const int T = b->T;
  for (int r = row0; r + 1 < row0 + nrows && r + 1 < b->B; r += 2) {
    const int32_t *sc = b->segments + (int64_t)r * T, *sr = sc + T;
    int tc = 0, tr = 0;
    for (;;) {
      gt_pref_pair p = {r, 0, 0, 0, 0, 0};
      int s1 = gt__next_run(sc, T, &tc, &p.c0, &p.c1), s2 = gt__next_run(sr, T, &tr, &p.r0, &p.r1);
      if (s1 != s2) return -1 - (int64_t)r;
      if (!s1) break;
      p.seg = s1;
      if (n < cap) out[n] = p;
      n++;
    }
  }
  return n;
}
