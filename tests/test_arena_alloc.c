/* The step arena of the tracked allocator on its own (base/alloc.h): random
 * steps packed and served with every block's bytes intact; frees in another
 * order than the recorded one; other threads allocating against the tracker
 * at the same time; steps that keep a block; zero-filling of reused slots;
 * allocations outside a step; measuring trackers. Each live block is filled
 * with a pattern of its own and checked before it is freed, so two blocks
 * given overlapping bytes fail the test. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/arena_internal.h"
#include "gt_testutil.h"

static void fill(void *p, size_t n, uint32_t tag) {
  uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++) w[i] = tag * 2654435761u + (uint32_t)i;
}
static int intact(const void *p, size_t n, uint32_t tag) {
  const uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++)
    if (w[i] != tag * 2654435761u + (uint32_t)i) return 0;
  return 1;
}

/* One step of a seeded random program: n allocations of sizes up to 64 KiB
 * (some the same size and name), each freed a random while later; the
 * seed fixes the program, so every step repeats the first. */
static const char *names[4] = {"a", "b", "c", "d"};
static void random_step(gt_mem *m, uint64_t seed, int n) {
  void *live[64];
  size_t sz[64];
  uint32_t tag[64];
  int nl = 0;
  uint64_t rs = seed;
  for (int i = 0; i < n; i++) {
    size_t bytes = 4 * (1 + gt_test_rand_u64(&rs) % 16384);
    if (i % 5 == 0) bytes = 4096; /* repeated sizes */
    void *p = gt_mem_alloc_uninit_named(m, (gt_mem_cat)(i % 3 + GT_MEM_SAVED), bytes, names[i % 4]);
    ck_assert_ptr_nonnull(p);
    fill(p, bytes, (uint32_t)i);
    live[nl] = p, sz[nl] = bytes, tag[nl] = (uint32_t)i, nl++;
    while (nl > 0 && (nl == 64 || gt_test_rand_u64(&rs) % 3 == 0)) {
      int j = (int)(gt_test_rand_u64(&rs) % (uint64_t)nl);
      ck_assert_msg(intact(live[j], sz[j], tag[j]), "block %u was overwritten", tag[j]);
      gt_mem_free(m, live[j]);
      live[j] = live[nl - 1], sz[j] = sz[nl - 1], tag[j] = tag[nl - 1], nl--;
    }
  }
  for (int j = 0; j < nl; j++) {
    ck_assert_msg(intact(live[j], sz[j], tag[j]), "block %u was overwritten", tag[j]);
    gt_mem_free(m, live[j]);
  }
}

START_TEST(test_random_steps) {
  gt_mem_arena_set_default(1);
  for (uint64_t seed = 1; seed <= 20; seed++) {
    gt_mem m;
    gt_mem_init(&m);
    gt_mem_arena_enable(&m);
    int64_t first_peak = 0;
    for (int step = 0; step < 4; step++) {
      gt_mem_reset_peaks(&m);
      int64_t s0 = gt_mem_sys_allocs() + gt_mem_sys_frees();
      gt_mem_step_begin(&m);
      random_step(&m, seed, 200);
      gt_mem_step_end(&m, 1);
      int64_t sys = gt_mem_sys_allocs() + gt_mem_sys_frees() - s0;
      if (step == 0) first_peak = gt_mem_total_peak(&m);
      if (step > 0) {
        ck_assert_msg(sys == 0, "seed %llu, step %d: %lld system calls", (unsigned long long)seed, step, (long long)sys);
        ck_assert_int_eq(gt_mem_total_peak(&m), first_peak); /* the same accounting as the heap's */
      }
    }
    gt_mem_arena_stats st;
    gt_mem_arena_get_stats(&m, &st);
    ck_assert_int_eq(st.state, 2);
    ck_assert_int_eq(st.slots, 200);
    ck_assert_int_eq(st.steps_served, 3);
    ck_assert_int_eq(st.heap_in_steps, 0);
    /* greedy by size never goes below the live peak; on these programs it
     * stays within 1.5x of it */
    ck_assert_int_ge(st.bytes, st.live_peak);
    ck_assert_msg(st.bytes <= st.live_peak + st.live_peak / 2, "seed %llu: arena %lld for a live peak of %lld",
                  (unsigned long long)seed, (long long)st.bytes, (long long)st.live_peak);
    ck_assert_int_eq(gt_mem_n_allocs(&m), 0);
    gt_mem_arena_release(&m);
  }
  ck_assert_int_eq(gt_mem_process_blocks(), 0);
}
END_TEST

/* Recorded: A, free A, B (packed at A's bytes). Served: A, B, free A, free
 * B: B's slot still holds A, so B goes to the heap, the step falls back,
 * and the next step in the recorded order is served again. */
START_TEST(test_reordered_frees) {
  gt_mem_arena_set_default(1);
  gt_mem m;
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  gt_mem_step_begin(&m);
  void *a = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "a");
  gt_mem_free(&m, a);
  void *b = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "b");
  gt_mem_free(&m, b);
  gt_mem_step_end(&m, 1);
  gt_mem_arena_stats st;
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.bytes, 64 + 1024 + GT__ARENA_REDZONE); /* one slot's bytes serve both */

  gt_mem_step_begin(&m);
  a = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "a");
  fill(a, 1000, 1);
  int64_t s0 = gt_mem_sys_allocs();
  b = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "b");
  ck_assert_int_eq(gt_mem_sys_allocs(), s0 + 1); /* from the heap */
  fill(b, 1000, 2);
  ck_assert(intact(a, 1000, 1));
  gt_mem_free(&m, a);
  ck_assert(intact(b, 1000, 2));
  gt_mem_free(&m, b);
  gt_mem_step_end(&m, 1);
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.overlap_refused, 1);
  ck_assert_int_eq(st.steps_fell_back, 1);
  ck_assert_int_eq(st.heap_in_steps, 1);

  gt_mem_step_begin(&m);
  s0 = gt_mem_sys_allocs();
  a = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "a");
  gt_mem_free(&m, a);
  b = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "b");
  gt_mem_free(&m, b);
  ck_assert_int_eq(gt_mem_sys_allocs(), s0);
  gt_mem_step_end(&m, 1);
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.steps_served, 1);
  /* another size, another name, one allocation too many: each falls back */
  const size_t sizes[3] = {1001, 1000, 1000};
  const char *nm[3] = {"a", "x", "a"};
  for (int v = 0; v < 3; v++) {
    gt_mem_step_begin(&m);
    a = gt_mem_alloc_named(&m, GT_MEM_TEMP, sizes[v], nm[v]);
    gt_mem_free(&m, a);
    if (v == 2) {
      b = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "b");
      gt_mem_free(&m, b);
      b = gt_mem_alloc_named(&m, GT_MEM_TEMP, 1000, "b");
      gt_mem_free(&m, b);
    }
    gt_mem_step_end(&m, 1);
  }
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.steps_fell_back, 4);
  ck_assert_int_eq(st.steps_served, 1);
  gt_mem_arena_release(&m);
  ck_assert_int_eq(gt_mem_process_blocks(), 0);
}
END_TEST

/* Served slots are zero-filled like heap blocks when asked to be. */
START_TEST(test_zero_fill) {
  gt_mem_arena_set_default(1);
  gt_mem m;
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  for (int step = 0; step < 3; step++) {
    gt_mem_step_begin(&m);
    unsigned char *p = gt_mem_alloc(&m, GT_MEM_TEMP, 5000);
    for (int i = 0; i < 5000; i++) ck_assert_int_eq(p[i], 0);
    memset(p, 0xab, 5000);
    gt_mem_free(&m, p);
    gt_mem_step_end(&m, 1);
  }
  gt_mem_arena_stats st;
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.steps_served, 2);
  gt_mem_arena_release(&m);
}
END_TEST

/* Other threads allocate against the tracker while its recorded thread runs
 * its step: their blocks come from the heap (counted as foreign), never
 * from the arena, whatever the interleaving; the recorded thread's steps
 * are served whole and no block is overwritten. */
typedef struct thr_ctx {
  gt_mem *m;
  _Atomic int go, done;
} thr_ctx;

static void other_thread(void *arg, int t) {
  thr_ctx *x = arg;
  if (t == 0) return; /* thread 0 is the recorded one's partner below */
  while (!atomic_load(&x->go)) {
  }
  for (int i = 0; i < 50; i++) {
    size_t n = 4096 + 64 * (size_t)(i % 7);
    void *p = gt_mem_alloc_uninit_named(x->m, GT_MEM_TEMP, n, "a");
    ck_assert_ptr_nonnull(p);
    fill(p, n, 1000u * (uint32_t)t + (uint32_t)i);
    ck_assert(intact(p, n, 1000u * (uint32_t)t + (uint32_t)i));
    gt_mem_free(x->m, p);
  }
  atomic_fetch_add(&x->done, 1);
}

static void owner_and_others(void *arg, int t) {
  thr_ctx *x = arg;
  if (t != 0) {
    other_thread(arg, t);
    return;
  }
  /* the recorded thread: the first allocation of every step is its own;
   * the others run during step 1, a served one */
  for (int step = 0; step < 4; step++) {
    gt_mem_step_begin(x->m);
    void *first = gt_mem_alloc_uninit_named(x->m, GT_MEM_TEMP, 64, "first");
    if (step == 1) atomic_store(&x->go, 1);
    random_step(x->m, 7, 100);
    gt_mem_free(x->m, first);
    if (step == 1)
      while (atomic_load(&x->done) < 2) {
      }
    gt_mem_step_end(x->m, 1);
  }
}

START_TEST(test_other_threads) {
  gt_mem_arena_set_default(1);
  gt_mem m;
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  thr_ctx x = {&m, 0, 0};
  gt_test_on_threads(3, owner_and_others, &x);
  gt_mem_arena_stats st;
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.state, 2);
  ck_assert_int_eq(st.slots, 101);
  ck_assert_int_eq(st.steps_fell_back, 0);
  ck_assert_int_eq(st.steps_served, 3);
  /* the other threads' 2 x 50 allocations went to the heap */
  ck_assert_int_eq(st.foreign, 100);
  ck_assert_int_eq(st.heap_in_steps, 100);
  ck_assert_int_eq(gt_mem_n_allocs(&m), 0);
  gt_mem_arena_release(&m);
  ck_assert_int_eq(gt_mem_process_blocks(), 0);
}
END_TEST

/* A recorded step that keeps a block is not packed; the next clean one is.
 * A tracker whose steps always keep one gives up and stays on the heap. */
START_TEST(test_kept_blocks) {
  gt_mem_arena_set_default(1);
  gt_mem m;
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  gt_mem_step_begin(&m);
  void *kept = gt_mem_alloc(&m, GT_MEM_OPTIM, 100); /* made on first use */
  void *t = gt_mem_alloc(&m, GT_MEM_TEMP, 100);
  gt_mem_free(&m, t);
  gt_mem_step_end(&m, 1);
  gt_mem_arena_stats st;
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.state, 1); /* still recording */
  for (int step = 0; step < 2; step++) {
    gt_mem_step_begin(&m);
    t = gt_mem_alloc(&m, GT_MEM_TEMP, 100);
    gt_mem_free(&m, t);
    gt_mem_step_end(&m, 1);
  }
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.state, 2);
  ck_assert_int_eq(st.steps_served, 1);
  gt_mem_free(&m, kept);
  gt_mem_arena_release(&m);

  /* a step that failed part-way is not recorded */
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  gt_mem_step_begin(&m);
  gt_mem_free(&m, gt_mem_alloc(&m, GT_MEM_TEMP, 100));
  gt_mem_step_end(&m, 0);
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.state, 1);
  gt_mem_arena_release(&m);

  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  void *keep[4];
  for (int step = 0; step < 4; step++) {
    gt_mem_step_begin(&m);
    keep[step] = gt_mem_alloc(&m, GT_MEM_TEMP, 100);
    gt_mem_step_end(&m, 1);
  }
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.state, 3);
  for (int step = 0; step < 4; step++) gt_mem_free(&m, keep[step]);
  gt_mem_arena_release(&m);
  ck_assert_int_eq(gt_mem_process_blocks(), 0);
}
END_TEST

/* Outside a step the heap serves; a measuring tracker or the default off
 * gets no arena. */
START_TEST(test_outside_and_off) {
  gt_mem_arena_set_default(1);
  gt_mem m;
  gt_mem_init(&m);
  gt_mem_arena_enable(&m);
  for (int step = 0; step < 2; step++) {
    gt_mem_step_begin(&m);
    gt_mem_free(&m, gt_mem_alloc(&m, GT_MEM_TEMP, 100));
    gt_mem_step_end(&m, 1);
  }
  int64_t s0 = gt_mem_sys_allocs();
  void *p = gt_mem_alloc(&m, GT_MEM_TEMP, 100);
  ck_assert_int_eq(gt_mem_sys_allocs(), s0 + 1);
  gt_mem_free(&m, p);
  gt_mem_arena_stats st;
  gt_mem_arena_get_stats(&m, &st);
  ck_assert_int_eq(st.heap_in_steps, 0);
  ck_assert_int_eq(st.steps_served, 1);
  gt_mem_arena_release(&m);

  gt_mem_init_measure(&m);
  gt_mem_arena_enable(&m);
  ck_assert_ptr_null(m.arena);
  gt_mem_init(&m);
  gt_mem_arena_set_default(0);
  gt_mem_arena_enable(&m);
  ck_assert_ptr_null(m.arena);
  gt_mem_arena_set_default(1);
}
END_TEST

#ifdef GT__ASAN
/* A child process runs two steps on an arena tracker, the second served
 * from the arena, and calls bad(m, p, served) in each with a block of the
 * step; AddressSanitizer must end the child (a report) on the served one. */
typedef void (*gt_bad_fn)(gt_mem *m, volatile char *p, int served);
static void asan_must_report(gt_bad_fn bad, size_t bytes, const char *what) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    gt_mem_arena_set_default(1);
    gt_mem m;
    gt_mem_init(&m);
    gt_mem_arena_enable(&m);
    for (int s = 0; s < 2; s++) {
      gt_mem_step_begin(&m);
      bad(&m, gt_mem_alloc(&m, GT_MEM_TEMP, bytes), s == 1 && m.arena);
      gt_mem_step_end(&m, 1);
    }
    _exit(0);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "AddressSanitizer did not see %s in the arena", what);
}

/* A free slot is poisoned: reading a served block after its free is
 * reported, as on the heap. */
static void use_after_free(gt_mem *m, volatile char *p, int served) {
  gt_mem_free(m, (void *)p);
  if (served) (void)p[3];
}

/* An overflow past a served block lands in its redzone, as past a heap
 * block: 100 bytes asked for (the block is 128, as alloc.c's heap block
 * would be), the 129th read; a second block follows it in the arena. */
static void overflow(gt_mem *m, volatile char *p, int served) {
  volatile char *q = gt_mem_alloc(m, GT_MEM_TEMP, 100);
  (void)p[99], (void)q[0]; /* in bounds: fine */
  if (served) (void)p[128];
  gt_mem_free(m, (void *)q);
  gt_mem_free(m, (void *)p);
}

START_TEST(test_asan_sees_use_after_free) { asan_must_report(use_after_free, 256, "a use after free"); }
END_TEST

START_TEST(test_asan_sees_overflow) { asan_must_report(overflow, 100, "an overflow"); }
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("arena_alloc");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_random_steps);
  tcase_add_test(tc, test_reordered_frees);
  tcase_add_test(tc, test_zero_fill);
  tcase_add_test(tc, test_other_threads);
  tcase_add_test(tc, test_kept_blocks);
  tcase_add_test(tc, test_outside_and_off);
#ifdef GT__ASAN
  tcase_add_test(tc, test_asan_sees_use_after_free);
  tcase_add_test(tc, test_asan_sees_overflow);
#endif
  return gt_test_run_suite(s, 0);
}
