/* The step arena's side of the tracked allocator (base/arena.c), called by
 * base/alloc.c only; the public calls are in base/alloc.h. */
#ifndef GEMTRAIN_ARENA_INTERNAL_H
#define GEMTRAIN_ARENA_INTERNAL_H

#include <stdint.h>

#include "base/alloc.h"

/* The 64 bytes in front of every block (alloc.c's header), part of each
 * arena slot too. */
#define GT__HDR 64

/* GT__ASAN under AddressSanitizer (GCC's macro or clang's feature). There
 * each slot ends in GT__ARENA_REDZONE poisoned bytes (base/arena.c); 0
 * otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define GT__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GT__ASAN 1
#endif
#endif
#ifdef GT__ASAN
#define GT__ARENA_REDZONE 64
#else
#define GT__ARENA_REDZONE 0
#endif

/* An allocation of a step: its block when the arena serves it (the header's
 * address; *slot set), else NULL for the heap, with *rec and *gen set when
 * the allocation is being recorded. */
void *gt__arena_take(struct gt_mem_arena *a, gt_mem_cat cat, size_t bytes, const char *name, int32_t *slot,
                     int32_t *rec, uint32_t *gen);
/* A served block's slot is free again. */
void gt__arena_give(struct gt_mem_arena *a, int32_t slot);
/* A recorded heap block is freed (or its allocation failed). */
void gt__arena_note_free(struct gt_mem_arena *a, int32_t rec, uint32_t gen);

#endif
