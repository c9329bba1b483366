/* TensorBoard event files: scalars that `tensorboard --logdir` shows.
 *
 * A file is a sequence of TFRecords (uint64 length, masked CRC32C of the
 * length, the record, masked CRC32C of the record; little-endian), each an
 * encoded tensorflow.Event. The first is Event{wall_time, file_version:
 * "brain.Event:2"}; then each step is Event{wall_time, step, summary:
 * Summary{value: [Value{tag, simple_value}, ...]}}.
 *
 * Encoded by hand, with no protobuf library: the few fields used (a double,
 * an int64 varint, a string and nested length-delimited messages holding a
 * string and a float) are a dozen lines of varint/length-delimited encoding,
 * simpler than generating and linking code with protobuf-c for them. The
 * field numbers are TensorFlow's (event.proto, summary.proto);
 * tools/proto/tf_event.proto states them for the independent reader that
 * the tests use (tools/read_tfevents.py). */
#ifndef GT_TRAIN_TFEVENTS_H
#define GT_TRAIN_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/common.h"

typedef struct gt_tf_scalar {
  const char *tag;
  float value;
} gt_tf_scalar;

typedef struct gt_tfevents {
  FILE *f;         /* NULL once closed or after a failed write */
  char path[2300]; /* the event file, for error messages */
} gt_tfevents;

/* Creates dir (and its parents) and a new event file in it,
 * events.out.tfevents.<unix seconds>.<hostname>.<pid>, with ".<n>" added
 * when that name exists already (a file is never appended to: a resumed run
 * writes a new one and TensorBoard reads every file of the directory), and
 * writes the file_version event. */
gt_rc gt_tfevents_open(gt_tfevents *w, const char *dir, gt_err *err);
/* One Event at `step` holding the n scalars, flushed to the file. */
gt_rc gt_tfevents_write_scalars(gt_tfevents *w, int64_t step, const gt_tf_scalar *v, int n, gt_err *err);
/* Event{step, session_log: SessionLog{status: START}}: what TensorFlow
 * writes when a run restarts from a checkpoint at `step`, so TensorBoard
 * drops the earlier files' events at steps >= step (they were run again). */
gt_rc gt_tfevents_write_restart(gt_tfevents *w, int64_t step, gt_err *err);
/* Closes the file; an unflushed tail that cannot be written is an error. */
gt_rc gt_tfevents_close(gt_tfevents *w, gt_err *err);

/* ---- the encoding, exposed for the tests ---- */

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78): "123456789" ->
 * 0xe3069283. */
uint32_t gt_crc32c(const void *data, size_t n);
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t gt_tfrecord_mask(uint32_t crc);
/* Encodes Event{wall_time, step (omitted when 0, as proto3 does),
 * file_version (when not NULL), session_log START (when restart),
 * summary (when n > 0)} into buf. Returns the encoded length; writes
 * nothing when that exceeds cap (call again with a larger buffer). */
size_t gt_tfevents_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *file_version,
                                int restart, const gt_tf_scalar *v, int n);
/* Frames one record: 8 + 4 + n + 4 bytes into out (which must hold them). */
size_t gt_tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n);

#endif
