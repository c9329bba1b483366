#!/usr/bin/env bash
# End-to-end: the spike guard (skip_step_on_spikes) with the real binary on
# text (byte tokens, file order). A corpus with a planted block of random
# bytes exactly where step K's rows are (several times the loss of text) is
# trained for one step more than the same corpus without the block:
#  1. on 1 device, 2 devices and 2 MPI ranks x 1 device, the guard skips
#     that step and only it (metrics.jsonl's spike_skipped and skipped_steps;
#     the checkpoint's state: one step not applied, AdamW step one behind
#     the step count) and the run ends bit for bit
#     where the run without the block ends: every later step's loss and
#     gradient norm as metrics.jsonl prints them, and the final weights and
#     AdamW moments byte for byte;
#  2. 2 ranks x 1 device is 1 rank x 2 devices bit for bit with the guard
#     (the decision is taken from all-reduced values on every rank);
#  3. a 2-rank run with a checkpoint after the spike, resumed, is the
#     uninterrupted run bit for bit, window included (the checkpoints' guard
#     records are the same);
#  4. with the guard off the block is applied (the AdamW step counts it) and
#     the run ends elsewhere, its window still taking every step's values;
#  5. a first segment with the guard off, resumed with it on, is the run
#     with the guard on throughout bit for bit, window included (the window
#     kept its values through the segment instead of resuming with older ones).
# Usage: e2e_spike.sh <gemtrain> <src>. The MPI cases are skipped (with a
# note) without mpirun or with a gemtrain built without MPI.
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_spike.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if [ -s "$src/data/kjv.txt" ]; then cp "$src/data/kjv.txt" "$work/kjv.txt"; else "$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null; fi

# A step reads 2 rows of T + 1 = 65 byte tokens; the text's token 0 is <bos>,
# so step K's rows are bytes [K*130 - 1, (K+1)*130 - 1) of the file.
K=20
python3 - "$work" "$K" <<'PY'
import random, sys
work, k = sys.argv[1], int(sys.argv[2])
text = open(f"{work}/kjv.txt", "rb").read()[:60000]
at = k * 130 - 1
rnd = random.Random(7)
block = bytes(rnd.randrange(256) for _ in range(130))
open(f"{work}/clean.txt", "wb").write(text)
open(f"{work}/planted.txt", "wb").write(text[:at] + block + text[at:])
PY
common=(model_name=gemma3-tiny dataset_type=text enable_data_shuffling=false eval_interval=-1 sample_tokens=0
        learning_rate=0.01 warmup_steps_fraction=0 learning_rate_schedule_steps=40 checkpoint_compression=0
        save_checkpoint_on_completion=true "base_output_directory=$work/runs" skip_step_on_spikes=true
        skip_step_interval=8)
planted=("${common[@]}" "dataset_path=$work/planted.txt" steps=27)
clean=("${common[@]}" "dataset_path=$work/clean.txt" steps=26)

# state <run> [record]: the final checkpoint's step, AdamW step, the guard's
# pushes and steps not applied; with "record" its whole record (JSON)
state() {
  python3 - "$work/runs/$1" "${2:-}" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
step = open(os.path.join(d, "checkpoints", "latest")).read().strip()
f = os.path.join(d, "checkpoints", step, "shard_00000-of-%05d.gtck" % len(
    [x for x in os.listdir(os.path.join(d, "checkpoints", step)) if x.startswith("shard_")]))
raw = open(f, "rb").read()
hoff, hlen = struct.unpack_from("<QQ", raw, 16)
st = json.loads(raw[hoff:hoff + hlen])["state"]
g = st.get("spike_guard", {})
if sys.argv[2] == "record": print(json.dumps(g, sort_keys=True))
else: print(st["step"], st["opt_step"], g.get("count", 0), g.get("skipped_steps", 0))
PY
}

# same <a> <b> <shift>: step s+shift of a and step s of b (s from K on for a
# shift of 1; every step for 0) print the same loss and gradient norm, and
# the final weights and moments are the same bytes
same() {
  PYTHONPATH="$src/tests" python3 - "$work/runs/$1" "$work/runs/$2" "$3" "$K" <<'PY' || fail "$1 and $2 differ"
import os, sys, gt_runs
a, b, shift, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def fields(d):
    out = []
    for line in open(os.path.join(d, "metrics.jsonl")):
        if not line.strip(): continue
        f = dict(p.split(": ", 1) for p in line.strip().strip("{}").split(", "))
        out.append((f['"loss"'], f['"grad_norm"']))
    return out
fa, fb = fields(a), fields(b)
assert len(fa) == len(fb) + shift, (len(fa), len(fb))
for s in range(len(fb)):
    sa = s + shift if s >= k else s
    assert fa[sa] == fb[s], (s, fa[sa], fb[s])
ta, tb = gt_runs.tensor_bytes(a)[1], gt_runs.tensor_bytes(b)[1]
assert ta.keys() == tb.keys() and ta, (ta.keys(), tb.keys())
for n in ta:
    assert ta[n] == tb[n], ("weights differ", n)
print(f"{os.path.basename(a)} = {os.path.basename(b)}: {len(fb)} steps compared, {sum(map(len, ta.values()))} tensor bytes")
PY
}

# the planted step's loss is a spike (several times the step before's), and
# metrics.jsonl says that step and only it was skipped as one
spiky() {
  python3 - "$work/runs/$1/metrics.jsonl" "$K" <<'PY' || fail "$1: step $K is no spike"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
k = int(sys.argv[2])
assert m[k]["loss"] > 1.5 * m[k - 1]["loss"], (m[k]["loss"], m[k - 1]["loss"])
assert [j["step"] for j in m if j.get("spike_skipped")] == [k], [j["step"] for j in m if j.get("spike_skipped")]
assert [j.get("skipped_steps", 0) for j in m] == [0] * k + [1] * (len(m) - k)
PY
}

# 1. one device, two devices
for dev in 1 2; do
  pd=$((2 / dev))
  "$bin" train "${planted[@]}" num_devices=$dev per_device_batch_size=$pd run_name=p$dev > "$work/p$dev.log" 2>&1 ||
    { cat "$work/p$dev.log"; fail "planted, $dev device(s)"; }
  "$bin" train "${clean[@]}" num_devices=$dev per_device_batch_size=$pd run_name=c$dev > "$work/c$dev.log" 2>&1 ||
    { cat "$work/c$dev.log"; fail "clean, $dev device(s)"; }
  spiky p$dev
  [ "$(state p$dev)" = "27 26 27 1" ] || fail "p$dev: step, AdamW step, pushes, skipped = $(state p$dev); expected 27 26 27 1"
  [ "$(state c$dev)" = "26 26 26 0" ] || fail "c$dev: step, AdamW step, pushes, skipped = $(state c$dev); expected 26 26 26 0"
  same p$dev c$dev 1
done

# 4. the guard off: the block is applied
"$bin" train "${planted[@]}" skip_step_on_spikes=false num_devices=1 per_device_batch_size=2 run_name=off \
  > "$work/off.log" 2>&1 || { cat "$work/off.log"; fail "guard off"; }
[ "$(state off)" = "27 27 27 0" ] || fail "guard off: $(state off); expected 27 27 27 0"
if (same off c1 1 > /dev/null 2>&1); then fail "the guard off ends where the run without the block ends"; fi

# 5. steps 0-9 with the guard off (no spike among them), then the rest with it on
"$bin" train "${planted[@]}" steps=10 skip_step_on_spikes=false num_devices=1 per_device_batch_size=2 run_name=seg \
  > "$work/seg1.log" 2>&1 || { cat "$work/seg1.log"; fail "guard off, first segment"; }
"$bin" train "${planted[@]}" num_devices=1 per_device_batch_size=2 run_name=seg > "$work/seg2.log" 2>&1 ||
  { cat "$work/seg2.log"; fail "guard on, resumed"; }
grep -q "resumed from .*step_00000010" "$work/seg2.log" || { cat "$work/seg2.log"; fail "seg: no resume"; }
spiky seg
same seg p1 0
[ "$(state seg)" = "$(state p1)" ] || fail "guard off then on: $(state seg); on throughout: $(state p1)"
[ "$(state seg record)" = "$(state p1 record)" ] ||
  fail "the guard's records differ: $(state seg record) after a segment with it off, $(state p1 record) on throughout"

# 2, 3. two MPI ranks
mpirun=$(command -v mpirun || true)
if [ -z "$mpirun" ]; then echo "e2e_spike: no mpirun: the MPI cases skipped"; exit 0; fi
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
mpi() { "$mpirun" "${flags[@]}" -np 2 "$@"; }
rc=0
mpi "$bin" train "${planted[@]}" num_devices=1 per_device_batch_size=1 dcn_fsdp_parallelism=2 run_name=r2 \
  > "$work/r2.log" 2>&1 || rc=$?
if grep -q "built without MPI" "$work/r2.log"; then echo "e2e_spike: gemtrain built without MPI: the MPI cases skipped"; exit 0; fi
[ "$rc" = 0 ] || { cat "$work/r2.log"; fail "2 ranks"; }
[ "$(state r2)" = "27 26 27 1" ] || fail "r2: $(state r2); expected 27 26 27 1"
spiky r2
same r2 p2 0
same r2 c2 1
# a checkpoint after the spike (step 23), then the rest
mpi "$bin" train "${planted[@]}" steps=23 num_devices=1 per_device_batch_size=1 dcn_fsdp_parallelism=2 run_name=rr \
  > "$work/rr1.log" 2>&1 || { cat "$work/rr1.log"; fail "2 ranks, first half"; }
[ "$(state rr)" = "23 22 23 1" ] || fail "rr at step 23: $(state rr); expected 23 22 23 1"
mpi "$bin" train "${planted[@]}" num_devices=1 per_device_batch_size=1 dcn_fsdp_parallelism=2 run_name=rr \
  > "$work/rr2.log" 2>&1 || { cat "$work/rr2.log"; fail "2 ranks, resumed"; }
grep -q "resumed from .*step_00000023" "$work/rr2.log" || { cat "$work/rr2.log"; fail "no resume"; }
same rr r2 0
[ "$(state rr)" = "$(state r2)" ] || fail "resumed $(state rr), straight $(state r2)"
[ "$(state rr record)" = "$(state r2 record)" ] || fail "the guard's records differ: $(state rr record) resumed, $(state r2 record) straight"
echo "e2e_spike: ok"
