#!/usr/bin/env bash
# End-to-end: a tiny model fine-tuned on four chat records (written here)
# with the Gemma 3 tokenizer answers as a chat and stops at the end of its
# turn.
#  1. SFT (use_sft, chat messages): no end-of-run sample by default.
#  2. `decode chat=true`: the prompt as one user turn of Gemma 3's template;
#     the reply is the trained answer and the last token is <end_of_turn>
#     (id 106 in the Gemma 3 tokenizer), well before max_decode_steps.
#  3. stop strings end the reply before them (the earlier-reached of a list).
#  4. messages_path: each record answered; a record that ends with the
#     model's turn is answered without it and that turn shown as reference.
#  5. --interactive: turns from standard input; the conversation grows (the
#     second turn's prompt is as long as the same three messages from a file).
#  6. sample_at_end=on: the SFT run's sample answers sample_prompt as a user
#     turn.
# Usage: e2e_chat.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_chat.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tok="$src/data/tokenizers/gemma3/tokenizer.json"
[ -s "$tok" ] || fail "missing $tok: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)"
cat > "$work/chat.jsonl" <<'EOF'
{"messages": [{"role": "user", "content": "What is the capital of France?"}, {"role": "assistant", "content": "Paris."}]}
{"messages": [{"role": "user", "content": "What colour is the sky?"}, {"role": "assistant", "content": "Blue."}]}
{"messages": [{"role": "user", "content": "How many legs has a cat?"}, {"role": "assistant", "content": "Four."}]}
{"messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello!"}]}
EOF

# 1. fine-tune (a Gemma-vocabulary model of 2 small layers: 262144 rows)
model=(model_name=gemma3-tiny vocab_size=262144 base_num_decoder_layers=2 layer_pattern=LG)
"$bin" train "${model[@]}" dataset_type=jsonl "dataset_path=$work/chat.jsonl" use_sft=true train_data_columns=messages \
  "tokenizer_path=$tok" max_target_length=32 per_device_batch_size=4 packing=false steps=20 learning_rate=0.02 \
  warmup_steps_fraction=0.1 eval_interval=-1 "base_output_directory=$work/runs" run_name=sft > "$work/train.log" 2>&1 \
  || { tail -3 "$work/train.log"; fail "SFT training"; }
grep -q '^sample (' "$work/train.log" && fail "an SFT run printed a sample without sample_at_end=on"
run=("load_parameters_path=$work/runs/sft")

# 2. one user turn
"$bin" decode "${run[@]}" chat=true "prompt=What is the capital of France?" max_decode_steps=40 --ids > "$work/d.log" \
  || fail "decode chat=true"
grep -qx 'output: Paris\.' "$work/d.log" || { cat "$work/d.log"; fail "the reply is not the trained answer"; }
grep -Eq '^generate: [0-9]+ tokens in .* \(stopped at the end of turn\)$' "$work/d.log" || fail "did not stop at the end of turn"
grep -Eq '^ids: \[([0-9]+, ){1,8}106\]$' "$work/d.log" || { grep '^ids' "$work/d.log"; fail "the last id is not <end_of_turn> (106)"; }

# 3. stop strings: a JSON list, over two records of a messages file
printf '%s\n' '{"messages": [{"role": "user", "content": "What is the capital of France?"}]}' \
  '{"messages": [{"role": "user", "content": "Say hello."}]}' > "$work/two.jsonl"
"$bin" decode "${run[@]}" "messages_path=$work/two.jsonl" 'stop=["lo!", "."]' > "$work/s.log" || fail "a stop list"
[ "$(grep '^output: \|^generate: ' "$work/s.log" | sed 's/^generate: .*(/(/' | tr '\n' '|')" = \
  "(stopped at stop string 2)|output: Paris|(stopped at stop string 1)|output: Hel|" ] \
  || { cat "$work/s.log"; fail "the stop strings did not end the replies before them"; }

# 4. a messages file
cat > "$work/q.jsonl" <<'EOF'
{"messages": [{"role": "user", "content": "How many legs has a cat?"}, {"role": "assistant", "content": "Four."}]}

{"messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "What colour is the sky?"}]}
EOF
"$bin" decode "${run[@]}" "messages_path=$work/q.jsonl" > "$work/m.log" || { cat "$work/m.log"; fail "messages_path"; }
grep -qx -- "--- '$work/q.jsonl' line 1: 1 message ---" "$work/m.log" || fail "record 1 header"
grep -qx -- "--- '$work/q.jsonl' line 3: 3 messages ---" "$work/m.log" || fail "record 3 header"
[ "$(grep -c '(stopped at the end of turn)$' "$work/m.log")" = 2 ] || fail "both records stop at the end of turn"
[ "$(grep '^output: \|^reference: ' "$work/m.log" | tr '\n' '|')" = "output: Four.|reference: Four.|output: Blue.|" ] \
  || { cat "$work/m.log"; fail "messages_path replies"; }
three=$(sed -n '/line 3: 3 messages/,$p' "$work/m.log" | sed -n 's/^prefill: \([0-9]*\) tokens.*/\1/p')

# 5. interactive: the second turn's prompt holds the first turn and its reply
printf 'Say hello.\nWhat colour is the sky?\n' | "$bin" decode "${run[@]}" --interactive > "$work/i.log" 2> "$work/i.err" \
  || { cat "$work/i.err"; fail "--interactive"; }
[ "$(tail -n 2 "$work/i.log" | tr '\n' '|')" = "Hello!|Blue.|" ] || { cat "$work/i.log"; fail "interactive replies"; }
[ "$(grep '^prefill: ' "$work/i.err" | sed -n 2p | sed -n 's/^prefill: \([0-9]*\) tokens (the conversation so far).*/\1/p')" = "$three" ] \
  || { cat "$work/i.err"; fail "the second turn's prompt is not the whole conversation ($three tokens)"; }

# 6. the end-of-run sample of an SFT run, when asked (lr 0: the model above)
"$bin" train "${run[@]}" dataset_type=jsonl "dataset_path=$work/chat.jsonl" use_sft=true train_data_columns=messages \
  "tokenizer_path=$tok" max_target_length=32 per_device_batch_size=4 packing=false steps=1 learning_rate=0 \
  eval_interval=-1 enable_checkpointing=false sample_at_end=on "sample_prompt=What colour is the sky?" \
  "base_output_directory=$work/runs" run_name=sample > "$work/t2.log" 2>&1 || { tail -3 "$work/t2.log"; fail "sample run"; }
[ "$(sed -n '/^sample (/,$p' "$work/t2.log" | tail -n +2 | sed '/^run_name=/,$d' | tr '\n' '|')" = "user: What colour is the sky?|model: Blue.|" ] \
  || { sed -n '/^sample (/,$p' "$work/t2.log"; fail "the SFT sample is not a chat answer"; }
echo "e2e_chat: 1 passed, 0 failed"
