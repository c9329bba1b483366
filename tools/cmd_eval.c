/* gemtrain eval: scores a model without training it: the loss and
 * perplexity of held-out data, and multiple-choice tasks (eval/eval.h),
 * on the devices and ranks a training run of the same config would use. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "dist/dist.h"
#include "eval/eval.h"
#include "mesh/mesh.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"
#include "train/train_internal.h"
#include "train/trainer.h"

static gt_rc agree(gt_rc rc, const char *what, gt_err *err) {
  if (gt_dist_size() == 1) return rc;
  gt_err mine = *err;
  return gt_dist_agree(rc, &mine, what, err);
}

/* The tokenizer the text goes through, as `gemtrain decode` picks it: the
 * tokenizer_path the user set, else the one the source names (its stored
 * config, or a Hugging Face directory's tokenizer.json). Into
 * cfg->tokenizer_path, so the data source reads the text the same way. */
static void pick_tokenizer(gt_config *cfg, const gt_model_source *src, int have_src) {
  if (gt_config_is_user_set(cfg, "tokenizer_path") || !have_src) return;
  if (src->kind == GT_SRC_HF) {
    char p[GT_STR_PATH + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/tokenizer.json", src->path);
    if (!stat(p, &st) && strlen(p) < sizeof cfg->tokenizer_path) snprintf(cfg->tokenizer_path, sizeof cfg->tokenizer_path, "%s", p);
  } else if (src->cfg.tokenizer_path[0]) {
    snprintf(cfg->tokenizer_path, sizeof cfg->tokenizer_path, "%s", src->cfg.tokenizer_path);
  }
}

/* A gemtrain run's checkpoint was trained and evaluated with its own
 * numerics and row length: those keys come from its stored config unless
 * the command line or config file sets them, so eval's numbers are the
 * run's. Names what it took into `taken` ("dtype=bfloat16 ..."). */
static void take_run_keys(gt_config *cfg, const gt_model_source *src, int have_src, char *taken, size_t n) {
  if (!have_src || src->kind != GT_SRC_CHECKPOINT) return;
  char dt[GT_STR_SHORT + 16] = "", mp[GT_STR_SHORT + 32] = "", ml[48] = "";
  if (!gt_config_is_user_set(cfg, "dtype")) {
    snprintf(cfg->dtype, sizeof cfg->dtype, "%s", src->cfg.dtype);
    snprintf(dt, sizeof dt, "dtype=%s ", cfg->dtype);
  }
  if (!gt_config_is_user_set(cfg, "matmul_precision")) {
    snprintf(cfg->matmul_precision, sizeof cfg->matmul_precision, "%s", src->cfg.matmul_precision);
    snprintf(mp, sizeof mp, "matmul_precision=%s ", cfg->matmul_precision);
  }
  if (!gt_config_is_user_set(cfg, "max_target_length")) {
    cfg->max_target_length = src->cfg.max_target_length;
    snprintf(ml, sizeof ml, "max_target_length=%lld ", cfg->max_target_length);
  }
  int w = snprintf(taken, n, "%s%s%s", dt, mp, ml);
  if (w > 0 && (size_t)w <= n) taken[w - 1] = '\0'; /* the last space */
}

typedef struct eval_run {
  gt_config cfg;
  gt_model_source *src;
  int have_src;
  gt_mem mem;
  gt_model m;
  gt_data data;
  int have_data, built;
  gt_trainer *tr;
  gt_tokenizer *tok;
  gt_eval_task *tasks;
  gt_eval_result *res;
  int n_tasks;
} eval_run;

static void run_free(eval_run *r) {
  for (int i = 0; i < r->n_tasks; i++) gt_eval_task_free(&r->tasks[i]);
  free(r->tasks);
  free(r->res);
  gt_tokenizer_free(r->tok);
  gt_trainer_destroy(r->tr);
  if (r->have_data) gt_data_close(&r->data);
  if (r->built) gt_model_free(&r->m);
  free(r->src);
}

/* eval_tasks: the task files, comma-separated; each opens, no two with one
 * name (checked before any is read) */
static gt_rc read_tasks(eval_run *r, gt_eval_format fmt, gt_err *err) {
  int cap = 0;
  gt_rc rc = gt_eval_tasks_check(r->cfg.eval_tasks, 0, &cap, err);
  if (rc) return rc;
  r->tasks = calloc((size_t)(cap ? cap : 1), sizeof *r->tasks);
  r->res = calloc((size_t)(cap ? cap : 1), sizeof *r->res);
  if (!r->tasks || !r->res) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory");
  const char *cur = r->cfg.eval_tasks;
  char path[GT_STR_PATH];
  while (gt_eval_next_path(&cur, path, sizeof path)) {
    gt_rc rc = gt_eval_task_read(&r->tasks[r->n_tasks], path, fmt, err);
    if (rc) return rc;
    r->n_tasks++;
  }
  return GT_OK;
}

/* --samples: one JSON line per example: its task, line, label, each choice's
 * log-likelihood and what acc and acc_norm picked. Through cJSON: a task's
 * name is a file name, which may hold any character (a NaN would be null). */
static gt_rc write_samples(FILE *f, const gt_eval_task *t, const double *ll, gt_err *err) {
  int64_t off = 0;
  for (int i = 0; i < t->n; i++) {
    const gt_eval_example *ex = &t->ex[i];
    int k = 0, kn = 0;
    for (int c = 1; c < ex->n_choices; c++) {
      if (ll[off + c] > ll[off + k]) k = c;
      if (ll[off + c] / (double)gt_eval_chars(ex->choices[c]) > ll[off + kn] / (double)gt_eval_chars(ex->choices[kn])) kn = c;
    }
    cJSON *o = cJSON_CreateObject(), *lls = cJSON_CreateDoubleArray(ll + off, ex->n_choices);
    char *line = NULL;
    if (o && lls && cJSON_AddStringToObject(o, "task", t->name) && cJSON_AddNumberToObject(o, "line", (double)ex->line) &&
        cJSON_AddNumberToObject(o, "label", ex->label) && cJSON_AddNumberToObject(o, "pred", k) &&
        cJSON_AddNumberToObject(o, "pred_norm", kn) && cJSON_AddItemToObject(o, "ll", lls)) {
      lls = NULL; /* o owns it */
      line = cJSON_PrintUnformatted(o);
    }
    cJSON_Delete(lls);
    cJSON_Delete(o);
    if (!line) return gt_err_set(err, GT_ERR_NOMEM, "eval: no memory for a --samples line of '%s'", t->path);
    fprintf(f, "%s\n", line);
    free(line);
    off += ex->n_choices;
  }
  return GT_OK;
}

static int usage_error(const char *msg, const char *arg) {
  fprintf(stderr, "gemtrain eval: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
  gt_cli_help(stderr, "eval", NULL);
  return GT_EXIT_CONFIG;
}

int gt_cmd_eval(int argc, char **argv) {
  const char *json_path = NULL, *samples_path = NULL;
  int whole = 0, fmt = GT_EVAL_AUTO, n = 0;
  long long limit = 0;
  char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (!rest) return GT_EXIT_ERROR;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] != '-' || !argv[i][1]) {
      rest[n++] = argv[i];
    } else if (!strcmp(argv[i], "--whole")) {
      whole = 1;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
      samples_path = argv[++i];
    } else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
      char *end;
      limit = strtoll(argv[++i], &end, 10);
      if (*end || limit < 1) {
        free(rest);
        return usage_error("--limit takes a number of examples >= 1, not", argv[i]);
      }
    } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
      if ((fmt = gt_eval_format_parse(argv[++i])) < 0) {
        free(rest);
        return usage_error("--format takes auto, mc, hellaswag or mmlu, not", argv[i]);
      }
    } else {
      free(rest);
      return usage_error("unknown option (or one without its value):", argv[i]);
    }
  }
  eval_run r;
  memset(&r, 0, sizeof r);
  gt_mem_init(&r.mem);
  int rc = gt_cli_load_config(n, rest, &r.cfg);
  free(rest);
  if (rc) return rc;
  gt_config *cfg = &r.cfg;
  const int primary = gt_dist_rank() == 0;
  /* what to score: the held-out loss when the user names data, the tasks
   * when eval_tasks names files */
  int want_ppl = whole || gt_config_is_user_set(cfg, "dataset_path") || gt_config_is_user_set(cfg, "eval_dataset_path") ||
                 gt_config_is_user_set(cfg, "dataset_type");
  if (!strcmp(cfg->dataset_type, "synthetic")) want_ppl = 0;
  /* With use_dpo the head computes the preference loss of row pairs: its
   * "loss" would be that, its "tokens" the pairs, its exp no perplexity.
   * With tasks to score (a preference run's config file names its pairs
   * data), the pairs are left out; with nothing else, refused. */
  if (want_ppl && cfg->use_dpo) {
    if (cfg->eval_tasks[0]) {
      want_ppl = 0;
      if (primary)
        fprintf(stderr, "gemtrain: eval: key 'use_dpo' = true: the preference pairs have no held-out "
                        "cross-entropy to score; scoring eval_tasks only\n");
    } else {
      fprintf(stderr, "gemtrain: eval: key 'use_dpo' = true: eval scores the held-out token cross-entropy, not "
                      "the preference loss (a preference run reports eval_loss and eval_rewards/* of its held-out "
                      "pairs every eval_interval steps); set use_dpo=false and point dataset_path or "
                      "eval_dataset_path at text or chat data, or score eval_tasks=FILE.jsonl\n");
      return GT_EXIT_CONFIG;
    }
  }
  if (!want_ppl && !cfg->eval_tasks[0]) {
    fprintf(stderr, "gemtrain: eval: nothing to score: set eval_tasks=FILE.jsonl[,...] (multiple-choice tasks) and/or "
                    "dataset_path= or eval_dataset_path= (held-out loss)\n");
    return GT_EXIT_CONFIG;
  }
  /* --whole scores dataset_path, all of it: an eval_dataset_path (a run's
   * config.json names its own) is not what it scores, and is said so */
  if (whole && want_ppl && cfg->eval_dataset_path[0] && primary)
    fprintf(stderr, "gemtrain: eval: --whole scores every row of dataset_path '%s'; eval_dataset_path '%s' is not "
                    "scored (without --whole it is)\n", cfg->dataset_path, cfg->eval_dataset_path);
  cfg->enable_checkpointing = 0;                       /* nothing is written */
  cfg->z_loss_multiplier = 0; /* the loss is the cross-entropy alone: its exp is the perplexity */
  gt_err err;
  gt_err_clear(&err);
  gt_rc e = GT_OK;
  if (!(r.src = malloc(sizeof *r.src))) return GT_EXIT_ERROR;
  e = gt__train_source(cfg, r.src, &r.have_src, &err);
  char from_run[2 * GT_STR_SHORT + 96] = "";
  if (!e) take_run_keys(cfg, r.src, r.have_src, from_run, sizeof from_run);
  if (!e) pick_tokenizer(cfg, r.src, r.have_src);
  if (!e) e = gt_config_validate(cfg, &err);
  if (!e) e = gt_eval_tasks_tokenizer_check(cfg, &err);
  if (!e && r.have_src == 0 && primary)
    fprintf(stderr, "gemtrain: eval: load_parameters_path is not set: scoring the model as initialised (seed %d)\n",
            cfg->init_weights_seed);
  if (!e) e = read_tasks(&r, (gt_eval_format)fmt, &err);
  for (int i = 0; !e && limit && i < r.n_tasks; i++) /* the first examples of each task, as the harness's --limit */
    while (r.tasks[i].n > limit) gt_eval_example_free(&r.tasks[i].ex[--r.tasks[i].n]);
  if (!e && r.n_tasks) {
    if (cfg->tokenizer_path[0]) e = gt_tokenizer_load(cfg->tokenizer_path, &r.tok, &err);
  }
  if (!e) {
    gt_threads_configure(cfg);
    if (!(e = gt_model_build(&r.m, cfg, &err))) r.built = 1;
  }
  if (!e && want_ppl && !(e = gt_data_open_eval(&r.data, cfg, whole, &r.mem, &err))) r.have_data = 1;
  if (!e && !(e = gt_trainer_create(&r.tr, cfg, NULL, &err)) && r.have_src) {
    gt_config c2 = *cfg;
    c2.load_full_state_path[0] = '\0';
    gt__tstate ts = {&r.m, r.tr, r.have_data ? &r.data : NULL, &c2, &r.mem, NULL, r.src, {0, 0}, NULL, NULL};
    int64_t start;
    int resumed;
    e = gt__train_restore(&ts, "", &start, &resumed, &err);
  }
  if ((e = agree(e, "setting up the evaluation", &err))) {
    if (primary) fprintf(stderr, "gemtrain: %s\n", err.msg);
    run_free(&r);
    return gt_cli_exit_code(e);
  }
  /* --json -: standard output holds the JSON alone */
  FILE *tf = json_path && !strcmp(json_path, "-") ? stderr : stdout;
  if (primary)
    fprintf(tf, "eval: %s, %lld parameters, on %lld device%s; tokenizer %s%s%s\n",
           r.have_src ? r.src->desc : "initialised parameters", (long long)gt_model_numel(&r.m),
           gt_config_total_devices(cfg), gt_config_total_devices(cfg) == 1 ? "" : "s",
           cfg->tokenizer_path[0] ? cfg->tokenizer_path : "byte tokens", from_run[0] ? "; from the run's config: " : "",
           from_run);
  gt_fsdp *f = gt_trainer_fsdp(r.tr);
  gt_eval_ppl ppl;
  if (r.have_data) {
    int row0, nrows;
    gt_mesh_rows(gt_fsdp_mesh(f), (int)gt_config_global_batch(cfg), &row0, &nrows);
    e = gt_eval_perplexity(f, &r.data, row0, nrows, &ppl, &err);
  }
  gt_encoder enc;
  gt_encoder_init(&enc, r.tok, cfg->vocab_size);
  gt_eval_opts o = gt_eval_opts_from_config(cfg);
  FILE *sf = NULL;
  if (samples_path && primary && !(sf = fopen(samples_path, "w")))
    e = gt_err_set(&err, GT_ERR_IO, "eval: cannot write '%s'", samples_path);
  e = agree(e, "opening --samples", &err);
  for (int i = 0; !e && i < r.n_tasks; i++) {
    int64_t nq = 0;
    for (int k = 0; k < r.tasks[i].n; k++) nq += r.tasks[i].ex[k].n_choices;
    double *ll = malloc(sizeof(double) * (size_t)(nq ? nq : 1));
    if (!ll) e = gt_err_set(&err, GT_ERR_NOMEM, "eval: no memory");
    if (!e) e = gt_eval_task_score(f, &enc, &o, &r.tasks[i], &r.res[i], ll, &err);
    if (!e && sf) e = write_samples(sf, &r.tasks[i], ll, &err);
    free(ll);
  }
  if (sf && fclose(sf) && !e) e = gt_err_set(&err, GT_ERR_IO, "eval: writing '%s' failed", samples_path);
  if (e) {
    if (primary) fprintf(stderr, "gemtrain: %s\n", err.msg);
    run_free(&r);
    return gt_cli_exit_code(e);
  }
  if (primary) {
    gt_eval_results_table(tf, r.have_data ? &ppl : NULL, r.res, r.n_tasks);
    char *js = gt_eval_results_json(r.have_src ? r.src->path : "", r.have_data ? &ppl : NULL, r.res, r.n_tasks);
    if (!js) {
      fprintf(stderr, "gemtrain: eval: no memory for the results\n");
      rc = GT_EXIT_ERROR;
    } else if (json_path && !strcmp(json_path, "-")) {
      printf("%s\n", js);
    } else if (json_path) {
      FILE *jf = fopen(json_path, "w");
      if (!jf || fprintf(jf, "%s\n", js) < 0 || fclose(jf)) {
        fprintf(stderr, "gemtrain: eval: cannot write '%s'\n", json_path);
        rc = GT_EXIT_ERROR;
      } else {
        fprintf(tf, "eval: results in %s\n", json_path);
      }
    }
    free(js);
  }
  run_free(&r);
  return rc;
}
