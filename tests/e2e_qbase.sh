#!/usr/bin/env bash
# End-to-end: a run over a frozen base stored as nf4 (lora_weight_qtype)
# checkpoints what trains and a frozen reference that records the base's
# storage (the projections nf4, the tied embedding bfloat16:
# lora_embedding_qtype=auto); a resume with the same qtype is bit-exact; a
# resume with another lora_weight_qtype is refused naming both; a checkpoint
# written before the embedding was stored apart (its reference names no
# embedding_qtype: made here by dropping the key) is refused on a resume
# under the default, naming lora_embedding_qtype=nf4, resumes with it, and
# loads as a model source with its nf4 embedding; the plan names the frozen
# base's category. Usage: e2e_qbase.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_qbase.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
common=(model_name=gemma3-tiny dataset_type=synthetic max_target_length=32 sample_tokens=0 checkpoint_period=3
        learning_rate_schedule_steps=6 checkpoint_compression=0 "trainable_parameters_mask=self_attn\\.o_proj norm"
        lora_weight_qtype=nf4 "base_output_directory=$work/runs")
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
assert len(a) == 6 and a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
def shard(r):
    f = open(f"{runs}/{r}/checkpoints/step_00000006/shard_00000-of-00001.gtck", "rb").read()
    h, n = struct.unpack_from("<QQ", f, 16)
    return f[64:h], json.loads(f[h:h + n])
da, ha = shard("straight")
db, hb = shard("resumed")
assert da == db, "final tensors differ"
fz = ha["frozen"]
assert fz["qtype"] == "nf4" and fz["embedding_qtype"] == "bfloat16", fz
assert "embed_tokens.weight" in fz["tensors"] and "layers.0.mlp.up_proj.weight" in fz["tensors"], fz["tensors"][:4]
print("resume bit-exact over an nf4 base:", len(da), "tensor bytes")
PY

# another storage of the base: refused, naming both
if "$bin" train "${common[@]}" steps=9 lora_weight_qtype=int8 run_name=resumed > "$work/c.log" 2>&1; then
  fail "a resume with another lora_weight_qtype was accepted"
fi
grep -q "lora_weight_qtype=nf4" "$work/c.log" && grep -q "lora_weight_qtype=int8" "$work/c.log" ||
  { cat "$work/c.log"; fail "the refusal does not name both qtypes"; }

# A checkpoint of the older layout: the embedding stored as nf4 and named
# nowhere. Made from a run with lora_embedding_qtype=nf4 by dropping the key
# from the frozen reference and the stored config of every shard (the
# header ends the file; its crc32 and the preamble's are rewritten).
old_ckpt() { # <step dir>
  python3 - "$1" <<'PY'
import glob, json, struct, sys, zlib
paths = glob.glob(f"{sys.argv[1]}/shard_*.gtck")
assert paths, sys.argv[1]
for path in paths:
    f = bytearray(open(path, "rb").read())
    hoff, hn = struct.unpack_from("<QQ", f, 16)
    h = json.loads(f[hoff:hoff + hn])
    if "frozen" in h:
        assert h["frozen"].pop("embedding_qtype") == "nf4", h["frozen"]
    h["config"].pop("lora_embedding_qtype")
    js = json.dumps(h, separators=(",", ":")).encode()
    f = f[:hoff] + js
    struct.pack_into("<QI", f, 24, len(js), zlib.crc32(js))
    struct.pack_into("<I", f, 36, zlib.crc32(bytes(f[:36])))
    open(path, "wb").write(f)
PY
}
"$bin" train "${common[@]}" steps=3 lora_embedding_qtype=nf4 run_name=old > "$work/o1.log" 2>&1 ||
  { cat "$work/o1.log"; fail "the run with an nf4 embedding"; }
grep -q "^frozen base: .*stored as nf4$" "$work/o1.log" || { cat "$work/o1.log"; fail "the embedding is not nf4"; }
old_ckpt "$work/runs/old/checkpoints/step_00000003" || fail "rewriting the checkpoint"
if "$bin" train "${common[@]}" steps=6 run_name=old > "$work/o2.log" 2>&1; then
  fail "a resume of an nf4-embedding checkpoint under lora_embedding_qtype=auto was accepted"
fi
grep -q "resume with lora_embedding_qtype=nf4" "$work/o2.log" || { cat "$work/o2.log"; fail "the refusal does not name the key"; }
"$bin" train "${common[@]}" steps=6 lora_embedding_qtype=nf4 run_name=old > "$work/o3.log" 2>&1 ||
  { cat "$work/o3.log"; fail "the resume with lora_embedding_qtype=nf4"; }
grep -q "^resumed from .*step 3" "$work/o3.log" || fail "the old checkpoint did not resume at step 3"
# as a model source, an adapters run of the older layout builds the model it
# trained (its config's missing key read as the base's storage)
lora=(model_name=gemma3-tiny dataset_type=synthetic max_target_length=32 sample_tokens=0 enable_lora=true lora_rank=4
      lora_weight_qtype=nf4 "base_output_directory=$work/runs")
"$bin" train "${lora[@]}" steps=2 checkpoint_period=2 lora_embedding_qtype=nf4 run_name=old_lora > "$work/o4.log" 2>&1 ||
  { cat "$work/o4.log"; fail "the adapters run with an nf4 embedding"; }
old_ckpt "$work/runs/old_lora/checkpoints/step_00000002" || fail "rewriting the adapters checkpoint"
"$bin" train model_name=gemma3-tiny dataset_type=synthetic max_target_length=32 sample_tokens=0 steps=1 \
  "load_parameters_path=$work/runs/old_lora" enable_checkpointing=false "base_output_directory=$work/runs" \
  run_name=from_old > "$work/o5.log" 2>&1 || { cat "$work/o5.log"; fail "training on from the old adapters run"; }
grep -q "^frozen base: .*stored as nf4$" "$work/o5.log" || { cat "$work/o5.log"; fail "the old run's embedding was not kept"; }

# the plan: the frozen base in its own category, at its stored size
"$bin" plan "${common[@]}" > "$work/p.log" 2>&1 || { cat "$work/p.log"; fail "plan"; }
grep -q "frozen base (nf4, embedding bfloat16)" "$work/p.log" ||
  { cat "$work/p.log"; fail "no frozen base category in the plan"; }
# decode reads the checkpoint as a model source: its nf4 base re-created from
# the reference, dequantized into the decoder's float32 layout, continues the
# training sample token for token (float32 and bfloat16)
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 100000 "$work/kjv.txt" > "$work/corpus.txt"
for dt in float32 bfloat16; do
  "$bin" train model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" steps=6 learning_rate=0.01 \
    eval_interval=-1 sample_tokens=20 "sample_prompt=In the beginning" init_weights_seed=3 dtype=$dt \
    trainable_parameters_mask=norm lora_weight_qtype=nf4 "base_output_directory=$work/runs" run_name=d_$dt \
    > "$work/t_$dt.log" 2>&1 || { cat "$work/t_$dt.log"; fail "train with a sample ($dt)"; }
  "$bin" decode "load_parameters_path=$work/runs/d_$dt" dtype=$dt "prompt=In the beginning" max_decode_steps=20 \
    decode_sampling_strategy=weighted decode_sampling_temperature=0.7 decode_seed=$((0x5EED0000 + 3)) \
    > "$work/w_$dt.log" 2>&1 || { cat "$work/w_$dt.log"; fail "decode ($dt)"; }
  want=$(sed -n '/^sample (/,$p' "$work/t_$dt.log" | tail -n +2 | sed '/^run_name=/,$d') # the run's closing line follows
  got=$(sed -n '/^output: /,$p' "$work/w_$dt.log" | sed '1s/^output: //')
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "$dt: decode's '$got' is not the training sample '$want'"
done
# a masked run's nf4 checkpoint loaded into an int8 base: its stored values
# are rounded a second time, which the run says; into nf4 nothing is said
for q in int8 nf4; do
  "$bin" train model_name=gemma3-tiny "load_parameters_path=$work/runs/d_float32" trainable_parameters_mask=norm \
    lora_weight_qtype=$q dataset_type=synthetic steps=1 sample_tokens=0 "base_output_directory=$work/runs" \
    run_name=conv_$q > "$work/conv_$q.log" 2>&1 || { cat "$work/conv_$q.log"; fail "load the nf4 run into $q"; }
done
grep -q "^note: .*'s frozen base is stored as \[nf4, embedding bfloat16\], this run's as \[int8, embedding bfloat16\]: its stored values are converted" \
  "$work/conv_int8.log" || { cat "$work/conv_int8.log"; fail "the nf4-to-int8 conversion is not said"; }
grep -q "frozen base is stored as" "$work/conv_nf4.log" && fail "a load into the same storage says it converted"
echo "e2e_qbase: ok"
