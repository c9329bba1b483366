#!/usr/bin/env bash
# End-to-end DiLoCo over MPI ranks (docs/sharding.md "DiLoCo"), gemma3-tiny
# on a text corpus, every run a few seconds:
#  1. where the maths says it must, DiLoCo equals synchronous data
#     parallelism: 2 replicas of 1 rank, diloco_sync_period=1,
#     diloco_outer_lr=1, diloco_outer_momentum=0 make the new parameters the
#     average of the replicas' one-step updates from the same parameters;
#     for an update linear in the gradient that is the update on the
#     averaged gradient, i.e. 2-rank data parallelism on the same global
#     batch (each replica's rows are its half of it). AdamW is linear in the
#     gradient only to first order; with adam_eps=1, adam_eps_root=1 and no
#     clipping its update is lr m / (sqrt(v + 1) + 1), linear up to a
#     relative v/4 (the gradient's square), so the losses of 8 steps and the
#     evals agree to 1e-3 (measured 3.8e-4), where default AdamW (eps 1e-8:
#     m / sqrt(v), far from linear) parts by more than 1e-2 (measured 8e-2):
#     the replicas really train apart between syncs;
#  2. a replica of one process equals a replica of several ranks bit for
#     bit: 2 replicas x (1 rank x 2 devices) = 2 replicas x (2 ranks x 1
#     device, dcn_fsdp_parallelism=2): every step's metrics as printed and
#     every tensor byte of all checkpoint parts (replica 0's, replica 1's,
#     the outer state);
#  3. resume: 4 steps then 4 more (the checkpoint falls between syncs, with
#     outer state that differs from the parameters) equal 8 steps
#     uninterrupted, metrics and every tensor byte;
#  4. a checkpoint of a run without DiLoCo (2-rank data parallelism) is
#     converted (said so) and trains on; one written by 2 replicas is
#     refused by 4, naming dcn_diloco_parallelism;
#  5. bad input refused naming the keys: replicas that do not divide the
#     ranks, enable_diloco on 1 rank, diloco_sync_period=0;
#  6. a non-finite step in one replica without skip_nonfinite_steps ends
#     the job from that replica's rank;
#  7. with skip_nonfinite_steps=true, a step skipped in replica 1 alone is
#     reported by rank 0 (replica 0's): the console's skipped line, the
#     record's skipped and diloco_replicas_skipped, the closing warning.
# Usage: e2e_diloco.sh <gemtrain> <src>. Exits 77 (skipped) without mpirun or
# with a gemtrain built without MPI.
set -euo pipefail
bin="$1"; src="$2"
# the build's launcher (CMakeLists.txt sets GT_MPIRUN: Open MPI's mpirun or MPICH's Hydra)
mpirun=${GT_MPIRUN:-$(command -v mpirun || true)}
[ -n "$mpirun" ] || { echo "e2e_diloco: no mpirun (install openmpi-bin): skipped"; exit 77; }
work=$(mktemp -d /tmp/gt_e2e_diloco.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
flags=()
if "$mpirun" --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
fi
mpi() { local np=$1; shift; "$mpirun" "${flags[@]}" -np "$np" "$@"; }
"$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" eval_interval=4 eval_steps=1
        sample_tokens=0 checkpoint_compression=0 "base_output_directory=$work/runs")
dl=(enable_diloco=true dcn_diloco_parallelism=2)
if ! mpi 2 "$bin" train "${common[@]}" "${dl[@]}" steps=1 run_name=probe > "$work/probe.log" 2>&1; then
  if grep -q "built without MPI" "$work/probe.log"; then echo "e2e_diloco: gemtrain built without MPI: skipped"; exit 77; fi
  cat "$work/probe.log"; fail "a first DiLoCo run"
fi

# losses <run a> <run b> <tol> [<min gap>]: every step's loss and eval loss
# within tol; with min gap, some step's loss parts by more than it
losses() {
  python3 - "$work/runs/$1" "$work/runs/$2" "$3" "${4:-}" <<'PY' || fail "$1 against $2"
import json, os, sys
a, b, tol, gap = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def load(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
la, lb = load(a), load(b)
assert len(la) == len(lb) == 8, (len(la), len(lb))
worst = 0.0
for x, y in zip(la, lb):
    for k in ("loss", "eval_loss"):
        if k in x or k in y:
            d = abs(x[k] - y[k])
            worst = max(worst, d)
            if not gap:
                assert d <= tol, (x["step"], k, x[k], y[k], d)
print(f"  {os.path.basename(a)} vs {os.path.basename(b)}: largest loss difference {worst:.3g}")
if gap:
    assert worst > float(gap), (worst, gap)
PY
}

# same <run a> <run b>: metrics as printed and every tensor byte of every
# checkpoint part at the last step
same() {
  python3 - "$work/runs/$1" "$work/runs/$2" <<'PY' || fail "$1 and $2 differ"
import glob, json, os, struct, sys
a, b = sys.argv[1], sys.argv[2]
keys = ("step", "loss", "lm_loss", "grad_norm", "total_weights", "learning_rate", "eval_loss")
def fields(d):
    out = []
    for l in open(os.path.join(d, "metrics.jsonl")):
        if l.strip():
            out.append({k: v for k, v in (p.split(": ", 1) for p in l.strip().strip("{}").split(", "))
                        if k.strip('"') in keys})
    return out
fa, fb = fields(a), fields(b)
assert fa == fb and fa, (fa, fb)
def tensors(d):
    step = open(os.path.join(d, "checkpoints", "latest")).read().strip()
    out = {}
    for f in glob.glob(os.path.join(d, "**", step, "shard_*.gtck"), recursive=True):
        raw = open(f, "rb").read()
        hoff, = struct.unpack_from("<Q", raw, 16)
        out[os.path.relpath(f, d)] = raw[64:hoff]
    return out
ta, tb = tensors(a), tensors(b)
parts = {os.path.dirname(os.path.dirname(k)) for k in ta}
assert parts == {"checkpoints", "diloco/outer", "diloco/replica_1"}, parts
assert ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
for k in ta:
    assert ta[k] == tb[k], k
print(f"  {os.path.basename(a)} = {os.path.basename(b)}: {len(fa)} steps, {len(ta)} shard files")
PY
}

echo "1. sync period 1, outer lr 1, no momentum, AdamW linear in the gradient = 2-rank data parallelism"
lin=(gradient_clipping_threshold=0 adam_eps=1 adam_eps_root=1 learning_rate=0.1 adam_weight_decay=0
     enable_checkpointing=false steps=8)
one=(diloco_sync_period=1 diloco_outer_lr=1 diloco_outer_momentum=0)
mpi 2 "$bin" train "${common[@]}" "${lin[@]}" "${dl[@]}" "${one[@]}" run_name=lin_dl > "$work/l1.log" 2>&1 \
  || { cat "$work/l1.log"; fail "DiLoCo, linear AdamW"; }
mpi 2 "$bin" train "${common[@]}" "${lin[@]}" run_name=lin_dp > "$work/l2.log" 2>&1 \
  || { cat "$work/l2.log"; fail "data parallelism, linear AdamW"; }
losses lin_dl lin_dp 1e-3
mpi 2 "$bin" train "${common[@]}" enable_checkpointing=false steps=8 "${dl[@]}" "${one[@]}" run_name=adam_dl \
  > "$work/a1.log" 2>&1 || { cat "$work/a1.log"; fail "DiLoCo, AdamW"; }
mpi 2 "$bin" train "${common[@]}" enable_checkpointing=false steps=8 run_name=adam_dp > "$work/a2.log" 2>&1 \
  || { cat "$work/a2.log"; fail "data parallelism, AdamW"; }
losses adam_dl adam_dp 0 1e-2

echo "2. 2 replicas x (1 rank x 2 devices) = 2 replicas x (2 ranks x 1 device)"
ck=(steps=8 checkpoint_period=4 learning_rate_schedule_steps=8 diloco_sync_period=3)
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" num_devices=2 run_name=proc > "$work/p.log" 2>&1 \
  || { cat "$work/p.log"; fail "replicas of one process"; }
mpi 4 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=ranks \
  > "$work/r.log" 2>&1 || { cat "$work/r.log"; fail "replicas of two ranks"; }
same proc ranks

echo "3. resume between syncs = uninterrupted"
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" run_name=whole > "$work/w.log" 2>&1 \
  || { cat "$work/w.log"; fail "uninterrupted"; }
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" steps=4 run_name=split > "$work/s1.log" 2>&1 \
  || { cat "$work/s1.log"; fail "first part"; }
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" run_name=split > "$work/s2.log" 2>&1 \
  || { cat "$work/s2.log"; fail "resume"; }
grep -q "^DiLoCo: resumed the outer parameters and momentum from .*diloco/outer/step_00000004" "$work/s2.log" \
  || { cat "$work/s2.log"; fail "no outer-state resume line"; }
same whole split

echo "3b. replica 0's latest checkpoint corrupt: every replica resumes the step it falls back to"
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" steps=6 checkpoint_period=2 run_name=fall > "$work/f1.log" 2>&1 \
  || { cat "$work/f1.log"; fail "first part (fallback)"; }
python3 - "$work/runs/fall/checkpoints/step_00000006" <<'PY'
import glob, sys
f = sorted(glob.glob(sys.argv[1] + "/shard_*.gtck"))[0]
raw = bytearray(open(f, "rb").read())
raw[-9] ^= 0xFF  # a byte of the tensor data: its checksum no longer matches
open(f, "wb").write(raw)
PY
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" "${ck[@]}" run_name=fall > "$work/f2.log" 2>&1 \
  || { cat "$work/f2.log"; fail "resume after a corrupt latest"; }
grep -q "^resumed from .*fall/checkpoints/step_00000004" "$work/f2.log" \
  || { cat "$work/f2.log"; fail "replica 0 did not fall back to step 4"; }
grep -q "^DiLoCo: resumed the outer parameters and momentum from .*diloco/outer/step_00000004" "$work/f2.log" \
  || { cat "$work/f2.log"; fail "the outer state is not step 4's"; }
python3 - "$work/runs/whole" "$work/runs/fall" <<'PY' || fail "the fallen-back run differs from the uninterrupted one"
import glob, os, struct, sys
def tensors(d):
    out = {}
    for f in glob.glob(os.path.join(d, "**", "step_00000008", "shard_*.gtck"), recursive=True):
        raw = open(f, "rb").read()
        hoff, = struct.unpack_from("<Q", raw, 16)
        out[os.path.relpath(f, d)] = raw[64:hoff]
    return out
ta, tb = tensors(sys.argv[1]), tensors(sys.argv[2])
assert ta and ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
for k in ta:
    assert ta[k] == tb[k], k
print(f"  whole = fall at step 8: {len(ta)} shard files")
PY

echo "4. a checkpoint without DiLoCo is converted; fewer replicas' is refused"
mpi 2 "$bin" train "${common[@]}" steps=2 save_checkpoint_on_completion=true run_name=conv > "$work/c1.log" 2>&1 \
  || { cat "$work/c1.log"; fail "data-parallel run"; }
mpi 2 "$bin" train "${common[@]}" "${dl[@]}" steps=4 diloco_sync_period=2 run_name=conv > "$work/c2.log" 2>&1 \
  || { cat "$work/c2.log"; fail "converted resume"; }
grep -q "^DiLoCo: the checkpoint has no outer state (a run without DiLoCo): converted" "$work/c2.log" \
  || { cat "$work/c2.log"; fail "no conversion line"; }
grep -q "^resumed from .*conv/checkpoints/step_00000002" "$work/c2.log" || { cat "$work/c2.log"; fail "not resumed"; }
[ -d "$work/runs/conv/diloco/outer/step_00000004" ] || fail "the converted run wrote no outer state"
if mpi 4 "$bin" train "${common[@]}" enable_diloco=true dcn_diloco_parallelism=4 steps=6 diloco_sync_period=2 \
     run_name=conv > "$work/c3.log" 2>&1; then
  cat "$work/c3.log"; fail "4 replicas resumed 2 replicas' checkpoint"
fi
grep -q "written by DiLoCo with fewer replicas: it has no part for replica 2 .*dcn_diloco_parallelism" "$work/c3.log" \
  || { cat "$work/c3.log"; fail "no refusal naming dcn_diloco_parallelism"; }

echo "5. bad input"
if mpi 3 "$bin" train "${common[@]}" "${dl[@]}" steps=1 run_name=bad3 > "$work/b1.log" 2>&1; then fail "3 ranks ran"; fi
grep -q "key 'dcn_diloco_parallelism' = 2 does not divide the 3 ranks" "$work/b1.log" || { cat "$work/b1.log"; fail "3 ranks"; }
if "$bin" train "${common[@]}" "${dl[@]}" steps=1 run_name=bad1 > "$work/b2.log" 2>&1; then fail "1 rank ran"; fi
grep -q "key 'enable_diloco' = true with dcn_diloco_parallelism = 2, but the run has 1 rank" "$work/b2.log" \
  || { cat "$work/b2.log"; fail "1 rank"; }
if mpi 2 "$bin" train "${common[@]}" "${dl[@]}" diloco_sync_period=0 steps=1 run_name=bad0 > "$work/b3.log" 2>&1; then
  fail "sync period 0 ran"
fi
grep -q "key 'diloco_sync_period' = 0" "$work/b3.log" || { cat "$work/b3.log"; fail "sync period 0"; }
echo "6. a non-finite step in one replica ends the job from that replica's rank"
# (the step's norm is one replica's: the other replica would go on to the
# next sync and wait there until collective_timeout_seconds)
rc=0
"$mpirun" "${flags[@]}" -np 1 env GEMTRAIN_TEST_NAN_STEP=3 "$bin" train "${common[@]}" "${dl[@]}" steps=8 \
  diloco_sync_period=2 collective_timeout_seconds=60 run_name=nan : -np 1 "$bin" train "${common[@]}" "${dl[@]}" \
  steps=8 diloco_sync_period=2 collective_timeout_seconds=60 run_name=nan > "$work/n1.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$work/n1.log"; fail "a replica's non-finite step ended the job with status 0"; }
grep -q "rank 0 of 2: train: step 3 has loss .*stopping without applying it" "$work/n1.log" \
  || { cat "$work/n1.log"; fail "the non-finite step is not reported by its replica's rank"; }
grep -q -i "timed out\|timeout" "$work/n1.log" && { cat "$work/n1.log"; fail "the other replica waited for the timeout"; }

echo "7. a step skipped in replica 1 alone is reported"
sk=("${common[@]}" "${dl[@]}" steps=6 diloco_sync_period=2 skip_nonfinite_steps=true enable_checkpointing=false
    eval_interval=-1 run_name=skip1)
"$mpirun" "${flags[@]}" -np 1 "$bin" train "${sk[@]}" : -np 1 env GEMTRAIN_TEST_NAN_STEP=2 "$bin" train "${sk[@]}" \
  > "$work/s1.log" 2>&1 || { cat "$work/s1.log"; fail "a step skipped in replica 1"; }
grep -q "^skipped step: 2, .*(not finite; parameters and optimizer unchanged) in 1 of 2 DiLoCo replicas$" "$work/s1.log" \
  || { cat "$work/s1.log"; fail "replica 1's skipped step is not on the console"; }
grep -q "^warning: 1 of the 6 steps run were skipped (non-finite loss or gradient) in one or more DiLoCo replicas" \
  "$work/s1.log" || { cat "$work/s1.log"; fail "no closing warning for replica 1's skipped step"; }
python3 - "$work/runs/skip1/metrics.jsonl" <<'PY' || fail "replica 1's skipped step is not in metrics.jsonl"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = {r["step"]: (r.get("skipped", False), r.get("diloco_replicas_skipped", 0)) for r in recs}
want = {s: ((True, 1) if s == 2 else (False, 0)) for s in range(6)}
assert got == want, got
PY

echo "e2e_diloco: ok"
