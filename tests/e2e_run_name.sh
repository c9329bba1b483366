#!/usr/bin/env bash
# End-to-end: an unnamed run never resumes another. Its run_name (model and
# the second it started) is made unique by creating its directory
# exclusively: when a directory of that name exists (a run started in the
# same second), it takes the next suffix (-2) and trains its own steps,
# leaving the other's config.json alone. Stopped by SIGTERM, an unnamed run
# names the run_name to resume with, and resuming with it works. An empty
# base_output_directory is refused naming the key (it would write at the
# filesystem's root).
# Usage: e2e_run_name.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"
work=$(mktemp -d /tmp/gt_e2e_run_name.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 eval_interval=-1 threads_per_device=1
      max_target_length=16 per_device_batch_size=2 "base_output_directory=$work/runs")

# a first unnamed run, finished (its checkpoint at step 2)
"$bin" train "${args[@]}" steps=2 > "$work/a.log" 2>&1 || { cat "$work/a.log"; fail "the first run"; }
a=$(ls "$work/runs")
[[ "$a" =~ ^gemma3-tiny-[0-9]{8}-[0-9]{6}$ ]] || fail "the unnamed run's directory is '$a'"
cp "$work/runs/$a/config.json" "$work/config.a"
# every name a run started in the next two minutes would take by default
# now exists (a link to the first run), as when two runs start in the same
# second
now=$(date +%s)
for i in $(seq 0 120); do
  n="gemma3-tiny-$(date -d "@$((now + i))" +%Y%m%d-%H%M%S)"
  [ -e "$work/runs/$n" ] || ln -s "$a" "$work/runs/$n"
done
"$bin" train "${args[@]}" steps=2 learning_rate=0.01 > "$work/b.log" 2>&1 || { cat "$work/b.log"; fail "the second run"; }
grep -q "resum\|nothing to do" "$work/b.log" && { cat "$work/b.log"; fail "the second unnamed run resumed the first"; }
[ "$(grep -c '^completed step: ' "$work/b.log")" = 2 ] || { cat "$work/b.log"; fail "the second run did not train 2 steps"; }
grep -q "run directory: $work/runs/gemma3-tiny-[0-9]\{8\}-[0-9]\{6\}-2$" "$work/b.log" \
  || { cat "$work/b.log"; fail "the second run's directory has no suffix"; }
cmp -s "$work/config.a" "$work/runs/$a/config.json" || fail "the second run rewrote the first run's config.json"
find "$work/runs" -maxdepth 1 -type l -delete

# SIGTERM: the stop line names the run_name to resume with
"$bin" train "${args[@]}" steps=1000000 checkpoint_period=1000000 > "$work/c1.log" 2>&1 &
pid=$!
for _ in $(seq 3000); do
  grep -q '^completed step: 2,' "$work/c1.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/c1.log"; fail "the run ended early"; }
  sleep 0.1
done
kill -TERM "$pid"
set +e; wait "$pid"; status=$?; set -e
pid=""
[ "$status" = 5 ] || { cat "$work/c1.log"; fail "SIGTERM: exit status $status, expected 5 (stopped)"; }
name=$(sed -n 's/^stopped by SIGTERM after step [0-9]*; to resume, run the same command with run_name=\(.*\)$/\1/p' "$work/c1.log")
[ -n "$name" ] || { tail -3 "$work/c1.log"; fail "the stop line names no run_name"; }
[ -d "$work/runs/$name/checkpoints" ] && [ "$name" != "$a" ] || fail "run_name=$name is not the stopped run's directory"
at=$(sed 's/^step_0*//' "$work/runs/$name/checkpoints/latest")
"$bin" train "${args[@]}" steps=$((at + 1)) run_name="$name" > "$work/c2.log" 2>&1 || { cat "$work/c2.log"; fail "resume"; }
grep -q "^resumed from .*: step $at," "$work/c2.log" || { cat "$work/c2.log"; fail "run_name=$name did not resume"; }

# an empty base_output_directory: refused naming the key, nothing written
probe="gt_e2e_run_name_probe_$$"
set +e
(cd "$work" && "$bin" train "${args[@]}" steps=1 base_output_directory= run_name="$probe") > "$work/d.log" 2>&1
status=$?
set -e
if [ -e "/$probe" ]; then rm -rf "/${probe:?}"; fail "an empty base_output_directory wrote /$probe"; fi
[ "$status" = 2 ] || { cat "$work/d.log"; fail "an empty base_output_directory: exit status $status, expected 2"; }
grep -q "^gemtrain: .*'base_output_directory' is empty" "$work/d.log" || { cat "$work/d.log"; fail "the refusal names no key"; }
echo "e2e_run_name: ok (same-second runs $a and $a-2; resumed $name at step $at)"
