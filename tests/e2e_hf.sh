#!/usr/bin/env bash
# End-to-end: a seeded random gemma3-tiny exported by `gemtrain convert to_hf`
# is byte-identical to the export the committed golden logits were made from
# (tests/data/hf_tiny_export.sha256), and `gemtrain logit-check` passes
# against those logits (from tools/ref_hf_logits.py, an independent float64
# PyTorch implementation; see tests/data/README.md) with max_kl_div=1e-6; a
# perturbed golden file fails. Also: from_hf -> to_hf is byte-identical,
# sharded and BF16 exports load, `gemtrain train` starts from an HF directory,
# an export over an earlier one leaves no file of the earlier one a loader
# could take, a Gemma 3 262144-token table keeps the rows of the HF table it
# came from (262144 or 262208), the export of from_hf's output copies the
# HF directory's tokenizer files and generation_config.json, and bad input
# is refused with one line. No
# torch needed.
# Usage: e2e_hf.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_hf.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
golden="$src/tests/data/hf_tiny_golden.jsonl"
# the fixture's model: see tests/data/README.md
model=(model_name=gemma3-tiny init_weights_seed=7)

"$bin" convert to_hf init "$work/hf" dtype=float32 init_norm_std=0.1 "${model[@]}" > "$work/convert.txt"
grep -q 'embedding 260 rows' "$work/convert.txt" || fail "convert output: $(cat "$work/convert.txt")"
(cd "$work/hf" && sha256sum --quiet -c "$src/tests/data/hf_tiny_export.sha256") \
  || fail "the export differs from the one the golden logits were made from"

# 1. the checker passes against the reference, and writes our logits
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$golden" max_kl_div=1e-6 atol=1e-4 \
  "output_logits_path=$work/ours.jsonl" > "$work/check.txt" || fail "logit-check failed: $(tail -3 "$work/check.txt")"
grep -q '^logit-check: 2 sequences, 80 tokens: .*: PASS$' "$work/check.txt" || fail "no PASS line"
grep -q "^logit-check: $work/hf (hf:hf): 6 layers (pattern LLLLLG, window 16)" "$work/check.txt" \
  || fail "the model line does not name the HF directory: $(head -1 "$work/check.txt")"
grep -q 'overlap_count 10/10, jaccard_similarity 1.0000, rank_agreement_percentage 100.0' "$work/check.txt" \
  || fail "top-10 tokens disagree"
[ "$(grep -c '^\[KL divergence\] per token' "$work/check.txt")" = 2 ] || fail "per-token KL not printed"
# our own logits, read back as a golden file: zero difference
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$work/ours.jsonl" max_kl_div=0 atol=0 \
  > "$work/self.txt" || fail "logits written by output_logits_path do not read back exactly"

# 2. a perturbed golden file fails (exit 1): one logit of the last position
#    of sequence 1 raised by 2 changes that token's distribution
python3 "$src/tools/perturb_golden.py" "$golden" "$work/bad.jsonl" 1
set +e
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$work/bad.jsonl" max_kl_div=1e-6 \
  > "$work/bad.txt" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "a perturbed golden file gave exit $rc, expected 1"
grep -q ': FAIL$' "$work/bad.txt" || fail "no FAIL line for the perturbed file"
# atol alone catches a difference the KL threshold lets through
set +e
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$work/bad.jsonl" max_kl_div=10 atol=0.5 \
  > "$work/bad2.txt" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "atol=0.5 with a logit off by 2 gave exit $rc, expected 1"

# 3. from_hf -> to_hf is byte-identical (F32); sharded and BF16 exports load
"$bin" convert from_hf "$work/hf" "$work/params.safetensors" > "$work/from.txt"
grep -q "prefix 'model.', F32 in 1 file" "$work/from.txt" || fail "from_hf output: $(cat "$work/from.txt")"
"$bin" convert to_hf "$work/params.safetensors" "$work/hf2" dtype=float32 > /dev/null
cmp -s "$work/hf/model.safetensors" "$work/hf2/model.safetensors" || fail "from_hf -> to_hf changed the tensors"
cmp -s "$work/hf/config.json" "$work/hf2/config.json" || fail "from_hf -> to_hf changed config.json"
"$bin" logit-check "load_parameters_path=$work/params.safetensors" "golden_logits_path=$golden" max_kl_div=1e-6 \
  > /dev/null || fail "logit-check of the gemtrain parameter file"
"$bin" convert to_hf "$work/hf" "$work/shards" dtype=float32 max_shard_size=200000 > /dev/null
[ -f "$work/shards/model.safetensors.index.json" ] || fail "no index for a sharded export"
"$bin" logit-check "load_parameters_path=$work/shards" "golden_logits_path=$golden" max_kl_div=1e-6 \
  > /dev/null || fail "logit-check of the sharded export"
"$bin" convert to_hf "$work/hf" "$work/bf16" > /dev/null
grep -q '"torch_dtype":.*"bfloat16"' "$work/bf16/config.json" || fail "default dtype is not bfloat16"
"$bin" logit-check "load_parameters_path=$work/bf16" "golden_logits_path=$golden" max_kl_div=1e-2 \
  > "$work/bf16.txt" || fail "the BF16 export is far from the F32 logits: $(tail -1 "$work/bf16.txt")"

# 4. train starts from an HF directory: an export without norm noise holds
#    exactly the seeded init, so step 0 matches a run from the same seed
#    (the second run names no preset: base.json's gemma3-small dimensions
#    are replaced by config.json's)
"$bin" convert to_hf init "$work/plain" dtype=float32 "${model[@]}" > /dev/null
run=(dataset_type=synthetic steps=1 sample_tokens=0 eval_interval=-1 per_device_batch_size=2 max_target_length=32
     "base_output_directory=$work/runs")
"$bin" train "${run[@]}" run_name=a "${model[@]}" > "$work/a.txt"
"$bin" train "${run[@]}" run_name=b "load_parameters_path=$work/plain" > "$work/b.txt"
grep -q '6 layers .* d=64, H=4, K=2, head_dim=16, F=128, vocab=260' "$work/b.txt" \
  || fail "train did not take the model from config.json: $(head -1 "$work/b.txt")"
la=$(grep -o 'completed step: 0, .*loss: [0-9.]*' "$work/a.txt" | grep -o 'loss: [0-9.]*$')
lb=$(grep -o 'completed step: 0, .*loss: [0-9.]*' "$work/b.txt" | grep -o 'loss: [0-9.]*$')
[ -n "$la" ] && [ "$la" = "$lb" ] || fail "step 0 from the HF directory ($lb) differs from the seeded init ($la)"

expect_refusal() { # <pattern> <args...>; exit 2, or $want_rc
  local pat="$1" want=${want_rc:-2}; shift
  set +e
  "$bin" "$@" > "$work/r.out" 2> "$work/r.err"
  local rc=$?
  set -e
  [ $rc -eq $want ] || fail "'$*' gave exit $rc, expected $want"
  [ "$(wc -l < "$work/r.err")" -eq 1 ] || fail "'$*' did not print one line: $(cat "$work/r.err")"
  grep -q -- "$pat" "$work/r.err" || fail "'$*': '$(cat "$work/r.err")' lacks '$pat'"
}

# 5. an export over an earlier one: a sharded export removes the earlier
#    model.safetensors (transformers would load it before the index), a
#    one-file export the earlier shards and index; a directory holding both
#    forms is refused naming both; the summary says which files it copied
#    and which it found there
out="$work/again"
"$bin" convert to_hf "$work/hf" "$out" dtype=float32 > /dev/null
"$bin" convert to_hf "$work/hf" "$out" dtype=float32 max_shard_size=200000 > /dev/null
[ ! -e "$out/model.safetensors" ] || fail "a sharded export left the earlier model.safetensors beside its index"
[ -f "$out/model.safetensors.index.json" ] && [ -f "$out/model-00006-of-00006.safetensors" ] \
  || fail "no 6 shards and index: $(ls "$out")"
"$bin" logit-check "load_parameters_path=$out" "golden_logits_path=$golden" max_kl_div=1e-6 > /dev/null \
  || fail "logit-check of the sharded export over a one-file export"
"$bin" convert to_hf "$work/hf" "$out" dtype=float32 max_shard_size=400000 > /dev/null
[ -f "$out/model-00003-of-00003.safetensors" ] || fail "no 3 shards: $(ls "$out")"
ls "$out" | grep -q 'of-00006' && fail "a 3-shard export left the 6-shard export's files: $(ls "$out")"
"$bin" convert to_hf "$work/hf" "$out" dtype=float32 > /dev/null
[ -z "$(ls "$out" | grep -e '-of-' -e 'index.json')" ] || fail "a one-file export left shards or an index: $(ls "$out")"
cmp -s "$out/model.safetensors" "$work/hf/model.safetensors" || fail "the one-file export over shards differs"
cp "$work/shards/model.safetensors.index.json" "$work/shards/"model-0000*-of-*.safetensors "$out/"
want_rc=1 expect_refusal "holds both $out/model.safetensors and $out/model.safetensors.index.json" \
  logit-check "load_parameters_path=$out" "golden_logits_path=$golden" max_kl_div=1e-6
# the source (a run from a preset, no HF directory) has no generation_config.json: out's is kept, not "copied"
"$bin" convert to_hf "$work/runs/a" "$out" dtype=float32 > "$work/again.txt"
grep -q 'generation_config.json kept: it was in the output directory already$' "$work/again.txt" \
  || fail "the summary misreports generation_config.json: $(tail -1 "$work/again.txt")"
grep -q 'no tokenizer files' "$work/again.txt" || fail "the summary claims tokenizer files: $(tail -1 "$work/again.txt")"

# 6. a Gemma 3 262144-token embedding keeps the rows of the HF table it came
#    from: 262144 (1b, 270m) stays 262144, 262208 (4b and up) is padded back,
#    from an HF directory, from convert from_hf's parameter file or run
#    directory (which record the rows) and from a run trained from the HF
#    directory; F32 round trips are byte-identical
big=(model_name=gemma3-tiny vocab_size=262144 base_emb_dim=8 base_mlp_dim=8 base_num_decoder_layers=1 head_dim=4
     base_num_query_heads=2 base_num_kv_heads=1 layer_pattern=G)
"$bin" convert to_hf init "$work/v144" dtype=float32 "${big[@]}" > "$work/v.txt"
grep -q 'embedding 262144 rows$' "$work/v.txt" || fail "init padded without a 262208-row source: $(cat "$work/v.txt")"
"$bin" convert to_hf init "$work/v208" dtype=float32 pad_vocab=true "${big[@]}" > "$work/v.txt"
grep -q 'embedding 262208 rows (zero-padded from the model.s 262144: pad_vocab=true)$' "$work/v.txt" \
  || fail "pad_vocab=true: $(cat "$work/v.txt")"
for rows in 144 208; do
  hfv="$work/v$rows"
  "$bin" convert from_hf "$hfv" "$work/pv$rows.safetensors" > /dev/null
  "$bin" convert from_hf "$hfv" "$work/rv$rows" > /dev/null
  for srcv in "$work/pv$rows.safetensors" "$work/rv$rows" "$hfv"; do
    "$bin" convert to_hf "$srcv" "$work/back$rows" dtype=float32 > "$work/v.txt"
    cmp -s "$hfv/model.safetensors" "$work/back$rows/model.safetensors" \
      || fail "262$rows rows: from_hf -> to_hf of $srcv changed the tensors: $(cat "$work/v.txt")"
    cmp -s "$hfv/config.json" "$work/back$rows/config.json" || fail "262$rows rows: config.json of $srcv changed"
  done
  "$bin" train dataset_type=synthetic steps=1 sample_tokens=0 eval_interval=-1 per_device_batch_size=1 \
    max_target_length=8 "base_output_directory=$work/runs" run_name=v$rows "load_parameters_path=$hfv" > /dev/null
  "$bin" convert to_hf "$work/runs/v$rows" "$work/tuned$rows" dtype=float32 > "$work/v.txt"
  grep -q "embedding 262$rows rows" "$work/v.txt" || fail "a run from the 262$rows-row table: $(head -1 "$work/v.txt")"
  grep -q "\"vocab_size\":.*262$rows" "$work/tuned$rows/config.json" || fail "a run's export: vocab_size not 262$rows"
done
# a run from an HF directory with a tokenizer reads the data with it and
# records it; its export carries all the directory's tokenizer files, as
# the directory's own, not only the tokenizer.json the run recorded
cp "$src/data/tokenizers/gemma3/tokenizer.json" "$work/v144/"
echo '{"bos_token": "<bos>"}' > "$work/v144/special_tokens_map.json"
"$bin" train dataset_type=synthetic steps=1 sample_tokens=0 eval_interval=-1 per_device_batch_size=1 \
  max_target_length=8 "base_output_directory=$work/runs" run_name=vtok "load_parameters_path=$work/v144" > /dev/null
"$bin" convert to_hf "$work/runs/vtok" "$work/tunedtok" dtype=float32 > "$work/v.txt"
cmp -s "$work/v144/special_tokens_map.json" "$work/tunedtok/special_tokens_map.json" \
  || fail "the export of a run from an HF directory left out its tokenizer files: $(ls "$work/tunedtok")"
cmp -s "$work/v144/tokenizer.json" "$work/tunedtok/tokenizer.json" || fail "the export's tokenizer.json is not the source's"
# so does the export of convert from_hf's run directory or parameter file:
# it records the HF directory by its absolute path (given relatively here,
# exported from another working directory), and the directory's
# generation_config.json is copied, not replaced by Gemma's defaults
echo '{"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "top_k": 10, "top_p": 0.5}' \
  > "$work/v144/generation_config.json"
echo 'not a sentencepiece model' > "$work/v144/tokenizer.model"
(cd "$work" && "$bin" convert from_hf v144 fromtok > /dev/null && "$bin" convert from_hf v144 fromtok.safetensors > /dev/null)
for srcv in fromtok fromtok.safetensors; do
  rm -rf "$work/backtok"
  (cd / && "$bin" convert to_hf "$work/$srcv" "$work/backtok" dtype=float32) > "$work/v.txt"
  grep -q "tokenizer files copied from the source's HF directory; generation_config.json copied from the source's HF directory$" \
    "$work/v.txt" || fail "from_hf's $srcv: to_hf did not find the HF directory: $(tail -1 "$work/v.txt")"
  for f in tokenizer.json tokenizer.model special_tokens_map.json generation_config.json; do
    cmp -s "$work/v144/$f" "$work/backtok/$f" || fail "from_hf's $srcv: to_hf left out or changed the HF directory's $f"
  done
done
"$bin" convert to_hf "$work/pv208.safetensors" "$work/unpadded" dtype=float32 pad_vocab=false > "$work/v.txt"
grep -q 'embedding 262144 rows$' "$work/v.txt" || fail "pad_vocab=false: $(cat "$work/v.txt")"

# 7. refusals: one line, non-zero
expect_refusal "key 'max_kl_div' is not set" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$golden"
# a model key that contradicts config.json is refused naming both values;
# one that agrees is accepted (model_source.h)
expect_refusal "key 'sliding_window_size' = 6 is set explicitly, but the Hugging Face directory '$work/hf' holds a model with sliding_window_size = 16" \
  logit-check "load_parameters_path=$work/hf" "golden_logits_path=$golden" max_kl_div=1e-6 sliding_window_size=6
expect_refusal "key 'base_mlp_dim' = 96 is set explicitly, but the parameter file '$work/params.safetensors' holds a model with base_mlp_dim = 128" \
  decode "load_parameters_path=$work/params.safetensors" prompt=x base_mlp_dim=96
"$bin" logit-check "load_parameters_path=$work/hf" "golden_logits_path=$golden" max_kl_div=1e-6 sliding_window_size=16 \
  > /dev/null || fail "a model key that agrees with config.json was refused"
expect_refusal "cannot open '$work/none.jsonl'" logit-check "load_parameters_path=$work/hf" \
  "golden_logits_path=$work/none.jsonl" max_kl_div=1
expect_refusal "is not a Hugging Face directory" convert from_hf "$work/none" "$work/x.safetensors"
expect_refusal "dtype = 'float16'; expected bfloat16 or float32" convert to_hf "$work/hf" "$work/x" dtype=float16
echo '{"model_type": "gemma3_text", "hidden_activation": "relu"}' > "$work/hf2/config.json"
expect_refusal "key 'hidden_activation' = \"relu\" is not supported" convert from_hf "$work/hf2" "$work/x.safetensors"
echo "e2e_hf: ok"
