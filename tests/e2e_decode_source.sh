#!/usr/bin/env bash
# End-to-end: what `gemtrain decode` and `logit-check` take from the model
# they load.
#  1. The tokenizer: a run trained with tokenizer_path decodes through that
#     tokenizer without naming it again (the same ids and text as naming it;
#     byte tokens, tokenizer_path=, refused for its 262144 ids); a tokenizer the run
#     names but that is gone is refused, naming it; an HF directory's own
#     tokenizer.json is used.
#  2. An HF directory's config: a model exported with keys unlike the preset
#     (window 8 over 40 tokens, soft-cap, 4 layers) is fine-tuned for one step
#     at learning_rate=0 (the parameters stay the HF ones), so the run's
#     checkpoint holds the config `train` resolved from the directory. The
#     directory and the checkpoint give the same logits to the bit in
#     logit-check (max_kl_div=0 atol=0, both ways) and the same greedy ids in
#     decode: decode and logit-check resolve the directory as train does.
# Usage: e2e_decode_source.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_decode_source.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tok="$src/data/tokenizers/gemma3/tokenizer.json"
[ -s "$tok" ] || fail "missing $tok: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)"
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 20000 "$work/kjv.txt" > "$work/corpus.txt"
cp "$tok" "$work/tok.json"
ids() { sed -n 's/^ids: //p' "$1"; }

# 1. the tokenizer of the run (a small Gemma-vocabulary model: 262144 rows)
"$bin" train model_name=gemma3-tiny vocab_size=262144 base_num_decoder_layers=2 layer_pattern=LG dataset_type=text \
  "dataset_path=$work/corpus.txt" "tokenizer_path=$work/tok.json" max_target_length=32 per_device_batch_size=1 \
  steps=2 eval_interval=-1 sample_tokens=0 "base_output_directory=$work/runs" run_name=tok > "$work/train.log" 2>&1 \
  || { tail -3 "$work/train.log"; fail "training with tokenizer_path"; }
dec=(decode "load_parameters_path=$work/runs/tok" "prompt=And God said" max_decode_steps=6 --ids)
"$bin" "${dec[@]}" > "$work/run.log" || fail "decode of the run"
grep -qx "tokenizer: $work/tok.json (the run's)" "$work/run.log" || { cat "$work/run.log"; fail "tokenizer line"; }
# <bos> + 3 Gemma tokens ("And", " God", " said"), not 13 byte tokens
grep -q '^prefill: 4 tokens' "$work/run.log" || { cat "$work/run.log"; fail "the prompt is not Gemma tokens"; }
"$bin" "${dec[@]}" "tokenizer_path=$work/tok.json" > "$work/named.log" || fail "decode naming the tokenizer"
[ "$(ids "$work/run.log")" = "$(ids "$work/named.log")" ] || fail "the run's tokenizer gives other ids than naming it"
[ "$(grep '^output: ' "$work/run.log")" = "$(grep '^output: ' "$work/named.log")" ] || fail "other text"
# byte tokens (tokenizer_path=) are for a model of 260 ids: this one's are Gemma's
set +e; "$bin" "${dec[@]}" tokenizer_path= > /dev/null 2> "$work/bytes.err"; rc=$?; set -e
[ $rc = 2 ] || fail "byte tokens with a 262144-id model gave exit $rc"
grep -q "byte tokens (260 ids), but the model's vocab_size is 262144: .*set tokenizer_path" "$work/bytes.err" \
  || { cat "$work/bytes.err"; fail "byte tokens with a 262144-id model: no refusal naming tokenizer_path"; }
mv "$work/tok.json" "$work/moved.json"
set +e; "$bin" "${dec[@]}" > /dev/null 2> "$work/err.log"; rc=$?; set -e
[ $rc = 2 ] || fail "a missing tokenizer gave exit $rc"
grep -q "the tokenizer that the checkpoint .* names (its config's tokenizer_path) ($work/tok.json) cannot be used" \
  "$work/err.log" && grep -q "set tokenizer_path to its file" "$work/err.log" || { cat "$work/err.log"; fail "missing tokenizer message"; }

# 2. an HF directory (with its tokenizer.json) resolved as train resolves it
model=(model_name=gemma3-tiny base_num_decoder_layers=4 layer_pattern=LLLG sliding_window_size=8
       final_logits_soft_cap=30 init_weights_seed=5)
"$bin" convert to_hf init "$work/hf" dtype=float32 init_norm_std=0.1 "${model[@]}" > /dev/null || fail "convert"
"$bin" train "load_parameters_path=$work/hf" learning_rate=0 steps=1 dataset_type=text "dataset_path=$work/corpus.txt" \
  max_target_length=40 per_device_batch_size=1 eval_interval=-1 sample_tokens=0 "base_output_directory=$work/runs" \
  run_name=hf > "$work/hftrain.log" 2>&1 || { tail -3 "$work/hftrain.log"; fail "training from the HF directory"; }
grep -Eq '"sliding_window_size":[[:space:]]+8,' "$work/runs/hf/config.json" || fail "train did not take the directory's window"
golden="$src/tests/data/hf_tiny_golden.jsonl" # its tokens (40 per sequence); its logits are another model's
"$bin" logit-check "load_parameters_path=$work/runs/hf" "golden_logits_path=$golden" max_kl_div=1e30 \
  "output_logits_path=$work/ckpt.jsonl" > /dev/null || fail "logit-check of the checkpoint"
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$work/ckpt.jsonl" max_kl_div=0 atol=0 \
  "output_logits_path=$work/hf.jsonl" > "$work/lc.log" || { tail -2 "$work/lc.log"; fail "the HF directory's logits differ from train's model"; }
grep -q "^logit-check: $work/hf (hf:hf): 4 layers (pattern LLLG, window 8)" "$work/lc.log" || fail "logit-check line"
cmp -s "$work/ckpt.jsonl" "$work/hf.jsonl" || fail "the logits written differ"
for p in "$work/hf" "$work/runs/hf"; do
  "$bin" decode "load_parameters_path=$p" "prompt=In the beginning God created" max_decode_steps=30 --ids > "$work/d.log" \
    || fail "decode $p"
  ids "$work/d.log" >> "$work/ids.txt"
done
[ "$(sed -n 1p "$work/ids.txt")" = "$(sed -n 2p "$work/ids.txt")" ] || fail "decode of the directory and of train's checkpoint differ"
# the directory's own tokenizer (a drop-in HF directory carries one); its
# model has 260 rows, so the Gemma prompt's ids are refused by name
cp "$work/moved.json" "$work/hf/tokenizer.json"
set +e; "$bin" decode "load_parameters_path=$work/hf" prompt=Hello > "$work/o.log" 2> "$work/err.log"; rc=$?; set -e
grep -qx "tokenizer: $work/hf/tokenizer.json (the model directory's)" "$work/o.log" || { cat "$work/o.log"; fail "HF tokenizer.json not used"; }
[ $rc = 2 ] && grep -q "outside the model's vocab_size 260; the tokenizer is not the model's" "$work/err.log" \
  || { cat "$work/err.log"; fail "a tokenizer larger than the model was not refused"; }
echo "e2e_decode_source: 1 passed, 0 failed"
