#define _POSIX_C_SOURCE 200809L
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/data.h"
#include "decode/decode.h"
#include "exec/exec.h"
#include "config/flops.h"
#include "mesh/fsdp.h"
#include "hf/hf.h"
#include "gemtrain/metrics.h"
#include "model/model.h"
#include "train/optim.h"
#include "exec/plan.h"
#include "tokenizer/tokenizer.h"
#include "train/train_internal.h"
#include "base/prof.h"

/* SIGINT/SIGTERM: the loop finishes its step, checkpoints and returns. */
static volatile sig_atomic_t gt__stop_signal;
static void gt__on_signal(int sig) { gt__stop_signal = sig; }

static void gt__fmt_time(double s, char *buf, size_t n) {
  if (s < 0 || !isfinite(s)) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

/* first: the step this process started at (a resumed run's rate counts
 * only its own steps) */
static void gt__progress(FILE *tty, long long first, long long done, long long total, double elapsed) {
  if (!tty) return;
  int w = 30, fill = total ? (int)(w * done / total) : w;
  char eta[32], el[32];
  gt__fmt_time(done > first ? elapsed / (double)(done - first) * (double)(total - done) : 0, eta, sizeof eta);
  gt__fmt_time(elapsed, el, sizeof el);
  fprintf(tty, "\r\033[K[");
  for (int i = 0; i < w; i++) fputc(i < fill ? '=' : (i == fill ? '>' : ' '), tty);
  fprintf(tty, "] step %lld/%lld  elapsed %s  ETA %s", done, total, el, eta);
  fflush(tty);
}

static void gt__clear_progress(FILE *tty) {
  if (tty) fprintf(tty, "\r\033[K"), fflush(tty);
}

/* Copies the next train (or eval) batch out of the data source's buffers. */
static void gt__copy_batch(gt_batch *dst, gt_data *d, int eval) {
  gt_batch b;
  if (eval)
    gt_data_next_eval(d, &b);
  else
    gt_data_next_train(d, &b);
  size_t n = (size_t)b.B * (size_t)b.T * sizeof(int32_t);
  memcpy((int32_t *)dst->inputs, b.inputs, n);
  memcpy((int32_t *)dst->targets, b.targets, n);
  memcpy((int32_t *)dst->positions, b.positions, n);
}

static gt_rc gt__eval(gt_model *m, gt_fsdp *fs, gt_batch *mb, gt_data *d, const gt_config *c, double *loss,
                      int64_t *tw, gt_err *err) {
  gt_loss_stats st = {0, 0, 0};
  gt_data_eval_reset(d);
  if (fs) {
    for (long long i = 0; i < c->eval_steps; i++) gt__copy_batch(&mb[i], d, 1);
    gt_rc rc = gt_fsdp_eval(fs, mb, (int)c->eval_steps, &st, err);
    if (rc) return rc;
  } else {
    for (long long i = 0; i < c->eval_steps; i++) {
      gt_batch b;
      gt_data_next_eval(d, &b);
      gt_rc rc = gt_exec_forward_loss(m, &b, (int)c->num_vocab_tiling, &st, err);
      if (rc) return rc;
    }
  }
  *loss = st.xent_sum / (double)st.total_weights;
  *tw = st.total_weights;
  return GT_OK;
}

/* Continue the prompt by sampling (temperature 0.7, seeded) with the cached
 * decoder (decode.h): one pass over the prompt, then one token per step.
 * With tokenizer_path the prompt and the sample go through that tokenizer. */
static gt_rc gt__sample(gt_model *m, const gt_config *c, FILE *out, gt_err *err) {
  int64_t n_new = c->sample_tokens, plen = (int64_t)strlen(c->sample_prompt);
  gt_tokenizer *tok = NULL;
  int32_t *prompt = NULL;
  int64_t np = plen;
  if (c->tokenizer_path[0]) {
    gt_rc r = gt_tokenizer_load(c->tokenizer_path, &tok, err);
    if (!r) r = gt_tokenizer_encode(tok, c->sample_prompt, (size_t)plen, 0, &prompt, &np, err);
    if (r) {
      gt_tokenizer_free(tok);
      return r;
    }
  }
  int64_t n_prompt = 1 + np;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_new));
  unsigned char *text = malloc((size_t)(n_prompt + n_new) + 1);
  char *dtext = NULL;
  size_t nd = 0;
  gt_decoder dec;
  gt_sampler smp;
  gt_decode_stats st;
  memset(&dec, 0, sizeof dec);
  memset(&smp, 0, sizeof smp);
  gt_rc rc = GT_OK;
  if (!ids || !text) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "sample: no memory");
    goto done;
  }
  ids[0] = GT_TOK_BOS;
  if (tok)
    memcpy(ids + 1, prompt, (size_t)np * sizeof(int32_t));
  else
    gt_bytes_encode((const unsigned char *)c->sample_prompt, plen, ids + 1);
  if ((rc = gt_decoder_init(&dec, m, n_prompt + n_new, err)) ||
      (rc = gt_sampler_init(&smp, GT_SAMPLE_WEIGHTED, 0.7, 0, -1.0, 0x5EED0000ull + (uint64_t)c->init_weights_seed,
                            m->vocab, err)) ||
      (rc = gt_decode_generate(&dec, &smp, ids, n_prompt, n_new, ids + n_prompt, NULL, &st, err)))
    goto done;
  if (tok) {
    if ((rc = gt_tokenizer_decode(tok, ids, n_prompt + st.n_new, GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE,
                                  &dtext, &nd, err)))
      goto done;
  } else {
    int64_t nb = gt_bytes_decode(ids, n_prompt + st.n_new, text);
    text[nb] = '\0';
  }
  if (out)
    fprintf(out, "sample (%lld tokens after the prompt):\n%s\n", (long long)st.n_new, dtext ? dtext : (char *)text);
done:
  gt_sampler_free(&smp);
  gt_decoder_free(&dec);
  gt_tokenizer_free(tok);
  free(prompt);
  free(dtext);
  free(ids);
  free(text);
  return rc;
}

gt_rc gt_train(const gt_config *cfg_in, const gt_train_opts *o, gt_train_result *res, gt_err *err) {
  gt_config cfg = *cfg_in;
  gt_train_opts none = {NULL, NULL, 0};
  if (!o) o = &none;
  FILE *out = o->out;
  memset(res, 0, sizeof *res);
  res->last_eval_loss = NAN;
  gt_rc rc;
  /* An HF directory defines the model: its config.json replaces the model
   * keys before anything is planned. */
  int hf = cfg.load_parameters_path[0] && gt_hf_is_dir(cfg.load_parameters_path);
  if (hf && (rc = gt_hf_config_read(cfg.load_parameters_path, &cfg, NULL, err))) return rc;
  if ((rc = gt_config_validate(&cfg, err))) return rc;
  if (cfg.num_devices > 1 && cfg.per_device_batch_size != floor(cfg.per_device_batch_size))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'per_device_batch_size' = %g must be a whole number when num_devices = %lld "
                      "(each device takes its own rows of the global batch)",
                      cfg.per_device_batch_size, cfg.num_devices);
  int threads = gt_threads_configure(&cfg);
  /* the plan decides before anything large is allocated */
  gt_plan plan;
  if ((rc = gt_plan_compute(&plan, &cfg, err))) return rc;
  int64_t limit = gt_plan_memory_limit(&cfg);
  int64_t need = gt_plan_total_bytes(&plan);
  if (need > limit) {
    if (out) gt_plan_print(out, &plan, &cfg);
    rc = gt_err_set(err, GT_ERR_PLAN,
                    "train: the plan needs %.1f MiB (%lld device%s x (%.1f + host pool %.1f)) but the limit is "
                    "%.1f MiB (%s): over by %.1f MiB",
                    (double)need / 1048576.0, cfg.num_devices, cfg.num_devices > 1 ? "s" : "",
                    (double)plan.peak_total / 1048576.0, (double)plan.host_peak / 1048576.0,
                    (double)limit / 1048576.0, cfg.memory_limit_bytes ? "memory_limit_bytes" : "available RAM",
                    (double)(need - limit) / 1048576.0);
    gt_plan_free(&plan);
    return rc;
  }
  int64_t planned_peak = plan.peak_total;
  gt_plan_free(&plan);

  if (!cfg.run_name[0]) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(cfg.run_name, sizeof cfg.run_name, "%s-%s", cfg.model_name[0] ? cfg.model_name : "model", stamp);
  }
  snprintf(res->run_dir, sizeof res->run_dir, "%s/%s", cfg.base_output_directory, cfg.run_name);
  if ((rc = gt_mkdirs(res->run_dir, "train", err))) return rc;
  char path[2200];
  snprintf(path, sizeof path, "%s/config.json", res->run_dir);
  if ((rc = gt_config_write_json(&cfg, path, err))) return rc;
  FILE *mf = NULL;

  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_optim opt = {0};
  gt_fsdp *fs = NULL;
  gt_batch *mb = NULL;
  int32_t *mbuf = NULL;
  gt_data data;
  memset(&data, 0, sizeof data);
  struct sigaction sa_old[2];
  int sig_installed = 0;
  int64_t n_steps = cfg.steps;
  double *xs = calloc((size_t)n_steps, sizeof(double)), *ls = calloc((size_t)n_steps, sizeof(double));
  double *es = calloc((size_t)n_steps, sizeof(double)), *tps = calloc((size_t)n_steps, sizeof(double));
  if ((rc = gt_model_build(&m, &cfg, err))) goto out_nomodel;
  if (!xs || !ls || !es || !tps) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "train: no memory for the metrics history");
    goto out;
  }
  for (int64_t i = 0; i < n_steps; i++) xs[i] = (double)i, ls[i] = es[i] = tps[i] = NAN;
  if ((rc = gt_data_open(&data, &cfg, &mem, err))) goto out;
  int ga = (int)cfg.gradient_accumulation_steps;
  if (cfg.num_devices > 1) {
    /* sharded: the devices own parameters and optimizer state; the host keeps
     * copies of the micro-batches the devices read their rows from */
    if ((rc = gt_fsdp_create(&fs, &cfg, err))) goto out;
    int64_t nb = gt_config_global_batch(&cfg) * cfg.max_target_length;
    int nbuf = ga > (int)cfg.eval_steps ? ga : (int)cfg.eval_steps;
    mb = calloc((size_t)nbuf, sizeof *mb);
    mbuf = gt_mem_alloc_uninit(&mem, GT_MEM_DATA, (size_t)(3 * nbuf) * (size_t)nb * sizeof(int32_t));
    if (!mb || !mbuf) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "train: no memory for %d batches", nbuf);
      goto out;
    }
    for (int i = 0; i < nbuf; i++)
      mb[i] = (gt_batch){(int)gt_config_global_batch(&cfg), (int)cfg.max_target_length, mbuf + (3 * i) * nb,
                         mbuf + (3 * i + 1) * nb, mbuf + (3 * i + 2) * nb, NULL};
  } else {
    if ((rc = gt_model_alloc(&m, &mem, err))) goto out;
    gt_model_init_params(&m, (uint64_t)cfg.init_weights_seed, cfg.weight_init_scale);
    if ((rc = gt_optim_init(&opt, m.n_params, &mem, err))) goto out;
  }

  /* what the run starts from: its own checkpoint, another run's state or
   * parameters, or the initialisation above */
  int64_t start_step = 0;
  int resumed = 0;
  gt__tstate ts = {&m, &opt, fs, &data, &cfg, &mem, out};
  if ((rc = gt__train_restore(&ts, res->run_dir, &start_step, &resumed, err))) goto out;
  res->start_step = start_step;
  snprintf(path, sizeof path, "%s/metrics.jsonl", res->run_dir);
  if (!(mf = gt__metrics_reopen(path, resumed ? start_step : 0, xs, ls, es, tps, n_steps, err))) {
    rc = err->rc;
    goto out;
  }
  const char *nan_env = getenv("GEMTRAIN_TEST_NAN_STEP"); /* test hook: poison that step's gradient */
  int64_t nan_step = nan_env ? atoll(nan_env) : -1;
  const char *sig_env = getenv("GEMTRAIN_TEST_SIGNAL_STEP");
  int64_t sig_step = sig_env ? atoll(sig_env) : -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = gt__on_signal;
  sa.sa_flags = SA_RESETHAND; /* a second signal is not caught: it kills */
  sigemptyset(&sa.sa_mask);
  gt__stop_signal = 0;
  if (o->handle_signals) sigaction(SIGINT, &sa, &sa_old[0]), sigaction(SIGTERM, &sa, &sa_old[1]), sig_installed = 1;

  gt_flops fl = gt_flops_per_step_per_device(&cfg);
  int B = (int)gt_config_global_batch(&cfg), T = (int)cfg.max_target_length;
  if (out) {
    int nglob = 0;
    for (int64_t l = 0; l < m.n_layers; l++) nglob += m.layers[l].kind == GT_LAYER_GLOBAL;
    fprintf(out, "gemtrain %s: %s, %lld layers (%lld local with window %lld, %d global), d=%lld, H=%lld, "
                 "K=%lld, head_dim=%lld, F=%lld, vocab=%lld\n",
            gt_version(), cfg.model_name, (long long)m.n_layers, (long long)m.n_layers - nglob,
            cfg.sliding_window_size, nglob, cfg.base_emb_dim, cfg.base_num_query_heads,
            cfg.base_num_kv_heads, cfg.head_dim, cfg.base_mlp_dim, cfg.vocab_size);
    fprintf(out, "number parameters: %.3f billion (%lld)\n", (double)m.n_params / 1e9, (long long)m.n_params);
    fprintf(out, "Per train step:\n Total TFLOPs: %.4f \n split as %.2f%% learnable weight flops and %.2f%% "
                 "attention flops\n",
            fl.total_tflops, 100 * fl.learnable_tflops / fl.total_tflops,
            100 * fl.attention_tflops / fl.total_tflops);
    if (data.kind == 1)
      fprintf(out, "data: %s '%s', %lld tokens (%lld train, %lld eval); global batch %d x %d tokens\n",
              cfg.dataset_type, cfg.dataset_path, (long long)data.n_stream, (long long)data.n_train,
              (long long)(data.n_stream - data.n_train), B, T);
    else
      fprintf(out, "data: synthetic, one fixed batch of %d x %d uniform ids\n", B, T);
    fprintf(out, "devices: %lld, threads: %d; remat_policy=%s remat_scope=%s, planned peak %.1f MiB; run directory: %s\n",
            cfg.num_devices, threads, cfg.remat_policy, cfg.remat_scope, (double)planned_peak / 1048576.0,
            res->run_dir);
    fflush(out);
  }

  if (start_step >= n_steps && out)
    fprintf(out, "nothing to do: the checkpoint is at step %lld and steps = %lld\n", (long long)start_step,
            (long long)n_steps);
  int64_t last_saved = resumed ? start_step : -1;
  double t_start = gt_prof_now();
  for (int64_t step = start_step; step < n_steps; step++) {
    double t0 = gt_prof_now();
    gt_mem_reset_peaks(&mem);
    gt_loss_stats st = {0, 0, 0};
    double loss, lm_loss, lb_loss = 0;
    gt_update_info ui;
    if (fs) {
      for (int micro = 0; micro < ga; micro++) gt__copy_batch(&mb[micro], &data, 0);
      if (step == nan_step) gt_fsdp_poison_next_step(fs);
      gt_fsdp_step_info fi;
      if ((rc = gt_fsdp_step(fs, mb, ga, &fi, err))) goto out;
      lm_loss = fi.loss;
      lb_loss = fi.moe_lb_loss;
      loss = lm_loss + lb_loss;
      st.total_weights = fi.total_weights;
      ui = fi.update;
      goto step_done;
    }
    gt_model_zero_grads(&m);
    for (int micro = 0; micro < ga; micro++) {
      gt_batch b;
      gt_data_next_train(&data, &b);
      /* with accumulation, sum raw per-token gradients and divide once by
       * the step's total weight (MaxText's raw-sum convention) */
      float w = ga == 1 ? 1.0f / (float)gt_batch_total_weights(&b) : 1.0f;
      if ((rc = gt_exec_forward_backward(&m, &b, (int)cfg.num_vocab_tiling, w, &st, err))) goto out;
    }
    if (ga > 1) {
      float inv = 1.0f / (float)st.total_weights;
      for (int64_t i = 0; i < m.n_params; i++) m.grads[i] *= inv;
    }
    lm_loss = st.xent_sum / (double)st.total_weights;
    /* MaxText adds the mean of the MoE layers' load-balance losses (moe_dlb
     * = 1 / MoE layers; accumulation is refused with MoE) */
    lb_loss = st.moe_lb_sum * (double)m.moe_dlb;
    loss = lm_loss + lb_loss;
    if (step == nan_step) m.grads[0] = NAN;
    if (isfinite(loss))
      gt_optim_step(&opt, m.params, m.grads, &cfg, &ui); /* skips a non-finite norm itself */
    else
      ui = (gt_update_info){gt_grad_norm(m.grads, m.n_params), gt_lr_at(&cfg, opt.t), 1.0, 1};
  step_done:
    if (ui.skipped) {
      /* nothing was updated; stop before anything is written, or go on */
      if (!cfg.skip_nonfinite_steps) {
        rc = gt_err_set(err, GT_ERR_NUMERIC,
                        "train: step %lld has loss %g and gradient norm %g; stopping without applying it or writing a "
                        "checkpoint (skip_nonfinite_steps=true would skip such steps)",
                        (long long)step, loss, ui.grad_norm);
        goto out;
      }
      res->skipped_steps++;
      if (out)
        gt__clear_progress(o->progress),
            fprintf(out, "skipped step: %lld, loss: %g, grad_norm: %g (not finite; parameters and optimizer unchanged)\n",
                    (long long)step, loss, ui.grad_norm);
    }
    double secs = gt_prof_now() - t0;
    gt_step_metrics sm = {0};
    sm.step = step;
    sm.seconds = secs;
    sm.tflops_per_s_per_device = fl.total_tflops / secs;
    sm.tokens_per_s_per_device = (double)T * cfg.per_device_batch_size * ga / secs;
    sm.total_weights = st.total_weights;
    sm.loss = loss;
    sm.lm_loss = lm_loss;
    sm.perplexity = exp(lm_loss);
    sm.has_moe = m.n_moe_layers > 0;
    sm.moe_lb_loss = lb_loss;
    sm.learning_rate = ui.lr;
    sm.grad_norm = ui.grad_norm;
    sm.skipped = ui.skipped;
    sm.peak_memory_bytes = gt_mem_total_peak(&mem);
    if (fs) /* per device, as MaxText reports device memory: the largest */
      for (int dv = 0; dv < gt_fsdp_devices(fs); dv++) {
        int64_t p = gt_mem_total_peak(gt_fsdp_device_mem(fs, dv));
        if (p > sm.peak_memory_bytes) sm.peak_memory_bytes = p;
      }
    int last = step == n_steps - 1;
    if (data.kind == 1 && cfg.eval_interval >= 0 &&
        ((cfg.eval_interval > 0 && (step + 1) % cfg.eval_interval == 0) || last)) {
      if ((rc = gt__eval(fs ? NULL : &m, fs, mb, &data, &cfg, &sm.eval_loss, &sm.eval_total_weights, err))) goto out;
      sm.has_eval = 1;
      res->last_eval_loss = sm.eval_loss;
    }
    if (out) {
      char line[512];
      gt_metrics_format_line(&sm, line, sizeof line);
      gt__clear_progress(o->progress);
      fprintf(out, "%s\n", line);
      if (sm.has_eval)
        fprintf(out, "eval metrics after step: %lld, loss=%.3f, perplexity=%.3f, total_weights=%lld\n",
                (long long)step, sm.eval_loss, exp(sm.eval_loss), (long long)sm.eval_total_weights);
      fflush(out);
    }
    gt__progress(o->progress, start_step, step + 1, n_steps, gt_prof_now() - t_start);
    gt_metrics_write_jsonl(mf, &sm);
    xs[step] = (double)step;
    ls[step] = loss;
    es[step] = sm.has_eval ? sm.eval_loss : NAN;
    tps[step] = sm.tokens_per_s_per_device;
    if (step == 0) res->first_loss = loss;
    res->last_loss = loss;
    res->steps_done = step + 1;
    if (sm.peak_memory_bytes > res->peak_memory_bytes) res->peak_memory_bytes = sm.peak_memory_bytes;
    if (sig_installed && step == sig_step) raise(SIGTERM); /* test hook: a real signal, at a known step */
    int stop = gt__stop_signal != 0;
    if (cfg.enable_checkpointing &&
        (stop || (step + 1) % cfg.checkpoint_period == 0 || (last && cfg.save_checkpoint_on_completion))) {
      gt__clear_progress(o->progress);
      if ((rc = gt__train_save(&ts, res->run_dir, step + 1, err))) goto out;
      last_saved = step + 1;
    }
    if (stop) {
      res->interrupted = 1;
      if (out)
        fprintf(out, "stopped by %s after step %lld%s\n", gt__stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                (long long)step,
                cfg.enable_checkpointing ? "; run the same command again to resume" : " (enable_checkpointing=false: no checkpoint)");
      break;
    }
  }
  gt__clear_progress(o->progress);

  /* plot: loss (train and eval) and throughput against the step */
  {
    int ne = 0;
    for (int64_t i = 0; i < n_steps; i++) ne += !isnan(es[i]);
    double *ex = malloc(sizeof(double) * (size_t)(ne + 1)), *ey = malloc(sizeof(double) * (size_t)(ne + 1));
    int k = 0;
    for (int64_t i = 0; i < n_steps; i++)
      if (!isnan(es[i])) ex[k] = xs[i], ey[k++] = es[i];
    gt_series loss_s[2] = {{"train loss", xs, ls, (int)n_steps}, {"eval loss", ex, ey, ne}};
    gt_series tp_s[1] = {{"tokens/s/device", xs, tps, (int)n_steps}};
    char title[1100];
    snprintf(title, sizeof title, "%s: loss", cfg.run_name);
    gt_chart charts[2] = {{title, "step", "loss (nats/token)", ne ? 2 : 1, loss_s, 0},
                          {"throughput", "step", "tokens/s/device", 1, tp_s, 0}};
    snprintf(path, sizeof path, "%s/loss.svg", res->run_dir);
    rc = gt_plot_svg(path, 2, charts, err);
    free(ex);
    free(ey);
    if (rc) goto out;
  }
  if (out) {
    fprintf(out, "peak memory: %.1f MiB planned, %.1f MiB measured (params %.1f, grads %.1f, optimizer %.1f, saved activations "
                 "%.1f, temporaries %.1f, logits %.1f MiB)\n",
            (double)planned_peak / 1048576.0, (double)res->peak_memory_bytes / 1048576.0,
            (double)gt_mem_peak(&mem, GT_MEM_PARAMS) / 1048576.0,
            (double)gt_mem_peak(&mem, GT_MEM_GRADS) / 1048576.0, (double)gt_mem_peak(&mem, GT_MEM_OPTIM) / 1048576.0,
            (double)gt_mem_peak(&mem, GT_MEM_SAVED) / 1048576.0, (double)gt_mem_peak(&mem, GT_MEM_TEMP) / 1048576.0,
            (double)gt_mem_peak(&mem, GT_MEM_LOGITS) / 1048576.0);
    if (last_saved >= 0)
      fprintf(out, "wrote %s/config.json, metrics.jsonl, loss.svg and checkpoints/ (latest: step_%08lld)\n",
              res->run_dir, (long long)last_saved);
    else
      fprintf(out, "wrote %s/config.json, metrics.jsonl and loss.svg\n", res->run_dir);
  }
  if (!res->interrupted && cfg.sample_tokens > 0 && cfg.vocab_size >= GT_BYTE_VOCAB &&
      strcmp(cfg.dataset_type, "tokens")) {
    if (fs) { /* sample on the host from the gathered parameters */
      if ((rc = gt_model_alloc(&m, &mem, err)) || (rc = gt_fsdp_full_params(fs, m.params, err))) goto out;
    }
    rc = gt__sample(&m, &cfg, out, err);
  }
out:
  if (sig_installed) sigaction(SIGINT, &sa_old[0], NULL), sigaction(SIGTERM, &sa_old[1], NULL);
  gt_fsdp_destroy(fs);
  free(mb);
  gt_mem_free(&mem, mbuf);
  gt_optim_free(&opt);
  gt_data_close(&data);
out_nomodel:
  gt_model_free(&m);
  free(xs);
  free(ls);
  free(es);
  free(tps);
  if (mf) fclose(mf);
  return rc;
}
