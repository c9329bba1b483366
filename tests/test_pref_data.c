/* Preference pairs (use_dpo) as the data source lays them out: rows 2i
 * (chosen) and 2i + 1 (rejected) with a pair under one segment id in both,
 * checked id by id against layouts written out by hand (byte tokens: id =
 * 4 + byte, <bos> 2, <eos> 1) for the plain form with and without packing
 * (and a row filled to T + 1 tokens); the chat and conversational forms on
 * the Gemma 3 and Gemma 4 templates against the templates' text written
 * out here; gt_pref_pairs; every refusal's message; truncate vs refuse; a
 * process's rows; shuffling that keeps pairs whole and repeats; resume;
 * held-out pairs. */
#define _GNU_SOURCE
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "data/data.h"
#include "data/data_internal.h"
#include "gt_testutil.h"
#include "model/pref_pairs.h"

enum { MAXOV = 24 };

/* Writes text to a fresh pairs.jsonl and opens it with use_dpo, byte
 * tokens, T, per_device_batch_size pdb, file order, no eval, and the
 * NULL-terminated overrides after pdb (which win). Returns the rc; the
 * message in err. */
static gt_rc open_pairs(gt_data *d, gt_mem *mem, gt_err *err, const char *text, int T, int pdb, ...) {
  char *dir = gt_test_mkdtemp("pref_data"), *path = gt_test_path(dir, "pairs.jsonl");
  gt_test_write_text(path, text);
  char ov[MAXOV][300];
  int n = 0;
  snprintf(ov[n++], 300, "dataset_type=jsonl");
  snprintf(ov[n++], 300, "dataset_path=%s", path);
  snprintf(ov[n++], 300, "use_dpo=true");
  snprintf(ov[n++], 300, "max_target_length=%d", T);
  snprintf(ov[n++], 300, "per_device_batch_size=%d", pdb);
  snprintf(ov[n++], 300, "enable_data_shuffling=false");
  snprintf(ov[n++], 300, "eval_split_fraction=0");
  snprintf(ov[n++], 300, "eval_interval=-1");
  va_list ap;
  va_start(ap, pdb);
  for (const char *s; (s = va_arg(ap, const char *)) && n < MAXOV;) snprintf(ov[n++], 300, "%s", s);
  va_end(ap);
  const char *p[MAXOV];
  for (int i = 0; i < n; i++) p[i] = ov[i];
  gt_config c;
  gt_test_config(&c, n, p);
  gt_mem_init(mem);
  gt_rc rc = gt_data_open(d, &c, mem, err);
  free(path);
  free(dir);
  return rc;
}

static gt_batch read_train(gt_data *d) {
  gt_batch b;
  gt_err e;
  ck_assert_msg(gt_data_read_train(d, &b, &e) == GT_OK, "%s", e.msg);
  return b;
}

static void expect_row(const gt_batch *b, int r, int n, const int32_t *in, const int32_t *tg, const int32_t *pos,
                       const int32_t *seg) {
  for (int t = 0; t < b->T; t++) {
    int64_t i = (int64_t)r * b->T + t;
    int32_t ei = t < n ? in[t] : 0, et = t < n ? tg[t] : -1, ep = t < n ? pos[t] : 0, es = t < n ? seg[t] : 0;
    ck_assert_msg(b->inputs[i] == ei && b->targets[i] == et && b->positions[i] == ep && b->segments[i] == es,
                  "row %d column %d: (input %d target %d position %d segment %d), expected (%d %d %d %d)", r, t,
                  b->inputs[i], b->targets[i], b->positions[i], b->segments[i], ei, et, ep, es);
  }
}

#define B_(ch) (4 + (ch))

START_TEST(test_plain_layout) {
  const char *text = "{\"prompt\": \"ab\", \"chosen\": \"c\", \"rejected\": \"de\"}\n"
                     "{\"prompt\": \"x\", \"chosen\": \"yy\", \"rejected\": \"z\"}\n";
  gt_data d;
  gt_mem mem;
  gt_err e;
  /* packing=false: one pair per row pair, both segment 1 */
  ck_assert_msg(open_pairs(&d, &mem, &e, text, 12, 2, "packing=false", NULL) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(d.n_train_rows, 4);
  gt_batch b = read_train(&d);
  const int32_t in0[] = {2, B_('a'), B_('b'), B_('c'), 1}, tg0[] = {-1, -1, B_('c'), 1, -1},
                in1[] = {2, B_('a'), B_('b'), B_('d'), B_('e'), 1}, tg1[] = {-1, -1, B_('d'), B_('e'), 1, -1},
                pos[] = {0, 1, 2, 3, 4, 5}, one[] = {1, 1, 1, 1, 1, 1};
  expect_row(&b, 0, 5, in0, tg0, pos, one);
  expect_row(&b, 1, 6, in1, tg1, pos, one);
  ck_assert_int_eq(d.st.cursor, 2);
  b = read_train(&d);
  const int32_t in2[] = {2, B_('x'), B_('y'), B_('y'), 1}, tg2[] = {-1, B_('y'), B_('y'), 1, -1},
                in3[] = {2, B_('x'), B_('z'), 1}, tg3[] = {-1, B_('z'), 1, -1};
  expect_row(&b, 0, 5, in2, tg2, pos, one);
  expect_row(&b, 1, 4, in3, tg3, pos, one);
  gt_data_close(&d);

  /* packing=true, T + 1 = 10: both pairs share the row pair, which each
   * side fills exactly (the last <eos> only a target) */
  ck_assert_msg(open_pairs(&d, &mem, &e, text, 9, 2, "packing=true", NULL) == GT_OK, "%s", e.msg);
  ck_assert_int_eq(d.n_train_rows, 2);
  b = read_train(&d);
  const int32_t pin0[] = {2, B_('a'), B_('b'), B_('c'), 1, 2, B_('x'), B_('y'), B_('y')},
                ptg0[] = {-1, -1, B_('c'), 1, -1, -1, B_('y'), B_('y'), 1},
                ppos0[] = {0, 1, 2, 3, 4, 0, 1, 2, 3}, pseg0[] = {1, 1, 1, 1, 1, 2, 2, 2, 2},
                pin1[] = {2, B_('a'), B_('b'), B_('d'), B_('e'), 1, 2, B_('x'), B_('z')},
                ptg1[] = {-1, -1, B_('d'), B_('e'), 1, -1, -1, B_('z'), 1},
                ppos1[] = {0, 1, 2, 3, 4, 5, 0, 1, 2}, pseg1[] = {1, 1, 1, 1, 1, 1, 2, 2, 2};
  expect_row(&b, 0, 9, pin0, ptg0, ppos0, pseg0);
  expect_row(&b, 1, 9, pin1, ptg1, ppos1, pseg1);
  gt_pref_pair pp[8];
  ck_assert_int_eq(gt_pref_pairs(&b, 0, 2, pp, 8), 2);
  const gt_pref_pair want[2] = {{0, 1, 0, 5, 0, 6}, {0, 2, 5, 9, 6, 9}};
  for (int i = 0; i < 2; i++)
    ck_assert_msg(!memcmp(&pp[i], &want[i], sizeof want[i]), "pair %d: row %d seg %d chosen [%d,%d) rejected [%d,%d)",
                  i, pp[i].row, pp[i].seg, pp[i].c0, pp[i].c1, pp[i].r0, pp[i].r1);
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "2 training pairs in 1 row pair (2.00 pairs per row pair)"));
  gt_data_close(&d);
}
END_TEST

START_TEST(test_pref_pairs_refuses_unpaired_rows) {
  /* rows 2 and 3 hold different segment ids: not a preference layout */
  int32_t z[4 * 4] = {0}, seg[4 * 4] = {1, 1, 2, 2, 1, 1, 2, 0, 1, 1, 1, 1, 1, 2, 2, 0};
  gt_batch b = {4, 4, z, z, z, seg};
  gt_pref_pair pp[8];
  ck_assert_int_eq(gt_pref_pairs(&b, 0, 2, pp, 8), 2);
  ck_assert_int_eq(gt_pref_pairs(&b, 0, 4, pp, 8), -1 - 2);
  ck_assert_int_eq(gt_pref_pairs_per_row_pair(4), 2);
}
END_TEST

/* The text of a row's columns [c0, c1): all of it (the final target too
 * when it lies past the row) or only the targets in the loss. */
static void text_of(const gt_batch *b, int r, int c0, int c1, int loss_only, char *out) {
  int32_t ids[512];
  int n = 0;
  const int32_t *in = b->inputs + (int64_t)r * b->T, *tg = b->targets + (int64_t)r * b->T;
  for (int t = c0; t < c1; t++)
    if (loss_only ? tg[t] >= 0 : 1) ids[n++] = loss_only ? tg[t] : in[t];
  if (!loss_only && c1 == b->T && tg[c1 - 1] >= 0) ids[n++] = tg[c1 - 1];
  out[gt_bytes_decode(ids, n, (unsigned char *)out)] = '\0';
}

#define HIST "{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}, " \
             "{\"role\": \"user\", \"content\": \"Sky?\"}"
#define BLUE "{\"role\": \"assistant\", \"content\": \"blue\"}"
#define GREEN "{\"role\": \"assistant\", \"content\": \" green \"}"

START_TEST(test_chat_forms_on_both_templates) {
  const char *chat = "{\"chosen\": [" HIST ", " BLUE "], \"rejected\": [" HIST ", " GREEN "]}\n";
  const char *conv = "{\"prompt\": [" HIST "], \"chosen\": [" BLUE "], \"rejected\": [" GREEN "]}\n";
  /* the prompt as each template renders it (up to the opening of the model
   * turn, with Gemma 4's larger models' empty thought block there, and not
   * on the history's model turn), and the text
   * in the loss: the final turn's content and end-of-turn marker */
  static const struct {
    const char *block, *prompt, *eot;
  } tm[2] = {
      {"decoder_block=gemma3",
       "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nSky?"
       "<end_of_turn>\n<start_of_turn>model\n",
       "<end_of_turn>"},
      {"decoder_block=gemma4",
       "<|turn>user\nHi<turn|>\n<|turn>model\nYo<turn|>\n<|turn>user\nSky?<turn|>\n"
       "<|turn>model\n<|channel>thought\n<channel|>",
       "<turn|>"},
  };
  for (int k = 0; k < 2; k++) {
    gt_batch b[2];
    gt_data d[2];
    gt_mem mem[2];
    gt_err e;
    for (int f = 0; f < 2; f++) {
      ck_assert_msg(open_pairs(&d[f], &mem[f], &e, f ? conv : chat, 200, 2, tm[k].block, NULL) == GT_OK, "%s", e.msg);
      b[f] = read_train(&d[f]);
    }
    char got[1024], want[1024];
    const char *resp[2] = {"blue", "green"};
    for (int side = 0; side < 2; side++) {
      ck_assert_int_eq(b[0].inputs[side * 200], 2);
      text_of(&b[0], side, 0, 200, 0, got);
      snprintf(want, sizeof want, "%s%s%s\n", tm[k].prompt, resp[side], tm[k].eot);
      ck_assert_str_eq(got, want);
      text_of(&b[0], side, 0, 200, 1, got);
      snprintf(want, sizeof want, "%s%s", resp[side], tm[k].eot);
      ck_assert_str_eq(got, want);
    }
    /* TRL's conversational form makes the same rows */
    size_t all = sizeof(int32_t) * 2 * 200;
    ck_assert(!memcmp(b[0].inputs, b[1].inputs, all) && !memcmp(b[0].targets, b[1].targets, all) &&
              !memcmp(b[0].positions, b[1].positions, all) && !memcmp(b[0].segments, b[1].segments, all));
    gt_data_close(&d[0]);
    gt_data_close(&d[1]);
  }
  /* Gemma 4, a response with reasoning: its thought channel opens the
   * response (no empty block), in the loss unless sft_train_on_thinking=false */
  const char *th = "{\"prompt\": [{\"role\": \"user\", \"content\": \"Sky?\"}], \"chosen\": [{\"role\": \"assistant\", "
                   "\"content\": \"blue\", \"reasoning\": \"look up\"}], \"rejected\": [" GREEN "]}\n";
  for (int train_th = 0; train_th < 2; train_th++) {
    gt_data d;
    gt_mem mem;
    gt_err e;
    ck_assert_msg(open_pairs(&d, &mem, &e, th, 200, 2, "decoder_block=gemma4",
                             train_th ? "sft_train_on_thinking=true" : "sft_train_on_thinking=false", NULL) == GT_OK,
                  "%s", e.msg);
    gt_batch b = read_train(&d);
    char got[1024];
    text_of(&b, 0, 0, 200, 1, got);
    ck_assert_str_eq(got, train_th ? "<|channel>thought\nlook up\n<channel|>blue<turn|>" : "blue<turn|>");
    text_of(&b, 0, 0, 200, 0, got);
    ck_assert_str_eq(got, "<|turn>user\nSky?<turn|>\n<|turn>model\n<|channel>thought\nlook up\n<channel|>blue<turn|>\n");
    gt_data_close(&d);
  }
}
END_TEST

START_TEST(test_refusals) {
  const char *ok = "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
  static const struct {
    const char *line2, *ov, *msg;
  } cases[] = {
      {"{\"prompt\": \"p\", \"rejected\": \"b\"}", NULL, "line 2: no field 'chosen'"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\"}", NULL, "line 2: no field 'rejected'"},
      {"{\"chosen\": \"a\", \"rejected\": \"b\"}", NULL, "line 2: no field 'prompt'"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"a\"}", NULL,
       "line 2: fields 'chosen' and 'rejected' are the same in every token the loss reads (4 tokens once rendered)"},
      {"{\"prompt\": \"p\", \"chosen\": \"0123456789abcdefX\", \"rejected\": \"0123456789abcdefY\"}",
       "overlong_records=truncate",
       "line 2: fields 'chosen' and 'rejected' are the same in every token the loss reads (17 tokens once rendered, "
       "as overlong_records=truncate cuts them)"},
      {"{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chosen\": [" BLUE ", {\"role\": \"user\", "
       "\"content\": \"x\"}], \"rejected\": [" BLUE ", {\"role\": \"user\", \"content\": \"y\"}]}",
       "max_target_length=200", "line 2: fields 'chosen' and 'rejected' are the same in every token the loss reads"},
      {"{\"chosen\": [" HIST ", " BLUE "], \"rejected\": [" HIST ", {\"role\": \"model\", \"content\": \" blue\"}]}",
       NULL, "line 2: fields 'chosen' and 'rejected' are the same"},
      {"{\"chosen\": [" HIST ", " BLUE "], \"rejected\": [{\"role\": \"user\", \"content\": \"Ho\"}, " GREEN "]}", NULL,
       "line 2: field 'chosen' has 4 messages, 'rejected' 2"},
      {"{\"chosen\": [{\"role\": \"user\", \"content\": \"Hi\"}, " BLUE "], \"rejected\": [{\"role\": \"user\", "
       "\"content\": \"Ho\"}, " GREEN "]}",
       NULL, "line 2: chosen[0] and rejected[0] differ"},
      {"{\"prompt\": \"p\", \"chosen\": \"\", \"rejected\": \"b\"}", NULL,
       "line 2: field 'chosen' (a response) is empty"},
      {"{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chosen\": [" BLUE "], \"rejected\": [{\"role\": "
       "\"assistant\", \"content\": \" \"}]}",
       NULL, "line 2: field 'rejected': the response is empty"},
      {"{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chosen\": [{\"role\": \"user\", \"content\": "
       "\"x\"}], \"rejected\": [" GREEN "]}",
       NULL, "line 2: field 'chosen': the response starts with a 'user' message"},
      {"{\"prompt\": \"Hi\", \"chosen\": [" BLUE "], \"rejected\": [" GREEN "]}", NULL,
       "line 2: field 'prompt' is a string; with messages in 'chosen' and 'rejected' expected an array"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": [" GREEN "]}", NULL,
       "line 2: field 'rejected' is an array, 'chosen' a string"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"0123456789abcdef\"}", NULL,
       "line 2: field 'rejected' makes a sequence of 19 tokens, longer than max_target_length + 1 = 17 "
       "(overlong_records=refuse"},
      {"{\"prompt\": \"0123456789abcdef\", \"chosen\": \"a\", \"rejected\": \"b\"}", "overlong_records=truncate",
       "line 2: field 'chosen' keeps no response token in the loss"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}", "dataset_type=text",
       "key 'use_dpo' = true needs dataset_type=jsonl"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}", "use_sft=true",
       "keys 'use_dpo' = true and 'use_sft' = true"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}", "per_device_batch_size=3",
       "key 'per_device_batch_size' = 3; preference rows come in pairs"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}", "per_device_batch_size=1",
       "key 'per_device_batch_size' = 1;"},
      {"{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}", "train_data_columns=messages",
       "key 'train_data_columns' = 'messages'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s\n", ok, cases[i].line2);
    gt_data d;
    gt_mem mem;
    gt_err e;
    memset(&e, 0, sizeof e);
    gt_rc rc = open_pairs(&d, &mem, &e, text, 16, 2, cases[i].ov, NULL);
    ck_assert_msg(rc != GT_OK, "case %zu opened", i);
    ck_assert_msg(strstr(e.msg, cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, e.msg, cases[i].msg);
    /* a file error names the file */
    if (!cases[i].ov || strstr(cases[i].ov, "overlong")) ck_assert_ptr_nonnull(strstr(e.msg, "pairs.jsonl' line 2"));
  }
}
END_TEST

START_TEST(test_truncate_keeps_each_side_first_tokens) {
  const char *text = "{\"prompt\": \"a\", \"chosen\": \"bcdefgh\", \"rejected\": \"x\"}\n";
  gt_data d;
  gt_mem mem;
  gt_err e;
  ck_assert_int_ne(open_pairs(&d, &mem, &e, text, 5, 2, NULL), GT_OK);
  ck_assert_ptr_nonnull(strstr(e.msg, "field 'chosen' makes a sequence of 10 tokens"));
  ck_assert_msg(open_pairs(&d, &mem, &e, text, 5, 2, "overlong_records=truncate", NULL) == GT_OK, "%s", e.msg);
  gt_batch b = read_train(&d);
  /* chosen: its first 6 tokens <bos> a b c d e (e only a target) */
  const int32_t in0[] = {2, B_('a'), B_('b'), B_('c'), B_('d')}, tg0[] = {-1, B_('b'), B_('c'), B_('d'), B_('e')},
                in1[] = {2, B_('a'), B_('x'), 1}, tg1[] = {-1, B_('x'), 1, -1}, pos[] = {0, 1, 2, 3, 4},
                one[] = {1, 1, 1, 1, 1};
  expect_row(&b, 0, 5, in0, tg0, pos, one);
  expect_row(&b, 1, 4, in1, tg1, pos, one);
  ck_assert_ptr_nonnull(strstr(gt_data_describe(&d), "1 pair truncated to 6 tokens a side"));
  gt_data_close(&d);
}
END_TEST

/* n plain pairs "pNN" / "cNN" / "rNN" */
static char *numbered(int n) {
  char *s = malloc((size_t)n * 64 + 1);
  size_t o = 0;
  for (int i = 0; i < n; i++)
    o += (size_t)sprintf(s + o, "{\"prompt\": \"p%02d\", \"chosen\": \"c%02d\", \"rejected\": \"r%02d\"}\n", i, i, i);
  return s;
}

START_TEST(test_process_rows_are_row_pairs) {
  char *text = numbered(8);
  gt_data d, full;
  gt_mem mem, mem2;
  gt_err e;
  ck_assert_msg(open_pairs(&d, &mem, &e, text, 15, 4, "packing=false", NULL) == GT_OK, "%s", e.msg);
  ck_assert_msg(open_pairs(&full, &mem2, &e, text, 15, 4, "packing=false", NULL) == GT_OK, "%s", e.msg);
  gt_batch b;
  gt_data_set_rows(&d, 1, 2);
  ck_assert_int_ne(gt_data_read_train(&d, &b, &e), GT_OK);
  ck_assert_ptr_nonnull(strstr(e.msg, "fills rows [1, 3) of the batch of 4; preference rows come in pairs"));
  /* rows [2, 4): the second row pair of the batch, the first blank */
  gt_data_set_rows(&d, 2, 2);
  b = read_train(&d);
  gt_batch f = read_train(&full);
  for (int i = 0; i < 4 * 15; i++) {
    int mine = i >= 2 * 15;
    ck_assert_int_eq(b.inputs[i], mine ? f.inputs[i] : 0);
    ck_assert_int_eq(b.targets[i], mine ? f.targets[i] : -1);
    ck_assert_int_eq(b.segments[i], mine ? f.segments[i] : 0);
  }
  ck_assert_int_eq(d.st.cursor, full.st.cursor);
  gt_data_close(&d);
  gt_data_close(&full);
  free(text);
}
END_TEST

/* Every pair of a batch: its index (from the chosen "pNNcNN" and rejected
 * "pNNrNN" texts, which must agree) into idx[], returns the count. */
static int pair_indices(const gt_batch *b, int *idx) {
  gt_pref_pair pp[64];
  int64_t n = gt_pref_pairs(b, 0, b->B, pp, 64);
  ck_assert_int_ge(n, 1);
  for (int64_t i = 0; i < n; i++) {
    char c[64], r[64];
    text_of(b, pp[i].row, pp[i].c0, pp[i].c1, 0, c);
    text_of(b, pp[i].row + 1, pp[i].r0, pp[i].r1, 0, r);
    int a, a2, x, y;
    ck_assert_msg(sscanf(c, "p%2dc%2d", &a, &x) == 2 && sscanf(r, "p%2dr%2d", &a2, &y) == 2, "'%s' / '%s'", c, r);
    ck_assert_msg(a == x && a == a2 && a == y, "a pair split: '%s' / '%s'", c, r);
    idx[i] = a;
  }
  return (int)n;
}

START_TEST(test_shuffle_keeps_pairs_and_repeats) {
  char *text = numbered(24);
  for (int packing = 0; packing < 2; packing++) {
    /* each side is <bos> pNN xNN <eos> = 8 tokens: packing puts two pairs
     * in a row pair of T + 1 = 16 */
    const char *pk = packing ? "packing=true" : "packing=false";
    int per_epoch = packing ? 6 : 12; /* batches of 2 row pairs */
    gt_data d[2];
    gt_mem mem[2];
    gt_err e;
    for (int k = 0; k < 2; k++)
      ck_assert_msg(open_pairs(&d[k], &mem[k], &e, text, 15, 4, pk, "enable_data_shuffling=true",
                               "data_shuffle_seed=7", NULL) == GT_OK,
                    "%s", e.msg);
    int order[2][48], n[2] = {0, 0};
    for (int k = 0; k < 2; k++)
      for (int s = 0; s < 2 * per_epoch; s++) {
        gt_batch b = read_train(&d[k]);
        n[k] += pair_indices(&b, order[k] + n[k]);
      }
    ck_assert_int_eq(n[0], 48);
    ck_assert_int_eq(n[1], 48);
    ck_assert(!memcmp(order[0], order[1], sizeof order[0])); /* the same seed, the same order */
    int moved = 0, differ = 0;
    for (int ep = 0; ep < 2; ep++) {
      int seen[24] = {0};
      for (int i = 0; i < 24; i++) seen[order[0][ep * 24 + i]]++, moved += order[0][ep * 24 + i] != i;
      for (int i = 0; i < 24; i++) ck_assert_int_eq(seen[i], 1); /* each pair once an epoch */
    }
    for (int i = 0; i < 24; i++) differ += order[0][i] != order[0][24 + i];
    ck_assert_int_gt(moved, 0);
    ck_assert_int_gt(differ, 0);
    gt_data_close(&d[0]);
    gt_data_close(&d[1]);
  }
  free(text);
}
END_TEST

START_TEST(test_resume_is_exact) {
  char *text = numbered(10);
  gt_data a, r;
  gt_mem ma, mr;
  gt_err e;
  ck_assert_msg(open_pairs(&a, &ma, &e, text, 15, 2, "enable_data_shuffling=true", NULL) == GT_OK, "%s", e.msg);
  ck_assert_msg(open_pairs(&r, &mr, &e, text, 15, 2, "enable_data_shuffling=true", NULL) == GT_OK, "%s", e.msg);
  gt_data_state at = {0, 0};
  int32_t want[4][2 * 2 * 15];
  for (int s = 0; s < 7; s++) { /* over the end of the epoch of 5 row pairs */
    if (s == 3) at = a.st;
    gt_batch b = read_train(&a);
    if (s >= 3) {
      memcpy(want[s - 3], b.inputs, sizeof want[0] / 2);
      memcpy(want[s - 3] + 30, b.targets, sizeof want[0] / 2);
    }
  }
  ck_assert_int_eq(at.cursor, 6); /* the cursor counts rows, two a pair */
  ck_assert_int_eq(gt_data_seek(&r, at, &e), GT_OK);
  for (int s = 0; s < 4; s++) {
    gt_batch b = read_train(&r);
    ck_assert(!memcmp(want[s], b.inputs, sizeof want[0] / 2) && !memcmp(want[s] + 30, b.targets, sizeof want[0] / 2));
  }
  gt_data_state odd = {0, 3};
  ck_assert_int_ne(gt_data_seek(&r, odd, &e), GT_OK);
  ck_assert_ptr_nonnull(strstr(e.msg, "data_cursor = 3 is odd"));
  gt_data_close(&a);
  gt_data_close(&r);
  free(text);
}
END_TEST

START_TEST(test_eval_rows_are_held_out_pairs) {
  char *text = numbered(8);
  gt_data d;
  gt_mem mem;
  gt_err e;
  ck_assert_msg(open_pairs(&d, &mem, &e, text, 15, 2, "packing=false", "eval_split_fraction=0.25", "eval_interval=5",
                           NULL) == GT_OK,
                "%s", e.msg);
  ck_assert_int_eq(d.n_train_rows, 12);
  ck_assert_int_eq(d.n_eval_rows, 4);
  int idx[4];
  for (int s = 0; s < 3; s++) { /* 6, 7, then around to 6 */
    gt_batch b;
    ck_assert_msg(gt_data_read_eval(&d, &b, &e) == GT_OK, "%s", e.msg);
    ck_assert_int_eq(pair_indices(&b, idx), 1);
    ck_assert_int_eq(idx[0], 6 + s % 2);
  }
  gt_data_close(&d);
  free(text);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pref_data");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_plain_layout);
  tcase_add_test(tc, test_pref_pairs_refuses_unpaired_rows);
  tcase_add_test(tc, test_chat_forms_on_both_templates);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_truncate_keeps_each_side_first_tokens);
  tcase_add_test(tc, test_process_rows_are_row_pairs);
  tcase_add_test(tc, test_shuffle_keeps_pairs_and_repeats);
  tcase_add_test(tc, test_resume_is_exact);
  tcase_add_test(tc, test_eval_rows_are_held_out_pairs);
  return gt_test_run_suite(s, 0);
}
