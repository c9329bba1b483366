#!/usr/bin/env bash
# A token shard that changes under a running job (truncated, rewritten in
# place, deleted) stops the run as a signal would: the state after the last
# good step is checkpointed first (checkpoint_period is far away here, so
# that checkpoint is the failure path's own), the message says the file
# changed after it was checked when the data was opened, and the exit is
# non-zero; with the shard restored, the same command resumes from that
# step. The change is made once the run has reported 3 steps: whichever
# step it then stops at, the checkpoint must be at the steps reported in
# metrics.jsonl (no timing decides the outcome). A shard added between two
# runs is no error, but the resume says the training rows changed.
# Usage: e2e_data_changed.sh <gemtrain> <src>
set -euo pipefail
bin="$1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OMP_WAIT_POLICY=PASSIVE
work=$(mktemp -d /tmp/gt_e2e_data_changed.XXXXXX)
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$work"' EXIT
pid=
fail() { echo "FAIL: $*"; exit 1; }
python3 - "$work/all.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"text": "Document %d says %s." % (i, "word " * (i % 17))}) + "\n")
PY
"$bin" tokenize "output_path=$work/shards" shard_tokens=4000 compress=false "$work/all.jsonl" 2> "$work/tok.log" \
  || { cat "$work/tok.log"; fail "tokenize"; }
shards=("$work"/shards/*.gtok)
[ "${#shards[@]}" -ge 2 ] || fail "expected several shards, got ${#shards[@]}"
cp -r "$work/shards" "$work/pristine"
args=(model_name=gemma3-tiny dataset_type=tokens "dataset_path=$work/shards" max_target_length=32 per_device_batch_size=2
      eval_interval=-1 sample_tokens=0 checkpoint_period=1000000 enable_data_shuffling=true "base_output_directory=$work/runs")

wait_steps() { # <run> <n>: until metrics.jsonl has n lines (or the run ended)
  for _ in $(seq 1 1500); do
    [ -f "$work/runs/$1/metrics.jsonl" ] && [ "$(wc -l < "$work/runs/$1/metrics.jsonl")" -ge "$2" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "$1 ended before $2 steps: $(tail -3 "$work/$1.log")"
    sleep 0.2
  done
  fail "$1 did not reach $2 steps"
}

# change <run> <how>: start a long run, change every shard once it has 3 steps
change() {
  local run=$1 how=$2
  rm -rf "$work/shards" && cp -r "$work/pristine" "$work/shards"
  "$bin" train "${args[@]}" steps=1000000 "run_name=$run" > "$work/$run.log" 2>&1 &
  pid=$!
  wait_steps "$run" 3
  for s in "$work"/shards/*.gtok; do
    case $how in
      truncate) truncate -s 100 "$s" ;;
      rewrite) python3 - "$s" <<'PY'
import sys
# the same size, other ids: what a job rewriting its output in place does
with open(sys.argv[1], "r+b") as f:
    f.seek(36)
    n = len(f.read())
    f.seek(36)
    f.write(bytes([0x7f, 0xff, 0xff, 0x7f]) * (n // 4))
PY
      ;;
      delete) rm -f "$s" ;;
    esac
  done
  rc=0; wait "$pid" || rc=$?
  pid=
  [ "$rc" != 0 ] || { tail -5 "$work/$run.log"; fail "$how: the run exited 0"; }
  grep -q "^gemtrain: tokens: '$work/shards/.*\.gtok' changed after it was checked when the data was opened" \
    "$work/$run.log" || { tail -5 "$work/$run.log"; fail "$how: the message does not say the file changed"; }
  local done_steps latest
  done_steps=$(wc -l < "$work/runs/$run/metrics.jsonl")
  latest=$(cat "$work/runs/$run/checkpoints/latest" 2>/dev/null || echo none)
  [ "$latest" = "$(printf 'step_%08d' "$done_steps")" ] \
    || { tail -5 "$work/$run.log"; fail "$how: checkpoint '$latest' after $done_steps reported steps"; }
  grep -q "saved the state after step $((done_steps - 1)) before stopping" "$work/$run.log" \
    || { tail -5 "$work/$run.log"; fail "$how: no note of the saved state"; }
  echo "$done_steps" > "$work/$run.steps"
}
change trunc truncate
change rewr rewrite
change del delete
n=$(cat "$work/trunc.steps")

# restored, the same command resumes from the saved step
rm -rf "$work/shards" && cp -r "$work/pristine" "$work/shards"
"$bin" train "${args[@]}" steps=$((n + 2)) run_name=trunc > "$work/resume.log" 2>&1 \
  || { tail -5 "$work/resume.log"; fail "the resume failed"; }
grep -q "^resumed from .*step_$(printf '%08d' "$n")" "$work/resume.log" \
  || { head -5 "$work/resume.log"; fail "did not resume from step $n"; }
grep -q "^resume: the training data has" "$work/resume.log" && fail "the same data was said to have changed"

# another shard added between two runs: the resume says the rows changed
# (the epoch's order is another), naming both counts
cp "$work/pristine/$(ls "$work/pristine" | head -1)" "$work/shards/zz-added.gtok"
"$bin" train "${args[@]}" steps=$((n + 3)) run_name=trunc > "$work/added.log" 2>&1 \
  || { tail -5 "$work/added.log"; fail "the resume over an added shard failed"; }
grep -qE "^resume: the training data has [0-9]+ rows where the checkpoint's run had [0-9]+ \(files added or changed" \
  "$work/added.log" || { head -8 "$work/added.log"; fail "no note that the training data changed"; }
echo "e2e_data_changed: OK"
