#!/usr/bin/env bash
# End-to-end: what the process holds follows the memory plan. The plan's
# need_bytes (every device's peak plus the host's) is compared with the
# training process's peak resident set (getrusage's ru_maxrss), not with
# the tracker's own count: a float32 copy of the whole model kept at setup,
# or the first step's freed blocks left resident beside the arena, would
# show here and nowhere else. The model is gemma3-tiny with a 262144-word
# vocabulary at d=256 on 2 devices (a 256 MiB embedding: the largest unit,
# gathered, and its gradient; the setup copy of the old initialisation was
# 259 MiB, the step-0 heap's holes 130-390 MiB). The allowance above the
# plan is 64 MiB plus 2% (the binary, its libraries, the data and the
# loader: 12 MiB measured on the 1-device run).
# Usage: e2e_rss.sh <gemtrain binary> <source dir>. Skipped (77) under the
# sanitizers, whose allocator and shadow memory are not the program's.
set -euo pipefail
bin="$1"
[ -z "${GT_TEST_SANITIZED:-}" ] || { echo "e2e_rss: a sanitizer build: skipped"; exit 77; }
work=$(mktemp -d /tmp/gt_e2e_rss.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=(model_name=gemma3-tiny vocab_size=262144 base_emb_dim=256 per_device_batch_size=2 max_target_length=32
       dataset_type=synthetic)
for devices in 2 1; do
  "$bin" plan --json "${model[@]}" num_devices=$devices > "$work/plan$devices.json" || fail "plan ($devices devices)"
  python3 - "$bin" "$work" "$devices" "${model[@]}" <<'PY' || fail "$devices devices: the process held more than the plan"
import json, resource, subprocess, sys
bin, work, devices, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
need = json.load(open("%s/plan%s.json" % (work, devices)))["need_bytes"]
log = open("%s/train%s.log" % (work, devices), "w")
subprocess.run([bin, "train", *model, "num_devices=" + devices, "steps=3", "sample_tokens=0", "eval_interval=-1",
                "enable_checkpointing=false", "base_output_directory=%s/runs" % work, "run_name=r" + devices],
               stdout=log, stderr=subprocess.STDOUT, check=True)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
allow = need + 64 * 2**20 + need // 50
print("%s devices: peak resident %.1f MiB, the plan's need %.1f MiB, allowed %.1f MiB"
      % (devices, rss / 2**20, need / 2**20, allow / 2**20))
sys.exit(rss > allow)
PY
done
echo "e2e_rss: 1 passed, 0 failed"
