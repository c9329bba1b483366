/* Internal: carving one block into 64-byte aligned arrays. Run once with a
 * NULL base to size a layout and once with the block to bind it, so the
 * byte count a plan reserves is by construction the one the code uses. */
#ifndef GEMTRAIN_KERNELS_MOE_CARVE_H
#define GEMTRAIN_KERNELS_MOE_CARVE_H

#include <stddef.h>

typedef struct gt__carve {
  char *base; /* NULL: only count */
  size_t off;
} gt__carve;

static inline void *gt__carve_take(gt__carve *c, size_t n, size_t elem) {
  void *p = c->base ? c->base + c->off : NULL;
  c->off += (n * elem + 63) & ~(size_t)63;
  return p;
}

#endif
