/* collective_timeout_seconds belongs to whoever waits: each thread has its
 * own (gt_dist_set_timeout), each mesh sets its own on its device threads,
 * and a gt_ctx on its host thread, so two contexts of one process with
 * different timeouts each keep theirs. Without MPI the timeout bounds no
 * wait, so these tests read back the value each thread would wait by. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>

#include "dist/dist.h"
#include "gemtrain/gemtrain.h"
#include "gt_testutil.h"
#include "mesh/fsdp.h"
#include "mesh/mesh.h"
#include "train/api_internal.h"
#include "train/trainer.h"

static pthread_barrier_t both;

typedef struct th_job {
  double set, seen[100];
} th_job;

static void *thread_timeout(void *arg) {
  th_job *j = arg;
  pthread_barrier_wait(&both);
  gt_dist_set_timeout(j->set);
  pthread_barrier_wait(&both); /* both have set theirs before either reads */
  for (int i = 0; i < 100; i++) j->seen[i] = gt_dist_timeout();
  return NULL;
}

START_TEST(test_each_thread_its_own) {
  th_job a = {5.0, {0}}, b = {9.0, {0}};
  pthread_t ta, tb;
  pthread_barrier_init(&both, NULL, 2);
  pthread_create(&ta, NULL, thread_timeout, &a);
  pthread_create(&tb, NULL, thread_timeout, &b);
  pthread_join(ta, NULL), pthread_join(tb, NULL);
  pthread_barrier_destroy(&both);
  for (int i = 0; i < 100; i++) ck_assert(a.seen[i] == 5.0 && b.seen[i] == 9.0);
  ck_assert(gt_dist_timeout() == 300.0); /* this thread set none */
}
END_TEST

/* What each device thread of a mesh would wait by. */
typedef struct probe {
  double seen[4];
} probe;

static void read_timeout(int dev, void *arg) { ((probe *)arg)->seen[dev] = gt_dist_timeout(); }

static probe run_probe(gt_mesh *m) {
  probe p = {{0}};
  gt_mesh_run(m, read_timeout, &p);
  return p;
}

START_TEST(test_each_mesh_its_own) {
  gt_mesh *m1, *m2;
  gt_err e;
  ck_assert(gt_mesh_create(&m1, 2, &e) == GT_OK && gt_mesh_create(&m2, 3, &e) == GT_OK);
  ck_assert(gt_mesh_timeout(m1) == 300.0);
  gt_mesh_set_timeout(m1, 5.0);
  gt_mesh_set_timeout(m2, 9.0);
  gt_mesh_set_timeout(m2, -1.0); /* refused: kept */
  gt_dist_set_timeout(77.0);     /* the caller's thread: neither mesh's */
  for (int r = 0; r < 3; r++) {
    probe p1 = run_probe(m1), p2 = run_probe(m2);
    for (int d = 0; d < 2; d++) ck_assert_msg(p1.seen[d] == 5.0, "mesh 1 device %d: %g", d, p1.seen[d]);
    for (int d = 0; d < 3; d++) ck_assert_msg(p2.seen[d] == 9.0, "mesh 2 device %d: %g", d, p2.seen[d]);
  }
  ck_assert(gt_mesh_timeout(m1) == 5.0 && gt_mesh_timeout(m2) == 9.0 && gt_dist_timeout() == 77.0);
  gt_mesh_destroy(m1), gt_mesh_destroy(m2);
}
END_TEST

static gt_ctx *ctx_with_timeout(const char *t) {
  const char *ov[] = {"dataset_type=synthetic", "num_devices=2", "per_device_batch_size=1", "max_target_length=16",
                      "threads_per_device=1", t};
  gt_ctx *c = gt_ctx_new();
  ck_assert_msg(gt_ctx_configure(c, "gemma3-tiny", 6, ov) == GT_OK && gt_ctx_init(c) == GT_OK, "%s",
                gt_ctx_error(c));
  return c;
}

START_TEST(test_each_context_its_own) {
  gt_ctx *a = ctx_with_timeout("collective_timeout_seconds=5"), *b = ctx_with_timeout("collective_timeout_seconds=9");
  gt_mesh *ma = gt_fsdp_mesh(gt_trainer_fsdp(gt__ctx_trainer(a)));
  gt_mesh *mb = gt_fsdp_mesh(gt_trainer_fsdp(gt__ctx_trainer(b)));
  double l;
  for (int r = 0; r < 2; r++) {
    /* each context's call waits on the host by its own, whichever came last */
    ck_assert(gt_ctx_train(a, 1, &l) == GT_OK);
    ck_assert(gt_dist_timeout() == 5.0);
    probe pa = run_probe(ma);
    ck_assert(gt_ctx_train(b, 1, &l) == GT_OK);
    ck_assert(gt_dist_timeout() == 9.0);
    probe pb = run_probe(mb);
    /* and so do its devices */
    for (int d = 0; d < 2; d++) ck_assert_msg(pa.seen[d] == 5.0 && pb.seen[d] == 9.0, "device %d: %g, %g", d,
                                               pa.seen[d], pb.seen[d]);
  }
  gt_ctx_free(a), gt_ctx_free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("timeout");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_each_thread_its_own);
  tcase_add_test(tc, test_each_mesh_its_own);
  tcase_add_test(tc, test_each_context_its_own);
  return gt_test_run_suite(s, 0);
}
