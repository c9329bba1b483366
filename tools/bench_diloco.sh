#!/usr/bin/env bash
# DiLoCo against synchronous data parallelism on the default job
# (gemma3-small on data/kjv.txt, 200 steps, per_device_batch_size=8 x 256
# tokens), both on 2 MPI ranks of 1 device with the same global batch of
# 16 x 256 tokens per step, so both have seen the same tokens after every
# step:
#   dp      dcn_data_parallelism=2: gradients all-reduced every step
#   diloco  enable_diloco=true dcn_diloco_parallelism=2 diloco_sync_period=16
#           (MaxText's outer lr 0.3 and Nesterov momentum 0.9): each replica
#           trains on its 8 rows and the replicas sync every 16 steps
# Evaluations every 16 steps (after a sync for DiLoCo) and after the last.
# Prints both eval curves side by side, the bytes each device sends to the
# other ranks per step (measured for data parallelism, metrics.jsonl's
# comm_bytes_dcn; for DiLoCo gemtrain plan's, which is what each sync sends,
# and metrics.jsonl's diloco_bytes when the step record has it), and checks
# the two targets: DiLoCo's bytes per step at most 1/16 of data
# parallelism's, and its final eval loss within 3% of data parallelism's.
# Takes the machine lock itself; about 8 minutes on the 2-core machine.
# Usage: tools/bench_diloco.sh [--report] [gemtrain] [output directory]
# (--report: only the tables, from the runs already in the directory)
set -euo pipefail
report=0
[ "${1:-}" = --report ] && { report=1; shift; }
bin=$(readlink -f "${1:-build/gemtrain}")
out=$(readlink -f "${2:-runs/bench_diloco}")
cd "$(dirname "$0")/.."
[ -f data/kjv.txt ] || tools/kjv.sh data/kjv.txt > /dev/null
mkdir -p "$out"
flags=(--oversubscribe --bind-to core)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
common=(eval_interval=16 threads_per_device=1 sample_tokens=0 enable_checkpointing=false "base_output_directory=$out")
dl=(enable_diloco=true dcn_diloco_parallelism=2 diloco_sync_period=16)
run() {
  local name=$1; shift
  rm -rf "${out:?}/$name"
  flock /tmp/gt_machine.lock mpirun "${flags[@]}" -np 2 "$bin" train "${common[@]}" "$@" run_name="$name" \
    > "$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
}
if [ "$report" = 0 ]; then
  run dp dcn_data_parallelism=2
  run diloco "${dl[@]}"
fi
"$bin" plan --json dcn_data_parallelism=2 > "$out/plan_dp.json"
"$bin" plan --json "${dl[@]}" > "$out/plan_diloco.json"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def recs(name):
    return [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
dp, dl = recs("dp"), recs("diloco")
pdp = json.load(open(os.path.join(out, "plan_dp.json")))
pdl = json.load(open(os.path.join(out, "plan_diloco.json")))
ev = lambda r: {x["step"]: x["eval_loss"] for x in r if "eval_loss" in x}
edp, edl = ev(dp), ev(dl)
print("| after step | tokens | data parallelism eval loss | DiLoCo eval loss | DiLoCo / DP |")
print("|---|---|---|---|---|")
tok = 16 * 256
for s in sorted(edp):
    if s in edl:
        print(f"| {s + 1} | {(s + 1) * tok} | {edp[s]:.4f} | {edl[s]:.4f} | {edl[s] / edp[s]:.4f} |")
mean = lambda v: sum(v) / len(v)
b_dp = mean([x.get("comm_bytes_dcn", 0) for x in dp])
b_dp_plan = pdp["comm_bytes_dcn_per_step_per_device"]
b_dl_plan = pdl["diloco_bytes_per_step_per_device"]
meas = [x["diloco_bytes"] for x in dl if "diloco_bytes" in x]
b_dl = sum(meas) / len(dl) if meas else None
t_dp = mean([x["seconds"] for x in dp[1:]])
t_dl = mean([x["seconds"] for x in dl[1:]])
print()
print("| setup | bytes to other ranks per step per device | step seconds (mean) | final eval loss |")
print("|---|---|---|---|")
print(f"| data parallelism (dcn_data_parallelism=2) | {b_dp:.0f} measured ({b_dp_plan:.0f} planned) | {t_dp:.3f} | {edp[max(edp)]:.4f} |")
m = f"{b_dl:.0f} measured, " if b_dl is not None else ""
print(f"| DiLoCo (2 replicas, sync every 16) | {m}{b_dl_plan:.0f} planned ({pdl['diloco_bytes_per_sync_per_device']:.0f} per sync) | {t_dl:.3f} | {edl[max(edl)]:.4f} |")
ratio = (b_dl if b_dl is not None else b_dl_plan) / b_dp
rel = edl[max(edl)] / edp[max(edp)] - 1
print(f"\nbytes per step: DiLoCo / data parallelism = {ratio:.5f} (target <= {1/16:.5f}): {'ok' if ratio <= 1/16 else 'MISSED'}")
print(f"final eval loss: DiLoCo {edl[max(edl)]:.4f} vs {edp[max(edp)]:.4f}, {100 * rel:+.2f}% (target within 3%): {'ok' if abs(rel) <= 0.03 else 'MISSED'}")
PY
