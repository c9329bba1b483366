/* Configuration, inside libgemtrain: the key table, layered loading,
 * validation and the derived per-layer quantities. The struct itself is
 * public (include/gemtrain/config.h).
 *
 * Layers, each overriding the one before:
 *   configs/base.json  ->  configs/models/<model_name>.json  ->  user JSON file
 *   ->  key=value overrides (command line or API).
 * configs/base.json defines every key (it is the table of defaults); the key
 * table in config.c gives each key its type, valid range and description.
 * model_name is resolved first (from the later layers if they set it) so the
 * right preset is loaded. */
#ifndef GT_CONFIG_CONFIG_H
#define GT_CONFIG_CONFIG_H

#include <stdio.h>

#include "base/common.h"
#include "gemtrain/config.h"

typedef enum gt_key_type { GT_KEY_INT, GT_KEY_FLOAT, GT_KEY_BOOL, GT_KEY_STR, GT_KEY_ENUM } gt_key_type;

/* gt_key_spec.flags */
#define GT_KEY_MODEL 1u /* defines the model (shapes or math): a loaded model's own value replaces it */

typedef struct gt_key_spec {
  const char *name;
  gt_key_type type;
  size_t offset;      /* into gt_config */
  size_t size;        /* of the field (strings) */
  unsigned flags;     /* GT_KEY_MODEL */
  double min, max;    /* numbers: inclusive range */
  const char *choices; /* enums: "a|b|c" */
  const char *desc;
} gt_key_spec;

int gt_config_num_keys(void);
const gt_key_spec *gt_config_key_at(int i);
const gt_key_spec *gt_config_key(const char *name);
/* 1 when gt_config_load took `key` from the user file or a key=value
 * override (not from base.json or a preset); 0 otherwise or for an unknown
 * key. gt_config_set and gt_config_apply_json_text do not mark keys. */
int gt_config_is_user_set(const gt_config *cfg, const char *key);

/* The directory holding base.json and models/, written into buf (returned):
 * $GEMTRAIN_CONFIG_DIR, else share/gemtrain/configs beside the installed
 * library or binary, else the source tree's configs/, else the configured
 * install prefix's. */
const char *gt_config_default_dir(char *buf, size_t n);

/* Load and validate. config_dir NULL = gt_config_default_dir(). user_file and
 * overrides may be NULL/0. Each override is "key=value". */
gt_rc gt_config_load(gt_config *cfg, const char *config_dir, const char *user_file,
                     int n_overrides, const char *const *overrides, gt_err *err);
/* Set one key from its text form (type-checked and range-checked, not
 * cross-validated). `source` names where it came from, for messages. */
gt_rc gt_config_set(gt_config *cfg, const char *key, const char *value,
                    const char *source, gt_err *err);
/* Set every key of a JSON object given as text (as gt_config_set does, each
 * checked; not cross-validated). `source` names it in messages. */
gt_rc gt_config_apply_json_text(gt_config *cfg, const char *json, const char *source, gt_err *err);
/* Cross-key consistency checks. */
gt_rc gt_config_validate(const gt_config *cfg, gt_err *err);

/* The resolved config as pretty JSON (heap string, caller frees) and to a file. */
char *gt_config_to_json(const gt_config *cfg);
gt_rc gt_config_write_json(const gt_config *cfg, const char *path, gt_err *err);
/* Read a value as text (for messages, sweeps): writes into buf. */
gt_rc gt_config_get_text(const gt_config *cfg, const char *key, char *buf, size_t n, gt_err *err);
/* Print every key with its value, type, range and description. */
void gt_config_print_help(FILE *f, const gt_config *defaults);

/* Edit distance for "did you mean" (case-insensitive; a swap of neighbours
 * is one edit; names over 63 characters are "far"). */
int gt_edit_distance(const char *a, const char *b);

/* Derived quantities. */
long long gt_config_global_batch(const gt_config *cfg); /* sequences per step */
int gt_config_layer_is_global(const gt_config *cfg, long long layer);
/* decoder_block is gemma4 or gemma4_small */
int gt_config_is_gemma4(const gt_config *cfg);
/* The first of the last num_kv_shared_layers layers (L when none share). */
long long gt_config_first_kv_shared(const gt_config *cfg);
/* A KV-shared layer's donor: the last layer of the same kind (local or
 * global) before the shared ones; -1 for a layer with its own K/V, -2 when a
 * shared layer has no donor (a config error). */
long long gt_config_layer_kv_donor(const gt_config *cfg, long long layer);
/* Per-layer shapes: head dim and kv heads (globals may differ on Gemma 4),
 * and the MLP width (doubled on shared layers with use_double_wide_mlp). */
long long gt_config_layer_head_dim(const gt_config *cfg, long long layer);
long long gt_config_layer_kv_heads(const gt_config *cfg, long long layer);
long long gt_config_layer_mlp_dim(const gt_config *cfg, long long layer);
/* Does this layer's feed-forward run the mixture of experts? (Gemma 4 with
 * num_experts > 1: every layer.) And the number of such layers. */
int gt_config_layer_is_moe(const gt_config *cfg, long long layer);
long long gt_config_num_moe_layers(const gt_config *cfg);
/* The resolved mesh axes (a -1 filled in): data x fsdp x expert = num_devices. */
void gt_config_mesh_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
/* MaxText's DCN axes across MPI ranks, a -1 filled in with the ranks the
 * launcher started (gt_dist_size(): 1 without mpirun); their product is the
 * rank count the run expects. The global mesh is ici x dcn on each axis,
 * and the global batch is per_device_batch_size x num_devices x ranks. */
void gt_config_dcn_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
void gt_config_global_axes(const gt_config *cfg, int *data, int *fsdp, int *expert);
long long gt_config_num_ranks(const gt_config *cfg);
long long gt_config_total_devices(const gt_config *cfg); /* num_devices x ranks */
/* K = V on this layer (share_kv_projections applies to global layers). */
int gt_config_layer_k_eq_v(const gt_config *cfg, long long layer);

#endif
