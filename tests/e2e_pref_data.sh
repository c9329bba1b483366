#!/usr/bin/env bash
# End-to-end, preference pairs in `gemtrain data` (use_dpo): a small
# generated file of plain and chat pairs. Checks: the description counts
# the pairs and row pairs; each row pair is shown as its pairs with the
# prompt and both sides' renderings (out of the loss in ⟦ ⟧); packing puts
# several pairs in a row pair and the counts say so; held-out pairs read
# with --eval; a bad record and an odd per_device_batch_size are refused
# naming the file and line / the key.
# Usage: e2e_pref_data.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"
work=$(mktemp -d /tmp/gt_e2e_pref_data.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

f="$work/pairs.jsonl"
for i in 0 1 2 3 4 5 6 7 8 9; do
  echo "{\"prompt\": \"Q$i: \", \"chosen\": \"good $i\", \"rejected\": \"bad $i\"}" >> "$f"
done
echo '{"chosen": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "blue"}], "rejected": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "green"}]}' >> "$f"
echo '{"prompt": [{"role": "user", "content": "Grass?"}], "chosen": [{"role": "assistant", "content": "green"}], "rejected": [{"role": "assistant", "content": "blue"}]}' >> "$f"
keys=(dataset_type=jsonl "dataset_path=$f" use_dpo=true max_target_length=96 per_device_batch_size=2
      enable_data_shuffling=false eval_split_fraction=0.25 eval_interval=10)

out=$("$bin" data --batches 5 "${keys[@]}" packing=false) || fail "data, packing=false"
grep -q "in 12 preference pairs of 1 file" <<< "$out" || fail "pair count: $out"
grep -q "9 training pairs in 9 row pairs (1.00 pairs per row pair)" <<< "$out" || fail "row pairs: $out"
grep -q "^row pair 0 (row 0 chosen, row 1 rejected): 1 pair, 7 + 6 response tokens in the loss" <<< "$out" ||
  fail "row pair line: $out"
grep -qF '  pair 1 (segment 1): prompt "<bos>Q0: "' <<< "$out" || fail "prompt: $out"
grep -qF 'chosen   row 0, columns 0..11 (out of the loss in ⟦ ⟧): "⟦<bos>Q0: ⟧good 0<eos>"' <<< "$out" ||
  fail "chosen rendering: $out"
grep -qF 'rejected row 1, columns 0..10 (out of the loss in ⟦ ⟧): "⟦<bos>Q0: ⟧bad 0<eos>"' <<< "$out" ||
  fail "rejected rendering: $out"
[ "$(grep -c '^1 pair in 1 row pair (1.00 per row pair)' <<< "$out")" = 5 ] || fail "5 batches of 1 pair: $out"

# packing: eight of the nine short training pairs fit a row pair of 97 tokens a side
out=$("$bin" data "${keys[@]}" packing=true) || fail "data, packing=true"
grep -q "9 training pairs in 2 row pairs (4.50 pairs per row pair)" <<< "$out" || fail "packed row pairs: $out"
grep -q "^row pair 0 (row 0 chosen, row 1 rejected): 8 pairs" <<< "$out" || fail "packed row pair: $out"
grep -qF 'chosen   row 0, columns 12..23 (out of the loss in ⟦ ⟧): "⟦<bos>Q1: ⟧good 1<eos>"' <<< "$out" ||
  fail "second pair's columns: $out"
grep -q "^8 pairs in 1 row pair (8.00 per row pair)" <<< "$out" || fail "packed counts: $out"

# held out: the last three records (a plain pair and the two chat forms)
out=$("$bin" data --eval --batches 2 "${keys[@]}" packing=false) || fail "data --eval"
grep -qF 'prompt "<bos><start_of_turn>user\nSky?<end_of_turn>\n<start_of_turn>model\n"' <<< "$out" ||
  fail "chat prompt: $out"
grep -qF '⟦<bos><start_of_turn>user\nSky?<end_of_turn>\n<start_of_turn>model\n⟧blue<end_of_turn>⟦\n<eos>⟧' <<< "$out" ||
  fail "chat rendering: $out"

# refusals
echo '{"prompt": "Q: ", "chosen": "same", "rejected": "same"}' >> "$f"
if err=$("$bin" data "${keys[@]}" 2>&1); then fail "identical sides accepted"; fi
grep -qF "pairs.jsonl' line 13: fields 'chosen' and 'rejected' are the same" <<< "$err" || fail "identical: $err"
if err=$("$bin" data "${keys[@]}" per_device_batch_size=3 2>&1); then fail "odd batch accepted"; fi
grep -qF "key 'per_device_batch_size' = 3" <<< "$err" || fail "odd batch: $err"
echo "e2e_pref_data OK"
