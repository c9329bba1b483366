/* Scoring a model without training: multiple-choice log-likelihood tasks
 * as lm-evaluation-harness scores them, and the loss and perplexity of a
 * data source's held-out rows. Both run on a mesh (mesh/fsdp.h), so they
 * shard over devices and MPI ranks as training does. docs/evaluation.md is
 * the user's account.
 *
 * A task file is JSON Lines, one example per line, in one of three layouts
 * (told apart by their fields, or forced):
 *   mc         {"context": str, "choices": [str, ...], "label": int}
 *   hellaswag  the Hugging Face dataset's rows: ctx_a, ctx_b, activity_label
 *              (or ctx), endings, label (an int or its digits as a string);
 *              the harness's preprocessing of the text
 *   mmlu       cais/mmlu's rows: question, choices, answer (int), optional
 *              subject; the harness's prompt "Question?\nA. ...\nAnswer:"
 *              with choices " A", " B", ... and its subject line
 * Each example becomes one request per choice: the context, and the choice
 * after the target delimiter " " as the continuation.
 *
 * Scores (lm-evaluation-harness's task.py, output_type multiple_choice):
 * ll_i = sum of log p(continuation token | everything before it) over the
 * continuation's tokens; acc: argmax_i ll_i is the label; acc_norm: argmax_i
 * ll_i / (characters of choice i), the harness's len() of the choice string
 * (Unicode code points, without the delimiter); acc_bytes: the same over
 * its UTF-8 bytes. Ties go to the first choice (numpy's argmax). Each is a
 * mean over the examples with stderr = sample standard deviation (n - 1) /
 * sqrt(n), the harness's mean_stderr (NaN below 2 examples). */
#ifndef GEMTRAIN_EVAL_H
#define GEMTRAIN_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "base/common.h"
#include "config/config.h"
#include "data/data.h"
#include "data/docs.h"
#include "gemtrain/metrics.h"
#include "mesh/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- task files (task.c, format.c) ---- */

typedef enum gt_eval_format {
  GT_EVAL_AUTO = 0, /* by each record's fields */
  GT_EVAL_MC,
  GT_EVAL_HELLASWAG,
  GT_EVAL_MMLU
} gt_eval_format;

/* "auto", "mc", "hellaswag", "mmlu"; -1 for another word. */
int gt_eval_format_parse(const char *s);
const char *gt_eval_format_name(gt_eval_format f);

typedef struct gt_eval_example {
  char *context;   /* the prompt as the model reads it */
  int n_choices;   /* >= 2 */
  char **choices;  /* as the harness's doc_to_choice gives them: no delimiter */
  int label;       /* in [0, n_choices) */
  int64_t line;    /* in the file, 1-based */
} gt_eval_example;

typedef struct gt_eval_task {
  char name[64];            /* the file's name without directory and .jsonl[.gz] */
  char path[GT_STR_PATH];
  gt_eval_format format;    /* of the first record */
  int n;
  gt_eval_example *ex;
} gt_eval_task;

/* The next path of a comma-separated list (eval_tasks) into out, spaces
 * around it trimmed and empty items skipped; advances *cursor. 0 at the
 * end of the list. */
int gt_eval_next_path(const char **cursor, char *out, size_t n);
/* A task's name: the file's name without its directory and its .jsonl /
 * .jsonl.gz / .json[.gz] / .gz, cut to n - 1 bytes (gt_eval_task.name). */
void gt_eval_task_name(const char *path, char *out, size_t n);
/* The paths of a comma-separated list (eval_tasks) before any is read: at
 * most max of them (0: any number), each file opens, no two tasks with one
 * name (as gt_eval_task.name holds it, so also two names alike in their
 * first 63 characters: the results would have one key for two tasks).
 * Refused with GT_ERR_CONFIG naming the key eval_tasks and the files.
 * *n (may be NULL): how many paths. */
gt_rc gt_eval_tasks_check(const char *list, int max, int *n, gt_err *err);
/* The tasks' text is tokenized with tokenizer_path, or read as byte tokens
 * without one, which only a byte model's vocabulary (GT_BYTE_VOCAB) is: a
 * model of another vocab_size without a tokenizer is refused naming
 * eval_tasks and tokenizer_path (GT_ERR_CONFIG), as training's text is. */
gt_rc gt_eval_tasks_tokenizer_check(const gt_config *cfg, gt_err *err);
/* Reads a task file. A record that is not one of the layouts, a choice list
 * shorter than 2, a label out of range, an empty context or choice is
 * refused in one line naming the file, the line and the field. */
gt_rc gt_eval_task_read(gt_eval_task *t, const char *path, gt_eval_format force, gt_err *err);
/* One record (a parsed JSON object) into ex; where = "'file' line N". */
gt_rc gt_eval_example_parse(const struct cJSON *rec, gt_eval_format force, const char *where, gt_eval_example *ex,
                            gt_eval_format *found, gt_err *err);
void gt_eval_example_free(gt_eval_example *ex);
void gt_eval_task_free(gt_eval_task *t);
/* The harness's HellaSwag text cleaning (utils.preprocess) of s, malloc'd. */
char *gt_eval_hellaswag_preprocess(const char *s);

/* ---- requests (request.c) ---- */

/* One (context, continuation) pair as the harness's HF model encodes it:
 * the context's trailing whitespace moves to the continuation;
 * ctx = <bos> enc(context), whole = <bos> enc(context + continuation), the
 * continuation's tokens are whole[len(ctx):]; the sequence is ctx followed
 * by them. ids: malloc'd [n], of which the last n_cont are the continuation.
 * An empty continuation (its tokens merge into the context's) is refused. */
gt_rc gt_eval_encode_pair(const gt_encoder *e, const char *context, const char *continuation, int32_t **ids,
                          int64_t *n, int64_t *n_cont, const char *where, gt_err *err);
/* Characters (code points: bytes that do not continue a UTF-8 sequence)
 * and bytes of s. */
int64_t gt_eval_chars(const char *s);

/* ---- scoring (score.c, metrics.c) ---- */

typedef struct gt_eval_result {
  char name[64];
  gt_eval_format format; /* of the task's first record */
  int64_t n;          /* examples */
  int64_t requests;   /* (example, choice) pairs scored */
  int64_t tokens;     /* continuation tokens scored */
  int64_t truncated;  /* requests whose context was cut on the left to fit max_target_length */
  double acc, acc_stderr, acc_norm, acc_norm_stderr, acc_bytes, acc_bytes_stderr;
  double seconds;
} gt_eval_result;

/* acc, acc_norm, acc_bytes and their stderr from the log-likelihoods ll of
 * every choice (example by example, choice by choice). */
void gt_eval_metrics(const gt_eval_task *t, const double *ll, gt_eval_result *r);

typedef struct gt_eval_opts {
  int B;               /* rows per global batch (a multiple of the devices) */
  int max_len;         /* the model's positions: a request keeps its last max_len + 1 tokens */
  int tiles;           /* num_vocab_tiling: each device's tokens must split into it */
  int devices;         /* over all ranks */
  int batches_per_call; /* batches given to the mesh at once (>= 1) */
} gt_eval_opts;

/* The options of a config: the global batch, max_target_length, ... */
gt_eval_opts gt_eval_opts_from_config(const gt_config *c);

/* Scores every choice of every example on the mesh: r gets the metrics,
 * ll (may be NULL; [sum of n_choices]) each choice's log-likelihood. The
 * rows are one request each, as long as the task's longest (rounded up to
 * a multiple of 8), so a row's result does not depend on the batch size or
 * on the device count. Collective over ranks. */
gt_rc gt_eval_task_score(gt_fsdp *f, const gt_encoder *e, const gt_eval_opts *o, const gt_eval_task *t,
                         gt_eval_result *r, double *ll, gt_err *err);

/* ---- held-out loss (ppl.c) ---- */

typedef struct gt_eval_ppl {
  int64_t rows, batches, tokens;
  double loss, perplexity; /* mean loss per token, exp of it */
  double seconds;
} gt_eval_ppl;

/* The loss over every eval row of d (its held-out split, or eval_dataset_path
 * whole), each row once: ceil(rows / B) batches, the last one's extra rows
 * masked. rows0/nrows: the rows of a batch this process fills (mesh). */
gt_rc gt_eval_perplexity(gt_fsdp *f, gt_data *d, int row0, int nrows, gt_eval_ppl *out, gt_err *err);

/* ---- results (report.c) ---- */

/* One JSON object (no trailing newline), malloc'd: {"model": ..., "perplexity":
 * {...} or absent, "tasks": {name: {...}}}. */
char *gt_eval_results_json(const char *model, const gt_eval_ppl *ppl, const gt_eval_result *r, int n);
/* The readable table. */
void gt_eval_results_table(FILE *f, const gt_eval_ppl *ppl, const gt_eval_result *r, int n);

/* ---- during training (train_tasks.c) ---- */

/* eval_tasks: at each eval, every task scored on the trainer's mesh, into
 * sm->tasks (at most 8). The files are read and tokenised (tokenizer_path,
 * as the training data) on the first call into *state; free it with
 * gt_eval_train_tasks_free. Collective over ranks. */
typedef struct gt_eval_train_state gt_eval_train_state;
/* What a run can check of eval_tasks when it starts, before any step:
 * gt_eval_tasks_check with training's limit of 8 files (the step record
 * holds 8). */
gt_rc gt_eval_train_tasks_check(const gt_config *cfg, gt_err *err);
/* 1 when a run of cfg scores no eval at all, so eval_tasks would never be
 * scored: dataset_type synthetic (no held-out data) or eval_interval -1. */
int gt_eval_train_never_evaluates(const gt_config *cfg);
gt_rc gt_eval_train_tasks(gt_eval_train_state **state, const gt_config *cfg, gt_fsdp *f, gt_step_metrics *sm,
                          gt_err *err);
void gt_eval_train_tasks_free(gt_eval_train_state *s);

#ifdef __cplusplus
}
#endif
#endif
