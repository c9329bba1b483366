#!/usr/bin/env bash
# LoRA fine-tuning against full-parameter training, in one run:
#  1. speed: the 12-layer model (d640 F2048 V32768, B4 T512) and gemma3-270m
#     (B4 T512), remat none, each trained for a few steps on synthetic data
#     full-parameter in float32 and with rank-16 adapters on every attention
#     and MLP projection over a frozen base stored as float32, bfloat16, int8
#     and nf4 (lora_weight_qtype); run alternately (full, f32, bf16, int8, nf4,
#     full, ...) and reported as medians, with each one's ratio to the
#     full-parameter step and the int8/nf4 steps' ratio to the bf16 base's;
#  2. memory: `gemtrain plan` of real presets fine-tuned with rank-16 adapters
#     at per_device_batch_size=1 max_target_length=2048 remat_policy=full
#     (planned peak, and the frozen base's share).
# gemtrain runs with no OpenMP variable set, as a user runs it.
#
# Usage: tools/bench_lora.sh [build/gemtrain]
# Environment:
#   GT_LOCK=FILE     take `flock FILE` around each section
#   GT_LORA_STEPS    timed steps per run (default 3; 270m uses 2)
#   GT_LORA_ROUNDS   alternating rounds per model (default 2)
#   GT_LORA_SKIP     sections to leave out: small 270m plan
#   GT_LORA_DTYPE    dtype of every speed run, the full-parameter one
#                    included (default float32; bfloat16: the bf16 path
#                    this CPU chose)
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bin="${1:-build/gemtrain}"
here=$(cd "$(dirname "$0")" && pwd)
steps=${GT_LORA_STEPS:-3}
rounds=${GT_LORA_ROUNDS:-2}
skip=" ${GT_LORA_SKIP:-} "
dtype=${GT_LORA_DTYPE:-float32}
work=$(mktemp -d /tmp/gt_bench_lora.XXXXXX)
trap 'rm -rf "$work"' EXIT
gt_bench_no_omp_env

small=(vocab_size=32768 base_emb_dim=640 base_num_decoder_layers=12 base_num_query_heads=4 base_num_kv_heads=1
       head_dim=128 base_mlp_dim=2048 sliding_window_size=128 query_pre_attn_scalar=128 max_target_length=512
       per_device_batch_size=4 model_name=gemma3-small remat_policy=none)
m270=(model_name=gemma3-270m max_target_length=512 per_device_batch_size=4 remat_policy=none)
lora=(enable_lora=true lora_rank=16)
variants=(full f32 bf16 int8 nf4)
declare -A vkeys=([full]="" [f32]="lora_weight_qtype=float32" [bf16]="lora_weight_qtype=bfloat16"
                  [int8]="lora_weight_qtype=int8" [nf4]="lora_weight_qtype=nf4")

echo "bench_lora: $("$bin" --version), commit $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u)"
gt_bench_cpu

declare -a summary=()
model() {
  local name=$1 st=$2
  shift 2
  local -a keys=("$@")
  section "$name, dtype=$dtype: full-parameter and LoRA r16 over a float32/bf16/int8/nf4 base, $rounds alternating rounds of $st steps"
  lock
  for r in $(seq "$rounds"); do
    for v in "${variants[@]}"; do
      local -a extra=()
      if [ "$v" != full ]; then extra=("${lora[@]}" ${vkeys[$v]}); fi
      "$bin" bench --steps "$st" "${keys[@]}" "${extra[@]}" "dtype=$dtype" > "$work/$v.$r.txt"
      echo "round $r, $v: $(gt_bench_tokens < "$work/$v.$r.txt") tokens/s, $(grep '^peak memory' "$work/$v.$r.txt")"
    done
  done
  unlock
  local -A tok
  for v in "${variants[@]}"; do tok[$v]=$(cat "$work/$v".*.txt | gt_bench_tokens | gt_median); done
  local line="| $name | ${tok[full]}"
  for v in f32 bf16 int8 nf4; do
    line+=" | ${tok[$v]} ($(awk -v a="${tok[full]}" -v b="${tok[$v]}" 'BEGIN { printf "%.2f", b / a }')x)"
  done
  line+=" | $(awk -v a="${tok[bf16]}" -v b="${tok[int8]}" 'BEGIN { printf "%.2f", b / a }')x"
  line+=" | $(awk -v a="${tok[bf16]}" -v b="${tok[nf4]}" 'BEGIN { printf "%.2f", b / a }')x |"
  summary+=("$line")
}
if wants small; then model "12-layer (d640 F2048 V32768 B4 T512)" "$steps" "${small[@]}"; fi
if wants 270m; then model "gemma3-270m (B4 T512)" 2 "${m270[@]}"; fi

if [ ${#summary[@]} -gt 0 ]; then
  section "speed summary, dtype=$dtype (medians, tokens/s; in brackets the ratio to the full-parameter step)"
  echo "| model | full-parameter | LoRA, float32 base | LoRA, bf16 base | LoRA, int8 base | LoRA, nf4 base | int8 / bf16 | nf4 / bf16 |"
  echo "|---|---|---|---|---|---|---|---|"
  for l in "${summary[@]}"; do echo "$l"; done
fi

if wants plan; then
  section "memory plan: rank-16 adapters on every attention and MLP projection, B1 T2048, remat_policy=full"
  echo "| model | base | planned peak GiB | full-parameter float32 GiB |"
  echo "|---|---|---|---|"
  for mq in gemma3-1b:bfloat16 gemma3-4b:bfloat16 gemma4-e4b:int8 gemma3-12b:nf4; do
    m=${mq%%:*} q=${mq##*:}
    common=(model_name="$m" per_device_batch_size=1 max_target_length=2048 remat_policy=full)
    # the plan's own peak (the first "peak_bytes": a suggestion carries its
    # own); plan exits 3 when it does not fit this machine, which is fine here
    peak() { { "$bin" plan --json "$@" || true; } | grep -o '"peak_bytes":[[:space:]]*[0-9]*' | head -1 \
             | grep -o '[0-9]*$' | awk '{ printf "%.1f", $1 / 1073741824 }'; }
    echo "| $m | $q | $(peak "${common[@]}" "${lora[@]}" lora_weight_qtype="$q") | $(peak "${common[@]}") |"
  done
fi
