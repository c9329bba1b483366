#!/usr/bin/env bash
# Asynchronous checkpoints against none and synchronous ones (docs/checkpoints.md):
# the 12-layer benchmark model (gemma3-12l, batch 2 x 1024) trains STEPS steps
# (default 41) three ways, one after the other (the order turning from round
# to round), ROUNDS times (default 2):
#   none   enable_checkpointing=false
#   sync   checkpoint_period=10 async_checkpointing=false
#   async  checkpoint_period=10 (the default async_checkpointing=true)
# The mean step time counts the checkpoints between steps: the wall time from
# the console line of step 1 to that of the last step, divided by the steps
# between them (the first step warms up; the last checkpoint, after the last
# line, is left out alike for each). Prints the three means, their ratios to
# `none` (of the means, and the median of each round's ratio: robust to a
# machine whose load changes between runs), the write bandwidth (sync: state / write time; async: state /
# background write time), the async run's blocked time per checkpoint.
#
# Usage: tools/bench_ckpt_async.sh [build/gemtrain] [key=value ...]
# Environment: STEPS, ROUNDS, GT_LOCK=FILE (flock FILE around each run).
set -euo pipefail
bin="${1:-build/gemtrain}"
shift || true
steps=${STEPS:-41}
rounds=${ROUNDS:-2}
work=$(mktemp -d /tmp/gt_bench_ckpt_async.XXXXXX)
trap 'rm -rf "$work"' EXIT
model=(model_name=gemma3-12l dataset_type=synthetic sample_tokens=0 eval_interval=-1 "steps=$steps"
       "base_output_directory=$work/runs" save_checkpoint_on_completion=false "$@")
# one run; prints "<mean step s>" and leaves the log in $work/<name>.log
run() {
  local name=$1; shift
  rm -rf "$work/runs/$name"
  if [ -n "${GT_LOCK:-}" ]; then set -- flock "$GT_LOCK" "$bin" train "${model[@]}" run_name="$name" "$@"
  else set -- "$bin" train "${model[@]}" run_name="$name" "$@"; fi
  "$@" 2>&1 | python3 -c '
import re, sys, time
t = {}
with open(sys.argv[1], "w") as log:
    for line in sys.stdin:
        now = time.monotonic()
        log.write(line)
        m = re.match(r"completed step: (\d+),", line)
        if m: t[int(m.group(1))] = now
last = max(t)
print("%.4f" % ((t[last] - t[1]) / (last - 1)))
' "$work/$name.log"
}
echo "bench_ckpt_async: $("$bin" --version), $(date -u), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" plan "${model[@]}" | grep -E "^  parameters|checkpoint snapshot" || true
# the order turns from round to round, so a load that grows or falls over
# the rounds favours no mode
modes=(none sync async)
: > "$work/rounds.txt"
for r in $(seq "$rounds"); do
  for k in 0 1 2; do
    mode=${modes[$(( (r - 1 + k) % 3 ))]}
    case $mode in
      none) m=$(run none enable_checkpointing=false) ;;
      sync) m=$(run sync checkpoint_period=10 async_checkpointing=false) ;;
      async) m=$(run async checkpoint_period=10) ;;
    esac
    echo "round $r: $mode mean step $m s (load average $(cut -d' ' -f1 /proc/loadavg))"
    echo "$r $mode $m" >> "$work/rounds.txt"
  done
done
python3 - "$work" "$rounds" <<'PY'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
per = {}
for line in open(f"{work}/rounds.txt"):
    r, mode, m = line.split(); per.setdefault(mode, {})[int(r)] = float(m)
none, sync, asyn = (statistics.mean(per[m].values()) for m in ("none", "sync", "async"))
# each round's ratio to that round's none, and their median: robust to a load that changes between rounds
rs = statistics.median(per["sync"][r] / per["none"][r] for r in per["none"])
ra = statistics.median(per["async"][r] / per["none"][r] for r in per["none"])
def saves(name):
    return open(f"{work}/{name}.log").read()
s = saves("sync"); a = saves("async")
sw = [float(x) for x in re.findall(r"saved checkpoint \S+ \(1 shard, ([0-9.]+) s\)", s)]
aw = re.findall(r"saved checkpoint \S+ \(1 shard, ([0-9.]+) s in the background; the loop waited ([0-9.]+) s; snapshot ([0-9.]+) MiB\)", a)
mib = float(aw[0][2]) if aw else float("nan")
print()
print("| checkpoints | mean step s (checkpoint steps included) | vs none (mean) | vs none (median of the rounds' ratios) | write s per checkpoint | write MiB/s | loop blocked s per checkpoint |")
print("|---|---|---|---|---|---|---|")
print(f"| none | {none:.4f} | 1.000 | 1.000 | - | - | - |")
if sw:
    m = sum(sw) / len(sw)
    print(f"| sync (checkpoint_period=10) | {sync:.4f} | {sync / none:.3f} | {rs:.3f} | {m:.3f} | {mib / m:.0f} | {m:.3f} |")
if aw:
    w = sum(float(x[0]) for x in aw) / len(aw); b = sum(float(x[1]) for x in aw) / len(aw)
    print(f"| async (checkpoint_period=10) | {asyn:.4f} | {asyn / none:.3f} | {ra:.3f} | {w:.3f} (background) | {mib / w:.0f} | {b:.3f} |")
if sw and aw:
    # what the loop waits for per checkpoint, as a share of the 10 steps it
    # follows: the part of the overhead that a busy machine's noise does not move
    print(f"\nthe loop's wait per checkpoint over 10 steps of {none:.3f} s: sync {m / (10 * none) * 100:.1f}%, async {b / (10 * none) * 100:.1f}%")
print(f"state {mib:.1f} MiB per checkpoint; means over {rounds} round(s) of each mode; the last round's logs give the write figures")
PY
