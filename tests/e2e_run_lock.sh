#!/usr/bin/env bash
# End-to-end: one run per run directory. A second
# `gemtrain train` on a directory a running one holds exits at once, naming
# the first one's pid, and leaves its files alone; after the first is killed
# with SIGKILL, the lock is gone and a third run resumes from its checkpoint.
# Usage: e2e_run_lock.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"
work=$(mktemp -d /tmp/gt_e2e_lock.XXXXXX)
first=""
trap '[ -n "$first" ] && kill -9 "$first" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 base_output_directory="$work" run_name=r
      checkpoint_period=1 max_target_length=16 per_device_batch_size=2)
"$bin" train "${args[@]}" steps=100000 > "$work/first.log" 2>&1 &
first=$!
# wait until the first run has checkpointed a step (so it holds the lock and
# has state worth keeping)
for _ in $(seq 600); do
  [ -e "$work/r/checkpoints/latest" ] && break
  kill -0 "$first" 2>/dev/null || { cat "$work/first.log"; fail "the first run ended early"; }
  sleep 0.1
done
[ -e "$work/r/checkpoints/latest" ] || fail "the first run wrote no checkpoint"
cp "$work/r/config.json" "$work/config.before"
set +e
"$bin" train "${args[@]}" steps=3 learning_rate=0.5 > "$work/second.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a second run on a held directory exited 0"
grep -q "in use by another gemtrain (pid $first)" "$work/second.log" || { cat "$work/second.log"; fail "the refusal names no pid"; }
cmp -s "$work/config.before" "$work/r/config.json" || fail "the refused run rewrote the first run's config.json"
{ kill -9 "$first"; wait "$first"; } 2>/dev/null || true
first=""
[ -e "$work/r/.lock" ] || fail "no lock file"
# the killed run's lock file is left behind, its lock is not
step=$(sed 's/step_0*//' "$work/r/checkpoints/latest")
"$bin" train "${args[@]}" steps=$((step + 2)) > "$work/third.log" 2>&1 || { cat "$work/third.log"; fail "the third run"; }
grep -q "resumed from" "$work/third.log" || { cat "$work/third.log"; fail "the third run did not resume"; }
echo "e2e_run_lock: ok (refused while pid held it; resumed at step $step after SIGKILL)"
