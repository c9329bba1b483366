#include "train/config_agree.h"

#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

int gt_config_key_rank_local(const char *key) {
  return !strcmp(key, "threads_per_device") || !strcmp(key, "memory_limit_bytes");
}

char *gt_config_agreed_text(const gt_config *cfg) {
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  s[0] = '\0';
  for (int i = 0; i < gt_config_num_keys(); i++) {
    const gt_key_spec *k = gt_config_key_at(i);
    if (gt_config_key_rank_local(k->name)) continue;
    char val[2048];
    if (gt_config_get_text(cfg, k->name, val, sizeof val, NULL)) continue;
    size_t need = strlen(k->name) + strlen(val) + 3;
    if (n + need > cap) {
      while (n + need > cap) cap *= 2;
      char *t = realloc(s, cap);
      if (!t) {
        free(s);
        return NULL;
      }
      s = t;
    }
    n += (size_t)snprintf(s + n, cap - n, "%s=%s\n", k->name, val);
  }
  return s;
}

/* The value of `key` in a "key=value\n" text (NULL if absent); *len its length. */
static const char *gt__value_of(const char *text, const char *key, size_t *len) {
  size_t kl = strlen(key);
  for (const char *p = text; *p;) {
    const char *eol = strchr(p, '\n');
    if (!eol) eol = p + strlen(p);
    if ((size_t)(eol - p) > kl && !strncmp(p, key, kl) && p[kl] == '=') {
      *len = (size_t)(eol - p) - kl - 1;
      return p + kl + 1;
    }
    p = *eol ? eol + 1 : eol;
  }
  return NULL;
}

/* "rank r has k=v where rank 0 has k=w; ..." for every differing key. */
static void gt__diff(const char *mine0, const char *other, int r, char *out, size_t n) {
  size_t o = 0;
  int shown = 0;
  out[0] = '\0';
  for (int i = 0; i < gt_config_num_keys(); i++) {
    const char *key = gt_config_key_at(i)->name;
    size_t la = 0, lb = 0;
    const char *a = gt__value_of(mine0, key, &la), *b = gt__value_of(other, key, &lb);
    if (!a || !b || (la == lb && !memcmp(a, b, la))) continue;
    int w = snprintf(out + o, n - o, "%srank %d has %s=%.*s where rank 0 has %s=%.*s", shown ? "; " : "", r, key,
                     (int)(lb > 200 ? 200 : lb), b, key, (int)(la > 200 ? 200 : la), a);
    if (w < 0 || (size_t)w >= n - o) break;
    o += (size_t)w;
    shown++;
  }
  if (!shown) snprintf(out, n, "rank %d's configuration text differs from rank 0's", r);
}

gt_rc gt_config_agree_ranks(const gt_config *cfg, uint64_t *checksum, gt_err *err) {
  char *text = gt_config_agreed_text(cfg);
  /* every rank takes part in every collective below, even without memory */
  uint64_t h = text ? gt_fnv1a(GT_FNV1A_INIT, text, strlen(text)) : 0;
  if (checksum) *checksum = h;
  int R = gt_dist_size();
  if (R == 1) {
    free(text);
    return text ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "config: no memory");
  }
  int64_t *all = calloc((size_t)R, sizeof *all);
  int64_t mine = (int64_t)h;
  gt_rc rc = gt_dist_agree(text && all ? GT_OK : GT_ERR_NOMEM, NULL, "comparing the ranks' configurations", err);
  if (!rc) rc = gt_dist_allgather_i64(&mine, 1, all, "the configuration's checksum", err);
  int bad = -1;
  for (int r = 1; !rc && r < R && bad < 0; r++)
    if (all[r] != all[0]) bad = r;
  if (rc || bad < 0) {
    free(all);
    free(text);
    return rc;
  }
  /* the first rank that differs sends its text, rank 0 its own: every rank
   * builds the same message */
  int64_t lens[2] = {gt_dist_rank() == 0 ? (int64_t)strlen(text) + 1 : 0,
                     gt_dist_rank() == bad ? (int64_t)strlen(text) + 1 : 0};
  char *t0 = NULL, *tb = NULL;
  if (!(rc = gt_dist_allreduce_i64(lens, 2, GT_DIST_MAX, "the configurations' lengths", err))) {
    t0 = calloc((size_t)lens[0], 1);
    tb = calloc((size_t)lens[1], 1);
    rc = gt_dist_agree(t0 && tb ? GT_OK : GT_ERR_NOMEM, NULL, "comparing the ranks' configurations", err);
  }
  if (!rc) {
    if (gt_dist_rank() == 0) memcpy(t0, text, (size_t)lens[0]);
    if (gt_dist_rank() == bad) memcpy(tb, text, (size_t)lens[1]);
    if (!(rc = gt_dist_bcast(t0, (size_t)lens[0], 0, "rank 0's configuration", err)))
      rc = gt_dist_bcast(tb, (size_t)lens[1], bad, "a differing rank's configuration", err);
  }
  if (!rc) {
    char diff[GT_ERR_MSG_MAX - 160];
    gt__diff(t0, tb, bad, diff, sizeof diff);
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "config: the ranks disagree: %s (every rank must run the same configuration; only "
                    "threads_per_device and memory_limit_bytes may differ)",
                    diff);
  }
  free(t0);
  free(tb);
  free(all);
  free(text);
  return rc;
}
