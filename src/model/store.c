#define _POSIX_C_SOURCE 200809L
#include "model/store.h"
#include "kernels/quant.h"

_Static_assert((int)GT_STORE_F32 == (int)GT_Q_F32 && (int)GT_STORE_BF16 == (int)GT_Q_BF16 &&
                   (int)GT_STORE_INT8 == (int)GT_Q_INT8 && (int)GT_STORE_NF4 == (int)GT_Q_NF4,
               "the store's dtypes and the quantization kernels' types are one set of values");

#include <regex.h>
#include <stdlib.h>
#include <string.h>

static const char *const gt__dtype_names[GT_STORE_NDTYPES] = {"float32", "bfloat16", "int8", "nf4"};

const char *gt_store_dtype_name(gt_store_dtype t) {
  return (unsigned)t < GT_STORE_NDTYPES ? gt__dtype_names[t] : "?";
}

gt_rc gt_store_dtype_parse(const char *name, gt_store_dtype *out, gt_err *err) {
  for (int i = 0; i < GT_STORE_NDTYPES; i++)
    if (!strcmp(name, gt__dtype_names[i])) {
      *out = (gt_store_dtype)i;
      return GT_OK;
    }
  return gt_err_set(err, GT_ERR_ARG, "store: unknown storage dtype '%s'; expected float32, bfloat16, int8 or nf4", name);
}

const char *gt_store_role_name(gt_store_role r) { return r == GT_ROLE_FROZEN ? "frozen" : "trainable"; }

int64_t gt_store_data_bytes(gt_store_dtype t, int64_t numel) {
  switch (t) {
  case GT_STORE_F32: return 4 * numel;
  case GT_STORE_BF16: return 2 * numel;
  case GT_STORE_INT8: return numel;
  case GT_STORE_NF4: return (numel + 1) / 2;
  default: return -1;
  }
}

int64_t gt_store_scale_bytes(gt_store_dtype t, int64_t numel, int64_t rows) {
  switch (t) {
  case GT_STORE_INT8: return 4 * rows;
  case GT_STORE_NF4: return 4 * ((numel + GT_STORE_NF4_BLOCK - 1) / GT_STORE_NF4_BLOCK);
  case GT_STORE_F32:
  case GT_STORE_BF16: return 0;
  default: return -1;
  }
}

gt_rc gt_store_check(const char *name, gt_store_role role, gt_store_dtype t, gt_err *err) {
  if ((unsigned)t >= GT_STORE_NDTYPES)
    return gt_err_set(err, GT_ERR_ARG, "store: tensor '%s' has storage dtype %d; expected one of float32, bfloat16, "
                      "int8, nf4", name, (int)t);
  if (role == GT_ROLE_TRAINABLE && t != GT_STORE_F32)
    return gt_err_set(err, GT_ERR_ARG,
                      "store: tensor '%s' is trainable but stored as %s; a trainable tensor is stored as float32 "
                      "(AdamW updates it in place): freeze it or store it as float32",
                      name, gt_store_dtype_name(t));
  return GT_OK;
}

struct gt_store_mask {
  int n;
  regex_t *re;
};

gt_rc gt_store_mask_compile(const char *text, gt_store_mask **out, gt_err *err) {
  *out = NULL;
  gt_store_mask *mk = calloc(1, sizeof *mk);
  size_t len = strlen(text);
  char *buf = malloc(len + 1);
  if (!mk || !buf) {
    free(mk), free(buf);
    return gt_err_set(err, GT_ERR_NOMEM, "store: no memory for trainable_parameters_mask");
  }
  memcpy(buf, text, len + 1);
  /* at most one expression per two characters */
  mk->re = calloc(len / 2 + 1, sizeof *mk->re);
  if (!mk->re) {
    free(mk), free(buf);
    return gt_err_set(err, GT_ERR_NOMEM, "store: no memory for trainable_parameters_mask");
  }
  gt_rc rc = GT_OK;
  char *save = NULL;
  for (char *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
    int e = regcomp(&mk->re[mk->n], tok, REG_EXTENDED | REG_NOSUB);
    if (e) {
      char why[160];
      regerror(e, &mk->re[mk->n], why, sizeof why);
      rc = gt_err_set(err, GT_ERR_CONFIG,
                      "config: key 'trainable_parameters_mask': expression '%s' is not a POSIX extended regular "
                      "expression: %s",
                      tok, why);
      break;
    }
    mk->n++;
  }
  free(buf);
  if (rc) {
    gt_store_mask_free(mk);
    return rc;
  }
  *out = mk;
  return GT_OK;
}

int gt_store_mask_trains(const gt_store_mask *mk, const char *name) {
  if (!mk || mk->n == 0) return 1;
  for (int i = 0; i < mk->n; i++)
    if (regexec(&mk->re[i], name, 0, NULL, 0) == 0) return 1;
  return 0;
}

int gt_store_mask_count(const gt_store_mask *mk) { return mk ? mk->n : 0; }

void gt_store_mask_free(gt_store_mask *mk) {
  if (!mk) return;
  for (int i = 0; i < mk->n; i++) regfree(&mk->re[i]);
  free(mk->re);
  free(mk);
}

uint64_t gt_store_sum(uint64_t h, const float *x, int64_t n) { return gt_fnv1a(h, x, (size_t)n * sizeof(float)); }
