/* Chat templates (src/data/chat.h): Gemma 3's and Gemma 4's renderings
 * against the published Jinja templates, the tokens and loss mask of a chat
 * record (Gemma 3's unchanged; Gemma 4's markers as the tokenizer's added
 * tokens, the thought channel in or out of the loss, the empty thought
 * block per variant), and recognising a Hugging Face directory's template.
 *
 * The expected texts were rendered by Jinja2 3.1.6 as transformers'
 * apply_chat_template renders (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, bos_token "<bos>") from Google's published templates:
 * Gemma 3 from google/gemma-3-*-it's chat_template, Gemma 4 from the
 * revision of 2026-07-09 of google/gemma-4-E2B-it's and
 * google/gemma-4-31B-it's chat_template.jinja ("e2b" and "31b" below; they
 * differ only in the generation prompt's empty thought block). Those
 * templates are not in the repository; tests/data/chat_gemma*_min.jinja are
 * short templates written for these tests that render text conversations
 * the same way (checked with Jinja2 when they were written). */
#define _GNU_SOURCE
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config/config.h"
#include "data/chat.h"
#include "data/docs.h"
#include "decode/text.h"
#include "gt_testutil.h"
#include "tokenizer/tokenizer.h"

#define GEMMA3_JSON GT_SOURCE_DIR "/data/tokenizers/gemma3/tokenizer.json"
/* bytes are 4 + b, <pad> <eos> <bos> <unk> 0-3, then the markers as added
 * tokens: <|turn> 260, <turn|> 261, <|channel> 262, <channel|> 263,
 * <|think|> 264, <start_of_turn> 265, <end_of_turn> 266 */
#define MARKERS_JSON GT_TEST_DATA_DIR "/tokenizer_chat_markers.json"

static void cfg(gt_config *c, ...) {
  const char *ov[64];
  int n = 0;
  va_list ap;
  va_start(ap, c);
  for (const char *s; (s = va_arg(ap, const char *)) && n < 64;) ov[n++] = s;
  va_end(ap);
  gt_test_config(c, n, ov);
}

#define MSG(r, c) ((gt_chat_msg){r, c, NULL})
#define MSGT(r, c, t) ((gt_chat_msg){r, c, t})

static void expect_text(gt_chat_template t, const gt_config *c, const gt_chat_msg *m, int n, int gen, const char *want) {
  char *got = NULL;
  gt_err e;
  ck_assert_msg(gt_chat_render_text(t, c, m, n, gen, &got, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(got, want);
  free(got);
}

static void expect_refused(gt_chat_template t, const gt_config *c, const gt_chat_msg *m, int n, const char *want) {
  char *got = NULL;
  gt_err e;
  ck_assert_int_eq(gt_chat_render_text(t, c, m, n, 0, &got, &e), GT_ERR_FORMAT);
  ck_assert_ptr_null(got);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
}

/* the conversation of the Jinja renderings */
static const gt_chat_msg conv[] = {MSG("system", "  Be brief.\n"), MSG("user", " Hi there \n"),
                                   MSG("assistant", "Hello!\n\n"), MSG("user", "Bye"), MSG("model", " Bye. ")};

START_TEST(test_gemma3_matches_jinja) {
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", NULL);
  ck_assert_int_eq(gt_chat_template_for(&c), GT_CHAT_GEMMA3);
  ck_assert_str_eq(gt_chat_end_of_turn(GT_CHAT_GEMMA3), "<end_of_turn>");
  /* g3 system folded, two exchanges */
  expect_text(GT_CHAT_GEMMA3, &c, conv, 5, 0,
              "<bos><start_of_turn>user\n  Be brief.\n\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_"
              "turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nBye.<end_of_turn>\n");
  /* g3 generation prompt */
  gt_chat_msg q = MSG("user", "What is 2+2?");
  expect_text(GT_CHAT_GEMMA3, &c, &q, 1, 1, "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n");
  /* what the template refuses, and what it cannot say */
  gt_chat_msg bad[] = {MSG("user", "a"), MSG("user", "b")};
  expect_refused(GT_CHAT_GEMMA3, &c, bad, 2, "messages[1] is a user turn; Gemma's chat template needs the roles to alternate");
  gt_chat_msg late[] = {MSG("user", "a"), MSG("system", "b")};
  expect_refused(GT_CHAT_GEMMA3, &c, late, 2, "messages[1] is a system message; only the first message may be one");
  gt_chat_msg thought[] = {MSG("user", "a"), MSGT("assistant", "b", "why")};
  expect_refused(GT_CHAT_GEMMA3, &c, thought, 2, "messages[1] has thinking, but Gemma 3's chat template has no thought channel");
  gt_chat_msg dev[] = {MSG("developer", "a"), MSG("user", "b")};
  expect_refused(GT_CHAT_GEMMA3, &c, dev, 2, "messages[0] has role 'developer'");
  expect_refused(GT_CHAT_GEMMA3, &c, conv, 1, "holds only a system message");
}
END_TEST

START_TEST(test_gemma4_matches_jinja) {
  gt_config e2b, big;
  cfg(&e2b, "model_name=gemma4-tiny-ple", NULL); /* per-layer embeddings: E2B/E4B's template */
  cfg(&big, "model_name=gemma4-tiny-dense", NULL);
  ck_assert_int_eq(gt_chat_template_for(&e2b), GT_CHAT_GEMMA4);
  ck_assert_int_eq(gt_chat_template_for(&big), GT_CHAT_GEMMA4);
  ck_assert_str_eq(gt_chat_end_of_turn(GT_CHAT_GEMMA4), "<turn|>");
  /* g4 e2b conversation */
  expect_text(GT_CHAT_GEMMA4, &e2b, conv, 5, 0,
              "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\nHello!<turn|>\n"
              "<|turn>user\nBye<turn|>\n<|turn>model\nBye.<turn|>\n");
  /* g4 e2b thinking on, reasoning of the last turn only, thought blocks stripped from content */
  gt_chat_msg th[] = {MSG("user", "Hi"), MSGT("assistant", "Hello.", "dropped: before the last user turn"),
                      MSG("user", "2+2?"), MSGT("assistant", " <|channel>thought\nold<channel|>It is 4. ", "Two plus two.\nFour.")};
  e2b.enable_thinking = 1;
  expect_text(GT_CHAT_GEMMA4, &e2b, th, 4, 0,
              "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello.<turn|>\n<|turn>"
              "user\n2+2?<turn|>\n<|turn>model\n<|channel>thought\nTwo plus two.\nFour.\n<channel|>It is 4.<turn|>\n");
  /* g4 e2b thinking on, no system */
  gt_chat_msg hi = MSG("user", "Hi");
  expect_text(GT_CHAT_GEMMA4, &e2b, &hi, 1, 1, "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  e2b.enable_thinking = 0;
  /* g4 e2b generation prompt, developer */
  gt_chat_msg dev[] = {MSG("developer", "Answer in French."), MSG("user", "Hello")};
  expect_text(GT_CHAT_GEMMA4, &e2b, dev, 2, 1,
              "<bos><|turn>system\nAnswer in French.<turn|>\n<|turn>user\nHello<turn|>\n<|turn>model\n");
  /* g4 31b generation prompt, thinking off: the empty, closed thought block */
  gt_chat_msg q[] = {MSG("system", "Be brief."), MSG("user", "What is 2+2?")};
  expect_text(GT_CHAT_GEMMA4, &big, q + 1, 1, 1,
              "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  /* g4 31b generation prompt, thinking on */
  big.enable_thinking = 1;
  expect_text(GT_CHAT_GEMMA4, &big, q, 2, 1,
              "<bos><|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n");
  big.enable_thinking = 0;
  /* g4 31b reasoning, thinking off */
  gt_chat_msg r[] = {MSG("user", "What is 2+2?"), MSGT("assistant", "4", "Add them.")};
  expect_text(GT_CHAT_GEMMA4, &big, r, 2, 0,
              "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n<|channel>thought\nAdd them.\n<channel|>4<turn|>\n");
  /* a model turn without reasoning, trained: the 31b generation prompt
   * above, then the answer and <turn|> (the history rendering of Google's
   * template has no empty block: a training example opens the turn as the
   * prompt the model answers does) */
  r[1].thinking = NULL;
  expect_text(GT_CHAT_GEMMA4, &big, r, 2, 0,
              "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>4<turn|>\n");
  /* a conversation: the earlier model turn is history, rendered as the
   * template renders it (no block); the last one opens as the prompt */
  gt_chat_msg mt[] = {MSG("user", "What is 2+2?"), MSG("assistant", "4"), MSG("user", "And 3+3?"),
                      MSG("assistant", "6")};
  expect_text(GT_CHAT_GEMMA4, &big, mt, 4, 0,
              "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n<|turn>user\nAnd 3+3?<turn|>\n"
              "<|turn>model\n<|channel>thought\n<channel|>6<turn|>\n");
  /* E2B/E4B: no block, as their template's history and prompt */
  expect_text(GT_CHAT_GEMMA4, &e2b, r, 2, 0, "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n");
  gt_chat_msg bad[] = {MSGT("user", "a", "hmm")};
  expect_refused(GT_CHAT_GEMMA4, &e2b, bad, 1, "messages[0] is a user turn with thinking; only model turns think");
}
END_TEST

/* Which variant primes, from the model and from chat_template. */
START_TEST(test_priming_per_variant) {
  static const struct {
    const char *model, *tmpl;
    int g4, primes;
  } cases[] = {
      {"gemma3-tiny", "auto", 0, 0},          {"gemma4-tiny-dense", "auto", 1, 1},
      {"gemma4-tiny-moe", "auto", 1, 1},      {"gemma4-tiny-ple", "auto", 1, 0}, /* per-layer embeddings */
      {"gemma4-tiny-ple", "gemma4", 1, 1},    {"gemma4-tiny-dense", "gemma4_small", 1, 0},
      {"gemma4-tiny-dense", "gemma3", 0, 0},  {"gemma3-tiny", "gemma4", 1, 1},
      {"gemma4-e2b", "auto", 1, 0},           {"gemma4-e4b", "auto", 1, 0},
      {"gemma4-26b", "auto", 1, 1},           {"gemma4-31b", "auto", 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    gt_config c;
    char m[64], t[64];
    snprintf(m, sizeof m, "model_name=%s", cases[i].model);
    snprintf(t, sizeof t, "chat_template=%s", cases[i].tmpl);
    cfg(&c, m, t, NULL);
    ck_assert_msg((gt_chat_template_for(&c) == GT_CHAT_GEMMA4) == cases[i].g4, "%s %s", m, t);
    ck_assert_msg(gt_chat_primes_empty_thought(&c) == cases[i].primes, "%s %s", m, t);
  }
  /* decoder_block gemma4_small without per-layer embeddings: E2B/E4B's */
  gt_config c;
  cfg(&c, "model_name=gemma4-tiny-dense", "decoder_block=gemma4_small", NULL);
  ck_assert_int_eq(gt_chat_primes_empty_thought(&c), 0);
  /* per-layer embeddings under decoder_block gemma4: E2B/E4B's too */
  cfg(&c, "model_name=gemma4-tiny-ple", "decoder_block=gemma4", NULL);
  ck_assert_int_eq(gt_chat_primes_empty_thought(&c), 0);
}
END_TEST

/* A record through docs.c: ids with GT_TOK_NOLOSS on what is out of the loss. */
static gt_tokvec render_record(const gt_config *c, const gt_tokenizer *tok, const char *json) {
  gt_encoder enc;
  gt_encoder_init(&enc, tok, c->vocab_size);
  gt_doc_format f;
  gt_err e;
  ck_assert_msg(gt_doc_format_init(&f, c, &e) == GT_OK, "%s", e.msg);
  cJSON *rec = cJSON_Parse(json);
  ck_assert_ptr_nonnull(rec);
  gt_tokvec out;
  memset(&out, 0, sizeof out);
  ck_assert_msg(gt_doc_render(&enc, &f, rec, "rec.jsonl", 1, &out, &e) == GT_OK, "%s", e.msg);
  cJSON_Delete(rec);
  return out;
}

/* The text of the tokens in the loss (or out of it), decoded. */
static char *loss_text(const gt_tokenizer *tok, const gt_tokvec *v, int in_loss) {
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
  int64_t n = 0;
  for (int64_t i = 0; i < v->n; i++)
    if ((!(v->v[i] & GT_TOK_NOLOSS)) == in_loss) ids[n++] = (int32_t)(v->v[i] & ~GT_TOK_NOLOSS);
  char *out = NULL;
  size_t len = 0;
  gt_err e;
  ck_assert_msg(gt_tokenizer_decode(tok, ids, n, 0, &out, &len, &e) == GT_OK, "%s", e.msg);
  free(ids);
  return out;
}

/* Gemma 3 through the real tokenizer: the ids and loss mask of this record
 * (recorded from `gemtrain data` at commit 32dc922, where each template
 * piece was encoded on its own, then with the system message's "\n" and
 * the template's "\n\n" as the one "\n\n\n" token 109 where that gave
 * 107, 108), and the ids equal to the whole rendered text's encoding, as
 * Hugging Face tokenizes apply_chat_template's text. */
START_TEST(test_gemma3_tokens_unchanged) {
  gt_tokenizer *tok = NULL;
  gt_err e;
  if (gt_tokenizer_load(GEMMA3_JSON, &tok, &e) != GT_OK)
    ck_abort_msg("missing %s: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)", GEMMA3_JSON);
  static const int32_t want[] = {
      2,     105,   2364,   107,   138,    3912,   8652,   236761, 109,    10979, 993,   236764, 1217,  659,
      611,   236881, 106,   107,    105,    4368,   107,    9259,   236888, 564,    1006,  5851,  236761, 106,   107,
      105,   2364,   107,   54593,  786,    496,    1707,   1003,   9079,   236761, 106,   107,   105,    4368,  107,
      818,   94648,  18515, 563,    236743, 236800, 236800, 236771, 520,    13030,  236761, 106,  107,    1};
  const char *rec = "{\"messages\": [{\"role\": \"system\", \"content\": \"  Be brief.\\n\"}, {\"role\": \"user\", "
                    "\"content\": \" Hi there, how are you?\\n\"}, {\"role\": \"assistant\", \"content\": \"Hello! I am "
                    "fine.\\n\\n\"}, {\"role\": \"user\", \"content\": \"Tell me a fact about Paris.\"}, {\"role\": "
                    "\"model\", \"content\": \" The Eiffel tower is 330 m tall. \"}]}";
  for (int co = 0; co < 2; co++) {
    gt_config c;
    cfg(&c, "model_name=gemma3-tiny", "vocab_size=262144", "use_sft=true", "train_data_columns=messages",
        co ? "sft_train_on_completion_only=true" : "sft_train_on_completion_only=false", NULL);
    gt_tokvec v = render_record(&c, tok, rec);
    ck_assert_int_eq(v.n, (int64_t)(sizeof want / sizeof *want));
    for (int64_t i = 0; i < v.n; i++) {
      int in_loss = (i >= 21 && i < 28) || (i >= 44 && i < 56); /* the model turns and their <end_of_turn> */
      ck_assert_int_eq((int32_t)(v.v[i] & ~GT_TOK_NOLOSS), want[i]);
      ck_assert_msg(!(v.v[i] & GT_TOK_NOLOSS) == (!co || in_loss), "token %lld", (long long)i);
    }
    if (co) { /* the whole text, encoded at once: the same ids but the <eos> that closes the document */
      cJSON *j = cJSON_Parse(rec);
      gt_chat_msg *m;
      int nm;
      ck_assert(gt_doc_messages(cJSON_GetObjectItemCaseSensitive(j, "messages"), "rec", 1, "messages", &m, &nm, &e) ==
                GT_OK);
      char *text;
      ck_assert_msg(gt_chat_render_text(GT_CHAT_GEMMA3, &c, m, nm, 0, &text, &e) == GT_OK, "%s", e.msg);
      int32_t *ids;
      int64_t n_ids;
      ck_assert_msg(gt_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n_ids, &e) == GT_OK, "%s", e.msg);
      ck_assert_int_eq(n_ids, v.n - 1);
      for (int64_t i = 0; i < n_ids; i++) ck_assert_int_eq(ids[i], (int32_t)(v.v[i] & ~GT_TOK_NOLOSS));
      free(ids), free(text), free(m);
      cJSON_Delete(j);
    }
    gt_tokvec_free(&v);
  }
  gt_tokenizer_free(tok);
}
END_TEST

/* Gemma 4's markers are the tokenizer's added tokens; the thought channel
 * is in the loss or out of it; the empty block opens a turn on the larger
 * models only, out of the loss. */
START_TEST(test_gemma4_tokens_and_thought_channel) {
  gt_tokenizer *tok = NULL;
  gt_err e;
  ck_assert_msg(gt_tokenizer_load(MARKERS_JSON, &tok, &e) == GT_OK, "%s", e.msg);
  const char *rec = "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", "
                    "\"content\": \"4\", \"reasoning_content\": \"Add.\"}]}";
  for (int train = 0; train < 2; train++) {
    gt_config c;
    cfg(&c, "model_name=gemma4-tiny-dense", "vocab_size=300", "use_sft=true", "train_data_columns=messages",
        train ? "sft_train_on_thinking=true" : "sft_train_on_thinking=false", NULL);
    gt_tokvec v = render_record(&c, tok, rec);
    /* <bos> <|turn> "user\n2+2?" <turn|> "\n" <|turn> "model\n" <|channel> "thought\nAdd.\n" <channel|> "4" <turn|> "\n" <eos> */
    static const int32_t want[] = {2,   260, 121, 119, 105, 118, 14,  54,  47,  54,  67,  261, 14,
                                   260, 113, 115, 104, 105, 112, 14,  262, 120, 108, 115, 121, 107,
                                   108, 120, 14,  69,  104, 104, 50,  14,  263, 56,  261, 14,  1};
    ck_assert_int_eq(v.n, (int64_t)(sizeof want / sizeof *want));
    for (int64_t i = 0; i < v.n; i++) ck_assert_int_eq((int32_t)(v.v[i] & ~GT_TOK_NOLOSS), want[i]);
    char *in = loss_text(tok, &v, 1);
    ck_assert_str_eq(in, train ? "<|channel>thought\nAdd.\n<channel|>4<turn|>" : "4<turn|>");
    free(in);
    gt_tokvec_free(&v);
  }
  /* no reasoning: the larger model's turn opens with the empty block, out of the loss */
  const char *plain = "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}";
  static const char *const models[] = {"model_name=gemma4-tiny-dense", "model_name=gemma4-tiny-ple"};
  for (int k = 0; k < 2; k++) {
    gt_config c;
    cfg(&c, models[k], "vocab_size=300", "vocab_size_per_layer_input=300", "use_sft=true", "train_data_columns=messages", NULL);
    gt_tokvec v = render_record(&c, tok, plain);
    char *in = loss_text(tok, &v, 1), *out = loss_text(tok, &v, 0);
    ck_assert_str_eq(in, "4<turn|>");
    ck_assert_str_eq(out, k == 0 ? "<bos><|turn>user\n2+2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>\n<eos>"
                                 : "<bos><|turn>user\n2+2?<turn|>\n<|turn>model\n\n<eos>");
    free(in), free(out);
    gt_tokvec_free(&v);
  }
  /* enable_thinking names Gemma 4's mode: refused for Gemma 3's template */
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", "use_sft=true", "train_data_columns=messages", "enable_thinking=true", NULL);
  gt_doc_format f;
  ck_assert_int_eq(gt_doc_format_init(&f, &c, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "'enable_thinking' = true, but the chat template is Gemma 3's"), "%s", e.msg);
  gt_tokenizer_free(tok);
}
END_TEST

static char *read_fixture(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", GT_TEST_DATA_DIR, name);
  char *s = gt_test_read_file(path, NULL);
  ck_assert_ptr_nonnull(s);
  return s;
}

/* s with the first `from` replaced by `to` (heap). */
static char *replace(const char *s, const char *from, const char *to) {
  const char *p = strstr(s, from);
  ck_assert_msg(p != NULL, "no '%s' in the fixture", from);
  char *out = NULL;
  ck_assert(asprintf(&out, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from)) > 0);
  return out;
}

static void expect_recognised(const char *text, const char *want) {
  char v[32] = "";
  gt_err e;
  ck_assert_msg(gt_chat_template_recognise(text, "the template", v, sizeof v, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(v, want);
}

static void expect_unrecognised(const char *text, const char *want) {
  char v[32] = "unset";
  gt_err e;
  ck_assert_int_eq(gt_chat_template_recognise(text, "the template", v, sizeof v, &e), GT_ERR_CONFIG);
  ck_assert_str_eq(v, "unset");
  ck_assert_msg(strstr(e.msg, want) && strstr(e.msg, "the template"), "'%s' lacks '%s'", e.msg, want);
}

/* decode's messages_path takes a turn's reasoning under the keys training
 * reads (data/docs.c), in the same order, and names the key it refuses */
START_TEST(test_decode_reads_training_keys) {
  const char *keys[] = {"reasoning", "reasoning_content", "thinking"};
  for (int i = 0; i < 3; i++) {
    char js[256];
    snprintf(js, sizeof js,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", "
             "\"content\": \"4\", \"%s\": \"Add.\"}, {\"role\": \"user\", \"content\": \"3+3?\"}]}",
             keys[i]);
    gt_decode_chat c = {0};
    gt_err e;
    ck_assert_msg(gt_decode_chat_parse(js, "q.jsonl line 1", &c, &e) == GT_OK, "%s: %s", keys[i], e.msg);
    ck_assert_int_eq(c.n, 3);
    ck_assert_str_eq(c.turns[1].thinking, "Add.");
    gt_decode_chat_free(&c);
    snprintf(js, sizeof js,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\", \"%s\": 5}]}", keys[i]);
    ck_assert_int_eq(gt_decode_chat_parse(js, "q.jsonl line 2", &c, &e), GT_ERR_FORMAT);
    char want[64];
    snprintf(want, sizeof want, "messages[0].%s is not a string", keys[i]);
    ck_assert_msg(strstr(e.msg, want) && strstr(e.msg, "q.jsonl line 2"), "%s", e.msg);
    gt_decode_chat_free(&c);
  }
  /* the first of them wins, as in training */
  gt_decode_chat c = {0};
  gt_err e;
  ck_assert(gt_decode_chat_parse("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
                                 "\"assistant\", \"content\": \"b\", \"thinking\": \"t\", \"reasoning\": \"r\"}]}",
                                 "q", &c, &e) == GT_OK);
  ck_assert_str_eq(c.turns[1].thinking, "r");
  gt_decode_chat_free(&c);
}
END_TEST

/* decode's content given as a list of parts, as Google's templates render
 * it: each text part trimmed (a Gemma 4 model turn's through strip_thinking),
 * the parts joined with nothing between them; the texts below were rendered
 * by Jinja2 3.1.6 from the content loops of Google's Gemma 3 template and of
 * Gemma 4's (the `item['text'] | trim` / `strip_thinking(item['text'])`
 * branches). A part of another type, a system message's parts Gemma 4 would
 * print as a list, or that Gemma 3 would drop, are refused. */
static void expect_decode_render(const gt_config *c, const char *json, const char *want) {
  gt_decode_chat d = {0};
  gt_err e;
  char *got = NULL;
  const char *eot;
  ck_assert_msg(gt_decode_chat_parse(json, "p.jsonl line 1", &d, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_decode_chat_render(c, &d, &got, &eot, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(got, want);
  free(got);
  gt_decode_chat_free(&d);
}

static void expect_decode_refused(const gt_config *c, const char *json, const char *want) {
  gt_decode_chat d = {0};
  gt_err e;
  char *got = NULL;
  const char *eot;
  gt_rc rc = gt_decode_chat_parse(json, "p.jsonl line 1", &d, &e);
  if (!rc) rc = gt_decode_chat_render(c, &d, &got, &eot, &e);
  ck_assert_int_eq(rc, GT_ERR_FORMAT);
  ck_assert_ptr_null(got);
  ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
  gt_decode_chat_free(&d);
}

#define TP(t) "{\"type\": \"text\", \"text\": \"" t "\"}"

START_TEST(test_decode_content_parts) {
  gt_config g3, g4;
  cfg(&g3, "model_name=gemma3-tiny", NULL);
  cfg(&g4, "model_name=gemma3-tiny", "chat_template=gemma4_small", NULL);
  expect_decode_render(&g3,
                       "{\"messages\": [{\"role\": \"system\", \"content\": [" TP("  Be brief.  ") "]}, "
                       "{\"role\": \"user\", \"content\": [" TP("Hello ") ", " TP("world") "]}, "
                       "{\"role\": \"assistant\", \"content\": [" TP(" Hi ") ", " TP(" there\\n") "]}, "
                       "{\"role\": \"user\", \"content\": [" TP(" a ") ", " TP("\\tb ") "]}]}",
                       "<bos><start_of_turn>user\n  Be brief.  \n\nHelloworld<end_of_turn>\n<start_of_turn>model\n"
                       "Hithere<end_of_turn>\n<start_of_turn>user\nab<end_of_turn>\n<start_of_turn>model\n");
  expect_decode_render(&g4,
                       "{\"messages\": [{\"role\": \"user\", \"content\": [" TP("Hello ") ", " TP("world") "]}, "
                       "{\"role\": \"assistant\", \"content\": [" TP(" Hi <|channel>x<channel|> ") ", "
                       TP(" there ") "]}, {\"role\": \"user\", \"content\": [" TP(" a ") ", " TP("\\tb ") "]}]}",
                       "<bos><|turn>user\nHelloworld<turn|>\n<|turn>model\nHithere<turn|>\n<|turn>user\nab<turn|>\n"
                       "<|turn>model\n");
  /* an image or audio part: refused naming the message, the part and its type */
  expect_decode_refused(&g3,
                        "{\"messages\": [{\"role\": \"user\", \"content\": [" TP("Look:") ", {\"type\": \"image\", "
                        "\"url\": \"x.png\"}]}]}",
                        "p.jsonl line 1: messages[0].content[1] is a part of type 'image'; decoding takes text parts "
                        "only");
  expect_decode_refused(&g4, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"audio\"}]}]}",
                        "messages[0].content[0] is a part of type 'audio'");
  expect_decode_refused(&g3, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]}",
                        "messages[0].content[0] has no \"type\" string");
  /* a system message's parts */
  expect_decode_refused(&g3,
                        "{\"messages\": [{\"role\": \"system\", \"content\": [" TP("a") ", " TP("b") "]}, "
                        "{\"role\": \"user\", \"content\": \"hi\"}]}",
                        "messages[0] is a system message with 2 content parts; Gemma 3's chat template takes the "
                        "first part's text alone");
  expect_decode_refused(&g4,
                        "{\"messages\": [{\"role\": \"system\", \"content\": [" TP("a") "]}, "
                        "{\"role\": \"user\", \"content\": \"hi\"}]}",
                        "messages[0] is a system message with content as a list of parts; Gemma 4's chat template "
                        "writes a system message's content as a string");
}
END_TEST

/* A Gemma 4 reply cut at its thought channel: the answer is what Google's
 * strip_thinking leaves, the thought what it drops (without the channel's
 * name), NULL without a <|channel>; an unclosed channel is all thought. */
static void expect_split(const char *s, size_t n, const char *answer, const char *thought) {
  char *a, *t;
  size_t an, tn;
  gt_err e;
  ck_assert_msg(gt_chat_split_thinking(s, n, &a, &an, &t, &tn, &e) == GT_OK, "%s", e.msg);
  ck_assert_uint_eq(an, strlen(answer));
  ck_assert_mem_eq(a, answer, an);
  if (!thought) {
    ck_assert_ptr_null(t);
  } else {
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(tn, strlen(thought));
    ck_assert_mem_eq(t, thought, tn);
  }
  free(a), free(t);
}

#define SPLIT(lit, answer, thought) expect_split(lit, sizeof lit - 1, answer, thought)

START_TEST(test_split_thinking) {
  SPLIT("<|channel>thought\nAdd two and two.\n<channel|>It is 4.", "It is 4.", "Add two and two.");
  SPLIT(" plain reply ", "plain reply", NULL);
  SPLIT("<|channel>thought\nstill thinking", "", "still thinking");
  SPLIT("A <|channel>thought\nx<channel|> B<|channel>y\n<channel|>C", "A  BC", "x\ny");
  SPLIT("<|channel>thought\n<channel|>Hi", "Hi", ""); /* an empty, closed channel */
  SPLIT("ends<channel|> here", "ends here", NULL);     /* a close alone: no thought */
  char *a, *t;
  size_t an, tn;
  gt_err e;
  const char nul[] = "a\0b<|channel>t\0u<channel|>c"; /* NUL bytes are text */
  ck_assert(gt_chat_split_thinking(nul, sizeof nul - 1, &a, &an, &t, &tn, &e) == GT_OK);
  ck_assert_uint_eq(an, 4);
  ck_assert_mem_eq(a, "a\0bc", 4);
  ck_assert_uint_eq(tn, 3);
  ck_assert_mem_eq(t, "t\0u", 3);
  free(a), free(t);
}
END_TEST

/* enable_thinking on a template without a thinking mode is refused, as
 * training refuses it; Gemma 4's takes it */
START_TEST(test_decode_thinking_needs_gemma4) {
  gt_config g3, g4;
  cfg(&g3, "model_name=gemma3-tiny", "enable_thinking=true", NULL);
  cfg(&g4, "model_name=gemma3-tiny", "chat_template=gemma4", "enable_thinking=true", NULL);
  gt_err e;
  ck_assert_int_eq(gt_decode_chat_check(&g3, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "key 'enable_thinking' = true, but the chat template is Gemma 3's, which has no thinking "
                              "mode (chat_template = auto, decoder_block = gemma3)"),
                "%s", e.msg);
  gt_decode_chat d = {0};
  ck_assert(gt_decode_chat_add(&d, "user", "hi", &e) == GT_OK);
  char *text = NULL;
  const char *eot;
  ck_assert_int_eq(gt_decode_chat_render(&g3, &d, &text, &eot, &e), GT_ERR_CONFIG);
  ck_assert_ptr_null(text);
  ck_assert_msg(gt_decode_chat_check(&g4, &e) == GT_OK, "%s", e.msg);
  ck_assert_msg(gt_decode_chat_render(&g4, &d, &text, &eot, &e) == GT_OK, "%s", e.msg);
  ck_assert_str_eq(text, "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
  free(text);
  gt_decode_chat_free(&d);
}
END_TEST

START_TEST(test_recognise_templates) {
  char *g4 = read_fixture("chat_gemma4_min.jinja"), *g3 = read_fixture("chat_gemma3_min.jinja");
  expect_recognised(g3, "gemma3");
  expect_recognised(g4, "gemma4");
  /* without the priming: E2B/E4B's */
  char *small = replace(g4, "{%- if not enable_thinking -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}", "");
  expect_recognised(small, "gemma4_small");
  /* the priming as other revisions spell it */
  char *dflt = replace(g4, "{%- if not enable_thinking -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}",
                       "{%- if not enable_thinking | default(false) -%}\n    {{- '<|channel>thought\\n<channel|>' -}}\n"
                       "{%- endif -%}");
  expect_recognised(dflt, "gemma4");
  char *paren = replace(g4, "{%- if not enable_thinking -%}", "{%- if not (enable_thinking | default(false)) -%}");
  expect_recognised(paren, "gemma4");
  /* under another condition: refused, not guessed */
  char *cond = replace(g4, "{%- if not enable_thinking -%}", "{%- if not thinking_on -%}");
  expect_unrecognised(cond, "under a condition other than Google's \"if not enable_thinking\"");
  free(dflt), free(paren), free(cond);
  /* whitespace, whitespace control and quotes do not matter */
  char *spaced = replace(g4, "{{- '<|turn>' + role + '\\n' -}}", "{{   \"<|turn>\"+role   +  \"\\n\" }}");
  expect_recognised(spaced, "gemma4");
  /* what a tag prints does */
  char *other = replace(g4, "{{- '<|turn>' + role + '\\n' -}}", "{{- '<|turn>' + role + ': ' -}}");
  expect_unrecognised(other, "is not Google's Gemma 4 chat template: it lacks \"{{'<|turn>'+role+'\\n'}}\" (Google's opens each turn)");
  char *marker = replace(g4, "{{- '<turn|>\\n' -}}\n{%- endfor", "{{- '<turn|>\\n' -}}{{- '<|image|><eos>' -}}\n{%- endfor");
  expect_unrecognised(marker, "it prints '<|image|><eos>', which Google's does not");
  char *trim3 = replace(g3, "{{- message['content'] | trim }}", "{{- message['content'] }}");
  expect_unrecognised(trim3, "is not Google's Gemma 3 chat template: it lacks \"{{message['content']|trim}}\"");
  /* the early Gemma 4 revisions, named by what they render differently */
  char *r1 = replace(g4, "{{- '<|think|>\\n' -}}", "{{- '<|think|>' -}}");
  expect_unrecognised(r1, "early revision of Google's Gemma 4 chat template: it writes <|think|> without the newline");
  char *r2 = replace(g4, "{%- set thinking_gate = (loop.index0 > ns_turn.last_user_idx) -%}\n{%- if thinking_text and thinking_gate -%}",
                     "{%- if thinking_text and loop.index0 > ns_turn.last_user_idx and message.get('tool_calls') -%}");
  expect_unrecognised(r2, "writes a model turn's reasoning only beside tool calls");
  /* a string literal left open at the very end gains its closing quote:
   * one byte more than the text (the address sanitizer's build reads it) */
  expect_unrecognised("{{'x", "is neither Google's Gemma 3 chat template");
  expect_unrecognised("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
                      "is neither Google's Gemma 3 chat template (<start_of_turn> turns) nor Gemma 4's");
  /* a directory: chat_template.jinja before tokenizer_config.json's */
  char *dir = gt_test_mkdtemp("chatdir"), *jinja = gt_test_path(dir, "chat_template.jinja"),
       *tc = gt_test_path(dir, "tokenizer_config.json");
  char v[32] = "auto";
  int found = 1;
  gt_err e;
  ck_assert_msg(gt_chat_template_of_dir(dir, v, sizeof v, &found, &e) == GT_OK, "%s", e.msg);
  ck_assert(!found && !strcmp(v, "auto"));
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "chat_template", g3);
  char *js = cJSON_Print(o);
  gt_test_write_text(tc, js);
  ck_assert_msg(gt_chat_template_of_dir(dir, v, sizeof v, &found, &e) == GT_OK, "%s", e.msg);
  ck_assert(found && !strcmp(v, "gemma3"));
  gt_test_write_text(jinja, small);
  ck_assert_msg(gt_chat_template_of_dir(dir, v, sizeof v, &found, &e) == GT_OK, "%s", e.msg);
  ck_assert(found && !strcmp(v, "gemma4_small"));
  gt_test_write_text(jinja, r1);
  ck_assert_int_eq(gt_chat_template_of_dir(dir, v, sizeof v, &found, &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, jinja) && strstr(e.msg, "early revision"), "%s", e.msg);
  gt_test_rm_rf(dir);
  cJSON_Delete(o);
  free(js), free(dir), free(jinja), free(tc);
  free(g4), free(g3), free(small), free(spaced), free(other), free(marker), free(trim3), free(r1), free(r2);
}
END_TEST

/* Jinja's trim is Python's str.strip(): Unicode's spaces go too, a
 * zero-width space (no space to Python) stays */
START_TEST(test_trim_is_python_strip) {
  gt_config c;
  cfg(&c, "model_name=gemma3-tiny", NULL);
  gt_chat_msg m[] = {MSG("user", "\xe3\x80\x80Hi\xc2\xa0\x1f"), MSG("assistant", "\xe2\x80\xa8Yo\xe2\x80\x8b\xe2\x80\x89")};
  expect_text(GT_CHAT_GEMMA3, &c, m, 2, 0,
              "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo\xe2\x80\x8b<end_of_turn>\n");
  /* only spaces: nothing left; a lone continuation byte is no space */
  gt_chat_msg e[] = {MSG("user", "\xe3\x80\x80 \xc2\x85"), MSG("assistant", "\x80" "a")};
  expect_text(GT_CHAT_GEMMA3, &c, e, 2, 0,
              "<bos><start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n\x80" "a<end_of_turn>\n");
}
END_TEST

/* The reasoning field as Gemma 4's template picks it (reasoning or
 * reasoning_content: the first not empty), and tool calls refused */
START_TEST(test_messages_fields) {
  gt_chat_msg *cm = NULL;
  int n = 0;
  gt_err e;
  cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                            "\"4\", \"reasoning\": \"\", \"reasoning_content\": \"R\"}]");
  ck_assert_msg(gt_doc_messages(msgs, "f.jsonl", 3, "messages", &cm, &n, &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(n, 2);
  ck_assert_ptr_null(cm[0].thinking);
  ck_assert_str_eq(cm[1].thinking, "R");
  free(cm);
  cJSON_Delete(msgs);
  static const char *const calls[] = {
      "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
      "[{\"type\": \"function\"}]}]",
      "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"function_call\": "
      "{\"name\": \"f\"}}]"};
  for (int i = 0; i < 2; i++) {
    msgs = cJSON_Parse(calls[i]);
    ck_assert_int_eq(gt_doc_messages(msgs, "f.jsonl", 3, "messages", &cm, &n, &e), GT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "'f.jsonl' line 3: messages[1] has '") && strstr(e.msg, "not tool calls"), "%s", e.msg);
    cJSON_Delete(msgs);
  }
  /* empty tool_calls, as some exports write on every message: a text turn */
  msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"q\", \"tool_calls\": []}]");
  ck_assert_msg(gt_doc_messages(msgs, "f.jsonl", 3, "messages", &cm, &n, &e) == GT_OK, "%s", e.msg);
  free(cm);
  cJSON_Delete(msgs);
}
END_TEST

/* A template's turn markers must be tokens of the tokenizer: Gemma 3's
 * real tokenizer has Gemma 3's and not Gemma 4's; byte tokens have none
 * and need none */
START_TEST(test_markers_are_tokens) {
  gt_tokenizer *g3 = NULL, *mk = NULL;
  gt_err e;
  if (gt_tokenizer_load(GEMMA3_JSON, &g3, &e) != GT_OK)
    ck_abort_msg("missing %s: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)", GEMMA3_JSON);
  ck_assert_msg(gt_tokenizer_load(MARKERS_JSON, &mk, &e) == GT_OK, "%s", e.msg);
  gt_encoder enc;
  gt_encoder_init(&enc, g3, 262144);
  ck_assert_msg(gt_encoder_check_chat(&enc, GT_CHAT_GEMMA3, "g3.json", &e) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(gt_encoder_check_chat(&enc, GT_CHAT_GEMMA4, "g3.json", &e), GT_ERR_CONFIG);
  ck_assert_msg(strstr(e.msg, "Gemma 4's chat template marks turns with '<|turn>', which is not a token of the tokenizer "
                              "(tokenizer_path = 'g3.json')"),
                "%s", e.msg);
  gt_encoder_init(&enc, mk, 300);
  ck_assert(gt_encoder_check_chat(&enc, GT_CHAT_GEMMA3, "m.json", &e) == GT_OK);
  ck_assert(gt_encoder_check_chat(&enc, GT_CHAT_GEMMA4, "m.json", &e) == GT_OK);
  gt_encoder_init(&enc, NULL, 300);
  ck_assert(gt_encoder_check_chat(&enc, GT_CHAT_GEMMA4, "", &e) == GT_OK);
  gt_tokenizer_free(g3);
  gt_tokenizer_free(mk);
}
END_TEST

static Suite *chat_suite(void) {
  Suite *s = suite_create("chat");
  TCase *t = gt_test_tcase(s, "chat");
  tcase_add_test(t, test_gemma3_matches_jinja);
  tcase_add_test(t, test_gemma4_matches_jinja);
  tcase_add_test(t, test_priming_per_variant);
  tcase_add_test(t, test_gemma3_tokens_unchanged);
  tcase_add_test(t, test_gemma4_tokens_and_thought_channel);
  tcase_add_test(t, test_recognise_templates);
  tcase_add_test(t, test_decode_reads_training_keys);
  tcase_add_test(t, test_decode_content_parts);
  tcase_add_test(t, test_split_thinking);
  tcase_add_test(t, test_decode_thinking_needs_gemma4);
  tcase_add_test(t, test_trim_is_python_strip);
  tcase_add_test(t, test_messages_fields);
  tcase_add_test(t, test_markers_are_tokens);
  return s;
}

int main(void) { return gt_test_run_suite(chat_suite(), 0); }
