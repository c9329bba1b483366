/* gemtrain sweep: a point before its process starts: the arguments it runs
 * with, and an in-process check that its configuration loads (a refused
 * point never costs a process) and what its plan holds. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
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
