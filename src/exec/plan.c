#define _POSIX_C_SOURCE 200809L
#include "exec/plan.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/shard.h"
#include "base/threads.h"
#include "model/layer.h"
#include "model/model.h"
#include "model/qstore.h"
#include "model/remat.h"

/* The plan is the real trainer run for one step on an allocation-only mesh
 * (the driver is train/plan.c): every device's tracker counts what the
 * executor, the remat policy and the sharding allocate, in their real
 * order, without reserving or computing anything. A probe per device, here,
 * watches the step and notes what is live at its peak. Nothing here
 * restates that order. */

typedef struct gt__live {
  const void *ptr;
  gt_mem_cat cat;
  int64_t bytes;
  const char *name;
  int64_t layer;   /* forward layer it was allocated in, or -1 */
  char phase[96];  /* the phase it was allocated in */
} gt__live;

typedef struct gt__watch {
  gt_plan *p; /* this device's figures */
  int64_t cur[GT_MEM_NCAT], total;
  gt__live *live;
  int n, cap, oom;
  char phase[96];
  int in_layers, forward_done;
  int64_t fwd_layer; /* the layer of the "forward, layer N" phase, or -1 */
} gt__watch;

static int gt__cmp_buf(const void *a, const void *b) {
  int64_t x = ((const gt_plan_buf *)a)->bytes, y = ((const gt_plan_buf *)b)->bytes;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The device peak: what is live now, by category, and the largest buffers. */
static void gt__snapshot(gt__watch *w) {
  gt_plan *p = w->p;
  memcpy(p->at_peak, w->cur, sizeof p->at_peak);
  snprintf(p->peak_where, sizeof p->peak_where, "%s", w->phase);
  p->n_top = 0;
  for (int i = 0; i < w->n; i++) {
    const gt__live *l = &w->live[i];
    if (l->cat == GT_MEM_HOST) continue;
    gt_plan_buf b;
    snprintf(b.name, sizeof b.name, "%s (%s)", l->name ? l->name : gt_mem_cat_name(l->cat), l->phase);
    b.cat = l->cat;
    b.bytes = l->bytes;
    if (p->n_top < GT_PLAN_TOP)
      p->top[p->n_top++] = b;
    else if (b.bytes > p->top[GT_PLAN_TOP - 1].bytes)
      p->top[GT_PLAN_TOP - 1] = b;
    else
      continue;
    qsort(p->top, (size_t)p->n_top, sizeof p->top[0], gt__cmp_buf);
  }
}

static void gt__on_alloc(void *ctx, const void *ptr, gt_mem_cat cat, size_t bytes, const char *name) {
  gt__watch *w = ctx;
  gt_plan *p = w->p;
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 256;
    gt__live *nl = realloc(w->live, sizeof *nl * (size_t)cap);
    if (!nl) {
      w->oom = 1;
      return;
    }
    w->live = nl, w->cap = cap;
  }
  gt__live *l = &w->live[w->n++];
  /* a saved activation belongs to the forward layer that made it, except a
   * carry, which is the input of the layer after (layer 0's comes first) */
  int64_t layer = w->forward_done ? -1 : w->fwd_layer;
  if (!w->forward_done && name && !strcmp(name, "layer input (carry)")) layer = w->fwd_layer + 1;
  *l = (gt__live){ptr, cat, (int64_t)bytes, name, layer, ""};
  snprintf(l->phase, sizeof l->phase, "%s", w->phase);
  w->cur[cat] += (int64_t)bytes;
  if (cat == GT_MEM_SAVED && l->layer >= 0 && l->layer < p->n_layers) p->saved_per_layer[l->layer] += (int64_t)bytes;
  if (cat == GT_MEM_HOST) return;
  w->total += (int64_t)bytes;
  if (w->total > p->peak_total) {
    p->peak_total = w->total;
    gt__snapshot(w);
  }
  /* the activations inside the layers: all but the state, the gathered
   * weights and the tables */
  int64_t act = w->total - w->cur[GT_MEM_PARAMS] - w->cur[GT_MEM_FROZEN] - w->cur[GT_MEM_GRADS] - w->cur[GT_MEM_OPTIM] -
                w->cur[GT_MEM_GATHERED] - w->cur[GT_MEM_DATA] - w->cur[GT_MEM_OTHER];
  if (w->in_layers && act > p->layer_act_peak) {
    p->layer_act_peak = act;
    p->layer_act_saved = w->cur[GT_MEM_SAVED];
    snprintf(p->layer_act_where, sizeof p->layer_act_where, "%s", w->phase);
  }
}

static void gt__on_free(void *ctx, const void *ptr, gt_mem_cat cat, size_t bytes, const char *name) {
  gt__watch *w = ctx;
  for (int i = w->n - 1; i >= 0; i--) {
    if (w->live[i].ptr != ptr) continue;
    const gt__live *l = &w->live[i];
    /* a saved activation freed before the forward ends was not kept */
    if (l->cat == GT_MEM_SAVED && l->layer >= 0 && !w->forward_done) w->p->saved_per_layer[l->layer] -= l->bytes;
    w->live[i] = w->live[--w->n];
    break;
  }
  w->cur[cat] -= (int64_t)bytes;
  if (cat != GT_MEM_HOST) w->total -= (int64_t)bytes;
}

static void gt__on_phase(void *ctx, const char *phase) {
  gt__watch *w = ctx;
  snprintf(w->phase, sizeof w->phase, "%s", phase);
  long long l;
  w->fwd_layer = sscanf(phase, "forward, layer %lld", &l) == 1 ? (int64_t)l : -1;
  if (!strncmp(phase, "output head", 11)) w->forward_done = 1;
  w->in_layers = !strncmp(phase, "forward", 7) || !strncmp(phase, "backward", 8);
}

struct gt_plan_watch {
  gt_plan *p;
  const gt_config *c;
  gt_model m;
  int N, best;         /* devices; the busiest so far */
  gt_plan *dp;         /* [N] each device's figures */
  gt__watch *w;        /* [N] */
  gt_mem_probe *probes; /* [N] */
};

gt_rc gt_plan_watch_open(gt_plan_watch **out, gt_plan *p, const gt_config *c, gt_err *err) {
  *out = NULL;
  memset(p, 0, sizeof *p);
  gt_plan_watch *pw = calloc(1, sizeof *pw);
  if (!pw) return gt_err_set(err, GT_ERR_NOMEM, "plan: no memory");
  gt_rc rc = gt_model_build(&pw->m, c, err);
  if (rc) {
    free(pw);
    return rc;
  }
  pw->p = p, pw->c = c;
  gt_model *m = &pw->m;
  int N = pw->N = (int)c->num_devices;
  p->n_params = gt_model_numel(m); /* elements (the layout counts words: a quantized base takes fewer) */
  snprintf(p->frozen_qtype, sizeof p->frozen_qtype, "%s", gt_qstore_name(m));
  snprintf(p->frozen_embed_qtype, sizeof p->frozen_embed_qtype, "%s", gt_qstore_embed_name(m));
  snprintf(p->frozen_storage, sizeof p->frozen_storage, "%s", gt_qstore_describe(m));
  p->n_trainable = m->n_trainable;
  p->n_frozen_tensors = m->n_frozen_tensors;
  p->n_active_params = gt_model_count_active_params(c);
  p->n_layers = m->n_layers;
  p->flops = gt_flops_per_step_per_device(c);
  p->n_devices = N;
  p->saved_per_layer = calloc((size_t)(m->n_layers > 0 ? m->n_layers : 1), sizeof(int64_t));
  gt_plan *dp = pw->dp = calloc((size_t)N, sizeof *dp);
  gt__watch *w = pw->w = calloc((size_t)N, sizeof *w);
  gt_mem_probe *probes = pw->probes = calloc((size_t)N, sizeof *probes);
  if (!p->saved_per_layer || !dp || !w || !probes) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "plan: no memory");
    return gt_plan_watch_close(pw, rc, NULL, 0, err);
  }
  for (int d = 0; d < N; d++) {
    dp[d].n_layers = m->n_layers;
    dp[d].saved_per_layer = calloc((size_t)(m->n_layers > 0 ? m->n_layers : 1), sizeof(int64_t));
    w[d] = (gt__watch){&dp[d], {0}, 0, NULL, 0, 0, 0, "setup", 0, 0, -1};
    probes[d] = (gt_mem_probe){&w[d], gt__on_alloc, gt__on_free, gt__on_phase};
    if (!dp[d].saved_per_layer) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "plan: no memory");
      return gt_plan_watch_close(pw, rc, NULL, 0, err);
    }
  }
  *out = pw;
  return GT_OK;
}

gt_mem_probe *gt_plan_watch_probes(gt_plan_watch *pw) { return pw->probes; }

gt_rc gt_plan_watch_device(gt_plan_watch *pw, int d, const gt_mem *mem, gt_err *err) {
  gt_plan *p = pw->p, *dp = pw->dp;
  if (pw->w[d].oom) return gt_err_set(err, GT_ERR_NOMEM, "plan: no memory to follow device %d's buffers", d);
  for (int k = 0; k < GT_MEM_NCAT; k++)
    if (gt_mem_peak(mem, (gt_mem_cat)k) > p->cat_peak[k]) p->cat_peak[k] = gt_mem_peak(mem, (gt_mem_cat)k);
  dp[d].host_peak = gt_mem_peak(mem, GT_MEM_HOST);
  dp[d].shard_state_bytes = gt_mem_cur(mem, GT_MEM_PARAMS) + gt_mem_cur(mem, GT_MEM_FROZEN) + gt_mem_cur(mem, GT_MEM_GRADS) +
                            gt_mem_cur(mem, GT_MEM_OPTIM);
  /* the busiest device speaks for all */
  if (dp[d].peak_total > dp[pw->best].peak_total) pw->best = d;
  return GT_OK;
}

gt_rc gt_plan_watch_close(gt_plan_watch *pw, gt_rc rc, const int *rank_of, int G, gt_err *err) {
  gt_plan *p = pw->p, *dp = pw->dp;
  gt__watch *w = pw->w;
  const gt_config *c = pw->c;
  gt_model *m = &pw->m;
  const int N = pw->N, best = pw->best;
  if (rc) goto out;
  memcpy(p->at_peak, dp[best].at_peak, sizeof p->at_peak);
  p->peak_total = dp[best].peak_total;
  p->host_peak = dp[best].host_peak;
  snprintf(p->peak_where, sizeof p->peak_where, "%s", dp[best].peak_where);
  p->n_top = dp[best].n_top;
  memcpy(p->top, dp[best].top, sizeof p->top);
  memcpy(p->saved_per_layer, dp[best].saved_per_layer, sizeof(int64_t) * (size_t)m->n_layers);
  for (int64_t l = 0; l < m->n_layers; l++) p->saved_total += p->saved_per_layer[l];
  p->layer_act_peak = dp[best].layer_act_peak;
  p->layer_act_saved = dp[best].layer_act_saved;
  snprintf(p->layer_act_where, sizeof p->layer_act_where, "%s", dp[best].layer_act_where);
  p->n_ranks = (int)gt_config_num_ranks(c);
  if (N > 1 || p->n_ranks > 1) {
    p->shard_state_bytes = dp[best].shard_state_bytes;
    int ax[3];
    gt_config_global_axes(c, &ax[0], &ax[1], &ax[2]);
    if (ax[2] > 1) gt_model_set_expert_shard(m, ax[2], 0);
    /* the ring's bytes (src/mesh/mesh.c): an all-gather sends n - shard(d+1),
     * a reduce-scatter n - shard(d). Per micro-batch every unit is gathered
     * twice (forward and backward; the head for the lookup and the logits,
     * and a PLE model's head once more for the PLE backward)
     * and its gradient reduce-scattered once; per step 3 doubles (loss, token
     * count, squared norm) are all-reduced. A unit's block is [trainable |
     * frozen] (src/mesh/fsdp.c), each part sharded and gathered on its own:
     * the trainable part in 2 bytes a weight under dtype=bfloat16, else 4;
     * the frozen part likewise, but raw (4 bytes a word) in a unit holding
     * a stored-quantized base, under either dtype. Only the trainable part
     * has a gradient: it alone is reduce-scattered (4 bytes) and summed over
     * the data and expert axes. A device's bytes of a collective
     * cross to another rank when its ring successor in that group lives
     * there (the mesh's map of devices to ranks). The plan is
     * rank 0's: the busiest of its devices counts, for both totals (what
     * its run reports). */
    int F = ax[1], D = ax[0], E = ax[2];
    int64_t Bd = gt_config_global_batch(c) / G, Tn = c->max_target_length;
    for (int dv = 0; dv < G; dv++) {
      int64_t sent = 0, dcn_sent = 0;
      int e = dv % E, r = dv / E % F, dr = dv / (E * F);
      /* whether the ring successor in each group is on another rank */
      int me = rank_of[dv];
      if (me != 0) continue;
      int x_f = rank_of[(dr * F + (r + 1) % F) * E + e] != me;
      int x_d = rank_of[(((dr + 1) % D) * F + r) * E + e] != me;
      int x_e = rank_of[(dr * F + r) * E + (e + 1) % E] != me;
      int x_a = rank_of[(dv + 1) % G] != me;
      for (int64_t u = 0; u < gt_model_n_units(m); u++) {
        int64_t cnt = gt_model_unit_local(m, u), rep = gt_model_unit_replicated(m, u);
        int64_t t = gt_model_unit_trainable(m, u), fz = cnt - t;
        int64_t ns = gt_shard_len(t, F, r), nb = gt_shard_begin(t, F, r);
        /* the head of a PLE model is gathered a third time, for the PLE backward */
        int64_t gathers = u == 0 && m->ple_dim ? 3 : 2;
        int64_t tw = m->bf16_act ? 2 : 4, fw = m->bf16_act && !gt_qstore_unit_quantized(m, u) ? 2 : 4;
        int64_t one_gather = (t - gt_shard_len(t, F, (r + 1) % F)) * tw + (fz - gt_shard_len(fz, F, (r + 1) % F)) * fw;
        int64_t b = gathers * one_gather + (t - ns) * 4;
        sent += b, dcn_sent += x_f ? b : 0;
        if (D > 1) {
          b = ((ns - gt_shard_len(ns, D, dr)) + (ns - gt_shard_len(ns, D, (dr + 1) % D))) * 4;
          sent += b, dcn_sent += x_d ? b : 0;
        }
        /* src/mesh/fsdp.c: the expert ranks sum the replicated part of the
         * trainable shard */
        int64_t nr = (rep < t ? rep : t) - nb;
        nr = nr < 0 ? 0 : nr > ns ? ns : nr;
        if (E > 1 && nr > 0) {
          b = ((nr - gt_shard_len(nr, E, e)) + (nr - gt_shard_len(nr, E, (e + 1) % E))) * 4;
          sent += b, dcn_sent += x_e ? b : 0;
        }
        /* src/model/layer.c: a MoE layer's routed op gathers the group's inputs
         * and all-reduces their sums (again when remat recomputes it);
         * backward gathers d(routed) and reduce-scatters d(x1) */
        const gt_layer_desc *ld = u > 0 ? &m->layers[u - 1] : NULL;
        if (ld && ld->moe_ep > 1) {
          int64_t n = E * Bd * Tn * m->d, one = (n - n / E) * 4;
          int runs = 1 + (gt_remat_slot_mode(&m->remat, ld, GT_A_MOE_SAVED) == GT_SAVE_REMAT);
          b = runs * 3 * one + 2 * one;
          sent += b, dcn_sent += x_e ? b : 0;
        }
      }
      sent *= c->gradient_accumulation_steps;
      dcn_sent *= c->gradient_accumulation_steps;
      int64_t nsum = m->n_moe_layers ? 4 : 3; /* loss, token count, squared norm (and the MoE lb sum) */
      int64_t b = ((nsum - gt_shard_len(nsum, G, dv)) + (nsum - gt_shard_len(nsum, G, (dv + 1) % G))) * 8;
      sent += b, dcn_sent += x_a ? b : 0;
      if (sent > p->comm_bytes_per_step) p->comm_bytes_per_step = sent;
      if (dcn_sent > p->comm_bytes_dcn_per_step) p->comm_bytes_dcn_per_step = dcn_sent;
    }
    p->gathered_peak = p->cat_peak[GT_MEM_GATHERED];
  }
out:
  for (int d = 0; dp && w && d < N; d++) free(dp[d].saved_per_layer), free(w[d].live);
  free(dp), free(w), free(pw->probes);
  gt_model_free(m);
  free(pw);
  if (rc) gt_plan_free(p);
  return rc;
}

void gt_plan_free(gt_plan *p) {
  free(p->saved_per_layer);
  p->saved_per_layer = NULL;
}

int64_t gt_plan_total_bytes(const gt_plan *p) {
  return (p->n_devices > 1 ? p->n_devices : 1) * (p->peak_total + p->host_peak);
}

int64_t gt_plan_memory_limit(const gt_config *c) {
  if (c->memory_limit_bytes > 0) return c->memory_limit_bytes;
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  if (f) fclose(f);
  /* MPI ranks on one host share its memory: each gets its part */
  return kb > 0 ? kb * 1024 / gt_threads_local_ranks() : INT64_MAX;
}

static double gt__mib(int64_t b) { return (double)b / 1048576.0; }

void gt_plan_print(FILE *f, const gt_plan *p, const gt_config *c) {
  int64_t persistent = p->at_peak[GT_MEM_PARAMS] + p->at_peak[GT_MEM_FROZEN] + p->at_peak[GT_MEM_GRADS] +
                       p->at_peak[GT_MEM_OPTIM];
  fprintf(f, "memory plan: %s, remat_policy=%s remat_scope=%s, batch %lld x %lld, num_vocab_tiling=%lld\n",
          c->model_name[0] ? c->model_name : "(no preset)", c->remat_policy, c->remat_scope,
          gt_config_global_batch(c), c->max_target_length, c->num_vocab_tiling);
  fprintf(f, "  parameters: %lld (%.3f billion)", (long long)p->n_params, (double)p->n_params / 1e9);
  if (p->n_active_params != p->n_params) /* MoE: a token runs num_experts_per_tok experts */
    fprintf(f, ", active per token: %lld (%.3f billion)", (long long)p->n_active_params,
            (double)p->n_active_params / 1e9);
  if (p->n_frozen_tensors) /* the store: the frozen group has parameters only */
    fprintf(f, "; trainable: %lld, frozen: %lld in %d tensors (no gradient, no optimizer state)",
            (long long)p->n_trainable, (long long)(p->n_params - p->n_trainable), p->n_frozen_tensors);
  fprintf(f, "\n");
  fprintf(f, "  Per train step: Total TFLOPs: %.4f, split as %.2f%% learnable weight flops and %.2f%% attention flops\n",
          p->flops.total_tflops, 100 * p->flops.learnable_tflops / p->flops.total_tflops,
          100 * p->flops.attention_tflops / p->flops.total_tflops);
  fprintf(f, "  params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB", gt__mib(p->at_peak[GT_MEM_PARAMS]),
          gt__mib(p->at_peak[GT_MEM_GRADS]), gt__mib(p->at_peak[GT_MEM_OPTIM]));
  if (p->n_frozen_tensors) /* the frozen group: its own category, in its storage */
    fprintf(f, ", frozen base (%s) %.1f MiB", p->frozen_storage, gt__mib(p->at_peak[GT_MEM_FROZEN]));
  fprintf(f, " (%.1f MiB together)\n", gt__mib(persistent));
  fprintf(f, "  saved activations: %.1f MiB in all, %.2f MiB per layer (layer 0: %.2f MiB)\n",
          gt__mib(p->saved_total), gt__mib(p->saved_total / (p->n_layers ? p->n_layers : 1)),
          gt__mib(p->n_layers ? p->saved_per_layer[0] : 0));
  fprintf(f, "  peak: %.1f MiB (%lld bytes) during %s\n", gt__mib(p->peak_total), (long long)p->peak_total,
          p->peak_where);
  fprintf(f, "  activations over the layers: %.1f MiB at most (during %s) = %.1f MiB saved (carries and kept "
             "tensors) + %.1f MiB of that layer's working set\n",
          gt__mib(p->layer_act_peak), p->layer_act_where, gt__mib(p->layer_act_saved),
          gt__mib(p->layer_act_peak - p->layer_act_saved));
  fprintf(f, "    at the peak:");
  for (int k = 0; k < GT_MEM_NCAT; k++)
    if (p->at_peak[k] && k != GT_MEM_HOST) fprintf(f, " %s %.1f MiB;", gt_mem_cat_name((gt_mem_cat)k), gt__mib(p->at_peak[k]));
  fprintf(f, "\n");
  if (p->host_peak) fprintf(f, "  host pool (offloaded activations): %.1f MiB peak, not in the device peak\n", gt__mib(p->host_peak));
  if (p->ckpt_snapshot_bytes)
    fprintf(f, "  checkpoint snapshot (async_checkpointing): %.1f MiB (%lld bytes) per rank, held while a checkpoint is "
               "written beside the steps; not in the device peak (when it does not fit beside the need below, "
               "checkpoints are written synchronously)\n",
            gt__mib(p->ckpt_snapshot_bytes), (long long)p->ckpt_snapshot_bytes);
  if (p->n_ranks > 1)
    fprintf(f, "  over %d MPI ranks of %d device%s each (%d devices); the figures above and below are one rank's, per "
               "device (the busiest): state shards %.1f MiB, gathered weights up to %.1f MiB (%s scope%s), %.1f MiB "
               "sent per step inside the process and to other ranks, up to %.1f MiB of it to other ranks (a device "
               "whose ring successor is on another rank); each rank %.1f MiB\n",
            p->n_ranks, p->n_devices, p->n_devices > 1 ? "s" : "", p->n_ranks * p->n_devices,
            gt__mib(p->shard_state_bytes), gt__mib(p->gathered_peak), c->remat_scope, c->prefetch ? ", prefetch" : "",
            gt__mib(p->comm_bytes_per_step), gt__mib(p->comm_bytes_dcn_per_step),
            gt__mib(p->n_devices * (p->peak_total + p->host_peak)));
  else if (p->n_devices > 1)
    fprintf(f, "  sharded over %d devices; the figures above are per device (the busiest): state shards %.1f MiB, "
               "gathered weights up to %.1f MiB (%s scope%s), %.1f MiB sent per step; all devices together %.1f MiB\n",
            p->n_devices, gt__mib(p->shard_state_bytes), gt__mib(p->gathered_peak), c->remat_scope,
            c->prefetch ? ", prefetch" : "", gt__mib(p->comm_bytes_per_step),
            gt__mib(p->n_devices * (p->peak_total + p->host_peak)));
  fprintf(f, "  largest buffers live at the peak:\n");
  for (int i = 0; i < p->n_top; i++)
    fprintf(f, "    %10.2f MiB  %-18s %s\n", gt__mib(p->top[i].bytes), gt_mem_cat_name(p->top[i].cat), p->top[i].name);
}

char *gt_plan_to_json(const gt_plan *p, const gt_config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model_name", c->model_name);
  cJSON_AddStringToObject(o, "remat_policy", c->remat_policy);
  cJSON_AddStringToObject(o, "remat_scope", c->remat_scope);
  cJSON_AddNumberToObject(o, "parameters", (double)p->n_params);
  cJSON_AddNumberToObject(o, "active_parameters", (double)p->n_active_params);
  cJSON_AddNumberToObject(o, "trainable_parameters", (double)p->n_trainable);
  cJSON_AddStringToObject(o, "frozen_base_qtype", p->frozen_qtype);
  cJSON_AddStringToObject(o, "frozen_embedding_qtype", p->frozen_embed_qtype);
  cJSON_AddNumberToObject(o, "total_tflops_per_step_per_device", p->flops.total_tflops);
  cJSON_AddNumberToObject(o, "learnable_tflops", p->flops.learnable_tflops);
  cJSON_AddNumberToObject(o, "attention_tflops", p->flops.attention_tflops);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)p->peak_total);
  cJSON_AddStringToObject(o, "peak_during", p->peak_where);
  cJSON_AddNumberToObject(o, "host_pool_peak_bytes", (double)p->host_peak);
  cJSON_AddNumberToObject(o, "checkpoint_snapshot_bytes", (double)p->ckpt_snapshot_bytes);
  cJSON_AddNumberToObject(o, "saved_activation_bytes", (double)p->saved_total);
  cJSON_AddNumberToObject(o, "layer_activation_peak_bytes", (double)p->layer_act_peak);
  cJSON_AddNumberToObject(o, "layer_activation_peak_saved_bytes", (double)p->layer_act_saved);
  cJSON_AddStringToObject(o, "layer_activation_peak_during", p->layer_act_where);
  cJSON_AddNumberToObject(o, "num_devices", p->n_devices);
  cJSON_AddNumberToObject(o, "shard_state_bytes_per_device", (double)p->shard_state_bytes);
  cJSON_AddNumberToObject(o, "gathered_weight_bytes_per_device", (double)p->gathered_peak);
  cJSON_AddNumberToObject(o, "comm_bytes_per_step_per_device", (double)p->comm_bytes_per_step);
  cJSON_AddNumberToObject(o, "num_ranks", p->n_ranks);
  cJSON_AddNumberToObject(o, "comm_bytes_dcn_per_step_per_device", (double)p->comm_bytes_dcn_per_step);
  cJSON *pl = cJSON_AddArrayToObject(o, "saved_activation_bytes_per_layer");
  for (int64_t l = 0; l < p->n_layers; l++) cJSON_AddItemToArray(pl, cJSON_CreateNumber((double)p->saved_per_layer[l]));
  cJSON *cp = cJSON_AddObjectToObject(o, "category_peak_bytes");
  cJSON *ap = cJSON_AddObjectToObject(o, "bytes_at_peak");
  for (int k = 0; k < GT_MEM_NCAT; k++) {
    cJSON_AddNumberToObject(cp, gt_mem_cat_name((gt_mem_cat)k), (double)p->cat_peak[k]);
    cJSON_AddNumberToObject(ap, gt_mem_cat_name((gt_mem_cat)k), (double)p->at_peak[k]);
  }
  cJSON *top = cJSON_AddArrayToObject(o, "largest_buffers_at_peak");
  for (int i = 0; i < p->n_top; i++) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", p->top[i].name);
    cJSON_AddStringToObject(b, "category", gt_mem_cat_name(p->top[i].cat));
    cJSON_AddNumberToObject(b, "bytes", (double)p->top[i].bytes);
    cJSON_AddItemToArray(top, b);
  }
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  return s;
}
