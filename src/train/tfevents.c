#define _POSIX_C_SOURCE 200809L
#include "train/tfevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------- CRC-32C and the TFRecord frame ---------- */

/* The byte-wise table of the reflected polynomial 0x82f63b78: entry i is i
 * run through eight shift-and-xor steps. A constant, not filled on first
 * use, so threads writing events at once share no mutable state
 * (tests/test_tfevents.c recomputes every entry from the polynomial). */
static const uint32_t gt__crc_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu,
    0x26a1e7e8u, 0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu,
    0x4d43cfd0u, 0xbf284cd3u, 0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu,
    0xf165b798u, 0x030e349bu, 0xd7c45070u, 0x25afd373u, 0x36ff2087u, 0xc494a384u,
    0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u, 0x5d1d08bfu, 0xaf768bbcu,
    0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u, 0x33ed7d2au,
    0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau,
    0x30e349b1u, 0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu,
    0x1642ae59u, 0xe4292d5au, 0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au,
    0x7da08661u, 0x8fcb0562u, 0x9c9bf696u, 0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu,
    0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u, 0x67dafa54u, 0x95b17957u,
    0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu, 0xfe53516fu,
    0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu,
    0x3ac7f2ebu, 0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u,
    0x61c69362u, 0x93ad1061u, 0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu,
    0x4767748au, 0xb50cf789u, 0xeb1fcbadu, 0x197448aeu, 0x0a24bb5au, 0xf84f3859u,
    0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u, 0x7198540du, 0x83f3d70eu,
    0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u, 0xa55230e6u,
    0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu,
    0x456cac67u, 0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u,
    0xe9141340u, 0x1b7f9043u, 0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu,
    0x92a8fc17u, 0x60c37f14u, 0x73938ce0u, 0x81f80fe3u, 0x55326b08u, 0xa759e80bu,
    0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu, 0xf94ad42fu, 0x0b21572cu,
    0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u, 0x502036a5u,
    0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u,
    0x0e330a81u, 0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du,
    0x758fe5d6u, 0x87e466d5u, 0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u,
    0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u, 0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu,
    0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u, 0x0417b1dbu, 0xf67c32d8u,
    0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu, 0x5a048dffu,
    0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u,
    0x590ab964u, 0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u,
    0x7fab5e8cu, 0x8dc0dd8fu, 0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu,
    0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u, 0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u,
    0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u, 0x4f48173du, 0xbd23943eu,
    0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au, 0xc69f7b69u,
    0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

uint32_t gt_crc32c(const void *data, size_t n) {
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
