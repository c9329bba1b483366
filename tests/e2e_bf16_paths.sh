#!/usr/bin/env bash
# dtype=bfloat16 on each of the bf16 GEMM's AVX-512 paths, forced with the
# test switch GT_TEST_BF16_PATH (kernels/bf16_path.h, docs/testing.md):
# vdpbf16ps ("pairs"; its float32-FMA emulation where the CPU lacks it) and
# the widened float32 FMAs ("widened"), and AMX-BF16 tiles ("amx") where
# the CPU has them and the OS allows them. Each path: the run's header names
# it, two runs give the same losses and eval loss bit for bit, and the eval
# loss after 12 steps of the tiny model is within 2% of float32's (the
# level e2e_bf16 holds the tiny model's bf16 losses to; docs/precision.md).
# The two paths differ in the last bits of their products, so their losses
# are compared with each other within the same 2%, not for equality; the
# pairs path on its emulation (GEMTRAIN_NO_AVX512BF16=1) gives vdpbf16ps's
# losses exactly.
# With AVX2 and no AVX-512 there are two: the AVX2 copy's widened path (what
# runs unforced) and the rounded copies; with neither, the copies only.
# Usage: e2e_bf16_paths.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_bf16p.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
fail() { echo "FAIL: $*"; exit 1; }
common=(model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" learning_rate=0.01
        eval_interval=0 eval_steps=2 sample_tokens=0 "base_output_directory=$work/runs" threads_per_device=2
        per_device_batch_size=4 steps=12)
# "loss eval_loss" lines of a run
losses() { python3 - "$work/runs/$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "loss" in m: print("loss", repr(m["loss"]))
    if "eval_loss" in m: print("eval", repr(m["eval_loss"]))
PY
}
evl() { losses "$1" | awk '$1 == "eval" { v = $2 } END { print v }'; }
rel() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.4g", d }'; }

"$bin" train "${common[@]}" dtype=float32 run_name=f32 > "$work/f32.log"
f32=$(evl f32)
[ -n "$f32" ] || fail "no eval loss in the float32 run"
paths=(pairs widened)
if ! grep -q avx512f /proc/cpuinfo; then
  if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    paths=(widened copies); echo "no AVX-512: the AVX2 copy's widened path and the rounded copies"
  else
    paths=(copies); echo "neither AVX-512 nor AVX2: the copies path only"
  fi
fi
# AMX tiles where the CPU lists them and the process may use them (a forced
# path the CPU or the OS does not allow gives way to the choice: the header
# then names no test switch)
if grep -q amx_bf16 /proc/cpuinfo; then
  GT_TEST_BF16_PATH=amx "$bin" train "${common[@]}" steps=1 dtype=bfloat16 run_name=amxprobe > "$work/amxprobe.log"
  if grep -q "^bf16 products: AMX-BF16 tiles (forced" "$work/amxprobe.log"; then paths+=(amx)
  else echo "AMX-BF16 listed but not usable here: $(grep '^bf16' "$work/amxprobe.log")"; fi
fi
declare -A ev
for p in "${paths[@]}"; do
  for r in 1 2; do
    GT_TEST_BF16_PATH=$p "$bin" train "${common[@]}" dtype=bfloat16 run_name="$p$r" > "$work/$p$r.log"
  done
  grep -q "^bf16 products: .*(forced by a test switch" "$work/${p}1.log" || fail "$p: no forced path in the header: $(grep '^bf16' "$work/${p}1.log")"
  diff <(losses "${p}1") <(losses "${p}2") > /dev/null || fail "$p: two runs differ"
  ev[$p]=$(evl "${p}1")
  r=$(rel "${ev[$p]}" "$f32")
  echo "$p: eval loss ${ev[$p]} against float32 $f32: relative difference $r ($(grep '^bf16 products' "$work/${p}1.log"))"
  awk -v r="$r" 'BEGIN { exit !(r < 0.02) }' || fail "$p: eval loss ${ev[$p]} is $r from float32's $f32"
done
if [ -n "${ev[amx]:-}" ]; then
  r=$(rel "${ev[amx]}" "${ev[pairs]}")
  echo "amx vs pairs: eval loss relative difference $r"
  awk -v r="$r" 'BEGIN { exit !(r < 0.02) }' || fail "amx and pairs eval losses differ by $r"
fi
if [ -n "${ev[pairs]:-}" ]; then
  r=$(rel "${ev[widened]}" "${ev[pairs]}")
  echo "widened vs pairs: eval loss relative difference $r"
  awk -v r="$r" 'BEGIN { exit !(r < 0.02) }' || fail "widened and pairs eval losses differ by $r"
  diff <(losses pairs1) <(losses widened1) > /dev/null && fail "pairs and widened gave the same bits: the switch did nothing"
  # with vdpbf16ps turned off the pairs path runs on its float32-FMA
  # emulation, bit-identical to vdpbf16ps (kernels/gemm_bf16.c): the same losses
  if grep -q avx512_bf16 /proc/cpuinfo; then
    GEMTRAIN_NO_AVX512BF16=1 GT_TEST_BF16_PATH=pairs "$bin" train "${common[@]}" dtype=bfloat16 run_name=emul > "$work/emul.log"
    grep -q "^bf16 products: vdpbf16ps's arithmetic emulated" "$work/emul.log" || fail "emulation: $(grep '^bf16' "$work/emul.log")"
    diff <(losses pairs1) <(losses emul) > /dev/null || fail "the emulated pairs path's losses differ from vdpbf16ps's"
    echo "pairs on the emulation: the same losses as on vdpbf16ps"
  fi
fi
if [ -n "${ev[copies]:-}" ] && [ -n "${ev[widened]:-}" ]; then
  r=$(rel "${ev[copies]}" "${ev[widened]}")
  echo "copies vs widened: eval loss relative difference $r"
  awk -v r="$r" 'BEGIN { exit !(r < 0.02) }' || fail "copies and widened eval losses differ by $r"
fi
echo "e2e_bf16_paths: ok"
