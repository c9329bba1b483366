/* gemtrain sweep: a point before its process starts: the arguments it runs
 * with, and an in-process check that its configuration loads (a refused
 * point never costs a process) and what its plan holds. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/plan.h"
#include "sweep_runner.h"

/* Does the config file set key? (Not readable: it does not; loading the
 * config reports that.) */
static int gt__file_sets_key(const char *path, const char *key) {
  if (!path || !path[0]) return 0;
  char *text = NULL;
  size_t n;
  if (gt_read_file(path, "sweep: config", &text, &n, NULL)) return 0;
  cJSON *j = cJSON_Parse(text);
  int has = j && cJSON_GetObjectItemCaseSensitive(j, key) != NULL;
  cJSON_Delete(j);
  free(text);
  return has;
}

gt_rc gt_sweep_point_defaults(const gt_sweep *s, gt_sweep_kvs *defaults, gt_err *err) {
  memset(defaults, 0, sizeof *defaults);
  gt_rc rc = GT_OK;
  if (!gt__file_sets_key(s->base_config, "sample_tokens")) rc = gt_sweep_kvs_set(defaults, "sample_tokens=0", err);
  if (!rc && s->max_parallel > 1 && !gt__file_sets_key(s->base_config, "threads_per_device")) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char buf[64];
    snprintf(buf, sizeof buf, "threads_per_device=%ld", cores / s->max_parallel > 0 ? cores / s->max_parallel : 1);
    rc = gt_sweep_kvs_set(defaults, buf, err);
  }
  if (rc) gt_sweep_kvs_free(defaults);
  return rc;
}

gt_rc gt_sweep_point_args(const gt_sweep_kvs *defaults, const gt_sweep_kvs *ov, int k, const char *dir,
                          gt_sweep_kvs *args, gt_err *err) {
  gt_rc rc = gt_sweep_kvs_copy(args, defaults, err);
  if (rc) return rc;
  for (int i = 0; i < ov->n && !rc; i++) rc = gt_sweep_kvs_set(args, ov->kv[i], err);
  char buf[GT_STR_PATH + 64];
  snprintf(buf, sizeof buf, "run_name=point-%d", k + 1);
  if (!rc) rc = gt_sweep_kvs_set(args, buf, err);
  if (!rc && (size_t)snprintf(buf, sizeof buf, "base_output_directory=%s/runs", dir) >= sizeof buf)
    rc = gt_err_set(err, GT_ERR_CONFIG, "sweep: the directory '%s' is too long", dir);
  if (!rc) rc = gt_sweep_kvs_set(args, buf, err);
  if (rc) gt_sweep_kvs_free(args);
  return rc;
}

int gt_sweep_point_check(const gt_sweep *s, const gt_sweep_kvs *ov, const gt_sweep_kvs *args, int decide_fit,
                         gt_sweep_result *res) {
  gt_err e;
  gt_err_clear(&e);
  gt_config cfg;
  int loaded = gt_config_load(&cfg, NULL, s->base_config[0] ? s->base_config : NULL, args->n,
                              (const char *const *)args->kv, &e) == GT_OK;
  /* load_parameters_path's model, as train and plan take it: the plan and
   * the swept model keys are its, not the preset's */
  if (loaded && gt_plan_apply_source(&cfg, &e)) loaded = 0;
  /* each swept key's value as run: the override as written, else the
   * resolved config's (so a point that leaves a key alone shows its value) */
  for (int q = 0; q < s->n_keys; q++) {
    char v[GT_STR_PATH + 64], kv[GT_STR_PATH + 160];
    const char *o = gt_sweep_kvs_get(ov, s->keys[q]);
    const gt_key_spec *spec = gt_config_key(s->keys[q]);
    if (o)
      snprintf(v, sizeof v, "%s", o);
    else if (loaded && spec && !gt_config_get_text(&cfg, s->keys[q], v, sizeof v, NULL)) {
      if (spec->type == GT_KEY_FLOAT) gt_sweep_num_text(strtod(v, NULL), v, sizeof v);
    } else
      snprintf(v, sizeof v, "-");
    snprintf(kv, sizeof kv, "%s=%s", s->keys[q], v);
    gt_sweep_kvs_set(&res->values, kv, NULL);
  }
  if (!loaded) {
    res->status = GT_SWEEP_CONFIG_ERROR;
    /* the loader calls every key=value "the command line"; here they are
     * the point's merged overrides */
    const char *cl = strstr(e.msg, "(in the command line)");
    if (cl)
      gt_sweep_msg(res->reason, sizeof res->reason, "%.*s(in the point's overrides)%s", (int)(cl - e.msg), e.msg,
                   cl + strlen("(in the command line)"));
    else
      snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    return 0;
  }
  gt_plan plan;
  if (gt_plan_compute(&plan, &cfg, &e)) {
    res->status = GT_SWEEP_CONFIG_ERROR;
    snprintf(res->reason, sizeof res->reason, "%s", e.msg);
    return 0;
  }
  res->planned_peak_bytes = (double)plan.peak_total;
  res->planned_host_bytes = (double)plan.host_peak;
  int64_t need = gt_plan_total_bytes(&plan), limit = gt_plan_memory_limit(&cfg);
  gt_plan_free(&plan);
  if (decide_fit && need > limit) {
    res->status = GT_SWEEP_DOES_NOT_FIT;
    snprintf(res->reason, sizeof res->reason,
             "the plan needs %.1f MiB (%lld x (device %.1f + host pool %.1f)) but the limit is %.1f MiB (%s)",
             (double)need / 1048576.0, cfg.num_devices, res->planned_peak_bytes / 1048576.0,
             res->planned_host_bytes / 1048576.0, (double)limit / 1048576.0,
             cfg.memory_limit_bytes ? "memory_limit_bytes" : "available RAM");
    return 0;
  }
  return 1;
}

/* The point's settings as its directory records them: the base config file
 * and the merged overrides, one per line (where the sweep lives is not
 * among them: a moved sweep still owns its points). */
static char *gt__point_identity(const char *base_config, const gt_sweep_kvs *ov) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) return NULL;
  fprintf(m, "config %s\n", base_config);
  for (int i = 0; i < ov->n; i++) fprintf(m, "%s\n", ov->kv[i]);
  if (fclose(m) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* Does the directory hold anything but its lock file and its settings? */
static int gt__dir_has_run(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int has = 0;
  struct dirent *e;
  while (!has && (e = readdir(d)))
    has = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".lock") &&
          strcmp(e->d_name, GT_SWEEP_POINT_FILE);
  closedir(d);
  return has;
}

/* path holds text, whole or not at all (a temporary file renamed over it) */
static gt_rc gt__write_file(const char *path, const char *text, gt_err *err) {
  char tmp[GT_STR_PATH + 160];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  size_t n = strlen(text);
  int ok = f && fwrite(text, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return gt_err_set(err, GT_ERR_IO, "sweep: cannot write '%s': %s", path, strerror(e));
  }
  return GT_OK;
}

static gt_rc gt__lock_point(const char *pdir, gt_run_lock *lk, gt_err *err) {
  gt_rc rc = gt_mkdirs(pdir, "sweep", err);
  if (!rc)
    rc = gt_dir_lock_take(lk, pdir, "sweep", "point directory",
                          "a point's files are only touched under its lock: wait for it to finish", err);
  return rc;
}

gt_rc gt_sweep_point_claim(const char *dir, int k, const char *base_config, const gt_sweep_kvs *ov, gt_run_lock *lk,
                           char *moved, size_t moved_n, gt_err *err) {
  lk->fd = -1;
  if (moved_n) moved[0] = '\0';
  char pdir[GT_STR_PATH + 64], file[GT_STR_PATH + 128];
  snprintf(pdir, sizeof pdir, "%s/runs/point-%d", dir, k + 1);
  snprintf(file, sizeof file, "%s/%s", pdir, GT_SWEEP_POINT_FILE);
  char *want = gt__point_identity(base_config, ov);
  if (!want) return gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  gt_rc rc = gt__lock_point(pdir, lk, err);
  char *have = NULL;
  size_t have_n = 0;
  if (!rc && gt__dir_has_run(pdir) &&
      (gt_read_file(file, "sweep", &have, &have_n, NULL) || have_n != strlen(want) || memcmp(have, want, have_n))) {
    /* a run of other settings (an earlier sweep's point k with other keys,
     * or a run by hand): resuming it would pass its checkpoint and metrics
     * off as this point's; it is kept aside, never deleted */
    char aside[GT_STR_PATH + 96];
    int i = 1, r;
    do
      snprintf(aside, sizeof aside, "%s.previous-%d", pdir, i++);
    while ((r = mkdir(aside, 0755)) != 0 && errno == EEXIST && i < 10000);
    /* mkdir reserved the name; rename replaces the empty directory */
    if (r != 0 || rename(pdir, aside) != 0) {
      rc = gt_err_set(err, GT_ERR_IO, "sweep: '%s' holds a run of other settings and cannot be moved aside to '%s': %s",
                      pdir, aside, strerror(errno));
      if (r == 0) rmdir(aside);
    } else {
      gt_run_lock_release(lk);
      snprintf(moved, moved_n, "%s", aside);
      rc = gt__lock_point(pdir, lk, err);
    }
  }
  free(have);
  /* the settings go in before the run starts: a point interrupted at any
   * moment after this resumes, one interrupted before it starts over */
  if (!rc) rc = gt__write_file(file, want, err);
  free(want);
  if (rc) gt_run_lock_release(lk);
  return rc;
}
