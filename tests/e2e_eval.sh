#!/usr/bin/env bash
# End-to-end: gemtrain train with eval_tasks writes the task's scores to
# metrics.jsonl at each eval; gemtrain eval scores the run's checkpoint on a
# small multiple-choice file (tests/data/eval_mc_small.jsonl) and on the
# held-out text: a table, one JSON object (--json FILE, --json -), each
# choice's log-likelihood (--samples) from which the harness's formulas give
# the reported acc / acc_norm / acc_bytes, --limit, the scores
# the training run reported for the same checkpoint, and for it exported
# as a Hugging Face directory; the HellaSwag and MMLU layouts as published
# (tests/data/eval_{hellaswag,mmlu}_small.jsonl), stderr as the harness's
# mean_stderr, SFT records' loss mask, the same scores on 2 devices, at other batch sizes, with vocab
# tiles and over 2 MPI ranks (with mpirun); --whole scores every row of the
# file, an eval_dataset_path beside it too; eval opens only what it scores
# (no training-row or disjointness checks); a run's dtype and
# max_target_length are taken from it; an nf4 base's parameter count; task
# names unique and JSON-escaped; train checks eval_tasks at start; bad task files are refused in one line naming file, line and field;
# a sweep's table shows the task's accuracy columns and keeps them on a
# rerun; an unknown task field is refused. Usage: e2e_eval.sh <gemtrain
# binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_eval.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 60000 "$work/kjv.txt" > "$work/corpus.txt"
tasks="$src/tests/data/eval_mc_small.jsonl"
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" threads_per_device=1)

# 1. a short run that also scores the task at each eval (every 10 steps)
"$bin" train "${common[@]}" steps=20 learning_rate=0.01 eval_interval=10 eval_steps=1 sample_tokens=0 \
  "eval_tasks=$tasks" "base_output_directory=$work/runs" run_name=a > "$work/train.log" 2>&1 \
  || { cat "$work/train.log"; fail "training with eval_tasks"; }
last=$(grep '"tasks"' "$work/runs/a/metrics.jsonl" | tail -1)
[ -n "$last" ] || fail "metrics.jsonl has no tasks object"
[ "$(grep -c '"tasks"' "$work/runs/a/metrics.jsonl")" = 2 ] || fail "tasks not on both eval steps"
echo "$last" | grep -q '"step": 19' || fail "the last tasks object is not step 19's"
echo "$last" | grep -Eq '"eval_mc_small": \{"n": 6, "acc": [0-9.]+, "acc_stderr": [0-9.]+, "acc_norm": [0-9.]+, "acc_norm_stderr": [0-9.]+\}' \
  || fail "tasks object: $last"

# 2. gemtrain eval on the run: the table and the JSON
ev() { "$bin" eval "load_parameters_path=$work/runs/a" "${common[@]}" "$@"; }
ev "eval_tasks=$tasks" --json "$work/r1.json" > "$work/e1.log" 2>&1 || { cat "$work/e1.log"; fail "gemtrain eval"; }
grep -q '^eval: checkpoint step_00000020 of run ' "$work/e1.log" || { cat "$work/e1.log"; fail "no model line"; }
grep -Eq '^data: 18 rows, [0-9]+ tokens in the loss: loss [0-9.]+, perplexity [0-9.]+ ' "$work/e1.log" \
  || { cat "$work/e1.log"; fail "no data line"; }
grep -Eq '^\| eval_mc_small +\| +6 \| +[01]\.[0-9]{4} ± [0-9.]{6} \|' "$work/e1.log" || { cat "$work/e1.log"; fail "no task row"; }
python3 - "$work/r1.json" "$last" <<'EOF' || fail "JSON results"
import json, math, sys
r = json.load(open(sys.argv[1]))
t = r["tasks"]["eval_mc_small"]
assert t["n"] == 6 and t["requests"] == 19, t
# the harness's mean_stderr of a 0/1 score: sqrt(p (1 - p) / (n - 1))
for k in ("acc", "acc_norm", "acc_bytes"):
    p = t[k]
    assert abs(t[k + "_stderr"] - math.sqrt(p * (1 - p) / 5)) < 1e-12, (k, t)
    assert abs(p * 6 - round(p * 6)) < 1e-12, (k, p)
# the same checkpoint scored during training (step 19's eval) and here
m = json.loads(sys.argv[2])["tasks"]["eval_mc_small"]
for k in ("acc", "acc_norm", "acc_stderr", "acc_norm_stderr"):
    assert abs(m[k] - t[k]) < 1e-8, (k, m, t)
p = r["perplexity"]
# gemma3-tiny: rows of 64 + 1 tokens; the last 2% of 60000 bytes held out
assert p["rows"] == 18 and abs(math.exp(p["loss"]) - p["perplexity"]) < 1e-9 * p["perplexity"], p
EOF

# 2a. --samples: each choice's log-likelihood; acc, acc_norm and acc_bytes
#     recomputed from them as lm-evaluation-harness does (numpy argmax of
#     ll, ll / len(choice), ll / len(choice.encode())) are the reported ones;
#     --limit scores the first examples only
ev "eval_tasks=$tasks" --samples "$work/s.jsonl" --json "$work/s.json" > /dev/null 2>&1 || fail "eval --samples"
python3 - "$tasks" "$work/s.jsonl" "$work/s.json" <<'EOF' || fail "the metrics recomputed from --samples"
import json, sys
ex = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sm = [json.loads(l) for l in open(sys.argv[2])]
r = json.load(open(sys.argv[3]))["tasks"]["eval_mc_small"]
assert len(sm) == len(ex) == r["n"]
def argmax(v):
    return max(range(len(v)), key=lambda i: (v[i], -i))
hits = {"acc": 0, "acc_norm": 0, "acc_bytes": 0}
for e, s in zip(ex, sm):
    ll = s["ll"]
    assert s["label"] == e["label"] and len(ll) == len(e["choices"])
    hits["acc"] += argmax(ll) == e["label"]
    hits["acc_norm"] += argmax([x / len(c) for x, c in zip(ll, e["choices"])]) == e["label"]
    hits["acc_bytes"] += argmax([x / len(c.encode()) for x, c in zip(ll, e["choices"])]) == e["label"]
    assert s["pred"] == argmax(ll)
for k, h in hits.items():
    assert abs(r[k] - h / len(ex)) < 1e-15, (k, r[k], h)
EOF
ev "eval_tasks=$tasks" --limit 4 --json "$work/lim.json" > /dev/null 2>&1 || fail "eval --limit"
python3 -c "import json; t = json.load(open('$work/lim.json'))['tasks']['eval_mc_small']; assert t['n'] == 4, t" \
  || fail "--limit 4"

# 2b. the same checkpoint as a Hugging Face directory scores the same
"$bin" convert to_hf "$work/runs/a" "$work/hf" dtype=float32 > /dev/null || fail "convert to_hf"
"$bin" eval "load_parameters_path=$work/hf" "${common[@]}" "eval_tasks=$tasks" --json "$work/hf.json" > "$work/hf.log" 2>&1 \
  || { cat "$work/hf.log"; fail "eval of the HF directory"; }
python3 - "$work/r1.json" "$work/hf.json" <<'EOF' || fail "the HF directory scores differently"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("acc", "acc_norm", "acc_bytes", "tokens"):
    assert a["tasks"]["eval_mc_small"][k] == b["tasks"]["eval_mc_small"][k], k
assert a["perplexity"]["loss"] == b["perplexity"]["loss"], (a["perplexity"], b["perplexity"])
EOF

# 2c. the published layouts: HellaSwag rows and MMLU rows, told by their fields
ev "eval_tasks=$src/tests/data/eval_hellaswag_small.jsonl, $src/tests/data/eval_mmlu_small.jsonl" --json "$work/l.json" \
  > "$work/l.log" 2>&1 || { cat "$work/l.log"; fail "eval of the HellaSwag and MMLU files"; }
python3 - "$work/l.json" <<'EOF' || fail "the HellaSwag and MMLU layouts"
import json, sys
t = json.load(open(sys.argv[1]))["tasks"]
h, m = t["eval_hellaswag_small"], t["eval_mmlu_small"]
assert h["format"] == "hellaswag" and h["n"] == 3 and h["requests"] == 10, h
# byte tokens: each MMLU continuation is " A" .. " D", 2 tokens
assert m["format"] == "mmlu" and m["n"] == 3 and m["requests"] == 12 and m["tokens"] == 24, m
EOF

# 3. the same scores on 2 devices, at another batch size, with vocab tiles;
#    --json - puts the JSON alone on standard output
#    z_loss_multiplier changes nothing (the scores are the cross-entropy alone)
for v in "num_devices=2" "per_device_batch_size=3" "num_devices=2 per_device_batch_size=2 num_vocab_tiling=2" \
         "z_loss_multiplier=0.1"; do
  # shellcheck disable=SC2086
  ev "eval_tasks=$tasks" --json - $v > "$work/r2.json" 2> "$work/e2.log" || { cat "$work/e2.log"; fail "eval $v"; }
  python3 - "$work/r1.json" "$work/r2.json" "$v" <<'EOF' || fail "scores differ with $v"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a["tasks"]["eval_mc_small"], b["tasks"]["eval_mc_small"]
for k in ("acc", "acc_norm", "acc_bytes", "n", "tokens"):
    assert ta[k] == tb[k], (sys.argv[3], k, ta[k], tb[k])
pa, pb = a["perplexity"], b["perplexity"]
assert pa["tokens"] == pb["tokens"] and abs(pa["loss"] - pb["loss"]) < 1e-5, (pa, pb)
EOF
done

# 3b. over 2 MPI ranks (1 device each): the same as 1 rank x 2 devices
mpirun=$(command -v mpirun || true)
if [ -n "$mpirun" ]; then
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  ev "eval_tasks=$tasks" --json "$work/d2.json" num_devices=2 > /dev/null 2>&1 || fail "eval on 2 devices"
  if (cd "$work" && timeout 120 "$mpirun" "${flags[@]}" -np 2 "$bin" eval "load_parameters_path=$work/runs/a" \
        "${common[@]}" "eval_tasks=$tasks" num_devices=1 dcn_fsdp_parallelism=2 --json "$work/r2r.json") \
        > "$work/mpi.log" 2>&1; then
    python3 - "$work/d2.json" "$work/r2r.json" <<'EOF2' || fail "2 ranks differ from 2 devices"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("acc", "acc_norm", "acc_bytes", "tokens"):
    assert a["tasks"]["eval_mc_small"][k] == b["tasks"]["eval_mc_small"][k], k
assert a["perplexity"]["loss"] == b["perplexity"]["loss"], (a["perplexity"], b["perplexity"])
EOF2
  elif ! grep -q "built without MPI" "$work/mpi.log"; then
    cat "$work/mpi.log"; fail "gemtrain eval over 2 ranks"
  fi
fi

# 4. --whole: every row of the file (the training part too)
ev --whole --json "$work/w.json" > "$work/w.log" 2>&1 || { cat "$work/w.log"; fail "eval --whole"; }
python3 -c "
import json, sys
p = json.load(open('$work/w.json'))['perplexity']
assert p['rows'] == 60000 // 65, p
assert 'tasks' not in json.load(open('$work/w.json')) or not json.load(open('$work/w.json'))['tasks']
" || fail "--whole rows"

# 4b. SFT records: only the model's turns are in the loss (tests/data/sft_chat.jsonl,
#     Gemma's chat template over byte tokens: each turn's bytes and its <end_of_turn>)
ev dataset_type=jsonl "dataset_path=$src/tests/data/sft_chat.jsonl" use_sft=true train_data_columns=messages \
  packing=false max_target_length=256 --whole --json "$work/sft.json" > "$work/sft.log" 2>&1 || { cat "$work/sft.log"; fail "eval of SFT records"; }
python3 - "$src/tests/data/sft_chat.jsonl" "$work/sft.json" <<'EOF' || fail "SFT loss tokens"
import json, sys
want, rows = 0, 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    rows += 1
    for m in json.loads(line)["messages"]:
        if m["role"] == "assistant":
            want += len(m["content"].strip().encode()) + len("<end_of_turn>")
p = json.load(open(sys.argv[2]))["perplexity"]
assert p["rows"] == rows and p["tokens"] == want, (p, rows, want)
EOF

# 4c. --whole scores all of dataset_path even when eval_dataset_path is set
#     (a run's config.json names one), and says so
head -c 6000 "$work/corpus.txt" > "$work/ev.txt"
printf '{"dataset_path": "%s", "eval_dataset_path": "%s"}\n' "$work/corpus.txt" "$work/ev.txt" > "$work/cf.json"
"$bin" eval "$work/cf.json" "load_parameters_path=$work/runs/a" model_name=gemma3-tiny dataset_type=text threads_per_device=1 \
  --whole --json "$work/wc.json" > "$work/wc.log" 2>&1 || { cat "$work/wc.log"; fail "eval --whole with eval_dataset_path"; }
python3 -c "import json; p = json.load(open('$work/wc.json'))['perplexity']; assert p['rows'] == 60000 // 65, p" \
  || { cat "$work/wc.log"; fail "--whole did not score every row of dataset_path"; }
grep -qF "gemtrain: eval: --whole scores every row of dataset_path '$work/corpus.txt'; eval_dataset_path '$work/ev.txt' is not scored" \
  "$work/wc.log" || { cat "$work/wc.log"; fail "no --whole note"; }

# 4d. eval opens only what it scores, without training's checks: a file of
#     fewer rows than one batch (3 rows, batch 4), eval_dataset_path equal to
#     dataset_path (nothing is trained on), eval_dataset_path alone where the
#     default dataset_path does not exist
head -c 201 "$work/corpus.txt" > "$work/small.txt"
ev "dataset_path=$work/small.txt" --whole --json "$work/sm.json" > "$work/sm.log" 2>&1 || { cat "$work/sm.log"; fail "eval of 3 rows"; }
python3 -c "import json; p = json.load(open('$work/sm.json'))['perplexity']; assert p['rows'] == 3 and p['tokens'] == 3 * 64, p" \
  || fail "3 rows"
ev "dataset_path=$work/ev.txt" "eval_dataset_path=$work/ev.txt" --json "$work/same.json" > "$work/same.log" 2>&1 \
  || { cat "$work/same.log"; fail "eval with eval_dataset_path = dataset_path"; }
(cd "$work" && "$bin" eval "load_parameters_path=$work/runs/a" model_name=gemma3-tiny threads_per_device=1 \
  "eval_dataset_path=$work/ev.txt" --json "$work/alone.json") > "$work/alone.log" 2>&1 \
  || { cat "$work/alone.log"; fail "eval of eval_dataset_path alone"; }
python3 - "$work/same.json" "$work/alone.json" <<'EOF' || fail "eval_dataset_path scored"
import json, sys
a, b = (json.load(open(p))["perplexity"] for p in sys.argv[1:3])
assert a["rows"] == b["rows"] == 6000 // 65 and a["loss"] == b["loss"], (a, b)
EOF

# 4e. a run's numerics and row length are the run's: a bfloat16 run of
#     128-token rows; eval without dtype or max_target_length gives the
#     run's own eval_loss (eval_steps x batch = the 9 held-out rows of 129
#     tokens), and its header says where the keys came from
"$bin" train "${common[@]}" steps=2 dtype=bfloat16 max_target_length=128 per_device_batch_size=1 eval_interval=2 \
  eval_steps=9 sample_tokens=0 "base_output_directory=$work/runs" run_name=bf > "$work/bf.log" 2>&1 \
  || { cat "$work/bf.log"; fail "the bfloat16 run"; }
"$bin" eval "load_parameters_path=$work/runs/bf" "${common[@]}" per_device_batch_size=1 --json "$work/bf.json" \
  > "$work/bfe.log" 2>&1 || { cat "$work/bfe.log"; fail "eval of the bfloat16 run"; }
grep -q "; from the run's config: dtype=bfloat16 matmul_precision=default max_target_length=128$" "$work/bfe.log" \
  || { cat "$work/bfe.log"; fail "the header does not name the run's keys"; }
python3 - "$work/runs/bf/metrics.jsonl" "$work/bf.json" <<'EOF' || fail "eval of the bfloat16 run differs from its eval_loss"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1]) if '"eval_loss"' in l][-1]["eval_loss"]
p = json.load(open(sys.argv[2]))["perplexity"]
assert p["rows"] == 9, p
assert abs(p["loss"] - run) < 2e-8 * run, (p["loss"], run)
EOF

# 4f. the parameter count is the model's elements, as training prints it,
#     with an nf4 base whose storage is fewer words
"$bin" train "load_parameters_path=$work/hf" "${common[@]}" enable_lora=true lora_weight_qtype=nf4 steps=1 \
  eval_interval=-1 sample_tokens=0 "base_output_directory=$work/runs" run_name=q > "$work/q.log" 2>&1 \
  || { cat "$work/q.log"; fail "the nf4 LoRA run"; }
want=$(sed -n 's/^number parameters: .*(\([0-9]*\))$/\1/p' "$work/q.log")
[ -n "$want" ] || { cat "$work/q.log"; fail "no parameter count in training's header"; }
"$bin" eval "load_parameters_path=$work/runs/q" "${common[@]}" "eval_tasks=$tasks" > "$work/qe.log" 2>&1 \
  || { cat "$work/qe.log"; fail "eval of the nf4 LoRA run"; }
grep -q "^eval: .*, $want parameters, on 1 device" "$work/qe.log" || { cat "$work/qe.log"; fail "parameter count (want $want)"; }

# 5. bad task files: one line naming file, line and field
bad() {
  printf '%s\n' "$1" > "$work/bad.jsonl"
  printf '%s\n' "$2" >> "$work/bad.jsonl"
  local out rc=0
  out=$(ev "eval_tasks=$work/bad.jsonl" 2>&1) && rc=0 || rc=$?
  [ "$rc" != 0 ] || fail "a bad task file was accepted: $2"
  echo "$out" | grep -qF "$3" || { echo "$out"; fail "no line '$3'"; }
}
good='{"context": "a", "choices": ["b", "c"], "label": 0}'
bad "$good" '{"context": "a", "choices": ["b"], "label": 0}' \
  "eval: '$work/bad.jsonl' line 2: field 'choices' has 1 choice; a multiple-choice example needs at least 2"
bad "$good" '{"context": "a", "choices": ["b", "c"], "label": 2}' \
  "eval: '$work/bad.jsonl' line 2: field 'label' = 2 is out of range for 2 choices (0..1)"
bad "$good" '{"context": "", "choices": ["b", "c"], "label": 1}' "eval: '$work/bad.jsonl' line 2: field 'context' is empty"
bad "$good" '{"ctx_a": "", "ctx_b": "", "endings": ["b", "c"], "label": "1"}' \
  "eval: '$work/bad.jsonl' line 2: field 'ctx_a' is empty"
bad "$good" '{"question": "q", "choices": ["b", "c"], "answer": 5}' \
  "eval: '$work/bad.jsonl' line 2: field 'answer' = 5 is out of range for 2 choices (0..1)"
out=$("$bin" eval model_name=gemma3-tiny 2>&1) && fail "eval with nothing to score ran" || true
echo "$out" | grep -q "^gemtrain: eval: nothing to score" || fail "no 'nothing to score' line: $out"
# a preference run's keys: its loss is no cross-entropy, so no perplexity of it
out=$("$bin" eval model_name=gemma3-tiny use_dpo=true dataset_type=jsonl "dataset_path=$work/bad.jsonl" 2>&1) &&
  fail "eval with use_dpo=true ran" || true
echo "$out" | grep -q "^gemtrain: eval: key 'use_dpo' = true: eval scores the held-out token cross-entropy" ||
  fail "no use_dpo refusal: $out"
# with tasks to score, the pairs are left out and the tasks scored
out=$("$bin" eval model_name=gemma3-tiny use_dpo=true dataset_type=jsonl "dataset_path=$work/bad.jsonl" \
  "eval_tasks=$tasks" 2>&1) || fail "eval of tasks with use_dpo=true: $out"
echo "$out" | grep -q "^gemtrain: eval: key 'use_dpo' = true: the preference pairs have no held-out cross-entropy" ||
  fail "no use_dpo note: $out"
echo "$out" | grep -q "eval_mc_small" || fail "the task was not scored: $out"

# 5b. task names: two files of one name are refused (the JSON would hold
#     one key for two tasks); a name with a quote is written as valid JSON
mkdir -p "$work/d1" "$work/d2"
cp "$tasks" "$work/d1/t.jsonl"; cp "$tasks" "$work/d2/t.jsonl"
out=$(ev "eval_tasks=$work/d1/t.jsonl,$work/d2/t.jsonl" --json - 2>&1) && fail "two tasks called t were scored: $out" || true
echo "$out" | grep -qF "gemtrain: eval: key 'eval_tasks' names two tasks called 't' ('$work/d1/t.jsonl' and '$work/d2/t.jsonl'" \
  || fail "no duplicate-name refusal: $out"
cp "$tasks" "$work/q\"x.jsonl"
ev "eval_tasks=$work/q\"x.jsonl" --samples "$work/q.jsonl" --json "$work/q.json" > "$work/qx.log" 2>&1 \
  || { cat "$work/qx.log"; fail "eval of q\"x.jsonl"; }
python3 - "$work/q.jsonl" "$work/q.json" <<'EOF' || fail "a quote in a task name"
import json, sys
sm = [json.loads(l) for l in open(sys.argv[1])]
assert len(sm) == 6 and all(s["task"] == 'q"x' for s in sm), sm[0]
assert list(json.load(open(sys.argv[2]))["tasks"]) == ['q"x']
EOF

# 5c. training checks eval_tasks when it starts, naming the key: a missing
#     file stops the run before its first step; a run that never evaluates
#     says its tasks are not scored
out=$("$bin" train "${common[@]}" steps=4 eval_interval=2 eval_steps=1 "eval_tasks=$work/nonexistent.jsonl" \
  "base_output_directory=$work/runs" run_name=nx 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] || fail "a missing eval_tasks file: exit $rc: $out"
echo "$out" | grep -qF "gemtrain: eval: key 'eval_tasks': task file '$work/nonexistent.jsonl' cannot be opened" \
  || fail "missing-file line: $out"
[ ! -e "$work/runs/nx/metrics.jsonl" ] || fail "the run with a missing task file trained"
out=$("$bin" train "${common[@]}" steps=1 eval_interval=-1 sample_tokens=0 "eval_tasks=$tasks" \
  "base_output_directory=$work/runs" run_name=ne 2>&1) || fail "run with eval_interval=-1: $out"
echo "$out" | grep -q "^note: key 'eval_tasks' is set but this run never evaluates (eval_interval = -1)" \
  || fail "no never-evaluates note: $out"

# 6. a sweep whose table shows the task's accuracy
cat > "$work/sw.json" <<EOF
{
  "base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "text", "dataset_path": "$work/corpus.txt",
                         "eval_interval": 5, "eval_steps": 1, "eval_tasks": "$tasks", "threads_per_device": 1}},
  "grid": {"learning_rate": [0.001, 0.01]},
  "steps": 5,
  "metrics": ["final_eval_loss", "tasks/eval_mc_small/acc", "tasks/eval_mc_small/acc_norm", "tasks/eval_mc_small/n"],
  "plot": {"x": "learning_rate", "y": "tasks/eval_mc_small/acc"}
}
EOF
(cd "$work" && "$bin" sweep sw.json base_output_directory=out) > "$work/sw.log" 2>&1 || { cat "$work/sw.log"; fail "sweep"; }
md="$work/out/sw/results.md"
grep -q '| tasks/eval_mc_small/acc | tasks/eval_mc_small/acc_norm | tasks/eval_mc_small/n |' "$md" \
  || { cat "$md"; fail "no task columns in results.md"; }
[ "$(grep -Ec '\| ok \| [0-9.]+ \| [01]\.[0-9]{4} \| [01]\.[0-9]{4} \| 6 \|' "$md")" = 2 ] || { cat "$md"; fail "task cells"; }
# results.jsonl keeps them (a rerun reads them back and runs nothing)
grep -q '"tasks":{"eval_mc_small":{"acc":' "$work/out/sw/results.jsonl" || fail "results.jsonl has no tasks"
(cd "$work" && "$bin" sweep sw.json base_output_directory=out) > "$work/sw2.log" 2>&1 || fail "sweep rerun"
cmp <(grep '^|' "$md") <(sed -n '/^|/p' "$work/out/sw/results.md") > /dev/null || fail "rerun table"
grep -Ec '\| ok \| [0-9.]+ \| [01]\.[0-9]{4} \| [01]\.[0-9]{4} \| 6 \|' "$md" | grep -q '^2$' || fail "rerun lost the task cells"
bad_sw=$(sed 's|"tasks/eval_mc_small/n"|"tasks/eval_mc_small/f1"|' "$work/sw.json")
echo "$bad_sw" > "$work/sw3.json"
out=$(cd "$work" && "$bin" sweep sw3.json base_output_directory=out 2>&1) && fail "a bad task metric was accepted" || true
echo "$out" | grep -q "is not a metric.*tasks/<task>/<field>" || fail "bad metric line: $out"
cat "$md"

# 7. task text without a tokenizer is byte tokens, which fit only a byte
#    model: a model of 512 ids and no tokenizer is refused by gemtrain eval
#    and, before a step, by a training run with eval_tasks
"$bin" convert to_hf init "$work/hf512" model_name=gemma3-tiny vocab_size=512 > "$work/hf512.log" 2>&1 || fail "init hf512"
# (its export does not call a 512-id model's missing tokenizer byte tokens)
grep -q "^convert: no tokenizer files (the source names none: give the directory the model's tokenizer.json" "$work/hf512.log" \
  || { cat "$work/hf512.log"; fail "the 512-id export's tokenizer line"; }
rc=0
"$bin" eval "load_parameters_path=$work/hf512" "eval_tasks=$tasks" > "$work/v512.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "^gemtrain: eval: key 'eval_tasks': the tasks' text without a tokenizer is read as byte tokens (260 ids), but the model's vocab_size is 512; set tokenizer_path" \
  "$work/v512.log" || { cat "$work/v512.log"; fail "eval scored a 512-id model's tasks as byte tokens (exit $rc)"; }
rc=0
"$bin" train "load_parameters_path=$work/hf512" dataset_type=synthetic steps=1 eval_interval=1 "eval_tasks=$tasks" \
  sample_tokens=0 "base_output_directory=$work/runs" run_name=v512 > "$work/t512.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "eval: key 'eval_tasks': the tasks' text without a tokenizer is read as byte tokens" "$work/t512.log" \
  || { cat "$work/t512.log"; fail "a training run with a 512-id model's eval_tasks was not refused (exit $rc)"; }
grep -q "^completed step" "$work/t512.log" && fail "a step ran before the eval_tasks refusal"
echo "e2e_eval: OK"
