#define _POSIX_C_SOURCE 200809L
#include "train/tfevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------- CRC-32C and the TFRecord frame ---------- */

static uint32_t gt__crc_table[256];

static void gt__crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
    gt__crc_table[i] = c;
  }
}

uint32_t gt_crc32c(const void *data, size_t n) {
  /* filled on first use; every caller computes the same table, so a race
   * between two threads writes identical values */
  if (!gt__crc_table[1]) gt__crc_init();
  const uint8_t *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = gt__crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t gt_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void gt__le(uint8_t *out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

size_t gt_tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n) {
  gt__le(out, n, 8);
  gt__le(out + 8, gt_tfrecord_mask(gt_crc32c(out, 8)), 4);
  memcpy(out + 12, data, n);
  gt__le(out + 12 + n, gt_tfrecord_mask(gt_crc32c(data, n)), 4);
  return n + 16;
}

/* ---------- protobuf wire format (the few fields of Event) ---------- */

/* Appends to p while it fits; n counts every byte, so a first pass with
 * cap 0 measures. */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} gt__pb;

static void gt__byte(gt__pb *b, uint8_t x) {
  if (b->n < b->cap) b->p[b->n] = x;
  b->n++;
}
static void gt__varint(gt__pb *b, uint64_t v) {
  for (; v >= 0x80; v >>= 7) gt__byte(b, (uint8_t)(v | 0x80));
  gt__byte(b, (uint8_t)v);
}
static size_t gt__varint_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) n++;
  return n;
}
/* key = field number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) */
static void gt__key(gt__pb *b, int field, int wire) { gt__varint(b, (uint64_t)(field << 3 | wire)); }
static void gt__fixed(gt__pb *b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) gt__byte(b, (uint8_t)(v >> (8 * i)));
}
static void gt__bytes(gt__pb *b, int field, const char *s, size_t n) {
  gt__key(b, field, 2);
  gt__varint(b, n);
  for (size_t i = 0; i < n; i++) gt__byte(b, (uint8_t)s[i]);
}

/* Summary.Value{tag = 1, simple_value = 2} */
static size_t gt__value_len(const gt_tf_scalar *v) {
  size_t t = strlen(v->tag);
  return 1 + gt__varint_len(t) + t + 1 + 4;
}

size_t gt_tfevents_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *file_version,
                                int restart, const gt_tf_scalar *v, int n) {
  gt__pb b = {buf, 0, cap};
  uint64_t bits;
  memcpy(&bits, &wall_time, 8);
  gt__key(&b, 1, 1); /* wall_time: double */
  gt__fixed(&b, bits, 8);
  if (step) gt__key(&b, 2, 0), gt__varint(&b, (uint64_t)step); /* step: int64 */
  if (file_version) gt__bytes(&b, 3, file_version, strlen(file_version));
  if (restart) { /* session_log = 7: SessionLog{status = 1: START (1)} */
    gt__key(&b, 7, 2);
    gt__varint(&b, 2);
    gt__key(&b, 1, 0);
    gt__varint(&b, 1);
  }
  if (n > 0) { /* summary = 5: Summary{repeated Value value = 1} */
    size_t slen = 0;
    for (int i = 0; i < n; i++) slen += 1 + gt__varint_len(gt__value_len(&v[i])) + gt__value_len(&v[i]);
    gt__key(&b, 5, 2);
    gt__varint(&b, slen);
    for (int i = 0; i < n; i++) {
      gt__key(&b, 1, 2);
      gt__varint(&b, gt__value_len(&v[i]));
      gt__bytes(&b, 1, v[i].tag, strlen(v[i].tag));
      uint32_t fb;
      memcpy(&fb, &v[i].value, 4);
      gt__key(&b, 2, 5);
      gt__fixed(&b, fb, 4);
    }
  }
  return b.n;
}

/* ---------- the file ---------- */

static double gt__wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static gt_rc gt__fail(gt_tfevents *w, const char *what, gt_err *err) {
  int e = errno;
  if (w->f) fclose(w->f);
  w->f = NULL;
  return gt_err_set(err, GT_ERR_IO, "tensorboard: cannot %s '%s': %s", what, w->path, strerror(e));
}

static gt_rc gt__write_event(gt_tfevents *w, int64_t step, const char *file_version, int restart,
                             const gt_tf_scalar *v, int n, gt_err *err) {
  if (!w->f) return gt_err_set(err, GT_ERR_IO, "tensorboard: '%s' is not open (an earlier write failed)", w->path);
  double t = gt__wall_time();
  size_t len = gt_tfevents_encode_event(NULL, 0, t, step, file_version, restart, v, n);
  uint8_t *ev = malloc(len), *rec = malloc(len + 16);
  if (!ev || !rec) {
    free(ev), free(rec);
    return gt_err_set(err, GT_ERR_NOMEM, "tensorboard: no memory for an event of %zu bytes", len);
  }
  gt_tfevents_encode_event(ev, len, t, step, file_version, restart, v, n);
  size_t m = gt_tfrecord_frame(rec, ev, len);
  errno = 0;
  /* flushed every step: a run that dies still shows every step it logged */
  int ok = fwrite(rec, 1, m, w->f) == m && fflush(w->f) == 0;
  free(ev), free(rec);
  if (!ok) return gt__fail(w, "write", err);
  return GT_OK;
}

gt_rc gt_tfevents_open(gt_tfevents *w, const char *dir, gt_err *err) {
  memset(w, 0, sizeof *w);
  gt_rc rc = gt_mkdirs(dir, "tensorboard", err);
  if (rc) return rc;
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  for (char *q = host; *q; q++)
    if (*q == '/') *q = '_';
  long now = (long)time(NULL), pid = (long)getpid();
  /* "x": never reuse a name (two runs of one process in the same second) */
  for (int k = 0; k < 1000 && !w->f; k++) {
    if (k == 0)
      snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%ld", dir, now, host, pid);
    else
      snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%ld.%d", dir, now, host, pid, k);
    errno = 0;
    w->f = fopen(w->path, "wbx");
    if (!w->f && errno != EEXIST) return gt__fail(w, "create", err);
  }
  if (!w->f) return gt_err_set(err, GT_ERR_IO, "tensorboard: no free event file name in '%s' (last tried '%s')", dir, w->path);
  return gt__write_event(w, 0, "brain.Event:2", 0, NULL, 0, err);
}

gt_rc gt_tfevents_write_scalars(gt_tfevents *w, int64_t step, const gt_tf_scalar *v, int n, gt_err *err) {
  return gt__write_event(w, step, NULL, 0, v, n, err);
}

gt_rc gt_tfevents_write_restart(gt_tfevents *w, int64_t step, gt_err *err) {
  return gt__write_event(w, step, NULL, 1, NULL, 0, err);
}

gt_rc gt_tfevents_close(gt_tfevents *w, gt_err *err) {
  if (!w->f) return GT_OK;
  FILE *f = w->f;
  w->f = NULL;
  errno = 0;
  if (fclose(f) != 0) return gt_err_set(err, GT_ERR_IO, "tensorboard: cannot close '%s': %s", w->path, strerror(errno));
  return GT_OK;
}
