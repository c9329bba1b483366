/* gemtrain checkpoints: the full training state, written so that a crash at
 * any moment leaves the previous checkpoint usable, and read back bit-exactly.
 *
 * Layout (docs/checkpoints.md):
 *   <run_dir>/checkpoints/step_00000010/shard_00000-of-00002.gtck   one file per FSDP shard
 *   <run_dir>/checkpoints/latest                                      "step_00000010\n"
 * A step directory is built under a temporary name, every file fsync'ed,
 * then renamed into place; `latest` is then replaced by rename. `latest` is
 * the commit point: a directory newer than it is ignored. Several processes
 * may write one checkpoint together (gt_ckpt_save_sync).
 *
 * A shard file (little-endian):
 *   0  8 bytes  magic "GTCKPT\0\0"
 *   8  u32      version (1)
 *   12 u32      flags (bit 0: tensors are zlib streams)
 *   16 u64      header offset      24 u64 header bytes
 *   32 u32      crc32 of the header  36 u32 crc32 of bytes 0..35
 *   40 ...63    zero
 *   64          tensor data, one stream after another
 *   header      JSON: the training state, the resolved config, the model's
 *               tensor table, and per tensor {name, dtype, shape, unit,
 *               begin, count, offset, stored, crc32 (of the raw bytes)}
 * The file ends exactly at the header's end. Shard r of S holds, for every
 * unit u (gt_model_unit), elements [gt_shard_begin(n_u, S, r), +len) of the
 * parameters and of both AdamW moments, so any device count can read it.
 * n_u is the unit's trainable elements (gt_model_unit_trainable: all of it
 * without trainable_parameters_mask); the frozen ones are not stored: the
 * header's "frozen" object references them (source, checksum, tensor names),
 * a load expects them already in `params` and refuses a checksum mismatch. */
#ifndef GEMTRAIN_CKPT_H
#define GEMTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "data/data.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_CKPT_VERSION 1

/* The spike guard's state (train/spike.h), in the header's state as
 * "spike_guard": {"count", "skipped_steps", "loss": [...], "grad_norm":
 * [...]}: its rolling windows oldest first (n values of each, float32), the
 * values ever pushed, and the steps not applied so far. Written only when
 * count or skipped_steps is not 0; a checkpoint without it (older ones)
 * loads as all zero: an empty window. */
#define GT_CKPT_SPIKE_MAX 4096
typedef struct gt_ckpt_spike {
  int64_t count, skipped_steps;
  int n; /* min(count, the writer's window) */
  float loss[GT_CKPT_SPIKE_MAX], grad_norm[GT_CKPT_SPIKE_MAX];
} gt_ckpt_spike;

/* DPO's frozen reference when every parameter trains (train/pref_ref.c),
 * in the header's state as "dpo_reference": {"source", "checksum"}: where
 * it was read from and the checksum of its parameters (gt_store_sum, 16 hex
 * digits), so that a resume that would read another reference is refused.
 * Written only when sum is not 0; absent: none recorded. */
typedef struct gt_ckpt_reference {
  uint64_t sum;
  char source[1100];
} gt_ckpt_reference;

typedef struct gt_ckpt_state {
  int64_t step;          /* training steps completed */
  int64_t opt_step;      /* AdamW updates applied (fewer when steps were skipped) */
  gt_data_state data;    /* where the next training batch comes from */
  int64_t num_devices;   /* of the run that wrote it */
  int64_t n_shards;      /* files per checkpoint (the FSDP axis) */
  double next_lr;        /* learning rate of the next update (for the log) */
  gt_ckpt_spike spike;   /* the spike guard */
  gt_ckpt_reference reference; /* DPO's reference (zero: none) */
  /* the training rows the data order was made of ("data_rows"; 0: not
   * recorded, as in older checkpoints), so a resume over other data says so */
  int64_t data_rows;
} gt_ckpt_state;

/* Who wrote a checkpoint: the run's id (made at its start, the same on
 * every rank) and the checksum of its resolved config
 * (train/config_agree.h), in each shard's header as "writer". Every shard
 * of a step directory must carry the same writer, or none (older
 * checkpoints and tools record none). */
typedef struct gt_ckpt_writer {
  uint64_t run_id, config_sum;
} gt_ckpt_writer;

/* The frozen tensors (model/store.h), which a checkpoint references instead
 * of storing: the checksum of their bytes (gt_model_frozen_sum) and where
 * they come from ("init_weights_seed=N ...", "load_parameters_path=P"). */
typedef struct gt_ckpt_frozen {
  uint64_t sum;
  char source[1100];
  char qtype[16]; /* their storage (lora_weight_qtype; "float32" when the header names none) */
  /* the frozen lookup tables' (lora_embedding_qtype, model/qstore.h); ""
   * when the header names none: written before the tables were stored
   * apart, as qtype */
  char embed_qtype[16];
} gt_ckpt_frozen;

/* What gt_ckpt_save writes: n_shards shards, shard r given as three flat
 * arrays (params, mu, nu) holding that shard of every unit, unit by unit.
 * In a save by several ranks (gt_ckpt_save_sync), params[r], mu[r] and nu[r]
 * all NULL mean "another rank writes shard r"; without one, every shard is
 * needed. */
typedef struct gt_ckpt_src {
  int n_shards;
  const float *const *params;
  const float *const *mu;
  const float *const *nu;
} gt_ckpt_src;

/* Writes <root>/step_<step>/ and moves `latest` to it, then deletes all but
 * the newest `keep` step directories (keep 0: none deleted). On failure the
 * partial directory is removed and `latest` is unchanged. Refuses to write
 * non-finite values, or a state gt_ckpt_load_dir would refuse (GT_ERR_ARG).
 * config_json is stored as is (may be NULL). */
gt_rc gt_ckpt_save(const char *root, const gt_model *layout, const gt_ckpt_src *src, const gt_ckpt_state *st,
                   const char *config_json, int compression, int64_t keep, gt_err *err);
/* gt_ckpt_save that also records, as "hf_embed_rows" in every shard's
 * header, the rows of the Hugging Face embedding table the parameters were
 * read from (gemtrain convert from_hf; a Gemma 3 4b-and-up table has 262208
 * rows for 262144 tokens, which an export pads back to: hf.h). */
gt_rc gt_ckpt_save_hf(const char *root, const gt_model *layout, const gt_ckpt_src *src, const gt_ckpt_state *st,
                      const char *config_json, long long hf_embed_rows, gt_err *err);
/* The "hf_embed_rows" a step directory's shard 0 records; 0 when it records
 * none (every checkpoint but one of convert from_hf). */
gt_rc gt_ckpt_read_hf_rows(const char *step_dir, long long *rows, gt_err *err);

/* How the processes (MPI ranks) of one run that write a checkpoint
 * together reach agreement, without this module knowing about MPI.
 * `agree` is a collective: every rank calls it, in the same order, with its
 * own outcome (mine, and mine_err when mine != GT_OK), and it returns on no
 * rank before every rank has called it. It returns GT_OK when every rank
 * passed GT_OK; else, on every rank, the rc of the lowest failing rank R,
 * with err = "rank R: <R's message>". `what` names the protocol step
 * ("checkpoint step_00000020: write"), for a timeout's message. In
 * production: gt_dist_agree (dist/dist.h) behind a ctx-taking wrapper. */
typedef struct gt_ckpt_sync {
  int rank, size; /* this process, of size (0 <= rank < size) */
  gt_rc (*agree)(void *ctx, gt_rc mine, const gt_err *mine_err, const char *what, gt_err *err);
  void *ctx;
} gt_ckpt_sync;

/* gt_ckpt_save by every rank of `sync` at once (NULL: gt_ckpt_save
 * exactly). Every rank passes the same root, layout, state, config,
 * compression, keep and n_shards, and in src only the shards it holds;
 * every shard must be held by exactly one rank. root must be one directory
 * that every rank sees (a shared filesystem when the ranks are on several
 * machines). The protocol (docs/checkpoints.md, "Several processes"):
 *   rank 0 removes stale temporary directories, creates <root>/.tmp-step_N
 *   (named by the step, so every rank knows it)           -> agree "prepare"
 *   every rank writes and fsyncs its shard files there    -> agree "write"
 *   rank 0 checks that the directory holds exactly the n_shards files, each
 *   the shard its name says and of this save's state, then fsyncs, renames
 *   it into place, replaces `latest` and prunes           -> agree "commit"
 * so no rank returns before the commit is durable, and all return the same
 * rc: on any rank's failure every rank returns it ("rank R: ..."), rank 0
 * removes the temporary directory and `latest` is unchanged. A rank that
 * dies or hangs is the agree's to report (dist: a timeout naming it); what
 * it leaves is a temporary directory that loads ignore and the next save
 * removes. Only when an agree itself fails on some ranks (a lost peer) may
 * ranks return different rcs; the checkpoints on disk are then either the
 * old ones or the new one, complete. */
gt_rc gt_ckpt_save_sync(const char *root, const gt_model *layout, const gt_ckpt_src *src, const gt_ckpt_state *st,
                        const char *config_json, int compression, int64_t keep, const gt_ckpt_sync *sync,
                        gt_err *err);
/* The same for a layout with frozen tensors: `frozen` is their reference
 * (required then: GT_ERR_ARG without it; ignored when nothing is frozen);
 * `writer` (NULL: none recorded) goes into every shard. */
gt_rc gt_ckpt_save_frozen(const char *root, const gt_model *layout, const gt_ckpt_src *src, const gt_ckpt_state *st,
                          const gt_ckpt_frozen *frozen, const gt_ckpt_writer *writer, const char *config_json,
                          int compression, int64_t keep, const gt_ckpt_sync *sync, gt_err *err);

/* A save in three phases, for a writer that works beside the training
 * (async_checkpointing; gt_ckpt_save_frozen is the three in a row, so both
 * write the same bytes):
 *   _begin  checks, builds the header, removes stale temporary directories
 *           and creates <root>/.tmp-step_N (rank 0); the "prepare"
 *           agreement (collective with sync). On failure *out is NULL and
 *           nothing is left behind.
 *   _write  writes and fsyncs this process's shard files into it. No
 *           agreement: any one thread may run it. The arrays of src must
 *           hold their values until it returns (a snapshot's).
 *   _end    the "write" agreement on write_rc (err holds its message when
 *           write_rc is not GT_OK), rank 0's check and commit, the "commit"
 *           agreement (collective with sync); frees the save.
 * _abandon frees a begun save without committing it (a run that ends
 * broken): what it wrote stays a temporary directory, which loads ignore
 * and the next save removes. */
typedef struct gt_ckpt_pending gt_ckpt_pending;
gt_rc gt_ckpt_save_begin(gt_ckpt_pending **out, const char *root, const gt_model *layout, const gt_ckpt_src *src,
                         const gt_ckpt_state *st, const gt_ckpt_frozen *frozen, const gt_ckpt_writer *writer,
                         const char *config_json, int compression, int64_t keep, const gt_ckpt_sync *sync,
                         gt_err *err);
gt_rc gt_ckpt_save_write(gt_ckpt_pending *s, gt_err *err);
gt_rc gt_ckpt_save_end(gt_ckpt_pending *s, gt_rc write_rc, gt_err *err);
void gt_ckpt_save_abandon(gt_ckpt_pending *s);
int64_t gt_ckpt_save_step(const gt_ckpt_pending *s);

/* Called with one line for each checkpoint that was refused on the way to a
 * good one ("... ; trying the previous checkpoint"). */
typedef void (*gt_ckpt_log_fn)(void *ctx, const char *line);

typedef struct gt_ckpt_loaded {
  gt_ckpt_state state;
  char dir[1200];     /* the step directory that was loaded */
  char *config_json;  /* the writer's config (malloc'd, may be NULL); free() it */
  int n_refused;      /* newer checkpoints refused on the way */
  gt_ckpt_frozen frozen; /* the frozen tensors' reference (zero when none) */
  gt_ckpt_writer writer; /* zero when the shards record none */
} gt_ckpt_loaded;

/* Loads one step directory into full flat buffers of `layout` (mu and nu
 * may be NULL: parameters only). Every crc, size and shape is checked, and
 * so is every header field a crc cannot vouch for: each tensor's name, dtype
 * (F32), shape and place, each value finite, and each state field against
 * its range (0 <= opt_step <= step, 0 <= data_epoch <= step x the most
 * batches a step reads, data_cursor >= 0, num_devices as the config key,
 * n_shards = the shard files, all shards the same state and the same
 * writer: run id and config checksum, so shards of two runs never load as
 * one checkpoint), refused naming
 * the field, its value and the range. data_cursor's upper bound is the data
 * source's windows: gt_data_seek checks it. The buffers may hold partial
 * data when it fails. */
gt_rc gt_ckpt_load_dir(const char *dir, const gt_model *layout, float *params, float *mu, float *nu,
                       gt_ckpt_loaded *out, gt_err *err);

/* `path` is a step directory, a checkpoints directory, or a run directory
 * with checkpoints/ in it. Loads the checkpoint `latest` names, or when that
 * one is refused (bad crc, truncated, wrong magic, a field out of range, ...)
 * or missing (logged, naming the one tried instead) the newest older one
 * that loads. GT_ERR_IO when there is none at all; when every one is
 * refused, the error quotes the last refusal. */
gt_rc gt_ckpt_load_latest(const char *path, const gt_model *layout, float *params, float *mu, float *nu,
                          gt_ckpt_loaded *out, gt_ckpt_log_fn log, void *log_ctx, gt_err *err);

/* The resolved config stored in the checkpoint gt_ckpt_load_latest would
 * pick (malloc'd JSON; free() it), to build the model before loading. */
gt_rc gt_ckpt_read_config(const char *path, char **config_json, gt_err *err);

/* The frozen reference of a step directory (its first shard's header): *n
 * frozen tensors, their names in *names (malloc'd, one after another, each
 * ending in '\0'; free() it), the source and checksum in *fz. *n = 0 and
 * *names = NULL when the checkpoint stores every tensor. */
gt_rc gt_ckpt_read_frozen(const char *step_dir, char **names, int *n, gt_ckpt_frozen *fz, gt_err *err);

/* 1 when `path` (as for gt_ckpt_load_latest) holds at least one step
 * directory or a `latest` pointer. */
int gt_ckpt_present(const char *path);

/* Fault injection for tests (a kill or a full disk half-way through a save)
 * goes through the test-only seam ckpt/ckpt_seam.h, never the environment. */

#ifdef __cplusplus
}
#endif
#endif
