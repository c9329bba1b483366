#!/usr/bin/env bash
# End-to-end: the real binary trains the tiny Gemma 4 presets (dense with
# K=V globals; small with PLE, KV sharing and double-wide MLPs; MoE with 8
# experts top-2, also expert-parallel over 2 devices) on King
# James text and their loss falls; planned and measured peaks agree; and
# gemtrain plan handles the real e2b preset at 8K tokens without allocating.
# Usage: e2e_gemma4.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_gemma4.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 300000 "$work/kjv.txt" > "$work/corpus.txt"

for run in gemma4-tiny-dense gemma4-tiny-ple gemma4-tiny-moe "gemma4-tiny-moe num_devices=2 ici_expert_parallelism=2 per_device_batch_size=2"; do
  model=${run%% *}
  extra=""; [ "$run" != "$model" ] && extra=${run#* } && model=$model-ep
  # shellcheck disable=SC2086
  "$bin" train model_name=${run%% *} $extra dataset_type=text "dataset_path=$work/corpus.txt" steps=40 learning_rate=0.01 \
    eval_interval=-1 sample_tokens=0 "base_output_directory=$work/runs" run_name=$model > "$work/$model.log" \
    || { cat "$work/$model.log"; fail "$model did not train"; }
  m="$work/runs/$model/metrics.jsonl"
  [ "$(wc -l < "$m")" = 40 ] || fail "$model: metrics.jsonl should have 40 lines"
  # loss falls: the mean of the last 5 steps under 70% of ln V (5.56), the first near ln V
  python3 - "$m" "$model" <<'PY' || fail "$model did not learn"
import json, math, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
lnv = math.log(260)
first, last = losses[0], sum(losses[-5:]) / 5
print("%s: loss %.3f -> %.3f (ln V %.3f)" % (sys.argv[2], first, last, lnv))
assert first > 0.8 * lnv, "first loss %.3f is not near ln V" % first
assert last < 0.7 * lnv, "last losses %.3f are not under 70%% of ln V" % last
assert all(math.isfinite(x) for x in losses)
PY
  case $model in
  gemma4-tiny-moe*)
    # MaxText's step line ends with the lb term; loss = lm_loss + moe_lb_loss
    grep -q '^completed step: 39, .*, perplexity: [0-9.]*, moe_lb_loss: 0\.[0-9]\{6\} (40 of 40 steps, .*)$' "$work/$model.log" \
      || fail "$model: no moe_lb_loss in the step line: $(grep 'completed step: 39' "$work/$model.log")"
    python3 - "$m" <<'PY' || fail "$model: metrics.jsonl lacks a consistent moe_lb_loss"
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    assert 0 < o["moe_lb_loss"] < 1, o
    assert abs(o["loss"] - o["lm_loss"] - o["moe_lb_loss"]) < 1e-6 * o["loss"], o
PY
    ;;
  esac
  line=$(grep '^peak memory:' "$work/$model.log")
  planned=$(echo "$line" | sed 's/peak memory: \([0-9.]*\) MiB planned.*/\1/')
  measured=$(echo "$line" | sed 's/.*planned, \([0-9.]*\) MiB measured.*/\1/')
  [ "$planned" = "$measured" ] || fail "$model: planned $planned vs measured $measured"
done

# the real e2b at 8K tokens: a plan only (it does not fit this machine)
"$bin" plan model_name=gemma4-e2b max_target_length=8192 per_device_batch_size=1 dataset_type=synthetic \
  > "$work/e2b.txt" || [ $? = 3 ] # 3: it does not fit
grep -q 'parameters: 4628569379 (4.629 billion)' "$work/e2b.txt" || fail "e2b parameter count: $(cat "$work/e2b.txt")"
grep -q 'activations over the layers: .*(during backward, layer' "$work/e2b.txt" || fail "e2b: no layer activation line"
# the real 26b (mixture of experts): parameters total and active, TFLOPs
"$bin" plan model_name=gemma4-26b max_target_length=4096 per_device_batch_size=1 dataset_type=synthetic \
  > "$work/26b.txt" || [ $? = 3 ]
grep -q 'parameters: 25233141790 (25.233 billion), active per token: 3822530590 (3.823 billion)' "$work/26b.txt" \
  || fail "26b parameter counts: $(cat "$work/26b.txt")"
grep -q 'Total TFLOPs: 102.558' "$work/26b.txt" || fail "26b TFLOPs: $(grep TFLOPs "$work/26b.txt")"
echo "e2e_gemma4: 1 passed, 0 failed"
