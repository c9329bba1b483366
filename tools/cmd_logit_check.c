/* gemtrain logit-check: gemtrain's forward pass against golden logits, as
 * MaxText's forward_pass_logit_checker does it (spec section 7). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exec/exec.h"
#include "decode/logitcheck.h"
#include "train/train.h"

static void gt__lc_print_seq(int s, const gt_golden_seq *g, const gt_logit_cmp *c, int64_t model_vocab) {
  printf("--- sequence %d: %d tokens, vocab %lld (model %lld, golden %lld) ---\n", s, g->n_tokens,
         (long long)c->vocab, (long long)model_vocab, (long long)g->vocab);
  const float *gl = g->logits + (size_t)c->abs_pos * (size_t)g->vocab;
  printf("[numerical difference] max |gemtrain - golden| = %.2e at position %d, vocab index %lld (golden %.6g)\n",
         c->max_abs_diff, c->abs_pos, (long long)c->abs_index, (double)gl[c->abs_index]);
  printf("[top %d tokens of the last position]\n  gemtrain:", c->k);
  for (int i = 0; i < c->k; i++) printf(" %lld", (long long)c->top_model[i]);
  printf("\n  golden:  ");
  for (int i = 0; i < c->k; i++) printf(" %lld", (long long)c->top_golden[i]);
  printf("\n  overlap_count %d/%d, jaccard_similarity %.4f, rank_agreement_percentage %.1f\n", c->overlap, c->k,
         c->jaccard, c->rank_agreement);
  printf("[KL divergence] per token:");
  for (int t = 0; t < c->n_pos; t++) printf("%s%.2e", t ? ", " : " [", c->kl[t]);
  printf("]\n  mean %.3e, max %.3e at index %d (token id %d)\n", c->kl_mean, c->kl_max, c->kl_argmax,
         g->tokens[c->kl_argmax]);
}

int gt_cmd_logit_check(int argc, char **argv) {
  gt_config opt;
  int rc = gt_cli_load_config(argc, argv, &opt);
  if (rc) return rc;
  if (!opt.load_parameters_path[0] || !opt.golden_logits_path[0] || (opt.max_kl_div < 0 && opt.atol < 0)) {
    fprintf(stderr,
            "gemtrain: logit-check: key '%s' is not set; it needs load_parameters_path, golden_logits_path and "
            "max_kl_div and/or atol\n",
            !opt.load_parameters_path[0] ? "load_parameters_path"
            : !opt.golden_logits_path[0] ? "golden_logits_path"
                                         : "max_kl_div");
    return 2;
  }
  gt_err err;
  gt_err_clear(&err);
  gt_golden g;
  if (gt_golden_read(opt.golden_logits_path, &g, &err)) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return 2;
  }
  int max_t = 0;
  for (int s = 0; s < g.n; s++)
    if (g.seqs[s].n_tokens > max_t) max_t = g.seqs[s].n_tokens;
  gt_config cfg = opt; /* its model keys are replaced by the source's (explicit ones must agree) */
  gt_mem mem;
  gt_mem_init(&mem);
  gt_model m;
  gt_hf_info info;
  if ((rc = gt_cli_load_params(opt.load_parameters_path, max_t, &cfg, &m, &mem, &info))) {
    gt_golden_free(&g);
    return rc;
  }
  cfg.threads_per_device = opt.threads_per_device;
  gt_threads_configure(&cfg);
  gt_model_round_params(&m); /* dtype=bfloat16: compute with the bf16 weights, as training does */
  printf("logit-check: %s (%s): %lld layers (pattern %s, window %lld), d=%lld, vocab %lld; %d golden sequence%s from "
         "%s\n",
         opt.load_parameters_path, cfg.model_name, cfg.base_num_decoder_layers, cfg.layer_pattern, cfg.sliding_window_size,
         cfg.base_emb_dim, cfg.vocab_size, g.n, g.n == 1 ? "" : "s", opt.golden_logits_path);
  FILE *out = NULL;
  if (opt.output_logits_path[0] && !(out = fopen(opt.output_logits_path, "w"))) {
    fprintf(stderr, "gemtrain: logit-check: cannot write '%s'\n", opt.output_logits_path);
    rc = 2;
  }
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)max_t), *tg = malloc(sizeof(int32_t) * (size_t)max_t);
  float *logits = gt_mem_alloc_uninit(&mem, GT_MEM_LOGITS, sizeof(float) * (size_t)max_t * (size_t)m.vocab);
  if (!rc && (!pos || !tg || !logits)) {
    fprintf(stderr, "gemtrain: logit-check: no memory for %d x %lld logits\n", max_t, (long long)m.vocab);
    rc = 2;
  }
  double worst_kl = 0, worst_abs = 0, kl_sum = 0;
  long long n_tok = 0;
  for (int t = 0; !rc && t < max_t; t++) pos[t] = t, tg[t] = -1;
  for (int s = 0; !rc && s < g.n; s++) {
    const gt_golden_seq *q = &g.seqs[s];
    for (int t = 0; t < q->n_tokens && !rc; t++)
      if (q->tokens[t] >= m.vocab) {
        fprintf(stderr, "gemtrain: logit-check: sequence %d token %d is id %d, outside the model's vocab_size %lld\n",
                s, t, q->tokens[t], (long long)m.vocab);
        rc = 2;
      }
    gt_batch b = {1, q->n_tokens, q->tokens, tg, pos, NULL};
    if (!rc && gt_exec_forward_logits(&m, &b, logits, &err)) {
      fprintf(stderr, "gemtrain: %s\n", err.msg);
      rc = 2;
    }
    gt_logit_cmp c;
    if (!rc && gt_logit_compare(logits, m.vocab, q->logits, q->vocab, q->n_tokens, &c, &err)) {
      fprintf(stderr, "gemtrain: %s\n", err.msg);
      rc = 2;
    }
    if (rc) break;
    gt__lc_print_seq(s, q, &c, m.vocab);
    if (c.kl_max > worst_kl || isnan(c.kl_max)) worst_kl = c.kl_max;
    if (c.max_abs_diff > worst_abs) worst_abs = c.max_abs_diff;
    kl_sum += c.kl_mean * c.n_pos;
    n_tok += c.n_pos;
    gt_logit_cmp_free(&c);
    if (out && gt_golden_write_line(out, q->tokens, q->n_tokens, logits, m.vocab)) {
      fprintf(stderr, "gemtrain: logit-check: writing '%s' failed\n", opt.output_logits_path);
      rc = 2;
    }
  }
  if (out && fclose(out) && !rc) {
    fprintf(stderr, "gemtrain: logit-check: writing '%s' failed\n", opt.output_logits_path);
    rc = 2;
  }
  if (!rc) {
    int kl_bad = opt.max_kl_div >= 0 && !(worst_kl <= opt.max_kl_div);
    int abs_bad = opt.atol >= 0 && !(worst_abs <= opt.atol);
    char kl_lim[64] = "not checked", abs_lim[64] = "not checked";
    if (opt.max_kl_div >= 0) snprintf(kl_lim, sizeof kl_lim, "max_kl_div %g", opt.max_kl_div);
    if (opt.atol >= 0) snprintf(abs_lim, sizeof abs_lim, "atol %g", opt.atol);
    printf("logit-check: %d sequences, %lld tokens: mean KL %.3e, max KL %.3e (%s), max |diff| %.3e (%s): %s\n", g.n,
           n_tok, kl_sum / (double)n_tok, worst_kl, kl_lim, worst_abs, abs_lim, kl_bad || abs_bad ? "FAIL" : "PASS");
    if (out) printf("logit-check: wrote gemtrain's logits to %s\n", opt.output_logits_path);
    rc = kl_bad || abs_bad;
  }
  free(pos), free(tg);
  gt_mem_free(&mem, logits);
  gt_model_free(&m);
  gt_golden_free(&g);
  return rc;
}
