/* A corpus as a token range: tokenized into memory when opened (one text
 * file; JSON Lines records, each a document and, when rows are made of whole
 * records, checked against the row length), or token shards on disk, each
 * checked once when opened and then read by range. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"
#include "tokenizer/tokenizer.h"

static const char *const gt__gtok_exts[] = {".gtok", NULL};
static const char *const gt__jsonl_exts[] = {".jsonl", ".jsonl.gz", ".json", ".json.gz", NULL};

gt_rc gt__files_from(gt__store *s, const gt__paths *p, gt_err *err) {
  s->files = calloc((size_t)p->n, sizeof(char *));
  s->file_tok0 = calloc((size_t)p->n + 1, sizeof(int64_t));
  if (!s->files || !s->file_tok0) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
  for (int i = 0; i < p->n; i++)
    if (!(s->files[i] = strdup(p->v[i]))) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for file names");
  s->n_files = p->n;
  return GT_OK;
}

/* ---------- one text file ---------- */

static gt_rc gt__open_text(gt__store *s, const gt_config *c, const char *path, const gt_encoder *enc, gt_err *err) {
  char *buf = NULL;
  size_t n = 0;
  gt_rc rc = gt_read_file(path, "data: dataset_path", &buf, &n, err);
  if (rc == GT_ERR_IO && err && !strcmp(path, "data/kjv.txt"))
    snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg), " (make it with tools/kjv.sh)");
  if (rc) return rc;
  gt__paths p = {(char **)&path, 1};
  gt_tokvec tv = {NULL, 0, 0, s->mem};
  char where[1200];
  if (c->tokenizer_path[0])
    snprintf(where, sizeof where, "tokenizer_path '%s' (on '%s')", c->tokenizer_path, path);
  else
    snprintf(where, sizeof where, "'%s'", path);
  /* the file is one document: <bos> and its ids */
  uint32_t bos = (uint32_t)enc->bos;
  if (!(rc = gt__files_from(s, &p, err)) && !(rc = gt_tokvec_push(&tv, &bos, 1, err)))
    rc = gt_encode_append(enc, buf, n, 0, &tv, where, err);
  free(buf);
  if (rc) {
    gt_tokvec_free(&tv);
    return rc;
  }
  s->tok = tv.v;
  s->n_tok = tv.n;
  s->n_docs = 1;
  return GT_OK;
}

/* ---------- token shards ---------- */

static void gt__shard_ident(gt__shard *sh, const struct stat *st) {
  sh->size = (int64_t)st->st_size;
  sh->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  sh->ino = (int64_t)st->st_ino;
  sh->dev = (int64_t)st->st_dev;
}

/* The shard's file is the one checked at open: the same file (device and
 * inode), size and modification time. Anything else (truncated, deleted,
 * rewritten or replaced) is refused saying so: its tokens are no longer
 * the ones that were verified. Checked around every read by range. */
static gt_rc gt__shard_unchanged(const gt__shard *sh, gt_err *err) {
  struct stat st;
  if (stat(sh->path, &st))
    return gt_err_set(err, GT_ERR_IO,
                      "tokens: '%s' changed after it was checked when the data was opened: it is gone now (%s)",
                      sh->path, strerror(errno));
  gt__shard now;
  gt__shard_ident(&now, &st);
  if (now.dev != sh->dev || now.ino != sh->ino)
    return gt_err_set(err, GT_ERR_IO,
                      "tokens: '%s' changed after it was checked when the data was opened: another file has replaced "
                      "it",
                      sh->path);
  if (now.size != sh->size || now.mtime_ns != sh->mtime_ns)
    return gt_err_set(err, GT_ERR_IO,
                      "tokens: '%s' changed after it was checked when the data was opened: %lld bytes modified at "
                      "%lld.%09lld then, %lld bytes modified at %lld.%09lld now",
                      sh->path, (long long)sh->size, (long long)(sh->mtime_ns / 1000000000),
                      (long long)(sh->mtime_ns % 1000000000), (long long)now.size,
                      (long long)(now.mtime_ns / 1000000000), (long long)(now.mtime_ns % 1000000000));
  return GT_OK;
}

/* A shard's header records the vocabulary its ids belong to: the id count
 * of the tokenizer that wrote it (gemtrain tokenize: gt_tokenizer_n_ids, so
 * 262145 for Gemma 3's), or 260 for byte tokens. Ids below vocab_size can
 * still be another tokenizer's, so the recorded vocabulary must be this
 * run's: its tokenizer's id count, or without one, byte tokens only in a
 * byte-token model. A shard of another tokenizer the run does not load
 * (written elsewhere, the format is documented) is read as it is: there is
 * nothing to compare it with but vocab_size, which every id is checked
 * against. The shards of one run agree with each other. */
static gt_rc gt__shard_vocab(const gt__store *s, const gt_config *c, const gt_tokenizer *tok, const gt__shard *sh,
                             gt_err *err) {
  uint32_t v = sh->h.vocab;
  if (tok && (int64_t)v != gt_tokenizer_n_ids(tok))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: shard '%s' records vocab_size %u in its header (%s), but tokenizer_path '%s' has %d "
                      "ids: its ids are not this tokenizer's; tokenize the text again with this tokenizer_path, or "
                      "set tokenizer_path to the tokenizer.json that wrote the shard",
                      sh->path, v,
                      v == GT_BYTE_VOCAB ? "byte tokens, written without tokenizer_path"
                                         : "the ids of the tokenizer that wrote it",
                      c->tokenizer_path, gt_tokenizer_n_ids(tok));
  if (!tok && v == GT_BYTE_VOCAB && c->vocab_size != GT_BYTE_VOCAB)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: shard '%s' holds byte tokens (vocab_size %u in its header: written without "
                      "tokenizer_path), but vocab_size = %lld, a model of another vocabulary; byte tokens need "
                      "vocab_size = %d, or tokenize the text again with tokenizer_path set to the model's "
                      "tokenizer.json and train with that tokenizer_path",
                      sh->path, v, c->vocab_size, GT_BYTE_VOCAB);
  if (s->n_shards > 1 && v != s->shards[0].h.vocab)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: shard '%s' records vocab_size %u in its header, shard '%s' %u: the shards of a run must "
                      "come from one tokenizer",
                      sh->path, v, s->shards[0].path, s->shards[0].h.vocab);
  return GT_OK;
}

static gt_rc gt__open_shards(gt__store *s, const gt_config *c, const char *spec, const char *key,
                             const gt_tokenizer *tok, gt_err *err) {
  gt__paths p;
  gt_rc rc = gt__paths_expand(spec, key, gt__gtok_exts, &p, err);
  if (rc) return rc;
  s->shards = calloc((size_t)p.n, sizeof *s->shards);
  s->shard_tok0 = calloc((size_t)p.n + 1, sizeof(int64_t));
  if (!s->shards || !s->shard_tok0) rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %d shards", p.n);
  if (!rc) rc = gt__files_from(s, &p, err);
  for (int i = 0; !rc && i < p.n; i++) {
    gt__shard *sh = &s->shards[i];
    sh->path = s->files[i];
    s->n_shards = i + 1;
    int fd = open(sh->path, O_RDONLY);
    if (fd < 0) {
      rc = gt_err_set(err, GT_ERR_IO, "tokens: cannot open '%s': %s", sh->path, strerror(errno));
      break;
    }
    rc = gt__gtok_header(sh->path, fd, &sh->h, err);
    if (!rc) rc = gt__shard_vocab(s, c, tok, sh, err);
    /* every shard is checked once, in bounded memory, before it is used */
    if (!rc) rc = gt__gtok_verify(sh->path, fd, &sh->h, c->vocab_size, err);
    struct stat st;
    if (!rc && fstat(fd, &st)) rc = gt_err_set(err, GT_ERR_IO, "tokens: cannot stat '%s': %s", sh->path, strerror(errno));
    if (!rc) gt__shard_ident(sh, &st);
    close(fd);
    s->shard_tok0[i + 1] = s->shard_tok0[i] + sh->h.n_tokens;
    s->file_tok0[i + 1] = s->shard_tok0[i + 1];
  }
  if (!rc) s->n_tok = s->shard_tok0[s->n_shards];
  gt__paths_free(&p);
  return rc;
}

/* ---------- JSON Lines ---------- */

gt_rc gt__rec_push(gt__store *s, int64_t *cap, int64_t off, gt_err *err) {
  if (s->n_rec + 2 > *cap) {
    int64_t nc = *cap ? *cap * 2 : 1024;
    int64_t *r = gt_mem_alloc_uninit(s->mem, GT_MEM_DATA, (size_t)nc * sizeof(int64_t));
    if (!r) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld records", (long long)nc);
    if (s->n_rec) memcpy(r, s->rec, (size_t)s->n_rec * sizeof(int64_t));
    gt_mem_free(s->mem, s->rec);
    s->rec = r;
    *cap = nc;
  }
  s->rec[s->n_rec++] = off;
  return GT_OK;
}

/* Whether any of a row's targets (tokens 1 .. n - 1) is in the loss. */
static int gt__contributes(const uint32_t *t, int64_t n) {
  for (int64_t k = 1; k < n; k++)
    if (!(t[k] & GT__NOLOSS)) return 1;
  return 0;
}

static gt_rc gt__open_jsonl(gt__store *s, const gt_config *c, const char *spec, const char *key, const gt_encoder *enc,
                            gt_err *err) {
  gt_doc_format fmt;
  gt__paths p;
  gt_rc rc = gt_doc_format_init(&fmt, c, err);
  if (!rc && fmt.kind == GT_DOC_CHAT) rc = gt_encoder_check_chat(enc, fmt.chat.t, c->tokenizer_path, err);
  if (rc) return rc;
  if ((rc = gt__paths_expand(spec, key, gt__jsonl_exts, &p, err))) return rc;
  if ((rc = gt__files_from(s, &p, err))) {
    gt__paths_free(&p);
    return rc;
  }
  /* whole records make the rows: each must fit one (T + 1 tokens) */
  int whole = c->use_sft || !c->packing, truncate = !strcmp(c->overlong_records, "truncate");
  int64_t row = c->max_target_length + 1, rec_cap = 0;
  gt_tokvec tv = {NULL, 0, 0, s->mem};
  for (int i = 0; !rc && i < p.n; i++) {
    gt_jsonl r;
    s->file_tok0[i] = tv.n;
    if ((rc = gt_jsonl_open(&r, p.v[i], err))) break;
    for (;;) {
      cJSON *rec;
      if ((rc = gt_jsonl_next(&r, &rec, err)) || !rec) break;
      int64_t at = tv.n;
      rc = gt_doc_render(enc, &fmt, rec, p.v[i], r.line_no, &tv, err);
      cJSON_Delete(rec);
      if (rc) break;
      int64_t len = tv.n - at;
      if (whole && len > row) {
        if (!truncate) {
          rc = gt_err_set(err, GT_ERR_FORMAT,
                          "data: '%s' line %lld: the record is %lld tokens, longer than a sequence of "
                          "max_target_length + 1 = %lld (overlong_records=refuse; overlong_records=truncate keeps "
                          "its first %lld tokens)",
                          p.v[i], (long long)r.line_no, (long long)len, (long long)row, (long long)row);
          break;
        }
        s->n_truncated++;
      }
      /* a row's targets are its tokens after the first: a record whose kept
       * tokens (the first T + 1) hold none in the loss trains nothing, and a
       * batch of such rows would have no loss at all */
      if (whole && !gt__contributes(tv.v + at, len < row ? len : row)) {
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "data: '%s' line %lld: the record keeps no token in the loss (%lld tokens%s, of which the "
                        "first %lld are kept and all masked out: the prompt fills the sequence); shorten the prompt "
                        "or raise max_target_length",
                        p.v[i], (long long)r.line_no, (long long)len, len > row ? ", truncated" : "",
                        (long long)(len < row ? len : row));
        break;
      }
      s->n_docs++;
      if (whole && (rc = gt__rec_push(s, &rec_cap, at, err))) break;
    }
    gt_jsonl_close(&r);
  }
  if (!rc && s->n_docs == 0) rc = gt_err_set(err, GT_ERR_FORMAT, "data: %s '%s' holds no records", key, spec);
  if (!rc && whole) { /* rec[n_rec] = the end */
    rc = gt__rec_push(s, &rec_cap, tv.n, err);
    s->n_rec--;
  }
  s->file_tok0[p.n] = tv.n;
  gt__paths_free(&p);
  if (rc) {
    gt_tokvec_free(&tv);
    return rc;
  }
  s->tok = tv.v;
  s->n_tok = tv.n;
  return GT_OK;
}

gt_rc gt__store_open(gt__store *s, const gt_config *c, const char *spec, int eval, gt_mem *mem, gt_err *err) {
  memset(s, 0, sizeof *s);
  s->mem = mem;
  s->pair_cut.mem = mem;
  s->fd = -1;
  s->fd_shard = s->infl_shard[0] = s->infl_shard[1] = -1;
  s->type = c->dataset_type;
  const char *key = eval ? "eval_dataset_path" : "dataset_path";
  gt_tokenizer *tok = NULL;
  gt_rc rc = GT_OK;
  /* the tokenizer's <bos> and <eos> delimit documents, shards included */
  if (c->tokenizer_path[0]) rc = gt_tokenizer_load(c->tokenizer_path, &tok, err);
  if (rc) return rc;
  gt_encoder enc;
  gt_encoder_init(&enc, tok, c->vocab_size);
  s->bos = enc.bos;
  s->eos = enc.eos;
  /* byte tokens fit any larger vocabulary and pass every id check, so a
   * model of another vocabulary (a Gemma checkpoint without its tokenizer)
   * would train on them without a word: byte tokens are for byte models */
  if (!tok && strcmp(c->dataset_type, "tokens") && c->vocab_size != GT_BYTE_VOCAB)
    rc = gt_err_set(err, GT_ERR_CONFIG,
                    "data: dataset_type '%s' without tokenizer_path is read as byte tokens (%d ids), but vocab_size "
                    "= %lld: the model's vocabulary is another; set tokenizer_path to the model's tokenizer.json "
                    "(byte tokens need vocab_size = %d)",
                    c->dataset_type, GT_BYTE_VOCAB, c->vocab_size, GT_BYTE_VOCAB);
  else if (!strcmp(c->dataset_type, "text"))
    rc = gt__open_text(s, c, spec, &enc, err);
  else if (!strcmp(c->dataset_type, "tokens"))
    rc = gt__open_shards(s, c, spec, key, tok, err);
  else if (c->use_dpo)
    rc = gt__open_pairs(s, c, spec, key, &enc, err);
  else
    rc = gt__open_jsonl(s, c, spec, key, &enc, err);
  gt_tokenizer_free(tok);
  if (rc) gt__store_close(s);
  return rc;
}

void gt__store_close(gt__store *s) {
  if (s->mem) {
    gt_mem_free(s->mem, s->tok);
    gt_mem_free(s->mem, s->rec);
    gt_mem_free(s->mem, s->infl[0]);
    gt_mem_free(s->mem, s->infl[1]);
  }
  gt_tokvec_free(&s->pair_cut);
  if (s->fd >= 0) close(s->fd);
  for (int i = 0; i < s->n_files; i++) free(s->files[i]);
  free(s->files);
  free(s->file_tok0);
  free(s->shards);
  free(s->shard_tok0);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

/* The shard holding global offset off (binary search over the offsets). */
static int gt__shard_at(const gt__store *s, int64_t off) {
  int lo = 0, hi = s->n_shards - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->shard_tok0[mid] <= off)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static gt_rc gt__shard_fd(gt__store *s, int k, gt_err *err) {
  if (s->fd_shard == k) return GT_OK;
  if (s->fd >= 0) close(s->fd);
  s->fd_shard = -1;
  s->fd = open(s->shards[k].path, O_RDONLY);
  if (s->fd < 0)
    return gt_err_set(err, GT_ERR_IO, "tokens: cannot open '%s' again: %s", s->shards[k].path, strerror(errno));
  s->fd_shard = k;
  return GT_OK;
}

/* A compressed shard's tokens, inflated (the older of two slots is reused). */
static gt_rc gt__inflated(gt__store *s, int k, const uint32_t **out, gt_err *err) {
  for (int i = 0; i < 2; i++)
    if (s->infl_shard[i] == k) {
      *out = s->infl[i];
      return GT_OK;
    }
  int slot = s->infl_next;
  s->infl_next ^= 1;
  gt_mem_free(s->mem, s->infl[slot]);
  s->infl_shard[slot] = -1;
  const gt__shard *sh = &s->shards[k];
  s->infl[slot] = gt_mem_alloc_uninit(s->mem, GT_MEM_DATA, (size_t)(sh->h.n_tokens > 0 ? sh->h.n_tokens : 1) * 4);
  if (!s->infl[slot])
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory to inflate '%s' (%lld tokens)", sh->path,
                      (long long)sh->h.n_tokens);
  gt_rc rc = gt__shard_fd(s, k, err);
  if (!rc) rc = gt__gtok_inflate(sh->path, s->fd, &sh->h, s->infl[slot], err);
  if (rc) return rc;
  s->infl_shard[slot] = k;
  *out = s->infl[slot];
  return GT_OK;
}

gt_rc gt__store_read(gt__store *s, int64_t off, int64_t n, uint32_t *out, gt_err *err) {
  if (s->tok) {
    memcpy(out, s->tok + off, (size_t)n * sizeof(uint32_t));
    return GT_OK;
  }
  while (n > 0) {
    int k = gt__shard_at(s, off);
    int64_t local = off - s->shard_tok0[k], take = s->shard_tok0[k + 1] - off;
    if (take > n) take = n;
    /* before and after: a read that fails, or succeeds with other bytes
     * (a file rewritten in place), blames the change, not the bytes */
    gt_rc rc = gt__shard_unchanged(&s->shards[k], err);
    if (rc) return rc;
    if (s->shards[k].h.flags & 1) {
      const uint32_t *t = NULL;
      if (!(rc = gt__inflated(s, k, &t, err))) memcpy(out, t + local, (size_t)take * sizeof(uint32_t));
    } else if (!(rc = gt__shard_fd(s, k, err))) {
      rc = gt__gtok_pread(s->shards[k].path, s->fd, local, take, out, err);
    }
    gt_err why;
    if (gt__shard_unchanged(&s->shards[k], &why)) {
      if (err) *err = why;
      return GT_ERR_IO;
    }
    if (rc) return rc;
    out += take;
    off += take;
    n -= take;
  }
  return GT_OK;
}

int gt__store_file_at(const gt__store *s, int64_t off) {
  if (s->n_files == 0) return 0;
  int lo = 0, hi = s->n_files - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->file_tok0[mid] <= off)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
