/* gemtrain tracked allocator: every large buffer is allocated with a category,
 * and the tracker knows the bytes in use and the peak, per category and in
 * total, so the measured peak can be held against the memory plan.
 *
 * A gt_mem is one "device" worth of memory (the single-process trainer has
 * one; the sharded executor has one per worker). Counters are atomic, so
 * several threads may allocate against one tracker. */
#ifndef GEMTRAIN_ALLOC_H
#define GEMTRAIN_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_mem_cat {
  GT_MEM_PARAMS = 0,  /* model parameters */
  GT_MEM_GRADS,       /* parameter gradients */
  GT_MEM_OPTIM,       /* optimizer moments */
  GT_MEM_SAVED,       /* activations saved across the forward for backward */
  GT_MEM_TEMP,        /* a layer's temporaries, freed before the next layer */
  GT_MEM_LOGITS,      /* output-head logits (one vocab tile at a time) */
  GT_MEM_GATHERED,    /* all-gathered weights (sharded runs) */
  GT_MEM_HOST,        /* the "host" pool of offloaded activations */
  GT_MEM_DATA,        /* token batches and dataset buffers */
  GT_MEM_KVCACHE,     /* decoding: keys and values of past positions */
  GT_MEM_OTHER,
  GT_MEM_NCAT
} gt_mem_cat;

typedef struct gt_mem {
  _Atomic int64_t cur[GT_MEM_NCAT];
  _Atomic int64_t peak[GT_MEM_NCAT];
  _Atomic int64_t total_cur;
  _Atomic int64_t total_peak;
  _Atomic int64_t n_allocs;
} gt_mem;

void gt_mem_init(gt_mem *m);
/* 64-byte aligned, zero-filled. Returns NULL on failure (or bytes == 0 gives a
 * valid minimal block). */
void *gt_mem_alloc(gt_mem *m, gt_mem_cat cat, size_t bytes);
/* The same without zero-filling, for buffers that are written in full before
 * they are read (activations): zeroing them would be pure memory traffic. */
void *gt_mem_alloc_uninit(gt_mem *m, gt_mem_cat cat, size_t bytes);
void gt_mem_free(gt_mem *m, void *p);
/* Forget the peaks (keep current usage): used to measure one step. */
void gt_mem_reset_peaks(gt_mem *m);
int64_t gt_mem_cur(const gt_mem *m, gt_mem_cat cat);
int64_t gt_mem_peak(const gt_mem *m, gt_mem_cat cat);
/* Totals cover the device categories: everything but GT_MEM_HOST. */
int64_t gt_mem_total_cur(const gt_mem *m);
int64_t gt_mem_total_peak(const gt_mem *m);
const char *gt_mem_cat_name(gt_mem_cat cat);

#ifdef __cplusplus
}
#endif
#endif
