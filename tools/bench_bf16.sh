#!/usr/bin/env bash
# bfloat16 against float32, in one run:
#  1. `gemtrain bench gemm`: every product of a step (forward X.W^T, backward
#     dY.W and dY^T.X) in float32 and on both bf16 paths (vdpbf16ps and the
#     widened float32 FMAs, kernels/bf16_path.h), each as a share of the
#     FMA peak measured by the same tool;
#  2. the 12-layer model (d640 F2048 V32768, B4 T512) and gemma3-270m (T512),
#     remat none: tokens/s, measured peak memory and the planned saved
#     activations with dtype=float32, dtype=bfloat16 on the path this CPU
#     chose (auto) and dtype=bfloat16 forced to the widened path
#     (GT_TEST_BF16_PATH=widened), run alternately (f32, bf16, bf16w, f32,
#     ...) and reported as medians, then the ratios of this one run.
# gemtrain runs with no OpenMP variable set, as a user runs it.
# About 15 minutes on a 2-core machine.
#
# Usage: tools/bench_bf16.sh [build/gemtrain]
# Environment:
#   GT_LOCK=FILE     take `flock FILE` around each section
#   GT_BF16_STEPS    timed steps per run (default 3; 270m uses 2)
#   GT_BF16_ROUNDS   alternating rounds per model (default 2)
#   GT_BF16_SKIP     sections to leave out: gemm cpu small 270m
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bin="${1:-build/gemtrain}"
here=$(cd "$(dirname "$0")" && pwd)
steps=${GT_BF16_STEPS:-3}
rounds=${GT_BF16_ROUNDS:-2}
skip=" ${GT_BF16_SKIP:-} "
work=$(mktemp -d /tmp/gt_bench_bf16.XXXXXX)
trap 'rm -rf "$work"' EXIT
gt_bench_no_omp_env

small=(vocab_size=32768 base_emb_dim=640 base_num_decoder_layers=12 base_num_query_heads=4 base_num_kv_heads=1
       head_dim=128 base_mlp_dim=2048 sliding_window_size=128 query_pre_attn_scalar=128 max_target_length=512
       per_device_batch_size=4 model_name=gemma3-small remat_policy=none)
m270=(model_name=gemma3-270m max_target_length=512 remat_policy=none)


echo "bench_bf16: $("$bin" --version), commit $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u)"
gt_bench_cpu

if wants gemm; then
  section "gemtrain bench gemm (float32 and bf16)"
  lock
  "$bin" bench gemm
  unlock
fi
# the two bf16 paths against gt_sgemm by thread CPU time: ratios that hold
# on a shared machine too
if wants cpu; then
  section "gemtrain bench gemm bf16-cpu"
  lock
  "$bin" bench gemm bf16-cpu
  unlock
fi

# one model: alternating runs, medians, one summary line
declare -a summary
model() {
  local name=$1 st=$2
  shift 2
  local -a keys=("$@")
  section "$name: float32, bfloat16 (auto path), bfloat16 (widened), $rounds alternating rounds of $st steps"
  lock
  for r in $(seq "$rounds"); do
    for v in float32 bfloat16 bf16w; do
      local dt=$v env=()
      if [ "$v" = bf16w ]; then dt=bfloat16 env=(GT_TEST_BF16_PATH=widened); fi
      env "${env[@]}" "$bin" bench --steps "$st" "${keys[@]}" "dtype=$dt" > "$work/$name.$v.$r.txt"
      echo "round $r, $v: $(gt_bench_tokens < "$work/$name.$v.$r.txt") tokens/s, $(grep '^peak memory' "$work/$name.$v.$r.txt")"
      grep '^bf16 products:' "$work/$name.$v.$r.txt" || true
    done
  done
  local -A tok mem saved
  for v in float32 bfloat16 bf16w; do
    tok[$v]=$(cat "$work/$name.$v".*.txt | gt_bench_tokens | gt_median)
    mem[$v]=$(sed -n 's/^peak memory: \([0-9.]*\) MiB measured.*/\1/p' "$work/$name.$v.1.txt")
  done
  for dt in float32 bfloat16; do
    saved[$dt]=$("$bin" plan --json "${keys[@]}" "dtype=$dt" | grep -o '"saved_activation_bytes":[[:space:]]*[0-9]*' \
                 | grep -o '[0-9]*$' | awk '{ printf "%.1f", $1 / 1048576 }')
  done
  unlock
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
  summary+=("$(printf '| %s | %s | %s | %s | %sx | %sx | %s | %s | %s | %s |' "$name" "${tok[float32]}" "${tok[bfloat16]}" \
    "${tok[bf16w]}" "$(ratio "${tok[float32]}" "${tok[bfloat16]}")" "$(ratio "${tok[float32]}" "${tok[bf16w]}")" \
    "${mem[float32]}" "${mem[bfloat16]}" "${saved[float32]}" "${saved[bfloat16]}")")
}
if wants small; then model "12-layer (d640 F2048 V32768 B4 T512)" "$steps" "${small[@]}"; fi
if wants 270m; then model "gemma3-270m (B8 T512)" 2 "${m270[@]}"; fi

section "summary (medians; peak memory as measured by gemtrain bench; saved activations as planned)"
echo "bf16 path this CPU chose: $(GT_TEST_BF16_PATH= "$bin" bench --steps 1 model_name=gemma3-tiny dataset_type=synthetic dtype=bfloat16 2>/dev/null | sed -n 's/^bf16 products: //p')"
echo "| model | float32 tokens/s | bf16 (auto) tokens/s | bf16 (widened) tokens/s | auto / f32 | widened / f32 | float32 peak MiB | bf16 peak MiB | float32 saved MiB | bf16 saved MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for l in "${summary[@]}"; do echo "$l"; done
