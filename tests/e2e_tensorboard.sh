#!/usr/bin/env bash
# End-to-end: the TensorBoard event files of real runs, read back by an
# independent reader (tools/read_tfevents.py: python protobuf with
# tools/proto/tf_event.proto compiled here by protoc, crcmod's crc-32c for
# both CRCs of every record), hold the scalars of metrics.jsonl under
# MaxText's tags: a text run with eval, resumed from an earlier checkpoint
# into a second file whose restart event supersedes the rerun steps; a MoE
# run (learning/moe_lb_loss); a skipped non-finite step (its non-finite
# values absent); enable_tensorboard=false (no directory); and a sweep, each
# point's events in its own run directory. Each file holds, at its run's
# first step, the setup/* parameter counts (all trainable here). Without
# the reader's packages it skips (exit 77).
# Usage: e2e_tensorboard.sh <gemtrain binary> <source dir>
set -euo pipefail
bin=$(realpath "$1"); src=$(realpath "$2")
py=/usr/bin/python3
missing=""
"$py" -c 'import google.protobuf' 2>/dev/null || missing="$missing python3-protobuf"
"$py" -c 'import crcmod.predefined' 2>/dev/null || missing="$missing python3-crcmod"
command -v protoc >/dev/null 2>&1 || missing="$missing protobuf-compiler"
if [ -n "$missing" ]; then # 77: ctest reports a skip (SKIP_RETURN_CODE, CMakeLists.txt), not a pass
  echo "SKIP: e2e_tensorboard needs$missing for its independent reader (tools/setup.sh installs them)"
  exit 77
fi
work=$(mktemp -d /tmp/gt_e2e_tboard.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir "$work/pb"
protoc --python_out="$work/pb" -I "$src/tools/proto" "$src/tools/proto/tf_event.proto"

# check <run dir> <event files expected> <moe 0|1> <eval steps expected>
check() {
  local run="$1"
  [ -d "$run/tensorboard" ] || fail "no $run/tensorboard"
  "$py" "$src/tools/read_tfevents.py" "$work/pb" "$run"/tensorboard/events.out.tfevents.* > "$work/events.json" \
    || fail "read_tfevents on $run"
  "$py" - "$work/events.json" "$run/metrics.jsonl" "$2" "$3" "$4" "$run/config.json" <<'EOF' || fail "events of $run"
import json, math, struct, sys
files = [json.loads(l) for l in open(sys.argv[1])]
metrics = [json.loads(l) for l in open(sys.argv[2])]
n_files, moe, n_eval = int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5])
clip = json.load(open(sys.argv[6]))["gradient_clipping_threshold"]
assert len(files) == n_files, (len(files), [f["file"] for f in files])
# in the order they were written (names of one second may not sort so)
files.sort(key=lambda f: f["events"][0]["wall_time"])
steps = {}
for i, f in enumerate(files):
    ev = f["events"]
    assert ev[0].get("file_version") == "brain.Event:2" and ev[0]["step"] == 0, ev[0]
    rest = ev[1:]
    if i > 0:  # a resumed run's file opens with a restart at its first step
        assert rest[0].get("session_log") == "START", rest[0]
        r = rest[0]["step"]
        assert rest[1]["step"] == r, (r, rest[1])
        # what TensorBoard does with it: earlier files' steps >= r are dropped
        for s in [s for s in steps if s >= r]:
            del steps[s]
        rest = rest[1:]
    # then what trains, at the run's first step (full-parameter runs here:
    # nothing frozen, no adapters)
    setup, rest = rest[0], rest[1:]
    sv = setup.get("values", {})
    assert sorted(sv) == ["setup/num_frozen_parameters", "setup/num_lora_parameters", "setup/num_parameters",
                          "setup/num_trainable_parameters"], setup
    assert setup["step"] == rest[0]["step"], (setup["step"], rest[0]["step"])
    assert sv["setup/num_parameters"] > 0 and sv["setup/num_trainable_parameters"] == sv["setup/num_parameters"], sv
    assert sv["setup/num_frozen_parameters"] == 0 and sv["setup/num_lora_parameters"] == 0, sv
    last_t, last_s = 0.0, -1
    for e in rest:
        assert "values" in e, e
        assert e["step"] > last_s and e["wall_time"] >= last_t, (e["step"], last_s)
        last_t, last_s = e["wall_time"], e["step"]
        # a step twice would be a rerun step nothing superseded
        assert e["step"] not in steps, ("step %d again" % e["step"], f["file"])
        steps[e["step"]] = e["values"]
assert sorted(steps) == [m["step"] for m in metrics], (sorted(steps), [m["step"] for m in metrics])

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def ulp32(x):
    b = struct.unpack("<I", struct.pack("<f", abs(f32(x))))[0]
    return struct.unpack("<f", struct.pack("<I", b + 1))[0] - abs(f32(x))

# (tag, metrics.jsonl key, half the last digit metrics.jsonl prints: %.9g
# fields are float32-exact, %.6f / %.3f ones are rounded there)
fields = [("learning/loss", "loss", 0), ("learning/lm_loss", "lm_loss", 0),
          ("learning/perplexity", "perplexity", 0), ("learning/raw_grad_norm", "grad_norm", 0),
          ("learning/grad_norm", "clipped_grad_norm", 0),
          ("learning/current_learning_rate", "learning_rate", 0),
          ("learning/total_weights", "total_weights", 0),
          ("perf/step_time_seconds", "seconds", 5e-7),
          ("perf/per_device_tflops_per_sec", "tflops_per_s_per_device", 5e-7),
          ("perf/per_device_tokens_per_sec", "tokens_per_s_per_device", 5e-4),
          ("learning/moe_lb_loss", "moe_lb_loss", 0), ("learning/z_loss", "z_loss", 0),
          ("learning/param_norm", "param_norm", 0),
          ("perf/per_device_tflops", "tflops_per_device", 0), ("perf/per_device_tokens", "tokens_per_device", 0),
          ("perf/tokens_seen_per_device", "tokens_seen_per_device", 0),
          ("perf/checkpoint_write_seconds", "checkpoint_write_seconds", 5e-7),
          ("perf/checkpoint_blocked_seconds", "checkpoint_blocked_seconds", 5e-7),
          ("diloco/bytes", "diloco_bytes", 0),
          ("eval/avg_loss", "eval_loss", 0), ("eval/avg_perplexity", "eval_perplexity", 0),
          ("eval/total_weights", "eval_total_weights", 0)]
evals, clipped = 0, 0
for m in metrics:
    # MaxText's learning/grad_norm is the clipped gradient's norm
    g = m.get("grad_norm")
    if g is not None:
        m["clipped_grad_norm"] = min(g, clip) if clip > 0 else g
        clipped += clip > 0 and g >= clip
    v = steps[m["step"]]
    want = {tag for tag, key, _ in fields if m.get(key) is not None}
    if m.get("diloco_synced"):
        want.add("diloco/synced")
    if "skipped_steps" in m:  # skip_step_on_spikes: MaxText's optim/step_skipped and the count
        want |= {"optim/step_skipped", "optim/skipped_steps"}
    assert set(v) == want, (m["step"], sorted(set(v) ^ want))
    assert ("learning/moe_lb_loss" in v) == moe, m["step"]
    evals += "eval/avg_loss" in v
    for tag, key, tol in fields:
        if tag in v:
            # float32 of the same double; one float32 ulp more for a %.9g
            # print that rounded across a float32 midpoint
            assert abs(v[tag] - f32(m[key])) <= tol + ulp32(m[key]), (m["step"], tag, v[tag], m[key])
            if key.endswith("total_weights"):  # token counts are exact
                assert v[tag] == m[key], (m["step"], tag, v[tag], m[key])
assert evals == n_eval, (evals, n_eval)
print("ok: %d files, %d steps (%d clipped)" % (len(files), len(metrics), clipped))
EOF
}

"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
text=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" eval_interval=3 eval_steps=1
      checkpoint_period=4 save_checkpoint_on_completion=false sample_tokens=0 "base_output_directory=$work/runs"
      run_name=text)

# 6 steps (eval after steps 2 and 5), a checkpoint at step 4; then 9 steps
# resume from it: steps 4 and 5 run again (with another learning-rate
# schedule, as steps changed), into a second file
"$bin" train "${text[@]}" steps=6 > "$work/text1.txt" 2>&1 || { cat "$work/text1.txt"; fail "text run"; }
check "$work/runs/text" 1 0 2
"$bin" train "${text[@]}" steps=9 > "$work/text2.txt" 2>&1 || { cat "$work/text2.txt"; fail "resumed text run"; }
grep -q "step_00000004" "$work/text2.txt" || { cat "$work/text2.txt"; fail "the second run did not resume from step 4"; }
# evals at 2 (first file), 5 and 8 (second file; the first file's 5 is superseded)
check "$work/runs/text" 2 0 3

# a threshold no norm reaches: learning/grad_norm is the raw norm here
"$bin" train model_name=gemma4-tiny-moe dataset_type=synthetic steps=3 sample_tokens=0 enable_checkpointing=false \
  gradient_clipping_threshold=1000 \
  "base_output_directory=$work/runs" run_name=moe > "$work/moe.txt" 2>&1 || { cat "$work/moe.txt"; fail "MoE run"; }
check "$work/runs/moe" 1 1 0

GEMTRAIN_TEST_NAN_STEP=2 "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=4 skip_nonfinite_steps=true \
  sample_tokens=0 enable_checkpointing=false "base_output_directory=$work/runs" run_name=skip > "$work/skip.txt" 2>&1 \
  || { cat "$work/skip.txt"; fail "run with a skipped step"; }
grep -q '"step": 2.*"skipped": true' "$work/runs/skip/metrics.jsonl" || fail "step 2 was not skipped"
check "$work/runs/skip" 1 0 0
"$py" - "$work/events.json" <<'EOF' || fail "the skipped step's values"
import json, math, sys
ev = [e for e in json.loads(open(sys.argv[1]).readline())["events"] if e["step"] == 2 and "values" in e][0]["values"]
assert "learning/grad_norm" not in ev and "learning/current_learning_rate" in ev, sorted(ev)
assert all(math.isfinite(x) for x in ev.values())
EOF

"$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=2 sample_tokens=0 enable_checkpointing=false \
  enable_tensorboard=false "base_output_directory=$work/runs" run_name=off > "$work/off.txt" 2>&1 \
  || { cat "$work/off.txt"; fail "run without tensorboard"; }
[ -s "$work/runs/off/metrics.jsonl" ] || fail "no metrics.jsonl without tensorboard"
[ ! -e "$work/runs/off/tensorboard" ] || fail "enable_tensorboard=false wrote $work/runs/off/tensorboard"

# a sweep: each point is a `gemtrain train`, its events in its run directory,
# so `tensorboard --logdir <sweep dir>` compares the points
cat > "$work/tb.json" <<'EOF'
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "eval_interval": -1, "sample_tokens": 0}},
  "grid": {"remat_policy": ["full", "none"]},
  "steps": 2
}
EOF
(cd "$work" && "$bin" sweep tb.json base_output_directory=out) > "$work/sweep.txt" 2>&1 \
  || { cat "$work/sweep.txt"; fail "the sweep failed"; }
for k in 1 2; do check "$work/out/tb/runs/point-$k" 1 0 0; done
[ "$(find "$work/out/tb" -name 'events.out.tfevents.*' | wc -l)" = 2 ] || fail "the sweep holds other event files"
echo "e2e_tensorboard: ok"
