#!/usr/bin/env bash
# End-to-end: gemtrain plan makes a plan fit. gemma3-1b at 4 x 2048 tokens
# on a 23 GiB limit does not fit (exit 3); the plan prints the fastest
# setting that fits as a train command, --json carries fits, limit_bytes and
# the same suggestion, --fit searches a plan that fits too (exit 0), and
# gemma3-4b's state alone is over 24 GiB. Each suggested command (23 GiB,
# and --fit on 24 GiB) runs one step of train with gemma3-tiny at 256
# tokens in its place (a 1b step takes minutes). memory_limit_bytes reads sizes; a bad one is refused (exit 2).
# plan with an HF directory in load_parameters_path plans the model there,
# the peak train plans for it, and refuses a conflicting key as train does.
# Usage: e2e_plan_fit.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_plan_fit.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
status() { set +e; "$@" > "$work/out.txt" 2> "$work/err.txt"; echo $? > "$work/rc"; set -e; cat "$work/rc"; }

b1=(model_name=gemma3-1b per_device_batch_size=4 max_target_length=2048 dataset_type=synthetic)

# 1. over the limit: exit 3, the plan, and how to fit
rc=$(status "$bin" plan "${b1[@]}" memory_limit_bytes=23GiB)
[ "$rc" = 3 ] || fail "a plan over the limit exited $rc, expected 3: $(cat "$work/err.txt")"
cp "$work/out.txt" "$work/plan.txt"
grep -q 'memory limit: 23552.0 MiB (memory_limit_bytes): DOES NOT FIT' "$work/plan.txt" || fail "no DOES NOT FIT line"
grep -q '^making it fit' "$work/plan.txt" || fail "no fit search after a plan that does not fit"
grep -q '^  fastest that fits: ' "$work/plan.txt" || fail "no suggestion: $(tail -3 "$work/plan.txt")"
cmd=$(grep -A1 '^  run:$' "$work/plan.txt" | tail -1 | sed 's/^ *//')
case "$cmd" in "gemtrain train model_name=gemma3-1b per_device_batch_size="*) ;; *) fail "run line: $cmd" ;; esac
read -r -a words <<< "$cmd"

# the suggestion plans within the limit: the command's keys, planned again
rc=$(status "$bin" plan "${words[@]:2}")
[ "$rc" = 0 ] || fail "the suggested command's plan exited $rc: $(grep 'memory limit' "$work/out.txt")"
grep -q 'memory limit: 23552.0 MiB (memory_limit_bytes): fits' "$work/out.txt" || fail "the suggestion does not fit"
! grep -q '^making it fit' "$work/out.txt" || fail "a plan that fits searched without --fit"

# 2. --json: fits, limit_bytes, the same suggestion
rc=$(status "$bin" plan --json "${b1[@]}" memory_limit_bytes=23GiB)
[ "$rc" = 3 ] || fail "plan --json over the limit exited $rc"
python3 - "$work/out.txt" "$cmd" <<'PY' || fail "plan --json fields"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"] is False, d["fits"]
assert d["limit_bytes"] == 23 * 2**30, d["limit_bytes"]
assert d["need_bytes"] > d["limit_bytes"]
g = d["suggestion"]
assert g["command"] == sys.argv[2], (g["command"], sys.argv[2])
assert g["need_bytes"] <= d["limit_bytes"] and g["estimated_tflops_per_step"] > 0
for k, v in g["settings"].items():
    assert f"{k}={v}" in sys.argv[2].split(), (k, v)
assert d["fit_search"]["found"] is True and d["fit_search"]["settings_planned"] >= 1
PY
# a plan that fits: exit 0, fits true, no suggestion unless --fit
rc=$(status "$bin" plan --json model_name=gemma3-tiny dataset_type=synthetic memory_limit_bytes=1GiB)
[ "$rc" = 0 ] || fail "a plan that fits exited $rc"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['fits'] is True and d['suggestion'] is None and 'fit_search' not in d, d" \
  "$work/out.txt" || fail "plan --json of a plan that fits"
# --fit searches a plan that fits: gemma3-1b fits 24 GiB with full remat, but no recomputation is faster
rc=$(status "$bin" plan --fit "${b1[@]}" memory_limit_bytes=24GiB)
[ "$rc" = 0 ] || fail "plan --fit of a plan that fits exited $rc"
grep -q 'memory limit: 24576.0 MiB (memory_limit_bytes): fits' "$work/out.txt" || fail "1b at 24 GiB should fit"
grep -q '^  fastest that fits: .*remat_policy=none' "$work/out.txt" || fail "--fit: $(grep -A1 fastest "$work/out.txt")"
cmd24=$(grep -A1 '^  run:$' "$work/out.txt" | tail -1 | sed 's/^ *//')
[ "$cmd24" != "$cmd" ] || fail "24 GiB and 23 GiB suggest the same: the runs below test one command"

# 3. nothing fits: what alone is over the limit
rc=$(status "$bin" plan model_name=gemma3-4b per_device_batch_size=1 max_target_length=2048 dataset_type=synthetic \
  memory_limit_bytes=24GiB)
[ "$rc" = 3 ] || fail "4b at 24 GiB exited $rc"
grep -q 'nothing searched fits: parameters, gradients and AdamW moments alone are 50.6 GiB (with mu_dtype=bfloat16), over the limit of 24.0 GiB' \
  "$work/out.txt" || fail "4b: $(grep nothing "$work/out.txt")"

# 4. sizes: 24GiB is 25769803776 bytes; a unit it does not know is refused
"$bin" plan --json model_name=gemma3-tiny dataset_type=synthetic memory_limit_bytes=24GiB > "$work/a.json"
"$bin" plan --json model_name=gemma3-tiny dataset_type=synthetic memory_limit_bytes=25769803776 > "$work/b.json"
cmp -s "$work/a.json" "$work/b.json" || fail "24GiB and 25769803776 plan differently"
grep -q '"limit_bytes":[[:space:]]*25769803776' "$work/a.json" || fail "limit_bytes of 24GiB"
rc=$(status "$bin" plan model_name=gemma3-tiny memory_limit_bytes=24XB)
[ "$rc" = 2 ] || fail "memory_limit_bytes=24XB exited $rc, expected 2"
grep -q "key 'memory_limit_bytes' expects a size" "$work/err.txt" || fail "bad size: $(cat "$work/err.txt")"

# 5. the suggested commands are train's: one step of each, the model and
#    length swapped for gemma3-tiny at 256 tokens, the rest as printed
for c in "$cmd" "$cmd24"; do
  read -r -a words <<< "$c"
  run=()
  for w in "${words[@]:2}"; do
    case "$w" in
      model_name=*) run+=(model_name=gemma3-tiny) ;;
      max_target_length=*) run+=(max_target_length=256) ;;
      *) run+=("$w") ;;
    esac
  done
  rm -rf "$work/runs/fit"
  "$bin" train "${run[@]}" steps=1 sample_tokens=0 eval_interval=-1 enable_checkpointing=false \
    "base_output_directory=$work/runs" run_name=fit > "$work/train.txt" 2>&1 \
    || fail "train refused '$c': $(tail -3 "$work/train.txt")"
  grep -q '^peak memory: ' "$work/train.txt" || fail "the suggested run did not finish a step"
  python3 - "$work/runs/fit/config.json" "${words[@]:2}" <<'PY' || fail "the run's config lacks the keys of '$c'"
import json, sys
c = json.load(open(sys.argv[1]))
for w in sys.argv[2:]:
    k, v = w.split("=", 1)
    if k in ("model_name", "max_target_length", "memory_limit_bytes", "dataset_type"):
        continue
    got = c[k]
    assert str(got) == v or (isinstance(got, (int, float)) and float(got) == float(v)), (k, got, v)
PY
done

# 6. an HF directory: the model there, as train plans it
"$bin" convert to_hf init "$work/hf" model_name=gemma3-tiny base_num_decoder_layers=3 layer_pattern=LLG \
  init_weights_seed=7 > /dev/null
"$bin" plan "load_parameters_path=$work/hf" dataset_type=synthetic > "$work/hfplan.txt"
grep -q '^memory plan: hf:hf, ' "$work/hfplan.txt" || fail "HF plan: $(head -1 "$work/hfplan.txt")"
grep -q 'parameters: 128160 ' "$work/hfplan.txt" || fail "HF plan parameters: $(sed -n 2p "$work/hfplan.txt")"
peak=$(sed -n 's/^  peak: \([0-9.]*\) MiB.*/\1/p' "$work/hfplan.txt")
"$bin" train "load_parameters_path=$work/hf" dataset_type=synthetic steps=1 sample_tokens=0 eval_interval=-1 \
  enable_checkpointing=false "base_output_directory=$work/runs" run_name=hf > "$work/hftrain.txt"
grep -q "planned peak $peak MiB" "$work/hftrain.txt" || fail "plan says $peak MiB, train: $(grep -o 'planned peak [0-9.]* MiB' "$work/hftrain.txt")"
"$bin" plan dataset_type=synthetic > "$work/preset.txt"
! grep -q "^  peak: $peak MiB" "$work/preset.txt" || fail "the preset plans the same peak: the check cannot tell"
rc=$(status "$bin" plan "load_parameters_path=$work/hf" base_num_decoder_layers=4)
[ "$rc" = 2 ] || fail "a key conflicting with the HF directory exited $rc, expected 2"
grep -q "key 'base_num_decoder_layers' = 4 is set explicitly, but the Hugging Face directory" "$work/err.txt" \
  || fail "conflict: $(cat "$work/err.txt")"
echo "e2e_plan_fit: 1 passed, 0 failed"
