/* Every MPI rank of a run must train the same thing: before anything is
 * built, the ranks compare their resolved configurations and refuse a
 * difference at once, naming each differing key with both ranks' values
 * (a rank launched with another seed, dataset, step count or mesh would
 * otherwise train half of a different model, or hang in a collective and
 * blame a live rank).
 *
 * Every key is compared except the host-local ones, which may differ
 * between hosts without changing what is computed: threads_per_device
 * (the host's cores; 0 resolves per host) and memory_limit_bytes (the
 * host's memory, for the plan's check). */
#ifndef GT_TRAIN_CONFIG_AGREE_H
#define GT_TRAIN_CONFIG_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* 1 for a key that may differ between ranks. */
int gt_config_key_rank_local(const char *key);
/* "key=value\n" for every compared key, in key order (malloc; NULL without
 * memory). */
char *gt_config_agreed_text(const gt_config *cfg);
/* Collective over ranks (every rank calls it at the same point; with one
 * rank it only computes the checksum): GT_ERR_CONFIG when any rank's
 * compared keys differ from rank 0's, the same message on every rank:
 * "config: the ranks disagree: rank 1 has init_weights_seed=2 where rank
 * 0 has init_weights_seed=1; ...". *checksum (if not NULL) receives this
 * rank's checksum (the same on every rank when they agree). */
gt_rc gt_config_agree_ranks(const gt_config *cfg, uint64_t *checksum, gt_err *err);

#endif
