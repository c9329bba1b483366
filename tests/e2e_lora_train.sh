#!/usr/bin/env bash
# End-to-end training with low-rank adapters (docs/fine-tuning.md):
#  1. the header names the adapters and the trainable and frozen counts;
#  2. a resume is bit-exact (metrics and final tensors of a run straight
#     through), with dropout and gradient accumulation; the checkpoint holds
#     only the adapters (params, mu, nu) and references the frozen base by
#     source and checksum; a resume over another base is refused naming both;
#  3. a lora key without enable_lora is noted (no adapters); a quantized
#     base without adapters and a module path matching nothing are refused;
#  4. over a Hugging Face base (no adapters in it) step 0's loss is the
#     base model's (as printed);
#  5. 2 MPI ranks x 1 device = 1 rank x 2 devices bit for bit (skipped
#     without mpirun or MPI in the build).
# Usage: e2e_lora_train.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_lora.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
common=(model_name=gemma3-tiny dataset_type=synthetic max_target_length=32 sample_tokens=0 checkpoint_period=3
        learning_rate_schedule_steps=6 checkpoint_compression=0 enable_lora=true lora_rank=4 lora_dropout=0.1
        gradient_accumulation_steps=2 save_checkpoint_on_completion=true "base_output_directory=$work/runs")
"$bin" train "${common[@]}" steps=6 run_name=straight > "$work/a.log" 2>&1 || { cat "$work/a.log"; fail "straight run"; }
grep -q "^adapters (LoRA): [0-9]* parameters in 84 tensors, rank 4, scale 8, dropout 0.1" "$work/a.log" ||
  { cat "$work/a.log"; fail "no adapters line"; }
grep -q "^trainable parameters: [0-9]*, frozen: [0-9]* in [0-9]* tensors" "$work/a.log" || fail "no trainable line"
"$bin" train "${common[@]}" steps=3 run_name=resumed > "$work/b1.log" 2>&1 || { cat "$work/b1.log"; fail "first half"; }
"$bin" train "${common[@]}" steps=6 run_name=resumed > "$work/b2.log" 2>&1 || { cat "$work/b2.log"; fail "resume"; }
grep -q "^resumed from .*step 3" "$work/b2.log" || fail "the second half did not resume at step 3"

python3 - "$work/runs" <<'PY' || fail "the resumed run differs from the straight one"
import json, struct, sys
runs = sys.argv[1]
TIMING = {"seconds", "tokens_per_s_per_device", "tflops_per_s_per_device", "comm_seconds", "wall_seconds", "goodput",
          "badput", "checkpoint_write_seconds", "checkpoint_blocked_seconds"}
def lines(r): return [{k: v for k, v in json.loads(l).items() if k not in TIMING} for l in open(f"{runs}/{r}/metrics.jsonl")]
a, b = lines("straight"), lines("resumed")
assert len(a) == 6 and len(b) == 6, (len(a), len(b))
assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
assert a[-1]["loss"] < a[0]["loss"], (a[0]["loss"], a[-1]["loss"])
def shard(r):
    f = open(f"{runs}/{r}/checkpoints/step_00000006/shard_00000-of-00001.gtck", "rb").read()
    h, n = struct.unpack_from("<QQ", f, 16)
    return f[64:h], json.loads(f[h:h + n])
da, ha = shard("straight")
db, hb = shard("resumed")
assert da == db, "final tensors differ"
fz = ha["frozen"]
names = fz["tensors"]
assert "embed_tokens.weight" in names and "layers.0.self_attn.q_proj.weight" in names, names[:5]
assert not any("lora_" in x for x in names), names
# only the adapters are stored: params, mu and nu of their elements
stored = sum(t["count"] for t in ha["tensors"])
adapters = sum(eval("*".join(str(d) for d in s)) for n, s in ha["model"] if "lora_" in n)
assert adapters > 0 and stored == 3 * adapters, (stored, adapters)
print("resume bit-exact:", len(da), "tensor bytes;", adapters, "adapter parameters stored")
PY

# another base: the checkpoint's frozen reference no longer holds
if "$bin" train "${common[@]}" steps=9 init_weights_seed=7 run_name=resumed > "$work/c.log" 2>&1; then
  fail "a resume over another base was accepted"
fi
grep -q "the frozen base changed" "$work/c.log" || { cat "$work/c.log"; fail "no frozen-base message"; }

# refusals
"$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=1 lora_rank=8 run_name=x sample_tokens=0 \
  "base_output_directory=$work/runs" > "$work/d.log" 2>&1 || { cat "$work/d.log"; fail "lora_rank without enable_lora"; }
grep -q "^note: key 'lora_rank' is set but enable_lora = false: no adapters" "$work/d.log" ||
  { cat "$work/d.log"; fail "no lora_rank note"; }
if "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=1 lora_weight_qtype=int8 run_name=x \
     "base_output_directory=$work/runs" > "$work/e.log" 2>&1; then fail "a quantized base without adapters accepted"; fi
grep -q "every tensor trains and a quantized one cannot" "$work/e.log" || { cat "$work/e.log"; fail "no qtype message"; }
if "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=1 enable_lora=true lora_module_path=nothing \
     run_name=x "base_output_directory=$work/runs" > "$work/f.log" 2>&1; then fail "a path matching nothing accepted"; fi
grep -q "matches none of the model's parameter names" "$work/f.log" && grep -q "self_attn.q_proj.weight" "$work/f.log" ||
  { cat "$work/f.log"; fail "no module path message"; }
if "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=1 enable_lora=true "lora_restore_path=$work/none" \
     run_name=x "base_output_directory=$work/runs" > "$work/g.log" 2>&1; then fail "adapters without a base accepted"; fi
grep -q "'lora_restore_path' = .* needs the base model its adapters were trained over" "$work/g.log" ||
  { cat "$work/g.log"; fail "no lora_restore_path message"; }

# a Hugging Face base: the adapters start initialised beside it (the
# directory has none), and step 0 is the base model's loss exactly
"$bin" convert to_hf init "$work/hf" dtype=float32 model_name=gemma3-tiny > "$work/h0.log" 2>&1 ||
  { cat "$work/h0.log"; fail "convert"; }
hf=(dataset_type=synthetic steps=2 sample_tokens=0 max_target_length=32 "load_parameters_path=$work/hf"
    "base_output_directory=$work/runs")
"$bin" train "${hf[@]}" run_name=hf_full > "$work/h1.log" 2>&1 || { cat "$work/h1.log"; fail "HF base, full"; }
"$bin" train "${hf[@]}" enable_lora=true run_name=hf_lora > "$work/h2.log" 2>&1 || { cat "$work/h2.log"; fail "HF base, LoRA"; }
l1=$(grep -o "completed step: 0, .*loss: [0-9.]*" "$work/h1.log" | grep -o "loss: [0-9.]*$")
l2=$(grep -o "completed step: 0, .*loss: [0-9.]*" "$work/h2.log" | grep -o "loss: [0-9.]*$")
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "step 0 over the HF base: '$l2' with adapters, '$l1' without"

# MPI ranks: the same global mesh, the same run bit for bit
mpirun=${GT_MPIRUN:-$(command -v mpirun || true)}
if [ -z "$mpirun" ]; then echo "e2e_lora_train: no mpirun: the ranks' part skipped"; exit 0; fi
flags=()
if "$mpirun" --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
fi
mp=(model_name=gemma3-tiny dataset_type=synthetic max_target_length=16 steps=4 sample_tokens=0 enable_lora=true
    lora_rank=4 lora_dropout=0.2 checkpoint_compression=0 save_checkpoint_on_completion=true
    "base_output_directory=$work/runs")
if ! "$mpirun" "${flags[@]}" -np 2 "$bin" train "${mp[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=r2x1 \
     > "$work/r2x1.log" 2>&1; then
  if grep -q "built without MPI" "$work/r2x1.log"; then echo "e2e_lora_train: built without MPI: the ranks' part skipped"; exit 0; fi
  cat "$work/r2x1.log"; fail "2 ranks x 1 device"
fi
"$bin" train "${mp[@]}" num_devices=2 run_name=r1x2 > "$work/r1x2.log" 2>&1 || { cat "$work/r1x2.log"; fail "1 x 2"; }
PYTHONPATH="$src/tests" python3 - "$work/runs/r2x1" "$work/runs/r1x2" <<'PY' || fail "2 ranks and 2 devices differ"
import json, os, sys, gt_runs
a, b = sys.argv[1], sys.argv[2]
keys = ("step", "loss", "grad_norm", "total_weights")
la = [json.loads(l) for l in open(os.path.join(a, "metrics.jsonl"))]
lb = [json.loads(l) for l in open(os.path.join(b, "metrics.jsonl"))]
assert len(la) == len(lb) == 4
for x, y in zip(la, lb):
    for k in keys:
        assert x[k] == y[k], (k, x[k], y[k])
ta, tb = gt_runs.tensor_bytes(a)[1], gt_runs.tensor_bytes(b)[1]
assert ta and ta == tb, "final adapters differ"
print("2 ranks x 1 device = 1 rank x 2 devices:", len(la), "steps,", sum(map(len, ta.values())), "tensor bytes")
PY
echo "e2e_lora_train: ok"
