/* Checkpoint directories: build under a temporary name, fsync, rename into
 * place, then move `latest` by rename (the commit point); on load, walk back
 * from `latest` past any checkpoint that does not verify. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

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

gt_rc gt_ckpt_save(const char *root, const gt_model *m, const gt_ckpt_src *src, const gt_ckpt_state *st,
                   const char *config_json, int compression, int64_t keep, gt_err *err) {
  gt_rc rc = gt_mkdirs(root, "checkpoint", err);
  if (rc) return rc;
  gt__ckpt_fault_next_save();
  gt__clean_tmp(root);
  char name[64], tmp[GT__PATH], fin[GT__PATH], old[GT__PATH], file[GT__PATH + 64];
  gt__step_name(st->step, name, sizeof name);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s", root, name);
  snprintf(fin, sizeof fin, "%s/%s", root, name);
  snprintf(old, sizeof old, "%s/.old-%s", root, name);
  if (mkdir(tmp, 0755))
    return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot create '%s': %s", tmp, strerror(errno));
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "format", "gemtrain checkpoint");
  cJSON_AddNumberToObject(meta, "version", GT_CKPT_VERSION);
  cJSON *sj = cJSON_AddObjectToObject(meta, "state");
  cJSON_AddNumberToObject(sj, "step", (double)st->step);
  cJSON_AddNumberToObject(sj, "opt_step", (double)st->opt_step);
  cJSON_AddNumberToObject(sj, "data_epoch", (double)st->data.epoch);
  cJSON_AddNumberToObject(sj, "data_cursor", (double)st->data.cursor);
  cJSON_AddNumberToObject(sj, "num_devices", (double)st->num_devices);
  cJSON_AddNumberToObject(sj, "n_shards", (double)src->n_shards);
  cJSON_AddNumberToObject(sj, "next_lr", st->next_lr);
  cJSON *cj = config_json ? cJSON_Parse(config_json) : NULL;
  if (cj) cJSON_AddItemToObject(meta, "config", cj);
  cJSON_AddItemToObject(meta, "model", gt__ckpt_model_table(m));
  for (int r = 0; r < src->n_shards && !rc; r++) {
    snprintf(file, sizeof file, "%s/shard_%05d-of-%05d.gtck", tmp, r, src->n_shards);
    rc = gt__ckpt_write_shard(file, m, r, src->n_shards, src->params[r], src->mu[r], src->nu[r], meta, compression,
                              err);
  }
  cJSON_Delete(meta);
  if (!rc) rc = gt__fsync_dir(tmp, err);
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
  gt__rm_dir(old);
  /* commit: `latest` names the new directory */
  char lt[GT__PATH], lp[GT__PATH];
  snprintf(lt, sizeof lt, "%s/.tmp-latest", root);
  snprintf(lp, sizeof lp, "%s/latest", root);
  FILE *f = fopen(lt, "w");
  if (!f) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot write '%s': %s", lt, strerror(errno));
  int bad = fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f));
  bad |= fclose(f) != 0;
  if (bad || rename(lt, lp)) {
    rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot update '%s': %s", lp, strerror(errno));
    unlink(lt);
    return rc;
  }
  if ((rc = gt__fsync_dir(root, err))) return rc;
  /* retention: the newest `keep` survive (the one just written among them) */
  if (keep > 0) {
    int n;
    int64_t *steps = gt__list_steps(root, &n);
    for (int i = 0; steps && i < n; i++)
      if (i >= keep && steps[i] != st->step) {
        char nm[64], p[GT__PATH];
        gt__step_name(steps[i], nm, sizeof nm);
        snprintf(p, sizeof p, "%s/%s", root, nm);
        gt__rm_dir(p);
      }
    free(steps);
  }
  return GT_OK;
}

static int64_t gt__json_int(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* How many shards a step directory holds: shard 0's name says. */
static gt_rc gt__shard_count(const char *dir, int *S, gt_err *err) {
  DIR *d = opendir(dir);
  if (!d) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot open '%s': %s", dir, strerror(errno));
  struct dirent *e;
  *S = -1;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "shard_00000-of-", 15)) *S = atoi(e->d_name + 15);
  closedir(d);
  if (*S < 1) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has no shard_00000-of-*.gtck file", dir);
  return GT_OK;
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
    if (!rc && r == 0)
      h0 = h;
    else
      cJSON_Delete(h);
    h = NULL;
  }
  if (rc) {
    cJSON_Delete(h0);
    return rc;
  }
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(h0, "state");
  out->state.step = step;
  out->state.opt_step = gt__json_int(st, "opt_step");
  out->state.data.epoch = gt__json_int(st, "data_epoch");
  out->state.data.cursor = gt__json_int(st, "data_cursor");
  out->state.num_devices = gt__json_int(st, "num_devices");
  out->state.n_shards = S;
  const cJSON *lr = cJSON_GetObjectItemCaseSensitive(st, "next_lr");
  out->state.next_lr = cJSON_IsNumber(lr) ? lr->valuedouble : 0;
  const cJSON *cj = cJSON_GetObjectItemCaseSensitive(h0, "config");
  out->config_json = cj ? cJSON_PrintUnformatted(cj) : NULL;
  snprintf(out->dir, sizeof out->dir, "%s", dir);
  cJSON_Delete(h0);
  return GT_OK;
}

/* Where the step directories are, for a step, checkpoints or run directory.
 * Returns 1 for a root, 2 when path is itself a step directory, 0: none. */
static int gt__resolve(const char *path, char *root, size_t n) {
  char p[GT__PATH], q[GT__PATH];
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
    snprintf(root, n, "%s", q);
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
  char lp[GT__PATH + 16], line[128] = "";
  snprintf(lp, sizeof lp, "%s/latest", root);
  FILE *f = fopen(lp, "r");
  if (f) {
    if (fgets(line, sizeof line, f)) line[strcspn(line, "\r\n")] = 0;
    fclose(f);
    top = gt__step_of(line);
    if (top < 0 && log) {
      char msg[GT__PATH + 200];
      snprintf(msg, sizeof msg, "checkpoint: '%s' names '%s', not a step directory; trying every checkpoint", lp, line);
      log(log_ctx, msg);
    }
  }
  int n;
  int64_t *steps = gt__list_steps(root, &n);
  int tried = 0;
  gt_rc rc = GT_OK;
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
    if (log) {
      char msg[GT_ERR_MSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s; trying the previous checkpoint", err->msg);
      log(log_ctx, msg);
    }
  }
  free(steps);
  if (rc == GT_ERR_CONFIG) return rc;
  if (!tried) return gt_err_set(err, GT_ERR_IO, "checkpoint: no checkpoint in '%s'", root);
  return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: none of the %d checkpoint%s in '%s' is usable (see above)", tried,
                    tried > 1 ? "s" : "", root);
}

typedef struct gt__load_ctx {
  const gt_model *m;
  float *params, *mu, *nu;
  gt_ckpt_loaded *out;
} gt__load_ctx;

static gt_rc gt__attempt_load(const char *dir, void *ctx, gt_err *err) {
  gt__load_ctx *c = ctx;
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

/* The config stored in shard 0's header. */
static gt_rc gt__attempt_config(const char *dir, void *ctx, gt_err *err) {
  char **json = ctx;
  char file[GT__PATH + 64];
  int S;
  gt_rc rc = gt__shard_count(dir, &S, err);
  if (rc) return rc;
  snprintf(file, sizeof file, "%s/shard_00000-of-%05d.gtck", dir, S);
  cJSON *h;
  if ((rc = gt__ckpt_read_header(file, &h, err))) return rc;
  const cJSON *cj = cJSON_GetObjectItemCaseSensitive(h, "config");
  *json = cj ? cJSON_PrintUnformatted(cj) : NULL;
  cJSON_Delete(h);
  if (!*json) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' stores no config", file);
  return GT_OK;
}

gt_rc gt_ckpt_read_config(const char *path, char **config_json, gt_err *err) {
  *config_json = NULL;
  return gt__walk(path, gt__attempt_config, config_json, NULL, NULL, NULL, err);
}
