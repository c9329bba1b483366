/* Checkpoint directories: build under a temporary name, fsync, rename into
 * place, then move `latest` by rename (the commit point); on load, walk back
 * from `latest` past any checkpoint that does not verify. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/ckpt_seam.h"
#include "config/config.h"

#define GT__PATH 1400

static int gt__is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static gt_rc gt__fsync_dir(const char *dir, gt_err *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot open directory '%s': %s", dir, strerror(errno));
  int r = fsync(fd);
  close(fd);
  if (r) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot fsync directory '%s': %s", dir, strerror(errno));
  return GT_OK;
}

/* Removes a step directory and the plain files in it (checkpoint
 * directories hold no subdirectories). */
static void gt__rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char p[GT__PATH];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

/* "step_00000010" -> 10; -1 if the name is not a step directory's */
static int64_t gt__step_of(const char *name) {
  if (strncmp(name, "step_", 5) || !name[5]) return -1;
  char *end;
  long long v = strtoll(name + 5, &end, 10);
  return *end || v < 0 ? -1 : (int64_t)v;
}

static int gt__cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of all step directories under root, newest first (malloc'd). */
static int64_t *gt__list_steps(const char *root, int *n) {
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return NULL;
  int cap = 16;
  int64_t *v = malloc(sizeof(int64_t) * (size_t)cap);
  struct dirent *e;
  char p[GT__PATH];
  while (v && (e = readdir(d))) {
    int64_t s = gt__step_of(e->d_name);
    snprintf(p, sizeof p, "%s/%s", root, e->d_name);
    if (s < 0 || !gt__is_dir(p)) continue;
    if (*n == cap) {
      int64_t *nv = realloc(v, sizeof(int64_t) * (size_t)(cap *= 2));
      if (!nv) break;
      v = nv;
    }
    v[(*n)++] = s;
  }
  closedir(d);
  if (v) qsort(v, (size_t)*n, sizeof(int64_t), gt__cmp_desc);
  return v;
}

static void gt__step_name(int64_t step, char *buf, size_t n) { snprintf(buf, n, "step_%08lld", (long long)step); }

/* Stale temporary directories from an interrupted save. */
static void gt__clean_tmp(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *e;
  char p[GT__PATH];
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, ".tmp-", 5) || !strncmp(e->d_name, ".old-", 5)) {
      snprintf(p, sizeof p, "%s/%s", root, e->d_name);
      gt__rm_dir(p);
    }
  closedir(d);
}

static gt_rc gt__read_state(const cJSON *st, const char *file, int64_t step, int S, gt_ckpt_state *out, gt_err *err);

/* The writer's identity, beside the state: {"run_id": hex, "config_checksum": hex}. */
static void gt__add_writer(cJSON *meta, const gt_ckpt_writer *wr) {
  char a[20], b[20];
  snprintf(a, sizeof a, "%016llx", (unsigned long long)wr->run_id);
  snprintf(b, sizeof b, "%016llx", (unsigned long long)wr->config_sum);
  cJSON *w = cJSON_AddObjectToObject(meta, "writer");
  cJSON_AddStringToObject(w, "run_id", a);
  cJSON_AddStringToObject(w, "config_checksum", b);
}

/* Shards whose writers differ (one absent and the other present counts):
 * refused, naming both files and both writers. */
static gt_rc gt__same_writer(const cJSON *h0, const char *file0, const cJSON *h, const char *file, gt_err *err) {
  const cJSON *w0 = cJSON_GetObjectItemCaseSensitive(h0, "writer"), *w = cJSON_GetObjectItemCaseSensitive(h, "writer");
  if ((!w0 && !w) || (w0 && w && cJSON_Compare(w0, w, 1))) return GT_OK;
  char *a = w0 ? cJSON_PrintUnformatted(w0) : NULL, *b = w ? cJSON_PrintUnformatted(w) : NULL;
  gt_err_set(err, GT_ERR_FORMAT,
             "checkpoint: '%s' was written by %s and '%s' by %s: the shards come from different runs (or "
             "configurations) and do not make one checkpoint",
             file0, a ? a : "a writer that recorded no run", file, b ? b : "a writer that recorded no run");
  free(a), free(b);
  return GT_ERR_FORMAT;
}
static gt_rc gt__check_src(const gt_ckpt_src *src, const gt_ckpt_sync *sync, const char *fin, int *mine, gt_err *err);
static gt_rc gt__agree(const gt_ckpt_sync *sync, gt_rc mine, gt_err *err, const char *name, const char *phase);
static gt_rc gt__check_written(const char *tmp, int S, const cJSON *state, const cJSON *meta, gt_err *err);
static gt_rc gt__commit(const char *root, const char *name, const char *tmp, const char *fin, const char *old,
                        int64_t step, int64_t keep, gt_err *err);

gt_rc gt_ckpt_save(const char *root, const gt_model *m, const gt_ckpt_src *src, const gt_ckpt_state *st,
                   const char *config_json, int compression, int64_t keep, gt_err *err) {
  return gt_ckpt_save_sync(root, m, src, st, config_json, compression, keep, NULL, err);
}

/* Every rank goes through the same three agreements (prepare, write,
 * commit) and stops at the same one when any rank failed, so the
 * collectives always match. */
gt_rc gt_ckpt_save_sync(const char *root, const gt_model *m, const gt_ckpt_src *src, const gt_ckpt_state *st,
                        const char *config_json, int compression, int64_t keep, const gt_ckpt_sync *sync,
                        gt_err *err) {
  return gt_ckpt_save_frozen(root, m, src, st, NULL, NULL, config_json, compression, keep, sync, err);
}

/* A save in its three phases (ckpt.h): what _begin settles, _write and
 * _end use. */
struct gt_ckpt_pending {
  char root[GT__PATH], name[64], tmp[GT__PATH], fin[GT__PATH], old[GT__PATH];
  const gt_model *m;
  int n_shards;
  const float **arr; /* [3 * n_shards]: params, mu, nu of shard r at r, S + r, 2S + r */
  int64_t step;
  cJSON *meta, *sj;
  int compression;
  int64_t keep;
  gt_ckpt_sync sync;
  int has_sync, lead, created;
};

static void gt__save_free(gt_ckpt_pending *s) {
  if (!s) return;
  cJSON_Delete(s->meta);
  free(s->arr);
  free(s);
}

/* The spike guard's record (ckpt.h's gt_ckpt_spike), left out while it is
 * all zero (no step has entered the window yet): such a header is the one a
 * checkpoint older than the record has. */
void gt__ckpt_add_spike(cJSON *sj, const gt_ckpt_spike *sp) {
  if (!sp->count && !sp->skipped_steps) return;
  cJSON *g = cJSON_AddObjectToObject(sj, "spike_guard");
  cJSON_AddNumberToObject(g, "count", (double)sp->count);
  cJSON_AddNumberToObject(g, "skipped_steps", (double)sp->skipped_steps);
  int n = sp->n < 0 ? 0 : sp->n > GT_CKPT_SPIKE_MAX ? GT_CKPT_SPIKE_MAX : sp->n;
  /* a float prints as a double that reads back to the same float */
  cJSON_AddItemToObject(g, "loss", cJSON_CreateFloatArray(sp->loss, n));
  cJSON_AddItemToObject(g, "grad_norm", cJSON_CreateFloatArray(sp->grad_norm, n));
}

/* Absent (no step entered the window, or a checkpoint older than the
 * record): an empty record. Present: every field checked. */
gt_rc gt__ckpt_read_spike(const cJSON *g, const char *file, const char *what, int64_t step, gt_ckpt_spike *out,
                          gt_err *err) {
  memset(out, 0, sizeof *out);
  if (!g) return GT_OK;
  gt_rc rc;
  if ((rc = gt__ckpt_int(g, "count", 0, GT__CKPT_INT_MAX, file, what, "values pushed", &out->count, err)) ||
      (rc = gt__ckpt_int(g, "skipped_steps", 0, step, file, what, "at most one per step", &out->skipped_steps, err)))
    return rc;
  int64_t most = out->count < GT_CKPT_SPIKE_MAX ? out->count : GT_CKPT_SPIKE_MAX;
  const char *names[2] = {"loss", "grad_norm"};
  float *dst[2] = {out->loss, out->grad_norm};
  for (int w = 0; w < 2; w++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(g, names[w]);
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 0 || n > most || (w == 1 && n != out->n))
      return gt_err_set(err, GT_ERR_FORMAT,
                        "checkpoint: '%s' %s field '%s' is %s of %d values; expected an array of "
                        "%s%lld values (min(count, %d))",
                        file, what, names[w], n < 0 ? "not an array" : "an array", n < 0 ? 0 : n,
                        w == 1 ? "the loss window's " : "at most ", w == 1 ? (long long)out->n : (long long)most,
                        GT_CKPT_SPIKE_MAX);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
      if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 3.4e38)
        return gt_err_set(err, GT_ERR_FORMAT,
                          "checkpoint: '%s' %s field '%s' value %d is not a finite float32 >= 0", file, what,
                          names[w], i);
      dst[w][i++] = (float)v->valuedouble;
    }
    out->n = n;
  }
  return GT_OK;
}

/* DPO's reference (ckpt.h's gt_ckpt_reference), left out when there is none. */
static void gt__add_reference(cJSON *sj, const gt_ckpt_reference *r) {
  if (!r->sum) return;
  cJSON *g = cJSON_AddObjectToObject(sj, "dpo_reference");
  char hex[24];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->sum);
  cJSON_AddStringToObject(g, "source", r->source);
  cJSON_AddStringToObject(g, "checksum", hex);
}

static gt_rc gt__read_reference(const cJSON *g, const char *file, gt_ckpt_reference *out, gt_err *err) {
  memset(out, 0, sizeof *out);
  if (!g) return GT_OK;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(g, "source"), *sum = cJSON_GetObjectItemCaseSensitive(g, "checksum");
  char *end = NULL;
  unsigned long long v = cJSON_IsString(sum) ? strtoull(sum->valuestring, &end, 16) : 0;
  if (!cJSON_IsObject(g) || !cJSON_IsString(src) || strlen(src->valuestring) >= sizeof out->source || !end ||
      *end || strlen(sum->valuestring) != 16 || !v)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "checkpoint: '%s' state field 'dpo_reference' is not {\"source\": a string, \"checksum\": 16 hex "
                      "digits, not all zero}",
                      file);
  out->sum = v;
  snprintf(out->source, sizeof out->source, "%s", src->valuestring);
  return GT_OK;
}

gt_rc gt_ckpt_save_frozen(const char *root, const gt_model *m, const gt_ckpt_src *src, const gt_ckpt_state *st,
                          const gt_ckpt_frozen *frozen, const gt_ckpt_writer *writer, const char *config_json,
                          int compression, int64_t keep, const gt_ckpt_sync *sync, gt_err *err) {
  gt_err local;
  if (!err) err = &local; /* the ranks' outcomes are agreed through it */
  gt_ckpt_pending *s;
  gt_rc rc = gt_ckpt_save_begin(&s, root, m, src, st, frozen, writer, config_json, compression, keep, sync, err);
  if (rc) return rc;
  rc = gt_ckpt_save_write(s, err);
  return gt_ckpt_save_end(s, rc, err);
}

gt_rc gt_ckpt_save_hf(const char *root, const gt_model *m, const gt_ckpt_src *src, const gt_ckpt_state *st,
                      const char *config_json, long long hf_embed_rows, gt_err *err) {
  if (hf_embed_rows < 1)
    return gt_err_set(err, GT_ERR_ARG, "checkpoint: hf_embed_rows = %lld; expected a row count of at least 1",
                      hf_embed_rows);
  gt_ckpt_pending *s;
  gt_rc rc = gt_ckpt_save_begin(&s, root, m, src, st, NULL, NULL, config_json, 0, 0, NULL, err);
  if (rc) return rc;
  cJSON_AddNumberToObject(s->meta, "hf_embed_rows", (double)hf_embed_rows);
  rc = gt_ckpt_save_write(s, err);
  return gt_ckpt_save_end(s, rc, err);
}

gt_rc gt_ckpt_save_begin(gt_ckpt_pending **out, const char *root, const gt_model *m, const gt_ckpt_src *src,
                         const gt_ckpt_state *st, const gt_ckpt_frozen *frozen, const gt_ckpt_writer *writer,
                         const char *config_json, int compression, int64_t keep, const gt_ckpt_sync *sync,
                         gt_err *err) {
  gt_err local;
  *out = NULL;
  if (m->n_frozen_tensors && !frozen)
    return gt_err_set(err ? err : &local, GT_ERR_ARG,
                      "checkpoint: the model has %d frozen tensors and no reference to them was given",
                      m->n_frozen_tensors);
  if (!err) err = &local; /* the ranks' outcomes are agreed through it */
  if (sync && (!sync->agree || sync->size < 1 || sync->rank < 0 || sync->rank >= sync->size))
    return gt_err_set(err, GT_ERR_ARG, "checkpoint: rank %d of %d%s; expected 0 <= rank < size and an agree function",
                      sync->rank, sync->size, sync->agree ? "" : " without an agree function");
  gt_ckpt_pending *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ERR_NOMEM, "checkpoint: no memory");
  s->m = m, s->step = st->step, s->compression = compression, s->keep = keep;
  s->has_sync = sync != NULL;
  if (sync) s->sync = *sync;
  s->lead = !sync || sync->rank == 0;
  int mine = 0;
  /* named by the step, so every rank knows the directory without being told */
  gt__step_name(st->step, s->name, sizeof s->name);
  snprintf(s->root, sizeof s->root, "%s", root);
  snprintf(s->tmp, sizeof s->tmp, "%s/.tmp-%s", root, s->name);
  snprintf(s->fin, sizeof s->fin, "%s/%s", root, s->name);
  snprintf(s->old, sizeof s->old, "%s/.old-%s", root, s->name);
  gt_rc rc = s->lead ? gt_mkdirs(root, "checkpoint", err) : GT_OK;
  if (rc) goto prepared;
  /* a stale temporary directory of this very step (a crashed save) goes
   * too, before any rank writes into its name */
  if (s->lead) gt__clean_tmp(root);
  if ((rc = gt__check_src(src, sync, s->fin, &mine, err))) goto prepared;
  s->n_shards = src->n_shards;
  /* the arrays' addresses are kept: the caller's tables may go */
  if (!(s->arr = calloc((size_t)s->n_shards * 3, sizeof *s->arr))) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "checkpoint: no memory");
    goto prepared;
  }
  for (int r = 0; r < s->n_shards && src->params; r++)
    if (src->params[r])
      s->arr[r] = src->params[r], s->arr[s->n_shards + r] = src->mu[r], s->arr[2 * s->n_shards + r] = src->nu[r];
  if (mine) gt__ckpt_fault_next_save();
  cJSON *meta = s->meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "format", "gemtrain checkpoint");
  cJSON_AddNumberToObject(meta, "version", GT_CKPT_VERSION);
  cJSON *sj = s->sj = cJSON_AddObjectToObject(meta, "state");
  cJSON_AddNumberToObject(sj, "step", (double)st->step);
  cJSON_AddNumberToObject(sj, "opt_step", (double)st->opt_step);
  cJSON_AddNumberToObject(sj, "data_epoch", (double)st->data.epoch);
  cJSON_AddNumberToObject(sj, "data_cursor", (double)st->data.cursor);
  cJSON_AddNumberToObject(sj, "num_devices", (double)st->num_devices);
  cJSON_AddNumberToObject(sj, "n_shards", (double)src->n_shards);
  cJSON_AddNumberToObject(sj, "next_lr", st->next_lr);
  gt__ckpt_add_spike(sj, &st->spike);
  gt__add_reference(sj, &st->reference);
  if (st->data_rows > 0) cJSON_AddNumberToObject(sj, "data_rows", (double)st->data_rows);
  if (writer) gt__add_writer(meta, writer);
  /* a state the loader would refuse is never written */
  gt_ckpt_state chk;
  if (gt__read_state(sj, s->fin, st->step, src->n_shards, &chk, err)) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    rc = gt_err_set(err, GT_ERR_ARG, "checkpoint: refusing to write a state the loader would refuse: %s", msg);
    goto prepared;
  }
  if (s->lead && mkdir(s->tmp, 0755)) {
    rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot create '%s': %s", s->tmp, strerror(errno));
    goto prepared;
  }
  s->created = s->lead;
  cJSON *cj = config_json ? cJSON_Parse(config_json) : NULL;
  if (cj) cJSON_AddItemToObject(meta, "config", cj);
  cJSON_AddItemToObject(meta, "model", gt__ckpt_model_table(m));
  cJSON *fz = frozen ? gt__ckpt_frozen_ref(m, frozen->sum, frozen->source) : NULL;
  if (fz) cJSON_AddItemToObject(meta, "frozen", fz);
prepared:
  if ((rc = gt__agree(sync, rc, err, s->name, "prepare"))) {
    if (s->created) gt__rm_dir(s->tmp);
    gt__save_free(s);
    return rc;
  }
  gt__ckpt_point("prepared", s->step);
  *out = s;
  return GT_OK;
}

/* This process's shard files, each written and fsync'ed in the temporary
 * directory; no agreement, so any thread may run it. */
gt_rc gt_ckpt_save_write(gt_ckpt_pending *s, gt_err *err) {
  gt_rc rc = GT_OK;
  char file[GT__PATH + 64];
  for (int r = 0, first = 1; r < s->n_shards && !rc; r++) {
    if (!s->arr[r]) continue; /* another rank's */
    snprintf(file, sizeof file, "%s/shard_%05d-of-%05d.gtck", s->tmp, r, s->n_shards);
    rc = gt__ckpt_write_shard(file, s->m, r, s->n_shards, s->arr[r], s->arr[s->n_shards + r],
                              s->arr[2 * s->n_shards + r], s->meta, s->compression, s->has_sync, first ? s->step : -1,
                              err);
    first = 0;
  }
  if (!rc) gt__ckpt_point("written", s->step);
  return rc;
}

gt_rc gt_ckpt_save_end(gt_ckpt_pending *s, gt_rc write_rc, gt_err *err) {
  gt_err local;
  if (!err) err = &local;
  /* a copy: the last agreement comes after s is freed */
  gt_ckpt_sync sync_copy = s->sync;
  const gt_ckpt_sync *sync = s->has_sync ? &sync_copy : NULL;
  gt_rc rc = gt__agree(sync, write_rc, err, s->name, "write");
  if (rc) {
    if (s->created) gt__rm_dir(s->tmp);
    gt__save_free(s);
    return rc;
  }
  if (s->lead) {
    rc = sync ? gt__check_written(s->tmp, s->n_shards, s->sj, s->meta, err) : GT_OK;
    if (rc)
      gt__rm_dir(s->tmp);
    else
      rc = gt__commit(s->root, s->name, s->tmp, s->fin, s->old, s->step, s->keep, err);
  }
  char name[64];
  snprintf(name, sizeof name, "%s", s->name);
  gt__save_free(s);
  return gt__agree(sync, rc, err, name, "commit");
}

void gt_ckpt_save_abandon(gt_ckpt_pending *s) { gt__save_free(s); }

int64_t gt_ckpt_save_step(const gt_ckpt_pending *s) { return s->step; }

/* The shards this rank writes (*mine of them): all of them in a save by one
 * process; in a save by several ranks, those whose three arrays are given
 * (all three NULL: another rank's). */
static gt_rc gt__check_src(const gt_ckpt_src *src, const gt_ckpt_sync *sync, const char *fin, int *mine, gt_err *err) {
  *mine = 0;
  if (src->n_shards < 1 || src->n_shards > GT__CKPT_MAX_SHARDS)
    return gt_err_set(err, GT_ERR_ARG, "checkpoint: %d shards for '%s'; expected 1 to %d", src->n_shards, fin,
                      GT__CKPT_MAX_SHARDS);
  for (int r = 0; r < src->n_shards; r++) {
    const float *a[3] = {src->params ? src->params[r] : NULL, src->mu ? src->mu[r] : NULL, src->nu ? src->nu[r] : NULL};
    int given = !!a[0] + !!a[1] + !!a[2];
    if (given == 3) {
      (*mine)++;
      continue;
    }
    if (given == 0 && sync) continue;
    return gt_err_set(err, GT_ERR_ARG,
                      "checkpoint: shard %d of %d for '%s' has params %s, opt_mu %s, opt_nu %s; expected all three "
                      "given%s",
                      r, src->n_shards, fin, a[0] ? "given" : "NULL", a[1] ? "given" : "NULL", a[2] ? "given" : "NULL",
                      sync ? " (a shard of this rank) or all three NULL (another rank's)" : "");
  }
  return GT_OK;
}

/* One step of the protocol, agreed by every rank (without sync: this
 * process's own outcome). On failure *err holds the agreed message. */
static gt_rc gt__agree(const gt_ckpt_sync *sync, gt_rc mine, gt_err *err, const char *name, const char *phase) {
  if (!sync) return mine;
  char what[96];
  snprintf(what, sizeof what, "checkpoint %s: %s", name, phase);
  gt_err own = *err; /* err is also where the agreed message goes */
  if (!mine) gt_err_clear(&own);
  return sync->agree(sync->ctx, mine, &own, what, err);
}

/* Rank 0, before committing a save by several ranks: the temporary
 * directory holds exactly the S shard files, each the shard its name says
 * and of this save's state, so a shard no rank held (or one written for
 * another shard count or state) is refused here, not by the next load.
 * Every file is opened, not only looked up: on a shared filesystem, an open
 * is what sees another client's closed file (close-to-open consistency). */
static gt_rc gt__check_written(const char *tmp, int S, const cJSON *state, const cJSON *meta, gt_err *err) {
  DIR *d = opendir(tmp);
  if (!d) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot open '%s': %s", tmp, strerror(errno));
  struct dirent *e;
  char odd[300] = "", canon[64], file[GT__PATH + 64];
  while ((e = readdir(d))) {
    int r, s;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    int named = sscanf(e->d_name, "shard_%5d-of-%5d.gtck", &r, &s) == 2 && s == S && r >= 0 && r < S &&
                snprintf(canon, sizeof canon, "shard_%05d-of-%05d.gtck", r, s) > 0 && !strcmp(canon, e->d_name);
    if (!named && !odd[0]) snprintf(odd, sizeof odd, "%s", e->d_name);
  }
  closedir(d);
  if (odd[0])
    return gt_err_set(err, GT_ERR_ARG,
                      "checkpoint: '%s' holds '%s', which is not one of its %d shard files shard_<r>-of-%05d.gtck "
                      "(did a rank save another shard count?); not committing",
                      tmp, odd, S, S);
  for (int r = 0; r < S; r++) {
    snprintf(file, sizeof file, "%s/shard_%05d-of-%05d.gtck", tmp, r, S);
    int fd = open(file, O_RDONLY);
    if (fd < 0 && errno == ENOENT)
      return gt_err_set(err, GT_ERR_ARG,
                        "checkpoint: no rank wrote shard %d of %d ('%s'): every shard needs exactly one rank whose "
                        "gt_ckpt_src holds it; not committing",
                        r, S, file);
    if (fd < 0) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot open '%s': %s", file, strerror(errno));
    close(fd);
    cJSON *h;
    gt_rc rc = gt__ckpt_read_header(file, &h, err);
    if (rc) return rc;
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(h, "shard"), *hs = cJSON_GetObjectItemCaseSensitive(h, "state");
    int64_t v;
    if (!(rc = gt__ckpt_int(sh, "rank", r, r, file, "shard", "the shard its name says", &v, err)) &&
        !(rc = gt__ckpt_int(sh, "of", S, S, file, "shard", "this save's shard count", &v, err)) &&
        !(rc = gt__same_writer(meta, "rank 0's save", h, file, err)) && !cJSON_Compare(hs, state, 1)) {
      char *a = hs ? cJSON_PrintUnformatted(hs) : NULL, *b = cJSON_PrintUnformatted(state);
      rc = gt_err_set(err, GT_ERR_ARG,
                      "checkpoint: '%s' holds the state %s, rank 0 saves %s: the ranks did not save one state; not "
                      "committing",
                      file, a ? a : "(absent)", b ? b : "?");
      free(a), free(b);
    }
    cJSON_Delete(h);
    if (rc) return rc;
  }
  return GT_OK;
}

/* Rank 0's part once every shard is written: the directory into place,
 * then `latest` (the commit point), then retention. A failure before the
 * rename removes the temporary directory. */
static gt_rc gt__commit(const char *root, const char *name, const char *tmp, const char *fin, const char *old,
                        int64_t step, int64_t keep, gt_err *err) {
  gt_rc rc = gt__fsync_dir(tmp, err);
  /* into place: a same-step directory (one that was refused, or a rerun)
   * is moved aside first, since rename cannot replace a full directory */
  if (!rc && gt__is_dir(fin) && rename(fin, old))
    rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot move '%s' aside: %s", fin, strerror(errno));
  if (!rc && rename(tmp, fin)) rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot rename '%s': %s", tmp, strerror(errno));
  if (!rc) rc = gt__fsync_dir(root, err);
  if (rc) {
    gt__rm_dir(tmp);
    return rc;
  }
  gt__ckpt_point("renamed", step);
  gt__rm_dir(old);
  /* commit: `latest` names the new directory */
  char lt[GT__PATH + 16], lp[GT__PATH + 16];
  snprintf(lt, sizeof lt, "%s/.tmp-latest", root);
  snprintf(lp, sizeof lp, "%s/latest", root);
  FILE *f = fopen(lt, "w");
  if (!f) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot write '%s': %s", lt, strerror(errno));
  int bad = fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f));
  bad |= fclose(f) != 0;
  if (!bad) gt__ckpt_point("latest", step);
  if (bad || rename(lt, lp)) {
    rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot update '%s': %s", lp, strerror(errno));
    unlink(lt);
    return rc;
  }
  if ((rc = gt__fsync_dir(root, err))) return rc;
  gt__ckpt_point("committed", step);
  /* retention: the newest `keep` committed ones survive (the one just
   * written among them). A step above it is no committed checkpoint (a
   * crashed save's, renamed before `latest` moved, or a damaged one a
   * resume walked back from): it neither counts nor goes here, and a save
   * of its step later replaces it. */
  if (keep > 0) {
    int n, kept = 0;
    int64_t *steps = gt__list_steps(root, &n);
    for (int i = 0; steps && i < n; i++)
      if (steps[i] <= step && kept++ >= keep) {
        char nm[64], p[GT__PATH + 64];
        gt__step_name(steps[i], nm, sizeof nm);
        snprintf(p, sizeof p, "%s/%s", root, nm);
        gt__rm_dir(p);
      }
    free(steps);
  }
  return GT_OK;
}

/* How many shards a step directory holds: shard 0's name says, and every
 * shard file there must be of that count (two saves mixed are refused). */
static gt_rc gt__shard_count(const char *dir, int *S, gt_err *err) {
  DIR *d = opendir(dir);
  if (!d) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot open '%s': %s", dir, strerror(errno));
  struct dirent *e;
  char odd[300] = "", canon[64];
  int first = -1;
  *S = -1;
  while ((e = readdir(d))) {
    int r, s;
    if (strncmp(e->d_name, "shard_", 6)) continue;
    /* only the writer's exact spelling counts as a shard name */
    int named = sscanf(e->d_name, "shard_%5d-of-%5d.gtck", &r, &s) == 2 && r >= 0 && s >= 1 &&
                snprintf(canon, sizeof canon, "shard_%05d-of-%05d.gtck", r, s) > 0 && !strcmp(canon, e->d_name);
    if (!named || r >= s || (first >= 0 && s != first)) {
      if (!odd[0]) snprintf(odd, sizeof odd, "%s", e->d_name);
      continue;
    }
    first = s;
    if (r == 0) *S = s;
  }
  closedir(d);
  if (*S < 1) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has no shard_00000-of-*.gtck file", dir);
  if (odd[0])
    return gt_err_set(err, GT_ERR_FORMAT,
                      "checkpoint: '%s' holds '%s', which is not one of its %d shards shard_<r>-of-%05d.gtck", dir, odd,
                      *S, *S);
  return GT_OK;
}

/* The state of a shard header, every field checked against its range
 * before anything uses it (the data position's upper bound, the windows of
 * an epoch, is checked by the data source it is handed to). */
static gt_rc gt__read_state(const cJSON *st, const char *file, int64_t step, int S, gt_ckpt_state *out, gt_err *err) {
  /* a step reads gradient_accumulation_steps batches, and a batch crosses at
   * most one epoch boundary (a data source holds at least one batch) */
  const gt_key_spec *ga = gt_config_key("gradient_accumulation_steps"), *nd = gt_config_key("num_devices");
  int64_t per_step = ga ? (int64_t)ga->max : 1 << 20, nd_min = nd ? (int64_t)nd->min : 1,
          nd_max = nd ? (int64_t)nd->max : 1024;
  int64_t epoch_max = step > GT__CKPT_INT_MAX / per_step ? GT__CKPT_INT_MAX : step * per_step;
  char why_epoch[160], why_shards[96];
  snprintf(why_epoch, sizeof why_epoch,
           "at most %lld per step: gradient_accumulation_steps batches, each crossing at most one epoch", (long long)per_step);
  snprintf(why_shards, sizeof why_shards, "the step directory holds %d shard file%s", S, S > 1 ? "s" : "");
  gt_rc rc;
  out->step = step;
  if ((rc = gt__ckpt_int(st, "opt_step", 0, step, file, "state", "AdamW updates, at most one per step", &out->opt_step,
                         err)) ||
      (rc = gt__ckpt_int(st, "data_epoch", 0, epoch_max, file, "state", why_epoch, &out->data.epoch, err)) ||
      (rc = gt__ckpt_int(st, "data_cursor", 0, GT__CKPT_INT_MAX, file, "state",
                         "the next row of the epoch; the data source checks it against its rows",
                         &out->data.cursor, err)) ||
      (rc = gt__ckpt_int(st, "num_devices", nd_min, nd_max, file, "state",
                         "the range of config key 'num_devices'", &out->num_devices, err)) ||
      (rc = gt__ckpt_int(st, "n_shards", S, S, file, "state", why_shards, &out->n_shards, err)))
    return rc;
  const cJSON *lr = cJSON_GetObjectItemCaseSensitive(st, "next_lr");
  if (!cJSON_IsNumber(lr) || !isfinite(lr->valuedouble) || lr->valuedouble < 0) {
    char *t = lr ? cJSON_PrintUnformatted(lr) : NULL;
    gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' state field 'next_lr' = %s; expected a finite number >= 0", file,
               t ? t : "(absent)");
    free(t);
    return GT_ERR_FORMAT;
  }
  out->next_lr = lr->valuedouble;
  if ((rc = gt__ckpt_read_spike(cJSON_GetObjectItemCaseSensitive(st, "spike_guard"), file, "state spike_guard", step,
                                &out->spike, err)))
    return rc;
  out->data_rows = 0;
  if (cJSON_GetObjectItemCaseSensitive(st, "data_rows") &&
      (rc = gt__ckpt_int(st, "data_rows", 1, GT__CKPT_INT_MAX, file, "state", "the training rows of the run's data",
                         &out->data_rows, err)))
    return rc;
  return gt__read_reference(cJSON_GetObjectItemCaseSensitive(st, "dpo_reference"), file, &out->reference, err);
}

gt_rc gt_ckpt_load_dir(const char *dir, const gt_model *m, float *params, float *mu, float *nu, gt_ckpt_loaded *out,
                       gt_err *err) {
  memset(out, 0, sizeof *out);
  const char *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  int64_t step = gt__step_of(base);
  if (step < 0)
    return gt_err_set(err, GT_ERR_IO, "checkpoint: '%s' is not a checkpoint directory (expected a name step_<N>)", dir);
  char file[GT__PATH + 64];
  cJSON *h0 = NULL, *h = NULL;
  int S = -1;
  gt_rc rc = GT_OK;
  if ((rc = gt__shard_count(dir, &S, err))) return rc;
  for (int r = 0; r < S && !rc; r++) {
    snprintf(file, sizeof file, "%s/shard_%05d-of-%05d.gtck", dir, r, S);
    rc = gt__ckpt_read_shard(file, m, r, S, step, params, mu, nu, &h, NULL, err);
    if (!rc && r == 0) {
      h0 = h;
      /* the state is checked before the other shards are read */
      rc = gt__read_state(cJSON_GetObjectItemCaseSensitive(h0, "state"), file, step, S, &out->state, err);
      const cJSON *w = cJSON_GetObjectItemCaseSensitive(h0, "writer");
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(w, "run_id"), *cs = cJSON_GetObjectItemCaseSensitive(w, "config_checksum");
      if (cJSON_IsString(id)) out->writer.run_id = strtoull(id->valuestring, NULL, 16);
      if (cJSON_IsString(cs)) out->writer.config_sum = strtoull(cs->valuestring, NULL, 16);
    } else if (!rc) {
      /* every shard of one save holds the same state */
      const cJSON *s0 = cJSON_GetObjectItemCaseSensitive(h0, "state"), *sr = cJSON_GetObjectItemCaseSensitive(h, "state");
      char file0[GT__PATH + 64];
      snprintf(file0, sizeof file0, "%s/shard_%05d-of-%05d.gtck", dir, 0, S);
      rc = gt__same_writer(h0, file0, h, file, err);
      if (!rc && !cJSON_Compare(s0, sr, 1)) {
        char *a = cJSON_PrintUnformatted(sr), *b = cJSON_PrintUnformatted(s0);
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "checkpoint: '%s' holds the state %s, shard 0 holds %s; the shards are not of one save", file,
                        a ? a : "?", b ? b : "?");
        free(a), free(b);
      }
      cJSON_Delete(h);
    }
    h = NULL;
  }
  if (rc) {
    cJSON_Delete(h0);
    return rc;
  }
  /* the frozen tensors are not in the files: the caller filled them from
   * their source, and they must be the bytes the checkpoint was trained on */
  const cJSON *fz = cJSON_GetObjectItemCaseSensitive(h0, "frozen");
  if (fz) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(fz, "source"), *sum = cJSON_GetObjectItemCaseSensitive(fz, "checksum");
    snprintf(out->frozen.source, sizeof out->frozen.source, "%s", cJSON_IsString(src) ? src->valuestring : "");
    out->frozen.sum = cJSON_IsString(sum) ? strtoull(sum->valuestring, NULL, 16) : 0;
    uint64_t have = params ? gt_model_frozen_sum(m, params) : out->frozen.sum;
    if (have != out->frozen.sum) {
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "checkpoint: '%s' references frozen parameters from %s with checksum %016llx, but the frozen "
                      "parameters given have checksum %016llx: the frozen base changed since the checkpoint was written",
                      dir, out->frozen.source[0] ? out->frozen.source : "(no source recorded)",
                      (unsigned long long)out->frozen.sum, (unsigned long long)have);
      cJSON_Delete(h0);
      return rc;
    }
  }
  const cJSON *cj = cJSON_GetObjectItemCaseSensitive(h0, "config");
  out->config_json = cj ? cJSON_PrintUnformatted(cj) : NULL;
  snprintf(out->dir, sizeof out->dir, "%s", dir);
  cJSON_Delete(h0);
  return GT_OK;
}

/* Where the step directories are, for a step, checkpoints or run directory.
 * Returns 1 for a root, 2 when path is itself a step directory, 0: none. */
static int gt__resolve(const char *path, char *root, size_t n) {
  char p[GT__PATH], q[GT__PATH + 16];
  snprintf(p, sizeof p, "%s", path);
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/') p[--l] = 0;
  const char *base = strrchr(p, '/');
  if (gt__step_of(base ? base + 1 : p) >= 0 && gt__is_dir(p)) {
    snprintf(root, n, "%s", p);
    return 2;
  }
  snprintf(q, sizeof q, "%s/checkpoints", p);
  if (gt__is_dir(q)) {
    size_t len = strlen(q);
    if (len >= n) return 0; /* too long to name: not a checkpoint root we can use */
    memcpy(root, q, len + 1);
    return 1;
  }
  if (gt__is_dir(p)) {
    snprintf(root, n, "%s", p);
    return 1;
  }
  return 0;
}

int gt_ckpt_present(const char *path) {
  char root[GT__PATH], lp[GT__PATH + 16];
  int k = gt__resolve(path, root, sizeof root);
  if (k == 2) return 1;
  if (!k) return 0;
  snprintf(lp, sizeof lp, "%s/latest", root);
  if (access(lp, F_OK) == 0) return 1;
  int n;
  free(gt__list_steps(root, &n));
  return n > 0;
}

/* Tries `attempt` on the checkpoint `latest` names, then on each older one,
 * until one succeeds; refusals go to log. */
typedef gt_rc (*gt__attempt_fn)(const char *dir, void *ctx, gt_err *err);

static gt_rc gt__walk(const char *path, gt__attempt_fn attempt, void *ctx, int *n_refused, gt_ckpt_log_fn log,
                      void *log_ctx, gt_err *err) {
  gt_err local;
  if (!err) err = &local; /* the walk-back log quotes each refusal */
  char root[GT__PATH];
  int k = gt__resolve(path, root, sizeof root);
  if (!k) return gt_err_set(err, GT_ERR_IO, "checkpoint: '%s' does not exist", path);
  if (k == 2) return attempt(root, ctx, err);
  /* `latest` is the commit point: start there, never above it */
  int64_t top = -1;
  char lp[GT__PATH + 16], line[128] = "", shown[4 * sizeof line] = "";
  snprintf(lp, sizeof lp, "%s/latest", root);
  FILE *f = fopen(lp, "r");
  if (f) {
    if (fgets(line, sizeof line, f)) line[strcspn(line, "\r\n")] = 0;
    fclose(f);
    top = gt__step_of(line);
    /* quoted with its non-printable bytes as \xNN: a damaged file's bytes
     * must not reach the terminal raw */
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)line; *c && o + 5 < sizeof shown; c++)
      o += (size_t)snprintf(shown + o, sizeof shown - o, *c >= 0x20 && *c < 0x7f && *c != '\\' ? "%c" : "\\x%02x",
                            *c);
    shown[o] = 0;
    if (top < 0 && log) {
      char msg[GT__PATH + 16 + sizeof shown + 80];
      snprintf(msg, sizeof msg, "checkpoint: '%s' names '%s', not a step directory; trying every checkpoint", lp, shown);
      log(log_ctx, msg);
    }
  }
  int n;
  int64_t *steps = gt__list_steps(root, &n);
  int tried = 0;
  gt_rc rc = GT_OK;
  /* `latest` names a step that is gone (deleted by hand, or the disk lost
   * it): say so before falling back, naming the checkpoint tried instead */
  int top_found = top < 0;
  for (int i = 0; i < n && !top_found; i++) top_found = steps[i] == top;
  if (!top_found && log) {
    int older = -1;
    for (int i = 0; i < n && older < 0; i++)
      if (steps[i] < top) older = i;
    char msg[GT__PATH + sizeof shown + 200], nm[64] = "";
    if (older >= 0) gt__step_name(steps[older], nm, sizeof nm);
    snprintf(msg, sizeof msg, "checkpoint: '%s' names '%s', which does not exist; %s%s%s", lp, shown,
             older >= 0 ? "trying the newest older checkpoint, '" : "there is no older checkpoint", nm,
             older >= 0 ? "'" : "");
    log(log_ctx, msg);
  }
  for (int i = 0; i < n; i++) {
    if (top >= 0 && steps[i] > top) continue;
    char nm[64], dir[GT__PATH + 64];
    gt__step_name(steps[i], nm, sizeof nm);
    snprintf(dir, sizeof dir, "%s/%s", root, nm);
    tried++;
    if ((rc = attempt(dir, ctx, err)) == GT_OK) {
      if (n_refused) *n_refused = tried - 1;
      free(steps);
      return GT_OK;
    }
    /* a different model is not damage: walking back would not help */
    if (rc == GT_ERR_CONFIG) break;
    /* the last refusal is not logged: the error below quotes it */
    if (log && i + 1 < n) {
      char msg[GT_ERR_MSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s; trying the previous checkpoint", err->msg);
      log(log_ctx, msg);
    }
  }
  free(steps);
  if (rc == GT_ERR_CONFIG) return rc;
  if (!tried) return gt_err_set(err, GT_ERR_IO, "checkpoint: no checkpoint in '%s'", root);
  /* every refusal but this last one went to the log */
  char last[GT_ERR_MSG_MAX];
  snprintf(last, sizeof last, "%s", err->msg);
  return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: none of the %d checkpoint%s in '%s' is usable%s: %s", tried,
                    tried > 1 ? "s" : "", root, tried > 1 ? " (the newer ones' refusals are logged); the oldest" : "",
                    last);
}

typedef struct gt__load_ctx {
  const gt_model *m;
  float *params, *mu, *nu;
  gt_ckpt_loaded *out;
} gt__load_ctx;

static int64_t gt__read_fault_step = -1;
void gt__ckpt_set_read_fault(int64_t step) { gt__read_fault_step = step < 0 ? -1 : step; }

static gt_rc gt__attempt_load(const char *dir, void *ctx, gt_err *err) {
  gt__load_ctx *c = ctx;
  if (gt__read_fault_step >= 0) {
    const char *base = strrchr(dir, '/');
    if (gt__step_of(base ? base + 1 : dir) == gt__read_fault_step)
      return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot read '%s': a read error injected by a test", dir);
  }
  return gt_ckpt_load_dir(dir, c->m, c->params, c->mu, c->nu, c->out, err);
}

gt_rc gt_ckpt_load_latest(const char *path, const gt_model *m, float *params, float *mu, float *nu,
                          gt_ckpt_loaded *out, gt_ckpt_log_fn log, void *log_ctx, gt_err *err) {
  memset(out, 0, sizeof *out);
  gt__load_ctx c = {m, params, mu, nu, out};
  int refused = 0;
  gt_rc rc = gt__walk(path, gt__attempt_load, &c, &refused, log, log_ctx, err);
  out->n_refused = refused;
  return rc;
}

/* Shard 0's header of step directory dir (its file name in file). */
static gt_rc gt__header0(const char *dir, char file[GT__PATH + 64], cJSON **h, gt_err *err) {
  int S = -1;
  gt_rc rc = gt__shard_count(dir, &S, err);
  if (rc) return rc;
  snprintf(file, GT__PATH + 64, "%s/shard_00000-of-%05d.gtck", dir, S);
  return gt__ckpt_read_header(file, h, err);
}

/* The config stored in shard 0's header. */
static gt_rc gt__attempt_config(const char *dir, void *ctx, gt_err *err) {
  char **json = ctx;
  char file[GT__PATH + 64];
  cJSON *h;
  gt_rc rc;
  if ((rc = gt__header0(dir, file, &h, err))) return rc;
  const cJSON *cj = cJSON_GetObjectItemCaseSensitive(h, "config");
  *json = cj ? cJSON_PrintUnformatted(cj) : NULL;
  cJSON_Delete(h);
  if (!*json) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' stores no config", file);
  return GT_OK;
}

gt_rc gt_ckpt_read_frozen(const char *dir, char **names, int *n, gt_ckpt_frozen *fz, gt_err *err) {
  *names = NULL;
  *n = 0;
  memset(fz, 0, sizeof *fz);
  char file[GT__PATH + 64];
  cJSON *h = NULL;
  gt_rc rc;
  if ((rc = gt__header0(dir, file, &h, err))) return rc;
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(h, "frozen");
  const cJSON *tens = cJSON_GetObjectItemCaseSensitive(ref, "tensors"), *src = cJSON_GetObjectItemCaseSensitive(ref, "source");
  const cJSON *sum = cJSON_GetObjectItemCaseSensitive(ref, "checksum"), *it;
  size_t bytes = 0;
  cJSON_ArrayForEach(it, tens) if (cJSON_IsString(it)) bytes += strlen(it->valuestring) + 1;
  if (ref && bytes && !(*names = malloc(bytes)))
    rc = gt_err_set(err, GT_ERR_NOMEM, "checkpoint: no memory for the frozen tensors' names of '%s'", dir);
  size_t o = 0;
  cJSON_ArrayForEach(it, tens) if (!rc && cJSON_IsString(it)) {
    size_t k = strlen(it->valuestring) + 1;
    memcpy(*names + o, it->valuestring, k);
    o += k;
    (*n)++;
  }
  if (cJSON_IsString(src)) snprintf(fz->source, sizeof fz->source, "%s", src->valuestring);
  if (cJSON_IsString(sum)) fz->sum = strtoull(sum->valuestring, NULL, 16);
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(ref, "qtype");
  snprintf(fz->qtype, sizeof fz->qtype, "%s", cJSON_IsString(q) ? q->valuestring : "float32");
  const cJSON *eq = cJSON_GetObjectItemCaseSensitive(ref, "embedding_qtype");
  snprintf(fz->embed_qtype, sizeof fz->embed_qtype, "%s", cJSON_IsString(eq) ? eq->valuestring : "");
  cJSON_Delete(h);
  return rc;
}

gt_rc gt_ckpt_read_hf_rows(const char *dir, long long *rows, gt_err *err) {
  *rows = 0;
  char file[GT__PATH + 64];
  cJSON *h = NULL;
  gt_rc rc;
  if ((rc = gt__header0(dir, file, &h, err))) return rc;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(h, "hf_embed_rows");
  if (r && !(cJSON_IsNumber(r) && r->valuedouble >= 1 && r->valuedouble <= 1e15 &&
             r->valuedouble == (double)(long long)r->valuedouble))
    rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' header has hf_embed_rows = %s; expected a whole number >= 1",
                    file, cJSON_IsNumber(r) ? "out of range" : "not a number");
  else if (r)
    *rows = (long long)r->valuedouble;
  cJSON_Delete(h);
  return rc;
}

gt_rc gt_ckpt_read_config(const char *path, char **config_json, gt_err *err) {
  *config_json = NULL;
  return gt__walk(path, gt__attempt_config, config_json, NULL, NULL, NULL, err);
}
