#!/usr/bin/env bash
# LoRA lowers eval loss on real text (docs/fine-tuning.md, "Quality"):
#  1. a tiny Gemma 3 (gemma3-tiny, byte tokens as the default job uses) is
#     pretrained briefly on the default job's data, data/kjv.txt, without the
#     Psalms (Genesis to Job), and exported as a Hugging Face directory;
#  2. rank-16 adapters train on the Psalms (a book the base never saw, its
#     last 2% held out for eval) over a float32 base read straight from the
#     pretraining run's checkpoint and over an nf4 base read from its export; each eval loss after the LoRA steps must be at least 5% below
#     the same base's eval loss at step 0 (a run of the same command with
#     learning_rate=0: fresh adapters (B = 0) are the base exactly);
#  3. the base stays frozen: the checkpoints hold only the adapters (params,
#     mu, nu), reference the base by source and checksum (the same checksum
#     at step 0 and after training, the nf4 one another), the base's files
#     are unchanged, and a continued run re-reads the base and accepts its
#     checksum;
#  4. TensorBoard (setup/* scalars at step 0, read back by
#     tools/read_tfevents.py when its python protobuf and crcmod are there)
#     and trace.json's otherData name the trainable, frozen and adapter
#     parameter counts.
# Usage: e2e_lora_quality.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_lora_quality.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
kjv=data/kjv.txt # the default job's corpus (tools/kjv.sh writes it where it is missing)
[ -s "$kjv" ] || { kjv="$work/kjv.txt"; tools/kjv.sh "$kjv" > /dev/null; }
psalms=$(grep -n '^Psalms 1$' "$kjv" | cut -d: -f1)
proverbs=$(grep -n '^Proverbs 1$' "$kjv" | cut -d: -f1)
[ -n "$psalms" ] && [ -n "$proverbs" ] || fail "$kjv has no Psalms 1 / Proverbs 1 headings"
head -n $((psalms - 1)) "$kjv" > "$work/pretrain.txt"
sed -n "${psalms},$((proverbs - 1))p" "$kjv" > "$work/psalms.txt"

shape=(per_device_batch_size=8 max_target_length=64 sample_tokens=0 eval_interval=0 "base_output_directory=$work/runs")
"$bin" train model_name=gemma3-tiny "dataset_path=$work/pretrain.txt" "${shape[@]}" steps=120 learning_rate=3e-3 \
  save_checkpoint_on_completion=true run_name=pretrain > "$work/pretrain.log" 2>&1 ||
  { cat "$work/pretrain.log"; fail "pretraining"; }
"$bin" convert to_hf "$work/runs/pretrain" "$work/base" dtype=float32 > "$work/convert.log" 2>&1 ||
  { cat "$work/convert.log"; fail "export of the pretrained checkpoint"; }
sha_before=$(sha256sum "$work/base/model.safetensors" | cut -d' ' -f1)

# the float32 base straight from the pretraining run's checkpoint, the nf4
# base from its Hugging Face export: both ways a base reaches the adapters
declare -A from=([float32]="$work/runs/pretrain" [nf4]="$work/base")
ft=("dataset_path=$work/psalms.txt" "${shape[@]}" enable_lora=true lora_rank=16 save_checkpoint_on_completion=true)
for q in float32 nf4; do
  "$bin" train "${ft[@]}" "load_parameters_path=${from[$q]}" lora_weight_qtype=$q steps=1 learning_rate=0 \
    run_name=step0_$q > "$work/step0_$q.log" 2>&1 || { cat "$work/step0_$q.log"; fail "step 0 eval over a $q base"; }
  "$bin" train "${ft[@]}" "load_parameters_path=${from[$q]}" lora_weight_qtype=$q steps=50 learning_rate=1e-2 \
    run_name=lora_$q profiler=trace \
    profiler_steps=2 > "$work/lora_$q.log" 2>&1 ||
    { cat "$work/lora_$q.log"; fail "LoRA over a $q base"; }
  grep -q "^adapters (LoRA): [0-9]* parameters in 84 tensors, rank 16" "$work/lora_$q.log" ||
    { cat "$work/lora_$q.log"; fail "no adapters line ($q)"; }
done
[ "$(sha256sum "$work/base/model.safetensors" | cut -d' ' -f1)" = "$sha_before" ] || fail "the base's file changed"

python3 - "$work/runs" <<'PY' || fail "quality or frozen base"
import json, struct, sys
runs = sys.argv[1]
def last_eval(r):
    ev = [json.loads(l) for l in open(f"{runs}/{r}/metrics.jsonl")]
    ev = [m for m in ev if "eval_loss" in m]
    assert ev, r
    return ev[-1]["eval_loss"], ev[-1]["step"]
def header(r, step):
    f = open(f"{runs}/{r}/checkpoints/step_{step:08d}/shard_00000-of-00001.gtck", "rb").read()
    h, n = struct.unpack_from("<QQ", f, 16)
    return json.loads(f[h:h + n])
pre, _ = last_eval("pretrain")
# briefly pretrained: far below a uniform guess over 260 byte tokens (5.56)
assert pre < 3.0, pre
sums = {}
for q in ("float32", "nf4"):
    base, s0 = last_eval(f"step0_{q}")
    lora, s1 = last_eval(f"lora_{q}")
    assert s0 == 0 and s1 == 49, (s0, s1)
    print(f"{q} base: eval loss on the held-out Psalms {base:.4f} at step 0, {lora:.4f} after 50 LoRA steps "
          f"({100 * (base - lora) / base:.1f}% lower)")
    assert lora < 0.95 * base, (q, base, lora)
    h0, h1 = header(f"step0_{q}", 1), header(f"lora_{q}", 50)
    for h in (h0, h1):
        fz = h["frozen"]
        assert fz["source"].startswith("load_parameters_path=") and \
            fz["source"].endswith("/base" if q == "nf4" else "/runs/pretrain"), fz["source"]
        assert fz["qtype"] == q and fz["elements"] == 239616, fz
        names = fz["tensors"]
        assert "layers.0.self_attn.q_proj.weight" in names and not any("lora_" in x for x in names)
        stored = sum(t["count"] for t in h["tensors"])
        adapters = sum(eval("*".join(str(d) for d in s)) for n, s in h["model"] if "lora_" in n)
        assert adapters == 98304 and stored == 3 * adapters, (stored, adapters)
    assert h0["frozen"]["checksum"] == h1["frozen"]["checksum"], (h0["frozen"], h1["frozen"])
    sums[q] = h1["frozen"]["checksum"]
assert sums["float32"] != sums["nf4"], sums
PY

# what trains, in the trace and in TensorBoard
python3 - "$work/runs" <<'PY' || fail "trace.json's parameter counts"
import json, sys
for q in ("float32", "nf4"):
    o = json.load(open(f"{sys.argv[1]}/lora_{q}/trace.json"))["otherData"]
    want = {"parameters": 239616 + 98304, "trainable_parameters": 98304, "frozen_parameters": 239616,
            "lora_parameters": 98304, "lora_rank": 16, "frozen_base_qtype": q}
    assert {k: o.get(k) for k in want} == want, o
PY
py=/usr/bin/python3
if "$py" -c 'import google.protobuf, crcmod.predefined' 2>/dev/null && command -v protoc >/dev/null 2>&1; then
  mkdir "$work/pb"
  protoc --python_out="$work/pb" -I "$src/tools/proto" "$src/tools/proto/tf_event.proto"
  for q in float32 nf4; do
    "$py" "$src/tools/read_tfevents.py" "$work/pb" "$work/runs/lora_$q"/tensorboard/events.out.tfevents.* \
      > "$work/events_$q.json" || fail "read_tfevents ($q)"
    "$py" - "$work/events_$q.json" <<'PY' || fail "TensorBoard's parameter counts ($q)"
import json, sys
ev = json.loads(open(sys.argv[1]).readline())["events"]
setup = [e for e in ev if any(t.startswith("setup/") for t in e.get("values", {}))]
assert len(setup) == 1 and setup[0]["step"] == 0, setup
assert setup[0]["values"] == {"setup/num_parameters": 337920, "setup/num_trainable_parameters": 98304,
                              "setup/num_frozen_parameters": 239616, "setup/num_lora_parameters": 98304}, setup
PY
  done
else
  echo "e2e_lora_quality: no protoc / python3 protobuf / crcmod: TensorBoard's counts not read back"
fi

# a continued run re-reads the base from its source and checks its checksum
for q in float32 nf4; do
  "$bin" train "${ft[@]}" "load_parameters_path=${from[$q]}" lora_weight_qtype=$q steps=51 learning_rate=1e-2 \
    run_name=lora_$q > "$work/cont_$q.log" 2>&1 || { cat "$work/cont_$q.log"; fail "continuing over the same $q base"; }
  grep -q "^resumed from .*step 50" "$work/cont_$q.log" || { cat "$work/cont_$q.log"; fail "the $q run did not resume"; }
done
echo "e2e_lora_quality: OK"
