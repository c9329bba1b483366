#!/usr/bin/env bash
# End-to-end QLoRA with Hugging Face PEFT adapters in and out, for a tiny
# Gemma 3 (gemma3-tiny) and a tiny Gemma 4 (gemma4-tiny-ple: per-layer
# embeddings, KV sharing), each exported to an HF directory first (`convert
# to_hf init`, as e2e_hf.sh and e2e_hf4.sh do):
#   1. fine-tune from the HF directory on chat records
#      (tests/data/sft_chat.jsonl) with rank-4 adapters on every attention and
#      MLP projection over an nf4 base, dropout 0.05; the completion loss falls;
#   2. `convert to_peft` writes adapter_config.json (with the run's
#      lora_dropout) + adapter_model.safetensors
#      with PEFT's names and shapes (read back here in python from the
#      safetensors header: base_model.model.model.layers.N.<module>.lora_A
#      [4, in] and lora_B [out, 4], F32, every adapted projection);
#   3. decode from the run and from the HF base + lora_restore_path (the PEFT
#      directory, the same nf4 base) give the same tokens; a run continued
#      from the LoRA run trains with its dropout;
#   4. `convert to_hf` merges the adapters (W + scale * B A over the
#      dequantized base) into an ordinary HF directory with the tokenizer and
#      generation_config.json, whose logits equal the unmerged model's to
#      float32 rounding (logit-check against the run's own logits);
#   5. bad input gets one line: another model's adapters (the tensor named),
#      a PEFT option gemtrain does not implement (use_dora).
# Usage: e2e_lora.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_lora.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
chat="$src/tests/data/sft_chat.jsonl"

for model in gemma3-tiny gemma4-tiny-ple; do
  hf="$work/hf-$model"; run="$work/runs/$model"; peft="$work/peft-$model"; merged="$work/merged-$model"
  "$bin" convert to_hf init "$hf" dtype=float32 init_norm_std=0.1 model_name=$model init_weights_seed=7 > "$work/init-$model.txt" \
    || fail "$model: convert to_hf init"

  # 1. QLoRA fine-tune from the HF directory
  "$bin" train "load_parameters_path=$hf" enable_lora=true lora_rank=4 lora_alpha=8 lora_weight_qtype=nf4 lora_dropout=0.05 \
    dataset_type=jsonl "dataset_path=$chat" use_sft=true train_data_columns=messages max_target_length=256 \
    per_device_batch_size=4 steps=40 learning_rate=0.01 warmup_steps_fraction=0.05 eval_interval=-1 \
    sample_tokens=0 "base_output_directory=$work/runs" run_name=$model > "$work/train-$model.log" 2>&1 \
    || { tail -5 "$work/train-$model.log"; fail "$model: LoRA training failed"; }
  grep -q '^frozen base: .*stored as nf4, embedding bfloat16$' "$work/train-$model.log" || fail "$model: the base is not stored as nf4 beside a bf16 embedding"
  grep -q '^adapters (LoRA): .* rank 4, scale 2,' "$work/train-$model.log" || fail "$model: no adapters"
  python3 - "$run/metrics.jsonl" "$model" <<'EOF' || fail "$model: the loss did not fall"
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1])]
first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
print(f"e2e_lora: {sys.argv[2]}: loss {first:.3f} -> {last:.3f} over {len(loss)} steps")
assert len(loss) == 40 and last < 0.8 * first, (first, last)
EOF

  # 2. the PEFT directory
  "$bin" convert to_peft "$run" "$peft" > "$work/peft-$model.txt" || fail "$model: convert to_peft"
  grep -q "^convert: wrote $peft: adapter_config.json and adapter_model.safetensors (.* tensors, r=4, lora_alpha=8, names under base_model.model.model.)" \
    "$work/peft-$model.txt" || fail "$model: to_peft output: $(cat "$work/peft-$model.txt")"
  python3 - "$peft" "$hf" <<'EOF' || fail "$model: the PEFT directory is not PEFT's"
import json, re, struct, sys
peft, hf = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{peft}/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["bias"] == "none" and not cfg["use_dora"], cfg
assert cfg["lora_dropout"] == 0.05, cfg["lora_dropout"]  # the run's, not the default
assert cfg["base_model_name_or_path"] == hf, cfg["base_model_name_or_path"]
assert sorted(cfg["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"]), cfg["target_modules"]
raw = open(f"{peft}/adapter_model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
base = json.loads(open(f"{hf}/model.safetensors", "rb").read(8 + struct.unpack("<Q", open(f"{hf}/model.safetensors", "rb").read(8))[0])[8:])
pairs = 0
for name, t in head.items():
    m = re.fullmatch(r"base_model\.model\.(model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj)\.lora_([AB])\.weight", name)
    assert m and t["dtype"] == "F32", name
    out, inn = base[m.group(1) + ".weight"]["shape"]
    assert t["shape"] == ([4, inn] if m.group(3) == "A" else [out, 4]), (name, t["shape"], out, inn)
    pairs += m.group(3) == "A"
# every projection of the HF model that the target modules name has its pair
want = [k for k in base if re.fullmatch(r"model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight", k)]
assert pairs == len(want), (pairs, len(want))
print(f"e2e_lora: {len(head)} PEFT tensors, {pairs} adapted projections")
EOF

  # 3. decode: from the run, and from the HF base with the PEFT directory
  prompt=(prompt="What is the capital of France?" max_decode_steps=12)
  "$bin" decode --ids "load_parameters_path=$run" "${prompt[@]}" > "$work/d1.txt" \
    || fail "$model: decode of the run: $(tail -2 "$work/d1.txt")"
  "$bin" decode --ids "load_parameters_path=$hf" "lora_restore_path=$peft" lora_weight_qtype=nf4 "${prompt[@]}" \
    > "$work/d2.txt" || fail "$model: decode with lora_restore_path: $(tail -2 "$work/d2.txt")"
  grep -qx "adapters: $peft, trained over '$hf' (its adapter_config.json)" "$work/d2.txt" \
    || fail "$model: decode does not name the adapters' base: $(grep '^adapters' "$work/d2.txt")"
  "$bin" train "load_parameters_path=$hf" "lora_restore_path=$peft" lora_weight_qtype=nf4 dataset_type=synthetic \
    steps=1 sample_tokens=0 enable_checkpointing=false "base_output_directory=$work/runs" run_name="cont-$model" \
    > "$work/t2.txt" 2>&1 || { cat "$work/t2.txt"; fail "$model: training on with lora_restore_path"; }
  grep -qx "adapters from $peft, trained over '$hf' (its adapter_config.json); the base here: $hf" "$work/t2.txt" \
    || fail "$model: train does not name the adapters' base: $(grep '^adapters' "$work/t2.txt")"
  # a run continued from the LoRA run trains with its dropout
  "$bin" train "load_parameters_path=$run" dataset_type=synthetic steps=1 sample_tokens=0 enable_checkpointing=false \
    "base_output_directory=$work/runs" run_name="more-$model" > "$work/t3.txt" 2>&1 \
    || { cat "$work/t3.txt"; fail "$model: training on from the LoRA run"; }
  grep -q '^adapters (LoRA): .*, dropout 0.05$' "$work/t3.txt" \
    || fail "$model: the continued run's dropout: $(grep '^adapters' "$work/t3.txt")"
  a=$(grep '^ids:' "$work/d1.txt"); b=$(grep '^ids:' "$work/d2.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$model: the run decodes '$a', its PEFT adapters on the HF base '$b'"

  # 4. merged into an ordinary HF directory: the same logits
  "$bin" convert to_hf "$run" "$merged" dtype=float32 > "$work/merge-$model.txt" || fail "$model: convert to_hf"
  grep -q '^convert: merged the adapters of [0-9]* projections (W + 2 \* B A)$' "$work/merge-$model.txt" \
    || fail "$model: merge output: $(cat "$work/merge-$model.txt")"
  # the merged model's parameters are the HF model's, though the run's base was stored as nf4 (fewer words)
  n_init=$(sed -n 's/^convert: wrote .*), \([0-9]*\) parameters;.*/\1/p' "$work/init-$model.txt")
  n_merged=$(sed -n 's/^convert: wrote .*), \([0-9]*\) parameters;.*/\1/p' "$work/merge-$model.txt")
  [ -n "$n_init" ] && [ "$n_init" = "$n_merged" ] || fail "$model: the merged export counts $n_merged parameters, the HF model $n_init"
  [ -f "$merged/generation_config.json" ] || fail "$model: no generation_config.json beside the merged export"
  python3 - "$merged/model.safetensors" <<'EOF' || fail "$model: the merged export holds adapter tensors"
import json, struct, sys
f = open(sys.argv[1], "rb")
head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert head and not [k for k in head if "lora" in k], [k for k in head if "lora" in k][:3]
EOF
  golden="$src/tests/data/hf_tiny_golden.jsonl"
  [ $model = gemma3-tiny ] || golden="$src/tests/data/hf4_ple_golden.jsonl"
  "$bin" logit-check "load_parameters_path=$run" "golden_logits_path=$golden" max_kl_div=1e9 \
    "output_logits_path=$work/unmerged.jsonl" > /dev/null || fail "$model: logit-check of the run"
  # float32 rounding: W + scale B A rounded once against the two products
  # (measured max |diff| 5.3e-4 on gemma4-tiny-ple's soft-capped logits,
  # mean KL 4.5e-10, max 2.1e-8; a wrong scale or a missing adapter moves
  # logits by tenths)
  "$bin" logit-check "load_parameters_path=$merged" "golden_logits_path=$work/unmerged.jsonl" max_kl_div=1e-6 \
    atol=1e-3 > "$work/lc-$model.txt" || fail "$model: merged logits differ: $(tail -1 "$work/lc-$model.txt")"
  "$bin" logit-check "load_parameters_path=$hf" "lora_restore_path=$peft" lora_weight_qtype=nf4 \
    "golden_logits_path=$work/unmerged.jsonl" max_kl_div=1e-6 atol=1e-4 > "$work/lc2-$model.txt" \
    || fail "$model: HF base + PEFT logits differ from the run's: $(tail -1 "$work/lc2-$model.txt")"
done

# 5. bad input, one line each: Gemma 3 adapters on the Gemma 4 base; use_dora
set +e
"$bin" decode "load_parameters_path=$work/hf-gemma4-tiny-ple" "lora_restore_path=$work/peft-gemma3-tiny" \
  prompt=x max_decode_steps=1 > "$work/bad1.txt" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "another model's adapters: exit $rc, expected 2"
[ "$(wc -l < "$work/bad1.txt")" -eq 1 ] && grep -q "^gemtrain: .*peft: .*adapter_model.safetensors" "$work/bad1.txt" \
  || fail "another model's adapters: $(cat "$work/bad1.txt")"
cp -r "$work/peft-gemma3-tiny" "$work/dora"
python3 - "$work/dora/adapter_config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c["use_dora"] = True; json.dump(c, open(sys.argv[1], "w"))
EOF
set +e
"$bin" decode "load_parameters_path=$work/hf-gemma3-tiny" "lora_restore_path=$work/dora" prompt=x max_decode_steps=1 \
  > "$work/bad2.txt" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && [ "$(wc -l < "$work/bad2.txt")" -eq 1 ] && grep -q "use_dora = true, which gemtrain does not implement" \
  "$work/bad2.txt" || fail "use_dora: exit $rc: $(cat "$work/bad2.txt")"
echo "e2e_lora: ok"
