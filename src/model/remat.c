#include "model/remat.h"

#include <string.h>

enum { N_QUERY, N_KEY, N_VALUE, N_CONTEXT, N_OUT, N_WI0, N_WI1, N_WO, N_NAMES };

/* slot and the statistic kept with it. The routed experts of a MoE layer
 * are one op whose state (router statistics, every expert's gate and up
 * rows, the pre-norm sum; on an expert-parallel device also the group's
 * gathered input) is dominated by the experts' wi projections, so it goes
 * with mlpwi_0, as MaxText names the experts' gate projection. Keeping it
 * keeps the routed output too, so the op never re-runs (and never repeats
 * its collectives) when mlpwi_0 is kept. */
#define GT__PER_NAME 4
static const gt_act gt__name_slots[N_NAMES][GT__PER_NAME] = {
    [N_QUERY] = {GT_A_Q, GT_A_Q_RSTD, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_KEY] = {GT_A_K, GT_A_K_RSTD, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_VALUE] = {GT_A_V, GT_A_V_RSTD, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_CONTEXT] = {GT_A_CTX, GT_A_LSE, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_OUT] = {GT_A_O, GT_A_NSLOTS, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_WI0] = {GT_A_GATE, GT_A_MOE_SAVED, GT_A_MOE_OUT, GT_A_MOE_IN},
    [N_WI1] = {GT_A_UP, GT_A_NSLOTS, GT_A_NSLOTS, GT_A_NSLOTS},
    [N_WO] = {GT_A_F, GT_A_NSLOTS, GT_A_NSLOTS, GT_A_NSLOTS},
};

typedef struct {
  const char *name;
  unsigned keep;    /* bit set over the names */
  int offload;      /* kept names go to the host pool */
} gt__policy;

#define B(n) (1u << (n))
#define QKV (B(N_QUERY) | B(N_KEY) | B(N_VALUE))
#define MINIMAL (QKV | B(N_OUT) | B(N_WI0) | B(N_WI1) | B(N_WO))

/* MaxText decoders.py get_remat_policy / base.yml, fastest first */
static const gt__policy gt__policies[] = {
    {"minimal", MINIMAL, 0},
    {"minimal_with_context", MINIMAL | B(N_CONTEXT), 0},
    {"save_dot_with_context_except_mlp", QKV | B(N_CONTEXT) | B(N_OUT), 0},
    {"save_dot_except_mlpwi", QKV | B(N_OUT) | B(N_WO), 0},
    {"save_dot_except_mlp", QKV | B(N_OUT), 0},
    {"save_qkv_proj", QKV, 0},
    {"save_out_proj", B(N_OUT), 0},
    {"qkv_proj_offloaded", QKV, 1},
    {"minimal_offloaded", MINIMAL, 1},
    {"full", 0, 0},
};

static gt_save_mode gt__mode(const char *v) {
  return !strcmp(v, "device") ? GT_SAVE_DEVICE : !strcmp(v, "offload") ? GT_SAVE_OFFLOAD : GT_SAVE_REMAT;
}

static void gt__set_name(gt_remat *r, int n, gt_save_mode mode) {
  for (int k = 0; k < GT__PER_NAME; k++)
    if (gt__name_slots[n][k] != GT_A_NSLOTS) r->slot[gt__name_slots[n][k]] = mode;
}

gt_rc gt_remat_from_config(gt_remat *r, const gt_config *c, gt_err *err) {
  memset(r, 0, sizeof *r);
  r->block_scope = !strcmp(c->remat_scope, "block");
  r->period = (int)strlen(c->layer_pattern);
  if (r->period < 1) r->period = 1;
  r->slot[GT_A_X_IN] = GT_SAVE_DEVICE;
  if (!strcmp(c->remat_policy, "none")) {
    r->none = 1;
    for (int s = 0; s < GT_A_NSLOTS; s++) r->slot[s] = GT_SAVE_DEVICE;
    return GT_OK;
  }
  if (!strcmp(c->remat_policy, "custom")) {
    const char *v[N_NAMES] = {c->query_proj, c->key_proj, c->value_proj, c->context,
                              c->out_proj,   c->mlpwi_0,  c->mlpwi_1,    c->mlpwo};
    for (int n = 0; n < N_NAMES; n++) gt__set_name(r, n, gt__mode(v[n]));
    return GT_OK;
  }
  for (size_t i = 0; i < sizeof gt__policies / sizeof gt__policies[0]; i++)
    if (!strcmp(c->remat_policy, gt__policies[i].name)) {
      for (int n = 0; n < N_NAMES; n++)
        if (gt__policies[i].keep & B(n)) gt__set_name(r, n, gt__policies[i].offload ? GT_SAVE_OFFLOAD : GT_SAVE_DEVICE);
      return GT_OK;
    }
  return gt_err_set(err, GT_ERR_CONFIG, "remat: key 'remat_policy' = '%s' is not a known policy", c->remat_policy);
}

int gt_remat_block_start(const gt_remat *r, long long layer) {
  return !r->block_scope || layer % r->period == 0;
}

int gt_remat_carry_kept(const gt_remat *r, long long layer) { return gt_remat_block_start(r, layer) || r->none; }

gt_save_mode gt_remat_slot_mode(const gt_remat *r, const gt_layer_desc *L, int k) {
  if (k == GT_A_X_IN) return gt_remat_carry_kept(r, L->index) ? GT_SAVE_DEVICE : GT_SAVE_REMAT;
  /* A donor's K and V are read by later layers' forward and backward, across
   * their remat boundaries: they stay on the device until the donor's own
   * backward, whatever the policy (recomputing them would need the donor's
   * weights and input again, from inside another layer's boundary). */
  if (L->kv_last_reader >= 0 && (k == GT_A_K || k == GT_A_K_RSTD || k == GT_A_V || k == GT_A_V_RSTD))
    return GT_SAVE_DEVICE;
  return r->slot[k];
}
