/* gemtrain data: what the trainer will read. Opens the data source exactly
 * as `gemtrain train` does (same config, same keys) and prints its first
 * batches: each row's token ids, targets (-1: out of the loss), segment ids
 * and positions, and per document its decoded text and the text of the
 * tokens it is trained to predict (SFT records: also the rendering with
 * the parts out of the loss marked; preference pairs, use_dpo: each row
 * pair's pairs, the prompt and both responses with the mask marked).
 * load_parameters_path defines the model
 * keys as it does for train (a Hugging Face directory's vocab_size and chat
 * template). --time reads batches without printing
 * and reports the time per batch. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "cli.h"
#include "data/data.h"
#include "exec/exec.h"
#include "tokenizer/tokenizer.h"
#include "hf/model_source.h"
#include "model/pref_pairs.h"

typedef struct data_opts {
  long long batches, rows, time_batches;
  int eval;
} data_opts;

static int parse_count(const char *opt, const char *v, long long lo, long long *out) {
  char *end;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || *end || x < lo || x > (1ll << 40)) {
    fprintf(stderr, "gemtrain: data: option '%s' = '%s'; expected an integer >= %lld\n", opt, v ? v : "", lo);
    return 2;
  }
  *out = x;
  return 0;
}

/* Takes the options off the front (main puts them there). */
static int parse_opts(int *argc, char ***argv, data_opts *o) {
  memset(o, 0, sizeof *o);
  o->batches = 1;
  o->rows = -1;
  while (*argc > 0 && (*argv)[0][0] == '-' && (*argv)[0][1]) {
    const char *a = (*argv)[0], *v = *argc > 1 ? (*argv)[1] : NULL;
    int used = 2, rc = 0;
    if (!strcmp(a, "--batches"))
      rc = parse_count(a, v, 1, &o->batches);
    else if (!strcmp(a, "--rows"))
      rc = parse_count(a, v, 1, &o->rows);
    else if (!strcmp(a, "--time"))
      rc = parse_count(a, v, 1, &o->time_batches);
    else if (!strcmp(a, "--eval"))
      o->eval = 1, used = 1;
    else {
      fprintf(stderr, "gemtrain: data: unknown option '%s' (see gemtrain data --help)\n", a);
      return 2;
    }
    if (rc) return rc;
    *argc -= used;
    *argv += used;
  }
  return 0;
}

/* Text for one line: newlines, tabs, quotes and control bytes escaped. */
static void put_escaped(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '\n')
      fputs("\\n", stdout);
    else if (ch == '\t')
      fputs("\\t", stdout);
    else if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      printf("\\x%02x", ch);
    else
      putchar(ch);
  }
}

/* ids as text: through the tokenizer (special tokens kept), or bytes with
 * the four specials named. */
static void put_text(const gt_tokenizer *tok, const int32_t *ids, int64_t n) {
  if (tok) {
    char *out = NULL;
    size_t len = 0;
    gt_err e;
    if (gt_tokenizer_decode(tok, ids, n, 0, &out, &len, &e) == GT_OK) put_escaped(out, len);
    else printf("(%s)", e.msg);
    free(out);
    return;
  }
  static const char *const special[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] >= 0 && ids[i] < 4) {
      fputs(special[ids[i]], stdout);
    } else if (ids[i] < GT_BYTE_VOCAB) {
      char ch = (char)(ids[i] - 4);
      put_escaped(&ch, 1);
    } else {
      printf("<%d>", ids[i]);
    }
  }
}

static void put_ints(const char *name, const int32_t *v, int T) {
  printf("  %-10s", name);
  for (int t = 0; t < T; t++) printf(" %d", v[t]);
  putchar('\n');
}

/* A document's tokens [t0, t1) of a row (and the token after them when it
 * is only a target) with the runs out of the loss between ⟦ and ⟧: the
 * template's text as the loss sees it. A token is in the loss when the
 * previous position predicts it. buf holds t1 - t0 + 1 ids. */
static void put_marked(const gt_tokenizer *tok, const int32_t *in, const int32_t *tg, int t0, int t1, int32_t *buf,
                       const char *label) {
  printf("    %s (out of the loss in \u27e6 \u27e7): \"", label);
  int n = 0, cur = -1;
  for (int j = t0; j <= t1; j++) {
    int id, loss;
    if (j < t1) {
      id = in[j];
      loss = j > t0 && tg[j - 1] >= 0;
    } else if (tg[t1 - 1] >= 0) {
      id = tg[t1 - 1];
      loss = 1;
    } else {
      break;
    }
    if (loss != cur && n) {
      if (!cur) fputs("\u27e6", stdout);
      put_text(tok, buf, n);
      if (!cur) fputs("\u27e7", stdout);
      n = 0;
    }
    cur = loss;
    buf[n++] = id;
  }
  if (n) {
    if (!cur) fputs("\u27e6", stdout);
    put_text(tok, buf, n);
    if (!cur) fputs("\u27e7", stdout);
  }
  printf("\"\n");
}

static void print_row(const gt_tokenizer *tok, const gt_batch *b, int r, int marked, int docs_too) {
  int T = b->T;
  const int32_t *in = b->inputs + (int64_t)r * T, *tg = b->targets + (int64_t)r * T,
                *pos = b->positions + (int64_t)r * T, *seg = b->segments ? b->segments + (int64_t)r * T : NULL;
  int loss = 0, docs = seg ? 0 : 1, pad = 0;
  for (int t = 0; t < T; t++) {
    loss += tg[t] >= 0;
    pad += seg && seg[t] == 0;
    docs += seg && seg[t] > 0 && (t == 0 || seg[t] != seg[t - 1]);
  }
  printf("row %d: %d document%s, %d tokens in the loss%s", r, docs, docs == 1 ? "" : "s", loss,
         pad ? "" : "\n");
  if (pad) printf(", %d padding\n", pad);
  put_ints("inputs:", in, T);
  put_ints("targets:", tg, T);
  if (seg) put_ints("segments:", seg, T);
  put_ints("positions:", pos, T);
  int32_t *buf = docs_too ? malloc(sizeof(int32_t) * (size_t)(T + 1)) : NULL;
  for (int t0 = 0; t0 < T && buf;) {
    int t1 = t0;
    while (t1 < T && (seg ? seg[t1] == seg[t0] : 1)) t1++;
    if (seg && seg[t0] == 0) {
      t0 = t1;
      continue;
    }
    printf("  document %d (positions %d..%d): \"", seg ? seg[t0] : 1, pos[t0], pos[t1 - 1]);
    put_text(tok, in + t0, t1 - t0);
    printf("\"\n    predicted in the loss: \"");
    /* consecutive targets in the loss as one span; a gap as " | " */
    int n = 0, gap = 0;
    for (int t = t0; t < t1; t++) {
      if (tg[t] < 0) {
        gap = n > 0;
        continue;
      }
      if (gap) {
        put_text(tok, buf, n);
        fputs("\" | \"", stdout);
        n = 0;
        gap = 0;
      }
      buf[n++] = tg[t];
    }
    put_text(tok, buf, n);
    printf("\"\n");
    if (marked) put_marked(tok, in, tg, t0, t1, buf, "rendering");
    t0 = t1;
  }
  free(buf);
}

/* use_dpo: a row pair (rows r, r + 1) as its pairs: the prompt (the
 * chosen sequence's tokens before its first one in the loss), then each
 * side's sequence with the runs out of the loss marked. Counts the pairs
 * and the response tokens into *pairs and *tokens. */
static void print_pairs(const gt_tokenizer *tok, const gt_batch *b, int r, long long *pairs, long long *tokens) {
  int T = b->T;
  int64_t cap = gt_pref_pairs_per_row_pair(T);
  gt_pref_pair *pp = malloc(sizeof *pp * (size_t)cap);
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(T + 1));
  int64_t n = pp && buf ? gt_pref_pairs(b, r, 2, pp, cap) : 0;
  if (n < 0) printf("row pair %d: rows %d and %d do not hold the same pairs\n", r / 2, r, r + 1);
  int loss[2] = {0, 0};
  for (int side = 0; side < 2; side++)
    for (int t = 0; t < T; t++) loss[side] += b->targets[(int64_t)(r + side) * T + t] >= 0;
  if (n >= 0)
    printf("row pair %d (row %d chosen, row %d rejected): %lld pair%s, %d + %d response tokens in the loss\n", r / 2, r,
           r + 1, (long long)n, n == 1 ? "" : "s", loss[0], loss[1]);
  for (int64_t i = 0; i < n && i < cap; i++) {
    const gt_pref_pair *p = &pp[i];
    const int32_t *in = b->inputs + (int64_t)r * T, *tg = b->targets + (int64_t)r * T;
    int a = p->c0;
    while (a < p->c1 && tg[a] < 0) a++; /* the prompt: inputs up to the one predicting the response */
    printf("  pair %d (segment %d): prompt \"", p->seg, p->seg);
    put_text(tok, in + p->c0, a < p->c1 ? a + 1 - p->c0 : p->c1 - p->c0);
    printf("\"\n");
    char label[96];
    snprintf(label, sizeof label, "chosen   row %d, columns %d..%d", r, p->c0, p->c1 - 1);
    put_marked(tok, in, tg, p->c0, p->c1, buf, label);
    snprintf(label, sizeof label, "rejected row %d, columns %d..%d", r + 1, p->r0, p->r1 - 1);
    put_marked(tok, in + T, tg + T, p->r0, p->r1, buf, label);
  }
  if (n > 0) *pairs += n;
  *tokens += loss[0] + loss[1];
  free(pp);
  free(buf);
}

/* load_parameters_path's model keys into cfg, the two calls train makes
 * (train_state.c's gt__train_source) */
static gt_rc apply_source(gt_config *cfg, gt_err *err) {
  if (!cfg->load_parameters_path[0]) return GT_OK;
  gt_model_source *src = malloc(sizeof *src);
  if (!src) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory");
  gt_rc rc = gt_model_source_open(cfg->load_parameters_path, src, err);
  if (!rc) rc = gt_model_source_apply_config(src, cfg, err);
  free(src);
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return gt_err_set(err, rc, "data: load_parameters_path: %s", msg);
  }
  return GT_OK;
}

int gt_cmd_data(int argc, char **argv) {
  data_opts o;
  int rc = parse_opts(&argc, &argv, &o);
  if (rc) return rc;
  gt_config cfg;
  if ((rc = gt_cli_load_config(argc, argv, &cfg))) return rc;
  gt_mem mem;
  gt_mem_init(&mem);
  gt_data d;
  memset(&d, 0, sizeof d);
  gt_err err;
  gt_tokenizer *tok = NULL;
  /* as `gemtrain train`: load_parameters_path defines the model keys
   * (vocab_size, the chat template, ...) before the data source opens */
  gt_rc r = apply_source(&cfg, &err);
  if (!r) r = gt_data_open(&d, &cfg, &mem, &err);
  if (!r && cfg.tokenizer_path[0]) r = gt_tokenizer_load(cfg.tokenizer_path, &tok, &err);
  if (r) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    if (d.mem) gt_data_close(&d);
    return gt_cli_exit_code(r);
  }
  printf("%s\n", gt_data_describe(&d));
  if (o.eval && !gt_data_has_eval(&d)) {
    fprintf(stderr, "gemtrain: data: --eval: this data source has no eval rows\n");
    gt_data_close(&d);
    gt_tokenizer_free(tok);
    return GT_EXIT_CONFIG;
  }
  if (o.time_batches) {
    double t0 = gt_prof_now();
    for (long long i = 0; i < o.time_batches && !r; i++) {
      gt_batch b;
      r = o.eval ? gt_data_read_eval(&d, &b, &err) : gt_data_read_train(&d, &b, &err);
    }
    double s = gt_prof_now() - t0;
    if (!r)
      printf("read %lld %s batches in %.3f s: %.3f ms per batch, %.0f tokens/s\n", o.time_batches,
             o.eval ? "eval" : "training", s, 1e3 * s / (double)o.time_batches,
             (double)o.time_batches * d.B * d.T / (s > 0 ? s : 1e-9));
  }
  for (long long i = 0; i < o.batches && !r && !o.time_batches; i++) {
    gt_batch b;
    gt_data_state at = d.st;
    r = o.eval ? gt_data_read_eval(&d, &b, &err) : gt_data_read_train(&d, &b, &err);
    if (r) break;
    if (o.eval) {
      printf("\neval batch %lld: %d row%s x %d tokens, %lld in the loss\n", i, b.B, b.B == 1 ? "" : "s", b.T,
             (long long)gt_batch_total_weights(&b));
    } else {
      char pos[600];
      gt_data_position(&d, at, pos, sizeof pos);
      printf("\nbatch %lld, %s: %d row%s x %d tokens, %lld in the loss\n", i, pos, b.B, b.B == 1 ? "" : "s", b.T,
             (long long)gt_batch_total_weights(&b));
    }
    if (!cfg.use_dpo) {
      for (int row = 0; row < b.B && (o.rows < 0 || row < o.rows); row++) print_row(tok, &b, row, cfg.use_sft, 1);
      continue;
    }
    long long pairs = 0, tokens = 0;
    int rp = 0;
    for (int row = 0; row + 1 < b.B && (o.rows < 0 || row < o.rows); row += 2, rp++) {
      print_row(tok, &b, row, 0, 0);
      print_row(tok, &b, row + 1, 0, 0);
      print_pairs(tok, &b, row, &pairs, &tokens);
    }
    printf("%lld pair%s in %d row pair%s (%.2f per row pair), %lld response tokens in the loss\n", pairs,
           pairs == 1 ? "" : "s", rp, rp == 1 ? "" : "s", rp ? (double)pairs / rp : 0.0, tokens);
  }
  if (r) fprintf(stderr, "gemtrain: %s\n", err.msg);
  gt_data_close(&d);
  gt_tokenizer_free(tok);
  return gt_cli_exit_code(r);
}
