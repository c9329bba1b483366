#include "mesh/fsdp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "base/trace.h"
#include "dist/dist.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/qstore.h"

typedef struct gt__dev {
  gt_fsdp *f;
  int dev;
  gt_mem mem;
  gt_model model;     /* descriptors and RoPE tables; parameters come through the view */
  gt_param_view view;
  /* the trainable group's shard (parameters, gradients, both moments) and
   * the frozen group's (parameters only); each unit's block is
   * [trainable | frozen] (model/store.h), each part sharded on its own */
  float *pshard, *gshard, *mu, *nu, *rs_tmp;
  float *fshard;
  int64_t fshard_n;
  int64_t *foff;      /* [units] offset of the unit's frozen shard in fshard */
  int64_t *tcnt;      /* [units] trainable elements of each unit's block (a prefix) */
  int *pending_f;     /* [units] ticket of the frozen part's asynchronous gather, or -1 */
  uint16_t *mu16;     /* mu_dtype=bfloat16: the first moment's shard in bf16 (mu is then NULL) */
  float *mu_out;      /* gt_fsdp_shard_state: mu16 expanded to float32, until gt_fsdp_shard_state_done */
  gt_mem *mu_out_mem; /* the tracker mu_out came from (the caller's) */
  int64_t shard_n;    /* the trainable shard's elements */
  int64_t *shard_off; /* [units] offset of the unit's trainable shard */
  float **gathered;   /* [units] live gathered copies */
  float **ugrad;      /* [units] live full-size gradient blocks */
  int *pending;       /* [units] ticket of an asynchronous gather in flight, or -1 */
  int rank;           /* index in the fsdp group: which shard this device holds */
  int erank, drank;   /* index on the expert axis (which experts it holds) and on the data axis */
  int64_t *lcnt;      /* [units] elements of each unit's block on this device (its own experts only) */
  int64_t *lrep;      /* [units] of which the leading ones every expert rank holds alike */
  gt_expert_comm ecomm;
  gt_prof tprof;      /* the model's profile while traced, when nobody else hung one */
  double t_step;      /* when the step began on this device (its trace span) */
  gt_fsdp_norm_part *part; /* [npart] the shard's gradient-norm parts */
  int npart;
  /* preference tuning: the head's pair mode for this device's rows, the
   * reference's per-token losses of the run's batches (ref_n floats), and
   * a reference copy of the trainable shard (all parameters train) */
  gt_pref_head ph;
  float *ref_tok;
  int64_t ref_n;
  float *rshard;
  /* per run */
  gt_rc rc;
  gt_err err;
  gt_loss_stats st;
} gt__dev;

struct gt_fsdp {
  gt_config cfg;
  int N;                /* devices of this process */
  int R, NG;            /* ranks (MPI processes) and devices over all of them */
  int64_t tw;           /* per run: the global batch's tokens in the loss */
  gt_mesh *mesh;
  gt__dev *devs;
  int64_t n_units, n_params, n_trainable;
  uint64_t frozen_sum;  /* checksum of the frozen bytes (model/store.h), set with the state */
  int64_t *unit_off, *unit_cnt;
  int prefetch;
  int dp, fs, ep;       /* mesh axes: data x fsdp x expert */
  /* one device holds whole units: it computes on its shards in place (no
   * gathered copies, gradients accumulate straight into its shard), which
   * is exactly what a single unsharded model does */
  int inplace;
  /* allocation-only (gemtrain plan): every tracked buffer is allocated and
   * freed in the real order, but nothing is computed, copied or exchanged */
  int measure;
  /* dtype=bfloat16: the executor computes with bf16-rounded weights. The
   * master shards stay float32; acquire hands out a rounded copy (in place)
   * or a copy gathered in bf16 and expanded (sharded), the same bits either
   * way: rounding is per element. */
  int bf16_w;
  int full_bf16_copy; /* test seam: round every tensor into the copy (gt_fsdp_full_bf16_copy) */
  int mu_bf16;          /* mu_dtype=bfloat16: AdamW's first moment stored in bf16 */
  int export_which;     /* gt__run_export: 0 params, 1 mu, 2 nu */
  float **full_scatter; /* set_state / export: the host's full buffer */
  /* init: unit init_u's words, at full offsets from init_base */
  float *init_unit;
  int64_t init_u, init_base;
  float **export_buf;   /* [N] export: each device's gather buffer */
  /* per run arguments */
  const gt_batch *batches;
  int n_batches;
  int micro_i;             /* the micro-batch gt_fsdp_forward_backward runs */
  int64_t lora_step;       /* the trainer's step index (adapters' dropout) */
  gt_fsdp_shard_fn norm_fn, update_fn;
  void *fn_ctx;
  double sums[5 + GT_PREF_NSUMS]; /* gt_fsdp_reduce: device 0's all-reduced sums */
  float *full_out;
  int64_t step_t;
  int64_t last_comm_bytes; /* the last step's, per device (the largest) */
  int poison_next; /* test hook: device 0 puts a NaN into its next gradient */
  const float *set_mu, *set_nu; /* gt_fsdp_set_state: the host's full moments */
  gt_trace *trace;      /* the profiler timeline (NULL: off) */
  float *tok_out;       /* gt_fsdp_eval_tokens: the batches' per-token losses */
  /* preference tuning (gt_fsdp_set_pref): the pairs' callback and the reference */
  gt_pref_pairs_fn pref_fn;
  const void *pref_ctx;
  int pref_ref;         /* GT_FSDP_REF_* */
  const float *ref_full; /* gt_fsdp_set_reference: the host's full buffer */
};

static int64_t gt__rep_len(const gt__dev *d, int64_t u);

/* ---------- the view: gather on acquire, reduce-scatter on release ---------- */

/* Whether unit u's gathered pointer is a buffer of its own (else it points
 * into the device's shard: one float32 device computing in place on a unit
 * with no frozen part). */
static int gt__owns_gathered(const gt__dev *d, int64_t u) {
  /* (a unit with nothing trainable is its frozen shard, in place too: a
   * frozen base's head, embedding and PLE table, is never copied) */
  return !d->f->inplace || d->f->bf16_w || (d->tcnt[u] != d->lcnt[u] && d->tcnt[u] != 0);
}

/* The unit's trainable part [0, tcnt) and frozen part [tcnt, lcnt): this
 * device's shard of each (begin inside the part, length). */
static int64_t gt__tbeg(const gt__dev *d, int64_t u) { return gt_shard_begin(d->tcnt[u], d->f->fs, d->rank); }
static int64_t gt__tlen(const gt__dev *d, int64_t u) { return gt_shard_len(d->tcnt[u], d->f->fs, d->rank); }
static int64_t gt__fcnt(const gt__dev *d, int64_t u) { return d->lcnt[u] - d->tcnt[u]; }
static int64_t gt__fbeg(const gt__dev *d, int64_t u) { return gt_shard_begin(gt__fcnt(d, u), d->f->fs, d->rank); }
static int64_t gt__flen(const gt__dev *d, int64_t u) { return gt_shard_len(gt__fcnt(d, u), d->f->fs, d->rank); }

static gt_rc gt__alloc_gathered(gt__dev *d, int64_t u, gt_err *err) {
  d->gathered[u] = gt_mem_alloc_uninit_named(&d->mem, GT_MEM_GATHERED, (size_t)d->lcnt[u] * sizeof(float),
                                             d->f->bf16_w ? "weights (gathered, bf16-rounded)" : "weights (gathered)");
  if (!d->gathered[u])
    return gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d cannot hold unit %lld's %lld gathered weights", d->dev,
                      (long long)u, (long long)d->lcnt[u]);
  return GT_OK;
}

/* dtype=bfloat16, sharded: unit u's bf16 gather lands in the upper half of
 * its float32 buffer (2 bytes per element from byte 2 * lcnt on), and the
 * device packs its own shard straight into its range there (the gather's
 * `in` may alias out's own range), so no scratch. */
/* A unit holding a stored-quantized frozen base gathers its frozen part raw
 * (its words are no floats to pack); only the trainable part travels in
 * bf16, in the upper half of the trainable part's own range. */
static int gt__quant(const gt__dev *d, int64_t u) { return gt_qstore_unit_quantized(&d->model, u); }
static int64_t gt__bf16_n(const gt__dev *d, int64_t u) { return gt__quant(d, u) ? d->tcnt[u] : d->lcnt[u]; }
static uint16_t *gt__upper(const gt__dev *d, int64_t u) { return (uint16_t *)(void *)d->gathered[u] + gt__bf16_n(d, u); }

static const uint16_t *gt__pack_own(gt__dev *d, int64_t u, int frozen) {
  uint16_t *h = frozen ? gt__upper(d, u) + d->tcnt[u] + gt__fbeg(d, u) : gt__upper(d, u) + gt__tbeg(d, u);
  if (frozen) gt_bf16_pack(h, d->fshard + d->foff[u], gt__flen(d, u));
  else gt_bf16_pack(h, d->pshard + d->shard_off[u], gt__tlen(d, u));
  return h;
}

/* Expands the n bf16 values in the upper half of buf (bytes [2n, 4n)) to
 * float32 over the whole of buf, front to back. Float i (bytes [4i, 4i+4))
 * overwrites only bf16 values of index below i, so a chunk [a, b) is safe
 * to expand with every thread at once when its floats end where the
 * unread bf16 values begin: 4b <= 2n + 2a, i.e. b = (n + a) / 2. The chunks
 * halve; the last few thousand go through a copy on the stack. */
#define GT__UNPACK_TAIL 2048
static void gt__unpack_upper(float *buf, int64_t n) {
  const uint16_t *h = (const uint16_t *)(const void *)buf + n;
  int64_t a = 0;
  while (n - a > GT__UNPACK_TAIL) {
    int64_t b = (n + a) / 2;
    gt_bf16_unpack(buf + a, h + a, b - a);
    a = b;
  }
  uint16_t tail[GT__UNPACK_TAIL];
  memcpy(tail, h + a, (size_t)(n - a) * sizeof(uint16_t));
  gt_bf16_unpack(buf + a, tail, n - a);
}

/* dtype=bfloat16, sharded: expands what arrived in bf16; a raw frozen part
 * (quantized base) has its float32 tensors (norms) rounded in place. */
static void gt__finish_bf16(gt__dev *d, int64_t u) {
  gt__unpack_upper(d->gathered[u], gt__bf16_n(d, u));
  if (gt__quant(d, u)) gt_qstore_round_block(&d->model, u, d->gathered[u], d->tcnt[u], d->lcnt[u] - d->tcnt[u]);
}

/* dtype=bfloat16 on one device: does unit u's rounded copy leave its
 * projections out (gt_model_tensor_is_projection), the products reading
 * them from the master shard? They round their operands as they pack them
 * (gt_bgemm), so the bits are those of the full copy, and each step skips
 * copying every projection twice (forward, backward). Only for a unit
 * wholly here and trainable in float32 (no frozen or quantized part: the
 * unit is one block) and bf16 products (matmul_precision=default; float32
 * products read the copy); the head only without PLE. */
static int gt__direct_projections(const gt__dev *d, int64_t u) {
  const gt_fsdp *f = d->f;
  int64_t off, cnt;
  if (!f->inplace || !f->bf16_w || !d->model.bf16_mm || f->full_bf16_copy || !gt_model_unit_has_projections(&d->model, u))
    return 0;
  gt_model_unit(&d->model, u, &off, &cnt);
  return d->tcnt[u] == d->lcnt[u] && d->lcnt[u] == cnt && !gt__quant(d, u);
}

static const float *gt__projections(void *ctx, int64_t u) {
  gt__dev *d = ctx;
  return gt__direct_projections(d, u) ? d->pshard + d->shard_off[u] : NULL;
}

/* Waits for unit u's prefetched gathers (both parts), if any. 1 if there were. */
static int gt__wait_pending(gt__dev *d, int64_t u) {
  int had = 0;
  if (d->pending[u] >= 0) gt_mesh_wait(d->f->mesh, d->dev, d->pending[u]), had = 1;
  if (d->pending_f[u] >= 0) gt_mesh_wait(d->f->mesh, d->dev, d->pending_f[u]), had = 1;
  d->pending[u] = d->pending_f[u] = -1;
  return had;
}

/* The unit as the executor reads it: its trainable part, then its frozen
 * part, each all-gathered from its own shards. */
static gt_rc gt__gather(gt__dev *d, int64_t u, gt_err *err) {
  gt_fsdp *f = d->f;
  if (!gt__owns_gathered(d, u)) {
    d->gathered[u] = d->tcnt[u] ? d->pshard + d->shard_off[u] : d->fshard + d->foff[u];
    return GT_OK;
  }
  if (gt__wait_pending(d, u) && f->bf16_w) gt__finish_bf16(d, u);
  if (d->gathered[u]) return GT_OK;
  gt_rc rc = gt__alloc_gathered(d, u, err);
  if (rc || f->measure) return rc;
  int64_t t = d->tcnt[u], fz = gt__fcnt(d, u);
  if (gt__direct_projections(d, u)) {
    gt_model_round_unit_but_projections(&d->model, u, d->gathered[u], d->pshard + d->shard_off[u], t);
  } else if (f->inplace && f->bf16_w && !gt__quant(d, u)) { /* one pass: copy and round */
    gt_bf16_round_copy(d->gathered[u], d->pshard + d->shard_off[u], t);
    if (fz) gt_bf16_round_copy(d->gathered[u] + t, d->fshard + d->foff[u], fz);
  } else if (f->inplace) { /* one device: a copy of the unit (bf16: rounded; the master shards stay float32) */
    memcpy(d->gathered[u], d->pshard + d->shard_off[u], (size_t)t * sizeof(float));
    if (fz) memcpy(d->gathered[u] + t, d->fshard + d->foff[u], (size_t)fz * sizeof(float));
    if (f->bf16_w) gt_qstore_round_block(&d->model, u, d->gathered[u], 0, d->lcnt[u]);
  } else if (f->bf16_w) {
    if (t) gt_all_gather_bf16_g(f->mesh, d->dev, GT_GROUP_FSDP, gt__pack_own(d, u, 0), gt__upper(d, u), t);
    if (fz && gt__quant(d, u))
      gt_all_gather_g(f->mesh, d->dev, GT_GROUP_FSDP, d->fshard + d->foff[u], d->gathered[u] + t, fz);
    else if (fz)
      gt_all_gather_bf16_g(f->mesh, d->dev, GT_GROUP_FSDP, gt__pack_own(d, u, 1), gt__upper(d, u) + t, fz);
    gt__finish_bf16(d, u);
  } else {
    if (t) gt_all_gather_g(f->mesh, d->dev, GT_GROUP_FSDP, d->pshard + d->shard_off[u], d->gathered[u], t);
    if (fz) gt_all_gather_g(f->mesh, d->dev, GT_GROUP_FSDP, d->fshard + d->foff[u], d->gathered[u] + t, fz);
  }
  return GT_OK;
}

/* Starts the next unit's gather on the communication threads, so it runs
 * while this device computes the current unit (bf16: packed here, expanded
 * by gt__gather after the wait). */
static gt_rc gt__prefetch(gt__dev *d, int64_t u, gt_err *err) {
  gt_fsdp *f = d->f;
  if (f->inplace || d->gathered[u] || d->pending[u] >= 0 || d->pending_f[u] >= 0) return GT_OK;
  gt_rc rc = gt__alloc_gathered(d, u, err);
  if (rc || f->measure) return rc; /* measure: allocated as the real prefetch would, nothing to move */
  int64_t t = d->tcnt[u], fz = gt__fcnt(d, u);
  if (f->bf16_w) {
    if (t)
      d->pending[u] = gt_all_gather_bf16_async(f->mesh, d->dev, GT_GROUP_FSDP, gt__pack_own(d, u, 0), gt__upper(d, u), t);
    if (fz && gt__quant(d, u))
      d->pending_f[u] = gt_all_gather_async(f->mesh, d->dev, GT_GROUP_FSDP, d->fshard + d->foff[u], d->gathered[u] + t,
                                            fz);
    else if (fz)
      d->pending_f[u] = gt_all_gather_bf16_async(f->mesh, d->dev, GT_GROUP_FSDP, gt__pack_own(d, u, 1),
                                                 gt__upper(d, u) + t, fz);
  } else {
    if (t)
      d->pending[u] = gt_all_gather_async(f->mesh, d->dev, GT_GROUP_FSDP, d->pshard + d->shard_off[u], d->gathered[u], t);
    if (fz)
      d->pending_f[u] = gt_all_gather_async(f->mesh, d->dev, GT_GROUP_FSDP, d->fshard + d->foff[u], d->gathered[u] + t,
                                            fz);
  }
  return GT_OK;
}

static gt_rc gt__acquire(void *ctx, int64_t u, int phase, const float **p, float **g, gt_err *err) {
  gt__dev *d = ctx;
  gt_fsdp *f = d->f;
  gt_rc rc = gt__gather(d, u, err);
  if (rc) return rc;
  /* prefetch: issue the next unit's gather now, so the next layer finds its
   * weights ready (forward walks up, backward down) */
  if (f->prefetch) {
    int64_t next = phase == 0 ? u + 1 : u - 1;
    if (next >= 1 && next < f->n_units && (rc = gt__prefetch(d, next, err))) return rc;
  }
  *p = d->gathered[u];
  /* the gradient block covers the unit's trainable part only (none: NULL,
   * and the executor computes no weight gradient for the unit) */
  if (phase == 1 && g && d->tcnt[u] == 0) {
    *g = NULL;
  } else if (phase == 1 && g && f->inplace) {
    *g = d->gshard + d->shard_off[u];
  } else if (phase == 1 && g) {
    if (!d->ugrad[u]) {
      d->ugrad[u] = gt_mem_alloc_named(&d->mem, GT_MEM_GRADS, (size_t)d->tcnt[u] * sizeof(float), "gradient (unsharded)");
      if (!d->ugrad[u])
        return gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d has no memory for unit %lld's gradient", d->dev,
                          (long long)u);
    }
    *g = d->ugrad[u];
  }
  return GT_OK;
}

static void gt__drop(void *ctx, int64_t u) {
  gt__dev *d = ctx;
  gt__wait_pending(d, u); /* never free a buffer a gather still writes */
  if (gt__owns_gathered(d, u)) gt_mem_free(&d->mem, d->gathered[u]);
  d->gathered[u] = NULL;
}

static void gt__release(void *ctx, int64_t u, int phase) {
  gt__dev *d = ctx;
  gt_fsdp *f = d->f;
  gt__drop(ctx, u);
  if (phase == 1 && d->ugrad[u] && f->measure) {
    gt_mem_free(&d->mem, d->ugrad[u]);
    d->ugrad[u] = NULL;
  } else if (phase == 1 && d->ugrad[u]) {
    int64_t n = gt__tlen(d, u);
    gt_reduce_scatter_g(f->mesh, d->dev, GT_GROUP_FSDP, d->ugrad[u], d->rs_tmp, d->tcnt[u]);
    /* replicas of this shard (the data axis) sum their gradients */
    if (f->dp > 1) gt_all_reduce_g(f->mesh, d->dev, GT_GROUP_DATA, d->rs_tmp, n);
    /* so do the expert ranks for everything but their own experts: their
     * tokens differ (like data replicas), and the routed block's partial
     * gradients of the replicated tensors complete in this sum (moe.h) */
    if (f->ep > 1) {
      int64_t nr = gt__rep_len(d, u);
      if (nr > 0) gt_all_reduce_g(f->mesh, d->dev, GT_GROUP_EXPERT, d->rs_tmp, nr);
    }
    float *gs = d->gshard + d->shard_off[u];
    for (int64_t i = 0; i < n; i++) gs[i] += d->rs_tmp[i];
    gt_mem_free(&d->mem, d->ugrad[u]);
    d->ugrad[u] = NULL;
  }
}

/* After a failed pass: every gathered copy and unit gradient of the device
 * goes, unreduced (a prefetch still in flight is waited for first), so the
 * next pass starts from the shards and never reads a stale copy. */
static void gt__abandon(gt__dev *d) {
  for (int64_t u = 0; u < d->f->n_units; u++) {
    gt__drop(d, u);
    if (!d->f->inplace) gt_mem_free(&d->mem, d->ugrad[u]);
    d->ugrad[u] = NULL;
  }
}

/* ---------- expert parallelism ---------- */

/* The leading elements of the device's shard of unit u that every expert
 * rank holds alike (all but its own experts). */
static int64_t gt__rep_len(const gt__dev *d, int64_t u) {
  /* of the trainable shard: when a unit has a frozen part its experts are
   * frozen, so every trainable element is replicated */
  int64_t b = gt__tbeg(d, u), n = gt__tlen(d, u);
  int64_t r = (d->lrep[u] < d->tcnt[u] ? d->lrep[u] : d->tcnt[u]) - b;
  return r < 0 ? 0 : r > n ? n : r;
}

static void gt__ep_all_gather(void *ctx, const float *own, float *all, int64_t n) {
  gt__dev *d = ctx;
  gt_all_gather_g(d->f->mesh, d->dev, GT_GROUP_EXPERT, own, all, n);
}

static void gt__ep_all_reduce(void *ctx, float *buf, int64_t n) {
  gt__dev *d = ctx;
  gt_all_reduce_g(d->f->mesh, d->dev, GT_GROUP_EXPERT, buf, n);
}

static void gt__ep_reduce_scatter(void *ctx, const float *all, float *own, int64_t n) {
  gt__dev *d = ctx;
  gt_reduce_scatter_g(d->f->mesh, d->dev, GT_GROUP_EXPERT, all, own, n);
}

/* Local elements [b, b+n) of unit u's block on device d, to or from the
 * full layout `full` (to_full 0: full -> dst; 1: src -> full). */
static void gt__local_copy(const gt__dev *d, int64_t u, float *local, float *full, int64_t b, int64_t n, int to_full);

/* The same from `full` into a bf16 local block, rounded (gt_bf16_pack). */
static void gt__local_pack(const gt__dev *d, int64_t u, uint16_t *local, const float *full, int64_t b, int64_t n) {
  int64_t fo[3], lo[3], ln[3];
  int np = gt_model_unit_pieces(&d->model, u, fo, lo, ln);
  for (int i = 0; i < np; i++) {
    int64_t s0 = b > lo[i] ? b : lo[i], s1 = b + n < lo[i] + ln[i] ? b + n : lo[i] + ln[i];
    if (s1 > s0) gt_bf16_pack(local + (s0 - b), full + fo[i] + (s0 - lo[i]), s1 - s0);
  }
}

/* gt__local_copy over a buffer that holds the model's words from full
 * offset `base` on (the initialisation's one unit: base is its offset). */
static void gt__local_copy_at(const gt__dev *d, int64_t u, float *local, float *full, int64_t base, int64_t b,
                              int64_t n, int to_full) {
  int64_t fo[3], lo[3], ln[3];
  int np = gt_model_unit_pieces(&d->model, u, fo, lo, ln);
  for (int i = 0; i < np; i++) {
    int64_t s0 = b > lo[i] ? b : lo[i], s1 = b + n < lo[i] + ln[i] ? b + n : lo[i] + ln[i];
    if (s1 <= s0) continue;
    float *l = local + (s0 - b), *g = full + (fo[i] - base) + (s0 - lo[i]);
    if (to_full)
      memcpy(g, l, (size_t)(s1 - s0) * sizeof(float));
    else
      memcpy(l, g, (size_t)(s1 - s0) * sizeof(float));
  }
}

static void gt__local_copy(const gt__dev *d, int64_t u, float *local, float *full, int64_t b, int64_t n, int to_full) {
  gt__local_copy_at(d, u, local, full, 0, b, n, to_full);
}

/* ---------- setup ---------- */

static void gt__scatter_init(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  /* no copy gathered before the new state may outlive it */
  gt__abandon(d);
  /* each device copies its own shard of each unit (of its own experts'
   * block) out of the host's full initial buffer (the host is not a device) */
  for (int64_t u = 0; u < f->n_units; u++) {
    int64_t b = gt__tbeg(d, u), n = gt__tlen(d, u);
    gt__local_copy(d, u, d->pshard + d->shard_off[u], *f->full_scatter, b, n, 0);
    if (gt__flen(d, u) > 0)
      gt__local_copy(d, u, d->fshard + d->foff[u], *f->full_scatter, d->tcnt[u] + gt__fbeg(d, u), gt__flen(d, u), 0);
    if (f->set_mu && d->mu16) gt__local_pack(d, u, d->mu16 + d->shard_off[u], f->set_mu, b, n);
    else if (f->set_mu) gt__local_copy(d, u, d->mu + d->shard_off[u], (float *)f->set_mu, b, n, 0);
    if (f->set_nu) gt__local_copy(d, u, d->nu + d->shard_off[u], (float *)f->set_nu, b, n, 0);
  }
}

/* Device dev's part of unit f->init_u, from the host's copy of that unit
 * alone (the initialisation works a unit at a time: no full copy). */
static void gt__scatter_unit(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  const int64_t u = f->init_u;
  if (u == 0) gt__abandon(d); /* no copy gathered before the new state may outlive it */
  /* the trainable words [0, tcnt) go to the trainable shard, the frozen
   * ones after them to the frozen shard: each device its own range of both */
  gt__local_copy_at(d, u, d->pshard + d->shard_off[u], f->init_unit, f->init_base, gt__tbeg(d, u), gt__tlen(d, u), 0);
  if (gt__flen(d, u) > 0)
    gt__local_copy_at(d, u, d->fshard + d->foff[u], f->init_unit, f->init_base, d->tcnt[u] + gt__fbeg(d, u),
                      gt__flen(d, u), 0);
}

/* The initial values of a sharded model, the same as one device's: each
 * unit initialised in turn into a host buffer of the largest unit's words
 * (tracked, GT_MEM_TEMP) and scattered, so setup never holds a float32 copy
 * of the whole model (a quantized base would be 8 times its own size). The
 * frozen checksum runs over the tensors in their order, as
 * gt_model_frozen_sum does. */
static gt_rc gt__init_sharded(gt_fsdp *f, const gt_config *cfg, gt_err *err) {
  gt_model full;
  gt_rc rc = gt_model_build(&full, cfg, err);
  if (rc) return rc;
  int64_t most = 0, off, cnt;
  for (int64_t u = 0; u < f->n_units; u++) {
    gt_model_unit(&full, u, &off, &cnt);
    if (cnt > most) most = cnt;
  }
  gt_mem tmp;
  gt_mem_init(&tmp);
  float *buf = gt_mem_alloc_uninit_named(&tmp, GT_MEM_TEMP, (size_t)(most > 0 ? most : 1) * sizeof(float),
                                         "initial values of one unit");
  if (!buf) {
    gt_model_free(&full);
    return gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory to initialise a unit of %lld words", (long long)most);
  }
  uint64_t h = GT_STORE_SUM_INIT;
  int last = -1; /* the last frozen tensor summed: the sum needs them in their order */
  for (int64_t u = 0; u < f->n_units && !rc; u++) {
    gt_model_unit(&full, u, &off, &cnt);
    for (int i = 0; i < full.n_tensors && !rc; i++) {
      const gt_tensor_info *t = &full.tensors[i];
      if (t->layer + 1 != u) continue;
      rc = gt_model_init_tensor(&full, i, (uint64_t)cfg->init_weights_seed, cfg->weight_init_scale,
                                buf + (t->offset - off), err);
      if (rc || t->role != GT_ROLE_FROZEN) continue;
      if (i < last)
        rc = gt_err_set(err, GT_ERR_INTERNAL,
                        "fsdp: frozen tensor '%s' (unit %lld) comes before a frozen tensor of an earlier unit",
                        t->name, (long long)u);
      h = gt_store_sum(h, buf + (t->offset - off), t->words);
      last = i;
    }
    if (rc) break;
    f->init_unit = buf;
    f->init_u = u;
    f->init_base = off;
    gt_mesh_run(f->mesh, gt__scatter_unit, f);
  }
  f->init_unit = NULL;
  f->frozen_sum = h;
  gt_mem_free(&tmp, buf);
  gt_mem_trim(); /* the buffer is not asked for again */
  gt_model_free(&full);
  return rc;
}

gt_rc gt_fsdp_create(gt_fsdp **out, const gt_config *cfg, const gt_mem_probe *probes, gt_err *err) {
  int measure = probes != NULL;
  gt_fsdp *f = calloc(1, sizeof *f);
  if (!f) return gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory");
  f->cfg = *cfg;
  f->N = (int)cfg->num_devices;
  f->R = (int)gt_config_num_ranks(cfg);
  f->NG = f->N * f->R;
  f->prefetch = cfg->prefetch;
  f->inplace = f->NG == 1;
  f->measure = measure;
  f->bf16_w = !strcmp(cfg->dtype, "bfloat16");
  f->mu_bf16 = !strcmp(cfg->mu_dtype, "bfloat16");
  /* a real mesh over ranks needs exactly that many processes; an
   * allocation-only one (the plan) stands for rank 0 and never talks */
  if (!measure && f->R != gt_dist_replica_size()) {
    int dd, df, de;
    gt_config_dcn_axes(cfg, &dd, &df, &de);
    int want = f->R, P = gt_dist_replica_size();
    free(f);
    /* a -1 axis takes the ranks the others leave; when their product does
     * not divide the ranks started it is set to 1, a value nobody gave */
    const long long ax[3] = {cfg->dcn_data_parallelism, cfg->dcn_fsdp_parallelism, cfg->dcn_expert_parallelism};
    const char *nm[3] = {"dcn_data_parallelism", "dcn_fsdp_parallelism", "dcn_expert_parallelism"};
    long long known = 1;
    int open_axis = -1;
    for (int i = 0; i < 3; i++)
      if (ax[i] > 0) known *= ax[i];
      else open_axis = i;
    if (open_axis >= 0)
      return gt_err_set(err, GT_ERR_CONFIG,
                        "mesh: %s = -1 takes the ranks the other dcn axes leave, but their product (%lld) does not "
                        "divide the %d process%s started, so the -1 axis cannot be filled in",
                        nm[open_axis], known, P, P > 1 ? "es" : "");
    return gt_err_set(err, GT_ERR_CONFIG,
                      "mesh: dcn_data_parallelism x dcn_fsdp_parallelism x dcn_expert_parallelism = %d x %d x %d = %d "
                      "ranks, but %d process%s started (mpirun -np %d)",
                      dd, df, de, want, gt_dist_replica_size(), gt_dist_replica_size() > 1 ? "es were" : " was",
                      want * gt_dist_replicas());
  }
  gt_rc rc;
  gt_model layout;
  if ((rc = gt_model_build(&layout, cfg, err))) {
    free(f);
    return rc;
  }
  f->n_units = gt_model_n_units(&layout);
  f->n_params = layout.n_params;
  {
    /* expert parallelism shards a layer's experts as its last two tensors:
     * behind them nothing frozen may follow (model/store.h's order) */
    int ie, de, id_, if_, dd, df;
    gt_config_mesh_axes(cfg, &id_, &if_, &ie);
    gt_config_dcn_axes(cfg, &dd, &df, &de);
    for (int64_t l = 0; ie * de > 1 && l < layout.n_layers; l++) {
      const gt_layer_desc *L = &layout.layers[l];
      if (!L->n_experts || L->train_count == L->param_count) continue;
      if (!L->frozen[GT_P_EXPERT_GATE_UP] || !L->frozen[GT_P_EXPERT_DOWN]) {
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "config: key 'trainable_parameters_mask' = '%s' trains layer %lld's experts but freezes other "
                        "tensors of the layer; with expert parallelism (%d) a layer with a frozen tensor must freeze "
                        "both experts.gate_up_proj and experts.down_proj",
                        cfg->trainable_parameters_mask, (long long)l, ie * de);
        gt_model_free(&layout);
        free(f);
        return rc;
      }
    }
  }
  f->n_trainable = layout.n_trainable;
  f->unit_off = malloc(sizeof(int64_t) * (size_t)(f->n_units > 0 ? f->n_units : 1));
  f->unit_cnt = malloc(sizeof(int64_t) * (size_t)(f->n_units > 0 ? f->n_units : 1));
  if (!f->unit_off || !f->unit_cnt) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory for the unit table");
    goto fail;
  }
  for (int64_t u = 0; u < f->n_units; u++) gt_model_unit(&layout, u, &f->unit_off[u], &f->unit_cnt[u]);
  int ici[3], dcn[3];
  gt_config_mesh_axes(cfg, &ici[0], &ici[1], &ici[2]);
  gt_config_dcn_axes(cfg, &dcn[0], &dcn[1], &dcn[2]);
  f->dp = ici[0] * dcn[0];
  f->fs = ici[1] * dcn[1];
  f->ep = ici[2] * dcn[2];
  if (!measure && f->R > 1 && (rc = gt_dist_set_devices(f->N, err))) goto fail;
  if ((rc = gt_mesh_create(&f->mesh, f->N, err))) goto fail;
  if ((rc = gt_mesh_set_layout(f->mesh, ici, dcn, measure ? 0 : gt_dist_replica_rank(), err))) goto fail;
  if (cfg->threads_per_device > 0) gt_mesh_set_threads(f->mesh, (int)cfg->threads_per_device);
  gt_mesh_set_timeout(f->mesh, cfg->collective_timeout_seconds);
  f->devs = calloc((size_t)f->N, sizeof *f->devs);
  if (!f->devs) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory for %d devices", f->N);
    goto fail;
  }
  for (int i = 0; i < f->N; i++) {
    gt__dev *d = &f->devs[i];
    d->f = f;
    d->dev = i;
    if (measure) {
      gt_mem_init_measure(&d->mem);
      gt_mem_set_probe(&d->mem, &probes[i]);
    } else {
      gt_mem_init(&d->mem);
    }
    if ((rc = gt_model_build(&d->model, cfg, err)) || (rc = gt_model_alloc_tables(&d->model, &d->mem, err))) goto fail;
    d->rank = gt_mesh_group_rank(f->mesh, GT_GROUP_FSDP, i);
    d->erank = gt_mesh_group_rank(f->mesh, GT_GROUP_EXPERT, i);
    d->drank = gt_mesh_group_rank(f->mesh, GT_GROUP_DATA, i);
    if (f->ep > 1) {
      gt_model_set_expert_shard(&d->model, f->ep, d->erank);
      d->ecomm = (gt_expert_comm){d, f->ep, d->erank, gt__ep_all_gather, gt__ep_all_reduce, gt__ep_reduce_scatter};
      d->model.ep = &d->ecomm;
    }
    /* each token group (an expert group's devices, or one device) averages
     * its own lb loss; the step's is the mean over the N / ep groups */
    if (d->model.n_moe_layers) d->model.moe_dlb = (float)(1.0 / ((double)d->model.n_moe_layers * (f->NG / f->ep)));
    size_t nu = f->n_units > 0 ? (size_t)f->n_units : 1;
    d->lcnt = malloc(sizeof(int64_t) * nu);
    d->lrep = malloc(sizeof(int64_t) * nu);
    if (!d->lcnt || !d->lrep) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory for device %d's unit table", i);
      goto fail;
    }
    d->tcnt = malloc(sizeof(int64_t) * nu);
    d->foff = malloc(sizeof(int64_t) * nu);
    d->shard_off = malloc(sizeof(int64_t) * nu);
    d->pending = malloc(sizeof(int) * nu);
    d->pending_f = malloc(sizeof(int) * nu);
    d->gathered = calloc(nu, sizeof(float *));
    d->ugrad = calloc(nu, sizeof(float *));
    if (!d->tcnt || !d->foff || !d->shard_off || !d->pending || !d->pending_f || !d->gathered || !d->ugrad) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory for device %d's unit table", i);
      goto fail;
    }
    for (int64_t u = 0; u < f->n_units; u++) {
      d->lcnt[u] = gt_model_unit_local(&d->model, u);
      d->lrep[u] = gt_model_unit_replicated(&d->model, u);
      d->tcnt[u] = gt_model_unit_trainable(&d->model, u);
    }
    for (int64_t u = 0; u < f->n_units; u++) d->pending[u] = d->pending_f[u] = -1;
    int64_t maxs = 0;
    for (int64_t u = 0; u < f->n_units; u++) {
      d->shard_off[u] = d->shard_n;
      int64_t n = gt__tlen(d, u);
      d->shard_n += n;
      if (n > maxs) maxs = n;
      d->foff[u] = d->fshard_n;
      d->fshard_n += gt__flen(d, u);
    }
    size_t sb = (size_t)d->shard_n * sizeof(float);
    d->pshard = gt_mem_alloc_named(&d->mem, GT_MEM_PARAMS, sb, "parameters (shard)");
    d->gshard = gt_mem_alloc_named(&d->mem, GT_MEM_GRADS, sb, "gradients (shard)");
    if (f->mu_bf16)
      d->mu16 = gt_mem_alloc_named(&d->mem, GT_MEM_OPTIM, (size_t)d->shard_n * sizeof(uint16_t), "adam mu (shard, bf16)");
    else
      d->mu = gt_mem_alloc_named(&d->mem, GT_MEM_OPTIM, sb, "adam mu (shard)");
    d->nu = gt_mem_alloc_named(&d->mem, GT_MEM_OPTIM, sb, "adam nu (shard)");
    /* the frozen group: parameters only (no gradient, no moments) */
    if (d->fshard_n > 0 &&
        !(d->fshard = gt_mem_alloc_named(&d->mem, GT_MEM_FROZEN, (size_t)d->fshard_n * sizeof(float),
                                         "parameters (frozen shard)"))) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d cannot hold its shard of %lld frozen parameters", i,
                      (long long)d->fshard_n);
      goto fail;
    }
    /* the reduce-scatter's landing buffer (in place: nothing to reduce) */
    if (!f->inplace) d->rs_tmp = gt_mem_alloc_named(&d->mem, GT_MEM_TEMP, (size_t)(maxs > 0 ? maxs : 1) * sizeof(float), "reduce-scatter buffer");
    if (!d->pshard || !d->gshard || (!d->mu && !d->mu16) || !d->nu || (!f->inplace && !d->rs_tmp)) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d cannot hold its shard of %lld parameters", i,
                      (long long)d->shard_n);
      goto fail;
    }
    /* the gradient norm counts each shard once: it lives on dp devices,
     * and all but the own experts on dp x ep */
    d->npart = f->ep > 1 ? (int)f->n_units : 1;
    if (!(d->part = calloc((size_t)(d->npart > 0 ? d->npart : 1), sizeof *d->part))) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory for device %d's unit table", i);
      goto fail;
    }
    if (f->ep > 1)
      for (int64_t u = 0; u < f->n_units; u++)
        d->part[u] = (gt_fsdp_norm_part){d->shard_off[u], gt__tlen(d, u), gt__rep_len(d, u), (double)f->dp * f->ep,
                                         (double)f->dp};
    else
      d->part[0] = (gt_fsdp_norm_part){0, d->shard_n, d->shard_n, (double)f->dp, (double)f->dp};
    d->view = (gt_param_view){d, gt__acquire, gt__projections, gt__drop, gt__release};
    d->model.view = &d->view;
  }
  /* one device holding every unit whole: each tensor initialised straight
   * into its shard (no host copy of the model: a frozen base never exists
   * twice), the same values and checksum as the full model's */
  if (!measure && f->inplace) {
    gt__dev *d = &f->devs[0];
    uint64_t h = GT_STORE_SUM_INIT;
    for (int i = 0; i < layout.n_tensors && !rc; i++) {
      const gt_tensor_info *t = &layout.tensors[i];
      int64_t u = t->layer + 1, uoff, ucnt;
      gt_model_unit(&layout, u, &uoff, &ucnt);
      int64_t r = t->offset - uoff, tc = d->tcnt[u];
      float *dst = r < tc ? d->pshard + d->shard_off[u] + r : d->fshard + d->foff[u] + (r - tc);
      rc = gt_model_init_tensor(&layout, i, (uint64_t)cfg->init_weights_seed, cfg->weight_init_scale, dst, err);
      if (!rc && t->role == GT_ROLE_FROZEN) h = gt_store_sum(h, dst, t->words);
    }
    if (rc) goto fail;
    f->frozen_sum = h;
  }
  /* the same initial values as one device, a unit at a time */
  if (!measure && !f->inplace && (rc = gt__init_sharded(f, cfg, err))) goto fail;
  gt_model_free(&layout);
  *out = f;
  return GT_OK;
fail:
  gt_model_free(&layout);
  gt_fsdp_destroy(f);
  return rc;
}

void gt_fsdp_destroy(gt_fsdp *f) {
  if (!f) return;
  for (int i = 0; f->devs && i < f->N; i++) {
    gt__dev *d = &f->devs[i];
    for (int64_t u = 0; d->gathered && d->ugrad && d->pending && d->pending_f && d->tcnt && u < f->n_units; u++) {
      gt__wait_pending(d, u);
      if (gt__owns_gathered(d, u)) gt_mem_free(&d->mem, d->gathered[u]);
      if (!f->inplace) gt_mem_free(&d->mem, d->ugrad[u]);
    }
    gt_mem_free(&d->mem, d->fshard);
    free(d->part);
    free(d->tcnt);
    free(d->foff);
    free(d->pending_f);
    gt_mem_free(&d->mem, d->pshard);
    gt_mem_free(&d->mem, d->gshard);
    gt_mem_free(&d->mem, d->mu);
    gt_mem_free(&d->mem, d->mu16);
    if (d->mu_out) gt_mem_free(d->mu_out_mem, d->mu_out);
    gt_mem_free(&d->mem, d->nu);
    gt_mem_free(&d->mem, d->rs_tmp);
    gt_mem_free(&d->mem, d->ref_tok);
    gt_mem_free(&d->mem, d->rshard);
    free(d->shard_off);
    free(d->lcnt);
    free(d->lrep);
    free(d->pending);
    free(d->gathered);
    free(d->ugrad);
    gt_model_free(&d->model);
    gt_mem_arena_release(&d->mem); /* after the last free of a block it may have served */
  }
  free(f->devs);
  if (f->mesh) gt_mesh_destroy(f->mesh);
  free(f->unit_off);
  free(f->unit_cnt);
  free(f);
}

int64_t gt_fsdp_num_params(const gt_fsdp *f) { return f->n_params; }
int64_t gt_fsdp_num_trainable(const gt_fsdp *f) { return f->n_trainable; }
uint64_t gt_fsdp_frozen_sum(const gt_fsdp *f) { return f->frozen_sum; }
int gt_fsdp_devices(const gt_fsdp *f) { return f->N; }
gt_mesh *gt_fsdp_mesh(gt_fsdp *f) { return f->mesh; }
int64_t gt_fsdp_last_comm_bytes(const gt_fsdp *f) { return f->last_comm_bytes; }
gt_mem *gt_fsdp_device_mem(gt_fsdp *f, int d) { return &f->devs[d].mem; }
gt_model *gt_fsdp_device_model(gt_fsdp *f, int d) { return &f->devs[d].model; }

/* ---------- steps ---------- */

/* global device d's rows of a global batch (of N devices) */
static gt_batch gt__slice(const gt_batch *g, int N, int d) {
  int rows = g->B / N;
  int64_t off = (int64_t)d * rows * g->T;
  gt_batch b = {rows, g->T, g->inputs + off, g->targets + off, g->positions + off,
                g->segments ? g->segments + off : NULL};
  return b;
}

/* ---------- the phases of a step (train/trainer.c runs them in order) ---------- */

/* ---------- preference tuning ---------- */

static gt_rc gt__collect(gt_fsdp *f, gt_err *err);

/* The head's pair mode for batch i's slice b on device d (NULL: off). */
static gt_pref_head *gt__pref_on(gt__dev *d, const gt_batch *b, int i) {
  gt_fsdp *f = d->f;
  if (!f->pref_fn) return NULL;
  d->ph = (gt_pref_head){f->pref_fn, f->pref_ctx, b->T, b->segments,
                         f->pref_ref ? d->ref_tok + (int64_t)i * b->B * b->T : NULL};
  return &d->ph;
}

/* The reference pass: forward only over the run's batches, the adapters
 * off (a frozen base) or the reference shard in the trainable shard's
 * place, each token's loss kept for the pairs' sums. */
static void gt__run_ref(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  if (d->rc) return;
  gt_trace_lane *lane = gt_trace_device(f->trace, dev);
  double t0 = lane ? gt_prof_now() : 0.0;
  const int gid = gt_mesh_global_id(f->mesh, dev);
  float *own = d->pshard;
  if (f->pref_ref == GT_FSDP_REF_COPY) d->pshard = d->rshard; /* gathers read the reference */
  d->model.lora_train = 0;
  d->model.lora_off = f->pref_ref == GT_FSDP_REF_BASE;
  for (int i = 0; i < f->n_batches && !d->rc; i++) {
    gt_batch b = gt__slice(&f->batches[i], f->NG, gid);
    gt_loss_stats st = {0};
    d->model.token_loss = d->ref_tok + (int64_t)i * b.B * b.T;
    d->rc = gt_exec_forward_loss(&d->model, &b, (int)f->cfg.num_vocab_tiling, &st, &d->err);
    if (lane) gt_trace_phase_end(lane, gt_prof_now());
  }
  d->model.token_loss = NULL;
  d->model.lora_off = 0;
  if (d->rc) {
    gt__abandon(d);
    gt_mesh_leave(f->mesh, dev);
  }
  for (int64_t u = 0; u < f->n_units; u++) gt__drop(d, u); /* no copy of the reference outlives the pass */
  d->pshard = own;
  if (lane) gt_trace_span(lane, "reference pass", "step", t0, gt_prof_now());
}

static gt_rc gt__pref_reference(gt_fsdp *f, gt_err *err) {
  if (!f->pref_fn || !f->pref_ref) return GT_OK;
  if (!f->n_batches) return GT_OK;
  const gt_batch *b0 = &f->batches[0];
  int64_t need = (int64_t)f->n_batches * (b0->B / f->NG) * b0->T;
  for (int i = 0; i < f->N; i++)
    if (need > f->devs[i].ref_n)
      return gt_err_set(err, GT_ERR_ARG,
                        "fsdp: the reference pass of %d batches of %d x %d needs %lld per-token losses per device; "
                        "room for %lld", f->n_batches, b0->B, b0->T, (long long)need, (long long)f->devs[i].ref_n);
  gt_mesh_run(f->mesh, gt__run_ref, f);
  return gt__collect(f, err);
}

gt_rc gt_fsdp_set_pref(gt_fsdp *f, gt_pref_pairs_fn fn, const void *ctx, int reference, int64_t max_batches,
                       gt_err *err) {
  f->pref_fn = fn;
  f->pref_ctx = ctx;
  f->pref_ref = fn ? reference : GT_FSDP_REF_NONE;
  const gt_config *c = &f->cfg;
  int64_t rows = gt_config_global_batch(c) / f->NG;
  for (int i = 0; i < f->N; i++) {
    gt__dev *d = &f->devs[i];
    gt_mem_free(&d->mem, d->ref_tok);
    gt_mem_free(&d->mem, d->rshard);
    d->ref_tok = NULL;
    d->rshard = NULL;
    d->ref_n = 0;
    if (f->pref_ref == GT_FSDP_REF_NONE) continue;
    d->ref_n = max_batches * rows * c->max_target_length;
    if (!(d->ref_tok = gt_mem_alloc_named(&d->mem, GT_MEM_DATA, (size_t)(d->ref_n > 0 ? d->ref_n : 1) * sizeof(float),
                                          "reference per-token losses")))
      return gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d has no memory for %lld reference token losses", i,
                        (long long)d->ref_n);
    if (f->pref_ref != GT_FSDP_REF_COPY) continue;
    /* the reference is held and sharded like the policy: a copy of the
     * trainable shard (the frozen one is the same for both) */
    if (!(d->rshard = gt_mem_alloc_named(&d->mem, GT_MEM_FROZEN, (size_t)(d->shard_n > 0 ? d->shard_n : 1) * sizeof(float),
                                         "reference parameters (shard)")))
      return gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d cannot hold its shard of %lld reference parameters", i,
                        (long long)d->shard_n);
    if (!f->measure) memcpy(d->rshard, d->pshard, (size_t)d->shard_n * sizeof(float));
  }
  return GT_OK;
}

gt_rc gt_fsdp_set_reference(gt_fsdp *f, const float *full, gt_err *err) {
  if (f->pref_ref != GT_FSDP_REF_COPY)
    return gt_err_set(err, GT_ERR_ARG, "fsdp: no reference copy is held (all parameters must train, with DPO)");
  for (int i = 0; i < f->N && !f->measure; i++) {
    gt__dev *d = &f->devs[i];
    if (full) gt_fsdp_trainable_from_full(f, i, full, d->rshard);
    else memcpy(d->rshard, d->pshard, (size_t)d->shard_n * sizeof(float));
  }
  return GT_OK;
}

/* Eval: forward passes over every batch and the loss sums' all-reduce, one
 * span on each device's lane. */
static void gt__run_eval(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  gt_trace_lane *lane = gt_trace_device(f->trace, dev);
  double t0 = lane ? gt_prof_now() : 0.0;
  const gt_config *c = &f->cfg;
  d->rc = GT_OK;
  gt_err_clear(&d->err);
  memset(&d->st, 0, sizeof d->st);
  const int gid = gt_mesh_global_id(f->mesh, dev);
  d->model.lora_train = 0; /* no adapter dropout outside training */
  for (int i = 0; i < f->n_batches && !d->rc; i++) {
    gt_batch b = gt__slice(&f->batches[i], f->NG, gid);
    if (f->tok_out) /* this device's rows of batch i (batches share one shape) */
      d->model.token_loss = f->tok_out + (int64_t)i * f->batches[i].B * b.T + (int64_t)gid * b.B * b.T;
    d->model.pref = gt__pref_on(d, &b, i);
    d->rc = gt_exec_forward_loss(&d->model, &b, (int)c->num_vocab_tiling, &d->st, &d->err);
    d->model.token_loss = NULL;
    d->model.pref = NULL;
    if (lane) gt_trace_phase_end(lane, gt_prof_now());
  }
  /* the head's acquire prefetched layer 0 for a forward that does not
   * follow: drop it, so no gathered copy outlives the pass. The batches
   * were checked before the run (gt__check_batches), so an error is an
   * allocation failure, which may strike one device alone: it leaves the
   * mesh, so its peers' collectives complete without it (moving no data)
   * and none waits for it */
  if (d->rc) {
    gt__abandon(d);
    gt_mesh_leave(f->mesh, dev);
  }
  for (int64_t u = 0; u < f->n_units; u++) gt__drop(d, u);
  if (!d->rc && !f->measure) {
    double sums[3 + GT_PREF_NSUMS] = {d->st.xent_sum, (double)d->st.total_weights, d->st.z_sum};
    memcpy(sums + 3, d->st.pref, sizeof d->st.pref);
    /* the z sum only travels when on, the preference sums with pairs */
    gt_all_reduce_f64(f->mesh, dev, sums, f->pref_fn ? 3 + GT_PREF_NSUMS : d->model.z_loss != 0.0f ? 3 : 2);
    d->st.xent_sum = sums[0];
    d->st.total_weights = (int64_t)sums[1];
    d->st.z_sum = sums[2];
    memcpy(d->st.pref, sums + 3, sizeof d->st.pref);
  }
  if (lane) {
    double t1 = gt_prof_now();
    gt_trace_phase_end(lane, t1);
    gt_trace_span(lane, "eval", "step", t0, t1);
  }
}

/* zero: the gradient shards, the loss sums and the step's memory peaks */
static void gt__run_zero(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  gt_trace_lane *lane = gt_trace_device(f->trace, dev);
  d->t_step = lane ? gt_prof_now() : 0.0;
  d->rc = GT_OK;
  gt_err_clear(&d->err);
  memset(&d->st, 0, sizeof d->st);
  if (!f->measure) memset(d->gshard, 0, (size_t)d->shard_n * sizeof(float));
  gt_mem_reset_peaks(&d->mem); /* a step's peaks: an eval pass adds to them */
}

/* forward/backward of micro-batch f->micro_i: gradients reduce-scatter into
 * the shards unit by unit as the backward releases them */
static void gt__run_micro(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  if (d->rc) return;
  gt_trace_lane *lane = gt_trace_device(f->trace, dev);
  const int gid = gt_mesh_global_id(f->mesh, dev);
  gt_batch b = gt__slice(&f->batches[f->micro_i], f->NG, gid);
  /* the adapters' dropout masks: this step, this micro-batch, and the
   * global token rows of this device's sequences (any mesh draws alike) */
  d->model.lora_train = 1;
  d->model.lora_step = f->lora_step;
  d->model.lora_micro = f->micro_i;
  d->model.lora_row0 = (int64_t)gid * b.B * b.T;
  /* the global token count decides every token's weight (gt__count_weights) */
  float w = f->n_batches == 1 ? 1.0f / (float)f->tw : 1.0f;
  d->model.pref = gt__pref_on(d, &b, f->micro_i);
  d->rc = gt_exec_forward_backward(&d->model, &b, (int)f->cfg.num_vocab_tiling, w, &d->st, &d->err);
  d->model.pref = NULL;
  /* the executor's last phase (a layer's backward, or the head) ends with it */
  if (lane) gt_trace_phase_end(lane, gt_prof_now());
  /* the batches were checked before the run (gt__check_batches), so an
   * error here is an allocation failure, which may strike one device alone:
   * it leaves the mesh, so its peers' collectives complete without it
   * (moving no data) and none waits for it; the step ends with the error
   * after this phase (gt_fsdp_forward_backward collects it) */
  if (d->rc) {
    gt__abandon(d);
    gt_mesh_leave(f->mesh, dev);
  }
}

static gt_fsdp_shard gt__shard_view(gt__dev *d) {
  gt_fsdp_shard s = {d->dev, d->pshard, d->gshard, d->mu, d->mu16, d->nu, d->shard_n, d->part, d->npart,
                     0.0, d->model.prof, gt_trace_device(d->f->trace, d->dev)};
  return s;
}

/* reduce and norm: the gradient average over micro-batches, the caller's
 * partial squared norm of the shard, and the all-reduce of the loss sums
 * and norms (every device gets the same sums) */
static void gt__run_reduce(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  if (d->rc) return;
  for (int64_t u = 0; u < f->n_units; u++) gt__drop(d, u);
  if (f->measure) return; /* the step's allocations are done; the rest is arithmetic */
  if (f->n_batches > 1) {
    float inv = 1.0f / (float)f->tw;
    for (int64_t i = 0; i < d->shard_n; i++) d->gshard[i] *= inv;
  }
  if (dev == 0 && f->poison_next && d->shard_n > 0) d->gshard[0] = NAN;
  gt_fsdp_shard s = gt__shard_view(d);
  f->norm_fn(f->fn_ctx, &s);
  double sums[5 + GT_PREF_NSUMS] = {d->st.xent_sum, (double)d->st.total_weights, s.sumsq, d->st.moe_lb_sum,
                                    d->st.z_sum};
  memcpy(sums + 5, d->st.pref, sizeof d->st.pref);
  /* the lb sum only travels for MoE models, the z sum only with the z-loss
   * on, the preference sums with pairs */
  int ns = f->pref_fn ? 5 + GT_PREF_NSUMS : d->model.z_loss != 0.0f ? 5 : d->model.n_moe_layers ? 4 : 3;
  gt_all_reduce_f64(f->mesh, dev, sums, ns);
  if (dev == 0) memcpy(f->sums, sums, sizeof sums);
}

/* clip and update: the caller's update of each device's shard; the step's
 * span on the device's lane ends here */
static void gt__run_update(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  gt_trace_lane *lane = gt_trace_device(f->trace, dev);
  if (!d->rc && !f->measure && f->update_fn) {
    gt_fsdp_shard s = gt__shard_view(d);
    f->update_fn(f->fn_ctx, &s);
  }
  if (lane) {
    double t1 = gt_prof_now();
    gt_trace_phase_end(lane, t1);
    gt_trace_span(lane, "train step", "step", d->t_step, t1);
  }
}

static gt_rc gt__collect(gt_fsdp *f, gt_err *err) {
  /* a device's own error first: the mesh's may only say that it left */
  gt_err me;
  gt_rc rc = gt_mesh_take_error(f->mesh, &me);
  for (int i = 0; i < f->N; i++)
    if (f->devs[i].rc) {
      gt_err_set(err, f->devs[i].rc, "device %d: %s", i, f->devs[i].err.msg);
      return f->devs[i].rc;
    }
  if (rc) *err = me;
  return rc;
}

/* Refused before any device runs, so a bad batch never fails part way. */
static gt_rc gt__check_batches(gt_fsdp *f, const gt_batch *b, int n, gt_err *err) {
  long long tiles = f->cfg.num_vocab_tiling;
  for (int i = 0; i < n; i++) {
    if (b[i].B % f->NG)
      return gt_err_set(err, GT_ERR_ARG, "fsdp: a global batch of %d sequences does not split over %d devices",
                        b[i].B, f->NG);
    if ((long long)(b[i].B / f->NG) * b[i].T % tiles)
      return gt_err_set(err, GT_ERR_ARG,
                        "fsdp: a device's %d x %d tokens do not split into num_vocab_tiling = %lld tiles",
                        b[i].B / f->NG, b[i].T, tiles);
  }
  return GT_OK;
}

/* The tokens in the loss over the whole global batch. One process sees
 * every row; over ranks each counts the rows of its own devices (the only
 * ones its data source fills) and the counts are summed: integers, so the
 * same total in any order. */
static gt_rc gt__count_weights(gt_fsdp *f, gt_err *err) {
  int64_t tw = 0;
  for (int i = 0; i < f->n_batches; i++) {
    if (f->R == 1) {
      tw += f->pref_fn ? gt_pref_count_pairs(&f->batches[i]) : gt_batch_total_weights(&f->batches[i]);
      continue;
    }
    for (int d = 0; d < f->N; d++) {
      gt_batch b = gt__slice(&f->batches[i], f->NG, gt_mesh_global_id(f->mesh, d));
      tw += f->pref_fn ? gt_pref_count_pairs(&b) : gt_batch_total_weights(&b);
    }
  }
  if (f->R > 1 && !f->measure) {
    gt_rc rc = gt_dist_replica_allreduce_i64(&tw, 1, GT_DIST_SUM, "the step's token count", err);
    if (rc) return rc;
  }
  f->tw = tw;
  return GT_OK;
}

gt_rc gt_fsdp_zero(gt_fsdp *f, const gt_batch *micro, int n_micro, gt_err *err) {
  gt_rc rc = gt__check_batches(f, micro, n_micro, err);
  if (rc) return rc;
  gt_mesh_reset_stats(f->mesh);
  f->batches = micro;
  f->n_batches = n_micro;
  if ((rc = gt__count_weights(f, err))) return rc;
  gt_mesh_run(f->mesh, gt__run_zero, f);
  return gt__pref_reference(f, err);
}

gt_rc gt_fsdp_forward_backward(gt_fsdp *f, int i, gt_err *err) {
  f->micro_i = i;
  gt_mesh_run(f->mesh, gt__run_micro, f);
  return gt__collect(f, err);
}

gt_rc gt_fsdp_reduce(gt_fsdp *f, gt_fsdp_shard_fn partial_norm, void *ctx, gt_fsdp_sums *out, gt_err *err) {
  f->norm_fn = partial_norm;
  f->fn_ctx = ctx;
  memset(f->sums, 0, sizeof f->sums);
  gt_mesh_run(f->mesh, gt__run_reduce, f);
  f->poison_next = 0;
  f->norm_fn = NULL;
  gt_rc rc = gt__collect(f, err);
  if (rc) return rc;
  out->xent_sum = f->sums[0];
  out->total_weights = (int64_t)f->sums[1];
  out->sumsq = f->sums[2];
  out->z_sum = f->sums[4];
  memcpy(out->pref, f->sums + 5, sizeof out->pref);
  /* every device of a token group holds its group's lb sum */
  out->moe_lb = f->devs[0].model.n_moe_layers ? f->sums[3] / ((double)f->NG * f->devs[0].model.n_moe_layers) : 0.0;
  return GT_OK;
}

gt_rc gt_fsdp_update(gt_fsdp *f, gt_fsdp_shard_fn update, void *ctx, gt_fsdp_comm *comm, gt_err *err) {
  f->update_fn = update;
  f->fn_ctx = ctx;
  gt_mesh_run(f->mesh, gt__run_update, f);
  f->update_fn = NULL;
  gt_rc rc = gt__collect(f, err);
  if (rc) return rc;
  memset(comm, 0, sizeof *comm);
  for (int i = 0; i < f->N; i++) {
    gt_comm_stats cs = gt_mesh_stats(f->mesh, i);
    if (cs.bytes_sent > comm->bytes) comm->bytes = cs.bytes_sent;
    if (cs.seconds > comm->seconds) comm->seconds = cs.seconds;
    if (cs.bytes_dcn > comm->bytes_dcn) comm->bytes_dcn = cs.bytes_dcn;
  }
  f->last_comm_bytes = comm->bytes;
  return GT_OK;
}

/* a sum over the shards: the caller's partial sum of each device's shard,
 * all-reduced as the gradient norm's */
static void gt__run_shard_sum(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  if (d->rc || f->measure) return;
  gt_fsdp_shard s = gt__shard_view(d);
  f->norm_fn(f->fn_ctx, &s);
  double sum = s.sumsq;
  gt_all_reduce_f64(f->mesh, dev, &sum, 1);
  if (dev == 0) f->sums[0] = sum;
}

gt_rc gt_fsdp_shard_sum(gt_fsdp *f, gt_fsdp_shard_fn partial, void *ctx, double *sum, gt_err *err) {
  *sum = 0.0;
  if (f->measure) return GT_OK;
  f->norm_fn = partial;
  f->fn_ctx = ctx;
  f->sums[0] = 0.0;
  gt_mesh_run(f->mesh, gt__run_shard_sum, f);
  f->norm_fn = NULL;
  gt_rc rc = gt__collect(f, err);
  if (!rc) *sum = f->sums[0];
  return rc;
}

gt_rc gt_fsdp_eval(gt_fsdp *f, const gt_batch *batches, int n, gt_loss_stats *st, gt_err *err) {
  gt_rc rc = gt__check_batches(f, batches, n, err);
  if (rc) return rc;
  f->batches = batches;
  f->n_batches = n;
  if ((rc = gt__count_weights(f, err))) return rc;
  if ((rc = gt__pref_reference(f, err))) return rc;
  gt_mesh_run(f->mesh, gt__run_eval, f);
  if ((rc = gt__collect(f, err))) return rc;
  st->xent_sum += f->devs[0].st.xent_sum;
  st->total_weights += f->devs[0].st.total_weights;
  st->z_sum += f->devs[0].st.z_sum;
  for (int k = 0; k < GT_PREF_NSUMS; k++) st->pref[k] += f->devs[0].st.pref[k];
  return GT_OK;
}

gt_rc gt_fsdp_eval_tokens(gt_fsdp *f, const gt_batch *batches, int n, float *token_loss, gt_loss_stats *st,
                          gt_err *err) {
  for (int i = 1; i < n; i++)
    if (batches[i].B != batches[0].B || batches[i].T != batches[0].T)
      return gt_err_set(err, GT_ERR_ARG, "fsdp: eval batch %d is %d x %d; batch 0 is %d x %d", i, batches[i].B,
                        batches[i].T, batches[0].B, batches[0].T);
  int64_t all = n > 0 ? (int64_t)n * batches[0].B * batches[0].T : 0;
  /* over ranks each writes its own rows into zeros, and a bitwise OR
   * assembles them exactly (as the state export does) */
  if (f->R > 1) memset(token_loss, 0, (size_t)all * sizeof(float));
  f->tok_out = token_loss;
  /* scoring sequences (eval_tasks) is the LM loss, whatever the training's */
  gt_pref_pairs_fn pf = f->pref_fn;
  f->pref_fn = NULL;
  gt_rc rc = gt_fsdp_eval(f, batches, n, st, err);
  f->pref_fn = pf;
  f->tok_out = NULL;
  if (!rc && f->R > 1 && !f->measure)
    rc = gt_dist_allreduce_bor((uint32_t *)(void *)token_loss, all, "the per-token eval losses", err);
  return rc;
}

static void gt__run_export(int dev, void *arg) {
  gt_fsdp *f = arg;
  gt__dev *d = &f->devs[dev];
  const float *src = f->export_which == 1 ? d->mu : f->export_which == 2 ? d->nu : d->pshard;
  float *buf = f->export_buf[dev];
  if (f->export_which == 1 && d->mu16) { /* bf16 moments: gathered in 2 bytes, expanded (exactly) on the way out */
    uint16_t *h = (uint16_t *)(void *)buf;
    for (int64_t u = 0; u < f->n_units; u++) {
      gt_all_gather_bf16_g(f->mesh, dev, GT_GROUP_FSDP, d->mu16 + d->shard_off[u], h, d->tcnt[u]);
      /* a frozen part has no moments: zeros */
      memset(h + d->tcnt[u], 0, (size_t)gt__fcnt(d, u) * sizeof(uint16_t));
      if (d->drank == 0) {
        int64_t fo[3], lo[3], ln[3];
        int np = gt_model_unit_pieces(&d->model, u, fo, lo, ln);
        for (int i = d->erank == 0 ? 0 : 1; i < np; i++) gt_bf16_unpack(f->full_out + fo[i], h + lo[i], ln[i]);
      }
    }
    return;
  }
  /* every device gathers each unit (its own experts' block); the devices of
   * data index 0 write their experts out, expert rank 0 also the rest */
  for (int64_t u = 0; u < f->n_units; u++) {
    int64_t t = d->tcnt[u], fz = gt__fcnt(d, u);
    gt_all_gather_g(f->mesh, dev, GT_GROUP_FSDP, src + d->shard_off[u], buf, t);
    /* the frozen part: its parameters, and zeros for its (absent) moments */
    if (fz && f->export_which == 0) gt_all_gather_g(f->mesh, dev, GT_GROUP_FSDP, d->fshard + d->foff[u], buf + t, fz);
    else if (fz) memset(buf + t, 0, (size_t)fz * sizeof(float));
    if (d->drank == 0) {
      int64_t fo[3], lo[3], ln[3];
      int np = gt_model_unit_pieces(&d->model, u, fo, lo, ln);
      for (int i = d->erank == 0 ? 0 : 1; i < np; i++)
        memcpy(f->full_out + fo[i], buf + lo[i], (size_t)ln[i] * sizeof(float));
    }
  }
}

/* Exports which (0 params, 1 mu, 2 nu) into out. The gather buffers are
 * allocated here, before the devices run: a device cannot fail inside a
 * collective run without leaving its peers waiting. */
static gt_rc gt__export(gt_fsdp *f, int which, float *out, gt_err *err) {
  if (f->measure) return gt_err_set(err, GT_ERR_ARG, "fsdp: an allocation-only mesh holds no values to export");
  gt_rc rc = GT_OK;
  f->export_buf = calloc((size_t)f->N, sizeof(float *));
  for (int i = 0; f->export_buf && i < f->N; i++) {
    int64_t mx = 1;
    for (int64_t u = 0; u < f->n_units; u++)
      if (f->devs[i].lcnt[u] > mx) mx = f->devs[i].lcnt[u];
    if (!(f->export_buf[i] = malloc((size_t)mx * sizeof(float)))) break;
  }
  int ok = f->export_buf != NULL;
  for (int i = 0; ok && i < f->N; i++) ok = f->export_buf[i] != NULL;
  if (f->R > 1) { /* the export is collective: every rank or none */
    gt_err mine;
    gt_err_set(&mine, GT_ERR_NOMEM, "fsdp: no memory to gather the state for export");
    ok = gt_dist_replica_agree(ok ? GT_OK : GT_ERR_NOMEM, &mine, "gathering the state for export", err) == GT_OK;
  }
  if (ok) {
    /* over ranks each process writes the pieces its devices hold into a
     * zeroed buffer, and a bitwise OR assembles them (exact: each element
     * is written by one rank, -0.0 and NaN payloads included) */
    if (f->R > 1) memset(out, 0, (size_t)f->n_params * sizeof(float));
    f->full_out = out;
    f->export_which = which;
    gt_mesh_run(f->mesh, gt__run_export, f);
    rc = gt_mesh_take_error(f->mesh, err);
    if (f->R > 1) {
      gt_err mine = *err;
      rc = gt_dist_replica_agree(rc, &mine, "gathering the state for export", err);
      if (!rc) rc = gt_dist_replica_allreduce_bor((uint32_t *)out, f->n_params, "assembling the full state", err);
    }
  } else if (f->R > 1) {
    rc = err->rc ? err->rc : GT_ERR_NOMEM; /* the agreement's message names the rank */
  } else {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fsdp: no memory to gather the state for export");
  }
  for (int i = 0; f->export_buf && i < f->N; i++) free(f->export_buf[i]);
  free(f->export_buf);
  f->export_buf = NULL;
  f->full_out = NULL;
  f->export_which = 0;
  return rc;
}

gt_rc gt_fsdp_full_params(gt_fsdp *f, float *out, gt_err *err) { return gt__export(f, 0, out, err); }

gt_rc gt_fsdp_full_state(gt_fsdp *f, float *params, float *mu, float *nu, gt_err *err) {
  float *dst[3] = {params, mu, nu};
  gt_rc rc = GT_OK;
  for (int w = 0; w < 3 && !rc; w++) rc = gt__export(f, w, dst[w], err);
  return rc;
}

int gt_fsdp_expert_parallelism(const gt_fsdp *f) { return f->ep; }

/* ---------- state for checkpoints ---------- */

int gt_fsdp_num_shards(const gt_fsdp *f) { return f->fs; }

gt_rc gt_fsdp_shard_state(gt_fsdp *f, int r, const float **params, const float **mu, const float **nu, gt_mem *staging,
                          gt_err *err) {
  /* global device r has data index 0 and fsdp index r (ep 1: g = data *
   * fsdp + fsdp index); over ranks it may live in another process */
  *params = *mu = *nu = NULL;
  if (gt_mesh_rank_of(f->mesh, r) != gt_mesh_rank(f->mesh)) return GT_OK;
  for (int i = 0; i < f->N; i++)
    if (gt_mesh_global_id(f->mesh, i) == r) {
      gt__dev *d = &f->devs[i];
      if (d->mu16 && !d->mu_out) { /* bf16 moments leave as float32 (exact) */
        d->mu_out = gt_mem_alloc_uninit_named(staging, GT_MEM_OTHER, (size_t)(d->shard_n > 0 ? d->shard_n : 1) * sizeof(float),
                                              "adam mu (float32 copy for a checkpoint)");
        d->mu_out_mem = staging;
        if (!d->mu_out)
          return gt_err_set(err, GT_ERR_NOMEM, "fsdp: device %d has no memory to expand its %lld bf16 first moments",
                            i, (long long)d->shard_n);
        if (!f->measure) gt_bf16_unpack(d->mu_out, d->mu16, d->shard_n);
      }
      *params = d->pshard;
      *mu = d->mu16 ? d->mu_out : d->mu;
      *nu = d->nu;
    }
  return GT_OK;
}

void gt_fsdp_shard_state_done(gt_fsdp *f) {
  for (int i = 0; f && i < f->N; i++) {
    if (f->devs[i].mu_out) gt_mem_free(f->devs[i].mu_out_mem, f->devs[i].mu_out);
    f->devs[i].mu_out = NULL;
  }
}

int64_t gt_fsdp_opt_step(const gt_fsdp *f) { return f->step_t; }
void gt_fsdp_set_opt_step(gt_fsdp *f, int64_t t) { f->step_t = t; }
void gt_fsdp_set_step(gt_fsdp *f, int64_t step) { f->lora_step = step; }
const gt_config *gt_fsdp_config(const gt_fsdp *f) { return &f->cfg; }

gt_rc gt_fsdp_set_state(gt_fsdp *f, float *params, const float *mu, const float *nu, int64_t opt_step, gt_err *err) {
  (void)err;
  f->frozen_sum = gt_model_frozen_sum(&f->devs[0].model, params);
  f->full_scatter = &params;
  f->set_mu = mu;
  f->set_nu = nu;
  gt_mesh_run(f->mesh, gt__scatter_init, f);
  f->full_scatter = NULL;
  f->set_mu = f->set_nu = NULL;
  for (int i = 0; i < f->N; i++)
    if (!mu || !nu) { /* parameters only: fresh moments */
      if (f->devs[i].mu16) memset(f->devs[i].mu16, 0, (size_t)f->devs[i].shard_n * sizeof(uint16_t));
      else memset(f->devs[i].mu, 0, (size_t)f->devs[i].shard_n * sizeof(float));
      memset(f->devs[i].nu, 0, (size_t)f->devs[i].shard_n * sizeof(float));
    }
  f->step_t = opt_step;
  return GT_OK;
}

void gt_fsdp_full_bf16_copy(gt_fsdp *f, int on) { f->full_bf16_copy = on; }

void gt_fsdp_poison_next_step(gt_fsdp *f) { f->poison_next = 1; }

float *gt_fsdp_trainable_shard(gt_fsdp *f, int dev, int64_t *n) {
  *n = f->devs[dev].shard_n;
  return f->devs[dev].pshard;
}

void gt_fsdp_trainable_from_full(gt_fsdp *f, int dev, const float *full, float *out) {
  gt__dev *d = &f->devs[dev];
  for (int64_t u = 0; u < f->n_units; u++)
    gt__local_copy(d, u, out + d->shard_off[u], (float *)full, gt__tbeg(d, u), gt__tlen(d, u), 0);
}

gt_rc gt_fsdp_set_trace(gt_fsdp *f, gt_trace *tr, gt_err *err) {
  if (tr && f->measure)
    return gt_err_set(err, GT_ERR_ARG, "fsdp: an allocation-only mesh computes nothing to trace (its probes are the plan's)");
  if (tr && gt_trace_devices(tr) < f->N)
    return gt_err_set(err, GT_ERR_ARG, "fsdp: the trace has %d device lanes; expected %d", gt_trace_devices(tr), f->N);
  for (int i = 0; i < f->N; i++) {
    gt__dev *d = &f->devs[i];
    gt_trace_lane *lane = gt_trace_device(tr, i);
    /* a profile someone else hung (gemtrain bench) keeps counting; else
     * the device's own, only while traced, so GT_PROF costs nothing after */
    if (lane && !d->model.prof) {
      memset(&d->tprof, 0, sizeof d->tprof);
      d->model.prof = &d->tprof;
    }
    if (d->model.prof) d->model.prof->trace = lane;
    if (!lane && d->model.prof == &d->tprof) d->model.prof = NULL;
    gt_trace_watch_mem(lane, &d->mem);
  }
  gt_mesh_set_trace(f->mesh, tr);
  f->trace = tr;
  return GT_OK;
}
