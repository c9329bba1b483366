/* gemtrain plan: the memory plan and FLOPs of a training step, nothing
 * allocated; when it does not fit (or with --fit), the fastest setting of
 * the memory knobs that fits, as a command line (train/fit.h). Exit status:
 * 0 fits, 3 does not fit, 2 the configuration is refused. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/diloco.h"
#include "train/fit.h"
#include "train/plan.h"

/* One shell word: as is when it holds nothing the shell reads, else in
 * single quotes. */
static void gt__word(char *buf, size_t n, size_t *o, const char *w) {
  int plain = *w != '\0';
  for (const char *c = w; *c; c++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_=./:,+-@%", *c)) plain = 0;
  *o += (size_t)snprintf(buf + *o, *o < n ? n - *o : 0, " ");
  if (plain) {
    *o += (size_t)snprintf(buf + *o, *o < n ? n - *o : 0, "%s", w);
    return;
  }
  *o += (size_t)snprintf(buf + *o, *o < n ? n - *o : 0, "'");
  for (const char *c = w; *c; c++)
    *o += (size_t)snprintf(buf + *o, *o < n ? n - *o : 0, *c == '\'' ? "'\\''" : "%c", *c);
  *o += (size_t)snprintf(buf + *o, *o < n ? n - *o : 0, "'");
}

/* The train command of the user's arguments with the search's keys: a key
 * the user gave takes its new value in place, the others follow. */
static char *gt__command(int argc, char **argv, const gt_fit *f) {
  size_t n = 256;
  for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 8;
  n += (size_t)f->n_set * 128;
  char *buf = malloc(n);
  if (!buf) return NULL;
  size_t o = (size_t)snprintf(buf, n, "gemtrain train");
  int used[GT_FIT_MAX_SET] = {0};
  for (int i = 0; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    char key[128] = "", arg[256];
    if (eq && (size_t)(eq - argv[i]) < sizeof key) snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
    const gt_key_spec *k = key[0] ? gt_config_key(key) : NULL;
    const char *w = argv[i];
    for (int j = 0; k && j < f->n_set; j++)
      if (!strcmp(k->name, f->set[j].key)) {
        snprintf(arg, sizeof arg, "%s=%s", key, f->set[j].value);
        w = arg;
        used[j] = 1;
      }
    gt__word(buf, n, &o, w);
  }
  for (int j = 0; j < f->n_set; j++) {
    if (used[j]) continue;
    char arg[160];
    snprintf(arg, sizeof arg, "%s=%s", f->set[j].key, f->set[j].value);
    gt__word(buf, n, &o, arg);
  }
  return buf;
}

/* "23.2 GiB", or MiB below one GiB */
static const char *gt__size(int64_t b, char *buf, size_t n) {
  if (b >= 1073741824LL)
    snprintf(buf, n, "%.1f GiB", (double)b / 1073741824.0);
  else
    snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
  return buf;
}

static void gt__print_fit(const gt_fit *f, int64_t limit, const char *cmd) {
  printf("making it fit (docs/memory-plan.md): %d settings of the micro-batch, num_vocab_tiling, mu_dtype and the "
         "remat policy and scope ranked by estimated step FLOPs, %d planned\n",
         f->n_settings, f->n_planned);
  if (!f->found) {
    printf("  nothing searched fits: %s\n", f->why);
    return;
  }
  char a[32], b[32];
  if (!f->n_set) {
    printf("  the current setting is already the fastest that fits: %s of %s, an estimated %.4g TFLOPs per step "
           "(%.4g of them recomputed)\n",
           gt__size(f->need_bytes, a, sizeof a), gt__size(limit, b, sizeof b), f->best.tflops,
           f->best.recompute_tflops);
    return;
  }
  printf("  fastest that fits:");
  for (int i = 0; i < f->n_set; i++) printf(" %s=%s", f->set[i].key, f->set[i].value);
  printf("\n  it needs %s of %s and an estimated %.4g TFLOPs per step (%.4g of them recomputed; now %.4g)\n",
         gt__size(f->need_bytes, a, sizeof a), gt__size(limit, b, sizeof b), f->best.tflops,
         f->best.recompute_tflops, f->base_tflops);
  printf("  run:\n    %s\n", cmd);
}

/* DiLoCo (enable_diloco): the bytes each device sends to the other
 * replicas, per sync and per step; each replica is planned as above. */
typedef struct gt__diloco_fig {
  int on;
  int64_t elems, per_sync, outer;
  double per_step;
} gt__diloco_fig;

static gt_rc gt__diloco_fig_of(const gt_config *cfg, gt__diloco_fig *d, gt_err *err) {
  memset(d, 0, sizeof *d);
  if (!gt_diloco_on(cfg)) return GT_OK;
  d->on = 1;
  gt_rc rc = gt_diloco_plan(cfg, &d->elems, &d->per_sync, &d->outer, err);
  d->per_step = (double)d->per_sync / (double)cfg->diloco_sync_period;
  return rc;
}

static void gt__diloco_print(const gt__diloco_fig *d, const gt_plan *p, const gt_config *cfg) {
  if (!d->on) return;
  double M = 1048576.0;
  printf("  DiLoCo: %lld replicas, each planned above (%d rank%s of %d device%s); every %lld steps each device sends "
         "%.2f MiB to the other replicas (its %lld trainable elements to each), %.4f MiB per step; outer "
         "parameters and momentum %.2f MiB per device (in the optimizer figures above)\n",
         cfg->dcn_diloco_parallelism, p->n_ranks, p->n_ranks > 1 ? "s" : "", p->n_devices,
         p->n_devices > 1 ? "s" : "", cfg->diloco_sync_period, (double)d->per_sync / M, (long long)d->elems,
         d->per_step / M, (double)d->outer / M);
}

static char *gt__json(const gt_plan *p, const gt_config *cfg, int64_t limit, int searched, const gt_fit *f,
                      const char *cmd, const gt__diloco_fig *dl) {
  char *s = gt_plan_to_json(p, cfg);
  cJSON *o = s ? cJSON_Parse(s) : NULL;
  free(s);
  if (!o) return NULL;
  if (dl->on) {
    cJSON_AddNumberToObject(o, "diloco_replicas", (double)cfg->dcn_diloco_parallelism);
    cJSON_AddNumberToObject(o, "diloco_sync_period", (double)cfg->diloco_sync_period);
    cJSON_AddNumberToObject(o, "diloco_bytes_per_sync_per_device", (double)dl->per_sync);
    cJSON_AddNumberToObject(o, "diloco_bytes_per_step_per_device", dl->per_step);
    cJSON_AddNumberToObject(o, "diloco_outer_state_bytes_per_device", (double)dl->outer);
  }
  int64_t need = gt_plan_total_bytes(p);
  cJSON_AddBoolToObject(o, "fits", need <= limit);
  cJSON_AddNumberToObject(o, "need_bytes", (double)need);
  cJSON_AddNumberToObject(o, "limit_bytes", (double)limit);
  cJSON_AddStringToObject(o, "limit_from", cfg->memory_limit_bytes ? "memory_limit_bytes" : "available RAM");
  /* the step with its recomputation: what the search ranks by */
  double re = gt_fit_recompute_tflops(cfg);
  cJSON_AddNumberToObject(o, "recompute_tflops_per_step", re);
  cJSON_AddNumberToObject(o, "estimated_tflops_per_step", p->flops.total_tflops + re);
  if (!searched || !f->found) {
    cJSON_AddNullToObject(o, "suggestion");
  } else {
    cJSON *g = cJSON_AddObjectToObject(o, "suggestion");
    cJSON *set = cJSON_AddObjectToObject(g, "settings");
    for (int i = 0; i < f->n_set; i++) cJSON_AddStringToObject(set, f->set[i].key, f->set[i].value);
    cJSON_AddStringToObject(g, "command", cmd ? cmd : "");
    cJSON_AddNumberToObject(g, "need_bytes", (double)f->need_bytes);
    cJSON_AddNumberToObject(g, "peak_bytes", (double)f->peak_bytes);
    cJSON_AddNumberToObject(g, "estimated_tflops_per_step", f->best.tflops);
    cJSON_AddNumberToObject(g, "recompute_tflops_per_step", f->best.recompute_tflops);
  }
  if (searched) {
    cJSON *q = cJSON_AddObjectToObject(o, "fit_search");
    cJSON_AddNumberToObject(q, "settings_ranked", f->n_settings);
    cJSON_AddNumberToObject(q, "settings_planned", f->n_planned);
    cJSON_AddBoolToObject(q, "found", f->found);
    if (!f->found) {
      cJSON_AddStringToObject(q, "why", f->why);
      cJSON_AddNumberToObject(q, "least_need_bytes", (double)f->need_bytes);
      cJSON_AddNumberToObject(q, "fixed_bytes", (double)f->fixed_bytes);
    }
  }
  char *out = cJSON_Print(o);
  cJSON_Delete(o);
  return out;
}

int gt_cmd_plan(int argc, char **argv) {
  int json = 0, fit = 0, first = 0;
  while (first < argc && argv[first][0] == '-' && argv[first][1]) {
    if (!strcmp(argv[first], "--json"))
      json = 1;
    else if (!strcmp(argv[first], "--fit"))
      fit = 1;
    else {
      fprintf(stderr, "gemtrain plan: unknown option '%s'\n", argv[first]);
      return GT_EXIT_CONFIG;
    }
    first++;
  }
  argc -= first, argv += first;
  gt_config cfg;
  int rc = gt_cli_load_config(argc, argv, &cfg);
  if (rc) return rc;
  gt_err err;
  gt_err_clear(&err);
  /* an HF directory (or checkpoint) in load_parameters_path defines the
   * model, as it does for train */
  gt_rc r = gt_plan_apply_source(&cfg, &err);
  gt_plan p;
  gt__diloco_fig dl;
  if (!r) r = gt__diloco_fig_of(&cfg, &dl, &err);
  if (!r) r = gt_plan_compute(&p, &cfg, &err);
  if (r) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return gt_cli_exit_code(r) == GT_EXIT_OK ? GT_EXIT_ERROR : gt_cli_exit_code(r);
  }
  int64_t limit = gt_plan_memory_limit(&cfg);
  int fits = gt_plan_total_bytes(&p) <= limit, searched = !fits || fit;
  gt_fit *f = calloc(1, sizeof *f);
  char *cmd = NULL;
  if (!f) r = gt_err_set(&err, GT_ERR_NOMEM, "plan: no memory");
  if (!r && searched) r = gt_fit_search(&cfg, limit, f, &err);
  if (!r && searched && f->found && !(cmd = gt__command(argc, argv, f))) r = gt_err_set(&err, GT_ERR_NOMEM, "plan: no memory");
  if (r) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_plan_free(&p);
    free(f);
    return GT_EXIT_ERROR;
  }
  if (json) {
    char *s = gt__json(&p, &cfg, limit, searched, f, cmd, &dl);
    printf("%s\n", s ? s : "null");
    free(s);
  } else {
    gt_plan_print(stdout, &p, &cfg);
    gt__diloco_print(&dl, &p, &cfg);
    printf("  memory limit: %.1f MiB (%s): %s\n", (double)limit / 1048576.0,
           cfg.memory_limit_bytes ? "memory_limit_bytes" : "available RAM", fits ? "fits" : "DOES NOT FIT");
    if (searched) gt__print_fit(f, limit, cmd);
  }
  gt_plan_free(&p);
  free(cmd);
  free(f);
  return fits ? GT_EXIT_OK : GT_EXIT_PLAN;
}
