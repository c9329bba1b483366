#!/usr/bin/env bash
# End-to-end over MPI ranks (docs/sharding.md "Across processes"):
#  1. the same global mesh gives the same run bit for bit wherever its
#     devices live: 2 ranks x 1 device = 1 rank x 2 devices (dense
#     gemma3-tiny, and expert-parallel gemma4-tiny-moe), 2 ranks x 2 devices
#     = 1 rank x 4 devices: every step's loss, lm_loss, grad_norm (and MoE
#     lb loss) as printed with 9 significant digits, and the final weights
#     and AdamW moments byte for byte (the tensor bytes of the checkpoint);
#     the same with dtype=bfloat16 and mu_dtype=bfloat16 (bf16 gathers
#     between ranks: 2/3 of the float32 run's bytes); and with
#     trainable_parameters_mask (a frozen group);
#  2. a checkpoint written by 2 ranks resumes on 1 rank (bit for bit the
#     uninterrupted run's later steps: the same global mesh) and on 2 ranks
#     x 2 devices (the same as 1 rank x 4 devices resuming it);
#  3. stopping: SIGUSR1 to mpirun (forwarded to every rank) and SIGTERM to
#     the ranks end the run after a checkpoint with exit 0;
#  4. failure: a rank that hangs (SIGSTOP) makes the other exit non-zero
#     within collective_timeout_seconds with a message naming it; a rank
#     killed mid-run ends the job non-zero with the dead rank named; a rerun
#     resumes from the last committed checkpoint;
#  5. ranks whose configurations differ (init_weights_seed, steps) are
#     refused at once naming the key and both values;
#  6. a token shard truncated mid-run stops both ranks after a checkpoint
#     of the last good step, saying the file changed.
#  7. a rank that cannot read the newest checkpoint (a read error injected
#     on rank 1 alone) walks back by itself: the ranks compare the steps
#     they would resume from and refuse, naming both, before a step runs and
#     without rewriting config.json; without the error both resume the newest.
#  8. a -1 dcn axis the ranks started cannot fill is refused naming it.
# Usage: e2e_mpi.sh <gemtrain> <src>. Exits 77 (skipped) without mpirun or
# with a gemtrain built without MPI.
set -euo pipefail
bin="$1"; src="$2"
# the build's launcher (CMakeLists.txt sets GT_MPIRUN: Open MPI's mpirun or MPICH's Hydra)
mpirun=${GT_MPIRUN:-$(command -v mpirun || true)}
[ -n "$mpirun" ] || { echo "e2e_mpi: no mpirun (install openmpi-bin): skipped"; exit 77; }
work=$(mktemp -d /tmp/gt_e2e_mpi.XXXXXX)
trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
flags=(); openmpi=0
if "$mpirun" --version 2> /dev/null | grep -qE "Open MPI|OpenRTE"; then
  openmpi=1
  flags=(--oversubscribe)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
fi
mpi() { local np=$1; shift; "$mpirun" "${flags[@]}" -np "$np" "$@"; }
# in the background, with $! the pid of mpirun itself (exec): <log> <np> <args...>
mpi_bg() { local log=$1 np=$2; shift 2; (exec "$mpirun" "${flags[@]}" -np "$np" "$@" > "$log" 2>&1) & }
"$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
common=(dataset_type=text "dataset_path=$work/corpus.txt" eval_interval=5 eval_steps=2 sample_tokens=0
        checkpoint_compression=0 save_checkpoint_on_completion=true "base_output_directory=$work/runs")
if ! mpi 2 "$bin" train model_name=gemma3-tiny steps=1 num_devices=1 dcn_fsdp_parallelism=2 "${common[@]}" \
     run_name=probe > "$work/probe.log" 2>&1; then
  if grep -q "built without MPI" "$work/probe.log"; then echo "e2e_mpi: gemtrain built without MPI: skipped"; exit 77; fi
  cat "$work/probe.log"; fail "a first 2-rank run"
fi
grep -q "^mesh: 2 ranks x 1 device per rank = 2 devices; data 1 (dcn 1 x ici 1), fsdp 2 (dcn 2 x ici 1)" \
  "$work/probe.log" || { cat "$work/probe.log"; fail "no mesh line"; }

# compare <run a> <run b>: the metrics of every step and the final state
compare() {
  PYTHONPATH="$src/tests" python3 - "$work/runs/$1" "$work/runs/$2" <<'PY' || fail "$1 and $2 differ"
import sys, gt_runs
print(gt_runs.same_run(sys.argv[1], sys.argv[2],
                       ("step", "loss", "lm_loss", "moe_lb_loss", "grad_norm", "total_weights", "learning_rate", "eval_loss")))
PY
}

# 1. layouts of one global mesh
tiny=(model_name=gemma3-tiny steps=10 "${common[@]}")
mpi 2 "$bin" train "${tiny[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=r2x1 > "$work/r2x1.log" 2>&1 ||
  { cat "$work/r2x1.log"; fail "2 ranks x 1 device"; }
"$bin" train "${tiny[@]}" num_devices=2 run_name=r1x2 > "$work/r1x2.log" 2>&1 || { cat "$work/r1x2.log"; fail "1 x 2"; }
compare r2x1 r1x2
moe=(model_name=gemma4-tiny-moe steps=10 per_device_batch_size=2 "${common[@]}")
mpi 2 "$bin" train "${moe[@]}" num_devices=1 dcn_expert_parallelism=2 run_name=m2x1 > "$work/m2x1.log" 2>&1 ||
  { cat "$work/m2x1.log"; fail "MoE 2 ranks x 1 device"; }
"$bin" train "${moe[@]}" num_devices=2 ici_expert_parallelism=2 run_name=m1x2 > "$work/m1x2.log" 2>&1 ||
  { cat "$work/m1x2.log"; fail "MoE 1 x 2"; }
compare m2x1 m1x2
mpi 2 "$bin" train "${tiny[@]}" num_devices=2 dcn_fsdp_parallelism=2 run_name=r2x2 > "$work/r2x2.log" 2>&1 ||
  { cat "$work/r2x2.log"; fail "2 ranks x 2 devices"; }
"$bin" train "${tiny[@]}" num_devices=4 run_name=r1x4 > "$work/r1x4.log" 2>&1 || { cat "$work/r1x4.log"; fail "1 x 4"; }
compare r2x2 r1x4
# dtype=bfloat16 with mu_dtype=bfloat16: the weights cross ranks as 2-byte
# bf16 gathers, and the bf16 first moments are exported (checkpoint shards,
# float32 files) from each rank; still 2 ranks x 1 device = 1 rank x 2
# devices bit for bit (losses, weights and both moments)
bf=(model_name=gemma3-tiny steps=6 dtype=bfloat16 mu_dtype=bfloat16 "${common[@]}")
mpi 2 "$bin" train "${bf[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=b2x1 > "$work/b2x1.log" 2>&1 ||
  { cat "$work/b2x1.log"; fail "bf16: 2 ranks x 1 device"; }
"$bin" train "${bf[@]}" num_devices=2 run_name=b1x2 > "$work/b1x2.log" 2>&1 || { cat "$work/b1x2.log"; fail "bf16: 1 x 2"; }
compare b2x1 b1x2
# trainable_parameters_mask: the frozen group is sharded and gathered like the
# trainable one (parameters only) and the checkpoint holds what trains, so a
# masked run is the same on 2 ranks x 1 device as on 1 rank x 2 devices
mk=(model_name=gemma3-tiny steps=6 "trainable_parameters_mask=self_attn norm" "${common[@]}")
mpi 2 "$bin" train "${mk[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=k2x1 > "$work/k2x1.log" 2>&1 ||
  { cat "$work/k2x1.log"; fail "mask: 2 ranks x 1 device"; }
"$bin" train "${mk[@]}" num_devices=2 run_name=k1x2 > "$work/k1x2.log" 2>&1 || { cat "$work/k1x2.log"; fail "mask: 1 x 2"; }
compare k2x1 k1x2
# and its messages are smaller: per step a float32 run sends ~4n bytes of
# gathers (2 per unit, n/2 elements each) and ~2n of reduce-scatter, bf16
# ~2n + 2n, so bf16 / float32 = 2/3 (uneven shards and the 3 doubles of
# sums move it by a few bytes; test_fsdp_bf16 counts it exactly)
python3 - "$work/runs/r2x1/metrics.jsonl" "$work/runs/b2x1/metrics.jsonl" <<'PY' || fail "bf16 bytes over ranks"
import json, sys
f = [json.loads(l) for l in open(sys.argv[1])][0]
b = [json.loads(l) for l in open(sys.argv[2])]
for s in b:
    assert s["comm_bytes_dcn"] == s["comm_bytes"] > 0, s  # 1 device per rank: every byte crosses
    r = s["comm_bytes_dcn"] / f["comm_bytes_dcn"]
    assert abs(r - 2 / 3) < 1e-3, (s["comm_bytes_dcn"], f["comm_bytes_dcn"], r)
print("bf16 bytes to the other rank:", b[0]["comm_bytes_dcn"], "float32:", f["comm_bytes_dcn"])
PY
# LoRA adapters over an nf4 base, bf16, 2 ranks x 2 devices: only the
# adapters' gradients are reduce-scattered, the base is gathered raw
lq=(model_name=gemma3-tiny steps=2 enable_lora=true lora_rank=4 lora_weight_qtype=nf4 dtype=bfloat16 "${common[@]}")
mpi 2 "$bin" train "${lq[@]}" num_devices=2 dcn_fsdp_parallelism=2 run_name=l2x2 > "$work/l2x2.log" 2>&1 ||
  { cat "$work/l2x2.log"; fail "LoRA nf4: 2 ranks x 2 devices"; }
# the plan's bytes per step, in all and to other ranks (busiest device), are
# what the runs measured: the whole model, a mask, and adapters over a frozen base
for r in "r2x1 1 tiny" "r2x2 2 tiny" "k2x1 1 mk" "l2x2 2 lq"; do
  set -- $r
  declare -n keys=$3
  "$bin" plan --json "${keys[@]}" num_devices=$2 dcn_fsdp_parallelism=2 > "$work/plan_$1.json"
  python3 - "$work/plan_$1.json" "$work/runs/$1/metrics.jsonl" <<'PY' || fail "plan and run disagree on bytes for $1"
import json, sys
p = json.load(open(sys.argv[1]))
m = [json.loads(l) for l in open(sys.argv[2])]
assert p["num_ranks"] == 2, p["num_ranks"]
for s in m:
    assert s["comm_bytes"] == p["comm_bytes_per_step_per_device"], (s["comm_bytes"], p["comm_bytes_per_step_per_device"])
    assert s["comm_bytes_dcn"] == p["comm_bytes_dcn_per_step_per_device"], (s["comm_bytes_dcn"], p["comm_bytes_dcn_per_step_per_device"])
    assert s["comm_seconds"] > 0
PY
done
# rank 0 alone prints: one step line per step
[ "$(grep -c '^completed step: ' "$work/r2x1.log")" = 10 ] || fail "the step lines are not printed once"

# 2. a 2-rank checkpoint resumes on other layouts: 10 steps on 2 ranks with
# checkpoints at 5 and 10, rewound to step 5 (latest is the commit point),
# then continued to 10 on 1 rank x 2 devices (the same global mesh: the
# uninterrupted run, bit for bit) and on 2 ranks x 2 devices (= 1 x 4 doing
# the same)
half=(model_name=gemma3-tiny steps=10 checkpoint_period=5 "${common[@]}")
mpi 2 "$bin" train "${half[@]}" num_devices=1 dcn_fsdp_parallelism=2 run_name=c2x1 > "$work/c2x1.log" 2>&1 ||
  { cat "$work/c2x1.log"; fail "checkpoint on 2 ranks"; }
ls "$work/runs/c2x1/checkpoints/step_00000005/shard_00000-of-00002.gtck" \
   "$work/runs/c2x1/checkpoints/step_00000005/shard_00001-of-00002.gtck" > /dev/null || fail "2 ranks wrote no shards"
rm -rf "$work/runs/c2x1/checkpoints/step_00000010"
echo step_00000005 > "$work/runs/c2x1/checkpoints/latest"
for r in c1x2 c2x2 c1x4; do cp -r "$work/runs/c2x1" "$work/runs/$r"; done
"$bin" train "${half[@]}" num_devices=2 run_name=c1x2 > "$work/c1x2.log" 2>&1 ||
  { cat "$work/c1x2.log"; fail "resume on 1 rank"; }
grep -q "^resumed from .*step_00000005" "$work/c1x2.log" || fail "1 rank did not resume"
compare c1x2 r2x1
mpi 2 "$bin" train "${half[@]}" num_devices=2 dcn_fsdp_parallelism=2 run_name=c2x2 > "$work/c2x2.log" 2>&1 ||
  { cat "$work/c2x2.log"; fail "resume on 2 ranks x 2 devices"; }
grep -q "^resumed from .*step_00000005" "$work/c2x2.log" || fail "2 x 2 did not resume"
"$bin" train "${half[@]}" num_devices=4 run_name=c1x4 > "$work/c1x4.log" 2>&1 || fail "resume on 1 x 4"
compare c2x2 c1x4

# 3.-6. below drive Open MPI's mpirun (signals it forwards, its exit status,
# its report of a killed rank, MPMD lines); under another launcher (an MPICH
# build's Hydra) the layouts and resumes above are the test
if [ "$openmpi" = 0 ]; then
  echo "e2e_mpi: $mpirun is not Open MPI's: parts 1-2 only (layouts, resume); 1 passed, 0 failed"
  exit 0
fi

# 3. stopping cleanly
long=(model_name=gemma3-tiny steps=100000 checkpoint_period=100000 "${common[@]}" num_devices=1
      dcn_fsdp_parallelism=2 collective_timeout_seconds=60)
wait_steps() { # <run> <n>: until metrics.jsonl has n lines (or the run ended); 5 minutes at most: a
  # busy machine can take minutes to start two ranks
  for _ in $(seq 1 1500); do
    [ -f "$work/runs/$1/metrics.jsonl" ] && [ "$(wc -l < "$work/runs/$1/metrics.jsonl")" -ge "$2" ] && return 0
    kill -0 "$pid" 2>/dev/null || { tail -5 "$work/$1.log"; fail "$1 ended before $2 steps"; }
    sleep 0.2
  done
  fail "$1 did not reach $2 steps"
}
rank_pid() { # <run> <rank>: the pid of that rank's gemtrain
  for p in $(pgrep -f "run_name=$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
mpi_bg "$work/usr1.log" 2 "$bin" train "${long[@]}" run_name=usr1
pid=$!
wait_steps usr1 3
kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" = 5 ] || { cat "$work/usr1.log"; fail "SIGUSR1 to mpirun: exit $rc, expected 5 (stopped)"; }
grep -q "^stopped by SIGUSR1 after step" "$work/usr1.log" || { cat "$work/usr1.log"; fail "no stop line"; }
[ -f "$work/runs/usr1/checkpoints/latest" ] || fail "SIGUSR1: no checkpoint"
mpi_bg "$work/term.log" 2 "$bin" train "${long[@]}" run_name=term
pid=$!
wait_steps term 3
for r in 0 1; do kill -TERM "$(rank_pid term $r)"; done
rc=0; wait "$pid" || rc=$?
[ "$rc" = 5 ] || { cat "$work/term.log"; fail "SIGTERM to the ranks: exit $rc, expected 5 (stopped)"; }
grep -q "^stopped by SIGTERM after step" "$work/term.log" || { cat "$work/term.log"; fail "no SIGTERM stop line"; }

# 4. failures: a rank that hangs, a rank that dies
mpi_bg "$work/hang.log" 2 "$bin" train model_name=gemma3-tiny steps=100000 checkpoint_period=2 "${common[@]}" num_devices=1 \
  dcn_fsdp_parallelism=2 collective_timeout_seconds=5 run_name=hang
pid=$!
wait_steps hang 5
victim=$(rank_pid hang 1)
[ -n "$victim" ] || fail "no rank 1 process"
kill -STOP "$victim"
rc=0; wait "$pid" || rc=$?
[ "$rc" != 0 ] || fail "a hung rank: mpirun exited 0"
grep -q "^gemtrain: rank 0 of 2: .*rank 1.* within 5 s (collective_timeout_seconds); is rank 1 alive?" \
  "$work/hang.log" ||
  { cat "$work/hang.log"; fail "rank 0's message does not name rank 1"; }
kill -9 "$victim" 2>/dev/null || true
committed=$(cat "$work/runs/hang/checkpoints/latest")
mpi_bg "$work/dead.log" 2 "$bin" train model_name=gemma3-tiny steps=100000 checkpoint_period=2 "${common[@]}" num_devices=1 \
  dcn_fsdp_parallelism=2 collective_timeout_seconds=30 run_name=dead
pid=$!
wait_steps dead 5
victim=$(rank_pid dead 1)
kill -9 "$victim"
rc=0; wait "$pid" || rc=$?
[ "$rc" != 0 ] || fail "a killed rank: mpirun exited 0"
grep -qi "rank 1" "$work/dead.log" || { cat "$work/dead.log"; fail "the message does not name the killed rank"; }
# the reruns resume from what was committed
mpi 2 "$bin" train model_name=gemma3-tiny "${common[@]}" steps=$((10#${committed#step_} + 1)) checkpoint_period=2 \
  num_devices=1 dcn_fsdp_parallelism=2 run_name=hang > "$work/rerun.log" 2>&1 || { cat "$work/rerun.log"; fail "rerun"; }
grep -q "^resumed from .*$committed" "$work/rerun.log" || { cat "$work/rerun.log"; fail "rerun did not resume $committed"; }
# 5. the ranks' configurations are compared before anything runs: ranks
#    launched with another init_weights_seed, or another steps (which used
#    to hang until the collective timeout), are refused at once, naming the
#    key with both values; a host-local key (threads_per_device) may differ
cfgrun() { # <log> <rank 0's extra key> <rank 1's extra key>
  local log=$1 a=$2 b=$3
  local args=(model_name=gemma3-tiny steps=2 "${common[@]}" num_devices=1 dcn_fsdp_parallelism=2
              collective_timeout_seconds=20 enable_checkpointing=false run_name=cfg)
  rc=0
  timeout 100 env OMP_WAIT_POLICY=PASSIVE "$mpirun" "${flags[@]}" -np 1 "$bin" train "${args[@]}" "$a" : \
    -np 1 "$bin" train "${args[@]}" "$b" > "$work/$log" 2>&1 || rc=$?
}
cfgrun seed.log init_weights_seed=1 init_weights_seed=2
[ "$rc" != 0 ] || { cat "$work/seed.log"; fail "ranks with different init_weights_seed: exit 0"; }
grep -q "^gemtrain: .*config: the ranks disagree: rank 1 has init_weights_seed=2 where rank 0 has init_weights_seed=1" \
  "$work/seed.log" || { cat "$work/seed.log"; fail "different seeds: the message does not name the key"; }
cfgrun steps.log steps=2 steps=3
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$work/steps.log"; fail "ranks with different steps: rc $rc"; }
grep -q "^gemtrain: .*config: the ranks disagree: rank 1 has steps=3 where rank 0 has steps=2" "$work/steps.log" \
  || { cat "$work/steps.log"; fail "different steps: the message does not name the key"; }
grep -q "within 20 s" "$work/steps.log" && fail "different steps: a timeout instead of the comparison"
cfgrun threads.log threads_per_device=1 threads_per_device=2
[ "$rc" = 0 ] || { cat "$work/threads.log"; fail "a host-local key that differs was refused"; }
# 6. a token shard truncated under a 2-rank run: every rank stops after a
#    checkpoint of the last good step (checkpoint_period is far away), with
#    the message that the file changed after it was checked
python3 - "$work/docs.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"text": "Document %d says %s." % (i, "word " * (i % 17))}) + "\n")
PY
"$bin" tokenize "output_path=$work/shards" shard_tokens=4000 compress=false "$work/docs.jsonl" 2> /dev/null \
  || fail "tokenize"
mpi_bg "$work/changed.log" 2 "$bin" train model_name=gemma3-tiny dataset_type=tokens "dataset_path=$work/shards" \
  max_target_length=32 eval_interval=-1 sample_tokens=0 checkpoint_period=1000000 steps=1000000 num_devices=1 \
  dcn_fsdp_parallelism=2 collective_timeout_seconds=60 "base_output_directory=$work/runs" run_name=changed
pid=$!
wait_steps changed 3
for s in "$work"/shards/*.gtok; do truncate -s 100 "$s"; done
rc=0; wait "$pid" || rc=$?
[ "$rc" != 0 ] || fail "a shard truncated under 2 ranks: mpirun exited 0"
grep -q "^gemtrain: .*tokens: '$work/shards/.*' changed after it was checked when the data was opened" \
  "$work/changed.log" || { tail -5 "$work/changed.log"; fail "2 ranks: the message does not say the file changed"; }
done_steps=$(wc -l < "$work/runs/changed/metrics.jsonl")
[ "$(cat "$work/runs/changed/checkpoints/latest")" = "$(printf 'step_%08d' "$done_steps")" ] \
  || { tail -5 "$work/changed.log"; fail "2 ranks: no checkpoint at the $done_steps reported steps"; }

# 7. ranks that would resume from different checkpoints
split=(model_name=gemma3-tiny "${common[@]}" eval_interval=-1 num_devices=1 dcn_fsdp_parallelism=2
       collective_timeout_seconds=60 checkpoint_period=2 run_name=split)
mpi 2 "$bin" train "${split[@]}" steps=4 > "$work/split1.log" 2>&1 || { cat "$work/split1.log"; fail "split: first run"; }
[ -d "$work/runs/split/checkpoints/step_00000002" ] && [ -d "$work/runs/split/checkpoints/step_00000004" ] \
  || fail "split: the first run did not leave steps 2 and 4"
rc=0
"$mpirun" "${flags[@]}" -np 1 "$bin" train "${split[@]}" steps=6 : \
  -np 1 env GEMTRAIN_TEST_CKPT_READ_FAULT=4 "$bin" train "${split[@]}" steps=6 > "$work/split2.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$work/split2.log"; fail "ranks on steps 4 and 2 trained on"; }
grep -q "^gemtrain: train: the ranks would resume from different checkpoints: rank 0 from step 4, rank 1 from step 2" \
  "$work/split2.log" || { cat "$work/split2.log"; fail "split: the refusal does not name both ranks' steps"; }
grep -q "^completed step" "$work/split2.log" && fail "split: a step ran before the refusal"
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["steps"] != 4)' "$work/runs/split/config.json" \
  || fail "split: the refused resume rewrote config.json"
mpi 2 "$bin" train "${split[@]}" steps=6 > "$work/split3.log" 2>&1 || { cat "$work/split3.log"; fail "split: rerun"; }
grep -q "^resumed from $work/runs/split/checkpoints/step_00000004 " "$work/split3.log" \
  || { head -3 "$work/split3.log"; fail "split: the rerun did not resume from step 4"; }

# 8. a -1 dcn axis the ranks cannot fill: 3 processes for dcn_fsdp_parallelism=2
#    (dcn_data_parallelism left at -1) is refused naming the -1 axis, not a
#    layout of 1 x 2 x 1 nobody gave
rc=0
mpi 3 "$bin" train model_name=gemma3-tiny dataset_type=synthetic steps=1 dcn_fsdp_parallelism=2 \
  "base_output_directory=$work/runs" run_name=odd > "$work/odd.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$work/odd.log"; fail "3 ranks for dcn_fsdp_parallelism=2 trained"; }
grep -q "mesh: dcn_data_parallelism = -1 takes the ranks the other dcn axes leave, but their product (2) does not divide the 3 processes started" \
  "$work/odd.log" || { cat "$work/odd.log"; fail "the unfillable -1 axis is not named"; }
echo "e2e_mpi: 1 passed, 0 failed"
