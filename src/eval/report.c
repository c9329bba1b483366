/* Results: one JSON object, and a table to read. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "eval/eval.h"

/* NaN (not measured) is null */
static void gt__num(cJSON *o, const char *k, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
  else cJSON_AddNullToObject(o, k);
}

char *gt_eval_results_json(const char *model, const gt_eval_ppl *ppl, const gt_eval_result *r, int n) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "model", model ? model : "");
  if (ppl) {
    cJSON *p = cJSON_AddObjectToObject(o, "perplexity");
    if (p) {
      gt__num(p, "loss", ppl->loss);
      gt__num(p, "perplexity", ppl->perplexity);
      cJSON_AddNumberToObject(p, "tokens", (double)ppl->tokens);
      cJSON_AddNumberToObject(p, "rows", (double)ppl->rows);
      cJSON_AddNumberToObject(p, "seconds", ppl->seconds);
    }
  }
  cJSON *ts = cJSON_AddObjectToObject(o, "tasks");
  for (int i = 0; ts && i < n; i++) {
    cJSON *t = cJSON_AddObjectToObject(ts, r[i].name);
    if (!t) continue;
    cJSON_AddStringToObject(t, "format", gt_eval_format_name(r[i].format));
    gt__num(t, "acc", r[i].acc);
    gt__num(t, "acc_stderr", r[i].acc_stderr);
    gt__num(t, "acc_norm", r[i].acc_norm);
    gt__num(t, "acc_norm_stderr", r[i].acc_norm_stderr);
    gt__num(t, "acc_bytes", r[i].acc_bytes);
    gt__num(t, "acc_bytes_stderr", r[i].acc_bytes_stderr);
    cJSON_AddNumberToObject(t, "n", (double)r[i].n);
    cJSON_AddNumberToObject(t, "requests", (double)r[i].requests);
    cJSON_AddNumberToObject(t, "tokens", (double)r[i].tokens);
    cJSON_AddNumberToObject(t, "truncated", (double)r[i].truncated);
    cJSON_AddNumberToObject(t, "seconds", r[i].seconds);
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

static void gt__cell(FILE *f, double v, double se) {
  if (!isfinite(v)) fprintf(f, " %17s |", "-");
  else if (!isfinite(se)) fprintf(f, " %8.4f         |", v);
  else fprintf(f, " %8.4f ± %6.4f |", v, se);
}

void gt_eval_results_table(FILE *f, const gt_eval_ppl *ppl, const gt_eval_result *r, int n) {
  if (ppl)
    fprintf(f, "data: %lld rows, %lld tokens in the loss: loss %.4f, perplexity %.4f (%.1f s)\n", (long long)ppl->rows,
            (long long)ppl->tokens, ppl->loss, ppl->perplexity, ppl->seconds);
  if (!n) return;
  fprintf(f, "| %-20s | %6s | %17s | %17s | %17s |\n", "task", "n", "acc", "acc_norm", "acc_bytes");
  fprintf(f, "|----------------------|-------:|------------------:|------------------:|------------------:|\n");
  for (int i = 0; i < n; i++) {
    fprintf(f, "| %-20s | %6lld |", r[i].name, (long long)r[i].n);
    gt__cell(f, r[i].acc, r[i].acc_stderr);
    gt__cell(f, r[i].acc_norm, r[i].acc_norm_stderr);
    gt__cell(f, r[i].acc_bytes, r[i].acc_bytes_stderr);
    fputc('\n', f);
  }
}
