/* The layer-scan executor. Forward walks the layer list; after each layer it
 * keeps what the remat policy names (plus the carry at each remat boundary)
 * and frees the rest. Backward walks the boundaries in reverse: it re-runs the
 * ops whose outputs were dropped, runs the layer backward, and frees the
 * layer's buffers before moving on. With remat_scope=block a boundary holds a
 * whole layer_pattern block, so its backward recomputes (and holds) the whole
 * block at once, as MaxText did before per-layer boundaries.
 *
 * Every layer goes through the same gt_layer_* functions with its own
 * descriptor: the executor never asks what model it runs.
 *
 * On a measuring tracker (gt_mem_measuring(m->mem)) the same code runs in
 * allocation-only mode: every buffer is allocated and freed in the same
 * order with the same size, category and name, but no kernel runs and no
 * buffer is read or written (the plan measures the real schedule this way).
 * Allocation sizes never depend on the data, so both runs allocate alike.
 * Phases (gt_mem_phase) tell a probe which layer an allocation belongs to. */
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/layer.h"
#include "base/prof.h"
#include "model/remat.h"
#include "kernels/bf16.h"
#include "model/head.h"
#include "model/linear.h"
#include "model/ple.h"
#include "model/qstore.h"

int64_t gt_batch_total_weights(const gt_batch *b) {
  int64_t n = 0, N = (int64_t)b->B * b->T;
  for (int64_t i = 0; i < N; i++) n += b->targets[i] >= 0;
  return n;
}

typedef struct gt__lstate {
  float *a[GT_A_NSLOTS];       /* device buffers (NULL when dropped) */
  void *host[GT_A_NSLOTS];     /* offloaded copies (bf16 when packed) */
  uint16_t *b16[GT_A_NSLOTS];  /* kept on the device in bf16 (dtype=bfloat16) */
} gt__lstate;

typedef struct gt__run {
  gt_model *m;
  const gt_batch *b;
  gt__lstate *ls; /* [L] */
  const float **lp; /* [L] each layer's parameter block while acquired */
  float **lg;       /* [L] its gradient block (backward) */
  float **dkv;      /* [2L] a KV donor's accumulated K and V gradients (backward) */
  float *ple, *dple; /* [N, L*P] per-layer inputs and their gradient (PLE models) */
  double lb_sum;     /* MoE: the forward's load-balance losses, summed over layers */
  gt_rc fail;        /* set by a layer op that could not allocate its scratch */
} gt__run;

static gt_rc gt__acquire(gt_model *m, int64_t u, int phase, const float **p, float **g, gt_err *err) {
  if (m->view) return m->view->acquire(m->view->ctx, u, phase, p, g, err);
  int64_t off, cnt;
  gt_model_unit(m, u, &off, &cnt);
  *p = m->params + off;
  if (g) *g = m->grads + off;
  return GT_OK;
}

/* where unit u's projections are read when its acquired block leaves them
 * out (gt_param_view.projections), else NULL */
static const float *gt__projections_of(const gt_model *m, int64_t u) {
  const gt_param_view *v = m->view;
  return v && v->projections ? v->projections(v->ctx, u) : NULL;
}

/* x = bf16(emb_scale * bf16(E[id])) for the batch's ids: the lookup in the
 * acquired (rounded) head, or in the master table hm with the rows rounded
 * here, then scaled as gt_embedding_forward scales (the same product, the
 * same bits) */
static void gt__lookup(gt_model *m, const float *hp, const float *hm, const int32_t *ids, int64_t N, float *x) {
  const int64_t n = N * m->d;
  if (!hm) {
    gt_qstore_lookup(m, m->embed_qtype, hp + m->embed_offset, m->vocab, m->d, ids, N, m->emb_scale, x);
  } else {
    gt_qstore_lookup(m, m->embed_qtype, hm + m->embed_offset, m->vocab, m->d, ids, N, 1.0f, x);
    gt_bf16_round(x, n);
    gt_scale_forward(x, x, m->emb_scale, n); /* (threaded; s * x is x * s) */
  }
  gt__act_round(m, x, n);
}

static void gt__drop_params(gt_model *m, int64_t u) {
  if (m->view && m->view->drop_params) m->view->drop_params(m->view->ctx, u);
}

static void gt__release(gt_model *m, int64_t u, int phase) {
  if (m->view) m->view->release(m->view->ctx, u, phase);
}

/* The units of the remat boundary holding layer l: [*start, *end). */
static void gt__block_of(const gt_model *m, int64_t l, int64_t *start, int64_t *end) {
  int64_t period = m->remat.block_scope ? m->remat.period : 1;
  *start = l / period * period;
  *end = *start + period < m->n_layers ? *start + period : m->n_layers;
}

static size_t gt__bytes(const gt_model *m, const gt_batch *b, int64_t l, int k) {
  return (size_t)gt_act_numel(m, &m->layers[l], (gt_act)k, b->B, b->T) * sizeof(float);
}

/* Is slot k of layer L one a later layer reads (a donor's K or V)? */
static int gt__shared_kv(const gt_layer_desc *L, int k) {
  return L->kv_last_reader >= 0 && (k == GT_A_K || k == GT_A_V);
}

/* dtype=bfloat16: is slot k kept (or offloaded) in 2 bytes? Its values are
 * bf16 already (the forward rounds every tensor it writes), so packing and
 * unpacking are exact and a restored slot has the bits the forward wrote.
 * Statistics stay float32; a KV donor's K and V stay float32 on the device,
 * because later layers read them in place. */
static int gt__packed(const gt_model *m, int64_t l, int k) {
  return m->bf16_act && gt_act_is_tensor((gt_act)k) && !gt__shared_kv(&m->layers[l], k);
}

static size_t gt__kept_bytes(const gt_model *m, const gt_batch *b, int64_t l, int k) {
  return gt__packed(m, l, k) ? gt__bytes(m, b, l, k) / 2 : gt__bytes(m, b, l, k);
}

/* slot k of layer l's 2-byte buffer for the backward (NULL: no memory) */
static uint16_t *gt__alloc_kept16(gt__run *r, int64_t l, int k) {
  return r->ls[l].b16[k] = gt_mem_alloc_uninit_named(r->m->mem, GT_MEM_SAVED, gt__kept_bytes(r->m, r->b, l, k),
                                                     gt_act_name((gt_act)k));
}

static void gt__free_layer(gt__run *r, int64_t l) {
  for (int k = 0; k < GT_A_NSLOTS; k++) {
    gt_mem_free(r->m->mem, r->ls[l].a[k]);
    gt_mem_free(r->m->mem, r->ls[l].host[k]);
    gt_mem_free(r->m->mem, r->ls[l].b16[k]);
    r->ls[l].a[k] = NULL;
    r->ls[l].host[k] = NULL;
    r->ls[l].b16[k] = NULL;
  }
}

static void gt__free_run(gt__run *r) {
  if (r->ls)
    for (int64_t l = 0; l < r->m->n_layers; l++) gt__free_layer(r, l);
  if (r->dkv)
    for (int64_t i = 0; i < 2 * r->m->n_layers; i++) gt_mem_free(r->m->mem, r->dkv[i]);
  gt_mem_free(r->m->mem, r->ple);
  gt_mem_free(r->m->mem, r->dple);
  free(r->ls);
  free(r->lp);
  free(r->lg);
  free(r->dkv);
  r->ls = NULL;
  r->lp = NULL;
  r->lg = NULL;
  r->dkv = NULL;
  r->ple = r->dple = NULL;
}

static gt_layer_io gt__io(gt__run *r, int64_t l) {
  const gt_layer_desc *L = &r->m->layers[l];
  gt_layer_io io = {r->m, L, r->b->B, r->b->T, r->b->positions, r->b->segments, r->lp[l], NULL,
                    NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, &r->fail, NULL};
  io.mparams = gt__projections_of(r->m, 1 + l);
  /* KV sharing: a shared layer reads its donor's kept K/V; both send their
   * K/V gradients through the donor's accumulators */
  int64_t kv = L->kv_donor >= 0 ? L->kv_donor : l;
  if (L->kv_donor >= 0) {
    io.kv_k = r->ls[kv].a[GT_A_K];
    io.kv_v = r->ls[kv].a[GT_A_V];
  }
  if (r->dkv) {
    io.dkv_k = r->dkv[2 * kv];
    io.dkv_v = r->dkv[2 * kv + 1];
  }
  if (L->ple_dim) {
    io.ple_stride = r->m->n_layers * L->ple_dim;
    io.ple = r->ple + l * L->ple_dim;
    io.dple = r->dple ? r->dple + l * L->ple_dim : NULL;
  }
  return io;
}

static gt_rc gt__check_batch(gt_model *m, const gt_batch *b, gt_err *err) {
  int64_t N = (int64_t)b->B * b->T;
  if (b->T > m->max_pos)
    return gt_err_set(err, GT_ERR_ARG, "executor: batch length %d exceeds max_target_length %lld", b->T,
                      (long long)m->max_pos);
  for (int64_t i = 0; i < N; i++)
    if (b->inputs[i] < 0 || b->inputs[i] >= m->vocab || b->positions[i] < 0 || b->positions[i] >= m->max_pos)
      return gt_err_set(err, GT_ERR_ARG,
                        "executor: token %lld has id %d (vocab %lld) and position %d (max %lld)",
                        (long long)i, b->inputs[i], (long long)m->vocab, b->positions[i],
                        (long long)m->max_pos);
  return GT_OK;
}

/* To or from the host pool (to_host: src is the device's float32 buffer):
 * a copy, or a bf16 pack / unpack of n elements when packed. */
static void gt__copy_timed(gt_model *m, void *dst, const void *src, int64_t n, int packed, int to_host) {
  if (gt_mem_measuring(m->mem)) return;
  double t0 = gt_prof_now();
  size_t bytes = (size_t)n * (packed ? sizeof(uint16_t) : sizeof(float));
  if (!packed)
    memcpy(dst, src, bytes);
  else if (to_host)
    gt_bf16_pack(dst, src, n);
  else
    gt_bf16_unpack(dst, src, n);
  m->offload_seconds += gt_prof_now() - t0;
  m->offload_bytes += (long long)bytes;
}

/* Forward over all layers. train = 1 keeps what backward needs; train = 0
 * frees each layer as soon as the next has its input. *x_out receives the
 * final residual stream (a temporary the caller frees). */
static gt_rc gt__forward(gt__run *r, int train, float **x_out, gt_err *err) {
  gt_model *m = r->m;
  const gt_batch *b = r->b;
  int64_t L = m->n_layers, N = (int64_t)b->B * b->T, d = m->d;
  const gt_remat *rm = &m->remat;
  size_t xbytes = (size_t)(N * d) * sizeof(float);
  gt_rc rc;
  r->ls = calloc((size_t)L, sizeof *r->ls);
  r->lp = calloc((size_t)L, sizeof *r->lp);
  r->lg = calloc((size_t)L, sizeof *r->lg);
  r->dkv = calloc((size_t)(2 * L), sizeof *r->dkv);
  if (!r->ls || !r->lp || !r->lg || !r->dkv) {
    gt__free_run(r);
    return gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for %lld layer records", (long long)L);
  }
  /* a kept carry is saved as it is, or packed to bf16 by the layer that
   * reads it (its input norm, dtype=bfloat16): then it is a temporary until
   * that layer is done */
  gt_mem_cat carry_cat = train && gt_remat_carry_kept(rm, 0) && !m->bf16_act ? GT_MEM_SAVED : GT_MEM_TEMP;
  float *xn_own = NULL; /* a layer's output until it is the next layer's recorded input */
  float *x = gt_mem_alloc_uninit_named(m->mem, carry_cat, xbytes, "layer input (carry)");
  if (!x) goto nomem;
  int meas = gt_mem_measuring(m->mem);
  const float *hp;
  if ((rc = gt__acquire(m, 0, 0, &hp, NULL, err))) {
    gt_mem_free(m->mem, x);
    gt__free_run(r);
    return rc;
  }
  if (!meas) {
    GT_PROF(m->prof, GT_PROF_ELEMWISE, gt__lookup(m, hp, gt__projections_of(m, 0), b->inputs, N, x));
  }
  if (m->ple_dim) {
    /* every layer reads its slice, through the backward too */
    size_t pb = (size_t)(N * L * m->ple_dim) * sizeof(float);
    r->ple = gt_mem_alloc_uninit_named(m->mem, train ? GT_MEM_SAVED : GT_MEM_TEMP, pb, "per-layer inputs (PLE)");
    rc = r->ple ? gt__ple_forward(m, hp, x, b->inputs, N, r->ple, err)
                : gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for the per-layer inputs");
    if (rc) {
      gt__release(m, 0, 0);
      gt_mem_free(m->mem, x);
      gt__free_run(r);
      return rc;
    }
  }
  gt__release(m, 0, 0);
  for (int64_t l = 0; l < L; l++) {
    int64_t bs, be;
    gt__block_of(m, l, &bs, &be);
    gt_mem_phase(m->mem, "forward, layer %lld", (long long)l);
    if (l == bs) /* a boundary's weights arrive together (all of a block's, with block scope) */
      for (int64_t u = bs; u < be; u++)
        if ((rc = gt__acquire(m, 1 + u, 0, &r->lp[u], NULL, err))) {
          for (int64_t v = bs; v < u; v++) gt__release(m, 1 + v, 0);
          gt_mem_free(m->mem, x);
          gt__free_run(r);
          return rc;
        }
    gt_layer_io io = gt__io(r, l);
    const gt_layer_desc *ld = &m->layers[l];
    float **a = r->ls[l].a;
    a[GT_A_X_IN] = x;
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      if (!gt_layer_has_slot(ld, (gt_act)k)) continue;
      gt_mem_cat cat = train && gt_remat_slot_mode(rm, ld, k) == GT_SAVE_DEVICE && !gt__packed(m, l, k) ? GT_MEM_SAVED
                                                                                                        : GT_MEM_TEMP;
      if (!(a[k] = gt_mem_alloc_uninit_named(m->mem, cat, gt__bytes(m, b, l, k), gt_act_name((gt_act)k)))) goto nomem;
    }
    gt_mem_cat next_cat =
        train && l + 1 < L && gt_remat_carry_kept(rm, l + 1) && !m->bf16_act ? GT_MEM_SAVED : GT_MEM_TEMP;
    float *xn = gt_mem_alloc_uninit_named(m->mem, next_cat, xbytes, l + 1 < L ? "layer input (carry)" : "final hidden state");
    if (!xn) goto nomem;
    xn_own = xn; /* the run's records do not hold it yet */
    /* slots kept in bf16 whose producer packs them itself (in cache) get
     * their 2-byte buffers now; the rest are packed after the layer */
    for (int k = 0; train && k < GT_A_NSLOTS; k++)
      if (a[k] && gt__packed(m, l, k) && gt_remat_slot_mode(rm, ld, k) == GT_SAVE_DEVICE &&
          gt_layer_writes_b16(ld, (gt_act)k) && !gt__alloc_kept16(r, l, k))
        goto nomem;
    io.b16 = r->ls[l].b16;
    float lb = 0.0f;
    io.moe_lb = &lb;
    gt_layer_forward(&io, a, xn);
    if (r->fail) goto nomem;
    r->lb_sum += lb;
    for (int k = 0; k < GT_A_NSLOTS; k++) {
      if (!a[k]) continue;
      gt_save_mode mode = gt_remat_slot_mode(rm, ld, k);
      int packed = gt__packed(m, l, k);
      if (train && mode == GT_SAVE_DEVICE && !packed) continue;
      if (!train && gt__shared_kv(ld, k)) continue; /* read by later layers; freed with the run */
      int64_t n = gt_act_numel(m, ld, (gt_act)k, b->B, b->T);
      if (train && mode == GT_SAVE_DEVICE && !r->ls[l].b16[k]) { /* kept in bf16, not packed by the layer */
        if (!gt__alloc_kept16(r, l, k)) goto nomem;
        if (!meas) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_bf16_pack(r->ls[l].b16[k], a[k], n));
      }
      if (train && mode == GT_SAVE_OFFLOAD) {
        if (!(r->ls[l].host[k] = gt_mem_alloc_uninit_named(m->mem, GT_MEM_HOST, gt__kept_bytes(m, b, l, k),
                                                           gt_act_name((gt_act)k))))
          goto nomem;
        gt__copy_timed(m, r->ls[l].host[k], a[k], n, packed, 1);
      }
      gt_mem_free(m->mem, a[k]);
      a[k] = NULL;
    }
    x = xn;
    xn_own = NULL;
    if (l == be - 1)
      for (int64_t u = bs; u < be; u++) gt__release(m, 1 + u, 0);
  }
  *x_out = x;
  return GT_OK;
nomem:
  gt_mem_free(m->mem, xn_own);
  gt__free_run(r);
  return gt_err_set(err, GT_ERR_NOMEM, "executor: out of memory in the forward pass");
}

/* Bring layer l's dropped slots back: copy offloaded ones from the host pool
 * and re-run the ops whose outputs are missing. x_in is the layer's input when
 * it was not kept (block scope); want_out asks for the layer output too (it
 * is the next layer's input inside a block) and returns it in *x_out. */
static gt_rc gt__restore(gt__run *r, int64_t l, float *x_in, int want_out, float **x_out, gt_err *err) {
  gt_model *m = r->m;
  const gt_batch *b = r->b;
  gt__lstate *s = &r->ls[l];
  size_t xbytes = (size_t)((int64_t)b->B * b->T * m->d) * sizeof(float);
  if (!s->a[GT_A_X_IN] && !s->b16[GT_A_X_IN] && !s->host[GT_A_X_IN]) s->a[GT_A_X_IN] = x_in;
  const gt_layer_desc *ld = &m->layers[l];
  uint8_t have[GT_A_NSLOTS], kept[GT_A_NSLOTS];
  for (int k = 0; k < GT_A_NSLOTS; k++) {
    have[k] = s->a[k] || s->host[k] || s->b16[k] || !gt_layer_has_slot(ld, (gt_act)k);
    kept[k] = s->b16[k] != NULL;
  }
  uint32_t ops = gt_layer_recompute_ops(ld, have);
  if (want_out) ops |= gt_layer_output_op(ld);
  for (int k = 0; k < GT_A_NSLOTS; k++) {
    /* a bf16 slot the backward reads as it is stays packed */
    if (gt_layer_reads_b16(m, ld, (gt_act)k, ops, kept)) continue;
    if (s->host[k] || s->b16[k]) {
      int64_t n = gt_act_numel(m, ld, (gt_act)k, b->B, b->T);
      if (!(s->a[k] = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, gt__bytes(m, b, l, k), gt_act_name((gt_act)k))))
        goto nomem;
      if (s->host[k]) {
        gt__copy_timed(m, s->a[k], s->host[k], n, gt__packed(m, l, k), 0);
        gt_mem_free(m->mem, s->host[k]);
        s->host[k] = NULL;
      } else {
        if (!gt_mem_measuring(m->mem)) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_bf16_unpack(s->a[k], s->b16[k], n));
        gt_mem_free(m->mem, s->b16[k]);
        s->b16[k] = NULL;
      }
    }
  }
  float *xo = NULL;
  if (ops) {
    uint8_t outs[GT_A_NSLOTS];
    gt_layer_ops_outputs(ld, ops, outs);
    for (int k = 1; k < GT_A_NSLOTS; k++)
      if (outs[k] && !s->a[k] &&
          !(s->a[k] = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, gt__bytes(m, b, l, k), gt_act_name((gt_act)k))))
        goto nomem;
    if ((ops & gt_layer_output_op(ld)) &&
        !(xo = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, xbytes, "layer output (recomputed)")))
      goto nomem;
    gt_layer_io io = gt__io(r, l);
    gt_layer_forward_ops(&io, s->a, ops, xo);
    if (r->fail) {
      gt_mem_free(m->mem, xo);
      goto nomem;
    }
  }
  if (want_out)
    *x_out = xo;
  else
    gt_mem_free(m->mem, xo);
  return GT_OK;
nomem:
  return gt_err_set(err, GT_ERR_NOMEM, "executor: out of memory recomputing layer %lld", (long long)l);
}

gt_rc gt_exec_forward_backward(gt_model *m, const gt_batch *b, int n_tiles, float row_weight,
                               gt_loss_stats *st, gt_err *err) {
  int64_t L = m->n_layers, N = (int64_t)b->B * b->T, d = m->d;
  gt_rc rc = gt__check_batch(m, b, err);
  if (rc) return rc;
  gt__run r = {m, b, NULL, NULL, NULL, NULL, NULL, NULL, 0, GT_OK};
  float *x = NULL, *dx = NULL, *dprev = NULL;
  const float *hp = NULL;
  float *hg = NULL;
  int head_held = 0;
  if ((rc = gt__forward(&r, 1, &x, err))) return rc;
  st->moe_lb_sum += r.lb_sum;
  int meas = gt_mem_measuring(m->mem);
  size_t xbytes = (size_t)(N * d) * sizeof(float);
  gt_mem_phase(m->mem, "output head (logits and loss)");
  dx = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, xbytes, "residual gradient"); /* the head writes it */
  dprev = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, xbytes, "residual gradient (other)");
  if (!dx || !dprev) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for the residual gradient");
    goto done;
  }
  if ((rc = gt__acquire(m, 0, 1, &hp, &hg, err))) goto done;
  head_held = 1;
  rc = gt__head_run(m, hp, gt__projections_of(m, 0), hg, x, b->targets, N, n_tiles, row_weight, dx, NULL, st, err);
  gt__drop_params(m, 0); /* the embedding's gradient stays until the lookup's backward */
  gt_mem_free(m->mem, x);
  x = NULL;
  if (rc) goto done;
  if (m->ple_dim && !(r.dple = gt_mem_alloc_named(m->mem, GT_MEM_TEMP, (size_t)(N * L * m->ple_dim) * sizeof(float),
                                                   "per-layer input gradient (PLE)"))) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for the per-layer input gradient");
    goto done;
  }
  for (int64_t end = L; end > 0;) {
    int64_t start, be;
    gt__block_of(m, end - 1, &start, &be);
    /* one gather per layer serves both its recompute and its backward */
    for (int64_t l = start; l < end; l++)
      if ((rc = gt__acquire(m, 1 + l, 1, &r.lp[l], &r.lg[l], err))) {
        for (int64_t v = l + 1; v < end; v++) r.lp[v] = NULL;
        end = l; /* release what was acquired below */
        for (int64_t v = start; v < l; v++) gt__release(m, 1 + v, 0);
        goto done;
      }
    /* recompute the boundary's layers in forward order */
    float *carry = NULL;
    for (int64_t l = start; l < end; l++) {
      float *next = NULL;
      gt_mem_phase(m->mem, "backward, recomputing layer %lld", (long long)l);
      int next_kept = r.ls[l + 1 < end ? l + 1 : l].a[GT_A_X_IN] || r.ls[l + 1 < end ? l + 1 : l].b16[GT_A_X_IN];
      if ((rc = gt__restore(&r, l, carry, l + 1 < end && !next_kept, &next, err))) {
        for (int64_t v = start; v < end; v++) gt__release(m, 1 + v, 0);
        goto done;
      }
      carry = next;
    }
    for (int64_t l = end - 1; l >= start; l--) {
      const gt_layer_desc *ld = &m->layers[l];
      gt_mem_phase(m->mem, "backward, layer %lld", (long long)l);
      /* the last reader of a donor's K/V (the first in backward order)
       * opens the accumulators of their gradients; the donor closes them */
      if (ld->kv_donor >= 0 && !r.dkv[2 * ld->kv_donor]) {
        size_t kb = gt__bytes(m, b, ld->kv_donor, GT_A_K);
        if (!(r.dkv[2 * ld->kv_donor] = gt_mem_alloc_named(m->mem, GT_MEM_TEMP, kb, "shared K gradient")) ||
            !(r.dkv[2 * ld->kv_donor + 1] = gt_mem_alloc_named(m->mem, GT_MEM_TEMP, kb, "shared V gradient"))) {
          for (int64_t v = start; v <= l; v++) gt__release(m, 1 + v, 0);
          rc = gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for layer %d's shared K/V gradients", ld->kv_donor);
          goto done;
        }
      }
      gt_layer_io io = gt__io(&r, l);
      io.b16 = r.ls[l].b16; /* what gt__restore left packed */
      /* gt_layer_backward writes d(x_in) whole: dprev needs no zeroing */
      if ((rc = gt_layer_backward(&io, r.ls[l].a, dx, dprev, r.lg[l], err))) {
        for (int64_t v = start; v <= l; v++) gt__release(m, 1 + v, 0);
        goto done;
      }
      if (ld->kv_last_reader >= 0) {
        gt_mem_free(m->mem, r.dkv[2 * l]);
        gt_mem_free(m->mem, r.dkv[2 * l + 1]);
        r.dkv[2 * l] = r.dkv[2 * l + 1] = NULL;
      }
      if (l == 0 && m->ple_dim) {
        /* every layer has added its share of d(ple): back into the PLE
         * parameters and into d(x0), with the head's weights once more */
        const float *hp2;
        float *hg2;
        gt_mem_phase(m->mem, "backward, per-layer embeddings");
        if (!(rc = gt__acquire(m, 0, 1, &hp2, &hg2, err)))
          rc = gt__ple_backward(m, hp2, hg2, r.ls[0].a[GT_A_X_IN], b->inputs, N, r.dple, dprev, err);
        gt__drop_params(m, 0);
        gt_mem_free(m->mem, r.dple);
        gt_mem_free(m->mem, r.ple);
        r.dple = r.ple = NULL;
        if (rc) {
          gt__release(m, 1, 0);
          goto done;
        }
      }
      gt__free_layer(&r, l);
      gt__release(m, 1 + l, 1); /* its gradient leaves as soon as its backward is done */
      float *t = dx;
      dx = dprev;
      dprev = t;
    }
    end = start;
  }
  /* a frozen embedding has no gradient: the lookup's backward is skipped */
  float *gE = gt_model_head_grad(m, hg, m->embed_offset);
  if (!meas && gE) GT_PROF(m->prof, GT_PROF_ELEMWISE, gt_embedding_backward(gE, dx, b->inputs, N, (int)d, m->emb_scale));
done:
  /* after a failure nothing is reduced (phase 0): a reduction is a
   * collective, and on a mesh the peers that did not fail are elsewhere;
   * the unreduced gradients are the view's to free (fsdp's abandon) */
  if (head_held) gt__release(m, 0, rc ? 0 : 1);
  gt_mem_free(m->mem, x);
  gt_mem_free(m->mem, dx);
  gt_mem_free(m->mem, dprev);
  gt__free_run(&r);
  return rc;
}

gt_rc gt_exec_forward_loss(gt_model *m, const gt_batch *b, int n_tiles, gt_loss_stats *st, gt_err *err) {
  gt_rc rc = gt__check_batch(m, b, err);
  if (rc) return rc;
  gt__run r = {m, b, NULL, NULL, NULL, NULL, NULL, NULL, 0, GT_OK};
  float *x = NULL;
  if ((rc = gt__forward(&r, 0, &x, err))) return rc;
  st->moe_lb_sum += r.lb_sum;
  const float *hp;
  gt_mem_phase(m->mem, "output head (logits and loss)");
  if ((rc = gt__acquire(m, 0, 0, &hp, NULL, err)) == GT_OK) {
    rc = gt__head_run(m, hp, gt__projections_of(m, 0), NULL, x, b->targets, (int64_t)b->B * b->T, n_tiles, 0.0f, NULL,
                      NULL, st, err);
    gt__release(m, 0, 0);
  }
  gt_mem_free(m->mem, x);
  gt__free_run(&r);
  return rc;
}

gt_rc gt_exec_forward_logits(gt_model *m, const gt_batch *b, float *logits, gt_err *err) {
  gt_rc rc = gt__check_batch(m, b, err);
  if (rc) return rc;
  gt__run r = {m, b, NULL, NULL, NULL, NULL, NULL, NULL, 0, GT_OK};
  float *x = NULL;
  if ((rc = gt__forward(&r, 0, &x, err))) return rc;
  gt_loss_stats st = {0};
  const float *hp;
  if ((rc = gt__acquire(m, 0, 0, &hp, NULL, err)) == GT_OK) {
    rc = gt__head_run(m, hp, gt__projections_of(m, 0), NULL, x, b->targets, (int64_t)b->B * b->T, 1, 0.0f, NULL,
                      logits, &st, err);
    gt__release(m, 0, 0);
  }
  gt_mem_free(m->mem, x);
  gt__free_run(&r);
  return rc;
}
