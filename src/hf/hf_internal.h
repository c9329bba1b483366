/* Shared by the Hugging Face config readers of Gemma 3 (hf_config.c) and
 * Gemma 4 (hf_config4.c): typed reads of config.json keys that name the key
 * and the file when they refuse a value. */
#ifndef GT_HF_INTERNAL_H
#define GT_HF_INTERNAL_H

#include <cjson/cJSON.h>

#include "hf/hf.h"

typedef struct gt__hfc {
  const cJSON *obj; /* the text config object */
  const char *where;
  gt_err *err;
} gt__hfc;

const char *gt__hf_kind(const cJSON *j);
/* Writes a key Hugging Face declares float with a decimal point even when
 * whole (cJSON prints 30.0 as 30: "final_logit_softcapping": 30 made
 * Gemma4TextConfig, a strict dataclass declaring float | None, refuse every
 * export); a non-finite value as null. */
void gt__hf_add_float(cJSON *o, const char *key, double v);
/* An integer key in [lo, hi]; def when the file omits it. */
gt_rc gt__hf_int(const gt__hfc *h, const char *key, long long def, long long lo, long long hi, long long *out);
/* A positive number in obj; def when omitted; null_value when null (NAN:
 * null is refused). */
gt_rc gt__hf_num_in(const gt__hfc *h, const cJSON *obj, const char *key, double def, double null_value, double *out);
/* A boolean key (null counts as false, as Python's truth test does). */
gt_rc gt__hf_bool(const gt__hfc *h, const char *key, int def, int *out);
/* A key gemtrain has no knob for must satisfy ok(); want_text says what
 * gemtrain runs. An absent key is fine (its default is what gemtrain runs). */
gt_rc gt__hf_require(const gt__hfc *h, const char *key, const char *want_text, int (*ok)(const cJSON *));
int gt__hf_is_gelu_tanh(const cJSON *j);
int gt__hf_is_null(const cJSON *j);
int gt__hf_is_false(const cJSON *j);
int gt__hf_is_true(const cJSON *j);
/* kinds[0..L) (1 = full_attention) from layer_types; 0 when the file has no
 * layer_types list (*found = 0) */
gt_rc gt__hf_layer_types(const gt__hfc *h, long long L, char *kinds, int *found);
/* The shortest layer_pattern that, repeated, gives kinds[0..L). */
gt_rc gt__hf_pattern(const gt__hfc *h, const char *kinds, long long L, char *pat, size_t n);
/* One entry of "layer_types" for layer i of cfg. */
const char *gt__hf_layer_type_name(const gt_config *cfg, long long i);

/* Gemma 4 (hf_config4.c): the text config object -> cfg's model keys. */
/* A model without routed experts: num_experts at its smallest value, when
 * this gemtrain has the key (an HF file without MoE says nothing of it). */
gt_rc gt__hf_set_dense(gt_config *cfg);
/* Fills info (max positions, embedding rows) and validates the config. */
gt_rc gt__hf_finish(const gt__hfc *h, gt_config *cfg, gt_hf_info *info, long long maxpos, long long V);
gt_rc gt__hf4_text_config(const gt__hfc *h, gt_config *cfg, gt_hf_info *info);
/* Whether cfg (decoder_block gemma4*) has an HF Gemma 4 config.json. */
gt_rc gt__hf4_exportable(const gt_config *cfg, gt_err *err);
/* Gemma4ForCausalLM's config.json for cfg (gt__hf4_exportable first). */
char *gt__hf4_config_to_json(const gt_config *cfg, const char *torch_dtype);

#endif
