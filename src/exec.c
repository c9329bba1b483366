/* The layer-scan executor. Forward walks the layer list keeping each layer's
 * carry (its input) and activation slots; backward walks it in reverse. Every
 * layer goes through the same gt_layer_forward/backward with its own
 * descriptor: the executor never asks what model it runs. */
#include "gemtrain/exec.h"

#include <stdlib.h>
#include <string.h>

#include "gemtrain/kernels.h"
#include "gemtrain/layer.h"
#include "head.h"

int64_t gt_batch_total_weights(const gt_batch *b) {
  int64_t n = 0, N = (int64_t)b->B * b->T;
  for (int64_t i = 0; i < N; i++) n += b->targets[i] >= 0;
  return n;
}

typedef struct gt__fwd_state {
  float **carry;                 /* [L+1] residual stream at each layer boundary */
  float *(*acts)[GT_A_NSLOTS];   /* [L] activation slots (carry aliased into slot X_IN) */
} gt__fwd_state;

static void gt__free_state(gt_model *m, gt__fwd_state *s) {
  if (s->acts)
    for (int64_t l = 0; l < m->n_layers; l++)
      for (int a = 1; a < GT_A_NSLOTS; a++) gt_mem_free(m->mem, s->acts[l][a]);
  if (s->carry)
    for (int64_t l = 0; l <= m->n_layers; l++) gt_mem_free(m->mem, s->carry[l]);
  free(s->acts);
  free(s->carry);
  memset(s, 0, sizeof *s);
}

static gt_layer_io gt__io(gt_model *m, const gt_batch *b, int64_t l) {
  gt_layer_io io = {m, &m->layers[l], b->B, b->T, b->positions, b->segments, m->params};
  return io;
}

/* Forward over all layers. keep_acts = 0 frees each layer's slots as soon as
 * the next layer has its input (eval and logits need no backward). */
static gt_rc gt__forward(gt_model *m, const gt_batch *b, int keep_acts, gt__fwd_state *s, gt_err *err) {
  int64_t L = m->n_layers, N = (int64_t)b->B * b->T, d = m->d;
  memset(s, 0, sizeof *s);
  s->carry = calloc((size_t)(L + 1), sizeof *s->carry);
  s->acts = calloc((size_t)L, sizeof *s->acts);
  if (!s->carry || !s->acts) {
    gt__free_state(m, s);
    return gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for %lld layer records", (long long)L);
  }
  for (int64_t i = 0; i < N; i++)
    if (b->inputs[i] < 0 || b->inputs[i] >= m->vocab || b->positions[i] < 0 ||
        b->positions[i] >= m->max_pos) {
      gt__free_state(m, s);
      return gt_err_set(err, GT_ERR_ARG,
                        "executor: token %lld has id %d (vocab %lld) and position %d (max %lld)",
                        (long long)i, b->inputs[i], (long long)m->vocab, b->positions[i],
                        (long long)m->max_pos);
    }
  gt_mem_cat keep = keep_acts ? GT_MEM_SAVED : GT_MEM_TEMP;
  s->carry[0] = gt_mem_alloc_uninit(m->mem, keep, (size_t)(N * d) * sizeof(float));
  if (!s->carry[0]) goto nomem;
  gt_embedding_forward(s->carry[0], b->inputs, m->params + m->embed_offset, N, (int)d, m->emb_scale);
  for (int64_t l = 0; l < L; l++) {
    gt_layer_io io = gt__io(m, b, l);
    float **a = s->acts[l];
    a[GT_A_X_IN] = s->carry[l];
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      a[k] = gt_mem_alloc_uninit(m->mem, keep, (size_t)gt_act_numel(m, io.L, (gt_act)k, b->B, b->T) * sizeof(float));
      if (!a[k]) goto nomem;
    }
    s->carry[l + 1] = gt_mem_alloc_uninit(m->mem, keep, (size_t)(N * d) * sizeof(float));
    if (!s->carry[l + 1]) goto nomem;
    gt_layer_forward(&io, a, s->carry[l + 1]);
    if (!keep_acts) {
      for (int k = 1; k < GT_A_NSLOTS; k++) {
        gt_mem_free(m->mem, a[k]);
        a[k] = NULL;
      }
      gt_mem_free(m->mem, s->carry[l]);
      s->carry[l] = NULL;
    }
  }
  return GT_OK;
nomem:
  gt__free_state(m, s);
  return gt_err_set(err, GT_ERR_NOMEM, "executor: out of memory in the forward pass");
}

gt_rc gt_exec_forward_backward(gt_model *m, const gt_batch *b, int n_tiles, float row_weight,
                               gt_loss_stats *st, gt_err *err) {
  int64_t L = m->n_layers, N = (int64_t)b->B * b->T, d = m->d;
  gt__fwd_state s;
  gt_rc rc = gt__forward(m, b, 1, &s, err);
  if (rc) return rc;
  float *dx = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float));
  float *dprev = gt_mem_alloc(m->mem, GT_MEM_TEMP, (size_t)(N * d) * sizeof(float));
  if (!dx || !dprev) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "executor: no memory for the residual gradient");
    goto done;
  }
  rc = gt__head_run(m, s.carry[L], b->targets, N, n_tiles, row_weight, dx, NULL, st, err);
  if (rc) goto done;
  for (int64_t l = L - 1; l >= 0; l--) {
    gt_layer_io io = gt__io(m, b, l);
    memset(dprev, 0, (size_t)(N * d) * sizeof(float));
    rc = gt_layer_backward(&io, s.acts[l], dx, dprev, m->grads, err);
    if (rc) goto done;
    /* this layer's activations are no longer needed */
    for (int k = 1; k < GT_A_NSLOTS; k++) {
      gt_mem_free(m->mem, s.acts[l][k]);
      s.acts[l][k] = NULL;
    }
    gt_mem_free(m->mem, s.carry[l + 1]);
    s.carry[l + 1] = NULL;
    float *t = dx;
    dx = dprev;
    dprev = t;
  }
  gt_embedding_backward(m->grads + m->embed_offset, dx, b->inputs, N, (int)d, m->emb_scale);
done:
  gt_mem_free(m->mem, dx);
  gt_mem_free(m->mem, dprev);
  gt__free_state(m, &s);
  return rc;
}

gt_rc gt_exec_forward_loss(gt_model *m, const gt_batch *b, int n_tiles, gt_loss_stats *st, gt_err *err) {
  gt__fwd_state s;
  gt_rc rc = gt__forward(m, b, 0, &s, err);
  if (rc) return rc;
  rc = gt__head_run(m, s.carry[m->n_layers], b->targets, (int64_t)b->B * b->T, n_tiles, 0.0f, NULL,
                    NULL, st, err);
  gt__free_state(m, &s);
  return rc;
}

gt_rc gt_exec_forward_logits(gt_model *m, const gt_batch *b, float *logits, gt_err *err) {
  gt__fwd_state s;
  gt_rc rc = gt__forward(m, b, 0, &s, err);
  if (rc) return rc;
  gt_loss_stats st = {0, 0};
  rc = gt__head_run(m, s.carry[m->n_layers], b->targets, (int64_t)b->B * b->T, 1, 0.0f, NULL, logits,
                    &st, err);
  gt__free_state(m, &s);
  return rc;
}
