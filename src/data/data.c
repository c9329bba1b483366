/* gt_data: the sources opened from the config, the train/eval split, the
 * batches (a process's rows only), the resume position and the words that
 * describe all of it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"
#include "dist/dist.h"

static int gt__whole_records(const gt_config *c) { return c->use_sft || !c->packing; }

/* MaxText's synthetic data: uniform ids in [0, V), [global_batch, T+1],
 * generated once; the rows this process does not fill are padding. */
static void gt__synthetic(gt_data *d, int64_t vocab) {
  uint64_t s = d->seed + 1;
  /* the rows of the replicas before this one are drawn and dropped */
  for (int64_t k = 0; k < (int64_t)d->rep * d->B * (d->T + 1); k++) gt_splitmix64(&s);
  for (int b = 0; b < d->B; b++) {
    int32_t prev = (int32_t)(gt_splitmix64(&s) % (uint64_t)vocab);
    for (int t = 0; t < d->T; t++) {
      int32_t next = (int32_t)(gt_splitmix64(&s) % (uint64_t)vocab);
      int64_t i = (int64_t)b * d->T + t;
      d->in[i] = prev;
      d->tg[i] = next;
      d->pos[i] = t;
      prev = next;
    }
    if (b < d->row0 || b >= d->row0 + d->nrows)
      gt__blank_row(d->T, d->in + (int64_t)b * d->T, d->tg + (int64_t)b * d->T, d->pos + (int64_t)b * d->T, NULL);
  }
}

static gt_rc gt__refuse_config(const gt_config *c, gt_err *err) {
  int jsonl = !strcmp(c->dataset_type, "jsonl");
  if (c->use_dpo && !jsonl)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'use_dpo' = true needs dataset_type=jsonl (preference records: prompt/chosen/rejected "
                      "or chat messages); dataset_type is '%s'",
                      c->dataset_type);
  if (c->use_dpo && c->use_sft)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: keys 'use_dpo' = true and 'use_sft' = true: preference records are read by use_dpo alone "
                      "(the loss covers each response; ORPO's SFT term is the chosen one's); set use_sft=false");
  double pd = c->per_device_batch_size;
  if (c->use_dpo && (pd != floor(pd) || fmod(pd, 2.0) != 0.0))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: use_dpo: key 'per_device_batch_size' = %g; preference rows come in pairs (chosen in row "
                      "2i, rejected in row 2i + 1), so each device needs whole row pairs: an even number",
                      pd);
  if (c->use_sft && !jsonl)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'use_sft' = true needs dataset_type=jsonl (prompt/completion or chat records); "
                      "dataset_type is '%s'",
                      c->dataset_type);
  if (!c->packing && !jsonl)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: key 'packing' = false needs documents as records (dataset_type=jsonl); a '%s' corpus "
                      "is read as packed windows",
                      c->dataset_type);
  return GT_OK;
}

/* eval_dataset_path is held out: a file the user names there that
 * dataset_path also holds (the same device and inode, whatever the names:
 * a directory, a glob or a link may reach one file twice) would score the
 * model on what it trains on. A caller that sets eval_dataset_path itself
 * is not refused. (Scoring alone, gt_data_open_eval, trains on nothing and
 * does not come here.) The eval shards come from the training shards'
 * tokenizer. */
static gt_rc gt__disjoint(const gt__store *tr, const gt__store *ev, const gt_config *c, gt_err *err) {
  if (tr->n_shards && ev->n_shards && tr->shards[0].h.vocab != ev->shards[0].h.vocab)
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: eval_dataset_path shard '%s' records vocab_size %u in its header, dataset_path shard "
                      "'%s' %u: the eval shards must come from the training shards' tokenizer",
                      ev->shards[0].path, ev->shards[0].h.vocab, tr->shards[0].path, tr->shards[0].h.vocab);
  if (!gt_config_is_user_set(c, "eval_dataset_path")) return GT_OK;
  struct stat *st = malloc(sizeof *st * (size_t)(tr->n_files ? tr->n_files : 1));
  if (!st) return gt_err_set(err, GT_ERR_NOMEM, "data: no memory to compare %d files", tr->n_files);
  gt_rc rc = GT_OK;
  for (int i = 0; i < tr->n_files && !rc; i++)
    if (stat(tr->files[i], &st[i]))
      rc = gt_err_set(err, GT_ERR_IO, "data: cannot stat dataset_path file '%s': %s", tr->files[i], strerror(errno));
  for (int j = 0; j < ev->n_files && !rc; j++) {
    struct stat e;
    if (stat(ev->files[j], &e)) {
      rc = gt_err_set(err, GT_ERR_IO, "data: cannot stat eval_dataset_path file '%s': %s", ev->files[j],
                      strerror(errno));
      break;
    }
    for (int i = 0; i < tr->n_files; i++)
      if (st[i].st_dev == e.st_dev && st[i].st_ino == e.st_ino) {
        rc = gt_err_set(err, GT_ERR_CONFIG,
                        "data: eval_dataset_path '%s' holds '%s', which is also a training file (dataset_path '%s' "
                        "holds it as '%s'): held-out data must not be trained on; name eval files that dataset_path "
                        "does not hold, or drop eval_dataset_path and hold out eval_split_fraction of dataset_path",
                        c->eval_dataset_path, ev->files[j], c->dataset_path, tr->files[i]);
        break;
      }
  }
  free(st);
  return rc;
}

/* The train/eval split of one store: the last eval_split_fraction of its
 * tokens (windows) or of its records (whole records) is held out. */
static gt_rc gt__split(gt_data *d, const gt_config *c, gt__store *s, int train, int eval, gt_err *err) {
  gt_rc rc = GT_OK;
  int whole = gt__whole_records(c);
  if (d->pairs) { /* the last eval_split_fraction of the pairs is held out */
    int64_t np = s->n_rec / 2;
    int64_t n_ev = train && eval ? (int64_t)((double)np * c->eval_split_fraction) : (eval ? np : 0);
    int64_t n_tr = np - n_ev;
    if (train && n_tr > 0) rc = gt__src_add_pairs(d->train, 0, n_tr, d->T, c->packing, err);
    if (!rc && eval && n_ev > 0) rc = gt__src_add_pairs(d->eval, n_tr, np, d->T, c->packing, err);
    return rc;
  }
  if (whole) {
    int64_t n_ev = train && eval ? (int64_t)((double)s->n_rec * c->eval_split_fraction) : (eval ? s->n_rec : 0);
    int64_t n_tr = s->n_rec - n_ev;
    if (train && n_tr > 0) rc = gt__src_add_records(d->train, 0, n_tr, d->T, c->packing, err);
    if (!rc && eval && n_ev > 0) rc = gt__src_add_records(d->eval, n_tr, s->n_rec, d->T, c->packing, err);
    return rc;
  }
  int64_t N = s->n_tok;
  int64_t n_ev = train && eval ? (int64_t)((double)N * c->eval_split_fraction) : (eval ? N : 0);
  int64_t cut = N - n_ev;
  /* each shard (or the one memory range) is a part of its own: a window
   * never spans two shards, so at most one or two are read at a time */
  int n_back = s->n_shards ? s->n_shards : 1;
  for (int k = 0; k < n_back && !rc; k++) {
    int64_t g0 = s->n_shards ? s->shard_tok0[k] : 0, g1 = s->n_shards ? s->shard_tok0[k + 1] : N;
    if (train && g0 < cut) rc = gt__src_add_windows(d->train, g0, g1 < cut ? g1 : cut, d->T, err);
    if (!rc && eval && g1 > cut) rc = gt__src_add_windows(d->eval, g0 > cut ? g0 : cut, g1, d->T, err);
  }
  return rc;
}

/* overlong_records=truncate: what it cut from the training rows and from
 * the eval rows, records (pairs) and tokens, each side apart. */
static void gt__put_truncated(const gt_data *d, const char *what, const char *side, char *buf, size_t cap,
                              size_t *o) {
  const gt__data_src *v[2] = {d->train, d->eval};
  static const char *const name[2] = {"training", "eval"};
  int any = 0;
  for (int i = 0; i < 2; i++) {
    if (!v[i]->n_truncated) continue;
    *o += (size_t)snprintf(buf + *o, *o < cap ? cap - *o : 0, "; %s: %lld %s%s truncated to %d tokens%s, %lld token%s "
                           "dropped", name[i], (long long)v[i]->n_truncated, what, v[i]->n_truncated > 1 ? "s" : "",
                           d->T + 1, side, (long long)v[i]->n_dropped, v[i]->n_dropped == 1 ? "" : "s");
    any = 1;
  }
  if (any) *o += (size_t)snprintf(buf + *o, *o < cap ? cap - *o : 0, " (overlong_records=truncate)");
}

static void gt__describe(gt_data *d, const gt_config *c, const char *spec) {
  char buf[4096];
  size_t o = 0;
  const gt__store *s = d->store;
  int whole = gt__whole_records(c);
#define PUT(...) (o += (size_t)snprintf(buf + o, o < sizeof buf ? sizeof buf - o : 0, __VA_ARGS__))
  /* the training files' tokens: an eval_dataset_path's are named apart */
  PUT("data: %s '%s', %lld tokens", c->dataset_type, spec, (long long)s->n_tok);
  if (s->n_shards)
    PUT(" in %d shard%s", s->n_shards, s->n_shards > 1 ? "s" : "");
  else if (d->pairs)
    PUT(" in %lld preference pair%s of %d file%s", (long long)s->n_docs, s->n_docs == 1 ? "" : "s", s->n_files,
        s->n_files > 1 ? "s" : "");
  else if (!strcmp(c->dataset_type, "jsonl"))
    PUT(" in %lld records of %d file%s", (long long)s->n_docs, s->n_files, s->n_files > 1 ? "s" : "");
  if (d->eval_store)
    PUT(" (%lld train; eval: '%s', %lld tokens)", (long long)d->n_train, c->eval_dataset_path,
        (long long)d->eval_store->n_tok);
  else /* the tokens the rows read: overlong_records=truncate's cuts are in neither */
    PUT(" (%lld train, %lld eval)", (long long)d->n_train, (long long)d->eval->n_tokens);
  PUT("; global batch %d x %d tokens\n", d->B, d->T);
  PUT("sequences: ");
  if (d->pairs) {
    int64_t tr_pairs = 0;
    for (int i = 0; i < d->train->n_parts; i++)
      for (int64_t j = 0; j < d->train->parts[i].n_rows; j++) tr_pairs += d->train->parts[i].len[j];
    int64_t rp = d->train->n_rows;
    PUT("preference pairs (prompt, chosen, rejected: plain text or chat messages through %s's chat template), "
        "each side one sequence <bos> prompt response; row 2i holds the chosen sequences and row 2i + 1 the "
        "rejected ones, a pair under the same segment id in both; %s: %lld training pair%s in %lld row pair%s "
        "(%.2f pairs per row pair), rows of up to %d tokens (T + 1), padding out of the loss; loss on the "
        "responses only",
        gt_chat_template_name(gt_chat_template_for(c)),
        c->packing ? "consecutive pairs packed while both sides fit" : "one pair per row pair (packing=false)",
        (long long)tr_pairs, tr_pairs == 1 ? "" : "s", (long long)rp, rp == 1 ? "" : "s",
        rp ? (double)tr_pairs / (double)rp : 0.0, d->T + 1);
    gt__put_truncated(d, "pair", " a side", buf, sizeof buf, &o);
  } else if (!whole) {
    PUT("packed: each row is the next %d tokens (T + 1) of the documents laid end to end, inputs the first %d and "
        "targets the last %d (windows do not overlap)",
        d->T + 1, d->T, d->T);
  } else {
    char fmt[200];
    gt_doc_format f;
    gt_err e;
    if (gt_doc_format_init(&f, c, &e) == GT_OK)
      gt_doc_format_name(&f, fmt, sizeof fmt);
    else
      snprintf(fmt, sizeof fmt, "records");
    PUT("%s; %s into rows of up to %d tokens (T + 1: inputs the first %d, targets the last %d), padding out of the "
        "loss",
        fmt, c->packing ? "whole records packed in file order" : "one record per row (packing=false)", d->T + 1, d->T,
        d->T);
    gt__put_truncated(d, "record", "", buf, sizeof buf, &o);
    if (c->use_sft)
      PUT("; loss on %s", c->sft_train_on_completion_only ? "the completions / model turns only "
                                                            "(sft_train_on_completion_only)"
                                                          : "every token (sft_train_on_completion_only=false)");
  }
  PUT("; a token attends only within its document, positions restart at each document, no target crosses a "
      "document's end\n");
  if (d->pairs)
    PUT("order: %lld training row pair%s per epoch (%lld rows), ", (long long)d->train->n_rows,
        d->train->n_rows == 1 ? "" : "s", (long long)d->n_train_rows);
  else
    PUT("order: %lld training row%s per epoch in %d part%s, ", (long long)d->n_train_rows,
        d->n_train_rows == 1 ? "" : "s", d->train->n_parts, d->train->n_parts > 1 ? "s" : "");
  if (d->shuffle)
    PUT("shuffled (data_shuffle_seed %llu: %s, a new order each epoch)", (unsigned long long)d->seed,
        d->pairs ? "row pairs, each kept whole" : "parts and the rows within each");
  else
    PUT("in file order (enable_data_shuffling=false)");
  int64_t used = 0; /* tokens in rows; the rest are tails shorter than a row */
  for (int i = 0; i < d->train->n_parts; i++) {
    const gt__part *p = &d->train->parts[i];
    used += p->start ? p->hi - p->lo : p->n_rows * (d->T + 1);
  }
  int64_t unread = d->train->n_tokens - used;
  if (unread > 0 && !whole && !d->pairs) PUT(" (%lld tokens after the last whole row of a part are not read)", (long long)unread);
  if (d->pairs)
    PUT("; eval: %lld row pair%s in order", (long long)d->eval->n_rows, d->eval->n_rows == 1 ? "" : "s");
  else
    PUT("; eval: %lld row%s in order", (long long)d->n_eval_rows, d->n_eval_rows == 1 ? "" : "s");
  /* a tokenizer the user did not name: load_parameters_path's own (its
   * tokenizer.json, or the one its run was trained with), which the model
   * source put in tokenizer_path (hf/model_source.h) */
  if (c->tokenizer_path[0] && c->load_parameters_path[0] && !gt_config_is_user_set(c, "tokenizer_path"))
    PUT("\nnote: tokenizer_path is not set: the data is read with the tokenizer of load_parameters_path %s, '%s' "
        "(tokenizer_path=FILE names another)",
        c->load_parameters_path, c->tokenizer_path);
#undef PUT
  d->desc = strdup(buf);
}

/* What gt__open opens: training's rows and eval rows (gt_data_open), or
 * the eval rows alone (gt_data_open_eval): eval_dataset_path or the
 * held-out part of dataset_path, or every row of dataset_path. */
enum { GT__OPEN_TRAIN = 0, GT__OPEN_EVAL, GT__OPEN_EVAL_WHOLE };

static gt_rc gt__open(gt_data *d, const gt_config *c, gt_mem *mem, int mode, gt_err *err) {
  memset(d, 0, sizeof *d);
  d->mem = mem;
  d->B = (int)gt_config_global_batch(c);
  d->T = (int)c->max_target_length;
  d->seed = (uint64_t)c->data_shuffle_seed;
  d->shuffle = c->enable_data_shuffling;
  d->row0 = 0;
  d->nrows = d->B;
  d->rep = 0;
  d->nrep = 1;
  if (c->enable_diloco && c->dcn_diloco_parallelism > 1 && gt_dist_replicas() > 1) {
    d->rep = gt_dist_replica();
    d->nrep = gt_dist_replicas();
  }
  int64_t N = (int64_t)d->B * d->T;
  d->in = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->tg = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->pos = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->seg = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)N * sizeof(int32_t));
  d->row = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)(d->T + 1) * sizeof(uint32_t));
  d->pairs = c->use_dpo;
  d->lens = gt_mem_alloc(mem, GT_MEM_DATA, (size_t)(d->T + 1) * sizeof(int32_t));
  if (!d->in || !d->tg || !d->pos || !d->seg || !d->row || !d->lens) {
    gt_data_close(d);
    return gt_err_set(err, GT_ERR_NOMEM, "data: no memory for a batch of %lld tokens", (long long)N);
  }
  /* before synthetic data returns: a key it cannot honour is refused, not
   * ignored */
  gt_rc rc = gt__refuse_config(c, err);
  if (rc) {
    gt_data_close(d);
    return rc;
  }
  if (!strcmp(c->dataset_type, "synthetic")) {
    d->kind = 0;
    d->vocab_synthetic = c->vocab_size;
    gt__synthetic(d, c->vocab_size);
    char buf[200];
    snprintf(buf, sizeof buf, "data: synthetic, one fixed batch of %d x %d uniform ids", d->B, d->T);
    d->desc = strdup(buf);
    return GT_OK;
  }
  d->kind = 1;
  d->store = calloc(1, sizeof *d->store);
  d->train = calloc(1, sizeof *d->train);
  d->eval = calloc(1, sizeof *d->eval);
  if (!d->store || !d->train || !d->eval) rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory");
  /* scoring eval_dataset_path alone: dataset_path is not opened, and the
   * one store is the eval file (its messages name eval_dataset_path) */
  const int eval_file = mode == GT__OPEN_EVAL && c->eval_dataset_path[0];
  const char *spec = eval_file ? c->eval_dataset_path : c->dataset_path;
  if (!rc) rc = gt__store_open(d->store, c, spec, eval_file, mem, err);
  if (!rc && mode == GT__OPEN_TRAIN && c->eval_dataset_path[0]) {
    if (!(d->eval_store = calloc(1, sizeof *d->eval_store)))
      rc = gt_err_set(err, GT_ERR_NOMEM, "data: no memory");
    else
      rc = gt__store_open(d->eval_store, c, c->eval_dataset_path, 1, mem, err);
    if (!rc) rc = gt__disjoint(d->store, d->eval_store, c, err);
  }
  if (rc) {
    gt_data_close(d);
    return rc;
  }
  d->train->store = d->store;
  d->train->mem = d->eval->mem = mem;
  d->eval->store = d->eval_store ? d->eval_store : d->store;
  if (eval_file || mode == GT__OPEN_EVAL_WHOLE) {
    rc = gt__split(d, c, d->store, 0, 1, err); /* every row of the store is an eval row */
  } else if (d->eval_store) {
    rc = gt__split(d, c, d->store, 1, 0, err);
    if (!rc) rc = gt__split(d, c, d->eval_store, 0, 1, err);
  } else {
    rc = gt__split(d, c, d->store, 1, 1, err);
  }
  if (!rc) rc = gt__order_init(d->train, err);
  if (rc) {
    gt_data_close(d);
    return rc;
  }
  d->n_train = d->train->n_tokens;
  d->n_stream = d->store->n_tok + (d->eval_store ? d->eval_store->n_tok : 0);
  /* pairs: rows count batch rows, two per row pair */
  d->n_train_rows = d->train->n_rows * (d->pairs ? 2 : 1);
  d->n_eval_rows = d->eval->n_rows * (d->pairs ? 2 : 1);
  /* scoring alone reads no training row, and nothing it scores is trained
   * on: only the eval rows must be there (a batch short of rows is padded) */
  if (mode != GT__OPEN_TRAIN) {
    if (d->n_eval_rows < 1) {
      if (mode == GT__OPEN_EVAL_WHOLE || eval_file)
        gt_err_set(err, GT_ERR_CONFIG,
                   "data: %s '%s' makes no eval row of its %lld tokens (a packed row is %d tokens, "
                   "max_target_length + 1, of one shard)",
                   eval_file ? "eval_dataset_path" : "dataset_path", spec, (long long)d->store->n_tok, d->T + 1);
      else
        gt_err_set(err, GT_ERR_CONFIG,
                   "data: eval_split_fraction = %g of '%s' holds out no eval row (%lld tokens); raise it, set "
                   "eval_dataset_path, or score every row of it (gemtrain eval --whole)",
                   c->eval_split_fraction, c->dataset_path, (long long)d->eval->n_tokens);
      gt_data_close(d);
      return GT_ERR_CONFIG;
    }
    gt__describe(d, c, spec);
    return GT_OK;
  }
  /* each message is formatted before gt_data_close clears the sizes it names */
  if (d->n_train_rows < d->B) {
    if (d->pairs)
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: '%s' makes %lld training row pairs of its %lld preference pairs, fewer than one batch of %d "
                 "rows (%d row pairs); use more pairs or a smaller batch",
                 c->dataset_path, (long long)d->train->n_rows, (long long)d->store->n_docs, d->B, d->B / 2);
    else if (gt__whole_records(c))
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: '%s' makes %lld training rows of its %lld records, fewer than one batch of %d; use more "
                 "records or a smaller batch",
                 c->dataset_path, (long long)d->n_train_rows, (long long)d->store->n_rec, d->B);
    else if (d->store->n_shards) {
      /* a row never spans two shards: a shard shorter than a row adds
       * tokens to the count and no row */
      int with = 0;
      for (int k = 0; k < d->store->n_shards && d->store->shard_tok0[k] < d->n_train; k++)
        with += d->store->shard_tok0[k + 1] > d->store->shard_tok0[k];
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: '%s' makes %lld training rows, fewer than one batch of %d: a row is %d tokens "
                 "(max_target_length + 1) of one shard, and each shard shorter than max_target_length + 1 tokens "
                 "makes no row (%d of the %d shards with training tokens make none; %lld training tokens); use "
                 "larger shards, a smaller max_target_length or a smaller batch",
                 c->dataset_path, (long long)d->n_train_rows, d->B, d->T + 1, with - d->train->n_parts, with,
                 (long long)d->n_train);
    } else
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: '%s' makes %lld training rows of %d tokens (max_target_length + 1) of its %lld training "
                 "tokens, fewer than one batch of %d; use a larger corpus or a smaller batch",
                 c->dataset_path, (long long)d->n_train_rows, d->T + 1, (long long)d->n_train, d->B);
    gt_data_close(d);
    return GT_ERR_CONFIG;
  }
  if (c->eval_interval >= 0 && d->n_eval_rows < 1) {
    if (d->eval_store)
      gt_err_set(err, GT_ERR_CONFIG, "data: eval_dataset_path '%s' has %lld tokens, not one eval sequence of %d",
                 c->eval_dataset_path, (long long)d->eval->n_tokens, d->T + 1);
    else if (gt__whole_records(c) || d->pairs)
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: eval_split_fraction = %g of the %lld records of '%s' holds out none; raise it, set "
                 "eval_dataset_path or set eval_interval=-1",
                 c->eval_split_fraction, (long long)d->store->n_docs, c->dataset_path);
    else
      gt_err_set(err, GT_ERR_CONFIG,
                 "data: eval_split_fraction = %g of '%s' leaves %lld tokens, fewer than one eval sequence of %d; "
                 "raise it or set eval_interval=-1",
                 c->eval_split_fraction, c->dataset_path, (long long)d->eval->n_tokens, d->T + 1);
    gt_data_close(d);
    return GT_ERR_CONFIG;
  }
  gt__describe(d, c, spec);
  return GT_OK;
}

gt_rc gt_data_open(gt_data *d, const gt_config *c, gt_mem *mem, gt_err *err) {
  return gt__open(d, c, mem, GT__OPEN_TRAIN, err);
}

gt_rc gt_data_open_eval(gt_data *d, const gt_config *c, int whole, gt_mem *mem, gt_err *err) {
  return gt__open(d, c, mem, whole ? GT__OPEN_EVAL_WHOLE : GT__OPEN_EVAL, err);
}

void gt_data_close(gt_data *d) {
  if (d->mem) {
    gt_mem_free(d->mem, d->in);
    gt_mem_free(d->mem, d->tg);
    gt_mem_free(d->mem, d->pos);
    gt_mem_free(d->mem, d->seg);
    gt_mem_free(d->mem, d->row);
    gt_mem_free(d->mem, d->lens);
  }
  if (d->train) gt__src_free(d->train);
  if (d->eval) gt__src_free(d->eval);
  if (d->store) gt__store_close(d->store);
  if (d->eval_store) gt__store_close(d->eval_store);
  free(d->train);
  free(d->eval);
  free(d->store);
  free(d->eval_store);
  free(d->desc);
  memset(d, 0, sizeof *d);
}

void gt_data_set_rows(gt_data *d, int row0, int nrows) {
  if (row0 < 0) row0 = 0;
  if (row0 > d->B) row0 = d->B;
  if (nrows < 0) nrows = 0;
  if (nrows > d->B - row0) nrows = d->B - row0;
  d->row0 = row0;
  d->nrows = nrows;
  if (d->kind == 0) gt__synthetic(d, d->vocab_synthetic);
}

static gt_batch gt__batch(gt_data *d) {
  gt_batch b = {d->B, d->T, d->in, d->tg, d->pos, d->kind == 1 ? d->seg : NULL};
  return b;
}

/* Batch row b from row k (file order) of src. */
static gt_rc gt__put_row(gt_data *d, gt__data_src *src, int b, int64_t k, gt_err *err) {
  int64_t off, n;
  int n_lens = gt__src_row(src, k, &off, &n, d->T, d->lens);
  gt_rc rc = gt__store_read(src->store, off, n, d->row, err);
  if (rc) return rc;
  int64_t at = (int64_t)b * d->T;
  gt__fill_row(d->row, n, d->T, d->lens, n_lens, src->store->bos, src->store->eos, d->in + at, d->tg + at,
               d->pos + at, d->seg + at);
  return GT_OK;
}

static int gt__mine(const gt_data *d, int b) { return b >= d->row0 && b < d->row0 + d->nrows; }

static void gt__blank(gt_data *d, int b) {
  int64_t at = (int64_t)b * d->T;
  gt__blank_row(d->T, d->in + at, d->tg + at, d->pos + at, d->seg + at);
}

/* Moves a cursor over n rows of other replicas' part of a batch, as
 * reading them would (wrapping to the next epoch / the first eval row). */
static void gt__skip_train(gt_data *d, int64_t n) {
  int step = d->pairs ? 2 : 1;
  for (int64_t k = 0; k < n; k += step) {
    if (d->st.cursor >= d->n_train_rows) {
      d->st.epoch++;
      d->st.cursor = 0;
    }
    d->st.cursor += step;
  }
}

static void gt__skip_eval(gt_data *d, int64_t n) {
  int step = d->pairs ? 2 : 1;
  for (int64_t k = 0; k < n; k += step) {
    if (d->eval_cursor >= d->n_eval_rows) d->eval_cursor = 0;
    d->eval_cursor += step;
  }
}

/* Row pair k of src into batch rows b, b + 1. */
static gt_rc gt__put_pair(gt_data *d, gt__data_src *src, int b, int64_t k, gt_err *err) {
  return gt__put_pair_rows(src, k, d->T, b, d->row, d->lens, d->in, d->tg, d->pos, d->seg, err);
}

/* Pairs: this process's rows must be whole row pairs. */
static gt_rc gt__check_rows(const gt_data *d, gt_err *err) {
  if (!d->pairs || ((d->row0 | d->nrows) & 1) == 0) return GT_OK;
  return gt_err_set(err, GT_ERR_CONFIG,
                    "data: use_dpo: this process fills rows [%d, %d) of the batch of %d; preference rows come in pairs "
                    "(chosen in row 2i, rejected in row 2i + 1), so a process needs whole row pairs (an even "
                    "per_device_batch_size)",
                    d->row0, d->row0 + d->nrows, d->B);
}

gt_rc gt_data_read_train(gt_data *d, gt_batch *out, gt_err *err) {
  *out = gt__batch(d);
  gt_rc rc = gt__check_rows(d, err);
  if (rc) return rc;
  if (d->kind == 1) {
    int step = d->pairs ? 2 : 1;
    gt__skip_train(d, (int64_t)d->rep * d->B);
    for (int b = 0; b < d->B; b += step) {
      /* every process advances the position over every row, its own or not */
      if (d->st.cursor >= d->n_train_rows) {
        d->st.epoch++;
        d->st.cursor = 0;
      }
      int64_t c = d->st.cursor;
      d->st.cursor += step;
      if (!gt__mine(d, b) || rc) {
        for (int j = 0; j < step; j++) gt__blank(d, b + j);
        continue;
      }
      int64_t k = gt__order_row(d->train, d->seed, d->shuffle, d->st.epoch, c / step);
      rc = d->pairs ? gt__put_pair(d, d->train, b, k, err) : gt__put_row(d, d->train, b, k, err);
      if (rc)
        for (int j = 0; j < step; j++) gt__blank(d, b + j);
    }
    gt__skip_train(d, (int64_t)(d->nrep - 1 - d->rep) * d->B);
  }
  *out = gt__batch(d);
  return rc;
}

void gt_data_eval_reset(gt_data *d) { d->eval_cursor = 0; }

gt_rc gt_data_read_eval(gt_data *d, gt_batch *out, gt_err *err) {
  *out = gt__batch(d);
  gt_rc rc = gt__check_rows(d, err);
  if (rc) return rc;
  if (d->kind == 1) {
    int step = d->pairs ? 2 : 1;
    gt__skip_eval(d, (int64_t)d->rep * d->B);
    for (int b = 0; b < d->B; b += step) {
      if (d->eval_cursor >= d->n_eval_rows) d->eval_cursor = 0;
      int64_t k = d->eval_cursor / step;
      d->eval_cursor += step;
      if (!gt__mine(d, b) || d->n_eval_rows == 0 || rc) {
        for (int j = 0; j < step; j++) gt__blank(d, b + j);
        continue;
      }
      rc = d->pairs ? gt__put_pair(d, d->eval, b, k, err) : gt__put_row(d, d->eval, b, k, err);
      if (rc)
        for (int j = 0; j < step; j++) gt__blank(d, b + j);
    }
    gt__skip_eval(d, (int64_t)(d->nrep - 1 - d->rep) * d->B);
  }
  *out = gt__batch(d);
  return rc;
}

static void gt__failed(gt_data *d, gt_batch *b) {
  d->failed = 1;
  for (int64_t i = 0; i < (int64_t)d->B * d->T; i++) d->tg[i] = -1;
  *b = gt__batch(d);
}

void gt_data_next_train(gt_data *d, gt_batch *b) {
  if (gt_data_read_train(d, b, &d->fail)) gt__failed(d, b);
}

void gt_data_next_eval(gt_data *d, gt_batch *b) {
  if (gt_data_read_eval(d, b, &d->fail)) gt__failed(d, b);
}

gt_rc gt_data_seek(gt_data *d, gt_data_state st, gt_err *err) {
  /* cursor == rows is the position after an epoch's last row (the next
   * batch starts the next epoch); the epoch is incremented from here */
  int64_t nw = d->kind == 1 ? d->n_train_rows : 0;
  if (st.epoch < 0 || st.epoch == INT64_MAX)
    return gt_err_set(err, GT_ERR_CONFIG, "data: saved data_epoch = %lld is outside [0, %lld]", (long long)st.epoch,
                      (long long)(INT64_MAX - 1));
  if (d->kind == 1 && (st.cursor < 0 || st.cursor > nw))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: saved data_cursor = %lld is outside [0, %lld], the training rows of an epoch of this "
                      "data (%lld tokens in rows of up to %d); was dataset_path, max_target_length or "
                      "eval_split_fraction changed since it was saved?",
                      (long long)st.cursor, (long long)nw, (long long)d->n_train, d->T + 1);
  if (d->pairs && (st.cursor & 1))
    return gt_err_set(err, GT_ERR_CONFIG,
                      "data: saved data_cursor = %lld is odd; with use_dpo the rows come in pairs and the cursor is "
                      "even (was use_dpo changed since it was saved?)",
                      (long long)st.cursor);
  d->st = st;
  return GT_OK;
}

const char *gt_data_describe(const gt_data *d) { return d->desc ? d->desc : "data: (not open)"; }

int gt_data_has_eval(const gt_data *d) { return d->kind == 1 && d->n_eval_rows > 0; }

void gt_data_position(const gt_data *d, gt_data_state st, char *buf, size_t n) {
  if (d->kind != 1 || d->n_train_rows == 0) {
    snprintf(buf, n, "epoch %lld, row %lld", (long long)st.epoch, (long long)st.cursor);
    return;
  }
  int64_t e = st.epoch, c = st.cursor;
  if (c >= d->n_train_rows) e++, c = 0;
  if (e < 0 || c < 0) {
    snprintf(buf, n, "epoch %lld, row %lld", (long long)st.epoch, (long long)st.cursor);
    return;
  }
  int64_t k = gt__order_row(d->train, d->seed, d->shuffle, e, d->pairs ? c / 2 : c), off, len;
  gt__src_row(d->train, k, &off, &len, d->T, NULL);
  const gt__store *s = d->store;
  if (d->pairs) off = s->rec[2 * off]; /* a row pair's first pair */
  int f = gt__store_file_at(s, off);
  snprintf(buf, n, "epoch %lld, row %lld of %lld (next: '%s', token %lld)", (long long)st.epoch,
           (long long)st.cursor, (long long)d->n_train_rows, s->n_files ? s->files[f] : "",
           (long long)(off - (s->n_files ? s->file_tok0[f] : 0)));
}
