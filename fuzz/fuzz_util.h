/* What every libFuzzer harness needs around the library: a private scratch
 * directory for the inputs that the library reads from a path, and a check
 * that the library printed nothing on stdout (library code never prints;
 * stderr is libFuzzer's own, so only stdout can be watched).
 *
 * Header-only on purpose: each harness is one translation unit linked with
 * -fsanitize=fuzzer, and nothing here is worth a library of its own. */
#ifndef GT_FUZZ_UTIL_H
#define GT_FUZZ_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char gt_fuzz_dir_[512];

/* Removes the scratch directory at exit: a few fixed names, no recursion. */
static inline void gt_fuzz_cleanup_(void) {
  static const char *names[] = {"input.bin", "input.json", "input.jsonl", "stdout.txt", "model.safetensors",
                                "step_00000007/shard_00000-of-00001.gtck", "step_00000007", NULL};
  char p[600];
  for (int i = 0; names[i]; i++) {
    snprintf(p, sizeof p, "%s/%s", gt_fuzz_dir_, names[i]);
    if (unlink(p)) rmdir(p);
  }
  rmdir(gt_fuzz_dir_);
}

/* The scratch directory (made once per process, under $TMPDIR or /tmp);
 * stdout is sent to a file in it so gt_fuzz_check_quiet can see a print. */
static inline const char *gt_fuzz_dir(void) {
  if (gt_fuzz_dir_[0]) return gt_fuzz_dir_;
  const char *t = getenv("TMPDIR");
  snprintf(gt_fuzz_dir_, sizeof gt_fuzz_dir_, "%s/gtfuzz_XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(gt_fuzz_dir_)) {
    perror("fuzz: mkdtemp");
    abort();
  }
  atexit(gt_fuzz_cleanup_);
  char p[600];
  snprintf(p, sizeof p, "%s/stdout.txt", gt_fuzz_dir_);
  fflush(stdout);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || dup2(fd, 1) < 0) {
    perror("fuzz: redirecting stdout");
    abort();
  }
  close(fd);
  return gt_fuzz_dir_;
}

/* <scratch>/<name>, in buf. */
static inline const char *gt_fuzz_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", gt_fuzz_dir(), name);
  return buf;
}

/* Writes the input to <scratch>/<name>; returns the path (static storage). */
static inline const char *gt_fuzz_write(const char *name, const void *data, size_t size) {
  static char p[600];
  gt_fuzz_path(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
    perror("fuzz: writing the input file");
    abort();
  }
  return p;
}

/* A NUL-terminated copy of the input (the caller frees). */
static inline char *gt_fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  if (size) memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* With GT_FUZZ_VERBOSE set, says why the library refused an input (to see
 * what a seed or a reproducer reaches). */
static inline void gt_fuzz_note(const char *what, const char *msg) {
  if (getenv("GT_FUZZ_VERBOSE")) fprintf(stderr, "fuzz: %s: %s\n", what, msg);
}

/* Aborts (a finding) when the library wrote to stdout. */
static inline void gt_fuzz_check_quiet(void) {
  fflush(stdout);
  struct stat sb;
  if (fstat(1, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
    fprintf(stderr, "fuzz: the library printed %lld bytes on stdout (library code never prints)\n",
            (long long)sb.st_size);
    abort();
  }
}

/* base.json and its default preset, the start of every config harness: a
 * harness that cannot load them is broken, not fuzzed, so it stops. */
static inline void gt_fuzz_load_defaults(gt_config *cfg) {
  gt_err e;
  if (gt_config_load(cfg, GT_FUZZ_CONFIG_DIR, NULL, 0, NULL, &e)) {
    fprintf(stderr, "fuzz: cannot load the default config: %s\n", e.msg);
    abort();
  }
}

#endif
