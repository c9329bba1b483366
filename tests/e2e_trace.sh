#!/usr/bin/env bash
# End-to-end: profiler=trace on a 2-device run writes <run_dir>/trace.json in
# the Chrome trace-event format, read back here with Python's json module
# only: spans nest on every lane, every device and communication lane is
# there, the host's step spans are the measured steps (5%: one interval
# timed twice), the devices' steps lie inside them and their top-level spans
# cover most of them, and the memory counters peak at the run's measured
# peak. A window that starts at or past `steps` (steps=1; a skip past the
# steps; a resume past it, which leaves the earlier trace.json as it was)
# and a run stopped before its window each print a note that no trace was
# written. Usage: e2e_trace.sh <gemtrain> <src>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_trace.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# steps 2..5 traced (the last one ends with the checkpoint write); a longer
# sequence than the preset's keeps a step well above thread wake-up times
"$bin" train model_name=gemma3-tiny dataset_type=synthetic num_devices=2 steps=6 max_target_length=256 \
  profiler=trace skip_first_n_steps_for_profiler=2 profiler_steps=4 sample_tokens=0 \
  "base_output_directory=$work/runs" run_name=t > "$work/log" 2>&1 || { cat "$work/log"; fail "train"; }
grep -q "^profiler: wrote $work/runs/t/trace.json (steps 2-5, [0-9]* events); overhead: the traced steps took" \
  "$work/log" || { cat "$work/log"; fail "no profiler line"; }
# without profiler=trace there is no trace
"$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=2 sample_tokens=0 enable_checkpointing=false \
  "base_output_directory=$work/runs" run_name=off > "$work/off.log" 2>&1 || { cat "$work/off.log"; fail "train off"; }
[ ! -e "$work/runs/off/trace.json" ] || fail "a trace without profiler=trace"
grep -q "^profiler:" "$work/off.log" && fail "a profiler line without profiler=trace"
grep -q "profiler=trace" "$work/off.log" && fail "a profiler note without profiler=trace"
# an empty window (it starts at or past `steps`) records nothing and says so
tiny=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 profiler=trace "base_output_directory=$work/runs")
"$bin" train "${tiny[@]}" steps=1 enable_checkpointing=false run_name=one > "$work/one.log" 2>&1 \
  || { cat "$work/one.log"; fail "train one"; }
grep -qx "note: profiler=trace: the window starts at step 1 (the run's first step 0 + skip_first_n_steps_for_profiler=1), past the run's last step 0 (steps=1): no trace written" \
  "$work/one.log" || { cat "$work/one.log"; fail "steps=1: no empty-window note"; }
[ ! -e "$work/runs/one/trace.json" ] || fail "steps=1: a trace"
"$bin" train "${tiny[@]}" steps=3 skip_first_n_steps_for_profiler=5 enable_checkpointing=false run_name=skip \
  > "$work/skip.log" 2>&1 || { cat "$work/skip.log"; fail "train skip"; }
grep -qx "note: profiler=trace: the window starts at step 5 (the run's first step 0 + skip_first_n_steps_for_profiler=5), past the run's last step 2 (steps=3): no trace written" \
  "$work/skip.log" || { cat "$work/skip.log"; fail "skip past steps: no empty-window note"; }
# a resume whose window is empty keeps the earlier run's trace.json, and says whose it is
"$bin" train "${tiny[@]}" steps=4 profiler_steps=2 run_name=res > "$work/res1.log" 2>&1 || { cat "$work/res1.log"; fail "train res"; }
grep -q "^profiler: wrote $work/runs/res/trace.json (steps 1-2," "$work/res1.log" || { cat "$work/res1.log"; fail "res: no trace"; }
sum1=$(cksum < "$work/runs/res/trace.json")
"$bin" train "${tiny[@]}" steps=5 profiler_steps=2 run_name=res > "$work/res2.log" 2>&1 || { cat "$work/res2.log"; fail "resume res"; }
grep -qx "note: profiler=trace: the window starts at step 5 (the run's first step 4 + skip_first_n_steps_for_profiler=1), past the run's last step 4 (steps=5): no trace written; $work/runs/res/trace.json is an earlier run's trace, left as it was" \
  "$work/res2.log" || { cat "$work/res2.log"; fail "resume: no empty-window note naming the earlier trace"; }
[ "$(cksum < "$work/runs/res/trace.json")" = "$sum1" ] || fail "resume: the earlier trace.json changed"
# a run stopped before its window began says that no trace was written
rc=0
GEMTRAIN_TEST_SIGNAL_STEP=0 "$bin" train "${tiny[@]}" steps=5 skip_first_n_steps_for_profiler=3 enable_checkpointing=false \
  run_name=stop > "$work/stop.log" 2>&1 || rc=$?
[ "$rc" = 5 ] || { cat "$work/stop.log"; fail "the stopped run exited $rc, expected 5"; }
grep -qx "note: profiler=trace: the run ended before step 3, the window's first: no trace written" "$work/stop.log" \
  || { cat "$work/stop.log"; fail "stopped before the window: no note"; }
[ ! -e "$work/runs/stop/trace.json" ] || fail "stopped before the window: a trace"

/usr/bin/python3 - "$work/runs/t" <<'PY' || fail "trace check"
import json, sys
run = sys.argv[1]
doc = json.load(open(f"{run}/trace.json"))
evs = doc["traceEvents"]
steps = {m["step"]: m for m in map(json.loads, open(f"{run}/metrics.jsonl"))}
traced = list(range(doc["otherData"]["first_step"], doc["otherData"]["last_step"] + 1))
assert traced == [2, 3, 4, 5], traced
assert doc["otherData"]["dropped_events"] == 0

# the trace-event format: every event's fields, with their types
names = {}
for e in evs:
    assert isinstance(e["name"], str) and e["ph"] in "XCM" and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    if e["ph"] == "X":
        assert isinstance(e["cat"], str) and isinstance(e["ts"], (int, float)) and e["dur"] >= 0, e
    elif e["ph"] == "C":
        assert isinstance(e["ts"], (int, float)) and e["args"] and all(isinstance(v, int) for v in e["args"].values()), e
    elif e["name"] == "thread_name":
        names[e["args"]["name"]] = e["tid"]
want = ["host (loop)", "device 0", "device 0 comm", "device 1", "device 1 comm"]
# the checkpoint writer's lane is listed once a background write ended in the window
assert sorted(set(names) - {"checkpoint writer"}) == sorted(want), names
ns = lambda us: round(us * 1000)  # the file's microseconds have nanosecond decimals
spans = {t: sorted(((ns(e["ts"]), ns(e["dur"]), e) for e in evs if e["ph"] == "X" and e["tid"] == t),
                   key=lambda s: (s[0], -s[1])) for t in names.values()}
for lane in want:
    assert spans[names[lane]], f"lane {lane} has no span"
for d in (0, 1):  # the prefetches run on the comm threads, with their bytes
    comm = [e for _, _, e in spans[names[f"device {d} comm"]]]
    assert all(e["name"] == "all_gather (async)" and e["args"]["bytes"] > 0 for e in comm), comm[:3]

# nesting: a span starts after its predecessor on the lane ends, or ends
# inside it; top-level children of each span are collected on the way
children = {}
for lane, t in names.items():
    stack = []
    for s in spans[t]:
        while stack and s[0] >= stack[-1][0] + stack[-1][1]:
            stack.pop()
        if stack:
            p = stack[-1]
            assert s[0] + s[1] <= p[0] + p[1], (lane, "overlaps", p[2], s[2])
            children.setdefault(id(p[2]), []).append(s)
        stack.append(s)

def close(a, b, what):
    assert abs(a - b) <= 0.05 * max(a, b), (what, a, b)

# the host's step spans are the measured steps
host = [s for s in spans[names["host (loop)"]] if s[2]["cat"] == "step"]
assert [s[2]["args"]["step"] for s in host] == traced, host
for ts, dur, e in host:
    close(dur / 1e9, steps[e["args"]["step"]]["seconds"], f"host span of {e['name']}")
kinds = {e["name"] for _, _, e in spans[names["host (loop)"]]}
# the checkpoint: its snapshot (async_checkpointing, the default; the
# write runs beside the steps) or its whole write (synchronous)
assert "data loading" in kinds and kinds & {"checkpoint snapshot", "checkpoint write"}, kinds
for d in (0, 1):
    dev = [s for s in spans[names[f"device {d}"]] if s[2]["name"] == "train step"]
    assert len(dev) == len(host), (d, len(dev))
    for (ts, dur, e), (hts, hdur, he) in zip(dev, host):
        assert hts <= ts and ts + dur <= hts + hdur, (d, "device step outside the host's", he["name"])
        # the device's step lies inside the host's (checked above); its
        # top-level spans cover most of it: the gaps are the bookkeeping
        # between spans, which only a preemption there lengthens (no
        # tighter bound: this must pass on a busy machine)
        kids = children.get(id(e), [])
        cover = sum(k[1] for k in kids)
        assert 0.5 * dur <= cover <= dur, (d, he["name"], "top-level spans cover", cover, "of", dur)
        got = {k[2]["name"] for k in kids}
        assert {"forward, layer 0", "output head (logits and loss)", "backward, recomputing layer 5",
                "backward, layer 5", "optim_update", "all_reduce (f64)"} <= got, got
    ops = {e["cat"] for _, _, e in spans[names[f"device {d}"]]}
    assert {"matmul", "attention", "elementwise", "softmax-xent", "optimizer", "collective", "layer"} <= ops, ops

# memory: the counters' largest sum per device is the measured peak
peak = max(steps[s]["peak_memory_bytes"] for s in traced)
top = 0
for d in (0, 1):
    samples = [e["args"] for e in evs if e["ph"] == "C" and e["name"] == f"memory (device {d})"]
    assert samples and set(samples[0]) == {"params", "grads", "optimizer", "saved_activations", "temporaries",
                                           "logits", "gathered_weights", "other"}, samples[:1]
    top = max(top, max(sum(a.values()) for a in samples))
assert top == peak, (top, peak)
print(f"trace: {len(evs)} events, peak {peak} bytes, steps {traced}")
PY
echo "e2e_trace: 1 passed, 0 failed"
