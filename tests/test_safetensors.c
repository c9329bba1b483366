/* safetensors: bit-exact round trips, dtype conversions against known bit
 * patterns, byte-for-byte agreement with the Rust writer, every class of
 * malformed file (each with its message), sharded checkpoints and the atomic
 * write. Malformed and reference files are built here byte by byte. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "gt_testutil.h"

/* ---- helpers ---- */

/* 8-byte little-endian N, the header text (N = header_len), then data. */
static void write_st(const char *path, const char *hdr, size_t hdr_len, const void *data,
                     size_t data_len) {
  size_t n = 8 + hdr_len + data_len;
  unsigned char *b = calloc(n ? n : 1, 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
  memcpy(b + 8, hdr, hdr_len);
  if (data_len && data) memcpy(b + 8 + hdr_len, data, data_len);
  gt_test_write_file(path, b, n);
  free(b);
}

static uint32_t fbits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float bitsf(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int dir_has_tmp(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l >= 4 && strcmp(e->d_name + l - 4, ".tmp") == 0) found = 1;
  }
  closedir(d);
  return found;
}

/* Opening must fail with a format error whose message contains want, and
 * leave the struct zeroed. */
static void expect_bad_file(const char *path, const char *want) {
  gt_st_file f;
  gt_err e;
  gt_err_clear(&e);
  gt_rc rc = gt_st_open(&f, path, &e);
  ck_assert_msg(rc == GT_ERR_FORMAT, "expected a format error for '%s', got %s (%s)", want,
                gt_rc_name(rc), e.msg);
  ck_assert_msg(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
  ck_assert_msg(strchr(e.msg, '\n') == NULL, "message is not one line: %s", e.msg);
  ck_assert_ptr_null(f.map);
  ck_assert_ptr_null(f.tensors);
  ck_assert_int_eq(f.n_tensors, 0);
  gt_st_close(&f);
}

static void expect_bad_header(const char *hdr, size_t data_len, const char *want) {
  char *p = gt_test_dir_path("bad.safetensors");
  unsigned char *data = calloc(data_len ? data_len : 1, 1);
  write_st(p, hdr, strlen(hdr), data, data_len);
  expect_bad_file(p, want);
  free(data);
  free(p);
}

/* ---- dtype table ---- */

START_TEST(test_dtype_table) {
  ck_assert_int_eq(gt_dtype_size(GT_DT_F32), 4);
  ck_assert_int_eq(gt_dtype_size(GT_DT_BF16), 2);
  ck_assert_int_eq(gt_dtype_size(GT_DT_F16), 2);
  ck_assert_int_eq(gt_dtype_size(GT_DT_F64), 8);
  ck_assert_int_eq(gt_dtype_size(GT_DT_I64), 8);
  ck_assert_int_eq(gt_dtype_size(GT_DT_U64), 8);
  ck_assert_int_eq(gt_dtype_size(GT_DT_U8), 1);
  ck_assert_int_eq(gt_dtype_size(GT_DT_BOOL), 1);
  ck_assert_int_eq(gt_dtype_size(GT_DT_I16), 2);
  ck_assert_int_eq(gt_dtype_size(GT_DT_U32), 4);
  ck_assert_str_eq(gt_dtype_name(GT_DT_F32), "F32");
  ck_assert_str_eq(gt_dtype_name(GT_DT_BF16), "BF16");
  ck_assert_str_eq(gt_dtype_name(GT_DT_BOOL), "BOOL");
  ck_assert_str_eq(gt_dtype_name(GT_DT_I32), "I32");
}
END_TEST

/* ---- round trips ---- */

START_TEST(test_f32_roundtrip_bit_exact) {
  uint64_t rs = 7;
  enum { R = 3, C = 5, N = R * C };
  float x[N];
  gt_test_fill(x, N, &rs, -100.f, 100.f);
  /* values a lossy path would alter */
  x[0] = bitsf(0x7fc00001u); /* NaN with payload */
  x[1] = INFINITY;
  x[2] = -0.0f;
  x[3] = bitsf(0x00000001u); /* smallest subnormal */
  x[4] = bitsf(0xff800000u);
  char *p = gt_test_dir_path("f32.safetensors");
  gt_st_wtensor w = {.name = "layer.0.w", .dtype = GT_DT_F32, .ndim = 2, .shape = {R, C}, .data = x};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);

  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.n_tensors, 1);
  ck_assert_ptr_null(f.metadata_json);
  const gt_st_tensor *t = gt_st_find(&f, "layer.0.w");
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_null(gt_st_find(&f, "layer.0"));
  ck_assert_int_eq(t->dtype, GT_DT_F32);
  ck_assert_int_eq(t->ndim, 2);
  ck_assert_int_eq(t->shape[0], R);
  ck_assert_int_eq(t->shape[1], C);
  ck_assert_int_eq(t->numel, N);
  ck_assert_uint_eq(t->end - t->begin, N * 4);
  ck_assert_int_eq(memcmp(t->data, x, sizeof x), 0);
  float y[N];
  ck_assert_int_eq(gt_st_read_f32(t, y, N, &e), GT_OK);
  for (int i = 0; i < N; i++) ck_assert_uint_eq(fbits(y[i]), fbits(x[i]));
  gt_st_close(&f);
  gt_st_close(&f); /* idempotent */
  free(p);
}
END_TEST

START_TEST(test_bf16_conversion_known_values) {
  ck_assert_uint_eq(gt_f32_to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(gt_f32_to_bf16(3.14159f), 0x4049);
  ck_assert_uint_eq(gt_f32_to_bf16(-2.0f), 0xc000);
  ck_assert_uint_eq(gt_f32_to_bf16(0.0f), 0x0000);
  ck_assert_uint_eq(gt_f32_to_bf16(-0.0f), 0x8000);
  ck_assert_uint_eq(gt_f32_to_bf16(INFINITY), 0x7f80);
  ck_assert_uint_eq(gt_f32_to_bf16(-INFINITY), 0xff80);
  /* round to nearest, ties to even */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* tie, 0x3f80 even: down */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x3f818000u)), 0x3f82); /* tie, 0x3f81 odd: up */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x3f808001u)), 0x3f81); /* above half: up */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x3f807fffu)), 0x3f80); /* below half: down */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0xbf818000u)), 0xbf82); /* negative tie */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x3f7fffffu)), 0x3f80); /* carry into exponent */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x00008000u)), 0x0000); /* subnormal tie to even */
  ck_assert_uint_eq(gt_f32_to_bf16(bitsf(0x00018000u)), 0x0002);
  /* NaN stays NaN, even when its payload sits only in the low 16 bits */
  uint16_t qn = gt_f32_to_bf16(NAN);
  ck_assert_uint_eq(qn & 0x7f80, 0x7f80);
  ck_assert_uint_ne(qn & 0x007f, 0);
  uint16_t lo = gt_f32_to_bf16(bitsf(0x7f800001u));
  ck_assert_uint_eq(lo & 0x7f80, 0x7f80);
  ck_assert_uint_ne(lo & 0x007f, 0);
  uint16_t neg = gt_f32_to_bf16(bitsf(0xff800001u));
  ck_assert_uint_eq(neg & 0x8000, 0x8000);
  ck_assert(isnan(gt_bf16_to_f32(neg)));
  /* and back */
  ck_assert_uint_eq(fbits(gt_bf16_to_f32(0x3f80)), fbits(1.0f));
  ck_assert_uint_eq(fbits(gt_bf16_to_f32(0x4049)), 0x40490000u);
  ck_assert_uint_eq(fbits(gt_bf16_to_f32(0x8000)), 0x80000000u);
  ck_assert(isinf(gt_bf16_to_f32(0xff80)) && gt_bf16_to_f32(0xff80) < 0);
  ck_assert(isnan(gt_bf16_to_f32(0x7fc0)));
}
END_TEST

START_TEST(test_bf16_file_roundtrip) {
  const float x[] = {1.0f, 3.14159f, -0.0f, INFINITY, NAN, bitsf(0x3f818000u), -65504.f, 1e-40f};
  enum { N = sizeof x / sizeof x[0] };
  char *p = gt_test_dir_path("bf16.safetensors");
  gt_st_wtensor w = {.name = "emb", .dtype = GT_DT_BF16, .ndim = 2, .shape = {2, 4}, .data = x};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  const gt_st_tensor *t = gt_st_find(&f, "emb");
  ck_assert_int_eq(t->dtype, GT_DT_BF16);
  ck_assert_uint_eq(t->end - t->begin, N * 2);
  const unsigned char *raw = t->data;
  float y[N];
  ck_assert_int_eq(gt_st_read_f32(t, y, N, &e), GT_OK);
  for (int i = 0; i < N; i++) {
    uint16_t h = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8)); /* little-endian on disk */
    ck_assert_uint_eq(h, gt_f32_to_bf16(x[i]));
    ck_assert_uint_eq(fbits(y[i]), (uint32_t)h << 16);
  }
  ck_assert_uint_eq(raw[0], 0x80); /* 1.0 = 0x3f80 */
  ck_assert_uint_eq(raw[1], 0x3f);
  ck_assert_uint_eq(raw[2], 0x49); /* 3.14159 = 0x4049 */
  ck_assert_uint_eq(raw[3], 0x40);
  ck_assert(isnan(y[4]));
  ck_assert_uint_eq(fbits(y[2]), 0x80000000u);
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_f16_read_known_bits) {
  static const struct {
    uint16_t h;
    double v; /* NAN for NaN */
  } cases[] = {
      {0x3c00, 1.0},
      {0xc000, -2.0},
      {0x3555, 0.333251953125},
      {0x7bff, 65504.0},
      {0x0400, 6.103515625e-05},             /* smallest normal, 2^-14 */
      {0x0001, 5.9604644775390625e-08},      /* smallest subnormal, 2^-24 */
      {0x03ff, 6.0975551605224609375e-05},   /* largest subnormal, 1023 * 2^-24 */
      {0x0200, 3.0517578125e-05},            /* 2^-15 */
      {0x8001, -5.9604644775390625e-08},
      {0x0000, 0.0},
      {0x8000, -0.0},
      {0x7c00, INFINITY},
      {0xfc00, -INFINITY},
      {0x7e00, NAN},
      {0x7c01, NAN}, /* signalling NaN pattern must not turn into inf */
  };
  enum { N = sizeof cases / sizeof cases[0] };
  unsigned char data[2 * N];
  for (int i = 0; i < N; i++) {
    data[2 * i] = (unsigned char)(cases[i].h & 0xff);
    data[2 * i + 1] = (unsigned char)(cases[i].h >> 8);
  }
  char hdr[128];
  snprintf(hdr, sizeof hdr, "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", N,
           2 * N);
  char *p = gt_test_dir_path("f16.safetensors");
  write_st(p, hdr, strlen(hdr), data, sizeof data);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  const gt_st_tensor *t = gt_st_find(&f, "h");
  ck_assert_int_eq(t->dtype, GT_DT_F16);
  float y[N];
  ck_assert_int_eq(gt_st_read_f32(t, y, N, &e), GT_OK);
  for (int i = 0; i < N; i++) {
    if (isnan(cases[i].v)) {
      ck_assert_msg(isnan(y[i]), "0x%04x gave %g", cases[i].h, (double)y[i]);
    } else {
      ck_assert_msg(fbits(y[i]) == fbits((float)cases[i].v), "0x%04x gave %a, want %a", cases[i].h,
                    (double)y[i], cases[i].v);
    }
  }
  /* every finite F16 value against ldexp, both signs */
  for (uint32_t h = 0; h < 0x10000u; h++) {
    uint32_t ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (ex == 0x1f) continue;
    double v = ex ? ldexp(1024.0 + man, (int)ex - 25) : ldexp((double)man, -24);
    if (h & 0x8000) v = -v;
    ck_assert_uint_eq(fbits(gt_f16_to_f32((uint16_t)h)), fbits((float)v));
  }
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_i32_and_read_refusals) {
  const int32_t v[] = {-1, 0, 7, 2147483647, -2147483647 - 1, 42};
  char *p = gt_test_dir_path("i32.safetensors");
  gt_st_wtensor w = {.name = "ids", .dtype = GT_DT_I32, .ndim = 2, .shape = {3, 2}, .data = v};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  const gt_st_tensor *t = gt_st_find(&f, "ids");
  ck_assert_int_eq(t->dtype, GT_DT_I32);
  ck_assert_int_eq(t->numel, 6);
  int32_t back[6];
  memcpy(back, t->data, sizeof back);
  ck_assert_int_eq(memcmp(back, v, sizeof v), 0);
  float out[6];
  ck_assert_int_eq(gt_st_read_f32(t, out, 6, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "'ids' is I32") != NULL, "%s", e.msg);
  gt_st_close(&f);

  /* element count mismatch names the tensor and both counts */
  float x[4] = {1, 2, 3, 4};
  gt_st_wtensor wf = {.name = "w", .dtype = GT_DT_F32, .ndim = 1, .shape = {4}, .data = x};
  ck_assert_int_eq(gt_st_write(p, 1, &wf, NULL, &e), GT_OK);
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "w"), out, 5, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "'w'") && strstr(e.msg, "5") && strstr(e.msg, "4"), "%s", e.msg);
  gt_st_close(&f);
  free(p);
}
END_TEST

/* ---- layout ---- */

START_TEST(test_header_padding_and_order) {
  float a[3] = {1, 2, 3}, b[1] = {4}, c[2] = {5, 6};
  int32_t ids[2] = {1, 2};
  /* given out of order on purpose */
  gt_st_wtensor w[] = {
      {.name = "z_bf16", .dtype = GT_DT_BF16, .ndim = 1, .shape = {3}, .data = a},
      {.name = "b_f32", .dtype = GT_DT_F32, .ndim = 1, .shape = {1}, .data = b},
      {.name = "a_i32", .dtype = GT_DT_I32, .ndim = 1, .shape = {2}, .data = ids},
      {.name = "a_bf16", .dtype = GT_DT_BF16, .ndim = 1, .shape = {2}, .data = c},
      {.name = "a_f32", .dtype = GT_DT_F32, .ndim = 1, .shape = {3}, .data = a},
  };
  char *p = gt_test_dir_path("order.safetensors");
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 5, w, NULL, &e), GT_OK);
  long len = 0;
  char *buf = gt_test_read_file(p, &len);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)(unsigned char)buf[i] << (8 * i);
  ck_assert_uint_eq((8 + n) % 8, 0);
  /* JSON ends with '}' then only spaces */
  uint64_t last = n;
  while (last > 0 && buf[8 + last - 1] == ' ') last--;
  ck_assert_int_eq(buf[8 + last - 1], '}');
  ck_assert_uint_lt(n - last, 8);
  /* F32 by name, then I32, then BF16 by name: the Rust crate's order */
  const char *want[] = {"a_f32", "b_f32", "a_i32", "a_bf16", "z_bf16"};
  const uint64_t begin[] = {0, 12, 16, 24, 28};
  char *hdr = strndup(buf + 8, n);
  const char *prev = hdr;
  gt_st_file f;
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  for (int i = 0; i < 5; i++) {
    char key[32];
    snprintf(key, sizeof key, "\"%s\":", want[i]);
    const char *at = strstr(hdr, key);
    ck_assert_ptr_nonnull(at);
    ck_assert_msg(at >= prev, "%s out of order in %s", want[i], hdr);
    prev = at;
    const gt_st_tensor *t = gt_st_find(&f, want[i]);
    ck_assert_uint_eq(t->begin, begin[i]);
    /* data pointers stay inside the mapping, offset from the 8+N start */
    ck_assert_ptr_eq(t->data, (const char *)f.map + 8 + n + begin[i]);
  }
  ck_assert_int_eq(len, (long)(8 + n + 34));
  /* tensors come back sorted by name */
  for (int i = 1; i < f.n_tensors; i++)
    ck_assert_int_lt(strcmp(f.tensors[i - 1].name, f.tensors[i].name), 0);
  gt_st_close(&f);
  free(hdr);
  free(buf);
  free(p);
}
END_TEST

START_TEST(test_metadata_roundtrip) {
  float x[2] = {1, 2};
  gt_st_wtensor w = {.name = "w", .dtype = GT_DT_F32, .ndim = 1, .shape = {2}, .data = x};
  const char *meta = "{\"format\":\"pt\",\"note\":\"quote \\\" slash \\\\ nl \\n tab \\t \\u00e9\","
                     "\"step\":\"12\"}";
  char *p = gt_test_dir_path("meta.safetensors");
  gt_err e;
  ck_assert_msg(gt_st_write(p, 1, &w, meta, &e) == GT_OK, "%s", e.msg);
  /* __metadata__ is first, as in the Rust writer */
  long len;
  char *buf = gt_test_read_file(p, &len);
  ck_assert_int_eq(strncmp(buf + 8, "{\"__metadata__\":{\"format\":\"pt\",", 31), 0);
  free(buf);
  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_ptr_nonnull(f.metadata_json);
  cJSON *m = cJSON_Parse(f.metadata_json);
  ck_assert_ptr_nonnull(m);
  ck_assert_int_eq(cJSON_GetArraySize(m), 3);
  ck_assert_str_eq(cJSON_GetObjectItem(m, "format")->valuestring, "pt");
  ck_assert_str_eq(cJSON_GetObjectItem(m, "note")->valuestring,
                   "quote \" slash \\ nl \n tab \t \xc3\xa9");
  ck_assert_str_eq(cJSON_GetObjectItem(m, "step")->valuestring, "12");
  cJSON_Delete(m);
  gt_st_close(&f);

  /* metadata with no tensors */
  ck_assert_int_eq(gt_st_write(p, 0, NULL, "{\"k\":\"v\"}", &e), GT_OK);
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(f.n_tensors, 0);
  ck_assert_str_eq(f.metadata_json, "{\"k\":\"v\"}");
  gt_st_close(&f);

  /* refused metadata leaves the file as it was */
  const char *bad[] = {"{\"k\":1}", "[\"k\"]", "{\"k\":", "{\"k\":\"a\",\"k\":\"b\"}",
                       "{\"k\":\"\xff\"}"};
  const char *why[] = {"is a JSON number", "is a JSON array", "not valid JSON", "given twice",
                       "not valid UTF-8"};
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(gt_st_write(p, 1, &w, bad[i], &e), GT_ERR_ARG);
    ck_assert_msg(strstr(e.msg, why[i]) != NULL, "%s", e.msg);
  }
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(f.n_tensors, 0);
  gt_st_close(&f);
  ck_assert(!dir_has_tmp(gt_test_dir));
  free(p);
}
END_TEST

/* The Rust crate's own serialization tests (safetensors/src/tensor.rs:
 * test_serialization, test_serialization_forced_alignement, test_empty) plus a
 * mixed-dtype case laid out by hand from the spec. */
START_TEST(test_rust_writer_bytes) {
  gt_err e;
  char *p = gt_test_dir_path("rust.safetensors");
  const float v6[6] = {0, 1, 2, 3, 4, 5};
  const unsigned char v6_le[24] = {0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64,
                                   0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};
  long len;
  char *got;

  /* 1: N = 64, already a multiple of 8: no padding */
  {
    const char *h = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    unsigned char want[8 + 64 + 24] = {64, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(strlen(h), 64);
    memcpy(want + 8, h, 64);
    memcpy(want + 72, v6_le, 24);
    gt_st_wtensor w = {.name = "attn.0", .dtype = GT_DT_F32, .ndim = 3, .shape = {1, 2, 3}, .data = v6};
    ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
    got = gt_test_read_file(p, &len);
    ck_assert_int_eq(len, (long)sizeof want);
    ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
    free(got);
  }
  /* 2: 65-byte JSON padded with 7 spaces to N = 72 */
  {
    const char *h = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}"
                    "       ";
    unsigned char want[8 + 72 + 24] = {72, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(strlen(h), 72);
    memcpy(want + 8, h, 72);
    memcpy(want + 80, v6_le, 24);
    gt_st_wtensor w = {.name = "attn0", .dtype = GT_DT_F32, .ndim = 4, .shape = {1, 1, 2, 3}, .data = v6};
    ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
    got = gt_test_read_file(p, &len);
    ck_assert_int_eq(len, (long)sizeof want);
    ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
    free(got);
  }
  /* 3: empty, and empty with metadata */
  {
    const unsigned char want[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    ck_assert_int_eq(gt_st_write(p, 0, NULL, NULL, &e), GT_OK);
    got = gt_test_read_file(p, &len);
    ck_assert_int_eq(len, (long)sizeof want);
    ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
    free(got);
    const char *h = "{\"__metadata__\":{\"framework\":\"pt\"}}     ";
    unsigned char want2[8 + 40] = {40, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(strlen(h), 40);
    memcpy(want2 + 8, h, 40);
    ck_assert_int_eq(gt_st_write(p, 0, NULL, "{\"framework\":\"pt\"}", &e), GT_OK);
    got = gt_test_read_file(p, &len);
    ck_assert_int_eq(len, (long)sizeof want2);
    ck_assert_int_eq(memcmp(got, want2, sizeof want2), 0);
    free(got);
  }
  /* 4: by hand. Order: F32 "w", I32 "ids", then BF16 "b" (scalar) and "e"
   * (empty) by name. JSON is 252 bytes, 4 spaces make N = 256 = 0x100. */
  {
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[16,18]},"
                    "\"e\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[18,18]}}"
                    "    ";
    const unsigned char data[18] = {
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, /* w = 1.0, -2.0 */
        0xff, 0xff, 0xff, 0xff, 0x07, 0x00, 0x00, 0x00, /* ids = -1, 7 */
        0xc0, 0x3f,                                     /* b = bf16(1.5) = 0x3fc0 */
    };
    unsigned char want[8 + 256 + 18] = {0x00, 0x01, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(strlen(h), 256);
    memcpy(want + 8, h, 256);
    memcpy(want + 264, data, 18);
    char *hand = gt_test_dir_path("hand.safetensors");
    gt_test_write_file(hand, want, sizeof want);

    /* our reader takes the hand-made file */
    gt_st_file f;
    ck_assert_msg(gt_st_open(&f, hand, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(f.n_tensors, 4);
    ck_assert_str_eq(f.metadata_json, "{\"format\":\"pt\"}");
    const gt_st_tensor *tb = gt_st_find(&f, "b"), *te = gt_st_find(&f, "e");
    ck_assert_int_eq(tb->ndim, 0);
    ck_assert_int_eq(tb->numel, 1);
    ck_assert_int_eq(te->ndim, 1);
    ck_assert_int_eq(te->numel, 0);
    float one;
    ck_assert_int_eq(gt_st_read_f32(tb, &one, 1, &e), GT_OK);
    ck_assert(one == 1.5f);
    ck_assert_int_eq(gt_st_read_f32(te, NULL, 0, &e), GT_OK);
    float wv[2];
    ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "w"), wv, 2, &e), GT_OK);
    ck_assert(wv[0] == 1.0f && wv[1] == -2.0f);
    gt_st_close(&f);

    /* and our writer produces the same bytes from tensors given in another order */
    const float wd[2] = {1.0f, -2.0f}, bd[1] = {1.5f};
    const int32_t idd[2] = {-1, 7};
    gt_st_wtensor w[] = {
        {.name = "e", .dtype = GT_DT_BF16, .ndim = 1, .shape = {0}, .data = NULL},
        {.name = "ids", .dtype = GT_DT_I32, .ndim = 1, .shape = {2}, .data = idd},
        {.name = "b", .dtype = GT_DT_BF16, .ndim = 0, .data = bd},
        {.name = "w", .dtype = GT_DT_F32, .ndim = 1, .shape = {2}, .data = wd},
    };
    ck_assert_int_eq(gt_st_write(p, 4, w, "{\"format\":\"pt\"}", &e), GT_OK);
    got = gt_test_read_file(p, &len);
    ck_assert_int_eq(len, (long)sizeof want);
    ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
    free(got);
    free(hand);
  }
  free(p);
}
END_TEST

START_TEST(test_empty_and_scalar_tensors) {
  /* unpadded header (any N is legal), zero-size tensors at the start, the
   * middle and the end, several at one offset */
  const char *h = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                  "\"e0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                  "\"e1\":{\"dtype\":\"BF16\",\"shape\":[3,0,2],\"data_offsets\":[4,4]},"
                  "\"e2\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[4,4]},"
                  "\"v\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                  "\"e3\":{\"dtype\":\"U8\",\"shape\":[0,0],\"data_offsets\":[8,8]}}";
  const unsigned char data[8] = {0, 0, 0x40, 0x40, 0x80, 0x3f, 0x00, 0xc0};
  char *p = gt_test_dir_path("empty.safetensors");
  write_st(p, h, strlen(h), data, 8);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.n_tensors, 6);
  const gt_st_tensor *s = gt_st_find(&f, "s");
  ck_assert_int_eq(s->ndim, 0);
  ck_assert_int_eq(s->numel, 1);
  float x;
  ck_assert_int_eq(gt_st_read_f32(s, &x, 1, &e), GT_OK);
  ck_assert(x == 3.0f);
  ck_assert_int_eq(gt_st_find(&f, "e1")->numel, 0);
  ck_assert_int_eq(gt_st_find(&f, "e1")->ndim, 3);
  ck_assert_int_eq(gt_st_find(&f, "e2")->dtype, GT_DT_I64);
  ck_assert_int_eq(gt_st_find(&f, "e3")->dtype, GT_DT_U8);
  float v[2];
  ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "v"), v, 2, &e), GT_OK);
  ck_assert(v[0] == 1.0f && v[1] == -2.0f);
  gt_st_close(&f);

  /* empty file of tensors: "{}" with an empty buffer */
  write_st(p, "{}", 2, NULL, 0);
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(f.n_tensors, 0);
  ck_assert_ptr_null(gt_st_find(&f, "x"));
  gt_st_close(&f);

  /* the writer's side of the same */
  float one = 2.5f;
  gt_st_wtensor w[] = {{.name = "scalar", .dtype = GT_DT_F32, .ndim = 0, .data = &one},
                       {.name = "none", .dtype = GT_DT_F32, .ndim = 2, .shape = {4, 0}}};
  ck_assert_int_eq(gt_st_write(p, 2, w, NULL, &e), GT_OK);
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(gt_st_find(&f, "scalar")->numel, 1);
  ck_assert_int_eq(gt_st_find(&f, "none")->numel, 0);
  ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "scalar"), &x, 1, &e), GT_OK);
  ck_assert(x == 2.5f);
  gt_st_close(&f);
  free(p);
}
END_TEST

/* ---- malformed files ---- */

#define ENT(name, dt, shape, off) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}"

START_TEST(test_bad_sizes) {
  char *p = gt_test_dir_path("short.safetensors");
  gt_test_write_file(p, "\x02\0\0\0\0", 5);
  expect_bad_file(p, "shorter than the 8-byte");
  gt_test_write_file(p, "", 0);
  expect_bad_file(p, "is 0 bytes, shorter than the 8-byte");

  /* a missing file is an I/O error, not a format error */
  gt_st_file f;
  gt_err e;
  ck_assert_int_eq(gt_st_open(&f, "/nonexistent/x.safetensors", &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "/nonexistent/x.safetensors") != NULL, "%s", e.msg);
  ck_assert_int_eq(gt_st_open(&f, gt_test_dir, &e), GT_ERR_IO);
  free(p);
}
END_TEST

/* One test per malformed case: each is refused with a
 * format error whose one-line message names what is wrong. */

START_TEST(test_malformed_huge_header) {
  char *p = gt_test_dir_path("huge.safetensors");
  /* N = 100000001 */
  unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};
  gt_test_write_file(p, big, sizeof big);
  expect_bad_file(p, "header length 100000001 exceeds the 100000000-byte limit");
  /* N = 2^64-1 must not wrap 8+N around */
  memset(big, 0xff, 8);
  gt_test_write_file(p, big, sizeof big);
  expect_bad_file(p, "exceeds the 100000000-byte limit");
  /* N = 50, file has 8 + 8 */
  unsigned char small[16] = {50, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
  gt_test_write_file(p, small, sizeof small);
  expect_bad_file(p, "header length 50 needs 58 bytes but the file has 16");
  free(p);
}
END_TEST

START_TEST(test_malformed_offsets_past_end) {
  expect_bad_header("{" ENT("a", "F32", "[6]", "[0,24]") "}", 16,
                    "tensor 'a': data_offsets [0,24] run past the end of the 16-byte data buffer");
}
END_TEST

START_TEST(test_malformed_overlap) {
  expect_bad_header("{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("b", "F32", "[2]", "[4,12]") "}", 12,
                    "tensors 'a' [0,8) and 'b' [4,12) overlap");
  /* same range twice */
  expect_bad_header("{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("b", "F32", "[2]", "[0,8]") "}", 8,
                    "overlap");
  /* a zero-size tensor inside another */
  expect_bad_header("{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("b", "F32", "[0]", "[4,4]") "}", 8,
                    "overlap");
}
END_TEST

START_TEST(test_malformed_dtype_size) {
  expect_bad_header("{" ENT("x", "F32", "[2,3]", "[0,10]") "}", 10,
                    "tensor 'x': data_offsets give 10 bytes, shape [2,3] F32 needs 24");
  expect_bad_header("{" ENT("x", "BF16", "[]", "[0,4]") "}", 4,
                    "tensor 'x': data_offsets give 4 bytes, shape [] BF16 needs 2");
}
END_TEST

START_TEST(test_malformed_unknown_dtype) {
  expect_bad_header("{" ENT("a", "F33", "[1]", "[0,4]") "}", 4, "tensor 'a': unknown dtype 'F33'");
  expect_bad_header("{" ENT("a", "f32", "[1]", "[0,4]") "}", 4, "unknown dtype 'f32'");
  expect_bad_header("{" ENT("a", "F8_E4M3", "[1]", "[0,1]") "}", 1,
                    "dtype 'F8_E4M3' is valid safetensors but gemtrain does not support it");
}
END_TEST

START_TEST(test_malformed_duplicate) {
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0,4]") "," ENT("a", "F32", "[1]", "[4,8]") "}", 8,
                    "tensor 'a' appears twice in the header");
  /* duplicate listed apart, and with an invalid first copy: the duplicate is named */
  expect_bad_header("{" ENT("z", "F32", "[1]", "[0,4]") "," ENT("b", "F32", "[1]", "[4,8]") ","
                    "\"z\":7}",
                    8, "tensor 'z' appears twice");
}
END_TEST

START_TEST(test_malformed_non_contiguous) {
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0,4]") "," ENT("b", "F32", "[1]", "[8,12]") "}", 12,
                    "gap of 4 bytes before tensor 'b' (it starts at 8, tensor 'a' ends at 4)");
  expect_bad_header("{" ENT("a", "F32", "[1]", "[4,8]") "}", 8,
                    "gap of 4 bytes before tensor 'a' (it starts at 4, the data buffer at 0)");
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0,4]") "}", 8,
                    "data buffer is 8 bytes but the tensors end at 4 (4 trailing bytes)");
  expect_bad_header("{}", 3, "data buffer is 3 bytes but the tensors end at 0");
}
END_TEST

START_TEST(test_bad_json) {
  expect_bad_header("{\"a\xff\":{}}", 0, "not valid UTF-8 (byte 0xff at header offset 3)");
  expect_bad_header("{\"\xc0\xaf\":{}}", 0, "not valid UTF-8"); /* overlong '/' */
  expect_bad_header("{\"\xed\xa0\x80\":{}}", 0, "not valid UTF-8"); /* surrogate */
  expect_bad_header("{\"a\":", 0, "not valid JSON");
  expect_bad_header("", 0, "not valid JSON");
  expect_bad_header("{} x", 0, "trailing data");
  expect_bad_header("{}{}", 0, "trailing data");
  expect_bad_header("[1,2]", 0, "header is a JSON array, expected an object");
  expect_bad_header("\"x\"", 0, "header is a JSON string, expected an object");
  /* embedded NUL (strlen would stop early, so write it by length) */
  char *p = gt_test_dir_path("nul.safetensors");
  write_st(p, "{}\0  ", 5, NULL, 0);
  expect_bad_file(p, "control byte 0x00 at header offset 2");
  free(p);
  /* header padded with spaces (and other JSON whitespace) is fine */
  p = gt_test_dir_path("ws.safetensors");
  write_st(p, " {}\n\t\r  ", 8, NULL, 0);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  gt_st_close(&f);
  /* UTF-8 names are fine */
  const char *h = "{" ENT("caf\xc3\xa9.\xf0\x9f\x98\x80", "U8", "[1]", "[0,1]") "}";
  write_st(p, h, strlen(h), "x", 1);
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_ptr_nonnull(gt_st_find(&f, "caf\xc3\xa9.\xf0\x9f\x98\x80"));
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_bad_entries) {
  expect_bad_header("{\"a\":5}", 0, "tensor 'a': entry is a JSON number, expected an object");
  expect_bad_header("{\"a\":[]}", 0, "tensor 'a': entry is a JSON array");
  expect_bad_header("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                    "tensor 'a': entry has no \"dtype\"");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                    "tensor 'a': entry has no \"shape\"");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                    "tensor 'a': entry has no \"data_offsets\"");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                    4, "tensor 'a': \"dtype\" appears twice");
  expect_bad_header("{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                    "tensor 'a': dtype is a JSON number, expected a string");
  /* extra keys are tolerated, as serde does */
  char *p = gt_test_dir_path("extra.safetensors");
  const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":null}}";
  write_st(p, h, strlen(h), "z", 1);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_bad_shapes) {
  expect_bad_header("{" ENT("a", "F32", "[2,-3]", "[0,4]") "}", 4,
                    "tensor 'a': shape[1] is negative (-3)");
  expect_bad_header("{" ENT("a", "F32", "[2,2.5]", "[0,20]") "}", 20,
                    "tensor 'a': shape[1] is 2.5, expected a non-negative integer");
  expect_bad_header("{" ENT("a", "F32", "[\"2\"]", "[0,8]") "}", 8,
                    "tensor 'a': shape[0] is a JSON string");
  expect_bad_header("{" ENT("a", "F32", "[null]", "[0,8]") "}", 8, "shape[0] is a JSON null");
  expect_bad_header("{" ENT("a", "F32", "{}", "[0,8]") "}", 8,
                    "tensor 'a': shape is a JSON object, expected an array");
  expect_bad_header("{" ENT("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
                    "tensor 'a': shape has 9 dims, at most 8");
  /* element count over 2^63 */
  expect_bad_header("{" ENT("a", "F32", "[4294967296,4294967296]", "[0,4]") "}", 4,
                    "tensor 'a': shape [4294967296,4294967296] has more than 2^63 elements "
                    "(overflow)");
  /* element count fits, bytes do not (2^62 * 4) */
  expect_bad_header("{" ENT("a", "F32", "[2147483648,2147483648]", "[0,4]") "}", 4,
                    "needs more than 2^63 bytes (overflow)");
  /* beyond exact doubles */
  expect_bad_header("{" ENT("a", "U8", "[1e300]", "[0,4]") "}", 4, "too large");
  /* eight dims is the limit and fine */
  char *p = gt_test_dir_path("eight.safetensors");
  const char *h = "{" ENT("a", "U8", "[1,2,1,1,1,1,1,2]", "[0,4]") "}";
  write_st(p, h, strlen(h), "abcd", 4);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.tensors[0].ndim, 8);
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_bad_offsets) {
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0]") "}", 4,
                    "tensor 'a': data_offsets must be [begin, end]");
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0,4,8]") "}", 8, "data_offsets must be [begin, end]");
  expect_bad_header("{" ENT("a", "F32", "[1]", "{}") "}", 4, "data_offsets must be [begin, end]");
  expect_bad_header("{" ENT("a", "F32", "[1]", "[-4,0]") "}", 4, "data_offsets must be [begin, end]");
  expect_bad_header("{" ENT("a", "F32", "[1]", "[0.5,4]") "}", 4, "data_offsets must be [begin, end]");
  expect_bad_header("{" ENT("a", "F32", "[0]", "[8,4]") "}", 8,
                    "tensor 'a': data_offsets [8,4] have begin > end");
}
END_TEST

START_TEST(test_bad_names_and_metadata) {
  expect_bad_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                    "\"__metadata__\" appears twice");
  expect_bad_header("{\"__metadata__\":\"pt\"}", 0,
                    "__metadata__ is a JSON string, expected an object of strings");
  expect_bad_header("{\"__metadata__\":{\"format\":\"pt\",\"step\":12}}", 0,
                    "__metadata__ key 'step' is a JSON number, expected a string");
  expect_bad_header("{\"__metadata__\":{\"nested\":{}}}", 0, "__metadata__ key 'nested' is a JSON object");
  char name[300], hdr[600];
  memset(name, 'n', 256);
  name[256] = '\0';
  snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
  expect_bad_header(hdr, 1, "is 256 bytes, longer than the 255-byte limit");
  /* 255 is fine */
  name[255] = '\0';
  snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
  char *p = gt_test_dir_path("long.safetensors");
  write_st(p, hdr, strlen(hdr), "q", 1);
  gt_st_file f;
  gt_err e;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_ptr_nonnull(gt_st_find(&f, name));
  gt_st_close(&f);
  /* an empty __metadata__ object is kept */
  const char *h = "{\"__metadata__\":{}}";
  write_st(p, h, strlen(h), NULL, 0);
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(f.metadata_json, "{}");
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_writer_refusals) {
  char *p = gt_test_dir_path("w.safetensors");
  float x[4] = {1, 2, 3, 4};
  gt_err e;
  /* a good file first: refusals must leave it alone */
  gt_st_wtensor good = {.name = "keep", .dtype = GT_DT_F32, .ndim = 1, .shape = {4}, .data = x};
  ck_assert_int_eq(gt_st_write(p, 1, &good, NULL, &e), GT_OK);
  struct {
    gt_st_wtensor t[2];
    int n;
    const char *want;
  } cases[] = {
      {{{.name = "a", .dtype = GT_DT_F16, .ndim = 1, .shape = {4}, .data = x}}, 1,
       "tensor 'a': dtype F16 cannot be written"},
      {{{.name = "a", .dtype = GT_DT_F32, .ndim = 1, .shape = {-1}, .data = x}}, 1,
       "tensor 'a': shape[0] is -1"},
      {{{.name = "a", .dtype = GT_DT_F32, .ndim = 9, .data = x}}, 1, "tensor 'a': ndim 9"},
      {{{.name = "a", .dtype = GT_DT_F32, .ndim = 1, .shape = {4}, .data = NULL}}, 1,
       "tensor 'a': 4 elements but data is NULL"},
      {{{.name = NULL, .dtype = GT_DT_F32, .ndim = 0, .data = x}}, 1, "tensor #0 has a NULL name"},
      {{{.name = "__metadata__", .dtype = GT_DT_F32, .ndim = 0, .data = x}}, 1, "reserved"},
      {{{.name = "bad\xff", .dtype = GT_DT_F32, .ndim = 0, .data = x}}, 1, "not valid UTF-8"},
      {{{.name = "a", .dtype = GT_DT_F32, .ndim = 0, .data = x},
        {.name = "a", .dtype = GT_DT_I32, .ndim = 0, .data = x}},
       2, "tensor 'a' given twice"},
      {{{.name = "a", .dtype = GT_DT_F32, .ndim = 2, .shape = {INT64_MAX, 4}, .data = x}}, 1,
       "overflows"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_err_clear(&e);
    ck_assert_int_eq(gt_st_write(p, cases[i].n, cases[i].t, NULL, &e), GT_ERR_ARG);
    ck_assert_msg(strstr(e.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, e.msg,
                  cases[i].want);
    ck_assert_msg(strstr(e.msg, p) != NULL, "message does not name the file: %s", e.msg);
  }
  ck_assert_int_eq(gt_st_write(p, -1, NULL, NULL, &e), GT_ERR_ARG);
  ck_assert_int_eq(gt_st_write(p, 2, NULL, NULL, &e), GT_ERR_ARG);
  gt_st_file f;
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_ptr_nonnull(gt_st_find(&f, "keep"));
  gt_st_close(&f);
  ck_assert(!dir_has_tmp(gt_test_dir));
  free(p);
}
END_TEST

/* ---- atomic write ---- */

START_TEST(test_atomic_write) {
  char *p = gt_test_dir_path("a.safetensors");
  char *tmp = gt_test_dir_path("a.safetensors.tmp");
  float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
  gt_st_wtensor w = {.name = "t", .dtype = GT_DT_F32, .ndim = 1, .shape = {3}, .data = x};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  ck_assert(file_exists(p));
  ck_assert(!file_exists(tmp));
  /* a stale .tmp from a crash is overwritten and consumed */
  gt_test_write_file(tmp, "junk", 4);
  w.data = y;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  ck_assert(!file_exists(tmp));
  gt_st_file f;
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  float r[3];
  ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "t"), r, 3, &e), GT_OK);
  ck_assert(r[0] == 4 && r[2] == 6);
  /* replacing a file that is open and mapped is safe: the old mapping stays */
  w.data = x;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  ck_assert(((const float *)gt_st_find(&f, "t")->data)[0] == 4);
  gt_st_close(&f);

  /* the rename fails (target is a non-empty directory): no .tmp is left */
  char *d = gt_test_dir_path("isdir");
  ck_assert_int_eq(mkdir(d, 0755), 0);
  char *inner = gt_test_dir_path("isdir/x");
  gt_test_write_file(inner, "x", 1);
  ck_assert_int_eq(gt_st_write(d, 1, &w, NULL, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "isdir") != NULL, "%s", e.msg);
  ck_assert(!dir_has_tmp(gt_test_dir));
  /* the directory does not exist */
  char *missing = gt_test_dir_path("nope/a.safetensors");
  ck_assert_int_eq(gt_st_write(missing, 1, &w, NULL, &e), GT_ERR_IO);
  ck_assert_msg(strstr(e.msg, "nope/a.safetensors.tmp") != NULL, "%s", e.msg);
  ck_assert(!dir_has_tmp(gt_test_dir));
  free(missing);
  free(inner);
  free(d);
  free(tmp);
  free(p);
}
END_TEST

/* ---- sharded checkpoints ---- */

START_TEST(test_sharded_roundtrip) {
  uint64_t rs = 11;
  /* bytes on disk: 40, 40, 100 (alone: over the limit), 8, 30, 8 */
  float *a = gt_test_alloc_fill(10, &rs, -1, 1), *b = gt_test_alloc_fill(20, &rs, -1, 1);
  float *c = gt_test_alloc_fill(25, &rs, -1, 1), *d = gt_test_alloc_fill(2, &rs, -1, 1);
  float *g = gt_test_alloc_fill(15, &rs, -1, 1);
  int32_t ids[2] = {3, -4};
  gt_st_wtensor w[] = {
      {.name = "model.embed", .dtype = GT_DT_F32, .ndim = 2, .shape = {2, 5}, .data = a},
      {.name = "model.layers.0.q", .dtype = GT_DT_BF16, .ndim = 2, .shape = {4, 5}, .data = b},
      {.name = "model.layers.0.big", .dtype = GT_DT_F32, .ndim = 1, .shape = {25}, .data = c},
      {.name = "model.layers.1.n", .dtype = GT_DT_F32, .ndim = 1, .shape = {2}, .data = d},
      {.name = "model.layers.1.k", .dtype = GT_DT_BF16, .ndim = 1, .shape = {15}, .data = g},
      {.name = "model.ids", .dtype = GT_DT_I32, .ndim = 1, .shape = {2}, .data = ids},
  };
  const int n = 6;
  const uint64_t total = 40 + 40 + 100 + 8 + 30 + 8;
  gt_err e;
  ck_assert_msg(gt_st_write_sharded(gt_test_dir, n, w, 80, &e) == GT_OK, "%s", e.msg);
  /* greedy: {embed, q} = 80, {big} = 100, {n, k, ids} = 46 */
  const char *shard[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                         "model-00003-of-00003.safetensors"};
  const int want_shard[] = {0, 0, 1, 2, 2, 2};
  for (int s = 0; s < 3; s++) {
    char *sp = gt_test_dir_path(shard[s]);
    ck_assert_msg(file_exists(sp), "%s missing", sp);
    free(sp);
  }
  char *none = gt_test_dir_path("model-00004-of-00003.safetensors");
  ck_assert(!file_exists(none));
  free(none);
  char *single = gt_test_dir_path("model.safetensors");
  ck_assert(!file_exists(single));
  ck_assert(!dir_has_tmp(gt_test_dir));

  /* the index */
  char *ip = gt_test_dir_path("model.safetensors.index.json");
  char *itext = gt_test_read_file(ip, NULL);
  ck_assert_ptr_nonnull(itext);
  cJSON *idx = cJSON_Parse(itext);
  ck_assert_ptr_nonnull(idx);
  const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(idx, "metadata"), "total_size");
  ck_assert(cJSON_IsNumber(ts));
  ck_assert_uint_eq((uint64_t)ts->valuedouble, total);
  const cJSON *wm = cJSON_GetObjectItem(idx, "weight_map");
  ck_assert_int_eq(cJSON_GetArraySize(wm), n);
  for (int i = 0; i < n; i++) {
    const cJSON *v = cJSON_GetObjectItem(wm, w[i].name);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(v->valuestring, shard[want_shard[i]]);
  }
  /* keys sorted, as transformers writes them */
  for (const cJSON *k = wm->child; k && k->next; k = k->next)
    ck_assert_int_lt(strcmp(k->string, k->next->string), 0);
  cJSON_Delete(idx);
  free(itext);

  /* each shard's data stays within the limit unless it holds one tensor */
  gt_st_set s;
  ck_assert_msg(gt_st_set_open(&s, gt_test_dir, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(s.n_files, 3);
  uint64_t sum = 0;
  for (int i = 0; i < s.n_files; i++) {
    const gt_st_file *f = &s.files[i];
    uint64_t bytes = f->n_tensors ? f->tensors[0].end : 0;
    for (int j = 0; j < f->n_tensors; j++)
      if (f->tensors[j].end > bytes) bytes = f->tensors[j].end;
    ck_assert(bytes <= 80 || f->n_tensors == 1);
    sum += bytes;
    ck_assert_str_eq(f->metadata_json, "{\"format\":\"pt\"}");
  }
  ck_assert_uint_eq(sum, total);
  for (int i = 0; i < n; i++) {
    const gt_st_tensor *t = gt_st_set_find(&s, w[i].name);
    ck_assert_msg(t != NULL, "%s not found", w[i].name);
    ck_assert_int_eq(t->dtype, w[i].dtype);
    ck_assert_ptr_nonnull(gt_st_find(&s.files[want_shard[i]], w[i].name));
    if (t->dtype == GT_DT_I32) {
      ck_assert_int_eq(memcmp(t->data, ids, 8), 0);
      continue;
    }
    float out[32];
    ck_assert_int_eq(gt_st_read_f32(t, out, t->numel, &e), GT_OK);
    const float *src = w[i].data;
    for (int64_t j = 0; j < t->numel; j++) {
      float want = t->dtype == GT_DT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(src[j])) : src[j];
      ck_assert_uint_eq(fbits(out[j]), fbits(want));
    }
  }
  ck_assert_ptr_null(gt_st_set_find(&s, "model.absent"));
  gt_st_set_close(&s);
  gt_st_set_close(&s);

  /* max 0: one model.safetensors, and the stale index and shards go away;
   * files of other names stay */
  char *keep = gt_test_dir_path("model-00001-of-00003.safetensors.bak");
  FILE *kf = fopen(keep, "w");
  ck_assert_ptr_nonnull(kf);
  fclose(kf);
  ck_assert_msg(gt_st_write_sharded(gt_test_dir, n, w, 0, &e) == GT_OK, "%s", e.msg);
  ck_assert(file_exists(single));
  ck_assert(!file_exists(ip));
  for (int k = 0; k < 3; k++) {
    char *sp = gt_test_dir_path(shard[k]);
    ck_assert_msg(!file_exists(sp), "%s outlived a one-file write", sp);
    free(sp);
  }
  ck_assert(file_exists(keep));
  free(keep);
  ck_assert_int_eq(gt_st_set_open(&s, gt_test_dir, &e), GT_OK);
  ck_assert_int_eq(s.n_files, 1);
  for (int i = 0; i < n; i++) ck_assert_ptr_nonnull(gt_st_set_find(&s, w[i].name));
  gt_st_set_close(&s);

  /* a limit above the total still writes a one-shard index; the earlier
   * model.safetensors goes (transformers would load it instead) */
  ck_assert_int_eq(gt_st_write_sharded(gt_test_dir, n, w, 1 << 20, &e), GT_OK);
  char *one = gt_test_dir_path("model-00001-of-00001.safetensors");
  ck_assert(file_exists(one));
  ck_assert(file_exists(ip));
  ck_assert(!file_exists(single));
  ck_assert_int_eq(gt_st_set_open(&s, gt_test_dir, &e), GT_OK);
  ck_assert_int_eq(s.n_files, 1);
  gt_st_set_close(&s);
  free(one);

  /* a directory holding both a model.safetensors and an index is refused,
   * naming both */
  ck_assert_int_eq(gt_st_write(single, n, w, NULL, &e), GT_OK);
  ck_assert_int_eq(gt_st_set_open(&s, gt_test_dir, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, single) && strstr(e.msg, ip) && strstr(e.msg, "holds both"), "%s", e.msg);

  /* bad input is refused before any file is touched */
  gt_st_wtensor dup[2] = {w[0], w[0]};
  ck_assert_int_eq(gt_st_write_sharded(gt_test_dir, 2, dup, 80, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "given twice") != NULL, "%s", e.msg);

  free(ip);
  free(single);
  free(a);
  free(b);
  free(c);
  free(d);
  free(g);
}
END_TEST

static void write_one(const char *name, const char *tensor, float v) {
  char *p = gt_test_dir_path(name);
  gt_st_wtensor w = {.name = tensor, .dtype = GT_DT_F32, .ndim = 1, .shape = {1}, .data = &v};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  free(p);
}

static void write_index(const char *text) {
  char *p = gt_test_dir_path("model.safetensors.index.json");
  gt_test_write_file(p, text, strlen(text));
  free(p);
}

static void expect_set_fail(gt_rc rc_want, const char *want) {
  gt_st_set s;
  gt_err e;
  gt_err_clear(&e);
  gt_rc rc = gt_st_set_open(&s, gt_test_dir, &e);
  ck_assert_msg(rc == rc_want, "got %s (%s), expected failure with '%s'", gt_rc_name(rc), e.msg,
                want);
  ck_assert_msg(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
  ck_assert_int_eq(s.n_files, 0);
  ck_assert_ptr_null(s.files);
}

START_TEST(test_set_refusals) {
  expect_set_fail(GT_ERR_IO, "found neither model.safetensors.index.json nor model.safetensors");
  write_one("s1.safetensors", "a", 1);
  write_one("s2.safetensors", "b", 2);
  write_index("{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
  gt_st_set s;
  gt_err e;
  ck_assert_msg(gt_st_set_open(&s, gt_test_dir, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(s.n_files, 2);
  float v;
  ck_assert_int_eq(gt_st_read_f32(gt_st_set_find(&s, "b"), &v, 1, &e), GT_OK);
  ck_assert(v == 2);
  gt_st_set_close(&s);

  write_index("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}");
  expect_set_fail(GT_ERR_FORMAT, "weight_map puts tensor 'b' in s1.safetensors, but that shard has no such tensor");
  write_index("{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s3.safetensors\"}}");
  expect_set_fail(GT_ERR_IO, "s3.safetensors: cannot open");
  write_index("{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
  expect_set_fail(GT_ERR_FORMAT, "expected a plain file name");
  write_index("{\"weight_map\":{\"a\":1}}");
  expect_set_fail(GT_ERR_FORMAT, "weight_map['a'] is a JSON number");
  write_index("{\"metadata\":{}}");
  expect_set_fail(GT_ERR_FORMAT, "\"weight_map\" is missing");
  write_index("{\"weight_map\":");
  expect_set_fail(GT_ERR_FORMAT, "not a JSON object");
  /* the same tensor in two shards */
  float two[2] = {3, 4};
  gt_st_wtensor w3[] = {{.name = "a", .dtype = GT_DT_F32, .ndim = 0, .data = &two[0]},
                        {.name = "d", .dtype = GT_DT_F32, .ndim = 0, .data = &two[1]}};
  char *s3 = gt_test_dir_path("s3.safetensors");
  ck_assert_int_eq(gt_st_write(s3, 2, w3, NULL, &e), GT_OK);
  free(s3);
  write_index("{\"weight_map\":{\"a\":\"s1.safetensors\",\"d\":\"s3.safetensors\"}}");
  expect_set_fail(GT_ERR_FORMAT, "tensor 'a' is in both");
  /* a malformed shard reports its own path */
  char *bad = gt_test_dir_path("s2.safetensors");
  gt_test_write_file(bad, "abc", 3);
  write_index("{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}");
  expect_set_fail(GT_ERR_FORMAT, "s2.safetensors: file is 3 bytes");
  free(bad);
}
END_TEST

/* A tensor large enough to take the threaded conversion path. */
/* A row range (the embedding truncation on HF import) converts exactly the
 * elements asked for, in every input dtype, and refuses ranges outside. */
START_TEST(test_read_range) {
  char *p = gt_test_dir_path("range.safetensors");
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = 0.5f * (float)i - 2.0f; /* exact in BF16 */
  gt_st_wtensor w[] = {{.name = "f", .dtype = GT_DT_F32, .ndim = 2, .shape = {4, 3}, .data = x},
                       {.name = "b", .dtype = GT_DT_BF16, .ndim = 2, .shape = {4, 3}, .data = x}};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 2, w, NULL, &e), GT_OK);
  gt_st_file f;
  ck_assert_msg(gt_st_open(&f, p, &e) == GT_OK, "%s", e.msg);
  const char *names[] = {"f", "b"};
  for (int k = 0; k < 2; k++) {
    float out[12];
    for (int i = 0; i < 12; i++) out[i] = -99.0f;
    ck_assert_int_eq(gt_st_read_f32_range(gt_st_find(&f, names[k]), 3, 6, out, &e), GT_OK);
    for (int i = 0; i < 6; i++) ck_assert(out[i] == x[3 + i]);
    ck_assert(out[6] == -99.0f); /* nothing past n is written */
    ck_assert_int_eq(gt_st_read_f32_range(gt_st_find(&f, names[k]), 0, 0, NULL, &e), GT_OK);
    ck_assert_int_eq(gt_st_read_f32_range(gt_st_find(&f, names[k]), 9, 4, out, &e), GT_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "asked for values [9, 13) but it holds 12") != NULL, "%s", e.msg);
    ck_assert_int_eq(gt_st_read_f32_range(gt_st_find(&f, names[k]), -1, 2, out, &e), GT_ERR_ARG);
  }
  gt_st_close(&f);
  free(p);
}
END_TEST

START_TEST(test_large_bf16) {
  const int64_t n = (1 << 20) + 7;
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  uint64_t rs = 3;
  gt_test_fill(x, n, &rs, -4, 4);
  char *p = gt_test_dir_path("large.safetensors");
  gt_st_wtensor w = {.name = "big", .dtype = GT_DT_BF16, .ndim = 2, .shape = {1, n}, .data = x};
  gt_err e;
  ck_assert_int_eq(gt_st_write(p, 1, &w, NULL, &e), GT_OK);
  gt_st_file f;
  ck_assert_int_eq(gt_st_open(&f, p, &e), GT_OK);
  ck_assert_int_eq(gt_st_read_f32(gt_st_find(&f, "big"), y, n, &e), GT_OK);
  for (int64_t i = 0; i < n; i++) {
    if (fbits(y[i]) != ((uint32_t)gt_f32_to_bf16(x[i]) << 16))
      ck_abort_msg("element %lld differs", (long long)i);
  }
  gt_st_close(&f);
  free(p);
  free(x);
  free(y);
}
END_TEST

static Suite *st_suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_checked_fixture(tc, gt_test_dir_setup, gt_test_dir_teardown);
  tcase_add_test(tc, test_dtype_table);
  tcase_add_test(tc, test_f32_roundtrip_bit_exact);
  tcase_add_test(tc, test_bf16_conversion_known_values);
  tcase_add_test(tc, test_bf16_file_roundtrip);
  tcase_add_test(tc, test_f16_read_known_bits);
  tcase_add_test(tc, test_i32_and_read_refusals);
  tcase_add_test(tc, test_header_padding_and_order);
  tcase_add_test(tc, test_metadata_roundtrip);
  tcase_add_test(tc, test_rust_writer_bytes);
  tcase_add_test(tc, test_empty_and_scalar_tensors);
  tcase_add_test(tc, test_bad_sizes);
  tcase_add_test(tc, test_malformed_huge_header);
  tcase_add_test(tc, test_malformed_offsets_past_end);
  tcase_add_test(tc, test_malformed_overlap);
  tcase_add_test(tc, test_malformed_dtype_size);
  tcase_add_test(tc, test_malformed_unknown_dtype);
  tcase_add_test(tc, test_malformed_duplicate);
  tcase_add_test(tc, test_malformed_non_contiguous);
  tcase_add_test(tc, test_bad_json);
  tcase_add_test(tc, test_bad_entries);
  tcase_add_test(tc, test_bad_shapes);
  tcase_add_test(tc, test_bad_offsets);
  tcase_add_test(tc, test_bad_names_and_metadata);
  tcase_add_test(tc, test_writer_refusals);
  tcase_add_test(tc, test_atomic_write);
  tcase_add_test(tc, test_sharded_roundtrip);
  tcase_add_test(tc, test_set_refusals);
  tcase_add_test(tc, test_read_range);
  tcase_add_test(tc, test_large_bf16);
  return s;
}

int main(void) {
  return gt_test_run_suite(st_suite(), 0);
}
