/* JSON Lines: one record per line, read in chunks through zlib's gz
 * functions, which read gzip-compressed and plain files alike (and FIFOs),
 * so memory is one line and one buffer whatever the file's size. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/docs.h"

enum { GT__JSONL_CHUNK = 1 << 20 };

gt_rc gt_jsonl_open(gt_jsonl *r, const char *path, gt_err *err) {
  memset(r, 0, sizeof *r);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return gt_err_set(err, GT_ERR_IO, "data: '%s' is a directory, expected a JSON Lines file", path);
  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return gt_err_set(err, GT_ERR_IO, "data: '%s' cannot be opened: %s", path, errno ? strerror(errno) : "no memory");
  gzbuffer(gz, GT__JSONL_CHUNK);
  r->gz = gz;
  r->path = strdup(path);
  r->buf = malloc(GT__JSONL_CHUNK);
  if (!r->path || !r->buf) {
    gt_jsonl_close(r);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory to read '%s'", path);
  }
  return GT_OK;
}

void gt_jsonl_close(gt_jsonl *r) {
  if (r->gz) gzclose((gzFile)r->gz);
  free(r->path);
  free(r->buf);
  free(r->line);
  memset(r, 0, sizeof *r);
}

/* The line being read is line_no + 1: line_no counts whole lines. */
static gt_rc gt__line_add(gt_jsonl *r, const char *p, size_t n, gt_err *err) {
  /* refused at the cap, not when memory runs out: a small gzip file can
   * hold gigabytes without a newline */
  if (r->line_len + n > GT_JSONL_MAX_LINE)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "data: '%s' line %lld: longer than %d MiB, the limit for one record (no newline in the first "
                      "%d MiB)",
                      r->path, (long long)r->line_no + 1, GT_JSONL_MAX_LINE >> 20, GT_JSONL_MAX_LINE >> 20);
  if (r->line_len + n + 1 > r->line_cap) {
    size_t cap = r->line_cap ? r->line_cap : 4096;
    while (cap < r->line_len + n + 1) cap *= 2;
    char *l = realloc(r->line, cap);
    if (!l)
      return gt_err_set(err, GT_ERR_NOMEM, "data: '%s' line %lld: no memory for a line of %zu bytes", r->path,
                        (long long)r->line_no + 1, r->line_len + n);
    r->line = l;
    r->line_cap = cap;
  }
  memcpy(r->line + r->line_len, p, n);
  r->line_len += n;
  r->line[r->line_len] = '\0';
  return GT_OK;
}

/* The next line into r->line (without its newline); *got = 0 at the end. */
static gt_rc gt__next_line(gt_jsonl *r, int *got, gt_err *err) {
  r->line_len = 0;
  if (r->line) r->line[0] = '\0';
  *got = 0;
  for (;;) {
    if (r->buf_pos == r->buf_len) {
      if (r->eof) break;
      int k = gzread((gzFile)r->gz, r->buf, GT__JSONL_CHUNK);
      int zerr = 0;
      const char *zmsg = gzerror((gzFile)r->gz, &zerr);
      /* zlib's message starts with the path, which ours names already */
      size_t pl = strlen(r->path);
      if (zerr != Z_ERRNO && zmsg && !strncmp(zmsg, r->path, pl) && !strncmp(zmsg + pl, ": ", 2)) zmsg += pl + 2;
      if (k < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
        return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: cannot be read: %s", r->path,
                          (long long)r->line_no + 1, zerr == Z_ERRNO ? strerror(errno) : zmsg);
      if (k == 0) {
        /* Z_BUF_ERROR at the end: the gzip stream stopped before its end */
        if (zerr == Z_BUF_ERROR)
          return gt_err_set(err, GT_ERR_FORMAT,
                            "data: '%s' line %lld: the gzip stream ends early (a truncated file)", r->path,
                            (long long)r->line_no + 1);
        r->eof = 1;
        break;
      }
      r->buf_len = (size_t)k;
      r->buf_pos = 0;
      r->bytes_in = (uint64_t)gzoffset((gzFile)r->gz);
    }
    const char *p = r->buf + r->buf_pos;
    size_t avail = r->buf_len - r->buf_pos;
    const char *nl = memchr(p, '\n', avail);
    size_t take = nl ? (size_t)(nl - p) : avail;
    gt_rc rc = gt__line_add(r, p, take, err);
    if (rc) return rc;
    *got = 1;
    r->buf_pos += take + (nl ? 1 : 0);
    if (nl) break;
  }
  if (*got || r->line_len) {
    r->line_no++;
    *got = 1;
  }
  if (r->line_len && r->line[r->line_len - 1] == '\r') r->line[--r->line_len] = '\0';
  return GT_OK;
}

int gt_json_unset(const cJSON *v) {
  if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 1;
  if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) return 1;
  return cJSON_IsString(v) && !v->valuestring[0];
}

const char *gt_json_type_name(const cJSON *v) {
  if (!v) return "absent";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNull(v)) return "null";
  return "a string";
}

/* cJSON keeps strings NUL-terminated, so a NUL in one (a raw 0 byte or a
 * \u0000 escape) would cut the text there without a word: the NUL's column
 * (1-based), or 0 when there is none. Outside strings a backslash or a 0
 * byte is malformed JSON, which the parser has refused already. */
static size_t gt__nul_at(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\0') return i + 1;
    if (s[i] != '\\') continue;
    if (i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) return i + 1;
    i++; /* the escaped character, which may be a backslash */
  }
  return 0;
}

gt_rc gt_jsonl_next(gt_jsonl *r, cJSON **rec, gt_err *err) {
  *rec = NULL;
  for (;;) {
    int got;
    gt_rc rc = gt__next_line(r, &got, err);
    if (rc || !got) return rc;
    const char *s = r->line;
    size_t n = r->line_len;
    if (r->line_no == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, n -= 3; /* a UTF-8 BOM */
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i == n) continue; /* a blank line */
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!v) {
      long col = end && end >= s && end <= s + n ? (long)(end - s) + 1 : 1;
      return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: malformed JSON at column %ld (near '%.20s')",
                        r->path, (long long)r->line_no, col, s + (col - 1));
    }
    while (end < s + n && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
    if (end < s + n) {
      cJSON_Delete(v);
      return gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: text after the JSON value at column %ld; expected one object per line",
                        r->path, (long long)r->line_no, (long)(end - s) + 1);
    }
    if (!cJSON_IsObject(v)) {
      const char *t = gt_json_type_name(v);
      cJSON_Delete(v);
      return gt_err_set(err, GT_ERR_FORMAT, "data: '%s' line %lld: the line is %s; expected a JSON object", r->path,
                        (long long)r->line_no, t);
    }
    size_t nul = gt__nul_at(s, n);
    if (nul) {
      cJSON_Delete(v);
      return gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: a NUL character at column %zu; a document cannot hold one", r->path,
                        (long long)r->line_no, nul);
    }
    *rec = v;
    return GT_OK;
  }
}
