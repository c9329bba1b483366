#!/usr/bin/env bash
# End-to-end preference tuning (docs/preference.md) of a tiny Gemma on a
# generated preference set whose chosen answers follow a rule: the prompt is
# four words and "->", the chosen answer repeats the last word, the rejected
# one is another word of the list.
#  1. SFT of the tiny model on prompt/completion records (the chosen answers)
#     for a few steps, saved;
#  2. DPO with adapters (LoRA) from that checkpoint: step 0's loss is log 2
#     exactly and its rewards 0 (the reference is the base with the adapters
#     off, the policy the same with fresh adapters); rewards/accuracies rises
#     well above one half and the margins grow (metrics.jsonl); the held-out
#     pairs' preference loss falls and their accuracy is above one half;
#  3. ORPO over all parameters from the same checkpoint: the chosen answers'
#     NLL falls and the accuracies rise; its log odds ratio grows;
#  4. DPO over all parameters (the reference: load_parameters_path, read
#     again at the resume): a resume is bit-exact (metrics); the checkpoints
#     record the reference, and a resume that would read another one (the
#     source left out of the command) is refused naming both;
#  5. 2 MPI ranks x 1 device = 1 rank x 2 devices bit for bit; and 2 DiLoCo
#     replicas report the pairs of both: with learning_rate=0 the replicas
#     hold the same parameters, so their training and eval metrics (the
#     reference another checkpoint, so the rewards are not 0) equal 2-rank
#     data parallelism's (skipped without mpirun or MPI in the build).
# Usage: e2e_pref.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_pref.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"

python3 - <<'PY'
import json, random
r = random.Random(3)
words = "apple stone river cloud tiger lemon grass honey piano mouse".split()
with open("pref.jsonl", "w") as f, open("sft.jsonl", "w") as g:
    for _ in range(512):
        p = [r.choice(words) for _ in range(4)]
        other = r.choice([w for w in words if w != p[-1]])
        prompt = " ".join(p) + " ->"
        f.write(json.dumps({"prompt": prompt, "chosen": " " + p[-1] + ".", "rejected": " " + other + "."}) + "\n")
        g.write(json.dumps({"prompt": prompt, "completion": " " + p[-1] + "."}) + "\n")
PY

out=(sample_tokens=0 "base_output_directory=$work/runs")
"$bin" train model_name=gemma3-tiny dataset_type=jsonl dataset_path=sft.jsonl use_sft=true \
  train_data_columns=prompt,completion max_target_length=48 per_device_batch_size=8 steps=15 learning_rate=0.01 \
  save_checkpoint_on_completion=true run_name=sft "${out[@]}" > sft.log 2>&1 || { cat sft.log; fail "SFT"; }
sft="$work/runs/sft/checkpoints"

data=(dataset_type=jsonl dataset_path=pref.jsonl use_dpo=true learning_rate=0.01 "${out[@]}")
pref=("${data[@]}" "load_parameters_path=$sft" max_target_length=80 packing=true per_device_batch_size=8)
small=("${data[@]}" "load_parameters_path=$sft" max_target_length=48 packing=false per_device_batch_size=4)
"$bin" train "${pref[@]}" enable_lora=true lora_rank=8 dpo_beta=0.1 steps=30 eval_interval=10 eval_steps=2 \
  run_name=dpo > dpo.log 2>&1 || { cat dpo.log; fail "DPO with adapters"; }
grep -q "^completed step: 0, .*loss: 0.693, .*rewards/chosen: 0.000, rewards/rejected: 0.000, rewards/accuracies: 0.000" dpo.log ||
  { grep "^completed" dpo.log | head -3; fail "DPO step 0 is not log 2 with zero rewards"; }
"$bin" train "${pref[@]}" preference_algo=orpo orpo_lambda=0.5 steps=30 run_name=orpo > orpo.log 2>&1 ||
  { cat orpo.log; fail "ORPO"; }
grep -q "nll_loss: .*log_odds_ratio: " orpo.log || fail "no ORPO metrics in the step line"

python3 - "$work/runs" <<'PY' || fail "the preference metrics"
import json, math, sys
runs = sys.argv[1]
def lines(r): return [json.loads(l) for l in open(f"{runs}/{r}/metrics.jsonl")]
def mean(xs): return sum(xs) / len(xs)
d = lines("dpo")
assert len(d) == 30
assert d[0]["loss"] == 0.693147181 and d[0]["rewards/margins"] == 0, d[0]
acc = [x["rewards/accuracies"] for x in d]
mar = [x["rewards/margins"] for x in d]
assert mean(acc[-10:]) >= 0.8, acc
assert mean(mar[-10:]) > 0.5 and mean(mar[-10:]) > mean(mar[:5]) + 0.4, mar
assert all(x["logps/chosen"] < 0 and x["logps/rejected"] < 0 for x in d)
ev = [x for x in d if "eval_rewards/accuracies" in x]
assert len(ev) == 3, len(ev)
assert ev[-1]["eval_loss"] < ev[0]["eval_loss"] and ev[-1]["eval_loss"] < 0.5, [x["eval_loss"] for x in ev]
assert ev[-1]["eval_rewards/accuracies"] > 0.5, ev[-1]
o = lines("orpo")
nll = [x["nll_loss"] for x in o]
oacc = [x["rewards/accuracies"] for x in o]
lor = [x["log_odds_ratio"] for x in o]
assert mean(nll[-5:]) < 0.5 * mean(nll[:3]), nll
assert mean(oacc[-10:]) >= 0.8, oacc
assert mean(lor[-5:]) > mean(lor[:3]), lor
print("DPO (LoRA): rewards/accuracies %.3f -> %.3f (mean of the last 10 steps), margins %.3f -> %.3f; eval loss %.3f -> %.3f, eval accuracy %.3f"
      % (acc[0], mean(acc[-10:]), mean(mar[:5]), mean(mar[-10:]), ev[0]["eval_loss"], ev[-1]["eval_loss"],
         ev[-1]["eval_rewards/accuracies"]))
print("ORPO: nll_loss %.3f -> %.3f, rewards/accuracies %.3f (last 10), log_odds_ratio %.3f -> %.3f"
      % (mean(nll[:3]), mean(nll[-5:]), mean(oacc[-10:]), mean(lor[:3]), mean(lor[-5:])))
PY

# resume: DPO over all parameters, the reference read again from load_parameters_path
full=("${small[@]}" steps=6 checkpoint_period=3 checkpoint_compression=0 learning_rate_schedule_steps=6)
"$bin" train "${full[@]}" run_name=straight > a.log 2>&1 || { cat a.log; fail "straight run"; }
"$bin" train "${full[@]}" steps=3 run_name=resumed > b1.log 2>&1 || { cat b1.log; fail "first half"; }
"$bin" train "${full[@]}" run_name=resumed > b2.log 2>&1 || { cat b2.log; fail "resume"; }
grep -q "^resumed from .*step 3" b2.log || fail "the second half did not resume at step 3"
python3 - "$work/runs" <<'PY' || fail "the resumed run differs from the straight one"
import json, sys
runs = sys.argv[1]
TIMING = {"seconds", "tokens_per_s_per_device", "tflops_per_s_per_device", "comm_seconds", "wall_seconds", "goodput",
          "badput", "checkpoint_write_seconds", "checkpoint_blocked_seconds"}
def lines(r): return [{k: v for k, v in json.loads(l).items() if k not in TIMING} for l in open(f"{runs}/{r}/metrics.jsonl")]
a, b = lines("straight"), lines("resumed")
assert len(a) == 6 and len(b) == 6, (len(a), len(b))
assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
assert a[3]["rewards/margins"] != 0
print("resume bit-exact (DPO over all parameters):", len(a), "steps")
PY
# the checkpoints record the reference; a resume that would read another one
# (here the initialisation: load_parameters_path left out) is refused
grep -aq '"dpo_reference":{"source":"load_parameters_path=' runs/resumed/checkpoints/step_00000006/shard_00000-of-00001.gtck \
  || fail "the checkpoint records no DPO reference"
if "$bin" train "${data[@]}" model_name=gemma3-tiny max_target_length=48 packing=false per_device_batch_size=4 \
     steps=9 checkpoint_period=3 checkpoint_compression=0 learning_rate_schedule_steps=6 run_name=resumed \
     > b3.log 2>&1; then
  fail "a resume with another DPO reference (the initialisation) was accepted"
fi
grep -q "the DPO reference is not the one this run started with: its checkpoint records load_parameters_path=.*this start read init_weights_seed=" b3.log \
  || { cat b3.log; fail "no refusal naming both references"; }

# refused: a full state without a reference path
if "$bin" train "${data[@]}" model_name=gemma3-tiny steps=1 "load_full_state_path=$sft" run_name=x > x.log 2>&1; then
  fail "DPO from load_full_state_path without dpo_reference_path accepted"
fi
grep -q "dpo_reference_path" x.log || { cat x.log; fail "no message naming dpo_reference_path"; }
# refused: adapters with base tensors that train beside them (they would move the reference)
if "$bin" train "${small[@]}" enable_lora=true trainable_parameters_mask=norm steps=1 run_name=y > y.log 2>&1; then
  fail "DPO with adapters and trainable_parameters_mask accepted"
fi
grep -q "key 'trainable_parameters_mask' = 'norm' with enable_lora and DPO" y.log || { cat y.log; fail "no message naming the mask"; }

mpirun=${GT_MPIRUN:-$(command -v mpirun || true)}
if [ -z "$mpirun" ]; then echo "e2e_pref: no mpirun: the ranks' part skipped"; exit 0; fi
flags=()
if "$mpirun" --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
fi
mp=("${data[@]}" "load_parameters_path=$sft" max_target_length=48 packing=false per_device_batch_size=2
    enable_lora=true lora_rank=4 steps=4)
if ! "$mpirun" "${flags[@]}" -np 2 "$bin" train "${mp[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=r2x1 \
     > r2x1.log 2>&1; then
  if grep -q "built without MPI" r2x1.log; then echo "e2e_pref: built without MPI: the ranks' part skipped"; exit 0; fi
  cat r2x1.log; fail "2 ranks x 1 device"
fi
"$bin" train "${mp[@]}" num_devices=2 run_name=r1x2 > r1x2.log 2>&1 || { cat r1x2.log; fail "1 x 2"; }
python3 - "$work/runs/r2x1" "$work/runs/r1x2" <<'PY' || fail "2 ranks and 2 devices differ"
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
keys = ("step", "loss", "grad_norm", "total_weights", "rewards/chosen", "rewards/rejected", "rewards/accuracies",
        "logps/chosen", "logps/rejected")
la = [json.loads(l) for l in open(os.path.join(a, "metrics.jsonl"))]
lb = [json.loads(l) for l in open(os.path.join(b, "metrics.jsonl"))]
assert len(la) == len(lb) == 4
for x, y in zip(la, lb):
    for k in keys:
        assert x[k] == y[k], (k, x[k], y[k])
print("2 ranks x 1 device = 1 rank x 2 devices:", len(la), "steps")
PY
still=("${data[@]}" "load_parameters_path=$sft" "dpo_reference_path=$work/runs/straight/checkpoints" learning_rate=0
       max_target_length=48 packing=false per_device_batch_size=4 steps=4 eval_interval=2 eval_steps=2)
"$mpirun" "${flags[@]}" -np 2 "$bin" train "${still[@]}" run_name=still_dp > still_dp.log 2>&1 \
  || { cat still_dp.log; fail "data parallelism, learning_rate=0"; }
"$mpirun" "${flags[@]}" -np 2 "$bin" train "${still[@]}" enable_diloco=true dcn_diloco_parallelism=2 \
  diloco_sync_period=2 run_name=still_dl > still_dl.log 2>&1 || { cat still_dl.log; fail "DiLoCo, learning_rate=0"; }
python3 - "$work/runs/still_dp" "$work/runs/still_dl" <<'PY' || fail "DiLoCo's preference metrics are not both replicas'"
import json, os, sys
keys = ("loss", "total_weights", "pairs", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
        "logps/chosen", "logps/rejected", "eval_loss", "eval_rewards/chosen", "eval_rewards/rejected",
        "eval_rewards/accuracies", "eval_rewards/margins")
def lines(d): return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
la, lb = lines(sys.argv[1]), lines(sys.argv[2])
assert len(la) == len(lb) == 4
n = 0
for x, y in zip(la, lb):
    for k in keys:
        assert (k in x) == (k in y), (x["step"], k)
        if k in x:
            assert abs(x[k] - y[k]) <= 1e-9 * max(1.0, abs(x[k])), (x["step"], k, x[k], y[k])
            n += 1
assert any(abs(x["rewards/chosen"]) > 1e-3 for x in la) and any("eval_rewards/accuracies" in x for x in la)
print("DiLoCo's 2 replicas = data parallelism, learning_rate=0:", n, "figures")
PY
echo "e2e_pref: ok"
