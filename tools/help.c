/* Every command's help in one table, so `gemtrain <command> --help` (handled
 * once in main.c, wherever --help stands) and the top-level usage cannot
 * disagree about what a command takes. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sweep/sweep.h"

/* The closing lines of every command that loads a configuration. */
#define GT_HELP_CONFIG                                                                                 \
  "\n"                                                                                                 \
  "Options may stand anywhere among the arguments. The configuration layers as configs/base.json\n"   \
  "-> configs/models/<model_name>.json -> config.json (or MaxText's config.yml) -> key=value\n"      \
  "(later wins); 'gemtrain train --help' lists every key.\n"

static void train_keys(FILE *f) {
  gt_config c;
  gt_err e;
  fprintf(f, "\nkeys (defaults from configs/base.json and the default preset):\n");
  /* the defaults are shown when they load; the key table alone otherwise */
  gt_config_print_help(f, gt_config_load(&c, NULL, NULL, 0, NULL, &e) == GT_OK ? &c : NULL);
}

static void sweep_metrics(FILE *f) {
  fprintf(f, "metrics:");
  for (int i = 0; i < gt_sweep_num_metrics(); i++) fprintf(f, " %s", gt_sweep_metric_name(i));
  fprintf(f, "\n  and tasks/<task>/<field> for an eval_tasks task's scores at the last eval (field: " GT_SWEEP_TASK_FIELDS ")\n");
}

typedef struct help_entry {
  const char *cmd, *sub;   /* sub: a word after cmd (bench remat), or NULL */
  const char *summary;     /* one line in `gemtrain --help`; NULL: not listed there */
  const char *text;        /* the usage line first, then what it does and its options */
  void (*more)(FILE *f);   /* text generated from a table (keys, metrics), or NULL */
} help_entry;

static const help_entry entries[] = {
    {"train", NULL, "train a model; 'gemtrain train --help' lists every configuration key",
     "usage: gemtrain train [config.json|config.yml] [key=value ...]\n"
     "Trains a model (default: configs/base.json, the gemma3-small preset on the King James Bible,\n"
     "byte tokens). A run directory with a checkpoint resumes; SIGINT/SIGTERM write a checkpoint\n"
     "and stop. The last line names the run (run_name=...) and the command that resumes or\n"
     "continues it. Exit status: 0 done, 2 configuration refused, 3 the memory plan does not fit,\n"
     "4 diverged (non-finite steps), 5 stopped by a signal after a checkpoint, 1 any other error.\n"
     "\n"
     "options:\n"
     "  --help  this text\n" GT_HELP_CONFIG,
     train_keys},
    {"plan", NULL, "the memory plan and FLOPs of a training step, without allocating",
     "usage: gemtrain plan [--json] [--fit] [config.json] [key=value ...]\n"
     "Prints the memory plan of one training step (parameters, gradients, optimizer, saved\n"
     "activations per layer, the peak and where it happens, the largest buffers live then),\n"
     "its FLOPs and whether it fits the memory limit, without allocating anything. With\n"
     "load_parameters_path, the model is the one there, as train reads it. When the plan does\n"
     "not fit, it searches the settings that change memory but not the maths (remat policy and\n"
     "scope, micro-batches with gradient_accumulation_steps, num_vocab_tiling, mu_dtype) for\n"
     "the fastest that fits and prints it as a train command (docs/memory-plan.md). Exit\n"
     "status: 0 the plan fits, 3 it does not fit, 2 configuration refused, 1 any other error.\n"
     "\n"
     "options:\n"
     "  --json  print the plan as one JSON object instead (with fits, limit_bytes, suggestion)\n"
     "  --fit   search for the fastest setting that fits even when the plan fits\n"
     "  --help  this text\n" GT_HELP_CONFIG,
     NULL},
    {"bench", NULL, "time training steps on synthetic data (also: bench remat, devices, checkpoint, mpi, gemm, attention, moe)",
     "usage: gemtrain bench [remat|devices|checkpoint|mpi|gemm|attention|moe] [--steps N] [config.json] [key=value ...]\n"
     "Times N training steps (forward, backward, AdamW) after one warm-up step on synthetic data\n"
     "and prints tokens/s and GFLOP/s (the whole step's: every device of every rank), the share of\n"
     "time per kind of work, and the planned and measured peak memory.\n"
     "  gemtrain bench remat       every remat policy and scope, side by side\n"
     "  gemtrain bench devices     1 and 2 devices at the same global batch\n"
     "  gemtrain bench checkpoint  writing and loading a full-state checkpoint\n"
     "  gemtrain bench mpi         collectives and throughput across MPI ranks (tools/bench_mpi.sh)\n"
     "  gemtrain bench gemm        GEMM GFLOP/s of a step's products next to the measured FMA peak\n"
     "  gemtrain bench attention   the attention kernels' GFLOP/s next to the measured peaks\n"
     "  gemtrain bench moe         the routed experts' products against dense ones, the layer by stage\n"
     "('gemtrain bench remat --help' and so on for each.)\n"
     "\n"
     "options:\n"
     "  --steps N  timed steps; the median is reported (default 5)\n"
     "  --help     this text\n" GT_HELP_CONFIG,
     NULL},
    {"bench", "remat", NULL,
     "usage: gemtrain bench remat [--steps N] [config.json] [key=value ...]\n"
     "For every remat policy and scope: one warm-up and N timed training steps on synthetic data.\n"
     "Prints a table of planned and measured peak memory, the median step time relative to\n"
     "remat_policy=none, and the host copies of the offloading policies.\n"
     "\n"
     "options:\n"
     "  --steps N  timed steps per policy; the median is reported (default 5)\n"
     "  --help     this text\n" GT_HELP_CONFIG,
     NULL},
    {"bench", "devices", NULL,
     "usage: gemtrain bench devices [--steps N] [config.json] [key=value ...]\n"
     "Compares 1 device (1 and 2 BLAS/OpenMP threads) with 2 devices (prefetch on and off, layer\n"
     "and block scope) at the same global batch on synthetic data: tokens/s, bytes sent per device\n"
     "per step and the gathered-weight peak.\n"
     "\n"
     "options:\n"
     "  --steps N  timed steps per setup, N >= 1; the median is reported (default 5)\n"
     "  --help     this text\n" GT_HELP_CONFIG,
     NULL},
    {"bench", "mpi", NULL,
     "usage: [mpirun -np R] gemtrain bench mpi [--mib M] [--reps K] [--steps N] [config.json] [key=value ...]\n"
     "Under mpirun (one device per rank): the mesh's all-reduce and reduce-scatter of M MiB across the\n"
     "ranks next to MPI_Allreduce of the same buffer, and tokens/s of the config on R ranks x 1 device x\n"
     "1 thread. Without mpirun: the same collectives between 2 devices of one process, and tokens/s of\n"
     "1 process x 2 devices x 1 thread and of 1 device x 2 threads. tools/bench_mpi.sh runs both.\n"
     "\n"
     "options:\n"
     "  --mib M    collective size in MiB, 1 .. 8191 (default 64)\n"
     "  --reps K   repetitions of each collective, 1 .. 64; the median is reported (default 5)\n"
     "  --steps N  timed training steps; the median is reported (default 5)\n"
     "  --help     this text\n" GT_HELP_CONFIG,
     NULL},
    {"bench", "gemm", NULL,
     "usage: gemtrain bench gemm [tiny|small|270m|small-products|quant|bf16-cpu|tiny-cpu|small-cpu|270m-cpu ...]\n"
     "Measures the fp32 FMA peak of 1 and 2 threads (an assembly loop of 12 independent FMAs),\n"
     "then times gt_sgemm and cblas_sgemm (OpenBLAS as loaded) on 1 and 2 threads on the products\n"
     "of a training step: forward X.W^T, dX = dY.W and dW = dY^T.X of every projection and the\n"
     "vocabulary head of three models (tiny: d256 V4096 B8 T256; small: d640 V32768 B4 T512;\n"
     "270m: gemma3-270m at B1 T512), a 64 x 64 attention tile and one decoding token's products\n"
     "(small-products), each with the beta the step uses (C written or added into). Prints\n"
     "GFLOP/s and the share of the peak, medians of repeated calls. quant: the forward and dX\n"
     "products of small and 270m with W stored as bf16, int8 and nf4 (gt_qgemm, gt_qbgemm) beside\n"
     "gt_sgemm and gt_bgemm on the float W, 2 threads. tiny-cpu, small-cpu, 270m-cpu: gt_sgemm on\n"
     "that model's products on 1 thread timed by the thread's CPU clock (figures that hold on a\n"
     "shared machine), each product's share of the step's product FLOPs and time, and all of them\n"
     "together as a share of the peak. bf16-cpu: likewise for the bf16 paths on small.\n"
     "Without a set named, all of them (about three minutes).\n"
     "\n"
     "options:\n"
     "  --help     this text\n",
     NULL},
    {"bench", "attention", NULL,
     "usage: gemtrain bench attention [--help]\n"
     "Measures the fp32 FMA and bf16 dot-product peaks of 1 and 2 threads, then times the attention\n"
     "kernels' forward and backward (float32 and bf16, 1 and 2 threads) on the local and global\n"
     "layers of the tiny (hd 64, W 64, B8 T256) and small (hd 128, W 128, B4 T512) models and on\n"
     "gemma3-270m (hd 256, B1 T512). Prints GFLOP/s by MaxText's count (the band of a window, half\n"
     "of T^2 when causal; backward = 2 x forward) and the share of the peak, medians of repeated\n"
     "calls (about half a minute).\n"
     "\n"
     "options:\n"
     "  --help     this text\n",
     NULL},
    {"bench", "moe", NULL,
     "usage: gemtrain bench moe [B=4] [T=1024] [d=512] [E=128] [k=8] [F=256] [threads=2] [reps=5]\n"
     "                          [rounds=3] [bf16=0]\n"
     "Times the routed experts of one MoE layer (kernels/moe.h) on random weights and a random,\n"
     "near-uniform routing: the expert products alone (forward and backward) by their active FLOPs\n"
     "(routed rows only) as a share of the fp32 FMA peak, beside the same projections as one dense\n"
     "product over all N*k rows and a dense MLP of F' = k*F over the N tokens (the same FLOPs), with\n"
     "the ratios; then the whole layer's time by stage (routing, sort, gather, experts, combine,\n"
     "norms). Defaults: gemma4-26b's 128 experts, top-8, at d512 F256 and 4096 tokens (256 rows\n"
     "an expert).\n"
     "\n"
     "options:\n"
     "  --help     this text\n",
     NULL},
    {"bench", "checkpoint", NULL,
     "usage: gemtrain bench checkpoint [--steps N] [config.json] [key=value ...]\n"
     "Writes (with fsync) and reads back (every crc32 checked) a full-state checkpoint of the\n"
     "configured model (parameters and both AdamW moments), stored raw and with zlib levels 1\n"
     "and 6, under base_output_directory, then removes it.\n"
     "\n"
     "options:\n"
     "  --steps N  repetitions; the best is reported (default 3)\n"
     "  --help     this text\n" GT_HELP_CONFIG,
     NULL},
    {"sweep", NULL, "run every point of a sweep file as its own train process; tabulate and plot",
     "usage: gemtrain sweep [--retry-failed] [--dry-run] <sweep.json> [key=value ...]\n"
     "Runs each point of the sweep as its own 'gemtrain train' process (run directory\n"
     "<sweep dir>/runs/point-<k>, console log runs/point-<k>.log), then writes results.jsonl,\n"
     "results.md (a table sorted as asked) and plot.svg in the sweep directory\n"
     "(output_directory, default <base_output_directory>/<sweep file stem>).\n"
     "key=value arguments apply to every point and win over the file's keys ('gemtrain train --help'\n"
     "lists them); a key the grid or the points sweep is refused. Options may stand anywhere\n"
     "among the arguments.\n"
     "A sweep rerun in the same directory skips the points results.jsonl already records with the\n"
     "same resolved configuration.\n"
     "SIGINT/SIGTERM: no new point starts, the running ones stop after their step (a checkpoint\n"
     "first, when enabled) and stay pending, and the command that continues is printed.\n"
     "Exit status: 0 every point ok, 1 some point not ok, 2 the sweep file or base configuration\n"
     "refused, 5 stopped.\n"
     "\n"
     "options:\n"
     "  --retry-failed  rerun every recorded point whose status is not ok\n"
     "  --dry-run       check every point (config and memory plan) and print the table;\n"
     "                  run and write nothing\n"
     "  --help          this text\n"
     "\n"
     "sweep file keys: base {config, overrides}, grid {key: [values]}, grids [grid, ...],\n"
     "points [{key: value}, ...], steps, metrics [names], sort_by, sort_desc, plot {x, y},\n"
     "max_parallel, point_timeout_s, output_directory, description.\n"
     "\n"
     "statuses, from how a point's process ended: exit 0 ok (with its metrics.jsonl),\n"
     "2 config_error, 3 does_not_fit (the memory plan is over the limit), 4 diverged\n"
     "(a non-finite step), 5 pending (stopped after a checkpoint: resumed on the next run), any\n"
     "other exit failed; a signal crashed; killed at point_timeout_s timeout. A point whose\n"
     "configuration is refused never starts: config_error.\n",
     sweep_metrics},
    {"convert", NULL,
     "Hugging Face Gemma 3 / Gemma 4 checkpoints in (from_hf) and out (to_hf), LoRA adapters as PEFT (to_peft)",
     "usage: gemtrain convert to_hf <src> <out_dir> [dtype=bfloat16|float32] [max_shard_size=BYTES]\n"
     "                              [pad_vocab=auto|true|false]\n"
     "       gemtrain convert to_hf init <out_dir> [options above] [init_norm_std=X] [config.json] "
     "[key=value ...]\n"
     "       gemtrain convert to_hf <hf_dir> <out_dir> lora_restore_path=<peft_dir> [lora_weight_qtype=Q]\n"
     "                              [lora_embedding_qtype=E]\n"
     "       gemtrain convert to_peft <run | hf_dir> <out_dir> [lora_restore_path=<peft_dir>]\n"
     "       gemtrain convert from_hf <hf_dir> <out_run_dir | out.safetensors>\n"
     "\n"
     "Adapters (docs/huggingface.md, Hugging Face PEFT): to_hf of a run that trained LoRA adapters\n"
     "(or of an HF directory with lora_restore_path) merges them, W + scale * B A over the\n"
     "(dequantized) base; to_peft writes them as a PEFT directory (adapter_config.json,\n"
     "adapter_model.safetensors) that PeftModel.from_pretrained loads on the HF base. to_hf also\n"
     "writes the tokenizer files (from the HF directory the source descends from, or the run's\n"
     "tokenizer_path) and generation_config.json beside the weights.\n"
     "\n"
     "to_hf writes <out_dir>/config.json (Gemma3ForCausalLM / gemma3_text, or for decoder_block gemma4*\n"
     "Gemma4ForCausalLM / gemma4_text) and model.safetensors (or model-0000k-of-0000n.safetensors\n"
     "shards of at most max_shard_size bytes plus model.safetensors.index.json) with Hugging Face\n"
     "names (model.*). <src> is a gemtrain checkpoint (a step, checkpoints or run directory: its\n"
     "latest good checkpoint), a parameter file (gt_ctx_save, or convert from_hf), an HF directory\n"
     "(re-export), or 'init': a fresh model initialised from init_weights_seed with the\n"
     "configuration given as for 'train' ('gemtrain train --help' lists the keys). init_norm_std > 0\n"
     "also draws the norm weights from normal(0, init_norm_std) around the identity: w of\n"
     "Gemma 3's (1 + w) around 0, Gemma 4's stored scales and layer_scalar around 1.\n"
     "A Gemma 3 262144-token embedding keeps its 262144 rows (1b, 270m) unless the source came\n"
     "from an HF table of 262208 rows (4b and up: the HF directory it descends from, or the rows\n"
     "convert from_hf recorded), which gets zero rows appended, as MaxText does (pad_vocab=auto);\n"
     "pad_vocab=true pads, pad_vocab=false does not. Gemma 4 layers all get a layer_scalar (1\n"
     "when not trained). Before writing, to_hf removes an earlier export's model.safetensors,\n"
     "model-*-of-*.safetensors shards and index from <out_dir>.\n"
     "\n"
     "from_hf reads an HF Gemma 3 or Gemma 4 directory (config.json: gemma3_text / gemma4_text, or\n"
     "the gemma3 / gemma4 wrapper with text_config; tensors model.*, model.language_model.* or\n"
     "language_model.model.*, F32/BF16/F16, one file or shards) and writes a gemtrain checkpoint\n"
     "(<out>/checkpoints/step_00000000, parameters with zero AdamW moments;\n"
     "load_parameters_path=<out> starts a run from it) or, for a name ending in .safetensors, a\n"
     "gemtrain parameter file; either holds the model's config and the rows of the HF embedding.\n"
     "Tensors other than the text decoder's (vision and audio towers, projectors) are counted and\n"
     "skipped; a Gemma 3 262208-row embedding is cut to 262144 rows. Gemma 4 layer_scalar buffers\n"
     "are loaded only with layer_scalar_trainable=true (the default); k/v tensors of KV-shared\n"
     "layers are skipped, as transformers does.\n"
     "\n"
     "options:\n"
     "  --help  this text\n",
     NULL},
    {"logit-check", NULL, "compare the forward pass with golden logits (KL divergence, top-10)",
     "usage: gemtrain logit-check [config.json] load_parameters_path=PATH golden_logits_path=FILE\n"
     "                            max_kl_div=X [atol=Y] [output_logits_path=FILE] [key=value ...]\n"
     "Runs gemtrain's forward pass over each golden sequence (JSONL, one object per line:\n"
     "{\"tokens\": [ids], \"logits\": [[V floats] per position]}) and prints, per sequence, the\n"
     "largest logit difference, the top-10 tokens of the last position with their overlap, Jaccard\n"
     "similarity and rank agreement, and the per-token KL divergence KL(golden || gemtrain) with\n"
     "its mean and max. Exits 1 when a token's KL exceeds max_kl_div or (atol given) a logit\n"
     "differs by more than atol, 0 when everything is within them. PATH is a gemtrain checkpoint\n"
     "(step, checkpoints or run directory), a Hugging Face directory (its config.json defines the\n"
     "model) or a gemtrain parameter file; a model key given here must agree with the model's.\n"
     "\n"
     "options:\n"
     "  --help  this text\n" GT_HELP_CONFIG,
     NULL},
    {"eval", NULL, "score a model: held-out loss and perplexity, multiple-choice tasks (acc, acc_norm)",
     "usage: gemtrain eval [--json FILE|-] [--samples FILE] [--limit N] [--format auto|mc|hellaswag|mmlu]\n"
     "                     [--whole] [config.json]\n"
     "                     [load_parameters_path=PATH] [eval_tasks=A.jsonl,B.jsonl] [dataset_path=FILE]\n"
     "                     [key=value ...]\n"
     "Scores a model without training it, on num_devices devices (and MPI ranks) as training\n"
     "would. load_parameters_path is a run or checkpoint directory, a Hugging Face directory or\n"
     "a gemtrain parameter file (enable_lora=true lora_restore_path=DIR adds adapters); its\n"
     "tokenizer is the one decode would use. eval_tasks: JSON Lines multiple-choice files, each\n"
     "line {\"context\", \"choices\", \"label\"}, a HellaSwag row or an MMLU row, scored as\n"
     "lm-evaluation-harness does (acc, acc_norm, acc_bytes with standard errors). When a data\n"
     "key is set (dataset_path, eval_dataset_path, dataset_type), the loss and perplexity of\n"
     "every held-out row: the eval_split_fraction of dataset_path, or eval_dataset_path whole.\n"
     "Prints a table; docs/evaluation.md has the formats and definitions.\n"
     "\n"
     "options:\n"
     "  --json FILE  also write the results as one JSON object to FILE ('-': standard output,\n"
     "               the table then goes to standard error)\n"
     "  --samples FILE  one JSON line per example: each choice's log-likelihood, what acc and\n"
     "               acc_norm picked\n"
     "  --limit N    score only the first N examples of each task\n"
     "  --format F   read every task record as F (default auto: by its fields)\n"
     "  --whole      the held-out loss over the whole of dataset_path (every row, training part too;\n"
     "               an eval_dataset_path beside it is not scored)\n"
     "  --help       this text\n" GT_HELP_CONFIG,
     NULL},
    {"decode", NULL, "continue a prompt, or answer as a chat, with trained parameters and a KV cache",
     "usage: gemtrain decode [--ids] [--interactive] [config.json] load_parameters_path=PATH\n"
     "                       prompt=\"text\" [chat=true] [messages_path=FILE] [stop=...]\n"
     "                       max_decode_steps=N [key=value ...]\n"
     "Continues the prompt: one pass over it (prefill), then one token per step against a KV\n"
     "cache, until <eos>, a stop string or max_decode_steps new tokens. load_parameters_path is a\n"
     "run or checkpoint directory, a Hugging Face directory or a gemtrain parameter file; each\n"
     "carries its model's configuration (a model key given here must agree with it) and its\n"
     "tokenizer (the run's tokenizer_path, the directory's tokenizer.json; tokenizer_path=FILE\n"
     "names another, tokenizer_path= asks for byte tokens). Sampling:\n"
     "decode_sampling_strategy=greedy|weighted|topk|nucleus, decode_sampling_temperature,\n"
     "decode_sampling_top_k, decode_sampling_nucleus_p, decode_seed.\n"
     "As a chat, rendered with the model's chat template and ended at the end of its turn:\n"
     "chat=true answers prompt as one user turn; messages_path=FILE answers each JSON Lines\n"
     "record {\"messages\": [...]}; --interactive reads one user turn per line of standard input.\n"
     "stop=TEXT or stop='[\"a\", \"b\"]' ends the reply before the first stop string. Output is\n"
     "escaped for the console (control bytes, invalid UTF-8).\n"
     "\n"
     "options:\n"
     "  --ids          also print the new token ids as a JSON array\n"
     "  --interactive  (-i) a chat: one user turn per line of standard input, the conversation kept\n"
     "  --help         this text\n" GT_HELP_CONFIG,
     NULL},
    {"tokenize", NULL, "text or JSON Lines files into .gtok token shards",
     "usage: gemtrain tokenize [tokenizer_path=FILE] output_path=DIR [key=value ...] FILE...\n"
     "       gemtrain tokenize tokenizer_path=FILE --ids [add_bos=false] < text > ids.json\n"
     "       gemtrain tokenize tokenizer_path=FILE --decode < ids.json > text\n"
     "\n"
     "Encodes each text FILE as one document (<bos> text <eos>), and each record of a JSON Lines FILE\n"
     "(*.jsonl, *.json, plain or .gz) as one document of its train_data_columns field, with a Hugging\n"
     "Face tokenizer.json (Gemma 3's: tools/setup.sh fetches it to data/tokenizers/gemma3/tokenizer.json;\n"
     "without tokenizer_path: byte tokens) and writes the stream as DIR/shard-00000.gtok, ... for\n"
     "dataset_type=tokens dataset_path=DIR.\n"
     "\n"
     "options:\n"
     "  --ids     print the ids of standard input as one JSON array\n"
     "  --decode  read such an array on standard input and write its text (byte-fallback bytes\n"
     "            raw, special tokens as their text)\n"
     "  --help    this text\n"
     "\n"
     "keys (tokenize's own; not configuration keys):\n"
     "  tokenizer_path  the tokenizer.json (required with --ids and --decode; shards: byte tokens without)\n"
     "  output_path     directory for the shards (created; must not hold .gtok shards already)\n"
     "  shard_tokens    tokens per shard (default 16777216; the last shard holds the rest)\n"
     "  add_bos         <bos> before each document (default true; with --ids: false)\n"
     "  add_eos         <eos> after each document (default true)\n"
     "  compress        zlib-compress the shards (default true; false: shards are read by range while\n"
     "                  training, compressed ones are inflated one at a time)\n"
     "  train_data_columns  the text field of JSON Lines records (default text)\n"
     "Options, keys and files may stand in any order; the files are read in the order given.\n",
     NULL},
    {"data", NULL, "print the first batches the trainer will read: ids, targets, segments, text",
     "usage: gemtrain data [--batches N] [--rows R] [--eval] [--time N] [config.json] [key=value ...]\n"
     "Opens the data exactly as 'gemtrain train' would with the same configuration and prints how\n"
     "sequences are made and ordered, then the first N training batches: per row the input ids, the\n"
     "targets (-1: not in the loss), the segment ids (one per document; 0: padding) and the positions,\n"
     "and per document its text and the text of the tokens the loss trains it to predict (decoded with\n"
     "tokenizer_path, or as byte tokens). See docs/data.md.\n"
     "\n"
     "options:\n"
     "  --batches N  batches to print (default 1)\n"
     "  --rows R     print only the first R rows of each batch\n"
     "  --eval       the eval batches instead (eval_dataset_path or the held-out tail)\n"
     "  --time N     read N batches without printing them and report the time per batch\n"
     "  --help       this text\n" GT_HELP_CONFIG,
     NULL},
};

enum { N_ENTRIES = (int)(sizeof entries / sizeof entries[0]) };

int gt_cli_help(FILE *f, const char *cmd, const char *sub) {
  const help_entry *found = NULL;
  for (int i = 0; i < N_ENTRIES && !found; i++)
    if (!strcmp(entries[i].cmd, cmd) && sub && entries[i].sub && !strcmp(entries[i].sub, sub)) found = &entries[i];
  /* a word without its own entry gets the command's help */
  for (int i = 0; i < N_ENTRIES && !found; i++)
    if (!strcmp(entries[i].cmd, cmd) && !entries[i].sub) found = &entries[i];
  if (!found) return -1;
  fputs(found->text, f);
  if (found->more) found->more(f);
  return 0;
}

void gt_cli_usage(FILE *f) {
  fprintf(f, "usage: gemtrain <command> [options] [config.json] [key=value ...]\n"
             "       gemtrain <command> --help   the command's usage, options and arguments\n"
             "\n"
             "commands:\n");
  for (int i = 0; i < N_ENTRIES; i++)
    if (entries[i].summary) fprintf(f, "  %-12s %s\n", entries[i].cmd, entries[i].summary);
  fprintf(f, "\n"
             "options:\n"
             "  --help     this text\n"
             "  --version  print the version\n"
             "\n"
             "Options may stand anywhere among a command's arguments. Configs layer as configs/base.json\n"
             "-> configs/models/<model_name>.json -> config.json -> key=value (later wins). Set\n"
             "GEMTRAIN_CONFIG_DIR to use another configs directory.\n");
}
