/* A task file: JSON Lines records into examples (format.c), each refused
 * record named by file, line and field. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

/* The file's name without its directory and its .jsonl / .jsonl.gz / .json */
static void gt__task_name(const char *path, char *out, size_t n) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  snprintf(out, n, "%s", b);
  static const char *const ext[] = {".jsonl.gz", ".jsonl", ".json.gz", ".json", ".gz"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
    size_t l = strlen(out), e = strlen(ext[i]);
    if (l > e && !strcmp(out + l - e, ext[i])) {
      out[l - e] = '\0';
      break;
    }
  }
}

gt_rc gt_eval_task_read(gt_eval_task *t, const char *path, gt_eval_format force, gt_err *err) {
  memset(t, 0, sizeof *t);
  snprintf(t->path, sizeof t->path, "%s", path);
  gt__task_name(path, t->name, sizeof t->name);
  t->format = force;
  gt_jsonl r;
  gt_rc rc = gt_jsonl_open(&r, path, err);
  if (rc) return rc;
  int cap = 0;
  for (;;) {
    cJSON *rec = NULL;
    if ((rc = gt_jsonl_next(&r, &rec, err)) || !rec) break;
    if (t->n == cap) {
      cap = cap ? 2 * cap : 64;
      gt_eval_example *e = realloc(t->ex, (size_t)cap * sizeof *e);
      if (!e) {
        cJSON_Delete(rec);
        rc = gt_err_set(err, GT_ERR_NOMEM, "eval: no memory for the examples of '%s'", path);
        break;
      }
      t->ex = e;
    }
    char where[GT_STR_PATH + 48];
    snprintf(where, sizeof where, "'%s' line %lld", path, (long long)r.line_no);
    gt_eval_format f;
    rc = gt_eval_example_parse(rec, force, where, &t->ex[t->n], &f, err);
    cJSON_Delete(rec);
    if (rc) break;
    t->ex[t->n].line = r.line_no;
    if (t->n++ == 0) t->format = f;
  }
  gt_jsonl_close(&r);
  if (!rc && t->n == 0) rc = gt_err_set(err, GT_ERR_FORMAT, "eval: task file '%s' holds no example", path);
  if (rc) gt_eval_task_free(t);
  return rc;
}

void gt_eval_task_free(gt_eval_task *t) {
  for (int i = 0; i < t->n; i++) gt_eval_example_free(&t->ex[i]);
  free(t->ex);
  t->ex = NULL;
  t->n = 0;
}

int gt_eval_next_path(const char **cursor, char *out, size_t n) {
  for (const char *p = *cursor; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    const char *a = p, *b = p + len;
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    p = e ? e + 1 : p + len;
    *cursor = p;
    if (a == b) continue;
    snprintf(out, n, "%.*s", (int)(b - a), a);
    return 1;
  }
  return 0;
}
