/* JSON scalars as key=value text, for the sweep parser and the record
 * reader. */
#include "sweep/json.h"

#include <stdio.h>

#include "config/config.h"
#include "sweep/sweep.h"

const char *gt__sweep_json_kind(const cJSON *it) {
  if (!it) return "nothing";
  if (cJSON_IsString(it)) return "a string";
  if (cJSON_IsNumber(it)) return "a number";
  if (cJSON_IsBool(it)) return "a boolean";
  if (cJSON_IsNull(it)) return "null";
  if (cJSON_IsArray(it)) return "a list";
  if (cJSON_IsObject(it)) return "an object";
  return "an unknown value";
}

gt_rc gt__sweep_scalar_kv(const char *key, const cJSON *it, const char *where, char *buf, size_t n, gt_err *err) {
  char v[GT_STR_PATH + 64];
  if (cJSON_IsString(it))
    snprintf(v, sizeof v, "%s", it->valuestring);
  else if (cJSON_IsBool(it))
    snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "true" : "false");
  else if (cJSON_IsNumber(it))
    gt_sweep_num_text(it->valuedouble, v, sizeof v);
  else
    return gt_err_set(err, GT_ERR_CONFIG, "%s: key '%s' must be a number, string or boolean, found %s", where, key,
                      gt__sweep_json_kind(it));
  if ((size_t)snprintf(buf, n, "%s=%s", key, v) >= n)
    return gt_err_set(err, GT_ERR_CONFIG, "%s: the value of key '%s' is too long", where, key);
  return GT_OK;
}
