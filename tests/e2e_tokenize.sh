#!/usr/bin/env bash
# End-to-end: `gemtrain tokenize` with the real Gemma 3 tokenizer.json turns a
# text into .gtok shards that `gemtrain train dataset_type=tokens` reads and
# trains on, and on the same text `dataset_type=text tokenizer_path=...` makes
# the same token stream (same losses, bit for bit); `--ids` prints the golden
# ids of tests/data/tokenizer_golden.json (made by tools/tokenizer_golden.mjs
# with the reference tokenizers) and `--decode` gives the text back; bad
# input is refused with one line; a shard records its tokenizer's id count,
# and byte-token shards are refused under the Gemma tokenizer and by a
# Gemma-vocabulary model. Usage: e2e_tokenize.sh <gemtrain> <source dir>
set -euo pipefail
bin="$1"; src="$2"
tok="$src/data/tokenizers/gemma3/tokenizer.json"
fail() { echo "FAIL: $*"; exit 1; }
[ -s "$tok" ] || fail "missing $tok: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)"
work=$(mktemp -d /tmp/gt_e2e_tokenize.XXXXXX)
trap 'rm -rf "$work"' EXIT

# a corpus with prose, code, tabs, CJK, emoji and whitespace runs, in two files
python3 - "$src/tests/data/tokenizer_golden.json" "$work" <<'EOF'
import json, sys
g = json.load(open(sys.argv[1]))
# <image_soft_token> is id 262144, beyond a 262144-row embedding
texts = [c["text"] for c in g["cases"] if "text_hex" not in c and "<image_soft_token>" not in c["text"]]
with open(sys.argv[2] + "/a.txt", "w") as f: f.write("\n".join(texts[:80]) * 3)
with open(sys.argv[2] + "/b.txt", "w") as f: f.write("\n".join(texts[80:]) * 3)
code_tabs = [c for c in g["cases"] if c["name"] == "code_tabs"][0]
open(sys.argv[2] + "/code_tabs.txt", "w").write(code_tabs["text"])
open(sys.argv[2] + "/code_tabs.ids", "w").write(json.dumps(code_tabs["ids"], separators=(",", ":")) + "\n")
EOF

# shards: several of 700 tokens, <bos> doc <eos> per file
"$bin" tokenize "tokenizer_path=$tok" "output_path=$work/shards" shard_tokens=700 "$work/a.txt" "$work/b.txt" \
  2> "$work/tok.log" || { cat "$work/tok.log"; fail "tokenize failed"; }
grep -q '^tokenize: .* MB (100%), [0-9]* tokens, [0-9]* tokens/s, ETA [0-9]*:[0-9][0-9]$' "$work/tok.log" \
  || { cat "$work/tok.log"; fail "no progress line"; }
n_shards=$(ls "$work/shards"/*.gtok | wc -l)
[ "$n_shards" -ge 3 ] || fail "expected several shards of 700 tokens, got $n_shards"
n_tok=$(sed -n 's/^tokenize: wrote [0-9]* shards (\([0-9]*\) tokens).*/\1/p' "$work/tok.log")
[ -n "$n_tok" ] || fail "no summary line"

# the data module reads the shards: train a few steps of a 262144-token model
common=(model_name=gemma3-tiny vocab_size=262144 steps=3 max_target_length=32 per_device_batch_size=2
        eval_interval=-1 "base_output_directory=$work/runs")
"$bin" train "${common[@]}" dataset_type=tokens "dataset_path=$work/shards" sample_tokens=0 run_name=shards \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "train on the shards failed"; }
grep -q "^data: tokens '$work/shards', $n_tok tokens" "$work/train.log" \
  || { cat "$work/train.log"; fail "train did not read the $n_tok tokens of the shards"; }
[ "$(wc -l < "$work/runs/shards/metrics.jsonl")" = 3 ] || fail "three steps expected"

# dataset_type=text with tokenizer_path: <bos> + the file's ids, which are the
# shards of the same file made with add_eos=false: the same stream, the same losses
"$bin" tokenize "tokenizer_path=$tok" "output_path=$work/one" add_eos=false "$work/a.txt" 2> /dev/null
"$bin" train "${common[@]}" dataset_type=tokens "dataset_path=$work/one" sample_tokens=0 run_name=one > /dev/null 2>&1
"$bin" train "${common[@]}" dataset_type=text "dataset_path=$work/a.txt" "tokenizer_path=$tok" sample_tokens=4 \
  run_name=text > "$work/text.log" 2>&1 || { cat "$work/text.log"; fail "train with tokenizer_path failed"; }
grep -q '^sample (4 tokens after the prompt):' "$work/text.log" || { cat "$work/text.log"; fail "no sample"; }
# decode with the tokenizer reproduces the training process's sample (same
# sampler: temperature 0.7, seed 0x5EED0000 + init_weights_seed, default prompt)
prompt=$("$bin" train "${common[@]}" dump_config=true | python3 -c 'import json,sys; print(json.load(sys.stdin)["sample_prompt"])')
"$bin" decode "load_parameters_path=$work/runs/text" "tokenizer_path=$tok" "prompt=$prompt" max_decode_steps=4 \
  decode_sampling_strategy=weighted decode_sampling_temperature=0.7 decode_seed=$((0x5EED0000)) > "$work/dec.log" 2>&1 \
  || { cat "$work/dec.log"; fail "decode with tokenizer_path failed"; }
got=$(sed -n '/^output: /,$p' "$work/dec.log" | sed '1s/^output: //')
want=$(sed -n '/^sample (/,$p' "$work/text.log" | tail -n +2 | sed '/^run_name=/,$d') # the run's closing line follows
[ "$got" = "$want" ] || fail "decode with the tokenizer gave '$got', the training sample is '$want'"
cut -d, -f2 "$work/runs/one/metrics.jsonl" > "$work/l1"
cut -d, -f2 "$work/runs/text/metrics.jsonl" > "$work/l2"
cmp -s "$work/l1" "$work/l2" || fail "text with tokenizer_path and its shards give different losses"

# --ids equals the golden ids; --decode gives the text back byte for byte
"$bin" tokenize "tokenizer_path=$tok" --ids < "$work/code_tabs.txt" > "$work/got.ids"
cmp -s "$work/got.ids" "$work/code_tabs.ids" || { diff "$work/got.ids" "$work/code_tabs.ids"; fail "--ids differs from the golden ids"; }
"$bin" tokenize "tokenizer_path=$tok" --ids add_bos=true < "$work/code_tabs.txt" | grep -q '^\[2,' \
  || fail "--ids add_bos=true does not start with <bos>"
"$bin" tokenize "tokenizer_path=$tok" --decode < "$work/got.ids" > "$work/back.txt"
cmp -s "$work/back.txt" "$work/code_tabs.txt" || fail "--decode does not give the text back"
printf 'caf\xc3 \xff\xfe <start_of_turn>\n' > "$work/bad.txt" # invalid UTF-8 round-trips too
"$bin" tokenize "tokenizer_path=$tok" --ids < "$work/bad.txt" | "$bin" tokenize "tokenizer_path=$tok" --decode > "$work/bad_back.txt"
cmp -s "$work/bad.txt" "$work/bad_back.txt" || fail "invalid UTF-8 does not round-trip"

# refusals: one line, non-zero exit
refuse() { # expected-substring args...
  local want="$1"; shift
  set +e; "$bin" tokenize "$@" < /dev/null > "$work/out.log" 2> "$work/err.log"; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "'$*' was accepted"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$*' printed more than one error line"; }
  grep -q -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$*' error lacks '$want'"; }
}
refuse "'tokenizer_path' is required" --ids
refuse "file '$work/none.json' cannot be opened" "tokenizer_path=$work/none.json" --ids
echo '{"model": {"type": "WordPiece"}}' > "$work/wp.json"
refuse "model type 'WordPiece' is not supported" "tokenizer_path=$work/wp.json" --ids
refuse "already holds .gtok shards" "tokenizer_path=$tok" "output_path=$work/shards" "$work/a.txt"
refuse "unknown key 'shard_token'" "tokenizer_path=$tok" "output_path=$work/x" shard_token=5 "$work/a.txt"
refuse "'$work/missing.txt' is not a readable file" "tokenizer_path=$tok" "output_path=$work/y" "$work/missing.txt"
# an empty input (a 0-token shard, or <bos><eos> alone) and a JSON Lines
# file of no records: refused naming the file, no shard written
: > "$work/empty.txt"
printf '\n\n' > "$work/blank.jsonl"
refuse "input '$work/empty.txt' is empty (0 bytes)" "tokenizer_path=$tok" "output_path=$work/e1" "$work/a.txt" "$work/empty.txt"
refuse "'$work/blank.jsonl' holds no records" "tokenizer_path=$tok" "output_path=$work/e2" "$work/blank.jsonl"
! ls "$work/e1" "$work/e2" 2>/dev/null | grep -q gtok || fail "a refused empty input wrote a shard"
echo '[1, "a"]' > "$work/notids.json"
set +e; "$bin" tokenize "tokenizer_path=$tok" --decode < "$work/notids.json" 2> "$work/err.log"; rc=$?; set -e
[ $rc -ne 0 ] && grep -q "JSON array of integer ids" "$work/err.log" || fail "--decode accepted a non-id array"
set +e; "$bin" train model_name=gemma3-tiny dataset_type=text "dataset_path=$work/a.txt" "tokenizer_path=$tok" \
  steps=1 max_target_length=32 "base_output_directory=$work/runs" > /dev/null 2> "$work/err.log"; rc=$?; set -e
[ $rc -ne 0 ] && grep -q "vocab_size = 260 must exceed every id" "$work/err.log" \
  || { cat "$work/err.log"; fail "a vocab_size smaller than the tokenizer's ids was accepted"; }
# a shard's header records its tokenizer's id count (262145 for Gemma 3's;
# 260 for byte tokens): byte-token shards are refused by a run with the Gemma
# tokenizer, and by a Gemma-vocabulary model without one, naming the shard
"$bin" tokenize "output_path=$work/bytes" "$work/a.txt" 2> /dev/null
od -An -tu4 -j12 -N4 "$work/bytes/shard-00000.gtok" | grep -qw 260 || fail "byte shards do not record 260"
od -An -tu4 -j12 -N4 "$work/one/shard-00000.gtok" | grep -qw 262145 || fail "Gemma 3 shards do not record 262145"
set +e; "$bin" train "${common[@]}" dataset_type=tokens "dataset_path=$work/bytes" "tokenizer_path=$tok" run_name=b1 \
  > /dev/null 2> "$work/err.log"; rc=$?; set -e
[ $rc -ne 0 ] && grep -qF "data: shard '$work/bytes/shard-00000.gtok' records vocab_size 260 in its header (byte tokens, written without tokenizer_path), but tokenizer_path '$tok' has 262145 ids" "$work/err.log" \
  || { cat "$work/err.log"; fail "byte shards read with the Gemma tokenizer"; }
set +e; "$bin" train "${common[@]}" dataset_type=tokens "dataset_path=$work/bytes" run_name=b2 > /dev/null 2> "$work/err.log"; rc=$?; set -e
[ $rc -ne 0 ] && grep -qF "data: shard '$work/bytes/shard-00000.gtok' holds byte tokens (vocab_size 260 in its header: written without tokenizer_path), but vocab_size = 262144" "$work/err.log" \
  || { cat "$work/err.log"; fail "byte shards read by a Gemma-vocabulary model"; }
echo "e2e_tokenize: ok ($n_shards shards, $n_tok tokens)"
