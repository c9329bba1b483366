#!/usr/bin/env bash
# End-to-end supervised fine-tuning: a tiny model exported to a Hugging Face
# directory (`gemtrain convert to_hf init`, as e2e_hf.sh) is fine-tuned with
# load_parameters_path on chat records (tests/data/sft_chat.jsonl, Gemma's
# chat template, loss on the model turns only). Checks: `gemtrain data`
# puts exactly the model turns' tokens in the loss (counted independently
# in python from the JSON), the run starts from the HF parameters, and the
# completion loss falls (train and held-out eval).
# Usage: e2e_sft.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_sft.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
chat="$src/tests/data/sft_chat.jsonl"

"$bin" convert to_hf init "$work/hf" dtype=float32 model_name=gemma3-tiny init_weights_seed=7 > /dev/null \
  || fail "convert to_hf init"
sft=(dataset_type=jsonl "dataset_path=$chat" use_sft=true train_data_columns=messages max_target_length=256
     per_device_batch_size=8)

# 1. the loss mask: the first 8 records (file order, one per row) put each
#    model turn's content and its <end_of_turn> (13 byte tokens) in the loss
"$bin" data model_name=gemma3-tiny "${sft[@]}" packing=false enable_data_shuffling=false > "$work/data.txt" \
  || { cat "$work/data.txt"; fail "gemtrain data"; }
want=$(python3 - "$chat" <<'EOF'
import json, sys
n = 0
for line in open(sys.argv[1]).readlines()[:8]:
    for m in json.loads(line)["messages"]:
        if m["role"] == "assistant":
            n += len(m["content"].strip().encode()) + len("<end_of_turn>")
print(n)
EOF
)
grep -q "^batch 0, epoch 0, row 0 of [0-9]* (next: '$chat', token 0): 8 rows x 256 tokens, $want in the loss$" "$work/data.txt" \
  || { grep '^batch' "$work/data.txt"; fail "batch 0 should have $want tokens in the loss"; }
grep -q '^sequences: chat field .messages. (Gemma.s chat template); one record per row' "$work/data.txt" \
  || fail "no sequences line: $(sed -n 2p "$work/data.txt")"
grep -q '^  document 1 (positions 0\.\.[0-9]*): "<bos><start_of_turn>user\\nWhat is the capital of France?<end_of_turn>\\n<start_of_turn>model\\nThe capital of France is Paris.<end_of_turn>\\n"$' "$work/data.txt" \
  || { sed -n 1,20p "$work/data.txt"; fail "the first record is not Gemma's chat template"; }
grep -q '^    predicted in the loss: "The capital of France is Paris.<end_of_turn>"$' "$work/data.txt" \
  || fail "the first record's loss is not its model turn"

# 2. fine-tune from the HF directory; the completion loss falls
"$bin" train "${sft[@]}" "load_parameters_path=$work/hf" steps=60 learning_rate=0.005 warmup_steps_fraction=0.05 \
  eval_interval=20 eval_steps=2 eval_split_fraction=0.1 sample_tokens=0 enable_checkpointing=false \
  "base_output_directory=$work/runs" run_name=sft > "$work/train.log" 2>&1 \
  || { tail -5 "$work/train.log"; fail "SFT training failed"; }
grep -q "^loaded parameters from $work/hf (load_parameters_path, a Hugging Face directory); optimizer and data start fresh" \
  "$work/train.log" || { head -5 "$work/train.log"; fail "did not start from the HF directory"; }
python3 - "$work/runs/sft/metrics.jsonl" <<'EOF' || fail "the completion loss did not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loss = [r["loss"] for r in rows]
ev = [r["eval_loss"] for r in rows if "eval_loss" in r]
first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
print(f"e2e_sft: train loss {first:.3f} -> {last:.3f}, eval loss {' -> '.join(f'{x:.3f}' for x in ev)}")
assert len(rows) == 60 and len(ev) == 3
assert last < 0.5 * first, (first, last)
assert ev[-1] < ev[0] and ev[-1] < 0.6 * first, ev
# every step's weights are model-turn tokens only: fewer than 8 rows of 256
assert all(0 < r["total_weights"] < 8 * 256 / 2 for r in rows)
EOF
echo "e2e_sft: ok"
