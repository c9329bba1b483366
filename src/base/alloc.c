#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include "base/alloc.h"
#include "base/arena_internal.h"

#include <pthread.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Each block carries a 64-byte header in front of the user pointer, so free
 * knows the size, category and name without a side table, and the user
 * pointer stays 64-byte aligned (one cache line, one AVX-512 vector). A
 * measuring tracker's blocks are the header alone: the user pointer is one
 * past its end, unique and freeable, with nothing behind it. */
#define GT__MAGIC 0x67744d454dull /* "gtMEM" */
/* Blocks of a recorded step from this size on are mapped (gt__alloc). */
#define GT__MAP_MIN ((size_t)1 << 20)

typedef struct gt__hdr {
  uint64_t magic;
  uint64_t bytes;
  const char *name;
  int32_t cat;
  int32_t slot; /* >= 0: the arena's slot it lives in (no system free) */
  int32_t rec;  /* >= 0: its index in the arena's record of step gen */
  uint32_t gen;
  uint64_t mapped; /* > 0: a mapping of its own of this many bytes (munmap, not free) */
} gt__hdr;
_Static_assert(sizeof(gt__hdr) <= GT__HDR, "the block header outgrew its 64 bytes");

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
  atomic_init(&m->bad_frees, 0);
  m->measuring = 0;
  memset(&m->probe, 0, sizeof m->probe);
  m->arena = NULL;
  atomic_init(&m->sys_allocs, 0);
  atomic_init(&m->sys_frees, 0);
}

void gt_mem_init_measure(gt_mem *m) {
  gt_mem_init(m);
  m->measuring = 1;
}

int gt_mem_measuring(const gt_mem *m) { return m->measuring; }

void gt_mem_set_probe(gt_mem *m, const gt_mem_probe *p) {
  if (p)
    m->probe = *p;
  else
    memset(&m->probe, 0, sizeof m->probe);
}

void gt_mem_phase(gt_mem *m, const char *fmt, ...) {
  if (!m->probe.on_phase) return;
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  m->probe.on_phase(m->probe.ctx, buf);
}

/* Fault injection and the process-wide totals (see alloc.h). Relaxed
 * atomics: the count is exact, and the tests that arm it do so between
 * runs, with no allocation in flight. */
static _Atomic int64_t gt__fault_at, gt__fault_count, gt__live_bytes, gt__live_blocks;
static _Atomic int gt__fault_fired;

void gt_mem_fault_arm(int64_t n) {
  atomic_store(&gt__fault_fired, 0);
  atomic_store(&gt__fault_count, 0);
  atomic_store(&gt__fault_at, n);
}
int64_t gt_mem_fault_count(void) { return atomic_load(&gt__fault_count); }
int gt_mem_fault_fired(void) { return atomic_load(&gt__fault_fired); }
int64_t gt_mem_process_bytes(void) { return atomic_load(&gt__live_bytes); }
int64_t gt_mem_process_blocks(void) { return atomic_load(&gt__live_blocks); }

void gt_mem_trim(void) {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

static _Atomic int64_t gt__sys_allocs, gt__sys_frees;
int64_t gt_mem_sys_allocs(void) { return atomic_load(&gt__sys_allocs); }
int64_t gt_mem_sys_frees(void) { return atomic_load(&gt__sys_frees); }


static void *gt__alloc(gt_mem *m, gt_mem_cat cat, size_t bytes, int zero, const char *name) {
  int64_t k = atomic_fetch_add_explicit(&gt__fault_count, 1, memory_order_relaxed) + 1;
  if (k == atomic_load_explicit(&gt__fault_at, memory_order_relaxed)) {
    atomic_store(&gt__fault_fired, 1);
    return NULL;
  }
  if ((int)cat < 0 || cat >= GT_MEM_NCAT) return NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes || rounded > SIZE_MAX - GT__HDR) return NULL; /* overflow */
  size_t payload = m->measuring ? 0 : rounded;
  void *raw = NULL;
  int32_t slot = -1, rec = -1;
  uint32_t gen = 0;
  if (m->arena && !m->measuring) raw = gt__arena_take(m->arena, cat, bytes, name, &slot, &rec, &gen);
  uint64_t mapped = 0;
#ifndef GT__ASAN
  /* A large block of the step the arena records gets a mapping of its own,
   * unmapped when it is freed: that step's blocks then never fragment the
   * heap (two devices' threads allocate there at once), and what the
   * process holds during it is what its blocks hold, as the plan counts. It
   * is the only step that asks the system; the pages come zeroed. (Under
   * AddressSanitizer the heap keeps them, so ASan still watches them.) */
  if (!raw && rec >= 0 && payload >= GT__MAP_MIN) {
    void *mp = mmap(NULL, GT__HDR + payload, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mp != MAP_FAILED) {
      raw = mp;
      mapped = GT__HDR + payload;
      zero = 0;
      atomic_fetch_add_explicit(&m->sys_allocs, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&gt__sys_allocs, 1, memory_order_relaxed);
    }
  }
#endif
  if (!raw) {
    if (posix_memalign(&raw, 64, GT__HDR + payload) != 0) {
      if (rec >= 0) gt__arena_note_free(m->arena, rec, gen);
      return NULL;
    }
    atomic_fetch_add_explicit(&m->sys_allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&gt__sys_allocs, 1, memory_order_relaxed);
  }
  if (zero && payload) memset((char *)raw + GT__HDR, 0, payload);
  gt__hdr *h = raw;
  memset(h, 0, GT__HDR);
  h->magic = GT__MAGIC;
  h->bytes = bytes;
  h->name = name;
  h->cat = (int32_t)cat;
  h->slot = slot;
  h->rec = rec;
  h->gen = gen;
  h->mapped = mapped;
  int64_t c = atomic_fetch_add(&m->cur[cat], (int64_t)bytes) + (int64_t)bytes;
  gt__raise_peak(&m->peak[cat], c);
  if (cat != GT_MEM_HOST) { /* the host pool is counted apart from the device */
    int64_t t = atomic_fetch_add(&m->total_cur, (int64_t)bytes) + (int64_t)bytes;
    gt__raise_peak(&m->total_peak, t);
  }
  atomic_fetch_add(&m->n_allocs, 1);
  atomic_fetch_add_explicit(&gt__live_bytes, (int64_t)bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&gt__live_blocks, 1, memory_order_relaxed);
  void *p = (char *)raw + GT__HDR;
  if (m->probe.on_alloc) m->probe.on_alloc(m->probe.ctx, p, cat, bytes, name);
  return p;
}

void *gt_mem_alloc(gt_mem *m, gt_mem_cat cat, size_t bytes) { return gt__alloc(m, cat, bytes, 1, NULL); }
void *gt_mem_alloc_uninit(gt_mem *m, gt_mem_cat cat, size_t bytes) { return gt__alloc(m, cat, bytes, 0, NULL); }
void *gt_mem_alloc_named(gt_mem *m, gt_mem_cat cat, size_t bytes, const char *name) {
  return gt__alloc(m, cat, bytes, 1, name);
}
void *gt_mem_alloc_uninit_named(gt_mem *m, gt_mem_cat cat, size_t bytes, const char *name) {
  return gt__alloc(m, cat, bytes, 0, name);
}

void gt_mem_free(gt_mem *m, void *p) {
  if (!p) return;
  gt__hdr *h = (gt__hdr *)((char *)p - GT__HDR);
  if (h->magic != GT__MAGIC || h->cat < 0 || h->cat >= GT_MEM_NCAT) {
    /* not ours (or freed twice): leave it alone and let the tests see it */
    atomic_fetch_add(&m->bad_frees, 1);
    return;
  }
  h->magic = 0;
  atomic_fetch_sub(&m->cur[h->cat], (int64_t)h->bytes);
  if (h->cat != GT_MEM_HOST) atomic_fetch_sub(&m->total_cur, (int64_t)h->bytes);
  atomic_fetch_sub(&m->n_allocs, 1);
  atomic_fetch_sub_explicit(&gt__live_bytes, (int64_t)h->bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&gt__live_blocks, 1, memory_order_relaxed);
  if (m->probe.on_free) m->probe.on_free(m->probe.ctx, p, (gt_mem_cat)h->cat, (size_t)h->bytes, h->name);
  if (h->slot >= 0) { /* the arena's: its slot is free again, nothing goes to the system */
    if (m->arena) gt__arena_give(m->arena, h->slot);
    return;
  }
  if (h->rec >= 0 && m->arena) gt__arena_note_free(m->arena, h->rec, h->gen);
  if (h->mapped)
    munmap(h, (size_t)h->mapped);
  else
    free(h);
  atomic_fetch_add_explicit(&m->sys_frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&gt__sys_frees, 1, memory_order_relaxed);
}

int64_t gt_mem_bad_frees(const gt_mem *m) { return atomic_load(&m->bad_frees); }

void gt_mem_reset_peaks(gt_mem *m) {
  for (int i = 0; i < GT_MEM_NCAT; i++) atomic_store(&m->peak[i], atomic_load(&m->cur[i]));
  atomic_store(&m->total_peak, atomic_load(&m->total_cur));
}

int64_t gt_mem_cur(const gt_mem *m, gt_mem_cat c) { return atomic_load(&m->cur[c]); }
int64_t gt_mem_peak(const gt_mem *m, gt_mem_cat c) { return atomic_load(&m->peak[c]); }
int64_t gt_mem_total_cur(const gt_mem *m) { return atomic_load(&m->total_cur); }
int64_t gt_mem_total_peak(const gt_mem *m) { return atomic_load(&m->total_peak); }
int64_t gt_mem_n_allocs(const gt_mem *m) { return atomic_load(&m->n_allocs); }

const char *gt_mem_cat_name(gt_mem_cat c) {
  static const char *names[GT_MEM_NCAT] = {"params", "grads", "optimizer", "saved_activations",
                                            "temporaries", "logits", "gathered_weights",
                                            "host_pool", "data", "kv_cache", "other", "frozen_base"};
  return (int)c >= 0 && c < GT_MEM_NCAT ? names[c] : "?";
}
