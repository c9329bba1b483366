#!/usr/bin/env bash
# Shared cores: the same `gemtrain bench` on a quiet machine and with one
# core taken by another process (a shell busy loop), and the ratio busy /
# quiet. A step's threads wait for each other at every region and barrier; a
# waiter that spins on a core another process wants keeps the thread it
# waits for off that core, and the step collapses (25-32% of the quiet speed
# with libgomp's default 300000-spin wait on 2 cores). The goal is >= 45%
# with no variable set, which the library's thread teams reach with their
# bounded spin (src/base/team.c). An older, OpenMP-threaded gemtrain binary
# (to compare with) takes OpenMP settings too.
#
# Usage: tools/bench_shared.sh [build/gemtrain] [steps] [key=value ...]
#   (default: the 6-layer model of tools/bench_perf.sh, 5 steps)
# Environment:
#   GT_SHARED_SETTINGS  space-separated settings, each "none" (every OpenMP
#                       variable unset: gemtrain's own choice) or VAR=VALUE
#                       (e.g. GOMP_SPINCOUNT=300000, libgomp's default, for
#                       an OpenMP build); default "none"
#   GT_SHARED_REPS      quiet/busy pairs per setting, median reported (default 1)
# Prints one line per setting:
#   shared: <setting>: quiet Q tokens/s, one core busy B tokens/s, ratio R%
# The machine must otherwise be quiet (run it under the lock other jobs take).
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bin="${1:-build/gemtrain}"; steps="${2:-5}"
shift $(( $# < 2 ? $# : 2 ))
model=("$@")
if [ ${#model[@]} -eq 0 ]; then
  model=(vocab_size=4096 base_emb_dim=256 base_num_decoder_layers=6 base_num_query_heads=4 base_num_kv_heads=1
         head_dim=64 base_mlp_dim=1024 sliding_window_size=64 query_pre_attn_scalar=64 max_target_length=256
         per_device_batch_size=8 model_name=gemma3-small remat_policy=none)
fi
settings=${GT_SHARED_SETTINGS:-none}
reps=${GT_SHARED_REPS:-1}
busy=""
stop_busy() { if [ -n "$busy" ]; then kill "$busy" 2>/dev/null || true; wait "$busy" 2>/dev/null || true; busy=""; fi; }
trap stop_busy EXIT

# tokens/s of one bench run with setting $1 (every OpenMP variable unset first)
run() {
  local set=$1 out
  local envs=(-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS -u OMP_PROC_BIND -u OMP_PLACES
              -u GOMP_CPU_AFFINITY -u OMP_DYNAMIC)
  [ "$set" != none ] && envs+=("$set")
  out=$(env "${envs[@]}" "$bin" bench --steps "$steps" "${model[@]}")
  echo "$out" | gt_bench_tokens
}

# repetitions outside, settings inside: a slow minute of the machine hits
# every setting alike
sets=($settings)
declare -A qs bs
for ((r = 0; r < reps; r++)); do
  for set in "${sets[@]}"; do
    qs[$set]+=" $(run "$set")"
    sh -c 'while :; do :; done' &
    busy=$!
    bs[$set]+=" $(run "$set")"
    stop_busy
  done
done
for set in "${sets[@]}"; do
  q=$(echo "${qs[$set]}" | gt_median); b=$(echo "${bs[$set]}" | gt_median)
  label=$set; [ "$set" = none ] && label="no OpenMP variable set"
  awk -v s="$label" -v q="$q" -v b="$b" -v qs="${qs[$set]}" -v bs="${bs[$set]}" -v reps="$reps" 'BEGIN {
    printf "shared: %s: quiet %.1f tokens/s, one core busy %.1f tokens/s, ratio %.1f%%", s, q, b, 100 * b / q
    if (reps > 1) printf " (runs: quiet%s; busy%s)", qs, bs
    printf "\n" }'
done
