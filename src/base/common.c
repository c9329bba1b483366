#define _POSIX_C_SOURCE 200809L
#include "base/common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

gt_rc gt_err_set(gt_err *err, gt_rc rc, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->rc = rc;
  }
  return rc;
}

void gt_err_clear(gt_err *err) {
  if (err) {
    err->rc = GT_OK;
    err->msg[0] = '\0';
  }
}

const char *gt_rc_name(gt_rc rc) {
  switch (rc) {
    case GT_OK: return "ok";
    case GT_ERR_ARG: return "bad argument";
    case GT_ERR_CONFIG: return "config error";
    case GT_ERR_IO: return "I/O error";
    case GT_ERR_FORMAT: return "format error";
    case GT_ERR_NOMEM: return "out of memory";
    case GT_ERR_PLAN: return "does not fit";
    case GT_ERR_NUMERIC: return "non-finite value";
    case GT_ERR_INTERNAL: return "internal error";
  }
  return "unknown";
}

const char *gt_version(void) { return GT_VERSION; }

uint64_t gt_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A directory just created is an entry of its parent: the parent is
 * synced too, so that after a power loss a checkpoint committed inside it
 * (fsync'd, renamed, its root synced) is not lost with the entry. Best
 * effort: some file systems cannot sync a directory. */
static void gt__sync_parent(char *path) {
  char *slash = strrchr(path, '/');
  const char *parent = ".";
  if (slash == path) parent = "/";
  else if (slash) *slash = '\0', parent = path;
  int fd = open(parent, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  if (slash && slash != path) *slash = '/';
}

/* mkdir, then the parent synced when it created the directory */
static int gt__mkdir_synced(char *path) {
  if (mkdir(path, 0755)) return errno == EEXIST ? 0 : -1;
  gt__sync_parent(path);
  return 0;
}

gt_rc gt_mkdirs(const char *path, const char *who, gt_err *err) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s", path) >= sizeof tmp)
    return gt_err_set(err, GT_ERR_IO, "%s: directory path '%s' is too long", who, path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (gt__mkdir_synced(tmp))
        return gt_err_set(err, GT_ERR_IO, "%s: cannot create directory '%s': %s", who, tmp, strerror(errno));
      *p = '/';
    }
  if (gt__mkdir_synced(tmp))
    return gt_err_set(err, GT_ERR_IO, "%s: cannot create directory '%s': %s", who, tmp, strerror(errno));
  struct stat st;
  if (stat(tmp, &st) || !S_ISDIR(st.st_mode))
    return gt_err_set(err, GT_ERR_IO, "%s: '%s' exists and is not a directory", who, tmp);
  return GT_OK;
}

/* Reads f to its end into a malloc'd, NUL-terminated buffer. cap is the
 * first buffer size: a regular file's size + 2, so that the read that meets
 * the end fits without growing; for a pipe (no size) the buffer doubles.
 * fread returns short only at the end or on an error. */
static gt_rc gt__read_to_end(FILE *f, const char *path, const char *who, size_t cap, char **buf, size_t *n,
                             gt_err *err) {
  if (cap < 2) cap = 1 << 16;
  char *b = malloc(cap);
  size_t len = 0;
  for (;;) {
    if (!b) return gt_err_set(err, GT_ERR_NOMEM, "%s '%s' cannot be read (no memory for %zu bytes)", who, path, cap);
    if (len + 1 == cap) {
      char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
      if (!nb) {
        free(b);
        return gt_err_set(err, GT_ERR_NOMEM, "%s '%s' cannot be read (no memory for more than %zu bytes)", who,
                          path, len);
      }
      b = nb;
      cap *= 2;
    }
    size_t want = cap - 1 - len, got = fread(b + len, 1, want, f);
    len += got;
    if (got < want) break;
  }
  if (ferror(f)) {
    int e = errno;
    free(b);
    return gt_err_set(err, GT_ERR_IO, "%s '%s' cannot be read: %s", who, path, strerror(e ? e : EIO));
  }
  b[len] = '\0';
  *buf = b;
  *n = len;
  return GT_OK;
}

gt_rc gt_read_file(const char *path, const char *who, char **buf, size_t *n, gt_err *err) {
  *buf = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return gt_err_set(err, GT_ERR_IO, "%s '%s' cannot be opened: %s", who, path, strerror(errno));
  /* fstat on the open file, not stat before it: what is read is what was
   * checked. A directory opens for reading on Linux; reading it fails. */
  struct stat st;
  int have = fstat(fileno(f), &st) == 0;
  if (have && S_ISDIR(st.st_mode)) {
    fclose(f);
    return gt_err_set(err, GT_ERR_IO, "%s '%s' is a directory, expected a file", who, path);
  }
  size_t cap = have && S_ISREG(st.st_mode) && (uint64_t)st.st_size < SIZE_MAX - 2 ? (size_t)st.st_size + 2 : 0;
  gt_rc rc = gt__read_to_end(f, path, who, cap, buf, n, err);
  fclose(f);
  return rc;
}

gt_rc gt_read_stream(FILE *f, const char *name, const char *who, char **buf, size_t *n, gt_err *err) {
  *buf = NULL;
  *n = 0;
  return gt__read_to_end(f, name, who, 0, buf, n, err);
}

int gt_json_float_text(double v, char *buf, size_t n) {
  if (!isfinite(v) || n < 32) return -1;
  snprintf(buf, n, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
  if (!strpbrk(buf, ".eE")) strcat(buf, ".0"); /* at most 25 characters so far */
  return 0;
}

uint64_t gt_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
