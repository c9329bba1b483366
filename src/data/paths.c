/* dataset_path: "a.jsonl,more/x-*.jsonl.gz,dir": files as given, globs and
 * directories in name order, so the file order (and with it the data order
 * without shuffling) does not depend on the file system. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"

static int gt__cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static gt_rc gt__add(gt__paths *p, const char *s, gt_err *err) {
  char **v = realloc(p->v, sizeof(char *) * (size_t)(p->n + 1));
  if (!v) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
  p->v = v;
  if (!(p->v[p->n] = strdup(s))) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
  p->n++;
  return GT_OK;
}

static int gt__has_ext(const char *name, const char *const *exts) {
  size_t l = strlen(name);
  for (int i = 0; exts && exts[i]; i++) {
    size_t e = strlen(exts[i]);
    if (l > e && !strcmp(name + l - e, exts[i])) return 1;
  }
  return 0;
}

/* What a file that is not a regular file is, for messages. */
static const char *gt__kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

/* A file a directory or a glob found is read only if it is a regular file
 * (or a link to one): a FIFO nobody writes would block the run forever.
 * Named in the list itself, a FIFO is read: that is asked for. */
static gt_rc gt__check_found(const char *f, const char *key, const char *from, const char *how, gt_err *err) {
  struct stat st;
  if (stat(f, &st) != 0)
    return gt_err_set(err, GT_ERR_IO, "data: %s '%s' %s '%s', which cannot be read: %s", key, from, how, f,
                      strerror(errno));
  if (!S_ISREG(st.st_mode))
    return gt_err_set(err, GT_ERR_IO, "data: %s '%s' %s '%s', %s, not a regular file; name it in %s to read it", key,
                      from, how, f, gt__kind(st.st_mode), key);
  return GT_OK;
}

static gt_rc gt__add_dir(gt__paths *p, const char *dir, const char *key, const char *const *exts, gt_err *err) {
  DIR *d = opendir(dir);
  if (!d) return gt_err_set(err, GT_ERR_IO, "data: %s '%s' cannot be read: %s", key, dir, strerror(errno));
  gt__paths found = {NULL, 0};
  gt_rc rc = GT_OK;
  struct dirent *e;
  /* 'dir/' (as a shell completes it) names the same files as 'dir': join
   * with one slash, so the file names the run prints read as given */
  size_t dl = strlen(dir);
  while (dl > 1 && dir[dl - 1] == '/' && dir[dl - 2] == '/') dl--;
  while (!rc && (e = readdir(d))) {
    if (e->d_name[0] == '.' || !gt__has_ext(e->d_name, exts)) continue;
    size_t n = dl + strlen(e->d_name) + 2;
    char *f = malloc(n);
    if (!f) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
      break;
    }
    snprintf(f, n, "%.*s%s%s", (int)dl, dir, dl && dir[dl - 1] == '/' ? "" : "/", e->d_name);
    rc = gt__check_found(f, key, dir, "holds", err);
    if (!rc) rc = gt__add(&found, f, err);
    free(f);
  }
  closedir(d);
  if (!rc && found.n == 0) {
    char list[200] = "";
    for (int i = 0; exts && exts[i]; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s*%s", i ? ", " : "", exts[i]);
    rc = gt_err_set(err, GT_ERR_IO, "data: %s '%s' is a directory with no %s files", key, dir, list);
  }
  if (found.n) qsort(found.v, (size_t)found.n, sizeof(char *), gt__cmp_str);
  for (int i = 0; !rc && i < found.n; i++) rc = gt__add(p, found.v[i], err);
  gt__paths_free(&found);
  return rc;
}

gt_rc gt__paths_expand(const char *spec, const char *key, const char *const *exts, gt__paths *out, gt_err *err) {
  out->v = NULL;
  out->n = 0;
  gt_rc rc = GT_OK;
  const char *s = spec;
  while (!rc) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char *item = malloc(len + 1);
    if (!item) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
    memcpy(item, s, len);
    item[len] = '\0';
    struct stat st;
    if (!item[0]) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "data: key '%s' = '%s' has an empty entry", key, spec);
    } else if (strpbrk(item, "*?[")) {
      glob_t g;
      int gr = glob(item, 0, NULL, &g);
      if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0))
        rc = gt_err_set(err, GT_ERR_IO, "data: %s pattern '%s' matches no file", key, item);
      else if (gr != 0)
        rc = gt_err_set(err, GT_ERR_IO, "data: %s pattern '%s' cannot be read", key, item);
      for (size_t i = 0; !rc && i < g.gl_pathc; i++) /* glob sorts by name */
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode))
          rc = gt__add_dir(out, g.gl_pathv[i], key, exts, err);
        else if (!(rc = gt__check_found(g.gl_pathv[i], key, item, "matches", err)))
          rc = gt__add(out, g.gl_pathv[i], err);
      if (gr == 0) globfree(&g);
    } else if (stat(item, &st) != 0) {
      rc = gt_err_set(err, GT_ERR_IO, "data: %s '%s' not found: %s", key, item, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      rc = gt__add_dir(out, item, key, exts, err);
    } else {
      rc = gt__add(out, item, err);
    }
    free(item);
    if (!comma) break;
    s = comma + 1;
  }
  if (rc) gt__paths_free(out);
  return rc;
}

void gt__paths_free(gt__paths *p) {
  for (int i = 0; i < p->n; i++) free(p->v[i]);
  free(p->v);
  p->v = NULL;
  p->n = 0;
}
