/* How n elements split over N devices (the mesh's rule, mesh/mesh.h):
 * device d owns [gt_shard_begin(n, N, d), gt_shard_begin(n, N, d + 1)), so
 * shards differ by at most one element and any n works. Here, below the
 * mesh, so the plan can count a shard's bytes without the mesh. */
#ifndef GEMTRAIN_SHARD_H
#define GEMTRAIN_SHARD_H

#include <stdint.h>

static inline int64_t gt_shard_begin(int64_t n, int n_dev, int d) { return n * d / n_dev; }
static inline int64_t gt_shard_len(int64_t n, int n_dev, int d) {
  return gt_shard_begin(n, n_dev, d + 1) - gt_shard_begin(n, n_dev, d);
}

#endif
