#!/usr/bin/env bash
# End-to-end: what the benchmark commands' figures mean (the arithmetic that
# ties them together, never how fast anything ran).
# - `gemtrain bench` with num_devices=2: GFLOP/s is the whole step's (both
#   devices' FLOPs, as tokens/s is the global batch's): GFLOP/s over tokens/s
#   is the plan's FLOPs per device over a device's tokens; the header gives
#   devices x threads and the total.
# - with gradient_accumulation_steps=2 a step is 2 micro-batches: the header
#   says so and tokens/s counts both (GFLOP/s over tokens/s is the plan's
#   FLOPs per token, as without accumulation).
# - `bench checkpoint --steps 5` runs 5 of each (3 without --steps).
# - `bench moe threads=3` measures the FMA peak on 3 threads and its shares
#   are of that figure.
# Usage: e2e_bench.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"
work=$(mktemp -d /tmp/gt_e2e_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
keys=(model_name=gemma3-tiny per_device_batch_size=8 max_target_length=128 threads_per_device=1)

# flops_check <bench output> <plan --json> <devices> <tokens a step>: GFLOP/s
# over tokens/s is the step's FLOPs (devices x the plan's per device) per
# token; with several devices the line gives the total and the per-device share
flops_check() {
  python3 - "$@" << 'PY'
import json, re, sys
out, plan, n, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
line = [l for l in open(out) if l.startswith("train step")][0]
m = re.search(r"([0-9.]+) tokens/s, ([0-9.]+) GFLOP/s(?: over all ([0-9]+) devices, ([0-9.]+) per device)? "
              r"\(MaxText count ([0-9.]+) TFLOPs/step\)", line)
assert m, line
tok, gf, tf = float(m.group(1)), float(m.group(2)), float(m.group(5))
dev_tf = json.load(open(plan))["total_tflops_per_step_per_device"]
want = n * dev_tf * 1e12 / tokens * tok / 1e9  # the step's FLOPs per token, times tokens/s
# (the printed figures' rounding: 0.1 GFLOP/s of a few tens)
assert abs(gf - want) <= 0.02 * want + 0.1, (gf, want)
assert abs(tf - n * dev_tf) <= 0.0001, (tf, dev_tf)
if n > 1:
    assert int(m.group(3)) == n and abs(float(m.group(4)) - gf / n) <= 0.1, line
else:
    assert m.group(3) is None, line
print(f"{n} device(s), {tokens} tokens a step: {gf} GFLOP/s for {tok} tokens/s (the step's FLOPs: {want:.1f})")
PY
}

# 1. GFLOP/s of a 2-device step: the step's FLOPs (2 x the plan's per device)
"$bin" bench --steps 1 "${keys[@]}" num_devices=2 > "$work/b2.txt"
"$bin" plan "${keys[@]}" --json > "$work/plan.json"
head -n 1 "$work/b2.txt" | grep -q ', batch 16 x 128, .*, 2 devices x 1 thread = 2 threads$' \
  || fail "the header does not give 2 devices x 1 thread = 2 threads: $(head -n 1 "$work/b2.txt")"
flops_check "$work/b2.txt" "$work/plan.json" 2 $((16 * 128)) || fail "2 devices: GFLOP/s is not the whole step's: $(grep '^train step' "$work/b2.txt")"

# 1b. gradient accumulation: a step's tokens are its 2 micro-batches'
"$bin" bench --steps 1 "${keys[@]}" gradient_accumulation_steps=2 > "$work/ga.txt"
"$bin" plan "${keys[@]}" gradient_accumulation_steps=2 --json > "$work/plan_ga.json"
head -n 1 "$work/ga.txt" | grep -q ', batch 8 x 128 x 2 micro-batches, ' \
  || fail "the header does not give the micro-batches: $(head -n 1 "$work/ga.txt")"
flops_check "$work/ga.txt" "$work/plan_ga.json" 1 $((2 * 8 * 128)) || fail "gradient accumulation: tokens/s is not the step's: $(grep '^train step' "$work/ga.txt")"

# 2. bench checkpoint: --steps 5 is 5 of each; the default 3
"$bin" bench checkpoint --steps 5 model_name=gemma3-tiny "base_output_directory=$work" > "$work/ck5.txt"
grep -q '^checkpoint benchmark: .*, best of 5$' "$work/ck5.txt" || fail "bench checkpoint --steps 5: $(head -n 1 "$work/ck5.txt")"
"$bin" bench checkpoint model_name=gemma3-tiny "base_output_directory=$work" > "$work/ck.txt"
grep -q '^checkpoint benchmark: .*, best of 3$' "$work/ck.txt" || fail "bench checkpoint: $(head -n 1 "$work/ck.txt")"

# 3. bench moe on 3 threads: the peak it divides by is the 3-thread one
"$bin" bench moe B=1 T=256 d=256 E=8 k=2 F=256 threads=3 reps=1 rounds=1 > "$work/moe.txt"
python3 - "$work/moe.txt" << 'PY' || fail "bench moe threads=3: $(head -n 12 "$work/moe.txt")"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r", ([0-9.]+) on 3 \(the best of 3 runs\);\nthe figures below use the 3-thread one", t)
assert m, "no 3-thread peak"
peak = float(m.group(1))
row = re.search(r"^\| forward \| [0-9.]+ \| ([0-9.]+) \(([0-9.]+)%\)", t, re.M)
g, share = float(row.group(1)), float(row.group(2))
# share = g / peak, each printed to 0.1: the bound of their rounding
assert abs(100 * g / peak - share) <= 0.05 + share * (0.05 / g + 0.05 / peak) + 1e-6, (g, share, peak)
print(f"moe, 3 threads: {g} GFLOP/s = {share}% of the 3-thread peak {peak}")
PY
echo "e2e_bench: 1 passed, 0 failed"
