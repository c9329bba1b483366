/* The command's own helpers: whether dtype=bfloat16 is called slower on a
 * CPU or only as fast (from the kernel in use and the measured peaks), the resume
 * command a run prints, which a POSIX shell must read back as the same
 * arguments, and the benchmarks' median, peak pair and choice of peak. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16_path.h"
#include "kernels/cpu.h"
#include "tools/cli.h"
#include "gt_testutil.h"

START_TEST(test_bf16_verdict) {
  const char *why;
  /* neither AVX-512 nor AVX2, or the FMA emulation: slower whatever the
   * peaks */
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_COPY, 0, 0, &why), GT_CLI_BF16_SLOWER);
  /* which is the CPU's lack only where the portable kernels run; beside
   * AVX2 or AVX-512 kernels only a test switch chooses the copies */
  ck_assert_ptr_nonnull(strstr(why, gt__kernels_path() == GT__PATH_PORTABLE ? "neither AVX-512 nor AVX2" : "(a test switch)"));
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_EMUL, 0, 100, &why), GT_CLI_BF16_SLOWER);
  ck_assert_ptr_nonnull(strstr(why, "emulated"));
  /* vdpbf16ps at half the FMA peak (the Intel Xeon of docs/precision.md:
   * 92 against 185 GFLOP/s): slower */
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_DP, 92, 185, &why), GT_CLI_BF16_SLOWER);
  ck_assert_ptr_nonnull(strstr(why, "below its float32 FMA peak"));
  /* at twice it (Zen 4: 231 against 116) or even: no line */
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_DP, 231, 116, &why), GT_CLI_BF16_NO_CLAIM);
  ck_assert_ptr_null(why);
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_DP, 116, 116, &why), GT_CLI_BF16_NO_CLAIM);
  /* nothing measured: no claim either way */
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_DP, 0, 116, &why), GT_CLI_BF16_NO_CLAIM);
  ck_assert_ptr_null(why);
  /* the widened path: on AVX-512, float32's rate, 0.99-1.01x a float32 step
   * measured (docs/performance.md), so neither slower nor faster; on the
   * AVX2 copy (this process's, where the CPU has AVX2 and no AVX-512)
   * 0.91-1.00x, so slower */
  if (gt__kernels_path() == GT__PATH_AVX2) {
    ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_WIDE, 0, 0, &why), GT_CLI_BF16_SLOWER);
    ck_assert_ptr_nonnull(strstr(why, "no AVX-512"));
  } else {
    ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_WIDE, 0, 0, &why), GT_CLI_BF16_SAME);
  }
  ck_assert_ptr_nonnull(strstr(why, "widened"));
  /* AMX tiles: faster (2.5-2.8x) */
  ck_assert_int_eq(gt_cli_bf16_verdict(GT_BGEMM_AMX, 0, 0, &why), GT_CLI_BF16_NO_CLAIM);
  ck_assert_ptr_null(why);
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

/* bench's median: the middle value, the mean of the two middle ones for an
 * even count (--steps 2 is not its slower step) */
START_TEST(test_bench_median) {
  double odd[3] = {3, 1, 2}, even[2] = {1.0, 3.0}, four[4] = {4, 1, 3, 2};
  ck_assert_double_eq(gt_bench_median(odd, 3), 2);
  ck_assert_double_eq(gt_bench_median(even, 2), 2);
  ck_assert_double_eq(gt_bench_median(four, 4), 2.5);
}
END_TEST

/* fake peaks: one core's worth on 2 threads (another process holds the
 * other), or a plausible pair */
static int fake_calls;
static double one_core(int threads, double seconds) {
  (void)seconds;
  fake_calls++;
  return threads == 1 ? 100.0 : 101.0;
}
static double two_cores(int threads, double seconds) {
  (void)seconds;
  return threads == 1 ? 100.0 : 195.0;
}
static double no_units(int threads, double seconds) {
  (void)threads, (void)seconds;
  return 0.0;
}

START_TEST(test_bench_peaks_fallback) {
  double one, two;
  fake_calls = 0;
  /* implausible after every round: 2 x the 1-thread peak, and a note */
  ck_assert_int_eq(gt_bench_peaks("fp32 FMA", one_core, &one, &two), 1);
  ck_assert_double_eq(one, 100.0);
  ck_assert_double_eq(two, 200.0);
  ck_assert_int_eq(fake_calls, 1 + 5 * 2); /* the untimed warm-up, then 5 rounds of both */
  ck_assert_int_eq(gt_bench_peaks("fp32 FMA", two_cores, &one, &two), 0);
  ck_assert_double_eq(two, 195.0);
  /* no such units (a CPU without vdpbf16ps): 0 for both, no fallback */
  ck_assert_int_eq(gt_bench_peaks("bf16 (vdpbf16ps)", no_units, &one, &two), 0);
  ck_assert_double_eq(two, 0.0);
}
END_TEST

/* bench attention's bf16 rows use the vdpbf16ps peak only where attention
 * runs its tiles on vdpbf16ps (kernels/attention.c's gt__attn_bmode) */
START_TEST(test_bench_attn_bf16_peak) {
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_DP, GT__PATH_AVX512, 1), 1);
  /* widened and AMX: the float32 tile kernels, whatever the CPU has */
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_WIDE, GT__PATH_AVX512, 1), 0);
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_AMX, GT__PATH_AVX512, 1), 0);
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_EMUL, GT__PATH_AVX512, 1), 0);
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_DP, GT__PATH_AVX512, 0), 0);
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_WIDE, GT__PATH_AVX2, 0), 0);
  ck_assert_int_eq(gt_bench_attn_bf16_peak(GT_BGEMM_COPY, GT__PATH_PORTABLE, 1), 0);
}
END_TEST

Suite *cli_suite(void) {
  Suite *s = suite_create("cli");
  TCase *tc = gt_test_tcase(s, "core");
  tcase_add_test(tc, test_bf16_verdict);
  tcase_add_test(tc, test_resume_command_reads_back);
  tcase_add_test(tc, test_bench_median);
  tcase_add_test(tc, test_bench_peaks_fallback);
  tcase_add_test(tc, test_bench_attn_bf16_peak);
  return s;
}

int main(void) { return gt_test_run_suite(cli_suite(), 0); }
