/* The command's own helpers: whether dtype=bfloat16 is called slower on a
 * CPU (from the kernel in use and the measured peaks), and the resume
 * command a run prints, which a POSIX shell must read back as the same
 * arguments. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "gt_testutil.h"

START_TEST(test_bf16_verdict) {
  /* no AVX-512, or the FMA emulation: slower whatever the peaks */
  ck_assert_ptr_nonnull(gt_cli_bf16_verdict(0, 0, 0));
  ck_assert_ptr_nonnull(gt_cli_bf16_verdict(1, 0, 100));
  /* vdpbf16ps at half the FMA peak (the Intel Xeon of docs/precision.md:
   * 92 against 185 GFLOP/s): slower */
  ck_assert_ptr_nonnull(gt_cli_bf16_verdict(2, 92, 185));
  /* at twice it (Zen 4: 231 against 116): not slower, no line */
  ck_assert_ptr_null(gt_cli_bf16_verdict(2, 231, 116));
  ck_assert_ptr_null(gt_cli_bf16_verdict(2, 116, 116));
  /* nothing measured: no claim either way */
  ck_assert_ptr_null(gt_cli_bf16_verdict(2, 0, 116));
  /* the widened path: float32's rate plus the conversions (0.91-0.98x
   * measured); AMX tiles: faster (1.98x) */
  ck_assert_ptr_nonnull(gt_cli_bf16_verdict(3, 0, 0));
  ck_assert_ptr_null(gt_cli_bf16_verdict(4, 0, 0));
}
END_TEST

START_TEST(test_resume_command_reads_back) {
  char *dir = gt_test_mkdtemp("cli");
  char *path = gt_test_path(dir, "cmd.txt");
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  char *argv[] = {"steps=5", "run_name=old", "sample_prompt=it's a \"test\" $HOME", "dataset_path=a b.txt",
                  "learning_rate=1e-3"};
  const char *drop[] = {"run_name", NULL}, *extra[] = {"run_name=new one", NULL};
  gt_cli_prog = "gemtrain";
  gt_cli_print_command(f, "train", 5, argv, drop, extra);
  fclose(f);
  /* the shell splits it into the same words: one per line */
  char *out = gt_test_path(dir, "words.txt");
  ck_assert_int_eq(gt_test_system("sh -c 'eval \"set -- $(cat %s)\"; printf \"%%s\\n\" \"$@\"' > %s", path, out), 0);
  char *words = gt_test_read_file(out, NULL);
  ck_assert_str_eq(words,
                   "gemtrain\ntrain\nsteps=5\nsample_prompt=it's a \"test\" $HOME\ndataset_path=a b.txt\n"
                   "learning_rate=1e-3\nrun_name=new one\n");
  free(words), free(out), free(path);
  gt_test_system("rm -rf '%s'", dir);
  free(dir);
}
END_TEST

Suite *cli_suite(void) {
  Suite *s = suite_create("cli");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_bf16_verdict);
  tcase_add_test(tc, test_resume_command_reads_back);
  return s;
}

int main(void) { return gt_test_run_suite(cli_suite(), 0); }
