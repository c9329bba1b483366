/* A `latest` file of arbitrary bytes is quoted in the walk-back message
 * with its non-printable bytes (and backslashes) as \xNN: a terminal never
 * receives a damaged file's raw control bytes (an escape sequence could
 * rewrite the screen or the title). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "gt_testutil.h"

static void keep_line(void *ctx, const char *line) { snprintf((char *)ctx, 2048, "%s", line); }

START_TEST(test_latest_bytes_escaped) {
  char *dir = gt_test_mkdtemp("ckpt_latest_bytes");
  char *root = gt_test_path(dir, "checkpoints"), *lp = gt_test_path(root, "latest");
  ck_assert_int_eq(mkdir(root, 0755), 0);
  /* ESC ] 0 ; x BEL (sets a terminal's title), a CSI byte, a backslash */
  static const unsigned char bytes[] = {'s', 0x1b, ']', '0', ';', 'x', 0x07, 0x9b, '2', 'J', '\\', 0xff, '\n'};
  FILE *f = fopen(lp, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(bytes, 1, sizeof bytes, f), sizeof bytes);
  fclose(f);
  char logged[2048] = "";
  gt_ckpt_loaded ld;
  gt_err e;
  /* no step directory: the walk logs latest's content, then finds nothing */
  ck_assert_int_eq(gt_ckpt_load_latest(dir, NULL, NULL, NULL, NULL, &ld, keep_line, logged, &e), GT_ERR_IO);
  ck_assert_msg(strstr(logged, "/latest' names 's\\x1b]0;x\\x07\\x9b2J\\x5c\\xff', not a step directory"), "'%s'",
                logged);
  for (const char *c = logged; *c; c++)
    ck_assert_msg((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f, "'%s'", logged);
  gt_test_rm_rf(dir);
  free(lp), free(root), free(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt_latest");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_latest_bytes_escaped);
  return gt_test_run_suite(s, 0);
}
