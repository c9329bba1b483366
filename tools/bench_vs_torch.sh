#!/usr/bin/env bash
# Side by side on this machine: gemtrain's training step and the same Gemma 3
# model in PyTorch (tools/bench_torch.py, Debian's python3-torch), 2 threads,
# float32, then the ratio. PyTorch runs with OMP_WAIT_POLICY=PASSIVE (its
# best setting here, see ../shared/spec/cpu.md), once with OpenBLAS as this
# machine picks it and once with OPENBLAS_CORETYPE=SkylakeX (its fastest
# kernel here) so the comparison does not hinge on OpenBLAS's CPU detection.
# Usage: tools/bench_vs_torch.sh [build/gemtrain] [steps]
set -euo pipefail
bin="${1:-build/gemtrain}"; steps="${2:-5}"
shape=(vocab_size=4096 base_emb_dim=512 base_num_decoder_layers=8 base_num_query_heads=8 base_num_kv_heads=2
       head_dim=64 base_mlp_dim=2048 sliding_window_size=128 query_pre_attn_scalar=64 max_target_length=512
       per_device_batch_size=4 model_name=gemma3-small remat_policy=none threads_per_device=2)
targs=(--vocab 4096 --d 512 --layers 8 --heads 8 --kv-heads 2 --head-dim 64 --mlp 2048 --window 128
       --seq 512 --batch 4 --threads 2 --steps "$steps")
g=$("$bin" bench --steps "$steps" "${shape[@]}")
echo "$g"
gt=$(echo "$g" | sed -n 's/^train step (with clipping and AdamW): \([0-9.]*\) tokens\/s.*/\1/p')
run_torch() {
  local out
  out=$(env "$@" OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$(dirname "$0")/bench_torch.py" "${targs[@]}" 2>&1)
  echo "$out" | grep '^median' >&2
  echo "$out" | sed -n 's/^median over [0-9]* steps: step [0-9.]* s -> \([0-9.]*\) tokens.*/\1/p'
}
echo "PyTorch, OpenBLAS as detected (${OPENBLAS_CORETYPE:-unset}):"
t1=$(run_torch OPENBLAS_VERBOSE=0)
echo "PyTorch, OPENBLAS_CORETYPE=SkylakeX:"
t2=$(run_torch OPENBLAS_CORETYPE=SkylakeX)
echo "gemtrain: $gt tokens/s; PyTorch: $t1 (as detected), $t2 (SkylakeX) tokens/s"
awk -v g="$gt" -v a="$t1" -v b="$t2" 'BEGIN { printf "ratio gemtrain / PyTorch: %.2fx (as detected), %.2fx (SkylakeX)\n", g / a, g / b }'
