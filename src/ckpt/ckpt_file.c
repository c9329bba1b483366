/* One checkpoint shard file: streamed out tensor by tensor (raw or through
 * zlib) with a crc32 of every tensor's raw bytes, the header written last and
 * pointed to by the preamble; read back with every size, offset and crc
 * checked before a byte is trusted. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/ckpt_seam.h"
#include "model/qstore.h"
#include "mesh/mesh.h"

#define GT__CHUNK (256u << 10)

/* ---------- test seam (ckpt_seam.h) ---------- */

static gt__ckpt_fault gt__fault_kind = GT__CKPT_FAULT_NONE;
static long gt__fault_at, gt__saves; /* saves counted since gt__ckpt_set_fault */
static int gt__fault_armed;          /* this save fires when it reaches the point */

void gt__ckpt_set_fault(gt__ckpt_fault kind, long nth_save) {
  gt__fault_kind = nth_save >= 1 ? kind : GT__CKPT_FAULT_NONE;
  gt__fault_at = nth_save;
  gt__saves = 0;
  gt__fault_armed = 0;
}

static gt__ckpt_point_fn gt__point_fn;
static void *gt__point_ctx;

void gt__ckpt_set_point_hook(gt__ckpt_point_fn fn, void *ctx) {
  gt__point_fn = fn;
  gt__point_ctx = ctx;
}

void gt__ckpt_point(const char *point, int64_t step) {
  if (gt__point_fn) gt__point_fn(gt__point_ctx, point, step);
}

void gt__ckpt_fault_next_save(void) {
  /* disarmed, nothing is touched: the rank threads of one test process may
   * all be saving at once */
  if (gt__fault_kind == GT__CKPT_FAULT_NONE) return;
  gt__saves++;
  gt__fault_armed = gt__saves == gt__fault_at;
}

/* ---------- little-endian helpers ---------- */

static void gt__put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void gt__put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t gt__get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t gt__get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t gt__crc(uint32_t crc, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) { /* zlib takes uInt lengths */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = (uint32_t)crc32(crc, p, k);
    p += k, n -= k;
  }
  return crc;
}

/* ---------- writing ---------- */

typedef struct gt__wfile {
  int fd;
  const char *path;
  uint64_t pos;
  gt_err *err;
} gt__wfile;

static gt_rc gt__write(gt__wfile *w, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(w->fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return gt_err_set(w->err, GT_ERR_IO, "checkpoint: cannot write '%s': %s", w->path,
                        k < 0 ? strerror(errno) : "no progress");
    p += k, n -= (size_t)k, w->pos += (uint64_t)k;
  }
  return GT_OK;
}

/* The hook fires once the shard has consumed half of its raw tensor bytes. */
static gt_rc gt__fault_fire(gt__wfile *w) {
  gt__fault_armed = 0;
  if (gt__fault_kind == GT__CKPT_FAULT_KILL) raise(SIGKILL);
  return gt_err_set(w->err, GT_ERR_IO, "checkpoint: cannot write '%s': %s", w->path, strerror(ENOSPC));
}

/* One tensor: raw bytes, or a zlib stream of them. *stored = bytes written. */
static gt_rc gt__write_tensor(gt__wfile *w, const float *data, int64_t count, int level, uint64_t *raw_done,
                              uint64_t fault_at, int64_t *half_step, uint64_t *stored, uint32_t *crc) {
  const unsigned char *src = (const unsigned char *)data;
  uint64_t nb = (uint64_t)count * sizeof(float), done = 0, start = w->pos;
  *crc = (uint32_t)crc32(0, Z_NULL, 0);
  z_stream zs;
  unsigned char *out = NULL;
  gt_rc rc = GT_OK;
  if (level) {
    memset(&zs, 0, sizeof zs);
    out = malloc(GT__CHUNK);
    if (!out || deflateInit(&zs, level) != Z_OK) {
      free(out);
      return gt_err_set(w->err, GT_ERR_NOMEM, "checkpoint: cannot start zlib for '%s'", w->path);
    }
  }
  for (;;) {
    size_t k = nb - done > GT__CHUNK ? GT__CHUNK : (size_t)(nb - done);
    int at_half = gt__fault_armed || *half_step >= 0;
    if (at_half && *raw_done < fault_at && *raw_done + k > fault_at) k = (size_t)(fault_at - *raw_done);
    if (*half_step >= 0 && *raw_done >= fault_at) { /* the test seam's point "half" */
      gt__ckpt_point("half", *half_step);
      *half_step = -1;
    }
    if (gt__fault_armed && *raw_done >= fault_at) {
      rc = gt__fault_fire(w);
      break;
    }
    *crc = gt__crc(*crc, src + done, k);
    int last = done + k == nb;
    if (!level) {
      if ((rc = gt__write(w, src + done, k))) break;
    } else {
      zs.next_in = (Bytef *)(src + done);
      zs.avail_in = (uInt)k;
      do {
        zs.next_out = out;
        zs.avail_out = GT__CHUNK;
        int zr = deflate(&zs, last ? Z_FINISH : Z_NO_FLUSH);
        if (zr == Z_STREAM_ERROR) {
          rc = gt_err_set(w->err, GT_ERR_INTERNAL, "checkpoint: zlib failed on '%s'", w->path);
          break;
        }
        if ((rc = gt__write(w, out, GT__CHUNK - zs.avail_out))) break;
      } while (zs.avail_out == 0);
      if (rc) break;
    }
    done += k, *raw_done += k;
    if (last) break;
  }
  if (level) deflateEnd(&zs), free(out);
  *stored = w->pos - start;
  return rc;
}

static const char *gt__class_name[3] = {"params", "opt_mu", "opt_nu"};

static void gt__unit_name(const gt_model *m, int64_t u, char *buf, size_t n) {
  (void)m;
  if (u == 0)
    snprintf(buf, n, "head");
  else
    snprintf(buf, n, "layer_%04lld", (long long)(u - 1));
}

cJSON *gt__ckpt_model_table(const gt_model *m) {
  cJSON *t = cJSON_CreateArray();
  for (int i = 0; i < m->n_tensors; i++) {
    cJSON *e = cJSON_CreateArray(), *sh = cJSON_CreateArray();
    cJSON_AddItemToArray(e, cJSON_CreateString(m->tensors[i].name));
    for (int d = 0; d < m->tensors[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)m->tensors[i].shape[d]));
    cJSON_AddItemToArray(e, sh);
    cJSON_AddItemToArray(t, e);
  }
  return t;
}

/* A unit as checkpoints hold it: its trainable elements (a prefix of the
 * unit; all of it when nothing is frozen). The frozen rest is referenced,
 * not stored (gt__ckpt_frozen_ref). */
static void gt__unit_stored(const gt_model *m, int64_t u, int64_t *off, int64_t *cnt) {
  gt_model_unit(m, u, off, cnt);
  *cnt = gt_model_unit_trainable(m, u);
}

cJSON *gt__ckpt_frozen_ref(const gt_model *m, uint64_t sum, const char *source) {
  if (!m->n_frozen_tensors) return NULL;
  cJSON *o = cJSON_CreateObject(), *names = cJSON_CreateArray();
  char hex[24];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sum);
  cJSON_AddStringToObject(o, "source", source ? source : "");
  cJSON_AddStringToObject(o, "checksum", hex);
  int64_t frozen_el = 0;
  for (int i = 0; i < m->n_tensors; i++) frozen_el += m->tensors[i].role == GT_ROLE_FROZEN ? m->tensors[i].numel : 0;
  cJSON_AddNumberToObject(o, "elements", (double)frozen_el);
  /* the base's storage, the projections' and the lookup tables': its
   * checksum is over these words */
  cJSON_AddStringToObject(o, "qtype", gt_qstore_name(m));
  cJSON_AddStringToObject(o, "embedding_qtype", gt_qstore_embed_name(m));
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].role == GT_ROLE_FROZEN) cJSON_AddItemToArray(names, cJSON_CreateString(m->tensors[i].name));
  cJSON_AddItemToObject(o, "tensors", names);
  return o;
}

gt_rc gt__ckpt_check_frozen(const cJSON *ref, const gt_model *m, const char *where, gt_err *err) {
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(ref, "tensors");
  int there = ref ? cJSON_GetArraySize(names) : 0, same = there == m->n_frozen_tensors;
  if (ref && !cJSON_IsArray(names))
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has a frozen reference without its tensor list", where);
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, names) {
    while (i < m->n_tensors && m->tensors[i].role != GT_ROLE_FROZEN) i++;
    if (!same || i >= m->n_tensors || !cJSON_IsString(it) || strcmp(it->valuestring, m->tensors[i].name)) {
      same = 0;
      break;
    }
    i++;
  }
  if (!same)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "checkpoint: '%s' was written with %d frozen tensor%s, this run freezes %d "
                      "(trainable_parameters_mask differs); a checkpoint resumes only under the mask that wrote it",
                      where, there, there == 1 ? "" : "s", m->n_frozen_tensors);
  /* a base stored otherwise has other bytes (written before the qtype was
   * recorded: float32) */
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(ref, "qtype");
  const char *was = cJSON_IsString(q) ? q->valuestring : "float32", *now = gt_qstore_name(m);
  if (ref && strcmp(was, now))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "checkpoint: '%s' was trained over a frozen base stored as lora_weight_qtype=%s, this run stores "
                      "it as lora_weight_qtype=%s; resume with lora_weight_qtype=%s",
                      where, was, now, was);
  /* the lookup tables: a checkpoint that does not name their storage was
   * written when they were stored as qtype (an int8 or nf4 embedding,
   * where lora_embedding_qtype=auto now keeps bfloat16) */
  const cJSON *eq = cJSON_GetObjectItemCaseSensitive(ref, "embedding_qtype");
  const char *ewas = cJSON_IsString(eq) ? eq->valuestring : gt_qstore_has_frozen_table(m) ? was : "float32",
             *enow = gt_qstore_embed_name(m);
  if (ref && strcmp(ewas, enow))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "checkpoint: '%s' was trained over a frozen embedding stored as %s (lora_weight_qtype=%s), this "
                      "run stores it as %s; resume with lora_embedding_qtype=%s",
                      where, ewas, was, enow, ewas);
  return GT_OK;
}

static void gt__shape_str(const int64_t *s, int nd, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < nd && o < n; d++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)s[d]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

gt_rc gt__ckpt_check_model(const cJSON *table, const gt_model *m, const char *where, gt_err *err) {
  if (!cJSON_IsArray(table))
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has no model tensor table", where);
  char diff[700] = "";
  size_t o = 0;
  int nd = 0, n = cJSON_GetArraySize(table);
  /* both directions: tensors that differ or exist on one side only */
  for (int i = 0; i < m->n_tensors; i++) {
    const gt_tensor_info *t = &m->tensors[i];
    const cJSON *e = NULL, *it;
    cJSON_ArrayForEach(it, table) {
      const cJSON *nm = cJSON_GetArrayItem(it, 0);
      if (cJSON_IsString(nm) && !strcmp(nm->valuestring, t->name)) {
        e = it;
        break;
      }
    }
    char here[96], there[96] = "absent";
    gt__shape_str(t->shape, t->ndim, here, sizeof here);
    int same = 0;
    if (e) {
      int64_t s[8];
      const cJSON *sh = cJSON_GetArrayItem(e, 1);
      int k = cJSON_GetArraySize(sh);
      for (int d = 0; d < k && d < 8; d++) {
        /* -1 stands for anything that is not a dimension: it matches none */
        const cJSON *x = cJSON_GetArrayItem(sh, d);
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        s[d] = v >= 0 && v <= (double)GT__CKPT_INT_MAX && v == floor(v) ? (int64_t)v : -1;
      }
      gt__shape_str(s, k > 8 ? 8 : k, there, sizeof there);
      same = !strcmp(here, there);
    }
    if (!same && nd++ < 4 && o < sizeof diff)
      o += (size_t)snprintf(diff + o, sizeof diff - o, "%s%s is %s there, %s here", o ? "; " : "", t->name, there, here);
  }
  if (n > m->n_tensors && o < sizeof diff)
    o += (size_t)snprintf(diff + o, sizeof diff - o, "%s%d tensors there, %d here", o ? "; " : "", n, m->n_tensors),
        nd++;
  if (nd)
    return gt_err_set(err, GT_ERR_CONFIG, "checkpoint: '%s' was written for a different model: %s%s", where, diff,
                      nd > 4 ? "; ..." : "");
  return GT_OK;
}

gt_rc gt__ckpt_write_shard(const char *path, const gt_model *m, int r, int S, const float *params, const float *mu,
                           const float *nu, const cJSON *meta, int level, int excl, int64_t half_step, gt_err *err) {
  const float *cls[3] = {params, mu, nu};
  int64_t nu_ = gt_model_n_units(m);
  /* a poisoned state must never become a checkpoint */
  int64_t shard_n = 0;
  for (int64_t u = 0; u < nu_; u++) {
    int64_t off, cnt;
    gt__unit_stored(m, u, &off, &cnt);
    shard_n += gt_shard_len(cnt, S, r);
  }
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < shard_n; i++)
      if (!isfinite(cls[k][i]))
        return gt_err_set(err, GT_ERR_NUMERIC,
                          "checkpoint: refusing to write '%s': %s element %lld of shard %d is %g (not finite)", path,
                          gt__class_name[k], (long long)i, r, (double)cls[k][i]);
  int fd = open(path, O_WRONLY | O_CREAT | (excl ? O_EXCL : O_TRUNC), 0644);
  if (fd < 0 && excl && errno == EEXIST)
    return gt_err_set(err, GT_ERR_ARG,
                      "checkpoint: cannot create '%s': it exists; is another rank writing shard %d too? (every shard "
                      "needs exactly one rank that holds it)",
                      path, r);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "checkpoint: cannot create '%s': %s", path, strerror(errno));
  gt__wfile w = {fd, path, 0, err};
  unsigned char pre[GT__CKPT_PREAMBLE] = {0};
  gt_rc rc = gt__write(&w, pre, sizeof pre);
  cJSON *hdr = cJSON_Duplicate(meta, 1), *tens = cJSON_CreateArray();
  cJSON *sh = cJSON_AddObjectToObject(hdr, "shard");
  cJSON_AddNumberToObject(sh, "rank", r);
  cJSON_AddNumberToObject(sh, "of", S);
  cJSON_AddItemToObject(hdr, "tensors", tens);
  uint64_t raw_done = 0, fault_at = (uint64_t)shard_n * 3 * sizeof(float) / 2;
  for (int k = 0; k < 3 && !rc; k++) {
    const float *base = cls[k];
    for (int64_t u = 0; u < nu_ && !rc; u++) {
      int64_t off, cnt;
      gt__unit_stored(m, u, &off, &cnt);
      int64_t b = gt_shard_begin(cnt, S, r), n = gt_shard_len(cnt, S, r);
      uint64_t at = w.pos, stored = 0;
      uint32_t crc = 0;
      rc = gt__write_tensor(&w, base, n, level, &raw_done, fault_at, &half_step, &stored, &crc);
      base += n;
      if (rc) break;
      char un[32], name[64];
      gt__unit_name(m, u, un, sizeof un);
      snprintf(name, sizeof name, "%s/%s", gt__class_name[k], un);
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "name", name);
      cJSON_AddStringToObject(e, "dtype", "F32");
      cJSON *shp = cJSON_AddArrayToObject(e, "shape");
      cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)n));
      cJSON_AddNumberToObject(e, "unit", (double)u);
      cJSON_AddNumberToObject(e, "begin", (double)b);
      cJSON_AddNumberToObject(e, "count", (double)n);
      cJSON_AddNumberToObject(e, "offset", (double)at);
      cJSON_AddNumberToObject(e, "stored", (double)stored);
      cJSON_AddNumberToObject(e, "crc32", (double)crc);
      cJSON_AddItemToArray(tens, e);
    }
  }
  char *js = rc ? NULL : cJSON_PrintUnformatted(hdr);
  cJSON_Delete(hdr);
  if (!rc && !js) rc = gt_err_set(err, GT_ERR_NOMEM, "checkpoint: no memory for the header of '%s'", path);
  if (!rc) {
    size_t hn = strlen(js);
    uint64_t hoff = w.pos;
    rc = gt__write(&w, js, hn);
    memcpy(pre, GT__CKPT_MAGIC, 8);
    gt__put32(pre + 8, GT_CKPT_VERSION);
    gt__put32(pre + 12, level ? 1u : 0u);
    gt__put64(pre + 16, hoff);
    gt__put64(pre + 24, hn);
    gt__put32(pre + 32, gt__crc((uint32_t)crc32(0, Z_NULL, 0), js, hn));
    gt__put32(pre + 36, gt__crc((uint32_t)crc32(0, Z_NULL, 0), pre, 36));
    if (!rc && pwrite(fd, pre, sizeof pre, 0) != (ssize_t)sizeof pre)
      rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot write '%s': %s", path, strerror(errno));
    if (!rc && fsync(fd))
      rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot fsync '%s': %s", path, strerror(errno));
  }
  free(js);
  if (close(fd) && !rc) rc = gt_err_set(err, GT_ERR_IO, "checkpoint: cannot close '%s': %s", path, strerror(errno));
  return rc;
}

/* ---------- reading ---------- */

static gt_rc gt__pread(int fd, void *buf, size_t n, uint64_t at, const char *path, gt_err *err) {
  char *p = buf;
  while (n) {
    ssize_t k = pread(fd, p, n, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' is truncated: cannot read %zu bytes at offset %llu%s%s",
                        path, n, (unsigned long long)at, k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
    p += k, n -= (size_t)k, at += (uint64_t)k;
  }
  return GT_OK;
}

static gt_rc gt__read_tensor(int fd, const char *path, const char *name, uint64_t at, uint64_t stored, int zipped,
                             float *dst, int64_t count, uint32_t want_crc, gt_err *err) {
  uint64_t nb = (uint64_t)count * sizeof(float);
  gt_rc rc = GT_OK;
  if (!zipped) {
    if (stored != nb)
      return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor '%s' stores %llu bytes; %lld floats need %llu",
                        path, name, (unsigned long long)stored, (long long)count, (unsigned long long)nb);
    if ((rc = gt__pread(fd, dst, nb, at, path, err))) return rc;
  } else {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    unsigned char *in = malloc(GT__CHUNK);
    if (!in || inflateInit(&zs) != Z_OK) {
      free(in);
      return gt_err_set(err, GT_ERR_NOMEM, "checkpoint: cannot start zlib for '%s'", path);
    }
    unsigned char *out = (unsigned char *)dst;
    uint64_t got_in = 0, got_out = 0;
    int zr = Z_OK;
    while (zr != Z_STREAM_END) {
      size_t k = stored - got_in > GT__CHUNK ? GT__CHUNK : (size_t)(stored - got_in);
      if (k == 0) break;
      if ((rc = gt__pread(fd, in, k, at + got_in, path, err))) break;
      got_in += k;
      zs.next_in = in;
      zs.avail_in = (uInt)k;
      while (zs.avail_in && zr != Z_STREAM_END) {
        uint64_t room = nb - got_out;
        zs.next_out = out + got_out;
        zs.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
        uInt before = zs.avail_out;
        zr = inflate(&zs, Z_NO_FLUSH);
        got_out += before - zs.avail_out;
        if (zr != Z_OK && zr != Z_STREAM_END) break;
        if (zs.avail_out == 0 && got_out == nb && zs.avail_in) break; /* more data than the tensor holds */
      }
      if (zr != Z_OK && zr != Z_STREAM_END) break;
      if (got_out == nb && zs.avail_in && zr != Z_STREAM_END) break;
    }
    inflateEnd(&zs);
    free(in);
    if (rc) return rc;
    if (zr != Z_STREAM_END || got_out != nb || got_in != stored)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "checkpoint: '%s' tensor '%s' does not inflate to %llu bytes (zlib status %d, got %llu)", path,
                        name, (unsigned long long)nb, zr, (unsigned long long)got_out);
  }
  uint32_t crc = gt__crc((uint32_t)crc32(0, Z_NULL, 0), dst, nb);
  if (crc != want_crc)
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor '%s' has crc32 %08x, the header records %08x", path,
                      name, crc, want_crc);
  /* the writer refuses non-finite values, so one here was put there */
  for (int64_t i = 0; i < count; i++)
    if (!isfinite(dst[i]))
      return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor '%s' element %lld is %g; checkpoints hold finite values",
                        path, name, (long long)i, (double)dst[i]);
  return GT_OK;
}

static void gt__bound_str(int64_t v, char *buf, size_t n) {
  if (v >= GT__CKPT_INT_MAX)
    snprintf(buf, n, "2^53");
  else
    snprintf(buf, n, "%lld", (long long)v);
}

gt_rc gt__ckpt_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, const char *path, const char *what,
                   const char *why, int64_t *out, gt_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  /* the comparisons come before any cast: a double outside int64 is UB */
  if (cJSON_IsNumber(v) && v->valuedouble >= (double)lo && v->valuedouble <= (double)hi &&
      v->valuedouble == floor(v->valuedouble)) {
    *out = (int64_t)v->valuedouble;
    return GT_OK;
  }
  char *text = v ? cJSON_PrintUnformatted(v) : NULL, his[32];
  gt__bound_str(hi, his, sizeof his);
  gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' %s field '%s' = %s; expected an integer in [%lld, %s]%s%s%s", path,
             what, key, text ? text : "(absent)", (long long)lo, his, why ? " (" : "", why ? why : "",
             why ? ")" : "");
  free(text);
  return GT_ERR_FORMAT;
}

/* The preamble and header of a shard file: everything but the tensors. */
static gt_rc gt__read_header(int fd, const char *path, cJSON **out, uint64_t *hoff_out, int *zipped, gt_err *err) {
  *out = NULL;
  gt_rc rc = GT_OK;
  char *js = NULL;
  struct stat sb;
  unsigned char pre[GT__CKPT_PREAMBLE];
  if (fstat(fd, &sb) || (uint64_t)sb.st_size < GT__CKPT_PREAMBLE)
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' is truncated: %lld bytes, a shard has at least %d", path,
                      (long long)sb.st_size, GT__CKPT_PREAMBLE);
  uint64_t fsize = (uint64_t)sb.st_size;
  if ((rc = gt__pread(fd, pre, sizeof pre, 0, path, err))) return rc;
  if (memcmp(pre, GT__CKPT_MAGIC, 8))
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' is not a gemtrain checkpoint shard (wrong magic)", path);
  if (gt__get32(pre + 36) != gt__crc((uint32_t)crc32(0, Z_NULL, 0), pre, 36))
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has a damaged preamble (crc32 mismatch)", path);
  if (gt__get32(pre + 8) != GT_CKPT_VERSION)
    return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has format version %u; this gemtrain reads version %d",
                      path, gt__get32(pre + 8), GT_CKPT_VERSION);
  *zipped = gt__get32(pre + 12) & 1;
  uint64_t hoff = gt__get64(pre + 16), hn = gt__get64(pre + 24);
  if (hn == 0 || hn > GT__CKPT_MAX_HEADER || hoff < GT__CKPT_PREAMBLE || hoff + hn != fsize)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "checkpoint: '%s' is truncated or damaged: its header (%llu bytes at %llu) should end the file, "
                      "which has %llu bytes",
                      path, (unsigned long long)hn, (unsigned long long)hoff, (unsigned long long)fsize);
  if (!(js = malloc(hn + 1))) return gt_err_set(err, GT_ERR_NOMEM, "checkpoint: no memory for the header of '%s'", path);
  if ((rc = gt__pread(fd, js, hn, hoff, path, err))) goto out;
  js[hn] = 0;
  if (gt__get32(pre + 32) != gt__crc((uint32_t)crc32(0, Z_NULL, 0), js, hn)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has a damaged header (crc32 mismatch)", path);
    goto out;
  }
  if (!(*out = cJSON_Parse(js))) rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has a header that is not JSON", path);
  *hoff_out = hoff;
out:
  free(js);
  return rc;
}

gt_rc gt__ckpt_read_header(const char *path, cJSON **header, gt_err *err) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: cannot open '%s': %s", path, strerror(errno));
  uint64_t hoff;
  int zipped;
  gt_rc rc = gt__read_header(fd, path, header, &hoff, &zipped, err);
  close(fd);
  return rc;
}

gt_rc gt__ckpt_read_shard(const char *path, const gt_model *m, int r, int S, int64_t step, float *params, float *mu,
                          float *nu, cJSON **header, int *S_out, gt_err *err) {
  *header = NULL;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return gt_err_set(err, GT_ERR_FORMAT, "checkpoint: cannot open '%s': %s", path, strerror(errno));
  cJSON *h = NULL;
  uint64_t hoff = 0;
  int zipped = 0;
  gt_rc rc = gt__read_header(fd, path, &h, &hoff, &zipped, err);
  if (rc) goto out;
  const cJSON *shard = cJSON_GetObjectItemCaseSensitive(h, "shard"), *state = cJSON_GetObjectItemCaseSensitive(h, "state");
  int64_t hr, hs, hstep;
  if ((rc = gt__ckpt_int(shard, "rank", 0, GT__CKPT_MAX_SHARDS - 1, path, "shard", NULL, &hr, err)) ||
      (rc = gt__ckpt_int(shard, "of", 1, GT__CKPT_MAX_SHARDS, path, "shard", NULL, &hs, err)) ||
      (rc = gt__ckpt_int(state, "step", 0, GT__CKPT_INT_MAX, path, "state", NULL, &hstep, err)))
    goto out;
  if (hr != r || (S >= 0 && hs != S) || hstep != step) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "checkpoint: '%s' holds shard %lld of %lld at step %lld, expected shard %d of %lld at step %lld", path,
                    (long long)hr, (long long)hs, (long long)hstep, r, (long long)(S >= 0 ? S : hs), (long long)step);
    goto out;
  }
  S = (int)hs;
  if ((rc = gt__ckpt_check_model(cJSON_GetObjectItemCaseSensitive(h, "model"), m, path, err))) goto out;
  if ((rc = gt__ckpt_check_frozen(cJSON_GetObjectItemCaseSensitive(h, "frozen"), m, path, err))) goto out;
  /* the tensors tile [64, header) exactly, in order */
  const cJSON *tens = cJSON_GetObjectItemCaseSensitive(h, "tensors"), *e;
  uint64_t expect_at = GT__CKPT_PREAMBLE;
  int64_t nu_ = gt_model_n_units(m), i = 0;
  if (!cJSON_IsArray(tens) || cJSON_GetArraySize(tens) != 3 * nu_) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' lists %d tensors; the model needs %lld", path,
                    cJSON_GetArraySize(tens), (long long)(3 * nu_));
    goto out;
  }
  float *cls[3] = {params, mu, nu};
  cJSON_ArrayForEach(e, tens) {
    int k = (int)(i / nu_);
    int64_t u = i % nu_, off, cnt;
    gt__unit_stored(m, u, &off, &cnt);
    /* the name, dtype and shape the writer gives this position */
    char want[64], un[32], what[96];
    gt__unit_name(m, u, un, sizeof un);
    snprintf(want, sizeof want, "%s/%s", gt__class_name[k], un);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"), *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(nm) || strcmp(nm->valuestring, want)) {
      char *t = nm ? cJSON_PrintUnformatted(nm) : NULL;
      rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor %lld is named %s; expected '%s'", path, (long long)i,
                      t ? t : "(absent)", want);
      free(t);
      goto out;
    }
    const char *name = nm->valuestring;
    i++;
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32")) {
      char *t = dt ? cJSON_PrintUnformatted(dt) : NULL;
      rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor '%s' has dtype %s; checkpoints store F32", path,
                      name, t ? t : "(absent)");
      free(t);
      goto out;
    }
    snprintf(what, sizeof what, "tensor '%s'", name);
    int64_t at_, stored_, b, n, eu, crc_;
    if ((rc = gt__ckpt_int(e, "offset", 0, (int64_t)hoff, path, what, "a position before the header", &at_, err)) ||
        (rc = gt__ckpt_int(e, "stored", 0, (int64_t)hoff, path, what, "a length before the header", &stored_, err)) ||
        (rc = gt__ckpt_int(e, "begin", 0, GT__CKPT_INT_MAX, path, what, NULL, &b, err)) ||
        (rc = gt__ckpt_int(e, "count", 0, GT__CKPT_INT_MAX, path, what, NULL, &n, err)) ||
        (rc = gt__ckpt_int(e, "unit", 0, GT__CKPT_INT_MAX, path, what, NULL, &eu, err)) ||
        (rc = gt__ckpt_int(e, "crc32", 0, UINT32_MAX, path, what, NULL, &crc_, err)))
      goto out;
    const cJSON *shp = cJSON_GetObjectItemCaseSensitive(e, "shape"), *d0 = cJSON_GetArrayItem(shp, 0);
    if (!cJSON_IsArray(shp) || cJSON_GetArraySize(shp) != 1 || !cJSON_IsNumber(d0) || d0->valuedouble != (double)n) {
      char *t = shp ? cJSON_PrintUnformatted(shp) : NULL;
      rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' tensor '%s' has shape %s; expected [%lld] (its count)",
                      path, name, t ? t : "(absent)", (long long)n);
      free(t);
      goto out;
    }
    uint64_t at = (uint64_t)at_, stored = (uint64_t)stored_;
    uint32_t crc = (uint32_t)crc_;
    if (at != expect_at || stored > hoff - at) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "checkpoint: '%s' tensor '%s' lies at %llu (+%llu bytes); expected it at %llu, before the header "
                      "at %llu",
                      path, name, (unsigned long long)at, (unsigned long long)stored, (unsigned long long)expect_at,
                      (unsigned long long)hoff);
      goto out;
    }
    expect_at = at + stored;
    if (eu != u || b != gt_shard_begin(cnt, S, r) || n != gt_shard_len(cnt, S, r)) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "checkpoint: '%s' tensor '%s' covers unit %lld [%lld, +%lld); shard %d of %d of unit %lld is "
                      "[%lld, +%lld)",
                      path, name, (long long)eu, (long long)b, (long long)n, r, S, (long long)u,
                      (long long)gt_shard_begin(cnt, S, r), (long long)gt_shard_len(cnt, S, r));
      goto out;
    }
    if (!cls[k]) continue;
    if ((rc = gt__read_tensor(fd, path, name, at, stored, zipped, cls[k] + off + b, n, crc, err))) goto out;
  }
  if (expect_at != hoff) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "checkpoint: '%s' has %llu bytes between its tensors and its header", path,
                    (unsigned long long)(hoff - expect_at));
    goto out;
  }
  *header = h;
  h = NULL;
  if (S_out) *S_out = S;
out:
  cJSON_Delete(h);
  close(fd);
  return rc;
}
