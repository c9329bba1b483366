/* The fit search (train/fit.h): rank every setting of the memory knobs by
 * its estimated step FLOPs, then plan them fastest first until one fits. A
 * plan that does not fit rules out every setting of the same non-monotone
 * knobs (the remat policy and scope) that is no more frugal on each monotone
 * knob, so a remat choice whose most frugal setting does not fit costs one
 * plan. */
#include "train/fit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/flops.h"
#include "model/layer.h"
#include "model/model.h"
#include "model/remat.h"
#include "train/plan.h"

#define GT__MAX_VALS 24

/* One value of a knob: the keys it sets (at most two). */
typedef struct gt__val {
  int n;
  gt_fit_kv kv[2];
} gt__val;

typedef struct gt__knob {
  const char *what; /* for the report */
  int monotone;     /* a later value never needs more memory than an earlier one */
  int fixed;        /* it changes memory no other knob changes (the state: gt__fixed) */
  /* base's values, fastest first; returns how many */
  int (*values)(const gt_config *base, gt__val *v, int max);
} gt__knob;

static void gt__kv(gt__val *v, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void gt__kv(gt__val *v, const char *key, const char *fmt, ...) {
  gt_fit_kv *kv = &v->kv[v->n++];
  snprintf(kv->key, sizeof kv->key, "%s", key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(kv->value, sizeof kv->value, fmt, ap);
  va_end(ap);
}

/* The micro-batch: k micro-batches of 1/k of the global batch each, for
 * every k that divides it, the global batch per step unchanged. */
static int gt__micro_values(const gt_config *c, gt__val *v, int max) {
  long long G = gt_config_global_batch(c), n = 0;
  for (long long k = 1; k <= G && n < max; k++) {
    if (G % k || c->gradient_accumulation_steps * k > (1 << 20)) continue;
    double b = c->per_device_batch_size / (double)k;
    char t[48];
    snprintf(t, sizeof t, "%.15g", b); /* 4/3 prints as 1.33333333333333; the config reads it back */
    v[n] = (gt__val){0};
    gt__kv(&v[n], "per_device_batch_size", "%s", t);
    gt__kv(&v[n], "gradient_accumulation_steps", "%lld", c->gradient_accumulation_steps * k);
    n++;
  }
  return (int)n;
}

/* The head's tiles: base's and the powers of two up to 256 (a tile of 1/256
 * of the rows is already small next to the rest of the step). */
static int gt__tiling_values(const gt_config *c, gt__val *v, int max) {
  long long t[16];
  int n = 0;
  for (long long p = 1; p <= 256; p *= 2) t[n++] = p;
  int have = 0;
  for (int i = 0; i < n; i++) have |= t[i] == c->num_vocab_tiling;
  if (!have) t[n++] = c->num_vocab_tiling;
  for (int i = 1; i < n; i++) /* ascending: more tiles, smaller logits */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      long long x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  int m = 0;
  for (int i = 0; i < n && m < max; i++) {
    v[m] = (gt__val){0};
    gt__kv(&v[m++], "num_vocab_tiling", "%lld", t[i]);
  }
  return m;
}

/* AdamW's first moment: float32 to bfloat16, never back (a bf16 moment the
 * user chose saves memory at no cost in speed). */
static int gt__mu_values(const gt_config *c, gt__val *v, int max) {
  int n = 0;
  if (strcmp(c->mu_dtype, "bfloat16") && n < max) {
    v[n] = (gt__val){0};
    gt__kv(&v[n++], "mu_dtype", "float32");
  }
  if (n < max) {
    v[n] = (gt__val){0};
    gt__kv(&v[n++], "mu_dtype", "bfloat16");
  }
  return n;
}

/* The remat policy and scope: the user's first, then none and MaxText's
 * policies from the most kept to full, in layer scope, then in block scope.
 * The offloaded policies are left out: the host pool is this machine's
 * memory too, so offloading moves bytes without lowering what the run needs
 * (gt_plan_total_bytes). */
static int gt__remat_values(const gt_config *c, gt__val *v, int max) {
  static const char *const pol[] = {"none",
                                    "minimal_with_context",
                                    "minimal",
                                    "save_dot_with_context_except_mlp",
                                    "save_dot_except_mlpwi",
                                    "save_dot_except_mlp",
                                    "save_qkv_proj",
                                    "save_out_proj",
                                    "full"};
  static const char *const scope[] = {"layer", "block"};
  int n = 0;
  v[n] = (gt__val){0};
  gt__kv(&v[n], "remat_policy", "%s", c->remat_policy);
  gt__kv(&v[n++], "remat_scope", "%s", c->remat_scope);
  for (int s = 0; s < 2; s++)
    for (size_t p = 0; p < sizeof pol / sizeof pol[0] && n < max; p++) {
      if (!strcmp(pol[p], c->remat_policy) && !strcmp(scope[s], c->remat_scope)) continue;
      v[n] = (gt__val){0};
      gt__kv(&v[n], "remat_policy", "%s", pol[p]);
      gt__kv(&v[n++], "remat_scope", "%s", scope[s]);
    }
  return n;
}

/* The knobs, in the order that breaks a tie of estimated FLOPs (fit.h). A
 * new knob is a row: its values fastest first, monotone when each needs no
 * more memory than the one before. */
static const gt__knob gt__knobs[] = {
    {"mu_dtype", 1, 1, gt__mu_values},
    {"micro-batches (gradient_accumulation_steps)", 1, 0, gt__micro_values},
    {"num_vocab_tiling", 1, 0, gt__tiling_values},
    {"remat_policy and remat_scope", 0, 0, gt__remat_values},
};
#define GT__NK ((int)(sizeof gt__knobs / sizeof gt__knobs[0]))
_Static_assert(GT__NK <= GT_FIT_MAX_KNOBS, "raise GT_FIT_MAX_KNOBS");
_Static_assert(GT__NK * 2 <= GT_FIT_MAX_SET, "raise GT_FIT_MAX_SET");

/* The memory no knob changes, named for "... alone are N GiB". A category
 * of fixed state (a frozen base, ...) is a row. */
static const struct {
  gt_mem_cat cat;
  const char *name;
} gt__fixed[] = {
    {GT_MEM_PARAMS, "parameters"},
    {GT_MEM_GRADS, "gradients"},
    {GT_MEM_OPTIM, "AdamW moments"},
    {GT_MEM_FROZEN, "the frozen base"},
};
#define GT__NFIXED ((int)(sizeof gt__fixed / sizeof gt__fixed[0]))

typedef struct gt__space {
  int nv[GT__NK];
  gt__val v[GT__NK][GT__MAX_VALS];
} gt__space;

static void gt__space_of(const gt_config *base, gt__space *sp) {
  for (int k = 0; k < GT__NK; k++) sp->nv[k] = gt__knobs[k].values(base, sp->v[k], GT__MAX_VALS);
}

static gt_rc gt__apply(const gt_config *base, const gt__space *sp, const int *idx, gt_config *cfg, gt_err *err) {
  *cfg = *base;
  for (int k = 0; k < GT__NK; k++) {
    const gt__val *v = &sp->v[k][idx[k]];
    for (int j = 0; j < v->n; j++) {
      gt_rc rc = gt_config_set(cfg, v->kv[j].key, v->kv[j].value, "the fit search", err);
      if (rc) return rc;
    }
  }
  return gt_config_validate(cfg, err);
}

int gt_fit_cmp(const gt_fit_setting *a, const gt_fit_setting *b) {
  /* the same FLOPs to rounding are a tie */
  double tol = 1e-9 * fmax(fabs(a->tflops), fabs(b->tflops));
  if (a->tflops < b->tflops - tol) return -1;
  if (a->tflops > b->tflops + tol) return 1;
  for (int k = 0; k < GT__NK; k++)
    if (a->idx[k] != b->idx[k]) return a->idx[k] < b->idx[k] ? -1 : 1;
  return 0;
}

static int gt__cmp_q(const void *a, const void *b) { return gt_fit_cmp(a, b); }

/* The forward FLOPs of the ops recomputed for layer l (exec.c's restore: the
 * ops whose outputs the policy dropped, and in block scope the output of a
 * layer whose successor in the block kept no input). Matmuls and attention
 * only, as MaxText counts; norms and elementwise ops are left out. */
static double gt__layer_recompute(const gt_model *m, int64_t l, double B, double T) {
  const gt_layer_desc *L = &m->layers[l];
  uint8_t have[GT_A_NSLOTS];
  for (int k = 0; k < GT_A_NSLOTS; k++)
    have[k] = k == GT_A_X_IN || gt_remat_slot_mode(&m->remat, L, k) != GT_SAVE_REMAT || !gt_layer_has_slot(L, (gt_act)k);
  uint32_t ops = gt_layer_recompute_ops(L, have);
  int64_t period = m->remat.block_scope ? m->remat.period : 1, end = (l / period + 1) * period;
  if (l + 1 < end && l + 1 < m->n_layers &&
      gt_remat_slot_mode(&m->remat, &m->layers[l + 1], GT_A_X_IN) == GT_SAVE_REMAT)
    ops |= gt_layer_output_op(L);
  if (!ops) return 0;
  uint8_t out[GT_A_NSLOTS];
  gt_layer_ops_outputs(L, ops, out);
  double N = B * T, d = (double)m->d, H = L->n_heads, hd = L->head_dim, K = L->n_kv_heads, F = L->mlp_dim;
  double P = L->ple_dim, f = 0;
  /* a projection's product, and its adapter's two (2 N r (in + out)) when it has one */
#define GT__PROJ(slot, in, out) (2 * N * (in) * (out) + (L->lora_a_rel[slot] >= 0 ? 2 * N * m->lora_rank * ((in) + (out)) : 0))
  if (out[GT_A_Q_RAW]) f += GT__PROJ(GT_P_WQ, d, H * hd);
  if (out[GT_A_K_RAW]) f += GT__PROJ(GT_P_WK, d, K * hd);
  /* Gemma 3's value projection writes value_proj; Gemma 4's writes value_raw */
  if (out[GT_A_V_RAW] || (out[GT_A_V] && !L->gemma4)) f += GT__PROJ(GT_P_WV, d, K * hd);
  if (out[GT_A_CTX]) f += gt_flops_attention_forward(B, T, H, hd, L->kind == GT_LAYER_GLOBAL ? 0 : L->window);
  if (out[GT_A_O]) f += GT__PROJ(GT_P_WO, H * hd, d);
  if (out[GT_A_GATE]) f += GT__PROJ(GT_P_W_GATE, d, F);
  if (out[GT_A_UP]) f += GT__PROJ(GT_P_W_UP, d, F);
  if (out[GT_A_F]) f += GT__PROJ(GT_P_W_DOWN, F, d);
  if (out[GT_A_PLE_GATE]) f += GT__PROJ(GT_P_PLE_GATE, d, P);
  if (out[GT_A_PLE_PROJ]) f += GT__PROJ(GT_P_PLE_PROJ, P, d);
#undef GT__PROJ
  if (out[GT_A_MOE_OUT]) /* the router and the top-k experts' three products (flops.c) */
    f += 2 * N * d * L->n_experts + L->experts_per_tok * 3 * 2 * N * (double)L->moe_mlp_dim * d;
  return f;
}

static double gt__recompute(const gt_model *m, const gt_config *c) {
  double f = 0;
  for (int64_t l = 0; l < m->n_layers; l++)
    f += gt__layer_recompute(m, l, c->per_device_batch_size, (double)c->max_target_length);
  return (double)c->gradient_accumulation_steps * f / 1e12;
}

double gt_fit_recompute_tflops(const gt_config *c) {
  gt_model m;
  gt_err err;
  if (gt_model_build(&m, c, &err)) return 0;
  double f = gt__recompute(&m, c);
  gt_model_free(&m);
  return f;
}

static gt_rc gt__estimate(const gt_config *c, gt_fit_setting *s, gt_err *err) {
  gt_model m;
  gt_rc rc = gt_model_build(&m, c, err);
  if (rc) return rc;
  s->recompute_tflops = gt__recompute(&m, c);
  s->tflops = gt_flops_of_model(&m, c).total_tflops + s->recompute_tflops;
  gt_model_free(&m);
  return GT_OK;
}

gt_rc gt_fit_setting_config(const gt_config *base, const gt_fit_setting *s, gt_config *cfg, gt_err *err) {
  gt__space *sp = malloc(sizeof *sp);
  if (!sp) return gt_err_set(err, GT_ERR_NOMEM, "fit: no memory");
  gt__space_of(base, sp);
  gt_rc rc = GT_OK;
  for (int k = 0; k < GT__NK && !rc; k++)
    if (s->idx[k] < 0 || s->idx[k] >= sp->nv[k]) rc = gt_err_set(err, GT_ERR_ARG, "fit: no such setting");
  if (!rc) rc = gt__apply(base, sp, s->idx, cfg, err);
  free(sp);
  return rc;
}

gt_rc gt_fit_settings(const gt_config *base, gt_fit_setting **out, int *n_out, gt_err *err) {
  *out = NULL;
  *n_out = 0;
  gt__space *sp = malloc(sizeof *sp);
  gt_config *cfg = malloc(sizeof *cfg);
  gt_fit_setting *all = NULL;
  gt_rc rc = GT_OK;
  if (!sp || !cfg) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fit: no memory");
    goto out;
  }
  gt__space_of(base, sp);
  long long total = 1;
  for (int k = 0; k < GT__NK; k++) total *= sp->nv[k];
  if (!(all = malloc(sizeof *all * (size_t)(total ? total : 1)))) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fit: no memory for %lld settings", total);
    goto out;
  }
  int n = 0;
  for (long long i = 0; i < total; i++) {
    gt_fit_setting s;
    memset(&s, 0, sizeof s);
    long long r = i;
    for (int k = GT__NK - 1; k >= 0; k--) s.idx[k] = (int)(r % sp->nv[k]), r /= sp->nv[k];
    gt_err e;
    gt_err_clear(&e);
    /* a setting the config refuses (tiles that do not divide the rows, ...) is not one */
    if (gt__apply(base, sp, s.idx, cfg, &e) || gt__estimate(cfg, &s, &e)) continue;
    all[n++] = s;
  }
  qsort(all, (size_t)n, sizeof *all, gt__cmp_q);
  *out = all;
  *n_out = n;
  all = NULL;
out:
  free(all);
  free(cfg);
  free(sp);
  return rc;
}

/* Is a planned setting p no less frugal than s on every monotone knob, with
 * the same value on the others? Then s needs at least p's memory. */
static int gt__covers(const gt_fit_setting *p, const gt_fit_setting *s) {
  for (int k = 0; k < GT__NK; k++)
    if (gt__knobs[k].monotone ? p->idx[k] < s->idx[k] : p->idx[k] != s->idx[k]) return 0;
  return 1;
}

typedef struct gt__planned {
  int i; /* the setting */
  int fits;
  int64_t need, peak, fixed;
} gt__planned;

/* The keys of s whose value differs from base's, in knob order. */
static int gt__diff(const gt_config *base, const gt_config *cfg, const gt__space *sp, const gt_fit_setting *s,
                    gt_fit_kv *set) {
  int n = 0;
  for (int k = 0; k < GT__NK; k++) {
    const gt__val *v = &sp->v[k][s->idx[k]];
    for (int j = 0; j < v->n && n < GT_FIT_MAX_SET; j++) {
      char a[GT_STR_PATH], b[GT_STR_PATH];
      gt_err e;
      if (gt_config_get_text(base, v->kv[j].key, a, sizeof a, &e) ||
          gt_config_get_text(cfg, v->kv[j].key, b, sizeof b, &e) || strcmp(a, b))
        set[n++] = v->kv[j];
    }
  }
  return n;
}

/* "59.2 GiB", or MiB below one GiB */
static const char *gt__size(int64_t b, char *buf, size_t n) {
  if (b >= 1073741824LL)
    snprintf(buf, n, "%.1f GiB", (double)b / 1073741824.0);
  else
    snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
  return buf;
}

static void gt__explain(gt_fit *f, int64_t limit, const gt_plan *lp, const gt__space *sp, const gt_fit_setting *least) {
  char names[160] = "";
  size_t o = 0;
  int nn = 0;
  for (int i = 0; i < GT__NFIXED; i++)
    if (lp->at_peak[gt__fixed[i].cat]) nn++;
  for (int i = 0, j = 0; i < GT__NFIXED; i++) {
    if (!lp->at_peak[gt__fixed[i].cat]) continue;
    j++;
    o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0, "%s%s",
                          j == 1 ? "" : j == nn ? " and " : ", ", gt__fixed[i].name);
  }
  /* the state alone: only the knobs that change it are named */
  int alone = f->fixed_bytes > limit;
  char with[300] = "";
  o = 0;
  for (int i = 0, m = 0; i < f->n_least; i++) {
    int fixed_knob = 0;
    for (int k = 0; k < GT__NK; k++)
      for (int j = 0; j < sp->v[k][least->idx[k]].n; j++)
        if (!strcmp(sp->v[k][least->idx[k]].kv[j].key, f->least[i].key)) fixed_knob = gt__knobs[k].fixed;
    if (alone && !fixed_knob) continue;
    o += (size_t)snprintf(with + o, o < sizeof with ? sizeof with - o : 0, "%s%s=%s", m++ ? " " : "",
                          f->least[i].key, f->least[i].value);
  }
  char a[32], b[32], c[32], d[32];
  if (alone)
    snprintf(f->why, sizeof f->why, "%s alone are %s%s%s%s, over the limit of %s", names,
             gt__size(f->fixed_bytes, a, sizeof a), with[0] ? " (with " : "", with, with[0] ? ")" : "",
             gt__size(limit, b, sizeof b));
  else
    snprintf(f->why, sizeof f->why,
             "the least memory searched is %s%s%s%s, over the limit of %s: %s are %s, and one micro-batch's "
             "activations, logits and temporaries the other %s",
             gt__size(f->need_bytes, a, sizeof a), with[0] ? " (with " : "", with, with[0] ? ")" : "",
             gt__size(limit, b, sizeof b), names, gt__size(f->fixed_bytes, c, sizeof c),
             gt__size(f->need_bytes - f->fixed_bytes, d, sizeof d));
}

/* Plans setting x (once: a setting planned before is looked up) into pl;
 * returns its row, -1 when the setting cannot be planned (skipped), -2 when
 * memory ran out (err set). Keeps the least need of what did not fit. */
static int gt__plan_one(const gt_config *base, const gt__space *sp, const gt_fit_setting *s, int x, int64_t limit,
                        gt_config *cfg, gt__planned *pl, int *np, gt_fit *f, int *least, gt_plan *least_plan,
                        gt_err *err) {
  for (int j = 0; j < *np; j++)
    if (pl[j].i == x) return j;
  gt_err e;
  gt_err_clear(&e);
  if (gt__apply(base, sp, s[x].idx, cfg, &e)) return -1;
  gt_plan p;
  gt_rc rc = gt_plan_compute(&p, cfg, &e);
  if (rc == GT_ERR_NOMEM) {
    *err = e;
    return -2;
  }
  if (rc) return -1;
  gt__planned q = {x, 0, gt_plan_total_bytes(&p), p.peak_total, 0};
  q.fits = q.need <= limit;
  int64_t nd = p.n_devices > 1 ? p.n_devices : 1;
  for (int c = 0; c < GT__NFIXED; c++) q.fixed += nd * p.at_peak[gt__fixed[c].cat];
  if (!q.fits && q.need < f->need_bytes) {
    f->need_bytes = q.need;
    f->fixed_bytes = q.fixed;
    *least = x;
    *least_plan = p;
    least_plan->saved_per_layer = NULL; /* the figures stay, the array goes */
  }
  gt_plan_free(&p);
  pl[*np] = q;
  return (*np)++;
}

gt_rc gt_fit_search(const gt_config *base, int64_t limit, gt_fit *f, gt_err *err) {
  memset(f, 0, sizeof *f);
  f->need_bytes = INT64_MAX;
  gt_fit_setting self;
  gt_rc rc = gt__estimate(base, &self, err);
  if (rc) return rc;
  f->base_tflops = self.tflops;
  gt_fit_setting *s = NULL;
  int n = 0;
  if ((rc = gt_fit_settings(base, &s, &n, err))) return rc;
  f->n_settings = n;
  gt__space *sp = malloc(sizeof *sp);
  gt_config *cfg = malloc(sizeof *cfg);
  gt__planned *pl = malloc(sizeof *pl * (size_t)(n ? n : 1));
  int np = 0, least = -1;
  gt_plan least_plan;
  memset(&least_plan, 0, sizeof least_plan); /* figures only: no arrays */
  if (!sp || !cfg || !pl) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "fit: no memory");
    goto out;
  }
  gt__space_of(base, sp);
  for (int i = 0; i < n && !f->found; i++) {
    int ruled_out = 0;
    for (int j = 0; j < np && !ruled_out; j++) ruled_out = !pl[j].fits && gt__covers(&s[pl[j].i], &s[i]);
    if (ruled_out) continue;
    /* before it, the most frugal settings that cover it, from the whole
     * remat group's down to those that keep its value on each knob in
     * turn: one that does not fit rules out everything it covers (a micro-
     * batch size whose most frugal tiling does not fit costs one plan) */
    int out_now = 0;
    for (int lv = 0; lv < GT__NK && !out_now; lv++) {
      int corner = -1, best_sum = -1;
      for (int j = 0; j < n; j++) {
        int same = gt__covers(&s[j], &s[i]);
        for (int k = 0; k < lv && same; k++) same = s[j].idx[k] == s[i].idx[k];
        if (!same || j == i) continue;
        int sum = 0;
        for (int k = 0; k < GT__NK; k++) sum += s[j].idx[k];
        if (sum > best_sum) best_sum = sum, corner = j;
      }
      if (corner < 0) continue;
      int c = gt__plan_one(base, sp, s, corner, limit, cfg, pl, &np, f, &least, &least_plan, err);
      if (c == -2) {
        rc = GT_ERR_NOMEM;
        goto out;
      }
      out_now = c >= 0 && !pl[c].fits;
    }
    if (out_now) continue;
    int c = gt__plan_one(base, sp, s, i, limit, cfg, pl, &np, f, &least, &least_plan, err);
    if (c == -2) {
      rc = GT_ERR_NOMEM;
      goto out;
    }
    if (c >= 0 && pl[c].fits) {
      f->found = 1;
      f->best = s[i];
      f->need_bytes = pl[c].need;
      f->peak_bytes = pl[c].peak;
      f->fixed_bytes = pl[c].fixed;
      if ((rc = gt__apply(base, sp, s[i].idx, &f->cfg, err))) goto out;
      f->n_set = gt__diff(base, &f->cfg, sp, &s[i], f->set);
    }
  }
  f->n_planned = np;
  if (!f->found && least >= 0) {
    gt_err e;
    if (!gt__apply(base, sp, s[least].idx, cfg, &e)) f->n_least = gt__diff(base, cfg, sp, &s[least], f->least);
    gt__explain(f, limit, &least_plan, sp, &s[least]);
  } else if (!f->found) {
    f->need_bytes = 0;
    snprintf(f->why, sizeof f->why, "no setting searched could be planned");
  }
out:
  free(pl);
  free(cfg);
  free(sp);
  free(s);
  return rc;
}
