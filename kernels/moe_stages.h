/* Internal: the routed MoE's forward and backward as a fixed sequence of
 * stages (kernels/moe.c). gt_moe_forward_partial and gt_moe_backward are
 * exactly "every stage in order"; `gemtrain bench moe` runs the same
 * sequence with a clock between stages, and the expert products alone, so
 * what it times is what a step runs. Private to kernels/ and the bench. */
#ifndef GEMTRAIN_KERNELS_MOE_STAGES_H
#define GEMTRAIN_KERNELS_MOE_STAGES_H

#include "kernels/moe.h"

/* Scratch, one layout for forward and backward (the forward uses a subset);
 * M = N*k rows, the most one rank can be routed. */
typedef struct gt__moe_work {
  float *a;      /* [N,d] rin; in backward also the router's normalised h */
  float *b;      /* [N,d] backward: dL/dsum */
  float *c;      /* [N,d] backward: dL/drin, then gate_in */
  float *logits; /* [N,E] forward: logits; backward: dL/dP, then dL/dlogits */
  float *x;      /* [M,d] rows of rin, sorted; backward end: dL/dgate_in */
  float *y;      /* [M,d] forward: expert outputs; backward: dL/dsum rows, then dL/drin rows */
  float *act;    /* [M,F] gelu(gate) * up */
  float *hf;     /* [M,F] backward: dL/dact before and after the weight */
  float *dgu;    /* [M,2F] backward: dL/dgate then dL/dup of each row, as saved gu */
  float *dw;     /* [M]   backward: dL/dw of each sorted row */
} gt__moe_work;

/* One forward or backward call's arguments and its carved scratch. */
typedef struct gt__moe_pass {
  gt_moe_saved *s;
  const float *h;
  const gt_moe_weights *w;
  const gt_moe_dims *d;
  gt__moe_work wk;
  /* backward only */
  float *dh;
  const gt_moe_grads *g;
  const float *dout;
  float dlb;
} gt__moe_pass;

enum { GT__MOE_F_ROUTER, GT__MOE_F_SORT, GT__MOE_F_GATHER, GT__MOE_F_EXPERTS, GT__MOE_F_COMBINE, GT__MOE_FWD_STAGES };
enum {
  GT__MOE_B_POST,
  GT__MOE_B_GATHER,
  GT__MOE_B_EXPERTS,
  GT__MOE_B_COMBINE,
  GT__MOE_B_PRE,
  GT__MOE_B_ROUTER,
  GT__MOE_BWD_STAGES
};

/* The forward's arguments (work: gt_moe_work_bytes); the backward's are set
 * in the fields after. */
void gt__moe_pass_init(gt__moe_pass *p, gt_moe_saved *s, const float *h, const gt_moe_weights *w,
                       const gt_moe_dims *d, void *work);
void gt__moe_fwd_stage(gt__moe_pass *p, int i);
void gt__moe_bwd_stage(gt__moe_pass *p, int i);
const char *gt__moe_stage_name(int backward, int i);

/* The expert products of a stage alone, with the stage's own calls and
 * schedule but none of its elementwise work (GeGLU, rounding, the routing
 * weight): the forward's after GT__MOE_F_GATHER has run, the backward's
 * after GT__MOE_B_GATHER (it overwrites what the next backward stages read
 * and adds into the expert gradients). For the benchmark. */
void gt__moe_products(gt__moe_pass *p, int backward);

#endif
