/* Decoding text (src/decode/text.h): console escaping byte by byte, the
 * `stop` key's forms, prompts as ids (one <bos>, the template's "<bos>"
 * taken as it), generation that stops at the end-of-turn token, at its text
 * with byte tokens and at stop strings (each checked against an unstopped
 * run of the same seeded sampler: the stopped run must end exactly at the
 * first token whose text completes the marker, and its reply be the text
 * before it), the end-of-run sample's switch and its escaped text; <bos>
 * and <eos> from the tokenizer, ids it does not have never sampled, Gemma
 * 4's thought channel split from the answer (and out of the history), the
 * sampler's per-record streams.
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
#include "data/chat.h"
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

/* ---- what the tokenizer says: <bos>, <eos>, its ids, Gemma 4's thought channel ---- */

#define SMALL_JSON GT_TEST_DATA_DIR "/tokenizer_small.json"     /* <unk> 0, <s> 1, </s> 2, ..., <x> 18 */
#define MARKERS_JSON GT_TEST_DATA_DIR "/tokenizer_chat_markers.json" /* Gemma's specials 0-3, bytes 4 + b,
                                                                    <|turn> 260, <turn|> 261, <|channel> 262,
                                                                    <channel|> 263, ... 266 */

static gt_tokenizer *load_tok(const char *path) {
  gt_tokenizer *t = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load(path, &t, &e) == GT_OK, "%s", e.msg);
  return t;
}

/* The model's logits after the ids (a decoder of its own, the model as it is now). */
static float *logits_after(fixture *f, const int32_t *ids, int64_t n) {
  gt_err e;
  gt_decoder d;
  ck_assert_msg(gt_decoder_init(&d, &f->m, n, &e) == GT_OK, "%s", e.msg);
  float *l = malloc(sizeof(float) * (size_t)f->m.vocab);
  ck_assert_msg(gt_decoder_prefill(&d, ids, n, l, &e) == GT_OK, "%s", e.msg);
  gt_decoder_free(&d);
  return l;
}

/* Makes `id` (not among the prompt's ids) the model's most likely next
 * token after them, by the embedding trick (its row twice the row of the
 * token the model prefers among the first `among`, whose logit must be
 * positive). */
static void make_win(fixture *f, const int32_t *ids, int64_t n, int32_t id, int64_t among) {
  for (int64_t i = 0; i < n; i++) ck_assert_int_ne(ids[i], id);
  float *l = logits_after(f, ids, n);
  int32_t best = gt_sample_argmax(l, among);
  ck_assert_int_ne(best, id);
  ck_assert_msg(l[best] > 0.0f, "the preferred token's logit %g is not positive: the trick would not work", l[best]);
  free(l);
  float *E = f->m.params + f->m.embed_offset;
  for (int64_t c = 0; c < f->m.d; c++) E[(int64_t)id * f->m.d + c] = 2.0f * E[(int64_t)best * f->m.d + c];
  l = logits_after(f, ids, n);
  ck_assert_int_eq(gt_sample_argmax(l, f->m.vocab), id);
  free(l);
}

/* Generates from ids with a sampler reseeded to 7, as run() does from text. */
static void run_ids(fixture *f, const int32_t *ids, int64_t n, int64_t max_new, gt_textgen_out *o) {
  gt_err e;
  gt_sample_strategy strat = f->s.strategy;
  gt_sampler_free(&f->s);
  ck_assert(gt_sampler_init(&f->s, strat, 1.0, 0, -1, 7, f->m.vocab, &e) == GT_OK);
  ck_assert_msg(gt_textgen_generate(&f->g, ids, n, max_new, o, &e) == GT_OK, "%s", e.msg);
}

/* <s> = 1, </s> = 2 (tokenizer_small.json): the prompt starts with <s>, and
 * the generation stops at </s>, not at <s> (Gemma's ids 2 and 1 are the
 * other way round) */
START_TEST(test_bos_eos_from_tokenizer) {
  gt_tokenizer *tok = load_tok(SMALL_JSON);
  fixture f;
  setup(&f, "vocab_size=260", tok, GT_SAMPLE_GREEDY, 5);
  ck_assert_int_eq(f.g.bos, 1);
  ck_assert_int_eq(f.g.eos, 2);
  gt_err e;
  int32_t *ids;
  int64_t n;
  ck_assert(gt_textgen_encode(&f.g, "ab", &ids, &n, &e) == GT_OK);
  const int32_t want[] = {1, 7}; /* <s> "ab" */
  ck_assert_int_eq(n, 2);
  ck_assert_mem_eq(ids, want, sizeof want);
  free(ids);
  /* a prompt without <s>, so that the trick leaves the prompt as it is */
  const int32_t abc[] = {3, 4, 5};
  float *E = f.m.params + f.m.embed_offset;
  float *keep = malloc(sizeof(float) * (size_t)f.m.d * 3);
  memcpy(keep, E, sizeof(float) * (size_t)f.m.d * 3);
  gt_textgen_out o;
  /* <s> first: not an end, the run goes on */
  make_win(&f, abc, 3, 1, 19);
  run_ids(&f, abc, 3, 6, &o);
  ck_assert_int_eq(o.ids[0], 1);
  ck_assert_int_eq(o.n_new, 6);
  ck_assert_int_eq(o.reason, GT_STOP_MAX);
  gt_textgen_out_free(&o);
  memcpy(E, keep, sizeof(float) * (size_t)f.m.d * 3);
  /* </s> first: the end */
  make_win(&f, abc, 3, 2, 19);
  run_ids(&f, abc, 3, 6, &o);
  ck_assert_int_eq(o.ids[0], 2);
  ck_assert_int_eq(o.n_new, 1);
  ck_assert_int_eq(o.reason, GT_STOP_EOS);
  ck_assert_uint_eq(o.len, 0);
  gt_textgen_out_free(&o);
  free(keep);
  teardown(&f);
  gt_tokenizer_free(tok);
}
END_TEST

/* A model of 260 ids with a tokenizer of 19: the model's favourite is id
 * 217, which the tokenizer cannot turn into text; greedy takes the best of
 * the 19, and sampling (weighted, top-k, nucleus) never leaves them */
START_TEST(test_masks_ids_the_tokenizer_lacks) {
  gt_tokenizer *tok = load_tok(SMALL_JSON);
  fixture f;
  setup(&f, "vocab_size=260", tok, GT_SAMPLE_GREEDY, 5);
  ck_assert_int_eq(f.g.n_ids, 19);
  gt_err e;
  int32_t *ids;
  int64_t n;
  ck_assert(gt_textgen_encode(&f.g, "abc", &ids, &n, &e) == GT_OK);
  make_win(&f, ids, n, 217, 260);
  float *l = logits_after(&f, ids, n);
  int32_t want = gt_sample_argmax(l, 19);
  free(l);
  gt_textgen_out o;
  run_ids(&f, ids, n, 6, &o);
  ck_assert_int_eq(o.ids[0], want);
  for (int64_t i = 0; i < o.n_new; i++) ck_assert_int_lt(o.ids[i], 19);
  gt_textgen_out_free(&o);
  const struct { gt_sample_strategy st; int64_t k; double p; } ss[] = {
      {GT_SAMPLE_WEIGHTED, 0, -1}, {GT_SAMPLE_TOPK, 100, -1}, {GT_SAMPLE_NUCLEUS, 0, 1.0}};
  for (int i = 0; i < 3; i++) {
    gt_sampler_free(&f.s);
    ck_assert(gt_sampler_init(&f.s, ss[i].st, 2.0, ss[i].k, ss[i].p, 11, f.m.vocab, &e) == GT_OK);
    ck_assert_msg(gt_textgen_generate(&f.g, ids, n, 40, &o, &e) == GT_OK, "strategy %d: %s", (int)ss[i].st, e.msg);
    for (int64_t j = 0; j < o.n_new; j++) ck_assert_int_lt(o.ids[j], 19);
    gt_textgen_out_free(&o);
  }
  free(ids);
  teardown(&f);
  gt_tokenizer_free(tok);
}
END_TEST

/* Gemma 4 with thinking: the reply's <|channel> and <channel|> tokens are
 * kept, so it splits into the thought and the answer; the conversation
 * keeps the answer as the turn's content (the thought as its reasoning),
 * and the next prompt holds the answer alone, as Google's template renders
 * the earlier turns. Then a generation that opens the channel and does not
 * close it: all of it is thought, the answer empty. */
static void put_bytes(int32_t *ids, int64_t *n, const char *s) {
  for (; *s; s++) ids[(*n)++] = 4 + (unsigned char)*s;
}

START_TEST(test_thought_channel_reply) {
  gt_tokenizer *tok = load_tok(MARKERS_JSON);
  fixture f;
  setup(&f, "vocab_size=272", tok, GT_SAMPLE_GREEDY, 3);
  gt_config c;
  const char *ov[] = {"model_name=gemma3-tiny", "chat_template=gemma4", "enable_thinking=true"};
  gt_test_config(&c, 3, ov);
  gt_err e;
  ck_assert_msg(gt_textgen_set_chat(&f.g, &c, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(f.g.eot_id, 261);
  ck_assert_int_eq(f.g.ch_open_id, 262);
  ck_assert_int_eq(f.g.ch_close_id, 263);
  /* what the model writes: <|channel>thought\nAdd.\n<channel|>It is 4.<turn|> */
  int32_t ids[64];
  int64_t n = 0;
  ids[n++] = 262;
  put_bytes(ids, &n, "thought\nAdd two and two.\n");
  ids[n++] = 263;
  put_bytes(ids, &n, "It is 4.");
  gt_textgen_out o;
  memset(&o, 0, sizeof o);
  ck_assert(gt_textgen_text(&f.g, ids, n, &o.text, &o.len, &e) == GT_OK);
  ck_assert_str_eq(o.text, "<|channel>thought\nAdd two and two.\n<channel|>It is 4.");
  ck_assert(gt_textgen_split_thinking(&f.g, &o, &e) == GT_OK);
  ck_assert_str_eq(o.text, "It is 4.");
  ck_assert_uint_eq(o.len, 8);
  ck_assert_str_eq(o.thinking, "Add two and two.");
  gt_decode_chat chat;
  memset(&chat, 0, sizeof chat);
  ck_assert(gt_decode_chat_add(&chat, "user", "What is 2+2?", &e) == GT_OK);
  ck_assert(gt_decode_chat_add_reply(&chat, &o, &e) == GT_OK);
  ck_assert_str_eq(chat.turns[1].role, "assistant");
  ck_assert_str_eq(chat.turns[1].content, "It is 4.");
  ck_assert_str_eq(chat.turns[1].thinking, "Add two and two.");
  ck_assert(gt_decode_chat_add(&chat, "user", "And 3+3?", &e) == GT_OK);
  char *text;
  const char *eot;
  ck_assert_msg(gt_decode_chat_render(&c, &chat, &text, &eot, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(text, "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\nIt is "
                         "4.<turn|>\n<|turn>user\nAnd 3+3?<turn|>\n<|turn>model\n");
  free(text);
  gt_textgen_out_free(&o);
  gt_decode_chat_free(&chat);
  /* without a channel set (Gemma 3, plain text) the markers are dropped as before */
  gt_textgen plain;
  ck_assert(gt_textgen_init(&plain, &f.m, tok, &f.s, &e) == GT_OK);
  ck_assert(gt_textgen_text(&plain, ids, n, &o.text, &o.len, &e) == GT_OK);
  ck_assert_str_eq(o.text, "thought\nAdd two and two.\nIt is 4.");
  ck_assert(gt_textgen_split_thinking(&plain, &o, &e) == GT_OK);
  ck_assert_ptr_null(o.thinking);
  free(o.text);
  gt_textgen_free(&plain);
  /* a generation that opens the channel first (and, the random model
   * being what it is, goes on writing <|channel>): the reply is cut as
   * gt_chat_split_thinking cuts its text with the markers */
  const char *prompt = "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n";
  int32_t *pids;
  int64_t pn;
  ck_assert(gt_textgen_encode(&f.g, prompt, &pids, &pn, &e) == GT_OK);
  make_win(&f, pids, pn, 262, 267);
  run_ids(&f, pids, pn, 6, &o);
  free(pids);
  ck_assert_int_eq(o.ids[0], 262);
  int64_t n_text = o.n_new - (o.reason == GT_STOP_END_OF_TURN);
  char *raw, *answer, *thought;
  size_t rl, an, tn;
  ck_assert(gt_textgen_text(&f.g, o.ids, n_text, &raw, &rl, &e) == GT_OK);
  ck_assert(!memcmp(raw, "<|channel>", 10));
  ck_assert(gt_chat_split_thinking(raw, rl, &answer, &an, &thought, &tn, &e) == GT_OK);
  ck_assert_uint_eq(o.len, an);
  ck_assert_mem_eq(o.text, answer, an);
  ck_assert_ptr_nonnull(o.thinking);
  ck_assert_uint_eq(o.thinking_len, tn);
  ck_assert_mem_eq(o.thinking, thought, tn);
  free(raw), free(answer), free(thought);
  gt_textgen_out_free(&o);
  teardown(&f);
  gt_tokenizer_free(tok);
}
END_TEST

/* The sampler's streams: stream 0 is the seed's own, stream k another,
 * the same each time it is restarted */
START_TEST(test_sampler_streams) {
  const float l[5] = {0.1f, 0.2f, 0.3f, 0.2f, 0.1f};
  gt_sampler s;
  gt_err e;
  int32_t a[64], b[64], c[64];
  ck_assert(gt_sampler_init(&s, GT_SAMPLE_WEIGHTED, 1.0, 0, -1, 9, 5, &e) == GT_OK);
  for (int i = 0; i < 64; i++) a[i] = gt_sampler_next(&s, l);
  gt_sampler_reseed(&s, 9, 0);
  for (int i = 0; i < 64; i++) ck_assert_int_eq(gt_sampler_next(&s, l), a[i]);
  gt_sampler_reseed(&s, 9, 1);
  for (int i = 0; i < 64; i++) b[i] = gt_sampler_next(&s, l);
  gt_sampler_reseed(&s, 9, 1);
  for (int i = 0; i < 64; i++) c[i] = gt_sampler_next(&s, l);
  ck_assert_mem_eq(b, c, sizeof b);
  ck_assert(memcmp(a, b, sizeof a));
  ck_assert(memcmp(a + 1, b, sizeof a - sizeof a[0])); /* not stream 0 one draw on */
  gt_sampler_free(&s);
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
  tcase_add_test(tc, test_bos_eos_from_tokenizer);
  tcase_add_test(tc, test_masks_ids_the_tokenizer_lacks);
  tcase_add_test(tc, test_thought_channel_reply);
  tcase_add_test(tc, test_sampler_streams);
  tcase_add_test(tc, test_sample_switch);
  tcase_add_test(tc, test_sample_text_escaped);
  return s;
}

int main(void) { return gt_test_run_suite(decode_text_suite(), 0); }
