#!/usr/bin/env bash
# End-to-end: the real binary trains gemma3-tiny on the King James text and
# must learn (loss well under ln V), repeat itself bit for bit with the same
# seeds, report eval loss, write its run directory, and refuse bad input with
# one clear line; the closing line's command to continue a run past the end
# of a fixed learning-rate schedule raises the schedule too, and a resume
# whose every step is past that end says they all run at rate 0.
# Usage: e2e_train.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_train.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 400000 "$work/kjv.txt" > "$work/corpus.txt"

common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" steps=40
        learning_rate=0.01 eval_interval=20 eval_steps=2 sample_tokens=16 "base_output_directory=$work/runs")
"$bin" train "${common[@]}" run_name=a > "$work/a.log"
"$bin" train "${common[@]}" run_name=b > "$work/b.log"

fail() { echo "FAIL: $*"; exit 1; }
grep -q '^completed step: 0, seconds: [0-9.]*, TFLOP/s/device: [0-9.]*, Tokens/s/device: [0-9.]*, total_weights: 256, loss: [0-9.]*, lm_loss: [0-9.]*, perplexity: [0-9.]* (1 of [0-9]* steps, elapsed 0m[0-9][0-9]s, ETA [0-9hms]*)$' "$work/a.log" \
  || fail "step line is not MaxText's format"; 
grep -q 'Per train step:' "$work/a.log" || fail "no TFLOPs summary"
grep -q '^ split as [0-9.]*% learnable weight flops and [0-9.]*% attention flops$' "$work/a.log" || fail "no flops split"
grep -q '^eval metrics after step: 19, loss=' "$work/a.log" || fail "no eval line at step 19"
grep -q '^eval metrics after step: 39, loss=' "$work/a.log" || fail "no eval line at step 39"
grep -q '^sample' "$work/a.log" || fail "no sample"
for f in config.json metrics.jsonl loss.svg; do [ -s "$work/runs/a/$f" ] || fail "missing $f"; done
[ "$(wc -l < "$work/runs/a/metrics.jsonl")" = 40 ] || fail "metrics.jsonl should have 40 lines"
grep -q '"run_name":[[:space:]]*"a"' "$work/runs/a/config.json" || fail "config.json lacks the resolved run_name"
for k in step loss lm_loss perplexity seconds tokens_per_s_per_device tflops_per_s_per_device total_weights learning_rate grad_norm peak_memory_bytes; do
  head -1 "$work/runs/a/metrics.jsonl" | grep -q "\"$k\":" || fail "metrics.jsonl lacks $k"
done
grep -q '<svg' "$work/runs/a/loss.svg" && grep -q 'polyline' "$work/runs/a/loss.svg" || fail "loss.svg has no chart"

# learning: ln(260) = 5.56; the last loss must be under 60% of it
first=$(head -1 "$work/runs/a/metrics.jsonl" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
last=$(tail -1 "$work/runs/a/metrics.jsonl" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
eval_last=$(tail -1 "$work/runs/a/metrics.jsonl" | sed 's/.*"eval_loss": \([0-9.e+-]*\).*/\1/')
awk -v f="$first" -v l="$last" -v e="$eval_last" 'BEGIN {
  lnv = log(260);
  if (f < 0.8 * lnv) { print "first loss " f " is not near ln V " lnv; exit 1 }
  if (l > 0.6 * lnv) { print "last loss " l " is not under 60% of ln V " lnv; exit 1 }
  if (e > 0.6 * lnv) { print "eval loss " e " is not under 60% of ln V"; exit 1 }
}' || fail "did not learn"

# same seeds, same losses, bit for bit
cut -d, -f2 "$work/runs/a/metrics.jsonl" > "$work/la"
cut -d, -f2 "$work/runs/b/metrics.jsonl" > "$work/lb"
cmp -s "$work/la" "$work/lb" || fail "two runs with the same seed differ"
# a different data seed gives a different run
"$bin" train "${common[@]}" run_name=c steps=3 eval_interval=-1 sample_tokens=0 data_shuffle_seed=7 > /dev/null
[ "$(sed -n 2p "$work/runs/c/metrics.jsonl" | cut -d, -f2)" != "$(sed -n 2p "$work/la")" ] || fail "data_shuffle_seed has no effect"

# refusals: one line, naming the problem, non-zero exit
refuse() { # expected-substring args...
  local want="$1"; shift
  set +e; "$bin" train "$@" > "$work/out.log" 2> "$work/err.log"; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "'$*' was accepted"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$*' printed more than one error line"; }
  grep -q -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$*' error lacks '$want'"; }
}
refuse "'steps' = 0" model_name=gemma3-tiny steps=0
refuse "dataset_path '$work/none.txt'" model_name=gemma3-tiny dataset_type=text "dataset_path=$work/none.txt" "base_output_directory=$work/runs"
touch "$work/afile"
refuse "$work/afile" model_name=gemma3-tiny "dataset_path=$work/corpus.txt" "base_output_directory=$work/afile/x"
refuse "did you mean 'learning_rate'" learnin_rate=1
refuse "neither a config file (.json, or MaxText's .yml) nor key=value" bogus

# dump_config prints the resolved JSON and trains nothing
"$bin" train model_name=gemma3-4b dump_config=true > "$work/dump.json"
grep -q '"base_emb_dim":[[:space:]]*2560' "$work/dump.json" || fail "dump_config does not show the preset"
# skipped steps end with a warning that counts them
GEMTRAIN_TEST_NAN_STEP=1 "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=3 skip_nonfinite_steps=true \
  sample_tokens=0 enable_checkpointing=false enable_tensorboard=false "base_output_directory=$work" run_name=skips \
  > "$work/skips.txt" 2>&1 || { cat "$work/skips.txt"; fail "run with a skipped step"; }
grep -q '^warning: 1 of the 3 steps run were skipped' "$work/skips.txt" || { cat "$work/skips.txt"; fail "no warning about skipped steps"; }

# a fixed schedule: continuing inside it keeps it; past its end (every step
# there at rate 0) the hint says so and its command raises it with steps
sched=(model_name=gemma3-tiny dataset_type=synthetic sample_tokens=0 eval_interval=-1 enable_tensorboard=false
       "base_output_directory=$work/runs" learning_rate_schedule_steps=8)
"$bin" train "${sched[@]}" steps=4 run_name=in > "$work/in.log" || { cat "$work/in.log"; fail "run inside the schedule"; }
tail -1 "$work/in.log" | grep -q '^run_name=in: finished, 4 steps (exit status 0); to continue it to step 8: [^ ]*gemtrain train .* learning_rate_schedule_steps=8 run_name=in steps=8$' ||
  { tail -1 "$work/in.log"; fail "continuing inside the schedule: not the plain hint"; }
"$bin" train "${sched[@]}" steps=8 run_name=ls > "$work/ls.log" || { cat "$work/ls.log"; fail "run to the schedule's end"; }
last=$(tail -1 "$work/ls.log")
echo "$last" | grep -q '^run_name=ls: finished, 8 steps (exit status 0); to continue it to step 16: the learning-rate schedule ends at step 8 (learning_rate_schedule_steps=8), past which every step runs at learning rate 0 and trains nothing, so raise it too (the schedule stretches to 16 steps: the learning rate jumps): [^ ]*gemtrain train .* run_name=ls steps=16 learning_rate_schedule_steps=16$' ||
  { echo "$last"; fail "continuing past the schedule's end: no warning or no raised schedule"; }
cmd=${last##*: }
case "$cmd" in *learning_rate_schedule_steps=8*) fail "the command keeps learning_rate_schedule_steps=8: $cmd" ;; esac
# resumed past the end (AdamW step 8 of 8): every step at rate 0, said once
"$bin" train "${sched[@]}" steps=10 run_name=ls > "$work/ls2.log" || { cat "$work/ls2.log"; fail "resume past the schedule's end"; }
grep -q '^resume: the learning-rate schedule ends at step 8 (learning_rate_schedule_steps=8) and the checkpoint is at AdamW step 8: steps 8 to 9 all run at learning rate 0 and train nothing; raise learning_rate_schedule_steps to train further$' "$work/ls2.log" ||
  { cat "$work/ls2.log"; fail "no note that every resumed step runs at rate 0"; }
python3 - "$work/runs/ls/metrics.jsonl" <<'PY' || fail "the resumed steps past the schedule's end"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [j["step"] for j in m[-2:]] == [8, 9] and all(j["learning_rate"] == 0 for j in m[-2:]), m[-2:]
PY
# a resume with steps left inside the schedule has no such note
"$bin" train "${sched[@]}" steps=10 run_name=in > "$work/in2.log" || { cat "$work/in2.log"; fail "resume inside the schedule"; }
grep -q '^resumed from ' "$work/in2.log" || { cat "$work/in2.log"; fail "in: no resume"; }
if grep -q 'all run at learning rate 0' "$work/in2.log"; then fail "a resume inside its schedule has the rate-0 note"; fi

"$bin" --version > "$work/version.txt"
grep -q '^gemtrain ' "$work/version.txt" || fail "--version"
"$bin" train --help > "$work/help.txt"
grep -q 'per_device_batch_size' "$work/help.txt" || fail "train --help lists no keys"
echo "e2e_train: 1 passed, 0 failed"
