#!/usr/bin/env bash
# End-to-end: a run left to itself. gemma3-tiny trains on the King James
# text with lr_schedule_type=wsd and target_eval_loss: it stops at the first
# eval at or below the target (exit status 0, with a checkpoint of that
# step, a line saying so), its learning rates follow MaxText's WSD formula
# (written again here in Python), metrics.jsonl and TensorBoard carry
# MaxText's names, and the goodput line's shares and every record's add up.
# Usage: e2e_longrun.sh <gemtrain binary> <source dir>
set -euo pipefail
bin=$(realpath "$1"); src=$(realpath "$2")
py=/usr/bin/python3
work=$(mktemp -d /tmp/gt_e2e_longrun.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null
head -c 400000 "$work/kjv.txt" > "$work/corpus.txt"
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" learning_rate=0.01
        lr_schedule_type=wsd warmup_steps_fraction=0.1 sample_tokens=0 threads_per_device=1 log_period=100
        "base_output_directory=$work/runs")

# 1. evals after steps 4, 9, 14, ... (losses about 3.5, 2.7, 2.5): a target
#    of 2.6 is reached after step 14, well inside the 40 steps
set +e
"$bin" train "${common[@]}" steps=40 wsd_decay_steps_fraction=0.25 wsd_decay_style=cosine eval_interval=5 \
  eval_steps=2 target_eval_loss=2.6 async_checkpointing=false run_name=target > "$work/target.log" 2>&1
status=$?
set -e
[ "$status" = 0 ] || { tail -5 "$work/target.log"; fail "exit status $status, not 0, for a run that reached its target"; }
grep -q '^reached target_eval_loss = 2.6: eval loss 2\.[0-5][0-9]* after step 14; the run ends here, 15 of 40 steps; checkpoint step_00000015$' \
  "$work/target.log" || { tail -8 "$work/target.log"; fail "no line saying the target was reached after step 14"; }
grep -q '^run_name=target: reached target_eval_loss = 2.6 after step 14, 15 of 40 steps (exit status 0)' \
  "$work/target.log" || { tail -3 "$work/target.log"; fail "the closing line does not say the target was reached"; }
[ -d "$work/runs/target/checkpoints/step_00000015" ] || fail "no checkpoint of step 14"
[ "$(grep -c '^eval metrics after step' "$work/target.log")" = 3 ] || fail "not 3 evals before the target"
goodput=$(grep '^goodput: ' "$work/target.log") || fail "no goodput line"
# the analytic count, from `gemtrain plan` (the same formula, asked apart)
planned() { "$bin" plan "$@" --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["total_tflops_per_step_per_device"])'; }
planned_target=$(planned "${common[@]}" steps=40) || fail "gemtrain plan"

"$py" - "$work/runs/target/metrics.jsonl" "$goodput" "$planned_target" <<'EOF' || fail "metrics.jsonl of the target run"
import json, math, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(15)), [r["step"] for r in rows]
# MaxText's create_learning_rate_schedule, lr_schedule_type=wsd, cosine decay:
# S = 40, warmup int(4.0) = 4, decay int(10.0) = 10, stable 26
def wsd(step, lr=0.01, final=0.001, S=40, warm=4, decay=10, cosine=True):
    stable = S - warm - decay
    if step < warm:  # optax.linear_schedule(0, lr, warm - 1): lr at step warm - 1
        return lr * step / (warm - 1) if warm > 1 else 0.0
    if step < warm + stable:
        return lr
    k = step - warm - stable
    if cosine:
        pct = k / (decay - 1) if decay > 1 else 1.0
        a = 0.5 * (math.cos(math.pi * pct) + 1)
        return lr * a + final * (1 - a)
    n = decay - 1
    return lr if n <= 0 else (lr - final) * (1 - min(k, n) / n) + final
for r in rows:
    assert abs(r["learning_rate"] - wsd(r["step"])) <= 1e-9 * 0.01, (r["step"], r["learning_rate"], wsd(r["step"]))
ev = {r["step"]: r for r in rows if "eval_loss" in r}
assert sorted(ev) == [4, 9, 14], sorted(ev)
assert ev[9]["eval_loss"] > 2.6 >= ev[14]["eval_loss"], [ev[s]["eval_loss"] for s in ev]
for s, r in ev.items():  # MaxText's eval/avg_perplexity
    assert abs(r["eval_perplexity"] - math.exp(r["eval_loss"])) <= 1e-6 * r["eval_perplexity"], r
# the target's checkpoint, written (synchronously) before step 14's record,
# is in it; a background write would be reported by a later step's record,
# and there is none after the target
assert rows[14]["checkpoint_write_seconds"] > 0 and "checkpoint_write_seconds" not in rows[13], rows[14]
tok = 4 * 64  # per_device_batch_size x max_target_length of gemma3-tiny, one device
buckets = ["training_prep", "unproductive_checkpoint_restore_time", "data_loading_sync", "eval",
           "unproductive_checkpoint_save_time", "unapplied_steps", "other"]
for r in rows:
    assert r["tokens_per_device"] == tok and r["tokens_seen_per_device"] == tok * (r["step"] + 1), r
    # the step's TFLOPs per device: the analytic count the plan gives
    assert abs(r["tflops_per_device"] - float(sys.argv[3])) <= 1e-9 * r["tflops_per_device"], (r, sys.argv[3])
    assert sorted(r["badput"]) == sorted(buckets), sorted(r["badput"])
    total = r["goodput"] + sum(r["badput"].values())
    assert abs(total - 1) < 1e-5, (r["step"], total)
    assert r["goodput"] > 0 and r["wall_seconds"] > 0
assert rows[-1]["badput"]["eval"] > 0 and rows[-1]["badput"]["training_prep"] > 0
# the closing line: every share to 0.1%, adding up to 100% within their rounding
line = sys.argv[2]
shares = [float(x) for x in re.findall(r"([0-9.]+)%", line)]
assert len(shares) == 8, line
assert abs(sum(shares) - 100) <= 0.05 * len(shares) + 1e-9, (sum(shares), line)
for b in buckets:
    assert " %s " % b in line, (b, line)
print("e2e_longrun: target after step 14; goodput %.1f%%" % shares[0])
EOF

# 2. the count per device with 2 devices and 2 micro-batches a step: the
#    plan's, and the tokens a device took (2 x 4 rows of 64)
acc=(num_devices=2 gradient_accumulation_steps=2 steps=2 eval_interval=-1 enable_checkpointing=false)
"$bin" train "${common[@]}" "${acc[@]}" run_name=acc > "$work/acc.log" 2>&1 || { tail -5 "$work/acc.log"; fail "2 devices x 2 micro-batches"; }
planned_acc=$(planned "${common[@]}" "${acc[@]}") || fail "gemtrain plan (2 devices x 2 micro-batches)"
"$py" - "$work/runs/acc/metrics.jsonl" "$planned_acc" "$planned_target" <<'EOF' || fail "the count with 2 devices x 2 micro-batches"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, len(rows)
planned, one = float(sys.argv[2]), float(sys.argv[3])
assert abs(planned - 2 * one) <= 1e-9 * planned, (planned, one)  # two micro-batches of one device's rows
for r in rows:
    assert abs(r["tflops_per_device"] - planned) <= 1e-9 * planned, (r["tflops_per_device"], planned)
    assert r["tokens_per_device"] == 2 * 4 * 64, r["tokens_per_device"]
print("e2e_longrun: 2 devices x 2 micro-batches: %.6g TFLOPs per device per step, as planned" % planned)
EOF

# 2. the linear decay to the end, no target: every rate against the formula
"$bin" train "${common[@]}" steps=12 wsd_decay_steps_fraction=0.5 wsd_decay_style=linear eval_interval=-1 \
  enable_checkpointing=false run_name=linear > "$work/linear.log" 2>&1 || { tail -5 "$work/linear.log"; fail "linear run"; }
"$py" - "$work/runs/linear/metrics.jsonl" <<'EOF' || fail "the linear decay's rates"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# S = 12: warmup int(1.2) = 1, decay int(6.0) = 6 (optax.linear_schedule over 5 steps), stable 5
want = [0.0] + [0.01] * 5 + [0.01 - (0.01 - 0.001) * k / 5 for k in range(6)]
got = [r["learning_rate"] for r in rows]
assert len(got) == 12 and all(abs(a - b) <= 1e-11 for a, b in zip(got, want)), (got, want)
EOF

# 3. the names in TensorBoard, read back independently when the reader can run
if "$py" -c 'import google.protobuf, crcmod.predefined' 2>/dev/null && command -v protoc > /dev/null 2>&1; then
  mkdir "$work/pb"
  protoc --python_out="$work/pb" -I "$src/tools/proto" "$src/tools/proto/tf_event.proto"
  "$py" "$src/tools/read_tfevents.py" "$work/pb" "$work/runs/target"/tensorboard/events.out.tfevents.* \
    > "$work/events.json" || fail "read_tfevents"
  "$py" - "$work/events.json" <<'EOF' || fail "TensorBoard tags"
import json, sys
ev = json.loads(open(sys.argv[1]).readline())["events"]
at = {}
for e in ev:
    if "values" in e:
        at.setdefault(e["step"], {}).update(e["values"])
for tag in ["perf/per_device_tflops", "perf/per_device_tokens", "perf/tokens_seen_per_device",
            "learning/current_learning_rate"]:
    assert tag in at[3], (tag, sorted(at[3]))
assert at[14]["perf/tokens_seen_per_device"] == 15 * 256
for tag in ["eval/avg_loss", "eval/avg_perplexity", "eval/total_weights", "perf/checkpoint_write_seconds"]:
    assert tag in at[14], (tag, sorted(at[14]))
EOF
else
  echo "e2e_longrun: python3-protobuf, python3-crcmod or protoc missing: TensorBoard tags not read back"
fi
echo "e2e_longrun: ok"
