#!/usr/bin/env bash
# End-to-end: a run with trainable_parameters_mask checkpoints what trains
# plus a reference (source and checksum) to the frozen tensors; a resume is
# bit-exact (the same losses and final tensors as a run straight through);
# a resume whose frozen base changed (another init_weights_seed) or whose
# mask changed is refused, naming both sides; the checkpoint converts to
# Hugging Face with its frozen tensors re-created from the reference; the
# same with expert parallelism and frozen experts; the plan shows the
# trainable count. Usage: e2e_store.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_store.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
common=(model_name=gemma3-tiny dataset_type=synthetic max_target_length=32 sample_tokens=0 checkpoint_period=3
        learning_rate_schedule_steps=6 checkpoint_compression=0 "trainable_parameters_mask=self_attn norm"
        "base_output_directory=$work/runs")
"$bin" train "${common[@]}" steps=6 run_name=straight > "$work/a.log" 2>&1 || { cat "$work/a.log"; fail "straight run"; }
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
def shard(r):
    f = open(f"{runs}/{r}/checkpoints/step_00000006/shard_00000-of-00001.gtck", "rb").read()
    h, n = struct.unpack_from("<QQ", f, 16)
    return f[64:h], json.loads(f[h:h + n])
da, ha = shard("straight")
db, hb = shard("resumed")
assert da == db, "final tensors differ"
fz = ha["frozen"]
assert fz == hb["frozen"], (fz, hb["frozen"])
assert fz["source"].startswith("init_weights_seed="), fz
assert len(fz["checksum"]) == 16 and fz["elements"] > 0, fz
names = fz["tensors"]
assert "embed_tokens.weight" in names and "layers.0.mlp.up_proj.weight" in names, names[:5]
assert not any("self_attn" in x or "norm" in x for x in names), names
# only what trains is stored: params, mu and nu of the trainable elements
stored = sum(t["count"] for t in ha["tensors"])
total = sum(eval("*".join(str(d) for d in s)) for _, s in ha["model"])
assert stored == 3 * (total - fz["elements"]), (stored, total, fz["elements"])
print("resume bit-exact:", len(da), "tensor bytes,", stored // 3, "trainable of", total, "parameters")
PY

# another initialisation: the frozen base the checkpoint references is gone
if "$bin" train "${common[@]}" steps=9 init_weights_seed=7 run_name=resumed > "$work/c.log" 2>&1; then
  fail "a resume with a changed frozen base was accepted"
fi
grep -q "the frozen base changed" "$work/c.log" || { cat "$work/c.log"; fail "no frozen-base message"; }
grep -q "references frozen parameters from init_weights_seed=" "$work/c.log" || fail "the checkpoint's source is not named"
grep -q "this run's frozen tensors: init_weights_seed=7" "$work/c.log" || fail "this run's source is not named"

# another mask: the checkpoint resumes only under the mask that wrote it
if "$bin" train "${common[@]}" steps=9 "trainable_parameters_mask=self_attn" run_name=resumed > "$work/d.log" 2>&1; then
  fail "a resume with another mask was accepted"
fi
grep -q "frozen tensors, this run freezes" "$work/d.log" || { cat "$work/d.log"; fail "no mask message"; }

# a mask matching nothing is refused naming parameter names
if "$bin" train "${common[@]}" "trainable_parameters_mask=lora_B" run_name=none > "$work/e.log" 2>&1; then
  fail "a mask matching nothing was accepted"
fi
grep -q "matches none of the model's" "$work/e.log" && grep -q "embed_tokens.weight" "$work/e.log" || { cat "$work/e.log"; fail "no names"; }

# export: a masked run's checkpoint converts to Hugging Face with its frozen
# tensors re-created from the reference (the initialisation here): they are
# the initial model's bytes, the trained ones are not
"$bin" convert to_hf "$work/runs/straight" "$work/hf_run" dtype=float32 > "$work/conv.log" 2>&1 ||
  { cat "$work/conv.log"; fail "convert of a masked run"; }
"$bin" convert to_hf init "$work/hf_init" dtype=float32 model_name=gemma3-tiny > "$work/conv0.log" 2>&1 ||
  { cat "$work/conv0.log"; fail "convert of the initial model"; }
python3 - "$work/hf_run" "$work/hf_init" <<'PY' || fail "the exported frozen tensors are not the initial ones"
import glob, json, struct, sys
def tensors(d):
    out = {}
    for f in glob.glob(d + "/*.safetensors"):
        raw = open(f, "rb").read()
        n, = struct.unpack_from("<Q", raw, 0)
        h = json.loads(raw[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = raw[8 + n + a:8 + n + b]
    return out
run, init = tensors(sys.argv[1]), tensors(sys.argv[2])
assert run.keys() == init.keys() and run, (len(run), len(init))
for k in run:
    trains = "self_attn" in k or "norm" in k
    assert (run[k] != init[k]) == trains, (k, trains)
print("export: frozen tensors are the initial ones,", sum(("self_attn" in k or "norm" in k) for k in run), "of", len(run), "trained")
PY

# expert parallelism with frozen experts: a device's shard holds its own
# experts, the checkpoint goes through full buffers compacted to what trains;
# the resume is bit-exact and the exported frozen tensors are the initial ones
moe=(model_name=gemma4-tiny-moe dataset_type=synthetic max_target_length=32 sample_tokens=0 checkpoint_period=2
     learning_rate_schedule_steps=4 checkpoint_compression=0 per_device_batch_size=2 num_devices=2
     ici_expert_parallelism=2 "trainable_parameters_mask=self_attn layernorm" "base_output_directory=$work/runs")
"$bin" train "${moe[@]}" steps=4 run_name=ep_straight > "$work/ep_a.log" 2>&1 || { cat "$work/ep_a.log"; fail "EP run"; }
"$bin" train "${moe[@]}" steps=2 run_name=ep_resumed > "$work/ep_b1.log" 2>&1 || { cat "$work/ep_b1.log"; fail "EP half"; }
"$bin" train "${moe[@]}" steps=4 run_name=ep_resumed > "$work/ep_b2.log" 2>&1 || { cat "$work/ep_b2.log"; fail "EP resume"; }
"$bin" convert to_hf "$work/runs/ep_straight" "$work/hf_ep" dtype=float32 > "$work/conv_ep.log" 2>&1 ||
  { cat "$work/conv_ep.log"; fail "convert of the EP run"; }
"$bin" convert to_hf init "$work/hf_ep0" dtype=float32 model_name=gemma4-tiny-moe > "$work/conv_ep0.log" 2>&1 ||
  { cat "$work/conv_ep0.log"; fail "convert of the initial MoE model"; }
python3 - "$work" <<'PY' || fail "the EP run with frozen experts"
import glob, json, struct, sys
w = sys.argv[1]
T = {"seconds", "tokens_per_s_per_device", "tflops_per_s_per_device", "comm_seconds", "wall_seconds", "goodput",
          "badput", "checkpoint_write_seconds", "checkpoint_blocked_seconds"}
L = lambda r: [{k: v for k, v in json.loads(l).items() if k not in T} for l in open(f"{w}/runs/{r}/metrics.jsonl")]
assert L("ep_straight") == L("ep_resumed"), "EP resume: metrics differ"
def data(r):
    f = open(f"{w}/runs/{r}/checkpoints/step_00000004/shard_00000-of-00001.gtck", "rb").read()
    h, = struct.unpack_from("<Q", f, 16)
    return f[64:h]
assert data("ep_straight") == data("ep_resumed"), "EP resume: final tensors differ"
def tensors(d):
    out = {}
    for f in glob.glob(d + "/*.safetensors"):
        raw = open(f, "rb").read()
        n, = struct.unpack_from("<Q", raw, 0)
        for k, v in json.loads(raw[8:8 + n]).items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = raw[8 + n + a:8 + n + b]
    return out
run, init = tensors(w + "/hf_ep"), tensors(w + "/hf_ep0")
assert run.keys() == init.keys() and run
experts = [k for k in run if "experts" in k]
assert experts
for k in run:
    trains = "self_attn" in k or "layernorm" in k
    assert (run[k] != init[k]) == trains, (k, trains)
print("EP with frozen experts: resume bit-exact,", len(experts), "expert tensors frozen")
PY

"$bin" plan "${common[@]}" > "$work/plan.txt"
grep -q "trainable: [0-9]*, frozen: [0-9]* in [0-9]* tensors" "$work/plan.txt" || { cat "$work/plan.txt"; fail "the plan lacks the store"; }
echo "e2e_store: ok"
