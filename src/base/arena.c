/* The step arena of a tracker (base/alloc.h; docs/memory-plan.md).
 *
 * Recording: between gt_mem_step_begin and _end, every allocation the
 * recorded thread makes is noted (category, bytes, name) with the clock of
 * its allocation and of its free. A recorded step that frees everything it
 * allocated is packed: each allocation gets an offset in one block such that
 * two allocations live at the same time never share a byte (greedy by size,
 * best fit: the largest allocation first, into the smallest gap between the
 * offsets of those already placed that are live at the same time, or above
 * them). The block is allocated and written once, so its pages are faulted
 * in by the recording step and never again.
 *
 * Serving: the k-th allocation of a later step is the k-th slot when its
 * category, size and name are the recorded ones and no live block of the
 * arena covers any of its bytes (a step that frees in another order than the
 * recorded one cannot be given memory that is still in use); the first
 * allocation that does not match sends the rest of the step to the heap
 * (a fallback, counted), the slots already served stay valid. Frees of
 * served blocks just mark their slot free.
 *
 * Threads: the recorded thread is the one that made the recorded step's
 * first allocation; allocations by other threads go to the heap and are
 * counted (`foreign`), so another thread's timing can never reorder the
 * sequence. The training step allocates on one thread per tracker (each
 * device's own); tests check that every step is served whole.
 *
 * Under AddressSanitizer the arena keeps what the heap's blocks give ASan:
 * the bytes of a free slot are poisoned (a use after free is reported), a
 * served block is unpoisoned as far as the heap block alloc.c would make
 * (header and payload rounded to 64 bytes), and every slot ends in a
 * poisoned redzone (an overflow past that is reported, as past a heap
 * block). It is on there too: a step served from the heap under ASan maps
 * and faults in every large block afresh (ASan's allocator unmaps a large
 * block when it is freed), which made the sanitizer suites several times
 * slower where page faults are dear. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/arena_internal.h"

#ifdef GT__ASAN
#include <sanitizer/asan_interface.h>
#define GT__POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define GT__UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define GT__POISON(p, n) ((void)(p), (void)(n))
#define GT__UNPOISON(p, n) ((void)(p), (void)(n))
#endif
static _Atomic int gt__arena_on = 1;

/* A recorded step may keep a block past its end (a buffer made once, on
 * first use); the next step is recorded instead, this many times. */
#define GT__ARENA_TRIES 4

enum { GT__OFF = 0, GT__RECORD = 1, GT__SERVE = 2, GT__GAVE_UP = 3 };

typedef struct gt__rec {
  int64_t bytes;     /* as asked */
  int64_t span;      /* header and payload rounded to 64 (and the redzone under ASan) */
  const char *name;
  int32_t cat;
  int64_t t0, t1;    /* clocks of allocation and free (t1 < 0: not freed) */
  int64_t off;       /* in the arena */
} gt__rec;

struct gt_mem_arena {
  pthread_mutex_t mu;
  int state, in_step, tries;
  int have_owner;
  pthread_t owner;
  uint32_t gen;      /* the current step's, for the record's frees */
  gt__rec *rec;      /* the record, then the slots */
  int64_t n_rec, cap_rec, clock, live_bytes, live_peak;
  int rec_bad;       /* the record could not grow: not usable */
  char *base;
  int64_t size;
  /* serving */
  int64_t k;
  int fallen;
  int32_t *live;     /* live slots, unordered */
  int32_t *live_pos; /* [slot] its index in live, -1 when free */
  int64_t n_live;
  gt_mem_arena_stats st;
};

void gt_mem_arena_set_default(int on) { atomic_store(&gt__arena_on, on != 0); }
int gt_mem_arena_default(void) { return atomic_load(&gt__arena_on); }

void gt_mem_arena_enable(gt_mem *m) {
  if (m->arena || m->measuring || !gt_mem_arena_default()) return;
  struct gt_mem_arena *a = calloc(1, sizeof *a);
  if (!a) return; /* the heap serves: nothing is lost but the arena */
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    free(a);
    return;
  }
  a->state = GT__RECORD;
  m->arena = a;
}

void gt_mem_arena_release(gt_mem *m) {
  struct gt_mem_arena *a = m->arena;
  if (!a) return;
  m->arena = NULL;
  if (a->n_live > 0) return; /* a served block is still in use: leak rather than free under it */
  if (a->base) {
    GT__UNPOISON(a->base, (size_t)a->size);
    free(a->base);
  }
  free(a->rec);
  free(a->live);
  free(a->live_pos);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

void gt_mem_arena_get_stats(const gt_mem *m, gt_mem_arena_stats *s) {
  memset(s, 0, sizeof *s);
  struct gt_mem_arena *a = m->arena;
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  *s = a->st;
  s->state = a->state;
  s->bytes = a->size;
  s->live_peak = a->live_peak;
  s->slots = a->state == GT__SERVE ? a->n_rec : 0;
  pthread_mutex_unlock(&a->mu);
}

void gt_mem_step_begin(gt_mem *m) {
  struct gt_mem_arena *a = m->arena;
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->in_step = 1;
  a->gen++;
  a->k = 0;
  a->fallen = 0;
  a->st.steps++;
  if (a->state == GT__RECORD) {
    a->n_rec = a->clock = a->live_bytes = a->live_peak = 0;
    a->rec_bad = 0;
    a->have_owner = 0;
  }
  pthread_mutex_unlock(&a->mu);
}

/* Greedy by size, best fit (see the top). Returns the arena's size. */
static int64_t gt__pack(gt__rec *r, int64_t n) {
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  int64_t *placed = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1)); /* by offset */
  if (!order || !placed) {
    free(order);
    free(placed);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) order[i] = i;
  /* insertion sort by span (descending), then allocation order: n is a
   * step's allocations (thousands at most), once per run */
  for (int64_t i = 1; i < n; i++) {
    int64_t x = order[i], j = i;
    while (j > 0 && (r[order[j - 1]].span < r[x].span ||
                     (r[order[j - 1]].span == r[x].span && r[order[j - 1]].t0 > r[x].t0))) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
  int64_t np = 0, size = 0;
  for (int64_t o = 0; o < n; o++) {
    gt__rec *x = &r[order[o]];
    int64_t best = -1, best_gap = INT64_MAX, top = 0;
    for (int64_t q = 0; q < np; q++) {
      const gt__rec *y = &r[placed[q]];
      if (!(x->t0 < y->t1 && y->t0 < x->t1)) continue; /* never live together */
      int64_t gap = y->off - top;
      if (gap >= x->span && gap < best_gap) {
        best = top;
        best_gap = gap;
      }
      if (y->off + y->span > top) top = y->off + y->span;
    }
    x->off = best >= 0 ? best : top;
    if (x->off + x->span > size) size = x->off + x->span;
    int64_t q = np++;
    while (q > 0 && r[placed[q - 1]].off > x->off) {
      placed[q] = placed[q - 1];
      q--;
    }
    placed[q] = order[o];
  }
  free(order);
  free(placed);
  return size;
}

/* The recorded step becomes the arena; on failure the heap serves on. */
static void gt__build(struct gt_mem_arena *a) {
  int64_t size = gt__pack(a->rec, a->n_rec);
  void *base = NULL;
  /* the recorded step's blocks are free now and the arena serves every
   * later step: their pages go back to the system before the arena's are
   * faulted in (a program that turned malloc's trimming off, as gemtrain
   * does, would otherwise hold both: the process above its plan by a step's
   * working set) */
  gt_mem_trim();
  a->live = malloc(sizeof(int32_t) * (size_t)(a->n_rec > 0 ? a->n_rec : 1));
  a->live_pos = malloc(sizeof(int32_t) * (size_t)(a->n_rec > 0 ? a->n_rec : 1));
  if (size < 0 || !a->live || !a->live_pos || posix_memalign(&base, 4096, (size_t)(size > 0 ? size : 64)) != 0) {
    a->state = GT__GAVE_UP;
    return;
  }
  /* fault every page in now, not in a later step */
  memset(base, 0, (size_t)(size > 0 ? size : 64));

  GT__POISON(base, (size_t)size);
  for (int64_t i = 0; i < a->n_rec; i++) a->live_pos[i] = -1;
  a->base = base;
  a->size = size;
  a->n_live = 0;
  a->state = GT__SERVE;
}

void gt_mem_step_end(gt_mem *m, int ok) {
  struct gt_mem_arena *a = m->arena;
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->in_step = 0;
  if (a->state == GT__RECORD && !ok) {
    /* a step cut short is not the step: record the next one */
  } else if (a->state == GT__RECORD) {
    int kept = a->rec_bad;
    for (int64_t i = 0; i < a->n_rec && !kept; i++) kept = a->rec[i].t1 < 0;
    if (!kept && a->n_rec <= INT32_MAX)
      gt__build(a);
    else if (++a->tries >= GT__ARENA_TRIES)
      a->state = GT__GAVE_UP;
  } else if (a->state == GT__SERVE) {
    if (!a->fallen && a->k == a->n_rec)
      a->st.steps_served++;
    else if (!a->fallen) /* fewer allocations than recorded: served, but another step */
      a->st.steps_fell_back++;
  }
  pthread_mutex_unlock(&a->mu);
}

static int gt__same_name(const char *x, const char *y) { return x == y || (x && y && !strcmp(x, y)); }

/* Whether slot s's bytes are free of every live slot. */
static int gt__slot_free(const struct gt_mem_arena *a, int64_t s) {
  const gt__rec *x = &a->rec[s];
  for (int64_t i = 0; i < a->n_live; i++) {
    const gt__rec *y = &a->rec[a->live[i]];
    if (x->off < y->off + y->span && y->off < x->off + x->span) return 0;
  }
  return 1;
}

void *gt__arena_take(struct gt_mem_arena *a, gt_mem_cat cat, size_t bytes, const char *name, int32_t *slot,
                     int32_t *rec, uint32_t *gen) {
  void *out = NULL;
  pthread_mutex_lock(&a->mu);
  if (!a->in_step) goto done;
  pthread_t me = pthread_self();
  if (a->state == GT__RECORD) {
    if (!a->have_owner) {
      a->owner = me;
      a->have_owner = 1;
    }
    if (!pthread_equal(me, a->owner)) {
      a->st.foreign++;
      goto done;
    }
    if (a->n_rec == a->cap_rec) {
      int64_t cap = a->cap_rec ? 2 * a->cap_rec : 256;
      gt__rec *r = realloc(a->rec, sizeof *r * (size_t)cap);
      if (!r) {
        a->rec_bad = 1;
        goto done;
      }
      a->rec = r;
      a->cap_rec = cap;
    }
    int64_t span = GT__HDR + (int64_t)((bytes + 63) & ~(size_t)63) + GT__ARENA_REDZONE;
    a->rec[a->n_rec] = (gt__rec){(int64_t)bytes, span, name, (int32_t)cat, a->clock++, -1, 0};
    a->live_bytes += span;
    if (a->live_bytes > a->live_peak) a->live_peak = a->live_bytes;
    *rec = (int32_t)a->n_rec++;
    *gen = a->gen;
    goto done;
  }
  a->st.heap_in_steps++; /* undone below when the arena serves it */
  if (a->state != GT__SERVE) goto done;
  if (!pthread_equal(me, a->owner)) {
    a->st.foreign++;
    goto done;
  }
  if (a->fallen) goto done;
  int64_t k = a->k;
  if (k < a->n_rec && a->rec[k].cat == (int32_t)cat && a->rec[k].bytes == (int64_t)bytes &&
      gt__same_name(a->rec[k].name, name)) {
    if (gt__slot_free(a, k)) {
      a->live_pos[k] = (int32_t)a->n_live;
      a->live[a->n_live++] = (int32_t)k;
      a->k++;
      a->st.heap_in_steps--;
      *slot = (int32_t)k;
      out = a->base + a->rec[k].off;
      GT__UNPOISON(out, (size_t)(a->rec[k].span - GT__ARENA_REDZONE)); /* as the heap's block: the redzone stays poisoned */
      goto done;
    }
    a->st.overlap_refused++;
  }
  a->fallen = 1;
  a->st.steps_fell_back++;
done:
  pthread_mutex_unlock(&a->mu);
  return out;
}

void gt__arena_give(struct gt_mem_arena *a, int32_t slot) {
  pthread_mutex_lock(&a->mu);
  int32_t i = a->live_pos[slot];
  if (i >= 0) {
    int32_t last = a->live[--a->n_live];
    a->live[i] = last;
    a->live_pos[last] = i;
    a->live_pos[slot] = -1;
    GT__POISON(a->base + a->rec[slot].off, (size_t)a->rec[slot].span);
  }
  pthread_mutex_unlock(&a->mu);
}

void gt__arena_note_free(struct gt_mem_arena *a, int32_t rec, uint32_t gen) {
  pthread_mutex_lock(&a->mu);
  if (a->state == GT__RECORD && a->in_step && gen == a->gen && rec < a->n_rec && a->rec[rec].t1 < 0) {
    a->rec[rec].t1 = a->clock++;
    a->live_bytes -= a->rec[rec].span;
  }
  pthread_mutex_unlock(&a->mu);
}
