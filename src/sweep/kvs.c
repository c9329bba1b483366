/* Sweep key=value lists: one entry per key, the last layer's value in the
 * first layer's position; and the text a number is written as. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sweep/sweep.h"

/* The shortest text that reads back as the same double, so a grid value
 * written 0.1 shows as 0.1 (not 0.10000000000000001) in keys, logs and the
 * table, and compares equal on restart. */
void gt_sweep_num_text(double v, char *buf, size_t n) {
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, n, "%lld", (long long)v);
    return;
  }
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return;
  }
}

size_t gt_sweep_key_len(const char *kv) {
  const char *eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

static int gt__kvs_find(const gt_sweep_kvs *l, const char *key, size_t klen) {
  for (int i = 0; i < l->n; i++)
    if (gt_sweep_key_len(l->kv[i]) == klen && !strncmp(l->kv[i], key, klen)) return i;
  return -1;
}

gt_rc gt_sweep_kvs_set(gt_sweep_kvs *l, const char *kv, gt_err *err) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) return gt_err_set(err, GT_ERR_CONFIG, "sweep: '%s' is not key=value", kv);
  char *copy = strdup(kv);
  if (!copy) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  int i = gt__kvs_find(l, kv, (size_t)(eq - kv));
  if (i >= 0) {
    free(l->kv[i]);
    l->kv[i] = copy;
    return GT_OK;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    char **p = realloc(l->kv, sizeof(char *) * (size_t)cap);
    if (!p) {
      free(copy);
      return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
    }
    l->kv = p, l->cap = cap;
  }
  l->kv[l->n++] = copy;
  return GT_OK;
}

const char *gt_sweep_kvs_get(const gt_sweep_kvs *l, const char *key) {
  int i = gt__kvs_find(l, key, strlen(key));
  return i < 0 ? NULL : strchr(l->kv[i], '=') + 1;
}

int gt_sweep_kvs_equal(const gt_sweep_kvs *a, const gt_sweep_kvs *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    int j = gt__kvs_find(b, a->kv[i], gt_sweep_key_len(a->kv[i]));
    if (j < 0 || strcmp(a->kv[i], b->kv[j])) return 0;
  }
  return 1;
}

void gt_sweep_kvs_free(gt_sweep_kvs *l) {
  for (int i = 0; i < l->n; i++) free(l->kv[i]);
  free(l->kv);
  memset(l, 0, sizeof *l);
}

void gt_sweep_kvs_remove(gt_sweep_kvs *l, const char *key) {
  int i = gt__kvs_find(l, key, strlen(key));
  if (i < 0) return;
  free(l->kv[i]);
  memmove(l->kv + i, l->kv + i + 1, sizeof(char *) * (size_t)(l->n - i - 1));
  l->n--;
}

gt_rc gt_sweep_kvs_copy(gt_sweep_kvs *dst, const gt_sweep_kvs *src, gt_err *err) {
  memset(dst, 0, sizeof *dst);
  for (int i = 0; i < src->n; i++) {
    gt_rc rc = gt_sweep_kvs_set(dst, src->kv[i], err);
    if (rc) {
      gt_sweep_kvs_free(dst);
      return rc;
    }
  }
  return GT_OK;
}
