/* JSON values of a sweep file or a results.jsonl record as key=value text
 * (json.c); shared by the parser and the record reader only. */
#ifndef GEMTRAIN_SWEEP_JSON_H
#define GEMTRAIN_SWEEP_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/common.h"

/* "a string", "a number", "a list", ... for messages. */
const char *gt__sweep_json_kind(const cJSON *it);
/* key=value text for a JSON scalar; `where` names it in messages. */
gt_rc gt__sweep_scalar_kv(const char *key, const cJSON *it, const char *where, char *buf, size_t n, gt_err *err);

#endif
