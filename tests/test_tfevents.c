/* TensorBoard event files (train/tfevents.h) and the reporter's scalars:
 * CRC-32C and the TFRecord mask against known values, one Event's bytes
 * against an encoding computed by hand (and matching python protobuf's
 * SerializeToString of the same message), the framing, the file's first
 * record, fresh file names, and failed writes reported with the file's name
 * by the writer and by the reporter. tests/e2e_tensorboard.sh reads real
 * runs back with an independent reader. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt_testutil.h"
#include "train/report.h"
#include "train/tfevents.h"

START_TEST(test_crc32c_known_vectors) {
  ck_assert_uint_eq(gt_crc32c("123456789", 9), 0xe3069283u);
  uint8_t z[32], f[32];
  memset(z, 0, sizeof z), memset(f, 0xff, sizeof f);
  /* RFC 3720 (iSCSI) B.4 */
  ck_assert_uint_eq(gt_crc32c(z, 32), 0x8a9136aau);
  ck_assert_uint_eq(gt_crc32c(f, 32), 0x62a8ab43u);
  ck_assert_uint_eq(gt_crc32c("", 0), 0u);
  /* ((0xe3069283 >> 15) | (0xe3069283 << 17)) + 0xa282ead8 mod 2^32 */
  ck_assert_uint_eq(gt_tfrecord_mask(0xe3069283u), 0xc78ab0e5u);
  ck_assert_uint_eq(gt_tfrecord_mask(0), 0xa282ead8u);
}
END_TEST

/* Event{wall_time: 1.5, step: 300, summary{value{tag: "a/b", simple_value: 2}}} */
static const uint8_t gt__event_bytes[26] = {
    0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, /* field 1 fixed64: 1.5 = 0x3ff8000000000000 little-endian */
    0x10, 0xac, 0x02,                   /* field 2 varint: 300 = 0b10_0101100 -> 0xac 0x02 */
    0x2a, 0x0c,                         /* field 5 (Summary), 12 bytes */
    0x0a, 0x0a,                         /*   Summary.value (field 1), 10 bytes */
    0x0a, 0x03, 'a', '/', 'b',          /*     Value.tag (field 1), 3 bytes */
    0x15, 0, 0, 0, 0x40,                /*     Value.simple_value (field 2 fixed32): 2.0f = 0x40000000 */
};

START_TEST(test_event_bytes_by_hand) {
  gt_tf_scalar v = {"a/b", 2.0f};
  uint8_t buf[64];
  memset(buf, 0xee, sizeof buf);
  ck_assert_uint_eq(gt_tfevents_encode_event(NULL, 0, 1.5, 300, NULL, 0, &v, 1), 26);
  ck_assert_uint_eq(gt_tfevents_encode_event(buf, sizeof buf, 1.5, 300, NULL, 0, &v, 1), 26);
  ck_assert_mem_eq(buf, gt__event_bytes, 26);
  ck_assert_uint_eq(buf[26], 0xee);

  /* the file_version event: step 0 is left out, as proto3 leaves defaults */
  size_t n = gt_tfevents_encode_event(buf, sizeof buf, 1.5, 0, "brain.Event:2", 0, NULL, 0);
  static const uint8_t fv[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.',
                               'E',  'v', 'e', 'n', 't', ':', '2'};
  ck_assert_uint_eq(n, sizeof fv);
  ck_assert_mem_eq(buf, fv, sizeof fv);

  /* restart: session_log (field 7) = SessionLog{status: START (1)} */
  n = gt_tfevents_encode_event(buf, sizeof buf, 1.5, 7, NULL, 1, NULL, 0);
  static const uint8_t rs[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x07, 0x3a, 0x02, 0x08, 0x01};
  ck_assert_uint_eq(n, sizeof rs);
  ck_assert_mem_eq(buf, rs, sizeof rs);

  /* a negative step is a 10-byte varint (int64 as two's complement) */
  ck_assert_uint_eq(gt_tfevents_encode_event(NULL, 0, 1.5, -1, NULL, 0, NULL, 0), 9 + 1 + 10);
}
END_TEST

START_TEST(test_record_frame) {
  uint8_t rec[64];
  ck_assert_uint_eq(gt_tfrecord_frame(rec, gt__event_bytes, 26), 42);
  static const uint8_t len[8] = {26, 0, 0, 0, 0, 0, 0, 0};
  ck_assert_mem_eq(rec, len, 8);
  /* the masked CRCs, as crcmod's 'crc-32c' computes them */
  static const uint8_t hcrc[4] = {0x12, 0x9b, 0xd8, 0x2d}, dcrc[4] = {0x3f, 0x9a, 0x45, 0x0b};
  ck_assert_mem_eq(rec + 8, hcrc, 4);
  ck_assert_mem_eq(rec + 12, gt__event_bytes, 26);
  ck_assert_mem_eq(rec + 38, dcrc, 4);
}
END_TEST

static int gt__count_files(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, "events.out.tfevents.", 20);
  closedir(d);
  return n;
}

START_TEST(test_file_first_record_and_fresh_names) {
  char *dir = gt_test_dir_path("tb/nested");
  gt_tfevents a, b;
  gt_err err = {0};
  ck_assert_int_eq(gt_tfevents_open(&a, dir, &err), GT_OK); /* creates the parents */
  ck_assert_int_eq(gt_tfevents_open(&b, dir, &err), GT_OK);
  ck_assert_str_ne(a.path, b.path); /* never the same file, even in the same second */
  ck_assert_ptr_nonnull(strstr(a.path, "/events.out.tfevents."));
  gt_tf_scalar v[2] = {{"learning/loss", 3.25f}, {"perf/step_time_seconds", 0.5f}};
  ck_assert_int_eq(gt_tfevents_write_scalars(&a, 4, v, 2, &err), GT_OK);
  /* flushed: the bytes are in the file before it is closed */
  long len = 0;
  char *data = gt_test_read_file(a.path, &len);
  ck_assert_ptr_nonnull(data);
  size_t n0 = gt_tfevents_encode_event(NULL, 0, 0, 0, "brain.Event:2", 0, NULL, 0);
  size_t n1 = gt_tfevents_encode_event(NULL, 0, 0, 4, NULL, 0, v, 2);
  ck_assert_int_eq(len, (long)(n0 + 16 + n1 + 16));
  uint64_t rlen = 0;
  memcpy(&rlen, data, 8);
  ck_assert_uint_eq(rlen, n0);
  ck_assert_mem_eq(data + 12 + 9, "\x1a\x0d" "brain.Event:2", 15);
  uint32_t c;
  memcpy(&c, data + 12 + n0, 4);
  ck_assert_uint_eq(c, gt_tfrecord_mask(gt_crc32c(data + 12, n0)));
  free(data);
  ck_assert_int_eq(gt_tfevents_close(&a, &err), GT_OK);
  ck_assert_int_eq(gt_tfevents_close(&b, &err), GT_OK);
  ck_assert_int_eq(gt__count_files(dir), 2);
  free(dir);
}
END_TEST

START_TEST(test_write_failure_names_the_file) {
  char *dir = gt_test_dir_path("tbfail");
  gt_tfevents w;
  gt_err err = {0};
  ck_assert_int_eq(gt_tfevents_open(&w, dir, &err), GT_OK);
  /* the disk fills up: every write to /dev/full fails with ENOSPC */
  fclose(w.f);
  w.f = fopen("/dev/full", "wb");
  ck_assert_ptr_nonnull(w.f);
  gt_tf_scalar v = {"learning/loss", 1.0f};
  ck_assert_int_eq(gt_tfevents_write_scalars(&w, 1, &v, 1, &err), GT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.msg, w.path));
  ck_assert_ptr_nonnull(strstr(err.msg, "No space left on device"));
  ck_assert_ptr_null(w.f); /* closed: later steps write nothing */
  gt_err err2 = {0};
  ck_assert_int_eq(gt_tfevents_write_scalars(&w, 2, &v, 1, &err2), GT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err2.msg, w.path));
  ck_assert_int_eq(gt_tfevents_close(&w, &err2), GT_OK);

  /* a directory that cannot be made: a file is in the way */
  char *file = gt_test_dir_path("afile");
  gt_test_write_text(file, "x");
  char *sub = gt_test_path(file, "tensorboard");
  ck_assert_int_eq(gt_tfevents_open(&w, sub, &err), GT_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.msg, file));
  free(sub), free(file), free(dir);
}
END_TEST

static gt_step_metrics gt__metrics(void) {
  gt_step_metrics sm;
  memset(&sm, 0, sizeof sm);
  sm.step = 3, sm.seconds = 0.25, sm.tflops_per_s_per_device = 0.125, sm.tokens_per_s_per_device = 1024;
  sm.total_weights = 256, sm.loss = 2.5, sm.lm_loss = 2.25, sm.perplexity = exp(2.25);
  sm.learning_rate = 1e-3, sm.grad_norm = 0.75, sm.has_moe = 1, sm.moe_lb_loss = 0.25;
  return sm;
}

START_TEST(test_report_scalars) {
  gt_step_metrics sm = gt__metrics();
  gt_report_tb b;
  const gt_tf_scalar *v = b.v;
  static const char *const tags[] = {"learning/loss", "learning/lm_loss", "learning/perplexity",
                                     "learning/moe_lb_loss", "learning/grad_norm", "learning/raw_grad_norm",
                                     "learning/current_learning_rate", "learning/total_weights",
                                     "perf/step_time_seconds", "perf/per_device_tflops",
                                     "perf/per_device_tflops_per_sec", "perf/per_device_tokens",
                                     "perf/per_device_tokens_per_sec", "perf/tokens_seen_per_device", "eval/avg_loss",
                                     "eval/avg_perplexity", "eval/total_weights"};
  /* gradient_clipping_threshold 0.5 < norm 0.75: MaxText's grad_norm is the
   * clipped gradient's, raw_grad_norm the norm before; the step's TFLOPs and
   * tokens per device are the rates times the step's seconds */
  const double want[] = {2.5,     2.25, exp(2.25), 0.25, 0.5,       0.75, 1e-3, 256, 0.25,
                         0.03125, 0.125, 256,      1024, 3072 * 4, 2.75, exp(2.75), 4096};
  sm.has_eval = 1, sm.eval_loss = 2.75, sm.eval_total_weights = 4096, sm.tokens_seen_per_device = 3072 * 4;
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 0.5, 0, &b), 17);
  for (int i = 0; i < 17; i++) {
    ck_assert_str_eq(v[i].tag, tags[i]);
    ck_assert_msg(v[i].value == (float)want[i], "%s: %g, want %g", tags[i], v[i].value, want[i]);
  }
  /* under the threshold, or no clipping: both norms are the norm */
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 1.0, 0, &b), 17);
  ck_assert(v[4].value == 0.75f && v[5].value == 0.75f);
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 0, 0, &b), 17);
  ck_assert(v[4].value == 0.75f && v[5].value == 0.75f);
  /* a dense model has no moe_lb_loss; no eval, no eval tags */
  sm.has_moe = 0, sm.has_eval = 0;
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 0.5, 0, &b), 13);
  for (int i = 0; i < 13; i++) ck_assert_str_ne(v[i].tag, "learning/moe_lb_loss");
  /* a skipped step: its non-finite values are left out (the clipped norm
   * too), the rest stay */
  sm.loss = sm.lm_loss = sm.perplexity = NAN, sm.grad_norm = INFINITY;
  ck_assert_int_eq(gt_report_tb_scalars(&sm, 0.5, 0, &b), 8);
  ck_assert_str_eq(v[0].tag, "learning/current_learning_rate");
  for (int i = 0; i < 8; i++) ck_assert(isfinite(v[i].value));
}
END_TEST

START_TEST(test_report_failed_write_fails_the_run) {
  static const char *const ov[] = {"model_name=gemma3-tiny", "steps=4"};
  gt_config c;
  gt_test_config(&c, 2, ov);
  ck_assert(c.enable_tensorboard); /* MaxText's default */
  char *run = gt_test_dir_path("run");
  ck_assert_int_eq(gt_test_system("mkdir -p '%s'", run), 0);
  gt_report r;
  gt_err err = {0};
  ck_assert_int_eq(gt_report_open(&r, &c, run, NULL, NULL, 0, &err), GT_OK);
  char *tb = gt_test_path(run, "tensorboard");
  ck_assert_int_eq(gt__count_files(tb), 1);
  gt_step_metrics sm = gt__metrics();
  sm.step = 0;
  ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_OK);
  fclose(r.tb.f);
  r.tb.f = fopen("/dev/full", "wb");
  sm.step = 1;
  char path[sizeof r.tb.path];
  snprintf(path, sizeof path, "%s", r.tb.path);
  ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_ERR_IO); /* the run stops on this */
  ck_assert_ptr_nonnull(strstr(err.msg, path));
  gt_report_close(&r);

  /* a resumed run (start 2) writes a new file; enable_tensorboard=false none */
  ck_assert_int_eq(gt_report_open(&r, &c, run, NULL, NULL, 2, &err), GT_OK);
  gt_report_close(&r);
  ck_assert_int_eq(gt__count_files(tb), 2);
  c.enable_tensorboard = 0;
  ck_assert_int_eq(gt_report_open(&r, &c, run, NULL, NULL, 2, &err), GT_OK);
  ck_assert_int_eq(gt_report_step(&r, &sm, &err), GT_OK);
  gt_report_close(&r);
  ck_assert_int_eq(gt__count_files(tb), 2);
  free(tb), free(run);
}
END_TEST

/* The test's own CRC-32C, bit by bit from the polynomial (no table). */
static uint32_t bitwise_crc32c(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

/* A one-byte message b reads table entry (0xff ^ b): the 256 bytes read
 * every entry of the constant table once. */
START_TEST(test_crc32c_every_table_entry) {
  for (int b = 0; b < 256; b++) {
    uint8_t x = (uint8_t)b;
    ck_assert_msg(gt_crc32c(&x, 1) == bitwise_crc32c(&x, 1), "byte 0x%02x: 0x%08x, expected 0x%08x", b,
                  gt_crc32c(&x, 1), bitwise_crc32c(&x, 1));
  }
  uint8_t buf[1000];
  uint64_t st = 5;
  for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)gt_test_rand_u64(&st);
  ck_assert_uint_eq(gt_crc32c(buf, sizeof buf), bitwise_crc32c(buf, sizeof buf));
}
END_TEST

/* Writers in several threads at once, started together at a barrier as the
 * first CRC users of the process (each Check test runs in its own child):
 * every record of every file carries the CRCs the bitwise reference gives.
 * The sanitizer build runs it too; a table filled lazily on first use was
 * written by every thread that found it empty while others read it. */
enum { N_WRITERS = 8, N_EVENTS = 40 };
static pthread_barrier_t start_line;

typedef struct writer_job {
  int id;
  char dir[700];
  gt_rc rc;
  char msg[GT_ERR_MSG_MAX];
} writer_job;

static void *write_events(void *arg) {
  writer_job *j = arg;
  gt_tfevents w;
  gt_err e;
  gt_err_clear(&e);
  pthread_barrier_wait(&start_line);
  j->rc = gt_tfevents_open(&w, j->dir, &e);
  for (int s = 1; s <= N_EVENTS && !j->rc; s++) {
    gt_tf_scalar v[2] = {{"loss", (float)(j->id * 1000 + s)}, {"learning/rate", 0.5f / (float)s}};
    j->rc = gt_tfevents_write_scalars(&w, s, v, 2, &e);
  }
  if (!j->rc) j->rc = gt_tfevents_close(&w, &e);
  snprintf(j->msg, sizeof j->msg, "%s", e.msg);
  return NULL;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

START_TEST(test_writers_in_threads_at_once) {
  writer_job jobs[N_WRITERS];
  pthread_t th[N_WRITERS];
  pthread_barrier_init(&start_line, NULL, N_WRITERS);
  for (int i = 0; i < N_WRITERS; i++) {
    jobs[i].id = i;
    snprintf(jobs[i].dir, sizeof jobs[i].dir, "%s/w%d", gt_test_dir, i);
    pthread_create(&th[i], NULL, write_events, &jobs[i]);
  }
  for (int i = 0; i < N_WRITERS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start_line);
  for (int i = 0; i < N_WRITERS; i++) {
    ck_assert_msg(jobs[i].rc == GT_OK, "writer %d: %s", i, jobs[i].msg);
    char *path = gt_test_output("ls %s/events.out.tfevents.*", jobs[i].dir);
    path[strcspn(path, "\n")] = 0;
    long n;
    uint8_t *d = (uint8_t *)gt_test_read_file(path, &n);
    ck_assert_ptr_nonnull(d);
    int records = 0;
    for (long o = 0; o < n; records++) {
      ck_assert_int_le(o + 12, n);
      uint64_t len = le(d + o, 8);
      ck_assert_uint_eq(le(d + o + 8, 4), gt_tfrecord_mask(bitwise_crc32c(d + o, 8)));
      ck_assert_int_le(o + 16 + (long)len, n);
      ck_assert_msg(le(d + o + 12 + len, 4) == gt_tfrecord_mask(bitwise_crc32c(d + o + 12, len)),
                    "writer %d, record %d: data CRC", i, records);
      o += 16 + (long)len;
    }
    ck_assert_int_eq(records, 1 + N_EVENTS);
    free(d), free(path);
  }
}
END_TEST

Suite *tfevents_suite(void) {
  Suite *s = suite_create("tfevents");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_crc32c_known_vectors);
  tcase_add_test(tc, test_crc32c_every_table_entry);
  tcase_add_test(tc, test_writers_in_threads_at_once);
  tcase_add_test(tc, test_event_bytes_by_hand);
  tcase_add_test(tc, test_record_frame);
  tcase_add_test(tc, test_file_first_record_and_fresh_names);
  tcase_add_test(tc, test_write_failure_names_the_file);
  tcase_add_test(tc, test_report_scalars);
  tcase_add_test(tc, test_report_failed_write_fails_the_run);
  return s;
}

int main(void) {
  return gt_test_run_suite(tfevents_suite(), 0);
}
