#!/usr/bin/env bash
# End-to-end: what a script and a person read of a run and a sweep.
# - A log (no terminal): the step line says "N of total steps", elapsed and
#   ETA; log_period thins the console, never metrics.jsonl.
# - A finished run exits 0 and ends with its run_name= and the command that
#   continues it; a run stopped by a signal exits 5 and ends with the command
#   that resumes it, which (for an unnamed run too) resumes it.
# - A resume that stretches the schedule says the learning rate jumps.
# - A start refused after its run directory was made leaves none behind.
# - MaxText keys with no effect are accepted with a note, unsupported ones
#   refused as such; a MaxText YAML file trains as its JSON twin does;
#   `--steps 10` is answered with steps=10; a Hugging Face name with
#   gemtrain's.
# - A sweep with a point that fails exits 1 and says so; SIGINT to a sweep
#   checkpoints the running point, exits 5 with the command that continues,
#   and that command resumes the point from its checkpoint.
# - With the bf16 products emulated, dtype=bfloat16 says it is the slower path.
# Usage: e2e_habits.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"
tiny=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 eval_interval=-1 threads_per_device=1
      base_output_directory=runs)

# 1. a log's step line, log_period
"$bin" train "${tiny[@]}" steps=7 log_period=3 run_name=lp > lp.log 2>&1 || { cat lp.log; fail "log_period run"; }
# shown: the first step, every third (steps 2 and 5) and the last
[ "$(grep -c '^completed step: ' lp.log)" = 4 ] || { cat lp.log; fail "log_period=3 of 7 steps: expected 4 step lines"; }
for s in 0 2 5 6; do
  grep -q "^completed step: $s, .*, perplexity: [0-9.]* ($((s + 1)) of 7 steps, elapsed [0-9]*m[0-9][0-9]s, ETA [0-9]*m[0-9][0-9]s)$" lp.log \
    || { cat lp.log; fail "no log-mode step line for step $s"; }
done
[ "$(wc -l < runs/lp/metrics.jsonl)" = 7 ] || fail "log_period thinned metrics.jsonl"

# 2. a finished run: exit 0, its name and the command that continues it
grep -q '^run_name=lp: finished, 7 steps (exit status 0); to continue it to step 14 (the schedule stretches to 14 steps: the learning rate jumps): .* run_name=lp steps=14$' lp.log \
  || { tail -2 lp.log; fail "no closing run_name line"; }
cmd=$(sed -n 's/^run_name=lp: finished.*: \(.* train .*\)$/\1/p' lp.log)
eval "$cmd" > lp2.log 2>&1 || { cat lp2.log; fail "the continue command failed"; }
grep -q '^resumed from runs/lp/checkpoints/step_00000007 ' lp2.log || { cat lp2.log; fail "the continue command did not resume"; }
grep -q '^resume: the learning-rate schedule changed: AdamW step 7 uses [0-9.e-]* where the checkpoint.s schedule gave 0; the rate jumps' lp2.log \
  || { cat lp2.log; fail "no line for the stretched schedule"; }
[ "$(wc -l < runs/lp/metrics.jsonl)" = 14 ] || fail "the continued run's metrics"

# 3. a stopped unnamed run: exit 5, and its resume command resumes it
rc=0; GEMTRAIN_TEST_SIGNAL_STEP=2 "$bin" train "${tiny[@]}" steps=6 > stop.log 2>&1 || rc=$?
[ "$rc" = 5 ] || { cat stop.log; fail "a stopped run exited $rc, expected 5"; }
line=$(grep '^run_name=.*: stopped after step 2 (exit status 5); to resume: ' stop.log) || { tail -3 stop.log; fail "no resume line"; }
name=$(printf '%s' "$line" | sed 's/^run_name=\([^:]*\):.*/\1/')
cmd=${line#*to resume: }
eval "$cmd" > resume.log 2>&1 || { cat resume.log; fail "the resume command failed"; }
grep -q "^resumed from runs/$name/checkpoints/step_00000003 " resume.log || { cat resume.log; fail "the resume command started another run"; }
[ "$(ls runs | grep -c "^gemma3-tiny-")" = 1 ] || { ls runs; fail "the resume made a new run directory"; }

# 4. a refused start leaves no run directory, named or not
rc=0; "$bin" train "${tiny[@]}" dataset_type=text dataset_path="$work/missing.txt" run_name=refused > ref.log 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "missing.txt" ref.log || { cat ref.log; fail "a missing dataset was not refused"; }
[ ! -e runs/refused ] || fail "a refused start left runs/refused"
before=$(ls runs | wc -l)
"$bin" train "${tiny[@]}" dataset_type=text dataset_path="$work/missing.txt" > ref2.log 2>&1 && fail "refused run exited 0"
[ "$(ls runs | wc -l)" = "$before" ] || { ls runs; fail "a refused unnamed start left its directory"; }
grep -q '^run_name=' ref2.log && fail "a refused start printed a run_name"

# 5. MaxText and Hugging Face habits
"$bin" plan "${tiny[@]}" scan_layers=true ici_tensor_parallelism=1 > plan.out 2> plan.err || { cat plan.err; fail "no-op keys"; }
grep -q "^config: MaxText key 'scan_layers' has no effect here" plan.err || { cat plan.err; fail "no note for scan_layers"; }
rc=0; "$bin" plan "${tiny[@]}" ici_tensor_parallelism=2 2> tp.err || rc=$?
[ "$rc" = 2 ] && grep -q "asks for tensor parallelism, which gemtrain does not support" tp.err && ! grep -q "did you mean" tp.err \
  || { cat tp.err; fail "ici_tensor_parallelism=2 not refused as unsupported"; }
rc=0; "$bin" train --steps 10 2> opt.err || rc=$?
[ "$rc" = 2 ] && grep -q "steps=10" opt.err || { cat opt.err; fail "--steps 10 does not hint at steps=10"; }
rc=0; "$bin" train gradient_checkpointing=true 2> hf.err || rc=$?
[ "$rc" = 2 ] && grep -q "remat_policy" hf.err || { cat hf.err; fail "gradient_checkpointing does not point at remat_policy"; }
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n' > chat.jsonl
rc=0; "$bin" train "${tiny[@]}" dataset_type=jsonl dataset_path=chat.jsonl use_sft=true run_name=chat 2> chat.err || rc=$?
[ "$rc" != 0 ] && grep -q "a chat file: set train_data_columns=messages and use_sft=true" chat.err \
  || { cat chat.err; fail "a chat file read as text does not say to set train_data_columns=messages"; }
cat > m.yml <<'EOF'
# MaxText-style
base_config: "base.yml"
model_name: gemma3-tiny
dataset_type: 'synthetic'
learning_rate: 3.e-3
scan_layers: True
enable_checkpointing: False
EOF
printf '{"model_name": "gemma3-tiny", "dataset_type": "synthetic", "learning_rate": 0.003, "enable_checkpointing": false}\n' > m.json
"$bin" train m.yml steps=3 sample_tokens=0 threads_per_device=1 base_output_directory=runs run_name=yml > yml.log 2>&1 \
  || { cat yml.log; fail "the YAML run"; }
"$bin" train m.json steps=3 sample_tokens=0 threads_per_device=1 base_output_directory=runs run_name=json > json.log 2>&1
python3 - runs/yml/metrics.jsonl runs/json/metrics.jsonl <<'EOF' || fail "the YAML run differs from its JSON twin"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert a == b and len(a) == 3, (a, b)
EOF

# 6. a sweep with a failing point exits 1; SIGINT checkpoints and continues
cat > bad.json <<'EOF'
{"base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "threads_per_device": 1}},
 "points": [{}, {"dataset_type": "text", "dataset_path": "/nonexistent/corpus.txt"}], "steps": 2, "output_directory": "bad_out"}
EOF
rc=0; "$bin" sweep bad.json > bad.log 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q '^sweep: 1 of 2 points did not end ok' bad.log || { cat bad.log; fail "a sweep with a failed point exited $rc"; }
cat > long.json <<'EOF'
{"base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic", "threads_per_device": 1,
                        "checkpoint_period": 1000000, "eval_interval": -1}},
 "grid": {"learning_rate": [0.001, 0.002]}, "steps": 100000, "output_directory": "long_out", "point_timeout_s": 3600}
EOF
"$bin" sweep long.json > long1.log 2>&1 &
pid=$!
for _ in $(seq 3000); do
  [ -s long_out/runs/point-1/metrics.jsonl ] && [ "$(wc -l < long_out/runs/point-1/metrics.jsonl)" -ge 3 ] && break
  kill -0 "$pid" 2>/dev/null || { cat long1.log; fail "the sweep ended early"; }
  sleep 0.1
done
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 5 ] || { cat long1.log; fail "SIGINT to a sweep: exit $rc, expected 5"; }
grep -q '^point 1/2: learning_rate=0.001 -> stopped and checkpointed after [0-9]* steps' long1.log || { cat long1.log; fail "no stopped line"; }
line=$(grep '^sweep stopped by SIGINT: 0 of 2 points finished (0 ok), 2 pending; to continue: ' long1.log) || { cat long1.log; fail "no continue line"; }
at=$(sed 's/^step_0*//' long_out/runs/point-1/checkpoints/latest)
[ "$at" -ge 3 ] || fail "point 1's checkpoint is at step $at"
grep -q '^| 2 | 0.002 | pending |' long_out/results.md || { cat long_out/results.md; fail "the pending row lost its swept value"; }
[ ! -s long_out/results.jsonl ] || fail "a stopped point was recorded"
# the continue command resumes point 1 (stopped again at once: 100000 steps)
cmd=${line#*to continue: }
bash -c "exec $cmd" > long2.log 2>&1 &
pid=$!
for _ in $(seq 3000); do
  grep -q '^resumed from' long_out/runs/point-1.log 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat long2.log; fail "the continued sweep ended early"; }
  sleep 0.1
done
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 5 ] || { cat long2.log; fail "SIGINT to the continued sweep: exit $rc"; }
grep -q "^resumed from .*point-1/checkpoints/step_0*$at (the run directory): step $at," long_out/runs/point-1.log \
  || { cat long_out/runs/point-1.log; fail "the continued sweep did not resume point 1 at step $at"; }

# 7. bf16 on an emulated path says it is the slower one, on the widened path
#    as fast as float32 with AVX-512 and slower on the AVX2 copy; float32
#    says nothing
GEMTRAIN_NO_AVX512BF16=1 GT_TEST_BF16_PATH=pairs "$bin" bench model_name=gemma3-tiny dataset_type=synthetic dtype=bfloat16 --steps 1 > bf.log
if grep -qw avx512bw /proc/cpuinfo; then
  grep -q "^note: dtype=bfloat16 is likely slower than float32 on this CPU: its bf16 products are vdpbf16ps's arithmetic emulated" bf.log \
    || { cat bf.log; fail "no bf16 note on the emulated path"; }
elif grep -qw avx2 /proc/cpuinfo; then
  # (no pairs path without AVX-512: the switch gives way to the AVX2 widened path)
  grep -q "^note: dtype=bfloat16 is likely slower than float32 on this CPU: this CPU has no AVX-512: bf16 products are float32 FMAs on operands widened" bf.log \
    || { cat bf.log; fail "no bf16 note on the AVX2 widened path"; }
fi
# the widened path (what an AVX-512 CPU without a fast bf16 unit takes) says
# it runs at float32's speed, not that it is slower
GT_TEST_BF16_PATH=widened "$bin" bench model_name=gemma3-tiny dataset_type=synthetic dtype=bfloat16 --steps 1 > bw.log
# (without AVX-512 the widened path is the AVX2 copy's, checked above)
if grep -qw avx512bw /proc/cpuinfo && grep -q '^bf16 products: float32 FMA on operands widened' bw.log; then
  grep -q "^note: dtype=bfloat16 runs at about float32's speed on this CPU: its bf16 products are float32 FMAs on widened" bw.log \
    || { cat bw.log; fail "no same-speed note on the widened path"; }
  grep -q 'likely slower' bw.log && { cat bw.log; fail "the widened path is called slower"; }
fi
"$bin" bench model_name=gemma3-tiny dataset_type=synthetic --steps 1 > f32.log
grep -q '^note: dtype=bfloat16' f32.log && fail "a float32 bench has a bf16 note"
echo "e2e_habits: ok"
