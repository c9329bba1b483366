#!/usr/bin/env bash
# A record that can never put a token in the loss is refused when the data
# opens, naming its file and line: with use_sft=true and
# overlong_records=truncate, a record whose prompt fills the kept T + 1
# tokens (byte tokens here: <bos>, the prompt's bytes, then the completion)
# would make rows with every target masked, and a batch of them a step with
# total_weights 0. The boundary is exact: with max_target_length=32 a
# 31-byte prompt keeps one completion token in the loss (accepted, and a
# run trains on it), a 32-byte prompt keeps none (refused, by `data` and
# `train` alike, for the eval file too).
# Usage: e2e_empty_loss.sh <gemtrain> <src>
set -euo pipefail
bin="$1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_WAIT_POLICY=PASSIVE
work=$(mktemp -d /tmp/gt_e2e_empty_loss.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# data <file> <prompt bytes of the last record>
data() {
  python3 - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"prompt": "short question %d?" % i, "completion": " answer %d." % i}) + "\n")
    f.write(json.dumps({"prompt": "x" * int(sys.argv[2]), "completion": "yz"}) + "\n")
PY
}
data "$work/ok.jsonl" 31
data "$work/bad.jsonl" 32
common=(model_name=gemma3-tiny dataset_type=jsonl use_sft=true train_data_columns=prompt,completion
        overlong_records=truncate max_target_length=32 per_device_batch_size=4 sample_tokens=0
        enable_checkpointing=false "base_output_directory=$work/runs")

# accepted: one token of the last record is in the loss
"$bin" train "${common[@]}" "dataset_path=$work/ok.jsonl" eval_interval=-1 steps=3 run_name=ok > "$work/ok.log" 2>&1 \
  || { tail -5 "$work/ok.log"; fail "a record keeping one loss token was refused"; }
grep -q "skipped" "$work/ok.log" && { cat "$work/ok.log"; fail "a step was skipped"; }

# refused at open, naming the file and the line
msg="data: '$work/bad.jsonl' line 41: the record keeps no token in the loss"
for cmd in data train; do
  if "$bin" $cmd "${common[@]}" "dataset_path=$work/bad.jsonl" eval_interval=-1 steps=3 run_name=bad_$cmd \
       > "$work/bad_$cmd.log" 2>&1; then
    tail -5 "$work/bad_$cmd.log"; fail "$cmd: a record with no loss token was accepted"
  fi
  grep -qF "$msg" "$work/bad_$cmd.log" || { tail -3 "$work/bad_$cmd.log"; fail "$cmd: the refusal does not name the line"; }
done
# the eval file alike
if "$bin" train "${common[@]}" "dataset_path=$work/ok.jsonl" "eval_dataset_path=$work/bad.jsonl" eval_interval=1 \
     eval_steps=1 steps=2 run_name=bad_eval > "$work/bad_eval.log" 2>&1; then
  tail -5 "$work/bad_eval.log"; fail "an eval record with no loss token was accepted"
fi
grep -qF "$msg" "$work/bad_eval.log" || { tail -3 "$work/bad_eval.log"; fail "eval: the refusal does not name the line"; }
echo "e2e_empty_loss: OK"
