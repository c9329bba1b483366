/* gemtrain train: setup, then the step loop. The step is the trainer's
 * (train/trainer.h); what the run prints and logs is the reporter's
 * (train/report.h); what is saved and restored is train_state.c's. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "train/train.h"

#include <ftw.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/prof.h"
#include "decode/decode.h"
#include "dist/dist.h"
#include "eval/eval.h"
#include "model/model.h"
#include "model/qstore.h"
#include "train/config_agree.h"
#include "hf/peft.h"
#include "train/diloco.h"
#include "train/goodput.h"
#include "train/plan.h"
#include "train/profiler.h"
#include "train/report.h"
#include "train/run_lock.h"
#include "train/train_internal.h"
#include "train/trainer.h"

/* The plan decides before anything large is allocated. */
static gt_rc gt__check_plan(const gt_config *cfg, FILE *out, int64_t *planned_peak, int *snapshot_fits, gt_err *err) {
  gt_plan plan;
  gt_rc rc = gt_plan_compute(&plan, cfg, err);
  if (rc) return rc;
  int64_t limit = gt_plan_memory_limit(cfg), need = gt_plan_total_bytes(&plan);
  *planned_peak = plan.peak_total;
  /* async_checkpointing's snapshot, beside the step (else synchronous saves) */
  *snapshot_fits = need + plan.ckpt_snapshot_bytes <= limit;
  if (need > limit) {
    if (out) gt_plan_print(out, &plan, cfg);
    rc = gt_err_set(err, GT_ERR_PLAN,
                    "train: the plan needs %.1f MiB (%lld device%s x (%.1f + host pool %.1f)) but the limit is "
                    "%.1f MiB (%s): over by %.1f MiB",
                    (double)need / 1048576.0, cfg->num_devices, cfg->num_devices > 1 ? "s" : "",
                    (double)plan.peak_total / 1048576.0, (double)plan.host_peak / 1048576.0,
                    (double)limit / 1048576.0, cfg->memory_limit_bytes ? "memory_limit_bytes" : "available RAM",
                    (double)(need - limit) / 1048576.0);
  }
  gt_plan_free(&plan);
  return rc;
}

static gt_rc gt__run_dir_local(gt_config *cfg, char *dir, size_t n, gt_run_lock *lock, int *created, gt_err *err);

/* <base_output_directory>/<run_name> (run_name defaults to model-timestamp),
 * created and locked for this run (one run per directory), with the resolved
 * config.json written once the lock is held. *created: this process made
 * the directory (rank 0), so a start refused after it removes it again. */
static gt_rc gt__run_dir(gt_config *cfg, char *dir, size_t n, gt_run_lock *lock, int *created, gt_err *err) {
  /* over MPI ranks the directory is rank 0's: its name (a timestamp by
   * default) goes to every rank, and only rank 0 creates, locks and writes
   * it (on several machines it must be on a shared filesystem) */
  if (gt_dist_size() > 1) {
    gt_rc rc = GT_OK;
    if (gt_dist_rank() == 0) {
      rc = gt__run_dir_local(cfg, dir, n, lock, created, err);
    }
    gt_err e2;
    gt_err_clear(&e2);
    gt_rc brc = gt_dist_bcast(cfg->run_name, sizeof cfg->run_name, 0, "the run directory's name", &e2);
    if (brc) {
      *err = e2;
      return brc;
    }
    snprintf(dir, n, "%s/%s", cfg->base_output_directory, cfg->run_name);
    gt_err mine = *err;
    return gt_dist_agree(rc, &mine, "setting up the run directory", err);
  }
  return gt__run_dir_local(cfg, dir, n, lock, created, err);
}

static gt_rc gt__run_dir_local(gt_config *cfg, char *dir, size_t n, gt_run_lock *lock, int *created, gt_err *err) {
  /* empty, the run would write at the filesystem's root */
  if (!cfg->base_output_directory[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "train: key 'base_output_directory' is empty; give a directory ('.' for here)");
  gt_rc rc;
  if (!cfg->run_name[0]) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32], stem[sizeof cfg->run_name];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(stem, sizeof stem, "%s-%s", cfg->model_name[0] ? cfg->model_name : "model", stamp);
    for (char *q = stem; *q; q++) /* "hf:dir" names a source, not a path */
      if (*q == ':' || *q == '/') *q = '-';
    /* an unnamed run never resumes another: its directory is new, made
     * exclusively (a run started in the same second takes the next suffix) */
    if ((rc = gt_mkdirs(cfg->base_output_directory, "train", err))) return rc;
    for (int i = 1;; i++) {
      if (i == 1)
        snprintf(cfg->run_name, sizeof cfg->run_name, "%s", stem);
      else
        snprintf(cfg->run_name, sizeof cfg->run_name, "%.*s-%d", (int)sizeof cfg->run_name - 16, stem, i);
      snprintf(dir, n, "%s/%s", cfg->base_output_directory, cfg->run_name);
      if (mkdir(dir, 0755) == 0) {
        *created = 1;
        break;
      }
      if (errno != EEXIST || i >= 100000)
        return gt_err_set(err, GT_ERR_IO, "train: cannot create the run directory '%s': %s", dir, strerror(errno));
    }
  } else {
    snprintf(dir, n, "%s/%s", cfg->base_output_directory, cfg->run_name);
    struct stat st;
    *created = stat(dir, &st) != 0;
    if ((rc = gt_mkdirs(dir, "train", err))) return rc;
  }
  return gt_run_lock_take(lock, dir, err);
}

static int gt__rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path); /* what cannot go stays; the rest is still removed */
  return 0;
}

/* A start refused after the run directory was made (the data, the model
 * source or a checkpoint refused): the directory this process made holds
 * nothing of a run, only its config.json, lock and empty records, and is
 * removed, so the refusal leaves nothing behind to resume by mistake. */
static void gt__remove_new_run_dir(const char *dir) { nftw(dir, gt__rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* What trains, where TensorBoard and the trace show it: scalars under setup/
 * (parameter elements: all, trainable, frozen, adapters) at the run's first
 * step, and the same counts (with the adapters' rank) in trace.json's
 * otherData. */
static gt_rc gt__setup_record(gt_report *r, gt_profiler *prof, const gt_config *c, const gt_model *m, int64_t start,
                              gt_err *err) {
  int64_t n_el = gt_model_numel(m);
  snprintf(prof->other, sizeof prof->other,
           "\"parameters\":%lld,\"trainable_parameters\":%lld,\"frozen_parameters\":%lld,\"lora_parameters\":%lld,"
           "\"lora_rank\":%d,\"frozen_base_qtype\":\"%s\"",
           (long long)n_el, (long long)m->n_trainable, (long long)(n_el - m->n_trainable), (long long)m->n_lora_params,
           m->n_lora_tensors ? m->lora_rank : 0, c->lora_weight_qtype);
  if (!r->tensorboard) return GT_OK;
  gt_tf_scalar v[] = {{"setup/num_parameters", (float)n_el},
                      {"setup/num_trainable_parameters", (float)m->n_trainable},
                      {"setup/num_frozen_parameters", (float)(n_el - m->n_trainable)},
                      {"setup/num_lora_parameters", (float)m->n_lora_params}};
  gt_rc rc = gt_tfevents_write_scalars(&r->tb, start, v, 4, err);
  if (rc) r->tensorboard = 0; /* the writer closed the file; err names it */
  return rc;
}

static void gt__header(gt_report *r, const gt_config *c, const gt_model *m, const gt_data *d, int threads,
                       int64_t planned_peak) {
  gt_flops fl = gt_flops_per_step_per_device(c);
  int nglob = 0;
  for (int64_t l = 0; l < m->n_layers; l++) nglob += m->layers[l].kind == GT_LAYER_GLOBAL;
  gt_report_note(r, "gemtrain %s: %s, %lld layers (%lld local with window %lld, %d global), d=%lld, H=%lld, "
                    "K=%lld, head_dim=%lld, F=%lld, vocab=%lld\n",
                 gt_version(), c->model_name, (long long)m->n_layers, (long long)m->n_layers - nglob,
                 c->sliding_window_size, nglob, c->base_emb_dim, c->base_num_query_heads, c->base_num_kv_heads,
                 c->head_dim, c->base_mlp_dim, c->vocab_size);
  int64_t n_el = gt_model_numel(m); /* elements (a quantized base takes fewer words) */
  gt_report_note(r, "number parameters: %.3f billion (%lld)\n", (double)n_el / 1e9, (long long)n_el);
  static const char *const lora_keys[] = {"lora_rank", "lora_alpha", "lora_use_rslora", "lora_module_path",
                                          "lora_dropout", "lora_restore_path"};
  for (size_t i = 0; !c->enable_lora && i < sizeof lora_keys / sizeof lora_keys[0]; i++)
    if (gt_config_is_user_set(c, lora_keys[i])) {
      gt_report_note(r, "note: key '%s' is set but enable_lora = false: no adapters (enable_lora=true adds them)\n",
                     lora_keys[i]);
      break;
    }
  if (m->n_lora_tensors)
    gt_report_note(r, "adapters (LoRA): %lld parameters in %d tensors, rank %d, scale %g, dropout %g\n",
                   (long long)m->n_lora_params, m->n_lora_tensors, m->lora_rank, (double)m->lora_scale,
                   (double)m->lora_dropout);
  char peft_base[GT_STR_PATH];
  if (m->n_lora_tensors && c->lora_restore_path[0] && gt_peft_base_model(c->lora_restore_path, peft_base, sizeof peft_base))
    gt_report_note(r, "adapters from %s, trained over '%s' (its adapter_config.json); the base here: %s\n",
                   c->lora_restore_path, peft_base, c->load_parameters_path);
  if (m->n_frozen_tensors)
    gt_report_note(r, "trainable parameters: %lld, frozen: %lld in %d tensors (no gradient, no optimizer state)\n",
                   (long long)m->n_trainable, (long long)(n_el - m->n_trainable), m->n_frozen_tensors);
  gt_report_note(r, "Per train step:\n Total TFLOPs: %.4f \n split as %.2f%% learnable weight flops and %.2f%% "
                    "attention flops\n",
                 fl.total_tflops, 100 * fl.learnable_tflops / fl.total_tflops, 100 * fl.attention_tflops / fl.total_tflops);
  gt_report_note(r, "%s\n", gt_data_describe(d));
  gt_report_note(r, "devices: %lld, threads: %d; remat_policy=%s remat_scope=%s, planned peak %.1f MiB; run directory: %s\n",
                 c->num_devices, threads, c->remat_policy, c->remat_scope, (double)planned_peak / 1048576.0, r->run_dir);
  if (strcmp(c->dtype, "float32") || strcmp(c->mu_dtype, "float32"))
    gt_report_note(r, "precision: dtype=%s (activations%s in %s%s; sums, statistics and the loss in float32), "
                      "master weights %s, gradients float32, AdamW mu %s and nu float32\n",
                   c->dtype, m->bf16_mm ? " and matmul inputs" : m->bf16_act ? " and the weights' copies" : "",
                   m->bf16_act ? "bf16" : "float32",
                   m->bf16_act && !m->bf16_mm ? ", the products in float32 on them and on unrounded gradients" : "",
                   c->weight_dtype, c->mu_dtype);
  long long R = gt_config_num_ranks(c);
  if (R > 1) {
    int id, i_f, ie, dd, df, de;
    gt_config_mesh_axes(c, &id, &i_f, &ie);
    gt_config_dcn_axes(c, &dd, &df, &de);
    gt_report_note(r, "mesh: %lld ranks x %lld device%s per rank = %lld devices; data %d (dcn %d x ici %d), fsdp %d "
                      "(dcn %d x ici %d), expert %d (dcn %d x ici %d); MPI threads: %s\n",
                   R, c->num_devices, c->num_devices > 1 ? "s" : "", R * c->num_devices, dd * id, dd, id, df * i_f, df,
                   i_f, de * ie, de, ie, gt_dist_thread_level());
  }
  if (c->enable_diloco)
    gt_report_note(r, "DiLoCo: %lld replicas of %lld rank%s (every figure above is one replica's), each training on "
                      "its own rows of the batch; the replicas sync every %lld steps (outer lr %g, Nesterov momentum "
                      "%g)\n",
                   c->dcn_diloco_parallelism, R, R > 1 ? "s" : "", c->diloco_sync_period, c->diloco_outer_lr,
                   c->diloco_outer_momentum);
}

/* Over MPI ranks: every rank learns whether any failed (the lowest failing
 * rank's error, on all); one rank: rc as it is. Called by every rank at the
 * same point, after anything that may fail on one rank alone, before the
 * next collective, so no rank waits for a peer that already gave up. */
static gt_rc gt__agree(gt_rc rc, const char *what, gt_err *err) {
  if (gt_dist_size() == 1) return rc;
  gt_err mine = *err;
  return gt_dist_agree(rc, &mine, what, err);
}

/* Every rank resumes from the same step (-1: none). Each rank walks back
 * from `latest` by itself, so one that cannot read the newest checkpoint (a
 * read error on its host) would otherwise train on older state than the
 * others, and every figure after it would be wrong. */
static gt_rc gt__agree_start(int64_t step, gt_err *err) {
  const int R = gt_dist_size();
  if (R == 1) return GT_OK;
  int64_t *all = calloc((size_t)R, sizeof *all);
  gt_rc rc = gt_dist_agree(all ? GT_OK : GT_ERR_NOMEM, NULL, "comparing the ranks' resume steps", err);
  if (!rc) rc = gt_dist_allgather_i64(&step, 1, all, "the step each rank resumes from", err);
  int bad = -1;
  for (int r = 1; !rc && r < R && bad < 0; r++)
    if (all[r] != all[0]) bad = r;
  if (!rc && bad >= 0) {
    char a[48], b[48];
    snprintf(a, sizeof a, all[0] < 0 ? "no checkpoint" : "step %lld", (long long)all[0]);
    snprintf(b, sizeof b, all[bad] < 0 ? "no checkpoint" : "step %lld", (long long)all[bad]);
    rc = gt_err_set(err, GT_ERR_IO,
                    "train: the ranks would resume from different checkpoints: rank 0 from %s, rank %d from %s; "
                    "every rank must read the same one (each rank walks back from 'latest' past the checkpoints it "
                    "cannot read itself, so the rank on the older step failed to read the newer one)",
                    a, bad, b);
  }
  free(all);
  return rc;
}

/* A run's id: 64 random bits on rank 0 (the clock and pid when there is no
 * /dev/urandom), shared with every rank; never 0 (0 is "none recorded"). */
static gt_rc gt__run_id(uint64_t *id, gt_err *err) {
  uint64_t v = 0;
  if (gt_dist_rank() == 0) {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&v, sizeof v, 1, f) != 1) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      v = ((uint64_t)ts.tv_sec * 1000000007ull) ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid();
    }
    if (f) fclose(f);
    if (!v) v = 1;
  }
  *id = v;
  return gt_dist_size() > 1 ? gt_dist_bcast(id, sizeof *id, 0, "the run's id", err) : GT_OK;
}

/* The closing text sample, on the host from the gathered parameters. */
static gt_rc gt__sample(gt_report *r, gt_trainer *tr, gt_model *m, gt_mem *mem, const gt_config *c, gt_err *err) {
  gt_rc rc = gt__agree(gt_model_alloc(m, mem, err), "the sample's parameters", err);
  /* gathering the parameters is collective: every rank takes part; rank 0 decodes */
  if (!rc) rc = gt_fsdp_full_params(gt_trainer_fsdp(tr), m->params, err);
  if (!rc && gt_dist_rank() != 0) return GT_OK;
  char *text = NULL;
  int64_t n_new = 0;
  if (!rc) rc = gt_decode_sample_text(m, c, &text, &n_new, err);
  if (!rc) gt_report_note(r, "sample (%lld tokens after the prompt):\n%s\n", (long long)n_new, text);
  free(text);
  return rc;
}

/* The plan's peak next to the measured one (the largest step's, busiest
 * device's), and that device's categories during its last step and eval. */
static void gt__footer(gt_report *r, gt_trainer *tr, int64_t planned_peak, int64_t peak, int64_t last_saved) {
  gt_fsdp *fs = gt_trainer_fsdp(tr);
  gt_mem *dm = gt_fsdp_device_mem(fs, 0);
  for (int d = 1; d < gt_fsdp_devices(fs); d++)
    if (gt_mem_total_peak(gt_fsdp_device_mem(fs, d)) > gt_mem_total_peak(dm)) dm = gt_fsdp_device_mem(fs, d);
  double M = 1048576.0;
  gt_report_note(r, "peak memory: %.1f MiB planned, %.1f MiB measured (busiest device, last step: params %.1f, grads "
                    "%.1f, optimizer %.1f, saved activations %.1f, temporaries %.1f, logits %.1f MiB)\n",
                 planned_peak / M, peak / M, gt_mem_peak(dm, GT_MEM_PARAMS) / M, gt_mem_peak(dm, GT_MEM_GRADS) / M,
                 gt_mem_peak(dm, GT_MEM_OPTIM) / M, gt_mem_peak(dm, GT_MEM_SAVED) / M, gt_mem_peak(dm, GT_MEM_TEMP) / M,
                 gt_mem_peak(dm, GT_MEM_LOGITS) / M);
  if (gt_mem_peak(dm, GT_MEM_FROZEN)) /* the frozen base: its own category */
    gt_report_note(r, "frozen base: %.1f MiB on the busiest device, stored as %s\n", gt_mem_peak(dm, GT_MEM_FROZEN) / M,
                   gt_qstore_describe(gt_trainer_device_model(tr, 0)));
  const char *tb = r->tensorboard ? ", tensorboard/" : "";
  if (last_saved >= 0)
    gt_report_note(r, "wrote %s/config.json, metrics.jsonl%s, loss.svg and checkpoints/ (latest: step_%08lld)\n",
                   r->run_dir, tb, (long long)last_saved);
  else
    gt_report_note(r, "wrote %s/config.json, metrics.jsonl%s and loss.svg\n", r->run_dir, tb);
}

/* The data could not be read (agreed by every rank): the state after
 * `steps` steps is good, so it is checkpointed, unless it already is,
 * before the run stops with the read's error; as a signal would stop it. */
static void gt__data_stop(gt__tstate *ts, gt_report *rep, const char *run_dir, int64_t steps, int64_t last_saved,
                          const char *what) {
  if (!ts->cfg->enable_checkpointing || steps == last_saved || steps == 0) return;
  gt_err e2;
  if (gt__train_save(ts, run_dir, steps, &e2) == GT_OK)
    gt_report_note(rep, "the %s data could not be read: saved the state after step %lld before stopping; once the "
                        "data is restored, the same command with run_name=%s resumes it\n",
                   what, (long long)steps - 1, ts->cfg->run_name);
  else
    gt_report_note(rep, "the %s data could not be read, and the state after step %lld could not be saved: %s\n", what,
                   (long long)steps - 1, e2.msg);
}

/* As MaxText's train loop: after step s when eval_interval > 0, s is not
 * this process's first step (start) and (s + 1) % eval_interval == 0; no
 * eval after the last step unless that rule says so. eval_interval = 0
 * (gemtrain's) evaluates after the last step only; -1 never. */
static int gt__eval_due(const gt_config *c, const gt_data *d, int64_t step, int64_t start) {
  if (!gt_data_has_eval(d) || c->eval_interval < 0) return 0;
  if (c->eval_interval == 0) return step == c->steps - 1;
  return step > start && (step + 1) % c->eval_interval == 0;
}

/* Tokens per device after `step`, counting every step from 0 alike
 * (MaxText's per-step count, max_target_length x per_device_batch_size x
 * gradient_accumulation_steps, summed), so a resumed run continues it. */
static int64_t gt__tokens_seen_per_device(const gt_config *c, int64_t step) {
  double per_step = (double)gt_config_global_batch(c) * (double)c->max_target_length *
                    (double)c->gradient_accumulation_steps / (double)gt_config_total_devices(c);
  return (int64_t)llround(per_step * (double)(step + 1));
}

static int gt__checkpoint_due(const gt_config *c, int64_t step, int stop) {
  return c->enable_checkpointing &&
         (stop || (step + 1) % c->checkpoint_period == 0 || (step == c->steps - 1 && c->save_checkpoint_on_completion));
}

/* The state after `step`: written now, or snapshotted for the background
 * writer (async_checkpointing; train_state.c). Its spans are train_state's;
 * its figures reach the metrics of the step whose poll sees it committed.
 * The loop's time here (the write, or the snapshot and any wait for the
 * previous write) is checkpointing's in the goodput; what ran since the
 * loop's last mark (on the stop path, the step's report) is not. */
static gt_rc gt__checkpoint(gt__tstate *ts, gt_report *rep, const char *run_dir, int64_t step, gt_goodput *gp,
                            gt_err *err) {
  gt_goodput_mark(gp, GT_GP_OTHER, gt_prof_now());
  gt_report_pause(rep);
  gt_rc rc = gt__train_checkpoint(ts, run_dir, step + 1, err);
  gt_goodput_mark(gp, GT_GP_CKPT, gt_prof_now());
  return rc;
}

gt_rc gt_train(const gt_config *cfg_in, const gt_train_opts *o, gt_train_result *res, gt_err *err) {
  static const gt_train_opts none;
  if (!o) o = &none;
  gt_goodput gp; /* where the wall time goes, from here to the closing line */
  gt_goodput_start(&gp, gt_prof_now());
  gt_config cfg = *cfg_in;
  memset(res, 0, sizeof *res);
  res->last_eval_loss = NAN;
  /* Over MPI ranks every rank runs this same loop (SPMD); rank 0 alone
   * prints, writes metrics.jsonl, TensorBoard events, the plot and the
   * trace, and owns the run directory. Checkpoints, eval and the sample's
   * gather are collective. Outcomes are agreed where one rank alone could
   * fail (setup, reporting), so every rank stops together; an error only
   * one rank saw (a peer that stopped answering) is not: res->agreed says
   * which, and the command line ends the job on the latter. */
  const int primary = gt_dist_rank() == 0;
  FILE *out = primary ? o->out : NULL;
  res->agreed = 1;
  /* load_parameters_path defines the model: its config replaces the model
   * keys before anything is planned (a conflicting explicit key is refused) */
  gt_run_lock lock = {-1};
  gt_model_source *src = malloc(sizeof *src);
  if (!src) return gt_err_set(err, GT_ERR_NOMEM, "train: no memory");
  int have_src = 0;
  gt_rc rc = gt__train_source(&cfg, src, &have_src, err);
  int64_t planned_peak = 0;
  int snapshot_fits = 0;
  /* every rank runs the same resolved configuration, checked before
   * anything depends on it (a difference would train two half-models or
   * hang in a collective) */
  rc = gt__agree(rc, "reading the model source", err);
  if (!rc) rc = gt_config_agree_ranks(&cfg, &res->config_checksum, err);
  if (!rc) rc = gt_diloco_setup_ranks(&cfg, err); /* DiLoCo: each replica's ranks, from here on */
  /* the run's identity, which its checkpoint shards record: rank 0's */
  uint64_t run_id = 0;
  if (!rc) rc = gt__run_id(&run_id, err);
  if (!rc && !(rc = gt_config_validate(&cfg, err))) rc = gt__check_plan(&cfg, out, &planned_peak, &snapshot_fits, err);
  /* eval_tasks' files are read at the first eval: their list is checked now */
  if (!rc && cfg.eval_tasks[0]) rc = gt_eval_train_tasks_check(&cfg, err);
  /* the model source, the config and the plan (which reads this host's free
   * memory) may fail on one rank alone: every rank learns it */
  rc = gt__agree(rc, "checking the config and the plan", err);
  int created = 0, started = 0;
  if (rc || (rc = gt__run_dir(&cfg, res->run_dir, sizeof res->run_dir, &lock, &created, err))) {
    if (rc && created) gt__remove_new_run_dir(res->run_dir);
    gt_run_lock_release(&lock);
    free(src);
    return rc;
  }
  snprintf(res->run_name, sizeof res->run_name, "%s", cfg.run_name);
  int threads = gt_threads_configure(&cfg);

  gt_mem mem; /* the host's: data and full buffers for checkpoints and the sample */
  gt_mem_init(&mem);
  gt_model m; /* the layout: descriptors and tensor table */
  gt_data data;
  memset(&data, 0, sizeof data);
  gt_trainer *tr = NULL;
  gt_eval_train_state *tasks = NULL; /* eval_tasks, read at the first eval */
  gt_report rep;
  memset(&rep, 0, sizeof rep);
  rep.out = out;
  gt_profiler prof; /* profiler=trace: the timeline of a window of steps (rank 0's) */
  gt_config pcfg = cfg;
  if (!primary) pcfg.profiler[0] = '\0';
  gt_profiler_init(&prof, &pcfg, 0, res->run_dir);
  char pline[3000];
  if ((rc = gt_model_build(&m, &cfg, err))) {
    if (created) gt__remove_new_run_dir(res->run_dir);
    gt_run_lock_release(&lock);
    free(src);
    return rc;
  }
  int64_t start = 0, last_saved = -1;
  int resumed = 0;
  gt_ckpt_reference refs[2];
  memset(refs, 0, sizeof refs);
  gt__tstate ts = {&m,   NULL, &data, &cfg, &mem, out, have_src ? src : NULL, {run_id, res->config_checksum},
                   NULL, refs};
  /* what the run starts from: its own checkpoint, another run's state or
   * parameters, or the initialisation (nothing here talks to other ranks) */
  if (!(rc = gt_data_open(&data, &cfg, &mem, err)) && !(rc = gt_trainer_create(&tr, &cfg, NULL, err))) {
    ts.tr = tr;
    gt_goodput_mark(&gp, GT_GP_PREP, gt_prof_now());
    rc = gt__train_restore(&ts, res->run_dir, &start, &resumed, err);
    if (!rc) rc = gt__train_pref_reference(&ts, err);
    gt_goodput_mark(&gp, resumed ? GT_GP_RESTORE : GT_GP_PREP, gt_prof_now());
    if (!rc && primary) rc = gt_report_open(&rep, &cfg, res->run_dir, out, o->progress, resumed ? start : 0, err);
    rep.goodput = &gp;
  }
  if ((rc = gt__agree(rc, "setting up the run", err)) || (rc = gt__agree_start(resumed ? start : -1, err))) goto out;
  /* the run's config.json, once the start is accepted: a refused resume
   * leaves the one its checkpoints were written with */
  if (gt_dist_rank() == 0) {
    char path[2200];
    snprintf(path, sizeof path, "%s/config.json", res->run_dir);
    rc = gt_config_write_json(&cfg, path, err);
  }
  if ((rc = gt__agree(rc, "writing the run's config.json", err))) goto out;
  started = 1;
  res->start_step = start;
  if (resumed) last_saved = start;
  gt__header(&rep, &cfg, &m, &data, threads, planned_peak);
  gt_profiler_init(&prof, &pcfg, start, res->run_dir);
  gt_profiler_start_note(&prof, pline, sizeof pline);
  if (pline[0]) gt_report_note(&rep, "%s\n", pline);
  if (cfg.eval_tasks[0] && gt_eval_train_never_evaluates(&cfg))
    gt_report_note(&rep, "note: key 'eval_tasks' is set but this run never evaluates (%s): its tasks are not scored; "
                         "score a checkpoint with gemtrain eval\n",
                   cfg.eval_interval < 0 ? "eval_interval = -1" : "dataset_type synthetic has no held-out data");
  if ((rc = gt__train_ckpt_open(&ts, cfg.enable_checkpointing && cfg.async_checkpointing, snapshot_fits, &prof, err)))
    goto out;
  rc = primary ? gt__setup_record(&rep, &prof, &cfg, &m, start, err) : GT_OK;
  if ((rc = gt__agree(rc, "writing the setup record to TensorBoard", err))) goto out;
  if (start >= cfg.steps)
    gt_report_note(&rep, "nothing to do: the checkpoint is at step %lld and steps = %lld\n", (long long)start, cfg.steps);
  gt_goodput_mark(&gp, GT_GP_PREP, gt_prof_now());

  for (int64_t step = start; step < cfg.steps; step++) {
    gt_step_metrics sm;
    if (o->test_nan_step && *o->test_nan_step == step) gt__trainer_poison_next_step(tr);
    /* the step's data first, agreed over ranks before any computes: a
     * failed read (a shard changed under the run) stops every rank after
     * a checkpoint of the last good step, as a signal would */
    gt_data_state before = data.st;
    if ((rc = gt_profiler_step_begin(&prof, tr, step, err))) {
      res->agreed = 0;
      goto out;
    }
    gt_goodput_mark(&gp, GT_GP_OTHER, gt_prof_now());
    if ((rc = gt__agree(gt_trainer_load_data(tr, &data, err), "reading the step's data", err))) {
      data.st = before;
      gt__data_stop(&ts, &rep, res->run_dir, step, last_saved, "training");
      goto out;
    }
    gt_goodput_mark(&gp, GT_GP_DATA, gt_prof_now());
    if ((rc = gt_trainer_step_loaded(tr, &sm, err))) {
      /* a non-finite step is decided from all-reduced values: every rank
       * refuses it alike; any other failure may be this rank's alone. With
       * DiLoCo those values are one replica's: the other replicas go on
       * (and would wait at the next sync), so the job ends from here. */
      res->agreed = rc == GT_ERR_NUMERIC && !cfg.enable_diloco;
      goto out;
    }
    int applied = !sm.skipped && !sm.no_tokens && !sm.spike_skipped;
    gt_goodput_mark(&gp, applied ? GT_GP_STEP : GT_GP_SKIPPED, gt_prof_now());
    sm.tokens_seen_per_device = gt__tokens_seen_per_device(&cfg, step);
    res->skipped_steps += sm.skipped && !sm.no_tokens && !sm.spike_skipped;
    res->spike_steps += sm.spike_skipped;
    res->empty_steps += sm.no_tokens;
    if (gt__eval_due(&cfg, &data, step, start)) {
      double t0 = gt_prof_now();
      if ((rc = gt__agree(gt_trainer_load_eval(tr, &data, err), "reading the eval data", err))) {
        /* the step itself is good (its report is lost): keep it */
        gt__data_stop(&ts, &rep, res->run_dir, step + 1, last_saved, "eval");
        goto out;
      }
      if ((rc = gt_trainer_eval_loaded(tr, &sm.eval_loss, &sm.eval_total_weights, err))) {
        res->agreed = 0;
        goto out;
      }
      if ((rc = gt__agree(gt_eval_train_tasks(&tasks, &cfg, gt_trainer_fsdp(tr), &sm, err), "scoring eval_tasks", err)))
        goto out;
      gt_trace_span(gt_profiler_host(&prof), "eval", "eval", t0, gt_prof_now());
      if (sm.eval_total_weights) {
        sm.has_eval = 1;
        gt_trainer_eval_pref_metrics(tr, &sm); /* use_dpo: eval_rewards/... */
        res->last_eval_loss = sm.eval_loss;
      } else {
        res->empty_evals++;
        gt_report_note(&rep, "skipped eval after step %lld: no token of the eval batches is in the loss\n",
                       (long long)step);
      }
      gt_goodput_mark(&gp, GT_GP_EVAL, gt_prof_now());
    }
    /* target_eval_loss: the eval loss is the same on every rank (all-reduced) */
    int reached = cfg.target_eval_loss > 0 && sm.has_eval && sm.eval_loss <= cfg.target_eval_loss;
    /* the step's checkpoint (period, completion, target) before its record,
     * which says so */
    if (gt__checkpoint_due(&cfg, step, reached)) {
      if ((rc = gt__checkpoint(&ts, &rep, res->run_dir, step, &gp, err))) goto out;
      last_saved = step + 1;
    }
    /* a checkpoint write that ended goes into this step's metrics */
    if ((rc = gt__train_ckpt_poll(&ts, &sm, err))) goto out;
    double tr0 = gt_prof_now();
    if (primary) rc = gt_report_step(&rep, &sm, err);
    gt_trace_span(gt_profiler_host(&prof), "metrics (console, metrics.jsonl, TensorBoard)", "report", tr0, gt_prof_now());
    /* one decision for every rank: whether rank 0's report failed */
    if (gt_dist_size() > 1) {
      rc = gt__agree(rc, "reporting the step", err);
      if (rc && gt_dist_broken()) {
        res->agreed = 0;
        goto out;
      }
    }
    if (rc) {
      /* the state is good, its record is not: keep the state, then stop */
      gt_err e2;
      if (cfg.enable_checkpointing && last_saved != step + 1 &&
          gt__train_save(&ts, res->run_dir, step + 1, &e2) == GT_OK)
        gt_report_note(&rep, "saved the state after step %lld before stopping\n", (long long)step);
      goto out;
    }
    if (step == 0) res->first_loss = sm.loss;
    res->last_loss = sm.loss;
    res->steps_done = step + 1;
    if (sm.peak_memory_bytes > res->peak_memory_bytes) res->peak_memory_bytes = sm.peak_memory_bytes;
    if (o->test_after_step) o->test_after_step(&sm, o->test_ctx);
    /* ... and whether any rank was asked to stop (a signal reaches the
     * ranks at different moments; they must stop after the same step) */
    int64_t stop_any = o->stop && *o->stop ? *o->stop : 0;
    if (gt_dist_size() > 1 && (rc = gt_dist_allreduce_i64(&stop_any, 1, GT_DIST_MAX, "the stop flag", err))) {
      res->agreed = 0;
      goto out;
    }
    int stop = stop_any != 0;
    if (stop && last_saved != step + 1 && gt__checkpoint_due(&cfg, step, stop)) {
      if ((rc = gt__checkpoint(&ts, &rep, res->run_dir, step, &gp, err))) goto out;
      last_saved = step + 1;
    }
    rc = gt_profiler_step_end(&prof, tr, step, sm.seconds, pline, sizeof pline, err);
    if (cfg.profiler[0] && (rc = gt__agree(rc, "the profiler's trace (rank 0)", err))) goto out;
    if (rc) goto out;
    if (pline[0]) gt_report_note(&rep, "%s\n", pline);
    if (reached) {
      res->reached_target = 1;
      res->target_step = step;
      char saved[64] = " (enable_checkpointing=false: no checkpoint)";
      if (cfg.enable_checkpointing) snprintf(saved, sizeof saved, "; checkpoint step_%08lld", (long long)step + 1);
      gt_report_note(&rep, "reached target_eval_loss = %g: eval loss %.4f after step %lld; the run ends here, %lld of "
                           "%lld steps%s\n",
                     cfg.target_eval_loss, sm.eval_loss, (long long)step, (long long)step + 1, cfg.steps, saved);
      break;
    }
    if (stop) {
      res->interrupted = 1;
      /* an unnamed run's name is new every time: the hint names it */
      gt_report_note(&rep, "stopped by %s after step %lld%s%s\n",
                     stop_any == SIGINT ? "SIGINT" : stop_any == SIGUSR1 ? "SIGUSR1" : "SIGTERM",
                     (long long)step,
                     !cfg.enable_checkpointing ? " (enable_checkpointing=false: no checkpoint)"
                     : cfg_in->run_name[0]     ? "; run the same command again to resume"
                                               : "; to resume, run the same command with run_name=",
                     cfg.enable_checkpointing && !cfg_in->run_name[0] ? cfg.run_name : "");
      break;
    }
  }

  /* the last checkpoint's write ends before the run says it is there; the
   * loop is blocked by it as by a synchronous write */
  gt_goodput_mark(&gp, GT_GP_OTHER, gt_prof_now());
  rc = gt__train_ckpt_wait(&ts, err);
  gt_goodput_mark(&gp, GT_GP_CKPT, gt_prof_now());
  if (rc) goto out;
  if (res->skipped_steps)
    gt_report_note(&rep, "warning: %lld of the %lld steps run were skipped (non-finite loss or gradient)%s; the "
                         "parameters only moved on the others\n",
                   res->skipped_steps, res->steps_done - res->start_step,
                   cfg.enable_diloco ? " in one or more DiLoCo replicas" : "");
  if (res->spike_steps)
    gt_report_note(&rep, "note: %lld of the %lld steps run were skipped as loss or gradient-norm spikes "
                         "(skip_step_on_spikes)%s\n",
                   res->spike_steps, res->steps_done - res->start_step,
                   cfg.enable_diloco ? " in one or more DiLoCo replicas" : "");
  if (res->empty_steps || res->empty_evals)
    gt_report_note(&rep, "warning: %lld of the %lld steps run and %lld evaluations had no token in the loss and were "
                         "skipped (every target masked, e.g. use_sft with prompts that fill the row)\n",
                   res->empty_steps, res->steps_done - res->start_step, res->empty_evals);
  rc = gt_profiler_finish(&prof, tr, pline, sizeof pline, err);
  if ((rc = gt__agree(rc, "the profiler's trace (rank 0)", err))) goto out;
  if (pline[0]) gt_report_note(&rep, "%s\n", pline);
  if (primary) rc = gt_report_plot(&rep, err);
  if ((rc = gt__agree(rc, "the plot (rank 0)", err))) goto out;
  gt__footer(&rep, tr, planned_peak, res->peak_memory_bytes, last_saved);
  /* the run's time up to here (the closing sample, which a reader expects
   * last, is not in it) */
  gt_goodput_mark(&gp, GT_GP_OTHER, gt_prof_now());
  res->wall_seconds = gt_goodput_wall(&gp);
  memcpy(res->goodput_seconds, gp.seconds, sizeof res->goodput_seconds);
  gt_goodput_format(&gp, pline, sizeof pline);
  gt_report_note(&rep, "%s\n", pline);
  if (!res->interrupted && gt_decode_sample_wanted(&cfg) && cfg.vocab_size >= GT_BYTE_VOCAB &&
      strcmp(cfg.dataset_type, "tokens"))
    rc = gt__sample(&rep, tr, &m, &mem, &cfg, err);
out:
  /* a collective that failed on this rank alone (a peer stopped answering,
   * or a peer's failure left this rank waiting) is this rank's own error */
  if (rc && gt_dist_broken()) res->agreed = 0;
  {
    /* a run that ends waits for its last checkpoint write (a broken one
     * abandons it: its temporary directory is not committed) */
    gt_err e2;
    gt_rc crc = gt__train_ckpt_close(&ts, rc && !res->agreed, &e2);
    if (!rc && crc) {
      rc = crc, *err = e2;
    } else if (rc && crc) { /* the run's error first, and that the last write did not commit */
      char msg[GT_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      gt_err_set(err, rc, "%s; besides, the checkpoint being written in the background did not commit: %s", msg,
                 e2.msg);
    }
  }
  gt_profiler_close(&prof, tr);
  gt_report_close(&rep);
  gt_trainer_destroy(tr);
  gt_eval_train_tasks_free(tasks);
  gt_data_close(&data);
  gt_model_free(&m);
  free(src);
  if (rc && !started && created) gt__remove_new_run_dir(res->run_dir);
  if (rc && !started && created) res->run_dir[0] = res->run_name[0] = '\0';
  gt_run_lock_release(&lock);
  return rc;
}
