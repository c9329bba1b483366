/* The attention backward's parts (gt__bwd_split in kernels/attention.c, a
 * static function: the kernel's source is included here). The split decides
 * how evenly 2 and 3 threads finish the backward of a small B * K, but not
 * its bits across thread counts (test_attention's test_split_threads checks
 * those), so this checks it against its own cost model, in integers:
 * - the cuts are well formed (0 < ks[1] < ... < ks[np] = nkt), the part
 *   count follows the shape rule, the run order is a permutation, longest
 *   part first;
 * - the searched split scores as well as the best of every contiguous split
 *   (exhaustive here) where the kernel's search is exhaustive (up to 48 key
 *   tiles), and within 1% of it beyond, where it searches a grid and refines;
 * - for gemma3-270m at B = 1 (8 global key tiles, one kv head) the modeled
 *   2-thread time is within 3% of half the work, and the 3-thread time within
 *   15% of a third. The cut at the first tile whose preceding work reached a
 *   quarter (15, 6, 9 and 6 tile pairs) gives
 *   12% and 31% under the longest-first schedule, 20% under a static one.
 * No timing: the model's balance, not the machine's. */
#include "kernels/isa.h" /* its kernels as the library's portable copy names them */
#include "kernels/attention.c"

#include <check.h>

#include "gt_testutil.h"

typedef struct split_case {
  int B, K, T, W, bf;
} split_case;

static const split_case scases[] = {
    {1, 1, 512, 0, 0},     {1, 1, 512, 0, 1},    {1, 1, 256, 64, 0},   {1, 1, 256, 0, 1},
    {1, 1, 512, 128, 0},   {1, 1, 1024, 128, 1}, {2, 1, 512, 0, 0},    {1, 2, 512, 0, 1},
    {3, 1, 517, 100, 0},   {5, 1, 450, 0, 0},    {7, 1, 300, 0, 1},    {1, 1, 1024, 512, 0},
    {1, 1, 517, 0, 0},     {1, 1, 200, 1, 0},    {1, 1, 3072, 0, 0},   {1, 1, 3100, 0, 0},
    {1, 1, 4096, 0, 1},    {1, 1, 6000, 1000, 0}, {2, 1, 8192, 0, 0},  {1, 1, 130, 0, 0},
    {1, 1, 64, 0, 0},      {4, 1, 512, 0, 0},    {8, 1, 512, 0, 0},    {1, 3, 700, 300, 1},
    {1, 1, 8000, 700, 1},  {3, 1, 5000, 0, 0},   {1, 1, 12000, 0, 0},  {1, 1, 7000, 2000, 0},
};

/* The part count's rule, restated: double while B * K * np < 4, or odd and
 * below 8, as long as np <= 4 and every part can keep two tiles. */
static int expect_np(int64_t n, int nkt) {
  int np = 1;
  while ((n * np < 4 || (n * np % 2 && n * np < 8)) && np * 2 <= 4 && np * 2 <= nkt) np *= 2;
  return np;
}

static int64_t *cum_costs(const split_case *c, int nkt) {
  int64_t *cum = malloc(((size_t)nkt + 1) * sizeof(int64_t));
  ck_assert_ptr_nonnull(cum);
  cum[0] = 0;
  for (int j = 0; j < nkt; j++) cum[j + 1] = cum[j] + gt__bwd_tcost(c->T, c->W, c->bf, j);
  return cum;
}

/* The least score of any contiguous split into np nonempty parts */
static int64_t best_score(const int64_t *cum, int nkt, int np, int64_t n) {
  int ks[GT__BWD_MAXP + 1] = {0};
  int64_t best = INT64_MAX;
  ks[np] = nkt;
  for (ks[1] = 1; ks[1] < nkt; ks[1]++) {
    if (np == 2) {
      int64_t s = gt__bwd_score(cum, ks, np, n, nkt);
      best = s < best ? s : best;
      continue;
    }
    for (ks[2] = ks[1] + 1; ks[2] < nkt; ks[2]++)
      for (ks[3] = ks[2] + 1; ks[3] < nkt; ks[3]++) {
        int64_t s = gt__bwd_score(cum, ks, np, n, nkt);
        best = s < best ? s : best;
      }
  }
  return best;
}

START_TEST(test_split_valid_and_best) {
  const split_case *c = &scases[_i];
  const int nkt = (c->T + GT__BK - 1) / GT__BK;
  const int64_t n = (int64_t)c->B * c->K;
  int ks[GT__BWD_MAXP + 1], order[GT__BWD_MAXP];
  const int np = gt__bwd_split(c->B, c->K, c->T, c->W, c->bf, ks, order);
  ck_assert_int_eq(np, expect_np(n, nkt));
  ck_assert_int_eq(ks[0], 0);
  ck_assert_int_eq(ks[np], nkt);
  for (int p = 0; p < np; p++) ck_assert_msg(ks[p] < ks[p + 1], "case %d: part %d is empty", _i, p);
  int64_t *cum = cum_costs(c, nkt);
  int seen = 0;
  for (int r = 0; r < np; r++) {
    ck_assert(order[r] >= 0 && order[r] < np && !(seen >> order[r] & 1));
    seen |= 1 << order[r];
    if (r > 0) {
      const int64_t prev = cum[ks[order[r - 1] + 1]] - cum[ks[order[r - 1]]];
      const int64_t cur = cum[ks[order[r] + 1]] - cum[ks[order[r]]];
      ck_assert_msg(prev >= cur, "case %d: part %d runs before a longer one", _i, order[r - 1]);
    }
  }
  if (np > 1) {
    const int64_t s = gt__bwd_score(cum, ks, np, n, nkt), b = best_score(cum, nkt, np, n);
    if (nkt <= 48)
      ck_assert_msg(s == b, "case %d: score %lld, best split %lld", _i, (long long)s, (long long)b);
    else
      ck_assert_msg(s <= b + b / 100, "case %d: score %lld, best split %lld", _i, (long long)s, (long long)b);
  }
  free(cum);
}
END_TEST

/* The modeled time of the longest-first schedule of the parts of ks on nt
 * threads, relative to the ideal total / nt */
static double rel_time(const split_case *c, const int *ks, int np, int nt) {
  const int nkt = (c->T + GT__BK - 1) / GT__BK;
  int64_t *cum = cum_costs(c, nkt), pc[GT__BWD_MAXP];
  for (int p = 0; p < np; p++) pc[p] = cum[ks[p + 1]] - cum[ks[p]];
  const int64_t n = (int64_t)c->B * c->K;
  const double r = (double)gt__bwd_sched(pc, np, n, nt) * nt / ((double)cum[nkt] * n);
  free(cum);
  return r;
}

START_TEST(test_split_270m_balance) {
  for (int bf = 0; bf < 2; bf++) {
    const split_case c = {1, 1, 512, 0, bf};
    int ks[GT__BWD_MAXP + 1], order[GT__BWD_MAXP];
    ck_assert_int_eq(gt__bwd_split(c.B, c.K, c.T, c.W, c.bf, ks, order), 4);
    const double r2 = rel_time(&c, ks, 4, 2), r3 = rel_time(&c, ks, 4, 3);
    ck_assert_msg(r2 <= 1.03 && r3 <= 1.15, "bf16 %d: 2 threads %.3f, 3 threads %.3f of ideal", bf, r2, r3);
    /* the old split (first tile at a quarter of the pairs) for contrast */
    const int old[] = {0, 2, 3, 5, 8};
    ck_assert(rel_time(&c, old, 4, 2) > 1.10);
  }
}
END_TEST

/* The schedule model itself: parts 8, 7, 6, 5 longest first go 8 | 7, then
 * 6 to the 7 and 5 to the 8 (13 : 13) on 2 threads; 8 | 7 | 6, then 5 to the
 * 6 (11) on 3. Two copies of parts 3, 1 on 3 threads: 3 | 3 | 1, then 1 to
 * the thread with 1 (ties to the lower thread): 3. */
START_TEST(test_sched_model) {
  const int64_t a[] = {5, 8, 6, 7}, b[] = {1, 3};
  ck_assert_int_eq(gt__bwd_sched(a, 4, 1, 2), 13);
  ck_assert_int_eq(gt__bwd_sched(a, 4, 1, 3), 11);
  ck_assert_int_eq(gt__bwd_sched(b, 2, 2, 3), 3);
  ck_assert_int_eq(gt__bwd_sched(b, 2, 2, 2), 4);
  int order[4];
  gt__bwd_order(a, 4, order);
  ck_assert(order[0] == 1 && order[1] == 3 && order[2] == 2 && order[3] == 0);
}
END_TEST

static Suite *split_suite(void) {
  Suite *s = suite_create("attention_split");
  TCase *tc = gt_test_tcase(s, "split");
  tcase_add_loop_test(tc, test_split_valid_and_best, 0, (int)(sizeof scases / sizeof scases[0]));
  tcase_add_test(tc, test_split_270m_balance);
  tcase_add_test(tc, test_sched_model);
  return s;
}

int main(void) {
  return gt_test_run_suite(split_suite(), 0);
}
