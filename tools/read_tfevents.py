#!/usr/bin/python3
"""Reads TensorBoard event files independently of gemtrain's writer.

Usage: read_tfevents.py <dir with tf_event_pb2.py> <event file>...

Checks every TFRecord's framing (uint64 length, masked CRC-32C of the
length, the record, masked CRC-32C of the record) with crcmod's 'crc-32c',
decodes each record as a tensorflow.Event with the python protobuf library
(tools/proto/tf_event.proto compiled by protoc into that directory), and
prints one JSON object per file:
  {"file": path, "events": [{"wall_time", "step", "file_version"?,
   "session_log"?, "values"?: {tag: simple_value}}]}
Exits 1 with one line on a bad CRC, a truncated record or a record that does
not parse.
"""
import json
import struct
import sys

import crcmod.predefined

sys.path.insert(0, sys.argv[1])
import tf_event_pb2  # noqa: E402  (generated at test time)

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("%s: truncated record header at byte %d" % (path, pos))
        head = data[pos : pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if hcrc != masked(head):
            raise ValueError("%s: length CRC %08x != %08x at byte %d" % (path, hcrc, masked(head), pos))
        if pos + 16 + n > len(data):
            raise ValueError("%s: truncated record at byte %d" % (path, pos))
        body = data[pos + 12 : pos + 12 + n]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + n : pos + 16 + n])
        if dcrc != masked(body):
            raise ValueError("%s: record CRC %08x != %08x at byte %d" % (path, dcrc, masked(body), pos))
        yield body
        pos += 16 + n


def read(path):
    events = []
    for body in records(path):
        ev = tf_event_pb2.Event()
        ev.ParseFromString(body)
        out = {"wall_time": ev.wall_time, "step": ev.step}
        what = ev.WhichOneof("what")
        if what == "file_version":
            out["file_version"] = ev.file_version
        elif what == "session_log":
            out["session_log"] = tf_event_pb2.SessionLog.SessionStatus.Name(ev.session_log.status)
        elif what == "summary":
            vals = {}
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    raise ValueError("%s: step %d tag %s has no simple_value" % (path, ev.step, v.tag))
                if v.tag in vals:
                    raise ValueError("%s: step %d repeats tag %s" % (path, ev.step, v.tag))
                vals[v.tag] = v.simple_value
            out["values"] = vals
        else:
            raise ValueError("%s: an event with neither file_version, summary nor session_log" % path)
        events.append(out)
    return {"file": path, "events": events}


def main():
    try:
        for path in sys.argv[2:]:
            print(json.dumps(read(path)))
    except (ValueError, OSError) as e:
        print("read_tfevents: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
