#define _POSIX_C_SOURCE 200809L
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Each block carries a 64-byte header in front of the user pointer, so free
 * knows the size and category without a side table, and the user pointer
 * stays 64-byte aligned (one cache line, one AVX-512 vector). */
#define GT__HDR 64
#define GT__MAGIC 0x67744d454dull /* "gtMEM" */

typedef struct gt__hdr {
  uint64_t magic;
  uint64_t bytes;
  int32_t cat;
} gt__hdr;

static void gt__raise_peak(_Atomic int64_t *peak, int64_t v) {
  int64_t p = atomic_load(peak);
  while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {
  }
}

void gt_mem_init(gt_mem *m) {
  for (int i = 0; i < GT_MEM_NCAT; i++) {
    atomic_init(&m->cur[i], 0);
    atomic_init(&m->peak[i], 0);
  }
  atomic_init(&m->total_cur, 0);
  atomic_init(&m->total_peak, 0);
  atomic_init(&m->n_allocs, 0);
}

static void *gt__alloc(gt_mem *m, gt_mem_cat cat, size_t bytes, int zero) {
  if ((int)cat < 0 || cat >= GT_MEM_NCAT) return NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes) return NULL; /* overflow */
  void *raw = NULL;
  if (posix_memalign(&raw, 64, GT__HDR + rounded) != 0) return NULL;
  if (zero) memset(raw, 0, GT__HDR + rounded);
  gt__hdr *h = raw;
  h->magic = GT__MAGIC;
  h->bytes = bytes;
  h->cat = (int32_t)cat;
  int64_t c = atomic_fetch_add(&m->cur[cat], (int64_t)bytes) + (int64_t)bytes;
  gt__raise_peak(&m->peak[cat], c);
  if (cat != GT_MEM_HOST) { /* the host pool is counted apart from the device */
    int64_t t = atomic_fetch_add(&m->total_cur, (int64_t)bytes) + (int64_t)bytes;
    gt__raise_peak(&m->total_peak, t);
  }
  atomic_fetch_add(&m->n_allocs, 1);
  return (char *)raw + GT__HDR;
}

void *gt_mem_alloc(gt_mem *m, gt_mem_cat cat, size_t bytes) { return gt__alloc(m, cat, bytes, 1); }
void *gt_mem_alloc_uninit(gt_mem *m, gt_mem_cat cat, size_t bytes) { return gt__alloc(m, cat, bytes, 0); }

void gt_mem_free(gt_mem *m, void *p) {
  if (!p) return;
  gt__hdr *h = (gt__hdr *)((char *)p - GT__HDR);
  if (h->magic != GT__MAGIC) abort(); /* not ours: a bug, stop loudly */
  h->magic = 0;
  atomic_fetch_sub(&m->cur[h->cat], (int64_t)h->bytes);
  if (h->cat != GT_MEM_HOST) atomic_fetch_sub(&m->total_cur, (int64_t)h->bytes);
  atomic_fetch_sub(&m->n_allocs, 1);
  free(h);
}

void gt_mem_reset_peaks(gt_mem *m) {
  for (int i = 0; i < GT_MEM_NCAT; i++) atomic_store(&m->peak[i], atomic_load(&m->cur[i]));
  atomic_store(&m->total_peak, atomic_load(&m->total_cur));
}

int64_t gt_mem_cur(const gt_mem *m, gt_mem_cat c) { return atomic_load(&m->cur[c]); }
int64_t gt_mem_peak(const gt_mem *m, gt_mem_cat c) { return atomic_load(&m->peak[c]); }
int64_t gt_mem_total_cur(const gt_mem *m) { return atomic_load(&m->total_cur); }
int64_t gt_mem_total_peak(const gt_mem *m) { return atomic_load(&m->total_peak); }

const char *gt_mem_cat_name(gt_mem_cat c) {
  static const char *names[GT_MEM_NCAT] = {"params", "grads", "optimizer", "saved_activations",
                                            "temporaries", "logits", "gathered_weights",
                                            "host_pool", "data", "kv_cache", "other"};
  return (int)c >= 0 && c < GT_MEM_NCAT ? names[c] : "?";
}
