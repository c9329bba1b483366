#!/usr/bin/env bash
# DiLoCo against synchronous data parallelism on the default job
# (gemma3-small on data/kjv.txt, 200 steps, per_device_batch_size=8 x 256
# tokens), both on 2 MPI ranks of 1 device with the same global batch of
# 16 x 256 tokens per step, so both have seen the same tokens after every
# step:
#   dp      dcn_data_parallelism=2: gradients all-reduced every step
#   diloco_<lr>_<m>  enable_diloco=true dcn_diloco_parallelism=2
#           diloco_sync_period=16 diloco_outer_lr=<lr> diloco_outer_momentum=<m>:
#           each replica trains on its 8 rows and the replicas sync every 16
#           steps, for each outer setting of DILOCO_OUTER (default "0.3/0.9
#           0.7/0.5": MaxText's defaults and a larger outer step)
#   single  the default job on 1 rank: what one replica alone reaches on
#           its 8 rows a step (half the tokens of the runs above; the
#           table's tokens column is theirs), the floor DiLoCo's averaging
#           improves on
# Evaluations every 16 steps (for DiLoCo right after a sync); as in
# MaxText's loop none after the last step, so the last compared is step 192
# (DiLoCo's final sync after step 200 is not evaluated).
# Prints both eval curves side by side, the bytes each device sends to the
# other ranks per step (measured for data parallelism, metrics.jsonl's
# comm_bytes_dcn; for DiLoCo gemtrain plan's, which is what each sync sends,
# and metrics.jsonl's diloco_bytes when the step record has it), and checks
# the two targets for each DiLoCo run: bytes per step at most 1/16 of data
# parallelism's, and the final eval loss within 3% of data parallelism's.
# The runs are independent and their losses and bytes do not depend on
# timing, so they run at the same time (GT_SERIAL=1: one after the other);
# GT_LOCK=FILE takes `flock FILE` around each run. Each run is 200 steps of
# the default job on each of 2 ranks (about 3 minutes alone on the 2-core
# Xeon with AMX, 10 to 40 on the Zen 5 machine, by load).
# Environment: DILOCO_OUTER, GT_SERIAL, GT_LOCK; runs already in the output
# directory with a complete log are kept (delete them to rerun).
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
outer=(${DILOCO_OUTER:-0.3/0.9 0.7/0.5})
# run RANKS NAME [key=value ...]
run() {
  local np=$1 name=$2; shift 2
  grep -q "^run_name=$name: finished" "$out/$name.log" 2>/dev/null && return 0
  rm -rf "${out:?}/$name"
  local lock=()
  [ -n "${GT_LOCK:-}" ] && lock=(flock "$GT_LOCK")
  "${lock[@]}" mpirun "${flags[@]}" -np "$np" "$bin" train "${common[@]}" "$@" run_name="$name" \
    > "$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; return 1; }
}
if [ "$report" = 0 ]; then
  pids=()
  run 2 dp dcn_data_parallelism=2 & pids+=($!)
  [ -n "${GT_SERIAL:-}" ] && wait "${pids[-1]}"
  run 1 single & pids+=($!)
  [ -n "${GT_SERIAL:-}" ] && wait "${pids[-1]}"
  for o in "${outer[@]}"; do
    run 2 "diloco_${o%/*}_${o#*/}" "${dl[@]}" diloco_outer_lr="${o%/*}" diloco_outer_momentum="${o#*/}" & pids+=($!)
    [ -n "${GT_SERIAL:-}" ] && wait "${pids[-1]}"
  done
  for p in "${pids[@]}"; do wait "$p" || exit 1; done
fi
"$bin" plan --json dcn_data_parallelism=2 > "$out/plan_dp.json"
"$bin" plan --json "${dl[@]}" > "$out/plan_diloco.json"
python3 - "$out" "${outer[@]}" <<'PY'
import json, os, sys
out = sys.argv[1]
def recs(name):
    return [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
runs = [("dp", "data parallelism")]
for o in sys.argv[2:]:
    lr, m = o.split("/")
    runs.append((f"diloco_{lr}_{m}", f"DiLoCo, outer lr {lr}, momentum {m}"))
runs.append(("single", "one replica alone (1 rank, 8 rows a step)"))
runs = [(n, t) for n, t in runs if os.path.exists(os.path.join(out, n, "metrics.jsonl"))]
R = {n: recs(n) for n, _ in runs}
ev = {n: {x["step"]: x["eval_loss"] for x in R[n] if "eval_loss" in x} for n, _ in runs}
tok = 16 * 256
print("| after step | tokens | " + " | ".join(t + " eval loss" for _, t in runs) + " |")
print("|---|---|" + "---|" * len(runs))
for s in sorted(ev["dp"]):
    cells = [f"{ev[n][s]:.4f}" + ("" if n == "dp" else f" ({100 * (ev[n][s] / ev['dp'][s] - 1):+.1f}%)")
             for n, _ in runs if s in ev[n]]
    print(f"| {s + 1} | {(s + 1) * tok} | " + " | ".join(cells) + " |")
mean = lambda v: sum(v) / len(v)
pdp = json.load(open(os.path.join(out, "plan_dp.json")))
pdl = json.load(open(os.path.join(out, "plan_diloco.json")))
b_dp = mean([x.get("comm_bytes_dcn", 0) for x in R["dp"]])
print()
print("| setup | bytes to other ranks per step per device | final eval loss | vs data parallelism |")
print("|---|---|---|---|")
fdp = ev["dp"][max(ev["dp"])]
print(f"| data parallelism (dcn_data_parallelism=2) | {b_dp:.0f} measured ({pdp['comm_bytes_dcn_per_step_per_device']:.0f} planned) | {fdp:.4f} | |")
ok = True
for n, t in runs[1:]:
    if n == "single":
        f = ev[n][max(ev[n])]
        print(f"| {t} | 0 (no other rank) | {f:.4f} | {100 * (f / fdp - 1):+.2f}% |")
        continue
    # the periodic syncs (after steps 16, 32, ...); the run's last step, when
    # not one of them, adds one more sync at the end (counted apart)
    per = [x["diloco_bytes"] for x in R[n] if x.get("diloco_bytes") and (x["step"] + 1) % 16 == 0]
    last = [x["diloco_bytes"] for x in R[n] if x.get("diloco_bytes") and (x["step"] + 1) % 16 != 0]
    b = sum(per) / (16 * len(per)) if per else None
    m = (f"{b:.0f} measured ({len(per)} syncs" + (f", and one at the end of {last[0]} bytes" if last else "") + "), ") if b is not None else ""
    f = ev[n][max(ev[n])]
    rel = f / fdp - 1
    ratio = (b if b is not None else pdl["diloco_bytes_per_step_per_device"]) / b_dp
    print(f"| {t} | {m}{pdl['diloco_bytes_per_step_per_device']:.0f} planned ({pdl['diloco_bytes_per_sync_per_device']:.0f} per sync); {ratio:.5f} of data parallelism's | {f:.4f} | {100 * rel:+.2f}% |")
    print(f"  {t}: bytes {'ok' if ratio <= 1 / 16 else 'MISSED'} (<= 1/16), eval loss {'ok' if abs(rel) <= 0.03 else 'MISSED'} (within 3%)", file=sys.stderr)
PY
