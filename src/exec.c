/* The layer-scan executor. Forward walks the layer list; after each layer it
 * keeps what the remat policy names (plus the carry at each remat boundary)
 * and frees the rest. Backward walks the boundaries in reverse: it re-runs the
 * ops whose outputs were dropped, runs the layer backward, and frees the
 * layer's buffers before moving on. With remat_scope=block a boundary holds a
 * whole layer_pattern block, so its backward recomputes (and holds) the whole
 * block at once, as MaxText did before per-layer boundaries.
 *
 * Every layer goes through the same gt_layer_* functions with its own
 * descriptor: the executor never asks what model it runs. */
#include "gemtrain/exec.h"

#include <stdlib.h>
#include <string.h>

#include "gemtrain/kernels.h"
#include "gemtrain/layer.h"
#include "gemtrain/prof.h"
#include "gemtrain/remat.h"
#include "head.h"

int64_t gt_batch_total_weights(const gt_batch *b) {
  int64_t n = 0, N = (int64_t)b->B * b->T;
  for (int64_t i = 0; i < N; i++) n += b->targets[i] >= 0;
  return n;
}

typedef struct gt__lstate {
  float *a[GT_A_NSLOTS];    /* device buffers (NULL when dropped) */
  float *host[GT_A_NSLOTS]; /* offloaded copies */
} gt__lstate;

typedef struct gt__run {
  gt_model *m;
  const gt_batch *b;
  gt__lstate *ls; /* [L] */
} gt__run;

static size_t gt__bytes(const gt_model *m, const gt_batch *b, int64_t l, int k) {
  return (size_t)gt_act_numel(m, &m->layers[l], (gt_act)k, b->B, b->T) * sizeof(float);
}

static void gt__free_layer(gt__run *r, int64_t l) {
  for (int k = 0; k < GT_A_NSLOTS; k++) {
    gt_mem_free(r->m->mem, r->ls[l].a[k]);
    gt_mem_free(r->m->mem, r->ls[l].host[k]);
    r->ls[l].a[k] = r->ls[l].host[k] = NULL;
  }
}

static void gt__free_run(gt__run *r) {
  if (r->ls)
    for (int64_t l = 0; l < r->m->n_layers; l++) gt__free_layer(r, l);
  free(r->ls);
  r->ls = NULL;
}

static gt_layer_io gt__io(gt_model *m, const gt_batch *b, int64_t l) {
  gt_layer_io io = {m, &m->layers[l], b->B, b->T, b->positions, b->segments, m->params};
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

static void gt__copy_timed(gt_model *m, float *dst, const float *src, size_t bytes) {
  double t0 = gt_prof_now();
  memcpy(dst, src, bytes);
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
  r->ls = calloc((size_t)L, sizeof *r->ls);
  if (!r->ls) return gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for %lld layer records", (long long)L);
  gt_mem_cat carry_cat = train && gt_remat_block_start(rm, 0) ? GT_MEM_SAVED : GT_MEM_TEMP;
  float *x = gt_mem_alloc_uninit(m->mem, carry_cat, xbytes);
  if (!x) goto nomem;
  GT_PROF(m->prof, GT_PROF_ELEMWISE,
          gt_embedding_forward(x, b->inputs, m->params + m->embed_offset, N, (int)d, m->emb_scale));
  for (int64_t l = 0; l < L; l++) {
    gt_layer_io io = gt__io(m, b, l);
    float **a = r->ls[l].a;
    a[GT_A_X_IN] = x;
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      gt_mem_cat cat = train && rm->slot[k] == GT_SAVE_DEVICE ? GT_MEM_SAVED : GT_MEM_TEMP;
      if (!(a[k] = gt_mem_alloc_uninit(m->mem, cat, gt__bytes(m, b, l, k)))) goto nomem;
    }
    gt_mem_cat next_cat = train && l + 1 < L && gt_remat_block_start(rm, l + 1) ? GT_MEM_SAVED : GT_MEM_TEMP;
    float *xn = gt_mem_alloc_uninit(m->mem, next_cat, xbytes);
    if (!xn) goto nomem;
    gt_layer_forward(&io, a, xn);
    for (int k = 0; k < GT_A_NSLOTS; k++) {
      gt_save_mode mode = k == GT_A_X_IN ? (gt_remat_block_start(rm, l) || rm->none ? GT_SAVE_DEVICE : GT_SAVE_REMAT)
                                         : rm->slot[k];
      if (train && mode == GT_SAVE_DEVICE) continue;
      if (train && mode == GT_SAVE_OFFLOAD) {
        size_t nb = gt__bytes(m, b, l, k);
        if (!(r->ls[l].host[k] = gt_mem_alloc_uninit(m->mem, GT_MEM_HOST, nb))) goto nomem;
        gt__copy_timed(m, r->ls[l].host[k], a[k], nb);
      }
      gt_mem_free(m->mem, a[k]);
      a[k] = NULL;
    }
    x = xn;
  }
  *x_out = x;
  return GT_OK;
nomem:
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
  if (!s->a[GT_A_X_IN]) s->a[GT_A_X_IN] = x_in;
  uint8_t have[GT_A_NSLOTS];
  for (int k = 0; k < GT_A_NSLOTS; k++) {
    if (s->host[k]) {
      size_t nb = gt__bytes(m, b, l, k);
      if (!(s->a[k] = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, nb))) goto nomem;
      gt__copy_timed(m, s->a[k], s->host[k], nb);
      gt_mem_free(m->mem, s->host[k]);
      s->host[k] = NULL;
    }
    have[k] = s->a[k] != NULL;
  }
  uint32_t ops = gt_layer_recompute_ops(have);
  if (want_out) ops |= gt_layer_output_op();
  float *xo = NULL;
  if (ops) {
    uint8_t outs[GT_A_NSLOTS];
    gt_layer_ops_outputs(ops, outs);
    for (int k = 1; k < GT_A_NSLOTS; k++)
      if (outs[k] && !s->a[k] && !(s->a[k] = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, gt__bytes(m, b, l, k))))
        goto nomem;
    if ((ops & gt_layer_output_op()) && !(xo = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, xbytes))) goto nomem;
    gt_layer_io io = gt__io(m, b, l);
    gt_layer_forward_ops(&io, s->a, ops, xo);
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
  gt__run r = {m, b, NULL};
  float *x = NULL, *dx = NULL, *dprev = NULL;
  if ((rc = gt__forward(&r, 1, &x, err))) return rc;
  size_t xbytes = (size_t)(N * d) * sizeof(float);
  dx = gt_mem_alloc(m->mem, GT_MEM_TEMP, xbytes);
  dprev = gt_mem_alloc_uninit(m->mem, GT_MEM_TEMP, xbytes);
  if (!dx || !dprev) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for the residual gradient");
    goto done;
  }
  rc = gt__head_run(m, x, b->targets, N, n_tiles, row_weight, dx, NULL, st, err);
  gt_mem_free(m->mem, x);
  x = NULL;
  if (rc) goto done;
  int period = m->remat.block_scope ? m->remat.period : 1;
  for (int64_t end = L; end > 0;) {
    int64_t start = ((end - 1) / period) * period;
    /* recompute the boundary's layers in forward order */
    float *carry = NULL;
    for (int64_t l = start; l < end; l++) {
      float *next = NULL;
      if ((rc = gt__restore(&r, l, carry, l + 1 < end && !r.ls[l + 1].a[GT_A_X_IN], &next, err))) goto done;
      carry = next;
    }
    for (int64_t l = end - 1; l >= start; l--) {
      gt_layer_io io = gt__io(m, b, l);
      memset(dprev, 0, xbytes);
      if ((rc = gt_layer_backward(&io, r.ls[l].a, dx, dprev, m->grads, err))) goto done;
      gt__free_layer(&r, l);
      float *t = dx;
      dx = dprev;
      dprev = t;
    }
    end = start;
  }
  GT_PROF(m->prof, GT_PROF_ELEMWISE,
          gt_embedding_backward(m->grads + m->embed_offset, dx, b->inputs, N, (int)d, m->emb_scale));
done:
  gt_mem_free(m->mem, x);
  gt_mem_free(m->mem, dx);
  gt_mem_free(m->mem, dprev);
  gt__free_run(&r);
  return rc;
}

gt_rc gt_exec_forward_loss(gt_model *m, const gt_batch *b, int n_tiles, gt_loss_stats *st, gt_err *err) {
  gt_rc rc = gt__check_batch(m, b, err);
  if (rc) return rc;
  gt__run r = {m, b, NULL};
  float *x = NULL;
  if ((rc = gt__forward(&r, 0, &x, err))) return rc;
  rc = gt__head_run(m, x, b->targets, (int64_t)b->B * b->T, n_tiles, 0.0f, NULL, NULL, st, err);
  gt_mem_free(m->mem, x);
  gt__free_run(&r);
  return rc;
}

gt_rc gt_exec_forward_logits(gt_model *m, const gt_batch *b, float *logits, gt_err *err) {
  gt_rc rc = gt__check_batch(m, b, err);
  if (rc) return rc;
  gt__run r = {m, b, NULL};
  float *x = NULL;
  if ((rc = gt__forward(&r, 0, &x, err))) return rc;
  gt_loss_stats st = {0, 0};
  rc = gt__head_run(m, x, b->targets, (int64_t)b->B * b->T, 1, 0.0f, NULL, logits, &st, err);
  gt_mem_free(m->mem, x);
  gt__free_run(&r);
  return rc;
}
