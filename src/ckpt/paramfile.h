/* gemtrain parameter files: the safetensors file gt_ctx_save writes and
 * gt_ctx_load reads. Tensors carry the model's Hugging Face names without the
 * "model." prefix, F32; the AdamW moments follow as "optimizer.mu.<name>" and
 * "optimizer.nu.<name>"; __metadata__ holds "format", "optimizer_step" and
 * "config" (the resolved gemtrain config as JSON), so a file describes its
 * own model (a file of convert from_hf also "hf_embed_rows"). A file of
 * gt_ctx_save also holds "training_state", the rest of what the next steps
 * depend on, as JSON with a checkpoint's field names: {"step" (steps done,
 * skipped ones included: it seeds the adapters' dropout), "data_epoch",
 * "data_cursor", and "spike_guard" (the spike guard's record, ckpt.h; absent
 * while it is empty)}. `gemtrain convert` reads and writes it; a run's full
 * state (sharding, the run directory) is the checkpoint of src/ckpt/ckpt.h. */
#ifndef GEMTRAIN_PARAMFILE_H
#define GEMTRAIN_PARAMFILE_H

#include <stdint.h>

#include "base/common.h"
#include "ckpt/ckpt.h"
#include "config/config.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes m->params (and the moments mu, nu of n_params floats each; NULL:
 * zeros, as for a model that has not trained yet) atomically to path. */
gt_rc gt_paramfile_write(const char *path, const gt_model *m, const gt_config *cfg, const float *mu,
                         const float *nu, int64_t step, gt_err *err);

/* A file's "training_state" (above). */
typedef struct gt_paramfile_train {
  int present;        /* read: 0 when the file has none (written by convert, or by an older gemtrain) */
  int64_t step;       /* steps done, skipped ones included: the trainer's step index */
  gt_data_state data; /* where the next training batch comes from */
  gt_ckpt_spike spike;
} gt_paramfile_train;

/* gt_paramfile_write that also records ts (NULL: none). */
gt_rc gt_paramfile_write_train(const char *path, const gt_model *m, const gt_config *cfg, const float *mu,
                               const float *nu, int64_t opt_step, const gt_paramfile_train *ts, gt_err *err);

/* gt_paramfile_write without moments (step 0) that also records, as the
 * metadata entry "hf_embed_rows", the rows of the Hugging Face embedding
 * table the parameters were read from (gemtrain convert from_hf; a Gemma 3
 * 4b-and-up table has 262208 rows for 262144 tokens, which an export pads
 * back to: hf.h). */
gt_rc gt_paramfile_write_hf(const char *path, const gt_model *m, const gt_config *cfg, long long hf_embed_rows,
                            gt_err *err);
/* The "hf_embed_rows" a file records; 0 when it records none. */
gt_rc gt_paramfile_read_hf_rows(const char *path, long long *rows, gt_err *err);
/* Reads the parameters into m->params (m built from the same config and
 * allocated); mu and nu (may be NULL: not read) receive the moments, step
 * (may be NULL) the optimizer step. Every tensor must be present with the
 * model's shape. */
gt_rc gt_paramfile_read(const char *path, gt_model *m, float *mu, float *nu, int64_t *step, gt_err *err);
/* gt_paramfile_read that also reads the training state into ts (its present
 * 0 when the file has none); every field is checked (GT_ERR_FORMAT naming
 * the file and field): the step is at least the optimizer step and at most
 * 2^53, the spike record as a checkpoint's. With `same` (m's configuration;
 * NULL: not checked) the file must be of m's model, or GT_ERR_FORMAT names
 * what differs: its metadata config's model keys (and adapter scale, when
 * both train adapters) equal same's, and it holds no tensor m lacks (a
 * larger model's layers, adapters m has none of). */
gt_rc gt_paramfile_read_train(const char *path, gt_model *m, const gt_config *same, float *mu, float *nu,
                              int64_t *opt_step, gt_paramfile_train *ts, gt_err *err);

/* The file's own config: configs/base.json's defaults overridden by every key
 * stored in its metadata, validated. */
gt_rc gt_paramfile_read_config(const char *path, gt_config *cfg, gt_err *err);

#ifdef __cplusplus
}
#endif
#endif
