#!/usr/bin/env bash
# What each change bought: builds gemtrain at several commits (each in a
# temporary git worktree, Release) and times the same `gemtrain bench` with
# each binary, the binaries alternating round after round so that a
# neighbour's load falls on all of them alike; prints the median tokens/s of
# each and its ratio to the first.
# Usage: tools/bench_history.sh [-r ROUNDS] [-s STEPS] REV [REV ...] -- key=value ... [-- key=value ...]
#   e.g. tools/bench_history.sh 51979bf 5cf64d1 HEAD -- model_name=gemma3-small
# Each key set after a `--` is one benchmark, run with every binary.
# gemtrain runs with no OpenMP variable set, as a user runs it (older,
# OpenMP-threaded revisions then run with libgomp's default spin).
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
rounds=3 steps=5
while getopts "r:s:" o; do case $o in r) rounds=$OPTARG ;; s) steps=$OPTARG ;; *) exit 2 ;; esac; done
shift $((OPTIND - 1))
revs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do revs+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#revs[@]} -gt 0 ] || { echo "usage: $0 [-r ROUNDS] [-s STEPS] REV [REV ...] -- key=value ..." >&2; exit 2; }
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/gt_bench_history.XXXXXX)
cleanup() {
  for i in "${!revs[@]}"; do git -C "$repo" worktree remove --force "$work/src$i" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for v in OMP_WAIT_POLICY GOMP_SPINCOUNT GEMTRAIN_WAIT_REEXEC OMP_NUM_THREADS; do unset "$v"; done
bins=()
for i in "${!revs[@]}"; do
  git -C "$repo" worktree add -q --detach "$work/src$i" "${revs[$i]}"
  # the tokenizer data is not in git; the bench does not need it
  cmake -S "$work/src$i" -B "$work/build$i" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/build$i" -j2 --target gemtrain_cli >/dev/null
  bins+=("$work/build$i/gemtrain")
  echo "rev $i: ${revs[$i]} = $(git -C "$repo" log -1 --format='%h %s' "${revs[$i]}" | cut -c1-100)"
done
run_set() { # the key set of one benchmark
  rm -f "$work"/t*
  echo "bench: gemtrain bench --steps $steps $*; $rounds rounds, binaries alternating"
  for r in $(seq 1 "$rounds"); do
    for i in "${!bins[@]}"; do
      t=$("${bins[$i]}" bench --steps "$steps" "$@" 2>&1 | gt_bench_tokens)
      echo "round $r rev $i: $t tokens/s"
      echo "$t" >> "$work/t$i"
    done
  done
  local base=""
  for i in "${!bins[@]}"; do
    med=$(gt_median < "$work/t$i")
    [ -n "$base" ] || base=$med
    awk -v i="$i" -v r="${revs[$i]}" -v m="$med" -v b="$base" 'BEGIN { printf "rev %d (%s): median %.1f tokens/s, %.2fx rev 0\n", i, r, m, m / b }'
  done
}
set_args=()
for a in "$@" --; do
  if [ "$a" = "--" ]; then
    [ ${#set_args[@]} -eq 0 ] || run_set "${set_args[@]}"
    set_args=()
  else
    set_args+=("$a")
  fi
done
