#!/usr/bin/env bash
# End-to-end: gemtrain plan reports the spec's numbers for gemma3-4b (and
# exits 3: it does not fit 24 GiB), prints JSON, and gemtrain train refuses a run whose plan exceeds
# memory_limit_bytes before allocating or creating anything; its bytes sent
# per step are what 2-device runs measure, with and without a frozen part.
# Usage: e2e_plan.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_plan.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

set +e
"$bin" plan model_name=gemma3-4b per_device_batch_size=1 max_target_length=2048 dataset_type=synthetic \
  memory_limit_bytes=24GiB > "$work/plan.txt"
rc=$?
set -e
[ $rc -eq 3 ] || fail "the 4b plan over 24 GiB exited $rc, expected 3 (does not fit)"
grep -q 'parameters: 3880099328 (3.880 billion)' "$work/plan.txt" || fail "4b parameter count"
grep -q 'Total TFLOPs: 49.05' "$work/plan.txt" || fail "4b TFLOPs"
grep -q 'peak: .* MiB .* during ' "$work/plan.txt" || fail "no peak line"
grep -q 'largest buffers live at the peak' "$work/plan.txt" || fail "no buffer list"
"$bin" plan --json model_name=gemma3-tiny dataset_type=synthetic > "$work/plan.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['parameters']>0 and d['peak_bytes']>0 and len(d['saved_activation_bytes_per_layer'])==6" "$work/plan.json" \
  || fail "plan --json"

set +e
"$bin" train model_name=gemma3-tiny dataset_type=synthetic memory_limit_bytes=1000000 steps=2 \
  "base_output_directory=$work/runs" run_name=x > "$work/out.txt" 2> "$work/err.txt"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a run over memory_limit_bytes was accepted"
grep -q 'over by' "$work/err.txt" || fail "no 'over by' in: $(cat "$work/err.txt")"
grep -q 'memory plan:' "$work/out.txt" || fail "the refused run did not print its plan"
[ ! -e "$work/runs/x" ] || fail "the refused run created its run directory"

# a run that fits prints planned and measured peaks, and they agree
"$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=2 sample_tokens=0 eval_interval=-1 \
  "base_output_directory=$work/runs" run_name=y > "$work/ok.txt"
line=$(grep '^peak memory:' "$work/ok.txt")
planned=$(echo "$line" | sed 's/peak memory: \([0-9.]*\) MiB planned.*/\1/')
measured=$(echo "$line" | sed 's/.*planned, \([0-9.]*\) MiB measured.*/\1/')
[ "$planned" = "$measured" ] || fail "planned $planned vs measured $measured"

# the bytes sent per step that gemtrain plan --json gives are what a 2-device
# run's metrics.jsonl measures: full training, a mask that trains the norms,
# and LoRA adapters over a float32 and an nf4 base, in float32 and bf16 (a
# frozen part is gathered, never reduce-scattered)
i=0
for keys in "" "trainable_parameters_mask=norm" "enable_lora=true" "enable_lora=true lora_weight_qtype=nf4" \
            "enable_lora=true dtype=bfloat16" "enable_lora=true lora_weight_qtype=nf4 dtype=bfloat16"; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # the keys split into arguments
  set -- model_name=gemma3-tiny dataset_type=synthetic num_devices=2 $keys
  "$bin" plan --json "$@" > "$work/bytes$i.json"
  "$bin" train "$@" steps=1 sample_tokens=0 eval_interval=-1 "base_output_directory=$work/runs" run_name=bytes$i \
    > "$work/bytes$i.txt" 2>&1 || { cat "$work/bytes$i.txt"; fail "train with '$keys'"; }
  python3 - "$work/bytes$i.json" "$work/runs/bytes$i/metrics.jsonl" "$keys" <<'PY' || fail "bytes with '$keys'"
import json, sys
p = json.load(open(sys.argv[1]))
m = [json.loads(l) for l in open(sys.argv[2])]
assert len(m) == 1 and m[0]["comm_bytes"] > 0, m
assert m[0]["comm_bytes"] == p["comm_bytes_per_step_per_device"], (sys.argv[3], m[0]["comm_bytes"], p["comm_bytes_per_step_per_device"])
PY
done
echo "e2e_plan: 2 passed, 0 failed"
