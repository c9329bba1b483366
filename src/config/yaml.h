/* MaxText's YAML config files, the flat subset they use (config/yaml.c). */
#ifndef GT_CONFIG_YAML_H
#define GT_CONFIG_YAML_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/common.h"

/* Parse n bytes of YAML text into a cJSON object of key -> string (scalars
 * as written, quotes removed; null and an empty value are "") or array of
 * strings. path names the file in messages; a construct outside the subset
 * is refused naming its line. */
gt_rc gt_config_parse_yaml(const char *text, size_t n, const char *path, cJSON **out, gt_err *err);
/* The name ends in .yml or .yaml. */
int gt_config_path_is_yaml(const char *path);

#endif
