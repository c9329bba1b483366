/* gemtrain decode: continue a prompt with a trained model and a KV cache,
 * or answer as the model of a chat: one user turn (chat=true), the records
 * of a JSON Lines chat file (messages_path), or turns read from standard
 * input (--interactive), rendered with the model's chat template. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "decode/decode.h"
#include "decode/text.h"
#include "hf/peft.h"
#include "train/train.h"

/* f: standard output, or standard error in --interactive, whose standard
 * output holds the replies alone */
static void model_line(FILE *f, const gt_model *m, const gt_config *cfg, const char *path) {
  int local = 0, window = 0;
  for (int64_t l = 0; l < m->n_layers; l++)
    if (m->layers[l].window > 0) local++, window = m->layers[l].window;
  fprintf(f, "model: %s, %lld layers (%d local with window %d, %lld global), d=%lld, vocab=%lld; parameters from %s\n",
         cfg->model_name, (long long)m->n_layers, local, window,
         (long long)m->n_layers - local, (long long)m->d, (long long)m->vocab, path);
  /* (PEFT does not check an adapter's base; the user can, from this line) */
  char base[GT_STR_PATH];
  if (cfg->lora_restore_path[0] && gt_peft_base_model(cfg->lora_restore_path, base, sizeof base))
    fprintf(f, "adapters: %s, trained over '%s' (its adapter_config.json)\n", cfg->lora_restore_path, base);
}

/* What the cache of n_prompt + max_new - 1 positions takes (the decoder
 * allocates exactly gt_kv_cache_bytes). */
static void cache_line(const gt_model *m, int64_t n_prompt, int64_t max_new) {
  int64_t max_len = n_prompt + (max_new > 0 ? max_new - 1 : 0), wmax = 0, bytes = gt_kv_cache_bytes(m, max_len);
  for (int64_t l = 0; l < m->n_layers; l++) {
    int64_t w = m->layers[l].window;
    if (w > 0 && (w < max_len ? w : max_len) > wmax) wmax = w < max_len ? w : max_len;
  }
  printf("kv cache: %lld bytes (%.3f MiB) for %lld positions (local layers keep the last %lld, global layers all)\n",
         (long long)bytes, (double)bytes / 1048576.0, (long long)max_len, (long long)wmax);
}

static void stats_lines(const gt_textgen *g, const gt_textgen_out *o, int print_ids) {
  const gt_decode_stats *st = &o->st;
  char why[96];
  gt_textgen_reason_text(g, o, why, sizeof why);
  printf("prefill: %lld tokens in %.4f s, %.1f tokens/s\n", (long long)st->n_prompt, st->prefill_seconds,
         st->prefill_seconds > 0 ? (double)st->n_prompt / st->prefill_seconds : 0.0);
  printf("generate: %lld tokens in %.4f s, %.1f tokens/s (%s)\n", (long long)st->n_new, st->generate_seconds,
         st->generate_seconds > 0 ? (double)st->n_new / st->generate_seconds : 0.0, why);
  if (print_ids) {
    printf("ids: [");
    for (int64_t i = 0; i < o->n_new; i++) printf(i ? ", %d" : "%d", o->ids[i]);
    printf("]\n");
  }
}

/* Prints n bytes of s escaped for the console (text.h), then `end`. */
static gt_rc put_text(const char *s, size_t n, const char *end, gt_err *err) {
  char *e = gt_text_escape(s, n);
  if (!e) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory for the output");
  fputs(e, stdout);
  fputs(end, stdout);
  free(e);
  return GT_OK;
}

/* Renders the conversation, answers it as the model; *o holds the reply. */
static gt_rc answer(gt_textgen *g, const gt_config *cfg, const gt_decode_chat *chat, int64_t max_new, int report,
                    gt_textgen_out *o, gt_err *err) {
  char *text = NULL;
  const char *eot = NULL;
  int32_t *ids = NULL;
  int64_t n = 0;
  gt_rc rc = gt_decode_chat_render(cfg, chat, &text, &eot, err);
  if (!rc) rc = gt_textgen_set_chat(g, cfg, err); /* its end of turn, Gemma 4's thought channel */
  if (!rc) rc = gt_textgen_encode(g, text, &ids, &n, err);
  if (!rc && report) cache_line(g->m, n, max_new);
  if (!rc) rc = gt_textgen_generate(g, ids, n, max_new, o, err);
  free(text);
  free(ids);
  return rc;
}

/* A chat reply: its thought (when the model wrote one) as `thinking: `,
 * then the answer after `head`. */
static gt_rc put_reply(const gt_textgen_out *o, const char *head, gt_err *err) {
  gt_rc rc = GT_OK;
  if (o->thinking && !(rc = put_text("thinking: ", 10, "", err))) rc = put_text(o->thinking, o->thinking_len, "\n", err);
  if (!rc) rc = put_text(head, strlen(head), "", err);
  if (!rc) rc = put_text(o->text, o->len, "\n", err);
  return rc;
}

/* messages_path: each non-empty line a conversation to answer; record k
 * (0-based) samples from stream k of decode_seed, so its answer does not
 * depend on the records before it. */
static gt_rc answer_file(gt_textgen *g, const gt_config *cfg, const char *path, int print_ids, gt_err *err) {
  FILE *f = fopen(path, "r");
  if (!f) return gt_err_set(err, GT_ERR_IO, "decode: cannot open messages_path '%s'", path);
  char *line = NULL;
  size_t cap = 0;
  long long lineno = 0, records = 0;
  gt_rc rc = GT_OK;
  while (!rc && getline(&line, &cap, f) >= 0) {
    lineno++;
    if (!line[strspn(line, " \t\r\n")]) continue;
    char where[GT_STR_PATH + 64];
    snprintf(where, sizeof where, "'%s' line %lld", path, lineno);
    gt_decode_chat chat;
    memset(&chat, 0, sizeof chat);
    gt_textgen_out o;
    memset(&o, 0, sizeof o);
    rc = gt_decode_chat_parse(line, where, &chat, err);
    /* a record that ends with the model's turn (SFT data) is answered
     * without it, and that turn is shown as the reference */
    const gt_decode_turn *ref = NULL;
    if (!rc && chat.n > 1 && (!strcmp(chat.turns[chat.n - 1].role, "assistant") ||
                              !strcmp(chat.turns[chat.n - 1].role, "model")))
      ref = &chat.turns[--chat.n];
    if (!rc) printf("--- %s: %d message%s ---\n", where, chat.n, chat.n == 1 ? "" : "s");
    gt_sampler_reseed(g->smp, (uint64_t)cfg->decode_seed, (uint64_t)records);
    if (!rc) rc = answer(g, cfg, &chat, cfg->max_decode_steps, 1, &o, err);
    if (!rc) stats_lines(g, &o, print_ids), rc = put_reply(&o, "output: ", err);
    if (!rc && ref && !(rc = put_text("reference: ", 11, "", err)))
      rc = put_text(ref->content, strlen(ref->content), "\n", err);
    if (ref) chat.n++; /* freed with the rest */
    if (rc && !strstr(err->msg, where)) {
      char msg[GT_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      gt_err_set(err, rc, "%s (%s)", msg, where);
    }
    gt_textgen_out_free(&o);
    gt_decode_chat_free(&chat);
    records++;
    fflush(stdout);
  }
  free(line);
  fclose(f);
  if (!rc && !records) rc = gt_err_set(err, GT_ERR_FORMAT, "decode: messages_path '%s' holds no record", path);
  return rc;
}

/* --interactive: a user turn per line of standard input; the conversation
 * grows with each turn and reply until end of input. */
static gt_rc interact(gt_textgen *g, const gt_config *opt, const gt_config *cfg, gt_err *err) {
  const int tty = isatty(STDIN_FILENO);
  gt_decode_chat chat;
  memset(&chat, 0, sizeof chat);
  char *line = NULL;
  size_t cap = 0;
  gt_rc rc = GT_OK;
  int first = gt_config_is_user_set(opt, "prompt"); /* prompt=...: the first user turn */
  /* standard output holds the replies alone: the rest goes to standard error */
  fprintf(stderr, "chat: one user turn per line, answered as the model; end of input (Ctrl-D) ends it\n");
  for (;;) {
    const char *turn;
    if (first) {
      turn = opt->prompt;
      first = 0;
      if (tty) fprintf(stderr, "> %s\n", turn);
    } else {
      fflush(stdout);
      if (tty) fprintf(stderr, "> ");
      ssize_t k = getline(&line, &cap, stdin);
      if (k < 0) break;
      while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r')) line[--k] = '\0';
      if (!k) continue;
      turn = line;
    }
    gt_textgen_out o;
    memset(&o, 0, sizeof o);
    /* the history keeps the answer as the turn's content and the thought
     * as its reasoning, which the template leaves out of later prompts */
    if ((rc = gt_decode_chat_add(&chat, "user", turn, err)) ||
        (rc = answer(g, cfg, &chat, cfg->max_decode_steps, 0, &o, err)) || (rc = put_reply(&o, "", err)) ||
        (rc = gt_decode_chat_add_reply(&chat, &o, err))) {
      gt_textgen_out_free(&o);
      break;
    }
    char why[96];
    gt_textgen_reason_text(g, &o, why, sizeof why);
    fprintf(stderr, "prefill: %lld tokens (the conversation so far), generate: %lld tokens (%s)\n",
            (long long)o.st.n_prompt, (long long)o.st.n_new, why);
    gt_textgen_out_free(&o);
    fflush(stdout);
  }
  if (tty && !rc) fprintf(stderr, "\n");
  free(line);
  gt_decode_chat_free(&chat);
  return rc;
}

int gt_cmd_decode(int argc, char **argv) {
  /* options may stand anywhere among the config arguments */
  int print_ids = 0, interactive = 0, n = 0;
  char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (!rest) return 1;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] != '-' || !argv[i][1]) {
      rest[n++] = argv[i];
    } else if (!strcmp(argv[i], "--ids")) {
      print_ids = 1;
    } else if (!strcmp(argv[i], "--interactive") || !strcmp(argv[i], "-i")) {
      interactive = 1;
    } else {
      fprintf(stderr, "gemtrain decode: unknown option '%s'\n", argv[i]);
      free(rest);
      return 2;
    }
  }
  gt_config opt; /* the command line: prompt, chat, stops, sampling, threads */
  int rc = gt_cli_load_config(n, rest, &opt);
  free(rest);
  if (rc) return rc;
  if (!opt.load_parameters_path[0]) {
    fprintf(stderr, "gemtrain: decode: key 'load_parameters_path' is not set; expected a run, checkpoint or Hugging "
                    "Face directory or a parameter file\n");
    return 2;
  }
  if (opt.messages_path[0] && (interactive || gt_config_is_user_set(&opt, "prompt"))) {
    fprintf(stderr, "gemtrain: decode: key 'messages_path' is set with %s; give the conversation one way\n",
            interactive ? "--interactive" : "key 'prompt'");
    return 2;
  }
  const int chat_mode = opt.chat || opt.messages_path[0] || interactive;
  if (opt.enable_thinking && !chat_mode) {
    fprintf(stderr, "gemtrain: decode: key 'enable_thinking' = true, but the prompt is not a chat; thinking is a mode "
                    "of the chat template (set chat=true, messages_path or --interactive)\n");
    return 2;
  }
  /* sampling keys the user set that greedy decoding does not read: a note
   * each (MaxText's configs set them whatever the strategy) */
  if (!strcmp(opt.decode_sampling_strategy, "greedy")) {
    static const char *const unused[] = {"decode_sampling_temperature", "decode_sampling_top_k",
                                         "decode_sampling_nucleus_p", "decode_seed"};
    for (int i = 0; i < 4; i++)
      if (gt_config_is_user_set(&opt, unused[i]))
        fprintf(stderr, "decode: key '%s' has no effect with decode_sampling_strategy=greedy (the most likely token "
                        "each step); set decode_sampling_strategy to weighted, topk or nucleus to sample\n",
                unused[i]);
  }
  gt_err err;
  gt_err_clear(&err);
  gt_mem mem;
  gt_mem_init(&mem);
  gt_config cfg = opt; /* its model keys are replaced by the source's (explicit ones must agree) */
  gt_model m;
  gt_sampler smp;
  gt_textgen g;
  gt_textgen_out o;
  memset(&m, 0, sizeof m);
  memset(&smp, 0, sizeof smp);
  memset(&g, 0, sizeof g);
  memset(&o, 0, sizeof o);
  gt_tokenizer *tok = NULL;
  char **stops = NULL, tok_what[GT_STR_PATH * 2 + 64];
  int n_stops = 0;
  int32_t *ids = NULL;
  int64_t n_prompt = 0, max_new = opt.max_decode_steps;
  gt_rc r;
  if ((r = gt_decode_tokenizer(&opt, opt.load_parameters_path, &tok, tok_what, sizeof tok_what, &err)) ||
      (r = gt_stop_strings_parse(opt.stop, &stops, &n_stops, &err))) {
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    gt_tokenizer_free(tok);
    return r == GT_ERR_NOMEM ? 1 : 2;
  }
  /* the model comes with its own model keys; RoPE tables for the first
   * context (a prompt has at most one token per byte; the decoder makes
   * longer tables itself when a conversation grows) */
  if ((rc = gt_cli_load_params(opt.load_parameters_path, (long long)strlen(opt.prompt) + 1 + max_new, &cfg, &m, &mem,
                               NULL))) {
    gt_tokenizer_free(tok);
    gt_stop_strings_free(stops, n_stops);
    return rc;
  }
  cfg.threads_per_device = opt.threads_per_device;
  gt_threads_configure(&cfg);
  if ((r = gt_textgen_init(&g, &m, tok, &smp, &err)) || (r = gt_sampler_from_config(&smp, &opt, m.vocab, &err)))
    goto out;
  for (int i = 0; i < n_stops; i++)
    if ((r = gt_textgen_add_stop(&g, stops[i], &err))) goto out;
  /* the chat keys against the model's template (enable_thinking needs Gemma 4's) */
  if (chat_mode && (r = gt_decode_chat_check(&cfg, &err))) goto out;
  FILE *info = interactive ? stderr : stdout;
  model_line(info, &m, &cfg, opt.load_parameters_path);
  fprintf(info, "tokenizer: %s\n", tok_what);
  fflush(stdout);
  if (interactive) {
    r = interact(&g, &opt, &cfg, &err);
  } else if (opt.messages_path[0]) {
    r = answer_file(&g, &cfg, opt.messages_path, print_ids, &err);
  } else if (chat_mode) {
    gt_decode_chat chat;
    memset(&chat, 0, sizeof chat);
    if (!(r = gt_decode_chat_add(&chat, "user", opt.prompt, &err)) &&
        !(r = answer(&g, &cfg, &chat, max_new, 1, &o, &err))) {
      stats_lines(&g, &o, print_ids);
      r = put_reply(&o, "output: ", &err);
    }
    gt_decode_chat_free(&chat);
  } else {
    if (!(r = gt_textgen_encode(&g, opt.prompt, &ids, &n_prompt, &err))) {
      cache_line(&m, n_prompt, max_new);
      fflush(stdout);
      r = gt_textgen_generate(&g, ids, n_prompt, max_new, &o, &err);
    }
    if (!r) {
      stats_lines(&g, &o, print_ids);
      if (!(r = put_text("output: ", 8, "", &err)) && !(r = put_text(opt.prompt, strlen(opt.prompt), "", &err)))
        r = put_text(o.text, o.len, "\n", &err);
    }
  }
out:
  free(ids);
  gt_textgen_out_free(&o);
  gt_textgen_free(&g);
  gt_sampler_free(&smp);
  gt_tokenizer_free(tok);
  gt_stop_strings_free(stops, n_stops);
  gt_model_free(&m);
  if (r) {
    fflush(stdout);
    fprintf(stderr, "gemtrain: %s\n", err.msg);
    return r == GT_ERR_CONFIG || r == GT_ERR_FORMAT ? 2 : 1;
  }
  return 0;
}
