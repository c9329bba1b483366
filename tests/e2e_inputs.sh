#!/usr/bin/env bash
# End-to-end: a directory where a file is expected is
# refused with one line naming it, and a FIFO is read to its end, for each
# whole file the command reads: the .json config, dataset_path,
# tokenizer_path (train and tokenize) and the sweep file. Before, each was
# read with malloc(ftell() + 1): a directory asked for 2^63 bytes (ASan
# aborted, a release build said "no memory") and a FIFO's content was
# ignored. Also logit-check refuses golden logits that are not
# finite or not one per vocabulary entry, which used to pass.
# Usage: e2e_inputs.sh <gemtrain> <source dir>
set -euo pipefail
bin="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d /tmp/gt_e2e_inputs.XXXXXX)
trap 'rm -rf "$work"' EXIT
tok="$src/tests/data/tokenizer_small.json"

# refuse <expected substring> <args...>: non-zero exit, exactly one line on stderr
refuse() {
  local want="$1"; shift
  set +e; "$bin" "$@" < /dev/null > "$work/out.log" 2> "$work/err.log"; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "'$*' was accepted"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$*' printed more than one error line"; }
  grep -qF -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$*' error lacks '$want'"; }
}

# 1. directories
mkdir "$work/dir.json" "$work/dir"
refuse "config: file '$work/dir.json' is a directory, expected a file" train "$work/dir.json"
refuse "data: dataset_path '$work/dir' is a directory, expected a file" \
  train model_name=gemma3-tiny dataset_type=text "dataset_path=$work/dir" steps=1 "base_output_directory=$work/out"
refuse "tokenizer: file '$work/dir' is a directory, expected a file" tokenize "tokenizer_path=$work/dir" --ids
refuse "tokenizer: file '$work/dir' is a directory, expected a file" \
  train model_name=gemma3-tiny dataset_type=text "dataset_path=$src/tests/data/tokenizer_small.json" \
  "tokenizer_path=$work/dir" steps=1 "base_output_directory=$work/out"
refuse "sweep: file '$work/dir.json' is a directory, expected a file" sweep "$work/dir.json"

# 2. FIFOs: a writer in the background, the command reads to the end
mkfifo "$work/config.json" "$work/tok.json" "$work/text.txt"
printf '{"model_name": "gemma3-tiny", "steps": 7}' > "$work/config.json" &
"$bin" train "$work/config.json" dump_config=true > "$work/dump.json" || fail "a FIFO config was refused"
grep -q '"steps":[[:space:]]*7,' "$work/dump.json" || fail "the FIFO config's steps = 7 was not applied"
grep -q '"model_name":[[:space:]]*"gemma3-tiny"' "$work/dump.json" || fail "the FIFO config's model_name was lost"

cat "$tok" > "$work/tok.json" &
ids=$(printf 'ab<x>c' | "$bin" tokenize "tokenizer_path=$work/tok.json" --ids) || fail "a FIFO tokenizer was refused"
[ "$ids" = "[7,18,5]" ] || fail "a FIFO tokenizer gave $ids, expected [7,18,5]"

# the same text through a FIFO and a regular file: the same losses
head -c 200000 "$src/data/kjv.txt" > "$work/text.file" 2>/dev/null \
  || python3 -c 'import sys; sys.stdout.write("In the beginning was the word. " * 7000)' > "$work/text.file"
cat "$work/text.file" > "$work/text.txt" &
common=(model_name=gemma3-tiny dataset_type=text steps=2 enable_checkpointing=false "base_output_directory=$work/out")
"$bin" train "${common[@]}" "dataset_path=$work/text.txt" run_name=fifo > "$work/fifo.log" 2>&1 \
  || { tail -3 "$work/fifo.log"; fail "training on a FIFO dataset_path failed"; }
"$bin" train "${common[@]}" "dataset_path=$work/text.file" run_name=file > "$work/file.log" 2>&1 \
  || { tail -3 "$work/file.log"; fail "training on the same text from a file failed"; }
loss() { sed -n 's/^completed step: \([0-9]*\),.* loss: \([0-9.]*\),.*/\1 \2/p' "$1"; }
[ -n "$(loss "$work/fifo.log")" ] || { tail -3 "$work/fifo.log"; fail "no step lines from the FIFO run"; }
[ "$(loss "$work/fifo.log")" = "$(loss "$work/file.log")" ] \
  || fail "FIFO and file runs differ: $(loss "$work/fifo.log" | tr '\n' ' ') vs $(loss "$work/file.log" | tr '\n' ' ')"
# 3. logit-check: golden logits that are NaN or infinite, or rows
# that are not the model's vocabulary, used to pass with max_kl_div alone
"$bin" convert to_hf init "$work/hf" dtype=float32 model_name=gemma3-tiny > /dev/null || fail "convert to_hf init"
python3 - "$work" <<'EOF2'
import json, sys
w = sys.argv[1]
row = [0.01 * i for i in range(260)]
def put(name, rows):
    with open(f"{w}/{name}.jsonl", "w") as f:
        f.write(json.dumps({"tokens": [2, 5], "logits": [row, row]}) + "\n")
        f.write(json.dumps({"tokens": [2, 5, 7], "logits": rows}) + "\n")
put("nan", [row, row, row[:100] + [float("nan")] + row[101:]])
put("inf", [row, row[:7] + [float("-inf")] + row[8:], row])
put("short", [row[:259]] * 3)
EOF2
check=(logit-check "load_parameters_path=$work/hf" max_kl_div=1e9)
refuse "'$work/nan.jsonl' line 2: logits[2][100] is NaN; golden logits must be finite" \
  "${check[@]}" "golden_logits_path=$work/nan.jsonl"
refuse "'$work/inf.jsonl' line 2: logits[1][7] is -Infinity; golden logits must be finite" \
  "${check[@]}" "golden_logits_path=$work/inf.jsonl"
refuse "golden rows hold 259 logits but the model's vocabulary has 260 entries" \
  "${check[@]}" "golden_logits_path=$work/short.jsonl"
wait
echo "e2e_inputs: OK"
