/* eval_tasks: the multiple-choice tasks scored at every eval of a run. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"
#include "tokenizer/tokenizer.h"

#define GT__MAX_TASKS ((int)(sizeof(((gt_step_metrics *)0)->tasks) / sizeof(((gt_step_metrics *)0)->tasks[0])))

struct gt_eval_train_state {
  gt_tokenizer *tok;
  gt_encoder enc;
  int n;
  gt_eval_task task[GT__MAX_TASKS];
};

void gt_eval_train_tasks_free(gt_eval_train_state *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) gt_eval_task_free(&s->task[i]);
  gt_tokenizer_free(s->tok);
  free(s);
}

gt_rc gt_eval_train_tasks_check(const gt_config *cfg, gt_err *err) {
  gt_rc rc = gt_eval_tasks_check(cfg->eval_tasks, GT__MAX_TASKS, NULL, err);
  return rc ? rc : gt_eval_tasks_tokenizer_check(cfg, err);
}

int gt_eval_train_never_evaluates(const gt_config *cfg) {
  return cfg->eval_interval < 0 || !strcmp(cfg->dataset_type, "synthetic");
}

/* The files of eval_tasks (comma-separated, spaces around names dropped),
 * read once, with the training data's tokenizer. */
static gt_rc gt__load(gt_eval_train_state **out, const gt_config *cfg, gt_err *err) {
  gt_eval_train_state *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  gt_rc rc = cfg->tokenizer_path[0] ? gt_tokenizer_load(cfg->tokenizer_path, &s->tok, err) : GT_OK;
  gt_encoder_init(&s->enc, s->tok, cfg->vocab_size);
  if (!rc) rc = gt_eval_train_tasks_check(cfg, err);
  const char *cur = cfg->eval_tasks;
  char path[GT_STR_PATH];
  while (!rc && gt_eval_next_path(&cur, path, sizeof path))
    if (!(rc = gt_eval_task_read(&s->task[s->n], path, GT_EVAL_AUTO, err))) s->n++;
  if (rc) {
    gt_eval_train_tasks_free(s);
    return rc;
  }
  *out = s;
  return GT_OK;
}

gt_rc gt_eval_train_tasks(gt_eval_train_state **state, const gt_config *cfg, gt_fsdp *f, gt_step_metrics *sm,
                          gt_err *err) {
  sm->n_tasks = 0;
  if (!cfg->eval_tasks[0]) return GT_OK;
  gt_rc rc = *state ? GT_OK : gt__load(state, cfg, err);
  if (rc) return rc;
  gt_eval_train_state *s = *state;
  gt_eval_opts o = gt_eval_opts_from_config(cfg);
  for (int i = 0; i < s->n; i++) {
    gt_eval_result r;
    if ((rc = gt_eval_task_score(f, &s->enc, &o, &s->task[i], &r, NULL, err))) return rc;
    snprintf(sm->tasks[i].name, sizeof sm->tasks[i].name, "%s", r.name);
    sm->tasks[i].n = r.n;
    sm->tasks[i].acc = r.acc;
    sm->tasks[i].acc_stderr = r.acc_stderr;
    sm->tasks[i].acc_norm = r.acc_norm;
    sm->tasks[i].acc_norm_stderr = r.acc_norm_stderr;
    sm->n_tasks = i + 1;
  }
  return GT_OK;
}
