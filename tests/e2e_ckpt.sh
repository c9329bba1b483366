#!/usr/bin/env bash
# End-to-end checkpoints with the real binary: a run killed by SIGKILL in the
# middle of writing a checkpoint (the command's GEMTRAIN_TEST_CKPT_FAULT hook,
# tools/cli_seams.c, arms the library's test seam, which stops it half-way
# through the file) resumes from the previous one and ends with the
# losses of an uninterrupted run; SIGTERM checkpoints and exits 0; a damaged
# newest checkpoint is refused and the one before it used; another model is
# refused with the tensor shapes. Usage: e2e_ckpt.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_ckpt.XXXXXX)
trap 'kill %1 2>/dev/null || true; rm -rf "$work"' EXIT
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
fail() { echo "FAIL: $*"; exit 1; }
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" learning_rate=0.01
        eval_interval=-1 sample_tokens=0 "base_output_directory=$work/runs" threads_per_device=1)
losses() { grep -o '"loss": [^,]*' "$work/runs/$1/metrics.jsonl"; }

"$bin" train "${common[@]}" steps=20 checkpoint_period=5 run_name=a > "$work/a.log"
[ "$(cat "$work/runs/a/checkpoints/latest")" = step_00000020 ] || fail "latest is not step_00000020"
ls "$work/runs/a/checkpoints" | grep -qx step_00000005 || fail "no periodic checkpoint at step 5"

# SIGKILL half-way through the second checkpoint
set +e
GEMTRAIN_TEST_CKPT_FAULT=kill:2 "$bin" train "${common[@]}" steps=20 checkpoint_period=5 run_name=b > "$work/b1.log" 2>&1
status=$?
set -e
[ "$status" = 137 ] || fail "the killed run exited with $status, expected 137 (SIGKILL)"
[ "$(cat "$work/runs/b/checkpoints/latest")" = step_00000005 ] || fail "latest moved past step 5 after the kill"
[ -d "$work/runs/b/checkpoints/.tmp-step_00000010" ] || fail "no half-written temporary directory was left to test"
"$bin" train "${common[@]}" steps=20 checkpoint_period=5 run_name=b > "$work/b2.log"
grep -q "^resumed from .*step_00000005 (the run directory): step 5, AdamW step 5" "$work/b2.log" \
  || fail "the rerun did not resume from step 5: $(head -3 "$work/b2.log")"
[ -d "$work/runs/b/checkpoints/.tmp-step_00000010" ] && fail "the stale temporary directory was not cleaned"
diff <(losses a) <(losses b) > /dev/null || fail "losses after the SIGKILL and resume differ from the straight run"
[ "$(losses b | wc -l)" = 20 ] || fail "metrics.jsonl of the resumed run should hold 20 steps"

# SIGTERM: finish the step, checkpoint, exit 0
"$bin" train "${common[@]}" steps=1000000 checkpoint_period=1000000 run_name=c > "$work/c1.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -f "$work/runs/c/metrics.jsonl" ] && [ "$(wc -l < "$work/runs/c/metrics.jsonl")" -ge 3 ] && break
  sleep 0.1
done
kill -TERM "$pid"
set +e
wait "$pid"
status=$?
set -e
[ "$status" = 5 ] || fail "SIGTERM: exit status $status, expected 5 (stopped): $(tail -2 "$work/c1.log")"
grep -q "^stopped by SIGTERM after step [0-9]*; run the same command again to resume" "$work/c1.log" || fail "no stop line"
at=$(sed 's/^step_0*//' "$work/runs/c/checkpoints/latest")
[ "$at" -ge 3 ] || fail "the SIGTERM checkpoint is at step $at"
"$bin" train "${common[@]}" steps=$((at + 2)) checkpoint_period=1000000 run_name=c > "$work/c2.log"
grep -q "^resumed from .*: step $at," "$work/c2.log" || fail "no resume after SIGTERM"
grep -q "^completed step: $((at + 1))," "$work/c2.log" || fail "the resumed run did not reach step $((at + 1))"

# a damaged newest checkpoint: refused with its reason, the previous one used
python3 - "$work/runs/a/checkpoints/step_00000020/shard_00000-of-00001.gtck" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[5000] ^= 0x10; open(p, 'wb').write(bytes(b))
EOF
"$bin" train "${common[@]}" steps=22 checkpoint_period=5 run_name=a > "$work/a2.log"
grep -q "^checkpoint: .*step_00000020/shard_00000-of-00001.gtck' tensor 'params/head' has crc32 [0-9a-f]*, the header records [0-9a-f]*; trying the previous checkpoint$" "$work/a2.log" \
  || fail "no refusal line for the damaged checkpoint: $(head -2 "$work/a2.log")"
grep -q "^resumed from .*step_00000015" "$work/a2.log" || fail "did not fall back to step 15"

# another model: refused with names and shapes, exit 2; the run's
# config.json stays the one its checkpoints were written with
cp "$work/runs/a/config.json" "$work/a_config.json"
set +e
"$bin" train "${common[@]}" steps=30 run_name=a base_mlp_dim=96 > "$work/d.log" 2> "$work/d.err"
status=$?
set -e
[ "$status" = 2 ] || fail "a different model: exit $status, expected 2"
grep -q "was written for a different model: layers.0.mlp.gate_proj.weight is \[128, 64\] there, \[96, 64\] here" "$work/d.err" \
  || fail "the refusal does not name the shapes: $(cat "$work/d.err")"
cmp -s "$work/a_config.json" "$work/runs/a/config.json" || fail "a refused resume rewrote the run's config.json"
# checkpoints and Hugging Face: to_hf from a run directory, from_hf into a
# checkpoint, and back again byte for byte; a new run starts from it
"$bin" convert to_hf "$work/runs/a" "$work/hf_a" > "$work/conv1.log"
"$bin" convert from_hf "$work/hf_a" "$work/back" > "$work/conv2.log"
[ -d "$work/back/checkpoints/step_00000000" ] || fail "from_hf wrote no checkpoint"
"$bin" convert to_hf "$work/back" "$work/hf_b" > "$work/conv3.log"
cmp "$work/hf_a/model.safetensors" "$work/hf_b/model.safetensors" || fail "to_hf(from_hf(to_hf(run))) differs"
"$bin" train "${common[@]}" steps=2 run_name=ft "load_parameters_path=$work/back" > "$work/ft.log"
grep -q "^loaded parameters from .*step_00000000 (load_parameters_path); optimizer and data start fresh" "$work/ft.log" \
  || fail "no parameters-only start: $(head -2 "$work/ft.log")"
echo "e2e_ckpt: ok"
