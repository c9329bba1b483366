#!/usr/bin/env bash
# End-to-end data: JSON Lines corpora (plain, gzip, several files, a glob,
# a directory, also named with a trailing '/': its files named with one
# slash) train; `gemtrain data` shows packed rows (segments,
# positions, targets) and file order with enable_data_shuffling=false;
# eval_dataset_path feeds eval; `gemtrain tokenize` turns JSON Lines into
# shards that train; every malformed record is refused with one line naming
# its file and line; and a run stopped mid-epoch resumes bit-exactly (the
# losses of an uninterrupted run) for packed JSON Lines, SFT records and
# token shards, on 1 and 2 devices. Usage: e2e_data.sh <gemtrain> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_data.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# a corpus of 300 short documents, split over files three ways
python3 - "$work" <<'EOF'
import gzip, json, os, random, sys
w = sys.argv[1]
random.seed(5)
names = ["Adam", "Seth", "Enos", "Cainan", "Mahalaleel", "Jared", "Enoch", "Methuselah", "Lamech", "Noah"]
docs = []
for i in range(300):
    a, b = random.choice(names), random.choice(names)
    docs.append({"text": f"And {a} lived {random.randint(60, 900)} years, and begat {b}. (document {i})"})
lines = [json.dumps(d) for d in docs]
open(f"{w}/all.jsonl", "w").write("\n".join(lines) + "\n")
os.makedirs(f"{w}/parts")
open(f"{w}/parts/p1.jsonl", "w").write("\n".join(lines[:120]) + "\n")
with gzip.open(f"{w}/parts/p2.jsonl.gz", "wt") as f:
    f.write("\n".join(lines[120:]) + "\n")
open(f"{w}/eval.jsonl", "w").write("\n".join(json.dumps({"text": f"Held out document {i}."}) for i in range(30)) + "\n")
EOF
tiny=(model_name=gemma3-tiny max_target_length=64 per_device_batch_size=4 learning_rate=0.01 sample_tokens=0
      "base_output_directory=$work/runs" threads_per_device=1)
losses() { grep -o '"loss": [^,]*' "$work/runs/$1/metrics.jsonl"; }

# 1. one file, a plain + gzip list, a glob and a directory: the same stream, the same losses
for spec in "$work/all.jsonl" "$work/parts/p1.jsonl,$work/parts/p2.jsonl.gz" "$work/parts/p*.jsonl*" "$work/parts" \
  "$work/parts/"; do
  n=$((${n:-0} + 1))
  "$bin" train "${tiny[@]}" dataset_type=jsonl "dataset_path=$spec" steps=4 eval_interval=-1 run_name=files$n \
    > "$work/files$n.log" 2>&1 || { tail -3 "$work/files$n.log"; fail "training on '$spec' failed"; }
done
for n in 2 3 4 5; do
  diff <(losses files1) <(losses files$n) > /dev/null || fail "dataset_path variant $n gives other losses than one file"
done

# a directory named with a trailing '/' (as a shell completes it): its files are named with one slash
"$bin" data "${tiny[@]}" dataset_type=jsonl "dataset_path=$work/parts/" enable_data_shuffling=false \
  --batches 1 --rows 1 > "$work/data_slash.txt" || fail "gemtrain data on '$work/parts/' failed"
grep -q "(next: '$work/parts/p1.jsonl', token 0)" "$work/data_slash.txt" \
  || { grep -m1 next: "$work/data_slash.txt"; fail "dataset_path '$work/parts/' does not name '$work/parts/p1.jsonl'"; }
! grep -q "//" "$work/data_slash.txt" || { grep -m1 "//" "$work/data_slash.txt"; fail "a file name with '//'"; }
mkfifo "$work/parts/live.jsonl"
out=$("$bin" data "${tiny[@]}" dataset_type=jsonl "dataset_path=$work/parts/" 2>&1) && fail "a FIFO in a directory was read"
echo "$out" | grep -q "^gemtrain: data: dataset_path '$work/parts/' holds '$work/parts/live.jsonl', a FIFO, not a regular file" \
  || fail "the FIFO's refusal does not name '$work/parts/live.jsonl': $out"
rm "$work/parts/live.jsonl"

# 2. gemtrain data: the describe lines, and packed rows that stay inside documents
"$bin" data "${tiny[@]}" dataset_type=jsonl "dataset_path=$work/all.jsonl" enable_data_shuffling=false \
  --batches 2 --rows 1 > "$work/data.txt" || fail "gemtrain data failed"
grep -q "^data: jsonl '$work/all.jsonl', [0-9]* tokens in 300 records of 1 file ([0-9]* train, [0-9]* eval); global batch 4 x 64 tokens$" \
  "$work/data.txt" || { head -3 "$work/data.txt"; fail "no data line"; }
grep -q '^sequences: packed: each row is the next 65 tokens (T + 1) of the documents laid end to end' "$work/data.txt" \
  || fail "no sequences line"
grep -q '^order: [0-9]* training rows per epoch in 1 part, in file order (enable_data_shuffling=false)' "$work/data.txt" \
  || fail "no order line"
# file order: the first row starts with the first document
grep -q '^  document 1 (positions 0\.\.[0-9]*): "<bos>And [A-Za-z]* lived [0-9]* years, and begat [A-Za-z]*\. (document 0)<eos>"$' \
  "$work/data.txt" || { sed -n 4,14p "$work/data.txt"; fail "the first row is not the first document"; }
python3 - "$work/data.txt" <<'EOF' || fail "a packed row's segments, positions or targets are wrong"
import sys
rows, cur = [], {}
for line in open(sys.argv[1]):
    k = line.split(":")[0].strip()
    if k in ("inputs", "targets", "segments", "positions"):
        cur[k] = [int(x) for x in line.split(":", 1)[1].split()]
        if k == "positions":
            rows.append(cur)
            cur = {}
assert len(rows) == 2
for r in rows:
    inp, tg, sg, ps = r["inputs"], r["targets"], r["segments"], r["positions"]
    for t in range(64):
        if t > 0 and sg[t] != sg[t - 1]:
            assert inp[t - 1] == 1 and tg[t - 1] == -1 and ps[t] == 0  # <eos> ends a document, positions restart
        if t + 1 < 64 and sg[t + 1] == sg[t]:
            assert tg[t] == inp[t + 1] and ps[t + 1] == ps[t] + 1
EOF
# eval batches from eval_dataset_path
"$bin" data "${tiny[@]}" dataset_type=jsonl "dataset_path=$work/all.jsonl" "eval_dataset_path=$work/eval.jsonl" --eval \
  --rows 1 > "$work/eval.txt" || fail "gemtrain data --eval failed"
grep -q "eval: '$work/eval.jsonl', [0-9]* tokens" "$work/eval.txt" || fail "no eval source in the data line"
grep -q '^  document 1 (positions 0\.\.[0-9]*): "<bos>Held out document 0\.<eos>"$' "$work/eval.txt" \
  || { sed -n 1,12p "$work/eval.txt"; fail "eval does not start with eval.jsonl's first record"; }

# 3. tokenize JSON Lines into shards that train
"$bin" tokenize "output_path=$work/shards" shard_tokens=3000 compress=false "$work/all.jsonl" 2> "$work/tok.log" \
  || { cat "$work/tok.log"; fail "tokenize of JSON Lines failed"; }
n_tok=$(sed -n 's/^tokenize: wrote [0-9]* shards (\([0-9]*\) tokens).*/\1/p' "$work/tok.log")
grep -q "^data: jsonl '$work/all.jsonl', $n_tok tokens" "$work/data.txt" \
  || fail "the shards hold $n_tok tokens, the JSON Lines source another count"

# 4. resume mid-epoch, bit-exactly: packed JSON Lines, SFT records (packing
#    and not), token shards (compressed); on 1 and 2 devices; 8 to 16 steps
#    an epoch, so step 23 is in the middle of a later one.
resume_case() { # name devices args...
  local name="$1" nd="$2"; shift 2
  local args=("${tiny[@]}" num_devices=$nd per_device_batch_size=$((4 / nd)) eval_interval=-1
              learning_rate_schedule_steps=30 "$@")
  "$bin" train "${args[@]}" steps=30 run_name="$name-straight" > "$work/$name-s.log" 2>&1 \
    || { tail -3 "$work/$name-s.log"; fail "$name: the straight run failed"; }
  "$bin" train "${args[@]}" steps=23 run_name="$name-resumed" > "$work/$name-r1.log" 2>&1 \
    || { tail -3 "$work/$name-r1.log"; fail "$name: the first part failed"; }
  "$bin" train "${args[@]}" steps=30 run_name="$name-resumed" > "$work/$name-r2.log" 2>&1 \
    || { tail -3 "$work/$name-r2.log"; fail "$name: the resumed part failed"; }
  grep -q "^resumed from .*step_00000023 (the run directory): step 23, AdamW step 23, data epoch [1-9]" "$work/$name-r2.log" \
    || { grep resumed "$work/$name-r2.log"; fail "$name: no mid-epoch resume line"; }
  diff <(losses "$name-straight") <(losses "$name-resumed") > /dev/null \
    || fail "$name: the resumed run's losses differ from the straight run's"
  [ "$(losses "$name-resumed" | wc -l)" = 30 ] || fail "$name: 30 steps expected"
}
head -n 60 "$src/tests/data/sft_chat.jsonl" > "$work/chat.jsonl"
head -n 60 "$work/all.jsonl" > "$work/small.jsonl"
"$bin" tokenize "output_path=$work/small_shards" shard_tokens=1500 "$work/small.jsonl" 2> /dev/null
for nd in 1 2; do
  resume_case jsonl$nd $nd dataset_type=jsonl "dataset_path=$work/small.jsonl" eval_split_fraction=0.1
  resume_case sft$nd $nd dataset_type=jsonl "dataset_path=$work/chat.jsonl" use_sft=true train_data_columns=messages \
    max_target_length=256 eval_split_fraction=0.2 packing=$([ $nd = 1 ] && echo true || echo false)
  resume_case shards$nd $nd dataset_type=tokens "dataset_path=$work/small_shards" eval_split_fraction=0.1
done
grep -q "data epoch 1, row [0-9]* of [0-9]* (next: '$work/small_shards/shard-0000[0-9].gtok', token [0-9]*)" "$work/shards1-r2.log" \
  || fail "the resume line does not name the next shard"

# 5. malformed records: one line naming the file and the line, nothing trained
refuse() { # expected-substring args...
  local want="$1"; shift
  set +e; "$bin" train "${tiny[@]}" steps=2 eval_interval=-1 run_name=refused "$@" > "$work/out.log" 2> "$work/err.log"
  local rc=$?; set -e
  [ $rc -ne 0 ] || fail "'$*' was accepted"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$*' printed more than one error line"; }
  grep -qF -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$*' error lacks '$want'"; }
  [ ! -e "$work/runs/refused/metrics.jsonl" ] || fail "'$*': a refused run trained"
}
bad() { printf '%s\n' "$@" > "$work/bad.jsonl"; }
bad '{"text": "a"}' '{"text": "b"'
refuse "data: '$work/bad.jsonl' line 2: malformed JSON at column 12" dataset_type=jsonl "dataset_path=$work/bad.jsonl"
bad '{"text": "a"}' '{"body": "b"}'
refuse "data: '$work/bad.jsonl' line 2: no field 'text' (train_data_columns); the record has 'body'" \
  dataset_type=jsonl "dataset_path=$work/bad.jsonl"
bad '{"text": ["a"]}'
refuse "data: '$work/bad.jsonl' line 1: field 'text' is an array; expected a string" dataset_type=jsonl "dataset_path=$work/bad.jsonl"
bad '{"text": "a"}' '' '{"text": ""}'
refuse "data: '$work/bad.jsonl' line 3: field 'text' is an empty document" dataset_type=jsonl "dataset_path=$work/bad.jsonl"
bad '{"prompt": "Tell me a long story", "completion": "Once upon a time there was a very long story that went on and on and on and on and on and on and on and on."}'
refuse "data: '$work/bad.jsonl' line 1: the record is 129 tokens, longer than a sequence of max_target_length + 1 = 65 (overlong_records=refuse" \
  dataset_type=jsonl "dataset_path=$work/bad.jsonl" use_sft=true train_data_columns=prompt,completion
refuse "data: dataset_path pattern '$work/none-*.jsonl' matches no file" dataset_type=jsonl "dataset_path=$work/none-*.jsonl"
refuse "data: key 'packing' = false needs documents as records (dataset_type=jsonl)" dataset_type=tokens \
  "dataset_path=$work/shards" packing=false
echo "e2e_data: ok"
