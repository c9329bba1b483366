/* The 2-byte all-gather (gt_all_gather_bf16, its group and async forms):
 * every element of the result is the bit pattern its owner contributed
 * (random 16-bit patterns, NaN and infinity encodings included, so nothing
 * may convert them), for device counts 1..8 and sizes with empty, uneven and
 * even shards; nothing outside `out` is written (a guard on each side); the
 * in-place form (in = out's own range) agrees; the async form equals the
 * synchronous one; fsdp and data groups on a 2 x 3 mesh; and the bytes
 * counted are 2 per element of the float32 ring formula, n - len(d+1). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/mesh.h"
#include "gt_testutil.h"

#define MAX_DEV 8
#define GUARD 8
static const int64_t SIZES[] = {0, 1, 2, 7, 13, 5040, 100003};
#define N_SIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

enum mode { M_SYNC, M_ALIAS, M_ASYNC, M_GROUP };

typedef struct job {
  gt_mesh *m;
  int64_t n;
  enum mode mode;
  gt_group g;
  uint16_t *src[MAX_DEV]; /* device d's full-size source: its shard is read from it */
  uint16_t *buf[MAX_DEV]; /* GUARD + n + GUARD, out = buf + GUARD */
} job;

static void job_fn(int d, void *arg) {
  job *j = arg;
  gt_group g = j->mode == M_GROUP ? j->g : GT_GROUP_ALL;
  int G = gt_mesh_group_size(j->m, g), r = gt_mesh_group_rank(j->m, g, d);
  int64_t b = gt_shard_begin(j->n, G, r), len = gt_shard_len(j->n, G, r);
  uint16_t *out = j->buf[d] + GUARD;
  switch (j->mode) {
  case M_SYNC: gt_all_gather_bf16(j->m, d, j->src[d] + b, out, j->n); break;
  case M_ALIAS:
    memcpy(out + b, j->src[d] + b, (size_t)len * 2);
    gt_all_gather_bf16(j->m, d, out + b, out, j->n);
    break;
  case M_ASYNC: {
    int t = gt_all_gather_bf16_async(j->m, d, GT_GROUP_ALL, j->src[d] + b, out, j->n);
    gt_mesh_wait(j->m, d, t);
    break;
  }
  case M_GROUP: gt_all_gather_bf16_g(j->m, d, g, j->src[d] + b, out, j->n); break;
  }
}

/* Fills every device's source with its own random patterns and the
 * buffers with a marker. */
static void fill(job *j, int N, uint64_t seed) {
  for (int d = 0; d < N; d++) {
    uint64_t s = seed ^ (uint64_t)(d + 1) * 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < j->n; i++) j->src[d][i] = (uint16_t)(gt_test_rand_u64(&s) >> 48);
    for (int64_t i = 0; i < j->n + 2 * GUARD; i++) j->buf[d][i] = 0xA5A5;
  }
}

/* Device d's result: element i of member k's shard range is member k's
 * source at i (member k = mem[k]); the guards are untouched. */
static void check(const job *j, int d, const int *mem, int G, const char *what, int N) {
  const uint16_t *out = j->buf[d] + GUARD;
  for (int k = 0; k < G; k++) {
    int64_t b = gt_shard_begin(j->n, G, k), e = b + gt_shard_len(j->n, G, k);
    for (int64_t i = b; i < e; i++)
      if (out[i] != j->src[mem[k]][i])
        ck_abort_msg("%s N=%d n=%lld device %d element %lld (shard %d [%lld, %lld)): 0x%04x, expected 0x%04x", what,
                     N, (long long)j->n, d, (long long)i, k, (long long)b, (long long)e, out[i], j->src[mem[k]][i]);
  }
  for (int i = 0; i < GUARD; i++)
    if (j->buf[d][i] != 0xA5A5 || j->buf[d][GUARD + j->n + i] != 0xA5A5)
      ck_abort_msg("%s N=%d n=%lld device %d: a guard was written", what, N, (long long)j->n, d);
}

static void alloc_job(job *j, int N, int64_t n) {
  j->n = n;
  for (int d = 0; d < N; d++) {
    j->src[d] = malloc((size_t)(n > 0 ? n : 1) * 2);
    j->buf[d] = malloc((size_t)(n + 2 * GUARD) * 2);
    ck_assert(j->src[d] && j->buf[d]);
  }
}

static void free_job(job *j, int N) {
  for (int d = 0; d < N; d++) free(j->src[d]), free(j->buf[d]);
}

START_TEST(test_all_gather_bf16_every_element) {
  static const char *names[] = {"sync", "in = out's own range", "async"};
  for (int N = 1; N <= MAX_DEV; N++) {
    gt_mesh *m;
    gt_err e;
    ck_assert(gt_mesh_create(&m, N, &e) == GT_OK);
    int mem[MAX_DEV];
    for (int k = 0; k < N; k++) mem[k] = k;
    for (int si = 0; si < N_SIZES; si++) {
      job j = {.m = m};
      alloc_job(&j, N, SIZES[si]);
      for (int mode = M_SYNC; mode <= M_ASYNC; mode++) {
        fill(&j, N, (uint64_t)(N * 131 + si * 7 + mode));
        gt_mesh_reset_stats(m);
        j.mode = (enum mode)mode;
        gt_mesh_run(m, job_fn, &j);
        ck_assert(gt_mesh_take_error(m, &e) == GT_OK);
        for (int d = 0; d < N; d++) {
          check(&j, d, mem, N, names[mode], N);
          /* 2 bytes per element of the ring formula: every chunk but d+1's */
          gt_comm_stats st = gt_mesh_stats(m, d);
          int64_t want = 2 * (j.n - gt_shard_len(j.n, N, (d + 1) % N));
          ck_assert_msg(st.bytes_sent == want, "%s N=%d n=%lld device %d: %lld bytes, expected %lld", names[mode], N,
                        (long long)j.n, d, (long long)st.bytes_sent, (long long)want);
          ck_assert_int_eq(st.calls, 1);
        }
      }
      free_job(&j, N);
    }
    gt_mesh_destroy(m);
  }
}
END_TEST

#define HALF_N 3
#define HALF_n 1001
typedef struct fjob {
  gt_mesh *m;
  float *in[HALF_N], *out[HALF_N];
} fjob;

static void f32_gather_fn(int d, void *arg) {
  fjob *f = arg;
  gt_all_gather(f->m, d, f->in[d], f->out[d], HALF_n);
}

START_TEST(test_all_gather_bf16_half_the_bytes) {
  /* the same n in float32 and in bf16: exactly half the bytes on every device */
  gt_mesh *m;
  gt_err e;
  ck_assert(gt_mesh_create(&m, HALF_N, &e) == GT_OK);
  job j = {.m = m, .mode = M_SYNC};
  alloc_job(&j, HALF_N, HALF_n);
  fill(&j, HALF_N, 5);
  gt_mesh_run(m, job_fn, &j);
  int64_t b16[HALF_N];
  for (int d = 0; d < HALF_N; d++) b16[d] = gt_mesh_stats(m, d).bytes_sent;
  free_job(&j, HALF_N);
  fjob f = {.m = m};
  for (int d = 0; d < HALF_N; d++) {
    f.in[d] = calloc(HALF_n, 4);
    f.out[d] = calloc(HALF_n, 4);
  }
  gt_mesh_reset_stats(m);
  gt_mesh_run(m, f32_gather_fn, &f);
  for (int d = 0; d < HALF_N; d++) {
    ck_assert_int_gt(b16[d], 0);
    ck_assert_int_eq(2 * b16[d], gt_mesh_stats(m, d).bytes_sent);
    free(f.in[d]), free(f.out[d]);
  }
  gt_mesh_destroy(m);
}
END_TEST

START_TEST(test_all_gather_bf16_groups) {
  /* 6 devices as data 2 x fsdp 3 (device = data * 3 + fsdp): the fsdp
   * groups {0,1,2}, {3,4,5} and the data groups {0,3}, {1,4}, {2,5} */
  const int N = 6;
  gt_mesh *m;
  gt_err e;
  ck_assert(gt_mesh_create(&m, N, &e) == GT_OK);
  ck_assert(gt_mesh_set_axes(m, 2, 3, &e) == GT_OK);
  const gt_group gs[] = {GT_GROUP_FSDP, GT_GROUP_DATA};
  for (int gi = 0; gi < 2; gi++)
    for (int si = 0; si < N_SIZES; si++) {
      job j = {.m = m, .mode = M_GROUP, .g = gs[gi]};
      alloc_job(&j, N, SIZES[si]);
      fill(&j, N, (uint64_t)(gi * 1000 + si));
      gt_mesh_reset_stats(m);
      gt_mesh_run(m, job_fn, &j);
      ck_assert(gt_mesh_take_error(m, &e) == GT_OK);
      for (int d = 0; d < N; d++) {
        int mem[3], G = gi == 0 ? 3 : 2;
        for (int k = 0; k < G; k++) mem[k] = gi == 0 ? d / 3 * 3 + k : d % 3 + 3 * k;
        check(&j, d, mem, G, gi == 0 ? "fsdp group" : "data group", N);
        int r = gt_mesh_group_rank(m, gs[gi], d);
        ck_assert_int_eq(gt_mesh_stats(m, d).bytes_sent, 2 * (j.n - gt_shard_len(j.n, G, (r + 1) % G)));
      }
      free_job(&j, N);
    }
  gt_mesh_destroy(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mesh_bf16");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_all_gather_bf16_every_element);
  tcase_add_test(tc, test_all_gather_bf16_half_the_bytes);
  tcase_add_test(tc, test_all_gather_bf16_groups);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? 1 : 0;
}
