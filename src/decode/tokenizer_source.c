/* The tokenizer of a model to decode (text.h): the one it was trained with,
 * which its source names, unless the user names another. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "decode/text.h"
#include "hf/model_source.h"

static gt_rc gt__load(const char *path, const char *named_by, gt_tokenizer **tok, gt_err *err) {
  gt_rc rc = gt_tokenizer_load(path, tok, err);
  if (rc) {
    char msg[GT_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return gt_err_set(err, rc, "decode: the tokenizer %s (%s) cannot be used: %s; set tokenizer_path to its file",
                      named_by, path, msg);
  }
  return GT_OK;
}

gt_rc gt_decode_tokenizer(const gt_config *cfg, const char *load_path, gt_tokenizer **tok, char *what, size_t what_n,
                          gt_err *err) {
  *tok = NULL;
  char scratch[8];
  if (!what) what = scratch, what_n = sizeof scratch;
  if (gt_config_is_user_set(cfg, "tokenizer_path")) {
    /* tokenizer_path= (empty) asks for byte tokens */
    snprintf(what, what_n, "%s (tokenizer_path)", cfg->tokenizer_path[0] ? cfg->tokenizer_path : "byte tokens");
    if (!cfg->tokenizer_path[0]) return GT_OK;
    return gt__load(cfg->tokenizer_path, "that key 'tokenizer_path' names", tok, err);
  }
  snprintf(what, what_n, "byte tokens");
  if (!load_path || !load_path[0]) return GT_OK;
  gt_model_source *src = malloc(sizeof *src);
  if (!src) return gt_err_set(err, GT_ERR_NOMEM, "decode: no memory");
  gt_rc rc = gt_model_source_open(load_path, src, err);
  if (!rc) {
    char named[GT_STR_PATH * 2 + 64], path[GT_STR_PATH + 32] = "";
    struct stat st;
    if (src->kind == GT_SRC_HF) {
      snprintf(path, sizeof path, "%s/tokenizer.json", src->path);
      if (stat(path, &st)) path[0] = '\0';
      snprintf(named, sizeof named, "of the Hugging Face directory %s", src->path);
    } else {
      snprintf(path, sizeof path, "%s", src->cfg.tokenizer_path);
      snprintf(named, sizeof named, "that the %s %s names (its config's tokenizer_path)",
               src->kind == GT_SRC_CHECKPOINT ? "checkpoint" : "parameter file",
               src->kind == GT_SRC_CHECKPOINT ? src->dir : src->path);
    }
    if (path[0]) {
      rc = gt__load(path, named, tok, err);
      if (!rc) snprintf(what, what_n, "%s (%s)", path, src->kind == GT_SRC_HF ? "the model directory's" : "the run's");
    }
  }
  free(src);
  return rc;
}
