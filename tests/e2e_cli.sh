#!/usr/bin/env bash
# End-to-end: the command-line conventions main.c applies to every command.
# Each subcommand answers --help (also after key=value, also -h) with exit 0
# and a usage line naming it; options may stand anywhere among key=value
# (plan --json, bench --steps N and --steps=N, sweep --dry-run) and mean what
# they mean in front; a config file may follow key=value, and key=value still
# wins over it; an unknown option is refused with exit 2 wherever it stands,
# by the command's name; convert's usage errors print its help on stderr;
# train --help lists the configuration keys; gemtrain --help lists each
# command once, convert's line naming from_hf, to_hf and to_peft; a
# dump_config=true dump given back as the config file trains. Nothing here
# trains more than one step of gemma3-tiny.
# Usage: e2e_cli.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tiny=(model_name=gemma3-tiny dataset_type=synthetic)

# --- --help: every command and bench mode, in front, after key=value, as -h
for cmd in train plan bench "bench remat" "bench devices" "bench checkpoint" "bench gemm" "bench attention" "bench moe" sweep convert logit-check decode \
  tokenize; do
  # shellcheck disable=SC2086 # "bench remat" is two arguments
  for args in "$cmd --help" "$cmd ${tiny[0]} --help" "$cmd -h ${tiny[1]}"; do
    set +e
    $bin $args > "$work/help.txt" 2> "$work/help.err"
    rc=$?
    set -e
    [ $rc -eq 0 ] || fail "'gemtrain $args' exited $rc: $(cat "$work/help.err")"
    head -n 1 "$work/help.txt" | grep -q "^usage: gemtrain $cmd " || fail "'gemtrain $args' printed: $(head -n 1 "$work/help.txt")"
    [ ! -s "$work/help.err" ] || fail "'gemtrain $args' wrote to stderr: $(cat "$work/help.err")"
  done
done
# the mode word may follow options and keys, as any positional argument
"$bin" bench --steps 2 "${tiny[@]}" remat --help | head -n 1 | grep -q '^usage: gemtrain bench remat ' \
  || fail "bench --steps 2 ... remat --help"
"$bin" help decode | head -n 1 | grep -q '^usage: gemtrain decode ' || fail "gemtrain help decode"

# train --help lists every key, wherever --help stands
"$bin" train steps=3 --help > "$work/train_help.txt"
for key in per_device_batch_size learning_rate remat_policy load_parameters_path max_target_length; do
  grep -q "$key" "$work/train_help.txt" || fail "train --help does not list '$key'"
done
# the other commands that take keys point there
for cmd in plan bench sweep logit-check decode convert; do
  "$bin" "$cmd" --help | grep -q "gemtrain train --help" || fail "$cmd --help does not point to 'gemtrain train --help'"
done

# the top-level usage: each command once, with the way to its help
"$bin" --help > "$work/usage.txt"
grep -q 'gemtrain <command> --help' "$work/usage.txt" || fail "gemtrain --help does not say 'gemtrain <command> --help'"
for cmd in train plan bench sweep convert logit-check decode tokenize; do
  n=$(grep -c "^  $cmd " "$work/usage.txt" || true)
  [ "$n" = 1 ] || fail "gemtrain --help lists '$cmd' $n times"
done
# convert's line names each of its modes (docs/commands.md)
for mode in from_hf to_hf to_peft; do
  grep "^  convert " "$work/usage.txt" | grep -q "($mode)" || fail "gemtrain --help's convert line does not name $mode"
done

# --- options anywhere: the same output as in front
# (a fixed limit: the available RAM changes between the two; 3: it does not fit)
"$bin" plan model_name=gemma3-4b memory_limit_bytes=24GiB --json > "$work/after.json" || [ $? = 3 ]
"$bin" plan --json model_name=gemma3-4b memory_limit_bytes=24GiB > "$work/before.json" || [ $? = 3 ]
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['parameters'] == 3880099328, d['parameters']" \
  "$work/after.json" || fail "plan model_name=gemma3-4b --json did not print the 4b plan as JSON"
cmp -s "$work/after.json" "$work/before.json" || fail "plan --json after key=value prints other JSON than in front"

# an option with a separate value keeps it: one timed step either way
for steps in "--steps 1" "--steps=1"; do
  # shellcheck disable=SC2086
  "$bin" bench "${tiny[@]}" $steps > "$work/bench.txt"
  grep -q 'of 1 steps)' "$work/bench.txt" || fail "bench ... $steps: $(grep forward "$work/bench.txt")"
done
# ... and a missing value is refused, not taken from a neighbour
set +e
"$bin" bench "${tiny[@]}" --steps > "$work/out.txt" 2> "$work/err.txt"
rc=$?
set -e
[ $rc -eq 2 ] || fail "bench ... --steps (no value) exited $rc"
# ... and a value that is no count >= 1 (a key=value after --steps, a word, 0,
# a negative) is refused by name, not read as 1; the same for bench mpi's
# --mib and --reps (the MPI_Allreduce it times holds at most 64)
for args in "bench --steps ${tiny[0]}" "bench --steps abc ${tiny[0]}" "bench --steps 0 ${tiny[0]}" \
  "bench --steps -4 ${tiny[0]}" "bench --steps=2x ${tiny[0]}" "bench checkpoint --steps 0 ${tiny[0]}" \
  "bench mpi --mib 0 ${tiny[0]}" "bench mpi --mib x ${tiny[0]}" "bench mpi --reps 0 ${tiny[0]}" \
  "bench mpi --reps 65 ${tiny[0]}"; do
  set +e
  # shellcheck disable=SC2086
  $bin $args > "$work/out.txt" 2> "$work/err.txt"
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "'gemtrain $args' exited $rc"
  [ ! -s "$work/out.txt" ] || fail "'gemtrain $args' ran: $(head -n 2 "$work/out.txt")"
  case $args in *mpi*|*checkpoint*) read -r _ opt val _ <<< "${args#bench }" ;; *) read -r opt val _ <<< "${args#bench }" ;; esac
  [ "$opt" = "--steps=2x" ] && opt=--steps val=2x
  range="an integer >= 1"
  case $opt in --mib) range="an integer 1 .. 8191" ;; --reps) range="an integer 1 .. 64" ;; esac
  grep -qx -- "gemtrain bench: option '$opt' = '$val'; expected $range" "$work/err.txt" \
    || fail "'gemtrain $args' printed: $(cat "$work/err.txt")"
done
# bench moe's own key=value counts
for arg in reps=abc reps=0 reps=65 threads=0 B=2x; do
  set +e
  "$bin" bench moe "$arg" > "$work/out.txt" 2> "$work/err.txt"
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q "^gemtrain bench moe: .*${arg%%=*}" "$work/err.txt" \
    || fail "'gemtrain bench moe $arg' exited $rc: $(cat "$work/err.txt")"
done

# a config file after key=value: the file is read first, key=value still wins
echo '{"steps": 5, "learning_rate": 0.002}' > "$work/c.json"
"$bin" train dump_config=true steps=7 "$work/c.json" > "$work/dump.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert (d['steps'], d['learning_rate']) == (7, 0.002), d" \
  "$work/dump.json" || fail "train steps=7 c.json: key=value does not win over the file, or the file was not read"

# a dump given back as the config file trains: the dump says dump_config false
"$bin" train "${tiny[@]}" steps=1 eval_interval=-1 sample_tokens=0 enable_checkpointing=false \
  "base_output_directory=$work/runs" run_name=from_dump dump_config=true > "$work/tiny_dump.json"
grep -q '"dump_config":[[:space:]]*false' "$work/tiny_dump.json" || fail "the dump says dump_config true"
"$bin" train "$work/tiny_dump.json" > "$work/from_dump.txt" 2>&1 || fail "train <dump>: $(tail -3 "$work/from_dump.txt")"
! grep -q '"dump_config"' "$work/from_dump.txt" || fail "train <dump> printed the configuration again"
[ "$(wc -l < "$work/runs/from_dump/metrics.jsonl")" -ge 1 ] || fail "train <dump> trained no step"

# sweep: options and the sweep file after key=value
cat > "$work/tiny.json" <<'EOF'
{"base": {"overrides": {"model_name": "gemma3-tiny", "dataset_type": "synthetic"}},
 "grid": {"remat_policy": ["full", "none"]}, "steps": 1}
EOF
(cd "$work" && "$bin" sweep base_output_directory=out tiny.json --dry-run) > "$work/sweep.txt"
grep -q 'dry run' "$work/sweep.txt" || fail "sweep key=value tiny.json --dry-run: $(cat "$work/sweep.txt")"
[ ! -e "$work/out" ] || fail "sweep --dry-run after key=value wrote $work/out"

# --- an unknown option is refused by the command, wherever it stands
for args in "plan --bogus" "plan ${tiny[0]} --bogus" "train ${tiny[0]} --bogus" "bench remat ${tiny[0]} --bogus" \
  "sweep $work/tiny.json --bogus" "decode prompt=x --bogus" "tokenize tokenizer_path=x --bogus" \
  "logit-check ${tiny[0]} --bogus" "convert to_hf a b --bogus"; do
  set +e
  # shellcheck disable=SC2086
  $bin $args > "$work/out.txt" 2> "$work/err.txt"
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "'gemtrain $args' exited $rc"
  grep -q -- "unknown option '--bogus'" "$work/err.txt" || fail "'gemtrain $args' did not name the option: $(cat "$work/err.txt")"
done
# ... and the commands without options of their own name themselves
for cmd in "train" "train ${tiny[0]}" "convert to_hf a b" "convert from_hf a b" "plan" "bench" "decode prompt=x"; do
  for opt in --bogus -b; do
    set +e
    # shellcheck disable=SC2086
    $bin $cmd $opt > "$work/out.txt" 2> "$work/err.txt"
    rc=$?
    set -e
    name=${cmd%% *}
    [ $rc -eq 2 ] || fail "'gemtrain $cmd $opt' exited $rc"
    grep -q -- "^gemtrain $name: unknown option '$opt'" "$work/err.txt" \
      || fail "'gemtrain $cmd $opt' printed: $(cat "$work/err.txt")"
  done
done
# convert's usage errors print its help on stderr
for args in "convert" "convert to_hf a" "convert from_hf a"; do
  set +e
  # shellcheck disable=SC2086
  $bin $args > "$work/out.txt" 2> "$work/err.txt"
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "'gemtrain $args' exited $rc"
  head -n 1 "$work/err.txt" | grep -q '^usage: gemtrain convert ' || fail "'gemtrain $args' printed: $(cat "$work/err.txt")"
  [ ! -s "$work/out.txt" ] || fail "'gemtrain $args' wrote to stdout"
done
echo "e2e_cli: 1 passed, 0 failed"
