/* The epoch order (data.h, "Order"): the parts in a seeded random order,
 * the rows of each in a seeded random order. A permutation is a Feistel
 * network over [0, 4^k) (the smallest power of four >= n) keyed from
 * (data_shuffle_seed, epoch, part), walked until it lands below n: a
 * bijection of [0, n) that costs no memory, so the order of a corpus of any
 * size is a function of the seed and the epoch alone. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

static uint64_t gt__mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void gt__perm_init(gt__perm *p, uint64_t n, uint64_t seed, uint64_t a, uint64_t b) {
  int bits = 2;
  while (bits < 62 && ((uint64_t)1 << bits) < n) bits += 2;
  p->n = n;
  p->half = bits / 2;
  p->mask = ((uint64_t)1 << p->half) - 1;
  uint64_t st = gt__mix(seed + 0x243F6A8885A308D3ull) ^ gt__mix(a + 0x13198A2E03707344ull) ^
                gt__mix(b + 0xA4093822299F31D0ull);
  for (int i = 0; i < 6; i++) p->key[i] = gt_splitmix64(&st);
}

uint64_t gt__perm_at(const gt__perm *p, uint64_t i) {
  if (p->n <= 1) return 0;
  uint64_t x = i;
  do { /* a bijection of [0, 4^k); inputs below n come back below n after a few steps */
    uint64_t l = x >> p->half, r = x & p->mask;
    for (int k = 0; k < 6; k++) {
      uint64_t f = gt__mix(r ^ p->key[k]) & p->mask;
      uint64_t t = r;
      r = l ^ f;
      l = t;
    }
    x = l << p->half | r;
  } while (x >= p->n);
  return x;
}

/* Domain tags keep the part order and each part's row order independent. */
enum { GT__TAG_PARTS = 1, GT__TAG_ROWS = 2 };

static void gt__order_epoch(gt__data_src *src, uint64_t seed, int shuffle, int64_t e) {
  if (src->ord_epoch == e && src->ord_part) return;
  gt__perm pp;
  gt__perm_init(&pp, (uint64_t)src->n_parts, seed, GT__TAG_PARTS, (uint64_t)e);
  int64_t row = 0;
  for (int s = 0; s < src->n_parts; s++) {
    int p = shuffle ? (int)gt__perm_at(&pp, (uint64_t)s) : s;
    src->ord_part[s] = p;
    src->ord_row0[s] = row;
    row += src->parts[p].n_rows;
  }
  src->ord_row0[src->n_parts] = row;
  src->ord_epoch = e;
}

gt_rc gt__order_init(gt__data_src *src, gt_err *err) {
  src->ord_part = malloc(sizeof(int) * (size_t)(src->n_parts + 1));
  src->ord_row0 = malloc(sizeof(int64_t) * (size_t)(src->n_parts + 1));
  src->ord_epoch = -1;
  if (!src->ord_part || !src->ord_row0) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for the epoch order");
  return GT_OK;
}

int64_t gt__order_row(gt__data_src *src, uint64_t seed, int shuffle, int64_t e, int64_t c) {
  gt__order_epoch(src, seed, shuffle, e);
  int lo = 0, hi = src->n_parts - 1;
  while (lo < hi) { /* the last visited part whose first row is <= c */
    int mid = (lo + hi + 1) / 2;
    if (src->ord_row0[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  int p = src->ord_part[lo];
  int64_t j = c - src->ord_row0[lo];
  if (shuffle) {
    gt__perm pr;
    gt__perm_init(&pr, (uint64_t)src->parts[p].n_rows, seed, GT__TAG_ROWS + 4 * (uint64_t)p, (uint64_t)e);
    j = (int64_t)gt__perm_at(&pr, (uint64_t)j);
  }
  return src->part_row0[p] + j;
}
