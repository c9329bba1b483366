/* What makes an exported model directory a drop-in Hugging Face model
 * beside config.json and the weights: the tokenizer files and
 * generation_config.json (hf.h: gt_hf_write_extras). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/paramfile.h"
#include "hf/hf.h"
#include "hf/model_source.h"
#include "tokenizer/tokenizer.h"

/* The files transformers' AutoTokenizer and GenerationConfig read from a
 * model directory, copied as they are when the source has them. */
static const char *const gt__hf_extra_files[] = {"tokenizer.json",       "tokenizer_config.json",
                                                 "tokenizer.model",      "special_tokens_map.json",
                                                 "added_tokens.json",    "chat_template.jinja",
                                                 "chat_template.json",   "generation_config.json"};
#define GT__NEXTRA ((int)(sizeof gt__hf_extra_files / sizeof gt__hf_extra_files[0]))

static int gt__file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static gt_rc gt__copy(const char *from, const char *to, gt_err *err) {
  char *buf = NULL;
  size_t n = 0;
  gt_rc rc = gt_read_file(from, "hf", &buf, &n, err);
  if (rc) return rc;
  FILE *f = fopen(to, "wb");
  int ok = f && fwrite(buf, 1, n, f) == n;
  if (f) ok = fclose(f) == 0 && ok;
  free(buf);
  return ok ? GT_OK : gt_err_set(err, GT_ERR_IO, "hf: cannot write '%s'", to);
}

static gt_rc gt__write_json(const char *path, cJSON *j, gt_err *err) {
  char *s = cJSON_Print(j);
  FILE *f = s ? fopen(path, "wb") : NULL;
  int ok = f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
  if (f) ok = fclose(f) == 0 && ok;
  free(s);
  return ok ? GT_OK : gt_err_set(err, GT_ERR_IO, "hf: cannot write '%s'", path);
}

gt_rc gt_hf_source_origin(const char *path, char *hf_dir, size_t hn, char *tokenizer, size_t tn, gt_err *err) {
  hf_dir[0] = tokenizer[0] = '\0';
  gt_model_source *s = malloc(sizeof *s);
  if (!s) return gt_err_set(err, GT_ERR_NOMEM, "hf: no memory");
  char cur[GT_STR_PATH];
  snprintf(cur, sizeof cur, "%s", path);
  gt_rc rc = GT_OK;
  /* a run started from a checkpoint that started from an HF directory ...;
   * a bound keeps a cycle of references from looping */
  for (int depth = 0; depth < 16 && cur[0]; depth++) {
    if ((rc = gt_model_source_open(cur, s, err))) break;
    if (s->kind == GT_SRC_HF) {
      snprintf(hf_dir, hn, "%s", s->path);
      break;
    }
    if (!tokenizer[0] && s->cfg.tokenizer_path[0]) snprintf(tokenizer, tn, "%s", s->cfg.tokenizer_path);
    if (!strcmp(s->cfg.load_parameters_path, cur)) break;
    snprintf(cur, sizeof cur, "%s", s->cfg.load_parameters_path);
  }
  free(s);
  /* a run started from an HF directory records that directory's own
   * tokenizer.json as its tokenizer_path: that is the directory's tokenizer,
   * whose other files (tokenizer.model, special_tokens_map.json, ...) go
   * with it, not a tokenizer of the run's own */
  if (!rc && hf_dir[0] && tokenizer[0]) {
    char own[GT_STR_PATH + 32];
    struct stat a, b;
    snprintf(own, sizeof own, "%s/tokenizer.json", hf_dir);
    if (stat(own, &a) == 0 && stat(tokenizer, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      tokenizer[0] = '\0';
  }
  return rc;
}

gt_rc gt_hf_source_rows(const char *path, long long *rows, gt_err *err) {
  *rows = 0;
  gt_model_source *s = malloc(sizeof *s);
  if (!s) return gt_err_set(err, GT_ERR_NOMEM, "hf: no memory");
  char cur[GT_STR_PATH];
  snprintf(cur, sizeof cur, "%s", path);
  gt_rc rc = GT_OK;
  /* the same walk as gt_hf_source_origin, stopping at the first record */
  for (int depth = 0; depth < 16 && cur[0] && !*rows; depth++) {
    if ((rc = gt_model_source_open(cur, s, err))) break;
    if (s->kind == GT_SRC_HF) {
      *rows = s->hf.embed_rows;
      break;
    }
    rc = s->kind == GT_SRC_CHECKPOINT ? gt_ckpt_read_hf_rows(s->dir, rows, err)
                                      : gt_paramfile_read_hf_rows(s->path, rows, err);
    if (rc || !strcmp(s->cfg.load_parameters_path, cur)) break;
    snprintf(cur, sizeof cur, "%s", s->cfg.load_parameters_path);
  }
  free(s);
  return rc;
}

/* The id of a token in a tokenizer.json, -1 when absent or unreadable. */
static int32_t gt__token_id(const gt_tokenizer *t, const char *tok) {
  return t ? gt_tokenizer_token_id(t, tok, strlen(tok)) : -1;
}

gt_rc gt_hf_write_extras(const gt_config *cfg, const char *hf_dir, const char *tokenizer_path, const char *out_dir,
                         gt_hf_extras *info, gt_err *err) {
  memset(info, 0, sizeof *info);
  char from[GT_STR_PATH + 64], to[GT_STR_PATH + 64];
  gt_rc rc = GT_OK;
  /* a tokenizer_path the run was trained with wins over the directory's
   * tokenizer files (the first five of the list) */
  int own_tok = tokenizer_path && tokenizer_path[0];
  for (int i = 0; hf_dir && hf_dir[0] && i < GT__NEXTRA; i++) {
    if (own_tok && i < 5) continue;
    snprintf(from, sizeof from, "%s/%s", hf_dir, gt__hf_extra_files[i]);
    if (!gt__file_exists(from)) continue;
    snprintf(to, sizeof to, "%s/%s", out_dir, gt__hf_extra_files[i]);
    if ((rc = gt__copy(from, to, err))) return rc;
    info->n_copied++;
    if (i == 0) info->copied_tokenizer = 1;
    if (!strcmp(gt__hf_extra_files[i], "generation_config.json")) info->copied_generation_config = 1;
  }
  snprintf(to, sizeof to, "%s/tokenizer.json", out_dir);
  if (!info->copied_tokenizer && tokenizer_path && tokenizer_path[0]) {
    if ((rc = gt__copy(tokenizer_path, to, err))) return rc;
    info->n_copied++;
    info->copied_tokenizer = 1;
    /* its tokenizer_config.json when it has one beside it */
    char dir[GT_STR_PATH];
    snprintf(dir, sizeof dir, "%s", tokenizer_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    snprintf(from, sizeof from, "%s/tokenizer_config.json", dir);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
    if (gt__file_exists(from) && !gt__file_exists(to)) {
      if ((rc = gt__copy(from, to, err))) return rc;
      info->n_copied++;
    }
  }
  snprintf(to, sizeof to, "%s/tokenizer.json", out_dir);
  info->has_tokenizer = gt__file_exists(to);
  gt_tokenizer *tok = NULL;
  if (info->has_tokenizer) {
    gt_err sub;
    if (gt_tokenizer_load(to, &tok, &sub)) tok = NULL; /* copied as it was; ids fall back to Gemma's */
  }
  int g4 = gt_config_is_gemma4(cfg);
  /* Gemma's fixed ids (<pad> 0, <eos> 1, <bos> 2; gemtrain's byte tokens
   * keep them) and the end of a chat turn when the tokenizer has one */
  int32_t eot = gt__token_id(tok, g4 ? "<turn|>" : "<end_of_turn>");
  snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
  if (info->has_tokenizer && !gt__file_exists(to)) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddTrueToObject(j, "add_bos_token");
    cJSON_AddFalseToObject(j, "add_eos_token");
    cJSON_AddStringToObject(j, "bos_token", "<bos>");
    cJSON_AddStringToObject(j, "eos_token", "<eos>");
    cJSON_AddStringToObject(j, "pad_token", "<pad>");
    cJSON_AddStringToObject(j, "unk_token", "<unk>");
    cJSON_AddNumberToObject(j, "model_max_length", (double)cfg->max_target_length);
    cJSON_AddStringToObject(j, "padding_side", "left");
    cJSON_AddStringToObject(j, "tokenizer_class", "GemmaTokenizer");
    rc = gt__write_json(to, j, err);
    cJSON_Delete(j);
    if (rc) goto out;
    info->wrote_tokenizer_config = 1;
  }
  snprintf(to, sizeof to, "%s/generation_config.json", out_dir);
  if (!gt__file_exists(to)) {
    /* Google's Gemma releases: sample with top-k 64 and top-p 0.95, stop at
     * <eos> and at the end of a turn */
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "bos_token_id", 2);
    if (!g4) cJSON_AddStringToObject(j, "cache_implementation", "hybrid");
    cJSON_AddTrueToObject(j, "do_sample");
    cJSON *eos = cJSON_AddArrayToObject(j, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber(1));
    if (eot >= 0) cJSON_AddItemToArray(eos, cJSON_CreateNumber(eot));
    cJSON_AddNumberToObject(j, "pad_token_id", 0);
    cJSON_AddNumberToObject(j, "top_k", 64);
    cJSON_AddRawToObject(j, "top_p", "0.95");
    rc = gt__write_json(to, j, err);
    cJSON_Delete(j);
    if (rc) goto out;
    info->wrote_generation_config = 1;
  }
out:
  gt_tokenizer_free(tok);
  return rc;
}
