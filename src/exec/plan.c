#define _POSIX_C_SOURCE 200809L
#include "exec/plan.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "model/layer.h"
#include "mesh/mesh.h"
#include "model/model.h"
#include "exec/remat.h"
#include "model/ple.h"

/* ---------- the virtual tracker ---------- */

typedef struct gt__vbuf {
  char name[64];
  gt_mem_cat cat;
  int64_t bytes;
  int live;
} gt__vbuf;

typedef struct gt__sim {
  gt_plan *p;
  int64_t cur[GT_MEM_NCAT];
  int64_t total;
  gt__vbuf *bufs;
  int n, cap;
  const char *phase;
  char phase_buf[96];
  int in_layers; /* the phase is a layer's forward or backward */
} gt__sim;

static int gt__cmp_buf(const void *a, const void *b) {
  int64_t x = ((const gt_plan_buf *)a)->bytes, y = ((const gt_plan_buf *)b)->bytes;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void gt__snapshot(gt__sim *s) {
  gt_plan *p = s->p;
  memcpy(p->at_peak, s->cur, sizeof p->at_peak);
  snprintf(p->peak_where, sizeof p->peak_where, "%s", s->phase);
  /* the largest live buffers */
  p->n_top = 0;
  for (int i = 0; i < s->n; i++) {
    if (!s->bufs[i].live || s->bufs[i].cat == GT_MEM_HOST) continue;
    gt_plan_buf b;
    snprintf(b.name, sizeof b.name, "%s", s->bufs[i].name);
    b.cat = s->bufs[i].cat;
    b.bytes = s->bufs[i].bytes;
    if (p->n_top < GT_PLAN_TOP) {
      p->top[p->n_top++] = b;
    } else if (b.bytes > p->top[GT_PLAN_TOP - 1].bytes) {
      p->top[GT_PLAN_TOP - 1] = b;
    } else {
      continue;
    }
    qsort(p->top, (size_t)p->n_top, sizeof p->top[0], gt__cmp_buf);
  }
}

static int gt__alloc(gt__sim *s, gt_mem_cat cat, int64_t bytes, const char *fmt, long long a) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 256;
    s->bufs = realloc(s->bufs, sizeof *s->bufs * (size_t)s->cap);
  }
  gt__vbuf *b = &s->bufs[s->n];
  snprintf(b->name, sizeof b->name, fmt, a);
  b->cat = cat;
  b->bytes = bytes;
  b->live = 1;
  s->cur[cat] += bytes;
  if (s->cur[cat] > s->p->cat_peak[cat]) s->p->cat_peak[cat] = s->cur[cat];
  if (cat == GT_MEM_HOST) {
    if (s->cur[cat] > s->p->host_peak) s->p->host_peak = s->cur[cat];
  } else {
    s->total += bytes;
    if (s->total > s->p->peak_total) {
      s->p->peak_total = s->total;
      gt__snapshot(s);
    }
    int64_t act = s->total - s->cur[GT_MEM_PARAMS] - s->cur[GT_MEM_GRADS] - s->cur[GT_MEM_OPTIM] -
                  s->cur[GT_MEM_GATHERED] - s->cur[GT_MEM_DATA] - s->cur[GT_MEM_OTHER];
    if (s->in_layers && act > s->p->layer_act_peak) {
      s->p->layer_act_peak = act;
      s->p->layer_act_saved = s->cur[GT_MEM_SAVED];
      snprintf(s->p->layer_act_where, sizeof s->p->layer_act_where, "%s", s->phase);
    }
  }
  return s->n++;
}

static void gt__free(gt__sim *s, int id) {
  if (id < 0 || !s->bufs[id].live) return;
  gt__vbuf *b = &s->bufs[id];
  b->live = 0;
  s->cur[b->cat] -= b->bytes;
  if (b->cat != GT_MEM_HOST) s->total -= b->bytes;
}

static void gt__phase(gt__sim *s, const char *fmt, long long a) {
  snprintf(s->phase_buf, sizeof s->phase_buf, fmt, a);
  s->phase = s->phase_buf;
  s->in_layers = !strncmp(fmt, "forward", 7) || !strncmp(fmt, "backward", 8);
}

/* ---------- the data source's own buffers ---------- */

static int64_t gt__stream_tokens(const gt_config *c) {
  struct stat st;
  /* text through a tokenizer: its length is known only once tokenized (not planned, as a shard directory) */
  if (!strcmp(c->dataset_type, "text") && c->tokenizer_path[0]) return 0;
  if (!strcmp(c->dataset_type, "text")) return stat(c->dataset_path, &st) ? 0 : (int64_t)st.st_size + 1;
  if (!strcmp(c->dataset_type, "tokens") && !stat(c->dataset_path, &st) && S_ISREG(st.st_mode)) {
    FILE *f = fopen(c->dataset_path, "rb");
    unsigned char h[24];
    int64_t n = 0;
    if (f && fread(h, 1, sizeof h, f) == sizeof h)
      for (int i = 0; i < 8; i++) n |= (int64_t)h[16 + i] << (8 * i);
    if (f) fclose(f);
    return n;
  }
  return 0; /* synthetic, or a shard directory (not planned) */
}

/* ---------- the step ---------- */

/* ---------- the sharded view: gathers and unit gradients ---------- */

typedef struct gt__view {
  gt__sim *s;
  int sharded, prefetch;
  int64_t n_units;
  const int64_t *cnt; /* [units] elements */
  int *gathered, *ugrad; /* [units] buffer ids or -1 */
} gt__view;

static void gt__gather(gt__view *v, int64_t u) {
  if (v->gathered[u] < 0)
    v->gathered[u] = gt__alloc(v->s, GT_MEM_GATHERED, v->cnt[u] * 4, u ? "layer %lld weights (gathered)" : "head weights (gathered)", u - 1);
}

/* mirrors src/fsdp.c: acquire gathers the unit and, with prefetch, the next
 * one (forward up, backward down); backward also allocates its gradient */
static void gt__acq(gt__view *v, int64_t u, int phase) {
  if (!v->sharded) return;
  gt__gather(v, u);
  if (v->prefetch) {
    int64_t next = phase == 0 ? u + 1 : u - 1;
    if (next >= 1 && next < v->n_units) gt__gather(v, next);
  }
  if (phase == 1 && v->ugrad[u] < 0)
    v->ugrad[u] = gt__alloc(v->s, GT_MEM_GRADS, v->cnt[u] * 4, u ? "layer %lld gradient (unsharded)" : "head gradient (unsharded)", u - 1);
}

static void gt__drop(gt__view *v, int64_t u) {
  if (!v->sharded) return;
  gt__free(v->s, v->gathered[u]);
  v->gathered[u] = -1;
}

static void gt__rel(gt__view *v, int64_t u, int phase) {
  if (!v->sharded) return;
  gt__drop(v, u);
  if (phase == 1) {
    gt__free(v->s, v->ugrad[u]);
    v->ugrad[u] = -1;
  }
}

/* The fsdp axis of the mesh (the data axis replicates what it shards). */
static int gt__fsdp_size(const gt_config *c) {
  int dp, fs, ep;
  gt_config_mesh_axes(c, &dp, &fs, &ep);
  return fs;
}

/* A device's index on the fsdp axis (src/mesh.c: device = (data * fsdp +
 * fsdp index) * expert + expert index). */
static int gt__fsdp_rank(const gt_config *c, int dev) {
  int dp, fs, ep;
  gt_config_mesh_axes(c, &dp, &fs, &ep);
  return dev / ep % fs;
}

/* One device's training step: dev = -1 is the unsharded model. */
static gt_rc gt__replay(gt_plan *p, const gt_config *c, gt_model *mm, int dev, gt_err *err) {
  gt_model m = *mm;
  gt__sim s = {p, {0}, 0, NULL, 0, 0, "setup", "", 0};
  const gt_remat *rm = &m.remat;
  int n_dev = (int)c->num_devices;
  int64_t Bg = gt_config_global_batch(c), T = c->max_target_length, L = m.n_layers, d = m.d;
  int64_t B = dev < 0 ? Bg : Bg / n_dev, N = B * T;
  int64_t f4 = 4, xbytes = N * d * f4;
  int period = rm->block_scope ? rm->period : 1;
  int64_t nu = gt_model_n_units(&m);
  int64_t *cnt = malloc(sizeof(int64_t) * (size_t)nu);
  int *gathered = malloc(sizeof(int) * (size_t)nu), *ugrad = malloc(sizeof(int) * (size_t)nu);
  for (int64_t u = 0; u < nu; u++) {
    cnt[u] = gt_model_unit_local(&m, u); /* with expert parallelism: the device's own experts */
    gathered[u] = ugrad[u] = -1;
  }
  gt__view v = {&s, dev >= 0, c->prefetch, nu, cnt, gathered, ugrad};

  if (dev < 0) {
    /* persistent: the order gt_train allocates in */
    int64_t ns = gt__stream_tokens(c);
    gt__alloc(&s, GT_MEM_DATA, N * 4, "batch inputs", 0);
    gt__alloc(&s, GT_MEM_DATA, N * 4, "batch targets", 0);
    gt__alloc(&s, GT_MEM_DATA, N * 4, "batch positions", 0);
    if (ns > 0) {
      gt__alloc(&s, GT_MEM_DATA, ns * 4, "token stream", 0);
      int64_t n_eval = (int64_t)((double)ns * c->eval_split_fraction);
      gt__alloc(&s, GT_MEM_DATA, ((ns - n_eval - 1) / T) * 8, "window order", 0);
    }
    gt__alloc(&s, GT_MEM_PARAMS, m.n_params * f4, "params", 0);
    gt__alloc(&s, GT_MEM_GRADS, m.n_params * f4, "grads", 0);
  }
  for (int r = 0; r < m.n_rope; r++) {
    int hd = m.rope[r].head_dim;
    gt__alloc(&s, GT_MEM_OTHER, m.max_pos * (hd / 2) * f4, "rope cos %lld", r);
    gt__alloc(&s, GT_MEM_OTHER, m.max_pos * (hd / 2) * f4, "rope sin %lld", r);
  }
  if (dev < 0) {
    gt__alloc(&s, GT_MEM_OPTIM, m.n_params * f4, "adam mu", 0);
    gt__alloc(&s, GT_MEM_OPTIM, m.n_params * f4, "adam nu", 0);
  } else { /* src/fsdp.c: the device's shards and its reduce-scatter buffer */
    int64_t sh = 0, maxs = 0;
    for (int64_t u = 0; u < nu; u++) {
      int64_t n = gt_shard_len(cnt[u], gt__fsdp_size(c), gt__fsdp_rank(c, dev));
      sh += n;
      if (n > maxs) maxs = n;
    }
    gt__alloc(&s, GT_MEM_PARAMS, sh * f4, "params (shard)", 0);
    gt__alloc(&s, GT_MEM_GRADS, sh * f4, "grads (shard)", 0);
    gt__alloc(&s, GT_MEM_OPTIM, sh * f4, "adam mu (shard)", 0);
    gt__alloc(&s, GT_MEM_OPTIM, sh * f4, "adam nu (shard)", 0);
    gt__alloc(&s, GT_MEM_TEMP, (maxs > 0 ? maxs : 1) * f4, "reduce-scatter buffer", 0);
    p->shard_state_bytes = 4 * sh * f4;
  }

  /* forward */
  int *slot_id = malloc(sizeof(int) * (size_t)(L * GT_A_NSLOTS));
  for (int64_t i = 0; i < L * GT_A_NSLOTS; i++) slot_id[i] = -1;
#define SID(l, k) slot_id[(l) * GT_A_NSLOTS + (k)]
  int *host_id = malloc(sizeof(int) * (size_t)(L * GT_A_NSLOTS));
  for (int64_t i = 0; i < L * GT_A_NSLOTS; i++) host_id[i] = -1;
  int x = gt__alloc(&s, GT_MEM_SAVED, xbytes, "layer 0 input (carry)", 0);
  gt__acq(&v, 0, 0);
  int64_t ple_n = N * L * m.ple_dim, ple_fwd = 0, ple_cols = 0, ple_rows = 0;
  int ple = -1;
  if (m.ple_dim) { /* src/ple.c: the per-layer inputs, kept through the step */
    gt__ple_temps(&m, N, &ple_fwd, &ple_cols, &ple_rows);
    ple = gt__alloc(&s, GT_MEM_SAVED, ple_n * f4, "per-layer inputs (PLE)", 0);
    gt__free(&s, gt__alloc(&s, GT_MEM_TEMP, ple_fwd * f4, "per-layer projection", 0));
  }
  gt__rel(&v, 0, 0);
  for (int64_t l = 0; l < L; l++) {
    gt__phase(&s, "forward, layer %lld", l);
    int64_t bs0 = l / period * period, be0 = bs0 + period < L ? bs0 + period : L;
    if (l == bs0)
      for (int64_t u = bs0; u < be0; u++) gt__acq(&v, 1 + u, 0);
    const gt_layer_desc *ld = &m.layers[l];
    SID(l, GT_A_X_IN) = x;
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      if (!gt_layer_has_slot(ld, (gt_act)k)) continue;
      char nm[64];
      snprintf(nm, sizeof nm, "layer %%lld %s", gt_act_name((gt_act)k));
      SID(l, k) = gt__alloc(&s, gt_remat_slot_mode(rm, ld, k) == GT_SAVE_DEVICE ? GT_MEM_SAVED : GT_MEM_TEMP,
                            gt_act_numel(&m, ld, (gt_act)k, B, T) * f4, nm, l);
    }
    int xn = gt__alloc(&s, l + 1 < L && gt_remat_block_start(rm, l + 1) ? GT_MEM_SAVED : GT_MEM_TEMP, xbytes,
                       l + 1 < L ? "layer %lld input (carry)" : "final hidden state", l + 1);
    int64_t moe_fwd, moe_bwd; /* src/layer.c: the routed experts' scratch, inside the layer's forward */
    gt_layer_moe_temps(&m, ld, B, T, &moe_fwd, &moe_bwd);
    if (moe_fwd) gt__free(&s, gt__alloc(&s, GT_MEM_TEMP, moe_fwd * f4, "layer %lld routed experts' scratch", l));
    for (int k = 0; k < GT_A_NSLOTS; k++) {
      if (SID(l, k) < 0) continue;
      gt_save_mode mode = gt_remat_slot_mode(rm, ld, k);
      int64_t nb = s.bufs[SID(l, k)].bytes;
      if (mode == GT_SAVE_DEVICE) {
        p->saved_per_layer[l] += nb;
        continue;
      }
      if (mode == GT_SAVE_OFFLOAD) {
        char nm[64];
        snprintf(nm, sizeof nm, "layer %%lld %s (host)", gt_act_name((gt_act)k));
        host_id[l * GT_A_NSLOTS + k] = gt__alloc(&s, GT_MEM_HOST, nb, nm, l);
      }
      gt__free(&s, SID(l, k));
      SID(l, k) = -1;
    }
    p->saved_total += p->saved_per_layer[l];
    x = xn;
    if (l == be0 - 1)
      for (int64_t u = bs0; u < be0; u++) gt__rel(&v, 1 + u, 0);
  }

  /* head: residual gradients, then the tiled logits */
  gt__phase(&s, "output head (logits and loss)", 0);
  int dx = gt__alloc(&s, GT_MEM_TEMP, xbytes, "residual gradient", 0);
  int dprev = gt__alloc(&s, GT_MEM_TEMP, xbytes, "residual gradient (other)", 0);
  gt__acq(&v, 0, 1);
  int64_t R = N / c->num_vocab_tiling, V = m.vocab;
  int hb[8];
  int nh = 0;
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, N * d * f4, "final norm output", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, N * f4, "final norm rstd", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, N * d * f4, "head input gradient", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_LOGITS, R * V * f4, "logits tile", 0);
  if (m.softcap > 0) hb[nh++] = gt__alloc(&s, GT_MEM_LOGITS, R * V * f4, "capped logits tile", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, R * f4, "tile losses", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, R * f4, "tile log-sum-exp", 0);
  hb[nh++] = gt__alloc(&s, GT_MEM_TEMP, R * f4, "tile row weights", 0);
  for (int i = 0; i < nh; i++) gt__free(&s, hb[i]);
  gt__drop(&v, 0);
  gt__free(&s, x);
  int dple = m.ple_dim ? gt__alloc(&s, GT_MEM_TEMP, ple_n * f4, "per-layer input gradient (PLE)", 0) : -1;
  int *dkv = malloc(sizeof(int) * (size_t)(2 * L)); /* a donor's K/V gradient accumulators */
  for (int64_t i = 0; i < 2 * L; i++) dkv[i] = -1;

  /* backward, one remat boundary at a time */
  for (int64_t end = L; end > 0;) {
    int64_t start = ((end - 1) / period) * period;
    for (int64_t l = start; l < end; l++) gt__acq(&v, 1 + l, 1);
    for (int64_t l = start; l < end; l++) {
      gt__phase(&s, "backward, recomputing layer %lld", l);
      const gt_layer_desc *ld = &m.layers[l];
      uint8_t have[GT_A_NSLOTS];
      for (int k = 0; k < GT_A_NSLOTS; k++) {
        int h = host_id[l * GT_A_NSLOTS + k];
        if (h >= 0) {
          SID(l, k) = gt__alloc(&s, GT_MEM_TEMP, s.bufs[h].bytes, "layer %lld offloaded slot, back", l);
          gt__free(&s, h);
        }
        have[k] = SID(l, k) >= 0 || !gt_layer_has_slot(ld, (gt_act)k);
      }
      int want_out = l + 1 < end && SID(l + 1, GT_A_X_IN) < 0;
      uint32_t out_op = gt_layer_output_op(ld);
      uint32_t ops = gt_layer_recompute_ops(ld, have);
      if (want_out) ops |= out_op;
      if (ops) {
        uint8_t outs[GT_A_NSLOTS];
        gt_layer_ops_outputs(ld, ops, outs);
        for (int k = 1; k < GT_A_NSLOTS; k++)
          if (outs[k] && SID(l, k) < 0) {
            char nm[64];
            snprintf(nm, sizeof nm, "layer %%lld %s (recomputed)", gt_act_name((gt_act)k));
            SID(l, k) = gt__alloc(&s, GT_MEM_TEMP, gt_act_numel(&m, ld, (gt_act)k, B, T) * f4, nm, l);
          }
        int xo = (ops & out_op) ? gt__alloc(&s, GT_MEM_TEMP, xbytes, "layer %lld output (recomputed)", l) : -1;
        if (ops & gt_layer_moe_op()) {
          int64_t moe_fwd, moe_bwd;
          gt_layer_moe_temps(&m, ld, B, T, &moe_fwd, &moe_bwd);
          gt__free(&s, gt__alloc(&s, GT_MEM_TEMP, moe_fwd * f4, "layer %lld routed experts' scratch (recompute)", l));
        }
        if (want_out)
          SID(l + 1, GT_A_X_IN) = xo;
        else
          gt__free(&s, xo);
      }
    }
    for (int64_t l = end - 1; l >= start; l--) {
      gt__phase(&s, "backward, layer %lld", l);
      const gt_layer_desc *ld = &m.layers[l];
      int64_t n_dx1, n_ple, n_ffw, n_attn;
      gt_layer_backward_temps(&m, ld, N, &n_dx1, &n_ple, &n_ffw, &n_attn);
      if (ld->kv_donor >= 0 && dkv[2 * ld->kv_donor] < 0) { /* src/exec.c: opened by the last reader */
        int64_t kb = gt_act_numel(&m, &m.layers[ld->kv_donor], GT_A_K, B, T) * f4;
        dkv[2 * ld->kv_donor] = gt__alloc(&s, GT_MEM_TEMP, kb, "layer %lld shared K gradient", ld->kv_donor);
        dkv[2 * ld->kv_donor + 1] = gt__alloc(&s, GT_MEM_TEMP, kb, "layer %lld shared V gradient", ld->kv_donor);
      }
      int dx1 = gt__alloc(&s, GT_MEM_TEMP, n_dx1 * f4, "layer %lld d(attention residual)", l);
      if (n_ple) gt__free(&s, gt__alloc(&s, GT_MEM_TEMP, n_ple * f4, "layer %lld per-layer input gradients", l));
      int ffw = gt__alloc(&s, GT_MEM_TEMP, n_ffw * f4, "layer %lld MLP gradients", l);
      int64_t moe_fwd, moe_bwd;
      gt_layer_moe_temps(&m, ld, B, T, &moe_fwd, &moe_bwd);
      if (moe_bwd) gt__free(&s, gt__alloc(&s, GT_MEM_TEMP, moe_bwd * f4, "layer %lld routed experts' backward scratch", l));
      gt__free(&s, ffw);
      int at = gt__alloc(&s, GT_MEM_TEMP, n_attn * f4, "layer %lld attention gradients", l);
      gt__free(&s, at);
      gt__free(&s, dx1);
      if (ld->kv_last_reader >= 0) {
        gt__free(&s, dkv[2 * l]);
        gt__free(&s, dkv[2 * l + 1]);
        dkv[2 * l] = dkv[2 * l + 1] = -1;
      }
      if (l == 0 && m.ple_dim) { /* the PLE backward, with the head's weights once more */
        gt__phase(&s, "backward, per-layer embeddings", 0);
        gt__acq(&v, 0, 1);
        int t1 = gt__alloc(&s, GT_MEM_TEMP, ple_cols * f4, "per-layer projection (recomputed)", 0);
        int t2 = gt__alloc(&s, GT_MEM_TEMP, ple_cols * f4, "per-layer projection gradient", 0);
        int t3 = gt__alloc(&s, GT_MEM_TEMP, ple_rows * f4, "per-layer norm rstd", 0);
        gt__free(&s, t1);
        gt__free(&s, t2);
        gt__free(&s, t3);
        gt__drop(&v, 0);
        gt__free(&s, dple);
        gt__free(&s, ple);
      }
      for (int k = 0; k < GT_A_NSLOTS; k++) {
        gt__free(&s, SID(l, k));
        SID(l, k) = -1;
      }
      gt__rel(&v, 1 + l, 1);
    }
    end = start;
  }
  gt__rel(&v, 0, 1);
  gt__free(&s, dx);
  gt__free(&s, dprev);
#undef SID
  free(dkv);
  free(slot_id);
  free(host_id);
  gt_rc rc = GT_OK;
  for (int64_t u = 0; u < nu; u++)
    if (gathered[u] >= 0 || ugrad[u] >= 0) /* the replay must end as it began */
      rc = gt_err_set(err, GT_ERR_INTERNAL, "plan: unit %lld is still gathered at the end of the step replay",
                      (long long)u);
  free(cnt);
  free(gathered);
  free(ugrad);
  free(s.bufs);
  return rc;
}

gt_rc gt_plan_compute(gt_plan *p, const gt_config *c, gt_err *err) {
  memset(p, 0, sizeof *p);
  gt_model m;
  gt_rc rc = gt_model_build(&m, c, err);
  if (rc) return rc;
  p->n_params = m.n_params;
  p->n_active_params = gt_model_count_active_params(c);
  p->n_layers = m.n_layers;
  p->flops = gt_flops_per_step_per_device(c);
  p->n_devices = (int)c->num_devices;
  p->saved_per_layer = calloc((size_t)m.n_layers, sizeof(int64_t));
  int ax_d, ax_f, ax_e;
  gt_config_mesh_axes(c, &ax_d, &ax_f, &ax_e);
  /* every expert rank holds blocks of the same size */
  if (ax_e > 1) gt_model_set_expert_shard(&m, ax_e, 0);
  if (p->n_devices <= 1) {
    rc = gt__replay(p, c, &m, -1, err);
  } else {
    /* every device, keeping the one with the highest peak */
    gt_plan best;
    memset(&best, 0, sizeof best);
    for (int dv = 0; dv < p->n_devices; dv++) {
      gt_plan q = *p;
      memset(q.cat_peak, 0, sizeof q.cat_peak);
      memset(q.at_peak, 0, sizeof q.at_peak);
      q.peak_total = q.host_peak = q.saved_total = q.layer_act_peak = q.layer_act_saved = 0;
      memset(q.saved_per_layer, 0, sizeof(int64_t) * (size_t)m.n_layers);
      if ((rc = gt__replay(&q, c, &m, dv, err))) break;
      if (dv == 0 || q.peak_total > best.peak_total) {
        int64_t *keep = best.saved_per_layer;
        best = q;
        best.saved_per_layer = keep;
        if (!best.saved_per_layer) best.saved_per_layer = malloc(sizeof(int64_t) * (size_t)m.n_layers);
        memcpy(best.saved_per_layer, q.saved_per_layer, sizeof(int64_t) * (size_t)m.n_layers);
      }
    }
    if (rc) {
      free(best.saved_per_layer);
      gt_model_free(&m);
      gt_plan_free(p);
      return rc;
    }
    int64_t *mine = p->saved_per_layer;
    *p = best;
    memcpy(mine, best.saved_per_layer, sizeof(int64_t) * (size_t)m.n_layers);
    free(best.saved_per_layer);
    p->saved_per_layer = mine;
    /* the ring's bytes (src/mesh.c): an all-gather sends n - shard(d+1),
     * a reduce-scatter n - shard(d). Per micro-batch every unit is gathered
     * twice (forward and backward; the head for the lookup and the logits,
     * and a PLE model's head once more for the PLE backward)
     * and its gradient reduce-scattered once; per step 3 doubles (loss, token
     * count, squared norm) are all-reduced. The busiest device counts. */
    int N = p->n_devices, F = ax_f, D = ax_d, E = ax_e;
    int64_t Bd = gt_config_global_batch(c) / N, Tn = c->max_target_length;
    for (int dv = 0; dv < N; dv++) {
      int64_t sent = 0;
      int e = dv % E, r = dv / E % F, dr = dv / (E * F);
      for (int64_t u = 0; u < gt_model_n_units(&m); u++) {
        int64_t cnt = gt_model_unit_local(&m, u), rep = gt_model_unit_replicated(&m, u);
        int64_t ns = gt_shard_len(cnt, F, r), nb = gt_shard_begin(cnt, F, r);
        /* the head of a PLE model is gathered a third time, for the PLE backward */
        int64_t gathers = u == 0 && m.ple_dim ? 3 : 2;
        sent += gathers * (cnt - gt_shard_len(cnt, F, (r + 1) % F)) * 4 + (cnt - ns) * 4;
        if (D > 1) sent += ((ns - gt_shard_len(ns, D, dr)) + (ns - gt_shard_len(ns, D, (dr + 1) % D))) * 4;
        /* src/fsdp.c: the expert ranks sum the replicated part of the shard */
        int64_t nr = rep - nb < 0 ? 0 : rep - nb > ns ? ns : rep - nb;
        if (E > 1 && nr > 0) sent += ((nr - gt_shard_len(nr, E, e)) + (nr - gt_shard_len(nr, E, (e + 1) % E))) * 4;
        /* src/layer.c: a MoE layer's routed op gathers the group's inputs
         * and all-reduces their sums (again when remat recomputes it);
         * backward gathers d(routed) and reduce-scatters d(x1) */
        const gt_layer_desc *ld = u > 0 ? &m.layers[u - 1] : NULL;
        if (ld && ld->moe_ep > 1) {
          int64_t n = E * Bd * Tn * m.d, one = (n - n / E) * 4;
          int runs = 1 + (gt_remat_slot_mode(&m.remat, ld, GT_A_MOE_SAVED) == GT_SAVE_REMAT);
          sent += runs * 3 * one + 2 * one;
        }
      }
      sent *= c->gradient_accumulation_steps;
      int64_t nsum = m.n_moe_layers ? 4 : 3; /* loss, token count, squared norm (and the MoE lb sum) */
      sent += ((nsum - gt_shard_len(nsum, N, dv)) + (nsum - gt_shard_len(nsum, N, (dv + 1) % N))) * 8;
      if (sent > p->comm_bytes_per_step) p->comm_bytes_per_step = sent;
    }
    p->gathered_peak = p->cat_peak[GT_MEM_GATHERED];
  }
  gt_model_free(&m);
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
  return kb > 0 ? kb * 1024 : INT64_MAX;
}

static double gt__mib(int64_t b) { return (double)b / 1048576.0; }

void gt_plan_print(FILE *f, const gt_plan *p, const gt_config *c) {
  int64_t persistent = p->at_peak[GT_MEM_PARAMS] + p->at_peak[GT_MEM_GRADS] + p->at_peak[GT_MEM_OPTIM];
  fprintf(f, "memory plan: %s, remat_policy=%s remat_scope=%s, batch %lld x %lld, num_vocab_tiling=%lld\n",
          c->model_name[0] ? c->model_name : "(no preset)", c->remat_policy, c->remat_scope,
          gt_config_global_batch(c), c->max_target_length, c->num_vocab_tiling);
  fprintf(f, "  parameters: %lld (%.3f billion)", (long long)p->n_params, (double)p->n_params / 1e9);
  if (p->n_active_params != p->n_params) /* MoE: a token runs num_experts_per_tok experts */
    fprintf(f, ", active per token: %lld (%.3f billion)", (long long)p->n_active_params,
            (double)p->n_active_params / 1e9);
  fprintf(f, "\n");
  fprintf(f, "  Per train step: Total TFLOPs: %.4f, split as %.2f%% learnable weight flops and %.2f%% attention flops\n",
          p->flops.total_tflops, 100 * p->flops.learnable_tflops / p->flops.total_tflops,
          100 * p->flops.attention_tflops / p->flops.total_tflops);
  fprintf(f, "  params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB (%.1f MiB together)\n",
          gt__mib(p->at_peak[GT_MEM_PARAMS]), gt__mib(p->at_peak[GT_MEM_GRADS]), gt__mib(p->at_peak[GT_MEM_OPTIM]),
          gt__mib(persistent));
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
  if (p->n_devices > 1)
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
  cJSON_AddNumberToObject(o, "total_tflops_per_step_per_device", p->flops.total_tflops);
  cJSON_AddNumberToObject(o, "learnable_tflops", p->flops.learnable_tflops);
  cJSON_AddNumberToObject(o, "attention_tflops", p->flops.attention_tflops);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)p->peak_total);
  cJSON_AddStringToObject(o, "peak_during", p->peak_where);
  cJSON_AddNumberToObject(o, "host_pool_peak_bytes", (double)p->host_peak);
  cJSON_AddNumberToObject(o, "saved_activation_bytes", (double)p->saved_total);
  cJSON_AddNumberToObject(o, "layer_activation_peak_bytes", (double)p->layer_act_peak);
  cJSON_AddNumberToObject(o, "layer_activation_peak_saved_bytes", (double)p->layer_act_saved);
  cJSON_AddStringToObject(o, "layer_activation_peak_during", p->layer_act_where);
  cJSON_AddNumberToObject(o, "num_devices", p->n_devices);
  cJSON_AddNumberToObject(o, "shard_state_bytes_per_device", (double)p->shard_state_bytes);
  cJSON_AddNumberToObject(o, "gathered_weight_bytes_per_device", (double)p->gathered_peak);
  cJSON_AddNumberToObject(o, "comm_bytes_per_step_per_device", (double)p->comm_bytes_per_step);
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
