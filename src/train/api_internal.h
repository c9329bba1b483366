/* What the library's own tests and the command may ask of a gt_ctx beyond
 * the public API. */
#ifndef GT_TRAIN_API_INTERNAL_H
#define GT_TRAIN_API_INTERNAL_H

#include "config/config.h"
#include "gemtrain/gemtrain.h"

/* The resolved configuration (read-only; valid until the next configure or
 * set), or NULL before gt_ctx_configure. */
const gt_config *gt__ctx_config(const gt_ctx *c);
/* The trainer of an initialised context (NULL before gt_ctx_init). */
struct gt_trainer *gt__ctx_trainer(gt_ctx *c);

#endif
