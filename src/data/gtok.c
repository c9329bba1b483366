/* The .gtok token shard (data.h has the layout): writing, reading whole,
 * and what streaming needs: the header alone, a bounded-memory pass that
 * checks the payload, token ranges of an uncompressed shard by pread, and
 * a compressed shard inflated whole. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_internal.h"

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

gt_rc gt_tokens_write(const char *path, const uint32_t *ids, int64_t n, uint32_t vocab, int compress,
                      gt_err *err) {
  size_t raw = (size_t)n * 4;
  unsigned char *le = malloc(raw ? raw : 1);
  if (!le) return gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory to write '%s'", path);
  for (int64_t i = 0; i < n; i++) gt__put32(le + 4 * i, ids[i]);
  uint32_t crc = (uint32_t)crc32_z(0L, le, raw);
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
  char tmp[4200];
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

static gt_rc gt__header_from(const char *path, const unsigned char *h, uint64_t file_size, gt__gtok_hdr *out,
                             gt_err *err) {
  if (memcmp(h, "GTOK", 4)) return gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' does not start with magic GTOK", path);
  uint32_t ver = gt__get32(h + 4), flags = gt__get32(h + 8);
  if (ver != 1) return gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' has version %u; expected 1", path, ver);
  uint64_t n = gt__get64(h + 16), plen = gt__get64(h + 24);
  if (file_size != GT__TOK_HDR + plen || n > (1ull << 40) || (!(flags & 1) && plen != n * 4))
    return gt_err_set(err, GT_ERR_FORMAT,
                      "tokens: '%s' header says %llu tokens in %llu payload bytes, file has %lld bytes", path,
                      (unsigned long long)n, (unsigned long long)plen, (long long)file_size);
  out->flags = flags;
  out->vocab = gt__get32(h + 12);
  out->crc = gt__get32(h + 32);
  out->n_tokens = (int64_t)n;
  out->payload = plen;
  return GT_OK;
}

static gt_rc gt__pread_all(const char *path, int fd, void *buf, size_t n, off_t off, gt_err *err) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return gt_err_set(err, GT_ERR_IO, "tokens: cannot read '%s' at byte %lld: %s", path, (long long)(off + (off_t)done),
                        k < 0 ? strerror(errno) : "the file is shorter than its header says (changed since it was opened?)");
    done += (size_t)k;
  }
  return GT_OK;
}

gt_rc gt__gtok_header(const char *path, int fd, gt__gtok_hdr *h, gt_err *err) {
  struct stat st;
  if (fstat(fd, &st)) return gt_err_set(err, GT_ERR_IO, "tokens: cannot stat '%s': %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) return gt_err_set(err, GT_ERR_IO, "tokens: '%s' is a directory, expected a file", path);
  unsigned char b[GT__TOK_HDR];
  if (st.st_size < GT__TOK_HDR)
    return gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' is shorter than the %d-byte header", path, GT__TOK_HDR);
  gt_rc rc = gt__pread_all(path, fd, b, sizeof b, 0, err);
  return rc ? rc : gt__header_from(path, b, (uint64_t)st.st_size, h, err);
}

/* Checks a chunk of little-endian ids: the crc runs on, every id < vocab. */
static gt_rc gt__check_ids(const char *path, const unsigned char *p, size_t n_bytes, int64_t first, int64_t vocab,
                           gt_err *err) {
  for (size_t i = 0; i + 4 <= n_bytes; i += 4) {
    uint32_t id = gt__get32(p + i);
    if ((int64_t)id >= vocab)
      return gt_err_set(err, GT_ERR_FORMAT, "data: shard '%s' holds token id %u at index %lld; vocab_size is %lld",
                        path, id, (long long)(first + (int64_t)(i / 4)), (long long)vocab);
  }
  return GT_OK;
}

enum { GT__CHUNK = 4 << 20 };

gt_rc gt__gtok_verify(const char *path, int fd, const gt__gtok_hdr *h, int64_t vocab, gt_err *err) {
  int z = h->flags & 1;
  unsigned char *in = malloc(GT__CHUNK), *out = z ? malloc(GT__CHUNK) : NULL;
  gt_rc rc = GT_OK;
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t total = (uint64_t)h->n_tokens * 4, seen = 0, off = 0;
  size_t have = 0; /* bytes of a partial id at the front of out */
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  int zinit = 0, zr = Z_OK;
  if (!in || (z && !out)) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory to check '%s'", path);
    goto done;
  }
  if (z && inflateInit(&zs) != Z_OK) {
    rc = gt_err_set(err, GT_ERR_NOMEM, "tokens: zlib cannot start on '%s'", path);
    goto done;
  }
  zinit = z;
  while (!rc && (z ? zr != Z_STREAM_END : off < h->payload)) {
    if (!z || zs.avail_in == 0) {
      if (off >= h->payload) break; /* a compressed stream without its end */
      size_t k = h->payload - off < GT__CHUNK ? (size_t)(h->payload - off) : GT__CHUNK;
      if ((rc = gt__pread_all(path, fd, in, k, (off_t)(GT__TOK_HDR + off), err))) break;
      off += k;
      if (!z) { /* GT__CHUNK is a multiple of 4: whole ids */
        crc = crc32_z(crc, in, k);
        rc = gt__check_ids(path, in, k, (int64_t)(seen / 4), vocab, err);
        seen += k;
        continue;
      }
      zs.next_in = in;
      zs.avail_in = (uInt)k;
    }
    zs.next_out = out + have;
    zs.avail_out = (uInt)(GT__CHUNK - have);
    zr = inflate(&zs, Z_NO_FLUSH);
    if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && zs.avail_in == 0)) break;
    size_t got = GT__CHUNK - have - zs.avail_out;
    if (seen + got > total) break;
    crc = crc32_z(crc, out + have, got);
    seen += got;
    size_t whole = (have + got) / 4 * 4;
    rc = gt__check_ids(path, out, whole, (int64_t)((seen - got - have) / 4), vocab, err);
    have = have + got - whole;
    memmove(out, out + whole, have);
  }
  if (!rc && (seen != total || (z && zr != Z_STREAM_END)))
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' payload does not inflate to %lld tokens", path,
                    (long long)h->n_tokens);
  if (!rc && (uint32_t)crc != h->crc)
    rc = gt_err_set(err, GT_ERR_FORMAT, "tokens: '%s' fails its crc32 check (corrupt)", path);
done:
  if (zinit) inflateEnd(&zs);
  free(in);
  free(out);
  return rc;
}

gt_rc gt__gtok_pread(const char *path, int fd, int64_t off, int64_t n, uint32_t *out, gt_err *err) {
  gt_rc rc = gt__pread_all(path, fd, out, (size_t)n * 4, (off_t)(GT__TOK_HDR + off * 4), err);
  if (rc) return rc;
  const unsigned char *p = (const unsigned char *)out;
  for (int64_t i = 0; i < n; i++) out[i] = gt__get32(p + 4 * i); /* in place: reads bytes i*4.. before writing them */
  return GT_OK;
}

gt_rc gt__gtok_inflate(const char *path, int fd, const gt__gtok_hdr *h, uint32_t *out, gt_err *err) {
  unsigned char *in = malloc(GT__CHUNK);
  if (!in) return gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory to read '%s'", path);
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit(&zs) != Z_OK) {
    free(in);
    return gt_err_set(err, GT_ERR_NOMEM, "tokens: zlib cannot start on '%s'", path);
  }
  gt_rc rc = GT_OK;
  uint64_t total = (uint64_t)h->n_tokens * 4, off = 0, done = 0;
  int zr = Z_OK;
  while (!rc && zr != Z_STREAM_END) {
    if (zs.avail_in == 0) {
      if (off >= h->payload) break;
      size_t k = h->payload - off < GT__CHUNK ? (size_t)(h->payload - off) : GT__CHUNK;
      if ((rc = gt__pread_all(path, fd, in, k, (off_t)(GT__TOK_HDR + off), err))) break;
      off += k;
      zs.next_in = in;
      zs.avail_in = (uInt)k;
    }
    uint64_t room = total - done;
    if (room == 0) break; /* more than the header's tokens: the stream cannot end here */
    zs.next_out = (unsigned char *)out + done;
    zs.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
    zr = inflate(&zs, Z_NO_FLUSH);
    done = (uint64_t)((unsigned char *)zs.next_out - (unsigned char *)out);
    if (zr != Z_OK && zr != Z_STREAM_END && !(zr == Z_BUF_ERROR && zs.avail_in == 0)) break;
  }
  inflateEnd(&zs);
  free(in);
  if (!rc && (zr != Z_STREAM_END || done != total))
    rc = gt_err_set(err, GT_ERR_IO, "tokens: '%s' no longer inflates to its %lld tokens (changed since it was checked?)",
                    path, (long long)h->n_tokens);
  if (rc) return rc;
  const unsigned char *p = (const unsigned char *)out;
  for (int64_t i = 0; i < h->n_tokens; i++) out[i] = gt__get32(p + 4 * i);
  return GT_OK;
}

gt_rc gt_tokens_read(const char *path, uint32_t **out, int64_t *n_out, uint32_t *vocab_out, gt_err *err) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return gt_err_set(err, GT_ERR_IO, "tokens: cannot open '%s': %s", path, strerror(errno));
  gt__gtok_hdr h;
  gt_rc rc = gt__gtok_header(path, fd, &h, err);
  if (!rc) rc = gt__gtok_verify(path, fd, &h, (int64_t)1 << 32, err);
  uint32_t *ids = NULL;
  if (!rc && !(ids = malloc(h.n_tokens > 0 ? (size_t)h.n_tokens * 4 : 4)))
    rc = gt_err_set(err, GT_ERR_NOMEM, "tokens: no memory for '%s'", path);
  if (!rc) rc = (h.flags & 1) ? gt__gtok_inflate(path, fd, &h, ids, err) : gt__gtok_pread(path, fd, 0, h.n_tokens, ids, err);
  close(fd);
  if (rc) {
    free(ids);
    return rc;
  }
  *out = ids;
  *n_out = h.n_tokens;
  if (vocab_out) *vocab_out = h.vocab;
  return GT_OK;
}
