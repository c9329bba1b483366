/* Decoding text (src/decode/text.h): console escaping byte by byte, the
 * `stop` key's forms, prompts as ids (one <bos>, the template's "<bos>"
 * taken as it), generation that stops at the end-of-turn token, at its text
 * with byte tokens and at stop strings (each checked against an unstopped
 * run of the same seeded sampler: the stopped run must end exactly at the
 * first token whose text completes the marker, and its reply be the text
 * before it), the end-of-run sample's switch and its escaped text.
 *
 * The end-of-turn token is made to win by the embedding trick of
 * test_decode's test_stops_at_eos: with tied embeddings, giving the marker's
 * row twice the row of the token greedy picks makes its logit twice that
 * token's (positive) logit. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "decode/decode.h"
#include "decode/text.h"
#include "gt_testutil.h"

/* ---- escaping ---- */

static void expect_escape(const char *in, size_t n, const char *want) {
  char *got = gt_text_escape(in, n);
  ck_assert_ptr_nonnull(got);
  ck_assert_msg(!strcmp(got, want), "escape gave '%s', want '%s'", got, want);
  free(got);
}

START_TEST(test_escape) {
  expect_escape("plain text", 10, "plain text");
  expect_escape("a\nb\tc", 5, "a\nb\tc");                          /* newline and tab pass */
  expect_escape("a\x01" "b\x1b[2Jc\x7f", 9, "a\\x01b\\x1B[2Jc\\x7F"); /* C0 and DEL */
  expect_escape("x\ry", 3, "x\\x0Dy");
  expect_escape("\0z", 2, "\\x00z");                               /* a NUL byte inside the text */
  expect_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  expect_escape("\xc2\x85|\xc2\x9f|\xc2\xa0", 8, "\\u0085|\\u009F|\xc2\xa0"); /* C1 escaped, NBSP kept */
  expect_escape("\xff\xfe", 2, "\\xFF\\xFE");                       /* never valid */
  expect_escape("\xc0\x80", 2, "\\xC0\\x80");                       /* overlong NUL */
  expect_escape("\xe0\x80\xaf", 3, "\\xE0\\x80\\xAF");               /* overlong '/' */
  expect_escape("\xed\xa0\x80", 3, "\\xED\\xA0\\x80");               /* a UTF-16 surrogate */
  expect_escape("\xf4\x90\x80\x80", 4, "\\xF4\\x90\\x80\\x80");      /* above U+10FFFF */
  expect_escape("ab\xe2\x82", 4, "ab\\xE2\\x82");                   /* cut short at the end */
  expect_escape("\xe2(\xa1", 3, "\\xE2(\\xA1");                     /* a lead byte without its tail */
  expect_escape("\xef\xbf\xbd", 3, "\xef\xbf\xbd");                 /* U+FFFD itself is text */
}
END_TEST

/* ---- the stop key ---- */

START_TEST(test_stop_strings_parse) {
  char **s;
  int n;
  gt_err e;
  ck_assert_int_eq(gt_stop_strings_parse("", &s, &n, &e), GT_OK);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(gt_stop_strings_parse("User:", &s, &n, &e), GT_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(s[0], "User:");
  gt_stop_strings_free(s, n);
  ck_assert_int_eq(gt_stop_strings_parse("[\"\\n\\n\", \"###\"]", &s, &n, &e), GT_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(s[0], "\n\n");
  ck_assert_str_eq(s[1], "###");
  gt_stop_strings_free(s, n);
  /* not JSON: the text itself */
  ck_assert_int_eq(gt_stop_strings_parse("[end", &s, &n, &e), GT_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(s[0], "[end");
  gt_stop_strings_free(s, n);
  ck_assert_int_eq(gt_stop_strings_parse("[\"a\", 3]", &s, &n, &e), GT_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "key 'stop'"));
  ck_assert_int_eq(gt_stop_strings_parse("[\"a\", \"\"]", &s, &n, &e), GT_ERR_CONFIG);
  /* a config file's list arrives as a JSON list */
  gt_config c;
  const char *ov[] = {"stop=[\"x\",\"yz\"]"};
  ck_assert_msg(gt_config_load(&c, NULL, NULL, 1, ov, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_stop_strings_parse(c.stop, &s, &n, &e), GT_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(s[1], "yz");
  gt_stop_strings_free(s, n);
}
END_TEST

/* ---- a tokenizer with the chat markers ----
 * Gemma's layout in small: <pad> <eos> <bos> <unk>, the 256 byte-fallback
 * tokens <0x00> .. <0xFF> as ids 4 .. 259, then <start_of_turn> (260) and
 * <end_of_turn> (261), special added tokens. No merges: text is bytes. */
static gt_tokenizer *chat_tokenizer(void) {
  size_t cap = 64 * 1024, o = 0;
  char *j = malloc(cap);
  const char *added[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
  o += (size_t)snprintf(j + o, cap - o, "{\"version\": \"1.0\", \"added_tokens\": [");
  for (int i = 0; i < 6; i++)
    o += (size_t)snprintf(j + o, cap - o,
                          "%s{\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, "
                          "\"rstrip\": false, \"normalized\": false, \"special\": true}",
                          i ? ", " : "", i < 4 ? i : 256 + i, i < 4 ? added[i] : i == 4 ? "<start_of_turn>" : "<end_of_turn>");
  o += (size_t)snprintf(j + o, cap - o,
                        "], \"normalizer\": null, \"pre_tokenizer\": null, \"post_processor\": null, "
                        "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
                        "{\"type\": \"Fuse\"}]}, \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": "
                        "\"<unk>\", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                        "\"fuse_unk\": true, \"byte_fallback\": true, \"ignore_merges\": false, \"vocab\": {");
  for (int i = 0; i < 4; i++) o += (size_t)snprintf(j + o, cap - o, "\"%s\": %d, ", added[i], i);
  for (int b = 0; b < 256; b++) o += (size_t)snprintf(j + o, cap - o, "\"<0x%02X>\": %d, ", b, 4 + b);
  o += (size_t)snprintf(j + o, cap - o, "\"<start_of_turn>\": 260, \"<end_of_turn>\": 261}, \"merges\": []}}");
  gt_tokenizer *t = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load_json(j, o, "chat_tokenizer", &t, &e) == GT_OK, "%s", e.msg);
  free(j);
  return t;
}

typedef struct fixture {
  gt_config cfg;
  gt_mem mem;
  gt_model m;
  gt_sampler s;
  gt_textgen g;
} fixture;

static void setup(fixture *f, const char *vocab, const gt_tokenizer *tok, gt_sample_strategy strat, uint64_t seed) {
  const char *ov[] = {"model_name=gemma3-tiny", vocab};
  gt_test_model_random(&f->m, &f->cfg, &f->mem, 2, ov, seed, 0);
  gt_err e;
  ck_assert_msg(gt_sampler_init(&f->s, strat, 1.0, 0, -1, 7, f->m.vocab, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_textgen_init(&f->g, &f->m, tok, &f->s, &e) == GT_OK, "%s", e.msg);
}

static void teardown(fixture *f) {
  gt_textgen_free(&f->g);
  gt_sampler_free(&f->s);
  gt_model_free(&f->m);
  ck_assert_int_eq(gt_mem_total_cur(&f->mem), 0);
}

/* Generates from text with a sampler reseeded to 7 (so two runs draw alike). */
static void run(fixture *f, const char *text, int64_t max_new, gt_textgen_out *o) {
  gt_err e;
  int32_t *ids;
  int64_t n;
  ck_assert_msg(gt_textgen_encode(&f->g, text, &ids, &n, &e) == GT_OK, "%s", e.msg);
  gt_sample_strategy strat = f->s.strategy;
  gt_sampler_free(&f->s);
  ck_assert(gt_sampler_init(&f->s, strat, 1.0, 0, -1, 7, f->m.vocab, &e) == GT_OK);
  ck_assert_msg(gt_textgen_generate(&f->g, ids, n, max_new, o, &e) == GT_OK, "%s", e.msg);
  free(ids);
}

START_TEST(test_encode_bos) {
  fixture f;
  gt_tokenizer *tok = chat_tokenizer();
  setup(&f, "vocab_size=264", tok, GT_SAMPLE_GREEDY, 1);
  gt_err e;
  int32_t *a, *b;
  int64_t na, nb;
  ck_assert(gt_textgen_encode(&f.g, "<bos><start_of_turn>hi<end_of_turn>", &a, &na, &e) == GT_OK);
  ck_assert(gt_textgen_encode(&f.g, "<start_of_turn>hi<end_of_turn>", &b, &nb, &e) == GT_OK);
  const int32_t want[] = {GT_TOK_BOS, 260, 4 + 'h', 4 + 'i', 261};
  ck_assert_int_eq(na, 5);
  ck_assert_int_eq(nb, 5);
  ck_assert_mem_eq(a, want, sizeof want);
  ck_assert_mem_eq(b, want, sizeof want);
  free(a), free(b);
  teardown(&f);
  /* byte tokens: "<bos>" is the one <bos>, the rest is bytes */
  setup(&f, "vocab_size=260", NULL, GT_SAMPLE_GREEDY, 1);
  ck_assert(gt_textgen_encode(&f.g, "<bos>ab", &a, &na, &e) == GT_OK);
  const int32_t wb[] = {GT_TOK_BOS, 4 + 'a', 4 + 'b'};
  ck_assert_int_eq(na, 3);
  ck_assert_mem_eq(a, wb, sizeof wb);
  free(a);
  teardown(&f);
  /* a tokenizer whose ids the model does not have */
  setup(&f, "vocab_size=260", tok, GT_SAMPLE_GREEDY, 1);
  ck_assert_int_eq(gt_textgen_encode(&f.g, "x<end_of_turn>", &a, &na, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "id 261 ('<end_of_turn>'), outside the model's vocab_size 260"), "%s", e.msg);
  teardown(&f);
  gt_tokenizer_free(tok);
}
END_TEST

/* The end-of-turn token wins the first step: the reply is empty and
 * generation ends there; without the marker set it runs on. */
START_TEST(test_stops_at_end_of_turn_token) {
  fixture f;
  gt_tokenizer *tok = chat_tokenizer();
  setup(&f, "vocab_size=264", tok, GT_SAMPLE_GREEDY, 3);
  const char *prompt = "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n";
  gt_textgen_out o;
  run(&f, prompt, 12, &o);
  ck_assert_int_eq(o.n_new, 12);
  int32_t first = o.ids[0];
  ck_assert_int_ne(first, 261);
  gt_textgen_out_free(&o);
  float *E = f.m.params + f.m.embed_offset;
  for (int64_t c = 0; c < f.m.d; c++) E[261 * f.m.d + c] = 2.0f * E[first * f.m.d + c];
  run(&f, prompt, 12, &o);
  ck_assert_int_eq(o.ids[0], 261); /* the model now says <end_of_turn> first ... */
  ck_assert_int_eq(o.n_new, 12);   /* ... and, without the marker, goes on */
  gt_textgen_out_free(&o);
  gt_err e;
  ck_assert(gt_textgen_set_end_of_turn(&f.g, "<end_of_turn>", &e) == GT_OK);
  ck_assert_int_eq(f.g.eot_id, 261);
  ck_assert_int_eq(f.g.n_stops, 0);
  run(&f, prompt, 12, &o);
  ck_assert_int_eq(o.n_new, 1);
  ck_assert_int_eq(o.reason, GT_STOP_END_OF_TURN);
  ck_assert_uint_eq(o.len, 0);
  char why[64];
  gt_textgen_reason_text(&f.g, &o, why, sizeof why);
  ck_assert_str_eq(why, "stopped at the end of turn");
  gt_textgen_out_free(&o);
  teardown(&f);
  gt_tokenizer_free(tok);
}
END_TEST

/* The end-of-turn token after k tokens (the k-th token of an unstopped run
 * taken as the marker's id): the reply is the text of the k before it. */
START_TEST(test_stops_at_end_of_turn_later) {
  fixture f;
  setup(&f, "vocab_size=260", NULL, GT_SAMPLE_WEIGHTED, 5);
  gt_textgen_out full, o;
  run(&f, "And God said", 40, &full);
  ck_assert_int_eq(full.n_new, 40);
  int k = 6;
  while (k < 40) { /* a token that has not come before */
    int seen = 0;
    for (int i = 0; i < k; i++) seen |= full.ids[i] == full.ids[k];
    if (!seen) break;
    k++;
  }
  ck_assert_int_lt(k, 40);
  f.g.eot_id = full.ids[k];
  run(&f, "And God said", 40, &o);
  ck_assert_int_eq(o.n_new, k + 1);
  ck_assert_int_eq(o.reason, GT_STOP_END_OF_TURN);
  char *t;
  size_t tl;
  gt_err e;
  ck_assert(gt_textgen_text(&f.g, full.ids, k, &t, &tl, &e) == GT_OK);
  ck_assert_uint_eq(o.len, tl);
  ck_assert(!memcmp(o.text, t, tl));
  free(t);
  gt_textgen_out_free(&o);
  gt_textgen_out_free(&full);
  teardown(&f);
}
END_TEST

/* The first n whose text contains s (the brute-force reference). */
static int64_t first_completion(fixture *f, const gt_textgen_out *full, const char *s, int64_t *at) {
  for (int64_t n = 1; n <= full->n_new; n++) {
    char *t;
    size_t tl;
    gt_err e;
    ck_assert(gt_textgen_text(&f->g, full->ids, n, &t, &tl, &e) == GT_OK);
    char *p = memmem(t, tl, s, strlen(s));
    if (p) {
      *at = p - t;
      free(t);
      return n;
    }
    free(t);
  }
  return -1;
}

/* Stop strings with byte tokens: two strings taken from an unstopped run's
 * text; the run stops at the token completing the earlier one and the reply
 * ends before it. With byte tokens the end-of-turn marker is such a string. */
START_TEST(test_stop_strings) {
  fixture f;
  setup(&f, "vocab_size=260", NULL, GT_SAMPLE_WEIGHTED, 9);
  gt_textgen_out full, o;
  run(&f, "In the beginning", 60, &full);
  ck_assert_int_eq(full.n_new, 60);
  ck_assert_uint_ge(full.len, 40);
  /* two 3-byte pieces without NUL bytes, from the middle and from near the end */
  char s1[4] = {0}, s2[4] = {0};
  size_t p1 = full.len / 3, p2 = full.len - 6;
  while (memchr(full.text + p1, 0, 3)) p1++;
  while (p2 > p1 + 3 && memchr(full.text + p2, 0, 3)) p2--;
  memcpy(s1, full.text + p1, 3);
  memcpy(s2, full.text + p2, 3);
  int64_t at1, at2;
  int64_t n1 = first_completion(&f, &full, s1, &at1), n2 = first_completion(&f, &full, s2, &at2);
  ck_assert_int_gt(n1, 0);
  ck_assert_int_gt(n2, 0);
  gt_err e;
  ck_assert(gt_textgen_add_stop(&f.g, s2, &e) == GT_OK);
  ck_assert(gt_textgen_add_stop(&f.g, s1, &e) == GT_OK);
  run(&f, "In the beginning", 60, &o);
  int64_t want_n = n1 < n2 ? n1 : n2, want_at = n1 < n2 ? at1 : at2;
  if (n1 == n2) want_at = at1 < at2 ? at1 : at2;
  ck_assert_int_eq(o.n_new, want_n);
  ck_assert_int_eq(o.reason, GT_STOP_STRING);
  ck_assert_uint_eq(o.len, (size_t)want_at);
  ck_assert(!memcmp(o.text, full.text, o.len));
  char why[64];
  gt_textgen_reason_text(&f.g, &o, why, sizeof why);
  ck_assert_str_eq(why, o.stop_index == 1 ? "stopped at stop string 2" : "stopped at stop string 1");
  gt_textgen_out_free(&o);
  /* the end-of-turn marker as text (byte tokens have no such token) */
  gt_textgen_free(&f.g);
  ck_assert(gt_textgen_init(&f.g, &f.m, NULL, &f.s, &e) == GT_OK);
  ck_assert(gt_textgen_set_end_of_turn(&f.g, s2, &e) == GT_OK);
  ck_assert_int_eq(f.g.eot_id, -1);
  run(&f, "In the beginning", 60, &o);
  ck_assert_int_eq(o.n_new, n2);
  ck_assert_int_eq(o.reason, GT_STOP_END_OF_TURN);
  ck_assert_uint_eq(o.len, (size_t)at2);
  gt_textgen_out_free(&o);
  gt_textgen_out_free(&full);
  teardown(&f);
}
END_TEST

/* ---- the end-of-run sample ---- */

START_TEST(test_sample_switch) {
  gt_config c;
  gt_err e;
  ck_assert(gt_config_load(&c, NULL, NULL, 0, NULL, &e) == GT_OK);
  ck_assert_str_eq(c.sample_at_end, "auto");
  ck_assert_int_eq(gt_decode_sample_wanted(&c), 1);
  c.use_sft = 1;
  ck_assert_int_eq(gt_decode_sample_wanted(&c), 0); /* auto: off for SFT */
  snprintf(c.sample_at_end, sizeof c.sample_at_end, "on");
  ck_assert_int_eq(gt_decode_sample_wanted(&c), 1);
  c.sample_tokens = 0;
  ck_assert_int_eq(gt_decode_sample_wanted(&c), 0);
  c.sample_tokens = 8;
  c.use_sft = 0;
  snprintf(c.sample_at_end, sizeof c.sample_at_end, "off");
  ck_assert_int_eq(gt_decode_sample_wanted(&c), 0);
}
END_TEST

/* A random byte model's sample holds control bytes and invalid UTF-8 (the
 * raw continuation is checked to); the text returned has neither. */
START_TEST(test_sample_text_escaped) {
  fixture f;
  setup(&f, "vocab_size=260", NULL, GT_SAMPLE_GREEDY, 11);
  f.cfg.sample_tokens = 200;
  snprintf(f.cfg.sample_prompt, sizeof f.cfg.sample_prompt, "And God said");
  char *text;
  int64_t n_new;
  gt_err e;
  ck_assert_msg(gt_decode_sample_text(&f.m, &f.cfg, &text, &n_new, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_gt(n_new, 50);
  ck_assert(!strncmp(text, "And God said", 12));
  int raw_bad = 0;
  /* the same draws, raw: the sampler of gt_decode_sample_text */
  gt_sampler_free(&f.s);
  ck_assert(gt_sampler_init(&f.s, GT_SAMPLE_WEIGHTED, 0.7, 0, -1.0, 0x5EED0000ull + (uint64_t)f.cfg.init_weights_seed,
                            f.m.vocab, &e) == GT_OK);
  int32_t *ids;
  int64_t n;
  gt_textgen_out o;
  ck_assert(gt_textgen_encode(&f.g, "And God said", &ids, &n, &e) == GT_OK);
  ck_assert(gt_textgen_generate(&f.g, ids, n, 200, &o, &e) == GT_OK);
  ck_assert_int_eq(o.n_new, n_new);
  for (size_t i = 0; i < o.len; i++) raw_bad |= (unsigned char)o.text[i] < 0x20 || (unsigned char)o.text[i] >= 0x80;
  ck_assert_msg(raw_bad, "the raw sample has no byte to escape: the test would prove nothing");
  char *esc = gt_text_escape(o.text, o.len);
  ck_assert_str_eq(text + 12, esc);
  free(esc);
  esc = gt_text_escape(text, strlen(text)); /* nothing left to escape */
  ck_assert_str_eq(esc, text);
  free(esc);
  free(ids);
  gt_textgen_out_free(&o);
  free(text);
  teardown(&f);
}
END_TEST

static Suite *decode_text_suite(void) {
  Suite *s = suite_create("decode_text");
  TCase *tc = gt_test_tcase(s, "decode_text");
  tcase_add_test(tc, test_escape);
  tcase_add_test(tc, test_stop_strings_parse);
  tcase_add_test(tc, test_encode_bos);
  tcase_add_test(tc, test_stops_at_end_of_turn_token);
  tcase_add_test(tc, test_stops_at_end_of_turn_later);
  tcase_add_test(tc, test_stop_strings);
  tcase_add_test(tc, test_sample_switch);
  tcase_add_test(tc, test_sample_text_escaped);
  return s;
}

int main(void) { return gt_test_run_suite(decode_text_suite(), 0); }
