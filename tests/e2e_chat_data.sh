#!/usr/bin/env bash
# End-to-end, chat templates and a model directory as the source of truth:
# a tiny Gemma 4 exported to a Hugging Face directory (vocab_size 300) with
# a tokenizer.json whose Gemma 4 markers are added tokens
# (tests/data/tokenizer_chat_markers.json) and a chat template
# (tests/data/chat_gemma4_min.jinja without the empty-thought priming: the
# E2B/E4B variant). Checks: `gemtrain data` applies the directory's config
# as `train` does (its vocabulary, where the preset's 260 refuses the
# markers' ids; its template, not the one the dense model would get; its
# tokenizer when tokenizer_path is not set, recorded by a run for the
# run's checkpoint and decode, and byte tokens refused), and
# reads the batches train reads (the description and every batch's count of
# tokens in the loss against train's header and total_weights per step);
# the rendering marks what is out of the loss; the thought channel in and
# out of the loss; a template that is not Google's is refused by data and
# train alike naming the file and the difference, and chat_template=...
# overrides it.
# Usage: e2e_chat_data.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_chat_data.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

hf="$work/hf"
"$bin" convert to_hf init "$hf" dtype=float32 model_name=gemma4-tiny-dense vocab_size=300 init_weights_seed=3 \
  > /dev/null || fail "convert to_hf init"
cp "$src/tests/data/tokenizer_chat_markers.json" "$hf/tokenizer.json"
python3 - "$src/tests/data/chat_gemma4_min.jinja" "$hf/chat_template.jinja" <<'EOF'
import sys
t = open(sys.argv[1]).read()
prime = "{%- if not enable_thinking -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}"
assert prime in t
open(sys.argv[2], "w").write(t.replace(prime, ""))
EOF
# chat records, two of them with reasoning
chat="$work/chat.jsonl"
head -40 "$src/tests/data/sft_chat.jsonl" > "$chat"
cat >> "$chat" <<'EOF'
{"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "Two and two."}]}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of Peru?"}, {"role": "assistant", "content": "Lima", "reasoning": "Peru: Lima."}]}
EOF
sft=(dataset_type=jsonl "dataset_path=$chat" use_sft=true train_data_columns=messages "tokenizer_path=$hf/tokenizer.json"
     max_target_length=192 per_device_batch_size=4 eval_interval=-1 packing=true)

# 1. without the directory the preset's vocabulary refuses the markers
if "$bin" data model_name=gemma4-tiny-dense "${sft[@]}" > "$work/no_src.txt" 2>&1; then fail "the preset's vocab_size accepted id 260"; fi
grep -q "gives token id 26[0-9]; vocab_size = 260 must exceed every id" "$work/no_src.txt" \
  || fail "unexpected refusal: $(cat "$work/no_src.txt")"

# 2. data reads the directory's vocabulary and template (E2B/E4B's: no empty block)
"$bin" data "load_parameters_path=$hf" "${sft[@]}" enable_data_shuffling=false packing=false --batches 1 > "$work/first.txt" \
  || fail "data: $(tail -2 "$work/first.txt")"
grep -q "^sequences: chat field 'messages' (Gemma 4's chat template, thought channel in the loss); one record per row" \
  "$work/first.txt" || fail "data's sequences line: $(grep '^sequences' "$work/first.txt")"
grep -q '^  document 1 (positions 0\.\.[0-9]*): "<bos><|turn>user\\nWhat is the capital of France?<turn|>\\n<|turn>model\\nThe capital of France is Paris.<turn|>\\n"$' \
  "$work/first.txt" || fail "the first record is not Gemma 4's template: $(grep -m1 'document 1' "$work/first.txt")"
grep -q '^    rendering (out of the loss in ⟦ ⟧): "⟦<bos><|turn>user\\nWhat is the capital of France?<turn|>\\n<|turn>model\\n⟧The capital of France is Paris.<turn|>⟦\\n⟧' \
  "$work/first.txt" || fail "the rendering's mask: $(grep -m1 rendering "$work/first.txt")"
# the markers are the tokenizer's added tokens: <bos> <|turn> u s e r
grep -q '^  inputs:    2 260 121 119 105 118 ' "$work/first.txt" || fail "ids: $(grep -m1 inputs "$work/first.txt")"
"$bin" data "load_parameters_path=$hf" "${sft[@]}" --batches 3 > "$work/data.txt" || fail "data: $(tail -2 "$work/data.txt")"

# 2b. without tokenizer_path the directory's own tokenizer.json reads the
#     data (the same ids, not byte tokens) and a note says so; a run records
#     it, so data from the run's checkpoint and decode of the run read it
#     too; tokenizer_path= (byte tokens) is refused for the model's 300 ids
own=(dataset_type=jsonl "dataset_path=$chat" use_sft=true train_data_columns=messages max_target_length=192
     per_device_batch_size=4 eval_interval=-1)
note="note: tokenizer_path is not set: the data is read with the tokenizer of load_parameters_path"
"$bin" data "load_parameters_path=$hf" "${own[@]}" enable_data_shuffling=false packing=false --batches 1 > "$work/own.txt" \
  || fail "data without tokenizer_path: $(tail -2 "$work/own.txt")"
grep -q '^  inputs:    2 260 121 119 105 118 ' "$work/own.txt" || fail "not the directory's tokenizer: $(grep -m1 inputs "$work/own.txt")"
grep -qxF "$note $hf, '$hf/tokenizer.json' (tokenizer_path=FILE names another)" "$work/own.txt" \
  || fail "no note of the directory's tokenizer: $(grep -v '^ ' "$work/own.txt")"
if "$bin" data "load_parameters_path=$hf" "${own[@]}" tokenizer_path= > "$work/bytes.txt" 2>&1; then fail "byte tokens accepted for 300 ids"; fi
grep -qxF "gemtrain: data: dataset_type 'jsonl' without tokenizer_path is read as byte tokens (260 ids), but vocab_size = 300: the model's vocabulary is another; set tokenizer_path to the model's tokenizer.json (byte tokens need vocab_size = 260)" \
  "$work/bytes.txt" || fail "byte tokens' refusal: $(cat "$work/bytes.txt")"
"$bin" train "load_parameters_path=$hf" "${own[@]}" steps=1 sample_tokens=0 "base_output_directory=$work/runs" run_name=own \
  > "$work/own_train.log" 2>&1 || fail "train without tokenizer_path: $(tail -3 "$work/own_train.log")"
grep -qxF "$note $hf, '$hf/tokenizer.json' (tokenizer_path=FILE names another)" "$work/own_train.log" \
  || fail "train's header has no note of the tokenizer"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["tokenizer_path"]; assert v == sys.argv[2], v' \
  "$work/runs/own/config.json" "$hf/tokenizer.json" || fail "the run's config does not record the directory's tokenizer"
"$bin" data "load_parameters_path=$work/runs/own" "${own[@]}" enable_data_shuffling=false packing=false --batches 1 \
  > "$work/own_ckpt.txt" || fail "data from the run: $(tail -2 "$work/own_ckpt.txt")"
grep -q '^  inputs:    2 260 121 119 105 118 ' "$work/own_ckpt.txt" || fail "the run's tokenizer not used from its checkpoint"
grep -qxF "$note $work/runs/own, '$hf/tokenizer.json' (tokenizer_path=FILE names another)" "$work/own_ckpt.txt" \
  || fail "no note of the run's tokenizer: $(grep '^note' "$work/own_ckpt.txt")"
"$bin" decode "load_parameters_path=$work/runs/own" prompt=Hi max_decode_steps=1 > "$work/own_dec.txt" 2>&1 \
  || fail "decode of the run: $(tail -2 "$work/own_dec.txt")"
grep -qxF "tokenizer: $hf/tokenizer.json (the run's)" "$work/own_dec.txt" || fail "decode: $(grep -m1 '^tokenizer' "$work/own_dec.txt")"

# 3. train reads the same batches: the same description, and per step the
#    tokens in the loss data counts
"$bin" train "load_parameters_path=$hf" "${sft[@]}" steps=3 sample_tokens=0 enable_checkpointing=false \
  "base_output_directory=$work/runs" run_name=chat > "$work/train.log" 2>&1 || fail "train: $(tail -3 "$work/train.log")"
for key in data sequences order; do
  [ "$(grep -m1 "^$key: " "$work/data.txt")" = "$(grep -m1 "^$key: " "$work/train.log")" ] \
    || fail "data and train describe '$key' differently: $(grep -m1 "^$key: " "$work/data.txt") / $(grep -m1 "^$key: " "$work/train.log")"
done
python3 - "$work/data.txt" "$work/runs/chat/metrics.jsonl" <<'EOF' || fail "data's batches are not train's"
import json, re, sys
data = [int(m.group(1)) for m in re.finditer(r"^batch \d+, .*, (\d+) in the loss$", open(sys.argv[1]).read(), re.M)]
train = [json.loads(l)["total_weights"] for l in open(sys.argv[2])]
print(f"e2e_chat_data: tokens in the loss per batch, data {data}, train {train}")
assert len(data) == 3 and data == train, (data, train)
EOF

# 4. the thought channel: in the loss by default, out with sft_train_on_thinking=false
thought='<|channel>thought\\nTwo and two.\\n<channel|>4<turn|>'
"$bin" data "load_parameters_path=$hf" "${sft[@]}" packing=false enable_data_shuffling=false --batches 11 > "$work/on.txt"
grep -q "^    predicted in the loss: \"$thought\"$" "$work/on.txt" || fail "the thought channel is not in the loss"
"$bin" data "load_parameters_path=$hf" "${sft[@]}" packing=false enable_data_shuffling=false sft_train_on_thinking=false \
  --batches 11 > "$work/off.txt"
grep -q '^    predicted in the loss: "4<turn|>"$' "$work/off.txt" || fail "the thought channel is in the loss"
grep -q "^sequences: .*thought channel out of the loss" "$work/off.txt" || fail "off: $(grep '^sequences' "$work/off.txt")"

# 5. without the directory's template the dense model's own applies: the
#    larger models' empty thought block opens each model turn
mv "$hf/chat_template.jinja" "$work/saved.jinja"
"$bin" data "load_parameters_path=$hf" "${sft[@]}" enable_data_shuffling=false packing=false --batches 1 > "$work/dense.txt"
grep -q '<|turn>model\\n<|channel>thought\\n<channel|>⟧The capital of France is Paris.<turn|>' "$work/dense.txt" \
  || fail "no empty thought block: $(grep -m1 rendering "$work/dense.txt")"

# 6. a template that is not Google's: refused alike by data and train, naming
#    the file and the difference; chat_template=... renders without it
printf '%s\n' "{% for m in messages %}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>\n{% endfor %}" > "$hf/chat_template.jinja"
if "$bin" data "load_parameters_path=$hf" "${sft[@]}" > "$work/bad.txt" 2>&1; then fail "data accepted a foreign template"; fi
if "$bin" train "load_parameters_path=$hf" "${sft[@]}" steps=1 "base_output_directory=$work/runs" run_name=bad \
  > "$work/bad_train.txt" 2>&1; then fail "train accepted a foreign template"; fi
want="$hf/chat_template.jinja' is not Google's Gemma 4 chat template: it lacks"
grep -q "$want" "$work/bad.txt" || fail "data's refusal: $(cat "$work/bad.txt")"
grep -q "$want" "$work/bad_train.txt" || fail "train's refusal: $(cat "$work/bad_train.txt")"
[ ! -d "$work/runs/bad" ] || fail "a refused run left its directory"
"$bin" data "load_parameters_path=$hf" "${sft[@]}" enable_data_shuffling=false packing=false chat_template=gemma4_small --batches 1 > "$work/override.txt" \
  || fail "chat_template=gemma4_small: $(tail -1 "$work/override.txt")"
grep -q '<|turn>model\\n⟧The capital of France is Paris.<turn|>' "$work/override.txt" || fail "override rendering"
echo "e2e_chat_data: ok"
