/* gemtrain decode: continue a prompt with a trained model and a KV cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/data.h"
#include "decode/decode.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

/* Text <-> ids: <bos> then the prompt, through the Gemma tokenizer when
 * tokenizer_path is set (it never makes more ids than the text has bytes),
 * else the byte tokenizer of the text dataset. */
static gt_rc encode_prompt(const gt_tokenizer *tok, const char *text, int32_t *ids, int64_t *n, gt_err *err) {
  ids[0] = GT_TOK_BOS;
  if (!tok) {
    *n = 1 + gt_bytes_encode((const unsigned char *)text, (int64_t)strlen(text), ids + 1);
    return GT_OK;
  }
  int32_t *t = NULL;
  int64_t k = 0;
  gt_rc rc = gt_tokenizer_encode(tok, text, strlen(text), 0, &t, &k, err);
  if (rc == GT_OK) memcpy(ids + 1, t, (size_t)k * sizeof(int32_t)), *n = 1 + k;
  free(t);
  return rc;
}

/* The text of ids: malloc'd, NUL-terminated. */
static gt_rc decode_text(const gt_tokenizer *tok, const int32_t *ids, int64_t n, char **out, gt_err *err) {
  if (tok) {
    size_t len;
    return gt_tokenizer_decode(tok, ids, n, GT_TOK_DECODE_SKIP_SPECIAL | GT_TOK_DECODE_REPLACE, out, &len, err);
  }
  *out = malloc((size_t)n + 1);
  if (!*out) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the text");
  (*out)[gt_bytes_decode(ids, n, (unsigned char *)*out)] = '\0';
  return GT_OK;
}

static void model_line(const gt_model *m, const gt_config *cfg, const char *path) {
  int local = 0, window = 0;
  for (int64_t l = 0; l < m->n_layers; l++)
    if (m->layers[l].window > 0) local++, window = m->layers[l].window;
  printf("model: %s, %lld layers (%d local with window %d, %lld global), d=%lld, vocab=%lld; parameters from %s\n",
         cfg->model_name, (long long)m->n_layers, local, window,
         (long long)m->n_layers - local, (long long)m->d, (long long)m->vocab, path);
}

int gt_cmd_decode(int argc, char **argv) {
  /* options may stand anywhere among the config arguments */
  int print_ids = 0, n = 0;
  char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (!rest) return 1;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] != '-' || !argv[i][1]) {
      rest[n++] = argv[i];
    } else if (!strcmp(argv[i], "--ids")) {
      print_ids = 1;
    } else {
      fprintf(stderr, "gemtrain decode: unknown option '%s'\n", argv[i]);
      free(rest);
      return 2;
    }
  }
  gt_config opt; /* the command line: prompt, sampling, threads */
  int rc = gt_cli_load_config(n, rest, &opt);
  free(rest);
  if (rc) return rc;
  if (!opt.load_parameters_path[0]) {
    fprintf(stderr, "gemtrain: decode: key 'load_parameters_path' is not set; expected a run, checkpoint or Hugging "
                    "Face directory or a parameter file\n");
    return 2;
  }
  gt_err err;
  gt_err_clear(&err);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_config cfg = opt; /* its model keys are replaced by the source's (explicit ones must agree) */
  gt_model m;
  gt_decoder dec;
  gt_sampler smp;
  gt_decode_stats st;
  memset(&m, 0, sizeof m);
  memset(&dec, 0, sizeof dec);
  memset(&smp, 0, sizeof smp);
  size_t plen = strlen(opt.prompt);
  int64_t max_new = opt.max_decode_steps;
  int32_t *ids = malloc(sizeof(int32_t) * (plen + 1 + (size_t)max_new));
  gt_rc r = GT_OK;
  if (!ids) {
    free(ids);
    fprintf(stderr, "gemtrain: decode: no memory for the prompt\n");
    return 1;
  }
  gt_tokenizer *tok = NULL;
  int64_t n_prompt = 0;
  if ((opt.tokenizer_path[0] && (r = gt_tokenizer_load(opt.tokenizer_path, &tok, &err))) ||
      (r = encode_prompt(tok, opt.prompt, ids, &n_prompt, &err))) {
    free(ids);
    gt_tokenizer_free(tok);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return r == GT_ERR_NOMEM ? 1 : 2;
  }
  int64_t max_len = n_prompt + (max_new > 0 ? max_new - 1 : 0);
  /* the model comes with its own model keys; RoPE tables for the context */
  if ((rc = gt_cli_load_params(opt.load_parameters_path, max_len, &cfg, &m, &mem, NULL))) {
    free(ids);
    gt_tokenizer_free(tok);
    return rc;
  }
  if (!tok && m.vocab < GT_BYTE_VOCAB) {
    r = gt_err_set(&err, GT_ERR_CONFIG, "decode: the model's vocab_size is %lld; the byte tokenizer needs at least %d",
                   (long long)m.vocab, GT_BYTE_VOCAB);
    goto out;
  }
  cfg.threads_per_device = opt.threads_per_device;
  gt_threads_configure(&cfg);
  if ((r = gt_sampler_from_config(&smp, &opt, m.vocab, &err))) goto out;
  if ((r = gt_decoder_init(&dec, &m, max_len, &err))) goto out;
  model_line(&m, &cfg, opt.load_parameters_path);
  int64_t wmax = 0;
  for (int64_t l = 0; l < m.n_layers; l++)
    if (dec.cache.layers[l].window > 0 && dec.cache.layers[l].cap > wmax) wmax = dec.cache.layers[l].cap;
  printf("kv cache: %lld bytes (%.3f MiB) for %lld positions (local layers keep the last %lld, global layers all)\n",
         (long long)gt_mem_cur(&mem, GT_MEM_KVCACHE), (double)gt_mem_cur(&mem, GT_MEM_KVCACHE) / 1048576.0,
         (long long)max_len, (long long)wmax);
  fflush(stdout);
  if ((r = gt_decode_generate(&dec, &smp, ids, n_prompt, max_new, ids + n_prompt, NULL, &st, &err))) goto out;
  printf("prefill: %lld tokens in %.4f s, %.1f tokens/s\n", (long long)st.n_prompt, st.prefill_seconds,
         st.prefill_seconds > 0 ? (double)st.n_prompt / st.prefill_seconds : 0.0);
  printf("generate: %lld tokens in %.4f s, %.1f tokens/s (%s)\n", (long long)st.n_new, st.generate_seconds,
         st.generate_seconds > 0 ? (double)st.n_new / st.generate_seconds : 0.0,
         st.stopped_at_eos ? "stopped at <eos>" : "max_decode_steps reached");
  if (print_ids) {
    printf("ids: [");
    for (int64_t i = 0; i < st.n_new; i++) printf(i ? ", %d" : "%d", ids[n_prompt + i]);
    printf("]\n");
  }
  char *otext = NULL;
  if ((r = decode_text(tok, ids, n_prompt + st.n_new, &otext, &err))) goto out;
  printf("output: %s\n", otext);
  free(otext);
out:
  gt_tokenizer_free(tok);
  gt_sampler_free(&smp);
  gt_decoder_free(&dec);
  gt_model_free(&m);
  free(ids);
  if (r) {
    fflush(stdout);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return r == GT_ERR_CONFIG ? 2 : 1;
  }
  return 0;
}
