/* Rows: what one batch row is cut from (data.h, "Sequences" and "Rows"),
 * and a row's tokens into inputs, targets, positions and segment ids. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

static gt_rc gt__add_part(gt__data_src *src, const gt__part *p, gt_err *err) {
  gt__part *v = realloc(src->parts, sizeof *v * (size_t)(src->n_parts + 1));
  int64_t *r0 = realloc(src->part_row0, sizeof *r0 * (size_t)(src->n_parts + 2));
  if (v) src->parts = v;
  if (r0) src->part_row0 = r0;
  if (!v || !r0) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for the row index");
  src->parts[src->n_parts] = *p;
  src->part_row0[src->n_parts] = src->n_rows;
  src->n_parts++;
  src->n_rows += p->n_rows;
  src->part_row0[src->n_parts] = src->n_rows;
  src->n_tokens += p->hi - p->lo;
  return GT_OK;
}

gt_rc gt__src_add_windows(gt__data_src *src, int64_t lo, int64_t hi, int T, gt_err *err) {
  /* tokens past the last whole window of the range are not read */
  gt__part p = {lo, hi, (hi - lo) / (T + 1), NULL, NULL};
  if (p.n_rows == 0) {
    src->n_tokens += hi - lo;
    return GT_OK;
  }
  return gt__add_part(src, &p, err);
}

/* Records rec_lo .. rec_hi - 1 in file order: each alone in a row, or
 * (packing) each joining the row before while the row stays <= T + 1
 * tokens. A record longer than a row (allowed only by overlong_records =
 * truncate) fills a row with its first T + 1 tokens. */
static int64_t gt__pack(const int64_t *rec, int64_t lo, int64_t hi, int T, int packing, int64_t *start,
                        int32_t *len) {
  int64_t rows = 0, cur = -1, cur_len = 0, full = T + 1;
  for (int64_t r = lo; r < hi; r++) {
    int64_t L = rec[r + 1] - rec[r];
    if (L > full) L = full;
    if (cur >= 0 && packing && cur_len + L <= full) {
      cur_len += L;
    } else {
      if (cur >= 0) {
        if (start) start[rows] = cur, len[rows] = (int32_t)cur_len;
        rows++;
      }
      cur = rec[r];
      cur_len = L;
    }
  }
  if (cur >= 0) {
    if (start) start[rows] = cur, len[rows] = (int32_t)cur_len;
    rows++;
  }
  return rows;
}

gt_rc gt__src_add_records(gt__data_src *src, int64_t rec_lo, int64_t rec_hi, int T, int packing, gt_err *err) {
  const int64_t *rec = src->store->rec;
  gt__part p = {rec[rec_lo], rec[rec_hi], gt__pack(rec, rec_lo, rec_hi, T, packing, NULL, NULL), NULL, NULL};
  if (p.n_rows == 0) return GT_OK;
  /* a record longer than a row is read as its first T + 1 tokens: the rest
   * is no part of the data these rows train on */
  int64_t cut = 0, n_cut = 0;
  for (int64_t r = rec_lo; r < rec_hi; r++)
    if (rec[r + 1] - rec[r] > T + 1) n_cut++, cut += rec[r + 1] - rec[r] - (T + 1);
  p.start = gt_mem_alloc_uninit(src->mem, GT_MEM_DATA, (size_t)p.n_rows * sizeof(int64_t));
  p.len = gt_mem_alloc_uninit(src->mem, GT_MEM_DATA, (size_t)p.n_rows * sizeof(int32_t));
  gt_rc rc = GT_OK;
  if (!p.start || !p.len) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld rows", (long long)p.n_rows);
  } else {
    gt__pack(rec, rec_lo, rec_hi, T, packing, p.start, p.len);
    rc = gt__add_part(src, &p, err);
  }
  if (!rc) src->n_tokens -= cut, src->n_truncated += n_cut, src->n_dropped += cut;
  if (rc) {
    gt_mem_free(src->mem, p.start);
    gt_mem_free(src->mem, p.len);
  }
  return rc;
}

void gt__src_free(gt__data_src *src) {
  for (int i = 0; i < src->n_parts; i++) {
    gt_mem_free(src->mem, src->parts[i].start);
    gt_mem_free(src->mem, src->parts[i].len);
  }
  free(src->parts);
  free(src->part_row0);
  free(src->ord_part);
  free(src->ord_row0);
  memset(src, 0, sizeof *src);
}

/* The record of a store that starts at token offset off (a record row's
 * first token is always one). */
static int64_t gt__rec_at(const gt__store *st, int64_t off) {
  int64_t lo = 0, hi = st->n_rec - 1;
  while (lo < hi) { /* the last record whose start is <= off */
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (st->rec[mid] <= off)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

int gt__src_row(const gt__data_src *src, int64_t k, int64_t *off, int64_t *n, int T, int32_t *lens) {
  int lo = 0, hi = src->n_parts - 1;
  while (lo < hi) { /* the last part whose first row is <= k */
    int mid = (lo + hi + 1) / 2;
    if (src->part_row0[mid] <= k)
      lo = mid;
    else
      hi = mid - 1;
  }
  const gt__part *p = &src->parts[lo];
  int64_t j = k - src->part_row0[lo];
  if (!p->start) {
    *off = p->lo + j * (T + 1);
    *n = T + 1;
    return 0;
  }
  *off = p->start[j];
  *n = p->len[j];
  if (!lens) return 0;
  /* the records laid end to end in the row (the last one cut at T + 1
   * tokens when overlong_records=truncate made it longer) */
  const gt__store *st = src->store;
  int m = 0;
  for (int64_t r = gt__rec_at(st, *off), left = *n; left > 0; r++) {
    int64_t L = st->rec[r + 1] - st->rec[r];
    lens[m++] = (int32_t)(L < left ? L : left);
    left -= L;
  }
  return m;
}

void gt__fill_row(const uint32_t *s, int64_t n, int T, const int32_t *lens, int n_lens, int32_t bos, int32_t eos,
                  int32_t *in, int32_t *tg, int32_t *pos, int32_t *seg) {
  int32_t segment = 1, p = 0;
  int64_t real = n - 1 < T ? n - 1 : T;
  int64_t end = n_lens ? lens[0] : 0; /* where the current record ends */
  for (int64_t i = 0, j = 0; i < real; i++) {
    int32_t a = (int32_t)(s[i] & ~GT__NOLOSS), b = (int32_t)(s[i + 1] & ~GT__NOLOSS);
    /* the next token belongs to another document, so it is nobody's
     * target here. Records say where they start; in a stream of text a
     * document ends after <eos> and another starts at <bos> */
    int boundary;
    if (n_lens) {
      boundary = i + 1 == end;
      if (boundary && ++j < n_lens) end += lens[j];
    } else {
      boundary = a == eos || b == bos;
    }
    in[i] = a;
    pos[i] = p;
    seg[i] = segment;
    tg[i] = boundary || (s[i + 1] & GT__NOLOSS) ? -1 : b;
    if (boundary) {
      segment++;
      p = 0;
    } else {
      p++;
    }
  }
  if (real < T) gt__blank_row(T - (int)real, in + real, tg + real, pos + real, seg + real);
}

void gt__blank_row(int T, int32_t *in, int32_t *tg, int32_t *pos, int32_t *seg) {
  for (int i = 0; i < T; i++) {
    in[i] = GT_TOK_PAD;
    tg[i] = -1;
    pos[i] = 0;
    if (seg) seg[i] = 0;
  }
}
