/* safetensors reader, writer and sharded checkpoints; see
 * src/ckpt/safetensors.h and the Gemma spec (kept outside the repository),
 * section 8. */
#define _POSIX_C_SOURCE 200809L

#include "ckpt/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/team.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define GT__HOST_LE 1
#else
#define GT__HOST_LE 0
#endif

/* ---- dtypes ---- */

/* rank is the position in the Rust crate's `Dtype` enum. Its writer sorts by
 * that enum (descending), not by size alone, so F32 precedes I32 even though
 * both are 4 bytes; matching its bytes needs the same key. */
static const struct {
  const char *name;
  int size;
  int rank;
} gt__dt[] = {
    [GT_DT_F32] = {"F32", 4, 15},  [GT_DT_BF16] = {"BF16", 2, 12}, [GT_DT_F16] = {"F16", 2, 11},
    [GT_DT_F64] = {"F64", 8, 17},  [GT_DT_I32] = {"I32", 4, 13},   [GT_DT_I64] = {"I64", 8, 18},
    [GT_DT_U8] = {"U8", 1, 4},     [GT_DT_I8] = {"I8", 1, 5},      [GT_DT_U16] = {"U16", 2, 10},
    [GT_DT_I16] = {"I16", 2, 9},   [GT_DT_U32] = {"U32", 4, 14},   [GT_DT_U64] = {"U64", 8, 19},
    [GT_DT_BOOL] = {"BOOL", 1, 0},
};
#define GT__N_DT ((int)(sizeof gt__dt / sizeof gt__dt[0]))

/* Valid in the format but with no gt_dtype: refused with a message that does
 * not call them "unknown". */
static const char *const gt__dt_unsupported[] = {"F4",      "F6_E2M3", "F6_E3M2", "F8_E5M2",
                                                 "F8_E4M3", "F8_E8M0", "C64"};

int gt_dtype_size(gt_dtype dt) {
  if ((int)dt < 0 || (int)dt >= GT__N_DT) return 0;
  return gt__dt[dt].size;
}

const char *gt_dtype_name(gt_dtype dt) {
  if ((int)dt < 0 || (int)dt >= GT__N_DT) return "?";
  return gt__dt[dt].name;
}

static int gt__dtype_from_name(const char *s, gt_dtype *out) {
  for (int i = 0; i < GT__N_DT; i++) {
    if (strcmp(s, gt__dt[i].name) == 0) {
      *out = (gt_dtype)i;
      return 1;
    }
  }
  return 0;
}

/* ---- scalar conversions ---- */

static float gt__bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

float gt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    /* Subnormal man * 2^-24: normalise so the leading 1 becomes implicit. */
    uint32_t s = 0;
    while (!(man & 0x400u)) {
      man <<= 1;
      s++;
    }
    bits = sign | ((113u - s) << 23) | ((man & 0x3ffu) << 13);
  }
  return gt__bits_f32(bits);
}

static uint16_t gt__ld16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t gt__ld32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t gt__ld64(const unsigned char *p) {
  return (uint64_t)gt__ld32(p) | ((uint64_t)gt__ld32(p + 4) << 32);
}

static void gt__st16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static void gt__st32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void gt__st64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- small helpers ---- */

/* Offset of the first byte that breaks strict UTF-8 (no overlongs, no
 * surrogates, nothing above U+10FFFF), or n when the text is valid. */
static size_t gt__utf8_bad_at(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3fu);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return i;
    if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) return i;
    i += len;
  }
  return n;
}

static const char *gt__json_kind(const cJSON *v) {
  if (cJSON_IsObject(v)) return "object";
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsString(v)) return "string";
  if (cJSON_IsNumber(v)) return "number";
  if (cJSON_IsBool(v)) return "boolean";
  if (cJSON_IsNull(v)) return "null";
  return "value";
}

/* JSON numbers arrive as doubles; above 2^53 they are no longer exact, and no
 * real file has a dimension or offset that large. */
#define GT__JSON_INT_MAX 9007199254740992.0

/* 1: non-negative integer stored in *out; 0: not a number; -1: negative;
 * -2: not an integer; -3: too large to be exact. */
static int gt__json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (d != d) return -2;
  if (d < 0) return -1;
  if (d > GT__JSON_INT_MAX) return -3;
  uint64_t u = (uint64_t)d;
  if ((double)u != d) return -2;
  *out = u;
  return 1;
}

static void gt__fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int i = 0; i < ndim && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", shape[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static int gt__cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Growable byte string; a failed allocation sets oom and drops later writes,
 * so callers check once at the end. */
typedef struct gt__sb {
  char *p;
  size_t len, cap;
  int oom;
} gt__sb;

static void gt__sb_put(gt__sb *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void gt__sb_puts(gt__sb *b, const char *s) { gt__sb_put(b, s, strlen(s)); }

static void gt__sb_printf(gt__sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gt__sb_printf(gt__sb *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) {
    b->oom = 1;
    return;
  }
  gt__sb_put(b, tmp, (size_t)n);
}

/* Escapes exactly as serde_json does (short escapes for \b\f\n\r\t, \u00xx
 * lowercase for other control bytes, UTF-8 passed through), so headers match
 * the Rust writer byte for byte. */
static void gt__sb_json_str(gt__sb *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  gt__sb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char e[7];
    switch (*p) {
      case '"': gt__sb_put(b, "\\\"", 2); break;
      case '\\': gt__sb_put(b, "\\\\", 2); break;
      case '\b': gt__sb_put(b, "\\b", 2); break;
      case '\f': gt__sb_put(b, "\\f", 2); break;
      case '\n': gt__sb_put(b, "\\n", 2); break;
      case '\r': gt__sb_put(b, "\\r", 2); break;
      case '\t': gt__sb_put(b, "\\t", 2); break;
      default:
        if (*p < 0x20) {
          memcpy(e, "\\u00", 4);
          e[4] = hex[*p >> 4];
          e[5] = hex[*p & 15];
          gt__sb_put(b, e, 6);
        } else {
          gt__sb_put(b, (const char *)p, 1);
        }
    }
  }
  gt__sb_put(b, "\"", 1);
}

/* ---- reader ---- */

void gt_st_close(gt_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_size);
  free(f->tensors);
  if (f->metadata_json) cJSON_free(f->metadata_json);
  memset(f, 0, sizeof *f);
}

static int gt__cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const gt_st_tensor *)a)->name, ((const gt_st_tensor *)b)->name);
}

/* Sort key for the contiguity check; carrying the offsets avoids a
 * comparator that reaches into shared state (qsort has no context pointer). */
typedef struct gt__span {
  uint64_t begin, end;
  int idx;
} gt__span;

static int gt__cmp_span(const void *a, const void *b) {
  const gt__span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* One header entry (not __metadata__) into *t. */
static gt_rc gt__parse_entry(const char *path, const cJSON *e, gt_st_tensor *t, gt_err *err) {
  const char *nm = t->name;
  if (!cJSON_IsObject(e))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': entry is a JSON %s, expected an object with dtype, shape "
                      "and data_offsets",
                      path, nm, gt__json_kind(e));
  static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
  const cJSON *val[3] = {NULL, NULL, NULL};
  for (const cJSON *c = e->child; c; c = c->next) {
    for (int k = 0; k < 3; k++) {
      if (c->string && strcmp(c->string, keys[k]) == 0) {
        if (val[k])
          return gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s': \"%s\" appears twice", path, nm,
                            keys[k]);
        val[k] = c;
      }
    }
  }
  for (int k = 0; k < 3; k++)
    if (!val[k])
      return gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s': entry has no \"%s\"", path, nm,
                        keys[k]);

  /* dtype */
  if (!cJSON_IsString(val[0]))
    return gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s': dtype is a JSON %s, expected a string",
                      path, nm, gt__json_kind(val[0]));
  const char *ds = val[0]->valuestring;
  if (!gt__dtype_from_name(ds, &t->dtype)) {
    for (size_t i = 0; i < sizeof gt__dt_unsupported / sizeof *gt__dt_unsupported; i++)
      if (strcmp(ds, gt__dt_unsupported[i]) == 0)
        return gt_err_set(err, GT_ERR_FORMAT,
                          "%s: tensor '%s': dtype '%s' is valid safetensors but gemtrain does not "
                          "support it",
                          path, nm, ds);
    return gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.64s'", path, nm, ds);
  }

  /* shape */
  if (!cJSON_IsArray(val[1]))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': shape is a JSON %s, expected an array of integers", path,
                      nm, gt__json_kind(val[1]));
  int nd = cJSON_GetArraySize(val[1]);
  if (nd > GT_ST_MAX_NDIM)
    return gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s': shape has %d dims, at most %d supported",
                      path, nm, nd, GT_ST_MAX_NDIM);
  t->ndim = nd;
  int zero = 0;
  int i = 0;
  for (const cJSON *d = val[1]->child; d; d = d->next, i++) {
    uint64_t u = 0;
    int r = gt__json_uint(d, &u);
    if (r == 0)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "%s: tensor '%s': shape[%d] is a JSON %s, expected a non-negative integer",
                        path, nm, i, gt__json_kind(d));
    if (r == -1)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "%s: tensor '%s': shape[%d] is negative (%g), expected a non-negative "
                        "integer",
                        path, nm, i, d->valuedouble);
    if (r == -2)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "%s: tensor '%s': shape[%d] is %g, expected a non-negative integer", path,
                        nm, i, d->valuedouble);
    if (r == -3)
      return gt_err_set(err, GT_ERR_FORMAT,
                        "%s: tensor '%s': shape[%d] is %g, too large (overflow)", path, nm, i,
                        d->valuedouble);
    t->shape[i] = (int64_t)u;
    if (u == 0) zero = 1;
  }
  char shp[8 * 22 + 4];
  gt__fmt_shape(shp, sizeof shp, t->ndim, t->shape);
  int esz = gt_dtype_size(t->dtype);
  uint64_t numel = 1;
  if (zero) {
    numel = 0;
  } else {
    for (int k = 0; k < nd; k++) {
      uint64_t d = (uint64_t)t->shape[k];
      if (numel > (uint64_t)INT64_MAX / d)
        return gt_err_set(err, GT_ERR_FORMAT,
                          "%s: tensor '%s': shape %s has more than 2^63 elements (overflow)", path,
                          nm, shp);
      numel *= d;
    }
  }
  if (numel > (uint64_t)INT64_MAX / (uint64_t)esz)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': shape %s %s needs more than 2^63 bytes (overflow)", path,
                      nm, shp, ds);
  t->numel = (int64_t)numel;
  uint64_t need = numel * (uint64_t)esz;

  /* data_offsets */
  uint64_t off[2] = {0, 0};
  int ok = cJSON_IsArray(val[2]) && cJSON_GetArraySize(val[2]) == 2;
  if (ok) {
    int k = 0;
    for (const cJSON *d = val[2]->child; d; d = d->next, k++)
      if (gt__json_uint(d, &off[k]) != 1) ok = 0;
  }
  if (!ok)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets must be [begin, end], two non-negative "
                      "integers",
                      path, nm);
  if (off[0] > off[1])
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64 "] have begin > end",
                      path, nm, off[0], off[1]);
  if (off[1] - off[0] != need)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets give %" PRIu64 " bytes, shape %s %s needs %" PRIu64,
                      path, nm, off[1] - off[0], shp, ds, need);
  t->begin = off[0];
  t->end = off[1];
  return GT_OK;
}

static gt_rc gt__parse_header(gt_st_file *f, const unsigned char *hdr, size_t n,
                              const unsigned char *data, uint64_t data_len, gt_err *err) {
  const char *path = f->path;
  size_t bad = gt__utf8_bad_at(hdr, n);
  if (bad < n)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: header is not valid UTF-8 (byte 0x%02x at header offset %zu)", path,
                      hdr[bad], bad);
  /* JSON allows no raw control bytes anywhere except as whitespace; checking
   * here also keeps an embedded NUL from cutting the text short for cJSON. */
  for (size_t i = 0; i < n; i++)
    if (hdr[i] < 0x20 && hdr[i] != '\t' && hdr[i] != '\n' && hdr[i] != '\r')
      return gt_err_set(err, GT_ERR_FORMAT,
                        "%s: header is not valid JSON (control byte 0x%02x at header offset %zu)",
                        path, hdr[i], i);

  char *text = malloc(n + 1);
  if (!text) return gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for a %zu-byte header", path, n);
  memcpy(text, hdr, n);
  text[n] = '\0';
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
  gt_rc rc = GT_OK;
  cJSON *meta = NULL;
  const char **names = NULL;
  gt__span *order = NULL;
  if (!root) {
    size_t at = end ? (size_t)(end - text) : 0;
    rc = gt_err_set(err, GT_ERR_FORMAT, "%s: header is not valid JSON (error near header offset %zu)",
                    path, at);
    goto out;
  }
  for (const char *p = end; p < text + n; p++) {
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: header is not valid JSON (trailing data at header offset %zu)", path,
                      (size_t)(p - text));
      goto out;
    }
  }
  if (!cJSON_IsObject(root)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "%s: header is a JSON %s, expected an object", path,
                    gt__json_kind(root));
    goto out;
  }

  int total = cJSON_GetArraySize(root), nt = 0, n_meta = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (++n_meta > 1) {
        rc = gt_err_set(err, GT_ERR_FORMAT, "%s: \"__metadata__\" appears twice in the header",
                        path);
        goto out;
      }
      meta = (cJSON *)c;
    } else {
      size_t len = strlen(c->string);
      if (len > GT_ST_MAX_NAME) {
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "%s: tensor name '%.60s...' is %zu bytes, longer than the %d-byte limit",
                        path, c->string, len, GT_ST_MAX_NAME);
        goto out;
      }
    }
  }
  nt = total - n_meta;

  if (meta) {
    if (!cJSON_IsObject(meta)) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: __metadata__ is a JSON %s, expected an object of strings", path,
                      gt__json_kind(meta));
      goto out;
    }
    for (const cJSON *c = meta->child; c; c = c->next) {
      if (!cJSON_IsString(c)) {
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "%s: __metadata__ key '%s' is a JSON %s, expected a string", path,
                        c->string, gt__json_kind(c));
        goto out;
      }
    }
  }

  f->tensors = calloc(nt > 0 ? (size_t)nt : 1, sizeof *f->tensors);
  order = malloc((nt > 0 ? (size_t)nt : 1) * sizeof *order);
  if (!f->tensors || !order) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d tensor entries", path, nt);
    goto out;
  }

  /* Duplicate names are caught before the entries are judged, so a file with
   * a repeated key gets that message rather than one about the second copy. */
  names = malloc((nt > 0 ? (size_t)nt : 1) * sizeof *names);
  if (!names) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d tensor names", path, nt);
    goto out;
  }
  int k = 0;
  for (const cJSON *c = root->child; c; c = c->next)
    if (c != meta) names[k++] = c->string;
  qsort(names, (size_t)nt, sizeof *names, gt__cmp_str);
  for (int i = 1; i < nt; i++) {
    if (strcmp(names[i - 1], names[i]) == 0) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path,
                      names[i]);
      goto out;
    }
  }

  k = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (c == meta) continue;
    gt_st_tensor *t = &f->tensors[k++];
    memcpy(t->name, c->string, strlen(c->string) + 1);
    rc = gt__parse_entry(path, c, t, err);
    if (rc != GT_OK) goto out;
    if (t->end > data_len) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64
                      "] run past the end of the %" PRIu64 "-byte data buffer",
                      path, t->name, t->begin, t->end, data_len);
      goto out;
    }
    t->data = data + t->begin;
  }
  f->n_tensors = nt;
  qsort(f->tensors, (size_t)nt, sizeof *f->tensors, gt__cmp_tensor_name);

  for (int i = 0; i < nt; i++) order[i] = (gt__span){f->tensors[i].begin, f->tensors[i].end, i};
  qsort(order, (size_t)nt, sizeof *order, gt__cmp_span);
  uint64_t pos = 0;
  const gt_st_tensor *prev = NULL;
  for (int i = 0; i < nt; i++) {
    const gt_st_tensor *t = &f->tensors[order[i].idx];
    if (t->begin < pos) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: tensors '%s' [%" PRIu64 ",%" PRIu64 ") and '%s' [%" PRIu64 ",%" PRIu64
                      ") overlap",
                      path, prev->name, prev->begin, prev->end, t->name, t->begin, t->end);
      goto out;
    }
    if (t->begin > pos) {
      if (prev)
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "%s: gap of %" PRIu64 " bytes before tensor '%s' (it starts at %" PRIu64
                        ", tensor '%s' ends at %" PRIu64 ")",
                        path, t->begin - pos, t->name, t->begin, prev->name, pos);
      else
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "%s: gap of %" PRIu64 " bytes before tensor '%s' (it starts at %" PRIu64
                        ", the data buffer at 0)",
                        path, t->begin - pos, t->name, t->begin);
      goto out;
    }
    pos = t->end;
    prev = t;
  }
  if (pos != data_len) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "%s: data buffer is %" PRIu64 " bytes but the tensors end at %" PRIu64
                    " (%" PRIu64 " trailing bytes)",
                    path, data_len, pos, data_len - pos);
    goto out;
  }

  if (meta) {
    f->metadata_json = cJSON_PrintUnformatted(meta);
    if (!f->metadata_json) {
      rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory to print __metadata__", path);
      goto out;
    }
  }

out:
  free(names);
  free(order);
  cJSON_Delete(root);
  free(text);
  return rc;
}

gt_rc gt_st_open(gt_st_file *f, const char *path, gt_err *err) {
  if (!f || !path) return gt_err_set(err, GT_ERR_ARG, "gt_st_open: file and path must be non-NULL");
  memset(f, 0, sizeof *f);
  size_t plen = strlen(path);
  if (plen >= sizeof f->path)
    return gt_err_set(err, GT_ERR_ARG, "%.80s...: path is %zu bytes, longest supported is %zu",
                      path, plen, sizeof f->path - 1);
  memcpy(f->path, path, plen + 1);

  int fd = open(path, O_RDONLY);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return gt_err_set(err, GT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return gt_err_set(err, GT_ERR_IO, "%s: not a regular file", path);
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size < 8) {
    close(fd);
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: file is %" PRIu64 " bytes, shorter than the 8-byte header length", path,
                      size);
  }
  if (size > (uint64_t)SIZE_MAX) {
    close(fd);
    return gt_err_set(err, GT_ERR_IO, "%s: file of %" PRIu64 " bytes cannot be mapped", path, size);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  close(fd); /* the mapping keeps the file alive */
  if (map == MAP_FAILED)
    return gt_err_set(err, GT_ERR_IO, "%s: cannot mmap %" PRIu64 " bytes: %s", path, size,
                      strerror(map_errno));
  f->map = map;
  f->map_size = (size_t)size;

  const unsigned char *b = map;
  uint64_t n = gt__ld64(b);
  gt_rc rc;
  if (n > GT_ST_MAX_HEADER) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "%s: header length %" PRIu64 " exceeds the %llu-byte limit", path, n,
                    GT_ST_MAX_HEADER);
  } else if (8 + n > size) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "%s: header length %" PRIu64 " needs %" PRIu64 " bytes but the file has %" PRIu64,
                    path, n, 8 + n, size);
  } else {
    rc = gt__parse_header(f, b + 8, (size_t)n, b + 8 + n, size - 8 - n, err);
  }
  if (rc != GT_OK) gt_st_close(f);
  return rc;
}

const gt_st_tensor *gt_st_find(const gt_st_file *f, const char *name) {
  if (!f || !name || f->n_tensors <= 0) return NULL;
  int lo = 0, hi = f->n_tensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(f->tensors[mid].name, name);
    if (c == 0) return &f->tensors[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return NULL;
}

gt_rc gt_st_read_f32(const gt_st_tensor *t, float *out, int64_t n, gt_err *err) {
  if (!t) return gt_err_set(err, GT_ERR_ARG, "gt_st_read_f32: tensor is NULL");
  if (n != t->numel)
    return gt_err_set(err, GT_ERR_ARG,
                      "tensor '%s': asked for %" PRId64 " values but it holds %" PRId64, t->name, n,
                      t->numel);
  return gt_st_read_f32_range(t, 0, n, out, err);
}

/* Elements [i0, i1) of a 16-bit tensor at p converted to float32 (bf16 or
 * f16). */
typedef struct gt__cvt16 {
  float *out;
  const unsigned char *p;
  int bf16;
} gt__cvt16;

static void gt__cvt16_part(void *arg, int64_t i0, int64_t i1) {
  const gt__cvt16 *a = arg;
  float *out = a->out;
  const unsigned char *p = a->p;
  if (a->bf16)
    for (int64_t i = i0; i < i1; i++) out[i] = gt_bf16_to_f32(gt__ld16(p + 2 * i));
  else
    for (int64_t i = i0; i < i1; i++) out[i] = gt_f16_to_f32(gt__ld16(p + 2 * i));
}

gt_rc gt_st_read_f32_range(const gt_st_tensor *t, int64_t first, int64_t n, float *out, gt_err *err) {
  if (!t) return gt_err_set(err, GT_ERR_ARG, "gt_st_read_f32_range: tensor is NULL");
  if (first < 0 || n < 0 || first > t->numel || n > t->numel - first)
    return gt_err_set(err, GT_ERR_ARG,
                      "tensor '%s': asked for values [%" PRId64 ", %" PRId64 ") but it holds %" PRId64,
                      t->name, first, first + n, t->numel);
  if (n > 0 && !out)
    return gt_err_set(err, GT_ERR_ARG, "tensor '%s': output buffer is NULL", t->name);
  int es = gt_dtype_size(t->dtype);
  const unsigned char *p = (const unsigned char *)t->data + (es > 0 ? first * es : 0);
  switch (t->dtype) {
    case GT_DT_F32:
#if GT__HOST_LE
      if (n > 0) memcpy(out, p, (size_t)n * 4);
#else
      for (int64_t i = 0; i < n; i++) out[i] = gt__bits_f32(gt__ld32(p + 4 * i));
#endif
      return GT_OK;
    case GT_DT_BF16:
      /* Whole embedding tables go through here; threads also spread the page
       * faults of the first touch of the mapping. */
    {
      gt__cvt16 a = {out, p, 1};
      gt_team_for(n >= (1 << 20), n, gt__cvt16_part, &a);
      return GT_OK;
    }
    case GT_DT_F16:
    {
      gt__cvt16 a = {out, p, 0};
      gt_team_for(n >= (1 << 20), n, gt__cvt16_part, &a);
      return GT_OK;
    }
    default:
      return gt_err_set(err, GT_ERR_FORMAT,
                        "tensor '%s' is %s; only F32, BF16 and F16 convert to float32", t->name,
                        gt_dtype_name(t->dtype));
  }
}

/* ---- writer ---- */

/* Checks a tensor list before anything touches the disk; bytes[i] gets each
 * tensor's on-disk size. `where` names the destination in messages. */
static gt_rc gt__check_wtensors(const char *where, int n, const gt_st_wtensor *ts, uint64_t *bytes,
                                gt_err *err) {
  if (n < 0) return gt_err_set(err, GT_ERR_ARG, "%s: tensor count %d is negative", where, n);
  if (n > 0 && !ts) return gt_err_set(err, GT_ERR_ARG, "%s: %d tensors but the array is NULL", where, n);
  for (int i = 0; i < n; i++) {
    const gt_st_wtensor *t = &ts[i];
    if (!t->name)
      return gt_err_set(err, GT_ERR_ARG, "%s: tensor #%d has a NULL name", where, i);
    const char *nm = t->name;
    size_t len = strlen(nm);
    if (len > GT_ST_MAX_NAME)
      return gt_err_set(err, GT_ERR_ARG,
                        "%s: tensor name '%.60s...' is %zu bytes, longer than the %d-byte limit",
                        where, nm, len, GT_ST_MAX_NAME);
    if (gt__utf8_bad_at((const unsigned char *)nm, len) < len)
      return gt_err_set(err, GT_ERR_ARG, "%s: tensor name '%s' is not valid UTF-8", where, nm);
    if (strcmp(nm, "__metadata__") == 0)
      return gt_err_set(err, GT_ERR_ARG, "%s: \"__metadata__\" is reserved, not a tensor name",
                        where);
    if (t->dtype != GT_DT_F32 && t->dtype != GT_DT_BF16 && t->dtype != GT_DT_I32)
      return gt_err_set(err, GT_ERR_ARG,
                        "%s: tensor '%s': dtype %s cannot be written; expected F32, BF16 or I32",
                        where, nm, gt_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > GT_ST_MAX_NDIM)
      return gt_err_set(err, GT_ERR_ARG, "%s: tensor '%s': ndim %d, expected 0..%d", where, nm,
                        t->ndim, GT_ST_MAX_NDIM);
    uint64_t numel = 1;
    int zero = 0;
    for (int k = 0; k < t->ndim; k++) {
      if (t->shape[k] < 0)
        return gt_err_set(err, GT_ERR_ARG, "%s: tensor '%s': shape[%d] is %" PRId64 ", negative",
                          where, nm, k, t->shape[k]);
      if (t->shape[k] == 0) zero = 1;
    }
    if (zero) {
      numel = 0;
    } else {
      for (int k = 0; k < t->ndim; k++) {
        uint64_t d = (uint64_t)t->shape[k];
        if (numel > (uint64_t)INT64_MAX / 8 / d)
          return gt_err_set(err, GT_ERR_ARG, "%s: tensor '%s': element count overflows", where, nm);
        numel *= d;
      }
    }
    if (numel > 0 && !t->data)
      return gt_err_set(err, GT_ERR_ARG, "%s: tensor '%s': %" PRIu64 " elements but data is NULL",
                        where, nm, numel);
    bytes[i] = numel * (uint64_t)gt_dtype_size(t->dtype);
  }
  /* Names sorted once to find duplicates. */
  if (n > 1) {
    const char **nm = malloc((size_t)n * sizeof *nm);
    if (!nm) return gt_err_set(err, GT_ERR_NOMEM, "%s: no memory to check names", where);
    for (int i = 0; i < n; i++) nm[i] = ts[i].name;
    qsort(nm, (size_t)n, sizeof *nm, gt__cmp_str);
    for (int i = 1; i < n; i++) {
      if (strcmp(nm[i - 1], nm[i]) == 0) {
        gt_rc rc = gt_err_set(err, GT_ERR_ARG, "%s: tensor '%s' given twice", where, nm[i]);
        free(nm);
        return rc;
      }
    }
    free(nm);
  }
  return GT_OK;
}

/* Parses and re-validates metadata_json; emits "__metadata__":{...}, (with the
 * trailing comma only if more entries follow) into b. */
static gt_rc gt__emit_metadata(const char *where, const char *json, gt__sb *b, int more,
                               gt_err *err) {
  size_t len = strlen(json);
  if (gt__utf8_bad_at((const unsigned char *)json, len) < len)
    return gt_err_set(err, GT_ERR_ARG, "%s: metadata is not valid UTF-8", where);
  cJSON *m = cJSON_ParseWithLength(json, len);
  if (!m) return gt_err_set(err, GT_ERR_ARG, "%s: metadata is not valid JSON", where);
  gt_rc rc = GT_OK;
  if (!cJSON_IsObject(m)) {
    rc = gt_err_set(err, GT_ERR_ARG, "%s: metadata is a JSON %s, expected an object of strings",
                    where, gt__json_kind(m));
    goto out;
  }
  for (const cJSON *c = m->child; c; c = c->next) {
    if (!cJSON_IsString(c)) {
      rc = gt_err_set(err, GT_ERR_ARG, "%s: metadata key '%s' is a JSON %s, expected a string",
                      where, c->string, gt__json_kind(c));
      goto out;
    }
    for (const cJSON *d = m->child; d != c; d = d->next) {
      if (strcmp(d->string, c->string) == 0) {
        rc = gt_err_set(err, GT_ERR_ARG, "%s: metadata key '%s' given twice", where, c->string);
        goto out;
      }
    }
  }
  gt__sb_puts(b, "\"__metadata__\":{");
  for (const cJSON *c = m->child; c; c = c->next) {
    gt__sb_json_str(b, c->string);
    gt__sb_puts(b, ":");
    gt__sb_json_str(b, c->valuestring);
    if (c->next) gt__sb_puts(b, ",");
  }
  gt__sb_puts(b, more ? "}," : "}");
out:
  cJSON_Delete(m);
  return rc;
}

static gt_rc gt__write_all(int fd, const void *buf, size_t n, const char *tmp, gt_err *err) {
  const unsigned char *p = buf;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return gt_err_set(err, GT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    }
    p += w;
    n -= (size_t)w;
  }
  return GT_OK;
}

/* Atomic replace: the reader of `path` sees the old file or the complete new
 * one, never a torn write, even across a crash. */
typedef struct gt__atomic {
  char tmp[1100];
  const char *path;
  int fd;
} gt__atomic;

static gt_rc gt__atomic_begin(gt__atomic *a, const char *path, gt_err *err) {
  a->path = path;
  a->fd = -1;
  int k = snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
  if (k < 0 || (size_t)k >= sizeof a->tmp)
    return gt_err_set(err, GT_ERR_ARG, "%.80s...: path too long", path);
  a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (a->fd < 0)
    return gt_err_set(err, GT_ERR_IO, "%s: cannot create: %s", a->tmp, strerror(errno));
  return GT_OK;
}

static void gt__atomic_abort(gt__atomic *a) {
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
  unlink(a->tmp);
}

static gt_rc gt__atomic_commit(gt__atomic *a, gt_err *err) {
  if (fsync(a->fd) != 0) {
    gt_rc rc = gt_err_set(err, GT_ERR_IO, "%s: fsync failed: %s", a->tmp, strerror(errno));
    gt__atomic_abort(a);
    return rc;
  }
  int fd = a->fd;
  a->fd = -1;
  if (close(fd) != 0) {
    gt_rc rc = gt_err_set(err, GT_ERR_IO, "%s: close failed: %s", a->tmp, strerror(errno));
    unlink(a->tmp);
    return rc;
  }
  if (rename(a->tmp, a->path) != 0) {
    gt_rc rc = gt_err_set(err, GT_ERR_IO, "%s: cannot rename %s over it: %s", a->path, a->tmp,
                          strerror(errno));
    unlink(a->tmp);
    return rc;
  }
  /* Makes the rename itself durable. Failure is not reported: the new file is
   * already in place, and some file systems refuse fsync on directories. */
  char dir[1100];
  const char *slash = strrchr(a->path, '/');
  if (!slash) {
    strcpy(dir, ".");
  } else if (slash == a->path) {
    strcpy(dir, "/");
  } else {
    size_t dl = (size_t)(slash - a->path);
    if (dl >= sizeof dir) return GT_OK;
    memcpy(dir, a->path, dl);
    dir[dl] = '\0';
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return GT_OK;
}

static int gt__cmp_wtensor(const void *a, const void *b) {
  const gt_st_wtensor *x = *(const gt_st_wtensor *const *)a;
  const gt_st_wtensor *y = *(const gt_st_wtensor *const *)b;
  int rx = gt__dt[x->dtype].rank, ry = gt__dt[y->dtype].rank;
  if (rx != ry) return ry - rx;
  return strcmp(x->name, y->name);
}

#define GT__CHUNK_ELEMS 65536

static gt_rc gt__write_tensor_data(int fd, const gt_st_wtensor *t, uint64_t bytes,
                                   unsigned char *chunk, const char *tmp, gt_err *err) {
  int esz = gt_dtype_size(t->dtype);
  uint64_t numel = bytes / (uint64_t)esz;
#if GT__HOST_LE
  if (t->dtype != GT_DT_BF16) return gt__write_all(fd, t->data, (size_t)bytes, tmp, err);
#endif
  for (uint64_t i0 = 0; i0 < numel; i0 += GT__CHUNK_ELEMS) {
    uint64_t m = numel - i0 < GT__CHUNK_ELEMS ? numel - i0 : GT__CHUNK_ELEMS;
    if (t->dtype == GT_DT_BF16) {
      const float *src = (const float *)t->data + i0;
      for (uint64_t i = 0; i < m; i++) gt__st16(chunk + 2 * i, gt_f32_to_bf16(src[i]));
    } else {
      const unsigned char *src = (const unsigned char *)t->data + 4 * i0;
      for (uint64_t i = 0; i < m; i++) {
        uint32_t u;
        memcpy(&u, src + 4 * i, 4);
        gt__st32(chunk + 4 * i, u);
      }
    }
    gt_rc rc = gt__write_all(fd, chunk, (size_t)(m * (uint64_t)esz), tmp, err);
    if (rc != GT_OK) return rc;
  }
  return GT_OK;
}

gt_rc gt_st_write(const char *path, int n, const gt_st_wtensor *tensors, const char *metadata_json,
                  gt_err *err) {
  if (!path) return gt_err_set(err, GT_ERR_ARG, "gt_st_write: path is NULL");
  uint64_t *bytes = calloc(n > 0 ? (size_t)n : 1, sizeof *bytes);
  const gt_st_wtensor **ord = calloc(n > 0 ? (size_t)n : 1, sizeof *ord);
  unsigned char *chunk = NULL;
  gt__sb h = {0};
  gt__atomic a = {.fd = -1};
  gt_rc rc = GT_OK;
  if (!bytes || !ord) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d tensor entries", path, n);
    goto out;
  }
  rc = gt__check_wtensors(path, n, tensors, bytes, err);
  if (rc != GT_OK) goto out;

  for (int i = 0; i < n; i++) ord[i] = &tensors[i];
  qsort(ord, (size_t)n, sizeof *ord, gt__cmp_wtensor);

  gt__sb_puts(&h, "{");
  if (metadata_json) {
    rc = gt__emit_metadata(path, metadata_json, &h, n > 0, err);
    if (rc != GT_OK) goto out;
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const gt_st_wtensor *t = ord[i];
    uint64_t nb = bytes[t - tensors];
    gt__sb_json_str(&h, t->name);
    gt__sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", gt_dtype_name(t->dtype));
    for (int k = 0; k < t->ndim; k++) gt__sb_printf(&h, "%s%" PRId64, k ? "," : "", t->shape[k]);
    gt__sb_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}%s", off, off + nb,
                  i + 1 < n ? "," : "");
    off += nb;
  }
  gt__sb_puts(&h, "}");
  while (!h.oom && h.len % 8 != 0) gt__sb_puts(&h, " ");
  if (h.oom) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory to build the header", path);
    goto out;
  }

  chunk = malloc((size_t)GT__CHUNK_ELEMS * 4);
  if (!chunk) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for the write buffer", path);
    goto out;
  }
  rc = gt__atomic_begin(&a, path, err);
  if (rc != GT_OK) goto out;
  unsigned char len8[8];
  gt__st64(len8, (uint64_t)h.len);
  rc = gt__write_all(a.fd, len8, 8, a.tmp, err);
  if (rc == GT_OK) rc = gt__write_all(a.fd, h.p, h.len, a.tmp, err);
  for (int i = 0; i < n && rc == GT_OK; i++)
    rc = gt__write_tensor_data(a.fd, ord[i], bytes[ord[i] - tensors], chunk, a.tmp, err);
  if (rc != GT_OK) {
    gt__atomic_abort(&a);
    goto out;
  }
  rc = gt__atomic_commit(&a, err);

out:
  free(chunk);
  free(h.p);
  free(ord);
  free(bytes);
  return rc;
}

/* ---- sharded checkpoints ---- */

#define GT__INDEX_NAME "model.safetensors.index.json"
#define GT__SINGLE_NAME "model.safetensors"

static gt_rc gt__join(char *out, size_t cap, const char *dir, const char *name, gt_err *err) {
  int k = snprintf(out, cap, "%s/%s", dir, name);
  if (k < 0 || (size_t)k >= cap)
    return gt_err_set(err, GT_ERR_ARG, "%.80s...: path to %s is too long", dir, name);
  return GT_OK;
}

void gt_st_set_close(gt_st_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n_files; i++) gt_st_close(&s->files[i]);
  free(s->files);
  s->files = NULL;
  s->n_files = 0;
}

const gt_st_tensor *gt_st_set_find(const gt_st_set *s, const char *name) {
  if (!s) return NULL;
  for (int i = 0; i < s->n_files; i++) {
    const gt_st_tensor *t = gt_st_find(&s->files[i], name);
    if (t) return t;
  }
  return NULL;
}

typedef struct gt__named {
  const char *name;
  int file;
} gt__named;

static int gt__cmp_named(const void *a, const void *b) {
  return strcmp(((const gt__named *)a)->name, ((const gt__named *)b)->name);
}

/* A shard in more than one file would make gt_st_set_find depend on order. */
static gt_rc gt__check_cross_dups(const gt_st_set *s, gt_err *err) {
  size_t total = 0;
  for (int i = 0; i < s->n_files; i++) total += (size_t)s->files[i].n_tensors;
  if (total < 2) return GT_OK;
  gt__named *all = malloc(total * sizeof *all);
  if (!all) return gt_err_set(err, GT_ERR_NOMEM, "no memory to index %zu tensors", total);
  size_t k = 0;
  for (int i = 0; i < s->n_files; i++)
    for (int j = 0; j < s->files[i].n_tensors; j++) all[k++] = (gt__named){s->files[i].tensors[j].name, i};
  qsort(all, total, sizeof *all, gt__cmp_named);
  gt_rc rc = GT_OK;
  for (size_t i = 1; i < total; i++) {
    if (strcmp(all[i - 1].name, all[i].name) == 0) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "tensor '%s' is in both %s and %s", all[i].name,
                      s->files[all[i - 1].file].path, s->files[all[i].file].path);
      break;
    }
  }
  free(all);
  return rc;
}

static gt_rc gt__set_open_index(gt_st_set *s, const char *dir, const char *ipath, gt_err *err) {
  char *text = NULL;
  cJSON *root = NULL;
  int *file_of = NULL;
  const char **fname = NULL;
  size_t len = 0;
  /* the one whole-file reader: refuses a directory, reads a pipe */
  gt_rc rc = gt_read_file(ipath, "safetensors index", &text, &len, err);
  if (rc) goto out;
  if (len > GT_ST_MAX_HEADER) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "%s: %zu bytes, larger than the %llu-byte limit", ipath, len,
                    GT_ST_MAX_HEADER);
    goto out;
  }
  root = cJSON_ParseWithLength(text, len);
  if (!root || !cJSON_IsObject(root)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "%s: not a JSON object", ipath);
    goto out;
  }
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(wm)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "%s: \"weight_map\" is %s, expected an object of strings",
                    ipath, wm ? gt__json_kind(wm) : "missing");
    goto out;
  }
  int nw = cJSON_GetArraySize(wm);
  file_of = malloc((nw > 0 ? (size_t)nw : 1) * sizeof *file_of);
  fname = malloc((nw > 0 ? (size_t)nw : 1) * sizeof *fname);
  if (!file_of || !fname) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d entries", ipath, nw);
    goto out;
  }
  int nf = 0, i = 0;
  for (const cJSON *c = wm->child; c; c = c->next, i++) {
    if (!cJSON_IsString(c)) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "%s: weight_map['%s'] is a JSON %s, expected a file name",
                      ipath, c->string, gt__json_kind(c));
      goto out;
    }
    const char *v = c->valuestring;
    /* The index may come from anywhere; shard names must stay inside dir. */
    if (!v[0] || strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: weight_map['%s'] is '%s', expected a plain file name in the same "
                      "directory",
                      ipath, c->string, v);
      goto out;
    }
    int j = 0;
    while (j < nf && strcmp(fname[j], v) != 0) j++;
    if (j == nf) fname[nf++] = v;
  }
  /* Shards in file-name order, so files[k] is model-0000(k+1)-of-... */
  qsort(fname, (size_t)nf, sizeof *fname, gt__cmp_str);
  i = 0;
  for (const cJSON *c = wm->child; c; c = c->next, i++) {
    int j = 0;
    while (strcmp(fname[j], c->valuestring) != 0) j++;
    file_of[i] = j;
  }
  s->files = calloc(nf > 0 ? (size_t)nf : 1, sizeof *s->files);
  if (!s->files) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d shards", ipath, nf);
    goto out;
  }
  for (int j = 0; j < nf; j++) {
    char p[1024];
    rc = gt__join(p, sizeof p, dir, fname[j], err);
    if (rc == GT_OK) rc = gt_st_open(&s->files[j], p, err);
    if (rc != GT_OK) goto out;
    s->n_files = j + 1;
  }
  i = 0;
  for (const cJSON *c = wm->child; c; c = c->next, i++) {
    const gt_st_file *f = &s->files[file_of[i]];
    if (!gt_st_find(f, c->string)) {
      rc = gt_err_set(err, GT_ERR_FORMAT,
                      "%s: weight_map puts tensor '%s' in %s, but that shard has no such tensor",
                      ipath, c->string, fname[file_of[i]]);
      goto out;
    }
  }
  rc = gt__check_cross_dups(s, err);

out:
  if (rc != GT_OK) gt_st_set_close(s);
  free(fname);
  free(file_of);
  cJSON_Delete(root);
  free(text);
  return rc;
}

gt_rc gt_st_set_open(gt_st_set *s, const char *dir, gt_err *err) {
  if (!s || !dir) return gt_err_set(err, GT_ERR_ARG, "gt_st_set_open: set and dir must be non-NULL");
  memset(s, 0, sizeof *s);
  char ipath[1024], spath[1024];
  gt_rc rc = gt__join(ipath, sizeof ipath, dir, GT__INDEX_NAME, err);
  if (rc == GT_OK) rc = gt__join(spath, sizeof spath, dir, GT__SINGLE_NAME, err);
  if (rc != GT_OK) return rc;
  struct stat st, st1;
  int has_index = stat(ipath, &st) == 0;
  /* transformers loads model.safetensors and gemtrain the index: the two
   * would run different weights */
  if (has_index && stat(spath, &st1) == 0)
    return gt_err_set(err, GT_ERR_FORMAT,
                      "%s: holds both %s and %s (one of them from an earlier export); expected one, as "
                      "transformers would load the first and gemtrain the second: remove the stale one",
                      dir, spath, ipath);
  if (has_index) return gt__set_open_index(s, dir, ipath, err);
  if (stat(spath, &st) != 0)
    return gt_err_set(err, GT_ERR_IO, "%s: found neither %s nor %s", dir, GT__INDEX_NAME,
                      GT__SINGLE_NAME);
  s->files = calloc(1, sizeof *s->files);
  if (!s->files) return gt_err_set(err, GT_ERR_NOMEM, "%s: no memory", dir);
  rc = gt_st_open(&s->files[0], spath, err);
  if (rc != GT_OK) {
    free(s->files);
    s->files = NULL;
    return rc;
  }
  s->n_files = 1;
  return GT_OK;
}

static const char gt__shard_meta[] = "{\"format\":\"pt\"}";

/* "model-<digits>-of-<digits>.safetensors", the shard names transformers
 * and gt_st_write_sharded give */
static int gt__is_shard_name(const char *n) {
  const char *p = n;
  if (strncmp(p, "model-", 6)) return 0;
  p += 6;
  if (*p < '0' || *p > '9') return 0;
  while (*p >= '0' && *p <= '9') p++;
  if (strncmp(p, "-of-", 4)) return 0;
  p += 4;
  if (*p < '0' || *p > '9') return 0;
  while (*p >= '0' && *p <= '9') p++;
  return !strcmp(p, ".safetensors");
}

/* Removes from dir what an earlier write left that a reader could take for
 * this one: model.safetensors, model-*-of-*.safetensors shards and the
 * index (regular files of those names only). */
static gt_rc gt__remove_stale(const char *dir, gt_err *err) {
  DIR *d = opendir(dir);
  if (!d) return gt_err_set(err, GT_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
  gt_rc rc = GT_OK;
  struct dirent *e;
  char p[1024];
  while (rc == GT_OK && (e = readdir(d))) {
    const char *n = e->d_name;
    if (strcmp(n, GT__SINGLE_NAME) && strcmp(n, GT__INDEX_NAME) && !gt__is_shard_name(n)) continue;
    if ((rc = gt__join(p, sizeof p, dir, n, err))) break;
    struct stat st;
    if (lstat(p, &st) || !S_ISREG(st.st_mode)) continue;
    if (unlink(p) != 0 && errno != ENOENT)
      rc = gt_err_set(err, GT_ERR_IO, "%s: cannot remove the earlier export's file: %s", p, strerror(errno));
  }
  closedir(d);
  return rc;
}

static gt_rc gt__write_index(const char *dir, int n, const gt_st_wtensor *ts, const int *shard_of,
                             int n_shards, uint64_t total, gt_err *err) {
  char ipath[1024];
  gt_rc rc = gt__join(ipath, sizeof ipath, dir, GT__INDEX_NAME, err);
  if (rc != GT_OK) return rc;
  gt__named *ord = malloc((n > 0 ? (size_t)n : 1) * sizeof *ord);
  if (!ord) return gt_err_set(err, GT_ERR_NOMEM, "%s: no memory", ipath);
  for (int i = 0; i < n; i++) ord[i] = (gt__named){ts[i].name, shard_of[i]};
  /* Sorted keys and 2-space indent: the shape transformers writes. */
  qsort(ord, (size_t)n, sizeof *ord, gt__cmp_named);
  gt__sb b = {0};
  gt__sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": ",
                total);
  if (n == 0) gt__sb_puts(&b, "{}");
  for (int i = 0; i < n; i++) {
    gt__sb_puts(&b, i ? ",\n    " : "{\n    ");
    gt__sb_json_str(&b, ord[i].name);
    gt__sb_printf(&b, ": \"model-%05d-of-%05d.safetensors\"", ord[i].file + 1, n_shards);
  }
  if (n > 0) gt__sb_puts(&b, "\n  }");
  gt__sb_puts(&b, "\n}\n");
  free(ord);
  if (b.oom) {
    free(b.p);
    return gt_err_set(err, GT_ERR_NOMEM, "%s: no memory to build the index", ipath);
  }
  gt__atomic a = {.fd = -1};
  rc = gt__atomic_begin(&a, ipath, err);
  if (rc == GT_OK) {
    rc = gt__write_all(a.fd, b.p, b.len, a.tmp, err);
    if (rc == GT_OK)
      rc = gt__atomic_commit(&a, err);
    else
      gt__atomic_abort(&a);
  }
  free(b.p);
  return rc;
}

gt_rc gt_st_write_sharded(const char *dir, int n, const gt_st_wtensor *tensors,
                          uint64_t max_shard_bytes, gt_err *err) {
  if (!dir) return gt_err_set(err, GT_ERR_ARG, "gt_st_write_sharded: dir is NULL");
  uint64_t *bytes = calloc(n > 0 ? (size_t)n : 1, sizeof *bytes);
  int *shard_of = calloc(n > 0 ? (size_t)n : 1, sizeof *shard_of);
  gt_st_wtensor *part = calloc(n > 0 ? (size_t)n : 1, sizeof *part);
  gt_rc rc = GT_OK;
  if (!bytes || !shard_of || !part) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "%s: no memory for %d tensor entries", dir, n);
    goto out;
  }
  rc = gt__check_wtensors(dir, n, tensors, bytes, err);
  if (rc != GT_OK) goto out;
  char p[1024];

  if (max_shard_bytes == 0) {
    rc = gt__remove_stale(dir, err);
    if (rc == GT_OK) rc = gt__join(p, sizeof p, dir, GT__SINGLE_NAME, err);
    if (rc == GT_OK) rc = gt_st_write(p, n, tensors, gt__shard_meta, err);
    goto out;
  }

  /* Greedy in the given order, like transformers' shard splitter. */
  int n_shards = 1;
  uint64_t cur = 0, total = 0;
  for (int i = 0; i < n; i++) {
    if (cur > 0 && cur + bytes[i] > max_shard_bytes) {
      n_shards++;
      cur = 0;
    }
    cur += bytes[i];
    total += bytes[i];
    shard_of[i] = n_shards - 1;
  }
  if (n_shards > 99999) {
    rc = gt_err_set(err, GT_ERR_ARG, "%s: %d shards, more than the 5-digit names allow", dir,
                    n_shards);
    goto out;
  }
  if ((rc = gt__remove_stale(dir, err))) goto out;
  for (int s = 0; s < n_shards && rc == GT_OK; s++) {
    int m = 0;
    for (int i = 0; i < n; i++)
      if (shard_of[i] == s) part[m++] = tensors[i];
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    rc = gt__join(p, sizeof p, dir, name, err);
    if (rc == GT_OK) rc = gt_st_write(p, m, part, gt__shard_meta, err);
  }
  /* The index goes last so it never names a shard that is not complete. */
  if (rc == GT_OK) rc = gt__write_index(dir, n, tensors, shard_of, n_shards, total, err);

out:
  free(part);
  free(shard_of);
  free(bytes);
  return rc;
}
