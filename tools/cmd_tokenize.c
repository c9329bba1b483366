/* gemtrain tokenize: text files and JSON Lines records into .gtok token
 * shards (a Hugging Face tokenizer.json, or byte tokens), or text on stdin
 * into ids on stdout (--ids), or back (--decode). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "data/data.h"
#include "data/docs.h"
#include "tokenizer/tokenizer.h"
#include "base/prof.h"

typedef struct tok_opts {
  const char *tokenizer_path, *output_path, *column;
  long long shard_tokens;
  int add_bos, add_eos, compress, mode; /* mode: 0 shards, 1 --ids, 2 --decode */
  const char **files;
  int n_files;
} tok_opts;

static int parse_bool(const char *k, const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "1")) {
    *out = 1;
    return 0;
  }
  if (!strcmp(v, "false") || !strcmp(v, "0")) {
    *out = 0;
    return 0;
  }
  fprintf(stderr, "gemtrain: tokenize: key '%s' = '%s'; expected true or false\n", k, v);
  return 2;
}

static int parse_args(int argc, char **argv, tok_opts *o) {
  memset(o, 0, sizeof *o);
  o->shard_tokens = 1 << 24;
  o->add_bos = -1;
  o->add_eos = 1;
  o->compress = 1;
  o->column = "text";
  o->files = calloc((size_t)argc + 1, sizeof(char *));
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '=');
    if (!strcmp(a, "--ids")) {
      o->mode = 1;
    } else if (!strcmp(a, "--decode")) {
      o->mode = 2;
    } else if (eq && !strncmp(a, "tokenizer_path=", 15)) {
      o->tokenizer_path = eq + 1;
    } else if (eq && !strncmp(a, "output_path=", 12)) {
      o->output_path = eq + 1;
    } else if (eq && !strncmp(a, "train_data_columns=", 19)) {
      o->column = eq + 1;
      if (!o->column[0] || strchr(o->column, ',') || strlen(o->column) >= GT_STR_SHORT) {
        fprintf(stderr,
                "gemtrain: tokenize: key 'train_data_columns' = '%s'; expected one field name (shards hold text "
                "documents; SFT records are read from JSON Lines by gemtrain train)\n",
                o->column);
        return 2;
      }
    } else if (eq && !strncmp(a, "shard_tokens=", 13)) {
      char *end;
      o->shard_tokens = strtoll(eq + 1, &end, 10);
      if (*end || o->shard_tokens < 1 || o->shard_tokens > (1ll << 36)) {
        fprintf(stderr, "gemtrain: tokenize: key 'shard_tokens' = '%s'; expected an integer 1 .. 2^36\n", eq + 1);
        return 2;
      }
    } else if (eq && !strncmp(a, "add_bos=", 8)) {
      if (parse_bool("add_bos", eq + 1, &o->add_bos)) return 2;
    } else if (eq && !strncmp(a, "add_eos=", 8)) {
      if (parse_bool("add_eos", eq + 1, &o->add_eos)) return 2;
    } else if (eq && !strncmp(a, "compress=", 9)) {
      if (parse_bool("compress", eq + 1, &o->compress)) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "gemtrain: tokenize: unknown option '%s' (see gemtrain tokenize --help)\n", a);
      return 2;
    } else if (eq && access(a, F_OK) != 0) {
      fprintf(stderr,
              "gemtrain: tokenize: unknown key '%.*s'; expected tokenizer_path, output_path, shard_tokens, "
              "add_bos, add_eos, compress or train_data_columns\n",
              (int)(eq - a), a);
      return 2;
    } else {
      o->files[o->n_files++] = a;
    }
  }
  if (o->add_bos < 0) o->add_bos = o->mode == 0;
  if (o->mode != 0 && (!o->tokenizer_path || !o->tokenizer_path[0])) {
    fprintf(stderr, "gemtrain: tokenize: key 'tokenizer_path' is required (a Hugging Face tokenizer.json)\n");
    return 2;
  }
  if (o->mode == 0 && (!o->output_path || !o->output_path[0] || o->n_files == 0)) {
    fprintf(stderr, "gemtrain: tokenize: writing shards needs output_path=DIR and at least one text or JSON "
                    "Lines file (or --ids / --decode)\n");
    return 2;
  }
  if (o->mode != 0 && o->n_files > 0) {
    fprintf(stderr, "gemtrain: tokenize: --ids and --decode read standard input, not '%s'\n", o->files[0]);
    return 2;
  }
  return 0;
}

/* Standard input to its end, through the library's one whole-file reader. */
static char *read_all(FILE *f, size_t *n) {
  char *b;
  gt_err err;
  return gt_read_stream(f, "standard input", "tokenize:", &b, n, &err) ? NULL : b;
}

static int run_ids(const gt_tokenizer *t, const tok_opts *o) {
  size_t n;
  char *text = read_all(stdin, &n);
  int32_t *ids;
  int64_t ni;
  gt_err err;
  if (!text) {
    fprintf(stderr, "gemtrain: tokenize: cannot read standard input\n");
    return 1;
  }
  gt_rc rc = gt_tokenizer_encode(t, text, n, o->add_bos ? GT_TOK_ADD_SPECIAL : 0, &ids, &ni, &err);
  free(text);
  if (rc) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 1;
  }
  putchar('[');
  for (int64_t i = 0; i < ni; i++) printf(i ? ",%d" : "%d", ids[i]);
  printf("]\n");
  free(ids);
  return 0;
}

static int run_decode(const gt_tokenizer *t) {
  size_t n;
  char *text = read_all(stdin, &n);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  int n_ids = cJSON_GetArraySize(j);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_ids + 1));
  const cJSON *v;
  int k = 0, ok = cJSON_IsArray(j) && ids;
  cJSON_ArrayForEach(v, j) {
    /* range first: casting a double outside int32 is undefined behaviour */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 2147483647.0) ||
        v->valuedouble != floor(v->valuedouble))
      ok = 0;
    if (ok) ids[k++] = (int32_t)v->valuedouble;
  }
  cJSON_Delete(j);
  if (!ok) {
    free(ids);
    fprintf(stderr, "gemtrain: tokenize: --decode expects a JSON array of integer ids on standard input\n");
    return 2;
  }
  char *out;
  size_t no;
  gt_err err;
  gt_rc rc = gt_tokenizer_decode(t, ids, k, 0, &out, &no, &err);
  free(ids);
  if (rc) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 1;
  }
  fwrite(out, 1, no, stdout);
  free(out);
  return 0;
}

/* ---- shards ---- */

typedef struct shard_writer {
  const tok_opts *o;
  uint32_t vocab;
  uint32_t *buf;
  int64_t n, total;
  int index;
  double t0, last_report;
  long long bytes_done, bytes_total;
  int tty;
} shard_writer;

static int flush_shard(shard_writer *w, int64_t n) {
  char path[4096];
  gt_err err;
  snprintf(path, sizeof path, "%s/shard-%05d.gtok", w->o->output_path, w->index);
  if (gt_tokens_write(path, w->buf, n, w->vocab, w->o->compress, &err)) {
    fprintf(stderr, "%sgemtrain: %s\n", w->tty ? "\n" : "", err.msg);
    return 1;
  }
  w->index++;
  memmove(w->buf, w->buf + n, (size_t)(w->n - n) * sizeof(uint32_t));
  w->n -= n;
  return 0;
}

static int emit(shard_writer *w, const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    w->buf[w->n++] = (uint32_t)ids[i];
    w->total++;
    if (w->n == w->o->shard_tokens && flush_shard(w, w->n)) return 1;
  }
  return 0;
}

static void report(shard_writer *w, int final) {
  double t = gt_prof_now(), el = t - w->t0;
  if (!final && t - w->last_report < (w->tty ? 0.2 : 10.0)) return;
  w->last_report = t;
  double rate = el > 0 ? (double)w->total / el : 0;
  double bps = el > 0 ? (double)w->bytes_done / el : 0;
  double eta = bps > 0 ? (double)(w->bytes_total - w->bytes_done) / bps : 0;
  fprintf(stderr, "%stokenize: %.1f / %.1f MB (%.0f%%), %lld tokens, %.0f tokens/s, ETA %d:%02d%s",
          w->tty ? "\r" : "", (double)w->bytes_done / 1e6, (double)w->bytes_total / 1e6,
          w->bytes_total ? 100.0 * (double)w->bytes_done / (double)w->bytes_total : 100.0, (long long)w->total, rate,
          (int)eta / 60, (int)eta % 60, w->tty && !final ? "" : "\n");
}

static int is_jsonl(const char *path) {
  static const char *const ext[] = {".jsonl", ".jsonl.gz", ".json", ".json.gz"};
  size_t l = strlen(path);
  for (int i = 0; i < 4; i++)
    if (l > strlen(ext[i]) && !strcmp(path + l - strlen(ext[i]), ext[i])) return 1;
  return 0;
}

/* Ids of n bytes of text (byte tokens without a tokenizer) into the shards. */
static int emit_text(const gt_tokenizer *t, shard_writer *w, const char *text, size_t n, const char *path) {
  int32_t *ids;
  int64_t ni;
  gt_err err;
  if (t) {
    if (gt_tokenizer_encode(t, text, n, 0, &ids, &ni, &err)) {
      fprintf(stderr, "%sgemtrain: %s (in '%s')\n", w->tty ? "\n" : "", err.msg, path);
      return 1;
    }
  } else {
    if (!(ids = malloc((n ? n : 1) * sizeof(int32_t)))) {
      fprintf(stderr, "gemtrain: tokenize: no memory reading '%s'\n", path);
      return 1;
    }
    ni = gt_bytes_encode((const unsigned char *)text, (int64_t)n, ids);
  }
  int rc = emit(w, ids, ni);
  free(ids);
  return rc;
}

/* One text file, one document: read in blocks and encode up to exact split
 * points (gt_tokenizer_split_point; any byte for byte tokens), so memory
 * stays bounded by the block size. */
static int tokenize_file(const gt_tokenizer *t, const gt_encoder *enc, shard_writer *w, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "gemtrain: tokenize: cannot open '%s': %s\n", path, strerror(errno));
    return 1;
  }
  const int32_t bos = enc->bos, eos = enc->eos;
  int rc = w->o->add_bos ? emit(w, &bos, 1) : 0;
  size_t block = 8 << 20, cap = block, len = 0;
  char *buf = malloc(cap);
  int eof = 0;
  while (!rc && buf && !(eof && len == 0)) {
    if (!eof) {
      size_t r = fread(buf + len, 1, cap - len, f);
      len += r;
      w->bytes_done += (long long)r;
      eof = r == 0 || len < cap;
      if (ferror(f)) {
        fprintf(stderr, "gemtrain: tokenize: error reading '%s'\n", path);
        rc = 1;
        break;
      }
    }
    size_t cut = eof || !t ? len : gt_tokenizer_split_point(t, buf, len, len);
    if (cut == 0) { /* no exact cut point in the buffer: read more */
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
      continue;
    }
    rc = emit_text(t, w, buf, cut, path);
    memmove(buf, buf + cut, len - cut);
    len -= cut;
    report(w, 0);
  }
  if (!buf) {
    fprintf(stderr, "gemtrain: tokenize: no memory reading '%s'\n", path);
    rc = 1;
  }
  if (!rc && w->o->add_eos) rc = emit(w, &eos, 1);
  free(buf);
  fclose(f);
  return rc;
}

/* A JSON Lines file: each record's text field is a document, as
 * dataset_type=jsonl reads it. Memory: one line and one record's ids. */
static int tokenize_jsonl(const gt_encoder *enc, shard_writer *w, const char *path) {
  gt_doc_format fmt;
  memset(&fmt, 0, sizeof fmt);
  fmt.kind = GT_DOC_TEXT;
  snprintf(fmt.col[0], sizeof fmt.col[0], "%s", w->o->column);
  fmt.no_bos = !w->o->add_bos;
  fmt.no_eos = !w->o->add_eos;
  gt_jsonl r;
  gt_err err;
  gt_tokvec tv = {NULL, 0, 0, NULL};
  int rc = 0;
  long long base = w->bytes_done, n_rec = 0;
  if (gt_jsonl_open(&r, path, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 1;
  }
  for (;;) {
    cJSON *rec;
    if (gt_jsonl_next(&r, &rec, &err) || (rec && gt_doc_render(enc, &fmt, rec, path, r.line_no, &tv, &err))) {
      fprintf(stderr, "%sgemtrain: %s\n", w->tty ? "\n" : "", err.msg);
      cJSON_Delete(rec);
      rc = 1;
      break;
    }
    if (!rec) break;
    cJSON_Delete(rec);
    n_rec++;
    rc = emit(w, (const int32_t *)tv.v, tv.n);
    tv.n = 0;
    w->bytes_done = base + (long long)r.bytes_in;
    report(w, 0);
    if (rc) break;
  }
  if (!rc && n_rec == 0) {
    fprintf(stderr, "%sgemtrain: tokenize: '%s' holds no records\n", w->tty ? "\n" : "", path);
    rc = 2;
  }
  gt_tokvec_free(&tv);
  gt_jsonl_close(&r);
  return rc;
}

static int dir_has_shards(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    found |= l > 5 && !strcmp(e->d_name + l - 5, ".gtok");
  }
  if (d) closedir(d);
  return found;
}

static int run_shards(const gt_tokenizer *t, const tok_opts *o) {
  shard_writer w = {0};
  w.o = o;
  w.vocab = t ? (uint32_t)gt_tokenizer_n_ids(t) : GT_BYTE_VOCAB;
  gt_encoder enc;
  gt_encoder_init(&enc, t, w.vocab);
  w.tty = isatty(STDERR_FILENO);
  for (int i = 0; i < o->n_files; i++) {
    struct stat st;
    if (stat(o->files[i], &st) || !S_ISREG(st.st_mode)) {
      fprintf(stderr, "gemtrain: tokenize: input '%s' is not a readable file\n", o->files[i]);
      return 2;
    }
    /* a shard of nothing (or of <bos><eos> alone) is not a dataset */
    if (st.st_size == 0) {
      fprintf(stderr, "gemtrain: tokenize: input '%s' is empty (0 bytes); there are no tokens to write\n",
              o->files[i]);
      return 2;
    }
    w.bytes_total += (long long)st.st_size;
  }
  gt_err err;
  if (gt_mkdirs(o->output_path, "tokenize", &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 1;
  }
  if (dir_has_shards(o->output_path)) {
    fprintf(stderr, "gemtrain: tokenize: output_path '%s' already holds .gtok shards; remove them or choose "
                    "another directory\n",
            o->output_path);
    return 2;
  }
  w.buf = malloc(sizeof(uint32_t) * (size_t)o->shard_tokens);
  if (!w.buf) {
    fprintf(stderr, "gemtrain: tokenize: no memory for a shard of %lld tokens\n", o->shard_tokens);
    return 1;
  }
  w.t0 = w.last_report = gt_prof_now();
  int rc = 0;
  for (int i = 0; i < o->n_files && !rc; i++) {
    long long before = w.bytes_done;
    rc = is_jsonl(o->files[i]) ? tokenize_jsonl(&enc, &w, o->files[i]) : tokenize_file(t, &enc, &w, o->files[i]);
    struct stat st;
    if (!rc && stat(o->files[i], &st) == 0) w.bytes_done = before + (long long)st.st_size;
  }
  if (!rc && w.total == 0) {
    fprintf(stderr, "gemtrain: tokenize: the input%s hold%s no tokens; no shard written\n", o->n_files > 1 ? "s" : "",
            o->n_files > 1 ? "" : "s");
    rc = 2;
  }
  if (!rc && w.n > 0) rc = flush_shard(&w, w.n);
  if (!rc) {
    report(&w, 1);
    fprintf(stderr, "tokenize: wrote %d shard%s (%lld tokens) to %s\n", w.index, w.index == 1 ? "" : "s",
            (long long)w.total, o->output_path);
  }
  free(w.buf);
  return rc;
}

int gt_cmd_tokenize(int argc, char **argv) {
  tok_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc) {
    free(o.files);
    return rc;
  }
  gt_tokenizer *t = NULL;
  gt_err err;
  if (o.tokenizer_path && o.tokenizer_path[0] && gt_tokenizer_load(o.tokenizer_path, &t, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    free(o.files);
    return 2;
  }
  rc = o.mode == 1 ? run_ids(t, &o) : o.mode == 2 ? run_decode(t) : run_shards(t, &o);
  gt_tokenizer_free(t);
  free(o.files);
  return rc;
}
