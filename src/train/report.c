#define _POSIX_C_SOURCE 200809L
#include "train/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/prof.h"

static void gt__fmt_time(double s, char *buf, size_t n) {
  if (s < 0 || !isfinite(s)) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

/* The rate counts only this process's steps (a resumed run starts at first_step). */
static void gt__progress(gt_report *r, long long done) {
  if (!r->progress) return;
  long long total = r->n_steps, first = r->first_step;
  double elapsed = gt_prof_now() - r->t_start;
  int w = 30, fill = total ? (int)(w * done / total) : w;
  char eta[32], el[32];
  gt__fmt_time(done > first ? elapsed / (double)(done - first) * (double)(total - done) : 0, eta, sizeof eta);
  gt__fmt_time(elapsed, el, sizeof el);
  fprintf(r->progress, "\r\033[K[");
  for (int i = 0; i < w; i++) fputc(i < fill ? '=' : (i == fill ? '>' : ' '), r->progress);
  fprintf(r->progress, "] step %lld/%lld  elapsed %s  ETA %s", done, total, el, eta);
  fflush(r->progress);
}

void gt_report_pause(gt_report *r) {
  if (r->progress) fprintf(r->progress, "\r\033[K"), fflush(r->progress);
}

void gt_report_note(gt_report *r, const char *fmt, ...) {
  if (!r->out) return;
  gt_report_pause(r);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(r->out, fmt, ap);
  va_end(ap);
  fflush(r->out);
}

/* Keeps the lines of metrics.jsonl for steps before `start` (later lines
 * belong to steps that will run again), fills the history from them, and
 * returns the file open for appending. A line without its newline or that
 * does not parse was cut short: it is dropped, and the console says so. */
static FILE *gt__metrics_reopen(gt_report *r, const char *path, int64_t start, gt_err *err) {
  char *keep = NULL;
  size_t klen = 0;
  FILE *f = start > 0 ? fopen(path, "r") : NULL;
  if (f) {
    FILE *mem = open_memstream(&keep, &klen);
    if (!mem) {
      fclose(f);
      gt_err_set(err, GT_ERR_NOMEM, "train: no memory to read '%s'", path);
      return NULL;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    while (mem && (len = getline(&line, &cap, f)) > 0) {
      lineno++;
      cJSON *o = line[len - 1] == '\n' ? cJSON_Parse(line) : NULL;
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
      if (!cJSON_IsObject(o)) {
        gt_report_note(r, "metrics.jsonl: dropped line %lld, cut short (%lld bytes, no whole JSON record)\n",
                       (long long)lineno, (long long)len);
      } else if (cJSON_IsNumber(st) && st->valuedouble < (double)start && st->valuedouble >= 0) {
        int64_t k = (int64_t)st->valuedouble;
        fputs(line, mem);
        if (k < r->n_steps) {
          const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss"),
                      *e = cJSON_GetObjectItemCaseSensitive(o, "eval_loss"),
                      *t = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s_per_device");
          r->ls[k] = cJSON_IsNumber(l) ? l->valuedouble : NAN;
          r->es[k] = cJSON_IsNumber(e) ? e->valuedouble : NAN;
          r->tps[k] = cJSON_IsNumber(t) ? t->valuedouble : NAN;
        }
      }
      cJSON_Delete(o);
    }
    free(line);
    if (mem) fclose(mem);
    fclose(f);
  }
  /* the kept lines replace the file at once (a temporary file renamed over
   * it), so a kill here never loses the history */
  char tmp[2300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  f = fopen(tmp, "w");
  int ok = f && (!keep || fwrite(keep, 1, klen, f) == klen) && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int e = errno;
  free(keep);
  if (f && (fclose(f) != 0 || !ok)) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    if (ok) e = errno;
    remove(tmp);
    gt_err_set(err, GT_ERR_IO, "train: cannot write '%s': %s", path, strerror(e));
    return NULL;
  }
  f = fopen(path, "a");
  if (!f) {
    gt_err_set(err, GT_ERR_IO, "train: cannot write '%s': %s", path, strerror(errno));
    return NULL;
  }
  r->metrics_good = (long)klen;
  return f;
}

gt_rc gt_report_open(gt_report *r, const gt_config *cfg, const char *run_dir, FILE *out, FILE *progress,
                     int64_t start, gt_err *err) {
  memset(r, 0, sizeof *r);
  r->out = out;
  r->progress = progress;
  r->n_steps = cfg->steps;
  r->first_step = start;
  r->log_period = cfg->log_period > 0 ? cfg->log_period : 1;
  r->clip_threshold = cfg->gradient_clipping_threshold;
  r->spike_guard = cfg->skip_step_on_spikes;
  r->t_start = gt_prof_now();
  snprintf(r->run_dir, sizeof r->run_dir, "%s", run_dir);
  snprintf(r->run_name, sizeof r->run_name, "%s", cfg->run_name);
  size_t n = r->n_steps > 0 ? (size_t)r->n_steps : 1;
  r->xs = malloc(n * sizeof(double)), r->ls = malloc(n * sizeof(double));
  r->es = malloc(n * sizeof(double)), r->tps = malloc(n * sizeof(double));
  if (!r->xs || !r->ls || !r->es || !r->tps) {
    gt_report_close(r);
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory for the metrics history");
  }
  for (int64_t i = 0; i < r->n_steps; i++) r->xs[i] = (double)i, r->ls[i] = r->es[i] = r->tps[i] = NAN;
  char path[2200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
  if (!(r->metrics = gt__metrics_reopen(r, path, start, err))) {
    gt_report_close(r);
    return err->rc;
  }
  if (cfg->enable_tensorboard) {
    snprintf(path, sizeof path, "%s/tensorboard", run_dir);
    gt_rc rc = gt_tfevents_open(&r->tb, path, err);
    r->tensorboard = !rc;
    if (!rc && start > 0) rc = gt_tfevents_write_restart(&r->tb, start, err);
    if (rc) {
      gt_report_close(r);
      return rc;
    }
  }
  return GT_OK;
}

/* non-finite values (a skipped step's loss or norm) are left out */
static void gt__tb_add(gt_tf_scalar *out, int *n, const char *tag, double v) {
  if (isfinite(v)) out[*n].tag = tag, out[(*n)++].value = (float)v;
}

int gt_report_tb_scalars(const gt_step_metrics *sm, double clip_threshold, int spike_guard, gt_report_tb *b) {
  gt_tf_scalar *out = b->v;
  int n = 0;
  gt__tb_add(out, &n, "learning/loss", sm->loss);
  gt__tb_add(out, &n, "learning/lm_loss", sm->lm_loss);
  gt__tb_add(out, &n, "learning/perplexity", sm->perplexity);
  if (sm->has_moe) gt__tb_add(out, &n, "learning/moe_lb_loss", sm->moe_lb_loss);
  if (sm->has_z_loss) gt__tb_add(out, &n, "learning/z_loss", sm->z_loss);
  if (sm->has_pref) { /* TRL's tags */
    gt__tb_add(out, &n, "rewards/chosen", sm->rewards_chosen);
    gt__tb_add(out, &n, "rewards/rejected", sm->rewards_rejected);
    gt__tb_add(out, &n, "rewards/accuracies", sm->rewards_accuracies);
    gt__tb_add(out, &n, "rewards/margins", sm->rewards_margins);
    gt__tb_add(out, &n, "logps/chosen", sm->logps_chosen);
    gt__tb_add(out, &n, "logps/rejected", sm->logps_rejected);
    if (sm->pref_orpo) {
      gt__tb_add(out, &n, "nll_loss", sm->pref_nll_loss);
      gt__tb_add(out, &n, "log_odds_ratio", sm->log_odds_ratio);
    }
  }
  /* optim.c's clip_by_global_norm scales the gradient to norm clip_threshold
   * (a non-finite norm stays non-finite: that step was skipped) */
  double g = sm->grad_norm, clipped = isfinite(g) && clip_threshold > 0 && g >= clip_threshold ? clip_threshold : g;
  gt__tb_add(out, &n, "learning/grad_norm", clipped);
  gt__tb_add(out, &n, "learning/raw_grad_norm", sm->grad_norm);
  if (sm->param_norm > 0) gt__tb_add(out, &n, "learning/param_norm", sm->param_norm);
  gt__tb_add(out, &n, "learning/current_learning_rate", sm->learning_rate);
  gt__tb_add(out, &n, "learning/total_weights", (double)sm->total_weights);
  gt__tb_add(out, &n, "perf/step_time_seconds", sm->seconds);
  /* MaxText's per-step counts (metric_logger.record_train_metrics): the
   * step's TFLOPs and tokens per device, not per second */
  gt__tb_add(out, &n, "perf/per_device_tflops", sm->tflops_per_s_per_device * sm->seconds);
  gt__tb_add(out, &n, "perf/per_device_tflops_per_sec", sm->tflops_per_s_per_device);
  gt__tb_add(out, &n, "perf/per_device_tokens", sm->tokens_per_s_per_device * sm->seconds);
  gt__tb_add(out, &n, "perf/per_device_tokens_per_sec", sm->tokens_per_s_per_device);
  gt__tb_add(out, &n, "perf/tokens_seen_per_device", (double)sm->tokens_seen_per_device);
  if (spike_guard) { /* MaxText's optim/step_skipped (skip_step_on_spikes), and the count */
    gt__tb_add(out, &n, "optim/step_skipped", sm->spike_skipped || sm->skipped ? 1.0 : 0.0);
    gt__tb_add(out, &n, "optim/skipped_steps", (double)sm->skipped_steps);
  }
  if (sm->has_checkpoint) {
    gt__tb_add(out, &n, "perf/checkpoint_write_seconds", sm->checkpoint_write_seconds);
    gt__tb_add(out, &n, "perf/checkpoint_blocked_seconds", sm->checkpoint_blocked_seconds);
  }
  if (sm->diloco_synced) {
    gt__tb_add(out, &n, "diloco/synced", 1.0);
    gt__tb_add(out, &n, "diloco/bytes", (double)sm->diloco_bytes);
  }
  if (sm->has_eval) { /* MaxText's eval tags (metric_logger._finalize_eval_metrics) */
    gt__tb_add(out, &n, "eval/avg_loss", sm->eval_loss);
    gt__tb_add(out, &n, "eval/avg_perplexity", exp(sm->eval_loss));
    gt__tb_add(out, &n, "eval/total_weights", (double)sm->eval_total_weights);
  }
  if (sm->has_eval_pref) {
    gt__tb_add(out, &n, "eval/rewards/chosen", sm->eval_rewards_chosen);
    gt__tb_add(out, &n, "eval/rewards/rejected", sm->eval_rewards_rejected);
    gt__tb_add(out, &n, "eval/rewards/accuracies", sm->eval_rewards_accuracies);
    gt__tb_add(out, &n, "eval/rewards/margins", sm->eval_rewards_margins);
  }
  int nt = sm->n_tasks < 8 ? sm->n_tasks : 8;
  for (int i = 0; i < nt; i++) {
    static const char *const what[4] = {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"};
    const double val[4] = {sm->tasks[i].acc, sm->tasks[i].acc_stderr, sm->tasks[i].acc_norm,
                           sm->tasks[i].acc_norm_stderr};
    for (int k = 0; k < 4; k++) {
      char *name = b->names[4 * i + k];
      snprintf(name, sizeof b->names[0], "eval/%.60s/%s", sm->tasks[i].name, what[k]);
      gt__tb_add(out, &n, name, val[k]);
    }
  }
  return n;
}

gt_rc gt_report_step(gt_report *r, const gt_step_metrics *sm, gt_err *err) {
  /* with DiLoCo, which replicas skipped it (the others applied it) */
  char in[64] = "";
  if (sm->diloco_replicas > 1)
    snprintf(in, sizeof in, " in %d of %d DiLoCo replicas", sm->diloco_replicas_skipped, sm->diloco_replicas);
  if (sm->no_tokens)
    gt_report_note(r, "skipped step: %lld, total_weights: 0 (no token in the loss; parameters, optimizer and "
                      "schedule unchanged)%s\n", (long long)sm->step, in);
  else if (sm->spike_skipped)
    gt_report_note(r, "skipped step: %lld, loss: %g, grad_norm: %g (a spike: above the rolling bound of "
                      "skip_step_on_spikes; parameters and optimizer unchanged; %lld skipped so far)%s\n",
                   (long long)sm->step, sm->loss, sm->grad_norm, (long long)sm->skipped_steps, in);
  else if (sm->skipped)
    gt_report_note(r, "skipped step: %lld, loss: %g, grad_norm: %g (not finite; parameters and optimizer unchanged)%s\n",
                   (long long)sm->step, sm->loss, sm->grad_norm, in);
  long long done = sm->step + 1;
  int shown = done % r->log_period == 0 || sm->step == r->first_step || done >= r->n_steps || sm->has_eval ||
              sm->n_tasks > 0 || sm->skipped || sm->no_tokens || sm->spike_skipped;
  if (r->out && shown) {
    char line[640], where[128] = "";
    gt_metrics_format_line(sm, line, sizeof line);
    /* a log has no progress bar: the line itself says how far the run is */
    if (!r->progress) {
      char eta[32], el[32];
      double elapsed = gt_prof_now() - r->t_start;
      gt__fmt_time(elapsed, el, sizeof el);
      gt__fmt_time(done > r->first_step ? elapsed / (double)(done - r->first_step) * (double)(r->n_steps - done) : 0,
                   eta, sizeof eta);
      snprintf(where, sizeof where, " (%lld of %lld steps, elapsed %s, ETA %s)", done, (long long)r->n_steps, el, eta);
    }
    gt_report_note(r, "%s%s\n", line, where);
    if (sm->has_eval || sm->n_tasks > 0) {
      char ev[2048];
      int w = snprintf(ev, sizeof ev, "eval metrics after step: %lld", (long long)sm->step);
      if (sm->has_eval)
        w += snprintf(ev + w, sizeof ev - (size_t)w, ", loss=%.3f, perplexity=%.3f, total_weights=%lld", sm->eval_loss,
                      exp(sm->eval_loss), (long long)sm->eval_total_weights);
      if (sm->has_eval_pref && w >= 0 && (size_t)w < sizeof ev)
        w += snprintf(ev + w, sizeof ev - (size_t)w, ", rewards/accuracies=%.3f, rewards/margins=%.3f",
                      sm->eval_rewards_accuracies, sm->eval_rewards_margins);
      for (int i = 0; i < sm->n_tasks && i < 8 && w >= 0 && (size_t)w < sizeof ev; i++)
        w += snprintf(ev + w, sizeof ev - (size_t)w, ", %s: acc=%.4f (stderr %.4f), acc_norm=%.4f (stderr %.4f), n=%lld",
                      sm->tasks[i].name, sm->tasks[i].acc, sm->tasks[i].acc_stderr, sm->tasks[i].acc_norm,
                      sm->tasks[i].acc_norm_stderr, (long long)sm->tasks[i].n);
      gt_report_note(r, "%s\n", ev);
    }
  }
  gt__progress(r, sm->step + 1);
  /* a failed write is cut off (the file keeps ending with a whole record)
   * and tried once more (space may have been freed meanwhile) */
  gt_metrics_opts mo = {r->spike_guard, r->goodput};
  int e = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (gt_metrics_write_jsonl(r->metrics, sm, &mo) == 0) {
      e = 0;
      break;
    }
    e = errno;
    if (ftruncate(fileno(r->metrics), r->metrics_good) != 0 || fseek(r->metrics, r->metrics_good, SEEK_SET) != 0)
      break;
    clearerr(r->metrics);
  }
  if (e)
    return gt_err_set(err, GT_ERR_IO, "train: cannot write step %lld to '%s/metrics.jsonl': %s", (long long)sm->step,
                      r->run_dir, strerror(e));
  r->metrics_good = ftell(r->metrics);
  if (sm->step >= 0 && sm->step < r->n_steps) {
    r->ls[sm->step] = sm->loss;
    r->es[sm->step] = sm->has_eval ? sm->eval_loss : NAN;
    r->tps[sm->step] = sm->tokens_per_s_per_device;
  }
  if (!r->tensorboard) return GT_OK;
  gt_report_tb *tb = malloc(sizeof *tb);
  if (!tb) return gt_err_set(err, GT_ERR_NOMEM, "train: no memory for the step's TensorBoard scalars");
  int n = gt_report_tb_scalars(sm, r->clip_threshold, r->spike_guard, tb);
  gt_rc rc = gt_tfevents_write_scalars(&r->tb, sm->step, tb->v, n, err);
  free(tb);
  if (rc) r->tensorboard = 0; /* the writer closed the file; err names it */
  return rc;
}

/* loss (train and eval) and throughput against the step */
gt_rc gt_report_plot(gt_report *r, gt_err *err) {
  int64_t n = r->n_steps;
  int ne = 0;
  for (int64_t i = 0; i < n; i++) ne += !isnan(r->es[i]);
  double *ex = malloc(sizeof(double) * (size_t)(ne + 1)), *ey = malloc(sizeof(double) * (size_t)(ne + 1));
  if (!ex || !ey) {
    free(ex), free(ey);
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory for the plot");
  }
  int k = 0;
  for (int64_t i = 0; i < n; i++)
    if (!isnan(r->es[i])) ex[k] = r->xs[i], ey[k++] = r->es[i];
  gt_series loss_s[2] = {{"train loss", r->xs, r->ls, (int)n}, {"eval loss", ex, ey, ne}};
  gt_series tp_s[1] = {{"tokens/s/device", r->xs, r->tps, (int)n}};
  char title[GT_STR_PATH + 16], path[2200];
  snprintf(title, sizeof title, "%s: loss", r->run_name);
  /* both x axes run to the run's last step, so a stopped run shows how
   * far it got; a resume is marked where it took over */
  double resumed = (double)r->first_step;
  int marks = r->first_step > 0 ? 1 : 0;
  double end = n > 0 ? (double)(n - 1) : 0;
  gt_chart charts[2] = {
      {title, "step", "loss (nats/token)", ne ? 2 : 1, loss_s, 0, 0, 1, 0, end, marks, &resumed, "resumed"},
      {"throughput", "step", "tokens/s/device", 1, tp_s, 0, 0, 1, 0, end, marks, &resumed, "resumed"}};
  snprintf(path, sizeof path, "%s/loss.svg", r->run_dir);
  gt_rc rc = gt_plot_svg(path, 2, charts, err);
  free(ex);
  free(ey);
  return rc;
}

void gt_report_close(gt_report *r) {
  gt_report_pause(r);
  if (r->metrics) fclose(r->metrics);
  gt_err ignored; /* every step was flushed: closing writes nothing that could fail */
  if (r->tensorboard) gt_tfevents_close(&r->tb, &ignored);
  r->tensorboard = 0;
  free(r->xs), free(r->ls), free(r->es), free(r->tps);
  r->metrics = NULL;
  r->xs = r->ls = r->es = r->tps = NULL;
}
