#define _POSIX_C_SOURCE 200809L
#include "data/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tokenizer/tokenizer.h"

int64_t gt_bytes_encode(const unsigned char *s, int64_t n, int32_t *ids) {
  for (int64_t i = 0; i < n; i++) ids[i] = 4 + (int32_t)s[i];
  return n;
}

int64_t gt_bytes_decode(const int32_t *ids, int64_t n, unsigned char *out) {
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 4 && ids[i] < 260) out[j++] = (unsigned char)(ids[i] - 4);
  return j;
}

/* ---------- shards ---------- */

static void gt__put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void gt__put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t gt__get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t gt__get64(const unsigned char *p) {
  return (uint64_t)gt__get32(p) | (uint64_t)gt__get32(p + 4) << 32;
}

#define GT__TOK_HDR 36

gt_rc gt_tokens_write(const char *path, const uint32_t *ids, int64_t n, uint32_t vocab, int compress,
                      gt_err *err) {
  size_t raw = (size_t)n * 4;
  unsigned char *le = malloc(raw ? raw : 1);
  if (!le) return gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory to write '%s'", path);
  for (int64_t i = 0; i < n; i++) gt__put32(le + 4 * i, ids[i]);
  uint32_t crc = (uint32_t)crc32(0L, le, (uInt)raw);
  unsigned char *payload = le;
  uLongf plen = (uLongf)raw;
  unsigned char *z = NULL;
  if (compress) {
    plen = compressBound((uLong)raw);
    z = malloc(plen);
    if (!z || compress2(z, &plen, le, (uLong)raw, 6) != Z_OK) {
      free(le);
      free(z);
      return gt_err_set(err, GT_ERR_INTERNAL, "tokens: zlib failed compressing '%s'", path);
    }
    payload = z;
  }
  unsigned char h[GT__TOK_HDR];
  memcpy(h, "GTOK", 4);
  gt__put32(h + 4, 1);
  gt__put32(h + 8, compress ? 1u : 0u);
  gt__put32(h + 12, vocab);
  gt__put64(h + 16, (uint64_t)n);
  gt__put64(h + 24, (uint64_t)plen);
  gt__put32(h + 32, crc);
  char tmp[2048];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  int ok = f && fwrite(h, 1, sizeof h, f) == sizeof h && fwrite(payload, 1, plen, f) == plen;
  if (f) ok = (fclose(f) == 0) && ok;
  free(le);
  free(z);
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return gt_err_set(err, GT_ERR_IO, "tokens: cannot write '%s': %s", path, strerror(errno));
  }
  return GT_OK;
}

gt_rc gt_tokens_read(const char *path, uint32_t **out, int64_t *n_out, uint32_t *vocab_out, gt_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return gt_err_set(err, GT_ERR_IO, "tokens: cannot open '%s': %s", path, strerror(errno));
  unsigned char h[GT__TOK_HDR];
  gt_rc rc = GT_OK;
  unsigned char *payload = NULL, *raw = NULL;
  if (fread(h, 1, sizeof h, f) != sizeof h) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' is shorter than the %d-byte header", path, GT__TOK_HDR);
    goto done;
  }
  if (memcmp(h, "GTOK", 4)) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' does not start with magic GTOK", path);
    goto done;
  }
  uint32_t ver = gt__get32(h + 4), flags = gt__get32(h + 8);
  if (ver != 1) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' has version %u; expected 1", path, ver);
    goto done;
  }
  uint64_t n = gt__get64(h + 16), plen = gt__get64(h + 24);
  uint32_t crc = gt__get32(h + 32);
  struct stat st;
  if (fstat(fileno(f), &st) || (uint64_t)st.st_size != GT__TOK_HDR + plen || n > (1ull << 40) ||
      (!(flags & 1) && plen != n * 4)) {
    rc = gt_err_set(err, GT_ERR_FORMAT,
                    "tokens: '%s' header says %llu tokens in %llu payload bytes, file has %lld bytes",
                    path, (unsigned long long)n, (unsigned long long)plen, (long long)st.st_size);
    goto done;
  }
  payload = malloc(plen ? plen : 1);
  raw = (flags & 1) ? malloc(n > 0 ? n * 4 : 1) : payload;
  if (!payload || !raw) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory for '%s'", path);
    goto done;
  }
  if (fread(payload, 1, plen, f) != plen) {
    rc = gt_err_set(err, GT_ERR_IO, "tokens: short read of '%s'", path);
    goto done;
  }
  if (flags & 1) {
    uLongf rl = (uLongf)(n * 4);
    if (uncompress(raw, &rl, payload, (uLong)plen) != Z_OK || rl != n * 4) {
      rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' payload does not inflate to %llu tokens", path,
                      (unsigned long long)n);
      goto done;
    }
  }
  if ((uint32_t)crc32(0L, raw, (uInt)(n * 4)) != crc) {
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' fails its crc32 check (corrupt)", path);
    goto done;
  }
  uint32_t *ids = malloc(n > 0 ? n * 4 : 4);
  if (!ids) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory for '%s'", path);
    goto done;
  }
  for (uint64_t i = 0; i < n; i++) ids[i] = gt__get32(raw + 4 * i);
  *out = ids;
  *n_out = (int64_t)n;
  if (vocab_out) *vocab_out = gt__get32(h + 12);
done:
  if (raw != payload) free(raw);
  free(payload);
  fclose(f);
  return rc;
}

/* ---------- stream sources ---------- */

static gt_rc gt__append(gt_data *d, const int32_t *ids, int64_t n, int64_t *cap, gt_err *err) {
  if (d->n_stream + n > *cap) {
    int64_t nc = (*cap ? *cap * 2 : 1 << 20);
    while (nc < d->n_stream + n) nc *= 2;
    int32_t *s = realloc(d->stream, (size_t)nc * sizeof(int32_t));
    if (!s) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld tokens", (long long)nc);
    d->stream = s;
    *cap = nc;
  }
  memcpy(d->stream + d->n_stream, ids, (size_t)n * sizeof(int32_t));
  d->n_stream += n;
  return GT_OK;
}

/* Reads the whole corpus file (*n bytes). */
static gt_rc gt__read_corpus(const gt_config *c, unsigned char **buf, long *n, gt_err *err) {
  char *b;
  size_t len;
  gt_rc rc = gt_read_file(c->dataset_path, "data: dataset_path", &b, &len, err);
  if (rc == GT_ERR_IO && err && !strcmp(c->dataset_path, "data/kjv.txt"))
    snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg), " (make it with tools/kjv.sh)");
  *buf = (unsigned char *)b;
  *n = (long)len;
  return rc;
}

/* The corpus through the tokenizer of tokenizer_path: <bos> then its ids
 * (the corpus is one document, as with byte tokens). */
static gt_rc gt__load_text_tokenizer(gt_data *d, const gt_config *c, gt_err *err) {
  gt_tokenizer *tok = NULL;
  unsigned char *buf = NULL;
  int32_t *ids = NULL;
  int64_t n_ids = 0, cap = 0;
  long n = 0;
  gt_rc rc = gt_tokenizer_load(c->tokenizer_path, &tok, err);
  if (!rc) rc = gt__read_corpus(c, &buf, &n, err);
  if (!rc) rc = gt_tokenizer_encode(tok, (const char *)buf, (size_t)n, 0, &ids, &n_ids, err);
  for (int64_t i = 0; !rc && i < n_ids; i++)
    if (ids[i] >= c->vocab_size)
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "data: tokenizer_path '%s' gives id %d (at token %lld of '%s'); vocab_size = %lld must "
                      "exceed every id",
                      c->tokenizer_path, ids[i], (long long)i, c->dataset_path, c->vocab_size);
  const int32_t bos = GT_TOK_BOS;
  if (!rc) rc = gt__append(d, &bos, 1, &cap, err);
  if (!rc) rc = gt__append(d, ids, n_ids, &cap, err);
  free(ids);
  free(buf);
  gt_tokenizer_free(tok);
  return rc;
}

static gt_rc gt__load_text(gt_data *d, const gt_config *c, gt_err *err) {
  if (c->tokenizer_path[0]) return gt__load_text_tokenizer(d, c, err);
  if (c->vocab_size < GT_BYTE_VOCAB)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: dataset_type 'text' uses byte tokens (ids up to 259) but vocab_size = %lld; "
                      "expected >= %d",
                      c->vocab_size, GT_BYTE_VOCAB);
  unsigned char *buf = NULL;
  long n = 0;
  gt_rc rc = gt__read_corpus(c, &buf, &n, err);
  if (rc) return rc;
  int32_t *ids = malloc(((size_t)n + 1) * sizeof(int32_t));
  if (!ids) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory for '%s'", c->dataset_path);
  } else {
    ids[0] = GT_TOK_BOS; /* the corpus is one document */
    gt_bytes_encode(buf, n, ids + 1);
    int64_t cap = 0;
    rc = gt__append(d, ids, n + 1, &cap, err);
  }
  free(buf);
  free(ids);
  return rc;
}

static int gt__cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static gt_rc gt__load_tokens(gt_data *d, const gt_config *c, gt_err *err) {
  struct stat st;
  if (stat(c->dataset_path, &st))
    return gt_err_set(err, GT_ERR_IO, "data: dataset_path '%s' not found: %s", c->dataset_path,
                      strerror(errno));
  char **files = NULL;
  int nf = 0;
  if (S_ISDIR(st.st_mode)) {
    DIR *dir = opendir(c->dataset_path);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
      size_t l = strlen(e->d_name);
      if (l > 5 && !strcmp(e->d_name + l - 5, ".gtok")) {
        files = realloc(files, sizeof(char *) * (size_t)(nf + 1));
        size_t pl = strlen(c->dataset_path) + l + 2;
        files[nf] = malloc(pl);
        snprintf(files[nf++], pl, "%s/%s", c->dataset_path, e->d_name);
      }
    }
    if (dir) closedir(dir);
    if (nf == 0)
      return gt_err_set(err, GT_ERR_IO, "data: dataset_path '%s' holds no .gtok shards", c->dataset_path);
    qsort(files, (size_t)nf, sizeof(char *), gt__cmp_str);
  } else {
    files = malloc(sizeof(char *));
    files[0] = strdup(c->dataset_path);
    nf = 1;
  }
  gt_rc rc = GT_OK;
  int64_t cap = 0;
  for (int i = 0; i < nf && rc == GT_OK; i++) {
    uint32_t *ids = NULL, vocab = 0;
    int64_t n = 0;
    rc = gt_tokens_read(files[i], &ids, &n, &vocab, err);
    if (rc) break;
    for (int64_t k = 0; k < n; k++)
      if (ids[k] >= (uint64_t)c->vocab_size) {
        rc = gt_err_set(err, GT_ERR_FORMAT,
                        "data: shard '%s' holds token id %u at index %lld; vocab_size is %lld", files[i],
                        ids[k], (long long)k, c->vocab_size);
        break;
      }
    if (rc == GT_OK) rc = gt__append(d, (const int32_t *)ids, n, &cap, err);
    free(ids);
  }
  for (int i = 0; i < nf; i++) free(files[i]);
  free(files);
  return rc;
}

/* ---------- batches ---------- */

/* The permutation of an epoch depends only on (seed, epoch). */
static void gt__permute(gt_data *d) {
  uint64_t s = d->seed * 0x100000001B3ull + (uint64_t)d->st.epoch * 0x9E3779B1ull + 7;
  for (int64_t i = 0; i < d->n_train_windows; i++) d->perm[i] = i;
  for (int64_t i = d->n_train_windows - 1; i > 0; i--) {
    int64_t j = (int64_t)(gt_splitmix64(&s) % (uint64_t)(i + 1));
    int64_t t = d->perm[i];
    d->perm[i] = d->perm[j];
    d->perm[j] = t;
  }
}

gt_rc gt_data_open(gt_data *d, const gt_config *c, gt_mem *mem, gt_err *err) {
  memset(d, 0, sizeof *d);
  d->mem = mem;
  d->B = (int)gt_config_global_batch(c);
  d->T = (int)c->max_target_length;
  d->seed = (uint64_t)c->data_shuffle_seed;
  int64_t N = (int64_t)d->B * d->T;
  d->in = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->tg = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->pos = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  if (!d->in || !d->tg || !d->pos) {
    gt_data_close(d);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for a batch of %lld tokens", (long long)N);
  }
  for (int64_t i = 0; i < N; i++) d->pos[i] = (int32_t)(i % d->T);
  gt_rc rc = GT_OK;
  if (!strcmp(c->dataset_type, "synthetic")) {
    /* MaxText: uniform ids in [0, V), [global_batch, T+1], generated once */
    d->kind = 0;
    uint64_t s = d->seed + 1;
    for (int b = 0; b < d->B; b++) {
      int32_t prev = (int32_t)(gt_splitmix64(&s) % (uint64_t)c->vocab_size);
      for (int t = 0; t < d->T; t++) {
        int32_t next = (int32_t)(gt_splitmix64(&s) % (uint64_t)c->vocab_size);
        d->in[b * d->T + t] = prev;
        d->tg[b * d->T + t] = next;
        prev = next;
      }
    }
    return GT_OK;
  }
  d->kind = 1;
  rc = !strcmp(c->dataset_type, "text") ? gt__load_text(d, c, err) : gt__load_tokens(d, c, err);
  if (rc) {
    gt_data_close(d);
    return rc;
  }
  /* the stream lives in tracked memory (category data) like every large buffer */
  int32_t *tracked = gt_mem_alloc_uninit(mem, GT_MEM_DATA, (size_t)d->n_stream * sizeof(int32_t));
  if (!tracked) {
    gt_data_close(d);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for %lld tokens", (long long)d->n_stream);
  }
  memcpy(tracked, d->stream, (size_t)d->n_stream * sizeof(int32_t));
  free(d->stream);
  d->stream = tracked;
  d->stream_tracked = 1;
  int64_t n_eval = (int64_t)((double)d->n_stream * c->eval_split_fraction);
  d->n_train = d->n_stream - n_eval;
  d->n_train_windows = (d->n_train - 1) / d->T;
  d->n_eval_windows = n_eval > 0 ? (n_eval - 1) / d->T : 0;
  /* each message is formatted before gt_data_close clears the sizes it names */
  if (d->n_train_windows < d->B) {
    gt_err_set(err, GT_ERR_CONFIG,
               "data: '%s' has %lld training tokens, fewer than one batch of %d x %d; use a "
               "larger corpus or a smaller batch",
               c->dataset_path, (long long)d->n_train, d->B, d->T + 1);
    gt_data_close(d);
    return GT_ERR_CONFIG;
  }
  if (c->eval_interval >= 0 && d->n_eval_windows < 1) {
    gt_err_set(err, GT_ERR_CONFIG,
               "data: eval_split_fraction = %g of '%s' leaves %lld tokens, fewer than one "
               "eval sequence of %d; raise it or set eval_interval=-1",
               c->eval_split_fraction, c->dataset_path, (long long)n_eval, d->T + 1);
    gt_data_close(d);
    return GT_ERR_CONFIG;
  }
  d->perm = gt_mem_alloc_uninit(mem, GT_MEM_DATA, sizeof(int64_t) * (size_t)d->n_train_windows);
  if (!d->perm) {
    gt_data_close(d);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for the window order");
  }
  gt__permute(d);
  return GT_OK;
}

void gt_data_close(gt_data *d) {
  if (d->mem) {
    gt_mem_free(d->mem, d->in);
    gt_mem_free(d->mem, d->tg);
    gt_mem_free(d->mem, d->pos);
  }
  if (d->stream_tracked)
    gt_mem_free(d->mem, d->stream);
  else
    free(d->stream);
  if (d->mem) gt_mem_free(d->mem, d->perm);
  memset(d, 0, sizeof *d);
}

static void gt__fill_row(gt_data *d, int b, int64_t start) {
  for (int t = 0; t < d->T; t++) {
    d->in[b * d->T + t] = d->stream[start + t];
    d->tg[b * d->T + t] = d->stream[start + t + 1];
  }
}

static gt_batch gt__batch(gt_data *d) {
  gt_batch b = {d->B, d->T, d->in, d->tg, d->pos, NULL};
  return b;
}

void gt_data_next_train(gt_data *d, gt_batch *out) {
  if (d->kind == 1) {
    for (int b = 0; b < d->B; b++) {
      if (d->st.cursor >= d->n_train_windows) {
        d->st.epoch++;
        d->st.cursor = 0;
        gt__permute(d);
      }
      gt__fill_row(d, b, d->perm[d->st.cursor++] * d->T);
    }
  }
  *out = gt__batch(d);
}

void gt_data_eval_reset(gt_data *d) { d->eval_cursor = 0; }

void gt_data_next_eval(gt_data *d, gt_batch *out) {
  if (d->kind == 1) {
    for (int b = 0; b < d->B; b++) {
      if (d->eval_cursor >= d->n_eval_windows) d->eval_cursor = 0;
      gt__fill_row(d, b, d->n_train + d->eval_cursor++ * d->T);
    }
  }
  *out = gt__batch(d);
}

gt_rc gt_data_seek(gt_data *d, gt_data_state st, gt_err *err) {
  /* cursor == windows is the position after an epoch's last window (the
   * next batch starts the next epoch); the epoch is incremented from here */
  int64_t nw = d->kind == 1 ? d->n_train_windows : 0;
  if (st.epoch < 0 || st.epoch == INT64_MAX)
    return gt_err_set(err, GT_ERR_CONFIG, "data: saved data_epoch = %lld is outside [0, %lld]", (long long)st.epoch,
                      (long long)(INT64_MAX - 1));
  if (d->kind == 1 && (st.cursor < 0 || st.cursor > nw))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: saved data_cursor = %lld is outside [0, %lld], the training windows of an epoch of "
                      "this data (%lld tokens in windows of %d); was dataset_path, max_target_length or "
                      "eval_split_fraction changed since it was saved?",
                      (long long)st.cursor, (long long)nw, (long long)d->n_train, d->T + 1);
  d->st = st;
  if (d->kind == 1) gt__permute(d);
  return GT_OK;
}
