#include "model/lora.h"

#include <math.h>
#include <string.h>

#include "base/team.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/linear.h"

int gt_lora_slot_supported(gt_lparam s) { return gt_layer_slot_is_projection(s); }

float gt_lora_scale(const gt_config *c) {
  double r = (double)c->lora_rank;
  return (float)(c->lora_use_rslora ? c->lora_alpha / sqrt(r) : c->lora_alpha / r);
}

/* splitmix64's step from state z (base/common.h): the counter-based hash
 * behind the dropout mask's row keys */
static uint64_t gt__mix(uint64_t z) { return gt_splitmix64(&z); }

/* The key of one token row of one adapter's input in one micro-batch. */
static uint64_t gt__row_key(const gt_model *m, int layer, int slot, int64_t row) {
  uint64_t k = gt__mix(m->lora_seed ^ 0x4C6F5241ull);
  k = gt__mix(k ^ (uint64_t)m->lora_step);
  k = gt__mix(k ^ ((uint64_t)(uint32_t)m->lora_micro << 32 | (uint64_t)(uint32_t)layer << 8 | (uint64_t)slot));
  return gt__mix(k ^ (uint64_t)row);
}

int gt_lora_keep(const gt_model *m, int layer, int slot, int64_t row, int64_t col) {
  /* one element (the sweeps draw a row's mask with kernels/dropout.c) */
  uint8_t keep;
  gt_dropout_mask(&keep, gt__row_key(m, layer, slot, m->lora_row0 + row), col, 1,
                  gt_dropout_threshold(m->lora_dropout));
  return keep;
}

static int gt__dropping(const gt_model *m) { return m->lora_train && m->lora_dropout > 0.0f; }

/* What a dropout sweep does with each row (kernels.h's row kernels) */
enum { GT__DROP_APPLY, GT__DROP_APPLY16, GT__DROP_UNDO };

typedef struct gt__drop_args {
  const gt_model *m;
  int layer, slot, mode;
  int64_t in;
  float *y;             /* [N, in] written (apply) */
  const float *x;       /* [N, in] input (apply), or the dropped input's gradient (undo) */
  float *dx;            /* [N, in] += (undo): the masked gradient */
  const uint16_t *x16;  /* [N, in] input as bf16 patterns (apply16) */
  uint16_t *y16;        /* [N, in] written (apply16): drop(x) as bf16 patterns */
} gt__drop_args;

/* rows [n0, n1): apply: y = drop(x); apply16: y16 = bf16(drop(x16)) (the
 * bits of apply then gt__act_round); undo: dx += drop'(x), the kept
 * elements scaled by 1/(1 - p) */
static void gt__drop_part(void *arg, int64_t n0, int64_t n1) {
  const gt__drop_args *a = arg;
  const uint64_t thresh = gt_dropout_threshold(a->m->lora_dropout);
  const float inv = 1.0f / (1.0f - a->m->lora_dropout);
  for (int64_t n = n0; n < n1; n++) {
    const uint64_t key = gt__row_key(a->m, a->layer, a->slot, a->m->lora_row0 + n);
    const int64_t o = n * a->in;
    if (a->mode == GT__DROP_APPLY)
      gt_dropout_apply(a->y + o, a->x + o, key, a->in, thresh, inv);
    else if (a->mode == GT__DROP_APPLY16)
      gt_dropout_apply16(a->y16 + o, a->x16 + o, key, a->in, thresh, inv);
    else
      gt_dropout_undo(a->dx + o, a->x + o, key, a->in, thresh, inv);
  }
}

/* One sweep of a's mode over N rows, across the team when large enough */
static void gt__drop_rows(const gt__drop_args *a, int64_t N) {
  gt_team_for(N * a->in > 65536, N, gt__drop_part, (void *)a);
}

/* The adapter's input: x itself, or drop(x) in `buf` (then written). */
static const float *gt__input(const gt_layer_io *io, gt_lparam s, const float *x, float *buf, int64_t N, int64_t in) {
  if (!buf) return x;
  const gt__drop_args a = {.m = io->m, .layer = io->L->index, .slot = (int)s, .mode = GT__DROP_APPLY, .in = in,
                           .y = buf, .x = x};
  gt__drop_rows(&a, N);
  gt__act_round(io->m, buf, N * in);
  return buf;
}

/* The adapter's input as bf16 patterns (dtype=bfloat16, the products
 * reading them: gt__matmul_a16): x16 itself, or drop(x) from x16 in buf16
 * (then written). */
static const uint16_t *gt__input16(const gt_layer_io *io, gt_lparam s, const uint16_t *x16, uint16_t *buf16,
                                   int64_t N, int64_t in) {
  if (!buf16) return x16;
  const gt__drop_args a = {.m = io->m, .layer = io->L->index, .slot = (int)s, .mode = GT__DROP_APPLY16, .in = in,
                           .x16 = x16, .y16 = buf16};
  gt__drop_rows(&a, N);
  return buf16;
}

/* The adapter's input, dropped into buf (N x in floats, or NULL: no
 * dropout), as floats (*xin, from x) or, when x is NULL, as bf16 patterns
 * (*xin16, from x16, in buf's first half; products reading bf16 in place,
 * the same bits as on the widened floats); then h [N, r] = that input A^T,
 * rounded as an activation. */
static void gt__h(const gt_layer_io *io, gt_lparam s, float *h, const float *x, const uint16_t *x16, float *buf,
                  const float *A, int64_t N, int64_t in, const float **xin, const uint16_t **xin16) {
  const gt_model *m = io->m;
  const int64_t r = m->lora_rank;
  *xin = x ? gt__input(io, s, x, buf, N, in) : NULL;
  *xin16 = x ? NULL : gt__input16(io, s, x16, (uint16_t *)(void *)buf, N, in);
  if (*xin) {
    gt__gemm(m, 0, 1, N, r, in, 1.0f, *xin, in, A, in, 0.0f, h, r);
    gt__act_round(m, h, N * r);
  } else {
    gt__matmul_forward_b16(m, h, NULL, NULL, *xin16, gt__wf32(A), N, in, r);
  }
}

void gt_lora_forward(const gt_layer_io *io, gt_lparam s, const float *x, const uint16_t *x16, float *y, int64_t N,
                     int64_t in, int64_t out) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  if (L->lora_a_rel[s] < 0 || N <= 0 || m->lora_off) return;
  const int64_t r = m->lora_rank;
  const int drop = gt__dropping(m);
  /* [h | drop(x)] */
  size_t n = (size_t)(N * r + (drop ? N * in : 0));
  float *tmp = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, n * sizeof(float), "adapter (LoRA) forward");
  if (!tmp) {
    if (io->fail) *io->fail = GT_ERR_NOMEM;
    return;
  }
  if (!gt_mem_measuring(m->mem)) {
    const float *A = io->params + L->lora_a_rel[s], *B = io->params + L->lora_b_rel[s];
    float *h = tmp;
    const float *xin;
    const uint16_t *xin16;
    /* the copy where the projection hands it over */
    gt__h(io, s, h, x16 ? NULL : x, x16, drop ? h + N * r : NULL, A, N, in, &xin, &xin16);
    /* y += scale h B^T, rounded as the projection's output: with B = 0
     * (fresh adapters) y keeps its values */
    gt__gemm_rnd(m, 0, 1, N, out, r, m->lora_scale, h, r, B, r, 1.0f, y, out);
  }
  gt_mem_free(m->mem, tmp);
}

gt_rc gt_lora_backward(const gt_layer_io *io, gt_lparam s, float *grads, const float *x, const uint16_t *x16,
                       const float *dy, const uint16_t *dy16, float *dx, int64_t N, int64_t in, int64_t out,
                       gt_err *err) {
  const gt_model *m = io->m;
  const gt_layer_desc *L = io->L;
  if (L->lora_a_rel[s] < 0 || N <= 0) return GT_OK;
  const int64_t r = m->lora_rank;
  const int drop = gt__dropping(m);
  /* [h | dh | drop(x), later the dropped input's gradient] */
  size_t n = (size_t)(2 * N * r + (drop ? N * in : 0));
  float *tmp = gt_mem_alloc_uninit_named(m->mem, GT_MEM_TEMP, n * sizeof(float), "adapter (LoRA) backward");
  if (!tmp)
    return gt_err_set(err, GT_ERR_NOMEM, "layer %d backward: no memory for the adapter of slot %d", L->index, (int)s);
  if (gt_mem_measuring(m->mem)) {
    gt_mem_free(m->mem, tmp);
    return GT_OK;
  }
  if (!x && !x16) {
    gt_mem_free(m->mem, tmp);
    return gt_err_set(err, GT_ERR_INTERNAL, "layer %d backward: the adapter of slot %d has no input", L->index, (int)s);
  }
  const float *A = io->params + L->lora_a_rel[s], *B = io->params + L->lora_b_rel[s];
  float *dA = grads ? grads + L->lora_a_rel[s] : NULL, *dB = grads ? grads + L->lora_b_rel[s] : NULL;
  float *h = tmp, *dh = h + N * r, *xd = drop ? dh + N * r : NULL;
  /* x, or the copy where the layer kept its input in bf16
   * (gt_layer_reads_b16); the dropped patterns live in xd until dx's
   * product writes xd */
  const float *xin;
  const uint16_t *xin16;
  gt__h(io, s, h, x, x16, xd, A, N, in, &xin, &xin16);
  /* dB += scale dy^T h;  dh = scale dy B (dy as given: floats or patterns) */
  if (dB) gt__gemm_a16(m, 1, 0, out, r, N, m->lora_scale, dy, dy16, out, h, r, 1.0f, dB, r);
  gt__gemm_a16(m, 0, 0, N, r, out, m->lora_scale, dy, dy16, out, B, r, 0.0f, dh, r);
  /* dA += dh^T drop(x) */
  if (dA && xin)
    gt__gemm(m, 1, 0, r, in, N, 1.0f, dh, r, xin, in, 1.0f, dA, in);
  else if (dA)
    gt__matmul_dw_b16(m, dA, dh, xin16, N, in, r);
  if (dx) {
    if (!drop) {
      gt__gemm(m, 0, 0, N, in, r, 1.0f, dh, r, A, in, 1.0f, dx, in);
    } else {
      /* d(drop(x)) = dh A, then through the mask */
      gt__gemm(m, 0, 0, N, in, r, 1.0f, dh, r, A, in, 0.0f, xd, in);
      const gt__drop_args a = {.m = m, .layer = L->index, .slot = (int)s, .mode = GT__DROP_UNDO, .in = in, .x = xd,
                               .dx = dx};
      gt__drop_rows(&a, N);
    }
  }
  gt_mem_free(m->mem, tmp);
  return GT_OK;
}

void gt_lora_init_tensor(const gt_tensor_info *t, float *p, uint64_t stream) {
  if (t->lora == GT_LORA_B) {
    memset(p, 0, (size_t)t->numel * sizeof(float));
    return;
  }
  /* kaiming_uniform(a = sqrt(5)) on [r, in]: gain sqrt(2 / (1 + 5)), bound
   * gain * sqrt(3 / in) = 1 / sqrt(in) */
  double bound = 1.0 / sqrt((double)t->shape[1]);
  uint64_t st = stream;
  for (int64_t k = 0; k < t->numel; k++) {
    double u = (double)(gt_splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
    p[k] = (float)((2.0 * u - 1.0) * bound);
  }
}
