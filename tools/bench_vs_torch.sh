#!/usr/bin/env bash
# Side by side on this machine: gemtrain's training step and the same Gemma 3
# model in PyTorch (tools/bench_torch.py, Debian's python3-torch), 2 threads,
# float32, then the ratio. PyTorch runs with OMP_WAIT_POLICY=PASSIVE (its
# best setting here, see docs/performance.md#figures), once with OpenBLAS as this
# machine picks it and once with OPENBLAS_CORETYPE=SkylakeX (its fastest
# kernel here) so the comparison does not hinge on OpenBLAS's CPU detection.
# gemtrain runs with no threading variable set (its thread teams choose
# their own wait, src/base/team.c), as a user would run it.
# Usage: tools/bench_vs_torch.sh [build/gemtrain] [steps] [key=value ...]
#   The keys replace the default shape (d=512 L8 H8 K2 hd64 F2048 V4096 T512
#   B4 W128) and are passed to gemtrain as they are; the model keys below are
#   translated for bench_torch.py (remat_policy=none is assumed: PyTorch runs
#   without activation checkpointing).
# The last line is for scripts (tools/bench_perf.sh):
#   vs_torch: gemtrain G torch_detected A torch_skylakex B   (tokens/s)
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bin="${1:-build/gemtrain}"; steps="${2:-5}"
shift $(( $# < 2 ? $# : 2 ))
shape=(vocab_size=4096 base_emb_dim=512 base_num_decoder_layers=8 base_num_query_heads=8 base_num_kv_heads=2
       head_dim=64 base_mlp_dim=2048 sliding_window_size=128 query_pre_attn_scalar=64 max_target_length=512
       per_device_batch_size=4 model_name=gemma3-small remat_policy=none threads_per_device=2)
[ $# -gt 0 ] && shape=("$@")
threads=2
targs=(--steps "$steps")
for kv in "${shape[@]}"; do
  k=${kv%%=*}; v=${kv#*=}
  case $k in
    vocab_size) targs+=(--vocab "$v") ;;
    base_emb_dim) targs+=(--d "$v") ;;
    base_num_decoder_layers) targs+=(--layers "$v") ;;
    base_num_query_heads) targs+=(--heads "$v") ;;
    base_num_kv_heads) targs+=(--kv-heads "$v") ;;
    head_dim) targs+=(--head-dim "$v") ;;
    base_mlp_dim) targs+=(--mlp "$v") ;;
    sliding_window_size) targs+=(--window "$v") ;;
    query_pre_attn_scalar) targs+=(--qpas "$v") ;;
    max_target_length) targs+=(--seq "$v") ;;
    per_device_batch_size) targs+=(--batch "$v") ;;
    threads_per_device) threads=$v ;;
  esac
done
targs+=(--threads "$threads")
g=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$bin" bench --steps "$steps" "${shape[@]}")
echo "$g"
gt=$(echo "$g" | gt_bench_tokens)
run_torch() {
  local out
  out=$(env "$@" OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$(dirname "$0")/bench_torch.py" "${targs[@]}" 2>&1) ||
    { echo "$out" | tail -n 3 >&2; echo "(PyTorch failed: is python3-torch installed?)" >&2; return 0; }
  echo "$out" | grep '^median' >&2
  echo "$out" | sed -n 's/^median over [0-9]* steps: step [0-9.]* s -> \([0-9.]*\) tokens.*/\1/p'
}
echo "PyTorch, OpenBLAS as detected (${OPENBLAS_CORETYPE:-unset}):"
t1=$(run_torch OPENBLAS_VERBOSE=0)
echo "PyTorch, OPENBLAS_CORETYPE=SkylakeX:"
t2=$(run_torch OPENBLAS_CORETYPE=SkylakeX)
echo "gemtrain: $gt tokens/s; PyTorch: $t1 (as detected), $t2 (SkylakeX) tokens/s"
awk -v g="$gt" -v a="$t1" -v b="$t2" 'BEGIN { if (a > 0 && b > 0) printf "ratio gemtrain / PyTorch: %.2fx (as detected), %.2fx (SkylakeX)\n", g / a, g / b }'
echo "vs_torch: gemtrain $gt torch_detected $t1 torch_skylakex $t2"
