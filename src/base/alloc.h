/* gemtrain tracked allocator: every large buffer is allocated with a category,
 * and the tracker knows the bytes in use and the peak, per category and in
 * total, so the measured peak can be held against the memory plan.
 *
 * A gt_mem is one "device" worth of memory (the single-process trainer has
 * one; the sharded executor has one per worker). Counters are atomic, so
 * several threads may allocate against one tracker.
 *
 * A measuring tracker (gt_mem_init_measure) counts every allocation exactly
 * as a real one (bytes, category, current and peak, n_allocs) but reserves no
 * payload: the plan runs the real trainer on one, as ggml measures a graph
 * before allocating it. Code that owns buffers asks gt_mem_measuring() and
 * then allocates and frees as usual but neither computes nor touches them.
 *
 * A probe (gt_mem_set_probe) sees every allocation, free and phase change of
 * a tracker, real or measuring: the plan builds its report from it.
 *
 * The step arena (gt_mem_arena_enable, docs/memory-plan.md): a real tracker
 * between gt_mem_step_begin and gt_mem_step_end records the step's sequence
 * of allocations (category, bytes, name) and their lifetimes; once a step
 * frees everything it allocated, the sequence is packed into offsets of one
 * block, allocated and touched once, and each later step's k-th allocation
 * is served from its offset when it matches the record (category, size and
 * name) and its bytes overlap no live block. Anything else (a step that
 * differs, an allocation from another thread than the recorded one, outside
 * a step) goes to the heap, counted; the accounting (current, peaks, probe)
 * is the same either way. */
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
  GT_MEM_FROZEN,      /* a frozen base's parameters (no gradient, no optimizer state) */
  GT_MEM_NCAT
} gt_mem_cat;

/* Callbacks of a probe; any may be NULL. They run on the allocating thread,
 * synchronously: a probe on a tracker that several threads share must lock
 * on its own. name is the allocation's name (a string with static storage,
 * or NULL for unnamed allocations); the probe pairs it with the last phase.
 * on_free gets the name and size the block was allocated with. */
typedef struct gt_mem_probe {
  void *ctx;
  void (*on_alloc)(void *ctx, const void *ptr, gt_mem_cat cat, size_t bytes, const char *name);
  void (*on_free)(void *ctx, const void *ptr, gt_mem_cat cat, size_t bytes, const char *name);
  void (*on_phase)(void *ctx, const char *phase);
} gt_mem_probe;

struct gt_mem_arena;

typedef struct gt_mem {
  _Atomic int64_t cur[GT_MEM_NCAT];
  _Atomic int64_t peak[GT_MEM_NCAT];
  _Atomic int64_t total_cur;
  _Atomic int64_t total_peak;
  _Atomic int64_t n_allocs;
  _Atomic int64_t bad_frees; /* gt_mem_free calls on pointers this allocator did not hand out */
  int measuring;             /* allocations reserve no payload */
  gt_mem_probe probe;        /* all callbacks NULL: no probe */
  struct gt_mem_arena *arena; /* NULL: every block from the heap */
  _Atomic int64_t sys_allocs; /* blocks taken from the system (posix_memalign) */
  _Atomic int64_t sys_frees;  /* blocks given back to it (free) */
} gt_mem;

void gt_mem_init(gt_mem *m);
/* A measuring tracker: see above. Its pointers are valid, unique, 64-byte
 * aligned and never NULL, and gt_mem_free takes them, but they point at no
 * payload: reading or writing through one is a bug (AddressSanitizer reports
 * it as a heap overflow). */
void gt_mem_init_measure(gt_mem *m);
int gt_mem_measuring(const gt_mem *m);
/* Install a copy of *p (NULL removes the probe). Set it between steps, not
 * while other threads allocate against m. */
void gt_mem_set_probe(gt_mem *m, const gt_mem_probe *p);
/* Tell the probe what the code is doing now ("forward, layer 3"). Formats
 * only when a probe with on_phase is set: free otherwise. */
void gt_mem_phase(gt_mem *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* 64-byte aligned, zero-filled. Returns NULL on failure (or bytes == 0 gives a
 * valid minimal block). */
void *gt_mem_alloc(gt_mem *m, gt_mem_cat cat, size_t bytes);
/* The same without zero-filling, for buffers that are written in full before
 * they are read (activations): zeroing them would be pure memory traffic. */
void *gt_mem_alloc_uninit(gt_mem *m, gt_mem_cat cat, size_t bytes);
/* The same with a name for the probe and the plan's report: a string with
 * static storage (a literal), never copied. */
void *gt_mem_alloc_named(gt_mem *m, gt_mem_cat cat, size_t bytes, const char *name);
void *gt_mem_alloc_uninit_named(gt_mem *m, gt_mem_cat cat, size_t bytes, const char *name);
/* NULL is ignored. A pointer without this allocator's header is not freed:
 * it is counted in gt_mem_bad_frees (a bug in the caller; tests assert 0). */
void gt_mem_free(gt_mem *m, void *p);
int64_t gt_mem_bad_frees(const gt_mem *m);
/* Forget the peaks (keep current usage): used to measure one step. */
void gt_mem_reset_peaks(gt_mem *m);
int64_t gt_mem_cur(const gt_mem *m, gt_mem_cat cat);
int64_t gt_mem_peak(const gt_mem *m, gt_mem_cat cat);
/* Totals cover the device categories: everything but GT_MEM_HOST. */
int64_t gt_mem_total_cur(const gt_mem *m);
int64_t gt_mem_total_peak(const gt_mem *m);
/* Blocks allocated and not yet freed. */
int64_t gt_mem_n_allocs(const gt_mem *m);
const char *gt_mem_cat_name(gt_mem_cat cat);

/* The step arena (see above). _enable gives a real tracker an arena that
 * records its next step (no effect on a measuring tracker, or when the
 * process default is off); _release frees it and must come after the last
 * free of a block the arena served (a block still live is left to leak
 * rather than freed under it). Steps may not nest or overlap on a tracker;
 * begin and end are called from one thread between steps. */
void gt_mem_arena_enable(gt_mem *m);
void gt_mem_arena_release(gt_mem *m);
void gt_mem_step_begin(gt_mem *m);
/* ok = 0: the step failed part-way (an error); a recording step is then
 * recorded again on the next one. */
void gt_mem_step_end(gt_mem *m, int ok);
/* Process default of gt_mem_arena_enable: 1 (on; under AddressSanitizer
 * too, where the arena poisons free slots and redzones as the heap does).
 * A test seam and the CLI's GEMTRAIN_ARENA=0|1; set it before trainers
 * are made. */
void gt_mem_arena_set_default(int on);
int gt_mem_arena_default(void);

typedef struct gt_mem_arena_stats {
  int state;               /* 0 off, 1 recording, 2 serving, 3 gave up (a recorded step kept blocks) */
  int64_t bytes;           /* the arena's size (0 until built) */
  int64_t live_peak;       /* the recorded step's peak of live bytes, headers included: the packing's lower bound */
  int64_t slots;           /* allocations per step it serves */
  int64_t steps;           /* steps begun on this tracker */
  int64_t steps_served;    /* steps served wholly from the arena */
  int64_t steps_fell_back; /* steps that went to the heap part-way (a mismatch) */
  int64_t heap_in_steps;   /* blocks taken from the heap inside steps, recording steps excluded */
  int64_t foreign;         /* of those, allocations by a thread other than the recorded one */
  int64_t overlap_refused; /* matching allocations refused because their bytes were still live */
} gt_mem_arena_stats;
void gt_mem_arena_get_stats(const gt_mem *m, gt_mem_arena_stats *s);

/* Calls to the system (posix_memalign / free) by the allocator over the
 * process, every tracker: what a step after the first must not make. */
int64_t gt_mem_sys_allocs(void);
int64_t gt_mem_sys_frees(void);

/* Gives the heap's free pages back to the system (glibc's malloc_trim;
 * nothing elsewhere). For the points where large blocks were just freed and
 * will not be asked for again: a program that turned malloc's trimming off
 * (gemtrain does, for steps without page faults) would otherwise keep them
 * resident for the rest of the run. */
void gt_mem_trim(void);

/* Fault injection, for tests (SQLite's way): every tracked allocation of the
 * process, on any tracker and thread, is counted; gt_mem_fault_arm(n)
 * restarts the count and makes the n-th allocation from then on return NULL,
 * once (n = 0: none fails, the count only counts). Code under test must then
 * return GT_ERR_NOMEM with a message and free what it made. Arm it while no
 * other test allocates. */
void gt_mem_fault_arm(int64_t n);
/* Tracked allocations since the last arm (the failed one included). */
int64_t gt_mem_fault_count(void);
/* 1 once the armed allocation has failed. */
int gt_mem_fault_fired(void);
/* Bytes and blocks in use over every tracker of the process (measuring ones
 * too): 0 / 0 again after everything that allocated is torn down. */
int64_t gt_mem_process_bytes(void);
int64_t gt_mem_process_blocks(void);

#ifdef __cplusplus
}
#endif
#endif
