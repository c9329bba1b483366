"""What the end-to-end scripts read back from gemtrain run directories:
metrics.jsonl and the tensor bytes of the latest checkpoint. Two runs that
must train alike are compared with same_run (the scripts import this file
with PYTHONPATH=<source>/tests)."""
import glob
import json
import os
import struct


def metrics_lines(run_dir):
    """The non-empty lines of <run_dir>/metrics.jsonl, as written."""
    return [line for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]


def tensor_bytes(run_dir):
    """(latest step's name, {shard file: its tensor bytes}) of the run's
    latest checkpoint: the bytes from the end of the 64-byte preamble to the
    header (offset at byte 16), i.e. every tensor as stored (docs/checkpoints.md)."""
    step = open(os.path.join(run_dir, "checkpoints", "latest")).read().strip()
    out = {}
    for f in sorted(glob.glob(os.path.join(run_dir, "checkpoints", step, "shard_*.gtck"))):
        raw = open(f, "rb").read()
        hoff, = struct.unpack_from("<Q", raw, 16)
        out[os.path.basename(f)] = raw[64:hoff]
    return step, out


def same_run(a, b, keys):
    """Asserts that runs a and b logged the same values of `keys` at every
    step (as numbers and as printed text: %.9g keeps float32 values exact)
    and end in the same latest checkpoint, byte for byte; returns a line
    saying what was compared."""
    la, lb = metrics_lines(a), metrics_lines(b)
    assert len(la) == len(lb) and la, (len(la), len(lb))
    for x, y in zip(la, lb):
        jx, jy = json.loads(x), json.loads(y)
        for k in keys:
            assert jx.get(k) == jy.get(k), (jx.get("step"), k, jx.get(k), jy.get(k))

    def fields(line):
        return {k: v for k, v in (p.split(": ", 1) for p in line.strip("{}\n").split(", ")) if k.strip('"') in keys}

    for x, y in zip(la, lb):
        assert fields(x) == fields(y), (fields(x), fields(y))
    sa, ta = tensor_bytes(a)
    sb, tb = tensor_bytes(b)
    assert sa == sb and ta.keys() == tb.keys() and ta, (sa, sb, ta.keys(), tb.keys())
    for k in ta:
        assert ta[k] == tb[k], ("weights differ", k)
    return (f"{os.path.basename(a)} = {os.path.basename(b)}: {len(la)} steps, {len(ta)} shard(s), "
            f"{sum(map(len, ta.values()))} tensor bytes")
