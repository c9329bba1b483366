/* The gemtrain command: one file per subcommand. */
#ifndef GT_CLI_H
#define GT_CLI_H

#include <stdio.h>

#include "config/config.h"
#include "hf/hf.h"
#include "model/model.h"

/* Split argv into an optional leading *.json config file and key=value
 * overrides, load and validate. Prints the error and returns non-zero. */
int gt_cli_load_config(int argc, char **argv, gt_config *cfg);
/* cfg is in/out: the command's config goes in (its explicitly set model keys
 * are checked against the source's). Builds the model that `path` (an HF directory or a gemtrain parameter file)
 * describes into cfg and m, its parameters loaded into mem (no gradients),
 * RoPE tables for max_target_length positions. info (may be NULL) gets what
 * an HF import found. Prints the error and returns non-zero. */
int gt_cli_load_params(const char *path, long long max_target_length, gt_config *cfg, gt_model *m, gt_mem *mem,
                       gt_hf_info *info);
/* A "note:" line to f when an HF Gemma 4 source's layer_scalar buffers hold
 * values other than 1 that the model leaves unused
 * (layer_scalar_trainable=false; hf: what the source counted).
 * gt_cli_load_params prints it; `train` calls gt_cli_source_note, which
 * opens and applies cfg's load_parameters_path on a copy of cfg to learn it
 * (an error there is left for the run to report). */
void gt_cli_scalar_note(const char *path, const gt_hf_info *hf, FILE *f);
void gt_cli_source_note(const gt_config *cfg, FILE *f);
/* The command's exit status for a library result code, so a parent (the
 * sweep runner, a script) learns the outcome without reading the log:
 * 0 done, 2 configuration or usage refused, 3 the memory plan does not fit,
 * 4 stopped on a non-finite step (diverged), 5 stopped by a signal
 * (SIGINT, SIGTERM, SIGUSR1) after a checkpoint: run the resume command the
 * run printed to continue; a sweep stopped so exits 5 too. 1 any other
 * error, and a sweep some of whose points did not end ok. */
enum { GT_EXIT_OK = 0, GT_EXIT_ERROR = 1, GT_EXIT_CONFIG = 2, GT_EXIT_PLAN = 3, GT_EXIT_NUMERIC = 4, GT_EXIT_STOPPED = 5 };
/* How the program was started (main's argv[0]), for the commands a run
 * prints to resume itself. */
extern const char *gt_cli_prog;
/* Prints to f the command line `prog cmd args...` with every key=value of
 * `drop_keys` (a NULL-terminated list of key names) left out and `extra`
 * (key=value texts, NULL-terminated) added, each argument quoted for a
 * POSIX shell when it needs to be. */
void gt_cli_print_command(FILE *f, const char *cmd, int argc, char **argv, const char *const *drop_keys,
                          const char *const *extra);
int gt_cli_exit_code(gt_rc rc);
/* tools/cli_bf16.c: with dtype=bfloat16 (and matmul_precision=default),
 * a line to f saying which path the bf16 products take and how it was
 * chosen (gt_cli_bf16_how's text: kernels/bf16_path.h), and a second when
 * bf16 is likely slower than float32 on this CPU or only as fast.
 * gt_cli_bf16_verdict is that decision (path as gt__bgemm_path(), peaks
 * measured or 0), with the reason in *why (NULL with no claim). */
typedef enum { GT_CLI_BF16_NO_CLAIM, GT_CLI_BF16_SAME, GT_CLI_BF16_SLOWER } gt_cli_bf16_speed;
void gt_cli_bf16_note(const gt_config *cfg, FILE *f);
gt_cli_bf16_speed gt_cli_bf16_verdict(int path, double bf16_peak, double fma_peak, const char **why);
struct gt__bf16_choice;
void gt_cli_bf16_how(const struct gt__bf16_choice *c, char *buf, size_t n);
int gt_cmd_train(int argc, char **argv);
int gt_cmd_bench(int argc, char **argv);
/* gemtrain bench checkpoint (tools/cmd_bench_ckpt.c) */
int gt_bench_checkpoint(int argc, char **argv, int reps);
/* gemtrain bench mpi (cmd_bench_mpi.c) and the median step time of a config
 * it shares with gemtrain bench (cmd_bench.c). */
int gt_bench_mpi(int argc, char **argv, int steps, int mib, int reps);
/* gemtrain bench gemm (tools/cmd_bench_gemm.c): the FMA peak and gt_sgemm per product of a step */
int gt_bench_gemm(int argc, char **argv);
/* gemtrain bench attention (tools/cmd_bench_attn.c): the attention kernels next to the peaks */
int gt_bench_attention(int argc, char **argv);
/* gemtrain bench moe (tools/cmd_bench_moe.c): the routed experts' products against dense ones, by stage */
int gt_bench_moe(int argc, char **argv);
struct gt_config;
int gt_bench_step_seconds(struct gt_config *cfg, int steps, double *step_s);
/* The peak (gt_fma_peak_gflops or gt_bf16_peak_gflops) of 1 and of 2
 * threads, each the best of up to 5 rounds, stopping once two threads give
 * 1.8-2.1 times one: another process holding a core for a second or two
 * lowers a measurement (a 2-thread bf16 peak of 234.5, one core's worth, made
 * every 2-thread share of a bench gemm table read 115-169%). When no round
 * gets there, *two is 2 x *one and a note on stdout names both measured
 * peaks (`what`: "fp32 FMA", ...); returns 1 then, else 0. */
int gt_bench_peaks(const char *what, double (*peak)(int threads, double seconds), double *one, double *two);
/* The median of v[n] (sorts v): the mean of the two middle values for an
 * even n. */
double gt_bench_median(double *v, int n);
/* Whether bench attention divides its bf16 rows by the vdpbf16ps peak: only
 * when attention's bf16 products run on vdpbf16ps itself (path as
 * gt__bgemm_path(), kernels_path as gt__kernels_path(), has_dp: the CPU has
 * the instruction); the widened, AMX and emulated paths and the portable
 * copy run them on float32 FMAs. */
int gt_bench_attn_bf16_peak(int path, int kernels_path, int has_dp);
int gt_cmd_plan(int argc, char **argv);
int gt_cmd_sweep(int argc, char **argv);
int gt_cmd_convert(int argc, char **argv);
int gt_cmd_logit_check(int argc, char **argv);
int gt_cmd_decode(int argc, char **argv);
int gt_cmd_eval(int argc, char **argv);
int gt_cmd_tokenize(int argc, char **argv);
int gt_cmd_data(int argc, char **argv);
/* Test hooks (tools/cli_seams.c): reads the GEMTRAIN_TEST_* variables that
 * inject faults (GEMTRAIN_TEST_CKPT_FAULT="kill:N" or "enospc:N": the N-th
 * checkpoint of the process dies with SIGKILL, or fails with ENOSPC, half-way
 * through its first shard) and arms the library's test-only seams. main()
 * calls it once, before any command runs. */
void gt_cli_install_test_seams(void);
/* The same for a training run: GEMTRAIN_TEST_NAN_STEP and
 * GEMTRAIN_TEST_SIGNAL_STEP into the run's test seams (train/train.h). */
struct gt_train_opts;
void gt_cli_train_test_seams(struct gt_train_opts *o);

/* tools/help.c: every command's help from one table. Prints the help of cmd
 * (sub: a word after it with its own entry, such as bench's "remat"; NULL or
 * an unknown word gives the command's own help) to f; -1 when cmd is not a
 * command. Commands need not handle --help: main.c prints it, wherever it
 * stands; a command that wants its usage on an error path calls this. */
int gt_cli_help(FILE *f, const char *cmd, const char *sub);
/* The top-level usage: each command once, with a one-line summary. */
void gt_cli_usage(FILE *f);

#endif
