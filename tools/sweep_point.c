/* gemtrain sweep: a point before its process starts: the arguments it runs
 * with; an in-process check that its configuration loads (a refused point
 * never costs a process), what its plan holds and its identity; and its
 * files: its run directory and log, found by that identity and kept at its
 * number, a run of other settings moved aside. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
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
  if (loaded)
    gt_sweep_config_identity(&cfg, res->identity, sizeof res->identity);
  else
    gt_sweep_refusal_identity(e.msg, res->identity, sizeof res->identity);
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

char *gt_sweep_point_identity_text(const char *base_config, const char *identity, const gt_sweep_kvs *ov) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) return NULL;
  fprintf(m, "config %s\nidentity %s\n", base_config, identity);
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

static int gt__exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static int gt__is_dir(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
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

/* Takes the lock of an existing point directory (refused naming its holder
 * when another run has it). */
static gt_rc gt__lock_existing(const char *pdir, gt_run_lock *lk, gt_err *err) {
  lk->fd = -1;
  return gt_dir_lock_take(lk, pdir, "sweep", "point directory",
                          "a point's files are only touched under its lock: wait for it to finish", err);
}

/* Renames runs/<from> and its log runs/<from>.log (either may be missing)
 * to runs/<to> and runs/<to>.log: a point's console always sits beside its
 * run directory, under the same name. */
static gt_rc gt__rename_pair(const char *runs, const char *from, const char *to, gt_err *err) {
  char a[GT_STR_PATH + 96], b[GT_STR_PATH + 96];
  snprintf(a, sizeof a, "%s/%s", runs, from);
  snprintf(b, sizeof b, "%s/%s", runs, to);
  if (gt__exists(a) && rename(a, b) != 0)
    return gt_err_set(err, GT_ERR_IO, "sweep: cannot move '%s' to '%s': %s", a, b, strerror(errno));
  snprintf(a, sizeof a, "%s/%s.log", runs, from);
  snprintf(b, sizeof b, "%s/%s.log", runs, to);
  if (gt__exists(a) && rename(a, b) != 0)
    return gt_err_set(err, GT_ERR_IO, "sweep: cannot move '%s' to '%s': %s", a, b, strerror(errno));
  return GT_OK;
}

/* A free name runs/<base>.<tag>-<i> (neither it nor its .log taken),
 * reserved by making it as an empty directory, which a rename of a
 * directory onto it replaces. */
static gt_rc gt__reserve(const char *runs, const char *base, const char *tag, int from, char *name, size_t n,
                          gt_err *err) {
  char path[GT_STR_PATH + 160], log[GT_STR_PATH + 160];
  for (int i = from; i < from + 100000; i++) {
    snprintf(name, n, "%s.%s-%d", base, tag, i);
    snprintf(path, sizeof path, "%s/%s", runs, name);
    snprintf(log, sizeof log, "%s/%s.log", runs, name);
    if (gt__exists(log)) continue;
    if (mkdir(path, 0755) == 0) return GT_OK;
    if (errno != EEXIST) return gt_err_set(err, GT_ERR_IO, "sweep: cannot make '%s': %s", path, strerror(errno));
  }
  return gt_err_set(err, GT_ERR_IO, "sweep: no free name for '%s/%s.%s-<n>'", runs, base, tag);
}

/* Moves runs/<from> and its log aside to runs/<base>.previous-<n>, n >=
 * first (named in to): a run of other settings is kept, never deleted and
 * never resumed. */
static gt_rc gt__aside(const char *runs, const char *from, const char *base, int first, char *to, size_t n,
                       gt_err *err) {
  gt_rc rc = gt__reserve(runs, base, "previous", first, to, n, err);
  if (rc) return rc;
  char from_dir[GT_STR_PATH + 96], to_dir[GT_STR_PATH + 96];
  snprintf(from_dir, sizeof from_dir, "%s/%s", runs, from);
  snprintf(to_dir, sizeof to_dir, "%s/%s", runs, to);
  /* only a log (its directory gone): the reserved name is not needed as a
   * directory */
  if (!gt__is_dir(from_dir)) rmdir(to_dir);
  rc = gt__rename_pair(runs, from, to, err);
  if (rc && gt__is_dir(to_dir)) rmdir(to_dir); /* still the empty reservation */
  return rc;
}

gt_rc gt_sweep_point_claim(const char *dir, int k, const char *want, gt_run_lock *lk, char *moved, size_t moved_n,
                           gt_err *err) {
  lk->fd = -1;
  if (moved_n) moved[0] = '\0';
  char runs[GT_STR_PATH + 16], name[64], pdir[GT_STR_PATH + 96], file[GT_STR_PATH + 128];
  snprintf(runs, sizeof runs, "%s/runs", dir);
  snprintf(name, sizeof name, "point-%d", k + 1);
  snprintf(pdir, sizeof pdir, "%s/%s", runs, name);
  snprintf(file, sizeof file, "%s/%s", pdir, GT_SWEEP_POINT_FILE);
  gt_rc rc = gt__lock_point(pdir, lk, err);
  char *have = NULL;
  size_t have_n = 0;
  if (!rc && gt__dir_has_run(pdir) &&
      (gt_read_file(file, "sweep", &have, &have_n, NULL) || have_n != strlen(want) || memcmp(have, want, have_n))) {
    /* a run of other settings (an earlier sweep's point k with other keys,
     * or a run by hand): resuming it would pass its checkpoint and metrics
     * off as this point's; it is kept aside with its log, never deleted */
    char aside[GT_STR_PATH];
    if (!(rc = gt__aside(runs, name, name, 1, aside, sizeof aside, err))) {
      gt_run_lock_release(lk);
      snprintf(moved, moved_n, "%s/%s", runs, aside);
      rc = gt__lock_point(pdir, lk, err);
    }
  }
  free(have);
  /* the settings go in before the run starts: a point interrupted at any
   * moment after this resumes, one interrupted before it starts over */
  if (!rc) rc = gt__write_file(file, want, err);
  if (rc) gt_run_lock_release(lk);
  return rc;
}

/* ---------- putting each point's files at its number ---------- */

/* A directory of runs/: a point's place (point-<j>), one moved aside
 * (point-<j>.previous-<i>) or one on its way to another number
 * (point-<j>.moving-<i>, left by an arrangement cut short). */
typedef struct gt__entry {
  char name[64];
  int slot;   /* j */
  int kind;   /* 0 a place, 1 moving, 2 previous: the order a point's own files are looked for in */
  char *text; /* its GT_SWEEP_POINT_FILE; NULL none */
  int taken;  /* claimed by a point */
} gt__entry;

static int gt__entry_kind(const char *name, int *slot) {
  int used = 0, i;
  if (sscanf(name, "point-%d%n", slot, &used) != 1 || used == 0 || *slot < 1) return -1;
  /* the name a sweep gives, not point-03 or point-+3 */
  char canon[32];
  if (snprintf(canon, sizeof canon, "point-%d", *slot) != used || strncmp(name, canon, (size_t)used)) return -1;
  if (!name[used]) return 0;
  int more = 0;
  if (sscanf(name + used, ".moving-%d%n", &i, &more) == 1 && more > 0 && !name[used + more]) return 1;
  more = 0;
  if (sscanf(name + used, ".previous-%d%n", &i, &more) == 1 && more > 0 && !name[used + more]) return 2;
  return -1;
}

/* The first previous-<n> of point-<slot> after every one there was when the
 * arrangement began: a name a staged run freed is not given to another run
 * in the same arrangement, where the console would name two runs by it. */
static int gt__after_previous(const gt__entry *ents, int n_ents, int slot) {
  int last = 0;
  for (int i = 0; i < n_ents; i++) {
    int j, p, used = 0;
    if (ents[i].kind == 2 && ents[i].slot == slot &&
        sscanf(ents[i].name, "point-%d.previous-%d%n", &j, &p, &used) == 2 && p > last)
      last = p;
  }
  return last + 1;
}

static void gt__say(gt_sweep_say_fn say, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void gt__say(gt_sweep_say_fn say, void *ctx, const char *fmt, ...) {
  if (!say) return;
  char line[3 * GT_STR_PATH];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  say(ctx, line);
}

/* Moves runs/<from> (and its log) to runs/<to> under the directory's lock;
 * 1 when moved, 0 when another run holds it (left where it is). */
static int gt__move_locked(const char *runs, const char *from, const char *to, gt_rc *rc, gt_err *err) {
  char path[GT_STR_PATH + 96];
  snprintf(path, sizeof path, "%s/%s", runs, from);
  gt_run_lock lk = {-1};
  gt_err held;
  if (gt__is_dir(path) && gt__lock_existing(path, &lk, &held)) return 0;
  *rc = gt__rename_pair(runs, from, to, err);
  gt_run_lock_release(&lk);
  return !*rc;
}

gt_rc gt_sweep_arrange_runs(const char *dir, int n, const char *const *want, gt_sweep_say_fn say, void *ctx,
                            gt_err *err) {
  char runs[GT_STR_PATH + 16];
  snprintf(runs, sizeof runs, "%s/runs", dir);
  DIR *d = opendir(runs);
  if (!d) return errno == ENOENT ? GT_OK : gt_err_set(err, GT_ERR_IO, "sweep: cannot read '%s': %s", runs, strerror(errno));
  gt__entry *ents = NULL;
  int n_ents = 0, cap = 0;
  int *src = calloc((size_t)n + 1, sizeof *src), *in_place = calloc((size_t)n + 1, sizeof *in_place);
  char(*staged)[64] = calloc((size_t)n + 1, sizeof *staged);
  gt_rc rc = src && in_place && staged ? GT_OK : gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    int slot, kind = gt__entry_kind(de->d_name, &slot);
    char path[GT_STR_PATH + 96], file[GT_STR_PATH + 128];
    gt_sweep_msg(path, sizeof path, "%s/%s", runs, de->d_name);
    if (kind < 0 || strlen(de->d_name) >= sizeof ents->name || !gt__is_dir(path)) continue;
    if (n_ents == cap) {
      gt__entry *p = realloc(ents, sizeof *ents * (size_t)(cap = cap ? 2 * cap : 64));
      if (!p) {
        rc = gt_err_set(err, GT_ERR_NOMEM, "sweep: no memory");
        break;
      }
      ents = p;
    }
    gt__entry *e = &ents[n_ents++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", de->d_name);
    e->slot = slot, e->kind = kind;
    snprintf(file, sizeof file, "%s/%s", path, GT_SWEEP_POINT_FILE);
    size_t len;
    if (gt_read_file(file, "sweep", &e->text, &len, NULL)) e->text = NULL;
  }
  closedir(d);
  /* each point's own files: already at its number, else the first place,
   * then the first staged, then the first moved-aside directory that holds
   * its settings (a run moved aside when the sweep had other settings is
   * this point's again when they come back) */
  for (int k = 0; k < n && !rc; k++) {
    src[k] = -1;
    for (int i = 0; i < n_ents; i++)
      if (ents[i].kind == 0 && ents[i].slot == k + 1 && ents[i].text && !strcmp(ents[i].text, want[k])) {
        in_place[k] = 1, ents[i].taken = 1;
        break;
      }
  }
  for (int kind = 0; kind < 3 && !rc; kind++)
    for (int k = 0; k < n; k++)
      for (int i = 0; !in_place[k] && src[k] < 0 && i < n_ents; i++)
        if (ents[i].kind == kind && !ents[i].taken && ents[i].text && !strcmp(ents[i].text, want[k]))
          src[k] = i, ents[i].taken = 1;
  /* 1: each to move goes to a name of its own first (two points can swap
   * numbers), runs/point-<k+1>.moving-<i> */
  for (int k = 0; k < n && !rc; k++) {
    if (src[k] < 0) continue;
    char base[32];
    snprintf(base, sizeof base, "point-%d", k + 1);
    if ((rc = gt__reserve(runs, base, "moving", 1, staged[k], sizeof staged[k], err))) break;
    if (!gt__move_locked(runs, ents[src[k]].name, staged[k], &rc, err)) {
      /* in use by a run: it stays, and the point runs afresh (or its claim
       * names that run) */
      char path[GT_STR_PATH + 96];
      snprintf(path, sizeof path, "%s/%s", runs, staged[k]);
      rmdir(path);
      staged[k][0] = '\0';
      if (rc) break;
      continue;
    }
  }
  /* a staged directory from an arrangement cut short that no point owns
   * now: aside, as any run of other settings */
  for (int i = 0; i < n_ents && !rc; i++) {
    if (ents[i].kind != 1 || ents[i].taken) continue;
    char base[32], aside[GT_STR_PATH];
    snprintf(base, sizeof base, "point-%d", ents[i].slot);
    gt_run_lock lk = {-1};
    char path[GT_STR_PATH + 96];
    gt_err held;
    snprintf(path, sizeof path, "%s/%s", runs, ents[i].name);
    if (gt__lock_existing(path, &lk, &held)) continue;
    rc = gt__aside(runs, ents[i].name, base, gt__after_previous(ents, n_ents, ents[i].slot), aside, sizeof aside, err);
    gt_run_lock_release(&lk);
    if (!rc)
      gt__say(say, ctx, "sweep: runs/%s (left by an interrupted sweep) held a run of other settings; moved it to %s/%s",
              ents[i].name, runs, aside);
  }
  /* 2: each point's place holds its own files or nothing of another's */
  for (int k = 0; k < n && !rc; k++) {
    if (in_place[k]) continue;
    char name[32], path[GT_STR_PATH + 96], log[GT_STR_PATH + 96];
    snprintf(name, sizeof name, "point-%d", k + 1);
    snprintf(path, sizeof path, "%s/%s", runs, name);
    snprintf(log, sizeof log, "%s/%s.log", runs, name);
    int has_dir = gt__is_dir(path), has_log = gt__exists(log);
    if (has_dir || has_log) {
      gt_run_lock lk = {-1};
      gt_err held;
      if (has_dir && gt__lock_existing(path, &lk, &held)) {
        /* another run holds it: its own files wait where they are staged */
        continue;
      }
      if (has_log || gt__dir_has_run(path)) {
        char aside[GT_STR_PATH];
        rc = gt__aside(runs, name, name, gt__after_previous(ents, n_ents, k + 1), aside, sizeof aside, err);
        if (!rc)
          gt__say(say, ctx, "sweep: runs/%s held a run of other settings; moved it to %s/%s", name, runs, aside);
      } else {
        /* a lock file and a settings file, nothing run: nothing to keep */
        char f[GT_STR_PATH + 128];
        snprintf(f, sizeof f, "%s/%s", path, GT_SWEEP_POINT_FILE);
        unlink(f);
        snprintf(f, sizeof f, "%s/.lock", path);
        unlink(f);
        rmdir(path);
      }
      gt_run_lock_release(&lk);
    }
    if (!rc && staged[k][0] && !gt__exists(path)) {
      char from[64];
      snprintf(from, sizeof from, "%s", ents[src[k]].name);
      if (!(rc = gt__rename_pair(runs, staged[k], name, err)))
        gt__say(say, ctx, "sweep: runs/%s holds point %d's run (its settings); moved it to %s/%s", from, k + 1, runs,
                name);
    }
  }
  for (int i = 0; i < n_ents; i++) free(ents[i].text);
  free(ents);
  free(src);
  free(in_place);
  free(staged);
  return rc;
}
