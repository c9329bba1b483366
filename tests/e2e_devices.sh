#!/usr/bin/env bash
# End-to-end: `gemtrain train` on 1, 2 and 4 devices with the same global
# batch reports the same losses (1e-5 relative), the same eval loss, and the
# per-device figures of the step line. Usage: e2e_devices.sh <gemtrain> <src>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_devices.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$src/tools/kjv.sh" "$work/kjv.txt" > /dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
for n in 1 2 4; do
  "$bin" train model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" steps=6 eval_interval=3 \
    eval_steps=2 sample_tokens=8 num_devices=$n per_device_batch_size=$((4 / n)) \
    "base_output_directory=$work/runs" run_name=d$n > "$work/d$n.log" || { cat "$work/d$n.log"; fail "$n devices"; }
  grep -q "^devices: $n," "$work/d$n.log" || fail "$n devices: no devices line"
done
python3 - "$work" <<'PY' || fail "losses differ across device counts"
import json, sys
w = sys.argv[1]
runs = {n: [json.loads(l) for l in open(f"{w}/runs/d{n}/metrics.jsonl")] for n in (1, 2, 4)}
for n in (2, 4):
    for a, b in zip(runs[1], runs[n]):
        for k in ("loss", "grad_norm"):
            assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]), (n, a["step"], k, a[k], b[k])
        if "eval_loss" in a:
            assert abs(a["eval_loss"] - b["eval_loss"]) <= 1e-5 * a["eval_loss"], (n, a["eval_loss"], b["eval_loss"])
        assert a["total_weights"] == b["total_weights"]
PY
# tokens/s/device counts one device's share (per_device_batch_size x T)
grep -q '^completed step: 0, .*total_weights: 256,' "$work/d2.log" || fail "global total_weights"
echo "e2e_devices: 1 passed, 0 failed"
