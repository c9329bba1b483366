/* libgemtrain: the small API for other projects' tests and tools.
 *
 * One gt_ctx holds everything of one model: its configuration, parameters,
 * optimizer state, data source, the threads it computes with and the last
 * error. Contexts share nothing, so two of them may train at once in two
 * threads (one context is used by one thread at a time). Nothing here prints
 * or exits; every call returns a gt_rc and, on failure, gt_ctx_error() says
 * why in one line. Memory: the context owns everything it allocates;
 * pointers you pass in stay yours and are not kept after the call returns.
 *
 * Misuse is refused, never undefined: a NULL context makes every call return
 * GT_ERR_ARG (gt_ctx_num_params 0, gt_ctx_error "no context"); so do a
 * negative count or shape, a NULL array, buffer or path, and a call before
 * gt_ctx_configure / gt_ctx_init (the message says which comes first). A
 * refused call changes nothing, and the context keeps working.
 *
 *   gt_ctx *c = gt_ctx_new();
 *   const char *ov[] = {"dataset_type=synthetic", "steps=20"};
 *   if (gt_ctx_configure(c, "gemma3-tiny", 2, ov) || gt_ctx_set(c, "learning_rate", "1e-3") ||
 *       gt_ctx_init(c)) fail(gt_ctx_error(c));
 *   double loss[20];
 *   gt_ctx_train(c, 20, loss);            // 20 optimizer steps on the configured data
 *   gt_ctx_free(c);
 */
#ifndef GEMTRAIN_GEMTRAIN_H
#define GEMTRAIN_GEMTRAIN_H

#include <stdint.h>

#include "gemtrain/common.h"
#include "gemtrain/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_ctx gt_ctx;

/* A new, empty context (NULL only when out of memory). */
GT_API gt_ctx *gt_ctx_new(void);
/* Frees the context and everything it owns. NULL is allowed. */
GT_API void gt_ctx_free(gt_ctx *c);
/* The last error of this context, or "" after success. Owned by the context. */
GT_API const char *gt_ctx_error(const gt_ctx *c);

/* Builds the configuration exactly as `gemtrain train` does: configs/base.json,
 * then the preset, then the overrides ("key=value"). `preset` is a preset name
 * (configs/models/<name>.json, e.g. "gemma3-tiny"), a path to a .json (or MaxText .yml) config
 * file, or NULL for base.json's default. Once the new configuration is read
 * and accepted, any previous model is freed; a refused configure keeps the
 * previous configuration and model. */
GT_API gt_rc gt_ctx_configure(gt_ctx *c, const char *preset, int n_overrides, const char *const *overrides);

/* Reading and setting the configuration one key at a time, by MaxText's
 * names (`gemtrain train --help` lists every key with its type, range and
 * meaning). Values travel as text, as on the command line: integers in
 * decimal, floats in any decimal form, booleans "true"/"false", strings and
 * enumerations as they are. Both need a configured context. gt_ctx_set
 * checks the key, the value's type and its range at once (an unknown key or
 * a refused value is GT_ERR_CONFIG, naming them, and changes nothing);
 * keys are checked against each other at gt_ctx_init. A key set here counts
 * as the user's, like an override given to gt_ctx_configure (a model key
 * that contradicts load_parameters_path's model is refused). Setting a key
 * after gt_ctx_init is refused: configure again; so is changing model_name,
 * which gt_ctx_configure takes (it chooses the preset the keys layer on). */
GT_API gt_rc gt_ctx_set(gt_ctx *c, const char *key, const char *value);
/* The value of key as text into buf (n bytes; GT_ERR_ARG when it does not
 * fit). Floats are written in the shortest form that reads back exactly. */
GT_API gt_rc gt_ctx_get(gt_ctx *c, const char *key, char *buf, size_t n);
/* Typed conveniences: integer keys, and booleans as 0 / 1 (set_int,
 * get_int); float and integer keys (set_double, which gives an integer key
 * whole values only; get_double). A key of another type is refused
 * (GT_ERR_CONFIG), naming it and its type, and changes nothing. */
GT_API gt_rc gt_ctx_set_int(gt_ctx *c, const char *key, int64_t value);
GT_API gt_rc gt_ctx_set_double(gt_ctx *c, const char *key, double value);
GT_API gt_rc gt_ctx_get_int(gt_ctx *c, const char *key, int64_t *value);
GT_API gt_rc gt_ctx_get_double(gt_ctx *c, const char *key, double *value);

/* Allocates and initialises the model (seeded by init_weights_seed), the
 * optimizer state and the data source of the configuration. */
GT_API gt_rc gt_ctx_init(gt_ctx *c);
/* The model's parameters (elements of every tensor, adapters included; a
 * base stored as bf16, int8 or nf4 counts the same as in float32). */
GT_API int64_t gt_ctx_num_params(const gt_ctx *c);

/* Runs n optimizer steps on the configured data (dataset_type). losses (may
 * be NULL) receives each step's mean loss. */
GT_API gt_rc gt_ctx_train(gt_ctx *c, int n, double *losses);
/* One optimizer step on your tokens: tokens is [batch, seq + 1] row-major
 * (each row's first seq ids are the inputs, its last seq the targets).
 * A negative id is a pad: as a target it is masked, as an input it reads as
 * id 0 (<pad>), so a row padded at its end ({1, 10, 11, -1, -1}) has the
 * loss of the row without its padding. Ids at or past vocab_size are
 * refused. seq is at most the configured max_target_length, and batch is
 * the global batch (per_device_batch_size x num_devices x MPI ranks: the
 * configured step, whose memory the plan counted); another batch is
 * refused (GT_ERR_ARG) naming both. */
GT_API gt_rc gt_ctx_train_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss);
/* Metrics of the last step (the fields of metrics.jsonl); GT_ERR_ARG, with
 * a message, before the first step since gt_ctx_init. */
GT_API gt_rc gt_ctx_last_metrics(const gt_ctx *c, gt_step_metrics *out);
/* Mean loss of tokens ([batch, seq + 1], as above, but batch may be fewer
 * rows than the global batch) without training. A batch whose every target
 * is masked has no mean and is refused (GT_ERR_ARG), as gt_ctx_train_tokens
 * refuses it. */
GT_API gt_rc gt_ctx_eval_tokens(gt_ctx *c, const int32_t *tokens, int batch, int seq, double *loss);
/* Forward pass: logits [batch, seq, vocab_size] of tokens [batch, seq] into a
 * buffer you own (a negative id is a pad, read as id 0). */
GT_API gt_rc gt_ctx_forward_logits(gt_ctx *c, const int32_t *tokens, int batch, int seq, float *logits);

/* Saves the parameters and optimizer state (safetensors, Hugging Face
 * parameter names; the moments as "optimizer.mu.<name>"/"optimizer.nu.<name>",
 * the step counts, data position, spike guard window and config in the
 * metadata) / loads them into an initialised context of the same model,
 * which then trains on as the saving context would. A file of another model
 * is refused (GT_ERR_FORMAT) naming what differs: the model keys of its
 * config (layers, layer pattern, dimensions, ...), a tensor this model does
 * not have, or one of another shape. A refused load changes nothing. */
GT_API gt_rc gt_ctx_save(gt_ctx *c, const char *path);
GT_API gt_rc gt_ctx_load(gt_ctx *c, const char *path);

#ifdef __cplusplus
}
#endif
#endif
