#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gemtrain/common.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: gemtrain <command> [config.json] [key=value ...]\n"
          "\n"
          "commands:\n"
          "  train    train a model (default: configs/base.json, the gemma3-small preset on the\n"
          "           King James Bible, byte tokens); 'gemtrain train --help' lists every key.\n"
          "           A run directory with a checkpoint resumes; SIGINT/SIGTERM checkpoint and stop\n"
          "  plan     the memory plan and FLOPs of a training step, without allocating (--json)\n"
          "  bench    time training steps on synthetic data, with time shares;\n"
          "           'bench remat' and 'bench devices' compare remat policies and device counts;\n"
          "           'bench checkpoint' times writing and loading a checkpoint\n"
          "  sweep    run every point of a sweep file (gemtrain sweep <sweep.json> [key=value ...]),\n"
          "           each as its own train process; writes results.jsonl, results.md and plot.svg\n"
          "  convert  Hugging Face Gemma 3 / Gemma 4 checkpoints: 'convert to_hf <src> <out_dir>' and\n"
          "           'convert from_hf <hf_dir> <out_run_dir>' (see gemtrain convert --help)\n"
          "  logit-check  compare the forward pass with golden logits (JSONL): per-token KL divergence,\n"
          "           top-10 agreement, largest difference; exits 1 past max_kl_div / atol\n"
          "  decode   continue a prompt with trained parameters and a KV cache\n"
          "           (gemtrain decode load_parameters_path=RUN_DIR prompt=\"...\" max_decode_steps=N)\n"
          "  tokenize text files into .gtok token shards with a Hugging Face tokenizer.json\n"
          "           (tokenizer_path=FILE output_path=DIR FILE...); --ids / --decode: stdin to ids / text\n"
          "\n"
          "options:\n"
          "  --help     this text\n"
          "  --version  print the version\n"
          "\n"
          "Configs layer as configs/base.json -> configs/models/<model_name>.json -> config.json\n"
          "-> key=value (later wins). Set GEMTRAIN_CONFIG_DIR to use another configs directory.\n");
}

int main(int argc, char **argv) {
  /* A step frees and re-allocates the same activation buffers; keep them in
   * the heap (no mmap per buffer, no trimming) so each step does not pay
   * page faults for memory the previous step just released. The library
   * leaves malloc's settings alone: this is the program's choice. */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("gemtrain %s\n", gt_version());
    return 0;
  }
  if (!strcmp(cmd, "train")) return gt_cmd_train(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return gt_cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "plan")) return gt_cmd_plan(argc - 2, argv + 2);
  if (!strcmp(cmd, "sweep")) return gt_cmd_sweep(argc - 2, argv + 2);
  if (!strcmp(cmd, "convert")) return gt_cmd_convert(argc - 2, argv + 2);
  if (!strcmp(cmd, "logit-check")) return gt_cmd_logit_check(argc - 2, argv + 2);
  if (!strcmp(cmd, "decode")) return gt_cmd_decode(argc - 2, argv + 2);
  if (!strcmp(cmd, "tokenize")) return gt_cmd_tokenize(argc - 2, argv + 2);
  fprintf(stderr,
          "gemtrain: unknown command '%s'; expected train, plan, bench, sweep, convert, logit-check, decode or "
          "tokenize (see gemtrain --help)\n",
          cmd);
  return 2;
}
