/* A task file: JSON Lines records into examples (format.c), each refused
 * record named by file, line and field. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

void gt_eval_task_name(const char *path, char *out, size_t n) {
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
  gt_eval_task_name(path, t->name, sizeof t->name);
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

gt_rc gt_eval_tasks_tokenizer_check(const gt_config *cfg, gt_err *err) {
  if (!cfg->eval_tasks[0] || cfg->tokenizer_path[0] || cfg->vocab_size == GT_BYTE_VOCAB) return GT_OK;
  return gt_err_set(err, GT_ERR_CONFIG,
                    "eval: key 'eval_tasks': the tasks' text without a tokenizer is read as byte tokens (%d ids), but "
                    "the model's vocab_size is %lld; set tokenizer_path to the model's tokenizer.json (byte tokens "
                    "need vocab_size = %d)",
                    GT_BYTE_VOCAB, (long long)cfg->vocab_size, GT_BYTE_VOCAB);
}

gt_rc gt_eval_tasks_check(const char *list, int max, int *n_out, gt_err *err) {
  typedef char gt__name[sizeof(((gt_eval_task *)0)->name)];
  int cap = 1, n = 0;
  for (const char *p = list; *p; p++) cap += *p == ',';
  gt__name *names = malloc(sizeof *names * (size_t)cap);
  char(*paths)[GT_STR_PATH] = malloc(sizeof *paths * (size_t)cap);
  gt_rc rc = names && paths ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "eval: no memory for %d task names", cap);
  const char *cur = list;
  while (!rc && gt_eval_next_path(&cur, paths[n], sizeof paths[n])) {
    if (max > 0 && n == max) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "eval: key 'eval_tasks' names more than %d task files ('%s' is file %d)",
                      max, paths[n], max + 1);
      break;
    }
    FILE *f = fopen(paths[n], "rb");
    if (!f) {
      rc = gt_err_set(err, GT_ERR_CONFIG, "eval: key 'eval_tasks': task file '%s' cannot be opened: %s", paths[n],
                      strerror(errno));
      break;
    }
    fclose(f);
    /* a task is known by its name (the JSON's key, a sweep's column): the
     * names as stored, so two that differ only past the cut collide too */
    gt_eval_task_name(paths[n], names[n], sizeof names[n]);
    for (int j = 0; j < n && !rc; j++)
      if (!strcmp(names[j], names[n]))
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "eval: key 'eval_tasks' names two tasks called '%s' ('%s' and '%s'%s): a task is known by "
                        "its file's name without directory and extension; rename or link one of them",
                        names[n], paths[j], paths[n], strlen(names[n]) + 1 == sizeof names[n] ? ", their names cut to "
                        "63 characters" : "");
    n++;
  }
  free(names);
  free(paths);
  if (n_out) *n_out = rc ? 0 : n;
  return rc;
}
