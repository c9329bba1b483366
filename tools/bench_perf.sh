#!/usr/bin/env bash
# The combined benchmark of docs/performance.md's Figures, in one run:
#  1. `gemtrain bench gemm` (the measured fp32 FMA peak and GEMM GFLOP/s per
#     shape) and `gemtrain bench attention` (the attention kernels, the
#     products of the attention tiles);
#  2. tokens/s, GFLOP/s and share of that peak (2 threads: every model runs
#     num_devices=1 threads_per_device=2) for the tiny (6-layer) and
#     small (12-layer) models, PyTorch side by side (tools/bench_vs_torch.sh: passive
#     waits, OpenBLAS as detected and OPENBLAS_CORETYPE=SkylakeX) and the
#     ratios; the same figures for gemma3-270m at T=512 (no PyTorch);
#  3. the shared-core figure (tools/bench_shared.sh, tiny model);
#  4. remat_policy=full against none on the small model and on gemma3-270m
#     (with the floor the FLOP count sets: full computes the layers' forward
#     twice);
#  5. 2 devices x 1 thread against 1 device x 1 thread on the small model
#     (`gemtrain bench devices`);
# then a summary table with each figure's target. gemtrain runs with no
# threading variable set, as a user runs it.
# About 18 minutes on a 2-core machine.
#
# Usage: tools/bench_perf.sh [build/gemtrain]
# Environment:
#   GT_LOCK=FILE   take `flock FILE` around each section (each a few minutes),
#                  so other jobs that take the same lock cannot run meanwhile
#                  and can run between sections. Do not also wrap the whole
#                  script in flock on the same file (it would wait on itself).
#   GT_PERF_STEPS  timed steps for tiny and small (default 5); 270m uses 2
#   GT_PERF_PAIRS  alternated none/full pairs of the remat section (default 2)
#   GT_PERF_SKIP   space-separated sections to leave out: gemm attention torch 270m
#                  shared remat devices
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bin="${1:-build/gemtrain}"
here=$(cd "$(dirname "$0")" && pwd)
steps=${GT_PERF_STEPS:-5}
skip=" ${GT_PERF_SKIP:-} "
work=$(mktemp -d /tmp/gt_bench_perf.XXXXXX)
trap 'rm -rf "$work"' EXIT
gt_bench_no_omp_env

# 1 device x 2 threads, pinned: the shares below are of the 2-thread peak
# (`gemtrain bench` alone takes every core; figures() checks the header)
tiny=(vocab_size=4096 base_emb_dim=256 base_num_decoder_layers=6 base_num_query_heads=4 base_num_kv_heads=1
      head_dim=64 base_mlp_dim=1024 sliding_window_size=64 query_pre_attn_scalar=64 max_target_length=256
      per_device_batch_size=8 model_name=gemma3-small remat_policy=none num_devices=1 threads_per_device=2)
small=(vocab_size=32768 base_emb_dim=640 base_num_decoder_layers=12 base_num_query_heads=4 base_num_kv_heads=1
       head_dim=128 base_mlp_dim=2048 sliding_window_size=128 query_pre_attn_scalar=128 max_target_length=512
       per_device_batch_size=4 model_name=gemma3-small remat_policy=none num_devices=1 threads_per_device=2)
m270=(model_name=gemma3-270m max_target_length=512 remat_policy=none num_devices=1 threads_per_device=2)

# the figures of a `gemtrain bench` output: "tokens/s GFLOP/s"
figures() { gt_bench_figures < "$1"; }
# stops the script unless the `gemtrain bench` output $1 ran on the 2
# threads whose peak the shares divide by
two_threads() {
  local th
  th=$(sed -n 's/^bench: .*[,=] \([0-9]*\) threads\{0,1\}$/\1/p' "$1" | head -n 1)
  [ "$th" = 2 ] && return 0
  echo "bench_perf: gemtrain bench did not run on 2 threads ($(grep -m1 '^bench: ' "$1")): the shares are of the 2-thread peak" >&2
  exit 1
}

echo "bench_perf: $("$bin" --version), commit $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u)"
gt_bench_cpu

# ---- 1. GEMM and the peak -------------------------------------------------
# the peak is the one `gemtrain bench gemm` measures (kernels/peak.c)
peak=""
section "gemtrain bench gemm"
if wants gemm; then
  lock
  "$bin" bench gemm | tee "$work/gemm.txt"
  unlock
  peak=$(sed -n 's/.*FMA peak measured [0-9.]* GFLOP\/s on 1 thread, \([0-9.]*\) on 2.*/\1/p' "$work/gemm.txt")
else
  echo "(skipped: GT_PERF_SKIP has gemm; no peak, so no shares of it)"
fi
if [ -n "$peak" ]; then echo "fp32 FMA peak: $peak GFLOP/s (gemtrain bench gemm)"; else echo "fp32 FMA peak: not measured"; peak=0; fi
section "gemtrain bench attention"
if wants attention; then
  lock
  "$bin" bench attention
  unlock
else
  echo "(skipped: GT_PERF_SKIP has attention)"
fi
share() { awk -v g="$1" -v p="$peak" 'BEGIN { if (p > 0 && g != "") printf "%.1f%%", 100 * g / p; else printf "-" }'; }

# ---- 2. the models, PyTorch side by side ----------------------------------
declare -A tok gf tt1 tt2
for m in tiny small; do
  declare -n keys=$m
  lock
  section "$m model: gemtrain and PyTorch (tools/bench_vs_torch.sh)"
  if wants torch; then
    bash "$here/bench_vs_torch.sh" "$bin" "$steps" "${keys[@]}" | tee "$work/$m.txt"
    read -r _ _ _ _ t1 _ t2 < <(grep '^vs_torch:' "$work/$m.txt" | sed 's/torch_detected  /torch_detected - /; s/torch_skylakex *$/torch_skylakex -/')
    if [ "$t1" != - ] && [ "$t2" != - ]; then tt1[$m]=$t1; tt2[$m]=$t2; fi
  else
    "$bin" bench --steps "$steps" "${keys[@]}" | tee "$work/$m.txt"
  fi
  unlock
  two_threads "$work/$m.txt"
  read -r tok[$m] gf[$m] < <(figures "$work/$m.txt")
  echo "$m: ${tok[$m]} tokens/s, ${gf[$m]} GFLOP/s, $(share "${gf[$m]}") of the measured peak"
done
if wants 270m; then
  lock
  section "gemma3-270m, T=512, remat none"
  "$bin" bench --steps 2 "${m270[@]}" | tee "$work/270m.txt"
  unlock
  two_threads "$work/270m.txt"
  read -r tok[270m] gf[270m] < <(figures "$work/270m.txt")
  echo "270m: ${tok[270m]} tokens/s, ${gf[270m]} GFLOP/s, $(share "${gf[270m]}") of the measured peak"
fi

# ---- 3. shared cores ------------------------------------------------------
shared=""
if wants shared; then
  lock
  section "one core taken by another process (tools/bench_shared.sh, tiny model)"
  GT_SHARED_SETTINGS=none bash "$here/bench_shared.sh" "$bin" "$steps" 9>&- | tee "$work/shared.txt"
  unlock
  shared=$(sed -n 's/^shared: no OpenMP variable set:.*ratio \([0-9.]*\)%.*/\1/p' "$work/shared.txt")
fi

# ---- 4. remat full vs none ------------------------------------------------
# One run of each read 1.21x on gemma3-270m once and 1.03x / 1.10x in two
# alternated pairs the next day: a neighbour slowing one run moves the
# ratio by more than the goal's margin. So none and full alternate,
# GT_PERF_PAIRS times (default 2), and the ratio is the median of the pairs'.
pairs=${GT_PERF_PAIRS:-2}
# remat_pairs NAME STEPS keys...: prints "ratio floor"; each pair's line to stderr
remat_pairs() {
  local name=$1 st=$2; shift 2
  local ratios="" tn tf r
  for i in $(seq "$pairs"); do
    "$bin" bench --steps "$st" "$@" remat_policy=none > "$work/none_$name.txt"
    "$bin" bench --steps "$st" "$@" remat_policy=full > "$work/full_$name.txt"
    read -r tn _ < <(figures "$work/none_$name.txt"); read -r tf _ < <(figures "$work/full_$name.txt")
    r=$(awk -v n="$tn" -v f="$tf" 'BEGIN { printf "%.3f", n / f }')
    echo "  pair $i: none $tn tokens/s, full $tf tokens/s: ${r}x" >&2
    ratios="$ratios $r"
  done
  # the floor the FLOP count sets (`gemtrain bench` prints it for full)
  echo "$(echo "$ratios" | gt_median | awk '{ printf "%.2f", $1 }') $(sed -n 's/.*at the same GFLOP\/s a step takes \([0-9.]*\)x.*/\1/p' "$work/full_$name.txt")"
}
remat="" remat_floor="" remat270="" remat270_floor=""
if wants remat; then
  lock
  section "remat_policy=full vs none, small model, $pairs alternated pairs"
  read -r remat remat_floor < <(remat_pairs small "$steps" "${small[@]}")
  unlock
  echo "full takes ${remat}x the time of none, the median of the pairs (its FLOPs alone: ${remat_floor}x)"
  # gemma3-270m: its 262144-word head is most of the step, so full remat
  # adds few FLOPs there (batch 2: the ratio does not depend on the batch)
  lock
  section "remat_policy=full vs none, gemma3-270m, B2 T512, $pairs alternated pairs"
  read -r remat270 remat270_floor < <(remat_pairs 270m 2 "${m270[@]}" per_device_batch_size=2)
  unlock
  echo "full takes ${remat270}x the time of none, the median of the pairs (its FLOPs alone: ${remat270_floor}x)"
fi

# ---- 5. devices -----------------------------------------------------------
dev=""
if wants devices; then
  lock
  section "2 devices x 1 thread vs 1 device x 1 thread, small model (gemtrain bench devices)"
  "$bin" bench devices --steps 3 "${small[@]}" | tee "$work/devices.txt"
  unlock
  dev=$(sed -n 's/^| 2 devices x 1 BLAS\/OpenMP thread, prefetch, layer scope | [0-9.]* | \([0-9.]*\)x |.*/\1/p' "$work/devices.txt")
  dev_best=$(grep '^| 2 devices' "$work/devices.txt" | awk -F'|' '{ gsub(/[ x]/, "", $4); if ($4 > b) b = $4 } END { print b }')
fi

# ---- summary --------------------------------------------------------------
goal() { awk -v v="$1" -v g="$2" -v dir="$3" 'BEGIN { if (v == "" || v == "-") print "-"; else if ((dir == ">=" && v + 0 >= g) || (dir == "<=" && v + 0 <= g)) print "met"; else print "not met" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else printf "-" }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
section "summary"
echo "fp32 FMA peak $peak GFLOP/s (gemtrain bench gemm); GEMM per shape: $( [ -s "$work/gemm.txt" ] && echo 'see the bench gemm table above' || echo 'not measured (skipped)')"
echo
echo "| what | figure | goal | |"
echo "|---|---|---|---|"
# the range of OpenBLAS's 2-thread shares of peak over one model's products
# in the bench gemm table (PyTorch's own kernels: the 2.5x goal holds where
# they run below 32% of the peak)
blas_shares() {
  [ -s "$work/gemm.txt" ] || return 0
  local name=$1
  [ "$name" = 270m ] && name=gemma3-270m
  awk -F'|' -v m="$name" '
    /OpenBLAS 2 threads/ { tab = 1; next }
    !/^\|/ { tab = 0; on = 0; next }
    tab && /^\| \*\*/ { on = index($0, "**" m ":") > 0; next }
    tab && on && match($8, /\(([0-9.]+)%\)/) { v = substr($8, RSTART + 1, RLENGTH - 3) + 0
                                             if (n++ == 0 || v < lo) lo = v; if (v > hi) hi = v }
    END { if (n) printf "%g %g", lo, hi }' "$work/gemm.txt"
}
for m in tiny small 270m; do
  [ -n "${tok[$m]:-}" ] || continue
  s=$(share "${gf[$m]}")
  g="-" st=""
  # (issue 37's goal: 80% of the measured FMA peak on the 12-layer model and gemma3-270m)
  [ $m != tiny ] && g=">= 80% of peak" && st=$(goal "${s%\%}" 80 ">=")
  echo "| $m: gemtrain tokens/s, GFLOP/s, share of peak | ${tok[$m]}, ${gf[$m]}, $s | $g | $st |"
  if [ -n "${tt1[$m]:-}" ]; then
    b=$(best "${tt1[$m]}" "${tt2[$m]}")
    r=$(ratio "${tok[$m]}" "$b")
    read -r blo bhi <<< "$(blas_shares "$m")" || true
    if [ -z "${bhi:-}" ]; then
      g=">= 2.5x its best where its kernels run below 32% of peak (not measured: bench gemm skipped)" st="-"
    elif awk -v h="$bhi" 'BEGIN { exit !(h < 32) }'; then
      g=">= 2.5x its best (its OpenBLAS kernels at $blo-$bhi% of peak, below 32%)" st=$(goal "$r" 2.5 ">=")
    else
      g="- (its OpenBLAS kernels at $blo-$bhi% of peak, 2 threads: the 2.5x goal holds below 32%)" st="-"
    fi
    echo "| $m: PyTorch tokens/s as detected, SkylakeX; gemtrain / PyTorch | ${tt1[$m]}, ${tt2[$m]}; $(ratio "${tok[$m]}" "${tt1[$m]}")x, $(ratio "${tok[$m]}" "${tt2[$m]}")x | $g | $st |"
  fi
done
[ -n "$shared" ] && echo "| one core busy / quiet, tiny, no variable set | $shared% | >= 45% | $(goal "$shared" 45 ">=") |"
[ -n "$remat" ] && echo "| small: step time full / none (recomputing the layers' forward adds FLOPs for ${remat_floor}x) | ${remat}x | <= 1.15x | $(goal "$remat" 1.15 "<=") |"
[ -n "$remat270" ] && echo "| 270m: step time full / none (FLOPs: ${remat270_floor}x) | ${remat270}x | <= 1.15x | $(goal "$remat270" 1.15 "<=") |"
[ -n "$dev" ] && echo "| small: 2 devices x 1 thread / 1 device x 1 thread (prefetch, layer scope; best 2-device setup ${dev_best}x) | ${dev}x | >= 1.8x | $(goal "$dev" 1.8 ">=") |"
echo
echo "(single runs, medians of their steps; compare ratios, and mind the load average printed per section when the machine is shared)"
