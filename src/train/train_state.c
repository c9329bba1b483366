/* The training state for checkpoints: what is saved (parameters, AdamW
 * moments and step, data position, config), where it comes from on a
 * sharded run, and the rules that pick what a run starts from. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "dist/dist.h"
#include "hf/hf.h"
#include "ckpt/paramfile.h"
#include "train/diloco.h"
#include "train/optim.h"
#include "train/train_internal.h"
#include "base/prof.h"

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
  gt_model_init_params(&tmp, (uint64_t)s->cfg->init_weights_seed, s->cfg->weight_init_scale);
  return GT_OK;
}

/* The state into the checkpoints under `root`, keeping `keep`; with
 * `outer`, DiLoCo's outer parameters and momentum instead (diloco.h). */
static gt_rc gt__save_root(const gt__tstate *s, const char *root, int64_t keep, int outer, int64_t step, gt_err *err) {
  enum { MAXS = 1024 };
  const float *p[MAXS], *mu[MAXS], *nu[MAXS];
  gt_ckpt_src src = {1, p, mu, nu};
  int64_t opt_step;
  float *host = NULL;
  gt_fsdp *fs = gt_trainer_fsdp(s->tr);
  const int R = gt_dist_replica_size(), primary = gt_dist_replica_rank() == 0;
  if (outer) {
    src.n_shards = gt_fsdp_num_shards(fs);
    for (int r = 0; r < src.n_shards; r++) gt_diloco_ckpt_shard(gt_trainer_diloco(s->tr), r, &p[r], &mu[r], &nu[r]);
  } else if (gt_fsdp_expert_parallelism(fs) > 1) {
    /* a device's shard holds only its experts: save the full state as one
     * shard (restores go through full buffers anyway, onto any mesh); over
     * ranks every rank assembles it (collective) and rank 0 writes it */
    int64_t n = s->m->n_params;
    host = gt_mem_alloc_uninit(s->mem, GT_MEM_OTHER, (size_t)n * 3 * sizeof(float));
    gt_rc rc0 = host ? GT_OK
                     : gt_err_set(err, GT_ERR_NOMEM, "train: no memory to assemble the checkpoint's %lld parameters",
                                  (long long)n);
    /* the assembly is collective: a rank without the buffer must not leave
     * the others waiting in it */
    if (R > 1) {
      gt_err mine = *err;
      rc0 = gt_dist_replica_agree(rc0, &mine, "assembling the checkpoint", err);
    }
    if (!rc0) rc0 = gt_fsdp_full_state(fs, host, host + n, host + 2 * n, err);
    if (rc0) {
      gt_mem_free(s->mem, host);
      return rc0;
    }
    p[0] = host, mu[0] = host + n, nu[0] = host + 2 * n;
    /* one shard holds each unit's trainable prefix, unit after unit */
    if (s->m->n_frozen_tensors)
      for (int k = 0; k < 3; k++) gt__pack_trainable(s->m, host + k * n);
    if (!primary) p[0] = mu[0] = nu[0] = NULL;
  } else {
    /* each rank writes the shards its devices hold (NULL: another rank's) */
    src.n_shards = gt_fsdp_num_shards(fs);
    gt_rc rc0 = GT_OK;
    /* mu_dtype=bfloat16: mu is expanded to float32 copies here (freed
     * below, after the save) */
    for (int r = 0; r < src.n_shards && !rc0; r++) rc0 = gt_fsdp_shard_state(fs, r, &p[r], &mu[r], &nu[r], s->mem, err);
    if (R > 1) { /* the save is collective: every rank or none */
      gt_err mine = *err;
      rc0 = gt_dist_replica_agree(rc0, &mine, "preparing the checkpoint", err);
    }
    if (rc0) {
      gt_fsdp_shard_state_done(fs);
      return rc0;
    }
  }
  opt_step = gt_fsdp_opt_step(fs);
  gt_ckpt_state st = {step, opt_step, s->data->st, s->cfg->num_devices, src.n_shards, gt_lr_at(s->cfg, opt_step)};
  gt_ckpt_frozen fz;
  fz.sum = gt_fsdp_frozen_sum(fs);
  gt__frozen_source(s->cfg, fz.source, sizeof fz.source);
  char *cj = gt_config_to_json(s->cfg);
  double t0 = gt_prof_now();
  gt_ckpt_sync sync = {gt_dist_replica_rank(), R, gt__agree, NULL};
  gt_rc rc = gt_ckpt_save_frozen(root, s->m, &src, &st, &fz, s->writer.run_id ? &s->writer : NULL, cj,
                                 (int)s->cfg->checkpoint_compression, keep, R > 1 ? &sync : NULL, err);
  free(cj);
  gt_mem_free(s->mem, host);
  gt_fsdp_shard_state_done(fs);
  if (rc == GT_OK && s->out && !outer) {
    fprintf(s->out, "saved checkpoint %s/step_%08lld (%lld shard%s, %.2f s)\n", root, (long long)step,
            (long long)src.n_shards, src.n_shards > 1 ? "s" : "", gt_prof_now() - t0);
    fflush(s->out);
  }
  return rc;
}

gt_rc gt__train_save(const gt__tstate *s, const char *run_dir, int64_t step, gt_err *err) {
  char root[2200];
  snprintf(root, sizeof root, "%s/checkpoints", run_dir);
  if (!gt_trainer_diloco(s->tr)) return gt__save_root(s, root, s->cfg->max_num_checkpoints_to_keep, 0, step, err);
  return gt_diloco_ckpt_save(s, gt__save_root, run_dir, step, err);
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
  /* DiLoCo: a replica's own part of the run's checkpoint */
  gt_rc rc = *resumed ? gt_diloco_ckpt_path(s->cfg, run_dir, own, sizeof own, err) : GT_OK;
  if (rc) return rc;
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
      gt_model_init_params(&view, (uint64_t)c->init_weights_seed, c->weight_init_scale);
    }
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
  if (full) {
    *start = ld.state.step;
    gt_trainer_set_step_index(s->tr, ld.state.step);
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
      fprintf(s->out, "loaded parameters from %s (%s); optimizer and data start fresh\n", ld.dir, why);
    if (full) gt__report_config_changes(s->out, ld.config_json, c, ld.state.opt_step);
    fflush(s->out);
  }
out:
  free(ld.config_json);
  gt_mem_free(s->mem, host);
  return rc;
}
