/* The training state for checkpoints: what is saved (parameters, AdamW
 * moments and step, data position, config), where it comes from on a
 * sharded run, and the rules that pick what a run starts from. */
#define _GNU_SOURCE /* syscall(SYS_gettid): the writer thread's own nice value */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "hf/hf.h"
#include "ckpt/paramfile.h"
#include "train/diloco.h"
#include "train/optim.h"
#include "train/train_internal.h"
#include "base/prof.h"
#include "mesh/mesh.h"

/* The checkpoint's agreement between the MPI ranks of the mesh (ckpt.h's
 * gt_ckpt_sync; a DiLoCo replica's ranks, dist.h). */
static gt_rc gt__agree(void *ctx, gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err) {
  (void)ctx;
  return gt_dist_replica_agree(mine, mine_err, what, err);
}

/* Compacts a full flat buffer to its units' trainable prefixes, in unit
 * order (a checkpoint shard's arrays; ckpt.h). */
static void gt__pack_trainable(const gt_model *m, float *buf) {
  int64_t o = 0;
  for (int64_t u = 0; u < gt_model_n_units(m); u++) {
    int64_t off, cnt, t = gt_model_unit_trainable(m, u);
    gt_model_unit(m, u, &off, &cnt);
    memmove(buf + o, buf + off, (size_t)t * sizeof(float));
    o += t;
  }
}

/* Where a run's frozen tensors come from (a checkpoint's reference). */
static void gt__frozen_source(const gt_config *c, char *buf, size_t n) {
  if (c->load_parameters_path[0]) snprintf(buf, n, "load_parameters_path=%s", c->load_parameters_path);
  else snprintf(buf, n, "init_weights_seed=%d (weight_init_scale=%.17g)", c->init_weights_seed, c->weight_init_scale);
}

/* Fills the frozen tensors of a full buffer from the run's source (the
 * parameters of load_parameters_path, else the initialisation), before a
 * checkpoint that references them is loaded over the trainable ones. */
static gt_rc gt__frozen_fill(const gt__tstate *s, float *p, gt_err *err) {
  if (!s->m->n_frozen_tensors) return GT_OK;
  if (s->src) return gt_model_source_load_params(s->src, s->m, p, err);
  gt_model tmp = *s->m;
  tmp.params = p;
  if (gt_model_init_params(&tmp, (uint64_t)s->cfg->init_weights_seed, s->cfg->weight_init_scale))
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory to initialise the frozen tensors (init_weights_seed=%d)",
                      s->cfg->init_weights_seed);
  return GT_OK;
}

/* The background writer of async_checkpointing (docs/checkpoints.md): one
 * save in flight at most, its shards copied into the snapshot at the step
 * boundary; the thread writes them (and, with one rank, commits); the
 * agreements over ranks stay on the training thread. */
enum { GT__MAXS = 1024 };
struct gt__ckpt_async {
  int on;             /* background writes (else every save is synchronous) */
  gt_profiler *prof;  /* the run's timeline: the loop's waits, the writer's spans */
  gt_mem mem;         /* the snapshot's own tracker: its peak is the plan's figure */
  float *snap;
  int64_t snap_bytes;
  const float *tab[3][GT__MAXS]; /* the snapshot's shards (NULL: another rank's) */
  gt_ckpt_pending *save; /* in flight, until finished (NULL: none) */
  pthread_t th;
  int thread_live;
  _Atomic int done;   /* the writer returned */
  int commit_in_thread; /* one rank: the writer commits too */
  gt_rc wrc;
  gt_err werr;
  double w_t0, w_t1;  /* the writer's span */
  double blocked;     /* the loop's wait for this save: a previous write, the snapshot */
  int64_t step, n_shards;
  char root[2200];
  /* a finished save not yet in a step's metrics */
  int have_report;
  double rep_write, rep_blocked;
};

/* Shard r's elements: every unit's trainable part, sharded over S. */
static int64_t gt__shard_elems(const gt_model *m, int S, int r) {
  int64_t n = 0;
  for (int64_t u = 0; u < gt_model_n_units(m); u++) n += gt_shard_len(gt_model_unit_trainable(m, u), S, r);
  return n;
}

int64_t gt__train_snapshot_bytes(gt_fsdp *fs, const gt_model *m) {
  if (gt_fsdp_expert_parallelism(fs) > 1) return 3 * m->n_params * (int64_t)sizeof(float);
  const gt_mesh *mesh = gt_fsdp_mesh(fs);
  int S = gt_fsdp_num_shards(fs);
  int64_t n = 0;
  for (int r = 0; r < S; r++)
    if (gt_mesh_rank_of(mesh, r) == gt_mesh_rank(mesh)) n += gt__shard_elems(m, S, r);
  return 3 * n * (int64_t)sizeof(float);
}

/* The state to save, in src: the live shards (snap NULL: valid until
 * gt_fsdp_shard_state_done) or copies of them in snap (async), or with the
 * expert axis the full state assembled in *host (or in snap). Over ranks
 * the outcome is agreed (what follows is collective). */
static gt_rc gt__state_src(const gt__tstate *s, gt_ckpt_src *src, const float *tab[3][GT__MAXS], float *snap,
                           float **host, gt_err *err) {
  gt_fsdp *fs = gt_trainer_fsdp(s->tr);
  /* the ranks of the mesh: a DiLoCo replica's (all of them without DiLoCo) */
  const int R = gt_dist_replica_size(), primary = gt_dist_replica_rank() == 0;
  src->n_shards = 1, src->params = tab[0], src->mu = tab[1], src->nu = tab[2];
  *host = NULL;
  if (gt_fsdp_expert_parallelism(fs) > 1) {
    /* a device's shard holds only its experts: save the full state as one
     * shard (restores go through full buffers anyway, onto any mesh); over
     * ranks every rank assembles it (collective) and rank 0 writes it */
    int64_t n = s->m->n_params;
    float *buf = snap ? snap : (*host = gt_mem_alloc_uninit(s->mem, GT_MEM_OTHER, (size_t)n * 3 * sizeof(float)));
    gt_rc rc0 = buf ? GT_OK
                    : gt_err_set(err, GT_ERR_NOMEM, "train: no memory to assemble the checkpoint's %lld parameters",
                                 (long long)n);
    /* the assembly is collective: a rank without the buffer must not leave
     * the others waiting in it */
    if (R > 1) {
      gt_err mine = *err;
      rc0 = gt_dist_replica_agree(rc0, &mine, "assembling the checkpoint", err);
    }
    if (!rc0) rc0 = gt_fsdp_full_state(fs, buf, buf + n, buf + 2 * n, err);
    if (rc0) {
      gt_mem_free(s->mem, *host);
      *host = NULL;
      return rc0;
    }
    tab[0][0] = buf, tab[1][0] = buf + n, tab[2][0] = buf + 2 * n;
    /* one shard holds each unit's trainable prefix, unit after unit */
    if (s->m->n_frozen_tensors)
      for (int k = 0; k < 3; k++) gt__pack_trainable(s->m, buf + k * n);
    if (!primary) tab[0][0] = tab[1][0] = tab[2][0] = NULL;
    return GT_OK;
  }
  /* each rank writes the shards its devices hold (NULL: another rank's) */
  src->n_shards = gt_fsdp_num_shards(fs);
  gt_rc rc0 = src->n_shards > GT__MAXS
                  ? gt_err_set(err, GT_ERR_ARG, "train: %d checkpoint shards; at most %d", src->n_shards, GT__MAXS)
                  : GT_OK;
  /* mu_dtype=bfloat16: mu is expanded to float32 copies here (freed by
   * gt_fsdp_shard_state_done) */
  for (int r = 0; r < src->n_shards && !rc0; r++)
    rc0 = gt_fsdp_shard_state(fs, r, &tab[0][r], &tab[1][r], &tab[2][r], s->mem, err);
  if (!rc0 && snap) { /* the snapshot: what the next steps leave alone */
    float *o = snap;
    for (int r = 0; r < src->n_shards; r++) {
      if (!tab[0][r]) continue;
      int64_t n = gt__shard_elems(s->m, src->n_shards, r);
      for (int k = 0; k < 3; k++) {
        memcpy(o, tab[k][r], (size_t)n * sizeof(float));
        tab[k][r] = o;
        o += n;
      }
    }
    gt_fsdp_shard_state_done(fs);
  }
  if (R > 1) { /* the save is collective: every rank or none */
    gt_err mine = *err;
    rc0 = gt_dist_replica_agree(rc0, &mine, "preparing the checkpoint", err);
  }
  if (rc0) gt_fsdp_shard_state_done(fs);
  return rc0;
}

static void gt__ckpt_state(const gt__tstate *s, int64_t step, int n_shards, gt_ckpt_state *st, gt_ckpt_frozen *fz) {
  gt_fsdp *fs = gt_trainer_fsdp(s->tr);
  int64_t opt_step = gt_fsdp_opt_step(fs);
  gt_ckpt_state v = {step, opt_step, s->data->st, s->cfg->num_devices, n_shards, gt_lr_at(s->cfg, opt_step), {0}, {0}, 0};
  *st = v;
  if (s->ref) st->reference = s->ref[0];
  st->data_rows = s->data ? s->data->n_train_rows : 0;
  gt_trainer_spike_state(s->tr, &st->spike); /* the guard's window: a plain copy, taken at the step boundary */
  fz->sum = gt_fsdp_frozen_sum(fs);
  gt__frozen_source(s->cfg, fz->source, sizeof fz->source);
}

/* Ends the save in flight, if any: waits for its writer and, with several
 * ranks, agrees and commits (collective). broken: abandon it instead (a
 * peer may be gone: no collective). */
static gt_rc gt__ckpt_finish(const gt__tstate *s, int broken, gt_err *err);

/* The state into the checkpoints under `root`, keeping `keep`, written now
 * (collective over the mesh's ranks); with `outer`, DiLoCo's outer
 * parameters and momentum instead (diloco.h). */
static gt_rc gt__save_root(const gt__tstate *s, const char *root, int64_t keep, int outer, int64_t step, gt_err *err) {
  const float *tab[3][GT__MAXS];
  gt_ckpt_src src;
  float *host = NULL;
  gt_rc rc;
  gt_fsdp *fs = gt_trainer_fsdp(s->tr);
  if (outer) {
    src = (gt_ckpt_src){gt_fsdp_num_shards(fs), tab[0], tab[1], tab[2]};
    for (int r = 0; r < src.n_shards; r++)
      gt_diloco_ckpt_shard(gt_trainer_diloco(s->tr), r, &tab[0][r], &tab[1][r], &tab[2][r]);
  } else if ((rc = gt__state_src(s, &src, tab, NULL, &host, err))) {
    return rc;
  }
  gt_ckpt_state st;
  gt_ckpt_frozen fz;
  gt__ckpt_state(s, step, src.n_shards, &st, &fz);
  char *cj = gt_config_to_json(s->cfg);
  double t0 = gt_prof_now();
  const int R = gt_dist_replica_size();
  gt_ckpt_sync sync = {gt_dist_replica_rank(), R, gt__agree, NULL};
  rc = gt_ckpt_save_frozen(root, s->m, &src, &st, &fz, s->writer.run_id ? &s->writer : NULL, cj,
                           (int)s->cfg->checkpoint_compression, keep, R > 1 ? &sync : NULL, err);
  free(cj);
  gt_mem_free(s->mem, host);
  if (!outer) gt_fsdp_shard_state_done(fs);
  double dt = gt_prof_now() - t0;
  if (rc == GT_OK && s->ckpt && !outer) { /* the step's metrics report it */
    s->ckpt->have_report = 1;
    s->ckpt->rep_write = s->ckpt->rep_blocked = dt;
  }
  if (rc == GT_OK && s->out && !outer) {
    fprintf(s->out, "saved checkpoint %s/step_%08lld (%lld shard%s, %.2f s)\n", root, (long long)step,
            (long long)src.n_shards, src.n_shards > 1 ? "s" : "", dt);
    fflush(s->out);
  }
  return rc;
}

gt_rc gt__train_save(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err) {
  /* a write in flight is finished first: one save at a time */
  gt_rc rc = gt__ckpt_finish(s, 0, err);
  if (rc) return rc;
  char root[2200];
  snprintf(root, sizeof root, "%s/checkpoints", run_dir);
  if (!gt_trainer_diloco(s->tr)) return gt__save_root(s, root, s->cfg->max_num_checkpoints_to_keep, 0, step, err);
  return gt_diloco_ckpt_save(s, gt__save_root, run_dir, step, err);
}

static void *gt__writer_main(void *arg) {
  gt__ckpt_async *a = arg;
#ifdef __linux__
  /* the writer yields to the steps' threads: on busy cores it takes what
   * they leave (Linux: a thread's own nice value; best effort) */
  if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10)) {
  }
#endif
  a->w_t0 = gt_prof_now();
  gt_err_clear(&a->werr);
  gt_rc rc = gt_ckpt_save_write(a->save, &a->werr);
  if (a->commit_in_thread) { /* no agreement to make: commit here */
    rc = gt_ckpt_save_end(a->save, rc, &a->werr);
    a->save = NULL;
  }
  a->wrc = rc;
  a->w_t1 = gt_prof_now();
  atomic_store(&a->done, 1);
  return NULL;
}

gt_rc gt__train_ckpt_open(gt__tstate *s, int async, int fits, gt_profiler *prof, gt_err *err) {
  /* every rank writes alike: in the background only when every rank's
   * snapshot fits (a host's free memory is its own) */
  /* DiLoCo's checkpoint is several parts (its replicas' and the outer
   * state) committed in order by replica 0's `latest`: written synchronously */
  int diloco = gt_trainer_diloco(s->tr) != NULL;
  int64_t on = async && fits && !diloco;
  gt_rc rc = gt_dist_size() > 1 ? gt_dist_allreduce_i64(&on, 1, GT_DIST_MIN, "async_checkpointing", err) : GT_OK;
  if (rc) return rc;
  if (async && diloco && s->out) {
    fprintf(s->out, "note: async_checkpointing: a DiLoCo run writes its checkpoints synchronously (its replicas' "
                    "parts and the outer state are committed together)\n");
    fflush(s->out);
  } else if (async && !on && s->out) {
    fprintf(s->out,
            "note: async_checkpointing: the checkpoint snapshot (%.1f MiB per rank) does not fit beside the step "
            "within the memory limit%s; checkpoints are written synchronously (the step waits for them)\n",
            (double)gt__train_snapshot_bytes(gt_trainer_fsdp(s->tr), s->m) / 1048576.0,
            fits ? " of another rank" : "");
    fflush(s->out);
  }
  gt__ckpt_async *a = calloc(1, sizeof *a);
  if (!a) return gt_err_set(err, GT_ERR_NOMEM, "train: no memory");
  gt_mem_init(&a->mem);
  a->on = (int)on;
  a->prof = prof;
  s->ckpt = a;
  if (!a->on) return GT_OK;
  /* the snapshot is made (and its pages touched: zeroed) before the first
   * step, not in the middle of the run at the first checkpoint */
  a->snap_bytes = gt__train_snapshot_bytes(gt_trainer_fsdp(s->tr), s->m);
  a->snap = gt_mem_alloc_named(&a->mem, GT_MEM_OTHER, (size_t)a->snap_bytes, "checkpoint snapshot");
  rc = a->snap ? GT_OK
               : gt_err_set(err, GT_ERR_NOMEM,
                            "train: no memory for the checkpoint snapshot (%.1f MiB; async_checkpointing=false "
                            "writes without one)",
                            (double)a->snap_bytes / 1048576.0);
  if (gt_dist_size() > 1) {
    gt_err mine = *err;
    rc = gt_dist_agree(rc, &mine, "the checkpoint snapshot", err);
  }
  return rc;
}

/* The saved line for a finished background save, and its figures for the
 * next step's metrics. */
static void gt__ckpt_done(const gt__tstate *s, gt__ckpt_async *a, double commit_s) {
  a->have_report = 1;
  a->rep_write = a->w_t1 - a->w_t0 + commit_s;
  a->rep_blocked = a->blocked + commit_s;
  if (s->out) {
    fprintf(s->out,
            "saved checkpoint %s/step_%08lld (%lld shard%s, %.2f s in the background; the loop waited %.3f s; "
            "snapshot %.1f MiB)\n",
            a->root, (long long)a->step, (long long)a->n_shards, a->n_shards > 1 ? "s" : "", a->rep_write,
            a->rep_blocked, (double)a->snap_bytes / 1048576.0);
    fflush(s->out);
  }
}

static gt_rc gt__ckpt_finish(const gt__tstate *s, int broken, gt_err *err) {
  gt__ckpt_async *a = s->ckpt;
  if (!a || !a->thread_live) return GT_OK;
  pthread_join(a->th, NULL);
  a->thread_live = 0;
  gt_rc rc = a->wrc;
  /* the writer's span, recorded by this thread (a lane has one writer) */
  gt_trace_span(a->prof && a->prof->tr ? gt_trace_writer(a->prof->tr) : NULL, "checkpoint write (background)",
                "checkpoint", a->w_t0, a->w_t1);
  double t0 = gt_prof_now();
  if (a->save) { /* several ranks: agree and commit here, on every rank */
    if (broken) {
      gt_ckpt_save_abandon(a->save);
      a->save = NULL;
      return GT_OK;
    }
    if (rc) *err = a->werr;
    rc = gt_ckpt_save_end(a->save, rc, err);
    a->save = NULL;
  } else if (rc) {
    *err = a->werr;
  }
  if (!rc) gt__ckpt_done(s, a, gt_prof_now() - t0);
  return rc;
}

gt_rc gt__train_checkpoint(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err) {
  gt__ckpt_async *a = s->ckpt;
  if (!a || !a->on) {
    double t0 = gt_prof_now();
    gt_rc rc = gt__train_save(s, run_dir, step, err);
    gt_trace_span(gt_profiler_host(a ? a->prof : NULL), "checkpoint write", "checkpoint", t0, gt_prof_now());
    return rc;
  }
  double t0 = gt_prof_now();
  /* the previous write first: one save at a time */
  int waited = a->thread_live;
  gt_rc rc = gt__ckpt_finish(s, 0, err);
  if (rc) return rc;
  double t1 = gt_prof_now();
  if (waited) gt_trace_span(gt_profiler_host(a->prof), "checkpoint wait (previous write)", "checkpoint", t0, t1);
  gt_ckpt_src src;
  float *host;
  if ((rc = gt__state_src(s, &src, a->tab, a->snap, &host, err))) return rc;
  gt_ckpt_state st;
  gt_ckpt_frozen fz;
  gt__ckpt_state(s, step, src.n_shards, &st, &fz);
  snprintf(a->root, sizeof a->root, "%s/checkpoints", run_dir);
  char *cj = gt_config_to_json(s->cfg);
  const int R = gt_dist_size();
  gt_ckpt_sync sync = {gt_dist_rank(), R, gt__agree, NULL};
  rc = gt_ckpt_save_begin(&a->save, a->root, s->m, &src, &st, &fz, s->writer.run_id ? &s->writer : NULL, cj,
                          (int)s->cfg->checkpoint_compression, s->cfg->max_num_checkpoints_to_keep,
                          R > 1 ? &sync : NULL, err);
  free(cj);
  if (rc) return rc;
  a->step = step, a->n_shards = src.n_shards;
  a->commit_in_thread = R == 1;
  atomic_store(&a->done, 0);
  /* the thread starts on every rank or the save ends here on every rank */
  int e = pthread_create(&a->th, NULL, gt__writer_main, a);
  rc = e ? gt_err_set(err, GT_ERR_IO, "train: cannot start the checkpoint writer thread: %s", strerror(e)) : GT_OK;
  a->thread_live = !e;
  if (e) {
    gt_err mine = *err;
    rc = gt_ckpt_save_end(a->save, rc, &mine);
    a->save = NULL;
    *err = mine;
    return rc ? rc : GT_ERR_IO;
  }
  double t2 = gt_prof_now();
  a->blocked = t2 - t0;
  gt_trace_span(gt_profiler_host(a->prof), "checkpoint snapshot", "checkpoint", t1, t2);
  return GT_OK;
}

gt_rc gt__train_ckpt_poll(const gt__tstate *s, gt_step_metrics *sm, gt_err *err) {
  gt__ckpt_async *a = s->ckpt;
  if (!a) return GT_OK;
  gt_rc rc = GT_OK;
  if (a->thread_live) {
    /* every rank has this save in flight; it ends when every writer has */
    int64_t done = atomic_load(&a->done);
    if (gt_dist_size() > 1 && (rc = gt_dist_allreduce_i64(&done, 1, GT_DIST_MIN, "the checkpoint writers", err)))
      return rc;
    if (done && (rc = gt__ckpt_finish(s, 0, err))) return rc;
  }
  if (a->have_report && sm) {
    sm->has_checkpoint = 1;
    sm->checkpoint_write_seconds = a->rep_write;
    sm->checkpoint_blocked_seconds = a->rep_blocked;
    a->have_report = 0;
  }
  return GT_OK;
}

gt_rc gt__train_ckpt_wait(const gt__tstate *s, gt_err *err) { return gt__ckpt_finish(s, 0, err); }

gt_rc gt__train_ckpt_close(gt__tstate *s, int broken, gt_err *err) {
  gt__ckpt_async *a = s->ckpt;
  if (!a) return GT_OK;
  gt_rc rc = gt__ckpt_finish(s, broken, err);
  gt_mem_free(&a->mem, a->snap);
  free(a);
  s->ckpt = NULL;
  return rc;
}

gt_rc gt__train_source(gt_config *cfg, gt_model_source *src, int *have, gt_err *err) {
  *have = 0;
  /* the adapters are read over the base they adapt, which comes from
   * load_parameters_path: without one they would be silently dropped */
  if (!cfg->load_parameters_path[0] && cfg->lora_restore_path[0])
    return gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'lora_restore_path' = '%s' needs the base model its adapters were trained over; "
                      "set load_parameters_path to it (a Hugging Face directory or a checkpoint)",
                      cfg->lora_restore_path);
  if (!cfg->load_parameters_path[0]) return GT_OK;
  gt_rc rc = gt_model_source_open(cfg->load_parameters_path, src, err);
  if (!rc) rc = gt_model_source_apply_config(src, cfg, err);
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return gt_err_set(err, rc, "train: load_parameters_path: %s", msg);
  }
  *have = 1;
  return GT_OK;
}

static void gt__log(void *ctx, const char *line) {
  FILE *out = ctx;
  if (out) fprintf(out, "%s\n", line), fflush(out);
}

/* Names the keys whose values differ between the checkpoint's config and
 * this run's, so a resume with changed settings is visible. */
static void gt__report_config_changes(FILE *out, const char *saved_json, const gt_config *cfg, int64_t opt_step) {
  if (!out || !saved_json) return;
  char *now_json = gt_config_to_json(cfg);
  cJSON *a = cJSON_Parse(saved_json), *b = cJSON_Parse(now_json);
  char line[1500];
  size_t o = 0;
  int n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, b) {
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(a, it->string);
    if (old && cJSON_Compare(old, it, 1)) continue;
    char *x = old ? cJSON_PrintUnformatted(old) : NULL, *y = cJSON_PrintUnformatted(it);
    if (o < sizeof line)
      o += (size_t)snprintf(line + o, sizeof line - o, "%s%s %s -> %s", n ? ", " : "", it->string, x ? x : "(unset)",
                            y ? y : "?");
    n++;
    free(x), free(y);
  }
  if (n) fprintf(out, "resume: %d key%s differ%s from the checkpoint's config: %s\n", n, n > 1 ? "s" : "",
                 n > 1 ? "" : "s", line);
  /* a changed schedule (more steps stretch a cosine whose length is
   * steps) moves the rate the next update uses: say by how much */
  gt_config old = *cfg;
  gt_err ignored;
  if (n && gt_config_apply_json_text(&old, saved_json, "the checkpoint's config", &ignored) == GT_OK) {
    double was = gt_lr_at(&old, opt_step), now = gt_lr_at(cfg, opt_step);
    if (fabs(was - now) > 1e-9 * fmax(fabs(was), fabs(now)))
      fprintf(out,
              "resume: the learning-rate schedule changed: AdamW step %lld uses %.6g where the checkpoint's schedule "
              "gave %.6g; the rate jumps%s\n",
              (long long)opt_step, now, was,
              cfg->learning_rate_schedule_steps > 0
                  ? ""
                  : " (learning_rate_schedule_steps=-1 follows steps; set it to the checkpoint's steps to keep the "
                    "old schedule)");
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
  free(now_json);
}

gt_rc gt__train_restore(const gt__tstate *s, const char *run_dir, int64_t *start, int *resumed, gt_err *err) {
  const gt_config *c = s->cfg;
  *start = 0;
  *resumed = 0;
  char own[2200];
  snprintf(own, sizeof own, "%s/checkpoints", run_dir);
  const char *path = NULL, *why = NULL;
  int full = 1;
  /* MaxText's order: the run's own checkpoint wins, so a restarted job
   * continues instead of starting over from its initial weights */
  if (c->enable_checkpointing && gt_ckpt_present(own))
    path = own, why = "the run directory", *resumed = 1;
  else if (c->load_full_state_path[0])
    path = c->load_full_state_path, why = "load_full_state_path";
  else if (c->load_parameters_path[0])
    path = c->load_parameters_path, why = "load_parameters_path", full = 0;
  if (!path) return GT_OK;
  /* DiLoCo: every replica resumes the step replica 0 loads (its `latest`,
   * or the step its load fell back to), which world rank 0 sends once its
   * replica has loaded; the other replicas then load their parts of it */
  const int dl = *resumed && gt_diloco_on(c) && gt_dist_replicas() > 1, dl_first = dl && gt_dist_replica() == 0;
  gt_rc rc = GT_OK;
  if (dl && !dl_first) {
    int64_t st = -1;
    if ((rc = gt_dist_bcast(&st, sizeof st, 0, "the DiLoCo resume step", err))) return rc;
    if (st < 0)
      return gt_err_set(err, GT_ERR_CONFIG, "train: replica 0 could not resume from %s (its ranks say why)", own);
    if ((rc = gt_diloco_ckpt_path(s->cfg, run_dir, st, own, sizeof own, err))) return rc;
  }
  gt_model *m = s->m;
  float *p, *mu = NULL, *nu = NULL;
  /* assemble full buffers on the host, then hand each device its shards */
  float *host = gt_mem_alloc_uninit(s->mem, GT_MEM_OTHER, (size_t)m->n_params * (full ? 3 : 1) * sizeof(float));
  if (!host)
    return gt_err_set(err, GT_ERR_NOMEM, "train: no memory to load the checkpoint's %lld parameters%s",
                      (long long)m->n_params, full ? " and AdamW moments" : "");
  p = host;
  if (full) mu = host + m->n_params, nu = host + 2 * m->n_params;
  gt_ckpt_loaded ld;
  if (!full) {
    /* parameters of a checkpoint, an HF directory or a parameter file; the
     * adapters (model/lora.h), which a base lacks, start initialised */
    if (m->n_lora_tensors) {
      gt_model view = *m;
      view.params = p;
      if (gt_model_init_params(&view, (uint64_t)c->init_weights_seed, c->weight_init_scale))
        rc = gt_err_set(err, GT_ERR_NOMEM, "train: no memory to initialise the adapters (init_weights_seed=%d)",
                        c->init_weights_seed);
    }
    if (!rc)
      rc = s->src ? gt_model_source_load_params(s->src, m, p, err)
                : gt_err_set(err, GT_ERR_INTERNAL, "train: load_parameters_path was not opened");
    memset(&ld, 0, sizeof ld);
    snprintf(ld.dir, sizeof ld.dir, "%.1100s", s->src ? s->src->dir : path);
    if (s->src && s->src->kind == GT_SRC_HF) why = "load_parameters_path, a Hugging Face directory";
    if (s->src && s->src->kind == GT_SRC_PARAMFILE) why = "load_parameters_path, a parameter file";
  } else {
    char fsrc[1100];
    gt__frozen_source(c, fsrc, sizeof fsrc);
    rc = gt__frozen_fill(s, p, err);
    if (!rc) rc = gt_ckpt_load_latest(path, m, p, mu, nu, &ld, gt__log, s->out, err);
    if (rc && m->n_frozen_tensors) { /* say where this run's frozen tensors came from */
      char msg[GT_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      gt_err_set(err, rc, "%s (this run's frozen tensors: %s)", msg, fsrc);
    }
    if (dl_first) { /* the step the other replicas load (-1: none) */
      int64_t st = rc ? -1 : ld.state.step;
      gt_err sub;
      gt_err_clear(&sub);
      gt_rc brc = gt_dist_bcast(&st, sizeof st, 0, "the DiLoCo resume step", &sub);
      if (!rc && brc) rc = brc, *err = sub;
    }
  }
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    gt_err_set(err, rc, "train: cannot start from %s '%s': %s", why, path, msg);
    goto out;
  }
  /* the data position is checked by the data source (its windows) before
   * any of the state is used */
  if (full && (rc = gt_data_seek(s->data, ld.state.data, err))) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    gt_err_set(err, rc, "train: cannot resume from '%s': %s", ld.dir, msg);
    goto out;
  }
  int64_t opt_step = full ? ld.state.opt_step : 0;
  if ((rc = gt_fsdp_set_state(gt_trainer_fsdp(s->tr), p, mu, nu, opt_step, err))) goto out;
  /* DiLoCo's outer state: its own part of the checkpoint, or this state */
  if ((rc = gt_diloco_ckpt_restore(gt_trainer_diloco(s->tr), s->m, run_dir, *resumed ? ld.state.step : -1, p, mu, nu,
                                   s->out, err)))
    goto out;
  if (full && *resumed && s->ref) s->ref[1] = ld.state.reference; /* checked when the reference is read */
  if (full) {
    *start = ld.state.step;
    gt_trainer_set_step_index(s->tr, ld.state.step);
    gt_trainer_set_spike_state(s->tr, &ld.state.spike);
  }
  if (s->out) {
    char dpos[1600];
    gt_data_position(s->data, ld.state.data, dpos, sizeof dpos);
    if (full)
      fprintf(s->out,
              "resumed from %s (%s): step %lld, AdamW step %lld, data %s; written by %lld device%s in %lld shard%s\n",
              ld.dir, why, (long long)ld.state.step, (long long)ld.state.opt_step, dpos,
              (long long)ld.state.num_devices, ld.state.num_devices > 1 ? "s" : "", (long long)ld.state.n_shards,
              ld.state.n_shards > 1 ? "s" : "");
    else
    {
      fprintf(s->out, "loaded parameters from %s (%s); optimizer and data start fresh\n", ld.dir, why);
      if (s->src && s->src->converted[0]) fprintf(s->out, "%s\n", s->src->converted);
    }
    if (full) gt__report_config_changes(s->out, ld.config_json, c, ld.state.opt_step);
    /* the rate follows the AdamW step, which a step advances by one at most:
     * from the schedule's end on, every step left runs at rate 0 */
    long long S = c->learning_rate_schedule_steps;
    if (full && S > 0 && ld.state.opt_step >= S && ld.state.step < c->steps)
      fprintf(s->out,
              "resume: the learning-rate schedule ends at step %lld (learning_rate_schedule_steps=%lld) and the "
              "checkpoint is at AdamW step %lld: steps %lld to %lld all run at learning rate 0 and train nothing; "
              "raise learning_rate_schedule_steps to train further\n",
              S, S, (long long)ld.state.opt_step, (long long)ld.state.step, c->steps - 1);
    /* the order of an epoch is a function of its rows: other data (files
     * added, changed, split otherwise) gives another order, and the cursor
     * no longer marks what was seen */
    if (full && ld.state.data_rows > 0 && ld.state.data_rows != s->data->n_train_rows)
      fprintf(s->out,
              "resume: the training data has %lld rows where the checkpoint's run had %lld (files added or changed, "
              "or another split): the order of epoch %lld is another, so rows of it may be seen twice or not at all\n",
              (long long)s->data->n_train_rows, (long long)ld.state.data_rows, (long long)ld.state.data.epoch);
    if (full && c->skip_step_on_spikes && !ld.state.spike.count && ld.state.step > 0)
      fprintf(s->out, "resume: the checkpoint holds no spike guard window (no step before it entered one, or written "
                      "by an older gemtrain); the guard starts an empty one\n");
    fflush(s->out);
  }
out:
  free(ld.config_json);
  gt_mem_free(s->mem, host);
  return rc;
}
